//! A QUIC bidi stream as one byte stream, for an upstream connection on
//! either side of the tunnel.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The QUIC stream error code for "this transfer was cut off" (a wire
/// fact: [`calvin_proto::STREAM_ABORTED`]).
pub use calvin_proto::STREAM_ABORTED as ABORTED;

/// Bytes read from TCP at a time by [`TunnelStream::splice`].
const SPLICE_READ: usize = 16 << 10;

/// One upstream connection: a QUIC bidi stream as a byte stream. Shut down,
/// it finishes; dropped without a shutdown (an error, an abort), it resets,
/// so the agent never takes a cut-off transfer for a complete one.
pub struct TunnelStream {
    recv: quinn::RecvStream,
    send: quinn::SendStream,
    finished: bool,
}

impl TunnelStream {
    pub fn new(recv: quinn::RecvStream, send: quinn::SendStream) -> Self {
        Self {
            recv,
            send,
            finished: false,
        }
    }

    /// Copies both ways between this stream and `tcp` until both directions
    /// have ended: an end on one side is passed on as an end (FIN or QUIC
    /// finish) and the other direction goes on. Bytes move as quinn's own
    /// chunks (`read_chunk`/`write_chunk`), without a copy through a buffer
    /// of ours. On an error the caller aborts both sides. `tally` is told
    /// of every chunk as it moves, with its bytes (to TCP: before they are
    /// written).
    pub async fn splice(
        &mut self,
        tcp: &mut tokio::net::TcpStream,
        tally: impl Fn(Moved, &[u8]) + Sync,
    ) -> io::Result<()> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut tcp_read, mut tcp_write) = tcp.split();
        let (recv, send) = (&mut self.recv, &mut self.send);
        let tally = &tally;
        let inbound = async {
            while let Some(chunk) = recv.read_chunk(usize::MAX, true).await? {
                // Told before the write, so that what comes back for it
                // is never told first.
                tally(
                    Moved {
                        to_tcp: chunk.bytes.len() as u64,
                        from_tcp: 0,
                    },
                    &chunk.bytes,
                );
                tcp_write.write_all(&chunk.bytes).await?;
            }
            tcp_write.shutdown().await
        };
        let outbound = async {
            let mut buf = bytes::BytesMut::new();
            loop {
                buf.reserve(SPLICE_READ);
                let n = tcp_read.read_buf(&mut buf).await?;
                if n == 0 {
                    break;
                }
                let chunk = buf.split().freeze();
                tally(
                    Moved {
                        to_tcp: 0,
                        from_tcp: n as u64,
                    },
                    &chunk,
                );
                send.write_chunk(chunk).await?;
            }
            send.finish().map_err(io::Error::other)
        };
        tokio::try_join!(inbound, outbound)?;
        self.finished = true;
        Ok(())
    }

    /// Ends both directions as cut off.
    pub fn abort(&mut self) {
        let _ = self.send.reset(ABORTED.into());
        let _ = self.recv.stop(ABORTED.into());
        self.finished = true;
    }
}

/// What [`TunnelStream::splice`] moved each way, one chunk's worth.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Moved {
    /// Bytes from the stream written to the TCP side.
    pub to_tcp: u64,
    /// Bytes read from the TCP side onto the stream.
    pub from_tcp: u64,
}

impl Drop for TunnelStream {
    fn drop(&mut self) {
        if !self.finished {
            let _ = self.send.reset(ABORTED.into());
        }
    }
}

impl AsyncRead for TunnelStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.recv).poll_read(cx, buf)
    }
}

impl AsyncWrite for TunnelStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.send)
            .poll_write(cx, buf)
            .map_err(Into::into)
    }

    /// Vectored, so hyper queues a body's chunks as they are instead of
    /// first copying them into one buffer of its own (on a 1 GiB upload
    /// that copy was the edge's largest cost after the kernel's).
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let mut written = 0;
        for buf in bufs.iter().filter(|b| !b.is_empty()) {
            match Pin::new(&mut self.send).poll_write(cx, buf) {
                Poll::Ready(Ok(n)) => {
                    written += n;
                    if n < buf.len() {
                        break;
                    }
                }
                Poll::Ready(Err(err)) if written == 0 => return Poll::Ready(Err(err.into())),
                Poll::Pending if written == 0 => return Poll::Pending,
                Poll::Ready(Err(_)) | Poll::Pending => break,
            }
        }
        Poll::Ready(Ok(written))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.send).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.finished = true;
        Pin::new(&mut self.send).poll_shutdown(cx)
    }
}
