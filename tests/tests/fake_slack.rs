//! The fake Slack speaks Slack to slack-morphism, the client calvin uses:
//! each Web API method's answer deserialises into slack-morphism's strict
//! response type and its errors carry the contract's codes; each Socket
//! Mode frame has the shape slack-morphism reads; and slack-morphism's own
//! Socket Mode listener parses every frame (hello, events_api, interactive,
//! disconnect) into the right variant, acks, reconnects after a cut or a
//! `disconnect`, and gets what it missed.
//!
//! slack-morphism 2.31 does not export `SlackSocketModeEvent` (its
//! `models::socket_mode` module is shadowed by the listener's
//! `socket_mode`), so frames are checked twice: read raw, their payloads
//! parse as the exported `SlackPushEventCallback` / `SlackInteractionEvent`
//! and hello as the hello callback's event type; and through the real
//! listener, which parses each frame as `SlackSocketModeEvent` and would
//! report a `ProtocolError` for any frame that did not parse.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use calvin_tests::fake_slack::{
    APP_ID, AddedReaction, BOT_ID, BOT_USER_ID, Conversation, EnvelopeKind, EnvelopeStatus,
    FakeSlack, MAX_EMOJI_PER_MESSAGE, MAX_REACTIONS_PER_PERSON, SEARCHER_ID, SocketEnd, TEAM_ID,
};
use futures_util::{SinkExt, StreamExt};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{Value, json};
use slack_morphism::errors::SlackClientError;
use slack_morphism::prelude::*;
use tokio::net::TcpStream;
use tokio::sync::{Semaphore, mpsc};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

const TOKEN: &str = "xoxb-fake-slack-test";
const CHANNEL: &str = "C0GENERAL1";
const ADA: &str = "U0ADA00001";
const BOB: &str = "U0BOB00002";
/// Long enough for anything on loopback; a test fails rather than hangs.
const WAIT: Duration = Duration::from_secs(15);

type Connector = SlackClientHyperConnector<HttpConnector>;
type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

async fn fake() -> FakeSlack {
    let fake = FakeSlack::start(TOKEN, &[CHANNEL]).await;
    fake.add_user(ADA, "ada");
    fake.add_user(BOB, "bob");
    fake
}

fn client(fake: &FakeSlack) -> SlackClient<Connector> {
    let api_url = fake.api_url();
    let connector = SlackClientHyperConnector::with_connector(HttpConnector::new())
        .with_slack_api_url(api_url.trim_end_matches('/'));
    SlackClient::new(connector)
}

fn token(value: &str) -> SlackApiToken {
    SlackApiToken::new(SlackApiTokenValue::new(value.to_string()))
}

/// The Slack error code of a failed call.
fn code<T: std::fmt::Debug>(result: ClientResult<T>) -> String {
    match result {
        Err(SlackClientError::ApiError(error)) => error.code,
        other => panic!("expected a Slack error, got {other:?}"),
    }
}

fn channel(id: &str) -> SlackChannelId {
    SlackChannelId::new(id.to_string())
}

fn ts(value: &str) -> SlackTs {
    SlackTs::new(value.to_string())
}

fn text(value: &str) -> SlackMessageContent {
    SlackMessageContent::new().with_text(value.to_string())
}

fn approve_blocks() -> Vec<SlackBlock> {
    serde_json::from_value(json!([
        {"type": "section", "block_id": "ask", "text": {"type": "mrkdwn", "text": "Deploy?"}},
        {"type": "actions", "block_id": "choice", "elements": [
            {"type": "button", "action_id": "approve", "value": "yes",
             "text": {"type": "plain_text", "text": "Approve"}},
            {"type": "button", "action_id": "deny", "value": "no",
             "text": {"type": "plain_text", "text": "Deny"}}
        ]}
    ]))
    .expect("blocks")
}

fn modal() -> SlackView {
    serde_json::from_value(json!({
        "type": "modal",
        "callback_id": "deploy_reason",
        "private_metadata": "C0GENERAL1/1",
        "title": {"type": "plain_text", "text": "Why deploy?"},
        "submit": {"type": "plain_text", "text": "Send"},
        "blocks": [{
            "type": "input", "block_id": "reason",
            "label": {"type": "plain_text", "text": "Reason"},
            "element": {"type": "plain_text_input", "action_id": "text"}
        }]
    }))
    .expect("view")
}

/// The bot posts the approve/deny card; answers its ts.
async fn post_card(fake: &FakeSlack) -> String {
    let client = client(fake);
    let bot = token(TOKEN);
    let session = client.open_session(&bot);
    let request = SlackApiChatPostMessageRequest::new(
        channel(CHANNEL),
        text("Deploy?").with_blocks(approve_blocks()),
    );
    let posted = session.chat_post_message(&request).await.expect("post");
    posted.ts.0
}

/// The trigger id a click's envelope carries.
fn trigger_of(fake: &FakeSlack, envelope_id: &str) -> String {
    let payload = fake.envelope_payload(envelope_id).expect("payload");
    payload["trigger_id"]
        .as_str()
        .expect("trigger_id")
        .to_string()
}

// ---- Web API ----

#[tokio::test]
async fn auth_and_users_info_answer_slack_morphism() {
    let fake = fake().await;
    let client = client(&fake);
    let bot = token(TOKEN);
    let session = client.open_session(&bot);

    let auth = session.auth_test().await.expect("auth.test");
    assert_eq!(auth.user_id.0, BOT_USER_ID);
    assert_eq!(auth.team_id.0, TEAM_ID);

    let request = SlackApiUsersInfoRequest::new(SlackUserId::new(ADA.into()));
    let ada = session.users_info(&request).await.expect("users.info").user;
    assert_eq!(ada.name.as_deref(), Some("ada"));
    assert_eq!(ada.real_name.as_deref(), Some("ada"));
    let profile = ada.profile.expect("profile");
    assert_eq!(profile.display_name.as_deref(), Some("ada"));
    assert_eq!((ada.flags.is_bot, ada.deleted), (Some(false), Some(false)));

    let request = SlackApiUsersInfoRequest::new(SlackUserId::new(BOT_USER_ID.into()));
    let bot = session.users_info(&request).await.expect("bot").user;
    assert_eq!(bot.flags.is_bot, Some(true));

    let request = SlackApiUsersInfoRequest::new(SlackUserId::new("U0NOBODY99".into()));
    assert_eq!(code(session.users_info(&request).await), "user_not_found");
}

#[tokio::test]
async fn conversations_info_shows_what_the_bot_sees() {
    let fake = fake().await;
    fake.add_conversation(Conversation::private("C0SECRET01", "secret", &[ADA]));
    fake.add_conversation(Conversation::private("C0HIDDEN01", "hidden", &[ADA]).without_bot());
    fake.add_conversation(Conversation::public("C0OUTSIDE1", "outside").without_bot());
    fake.add_conversation(Conversation::im("D0ADA00001", ADA));
    let client = client(&fake);
    let bot = token(TOKEN);
    let session = client.open_session(&bot);
    let info = |id: &str| SlackApiConversationsInfoRequest::new(channel(id));

    let general = session
        .conversations_info(&info(CHANNEL))
        .await
        .expect("info");
    let general = general.channel;
    assert_eq!(general.name.as_deref(), Some("c0general1"));
    assert_eq!(general.flags.is_channel, Some(true));
    assert_eq!(general.flags.is_private, Some(false));
    assert_eq!(general.flags.is_member, Some(true));

    let secret = session.conversations_info(&info("C0SECRET01")).await;
    let secret = secret.expect("private, bot in it").channel;
    assert_eq!(secret.flags.is_private, Some(true));

    let outside = session.conversations_info(&info("C0OUTSIDE1")).await;
    assert_eq!(
        outside.expect("public: visible").channel.flags.is_member,
        Some(false)
    );

    let request = info("D0ADA00001").with_include_num_members(true);
    let im = session.conversations_info(&request).await.expect("IM");
    assert_eq!(im.channel.flags.is_im, Some(true));
    assert_eq!(im.channel.num_members, Some(2));
    let raw: Value = session
        .http_session_api
        .http_get(
            "conversations.info",
            &vec![("channel", Some(&"D0ADA00001".to_string()))],
            None,
        )
        .await
        .expect("raw IM");
    assert_eq!(raw["channel"]["user"], ADA);

    for hidden in ["C0HIDDEN01", "C0NOWHERE1"] {
        let answer = session.conversations_info(&info(hidden)).await;
        assert_eq!(code(answer), "channel_not_found", "{hidden}");
    }
}

