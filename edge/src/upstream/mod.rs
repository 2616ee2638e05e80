//! The way to one preview's origin: HTTP/1.1 over QUIC bidi streams to its
//! agent, one stream per upstream connection, kept in a pool per preview.
//!
//! The pool belongs to the route, not to a host key: when a name is taken
//! down or moves to another agent, its route and pool go with it, so a
//! pooled connection can never serve a request for the binding that
//! replaced it. Idle connections expire, and an agent's previews share one
//! idle budget well under the agent's stream limit, so idle connections can
//! never take the streams that new requests need.

pub mod claims;
pub mod name_store;
pub mod origin;
pub mod route_table;
#[cfg(test)]
mod tests;
pub mod tunnel;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use std::time::Instant;

use calvin_proto::io::{read_frame, write_frame};
use calvin_proto::{Port, PreviewName, StreamAnswer, StreamHeader, StreamRefusal};
use http::Response;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tokio::sync::watch;

use self::origin::{Connection, OriginBody, OriginError, OriginRequest};
use crate::bandwidth::{Bandwidth, Buckets, Throttled};
use crate::share::Protection;

/// Timeouts and sizes of the upstream side (from [`crate::Limits`]).
#[derive(Debug, Clone)]
pub struct UpstreamSettings {
    /// Time for the agent to answer a new stream (it connects to the port
    /// meanwhile). Longer than the QUIC idle timeout, so a request to an
    /// agent that died silently ends as "offline", not as a timeout.
    pub connect_timeout: Duration,
    /// Idle connections kept per preview...
    pub max_idle_per_preview: usize,
    /// ...and per agent, over all its previews.
    pub max_idle_per_agent: usize,
    /// How long an idle connection is kept.
    pub idle_timeout: Duration,
    /// How long a request waits for a server that refuses connections.
    pub reconnect_wait: Duration,
    /// Requests under way at once over all of an account's agents.
    pub max_streams_per_account: usize,
    /// Each account's bandwidth (see [`crate::bandwidth`]).
    pub bandwidth: Buckets,
}

#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("the agent is not connected")]
    AgentOffline,
    #[error("nothing is listening on port {0}")]
    NotListening(Port),
    #[error("{0}")]
    Refused(String),
    #[error("the agent did not answer within {0} s")]
    ConnectTimeout(u64),
    #[error("the tunnel failed: {0}")]
    Tunnel(String),
    #[error("{0}")]
    Origin(#[from] OriginError),
    #[error("the account has {0} requests under way, its most")]
    AccountBusy(usize),
}

/// A request that failed; `again` is the request to send once the agent
/// is back, when that is safe (see [`Upstream::send`]).
pub struct SendFailed {
    pub error: UpstreamError,
    pub again: Option<Outgoing>,
}

/// A request on its way to an origin, its framing decided, boxed: it
/// passes through several futures before a connection takes it, and each
/// would hold a copy of it (a request's future grew to kilobytes, copied
/// on every move).
pub type Outgoing = Box<OriginRequest>;

/// One agent connection, as its previews' upstreams share it.
pub struct AgentLink {
    conn: quinn::Connection,
    settings: Arc<UpstreamSettings>,
    /// Idle upstream connections over all of this agent's previews.
    idle: AtomicUsize,
    /// Things waiting on the agent now, whether a task watches it, and
    /// whether it found the agent gone.
    waiting: AtomicUsize,
    watching: AtomicBool,
    dead: watch::Sender<bool>,
    /// Requests under way over all of the account's agents (shared by its
    /// links).
    account_streams: Arc<AtomicUsize>,
    /// The account's bandwidth, when capped (shared by its links too).
    bandwidth: Option<Arc<Bandwidth>>,
    /// Whether `conn` goes to another edge of the cluster, which relays
    /// to the agent, rather than to the agent.
    peer: bool,
}

/// Something waiting on an agent; see [`AgentLink::wait_on`].
pub struct Waiting {
    link: Arc<AgentLink>,
    dead: watch::Receiver<bool>,
    /// Whether it counts as a request under way for the account (a relay
    /// for another edge does not: that edge counts it).
    counted: bool,
}

