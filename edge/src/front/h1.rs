//! The visitors' HTTP/1 session, on the framing checker: each request head
//! is parsed once (the checker decodes it, and the request is made from
//! that parse), its framing decided there, its body handed on as the
//! checker frames it, and each answer written with the framing the edge
//! decides. It serves what hyper's HTTP/1 server served before it:
//! keep-alive, pipelined requests answered in order, `Expect:
//! 100-continue` (the interim answer written when the body is first
//! read), HEAD, 204 and 304, chunked bodies with trailers both ways, an
//! answer of unknown length to an HTTP/1.0 visitor (ended by the close),
//! upgrades (after a 101 the connection is the proxy's splice), and a
//! visitor that leaves while its request is under way (the request is
//! dropped, the origin's stream reset).
//!
//! A connection's first head is read on the listener's front thread
//! ([`Reading`], with what of its body the proxy reads ahead); the reading
//! moves whole to the runtime serving requests, where [`serve`] answers
//! that request and those after it. Every limit is the checker's and is
//! answered as before: a request it refuses is answered (400, 431, 501)
//! after the answers to the requests before it, and the connection closes.

use std::future::poll_fn;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use http::header::{self, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri, Version};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::sync::{oneshot, watch};
use tracing::debug;

use crate::counts::Counts;
use crate::error_page::{EdgeError, accepts_html};
use crate::h1_framing::{
    Checker, Decoded, FirstHead, Framing, HeadLimits, ParsedHead, READ_SIZE, Refusal, keeps_alive,
    trailer_map,
};
use crate::proxy::read_ahead::BodyRules;
use crate::proxy::rewrite::strip_hop_by_hop;
use crate::proxy::{DrainGuard, OnUpgrade, Proxy, Upgraded, Visitor};
use crate::request_body::{BodyError, RateWindows, VisitorBody};
use crate::upstream::origin::Interim;

/// The most read at once into a body being read.
const BODY_READ: usize = 64 << 10;
/// How long a finished answer waits for its request's body to be let go
/// (an upload task being stopped) before the connection closes instead.
const BODY_BACK: Duration = Duration::from_secs(1);
const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// A request head, decoded: the parse, and the bytes it points into.
pub(crate) struct Head {
    parsed: Box<ParsedHead>,
    bytes: Bytes,
}

/// What of a visitor's connection is read: its bytes, through the checker
/// as a decoder.
pub(crate) struct Reading<R> {
    io: R,
    /// Bytes read and not yet taken, from offset `base`.
    buf: BytesMut,
    base: u64,
    /// Where the checker's next look starts.
    from: u64,
    checker: Checker,
    eof: bool,
    /// The first head, decoded as it came (on the front), or why it was
    /// refused.
    first: Option<Result<Head, Refusal>>,
}

impl<R> Reading<R> {
    /// The reading of a connection of which `opening` was read already.
    pub(crate) fn with_opening(io: R, limits: HeadLimits, opening: &[u8]) -> Self {
        let mut reading = Self {
            io,
            buf: BytesMut::from(opening),
            base: 0,
            from: 0,
            checker: Checker::request_decoder(limits),
            eof: false,
            first: None,
        };
        reading.look();
        reading
    }

    pub(crate) fn get_mut(&mut self) -> &mut R {
        &mut self.io
    }

    /// Offset of the end of what was read from the connection so far.
    pub(crate) fn read_end(&self) -> u64 {
        self.base + self.buf.len() as u64
    }

    /// Whether the first request's head is whole (or refused), or the
    /// connection cannot give one: it ended.
    pub(crate) fn first_head_done(&self) -> bool {
        self.first.is_some() || self.eof
    }

    /// What the first request's head said about its body, once it passed.
    pub(crate) fn first_head(&self) -> Option<FirstHead> {
        let Some(Ok(Head { parsed, bytes })) = &self.first else {
            return None;
        };
        Some(FirstHead {
            head_end: parsed.start + parsed.len as u64,
            length: match parsed.framing {
                Framing::Length(n) => Some(n),
                Framing::Empty => Some(0),
                _ => None,
            },
            expects: fields(parsed, bytes).any(|(name, _)| name.eq_ignore_ascii_case(b"expect")),
            upgrade: parsed.upgrade,
        })
    }

    /// Decodes the first head as soon as it is whole.
    fn look(&mut self) {
        if self.first.is_none() && self.checker.heads() == 0 {
            self.first = self.decode_head();
        }
    }

    fn discard_to(&mut self, to: u64) {
        let n = usize::try_from(to.saturating_sub(self.base))
            .unwrap_or(usize::MAX)
            .min(self.buf.len());
        let _ = self.buf.split_to(n);
        self.base += n as u64;
    }

    fn take(&mut self, start: u64, end: u64) -> Bytes {
        self.discard_to(start);
        let n = (end - start) as usize;
        self.base += n as u64;
        self.buf.split_to(n).freeze()
    }

