//! Bandwidth per account: one token bucket per account, shared by all of
//! its agents, that every body byte of its previews passes through, both
//! ways (requests to the origin, responses back, upgraded connections).
//! The bucket refills at `max_bytes_per_second_per_account` and holds one
//! second's worth, so a short transfer goes at full speed and a long one
//! at the rate. Past it, bytes wait (they are shaped, never refused).
//!
//! - [`Buckets`]: the accounts' buckets; none exists while the limit is 0.
//! - [`Throttled`]: a body whose data frames each wait for their bytes.
//! - [`ThrottledIo`]: a byte stream whose reads and writes are paid for.

use std::io;
use std::num::{NonZeroU32, NonZeroU64};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use governor::clock::Clock;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use hyper::body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

use crate::accounts::AccountId;

/// Most cells a bucket refills per second. governor counts time in whole
/// nanoseconds per cell, so at 2^20 cells a second a cell's period is
/// rounded by at most 0.1%; faster rates count bytes in larger cells.
const MAX_CELLS_PER_SECOND: u64 = 1 << 20;

/// A frame takes its bytes in pieces of at most this share of the bucket.
/// governor admits `n` cells only once `n` are there at once: a frame
/// waiting for a whole second's worth could wait for ever behind other
/// bodies taking small frames, while an eighth comes round soon.
const PIECES_PER_BURST: u32 = 8;

/// The shortest wait, so that a bucket that is not quite ready never makes
/// a body spin.
const MIN_WAIT: Duration = Duration::from_millis(1);

/// One account's bucket.
pub struct Bandwidth {
    limiter: DefaultDirectRateLimiter,
    /// Bytes per cell: 1 up to 1 MiB/s, then the next power of two.
    unit: u64,
    /// The most cells one check takes.
    piece: NonZeroU32,
}

impl Bandwidth {
    /// A bucket refilling `bytes_per_second`, holding one second's worth.
    pub fn new(bytes_per_second: NonZeroU64) -> Self {
        let rate = bytes_per_second.get();
        let unit = rate.div_ceil(MAX_CELLS_PER_SECOND).next_power_of_two();
        let cells = rate.div_ceil(unit).clamp(1, MAX_CELLS_PER_SECOND);
        // The time one cell takes to come back, at least a nanosecond.
        let period_ns = (1_000_000_000u128 * u128::from(unit) / u128::from(rate)).max(1);
        let period = Duration::from_nanos(u64::try_from(period_ns).unwrap_or(u64::MAX));
        let burst =
            NonZeroU32::new(u32::try_from(cells).unwrap_or(u32::MAX)).unwrap_or(NonZeroU32::MIN);
        let quota = Quota::with_period(period)
            .unwrap_or_else(|| Quota::per_second(burst))
            .allow_burst(burst);
        let piece = NonZeroU32::new(burst.get() / PIECES_PER_BURST).unwrap_or(NonZeroU32::MIN);
        Self {
            limiter: RateLimiter::direct(quota),
            unit,
            piece,
        }
    }

    /// Takes up to one piece of `cells` now, or says how long until it can.
    fn take(&self, cells: u64) -> Result<u64, Duration> {
        let n = piece_of(cells, self.piece);
        match self.limiter.check_n(n) {
            Ok(Ok(())) => Ok(u64::from(n.get())),
            Ok(Err(not_until)) => Err(not_until.wait_time_from(self.limiter.clock().now())),
            // A piece is never more than the bucket holds.
            Err(_) => Ok(u64::from(n.get())),
        }
    }
}

/// The next piece to take of `cells` (at least one) owed.
fn piece_of(cells: u64, piece: NonZeroU32) -> NonZeroU32 {
    let n = cells.min(u64::from(piece.get()));
    NonZeroU32::new(u32::try_from(n).unwrap_or(piece.get())).unwrap_or(NonZeroU32::MIN)
}

/// The accounts' buckets, made as their first agent connects (clones
/// share them).
#[derive(Clone)]
pub struct Buckets {
    per_second: Option<NonZeroU64>,
    buckets: Arc<dashmap::DashMap<AccountId, Arc<Bandwidth>>>,
}

impl Buckets {
    /// Buckets of `bytes_per_second` each; 0 turns the limit off.
    pub fn new(bytes_per_second: u64) -> Self {
        Self {
            per_second: NonZeroU64::new(bytes_per_second),
            buckets: Arc::default(),
        }
    }

    /// The account's bucket; `None` (and nothing kept) without a limit.
    pub fn for_account(&self, account: &AccountId) -> Option<Arc<Bandwidth>> {
        let rate = self.per_second?;
        let bucket = self.buckets.entry(account.clone());
        Some(
            bucket
                .or_insert_with(|| Arc::new(Bandwidth::new(rate)))
                .clone(),
        )
    }
}

