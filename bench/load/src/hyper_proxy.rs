//! Figure 9's rough floor: about the least an HTTP/1 proxy built on hyper
//! does per request. Each visitor connection gets its own HTTP/1
//! connection to the origin over plain TCP (as rathole gives each its own
//! data connection); each request is parsed by hyper's server, sent on by
//! hyper's client, and its answer streamed back, with no routing, header
//! rewriting, limits, encryption or QUIC. calvin's edge runs the same two
//! codecs per request, so this one's user time is about the least the
//! edge's can be while hyper serves every request (a rough bound: this
//! process runs one thread and glibc's allocator, the edge mimalloc).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::{Bytes, Incoming};
use hyper::client::conn::http1 as client;
use hyper::server::conn::http1 as server;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex;

use crate::stats::emit;

#[derive(Debug, clap::Args)]
pub struct HyperProxyArgs {
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// The origin every request goes to
    #[arg(long)]
    pub origin: SocketAddr,
}

type Body = BoxBody<Bytes, hyper::Error>;

pub async fn run(args: HyperProxyArgs) -> anyhow::Result<()> {
    let listener = TcpListener::bind(args.listen).await?;
    emit(&json!({ "listening": listener.local_addr()?.to_string() }));
    loop {
        let (visitor, _) = listener.accept().await?;
        tokio::spawn(async move {
            if let Err(err) = proxy_connection(visitor, args.origin).await {
                eprintln!("hyper-proxy: {err:#}");
            }
        });
    }
}

async fn proxy_connection(visitor: TcpStream, origin: SocketAddr) -> anyhow::Result<()> {
    visitor.set_nodelay(true)?;
    let upstream = TcpStream::connect(origin)
        .await
        .context("connecting to the origin")?;
    upstream.set_nodelay(true)?;
    let (sender, connection) = client::handshake(TokioIo::new(upstream)).await?;
    tokio::spawn(connection);
    let sender = Arc::new(Mutex::new(sender));
    let service = service_fn(move |req: Request<Incoming>| {
        let sender = sender.clone();
        async move { Ok::<_, Infallible>(forward(&sender, req).await) }
    });
    server::Builder::new()
        .serve_connection(TokioIo::new(visitor), service)
        .await?;
    Ok(())
}

async fn forward(
    sender: &Mutex<client::SendRequest<Incoming>>,
    req: Request<Incoming>,
) -> Response<Body> {
    let mut sender = sender.lock().await;
    let answered = match sender.ready().await {
        Ok(()) => sender.send_request(req).await,
        Err(err) => Err(err),
    };
    match answered {
        Ok(response) => response.map(BodyExt::boxed),
        Err(err) => {
            let body = Full::new(Bytes::from(format!("{err}\n")))
                .map_err(|never| match never {})
                .boxed();
            let mut response = Response::new(body);
            *response.status_mut() = StatusCode::BAD_GATEWAY;
            response
        }
    }
}