#[tokio::test]
async fn conversations_members_come_in_pages() {
    let fake = fake().await;
    let people = ["U0P0000001", "U0P0000002", "U0P0000003", "U0P0000004"];
    fake.add_conversation(Conversation::private("C0TEAM0001", "team", &people));
    fake.add_conversation(Conversation::private("C0HIDDEN01", "hidden", &[ADA]).without_bot());
    let client = client(&fake);
    let bot = token(TOKEN);
    let session = client.open_session(&bot);
    let request = SlackApiConversationsMembersRequest::new()
        .with_channel(channel("C0TEAM0001"))
        .with_limit(2);

    let mut seen = Vec::new();
    let mut cursor = None;
    for _ in 0..3 {
        let page = session
            .conversations_members(&request.clone().opt_cursor(cursor.clone()))
            .await
            .expect("members");
        seen.extend(page.members.iter().map(|m| m.0.clone()));
        cursor = page.response_metadata.and_then(|m| m.next_cursor);
        if cursor.is_none() {
            break;
        }
    }
    let mut want: Vec<String> = people.iter().map(|p| p.to_string()).collect();
    want.push(BOT_USER_ID.to_string());
    assert_eq!(seen, want, "every member once, the last page says so");
    assert!(cursor.is_none());

    let whole = SlackApiConversationsMembersRequest::new().with_channel(channel("C0TEAM0001"));
    let whole = session
        .conversations_members(&whole)
        .await
        .expect("one page");
    assert_eq!(whole.members.len(), 5);

    let bad = request
        .clone()
        .with_cursor(SlackCursorId::new("not-a-cursor".into()));
    assert_eq!(
        code(session.conversations_members(&bad).await),
        "invalid_cursor"
    );
    let hidden = SlackApiConversationsMembersRequest::new().with_channel(channel("C0HIDDEN01"));
    let hidden = session.conversations_members(&hidden).await;
    assert_eq!(code(hidden), "channel_not_found");
}

#[tokio::test]
async fn conversations_replies_give_the_whole_thread() {
    let fake = fake().await;
    let parent = fake.add_message(CHANNEL, ADA, "the build is red", None);
    let first = fake.add_message(CHANNEL, BOB, "looking", Some(&parent));
    let client = client(&fake);
    let bot = token(TOKEN);
    let session = client.open_session(&bot);
    let post = SlackApiChatPostMessageRequest::new(channel(CHANNEL), text("fixed in #12"))
        .with_thread_ts(ts(&parent));
    let bots = session.chat_post_message(&post).await.expect("post").ts.0;
    let last = fake.add_message(CHANNEL, ADA, "thanks", Some(&first));
    fake.add_message(CHANNEL, ADA, "elsewhere", None);

    for asked in [&parent, &first, &last] {
        let request = SlackApiConversationsRepliesRequest::new(channel(CHANNEL), ts(asked));
        let thread = session
            .conversations_replies(&request)
            .await
            .expect("replies");
        let order: Vec<&str> = thread
            .messages
            .iter()
            .map(|m| m.origin.ts.0.as_str())
            .collect();
        assert_eq!(order, [&parent, &first, &bots, &last], "asked for {asked}");
        assert_eq!(thread.has_more, Some(false));
        let head = &thread.messages[0];
        assert_eq!(head.parent.reply_count, Some(3));
        assert_eq!(head.parent.latest_reply.as_ref(), Some(&ts(&last)));
        let from_bot = &thread.messages[2];
        assert_eq!(
            from_bot.sender.bot_id.as_ref().map(|b| b.0.as_str()),
            Some(BOT_ID)
        );
        assert_eq!(from_bot.origin.thread_ts, Some(ts(&parent)));
        assert_eq!(from_bot.content.text.as_deref(), Some("fixed in #12"));
    }

    let page =
        SlackApiConversationsRepliesRequest::new(channel(CHANNEL), ts(&parent)).with_limit(3);
    let one = session.conversations_replies(&page).await.expect("page 1");
    assert_eq!((one.messages.len(), one.has_more), (3, Some(true)));
    let cursor = one
        .response_metadata
        .and_then(|m| m.next_cursor)
        .expect("cursor");
    let two = session
        .conversations_replies(&page.clone().with_cursor(cursor))
        .await
        .expect("page 2");
    assert_eq!(two.messages[0].origin.ts.0, last);
    assert_eq!(two.has_more, Some(false));

    let since = SlackApiConversationsRepliesRequest::new(channel(CHANNEL), ts(&parent))
        .with_oldest(ts(&bots));
    let since = session.conversations_replies(&since).await.expect("oldest");
    let order: Vec<&str> = since
        .messages
        .iter()
        .map(|m| m.origin.ts.0.as_str())
        .collect();
    assert_eq!(
        order,
        [&parent, &last],
        "the parent, then replies after oldest"
    );

    let unknown = SlackApiConversationsRepliesRequest::new(channel(CHANNEL), ts("1.000001"));
    assert_eq!(
        code(session.conversations_replies(&unknown).await),
        "thread_not_found"
    );
    let nowhere = SlackApiConversationsRepliesRequest::new(channel("C0NOWHERE1"), ts(&parent));
    assert_eq!(
        code(session.conversations_replies(&nowhere).await),
        "channel_not_found"
    );
}

#[tokio::test]
async fn post_message_needs_the_bot_and_records_every_argument() {
    let fake = fake().await;
    fake.add_conversation(Conversation::public("C0OUTSIDE1", "outside").without_bot());
    fake.add_conversation(Conversation::im("D0HIDDEN01", ADA).without_bot());
    let client = client(&fake);
    let bot = token(TOKEN);
    let session = client.open_session(&bot);

    let request = SlackApiChatPostMessageRequest::new(channel(CHANNEL), text("<#C0GENERAL1>"))
        .with_parse("full".into())
        .with_link_names(true)
        .with_unfurl_links(false)
        .with_unfurl_media(false);
    let posted = session.chat_post_message(&request).await.expect("post");
    let recorded = &fake.messages()[0];
    assert_eq!(recorded.ts, posted.ts.0);
    assert_eq!(recorded.arg("parse"), Some(&json!("full")));
    assert_eq!(recorded.arg("link_names"), Some(&json!(true)));
    assert_eq!(recorded.arg("unfurl_links"), Some(&json!(false)));
    assert_eq!(recorded.arg("unfurl_media"), Some(&json!(false)));
    assert_eq!(recorded.arg("token"), None);

    let outside = SlackApiChatPostMessageRequest::new(channel("C0OUTSIDE1"), text("hi"));
    assert_eq!(
        code(session.chat_post_message(&outside).await),
        "not_in_channel"
    );
    let hidden = SlackApiChatPostMessageRequest::new(channel("D0HIDDEN01"), text("hi"));
    assert_eq!(
        code(session.chat_post_message(&hidden).await),
        "channel_not_found"
    );
    assert_eq!(fake.messages().len(), 1);
}

#[tokio::test]
async fn chat_get_permalink_points_into_the_thread() {
    let fake = fake().await;
    let parent = fake.add_message(CHANNEL, ADA, "question", None);
    let reply = fake.add_message(CHANNEL, BOB, "answer", Some(&parent));
    let client = client(&fake);
    let bot = token(TOKEN);
    let session = client.open_session(&bot);
    let link = |at: &str| SlackApiChatGetPermalinkRequest::new(channel(CHANNEL), ts(at));

    let top = session
        .chat_get_permalink(&link(&parent))
        .await
        .expect("permalink");
    let digits = parent.replace('.', "");
    let want = format!("https://fake-slack.test/archives/{CHANNEL}/p{digits}");
    assert_eq!(top.permalink.as_str(), want);
    assert_eq!(top.channel.0, CHANNEL);

    let threaded = session
        .chat_get_permalink(&link(&reply))
        .await
        .expect("reply");
    let digits = reply.replace('.', "");
    let want = format!(
        "https://fake-slack.test/archives/{CHANNEL}/p{digits}?thread_ts={parent}&cid={CHANNEL}"
    );
    assert_eq!(threaded.permalink.as_str(), want);

    let missing = session.chat_get_permalink(&link("1.000001")).await;
    assert_eq!(code(missing), "message_not_found");
}

