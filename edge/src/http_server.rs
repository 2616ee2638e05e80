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

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http::Request;
use http::header::{self, HeaderValue};
use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;
use tracing::{debug, warn};

use crate::error_page::{EdgeError, accepts_html};
use crate::h1_framing::{FramingGate, HeadLimits};
use crate::h2_flood::FloodGuard;
use crate::proxy::{DrainGuard, Proxy, READ_AHEAD, Scheme, Visitor};
use crate::request_body::RateWindows;
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
    h1: http1::Builder,
    h2: http2::Builder<TokioExecutor>,
    header_read_timeout: Duration,
    head_limits: HeadLimits,
}

impl HttpServer {
    /// `max_head_bytes` bounds a request head (431 past it, from hyper on
    /// HTTP/1.1 and h2 on HTTP/2); `max_headers` its header count on
    /// HTTP/1.1 (431 from hyper; the proxy counts HTTP/2's).
    pub fn new(
        proxy: Arc<Proxy>,
        header_read_timeout: Duration,
        max_head_bytes: usize,
        max_headers: usize,
    ) -> Self {
        let mut h1 = http1::Builder::new();
        h1.timer(TokioTimer::new())
            .header_read_timeout(header_read_timeout)
            .max_buf_size(max_head_bytes)
            .max_headers(max_headers);
        let mut h2 = http2::Builder::new(TokioExecutor::new());
        h2.timer(TokioTimer::new())
            .max_header_list_size(u32::try_from(max_head_bytes).unwrap_or(u32::MAX))
            .keep_alive_interval(H2_KEEP_ALIVE)
            .keep_alive_timeout(H2_KEEP_ALIVE);
        Self {
            proxy,
            h1,
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
    async fn start_plain(self: Arc<Self>, mut stream: TcpStream, mut start: Start) {
        let limit = header_timeout(self.header_read_timeout);
        let (prefix, h2) = match self
            .first_request(&mut stream, false, limit, &mut start)
            .await
        {
            Ok(opened) => opened,
            Err(Unstarted::TimedOut) => return reset(&stream),
            Err(Unstarted::Over) => return,
        };
        let stream = match stream.into_std() {
            Ok(stream) => stream,
            Err(err) => return debug!(peer = %start.peer, %err, "cannot move the connection"),
        };
        let Start {
            peer,
            main,
            stop,
            drain,
        } = start;
        main.spawn(async move {
            let stream = match TcpStream::from_std(stream) {
                Ok(stream) => stream,
                Err(err) => return debug!(%peer, %err, "cannot take the connection"),
            };
            let visitor = Visitor {
                peer,
                scheme: Scheme::Http,
            };
            let stream = Rewind::new(prefix, stream);
            self.serve(stream, visitor, h2, limit, stop, drain).await;
        });
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
        let mut stream = match handshaken {
            Ok(stream) => stream,
            Err(Unstarted::TimedOut) => {
                if let Some(socket) = handshake.get_ref() {
                    socket.reset();
                }
                return;
            }
            Err(Unstarted::Over) => return,
        };
        let limit = header_timeout(self.header_read_timeout);
        let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
        let (prefix, h2) = match self.first_request(&mut stream, h2, limit, &mut start).await {
            Ok(opened) => opened,
            Err(Unstarted::TimedOut) => return stream.get_ref().0.reset(),
            Err(Unstarted::Over) => return,
        };
        let socket = stream.get_mut().0.0.take().map(TcpStream::into_std);
        let socket = match socket {
            Some(Ok(socket)) => socket,
            Some(Err(err)) => return debug!(%peer, %err, "cannot move the connection"),
            None => return,
        };
        let Start {
            main, stop, drain, ..
        } = start;
        main.spawn(async move {
            match TcpStream::from_std(socket) {
                Ok(socket) => stream.get_mut().0.0 = Some(socket),
                Err(err) => return debug!(%peer, %err, "cannot take the connection"),
            }
            let visitor = Visitor {
                peer,
                scheme: Scheme::Https,
            };
            let stream = Rewind::new(prefix, stream);
            self.serve(stream, visitor, h2, limit, stop, drain).await;
        });
    }

    /// On the front: the connection's opening, within `limit`: HTTP/2's
    /// preface (`h2`: the only thing it may send), else the first request
    /// head, and what of its body the proxy would read ahead. The bytes
    /// read, and whether the connection is HTTP/2; else how it ended
    /// (a refusal here is answered, and `Over`).
    async fn first_request<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        stream: &mut S,
        h2: bool,
        limit: Duration,
        start: &mut Start,
    ) -> Result<(Vec<u8>, bool), Unstarted> {
        let peer = start.peer;
        if h2 {
            let opening = read_opening(stream);
            let (prefix, _) =
                start_step("no HTTP/2 preface", peer, limit, &mut start.stop, opening).await?;
            return Ok((prefix, true));
        }
        let max = self.head_limits.max_head_bytes;
        let head = read_first_head(stream, max);
        let (mut prefix, h2) = start_step("no request", peer, limit, &mut start.stop, head).await?;
        if h2 {
            return Ok((prefix, true));
        }
        let body = tokio::select! {
            body = self.first_body(stream, &mut prefix) => body,
            _ = start.stop.wait_for(|s| *s) => return Err(Unstarted::Over),
        };
        let refusal = match body {
            FirstBody::Read => return Ok((prefix, false)),
            FirstBody::Gone => return Err(Unstarted::Over),
            FirstBody::TooSlow => self.proxy.too_slow(),
            FirstBody::Stalled(stall) => EdgeError::BodyStalled(stall.as_secs()),
        };
        debug!(%peer, "{}", refusal.message());
        refuse(Rewind::new(prefix, stream), &refusal).await;
        Err(Unstarted::Over)
    }

    /// On the front, after the first head: of a body of declared length,
    /// the front reads what the proxy would read ahead (see
    /// [`READ_AHEAD`]), under the least rate; a slow POST then costs the
    /// runtime serving requests nothing. `bytes` holds what was read so
    /// far.
    async fn first_body<S: AsyncRead + Unpin>(
        &self,
        stream: &mut S,
        bytes: &mut Vec<u8>,
    ) -> FirstBody {
        let rules = self.proxy.body_rules();
        let Some(end) = read_ahead_end(bytes, self.head_limits.max_headers, rules.cap) else {
            return FirstBody::Read;
        };
        let mut windows = RateWindows::new(rules.min_rate, bytes.len() as u64);
        let mut moved = Instant::now();
        let mut chunk = [0u8; 8192];
        while bytes.len() < end {
            let stalls = moved + rules.stall;
            let wake = windows.end().map_or(stalls, |end| end.min(stalls));
            match tokio::time::timeout_at(wake.into(), stream.read(&mut chunk)).await {
                // Cut short: the proxy answers it as a broken body.
                Ok(Ok(0)) => return FirstBody::Read,
                Ok(Ok(n)) => {
                    bytes.extend_from_slice(&chunk[..n]);
                    moved = Instant::now();
                }
                Ok(Err(_)) => return FirstBody::Gone,
                Err(_) if moved.elapsed() >= rules.stall => {
                    return FirstBody::Stalled(rules.stall);
                }
                Err(_) => {}
            }
            if windows.over() && windows.judge(bytes.len() as u64, false) {
                return FirstBody::TooSlow;
            }
        }
        FirstBody::Read
    }

    async fn serve<S>(
        self: Arc<Self>,
        stream: S,
        visitor: Visitor,
        h2: bool,
        header_timeout: Duration,
        stop: watch::Receiver<bool>,
        drain: DrainGuard,
    ) where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let proxy = self.proxy.clone();
        let peer = visitor.peer;
        let service = service_fn(move |req| {
            let (proxy, drain) = (proxy.clone(), drain.clone());
            async move { Ok::<_, Infallible>(proxy.handle(req, &visitor, &drain).await) }
        });
        let io = TokioIo::new(stream);
        let ended = if h2 {
            let io = TokioIo::new(FloodGuard::new(io.into_inner()));
            let conn = self.h2.serve_connection(io, service);
            until_stopped(conn, stop, |c| c.graceful_shutdown()).await
        } else {
            let io = TokioIo::new(FramingGate::new(io.into_inner(), self.head_limits));
            let mut h1 = self.h1.clone();
            h1.header_read_timeout(header_timeout);
            let conn = h1.serve_connection(io, service).with_upgrades();
            until_stopped(conn, stop, |c| c.graceful_shutdown()).await
        };
        if let Err(err) = ended {
            debug!(%peer, %err, "visitor connection ended");
        }
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

/// A TCP stream under a TLS session that can move between runtimes: taken
/// out (and off the front's reactor) and put back (on the serving
/// runtime's), while the session, with whatever it has buffered, moves
/// whole. Empty, it fails every read and write.
struct Movable(Option<TcpStream>);

impl Movable {
    /// See [`reset`].
    fn reset(&self) {
        if let Some(socket) = &self.0 {
            reset(socket);
        }
    }

    fn socket(&mut self) -> std::io::Result<Pin<&mut TcpStream>> {
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
        self.socket()?.poll_read(cx, buf)
    }
}

impl AsyncWrite for Movable {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.socket()?.poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        self.socket()?.poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.socket()?.poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.socket()?.poll_shutdown(cx)
    }
}

/// What the front made of a first request's body.
enum FirstBody {
    /// Read as far as the front reads, or not the front's to read: on to
    /// the proxy.
    Read,
    TooSlow,
    /// It stopped for this long.
    Stalled(Duration),
    /// The connection failed.
    Gone,
}

/// How far into `bytes` (a request head, and what followed it) the front
/// reads before the proxy gets them: to the end of the head, and [`READ_AHEAD`]
/// bytes or all of its body, when the body has a single Content-Length
/// within the cap, no Transfer-Encoding, no `Expect` (the origin may refuse
/// it before its body) and no upgrade. Anything else, the malformed
/// included, is left to the proxy and its parser: `None`.
fn read_ahead_end(bytes: &[u8], max_headers: usize, cap: Option<u64>) -> Option<usize> {
    let mut headers = vec![httparse::EMPTY_HEADER; max_headers];
    let mut req = httparse::Request::new(&mut headers);
    let httparse::Status::Complete(head_len) = req.parse(bytes).ok()? else {
        return None;
    };
    if req.method == Some("CONNECT") {
        return None;
    }
    let mut length = None;
    for field in req.headers.iter() {
        let name = field.name;
        if name.eq_ignore_ascii_case("content-length") {
            let digits = std::str::from_utf8(field.value).ok()?;
            if length.is_some() || digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit())
            {
                return None;
            }
            length = Some(digits.parse::<u64>().ok()?);
        } else if ["transfer-encoding", "expect", "upgrade"]
            .iter()
            .any(|n| name.eq_ignore_ascii_case(n))
        {
            return None;
        }
    }
    let length = length.filter(|&n| n > 0 && cap.is_none_or(|c| n <= c))?;
    Some(head_len + usize::try_from(length.min(READ_AHEAD)).ok()?)
}

