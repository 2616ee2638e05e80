//! HTTP/1.1 to an origin over one tunnel stream: the edge's one writer of
//! requests and one reader of responses toward agents, whatever protocol
//! the visitor speaks.
//!
//! A request's framing is decided once, when it is made
//! ([`OriginRequest::new`]): its head written from the proxy's rewritten
//! request, its body as its length says, else chunked. A response is read
//! through the framing checker as a decoder ([`Checker::decode`]): each
//! head is parsed once, its header map made from that parse (values share
//! the head's bytes), and its body handed on as the checker frames it, in
//! frames of what the stream held at once (up to 64 KiB: QUIC's own
//! chunks are a packet each, too small to hand on one by one). A response
//! that fails a check fails its request (502) or its body (cut off for the
//! visitor), and the connection with it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response, StatusCode, Version};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, SizeHint};

use crate::h1_framing::{
    Checker, Decoded, Expect, Framing, HeadLimits, ParsedHead, keeps_alive, trailer_map,
};
use crate::request_body::{BodyError, RequestBody};
use crate::tunnel_stream::{ABORTED, TunnelStream};

/// The most of a body read from the stream at once (and so the largest
/// frame it goes on in).
const BODY_READ: usize = 64 << 10;

/// What an origin's response head may hold (hyper's own defaults).
pub(crate) const RESPONSE_HEAD_LIMITS: HeadLimits = HeadLimits {
    max_head_bytes: 8192 + 4096 * 100,
    max_headers: crate::h1_framing::HYPER_MAX_HEADERS,
};

