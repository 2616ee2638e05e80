//! Edge to edge: one QUIC endpoint per edge (ALPN `calvin-peer/1`, mutual
//! TLS with the cluster's CA) that accepts other edges' connections and
//! dials theirs.
//!
//! A visitor's request that lands on an edge without the preview's agent
//! goes to the edge that has it as one more hop of the agents' stream
//! protocol: the edge opens a stream to its peer and writes the same
//! [`StreamHeader`] it would write to an agent; the peer opens a stream to
//! its agent, passes the header on and then moves bytes both ways (see
//! [`crate::upstream::Upstream::relay`]). So the first edge's pool, its
//! limits, its error pages, upgrades and aborts work as with an agent of
//! its own.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use calvin_proto::io::{read_frame, write_frame};
use calvin_proto::{StreamAnswer, StreamHeader, StreamRefusal};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use tokio::sync::watch;
use tracing::{Instrument, debug, info_span, warn};

use crate::certs::tls::{TlsError, TlsMaterial, provider};
use crate::upstream::route_table::Lookup;
use crate::upstream::tunnel::AgentHub;

/// The ALPN of the edge-to-edge protocol.
pub const ALPN: &[u8] = b"calvin-peer/1";

/// Streams one edge may have open to another at once: one per pooled or
/// in-flight upstream connection of the previews the other edge holds.
const PEER_STREAMS: u32 = 4_096;

/// Time for a peer's stream to say which preview it is for.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Time to dial another edge.
pub const DIAL_TIMEOUT: Duration = Duration::from_secs(3);

/// The cluster's TLS: this edge's certificate and the CA that signed
/// every edge's.
pub struct PeerTls {
    pub material: TlsMaterial,
    pub ca: Vec<CertificateDer<'static>>,
}

impl PeerTls {
    pub fn load(ca_file: &Path, cert: &Path, key: &Path) -> Result<Self, TlsError> {
        let material = TlsMaterial::from_pem_files(cert, key)?;
        let ca = CertificateDer::pem_file_iter(ca_file)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .map_err(|source| TlsError::Certs {
                path: ca_file.display().to_string(),
                source,
            })?;
        if ca.is_empty() {
            return Err(TlsError::NoCerts(ca_file.display().to_string()));
        }
        Ok(Self { material, ca })
    }

    fn roots(&self) -> Result<Arc<rustls::RootCertStore>, TlsError> {
        let mut roots = rustls::RootCertStore::empty();
        for cert in &self.ca {
            roots.add(cert.clone())?;
        }
        Ok(Arc::new(roots))
    }
}

/// The edge's peer endpoint, bound on `addr`: accepts edges whose
/// certificate the cluster CA signed, and dials others with its own.
pub fn endpoint(addr: SocketAddr, tls: &PeerTls) -> Result<quinn::Endpoint, PeerError> {
    let (server, client) = configs(tls)?;
    let loopback = crate::certs::tls::is_loopback(addr);
    let mut transport = calvin_common::quic::transport_config(PEER_STREAMS, loopback);
    // Both sides keep the connection alive: either may have requests to
    // send on it.
    transport.keep_alive_interval(Some(calvin_proto::KEEP_ALIVE_INTERVAL));
    let transport = Arc::new(transport);

    let server = quinn::crypto::rustls::QuicServerConfig::try_from(server)
        .map_err(|e| PeerError::Tls(TlsError::Quic(e.to_string())))?;
    let mut server = quinn::ServerConfig::with_crypto(Arc::new(server));
    server.transport_config(transport.clone());
    let client = quinn::crypto::rustls::QuicClientConfig::try_from(client)
        .map_err(|e| PeerError::Tls(TlsError::Quic(e.to_string())))?;
    let mut client = quinn::ClientConfig::new(Arc::new(client));
    client.transport_config(transport);

    let socket = calvin_common::quic::udp_socket(addr).map_err(PeerError::Io)?;
    let config = crate::certs::tls::endpoint_config(quinn::EndpointConfig::default());
    let mut endpoint =
        quinn::Endpoint::new(config, Some(server), socket, Arc::new(quinn::TokioRuntime))
            .map_err(PeerError::Io)?;
    endpoint.set_default_client_config(client);
    Ok(endpoint)
}