/// Answers the request on `stream` with `refusal` and closes it, on the
/// front; its body is not read.
async fn refuse<S: AsyncRead + AsyncWrite + Unpin>(stream: S, refusal: &EdgeError) {
    let service = service_fn(|req: Request<Incoming>| {
        let mut response = refusal.response(accepts_html(req.headers()));
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        std::future::ready(Ok::<_, Infallible>(response))
    });
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .keep_alive(false)
        .serve_connection(TokioIo::new(stream), service);
    let _ = tokio::time::timeout(REFUSAL_TIMEOUT, conn).await;
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

/// The opening (see [`read_opening`]) and, unless it is HTTP/2's preface,
/// the rest of the first request head: up to its blank line, the end of
/// the stream, or past `max` bytes (the parser behind then answers 431).
async fn read_first_head<S: AsyncRead + Unpin>(
    stream: &mut S,
    max: usize,
) -> std::io::Result<(Vec<u8>, bool)> {
    let (mut head, h2) = read_opening(stream).await?;
    if h2 {
        return Ok((head, true));
    }
    let mut chunk = [0u8; 4096];
    let mut scanned = 0usize;
    loop {
        // Only the bytes new since the last look (and 3 before them).
        if head_ends(&head[scanned.saturating_sub(3)..]) || head.len() > max {
            return Ok((head, false));
        }
        scanned = head.len();
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok((head, false));
        }
        head.extend_from_slice(&chunk[..n]);
    }
}

