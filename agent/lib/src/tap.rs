//! Watching an HTTP/1 connection go by, for the request log: the bytes the
//! edge sends to the local port (requests) and those that come back
//! (responses) are read as they pass, never changed or held. Each request
//! head opens an entry; its response's head, body and end complete it.
//!
//! The tap only observes. Anything it cannot follow (a head over
//! [`MAX_HEAD`], a malformed chunk, a protocol switched to) makes it stop
//! following the connection; the bytes go on as before.

use std::collections::VecDeque;

use crate::request_log::{MessageEnd, Started};

/// The largest head followed (the edge's own limit is below it).
pub const MAX_HEAD: usize = 64 * 1024;
/// The most headers a head may have to be followed.
pub(crate) const MAX_HEADERS: usize = 128;
/// The longest chunk-size or trailer line followed.
const MAX_LINE: usize = 4096;

/// What one direction of the connection is in.
#[derive(Debug)]
enum Flow {
    /// Reading a head (the bytes so far).
    Head(Vec<u8>),
    /// Reading the body of message `.0` (its request's id).
    Body(u64, Body),
    /// Not followed any more.
    Lost,
}

#[derive(Debug)]
enum Body {
    Length(u64),
    Chunked(Chunk),
    /// A response without a length: until the connection ends.
    UntilClose,
}

#[derive(Debug)]
enum Chunk {
    /// The chunk-size line so far.
    Size(Vec<u8>),
    /// Data bytes left in the chunk.
    Data(u64),
    /// The CRLF after a chunk's data: bytes of it still to come.
    DataEnd(u8),
    /// A trailer line so far (after the last chunk).
    Trailer(Vec<u8>),
}

/// What a message's body bytes go to.
pub trait Sink {
    /// A request head was read.
    fn request(&mut self, head: RequestHead) -> Started;
    /// The response head to request `id` (its bytes, as they came).
    fn response(&mut self, id: u64, status: u16, head: Vec<u8>);
    /// Body bytes of `id`'s request (`to_server`) or response.
    fn body(&mut self, id: u64, to_server: bool, bytes: &[u8]);
    /// `id`'s request (`to_server`) or response has ended.
    fn end(&mut self, id: u64, to_server: bool, how: MessageEnd);
}

/// A request's head as read.
#[derive(Debug)]
pub struct RequestHead {
    pub method: String,
    pub path: String,
    /// The visitor, as the edge gave it: the last `X-Forwarded-For`.
    pub client: Option<String>,
    /// The head's bytes, as they came: its headers are read from them only
    /// when the log is, not per request.
    pub head: Vec<u8>,
}

/// A request waiting for its response.
#[derive(Debug)]
struct Pending {
    id: u64,
    head: bool,
}

/// One connection's two directions.
#[derive(Debug)]
pub struct Tap {
    requests: Flow,
    responses: Flow,
    /// Requests in the order sent, waiting for their responses (the
    /// first one's while a response body is read).
    pending: VecDeque<Pending>,
}

impl Default for Tap {
    fn default() -> Self {
        Self {
            requests: Flow::Head(Vec::new()),
            responses: Flow::Head(Vec::new()),
            pending: VecDeque::new(),
        }
    }
}

impl Tap {
    /// Bytes on their way to the local port.
    pub fn request_bytes(&mut self, mut bytes: &[u8], sink: &mut impl Sink) {
        while !bytes.is_empty() {
            let used = match &mut self.requests {
                Flow::Lost => return,
                Flow::Head(buf) => {
                    let Some((used, head)) = take_head(buf, bytes) else {
                        if buf.len() > MAX_HEAD {
                            self.lose();
                        }
                        return;
                    };
                    match parse_request(head) {
                        Some((request, body)) => {
                            let is_head = request.method == "HEAD";
                            let started = sink.request(request);
                            self.pending.push_back(Pending {
                                id: started.id,
                                head: is_head,
                            });
                            match body {
                                Some(body) => self.requests = Flow::Body(started.id, body),
                                None => {
                                    sink.end(started.id, true, MessageEnd::Complete);
                                    self.requests = Flow::Head(Vec::new());
                                }
                            }
                        }
                        None => self.lose(),
                    }
                    used
                }
                Flow::Body(id, body) => match body_bytes(*id, body, bytes, true, sink) {
                    Some((used, ended)) => {
                        if ended {
                            self.requests = Flow::Head(Vec::new());
                        }
                        used
                    }
                    None => {
                        self.lose();
                        return;
                    }
                },
            };
            bytes = &bytes[used..];
        }
    }

