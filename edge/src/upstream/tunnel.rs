//! The agents' side of the edge: one QUIC connection per agent, its Hello,
//! then open and close requests on the control stream.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use calvin_proto::io::{read_frame, write_frame};
use calvin_proto::{
    AgentMessage, EdgeMessage, ErrorCode, Failure, Hello, PROTOCOL_VERSION, Port, Preview,
    PreviewName, Rejected, SHARE_DEFAULT_SECS, SHARE_MAX_SECS, SHARE_MIN_SECS, ShareSalt, Welcome,
};
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::accounts::{AccountId, Accounts};
use crate::counts::{Counts, HandshakeFailure};
use crate::share::{Protection, ShareKey};
use crate::upstream::claims::{Claim, NameClaims, NameState, StoreRefusal};
use crate::upstream::route_table::{ClaimError, RouteId, RouteTable};
use crate::upstream::{AgentLink, Upstream, UpstreamSettings};

/// QUIC application close codes (a wire fact, in proto).
pub use calvin_proto::close_code;

/// What every agent connection shares.
pub(crate) struct AgentHub {
    pub routes: Arc<RouteTable<Arc<Upstream>>>,
    pub accounts: Accounts,
    pub domain: String,
    pub url_template: String,
    pub upstream: Arc<UpstreamSettings>,
    /// Time from the connection's start to its Hello.
    pub hello_timeout: Duration,
    /// The QUIC configuration for agents on this machine (jumbo packets).
    pub loopback_quic: Arc<quinn::ServerConfig>,
    /// Requests under way per account, over all of its agents.
    pub account_streams: dashmap::DashMap<AccountId, Arc<std::sync::atomic::AtomicUsize>>,
    /// Unknown tokens per source, to refuse token guessing.
    pub guesses: crate::guesses::Guesses,
    /// Agents welcomed and not yet gone (for the health report).
    pub connected: Arc<std::sync::atomic::AtomicUsize>,
    /// Their connections (for the metrics' paths), and the packets lost by
    /// those that ended: under one lock, taken once per agent connection
    /// and per scrape, so a scrape never sees a connection's losses move
    /// from one to the other half done (the counter would go down).
    pub connections: std::sync::Mutex<Connections>,
    pub counts: Counts,
    /// What protected previews' share tokens are made and checked with
    /// (the cluster's, in a cluster).
    pub share_key: Arc<ShareKey>,
    /// The cluster's store, when this edge is one of several: names are
    /// claimed there first (see [`crate::upstream::claims`]).
    pub store: Option<Arc<dyn NameClaims>>,
}

/// The agents' connections by QUIC's stable id, and the packets lost by
/// those that ended.
#[derive(Default)]
pub(crate) struct Connections {
    open: HashMap<usize, OpenConnection>,
    lost_by_ended: u64,
}

/// An agent's connection, the address its packets came from when last
/// looked at (see [`AgentHub::follow_paths`]), and its span, for what is
/// logged about it from outside its task.
struct OpenConnection {
    conn: quinn::Connection,
    remote: SocketAddr,
    span: tracing::Span,
}

impl AgentHub {
    /// The open connections' RTTs, and the packets lost by every agent
    /// connection, open or ended.
    pub fn paths(&self) -> (Vec<Duration>, u64) {
        let connections = self.connections.lock().unwrap_or_else(|e| e.into_inner());
        let mut lost = connections.lost_by_ended;
        let rtts = connections
            .open
            .values()
            .map(|open| {
                lost += open.conn.stats().path.lost_packets;
                open.conn.rtt()
            })
            .collect();
        (rtts, lost)
    }

    /// Logs and counts each agent connection whose path changed since the
    /// last call: its packets now come from another address or port (a
    /// NAT that rebound it, a laptop that moved to another network), and
    /// QUIC moved the connection there (migration, which the edge's
    /// server configuration allows). quinn tells of no such event, so the
    /// sweeper calls this about every second ([`PATH_SWEEP`]): one lock,
    /// and a look at each connection's address. A change back and forth
    /// within one interval goes unseen.
    pub fn follow_paths(&self) {
        let mut moved = Vec::new();
        {
            let mut connections = self.connections.lock().unwrap_or_else(|e| e.into_inner());
            for open in connections.open.values_mut() {
                let now = open.conn.remote_address();
                if now != open.remote {
                    moved.push((open.span.clone(), open.remote, now));
                    open.remote = now;
                }
            }
        }
        for (span, from, to) in moved {
            self.counts.agent_path_changed();
            span.in_scope(|| info!(%from, %to, "agent path changed"));
        }
    }