    /// The next head, decoded from what is buffered; `None` until it is
    /// whole.
    fn decode_head(&mut self) -> Option<Result<Head, Refusal>> {
        match self.checker.decode(&self.buf, self.base, self.from) {
            Decoded::More { from } => {
                self.discard_to(from);
                self.from = from;
                None
            }
            Decoded::Head(parsed) => {
                let end = parsed.start + parsed.len as u64;
                let bytes = self.take(parsed.start, end);
                self.from = end;
                // What came with the head is checked with it: a request
                // whose body is already known to be malformed is refused
                // before anything of it goes on.
                if let Some(refusal) = self.checker.refused_ahead(&self.buf, self.base, self.from) {
                    return Some(Err(refusal));
                }
                Some(Ok(Head { parsed, bytes }))
            }
            Decoded::Refused(refusal) => Some(Err(refusal)),
            Decoded::Data { .. } | Decoded::End { .. } | Decoded::Rest { .. } => Some(Err(
                Refusal::bad("a request came before the last one's body was read"),
            )),
        }
    }

    /// Whether the request being read has ended (its body read, or none).
    fn between_requests(&self) -> bool {
        self.checker.data_left().is_none() && self.checker.between_messages()
    }

    /// Reads past what is buffered of the body under way: true once the
    /// body has ended there (what follows it stays, for the next request).
    fn drain_buffered(&mut self) -> bool {
        loop {
            if self.between_requests() {
                return true;
            }
            match self.checker.decode(&self.buf, self.base, self.from) {
                Decoded::Data { end, .. } => {
                    self.discard_to(end);
                    self.from = end;
                }
                Decoded::End { at } => {
                    self.discard_to(at);
                    self.from = at;
                    let _ = self.checker.take_trailers();
                }
                Decoded::More { .. }
                | Decoded::Refused(_)
                | Decoded::Head(_)
                | Decoded::Rest { .. } => return self.between_requests(),
            }
        }
    }

    fn split<S>(self) -> (Reading<ReadHalf<S>>, WriteHalf<S>)
    where
        R: Into<S>,
        S: AsyncRead + AsyncWrite,
    {
        let (read, write) = tokio::io::split(self.io.into());
        let reading = Reading {
            io: read,
            buf: self.buf,
            base: self.base,
            from: self.from,
            checker: self.checker,
            eof: self.eof,
            first: self.first,
        };
        (reading, write)
    }
}

impl<R: AsyncRead + Unpin> Reading<R> {
    /// Reads once more from the connection into the buffer (room not
    /// zeroed first): more at once while a body is read.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<usize>> {
        let want = match self.checker.data_left() {
            Some(left) => usize::try_from(left)
                .unwrap_or(usize::MAX)
                .clamp(READ_SIZE, BODY_READ),
            None => READ_SIZE,
        };
        self.buf.reserve(want);
        let n = std::task::ready!(tokio_util::io::poll_read_buf(
            Pin::new(&mut self.io),
            cx,
            &mut self.buf
        ))?;
        if n == 0 {
            self.eof = true;
        }
        Poll::Ready(Ok(n))
    }

    /// On the front: reads once more, and decodes the first head when it
    /// is whole; 0 at the connection's end.
    pub(crate) async fn read_more(&mut self) -> std::io::Result<usize> {
        let n = poll_fn(|cx| self.poll_fill(cx)).await?;
        self.look();
        Ok(n)
    }

    /// On the front, after a connection's first head: reads what
    /// [`BodyRules::ahead`] says of its body, under the least rate; what to
    /// answer instead if it was too slow or stalled, `Err(None)` if the
    /// connection failed. A body cut short is left for the proxy to answer
    /// as broken.
    pub(crate) async fn read_ahead(&mut self, rules: &BodyRules) -> Result<(), Option<EdgeError>> {
        let Some(first) = self.first_head() else {
            return Ok(());
        };
        let Some(ahead) = rules.ahead(first.length, first.expects, first.upgrade) else {
            return Ok(());
        };
        let end = first.head_end + ahead;
        let mut windows = RateWindows::new(rules.min_rate, self.read_end());
        let mut moved = Instant::now();
        while self.read_end() < end {
            let stalls = moved + rules.stall;
            let wake = windows.end().map_or(stalls, |end| end.min(stalls));
            match tokio::time::timeout_at(wake.into(), self.read_more()).await {
                Ok(Ok(0)) => return Ok(()),
                Ok(Ok(_)) => moved = Instant::now(),
                Ok(Err(_)) => return Err(None),
                Err(_) if moved.elapsed() >= rules.stall => {
                    return Err(Some(EdgeError::BodyStalled(rules.stall.as_secs())));
                }
                Err(_) => {}
            }
            if windows.over() && windows.judge(self.read_end(), false) {
                return Err(Some(rules.too_slow()));
            }
        }
        Ok(())
    }

    /// The next request head: `None` at the connection's end (or a head
    /// cut off by it).
    async fn next_head(&mut self) -> std::io::Result<Option<Result<Head, Refusal>>> {
        if let Some(first) = self.first.take() {
            return Ok(Some(first));
        }
        loop {
            if let Some(head) = self.decode_head() {
                return Ok(Some(head));
            }
            if self.buf.is_empty() && self.buf.capacity() > 4 * READ_SIZE {
                // An idle connection does not keep a body's large reads.
                self.buf = BytesMut::new();
            }
            if self.eof || poll_fn(|cx| self.poll_fill(cx)).await? == 0 {
                return Ok(None);
            }
        }
    }

    /// While a request is under way: reads on, to see the visitor leave.
    /// True when it left (an end or an error); false once it sent more (a
    /// pipelined request, kept for later), after which nothing is read
    /// until its turn.
    async fn left(&mut self) -> bool {
        if !self.buf.is_empty() || self.eof {
            return std::future::pending().await;
        }
        !matches!(poll_fn(|cx| self.poll_fill(cx)).await, Ok(n) if n > 0)
    }
}

