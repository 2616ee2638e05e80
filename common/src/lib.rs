//! calvin-common: what calvin's processes share beneath the edge and the
//! agent (DESIGN's "small shared crate"), so that no crate reaches sideways
//! into another for it.
//!
//! - [`unix_socket`]: private Unix sockets (the agent's control socket, the
//!   gateway's send-file socket).
//! - [`control_client`]: the client of the agent's control API; its JSON is
//!   [`calvin_proto::control`].
//! - [`config_check`]: a configuration file's every problem, with its key
//!   and line (`check-config` and the checks at start).
//! - [`LogFormat`]: `--log-format text|json`, which every binary takes.
//!
//! With the `runtime` feature (the edge and the agent):
//! - [`quic`]: the crypto provider, the QUIC transport settings, the
//!   endpoint's packet size and the UDP socket both ends use;
//! - [`tunnel_stream`]: a QUIC bidi stream as one byte stream;
//! - [`process`]: the tokio runtime, the open-files limit, the log and the
//!   shutdown signals.

pub mod config_check;
pub mod control_client;
pub mod metrics_http;
#[cfg(feature = "runtime")]
pub mod process;
#[cfg(feature = "runtime")]
pub mod quic;
#[cfg(feature = "runtime")]
pub mod tunnel_stream;
pub mod unix_socket;

/// How log lines are written: for people, or one JSON object per line for
/// a log pipeline (`--log-format text|json`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "text" => Ok(Self::Text),
            "json" => Ok(Self::Json),
            _ => Err(format!("{s:?} is not a log format: text or json")),
        }
    }
}
