//! An agent given several edges (`--edge` more than once): it connects to
//! one, skips one that does not answer, and when its edge stops or is
//! killed it moves to another within seconds, where its preview serves
//! again under the same name.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use calvin_agent::api::PreviewList;
use calvin_tests::multi_edge::{ServeEdges, edges_sharing_a_ca, served_after, serves};
use calvin_tests::*;

/// How soon a preview must serve again from another edge once its edge
/// is gone, as the issue asks.
const MOVE_LIMIT: Duration = Duration::from_secs(10);

/// A UDP port that takes packets and never answers: an edge host that is
/// down (its packets vanish, no ICMP comes back).
fn black_hole() -> (std::net::UdpSocket, SocketAddr) {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").expect("udp");
    let addr = socket.local_addr().expect("addr");
    (socket, addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_whose_first_edge_is_down_connects_to_the_next_within_seconds() {
    let (_hole, down) = black_hole();
    let edge = TestEdge::start().await;
    let started = Instant::now();
    let agent =
        TestAgent::spawn_to_edges(&[down, edge.quic], &edge.ca(), &token_for("alice")).await;
    agent
        .agent
        .wait_connected(Duration::from_secs(10))
        .await
        .expect("the agent connects to the edge that is up");
    let took = started.elapsed();
    // One short handshake timeout on the dead edge, not QUIC's 10 s.
    assert!(took < Duration::from_secs(6), "connected after {took:?}");
    assert_eq!(agent.edge_now(), Some(edge.quic));

    let origin = Origin::start().await;
    let created = agent.preview(origin.port, None).await;
    assert_eq!(created.url, edge.url(&created.name));
    let out = curl(&edge.ca(), &[&format!("{}/bytes/100000", created.url)]).await;
    assert_eq!(out.status, 200, "{out:?}");
    assert!(out.body == pattern_bytes(100_000), "the bytes differ");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_preview_moves_to_the_other_edge_when_its_edge_stops() {
    let (mut edges, _dir) = edges_sharing_a_ca(2).await;
    let ca = edges[0].ca();
    let quics = [edges[0].quic, edges[1].quic];
    let agent = TestAgent::spawn_to_edges(&quics, &ca, &token_for("alice")).await;
    agent
        .agent
        .wait_connected(Duration::from_secs(10))
        .await
        .expect("connects");
    assert_eq!(agent.edge_now(), Some(quics[0]), "the first edge given");

    let origin = Origin::start().await;
    let created = agent.preview(origin.port, None).await;
    let name = created.name.clone();
    let body = pattern_bytes(100_000);
    let path = format!("/bytes/{}", body.len());
    assert_eq!(created.url, edges[0].url(&name));
    assert!(serves(&ca, &format!("{}{path}", edges[0].url(&name)), &body).await);

    let stopped = Instant::now();
    edges.remove(0).stop().await;
    let moved = served_after(
        &ca,
        &format!("{}{path}", edges[0].url(&name)),
        &body,
        stopped,
        MOVE_LIMIT,
    )
    .await;
    eprintln!("served from the other edge after {moved:?}");
    assert!(
        moved.is_some(),
        "not served from the other edge within {MOVE_LIMIT:?}"
    );
    assert_eq!(agent.edge_now(), Some(quics[1]));
    // The control API gives the new edge's URL, under the same name.
    let list: PreviewList = agent.list().await;
    assert!(list.connected);
    assert_eq!(list.previews.len(), 1);
    assert_eq!(list.previews[0].url, edges[0].url(&name));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_up_with_two_edges_leaves_a_killed_one_within_seconds() {
    let edges = ServeEdges::start(2).await;
    let socket = edges.dir.path().join("agent.sock");
    let path = |p: &std::path::Path| p.to_str().expect("utf-8 path").to_owned();
    let (a, b) = (
        edges.edges[0].quic.to_string(),
        edges.edges[1].quic.to_string(),
    );
    let mut up = Process::start(
        "calvin-agent",
        &[
            "up",
            "--edge",
            &a,
            "--edge",
            &b,
            "--token-file",
            &path(&edges.token_file),
            "--ca",
            &path(&edges.ca),
            "--server-name",
            "localhost",
            "--socket",
            &path(&socket),
        ],
    );
    up.line_after("control socket ").await;
    let origin = Origin::start().await;
    let created = preview_when_connected(&socket, origin.port).await;
    let name = created.name.clone();
    assert_eq!(created.url, edges.url(0, &name, ""), "the first edge given");
    let body = b"hello from origin\n";
    assert!(serves(&edges.ca, &edges.url(0, &name, "/hello"), body).await);

    // A crash: no close reaches the agent, only silence.
    send_signal(&edges.edges[0].child, "KILL").await;
    let killed = Instant::now();
    let moved = served_after(
        &edges.ca,
        &edges.url(1, &name, "/hello"),
        body,
        killed,
        MOVE_LIMIT,
    )
    .await;
    eprintln!("served from the other edge after {moved:?}");
    assert!(
        moved.is_some(),
        "not served from the surviving edge within {MOVE_LIMIT:?}:\n{}",
        edges.edges[1].log()
    );

    // `ls` says so: connected, the same name, the new edge's URL.
    let out = tokio::process::Command::new(binary("calvin-agent"))
        .args(["ls", "--socket", &path(&socket)])
        .output()
        .await
        .expect("calvin-agent ls");
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let url = edges.url(1, &name, "");
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with(&name) && l.ends_with(&url)),
        "{stdout}"
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!("connected to {b}\n"),
        "the edge it moved to, no 'not connected' note"
    );
    let out = tokio::process::Command::new(binary("calvin-agent"))
        .args(["ls", "--json", "--socket", &path(&socket)])
        .output()
        .await
        .expect("calvin-agent ls --json");
    let list: PreviewList = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(list.edge.as_deref(), Some(b.as_str()));
    up.signal("TERM").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn share_takes_edge_twice_and_serves_through_the_one_that_is_up() {
    let (_hole, down) = black_hole();
    let edge = TestEdge::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let token_file = dir.path().join("token");
    write_secret(&token_file, &token_for("bob"));
    let origin = Origin::start().await;
    let port = origin.port.to_string();
    let (down, up) = (down.to_string(), edge.quic.to_string());
    let ca = edge.ca();
    let mut share = Process::start(
        "calvin-agent",
        &[
            "share",
            &port,
            "--name",
            "two-edges",
            "--edge",
            &down,
            "--edge",
            &up,
            "--token-file",
            token_file.to_str().expect("path"),
            "--ca",
            ca.to_str().expect("path"),
            "--server-name",
            "localhost",
        ],
    );
    let url = format!("https://{}", share.line_after("https://").await);
    assert_eq!(url, edge.url("two-edges"));
    let out = curl(&ca, &[&format!("{url}/hello")]).await;
    assert_eq!(
        (out.status, out.text().as_str()),
        (200, "hello from origin\n")
    );
    share.signal("TERM").await;
}
