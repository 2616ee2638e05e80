//! calvin-common: what calvin's processes share beneath the edge and the
//! agent (DESIGN's "small shared crate"), so that no crate reaches sideways
//! into another for it.
//!
//! - [`unix_socket`]: private Unix sockets (the agent's control socket, the
//!   gateway's send-file socket).
//! - [`control_client`]: the client of the agent's control API; its JSON is
//!   [`calvin_proto::control`].

pub mod control_client;
pub mod unix_socket;
