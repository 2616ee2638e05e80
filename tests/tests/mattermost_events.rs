//! What only Mattermost has: its WebSocket, which the daemon keeps open
//! (reconnecting with backoff when it drops), and the integration
//! callbacks its buttons and dialogs POST to the daemon's callback
//! listener, which take only what the gateway signed. Against the fake
//! Mattermost, the daemon a real process, the session driven by the
//! official MCP Python SDK.

use std::time::Duration;

use calvin_tests::chat_world::{Platform, World};
use calvin_tests::gateway::{EventStream, GatewayDaemon, call, drive, text};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(15);

async fn world() -> World {
    let mut w = World::on(Platform::Mattermost, "self-hosted").await;
    w.with_events();
    w
}

/// A message in the session's thread, and a reaction to one of its
/// messages, reach the session's event stream; a message in another
/// thread does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_hears_its_threads_messages_and_reactions() {
    let w = world().await;
    let (_daemon, registered) = w.daemon_session().await;
    let mut events = EventStream::open(registered["events_url"].as_str().expect("url")).await;
    let session = w.channels.session.clone();
    let elsewhere = w.post(&session, "bob", "another topic", None);
    w.post(
        &session,
        "alice",
        "elsewhere in the channel",
        Some(&elsewhere),
    );
    let said = w.post(
        &session,
        "alice",
        "please also fix the footer",
        Some(&w.thread()),
    );
    let event = next_of(&mut events, "message").await;
    assert_eq!(event["ts"], json!(said));
    assert_eq!(event["thread_ts"], json!(w.thread()));
    assert_eq!(event["user"], json!(w.person("alice")));
    assert_eq!(event["text"], "please also fix the footer");
    w.react("bob", "eyes", &session, &said).await;
    let event = next_of(&mut events, "reaction_added").await;
    assert_eq!(
        (event["ts"].clone(), event["reaction"].clone()),
        (json!(said), json!("eyes"))
    );
    // Nothing of the other thread came.
    while let Some(e) = events.next(Duration::from_millis(300)).await {
        assert_ne!(e["text"], "elsewhere in the channel", "{e}");
    }
}

