//! The tools of both families that touch the chat, run from one table of
//! cases against the fake Slack and the fake Mattermost (`on_both!` makes
//! each case a test per platform), driven by the official MCP Python SDK:
//! every behaviour the specs give both platforms is checked on both, and
//! where the claude-threads spec gives them different rules (read_post's
//! and read_channel_history's scope, search_messages, send_dm's
//! recipient) each platform is held to its own.

use calvin_tests::chat_world::{Platform, World};
use calvin_tests::family::{answer, assert_capped, content, listed, ok, refused};
use calvin_tests::gateway::{GatewayDaemon, call, drive, text};
use serde_json::{Value, json};

/// Each case as a test on Slack and a test on Mattermost.
macro_rules! on_both {
    ($($case:ident),* $(,)?) => {
        mod slack {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case(calvin_tests::chat_world::Platform::Slack).await
                }
            )*
        }
        mod mattermost {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case(calvin_tests::chat_world::Platform::Mattermost).await
                }
            )*
        }
    };
}

on_both!(
    read_post_reads_a_post_or_the_thread_around_it_capped_at_50,
    read_post_keeps_to_its_platforms_scope,
    list_thread_reads_the_session_thread_or_a_linked_one_capped_at_50,
    read_channel_history_returns_the_latest_messages_capped_at_100_in_scope,
    react_to_post_reacts_to_the_latest_message_or_a_linked_one,
    update_own_post_edits_only_the_bots_posts_up_to_4000_characters,
    search_messages_keeps_only_in_scope_channels,
    send_dm_refuses_before_any_prompt_or_message,
    send_file_uploads_into_the_session_thread,
    post_card_shows_its_table_fields_and_links,
    read_thread_and_post_thread_cross_threads_with_attribution,
    spawn_thread_posts_the_task_at_the_top_and_launches_its_session,
    permission_prompt_is_answered_by_the_owners_reaction_only,
    a_stdio_session_hears_its_answer_through_the_daemon,
    send_dm_asks_first_then_sends_with_attribution,
    request_secret_goes_from_a_button_to_a_form_to_the_shell,
);

// ---- answers ----

/// An agent-tools answer: not an error.
fn done(v: &Value) -> &Value {
    assert_eq!(v["is_error"], false, "{v}");
    &v["structured"]
}

/// An agent-tools refusal holding `needle`.
fn failed(v: &Value, needle: &str) {
    assert_eq!(v["is_error"], true, "{v}");
    assert!(
        text(v).contains(needle),
        "{needle:?} missing from {}",
        text(v)
    );
}

/// What a tool says of a post in a private channel without the bot.
fn hidden_from_bot(platform: Platform, channel: &str) -> String {
    match platform {
        Platform::Slack => format!("the bot cannot see {channel}"),
        Platform::Mattermost => {
            "names a post that does not exist or that the bot cannot read".into()
        }
    }
}

// ---- the claude-threads family ----

