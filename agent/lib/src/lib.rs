//! The agent library (package calvin-agent-lib, crate `calvin_agent`): the
//! host side of calvin. It keeps one QUIC connection to
//! an edge, holds the machine's previews (name -> local port), and pipes each
//! stream the edge opens to that port on loopback.
//!
//! - [`Agent`]: the connection (reconnects, re-registers previews) and the
//!   preview operations.
//! - [`transport`]: dialling an edge ([`EdgeAddress`]); with several edges,
//!   or a name with several addresses, which one next
//!   ([`transport::EdgeRing`]): the agent uses one and moves on when it
//!   fails or goes silent.
//! - [`metrics`]: what it counts, for `up --metrics ADDR`.
//! - [`control_api`]: the HTTP+JSON API on a Unix socket that the gateway and
//!   the CLI call; [`control_client`] (from calvin-common) calls it; [`api`]
//!   (calvin-proto's `control`) is its JSON.
//!
//! The library never reaches the edge. The `calvin-agent` command (the
//! calvin-agent package, in `agent/`) can run a dev edge in the same
//! process for `share --dev`, behind its `dev-edge` feature.

pub mod agent;
pub mod control_api;
mod forward;
pub mod inspector;
pub mod metrics;
mod path_probe;
pub mod probe;
pub mod refusals;
pub mod request_log;
mod tap;
pub mod transport;

pub use agent::{Agent, LinkState, PreviewError, PreviewOptions, ProtectChange};
/// The control API's JSON (a wire fact, in proto) and its client (shared
/// with the gateway), where the agent's users have always found them.
pub use calvin_common::control_client;
pub use calvin_proto::control as api;
pub use transport::{EdgeAddress, EdgeTarget};
