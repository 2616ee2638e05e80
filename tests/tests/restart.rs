//! The edge goes away and comes back: the agent reconnects by itself and
//! the same URL serves again.

use std::time::{Duration, Instant};

use calvin_tests::*;

async fn serves(ca: &std::path::Path, url: &str) -> Option<()> {
    let out = curl(ca, &["--max-time", "2", url]).await;
    (out.status == 200 && out.text() == "hello from origin\n").then_some(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_edge_restart_same_url_serves_again_within_15_s() {
    let state = tempfile::tempdir().expect("tempdir");
    let listen = edge_addresses();
    let options = || EdgeOptions {
        state_dir: Some(state.path().join("edge")),
        listen: Some(listen),
        ..Default::default()
    };
    let edge = TestEdge::start_with(options()).await;
    let agent = TestAgent::start(&edge, "alice").await;
    let origin = Origin::start().await;
    let created = agent.preview(origin.port, None).await;
    let url = format!("{}/hello", created.url);
    assert!(serves(&edge.ca(), &url).await.is_some());

    edge.stop().await;
    let down = curl(
        &state.path().join("edge/ca.pem"),
        &["--max-time", "2", &url],
    )
    .await;
    assert_eq!(down.status, 0, "nothing answers while the edge is down");

    let started = Instant::now();
    let edge = TestEdge::start_again(options()).await;
    let ca = edge.ca();
    // The first request waits for the agent to be back, rather than
    // answering "no preview named ..." before it is.
    let first = curl(&ca, &["--max-time", "10", &url]).await;
    assert_eq!(
        (first.status, first.text().as_str()),
        (200, "hello from origin\n"),
        "{first:?}"
    );
    eprintln!(
        "served again {:?} after the edge restarted",
        started.elapsed()
    );

    // Under the same name, and the agent still lists it as before.
    let list = agent.list().await;
    assert!(list.connected);
    assert_eq!(list.previews.len(), 1);
    assert_eq!(list.previews[0].url, created.url);
}

/// The edge binary is killed (no goodbye to its agents) and started again
/// on the same ports: the agent learns at once from the new edge's
/// stateless reset, reconnects and registers its preview again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_edge_binary_restarts_and_the_agent_binary_reconnects_within_15_s() {
    let state = tempfile::tempdir().expect("tempdir");
    let edge_dir = state.path().join("edge");
    let any = "127.0.0.1:0";
    let edge = EdgeProcess::start(&edge_dir, any, any, any).await;
    let ca = edge_dir.join("ca.pem");

    let socket = state.path().join("agent.sock");
    let mut agent = agent_up(&edge_dir, edge.quic, &socket).await;
    let quic = edge.quic.to_string();
    let origin = Origin::start().await;
    let created = preview_when_connected(&socket, origin.port).await;
    let url = format!("{}/hello", created.url);
    assert!(serves(&ca, &url).await.is_some());

    edge.process.signal("KILL").await;
    let (https, http) = (edge.https.to_string(), edge.http.to_string());
    drop(edge);
    let started = Instant::now();
    let _edge = EdgeProcess::start(&edge_dir, &https, &http, &quic).await;
    // Until the agent is back (at its next keep-alive), requests wait for
    // it (as long as for an offline preview, and one keep-alive more), then
    // get a 503 to retry: none is answered "no preview named ..." (a 404 a
    // link preview may keep).
    let mut answers = Vec::new();
    while started.elapsed() < Duration::from_secs(15) {
        let out = curl(&ca, &["--max-time", "10", &url]).await;
        answers.push(out.status);
        if out.status == 200 {
            assert_eq!(out.text(), "hello from origin\n");
            break;
        }
        assert_eq!(out.status, 503, "{out:?}");
        assert_eq!(
            out.header("x-calvin-error"),
            Some("not-back-yet"),
            "{out:?}"
        );
        assert_eq!(out.header("retry-after"), Some("5"), "{out:?}");
    }
    assert_eq!(
        answers.last(),
        Some(&200),
        "the URL did not serve again within 15 s: {answers:?}"
    );
    eprintln!(
        "served again {:?} after the killed edge restarted ({answers:?})",
        started.elapsed()
    );
    agent.signal("TERM").await;
    let status = tokio::time::timeout(Duration::from_secs(10), agent.child.wait())
        .await
        .expect("agent exits on SIGTERM")
        .expect("status");
    assert!(status.success());
    assert!(!socket.exists(), "the agent removes its socket on exit");
}