/// The TLS both sides of an edge-to-edge connection use: this edge's
/// certificate, and only certificates the cluster CA signed on the other
/// side. `check-config` builds them too: a certificate that is not the
/// key's, or a CA file that is no certificate, is found before a start.
pub fn configs(tls: &PeerTls) -> Result<(rustls::ServerConfig, rustls::ClientConfig), PeerError> {
    let roots = tls.roots()?;
    let verifier =
        rustls::server::WebPkiClientVerifier::builder_with_provider(roots.clone(), provider())
            .build()
            .map_err(|e| PeerError::Tls(TlsError::Parse(e.to_string())))?;
    let mut server = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(TlsError::from)?
        .with_client_cert_verifier(verifier)
        .with_single_cert(tls.material.certs.clone(), tls.material.key.clone_key())
        .map_err(TlsError::from)?;
    server.alpn_protocols = vec![ALPN.to_vec()];
    let mut client = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(TlsError::from)?
        .with_root_certificates(roots)
        .with_client_auth_cert(tls.material.certs.clone(), tls.material.key.clone_key())
        .map_err(TlsError::from)?;
    client.alpn_protocols = vec![ALPN.to_vec()];
    Ok((server, client))
}

#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("{0}")]
    Io(std::io::Error),
}

/// Dials the edge at `advertise` (`host:port`); its certificate must name
/// `host` and chain to the cluster CA.
pub async fn dial(
    endpoint: &quinn::Endpoint,
    advertise: &str,
) -> Result<quinn::Connection, String> {
    let host = advertise
        .rsplit_once(':')
        .map(|(host, _)| host.trim_start_matches('[').trim_end_matches(']'))
        .ok_or_else(|| format!("{advertise} is not host:port"))?;
    let addr = tokio::time::timeout(DIAL_TIMEOUT, tokio::net::lookup_host(advertise))
        .await
        .map_err(|_| format!("resolving {advertise}: no answer in time"))?
        .map_err(|e| format!("resolving {advertise}: {e}"))?
        .next()
        .ok_or_else(|| format!("{advertise} resolves to no address"))?;
    let connecting = endpoint
        .connect(addr, host)
        .map_err(|e| format!("dialling {advertise}: {e}"))?;
    match tokio::time::timeout(DIAL_TIMEOUT, connecting).await {
        Ok(Ok(conn)) => Ok(conn),
        Ok(Err(err)) => Err(format!("dialling {advertise}: {err}")),
        Err(_) => Err(format!(
            "dialling {advertise}: no handshake within {} s",
            DIAL_TIMEOUT.as_secs()
        )),
    }
}

/// Accepts other edges' connections until `stop`, and relays each stream
/// they open to the agent that serves its preview here.
pub(crate) async fn accept(
    endpoint: quinn::Endpoint,
    hub: Arc<AgentHub>,
    stop: watch::Receiver<bool>,
) {
    crate::upstream::tunnel::accept_until(&endpoint, stop, |incoming| {
        let span = info_span!("peer", remote = %incoming.remote_address());
        let hub = hub.clone();
        tokio::spawn(
            async move {
                let conn = match incoming.await {
                    Ok(conn) => conn,
                    Err(err) => {
                        hub.counts
                            .handshake_failed(crate::counts::HandshakeFailure::QuicError);
                        return warn!(%err, "an edge's handshake failed");
                    }
                };
                debug!("edge connected");
                while let Ok((send, recv)) = conn.accept_bi().await {
                    tokio::spawn(relay(hub.clone(), send, recv));
                }
                debug!("edge disconnected");
            }
            .instrument(span),
        );
    })
    .await;
}

/// One stream from another edge: its header, then the agent's stream.
async fn relay(hub: Arc<AgentHub>, mut send: quinn::SendStream, mut recv: quinn::RecvStream) {
    let header = match tokio::time::timeout(
        HEADER_TIMEOUT,
        read_frame::<StreamHeader, _>(&mut recv),
    )
    .await
    {
        Ok(Ok(Some(header))) => header,
        _ => {
            let _ = send.reset(0u32.into());
            return;
        }
    };
    match hub.routes.lookup(&header.name) {
        Lookup::Live(upstream) if !upstream.is_peer() && !upstream.agent_gone() => {
            upstream.relay(header, send, recv).await;
        }
        _ => {
            // The agent left this edge (or never was here): the other
            // edge waits for the name's next route, as for an agent that
            // went offline.
            let answer = StreamAnswer::Refused {
                reason: StreamRefusal::Offline,
                message: format!("no agent serves {} on this edge now", header.name),
            };
            if write_frame(&mut send, &answer).await.is_ok() {
                let _ = send.finish();
            }
        }
    }
}
