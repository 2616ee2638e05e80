//! The request body the edge forwards: the visitor's own, streaming, and
//! watched, so the wait for the origin's answer starts when the upload has
//! ended (an upload of any length is not cut by it), while an upload that
//! stops moving is still bounded. Its frames go through the account's
//! bandwidth bucket, when capped; time a body spends held back there is
//! not counted against the visitor.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use tokio::sync::watch;

use crate::bandwidth::{Bandwidth, Throttled};

pub struct RequestBody {
    inner: Throttled<Incoming>,
    progress: watch::Sender<Progress>,
    /// Bytes the body may still hold, when capped.
    left: Option<u64>,
    /// Whether a frame waits for the bandwidth bucket now.
    held: bool,
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
pub struct BodyWatch(watch::Receiver<Progress>);

impl BodyWatch {
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
        let mut window = (Instant::now(), start.bytes, start.holds);
        // The first window is a random 100-125% of one and asks as much more:
        // the same rate, but slow bodies that started together (an attack)
        // are not all judged, and answered, in the same instant.
        let mut rate_now = min_rate.map(|rate| {
            use rand::RngExt;
            let share = rand::rng().random_range(1.0..=1.25);
            MinRate {
                bytes: (rate.bytes as f64 * share) as u64,
                window: rate.window.mul_f64(share),
            }
        });
        loop {
            let progress = *self.0.borrow_and_update();
            if progress.ended {
                return BodyOutcome::Ended;
            }
            if let Some(rate) = rate_now
                && window.0.elapsed() >= rate.window
            {
                // A window in which the edge held the body back for the
                // account's bandwidth is not the visitor's fault.
                let held = progress.held || progress.holds != window.2;
                if progress.bytes - window.1 < rate.bytes && !held {
                    return BodyOutcome::TooSlow;
                }
                window = (Instant::now(), progress.bytes, progress.holds);
                rate_now = min_rate;
            }
            let mut wake = moved + idle;
            if let Some(rate) = rate_now {
                wake = wake.min(window.0 + rate.window);
            }
            match tokio::time::timeout_at(wake.into(), self.0.changed()).await {
                Err(_) if moved.elapsed() >= idle => return BodyOutcome::Stalled,
                Err(_) => {}
                Ok(Err(_)) => return BodyOutcome::Ended,
                Ok(Ok(())) => moved = Instant::now(),
            }
        }
    }
}

impl RequestBody {
    /// The body, cut with an error past `cap` bytes when one is given,
    /// its frames passing through `bandwidth` when given.
    pub fn new(
        inner: Incoming,
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
        };
        (body, BodyWatch(watch))
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
        polled.map(|frame| frame.map(|r| r.map_err(BodyError::from)))
    }

    fn is_end_stream(&self) -> bool {
        let ended = self.inner.is_end_stream();
        if ended && !self.progress.borrow().ended {
            self.mark(true);
        }
        ended
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