/// Why an exchange with an origin failed.
#[derive(Debug, thiserror::Error)]
pub enum OriginError {
    /// The response failed a check of the framing checker.
    #[error("{0}")]
    Malformed(String),
    #[error("the connection closed before the response was whole")]
    Closed,
    #[error("reading the request body failed: {0}")]
    Body(BodyError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

impl OriginError {
    /// What the response checker found wrong, when that is the failure.
    pub fn malformed(&self) -> Option<&str> {
        match self {
            OriginError::Malformed(why) => Some(why),
            _ => None,
        }
    }
}

/// A request on its way to an origin, its framing decided: the head as
/// written, and the body with how it is sent.
pub struct OriginRequest {
    head: Bytes,
    body: RequestBody,
    encoding: Encoding,
    expect: Expect,
    interim: Option<Interim>,
}

/// In a request whose visitor takes interim answers (an extension the
/// HTTP/1 session sets): where the origin's informational answers (103
/// Early Hints and the like; not 100 Continue, which the edge answers
/// itself) go as they come, before the final one. A few are held; an
/// origin that sends more than the visitor takes loses the rest. (A queue
/// of its own, not a channel: one is made for every request, and a
/// channel's first block is kilobytes.)
#[derive(Clone)]
pub struct Interim(Arc<InterimQueue>);

struct InterimQueue {
    heads: std::sync::Mutex<std::collections::VecDeque<Response<()>>>,
    arrived: tokio::sync::Notify,
}

/// Interim answers held for a visitor at most.
const INTERIM_HELD: usize = 8;

impl Interim {
    pub fn new() -> Self {
        Self(Arc::new(InterimQueue {
            heads: std::sync::Mutex::new(std::collections::VecDeque::new()),
            arrived: tokio::sync::Notify::new(),
        }))
    }

    fn send(&self, head: Response<()>) {
        let mut heads = self.0.heads.lock().unwrap_or_else(|e| e.into_inner());
        if heads.len() < INTERIM_HELD {
            heads.push_back(head);
            drop(heads);
            self.0.arrived.notify_one();
        }
    }

    /// The next interim answer, if one came.
    pub fn try_take(&self) -> Option<Response<()>> {
        self.0
            .heads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop_front()
    }

    /// The next interim answer, once one comes.
    pub async fn next(&self) -> Response<()> {
        loop {
            if let Some(head) = self.try_take() {
                return head;
            }
            self.0.arrived.notified().await;
        }
    }
}

impl Default for Interim {
    fn default() -> Self {
        Self::new()
    }
}

/// How a request body is written.
enum Encoding {
    /// No body.
    None,
    Length(u64),
    /// Chunked, with the trailer fields its `Trailer` field declares.
    Chunked(Vec<HeaderName>),
}

impl OriginRequest {
    /// The request as the origin gets it, its framing decided: no body
    /// when the visitor's has ended; else a length (the field's, or the
    /// body's own, written then); else chunked, whatever the method (a
    /// GET of unknown length keeps its body).
    pub fn new(req: Request<RequestBody>) -> Box<Self> {
        let (mut parts, body) = req.into_parts();
        let interim = parts.extensions.remove::<Interim>();
        let headers = &mut parts.headers;
        let encoding = if body.is_end_stream() {
            headers.remove(header::TRANSFER_ENCODING);
            Encoding::None
        } else if headers.contains_key(header::TRANSFER_ENCODING) {
            Encoding::Chunked(declared_trailers(headers))
        } else if let Some(len) = body.size_hint().exact() {
            // The body's length as its framing was read (the visitor's
            // Content-Length, parsed once there).
            if !headers.contains_key(header::CONTENT_LENGTH) {
                headers.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
            }
            Encoding::Length(len)
        } else if let Some(len) = content_length(headers) {
            Encoding::Length(len)
        } else {
            headers.insert(
                header::TRANSFER_ENCODING,
                HeaderValue::from_static("chunked"),
            );
            Encoding::Chunked(declared_trailers(headers))
        };
        Box::new(Self {
            head: request_head(&parts),
            body,
            encoding,
            expect: Expect::of(&parts.method),
            interim,
        })
    }

    /// What kind of answer it expects (for the response checker).
    pub fn expect(&self) -> Expect {
        self.expect
    }
}

/// A request head as HTTP/1.1 writes it.
fn request_head(parts: &http::request::Parts) -> Bytes {
    let uri = &parts.uri;
    let origin_form = uri.scheme().is_none() && uri.authority().is_none();
    let target = match uri.path_and_query() {
        Some(target) if origin_form => std::borrow::Cow::Borrowed(target.as_str()),
        _ => std::borrow::Cow::Owned(uri.to_string()),
    };
    let fields: usize = parts
        .headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum();
    let method = parts.method.as_str();
    let mut head = BytesMut::with_capacity(method.len() + target.len() + 13 + fields + 2);
    head.put_slice(method.as_bytes());
    head.put_u8(b' ');
    head.put_slice(target.as_bytes());
    head.put_slice(if parts.version == Version::HTTP_10 {
        b" HTTP/1.0\r\n"
    } else {
        b" HTTP/1.1\r\n"
    });
    for (name, value) in &parts.headers {
        head.put_slice(name.as_str().as_bytes());
        head.put_slice(b": ");
        head.put_slice(value.as_bytes());
        head.put_slice(b"\r\n");
    }
    head.put_slice(b"\r\n");
    head.freeze()
}

fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// The trailer fields a request's `Trailer` field declares (hyper's rule:
/// only those are sent, and never one a trailer may not be).
fn declared_trailers(headers: &HeaderMap) -> Vec<HeaderName> {
    let mut names = Vec::new();
    for value in headers.get_all(header::TRAILER) {
        let Ok(value) = value.to_str() else { continue };
        for name in value.split(',').map(str::trim) {
            if let Ok(name) = HeaderName::from_bytes(name.as_bytes())
                && may_trail(&name)
            {
                names.push(name);
            }
        }
    }
    names
}

/// Whether a field may be sent as a trailer (hyper's list of those that
/// may not).
fn may_trail(name: &HeaderName) -> bool {
    !matches!(
        *name,
        header::AUTHORIZATION
            | header::CACHE_CONTROL
            | header::CONTENT_ENCODING
            | header::CONTENT_LENGTH
            | header::CONTENT_RANGE
            | header::CONTENT_TYPE
            | header::HOST
            | header::MAX_FORWARDS
            | header::SET_COOKIE
            | header::TRAILER
            | header::TRANSFER_ENCODING
            | header::TE
    )
}

/// The sending half of a connection's stream: dropped, it resets (a
/// connection closed by the edge, or cut off, never reads as a complete
/// message to the agent).
struct Upload(Option<quinn::SendStream>);

impl Upload {
    fn stream(&mut self) -> std::io::Result<&mut quinn::SendStream> {
        self.0
            .as_mut()
            .ok_or_else(|| std::io::ErrorKind::NotConnected.into())
    }

    async fn write(&mut self, chunk: Bytes) -> std::io::Result<()> {
        self.stream()?
            .write_chunk(chunk)
            .await
            .map_err(std::io::Error::from)
    }

    async fn write_all(&mut self, chunks: &mut [Bytes]) -> std::io::Result<()> {
        self.stream()?
            .write_all_chunks(chunks)
            .await
            .map_err(std::io::Error::from)
    }
}

impl Drop for Upload {
    fn drop(&mut self) {
        if let Some(send) = &mut self.0 {
            let _ = send.reset(ABORTED.into());
        }
    }
}

/// The receiving half, read through the checker.
struct Reader {
    recv: quinn::RecvStream,
    /// Bytes read and not yet handed on, from offset `base`.
    buf: BytesMut,
    base: u64,
    /// Where the checker's next look starts.
    from: u64,
    checker: Checker,
}

impl Reader {
    /// Drops the bytes before `to` (taken by the checker, not needed).
    fn discard_to(&mut self, to: u64) {
        let n = usize::try_from(to.saturating_sub(self.base))
            .unwrap_or(usize::MAX)
            .min(self.buf.len());
        self.buf.advance(n);
        self.base += n as u64;
    }

    /// The bytes from `start` to `end` (offsets within the buffer), taken
    /// out of it.
    fn take(&mut self, start: u64, end: u64) -> Bytes {
        self.discard_to(start);
        let n = (end - start) as usize;
        self.base += n as u64;
        self.buf.split_to(n).freeze()
    }

    /// One chunk of at most `max` bytes from the stream: `None` at its end.
    fn poll_chunk(
        &mut self,
        cx: &mut Context<'_>,
        max: usize,
    ) -> Poll<std::io::Result<Option<Bytes>>> {
        // Cancel-safe: a read that is not ready leaves the waker behind.
        let read = std::pin::pin!(self.recv.read_chunk(max, true));
        match read.poll(cx) {
            Poll::Ready(Ok(chunk)) => Poll::Ready(Ok(chunk.map(|c| c.bytes))),
            Poll::Ready(Err(err)) => Poll::Ready(Err(err.into())),
            Poll::Pending => Poll::Pending,
        }
    }

    /// Reads into the buffer once; false at the stream's end.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<bool>> {
        if let Some(left) = self.checker.data_left()
            && left >= BODY_READ as u64 / 4
        {
            // A large body: what QUIC holds, up to BODY_READ, in one read,
            // so that it goes on in frames of that size rather than one
            // per packet (QUIC's chunks are about a packet each).
            return self.poll_read_up_to(cx, BODY_READ);
        }
        match std::task::ready!(self.poll_chunk(cx, usize::MAX))? {
            Some(chunk) => {
                if self.buf.is_empty() {
                    // The chunk's own allocation, when nothing else is held.
                    self.buf = BytesMut::from(chunk);
                } else {
                    self.buf.extend_from_slice(&chunk);
                }
                Poll::Ready(Ok(true))
            }
            None => Poll::Ready(Ok(false)),
        }
    }

    /// Reads what the stream holds into the buffer, up to `max` bytes;
    /// false at its end.
    fn poll_read_up_to(&mut self, cx: &mut Context<'_>, max: usize) -> Poll<std::io::Result<bool>> {
        self.buf.reserve(max);
        let mut room = (&mut self.buf).limit(max);
        let n = std::task::ready!(tokio_util::io::poll_read_buf(
            Pin::new(&mut self.recv),
            cx,
            &mut room
        ))?;
        Poll::Ready(Ok(n > 0))
    }

    /// The next final response head, and its bytes; interim ones are
    /// passed to `interim` on the way.
    async fn read_head(
        &mut self,
        interim: Option<&Interim>,
    ) -> Result<(Box<ParsedHead>, Bytes), OriginError> {
        loop {
            match self.checker.decode(&self.buf, self.base, self.from) {
                Decoded::More { from } => {
                    self.discard_to(from);
                    self.from = from;
                    let more = std::future::poll_fn(|cx| self.poll_fill(cx)).await?;
                    if !more {
                        return Err(OriginError::Closed);
                    }
                }
                Decoded::Head(parsed) => {
                    let end = parsed.start + parsed.len as u64;
                    let bytes = self.take(parsed.start, end);
                    self.from = end;
                    if parsed.framing != Framing::Interim {
                        return Ok((parsed, bytes));
                    }
                    if let Some(interim) = interim
                        && parsed.status != 100
                        && let Ok(head) = response_head(&parsed, &bytes)
                    {
                        interim.send(head);
                    }
                }
                Decoded::Refused(refusal) => return Err(OriginError::Malformed(refusal.message)),
                Decoded::Data { .. } | Decoded::End { .. } | Decoded::Rest { .. } => {
                    return Err(OriginError::Malformed("a body before its head".into()));
                }
            }
        }
    }
}

/// One HTTP/1.1 connection to an origin, over one tunnel stream.
pub(crate) struct Connection {
    /// `None` while a request body is still being written (by its task).
    upload: Option<Upload>,
    reader: Reader,
    /// The kind of request in flight, for the checker.
    expect: Arc<AtomicU8>,
}

impl Connection {
    pub(crate) fn new(send: quinn::SendStream, recv: quinn::RecvStream) -> Box<Self> {
        // Nothing asked yet: bytes before the first request are refused.
        let expect = Arc::new(AtomicU8::new(Expect::Idle as u8));
        Box::new(Self {
            upload: Some(Upload(Some(send))),
            reader: Reader {
                recv,
                buf: BytesMut::new(),
                base: 0,
                from: 0,
                checker: Checker::response_decoder(RESPONSE_HEAD_LIMITS, expect.clone()),
            },
            expect,
        })
    }

