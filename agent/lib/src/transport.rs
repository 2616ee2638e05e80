//! Dialling the edge: address, trust, and the QUIC client configuration;
//! and, for an agent given several edges (or a name with several
//! addresses), [`EdgeRing`]: which address to dial next.
//!
//! - [`EdgeAddress`]: one `--edge HOST:PORT`, its server name and roots.
//! - [`EdgeTarget`]: one resolved address of an edge, as it is dialled.
//! - [`EdgeRing`]: every address of every edge, round robin.

use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};

/// How an address is dialled: the most its QUIC handshake may take, and
/// the keep-alive interval of the connection (see [`Timing::FAILOVER`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    pub handshake: Duration,
    pub keep_alive: Duration,
}

impl Timing {
    /// With no other edge to go to: patient, and a keep-alive only as
    /// often as QUIC's idle timeout needs.
    pub const ALONE: Timing = Timing {
        handshake: Duration::from_secs(10),
        keep_alive: calvin_proto::KEEP_ALIVE_INTERVAL,
    };

    /// With another edge to go to: a dead edge costs at most 3 s of
    /// handshake, and an edge that dies under a connection is found silent
    /// soon after a keep-alive goes unanswered, 2 s after it last spoke
    /// (the agent's watch). Each keep-alive costs the edge a wake-up to
    /// answer it, 2.5 times as often as [`Timing::ALONE`]: only agents that
    /// can fail over pay it.
    pub const FAILOVER: Timing = Timing {
        handshake: Duration::from_secs(3),
        keep_alive: Duration::from_secs(2),
    };
}

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
    #[error("the QUIC handshake did not finish within {} s", .0.as_secs())]
    HandshakeTimeout(Duration),
    #[error("no edge to connect to")]
    NoEdges,
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

    /// Resolves the address and completes a QUIC handshake with the first
    /// address the name has.
    pub async fn connect(&self) -> Result<quinn::Connection, TransportError> {
        Ok(self.connect_on_endpoint().await?.1)
    }

    /// [`Self::connect`], with the endpoint the connection lives on (to
    /// wait on it when closing, so that the edge hears the close).
    pub async fn connect_on_endpoint(
        &self,
    ) -> Result<(quinn::Endpoint, quinn::Connection), TransportError> {
        let first = self
            .resolve()
            .await?
            .into_iter()
            .next()
            .ok_or_else(|| self.unresolved(std::io::Error::other("no addresses")))?;
        dial(&self.config, &self.server_name, first, Timing::ALONE).await
    }

    /// Every address HOST has (A and AAAA), each once, in the resolver's
    /// order.
    pub async fn resolve(&self) -> Result<Vec<SocketAddr>, TransportError> {
        let mut addrs: Vec<SocketAddr> = Vec::new();
        for addr in tokio::net::lookup_host((self.host.as_str(), self.port))
            .await
            .map_err(|source| self.unresolved(source))?
        {
            if !addrs.contains(&addr) {
                addrs.push(addr);
            }
        }
        Ok(addrs)
    }

    fn unresolved(&self, source: std::io::Error) -> TransportError {
        TransportError::Resolve {
            host: self.host.clone(),
            source,
        }
    }

    /// Whether HOST is an IP address (then it names one edge, not several).
    fn is_literal(&self) -> bool {
        self.host.parse::<std::net::IpAddr>().is_ok()
    }
}

/// A QUIC handshake with `addr`, on an endpoint of its own, checking the
/// certificate for `server_name`, within `timing.handshake`.
async fn dial(
    config: &quinn::ClientConfig,
    server_name: &str,
    addr: SocketAddr,
    timing: Timing,
) -> Result<(quinn::Endpoint, quinn::Connection), TransportError> {
    let local: SocketAddr = if addr.is_ipv6() {
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
    let mut transport =
        calvin_common::quic::agent_transport_config(calvin_common::quic::is_loopback(addr));
    transport.keep_alive_interval(Some(timing.keep_alive));
    let mut config = config.clone();
    config.transport_config(Arc::new(transport));
    let connecting = endpoint
        .connect_with(config, addr, server_name)
        .map_err(|e| TransportError::Connect(e.to_string()))?;
    match tokio::time::timeout(timing.handshake, connecting).await {
        Ok(Ok(conn)) => Ok((endpoint, conn)),
        Ok(Err(e)) => Err(TransportError::Connect(e.to_string())),
        Err(_) => Err(TransportError::HandshakeTimeout(timing.handshake)),
    }
}

/// One address of an edge, dialled with that edge's server name and roots.
#[derive(Clone)]
pub struct EdgeTarget {
    edge: EdgeAddress,
    addr: SocketAddr,
    /// [`Timing::FAILOVER`] when another address could be tried instead.
    timing: Timing,
}

impl fmt::Display for EdgeTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.edge.is_literal() {
            write!(f, "{}", self.addr)
        } else {
            write!(f, "{} ({})", self.edge, self.addr)
        }
    }
}

