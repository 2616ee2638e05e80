//! Figure 7: server-sent events. The origin stamps each event with its
//! wall-clock send time in nanoseconds (`data: <ns>`); the client, on the
//! same machine, subtracts it from the time the event arrives. Through a
//! tunnel minus direct is the delay the tunnel adds per event.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use crate::stats::{Samples, emit};
use crate::target::{Target, TargetArgs};

#[derive(Debug, clap::Args)]
pub struct OriginArgs {
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// Milliseconds between events
    #[arg(long, default_value_t = 10)]
    pub interval_ms: u64,
}

#[derive(Debug, clap::Args)]
pub struct ClientArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// Events to measure
    #[arg(long, default_value_t = 1000)]
    pub events: usize,
    /// Events read first and not measured
    #[arg(long, default_value_t = 10)]
    pub warmup: usize,
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// Serves until killed; prints `{"listening": ADDR}` once bound.
pub async fn serve_origin(args: OriginArgs) -> anyhow::Result<()> {
    let listener = TcpListener::bind(args.listen).await?;
    emit(&json!({ "listening": listener.local_addr()?.to_string() }));
    let interval = Duration::from_millis(args.interval_ms.max(1));
    loop {
        let (stream, _) = listener.accept().await?;
        stream.set_nodelay(true)?;
        let service = service_fn(move |req: http::Request<Incoming>| async move {
            Ok::<_, Infallible>(answer(req.uri().path(), interval))
        });
        tokio::spawn(async move {
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

type BoxBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

fn answer(path: &str, interval: Duration) -> Response<BoxBody> {
    if path != "/events" {
        let mut res = Response::new(Full::new(Bytes::from_static(b"ok\n")).boxed());
        if path != "/" {
            *res.status_mut() = StatusCode::NOT_FOUND;
        }
        return res;
    }
    let (events, body) = mpsc::channel(16);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let event = Bytes::from(format!("data: {}\n\n", now_ns()));
            if events.send(event).await.is_err() {
                break;
            }
        }
    });
    let mut res = Response::new(Events(body).boxed());
    let headers = res.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(
        http::header::CACHE_CONTROL,
        http::HeaderValue::from_static("no-cache"),
    );
    res
}

/// A response body fed one event at a time.
struct Events(mpsc::Receiver<Bytes>);

impl Body for Events {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0
            .poll_recv(cx)
            .map(|event| event.map(|b| Ok(Frame::data(b))))
    }
}

pub async fn run_client(args: ClientArgs) -> anyhow::Result<()> {
    let target = Target::new(&args.target)?;
    let mut conn = target.connect().await?;
    let mut req = target.get();
    req.headers_mut().insert(
        http::header::ACCEPT,
        http::HeaderValue::from_static("text/event-stream"),
    );
    let response = conn.send_request(req).await?;
    if !response.status().is_success() {
        bail!("{} answered {}", args.target.url, response.status());
    }
    let mut body = response.into_body();
    let mut pending = String::new();
    let mut delays = Vec::with_capacity(args.events);
    let mut seen = 0;
    while delays.len() < args.events {
        let frame = body
            .frame()
            .await
            .context("the event stream ended")?
            .context("reading the event stream")?;
        let arrived = now_ns();
        let Ok(data) = frame.into_data() else {
            continue;
        };
        pending.push_str(std::str::from_utf8(&data).context("events are text")?);
        while let Some(end) = pending.find("\n\n") {
            let event: String = pending.drain(..end + 2).collect();
            let sent: u128 = event
                .lines()
                .find_map(|l| l.strip_prefix("data: "))
                .context("an event without data")?
                .trim()
                .parse()
                .context("an event's data is not a time")?;
            seen += 1;
            if seen > args.warmup && delays.len() < args.events {
                let delay = arrived.saturating_sub(sent) / 1000;
                delays.push(u64::try_from(delay).unwrap_or(u64::MAX));
            }
        }
    }
    let delays = Samples::new(delays);
    emit(&json!({
        "events": delays.len(),
        "p50_us": delays.percentile_us(50.0),
        "p99_us": delays.percentile_us(99.0),
        "max_us": delays.max_us(),
    }));
    Ok(())
}
