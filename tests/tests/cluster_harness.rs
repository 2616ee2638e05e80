//! The cluster test harness itself: a real etcd starts, keeps keys and
//! leases across a stop and a crash; the cluster certificates make a
//! mutual TLS handshake between two edges and refuse a rogue one; an
//! edge's config passes `calvin-edge check-config`;
//! a cluster of real edges starts, restarts an edge and grows.

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use calvin_tests::cluster::{
    ClusterOptions, EdgeListen, cluster_toml, edge_host, edge_toml, free_peer_port,
};
use calvin_tests::{ClusterCerts, ClusterEdges, EdgeCerts, Etcd, binary, write_secret};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn etcd_starts_and_reads_back_what_is_put() {
    let etcd = Etcd::start().await;
    assert!(etcd.endpoint().starts_with("http://127.0.0.1:"));
    assert!(etcd.healthy().await);

    etcd.put("/calvin/edges/2", "127.0.0.2:4433").await;
    etcd.put("/calvin/edges/1", "-starts with a dash\nand spans lines")
        .await;
    etcd.put("/calvin/edgesX", "outside the prefix").await;
    etcd.put("/other", "x").await;
    assert_eq!(
        etcd.get_prefix("/calvin/edges/").await,
        [
            (
                "/calvin/edges/1".to_owned(),
                "-starts with a dash\nand spans lines".to_owned()
            ),
            ("/calvin/edges/2".to_owned(), "127.0.0.2:4433".to_owned()),
        ]
    );
    assert_eq!(etcd.get_prefix("/nothing/").await, []);
    assert_eq!(etcd.get_prefix("").await.len(), 4);
    assert!(
        etcd.log().contains("serving client traffic"),
        "{}",
        etcd.log()
    );
}

#[tokio::test]
async fn etcd_keeps_keys_and_leases_across_a_stop_and_a_kill() {
    let mut etcd = Etcd::start().await;
    let endpoint = etcd.endpoint();
    let lease = etcd.grant_lease(600).await;
    etcd.put_with_lease("/calvin/edges/1", "127.0.0.1:4433", lease)
        .await;
    etcd.put("/calvin/config", "kept").await;

    etcd.stop().await;
    assert!(!etcd.healthy().await, "etcd is down after stop");
    etcd.restart().await;
    assert_eq!(etcd.endpoint(), endpoint, "the same port after a restart");
    let entries = etcd.entries("/calvin/").await;
    assert_eq!(entries.len(), 2, "{entries:?}");
    assert_eq!(entries[0].key, "/calvin/config");
    assert_eq!(entries[0].lease, None);
    assert_eq!(entries[1].value, "127.0.0.1:4433");
    assert_eq!(entries[1].lease, Some(lease));
    assert!(etcd.leases().await.contains(&lease));
    assert!(etcd.lease_ttl(lease).await.is_some_and(|ttl| ttl > 500));

    // A crash loses nothing either: etcd syncs its log before answering.
    etcd.put("/calvin/edges/2", "127.0.0.2:4433").await;
    etcd.kill().await;
    assert!(!etcd.healthy().await, "etcd is down after kill");
    etcd.restart().await;
    assert_eq!(etcd.get_prefix("/calvin/edges/").await.len(), 2);
    assert!(etcd.leases().await.contains(&lease));
}

#[tokio::test]
async fn an_expired_lease_takes_its_keys_with_it() {
    let etcd = Etcd::start().await;
    let lease = etcd.grant_lease(1).await;
    etcd.put_with_lease("/calvin/edges/9", "gone soon", lease)
        .await;
    assert_eq!(etcd.get_prefix("/calvin/edges/").await.len(), 1);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !etcd.get_prefix("/calvin/edges/").await.is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "{}", etcd.log());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(etcd.lease_ttl(lease).await, None);
}

fn certificates(path: &Path) -> Vec<CertificateDer<'static>> {
    CertificateDer::pem_file_iter(path)
        .expect("certificate file")
        .collect::<Result<_, _>>()
        .expect("certificates")
}

fn roots(ca: &Path) -> Arc<rustls::RootCertStore> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in certificates(ca) {
        roots.add(cert).expect("root");
    }
    Arc::new(roots)
}