async fn read_post_reads_a_post_or_the_thread_around_it_capped_at_50(platform: Platform) {
    let w = World::on(platform, "one-machine").await;
    let session = w.channels.session.clone();
    let (parent, replies) = w.seed_thread(&session, 59);
    let url = w.link(&session, &replies[4]);
    let read = |args: Value| call("read_post", args);
    let out = drive(w.setup.stdio(json!([
        read(json!({"url": url})),
        read(json!({"url": url, "include_thread": true, "max_messages": 50})),
        read(json!({"url": url, "include_thread": true, "max_messages": 51})),
        read(json!({"url": url, "include_thread": true})),
        read(json!({"url": url, "include_thread": true, "max_messages": 0})),
    ])))
    .await;
    let s = ok(&out[0]);
    assert_eq!(listed(s), [replies[4].clone()]);
    assert_eq!(s["thread_ts"].as_str(), Some(parent.as_str()));
    assert_eq!(s["messages"][0]["author"], w.author("bob"));
    let c = content(s);
    assert!(
        c.contains(&format!(
            "--- message {} by {}\nreply 5\n",
            replies[4],
            w.author("bob")
        )),
        "{c}"
    );
    // The first message, then the 49 around the post (the 6th): it is in.
    let s = ok(&out[1]);
    let ids = listed(s);
    assert_eq!((ids.len(), s["left_out"].as_u64()), (50, Some(10)));
    assert_eq!(ids[0], parent);
    assert_eq!(ids[1..], replies[..49]);
    assert_eq!(s["capped"], false);
    // 51 is capped at 50, and the answer says so.
    let s = ok(&out[2]);
    assert_eq!(listed(s), ids);
    assert_capped(s, "(max_messages 51 is capped at 50)");
    let s = ok(&out[3]);
    assert_eq!(listed(s).len(), 20);
    assert!(listed(s).contains(&replies[4]));
    refused(
        &out[4],
        "max_messages must be a positive integer (above 50 it is capped at 50), got 0",
    );
    // A reply deep in the thread is in the answer, with its neighbours.
    let deep = w.link(&session, &replies[40]);
    let out = drive(
        w.setup
            .stdio(json!([read(json!({"url": deep, "include_thread": true}))])),
    )
    .await;
    let s = ok(&out[0]);
    let ids = listed(s);
    assert_eq!(ids[0], parent);
    assert_eq!(ids[1..], replies[31..50]);
    assert_eq!(
        (s["left_out_earlier"].as_u64(), s["left_out_later"].as_u64()),
        (Some(31), Some(9))
    );
    w.nothing_written();
}

async fn read_post_keeps_to_its_platforms_scope(platform: Platform) {
    let w = World::on(platform, "self-hosted").await;
    let ch = w.channels.clone();
    let posts: Vec<String> = [&ch.general, &ch.elsewhere, &ch.team, &ch.hidden]
        .iter()
        .map(|c| w.post(c, "alice", "elsewhere", None))
        .collect();
    let read = |url: String| call("read_post", json!({"url": url}));
    let out = drive(w.setup.stdio(json!([
        read(w.link(&ch.session, &w.thread())),
        read(w.link(&ch.general, &posts[0])),
        read(w.link(&ch.elsewhere, &posts[1])),
        read(w.link(&ch.team, &posts[2])),
        read(w.link(&ch.hidden, &posts[3])),
        read(w.foreign_link(&ch.session, &w.thread())),
        read(w.link(&ch.session, &w.no_such_message())),
        call("read_post", json!({})),
    ])))
    .await;
    assert_eq!(ok(&out[0])["messages"][0]["author"], w.author("olive"));
    match platform {
        // Slack: the bot's channel only.
        Platform::Slack => {
            refused(&out[1], "#general is not this session's channel");
            refused(&out[2], "#elsewhere is not this session's channel");
        }
        // Mattermost: public channels of the instance too, joined or not.
        Platform::Mattermost => {
            assert_eq!(listed(ok(&out[1])), [posts[0].clone()]);
            assert_eq!(listed(ok(&out[2])), [posts[1].clone()]);
        }
    }
    refused(&out[3], "#team is not");
    // A private channel without the bot: Slack's link names it, and the
    // bot cannot see it; Mattermost's names only the post, which it cannot
    // read.
    refused(&out[4], &hidden_from_bot(platform, &ch.hidden));
    refused(&out[5], "is not on this");
    refused(&out[6], &w.no_such_message());
    refused(&out[7], "url is required");
    w.nothing_written();
}

async fn list_thread_reads_the_session_thread_or_a_linked_one_capped_at_50(platform: Platform) {
    let w = World::on(platform, "self-hosted").await;
    let ch = w.channels.clone();
    let remark = w.post(&ch.session, "alice", "an earlier remark", Some(&w.thread()));
    let (parent, replies) = w.seed_thread(&ch.general, 59);
    let url = w.link(&ch.general, &replies[30]);
    let list = |args: Value| call("list_thread", args);
    let out = drive(w.setup.stdio(json!([
        list(json!({})),
        list(json!({"url": url, "max_messages": 50})),
        list(json!({"url": url, "max_messages": 51})),
        list(json!({"url": url})),
    ])))
    .await;
    let s = ok(&out[0]);
    assert_eq!(listed(s), [w.thread(), remark]);
    assert!(
        content(s).contains(&format!("by {}\nan earlier remark\n", w.author("alice"))),
        "{s}"
    );
    let s = ok(&out[1]);
    let ids = listed(s);
    assert_eq!(
        (ids.len(), s["total"].as_u64(), s["left_out"].as_u64()),
        (50, Some(60), Some(10))
    );
    assert_eq!(ids[0], parent);
    assert!(content(s).starts_with(&format!("The thread {parent} in #general: 50 of its 60")));
    let s = ok(&out[2]);
    assert_eq!(listed(s), ids);
    assert_capped(s, "(max_messages 51 is capped at 50)");
    assert_eq!(listed(ok(&out[3])).len(), 20);
    w.nothing_written();
}

