//! A guard on visitors' HTTP/2 connections against floods of frames that
//! cost the edge work but carry no request: PING and SETTINGS (each must
//! be answered). The h2 crate itself ends rapid-reset, CONTINUATION and
//! empty-DATA floods with GOAWAY (ENHANCE_YOUR_CALM); it answers PINGs and
//! SETTINGS without limit.
//!
//! The guard reads the frame headers the visitor sends (after the client
//! preface, which the edge has already checked) and counts those frames
//! in a token bucket per connection. Past it, the visitor gets GOAWAY with
//! ENHANCE_YOUR_CALM, written between two of hyper's frames, and the
//! connection's input ends, so hyper closes it.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::rewind::poll_write_rest;

/// PING and SETTINGS frames a connection may send at once...
const BURST: f64 = 100.0;
/// ...and per second after that.
const PER_SECOND: f64 = 10.0;
const ENHANCE_YOUR_CALM: u32 = 11;
const PREFACE_LEN: usize = 24;
const HEADERS: u8 = 1;
const SETTINGS: u8 = 4;
const PING: u8 = 6;
const ACK: u8 = 1;

/// Where a parser is in a stream of frames.
#[derive(Debug, Default)]
struct Frames {
    /// Bytes still to skip before frames start (the preface), then the
    /// current frame's payload bytes left.
    skip: usize,
    /// A frame header being read.
    header: Vec<u8>,
}

impl Frames {
    /// Walks `bytes`, calling `on_frame(type, flags, stream)` at each frame
    /// header.
    fn walk(&mut self, mut bytes: &[u8], mut on_frame: impl FnMut(u8, u8, u32)) {
        while !bytes.is_empty() {
            if self.skip > 0 {
                let n = self.skip.min(bytes.len());
                self.skip -= n;
                bytes = &bytes[n..];
                continue;
            }
            let n = (9 - self.header.len()).min(bytes.len());
            self.header.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
            if self.header.len() == 9 {
                let h = &self.header;
                let len = (usize::from(h[0]) << 16) | (usize::from(h[1]) << 8) | usize::from(h[2]);
                let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
                on_frame(h[3], h[4], stream);
                self.skip = len;
                self.header.clear();
            }
        }
    }

    /// Between two frames.
    fn at_boundary(&self) -> bool {
        self.skip == 0 && self.header.is_empty()
    }
}

pub(crate) struct FloodGuard<S> {
    inner: S,
    read: Frames,
    written: Frames,
    tokens: f64,
    refilled: Instant,
    last_stream: u32,
    /// A GOAWAY to write at the next frame boundary, and how much of it is.
    goaway: Option<(Vec<u8>, usize)>,
    flooded: bool,
}

impl<S> FloodGuard<S> {
    /// `inner` starts with the client preface.
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            read: Frames {
                skip: PREFACE_LEN,
                header: Vec::new(),
            },
            written: Frames::default(),
            tokens: BURST,
            refilled: Instant::now(),
            last_stream: 0,
            goaway: None,
            flooded: false,
        }
    }

    fn count(&mut self, bytes: &[u8]) {
        let mut costly = 0u32;
        let last_stream = &mut self.last_stream;
        self.read.walk(bytes, |kind, flags, stream| match kind {
            PING | SETTINGS if flags & ACK == 0 => costly += 1,
            HEADERS => *last_stream = (*last_stream).max(stream),
            _ => {}
        });
        if costly == 0 || self.flooded {
            return;
        }
        let now = Instant::now();
        let elapsed = now.duration_since(self.refilled).as_secs_f64();
        self.refilled = now;
        self.tokens = (self.tokens + elapsed * PER_SECOND).min(BURST) - f64::from(costly);
        if self.tokens < 0.0 {
            tracing::debug!("HTTP/2 PING or SETTINGS flood: GOAWAY");
            self.flooded = true;
            let mut payload = self.last_stream.to_be_bytes().to_vec();
            payload.extend_from_slice(&ENHANCE_YOUR_CALM.to_be_bytes());
            let mut frame = vec![0, 0, 8, 7, 0, 0, 0, 0, 0];
            frame.extend_from_slice(&payload);
            self.goaway = Some((frame, 0));
        }
    }
}

impl<S: AsyncWrite + Unpin> FloodGuard<S> {
    /// Writes the pending GOAWAY if the output is between frames; ready
    /// when none is pending any more.
    fn poll_goaway(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !self.written.at_boundary() {
            return Poll::Ready(Ok(()));
        }
        if let Some((frame, done)) = &mut self.goaway {
            // Kept once written, so it is not sent twice.
            std::task::ready!(poll_write_rest(&mut self.inner, cx, frame, done))?;
        }
        Poll::Ready(Ok(()))
    }

    /// How much of `buf` may go before the GOAWAY is due: up to the end of
    /// the frame being written.
    fn writable(&self, buf: &[u8]) -> usize {
        if self
            .goaway
            .as_ref()
            .is_none_or(|(f, done)| *done == f.len())
        {
            return buf.len();
        }
        let mut probe = Frames {
            skip: self.written.skip,
            header: self.written.header.clone(),
        };
        let mut n = 0;
        for (i, byte) in buf.iter().enumerate() {
            if probe.at_boundary() && i > 0 {
                break;
            }
            probe.walk(std::slice::from_ref(byte), |_, _, _| {});
            n = i + 1;
        }
        n
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for FloodGuard<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.flooded {
            // Nothing more from this visitor: once the GOAWAY is out, the
            // input ends and hyper closes the connection.
            std::task::ready!(this.poll_goaway(cx))?;
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        std::task::ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        let new = buf.filled()[before..].to_vec();
        this.count(&new);
        if this.flooded {
            // The frames read with the flood are dropped, not processed.
            buf.set_filled(before);
            std::task::ready!(this.poll_goaway(cx))?;
            return Poll::Ready(Ok(()));
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for FloodGuard<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        std::task::ready!(this.poll_goaway(cx))?;
        let n = this.writable(buf);
        let n = std::task::ready!(Pin::new(&mut this.inner).poll_write(cx, &buf[..n]))?;
        this.written.walk(&buf[..n], |_, _, _| {});
        Poll::Ready(Ok(n))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        std::task::ready!(this.poll_goaway(cx))?;
        if this.goaway.is_some() {
            // Rare: one slice at a time, up to the frame boundary.
            let first = bufs
                .iter()
                .find(|b| !b.is_empty())
                .map_or(&[][..], |b| &b[..]);
            return Pin::new(this).poll_write(cx, first);
        }
        let n = std::task::ready!(Pin::new(&mut this.inner).poll_write_vectored(cx, bufs))?;
        let mut left = n;
        for slice in bufs {
            let take = left.min(slice.len());
            this.written.walk(&slice[..take], |_, _, _| {});
            left -= take;
            if left == 0 {
                break;
            }
        }
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        std::task::ready!(self.poll_goaway(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        std::task::ready!(self.poll_goaway(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_found_across_reads() {
        let mut frames = Frames::default();
        let mut seen = Vec::new();
        let ping = [0, 0, 8, PING, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8];
        let two: Vec<u8> = ping.iter().chain(ping.iter()).copied().collect();
        for piece in two.chunks(5) {
            frames.walk(piece, |kind, _, _| seen.push(kind));
        }
        assert_eq!(seen, [PING, PING]);
        assert!(frames.at_boundary());
    }
}
