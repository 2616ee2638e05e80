//! The agent link's budgets, over a real QUIC connection on loopback: the
//! idle connections an agent's previews may keep, and the requests an
//! account may have under way, each at its limit and one past it.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

use super::*;
use crate::bandwidth::Buckets;
use crate::certs::cert_store::CertStore;

fn settings(max_idle_per_agent: usize, max_streams_per_account: usize) -> Arc<UpstreamSettings> {
    Arc::new(UpstreamSettings {
        connect_timeout: Duration::from_secs(5),
        max_idle_per_preview: 8,
        max_idle_per_agent,
        idle_timeout: Duration::from_secs(60),
        reconnect_wait: Duration::from_secs(1),
        max_streams_per_account,
        bandwidth: Buckets::new(0),
    })
}

/// The edge's side of a QUIC connection an agent opened on loopback, and
/// what keeps it open.
async fn agent_connection() -> (quinn::Connection, Kept) {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = crate::dev::load_or_create(dir.path(), "preview.test").expect("dev state");
    let certs = Arc::new(CertStore::new());
    certs.install(&state.tls).expect("certificate");
    let server = crate::certs::tls::quic_config(certs, true, false).expect("quic config");
    let edge = quinn::Endpoint::server(server, "127.0.0.1:0".parse().expect("addr"))
        .expect("edge endpoint");
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_file_iter(state.ca_path()).expect("CA file") {
        roots.add(ca.expect("CA")).expect("root");
    }
    let mut tls = rustls::ClientConfig::builder_with_provider(crate::certs::tls::provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("TLS 1.3")
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![calvin_proto::ALPN.to_vec()];
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls).expect("QUIC TLS");
    let mut agent =
        quinn::Endpoint::client("127.0.0.1:0".parse().expect("addr")).expect("agent endpoint");
    agent.set_default_client_config(quinn::ClientConfig::new(Arc::new(crypto)));
    let dialled = agent
        .connect(edge.local_addr().expect("addr"), "localhost")
        .expect("connect");
    let (accepted, dialled) = tokio::join!(
        async {
            edge.accept()
                .await
                .expect("incoming")
                .await
                .expect("handshake")
        },
        dialled
    );
    let kept = Kept {
        _agent: dialled.expect("agent's handshake"),
        _endpoints: [agent, edge],
        _dir: dir,
    };
    (accepted, kept)
}

/// What a test's connection needs kept open: the agent's side, both
/// endpoints, the state folder.
struct Kept {
    _agent: quinn::Connection,
    _endpoints: [quinn::Endpoint; 2],
    _dir: tempfile::TempDir,
}

#[tokio::test]
async fn an_agents_idle_connections_are_kept_up_to_its_budget() {
    let (conn, _kept) = agent_connection().await;
    let link = AgentLink::new(conn, settings(2, 10), Arc::default(), None);
    assert!(link.reserve_idle() && link.reserve_idle());
    assert!(!link.reserve_idle(), "a third past a budget of 2");
    link.release_idle(1);
    assert!(link.reserve_idle(), "one freed, one more kept");
}

#[tokio::test]
async fn a_link_through_another_edge_keeps_at_most_its_own_smaller_budget() {
    let (conn, _kept) = agent_connection().await;
    let link = AgentLink::through_peer(conn, settings(1000, 10), Arc::default(), None);
    for i in 0..PEER_MAX_IDLE {
        assert!(link.reserve_idle(), "idle connection {i}");
    }
    assert!(!link.reserve_idle(), "one past {PEER_MAX_IDLE}");
}

#[tokio::test]
async fn an_account_has_at_most_its_requests_under_way_over_all_its_agents() {
    let (first, _kept_first) = agent_connection().await;
    let (second, _kept_second) = agent_connection().await;
    // Two agents of one account share its count.
    let account = Arc::new(AtomicUsize::new(0));
    let one = AgentLink::new(first, settings(8, 2), account.clone(), None);
    let other = AgentLink::new(second, settings(8, 2), account.clone(), None);
    let a = one.wait_on().expect("first under way");
    let _b = other.wait_on().expect("second under way");
    assert!(matches!(one.wait_on(), Err(UpstreamError::AccountBusy(2))));
    assert!(matches!(
        other.wait_on(),
        Err(UpstreamError::AccountBusy(2))
    ));
    drop(a);
    assert!(other.wait_on().is_ok(), "one ended, one more under way");
}