#[tokio::test]
async fn chat_update_changes_only_the_bots_messages() {
    let fake = fake().await;
    let card = post_card(&fake).await;
    let theirs = fake.add_message(CHANNEL, ADA, "mine", None);
    let client = client(&fake);
    let bot = token(TOKEN);
    let session = client.open_session(&bot);

    let update = SlackApiChatUpdateRequest::new(channel(CHANNEL), text("Deployed"), ts(&card));
    let updated = session.chat_update(&update).await.expect("update");
    assert_eq!(
        (updated.channel.0.as_str(), updated.ts.0.as_str()),
        (CHANNEL, card.as_str())
    );
    assert_eq!(updated.message.content.text.as_deref(), Some("Deployed"));
    assert!(updated.message.edited.is_some());
    let recorded = &fake.updates()[0];
    assert_eq!(
        (recorded.ts.as_str(), recorded.text.as_deref()),
        (card.as_str(), Some("Deployed"))
    );

    let request = SlackApiConversationsRepliesRequest::new(channel(CHANNEL), ts(&card));
    let stored = session
        .conversations_replies(&request)
        .await
        .expect("replies");
    let stored = &stored.messages[0];
    assert_eq!(stored.content.text.as_deref(), Some("Deployed"));
    assert_eq!(
        stored.content.blocks.as_ref().map(Vec::len),
        Some(2),
        "blocks kept"
    );

    let not_ours = SlackApiChatUpdateRequest::new(channel(CHANNEL), text("x"), ts(&theirs));
    assert_eq!(
        code(session.chat_update(&not_ours).await),
        "cant_update_message"
    );
    let missing = SlackApiChatUpdateRequest::new(channel(CHANNEL), text("x"), ts("1.000001"));
    assert_eq!(
        code(session.chat_update(&missing).await),
        "message_not_found"
    );
    assert_eq!(fake.updates().len(), 1);
}

#[tokio::test]
async fn chat_post_ephemeral_goes_to_someone_who_sees_the_channel() {
    let fake = fake().await;
    fake.add_conversation(Conversation::private("C0SECRET01", "secret", &[ADA]));
    let client = client(&fake);
    let bot = token(TOKEN);
    let session = client.open_session(&bot);
    let to = |c: &str, user: &str| {
        SlackApiChatPostEphemeralRequest::new(
            channel(c),
            SlackUserId::new(user.into()),
            text("psst"),
        )
    };

    session
        .chat_post_ephemeral(&to(CHANNEL, BOB))
        .await
        .expect("public: anyone");
    session
        .chat_post_ephemeral(&to("C0SECRET01", ADA))
        .await
        .expect("a member");
    let raw: Value = session
        .http_session_api
        .http_post(
            "chat.postEphemeral",
            &json!({"channel": CHANNEL, "user": ADA, "text": "hi"}),
            None,
        )
        .await
        .expect("raw");
    assert!(raw["message_ts"].is_string(), "{raw}");

    let outsider = session.chat_post_ephemeral(&to("C0SECRET01", BOB)).await;
    assert_eq!(code(outsider), "user_not_in_channel");
    let nobody = session
        .chat_post_ephemeral(&to(CHANNEL, "U0NOBODY99"))
        .await;
    assert_eq!(code(nobody), "user_not_in_channel");

    let sent = fake.ephemerals();
    let sent: Vec<(&str, &str)> = sent
        .iter()
        .map(|e| (e.channel.as_str(), e.user.as_str()))
        .collect();
    assert_eq!(sent, [(CHANNEL, BOB), ("C0SECRET01", ADA), (CHANNEL, ADA)]);
}

#[tokio::test]
async fn conversations_open_makes_one_im_per_person() {
    let fake = fake().await;
    let client = client(&fake);
    let bot = token(TOKEN);
    let session = client.open_session(&bot);
    let open = |users: &[&str]| {
        SlackApiConversationsOpenRequest::new().with_users(
            users
                .iter()
                .map(|u| SlackUserId::new(u.to_string()))
                .collect(),
        )
    };

    let first = session
        .conversations_open(&open(&[ADA]))
        .await
        .expect("open");
    let id = first.channel.id.0.clone();
    assert!(id.starts_with('D'), "{id}");
    assert_eq!(first.already_open, None);
    let again = session
        .conversations_open_full(&open(&[ADA]))
        .await
        .expect("again");
    assert_eq!(again.channel.id.0, id);
    assert_eq!(again.channel.flags.is_im, Some(true));
    assert_eq!(again.already_open, Some(true));
    let im = fake.conversation(&id).expect("stored");
    assert_eq!(im.members, [ADA, BOT_USER_ID]);

    let post = SlackApiChatPostMessageRequest::new(channel(&id), text("hello"));
    session
        .chat_post_message(&post)
        .await
        .expect("post into the IM");
    let other = session
        .conversations_open(&open(&[BOB]))
        .await
        .expect("bob");
    assert_ne!(other.channel.id.0, id);

    let nobody = session.conversations_open(&open(&["U0NOBODY99"])).await;
    assert_eq!(code(nobody), "user_not_found");
    let nothing = session
        .conversations_open(&SlackApiConversationsOpenRequest::new())
        .await;
    assert_eq!(code(nothing), "users_list_not_supplied");
}

#[tokio::test]
async fn views_open_exchanges_a_trigger_once() {
    let fake = fake().await;
    let card = post_card(&fake).await;
    let click = fake.click(ADA, CHANNEL, &card, "approve").expect("click");
    let trigger = trigger_of(&fake, &click);
    let client = client(&fake);
    let bot = token(TOKEN);
    let session = client.open_session(&bot);
    let open = |trigger: &str| {
        SlackApiViewsOpenRequest::new(SlackTriggerId::new(trigger.to_string()), modal())
    };

    let opened = session
        .views_open(&open(&trigger))
        .await
        .expect("views.open");
    let params = &opened.view.state_params;
    assert!(params.id.0.starts_with('V'), "{:?}", params.id);
    assert_eq!(params.team_id.0, TEAM_ID);
    assert_eq!(params.app_id.as_ref().map(|a| a.0.as_str()), Some(APP_ID));
    assert!(!params.hash.is_empty());
    match &opened.view.view {
        SlackView::Modal(modal) => {
            let title = serde_json::to_value(&modal.title).expect("title");
            assert_eq!(title["text"], "Why deploy?")
        }
        other => panic!("not a modal: {other:?}"),
    }
    let views = fake.views();
    assert_eq!(
        (views[0].id.as_str(), views[0].user.as_str()),
        (params.id.0.as_str(), ADA)
    );

    assert_eq!(
        code(session.views_open(&open(&trigger)).await),
        "exchanged_trigger_id"
    );
    let made_up = session.views_open(&open("12345.67890.abcdef")).await;
    assert_eq!(code(made_up), "invalid_trigger_id");
    assert_eq!(
        code(session.views_open(&open("nonsense")).await),
        "invalid_trigger_id"
    );

    let fresh = fake.click(BOB, CHANNEL, &card, "deny").expect("click");
    let no_title = json!({"type": "modal", "blocks": []});
    let refused: ClientResult<Value> = session
        .http_session_api
        .http_post(
            "views.open",
            &json!({"trigger_id": trigger_of(&fake, &fresh), "view": no_title}),
            None,
        )
        .await;
    match refused {
        Err(SlackClientError::ApiError(error)) => {
            assert_eq!(error.code, "invalid_arguments");
            let errors = error.errors.unwrap_or_default().join(" ");
            assert!(errors.contains("title"), "{errors}");
        }
        other => panic!("expected invalid_arguments, got {other:?}"),
    }
    let still_good = session.views_open(&open(&trigger_of(&fake, &fresh))).await;
    assert!(
        still_good.is_ok(),
        "a refused view does not use the trigger up"
    );
    assert_eq!(
        fake.click(ADA, CHANNEL, &card, "nope"),
        Err(format!("no button \"nope\" in message {card}"))
    );
}

