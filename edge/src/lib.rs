//! calvin-edge: the public server. Visitors reach `https://<name>.<domain>`;
//! the edge finds the agent serving `<name>` and forwards the request over
//! that agent's QUIC connection.
//!
//! - [`Edge`]: binds the listeners ([`Edge::bind`]), then serves until a
//!   shutdown future resolves and drains ([`Edge::run`]).
//! - [`Settings`] / [`Limits`]: what it serves and its caps; [`config`] reads
//!   them from `edge.toml`, [`dev`] makes them for one machine.
//! - [`route_table::RouteTable`]: names, their owners and their upstreams.
//! - [`proxy`]: per-request routing and header rewriting; [`upstream`]: the
//!   pooled HTTP/1.1-over-QUIC connections; [`tunnel`]: the agents' side.
//! - [`dns`]: the zone's authoritative DNS; [`acme`]: its certificate;
//!   [`cert_store`]: the certificate every handshake reads.

pub mod accounts;
pub mod acme;
pub mod bandwidth;
pub mod cert_store;
pub mod config;
pub mod dev;
pub mod dns;
pub mod error_page;
pub mod guesses;
pub(crate) mod h1_framing;
mod h2_flood;
pub mod health;
pub mod host;
mod http_server;
pub mod proxy;
pub mod rates;
mod request_body;
mod rewind;
pub mod route_table;
mod state_files;
pub mod tls;
pub mod tunnel;
pub use calvin_common::tunnel_stream;
pub mod upstream;

use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio_rustls::TlsAcceptor;
use tracing::{info, warn};

use crate::accounts::{AccountError, Accounts};
use crate::acme::{AcmeSettings, Renewal};
use crate::cert_store::CertStore;
use crate::dns::{Challenges, DnsServer, ZoneAnswers, ZoneError, ZoneSettings};
use crate::health::Health;
use crate::http_server::HttpServer;
use crate::proxy::Proxy;
use crate::route_table::RouteTable;
use crate::tls::{TlsError, TlsMaterial};
use crate::tunnel::AgentHub;
use crate::upstream::UpstreamSettings;

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
}

impl fmt::Display for ListenerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ListenerKind::Https => "HTTPS",
            ListenerKind::Http => "HTTP",
            ListenerKind::Quic => "QUIC",
            ListenerKind::Dns => "DNS",
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot listen for {kind} on {addr}/{}: {source}", match .kind { ListenerKind::Quic => "udp", ListenerKind::Dns => "udp+tcp", _ => "tcp" })]
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
}

/// The addresses an edge really bound.
#[derive(Debug, Clone)]
pub struct Bound {
    pub https: Option<SocketAddr>,
    pub http: Option<SocketAddr>,
    pub quic: SocketAddr,
    pub dns: Option<SocketAddr>,
    pub url_template: String,
}

/// A bound edge, ready to [`run`](Edge::run).
pub struct Edge {
    bound: Bound,
    https: Option<(TcpListener, TlsAcceptor)>,
    http: Option<TcpListener>,
    endpoint: quinn::Endpoint,
    dns: Option<DnsServer>,
    certificates: CertificateKeeper,
    renewal: Renewal,
    certs: Arc<CertStore>,
    domain: String,
    routes: Arc<RouteTable<Arc<upstream::Upstream>>>,
    hub: Arc<AgentHub>,
    rates: Arc<rates::Rates>,
    server: Arc<HttpServer>,
    grace: Duration,
}

