//! The gateway's previews through the real stack (an edge, an agent, a dev
//! server, calvin-gateway driven by the MCP Python SDK): a session's
//! previews end with it, over the daemon and over stdio, unless kept or
//! made before; ttl_secs at its limits; preview_log showing what curl sent
//! through a preview.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use calvin_tests::gateway::{
    GatewayDaemon, GatewaySetup, assert_ok, assert_refused, call, drive, text, tool_names,
};
use calvin_tests::{Origin, TestAgent, TestEdge, binary, curl, send_signal};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// An edge, an agent of it, a dev server and a hosted gateway's setup.
struct Stack {
    edge: TestEdge,
    agent: TestAgent,
    origin: Origin,
    setup: GatewaySetup,
}

impl Stack {
    async fn start() -> Stack {
        let edge = TestEdge::start().await;
        let agent = TestAgent::start(&edge, "alice").await;
        let origin = Origin::start().await;
        let mut setup = GatewaySetup::new("hosted").await;
        setup.agent_socket = Some(agent.socket.clone());
        Stack {
            edge,
            agent,
            origin,
            setup,
        }
    }

    fn port(&self) -> u16 {
        self.origin.addr().port()
    }

    /// `GET /hello` through the preview `name`: its status.
    async fn status_of(&self, name: &str) -> u16 {
        let url = format!("{}/hello", self.edge.url(name));
        curl(&self.edge.ca(), &[&url]).await.status
    }

    /// The names the agent previews now, sorted.
    async fn listed(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .agent
            .list()
            .await
            .previews
            .into_iter()
            .map(|p| p.name)
            .collect();
        names.sort();
        names
    }

    /// A shell step: curl's status for `GET {url}/{path}` with the edge's CA.
    fn curl_step(&self, name: &str, path: &str) -> Value {
        json!({"op": "shell", "cmd": [
            "curl", "-sS", "--cacert", self.edge.ca(), "-o", "/dev/null", "-w", "%{http_code}",
            format!("{}{path}", self.edge.url(name)),
        ]})
    }
}

fn preview(port: u16, name: &str, extra: Value) -> Value {
    let mut args = json!({"port": port, "name": name});
    if let (Some(args), Value::Object(extra)) = (args.as_object_mut(), extra) {
        args.extend(extra);
    }
    call("preview", args)
}

/// `DELETE /sessions/<id>` of a registration: the names the daemon says
/// it took down.
async fn end_session(daemon: &GatewayDaemon, registered: &Value) -> Vec<String> {
    let id = registered["session"].as_str().expect("session id");
    let url = format!("{}/sessions/{id}", daemon.base);
    let out = curl(Path::new("/dev/null"), &["-X", "DELETE", &url]).await;
    assert_eq!(out.status, 200, "{}", out.text());
    let answer: Value = serde_json::from_slice(&out.body).expect("JSON");
    serde_json::from_value(answer["previews_down"].clone()).expect("previews_down")
}