    /// Bytes on their way back from the local port.
    pub fn response_bytes(&mut self, mut bytes: &[u8], sink: &mut impl Sink) {
        while !bytes.is_empty() {
            let used = match &mut self.responses {
                Flow::Lost => return,
                Flow::Head(buf) => {
                    let Some((used, head)) = take_head(buf, bytes) else {
                        if buf.len() > MAX_HEAD {
                            self.lose();
                        }
                        return;
                    };
                    let Some((status, framing)) = parse_response(&head) else {
                        self.lose();
                        return;
                    };
                    let Some(pending) = self.pending.front() else {
                        // An answer to nothing: not HTTP as we know it.
                        self.lose();
                        return;
                    };
                    let id = pending.id;
                    let head_request = pending.head;
                    if (100..200).contains(&status) && status != 101 {
                        // 100 Continue and friends: the final answer follows.
                        self.responses = Flow::Head(Vec::new());
                        used
                    } else {
                        sink.response(id, status, head);
                        if status == 101 {
                            // The connection speaks another protocol now.
                            sink.end(id, false, MessageEnd::Upgraded);
                            self.pending.pop_front();
                            self.requests = Flow::Lost;
                            self.responses = Flow::Lost;
                            return;
                        }
                        let body = if head_request || status == 204 || status == 304 {
                            None
                        } else {
                            framing
                        };
                        match body {
                            None => {
                                sink.end(id, false, MessageEnd::Complete);
                                self.pending.pop_front();
                                self.responses = Flow::Head(Vec::new());
                            }
                            Some(body) => self.responses = Flow::Body(id, body),
                        }
                        used
                    }
                }
                Flow::Body(id, body) => match body_bytes(*id, body, bytes, false, sink) {
                    Some((used, ended)) => {
                        if ended {
                            self.pending.pop_front();
                            self.responses = Flow::Head(Vec::new());
                        }
                        used
                    }
                    None => {
                        self.lose();
                        return;
                    }
                },
            };
            bytes = &bytes[used..];
        }
    }

    /// The connection has ended (`clean`: both sides finished): what was
    /// still open ends here.
    pub fn close(&mut self, clean: bool, sink: &mut impl Sink) {
        if let Flow::Body(id, _) = self.requests {
            sink.end(id, true, MessageEnd::Cut);
        }
        if let Flow::Body(id, body) = &self.responses {
            let id = *id;
            let how = if matches!(body, Body::UntilClose) && clean {
                MessageEnd::Complete
            } else {
                MessageEnd::Cut
            };
            sink.end(id, false, how);
            self.pending.pop_front();
        }
        for pending in self.pending.drain(..) {
            sink.end(pending.id, false, MessageEnd::NoAnswer);
        }
        self.requests = Flow::Lost;
        self.responses = Flow::Lost;
    }

    /// Stops following the connection; requests already seen keep what
    /// they have.
    fn lose(&mut self) {
        self.requests = Flow::Lost;
        self.responses = Flow::Lost;
    }
}

/// Body bytes of message `id`: how many of `bytes` the body took and
/// whether it ended there (the message then told complete); `None` when
/// malformed.
fn body_bytes(
    id: u64,
    body: &mut Body,
    bytes: &[u8],
    to_server: bool,
    sink: &mut impl Sink,
) -> Option<(usize, bool)> {
    match read_body(body, bytes, |data| sink.body(id, to_server, data)) {
        Step::More(used) => Some((used, false)),
        Step::Done(used) => {
            sink.end(id, to_server, MessageEnd::Complete);
            Some((used, true))
        }
        Step::Bad => None,
    }
}

