//! The edge's HTTP/1 framing checker (`calvin_edge::h1_framing::Checker`)
//! on arbitrary byte streams, fed whole and fed in pieces as reads bring
//! them: it must not panic, and the pieces must come to what the whole
//! does (the gate checks whatever each read brought).
//!
//! Input layout: one flags byte, then up to 7 piece sizes (the low 3 bits
//! of the flags say how many), then the stream. Flag bit 3 checks it as an
//! origin's responses (bits 4-5: to a GET, a HEAD or a CONNECT) instead of
//! visitors' requests.

#![no_main]

use std::sync::Arc;
use std::sync::atomic::AtomicU8;

use calvin_edge::h1_framing::{Checked, Checker, Expect, HeadLimits};
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
    let whole = feed(checker(), stream, &[]);
    let pieces = feed(checker(), stream, sizes);
    assert_eq!(whole, pieces, "whole vs pieces {sizes:?}");
});

/// Feeds `stream` to `checker` in pieces of `sizes` (the rest at once), as
/// the gate does: the bytes passed are released, a partial head is kept
/// and checked again as it grows.
fn feed(mut checker: Checker, stream: &[u8], sizes: &[u8]) -> Outcome {
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
