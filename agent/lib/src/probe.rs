//! What a new preview's port is found to be when it is made: where the
//! server listens, and the usual reasons a preview "does not work" that are
//! not the tunnel's.

use std::net::SocketAddr;

use calvin_proto::Port;

use crate::api::Warning;
use crate::forward;

/// What the probe found.
#[derive(Debug, Default)]
pub struct Found {
    /// Where the agent reached the server (127.0.0.1, else ::1).
    pub reached: Option<SocketAddr>,
    pub warnings: Vec<Warning>,
}

impl Found {
    pub fn reached(reached: Option<SocketAddr>) -> Self {
        Self {
            reached,
            warnings: Vec::new(),
        }
    }
}

/// Probes `port` as a visitor of `host` (the preview's authority) would
/// reach it.
pub async fn run(port: Port, host: &str) -> Found {
    let _ = host;
    Found::reached(forward::reach(port).await)
}
