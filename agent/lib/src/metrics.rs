//! What the agent counts, for `calvin-agent up --metrics ADDR`: its
//! connection to the edge, the streams the edge opens and the bytes they
//! move, and the local connections that failed.

use std::sync::Arc;
use std::sync::atomic::AtomicI64;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, text};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::Registry;
use tokio::sync::watch;

use crate::agent::LinkState;

/// Why a stream's local connection failed (its refusal to the edge).
#[derive(Debug, Clone, Copy)]
pub enum LocalRefusal {
    /// Nothing listens on the port.
    ConnectionRefused,
    /// The connection failed otherwise (timed out, unreachable).
    ConnectFailed,
    /// The port is not previewed under the name asked for.
    NotPreviewed,
}

impl LocalRefusal {
    const ALL: [LocalRefusal; 3] = [
        Self::ConnectionRefused,
        Self::ConnectFailed,
        Self::NotPreviewed,
    ];

    fn label(self) -> &'static str {
        match self {
            Self::ConnectionRefused => "connection-refused",
            Self::ConnectFailed => "connect-failed",
            Self::NotPreviewed => "not-previewed",
        }
    }
}

const STATES: [&str; 4] = ["connecting", "connected", "refused", "stopped"];

/// The agent's counters; clones share them.
#[derive(Clone)]
pub struct AgentCounts(Arc<Inner>);

struct Inner {
    registry: Registry,
    connects: Counter,
    connection_losses: Counter,
    connect_failures: Counter,
    streams: Counter,
    open_streams: Gauge<i64, AtomicI64>,
    to_local: Counter,
    from_local: Counter,
    /// By [`LocalRefusal::ALL`].
    refused: [Counter; 3],
}

impl AgentCounts {
    /// The counters, and the connection's state read from `link` at each
    /// scrape.
    pub fn new(link: watch::Receiver<LinkState>) -> Self {
        let mut registry = Registry::with_prefix("calvin_agent");
        registry.register_collector(Box::new(StateCollector(link)));
        let counter = |registry: &mut Registry, name: &str, help: &str| {
            let counter = Counter::default();
            registry.register(name, help, counter.clone());
            counter
        };
        let connects = counter(
            &mut registry,
            "connects",
            "Connections to the edge made (welcomed)",
        );
        let connection_losses = counter(
            &mut registry,
            "reconnects",
            "Connections to the edge lost, each followed by reconnecting",
        );
        let connect_failures = counter(
            &mut registry,
            "connect_failures",
            "Attempts to connect to the edge that failed or were refused",
        );
        let streams = counter(
            &mut registry,
            "streams",
            "Streams the edge opened (requests and upgrades)",
        );
        let open_streams = Gauge::<i64, AtomicI64>::default();
        registry.register("open_streams", "Streams open now", open_streams.clone());
        let to_local = counter(
            &mut registry,
            "sent_bytes",
            "Bytes from the edge written to local servers",
        );
        let from_local = counter(
            &mut registry,
            "received_bytes",
            "Bytes read from local servers and sent to the edge",
        );
        let refusals = Family::<[(&'static str, &'static str); 1], Counter>::default();
        let refused =
            LocalRefusal::ALL.map(|r| refusals.get_or_create(&[("reason", r.label())]).clone());
        registry.register(
            "refused_connects",
            "Streams whose local connection failed, by reason",
            refusals,
        );
        Self(Arc::new(Inner {
            registry,
            connects,
            connection_losses,
            connect_failures,
            streams,
            open_streams,
            to_local,
            from_local,
            refused,
        }))
    }
}

/// The connection's state as a gauge per state, 1 for the one it is in.
struct StateCollector(watch::Receiver<LinkState>);

impl std::fmt::Debug for StateCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StateCollector")
    }
}

impl Collector for StateCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let now = match &*self.0.borrow() {
            LinkState::Connecting { .. } => "connecting",
            LinkState::Connected(_) => "connected",
            LinkState::Refused(_) => "refused",
            LinkState::Stopped => "stopped",
        };
        let mut family = encoder.encode_descriptor(
            "connection_state",
            "1 for the state the connection to the edge is in",
            None,
            MetricType::Gauge,
        )?;
        for state in STATES {
            ConstGauge::new(i64::from(state == now))
                .encode(family.encode_family(&[("state", state)])?)?;
        }
        Ok(())
    }
}

impl AgentCounts {
    pub fn connected(&self) {
        self.0.connects.inc();
    }

    pub fn connection_lost(&self) {
        self.0.connection_losses.inc();
    }

    pub fn connect_failed(&self) {
        self.0.connect_failures.inc();
    }

    /// A stream began; the guard counts it open until dropped.
    pub fn stream(&self) -> OpenStream {
        self.0.streams.inc();
        self.0.open_streams.inc();
        OpenStream(self.clone())
    }

    /// Bytes a stream moved: to the local server, and from it.
    pub fn moved(&self, to_local: u64, from_local: u64) {
        self.0.to_local.inc_by(to_local);
        self.0.from_local.inc_by(from_local);
    }

    pub fn refused(&self, why: LocalRefusal) {
        self.0.refused[why as usize].inc();
    }

    /// The exposition (OpenMetrics text).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if let Err(err) = text::encode(&mut out, &self.0.registry) {
            tracing::warn!(%err, "cannot encode the metrics");
        }
        out
    }
}

/// A stream counted open.
pub struct OpenStream(AgentCounts);

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.0.0.open_streams.dec();
    }
}

impl std::fmt::Debug for AgentCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AgentCounts")
    }
}