    /// Called in the agent's span.
    fn connection_opened(&self, conn: &quinn::Connection) {
        let open = OpenConnection {
            conn: conn.clone(),
            remote: conn.remote_address(),
            span: tracing::Span::current(),
        };
        let mut connections = self.connections.lock().unwrap_or_else(|e| e.into_inner());
        connections.open.insert(conn.stable_id(), open);
    }

    fn connection_ended(&self, conn: &quinn::Connection) {
        let mut connections = self.connections.lock().unwrap_or_else(|e| e.into_inner());
        if connections.open.remove(&conn.stable_id()).is_some() {
            connections.lost_by_ended += conn.stats().path.lost_packets;
        }
    }

    /// Requests under way to origins, over every account.
    pub fn open_streams(&self) -> u64 {
        self.account_streams
            .iter()
            .map(|n| n.load(std::sync::atomic::Ordering::Relaxed) as u64)
            .sum()
    }
}

/// How often the edge looks whether an agent's connection moved to
/// another path (see [`AgentHub::follow_paths`]).
pub(crate) const PATH_SWEEP: Duration = Duration::from_secs(1);

/// Hands each connection `endpoint` accepts to `serve` until `stop`
/// turns true or the endpoint closes.
pub(crate) async fn accept_until(
    endpoint: &quinn::Endpoint,
    mut stop: watch::Receiver<bool>,
    mut serve: impl FnMut(quinn::Incoming),
) {
    loop {
        let incoming = tokio::select! {
            incoming = endpoint.accept() => incoming,
            _ = stop.wait_for(|s| *s) => break,
        };
        let Some(incoming) = incoming else { break };
        serve(incoming);
    }
}