impl Edge {
    /// Binds every listener; a taken address fails here, naming the listener.
    pub async fn bind(settings: Settings) -> Result<Edge, StartError> {
        let domain = canonical_domain(&settings.domain)?;
        let accounts = Accounts::new(
            settings
                .accounts
                .iter()
                .map(|(a, t)| (a.as_str(), t.as_str())),
        )?;
        let limits = &settings.limits;
        check_limits(limits)?;
        let bind_err = |kind, addr| move |source| StartError::Bind { kind, addr, source };

        let certs = Arc::new(CertStore::new());
        let challenges = Challenges::default();
        let certificates = match &settings.certificates {
            Certificates::Fixed(material) => {
                certs.install(material)?;
                CertificateKeeper::Fixed
            }
            Certificates::Files {
                cert_file,
                key_file,
            } => {
                let info = certs.install(&TlsMaterial::from_pem_files(cert_file, key_file)?)?;
                info!(%info, "serving the configured certificate");
                CertificateKeeper::Files(cert_file.clone(), key_file.clone())
            }
            Certificates::Acme(acme) => {
                if settings.dns.is_none() {
                    return Err(StartError::AcmeWithoutDns);
                }
                acme::load_saved(acme, &domain, &certs);
                CertificateKeeper::Acme(acme.clone(), challenges.clone())
            }
        };
        let dns = match &settings.dns {
            Some(dns) => {
                let answers = ZoneAnswers::new(&dns.zone, challenges)?;
                Some(
                    DnsServer::bind(dns.listen, answers)
                        .await
                        .map_err(bind_err(ListenerKind::Dns, dns.listen))?,
                )
            }
            None => None,
        };

        let https = match settings.listen.https {
            Some(addr) => {
                let listener = TcpListener::bind(addr)
                    .await
                    .map_err(bind_err(ListenerKind::Https, addr))?;
                let acceptor = TlsAcceptor::from(Arc::new(tls::https_config(certs.clone())?));
                Some((listener, acceptor))
            }
            None => None,
        };
        let http = match settings.listen.http {
            Some(addr) => Some(
                TcpListener::bind(addr)
                    .await
                    .map_err(bind_err(ListenerKind::Http, addr))?,
            ),
            None => None,
        };
        let quic_addr = settings.listen.quic;
        let endpoint = quic_endpoint(quic_addr, &settings, certs.clone()).map_err(|e| match e {
            QuicBindError::Io(source) => StartError::Bind {
                kind: ListenerKind::Quic,
                addr: quic_addr,
                source,
            },
            QuicBindError::Tls(e) => StartError::Tls(e),
        })?;

        let local = |l: &TcpListener| l.local_addr().ok();
        let https_addr = https.as_ref().and_then(|(l, _)| local(l));
        let bound = Bound {
            https: https_addr,
            http: http.as_ref().and_then(local),
            quic: endpoint.local_addr().unwrap_or(quic_addr),
            dns: dns.as_ref().map(DnsServer::local_addr),
            url_template: settings
                .public_url
                .clone()
                .unwrap_or_else(|| default_url_template(&domain, https_addr)),
        };

        let routes = Arc::new(RouteTable::new(
            Duration::from_secs(limits.name_lease_secs),
            limits.max_previews_per_account,
        ));
        let hub = Arc::new(AgentHub {
            routes: routes.clone(),
            accounts,
            domain: domain.clone(),
            url_template: bound.url_template.clone(),
            upstream: Arc::new(UpstreamSettings {
                connect_timeout: Duration::from_secs(limits.upstream_connect_timeout_secs),
                max_idle_per_preview: limits.upstream_max_idle_per_preview,
                max_idle_per_agent: limits.upstream_max_idle_per_agent,
                idle_timeout: Duration::from_secs(limits.upstream_idle_timeout_secs),
                reconnect_wait: Duration::from_secs(limits.reconnect_wait_secs),
                max_streams_per_account: limits.max_streams_per_account,
                bandwidth: bandwidth::Buckets::new(limits.max_bytes_per_second_per_account),
            }),
            hello_timeout: Duration::from_secs(limits.hello_timeout_secs),
            loopback_quic: Arc::new(tls::quic_config(certs.clone(), true)?),
            guesses: guesses::Guesses::default(),
            connected: Arc::default(),
            account_streams: dashmap::DashMap::new(),
        });
        let renewal = Renewal::default();
        let online = routes.clone();
        let health = Health::new(
            certs.clone(),
            renewal.clone(),
            certificates.source(),
            health::Tunnel {
                agents: hub.connected.clone(),
                previews: Box::new(move || online.live_total()),
            },
        );
        let redirect_to =
            (settings.plain_http == PlainHttp::Redirect).then(|| bound.url_template.clone());
        let rates = Arc::new(rates::Rates::new(
            limits.requests_per_second_per_ip,
            limits.requests_per_second_per_preview,
        ));
        let proxy = Arc::new(Proxy::new(
            routes.clone(),
            domain.clone(),
            proxy::RequestLimits {
                max_uri_bytes: limits.max_uri_bytes,
                max_headers: limits.max_request_headers,
                max_body_bytes: (limits.max_request_body_bytes > 0)
                    .then_some(limits.max_request_body_bytes),
                min_body_rate: (limits.min_request_body_bytes > 0
                    && limits.request_body_rate_window_secs > 0)
                    .then(|| request_body::MinRate {
                        bytes: limits.min_request_body_bytes,
                        window: Duration::from_secs(limits.request_body_rate_window_secs),
                    }),
            },
            rates.clone(),
            proxy::Waits {
                response: Duration::from_secs(limits.upstream_timeout_secs),
                reconnect: Duration::from_secs(limits.reconnect_wait_secs),
            },
            health,
            redirect_to,
        ));
        let server = Arc::new(HttpServer::new(
            proxy,
            Duration::from_secs(limits.header_read_timeout_secs),
            limits.max_request_head_bytes,
            limits.max_request_headers,
        ));
        Ok(Edge {
            bound,
            https,
            http,
            endpoint,
            dns,
            certificates,
            renewal,
            certs,
            domain,
            routes,
            hub,
            rates,
            server,
            grace: Duration::from_secs(limits.grace_period_secs),
        })
    }

