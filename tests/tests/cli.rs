//! The binaries as a person runs them: `calvin-agent share --dev`, the
//! daemon and its commands, `calvin-edge dev`, and SIGTERM.

use std::time::{Duration, Instant};

use calvin_agent::api::{PreviewCreated, PreviewList};
use calvin_agent::control_client::ControlClient;
use calvin_tests::*;

/// Runs a `calvin-agent` command to completion.
async fn agent_command(args: &[&str]) -> std::process::Output {
    tokio::process::Command::new(binary("calvin-agent"))
        .args(args)
        .output()
        .await
        .expect("calvin-agent runs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn share_dev_prints_a_url_that_serves() {
    let state = tempfile::tempdir().expect("tempdir");
    let dir = state.path().join("dev");
    let origin = Origin::start().await;
    let port = origin.port.to_string();
    let any = "127.0.0.1:0";
    let mut share = Process::start(
        "calvin-agent",
        &[
            "share",
            &port,
            "--dev",
            "--state-dir",
            dir.to_str().expect("path"),
            "--https",
            any,
            "--http",
            any,
            "--quic",
            any,
        ],
    );
    let url = share.line_after("https://").await;
    let url = format!("https://{url}");
    assert!(url.contains(".preview.localhost:"), "{url}");
    let out = curl(&dir.join("ca.pem"), &[&format!("{url}/hello")]).await;
    assert_eq!(out.status, 200, "{out:?}");
    assert_eq!(out.text(), "hello from origin\n");

    share.signal("TERM").await;
    let status = tokio::time::timeout(Duration::from_secs(10), share.child.wait())
        .await
        .expect("share stops on SIGTERM")
        .expect("status");
    assert!(status.success());
    let out = curl(&dir.join("ca.pem"), &["--max-time", "2", &url]).await;
    assert_eq!(out.status, 0, "nothing serves after share stops");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn share_dev_on_a_silent_port_says_so() {
    let state = tempfile::tempdir().expect("tempdir");
    let dir = state.path().join("dev");
    let silent = silent_port();
    let port = silent.port().to_string();
    let any = "127.0.0.1:0";
    let child = tokio::process::Command::new(binary("calvin-agent"))
        .args(["share", &port, "--name", "later", "--dev", "--state-dir"])
        .arg(&dir)
        .args(["--https", any, "--http", any, "--quic", any])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("share");
    let mut stderr = tokio::io::BufReader::new(child.stderr.expect("stderr"));
    let said = tokio::time::timeout(Duration::from_secs(30), async {
        use tokio::io::AsyncBufReadExt;
        let mut line = String::new();
        while stderr.read_line(&mut line).await.unwrap_or(0) > 0 {
            if line.contains("nothing is listening") {
                return line;
            }
            line.clear();
        }
        line
    })
    .await
    .expect("share reports the silent port");
    assert_eq!(
        said.trim(),
        format!("nothing is listening on port {port} yet; the URL works once something does")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemon_commands_print_the_apis_json() {
    let state = tempfile::tempdir().expect("tempdir");
    let edge_dir = state.path().join("edge");
    let edge = EdgeProcess::start(&edge_dir, "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0").await;
    let socket_path = state.path().join("agent.sock");
    let _up = agent_up(&edge_dir, edge.quic, &socket_path).await;
    let socket = socket_path.to_str().expect("path");
    let mode = std::fs::metadata(socket).expect("socket").permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o600
    );

    let origin = Origin::start().await;
    let port = origin.port.to_string();
    let created: PreviewCreated = eventually(Duration::from_secs(10), || async {
        let out = agent_command(&[
            "preview", &port, "--name", "cli-web", "--json", "--socket", socket,
        ])
        .await;
        out.status
            .success()
            .then(|| serde_json::from_slice(&out.stdout).expect("JSON"))
    })
    .await
    .expect("preview --json");
    assert_eq!(created.name, "cli-web");
    assert!(created.listening);
    assert_eq!(created.url, edge.url_template.replace("{name}", "cli-web"));
    let out = curl(
        &edge_dir.join("ca.pem"),
        &[&format!("{}/hello", created.url)],
    )
    .await;
    assert_eq!(out.status, 200);

    // Without --json: the URL alone on stdout.
    let out = agent_command(&["preview", &port, "--socket", socket]).await;
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("{}\n", created.url)
    );

    // ls --json is exactly what the API answers.
    let out = agent_command(&["ls", "--json", "--socket", socket]).await;
    assert!(out.status.success());
    let api = ControlClient::new(std::path::Path::new(socket))
        .list()
        .await
        .expect("list");
    assert_eq!(out.stdout, [api.body.as_ref(), b"\n"].concat());
    let list: PreviewList = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(list.previews.len(), 1);
    assert_eq!(list.previews[0].port, origin.port);
    let out = agent_command(&["ls", "--socket", socket]).await;
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("cli-web") && table.contains(&created.url),
        "{table}"
    );

    // Errors: a clear message and a failing status.
    let out = agent_command(&["preview", "0", "--socket", socket]).await;
    assert!(!out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "calvin-agent: port must be 1 to 65535; got 0"
    );
    let out = agent_command(&["unpreview", "nope", "--socket", socket]).await;
    assert!(!out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "calvin-agent: no preview named nope"
    );

    let out = agent_command(&["unpreview", "cli-web", "--socket", socket]).await;
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "unpreviewed cli-web\n"
    );
    let out = curl(&edge_dir.join("ca.pem"), &[&created.url]).await;
    assert_eq!(out.status, 404);

    // A second daemon on the same socket refuses to start.
    let out = agent_command(&[
        "up",
        "--edge",
        &edge.quic.to_string(),
        "--token-file",
        edge_dir.join("agent.token").to_str().expect("path"),
        "--socket",
        socket,
    ])
    .await;
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("another calvin-agent already serves"),
        "{out:?}"
    );

    // No daemon: the commands say how to start one.
    let missing = state.path().join("missing.sock");
    let out = agent_command(&["ls", "--socket", missing.to_str().expect("path")]).await;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("is `calvin-agent up` running?"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_edge_reuses_its_state_and_names_the_flag_of_a_taken_port() {
    let state = tempfile::tempdir().expect("tempdir");
    let dir = state.path().join("dev");
    let any = "127.0.0.1:0";
    let first = EdgeProcess::start(&dir, any, any, any).await;
    let ca = std::fs::read(dir.join("ca.pem")).expect("ca.pem");
    let token = std::fs::read(dir.join("agent.token")).expect("agent.token");
    assert_eq!(token.len(), 65, "256-bit token as hex and a newline");

    // Each listener's address, when taken, is named with the flag that moves it.
    for (flag, taken) in [
        ("--https", first.https),
        ("--http", first.http),
        ("--quic", first.quic),
    ] {
        let taken = taken.to_string();
        let mut args = vec!["dev", "--state-dir", dir.to_str().expect("path")];
        for f in ["--https", "--http", "--quic"] {
            args.extend([f, if f == flag { taken.as_str() } else { any }]);
        }
        let out = tokio::process::Command::new(binary("calvin-edge"))
            .args(&args)
            .output()
            .await
            .expect("runs");
        assert!(!out.status.success(), "{flag}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!("pass {flag} ADDR")),
            "{flag}: {stderr}"
        );
        assert!(stderr.contains(&taken), "{flag}: {stderr}");
    }
    drop(first);

    let _second = EdgeProcess::start(&dir, any, any, any).await;
    assert_eq!(
        std::fs::read(dir.join("ca.pem")).expect("ca"),
        ca,
        "CA reused"
    );
    assert_eq!(
        std::fs::read(dir.join("agent.token")).expect("token"),
        token,
        "token reused"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_in_flight_requests_finish_then_exits() {
    let mut dev = DevPreview::start().await;
    let ca = dev.ca.clone();
    let slow_url = format!("{}/slow?ms=2000", dev.created.url);
    let in_flight = tokio::spawn({
        let ca = ca.clone();
        async move { curl(&ca, &[&slow_url]).await }
    });
    // The request is in flight once the origin has its connection (the
    // first one was the preview's probe).
    let accepted = dev.origin.accepted.clone();
    eventually(Duration::from_secs(5), || {
        let accepted = accepted.clone();
        async move { (accepted.load(std::sync::atomic::Ordering::SeqCst) >= 2).then_some(()) }
    })
    .await
    .expect("the slow request reaches the origin");
    let signalled = Instant::now();
    dev.edge.process.signal("TERM").await;

    // New visitors are turned away while the request in flight finishes.
    let refused = eventually(Duration::from_secs(1), || {
        let (ca, url) = (ca.clone(), dev.created.url.clone());
        async move { (curl(&ca, &["--max-time", "1", &url]).await.status == 0).then_some(()) }
    })
    .await;
    assert!(
        refused.is_some(),
        "new connections are refused after SIGTERM"
    );

    let out = in_flight.await.expect("curl task");
    assert_eq!(out.status, 200, "{out:?}");
    assert_eq!(out.text(), "slow\n");
    let status = tokio::time::timeout(Duration::from_secs(10), dev.edge.process.child.wait())
        .await
        .expect("edge exits after draining")
        .expect("status");
    assert!(status.success());
    assert!(
        signalled.elapsed() < Duration::from_secs(5),
        "{:?}",
        signalled.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grace_period_caps_the_drain() {
    let mut edge = TestEdge::with_limits(calvin_edge::Limits {
        grace_period_secs: 1,
        ..Default::default()
    })
    .await;
    let agent = TestAgent::start(&edge, "alice").await;
    let origin = Origin::start().await;
    let created = agent.preview(origin.port, None).await;
    let ca = edge.ca();
    let url = format!("{}/slow?ms=10000", created.url);
    let in_flight = tokio::spawn(async move { curl(&ca, &[&url]).await });
    origin.has_seen(1).await;
    let started = Instant::now();
    edge.begin_stop().await.expect("edge task");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(4),
        "stopped after {took:?} with a 1 s grace period"
    );
    let out = in_flight.await.expect("curl task");
    let ended = started.elapsed();
    // Answered at the grace period, not when the origin would have, and
    // told the truth: the edge is stopping (its agent never left).
    assert_eq!(out.status, 503, "the 10 s request was cut: {out:?}");
    assert_eq!(
        out.header("x-calvin-error"),
        Some("edge-stopping"),
        "{out:?}"
    );
    assert_eq!(out.header("retry-after"), Some("5"), "{out:?}");
    assert!(
        out.text().contains("restarting or stopping"),
        "{}",
        out.text()
    );
    assert!(
        ended < Duration::from_secs(5),
        "the visitor was answered {ended:?} after the stop began"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_runs_a_configured_edge_with_accounts_from_token_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A certificate and key from files, as an operator would have them.
    let certs = calvin_edge::dev::load_or_create(&dir.path().join("certs"), DOMAIN).expect("certs");
    let team_a = token_for("team-a");
    write_secret(&dir.path().join("team-a.token"), &format!("{team_a}\n"));
    let config = dir.path().join("edge.toml");
    // It holds team-b's token: private.
    write_secret(
        &config,
        &format!(
            r#"domain = "{DOMAIN}"
state_dir = "{state}"
public_url = "https://{{name}}.{DOMAIN}:1234"

[admin]
listen = "127.0.0.1:0"
[listen]
https = "127.0.0.1:0"
http = "127.0.0.1:0"
quic = "127.0.0.1:0"

[tls]
cert_file = "{cert}"
key_file = "{key}"

[[accounts]]
name = "team-a"
token_file = "{token_file}"

[[accounts]]
name = "team-b"
token = "{team_b}"

[limits]
grace_period_secs = 5
max_previews_per_account = 2
"#,
            state = dir.path().join("state").display(),
            cert = dir.path().join("certs/edge.pem").display(),
            key = dir.path().join("certs/edge.key").display(),
            token_file = dir.path().join("team-a.token").display(),
            team_b = token_for("team-b"),
        ),
    );
    let mut edge = Process::start(
        "calvin-edge",
        &["serve", "--config", config.to_str().expect("path")],
    );
    let https: std::net::SocketAddr = edge
        .line_after("listening https ")
        .await
        .trim_end_matches("/tcp")
        .parse()
        .expect("addr");
    edge.line_after("listening http ").await;
    let quic: std::net::SocketAddr = edge
        .line_after("listening quic ")
        .await
        .trim_end_matches("/udp")
        .parse()
        .expect("addr");
    assert_eq!(
        edge.line_after("previews ").await,
        format!("https://{{name}}.{DOMAIN}:1234")
    );
    let ca = certs.ca_path();

    let a = TestAgent::spawn_to(quic, &ca, &team_a).await;
    a.agent
        .wait_connected(Duration::from_secs(10))
        .await
        .expect("team-a connects");
    let origin = Origin::start().await;
    let created = a.preview(origin.port, Some("ops")).await;
    assert_eq!(
        created.url,
        format!("https://ops.{DOMAIN}:1234"),
        "the configured public URL"
    );
    let url = format!("https://ops.{DOMAIN}:{}/hello", https.port());
    let out = curl(&ca, &[&url]).await;
    assert_eq!(out.status, 200, "{out:?}");

    // The configured cap: two previews, and a third is refused with its reason.
    let (two, three) = (silent_port(), silent_port());
    a.preview(two.port(), Some("two")).await;
    let answer = a.try_preview(three.port().into(), Some("three")).await;
    assert_eq!(answer.status, 429);
    let err: calvin_agent::api::ApiError = serde_json::from_slice(&answer.body).expect("json");
    assert_eq!(
        err.error,
        "this account already has 2 previews, the most it may have"
    );

    // The other account cannot take the name; an unknown token is refused.
    let b = TestAgent::start_to(quic, &ca, &token_for("team-b")).await;
    assert_eq!(
        b.try_preview(origin.port.into(), Some("ops")).await.status,
        409
    );
    let stranger = TestAgent::spawn_to(quic, &ca, &token_for("nobody")).await;
    let refused = stranger.agent.wait_connected(Duration::from_secs(10)).await;
    assert_eq!(
        refused,
        Err("the edge refused this agent: the edge does not know this token".into())
    );
    edge.signal("TERM").await;
    let status = tokio::time::timeout(Duration::from_secs(10), edge.child.wait())
        .await
        .expect("exits")
        .expect("status");
    assert!(status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_names_what_is_wrong_in_the_config() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("edge.toml");
    std::fs::write(
        &config,
        "domain = \"d.example\"\nstate_dir = \"/tmp\"\nlisten_port = 1\n",
    )
    .expect("write");
    let out = tokio::process::Command::new(binary("calvin-edge"))
        .args(["serve", "--config"])
        .arg(&config)
        .output()
        .await
        .expect("runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown field `listen_port`"), "{err}");
    assert!(err.contains(config.to_str().expect("path")), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_waits_for_an_open_websocket_up_to_the_grace_period() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    let mut edge = TestEdge::with_limits(calvin_edge::Limits {
        grace_period_secs: 2,
        ..Default::default()
    })
    .await;
    let agent = TestAgent::start(&edge, "alice").await;
    let origin = Origin::start().await;
    let created = agent.preview(origin.port, Some("socket")).await;
    let _ = created;
    let tcp = tokio::net::TcpStream::connect(edge.http)
        .await
        .expect("tcp");
    let url = format!("ws://socket.{DOMAIN}:{}/ws", edge.http.port());
    let (mut ws, _) = tokio_tungstenite::client_async(url, tcp)
        .await
        .expect("websocket");

    let started = Instant::now();
    let stopping = edge.begin_stop();
    tokio::time::sleep(Duration::from_millis(300)).await;
    // During the drain the WebSocket still works...
    ws.send(Message::text("still here")).await.expect("send");
    let echoed = ws.next().await.expect("answer").expect("frame");
    assert_eq!(echoed.into_text().expect("text"), "still here");
    // ...and the edge waits for it until the grace period is over.
    stopping.await.expect("edge task");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(1800) && took < Duration::from_secs(5),
        "stopped after {took:?} with a 2 s grace period"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calvin_threads_is_checked_before_anything_starts() {
    for bin in ["calvin-edge", "calvin-agent"] {
        for (value, ok) in [
            ("1", true),
            ("1024", true),
            ("0", false),
            ("1025", false),
            ("two", false),
        ] {
            let out = tokio::process::Command::new(binary(bin))
                .arg("--version")
                .env("CALVIN_THREADS", value)
                .output()
                .await
                .expect("runs");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(
                out.status.success(),
                ok,
                "{bin} CALVIN_THREADS={value}: {stderr}"
            );
            if !ok {
                assert!(
                    stderr.contains(&format!(
                        "CALVIN_THREADS must be a number of threads from 1 to 1024, not \"{value}\""
                    )),
                    "{bin} CALVIN_THREADS={value}: {stderr}"
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_logs_json_lines_with_log_format_json() {
    // A fatal error, as a JSON line.
    let out = agent_command(&[
        "--log-format",
        "json",
        "up",
        "--edge",
        "127.0.0.1:9",
        "--token-file",
        "/nonexistent/token",
    ])
    .await;
    assert_eq!(out.status.code(), Some(1));
    let lines = stderr_lines(&out);
    assert!(!lines.is_empty());
    for line in &lines {
        let value: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
        assert_eq!(value["level"], "ERROR", "{line}");
        assert!(
            value["message"]
                .as_str()
                .is_some_and(|m| m.contains("/nonexistent/token")),
            "{line}"
        );
    }

    // A running daemon whose edge refuses its token: every line it writes
    // meanwhile is a JSON object with a level and a message.
    let edge = TestEdge::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let token = dir.path().join("token");
    write_secret(&token, "a-token-the-edge-does-not-know-0000000");
    let socket = dir.path().join("agent.sock");
    let mut command = tokio::process::Command::new(binary("calvin-agent"));
    command
        .args(["--log-format", "json", "up", "--edge"])
        .arg(edge.quic.to_string())
        .arg("--ca")
        .arg(edge.ca())
        .args(["--server-name", "localhost"])
        .arg("--token-file")
        .arg(&token)
        .arg("--socket")
        .arg(&socket)
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut child = command.spawn().expect("calvin-agent up");
    tokio::time::sleep(Duration::from_secs(3)).await;
    send_signal(&child, "TERM").await;
    let out = tokio::time::timeout(Duration::from_secs(10), async {
        let _ = child.wait().await;
        let mut text = String::new();
        if let Some(mut stderr) = child.stderr.take() {
            use tokio::io::AsyncReadExt;
            let _ = stderr.read_to_string(&mut text).await;
        }
        text
    })
    .await
    .expect("the agent stops on SIGTERM");
    let lines: Vec<&str> = out.lines().filter(|l| !l.is_empty()).collect();
    let mut refused = 0;
    for line in &lines {
        let value: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
        assert!(value["level"].is_string(), "{line}");
        assert!(value["message"].is_string(), "{line}");
        if value["message"] == "the edge refused this agent" {
            assert_eq!(value["level"], "WARN", "{line}");
            refused += 1;
        }
    }
    assert!(refused >= 1, "no refusal logged: {lines:?}");
}
