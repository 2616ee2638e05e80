//! calvin-edge: the public server. Visitors reach `https://<name>.<domain>`;
//! the edge finds the agent serving `<name>` and forwards the request over
//! that agent's QUIC connection.
//!
//! The request path is a stack of folders, each importing only those
//! below it:
//!
//! - [`front`]: the visitors' listeners: accept, TLS, protocol detection,
//!   HTTP/1 (through the framing gate), HTTP/2 and HTTP/3;
//! - [`proxy`]: a request's steps in order: limits, route ([`proxy::host`]),
//!   admit ([`share`]), rewrite ([`proxy::rewrite`]), read ahead, send, and
//!   its access line ([`proxy::access_log`]);
//! - [`upstream`]: the agents' links and the pooled HTTP/1.1-over-QUIC
//!   connections to origins, the agents' side ([`upstream::tunnel`]), the
//!   names they hold ([`upstream::route_table`]);
//! - [`cluster`]: several edges as one, on etcd;
//! - [`ops`]: the admin listener, metrics, health;
//! - [`certs`]: TLS material, the certificate store, ACME and the zone's
//!   DNS.
//!
//! Below them, at this level: what every stage shares (the edge's errors
//! and their pages, the counters, the HTTP/1 framing checker, accounts,
//! share tokens, request bodies, bandwidth buckets, state files). Above
//! them: [`Edge`], which binds the listeners ([`Edge::bind`]) and serves
//! until a shutdown future resolves ([`Edge::run`]); [`Settings`] /
//! [`Limits`] (module `settings`), [`config`] (`edge.toml`), [`dev`] (one
//! machine) and [`check_config`].

pub mod accounts;
pub mod bandwidth;
pub mod certs;
pub mod check_config;
pub mod cluster;
pub mod config;
pub mod counts;
pub mod dev;
pub mod error_page;
pub mod front;
pub mod guesses;
pub mod h1_framing;
pub mod ops;
pub mod proxy;
mod quic_ids;
mod request_body;
mod rewind;
mod settings;
pub mod share;
mod state_files;
pub use calvin_common::tunnel_stream;
pub mod upstream;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio_rustls::TlsAcceptor;
use tracing::{info, warn};

use crate::accounts::Accounts;
use crate::certs::acme::{AcmeSettings, Renewal};
use crate::certs::cert_store::CertStore;
use crate::certs::dns::{Challenges, DnsServer, ZoneAnswers};
use crate::certs::tls::{TlsError, TlsMaterial};
use crate::certs::{acme, tls};
use crate::front::HttpServer;
use crate::ops::admin::Admin;
use crate::ops::health::Health;
use crate::ops::metrics::Metrics;
use crate::ops::{health, metrics};
use crate::proxy::Proxy;
use crate::proxy::rates;
use crate::upstream::UpstreamSettings;
use crate::upstream::route_table::RouteTable;
use crate::upstream::tunnel::AgentHub;
use crate::upstream::{name_store, tunnel};

pub use settings::{
    Bound, Certificates, DnsSettings, Http3Settings, Limits, Listen, ListenerKind, PlainHttp,
    Settings, StartError,
};
use settings::{canonical_domain, check_limits, default_url_template};

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
    /// Whether the QUIC endpoint serves HTTP/3 visitors.
    http3: bool,
    grace: Duration,
    admin: Arc<Admin>,
    admin_listener: Option<TcpListener>,
    /// Where the names served and held are kept ([`name_store`]).
    names_file: Option<std::path::PathBuf>,
    #[cfg(feature = "cluster")]
    cluster: Option<ClusterParts>,
}

/// A cluster edge's store and edge-to-edge endpoint.
#[cfg(feature = "cluster")]
struct ClusterParts {
    store: Arc<cluster::store::Store>,
    endpoint: quinn::Endpoint,
    mirror: Arc<cluster::mirror::Mirror>,
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
        let renewal = Renewal::default();
        let routes = Arc::new(RouteTable::new(
            Duration::from_secs(limits.name_lease_secs),
            limits.max_previews_per_account,
        ));
        if let Some(path) = &settings.names_file {
            // A cluster's store holds its names: only those this edge
            // served are expected back from the file.
            let restore = settings.cluster.is_none();
            let wait = Duration::from_secs(limits.reconnect_wait_secs);
            name_store::start(&routes, path, wait, restore);
        }
        let counts = crate::counts::Counts::default();
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
                    DnsServer::bind(dns.listen, answers, counts.clone())
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