/// Whether `bytes` hold the blank line that ends a head (CRLF or bare LF).
fn head_ends(bytes: &[u8]) -> bool {
    bytes.windows(4).any(|w| w == b"\r\n\r\n") || bytes.windows(2).any(|w| w == b"\n\n")
}

/// How a connection's start ended without its first request.
enum Unstarted {
    /// It failed or closed, was refused, or the edge is stopping.
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
                Err(Unstarted::Over)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn end(head: &str, cap: Option<u64>) -> Option<usize> {
        read_ahead_end(head.as_bytes(), 100, cap)
    }

    #[test]
    fn the_front_reads_ahead_only_a_plain_declared_length() {
        let head = "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n";
        assert_eq!(end(head, None), Some(head.len() + 10));
        // At most READ_AHEAD of a long body, and the cap is kept.
        let long = "POST / HTTP/1.1\r\nContent-Length: 100000000\r\n\r\n";
        assert_eq!(end(long, None), Some(long.len() + 65_536));
        assert_eq!(end(long, Some(100_000_000)), Some(long.len() + 65_536));
        assert_eq!(end(long, Some(99_999_999)), None);
        for left_alone in [
            "GET / HTTP/1.1\r\nHost: a\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: 10\r\nContent-Length: 10\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: +10\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: 1 0\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: \r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: 10\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: 10\r\nExpect: 100-continue\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: 10\r\nUpgrade: websocket\r\n\r\n",
            "CONNECT a:443 HTTP/1.1\r\nContent-Length: 10\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: 10\r\n",
            "POST / HTTP/1.1\r\nContent Length: 10\r\n\r\n",
        ] {
            assert_eq!(end(left_alone, None), None, "{left_alone:?}");
        }
    }
}
