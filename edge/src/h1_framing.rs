//! A strict gate in front of hyper on visitors' HTTP/1 connections.
//!
//! hyper follows RFC 9112's lenient choices: a request with both
//! `Content-Length` and `Transfer-Encoding` is read as chunked (and the
//! connection closed after), `chunked, chunked` is read as chunked, a
//! repeated identical `Content-Length` is accepted, and a malformed chunk is
//! only found once the request is already on its way to the origin. Those
//! ambiguities are what request smuggling is made of, so the edge refuses
//! them before hyper sees them: this gate reads the visitor's bytes, checks
//! each request's head (with httparse, the parser hyper uses) and its body
//! framing, and hands hyper only what passed. A request that fails never
//! reaches hyper, so no stream is opened for it: the visitor gets 400 (501
//! for a transfer coding the edge does not know), and the connection
//! closes after the answers to the requests before it.
//!
//! Bytes reach hyper as soon as they are checked; only a head still
//! incomplete is held back, which hyper could not use anyway. When the
//! malformed part arrives after its request was handed on (a bad chunk in
//! a later packet), the gate fails the read instead: hyper fails the
//! request body and the edge aborts the stream, so the origin never sees
//! a complete request.
//!
//! After a request asking for an upgrade, nothing more is read until the
//! answer is written: a 101 ends HTTP on the connection (the gate steps
//! aside), any other answer keeps it.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll, Waker};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::error_page::ERROR_HEADER;
use crate::rewind::poll_write_rest;

/// The longest chunk-size line (size and extensions) and trailer section
/// the gate takes.
const MAX_CHUNK_LINE: usize = 4096;
const READ_SIZE: usize = 16 * 1024;

/// Why a request was refused, and with which status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub status: u16,
    pub code: &'static str,
    pub message: String,
}

impl Refusal {
    fn bad(message: impl Into<String>) -> Self {
        Self {
            status: 400,
            code: "bad-request",
            message: message.into(),
        }
    }

    /// The whole answer, closing the connection.
    fn response(&self) -> Vec<u8> {
        let reason = match self.status {
            400 => "Bad Request",
            431 => "Request Header Fields Too Large",
            501 => "Not Implemented",
            _ => "Error",
        };
        let body = format!("{}\n", self.message);
        format!(
            "HTTP/1.1 {} {reason}\r\ncontent-type: text/plain; charset=utf-8\r\n\
             {ERROR_HEADER}: {}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            self.status,
            self.code,
            body.len()
        )
        .into_bytes()
    }
}

/// Where the checker is in the visitor's byte stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading a request head (starting at `Checker::message_start`).
    Head,
    /// Body bytes left of a `Content-Length` body.
    Fixed { left: u64 },
    /// Reading a chunk-size line (into `Checker::line`).
    ChunkSize,
    /// Data bytes left of a chunk, then its CRLF.
    ChunkData { left: u64 },
    /// The CRLF after chunk data: `cr` when the CR was seen.
    ChunkEnd { cr: bool },
    /// Trailer lines after the last chunk (this line in `Checker::line`),
    /// `total` bytes of them so far.
    Trailers { total: usize },
    /// An upgrade was asked: nothing is read until the answer is written.
    AwaitingAnswer,
    /// Not HTTP any more (upgraded), or refused.
    Aside,
}

/// The size the gate needs for the head checks.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HeadLimits {
    pub max_head_bytes: usize,
    pub max_headers: usize,
}

/// The framing state machine over a connection's bytes, by absolute offset.
#[derive(Debug)]
struct Checker {
    state: State,
    limits: HeadLimits,
    /// Where the request being read began.
    message_start: u64,
    /// Where the message being read leads once it ends.
    then: Then,
    role: Role,
    /// Request heads passed so far.
    heads: u64,
    /// The chunk-size or trailer line being read.
    line: Vec<u8>,
}

/// What checking a batch of bytes found.
#[derive(Debug, PartialEq, Eq)]
enum Checked {
    /// Every byte up to this offset may go to hyper.
    ReadyTo(u64),
    /// The request starting at `message` is refused; if it was already
    /// handed on, bytes up to `at` may go and then the read fails.
    Refused {
        message: u64,
        at: u64,
        refusal: Refusal,
        /// Requests passed before the refused one.
        passed: u64,
    },
}

