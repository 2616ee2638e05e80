//! A QUIC bidi stream as one byte stream, for an upstream connection on
//! either side of the tunnel.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The QUIC stream error code for "this transfer was cut off".
pub const ABORTED: u32 = 1;

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

    /// Ends both directions as cut off.
    pub fn abort(&mut self) {
        let _ = self.send.reset(ABORTED.into());
        let _ = self.recv.stop(ABORTED.into());
        self.finished = true;
    }
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

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.send).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.finished = true;
        Pin::new(&mut self.send).poll_shutdown(cx)
    }
}
