//! The agent: one QUIC connection to an edge, kept up with jittered
//! exponential backoff, and the previews it holds, registered again under
//! the same names after every reconnect. Given several edges (or a name
//! with several addresses), it uses one at a time and, when that one fails
//! or goes silent, moves to the next ([`EdgeRing`]).

mod share;

pub use share::ProtectChange;

use crate::metrics::AgentCounts;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use calvin_proto::io::{read_frame, write_frame};
use calvin_proto::{
    AgentMessage, EdgeMessage, ErrorCode, Failure, Hello, PROTOCOL_VERSION, Port, Preview,
    PreviewName, ShareSalt, Welcome, close_code,
};
use rand::RngExt;
use tokio::sync::{mpsc, oneshot, watch};
use tracing::{info, warn};

use crate::api::{PreviewCreated, PreviewEntry, PreviewList};
use crate::request_log::{self, RequestLog};
use crate::transport::{EdgeAddress, EdgeRing, EdgeTarget, TransportError};
use crate::{forward, probe};

/// The previews an agent holds: name -> local port.
pub type Previews = Arc<Mutex<BTreeMap<PreviewName, Port>>>;

/// Reconnect delays: doubling from `BACKOFF_START`, capped at `BACKOFF_CAP`,
/// each one drawn from its upper half so agents of a restarted edge spread out.
const BACKOFF_START: Duration = Duration::from_millis(250);
const BACKOFF_CAP: Duration = Duration::from_secs(10);

/// The delay before each reconnect attempt.
struct Backoff {
    next: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            next: BACKOFF_START,
        }
    }
}

impl Backoff {
    fn next_delay(&mut self) -> Duration {
        let delay = self.next.mul_f64(rand::rng().random_range(0.5..=1.0));
        self.next = (self.next * 2).min(BACKOFF_CAP);
        delay
    }

    /// From now on, the longest delay (a refusal will not fix itself soon).
    fn slowest(&mut self) {
        self.next = BACKOFF_CAP;
    }
}
/// The most a stopping agent waits for its close to reach the edge.
const CLOSE_FLUSH: Duration = Duration::from_secs(1);

/// Time for the edge to answer a hello or a control request.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// How often an agent with another edge to go to checks that its edge
/// still answers, and how long past an unanswered keep-alive it waits (or
/// 4 RTT, when longer) before it leaves (see [`edge_silent`]).
const SILENCE_TICK: Duration = Duration::from_millis(500);
const SILENCE_MARGIN: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum PreviewError {
    #[error("not connected to the edge at {edge}{}", last.as_deref().map(|e| format!(" ({e})")).unwrap_or_default())]
    NotConnected { edge: String, last: Option<String> },
    #[error("no preview named {0}")]
    UnknownName(PreviewName),
    #[error("{}", .0.message)]
    Edge(Failure),
    #[error("the connection to the edge was lost during the request; try again")]
    Lost,
}

#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error(transparent)]
    Transport(#[from] TransportError),
    #[error("the edge refused this agent: {0}")]
    Refused(Failure),
    #[error("the edge did not answer: {0}")]
    NoAnswer(String),
}

/// Where the agent stands with its edge.
#[derive(Clone)]
pub enum LinkState {
    Connecting {
        last_error: Option<String>,
    },
    Connected(Link),
    /// The edge refused the agent's hello (bad token, old protocol). The
    /// agent keeps trying, slowly: the edge may be reconfigured.
    Refused(Failure),
    Stopped,
}

/// A live connection to the edge.
#[derive(Clone)]
pub struct Link {
    edge: Arc<EdgeTarget>,
    conn: quinn::Connection,
    endpoint: quinn::Endpoint,
    calls: mpsc::Sender<Call>,
}

enum Request {
    Open {
        port: Port,
        name: Option<PreviewName>,
        ttl_secs: Option<u32>,
        protect: Option<ShareSalt>,
    },
    Close {
        name: PreviewName,
    },
    ShareLink {
        name: PreviewName,
        expires_secs: Option<u32>,
    },
}

struct Call {
    request: Request,
    reply: oneshot::Sender<Result<EdgeMessage, PreviewError>>,
}