#[tokio::test]
async fn views_open_refuses_an_expired_trigger() {
    let fake = fake().await;
    // Every trigger is already too old.
    fake.set_trigger_ttl(Duration::ZERO);
    let card = post_card(&fake).await;
    let click = fake.click(ADA, CHANNEL, &card, "approve").expect("click");
    let trigger = SlackTriggerId::new(trigger_of(&fake, &click));
    let client = client(&fake);
    let bot = token(TOKEN);
    let session = client.open_session(&bot);
    let late = session
        .views_open(&SlackApiViewsOpenRequest::new(trigger, modal()))
        .await;
    assert_eq!(code(late), "expired_trigger_id");
    assert!(fake.views().is_empty());
}

#[tokio::test]
async fn apps_connections_open_wants_the_app_token_and_a_ticket_opens_once() {
    let fake = fake().await;
    let client = client(&fake);
    let request = SlackApiAppsConnectionOpenRequest::new();
    let bot = client
        .open_session(&token(TOKEN))
        .apps_connections_open(&request)
        .await;
    assert_eq!(code(bot), "not_allowed_token_type");
    let wrong = client
        .open_session(&token("xapp-wrong"))
        .apps_connections_open(&request)
        .await;
    assert_eq!(code(wrong), "invalid_auth");
    let app_token = token(&fake.app_token());
    let app = client.open_session(&app_token);
    let on_bot_method = app.auth_test().await;
    assert_eq!(code(on_bot_method), "not_allowed_token_type");

    let opened = app.apps_connections_open(&request).await.expect("open");
    let url = opened.url.0.to_string();
    assert!(url.starts_with("ws://127.0.0.1:"), "{url}");
    assert!(url.ends_with(&format!("&app_id={APP_ID}")), "{url}");
    let (ws, _) = tokio_tungstenite::connect_async(&url)
        .await
        .expect("first use");
    match tokio_tungstenite::connect_async(&url).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(refused)) => {
            assert_eq!(refused.status(), 401)
        }
        other => panic!("a used ticket must be refused, got {:?}", other.map(|_| ())),
    }
    let made_up = url.replace("ticket=", "ticket=9");
    assert!(tokio_tungstenite::connect_async(&made_up).await.is_err());
    drop(ws);
}

#[tokio::test]
async fn unknown_methods_stay_unknown() {
    let fake = fake().await;
    let client = client(&fake);
    let bot = token(TOKEN);
    let session = client.open_session(&bot);
    let answer: ClientResult<Value> = session
        .http_session_api
        .http_post("chat.scheduleMessage", &json!({"channel": CHANNEL}), None)
        .await;
    assert_eq!(code(answer), "unknown_method");
}

/// conversations.history's page: the messages' ts, `has_more`, the cursor.
async fn history_page(
    session: &SlackClientSession<'_, Connector>,
    request: &SlackApiConversationsHistoryRequest,
) -> (
    Vec<SlackHistoryMessage>,
    Option<bool>,
    Option<SlackCursorId>,
) {
    let page = session
        .conversations_history(request)
        .await
        .expect("history");
    let cursor = page.response_metadata.and_then(|m| m.next_cursor);
    let cursor = cursor.filter(|c| !c.0.is_empty());
    (page.messages, page.has_more, cursor)
}

fn ts_of(messages: &[SlackHistoryMessage]) -> Vec<&str> {
    messages.iter().map(|m| m.origin.ts.0.as_str()).collect()
}

#[tokio::test]
async fn conversations_history_is_newest_first_in_pages() {
    let fake = fake().await;
    let first = fake.add_message(CHANNEL, ADA, "one", None);
    fake.add_message(CHANNEL, BOB, "a reply", Some(&first));
    let client = client(&fake);
    let bot = token(TOKEN);
    let session = client.open_session(&bot);
    let post = SlackApiChatPostMessageRequest::new(channel(CHANNEL), text("two"));
    let second = session.chat_post_message(&post).await.expect("post").ts.0;
    let third = fake.add_message(CHANNEL, ADA, "three", None);

    let request = SlackApiConversationsHistoryRequest::new()
        .with_channel(channel(CHANNEL))
        .with_limit(2);
    let (page, has_more, cursor) = history_page(&session, &request).await;
    assert_eq!(ts_of(&page), [&third, &second], "newest first, no replies");
    assert_eq!(has_more, Some(true));
    let from_ada = &page[0];
    assert_eq!(from_ada.sender.user, Some(SlackUserId::new(ADA.into())));
    assert_eq!(from_ada.sender.bot_id, None);
    let from_bot = &page[1];
    assert_eq!(
        from_bot.sender.user,
        Some(SlackUserId::new(BOT_USER_ID.into()))
    );
    assert_eq!(from_bot.sender.bot_id, Some(SlackBotId::new(BOT_ID.into())));
    assert_eq!(from_bot.content.text.as_deref(), Some("two"));

    let next = request.clone().with_cursor(cursor.expect("a cursor"));
    let (page, has_more, cursor) = history_page(&session, &next).await;
    assert_eq!(ts_of(&page), [&first]);
    assert_eq!((has_more, cursor), (Some(false), None));
    assert_eq!(page[0].parent.reply_count, Some(1));

    let since = SlackApiConversationsHistoryRequest::new()
        .with_channel(channel(CHANNEL))
        .with_oldest(ts(&first));
    let (page, _, _) = history_page(&session, &since).await;
    assert_eq!(ts_of(&page), [&third, &second], "after oldest");
    let (page, _, _) = history_page(&session, &since.with_inclusive(true)).await;
    assert_eq!(ts_of(&page), [&third, &second, &first], "inclusive");
    let before = SlackApiConversationsHistoryRequest::new()
        .with_channel(channel(CHANNEL))
        .with_latest(ts(&third));
    let (page, _, _) = history_page(&session, &before).await;
    assert_eq!(ts_of(&page), [&second, &first], "before latest");

    let bad_cursor = request.with_cursor(SlackCursorId::new("garbage".into()));
    let refused = session.conversations_history(&bad_cursor).await;
    assert_eq!(code(refused), "invalid_cursor");
    fake.add_conversation(Conversation::public("C0OUTSIDE1", "outside").without_bot());
    fake.add_conversation(Conversation::private("C0HIDDEN01", "hidden", &[ADA]).without_bot());
    fake.add_conversation(Conversation::im("D0BOB00001", BOB).without_bot());
    for (id, error) in [
        ("C0OUTSIDE1", "not_in_channel"),
        ("C0HIDDEN01", "channel_not_found"),
        ("D0BOB00001", "channel_not_found"),
        ("C0NOWHERE1", "channel_not_found"),
    ] {
        let request = SlackApiConversationsHistoryRequest::new().with_channel(channel(id));
        let refused = session.conversations_history(&request).await;
        assert_eq!(code(refused), error, "{id}");
    }
}

/// search.messages with `token`, as raw JSON.
async fn search(
    client: &SlackClient<Connector>,
    token_value: &str,
    args: Value,
) -> ClientResult<Value> {
    let token = token(token_value);
    let session = client.open_session(&token);
    session
        .http_session_api
        .http_post("search.messages", &args, None)
        .await
}

fn matched(answer: &Value) -> Vec<(&str, &str)> {
    let matches = answer["messages"]["matches"].as_array().expect("matches");
    matches
        .iter()
        .map(|m| {
            let channel = m["channel"]["id"].as_str().expect("channel id");
            (channel, m["text"].as_str().expect("text"))
        })
        .collect()
}