/// Adds `bytes` to the head in `buf`; once it is whole, how many of
/// `bytes` it took and the head (leaving `buf` empty).
fn take_head(buf: &mut Vec<u8>, bytes: &[u8]) -> Option<(usize, Vec<u8>)> {
    // The end may straddle what was held and what came: look from 3 back.
    let from = buf.len().saturating_sub(3);
    let room = (MAX_HEAD + 1).saturating_sub(buf.len());
    let take = bytes.len().min(room);
    buf.extend_from_slice(&bytes[..take]);
    let end = memchr::memmem::find(&buf[from..], b"\r\n\r\n").map(|at| from + at + 4)?;
    let held_before = buf.len() - take;
    let used = end - held_before;
    buf.truncate(end);
    Some((used, std::mem::take(buf)))
}

/// The body framing that headers say (RFC 9112, 6.3): chunked when the last
/// transfer coding is, else `Content-Length`, else `otherwise`. `Err` for
/// framing that cannot be followed.
fn framing(headers: &[httparse::Header<'_>], otherwise: Option<Body>) -> Result<Option<Body>, ()> {
    let mut length = None;
    let mut chunked = None;
    for header in headers {
        let is = |name: &str| header.name.eq_ignore_ascii_case(name);
        if !is("transfer-encoding") && !is("content-length") {
            continue;
        }
        let value = std::str::from_utf8(header.value).map_err(|_| ())?;
        if is("transfer-encoding") {
            let last = value.rsplit(',').next().unwrap_or("").trim();
            chunked = Some(last.eq_ignore_ascii_case("chunked"));
        } else {
            length = Some(value.trim().parse::<u64>().map_err(|_| ())?);
        }
    }
    Ok(match (chunked, length) {
        (Some(true), _) => Some(Body::Chunked(Chunk::Size(Vec::new()))),
        (Some(false), _) => Some(Body::UntilClose),
        (None, Some(0)) => None,
        (None, Some(n)) => Some(Body::Length(n)),
        (None, None) => otherwise,
    })
}

fn parse_request(head: Vec<u8>) -> Option<(RequestHead, Option<Body>)> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    match request.parse(&head) {
        Ok(httparse::Status::Complete(_)) => {}
        _ => return None,
    }
    // A request without a length has no body (RFC 9112, 6.3, 7).
    let body = framing(request.headers, None).ok()?;
    if matches!(body, Some(Body::UntilClose)) {
        return None;
    }
    let client = request
        .headers
        .iter()
        .rev()
        .find(|h| h.name.eq_ignore_ascii_case("x-forwarded-for"))
        .and_then(|h| std::str::from_utf8(h.value).ok())
        .and_then(|v| v.rsplit(',').next())
        .map(|v| v.trim().to_owned());
    let (method, path) = (request.method?.to_owned(), request.path?.to_owned());
    Some((
        RequestHead {
            method,
            path,
            client,
            head,
        },
        body,
    ))
}

/// A response head's status and body framing.
fn parse_response(head: &[u8]) -> Option<(u16, Option<Body>)> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    match response.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        _ => return None,
    }
    let body = framing(response.headers, Some(Body::UntilClose)).ok()?;
    Some((response.code?, body))
}

/// The headers of a head (its bytes, start line first), in order.
pub(crate) fn headers_of(head: &[u8]) -> Vec<(String, String)> {
    let Some(line_end) = memchr::memmem::find(head, b"\r\n") else {
        return Vec::new();
    };
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    match httparse::parse_headers(&head[line_end + 2..], &mut headers) {
        Ok(httparse::Status::Complete((_, headers))) => headers
            .iter()
            .map(|h| {
                (
                    h.name.to_owned(),
                    String::from_utf8_lossy(h.value).into_owned(),
                )
            })
            .collect(),
        _ => Vec::new(),
    }
}

enum Step {
    /// All of the bytes given were the body's (this many).
    More(usize),
    /// The body ended after this many.
    Done(usize),
    /// Malformed.
    Bad,
}