/// A handle to the agent; clones share it.
#[derive(Clone)]
pub struct Agent {
    shared: Arc<Shared>,
}

struct Shared {
    /// The edges given, in order; one is used at a time.
    edges: Vec<EdgeAddress>,
    token: String,
    previews: Previews,
    link: watch::Sender<LinkState>,
    /// The last Welcome, for URLs while reconnecting.
    welcome: Mutex<Option<Welcome>>,
    /// Serializes preview and unpreview, so "the port's existing name" is
    /// never made twice by two callers at once.
    ops: tokio::sync::Mutex<()>,
    counts: AgentCounts,
    /// The requests through each preview.
    log: RequestLog,
    /// When previews made with a time to live end.
    ends: Mutex<HashMap<PreviewName, SystemTime>>,
    /// The salts of protected previews (see [`share`]).
    salts: Mutex<HashMap<PreviewName, ShareSalt>>,
}

impl Agent {
    /// An agent of one edge (all of its addresses, when its name has
    /// several).
    pub fn new(edge: EdgeAddress, token: String) -> Self {
        Self::with_edges(vec![edge], token)
    }

    /// An agent of several edges: it connects to one, and moves to the
    /// next when that one fails or goes silent. Its previews move with it.
    pub fn with_edges(edges: Vec<EdgeAddress>, token: String) -> Self {
        Self::with_log(
            edges,
            token,
            RequestLog::new(request_log::DEFAULT_CAPACITY, false),
        )
    }

    /// An agent of several edges (see [`Self::with_edges`]) keeping `log`
    /// of its previews' requests.
    pub fn with_log(edges: Vec<EdgeAddress>, token: String, log: RequestLog) -> Self {
        let (link, _) = watch::channel(LinkState::Connecting { last_error: None });
        let counts = AgentCounts::new(link.subscribe());
        Self {
            shared: Arc::new(Shared {
                edges,
                token,
                previews: Previews::default(),
                log,
                ends: Mutex::default(),
                salts: Mutex::default(),
                link,
                welcome: Mutex::new(None),
                ops: tokio::sync::Mutex::new(()),
                counts,
            }),
        }
    }

    /// The requests through its previews.
    pub fn log(&self) -> &RequestLog {
        &self.shared.log
    }

    /// What the agent counts (`--metrics`).
    pub fn counts(&self) -> &AgentCounts {
        &self.shared.counts
    }

    /// Watches the connection state.
    pub fn state(&self) -> watch::Receiver<LinkState> {
        self.shared.link.subscribe()
    }

    /// The edge address the agent is connected to now, if any.
    pub fn connected_edge(&self) -> Option<EdgeTarget> {
        self.link().ok().map(|link| EdgeTarget::clone(&link.edge))
    }

    /// The edges given, for messages: `HOST:PORT`, or several joined.
    fn edges_text(&self) -> String {
        let edges: Vec<String> = self.shared.edges.iter().map(ToString::to_string).collect();
        edges.join(", ")
    }

    /// Waits until the agent is connected, refused, or `limit` passes.
    pub async fn wait_connected(&self, limit: Duration) -> Result<(), String> {
        let mut state = self.state();
        let settled: Option<Result<(), String>> = tokio::time::timeout(
            limit,
            state.wait_for(|s| matches!(s, LinkState::Connected(_) | LinkState::Refused(_))),
        )
        .await
        .ok()
        .and_then(|r| r.ok())
        .map(|now| match &*now {
            LinkState::Refused(failure) => {
                Err(format!("the edge refused this agent: {}", failure.message))
            }
            _ => Ok(()),
        });
        settled.unwrap_or_else(|| {
            Err(match &*state.borrow() {
                LinkState::Connecting {
                    last_error: Some(e),
                } => format!("cannot reach the edge at {}: {e}", self.edges_text()),
                _ => format!("cannot reach the edge at {}", self.edges_text()),
            })
        })
    }

