//! The fake Slack speaks Slack to slack-morphism, the client calvin uses:
//! each Web API method's answer deserialises into slack-morphism's strict
//! response type and its errors carry the contract's codes.

use std::time::Duration;

use calvin_tests::fake_slack::{APP_ID, BOT_ID, BOT_USER_ID, Conversation, FakeSlack, TEAM_ID};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{Value, json};
use slack_morphism::errors::SlackClientError;
use slack_morphism::prelude::*;

const TOKEN: &str = "xoxb-fake-slack-test";
const CHANNEL: &str = "C0GENERAL1";
const ADA: &str = "U0ADA00001";
const BOB: &str = "U0BOB00002";

type Connector = SlackClientHyperConnector<HttpConnector>;

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
    let ttl = Duration::from_millis(300);
    fake.set_trigger_ttl(ttl);
    let card = post_card(&fake).await;
    let click = fake.click(ADA, CHANNEL, &card, "approve").expect("click");
    let trigger = SlackTriggerId::new(trigger_of(&fake, &click));
    // Nothing to wait for but the clock.
    tokio::time::sleep(ttl + Duration::from_millis(100)).await;
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
