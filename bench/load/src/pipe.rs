//! Figure 9's raw-pipe row: HTTP/1.1 requests over connections that
//! switched protocols first, so that a tunnel's edge only pipes their
//! bytes (calvin's edge splices a connection after its 101, no HTTP on
//! either side). The edge's CPU per request this way is what forwarding
//! checked HTTP/1 bytes without hyper on the hot path could come down to.
//!
//! - `pipe-origin`: answers any request asking to upgrade with 101, then
//!   serves HTTP/1.1 on the switched connection; every request gets a
//!   body of `--size` bytes.
//! - `pipe-load`: `--connections` connections, each upgraded once, then
//!   GETs back to back for `--seconds`; each answer must be a 200 with the
//!   whole body. Prints the requests answered.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{client, server};
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::net::{TcpListener, TcpStream};

use crate::stats::emit;

/// The protocol the connections switch to.
const PROTOCOL: &str = "calvin-bench-pipe";

#[derive(Debug, clap::Args)]
pub struct OriginArgs {
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// Bytes of each answer's body
    #[arg(long, default_value_t = 1024)]
    pub size: usize,
}

#[derive(Debug, clap::Args)]
pub struct LoadArgs {
    /// Where to connect (plain HTTP)
    #[arg(long)]
    pub addr: SocketAddr,
    /// Host header of the upgrade request (the preview's)
    #[arg(long)]
    pub host: String,
    #[arg(long, default_value_t = 64)]
    pub connections: usize,
    #[arg(long, default_value_t = 8)]
    pub seconds: u64,
    /// Bytes each answer's body must have
    #[arg(long, default_value_t = 1024)]
    pub size: usize,
}

pub async fn serve_origin(args: OriginArgs) -> anyhow::Result<()> {
    let listener = TcpListener::bind(args.listen).await?;
    emit(&json!({ "listening": listener.local_addr()?.to_string() }));
    let body = Bytes::from(vec![b'x'; args.size]);
    loop {
        let (stream, _) = listener.accept().await?;
        stream.set_nodelay(true)?;
        let body = body.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| switch(req, body.clone()));
            let _ = server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades()
                .await;
        });
    }
}

/// 101 to a request asking for the pipe's protocol (then HTTP/1.1 on the
/// switched connection), else the body.
async fn switch(
    mut req: Request<Incoming>,
    body: Bytes,
) -> Result<Response<Full<Bytes>>, Infallible> {
    if req.headers().get(header::UPGRADE).is_none() {
        return Ok(Response::new(Full::new(body)));
    }
    let upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        let Ok(switched) = upgrade.await else { return };
        let service = service_fn(move |_: Request<Incoming>| {
            let body = body.clone();
            async move { Ok::<_, Infallible>(Response::new(Full::new(body))) }
        });
        let _ = server::conn::http1::Builder::new()
            .serve_connection(switched, service)
            .await;
    });
    let mut answer = Response::new(Full::new(Bytes::new()));
    *answer.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    answer
        .headers_mut()
        .insert(header::UPGRADE, PROTOCOL.parse().expect("a token"));
    answer
        .headers_mut()
        .insert(header::CONNECTION, "upgrade".parse().expect("a token"));
    Ok(answer)
}

pub async fn run_load(args: LoadArgs) -> anyhow::Result<()> {
    let mut connections = tokio::task::JoinSet::new();
    let mut senders = Vec::new();
    for _ in 0..args.connections {
        senders.push(upgraded(&args).await?);
    }
    let until = Instant::now() + Duration::from_secs(args.seconds);
    let started = Instant::now();
    for mut sender in senders {
        let (host, size) = (args.host.clone(), args.size);
        connections.spawn(async move {
            let mut answered = 0u64;
            while Instant::now() < until {
                let req = Request::get("/1k")
                    .header(header::HOST, &host)
                    .body(Empty::<Bytes>::new())?;
                let res = sender.send_request(req).await?;
                let status = res.status();
                let body = res.into_body().collect().await?.to_bytes();
                if status != StatusCode::OK || body.len() != size {
                    bail!("got {status} with {} bytes through the pipe", body.len());
                }
                answered += 1;
            }
            Ok(answered)
        });
    }
    let mut requests = 0;
    for done in connections.join_all().await {
        requests += done?;
    }
    let seconds = started.elapsed().as_secs_f64();
    emit(&json!({
        "requests": requests,
        "rps": requests as f64 / seconds,
        "seconds": seconds,
    }));
    Ok(())
}

/// A connection to `args.addr` that switched to the pipe, with HTTP/1.1
/// started on it.
async fn upgraded(
    args: &LoadArgs,
) -> anyhow::Result<client::conn::http1::SendRequest<Empty<Bytes>>> {
    let stream = TcpStream::connect(args.addr)
        .await
        .with_context(|| format!("connecting to {}", args.addr))?;
    stream.set_nodelay(true)?;
    let (mut sender, connection) = client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection.with_upgrades());
    let req = Request::get("/pipe")
        .header(header::HOST, &args.host)
        .header(header::CONNECTION, "upgrade")
        .header(header::UPGRADE, PROTOCOL)
        .body(Empty::<Bytes>::new())?;
    let res = sender.send_request(req).await?;
    if res.status() != StatusCode::SWITCHING_PROTOCOLS {
        bail!("the upgrade got {}", res.status());
    }
    let switched = hyper::upgrade::on(res).await?;
    let (sender, connection) = client::conn::http1::handshake(switched).await?;
    tokio::spawn(connection);
    Ok(sender)
}