    /// Whether it can carry a request now: idle, and nothing came from the
    /// origin since its last answer (an end, a reset, or bytes no request
    /// asked for would be taken for the next answer).
    pub(crate) fn ready(&mut self) -> bool {
        if Expect::from(self.expect.load(Ordering::Acquire)) != Expect::Idle
            || self.upload.is_none()
            || !self.reader.buf.is_empty()
        {
            return false;
        }
        let mut cx = Context::from_waker(std::task::Waker::noop());
        self.reader.poll_chunk(&mut cx, 1).is_pending()
    }

    /// Sends `req` and reads its answer's head. On `Err` with the request
    /// back, nothing of it left the edge (the connection was closed
    /// already), and another connection may take it.
    pub(crate) async fn exchange(
        mut self: Box<Self>,
        req: Box<OriginRequest>,
        home: Arc<super::Upstream>,
    ) -> Result<Response<OriginBody>, (OriginError, Option<Box<OriginRequest>>)> {
        self.expect.store(req.expect as u8, Ordering::Release);
        let Some(mut upload) = self.upload.take() else {
            return Err((OriginError::Closed, Some(req)));
        };
        let OriginRequest {
            head,
            body,
            encoding,
            expect,
            interim,
        } = *req;
        if let Err(err) = upload.write(head.clone()).await {
            // Nothing was sent: the stream was closed under the edge.
            let req = OriginRequest {
                head,
                body,
                encoding,
                expect,
                interim,
            };
            return Err((err.into(), Some(Box::new(req))));
        }
        let mut reusable = true;
        let mut sending = match encoding {
            Encoding::None => {
                self.upload = Some(upload);
                None
            }
            encoding => Some(Box::pin(send_body(upload, body, encoding))),
        };
        // The body goes out while the answer is awaited: an origin may
        // answer before reading it all.
        let answered = loop {
            let Some(upload) = sending.as_mut() else {
                break self.reader.read_head(interim.as_ref()).await;
            };
            tokio::select! {
                biased;
                sent = upload => {
                    sending = None;
                    match sent {
                        Ok(upload) => self.upload = Some(upload),
                        Err(err @ OriginError::Body(_)) => return Err((err, None)),
                        // The origin stopped reading: its answer may still
                        // come, on a connection not to be used again.
                        Err(_) => reusable = false,
                    }
                }
                head = self.reader.read_head(interim.as_ref()) => break head,
            }
        };
        let (parsed, head) = answered.map_err(|err| (err, None))?;
        // What came with the head is checked with it: a body already known
        // to be malformed fails the request, not the visitor's answer.
        let reader = &self.reader;
        if let Some(refusal) = reader
            .checker
            .refused_ahead(&reader.buf, reader.base, reader.from)
        {
            return Err((OriginError::Malformed(refusal.message), None));
        }
        let response = response_head(&parsed, &head).map_err(|err| (err, None))?;
        reusable &= keeps_alive(parsed.http10, response.headers());
        // The rest of a body still going out is a task's, as long as the
        // answer streams.
        let sending = sending.map(|upload| Sending(tokio::spawn(upload)));
        let (state, size) = match parsed.framing {
            Framing::Length(n) => (BodyState::Framed, SizeHint::with_exact(n)),
            Framing::Chunked => (BodyState::Framed, SizeHint::default()),
            Framing::ToClose => (BodyState::ToClose, SizeHint::default()),
            Framing::Switched => (BodyState::Switched, SizeHint::with_exact(0)),
            Framing::Empty | Framing::Interim => (BodyState::Done, SizeHint::with_exact(0)),
        };
        let mut body = OriginBody {
            conn: Some(self),
            state,
            size,
            reusable: reusable && state != BodyState::ToClose,
            sending,
            home: Some(home),
        };
        if state == BodyState::Done {
            body.ended();
        }
        Ok(response.map(|()| body))
    }
}

/// Writes a request body as `encoding` frames it; the sending half back
/// once it is all out.
async fn send_body(
    mut upload: Upload,
    mut body: RequestBody,
    encoding: Encoding,
) -> Result<Upload, OriginError> {
    let mut sent = 0u64;
    let mut trailers = None;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(OriginError::Body)?;
        let frame = match frame.into_data() {
            Ok(data) if data.is_empty() => continue,
            Ok(data) => data,
            Err(frame) => {
                trailers = frame.into_trailers().ok();
                continue;
            }
        };
        sent += frame.len() as u64;
        match &encoding {
            Encoding::Length(len) if sent > *len => {
                return Err(OriginError::Body(
                    "the request body is longer than its length".into(),
                ));
            }
            Encoding::Chunked(_) => {
                let size = Bytes::from(format!("{:x}\r\n", frame.len()));
                upload
                    .write_all(&mut [size, frame, Bytes::from_static(b"\r\n")])
                    .await?;
            }
            _ => upload.write(frame).await?,
        }
    }
    match &encoding {
        Encoding::Length(len) if sent < *len => Err(OriginError::Body(
            "the request body ended before its length".into(),
        )),
        Encoding::Chunked(declared) => {
            let mut last = BytesMut::from(&b"0\r\n"[..]);
            for (name, value) in trailers.iter().flatten() {
                if declared.contains(name) {
                    last.put_slice(name.as_str().as_bytes());
                    last.put_slice(b": ");
                    last.put_slice(value.as_bytes());
                    last.put_slice(b"\r\n");
                }
            }
            last.put_slice(b"\r\n");
            upload.write(last.freeze()).await?;
            Ok(upload)
        }
        _ => Ok(upload),
    }
}

