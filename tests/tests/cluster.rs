//! Several edges acting as one on etcd (`[cluster]`): three
//! `calvin-edge serve` processes on 127.0.0.1, .2 and .3 with one etcd on
//! loopback, agents on one edge and visitors on every edge.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use calvin_agent::api::ApiError;
use calvin_tests::cluster::{CLUSTER_ZONE, ClusterEdges};
use calvin_tests::etcd::Etcd;
use calvin_tests::*;
use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;

const BYTES: usize = 300_000;

/// `https://NAME.ZONE:PORT/PATH` on edge `i`, and the `--resolve` that
/// sends curl to that edge's address.
fn url_on(cluster: &ClusterEdges, i: usize, name: &str, path: &str) -> (String, String) {
    let https = cluster.edges[i].https.expect("an HTTPS listener");
    let host = format!("{name}.{CLUSTER_ZONE}");
    (
        format!("https://{host}:{}{path}", https.port()),
        format!("{host}:{}:{}", https.port(), https.ip()),
    )
}

async fn get_on(cluster: &ClusterEdges, i: usize, name: &str, path: &str) -> CurlOutput {
    let (url, resolve) = url_on(cluster, i, name, path);
    curl(
        &cluster.visitor_ca,
        &["--max-time", "5", "--resolve", &resolve, &url],
    )
    .await
}

/// The 401 edge `i` answers for the preview `guarded` at `path`, within
/// 8 s (the cluster's routes and key reach every edge by then); `what` it
/// should do names the failure.
async fn refused_on(cluster: &ClusterEdges, i: usize, path: &str, what: &str) -> CurlOutput {
    eventually(Duration::from_secs(8), || async {
        let out = get_on(cluster, i, "guarded", path).await;
        (out.status == 401).then_some(out)
    })
    .await
    .unwrap_or_else(|| panic!("edge {} {what}:\n{}", i + 1, cluster.logs()))
}

/// An agent of `account` connected to the edges in `order` (their QUIC
/// addresses, tried in that order), with a preview of `port` named `name`.
async fn agent_with(
    cluster: &ClusterEdges,
    order: &[usize],
    account: &str,
    port: u16,
    name: &str,
) -> TestAgent {
    let agent = connected_agent(cluster, order, account).await;
    let answer = agent
        .client()
        .preview(port.into(), Some(name.to_owned()))
        .await
        .expect("control API answers");
    assert!(
        answer.status.is_success(),
        "preview {name}: {} {}\n{}",
        answer.status,
        String::from_utf8_lossy(&answer.body),
        cluster.logs()
    );
    agent
}

/// An agent of `account` connected to the edges in `order`, with no
/// preview yet.
async fn connected_agent(cluster: &ClusterEdges, order: &[usize], account: &str) -> TestAgent {
    let edges: Vec<SocketAddr> = order.iter().map(|&i| cluster.edges[i].quic).collect();
    let agent = TestAgent::spawn_to_edges(&edges, &cluster.visitor_ca, &token_for(account)).await;
    agent
        .agent
        .wait_connected(Duration::from_secs(10))
        .await
        .expect("the agent connects");
    agent
}

