//! The HTTP/1 framing checker, without I/O: it reads a connection's bytes
//! by absolute offset and says how far they may go on, or which request
//! (or response) is refused and why ([`Checker::check`]); as a decoder
//! ([`Checker::decode`]) it also says where each head, data range and end
//! lies, and keeps each head's parse. The edge's HTTP/1 session
//! ([`crate::front::h1`]) reads visitors' requests through one, its origin
//! reader ([`crate::upstream::origin`]) origins' responses. See the module
//! documentation of [`super`] for what it refuses.
//!
//! Each head is parsed once, with httparse (the parser hyper uses), into
//! header slots that are not zeroed first: on the stack up to
//! [`STACK_HEADERS`].

use std::mem::MaybeUninit;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use crate::error_page::ERROR_HEADER;

/// The longest chunk-size line (size and extensions) and trailer section
/// the gate takes.
const MAX_CHUNK_LINE: usize = 4096;

/// Why a request was refused, and with which status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub status: u16,
    pub code: &'static str,
    pub message: String,
}

impl Refusal {
    pub(crate) fn bad(message: impl Into<String>) -> Self {
        Self {
            status: 400,
            code: "bad-request",
            message: message.into(),
        }
    }

    /// The whole answer, closing the connection.
    pub fn response(&self) -> Vec<u8> {
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
pub(crate) enum State {
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
    /// `total` bytes and `fields` lines of them so far.
    Trailers { total: usize, fields: usize },
    /// An upgrade was asked: nothing is read until the answer is written.
    AwaitingAnswer,
    /// Not HTTP any more (upgraded), or refused.
    Aside,
}

/// The size the gate needs for the head checks.
#[derive(Debug, Clone, Copy)]
pub struct HeadLimits {
    pub max_head_bytes: usize,
    pub max_headers: usize,
}

/// The framing state machine over a connection's bytes, by absolute offset.
#[derive(Debug, Clone)]
pub struct Checker {
    pub(crate) state: State,
    limits: HeadLimits,
    /// Where the request being read began.
    pub(crate) message_start: u64,
    /// Where the message being read leads once it ends.
    then: Then,
    pub(crate) role: Role,
    /// Request heads passed so far.
    heads: u64,
    /// What the first request's head said about its body.
    first: Option<FirstHead>,
    /// The chunk-size or trailer line being read.
    line: Vec<u8>,
    /// How far the head being read was searched for its blank line.
    head_scanned: u64,
    /// The response being read is a final answer (not an interim 1xx):
    /// once it ends, no request is in flight until the next is sent.
    final_answer: bool,
    /// Set on a decoder (see [`Checker::decode`]): each head's fields are
    /// kept as it is parsed, and a body's trailer lines as they pass.
    decoding: bool,
    parsed: Option<ParsedHead>,
    trailers: Vec<u8>,
}

/// What checking a batch of bytes found.
#[derive(Debug, PartialEq, Eq)]
pub enum Checked {
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
    /// A checker of visitors' requests.
    pub fn new(limits: HeadLimits) -> Self {
        Self {
            state: State::Head,
            limits,
            message_start: 0,
            then: Then::Head,
            role: Role::Request,
            heads: 0,
            first: None,
            line: Vec::new(),
            head_scanned: 0,
            final_answer: false,
            decoding: false,
            parsed: None,
            trailers: Vec::new(),
        }
    }

    /// A checker of an origin's responses, to the kind of request `expect`
    /// holds when each response starts.
    pub fn for_responses(limits: HeadLimits, expect: Arc<AtomicU8>) -> Self {
        Self {
            role: Role::Response(expect),
            ..Self::new(limits)
        }
    }

    /// A decoder of an origin's responses (see [`Checker::decode`]), to
    /// the kind of request `expect` holds when each response starts.
    pub fn response_decoder(limits: HeadLimits, expect: Arc<AtomicU8>) -> Self {
        Self {
            decoding: true,
            ..Self::for_responses(limits, expect)
        }
    }

    /// A decoder of a visitor's requests (see [`Checker::decode`]).
    pub fn request_decoder(limits: HeadLimits) -> Self {
        Self {
            decoding: true,
            ..Self::new(limits)
        }
    }

    /// Request heads passed so far.
    pub fn heads(&self) -> u64 {
        self.heads
    }

    /// Where the message being read starts: once one has ended, where it
    /// ended (the differential fuzz target compares it with hyper's).
    pub fn message_start(&self) -> u64 {
        self.message_start
    }

    /// After a check that passed bytes up to `to` of those read up to
    /// `end`: where the next check starts. A partial head is checked again
    /// as it grows, from its start; the rest is not checked twice.
    pub fn resume_at(&self, to: u64, end: u64) -> u64 {
        match self.state {
            State::Head => self.message_start,
            State::AwaitingAnswer | State::Aside => to,
            _ => end,
        }
    }

    /// What the first request's head said about its body, once it passed.
    pub fn first_head(&self) -> Option<FirstHead> {
        self.first
    }

    /// Checks `bytes`, the unreleased bytes starting at offset `base`, of
    /// which those before `from` were checked already.
    pub fn check(&mut self, bytes: &[u8], base: u64, from: u64) -> Checked {
        let mut at = from;
        let end = base + bytes.len() as u64;
        while at < end {
            let byte = bytes[(at - base) as usize];
            match self.state {
                State::Aside | State::AwaitingAnswer => return Checked::ReadyTo(at),
                State::Head if self.unasked() => {
                    // An origin that wrote more than its answer (a body
                    // after a 204 or a HEAD's answer, a body longer than its
                    // length): taken for the next answer, those bytes would
                    // be the next visitor's, whatever the origin says then.
                    return self.refused(
                        at,
                        Refusal::bad(
                            "the origin sent bytes after its answer that no request asked for",
                        ),
                    );
                }
                State::Head => {
                    let start = self.message_start;
                    let head = &bytes[(start - base) as usize..];
                    if !self.head_may_be_whole(head) {
                        return Checked::ReadyTo(start);
                    }
                    match self.head(head) {
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
                            Ok(0) => {
                                self.state = State::Trailers {
                                    total: 0,
                                    fields: 0,
                                }
                            }
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
                State::Trailers { total, fields } => {
                    if total >= MAX_CHUNK_LINE {
                        return self.refused(at, Refusal::bad("the trailer section is too long"));
                    }
                    match byte {
                        b'\n' if self.line == b"\r" => {
                            self.line.clear();
                            self.message_done(at + 1);
                        }
                        b'\n' => {
                            if let Err(refusal) = trailer_field(&self.line) {
                                return self.refused(at, refusal);
                            }
                            // As many fields as a head may have (hyper's
                            // limit too).
                            if fields >= self.limits.max_headers {
                                return self.refused(
                                    at,
                                    Refusal::bad(format!(
                                        "the trailer section has more than {} fields",
                                        self.limits.max_headers
                                    )),
                                );
                            }
                            if self.decoding {
                                self.trailers.extend_from_slice(&self.line);
                                self.trailers.push(b'\n');
                            }
                            self.line.clear();
                            self.state = State::Trailers {
                                total: total + 1,
                                fields: fields + 1,
                            };
                        }
                        0 => return self.refused(at, Refusal::bad("a trailer holds a NUL byte")),
                        _ => {
                            self.line.push(byte);
                            self.state = State::Trailers {
                                total: total + 1,
                                fields,
                            };
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

    /// Reads an origin's responses as a decoder (on a checker made by
    /// [`Checker::response_decoder`]): the next thing `bytes` (starting at
    /// offset `base`, with those before `from` taken already) hold, with
    /// every check [`Checker::check`] makes. Bytes before the offset
    /// [`Decoded::More`] names are not needed again, nor those of a head
    /// or data range once returned; a head is read again from its start
    /// as it grows.
    pub fn decode(&mut self, bytes: &[u8], base: u64, from: u64) -> Decoded {
        let end = base + bytes.len() as u64;
        let mut at = from;
        loop {
            match self.state {
                State::Head => {
                    let start = self.message_start;
                    if start >= end {
                        return Decoded::More { from: start };
                    }
                    if self.unasked() {
                        return self.refused_decoding(
                            start,
                            Refusal::bad(
                                "the origin sent bytes after its answer that no request asked for",
                            ),
                        );
                    }
                    let head = &bytes[(start - base) as usize..];
                    if !self.head_may_be_whole(head) {
                        return Decoded::More { from: start };
                    }
                    match self.head(head) {
                        Ok(None) => return Decoded::More { from: start },
                        Ok(Some(len)) => {
                            if self.state == State::Head {
                                // No body.
                                self.message_done(start + len as u64);
                            }
                            match self.parsed.take() {
                                Some(mut parsed) => {
                                    parsed.start = start;
                                    return Decoded::Head(Box::new(parsed));
                                }
                                None => {
                                    return self.refused_decoding(
                                        start,
                                        Refusal::bad("not a response decoder"),
                                    );
                                }
                            }
                        }
                        Err(refusal) => return self.refused_decoding(start, refusal),
                    }
                }
                State::Fixed { left } => {
                    if at >= end {
                        return Decoded::More { from: at };
                    }
                    let take = left.min(end - at);
                    let last = take == left;
                    if last {
                        self.message_done(at + take);
                    } else {
                        self.state = State::Fixed { left: left - take };
                    }
                    return Decoded::Data {
                        start: at,
                        end: at + take,
                        last,
                    };
                }
                State::ChunkData { left } => {
                    if at >= end {
                        return Decoded::More { from: at };
                    }
                    let take = left.min(end - at);
                    self.state = if take == left {
                        State::ChunkEnd { cr: false }
                    } else {
                        State::ChunkData { left: left - take }
                    };
                    return Decoded::Data {
                        start: at,
                        end: at + take,
                        last: false,
                    };
                }
                State::ChunkSize | State::ChunkEnd { .. } | State::Trailers { .. } => {
                    if at >= end {
                        return Decoded::More { from: at };
                    }
                    // A framing line at a time, as the checker reads it.
                    let rest = &bytes[(at - base) as usize..];
                    let stop = memchr::memchr(b'\n', rest).map_or(end, |lf| at + lf as u64 + 1);
                    if let Checked::Refused { refusal, .. } =
                        self.check(&bytes[..(stop - base) as usize], base, at)
                    {
                        return Decoded::Refused(refusal);
                    }
                    at = stop;
                    if self.state == State::Head {
                        return Decoded::End { at };
                    }
                }
                State::Aside | State::AwaitingAnswer => return Decoded::Rest { at },
            }
        }
    }

    /// After a head was decoded: why its message is refused, if the bytes
    /// read with it (`bytes`, as [`Checker::decode`] takes them) already
    /// say so, leaving this checker (and the request kind it shares) as
    /// it is. Only a chunked body can be refused within its own bytes (a
    /// length is only counted, and bytes past the message are the next
    /// one's), so only then are they checked ahead.
    pub fn refused_ahead(&self, bytes: &[u8], base: u64, from: u64) -> Option<Refusal> {
        let chunked = matches!(
            self.state,
            State::ChunkSize
                | State::ChunkData { .. }
                | State::ChunkEnd { .. }
                | State::Trailers { .. }
        );
        if !chunked || base + bytes.len() as u64 <= from {
            return None;
        }
        let mut probe = self.clone();
        if let Role::Response(expect) = &self.role {
            probe.role = Role::Response(Arc::new(AtomicU8::new(expect.load(Ordering::Acquire))));
        }
        match probe.check(bytes, base, from) {
            Checked::Refused {
                message, refusal, ..
            } if message == self.message_start => Some(refusal),
            _ => None,
        }
    }

    /// Whether HTTP ended on the connection (a switch of protocols, or a
    /// refusal).
    pub fn aside(&self) -> bool {
        self.state == State::Aside
    }

    /// Whether no message is being read: the last one ended (or, after an
    /// upgrade request, waits for its answer).
    pub fn between_messages(&self) -> bool {
        matches!(self.state, State::Head | State::AwaitingAnswer)
    }

    /// Data bytes left of the body (or chunk) being read, when the next
    /// bytes are data.
    pub fn data_left(&self) -> Option<u64> {
        match self.state {
            State::Fixed { left } | State::ChunkData { left } => Some(left),
            _ => None,
        }
    }

    /// The trailer section of the chunked body that just ended: its field
    /// lines, each ending CRLF (checked as [`trailer_field`] does).
    pub fn take_trailers(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.trailers)
    }

    fn refused_decoding(&mut self, at: u64, refusal: Refusal) -> Decoded {
        match self.refused(at, refusal) {
            Checked::Refused { refusal, .. } => Decoded::Refused(refusal),
            Checked::ReadyTo(_) => Decoded::Refused(Refusal::bad("refused")),
        }
    }

    /// Whether `head` (the bytes from the start of the head being read)
    /// holds a blank line, or is past the size limit: only then is it
    /// parsed. Only the bytes new since the last look are searched (and 2
    /// before them), so a head that trickles in costs a linear scan and
    /// one parse, not a parse per read.
    fn head_may_be_whole(&mut self, head: &[u8]) -> bool {
        if head.len() > self.limits.max_head_bytes {
            return true;
        }
        let start = self.message_start;
        let seen = usize::try_from(self.head_scanned.saturating_sub(start)).unwrap_or(usize::MAX);
        let from = seen.saturating_sub(2).min(head.len());
        let new = &head[from..];
        // A head's lines are tens of bytes long: jumping from one LF to
        // the next (memchr, vectorised) beats comparing every window of
        // the head twice (perf: ~1.5% of the edge's CPU on 1 KiB GETs).
        let blank = memchr::memchr_iter(b'\n', new)
            .any(|lf| matches!(&new[lf + 1..], [b'\n', ..] | [b'\r', b'\n', ..]));
        if !blank {
            self.head_scanned = start + head.len() as u64;
        }
        blank
    }

    fn refused(&mut self, at: u64, refusal: Refusal) -> Checked {
        // A refusal in a body comes after its head was counted.
        let passed = match self.state {
            State::Head => self.heads,
            _ => self.heads.saturating_sub(1),
        };
        self.state = State::Aside;
        if let Role::Response(expect) = &self.role {
            // Past a refused response, the connection carries nothing more.
            expect.store(Expect::Unusable as u8, Ordering::Release);
        }
        Checked::Refused {
            message: self.message_start,
            at,
            refusal,
            passed,
        }
    }

    /// Whether the origin's bytes come while no request is in flight.
    fn unasked(&self) -> bool {
        matches!(&self.role, Role::Response(expect) if expect.load(Ordering::Acquire) == Expect::Idle as u8)
    }

    fn message_done(&mut self, at: u64) {
        self.message_start = at;
        if let (Role::Response(expect), true, Then::Head) =
            (&self.role, self.final_answer, self.then)
        {
            // Answered: until the next request is sent, the origin has
            // nothing to say.
            expect.store(Expect::Idle as u8, Ordering::Release);
        }
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
        let mut stack = [const { MaybeUninit::uninit() }; STACK_HEADERS];
        let mut heap = Vec::new();
        let headers = header_space(&mut stack, &mut heap, self.limits.max_headers);
        let mut response = httparse::Response::new(&mut []);
        let parsed = httparse::ParserConfig::default().parse_response_with_uninit_headers(
            &mut response,
            within_limit(bytes, self.limits),
            headers,
        );
        let len = match parsed {
            Ok(httparse::Status::Complete(len)) if len > self.limits.max_head_bytes => {
                return Err(Refusal::bad("the response head is too large"));
            }
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) if bytes.len() > self.limits.max_head_bytes => {
                return Err(Refusal::bad("the response head is too large"));
            }
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(err) => return Err(Refusal::bad(format!("malformed response head: {err}"))),
        };
        let status = response.code.unwrap_or_default();
        self.final_answer = status >= 200;
        let http10 = response.version == Some(0);
        // Conflicts are refused even where the body's length is implied.
        let framing = framing(response.headers, http10, "response")?;
        let body;
        (self.state, self.then, body) = match (status, expect) {
            (101, _) => (State::Head, Then::Aside, Framing::Switched),
            (100..=199, _) => (State::Head, Then::Head, Framing::Interim),
            (200..=299, Expect::Connect) => (State::Head, Then::Aside, Framing::Switched),
            (204 | 304, _) | (_, Expect::Head) => (State::Head, Then::Head, Framing::Empty),
            _ => match framing {
                BodyFraming::Length(left) => {
                    (State::Fixed { left }, Then::Head, Framing::Length(left))
                }
                BodyFraming::Chunked => (State::ChunkSize, Then::Head, Framing::Chunked),
                BodyFraming::Empty => (State::Head, Then::Head, Framing::Empty),
                // Read to the end of the connection.
                BodyFraming::None => (State::Aside, Then::Head, Framing::ToClose),
            },
        };
        if self.decoding {
            let span = |part: &[u8]| span_in(bytes, part);
            self.parsed = Some(ParsedHead {
                start: 0,
                status,
                http10,
                reason: response.reason.map_or((0, 0), |r| span(r.as_bytes())),
                method: (0, 0),
                target: (0, 0),
                upgrade: false,
                fields: response
                    .headers
                    .iter()
                    .map(|h| (span(h.name.as_bytes()), span(h.value)))
                    .collect(),
                framing: body,
                len,
            });
        }
        Ok(Some(len))
    }

    fn request_head(&mut self, bytes: &[u8]) -> Result<Option<usize>, Refusal> {
        let mut stack = [const { MaybeUninit::uninit() }; STACK_HEADERS];
        let mut heap = Vec::new();
        let headers = header_space(&mut stack, &mut heap, self.limits.max_headers);
        let mut request = httparse::Request::new(&mut []);
        let len = match request.parse_with_uninit_headers(within_limit(bytes, self.limits), headers)
        {
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
        let body = framing(request.headers, http10, "request")?;
        self.state = match body {
            BodyFraming::None | BodyFraming::Empty => State::Head,
            BodyFraming::Length(left) => State::Fixed { left },
            BodyFraming::Chunked => State::ChunkSize,
        };
        if self.heads == 0 {
            self.first = Some(FirstHead {
                head_end: self.message_start + len as u64,
                length: match body {
                    BodyFraming::Length(n) => Some(n),
                    BodyFraming::Empty => Some(0),
                    BodyFraming::None | BodyFraming::Chunked => None,
                },
                expects: request
                    .headers
                    .iter()
                    .any(|h| h.name.eq_ignore_ascii_case("expect")),
                upgrade,
            });
        }
        self.then = if upgrade {
            Then::AwaitAnswer
        } else {
            Then::Head
        };
        if self.decoding {
            let span = |part: &[u8]| span_in(bytes, part);
            self.parsed = Some(ParsedHead {
                start: 0,
                status: 0,
                http10,
                reason: (0, 0),
                method: request.method.map_or((0, 0), |m| span(m.as_bytes())),
                target: request.path.map_or((0, 0), |p| span(p.as_bytes())),
                upgrade,
                fields: request
                    .headers
                    .iter()
                    .map(|h| (span(h.name.as_bytes()), span(h.value)))
                    .collect(),
                framing: match body {
                    BodyFraming::None | BodyFraming::Empty => Framing::Empty,
                    BodyFraming::Length(n) => Framing::Length(n),
                    BodyFraming::Chunked => Framing::Chunked,
                },
                len,
            });
        }
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

    /// An answer with `status` was written: after an upgrade request, a
    /// 101 ends HTTP and anything else but an interim answer keeps it.
    pub fn answered(&mut self, status: u16) {
        if self.state != State::AwaitingAnswer {
            return;
        }
        if status == 101 {
            self.state = State::Aside;
        } else if status >= 200 {
            self.state = State::Head;
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BodyFraming {
    /// No length given.
    None,
    /// `Content-Length: 0`.
    Empty,
    Length(u64),
    Chunked,
}

/// What the first request's head said about its body (for the front's
/// read-ahead).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FirstHead {
    /// Where its head ends (its body starts).
    pub head_end: u64,
    /// Its Content-Length, if it has one (and no Transfer-Encoding).
    pub length: Option<u64>,
    /// It has an `Expect` field.
    pub expects: bool,
    /// It asks for an upgrade, or is a CONNECT.
    pub upgrade: bool,
}

/// Where `part` (a slice of a parse of `bytes`) lies in `bytes`; `(0, 0)`
/// for one that is not in them (httparse gives a reason phrase that is
/// not text as an empty string of its own).
fn span_in(bytes: &[u8], part: &[u8]) -> (usize, usize) {
    let (start, at) = (bytes.as_ptr() as usize, part.as_ptr() as usize);
    match at.checked_sub(start) {
        Some(offset) if offset + part.len() <= bytes.len() => (offset, offset + part.len()),
        _ => (0, 0),
    }
}

/// Of the bytes from a head's start, those its parse looks at: one past
/// the size limit at most, so a head too large is refused as such however
/// the reads brought it (not as malformed if its error lies past the
/// limit and came in the same read).
fn within_limit(bytes: &[u8], limits: HeadLimits) -> &[u8] {
    &bytes[..bytes.len().min(limits.max_head_bytes.saturating_add(1))]
}

/// Header fields parsed without an allocation; a limit past this many
/// takes a vector, still not zeroed.
const STACK_HEADERS: usize = 128;

/// Room for `max` header fields: on the stack when they fit.
fn header_space<'a, 'b>(
    stack: &'a mut [MaybeUninit<httparse::Header<'b>>; STACK_HEADERS],
    heap: &'a mut Vec<MaybeUninit<httparse::Header<'b>>>,
    max: usize,
) -> &'a mut [MaybeUninit<httparse::Header<'b>>] {
    if max <= STACK_HEADERS {
        return &mut stack[..max];
    }
    heap.resize_with(max, MaybeUninit::uninit);
    heap
}

/// A response head as the decoder read it: where its parts lie in the
/// head's bytes (from its first byte), and how its body is framed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedHead {
    /// Where it starts on the connection.
    pub start: u64,
    pub status: u16,
    /// It said HTTP/1.0.
    pub http10: bool,
    /// The reason phrase (a response's).
    pub reason: (usize, usize),
    /// The method and the target (a request's).
    pub method: (usize, usize),
    pub target: (usize, usize),
    /// The request asks for an upgrade, or is a CONNECT: nothing after it
    /// is read until its answer is written (see
    /// [`Checker::answered`]).
    pub upgrade: bool,
    /// Each field's name and value.
    pub fields: Vec<((usize, usize), (usize, usize))>,
    pub framing: Framing,
    /// The head's length, its blank line included.
    pub len: usize,
}

/// How a response's body is framed, as its status, the request it answers
/// and its fields decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// A 1xx other than 101: the answer is still to come.
    Interim,
    /// No body (204, 304, a HEAD's answer, `Content-Length: 0`).
    Empty,
    /// HTTP ends here (101, a CONNECT's 2xx): the rest is the new protocol's.
    Switched,
    Length(u64),
    Chunked,
    /// Read to the end of the connection.
    ToClose,
}

/// What [`Checker::decode`] found next.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded {
    /// Nothing more until more bytes come; the next look starts at `from`.
    More {
        from: u64,
    },
    /// A head (it ended at its start plus `len`).
    Head(Box<ParsedHead>),
    /// Body data; `last`: the body ends with it.
    Data {
        start: u64,
        end: u64,
        last: bool,
    },
    /// A chunked body ended at `at` (its trailers in
    /// [`Checker::take_trailers`]).
    End {
        at: u64,
    },
    /// From `at`, the bytes are not framed by HTTP: a body read to the end
    /// of the connection, or a new protocol's.
    Rest {
        at: u64,
    },
    Refused(Refusal),
}

/// Where a message leads once it ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Then {
    Head,
    AwaitAnswer,
    Aside,
}

/// Which side's messages a checker reads.
#[derive(Debug, Clone)]
pub(crate) enum Role {
    /// Visitors' requests.
    Request,
    /// An origin's responses, to the kind of request the [`Expect`] holds.
    Response(Arc<AtomicU8>),
}

/// What kind of request a response answers, where that changes its
/// framing; or that none is in flight. The pool sets it as it sends a
/// request, the checker as a response ends or is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Expect {
    Other = 0,
    Head = 1,
    Connect = 2,
    /// The last request is answered: any byte now is one the origin was
    /// not asked for, and refused.
    Idle = 3,
    /// The connection carried something refused (a malformed response,
    /// bytes no request asked for): never used again.
    Unusable = 4,
}

impl From<u8> for Expect {
    fn from(value: u8) -> Self {
        match value {
            1 => Expect::Head,
            2 => Expect::Connect,
            3 => Expect::Idle,
            4 => Expect::Unusable,
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
            // Empty list elements (`chunked,`) are refused: RFC 9110 has
            // them ignored, but a reader that does not (hyper) reads
            // another framing.
            for coding in value.split(',').map(|c| c.trim_matches([' ', '\t'])) {
                if coding.is_empty() {
                    return Err(Refusal::bad(format!(
                        "the {what}'s Transfer-Encoding has an empty element"
                    )));
                }
                codings.push(coding.to_ascii_lowercase());
            }
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

/// A trailer line (without its LF): a header field, `name: value`, ended
/// with CRLF. Anything else (a bare LF, a folded line, a line that is no
/// field) would let the section end where another reader does not see it
/// end.
fn trailer_field(line: &[u8]) -> Result<(), Refusal> {
    let Some(field) = line.strip_suffix(b"\r") else {
        return Err(Refusal::bad(
            "a trailer line (or the end of the trailers) does not end with CRLF",
        ));
    };
    let Some(colon) = field.iter().position(|&b| b == b':') else {
        return Err(Refusal::bad("a trailer line is not a header field"));
    };
    let (name, value) = (&field[..colon], &field[colon + 1..]);
    let token = |b: &u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(b);
    let text = |b: &u8| matches!(b, b'\t' | b' '..=b'~' | 0x80..=0xff);
    if name.is_empty() || !name.iter().all(token) || !value.iter().all(text) {
        return Err(Refusal::bad("a trailer line is not a header field"));
    }
    Ok(())
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

    /// A case's name, the bytes, and how far they pass or the status and
    /// words of their refusal.
    type RequestCase<'a> = (&'static str, &'a [u8], Result<u64, (u16, &'static str)>);
    /// The same for responses, to a kind of request.
    type ResponseCase = (
        &'static str,
        Expect,
        &'static [u8],
        Result<u64, (u64, &'static str)>,
    );

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

    /// The read-ahead rule the front applies to a first request (moved
    /// here from the front with the same cases: the front now asks the
    /// checker that parsed the head, and the one read-ahead policy). Each
    /// case says why nothing is read ahead: the rule declines a head that
    /// passed, or the checker refused it, or it is not whole yet.
    #[test]
    fn the_front_reads_ahead_only_a_plain_declared_length() {
        #[derive(Debug, PartialEq)]
        enum Front {
            ReadsTo(u64),
            Declines,
            Refused,
            Waits,
        }
        fn front(head: &str, cap: Option<u64>) -> Front {
            let mut checker = Checker::new(limits());
            if let Checked::Refused { .. } = checker.check(head.as_bytes(), 0, 0) {
                return Front::Refused;
            }
            let Some(first) = checker.first_head() else {
                return Front::Waits;
            };
            let rules = crate::proxy::read_ahead::BodyRules {
                min_rate: None,
                stall: std::time::Duration::from_secs(1),
                cap,
            };
            match rules.ahead(first.length, first.expects, first.upgrade) {
                Some(ahead) => Front::ReadsTo(first.head_end + ahead),
                None => Front::Declines,
            }
        }
        let head = "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n";
        assert_eq!(front(head, None), Front::ReadsTo(head.len() as u64 + 10));
        // At most READ_AHEAD of a long body, and the cap is kept.
        let long = "POST / HTTP/1.1\r\nContent-Length: 100000000\r\n\r\n";
        let most = Front::ReadsTo(long.len() as u64 + crate::proxy::read_ahead::READ_AHEAD);
        assert_eq!(front(long, None), most);
        assert_eq!(front(long, Some(100_000_000)), most);
        assert_eq!(front(long, Some(99_999_999)), Front::Declines);
        for (head, why) in [
            ("GET / HTTP/1.1\r\nHost: a\r\n\r\n", Front::Declines),
            (
                "POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
                Front::Declines,
            ),
            (
                "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
                Front::Declines,
            ),
            (
                "POST / HTTP/1.1\r\nContent-Length: 10\r\nExpect: 100-continue\r\n\r\n",
                Front::Declines,
            ),
            (
                "POST / HTTP/1.1\r\nContent-Length: 10\r\nUpgrade: websocket\r\n\r\n",
                Front::Declines,
            ),
            (
                "CONNECT a:443 HTTP/1.1\r\nContent-Length: 10\r\n\r\n",
                Front::Declines,
            ),
            (
                "POST / HTTP/1.1\r\nContent-Length: 10\r\nContent-Length: 10\r\n\r\n",
                Front::Refused,
            ),
            (
                "POST / HTTP/1.1\r\nContent-Length: +10\r\n\r\n",
                Front::Refused,
            ),
            (
                "POST / HTTP/1.1\r\nContent-Length: 1 0\r\n\r\n",
                Front::Refused,
            ),
            (
                "POST / HTTP/1.1\r\nContent-Length: \r\n\r\n",
                Front::Refused,
            ),
            (
                "POST / HTTP/1.1\r\nContent-Length: 10\r\nTransfer-Encoding: chunked\r\n\r\n",
                Front::Refused,
            ),
            (
                "POST / HTTP/1.1\r\nContent Length: 10\r\n\r\n",
                Front::Refused,
            ),
            ("POST / HTTP/1.1\r\nContent-Length: 10\r\n", Front::Waits),
        ] {
            assert_eq!(front(head, None), why, "{head:?}");
        }
        // Only the first request counts.
        let second = "GET / HTTP/1.1\r\n\r\nPOST / HTTP/1.1\r\nContent-Length: 10\r\n\r\n";
        assert_eq!(front(second, None), Front::Declines);
    }

    /// What a request stream is checked to, by case: how far it may go on
    /// (`Ok(offset)`), or the status and the words of its refusal.
    #[test]
    fn requests_table() {
        let long_name = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(8200));
        let many = format!("GET / HTTP/1.1\r\n{}\r\n", "A: b\r\n".repeat(101));
        let at_most = format!("GET / HTTP/1.1\r\n{}\r\n", "A: b\r\n".repeat(100));
        let cases: Vec<RequestCase<'_>> = vec![
            ("no body", b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", Ok(27)),
            ("bare LF", b"GET / HTTP/1.1\nHost: a\n\n", Ok(24)),
            ("fixed body, whole", b"POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\nab", Ok(40)),
            ("fixed body, partial", b"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nab", Ok(40)),
            ("chunked, whole", b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n", Ok(59)),
            ("chunked, trailers", b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nA: b\r\n\r\n", Ok(58)),
            ("partial head", b"GET / HTTP/1.1\r\nHo", Ok(0)),
            ("upgrade waits for the answer", b"GET / HTTP/1.1\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\nGET / HTTP/1.1\r\n\r\n", Ok(59)),
            ("100 header fields", at_most.as_bytes(), Ok(at_most.len() as u64)),
            ("101 header fields", many.as_bytes(), Err((431, "more than 100 header fields"))),
            ("head past the limit", long_name.as_bytes(), Err((431, "larger than 8192 bytes"))),
            ("length and chunked", b"POST / HTTP/1.1\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n", Err((400, "both Content-Length and Transfer-Encoding"))),
            ("chunked twice", b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked, chunked\r\n\r\n", Err((400, "chunked more than once"))),
            ("chunked not last", b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", Err((400, "must end with chunked"))),
            ("unknown coding", b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", Err((501, "\"gzip\" is not supported"))),
            ("two lengths", b"POST / HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n", Err((400, "more than one Content-Length"))),
            ("signed length", b"POST / HTTP/1.1\r\nContent-Length: +2\r\n\r\n", Err((400, "not a decimal number"))),
            ("HTTP/1.0 chunked", b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", Err((400, "HTTP/1.0 request cannot use Transfer-Encoding"))),
            ("bad chunk size", b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", Err((400, "not a hexadecimal number"))),
            ("chunk without CRLF", b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\n", Err((400, "does not end with CRLF"))),
            ("chunk data too long", b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n", Err((400, "longer than its chunk size"))),
            ("NUL in a trailer", b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nA: \0\r\n\r\n", Err((400, "NUL"))),
            ("a length of 19 digits", b"POST / HTTP/1.1\r\nContent-Length: 0000000000000000002\r\n\r\nab", Ok(58)),
            ("a length of 20 digits", b"POST / HTTP/1.1\r\nContent-Length: 00000000000000000002\r\n\r\nab", Err((400, "not a decimal number"))),
            ("an empty coding", b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked,\r\n\r\n0\r\n\r\n", Err((400, "empty element"))),
            ("an empty Transfer-Encoding", b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding:\r\n\r\n0\r\n\r\n", Err((400, "empty element"))),
            ("a trailer that is no field", b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nGET / HTTP/1.1\r\n\r\n", Err((400, "not a header field"))),
            ("a control in a trailer", b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nA: b\x10\r\n\r\n", Err((400, "not a header field"))),
            ("a folded trailer", b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nA: b\r\n c\r\n\r\n", Err((400, "not a header field"))),
            ("a trailer ending in a bare LF", b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nA: b\n\r\n", Err((400, "CRLF"))),
            ("trailers ending in a bare LF", b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\n", Err((400, "CRLF"))),
            ("malformed head", b"GET / HTTP/1.1\r\nA B: c\r\n\r\n", Err((400, "malformed request head"))),
        ];
        for (case, bytes, want) in cases {
            let got = match check_all(bytes) {
                Checked::ReadyTo(at) => Ok(at),
                Checked::Refused { refusal, .. } => Err((refusal.status, refusal.message)),
            };
            match (&got, &want) {
                (Ok(at), Ok(want)) => assert_eq!(at, want, "{case}"),
                (Err((status, message)), Err((want_status, words))) => {
                    assert_eq!(status, want_status, "{case}: {message}");
                    assert!(
                        message.contains(words),
                        "{case}: {message:?} lacks {words:?}"
                    );
                }
                _ => panic!("{case}: got {got:?}, want {want:?}"),
            }
        }
    }

    /// As many trailer fields as a head may have pass; one more is refused
    /// (hyper's limit too).
    #[test]
    fn trailer_fields_are_taken_up_to_the_header_limit() {
        let body = |fields: usize| {
            let mut bytes = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n".to_vec();
            for _ in 0..fields {
                bytes.extend_from_slice(b"t: 1\r\n");
            }
            bytes.extend_from_slice(b"\r\n");
            bytes
        };
        let at_most = body(limits().max_headers);
        assert_eq!(check_all(&at_most), Checked::ReadyTo(at_most.len() as u64));
        let Checked::Refused { refusal, .. } = check_all(&body(limits().max_headers + 1)) else {
            panic!("one trailer field past the limit passed");
        };
        assert!(
            refusal.message.contains("more than 100 fields"),
            "{refusal:?}"
        );
    }

    /// A chunk-size line of 4,096 bytes passes; one byte more is refused.
    #[test]
    fn a_chunk_line_is_taken_up_to_its_limit() {
        let head = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
        let line = |len: usize| {
            let mut bytes = head.to_vec();
            bytes.extend_from_slice(b"1;");
            bytes.extend(std::iter::repeat_n(b'x', len - 3));
            bytes.extend_from_slice(b"\r\n");
            bytes
        };
        assert!(matches!(
            check_all(&line(MAX_CHUNK_LINE)),
            Checked::ReadyTo(_)
        ));
        let Checked::Refused { refusal, .. } = check_all(&line(MAX_CHUNK_LINE + 1)) else {
            panic!("a chunk-size line one past the limit passed");
        };
        assert!(refusal.message.contains("too long"), "{}", refusal.message);
    }

    /// A head that trickles in a byte at a time costs a scan of each new
    /// byte and one parse, not a parse of the whole head per byte (64 KiB
    /// one byte at a time took seconds that way).
    #[test]
    fn a_trickled_head_is_parsed_once() {
        let limits = HeadLimits {
            max_head_bytes: 64 << 10,
            max_headers: 100,
        };
        let mut head = b"GET / HTTP/1.1\r\nX: ".to_vec();
        head.resize((64 << 10) - 4, b'a');
        head.extend_from_slice(b"\r\n\r\n");
        let mut checker = Checker::new(limits);
        let started = std::time::Instant::now();
        let mut checked = 0;
        for end in 1..=head.len() {
            let whole = end == head.len();
            match checker.check(&head[..end], 0, checked) {
                // Held back until its blank line, and its scan has moved
                // up to what came: the next read scans only new bytes.
                Checked::ReadyTo(0) if !whole => {
                    assert_eq!(checker.head_scanned, end as u64, "at {end}");
                    checked = checker.resume_at(0, end as u64);
                }
                Checked::ReadyTo(to) if whole => assert_eq!(to, end as u64),
                other => panic!("at {end}: {other:?}"),
            }
        }
        assert_eq!(checker.heads(), 1);
        let took = started.elapsed();
        assert!(took < std::time::Duration::from_secs(1), "took {took:?}");
    }

    /// Bytes fed in pieces of every size are checked as if whole.
    #[test]
    fn split_reads_check_alike() {
        let text = b"POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n";
        for step in 1..text.len() {
            let mut checker = Checker::new(limits());
            let (mut base, mut checked, mut ready) = (0u64, 0u64, 0u64);
            let mut end = 0;
            while end < text.len() {
                end = (end + step).min(text.len());
                let unreleased = &text[base as usize..end];
                match checker.check(unreleased, base, checked.max(base)) {
                    Checked::ReadyTo(to) => {
                        ready = ready.max(to);
                        checked = checker.resume_at(to, end as u64);
                    }
                    refused => panic!("step {step}: {refused:?}"),
                }
                base = ready;
            }
            assert_eq!(ready, text.len() as u64, "step {step}");
            assert_eq!(checker.heads(), 2, "step {step}");
        }
    }

    /// Responses: how far each may go on, by the kind of request it answers.
    #[test]
    fn responses_table() {
        let cases: Vec<ResponseCase> = vec![
            (
                "length",
                Expect::Other,
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nab",
                Ok(40),
            ),
            (
                "HEAD has no body",
                Expect::Head,
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n",
                Ok(38),
            ),
            (
                "204 has no body",
                Expect::Other,
                b"HTTP/1.1 204 No Content\r\n\r\n",
                Ok(27),
            ),
            // Bytes after an answer, before the next request is sent, are
            // none of the next answer's: refused where they start.
            (
                "a body after a HEAD's answer",
                Expect::Head,
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nab",
                Err((38, "no request asked for")),
            ),
            (
                "a body after a 204",
                Expect::Other,
                b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\nhello",
                Err((46, "no request asked for")),
            ),
            (
                "a body longer than its length",
                Expect::Other,
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nabc",
                Err((40, "no request asked for")),
            ),
            (
                "a second answer to one request",
                Expect::Other,
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nabHTTP/1.1 200 OK\r\n",
                Err((40, "no request asked for")),
            ),
            (
                "interim then final",
                Expect::Other,
                b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
                Ok(63),
            ),
            (
                "101 ends HTTP",
                Expect::Other,
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\nnot http",
                Ok(48),
            ),
            (
                "CONNECT 200 ends HTTP",
                Expect::Connect,
                b"HTTP/1.1 200 OK\r\n\r\nnot http",
                Ok(19),
            ),
            (
                "no length reads to the end",
                Expect::Other,
                b"HTTP/1.1 200 OK\r\n\r\nanything",
                Ok(19),
            ),
            (
                "304 has no body, whatever its length says",
                Expect::Other,
                b"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n",
                Ok(48),
            ),
            (
                "early hints then final",
                Expect::Other,
                b"HTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx",
                Ok(92),
            ),
            (
                "chunked to its last chunk",
                Expect::Other,
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
                Ok(60),
            ),
            (
                "a bad chunk size",
                Expect::Other,
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                Err((0, "chunk")),
            ),
            (
                "length and chunked",
                Expect::Other,
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n",
                Err((0, "both Content-Length and Transfer-Encoding")),
            ),
            (
                "two lengths",
                Expect::Other,
                b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                Err((0, "more than one Content-Length")),
            ),
            (
                "malformed",
                Expect::Other,
                b"HTTP/1.1 2x0 OK\r\n\r\n",
                Err((0, "malformed response head")),
            ),
        ];
        for (case, expect, bytes, want) in cases {
            let cell = Arc::new(AtomicU8::new(expect as u8));
            let mut checker = Checker::for_responses(limits(), cell.clone());
            let got = match checker.check(bytes, 0, 0) {
                Checked::ReadyTo(at) => Ok(at),
                Checked::Refused {
                    message, refusal, ..
                } => Err((message, refusal.message)),
            };
            let after = Expect::from(cell.load(Ordering::Acquire));
            match (&got, &want) {
                (Ok(at), Ok(want)) => assert_eq!(at, want, "{case}"),
                (Err((start, message)), Err((want_start, words))) => {
                    assert!(
                        message.contains(words),
                        "{case}: {message:?} lacks {words:?}"
                    );
                    assert_eq!(start, want_start, "{case}: where the refused bytes start");
                    // A connection that carried a refused response is
                    // never used again.
                    assert_eq!(after, Expect::Unusable, "{case}");
                }
                _ => panic!("{case}: got {got:?}, want {want:?}"),
            }
        }
    }

    /// A final answer read whole leaves the connection idle (no request in
    /// flight) until the pool sends the next one; an interim one does not,
    /// nor does one still coming.
    #[test]
    fn an_answer_read_whole_leaves_the_connection_idle() {
        let cases: [(&str, &[u8], Expect); 4] = [
            (
                "whole",
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nab",
                Expect::Idle,
            ),
            ("interim", b"HTTP/1.1 100 Continue\r\n\r\n", Expect::Other),
            (
                "body to come",
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\na",
                Expect::Other,
            ),
            (
                "switched",
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n",
                Expect::Other,
            ),
        ];
        for (case, bytes, want) in cases {
            let cell = Arc::new(AtomicU8::new(Expect::Other as u8));
            let mut checker = Checker::for_responses(limits(), cell.clone());
            assert_eq!(
                checker.check(bytes, 0, 0),
                Checked::ReadyTo(bytes.len() as u64),
                "{case}"
            );
            assert_eq!(Expect::from(cell.load(Ordering::Acquire)), want, "{case}");
        }
        // The next request sent, its answer is read as usual.
        let cell = Arc::new(AtomicU8::new(Expect::Other as u8));
        let mut checker = Checker::for_responses(limits(), cell.clone());
        let first = b"HTTP/1.1 204 No Content\r\n\r\n";
        assert_eq!(checker.check(first, 0, 0), Checked::ReadyTo(27));
        cell.store(Expect::Other as u8, Ordering::Release);
        let second = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
        assert_eq!(checker.check(second, 27, 27), Checked::ReadyTo(27 + 38));
    }
}

#[cfg(test)]
mod decoder_tests {
    use super::*;

    const LIMITS: HeadLimits = HeadLimits {
        max_head_bytes: 8192,
        max_headers: 100,
    };

    fn responses(expect: Expect) -> Checker {
        Checker::response_decoder(LIMITS, Arc::new(AtomicU8::new(expect as u8)))
    }

    #[test]
    fn a_head_is_decoded_with_where_its_parts_lie() {
        let bytes = b"HTTP/1.1 201 Made\r\nX-A: 1\r\nContent-Length: 3\r\n\r\nabc";
        let mut decoder = responses(Expect::Other);
        let Decoded::Head(head) = decoder.decode(bytes, 0, 0) else {
            panic!("a head")
        };
        let len = bytes.len() - 3;
        assert_eq!((head.start, head.len, head.status), (0, len, 201));
        assert_eq!(&bytes[head.reason.0..head.reason.1], b"Made");
        let ((ns, ne), (vs, ve)) = head.fields[0];
        assert_eq!((&bytes[ns..ne], &bytes[vs..ve]), (&b"X-A"[..], &b"1"[..]));
        assert_eq!(head.framing, Framing::Length(3));
        let len = len as u64;
        assert_eq!(
            decoder.decode(bytes, 0, len),
            Decoded::Data {
                start: len,
                end: len + 3,
                last: true
            }
        );
    }

    #[test]
    fn a_reason_phrase_that_is_not_text_is_no_reason() {
        // httparse gives it as an empty string of its own, not a slice of
        // the head (found by the fuzz target).
        let bytes = b"HTTP/1.1 200 \x98\x98\r\nContent-Length: 0\r\n\r\n";
        let Decoded::Head(head) = responses(Expect::Other).decode(bytes, 0, 0) else {
            panic!("a head")
        };
        assert_eq!(head.reason, (0, 0));
    }

    #[test]
    fn a_chunked_body_decodes_to_its_data_and_trailers() {
        let bytes = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\nX-T: 1\r\n\r\n";
        let mut decoder = Checker::request_decoder(LIMITS);
        let Decoded::Head(head) = decoder.decode(bytes, 0, 0) else {
            panic!("a head")
        };
        let body = head.len as u64;
        let Decoded::Data { start, end, last } = decoder.decode(bytes, 0, body) else {
            panic!("data")
        };
        assert_eq!(
            (&bytes[start as usize..end as usize], last),
            (&b"abc"[..], false)
        );
        assert_eq!(
            decoder.decode(bytes, 0, end),
            Decoded::End {
                at: bytes.len() as u64
            }
        );
        assert_eq!(decoder.take_trailers(), b"X-T: 1\r\n");
    }
}
