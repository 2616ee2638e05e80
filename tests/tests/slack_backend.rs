//! The gateway's Slack backend against the fake Slack Web API: uploads land
//! whole in the right thread, blocks arrive unchanged, Slack's errors and
//! rate limits become the right `ChatError`.

use std::time::{Duration, Instant};

use calvin_gateway::chat::{ChatBackend, ChatError, Platform, ThreadRef, Upload};
use calvin_gateway::slack::backend as slack_backend;
use calvin_tests::fake_slack::FakeSlack;
use calvin_tests::{curl, pattern_bytes};
use serde_json::{Value, json};

const TOKEN: &str = "xoxb-fake-token";
const CHANNEL: &str = "C0CALVIN01";
const THREAD_TS: &str = "1700000000.000001";

async fn fake() -> FakeSlack {
    FakeSlack::start(TOKEN, &[CHANNEL, "C0OTHER002"]).await
}

fn backend(slack: &FakeSlack) -> std::sync::Arc<dyn ChatBackend> {
    slack_backend(&slack.api_url(), slack.token()).expect("backend")
}

fn thread() -> ThreadRef {
    ThreadRef {
        channel: CHANNEL.to_string(),
        thread_ts: THREAD_TS.to_string(),
    }
}

fn upload(bytes: Vec<u8>) -> Upload {
    Upload {
        filename: "plot.png".to_string(),
        bytes,
        title: Some("Loss curve".to_string()),
        comment: Some("Training loss, run 7".to_string()),
        alt_text: Some("A line falling from 2.3 to 0.4".to_string()),
    }
}

fn section() -> Value {
    json!([{"type": "section", "text": {"type": "mrkdwn", "text": "*done*"}}])
}

#[tokio::test]
async fn upload_lands_whole_in_the_thread() {
    let slack = fake().await;
    let bytes = pattern_bytes(300_000);
    let uploaded = backend(&slack)
        .upload_file(&thread(), upload(bytes.clone()))
        .await
        .expect("upload");

    let files = slack.files();
    assert_eq!(files.len(), 1);
    let file = &files[0];
    assert_eq!(file.file_id, uploaded.file_id);
    assert_eq!(file.channel.as_deref(), Some(CHANNEL));
    assert_eq!(file.thread_ts.as_deref(), Some(THREAD_TS));
    assert_eq!(file.filename, "plot.png");
    assert_eq!(file.title, "Loss curve");
    assert_eq!(
        file.initial_comment.as_deref(),
        Some("Training loss, run 7")
    );
    assert_eq!(
        file.alt_txt.as_deref(),
        Some("A line falling from 2.3 to 0.4")
    );
    assert!(file.bytes == bytes, "the bytes differ");
    let permalink = uploaded.permalink.expect("a permalink");
    assert!(permalink.ends_with(&uploaded.file_id), "{permalink}");
    assert!(slack.messages().is_empty());
}

#[tokio::test]
async fn upload_title_defaults_to_the_file_name() {
    let slack = fake().await;
    let bare = Upload {
        filename: "notes.txt".to_string(),
        bytes: b"hello\n".to_vec(),
        title: None,
        comment: None,
        alt_text: None,
    };
    backend(&slack)
        .upload_file(&thread(), bare)
        .await
        .expect("upload");

    let file = &slack.files()[0];
    assert_eq!(file.title, "notes.txt");
    assert_eq!(file.initial_comment, None);
    assert_eq!(file.alt_txt, None);
    assert_eq!(file.bytes, b"hello\n");
}

#[tokio::test]
async fn post_blocks_records_the_blocks() {
    let slack = fake().await;
    let posted = backend(&slack)
        .post_blocks(&thread(), "done", &section())
        .await
        .expect("post");

    let messages = slack.messages();
    assert_eq!(messages.len(), 1);
    let message = &messages[0];
    assert_eq!(posted.channel, CHANNEL);
    assert_eq!(posted.ts, message.ts);
    assert_eq!(message.channel, CHANNEL);
    assert_eq!(message.thread_ts.as_deref(), Some(THREAD_TS));
    assert_eq!(message.text.as_deref(), Some("done"));
    assert_eq!(message.blocks, Some(section()));
}

#[tokio::test]
async fn wrong_token_is_invalid_auth() {
    let slack = fake().await;
    let wrong = slack_backend(&slack.api_url(), "xoxb-wrong".to_string()).expect("backend");

    let post = wrong.post_blocks(&thread(), "done", &section()).await;
    assert_eq!(post, Err(ChatError::Api("invalid_auth".to_string())));
    let sent = wrong.upload_file(&thread(), upload(b"x".to_vec())).await;
    assert_eq!(sent.err(), Some(ChatError::Api("invalid_auth".to_string())));
    assert!(slack.messages().is_empty() && slack.files().is_empty());
}

