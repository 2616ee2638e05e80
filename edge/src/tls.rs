//! TLS material and the rustls / quinn configurations built from it.

use std::path::Path;
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::cert_store::CertStore;

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

/// The one crypto provider in the tree (see DEPENDENCIES.md).
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The HTTPS listener's configuration: HTTP/2 and HTTP/1.1 by ALPN, the
/// certificate from `certs` at each handshake.
pub fn https_config(certs: Arc<CertStore>) -> Result<rustls::ServerConfig, TlsError> {
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(certs);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// Bidi streams an agent may open towards the edge: the control stream and
/// spare. Stream slots cost memory on every idle connection.
const AGENT_STREAMS: u32 = 4;

/// The QUIC transport both sides use: the protocol's keep-alive and idle
/// timeout, `bidi_streams` streams the peer may open, no uni streams.
///
/// On a `loopback` path (agent and edge on one machine) packets start and
/// stay at 9,000 bytes and may grow to the loopback MTU, without GSO: the
/// default path settles at 1,452-byte packets, six times the packets, and
/// their per-packet cost (encryption, syscalls, wake-ups) capped a 1 GiB
/// download at 0.6x of rathole (see DEPENDENCIES.md). Never on another
/// path: the floor would break a path narrower than 9,000 bytes.
pub fn transport_config(bidi_streams: u32, loopback: bool) -> quinn::TransportConfig {
    let mut transport = quinn::TransportConfig::default();
    transport
        .keep_alive_interval(Some(calvin_proto::KEEP_ALIVE_INTERVAL))
        .max_idle_timeout(quinn::IdleTimeout::try_from(calvin_proto::IDLE_TIMEOUT).ok())
        .max_concurrent_bidi_streams(bidi_streams.into())
        .max_concurrent_uni_streams(0u32.into());
    if loopback {
        let mut mtu = quinn::MtuDiscoveryConfig::default();
        mtu.upper_bound(LOOPBACK_MAX_MTU);
        transport
            .initial_mtu(LOOPBACK_MTU)
            .min_mtu(LOOPBACK_MTU)
            .mtu_discovery_config(Some(mtu))
            .send_window(LOOPBACK_SEND_WINDOW)
            // Ten 9,000-byte segments overflow one UDP send.
            .enable_segmentation_offload(false);
    }
    transport
}

/// The agent's QUIC transport: [`transport_config`] with the edge allowed
/// its data streams, and the edge asked (QUIC's ACK frequency extension,
/// which quinn supports on both sides) to acknowledge each packet that
/// needs it at once. An idle agent's keep-alive then costs the edge one
/// wake-up, the ping and its ACK together, instead of two: the ping, then
/// its 25 ms ACK-delay timer. With 10,000 idle agents that took the edge
/// from 6.1% to 4.3% of a core. Under load quinn acknowledges a whole batch
/// of received packets with one ACK, and requests/s and transfers measured
/// the same in an A/B run.
pub fn agent_transport_config(loopback: bool) -> quinn::TransportConfig {
    let mut transport = transport_config(calvin_proto::MAX_DATA_STREAMS, loopback);
    let mut ack = quinn::AckFrequencyConfig::default();
    ack.ack_eliciting_threshold(0u32.into());
    transport.ack_frequency_config(Some(ack));
    transport
}

/// QUIC packet sizes on loopback: the floor and start, and the most MTU
/// discovery tries (UDP's largest payload over IPv4).
const LOOPBACK_MTU: u16 = 9_000;
const LOOPBACK_MAX_MTU: u16 = MAX_UDP_PAYLOAD;

/// Bytes a loopback sender keeps unacknowledged over all its streams. A
/// receiver that falls behind holds them in its UDP buffer, which the
/// kernel caps (`net.core.rmem_max`, 4 MiB here) and charges with each
/// packet's overhead; quinn's default (10 MB) overflowed it with 8 streams
/// and every drop was taken for congestion.
const LOOPBACK_SEND_WINDOW: u64 = 2 << 20;

/// The largest UDP payload an endpoint takes in (quinn's default is 1,472,
/// which a peer honours, so jumbo packets need it raised on both sides).
/// Only what this side accepts: a sender still probes its path's MTU.
pub const MAX_UDP_PAYLOAD: u16 = 65_527;

/// An endpoint configuration that accepts packets up to [`MAX_UDP_PAYLOAD`].
pub fn endpoint_config(mut config: quinn::EndpointConfig) -> quinn::EndpointConfig {
    config
        .max_udp_payload_size(MAX_UDP_PAYLOAD)
        .expect("65,527 is within QUIC's bounds");
    config
}

/// Whether `addr` is this machine (including IPv4-mapped loopback).
pub fn is_loopback(addr: std::net::SocketAddr) -> bool {
    addr.ip().to_canonical().is_loopback()
}

/// The QUIC listener's configuration for agents (ALPN `calvin/1`), the
/// same certificate as HTTPS; `loopback` for agents on this machine.
pub fn quic_config(certs: Arc<CertStore>, loopback: bool) -> Result<quinn::ServerConfig, TlsError> {
    let mut crypto = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_no_client_auth()
        .with_cert_resolver(certs);
    crypto.alpn_protocols = vec![calvin_proto::ALPN.to_vec()];
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(crypto)
        .map_err(|e| TlsError::Quic(e.to_string()))?;
    let mut config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    let mut transport = transport_config(AGENT_STREAMS, loopback);
    // The agents' pings keep each path alive and both idle timers reset;
    // the edge answers them and sends none of its own, which halves the
    // packets an idle agent costs it. A silent agent still ends at the
    // idle timeout.
    transport.keep_alive_interval(None);
    config.transport_config(Arc::new(transport));
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_addresses_include_mapped_ipv4() {
        let is = |s: &str| is_loopback(s.parse().unwrap());
        assert!(is("127.0.0.1:4443"));
        assert!(is("127.3.2.1:4443"));
        assert!(is("[::1]:4443"));
        assert!(is("[::ffff:127.0.0.1]:4443"));
        assert!(!is("10.0.0.1:4443"));
        assert!(!is("[::ffff:10.0.0.1]:4443"));
        assert!(!is("[2001:db8::1]:4443"));
    }
}