async fn read_channel_history_returns_the_latest_messages_capped_at_100_in_scope(
    platform: Platform,
) {
    let w = World::on(platform, "self-hosted").await;
    let ch = w.channels.clone();
    let posted: Vec<String> = (1..=120)
        .map(|i| w.post(&ch.general, "alice", &format!("announcement {i}"), None))
        .collect();
    // A reply is not a top-level message.
    w.post(&ch.general, "bob", "a reply", Some(&posted[119]));
    let outside = w.post(&ch.elsewhere, "alice", "unjoined", None);
    let history = |channel: &str, max: Option<u64>| {
        let mut args = json!({"channel_id": channel});
        if let Some(max) = max {
            args["max_messages"] = json!(max);
        }
        call("read_channel_history", args)
    };
    let out = drive(w.setup.stdio(json!([
        history(&ch.general, Some(100)),
        history(&ch.general, Some(101)),
        history(&ch.general, None),
        history(&ch.elsewhere, None),
        history(&ch.team, None),
        history(&ch.hidden, None),
        history("not-a-channel", None),
    ])))
    .await;
    let s = ok(&out[0]);
    assert_eq!(listed(s), posted[20..]);
    assert_eq!(s["has_more"], true);
    let s = ok(&out[1]);
    assert_eq!(listed(s), posted[20..]);
    assert_capped(s, "(max_messages 101 is capped at 100)");
    assert_eq!(listed(ok(&out[2])), posted[100..]);
    match platform {
        // On Slack the bot must also be a member.
        Platform::Slack => refused(&out[3], "the bot is not in #elsewhere"),
        Platform::Mattermost => assert_eq!(listed(ok(&out[3])), [outside]),
    }
    refused(&out[4], "#team is not public");
    refused(&out[5], &format!("the bot cannot see {}", ch.hidden));
    refused(&out[6], "channel_id");
    w.nothing_written();
}

async fn react_to_post_reacts_to_the_latest_message_or_a_linked_one(platform: Platform) {
    let w = World::on(platform, "self-hosted").await;
    let ch = w.channels.clone();
    let latest = w.post(&ch.session, "alice", "done?", Some(&w.thread()));
    let in_general = w.post(&ch.general, "bob", "ship it", None);
    let in_hidden = w.post(&ch.hidden, "alice", "secret", None);
    let unjoined = w.post(&ch.elsewhere, "alice", "over here", None);
    let react = |args: Value| call("react_to_post", args);
    let out = drive(w.setup.stdio(json!([
        react(json!({"emoji": "white_check_mark"})),
        react(json!({"emoji": "white_check_mark"})),
        react(json!({"emoji": "eyes", "url": w.link(&ch.general, &in_general)})),
        react(json!({"emoji": "eyes", "url": w.link(&ch.hidden, &in_hidden)})),
        react(json!({"emoji": ":eyes:"})),
        react(json!({"emoji": "e".repeat(101)})),
        react(json!({"emoji": "eyes", "url": w.link(&ch.elsewhere, &unjoined)})),
    ])))
    .await;
    let s = ok(&out[0]);
    assert_eq!(s["ts"].as_str(), Some(latest.as_str()));
    assert_eq!(s["already_reacted"], false);
    assert_eq!(ok(&out[1])["already_reacted"], true);
    assert_eq!(
        w.reactions(&ch.session, &latest),
        [("white_check_mark".to_owned(), w.bot())]
    );
    ok(&out[2]);
    assert_eq!(
        w.reactions(&ch.general, &in_general),
        [("eyes".to_owned(), w.bot())]
    );
    refused(&out[3], &hidden_from_bot(platform, &ch.hidden));
    assert!(w.reactions(&ch.hidden, &in_hidden).is_empty());
    refused(&out[4], "without colons");
    refused(&out[5], "emoji");
    // A public channel the bot has not joined: Slack's scope keeps it out;
    // Mattermost lets the bot read it but react only where it was added.
    match platform {
        Platform::Slack => refused(&out[6], "the bot is not in #elsewhere"),
        Platform::Mattermost => refused(&out[6], "the bot is not in that channel"),
    }
    assert!(w.reactions(&ch.elsewhere, &unjoined).is_empty());
    if platform == Platform::Mattermost {
        // An older server keeps a post's reactions to the channel's
        // members: the same answer, not "not found".
        w.fake_mattermost().set_reactions_members_only(true);
        let out = drive(w.setup.stdio(json!([
            react(json!({"emoji": "eyes", "url": w.link(&ch.elsewhere, &unjoined)})),
            react(json!({"emoji": "tada", "url": w.link(&ch.general, &in_general)})),
        ])))
        .await;
        refused(&out[0], "the bot is not in that channel");
        assert!(!text(&out[0]).contains("not_found"), "{}", out[0]);
        assert!(w.reactions(&ch.elsewhere, &unjoined).is_empty());
        ok(&out[1]);
    }
}

