//! The request body the edge forwards: the visitor's own, streaming, and
//! watched, so the wait for the origin's answer starts when the upload has
//! ended (an upload of any length is not cut by it), while an upload that
//! stops moving is still bounded. Its frames go through the account's
//! bandwidth bucket, when capped; time a body spends held back there is
//! not counted against the visitor.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use tokio::sync::watch;

use crate::bandwidth::{Bandwidth, Throttled};

mod h3;
pub use h3::H3Body;

/// A visitor's request body as its connection gives it: the HTTP/1
/// session's, hyper's (HTTP/2) or an HTTP/3 request stream's.
pub enum VisitorBody {
    /// None (a request whose head says it has none).
    Empty,
    /// Read off an HTTP/1 connection (see [`crate::front::h1`]).
    H1(http_body_util::combinators::BoxBody<Bytes, BodyError>),
    Hyper(Incoming),
    /// Boxed: an HTTP/1.1 or HTTP/2 request's body (and every future that
    /// holds one) stays hyper's size.
    H3(Box<H3Body>),
    /// Any body, for the unit tests of what forwards one.
    #[cfg(test)]
    Test(http_body_util::combinators::BoxBody<Bytes, BodyError>),
}

impl Body for VisitorBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        match self.get_mut() {
            VisitorBody::Empty => Poll::Ready(None),
            VisitorBody::H1(body) => Pin::new(body).poll_frame(cx),
            VisitorBody::Hyper(body) => Pin::new(body)
                .poll_frame(cx)
                .map(|f| f.map(|r| r.map_err(BodyError::from))),
            VisitorBody::H3(body) => Pin::new(body.as_mut()).poll_frame(cx),
            #[cfg(test)]
            VisitorBody::Test(body) => Pin::new(body).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            VisitorBody::Empty => true,
            VisitorBody::H1(body) => body.is_end_stream(),
            VisitorBody::Hyper(body) => body.is_end_stream(),
            VisitorBody::H3(body) => body.is_end_stream(),
            #[cfg(test)]
            VisitorBody::Test(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            VisitorBody::Empty => SizeHint::with_exact(0),
            VisitorBody::H1(body) => body.size_hint(),
            VisitorBody::Hyper(body) => body.size_hint(),
            VisitorBody::H3(body) => body.size_hint(),
            #[cfg(test)]
            VisitorBody::Test(body) => body.size_hint(),
        }
    }
}

pub struct RequestBody {
    inner: Throttled<VisitorBody>,
    progress: watch::Sender<Progress>,
    /// Bytes the body may still hold, when capped.
    left: Option<u64>,
    /// Whether a frame waits for the bandwidth bucket now.
    held: bool,
    /// Frames read ahead of the origin (see [`RequestBody::read_ahead`]),
    /// and whether they are the whole body.
    ahead: VecDeque<Frame<Bytes>>,
    whole: bool,
}

/// What reading the body failed with.
pub type BodyError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug, Clone, Copy)]
struct Progress {
    frames: u64,
    bytes: u64,
    ended: bool,
    failed: bool,
    too_large: bool,
    /// Times the edge held a frame back for the account's bandwidth, and
    /// whether it holds one now.
    holds: u64,
    held: bool,
}

/// The least a body must move: `bytes` in every `window`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MinRate {
    pub bytes: u64,
    pub window: Duration,
}

/// What [`BodyWatch::ended_or_stalled`] saw.
#[derive(Debug, PartialEq, Eq)]
pub enum BodyOutcome {
    /// The body ended (or failed, or was dropped).
    Ended,
    /// No frame moved for the whole period.
    Stalled,
    /// Fewer bytes than the minimum rate came in a window.
    TooSlow,
}

/// Watches a [`RequestBody`] from outside.
#[derive(Clone)]
pub struct BodyWatch(watch::Receiver<Progress>);

impl BodyWatch {
    /// Body bytes received from the visitor so far.
    pub fn bytes(&self) -> u64 {
        self.0.borrow().bytes
    }

    /// Whether reading the visitor's body failed (it broke off, or its
    /// framing was malformed).
    pub fn failed(&self) -> bool {
        self.0.borrow().failed
    }

    /// Whether the body went past its cap (and was cut there).
    pub fn too_large(&self) -> bool {
        self.0.borrow().too_large
    }

    /// Resolves when the body has ended, has not moved for `idle`, or
    /// moved slower than `min_rate` over one of its windows.
    pub async fn ended_or_stalled(
        &mut self,
        idle: Duration,
        min_rate: Option<MinRate>,
    ) -> BodyOutcome {
        let mut moved = Instant::now();
        let start = *self.0.borrow();
        let mut windows = RateWindows::new(min_rate, start.bytes);
        let mut holds = start.holds;
        loop {
            let progress = *self.0.borrow_and_update();
            if progress.ended {
                return BodyOutcome::Ended;
            }
            if windows.over() {
                // A window in which the edge held the body back for the
                // account's bandwidth is not the visitor's fault.
                let held = progress.held || progress.holds != holds;
                if windows.judge(progress.bytes, held) {
                    return BodyOutcome::TooSlow;
                }
                holds = progress.holds;
            }
            let wake = windows
                .end()
                .map_or(moved + idle, |end| end.min(moved + idle));
            match tokio::time::timeout_at(wake.into(), self.0.changed()).await {
                Err(_) if moved.elapsed() >= idle => return BodyOutcome::Stalled,
                Err(_) => {}
                Ok(Err(_)) => return BodyOutcome::Ended,
                Ok(Ok(())) => moved = Instant::now(),
            }
        }
    }
}