/// An edge's peer listener: its certificate, and clients verified against
/// `certs.ca`.
fn server_config(certs: &EdgeCerts) -> rustls::ServerConfig {
    let provider = calvin_edge::certs::tls::provider();
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        roots(&certs.ca),
        provider.clone(),
    )
    .build()
    .expect("client verifier");
    rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_client_cert_verifier(verifier)
        .with_single_cert(
            certificates(&certs.cert),
            PrivateKeyDer::from_pem_file(&certs.key).expect("key"),
        )
        .expect("server certificate")
}

/// An edge dialing a peer: servers verified against `certs.ca`, its own
/// certificate offered.
fn client_config(certs: &EdgeCerts) -> rustls::ClientConfig {
    rustls::ClientConfig::builder_with_provider(calvin_edge::certs::tls::provider())
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots(&certs.ca))
        .with_client_auth_cert(
            certificates(&certs.cert),
            PrivateKeyDer::from_pem_file(&certs.key).expect("key"),
        )
        .expect("client certificate")
}

/// A handshake over loopback TCP to a server listening on `host`, the
/// client asking for `name`; the server sends "ok" once it accepted. The
/// outcome on each side: the client certificate the server saw, and the
/// bytes the client read.
async fn handshake(
    server: rustls::ServerConfig,
    client: rustls::ClientConfig,
    host: IpAddr,
    name: IpAddr,
) -> (Result<Vec<u8>, String>, Result<Vec<u8>, String>) {
    let listener = tokio::net::TcpListener::bind((host, 0))
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
    let served = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.map_err(|e| e.to_string())?;
        let mut tls = acceptor.accept(tcp).await.map_err(|e| e.to_string())?;
        let peer = tls.get_ref().1.peer_certificates().map(|c| c[0].to_vec());
        tls.write_all(b"ok").await.map_err(|e| e.to_string())?;
        tls.shutdown().await.map_err(|e| e.to_string())?;
        peer.ok_or_else(|| "no client certificate".to_owned())
    });
    let connector = tokio_rustls::TlsConnector::from(Arc::new(client));
    let dialed = async {
        let tcp = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| e.to_string())?;
        let mut tls = connector
            .connect(ServerName::IpAddress(name.into()), tcp)
            .await
            .map_err(|e| e.to_string())?;
        let mut read = Vec::new();
        tls.read_to_end(&mut read)
            .await
            .map_err(|e| e.to_string())?;
        Ok(read)
    };
    let dialed = tokio::time::timeout(Duration::from_secs(10), dialed)
        .await
        .expect("the client finishes");
    let served = tokio::time::timeout(Duration::from_secs(10), served)
        .await
        .expect("the server finishes")
        .expect("server task");
    (served, dialed)
}

