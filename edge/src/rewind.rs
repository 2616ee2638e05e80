//! A stream with bytes already read from it put back in front.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

pub(crate) struct Rewind<S> {
    prefix: Vec<u8>,
    read: usize,
    inner: S,
}

impl<S> Rewind<S> {
    pub fn new(prefix: Vec<u8>, inner: S) -> Self {
        Self {
            prefix,
            read: 0,
            inner,
        }
    }
}

impl<S> Rewind<S> {
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Rewind<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.read < self.prefix.len() {
            let rest = &self.prefix[self.read..];
            let n = rest.len().min(buf.remaining());
            buf.put_slice(&rest[..n]);
            self.read += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Rewind<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// Writes what is left of `bytes` (past `done`, which it advances) and
/// flushes: for a few bytes of the edge's own (an answer, a GOAWAY) put
/// between those of the connection's HTTP server.
pub(crate) fn poll_write_rest<S: AsyncWrite + Unpin>(
    stream: &mut S,
    cx: &mut Context<'_>,
    bytes: &[u8],
    done: &mut usize,
) -> Poll<io::Result<()>> {
    while *done < bytes.len() {
        let n = std::task::ready!(Pin::new(&mut *stream).poll_write(cx, &bytes[*done..]))?;
        if n == 0 {
            return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
        }
        *done += n;
    }
    Pin::new(stream).poll_flush(cx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn the_prefix_comes_first_then_the_stream() {
        let (mut a, b) = tokio::io::duplex(8);
        tokio::spawn(async move {
            tokio::io::AsyncWriteExt::write_all(&mut a, b" world")
                .await
                .unwrap();
        });
        let mut r = Rewind::new(b"hello".to_vec(), b);
        let mut out = Vec::new();
        r.read_to_end(&mut out).await.unwrap();
        assert_eq!(out, b"hello world");
    }
}
