//! What an edge needs to start ([`Settings`]) and its caps ([`Limits`]),
//! the errors of starting, what it bound, and the checks made at start.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;
use tracing::warn;

use crate::accounts::AccountError;
use crate::certs::acme::AcmeSettings;
use crate::certs::dns::{ZoneError, ZoneSettings};
use crate::certs::tls::{TlsError, TlsMaterial};

/// Everything an edge needs to start.
pub struct Settings {
    /// The preview zone: previews are `<name>.<domain>`.
    pub domain: String,
    /// The public URL with `{name}`; `None` derives it from the domain and
    /// the HTTPS port really bound.
    pub public_url: Option<String>,
    pub listen: Listen,
    pub certificates: Certificates,
    /// The zone's DNS server; `None`: the zone is served elsewhere.
    pub dns: Option<DnsSettings>,
    /// What the plain HTTP listener does with requests for previews.
    pub plain_http: PlainHttp,
    /// (account, token) pairs.
    pub accounts: Vec<(String, String)>,
    pub limits: Limits,
    /// Keys QUIC stateless resets: kept across restarts, so agents of a
    /// crashed edge learn at once that their connection is gone.
    pub reset_key: [u8; 32],
    /// Makes and checks protected previews' share tokens (see
    /// [`crate::share`]); kept across restarts, so links stay valid. In a
    /// cluster, the cluster's key (in etcd) is used instead.
    pub share_key: [u8; 32],
    /// Where the edge keeps the names it serves and holds (see
    /// [`crate::upstream::name_store`]): started again, it holds them for their
    /// owners, and for a while a request for one served before whose agent
    /// is not back waits for it, then hears "retry shortly". `None`:
    /// nothing kept, nothing expected.
    pub names_file: Option<PathBuf>,
    /// Several edges acting as one; `None`: this edge alone.
    pub cluster: Option<crate::cluster::ClusterSettings>,
}

/// Where the edge's certificate comes from.
pub enum Certificates {
    /// Given once (the dev edge's local CA).
    Fixed(TlsMaterial),
    /// PEM files, read at start and again on [`Edge::renewal`]'s
    /// `renew_now` (SIGHUP).
    Files {
        cert_file: PathBuf,
        key_file: PathBuf,
    },
    /// Ordered and renewed from an ACME CA through DNS-01 challenges the
    /// edge's own DNS answers.
    Acme(AcmeSettings),
}

/// The authoritative DNS listener (UDP and TCP) and its zone.
#[derive(Debug, Clone)]
pub struct DnsSettings {
    pub listen: SocketAddr,
    pub zone: ZoneSettings,
}

/// The plain HTTP listener's answer to a request for a preview.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PlainHttp {
    /// 308 to the preview's HTTPS URL.
    Redirect,
    /// Serve it (a TLS-terminating load balancer in front, benchmarks, dev).
    Serve,
}

/// Where the edge listens. HTTPS and HTTP are optional; QUIC is not.
#[derive(Debug, Clone)]
pub struct Listen {
    pub https: Option<SocketAddr>,
    pub http: Option<SocketAddr>,
    pub quic: SocketAddr,
    pub http3: Http3Settings,
}

/// HTTP/3 for visitors, on the QUIC listener (see [`crate::front::http3`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Http3Settings {
    /// Whether visitors may speak HTTP/3 there (ALPN `h3`).
    pub enabled: bool,
    /// Whether HTTPS responses say so (`Alt-Svc`), on `port` (by default
    /// the QUIC listener's own; another when a NAT or load balancer in
    /// front maps it).
    pub advertise: bool,
    pub port: Option<u16>,
}

impl Default for Http3Settings {
    /// On and advertised, on the QUIC listener's port.
    fn default() -> Self {
        Self {
            enabled: true,
            advertise: true,
            port: None,
        }
    }
}

