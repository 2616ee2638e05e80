//! The edge's reading of an HTTP/1 request, differentially: the same bytes
//! through the edge's HTTP/1 session (`calvin_edge::front::h1`: the framing
//! checker decoding them, and the request made of each head) and through
//! hyper's HTTP/1 server as the oracle. Both must come to the same verdict on the
//! first request (whole, refused, or cut short by the end of the stream);
//! where they differ, the difference must be one of [`DELIBERATE`], the
//! written list of the checker's deliberate departures from hyper (it is
//! stricter by design: request smuggling lives in the leniencies), and
//! only in the stricter direction the list says.
//!
//! A message both read whole must also end at the same place: a fixed
//! request follows the input, and both must take it as the second
//! request (or both as part of the first's body).

#![no_main]

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use calvin_edge::front::h1::{FirstRequest, first_request};
use calvin_edge::h1_framing::HeadLimits;
use http_body_util::BodyExt;
use libfuzzer_sys::fuzz_target;

/// hyper's own limits (its defaults, the edge's too): 100 header fields,
/// a head within its read buffer.
const LIMITS: HeadLimits = HeadLimits {
    max_head_bytes: 8192 + 4096 * 100,
    max_headers: 100,
};

/// Follows every input: the second request, found where the first ends.
const NEXT: &[u8] = b"GET /next HTTP/1.1\r\nHost: n\r\n\r\n";

/// What a reader made of the first request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// Read whole; and whether the request after it was read as one.
    Whole {
        next_seen: bool,
    },
    Refused,
    /// The bytes ended before the request did.
    CutShort,
}

/// A departure of the checker from hyper, on purpose: when it applies to
/// a request, and what each side does with it.
struct Deliberate {
    why: &'static str,
    applies: fn(&Head) -> bool,
}

/// The checker's deliberate departures: each refuses (the checker) what
/// hyper reads. Nothing hyper refuses may pass the checker, but a target
/// that is no URI (the session refuses it when it builds the request).
const DELIBERATE: &[Deliberate] = &[
    Deliberate {
        why: "both Content-Length and Transfer-Encoding (hyper reads it as chunked)",
        applies: |h| h.has("content-length") && h.has("transfer-encoding"),
    },
    Deliberate {
        why: "Content-Length twice, not one plain decimal number, or longer than 19 digits (hyper takes equal repeats, lists, and any number of leading zeros)",
        applies: |h| {
            let lengths = h.values("content-length");
            lengths.len() > 1 || lengths.iter().any(|v| !is_decimal(v) || v.len() > 19)
        },
    },
    Deliberate {
        why: "a Transfer-Encoding other than exactly one chunked (hyper takes chunked last in a list, over several fields)",
        applies: |h| {
            let codings = h.values("transfer-encoding");
            !codings.is_empty()
                && (codings.len() > 1 || !codings[0].trim_ascii().eq_ignore_ascii_case(b"chunked"))
        },
    },
    Deliberate {
        why: "Transfer-Encoding on HTTP/1.0",
        applies: |h| h.http10 && h.has("transfer-encoding"),
    },
    Deliberate {
        why: "chunk framing: a size line of hex digits with no white space before its extensions or its CRLF, CRLF after each chunk's data and the last, a size line or trailer section within 4 KiB (hyper takes white space after the size, and a chunk extension up to 16 KiB in all)",
        applies: |h| h.chunked(),
    },
];

fn is_decimal(value: &[u8]) -> bool {
    !value.is_empty() && value.iter().all(u8::is_ascii_digit)
}

/// The first request's head, as httparse reads it (the parser both sides
/// use).
struct Head {
    http10: bool,
    connect: bool,
    fields: Vec<(String, Vec<u8>)>,
}

impl Head {
    fn parse(bytes: &[u8]) -> Option<Head> {
        let mut headers = [httparse::EMPTY_HEADER; 128];
        let mut request = httparse::Request::new(&mut headers);
        match request.parse(bytes) {
            Ok(httparse::Status::Complete(_)) => Some(Head {
                http10: request.version == Some(0),
                connect: request.method == Some("CONNECT"),
                fields: request
                    .headers
                    .iter()
                    .map(|h| (h.name.to_ascii_lowercase(), h.value.to_vec()))
                    .collect(),
            }),
            _ => None,
        }
    }

    fn values(&self, name: &str) -> Vec<&[u8]> {
        self.fields
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_slice())
            .collect()
    }

    fn has(&self, name: &str) -> bool {
        self.fields.iter().any(|(n, _)| n == name)
    }

    /// Whether the connection goes on after it (HTTP/1.1 without
    /// `Connection: close`, HTTP/1.0 with `keep-alive`), known only for a
    /// single `Connection` field of plain text (hyper reads no other).
    fn keeps_alive(&self) -> bool {
        let values = self.values("connection");
        if values.len() > 1
            || values
                .iter()
                .any(|v| !v.iter().all(|b| matches!(b, b'\t' | b' '..=b'~')))
        {
            return false;
        }
        let tokens = values.concat().to_ascii_lowercase();
        let has = |token: &[u8]| {
            tokens
                .split(|&b| b == b',')
                .any(|t| t.trim_ascii() == token)
        };
        if self.http10 {
            has(b"keep-alive")
        } else {
            !has(b"close")
        }
    }

    /// Whether it asks to switch protocols (or is a CONNECT).
    fn upgrade(&self) -> bool {
        self.connect || self.has("upgrade")
    }

    fn chunked(&self) -> bool {
        self.values("transfer-encoding")
            .iter()
            .any(|v| v.to_ascii_lowercase().windows(7).any(|w| w == b"chunked"))
    }
}

