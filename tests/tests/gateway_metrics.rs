//! The gateway daemon's `/metrics` (`[serve] metrics`) and its logs
//! (`--log-format`): known traffic against the fake Slack, then what an
//! operator scrapes and reads.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use calvin_tests::fake_slack::FakeSlack;
use calvin_tests::gateway::{
    CHANNEL, GatewayDaemon, GatewaySetup, OWNER, assert_ok, assert_refused, call, drive,
};
use calvin_tests::{binary, curl};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(15);

/// A self-hosted setup with Socket Mode and `/metrics`, its session's
/// thread seeded.
async fn setup() -> GatewaySetup {
    let mut setup = GatewaySetup::new("self-hosted")
        .await
        .with_socket_mode()
        .with_metrics();
    setup.slack.add_user(OWNER, "Olive");
    setup.slack.set_members(&setup.channel, &[OWNER]);
    setup.thread_ts = setup
        .slack
        .add_message(&setup.channel, OWNER, "the session's task", None);
    setup
}

fn card(title: &str) -> Value {
    call(
        "post_card",
        json!({"spec": {"root": "c", "elements": {"c": {"type": "Card", "props": {"title": title}, "children": []}}}}),
    )
}

/// `GET /metrics`: every sample, `name{labels}` to its value.
async fn scrape(addr: &str) -> BTreeMap<String, f64> {
    let out = curl(Path::new("/dev/null"), &[&format!("http://{addr}/metrics")]).await;
    assert_eq!(out.status, 200, "{}", out.text());
    assert_eq!(
        out.header("content-type"),
        Some("application/openmetrics-text; version=1.0.0; charset=utf-8")
    );
    let text = out.text();
    assert!(text.ends_with("# EOF\n"), "{text}");
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').expect("a sample line");
            let value = value.parse().unwrap_or_else(|_| panic!("a number: {l}"));
            (series.to_owned(), value)
        })
        .collect()
}

fn value(samples: &BTreeMap<String, f64>, series: &str) -> f64 {
    *samples
        .get(series)
        .unwrap_or_else(|| panic!("no {series} in {samples:#?}"))
}

/// `calvin_gateway_slack_calls_total` summed by method.
fn slack_calls_by_method(samples: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    let mut by_method = BTreeMap::new();
    for (series, n) in samples {
        let Some(labels) = series.strip_prefix("calvin_gateway_slack_calls_total{method=\"") else {
            continue;
        };
        let (method, _) = labels.split_once('"').expect("the method label");
        *by_method.entry(method.to_owned()).or_default() += n;
    }
    by_method
}

