//! Slack's events in the gateway daemon (Socket Mode against the fake
//! Slack) and request_secret end to end: the button, a stranger's click,
//! the owner's form, the value in a real `bash -c` the way a launcher sets
//! it up, and everything that must never show it.

use std::time::Duration;

use calvin_tests::fake_slack::{EnvelopeKind, FakeSlack, PostedMessage};
use calvin_tests::gateway::{
    EventStream, GatewayDaemon, GatewaySetup, OWNER, assert_ok, assert_refused, call, drive, text,
};
use serde_json::{Value, json};

const STRANGER: &str = "U0STRANGER";
const WAIT: Duration = Duration::from_secs(10);

/// A self-hosted setup with Socket Mode, its session's thread seeded.
async fn setup() -> GatewaySetup {
    let mut setup = GatewaySetup::new("self-hosted").await.with_socket_mode();
    setup.slack.add_user(OWNER, "Olive");
    setup.slack.add_user(STRANGER, "Stan");
    setup.thread_ts = setup
        .slack
        .add_message(&setup.channel, OWNER, "the session's task", None);
    setup
}

/// The daemon, its sockets up, and the session registered.
async fn daemon(setup: &GatewaySetup) -> (GatewayDaemon, Value) {
    GatewayDaemon::start_with_session(setup).await
}

/// The button message of the request for `name`.
fn button_message(setup: &GatewaySetup, name: &str) -> PostedMessage {
    setup
        .slack
        .messages()
        .into_iter()
        .find(|m| {
            m.blocks
                .as_ref()
                .is_some_and(|b| b.to_string().contains(&format!("Set {name}")))
        })
        .unwrap_or_else(|| panic!("no button message for {name}"))
}

async fn wait_for(slack: &FakeSlack, what: &str, done: impl Fn(&FakeSlack) -> bool) {
    if let Err(why) = slack.wait_until(what, WAIT, done).await {
        panic!("{why}");
    }
}

/// Clicks `name`'s button as the owner and submits `value` in the form.
async fn set_secret(setup: &GatewaySetup, name: &str, value: &str) -> Vec<String> {
    let slack = &setup.slack;
    let button = button_message(setup, name);
    let views_before = slack.views().len();
    let click = slack
        .click(OWNER, &button.channel, &button.ts, "calvin_set_secret")
        .expect("the button is there");
    wait_for(&setup.slack, "the form to open", |slack| {
        slack.views().len() > views_before
    })
    .await;
    let view = slack.views().pop().expect("a view");
    assert_eq!(view.user, OWNER);
    let submit = slack
        .submit(OWNER, &view.id, &[("secret", "value", value)])
        .expect("the form is there");
    let said = format!("{name} is set");
    wait_for(&setup.slack, "the secret to be set", |slack| {
        slack
            .messages()
            .iter()
            .any(|m| m.text.as_deref() == Some(said.as_str()))
    })
    .await;
    vec![click, submit]
}

