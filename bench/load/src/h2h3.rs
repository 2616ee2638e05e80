//! HTTP/2 and HTTP/3 connections to one `https` URL, for [`crate::load`]:
//! HTTP/2 is hyper's client over tokio-rustls (ALPN `h2`), HTTP/3 the `h3`
//! crate's client over quinn (ALPN `h3`). Either dials `--connect` (or the
//! URL's host) and sends the URL's host as TLS server name and
//! `:authority`, so a tunnel's edge routes by it.
//!
//! A [`Conn`] is cheap to clone; clones share the connection, each request
//! its own stream.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use anyhow::{Context as _, bail};
use bytes::{Buf, Bytes};
use http::{Method, Request, StatusCode, Uri};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, SizeHint};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls_pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::target::client_config;

/// The receive windows both protocols' clients offer, per stream and per
/// connection (the same for both, so neither waits for window updates
/// where the other does not).
const STREAM_WINDOW: u32 = 8 << 20;
const CONNECTION_WINDOW: u32 = 32 << 20;
/// HTTP/3's code for a connection closed with no error (RFC 9114 8.1).
const H3_NO_ERROR: u32 = 0x100;
/// How long closing an HTTP/3 connection waits for it to drain.
const CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);
/// An upload is sent in slices of this size.
const UPLOAD_CHUNK: usize = 64 << 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Protocol {
    H2,
    H3,
}

/// `--url`, `--connect`, `--cacert`: where and how to reach the server.
#[derive(Debug, Clone, clap::Args)]
pub struct EndpointArgs {
    /// HTTP/2 or HTTP/3 over TLS
    #[arg(long, value_enum)]
    pub protocol: Protocol,
    /// https:// URL; its host is the TLS server name and :authority
    #[arg(long)]
    pub url: String,
    /// Address to dial instead of the URL's host (a TCP port for h2, the
    /// UDP port of the QUIC endpoint for h3)
    #[arg(long, value_name = "ADDR:PORT")]
    pub connect: Option<SocketAddr>,
    /// PEM file of the CA the server's certificate must chain to
    #[arg(long, visible_alias = "ca", value_name = "PEM")]
    pub cacert: Option<PathBuf>,
    /// Accept any certificate
    #[arg(long, conflicts_with = "cacert")]
    pub insecure: bool,
}

/// What one request got: its status and how many body bytes came.
#[derive(Debug, Clone, Copy)]
pub struct Answer {
    pub status: StatusCode,
    pub body_bytes: u64,
    /// The response's content-length, when it had one.
    pub content_length: Option<u64>,
}

/// The server, resolved once: where to dial and how to greet it.
#[derive(Clone)]
pub struct Endpoint {
    protocol: Protocol,
    uri: Uri,
    addr: SocketAddr,
    host: String,
    server_name: ServerName<'static>,
    tls: Arc<rustls::ClientConfig>,
}

impl Endpoint {
    pub async fn new(args: &EndpointArgs) -> anyhow::Result<Self> {
        let uri: Uri = args
            .url
            .parse()
            .with_context(|| format!("URL {}", args.url))?;
        if uri.scheme_str() != Some("https") {
            bail!("{}: h2 and h3 load needs an https:// URL", args.url);
        }
        let host = uri.host().context("the URL has no host")?;
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let port = uri.port_u16().unwrap_or(443);
        let addr = match args.connect {
            Some(addr) => addr,
            None => tokio::net::lookup_host((host.as_str(), port))
                .await?
                .next()
                .with_context(|| format!("{host}: no address"))?,
        };
        let server_name = ServerName::try_from(host.clone())
            .with_context(|| format!("TLS server name {host:?}"))?;
        let alpn: &[u8] = match args.protocol {
            Protocol::H2 => b"h2",
            Protocol::H3 => b"h3",
        };
        let tls = client_config(args.cacert.as_deref(), args.insecure, &[alpn])?;
        Ok(Self {
            protocol: args.protocol,
            uri,
            addr,
            host,
            server_name,
            tls: Arc::new(tls),
        })
    }

    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// A new connection, its handshakes done.
    pub async fn connect(&self) -> anyhow::Result<Conn> {
        match self.protocol {
            Protocol::H2 => self.connect_h2().await,
            Protocol::H3 => self.connect_h3().await,
        }
    }