async fn update_own_post_edits_only_the_bots_posts_up_to_4000_characters(platform: Platform) {
    let w = World::on(platform, "self-hosted").await;
    let ch = w.channels.clone();
    // The bot's own placeholder, posted through the tools.
    let out = drive(w.setup.stdio(json!([call(
        "post_thread",
        json!({"url": w.link(&ch.session, &w.thread()), "text": "working on it..."})
    )])))
    .await;
    done(&out[0]);
    let mine = w.said().last().expect("the placeholder").id.clone();
    let theirs = w.post(&ch.session, "alice", "not yours", Some(&w.thread()));
    let update = |id: &str, message: String| {
        call(
            "update_own_post",
            json!({"url": w.link(&ch.session, id), "message": message}),
        )
    };
    let out = drive(w.setup.stdio(json!([
        update(&mine, "x".repeat(4000)),
        update(&mine, "y".repeat(4001)),
        update(&mine, "the answer is 42".into()),
        update(&theirs, "hijacked".into()),
    ])))
    .await;
    ok(&out[0]);
    refused(&out[1], "4000");
    ok(&out[2]);
    refused(&out[3], "not written by this bot");
    let updates = w.updates();
    assert_eq!(updates.len(), 2, "{updates:?}");
    assert_eq!(updates[0], (mine.clone(), "x".repeat(4000)));
    assert!(updates[1].1.contains("the answer is 42"), "{updates:?}");
    assert!(updates.iter().all(|(id, _)| *id == mine));
}

async fn search_messages_keeps_only_in_scope_channels(platform: Platform) {
    let mut w = World::on(platform, "self-hosted").await;
    let ch = w.channels.clone();
    let here = w.post(
        &ch.session,
        "alice",
        "the kiwi rollout plan",
        Some(&w.thread()),
    );
    let public = w.post(&ch.general, "bob", "kiwi rollout is next week", None);
    let private = w.post(&ch.team, "olive", "kiwi rollout budget", None);
    let search = |q: &str, max: Option<u64>| {
        let mut args = json!({"query": q});
        if let Some(max) = max {
            args["max_results"] = json!(max);
        }
        call("search_messages", args)
    };
    if platform == Platform::Slack {
        // Slack's search needs a person's token; without one it is
        // unsupported, and the tool says so.
        let out = drive(w.setup.stdio(json!([search("kiwi", None)]))).await;
        refused(&out[0], "user_token");
        w.with_search();
    }
    let out = drive(w.setup.stdio(json!([
        search("kiwi rollout", None),
        search("kiwi", Some(25)),
        search("kiwi", Some(26)),
        search(&"q".repeat(501), None),
    ])))
    .await;
    let s = ok(&out[0]);
    let found = listed(s);
    assert!(found.contains(&here), "{s}");
    assert!(found.contains(&public), "{s}");
    assert!(
        !found.contains(&private),
        "a private channel is out of scope: {s}"
    );
    for m in s["messages"].as_array().expect("messages") {
        let channel = m["channel"].as_str().expect("channel");
        assert!(
            channel == ch.session || channel == ch.general || channel == ch.elsewhere,
            "{m}"
        );
    }
    let at_cap = listed(ok(&out[1]));
    let s = ok(&out[2]);
    assert_eq!(listed(s), at_cap);
    assert_capped(s, "(max_results 26 is capped at 25)");
    refused(&out[3], "500");
    w.nothing_written();
}

