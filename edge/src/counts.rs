//! The counters the request path adds to ([`Counts`]), and their
//! encoding as Prometheus series. Every labelled series is made at start,
//! so a request takes no lock and allocates nothing for its metrics; the
//! admin listener's `/metrics` ([`crate::ops::metrics`]) reads them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use http::{StatusCode, Version};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;

use crate::error_page::EdgeError;

/// The request duration histogram's bucket bounds, in seconds (time from a
/// request's arrival to its response head).
const DURATION_BOUNDS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

const PROTOCOLS: [&str; 3] = ["h1", "h2", "h3"];
const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// Why a connection's handshake failed, visitors' and agents'.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandshakeFailure {
    /// A visitor's TLS handshake failed (no shared protocol or cipher, an
    /// unknown server name, a broken record).
    TlsError,
    /// A visitor did not finish its TLS handshake in time.
    TlsTimeout,
    /// A QUIC handshake failed: an agent's, or an HTTP/3 visitor's (which
    /// of them is not known before the handshake ends).
    QuicError,
    /// An agent did not finish its QUIC handshake, or send its hello, in
    /// time.
    AgentTimeout,
    /// An agent's first message was not a hello.
    AgentProtocol,
    /// An agent's token is unknown.
    AgentBadToken,
    /// An agent speaks another protocol version.
    AgentVersion,
    /// An agent's address sent too many unknown tokens.
    AgentGuessing,
}

impl HandshakeFailure {
    pub(crate) const ALL: [HandshakeFailure; 8] = [
        Self::TlsError,
        Self::TlsTimeout,
        Self::QuicError,
        Self::AgentTimeout,
        Self::AgentProtocol,
        Self::AgentBadToken,
        Self::AgentVersion,
        Self::AgentGuessing,
    ];

    /// (side, cause), the labels of its series.
    pub(crate) fn labels(self) -> [(&'static str, &'static str); 2] {
        let (side, cause) = match self {
            Self::TlsError => ("visitor", "tls-error"),
            Self::TlsTimeout => ("visitor", "tls-timeout"),
            Self::QuicError => ("agent", "quic-error"),
            Self::AgentTimeout => ("agent", "timeout"),
            Self::AgentProtocol => ("agent", "no-hello"),
            Self::AgentBadToken => ("agent", "bad-token"),
            Self::AgentVersion => ("agent", "version"),
            Self::AgentGuessing => ("agent", "too-many-attempts"),
        };
        [("side", side), ("cause", cause)]
    }
}

/// The codes of the refusals the HTTP/1 framing gate answers itself
/// ([`crate::h1_framing`]), besides [`EdgeError::CODES`] (which has its
/// `too-many-headers`).
pub const GATE_CODES: [&str; 3] = [
    "bad-request",
    "head-too-large",
    "unsupported-transfer-coding",
];

/// Every refusal's code, the edge's and the framing gate's.
pub(crate) fn refusal_codes() -> impl Iterator<Item = &'static str> {
    EdgeError::CODES.into_iter().chain(GATE_CODES)
}

/// How the zone's DNS answered a query (its response code).
pub const DNS_ANSWERS: [&str; 6] = [
    "noerror", "nxdomain", "refused", "formerr", "notimp", "other",
];

/// The counters the request path adds to. Cloning shares them. They count
/// once [`Counts::start`] is called (the edge does when it binds its admin
/// listener): an edge nobody scrapes pays no atomic operation for them.
#[derive(Clone, Debug, Default)]
pub struct Counts(Arc<CountsInner>);

#[derive(Debug)]
struct CountsInner {
    on: std::sync::atomic::AtomicBool,
    /// By protocol, then status class.
    requests: [[Counter; 5]; 3],
    duration: DurationHistogram,
    /// Body bytes from visitors (and from them through upgraded streams).
    received: Counter,
    /// Body bytes to visitors (and to them through upgraded streams).
    sent: Counter,
    /// By [`refusal_codes`].
    refusals: [Counter; EdgeError::CODES.len() + GATE_CODES.len()],
    handshakes: [Counter; HandshakeFailure::ALL.len()],
    /// By [`DNS_ANSWERS`].
    dns: [Counter; DNS_ANSWERS.len()],
    /// Agents' connections that moved to another path.
    agent_path_changes: Counter,
}

impl Default for CountsInner {
    fn default() -> Self {
        Self {
            on: Default::default(),
            requests: Default::default(),
            duration: DurationHistogram::new(&DURATION_BOUNDS),
            received: Counter::default(),
            sent: Counter::default(),
            refusals: Default::default(),
            handshakes: Default::default(),
            dns: Default::default(),
            agent_path_changes: Counter::default(),
        }
    }
}

impl Counts {
    /// Counting from now on.
    pub fn start(&self) {
        self.0.on.store(true, Ordering::Relaxed);
    }

    fn on(&self) -> Option<&CountsInner> {
        self.0.on.load(Ordering::Relaxed).then_some(&*self.0)
    }

    /// A request answered: its protocol, status, and when it arrived (the
    /// clock is read only when counting).
    pub fn answered(&self, version: Version, status: StatusCode, arrived: std::time::Instant) {
        if self.on().is_some() {
            self.took(version, status, arrived.elapsed());
        }
    }

