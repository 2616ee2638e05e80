//! calvin-gateway driven by the official MCP Python SDK, over stdio and
//! streamable HTTP, against a fake Slack and (hosted) a real edge and agent.

use std::time::Duration;

use calvin_tests::gateway::{
    CHANNEL, GatewayDaemon, GatewaySetup, THREAD_TS, assert_refused, call, drive, drive_logged,
    gateway_env, text, tool_names,
};
use calvin_tests::{Origin, TestAgent, TestEdge, binary, curl};
use serde_json::{Value, json};

/// The chat-thread family (claude-threads-mcp-tools.txt), in every mode.
const FAMILY: [&str; 8] = [
    "permission_prompt",
    "read_post",
    "react_to_post",
    "update_own_post",
    "list_thread",
    "read_channel_history",
    "search_messages",
    "send_dm",
];

/// A self-hosted gateway's tools, in order: agent-tools.txt's without
/// checkout_repo, then the chat-thread family.
fn self_hosted_tools() -> Vec<&'static str> {
    let mut tools = vec![
        "send_file",
        "post_card",
        "spawn_thread",
        "read_thread",
        "post_thread",
        "request_secret",
        "preview",
        "unpreview",
        "preview_log",
    ];
    tools.extend(FAMILY);
    tools
}

/// A workspace definition (its repositories are never cloned here).
const WORKSPACE: &str =
    "[workspace]\n[[workspace.repos]]\nname = \"web\"\nurl = \"https://github.com/acme/web.git\"\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_mode_lists_the_spec_tools_and_says_what_it_offers() {
    let (list, info) = (json!({ "op": "list" }), json!({ "op": "info" }));

    // The four gateways, driven at once.
    let one = GatewaySetup::new("one-machine").await;
    let selfhosted = GatewaySetup::new("self-hosted").await;
    let mut defined = GatewaySetup::new("self-hosted").await;
    defined.extra = WORKSPACE.into();
    let edge = TestEdge::start().await;
    let agent = TestAgent::start(&edge, "alice").await;
    let mut hosted = GatewaySetup::new("hosted").await;
    hosted.agent_socket = Some(agent.socket.clone());
    let (one_out, selfhosted_out, defined_out, hosted_out) = tokio::join!(
        drive(one.stdio(json!([
            info,
            list,
            call("preview", json!({"port": 3000})),
            call("read_thread", json!({}))
        ]))),
        drive(selfhosted.stdio(json!([
            info,
            list,
            call("preview", json!({"port": 3000})),
            call("unpreview", json!({"name": "web"})),
            call("checkout_repo", json!({"repos": ["web"]})),
        ]))),
        drive(defined.stdio(json!([info, list]))),
        drive(hosted.stdio(json!([
            info,
            list,
            call("checkout_repo", json!({"repos": ["web"]}))
        ]))),
    );
    agent.stop().await;

    let out = one_out;
    assert_eq!(out[0]["name"], "calvin");
    let said = out[0]["instructions"].as_str().expect("instructions");
    assert!(said.starts_with("calvin (one-machine mode) posts files and cards into this session's Slack thread (send_file, post_card), reads posts, threads, channels and searches in Slack"), "{said}");
    assert!(
        said.contains("--permission-prompt-tool mcp__calvin__permission_prompt"),
        "{said}"
    );
    assert!(
        !said.contains("preview") && !said.contains("read_thread"),
        "{said}"
    );
    let mut want = vec!["send_file", "post_card"];
    want.extend(FAMILY);
    assert_eq!(
        tool_names(&out[1]),
        want,
        "the chat-thread family needs no tunnel"
    );
    assert!(
        said.contains("(read_post, list_thread, read_channel_history, search_messages, react_to_post, update_own_post, send_dm)"),
        "{said}"
    );
    assert_refused(&out[2], "there is no tool \"preview\"");
    assert_refused(
        &out[3],
        "there is no tool \"read_thread\" on this gateway (one-machine mode)",
    );

    // Self-hosted without a workspace definition: no checkout_repo.
    let out = selfhosted_out;
    let said = out[0]["instructions"].as_str().expect("instructions");
    assert!(!said.contains("gives local servers public URLs"), "{said}");
    assert!(
        said.contains("Previews are off: the tunnel is disabled on this self-hosted gateway"),
        "{said}"
    );
    assert!(
        said.contains("reads other Slack threads and replies in them (read_thread, post_thread)"),
        "{said}"
    );
    assert!(!said.contains("checkout_repo"), "{said}");
    let mut want = self_hosted_tools();
    assert_eq!(tool_names(&out[1]), want);
    for refusal in &out[2..4] {
        assert_refused(refusal, "the tunnel is disabled on a self-hosted gateway");
    }
    assert_refused(&out[4], "there is no tool \"checkout_repo\"");

    // Annotations say what each tool does to the world.
    let tools = out[1]["tools"].as_array().expect("tools");
    let annotations =
        |name: &str| tools.iter().find(|t| t["name"] == name).expect("tool")["annotations"].clone();
    assert_eq!(annotations("unpreview")["destructiveHint"], true);
    assert_eq!(annotations("send_file")["readOnlyHint"], false);
    assert_eq!(annotations("send_file")["destructiveHint"], false);
    assert_eq!(annotations("post_card")["openWorldHint"], true);
    assert_eq!(annotations("read_thread")["readOnlyHint"], true);
    assert_eq!(annotations("post_thread")["readOnlyHint"], false);
    assert_eq!(annotations("read_channel_history")["readOnlyHint"], true);
    assert_eq!(annotations("send_dm")["readOnlyHint"], false);

    // Self-hosted with a workspace definition: checkout_repo too.
    let out = defined_out;
    want.insert(2, "checkout_repo");
    assert_eq!(tool_names(&out[1]), want);
    let said = out[0]["instructions"].as_str().expect("instructions");
    assert!(
        said.contains("checks out the workspace's repositories (checkout_repo)"),
        "{said}"
    );

    // Hosted lists all nine and the family, even without a workspace
    // definition.
    let out = hosted_out;
    assert_eq!(tool_names(&out[1]), want);
    let said = out[0]["instructions"].as_str().expect("instructions");
    assert!(
        said.contains(
            "It also gives local servers public URLs (preview, unpreview) and shows the requests \
             they served (preview_log)."
        ),
        "{said}"
    );
    assert_refused(
        &out[2],
        "no repository web in this workspace; the list is in AGENTS.md",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosted_preview_serves_the_origin_then_unpreview_takes_it_down() {
    let edge = TestEdge::start().await;
    let agent = TestAgent::start(&edge, "alice").await;
    let origin = Origin::start().await;
    let mut setup = GatewaySetup::new("hosted").await;
    setup.agent_socket = Some(agent.socket.clone());
    let port = origin.addr().port().to_string();
    let out = drive(setup.stdio(json!([
        // A port sent as a string is accepted; keep: the preview outlives
        // this stdio session, for the next one to take down.
        call(
            "preview",
            json!({"port": port, "name": "gw-web", "keep": true})
        ),
    ])))
    .await;
    assert_eq!(out[0]["is_error"], false, "{}", out[0]);
    let url = out[0]["structured"]["url"]
        .as_str()
        .expect("url")
        .to_owned();
    assert_eq!(out[0]["structured"]["name"], "gw-web");
    assert_eq!(out[0]["structured"]["listening"], true);
    assert!(text(&out[0]).contains(&url));
    let got = curl(&edge.ca(), &[&format!("{url}/hello")]).await;
    assert_eq!(
        (got.status, got.text().as_str()),
        (200, "hello from origin\n")
    );

    let out = drive(setup.stdio(json!([
        call("unpreview", json!({"name": "gw-web"})),
        call("preview", json!({"port": 0})),
        call("preview", json!({"port": "65536", "name": "Bad_Name"})),
    ])))
    .await;
    assert_eq!(out[0]["is_error"], false, "{}", out[0]);
    let got = curl(&edge.ca(), &[&format!("{url}/hello")]).await;
    assert_eq!(got.status, 404, "{}", got.text());
    assert_refused(&out[1], "port must be an integer from 1 to 65535, got 0");
    assert_refused(&out[2], "2 problem(s)");
    assert_refused(&out[2], "got \"65536\"");

    // No agent: a clear error naming the socket.
    setup.agent_socket = Some(setup.dir.path().join("no-agent.sock"));
    let out = drive(setup.stdio(json!([call("preview", json!({"port": 3000}))]))).await;
    assert_refused(
        &out[0],
        &format!(
            "the calvin agent is not running at {}",
            setup.dir.path().join("no-agent.sock").display()
        ),
    );
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_file_uploads_the_exact_bytes_into_the_thread() {
    let setup = GatewaySetup::new("one-machine").await;
    let bytes: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::create_dir(setup.session_dir().join("out")).expect("dir");
    std::fs::write(setup.session_dir().join("out/plot.png"), &bytes).expect("file");
    let temp = tempfile::NamedTempFile::new_in(setup.temp_dir()).expect("temp file");
    std::fs::write(temp.path(), b"from the temp dir").expect("temp");
    let out = drive(setup.stdio(json!([
        call("send_file", json!({
            "path": "out/plot.png", "comment": "the plot", "title": "Plot", "alt_text": "a rising line"
        })),
        call("send_file", json!({"path": temp.path(), "caption": "by caption"})),
    ])))
    .await;
    assert_eq!(out[0]["is_error"], false, "{}", out[0]);
    assert_eq!(out[1]["is_error"], false, "{}", out[1]);
    let files = setup.slack.files();
    assert_eq!(files.len(), 2);
    let plot = &files[0];
    assert_eq!(plot.bytes, bytes);
    assert_eq!(
        (plot.channel.as_deref(), plot.thread_ts.as_deref()),
        (Some(CHANNEL), Some(THREAD_TS))
    );
    assert_eq!(plot.filename, "plot.png");
    assert_eq!(plot.title, "Plot");
    assert_eq!(plot.initial_comment.as_deref(), Some("the plot"));
    assert_eq!(plot.alt_txt.as_deref(), Some("a rising line"));
    assert_eq!(files[1].bytes, b"from the temp dir");
    assert_eq!(files[1].initial_comment.as_deref(), Some("by caption"));
    // The title defaults to the file name.
    let name = temp
        .path()
        .file_name()
        .expect("name")
        .to_string_lossy()
        .to_string();
    assert_eq!(files[1].title, name);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_file_refuses_every_escape_and_secret() {
    let setup = GatewaySetup::new("one-machine").await;
    let session = setup.session_dir();
    std::fs::write(session.join("empty.txt"), b"").expect("empty");
    std::fs::write(session.join("env.txt"), b"KEY=sk_live_51SECRETVALUE\n").expect("secret");
    std::fs::create_dir(session.join("sub")).expect("sub");
    std::os::unix::fs::symlink("/etc/hostname", session.join("out-link")).expect("symlink");
    let fifo = session.join("fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo");
    assert!(made.success());
    setup.seed_secret("STRIPE_KEY", "sk_live_51SECRETVALUE");
    let out = drive(setup.stdio(json!([
        call("send_file", json!({"path": "../gateway.toml"})),
        call("send_file", json!({"path": "/etc/hostname"})),
        call("send_file", json!({"path": "out-link"})),
        call("send_file", json!({"path": "/proc/self/status"})),
        call("send_file", json!({"path": "sub"})),
        call("send_file", json!({"path": "fifo"})),
        call("send_file", json!({"path": "/dev/null"})),
        call("send_file", json!({"path": "empty.txt"})),
        call("send_file", json!({"path": "env.txt"})),
        call("send_file", json!({"path": "missing.txt"})),
        call("send_file", json!({"comment": 5})),
    ])))
    .await;
    for (i, v) in out.iter().enumerate() {
        assert_eq!(v["is_error"], true, "call {i} was not refused: {v}");
    }
    assert_refused(&out[0], "outside the session directory");
    assert_refused(&out[1], "outside the session directory");
    assert_refused(&out[2], "it resolves to /etc/hostname, which is outside");
    assert_refused(&out[3], "files under /proc, /sys and /dev are never sent");
    assert_refused(&out[4], "it is a directory");
    assert_refused(&out[5], "it is a FIFO");
    assert_refused(&out[6], "it is a character device");
    assert_refused(&out[7], "the file is empty");
    assert_refused(
        &out[8],
        "contains the value of one of the session's secrets",
    );
    assert_refused(&out[9], "does not exist");
    assert!(!text(&out[8]).contains("sk_live"), "{}", out[8]);
    assert_refused(&out[10], "path is required");
    assert_refused(&out[10], "comment must be a string");
    assert!(setup.slack.files().is_empty(), "nothing was uploaded");

    // Text sent with a file is checked for secrets too.
    std::fs::write(session.join("ok.txt"), b"fine").expect("file");
    let out = drive(setup.stdio(json!([
        call(
            "send_file",
            json!({"path": "ok.txt", "comment": "key sk_live_51SECRETVALUE"})
        ),
        call(
            "send_file",
            json!({"path": "ok.txt", "title": "sk_live_51SECRETVALUE"})
        ),
    ])))
    .await;
    assert_refused(
        &out[0],
        "the comment contains the value of one of the session's secrets",
    );
    assert_refused(&out[1], "the title contains");
    assert!(!out.iter().any(|v| text(v).contains("sk_live")));
    assert!(setup.slack.files().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_symlink_swapped_while_calls_run_never_leaks_the_other_file() {
    let setup = GatewaySetup::new("one-machine").await;
    let session = setup.session_dir();
    std::fs::write(session.join("inside.txt"), b"inside bytes").expect("inside");
    std::os::unix::fs::symlink("inside.txt", session.join("link")).expect("link");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let (stop, session) = (stop.clone(), session.clone());
        std::thread::spawn(move || {
            let mut flips = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let target = if flips.is_multiple_of(2) {
                    "/etc/passwd"
                } else {
                    "inside.txt"
                };
                let tmp = session.join("link.tmp");
                let _ = std::fs::remove_file(&tmp);
                std::os::unix::fs::symlink(target, &tmp).expect("symlink");
                std::fs::rename(&tmp, session.join("link")).expect("swap");
                flips += 1;
            }
            flips
        })
    };
    // Batches of 40 parallel calls, until both targets have been seen: a
    // busy machine can deschedule the swapper for a whole batch, so one
    // batch alone may see a single target.
    let (mut sent, mut refused, mut batches) = (0, 0, 0);
    while batches < 10 && (sent == 0 || refused == 0) {
        batches += 1;
        let calls: Vec<Value> = (0..40)
            .map(|_| json!({"tool": "send_file", "args": {"path": "link"}}))
            .collect();
        let out = drive(setup.stdio(json!([{ "op": "parallel", "calls": calls }]))).await;
        let results = out[0]["results"].as_array().expect("results");
        for result in results {
            if result["is_error"] == true {
                assert_refused(result, "outside the session directory");
                refused += 1;
            } else {
                sent += 1;
            }
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let flips = swapper.join().expect("swapper");
    for file in setup.slack.files() {
        assert_eq!(
            file.bytes, b"inside bytes",
            "a swapped symlink leaked another file"
        );
    }
    assert_eq!(setup.slack.files().len(), sent);
    println!("{batches} batches: {sent} sent, {refused} refused, {flips} swaps");
    // The swaps really raced the calls: some saw each target.
    assert!(sent > 0 && refused > 0, "{sent} sent, {refused} refused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_51st_send_file_is_refused_even_when_calls_race() {
    let setup = GatewaySetup::new("one-machine").await;
    std::fs::write(setup.session_dir().join("a.txt"), b"a").expect("file");
    let calls: Vec<Value> = (0..51)
        .map(|_| json!({"tool": "send_file", "args": {"path": "a.txt"}}))
        .collect();
    let out = drive(setup.stdio(json!([
        { "op": "parallel", "calls": calls },
        call("post_card", json!({"spec": {"root": "c", "elements": {"c": {"type": "Card", "props": {"title": "still allowed"}, "children": []}}}})),
    ])))
    .await;
    let results = out[0]["results"].as_array().expect("results");
    let refused: Vec<&Value> = results.iter().filter(|r| r["is_error"] == true).collect();
    assert_eq!(refused.len(), 1, "{results:?}");
    assert_refused(refused[0], "send_file is limited to 50 calls per runner");
    assert_eq!(setup.slack.files().len(), 50);
    // Another tool's count is its own.
    assert_eq!(out[1]["is_error"], false, "{}", out[1]);

    // A new session (the runner restarted) starts again.
    let out = drive(setup.stdio(json!([call("send_file", json!({"path": "a.txt"}))]))).await;
    assert_eq!(out[0]["is_error"], false, "{}", out[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_switched_off_are_refused_with_the_reason() {
    let mut setup = GatewaySetup::new("one-machine").await;
    setup.extra = "[uploads]\nenabled = false\n".into();
    std::fs::write(setup.session_dir().join("a.txt"), b"a").expect("file");
    let out = drive(setup.stdio(json!([call("send_file", json!({"path": "a.txt"}))]))).await;
    assert_refused(&out[0], "file uploads are switched off on this gateway");
}

fn full_card() -> Value {
    json!({
        "root": "card",
        "elements": {
            "card": {"type": "Card", "props": {"title": "Deploy report"},
                     "children": ["h", "facts", "t", "table", "chart", "div", "img", "b1", "b2"]},
            "h": {"type": "Heading", "props": {"text": "Summary"}},
            "facts": {"type": "Fields", "children": ["f1", "f2"]},
            "f1": {"type": "Field", "props": {"label": "Status", "value": "green"}},
            "f2": {"type": "Field", "props": {"label": "Duration", "value": "4 min"}},
            "t": {"type": "Text", "props": {"text": "All *good*."}},
            "table": {"type": "Table", "props": {"columns": ["service", "p99"], "rows": [["api", 12], ["web", "30"]]}},
            "chart": {"type": "Chart", "props": {"kind": "bar", "title": "Latency",
                      "series": [{"name": "p99", "points": [{"label": "api", "value": 12}, {"label": "web", "value": 30}]}]}},
            "div": {"type": "Divider"},
            "img": {"type": "Image", "props": {"url": "https://example.com/a.png", "alt": "a chart"}},
            "b1": {"type": "Button", "props": {"text": "Open", "url": "https://example.com"}},
            "b2": {"type": "Button", "props": {"text": "Logs", "url": "http://example.com/logs"}}
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cards_render_as_blocks_and_bad_ones_list_every_problem() {
    let setup = GatewaySetup::new("one-machine").await;
    setup.seed_secret("TOKEN", "tok_SECRET_123");
    let mut secret_card = full_card();
    secret_card["elements"]["t"]["props"]["text"] = json!("the token is tok_SECRET_123");
    let bad = json!({
        "root": "card",
        "elements": {
            "card": {"type": "Card", "children": ["x", "b", "missing", "loop"]},
            "x": {"type": "Sparkline", "props": {}},
            "b": {"type": "Button", "props": {"text": "Go", "url": "javascript:alert(1)", "action_id": "go"}},
            "loop": {"type": "Fields", "children": ["loop"]}
        },
        "state": {"page": 2}
    });
    let out = drive(setup.stdio(json!([
        call("post_card", json!({"spec": full_card()})),
        call("post_card", json!({"spec": bad})),
        call("post_card", json!({"spec": secret_card})),
    ])))
    .await;
    assert_eq!(out[0]["is_error"], false, "{}", out[0]);
    let messages = setup.slack.messages();
    assert_eq!(messages.len(), 1, "only the valid card is posted");
    let posted = &messages[0];
    assert_eq!(
        (posted.channel.as_str(), posted.thread_ts.as_deref()),
        (CHANNEL, Some(THREAD_TS))
    );
    let blocks = posted.blocks.clone().expect("blocks");
    let types: Vec<&str> = blocks
        .as_array()
        .expect("blocks")
        .iter()
        .map(|b| b["type"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        types,
        [
            "header",
            "header",
            "section",
            "section",
            "table",
            "data_visualization",
            "section",
            "divider",
            "image",
            "actions"
        ],
        "{blocks}"
    );
    let table = &blocks[4];
    assert_eq!(table["rows"][0][0]["text"], "service");
    assert_eq!(table["rows"][2][1]["text"], "30");
    assert_eq!(blocks[5]["chart"]["type"], "bar");
    assert_eq!(blocks[9]["elements"][1]["url"], "http://example.com/logs");
    assert_eq!(out[0]["structured"]["charts_as_text"], false);
    assert!(
        posted
            .text
            .as_deref()
            .is_some_and(|t| t.contains("Deploy report")),
        "a notification fallback text: {:?}",
        posted.text
    );

    let problems = text(&out[1]);
    assert_eq!(out[1]["is_error"], true);
    for needle in [
        "\"x\"",
        "Sparkline",
        "\"b\"",
        "javascript",
        "action_id",
        "\"missing\"",
        "\"loop\"",
        "state",
    ] {
        assert!(
            problems.contains(needle),
            "{needle} missing from:\n{problems}"
        );
    }
    assert_refused(&out[2], "secrets");
    assert!(!text(&out[2]).contains("tok_SECRET_123"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calvin_send_file_shares_the_session_and_its_count_over_stdio() {
    let setup = GatewaySetup::new("one-machine").await;
    std::fs::write(setup.session_dir().join("report.txt"), b"from a script").expect("file");
    std::fs::write(setup.session_dir().join("b.txt"), b"from the tool").expect("file");
    let script = binary("calvin-send-file");
    let env = gateway_env();
    let out = drive(setup.stdio(json!([
        call("send_file", json!({"path": "b.txt"})),
        {"op": "shell", "cmd": [script, "report.txt", "made by a script"], "env": env, "cwd": setup.session_dir()},
        {"op": "shell", "cmd": [script, "/etc/hostname"], "env": env, "cwd": setup.session_dir()},
        call("send_file", json!({"path": "b.txt"})),
    ])))
    .await;
    assert_eq!(out[1]["code"], 0, "{}", out[1]);
    assert_ne!(out[2]["code"], 0, "{}", out[2]);
    assert!(
        out[2]["stderr"]
            .as_str()
            .unwrap_or_default()
            .contains("/etc/hostname"),
        "{}",
        out[2]
    );
    // The tool, the script, the tool: one count.
    assert_eq!(out[3]["structured"]["sent"], 3, "{}", out[3]);
    let files = setup.slack.files();
    assert_eq!(files[1].bytes, b"from a script");
    assert_eq!(
        files[1].initial_comment.as_deref(),
        Some("made by a script")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_daemon_serves_registered_sessions_and_checks_host_and_origin() {
    let setup = GatewaySetup::new("self-hosted").await;
    std::fs::write(setup.session_dir().join("a.txt"), b"over http").expect("file");
    let daemon = GatewayDaemon::start(&setup).await;
    let context = json!({
        "channel": CHANNEL, "thread_ts": THREAD_TS,
        "session_dir": setup.session_dir(), "owner": "U0OWNER"
    });

    // Registering needs the daemon's token.
    for token in ["", "not-the-token"] {
        let refused = daemon.try_register(&context, token).await;
        assert_eq!(refused.status, 401, "{}", refused.text());
    }
    let registered = daemon.register(context).await;
    let mcp_url = registered["mcp_url"].as_str().expect("mcp_url").to_owned();
    let send_url = registered["send_file_url"]
        .as_str()
        .expect("send_file_url")
        .to_owned();

    // A script before any MCP session counts for the session too.
    let ca = std::path::Path::new("/dev/null");
    let path = setup.session_dir().join("a.txt");
    let early = curl(
        ca,
        &[
            "-X",
            "POST",
            "-H",
            "content-type: application/json",
            "--data",
            &json!({"path": path}).to_string(),
            &send_url,
        ],
    )
    .await;
    assert_eq!(early.status, 200, "{}", early.text());

    let mut env = gateway_env();
    env["CALVIN_SEND_FILE_URL"] = json!(send_url);
    let out = drive(json!({
        "transport": "http",
        "url": mcp_url,
        "steps": [
            {"op": "list"},
            call("send_file", json!({"path": "a.txt"})),
            call("preview", json!({"port": 8080})),
            {"op": "shell", "cmd": [binary("calvin-send-file"), "a.txt", "via the daemon"], "env": env, "cwd": setup.session_dir()},
            call("send_file", json!({"path": "a.txt"})),
        ]
    }))
    .await;
    assert_eq!(tool_names(&out[0]), self_hosted_tools());
    assert_eq!(out[1]["structured"]["sent"], 2, "{}", out[1]);
    assert_refused(&out[2], "the tunnel is disabled on a self-hosted gateway");
    assert_eq!(out[3]["code"], 0, "{}", out[3]);
    assert_eq!(out[4]["structured"]["sent"], 4, "{}", out[4]);
    // A second MCP session of the same registration shares the count: a
    // runner cannot get past a limit by reconnecting.
    let again = drive(json!({
        "transport": "http",
        "url": mcp_url,
        "steps": [call("send_file", json!({"path": "a.txt"}))]
    }))
    .await;
    assert_eq!(again[0]["structured"]["sent"], 5, "{}", again[0]);
    let files = setup.slack.files();
    assert_eq!(files.len(), 5);
    assert!(
        files
            .iter()
            .all(|f| f.bytes == b"over http" && f.channel.as_deref() == Some(CHANNEL))
    );
    assert_eq!(files[2].initial_comment.as_deref(), Some("via the daemon"));

    // DNS rebinding: a foreign Host or Origin is refused; loopback ones,
    // IPv6 too, are served.
    let healthz = format!("{}/healthz", daemon.base);
    let port = daemon.base.rsplit(':').next().expect("port");
    for (header, status) in [
        ("Host: evil.example".to_owned(), 403),
        (format!("Host: [::1]:{port}"), 200),
        ("Host: [::1]".to_owned(), 200),
        ("Origin: https://evil.example".to_owned(), 403),
        ("Origin: http://localhost:3000".to_owned(), 200),
    ] {
        let got = curl(ca, &["-H", &header, &healthz]).await;
        assert_eq!(got.status, status, "{header}: {}", got.text());
    }
    let foreign_origin = curl(ca, &["-H", "Origin: https://evil.example", &mcp_url]).await;
    assert_eq!(foreign_origin.status, 403, "{}", foreign_origin.text());
    let unknown = curl(ca, &[&format!("{}/sessions/nope/mcp", daemon.base)]).await;
    assert_eq!(unknown.status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_session_ends_without_a_complaint_from_the_sdk_and_an_unknown_one_is_404() {
    let setup = GatewaySetup::new("self-hosted").await;
    let daemon = GatewayDaemon::start(&setup).await;
    let registered = daemon.register(GatewayDaemon::context_of(&setup)).await;
    let mcp_url = registered["mcp_url"].as_str().expect("mcp_url").to_owned();

    // The SDK ends its session with a DELETE when the client closes.
    let (out, logged) = drive_logged(GatewayDaemon::http(&mcp_url, json!([{"op": "list"}]))).await;
    assert_eq!(tool_names(&out[0]), self_hosted_tools());
    assert!(
        !logged.contains("Session termination failed"),
        "the SDK complained at the session's end:\n{logged}"
    );

    // By hand: a session made, ended (204), ended again and used after
    // (404), and an id the daemon never gave (404).
    let ca = std::path::Path::new("/dev/null");
    let mcp_headers = [
        "-H",
        "content-type: application/json",
        "-H",
        "accept: application/json, text/event-stream",
    ];
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "curl", "version": "1"}}
    })
    .to_string();
    let mut args = vec!["--max-time", "10", "-X", "POST"];
    args.extend(mcp_headers);
    args.extend(["--data", &initialize, &mcp_url]);
    let made = curl(ca, &args).await;
    assert_eq!(made.status, 200, "{}", made.text());
    let id = made
        .header("mcp-session-id")
        .expect("the session's id")
        .to_owned();
    let header = format!("mcp-session-id: {id}");
    let delete = |header: String| {
        let url = mcp_url.clone();
        async move { curl(ca, &["-X", "DELETE", "-H", &header, &url]).await }
    };
    let ended = delete(header.clone()).await;
    assert_eq!(ended.status, 204, "{}", ended.text());
    assert!(ended.body.is_empty());
    let again = delete(header.clone()).await;
    assert_eq!(again.status, 404, "{}", again.text());
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).to_string();
    let mut args = vec!["--max-time", "10", "-X", "POST", "-H", &header];
    args.extend(mcp_headers);
    args.extend(["--data", &list, &mcp_url]);
    let after = curl(ca, &args).await;
    assert_eq!(after.status, 404, "{}", after.text());
    let unknown = delete("mcp-session-id: never-given".into()).await;
    assert_eq!(unknown.status, 404, "{}", unknown.text());
    // Without an id, rmcp says one is needed.
    let bare = curl(ca, &["-X", "DELETE", &mcp_url]).await;
    assert_eq!(bare.status, 400, "{}", bare.text());
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mcp_inspector_cli_lists_the_tools() {
    let mut setup = GatewaySetup::new("hosted").await;
    setup.agent_socket = Some(setup.dir.path().join("agent.sock"));
    let config = setup.config();
    let session = setup.session_dir();
    let mut command = tokio::process::Command::new("npx");
    command
        .args(["--yes", "@modelcontextprotocol/inspector@0.15.0", "--cli"])
        .arg(binary("calvin-gateway"))
        .args(["--method", "tools/list", "--", "mcp", "--config"])
        .arg(&config)
        .args([
            "--channel",
            CHANNEL,
            "--thread-ts",
            THREAD_TS,
            "--session-dir",
        ])
        .arg(&session)
        .kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(300), command.output())
        .await
        .expect("the inspector finished within 300 s")
        .expect("npx runs (Node 20; tests/run installs the inspector)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let listed: Value = serde_json::from_str(&stdout).expect("JSON from the inspector");
    let mut hosted = self_hosted_tools();
    hosted.insert(2, "checkout_repo");
    assert_eq!(
        tool_names(&listed),
        hosted,
        "hosted lists all nine, and the chat-thread family"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_card_whose_chart_slack_refuses_is_posted_with_the_chart_as_text() {
    let setup = GatewaySetup::new("one-machine").await;
    setup.slack.reject_block_type("data_visualization");
    let out = drive(setup.stdio(json!([call("post_card", json!({"spec": full_card()}))]))).await;
    assert_eq!(out[0]["is_error"], false, "{}", out[0]);
    assert_eq!(out[0]["structured"]["charts_as_text"], true);
    let messages = setup.slack.messages();
    assert_eq!(messages.len(), 1, "only the second post lands");
    let blocks = messages[0].blocks.clone().expect("blocks");
    let text = blocks.to_string();
    assert!(!text.contains("data_visualization"), "{text}");
    assert!(
        text.contains("Latency"),
        "the chart's summary stays: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_slack_rate_limit_is_reported_with_the_wait() {
    let setup = GatewaySetup::new("one-machine").await;
    std::fs::write(setup.session_dir().join("a.txt"), b"a").expect("file");
    setup
        .slack
        .rate_limit_next("files.getUploadURLExternal", 60);
    let out = drive(setup.stdio(json!([
        call("send_file", json!({"path": "a.txt"})),
        call("send_file", json!({"path": "a.txt"})),
    ])))
    .await;
    assert_refused(
        &out[0],
        "Slack is rate limiting this bot; try again in 60 s",
    );
    // The refused call did not count.
    assert_eq!(out[1]["structured"]["sent"], 1, "{}", out[1]);
}
