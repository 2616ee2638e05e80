//! calvin-agent: the host side of calvin. It keeps one QUIC connection to
//! an edge, holds the machine's previews (name -> local port), and pipes each
//! stream the edge opens to that port on loopback.
//!
//! - [`Agent`]: the connection (reconnects, re-registers previews) and the
//!   preview operations.
//! - [`control_api`]: the HTTP+JSON API on a Unix socket that the gateway and
//!   the CLI call; [`control_client`] calls it; [`api`] is its JSON.
//! - [`cli`]: the `calvin-agent` commands, `share` among them, which can run
//!   a dev edge in the same process.

pub mod agent;
pub mod api;
pub mod cli;
pub mod control_api;
pub mod control_client;
mod forward;
pub mod transport;

pub use agent::{Agent, LinkState, PreviewError};
pub use transport::EdgeAddress;
