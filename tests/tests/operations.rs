//! What an operator of `calvin-edge serve` watches: `/metrics` after known
//! traffic, JSON log lines with the request id the origin saw, and that id
//! on the edge's own error pages.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use calvin_tests::origin::Origin;
use calvin_tests::serve_edge::{self, ServeEdge};
use calvin_tests::{CurlOutput, TestAgent, curl, curl_post, eventually, token_for, write_secret};

const ZONE: &str = "preview.test";

/// An edge with a certificate of its own, JSON logs, the admin listener on
/// a free port, and `log` in its [log].
async fn edge(dir: &Path, log: &str) -> ServeEdge {
    let config = serve_edge::write_config(dir, ZONE, log);
    ServeEdge::start_with(&config, &dir.join("edge.log"), &["--log-format", "json"]).await
}

/// An edge (access log on) with an agent previewing an origin as `web`.
struct Served {
    edge: ServeEdge,
    ca: std::path::PathBuf,
    origin: Origin,
    agent: TestAgent,
}

async fn served(dir: &Path) -> Served {
    let edge = edge(dir, "access = true").await;
    let ca = dir.join("certs/ca.pem");
    let origin = Origin::start().await;
    let agent = TestAgent::start_to(edge.quic, &ca, &token_for("a")).await;
    agent.preview(origin.addr().port(), Some("web")).await;
    Served {
        edge,
        ca,
        origin,
        agent,
    }
}

/// Every line of the log, parsed: a line that is not a JSON object fails.
fn json_lines(log: &str) -> Vec<serde_json::Value> {
    log.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: serde_json::Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
            assert!(v.is_object(), "{l}");
            v
        })
        .collect()
}

fn access_lines(log: &str) -> Vec<serde_json::Value> {
    json_lines(log)
        .into_iter()
        .filter(|v| v["target"] == "calvin_edge::access")
        .collect()
}