    pub fn bound(&self) -> &Bound {
        &self.bound
    }

    /// The certificate's renewal status, and `renew_now` to renew an ACME
    /// certificate or read certificate files again.
    pub fn renewal(&self) -> Renewal {
        self.renewal.clone()
    }

    /// Serves until `shutdown` resolves; then stops accepting, gives
    /// in-flight requests the grace period, closes the agents' connections
    /// and returns.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let (stop_tx, stop) = watch::channel(false);
        let (drain, mut drained) = mpsc::channel::<()>(1);
        let mut loops = Vec::new();
        if let Some((listener, acceptor)) = self.https {
            loops.push(tokio::spawn(self.server.clone().accept(
                listener,
                Some(acceptor),
                stop.clone(),
                drain.clone(),
            )));
        }
        if let Some(listener) = self.http {
            loops.push(tokio::spawn(self.server.clone().accept(
                listener,
                None,
                stop.clone(),
                drain.clone(),
            )));
        }
        drop(drain);
        let agents = tokio::spawn(tunnel::accept_agents(
            self.endpoint.clone(),
            self.hub.clone(),
            stop.clone(),
        ));
        // Held names whose lease ended, and idle upstream connections of
        // pools nobody uses, go here.
        let (routes, hub, rates) = (self.routes.clone(), self.hub.clone(), self.rates.clone());
        let every = (self.hub.upstream.idle_timeout / 2)
            .clamp(Duration::from_millis(500), Duration::from_secs(30));
        let sweeper = tokio::spawn(async move {
            let mut every = tokio::time::interval(every);
            loop {
                every.tick().await;
                routes.sweep(|upstream| upstream.expire_idle());
                hub.guesses.sweep();
                rates.sweep();
            }
        });
        let keeper = tokio::spawn(self.certificates.keep(
            self.domain.clone(),
            self.certs.clone(),
            self.renewal.clone(),
            stop.clone(),
        ));

        shutdown.await;
        info!(
            grace_secs = self.grace.as_secs(),
            "shutting down: draining requests"
        );
        let _ = stop_tx.send(true);
        for accept_loop in loops {
            let _ = accept_loop.await;
        }
        let _ = agents.await;
        // Every visitor connection holds a drain sender; recv ends when the
        // last one has finished.
        if tokio::time::timeout(self.grace, drained.recv())
            .await
            .is_err()
        {
            warn!("grace period over; closing the remaining connections");
        }
        sweeper.abort();
        let _ = keeper.await;
        if let Some(dns) = self.dns {
            dns.shutdown().await;
        }
        self.endpoint.close(
            tunnel::close_code::SHUTTING_DOWN.into(),
            b"edge shutting down",
        );
        let _ = tokio::time::timeout(Duration::from_secs(1), self.endpoint.wait_idle()).await;
        info!("edge stopped");
    }
}

/// What keeps the certificate current while the edge runs.
enum CertificateKeeper {
    Fixed,
    Files(PathBuf, PathBuf),
    Acme(AcmeSettings, Challenges),
}

impl CertificateKeeper {
    fn source(&self) -> &'static str {
        match self {
            CertificateKeeper::Fixed => "fixed",
            CertificateKeeper::Files(..) => "files",
            CertificateKeeper::Acme(..) => "acme",
        }
    }

    async fn keep(
        self,
        domain: String,
        certs: Arc<CertStore>,
        renewal: Renewal,
        mut stop: watch::Receiver<bool>,
    ) {
        match self {
            CertificateKeeper::Fixed => {}
            CertificateKeeper::Acme(settings, challenges) => {
                acme::keep_renewed(settings, domain, certs, challenges, renewal, stop).await
            }
            CertificateKeeper::Files(cert_file, key_file) => loop {
                tokio::select! {
                    _ = renewal.requested() => renewal.take_request(),
                    _ = stop.wait_for(|s| *s) => return,
                }
                let read = TlsMaterial::from_pem_files(&cert_file, &key_file)
                    .and_then(|material| certs.install(&material));
                renewal.record(read.as_ref().map(|_| ()).map_err(|e| e.to_string()));
                match read {
                    Ok(info) => info!(%info, "read the certificate files again"),
                    Err(err) => {
                        warn!(%err, "cannot read the certificate files; serving the previous certificate")
                    }
                }
            },
        }
    }
}