/// How a connection's input reads to the session up to the end of its
/// first request (the differential fuzz target compares it with hyper's
/// reading).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FirstRequest {
    /// Refused: by the checker, or as the request is made of its head.
    Refused,
    /// The input ends before the request does.
    CutShort,
    /// The request is whole and ends at this offset (after an upgrade
    /// request, nothing past it is read until its answer).
    Whole(u64),
}

/// What the session makes of `input`'s first request, read as one
/// connection's bytes, all there.
pub fn first_request(input: &[u8], limits: HeadLimits) -> FirstRequest {
    let mut reading = Reading::with_opening((), limits, input);
    let head = match reading.first.take() {
        Some(Ok(head)) => head,
        Some(Err(_)) => return FirstRequest::Refused,
        None => return FirstRequest::CutShort,
    };
    if request_of(&head).is_err() {
        return FirstRequest::Refused;
    }
    loop {
        if reading.between_requests() {
            return FirstRequest::Whole(reading.checker.message_start());
        }
        match reading
            .checker
            .decode(&reading.buf, reading.base, reading.from)
        {
            Decoded::Data { end, .. } => {
                reading.discard_to(end);
                reading.from = end;
            }
            Decoded::End { at } => {
                reading.discard_to(at);
                reading.from = at;
            }
            Decoded::More { .. } => return FirstRequest::CutShort,
            Decoded::Refused(_) => return FirstRequest::Refused,
            Decoded::Head(_) | Decoded::Rest { .. } => {
                return FirstRequest::Whole(reading.checker.message_start());
            }
        }
    }
}

/// The fields of a parsed head, as bytes.
fn fields<'a>(
    parsed: &'a ParsedHead,
    bytes: &'a Bytes,
) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + 'a {
    parsed
        .fields
        .iter()
        .map(|&((ns, ne), (vs, ve))| (&bytes[ns..ne], &bytes[vs..ve]))
}

/// The request a head says, its header map made from the parse (values
/// share the head's bytes); a target that is not a URI is refused.
fn request_of(head: &Head) -> Result<Request<()>, Refusal> {
    let Head { parsed, bytes } = head;
    let (ms, me) = parsed.method;
    let method = Method::from_bytes(&bytes[ms..me])
        .map_err(|_| Refusal::bad("malformed request head: invalid method"))?;
    let (ts, te) = parsed.target;
    let uri = Uri::from_maybe_shared(bytes.slice(ts..te))
        .map_err(|_| Refusal::bad("malformed request head: invalid request target"))?;
    let headers = parsed
        .header_map(bytes)
        .map_err(|why| Refusal::bad(format!("malformed request head: {why}")))?;
    let mut request = Request::new(());
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    *request.version_mut() = parsed.version();
    *request.headers_mut() = headers;
    Ok(request)
}

/// A request body read off the visitor's connection, which it holds
/// meanwhile: at the body's end (or when dropped before it), the reading
/// goes back to the session for the next request.
struct Lent<R> {
    reading: Option<Reading<R>>,
    back: Option<oneshot::Sender<Reading<R>>>,
    /// Asked on the body's first read: the visitor waits for `100
    /// Continue` before it sends the body.
    ask: Option<oneshot::Sender<()>>,
    size: SizeHint,
}

impl<R> Lent<R> {
    fn give_back(&mut self) {
        if let (Some(reading), Some(back)) = (self.reading.take(), self.back.take()) {
            let _ = back.send(reading);
        }
    }
}

impl<R> Drop for Lent<R> {
    fn drop(&mut self) {
        self.give_back();
    }
}