/// A series' value; a series that is not there fails (a wrong name must
/// not read as 0).
fn series(m: &BTreeMap<String, f64>, name: &str) -> f64 {
    *m.get(name)
        .unwrap_or_else(|| panic!("no series {name} in {m:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_match_known_traffic_and_json_logs_carry_the_request_id() {
    let dir = tempfile::tempdir().expect("tempdir");
    let edge = edge(dir.path(), "access = true").await;
    let ca = dir.path().join("certs/ca.pem");
    let origin = Origin::start().await;
    let agent = TestAgent::start_to(edge.quic, &ca, &token_for("a")).await;
    let created = agent.preview(origin.addr().port(), Some("web")).await;
    assert!(created.listening, "{created:?}");
    let https = edge.https.expect("https").port();
    let resolve = format!("web.{ZONE}:{https}:127.0.0.1");
    let nowhere = format!("nowhere.{ZONE}:{https}:127.0.0.1");
    let url = |path: &str| format!("https://web.{ZONE}:{https}{path}");

    let before = edge.metrics().await;
    assert_eq!(series(&before, "calvin_edge_agents_connected"), 1.0);
    assert_eq!(series(&before, "calvin_edge_previews_online"), 1.0);

    // Known traffic: 5 GETs over HTTP/2, 3 uploads of 1,000 bytes over
    // HTTP/1.1, 4 requests for a preview that does not exist.
    let mut answers: Vec<CurlOutput> = Vec::new();
    for _ in 0..5 {
        let out = curl(&ca, &["--http2", "--resolve", &resolve, &url("/hello")]).await;
        assert_eq!(
            (out.status, out.http_version.as_str()),
            (200, "2"),
            "{out:?}"
        );
        answers.push(out);
    }
    let upload = vec![b'u'; 1000];
    for _ in 0..3 {
        let (out, _) = curl_post(
            &ca,
            &url("/echo"),
            &upload,
            &["--http1.1", "--resolve", &resolve],
        )
        .await;
        assert_eq!((out.status, out.body.len()), (200, 1000), "{out:?}");
        answers.push(out);
    }
    let mut refused_ids = Vec::new();
    for _ in 0..4 {
        let out = curl(
            &ca,
            &[
                "--http1.1",
                "--resolve",
                &nowhere,
                &format!("https://nowhere.{ZONE}:{https}/x"),
            ],
        )
        .await;
        assert_eq!(out.status, 404, "{out:?}");
        assert_eq!(out.header("x-calvin-error"), Some("unknown-preview"));
        // The error page names the request's id, as its header does.
        let id = out.header("x-request-id").expect("x-request-id").to_owned();
        assert_eq!(id.len(), 16, "{id}");
        assert!(
            out.text().contains(&format!("request id: {id}")),
            "{}",
            out.text()
        );
        refused_ids.push(id);
        answers.push(out);
    }
    // And 2 GETs over HTTP/3.
    let h3_url = format!("https://web.{ZONE}:{}/hello", edge.quic.port());
    let mut sent_h3 = 0;
    for _ in 0..2 {
        let out = calvin_tests::h3::h3client_at(edge.quic, &ca, &h3_url, &[]).await;
        assert_eq!(out.status(), 200, "{:?} {}", out.summary, out.stderr);
        sent_h3 += out.body_bytes() as usize;
    }
    let sent: usize = answers.iter().map(|a| a.body.len()).sum::<usize>() + sent_h3;

    // The bytes are counted when each response ends; the counts settle.
    let settled = eventually(Duration::from_secs(5), || async {
        let m = edge.metrics().await;
        (series(&m, "calvin_edge_sent_bytes_total") >= sent as f64).then_some(m)
    })
    .await;
    let m = match settled {
        Some(m) => m,
        None => panic!(
            "sent bytes never reached {sent}:\n{:?}",
            edge.metrics().await
        ),
    };
    let requests = |protocol: &str, class: &str| {
        series(
            &m,
            &format!(r#"calvin_edge_requests_total{{protocol="{protocol}",class="{class}"}}"#),
        )
    };
    assert_eq!(requests("h2", "2xx"), 5.0);
    assert_eq!(requests("h1", "2xx"), 3.0);
    assert_eq!(requests("h1", "4xx"), 4.0);
    assert_eq!(requests("h3", "2xx"), 2.0);
    assert_eq!(requests("h2", "4xx") + requests("h1", "5xx"), 0.0);
    assert_eq!(
        series(&m, "calvin_edge_request_duration_seconds_count"),
        14.0
    );
    assert_eq!(series(&m, "calvin_edge_sent_bytes_total"), sent as f64);
    assert_eq!(series(&m, "calvin_edge_received_bytes_total"), 3000.0);
    assert_eq!(
        series(&m, r#"calvin_edge_refusals_total{code="unknown-preview"}"#),
        4.0
    );
    assert_eq!(
        series(&m, r#"calvin_edge_refusals_total{code="agent-offline"}"#),
        0.0
    );
    assert_eq!(series(&m, "calvin_edge_open_streams"), 0.0);
    let rtt = series(&m, r#"calvin_edge_agent_rtt_seconds{stat="max"}"#);
    assert!(rtt > 0.0 && rtt < 1.0, "{rtt}");

    // Handshakes that fail: a visitor speaking plain HTTP to the HTTPS
    // port, an agent with a token the edge does not know.
    let failures = |m: &BTreeMap<String, f64>, side: &str, cause: &str| {
        series(
            m,
            &format!(r#"calvin_edge_handshake_failures_total{{side="{side}",cause="{cause}"}}"#),
        )
    };
    assert_eq!(failures(&m, "visitor", "tls-error"), 0.0);
    assert_eq!(failures(&m, "agent", "bad-token"), 0.0);
    let plain = calvin_tests::exchange(
        edge.https.expect("https"),
        b"GET / HTTP/1.1\r\nHost: web.preview.test\r\n\r\n",
    )
    .await;
    assert!(plain.statuses().is_empty(), "{}", plain.text);
    let stranger = TestAgent::spawn_to(edge.quic, &ca, &token_for("nobody")).await;
    let counted = eventually(Duration::from_secs(5), || async {
        let m = edge.metrics().await;
        (failures(&m, "visitor", "tls-error") == 1.0 && failures(&m, "agent", "bad-token") == 1.0)
            .then_some(())
    })
    .await;
    assert!(counted.is_some(), "{:?}", edge.metrics().await);
    stranger.stop().await;

    // The HTTP/1 framing gate's own refusals count as requests and by code.
    let smuggled = calvin_tests::exchange(
        edge.http.expect("http"),
        b"POST /x HTTP/1.1\r\nHost: web.preview.test\r\nContent-Length: 3\r\n\
          Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    )
    .await;
    assert_eq!(smuggled.statuses(), [400], "{}", smuggled.text);
    let counted = eventually(Duration::from_secs(5), || async {
        let m = edge.metrics().await;
        (series(&m, r#"calvin_edge_refusals_total{code="bad-request"}"#) == 1.0
            && series(
                &m,
                r#"calvin_edge_requests_total{protocol="h1",class="4xx"}"#,
            ) == 5.0)
            .then_some(())
    })
    .await;
    assert!(counted.is_some(), "{:?}", edge.metrics().await);

    // The origin sees a request id: the edge's, or the visitor's own.
    let seen = |out: &CurlOutput| -> String {
        let pairs: Vec<(String, String)> = serde_json::from_slice(&out.body).expect("pairs");
        let ids: Vec<&String> = pairs
            .iter()
            .filter(|(k, _)| k == "x-request-id")
            .map(|(_, v)| v)
            .collect();
        assert_eq!(ids.len(), 1, "{pairs:?}");
        ids[0].clone()
    };
    let ours = curl(&ca, &["--resolve", &resolve, &url("/headers?token=secret")]).await;
    let ours = seen(&ours);
    assert_eq!(ours.len(), 16, "{ours}");
    let theirs = curl(
        &ca,
        &[
            "--resolve",
            &resolve,
            "-H",
            "X-Request-Id: from-the-visitor-42",
            &url("/headers"),
        ],
    )
    .await;
    assert_eq!(seen(&theirs), "from-the-visitor-42");

    // JSON log lines, one object each; the access line of each request
    // carries the id the origin saw, without the query.
    let line_of = |id: &str| {
        let id = id.to_owned();
        let edge = &edge;
        async move {
            eventually(Duration::from_secs(5), || async {
                access_lines(&edge.log())
                    .into_iter()
                    .find(|l| l["request_id"] == id.as_str())
            })
            .await
            .unwrap_or_else(|| panic!("no access line for {id}:\n{}", edge.log()))
        }
    };
    let line = line_of(&ours).await;
    assert_eq!(line["preview"], "web");
    assert_eq!(line["method"], "GET");
    assert_eq!(line["path"], "/headers", "{line}");
    assert_eq!(line["status"], 200);
    assert_eq!(line["protocol"], "h2");
    assert_eq!(line["bytes_in"], 0);
    assert!(line["bytes_out"].as_u64().is_some_and(|n| n > 0), "{line}");
    assert!(line["duration_ms"].as_f64().is_some(), "{line}");
    assert!(
        line["client"]
            .as_str()
            .is_some_and(|c| c.starts_with("127.0.0.1:")),
        "{line}"
    );
    assert!(line["timestamp"].is_string(), "{line}");
    assert_eq!(line["level"], "INFO");
    assert_eq!(line_of("from-the-visitor-42").await["status"], 200);
    let refused = line_of(&refused_ids[0]).await;
    assert_eq!(refused["status"], 404);
    assert_eq!(refused["preview"], "nowhere");
    let over_h3: Vec<_> = access_lines(&edge.log())
        .into_iter()
        .filter(|l| l["protocol"] == "h3")
        .collect();
    assert_eq!(over_h3.len(), 2, "{over_h3:?}");
    for line in over_h3 {
        assert_eq!(
            (&line["path"], &line["status"], line["bytes_out"].as_u64()),
            (
                &serde_json::json!("/hello"),
                &serde_json::json!(200),
                Some(18)
            ),
            "{line}"
        );
    }
    let uploads: Vec<_> = access_lines(&edge.log())
        .into_iter()
        .filter(|l| l["path"] == "/echo")
        .collect();
    assert_eq!(uploads.len(), 3);
    for upload in uploads {
        assert_eq!(
            (upload["bytes_in"].as_u64(), upload["bytes_out"].as_u64()),
            (Some(1000), Some(1000)),
            "{upload}"
        );
        assert_eq!(upload["protocol"], "http/1.1");
    }
    // The agent's lines are in its connection's span, with its account.
    let connected = json_lines(&edge.log())
        .into_iter()
        .find(|l| l["message"] == "agent connected")
        .unwrap_or_else(|| panic!("no agent line:\n{}", edge.log()));
    assert_eq!(connected["spans"][0]["name"], "agent", "{connected}");
    assert_eq!(connected["spans"][0]["account"], "a", "{connected}");
    agent.stop().await;
    edge.stop().await;
}

/// `path` of the preview `gone`, which no agent holds, over HTTPS.
async fn gone(edge: &ServeEdge, dir: &Path, path: &str) -> CurlOutput {
    let https = edge.https.expect("https").port();
    curl(
        &dir.join("certs/ca.pem"),
        &[
            "--resolve",
            &format!("gone.{ZONE}:{https}:127.0.0.1"),
            &format!("https://gone.{ZONE}:{https}{path}"),
        ],
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_access_log_can_be_turned_off() {
    let dir = tempfile::tempdir().expect("tempdir");
    let edge = edge(dir.path(), "access = false").await;
    let out = gone(&edge, dir.path(), "/").await;
    assert_eq!(out.status, 404);
    // Counted all the same.
    let m = eventually(Duration::from_secs(5), || async {
        let m = edge.metrics().await;
        (series(&m, r#"calvin_edge_refusals_total{code="unknown-preview"}"#) == 1.0).then_some(m)
    })
    .await;
    assert!(m.is_some(), "{:?}", edge.metrics().await);
    edge.stop().await;
    let log = std::fs::read_to_string(dir.path().join("edge.log")).expect("log");
    assert!(access_lines(&log).is_empty(), "{log}");
    assert!(log.contains("edge stopped"), "{log}");
}

/// A log nobody reads (a terminal scrolled back, a full disk, a pipe to a
/// stuck process) never holds up a request: the edge's stderr is a FIFO
/// the test opens and never reads, which is full after 64 KiB; 1,500
/// requests with 8 KB paths (12 MB of access lines, past the writer's
/// 4 MiB) are all answered by the origin, and the lines the writer could
/// not keep are counted in `/metrics`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_nobody_reads_never_holds_up_a_request() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("edge.log");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo");
    assert!(made.success());
    // Opened for reading first, so the edge's open for writing goes on;
    // held, and never read.
    let _unread = tokio::net::unix::pipe::OpenOptions::new()
        .open_receiver(&fifo)
        .expect("the FIFO's reading end");
    let config = serve_edge::write_config(
        dir.path(),
        ZONE,
        "access = true\n[limits]\nrequests_per_second_per_ip = 0\nrequests_per_second_per_preview = 0",
    );
    let edge = ServeEdge::start_with(&config, &fifo, &["--log-format", "json"]).await;
    let ca = dir.path().join("certs/ca.pem");
    let origin = Origin::start().await;
    let agent = TestAgent::start_to(edge.quic, &ca, &token_for("a")).await;
    agent.preview(origin.addr().port(), Some("web")).await;

    let path = format!("/request/{}", "x".repeat(8000));
    let mut sender = calvin_tests::raw_client::h1_client(edge.http.expect("http")).await;
    let started = std::time::Instant::now();
    for i in 0..1500 {
        let req = http::Request::get(path.as_str())
            .header(http::header::HOST, format!("web.{ZONE}"))
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .expect("request");
        sender.ready().await.expect("the connection goes on");
        let answered = tokio::time::timeout(Duration::from_secs(10), sender.send_request(req))
            .await
            .unwrap_or_else(|_| panic!("request {i} not answered in 10 s"))
            .expect("answered");
        assert_eq!(answered.status(), 200, "request {i}");
        let body = http_body_util::BodyExt::collect(answered.into_body())
            .await
            .expect("body")
            .to_bytes();
        assert!(body.len() > 8000, "request {i}: {} bytes", body.len());
    }
    eprintln!("1,500 requests in {:?}", started.elapsed());
    let dropped = series(&edge.metrics().await, "calvin_edge_log_dropped_lines_total");
    // 12 MB of lines: at most 4 MiB wait and 64 KiB sit in the pipe.
    assert!(dropped >= 900.0, "{dropped} lines dropped");
    assert!(dropped < 1500.0, "{dropped} lines dropped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn access_query_keeps_the_query_in_the_access_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let edge = edge(dir.path(), "access = true\naccess_query = true").await;
    let out = gone(&edge, dir.path(), "/page?q=1&r=two").await;
    assert_eq!(out.status, 404);
    let id = out.header("x-request-id").expect("request id").to_owned();
    let line = eventually(Duration::from_secs(5), || async {
        access_lines(&edge.log())
            .into_iter()
            .find(|l| l["request_id"] == id.as_str())
    })
    .await
    .unwrap_or_else(|| panic!("no access line for {id}:\n{}", edge.log()));
    assert_eq!(line["path"], "/page?q=1&r=two", "{line}");
}

/// A load balancer polling `/readyz` learns of a stop at its start: 503
/// while a slow request drains, and that request still gets its answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_turns_503_when_a_stop_begins_and_requests_drain() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Served {
        edge,
        ca,
        origin: _origin,
        agent,
    } = served(dir.path()).await;
    assert_eq!(edge.admin("/readyz").await, (200, "ready\n".to_owned()));

    let https = edge.https.expect("https").port();
    let resolve = format!("web.{ZONE}:{https}:127.0.0.1");
    let slow_url = format!("https://web.{ZONE}:{https}/slow?ms=3000");
    let slow = {
        let ca = ca.clone();
        tokio::spawn(async move { curl(&ca, &["--resolve", &resolve, &slow_url]).await })
    };
    // The request is under way at the origin before the stop.
    let under_way = eventually(Duration::from_secs(5), || async {
        let m = edge.metrics().await;
        (series(&m, "calvin_edge_open_streams") == 1.0).then_some(())
    })
    .await;
    assert!(under_way.is_some(), "{:?}", edge.metrics().await);
    edge.signal("TERM").await;
    let draining = eventually(Duration::from_secs(2), || async {
        let (status, body) = edge.admin("/readyz").await;
        (status == 503).then_some(body)
    })
    .await
    .unwrap_or_else(|| panic!("still ready while stopping\n{}", edge.log()));
    assert!(draining.contains("not serving"), "{draining}");
    let answered = slow.await.expect("curl task");
    assert_eq!((answered.status, answered.text().as_str()), (200, "slow\n"));
    agent.stop().await;
    edge.stop().await;
}

/// `calvin-agent up --metrics ADDR`: its connection state, connects and
/// reconnects, the streams the edge opened and their bytes, and the local
/// connects that failed, after known traffic and an edge restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_counts_its_connection_streams_bytes_and_refusals() {
    use calvin_tests::{EdgeProcess, Process, preview_when_connected, silent_port};
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("edge");
    let edge = EdgeProcess::start(&state, "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0").await;
    let quic = edge.quic.to_string();
    let path = |p: &Path| p.to_str().expect("utf-8").to_owned();
    let socket = dir.path().join("agent.sock");
    let mut agent = Process::start(
        "calvin-agent",
        &[
            "up",
            "--edge",
            &quic,
            "--token-file",
            &path(&state.join("agent.token")),
            "--ca",
            &path(&state.join("ca.pem")),
            "--server-name",
            "localhost",
            "--socket",
            &path(&socket),
            "--metrics",
            "127.0.0.1:0",
        ],
    );
    let metrics_at = agent.line_after("listening metrics ").await;
    let metrics_url = format!("http://{}/metrics", metrics_at.trim_end_matches("/tcp"));
    let scrape = || async {
        let out = curl(Path::new("/dev/null"), &[&metrics_url]).await;
        assert_eq!(out.status, 200, "{out:?}");
        assert_eq!(
            out.header("content-type"),
            Some("application/openmetrics-text; version=1.0.0; charset=utf-8")
        );
        out.text()
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                let (k, v) = l.rsplit_once(' ')?;
                Some((k.to_owned(), v.parse::<f64>().ok()?))
            })
            .collect::<BTreeMap<String, f64>>()
    };

    let origin = Origin::start().await;
    let served = preview_when_connected(&socket, origin.addr().port()).await;
    let silent = silent_port();
    let unserved = preview_when_connected(&socket, silent.port()).await;
    let ca = state.join("ca.pem");
    let upload = vec![b'x'; 5000];
    for _ in 0..4 {
        let (out, _) = curl_post(&ca, &format!("{}/echo", served.url), &upload, &[]).await;
        assert_eq!((out.status, out.body.len()), (200, 5000), "{out:?}");
    }
    let out = curl(&ca, &[&format!("{}/x", unserved.url)]).await;
    assert_eq!(
        out.header("x-calvin-error"),
        Some("not-listening"),
        "{out:?}"
    );

    let m = eventually(Duration::from_secs(5), || async {
        let m = scrape().await;
        (series(
            &m,
            r#"calvin_agent_refused_connects_total{reason="connection-refused"}"#,
        ) == 1.0)
            .then_some(m)
    })
    .await
    .unwrap_or_else(|| panic!("the refused connect was not counted"));
    assert_eq!(
        series(&m, r#"calvin_agent_connection_state{state="connected"}"#),
        1.0
    );
    assert_eq!(series(&m, "calvin_agent_connects_total"), 1.0);
    assert_eq!(series(&m, "calvin_agent_reconnects_total"), 0.0);
    // Each upload took a stream of its own or reused a pooled one: at
    // least one, and the refused connect took one more.
    let streams = series(&m, "calvin_agent_streams_total");
    assert!((2.0..=5.0).contains(&streams), "{m:?}");
    // The edge keeps the upload's connections pooled: open, at most one
    // per stream that was not refused.
    let open = series(&m, "calvin_agent_open_streams");
    assert!(open >= 1.0 && open < streams, "{m:?}");
    // The origin got 4 bodies of 5,000 bytes and sent 4 back, each with a
    // head of under 1 KiB.
    let to_local = series(&m, "calvin_agent_sent_bytes_total");
    let from_local = series(&m, "calvin_agent_received_bytes_total");
    assert!((20_000.0..24_096.0).contains(&to_local), "{m:?}");
    assert!((20_000.0..24_096.0).contains(&from_local), "{m:?}");
    assert_eq!(
        series(
            &m,
            r#"calvin_agent_refused_connects_total{reason="not-previewed"}"#
        ),
        0.0
    );

    // The edge restarts on the same addresses (its stateless resets tell
    // the agent at once): one loss, one more connect.
    let https = edge.https.to_string();
    let http = edge.http.to_string();
    drop(edge);
    let _edge = EdgeProcess::start(&state, &https, &http, &quic).await;
    let m = eventually(Duration::from_secs(30), || async {
        let m = scrape().await;
        (series(&m, "calvin_agent_connects_total") == 2.0).then_some(m)
    })
    .await
    .unwrap_or_else(|| panic!("the agent never reconnected"));
    assert_eq!(series(&m, "calvin_agent_reconnects_total"), 1.0, "{m:?}");
    assert_eq!(
        series(&m, r#"calvin_agent_connection_state{state="connected"}"#),
        1.0
    );
    assert_eq!(
        series(&m, r#"calvin_agent_connection_state{state="connecting"}"#),
        0.0
    );
    agent.signal("TERM").await;
}

/// With `--log-format json`, what the edge says of a bad configuration
/// and of its failure is JSON too: every stderr line parses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_carry_the_configuration_problems_too() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("edge.toml");
    write_secret(
        &config,
        "domain = \"preview.test\"\nstate_dir = \"/tmp/x\"\nlisten_port = 1\n[limits]\ngrace_period_secs = 99999\n",
    );
    for command in ["check-config", "serve"] {
        let mut args = vec!["--log-format", "json", command];
        if command == "serve" {
            args.push("--config");
        }
        let out = tokio::process::Command::new(calvin_tests::binary("calvin-edge"))
            .args(&args)
            .arg(&config)
            .output()
            .await
            .expect("calvin-edge runs");
        assert_eq!(out.status.code(), Some(1), "{command}");
        let lines = json_lines(&String::from_utf8_lossy(&out.stderr));
        let messages: Vec<&str> = lines
            .iter()
            .map(|l| l["message"].as_str().expect("a message"))
            .collect();
        assert!(
            messages
                .iter()
                .any(|m| m.contains(": listen_port: unknown field")),
            "{command}: {messages:?}"
        );
        assert!(
            messages.iter().any(|m| m
                .contains(": limits.grace_period_secs: grace_period_secs must be from 0 to 3600")),
            "{command}: {messages:?}"
        );
        assert!(
            messages
                .last()
                .is_some_and(|m| m.starts_with("calvin-edge: ")),
            "{command}: {messages:?}"
        );
        assert!(lines.iter().all(|l| l["level"] == "ERROR"), "{lines:?}");
    }
}

/// A WebSocket's bytes count as they move, while it is open, and one cut
/// off keeps what it moved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_bytes_count_while_the_socket_is_open() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    let dir = tempfile::tempdir().expect("tempdir");
    let Served {
        edge,
        origin: _origin,
        agent,
        ..
    } = served(dir.path()).await;
    let bytes = |m: &BTreeMap<String, f64>| {
        (
            series(m, "calvin_edge_received_bytes_total"),
            series(m, "calvin_edge_sent_bytes_total"),
        )
    };
    let before = bytes(&edge.metrics().await);

    let http = edge.http.expect("http");
    let tcp = tokio::net::TcpStream::connect(http).await.expect("tcp");
    let url = format!("ws://web.{ZONE}:{}/ws", http.port());
    let (mut ws, _) = tokio_tungstenite::client_async(url, tcp)
        .await
        .expect("websocket through the edge");
    let frame = vec![7u8; 70_000];
    ws.send(Message::binary(frame.clone())).await.expect("send");
    let echoed = ws.next().await.expect("an answer").expect("a frame");
    assert_eq!(echoed.into_data().len(), 70_000);
    // Open still: both ways counted, each at least the frame.
    let open = eventually(Duration::from_secs(5), || async {
        let (received, sent) = bytes(&edge.metrics().await);
        (received - before.0 >= 70_000.0 && sent - before.1 >= 70_000.0).then_some((received, sent))
    })
    .await;
    assert!(
        open.is_some(),
        "{:?} then {:?}",
        before,
        bytes(&edge.metrics().await)
    );
    // Cut off without a close: what moved stays counted.
    drop(ws);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (received, sent) = bytes(&edge.metrics().await);
    assert!(received - before.0 >= 70_000.0 && sent - before.1 >= 70_000.0);
    agent.stop().await;
    edge.stop().await;
}