fn mcp_url(registered: &Value) -> &str {
    registered["mcp_url"].as_str().expect("mcp_url")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_sessions_previews_end_with_it_unless_kept_or_made_before() {
    let s = Stack::start().await;
    let port = s.port();
    // Made by a person before any session: no session's to take down.
    s.agent.preview(port, Some("by-hand")).await;
    let daemon = GatewayDaemon::start(&s.setup).await;
    let a = daemon.register(GatewayDaemon::context_of(&s.setup)).await;
    let b = daemon.register(GatewayDaemon::context_of(&s.setup)).await;
    let out_a = drive(GatewayDaemon::http(
        mcp_url(&a),
        json!([
            preview(port, "sess-web", json!({})),
            preview(port, "sess-kept", json!({"keep": true})),
            preview(port, "by-hand", json!({})),
            preview(port, "sess-shared", json!({})),
        ]),
    ))
    .await;
    let out_b = drive(GatewayDaemon::http(
        mcp_url(&b),
        json!([
            preview(port, "sess-shared", json!({})),
            preview(port, "sess-b", json!({})),
        ]),
    ))
    .await;
    for out in out_a.iter().chain(&out_b) {
        assert_ok(out);
    }
    let ends = |v: &Value| v["structured"]["ends_with_session"].clone();
    assert_eq!(ends(&out_a[0]), true);
    assert!(
        text(&out_a[0]).contains(
            "It is taken down when this session ends (keep: true keeps it after the session)."
        ),
        "{}",
        out_a[0]
    );
    assert_eq!(ends(&out_a[1]), false);
    assert!(
        text(&out_a[1]).contains("stays up after this session (keep)"),
        "{}",
        out_a[1]
    );
    assert_eq!(ends(&out_a[2]), false);
    assert!(
        text(&out_a[2]).contains("it existed before this call"),
        "{}",
        out_a[2]
    );
    assert_eq!(ends(&out_b[0]), true, "a preview another session made");
    // The MCP clients went away; the sessions are still registered.
    for name in ["sess-web", "sess-kept", "by-hand", "sess-shared", "sess-b"] {
        assert_eq!(s.status_of(name).await, 200, "{name}");
    }

    // a ends: its own preview goes; the one b asked for too stays.
    assert_eq!(end_session(&daemon, &a).await, ["sess-web"]);
    assert_eq!(s.status_of("sess-web").await, 404);
    assert_eq!(
        s.listed().await,
        ["by-hand", "sess-b", "sess-kept", "sess-shared"]
    );
    assert_eq!(s.status_of("sess-shared").await, 200);
    assert_eq!(end_session(&daemon, &b).await, ["sess-b", "sess-shared"]);
    assert_eq!(s.listed().await, ["by-hand", "sess-kept"]);
    for (name, status) in [("sess-shared", 404), ("sess-kept", 200), ("by-hand", 200)] {
        assert_eq!(s.status_of(name).await, status, "{name}");
    }

    // A session still registered when the daemon stops ends with it.
    let c = daemon.register(GatewayDaemon::context_of(&s.setup)).await;
    let out = drive(GatewayDaemon::http(
        mcp_url(&c),
        json!([preview(port, "sess-stop", json!({}))]),
    ))
    .await;
    assert_ok(&out[0]);
    assert_eq!(s.status_of("sess-stop").await, 200);
    daemon.stop().await;
    assert_eq!(s.listed().await, ["by-hand", "sess-kept"]);
    assert_eq!(s.status_of("sess-stop").await, 404);
    s.agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_sessions_previews_end_when_its_client_goes_away() {
    let s = Stack::start().await;
    let port = s.port();
    let out = drive(s.setup.stdio(json!([
        preview(port, "stdio-web", json!({})),
        preview(port, "stdio-kept", json!({"keep": true})),
        s.curl_step("stdio-web", "/hello"),
        preview(port, "stdio-gone", json!({})),
        call("unpreview", json!({"name": "stdio-gone"})),
    ])))
    .await;
    assert_ok(&out[0]);
    assert_ok(&out[1]);
    assert_eq!(out[2]["stdout"], "200", "{}", out[2]);
    assert_ok(&out[4]);
    // The SDK closed the gateway's stdin: the session ended before the
    // process exited.
    assert_eq!(s.listed().await, ["stdio-kept"]);
    assert_eq!(s.status_of("stdio-web").await, 404);
    assert_eq!(s.status_of("stdio-kept").await, 200);
    s.agent.stop().await;
}

/// One JSON-RPC exchange with a gateway over its stdio: sends `message`
/// and, for a request, returns the answer with its id.
async fn rpc(
    stdin: &mut tokio::process::ChildStdin,
    stdout: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    message: Value,
) -> Option<Value> {
    let line = format!("{message}\n");
    stdin.write_all(line.as_bytes()).await.expect("write");
    let id = message.get("id")?.clone();
    loop {
        let line = tokio::time::timeout(Duration::from_secs(30), stdout.next_line())
            .await
            .expect("an answer within 30 s")
            .expect("read")
            .expect("a line");
        let answer: Value = serde_json::from_str(&line).expect("JSON-RPC");
        if answer["id"] == id {
            return Some(answer);
        }
    }
}

/// SIGTERM ends a stdio session too. The SDK cannot signal the server it
/// spawned, so this one speaks MCP's JSON lines itself, with stdin kept
/// open: the signal, not the end of input, ends the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_gateway_told_to_stop_takes_its_previews_down() {
    let s = Stack::start().await;
    let mut command = tokio::process::Command::new(binary("calvin-gateway"));
    for arg in s.setup.stdio_args() {
        command.arg(arg.as_str().expect("an argument"));
    }
    command.env_clear();
    for (k, v) in s.setup.env().as_object().expect("env") {
        command.env(k, v.as_str().expect("string"));
    }
    let log_file = s.setup.dir.path().join("stdio.log");
    let log = std::fs::File::create(&log_file).expect("log");
    let mut child = command
        .current_dir(s.setup.session_dir())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .expect("calvin-gateway runs");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "gateway-previews-test", "version": "1"}}});
    let answer = rpc(&mut stdin, &mut stdout, init).await.expect("answer");
    assert_eq!(answer["result"]["serverInfo"]["name"], "calvin", "{answer}");
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    rpc(&mut stdin, &mut stdout, initialized).await;
    let made = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "preview", "arguments": {"port": s.port(), "name": "term-web"}}});
    let answer = rpc(&mut stdin, &mut stdout, made).await.expect("answer");
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    assert_eq!(s.status_of("term-web").await, 200);

    send_signal(&child, "TERM").await;
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .unwrap_or_else(|_| {
            let log = std::fs::read_to_string(&log_file).unwrap_or_default();
            panic!("the gateway did not exit within 10 s of SIGTERM; its log:\n{log}")
        })
        .expect("wait");
    assert!(status.success(), "{status}");
    assert!(s.listed().await.is_empty());
    assert_eq!(s.status_of("term-web").await, 404);
    drop(stdin);
    s.agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttl_secs_is_refused_past_its_limits_and_the_answer_says_when_it_ends() {
    let s = Stack::start().await;
    let port = s.port();
    let before = time::OffsetDateTime::now_utc();
    let out = drive(s.setup.stdio(json!([
        {"op": "list"},
        preview(port, "ttl-low", json!({"ttl_secs": 59})),
        preview(port, "ttl-high", json!({"ttl_secs": 604_801})),
        preview(port, "ttl-words", json!({"ttl_secs": "2h"})),
        preview(port, "ttl-min", json!({"ttl_secs": 60})),
        preview(port, "ttl-max", json!({"ttl_secs": "604800", "keep": true})),
    ])))
    .await;
    let tools = out[0]["tools"].as_array().expect("tools");
    let schema = &tools
        .iter()
        .find(|t| t["name"] == "preview")
        .expect("preview")["input_schema"];
    assert_eq!(schema["properties"]["ttl_secs"]["minimum"], 60);
    assert_eq!(schema["properties"]["ttl_secs"]["maximum"], 604_800);
    assert_eq!(schema["properties"]["keep"]["type"], "boolean");
    assert_refused(&out[1], "ttl_secs is 59; at least 60 (one minute)");
    assert_refused(&out[2], "ttl_secs is 604801; at most 604800 (7 days)");
    assert_refused(
        &out[3],
        "ttl_secs must be a whole number of seconds (60 to 604800), got \"2h\"",
    );
    for (out, secs) in [(&out[4], 60), (&out[5], 604_800)] {
        assert_ok(out);
        let at = out["structured"]["expires_at"]
            .as_str()
            .unwrap_or_else(|| panic!("expires_at: {out}"));
        let at = time::OffsetDateTime::parse(at, &time::format_description::well_known::Rfc3339)
            .expect("RFC 3339");
        let after = time::OffsetDateTime::now_utc();
        let secs = time::Duration::seconds(secs);
        assert!(
            at >= before + secs - time::Duration::seconds(2)
                && at <= after + secs + time::Duration::seconds(2),
            "{at} for ttl {secs}"
        );
        assert!(text(out).contains("It is taken down at "), "{out}");
    }
    assert!(
        text(&out[4]).contains("or when this session ends, whichever comes first"),
        "{}",
        out[4]
    );
    assert!(s.listed().await.iter().all(|n| n != "ttl-low"));
    s.agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_protected_preview_answers_401_and_its_share_url_opens_it() {
    let s = Stack::start().await;
    let port = s.port();
    let out = drive(s.setup.stdio(json!([
        {"op": "list"},
        preview(port, "tool-guarded", json!({"protect": true, "keep": true})),
        preview(port, "tool-bad", json!({"protect": "yes"})),
    ])))
    .await;
    let tools = out[0]["tools"].as_array().expect("tools");
    let tool = tools
        .iter()
        .find(|t| t["name"] == "preview")
        .expect("preview");
    assert_eq!(
        tool["input_schema"]["properties"]["protect"]["type"],
        "boolean"
    );
    assert!(
        tool["description"]
            .as_str()
            .is_some_and(|d| d.contains("protect: true") && d.contains("share_url")),
        "{tool}"
    );
    assert_ok(&out[1]);
    let made = &out[1]["structured"];
    assert_eq!(made["protected"], true);
    let link = made["share_url"].as_str().expect("share_url");
    assert!(made["share_expires"].is_string(), "{made}");
    assert!(
        text(&out[1]).contains("share this link instead (it works until "),
        "{}",
        out[1]
    );
    assert!(text(&out[1]).contains(link), "{}", out[1]);
    assert_refused(&out[2], "protect must be true or false");
    assert_eq!(s.status_of("tool-guarded").await, 401);
    let token = link.split_once("?calvin_share=").expect("a token").1;
    let url = format!("{}/hello?calvin_share={token}", s.edge.url("tool-guarded"));
    assert_eq!(curl(&s.edge.ca(), &[&url]).await.status, 200);
    s.agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preview_log_shows_what_curl_sent_through_the_preview() {
    let s = Stack::start().await;
    let port = s.port();
    let daemon = GatewayDaemon::start(&s.setup).await;
    let session = daemon.register(GatewayDaemon::context_of(&s.setup)).await;
    let url = mcp_url(&session);
    let out = drive(GatewayDaemon::http(
        url,
        json!([
            preview(port, "log-web", json!({})),
            s.curl_step("log-web", "/hello?from=the-log"),
            call("preview_log", json!({"name": "log-web"})),
            call("preview_log", json!({"name": "log-web", "limit": 101})),
            call("preview_log", json!({"name": "log-web", "limit": 0})),
            call("preview_log", json!({"name": "log-web", "limit": 100})),
            call("preview_log", json!({"name": "no-such-web"})),
        ]),
    ))
    .await;
    assert_ok(&out[0]);
    assert_eq!(out[1]["stdout"], "200", "{}", out[1]);
    assert_ok(&out[2]);
    let listed = text(&out[2]);
    assert!(
        listed.contains("The preview log-web's latest") && listed.contains("newest last"),
        "{listed}"
    );
    let line = listed
        .lines()
        .find(|l| l.contains("GET /hello?from=the-log → 200 in "))
        .unwrap_or_else(|| panic!("no line for curl's request in:\n{listed}"));
    assert!(line.contains(", 0 B in, 18 B out"), "{line}");
    let requests = out[2]["structured"]["requests"]
        .as_array()
        .expect("requests");
    let logged = requests
        .iter()
        .find(|r| r["path"] == "/hello?from=the-log")
        .expect("curl's request");
    let id = logged["id"].as_u64().expect("id");
    assert!(line.starts_with(&format!("#{id} ")), "{line}");
    assert_refused(&out[3], "limit is 101; at most 100");
    assert_refused(&out[4], "limit is 0; at least 1");
    assert_ok(&out[5]);
    assert_refused(&out[6], "the request log was not read: ");

    let out = drive(GatewayDaemon::http(
        url,
        json!([
            call("preview_log", json!({"name": "log-web", "id": id})),
            call("preview_log", json!({"name": "log-web", "id": id + 1000})),
        ]),
    ))
    .await;
    assert_ok(&out[0]);
    let full = text(&out[0]);
    for expected in [
        format!("Request #{id} to the preview log-web, in full."),
        "\nRequest headers:".into(),
        "\n  user-agent: curl/".into(),
        "\nRequest body: none".into(),
        "\nResponse headers:".into(),
        "\nResponse body (18 bytes, 18 B shown):\n    hello from origin".into(),
    ] {
        assert!(
            full.contains(&expected),
            "{expected:?} missing from:\n{full}"
        );
    }
    assert_eq!(out[0]["structured"]["request"]["id"], id);
    assert_refused(
        &out[1],
        &format!("the log of log-web has no request {}", id + 1000),
    );
    daemon.stop().await;
    s.agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preview_log_is_refused_where_the_tunnel_is_off() {
    let setup = GatewaySetup::new("self-hosted").await;
    let out = drive(setup.stdio(json!([
        {"op": "list"},
        call("preview_log", json!({"name": "web"})),
    ])))
    .await;
    assert!(tool_names(&out[0]).contains(&"preview_log".to_owned()));
    assert_refused(&out[1], "the tunnel is disabled on a self-hosted gateway");
}