/// Reads body bytes: `data` gets the body's own bytes (chunks decoded).
fn read_body(body: &mut Body, bytes: &[u8], mut data: impl FnMut(&[u8])) -> Step {
    match body {
        Body::UntilClose => {
            data(bytes);
            Step::More(bytes.len())
        }
        Body::Length(left) => {
            let take = (*left).min(bytes.len() as u64) as usize;
            data(&bytes[..take]);
            *left -= take as u64;
            if *left == 0 {
                Step::Done(take)
            } else {
                Step::More(take)
            }
        }
        Body::Chunked(chunk) => {
            let mut at = 0;
            while at < bytes.len() {
                let rest = &bytes[at..];
                match chunk {
                    Chunk::Size(line) => {
                        let Some(nl) = memchr::memchr(b'\n', rest) else {
                            line.extend_from_slice(rest);
                            if line.len() > MAX_LINE {
                                return Step::Bad;
                            }
                            return Step::More(bytes.len());
                        };
                        line.extend_from_slice(&rest[..=nl]);
                        at += nl + 1;
                        let size = match httparse::parse_chunk_size(line) {
                            Ok(httparse::Status::Complete((_, size))) => size,
                            _ => return Step::Bad,
                        };
                        *chunk = if size == 0 {
                            Chunk::Trailer(Vec::new())
                        } else {
                            Chunk::Data(size)
                        };
                    }
                    Chunk::Data(left) => {
                        let take = (*left).min(rest.len() as u64) as usize;
                        data(&rest[..take]);
                        *left -= take as u64;
                        at += take;
                        if *left == 0 {
                            *chunk = Chunk::DataEnd(2);
                        }
                    }
                    Chunk::DataEnd(left) => {
                        let want: &[u8] = if *left == 2 { b"\r\n" } else { b"\n" };
                        let take = rest.len().min(*left as usize);
                        if rest[..take] != want[..take] {
                            return Step::Bad;
                        }
                        at += take;
                        *left -= take as u8;
                        if *left == 0 {
                            *chunk = Chunk::Size(Vec::new());
                        }
                    }
                    Chunk::Trailer(line) => {
                        let Some(nl) = memchr::memchr(b'\n', rest) else {
                            line.extend_from_slice(rest);
                            if line.len() > MAX_LINE {
                                return Step::Bad;
                            }
                            return Step::More(bytes.len());
                        };
                        line.extend_from_slice(&rest[..=nl]);
                        at += nl + 1;
                        if line.as_slice() == b"\r\n" || line.as_slice() == b"\n" {
                            return Step::Done(at);
                        }
                        line.clear();
                    }
                }
            }
            Step::More(bytes.len())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Seen {
        next: u64,
        events: Vec<String>,
        bodies: std::collections::HashMap<(u64, bool), Vec<u8>>,
    }

    impl Sink for Seen {
        fn request(&mut self, head: RequestHead) -> Started {
            self.next += 1;
            self.events
                .push(format!("req {} {} {}", self.next, head.method, head.path));
            Started { id: self.next }
        }
        fn response(&mut self, id: u64, status: u16, _: Vec<u8>) {
            self.events.push(format!("resp {id} {status}"));
        }
        fn body(&mut self, id: u64, to_server: bool, bytes: &[u8]) {
            self.bodies
                .entry((id, to_server))
                .or_default()
                .extend_from_slice(bytes);
        }
        fn end(&mut self, id: u64, to_server: bool, how: MessageEnd) {
            let side = if to_server { "req" } else { "resp" };
            self.events.push(format!("end {side} {id} {how:?}"));
        }
    }

    /// Feeds `bytes` one byte at a time and whole: both must see the same.
    fn both_ways(requests: &[u8], responses: &[u8]) -> Seen {
        let mut whole = Seen::default();
        let mut tap = Tap::default();
        tap.request_bytes(requests, &mut whole);
        tap.response_bytes(responses, &mut whole);
        tap.close(true, &mut whole);
        let mut bytewise = Seen::default();
        let mut tap = Tap::default();
        for b in requests {
            tap.request_bytes(std::slice::from_ref(b), &mut bytewise);
        }
        for b in responses {
            tap.response_bytes(std::slice::from_ref(b), &mut bytewise);
        }
        tap.close(true, &mut bytewise);
        assert_eq!(whole.events, bytewise.events);
        assert_eq!(whole.bodies, bytewise.bodies);
        whole
    }

    #[test]
    fn keep_alive_requests_with_lengths_and_chunks_are_each_seen() {
        let requests = b"GET /a HTTP/1.1\r\nhost: x\r\n\r\n\
POST /b HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2;ext=1\r\nde\r\n0\r\nx-t: 1\r\n\r\n\
HEAD /c HTTP/1.1\r\nhost: x\r\n\r\n";
        let responses = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello\
HTTP/1.1 100 Continue\r\n\r\n\
HTTP/1.1 201 Created\r\ntransfer-encoding: chunked\r\n\r\n4\r\nmade\r\n0\r\n\r\n\
HTTP/1.1 200 OK\r\ncontent-length: 99\r\n\r\n";
        let seen = both_ways(requests, responses);
        assert_eq!(
            seen.events,
            [
                "req 1 GET /a",
                "end req 1 Complete",
                "req 2 POST /b",
                "end req 2 Complete",
                "req 3 HEAD /c",
                "end req 3 Complete",
                "resp 1 200",
                "end resp 1 Complete",
                "resp 2 201",
                "end resp 2 Complete",
                "resp 3 200",
                "end resp 3 Complete",
            ]
        );
        assert_eq!(seen.bodies[&(2, true)], b"abcde");
        assert_eq!(seen.bodies[&(1, false)], b"hello");
        assert_eq!(seen.bodies[&(2, false)], b"made");
        assert!(!seen.bodies.contains_key(&(3, false)));
    }

    #[test]
    fn a_response_until_close_ends_with_the_connection() {
        let seen = both_ways(
            b"GET / HTTP/1.1\r\n\r\n",
            b"HTTP/1.1 200 OK\r\n\r\nstreamed until the end",
        );
        assert_eq!(seen.events.last().unwrap(), "end resp 1 Complete");
        assert_eq!(seen.bodies[&(1, false)], b"streamed until the end");
    }

    #[test]
    fn a_switch_of_protocols_ends_the_following() {
        let seen = both_ways(
            b"GET /ws HTTP/1.1\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n\x81\x05hello",
            b"HTTP/1.1 101 Switching Protocols\r\n\r\n\x81\x05hello",
        );
        assert_eq!(
            seen.events,
            [
                "req 1 GET /ws",
                "end req 1 Complete",
                "resp 1 101",
                "end resp 1 Upgraded"
            ]
        );
    }

    #[test]
    fn requests_without_answers_and_cut_bodies_end_as_such() {
        let mut seen = Seen::default();
        let mut tap = Tap::default();
        tap.request_bytes(
            b"GET /1 HTTP/1.1\r\n\r\nPUT /2 HTTP/1.1\r\ncontent-length: 10\r\n\r\nabc",
            &mut seen,
        );
        tap.response_bytes(b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nab", &mut seen);
        tap.close(false, &mut seen);
        assert_eq!(
            seen.events,
            [
                "req 1 GET /1",
                "end req 1 Complete",
                "req 2 PUT /2",
                "resp 1 200",
                "end req 2 Cut",
                "end resp 1 Cut",
                "end resp 2 NoAnswer",
            ]
        );
    }

    #[test]
    fn what_cannot_be_followed_is_let_go() {
        let mut seen = Seen::default();
        let mut tap = Tap::default();
        tap.request_bytes(
            b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
            &mut seen,
        );
        tap.request_bytes(b"GET /later HTTP/1.1\r\n\r\n", &mut seen);
        assert_eq!(seen.events, ["req 1 POST /"]);
        let mut tap = Tap::default();
        let mut seen = Seen::default();
        let huge = vec![b'a'; MAX_HEAD + 10];
        tap.request_bytes(b"GET / HTTP/1.1\r\nx: ", &mut seen);
        tap.request_bytes(&huge, &mut seen);
        tap.request_bytes(b"\r\n\r\n", &mut seen);
        assert!(seen.events.is_empty());
    }
}
