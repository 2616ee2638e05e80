//! The edge's HTTP/1 framing checker (`calvin_edge::h1_framing::Checker`)
//! on arbitrary byte streams, fed whole and fed in pieces as reads bring
//! them: it must not panic, and the pieces must come to what the whole
//! does (the gate checks whatever each read brought).
//!
//! The same stream is read through the checker as a decoder
//! (`Checker::decode`, what the edge's HTTP/1 session reads requests with
//! and its origin reader responses), whole and in pieces as those read
//! it: the pieces must decode to the same heads and data as the whole,
//! and the decoding must end as the checker does (refused: the same
//! message, for the same reason; passed: every request head decoded).
//!
//! Input layout: one flags byte, then up to 7 piece sizes (the low 3 bits
//! of the flags say how many), then the stream. Flag bit 3 checks it as an
//! origin's responses (bits 4-5: to a GET, a HEAD or a CONNECT) instead of
//! visitors' requests. With bit 6 too, the pool sends another request
//! (of the same kind) whenever a response has ended and a piece was
//! read, so that the responses after the first are checked as well: then
//! only the same pieces fed twice must agree (whole, the stream has no
//! moment between responses at which a request is sent).

#![no_main]

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use calvin_edge::h1_framing::{Checked, Checker, Decoded, Expect, HeadLimits};
use libfuzzer_sys::fuzz_target;

const LIMITS: HeadLimits = HeadLimits {
    max_head_bytes: 1024,
    max_headers: 16,
};

/// How a stream was checked: how far it passed (and the request heads
/// passed), or where the refused message starts and why.
#[derive(Debug, PartialEq)]
enum Outcome {
    Passed {
        to: u64,
        heads: u64,
    },
    Refused {
        message: u64,
        status: u16,
        text: String,
    },
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let count = usize::from(flags & 7).min(rest.len());
    let (sizes, stream) = rest.split_at(count);
    let expect = match (flags >> 4) & 3 {
        1 => Expect::Head,
        2 => Expect::Connect,
        _ => Expect::Other,
    };
    let checker = || {
        if flags & 8 == 0 {
            Checker::new(LIMITS)
        } else {
            Checker::for_responses(LIMITS, Arc::new(AtomicU8::new(expect as u8)))
        }
    };
    if flags & 0x48 == 0x48 {
        let cell = || Arc::new(AtomicU8::new(expect as u8));
        let (first, second) = (cell(), cell());
        let once = feed_sending(&first, expect, stream, sizes);
        let again = feed_sending(&second, expect, stream, sizes);
        assert_eq!(once, again, "the same pieces twice {sizes:?}");
        return;
    }
    let whole = feed(checker(), stream, &[]);
    let pieces = feed(checker(), stream, sizes);
    assert_eq!(whole, pieces, "whole vs pieces {sizes:?}");
    let decoder = || {
        if flags & 8 == 0 {
            Checker::request_decoder(LIMITS)
        } else {
            Checker::response_decoder(LIMITS, Arc::new(AtomicU8::new(expect as u8)))
        }
    };
    through_the_decoder(decoder, flags & 8 == 0, stream, sizes, &whole);
});

/// What a decoder made of a stream: each message's head (where it
/// starts, its length) and its body's data, and how the reading ended.
#[derive(Debug, PartialEq)]
struct Decoding {
    messages: Vec<(u64, usize, Vec<u8>)>,
    ended: Ended,
}

#[derive(Debug, PartialEq)]
enum Ended {
    /// The stream ended (in a message, or between two).
    Input,
    /// What follows is not HTTP's (an upgrade waits for its answer, a
    /// switch, a body to the end of the connection).
    Rest,
    /// Refused: the refused message's start, and why.
    Refused { message: u64, text: String },
}

