//! The visitors' side: HTTPS (HTTP/2 and HTTP/1.1 by ALPN) and plain HTTP
//! (HTTP/1.1, or HTTP/2 with prior knowledge) listeners, both serving the
//! same routing.
//!
//! Each listener has a front: a thread of its own that accepts, makes the
//! TLS handshake, and reads a connection's opening itself, within the
//! header timeout, before hyper sees it: HTTP/2's preface, or the first
//! request head and what of its body the proxy reads ahead. A connection
//! that sends nothing, or trickles, is closed there; one whose first
//! request is whole moves to the runtime serving requests, where hyper's
//! header timer covers the requests after it.

pub mod h1;
mod h2_flood;
pub(crate) mod http3;
pub(crate) mod quic;
#[cfg(test)]
mod tests;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use hyper::server::conn::http2;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;
use tracing::{debug, warn};

use crate::counts::HandshakeFailure;
use crate::front::h1::Reading;
use crate::front::h2_flood::FloodGuard;
use crate::front::http3::Http3;
use crate::h1_framing::HeadLimits;
use crate::proxy::{DrainGuard, Proxy, Scheme, Visitor};
use crate::request_body::VisitorBody;
use crate::rewind::Rewind;

/// How long a visitor has to finish the TLS handshake.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// HTTP/2 pings on an idle connection, and how long an answer may take.
const H2_KEEP_ALIVE: Duration = Duration::from_secs(20);
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// How often a failing accept is logged.
const ACCEPT_WARN_EVERY: Duration = Duration::from_secs(10);

/// Each connection's header timeout is drawn from the configured one to a
/// quarter more: a visitor always gets what is configured. Thousands of
/// slowloris connections opened together would otherwise time out together,
/// and their closes (and the attacker's reconnects) land on the edge in one
/// burst that other visitors queue behind (figure 8: p99 46x quiet, 2-3x
/// spread out).
fn header_timeout(configured: Duration) -> Duration {
    use rand::RngExt;
    configured.mul_f64(rand::rng().random_range(1.0..=1.25))
}

pub(crate) struct HttpServer {
    proxy: Arc<Proxy>,
    h2: http2::Builder<TokioExecutor>,
    header_read_timeout: Duration,
    head_limits: HeadLimits,
}

impl HttpServer {
    pub(crate) fn proxy(&self) -> &Proxy {
        &self.proxy
    }

    /// What serves HTTP/3 visitors with this server's proxy and limits.
    pub(crate) fn http3(&self, drain: DrainGuard, stop: watch::Receiver<bool>) -> Http3 {
        Http3::new(
            self.proxy.clone(),
            self.head_limits.max_head_bytes,
            self.header_read_timeout,
            drain,
            stop,
        )
    }

    /// `max_head_bytes` bounds a request head (431 past it, from the
    /// checker on HTTP/1.1 and h2 on HTTP/2); `max_headers` its header
    /// count on HTTP/1.1 (431 from the checker; the proxy counts
    /// HTTP/2's).
    pub fn new(
        proxy: Arc<Proxy>,
        header_read_timeout: Duration,
        max_head_bytes: usize,
        max_headers: usize,
    ) -> Self {
        let mut h2 = http2::Builder::new(TokioExecutor::new());
        h2.timer(TokioTimer::new())
            .max_header_list_size(u32::try_from(max_head_bytes).unwrap_or(u32::MAX))
            .keep_alive_interval(H2_KEEP_ALIVE)
            .keep_alive_timeout(H2_KEEP_ALIVE);
        Self {
            proxy,
            h2,
            header_read_timeout,
            head_limits: HeadLimits {
                max_head_bytes,
                max_headers,
            },
        }
    }