impl Checker {
    fn new(limits: HeadLimits) -> Self {
        Self {
            state: State::Head,
            limits,
            message_start: 0,
            then: Then::Head,
            role: Role::Request,
            heads: 0,
            line: Vec::new(),
        }
    }

    /// Checks `bytes`, the unreleased bytes starting at offset `base`, of
    /// which those before `from` were checked already.
    fn check(&mut self, bytes: &[u8], base: u64, from: u64) -> Checked {
        let mut at = from;
        let end = base + bytes.len() as u64;
        while at < end {
            let byte = bytes[(at - base) as usize];
            match self.state {
                State::Aside | State::AwaitingAnswer => return Checked::ReadyTo(at),
                State::Head => {
                    let start = self.message_start;
                    match self.head(&bytes[(start - base) as usize..]) {
                        Ok(None) => return Checked::ReadyTo(start),
                        Ok(Some(len)) => at = start + len as u64,
                        Err(refusal) => return self.refused(at, refusal),
                    }
                    if self.state == State::Head {
                        // No body.
                        self.message_done(at);
                    }
                    continue;
                }
                State::Fixed { left } => {
                    let take = left.min(end - at);
                    at += take;
                    if take == left {
                        self.message_done(at);
                    } else {
                        self.state = State::Fixed { left: left - take };
                    }
                    continue;
                }
                State::ChunkSize => {
                    if byte == b'\n' {
                        match chunk_size(&self.line) {
                            Ok(0) => self.state = State::Trailers { total: 0 },
                            Ok(size) => self.state = State::ChunkData { left: size },
                            Err(refusal) => return self.refused(at, refusal),
                        }
                        self.line.clear();
                    } else if self.line.len() >= MAX_CHUNK_LINE {
                        return self.refused(at, Refusal::bad("a chunk-size line is too long"));
                    } else {
                        self.line.push(byte);
                    }
                }
                State::ChunkData { left } => {
                    let take = left.min(end - at);
                    at += take;
                    self.state = if take == left {
                        State::ChunkEnd { cr: false }
                    } else {
                        State::ChunkData { left: left - take }
                    };
                    continue;
                }
                State::ChunkEnd { cr } => match (cr, byte) {
                    (false, b'\r') => self.state = State::ChunkEnd { cr: true },
                    (true, b'\n') => self.state = State::ChunkSize,
                    _ => {
                        return self
                            .refused(at, Refusal::bad("chunk data is longer than its chunk size"));
                    }
                },
                State::Trailers { total } => {
                    if total >= MAX_CHUNK_LINE {
                        return self.refused(at, Refusal::bad("the trailer section is too long"));
                    }
                    match byte {
                        b'\n' if self.line.is_empty() || self.line == b"\r" => {
                            self.line.clear();
                            self.message_done(at + 1);
                        }
                        b'\n' => {
                            self.line.clear();
                            self.state = State::Trailers { total: total + 1 };
                        }
                        0 => return self.refused(at, Refusal::bad("a trailer holds a NUL byte")),
                        _ => {
                            self.line.push(byte);
                            self.state = State::Trailers { total: total + 1 };
                        }
                    }
                }
            }
            at += 1;
        }
        match self.state {
            State::Head => Checked::ReadyTo(self.message_start.min(end)),
            _ => Checked::ReadyTo(end),
        }
    }

    fn refused(&mut self, at: u64, refusal: Refusal) -> Checked {
        // A refusal in a body comes after its head was counted.
        let passed = match self.state {
            State::Head => self.heads,
            _ => self.heads.saturating_sub(1),
        };
        self.state = State::Aside;
        Checked::Refused {
            message: self.message_start,
            at,
            refusal,
            passed,
        }
    }

    fn message_done(&mut self, at: u64) {
        self.message_start = at;
        self.state = match std::mem::replace(&mut self.then, Then::Head) {
            Then::Head => State::Head,
            Then::AwaitAnswer => State::AwaitingAnswer,
            Then::Aside => State::Aside,
        };
    }

    /// Parses the head at the start of `bytes`: its length once complete
    /// (and the state set for its body), `None` while incomplete.
    fn head(&mut self, bytes: &[u8]) -> Result<Option<usize>, Refusal> {
        match &self.role {
            Role::Request => self.request_head(bytes),
            Role::Response(expect) => {
                let expect = Expect::from(expect.load(Ordering::Acquire));
                self.response_head(bytes, expect)
            }
        }
    }