/// A response head, made from the checker's parse of its bytes: its
/// values share them.
fn response_head(parsed: &ParsedHead, head: &Bytes) -> Result<Response<()>, OriginError> {
    let bad = |what: &str| OriginError::Malformed(format!("malformed response head: {what}"));
    let status = StatusCode::from_u16(parsed.status).map_err(|_| bad("invalid status"))?;
    let mut response = Response::new(());
    *response.status_mut() = status;
    *response.version_mut() = parsed.version();
    *response.headers_mut() = parsed.header_map(head).map_err(bad)?;
    let (reason_start, reason_end) = parsed.reason;
    let reason = &head[reason_start..reason_end];
    if !reason.is_empty()
        && status.canonical_reason().map(str::as_bytes) != Some(reason)
        && let Ok(reason) = hyper::ext::ReasonPhrase::try_from(head.slice(reason_start..reason_end))
    {
        response.extensions_mut().insert(reason);
    }
    Ok(response)
}

/// A request body still going out while its answer streams; aborted with
/// it.
struct Sending(tokio::task::JoinHandle<Result<Upload, OriginError>>);

impl Drop for Sending {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BodyState {
    /// Framed by the checker (a length, chunks).
    Framed,
    /// Everything up to the stream's end.
    ToClose,
    /// No body: the connection is the new protocol's.
    Switched,
    Done,
}

/// An origin's response body, read off its connection as the checker
/// frames it. Ended exactly where its framing says, with its request all
/// sent, it puts the connection back in its pool; cut off, malformed or
/// dropped before its end, the connection resets.
pub struct OriginBody {
    conn: Option<Box<Connection>>,
    state: BodyState,
    size: SizeHint,
    /// Whether the connection may carry another request.
    reusable: bool,
    sending: Option<Sending>,
    home: Option<Arc<super::Upstream>>,
}

impl OriginBody {
    /// The connection, once the origin switched protocols (101, or a
    /// CONNECT answered): its stream, and the bytes of the new protocol
    /// read with the answer, which come first.
    pub fn switched(&mut self) -> Option<(TunnelStream, Bytes)> {
        if self.state != BodyState::Switched {
            return None;
        }
        self.state = BodyState::Done;
        // A request body still going out is not the new protocol's.
        if self.sending.is_some() {
            return None;
        }
        let conn = self.conn.take()?;
        let Connection { upload, reader, .. } = *conn;
        let send = upload?.0.take()?;
        let early = reader.buf.freeze();
        Some((TunnelStream::new(reader.recv, send), early))
    }