#[tokio::test]
async fn unknown_channel_is_channel_not_found() {
    let slack = fake().await;
    let nowhere = ThreadRef {
        channel: "C0NOWHERE9".to_string(),
        thread_ts: THREAD_TS.to_string(),
    };
    let not_found = Some(ChatError::Api("channel_not_found".to_string()));

    let post = backend(&slack)
        .post_blocks(&nowhere, "done", &section())
        .await;
    assert_eq!(post.err(), not_found);
    let sent = backend(&slack)
        .upload_file(&nowhere, upload(b"x".to_vec()))
        .await;
    assert_eq!(sent.err(), not_found);
    assert!(slack.messages().is_empty() && slack.files().is_empty());
}

#[tokio::test]
async fn other_slack_errors_keep_their_code() {
    let slack = fake().await;
    slack.fail_next("files.getUploadURLExternal", "file_uploads_disabled");
    let sent = backend(&slack)
        .upload_file(&thread(), upload(b"x".to_vec()))
        .await;
    assert_eq!(
        sent.err(),
        Some(ChatError::Api("file_uploads_disabled".to_string()))
    );
}

#[tokio::test]
async fn rate_limit_is_waited_out_and_retried() {
    let slack = fake().await;
    slack.rate_limit_next("chat.postMessage", 1);
    let started = Instant::now();
    backend(&slack)
        .post_blocks(&thread(), "done", &section())
        .await
        .expect("post after the retry");

    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(slack.messages().len(), 1);
    let calls = slack.calls();
    assert_eq!(calls, ["chat.postMessage", "chat.postMessage"]);
}

#[tokio::test]
async fn rate_limited_upload_steps_are_retried() {
    let slack = fake().await;
    slack.rate_limit_next("upload", 1);
    slack.rate_limit_next("files.completeUploadExternal", 1);
    let bytes = pattern_bytes(1000);
    backend(&slack)
        .upload_file(&thread(), upload(bytes.clone()))
        .await
        .expect("upload after the retries");
    assert_eq!(slack.files()[0].bytes, bytes);
}

#[tokio::test]
async fn endless_rate_limit_gives_up_after_three_retries() {
    let slack = fake().await;
    for _ in 0..4 {
        slack.rate_limit_next("chat.postMessage", 1);
    }
    let post = backend(&slack)
        .post_blocks(&thread(), "done", &section())
        .await;

    assert_eq!(
        post,
        Err(ChatError::RateLimited {
            platform: Platform::Slack,
            retry_after_secs: 1
        })
    );
    assert_eq!(slack.calls().len(), 4);
    assert!(slack.messages().is_empty());
}

#[tokio::test]
async fn invalid_blocks_is_its_own_error() {
    let slack = fake().await;
    slack.reject_block_type("table");
    let table = json!([{"type": "table", "rows": [[{"type": "raw_text", "text": "a"}]]}]);

    let post = backend(&slack)
        .post_blocks(&thread(), "a table", &table)
        .await;
    match post {
        Err(ChatError::InvalidBlocks(detail)) => {
            assert!(detail.contains("unsupported type: table"), "{detail}")
        }
        other => panic!("expected InvalidBlocks, got {other:?}"),
    }
    assert!(slack.messages().is_empty());
}

#[tokio::test]
async fn blocks_that_are_not_an_array_are_refused_before_sending() {
    let slack = fake().await;
    let post = backend(&slack)
        .post_blocks(&thread(), "done", &json!({"type": "section"}))
        .await;
    assert!(matches!(post, Err(ChatError::InvalidBlocks(_))), "{post:?}");
    assert!(slack.calls().is_empty());
}

#[tokio::test]
async fn native_table_and_chart_blocks_arrive_unchanged() {
    let slack = fake().await;
    let table = json!({"type": "table", "rows": [[{"type": "raw_text", "text": "a"}]]});
    let chart = json!({
        "type": "data_visualization",
        "title": "Latency",
        "chart": {
            "type": "line",
            "series": [{"name": "p99", "data": [{"value": 12.5}, {"value": 9}]}],
            "axis_config": {"categories": ["Mon", "Tue"], "y_axis_label": "ms"}
        }
    });
    // A field slack-morphism does not model must survive too.
    let wide_table = json!({
        "type": "table",
        "block_id": "t2",
        "column_settings": [{"align": "right", "is_wrapped": true}],
        "rows": [[{"type": "raw_text", "text": "1"}, {"type": "raw_text", "text": "2"}]],
        "future_field": {"x": 1}
    });
    let blocks = json!([table, chart, wide_table]);

    backend(&slack)
        .post_blocks(&thread(), "a card", &blocks)
        .await
        .expect("post");
    assert_eq!(slack.messages()[0].blocks, Some(blocks));
}

