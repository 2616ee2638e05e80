//! HTTP/1 framing, strict and in one place: the checker ([`checker`]),
//! without I/O, reads a connection's bytes by offset, checks each head
//! (with httparse) and its body framing, and decodes them: the edge's
//! HTTP/1 session reads visitors' requests with it
//! ([`crate::front::h1`]), its origin reader the responses of origins
//! ([`crate::upstream::origin`]).
//!
//! RFC 9112 leaves readers lenient choices: a request with both
//! `Content-Length` and `Transfer-Encoding` may be read as chunked (and
//! the connection closed after), `chunked, chunked` as chunked, a repeated
//! identical `Content-Length` accepted, and a malformed chunk found only
//! once the request is already on its way to the origin. Those
//! ambiguities are what request smuggling is made of, so the checker
//! refuses them: a request it refuses never reaches the proxy, so no
//! stream is opened for it: the visitor gets 400 (431 for a head too
//! large or with too many fields, 501 for a transfer coding the edge does
//! not know), and the connection closes after the answers to the requests
//! before it. When the malformed part comes after its request went on (a
//! bad chunk in a later packet), the request's body fails instead, and
//! the edge cuts the origin's stream off, so the origin never sees a
//! complete request. An origin's response with ambiguous framing is
//! refused the same way: 502 before its head, or a body cut off.
//!
//! After a request asking for an upgrade, nothing more is read until the
//! answer is written: a 101 ends HTTP on the connection, any other answer
//! keeps it.

pub mod checker;

use bytes::Bytes;
use http::Version;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};

pub use checker::{
    Checked, Checker, Decoded, Expect, FirstHead, Framing, HeadLimits, ParsedHead, Refusal,
};

/// hyper's limit on an HTTP/1 head's header fields when none is set (an
/// origin's response heads and trailers are held to it, as before).
pub(crate) const HYPER_MAX_HEADERS: usize = 100;

/// Room made in a visitor connection's buffer for a read of a head. Small,
/// as the front holds one per connection still sending its first head
/// (thousands, under a slowloris attack).
pub const READ_SIZE: usize = 4096;

/// The tokens of a message's Connection fields.
pub fn connection_tokens(headers: &HeaderMap) -> impl Iterator<Item = &str> {
    headers.get_all(header::CONNECTION).iter().flat_map(tokens)
}

/// The comma-separated tokens of a Connection value.
pub fn tokens(value: &HeaderValue) -> impl Iterator<Item = &str> {
    value
        .to_str()
        .into_iter()
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|t| !t.is_empty())
}

/// Whether a connection goes on after a message with these fields, as
/// HTTP/1 says: after an HTTP/1.0 one only if it asks (`keep-alive`),
/// after an HTTP/1.1 one unless it says `close`.
pub fn keeps_alive(http10: bool, headers: &HeaderMap) -> bool {
    let mut tokens = connection_tokens(headers);
    if http10 {
        tokens.any(|t| t.eq_ignore_ascii_case("keep-alive"))
    } else {
        !tokens.any(|t| t.eq_ignore_ascii_case("close"))
    }
}

impl ParsedHead {
    /// The HTTP version the head said.
    pub fn version(&self) -> Version {
        if self.http10 {
            Version::HTTP_10
        } else {
            Version::HTTP_11
        }
    }

    /// Its fields as a header map made from the parse: names as they
    /// were checked, values sharing `head` (the head's bytes). What
    /// the http crate refuses, named.
    pub fn header_map(&self, head: &Bytes) -> Result<HeaderMap, &'static str> {
        let mut headers = HeaderMap::with_capacity(self.fields.len());
        for &((name_start, name_end), (value_start, value_end)) in &self.fields {
            let name = HeaderName::from_bytes(&head[name_start..name_end])
                .map_err(|_| "invalid header name")?;
            let value = HeaderValue::from_maybe_shared(head.slice(value_start..value_end))
                .map_err(|_| "invalid header value")?;
            headers.append(name, value);
        }
        Ok(headers)
    }
}

/// A chunked body's trailer section ([`Checker::take_trailers`]: its field
/// lines, each checked already) as a header map.
pub fn trailer_map(lines: &[u8]) -> Option<HeaderMap> {
    let mut block = Vec::with_capacity(lines.len() + 2);
    block.extend_from_slice(lines);
    block.extend_from_slice(b"\r\n");
    let mut fields = [httparse::EMPTY_HEADER; HYPER_MAX_HEADERS];
    let httparse::Status::Complete((_, fields)) =
        httparse::parse_headers(&block, &mut fields).ok()?
    else {
        return None;
    };
    let mut map = HeaderMap::with_capacity(fields.len());
    for field in fields {
        let name = HeaderName::from_bytes(field.name.as_bytes()).ok()?;
        map.append(name, HeaderValue::from_bytes(field.value).ok()?);
    }
    Some(map)
}