#[tokio::test]
async fn cluster_certificates_make_mutual_tls_and_refuse_a_rogue_edge() {
    let dir = tempfile::tempdir().unwrap();
    let mut certs = ClusterCerts::generate(dir.path(), &[edge_host(1), edge_host(2)]);
    let third = certs.issue(edge_host(3));
    assert_eq!(certs.edges.len(), 3);
    let [one, two] = [&certs.edges[0], &certs.edges[1]];
    assert_eq!((one.host, third.host), (edge_host(1), edge_host(3)));
    for edge in &certs.edges {
        assert_eq!(edge.ca, certs.ca);
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&edge.key).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o600, "{}", edge.key.display());
    }

    // Edge 2 dials edge 1: both ends verified.
    let (served, dialed) =
        handshake(server_config(one), client_config(two), one.host, one.host).await;
    assert_eq!(dialed.as_deref(), Ok(&b"ok"[..]));
    assert_eq!(served, Ok(certificates(&two.cert)[0].to_vec()));
    // And edge 1 dials the edge added later.
    let (served, dialed) = handshake(
        server_config(&third),
        client_config(one),
        third.host,
        third.host,
    )
    .await;
    assert!(served.is_ok() && dialed.is_ok(), "{served:?} {dialed:?}");

    // An edge certificate is good for its own host alone.
    let (_, dialed) = handshake(server_config(two), client_config(one), two.host, one.host).await;
    assert!(
        dialed
            .as_ref()
            .is_err_and(|e| e.contains("not valid for name")),
        "{dialed:?}"
    );

    // A rogue edge (a certificate from another CA, though it trusts the
    // cluster CA) is refused as a client...
    let rogue = EdgeCerts {
        ca: certs.ca.clone(),
        ..certs.rogue.clone()
    };
    assert_ne!(certs.rogue.ca, certs.ca);
    let (served, dialed) = handshake(
        server_config(one),
        client_config(&rogue),
        one.host,
        one.host,
    )
    .await;
    assert!(
        served.as_ref().is_err_and(|e| e.contains("UnknownIssuer")),
        "{served:?}"
    );
    assert!(dialed.is_err(), "{dialed:?}");
    // ...and as a server.
    let (_, dialed) = handshake(
        server_config(&rogue),
        client_config(two),
        one.host,
        one.host,
    )
    .await;
    assert!(
        dialed.as_ref().is_err_and(|e| e.contains("UnknownIssuer")),
        "{dialed:?}"
    );
    // It is whole on its own: its CA verifies it.
    let (served, dialed) = handshake(
        server_config(&certs.rogue),
        client_config(&certs.rogue),
        one.host,
        one.host,
    )
    .await;
    assert!(served.is_ok() && dialed.is_ok(), "{served:?} {dialed:?}");
}

#[test]
fn an_edge_config_with_its_cluster_section_passes_check_config() {
    let dir = tempfile::tempdir().unwrap();
    let visitor =
        calvin_edge::dev::load_or_create(&dir.path().join("visitor"), "preview.test").unwrap();
    let host = edge_host(2);
    let certs = ClusterCerts::generate(&dir.path().join("cluster"), &[host]);
    let peer = std::net::SocketAddr::new(host, free_peer_port(host));
    let cluster = cluster_toml("http://127.0.0.1:2379", peer, &certs.edges[0], 3);
    let expected = format!(
        "[cluster]\netcd = [\"http://127.0.0.1:2379\"]\npeer_listen = \"{peer}\"\nadvertise = \"{peer}\"\npeer_ca = \"{}\"\npeer_cert = \"{}\"\npeer_key = \"{}\"\nlease_ttl_secs = 3\n",
        certs.ca.display(),
        certs.edges[0].cert.display(),
        certs.edges[0].key.display(),
    );
    assert_eq!(cluster, expected);

    // The whole config, [limits] after [cluster], passes.
    let options = ClusterOptions {
        extra: "[limits]\ngrace_period_secs = 1\n".to_owned(),
        ..ClusterOptions::default()
    };
    let config = edge_toml(
        &EdgeListen::any_port(host),
        &dir.path().join("state"),
        &visitor.dir.join("edge.pem"),
        &visitor.dir.join("edge.key"),
        &cluster,
        &options,
    );
    assert!(config.contains("https = \"127.0.0.2:0\""), "{config}");
    let path = dir.path().join("edge.toml");
    write_secret(&path, &config);
    let out = std::process::Command::new(binary("calvin-edge"))
        .args(["check-config"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{config}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Edge N on 127.0.0.N prints the peer address it was given; a killed edge
/// comes back on the same addresses; a third edge joins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_starts_each_edge_on_its_own_host_and_restarts_and_grows() {
    let etcd = Etcd::start().await;
    let mut cluster = ClusterEdges::start(2, &etcd).await;
    for (i, edge) in cluster.edges.iter().enumerate() {
        let host = edge_host(i + 1);
        assert_eq!(edge.peer, Some(cluster.nodes[i].peer));
        assert_eq!(edge.https.map(|a| a.ip()), Some(host));
        assert_eq!(edge.quic.ip(), host);
    }
    let https = cluster.edges[1].https;
    cluster.kill(1).await;
    cluster.restart(1).await;
    assert_eq!(cluster.edges[1].https, https);
    let third = cluster.add().await;
    assert_eq!(cluster.edges[third].peer, Some(cluster.nodes[2].peer));
    cluster.stop(0).await;
}
