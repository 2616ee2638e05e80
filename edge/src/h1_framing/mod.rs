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
//!
//! The checker ([`checker`]) holds no I/O: the visitors' front reads a
//! connection's first request through the gate on its own thread
//! ([`FramingGate::read_more`]), and the gate then moves whole to the
//! runtime serving requests, so each head is parsed once before hyper.

pub mod checker;

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

pub use checker::{
    Checked, Checker, Decoded, Expect, FirstHead, Framing, HeadLimits, ParsedHead, Refusal,
};
use checker::{State, is_final_answer};

use crate::rewind::poll_write_rest;

/// hyper's limit on an HTTP/1 head's header fields when none is set.
pub(crate) const HYPER_MAX_HEADERS: usize = 100;

/// Room made in the gate's own buffer for a read: heads, mostly (a body's
/// bytes go straight into hyper's buffer when nothing is held). Small, as
/// the front holds one per connection still sending its first head
/// (thousands, under a slowloris attack). Public for the fuzz target.
pub const READ_SIZE: usize = 4096;

/// A visitor's HTTP/1 connection with the gate in front; see the module
/// documentation. Public for the fuzz target, which drives it as hyper
/// does.
pub struct FramingGate<S> {
    inner: S,
    checker: Checker,
    /// Bytes read and not yet handed to hyper, from offset `base`.
    pending: BytesMut,
    base: u64,
    /// Bytes before this offset are checked; before `ready`, released.
    checked: u64,
    ready: u64,
    /// A refused request: answered when hyper closes the connection.
    refusal: Option<Refusal>,
    /// Where a refusal answered is counted, when it is.
    counts: Option<crate::counts::Counts>,
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

    /// A gate on a visitor's connection of which `opening` was read
    /// already (and is checked now).
    pub fn with_opening(inner: S, limits: HeadLimits, opening: &[u8]) -> Self {
        let mut gate = Self::new(inner, limits);
        if !opening.is_empty() {
            gate.pending.extend_from_slice(opening);
            gate.run_checker();
        }
        gate
    }

    /// Counts the refusal it answers (a request, and the refusal's code).
    pub fn count_in(&mut self, counts: crate::counts::Counts) {
        self.counts = Some(counts);
    }

    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Whether the first request's head is whole and passed, or the
    /// connection cannot give one: it ended, or the request was refused
    /// (answered once hyper closes the connection).
    pub fn first_head_done(&self) -> bool {
        self.checker.heads() > 0 || self.eof || self.refusal.is_some() || self.fail_at.is_some()
    }

    /// Offset of the end of what was read from the connection so far.
    pub fn read_end(&self) -> u64 {
        self.base + self.pending.len() as u64
    }

    /// What the first request's head said about its body, once it passed
    /// (and was not refused).
    pub fn first_head(&self) -> Option<checker::FirstHead> {
        if self.refusal.is_some() || self.fail_at.is_some() {
            return None;
        }
        self.checker.first_head()
    }

    fn with_checker(inner: S, checker: Checker) -> Self {
        Self {
            inner,
            checker,
            pending: BytesMut::new(),
            base: 0,
            checked: 0,
            ready: 0,
            refusal: None,
            counts: None,
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
    pub fn into_parts(self) -> (S, BytesMut) {
        (self.inner, self.pending)
    }

    /// Hands hyper what is ready; false when nothing is.
    fn release(&mut self, buf: &mut ReadBuf<'_>) -> bool {
        let n = ((self.ready - self.base) as usize).min(buf.remaining());
        if n == 0 {
            return false;
        }
        buf.put_slice(&self.pending[..n]);
        self.pending.advance(n);
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
                self.checked = self.checker.resume_at(to, self.read_end());
            }
            Checked::Refused {
                message,
                at,
                refusal,
                passed,
            } => {
                self.checked = self.read_end();
                if message >= self.base {
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

impl<S: AsyncRead + Unpin> FramingGate<S> {
    /// Reads what the connection has into the gate's buffer (a read into
    /// room not zeroed first), without handing any of it on; checks it.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        self.pending.reserve(READ_SIZE);
        let n = std::task::ready!(tokio_util::io::poll_read_buf(
            Pin::new(&mut self.inner),
            cx,
            &mut self.pending
        ))?;
        if n == 0 {
            // The visitor is done: whatever it sent is hyper's.
            self.eof = true;
            self.ready = self.read_end();
        } else {
            self.run_checker();
        }
        Poll::Ready(Ok(n))
    }

    /// On the front: reads once more from the connection, and checks what
    /// came; 0 at its end.
    pub async fn read_more(&mut self) -> io::Result<usize> {
        std::future::poll_fn(|cx| self.poll_fill(cx)).await
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
                    this.ready = this.read_end();
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
            std::task::ready!(this.poll_fill(cx))?;
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
            if let Some(counts) = &this.counts {
                counts.refused_as(refusal.code);
                let status = http::StatusCode::from_u16(refusal.status)
                    .unwrap_or(http::StatusCode::BAD_REQUEST);
                counts.answered(http::Version::HTTP_11, status, std::time::Instant::now());
            }
            this.answer = Some((refusal.response(), 0));
        }
        if let Some((answer, written)) = &mut this.answer {
            std::task::ready!(poll_write_rest(&mut this.inner, cx, answer, written))?;
            this.answer = None;
        }
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}