    /// A request answered after `took`.
    pub(crate) fn took(&self, version: Version, status: StatusCode, took: Duration) {
        let Some(c) = self.on() else { return };
        let protocol = match version {
            Version::HTTP_2 => 1,
            Version::HTTP_3 => 2,
            _ => 0,
        };
        let class = usize::from(status.as_u16() / 100).clamp(1, 5) - 1;
        c.requests[protocol][class].inc();
        c.duration.observe(took);
    }

    /// Body bytes a request moved, each way.
    pub fn moved(&self, received: u64, sent: u64) {
        let Some(c) = self.on() else { return };
        if received > 0 {
            c.received.inc_by(received);
        }
        if sent > 0 {
            c.sent.inc_by(sent);
        }
    }

    /// The edge answered with one of its own errors.
    pub fn refused(&self, error: &EdgeError) {
        self.refused_as(error.code());
    }

    /// The edge refused a request with the error `code` (its
    /// `x-calvin-error`).
    pub fn refused_as(&self, code: &str) {
        let Some(c) = self.on() else { return };
        if let Some(i) = refusal_codes().position(|known| known == code) {
            c.refusals[i].inc();
        }
    }

    pub fn handshake_failed(&self, why: HandshakeFailure) {
        let Some(c) = self.on() else { return };
        if let Some(i) = HandshakeFailure::ALL.iter().position(|h| *h == why) {
            c.handshakes[i].inc();
        }
    }

    /// An agent's connection moved to another path (its address or port
    /// changed; see [`crate::upstream::tunnel`]).
    pub fn agent_path_changed(&self) {
        if let Some(c) = self.on() {
            c.agent_path_changes.inc();
        }
    }

    /// A DNS query answered with `rcode` (its name in [`DNS_ANSWERS`];
    /// anything else counts as "other").
    pub fn dns_answered(&self, rcode: &str) {
        let Some(c) = self.on() else { return };
        let i = DNS_ANSWERS
            .iter()
            .position(|a| *a == rcode)
            .unwrap_or(DNS_ANSWERS.len() - 1);
        c.dns[i].inc();
    }
}

/// A counter family's descriptor, then each labelled counter.
fn counters<'a, const N: usize>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: impl IntoIterator<Item = ([(&'static str, &'static str); N], &'a Counter)>,
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, counter) in series {
        counter.encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

impl Collector for Counts {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let c = &self.0;
        let requests = PROTOCOLS.iter().enumerate().flat_map(|(p, protocol)| {
            CLASSES.iter().enumerate().map(move |(k, class)| {
                (
                    [("protocol", *protocol), ("class", *class)],
                    &c.requests[p][k],
                )
            })
        });
        counters(
            &mut encoder,
            "requests",
            "Requests answered, by protocol (h1, h2) and status class",
            requests,
        )?;
        c.duration.encode(encoder.encode_descriptor(
            "request_duration_seconds",
            "Time from a request's arrival to its response head",
            None,
            MetricType::Histogram,
        )?)?;
        c.received.encode(encoder.encode_descriptor(
            "received_bytes",
            "Body bytes from visitors: request bodies and upgraded streams",
            None,
            MetricType::Counter,
        )?)?;
        c.sent.encode(encoder.encode_descriptor(
            "sent_bytes",
            "Body bytes to visitors: response bodies and upgraded streams",
            None,
            MetricType::Counter,
        )?)?;
        counters(
            &mut encoder,
            "refusals",
            "Requests the edge answered itself with an error, by its x-calvin-error code",
            refusal_codes()
                .zip(&c.refusals)
                .map(|(code, n)| ([("code", code)], n)),
        )?;
        counters(
            &mut encoder,
            "handshake_failures",
            "Connections that failed before their first request (visitors) or before being welcomed (agents), by cause",
            HandshakeFailure::ALL
                .iter()
                .zip(&c.handshakes)
                .map(|(why, n)| (why.labels(), n)),
        )?;
        counters(
            &mut encoder,
            "dns_queries",
            "DNS queries answered, by response code",
            DNS_ANSWERS
                .iter()
                .zip(&c.dns)
                .map(|(answer, n)| ([("answer", *answer)], n)),
        )?;
        c.agent_path_changes.encode(encoder.encode_descriptor(
            "agent_path_changes",
            "Agents' connections that moved to another address or port (QUIC migration: a NAT that rebound, a network change)",
            None,
            MetricType::Counter,
        )?)
    }
}

/// A histogram of durations on atomics: observing takes no lock
/// (prometheus-client's own histogram takes a mutex per observation).
#[derive(Debug)]
pub struct DurationHistogram {
    bounds: &'static [f64],
    /// One per bound, and one past the last (+Inf).
    buckets: Vec<AtomicU64>,
    sum_micros: AtomicU64,
}

impl DurationHistogram {
    pub fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            buckets: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_micros: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, took: Duration) {
        let secs = took.as_secs_f64();
        let bucket = self.bounds.partition_point(|bound| *bound < secs);
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.sum_micros.fetch_add(micros, Ordering::Relaxed);
    }
}

impl EncodeMetric for DurationHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let uppers = self.bounds.iter().copied().chain([f64::INFINITY]);
        let buckets: Vec<(f64, u64)> = uppers
            .zip(&self.buckets)
            .map(|(upper, n)| (upper, n.load(Ordering::Relaxed)))
            .collect();
        let count = buckets.iter().map(|(_, n)| n).sum();
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}
