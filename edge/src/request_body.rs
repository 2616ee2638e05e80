//! The request body the edge forwards: the visitor's own, streaming, with a
//! signal when it has ended, so the wait for the origin's answer starts
//! when the upload is done rather than when it starts.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use tokio::sync::watch;

pub struct RequestBody {
    inner: Incoming,
    ended: watch::Sender<bool>,
}

/// Resolves when the body has ended, failed, or been dropped.
pub struct BodyEnd(watch::Receiver<bool>);

impl BodyEnd {
    pub async fn wait(mut self) {
        let _ = self.0.wait_for(|ended| *ended).await;
    }
}

impl RequestBody {
    pub fn new(inner: Incoming) -> (Self, BodyEnd) {
        let (ended, watch) = watch::channel(inner.is_end_stream());
        (Self { inner, ended }, BodyEnd(watch))
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        let ended = match &polled {
            Poll::Ready(None | Some(Err(_))) => true,
            Poll::Ready(Some(Ok(_))) => self.inner.is_end_stream(),
            Poll::Pending => false,
        };
        if ended {
            self.ended.send_replace(true);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        let ended = self.inner.is_end_stream();
        if ended {
            self.ended.send_replace(true);
        }
        ended
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