    fn response_head(&mut self, bytes: &[u8], expect: Expect) -> Result<Option<usize>, Refusal> {
        let mut headers = vec![httparse::EMPTY_HEADER; self.limits.max_headers];
        let mut response = httparse::Response::new(&mut headers);
        let len = match response.parse(bytes) {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) if bytes.len() > self.limits.max_head_bytes => {
                return Err(Refusal::bad("the response head is too large"));
            }
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(err) => return Err(Refusal::bad(format!("malformed response head: {err}"))),
        };
        let status = response.code.unwrap_or_default();
        let http10 = response.version == Some(0);
        // Conflicts are refused even where the body's length is implied.
        let framing = framing(response.headers, http10, "response")?;
        (self.state, self.then) = match (status, expect) {
            (101, _) => (State::Head, Then::Aside),
            (100..=199, _) => (State::Head, Then::Head),
            (200..=299, Expect::Connect) => (State::Head, Then::Aside),
            (204 | 304, _) | (_, Expect::Head) => (State::Head, Then::Head),
            _ => match framing {
                BodyFraming::Length(left) => (State::Fixed { left }, Then::Head),
                BodyFraming::Chunked => (State::ChunkSize, Then::Head),
                BodyFraming::Empty => (State::Head, Then::Head),
                // Read to the end of the connection.
                BodyFraming::None => (State::Aside, Then::Head),
            },
        };
        Ok(Some(len))
    }

    fn request_head(&mut self, bytes: &[u8]) -> Result<Option<usize>, Refusal> {
        let mut headers = vec![httparse::EMPTY_HEADER; self.limits.max_headers];
        let mut request = httparse::Request::new(&mut headers);
        let len = match request.parse(bytes) {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) if bytes.len() > self.limits.max_head_bytes => {
                return Err(self.head_too_large());
            }
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(httparse::Error::TooManyHeaders) => {
                return Err(Refusal {
                    status: 431,
                    code: "too-many-headers",
                    message: format!(
                        "the request has more than {} header fields",
                        self.limits.max_headers
                    ),
                });
            }
            Err(err) => return Err(Refusal::bad(format!("malformed request head: {err}"))),
        };
        if len > self.limits.max_head_bytes {
            return Err(self.head_too_large());
        }
        let http10 = request.version == Some(0);
        let upgrade = !http10
            && (request.method == Some("CONNECT")
                || request
                    .headers
                    .iter()
                    .any(|h| h.name.eq_ignore_ascii_case("upgrade")));
        self.state = match framing(request.headers, http10, "request")? {
            BodyFraming::None | BodyFraming::Empty => State::Head,
            BodyFraming::Length(left) => State::Fixed { left },
            BodyFraming::Chunked => State::ChunkSize,
        };
        self.then = if upgrade {
            Then::AwaitAnswer
        } else {
            Then::Head
        };
        self.heads += 1;
        Ok(Some(len))
    }

    fn head_too_large(&self) -> Refusal {
        Refusal {
            status: 431,
            code: "head-too-large",
            message: format!(
                "the request head is larger than {} bytes",
                self.limits.max_head_bytes
            ),
        }
    }

    /// hyper wrote the start of an answer: after an upgrade request, a 101
    /// ends HTTP and anything else but an interim answer keeps it.
    fn answer_written(&mut self, start: &[u8]) {
        if self.state != State::AwaitingAnswer || start.len() < 12 {
            return;
        }
        if start.starts_with(b"HTTP/1.1 101") {
            self.state = State::Aside;
        } else if !start[9..].starts_with(b"1") {
            self.state = State::Head;
        }
    }
}

/// Whether a write starts a final (not 1xx) response head. (hyper writes
/// a head at the start of a write; a body that happens to start the same
/// way can only end a refused connection's wait early.)
fn is_final_answer(start: &[u8]) -> bool {
    start.len() >= 12
        && (start.starts_with(b"HTTP/1.1 ") || start.starts_with(b"HTTP/1.0 "))
        && start[9].is_ascii_digit()
        && start[9] != b'1'
}

#[derive(Debug, PartialEq, Eq)]
enum BodyFraming {
    /// No length given.
    None,
    /// `Content-Length: 0`.
    Empty,
    Length(u64),
    Chunked,
}

/// Where a message leads once it ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Then {
    Head,
    AwaitAnswer,
    Aside,
}

/// Which side's messages a checker reads.
#[derive(Debug)]
enum Role {
    /// Visitors' requests.
    Request,
    /// An origin's responses, to the kind of request the [`Expect`] holds.
    Response(Arc<AtomicU8>),
}

