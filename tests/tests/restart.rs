//! The edge goes away and comes back: the agent reconnects by itself and
//! the same URL serves again.

use std::time::{Duration, Instant};

use calvin_tests::h3::{h3_url, h3client_at};
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

/// Every front's answer for `name` on `edge`, asked at once and each
/// given `within` seconds: HTTPS over HTTP/1.1 and HTTP/2, HTTP/3, plain
/// HTTP; as (front, status, the edge's error code).
async fn every_front(
    edge: &TestEdge,
    name: &str,
    within: &str,
) -> Vec<(&'static str, u16, String)> {
    let http = format!("{}/hello", edge.http_url(name));
    let https = format!("{}/hello", edge.url(name));
    let h3 = h3_url(edge, name, "/hello");
    every_front_at(&edge.ca(), &https, &http, &h3, edge.quic, within).await
}

/// The time an answer "at once" is given: less than a request waits for
/// an agent (`reconnect_wait_secs`, and a keep-alive more after a restart),
/// which is the wrong answer's way.
const AT_ONCE: &str = "4";

/// [`every_front`] for the URLs of any edge: its HTTPS and plain HTTP
/// URLs, and its HTTP/3 URL, served at `quic`.
async fn every_front_at(
    ca: &std::path::Path,
    https: &str,
    http: &str,
    h3: &str,
    quic: std::net::SocketAddr,
    within: &str,
) -> Vec<(&'static str, u16, String)> {
    let code = |out: &CurlOutput| out.header("x-calvin-error").unwrap_or_default().to_owned();
    let (h1_args, h2_args) = (
        ["--http1.1", "--max-time", within, https],
        ["--http2", "--max-time", within, https],
    );
    let plain_args = ["--max-time", within, http];
    let h3_args = ["--timeout", within];
    let (h1, h2, plain, h3) = tokio::join!(
        curl(ca, &h1_args),
        curl(ca, &h2_args),
        curl(ca, &plain_args),
        h3client_at(quic, ca, h3, &h3_args),
    );
    vec![
        ("h1", h1.status, code(&h1)),
        ("h2", h2.status, code(&h2)),
        ("plain http", plain.status, code(&plain)),
        (
            "h3",
            u16::try_from(h3.status()).unwrap_or_default(),
            h3.header("x-calvin-error").unwrap_or_default(),
        ),
    ]
}

fn all_answer(answers: &[(&str, u16, String)], status: u16, code: &str) {
    for (front, got, got_code) in answers {
        assert_eq!(
            (*got, got_code.as_str()),
            (status, code),
            "{front}: {answers:?}"
        );
    }
}

/// A new edge has served nothing before: a mistyped name is "no such
/// preview" from its first second, on every front, never "the edge
/// restarted moments ago" (`calvin-edge dev` on a new state folder, as a
/// new user starts it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_edge_answers_an_unknown_name_404_at_once_on_every_front() {
    let state = tempfile::tempdir().expect("tempdir");
    let edge_dir = state.path().join("edge");
    let any = "127.0.0.1:0";
    let edge = EdgeProcess::start(&edge_dir, any, any, any).await;
    let started = Instant::now();
    let https = format!("{}/", edge.url_template.replace("{name}", "nosuchname"));
    let http = format!("http://nosuchname.{DOMAIN}:{}/", edge.http.port());
    let h3 = format!("https://nosuchname.{DOMAIN}:{}/", edge.quic.port());
    let ca = edge_dir.join("ca.pem");
    let answers = every_front_at(&ca, &https, &http, &h3, edge.quic, AT_ONCE).await;
    all_answer(&answers, 404, "unknown-preview");
    eprintln!("answered {answers:?} within {:?}", started.elapsed());
}

/// The names an edge served are expected back after it restarts, and only
/// those: one whose agent is still away hears "retry shortly" (503), a
/// name it never served "no such preview" (404) at once, and a name whose
/// agent came back and took it down since is 404 at once too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_only_the_names_served_before_and_not_back_get_503() {
    let state = tempfile::tempdir().expect("tempdir");
    let listen = edge_addresses();
    let options = || EdgeOptions {
        state_dir: Some(state.path().join("edge")),
        listen: Some(listen),
        // A short wait for agents: the 503 comes after it.
        limits: calvin_edge::Limits {
            reconnect_wait_secs: 1,
            ..Default::default()
        },
        ..Default::default()
    };
    let edge = TestEdge::start_with(options()).await;
    let origin = Origin::start().await;
    let stays = TestAgent::start(&edge, "alice").await;
    stays.preview(origin.port, Some("demo")).await;
    let leaves = TestAgent::start(&edge, "bob").await;
    leaves.preview(origin.port, Some("away")).await;
    assert!(
        serves(&edge.ca(), &format!("{}/hello", edge.url("away")))
            .await
            .is_some()
    );

    edge.stop().await;
    // bob's agent does not come back.
    leaves.stop().await;
    let edge = TestEdge::start_again(options()).await;
    let restarted = Instant::now();
    // At once, before any agent is back: the name served before waits for
    // its agent, then hears "retry shortly"; a name never served is
    // unknown.
    let (away, typo) = tokio::join!(
        every_front(&edge, "away", "20"),
        every_front(&edge, "typo", AT_ONCE)
    );
    all_answer(&away, 503, "not-back-yet");
    all_answer(&typo, 404, "unknown-preview");
    eprintln!(
        "away {away:?}, typo {typo:?}, {:?} after the restart",
        restarted.elapsed()
    );
    // The names are still their owners': another account's agent cannot
    // take one while its own is away.
    let other = TestAgent::start(&edge, "bob").await;
    let taken = other.try_preview(origin.port.into(), Some("demo")).await;
    let said = String::from_utf8_lossy(&taken.body);
    assert!(said.contains("belongs to another account"), "{said}");

    // alice's agent comes back with demo (at its next keep-alive); she
    // then takes it down: unknown at once, on every front.
    let demo = format!("{}/hello", edge.url("demo"));
    let mut statuses = Vec::new();
    while restarted.elapsed() < Duration::from_secs(15) {
        let out = curl(&edge.ca(), &["--max-time", "10", &demo]).await;
        statuses.push(out.status);
        if out.status == 200 {
            break;
        }
    }
    assert_eq!(
        statuses.last(),
        Some(&200),
        "demo is served again: {statuses:?}"
    );
    stays
        .client()
        .unpreview("demo")
        .await
        .expect("control API answers");
    all_answer(
        &every_front(&edge, "demo", AT_ONCE).await,
        404,
        "unknown-preview",
    );
}