/// An agent's connection (ALPN `calvin/1`): its hello, then its session
/// until it ends.
pub(crate) async fn serve_agent(hub: Arc<AgentHub>, conn: quinn::Connection) {
    let failed = |why| hub.counts.handshake_failed(why);
    // An agent opens no uni stream: of the three every connection may open
    // at its handshake (for HTTP/3's sake), any it opens is refused, and
    // none is allowed after them.
    conn.set_max_concurrent_uni_streams(0u32.into());
    tokio::spawn(refuse_uni_streams(conn.clone()));
    let hello = tokio::time::timeout(hub.hello_timeout, async {
        let (send, mut recv) = conn.accept_bi().await.ok()?;
        let msg = read_frame::<AgentMessage, _>(&mut recv).await;
        Some((send, recv, msg))
    })
    .await;
    let (mut send, mut recv, hello) = match hello {
        Ok(Some((send, recv, Ok(Some(AgentMessage::Hello(hello)))))) => (send, recv, hello),
        Ok(Some((mut send, _, _))) => {
            failed(HandshakeFailure::AgentProtocol);
            let why = Failure::new(ErrorCode::Protocol, "the first message must be a hello");
            return refuse(&conn, &mut send, why).await;
        }
        Ok(None) => {
            failed(HandshakeFailure::AgentProtocol);
            return debug!("connection ended before its hello");
        }
        Err(_) => {
            failed(HandshakeFailure::AgentTimeout);
            conn.close(close_code::PROTOCOL.into(), b"no hello in time");
            return debug!("no hello in time");
        }
    };
    let account = match authorize(&hub, conn.remote_address().ip(), &hello) {
        Ok(account) => account,
        Err(why) => {
            failed(match why.code {
                ErrorCode::UnsupportedVersion => HandshakeFailure::AgentVersion,
                ErrorCode::TooManyAttempts => HandshakeFailure::AgentGuessing,
                _ => HandshakeFailure::AgentBadToken,
            });
            warn!(reason = %why, "agent refused");
            return refuse(&conn, &mut send, why).await;
        }
    };
    tracing::Span::current().record("account", account.as_str());
    let streams = hub
        .account_streams
        .entry(account.clone())
        .or_default()
        .clone();
    let bandwidth = hub.upstream.bandwidth.for_account(&account);
    let link = AgentLink::new(conn.clone(), hub.upstream.clone(), streams, bandwidth);
    let mut session = Session {
        hub,
        conn,
        link,
        account,
        held: HashMap::new(),
        protected: HashMap::new(),
        control_rate: governor::RateLimiter::direct(
            governor::Quota::per_second(
                std::num::NonZeroU32::new(CONTROL_PER_SECOND).unwrap_or(std::num::NonZeroU32::MIN),
            )
            .allow_burst(
                std::num::NonZeroU32::new(CONTROL_BURST).unwrap_or(std::num::NonZeroU32::MIN),
            ),
        ),
    };
    // A cluster edge without its lease cannot claim: the agent is told
    // to try again (another edge, or this one later) rather than have its
    // previews refused one by one, which it would drop.
    if let Some(store) = &session.hub.store
        && !store.can_claim()
    {
        let why = Failure::new(
            ErrorCode::Unavailable,
            "this edge cannot reach the cluster's store (etcd) now; try another edge or again later",
        );
        warn!(reason = %why, "agent refused");
        return refuse(&session.conn, &mut send, why).await;
    }
    let welcome = match session.welcome(hello.previews).await {
        Ok(welcome) => welcome,
        Err(why) => {
            // What it claimed before the store failed goes offline again.
            warn!(reason = %why, "agent refused");
            session.let_go().await;
            return refuse(&session.conn, &mut send, why).await;
        }
    };
    session
        .hub
        .connected
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    session.hub.connection_opened(&session.conn);
    info!(
        account = %session.account,
        restored = welcome.restored.len(),
        rejected = welcome.rejected.len(),
        "agent connected"
    );
    if write_frame(&mut send, &EdgeMessage::Welcome(welcome))
        .await
        .is_ok()
    {
        session.serve(&mut send, &mut recv).await;
    }
    // Without its control stream an agent can no longer be told anything:
    // end the connection, so the agent reconnects instead of lingering.
    session
        .conn
        .close(close_code::NORMAL.into(), b"control stream ended");
    session.end().await;
}

/// Stops every uni stream an agent opens, until its connection ends.
async fn refuse_uni_streams(conn: quinn::Connection) {
    while let Ok(mut stream) = conn.accept_uni().await {
        let _ = stream.stop(close_code::PROTOCOL.into());
    }
}

/// The account a hello from `source` speaks for, or why it is refused. A
/// source that has used up its unknown tokens is refused with its token
/// unchecked, so that it learns nothing until its window ends.
fn authorize(hub: &AgentHub, source: IpAddr, hello: &Hello) -> Result<AccountId, Failure> {
    if hello.version != PROTOCOL_VERSION {
        return Err(Failure::new(
            ErrorCode::UnsupportedVersion,
            format!(
                "this edge speaks protocol {PROTOCOL_VERSION}; the agent speaks {}",
                hello.version
            ),
        ));
    }
    if let Some(wait) = hub.guesses.wait(source) {
        return Err(Failure::new(
            ErrorCode::TooManyAttempts,
            format!(
                "{} unknown tokens from {source} within {} s: try again in {} s",
                hub.guesses.max(),
                hub.guesses.window().as_secs(),
                wait.as_secs() + 1
            ),
        ));
    }
    hub.accounts.authenticate(&hello.token).ok_or_else(|| {
        hub.guesses.unknown(source);
        Failure::new(ErrorCode::BadToken, "the edge does not know this token")
    })
}

/// Ends `send` and waits (a second at most) until the agent has it all: a
/// connection closed at once drops what is still in flight, such as the
/// message saying why.
async fn delivered(send: &mut quinn::SendStream) {
    let _ = send.finish();
    let _ = tokio::time::timeout(Duration::from_secs(1), send.stopped()).await;
}

/// Sends the refusal, lets the agent read it, then closes.
async fn refuse(conn: &quinn::Connection, send: &mut quinn::SendStream, why: Failure) {
    let reason = why.message.clone();
    if write_frame(send, &EdgeMessage::Refused(why)).await.is_ok() {
        let _ = send.finish();
        let _ = tokio::time::timeout(Duration::from_secs(2), conn.closed()).await;
    }
    conn.close(close_code::REFUSED.into(), reason.as_bytes());
}