#[tokio::test]
async fn search_messages_wants_the_user_token_and_sees_what_its_person_sees() {
    let fake = fake().await;
    let searcher = fake.user_token();
    assert!(searcher.starts_with("xoxp-"), "{searcher}");
    fake.add_conversation(
        Conversation::private("C0SECRET01", "secret", &[SEARCHER_ID, ADA]).without_bot(),
    );
    fake.add_conversation(Conversation::private("C0ADAONLY1", "ada-only", &[ADA]));
    fake.add_conversation(Conversation::public("C0OUTSIDE1", "outside").without_bot());
    let client = client(&fake);
    let bot = token(TOKEN);
    let session = client.open_session(&bot);

    let parent = fake.add_message(CHANNEL, ADA, "Deploy the API?", None);
    let post = SlackApiChatPostMessageRequest::new(channel(CHANNEL), text("api deploy started"))
        .with_thread_ts(ts(&parent));
    let bots = session.chat_post_message(&post).await.expect("post").ts.0;
    fake.add_message("C0SECRET01", ADA, "secret api deploy", None);
    fake.add_message("C0ADAONLY1", ADA, "hidden api deploy", None);
    fake.add_message("C0OUTSIDE1", BOB, "outside: deploy of the api", None);
    fake.add_message(CHANNEL, BOB, "deploy only", None);

    let answer = search(&client, &searcher, json!({"query": "deploy API"}))
        .await
        .expect("search");
    assert_eq!(answer["ok"], true);
    assert_eq!(answer["query"], "deploy API");
    assert_eq!(
        matched(&answer),
        [
            ("C0OUTSIDE1", "outside: deploy of the api"),
            ("C0SECRET01", "secret api deploy"),
            (CHANNEL, "api deploy started"),
            (CHANNEL, "Deploy the API?"),
        ],
        "newest first, in every conversation the searcher reads"
    );
    let messages = &answer["messages"];
    assert_eq!(messages["total"], 4);
    assert_eq!(
        messages["paging"],
        json!({"count": 20, "total": 4, "page": 1, "pages": 1})
    );
    let secret = &messages["matches"][1];
    assert_eq!(secret["channel"]["is_private"], true);
    assert_eq!(secret["channel"]["name"], "secret");
    assert_eq!(
        (secret["user"].as_str(), secret["username"].as_str()),
        (Some(ADA), Some("ada"))
    );
    assert_eq!(secret["team"], TEAM_ID);
    let reply = &messages["matches"][2];
    assert_eq!(reply["ts"], bots.as_str());
    assert_eq!(reply["user"], BOT_USER_ID);
    assert_eq!(reply["bot_id"], BOT_ID);
    let permalink = reply["permalink"].as_str().expect("permalink");
    let wanted = format!(
        "/archives/{CHANNEL}/p{}?thread_ts={parent}",
        bots.replace('.', "")
    );
    assert!(permalink.contains(&wanted), "{permalink}");
    assert!(messages["matches"][3].get("bot_id").is_none());

    let asc = json!({"query": "deploy api", "sort_dir": "asc", "count": 3, "page": 2});
    let answer = search(&client, &searcher, asc).await.expect("page 2");
    assert_eq!(
        matched(&answer),
        [("C0OUTSIDE1", "outside: deploy of the api")]
    );
    assert_eq!(answer["messages"]["paging"]["pages"], 2);

    fake.set_user_token_user(ADA);
    let answer = search(&client, &searcher, json!({"query": "hidden"}))
        .await
        .expect("as ada");
    assert_eq!(matched(&answer), [("C0ADAONLY1", "hidden api deploy")]);

    let refused = search(&client, TOKEN, json!({"query": "deploy"})).await;
    assert_eq!(code(refused), "not_allowed_token_type", "the bot token");
    let refused = search(&client, &fake.app_token(), json!({"query": "deploy"})).await;
    assert_eq!(code(refused), "not_allowed_token_type", "the app token");
    let refused = search(&client, &searcher, json!({"query": "  "})).await;
    assert_eq!(code(refused), "no_query");
    let user = token(&searcher);
    let on_bot_method = client.open_session(&user).auth_test().await;
    assert_eq!(code(on_bot_method), "not_allowed_token_type");
}

// ---- Socket Mode frames, read raw ----

async fn connect_raw(fake: &FakeSlack) -> Ws {
    let client = client(fake);
    let app_token = token(&fake.app_token());
    let app = client.open_session(&app_token);
    let request = SlackApiAppsConnectionOpenRequest::new();
    let opened = app.apps_connections_open(&request).await.expect("open");
    let (ws, _) = tokio_tungstenite::connect_async(opened.url.0.as_str())
        .await
        .expect("connect");
    ws
}

/// The next text frame, as JSON.
async fn next_frame(ws: &mut Ws) -> Value {
    loop {
        let frame = tokio::time::timeout(WAIT, ws.next()).await;
        match frame
            .expect("a frame in time")
            .expect("open")
            .expect("frame")
        {
            Message::Text(text) => return serde_json::from_str(text.as_str()).expect("JSON"),
            Message::Ping(_) | Message::Pong(_) => continue,
            other => panic!("unexpected frame {other:?}"),
        }
    }
}

/// The next frame, an envelope of `kind` for `envelope_id`: its payload.
async fn next_envelope(ws: &mut Ws, kind: &str, envelope_id: &str) -> Value {
    let frame = next_frame(ws).await;
    assert_eq!(frame["type"], kind, "{frame}");
    assert_eq!(frame["envelope_id"], envelope_id, "{frame}");
    assert!(frame["accepts_response_payload"].is_boolean(), "{frame}");
    frame["payload"].clone()
}

/// `json` as the event type of slack-morphism's hello callback
/// (`SlackSocketModeHelloEvent`, which it does not export by name).
fn as_hello_event<E>(
    _callback: &(dyn SlackSocketModeListenerCallback<Connector, E, ()> + Send + Sync),
    json: Value,
) -> E
where
    E: serde::de::DeserializeOwned + Send + Sync + 'static,
{
    serde_json::from_value(json).expect("a SlackSocketModeHelloEvent")
}

async fn ack(ws: &mut Ws, envelope_id: &str, payload: Option<Value>) {
    let mut frame = json!({ "envelope_id": envelope_id });
    if let Some(payload) = payload {
        frame["payload"] = payload;
    }
    ws.send(Message::text(frame.to_string()))
        .await
        .expect("ack");
}