/// The least rate a body must keep, judged window by window. The first
/// window is a random 100-125% of one and asks as much more: the same
/// rate, but slow bodies that started together (an attack) are not all
/// judged, and answered, in the same instant.
pub struct RateWindows {
    rate: Option<MinRate>,
    now: Option<MinRate>,
    start: Instant,
    bytes: u64,
}

impl RateWindows {
    /// Windows from now, for a body that has moved `bytes` so far.
    pub fn new(rate: Option<MinRate>, bytes: u64) -> Self {
        let now = rate.map(|rate| {
            use rand::RngExt;
            let share = rand::rng().random_range(1.0..=1.25);
            MinRate {
                bytes: (rate.bytes as f64 * share) as u64,
                window: rate.window.mul_f64(share),
            }
        });
        Self {
            rate,
            now,
            start: Instant::now(),
            bytes,
        }
    }

    /// When the current window ends (never, without a rate).
    pub fn end(&self) -> Option<Instant> {
        self.now.map(|rate| self.start + rate.window)
    }

    /// Whether the current window has ended.
    pub fn over(&self) -> bool {
        self.end().is_some_and(|end| Instant::now() >= end)
    }

    /// At a window's end, with the body at `bytes`: whether it moved too
    /// little in it (`excused` windows pass). Starts the next window.
    pub fn judge(&mut self, bytes: u64, excused: bool) -> bool {
        let Some(rate) = self.now else {
            return false;
        };
        if bytes - self.bytes < rate.bytes && !excused {
            return true;
        }
        (self.now, self.start, self.bytes) = (self.rate, Instant::now(), bytes);
        false
    }
}

impl RequestBody {
    /// The body, cut with an error past `cap` bytes when one is given,
    /// its frames passing through `bandwidth` when given.
    pub fn new(
        inner: VisitorBody,
        cap: Option<u64>,
        bandwidth: Option<Arc<Bandwidth>>,
    ) -> (Self, BodyWatch) {
        let (progress, watch) = watch::channel(Progress {
            frames: 0,
            bytes: 0,
            ended: inner.is_end_stream(),
            failed: false,
            too_large: false,
            holds: 0,
            held: false,
        });
        let body = Self {
            inner: Throttled::new(inner, bandwidth),
            progress,
            left: cap,
            held: false,
            ahead: VecDeque::new(),
            whole: false,
        };
        (body, BodyWatch(watch))
    }

    /// Reads the body into the edge's memory until it ends or `max` bytes
    /// are held, before the origin gets any of it (see `Proxy::forward`);
    /// its watch sees it arrive as before. Fails as reading it would (cut
    /// past the cap, broken off).
    pub async fn read_ahead(&mut self, max: u64) -> Result<(), BodyError> {
        let mut held = 0u64;
        while held < max {
            match poll_fn(|cx| self.poll_visitor(cx)).await {
                Some(Ok(frame)) => {
                    held += frame.data_ref().map_or(0, |d| d.len() as u64);
                    self.ahead.push_back(frame);
                }
                Some(Err(err)) => return Err(err),
                None => {
                    self.whole = true;
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    fn mark(&self, ended: bool) {
        self.progress.send_modify(|p| {
            p.frames += 1;
            p.ended |= ended;
        });
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        if let Some(frame) = self.ahead.pop_front() {
            return Poll::Ready(Some(Ok(frame)));
        }
        if self.whole {
            return Poll::Ready(None);
        }
        self.poll_visitor(cx)
    }

    fn is_end_stream(&self) -> bool {
        if !self.ahead.is_empty() {
            return false;
        }
        if self.whole {
            return true;
        }
        let ended = self.inner.is_end_stream();
        if ended && !self.progress.borrow().ended {
            self.mark(true);
        }
        ended
    }

    fn size_hint(&self) -> SizeHint {
        let ahead = self
            .ahead
            .iter()
            .filter_map(Frame::data_ref)
            .map(Bytes::len);
        let ahead = ahead.sum::<usize>() as u64;
        if self.whole {
            return SizeHint::with_exact(ahead);
        }
        let rest = self.inner.size_hint();
        match rest.exact() {
            Some(rest) => SizeHint::with_exact(rest + ahead),
            None => {
                let mut hint = SizeHint::new();
                hint.set_lower(rest.lower() + ahead);
                if let Some(upper) = rest.upper() {
                    hint.set_upper(upper + ahead);
                }
                hint
            }
        }
    }
}

impl RequestBody {
    /// The next frame from the visitor, counted, capped and watched.
    fn poll_visitor(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        let held = self.inner.waiting();
        if held != self.held {
            self.held = held;
            self.progress.send_modify(|p| {
                p.holds += u64::from(held);
                p.held = held;
            });
        }
        if let (Poll::Ready(Some(Ok(frame))), Some(left)) = (&polled, self.left) {
            let len = frame.data_ref().map_or(0, |d| d.len() as u64);
            if len > left {
                self.progress.send_modify(|p| {
                    p.failed = true;
                    p.too_large = true;
                });
                self.mark(true);
                return Poll::Ready(Some(Err("the request body is over its cap".into())));
            }
            self.left = Some(left - len);
        }
        if let Poll::Ready(Some(Ok(frame))) = &polled {
            let len = frame.data_ref().map_or(0, |d| d.len() as u64);
            self.progress.send_modify(|p| p.bytes += len);
        }
        match &polled {
            Poll::Ready(None) => self.mark(true),
            Poll::Ready(Some(Err(_))) => {
                self.progress.send_modify(|p| p.failed = true);
                self.mark(true);
            }
            Poll::Ready(Some(Ok(_))) => self.mark(self.inner.is_end_stream()),
            Poll::Pending => {}
        }
        polled
    }
}