/// The socket dropped, the daemon connects again and a prompt asked
/// after that is answered by a reaction as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_websocket_is_opened_again_and_prompts_still_hear_reactions() {
    let w = world().await;
    let mm = w.fake_mattermost();
    let (daemon, mcp) = w.daemon().await;
    assert_eq!(mm.connections_opened(), 1);
    for round in 1..=2 {
        mm.drop_sockets();
        mm.wait_until("the daemon connects again", WAIT, |m| {
            m.connections_opened() > round && m.socket_count() == 1
        })
        .await
        .unwrap_or_else(|why| panic!("{why}; daemon log:\n{}", daemon.log()));
    }
    let ask = call(
        "permission_prompt",
        json!({"tool_name": "Bash", "input": {"command": "make deploy"}, "tool_use_id": "t9"}),
    );
    let task = tokio::spawn(drive(GatewayDaemon::http(&mcp, json!([ask]))));
    let prompt = loop {
        let found = w
            .said()
            .into_iter()
            .find(|s| s.text.contains("Permission requested"));
        let options = found.as_ref().map_or(0, |p| {
            w.reactions(&p.channel, &p.id)
                .iter()
                .filter(|(_, u)| *u == w.bot())
                .count()
        });
        if let (Some(p), 3) = (found, options) {
            break p;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    w.react("olive", "-1", &prompt.channel, &prompt.id).await;
    let out = tokio::time::timeout(WAIT, task)
        .await
        .expect("decided")
        .expect("driver");
    let decision: Value = serde_json::from_str(text(&out[0])).expect("JSON");
    assert_eq!(decision["behavior"], "deny", "{decision}");
    assert!(
        decision["message"]
            .as_str()
            .expect("message")
            .contains("denied in Mattermost by olive"),
        "{decision}"
    );
}

/// A bad token: the daemon keeps trying, each wait at least half of a
/// doubling step (1 s, 2 s, 4 s: jittered down to half), never spinning,
/// and never logs the token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_websocket_is_retried_with_growing_waits() {
    let mut w = world().await;
    let section = w.setup.chat_section.take().expect("section");
    w.setup.chat_section = Some(
        section
            .replace(calvin_tests::chat_world::MM_TOKEN, "not-the-bots-token")
            .replace("reconnect_secs = 1", "reconnect_secs = 8"),
    );
    let daemon = GatewayDaemon::start(&w.setup).await;
    let mm = w.fake_mattermost();
    let upgrades = || {
        mm.calls()
            .iter()
            .filter(|c| c.contains("/websocket"))
            .count()
    };
    let started = tokio::time::Instant::now();
    let mut seen = Vec::new();
    while seen.len() < 4 {
        let n = upgrades();
        if n > seen.len() {
            assert_eq!(n, seen.len() + 1, "two attempts at once: {:?}", mm.calls());
            seen.push(started.elapsed());
        }
        assert!(started.elapsed() < WAIT, "{seen:?}; log:\n{}", daemon.log());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let gaps: Vec<Duration> = seen.windows(2).map(|p| p[1] - p[0]).collect();
    let ms = Duration::from_millis;
    assert!(gaps[0] >= ms(450) && gaps[0] <= ms(1_200), "{gaps:?}");
    assert!(gaps[1] >= ms(950) && gaps[1] <= ms(2_200), "{gaps:?}");
    assert!(gaps[2] >= ms(1_950) && gaps[2] <= ms(4_200), "{gaps:?}");
    assert_eq!(mm.socket_count(), 0);
    assert!(
        !daemon.log().contains("not-the-bots-token"),
        "the token was logged"
    );
}

/// Only what the gateway signed is taken: a forged click or dialog is
/// refused (403) and opens nothing; a person other than the owner who
/// clicks the real button is told so and gets no form.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callbacks_take_only_signed_buttons_and_only_the_owners_click() {
    let w = world().await;
    let mm = w.fake_mattermost();
    let (_daemon, mcp) = w.daemon().await;
    let out = drive(GatewayDaemon::http(
        &mcp,
        json!([call(
            "request_secret",
            json!({"name": "DB_PASSWORD", "reason": "to run the migrations"})
        )]),
    ))
    .await;
    assert_eq!(out[0]["is_error"], false, "{}", out[0]);
    let button = w
        .said()
        .into_iter()
        .find(|s| s.text.contains("DB_PASSWORD"))
        .expect("the button's post");
    // The post's button: an integration callback with a signed context.
    let action = &button.rendered["attachments"][0]["actions"][0];
    assert_eq!(
        action["integration"]["url"],
        json!(format!("{}/actions", w.callback_url()))
    );
    let context = action["integration"]["context"].clone();
    let post = |path: &str, body: Value| {
        let url = format!("{}{path}", w.callback_url());
        async move {
            let out = tokio::process::Command::new("curl")
                .args(["-s", "-o", "/dev/null", "-w", "%{http_code}"])
                .args(["-H", "content-type: application/json", "--data-binary"])
                .arg(body.to_string())
                .arg(&url)
                .output()
                .await
                .expect("curl runs");
            String::from_utf8_lossy(&out.stdout).trim().to_owned()
        }
    };
    let click = |context: Value| {
        json!({"user_id": w.person("olive"), "channel_id": button.channel, "post_id": button.id,
               "trigger_id": "forged", "type": "", "context": context})
    };
    let mut forged = context.clone();
    forged["value"] = json!("another-request");
    assert_eq!(post("/actions", click(forged)).await, "403");
    let mut unsigned = context.clone();
    unsigned.as_object_mut().map(|o| o.remove("sig"));
    assert_eq!(post("/actions", click(unsigned)).await, "403");
    let dialog = json!({"type": "dialog_submission", "callback_id": "calvin_secret",
        "state": "00.whatever", "user_id": w.person("olive"), "channel_id": button.channel,
        "team_id": mm.team_id(), "submission": {"secret:value": "x"}, "cancelled": false});
    assert_eq!(post("/dialogs", dialog).await, "403");
    assert!(mm.dialogs().is_empty(), "a forged callback opened a form");

    // Bob's click on the real button: refused, and told so in the click's
    // answer (a bot may not post ephemeral messages on a Mattermost whose
    // roles are the default ones: only a system admin may).
    mm.set_ephemeral_allowed(false);
    let action_id = action["id"].as_str().expect("action id");
    mm.click(&button.id, action_id, &w.person("bob"))
        .await
        .expect("the click reaches the daemon");
    mm.wait_until("bob is told", WAIT, |m| !m.ephemerals().is_empty())
        .await
        .expect("an ephemeral refusal");
    let told = &mm.ephemerals()[0];
    assert_eq!(told.source, calvin_tests::fake_mattermost::Source::Callback);
    assert_eq!(told.user_id, w.person("bob"));
    assert!(
        told.message.contains("Only @olive can set `DB_PASSWORD`"),
        "{told:?}"
    );
    assert!(mm.dialogs().is_empty(), "no form for bob");
}

async fn next_of(events: &mut EventStream, kind: &str) -> Value {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let event = events
            .next(left)
            .await
            .unwrap_or_else(|| panic!("no {kind} event"));
        if event["type"] == kind {
            return event;
        }
    }
}