impl std::fmt::Debug for Buckets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Buckets")
            .field("per_second", &self.per_second)
            .field("accounts", &self.buckets.len())
            .finish()
    }
}

/// One transfer's way through its account's bucket: the bytes it owes,
/// and the wait under way.
pub struct Throttle {
    bucket: Arc<Bandwidth>,
    /// Bytes charged and not yet taken from the bucket.
    owed: u64,
    sleep: Option<Pin<Box<Sleep>>>,
    waiting: bool,
}

impl Throttle {
    pub fn new(bucket: Arc<Bandwidth>) -> Self {
        Self {
            bucket,
            owed: 0,
            sleep: None,
            waiting: false,
        }
    }

    /// Adds `bytes` to what is owed.
    pub fn charge(&mut self, bytes: u64) {
        self.owed = self.owed.saturating_add(bytes);
    }

    /// Whether the last poll left the transfer waiting for the bucket.
    pub fn waiting(&self) -> bool {
        self.waiting
    }

    /// Ready once what is owed has been taken from the bucket, piece by
    /// piece (less than a cell is carried over to the next charge).
    pub fn poll_paid(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            if self.waiting {
                if let Some(sleep) = &mut self.sleep {
                    ready!(sleep.as_mut().poll(cx));
                }
                self.waiting = false;
            }
            let cells = self.owed / self.bucket.unit;
            if cells == 0 {
                return Poll::Ready(());
            }
            match self.bucket.take(cells) {
                Ok(taken) => self.owed -= taken * self.bucket.unit,
                Err(wait) => {
                    let deadline = tokio::time::Instant::now() + wait.max(MIN_WAIT);
                    match &mut self.sleep {
                        Some(sleep) => sleep.as_mut().reset(deadline),
                        None => self.sleep = Some(Box::pin(tokio::time::sleep_until(deadline))),
                    }
                    self.waiting = true;
                }
            }
        }
    }
}

/// A body whose data frames each wait for their bytes in the bucket before
/// they are passed on (none is dropped or split). Without a bucket it is
/// the body as it is.
pub struct Throttled<B> {
    inner: B,
    throttle: Option<Throttle>,
    /// A frame read and waiting for its bytes.
    held: Option<Frame<Bytes>>,
}

impl<B> Throttled<B> {
    pub fn new(inner: B, bucket: Option<Arc<Bandwidth>>) -> Self {
        Self {
            inner,
            throttle: bucket.map(Throttle::new),
            held: None,
        }
    }

    /// Whether a frame is held back, waiting for the bucket.
    pub fn waiting(&self) -> bool {
        self.throttle.as_ref().is_some_and(Throttle::waiting)
    }
}

impl<B: Body<Data = Bytes> + Unpin> Body for Throttled<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = &mut *self;
        let Some(throttle) = &mut this.throttle else {
            return Pin::new(&mut this.inner).poll_frame(cx);
        };
        if this.held.is_none() {
            match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
                Some(Ok(frame)) => match frame.data_ref().map_or(0, Bytes::len) {
                    0 => return Poll::Ready(Some(Ok(frame))),
                    len => {
                        throttle.charge(len as u64);
                        this.held = Some(frame);
                    }
                },
                other => return Poll::Ready(other),
            }
        }
        ready!(throttle.poll_paid(cx));
        Poll::Ready(this.held.take().map(Ok))
    }

    fn is_end_stream(&self) -> bool {
        self.held.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let hint = self.inner.size_hint();
        let held = self
            .held
            .as_ref()
            .and_then(Frame::data_ref)
            .map_or(0, |d| d.len() as u64);
        if held == 0 {
            return hint;
        }
        let mut with_held = SizeHint::new();
        with_held.set_lower(hint.lower().saturating_add(held));
        if let Some(upper) = hint.upper() {
            with_held.set_upper(upper.saturating_add(held));
        }
        with_held
    }
}

/// A byte stream whose reads and writes both go through the bucket: each
/// passes, and the next in its direction waits until it is paid for (so
/// the stream runs ahead of the rate by one read or write at most).
pub struct ThrottledIo<T> {
    inner: T,
    reads: Option<Throttle>,
    writes: Option<Throttle>,
}

impl<T> ThrottledIo<T> {
    pub fn new(inner: T, bucket: Option<Arc<Bandwidth>>) -> Self {
        Self {
            reads: bucket.clone().map(Throttle::new),
            writes: bucket.map(Throttle::new),
            inner,
        }
    }

