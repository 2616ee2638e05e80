//! A visitor speaking raw bytes, for what curl will not send.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use crate::tls_client_config;

/// What a raw exchange got back: everything the edge sent, and whether it
/// closed the connection (within 2 s of its last byte).
pub struct Exchange {
    pub text: String,
    pub closed: bool,
}

impl Exchange {
    /// The status of every response in it, in order.
    pub fn statuses(&self) -> Vec<u16> {
        self.text
            .match_indices("HTTP/1.1 ")
            .filter_map(|(at, _)| self.text.get(at + 9..at + 12)?.parse().ok())
            .collect()
    }
}

/// Reads until the peer closes or is quiet for 2 s.
pub async fn read_all<S: AsyncRead + Unpin>(stream: &mut S) -> Exchange {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let closed = loop {
        match tokio::time::timeout(Duration::from_secs(2), stream.read(&mut buf)).await {
            Err(_) => break false,
            Ok(Ok(0) | Err(_)) => break true,
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
        }
    };
    Exchange {
        text: String::from_utf8_lossy(&out).into_owned(),
        closed,
    }
}

/// Sends `bytes` on a new plain connection and reads what comes back.
pub async fn exchange(addr: SocketAddr, bytes: &[u8]) -> Exchange {
    let mut tcp = TcpStream::connect(addr).await.expect("tcp");
    tcp.write_all(bytes).await.expect("write");
    read_all(&mut tcp).await
}

/// A TLS connection to `addr` for `host` (the server name sent), offering
/// HTTP/1.1 only.
pub async fn tls_h1(addr: SocketAddr, ca: &Path, host: &str) -> TlsStream<TcpStream> {
    tls_to(addr, ca, host, &[b"http/1.1"]).await
}

/// A TLS connection to `addr` for `host` (the server name sent), offering
/// the `alpn` protocols.
pub async fn tls_to(
    addr: SocketAddr,
    ca: &Path,
    host: &str,
    alpn: &[&[u8]],
) -> TlsStream<TcpStream> {
    let tcp = TcpStream::connect(addr).await.expect("tcp");
    let config = tls_client_config(ca, alpn);
    let name = rustls_pki_types::ServerName::try_from(host.to_owned()).expect("name");
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .expect("tls")
}

/// An HTTP/1.1 client over plain TCP to `addr` (one keep-alive
/// connection), its connection driven in the background.
pub async fn h1_client<B>(
    addr: impl tokio::net::ToSocketAddrs,
) -> hyper::client::conn::http1::SendRequest<B>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let tcp = TcpStream::connect(addr).await.expect("tcp");
    let (sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
        .await
        .expect("h1 handshake");
    tokio::spawn(conn);
    sender
}

/// An HTTP/2 client over TLS to `addr` for `host`, its connection driven
/// in the background.
pub async fn h2_client<B>(
    addr: SocketAddr,
    ca: &Path,
    host: &str,
) -> hyper::client::conn::http2::SendRequest<B>
where
    B: hyper::body::Body + Unpin + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let tls = tls_to(addr, ca, host, &[b"h2"]).await;
    let (sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tls),
    )
    .await
    .expect("h2 handshake");
    tokio::spawn(conn);
    sender
}