async fn send_dm_refuses_before_any_prompt_or_message(platform: Platform) {
    let w = World::on(platform, "self-hosted").await;
    let dm = |recipient: String, message: String| {
        call(
            "send_dm",
            json!({"recipient": recipient, "message": message}),
        )
    };
    let bad = match platform {
        Platform::Slack => "@alice".to_owned(),
        Platform::Mattermost => "nobody-here".to_owned(),
    };
    let out = drive(w.setup.stdio(json!([
        // Carol is not in the session's channel.
        dm(w.recipient("carol"), "hi".into()),
        dm(bad, "hi".into()),
        dm(w.recipient("alice"), "m".repeat(4001)),
        dm(w.recipient("alice"), String::new()),
        dm("a".repeat(80), "hi".into()),
        dm("a".repeat(81), "hi".into()),
    ])))
    .await;
    refused(&out[0], "is not a member of this session's channel");
    refused(
        &out[1],
        match platform {
            Platform::Slack => "recipient \"@alice\" is not a Slack user id",
            Platform::Mattermost => "no Mattermost user is named @nobody-here",
        },
    );
    refused(&out[2], "4000");
    refused(&out[3], "message");
    // 80 characters is a name to look up; 81 is refused as too long.
    let at_limit = answer(&out[4])["reason"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        !at_limit.contains("81") && !at_limit.contains("at most 80"),
        "{at_limit}"
    );
    refused(&out[5], "81");
    w.nothing_written();
}

// ---- the agent-tools family ----

