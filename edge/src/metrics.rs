//! What the edge counts, served as Prometheus text on the admin listener's
//! `/metrics` (see [`crate::admin`]).
//!
//! The request path only adds to atomics it holds ([`Counts`]): every
//! labelled series it touches is made at start, so a request takes no lock
//! and allocates nothing for its metrics. What the edge knows anyway (agents
//! connected, previews online, the certificate, QUIC paths) is read when
//! `/metrics` is scraped ([`Live`]). No series is per preview name: their
//! number is unbounded.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use http::{StatusCode, Version};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeMetric, MetricEncoder, NoLabelSet, text,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

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
    const ALL: [HandshakeFailure; 8] = [
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
    fn labels(self) -> [(&'static str, &'static str); 2] {
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
fn refusal_codes() -> impl Iterator<Item = &'static str> {
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
    fn took(&self, version: Version, status: StatusCode, took: Duration) {
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
    /// changed; see [`crate::tunnel`]).
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

/// What is read when `/metrics` is scraped.
pub struct Live {
    pub agents_connected: Box<dyn Fn() -> u64 + Send + Sync>,
    pub previews_online: Box<dyn Fn() -> u64 + Send + Sync>,
    /// Requests under way to origins (streams open to agents).
    pub open_streams: Box<dyn Fn() -> u64 + Send + Sync>,
    /// Every agent connection's QUIC path now: (RTT, packets lost so far),
    /// and the packets lost by connections that have ended.
    pub agent_paths: Box<dyn Fn() -> (Vec<Duration>, u64) + Send + Sync>,
    /// The served certificate's end of validity, Unix seconds.
    pub certificate_not_after: Box<dyn Fn() -> Option<i64> + Send + Sync>,
    /// Certificate attempts (ACME orders, or files read again) and failures.
    pub certificate_attempts: Box<dyn Fn() -> (u64, u64) + Send + Sync>,
    /// A cluster edge's view of the cluster; `None` for an edge alone.
    pub cluster: Option<Box<dyn Fn() -> ClusterNow + Send + Sync>>,
}

/// What a cluster edge knows of the cluster now.
#[derive(Debug, Clone, Copy, Default)]
pub struct ClusterNow {
    /// Whether it holds its lease in the store (etcd reached).
    pub store_up: bool,
    /// Other edges it is connected to.
    pub peers: u64,
    /// Previews whose agent another edge holds, reached through it.
    pub previews_elsewhere: u64,
}

impl std::fmt::Debug for Live {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Live")
    }
}

/// The edge's metrics: the counters, and the registry that exposes them.
pub struct Metrics {
    counts: Counts,
    registry: Registry,
}

impl Metrics {
    /// Every series, under `calvin_edge_`: `counts`, and `live` read at
    /// each scrape.
    pub fn new(counts: Counts, live: Live) -> Self {
        let mut registry = Registry::with_prefix("calvin_edge");
        registry.register_collector(Box::new(counts.clone()));
        registry.register_collector(Box::new(live));
        Self { counts, registry }
    }

    pub fn counts(&self) -> &Counts {
        &self.counts
    }

    /// The exposition, in the text format Prometheus scrapes
    /// (OpenMetrics 1.0).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String fails only if a metric's own encoding does.
        if let Err(err) = text::encode(&mut out, &self.registry) {
            tracing::warn!(%err, "cannot encode the metrics");
        }
        out
    }
}

/// The content type of [`Metrics::encode`].
pub use calvin_common::metrics_http::CONTENT_TYPE_OPENMETRICS as CONTENT_TYPE;

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

impl Collector for Live {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let gauge = |encoder: &mut DescriptorEncoder, name: &str, help: &str, value: i64| {
            let metric = ConstGauge::new(value);
            metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
        };
        let count = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        gauge(
            &mut encoder,
            "agents_connected",
            "Agents connected and welcomed",
            count((self.agents_connected)()),
        )?;
        gauge(
            &mut encoder,
            "previews_online",
            "Previews whose agent is connected",
            count((self.previews_online)()),
        )?;
        gauge(
            &mut encoder,
            "open_streams",
            "Requests under way to origins, over every agent",
            count((self.open_streams)()),
        )?;

        if let Some(cluster) = &self.cluster {
            let now = cluster();
            gauge(
                &mut encoder,
                "cluster_store_up",
                "1 while this edge holds its lease in the cluster's store (etcd), else 0: new names cannot be claimed",
                i64::from(now.store_up),
            )?;
            gauge(
                &mut encoder,
                "cluster_peer_connections",
                "Other edges of the cluster this edge is connected to",
                count(now.peers),
            )?;
            gauge(
                &mut encoder,
                "cluster_previews_elsewhere",
                "Previews whose agent another edge holds, served here through it",
                count(now.previews_elsewhere),
            )?;
        }

        let (rtts, lost) = (self.agent_paths)();
        let secs: Vec<f64> = rtts.iter().map(Duration::as_secs_f64).collect();
        let mut rtt = encoder.encode_descriptor(
            "agent_rtt_seconds",
            "QUIC round-trip time of the agents' connections: min, mean and max over those open",
            None,
            MetricType::Gauge,
        )?;
        if !secs.is_empty() {
            let min = secs.iter().copied().fold(f64::INFINITY, f64::min);
            let max = secs.iter().copied().fold(0.0, f64::max);
            let mean = secs.iter().sum::<f64>() / secs.len() as f64;
            for (stat, value) in [("min", min), ("mean", mean), ("max", max)] {
                ConstGauge::new(value).encode(rtt.encode_family(&[("stat", stat)])?)?;
            }
        }
        let lost = ConstCounter::new(lost);
        lost.encode(encoder.encode_descriptor(
            "agent_lost_packets",
            "QUIC packets lost on the agents' connections, open and ended",
            None,
            lost.metric_type(),
        )?)?;
        let dropped = ConstCounter::new(calvin_common::batched_log::dropped());
        dropped.encode(encoder.encode_descriptor(
            "log_dropped_lines",
            "Access log lines dropped because their writer was 4 MiB behind (a slow terminal or disk); requests never wait for the log",
            None,
            dropped.metric_type(),
        )?)?;

        if let Some(not_after) = (self.certificate_not_after)() {
            gauge(
                &mut encoder,
                "certificate_expiry_timestamp_seconds",
                "When the served certificate expires (Unix time)",
                not_after,
            )?;
        }
        let (attempts, failures) = (self.certificate_attempts)();
        for (name, help, value) in [
            (
                "acme_attempts",
                "Certificate attempts: ACME orders (with [tls] files: reads of them again)",
                attempts,
            ),
            (
                "acme_failures",
                "Certificate attempts that failed",
                failures,
            ),
        ] {
            let metric = ConstCounter::new(value);
            metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)?;
        }
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn live() -> Live {
        Live {
            agents_connected: Box::new(|| 2),
            previews_online: Box::new(|| 3),
            open_streams: Box::new(|| 1),
            agent_paths: Box::new(|| {
                (
                    vec![Duration::from_millis(10), Duration::from_millis(30)],
                    7,
                )
            }),
            certificate_not_after: Box::new(|| Some(1_800_000_000)),
            certificate_attempts: Box::new(|| (4, 1)),
            cluster: Some(Box::new(|| ClusterNow {
                store_up: true,
                peers: 2,
                previews_elsewhere: 5,
            })),
        }
    }

    /// The value of the series `line_start` (its name and labels).
    fn value(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    #[test]
    fn counts_and_live_values_are_exposed() {
        let metrics = Metrics::new(Counts::default(), live());
        let counts = metrics.counts();
        // Not counting until started.
        counts.took(Version::HTTP_11, StatusCode::OK, Duration::from_millis(3));
        counts.refused(&EdgeError::NotAPreview);
        counts.start();
        counts.took(Version::HTTP_11, StatusCode::OK, Duration::from_millis(3));
        counts.took(Version::HTTP_11, StatusCode::OK, Duration::from_millis(30));
        counts.took(
            Version::HTTP_2,
            StatusCode::BAD_GATEWAY,
            Duration::from_secs(40),
        );
        counts.took(
            Version::HTTP_11,
            StatusCode::SWITCHING_PROTOCOLS,
            Duration::ZERO,
        );
        counts.moved(100, 2_000);
        counts.moved(0, 5);
        counts.refused(&EdgeError::NotAPreview);
        counts.refused(&EdgeError::Stopping);
        counts.refused(&EdgeError::Stopping);
        counts.handshake_failed(HandshakeFailure::AgentBadToken);
        counts.dns_answered("nxdomain");
        counts.dns_answered("badvers");
        counts.agent_path_changed();
        counts.agent_path_changed();
        let text = metrics.encode();
        let expect = [
            (
                r#"calvin_edge_requests_total{protocol="h1",class="2xx"}"#,
                2.0,
            ),
            (
                r#"calvin_edge_requests_total{protocol="h2",class="5xx"}"#,
                1.0,
            ),
            (
                r#"calvin_edge_requests_total{protocol="h1",class="1xx"}"#,
                1.0,
            ),
            (
                r#"calvin_edge_requests_total{protocol="h2",class="2xx"}"#,
                0.0,
            ),
            ("calvin_edge_request_duration_seconds_count", 4.0),
            ("calvin_edge_request_duration_seconds_sum", 40.033),
            (
                r#"calvin_edge_request_duration_seconds_bucket{le="0.005"}"#,
                2.0,
            ),
            (
                r#"calvin_edge_request_duration_seconds_bucket{le="30.0"}"#,
                3.0,
            ),
            (
                r#"calvin_edge_request_duration_seconds_bucket{le="+Inf"}"#,
                4.0,
            ),
            ("calvin_edge_received_bytes_total", 100.0),
            ("calvin_edge_sent_bytes_total", 2_005.0),
            (r#"calvin_edge_refusals_total{code="not-a-preview"}"#, 1.0),
            (r#"calvin_edge_refusals_total{code="edge-stopping"}"#, 2.0),
            (r#"calvin_edge_refusals_total{code="rate-limited"}"#, 0.0),
            (
                r#"calvin_edge_handshake_failures_total{side="agent",cause="bad-token"}"#,
                1.0,
            ),
            (r#"calvin_edge_dns_queries_total{answer="nxdomain"}"#, 1.0),
            (r#"calvin_edge_dns_queries_total{answer="other"}"#, 1.0),
            ("calvin_edge_agent_path_changes_total", 2.0),
            ("calvin_edge_agents_connected", 2.0),
            ("calvin_edge_previews_online", 3.0),
            ("calvin_edge_open_streams", 1.0),
            (r#"calvin_edge_agent_rtt_seconds{stat="min"}"#, 0.01),
            (r#"calvin_edge_agent_rtt_seconds{stat="mean"}"#, 0.02),
            (r#"calvin_edge_agent_rtt_seconds{stat="max"}"#, 0.03),
            ("calvin_edge_agent_lost_packets_total", 7.0),
            // No line of this test process was dropped.
            ("calvin_edge_log_dropped_lines_total", 0.0),
            ("calvin_edge_certificate_expiry_timestamp_seconds", 1.8e9),
            ("calvin_edge_acme_attempts_total", 4.0),
            ("calvin_edge_acme_failures_total", 1.0),
            ("calvin_edge_cluster_store_up", 1.0),
            ("calvin_edge_cluster_peer_connections", 2.0),
            ("calvin_edge_cluster_previews_elsewhere", 5.0),
        ];
        for (series, want) in expect {
            let got = value(&text, series).unwrap_or_else(|| panic!("no {series} in\n{text}"));
            assert!((got - want).abs() < 1e-9, "{series}: {got}, not {want}");
        }
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn every_refusal_code_and_cause_has_its_series_from_the_start() {
        let text = Metrics::new(Counts::default(), live()).encode();
        for code in refusal_codes() {
            let series = format!(r#"calvin_edge_refusals_total{{code="{code}"}}"#);
            assert_eq!(value(&text, &series), Some(0.0), "{series}");
        }
        for why in HandshakeFailure::ALL {
            let [(_, side), (_, cause)] = why.labels();
            let series =
                format!(r#"calvin_edge_handshake_failures_total{{side="{side}",cause="{cause}"}}"#);
            assert_eq!(value(&text, &series), Some(0.0), "{series}");
        }
    }
}