/// Caps and timeouts, each configurable in `[limits]` of `edge.toml`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// In-flight requests get this long to finish on SIGTERM.
    pub grace_period_secs: u64,
    /// An origin gets this long to send its response head (504 after).
    pub upstream_timeout_secs: u64,
    /// An agent gets this long to answer a new upstream stream; longer
    /// than the QUIC idle timeout (12 s), so a request to an agent that died
    /// silently ends as "offline".
    pub upstream_connect_timeout_secs: u64,
    /// An idle upstream connection is closed after this long.
    pub upstream_idle_timeout_secs: u64,
    /// Idle upstream connections kept per preview and per agent; the
    /// agent's share must stay under the 1,024 streams an agent allows.
    pub upstream_max_idle_per_preview: usize,
    pub upstream_max_idle_per_agent: usize,
    /// A name stays reserved to its account this long after unpreview or
    /// disconnect.
    pub name_lease_secs: u64,
    pub max_previews_per_account: usize,
    /// An agent gets this long from connecting to its hello.
    pub hello_timeout_secs: u64,
    /// A visitor gets this long to send a request's header.
    pub header_read_timeout_secs: u64,
    /// A visitor's request head: bytes (431), header fields (431), and the
    /// target's bytes (414).
    pub max_request_head_bytes: usize,
    pub max_request_headers: usize,
    pub max_uri_bytes: usize,
    /// A request body's bytes (413 past it, while streaming too); 0 for
    /// no cap.
    pub max_request_body_bytes: u64,
    /// Requests per second from one address (an IPv6 /64) and to one
    /// preview, each with bursts of ten seconds' worth (429 past them);
    /// 0 turns one off.
    pub requests_per_second_per_ip: u32,
    pub requests_per_second_per_preview: u32,
    /// A request for a preview whose agent is reconnecting, or whose
    /// server refuses connections (restarting), waits this long for it to
    /// come back before 502 with Retry-After. Only requests that never
    /// reached the origin wait; none is sent twice.
    pub reconnect_wait_secs: u64,
    /// A request body must bring at least this many bytes in every window
    /// of `request_body_rate_window_secs` while it streams (408 and the
    /// stream cut otherwise; a slow POST cannot hold a connection for
    /// ever); 0 turns it off.
    pub min_request_body_bytes: u64,
    pub request_body_rate_window_secs: u64,
    /// Requests under way at once (waiting for or streaming a response)
    /// over all of one account's agents; past it 503 with Retry-After.
    pub max_streams_per_account: usize,
    /// Body bytes per second over all of one account's previews and
    /// agents, both ways (uploads to the origin, responses and upgraded
    /// connections back), in bursts of one second's worth; past it they
    /// wait (shaped, not refused). 0 turns it off.
    pub max_bytes_per_second_per_account: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            grace_period_secs: 30,
            upstream_timeout_secs: 100,
            upstream_connect_timeout_secs: 20,
            upstream_idle_timeout_secs: 60,
            upstream_max_idle_per_preview: 128,
            upstream_max_idle_per_agent: 256,
            name_lease_secs: 7 * 86_400,
            max_previews_per_account: 100,
            hello_timeout_secs: 10,
            header_read_timeout_secs: 30,
            max_request_head_bytes: 64 << 10,
            max_request_headers: 100,
            max_uri_bytes: 8 << 10,
            max_request_body_bytes: 0,
            requests_per_second_per_ip: 100,
            requests_per_second_per_preview: 1000,
            reconnect_wait_secs: 5,
            min_request_body_bytes: 10 << 10,
            request_body_rate_window_secs: 10,
            max_streams_per_account: 1000,
            max_bytes_per_second_per_account: 0,
        }
    }
}

/// Which listener a bind error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenerKind {
    Https,
    Http,
    Quic,
    Dns,
    /// Edge to edge (`[cluster] peer_listen`).
    Peer,
}

impl fmt::Display for ListenerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ListenerKind::Https => "HTTPS",
            ListenerKind::Http => "HTTP",
            ListenerKind::Quic => "QUIC",
            ListenerKind::Dns => "DNS",
            ListenerKind::Peer => "the cluster's edges (QUIC)",
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot listen for {kind} on {addr}/{}: {source}", match .kind { ListenerKind::Quic | ListenerKind::Peer => "udp", ListenerKind::Dns => "udp+tcp", _ => "tcp" })]
    Bind {
        kind: ListenerKind,
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error(transparent)]
    Accounts(#[from] AccountError),
    #[error("the domain {0:?} is not a DNS name")]
    Domain(String),
    #[error("[limits] {0}")]
    Limits(String),
    #[error(transparent)]
    Zone(#[from] ZoneError),
    #[error(
        "ACME certificates need the edge's own DNS: set [listen] dns and public_ips, and delegate the zone to the edge"
    )]
    AcmeWithoutDns,
    #[error("[cluster] {0}")]
    Cluster(String),
}