#[tokio::test]
async fn every_frame_has_the_shape_slack_morphism_reads() {
    let fake = fake().await;
    let mut ws = connect_raw(&fake).await;

    let hello = next_frame(&mut ws).await;
    assert_eq!(hello["type"], "hello");
    let callbacks = SlackSocketModeListenerCallbacks::<Connector>::new();
    let parsed = as_hello_event(&*callbacks.hello_callback, hello.clone());
    assert_eq!(parsed.num_connections, 1);
    assert_eq!(parsed.connection_info.app_id.0, APP_ID);
    assert_eq!(parsed.debug_info.host, "fake-slack-1");
    assert_eq!(parsed.debug_info.approximate_connection_time, Some(18060));
    fake.wait_for_sockets(1, WAIT).await.expect("socket");

    let parent = fake.add_message(CHANNEL, BOB, "deploy?", None);
    let (message_ts, envelope) = fake.message_event(CHANNEL, ADA, "go ahead", Some(&parent));
    let payload = next_envelope(&mut ws, "events_api", &envelope).await;
    let callback: SlackPushEventCallback = serde_json::from_value(payload).expect("push");
    assert!(callback.event_id.0.starts_with("Ev"));
    assert_eq!(callback.api_app_id.0, APP_ID);
    let SlackEventCallbackBody::Message(message) = &callback.event else {
        panic!("expected a message body: {callback:?}");
    };
    assert_eq!(message.origin.ts.0, message_ts);
    assert_eq!(message.origin.thread_ts, Some(ts(&parent)));
    assert_eq!(message.origin.channel, Some(channel(CHANNEL)));
    let channel_type = message.origin.channel_type.as_ref().map(|t| t.0.as_str());
    assert_eq!(channel_type, Some("channel"));
    assert_eq!(
        message.sender.user.as_ref().map(|u| u.0.as_str()),
        Some(ADA)
    );
    let content = message.content.as_ref().expect("content");
    assert_eq!(content.text.as_deref(), Some("go ahead"));
    ack(&mut ws, &envelope, None).await;
    let acked = fake.wait_ack(&envelope, WAIT).await.expect("ack");
    assert!(acked.payload.is_none());

    let envelope = fake.reaction_event(BOB, "thumbsup", CHANNEL, &message_ts);
    let payload = next_envelope(&mut ws, "events_api", &envelope).await;
    let callback: SlackPushEventCallback = serde_json::from_value(payload).expect("push");
    let SlackEventCallbackBody::ReactionAdded(reaction) = &callback.event else {
        panic!("expected reaction_added: {callback:?}");
    };
    assert_eq!(
        (reaction.user.0.as_str(), reaction.reaction.0.as_str()),
        (BOB, "thumbsup")
    );
    assert_eq!(reaction.item_user.as_ref().map(|u| u.0.as_str()), Some(ADA));
    match &reaction.item {
        SlackReactionsItem::Message(item) => assert_eq!(item.origin.ts.0, message_ts),
        other => panic!("expected a message item: {other:?}"),
    }
    ack(&mut ws, &envelope, None).await;

    let card = post_card(&fake).await;
    let envelope = fake.click(ADA, CHANNEL, &card, "approve").expect("click");
    let payload = next_envelope(&mut ws, "interactive", &envelope).await;
    let event: SlackInteractionEvent = serde_json::from_value(payload).expect("interaction");
    let SlackInteractionEvent::BlockActions(click) = event else {
        panic!("expected block_actions: {event:?}");
    };
    let action = &click.actions.as_ref().expect("actions")[0];
    assert_eq!(action.action_id.0, "approve");
    assert_eq!(action.value.as_deref(), Some("yes"));
    assert_eq!(
        action.block_id.as_ref().map(|b| b.0.as_str()),
        Some("choice")
    );
    assert_eq!(click.user.as_ref().map(|u| u.id.0.as_str()), Some(ADA));
    match &click.container {
        SlackInteractionActionContainer::Message(container) => {
            assert_eq!(container.message_ts.0, card)
        }
        other => panic!("expected a message container: {other:?}"),
    }
    let clicked_on = click.message.as_ref().expect("message");
    let bot = clicked_on.sender.bot_id.as_ref().map(|b| b.0.as_str());
    assert_eq!(bot, Some(BOT_ID));
    ack(&mut ws, &envelope, None).await;

    let client = client(&fake);
    let bot_token = token(TOKEN);
    let session = client.open_session(&bot_token);
    let open = SlackApiViewsOpenRequest::new(click.trigger_id.clone(), modal());
    let opened = session.views_open(&open).await.expect("views.open");
    let view_id = opened.view.state_params.id;
    let wrong_user = fake.submit(BOB, &view_id.0, &[("reason", "text", "x")]);
    assert!(wrong_user.is_err(), "the modal is Ada's");
    let typed = [("reason", "text", "tests are green")];
    let envelope = fake.submit(ADA, &view_id.0, &typed).expect("submit");
    let frame = next_frame(&mut ws).await;
    assert_eq!(frame["accepts_response_payload"], true);
    let event: SlackInteractionEvent =
        serde_json::from_value(frame["payload"].clone()).expect("interaction");
    let SlackInteractionEvent::ViewSubmission(submission) = event else {
        panic!("expected view_submission: {event:?}");
    };
    assert_eq!(submission.view.state_params.id, view_id);
    let values = submission.view.state_params.state.expect("state").values;
    let block = &values[&SlackBlockId::new("reason".into())];
    let value = &block[&SlackActionId::new("text".into())];
    assert_eq!(value.value.as_deref(), Some("tests are green"));
    let errors = json!({"response_action": "errors", "errors": {"reason": "too short"}});
    ack(&mut ws, &envelope, Some(errors.clone())).await;
    let acked = fake.wait_ack(&envelope, WAIT).await.expect("ack");
    assert_eq!(acked.payload, Some(errors));
    assert!(acked.delay < Duration::from_secs(3));

    fake.send_disconnect("refresh_requested");
    let disconnect = next_frame(&mut ws).await;
    let want = json!({
        "type": "disconnect",
        "reason": "refresh_requested",
        "debug_info": {"host": "fake-slack-1"},
    });
    assert_eq!(disconnect, want);
    assert_eq!(fake.socket_count(), 0, "told to go: no new envelopes");
    ws.close(None).await.expect("close");
    let ended = |f: &FakeSlack| f.sockets()[0].ended.is_some();
    fake.wait_until("the socket's end", WAIT, ended)
        .await
        .expect("closed");
    let end = fake.sockets()[0].ended.map(|(_, end)| end);
    assert_eq!(end, Some(SocketEnd::ClientClosed));
}

#[tokio::test]
async fn reactions_add_stores_the_reaction_and_sends_the_bots_own_event() {
    let fake = fake().await;
    let mut ws = connect_raw(&fake).await;
    assert_eq!(next_frame(&mut ws).await["type"], "hello");
    fake.wait_for_sockets(1, WAIT).await.expect("socket");
    let message_ts = fake.add_message(CHANNEL, ADA, "deploy?", None);
    let client = client(&fake);
    let bot = token(TOKEN);
    let session = client.open_session(&bot);
    let react = |name: &str, channel_id: &str, at: &str| {
        SlackApiReactionsAddRequest::new(
            channel(channel_id),
            SlackReactionName::new(name.into()),
            ts(at),
        )
    };

    let added = session
        .reactions_add(&react("eyes", CHANNEL, &message_ts))
        .await;
    added.expect("reactions.add");
    let frame = next_frame(&mut ws).await;
    assert_eq!(frame["type"], "events_api", "{frame}");
    let envelope = frame["envelope_id"]
        .as_str()
        .expect("envelope id")
        .to_string();
    let callback: SlackPushEventCallback =
        serde_json::from_value(frame["payload"].clone()).expect("push");
    let SlackEventCallbackBody::ReactionAdded(reaction) = &callback.event else {
        panic!("expected reaction_added: {callback:?}");
    };
    assert_eq!(
        (reaction.user.0.as_str(), reaction.reaction.0.as_str()),
        (BOT_USER_ID, "eyes"),
        "the bot's own reaction comes back as an event"
    );
    assert_eq!(reaction.item_user.as_ref().map(|u| u.0.as_str()), Some(ADA));
    match &reaction.item {
        SlackReactionsItem::Message(item) => assert_eq!(item.origin.ts.0, message_ts),
        other => panic!("expected a message item: {other:?}"),
    }
    ack(&mut ws, &envelope, None).await;
    fake.wait_ack(&envelope, WAIT).await.expect("ack");

    fake.reaction_event(BOB, "eyes", CHANNEL, &message_ts);
    fake.reaction_event(BOB, "+1", CHANNEL, &message_ts);
    let people = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
    assert_eq!(
        fake.reactions(CHANNEL, &message_ts),
        [
            ("eyes".to_string(), people(&[BOT_USER_ID, BOB])),
            ("+1".to_string(), people(&[BOB])),
        ]
    );
    let thread = SlackApiConversationsRepliesRequest::new(channel(CHANNEL), ts(&message_ts));
    let thread = session
        .conversations_replies(&thread)
        .await
        .expect("replies");
    let shown = thread.messages[0]
        .content
        .reactions
        .clone()
        .expect("reactions");
    assert_eq!(shown[0].name.0, "eyes");
    assert_eq!(shown[0].count, 2);
    assert_eq!(shown[0].users[1].0, BOB);

    fake.add_conversation(Conversation::public("C0OUTSIDE1", "outside").without_bot());
    fake.add_conversation(Conversation::private("C0HIDDEN01", "hidden", &[ADA]).without_bot());
    for (request, error) in [
        (react("eyes", CHANNEL, &message_ts), "already_reacted"),
        (react(":eyes:", CHANNEL, &message_ts), "invalid_name"),
        (
            react("eyes", CHANNEL, "1700000000.000001"),
            "message_not_found",
        ),
        (react("eyes", "C0OUTSIDE1", &message_ts), "not_in_channel"),
        (
            react("eyes", "C0HIDDEN01", &message_ts),
            "channel_not_found",
        ),
    ] {
        let refused = session.reactions_add(&request).await;
        assert_eq!(code(refused), error, "{request:?}");
    }
    let skin = react("thumbsup::skin-tone-3", CHANNEL, &message_ts);
    session.reactions_add(&skin).await.expect("a skin tone");

    let calls = fake.reactions_added();
    let call = |name: &str, error: Option<&str>| AddedReaction {
        channel: CHANNEL.to_string(),
        name: name.to_string(),
        timestamp: message_ts.clone(),
        error: error.map(str::to_string),
    };
    assert_eq!(calls.len(), 7);
    assert_eq!(calls[0], call("eyes", None));
    assert_eq!(calls[1], call("eyes", Some("already_reacted")));
    assert_eq!(calls[2], call(":eyes:", Some("invalid_name")));
    assert_eq!(calls[6], call("thumbsup::skin-tone-3", None));
}

