//! A listener that serves `GET /metrics`: the agent's (`up --metrics
//! ADDR`) and the gateway's (`[serve] metrics`). The edge's admin listener
//! serves more (its health and readiness) and has its own.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;

/// The content type of the OpenMetrics text prometheus-client writes.
pub const CONTENT_TYPE_OPENMETRICS: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Serves `GET /metrics` with what `render` writes, until the task is
/// dropped; any other path is 404.
pub async fn serve(listener: TcpListener, render: impl Fn() -> String + Send + Sync + 'static) {
    serve_with(listener, move |req| {
        if req.uri().path() != "/metrics" {
            text(StatusCode::NOT_FOUND, "GET /metrics\n".into())
        } else if req.method() != Method::GET && req.method() != Method::HEAD {
            text(StatusCode::METHOD_NOT_ALLOWED, "GET only\n".into())
        } else {
            answer(StatusCode::OK, CONTENT_TYPE_OPENMETRICS, render())
        }
    })
    .await
}

/// Serves each HTTP/1.1 request on `listener` with `respond`'s answer
/// (its body unread), until the task is dropped: the loopback listeners
/// operators' tools ask (the edge's admin listener, the metrics above).
pub async fn serve_with(
    listener: TcpListener,
    respond: impl Fn(&Request<Incoming>) -> Response<Full<Bytes>> + Send + Sync + 'static,
) {
    let respond = Arc::new(respond);
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(_) => {
                // Out of file descriptors, most likely: not in a tight loop.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let respond = respond.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req: Request<Incoming>| {
                std::future::ready(Ok::<_, Infallible>(respond(&req)))
            });
            let _ = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_secs(10))
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// A plain text answer.
pub fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    answer(status, "text/plain; charset=utf-8", body)
}

/// An answer of `content_type`, never cached.
pub fn answer(
    status: StatusCode,
    content_type: &'static str,
    body: String,
) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    let h = response.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}