/// Runs curl against the fake and parses its JSON answer.
async fn curl_json(args: &[&str]) -> Value {
    let out = curl(std::path::Path::new("/dev/null"), args).await;
    assert_eq!(out.status, 200, "{}", out.stderr);
    serde_json::from_slice(&out.body).expect("JSON answer")
}

/// The fake itself, as another client (curl) sees it: tokens, forms, query
/// strings, multipart uploads.
#[tokio::test]
async fn fake_speaks_slack_to_curl() {
    let slack = fake().await;
    let method = |name: &str| format!("{}{name}", slack.api_url());
    let bearer = format!("Authorization: Bearer {TOKEN}");

    let auth = curl_json(&[&method("auth.test")]).await;
    assert_eq!(auth, json!({"ok": false, "error": "not_authed"}));
    let auth = curl_json(&["-d", "token=xoxb-nope", &method("auth.test")]).await;
    assert_eq!(auth["error"], "invalid_auth");
    let token_arg = format!("token={TOKEN}");
    let auth = curl_json(&["-d", &token_arg, &method("auth.test")]).await;
    assert_eq!(auth["ok"], true);

    // Form-encoded, blocks as JSON text.
    let channel_arg = format!("channel={CHANNEL}");
    let post = method("chat.postMessage");
    let form = |extra: &'static [&'static str]| {
        let mut args = vec!["-H", &bearer, "--data-urlencode", &channel_arg];
        args.extend(extra);
        args.push(&post);
        args
    };
    const TEXT_AND_BLOCKS: &[&str] = &[
        "--data-urlencode",
        "text=a & b",
        "--data-urlencode",
        r#"blocks=[{"type":"divider"}]"#,
    ];
    let posted = curl_json(&form(TEXT_AND_BLOCKS)).await;
    assert_eq!(posted["ok"], true, "{posted}");
    assert_eq!(posted["message"]["ts"], posted["ts"]);
    let message = &slack.messages()[0];
    assert_eq!(message.text.as_deref(), Some("a & b"));
    assert_eq!(message.thread_ts, None);
    assert_eq!(message.blocks, Some(json!([{"type": "divider"}])));
    assert_eq!(curl_json(&form(&[])).await["error"], "no_text");

    // Query strings, as slack-morphism sends GET methods.
    let missing = curl_json(&[
        "-H",
        &bearer,
        &method("files.getUploadURLExternal?length=3"),
    ])
    .await;
    assert_eq!(missing["error"], "invalid_arguments");
    let why = &missing["response_metadata"]["messages"][0];
    assert_eq!(why, "[ERROR] missing required field: filename");
    let url = method("files.getUploadURLExternal?length=3&filename=a%20b.txt");
    let ticket = curl_json(&["-H", &bearer, &url]).await;
    let upload_url = ticket["upload_url"].as_str().expect("upload_url");

    // A multipart upload, completed with a JSON body.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("abc");
    std::fs::write(&path, b"abc").expect("write");
    let file_arg = format!("file=@{}", path.display());
    let stored = curl(
        std::path::Path::new("/dev/null"),
        &["-F", &file_arg, upload_url],
    )
    .await;
    assert_eq!((stored.status, stored.text()), (200, "OK - 3".to_string()));

    let complete = json!({"files": [{"id": ticket["file_id"]}], "channel_id": "C0OTHER002"});
    let complete = complete.to_string();
    let url = method("files.completeUploadExternal");
    let json_type = "Content-Type: application/json; charset=utf-8";
    let args = ["-H", &bearer, "-H", json_type, "-d", &complete, &url];
    let completed = curl_json(&args).await;
    assert_eq!(completed["files"][0]["title"], "a b.txt", "{completed}");
    let file = &slack.files()[0];
    assert_eq!(file.channel.as_deref(), Some("C0OTHER002"));
    assert_eq!(file.bytes, b"abc");
    assert_eq!(curl_json(&args).await["error"], "file_not_found");
}

#[tokio::test]
async fn a_retry_after_longer_than_30_s_fails_at_once_with_the_wait() {
    let slack = fake().await;
    slack.rate_limit_next("chat.postMessage", 31);
    let started = Instant::now();
    let post = backend(&slack)
        .post_blocks(&thread(), "done", &section())
        .await;
    // No early retry into another 429: the caller hears when to retry.
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(
        post,
        Err(ChatError::RateLimited {
            platform: Platform::Slack,
            retry_after_secs: 31
        })
    );
    assert_eq!(slack.calls(), ["chat.postMessage"]);
}
