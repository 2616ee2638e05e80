//! HTTP/3 for visitors, on the agents' QUIC endpoint.
//!
//! The endpoint offers two ALPNs: `calvin/1` (agents, [`crate::upstream::tunnel`])
//! and `h3`. Which one a connection took is known once its handshake is
//! done; an `h3` connection comes here, and each of its requests goes
//! through the same [`Proxy::handle`] as HTTP/1.1's and HTTP/2's (the same
//! Host rules, limits, rates, error pages and streaming), its body read
//! from the request stream ([`H3Body`]) and its answer written back to it.
//!
//! What the two kinds of connection may do differs, and is set per
//! connection once its ALPN is known: the endpoint's transport settings
//! are the agents' (four bidi streams, three uni streams so an HTTP/3
//! client's control and QPACK streams need no wait); an `h3` connection is
//! then allowed [`MAX_REQUESTS`] requests at once, and an agent no uni
//! stream more (see [`crate::upstream::tunnel`]).
//!
//! The endpoint sends no keep-alives (the agents' pings keep their paths
//! alive, see [`crate::certs::tls::quic_config`]), so an HTTP/3 connection with
//! nothing under way ends at the idle timeout, 12 s, like an idle agent's.
//! A response that stays silent longer (an event stream between events)
//! must not end its connection: while requests are open, the edge keeps
//! the connection alive itself ([`keep_alive`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use h3::error::Code;
use h3::server::RequestStream;
use http::header::{self, HeaderMap, HeaderName};
use http::{Method, Response, Version};
use http_body_util::BodyExt;
use tokio::sync::watch;
use tracing::debug;

use crate::proxy::{Body, DrainGuard, Proxy, Scheme, Visitor};
use crate::request_body::{H3Body, VisitorBody};

/// Requests an HTTP/3 visitor may have under way at once on one
/// connection (hyper's HTTP/2 server allows 200; browsers open far fewer).
pub const MAX_REQUESTS: u32 = 100;

/// How often a connection with requests under way is kept alive: well
/// within the idle timeout (12 s), so a response silent longer (an event
/// stream between events) does not end it.
const KEEP_ALIVE_EVERY: Duration = Duration::from_secs(4);

/// What serves HTTP/3 visitors: the proxy, its head limits, and what a
/// stop waits for.
pub(crate) struct Http3 {
    proxy: Arc<Proxy>,
    /// The longest request head taken (QPACK's field section size).
    max_head_bytes: u64,
    /// How long a new request stream has to send its head.
    header_timeout: Duration,
    drain: DrainGuard,
    stop: watch::Receiver<bool>,
}

impl Http3 {
    pub(crate) fn new(
        proxy: Arc<Proxy>,
        max_head_bytes: usize,
        header_timeout: Duration,
        drain: DrainGuard,
        stop: watch::Receiver<bool>,
    ) -> Self {
        Self {
            proxy,
            max_head_bytes: max_head_bytes as u64,
            header_timeout,
            drain,
            stop,
        }
    }

    /// Serves an HTTP/3 connection (its handshake done, ALPN `h3`) until
    /// it ends; on the edge's stop, it finishes its requests (GOAWAY) and
    /// closes.
    pub(crate) async fn serve(self: Arc<Self>, conn: quinn::Connection) {
        let drain = self.drain.clone();
        let mut stop = self.stop.clone();
        // Its control stream and SETTINGS within the header timeout, or
        // the connection ends (a client that lets the edge open no stream
        // would otherwise hold it unserved).
        let mut builder = h3::server::builder();
        builder.max_field_section_size(self.max_head_bytes);
        let building = builder.build::<_, Bytes>(h3_quinn::Connection::new(conn.clone()));
        let built = tokio::select! {
            built = tokio::time::timeout(self.header_timeout, building) => built,
            _ = stop.wait_for(|s| *s) => return close(&conn),
        };
        let mut h3 = match built {
            Ok(Ok(h3)) => h3,
            Ok(Err(err)) => {
                debug!(%err, "HTTP/3 connection failed to start");
                return close(&conn);
            }
            Err(_) => {
                debug!("no HTTP/3 control stream in time");
                return close(&conn);
            }
        };
        // Requests only once HTTP/3 runs: before, a stream would wait
        // unread.
        conn.set_max_concurrent_bi_streams(MAX_REQUESTS.into());
        let open = Open::default();
        let alive = tokio::spawn(keep_alive(conn.clone(), open.clone()));
        let mut stopping = false;
        loop {
            let accepted = tokio::select! {
                accepted = h3.accept() => Some(accepted),
                _ = stop.wait_for(|s| *s), if !stopping => None,
                // Stopping, and its last request is done: h3 would wait
                // for the visitor to leave too.
                () = open.done(), if stopping => break,
            };
            let Some(accepted) = accepted else {
                // No request after the one last accepted (RFC 9114 5.2:
                // those up to it are served); accept() then ends once they
                // are done.
                stopping = true;
                if let Err(err) = h3.shutdown(1).await {
                    debug!(%err, "HTTP/3 GOAWAY failed");
                    break;
                }
                continue;
            };
            match accepted {
                Ok(Some(resolver)) => {
                    let this = self.clone();
                    let (under_way, drain) = (open.start(), drain.clone());
                    let peer = conn.remote_address();
                    tokio::spawn(async move {
                        this.request(resolver, peer, &drain).await;
                        drop(under_way);
                    });
                }
                Ok(None) => break,
                Err(err) => {
                    if !err.is_h3_no_error() {
                        debug!(%err, "HTTP/3 connection ended");
                    }
                    break;
                }
            }
        }
        alive.abort();
        // The last responses' ends may still be on their way: the visitor
        // closes once it has them (a second at most).
        let _ = tokio::time::timeout(Duration::from_secs(1), conn.closed()).await;
        close(&conn);
    }