#[tokio::test]
async fn reactions_add_refuses_one_more_than_the_caps() {
    let fake = fake().await;
    let client = client(&fake);
    let bot = token(TOKEN);
    let session = client.open_session(&bot);
    let react = |name: String, at: &str| {
        SlackApiReactionsAddRequest::new(channel(CHANNEL), SlackReactionName::new(name), ts(at))
    };

    let crowded = fake.add_message(CHANNEL, ADA, "vote", None);
    for i in 0..MAX_EMOJI_PER_MESSAGE {
        fake.reaction_event(BOB, &format!("e{i}"), CHANNEL, &crowded);
    }
    let one_more = session.reactions_add(&react("new".into(), &crowded)).await;
    assert_eq!(code(one_more), "too_many_emoji");
    let known = session.reactions_add(&react("e0".into(), &crowded)).await;
    known.expect("an emoji already there");

    let busy = fake.add_message(CHANNEL, ADA, "react away", None);
    for i in 0..MAX_REACTIONS_PER_PERSON {
        let added = session.reactions_add(&react(format!("b{i}"), &busy)).await;
        added.expect("under the cap");
    }
    let one_more = session.reactions_add(&react("last".into(), &busy)).await;
    assert_eq!(code(one_more), "too_many_reactions");
    assert_eq!(
        fake.reactions(CHANNEL, &busy).len(),
        MAX_REACTIONS_PER_PERSON
    );
}

#[tokio::test]
async fn unacked_events_come_again_and_interactions_do_not() {
    let fake = fake().await;
    fake.set_ack_timeout(Duration::from_millis(200));
    let mut ws = connect_raw(&fake).await;
    next_frame(&mut ws).await;

    let (_, envelope) = fake.message_event(CHANNEL, ADA, "anyone?", None);
    let mut event_ids = HashSet::new();
    for attempt in 0..=3 {
        let frame = next_frame(&mut ws).await;
        assert_eq!(frame["envelope_id"], envelope);
        assert_eq!(frame["retry_attempt"], attempt);
        let reason = if attempt == 0 { "" } else { "timeout" };
        assert_eq!(frame["retry_reason"], reason);
        event_ids.insert(frame["payload"]["event_id"].to_string());
    }
    assert_eq!(event_ids.len(), 1, "a retry carries the same event_id");
    let delivered = Some(EnvelopeStatus::Delivered);
    let gave_up = |f: &FakeSlack| f.envelope_status(&envelope) != delivered;
    fake.wait_until("Slack giving up", WAIT, gave_up)
        .await
        .expect("gave up");
    let status = fake.envelope_status(&envelope);
    assert_eq!(status, Some(EnvelopeStatus::GaveUp("timeout".into())));
    assert_eq!(fake.deliveries(&envelope).len(), 4);

    let card = post_card(&fake).await;
    let click = fake.click(ADA, CHANNEL, &card, "approve").expect("click");
    next_envelope(&mut ws, "interactive", &click).await;
    let settled = |f: &FakeSlack| f.envelope_status(&click) != delivered;
    fake.wait_until("the click's fate", WAIT, settled)
        .await
        .expect("settled");
    let status = fake.envelope_status(&click);
    assert_eq!(status, Some(EnvelopeStatus::GaveUp("timeout".into())));
    assert_eq!(fake.deliveries(&click).len(), 1, "never redelivered");

    let raw = fake.send_envelope(EnvelopeKind::EventsApi, false, json!({"x": 1}));
    let payload = next_envelope(&mut ws, "events_api", &raw).await;
    assert_eq!(payload, json!({"x": 1}));
}

// ---- slack-morphism's Socket Mode listener ----

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What the listener's callbacks saw, in order.
#[derive(Debug)]
enum Seen {
    Message {
        event_id: String,
        text: Option<String>,
    },
    Reaction {
        reaction: String,
    },
    Click {
        action_id: String,
        view_id: Option<String>,
    },
    Submission {
        view_id: String,
        reason: Option<String>,
    },
}

/// The callbacks' link to the test (callbacks are plain `fn`s: this rides
/// in the listener's user state).
#[derive(Clone)]
struct Probe {
    seen: mpsc::UnboundedSender<Seen>,
    /// `num_connections` of each hello.
    hellos: mpsc::UnboundedSender<u32>,
    /// The bot token, to open a modal from a click.
    bot_token: SlackApiToken,
    /// A message "hold" waits for a permit the first time it comes.
    gate: Arc<Semaphore>,
    first_seen: Arc<Mutex<HashSet<String>>>,
}

/// Frames the listener could not parse (a `ProtocolError`): there must be
/// none. Errors of the connection itself (a cut) are expected.
static UNPARSED: Mutex<Vec<String>> = Mutex::new(Vec::new());

async fn probe_of(states: &SlackClientEventsUserState) -> Option<Probe> {
    states.read().await.get_user_state::<Probe>().cloned()
}

async fn on_push(
    event: SlackPushEventCallback,
    _client: Arc<SlackClient<Connector>>,
    states: SlackClientEventsUserState,
) -> UserCallbackResult<()> {
    let Some(probe) = probe_of(&states).await else {
        return Ok(());
    };
    match &event.event {
        SlackEventCallbackBody::Message(message) => {
            let event_id = event.event_id.0.clone();
            let text = message.content.as_ref().and_then(|c| c.text.clone());
            let first = {
                let mut first_seen = probe.first_seen.lock().expect("probe");
                first_seen.insert(event_id.clone())
            };
            let hold = first && text.as_deref() == Some("hold");
            let _ = probe.seen.send(Seen::Message { event_id, text });
            if hold {
                let _ = tokio::time::timeout(WAIT, probe.gate.acquire()).await;
            }
        }
        SlackEventCallbackBody::ReactionAdded(reaction) => {
            let reaction = reaction.reaction.0.clone();
            let _ = probe.seen.send(Seen::Reaction { reaction });
        }
        _ => {}
    }
    Ok(())
}

/// A click opens the modal (as an app does, with the click's trigger); a
/// submission is answered with `response_action: clear`.
async fn on_interaction(
    event: SlackInteractionEvent,
    client: Arc<SlackClient<Connector>>,
    states: SlackClientEventsUserState,
) -> UserCallbackResult<SlackInteractionResponse> {
    let Some(probe) = probe_of(&states).await else {
        return Ok(SlackInteractionResponse::Empty);
    };
    match event {
        SlackInteractionEvent::BlockActions(click) => {
            let actions = click.actions.unwrap_or_default();
            let action_id = actions.first().map(|a| a.action_id.0.clone());
            let session = client.open_session(&probe.bot_token);
            let open = SlackApiViewsOpenRequest::new(click.trigger_id, modal());
            let opened = session.views_open(&open).await;
            let _ = probe.seen.send(Seen::Click {
                action_id: action_id.unwrap_or_default(),
                view_id: opened.ok().map(|o| o.view.state_params.id.0),
            });
            Ok(SlackInteractionResponse::Empty)
        }
        SlackInteractionEvent::ViewSubmission(submission) => {
            let params = submission.view.state_params;
            let values = params.state.map(|s| s.values).unwrap_or_default();
            let reason = values
                .get(&SlackBlockId::new("reason".into()))
                .and_then(|block| block.get(&SlackActionId::new("text".into())))
                .and_then(|value| value.value.clone());
            let view_id = params.id.0;
            let _ = probe.seen.send(Seen::Submission { view_id, reason });
            let clear = SlackViewSubmissionResponse::Clear(SlackViewSubmissionClearResponse {});
            Ok(SlackInteractionResponse::ViewSubmission(clear))
        }
        _ => Ok(SlackInteractionResponse::Empty),
    }
}

fn on_error(
    err: BoxError,
    _client: Arc<SlackClient<Connector>>,
    _states: SlackClientEventsUserState,
) -> HttpStatusCode {
    // The listener hands a frame it could not parse over as a bare
    // `SlackClientProtocolError`, not inside a `SlackClientError`.
    if let Some(unparsed) = err.downcast_ref::<slack_morphism::errors::SlackClientProtocolError>() {
        UNPARSED.lock().expect("errors").push(unparsed.to_string());
    } else if let Some(SlackClientError::ProtocolError(unparsed)) = err.downcast_ref() {
        UNPARSED.lock().expect("errors").push(unparsed.to_string());
    }
    HttpStatusCode::OK
}