/// One authenticated agent connection and the names it serves.
struct Session {
    hub: Arc<AgentHub>,
    conn: quinn::Connection,
    link: Arc<AgentLink>,
    account: AccountId,
    /// The names it serves: their binding here, and their claim in the
    /// cluster's store when there is one.
    held: HashMap<PreviewName, (RouteId, Option<Claim>)>,
    /// The salts of those that are protected.
    protected: HashMap<PreviewName, ShareSalt>,
    /// Control messages this agent may still send at once.
    control_rate: governor::DefaultDirectRateLimiter,
}

/// Control messages (preview, unpreview) an agent may send per second, and
/// at once: a person or a tool previews a few ports a minute; a flood cuts
/// the agent off, and only it.
const CONTROL_PER_SECOND: u32 = 50;
const CONTROL_BURST: u32 = 200;

impl Session {
    /// The names the hello asks for, claimed again. A claim the cluster's
    /// store could not answer fails the whole hello (see `serve_agent`).
    async fn welcome(&mut self, previews: Vec<Preview>) -> Result<Welcome, Failure> {
        let mut restored = Vec::new();
        let mut rejected = Vec::new();
        for preview in previews {
            let opened = self
                .open(
                    Some(preview.name.clone()),
                    preview.port,
                    preview.ttl_secs,
                    preview.protect,
                )
                .await;
            match opened {
                Ok(p) => restored.push(p),
                Err(failure) if failure.code == ErrorCode::Unavailable => return Err(failure),
                Err(failure) => rejected.push(Rejected {
                    name: preview.name,
                    failure,
                }),
            }
        }
        Ok(Welcome {
            account: self.account.to_string(),
            domain: self.hub.domain.clone(),
            url_template: self.hub.url_template.clone(),
            restored,
            rejected,
        })
    }

    /// Answers control requests until the agent stops sending them.
    async fn serve(&mut self, send: &mut quinn::SendStream, recv: &mut quinn::RecvStream) {
        loop {
            let msg = match read_frame::<AgentMessage, _>(recv).await {
                Ok(Some(msg)) => msg,
                Ok(None) => return,
                Err(err) => {
                    if self.conn.close_reason().is_none() {
                        warn!(%err, "bad control message; closing");
                        let failure = Failure::new(ErrorCode::Protocol, err.to_string());
                        let _ = write_frame(send, &EdgeMessage::Error { id: None, failure }).await;
                        delivered(send).await;
                        self.conn
                            .close(close_code::PROTOCOL.into(), b"bad control message");
                    }
                    return;
                }
            };
            if self.control_rate.check().is_err() {
                warn!("control message flood; closing");
                let failure = Failure::new(
                    ErrorCode::TooManyRequests,
                    format!(
                        "more than {CONTROL_BURST} control messages at once or {CONTROL_PER_SECOND} a second"
                    ),
                );
                let _ = write_frame(send, &EdgeMessage::Error { id: None, failure }).await;
                delivered(send).await;
                self.conn
                    .close(close_code::PROTOCOL.into(), b"too many control messages");
                return;
            }
            let answer = match msg {
                AgentMessage::Open {
                    id,
                    port,
                    name,
                    ttl_secs,
                    protect,
                } => match self.open(name, port, ttl_secs, protect).await {
                    Ok(preview) => EdgeMessage::Opened { id, preview },
                    Err(failure) => EdgeMessage::Error {
                        id: Some(id),
                        failure,
                    },
                },
                AgentMessage::Close { id, name } => match self.close(&name).await {
                    Ok(()) => EdgeMessage::Closed { id, name },
                    Err(failure) => EdgeMessage::Error {
                        id: Some(id),
                        failure,
                    },
                },
                AgentMessage::ShareLink {
                    id,
                    name,
                    expires_secs,
                } => match self.share_link(&name, expires_secs) {
                    Ok((token, expires_unix)) => EdgeMessage::Shared {
                        id,
                        name,
                        token,
                        expires_unix,
                    },
                    Err(failure) => EdgeMessage::Error {
                        id: Some(id),
                        failure,
                    },
                },
                AgentMessage::Hello(_) => EdgeMessage::Error {
                    id: None,
                    failure: Failure::new(ErrorCode::Protocol, "hello was already sent"),
                },
            };
            if write_frame(send, &answer).await.is_err() {
                return;
            }
        }
    }

