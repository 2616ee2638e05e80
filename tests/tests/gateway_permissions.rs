//! permission_prompt as the coding CLI uses it, the decision bridge (plans
//! and questions) and send_dm's first-DM prompt, answered with reactions
//! through Socket Mode against the fake Slack, driven by the official MCP
//! Python SDK.
//!
//! The CLI's contract (Claude Code, `--permission-prompt-tool`): the tool
//! is called with `{tool_name, input, tool_use_id}` and its result's text
//! is JSON, `{"behavior": "allow", "updatedInput": {...}}` or
//! `{"behavior": "deny", "message": "..."}`.

use std::time::Duration;

use calvin_tests::fake_slack::{BOT_USER_ID, FakeSlack, PostedMessage};
use calvin_tests::gateway::{
    GatewayDaemon, GatewaySetup, OWNER, assert_refused, call, drive, text,
};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

const STRANGER: &str = "U0STRANGER";
/// On `[permissions] allow_users`.
const ALLOWED: &str = "U0ALLOWED";
/// A member of the session's channel, for DMs.
const FRIEND: &str = "U0FRIEND";
const WAIT: Duration = Duration::from_secs(15);

/// A self-hosted setup with Socket Mode and `[permissions]`, its session's
/// thread seeded.
async fn setup(permissions: &str) -> GatewaySetup {
    let mut setup = GatewaySetup::new("self-hosted").await.with_socket_mode();
    for (id, name) in [
        (OWNER, "Olive"),
        (STRANGER, "Stan"),
        (ALLOWED, "Alma"),
        (FRIEND, "Fred"),
    ] {
        setup.slack.add_user(id, name);
    }
    setup
        .slack
        .set_members(&setup.channel, &[OWNER, STRANGER, ALLOWED, FRIEND]);
    setup.thread_ts = setup
        .slack
        .add_message(&setup.channel, OWNER, "the session's task", None);
    setup.extra = format!("[permissions]\nallow_users = [\"{ALLOWED}\"]\n{permissions}");
    setup
}

/// The daemon, its sockets up, and the session's MCP URL.
async fn daemon(setup: &GatewaySetup) -> (GatewayDaemon, String) {
    let (daemon, registered) = GatewayDaemon::start_with_session(setup).await;
    let mcp = registered["mcp_url"].as_str().expect("mcp_url").to_owned();
    (daemon, mcp)
}

/// Runs `steps` on the session in the background, as the CLI's turn.
fn session(mcp: &str, steps: Value) -> JoinHandle<Vec<Value>> {
    tokio::spawn(drive(GatewayDaemon::http(mcp, steps)))
}

/// The `n`th (from 1) bot message whose text contains `needle`, once the
/// bot has added its `options` reactions to it (so the prompt listens).
async fn prompt(slack: &FakeSlack, needle: &str, n: usize, options: usize) -> PostedMessage {
    let found = |slack: &FakeSlack| -> Option<PostedMessage> {
        let posted: Vec<PostedMessage> = slack
            .messages()
            .into_iter()
            .filter(|m| m.text.as_deref().is_some_and(|t| t.contains(needle)))
            .collect();
        let message = posted.get(n - 1)?.clone();
        let added = slack
            .reactions(&message.channel, &message.ts)
            .iter()
            .filter(|(_, users)| users.iter().any(|u| u == BOT_USER_ID))
            .count();
        (added == options).then_some(message)
    };
    let what = format!("prompt {n} ({needle:?}) with its {options} options");
    if let Err(why) = slack.wait_until(&what, WAIT, |s| found(s).is_some()).await {
        panic!("{why}; messages: {:?}", slack.messages());
    }
    found(slack).expect("found")
}

/// `user` reacts to `message` and the daemon has it (acknowledged: routed).
async fn react(slack: &FakeSlack, user: &str, reaction: &str, message: &PostedMessage) {
    let envelope = slack.reaction_event(user, reaction, &message.channel, &message.ts);
    slack.wait_ack(&envelope, WAIT).await.expect("acked");
}

/// The text of the last chat.update of the message `ts`.
fn updated_text(slack: &FakeSlack, ts: &str) -> String {
    slack
        .updates()
        .into_iter()
        .rev()
        .find(|u| u.ts == ts)
        .and_then(|u| u.text)
        .unwrap_or_else(|| panic!("message {ts} was not updated: {:?}", slack.updates()))
}