    /// Accepts visitors until `stop` turns true. Each connection holds a
    /// clone of `drain` until it ends; on `stop` it finishes its requests
    /// and closes.
    ///
    /// A thread of its own (the front) accepts the listener's visitors,
    /// makes their TLS handshakes, and reads each connection's first
    /// request head (and what of its body the proxy reads ahead); the
    /// connection moves to this runtime, to be served, once those are
    /// whole. Slowloris heads and bodies, and the accepts, handshakes and
    /// closes of their reconnects, then cost the front's thread, which the
    /// kernel schedules apart from the threads serving visitors whose
    /// requests arrived.
    pub async fn accept(
        self: Arc<Self>,
        listener: TcpListener,
        tls: Option<TlsAcceptor>,
        stop: watch::Receiver<bool>,
        drain: DrainGuard,
    ) {
        let main = tokio::runtime::Handle::current();
        let listener = match listener.into_std() {
            Ok(listener) => listener,
            Err(err) => return warn!(%err, "cannot hand the listener to the front"),
        };
        let (ended, done) = tokio::sync::oneshot::channel::<()>();
        let started = std::thread::Builder::new()
            .name("calvin-front".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build();
                match runtime {
                    Ok(runtime) => runtime.block_on(self.front(listener, tls, main, stop, drain)),
                    Err(err) => warn!(%err, "cannot start the front's runtime"),
                }
                drop(ended);
            });
        if let Err(err) = started {
            return warn!(%err, "cannot start the front's thread");
        }
        let _ = done.await;
    }

    async fn front(
        self: Arc<Self>,
        listener: std::net::TcpListener,
        tls: Option<TlsAcceptor>,
        main: tokio::runtime::Handle,
        stop: watch::Receiver<bool>,
        drain: DrainGuard,
    ) {
        let listener = match TcpListener::from_std(listener) {
            Ok(listener) => listener,
            Err(err) => return warn!(%err, "the front cannot take the listener"),
        };
        let stopping = stop.clone();
        accept_each(&listener, stopping, |stream, peer| {
            let (server, main, tls) = (self.clone(), main.clone(), tls.clone());
            let (stop, drain) = (stop.clone(), drain.clone());
            let start = Start {
                peer,
                main,
                stop,
                drain,
            };
            match tls {
                None => tokio::spawn(server.start_plain(stream, start)),
                Some(acceptor) => tokio::spawn(server.start_tls(acceptor, stream, start)),
            };
        })
        .await;
    }

    /// On the front: a plain connection's first request, then the
    /// connection to the serving runtime.
    async fn start_plain(self: Arc<Self>, stream: TcpStream, mut start: Start) {
        let limit = header_timeout(self.header_read_timeout);
        let opened = match self
            .first_request(Movable(Some(stream)), false, limit, &mut start)
            .await
        {
            Ok(opened) => opened,
            Err(()) => return,
        };
        self.hand_on(opened, Scheme::Http, limit, start);
    }

    /// On the front: a TLS connection's handshake and first request (its
    /// HTTP/2 preface, with h2), then the connection to the serving
    /// runtime: the TLS session moves whole, its socket re-registered there.
    async fn start_tls(
        self: Arc<Self>,
        acceptor: TlsAcceptor,
        stream: TcpStream,
        mut start: Start,
    ) {
        let mut handshake = acceptor.accept(Movable(Some(stream)));
        let peer = start.peer;
        let handshaken = start_step(
            "no TLS handshake",
            peer,
            TLS_HANDSHAKE_TIMEOUT,
            &mut start.stop,
            &mut handshake,
        )
        .await;
        let counts = self.proxy.counts();
        let stream = match handshaken {
            Ok(stream) => stream,
            Err(Unstarted::TimedOut) => {
                counts.handshake_failed(HandshakeFailure::TlsTimeout);
                if let Some(socket) = handshake.get_ref() {
                    socket.reset();
                }
                return;
            }
            Err(Unstarted::Failed) => return counts.handshake_failed(HandshakeFailure::TlsError),
            Err(Unstarted::Over) => return,
        };
        let limit = header_timeout(self.header_read_timeout);
        let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
        let opened = match self.first_request(stream, h2, limit, &mut start).await {
            Ok(opened) => opened,
            Err(()) => return,
        };
        self.hand_on(opened, Scheme::Https, limit, start);
    }

    /// From the front to the serving runtime: the connection's socket is
    /// taken off the front's reactor and put on the runtime's, under
    /// whatever was read and decoded of it meanwhile (the TLS session, the
    /// gate with the first request), which moves whole.
    fn hand_on<S: OnSocket>(
        self: Arc<Self>,
        mut opened: Opened<S>,
        scheme: Scheme,
        limit: Duration,
        start: Start,
    ) {
        let Start {
            peer,
            main,
            stop,
            drain,
        } = start;
        let socket = match opened.socket().0.take().map(TcpStream::into_std) {
            Some(Ok(socket)) => socket,
            Some(Err(err)) => return debug!(%peer, %err, "cannot move the connection"),
            None => return,
        };
        main.spawn(async move {
            match TcpStream::from_std(socket) {
                Ok(socket) => opened.socket().0 = Some(socket),
                Err(err) => return debug!(%peer, %err, "cannot take the connection"),
            }
            let visitor = Visitor { peer, scheme };
            self.serve(opened, visitor, limit, stop, drain).await;
        });
    }

    /// On the front: the connection's opening, within `limit`: HTTP/2's
    /// preface (`h2`: the only thing it may send), else the first request
    /// head, decoded by the checker that reads the connection's requests
    /// after it, and what of its body the proxy would read ahead. A
    /// connection that failed, timed out (reset), was refused (answered
    /// here) or that the edge stopped for: `Err`.
    async fn first_request<S: OnSocket>(
        &self,
        mut stream: S,
        h2: bool,
        limit: Duration,
        start: &mut Start,
    ) -> Result<Opened<S>, ()> {
        let peer = start.peer;
        let what = if h2 {
            "no HTTP/2 preface"
        } else {
            "no request"
        };
        // One limit for the opening and the rest of the head together.
        let deadline = Instant::now() + limit;
        let opening = read_opening(&mut stream);
        let stepped = start_step(what, peer, limit, &mut start.stop, opening).await;
        let (opening, preface) = match stepped {
            Ok(opened) => opened,
            Err(Unstarted::TimedOut) => {
                stream.socket().reset();
                return Err(());
            }
            Err(Unstarted::Failed | Unstarted::Over) => return Err(()),
        };
        if h2 || preface {
            return Ok(Opened::Http2(Rewind::new(opening, stream)));
        }
        let mut reading = Reading::with_opening(stream, self.head_limits, &opening);
        let head = async {
            while !reading.first_head_done() {
                reading.read_more().await?;
            }
            Ok::<_, std::io::Error>(())
        };
        let left = deadline.saturating_duration_since(Instant::now());
        match start_step(what, peer, left, &mut start.stop, head).await {
            Ok(()) => {}
            Err(Unstarted::TimedOut) => {
                reading.get_mut().socket().reset();
                return Err(());
            }
            Err(Unstarted::Failed | Unstarted::Over) => return Err(()),
        }
        let rules = self.proxy.body_rules();
        let body = tokio::select! {
            body = reading.read_ahead(&rules) => body,
            _ = start.stop.wait_for(|s| *s) => return Err(()),
        };
        let refusal = match body {
            Ok(()) => return Ok(Opened::Http1(Box::new(reading))),
            Err(None) => return Err(()),
            Err(Some(refusal)) => refusal,
        };
        debug!(%peer, "{}", refusal.message());
        let answered = h1::refuse_first(reading, &refusal, self.proxy.counts());
        let _ = tokio::time::timeout(REFUSAL_TIMEOUT, answered).await;
        Err(())
    }

    async fn serve<S: OnSocket>(
        self: Arc<Self>,
        opened: Opened<S>,
        visitor: Visitor,
        header_timeout: Duration,
        stop: watch::Receiver<bool>,
        drain: DrainGuard,
    ) {
        let stream = match opened {
            Opened::Http1(reading) => {
                let proxy = &self.proxy;
                return h1::serve(*reading, proxy, visitor, drain, header_timeout, stop).await;
            }
            Opened::Http2(stream) => stream,
        };
        let proxy = self.proxy.clone();
        let peer = visitor.peer;
        // Each request's future is boxed: hyper moves the future it is
        // given into its own place, and the proxy's is kilobytes (perf:
        // those copies were ~7% of the edge's CPU on 1 KiB GETs).
        let service = service_fn(move |req| {
            let (proxy, drain) = (proxy.clone(), drain.clone());
            Box::pin(async move {
                let req = req.map(VisitorBody::Hyper);
                Ok::<_, Infallible>(proxy.handle(req, &visitor, &drain).await)
            })
        });
        let io = TokioIo::new(FloodGuard::new(stream));
        let conn = self.h2.serve_connection(io, service);
        if let Err(err) = until_stopped(conn, stop, |c| c.graceful_shutdown()).await {
            debug!(%peer, %err, "visitor connection ended");
        }
    }
}