    /// Counts `bytes` that passed from the stream by another way.
    pub fn charge_read(&mut self, bytes: usize) {
        if let Some(reads) = &mut self.reads {
            reads.charge(bytes as u64);
        }
    }

    pub fn get_mut(&mut self) -> &mut T {
        &mut self.inner
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for ThrottledIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if let Some(reads) = &mut this.reads {
            ready!(reads.poll_paid(cx));
        }
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        this.charge_read(buf.filled().len() - before);
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for ThrottledIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if let Some(writes) = &mut this.writes {
            ready!(writes.poll_paid(cx));
        }
        let n = ready!(Pin::new(&mut this.inner).poll_write(cx, buf))?;
        if let Some(writes) = &mut this.writes {
            writes.charge(n as u64);
        }
        Poll::Ready(Ok(n))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use std::time::Instant;

    fn rate(bytes_per_second: u64) -> Arc<Bandwidth> {
        Arc::new(Bandwidth::new(
            NonZeroU64::new(bytes_per_second).expect("a rate"),
        ))
    }

    #[test]
    fn a_frame_past_the_burst_is_taken_in_pieces_of_an_eighth() {
        let piece = NonZeroU32::new(128).unwrap();
        let mut owed = 2_500u64;
        let mut pieces = Vec::new();
        while owed > 0 {
            let n = piece_of(owed, piece).get();
            pieces.push(n);
            owed -= u64::from(n);
        }
        assert_eq!(pieces.len(), 20);
        assert!(pieces[..19].iter().all(|p| *p == 128));
        assert_eq!(pieces[19], 2_500 - 19 * 128);

        let bucket = rate(1 << 20);
        assert_eq!((bucket.unit, bucket.piece.get()), (1, 128 << 10));
        // Past 1 Mi cells a second, a cell counts more bytes.
        let fast = rate(10 << 30);
        assert_eq!(fast.unit, 16 << 10);
        assert_eq!(u64::from(fast.piece.get()), (10u64 << 30) / (16 << 10) / 8);
        let slow = rate(3);
        assert_eq!((slow.unit, slow.piece.get()), (1, 1));
    }

    #[tokio::test]
    async fn a_frame_of_two_bursts_passes_whole_after_a_second() {
        // 64 KiB/s: the first 64 KiB pass at once, the next 64 KiB take
        // a second, in pieces of 8 KiB.
        let frame = Bytes::from(vec![7u8; 128 << 10]);
        let inner = Frames([frame.clone()].into());
        let body = Throttled::new(inner, Some(rate(64 << 10)));
        let start = Instant::now();
        let collected = body.collect().await.expect("the body").to_bytes();
        let took = start.elapsed();
        assert_eq!(collected, frame);
        assert!(
            took >= Duration::from_millis(950) && took < Duration::from_secs(5),
            "took {took:?}"
        );
    }

    #[tokio::test]
    async fn without_a_bucket_frames_pass_at_once() {
        let frames = vec![Bytes::from(vec![1u8; 1 << 20]); 4];
        let body = Throttled::new(Frames(frames.into()), None);
        let start = Instant::now();
        assert_eq!(
            body.collect().await.expect("body").to_bytes().len(),
            4 << 20
        );
        assert!(start.elapsed() < Duration::from_secs(2));
    }

    #[tokio::test]
    async fn reads_and_writes_share_the_bucket() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (near, mut far) = tokio::io::duplex(64 << 10);
        let mut io = ThrottledIo::new(near, Some(rate(32 << 10)));
        let start = Instant::now();
        // 32 KiB written and 32 KiB read: a second past the burst.
        io.write_all(&[1u8; 32 << 10]).await.expect("write");
        far.write_all(&[2u8; 32 << 10]).await.expect("far write");
        let mut got = vec![0u8; 32 << 10];
        io.read_exact(&mut got).await.expect("read");
        // The next read pays for the first (the bucket's 32 KiB), the
        // next write for the first write: a second's worth more.
        far.write_all(b"!").await.expect("far write");
        let mut last = [0u8; 1];
        io.read_exact(&mut last).await.expect("last read");
        assert!(start.elapsed() < Duration::from_millis(500));
        io.write_all(b"?").await.expect("last write");
        let took = start.elapsed();
        assert!(got.iter().all(|b| *b == 2) && last == *b"!");
        assert!(took >= Duration::from_millis(900), "took {took:?}");
    }

    /// A body of ready frames.
    struct Frames(std::collections::VecDeque<Bytes>);

    impl Body for Frames {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            Poll::Ready(self.0.pop_front().map(|b| Ok(Frame::data(b))))
        }
    }
}