    /// Keeps a connection to an edge up until `shutdown` resolves, then
    /// closes it. Failed attempts move on to the next address at once; the
    /// backoff delay comes after a whole round of them failed, and after a
    /// lost connection (whose address is tried last).
    pub async fn run(&self, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        let counts = self.shared.counts.clone();
        let mut backoff = Backoff::default();
        let mut ring = EdgeRing::new(self.shared.edges.clone());
        loop {
            let attempt = tokio::select! {
                attempt = self.attempt(&mut ring, &mut backoff) => attempt,
                _ = &mut shutdown => break,
            };
            if let Some(link) = attempt {
                counts.connected();
                backoff = Backoff::default();
                // With nowhere else to go, QUIC's idle timeout decides.
                let watch_silence = ring.has_alternatives();
                let keep_alive = link.edge.timing().keep_alive;
                let reason = tokio::select! {
                    reason = link.conn.closed() => reason.to_string(),
                    never = crate::path_probe::keep_path_open(&link.conn) => match never {},
                    silent = edge_silent(&link.conn, keep_alive), if watch_silence => {
                        link.conn.close(close_code::UNRESPONSIVE.into(), b"the edge went silent");
                        format!("the edge answered nothing for {} ms", silent.as_millis())
                    }
                    _ = &mut shutdown => {
                        link.conn.close(close_code::NORMAL.into(), b"agent stopping");
                        // Until the close is sent: else the edge learns
                        // only from its probe or idle timeout, and a
                        // visitor meanwhile gets 502 without waiting for
                        // the agent to come back (seen in CI).
                        let _ = tokio::time::timeout(CLOSE_FLUSH, link.endpoint.wait_idle()).await;
                        break;
                    }
                };
                counts.connection_lost();
                warn!(edge = %link.edge, %reason, "connection to the edge lost; reconnecting");
                self.shared.link.send_replace(LinkState::Connecting {
                    last_error: Some(reason),
                });
                ring.end_round();
            }
            if ring.round_over() {
                tokio::select! {
                    _ = tokio::time::sleep(backoff.next_delay()) => {}
                    _ = &mut shutdown => break,
                }
            }
        }
        self.shared.link.send_replace(LinkState::Stopped);
    }

    /// One connection attempt on the ring's next address. A failure is
    /// counted, logged and published as the link's state.
    async fn attempt(&self, ring: &mut EdgeRing, backoff: &mut Backoff) -> Option<Link> {
        let (edge, err) = match ring.next().await {
            Ok(target) => match self.connect(target.clone()).await {
                Ok(link) => return Some(link),
                Err(err) => (Some(target), err),
            },
            Err(err) => (None, ConnectError::Transport(err)),
        };
        self.shared.counts.connect_failed();
        let shown = edge.as_ref().map(tracing::field::display);
        match err {
            // A cluster edge that cannot reach its store: another edge
            // may, or this one soon; nothing the agent holds is wrong.
            ConnectError::Refused(failure) if failure.code != ErrorCode::Unavailable => {
                warn!(edge = shown, reason = %failure, "the edge refused this agent");
                self.shared.link.send_replace(LinkState::Refused(failure));
                backoff.slowest();
            }
            err => {
                let last_error = match &edge {
                    Some(edge) if ring.has_alternatives() => format!("{edge}: {err}"),
                    _ => err.to_string(),
                };
                warn!(edge = shown, %err, "cannot connect to the edge");
                self.shared.link.send_replace(LinkState::Connecting {
                    last_error: Some(last_error),
                });
            }
        }
        None
    }