    /// The body ended where its framing said: the connection goes back to
    /// its pool when it may.
    fn ended(&mut self) {
        self.state = BodyState::Done;
        let (Some(mut conn), Some(home)) = (self.conn.take(), self.home.take()) else {
            return;
        };
        if let Some(Sending(task)) = &mut self.sending {
            // The answer came before the request was all out: the
            // connection is used again only if it is out now.
            if !task.is_finished() {
                return;
            }
            let mut cx = Context::from_waker(std::task::Waker::noop());
            match Pin::new(task).poll(&mut cx) {
                Poll::Ready(Ok(Ok(upload))) => conn.upload = Some(upload),
                _ => return,
            }
            self.sending = None;
        }
        if self.reusable && conn.reader.buf.is_empty() {
            home.recycle(conn);
        }
    }

    fn fail(&mut self, err: OriginError) -> Poll<Option<Result<Frame<Bytes>, OriginError>>> {
        self.state = BodyState::Done;
        self.conn = None;
        Poll::Ready(Some(Err(err)))
    }

    fn poll_framed(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, OriginError>>> {
        loop {
            let Some(conn) = self.conn.as_mut() else {
                return Poll::Ready(None);
            };
            let reader = &mut conn.reader;
            match reader.checker.decode(&reader.buf, reader.base, reader.from) {
                Decoded::Data { start, end, last } => {
                    let data = reader.take(start, end);
                    reader.from = end;
                    if last {
                        self.ended();
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Decoded::End { at } => {
                    reader.discard_to(at);
                    reader.from = at;
                    let trailers = reader.checker.take_trailers();
                    self.ended();
                    if trailers.is_empty() {
                        return Poll::Ready(None);
                    }
                    return match trailer_map(&trailers) {
                        Some(map) => Poll::Ready(Some(Ok(Frame::trailers(map)))),
                        None => {
                            self.fail(OriginError::Malformed("a malformed trailer section".into()))
                        }
                    };
                }
                Decoded::More { from } => {
                    reader.discard_to(from);
                    reader.from = from;
                    if !std::task::ready!(reader.poll_fill(cx))? {
                        return self.fail(OriginError::Closed);
                    }
                }
                Decoded::Refused(refusal) => {
                    return self.fail(OriginError::Malformed(refusal.message));
                }
                Decoded::Head(_) | Decoded::Rest { .. } => {
                    return self.fail(OriginError::Malformed("bytes after the body".into()));
                }
            }
        }
    }

    fn poll_to_close(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, OriginError>>> {
        let Some(conn) = self.conn.as_mut() else {
            return Poll::Ready(None);
        };
        let reader = &mut conn.reader;
        if reader.buf.is_empty() && !std::task::ready!(reader.poll_read_up_to(cx, BODY_READ))? {
            // Its end is the body's: the connection is done.
            self.state = BodyState::Done;
            self.conn = None;
            return Poll::Ready(None);
        }
        let data = reader.buf.split().freeze();
        Poll::Ready(Some(Ok(Frame::data(data))))
    }
}

impl Body for OriginBody {
    type Data = Bytes;
    type Error = OriginError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, OriginError>>> {
        let this = &mut *self;
        let polled = match this.state {
            BodyState::Framed => this.poll_framed(cx),
            BodyState::ToClose => this.poll_to_close(cx),
            BodyState::Switched | BodyState::Done => return Poll::Ready(None),
        };
        if let Poll::Ready(Some(Err(_))) = &polled {
            this.state = BodyState::Done;
            this.conn = None;
        }
        if let (Poll::Ready(Some(Ok(frame))), Some(exact)) = (&polled, this.size.exact()) {
            let len = frame.data_ref().map_or(0, |d| d.len() as u64);
            this.size = SizeHint::with_exact(exact.saturating_sub(len));
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.state, BodyState::Done | BodyState::Switched)
    }

    fn size_hint(&self) -> SizeHint {
        self.size
    }
}
