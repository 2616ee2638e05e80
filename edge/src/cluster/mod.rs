//! Several edges that act as one, on etcd (`[cluster]` in `edge.toml`).
//!
//! - [`store`]: what the edges share in etcd (routes on each edge's lease,
//!   names claimed in transactions, the live edges).
//! - [`mirror`]: each edge follows those keys into its own route table.
//! - [`peer`]: edge-to-edge QUIC with mutual TLS, over which a request
//!   that lands on an edge without the agent reaches the edge that has it.
//!
//! With no `[cluster]`, none of this runs: one edge with its table in
//! memory, as before.

#[cfg(feature = "cluster")]
pub mod acme;
#[cfg(feature = "cluster")]
pub mod mirror;
#[cfg(feature = "cluster")]
pub mod peer;
#[cfg(feature = "cluster")]
pub mod store;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// `[cluster]`.
#[derive(Debug, Clone)]
pub struct ClusterSettings {
    /// etcd's client URLs.
    pub etcd: Vec<String>,
    /// This edge's edge-to-edge QUIC address (UDP).
    pub peer_listen: SocketAddr,
    /// The address other edges dial (`host:port`; the peer certificate
    /// must name the host).
    pub advertise: String,
    pub peer_ca: PathBuf,
    pub peer_cert: PathBuf,
    pub peer_key: PathBuf,
    /// The TTL of this edge's lease: how long its routes outlive it.
    pub lease_ttl: Duration,
    /// This edge's public addresses (`public_ips`): the zone answers every
    /// live edge's.
    pub addresses: Vec<std::net::IpAddr>,
}

/// The lease TTL unless `[cluster] lease_ttl_secs` says otherwise, and its
/// bounds: under 2 s a keep-alive late by a second loses it; past a
/// minute a dead edge's names stay unreachable that long.
pub const DEFAULT_LEASE_TTL_SECS: u64 = 5;
pub const LEASE_TTL_BOUNDS: (u64, u64) = (2, 60);

/// Makes `key` the cluster's share key (see [`store::Store::share_key`]):
/// read (or put) before this returns when etcd answers at once, else
/// tried again every second in the background. Until then this edge makes
/// and checks tokens with its own key (`mine`), which the other edges do
/// not take.
#[cfg(feature = "cluster")]
pub async fn follow_share_key(
    store: std::sync::Arc<store::Store>,
    key: std::sync::Arc<crate::share::ShareKey>,
    mine: [u8; 32],
) {
    match store.share_key(&mine).await {
        Ok(bytes) => key.set(&bytes),
        Err(err) => {
            tracing::warn!(%err, "the cluster's share key cannot be read yet; trying again every second");
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    match store.share_key(&mine).await {
                        Ok(bytes) => {
                            key.set(&bytes);
                            tracing::info!("the cluster's share key is read");
                            return;
                        }
                        Err(err) => tracing::debug!(%err, "the share key still cannot be read"),
                    }
                }
            });
        }
    }
}