/// The CLI's answer in a result: the text parsed, which must equal the
/// structured content, and never an error.
fn decision(out: &Value) -> Value {
    assert_eq!(out["is_error"], false, "{out}");
    let parsed: Value = serde_json::from_str(text(out)).expect("the text is JSON");
    assert_eq!(
        parsed, out["structured"],
        "text and structured content agree"
    );
    parsed
}

async fn finished(task: JoinHandle<Vec<Value>>) -> Vec<Value> {
    tokio::time::timeout(WAIT, task)
        .await
        .expect("the session's calls end")
        .expect("the driver runs")
}

fn ask(tool: &str, input: Value) -> Value {
    call(
        "permission_prompt",
        json!({"tool_name": tool, "input": input, "tool_use_id": "toolu_01A2B3C4D5"}),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_request_is_answered_by_an_allowed_reaction_only() {
    let mut setup = setup("").await;
    // The bot on the allowlist by mistake: its own option reactions, which
    // Slack reports as reaction_added from the bot, still decide nothing.
    setup.extra = format!("[permissions]\nallow_users = [\"{ALLOWED}\", \"{BOT_USER_ID}\"]\n");
    let (daemon, mcp) = daemon(&setup).await;
    let slack = &setup.slack;
    let input = json!({"command": "npm test", "description": "Run the tests"});
    let turn = session(
        &mcp,
        json!([ask("Bash", input.clone()), ask("Bash", input.clone())]),
    );

    let first = prompt(slack, "Permission requested", 1, 3).await;
    assert_eq!(first.thread_ts.as_deref(), Some(setup.thread_ts.as_str()));
    let shown = first.text.clone().expect("text");
    // The spec's "⚠️ Permission requested: Write file.txt": the tool and
    // its main argument first, the details below.
    let mut lines = shown.lines();
    assert_eq!(
        lines.next(),
        Some(":warning: Permission requested: *Bash* `npm test`"),
        "{shown}"
    );
    assert_eq!(lines.next(), Some("`npm test`"), "{shown}");
    assert_eq!(lines.next(), Some("description: Run the tests"), "{shown}");
    let options: Vec<String> = slack
        .reactions_added()
        .into_iter()
        .filter(|r| r.timestamp == first.ts)
        .map(|r| r.name)
        .collect();
    assert_eq!(options, ["+1", "white_check_mark", "-1"]);
    // The bot's own +1 came back as a reaction_added event; a stranger's
    // +1 too. Neither decides: the allowed user's 👎 does.
    react(slack, STRANGER, "+1", &first).await;
    react(slack, ALLOWED, "-1", &first).await;

    // The owner allows the second one once (a skin tone is the same 👍).
    let second = prompt(slack, "Permission requested", 2, 3).await;
    react(slack, OWNER, "+1::skin-tone-3", &second).await;
    let out = finished(turn).await;

    let denied = decision(&out[0]);
    assert_eq!(denied["behavior"], "deny");
    assert_eq!(
        denied
            .as_object()
            .expect("object")
            .keys()
            .collect::<Vec<_>>(),
        ["behavior", "message"]
    );
    assert!(
        denied["message"]
            .as_str()
            .expect("message")
            .contains("denied in Slack by Alma (U0ALLOWED)"),
        "{denied}"
    );
    assert_eq!(
        decision(&out[1]),
        json!({"behavior": "allow", "updatedInput": input}),
        "exactly the CLI's allow, with the input as given"
    );
    assert!(updated_text(slack, &first.ts).contains(":-1: Denied by <@U0ALLOWED>"));
    assert!(updated_text(slack, &second.ts).contains(":+1: Allowed once by <@U0OWNER>"));
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_all_is_remembered_for_that_tool_only_and_readers_never_ask() {
    let setup = setup("").await;
    let (daemon, mcp) = daemon(&setup).await;
    let slack = &setup.slack;
    let write = json!({"file_path": "/tmp/a.txt", "content": "x"});
    let turn = session(
        &mcp,
        json!([
            ask("mcp__calvin__read_thread", json!({"url": "x"})),
            ask("mcp__calvin__list_thread", json!({})),
            ask(
                "mcp__calvin__read_channel_history",
                json!({"channel_id": "C1"})
            ),
            ask("Write", write.clone()),
            ask("Write", json!({"file_path": "/tmp/b.txt", "content": "y"})),
            ask("Edit", json!({"file_path": "/tmp/a.txt"})),
            ask("mcp__calvin__post_thread", json!({"text": "hi"})),
        ]),
    );
    let write_prompt = prompt(slack, "*Write*", 1, 3).await;
    let shown = write_prompt.text.clone().expect("text");
    assert_eq!(
        shown.lines().take(2).collect::<Vec<_>>(),
        [
            ":warning: Permission requested: *Write* a.txt",
            "`/tmp/a.txt`"
        ],
        "{shown}"
    );
    react(slack, OWNER, "white_check_mark", &write_prompt).await;
    let edit_prompt = prompt(slack, "*Edit*", 1, 3).await;
    react(slack, OWNER, "+1", &edit_prompt).await;
    let post_prompt = prompt(slack, "*mcp__calvin__post_thread*", 1, 3).await;
    react(slack, OWNER, "-1", &post_prompt).await;
    let out = finished(turn).await;

    for (i, step) in out.iter().enumerate().take(5) {
        assert_eq!(decision(step)["behavior"], "allow", "call {i}: {step}");
    }
    assert_eq!(decision(&out[3])["updatedInput"], write);
    assert_eq!(decision(&out[5])["behavior"], "allow");
    assert_eq!(decision(&out[6])["behavior"], "deny", "post_thread asks");
    let prompts: Vec<String> = slack
        .messages()
        .into_iter()
        .filter_map(|m| m.text)
        .filter(|t| t.starts_with(":warning: Permission requested"))
        .collect();
    assert_eq!(
        prompts.len(),
        3,
        "Write once (then allowed for the session), Edit, post_thread; readers never: {prompts:?}"
    );
    assert!(
        updated_text(slack, &write_prompt.ts)
            .contains("Allowed for the rest of this session by <@U0OWNER>")
    );

    // The model cannot reword a prompt: update_own_post leaves them alone.
    let link = format!(
        "https://fake-slack.test/archives/{}/p{}?thread_ts={}&cid={}",
        setup.channel,
        write_prompt.ts.replace('.', ""),
        setup.thread_ts,
        setup.channel
    );
    let updates = slack.updates().len();
    let out = drive(GatewayDaemon::http(
        &mcp,
        json!([call(
            "update_own_post",
            json!({"url": link, "message": "Bash `ls`"})
        )]),
    ))
    .await;
    assert_eq!(out[0]["structured"]["ok"], false, "{}", out[0]);
    assert!(
        text(&out[0]).contains("one of the gateway's permission prompts"),
        "{}",
        out[0]
    );
    assert_eq!(slack.updates().len(), updates, "no chat.update");

    // Another session of the same daemon has its own allowances: Write
    // asks there.
    let mut other = GatewayDaemon::context_of(&setup);
    other["thread_ts"] = json!(slack.add_message(&setup.channel, OWNER, "another task", None));
    let registered = daemon.register(other).await;
    let other_mcp = registered["mcp_url"].as_str().expect("mcp_url").to_owned();
    let turn = session(&other_mcp, json!([ask("Write", write.clone())]));
    let asked_again = prompt(slack, "*Write*", 2, 3).await;
    react(slack, OWNER, "-1", &asked_again).await;
    let out = finished(turn).await;
    assert_eq!(decision(&out[0])["behavior"], "deny");
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_the_cli_gives_up_on_says_nobody_waits_for_it() {
    let setup = setup("").await;
    let (daemon, mcp) = daemon(&setup).await;
    let slack = &setup.slack;
    // The CLI's own tool timeout passes first (here 3 s): it cancels.
    let mut abandoned = ask("Bash", json!({"command": "make release"}));
    abandoned["timeout"] = json!(3);
    let turn = session(&mcp, json!([abandoned]));
    let posted = prompt(slack, "Permission requested", 1, 3).await;
    let out = finished(turn).await;
    assert_eq!(out[0]["timed_out"], true, "{}", out[0]);
    let ts = posted.ts.clone();
    slack
        .wait_until("the abandoned prompt's edit", WAIT, |s| {
            s.updates().iter().any(|u| u.ts == ts)
        })
        .await
        .expect("the prompt is edited");
    let said = updated_text(slack, &posted.ts);
    assert!(
        said.contains("No longer waiting: the session stopped asking"),
        "{said}"
    );
    // A late 👍 decides nothing and changes nothing.
    react(slack, OWNER, "+1", &posted).await;
    assert_eq!(
        slack.updates().iter().filter(|u| u.ts == posted.ts).count(),
        1
    );
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_given_as_soon_as_the_prompt_shows_counts() {
    let setup = setup("").await;
    let (daemon, mcp) = daemon(&setup).await;
    let slack = &setup.slack;
    let turn = session(
        &mcp,
        json!([ask("Bash", json!({"command": "make deploy"}))]),
    );
    // Not waiting for the bot's options: the owner types 👍 at once.
    let posted = |s: &FakeSlack| {
        s.messages().into_iter().find(|m| {
            m.text
                .as_deref()
                .is_some_and(|t| t.starts_with(":warning: Permission requested"))
        })
    };
    slack
        .wait_until("the prompt", WAIT, |s| posted(s).is_some())
        .await
        .expect("posted");
    let message = posted(slack).expect("posted");
    react(slack, OWNER, "+1", &message).await;
    let out = finished(turn).await;
    assert_eq!(
        decision(&out[0]),
        json!({"behavior": "allow", "updatedInput": {"command": "make deploy"}})
    );
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_answer_within_the_timeout_denies_and_says_so() {
    let setup = setup("timeout_secs = 1\n").await;
    setup.seed_secret("DEPLOY_TOKEN", "hunter2-deploy-value");
    let (daemon, mcp) = daemon(&setup).await;
    let started = std::time::Instant::now();
    let long = "x".repeat(5_000);
    let command = format!("curl -H 'auth: hunter2-deploy-value' https://example.com/{long}");
    let out = drive(GatewayDaemon::http(
        &mcp,
        json!([ask(
            "Bash",
            json!({"command": command, "password": "pw-in-the-clear"})
        )]),
    ))
    .await;
    let denied = decision(&out[0]);
    assert_eq!(denied["behavior"], "deny");
    assert!(
        denied["message"]
            .as_str()
            .expect("message")
            .contains("nobody answered in Slack within 1 s"),
        "{denied}"
    );
    assert!(started.elapsed() >= Duration::from_secs(1));
    let posted = prompt(&setup.slack, "Permission requested", 1, 3).await;
    let shown = posted.text.expect("text");
    assert!(
        shown.contains("`curl -H 'auth: [secret]' https://example.com/xxx"),
        "the session's secret is hidden: {shown}"
    );
    assert!(shown.contains("password: [hidden]"), "{shown}");
    assert!(
        !shown.contains("hunter2") && !shown.contains("pw-in-the-clear"),
        "{shown}"
    );
    assert!(
        shown.contains("[cut: ") && shown.len() < 2_500,
        "a long input is cut: {} bytes",
        shown.len()
    );
    let settled = updated_text(&setup.slack, &posted.ts);
    assert!(
        settled.contains("Denied: no answer within 1 s"),
        "{settled}"
    );
    assert!(!settled.contains("hunter2"), "{settled}");
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plans_and_questions_go_over_the_decision_bridge() {
    let setup = setup("").await;
    let (daemon, mcp) = daemon(&setup).await;
    let slack = &setup.slack;
    let plan = "1. Add the route\n2. Test it with <!channel> watching";
    let question = json!({"questions": [{
        "question": "Which database?",
        "header": "Database",
        "multiSelect": false,
        "options": [
            {"label": "Postgres", "description": "the usual"},
            {"label": "SQLite", "description": "simpler"},
            {"label": "None", "description": "no storage"}
        ]
    }]});
    let multi = json!({"questions": [{
        "question": "Which checks?",
        "header": "Checks",
        "multiSelect": true,
        "options": [{"label": "lint", "description": ""}, {"label": "test", "description": ""}]
    }]});
    let two = json!({"questions": [
        {"question": "Which port?", "header": "Port", "multiSelect": false,
         "options": [{"label": "3000", "description": ""}, {"label": "8080", "description": ""}]},
        {"question": "Which host?", "header": "Host", "multiSelect": false,
         "options": [{"label": "localhost", "description": ""}, {"label": "0.0.0.0", "description": ""}]}
    ]});
    let turn = session(
        &mcp,
        json!([
            ask("ExitPlanMode", json!({"plan": plan})),
            ask("ExitPlanMode", json!({"plan": "Delete everything"})),
            ask("AskUserQuestion", question.clone()),
            ask("AskUserQuestion", multi.clone()),
            ask("AskUserQuestion", two.clone()),
        ]),
    );
    let approved = prompt(slack, "*Plan for approval*", 1, 2).await;
    let shown = approved.text.clone().expect("text");
    assert!(
        shown.contains("1. Add the route") && !shown.contains("<!channel>"),
        "{shown}"
    );
    react(slack, STRANGER, "white_check_mark", &approved).await;
    react(slack, OWNER, "white_check_mark", &approved).await;
    let rejected = prompt(slack, "*Plan for approval*", 2, 2).await;
    react(slack, ALLOWED, "x", &rejected).await;
    let asked = prompt(slack, "Which database?", 1, 3).await;
    let shown = asked.text.clone().expect("text");
    assert!(
        shown.contains(":one: Postgres — the usual") && shown.contains(":three: None"),
        "{shown}"
    );
    react(slack, OWNER, "two", &asked).await;
    // Two questions in one call: asked one after the other.
    let port = prompt(slack, "Which port?", 1, 2).await;
    react(slack, ALLOWED, "two", &port).await;
    let host = prompt(slack, "Which host?", 1, 2).await;
    react(slack, OWNER, "one", &host).await;
    let out = finished(turn).await;
    let mut both = two.clone();
    both["answers"] = json!({"Which port?": "8080", "Which host?": "localhost"});
    assert_eq!(
        decision(&out[4]),
        json!({"behavior": "allow", "updatedInput": both})
    );

    assert_eq!(
        decision(&out[0]),
        json!({"behavior": "allow", "updatedInput": {"plan": plan}})
    );
    let no = decision(&out[1]);
    assert_eq!(no["behavior"], "deny");
    assert!(
        no["message"]
            .as_str()
            .expect("message")
            .contains("rejected in Slack by Alma"),
        "{no}"
    );
    let mut answered = question.clone();
    answered["answers"] = json!({"Which database?": "SQLite"});
    assert_eq!(
        decision(&out[2]),
        json!({"behavior": "allow", "updatedInput": answered}),
        "the chosen option's label is the answer"
    );
    assert_eq!(
        decision(&out[3]),
        json!({"behavior": "allow", "updatedInput": multi}),
        "a multi-select question falls back to allow, unanswered"
    );
    assert_eq!(
        slack
            .messages()
            .iter()
            .filter(|m| m
                .text
                .as_deref()
                .is_some_and(|t| t.contains("Which checks?")))
            .count(),
        0,
        "nothing is posted for a multi-select question"
    );
    assert!(updated_text(slack, &approved.ts).contains("Approved by <@U0OWNER>"));
    assert!(updated_text(slack, &rejected.ts).contains("Rejected by <@U0ALLOWED>"));
    assert!(updated_text(slack, &asked.ts).contains("<@U0OWNER> answered *SQLite*"));
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_falls_back_to_the_generic_prompt_when_the_bridge_fails() {
    let setup = setup("").await;
    let (daemon, mcp) = daemon(&setup).await;
    let slack = &setup.slack;
    // Slack refuses the plan's ✅: the bridge fails, the generic prompt asks.
    slack.fail_next("reactions.add", "too_many_reactions");
    let turn = session(
        &mcp,
        json!([ask("ExitPlanMode", json!({"plan": "Ship it"}))]),
    );
    let generic = prompt(slack, "Permission requested: *ExitPlanMode*", 1, 3).await;
    react(slack, OWNER, "+1", &generic).await;
    let out = finished(turn).await;
    assert_eq!(
        decision(&out[0]),
        json!({"behavior": "allow", "updatedInput": {"plan": "Ship it"}})
    );
    let failed_plan = slack
        .messages()
        .into_iter()
        .find(|m| {
            m.text
                .as_deref()
                .is_some_and(|t| t.starts_with("*Plan for approval*"))
        })
        .expect("the plan was posted first");
    assert!(updated_text(slack, &failed_plan.ts).contains("Cannot wait for an answer here"));
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_dm_asks_before_a_first_dm_and_stops_at_three() {
    let setup = setup("").await;
    let (daemon, mcp) = daemon(&setup).await;
    let slack = &setup.slack;
    let dm = |to: &str, n: u32| {
        call(
            "send_dm",
            json!({"recipient": to, "message": format!("build {n} is green")}),
        )
    };
    let turn = session(
        &mcp,
        json!([
            dm(&format!("<@{FRIEND}>"), 1),
            dm(FRIEND, 2),
            dm(FRIEND, 3),
            dm(FRIEND, 4),
            dm(STRANGER, 1),
        ]),
    );
    let first = prompt(
        slack,
        "Permission requested: *send_dm* to <@U0FRIEND>",
        1,
        3,
    )
    .await;
    assert!(
        first
            .text
            .as_deref()
            .expect("text")
            .contains("> build 1 is green")
    );
    react(slack, OWNER, "white_check_mark", &first).await;
    let other = prompt(
        slack,
        "Permission requested: *send_dm* to <@U0STRANGER>",
        1,
        3,
    )
    .await;
    react(slack, OWNER, "-1", &other).await;
    let out = finished(turn).await;

    for (i, step) in out.iter().enumerate().take(3) {
        assert_eq!(step["is_error"], false, "DM {}: {step}", i + 1);
        assert_eq!(step["structured"]["ok"], true, "{step}");
        assert_eq!(step["structured"]["sent"], i as u64 + 1);
    }
    assert_eq!(out[3]["is_error"], true);
    assert_eq!(out[3]["structured"]["ok"], false);
    assert!(
        out[3]["structured"]["reason"]
            .as_str()
            .expect("reason")
            .contains(
                "limited to 3 DMs per recipient per session, and <@U0FRIEND> has had them all"
            ),
        "{}",
        out[3]
    );
    assert_refused(&out[4], "Olive (U0OWNER) denied it in Slack");
    let friend_dms: Vec<PostedMessage> = slack
        .messages()
        .into_iter()
        .filter(|m| m.channel.starts_with('D'))
        .collect();
    assert_eq!(
        friend_dms.len(),
        3,
        "three DMs, to the friend only: {friend_dms:?}"
    );
    let permalink = format!(
        "https://fake-slack.test/archives/{}/p{}",
        setup.channel,
        setup.thread_ts.replace('.', "")
    );
    for (n, m) in friend_dms.iter().enumerate() {
        let t = m.text.as_deref().expect("text");
        assert_eq!(
            t,
            format!(
                "_Sent from <{permalink}|a calvin session> started by <@U0OWNER>_\nbuild {} is green",
                n + 1
            )
        );
    }
    assert_eq!(
        slack
            .messages()
            .iter()
            .filter(|m| m
                .text
                .as_deref()
                .is_some_and(|t| t.starts_with(":warning: Permission requested: *send_dm*")))
            .count(),
        2,
        "one prompt per recipient: ✅ allowed the friend for the session"
    );
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_permission_call_is_refused_in_the_familys_shape() {
    let setup = setup("").await;
    let out = drive(setup.stdio(json!([
        call("permission_prompt", json!({"tool_name": 5, "input": "ls"})),
        call("permission_prompt", json!({"input": {}})),
    ])))
    .await;
    assert_eq!(out[0]["is_error"], true);
    let reason = out[0]["structured"]["reason"].as_str().expect("reason");
    assert!(
        reason.contains("tool_name must be a string") && reason.contains("input must be an object"),
        "{reason}"
    );
    assert_eq!(out[0]["structured"]["ok"], false);
    assert_ok_shape_refusal(&out[1], "tool_name is required");
    assert!(setup.slack.messages().is_empty());
}

fn assert_ok_shape_refusal(out: &Value, needle: &str) {
    assert_eq!(out["is_error"], true, "{out}");
    let parsed: Value = serde_json::from_str(text(out)).expect("JSON text");
    assert_eq!(parsed, out["structured"]);
    assert_eq!(parsed["ok"], false);
    assert!(
        parsed["reason"].as_str().expect("reason").contains(needle),
        "{parsed}"
    );
}
