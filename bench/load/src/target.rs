//! An HTTP/1.1 target: the address to dial, TLS (SNI = the Host name) or
//! not, and the Host header that routes the request at a tunnel's edge.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use bytes::Bytes;
use http::{Request, Uri};
use http_body_util::Empty;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// Where requests go: `--url` (dialled), `--host` (sent), and the trust for
/// an `https` URL.
#[derive(Debug, Clone, clap::Args)]
pub struct TargetArgs {
    /// http:// or https:// URL with an IP address (or localhost) and a path
    #[arg(long)]
    pub url: String,
    /// Host header (and TLS server name) [default: the URL's authority]
    #[arg(long)]
    pub host: Option<String>,
    /// PEM file of the CA the HTTPS server's certificate must chain to
    #[arg(long, value_name = "PEM")]
    pub ca: Option<PathBuf>,
    /// Accept any HTTPS certificate
    #[arg(long, conflicts_with = "ca")]
    pub insecure: bool,
}

pub type Sender = SendRequest<Empty<Bytes>>;

#[derive(Clone)]
pub struct Target {
    addr: SocketAddr,
    tls: Option<TlsConnector>,
    host: String,
    path: String,
}

impl Target {
    pub fn new(args: &TargetArgs) -> anyhow::Result<Self> {
        let uri: Uri = args
            .url
            .parse()
            .with_context(|| format!("URL {}", args.url))?;
        let https = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => bail!("{}: the URL must start with http:// or https://", args.url),
        };
        let authority = uri.authority().context("the URL has no host")?;
        let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
        let ip_host = match authority.host() {
            "localhost" => "127.0.0.1",
            h => h.trim_start_matches('[').trim_end_matches(']'),
        };
        let addr = SocketAddr::new(
            ip_host
                .parse()
                .with_context(|| format!("{}: give an IP address", args.url))?,
            port,
        );
        let tls = if https {
            Some(TlsConnector::from(Arc::new(client_config(
                args.ca.as_deref(),
                args.insecure,
                &[b"http/1.1"],
            )?)))
        } else {
            None
        };
        let path = uri
            .path_and_query()
            .map_or("/".to_owned(), |p| p.as_str().to_owned());
        Ok(Self {
            addr,
            tls,
            host: args.host.clone().unwrap_or_else(|| authority.to_string()),
            path,
        })
    }

    /// The same target with another Host header (and TLS server name).
    pub fn with_host(&self, host: &str) -> Self {
        Self {
            host: host.to_owned(),
            ..self.clone()
        }
    }

    /// A fresh keep-alive connection, ready for requests.
    pub async fn connect(&self) -> anyhow::Result<Sender> {
        let tcp = TcpStream::connect(self.addr)
            .await
            .with_context(|| format!("connect {}", self.addr))?;
        tcp.set_nodelay(true)?;
        match &self.tls {
            None => handshake(tcp).await,
            Some(connector) => {
                let name = server_name(&self.host);
                let name = ServerName::try_from(name.to_owned())
                    .with_context(|| format!("TLS server name {name:?}"))?;
                let tls = connector
                    .connect(name, tcp)
                    .await
                    .context("TLS handshake")?;
                handshake(tls).await
            }
        }
    }

    /// A GET of the URL's path with the Host header.
    pub fn get(&self) -> Request<Empty<Bytes>> {
        let mut req = Request::new(Empty::new());
        *req.uri_mut() = self.path.parse().unwrap_or_default();
        if let Ok(host) = self.host.parse() {
            req.headers_mut().insert(http::header::HOST, host);
        }
        req
    }
}

/// The name in a Host header: without its port, and without the brackets
/// of an IPv6 address.
fn server_name(host: &str) -> &str {
    let bare = match host.rsplit_once(':') {
        Some((name, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    };
    bare.trim_start_matches('[').trim_end_matches(']')
}

async fn handshake<S>(io: S) -> anyhow::Result<Sender>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = http1::handshake(TokioIo::new(io))
        .await
        .context("HTTP/1.1 handshake")?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// TLS for a client offering `alpn`: trusting the CA in `ca`, or any
/// certificate when `insecure`.
pub fn client_config(
    ca: Option<&Path>,
    insecure: bool,
    alpn: &[&[u8]],
) -> anyhow::Result<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?;
    let mut config = if insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
            .with_no_client_auth()
    } else {
        let path = ca.context("an https URL needs --ca PEM or --insecure")?;
        builder
            .with_root_certificates(roots(path)?)
            .with_no_client_auth()
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}

pub fn roots(path: &Path) -> anyhow::Result<RootCertStore> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(path).with_context(|| path.display().to_string())? {
        roots.add(cert?)?;
    }
    if roots.is_empty() {
        bail!("{}: no certificate in it", path.display());
    }
    Ok(roots)
}

/// `--insecure`: any certificate, but signatures still checked.
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_name_drops_the_port() {
        assert_eq!(
            server_name("bench.preview.localhost:4443"),
            "bench.preview.localhost"
        );
        assert_eq!(
            server_name("bench.preview.localhost"),
            "bench.preview.localhost"
        );
        assert_eq!(server_name("[::1]:443"), "::1");
    }
}
