//! TLS material and the rustls / quinn configurations built from it.

use std::path::Path;
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use calvin_common::quic::{AGENT_STREAMS, transport_config};
pub use calvin_common::quic::{endpoint_config, is_loopback, provider};
use rustls::server::ResolvesServerCert;

/// A certificate chain and its private key.
pub struct TlsMaterial {
    pub certs: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read certificates from {path}: {source}")]
    Certs {
        path: String,
        source: rustls_pki_types::pem::Error,
    },
    #[error("{0} holds no certificate")]
    NoCerts(String),
    #[error("cannot read a private key from {path}: {source}")]
    Key {
        path: String,
        source: rustls_pki_types::pem::Error,
    },
    #[error("the certificate and key do not make a TLS configuration: {0}")]
    Config(#[from] rustls::Error),
    #[error("QUIC cannot use this TLS configuration: {0}")]
    Quic(String),
    #[error("{0}")]
    Parse(String),
    #[error("the certificate chain is empty")]
    Empty,
}

impl Clone for TlsMaterial {
    fn clone(&self) -> Self {
        Self {
            certs: self.certs.clone(),
            key: self.key.clone_key(),
        }
    }
}

impl TlsMaterial {
    /// Reads a PEM chain (leaf first) and a PEM private key.
    pub fn from_pem_files(cert_file: &Path, key_file: &Path) -> Result<Self, TlsError> {
        let certs = CertificateDer::pem_file_iter(cert_file)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .map_err(|source| TlsError::Certs {
                path: cert_file.display().to_string(),
                source,
            })?;
        if certs.is_empty() {
            return Err(TlsError::NoCerts(cert_file.display().to_string()));
        }
        let key = PrivateKeyDer::from_pem_file(key_file).map_err(|source| TlsError::Key {
            path: key_file.display().to_string(),
            source,
        })?;
        Ok(Self { certs, key })
    }
}

/// The HTTPS listener's configuration: HTTP/2 and HTTP/1.1 by ALPN, the
/// certificate from `certs` (the edge's [`crate::certs::cert_store`]) at
/// each handshake.
pub fn https_config(certs: Arc<dyn ResolvesServerCert>) -> Result<rustls::ServerConfig, TlsError> {
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(certs);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// The QUIC listener's configuration for agents (ALPN `calvin/1`) and,
/// when `http3`, HTTP/3 visitors (ALPN `h3`, see [`crate::front::http3`]); the
/// same certificate as HTTPS; `loopback` for peers on this machine.
pub fn quic_config(
    certs: Arc<dyn ResolvesServerCert>,
    loopback: bool,
    http3: bool,
) -> Result<quinn::ServerConfig, TlsError> {
    let mut crypto = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_no_client_auth()
        .with_cert_resolver(certs);
    crypto.alpn_protocols = vec![calvin_proto::ALPN.to_vec()];
    if http3 {
        crypto.alpn_protocols.push(H3_ALPN.to_vec());
    }
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(crypto)
        .map_err(|e| TlsError::Quic(e.to_string()))?;
    let mut config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    let mut transport = transport_config(AGENT_STREAMS, loopback);
    // The agents' pings keep each path alive and both idle timers reset;
    // the edge answers them and sends none of its own, which halves the
    // packets an idle agent costs it. A silent agent still ends at the
    // idle timeout. (An HTTP/3 connection is kept alive by the edge only
    // while it has requests under way, see `http3`.)
    transport.keep_alive_interval(None);
    if http3 {
        // RFC 9114 6.2: a client must be able to open its control stream
        // (and QPACK's two) without waiting. An agent is allowed none
        // after its handshake (`tunnel`).
        transport.max_concurrent_uni_streams(UNI_STREAMS.into());
    }
    config.transport_config(Arc::new(transport));
    Ok(config)
}

/// The ALPN of HTTP/3.
pub const H3_ALPN: &[u8] = b"h3";

/// Uni streams the endpoint allows every connection at its handshake: an
/// HTTP/3 client's control stream and its QPACK encoder and decoder
/// streams. An agent opens none (it is allowed no more, see
/// [`crate::upstream::tunnel`]).
pub const UNI_STREAMS: u32 = 3;

/// Whether a QUIC connection's handshake chose HTTP/3.
pub(crate) fn is_h3(conn: &quinn::Connection) -> bool {
    conn.handshake_data()
        .and_then(|data| data.downcast::<quinn::crypto::rustls::HandshakeData>().ok())
        .and_then(|data| data.protocol)
        .is_some_and(|alpn| alpn == H3_ALPN)
}