        #[cfg(not(feature = "cluster"))]
        if settings.cluster.is_some() {
            return Err(StartError::Cluster(
                "this calvin-edge was built without the `cluster` feature (cargo build -p calvin-edge, with its default features, and protoc)".into(),
            ));
        }
        #[cfg(feature = "cluster")]
        let cluster = match &settings.cluster {
            None => None,
            Some(cluster) => {
                let tls = cluster::peer::PeerTls::load(
                    &cluster.peer_ca,
                    &cluster.peer_cert,
                    &cluster.peer_key,
                )?;
                let endpoint =
                    cluster::peer::endpoint(cluster.peer_listen, &tls).map_err(|e| match e {
                        cluster::peer::PeerError::Io(source) => StartError::Bind {
                            kind: ListenerKind::Peer,
                            addr: cluster.peer_listen,
                            source,
                        },
                        cluster::peer::PeerError::Tls(e) => StartError::Tls(e),
                    })?;
                let me = cluster::store::EdgeRecord {
                    advertise: cluster.advertise.clone(),
                    addresses: cluster.addresses.clone(),
                };
                let store = cluster::store::Store::connect(
                    &cluster.etcd,
                    me,
                    cluster.lease_ttl,
                    Duration::from_secs(limits.name_lease_secs),
                )
                .await
                .map_err(|e| StartError::Cluster(format!("etcd: {e}")))?;
                Some((Arc::new(store), endpoint))
            }
        };

        let local = |l: &TcpListener| l.local_addr().ok();
        let https_addr = https.as_ref().and_then(|(l, _)| local(l));
        let bound = Bound {
            https: https_addr,
            http: http.as_ref().and_then(local),
            quic: endpoint.local_addr().unwrap_or(quic_addr),
            dns: dns.as_ref().map(DnsServer::local_addr),
            admin: None,
            #[cfg(feature = "cluster")]
            peer: cluster
                .as_ref()
                .and_then(|(_, endpoint)| endpoint.local_addr().ok()),
            #[cfg(not(feature = "cluster"))]
            peer: None,
            url_template: settings
                .public_url
                .clone()
                .unwrap_or_else(|| default_url_template(&domain, https_addr)),
        };