    /// A share token for the protected preview `name`, valid for
    /// `expires_secs`: (token, expiry in Unix seconds).
    fn share_link(
        &self,
        name: &PreviewName,
        expires_secs: Option<u32>,
    ) -> Result<(String, u64), Failure> {
        let secs = expires_secs.unwrap_or(SHARE_DEFAULT_SECS);
        if !(SHARE_MIN_SECS..=SHARE_MAX_SECS).contains(&secs) {
            return Err(Failure::new(
                ErrorCode::Protocol,
                format!("expires_secs must be from {SHARE_MIN_SECS} to {SHARE_MAX_SECS}"),
            ));
        }
        if !self.held.contains_key(name) {
            return Err(Failure::new(
                ErrorCode::UnknownName,
                format!("this agent has no preview named {name}"),
            ));
        }
        let salt = self.protected.get(name).ok_or_else(|| {
            Failure::new(
                ErrorCode::Protocol,
                format!("preview {name} is not protected: it needs no share link"),
            )
        })?;
        let protection = Protection::new(self.hub.share_key.clone(), salt.clone());
        Ok(protection.mint(name, secs))
    }

    /// Binds a name for the agent; with `ttl_secs`, the preview ends
    /// that many seconds from now (see [`RouteTable::set_ends`]); with
    /// `protect`, only visitors with a share token get through.
    async fn open(
        &mut self,
        name: Option<PreviewName>,
        port: Port,
        ttl_secs: Option<u32>,
        protect: Option<ShareSalt>,
    ) -> Result<Preview, Failure> {
        if ttl_secs.is_some_and(|ttl| !(1..=MAX_TTL_SECS).contains(&ttl)) {
            return Err(Failure::new(
                ErrorCode::Protocol,
                format!("ttl_secs must be from 1 to {MAX_TTL_SECS}"),
            ));
        }
        let ends =
            ttl_secs.map(|ttl| std::time::SystemTime::now() + Duration::from_secs(ttl.into()));
        let name = match self.hub.store.clone() {
            Some(store) => {
                self.open_in_store(&*store, name, port, ends, protect.clone())
                    .await?
            }
            None => self.open_here(name, port, protect.clone())?,
        };
        debug!(%name, %port, protected = protect.is_some(), "preview opened");
        self.hub.routes.set_ends(&name, ends.map(instant_at));
        match &protect {
            Some(salt) => self.protected.insert(name.clone(), salt.clone()),
            None => self.protected.remove(&name),
        };
        Ok(Preview {
            name,
            port,
            ttl_secs,
            protect,
        })
    }

    /// An edge on its own: its table decides who has the name.
    fn open_here(
        &mut self,
        name: Option<PreviewName>,
        port: Port,
        protect: Option<ShareSalt>,
    ) -> Result<PreviewName, Failure> {
        let key = &self.hub.share_key;
        let (name, id) = self
            .hub
            .routes
            .claim(name, &self.account, |name, _| {
                let protection = protect.map(|salt| Protection::new(key.clone(), salt));
                Upstream::new(name.clone(), port, self.link.clone(), protection)
            })
            .map_err(claim_failure)?;
        self.held.insert(name.clone(), (id, None));
        Ok(name)
    }