    /// One connection attempt: QUIC handshake, hello with the previews held,
    /// then the control and data streams are served in the background.
    async fn connect(&self, edge: EdgeTarget) -> Result<Link, ConnectError> {
        let (endpoint, conn) = edge.connect().await?;
        let (mut send, mut recv) = conn
            .open_bi()
            .await
            .map_err(|e| ConnectError::NoAnswer(e.to_string()))?;
        // No preview or unpreview between the snapshot the hello carries and
        // the welcome's answer to it, so neither is lost or undone.
        let _op = self.shared.ops.lock().await;
        let ends = self.ends().clone();
        let salts = self.salts().clone();
        let now = SystemTime::now();
        let held: Vec<Preview> = self
            .previews()
            .iter()
            .filter_map(|(name, port)| {
                // What is left of its time to live; one whose time is over
                // is not registered again (its timer takes it down here).
                let ttl_secs = match ends.get(name) {
                    None => None,
                    Some(end) => Some(
                        u32::try_from(end.duration_since(now).ok()?.as_secs())
                            .unwrap_or(u32::MAX)
                            .max(1),
                    ),
                };
                Some(Preview {
                    name: name.clone(),
                    port: *port,
                    ttl_secs,
                    protect: salts.get(name).cloned(),
                })
            })
            .collect();
        let hello = AgentMessage::Hello(Hello {
            version: PROTOCOL_VERSION,
            token: self.shared.token.clone(),
            previews: held,
        });
        let answer = tokio::time::timeout(ANSWER_TIMEOUT, async {
            write_frame(&mut send, &hello)
                .await
                .map_err(|e| e.to_string())?;
            read_frame::<EdgeMessage, _>(&mut recv)
                .await
                .map_err(|e| e.to_string())
        })
        .await
        .map_err(|_| ConnectError::NoAnswer("no welcome in time".into()))?
        .map_err(ConnectError::NoAnswer)?;
        let welcome = match answer {
            Some(EdgeMessage::Welcome(welcome)) => welcome,
            Some(EdgeMessage::Refused(failure)) => {
                conn.close(close_code::NORMAL.into(), b"refused");
                return Err(ConnectError::Refused(failure));
            }
            other => {
                return Err(ConnectError::NoAnswer(format!(
                    "expected a welcome, got {other:?}"
                )));
            }
        };
        self.apply_welcome(welcome, &edge);

        let (calls, requests) = mpsc::channel(64);
        tokio::spawn(control_loop(conn.clone(), send, recv, requests));
        tokio::spawn(forward::accept_streams(
            conn.clone(),
            self.shared.previews.clone(),
            self.shared.counts.clone(),
            self.shared.log.clone(),
        ));
        let link = Link {
            edge: Arc::new(edge),
            conn,
            endpoint,
            calls,
        };
        // Published before the op lock is released, so a preview waiting on
        // the lock finds the agent connected.
        self.shared
            .link
            .send_replace(LinkState::Connected(link.clone()));
        Ok(link)
    }

    fn apply_welcome(&self, welcome: Welcome, edge: &EdgeTarget) {
        let mut previews = self.previews();
        for rejected in &welcome.rejected {
            warn!(name = %rejected.name, reason = %rejected.failure, "preview not restored");
            previews.remove(&rejected.name);
            self.shared.log.close(&rejected.name);
        }
        // An edge that restored a protected preview as a public one (a
        // version before protected previews) would serve it to anyone:
        // this agent stops serving it (its streams are refused).
        let mut salts = self.salts();
        for restored in &welcome.restored {
            if restored.protect.is_none() && salts.remove(&restored.name).is_some() {
                warn!(name = %restored.name, "the edge does not protect previews (an older version); the protected preview is no longer served");
                previews.remove(&restored.name);
                self.shared.log.close(&restored.name);
            }
        }
        drop(salts);
        drop(previews);
        info!(
            %edge,
            account = %welcome.account,
            restored = welcome.restored.len(),
            "connected to the edge"
        );
        *self
            .shared
            .welcome
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(welcome);
    }

    fn previews(&self) -> std::sync::MutexGuard<'_, BTreeMap<PreviewName, Port>> {
        self.shared
            .previews
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    fn link(&self) -> Result<Link, PreviewError> {
        match &*self.shared.link.borrow() {
            LinkState::Connected(link) if link.conn.close_reason().is_none() => Ok(link.clone()),
            LinkState::Connecting { last_error } => Err(PreviewError::NotConnected {
                edge: self.edges_text(),
                last: last_error.clone(),
            }),
            LinkState::Refused(failure) => Err(PreviewError::NotConnected {
                edge: self.edges_text(),
                last: Some(failure.message.clone()),
            }),
            _ => Err(PreviewError::NotConnected {
                edge: self.edges_text(),
                last: None,
            }),
        }
    }

    fn url_for(&self, name: &PreviewName) -> String {
        let welcome = self
            .shared
            .welcome
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        welcome
            .as_ref()
            .map(|w| w.url_for(name))
            .unwrap_or_default()
    }