/// Asks `url` on edge `i` until it answers 200 with `body`, for `limit`.
async fn serves_within(
    cluster: &ClusterEdges,
    i: usize,
    name: &str,
    path: &str,
    body: &[u8],
    limit: Duration,
) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < limit {
        let got = get_on(cluster, i, name, path).await;
        if got.status == 200 && got.body == body {
            return Some(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// Asserts that every edge of `edges` serves the origin's `/hello` for
/// `name` within `limit` (`when`: for the message).
async fn says_hello(
    cluster: &ClusterEdges,
    edges: std::ops::Range<usize>,
    name: &str,
    limit: Duration,
    when: &str,
) {
    for i in edges {
        let served = serves_within(cluster, i, name, "/hello", b"hello from origin\n", limit).await;
        assert!(
            served.is_some(),
            "edge {} does not serve {name} {when}:\n{}",
            i + 1,
            cluster.logs()
        );
    }
}

/// Reads an event stream on edge `i` with `curl -N`: each `data:` line and
/// when it arrived.
async fn arrivals_on(cluster: &ClusterEdges, i: usize, name: &str) -> Vec<(String, Duration)> {
    let (url, resolve) = url_on(cluster, i, name, "/events");
    event_arrivals(
        &cluster.visitor_ca,
        &["--max-time", "10", "--resolve", &resolve, &url],
    )
    .await
}

/// A WebSocket to `/ws` of `name` on edge `i`: two echoes, text and a
/// 70 KB binary frame.
async fn websocket_echoes(cluster: &ClusterEdges, i: usize, name: &str) {
    let https = cluster.edges[i].https.expect("https");
    let host = format!("{name}.{CLUSTER_ZONE}");
    let tcp = tokio::net::TcpStream::connect(https).await.expect("tcp");
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(tls_client_config(
        &cluster.visitor_ca,
        &[],
    )));
    let server_name = rustls_pki_types::ServerName::try_from(host.clone()).expect("name");
    let tls = connector.connect(server_name, tcp).await.expect("tls");
    let url = format!("wss://{host}:{}/ws", https.port());
    let (mut ws, response) = tokio_tungstenite::client_async(url, tls)
        .await
        .expect("websocket handshake through two edges");
    assert_eq!(response.status(), 101);
    ws.send(Message::text("across edges")).await.expect("send");
    let back = ws.next().await.expect("an echo").expect("a frame");
    assert_eq!(back.into_text().expect("text"), "across edges");
    let frame: Vec<u8> = (0..70_000u32).map(|i| (i % 251) as u8).collect();
    ws.send(Message::binary(frame.clone())).await.expect("send");
    let back = ws.next().await.expect("an echo").expect("a frame");
    assert_eq!(back.into_data().as_ref(), frame.as_slice());
    ws.close(None).await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_request_on_any_edge_reaches_the_agent_another_edge_holds() {
    let etcd = Etcd::start().await;
    let cluster = ClusterEdges::start(3, &etcd).await;
    let origin = Origin::start().await;
    let _agent = agent_with(&cluster, &[0], "alice", origin.port, "web").await;
    let body = pattern_bytes(BYTES);
    for i in 0..3 {
        let waited = serves_within(
            &cluster,
            i,
            "web",
            &format!("/bytes/{BYTES}"),
            &body,
            Duration::from_secs(5),
        )
        .await;
        assert!(
            waited.is_some(),
            "edge {} does not serve the preview:\n{}",
            i + 1,
            cluster.logs()
        );
        // An upload's echo: the request body through the hop too.
        let (url, resolve) = url_on(&cluster, i, "web", "/echo");
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("up");
        std::fs::write(&file, &body).expect("write");
        let at_file = format!("@{}", file.display());
        let echoed = curl(
            &cluster.visitor_ca,
            &["--resolve", &resolve, "--data-binary", &at_file, &url],
        )
        .await;
        assert_eq!(echoed.status, 200, "edge {}", i + 1);
        assert!(echoed.body == body, "edge {}: the echo differs", i + 1);

        // Events arrive as written, not buffered by the extra hop.
        let arrivals = arrivals_on(&cluster, i, "web").await;
        let lines: Vec<&str> = arrivals.iter().map(|(l, _)| l.as_str()).collect();
        assert_eq!(
            lines,
            ["data: event 0", "data: event 1", "data: event 2"],
            "edge {}",
            i + 1
        );
        for pair in arrivals.windows(2) {
            let gap = pair[1].1 - pair[0].1;
            assert!(
                gap >= Duration::from_millis(200) && gap <= Duration::from_millis(450),
                "edge {}: events 300 ms apart arrived {gap:?} apart",
                i + 1
            );
        }
        websocket_echoes(&cluster, i, "web").await;
    }
    // The other edges count the preview as served elsewhere, through
    // their connection to edge 1.
    for i in 1..3 {
        let metrics = cluster.edges[i].metrics().await;
        for (series, want) in [
            ("calvin_edge_cluster_store_up", 1.0),
            ("calvin_edge_cluster_previews_elsewhere", 1.0),
            ("calvin_edge_cluster_peer_connections", 1.0),
        ] {
            assert_eq!(metrics.get(series), Some(&want), "edge {}: {series}", i + 1);
        }
    }
    // A name nobody serves is unknown on every edge, with the edge's page.
    for i in 0..3 {
        let got = get_on(&cluster, i, "nobody", "/").await;
        assert_eq!(got.status, 404, "edge {}", i + 1);
        assert_eq!(got.header("x-calvin-error"), Some("unknown-preview"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_agent_of_a_killed_edge_serves_again_from_every_edge_within_10_s() {
    let etcd = Etcd::start().await;
    let mut cluster = ClusterEdges::start(3, &etcd).await;
    let origin = Origin::start().await;
    let agent = agent_with(&cluster, &[0, 1, 2], "alice", origin.port, "web").await;
    assert_eq!(agent.edge_now(), Some(cluster.edges[0].quic));
    let hello = b"hello from origin\n";
    says_hello(
        &cluster,
        0..3,
        "web",
        Duration::from_secs(5),
        "before the kill",
    )
    .await;
    let dead_peer = cluster.nodes[0].peer.to_string();
    let route_edge = |entries: Vec<(String, String)>| {
        entries
            .iter()
            .find(|(k, _)| k == "calvin/routes/web")
            .and_then(|(_, v)| serde_json::from_str::<serde_json::Value>(v).ok())
            .and_then(|v| v["edge"].as_str().map(str::to_owned))
    };
    assert_eq!(
        route_edge(etcd.get_prefix("calvin/routes/").await).as_deref(),
        Some(dead_peer.as_str())
    );

    let killed = Instant::now();
    cluster.kill(0).await;
    for i in 1..3 {
        let back = serves_within(
            &cluster,
            i,
            "web",
            "/hello",
            hello,
            Duration::from_secs(10).saturating_sub(killed.elapsed()),
        )
        .await;
        assert!(
            back.is_some(),
            "edge {} did not serve the preview within 10 s of the kill:\n{}",
            i + 1,
            cluster.logs()
        );
    }
    let served_again = killed.elapsed();
    assert!(served_again < Duration::from_secs(10), "{served_again:?}");
    assert_ne!(agent.edge_now(), Some(cluster.edges[0].quic));

    // The dead edge's keys go with its lease (TTL 3 s): its registration,
    // and no route names it.
    let ttl = Duration::from_secs(3);
    let gone = eventually(ttl + Duration::from_secs(2), || async {
        let edges = etcd.get_prefix("calvin/edges/").await;
        let routes = etcd.get_prefix("calvin/routes/").await;
        let dead = format!("calvin/edges/{dead_peer}");
        (!edges.iter().any(|(k, _)| *k == dead)
            && !routes.iter().any(|(_, v)| v.contains(&dead_peer)))
        .then_some(())
    })
    .await;
    assert!(
        gone.is_some(),
        "the dead edge's keys outlived its lease: {:?}",
        etcd.get_prefix("calvin/").await
    );
    eprintln!("served again from every surviving edge {served_again:?} after the kill");

    // Taken down on its new edge: unknown on every edge (not offline),
    // no route left, the name reserved to its account as taken down.
    let down = agent.client().unpreview("web").await.expect("unpreview");
    assert!(down.status.is_success(), "{down:?}");
    for i in 1..3 {
        let got = get_on(&cluster, i, "web", "/hello").await;
        assert_eq!(
            got.header("x-calvin-error"),
            Some("unknown-preview"),
            "edge {}: {} {}",
            i + 1,
            got.status,
            cluster.logs()
        );
    }
    assert!(etcd.get_prefix("calvin/routes/").await.is_empty());
    let names = etcd.get_prefix("calvin/names/web").await;
    assert!(
        names.len() == 1
            && names[0].1.contains(r#""account":"alice""#)
            && names[0].1.contains(r#""state":"released""#),
        "{names:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_accounts_racing_for_a_name_on_two_edges_get_one_winner() {
    let etcd = Etcd::start().await;
    let cluster = ClusterEdges::start(2, &etcd).await;
    let origin = Origin::start().await;
    let alice = agent_with(&cluster, &[0], "alice", origin.port, "alice-home").await;
    let bob = agent_with(&cluster, &[1], "bob", origin.port, "bob-home").await;
    let (alice_api, bob_api) = (alice.client(), bob.client());
    let mut wins = [0usize; 2];
    for round in 0..100 {
        let name = format!("race-{round}");
        let (a, b) = tokio::join!(
            alice_api.preview(origin.port.into(), Some(name.clone())),
            bob_api.preview(origin.port.into(), Some(name.clone())),
        );
        let (a, b) = (
            a.expect("alice's agent answers"),
            b.expect("bob's agent answers"),
        );
        let (winner, loser) = match (a.status.is_success(), b.status.is_success()) {
            (true, false) => (0, &b),
            (false, true) => (1, &a),
            _ => panic!(
                "round {round}: {} and {}: {} / {}",
                a.status,
                b.status,
                String::from_utf8_lossy(&a.body),
                String::from_utf8_lossy(&b.body)
            ),
        };
        wins[winner] += 1;
        let why: ApiError = loser.parse::<serde_json::Value>().expect_err("a refusal");
        assert_eq!(why.code, "name_taken", "round {round}: {}", why.error);
        assert!(
            why.error
                .contains(&format!("the name {name} belongs to another account")),
            "round {round}: {}",
            why.error
        );
        let api = [&alice_api, &bob_api][winner];
        let listed = api.list().await.expect("list");
        assert!(
            String::from_utf8_lossy(&listed.body).contains(&name),
            "round {round}: the winner does not list {name}"
        );
        api.unpreview(&name).await.expect("unpreview");
    }
    assert_eq!(wins[0] + wins[1], 100);
    eprintln!("alice won {} rounds, bob {}", wins[0], wins[1]);
    // A name stays its winner's after it is taken down (the name lease):
    // the other account cannot claim it on either edge.
    let taken = bob_api
        .preview(origin.port.into(), Some("alice-home".into()))
        .await
        .expect("bob's agent answers");
    assert_eq!(taken.status, 409);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_etcd_stopped_previews_keep_serving_and_new_names_are_refused_with_the_reason() {
    let mut etcd = Etcd::start().await;
    let cluster = ClusterEdges::start(3, &etcd).await;
    let origin = Origin::start().await;
    let agent = agent_with(&cluster, &[0], "alice", origin.port, "web").await;
    let hello = b"hello from origin\n";
    says_hello(
        &cluster,
        0..3,
        "web",
        Duration::from_secs(5),
        "with etcd up",
    )
    .await;

    etcd.stop().await;
    let stopped = Instant::now();
    // Past the edges' lease TTL (3 s): they have noticed.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let refused = agent
        .client()
        .preview(origin.port.into(), Some("fresh".into()))
        .await
        .expect("control API answers");
    assert_eq!(
        refused.status,
        503,
        "{}",
        String::from_utf8_lossy(&refused.body)
    );
    let why: ApiError = refused.parse::<serde_json::Value>().expect_err("a refusal");
    assert!(
        why.error.contains("etcd") && why.error.contains("cannot be reached"),
        "{}",
        why.error
    );
    for i in 0..3 {
        let metrics = cluster.edges[i].metrics().await;
        assert_eq!(
            metrics.get("calvin_edge_cluster_store_up"),
            Some(&0.0),
            "edge {}",
            i + 1
        );
    }
    // Every edge keeps serving from what it knows, for the whole outage.
    while stopped.elapsed() < Duration::from_secs(10) {
        for i in 0..3 {
            let got = get_on(&cluster, i, "web", "/hello").await;
            assert_eq!(
                (got.status, got.body.as_slice()),
                (200, &hello[..]),
                "edge {} with etcd stopped {:?}:\n{}",
                i + 1,
                stopped.elapsed(),
                cluster.logs()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    etcd.restart().await;
    // After etcd returns, new names are claimed and served everywhere, and
    // the old one still is.
    let claimed = eventually(Duration::from_secs(15), || async {
        let answer = agent
            .client()
            .preview(origin.port.into(), Some("fresh".into()))
            .await
            .ok()?;
        answer.status.is_success().then_some(())
    })
    .await;
    assert!(
        claimed.is_some(),
        "no claim after etcd came back:\n{}",
        cluster.logs()
    );
    for name in ["fresh", "web"] {
        says_hello(
            &cluster,
            0..3,
            name,
            Duration::from_secs(5),
            "after etcd came back",
        )
        .await;
    }
    let routes = etcd.get_prefix("calvin/routes/").await;
    assert_eq!(routes.len(), 2, "{routes:?}");
}

/// A QUIC client of an edge's peer listener with `identity` (certificate
/// and key files), trusting the cluster CA: a stream asking for `name`,
/// and the edge's answer, or why there was none.
async fn ask_as_peer(
    cluster: &ClusterEdges,
    identity: Option<(&std::path::Path, &std::path::Path)>,
    name: &str,
) -> Result<calvin_proto::StreamAnswer, String> {
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pki_types::CertificateDer::pem_file_iter(&cluster.certs.ca).expect("ca") {
        roots.add(cert.expect("ca cert")).expect("root");
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("tls13")
        .with_root_certificates(roots);
    let mut tls = match identity {
        Some((cert, key)) => {
            let chain = rustls_pki_types::CertificateDer::pem_file_iter(cert)
                .expect("cert")
                .collect::<Result<Vec<_>, _>>()
                .expect("certs");
            let key = rustls_pki_types::PrivateKeyDer::from_pem_file(key).expect("key");
            builder.with_client_auth_cert(chain, key).expect("identity")
        }
        None => builder.with_no_client_auth(),
    };
    tls.alpn_protocols = vec![b"calvin-peer/1".to_vec()];
    let tls = quinn::crypto::rustls::QuicClientConfig::try_from(tls).expect("quic tls");
    let mut endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().expect("addr")).expect("udp");
    endpoint.set_default_client_config(quinn::ClientConfig::new(std::sync::Arc::new(tls)));
    let peer = cluster.nodes[0].peer;
    let conn = endpoint
        .connect(peer, &peer.ip().to_string())
        .expect("connect")
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    let asked = async {
        let (mut send, mut recv) = conn.open_bi().await.map_err(|e| format!("open: {e}"))?;
        let header = calvin_proto::StreamHeader {
            name: calvin_proto::PreviewName::parse(name).expect("name"),
            port: calvin_proto::Port::try_from(80u16).expect("port"),
            client: "192.0.2.1:1234".parse().expect("addr"),
            wait_ms: None,
        };
        calvin_proto::io::write_frame(&mut send, &header)
            .await
            .map_err(|e| format!("write: {e}"))?;
        calvin_proto::io::read_frame::<calvin_proto::StreamAnswer, _>(&mut recv)
            .await
            .map_err(|e| format!("read: {e}"))?
            .ok_or_else(|| "no answer".to_owned())
    };
    tokio::time::timeout(Duration::from_secs(5), asked)
        .await
        .map_err(|_| "no answer in 5 s".to_owned())?
        .map_err(|e| format!("{e}: {:?}", conn.close_reason()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_edges_with_the_cluster_ca_s_certificate_are_peers() {
    let etcd = Etcd::start().await;
    let cluster = ClusterEdges::start(1, &etcd).await;
    let mine = &cluster.certs.edges[0];
    let rogue = &cluster.certs.rogue;
    // Another CA's certificate, and none: refused in the handshake,
    // nothing answered.
    let refused = ask_as_peer(&cluster, Some((&rogue.cert, &rogue.key)), "web").await;
    let why = refused.expect_err("a certificate from another CA is refused");
    assert!(why.contains("UnknownIssuer"), "{why}");
    let refused = ask_as_peer(&cluster, None, "web").await;
    let why = refused.expect_err("no certificate is refused");
    assert!(why.contains("peer sent no certificates"), "{why}");
    // The cluster's: a peer, told that no agent serves the name there.
    let answer = ask_as_peer(&cluster, Some((&mine.cert, &mine.key)), "web")
        .await
        .expect("a peer's stream is answered");
    assert!(
        matches!(
            &answer,
            calvin_proto::StreamAnswer::Refused {
                reason: calvin_proto::StreamRefusal::Offline,
                message,
            } if message == "no agent serves web on this edge now"
        ),
        "{answer:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_edge_stopped_with_sigterm_hands_its_agents_over_and_leaves_at_once() {
    let etcd = Etcd::start().await;
    let mut cluster = ClusterEdges::start(2, &etcd).await;
    let origin = Origin::start().await;
    let agent = agent_with(&cluster, &[0, 1], "alice", origin.port, "web").await;
    let hello = b"hello from origin\n";
    says_hello(&cluster, 1..2, "web", Duration::from_secs(5), "at first").await;
    let stopping = Instant::now();
    cluster.stop(0).await;
    let stopped = stopping.elapsed();
    // Its lease is revoked as it leaves, not left to run out.
    let gone = format!("calvin/edges/{}", cluster.nodes[0].peer);
    let edges = etcd.get_prefix("calvin/edges/").await;
    assert!(!edges.iter().any(|(k, _)| *k == gone), "{edges:?}");
    let back = serves_within(&cluster, 1, "web", "/hello", hello, Duration::from_secs(10)).await;
    assert!(back.is_some(), "{}", cluster.logs());
    assert_eq!(agent.edge_now(), Some(cluster.edges[1].quic));
    eprintln!(
        "stopped in {stopped:?}; served by the other edge {:?} later",
        back.unwrap_or_default()
    );
}

/// The A records `dig +short` gets for `name` from edge `i`'s DNS, sorted.
async fn a_records(cluster: &ClusterEdges, i: usize, name: &str) -> Vec<String> {
    let dns = cluster.edges[i].dns.expect("a DNS listener");
    let out = calvin_tests::serve_edge::dig(dns, &["+short", name, "A"]).await;
    let mut ips: Vec<String> = out.lines().map(|l| l.trim().to_owned()).collect();
    ips.sort();
    ips
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_edge_s_dns_answers_the_addresses_of_the_live_edges() {
    let etcd = Etcd::start().await;
    let options = calvin_tests::cluster::ClusterOptions {
        dns: true,
        ..Default::default()
    };
    let mut cluster = ClusterEdges::start_with(3, &etcd.endpoint(), options).await;
    let name = format!("web.{CLUSTER_ZONE}");
    let all = ["127.0.0.1", "127.0.0.2", "127.0.0.3"];
    for i in 0..3 {
        let got = eventually(Duration::from_secs(5), || async {
            let ips = a_records(&cluster, i, &name).await;
            (ips == all).then_some(ips)
        })
        .await;
        assert!(
            got.is_some(),
            "edge {}: {:?}\n{}",
            i + 1,
            a_records(&cluster, i, &name).await,
            cluster.logs()
        );
    }
    // A dead edge leaves the answers when its lease ends (3 s).
    let killed = Instant::now();
    cluster.kill(0).await;
    for i in 1..3 {
        let got = eventually(Duration::from_secs(6), || async {
            let ips = a_records(&cluster, i, &name).await;
            (ips == all[1..]).then_some(ips)
        })
        .await;
        assert!(
            got.is_some(),
            "edge {} still answers the dead edge: {:?}",
            i + 1,
            a_records(&cluster, i, &name).await
        );
    }
    eprintln!(
        "the dead edge left the answers {:?} after the kill",
        killed.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_agent_whose_edge_dies_while_etcd_is_down_keeps_its_previews_until_it_is_back() {
    let mut etcd = Etcd::start().await;
    let mut cluster = ClusterEdges::start(3, &etcd).await;
    let origin = Origin::start().await;
    let agent = agent_with(&cluster, &[0, 1, 2], "alice", origin.port, "web").await;
    says_hello(&cluster, 1..2, "web", Duration::from_secs(5), "at first").await;
    etcd.stop().await;
    // Past the lease TTL: the edges know they cannot claim.
    tokio::time::sleep(Duration::from_secs(4)).await;
    cluster.kill(0).await;
    // The other edges refuse the agent's hello (they cannot claim its
    // name); it keeps the preview and goes on trying.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let list = agent.list().await;
    assert!(!list.connected, "{list:?}");
    assert_eq!(
        list.previews
            .iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>(),
        ["web"]
    );
    let log = cluster.log(1) + &cluster.log(2);
    assert!(log.contains("cannot reach the cluster's store"), "{log}");

    etcd.restart().await;
    says_hello(
        &cluster,
        1..3,
        "web",
        Duration::from_secs(20),
        "after etcd came back",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_preview_made_with_a_time_to_live_ends_on_every_edge() {
    const TTL: Duration = Duration::from_secs(12);
    let etcd = Etcd::start().await;
    let cluster = ClusterEdges::start(3, &etcd).await;
    let origin = Origin::start().await;
    let agent = connected_agent(&cluster, &[0], "alice").await;
    let request = calvin_agent::api::PreviewRequest {
        port: origin.port.into(),
        name: Some("brief".into()),
        ttl_secs: Some(TTL.as_secs() as i64),
        probe: Some(false),
        protect: None,
        expires_secs: None,
    };
    let made = Instant::now();
    let answer = agent.client().create(&request).await.expect("control API");
    assert!(answer.status.is_success(), "{answer:?}");
    // Every edge serves it before its end (asked at once, the end being
    // the same for all).
    let served = futures_util::future::join_all((0..3).map(|i| {
        let cluster = &cluster;
        async move {
            eventually(Duration::from_secs(8), || async {
                (get_on(cluster, i, "brief", "/hello").await.status == 200).then_some(())
            })
            .await
        }
    }))
    .await;
    assert!(
        served.iter().all(Option::is_some) && made.elapsed() < TTL,
        "every edge serves it before it ends: {served:?} at {:?}",
        made.elapsed()
    );
    tokio::time::sleep(TTL.saturating_sub(made.elapsed())).await;
    for i in 0..3 {
        let ended = eventually(Duration::from_secs(3), || async {
            let out = get_on(&cluster, i, "brief", "/hello").await;
            (out.status == 410).then_some(out)
        })
        .await
        .unwrap_or_else(|| panic!("edge {} says it ended:\n{}", i + 1, cluster.logs()));
        assert_eq!(ended.header("x-calvin-error"), Some("preview-ended"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_protected_preview_is_protected_on_every_edge_and_its_link_opens_it_on_each() {
    let etcd = Etcd::start().await;
    let cluster = ClusterEdges::start(3, &etcd).await;
    let origin = Origin::start().await;
    let agent = connected_agent(&cluster, &[0], "alice").await;
    let request = calvin_agent::api::PreviewRequest {
        port: origin.port.into(),
        name: Some("guarded".into()),
        ttl_secs: None,
        probe: Some(false),
        protect: Some(true),
        expires_secs: None,
    };
    let answer = agent.client().create(&request).await.expect("control API");
    let made: calvin_agent::api::PreviewCreated = answer.parse().expect("a protected preview");
    let token_of = |link: Option<&str>| {
        let link = link.expect("a share link");
        link.split_once("?calvin_share=")
            .expect("a token")
            .1
            .to_owned()
    };
    let first = token_of(made.share_url.as_deref());
    // One key for the cluster, in etcd, whichever edge put it.
    let keys = etcd.get_prefix("calvin/share_key").await;
    assert_eq!(keys.len(), 1, "{keys:?}");
    assert_eq!(keys[0].1.trim().len(), 64);
    let with = |token: &str| format!("/hello?calvin_share={token}");
    // Every edge refuses the URL alone and opens the link edge 1 made.
    for i in 0..3 {
        let refused = refused_on(&cluster, i, "/hello", "refuses the URL alone").await;
        assert_eq!(
            refused.header("x-calvin-error"),
            Some("share-token-missing")
        );
        let out = get_on(&cluster, i, "guarded", &with(&first)).await;
        assert_eq!(
            (out.status, out.text().as_str()),
            (200, "hello from origin\n"),
            "edge {}",
            i + 1
        );
    }
    // Rotation reaches every edge: the old link fails, the new one works.
    let rotated = agent
        .client()
        .protect(
            "guarded",
            &calvin_agent::api::ProtectRequest {
                rotate: true,
                ..Default::default()
            },
        )
        .await
        .expect("control API");
    let rotated: calvin_agent::api::Protected = rotated.parse().expect("rotated");
    let second = token_of(rotated.share_url.as_deref());
    for i in 0..3 {
        let revoked = refused_on(&cluster, i, &with(&first), "revokes the old link").await;
        assert_eq!(
            revoked.header("x-calvin-error"),
            Some("share-token-invalid")
        );
        let out = get_on(&cluster, i, "guarded", &with(&second)).await;
        assert_eq!(out.status, 200, "edge {}", i + 1);
    }
    // Refusals are counted by their code, as the others are.
    for i in 0..3 {
        let metrics = cluster.edges[i].metrics().await;
        for code in ["share-token-missing", "share-token-invalid"] {
            let series = format!(r#"calvin_edge_refusals_total{{code="{code}"}}"#);
            assert!(
                metrics.get(&series).is_some_and(|n| *n >= 1.0),
                "edge {}: {series} in {metrics:?}",
                i + 1
            );
        }
    }
}

/// What `cargo tree` lists of `package`'s normal and build dependencies
/// (from Cargo.lock, offline), one crate per line.
fn dependency_tree(package: &str) -> String {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["tree", "--offline", "--locked", "-p", package])
        .args(["-e", "normal,build", "--prefix", "none"])
        .current_dir(root)
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree -p {package}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The README's first command (`cargo run -p calvin-agent -- share 8000
/// --dev`) builds on a machine without protoc: the agent's embedded edge
/// leaves the cluster out, and with it the etcd client whose build script
/// runs protoc. The edge built on its own has them.
#[test]
fn the_agent_builds_without_the_etcd_client_that_needs_protoc() {
    let agent = dependency_tree("calvin-agent");
    assert!(
        agent.lines().any(|l| l.starts_with("calvin-edge ")),
        "the agent embeds the dev edge:\n{agent}"
    );
    for needs_protoc in ["etcd-client ", "tonic-prost-build ", "prost-build "] {
        assert!(
            !agent.lines().any(|l| l.starts_with(needs_protoc)),
            "calvin-agent depends on {needs_protoc}"
        );
    }
    let edge = dependency_tree("calvin-edge");
    assert!(
        edge.lines().any(|l| l.starts_with("etcd-client ")),
        "calvin-edge's default features include the cluster"
    );
}