fuzz_target!(|data: &[u8]| {
    // Empty lines before a request are skipped (both): with nothing else,
    // the first request would be the one that follows.
    if data.iter().all(u8::is_ascii_whitespace) {
        return;
    }
    let stream = [data, NEXT].concat();
    // (The input's head may end in the request after it.)
    let head = Head::parse(&stream);
    let mut checker = checker_verdict(data, &stream);
    let mut hyper = hyper_verdict(&stream);
    // Where the request after the first is not read (the first closes the
    // connection, or takes it over), where the first ended is not seen.
    if head
        .as_ref()
        .is_none_or(|h| !h.keeps_alive() || h.upgrade())
    {
        for verdict in [&mut checker, &mut hyper] {
            if let Verdict::Whole { next_seen } = verdict {
                *next_seen = false;
            }
        }
    }
    if checker == hyper {
        return;
    }
    let why = head
        .as_ref()
        .and_then(|head| DELIBERATE.iter().find(|d| (d.applies)(head)).map(|d| d.why));
    match (checker, hyper, why) {
        // The checker stricter, as the list says.
        (Verdict::Refused, _, Some(_)) => {}
        // Anything else: a leniency of the checker's, or a message read
        // two ways (where it ends, whether it is whole).
        _ => panic!(
            "the checker: {checker:?}, hyper: {hyper:?} ({}) on {:?}",
            why.unwrap_or("no deliberate difference"),
            String::from_utf8_lossy(data)
        ),
    }
});

/// The session's verdict on the first request of `stream`
/// (`calvin_edge::front::h1::first_request`: the checker's decoding, and
/// the request made of its head).
fn checker_verdict(data: &[u8], stream: &[u8]) -> Verdict {
    // Whether the first request ends where `data` does (empty lines after
    // it are skipped before the next, by both).
    let ends_at_end = match first_request(data, LIMITS) {
        FirstRequest::Whole(end) => data.get(end as usize..).is_some_and(empty_lines),
        _ => false,
    };
    match first_request(stream, LIMITS) {
        FirstRequest::Refused => Verdict::Refused,
        FirstRequest::CutShort => Verdict::CutShort,
        FirstRequest::Whole(_) => Verdict::Whole {
            next_seen: ends_at_end,
        },
    }
}

/// Whether `rest` is only empty lines (CRLF or LF each), which both skip
/// before a request.
fn empty_lines(mut rest: &[u8]) -> bool {
    loop {
        rest = match rest {
            [] => return true,
            [b'\n', after @ ..] | [b'\r', b'\n', after @ ..] => after,
            _ => return false,
        }
    }
}

/// hyper's server's verdict on the first request of `stream`, its body
/// read whole.
fn hyper_verdict(stream: &[u8]) -> Verdict {
    let seen: Arc<Mutex<Vec<(String, Result<(), bool>)>>> = Arc::default();
    let record = seen.clone();
    let service = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
        let record = record.clone();
        async move {
            let path = format!("{} {}", req.method(), req.uri().path());
            let body = req.into_body().collect().await;
            if let (Err(err), Some(_)) = (&body, std::env::var_os("ORACLE_DEBUG")) {
                eprintln!("hyper's body failed: {err:?}");
            }
            let outcome = body.map(|_| ()).map_err(|e| cut_short(&e));
            record.lock().unwrap().push((path, outcome));
            Ok::<_, std::convert::Infallible>(http::Response::new(
                http_body_util::Empty::<Bytes>::new(),
            ))
        }
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let served = runtime.block_on(
        hyper::server::conn::http1::Builder::new()
            .half_close(true)
            .serve_connection(
                Visitor {
                    bytes: stream,
                    at: 0,
                },
                service,
            ),
    );
    let seen = seen.lock().unwrap();
    // To read a difference: `ORACLE_DEBUG=1 h1_oracle INPUT`.
    if std::env::var_os("ORACLE_DEBUG").is_some() {
        eprintln!("hyper saw {seen:?}, ended {served:?}");
    }
    match seen.first() {
        Some((_, Ok(()))) => Verdict::Whole {
            next_seen: seen.get(1).is_some_and(|(p, _)| p == "GET /next"),
        },
        Some((_, Err(true))) => Verdict::CutShort,
        Some((_, Err(false))) => Verdict::Refused,
        None => match served {
            Err(err) if err.is_parse() || err.is_parse_too_large() => Verdict::Refused,
            _ => Verdict::CutShort,
        },
    }
}

/// Whether hyper's error is the stream's end before the message's (not a
/// malformed message).
fn cut_short(err: &hyper::Error) -> bool {
    if err.is_incomplete_message() {
        return true;
    }
    let mut source = std::error::Error::source(err);
    while let Some(inner) = source {
        if let Some(io) = inner.downcast_ref::<io::Error>() {
            return io.kind() == io::ErrorKind::UnexpectedEof;
        }
        source = inner.source();
    }
    false
}

/// The visitor's bytes, then its end; what hyper writes goes nowhere.
struct Visitor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl hyper::rt::Read for Visitor<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        mut buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        let n = (self.bytes.len() - self.at).min(buf.remaining());
        buf.put_slice(&self.bytes[self.at..self.at + n]);
        self.at += n;
        Poll::Ready(Ok(()))
    }
}

impl hyper::rt::Write for Visitor<'_> {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