    /// Gives `port` a public URL, probing the port (see
    /// [`Self::preview_with`]).
    pub async fn preview(
        &self,
        port: Port,
        name: Option<PreviewName>,
    ) -> Result<PreviewCreated, PreviewError> {
        self.preview_with(port, name, PreviewOptions::default())
            .await
    }

    /// Gives `port` a public URL. Without a name, the port's existing name
    /// is reused, else the edge makes one. A name this account holds is
    /// reused; another account's is refused. The answer says where the
    /// server was reached and, unless `options.probe` is off, what the
    /// probe found wrong (see [`crate::probe`]).
    pub async fn preview_with(
        &self,
        port: Port,
        name: Option<PreviewName>,
        options: PreviewOptions,
    ) -> Result<PreviewCreated, PreviewError> {
        let _op = self.shared.ops.lock().await;
        let existing = {
            let previews = self.previews();
            match &name {
                None => previews
                    .iter()
                    .find(|(_, p)| **p == port)
                    .map(|(n, _)| n.clone()),
                Some(n) => (previews.get(n) == Some(&port)).then(|| n.clone()),
            }
        };
        let ttl_secs = options
            .ttl
            .map(|ttl| u32::try_from(ttl.as_secs()).unwrap_or(u32::MAX));
        let salt = self.salt_wanted(name.as_ref().or(existing.as_ref()), options.protect);
        // A preview kept as it is needs no word to the edge, unless its end
        // changes (a time to live given, or one it had), or its protection.
        let reused = existing.clone().filter(|name| {
            ttl_secs.is_none()
                && !self.ends().contains_key(name)
                && self.salts().get(name) == salt.as_ref()
        });
        let name = match reused {
            Some(name) => name,
            None => {
                // The port's name, when it has one, is opened again.
                let name = name.or(existing);
                let link = self.link()?;
                // The edge routes to this agent the moment it claims the
                // name, before its answer arrives here: a visitor who was
                // waiting for the name is sent at once. A named preview is
                // taken from then on (a generated name is known to nobody
                // before the answer), and put back as it was if refused.
                let before = name
                    .clone()
                    .map(|n| (n.clone(), self.previews().insert(n, port)));
                let answer = link
                    .call(Request::Open {
                        port,
                        name,
                        ttl_secs,
                        protect: salt.clone(),
                    })
                    .await;
                match answer {
                    Ok(EdgeMessage::Opened { preview, .. })
                        if salt.is_some() && preview.protect.is_none() =>
                    {
                        return Err(self.unprotected_by_edge(&link, preview).await);
                    }
                    Ok(EdgeMessage::Opened { preview, .. }) => {
                        self.previews().insert(preview.name.clone(), preview.port);
                        self.set_salt(&preview.name, salt.clone());
                        preview.name
                    }
                    failed => {
                        if let Some((n, previous)) = before {
                            let mut previews = self.previews();
                            match previous {
                                Some(p) => previews.insert(n, p),
                                None => previews.remove(&n),
                            };
                        }
                        return Err(match failed {
                            Ok(other) => unexpected(other),
                            Err(err) => err,
                        });
                    }
                }
            }
        };
        let expires_at = self.set_end(&name, options.ttl);
        let url = self.url_for(&name);
        let share = match salt {
            Some(_) => Some(self.share_link(&name, &url, options.share_secs).await?),
            None => None,
        };
        self.shared.log.open(&name, port, &url);
        let found = if options.probe {
            probe::run(port, authority(&url)).await
        } else {
            probe::Found::reached(forward::reach(port).await)
        };
        Ok(PreviewCreated {
            url,
            name: name.to_string(),
            listening: found.reached.is_some(),
            reached: found.reached.map(|addr| addr.to_string()),
            warnings: found.warnings,
            expires_at: expires_at.map(rfc3339),
            share_url: share.as_ref().map(|s| s.url.clone()),
            share_expires: share.map(|s| rfc3339(s.expires)),
        })
    }

    /// Takes a preview down. When the edge cannot be told now, the name is
    /// dropped here anyway and not registered again.
    pub async fn unpreview(&self, name: &PreviewName) -> Result<(), PreviewError> {
        let _op = self.shared.ops.lock().await;
        self.take_down(name).await
    }