        let share_key = Arc::new(share::ShareKey::new(&settings.share_key));
        #[cfg(feature = "cluster")]
        if let Some((store, _)) = &cluster {
            cluster::follow_share_key(store.clone(), share_key.clone(), settings.share_key).await;
        }
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
            loopback_quic: Arc::new(tls::quic_config(
                certs.clone(),
                true,
                settings.listen.http3.enabled,
            )?),
            guesses: guesses::Guesses::default(),
            connected: Arc::default(),
            account_streams: dashmap::DashMap::new(),
            connections: Default::default(),
            counts: counts.clone(),
            share_key,
            #[cfg(feature = "cluster")]
            store: cluster
                .as_ref()
                .map(|(store, _)| store.clone() as Arc<dyn upstream::claims::NameClaims>),
            #[cfg(not(feature = "cluster"))]
            store: None,
        });
        #[cfg(feature = "cluster")]
        let cluster = cluster.map(|(store, endpoint)| ClusterParts {
            mirror: cluster::mirror::Mirror::new(store.clone(), hub.clone(), endpoint.clone()),
            store,
            endpoint,
        });
        #[cfg_attr(not(feature = "cluster"), expect(unused_mut))]
        let mut live = live_metrics(&routes, &hub, &certs, &renewal);
        #[cfg(feature = "cluster")]
        if let Some(parts) = &cluster {
            let mirror = parts.mirror.clone();
            live.cluster = Some(Box::new(move || mirror.now()));
        }
        let metrics = Arc::new(Metrics::new(counts.clone(), live));
        let online = routes.clone();
        let health = Arc::new(Health::new(
            certs.clone(),
            renewal.clone(),
            certificates.source(),
            health::Tunnel {
                agents: hub.connected.clone(),
                previews: Box::new(move || online.live_total()),
            },
        ));
        let redirect_to =
            (settings.plain_http == PlainHttp::Redirect).then(|| bound.url_template.clone());
        let rates = Arc::new(rates::Rates::new(
            limits.requests_per_second_per_ip,
            limits.requests_per_second_per_preview,
        ));
        let proxy = Proxy::new(
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
            proxy::OwnAnswers {
                health: health.clone(),
                redirect_to,
            },
            counts,
        );
        let http3 = settings.listen.http3;
        let proxy = Arc::new(match (http3.advertise, https_addr) {
            (true, Some(_)) => proxy.advertising_http3(http3.port.unwrap_or(bound.quic.port())),
            _ => proxy,
        });
        let server = Arc::new(HttpServer::new(
            proxy,
            Duration::from_secs(limits.header_read_timeout_secs),
            limits.max_request_head_bytes,
            limits.max_request_headers,
        ));
        let certs_for_admin = certs.clone();
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
            http3: http3.enabled,
            grace: Duration::from_secs(limits.grace_period_secs),
            admin: Arc::new(Admin {
                metrics,
                health,
                certs: certs_for_admin,
                serving: Arc::new(AtomicBool::new(false)),
            }),
            admin_listener: None,
            names_file: settings.names_file,
            #[cfg(feature = "cluster")]
            cluster,
        })
    }

    /// Binds the admin listener (`/metrics`, `/healthz`, `/readyz`; see
    /// [`admin`]) on `addr`, served from [`run`](Self::run) on.
    pub async fn bind_admin(&mut self, addr: SocketAddr) -> std::io::Result<SocketAddr> {
        let listener = TcpListener::bind(addr).await?;
        let bound = listener.local_addr()?;
        self.admin.metrics.counts().start();
        self.admin_listener = Some(listener);
        self.bound.admin = Some(bound);
        Ok(bound)
    }

    /// The access log: a line per request at info (target
    /// `calvin_edge::access`) when `on`, its path with the query when
    /// `query`. On, without the query, unless this says otherwise.
    pub fn set_access_log(&self, on: bool, query: bool) {
        self.server.proxy().set_access_log(on, query);
    }

    /// The metrics, as `/metrics` serves them.
    pub fn metrics(&self) -> Arc<Metrics> {
        self.admin.metrics.clone()
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
        let http3 = self
            .http3
            .then(|| Arc::new(self.server.http3(drain.clone(), stop.clone())));
        drop(drain);
        // A cluster edge follows the store into its table before it
        // serves, so that its first visitors find the other edges' names
        // (a few seconds at most: without etcd it serves what it has).
        // The store's lease and the table's following of it last until
        // the agents' connections are closed, after the drain: the other
        // edges keep reaching this edge's agents through it meanwhile.
        #[cfg(feature = "cluster")]
        let (leave_tx, leave) = watch::channel(false);
        #[cfg(feature = "cluster")]
        let cluster = self.cluster.as_ref().map(|parts| {
            let mirror = parts.mirror.clone();
            let store = parts.store.clone();
            let leaving = leave.clone();
            (
                mirror.clone(),
                tokio::spawn(async move { store.keep(leaving).await }),
                tokio::spawn(mirror.run(leave.clone())),
                // Other edges reach this one's agents until they are
                // closed, after the drain.
                tokio::spawn(cluster::peer::accept(
                    parts.endpoint.clone(),
                    self.hub.clone(),
                    leave.clone(),
                )),
            )
        });
        #[cfg(feature = "cluster")]
        if let (Some((mirror, ..)), Some(parts)) = (&cluster, &self.cluster) {
            let mut synced = mirror.synced();
            let mut up = parts.store.up();
            let first = tokio::time::timeout(CLUSTER_SYNC_WAIT, async {
                let _ = synced.wait_for(|s| *s).await;
                let _ = up.wait_for(|u| *u).await;
            })
            .await;
            if first.is_err() {
                warn!(
                    "the cluster's store did not answer in time; serving without its routes until it does"
                );
            }
            if let Some(dns) = &self.dns {
                dns.follow_addresses(mirror.addresses());
            }
        }
        let admin = self
            .admin_listener
            .map(|listener| tokio::spawn(self.admin.clone().serve(listener)));
        self.admin.serving.store(true, Ordering::Release);
        let agents = tokio::spawn(crate::front::quic::accept_quic(
            self.endpoint.clone(),
            self.hub.clone(),
            http3,
            stop.clone(),
        ));
        // Held names whose lease ended, and idle upstream connections of
        // pools nobody uses, go here.
        let (routes, hub, rates) = (self.routes.clone(), self.hub.clone(), self.rates.clone());
        let every = (self.hub.upstream.idle_timeout / 2)
            .clamp(Duration::from_millis(500), Duration::from_secs(30));
        // And every second, the agents' connections whose path changed.
        let sweeper = tokio::spawn(async move {
            let mut every = tokio::time::interval(every);
            let mut paths = tokio::time::interval(tunnel::PATH_SWEEP);
            paths.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = every.tick() => {
                        routes.sweep(|upstream| upstream.expire_idle());
                        hub.guesses.sweep();
                        rates.sweep();
                    }
                    _ = paths.tick() => hub.follow_paths(),
                }
            }
        });
        // The names served and held, kept for the next start until the
        // agents' connections are closed (their names then read offline,
        // and are expected back).
        let (names_stop_tx, names_stop) = watch::channel(false);
        let names_kept = self
            .names_file
            .clone()
            .map(|path| tokio::spawn(name_store::keep(self.routes.clone(), path, names_stop)));
        let keeper = tokio::spawn(self.certificates.keep(
            self.domain.clone(),
            self.certs.clone(),
            self.renewal.clone(),
            #[cfg(feature = "cluster")]
            self.cluster.as_ref().map(|c| c.store.clone()),
            stop.clone(),
        ));

        shutdown.await;
        self.admin.serving.store(false, Ordering::Release);
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
        self.server.proxy().closing_agents();
        self.endpoint.close(
            tunnel::close_code::SHUTTING_DOWN.into(),
            b"edge shutting down",
        );
        #[cfg(feature = "cluster")]
        if let Some((_, keeper, mirror, peers)) = cluster {
            // The agents move to other edges now; the keeper revokes the
            // lease, and what this edge still held goes with it.
            let _ = leave_tx.send(true);
            let _ = tokio::time::timeout(Duration::from_secs(3), keeper).await;
            mirror.abort();
            let _ = peers.await;
        }
        #[cfg(feature = "cluster")]
        if let Some(parts) = &self.cluster {
            parts.endpoint.close(
                tunnel::close_code::SHUTTING_DOWN.into(),
                b"edge shutting down",
            );
        }
        let _ = tokio::time::timeout(Duration::from_secs(1), self.endpoint.wait_idle()).await;
        let _ = names_stop_tx.send(true);
        if let Some(kept) = names_kept {
            let _ = kept.await;
        }
        if let Some(admin) = admin {
            admin.abort();
        }
        info!("edge stopped");
    }
}

