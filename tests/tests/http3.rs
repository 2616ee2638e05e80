//! HTTP/3 visitors on the agents' QUIC endpoint: a real client (aioquic,
//! through tests/h3client.py) gets what curl gets over HTTP/1.1 and
//! HTTP/2, and agents and visitors share the endpoint without either
//! starving the other or taking the other's limits.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use calvin_agent::{EdgeAddress, LinkState};
use calvin_tests::h3::{h3_connect, h3_get, h3_url, h3client};
use calvin_tests::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gets_of_1_kib_and_64_mib_are_byte_exact() {
    let s = PreviewSetup::start().await;
    let name = &s.created.name;
    for len in [1024usize, 64 << 20] {
        let url = h3_url(&s.edge, name, &format!("/bytes/{len}"));
        let out = h3client(&s.edge, &url, &[]).await;
        assert_eq!(out.code, 0, "{len}: {}", out.stderr);
        assert_eq!(out.status(), 200, "{len}: {:?}", out.summary);
        assert_eq!(out.body_bytes(), len as u64);
        assert_eq!(out.body_sha256(), sha256_hex(&pattern_bytes(len)), "{len}");
        // The agent side is unchanged: the origin got one HTTP/1.1 request
        // with the visitor's Host.
        assert_eq!(out.header("content-length"), Some(len.to_string()));
    }
    assert_eq!(s.origin.requests(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_10_mib_post_reaches_the_origin_whole() {
    let s = PreviewSetup::start().await;
    const LEN: usize = 10 << 20;
    let data: Vec<u8> = (0..LEN).map(|i| (i * 7 + i / 251) as u8).collect();
    let mut file = tempfile::NamedTempFile::new().expect("temp file");
    file.write_all(&data).expect("write");
    let path = file.path().display().to_string();
    let name = &s.created.name;

    // Declared length (read ahead, then streamed): the origin's hash of
    // what it got, written to a file as it came.
    let dir = tempfile::tempdir().expect("tempdir");
    let out_file = dir.path().join("answer");
    let out_path = out_file.display().to_string();
    let url = h3_url(&s.edge, name, "/sha256");
    let out = h3client(
        &s.edge,
        &url,
        &["-X", "POST", "--data-file", &path, "-o", &out_path],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.status(), 200, "{:?}", out.summary);
    assert_eq!(
        std::fs::read_to_string(&out_file).expect("answer file"),
        format!("{} {LEN}\n", sha256_hex(&data))
    );

    // And echoed back whole.
    let url = h3_url(&s.edge, name, "/echo");
    let echo = h3client(&s.edge, &url, &["-X", "POST", "--data-file", &path]).await;
    assert_eq!(echo.status(), 200, "{}", echo.stderr);
    assert_eq!(echo.body_bytes(), LEN as u64);
    assert_eq!(echo.body_sha256(), sha256_hex(&data));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_arrive_as_written_and_a_silent_stream_outlives_the_idle_timeout() {
    let s = PreviewSetup::start().await;
    let name = &s.created.name;
    let url = h3_url(&s.edge, name, "/events");
    let out = h3client(&s.edge, &url, &["--events"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.status(), 200);
    let texts: Vec<&str> = out.events.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(
        texts,
        [
            "data: event 0\n\n",
            "data: event 1\n\n",
            "data: event 2\n\n"
        ],
        "each event its own DATA frame, unbuffered"
    );
    for pair in out.events.windows(2) {
        let gap = pair[1].1 - pair[0].1;
        assert!(
            (200.0..=450.0).contains(&gap),
            "events 300 ms apart arrived {gap} ms apart: {:?}",
            out.events
        );
    }

    // 15 s between events: longer than the QUIC idle timeout (12 s), which
    // the edge's keep-alive of a connection with a request open covers.
    let url = h3_url(&s.edge, name, "/events?gap_ms=15000");
    let out = h3client(&s.edge, &url, &["--events", "--timeout", "60"]).await;
    assert_eq!(out.code, 0, "the silent stream was cut: {}", out.stderr);
    assert_eq!(out.events.len(), 3, "{:?}", out.events);
    let last = out.events[2].1;
    assert!(last >= 29_000.0, "{:?}", out.events);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_edge_answers_errors_and_bad_hosts_as_over_tcp() {
    let s = PreviewSetup::start().await;
    let port = s.edge.quic.port();

    // No such preview: the edge's page, its code, its request id.
    let url = h3_url(&s.edge, "no-such-preview", "/");
    let out = h3client(&s.edge, &url, &[]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.status(), 404);
    assert_eq!(
        out.header("x-calvin-error").as_deref(),
        Some("unknown-preview")
    );
    assert!(out.header("x-request-id").is_some(), "{:?}", out.summary);
    let html = h3client(&s.edge, &url, &["-H", "Accept: text/html"]).await;
    assert_eq!(
        html.header("content-type").as_deref(),
        Some("text/html; charset=utf-8")
    );

    // A host under another domain is misdirected; a Host header naming
    // another host than :authority is refused.
    // (Its name is not the certificate's: the client is told not to
    // check, as a scanner would not.)
    let foreign = format!("https://example.com:{port}/");
    let out = h3client(&s.edge, &foreign, &["-k"]).await;
    assert_eq!(out.status(), 421, "{:?} {}", out.summary, out.stderr);
    let url = h3_url(&s.edge, &s.created.name, "/hello");
    let out = h3client(&s.edge, &url, &["-H", "Host: other.preview.test"]).await;
    // HTTP/3 calls that request malformed (RFC 9114 4.3.1): its stream is
    // reset with H3_MESSAGE_ERROR before the proxy sees it.
    assert_eq!(
        out.code, 3,
        "a stream reset: {:?} {}",
        out.summary, out.stderr
    );
    assert!(out.stderr.contains("0x10e"), "{}", out.stderr);
    // The bare domain is no preview (its name is not the wildcard
    // certificate's).
    let bare = format!("https://{}:{port}/", s.edge.domain);
    let out = h3client(&s.edge, &bare, &["-k"]).await;
    assert_eq!(out.status(), 404, "{:?} {}", out.summary, out.stderr);
    assert_eq!(
        out.header("x-calvin-error").as_deref(),
        Some("not-a-preview")
    );

    // A body shorter than its Content-Length is malformed (RFC 9114
    // 4.1.2): refused, and the origin never sees it (passed on, the
    // origin's connection would take the next request's bytes for it).
    let seen = s.origin.requests();
    let out = h3client(
        &s.edge,
        &h3_url(&s.edge, &s.created.name, "/sha256"),
        &["-X", "POST", "-H", "content-length: 40"],
    )
    .await;
    assert_eq!(out.status(), 400, "{:?} {}", out.summary, out.stderr);
    assert_eq!(
        out.header("x-calvin-error").as_deref(),
        Some("bad-request-body")
    );
    assert_eq!(
        s.origin.requests(),
        seen,
        "the origin got the short request"
    );

    // A URI past the limit: 414, as over TCP.
    let long = format!("/{}", "a".repeat(9000));
    let out = h3client(&s.edge, &h3_url(&s.edge, &s.created.name, &long), &[]).await;
    assert_eq!(out.status(), 414, "{:?} {}", out.summary, out.stderr);

    // An offline preview.
    s.agent.stop().await;
    let out = eventually(Duration::from_secs(15), || {
        let url = url.clone();
        let edge = &s.edge;
        async move {
            let out = h3client(edge, &url, &[]).await;
            (out.status() == 502).then_some(out)
        }
    })
    .await
    .expect("502 once the agent is gone");
    assert_eq!(
        out.header("x-calvin-error").as_deref(),
        Some("agent-offline")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_racing_an_agent_restart_is_answered_by_the_new_agent() {
    let s = PreviewSetup::start().await;
    let name = s.created.name.clone();
    s.agent.stop().await;
    // The name is offline now: a request waits for it (reconnect_wait_secs).
    let url = h3_url(&s.edge, &name, "/hello");
    let edge = &s.edge;
    let request = h3client(edge, &url, &[]);
    let restart = async {
        tokio::time::sleep(Duration::from_millis(800)).await;
        let agent = TestAgent::start(&s.edge, "alice").await;
        let again = agent.preview(s.origin.port, Some(&name)).await;
        assert_eq!(again.name, name);
        agent
    };
    let (out, _agent) = tokio::join!(request, restart);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.status(), 200, "{:?}", out.summary);
    assert_eq!(out.body_bytes(), "hello from origin\n".len() as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alt_svc_advertises_http3_over_tcp_only() {
    let s = PreviewSetup::start().await;
    let want = format!("h3=\":{}\"; ma=86400", s.edge.quic.port());
    for version in ["--http1.1", "--http2"] {
        let out = curl(&s.edge.ca(), &[version, &s.url("/hello")]).await;
        assert_eq!(out.status, 200);
        assert_eq!(out.header("alt-svc"), Some(want.as_str()), "{version}");
        // The edge's own answers too.
        let out = curl(&s.edge.ca(), &[version, &s.edge.url("no-such-preview")]).await;
        assert_eq!(out.header("alt-svc"), Some(want.as_str()), "{version}");
    }
    // Plain HTTP does not: HTTP/3 is an alternative to HTTPS.
    let plain = format!("{}/hello", s.edge.http_url(&s.created.name));
    let out = curl(&s.edge.ca(), &[&plain]).await;
    assert_eq!(out.status, 200);
    assert_eq!(out.header("alt-svc"), None);
    // Nor does HTTP/3 itself.
    let url = h3_url(&s.edge, &s.created.name, "/hello");
    let out = h3client(&s.edge, &url, &[]).await;
    assert_eq!(out.status(), 200);
    assert_eq!(out.header("alt-svc"), None);

    // An edge that does not advertise it (the dev edge's choice) still
    // serves it.
    let quiet = TestEdge::start_with(EdgeOptions {
        http3: calvin_edge::Http3Settings {
            enabled: true,
            advertise: false,
            port: None,
        },
        ..EdgeOptions::default()
    })
    .await;
    let s = PreviewSetup::on(quiet).await;
    let out = curl(&s.edge.ca(), &[&s.url("/hello")]).await;
    assert_eq!(out.header("alt-svc"), None);
    let out = h3client(&s.edge, &h3_url(&s.edge, &s.created.name, "/hello"), &[]).await;
    assert_eq!(out.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_with_http3_off_refuses_it_and_serves_agents() {
    let edge = TestEdge::start_with(EdgeOptions {
        http3: calvin_edge::Http3Settings {
            enabled: false,
            advertise: false,
            port: None,
        },
        ..EdgeOptions::default()
    })
    .await;
    let s = PreviewSetup::on(edge).await;
    let out = h3client(&s.edge, &h3_url(&s.edge, &s.created.name, "/hello"), &[]).await;
    assert_ne!(out.code, 0, "an h3 handshake must fail: {:?}", out.summary);
    let out = curl(&s.edge.ca(), &[&s.url("/hello")]).await;
    assert_eq!(out.status, 200);
    assert_eq!(out.header("alt-svc"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn visitors_are_not_held_to_the_agents_limits_nor_agents_to_theirs() {
    let s = PreviewSetup::start().await;
    let name = &s.created.name;

    // 40 requests at once on one connection: past the 4 streams an agent
    // may open.
    let url = h3_url(&s.edge, name, "/slow?ms=500");
    let out = h3client(&s.edge, &url, &["--parallel", "40"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let responses = out.summary["responses"].as_array().expect("responses");
    assert_eq!(responses.len(), 40);
    assert!(
        responses.iter().all(|r| r["status"] == 200),
        "{responses:?}"
    );
    let total = out.summary["total_ms"].as_f64().expect("total_ms");
    assert!(
        total < 5_000.0,
        "40 requests of 500 ms each took {total} ms: they did not run together"
    );

    // More visitor connections from one address than the unknown tokens an
    // address may send (agents' guessing limit): an agent from it still
    // connects.
    let mut conns = Vec::new();
    for _ in 0..calvin_edge::guesses::MAX_UNKNOWN_TOKENS * 2 {
        let (conn, mut send) = h3_connect(s.edge.quic, &s.edge.ca()).await;
        let url = h3_url(&s.edge, name, "/hello");
        let (status, _) = h3_get(&mut send, &url).await.expect("h3 GET");
        assert_eq!(status, 200);
        conns.push((conn, send));
    }
    let agent = TestAgent::start(&s.edge, "bob").await;
    assert!(agent.edge_now().is_some());

    // An agent's connection takes no uni stream (HTTP/3's are for
    // visitors): one it opens is stopped.
    let address = EdgeAddress::new(
        &s.edge.quic.to_string(),
        Some(&s.edge.ca()),
        Some("localhost"),
    )
    .expect("edge address");
    let conn = address.connect().await.expect("agent handshake");
    let mut uni = conn
        .open_uni()
        .await
        .expect("a uni stream within the credit");
    let _ = uni.write_all(b"not for the edge").await;
    let stopped = tokio::time::timeout(Duration::from_secs(5), uni.stopped())
        .await
        .expect("the edge stops it");
    assert_eq!(
        stopped.expect("stopped, not lost"),
        Some(calvin_proto::close_code::PROTOCOL.into())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http3_flood_does_not_cut_an_agent_off() {
    // No per-address rate: every request of the flood is proxied.
    let edge = TestEdge::with_limits(calvin_edge::Limits {
        requests_per_second_per_ip: 0,
        requests_per_second_per_preview: 0,
        ..calvin_edge::Limits::default()
    })
    .await;
    let s = PreviewSetup::on(edge).await;
    let url = h3_url(&s.edge, &s.created.name, "/bytes/1024");

    // Whether the agent's link left Connected at any time.
    let mut state = s.agent.agent.state();
    let dropped = Arc::new(AtomicBool::new(false));
    let watcher = {
        let dropped = dropped.clone();
        tokio::spawn(async move {
            while state.changed().await.is_ok() {
                if !matches!(*state.borrow(), LinkState::Connected(_)) {
                    dropped.store(true, Ordering::Relaxed);
                }
            }
        })
    };

    // 16 connections of 8 requests at a time each, for longer than the
    // agent's idle timeout (12 s, three of its keep-alives).
    const FLOOD: Duration = Duration::from_secs(15);
    let ok = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let until = Instant::now() + FLOOD;
    let mut flood = Vec::new();
    for _ in 0..16 {
        let (_conn, send) = h3_connect(s.edge.quic, &s.edge.ca()).await;
        for _ in 0..8 {
            let (mut send, url) = (send.clone(), url.clone());
            let (ok, failed) = (ok.clone(), failed.clone());
            flood.push(tokio::spawn(async move {
                while Instant::now() < until {
                    match h3_get(&mut send, &url).await {
                        Some((200, body)) if body.len() == 1024 => {
                            ok.fetch_add(1, Ordering::Relaxed)
                        }
                        _ => failed.fetch_add(1, Ordering::Relaxed),
                    };
                }
            }));
        }
    }
    // Meanwhile, over HTTPS, the preview answers.
    let mut during = Vec::new();
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_secs(3)).await;
        during.push(curl(&s.edge.ca(), &[&s.url("/hello")]).await.status);
    }
    for task in flood {
        let _ = task.await;
    }
    watcher.abort();
    let (ok, failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    assert!(
        ok >= 1_000,
        "the flood was not one: {ok} answered in {FLOOD:?}"
    );
    assert_eq!(failed, 0, "{failed} flood requests failed ({ok} answered)");
    assert!(
        !dropped.load(Ordering::Relaxed),
        "the agent's connection dropped during the flood"
    );
    assert!(during.iter().all(|&status| status == 200), "{during:?}");
    let out = curl(&s.edge.ca(), &[&s.url("/hello")]).await;
    assert_eq!(out.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_edge_finishes_http3_requests_under_way() {
    let mut s = PreviewSetup::start().await;
    let url = h3_url(&s.edge, &s.created.name, "/slow?ms=2500");
    let (quic, ca) = (s.edge.quic, s.edge.ca());
    let request =
        tokio::spawn(async move { calvin_tests::h3::h3client_at(quic, &ca, &url, &[]).await });
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let stopped = s.edge.begin_stop();
    let out = request.await.expect("request task");
    let summary = &out.summary;
    assert_eq!(
        summary["status"], 200,
        "the request under way finishes: {summary} {}",
        out.stderr
    );
    assert_eq!(summary["body_bytes"], "slow\n".len());
    // Nothing else holds the stop: not the agent's connection, not the
    // visitor's, closed once its request was done.
    let took = Instant::now();
    tokio::time::timeout(Duration::from_secs(10), stopped)
        .await
        .expect("the edge stops once the request is done")
        .expect("edge task");
    assert!(took.elapsed() < Duration::from_secs(10));
}
