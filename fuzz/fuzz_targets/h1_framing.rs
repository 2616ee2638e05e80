//! The edge's HTTP/1 framing checker (`calvin_edge::h1_framing::Checker`)
//! on arbitrary byte streams, fed whole and fed in pieces as reads bring
//! them: it must not panic, and the pieces must come to what the whole
//! does (the gate checks whatever each read brought).
//!
//! Visitors' requests also go through the gate itself
//! (`calvin_edge::h1_framing::FramingGate`), read as hyper reads it (a
//! final answer written whenever it waits for one), whole and in pieces:
//! what it hands on must be the stream's start, everything before a refused
//! request, and nothing of a refused request unless a read error follows it
//! (the bad part came after its start was handed on); fed whole, the gate
//! hands on exactly what the checker passed.
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

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use calvin_edge::h1_framing::{Checked, Checker, Expect, FramingGate, HeadLimits};
use libfuzzer_sys::fuzz_target;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

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
    if flags & 8 == 0 {
        through_the_gate(stream, sizes, &whole);
    }
});

/// What the gate did with a stream of requests: the bytes it handed on,
/// how its reading ended, and what it wrote itself at the close (a
/// refusal's answer).
#[derive(Debug)]
struct Gated {
    handed_on: Vec<u8>,
    failed: Option<String>,
    answered: Vec<u8>,
}

fn through_the_gate(stream: &[u8], sizes: &[u8], checked: &Outcome) {
    // The checker alone refused a request only if none before it waits for
    // an answer (an upgrade's): then the gate waits for the answers to
    // those before the refused one. Else a wait is an upgrade's, for the
    // origin's answer, which never comes here.
    if stream.len() > WHOLE {
        // Fed "whole", a longer stream still comes in reads of the gate's
        // size, with checked bytes handed on in between: not comparable.
        return;
    }
    let answer_waits = matches!(checked, Outcome::Refused { .. });
    let whole = drive(stream, &[], answer_waits);
    let pieces = drive(stream, sizes, answer_waits);
    for gated in [&whole, &pieces] {
        assert!(stream.starts_with(&gated.handed_on), "{gated:?}");
    }
    match checked {
        Outcome::Passed { to, .. } => {
            // What passed is handed on; so is the rest (a head cut short by
            // the end of the stream, which hyper then sees) unless an
            // upgrade waits for its answer.
            let passed = &stream[..*to as usize];
            assert!(
                whole.handed_on == passed || whole.handed_on == stream,
                "{whole:?}"
            );
            assert!(
                whole.failed.is_none() && whole.answered.is_empty(),
                "{whole:?}"
            );
            assert_eq!(pieces.handed_on, whole.handed_on, "{sizes:?}: {pieces:?}");
            assert!(
                pieces.failed.is_none() && pieces.answered.is_empty(),
                "{pieces:?}"
            );
        }
        Outcome::Refused { message, text, .. } => {
            let before = &stream[..*message as usize];
            assert_eq!(whole.handed_on, before, "{whole:?}");
            assert!(whole.failed.is_none(), "{whole:?}");
            let answer = String::from_utf8_lossy(&whole.answered);
            assert!(answer.contains(text.as_str()), "{answer:?} lacks {text:?}");
            assert!(
                pieces.handed_on.starts_with(before),
                "{sizes:?}: {pieces:?}"
            );
            if pieces.handed_on.len() > before.len() {
                // Part of the refused request was handed on before its bad
                // part came: the read fails, so hyper never completes it.
                assert_eq!(pieces.failed.as_deref(), Some(text.as_str()), "{pieces:?}");
                assert!(pieces.handed_on.len() < stream.len(), "{pieces:?}");
            } else {
                assert!(pieces.failed.is_none(), "{sizes:?}: {pieces:?}");
                assert_eq!(pieces.answered, whole.answered, "{sizes:?}");
            }
        }
    }
}

/// The visitor's side: `stream`, in reads of `sizes` (then as much as
/// asked), then its end. What the gate writes is kept.
struct Visitor<'a> {
    stream: &'a [u8],
    at: usize,
    sizes: std::slice::Iter<'a, u8>,
    written: Vec<u8>,
}

impl AsyncRead for Visitor<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let left = self.stream.len() - self.at;
        let size = self.sizes.next().map_or(left, |&s| usize::from(s).max(1));
        let n = size.min(left).min(buf.remaining());
        buf.put_slice(&self.stream[self.at..self.at + n]);
        self.at += n;
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Visitor<'_> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.written.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// Reads the gate as hyper does, until its end, a failure, or a wait it
/// is not to answer; when `answer_waits`, a wait gets a final answer
/// (hyper answers every request it got). Then closes it.
fn drive(stream: &[u8], sizes: &[u8], answer_waits: bool) -> Gated {
    let visitor = Visitor {
        stream,
        at: 0,
        sizes: sizes.iter(),
        written: Vec::new(),
    };
    let mut gate = FramingGate::new(visitor, LIMITS);
    let mut cx = Context::from_waker(Waker::noop());
    let (mut handed_on, mut failed) = (Vec::new(), None);
    let mut room = [0u8; 2048];
    // Each turn reads or answers; a stream can need no more turns than it
    // has bytes, plus one answer a byte (a request is at least a few).
    let turns = 2 * stream.len() + 8;
    for turn in 0..=turns {
        // A gate that neither ends nor fails in that many turns is stuck.
        assert!(turn < turns, "the gate was still going after {turns} turns");
        let mut buf = ReadBuf::new(&mut room);
        match Pin::new(&mut gate).poll_read(&mut cx, &mut buf) {
            Poll::Ready(Ok(())) if buf.filled().is_empty() => break,
            Poll::Ready(Ok(())) => handed_on.extend_from_slice(buf.filled()),
            Poll::Ready(Err(err)) => {
                failed = Some(err.to_string());
                break;
            }
            Poll::Pending if !answer_waits => break,
            Poll::Pending => {
                let wrote = Pin::new(&mut gate).poll_write(&mut cx, ANSWER);
                assert!(matches!(wrote, Poll::Ready(Ok(n)) if n == ANSWER.len()));
            }
        }
    }
    let closed = Pin::new(&mut gate).poll_shutdown(&mut cx);
    assert!(matches!(closed, Poll::Ready(Ok(()))), "{closed:?}");
    let visitor = gate.into_parts().0;
    Gated {
        handed_on,
        failed,
        answered: strip_answers(&visitor.written),
    }
}

/// What the gate wrote of its own: the visitor's writes without the
/// answers `drive` wrote for hyper.
fn strip_answers(written: &[u8]) -> Vec<u8> {
    let mut rest = written;
    while let Some(after) = rest.strip_prefix(ANSWER) {
        rest = after;
    }
    rest.to_vec()
}

/// The most the gate reads at once: a stream up to this long, offered
/// whole, is checked in one read.
const WHOLE: usize = calvin_edge::h1_framing::READ_SIZE;

/// The answer `drive` writes for hyper.
const ANSWER: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";

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
