//! The visitors' side: HTTPS (HTTP/2 and HTTP/1.1 by ALPN) and plain HTTP
//! listeners, both serving the same routing.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;
use tracing::{debug, warn};

use crate::proxy::{Proxy, Scheme};

/// How long a visitor has to finish the TLS handshake.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

pub(crate) struct HttpServer {
    pub proxy: Arc<Proxy>,
    pub builder: auto::Builder<TokioExecutor>,
}

impl HttpServer {
    pub fn new(proxy: Arc<Proxy>, header_read_timeout: Duration) -> Self {
        let mut builder = auto::Builder::new(TokioExecutor::new());
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(header_read_timeout);
        builder.http2().timer(TokioTimer::new());
        Self { proxy, builder }
    }

    /// Accepts visitors until `stop` turns true; each connection is watched
    /// by `graceful` so a shutdown lets its requests finish.
    pub async fn accept(
        self: Arc<Self>,
        listener: TcpListener,
        tls: Option<TlsAcceptor>,
        graceful: Arc<GracefulShutdown>,
        mut stop: watch::Receiver<bool>,
    ) {
        loop {
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                _ = stop.wait_for(|s| *s) => return,
            };
            let (stream, peer) = match accepted {
                Ok(pair) => pair,
                Err(err) => {
                    // Out of file descriptors, most likely: wait instead of spinning.
                    warn!(%err, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let server = self.clone();
            let watcher = graceful.watcher();
            match tls.clone() {
                None => {
                    tokio::spawn(server.serve(stream, peer, Scheme::Http, watcher));
                }
                Some(acceptor) => {
                    tokio::spawn(async move {
                        match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream))
                            .await
                        {
                            Ok(Ok(stream)) => {
                                server.serve(stream, peer, Scheme::Https, watcher).await;
                            }
                            Ok(Err(err)) => debug!(%peer, %err, "TLS handshake failed"),
                            Err(_) => debug!(%peer, "TLS handshake timed out"),
                        }
                    });
                }
            }
        }
    }

    async fn serve<S>(
        self: Arc<Self>,
        stream: S,
        peer: SocketAddr,
        scheme: Scheme,
        watcher: hyper_util::server::graceful::Watcher,
    ) where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let proxy = self.proxy.clone();
        let service = service_fn(move |req| {
            let proxy = proxy.clone();
            async move { Ok::<_, Infallible>(proxy.handle(req, peer, scheme).await) }
        });
        let conn = self
            .builder
            .serve_connection_with_upgrades(TokioIo::new(stream), service);
        if let Err(err) = watcher.watch(conn).await {
            debug!(%peer, %err, "visitor connection ended");
        }
    }
}