/// The addresses an edge really bound.
#[derive(Debug, Clone)]
pub struct Bound {
    pub https: Option<SocketAddr>,
    pub http: Option<SocketAddr>,
    pub quic: SocketAddr,
    pub dns: Option<SocketAddr>,
    /// The admin listener, once [`crate::Edge::bind_admin`] bound it.
    pub admin: Option<SocketAddr>,
    /// The edge-to-edge listener, in a cluster.
    pub peer: Option<SocketAddr>,
    pub url_template: String,
}

/// The smallest request head limit: hyper's HTTP/1.1 read buffer takes no
/// less.
const MIN_HEAD_BYTES: usize = 8192;

/// Every duration of [`Limits`], in seconds, with the range it must be in:
/// an absurd value would overflow `Instant + Duration` (a panic), and a
/// zero would turn some waits into busy loops.
pub const DURATION_BOUNDS: &[Bounded] = &[
    ("grace_period_secs", |l| l.grace_period_secs, 0, 3600),
    (
        "upstream_timeout_secs",
        |l| l.upstream_timeout_secs,
        1,
        86_400,
    ),
    (
        "upstream_connect_timeout_secs",
        |l| l.upstream_connect_timeout_secs,
        1,
        3600,
    ),
    (
        "upstream_idle_timeout_secs",
        |l| l.upstream_idle_timeout_secs,
        1,
        86_400,
    ),
    ("name_lease_secs", |l| l.name_lease_secs, 0, 366 * 86_400),
    ("hello_timeout_secs", |l| l.hello_timeout_secs, 1, 300),
    (
        "header_read_timeout_secs",
        |l| l.header_read_timeout_secs,
        1,
        3600,
    ),
    ("reconnect_wait_secs", |l| l.reconnect_wait_secs, 0, 300),
    (
        "request_body_rate_window_secs",
        |l| l.request_body_rate_window_secs,
        1,
        3600,
    ),
];

pub(crate) use calvin_common::config_check::out_of_range;

/// A duration's key in `[limits]`, its value, and its least and most.
pub type Bounded = (&'static str, fn(&Limits) -> u64, u64, u64);

impl Limits {
    /// Every value that would break the edge: the key in `[limits]` and
    /// what is wrong with it.
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut problems = Vec::new();
        for &(key, value_of, min, max) in DURATION_BOUNDS {
            if let Some(problem) = out_of_range(key, value_of(self), min, max) {
                problems.push((key, problem));
            }
        }
        let streams = calvin_proto::MAX_DATA_STREAMS as usize;
        if self.upstream_max_idle_per_agent >= streams {
            problems.push((
                "upstream_max_idle_per_agent",
                format!(
                    "upstream_max_idle_per_agent must be under the {streams} streams an agent allows, \
                     or idle connections could take every one; got {}",
                    self.upstream_max_idle_per_agent
                ),
            ));
        }
        if self.max_request_head_bytes < MIN_HEAD_BYTES {
            problems.push((
                "max_request_head_bytes",
                format!(
                    "max_request_head_bytes must be at least {MIN_HEAD_BYTES} (HTTP/1.1's read buffer); got {}",
                    self.max_request_head_bytes
                ),
            ));
        }
        if self.max_request_headers == 0 {
            problems.push((
                "max_request_headers",
                "max_request_headers must be at least 1 (the Host header)".into(),
            ));
        }
        if self.max_uri_bytes == 0 {
            problems.push((
                "max_uri_bytes",
                "max_uri_bytes must be at least 1 (the path \"/\")".into(),
            ));
        }
        problems
    }
}