/// A connection whose opening the front has read, on its way to be served.
enum Opened<S> {
    /// HTTP/1: its reading, holding the first request (and what of its
    /// body was read ahead).
    Http1(Box<Reading<S>>),
    /// HTTP/2: the preface, put back in front.
    Http2(Rewind<S>),
}

impl<S: OnSocket> Opened<S> {
    fn socket(&mut self) -> &mut Movable {
        match self {
            Opened::Http1(reading) => reading.get_mut().socket(),
            Opened::Http2(stream) => stream.get_mut().socket(),
        }
    }
}

/// A visitor's stream over a [`Movable`] socket: plain, or under TLS.
trait OnSocket: AsyncRead + AsyncWrite + Unpin + Send + Sync + 'static {
    fn socket(&mut self) -> &mut Movable;
}

impl OnSocket for Movable {
    fn socket(&mut self) -> &mut Movable {
        self
    }
}

impl OnSocket for tokio_rustls::server::TlsStream<Movable> {
    fn socket(&mut self) -> &mut Movable {
        self.get_mut().0
    }
}

/// A connection's particulars, as the front hands it on.
struct Start {
    peer: SocketAddr,
    /// The runtime that serves the connection's requests.
    main: tokio::runtime::Handle,
    stop: watch::Receiver<bool>,
    drain: DrainGuard,
}