impl<R: AsyncRead + Unpin + Send + Sync> Body for Lent<R> {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = &mut *self;
        if let Some(ask) = this.ask.take() {
            let _ = ask.send(());
        }
        loop {
            let Some(reading) = this.reading.as_mut() else {
                return Poll::Ready(None);
            };
            match reading
                .checker
                .decode(&reading.buf, reading.base, reading.from)
            {
                Decoded::Data { start, end, last } => {
                    let data = reading.take(start, end);
                    reading.from = end;
                    if let Some(exact) = this.size.exact() {
                        this.size = SizeHint::with_exact(exact.saturating_sub(data.len() as u64));
                    }
                    if last {
                        this.give_back();
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Decoded::End { at } => {
                    reading.discard_to(at);
                    reading.from = at;
                    let trailers = reading.checker.take_trailers();
                    this.give_back();
                    if trailers.is_empty() {
                        return Poll::Ready(None);
                    }
                    return Poll::Ready(match trailer_map(&trailers) {
                        Some(map) => Some(Ok(Frame::trailers(map))),
                        None => Some(Err("a malformed trailer section".into())),
                    });
                }
                Decoded::More { from } => {
                    reading.discard_to(from);
                    reading.from = from;
                    if reading.between_requests() {
                        this.give_back();
                        return Poll::Ready(None);
                    }
                    match std::task::ready!(reading.poll_fill(cx)) {
                        Ok(0) => {
                            return Poll::Ready(Some(Err("the request body was cut off".into())));
                        }
                        Ok(_) => {}
                        Err(err) => return Poll::Ready(Some(Err(err.into()))),
                    }
                }
                Decoded::Refused(refusal) => {
                    debug!(message = %refusal.message, "request refused mid-body");
                    return Poll::Ready(Some(Err(refusal.message.into())));
                }
                // The body has ended: what follows is the next request's
                // (or, after an upgrade request, the answer's to decide).
                Decoded::Head(_) | Decoded::Rest { .. } => {
                    this.give_back();
                    return Poll::Ready(None);
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.reading.is_none() || self.size.exact() == Some(0)
    }

    fn size_hint(&self) -> SizeHint {
        self.size
    }
}

/// What a request asked of its connection and its answer.
struct Asked {
    http10: bool,
    keep_alive: bool,
    head_request: bool,
    /// `TE: trailers`: an answer's trailers may be sent.
    trailers: bool,
}

impl Asked {
    fn of(request: &Request<()>) -> Self {
        let headers = request.headers();
        let http10 = request.version() == Version::HTTP_10;
        Self {
            http10,
            keep_alive: keeps_alive(http10, headers),
            head_request: request.method() == Method::HEAD,
            trailers: headers
                .get_all(header::TE)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .flat_map(|v| v.split(','))
                .any(|t| t.trim().eq_ignore_ascii_case("trailers")),
        }
    }
}

/// Serves a visitor's HTTP/1 connection, whose first head `reading` holds,
/// until it ends, a request asks to close it, or `stop` turns true (the
/// request under way is answered first). A request head must be whole
/// within `header_timeout` of the connection's turning idle.
pub(crate) async fn serve<S>(
    reading: Reading<S>,
    proxy: &Proxy,
    visitor: Visitor,
    drain: DrainGuard,
    header_timeout: Duration,
    mut stop: watch::Receiver<bool>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + Sync + 'static,
{
    let (mut reading, writer) = reading.split::<S>();
    // Taken by an upgrade: the connection is the splice's then.
    let mut writer = Some(writer);
    let counts = proxy.counts().clone();
    loop {
        let next = tokio::select! {
            next = tokio::time::timeout(header_timeout, reading.next_head()) => next,
            _ = stop.wait_for(|s| *s) => break,
        };
        let head = match next {
            Ok(Ok(Some(Ok(head)))) => head,
            Ok(Ok(Some(Err(refusal)))) => {
                if let Some(writer) = writer.as_mut() {
                    refuse(writer, &refusal, &counts).await;
                }
                break;
            }
            Ok(Ok(None) | Err(_)) => break,
            Err(_) => {
                debug!(peer = %visitor.peer, "no request head within {} s", header_timeout.as_secs());
                break;
            }
        };
        let exchange = Exchange {
            proxy,
            visitor: &visitor,
            drain: &drain,
        };
        match Box::pin(exchange.run(head, reading, &mut writer)).await {
            Some(back) if !*stop.borrow() => reading = back,
            _ => break,
        }
    }
    if let Some(mut writer) = writer {
        let _ = writer.shutdown().await;
    }
}

/// Answers a request the checker refused, and closes the connection.
async fn refuse<W: AsyncWrite + Unpin>(writer: &mut W, refusal: &Refusal, counts: &Counts) {
    counts.refused_as(refusal.code);
    let status = StatusCode::from_u16(refusal.status).unwrap_or(StatusCode::BAD_REQUEST);
    counts.answered(Version::HTTP_11, status, std::time::Instant::now());
    let _ = writer.write_all(&refusal.response()).await;
    let _ = writer.flush().await;
}

/// On the front: answers the first request with the edge's `refusal`
/// (its body was too slow, or stopped), and closes the connection.
pub(crate) async fn refuse_first<S: AsyncRead + AsyncWrite + Unpin>(
    mut reading: Reading<S>,
    refusal: &EdgeError,
    counts: &Counts,
) {
    let arrived = std::time::Instant::now();
    let request = match reading.first.take() {
        Some(Ok(head)) => request_of(&head).ok(),
        _ => None,
    };
    let Some(request) = request else { return };
    let id = crate::proxy::access_log::identify(&request);
    let mut response = refusal.response(accepts_html(request.headers()), id.as_str());
    counts.refused(refusal);
    counts.answered(request.version(), response.status(), arrived);
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    let asked = Asked {
        keep_alive: false,
        ..Asked::of(&request)
    };
    let writer = reading.get_mut();
    let _ = write_answer(writer, &asked, response).await;
    let _ = writer.shutdown().await;
}

/// One request's way through the session.
struct Exchange<'a> {
    proxy: &'a Proxy,
    visitor: &'a Visitor,
    drain: &'a DrainGuard,
}

impl Exchange<'_> {
    /// Hands the request to the proxy and writes its answer; the reading
    /// back when the connection may carry the next request.
    async fn run<S>(
        self,
        head: Head,
        reading: Reading<ReadHalf<S>>,
        writer: &mut Option<WriteHalf<S>>,
    ) -> Option<Reading<ReadHalf<S>>>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + Sync + 'static,
    {
        let counts = self.proxy.counts();
        let request = match request_of(&head) {
            Ok(request) => request,
            Err(refusal) => {
                refuse(writer.as_mut()?, &refusal, counts).await;
                return None;
            }
        };
        let asked = Asked::of(&request);
        let continues = !asked.http10
            && request
                .headers()
                .get(header::EXPECT)
                .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
        let upgrade = head.parsed.upgrade;
        let (mut parts, ()) = request.into_parts();
        // A body holds the reading while it streams (`back` brings it
        // home); without one, the session keeps it and reads on, to see
        // the visitor leave.
        let (mut ask, mut back, mut home, body) = match head.parsed.framing {
            Framing::Length(_) | Framing::Chunked => {
                let (give, back) = oneshot::channel();
                let (asks, ask) = if continues {
                    let (tx, rx) = oneshot::channel();
                    (Some(tx), Some(rx))
                } else {
                    (None, None)
                };
                let size = match head.parsed.framing {
                    Framing::Length(n) => SizeHint::with_exact(n),
                    _ => SizeHint::default(),
                };
                let lent = Lent {
                    reading: Some(reading),
                    back: Some(give),
                    ask: asks,
                    size,
                };
                let body = VisitorBody::H1(http_body_util::combinators::BoxBody::new(lent));
                (ask, Some(back), None, body)
            }
            _ => (None, None, Some(reading), VisitorBody::Empty),
        };
        let switch = upgrade.then(|| {
            let (tx, rx) = oneshot::channel();
            parts.extensions.insert(OnUpgrade::new(rx));
            tx
        });
        let interim = interim_for(&asked, &mut parts);
        drop(head);
        let handling =
            self.proxy
                .handle(Request::from_parts(parts, body), self.visitor, self.drain);
        tokio::pin!(handling);
        let response = loop {
            tokio::select! {
                biased;
                response = &mut handling => break response,
                asked_on = async { ask.as_mut()?.await.ok() }, if ask.is_some() => {
                    ask = None;
                    let out = writer.as_mut()?;
                    if asked_on.is_some() && (out.write_all(CONTINUE).await.is_err() || out.flush().await.is_err()) {
                        return None;
                    }
                }
                returned = async { back.as_mut()?.await.ok() }, if back.is_some() => {
                    back = None;
                    home = returned;
                }
                left = async { home.as_mut()?.left().await.then_some(()) }, if home.is_some() => {
                    if left.is_some() {
                        return None;
                    }
                }
                early = async { Some(interim.as_ref()?.next().await) }, if interim.is_some() => {
                    if let Some(early) = early {
                        write_interim(writer.as_mut()?, &asked, early).await?;
                    }
                }
            }
        };
        write_interims_left(writer.as_mut()?, &asked, interim).await?;
        let (keep, status) = self
            .answer(writer, &asked, response, switch, &mut home, &mut back)
            .await?;
        let mut reading = match (home, back) {
            (Some(reading), _) => reading,
            (None, Some(back)) => tokio::time::timeout(BODY_BACK, back).await.ok()?.ok()?,
            (None, None) => return None,
        };
        // A body the proxy left unread keeps the connection only if the
        // rest of it is here already.
        let whole = reading.drain_buffered();
        reading.checker.answered(status.as_u16());
        (keep && whole).then_some(reading)
    }

    /// Writes the answer; whether the connection may go on, and the
    /// answer's status. After a 101 to an upgrade request, the connection
    /// is handed to the proxy's splice (and `None`).
    async fn answer<S>(
        &self,
        writer: &mut Option<WriteHalf<S>>,
        asked: &Asked,
        response: Response<crate::proxy::Body>,
        switch: Option<oneshot::Sender<Upgraded>>,
        home: &mut Option<Reading<ReadHalf<S>>>,
        back: &mut Option<oneshot::Receiver<Reading<ReadHalf<S>>>>,
    ) -> Option<(bool, StatusCode)>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + Sync + 'static,
    {
        let status = response.status();
        if status == StatusCode::SWITCHING_PROTOCOLS
            && let Some(switch) = switch
        {
            let mut reading = match home.take() {
                Some(reading) => reading,
                None => back.take()?.await.ok()?,
            };
            let (parts, body) = response.into_parts();
            drop(body);
            let mut out = BytesMut::with_capacity(256);
            write_head(&mut out, asked, &parts);
            let mut half = writer.take()?;
            half.write_all(&out).await.ok()?;
            half.flush().await.ok()?;
            reading.checker.answered(status.as_u16());
            if !reading.checker.aside() {
                return None;
            }
            let early = reading.buf.split().freeze();
            let io = reading.io.unsplit(half);
            let _ = switch.send(Upgraded::new(Box::new(io), early));
            return None;
        }
        let keep = write_answer(writer.as_mut()?, asked, response).await.ok()?;
        Some((keep, status))
    }
}

/// For an HTTP/1.1 visitor: a way for the origin's interim answers (103
/// Early Hints) to reach it before the final one.
fn interim_for(asked: &Asked, parts: &mut http::request::Parts) -> Option<Interim> {
    if asked.http10 {
        return None;
    }
    let interim = Interim::new();
    parts.extensions.insert(interim.clone());
    Some(interim)
}

/// Writes an origin's interim answer, its hop-by-hop fields dropped; `None`
/// when the visitor is gone.
async fn write_interim<W: AsyncWrite + Unpin>(
    writer: &mut W,
    asked: &Asked,
    early: Response<()>,
) -> Option<()> {
    let (mut parts, ()) = early.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    let mut out = BytesMut::with_capacity(256);
    write_head(&mut out, asked, &parts);
    writer.write_all(&out).await.ok()?;
    writer.flush().await.ok()
}

/// Writes the interim answers that came with the final one (read in the
/// same go), before it.
async fn write_interims_left<W: AsyncWrite + Unpin>(
    writer: &mut W,
    asked: &Asked,
    interim: Option<Interim>,
) -> Option<()> {
    let Some(interim) = interim else {
        return Some(());
    };
    while let Some(early) = interim.try_take() {
        write_interim(writer, asked, early).await?;
    }
    Some(())
}

/// The start of a status line: the version and the code.
fn put_status(out: &mut BytesMut, asked: &Asked, status: StatusCode) {
    out.put_slice(if asked.http10 {
        b"HTTP/1.0 "
    } else {
        b"HTTP/1.1 "
    });
    out.put_slice(status.as_str().as_bytes());
    out.put_u8(b' ');
}

/// A chunk's size line.
fn put_chunk_size(out: &mut BytesMut, size: usize) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut digits = [0u8; 16];
    let mut at = digits.len();
    let mut left = size;
    loop {
        at -= 1;
        digits[at] = HEX[left & 15];
        left >>= 4;
        if left == 0 {
            break;
        }
    }
    out.put_slice(&digits[at..]);
    out.put_slice(b"\r\n");
}

/// How an answer's body is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    None,
    Length(u64),
    Chunked,
    /// Ended by closing the connection (an HTTP/1.0 visitor, no length).
    ToClose,
}

/// Writes a response, framed as HTTP/1.1 frames it for this request;
/// `Ok(true)` when the connection may carry the next request. A body that
/// fails is cut off (no last chunk, or short of its length) and the
/// connection closes.
async fn write_answer<W, B>(
    writer: &mut W,
    asked: &Asked,
    response: Response<B>,
) -> Result<bool, ()>
where
    W: AsyncWrite + Unpin,
    B: Body<Data = Bytes>,
    B::Error: std::fmt::Display,
{
    let (mut parts, body) = response.into_parts();
    let status = parts.status;
    let headers = &mut parts.headers;
    // The visitor's wish, and the answer's own `Connection: close`.
    let mut keep = asked.keep_alive && keeps_alive(false, headers);
    let bodiless = status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    let encoding = if bodiless {
        Encoding::None
    } else if let Some(length) = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
    {
        Encoding::Length(length)
    } else if body.is_end_stream() {
        if !asked.head_request {
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(0u64));
        }
        Encoding::Length(0)
    } else if let Some(length) = body.size_hint().exact() {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
        Encoding::Length(length)
    } else if !asked.http10 {
        headers.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        Encoding::Chunked
    } else {
        keep = false;
        Encoding::ToClose
    };
    if !keep && !asked.http10 {
        headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    } else if keep && asked.http10 {
        headers.insert(header::CONNECTION, HeaderValue::from_static("keep-alive"));
    }
    if !headers.contains_key(header::DATE) {
        headers.insert(header::DATE, date());
    }
    let mut out = BytesMut::with_capacity(512);
    write_head(&mut out, asked, &parts);
    let encoding = if asked.head_request {
        Encoding::None
    } else {
        encoding
    };
    if encoding == Encoding::None {
        drop(body);
        writer.write_all(&out).await.map_err(|_| ())?;
        writer.flush().await.map_err(|_| ())?;
        return Ok(keep);
    }
    let mut body = std::pin::pin!(body);
    let mut sent = 0u64;
    let mut ended = false;
    loop {
        // What is ready goes with what waits to be written: one write for
        // a head and a small body.
        let frame = match poll_fn(|cx| Poll::Ready(body.as_mut().poll_frame(cx))).await {
            Poll::Ready(frame) => frame,
            Poll::Pending => {
                if !out.is_empty() {
                    writer.write_all(&out).await.map_err(|_| ())?;
                    writer.flush().await.map_err(|_| ())?;
                    out.clear();
                }
                body.frame().await
            }
        };
        match frame {
            None => break,
            Some(Err(err)) => {
                debug!(%err, "the answer's body failed: cut off");
                let _ = writer.write_all(&out).await;
                let _ = writer.flush().await;
                return Err(());
            }
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) if data.is_empty() => {}
                Ok(data) => {
                    sent += data.len() as u64;
                    match encoding {
                        Encoding::Length(length) if sent > length => {
                            debug!("the answer's body is longer than its length: cut off");
                            return Err(());
                        }
                        Encoding::Chunked => {
                            put_chunk_size(&mut out, data.len());
                            put_data(writer, &mut out, &data).await?;
                            out.put_slice(b"\r\n");
                        }
                        _ => put_data(writer, &mut out, &data).await?,
                    }
                }
                Err(frame) => {
                    if let (Encoding::Chunked, Ok(trailers)) = (encoding, frame.into_trailers()) {
                        out.put_slice(b"0\r\n");
                        if asked.trailers {
                            for (name, value) in &trailers {
                                put_field(&mut out, name, value);
                            }
                        }
                        out.put_slice(b"\r\n");
                        ended = true;
                        break;
                    }
                }
            },
        }
        if out.len() >= BODY_READ {
            writer.write_all(&out).await.map_err(|_| ())?;
            out.clear();
        }
    }
    match encoding {
        Encoding::Chunked if !ended => out.put_slice(b"0\r\n\r\n"),
        Encoding::Length(length) if sent < length => {
            debug!("the answer's body ended short of its length: cut off");
            let _ = writer.write_all(&out).await;
            let _ = writer.flush().await;
            return Err(());
        }
        _ => {}
    }
    writer.write_all(&out).await.map_err(|_| ())?;
    writer.flush().await.map_err(|_| ())?;
    Ok(keep && encoding != Encoding::ToClose)
}