/// What kind of request a response answers, where that changes its framing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Expect {
    Other = 0,
    Head = 1,
    Connect = 2,
}

impl From<u8> for Expect {
    fn from(value: u8) -> Self {
        match value {
            1 => Expect::Head,
            2 => Expect::Connect,
            _ => Expect::Other,
        }
    }
}

impl Expect {
    pub fn of(method: &http::Method) -> Self {
        match *method {
            http::Method::HEAD => Expect::Head,
            http::Method::CONNECT => Expect::Connect,
            _ => Expect::Other,
        }
    }
}

/// The one body framing a message head allows, or why it is ambiguous.
fn framing(
    headers: &[httparse::Header<'_>],
    http10: bool,
    what: &str,
) -> Result<BodyFraming, Refusal> {
    let mut lengths = Vec::new();
    let mut codings = Vec::new();
    for header in headers {
        if header.name.eq_ignore_ascii_case("content-length") {
            lengths.push(header.value);
        } else if header.name.eq_ignore_ascii_case("transfer-encoding") {
            let value = std::str::from_utf8(header.value)
                .map_err(|_| Refusal::bad("Transfer-Encoding is not text"))?;
            codings.extend(
                value
                    .split(',')
                    .map(|c| c.trim_matches([' ', '\t']))
                    .filter(|c| !c.is_empty())
                    .map(str::to_ascii_lowercase),
            );
        }
    }
    let te = headers
        .iter()
        .any(|h| h.name.eq_ignore_ascii_case("transfer-encoding"));
    if te && http10 {
        return Err(Refusal::bad(format!(
            "an HTTP/1.0 {what} cannot use Transfer-Encoding"
        )));
    }
    if te && !lengths.is_empty() {
        return Err(Refusal::bad(format!(
            "the {what} has both Content-Length and Transfer-Encoding"
        )));
    }
    if te {
        if codings.iter().filter(|c| *c == "chunked").count() > 1 {
            return Err(Refusal::bad(format!(
                "the {what} is chunked more than once"
            )));
        }
        if codings.last().map(String::as_str) != Some("chunked") {
            return Err(Refusal::bad(format!(
                "Transfer-Encoding must end with chunked in a {what}"
            )));
        }
        if let Some(other) = codings.iter().find(|c| *c != "chunked") {
            return Err(Refusal {
                status: 501,
                code: "unsupported-transfer-coding",
                message: format!("the transfer coding {other:?} is not supported"),
            });
        }
        return Ok(BodyFraming::Chunked);
    }
    match lengths.as_slice() {
        [] => Ok(BodyFraming::None),
        [value] => match content_length(value) {
            Some(0) => Ok(BodyFraming::Empty),
            Some(len) => Ok(BodyFraming::Length(len)),
            None => Err(Refusal::bad("Content-Length is not a decimal number")),
        },
        _ => Err(Refusal::bad(format!(
            "the {what} has more than one Content-Length"
        ))),
    }
}

/// A Content-Length value: digits only, no sign, list or spaces.
fn content_length(value: &[u8]) -> Option<u64> {
    if value.is_empty() || value.len() > 19 || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(value).ok()?.parse().ok()
}

/// The size on a chunk-size line (which ends with CRLF; extensions after
/// `;` are allowed and dropped when the body is passed on).
fn chunk_size(line: &[u8]) -> Result<u64, Refusal> {
    let Some(line) = line.strip_suffix(b"\r") else {
        return Err(Refusal::bad("a chunk-size line does not end with CRLF"));
    };
    let digits = line.split(|b| *b == b';').next().unwrap_or_default();
    if digits.is_empty() || digits.len() > 15 || !digits.iter().all(u8::is_ascii_hexdigit) {
        return Err(Refusal::bad("a chunk size is not a hexadecimal number"));
    }
    if line.iter().any(|b| *b == b'\r' || *b == 0) {
        return Err(Refusal::bad("a chunk-size line holds a CR or NUL byte"));
    }
    let digits = std::str::from_utf8(digits).map_err(|_| Refusal::bad("bad chunk size"))?;
    u64::from_str_radix(digits, 16).map_err(|_| Refusal::bad("bad chunk size"))
}

/// A visitor's HTTP/1 connection with the gate in front; see the module
/// documentation.
pub(crate) struct FramingGate<S> {
    inner: S,
    checker: Checker,
    /// Bytes read and not yet handed to hyper, from offset `base`.
    pending: Vec<u8>,
    base: u64,
    /// Bytes before this offset are checked; before `ready`, released.
    checked: u64,
    ready: u64,
    /// A refused request: answered when hyper closes the connection.
    refusal: Option<Refusal>,
    /// Requests passed before it, and final answers hyper has written: the
    /// read ends (and hyper closes) only once every one is answered.
    passed: u64,
    answers: u64,
    /// Offset past which the read fails (a refusal after hand-on), and why.
    fail_at: Option<u64>,
    failure: String,
    answer: Option<(Vec<u8>, usize)>,
    eof: bool,
    reader: Option<Waker>,
}

impl<S> FramingGate<S> {
    pub fn new(inner: S, limits: HeadLimits) -> Self {
        Self::with_checker(inner, Checker::new(limits))
    }

    /// A gate on an origin's connection, checking its responses: one with
    /// ambiguous framing fails the read, so hyper gets an error (the edge
    /// answers 502, or aborts a body under way) and never passes it on.
    /// `expect` holds the [`Expect`] of the request in flight.
    pub fn for_responses(inner: S, expect: Arc<AtomicU8>, limits: HeadLimits) -> Self {
        let mut checker = Checker::new(limits);
        checker.role = Role::Response(expect);
        Self::with_checker(inner, checker)
    }

    fn with_checker(inner: S, checker: Checker) -> Self {
        Self {
            inner,
            checker,
            pending: Vec::new(),
            base: 0,
            checked: 0,
            ready: 0,
            refusal: None,
            passed: 0,
            answers: 0,
            fail_at: None,
            failure: String::new(),
            answer: None,
            eof: false,
            reader: None,
        }
    }

    /// The stream, and bytes read from it that hyper has not had (past an
    /// upgrade, they belong to the new protocol).
    pub fn into_parts(self) -> (S, Vec<u8>) {
        (self.inner, self.pending)
    }

    /// Hands hyper what is ready; false when nothing is.
    fn release(&mut self, buf: &mut ReadBuf<'_>) -> bool {
        let n = ((self.ready - self.base) as usize).min(buf.remaining());
        if n == 0 {
            return false;
        }
        buf.put_slice(&self.pending[..n]);
        self.pending.drain(..n);
        self.base += n as u64;
        true
    }

    fn run_checker(&mut self) {
        match self
            .checker
            .check(&self.pending, self.base, self.checked.max(self.base))
        {
            Checked::ReadyTo(to) => {
                self.ready = to.max(self.ready);
                self.checked = match self.checker.state {
                    // A partial head is checked again as it grows.
                    State::Head => self.checker.message_start,
                    State::AwaitingAnswer | State::Aside => to,
                    _ => self.base + self.pending.len() as u64,
                };
            }
            Checked::Refused {
                message,
                at,
                refusal,
                passed,
            } => {
                self.checked = self.base + self.pending.len() as u64;
                if let Role::Response(_) = self.checker.role {
                    // Nothing of a refused response is handed on.
                    self.ready = if message >= self.base { message } else { at };
                    self.fail_at = Some(self.ready);
                    self.failure = refusal.message;
                } else if message >= self.base {
                    // Not handed on yet: hyper never sees it.
                    self.ready = message.max(self.ready);
                    self.refusal = Some(refusal);
                    self.passed = passed;
                } else {
                    self.ready = at;
                    self.fail_at = Some(at);
                    tracing::debug!(message = %refusal.message, "request refused mid-body");
                    self.failure = refusal.message;
                }
                self.pending.truncate((self.ready - self.base) as usize);
            }
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for FramingGate<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if this.release(buf) {
                return Poll::Ready(Ok(()));
            }
            if this.checker.state == State::Aside
                && this.refusal.is_none()
                && this.fail_at.is_none()
            {
                if !this.pending.is_empty() {
                    this.ready = this.base + this.pending.len() as u64;
                    continue;
                }
                return Pin::new(&mut this.inner).poll_read(cx, buf);
            }
            if this.fail_at.is_some() {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    this.failure.clone(),
                )));
            }
            if this.refusal.is_some() && this.answers < this.passed {
                // An end of input now would make hyper drop the requests
                // before the refused one; they are answered first.
                this.reader = Some(cx.waker().clone());
                return Poll::Pending;
            }
            if this.refusal.is_some() || this.eof {
                return Poll::Ready(Ok(()));
            }
            if this.checker.state == State::AwaitingAnswer {
                this.reader = Some(cx.waker().clone());
                return Poll::Pending;
            }
            if let (true, State::Fixed { left } | State::ChunkData { left }) =
                (this.pending.is_empty(), this.checker.state)
            {
                // Body bytes, nothing held: read straight into hyper's
                // buffer (no copy), at most to the end of the chunk.
                let before = buf.filled().len();
                let want = usize::try_from(left)
                    .unwrap_or(usize::MAX)
                    .min(buf.remaining());
                let mut body = ReadBuf::new(buf.initialize_unfilled_to(want));
                std::task::ready!(Pin::new(&mut this.inner).poll_read(cx, &mut body))?;
                let n = body.filled().len();
                if n == 0 {
                    this.eof = true;
                    return Poll::Ready(Ok(()));
                }
                buf.advance(n);
                let checked = this
                    .checker
                    .check(&buf.filled()[before..], this.base, this.base);
                debug_assert_eq!(checked, Checked::ReadyTo(this.base + n as u64));
                this.base += n as u64;
                this.checked = this.base;
                this.ready = this.base;
                return Poll::Ready(Ok(()));
            }
            let mut chunk = [0u8; READ_SIZE];
            let mut read = ReadBuf::new(&mut chunk);
            match Pin::new(&mut this.inner).poll_read(cx, &mut read) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(err)) => return Poll::Ready(Err(err)),
                Poll::Ready(Ok(())) if read.filled().is_empty() => {
                    // The visitor is done: whatever it sent is hyper's.
                    this.eof = true;
                    this.ready = this.base + this.pending.len() as u64;
                }
                Poll::Ready(Ok(())) => {
                    this.pending.extend_from_slice(read.filled());
                    this.run_checker();
                }
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> FramingGate<S> {
    fn saw_write(&mut self, start: &[u8]) {
        if is_final_answer(start) {
            self.answers += 1;
            if self.answers >= self.passed
                && let Some(waker) = self.reader.take()
            {
                waker.wake();
            }
        }
        let before = self.checker.state;
        self.checker.answer_written(start);
        if self.checker.state != before {
            if self.checker.state == State::Head {
                self.checked = self.checker.message_start;
                self.run_checker();
            }
            if let Some(waker) = self.reader.take() {
                waker.wake();
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for FramingGate<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.saw_write(buf);
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if let Some(first) = bufs.iter().find(|b| !b.is_empty()) {
            self.saw_write(first);
        }
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    /// hyper closes the connection: a refused request is answered first.
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if let Some(refusal) = this.refusal.take() {
            this.answer = Some((refusal.response(), 0));
        }
        if let Some((answer, written)) = &mut this.answer {
            std::task::ready!(poll_write_rest(&mut this.inner, cx, answer, written))?;
            this.answer = None;
        }
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> HeadLimits {
        HeadLimits {
            max_head_bytes: 8192,
            max_headers: 100,
        }
    }

    fn check_all(text: &[u8]) -> Checked {
        Checker::new(limits()).check(text, 0, 0)
    }

    #[test]
    fn whole_requests_are_released_and_partial_heads_held() {
        let two = b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nPOST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc";
        assert_eq!(check_all(two), Checked::ReadyTo(two.len() as u64));
        let partial = b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHo";
        assert_eq!(check_all(partial), Checked::ReadyTo(28));
    }

    #[test]
    fn a_bad_chunk_in_the_same_read_refuses_its_whole_request() {
        let text = b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nPOST /b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n";
        let Checked::Refused { message, .. } = check_all(text) else {
            panic!("refused");
        };
        assert_eq!(message, 28);
    }

    #[test]
    fn chunk_sizes_and_lengths_are_strict() {
        assert_eq!(chunk_size(b"1f;ext=1\r"), Ok(31));
        assert!(chunk_size(b"1f").is_err());
        assert!(chunk_size(b"-1\r").is_err());
        assert!(chunk_size(b"0x1\r").is_err());
        assert!(chunk_size(b"ffffffffffffffff\r").is_err());
        assert_eq!(content_length(b"10"), Some(10));
        for bad in [&b"+1"[..], b"1 1", b"", b"0x1", b"99999999999999999999"] {
            assert_eq!(content_length(bad), None, "{bad:?}");
        }
    }
}