    /// The store decides who has the name (its transaction), then the
    /// table here binds it. The per-account cap is checked first, here.
    async fn open_in_store(
        &mut self,
        store: &dyn NameClaims,
        name: Option<PreviewName>,
        port: Port,
        ends: Option<std::time::SystemTime>,
        protect: Option<ShareSalt>,
    ) -> Result<PreviewName, Failure> {
        let routes = &self.hub.routes;
        routes
            .may_claim(name.as_ref(), &self.account)
            .map_err(claim_failure)?;
        let (name, claim) = match name {
            Some(name) => {
                let claim = store
                    .claim(&name, &self.account, port, ends, protect.clone())
                    .await
                    .map_err(store_failure)?;
                (name, claim)
            }
            None => {
                let mut fresh = None;
                for _ in 0..GENERATE_ATTEMPTS {
                    let name = PreviewName::random();
                    if routes.changed(&name).is_some() {
                        continue;
                    }
                    match store
                        .claim(&name, &self.account, port, ends, protect.clone())
                        .await
                    {
                        Ok(claim) => {
                            fresh = Some((name, claim));
                            break;
                        }
                        Err(StoreRefusal::Taken(_)) => continue,
                        Err(refusal) => return Err(store_failure(refusal)),
                    }
                }
                fresh.ok_or_else(|| claim_failure(ClaimError::NoFreeName))?
            }
        };
        let link = self.link.clone();
        let protection = protect.map(|salt| Protection::new(self.hub.share_key.clone(), salt));
        let bound = routes.claim_granted(name.clone(), &self.account, |name, _| {
            Upstream::new(name.clone(), port, link, protection)
        });
        match bound {
            Ok(id) => {
                self.held.insert(name.clone(), (id, Some(claim)));
                Ok(name)
            }
            Err(err) => {
                store
                    .end(&name, &claim, &self.account, NameState::Released)
                    .await;
                Err(claim_failure(err))
            }
        }
    }

    async fn close(&mut self, name: &PreviewName) -> Result<(), Failure> {
        let Some((id, claim)) = self.held.remove(name) else {
            return Err(Failure::new(
                ErrorCode::UnknownName,
                format!("this agent has no preview named {name}"),
            ));
        };
        self.hub.routes.release(name, id);
        self.protected.remove(name);
        // Even when another binding replaced this one here (the agent
        // moved): the store ends only this claim's route, if it is still
        // there, and this edge stops putting it again.
        if let (Some(store), Some(claim)) = (&self.hub.store, claim) {
            store
                .end(name, &claim, &self.account, NameState::Released)
                .await;
        }
        debug!(%name, "preview closed");
        Ok(())
    }

    /// The agent is gone: its names answer "offline" and stay reserved.
    async fn end(self) {
        self.let_go().await;
        self.hub
            .connected
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        self.hub.connection_ended(&self.conn);
        info!(account = %self.account, previews = self.held.len(), "agent disconnected");
    }

    /// Its names read offline and stay reserved.
    async fn let_go(&self) {
        // Every name reads offline here first; then the store, where each
        // end may wait on etcd.
        for (name, (id, _)) in &self.held {
            self.hub.routes.disconnect(name, *id);
        }
        if let Some(store) = &self.hub.store {
            for (name, (_, claim)) in &self.held {
                if let Some(claim) = claim {
                    store
                        .end(name, claim, &self.account, NameState::Offline)
                        .await;
                }
            }
        }
    }
}

/// The longest time to live a preview may be made with: 30 days.
pub const MAX_TTL_SECS: u32 = 30 * 86_400;

/// The instant of this process's clock at wall-clock time `at`.
pub(crate) fn instant_at(at: std::time::SystemTime) -> std::time::Instant {
    let now = std::time::SystemTime::now();
    match at.duration_since(now) {
        Ok(ahead) => {
            let now = std::time::Instant::now();
            // Past what the clock holds: a year, as good as never here.
            now.checked_add(ahead)
                .unwrap_or(now + Duration::from_secs(86_400 * 365))
        }
        Err(past) => std::time::Instant::now()
            .checked_sub(past.duration())
            .unwrap_or_else(std::time::Instant::now),
    }
}

/// How many random names a cluster edge tries in the store.
const GENERATE_ATTEMPTS: usize = 16;

fn store_failure(refusal: StoreRefusal) -> Failure {
    let code = match refusal {
        StoreRefusal::Taken(_) => ErrorCode::NameTaken,
        StoreRefusal::Unavailable(_) => ErrorCode::Unavailable,
    };
    Failure::new(code, refusal.to_string())
}

fn claim_failure(err: ClaimError) -> Failure {
    let code = match err {
        ClaimError::Taken(_) => ErrorCode::NameTaken,
        ClaimError::LimitReached(_) => ErrorCode::LimitReached,
        ClaimError::NoFreeName => ErrorCode::Internal,
    };
    Failure::new(code, err.to_string())
}