/// Queues `data` after what waits in `out`: copied when small, else
/// written after it as it is.
async fn put_data<W: AsyncWrite + Unpin>(
    writer: &mut W,
    out: &mut BytesMut,
    data: &Bytes,
) -> Result<(), ()> {
    if data.len() <= 16 << 10 {
        out.put_slice(data);
        return Ok(());
    }
    if !out.is_empty() {
        writer.write_all(out).await.map_err(|_| ())?;
        out.clear();
    }
    writer.write_all(data).await.map_err(|_| ())
}

fn put_field(out: &mut BytesMut, name: &HeaderName, value: &HeaderValue) {
    out.put_slice(name.as_str().as_bytes());
    out.put_slice(b": ");
    out.put_slice(value.as_bytes());
    out.put_slice(b"\r\n");
}

/// A response head as HTTP/1.1 writes it (HTTP/1.0 to an HTTP/1.0
/// visitor), with the reason the origin gave when it was its own.
fn write_head(out: &mut BytesMut, asked: &Asked, parts: &http::response::Parts) {
    put_status(out, asked, parts.status);
    match parts.extensions.get::<hyper::ext::ReasonPhrase>() {
        Some(reason) => out.put_slice(reason.as_bytes()),
        None => out.put_slice(parts.status.canonical_reason().unwrap_or("").as_bytes()),
    }
    out.put_slice(b"\r\n");
    for (name, value) in &parts.headers {
        put_field(out, name, value);
    }
    out.put_slice(b"\r\n");
}

