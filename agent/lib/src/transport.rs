//! Dialling the edge: address, trust, and the QUIC client configuration.

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};

const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error("{0:?} is not HOST:PORT")]
    Address(String),
    #[error("cannot resolve {host}: {source}")]
    Resolve {
        host: String,
        source: std::io::Error,
    },
    #[error("cannot read the CA file {path}: {why}")]
    Ca { path: String, why: String },
    #[error("no trusted root certificates: pass --ca PEM")]
    NoRoots,
    #[error("{0:?} is not a valid TLS server name")]
    ServerName(String),
    #[error("TLS setup: {0}")]
    Tls(String),
    #[error("cannot open a UDP socket: {0}")]
    Socket(std::io::Error),
    #[error("{0}")]
    Connect(String),
    #[error("the QUIC handshake did not finish within {} s", HANDSHAKE_TIMEOUT.as_secs())]
    HandshakeTimeout,
}

/// The edge an agent dials: `HOST:PORT`, the name its certificate must
/// carry, and the roots it is checked against.
#[derive(Clone)]
pub struct EdgeAddress {
    host: String,
    port: u16,
    config: quinn::ClientConfig,
    server_name: String,
}

impl fmt::Display for EdgeAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

impl EdgeAddress {
    /// `edge` is `HOST:PORT`; `ca`, when given, is the only root trusted
    /// (else the system's roots); `server_name` defaults to HOST.
    pub fn new(
        edge: &str,
        ca: Option<&Path>,
        server_name: Option<&str>,
    ) -> Result<Self, TransportError> {
        let (host, port) = split_host_port(edge)?;
        let server_name = server_name.unwrap_or(&host).to_owned();
        ServerName::try_from(server_name.clone())
            .map_err(|_| TransportError::ServerName(server_name.clone()))?;
        let roots = match ca {
            Some(path) => ca_roots(path)?,
            None => system_roots()?,
        };
        Ok(Self {
            host,
            port,
            config: client_config(roots)?,
            server_name,
        })
    }

    /// Resolves the address and completes a QUIC handshake.
    pub async fn connect(&self) -> Result<quinn::Connection, TransportError> {
        Ok(self.connect_on_endpoint().await?.1)
    }

    /// [`Self::connect`], with the endpoint the connection lives on (to
    /// wait on it when closing, so that the edge hears the close).
    pub async fn connect_on_endpoint(
        &self,
    ) -> Result<(quinn::Endpoint, quinn::Connection), TransportError> {
        let addr = tokio::net::lookup_host((self.host.as_str(), self.port))
            .await
            .map_err(|source| TransportError::Resolve {
                host: self.host.clone(),
                source,
            })?
            .next()
            .ok_or_else(|| TransportError::Resolve {
                host: self.host.clone(),
                source: std::io::Error::other("no addresses"),
            })?;
        let local: std::net::SocketAddr = if addr.is_ipv6() {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        } else {
            (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
        };
        let socket = calvin_common::quic::udp_socket(local).map_err(TransportError::Socket)?;
        let endpoint = quinn::Endpoint::new(
            calvin_common::quic::endpoint_config(quinn::EndpointConfig::default()),
            None,
            socket,
            Arc::new(quinn::TokioRuntime),
        )
        .map_err(TransportError::Socket)?;
        let mut config = self.config.clone();
        if calvin_common::quic::is_loopback(addr) {
            config.transport_config(Arc::new(calvin_common::quic::agent_transport_config(true)));
        }
        let connecting = endpoint
            .connect_with(config, addr, &self.server_name)
            .map_err(|e| TransportError::Connect(e.to_string()))?;
        match tokio::time::timeout(HANDSHAKE_TIMEOUT, connecting).await {
            Ok(Ok(conn)) => Ok((endpoint, conn)),
            Ok(Err(e)) => Err(TransportError::Connect(e.to_string())),
            Err(_) => Err(TransportError::HandshakeTimeout),
        }
    }
}

fn split_host_port(edge: &str) -> Result<(String, u16), TransportError> {
    let bad = || TransportError::Address(edge.to_owned());
    let (host, port) = edge.rsplit_once(':').ok_or_else(bad)?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if host.is_empty() {
        return Err(bad());
    }
    Ok((host.to_owned(), port.parse().map_err(|_| bad())?))
}

fn ca_roots(path: &Path) -> Result<RootCertStore, TransportError> {
    let err = |why: String| TransportError::Ca {
        path: path.display().to_string(),
        why,
    };
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(path).map_err(|e| err(e.to_string()))? {
        roots
            .add(cert.map_err(|e| err(e.to_string()))?)
            .map_err(|e| err(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(err("no certificate in it".into()));
    }
    Ok(roots)
}

fn system_roots() -> Result<RootCertStore, TransportError> {
    let mut roots = RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(cert);
    }
    if roots.is_empty() {
        return Err(TransportError::NoRoots);
    }
    Ok(roots)
}

fn client_config(roots: RootCertStore) -> Result<quinn::ClientConfig, TransportError> {
    let mut crypto = rustls::ClientConfig::builder_with_provider(calvin_common::quic::provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| TransportError::Tls(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    crypto.alpn_protocols = vec![calvin_proto::ALPN.to_vec()];
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(crypto)
        .map_err(|e| TransportError::Tls(e.to_string()))?;
    let mut config = quinn::ClientConfig::new(Arc::new(crypto));
    config.transport_config(Arc::new(calvin_common::quic::agent_transport_config(false)));
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_port_forms() {
        assert_eq!(
            split_host_port("127.0.0.1:4443").unwrap(),
            ("127.0.0.1".into(), 4443)
        );
        assert_eq!(split_host_port("[::1]:443").unwrap(), ("::1".into(), 443));
        assert_eq!(
            split_host_port("edge.example.com:443").unwrap(),
            ("edge.example.com".into(), 443)
        );
        assert!(split_host_port("edge.example.com").is_err());
        assert!(split_host_port(":443").is_err());
        assert!(split_host_port("h:99999").is_err());
    }
}