    async fn connect_h2(&self) -> anyhow::Result<Conn> {
        let tcp = TcpStream::connect(self.addr)
            .await
            .with_context(|| format!("connect {}", self.addr))?;
        tcp.set_nodelay(true)?;
        let tls = TlsConnector::from(self.tls.clone())
            .connect(self.server_name.clone(), tcp)
            .await
            .context("TLS handshake")?;
        if tls.get_ref().1.alpn_protocol() != Some(b"h2") {
            bail!("{}: the server did not agree to h2 (ALPN)", self.addr);
        }
        let (sender, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .initial_stream_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .handshake(TokioIo::new(tls))
            .await
            .context("HTTP/2 handshake")?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(Conn::H2(sender))
    }

    async fn connect_h3(&self) -> anyhow::Result<Conn> {
        let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(self.tls.clone())
            .context("TLS config for QUIC")?;
        let mut transport = quinn::TransportConfig::default();
        transport
            .stream_receive_window(STREAM_WINDOW.into())
            .receive_window(CONNECTION_WINDOW.into());
        let mut config = quinn::ClientConfig::new(Arc::new(crypto));
        config.transport_config(Arc::new(transport));
        // An endpoint (a UDP socket) per connection, as each visitor has.
        let local: SocketAddr = if self.addr.is_ipv4() {
            (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let endpoint = quinn::Endpoint::client(local)?;
        let quic = endpoint
            .connect_with(config, self.addr, &self.host)?
            .await
            .with_context(|| format!("QUIC handshake with {}", self.addr))?;
        let (mut driver, sender) = h3::client::new(h3_quinn::Connection::new(quic))
            .await
            .context("HTTP/3 handshake")?;
        tokio::spawn(async move {
            let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
        });
        Ok(Conn::H3(sender, endpoint))
    }
}

type H2Sender = hyper::client::conn::http2::SendRequest<Upload>;
type H3Sender = h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>;

/// One connection; a clone opens its requests on the same one.
#[derive(Clone)]
pub enum Conn {
    H2(H2Sender),
    /// The endpoint is kept as long as the connection is.
    H3(H3Sender, quinn::Endpoint),
}

impl Conn {
    /// A GET of the URL (`upload` 0) or a POST of `upload` bytes to it;
    /// the whole response read and counted. `None` when the connection had
    /// closed before the request left (the server's GOAWAY after as many
    /// requests as it serves on one, or its idle close): dial again.
    pub async fn request(
        &mut self,
        endpoint: &Endpoint,
        upload: u64,
    ) -> anyhow::Result<Option<Answer>> {
        let method = if upload > 0 {
            Method::POST
        } else {
            Method::GET
        };
        let mut head = Request::builder().method(method).uri(endpoint.uri.clone());
        if upload > 0 {
            head = head
                .header(http::header::CONTENT_LENGTH, upload)
                .header(http::header::CONTENT_TYPE, "application/octet-stream");
        }
        match self {
            Conn::H2(sender) => {
                if sender.ready().await.is_err() {
                    return Ok(None);
                }
                let response = match sender
                    .try_send_request(head.body(Upload::new(upload))?)
                    .await
                {
                    Ok(response) => response,
                    Err(err) if err.message().is_some() => return Ok(None),
                    Err(err) => return Err(err.into_error()).context("HTTP/2 request"),
                };
                let (status, content_length) = head_of(&response);
                let mut body = response.into_body();
                let mut body_bytes = 0;
                while let Some(frame) = body.frame().await {
                    if let Ok(data) = frame.context("HTTP/2 response body")?.into_data() {
                        body_bytes += data.len() as u64;
                    }
                }
                Ok(Some(Answer {
                    status,
                    body_bytes,
                    content_length,
                }))
            }
            Conn::H3(sender, _) => {
                // It fails before the stream opens when the connection is
                // closing.
                let Ok(mut stream) = sender.send_request(head.body(())?).await else {
                    return Ok(None);
                };
                let mut left = upload;
                while left > 0 {
                    let n = left.min(UPLOAD_CHUNK as u64) as usize;
                    stream
                        .send_data(upload_bytes().slice(..n))
                        .await
                        .context("HTTP/3 request body")?;
                    left -= n as u64;
                }
                stream.finish().await.context("HTTP/3 request end")?;
                let response = stream.recv_response().await.context("HTTP/3 response")?;
                let (status, content_length) = head_of(&response);
                let mut body_bytes = 0;
                while let Some(mut chunk) =
                    stream.recv_data().await.context("HTTP/3 response body")?
                {
                    body_bytes += chunk.remaining() as u64;
                    chunk.advance(chunk.remaining());
                }
                Ok(Some(Answer {
                    status,
                    body_bytes,
                    content_length,
                }))
            }
        }
    }
}

impl Conn {
    /// Closes the connection and waits (a moment at most) until the server
    /// was told, so a closed-loop run leaves no connection behind on it to
    /// time out during the next.
    pub async fn close(self) {
        match self {
            // Its connection ends when its last sender is dropped.
            Conn::H2(sender) => drop(sender),
            Conn::H3(sender, endpoint) => {
                drop(sender);
                endpoint.close(H3_NO_ERROR.into(), b"");
                let _ = tokio::time::timeout(CLOSE_WAIT, endpoint.wait_idle()).await;
            }
        }
    }
}

fn head_of<T>(response: &http::Response<T>) -> (StatusCode, Option<u64>) {
    let length = response
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    (response.status(), length)
}

/// The bytes every upload is cut from (zeros: nothing on the way looks at
/// them, and none compresses them).
fn upload_bytes() -> Bytes {
    static CHUNK: std::sync::OnceLock<Bytes> = std::sync::OnceLock::new();
    CHUNK
        .get_or_init(|| Bytes::from(vec![0u8; UPLOAD_CHUNK]))
        .clone()
}

/// An HTTP/2 request body of `left` bytes, in slices of one shared buffer.
pub struct Upload {
    left: u64,
}

impl Upload {
    fn new(left: u64) -> Self {
        Self { left }
    }
}

impl Body for Upload {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if self.left == 0 {
            return Poll::Ready(None);
        }
        let n = self.left.min(UPLOAD_CHUNK as u64) as usize;
        self.left -= n as u64;
        Poll::Ready(Some(Ok(Frame::data(upload_bytes().slice(..n)))))
    }

    fn is_end_stream(&self) -> bool {
        self.left == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.left)
    }
}