async fn next_seen(seen: &mut mpsc::UnboundedReceiver<Seen>) -> Seen {
    let next = tokio::time::timeout(WAIT, seen.recv()).await;
    next.expect("a callback in time").expect("probe open")
}

fn seen_text(seen: Seen) -> String {
    match seen {
        Seen::Message { text, .. } => text.unwrap_or_default(),
        other => panic!("expected a message, got {other:?}"),
    }
}

#[tokio::test]
async fn slack_morphism_listener_end_to_end() {
    let fake = fake().await;
    // Sent before any socket is open: it waits.
    let (_, early) = fake.message_event(CHANNEL, ADA, "early", None);

    let (seen_tx, mut seen) = mpsc::unbounded_channel();
    let (hellos_tx, mut hellos) = mpsc::unbounded_channel();
    let probe = Probe {
        seen: seen_tx,
        hellos: hellos_tx,
        bot_token: token(TOKEN),
        gate: Arc::new(Semaphore::new(0)),
        first_seen: Arc::default(),
    };
    let environment = SlackClientEventsListenerEnvironment::new(Arc::new(client(&fake)))
        .with_error_handler(on_error)
        .with_user_state(probe.clone());
    let callbacks = SlackSocketModeListenerCallbacks::new()
        .with_hello_events(|hello, _client, states| async move {
            if let Some(probe) = probe_of(&states).await {
                let _ = probe.hellos.send(hello.num_connections);
            }
        })
        .with_push_events(on_push)
        .with_interaction_events(on_interaction);
    let config = SlackClientSocketModeConfig::new()
        .with_initial_backoff_in_seconds(0)
        .with_reconnect_timeout_in_seconds(1);
    let listener = SlackClientSocketModeListener::new(&config, Arc::new(environment), callbacks);
    let app_token = token(&fake.app_token());
    listener.listen_for(&app_token).await.expect("listen_for");
    listener.start().await;

    fake.wait_for_sockets(2, WAIT).await.expect("two sockets");
    let acked = fake.wait_ack(&early, WAIT).await.expect("the early event");
    assert!(acked.delay < Duration::from_secs(3), "{acked:?}");
    assert_eq!(seen_text(next_seen(&mut seen).await), "early");

    let (message_ts, message) = fake.message_event(CHANNEL, ADA, "hello bot", None);
    let acked = fake.wait_ack(&message, WAIT).await.expect("message acked");
    assert!(acked.delay < Duration::from_secs(3), "{acked:?}");
    assert_eq!(seen_text(next_seen(&mut seen).await), "hello bot");

    let reaction = fake.reaction_event(BOB, "eyes", CHANNEL, &message_ts);
    fake.wait_ack(&reaction, WAIT)
        .await
        .expect("reaction acked");
    match next_seen(&mut seen).await {
        Seen::Reaction { reaction } => assert_eq!(reaction, "eyes"),
        other => panic!("expected the reaction, got {other:?}"),
    }

    // A click, acked in time; its callback opened the modal with the
    // click's trigger; the submission's ack carries the callback's answer.
    let card = post_card(&fake).await;
    let click = fake.click(BOB, CHANNEL, &card, "deny").expect("click");
    let acked = fake.wait_ack(&click, WAIT).await.expect("click acked");
    assert!(acked.delay < Duration::from_secs(3), "{acked:?}");
    let view_id = match next_seen(&mut seen).await {
        Seen::Click { action_id, view_id } => {
            assert_eq!(action_id, "deny");
            view_id.expect("views.open with the click's trigger")
        }
        other => panic!("expected the click, got {other:?}"),
    };
    assert_eq!(fake.views()[0].user, BOB);
    let typed = [("reason", "text", "not on a Friday")];
    let submission = fake.submit(BOB, &view_id, &typed).expect("submit");
    let acked = fake
        .wait_ack(&submission, WAIT)
        .await
        .expect("submission acked");
    assert_eq!(acked.payload, Some(json!({"response_action": "clear"})));
    match next_seen(&mut seen).await {
        Seen::Submission {
            view_id: id,
            reason,
        } => {
            assert_eq!((id, reason.as_deref()), (view_id, Some("not on a Friday")))
        }
        other => panic!("expected the submission, got {other:?}"),
    }

    // Cut: the listener reconnects through apps.connections.open, and an
    // event sent while no socket is open arrives afterwards.
    let opened = fake.connections_opened();
    fake.drop_sockets();
    assert_eq!(fake.socket_count(), 0);
    let (_, missed) = fake.message_event(CHANNEL, ADA, "while away", None);
    assert!(fake.deliveries(&missed).is_empty(), "queued, not sent");
    fake.wait_for_sockets(2, WAIT)
        .await
        .expect("reconnected after the cut");
    assert!(fake.connections_opened() >= opened + 2);
    fake.wait_ack(&missed, WAIT)
        .await
        .expect("the missed event, acked");
    assert_eq!(seen_text(next_seen(&mut seen).await), "while away");

    // Told to disconnect: the listener opens new sockets and closes the
    // old. (slack-morphism 2.31.1 leaves a socket open when `disconnect`
    // comes before its writer task first ran; the fake then closes it
    // after the grace period, as Slack does.)
    fake.set_disconnect_grace(Duration::from_secs(1));
    let opened = fake.connections_opened();
    let sockets = fake.sockets();
    let told: Vec<u64> = sockets
        .iter()
        .filter(|s| s.ended.is_none())
        .map(|s| s.id)
        .collect();
    fake.send_disconnect("refresh_requested");
    let replaced = |f: &FakeSlack| {
        let sockets = f.sockets();
        let gone = |id: &u64| sockets.iter().any(|s| s.id == *id && s.ended.is_some());
        told.iter().all(gone) && f.socket_count() >= 2
    };
    let replacing = fake.wait_until("new sockets for the old", WAIT, replaced);
    replacing.await.expect("replaced");
    assert!(fake.connections_opened() >= opened + 2);
    for socket in fake.sockets().iter().filter(|s| told.contains(&s.id)) {
        assert!(socket.disconnect_sent);
        let end = socket.ended.map(|(_, end)| end);
        let closed = [SocketEnd::ClientClosed, SocketEnd::DisconnectGraceExpired];
        assert!(end.is_some_and(|end| closed.contains(&end)), "{socket:?}");
    }

    // Its socket drops before the ack: delivered again, same event_id.
    let (_, held) = fake.message_event(CHANNEL, ADA, "hold", None);
    let first_id = match next_seen(&mut seen).await {
        Seen::Message { event_id, text } => {
            assert_eq!(text.as_deref(), Some("hold"));
            event_id
        }
        other => panic!("expected the held message, got {other:?}"),
    };
    fake.drop_sockets();
    let acked = fake.wait_ack(&held, WAIT).await.expect("held, then acked");
    let deliveries = fake.deliveries(&held);
    assert_eq!(deliveries.len(), 2, "{deliveries:?}");
    assert_eq!(deliveries[1].retry_attempt, 1);
    assert_eq!(deliveries[1].retry_reason, "socket closed");
    assert_ne!(deliveries[0].socket, deliveries[1].socket);
    assert_eq!(acked.socket, deliveries[1].socket);
    match next_seen(&mut seen).await {
        Seen::Message { event_id, .. } => assert_eq!(event_id, first_id),
        other => panic!("expected the redelivery, got {other:?}"),
    }
    probe.gate.add_permits(1);

    // Every connection said hello through the hello callback, and no
    // frame failed to parse as a `SlackSocketModeEvent`.
    let connections = fake.connections_opened();
    for n in 0..connections {
        let hello = tokio::time::timeout(WAIT, hellos.recv()).await;
        let num_connections = hello.expect("a hello in time").expect("probe");
        assert!(num_connections >= 1, "hello {n}: {num_connections}");
    }
    assert!(
        UNPARSED.lock().expect("errors").is_empty(),
        "{:?}",
        UNPARSED.lock()
    );
    listener.shutdown().await;
}