    /// [`Self::unpreview`], with the operations' lock held.
    async fn take_down(&self, name: &PreviewName) -> Result<(), PreviewError> {
        if !self.previews().contains_key(name) {
            return Err(PreviewError::UnknownName(name.clone()));
        }
        if let Ok(link) = self.link() {
            match link.call(Request::Close { name: name.clone() }).await {
                Ok(EdgeMessage::Closed { .. }) | Err(PreviewError::Lost) => {}
                Err(PreviewError::Edge(f)) if f.code == ErrorCode::UnknownName => {}
                Ok(other) => return Err(unexpected(other)),
                Err(err) => return Err(err),
            }
        }
        self.previews().remove(name);
        self.ends().remove(name);
        self.salts().remove(name);
        self.shared.log.close(name);
        Ok(())
    }

    fn ends(&self) -> std::sync::MutexGuard<'_, HashMap<PreviewName, SystemTime>> {
        self.shared.ends.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records when `name` ends (`ttl` from now; none without), and takes
    /// it down here then. The edge ends it at the same time (a visitor
    /// reads "this preview has ended"), whether or not this agent is
    /// connected; this agent stops registering it.
    fn set_end(&self, name: &PreviewName, ttl: Option<Duration>) -> Option<SystemTime> {
        let Some(ttl) = ttl else {
            self.ends().remove(name);
            return None;
        };
        let end = SystemTime::now() + ttl;
        self.ends().insert(name.clone(), end);
        let (agent, name) = (self.clone(), name.clone());
        tokio::spawn(async move {
            // A second past the edge's own end: the edge counts from the
            // moment the request reached it.
            tokio::time::sleep(ttl + TTL_GRACE).await;
            // Checked with the operations held: a preview made again
            // meanwhile (a new end, or none) stays.
            let _op = agent.shared.ops.lock().await;
            if agent.ends().get(&name) == Some(&end) {
                info!(%name, "the preview's time to live is over; taking it down");
                if let Err(err) = agent.take_down(&name).await {
                    warn!(%name, %err, "could not take the ended preview down");
                }
            }
        });
        Some(end)
    }

    pub fn list(&self) -> PreviewList {
        let entries: Vec<(PreviewName, Port)> = self
            .previews()
            .iter()
            .map(|(n, p)| (n.clone(), *p))
            .collect();
        PreviewList {
            connected: self.link().is_ok(),
            edge: self.connected_edge().map(|edge| edge.to_string()),
            previews: entries
                .into_iter()
                .map(|(name, port)| PreviewEntry {
                    url: self.url_for(&name),
                    name: name.to_string(),
                    port: port.get(),
                    expires_at: self.ends().get(&name).copied().map(rfc3339),
                    protected: self.salts().contains_key(&name),
                    hints: self.shared.log.hints(&name),
                })
                .collect(),
        }
    }
}

/// How a preview is made (see [`Agent::preview_with`]).
#[derive(Debug, Clone)]
pub struct PreviewOptions {
    /// Probe the port for the usual mistakes.
    pub probe: bool,
    /// Take the preview down this long from now.
    pub ttl: Option<Duration>,
    /// Only visitors with a share link get in (`Some(true)`), or everyone
    /// (`Some(false)`); `None` keeps what the preview had (a new one is
    /// public).
    pub protect: Option<bool>,
    /// Seconds the share link of a protected preview works; `None`: the
    /// default (7 days).
    pub share_secs: Option<u32>,
}

impl Default for PreviewOptions {
    fn default() -> Self {
        Self {
            probe: true,
            ttl: None,
            protect: None,
            share_secs: None,
        }
    }
}

/// How long past a preview's end the agent takes it down (see
/// [`Agent::set_end`]).
const TTL_GRACE: Duration = Duration::from_secs(1);