    /// One request: its head (within the header timeout), then the proxy's
    /// answer written back as it streams.
    async fn request(
        &self,
        resolver: h3::server::RequestResolver<h3_quinn::Connection, Bytes>,
        peer: SocketAddr,
        drain: &DrainGuard,
    ) {
        let resolved = tokio::time::timeout(self.header_timeout, resolver.resolve_request()).await;
        let (req, stream) = match resolved {
            Ok(Ok(resolved)) => resolved,
            Ok(Err(err)) => {
                if matches!(err, h3::error::StreamError::HeaderTooBig { .. }) {
                    // h3 answered 431 itself.
                    self.proxy.counts().refused_as("head-too-large");
                }
                return debug!(%peer, %err, "HTTP/3 request refused");
            }
            Err(_) => return debug!(%peer, "no HTTP/3 request head in time"),
        };
        let (mut send, recv) = stream.split();
        let head = req.method() == Method::HEAD;
        let length = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        let req = req.map(|()| VisitorBody::H3(Box::new(H3Body::new(recv, length))));
        let visitor = Visitor {
            peer,
            scheme: Scheme::Https,
        };
        let response = self.proxy.handle(req, &visitor, drain).await;
        if let Err(err) = respond(&mut send, response, head).await {
            debug!(%peer, %err, "HTTP/3 response cut off");
        }
    }
}

/// Ends an HTTP/3 connection without error.
fn close(conn: &quinn::Connection) {
    conn.close(
        Code::H3_NO_ERROR.value().try_into().unwrap_or_default(),
        b"",
    );
}

/// Requests under way on a connection; each holds a [`UnderWay`] until
/// it ends (or its task panics).
#[derive(Clone, Default)]
struct Open(Arc<(AtomicUsize, tokio::sync::Notify)>);

struct UnderWay(Open);

impl Open {
    fn start(&self) -> UnderWay {
        self.0.0.fetch_add(1, Ordering::AcqRel);
        UnderWay(self.clone())
    }

    fn count(&self) -> usize {
        self.0.0.load(Ordering::Acquire)
    }

    /// Resolves once no request is under way.
    async fn done(&self) {
        loop {
            let ended = self.0.1.notified();
            if self.count() == 0 {
                return;
            }
            ended.await;
        }
    }
}

impl Drop for UnderWay {
    fn drop(&mut self) {
        if (self.0).0.0.fetch_sub(1, Ordering::AcqRel) == 1 {
            (self.0).0.1.notify_waiters();
        }
    }
}

/// Headers of HTTP/1.1's connection that HTTP/3 forbids (RFC 9114 4.2).
const CONNECTION_SPECIFIC: [HeaderName; 5] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// Writes `response` to the request stream: its head, its body as it
/// streams (none for a HEAD), its trailers, its end. A body that fails
/// resets the stream, so the visitor never takes a cut body for a whole
/// one.
async fn respond(
    send: &mut RequestStream<h3_quinn::SendStream<Bytes>, Bytes>,
    response: Response<Body>,
    head: bool,
) -> Result<(), h3::error::StreamError> {
    let (mut parts, body) = response.into_parts();
    for name in &CONNECTION_SPECIFIC {
        parts.headers.remove(name);
    }
    parts.version = Version::HTTP_3;
    send.send_response(Response::from_parts(parts, ())).await?;
    if !head {
        let mut body = std::pin::pin!(body);
        while let Some(frame) = body.frame().await {
            let frame = match frame {
                Ok(frame) => frame,
                Err(err) => {
                    debug!(%err, "response body failed; resetting the HTTP/3 stream");
                    send.stop_stream(Code::H3_INTERNAL_ERROR);
                    return Ok(());
                }
            };
            match frame.into_data() {
                Ok(data) => send.send_data(data).await?,
                Err(frame) => {
                    if let Ok(trailers) = frame.into_trailers() {
                        return finish_with(send, Some(trailers)).await;
                    }
                }
            }
        }
    }
    finish_with(send, None).await
}

async fn finish_with(
    send: &mut RequestStream<h3_quinn::SendStream<Bytes>, Bytes>,
    trailers: Option<HeaderMap>,
) -> Result<(), h3::error::StreamError> {
    if let Some(trailers) = trailers {
        send.send_trailers(trailers).await?;
    }
    send.finish().await
}

/// Keeps `conn` alive while it has requests under way (`open`): the
/// endpoint sends no keep-alives of its own, and quinn offers no ping per
/// connection, so the edge grants the visitor one more byte of
/// connection-level flow control every [`KEEP_ALIVE_EVERY`]: a MAX_DATA
/// frame, which the visitor acknowledges, and which restarts both idle
/// timers as a ping would (RFC 9000 10.1). The window is then set back
/// (quinn takes the byte back as data is read), so it does not grow.
async fn keep_alive(conn: quinn::Connection, open: Open) {
    // The endpoint's connection window is quinn's default, unbounded: an
    // agent's streams must never wait on each other (a visitor who stops
    // reading one download would stall every other visitor of the agent).
    let window = quinn::VarInt::MAX;
    let less = quinn::VarInt::from_u64(window.into_inner() - 1).unwrap_or(window);
    let mut every = tokio::time::interval(KEEP_ALIVE_EVERY);
    every.tick().await;
    loop {
        every.tick().await;
        if open.count() == 0 {
            continue;
        }
        conn.set_receive_window(less);
        conn.set_receive_window(window);
    }
}
