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

/// `--log-format text|json` (or `CALVIN_LOG_FORMAT`), flattened into every
/// binary's command line.
#[cfg(feature = "cli")]
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct LogArgs {
    /// How log lines are written (stderr): text, or json (one object per line)
    #[arg(
        long = "log-format",
        global = true,
        value_name = "FORMAT",
        default_value = "text",
        env = "CALVIN_LOG_FORMAT"
    )]
    pub format: LogFormat,
}

#[cfg(feature = "cli")]
pub use tracing::Level;

#[cfg(feature = "cli")]
/// Writes a line a person reads on stderr (a fatal error, a problem in a
/// configuration): as it is in text, or as a log object of `level` in JSON
/// (every line of a JSON log parses).
pub fn say(format: LogFormat, level: tracing::Level, line: &str) {
    match (format, level) {
        (LogFormat::Text, _) => eprintln!("{line}"),
        (LogFormat::Json, tracing::Level::ERROR) => tracing::error!("{line}"),
        (LogFormat::Json, tracing::Level::WARN) => tracing::warn!("{line}"),
        (LogFormat::Json, _) => tracing::info!("{line}"),
    }
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