/// How long a cluster edge waits at start for the store's routes.
#[cfg(feature = "cluster")]
const CLUSTER_SYNC_WAIT: Duration = Duration::from_secs(5);

/// What the metrics read at each scrape: the tunnel, the routes, the
/// certificate and its renewals.
/// The wall clock in seconds since the Unix epoch, for what outlives the
/// process: share tokens' expiry, the names kept in the state folder, the
/// cluster's records.
pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn live_metrics(
    routes: &Arc<RouteTable<Arc<upstream::Upstream>>>,
    hub: &Arc<AgentHub>,
    certs: &Arc<CertStore>,
    renewal: &Renewal,
) -> metrics::Live {
    let (agents, streams, paths) = (hub.clone(), hub.clone(), hub.clone());
    let routes = routes.clone();
    let certs = certs.clone();
    let renewal = renewal.clone();
    metrics::Live {
        agents_connected: Box::new(move || agents.connected.load(Ordering::Relaxed) as u64),
        previews_online: Box::new(move || routes.live_total() as u64),
        open_streams: Box::new(move || streams.open_streams()),
        agent_paths: Box::new(move || paths.paths()),
        certificate_not_after: Box::new(move || {
            certs.info().map(|info| info.not_after.unix_timestamp())
        }),
        certificate_attempts: Box::new(move || {
            let status = renewal.status();
            (status.attempts, status.failures)
        }),
        cluster: None,
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

    /// In a cluster (`store`), an ACME certificate is the cluster's: one
    /// edge orders it, every edge serves it (see [`cluster::acme`]).
    async fn keep(
        self,
        domain: String,
        certs: Arc<CertStore>,
        renewal: Renewal,
        #[cfg(feature = "cluster")] store: Option<Arc<cluster::store::Store>>,
        mut stop: watch::Receiver<bool>,
    ) {
        match self {
            CertificateKeeper::Fixed => {}
            #[cfg(feature = "cluster")]
            CertificateKeeper::Acme(settings, challenges) if let Some(store) = store => {
                cluster::acme::keep(settings, domain, store, certs, challenges, renewal, stop).await
            }
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

/// Logs to stderr in `format`; `RUST_LOG` filters (default
/// [`DEFAULT_LOG_FILTER`]).
pub fn init_tracing(format: LogFormat) {
    calvin_common::process::init_tracing(DEFAULT_LOG_FILTER, format);
}

pub use calvin_common::process::{LogFormat, block_on, raise_open_files_limit, shutdown_signal};

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
    let server = tls::quic_config(certs, false, settings.listen.http3.enabled)
        .map_err(QuicBindError::Tls)?;
    let socket = udp_socket(addr).map_err(QuicBindError::Io)?;
    let reset_key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &settings.reset_key);
    // quinn drops packets whose connection ID another key signed, without a
    // reset; the key must outlive the process too (see `quic_ids`).
    let tag = ring::hmac::sign(&reset_key, b"calvin connection id key");
    let mut config = quinn::EndpointConfig::new(Arc::new(reset_key));
    config.cid_generator(move || Box::new(quic_ids::SignedIds::new(tag.as_ref())));
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

pub use calvin_common::quic::udp_socket;
