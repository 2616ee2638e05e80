//! What goes wrong between a visitor and an origin, and what each side
//! sees: cut-off transfers, slow uploads, idle pools, dead agents, silent
//! visitors, headers that must not cross.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use calvin_edge::Limits;
use calvin_tests::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `n` requests at once to a preview, each held 500 ms by the origin, so
/// each needs its own upstream connection; all must answer 200.
async fn burst(edge: &TestEdge, url: &str, n: usize) {
    let requests: Vec<_> = (0..n)
        .map(|_| {
            let (ca, url) = (edge.ca(), format!("{url}/slow?ms=500"));
            tokio::spawn(async move { curl(&ca, &[&url]).await.status })
        })
        .collect();
    for request in requests {
        assert_eq!(request.await.expect("task"), 200);
    }
}

/// A server that answers with the start of a body and then resets the
/// connection: a dev server crashing mid-response.
async fn crashing_server(head: &'static str) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let _ = stream.read(&mut buf).await;
                let _ = stream.write_all(head.as_bytes()).await;
                let _ = stream.write_all(b"partial body").await;
                let _ = stream.flush().await;
                tokio::time::sleep(Duration::from_millis(100)).await;
                let _ = stream.set_zero_linger();
            });
        }
    });
    port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_origin_crash_mid_body_never_looks_like_a_complete_response() {
    let edge = TestEdge::start().await;
    let agent = TestAgent::start(&edge, "alice").await;
    for (name, head) in [
        // Delimited by the end of the connection: only a reset tells
        // "cut off" from "complete".
        ("closing", "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n"),
        ("sized", "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n"),
        (
            "chunked",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nc\r\n",
        ),
    ] {
        let port = crashing_server(head).await;
        let created = agent.preview(port, Some(name)).await;
        for version in ["--http1.1", "--http2"] {
            let out = curl(&edge.ca(), &[version, &created.url]).await;
            let failed = out.stderr.contains("curl: (");
            assert!(
                failed,
                "{name} {version}: curl saw a complete response: {} {:?} {}",
                out.status,
                out.text(),
                out.stderr
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_longer_than_the_response_timeout_passes() {
    let edge = TestEdge::with_limits(Limits {
        upstream_timeout_secs: 1,
        ..Default::default()
    })
    .await;
    let agent = TestAgent::start(&edge, "alice").await;
    let origin = Origin::start().await;
    let created = agent.preview(origin.port, None).await;
    let data: Vec<u8> = (0..600_000u32).map(|i| (i % 241) as u8).collect();
    let mut file = tempfile::NamedTempFile::new().expect("file");
    std::io::Write::write_all(&mut file, &data).expect("write");
    let started = Instant::now();
    // 600 kB at 200 kB/s: three seconds of upload against a 1 s timeout.
    let out = curl(
        &edge.ca(),
        &[
            "--limit-rate",
            "200K",
            "--data-binary",
            &format!("@{}", file.path().display()),
            &format!("{}/sha256", created.url),
        ],
    )
    .await;
    assert!(
        started.elapsed() > Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(out.status, 200, "{out:?}");
    assert_eq!(
        out.text(),
        format!("{} {}\n", sha256_hex(&data), data.len())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_with_a_chunked_body_keeps_its_body() {
    let s = PreviewSetup::start().await;
    let edge = &s.edge;
    let created = &s.created;
    for version in ["--http1.1", "--http2"] {
        let out = curl(
            &edge.ca(),
            &[
                version,
                "-X",
                "GET",
                "-H",
                "Transfer-Encoding: chunked",
                "--data-binary",
                "hello",
                &format!("{}/sha256", created.url),
            ],
        )
        .await;
        assert_eq!(
            out.text(),
            format!("{} 5\n", sha256_hex(b"hello")),
            "{version}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_lose_hop_by_hop_headers_and_zone_wide_cookies() {
    let edge = TestEdge::start().await;
    let agent = TestAgent::start(&edge, "alice").await;
    let origin = Origin::start().await;
    let created = agent.preview(origin.port, Some("jar")).await;

    let out = curl(&edge.ca(), &["--http1.1", &format!("{}/hop", created.url)]).await;
    assert_eq!(out.status, 200);
    for gone in ["x-internal", "keep-alive", "proxy-authenticate"] {
        assert_eq!(out.header(gone), None, "{gone} reached the visitor");
    }
    assert_eq!(out.header("x-end-to-end"), Some("kept"));

    let out = curl(&edge.ca(), &[&format!("{}/cookies", created.url)]).await;
    let cookies: Vec<&str> = out
        .headers
        .iter()
        .filter(|(n, _)| n == "set-cookie")
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(
        cookies,
        [
            "plain=1; Path=/",
            &format!("own=1; Domain=jar.{DOMAIN}") as &str
        ],
        "a cookie for the whole preview zone must not pass"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pooled_connections_are_reused_then_closed_when_idle() {
    let edge = TestEdge::with_limits(Limits {
        upstream_idle_timeout_secs: 1,
        ..Default::default()
    })
    .await;
    let agent = TestAgent::start(&edge, "alice").await;
    let origin = Origin::start().await;
    let created = agent.preview(origin.port, None).await;
    let url = format!("{}/hello", created.url);
    for _ in 0..5 {
        assert_eq!(curl(&edge.ca(), &[&url]).await.status, 200);
    }
    // The preview probe, then one upstream connection for five visitors.
    assert_eq!(origin.accepted.load(Ordering::SeqCst), 2);
    let settled = wait_until(Duration::from_secs(5), || {
        origin.open.load(Ordering::SeqCst) == 0
    })
    .await;
    assert!(settled, "the idle connection was kept past its timeout");
    assert_eq!(curl(&edge.ca(), &[&url]).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_stay_within_the_agents_budget() {
    let edge = TestEdge::with_limits(Limits {
        upstream_max_idle_per_agent: 4,
        ..Default::default()
    })
    .await;
    let agent = TestAgent::start(&edge, "alice").await;
    let origin = Origin::start().await;
    let busy = agent.preview(origin.port, Some("busy")).await;
    let other = agent.preview(origin.port, Some("other")).await;

    // Ten requests at once open ten upstream connections...
    burst(&edge, &busy.url, 10).await;
    // ...of which the agent's budget keeps four.
    let settled = wait_until(Duration::from_secs(5), || {
        origin.open.load(Ordering::SeqCst) == 4
    })
    .await;
    assert!(
        settled,
        "{} connections open",
        origin.open.load(Ordering::SeqCst)
    );
    let out = curl(&edge.ca(), &[&format!("{}/hello", other.url)]).await;
    assert_eq!(out.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_agent_reads_offline_within_2_s() {
    let dev = DevPreview::start().await;
    let (agent, created, ca) = (&dev.agent, &dev.created, &dev.ca);
    assert_eq!(
        curl(ca, &[&format!("{}/hello", created.url)]).await.status,
        200
    );

    // No goodbye: a request waiting on the agent when it dies gets 502
    // within 2 s (the edge probes a silent agent), not at QUIC's 12 s idle
    // timeout. One sent after the kill, which the edge had not yet passed
    // on when it found the agent gone, waits for the agent as for any
    // agent away (5 s from its arrival), then gets 502.
    let before = dev.origin.requests();
    let waiting = {
        let (ca, url) = (ca.clone(), format!("{}/slow?ms=10000", created.url));
        tokio::spawn(async move {
            let out = curl(&ca, &["--max-time", "30", &url]).await;
            (out, Instant::now())
        })
    };
    // The slow one is in flight once the origin has it.
    dev.origin.has_seen(before + 1).await;
    agent.signal("KILL").await;
    let killed = Instant::now();
    let out = curl(ca, &["--max-time", "30", &format!("{}/hello", created.url)]).await;
    assert_eq!(out.status, 502, "{out:?}");
    assert_eq!(
        out.header("x-calvin-error"),
        Some("agent-offline"),
        "{}",
        out.text()
    );
    assert_eq!(out.header("retry-after"), Some("5"));
    let after = killed.elapsed();
    assert!(
        after >= Duration::from_millis(4800) && after < Duration::from_millis(5800),
        "a request after the kill: {after:?}"
    );
    let (out, answered) = waiting.await.expect("waiting request");
    assert_eq!(out.status, 502, "{out:?}");
    assert_eq!(out.header("x-calvin-error"), Some("agent-offline"));
    assert!(
        answered.duration_since(killed) < Duration::from_secs(2),
        "a request waiting at the kill: {:?}",
        answered.duration_since(killed)
    );
    let out = curl(ca, &[&created.url]).await;
    assert_eq!(out.header("x-calvin-error"), Some("agent-offline"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_visitor_connections_are_closed_by_the_header_timeout() {
    let edge = TestEdge::with_limits(Limits {
        header_read_timeout_secs: 1,
        ..Default::default()
    })
    .await;
    for (what, opening) in [
        ("nothing", &b""[..]),
        ("half a request", &b"GET / HTTP/1.1\r\nHost: x"[..]),
        ("half the HTTP/2 preface", &b"PRI * HTTP/2.0\r\n"[..]),
    ] {
        let mut tcp = tokio::net::TcpStream::connect(edge.http)
            .await
            .expect("connect");
        tcp.write_all(opening).await.expect("write");
        let started = Instant::now();
        let mut buf = [0u8; 1024];
        let closed = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                match tcp.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        })
        .await;
        assert!(closed.is_ok(), "{what}: still open after 5 s");
        assert!(
            started.elapsed() >= Duration::from_millis(900),
            "{what}: {:?}",
            started.elapsed()
        );
    }
}

/// A server that accepts and reads requests but never answers, and reports
/// how each connection ended: `true` for a reset, `false` for a clean end.
async fn stuck_server() -> (u16, tokio::sync::mpsc::UnboundedReceiver<bool>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let (ended, endings) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let ended = ended.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    match stream.read(&mut buf).await {
                        Ok(0) => {
                            let _ = ended.send(false);
                            return;
                        }
                        Ok(_) => {}
                        Err(_) => {
                            let _ = ended.send(true);
                            return;
                        }
                    }
                }
            });
        }
    });
    (port, endings)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_request_resets_the_origins_connection() {
    let edge = TestEdge::with_limits(Limits {
        upstream_timeout_secs: 1,
        ..Default::default()
    })
    .await;
    let agent = TestAgent::start(&edge, "alice").await;
    let (port, mut endings) = stuck_server().await;
    let created = agent.preview(port, None).await;
    // The preview's probe connects and closes cleanly.
    assert_eq!(endings.recv().await, Some(false));

    let out = curl(&edge.ca(), &[&created.url]).await;
    assert_eq!(out.status, 504);
    // The origin's connection is let go at once, as a reset: not left
    // half-open, holding a stream of the agent's.
    let ending = tokio::time::timeout(Duration::from_secs(3), endings.recv())
        .await
        .expect("the origin's connection ends within 3 s of the 504");
    assert_eq!(ending, Some(true), "ended by a reset");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_the_origin_never_reads_gets_504() {
    let edge = TestEdge::with_limits(Limits {
        upstream_timeout_secs: 1,
        ..Default::default()
    })
    .await;
    let agent = TestAgent::start(&edge, "alice").await;
    // Accepts, never reads: the upload stalls once the buffers are full.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    let created = agent.preview(port, None).await;
    let big = tempfile::NamedTempFile::new().expect("file");
    std::fs::write(big.path(), vec![7u8; 64 << 20]).expect("write");
    let started = Instant::now();
    let out = curl(
        &edge.ca(),
        &[
            // Over HTTP/2 hyper ends such a stream with RST_STREAM(NO_ERROR)
            // after the 504 (RFC 9113 8.1), which curl 7.88 reports as a
            // framing error instead of showing the response.
            "--http1.1",
            "--max-time",
            "20",
            "-H",
            "Expect:",
            "--data-binary",
            &format!("@{}", big.path().display()),
            &created.url,
        ],
    )
    .await;
    assert_eq!(out.status, 504, "{out:?}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_visitor_that_chose_h2_and_sends_nothing_is_closed() {
    let edge = TestEdge::with_limits(Limits {
        header_read_timeout_secs: 1,
        ..Default::default()
    })
    .await;
    let config = tls_client_config(&edge.ca(), &[b"h2"]);
    let tcp = tokio::net::TcpStream::connect(edge.https)
        .await
        .expect("tcp");
    let name = rustls_pki_types::ServerName::try_from(format!("x.{DOMAIN}")).expect("name");
    let mut tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
        .connect(name, tcp)
        .await
        .expect("tls");
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let started = Instant::now();
    let mut buf = [0u8; 1024];
    let closed = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match tls.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "still open after 5 s");
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_leave_no_tasks_behind() {
    let edge = TestEdge::start().await;
    let agent = TestAgent::start(&edge, "alice").await;
    let origin = Origin::start().await;
    let created = agent.preview(origin.port, None).await;
    let url = format!("{}/hello", created.url);
    let ca = edge.ca();
    let alive = || {
        tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks()
    };
    // Warm the pool, then count tasks around 200 more requests on one
    // keep-alive connection (curl reuses it for repeated URLs).
    curl(&ca, &[&url]).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = alive();
    let urls: Vec<String> = (0..200).map(|_| url.clone()).collect();
    let args: Vec<&str> = urls.iter().map(String::as_str).collect();
    let out = curl(&ca, &args).await;
    assert_eq!(out.status, 200);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = alive();
    assert!(
        after <= before + 10,
        "{before} tasks before 200 requests, {after} after"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_per_preview_idle_cap_holds() {
    let edge = TestEdge::with_limits(Limits {
        upstream_max_idle_per_preview: 3,
        ..Default::default()
    })
    .await;
    let s = PreviewSetup::on(edge).await;
    let (edge, origin) = (&s.edge, &s.origin);
    let created = &s.created;
    burst(edge, &created.url, 6).await;
    let settled = wait_until(Duration::from_secs(5), || {
        origin.open.load(Ordering::SeqCst) == 3
    })
    .await;
    assert!(settled, "{} open", origin.open.load(Ordering::SeqCst));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_budget_as_large_as_the_agents_streams_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = calvin_edge::dev::load_or_create(dir.path(), DOMAIN).expect("state");
    let settings = |idle: usize| calvin_edge::Settings {
        domain: DOMAIN.into(),
        public_url: None,
        listen: calvin_edge::Listen {
            https: None,
            http: None,
            quic: "127.0.0.1:0".parse().expect("addr"),
            http3: Default::default(),
        },
        certificates: calvin_edge::Certificates::Fixed(state.tls.clone()),
        dns: None,
        plain_http: calvin_edge::PlainHttp::Serve,
        accounts: vec![("a".into(), token_for("a"))],
        limits: Limits {
            upstream_max_idle_per_agent: idle,
            ..Default::default()
        },
        reset_key: state.reset_key,
        share_key: state.share_key,
        names_file: None,
        cluster: None,
    };
    let max = calvin_proto::MAX_DATA_STREAMS as usize;
    let err = calvin_edge::Edge::bind(settings(max))
        .await
        .err()
        .expect("refused");
    assert_eq!(
        err.to_string(),
        format!(
            "[limits] upstream_max_idle_per_agent must be under the {max} streams an agent \
             allows, or idle connections could take every one; got {max}"
        )
    );
    assert!(calvin_edge::Edge::bind(settings(max - 1)).await.is_ok());
}

/// An agent killed in the middle of a response: the visitor's response is
/// aborted within 2 s (HTTP/1.1 without its last chunk, HTTP/2 with
/// RST_STREAM), never ended as if it were whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_cut_by_a_killed_agent_is_aborted_not_ended() {
    for version in ["--http1.1", "--http2"] {
        let dev = DevPreview::start().await;
        let (agent, created, ca) = (&dev.agent, &dev.created, &dev.ca);

        // Events 300 ms apart; the agent dies after the first.
        let streaming = {
            let url = format!("{}/events", created.url);
            let ca = ca.clone();
            tokio::spawn(async move {
                let out = curl(&ca, &[version, "-N", "--max-time", "30", &url]).await;
                (out, Instant::now())
            })
        };
        tokio::time::sleep(Duration::from_millis(150)).await;
        agent.signal("KILL").await;
        let killed = Instant::now();
        let (out, ended) = streaming.await.expect("curl");
        assert_eq!(out.status, 200, "{version}: {out:?}");
        assert!(
            out.stderr.contains("curl: ("),
            "{version}: the cut response read as whole: {out:?}"
        );
        assert!(
            out.text().starts_with("data: event 0") && !out.text().contains("event 2"),
            "{version}: {}",
            out.text()
        );
        assert!(
            ended.duration_since(killed) < Duration::from_secs(2),
            "{version}: aborted after {:?}",
            ended.duration_since(killed)
        );
    }
}

/// A stopping agent's goodbye reaches the edge: the agent binary, sent
/// SIGTERM, exits only once its close has gone out, so its preview reads
/// offline at once (a request then waits for it to come back), not after
/// the edge's probe or its 12 s idle timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_agent_binary_reads_offline_at_once() {
    let state = tempfile::tempdir().expect("tempdir");
    let edge_dir = state.path().join("edge");
    let any = "127.0.0.1:0";
    let edge = EdgeProcess::start(&edge_dir, any, any, any).await;
    let connected = || async {
        let (_, report) = health_of(edge.http).await;
        report["agents_connected"].as_u64().expect("a count")
    };
    let origin = Origin::start().await;
    for round in 0..3 {
        let socket = state.path().join(format!("agent-{round}.sock"));
        let mut agent = agent_up(&edge_dir, edge.quic, &socket).await;
        preview_when_connected(&socket, origin.port).await;
        assert_eq!(connected().await, 1);
        agent.signal("TERM").await;
        let status = tokio::time::timeout(Duration::from_secs(10), agent.child.wait())
            .await
            .expect("the agent exits")
            .expect("status");
        assert!(status.success());
        let exited = Instant::now();
        assert_eq!(connected().await, 0, "the edge still counts the agent");
        eprintln!("offline {:?} after the agent exited", exited.elapsed());
    }
}