/// hickory logs every DNS query at info: a public name server's scans and
/// floods would become the log. The edge logs queries at debug itself.
pub const DEFAULT_LOG_FILTER: &str = "info,hickory_server=warn,hickory_proto=warn,hickory_net=warn";

/// Logs to stderr; `RUST_LOG` filters (default [`DEFAULT_LOG_FILTER`]).
pub fn init_tracing() {
    calvin_common::process::init_tracing(DEFAULT_LOG_FILTER);
}

pub use calvin_common::process::{block_on, raise_open_files_limit, shutdown_signal};

/// The smallest request head limit: hyper's HTTP/1.1 read buffer takes no
/// less.
const MIN_HEAD_BYTES: usize = 8192;

/// Refuses limits that would break the edge, and warns of those that only
/// make its answers less precise.
fn check_limits(limits: &Limits) -> Result<(), StartError> {
    let streams = calvin_proto::MAX_DATA_STREAMS as usize;
    if limits.upstream_max_idle_per_agent >= streams {
        return Err(StartError::Limits(format!(
            "upstream_max_idle_per_agent must be under the {streams} streams an agent allows, \
             or idle connections could take every one; got {}",
            limits.upstream_max_idle_per_agent
        )));
    }
    if limits.max_request_head_bytes < MIN_HEAD_BYTES {
        return Err(StartError::Limits(format!(
            "max_request_head_bytes must be at least {MIN_HEAD_BYTES} (HTTP/1.1's read buffer); got {}",
            limits.max_request_head_bytes
        )));
    }
    if limits.max_request_headers == 0 {
        return Err(StartError::Limits(
            "max_request_headers must be at least 1 (the Host header)".into(),
        ));
    }
    if limits.max_uri_bytes == 0 {
        return Err(StartError::Limits(
            "max_uri_bytes must be at least 1 (the path \"/\")".into(),
        ));
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
fn default_url_template(domain: &str, https: Option<SocketAddr>) -> String {
    match https.map(|a| a.port()) {
        Some(443) | None => format!("https://{{name}}.{domain}"),
        Some(port) => format!("https://{{name}}.{domain}:{port}"),
    }
}

fn canonical_domain(domain: &str) -> Result<String, StartError> {
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

enum QuicBindError {
    Io(std::io::Error),
    Tls(TlsError),
}

/// A QUIC endpoint on `addr` with large UDP buffers and the persistent
/// stateless-reset key.
fn quic_endpoint(
    addr: SocketAddr,
    settings: &Settings,
    certs: Arc<CertStore>,
) -> Result<quinn::Endpoint, QuicBindError> {
    let server = tls::quic_config(certs, false).map_err(QuicBindError::Tls)?;
    let socket = udp_socket(addr).map_err(QuicBindError::Io)?;
    let reset_key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &settings.reset_key);
    // quinn drops packets whose connection ID another generator key signed,
    // without a reset; the key must outlive the process too.
    let tag = ring::hmac::sign(&reset_key, b"calvin connection id key");
    let mut cid_key = [0u8; 8];
    cid_key.copy_from_slice(&tag.as_ref()[..8]);
    let cid_key = u64::from_le_bytes(cid_key);
    let mut config = quinn::EndpointConfig::new(Arc::new(reset_key));
    config.cid_generator(move || {
        Box::new(quinn_proto::HashedConnectionIdGenerator::from_key(cid_key))
    });
    // quinn sends at most one stateless reset per 20 ms by default, and one
    // per batch of datagrams received together: after a restart, 1,000
    // agents' probes met 50 resets a second and most agents learned only at
    // their idle timeout (median 17 s). No floor: a reset is always smaller
    // than the packet that caused it, so it amplifies nothing, and costs one
    // HMAC.
    config.min_reset_interval(Duration::ZERO);
    let config = tls::endpoint_config(config);
    quinn::Endpoint::new(config, Some(server), socket, Arc::new(quinn::TokioRuntime))
        .map_err(QuicBindError::Io)
}

pub use calvin_common::quic::{UDP_BUFFER, udp_socket};

#[cfg(test)]
mod tests {
    use super::*;

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