impl Waiting {
    /// Resolves if the agent stops answering.
    pub async fn gone(&mut self) {
        let _ = self.dead.wait_for(|dead| *dead).await;
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.link.waiting.fetch_sub(1, Ordering::AcqRel);
        if self.counted {
            self.link.account_streams.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// How often a request waiting on an agent looks at what the agent sent.
const LIVENESS_TICK: Duration = Duration::from_millis(250);
/// Silence past which a probed agent is taken for dead, at the least.
const LIVENESS_FLOOR: Duration = Duration::from_secs(1);
/// The same for another edge of the cluster: its connection carries every
/// account's requests, so a burst of loss on a long path between edges
/// must not end them all.
const PEER_LIVENESS_FLOOR: Duration = Duration::from_secs(3);

/// Idle upstream connections kept per link through another edge: each is
/// a stream the holding edge relays to the agent, whose streams are shared
/// by every edge of the cluster (`MAX_DATA_STREAMS`).
const PEER_MAX_IDLE: usize = 32;

impl AgentLink {
    /// `account_streams` counts the requests under way over all of the
    /// account's agents; `bandwidth` is their bucket, if capped.
    pub fn new(
        conn: quinn::Connection,
        settings: Arc<UpstreamSettings>,
        account_streams: Arc<AtomicUsize>,
        bandwidth: Option<Arc<Bandwidth>>,
    ) -> Arc<Self> {
        Self::make(conn, settings, account_streams, bandwidth, false)
    }

    /// A link to the agent through another edge of the cluster, over
    /// `conn` to that edge (see [`crate::cluster::peer`]).
    pub fn through_peer(
        conn: quinn::Connection,
        settings: Arc<UpstreamSettings>,
        account_streams: Arc<AtomicUsize>,
        bandwidth: Option<Arc<Bandwidth>>,
    ) -> Arc<Self> {
        Self::make(conn, settings, account_streams, bandwidth, true)
    }

    fn make(
        conn: quinn::Connection,
        settings: Arc<UpstreamSettings>,
        account_streams: Arc<AtomicUsize>,
        bandwidth: Option<Arc<Bandwidth>>,
        peer: bool,
    ) -> Arc<Self> {
        Arc::new(Self {
            conn,
            settings,
            idle: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
            watching: AtomicBool::new(false),
            dead: watch::channel(false).0,
            account_streams,
            bandwidth,
            peer,
        })
    }

    /// The QUIC connection's stable id.
    pub fn connection_id(&self) -> usize {
        self.conn.stable_id()
    }

    /// Marks a request under way on the agent (waiting for its response
    /// head, then streaming its body) until the guard drops, unless its
    /// account already has its most under way. While anything waits, one
    /// task per agent watches that the agent still answers.
    fn wait_on(self: &Arc<Self>) -> Result<Waiting, UpstreamError> {
        let max = self.settings.max_streams_per_account;
        if self
            .account_streams
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .is_err()
        {
            return Err(UpstreamError::AccountBusy(max));
        }
        Ok(self.watched(true))
    }

    /// Keeps the agent watched (see [`Self::wait_on`]) until the guard
    /// drops; `counted`: as a request under way for the account.
    fn watched(self: &Arc<Self>, counted: bool) -> Waiting {
        self.waiting.fetch_add(1, Ordering::AcqRel);
        if !self.watching.swap(true, Ordering::AcqRel) {
            tokio::spawn(Self::watch(Arc::downgrade(self)));
        }
        Waiting {
            link: self.clone(),
            dead: self.dead.subscribe(),
            counted,
        }
    }

    /// While anything waits on the agent: whenever nothing arrived from it
    /// for a tick, the edge sends it a one-byte QUIC datagram, which its
    /// QUIC stack must acknowledge (within its ACK delay, 25 ms) whatever
    /// its application is doing. An agent that lets `max(1 s, 4 RTT)` pass
    /// with nothing at all is gone (killed, or its path dropped): its
    /// connection is closed, what waits on it fails now instead of at the
    /// 12 s idle timeout, and it reads offline.
    ///
    /// The task holds the link only while it looks (a link whose waiters
    /// are gone is dropped, and its connection with it).
    async fn watch(link: Weak<Self>) {
        let start = Instant::now();
        tokio::time::sleep(LIVENESS_TICK).await;
        let (mut heard, mut since) = match link.upgrade() {
            Some(this) => {
                this.probe();
                (this.conn.stats().udp_rx.datagrams, start)
            }
            None => return,
        };
        loop {
            tokio::time::sleep(LIVENESS_TICK).await;
            let Some(this) = link.upgrade() else {
                return;
            };
            if this.conn.close_reason().is_some() {
                return;
            }
            if this.waiting.load(Ordering::Acquire) == 0 {
                this.watching.store(false, Ordering::Release);
                // Someone who came meanwhile saw `watching` still set.
                if this.waiting.load(Ordering::Acquire) == 0
                    || this.watching.swap(true, Ordering::AcqRel)
                {
                    return;
                }
            }
            let now_heard = this.conn.stats().udp_rx.datagrams;
            if now_heard != heard {
                (heard, since) = (now_heard, Instant::now());
                continue;
            }
            let floor = if this.peer {
                PEER_LIVENESS_FLOOR
            } else {
                LIVENESS_FLOOR
            };
            let limit = floor.max(this.conn.rtt() * 4);
            if since.elapsed() >= limit {
                this.conn.close(
                    calvin_proto::close_code::UNRESPONSIVE.into(),
                    b"no answer to liveness probes",
                );
                this.dead.send_replace(true);
                return;
            }
            this.probe();
        }
    }

    /// Sends the agent an ACK-eliciting datagram.
    fn probe(&self) {
        if self.conn.max_datagram_size().is_some() {
            let _ = self.conn.send_datagram(bytes::Bytes::from_static(b"?"));
        }
    }

    /// Counts one more idle connection, unless the budget is spent.
    fn reserve_idle(&self) -> bool {
        let max = if self.peer {
            self.settings.max_idle_per_agent.min(PEER_MAX_IDLE)
        } else {
            self.settings.max_idle_per_agent
        };
        self.idle
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .is_ok()
    }

    fn release_idle(&self, n: usize) {
        self.idle.fetch_sub(n, Ordering::AcqRel);
    }
}

/// One preview's upstream: where it goes and its idle connections.
pub struct Upstream {
    name: PreviewName,
    port: Port,
    link: Arc<AgentLink>,
    /// Set on a protected preview: what a visitor's share token is
    /// checked with (see [`crate::share`]).
    protection: Option<Box<Protection>>,
    idle: Mutex<Vec<Idle>>,
}

struct Idle {
    conn: Box<Connection>,
    since: Instant,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        let idle = self.idle.get_mut().unwrap_or_else(|e| e.into_inner());
        self.link.release_idle(idle.len());
    }
}

impl Upstream {
    pub fn new(
        name: PreviewName,
        port: Port,
        link: Arc<AgentLink>,
        protection: Option<Protection>,
    ) -> Arc<Self> {
        Arc::new(Self {
            name,
            port,
            link,
            protection: protection.map(Box::new),
            idle: Mutex::new(Vec::new()),
        })
    }

    pub fn name(&self) -> &PreviewName {
        &self.name
    }

    pub fn port(&self) -> Port {
        self.port
    }

    /// What a visitor's share token is checked with, when protected.
    pub fn protection(&self) -> Option<&Protection> {
        self.protection.as_deref()
    }

    /// The account's bandwidth bucket, when capped.
    pub fn bandwidth(&self) -> Option<Arc<Bandwidth>> {
        self.link.bandwidth.clone()
    }

    /// Whether the agent's connection has ended.
    pub fn agent_gone(&self) -> bool {
        self.link.conn.close_reason().is_some()
    }

    /// Whether the agent is reached through another edge of the cluster.
    pub fn is_peer(&self) -> bool {
        self.link.peer
    }

    /// The link to the agent (or to the edge that has it).
    pub fn link(&self) -> &Arc<AgentLink> {
        &self.link
    }

    /// Relays a stream another edge of the cluster opened for this preview
    /// (`header` read from it already) to the agent: a stream to the agent
    /// with the header, then bytes both ways, as the agent's answer and
    /// the HTTP it carries come. The agent is watched meanwhile: one that
    /// stops answering resets both streams. An end or a reset on one side is passed to the
    /// other.
    pub async fn relay(
        &self,
        mut header: StreamHeader,
        mut peer_send: quinn::SendStream,
        mut peer_recv: quinn::RecvStream,
    ) {
        let refuse = |reason, message: String| StreamAnswer::Refused { reason, message };
        // The edge that asked counts the request for the account (its
        // pooled connections too would fill this edge's count while idle).
        let mut waiting = self.link.watched(false);
        let (mut send, mut recv) = match self.link.conn.open_bi().await {
            Ok(pair) => pair,
            Err(_) => {
                let answer = refuse(
                    StreamRefusal::Offline,
                    format!("the agent of {} is gone", self.name),
                );
                if write_frame(&mut peer_send, &answer).await.is_ok() {
                    let _ = peer_send.finish();
                }
                return;
            }
        };
        // This edge's port: the binding here is the authority.
        header.port = self.port;
        if write_frame(&mut send, &header).await.is_err() {
            let _ = peer_send.reset(0u32.into());
            return;
        }
        let moved = async {
            tokio::join!(
                pipe(&mut peer_recv, &mut send),
                pipe(&mut recv, &mut peer_send)
            )
        };
        tokio::select! {
            _ = moved => {}
            () = waiting.gone() => {
                let _ = send.reset(0u32.into());
                let _ = peer_send.reset(0u32.into());
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Idle>> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends `req` to the origin and returns its response head, and the
    /// guard to keep with its body as it streams (see
    /// [`AgentLink::wait_on`]). Uses an idle connection when one is ready,
    /// else opens one. A request that an idle connection could not even
    /// start (the origin had closed it) is sent again on the next.
    /// Dropped before the head arrives, it resets the connection it was
    /// using.
    ///
    /// When the agent turns out to be gone before the request was handed
    /// to a connection (it was waiting for the agent to open one), the
    /// failure carries the request back, to be sent once the agent is
    /// back: nothing of it left the edge. A request handed over is never
    /// sent again, whatever its method: the origin may have got it, and
    /// its visitor gets 502 at once.
    pub async fn send(
        self: &Arc<Self>,
        req: Outgoing,
        client: SocketAddr,
    ) -> Result<(Response<OriginBody>, Waiting), SendFailed> {
        let mut waiting = self
            .link
            .wait_on()
            .map_err(|error| SendFailed { error, again: None })?;
        let mut unsent = Some(req);
        let answered = tokio::select! {
            answered = self.send_watched(&mut unsent, client) => answered,
            () = waiting.gone() => Err(UpstreamError::AgentOffline),
        };
        match answered {
            Ok(response) => Ok((response, waiting)),
            Err(error) if self.agent_gone() || matches!(error, UpstreamError::AgentOffline) => {
                Err(SendFailed {
                    error: UpstreamError::AgentOffline,
                    again: unsent,
                })
            }
            Err(error) => Err(SendFailed { error, again: None }),
        }
    }

    /// Sends the request in `unsent`, which it leaves there until the
    /// request is handed to a connection. Its response head.
    async fn send_watched(
        self: &Arc<Self>,
        unsent: &mut Option<Outgoing>,
        client: SocketAddr,
    ) -> Result<Response<OriginBody>, UpstreamError> {
        while let Some(conn) = self.take_idle() {
            let Some(req) = unsent.take() else { break };
            match conn.exchange(req, self.clone()).await {
                Ok(response) => return Ok(response),
                // Closed under the edge before any of it went: the next.
                Err((_, Some(req))) => *unsent = Some(req),
                Err((error, None)) => return Err(error.into()),
            }
        }
        // A server that refuses connections may be restarting: nothing was
        // sent to it, so the request waits for it a while, on the agent's
        // machine (see `StreamHeader::wait_ms`): the agent's answer is the
        // event waited for.
        let deadline = Instant::now() + self.link.settings.reconnect_wait;
        let conn = Box::pin(self.connect(client, deadline)).await?;
        let Some(req) = unsent.take() else {
            return Err(UpstreamError::Tunnel("no request to send".into()));
        };
        match conn.exchange(req, self.clone()).await {
            Ok(response) => Ok(response),
            Err((error, _)) => Err(error.into()),
        }
    }

    fn take_idle(&self) -> Option<Box<Connection>> {
        // An agent whose connection has closed: its pooled streams are
        // dead, though nothing may have read their end yet. A request
        // handed to one is never sent again, so it would fail at once
        // instead of waiting for the agent to be back.
        let gone = self.agent_gone();
        let mut idle = self.lock();
        while let Some(mut entry) = idle.pop() {
            self.link.release_idle(1);
            if !gone
                && entry.since.elapsed() < self.link.settings.idle_timeout
                && entry.conn.ready()
            {
                return Some(entry.conn);
            }
        }
        None
    }

    /// Closes idle connections that have ended or been idle too long.
    pub fn expire_idle(&self) {
        let idle_timeout = self.link.settings.idle_timeout;
        let mut idle = self.lock();
        let before = idle.len();
        idle.retain_mut(|i| i.since.elapsed() < idle_timeout && i.conn.ready());
        self.link.release_idle(before - idle.len());
    }

    /// Puts a connection back in the pool once its response has ended
    /// exactly where its framing said, its request all sent. Connections
    /// past the budgets are closed.
    fn recycle(&self, conn: Box<Connection>) {
        // Expired entries go in the route table's periodic sweep, not
        // here: scanning the pool on every request cost ~2% of the edge's
        // CPU (perf, 1 KiB GETs).
        let mut idle = self.lock();
        if idle.len() < self.link.settings.max_idle_per_preview && self.link.reserve_idle() {
            idle.push(Idle {
                conn,
                since: Instant::now(),
            });
        }
    }

    /// Opens a stream to the agent and asks it to connect to the port
    /// (waiting for a server to listen until `listening_by`): a new
    /// HTTP/1.1 connection on the stream.
    async fn connect(
        self: &Arc<Self>,
        client: SocketAddr,
        listening_by: Instant,
    ) -> Result<Box<Connection>, UpstreamError> {
        let wait = listening_by.saturating_duration_since(Instant::now());
        let limit = self.link.settings.connect_timeout;
        let (send, recv) = tokio::time::timeout(limit + wait, self.open_stream(client, wait))
            .await
            .map_err(|_| UpstreamError::ConnectTimeout((limit + wait).as_secs()))??;
        Ok(Connection::new(send, recv))
    }

    async fn open_stream(
        &self,
        client: SocketAddr,
        wait: Duration,
    ) -> Result<(quinn::SendStream, quinn::RecvStream), UpstreamError> {
        let conn = &self.link.conn;
        let (mut send, mut recv) = conn
            .open_bi()
            .await
            .map_err(|_| UpstreamError::AgentOffline)?;
        let header = StreamHeader {
            name: self.name.clone(),
            port: self.port,
            client,
            wait_ms: Some(u32::try_from(wait.as_millis()).unwrap_or(u32::MAX)),
        };
        let offline_or = |what: String| {
            if conn.close_reason().is_some() {
                UpstreamError::AgentOffline
            } else {
                UpstreamError::Tunnel(what)
            }
        };
        write_frame(&mut send, &header)
            .await
            .map_err(|e| offline_or(e.to_string()))?;
        match read_frame::<StreamAnswer, _>(&mut recv).await {
            Ok(Some(StreamAnswer::Accepted)) => Ok((send, recv)),
            Ok(Some(StreamAnswer::Refused { reason, message })) => Err(match reason {
                StreamRefusal::ConnectionRefused => UpstreamError::NotListening(self.port),
                StreamRefusal::Offline => UpstreamError::AgentOffline,
                StreamRefusal::NotPreviewed | StreamRefusal::ConnectFailed => {
                    UpstreamError::Refused(message)
                }
            }),
            Ok(None) => Err(offline_or(
                "the agent closed the stream without an answer".into(),
            )),
            Err(err) => Err(offline_or(err.to_string())),
        }
    }
}

/// An origin's response body, which keeps its agent watched while it
/// streams: if the agent stops answering, its connection is closed and the
/// body fails then, instead of stalling until the QUIC idle timeout; hyper
/// aborts the visitor's response (no last chunk on HTTP/1.1, RST_STREAM on
/// HTTP/2), never ending it as if it were whole. Its frames go through the
/// account's bandwidth bucket, when capped.
pub struct ResponseBody {
    inner: Throttled<OriginBody>,
    _waiting: Waiting,
}

impl ResponseBody {
    pub fn new(inner: OriginBody, waiting: Waiting) -> Self {
        let bucket = waiting.link.bandwidth.clone();
        Self {
            inner: Throttled::new(inner, bucket),
            _waiting: waiting,
        }
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = OriginError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Moves one direction of a relayed stream: its end is passed on as an
/// end, a reset as a reset, and a reader that stops reading stops the
/// writer's source.
async fn pipe(from: &mut quinn::RecvStream, to: &mut quinn::SendStream) {
    loop {
        match from.read_chunk(usize::MAX, true).await {
            Ok(Some(chunk)) => {
                if to.write_chunk(chunk.bytes).await.is_err() {
                    let _ = from.stop(0u32.into());
                    return;
                }
            }
            Ok(None) => {
                let _ = to.finish();
                return;
            }
            Err(_) => {
                let _ = to.reset(0u32.into());
                return;
            }
        }
    }
}