/// The fake's own count of each Web API request, but Socket Mode's
/// (apps.connections.open, made by the listener, not by a tool).
fn fake_calls_by_method(slack: &FakeSlack) -> BTreeMap<String, f64> {
    let mut by_method = BTreeMap::new();
    for method in slack.calls() {
        if method == "apps.connections.open" {
            continue;
        }
        *by_method.entry(method).or_default() += 1.0;
    }
    by_method
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_tool_calls_slack_calls_and_rate_limit_waits() {
    let setup = setup().await;
    let slack = &setup.slack;
    let mut daemon = GatewayDaemon::start_with_sockets(&setup).await;
    let metrics = daemon.metrics_addr().await;

    let before = scrape(&metrics).await;
    assert_eq!(value(&before, "calvin_gateway_sessions"), 0.0);
    assert!(
        !before.keys().any(|s| s.contains("tool_calls_total{")),
        "no call yet: {before:#?}"
    );

    let registered = daemon.register(GatewayDaemon::context_of(&setup)).await;
    let mcp = registered["mcp_url"].as_str().expect("mcp_url").to_owned();

    // 3 cards posted, 1 with bad arguments (no Slack call), 1 call of a
    // tool that does not exist.
    let out = drive(GatewayDaemon::http(
        &mcp,
        json!([
            card("one"),
            card("two"),
            card("three"),
            call("post_card", json!({"spek": {}})),
            call("post_cards", json!({})),
        ]),
    ))
    .await;
    for ok in &out[..3] {
        assert_ok(ok);
    }
    assert_refused(&out[3], "spek");
    assert_eq!(out[4]["is_error"], true, "{}", out[4]);

    // Slack refuses one post.
    slack.fail_next("chat.postMessage", "channel_not_found");
    let out = drive(GatewayDaemon::http(&mcp, json!([card("refused")]))).await;
    assert_eq!(out[0]["is_error"], true, "{}", out[0]);

    // Slack rate-limits one post for 1 s: the gateway waits and retries.
    slack.rate_limit_next("chat.postMessage", 1);
    let out = drive(GatewayDaemon::http(&mcp, json!([card("after a wait")]))).await;
    assert_ok(&out[0]);

    // A permission prompt the CLI gives up on (its own timeout) is
    // cancelled; the prompt's post is edited when the call is dropped.
    let mut abandoned = call(
        "permission_prompt",
        json!({"tool_name": "Bash", "input": {"command": "make release"}, "tool_use_id": "toolu_01"}),
    );
    abandoned["timeout"] = json!(2);
    let out = drive(GatewayDaemon::http(&mcp, json!([abandoned]))).await;
    assert_eq!(out[0]["timed_out"], true, "{}", out[0]);
    slack
        .wait_until("the abandoned prompt's edit", WAIT, |s| {
            !s.updates().is_empty()
        })
        .await
        .expect("the prompt is edited");

    // A message in the session's thread arrives over Socket Mode.
    let (_, envelope) = slack.message_event(&setup.channel, OWNER, "hello", Some(&setup.thread_ts));
    slack.wait_ack(&envelope, WAIT).await.expect("acked");

    let after = scrape(&metrics).await;
    let tool = |tool: &str, outcome: &str| {
        value(
            &after,
            &format!(r#"calvin_gateway_tool_calls_total{{tool="{tool}",outcome="{outcome}"}}"#),
        )
    };
    assert_eq!(tool("post_card", "ok"), 4.0);
    assert_eq!(tool("post_card", "error"), 2.0);
    assert_eq!(tool("unknown", "error"), 1.0);
    assert_eq!(tool("permission_prompt", "cancelled"), 1.0);
    let post = |outcome: &str| {
        value(
            &after,
            &format!(
                r#"calvin_gateway_slack_calls_total{{method="chat.postMessage",outcome="{outcome}"}}"#
            ),
        )
    };
    // The 4 cards and the prompt; the refused one; the 429 before a retry.
    assert_eq!(post("ok"), 5.0);
    assert_eq!(post("not_found"), 1.0);
    assert_eq!(post("rate_limited"), 1.0);
    // Every request the fake received is counted under its method, and
    // nothing else is.
    assert_eq!(slack_calls_by_method(&after), fake_calls_by_method(slack));
    assert_eq!(
        value(&after, "calvin_gateway_slack_rate_limit_waits_total"),
        1.0
    );
    assert_eq!(
        value(&after, "calvin_gateway_slack_rate_limit_wait_seconds_total"),
        1.0
    );
    assert_eq!(value(&after, "calvin_gateway_sessions"), 1.0);
    assert_eq!(
        value(&after, "calvin_gateway_session_registrations_total"),
        1.0
    );
    assert_eq!(
        value(&after, "calvin_gateway_socket_mode_connects_total"),
        slack.connections_opened() as f64
    );
    assert_eq!(
        value(
            &after,
            r#"calvin_gateway_slack_events_total{kind="message"}"#
        ),
        1.0
    );

    // A session that ends leaves the gauge.
    daemon.end(&registered["session"]).await;
    let ended = scrape(&metrics).await;
    assert_eq!(value(&ended, "calvin_gateway_sessions"), 0.0);
    assert_eq!(
        value(&ended, "calvin_gateway_session_registrations_total"),
        1.0
    );

    // Only /metrics is served there.
    let other = curl(
        Path::new("/dev/null"),
        &[&format!("http://{metrics}/healthz")],
    )
    .await;
    assert_eq!(other.status, 404);
    let log = daemon.stop().await;
    assert!(
        log.lines()
            .any(|l| l.contains("INFO") && l.contains("calvin-gateway serving")),
        "text lines by default:\n{log}"
    );
    assert!(!log.starts_with('{'), "text lines by default:\n{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_log_format_json_every_line_is_a_json_object() {
    let setup = setup().await;
    let daemon = GatewayDaemon::start_with_args(&setup, &["--log-format", "json"]).await;
    setup
        .slack
        .wait_for_sockets(2, WAIT)
        .await
        .expect("the daemon opens its Socket Mode connections");
    let registered = daemon.register(GatewayDaemon::context_of(&setup)).await;
    let mcp = registered["mcp_url"].as_str().expect("mcp_url");
    let out = drive(GatewayDaemon::http(
        mcp,
        json!([call("post_card", json!({}))]),
    ))
    .await;
    assert_eq!(out[0]["is_error"], true, "{}", out[0]);
    let base = daemon.base.clone();
    let log = daemon.stop().await;

    let lines: Vec<Value> = log
        .lines()
        .map(|l| {
            let line: Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}\n{log}"));
            assert!(line.is_object(), "{l}");
            line
        })
        .collect();
    let find = |message: &str| {
        lines
            .iter()
            .find(|l| l["message"] == message)
            .unwrap_or_else(|| panic!("no {message:?} line in\n{log}"))
    };
    let start = find("calvin-gateway serving");
    assert_eq!(start["level"], "INFO", "{start}");
    assert_eq!(start["target"], "calvin_gateway", "{start}");
    assert_eq!(start["mode"], "self-hosted", "{start}");
    assert_eq!(start["events"], true, "{start}");
    assert_eq!(
        format!("http://{}", start["listen"].as_str().expect("listen")),
        base
    );
    assert!(start["timestamp"].is_string(), "{start}");
    let registered_line = find("runner session registered");
    assert_eq!(registered_line["channel"], CHANNEL, "{registered_line}");
    let refused = find("tool refused");
    assert_eq!(refused["tool"], "post_card", "{refused}");
    find("Socket Mode connected");
}

/// `calvin-gateway ARGS` with the setup's environment: (exit code,
/// stderr).
async fn run(setup: &GatewaySetup, args: &[&str]) -> (i32, String) {
    let mut command = tokio::process::Command::new(binary("calvin-gateway"));
    command.args(args).stdin(std::process::Stdio::null());
    for (k, v) in setup.env().as_object().expect("env") {
        command.env(k, v.as_str().expect("string"));
    }
    let out = tokio::time::timeout(WAIT, command.output())
        .await
        .expect("it ends")
        .expect("calvin-gateway runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_or_taken_metrics_address_is_named_with_its_key() {
    let mut setup = GatewaySetup::new("self-hosted").await;
    setup.serve_extra = "metrics = \"localhost:9181\"\n".into();
    let config = setup.config();
    let text = std::fs::read_to_string(&config).expect("gateway.toml");
    let line = text
        .lines()
        .position(|l| l.starts_with("metrics = "))
        .expect("the metrics line")
        + 1;
    let (code, stderr) = run(&setup, &["check-config", config.to_str().expect("utf-8")]).await;
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{}:{line}: serve.metrics: \"localhost:9181\" is not an address: IP:PORT",
            config.display()
        )),
        "{stderr}"
    );

    // Taken: serve refuses to start, naming the key, in JSON too.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let at = taken.local_addr().expect("addr");
    setup.serve_extra = format!("metrics = \"{at}\"\n");
    let config = setup.config();
    let config = config.to_str().expect("utf-8");
    let serve = ["serve", "--config", config, "--listen", "127.0.0.1:0"];
    let (code, stderr) = run(&setup, &serve).await;
    assert_eq!(code, 1, "{stderr}");
    let said = format!(
        "calvin-gateway: cannot listen for metrics on {at} (change [serve] metrics in {config}; \
         \"\" turns it off): "
    );
    assert!(stderr.starts_with(&said), "{stderr}");
    let mut json_serve = vec!["--log-format", "json"];
    json_serve.extend(serve);
    let (code, stderr) = run(&setup, &json_serve).await;
    assert_eq!(code, 1, "{stderr}");
    let last: Value = serde_json::from_str(stderr.lines().last().expect("a line"))
        .unwrap_or_else(|e| panic!("not JSON ({e}): {stderr}"));
    assert_eq!(last["level"], "ERROR", "{last}");
    assert!(
        last["message"]
            .as_str()
            .is_some_and(|m| m.starts_with(&said)),
        "{last}"
    );
    for l in stderr.lines() {
        serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
    }
}