async fn send_file_uploads_into_the_session_thread(platform: Platform) {
    let w = World::on(platform, "one-machine").await;
    let bytes: Vec<u8> = (0..70_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(w.setup.session_dir().join("plot.bin"), &bytes).expect("file");
    std::fs::write(w.setup.session_dir().join("empty.txt"), b"").expect("file");
    let out = drive(w.setup.stdio(json!([
        call(
            "send_file",
            json!({"path": "plot.bin", "comment": "the plot"})
        ),
        call("send_file", json!({"path": "empty.txt"})),
        call("send_file", json!({"path": "/etc/hostname"})),
        call(
            "send_file",
            json!({"path": "plot.bin", "comment": "c".repeat(3001)})
        ),
    ])))
    .await;
    done(&out[0]);
    failed(&out[1], "empty");
    failed(&out[2], "outside the session directory");
    failed(&out[3], "3000");
    let files = w.files();
    assert_eq!(files.len(), 1, "only the good file went");
    let f = &files[0];
    assert_eq!(f.name, "plot.bin");
    assert_eq!(f.bytes, bytes);
    assert_eq!(f.channel, w.channels.session);
    assert_eq!(f.thread.as_deref(), Some(w.thread().as_str()));
    assert!(f.comment.contains("the plot"), "{f:?}");
}

async fn post_card_shows_its_table_fields_and_links(platform: Platform) {
    let w = World::on(platform, "one-machine").await;
    let card = json!({
        "root": "card",
        "elements": {
            "card": {"type": "Card", "props": {"title": "Deploy report"},
                     "children": ["facts", "table", "b1"]},
            "facts": {"type": "Fields", "children": ["f1"]},
            "f1": {"type": "Field", "props": {"label": "Status", "value": "green"}},
            "table": {"type": "Table", "props": {"columns": ["service", "p99"],
                      "rows": [["api", 12], ["web", "30"]]}},
            "b1": {"type": "Button", "props": {"text": "Open", "url": "https://example.com/run/7"}}
        }
    });
    let out = drive(
        w.setup
            .stdio(json!([call("post_card", json!({"spec": card}))])),
    )
    .await;
    done(&out[0]);
    let said = w.said();
    assert_eq!(said.len(), 1);
    let card = &said[0];
    assert_eq!(card.thread.as_deref(), Some(w.thread().as_str()));
    for shown in [
        "Deploy report",
        "Status",
        "green",
        "service",
        "api",
        "web",
        "30",
        "Open",
        "https://example.com/run/7",
    ] {
        assert!(
            card.visible.contains(shown),
            "{shown:?} not shown: {}",
            card.visible
        );
    }
    if platform == Platform::Mattermost {
        // No Block Kit there: a Markdown table and a Markdown link.
        assert!(card.text.contains("| service | p99 |"), "{}", card.text);
        assert!(card.text.contains("| web | 30 |"), "{}", card.text);
        assert!(
            card.text.contains("[Open](https://example.com/run/7)"),
            "{}",
            card.text
        );
    }
}

async fn read_thread_and_post_thread_cross_threads_with_attribution(platform: Platform) {
    let w = World::on(platform, "self-hosted").await;
    let ch = w.channels.clone();
    let (parent, replies) = w.seed_thread(&ch.general, 3);
    let url = w.link(&ch.general, &replies[1]);
    let out = drive(w.setup.stdio(json!([
        call("read_thread", json!({"url": url})),
        call("read_thread", json!({"channel": ch.general, "ts": parent})),
        call(
            "post_thread",
            json!({"url": url, "text": "heads up @channel and @here: done"})
        ),
        call("post_thread", json!({"url": url, "text": "t".repeat(4001)})),
        call("read_thread", json!({"channel": ch.general})),
    ])))
    .await;
    let s = done(&out[0]);
    assert!(text(&out[0]).contains("the first message"), "{s}");
    assert!(text(&out[0]).contains("reply 3"));
    done(&out[1]);
    done(&out[2]);
    failed(&out[3], "text is 4001 characters; at most 4000");
    failed(&out[4], "ts");
    let said = w.said();
    assert_eq!(said.len(), 1);
    let reply = &said[0];
    assert_eq!(reply.channel, ch.general);
    assert_eq!(reply.thread.as_deref(), Some(parent.as_str()));
    // Channel-wide mentions are plain text, and the owner is named.
    assert!(!reply.text.contains("@channel"), "{}", reply.text);
    assert!(!reply.text.contains("@here"), "{}", reply.text);
    assert!(reply.text.contains("channel") && reply.text.contains("done"));
    assert!(reply.text.contains("Posted for"), "{}", reply.text);
}

async fn spawn_thread_posts_the_task_at_the_top_and_launches_its_session(platform: Platform) {
    use calvin_tests::git::{bare_repo, git};
    use std::os::unix::fs::PermissionsExt;
    let mut w = World::on(platform, "self-hosted").await;
    let root = w.setup.dir.path().to_owned();
    let bare = bare_repo(&root, "acme", "docs", &[("README.md", "# docs\n")]);
    let docs = w.setup.session_dir().join("docs");
    let (bare, docs_path) = (bare.to_str().expect("path"), docs.to_str().expect("path"));
    git(&root, &["clone", "-q", bare, docs_path]);
    std::fs::write(docs.join("plan.md"), "# Plan\n\nWhat to do.\n").expect("brief");
    git(&docs, &["add", "-A"]);
    git(&docs, &["commit", "-q", "-m", "the brief"]);
    git(&docs, &["push", "-q", "origin", "HEAD:main"]);
    let record = root.join("launched");
    let launcher = root.join("start-session");
    std::fs::write(
        &launcher,
        format!(
            "#!/bin/bash\nprintf '%s\\n' \"$@\" > {}\n",
            record.display()
        ),
    )
    .expect("launcher");
    std::fs::set_permissions(&launcher, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    w.setup.extra = format!(
        "[launcher]\ncommand = [\"{}\", \"{{channel}}\", \"{{thread_ts}}\", \"{{owner}}\", \"{{task}}\"]\n",
        launcher.display()
    );
    let out = drive(w.setup.stdio(json!([
        call(
            "spawn_thread",
            json!({"task": "Write the changelog", "brief": "docs/plan.md"})
        ),
        call(
            "spawn_thread",
            json!({"task": "x".repeat(151), "brief": "docs/plan.md"})
        ),
    ])))
    .await;
    let s = done(&out[0]);
    failed(&out[1], "150");
    let said = w.said();
    assert_eq!(said.len(), 1, "{said:?}");
    let top = &said[0];
    assert_eq!(top.channel, w.channels.session);
    assert_eq!(top.thread, None, "a new thread starts at the top level");
    assert!(top.text.contains("Write the changelog"), "{}", top.text);
    assert!(top.text.contains("docs/plan.md"), "{}", top.text);
    assert_eq!(s["thread_ts"], json!(top.id));
    let launched = std::fs::read_to_string(&record).expect("the launcher ran");
    let args: Vec<&str> = launched.lines().collect();
    assert_eq!(
        args,
        [
            w.channels.session.as_str(),
            top.id.as_str(),
            w.person("olive").as_str(),
            "Write the changelog"
        ]
    );
}

// ---- through the daemon: reactions, buttons and forms ----

async fn permission_prompt_is_answered_by_the_owners_reaction_only(platform: Platform) {
    let mut w = World::on(platform, "self-hosted").await;
    w.with_events();
    let (_daemon, mcp) = w.daemon().await;
    let ask = call(
        "permission_prompt",
        json!({"tool_name": "Write", "input": {"file_path": "a.txt"}, "tool_use_id": "t1"}),
    );
    let task = tokio::spawn(drive(GatewayDaemon::http(&mcp, json!([ask]))));
    let prompt = permission_prompt(&w).await;
    // The spec's "⚠️ Permission requested: Write file.txt", each
    // platform's markup around the tool's name.
    let first_line = match platform {
        Platform::Slack => ":warning: Permission requested: *Write* a.txt",
        Platform::Mattermost => ":warning: Permission requested: **Write** a.txt",
    };
    assert_eq!(prompt.text.lines().next(), Some(first_line), "{prompt:?}");
    // Bob is in the channel, but neither the owner nor allowed: nothing
    // changes.
    w.react("bob", "+1", &prompt.channel, &prompt.id).await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(!task.is_finished(), "a stranger's reaction decided");
    w.react("olive", "+1", &prompt.channel, &prompt.id).await;
    let decision = decided(task).await;
    assert_eq!(decision["behavior"], "allow", "{decision}");
}

/// A stdio gateway never holds the platform's events: without a daemon
/// its prompt is denied, saying how to name one, and nothing is posted;
/// with `[daemon] url` it hears its answer through the daemon.
async fn a_stdio_session_hears_its_answer_through_the_daemon(platform: Platform) {
    let mut w = World::on(platform, "self-hosted").await;
    w.with_events();
    let bash = call(
        "permission_prompt",
        json!({"tool_name": "Bash", "input": {"command": "make"}, "tool_use_id": "t2"}),
    );
    let out = drive(w.setup.stdio(json!([bash]))).await;
    let denied: Value = serde_json::from_str(text(&out[0])).expect("JSON");
    assert_eq!(denied["behavior"], "deny", "{denied}");
    assert!(
        denied["message"]
            .as_str()
            .expect("message")
            .contains("set [daemon] url"),
        "{denied}"
    );
    w.nothing_written();
    let (daemon, _) = w.daemon().await;
    w.setup.extra.push_str(&daemon.config_section(&w.setup));
    let turn = tokio::spawn(drive(w.setup.stdio(json!([bash]))));
    let prompt = permission_prompt(&w).await;
    // Bob's 👎 first: were it heard, the call would be denied.
    w.react("bob", "-1", &prompt.channel, &prompt.id).await;
    w.react("olive", "+1", &prompt.channel, &prompt.id).await;
    assert_eq!(
        decided(turn).await,
        json!({"behavior": "allow", "updatedInput": {"command": "make"}})
    );
}

async fn send_dm_asks_first_then_sends_with_attribution(platform: Platform) {
    let mut w = World::on(platform, "self-hosted").await;
    w.with_events();
    let (_daemon, mcp) = w.daemon().await;
    let dm = call(
        "send_dm",
        json!({"recipient": w.recipient("alice"), "message": "the build is green"}),
    );
    let task = tokio::spawn(drive(GatewayDaemon::http(&mcp, json!([dm]))));
    let prompt = wait_for_said(&w, "send_dm").await;
    wait_until(&w, "the prompt's options", || {
        w.reactions(&prompt.channel, &prompt.id)
            .iter()
            .any(|(_, u)| *u == w.bot())
    })
    .await;
    w.react("olive", "+1", &prompt.channel, &prompt.id).await;
    let out = tokio::time::timeout(std::time::Duration::from_secs(15), task)
        .await
        .expect("decided")
        .expect("driver");
    ok(&out[0]);
    let sent = w
        .said()
        .into_iter()
        .find(|s| s.text.contains("the build is green") && s.channel != w.channels.session)
        .unwrap_or_else(|| panic!("no DM: {:?}", w.said()));
    assert_eq!(sent.thread, None, "a DM of its own");
    assert!(
        sent.text.lines().count() >= 2,
        "an attribution line first: {}",
        sent.text
    );
}

async fn request_secret_goes_from_a_button_to_a_form_to_the_shell(platform: Platform) {
    let mut w = World::on(platform, "self-hosted").await;
    w.with_events();
    let (daemon, mcp) = w.daemon().await;
    let out = drive(GatewayDaemon::http(
        &mcp,
        json!([call(
            "request_secret",
            json!({"name": "STRIPE_KEY", "reason": "to charge the test cards"})
        )]),
    ))
    .await;
    done(&out[0]);
    let button = wait_for_said(&w, "STRIPE_KEY").await;
    assert_eq!(button.thread.as_deref(), Some(w.thread().as_str()));
    let value = "sk_test_51H'quote $HOME `x`";
    let answer = w
        .click_and_submit("olive", &button, value)
        .await
        .expect("the form is answered");
    assert!(
        answer
            .get("errors")
            .is_none_or(|e| e.as_object().is_none_or(|o| o.is_empty())),
        "{answer}"
    );
    // The session's next shell commands see it.
    let env_file = w.setup.env_file();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let got = std::process::Command::new("bash")
            .args(["-c", "printf '%s' \"${STRIPE_KEY-unset}\""])
            .env("BASH_ENV", &env_file)
            .output()
            .expect("bash");
        if String::from_utf8_lossy(&got.stdout) == value {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the secret never reached the shell; daemon log:\n{}",
            daemon.log()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(
        !daemon.log().contains("sk_test_51H"),
        "the value was logged"
    );
}

/// The generic permission prompt, once the bot has added its three
/// options to it (so it listens).
async fn permission_prompt(w: &World) -> calvin_tests::chat_world::Said {
    let prompt = wait_for_said(w, "Permission requested").await;
    wait_until(w, "the prompt's options", || {
        w.reactions(&prompt.channel, &prompt.id)
            .iter()
            .filter(|(_, u)| *u == w.bot())
            .count()
            == 3
    })
    .await;
    prompt
}

/// The CLI's decision in the first answer of a turn driven in `task`.
async fn decided(task: tokio::task::JoinHandle<Vec<Value>>) -> Value {
    let out = tokio::time::timeout(std::time::Duration::from_secs(15), task)
        .await
        .expect("decided")
        .expect("driver");
    serde_json::from_str(text(&out[0])).expect("JSON")
}

async fn wait_for_said(w: &World, needle: &str) -> calvin_tests::chat_world::Said {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        if let Some(s) = w.said().into_iter().find(|s| s.visible.contains(needle)) {
            return s;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the bot never said {needle:?}: {:?}",
            w.said()
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

async fn wait_until(_w: &World, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(15);
    while !done() {
        assert!(tokio::time::Instant::now() < deadline, "waited for {what}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