/// A visitor's TCP stream (bare, or under a TLS session) that can move
/// between runtimes: taken out (and off the front's reactor) and put back
/// (on the serving runtime's), while a TLS session, with whatever it has
/// buffered, moves whole. Empty, it fails every read and write.
struct Movable(Option<TcpStream>);

impl Movable {
    /// See [`reset`].
    fn reset(&self) {
        if let Some(socket) = &self.0 {
            reset(socket);
        }
    }

    fn pinned(&mut self) -> std::io::Result<Pin<&mut TcpStream>> {
        match &mut self.0 {
            Some(socket) => Ok(Pin::new(socket)),
            None => Err(std::io::ErrorKind::NotConnected.into()),
        }
    }
}

impl AsyncRead for Movable {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        self.pinned()?.poll_read(cx, buf)
    }
}

impl AsyncWrite for Movable {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.pinned()?.poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        self.pinned()?.poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.pinned()?.poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.pinned()?.poll_shutdown(cx)
    }
}

/// How long the front spends answering a request it refuses.
const REFUSAL_TIMEOUT: Duration = Duration::from_secs(5);

/// Accepts on `listener` until `stop` turns true, handing each connection
/// (no-delay set) to `each`. A failing accept (out of file descriptors,
/// most likely) is retried every 50 ms instead of spinning, and said once
/// in a while, not 20 times a second.
async fn accept_each(
    listener: &TcpListener,
    mut stop: watch::Receiver<bool>,
    mut each: impl FnMut(TcpStream, SocketAddr),
) {
    let mut warned: Option<std::time::Instant> = None;
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stop.wait_for(|s| *s) => return,
        };
        match accepted {
            Ok((stream, peer)) => {
                let _ = stream.set_nodelay(true);
                each(stream, peer);
            }
            Err(err) => {
                if warned.is_none_or(|at| at.elapsed() >= ACCEPT_WARN_EVERY) {
                    warn!(%err, "accept failed; retrying every 50 ms");
                    warned = Some(std::time::Instant::now());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// How a connection's start ended without its first request.
enum Unstarted {
    /// It failed.
    Failed,
    /// The edge is stopping.
    Over,
    /// It took longer than its limit: to be [`reset`].
    TimedOut,
}

/// Drops a connection that timed out before its first request with a reset
/// (`SO_LINGER` 0) instead of a FIN. A FIN leaves the edge's socket in
/// FIN_WAIT and then TIME_WAIT, a minute each on Linux, for a peer that
/// sent nothing worth the wait: a slowloris attacker reconnecting at once
/// would keep tens of thousands of them (and their retransmitted FINs) on
/// the edge. nginx's `reset_timedout_connection` and HAProxy's `nolinger`
/// do the same.
fn reset(socket: &TcpStream) {
    let _ = socket.set_zero_linger();
}

/// One step of a connection's start (TLS handshake, opening bytes): its
/// result, or how it ended (logged as `what` and why): it failed, took
/// longer than `limit`, or the edge stopped meanwhile.
async fn start_step<T, E: std::fmt::Display>(
    what: &str,
    peer: SocketAddr,
    limit: Duration,
    stop: &mut watch::Receiver<bool>,
    step: impl Future<Output = Result<T, E>>,
) -> Result<T, Unstarted> {
    tokio::select! {
        done = tokio::time::timeout(limit, step) => match done {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(err)) => {
                debug!(%peer, %err, "{what}: the connection failed");
                Err(Unstarted::Failed)
            }
            Err(_) => {
                debug!(%peer, "{what} within {} s", limit.as_secs());
                Err(Unstarted::TimedOut)
            }
        },
        _ = stop.wait_for(|s| *s) => Err(Unstarted::Over),
    }
}

/// Drives a connection; once `stop` turns true, asks it to finish its
/// requests and close, and waits for that.
async fn until_stopped<C, T>(
    conn: C,
    mut stop: watch::Receiver<bool>,
    graceful_shutdown: impl FnOnce(Pin<&mut C>),
) -> T
where
    C: Future<Output = T>,
{
    tokio::pin!(conn);
    tokio::select! {
        ended = conn.as_mut() => return ended,
        _ = stop.wait_for(|s| *s) => {}
    }
    graceful_shutdown(conn.as_mut());
    conn.await
}

/// Reads a connection's first bytes: as far as they follow the HTTP/2
/// preface, up to all of it. Returns them, and whether they are the preface.
/// A visitor that closes at once gets `(bytes, false)`: HTTP/1 sees the end.
async fn read_opening<S: AsyncRead + Unpin>(stream: &mut S) -> std::io::Result<(Vec<u8>, bool)> {
    let mut opening = Vec::with_capacity(H2_PREFACE.len());
    let mut chunk = [0u8; H2_PREFACE.len()];
    loop {
        let n = stream
            .read(&mut chunk[..H2_PREFACE.len() - opening.len()])
            .await?;
        if n == 0 {
            return Ok((opening, false));
        }
        opening.extend_from_slice(&chunk[..n]);
        if opening[..] != H2_PREFACE[..opening.len()] {
            return Ok((opening, false));
        }
        if opening.len() == H2_PREFACE.len() {
            return Ok((opening, true));
        }
    }
}
