//! The agent's request log: what went through a preview, as the session
//! that made it asks for it (the control API's `/requests`, `calvin-agent
//! log`), and replay.

use std::path::Path;
use std::time::{Duration, Instant};

use calvin_agent::api::{LoggedRequest, RequestLog};
use calvin_agent::control_client::ControlClient;
use calvin_tests::*;

async fn log_of(socket: &Path, name: &str, query: &str) -> RequestLog {
    ControlClient::new(socket)
        .requests(name, query)
        .await
        .expect("control API")
        .parse()
        .expect("a request log")
}

/// The log once it holds `n` completed requests.
async fn completed(socket: &Path, name: &str, n: usize) -> Vec<LoggedRequest> {
    eventually(Duration::from_secs(5), || async {
        let log = log_of(socket, name, "").await;
        let done = log
            .requests
            .iter()
            .filter(|r| r.duration_ms.is_some())
            .count();
        (done >= n).then_some(log.requests)
    })
    .await
    .unwrap_or_else(|| panic!("{n} requests logged"))
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_through_a_preview_is_logged_as_the_visitor_made_it() {
    let s = PreviewSetup::start().await;
    let name = &s.created.name;
    let get = curl(&s.edge.ca(), &[&s.url("/bytes/3000?x=1")]).await;
    assert_eq!(get.status, 200);
    let post = curl(
        &s.edge.ca(),
        &[
            "--data-binary",
            "hello, log",
            "-H",
            "content-type: text/plain",
            &s.url("/echo"),
        ],
    )
    .await;
    assert_eq!(post.text(), "hello, log");

    let requests = completed(&s.agent.socket, name, 2).await;
    let [get, post] = &requests[..] else {
        panic!("two requests: {requests:?}");
    };
    assert_eq!(
        (get.method.as_str(), get.path.as_str()),
        ("GET", "/bytes/3000?x=1")
    );
    assert_eq!(get.status, Some(200));
    assert_eq!((get.bytes_in, get.bytes_out), (0, 3000));
    assert_eq!(get.client.as_deref(), Some("127.0.0.1"));
    assert!(
        get.time.ends_with('Z') && get.time.starts_with("20"),
        "{}",
        get.time
    );
    assert!(get.duration_ms.unwrap() < 5_000.0);
    assert!(get.request_body.is_none());
    let body = get.response_body.as_ref().expect("the response's body");
    assert_eq!((body.size, body.cut), (3000, false));
    assert_eq!(
        header(&get.request_headers, "host"),
        Some(s.created.url.trim_start_matches("https://"))
    );

    assert_eq!(
        (post.method.as_str(), post.path.as_str()),
        ("POST", "/echo")
    );
    assert!(post.id > get.id);
    assert_eq!(post.request_body.as_ref().unwrap().text, "hello, log");
    assert_eq!(post.response_body.as_ref().unwrap().text, "hello, log");
    assert_eq!((post.bytes_in, post.bytes_out), (10, 10));

    // `after` and `limit`.
    let after = log_of(&s.agent.socket, name, &format!("after={}", get.id)).await;
    assert_eq!(after.requests.len(), 1);
    assert_eq!(after.requests[0].id, post.id);
    let newest = log_of(&s.agent.socket, name, "limit=1").await;
    assert_eq!(newest.requests[0].id, post.id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_s_bounds_and_its_query_s_limits_each_have_their_message() {
    let s = PreviewSetup::start().await;
    let client = s.agent.client();
    let name = &s.created.name;
    // The default keeps 100: 101 requests (one curl, one connection).
    let urls: Vec<String> = (0..101).map(|i| s.url(&format!("/bytes/{i}"))).collect();
    let mut args: Vec<&str> = vec!["-o", "/dev/null"];
    for url in &urls {
        args.extend(["-o", "/dev/null", url.as_str()]);
    }
    let out = tokio::process::Command::new("curl")
        .args(["-sS", "--cacert"])
        .arg(s.edge.ca())
        .args(&args)
        .output()
        .await
        .expect("curl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let kept = eventually(Duration::from_secs(5), || async {
        let log = log_of(&s.agent.socket, name, "").await;
        (log.requests.last().map(|r| r.path.as_str()) == Some("/bytes/100")
            && log.requests.last().unwrap().duration_ms.is_some())
        .then_some(log.requests)
    })
    .await
    .expect("the 101st request logged");
    assert_eq!(kept.len(), 100);
    assert_eq!(kept[0].path, "/bytes/1", "the oldest went");

    // A 5 MiB upload keeps its first 4 KiB and says it was cut.
    let big = std::env::temp_dir().join(format!("calvin-log-{}", std::process::id()));
    std::fs::write(&big, pattern_bytes(5 << 20)).unwrap();
    let up = curl(
        &s.edge.ca(),
        &[
            "--data-binary",
            &format!("@{}", big.display()),
            &s.url("/count"),
        ],
    )
    .await;
    std::fs::remove_file(&big).ok();
    assert_eq!(up.status, 200);
    let last = eventually(Duration::from_secs(5), || async {
        let log = log_of(&s.agent.socket, name, "limit=1").await;
        let r = log.requests.into_iter().next()?;
        (r.path == "/count" && r.duration_ms.is_some()).then_some(r)
    })
    .await
    .expect("the upload logged");
    let body = last.request_body.expect("its body");
    assert_eq!(body.size, 5 << 20);
    assert!(body.cut);
    assert!(body.base64, "the pattern is not UTF-8");
    use base64::Engine;
    let kept = base64::engine::general_purpose::STANDARD
        .decode(&body.text)
        .unwrap();
    assert_eq!(kept, pattern_bytes(4096));

    // limit: 1 and 1000 pass, 0 and 1001 are refused with the reason.
    for (query, ok) in [
        ("limit=1", true),
        ("limit=1000", true),
        ("limit=0", false),
        ("limit=1001", false),
        ("wait=60", true),
        ("wait=61", false),
        ("after=x", false),
        ("since=3", false),
    ] {
        let answer = client.requests(name, query).await.unwrap();
        assert_eq!(answer.status.is_success(), ok, "{query}");
        if !ok {
            let err = answer.parse::<RequestLog>().unwrap_err();
            assert_eq!(err.code, "invalid_query", "{query}");
            let key = query.split('=').next().unwrap();
            assert!(err.error.contains(key), "{query}: {}", err.error);
        }
    }
    let unknown = client.requests("nosuchname", "").await.unwrap();
    assert_eq!(unknown.status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_are_masked_in_the_log_and_replay_still_sends_them() {
    let s = PreviewSetup::start().await;
    let name = &s.created.name;
    let secrets = [
        "-H",
        "Authorization: Bearer sekrit-token",
        "-H",
        "Cookie: session=sekrit-cookie",
    ];
    for path in ["/hello", "/headers"] {
        let mut args = secrets.to_vec();
        let url = s.url(path);
        args.push(&url);
        assert_eq!(curl(&s.edge.ca(), &args).await.status, 200);
    }
    let cookies = curl(&s.edge.ca(), &[&s.url("/cookies")]).await;
    assert_eq!(cookies.status, 200);
    let requests = completed(&s.agent.socket, name, 3).await;
    // /hello's entry, whole, holds no secret; no entry's headers do (the
    // origin's /headers echoes them in its body: that is its own doing).
    let hello = serde_json::to_string(&requests[0]).unwrap();
    assert!(!hello.contains("sekrit"), "a secret in the log: {hello}");
    for r in &requests {
        let heads = format!("{:?}{:?}", r.request_headers, r.response_headers);
        assert!(!heads.contains("sekrit"), "a secret in {}: {heads}", r.path);
    }
    let auth = header(&requests[0].request_headers, "authorization").unwrap();
    assert!(auth.starts_with("(masked"), "{auth}");
    let set_cookie = header(&requests[2].response_headers, "set-cookie").unwrap();
    assert!(set_cookie.starts_with("(masked"), "{set_cookie}");

    // The CLI shows what the API does.
    let cli = tokio::process::Command::new(binary("calvin-agent"))
        .args(["log", name, "--json", "--socket"])
        .arg(&s.agent.socket)
        .output()
        .await
        .unwrap();
    let printed = String::from_utf8_lossy(&cli.stdout);
    let hello_line = printed
        .lines()
        .find(|l| l.contains("\"/hello\""))
        .unwrap_or_else(|| panic!("no /hello in {printed}"));
    assert!(!hello_line.contains("sekrit"), "{hello_line}");
    assert!(hello_line.contains("(masked"), "{hello_line}");

    // Replay sends the real values: the origin echoes them.
    let replayed: LoggedRequest = s
        .agent
        .client()
        .replay(name, requests[1].id)
        .await
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(replayed.status, Some(200));
    let echoed = &replayed.response_body.as_ref().unwrap().text;
    assert!(echoed.contains("Bearer sekrit-token"), "{echoed}");
    assert!(echoed.contains("session=sekrit-cookie"), "{echoed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_sends_the_request_to_the_port_again_and_logs_the_answer() {
    let s = PreviewSetup::start().await;
    let name = &s.created.name;
    let client = s.agent.client();
    let post = curl(&s.edge.ca(), &["--data-binary", "ping", &s.url("/echo")]).await;
    assert_eq!(post.text(), "ping");
    let first = completed(&s.agent.socket, name, 1).await.remove(0);
    let seen = s.origin.requests();

    let answer = client.replay(name, first.id).await.unwrap();
    assert_eq!(answer.status, 200);
    let replayed: LoggedRequest = answer.parse().unwrap();
    assert_eq!(replayed.replay_of, Some(first.id));
    assert_eq!(
        (replayed.method.as_str(), replayed.path.as_str()),
        ("POST", "/echo")
    );
    assert_eq!(replayed.status, Some(200));
    assert_eq!(replayed.response_body.as_ref().unwrap().text, "ping");
    assert_eq!(s.origin.requests(), seen + 1, "the origin saw it again");
    let log = log_of(&s.agent.socket, name, "").await;
    assert_eq!(log.requests.last().unwrap().replay_of, Some(first.id));

    // What cannot be replayed says why.
    let missing = client.replay(name, 999_999).await.unwrap();
    assert_eq!(missing.status, 404);
    assert_eq!(
        missing.parse::<LoggedRequest>().unwrap_err().code,
        "unknown_request"
    );
    let nobody = client.replay("nosuchname", first.id).await.unwrap();
    assert_eq!(nobody.status, 404);
    let body = pattern_bytes(5000);
    let file = std::env::temp_dir().join(format!("calvin-replay-{}", std::process::id()));
    std::fs::write(&file, &body).unwrap();
    let big = curl(
        &s.edge.ca(),
        &[
            "--data-binary",
            &format!("@{}", file.display()),
            &s.url("/count"),
        ],
    )
    .await;
    std::fs::remove_file(&file).ok();
    assert_eq!(big.status, 200);
    let big = completed(&s.agent.socket, name, 3).await.pop().unwrap();
    assert_eq!(big.path, "/count");
    let refused = client.replay(name, big.id).await.unwrap();
    assert_eq!(refused.status, 409);
    let err = refused.parse::<LoggedRequest>().unwrap_err();
    assert_eq!(err.code, "not_replayable");
    assert!(err.error.contains("5000 bytes"), "{}", err.error);

    // From the command line.
    let cli = tokio::process::Command::new(binary("calvin-agent"))
        .args(["replay", name, &first.id.to_string(), "--socket"])
        .arg(&s.agent.socket)
        .output()
        .await
        .unwrap();
    assert!(cli.status.success());
    let line = String::from_utf8_lossy(&cli.stdout);
    assert!(
        line.contains("POST /echo") && line.contains("200"),
        "{line}"
    );
    assert!(
        line.contains(&format!("(replay of {})", first.id)),
        "{line}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_follow_prints_each_request_as_it_completes_and_up_takes_the_log_s_size() {
    let state = tempfile::tempdir().unwrap();
    let edge_dir = state.path().join("edge");
    let any = "127.0.0.1:0";
    let edge = EdgeProcess::start(&edge_dir, any, any, any).await;
    let socket = state.path().join("agent.sock");
    let path = |p: &Path| p.to_str().unwrap().to_owned();
    let mut up = Process::start(
        "calvin-agent",
        &[
            "up",
            "--edge",
            &edge.quic.to_string(),
            "--token-file",
            &path(&edge_dir.join("agent.token")),
            "--ca",
            &path(&edge_dir.join("ca.pem")),
            "--server-name",
            "localhost",
            "--socket",
            &path(&socket),
            "--log-requests",
            "3",
        ],
    );
    up.line_after("control socket ").await;
    let origin = Origin::start().await;
    let created = preview_when_connected(&socket, origin.port).await;
    let ca = edge_dir.join("ca.pem");
    let url = |p: &str| format!("{}{p}", created.url);

    let mut follow = tokio::process::Command::new(binary("calvin-agent"));
    follow
        .args(["log", &created.name, "--follow", "--socket"])
        .arg(&socket)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut follow = Process::spawn(follow);
    for i in 0..4 {
        let started = Instant::now();
        let path = format!("/bytes/{i}");
        assert_eq!(curl(&ca, &[&url(&path)]).await.status, 200);
        let line = follow.line_after("").await;
        assert!(
            line.contains(&format!("GET {path}")) && line.contains("200"),
            "{line}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
    }
    let kept = completed(&socket, &created.name, 3).await;
    let paths: Vec<&str> = kept.iter().map(|r| r.path.as_str()).collect();
    assert_eq!(
        paths,
        ["/bytes/1", "/bytes/2", "/bytes/3"],
        "--log-requests 3 keeps 3"
    );

    // A request still waiting for its answer holds no other back: each
    // is printed as it completes.
    let slow_url = url("/slow?ms=3000");
    let slow_ca = ca.clone();
    let slow = tokio::spawn(async move { curl(&slow_ca, &[&slow_url]).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(curl(&ca, &[&url("/bytes/9")]).await.status, 200);
    let line = follow.line_after("").await;
    assert!(
        line.contains("GET /bytes/9"),
        "printed before the slow one: {line}"
    );
    assert_eq!(slow.await.unwrap().status, 200);
    let line = follow.line_after("").await;
    assert!(
        line.contains("GET /slow?ms=3000") && line.contains("200"),
        "{line}"
    );

    // A WebSocket is logged up to its switch.
    let host = created.url.trim_start_matches("https://");
    let host = host.split(':').next().unwrap().to_owned();
    let tcp = tokio::net::TcpStream::connect(edge.https).await.unwrap();
    let connector =
        tokio_rustls::TlsConnector::from(std::sync::Arc::new(tls_client_config(&ca, &[])));
    let server_name = rustls_pki_types::ServerName::try_from(host.clone()).unwrap();
    let tls = connector.connect(server_name, tcp).await.unwrap();
    let wss = format!("wss://{host}:{}/ws", edge.https.port());
    let (mut ws, response) = tokio_tungstenite::client_async(wss, tls).await.unwrap();
    assert_eq!(response.status(), 101);
    use futures_util::{SinkExt, StreamExt};
    ws.send(tokio_tungstenite::tungstenite::Message::text("hi"))
        .await
        .unwrap();
    assert_eq!(ws.next().await.unwrap().unwrap().into_text().unwrap(), "hi");
    let ws = completed(&socket, &created.name, 3).await.pop().unwrap();
    assert_eq!(
        (ws.path.as_str(), ws.status, ws.upgraded),
        ("/ws", Some(101), true)
    );
}