/// Refuses limits that would break the edge, and warns of those that only
/// make its answers less precise.
pub(crate) fn check_limits(limits: &Limits) -> Result<(), StartError> {
    if let Some((_, problem)) = limits.problems().into_iter().next() {
        return Err(StartError::Limits(problem));
    }
    let idle = calvin_proto::IDLE_TIMEOUT.as_secs();
    if limits.upstream_connect_timeout_secs <= idle {
        warn!(
            "upstream_connect_timeout_secs ({}) is not above the {idle} s QUIC idle timeout: \
             a request to an agent that died silently may read as a timeout, not as offline",
            limits.upstream_connect_timeout_secs
        );
    }
    if limits.upstream_timeout_secs < limits.upstream_connect_timeout_secs {
        warn!(
            "upstream_timeout_secs ({}) is below upstream_connect_timeout_secs ({}): for a request \
             without a body it also bounds the connection to the agent",
            limits.upstream_timeout_secs, limits.upstream_connect_timeout_secs
        );
    }
    Ok(())
}

/// `https://{name}.<domain>`, with the port unless it is 443.
pub(crate) fn default_url_template(domain: &str, https: Option<SocketAddr>) -> String {
    match https.map(|a| a.port()) {
        Some(443) | None => format!("https://{{name}}.{domain}"),
        Some(port) => format!("https://{{name}}.{domain}:{port}"),
    }
}

pub(crate) fn canonical_domain(domain: &str) -> Result<String, StartError> {
    let d = domain.trim_end_matches('.').to_ascii_lowercase();
    let valid = !d.is_empty()
        && d.len() <= 253
        && d.split('.')
            .all(|label| calvin_proto::PreviewName::parse(label).is_ok());
    if valid {
        Ok(d)
    } else {
        Err(StartError::Domain(domain.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each duration at both ends of its range passes, and one past
    /// either end is refused, named; every name in the table is a field.
    #[test]
    fn every_duration_is_bounded() {
        // Set as an operator would, so each key is checked to name a field.
        let with = |key: &str, value: u64| {
            let limits: Limits = toml::from_str(&format!("{key} = {value}")).expect(key);
            limits.problems()
        };
        assert!(Limits::default().problems().is_empty());
        assert_eq!(DURATION_BOUNDS.len(), 9);
        for &(key, value_of, min, max) in DURATION_BOUNDS {
            let read: Limits = toml::from_str(&format!("{key} = 7")).expect(key);
            assert_eq!(value_of(&read), 7, "{key} reads its own field");
            assert!(with(key, min).is_empty(), "{key} = {min}");
            assert!(with(key, max).is_empty(), "{key} = {max}");
            let mut past = vec![max + 1, u64::MAX];
            if min > 0 {
                past.push(min - 1);
            }
            for value in past {
                assert_eq!(
                    with(key, value),
                    vec![(
                        key,
                        format!("{key} must be from {min} to {max}, got {value}")
                    )],
                    "{key} = {value}"
                );
            }
        }
    }

    #[test]
    fn request_head_limits_are_checked_at_start() {
        let with = |head, headers, uri| Limits {
            max_request_head_bytes: head,
            max_request_headers: headers,
            max_uri_bytes: uri,
            ..Default::default()
        };
        assert!(check_limits(&with(8192, 1, 1)).is_ok());
        let err = check_limits(&with(8191, 1, 1)).unwrap_err().to_string();
        assert!(
            err.contains("max_request_head_bytes must be at least 8192"),
            "{err}"
        );
        for (headers, uri, said) in [
            (0, 1, "max_request_headers must be at least 1"),
            (1, 0, "max_uri_bytes must be at least 1"),
        ] {
            let err = check_limits(&with(8192, headers, uri))
                .unwrap_err()
                .to_string();
            assert!(err.contains(said), "{err}");
        }
    }

    #[test]
    fn url_template_names_the_port_unless_443() {
        let a = |s: &str| Some(s.parse().unwrap());
        assert_eq!(
            default_url_template("preview.localhost", a("127.0.0.1:4443")),
            "https://{name}.preview.localhost:4443"
        );
        assert_eq!(
            default_url_template("p.example.com", a("0.0.0.0:443")),
            "https://{name}.p.example.com"
        );
    }

    #[test]
    fn domains_are_canonical_dns_names() {
        assert_eq!(
            canonical_domain("Preview.LocalHost.").unwrap(),
            "preview.localhost"
        );
        assert!(canonical_domain("").is_err());
        assert!(canonical_domain("a..b").is_err());
        assert!(canonical_domain("a_b.com").is_err());
    }
}