/// `at` as RFC 3339, in UTC.
fn rfc3339(at: SystemTime) -> String {
    time::OffsetDateTime::from(at)
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// The authority (`host[:port]`) of a preview's URL: the Host its
/// visitors send.
fn authority(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    rest.split('/').next().unwrap_or(rest)
}

fn unexpected(msg: EdgeMessage) -> PreviewError {
    PreviewError::Edge(Failure::new(
        ErrorCode::Protocol,
        format!("unexpected answer from the edge: {msg:?}"),
    ))
}

impl Link {
    /// The edge address this connection goes to.
    pub fn edge(&self) -> &EdgeTarget {
        &self.edge
    }

    async fn call(&self, request: Request) -> Result<EdgeMessage, PreviewError> {
        let (reply, answer) = oneshot::channel();
        self.calls
            .send(Call { request, reply })
            .await
            .map_err(|_| PreviewError::Lost)?;
        answer.await.map_err(|_| PreviewError::Lost)?
    }
}

/// Returns once the edge has sent nothing at all for a `keep_alive`
/// interval and `max(SILENCE_MARGIN, 4 RTT)` more, with how long that was.
/// QUIC has the agent ping its edge after a keep-alive interval with
/// nothing received, and the edge acknowledges at once (the agent asks it
/// to), so a live edge is never silent that long; a killed one is found in
/// seconds instead of at QUIC's idle timeout (12 s).
async fn edge_silent(conn: &quinn::Connection, keep_alive: Duration) -> Duration {
    let mut heard = conn.stats().udp_rx.datagrams;
    let mut since = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(SILENCE_TICK).await;
        let now_heard = conn.stats().udp_rx.datagrams;
        if now_heard != heard {
            (heard, since) = (now_heard, tokio::time::Instant::now());
            continue;
        }
        let limit = keep_alive + SILENCE_MARGIN.max(conn.rtt() * 4);
        if since.elapsed() >= limit {
            return since.elapsed();
        }
    }
}

/// Sends control requests one at a time and matches each answer by id.
/// When the control stream fails, the connection goes too, so the agent
/// reconnects rather than keep a connection it cannot control.
async fn control_loop(
    conn: quinn::Connection,
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    mut calls: mpsc::Receiver<Call>,
) {
    let mut next_id = 1u64;
    while let Some(call) = calls.recv().await {
        let id = next_id;
        next_id += 1;
        let msg = match call.request {
            Request::Open {
                port,
                name,
                ttl_secs,
                protect,
            } => AgentMessage::Open {
                id,
                port,
                name,
                ttl_secs,
                protect,
            },
            Request::Close { name } => AgentMessage::Close { id, name },
            Request::ShareLink { name, expires_secs } => AgentMessage::ShareLink {
                id,
                name,
                expires_secs,
            },
        };
        let answer = tokio::time::timeout(ANSWER_TIMEOUT, async {
            write_frame(&mut send, &msg).await.ok()?;
            read_frame::<EdgeMessage, _>(&mut recv).await.ok()?
        })
        .await;
        let result = match answer {
            Ok(Some(EdgeMessage::Error {
                id: Some(answered),
                failure,
            })) if answered == id => Err(PreviewError::Edge(failure)),
            Ok(Some(
                msg @ (EdgeMessage::Opened { id: answered, .. }
                | EdgeMessage::Closed { id: answered, .. }
                | EdgeMessage::Shared { id: answered, .. }),
            )) if answered == id => Ok(msg),
            Ok(Some(EdgeMessage::Error { id: None, failure })) => {
                warn!(reason = %failure, "the edge reported an error");
                Err(PreviewError::Edge(failure))
            }
            _ => Err(PreviewError::Lost),
        };
        let lost = matches!(result, Err(PreviewError::Lost));
        let _ = call.reply.send(result);
        if lost {
            conn.close(close_code::NORMAL.into(), b"control stream failed");
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_with_jitter_up_to_the_cap() {
        let mut backoff = Backoff::default();
        let mut ceiling = BACKOFF_START;
        for _ in 0..12 {
            let delay = backoff.next_delay();
            assert!(
                delay >= ceiling / 2 && delay <= ceiling,
                "{delay:?} outside {ceiling:?}"
            );
            ceiling = (ceiling * 2).min(BACKOFF_CAP);
        }
        let mut refused = Backoff::default();
        refused.slowest();
        assert!(refused.next_delay() >= BACKOFF_CAP / 2);
    }

    #[test]
    fn the_jitter_spreads_agents_out() {
        let delays: std::collections::HashSet<_> =
            (0..50).map(|_| Backoff::default().next_delay()).collect();
        assert!(delays.len() > 40, "{} distinct delays of 50", delays.len());
    }
}