/// Reads `stream` through a decoder made by `decoder`, in reads of `sizes`
/// (the rest at once), as the edge's HTTP/1 session and its origin reader
/// do: bytes before where the decoder says it looks next are dropped, a
/// head is taken once whole, data as the decoder frames it.
fn decode(decoder: Checker, stream: &[u8], sizes: &[u8]) -> Decoding {
    let mut decoder = decoder;
    let (mut buf, mut base, mut from, mut read) = (Vec::new(), 0u64, 0u64, 0usize);
    let mut cuts = sizes.iter().map(|&s| usize::from(s).max(1));
    let mut messages: Vec<(u64, usize, Vec<u8>)> = Vec::new();
    // A stream needs no more steps than it has bytes, twice, and a few.
    let steps = 2 * stream.len() + 8;
    for step in 0..=steps {
        assert!(
            step < steps,
            "the decoder was still going after {steps} steps"
        );
        let at = |offset: u64, base: u64| (offset - base) as usize;
        match decoder.decode(&buf, base, from) {
            Decoded::More { from: next } => {
                assert!(next >= base && next <= base + buf.len() as u64, "{next}");
                buf.drain(..at(next, base));
                (base, from) = (next, next);
                if read == stream.len() {
                    return Decoding {
                        messages,
                        ended: Ended::Input,
                    };
                }
                let n = cuts.next().unwrap_or(stream.len()).min(stream.len() - read);
                buf.extend_from_slice(&stream[read..read + n]);
                read += n;
            }
            Decoded::Head(head) => {
                assert_eq!(
                    head.start, from,
                    "a head starts where the last message ended"
                );
                let end = head.start + head.len as u64;
                assert!(end <= base + buf.len() as u64);
                messages.push((head.start, head.len, Vec::new()));
                buf.drain(..at(end, base));
                (base, from) = (end, end);
            }
            Decoded::Data { start, end, .. } => {
                assert!(start >= from && start < end && end <= base + buf.len() as u64);
                let data = &buf[at(start, base)..at(end, base)];
                let last = messages.last_mut().expect("data after a head");
                last.2.extend_from_slice(data);
                buf.drain(..at(end, base));
                (base, from) = (end, end);
            }
            Decoded::End { at: end } => {
                let _ = decoder.take_trailers();
                buf.drain(..at(end, base));
                (base, from) = (end, end);
            }
            Decoded::Rest { .. } => {
                return Decoding {
                    messages,
                    ended: Ended::Rest,
                };
            }
            Decoded::Refused(refusal) => {
                return Decoding {
                    messages,
                    ended: Ended::Refused {
                        message: decoder.message_start(),
                        text: refusal.message,
                    },
                };
            }
        }
    }
    unreachable!()
}

/// The decoder (as the session and the origin reader use it) against the
/// checker (`checked`, the same stream checked whole): read in pieces or
/// whole, it reads the same messages, and ends as the checker does.
fn through_the_decoder(
    decoder: impl Fn() -> Checker,
    requests: bool,
    stream: &[u8],
    sizes: &[u8],
    checked: &Outcome,
) {
    let whole = decode(decoder(), stream, &[]);
    let pieces = decode(decoder(), stream, sizes);
    assert_eq!(whole, pieces, "whole vs pieces {sizes:?}");
    match checked {
        Outcome::Refused { message, text, .. } => {
            assert_eq!(
                whole.ended,
                Ended::Refused {
                    message: *message,
                    text: text.clone()
                },
                "{whole:?}"
            );
        }
        Outcome::Passed { heads, .. } => {
            assert!(!matches!(whole.ended, Ended::Refused { .. }), "{whole:?}");
            if requests {
                // Every request head the checker passed, decoded.
                assert_eq!(whole.messages.len() as u64, *heads, "{whole:?}");
            }
        }
    }
}

/// Feeds `stream` to `checker` in pieces of `sizes` (the rest at once), as
/// the gate does: the bytes passed are released, a partial head is kept
/// and checked again as it grows.
/// [`feed`] with a pool that sends the next request (an `expect`) whenever
/// the checker has found the last response's end, between pieces.
fn feed_sending(cell: &Arc<AtomicU8>, expect: Expect, stream: &[u8], sizes: &[u8]) -> Outcome {
    let checker = Checker::for_responses(LIMITS, cell.clone());
    let send = || {
        let idle = Expect::Idle as u8;
        let _ = cell.compare_exchange(idle, expect as u8, Ordering::AcqRel, Ordering::Acquire);
    };
    feed_with(checker, stream, sizes, send)
}

fn feed(checker: Checker, stream: &[u8], sizes: &[u8]) -> Outcome {
    feed_with(checker, stream, sizes, || {})
}

/// Feeds `stream` to `checker` as reads bring it, `sizes` at a time (the
/// rest at once), calling `between` after each read was checked.
fn feed_with(mut checker: Checker, stream: &[u8], sizes: &[u8], between: impl Fn()) -> Outcome {
    let (mut base, mut checked, mut end) = (0u64, 0u64, 0usize);
    let mut cuts = sizes.iter().map(|&s| usize::from(s).max(1));
    while end < stream.len() {
        end = cuts
            .next()
            .map_or(stream.len(), |n| (end + n).min(stream.len()));
        let unreleased = &stream[base as usize..end];
        match checker.check(unreleased, base, checked.max(base)) {
            Checked::ReadyTo(to) => {
                assert!(
                    to >= base && to <= end as u64,
                    "{to} outside {base}..={end}"
                );
                checked = checker.resume_at(to, end as u64);
                base = base.max(to);
                between();
            }
            Checked::Refused {
                message, refusal, ..
            } => {
                assert!(message <= end as u64);
                assert!(matches!(refusal.status, 400 | 431 | 501), "{refusal:?}");
                return Outcome::Refused {
                    message,
                    status: refusal.status,
                    text: refusal.message,
                };
            }
        }
    }
    Outcome::Passed {
        to: base,
        heads: checker.heads(),
    }
}
