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
