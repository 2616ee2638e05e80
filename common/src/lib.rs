//! calvin-common: what calvin's processes share beneath the edge and the
//! agent (DESIGN's "small shared crate"), so that no crate reaches sideways
//! into another for it.
//!
//! - [`unix_socket`]: private Unix sockets (the agent's control socket, the
//!   gateway's send-file socket).
//! - [`control_client`]: the client of the agent's control API; its JSON is
//!   [`calvin_proto::control`].
//!
//! With the `runtime` feature (the edge and the agent):
//! - [`quic`]: the crypto provider, the QUIC transport settings, the
//!   endpoint's packet size and the UDP socket both ends use;
//! - [`tunnel_stream`]: a QUIC bidi stream as one byte stream;
//! - [`process`]: the tokio runtime, the open-files limit, the log and the
//!   shutdown signals.

pub mod control_client;
#[cfg(feature = "runtime")]
pub mod process;
#[cfg(feature = "runtime")]
pub mod quic;
#[cfg(feature = "runtime")]
pub mod tunnel_stream;
pub mod unix_socket;
