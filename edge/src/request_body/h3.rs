//! An HTTP/3 request's body, as the edge forwards it.

use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use bytes::{Buf, Bytes};
use h3::server::RequestStream;
use hyper::body::{Frame, SizeHint};

use super::BodyError;

/// An HTTP/3 request's body, read from its request stream: its data, then
/// its trailers.
pub struct H3Body {
    recv: RequestStream<h3_quinn::RecvStream, Bytes>,
    /// What was read when the body was made, not yet passed on: data,
    /// trailers, or the error the stream ended with.
    first: Option<Result<Frame<Bytes>, BodyError>>,
    /// Bytes still to come, when the request declared its length.
    left: Option<u64>,
    data_done: bool,
    ended: bool,
}

impl H3Body {
    /// The body of a request whose head declared `length` (or none). What
    /// the stream already holds is read at once: a request sent with its
    /// end (a GET) is known to have no body before the origin is asked,
    /// as HTTP/2's END_STREAM on its head tells hyper.
    pub(crate) fn new(
        recv: RequestStream<h3_quinn::RecvStream, Bytes>,
        length: Option<u64>,
    ) -> Self {
        let mut body = Self {
            recv,
            first: None,
            left: length,
            data_done: false,
            ended: false,
        };
        let mut cx = Context::from_waker(Waker::noop());
        if let Poll::Ready(polled) = body.poll_stream(&mut cx) {
            body.first = polled;
        }
        body
    }

    /// The stream's next frame. A body longer or shorter than its
    /// Content-Length fails (RFC 9114 4.1.2: the request is malformed):
    /// passed on as it came, the origin's connection would take the
    /// difference for the start of the next request.
    fn poll_stream(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        if self.ended {
            return Poll::Ready(None);
        }
        if !self.data_done {
            match self.recv.poll_recv_data(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(err)) => {
                    self.ended = true;
                    return Poll::Ready(Some(Err(err.into())));
                }
                Poll::Ready(Ok(Some(mut data))) => {
                    let data = data.copy_to_bytes(data.remaining());
                    if let Some(left) = &mut self.left {
                        match left.checked_sub(data.len() as u64) {
                            Some(rest) => *left = rest,
                            None => {
                                self.ended = true;
                                return Poll::Ready(Some(Err(
                                    "the request body is longer than its Content-Length".into(),
                                )));
                            }
                        }
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Poll::Ready(Ok(None)) => {
                    self.data_done = true;
                    if self.left.is_some_and(|left| left > 0) {
                        self.ended = true;
                        return Poll::Ready(Some(Err(
                            "the request body is shorter than its Content-Length".into(),
                        )));
                    }
                }
            }
        }
        let trailers = self.recv.poll_recv_trailers(cx);
        match trailers {
            Poll::Pending => Poll::Pending,
            Poll::Ready(polled) => {
                self.ended = true;
                match polled {
                    Ok(Some(trailers)) => Poll::Ready(Some(Ok(Frame::trailers(trailers)))),
                    Ok(None) => Poll::Ready(None),
                    Err(err) => Poll::Ready(Some(Err(err.into()))),
                }
            }
        }
    }
}

impl hyper::body::Body for H3Body {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if let Some(first) = this.first.take() {
            return Poll::Ready(Some(first));
        }
        this.poll_stream(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.first.is_none() && self.ended
    }

    fn size_hint(&self) -> SizeHint {
        let first = match &self.first {
            Some(Ok(frame)) => frame.data_ref().map_or(0, |d| d.len() as u64),
            // An error to come: nothing is promised.
            Some(Err(_)) => return SizeHint::default(),
            None => 0,
        };
        if self.ended {
            return SizeHint::with_exact(first);
        }
        match self.left {
            Some(left) => SizeHint::with_exact(left + first),
            None => SizeHint::default(),
        }
    }
}