/// Today's date as an HTTP field, made once a second per thread.
fn date() -> HeaderValue {
    use std::cell::RefCell;
    use std::time::{SystemTime, UNIX_EPOCH};
    thread_local! {
        static CACHED: RefCell<(u64, Option<HeaderValue>)> = const { RefCell::new((0, None)) };
    }
    let now = SystemTime::now();
    let second = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    CACHED.with(|cached| {
        let mut cached = cached.borrow_mut();
        if cached.0 != second || cached.1.is_none() {
            let value = HeaderValue::from_str(&httpdate::fmt_http_date(now))
                .unwrap_or_else(|_| HeaderValue::from_static("Thu, 01 Jan 1970 00:00:00 GMT"));
            *cached = (second, Some(value));
        }
        cached
            .1
            .clone()
            .unwrap_or_else(|| HeaderValue::from_static("Thu, 01 Jan 1970 00:00:00 GMT"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::read_ahead::READ_AHEAD;
    use crate::request_body::MinRate;
    use tokio::io::DuplexStream;

    const LIMITS: HeadLimits = HeadLimits {
        max_head_bytes: 8192,
        max_headers: 100,
    };

    fn rules(min_rate: Option<MinRate>, stall_ms: u64) -> BodyRules {
        BodyRules {
            min_rate,
            stall: Duration::from_millis(stall_ms),
            cap: None,
        }
    }

    /// A reading of one end of a pipe that has read the first head `head`
    /// and then `sent` of its body: the visitor's end, the reading, and
    /// the head's length.
    async fn front(head: &str, sent: &[u8]) -> (DuplexStream, Reading<DuplexStream>, u64) {
        let (mut visitor, edge) = tokio::io::duplex(1 << 20);
        visitor.write_all(head.as_bytes()).await.unwrap();
        visitor.write_all(sent).await.unwrap();
        let mut gate = Reading::with_opening(edge, LIMITS, b"");
        while !gate.first_head_done() {
            assert_ne!(gate.read_more().await.unwrap(), 0, "the head is whole");
        }
        (visitor, gate, head.len() as u64)
    }

    fn post(length: u64, extra: &str) -> String {
        format!("POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n{extra}\r\n")
    }

    #[tokio::test]
    async fn a_small_body_is_read_whole_before_the_proxy_gets_it() {
        let (mut visitor, mut gate, head) = front(&post(5, ""), b"hel").await;
        let late = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            visitor.write_all(b"lo").await.unwrap();
            visitor
        });
        let started = Instant::now();
        assert!(gate.read_ahead(&rules(None, 5_000)).await.is_ok());
        assert!(
            started.elapsed() >= Duration::from_millis(40),
            "it waited for the rest"
        );
        assert_eq!(gate.read_end(), head + 5);
        drop(late.await.unwrap());
    }

    /// Bodies that need no more than what came with the head, or than the
    /// mark: the front returns at once, though the rest never comes,
    /// having read at least what the rule says and no more than was sent.
    #[tokio::test]
    async fn the_front_reads_no_further_than_the_rule() {
        let large = vec![b'a'; READ_AHEAD as usize + 10];
        for (case, head, sent, least) in [
            (
                "a 1 MB body, to the mark",
                post(1_000_000, ""),
                &large[..],
                READ_AHEAD,
            ),
            (
                "Expect: 100-continue, nothing",
                post(5, "Expect: 100-continue\r\n"),
                &[][..],
                0,
            ),
        ] {
            let (_visitor, mut gate, head) = front(&head, sent).await;
            let done =
                tokio::time::timeout(Duration::from_secs(5), gate.read_ahead(&rules(None, 5_000)))
                    .await
                    .expect(case);
            assert!(done.is_ok(), "{case}");
            let read = gate.read_end() - head;
            assert!(
                (least..=sent.len() as u64).contains(&read),
                "{case}: read {read}"
            );
        }
    }

    #[tokio::test]
    async fn a_body_that_stops_is_answered_as_stalled() {
        let (_visitor, mut gate, _) = front(&post(5, ""), b"he").await;
        let started = Instant::now();
        let got = gate.read_ahead(&rules(None, 200)).await;
        assert!(
            matches!(got, Err(Some(EdgeError::BodyStalled(_)))),
            "{got:?}"
        );
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(190) && took < Duration::from_secs(2),
            "{took:?}"
        );
    }

    #[tokio::test]
    async fn a_body_under_the_least_rate_is_answered_as_too_slow() {
        // A byte every 50 ms, against at least 100 bytes per second.
        let (mut visitor, mut gate, _) = front(&post(1000, ""), b"").await;
        let trickle = tokio::spawn(async move {
            for _ in 0..100 {
                tokio::time::sleep(Duration::from_millis(50)).await;
                if visitor.write_all(b"a").await.is_err() {
                    break;
                }
            }
        });
        let slow = MinRate {
            bytes: 100,
            window: Duration::from_secs(1),
        };
        let started = Instant::now();
        let got = gate.read_ahead(&rules(Some(slow), 5_000)).await;
        assert!(
            matches!(got, Err(Some(EdgeError::BodyTooSlow(100, 1)))),
            "{got:?}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
        trickle.abort();
    }

    #[tokio::test]
    async fn a_body_cut_short_is_left_for_the_proxy() {
        let (visitor, mut gate, head) = front(&post(5, ""), b"he").await;
        drop(visitor);
        assert!(gate.read_ahead(&rules(None, 5_000)).await.is_ok());
        assert_eq!(gate.read_end(), head + 2);
    }
}