/// `script` in a real `bash -c`, with BASH_ENV as a launcher sets it.
fn bash(env_file: &std::path::Path, script: &str) -> String {
    let out = std::process::Command::new("bash")
        .args(["-c", script])
        .env("BASH_ENV", env_file)
        .output()
        .expect("bash runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_secret_goes_from_a_click_to_a_form_to_the_sessions_shell() {
    let mut setup = setup().await;
    // Every target logs everything it will: the value must still be in no
    // line.
    setup.rust_log = "trace";
    let (daemon, registered) = daemon(&setup).await;
    let mcp = registered["mcp_url"].as_str().expect("mcp_url").to_owned();
    let env_file = std::path::PathBuf::from(registered["env_file"].as_str().expect("env_file"));
    assert_eq!(env_file, setup.env_file());
    // BASH_ENV names a file from the start, empty of secrets.
    assert_eq!(
        bash(&env_file, "printf '%s' \"${STRIPE_KEY-unset}\""),
        "unset"
    );

    let out = drive(GatewayDaemon::http(
        &mcp,
        json!([
            call(
                "request_secret",
                json!({"name": "STRIPE_KEY", "reason": "to charge the test cards"})
            ),
            call(
                "request_secret",
                json!({"name": "TLS_PEM", "reason": "the staging certificate", "file": true})
            ),
        ]),
    ))
    .await;
    assert_ok(&out[0]);
    assert_ok(&out[1]);
    assert!(
        text(&out[0]).contains("End your turn now"),
        "{}",
        text(&out[0])
    );
    let button = button_message(&setup, "STRIPE_KEY");
    assert_eq!(button.thread_ts.as_deref(), Some(setup.thread_ts.as_str()));
    assert!(
        button
            .text
            .as_deref()
            .expect("text")
            .contains("to charge the test cards")
    );

    // A stranger's click: an ephemeral refusal, no form.
    let slack = &setup.slack;
    let stranger = slack
        .click(STRANGER, &button.channel, &button.ts, "calvin_set_secret")
        .expect("click");
    wait_for(&setup.slack, "the stranger's refusal", |slack| {
        !slack.ephemerals().is_empty()
    })
    .await;
    let refusal = &slack.ephemerals()[0];
    assert_eq!(refusal.user, STRANGER);
    assert!(
        refusal
            .text
            .as_deref()
            .expect("text")
            .contains(&format!("Only <@{OWNER}> can set `STRIPE_KEY`")),
        "{refusal:?}"
    );
    assert!(slack.views().is_empty(), "no form for a stranger");

    let value = "sk_test_51H'quote $HOME `x`";
    let pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----";
    let mut envelopes = vec![stranger];
    envelopes.extend(set_secret(&setup, "STRIPE_KEY", value).await);
    envelopes.extend(set_secret(&setup, "TLS_PEM", pem).await);

    // The session's next shell commands see them.
    assert_eq!(bash(&env_file, "printf '%s' \"$STRIPE_KEY\""), value);
    assert_eq!(bash(&env_file, "cat \"$TLS_PEM\""), pem);
    use std::os::unix::fs::PermissionsExt;
    let pem_path = bash(&env_file, "printf '%s' \"$TLS_PEM\"");
    let mode = |p: &str| std::fs::metadata(p).expect("file").permissions().mode() & 0o777;
    assert_eq!(mode(&pem_path), 0o600);
    assert_eq!(mode(env_file.to_str().expect("path")), 0o600);
    // The button is gone, replaced by who set it.
    let updated = slack
        .updates()
        .into_iter()
        .find(|u| u.ts == button.ts)
        .expect("the button message was updated");
    assert_eq!(
        updated.text.as_deref(),
        Some(format!("<@{OWNER}> set `STRIPE_KEY`.").as_str())
    );

    // A submission slack-morphism cannot read, carrying a value: it is
    // acknowledged and dropped, and its payload is logged nowhere.
    let malformed = slack.send_envelope(
        EnvelopeKind::Interactive,
        true,
        json!({"type": "view_submission", "view": {"state": {"values": {"secret": {"value":
            {"type": "plain_text_input", "value": "sk_test_51H-unreadable"}}}}}}),
    );
    envelopes.push(malformed);

    // Every envelope acknowledged within 3 s of its one delivery.
    for envelope in &envelopes {
        let ack = slack.wait_ack(envelope, WAIT).await.expect("acknowledged");
        eprintln!("ack delay {:?} for {envelope}", ack.delay);
        assert!(ack.delay < Duration::from_secs(3), "{ack:?}");
        assert_eq!(
            slack.deliveries(envelope).len(),
            1,
            "delivered again: {envelope}"
        );
    }

    // Afterwards nothing the session sends may hold the value.
    std::fs::write(
        setup.session_dir().join("leak.txt"),
        format!("key={value}\n"),
    )
    .expect("file");
    let out = drive(GatewayDaemon::http(
        &mcp,
        json!([
            call("send_file", json!({"path": "leak.txt"})),
            call(
                "post_card",
                json!({"spec": {"root": "c", "elements": {
                    "c": {"type": "Card", "props": {"title": "Keys"}, "children": ["t"]},
                    "t": {"type": "Text", "props": {"text": value}}
                }}})
            ),
            call(
                "request_secret",
                json!({"name": "STRIPE_KEY", "reason": "again please"})
            ),
        ]),
    ))
    .await;
    assert_refused(
        &out[0],
        "contains the value of one of the session's secrets",
    );
    assert_refused(
        &out[1],
        r#"element "t" field "text": contains the value of one of the session's secrets"#,
    );
    assert_refused(
        &out[2],
        "a secret named STRIPE_KEY is already set for this session",
    );

    // The value is nowhere it could be read back: in nothing the gateway
    // sent Slack (every argument of every message, ephemeral, update,
    // form and file), no tool result, no log line.
    let mut seen = format!(
        "{:?}{:?}{:?}{:?}",
        slack.messages(),
        slack.ephemerals(),
        slack.updates(),
        slack
            .views()
            .iter()
            .map(|v| &v.view["blocks"])
            .collect::<Vec<_>>()
    );
    for f in slack.files() {
        seen.push_str(&String::from_utf8_lossy(&f.bytes));
    }
    for v in &out {
        seen.push_str(&v.to_string());
    }
    // Only the owner ever got a form: one per secret.
    assert_eq!(slack.views().len(), 2);
    assert!(slack.views().iter().all(|v| v.user == OWNER));
    assert!(
        !seen.contains("sk_test_51H"),
        "the value leaked into Slack or a result"
    );
    assert!(!seen.contains("MIIB"), "the file secret leaked");

    // The session ends: its env file goes.
    daemon.end(&registered["session"]).await;
    assert!(
        !env_file.exists(),
        "the env file is removed when the session ends"
    );
    let log = daemon.stop().await;
    assert!(
        log.contains("secret set"),
        "the daemon logs that it was set"
    );
    assert!(log.contains(" TRACE "), "the daemon logged at trace");
    assert!(
        log.contains("Socket Mode: a payload could not be read"),
        "the malformed submission was seen"
    );
    let leaked: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("sk_test_51H") || l.contains("MIIB"))
        .collect();
    assert!(
        leaked.is_empty(),
        "the value is in {} log lines, the first: {:.300}",
        leaked.len(),
        leaked[0]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_secret_checks_its_arguments_and_counts_10_per_runner() {
    let setup = setup().await;
    let (_daemon, registered) = daemon(&setup).await;
    let mcp = registered["mcp_url"].as_str().expect("mcp_url").to_owned();
    let ask = |name: &str, reason: String| {
        call("request_secret", json!({"name": name, "reason": reason}))
    };
    let mut steps = vec![
        ask("TOO_LONG", "r".repeat(201)),
        ask("TOO_SHORT", "ab".into()),
        ask("1BAD", "abc".into()),
        ask("PATH", "abc".into()),
        ask("AT_LIMIT", "r".repeat(200)),
        ask("AT_LIMIT", "abc".into()),
    ];
    // Two requests for one name at once: one button.
    steps.push(json!({"op": "parallel", "calls": [
        {"tool": "request_secret", "args": {"name": "RACED", "reason": "abc"}},
        {"tool": "request_secret", "args": {"name": "RACED", "reason": "abc"}},
    ]}));
    for i in 3..=10 {
        steps.push(ask(&format!("KEY_{i}"), "abc".into()));
    }
    steps.push(ask("KEY_11", "abc".into()));
    let out = drive(GatewayDaemon::http(&mcp, Value::Array(steps))).await;
    assert_refused(&out[0], "reason is 201 characters; at most 200");
    assert_refused(&out[1], "reason is 2 characters; at least 3");
    assert_refused(&out[2], "is not an environment variable name");
    assert_refused(&out[3], "name PATH is reserved");
    assert_ok(&out[4]);
    assert_refused(
        &out[5],
        "a request for AT_LIMIT is already waiting in the thread",
    );
    let raced = out[6]["results"].as_array().expect("results");
    assert_eq!(
        raced.iter().filter(|r| r["is_error"] == false).count(),
        1,
        "{raced:?}"
    );
    assert!(
        raced
            .iter()
            .any(|r| text(r).contains("a request for RACED is already waiting"))
    );
    for (i, v) in out[7..15].iter().enumerate() {
        assert_eq!(v["is_error"], false, "request {} refused: {v}", i + 3);
    }
    assert_refused(&out[15], "request_secret is limited to 10 calls per runner");
    let buttons = setup
        .slack
        .messages()
        .iter()
        .filter(|m| {
            m.blocks
                .as_ref()
                .is_some_and(|b| b.to_string().contains("calvin_set_secret"))
        })
        .count();
    assert_eq!(buttons, 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_sp_store_key_request_secret_says_why() {
    let mut setup = setup().await;
    setup.store_key = false;
    let (_daemon, registered) = daemon(&setup).await;
    let mcp = registered["mcp_url"].as_str().expect("mcp_url").to_owned();
    let ask = call("request_secret", json!({"name": "KEY", "reason": "abc"}));
    let over_http = drive(GatewayDaemon::http(&mcp, json!([{"op": "list"}, ask]))).await;
    let over_stdio = drive(setup.stdio(json!([ask]))).await;
    let names: Vec<&str> = over_http[0]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(
        names.contains(&"request_secret"),
        "listed even so: {names:?}"
    );
    for refused in [&over_http[1], &over_stdio[0]] {
        assert_refused(
            refused,
            "request_secret is not available: SP_STORE_KEY is not set in the gateway's \
             environment",
        );
    }
    assert!(setup.slack.messages().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sp_store_key_alone_stores_secrets_in_the_default_state_folder() {
    use std::os::unix::fs::PermissionsExt;
    let mut setup = setup().await;
    setup.store_dir_configured = false;
    let state = setup.dir.path().join("state");
    setup.env_extra = vec![("XDG_STATE_HOME".into(), state.display().to_string())];
    let (_daemon, registered) = daemon(&setup).await;
    let mcp = registered["mcp_url"].as_str().expect("mcp_url").to_owned();
    let env_file = std::path::PathBuf::from(registered["env_file"].as_str().expect("env_file"));
    let ask = call(
        "request_secret",
        json!({"name": "DEFAULT_KEY", "reason": "the default folder"}),
    );
    let out = drive(GatewayDaemon::http(&mcp, json!([ask]))).await;
    assert_ok(&out[0]);
    set_secret(&setup, "DEFAULT_KEY", "hunter2-default-folder").await;
    let folder = state.join("calvin/secrets");
    let mode = std::fs::metadata(&folder)
        .expect("the default folder is made")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700, "{mode:o}");
    let stored: Vec<std::path::PathBuf> = std::fs::read_dir(&folder)
        .expect("folder")
        .map(|entry| entry.expect("entry").path())
        .filter(|p| p.to_string_lossy().ends_with(".json"))
        .collect();
    assert_eq!(stored.len(), 1, "{stored:?}");
    let file = std::fs::read_to_string(&stored[0]).expect("the session's file");
    assert!(
        file.contains("DEFAULT_KEY") && !file.contains("hunter2"),
        "{file}"
    );
    assert_eq!(
        bash(&env_file, "printf '%s' \"$DEFAULT_KEY\""),
        "hunter2-default-folder"
    );
    assert!(!setup.store_dir().exists(), "no configured folder was used");

    // A stdio gateway with HOME and no XDG_STATE_HOME: ~/.local/state. It
    // opens its store, then refuses for want of the daemon, not of a key.
    let home = setup.dir.path().join("home");
    setup.env_extra = vec![
        ("XDG_STATE_HOME".into(), String::new()),
        ("HOME".into(), home.display().to_string()),
    ];
    let out = drive(setup.stdio(json!([ask]))).await;
    assert_refused(&out[0], "set [daemon] url in gateway.toml");
    let mode = std::fs::metadata(home.join(".local/state/calvin/secrets"))
        .expect("made under HOME")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700, "{mode:o}");

    // A default folder that cannot be made is named.
    let blocked = setup.dir.path().join("blocked");
    std::fs::write(&blocked, "a file\n").expect("file");
    setup.env_extra = vec![("XDG_STATE_HOME".into(), blocked.display().to_string())];
    let out = drive(setup.stdio(json!([ask]))).await;
    assert_refused(
        &out[0],
        &format!(
            "request_secret is not available: the secret store's folder {} cannot be used (",
            blocked.join("calvin/secrets").display()
        ),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_gateway_has_the_daemon_handle_the_form_or_names_what_is_missing() {
    let mut setup = setup().await;
    let ask = call(
        "request_secret",
        json!({"name": "DB_PASSWORD", "reason": "the staging database"}),
    );
    let out = drive(setup.stdio(json!([ask]))).await;
    assert_refused(&out[0], "set [daemon] url in gateway.toml");

    let daemon = GatewayDaemon::start_with_sockets(&setup).await;
    setup.extra = daemon.config_section(&setup);
    let env_file = setup.dir.path().join("own-env/env.sh");
    let mut args = setup.stdio_args();
    args.extend([json!("--env-file"), json!(env_file)]);
    let out = drive(setup.stdio_with(Value::Array(args.clone()), json!([ask]))).await;
    assert_ok(&out[0]);
    // The stdio gateway (one CLI turn) has exited, and its env file with
    // it; the daemon still answers the click and stores the value.
    assert!(
        !env_file.exists(),
        "the env file goes when the session ends"
    );
    set_secret(&setup, "DB_PASSWORD", "hunter2-staging").await;
    assert!(
        !env_file.exists(),
        "an ended session's env file is not written again"
    );
    // The next turn's shell commands see it.
    let shell = json!({
        "op": "shell",
        "cmd": ["bash", "-c", "printf '%s' \"$DB_PASSWORD\""],
        "env": {"BASH_ENV": env_file, "PATH": std::env::var("PATH").unwrap_or_default()},
    });
    let out =
        drive(setup.stdio_with(Value::Array(std::mem::take(&mut args)), json!([shell]))).await;
    assert_eq!(out[0]["stdout"], "hunter2-staging", "{}", out[0]);

    // A wrong token is refused with what to set.
    setup.extra = format!(
        "[daemon]\nurl = \"{}\"\ntoken_file = \"{}\"\n",
        daemon.base,
        setup.dir.path().join("wrong.token").display()
    );
    calvin_tests::write_secret(&setup.dir.path().join("wrong.token"), "not-the-token\n");
    let out = drive(setup.stdio(json!([call(
        "request_secret",
        json!({"name": "OTHER", "reason": "abc"})
    )])))
    .await;
    assert_refused(&out[0], "refused this gateway's token");
}

/// Waits for each envelope's acknowledgement: within 3 s of its one
/// delivery. The delays.
async fn acked(slack: &FakeSlack, envelopes: &[String]) -> Vec<Duration> {
    let mut delays = Vec::new();
    for e in envelopes {
        let ack = slack.wait_ack(e, WAIT).await.expect("acknowledged");
        assert!(ack.delay < Duration::from_secs(3), "{ack:?}");
        assert_eq!(slack.deliveries(e).len(), 1, "delivered again: {e}");
        delays.push(ack.delay);
    }
    delays
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_reach_their_session_across_dropped_and_refreshed_sockets() {
    let setup = setup().await;
    let (daemon, registered) = daemon(&setup).await;
    let slack = &setup.slack;
    let (channel, thread) = (setup.channel.clone(), setup.thread_ts.clone());
    let other_thread = slack.add_message(&channel, OWNER, "another session", None);
    let other = daemon
        .register(json!({
            "channel": channel,
            "thread_ts": other_thread,
            "session_dir": setup.session_dir(),
            "owner": OWNER,
        }))
        .await;
    let mut mine = EventStream::open(registered["events_url"].as_str().expect("url")).await;
    let mut theirs = EventStream::open(other["events_url"].as_str().expect("url")).await;
    let mut envelopes = Vec::new();
    let text = |v: &Value| v["text"].as_str().unwrap_or_default().to_owned();

    // A reply in the session's thread, and a reaction to it.
    let (reply_ts, e) =
        slack.message_event(&channel, OWNER, "please also fix the footer", Some(&thread));
    envelopes.push(e);
    let got = mine
        .next(WAIT)
        .await
        .expect("the message reaches the session");
    assert_eq!(
        (got["type"].as_str(), got["thread_ts"].as_str()),
        (Some("message"), Some(thread.as_str()))
    );
    assert_eq!(text(&got), "please also fix the footer");
    envelopes.push(slack.reaction_event(OWNER, "+1", &channel, &reply_ts));
    let got = mine
        .next(WAIT)
        .await
        .expect("the reaction reaches the session");
    assert_eq!(
        (
            got["type"].as_str(),
            got["reaction"].as_str(),
            got["ts"].as_str()
        ),
        (Some("reaction_added"), Some("+1"), Some(reply_ts.as_str()))
    );
    // The other session's first event is its own, not those.
    let (_, e) = slack.message_event(
        &channel,
        OWNER,
        "for the other session",
        Some(&other_thread),
    );
    envelopes.push(e);
    let got = theirs.next(WAIT).await.expect("the other session's event");
    assert_eq!(text(&got), "for the other session");

    // The sockets drop: an event sent meanwhile arrives after the
    // reconnect, once.
    let mut delays = acked(slack, &envelopes).await;
    let opened = slack.connections_opened();
    slack.drop_sockets();
    let (_, e) = slack.message_event(
        &channel,
        OWNER,
        "sent while the sockets were down",
        Some(&thread),
    );
    let got = mine
        .next(WAIT)
        .await
        .expect("delivered after the reconnect");
    assert_eq!(text(&got), "sent while the sockets were down");
    slack.wait_for_sockets(2, WAIT).await.expect("reconnected");
    assert!(slack.connections_opened() >= opened + 2);
    delays.extend(acked(slack, &[e]).await);

    // Slack asks for a refresh: new sockets, and events still flow.
    let opened = slack.connections_opened();
    slack.send_disconnect("refresh_requested");
    slack
        .wait_until("a new socket after the disconnect envelope", WAIT, |s| {
            s.connections_opened() > opened
        })
        .await
        .expect("reconnected");
    let (_, e) = slack.message_event(&channel, OWNER, "after the refresh", Some(&thread));
    assert_eq!(
        text(&mine.next(WAIT).await.expect("after the refresh")),
        "after the refresh"
    );
    delays.extend(acked(slack, &[e]).await);

    // Slack redelivers an event it saw no ack for: routed once (the next
    // event the session sees is the one sent after it).
    let payload = |text: &str| {
        json!({
            "token": "x", "team_id": "T0FAKE0001", "api_app_id": "A0FAKEAPP1",
            "type": "event_callback", "event_id": "Ev0REDELIVER1", "event_time": 1_700_000_000,
            "event": {"type": "message", "channel": channel, "user": OWNER, "text": text,
                      "ts": "1700000999.000001", "thread_ts": thread, "event_ts": "1700000999.000001",
                      "channel_type": "channel"},
        })
    };
    let twice = [
        slack.send_envelope(EnvelopeKind::EventsApi, false, payload("once")),
        slack.send_envelope(EnvelopeKind::EventsApi, false, payload("once")),
    ];
    delays.extend(acked(slack, &twice).await);
    let (_, e) = slack.message_event(&channel, OWNER, "the next one", Some(&thread));
    assert_eq!(text(&mine.next(WAIT).await.expect("routed")), "once");
    assert_eq!(
        text(&mine.next(WAIT).await.expect("the next")),
        "the next one",
        "a redelivered event was routed twice"
    );
    delays.extend(acked(slack, &[e]).await);

    delays.sort();
    eprintln!(
        "Socket Mode ack delays over {} envelopes: min {:?}, median {:?}, max {:?}",
        delays.len(),
        delays[0],
        delays[delays.len() / 2],
        delays[delays.len() - 1]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_form_slack_will_not_open_is_reported_to_the_owner_and_a_new_click_works() {
    let setup = setup().await;
    let (_daemon, registered) = daemon(&setup).await;
    let mcp = registered["mcp_url"].as_str().expect("mcp_url").to_owned();
    let out = drive(GatewayDaemon::http(
        &mcp,
        json!([call(
            "request_secret",
            json!({"name": "API_TOKEN", "reason": "the staging API"})
        )]),
    ))
    .await;
    assert_ok(&out[0]);
    let slack = &setup.slack;
    let button = button_message(&setup, "API_TOKEN");
    // A trigger older than Slack's 3 s is refused by views.open.
    slack.set_trigger_ttl(Duration::ZERO);
    slack
        .click(OWNER, &button.channel, &button.ts, "calvin_set_secret")
        .expect("click");
    wait_for(&setup.slack, "the owner to be told", |slack| {
        !slack.ephemerals().is_empty()
    })
    .await;
    let told = &slack.ephemerals()[0];
    assert_eq!(told.user, OWNER);
    let said = told.text.as_deref().expect("text");
    assert!(
        said.contains("The form for `API_TOKEN` could not be opened"),
        "{said}"
    );
    assert!(said.contains("expired_trigger_id"), "{said}");
    assert!(slack.views().is_empty());
    slack.set_trigger_ttl(calvin_tests::fake_slack::TRIGGER_TTL);
    set_secret(&setup, "API_TOKEN", "tok-123").await;
    assert_eq!(
        bash(&setup.env_file(), "printf '%s' \"$API_TOKEN\""),
        "tok-123"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_registered_twice_keeps_its_env_file_until_both_end() {
    let setup = setup().await;
    setup.seed_secret("KEPT", "v1");
    let (daemon, first) = daemon(&setup).await;
    // The runner restarted: a second registration of the same thread.
    let second = daemon.register(GatewayDaemon::context_of(&setup)).await;
    let env_file = setup.env_file();
    assert_eq!(bash(&env_file, "printf '%s' \"$KEPT\""), "v1");
    daemon.end(&first["session"]).await;
    assert_eq!(
        bash(&env_file, "printf '%s' \"$KEPT\""),
        "v1",
        "the second still uses it"
    );
    daemon.end(&second["session"]).await;
    assert!(!env_file.exists(), "gone when the last one ends");
}
