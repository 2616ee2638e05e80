//! What the edge counts, served as Prometheus text on the admin listener's
//! `/metrics` (see [`crate::ops::admin`]).
//!
//! The request path only adds to atomics it holds ([`Counts`]): every
//! labelled series it touches is made at start, so a request takes no lock
//! and allocates nothing for its metrics. What the edge knows anyway (agents
//! connected, previews online, the certificate, QUIC paths) is read when
//! `/metrics` is scraped ([`Live`]). No series is per preview name: their
//! number is unbounded.

use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, text};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use crate::counts::Counts;

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

impl Live {
    /// Nothing live (no agent, no certificate, no cluster): for tests of
    /// the counters alone.
    #[cfg(test)]
    pub(crate) fn nothing() -> Self {
        Self {
            agents_connected: Box::new(|| 0),
            previews_online: Box::new(|| 0),
            open_streams: Box::new(|| 0),
            agent_paths: Box::new(|| (Vec::new(), 0)),
            certificate_not_after: Box::new(|| None),
            certificate_attempts: Box::new(|| (0, 0)),
            cluster: None,
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use http::{StatusCode, Version};

    use crate::counts::{HandshakeFailure, refusal_codes};
    use crate::error_page::EdgeError;

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