impl EdgeTarget {
    /// The socket address dialled.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The `--edge` this address came from.
    pub fn edge(&self) -> &EdgeAddress {
        &self.edge
    }

    /// How this address is dialled.
    pub fn timing(&self) -> Timing {
        self.timing
    }

    /// Completes a QUIC handshake with this address.
    pub async fn connect(&self) -> Result<(quinn::Endpoint, quinn::Connection), TransportError> {
        dial(
            &self.edge.config,
            &self.edge.server_name,
            self.addr,
            self.timing,
        )
        .await
    }
}

/// The addresses an agent may connect to: every address of every edge it
/// was given, in order, handed out round robin. Each round resolves the
/// names again and starts after the address handed out last, so after a
/// failure or a lost connection the next edge is tried first and the one
/// that failed last.
pub struct EdgeRing {
    edges: Vec<EdgeAddress>,
    round: Vec<EdgeTarget>,
    /// Where this round started in `round`, and how many it handed out.
    start: usize,
    handed: usize,
    last: Option<SocketAddr>,
}

impl EdgeRing {
    pub fn new(edges: Vec<EdgeAddress>) -> Self {
        Self {
            edges,
            round: Vec::new(),
            start: 0,
            handed: 0,
            last: None,
        }
    }

    /// The next address to dial. A name that does not resolve is left out
    /// of a new round; when none resolves, the error (and the round is
    /// over).
    pub async fn next(&mut self) -> Result<EdgeTarget, TransportError> {
        if self.round_over() {
            self.new_round().await?;
        }
        let target = self.round[(self.start + self.handed) % self.round.len()].clone();
        self.handed += 1;
        self.last = Some(target.addr);
        Ok(target)
    }

    /// Whether every address of this round has been handed out (the next
    /// call starts a new round).
    pub fn round_over(&self) -> bool {
        self.handed >= self.round.len()
    }

    /// Ends the round now: the next call resolves again and starts after
    /// the address handed out last (as after a connection is lost).
    pub fn end_round(&mut self) {
        self.handed = self.round.len();
    }

    /// Whether this round has more than one address: somewhere to go when
    /// the one in use fails.
    pub fn has_alternatives(&self) -> bool {
        self.round.len() > 1
    }

    async fn new_round(&mut self) -> Result<(), TransportError> {
        let mut targets: Vec<(EdgeAddress, SocketAddr)> = Vec::new();
        let mut failed = None;
        for edge in &self.edges {
            match edge.resolve().await {
                Ok(addrs) => {
                    for addr in addrs {
                        if !targets.iter().any(|(_, a)| *a == addr) {
                            targets.push((edge.clone(), addr));
                        }
                    }
                }
                Err(err) => {
                    if self.edges.len() > 1 {
                        tracing::warn!(%err, %edge, "cannot resolve an edge; trying the others");
                    }
                    failed = Some(err);
                }
            }
        }
        self.round.clear();
        self.handed = 0;
        if targets.is_empty() {
            return Err(failed.unwrap_or(TransportError::NoEdges));
        }
        let timing = if targets.len() > 1 {
            Timing::FAILOVER
        } else {
            Timing::ALONE
        };
        let addrs: Vec<SocketAddr> = targets.iter().map(|(_, a)| *a).collect();
        self.start = start_after(&addrs, self.last);
        self.round = targets
            .into_iter()
            .map(|(edge, addr)| EdgeTarget { edge, addr, timing })
            .collect();
        Ok(())
    }
}

/// Where a round over `addrs` starts: just after `last`, else at the first.
fn start_after(addrs: &[SocketAddr], last: Option<SocketAddr>) -> usize {
    last.and_then(|last| addrs.iter().position(|a| *a == last))
        .map_or(0, |i| (i + 1) % addrs.len())
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
    // Its transport is set at each dial (see `dial`).
    Ok(quinn::ClientConfig::new(Arc::new(crypto)))
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

    #[test]
    fn a_round_starts_after_the_address_used_last() {
        let a: Vec<SocketAddr> = ["127.0.0.1:1", "127.0.0.1:2", "[::1]:3"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        assert_eq!(start_after(&a, None), 0);
        assert_eq!(start_after(&a, Some(a[0])), 1);
        assert_eq!(start_after(&a, Some(a[2])), 0, "wraps around");
        let gone = "127.0.0.1:9".parse().unwrap();
        assert_eq!(start_after(&a, Some(gone)), 0, "an address no longer there");
    }
}
