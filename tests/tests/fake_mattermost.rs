//! The fake Mattermost against its contract (`tests/src/fake_mattermost`),
//! spoken to as the gateway will: raw HTTP/1.1 to the REST API v4, a
//! tokio-tungstenite client on the WebSocket, and a tiny HTTP server
//! playing the integration that buttons and dialogs call back.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use calvin_tests::fake_mattermost::{ChannelKind, FakeMattermost, MAX_MESSAGE_RUNES, Source};
use futures_util::{SinkExt, StreamExt};
use http::{HeaderMap, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Map, Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

const TOKEN: &str = "mm-bot-token-0123456789";
/// Long enough for anything on loopback; a test fails rather than hangs.
const WAIT: Duration = Duration::from_secs(10);

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// A status, the headers and the JSON body (`Null` when not JSON).
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Value,
    text: String,
}

impl Answer {
    /// The `AppError` id of an error answer.
    fn error_id(&self) -> &str {
        self.body["id"].as_str().unwrap_or_default()
    }
}

struct Api {
    base: String,
    token: Option<String>,
}

impl Api {
    fn of(fake: &FakeMattermost) -> Api {
        Api {
            base: format!("{}/api/v4", fake.url()),
            token: Some(fake.token()),
        }
    }

    fn with_token(fake: &FakeMattermost, token: Option<&str>) -> Api {
        Api {
            base: format!("{}/api/v4", fake.url()),
            token: token.map(str::to_string),
        }
    }

    async fn send(&self, method: Method, path: &str, content_type: &str, body: Vec<u8>) -> Answer {
        let mut request = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base));
        if let Some(token) = &self.token {
            request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        if !body.is_empty() {
            request = request.header(header::CONTENT_TYPE, content_type);
        }
        let request = request.body(Full::new(Bytes::from(body))).expect("request");
        let client: Client<HttpConnector, Full<Bytes>> =
            Client::builder(TokioExecutor::new()).build_http();
        let response = client.request(request).await.expect("fake answers");
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Answer {
            status,
            headers,
            body,
            text,
        }
    }

    async fn get(&self, path: &str) -> Answer {
        self.send(Method::GET, path, "", Vec::new()).await
    }

    async fn post(&self, path: &str, body: Value) -> Answer {
        self.send(
            Method::POST,
            path,
            "application/json",
            body.to_string().into_bytes(),
        )
        .await
    }

    async fn put(&self, path: &str, body: Value) -> Answer {
        self.send(
            Method::PUT,
            path,
            "application/json",
            body.to_string().into_bytes(),
        )
        .await
    }
}

/// A fake with ada and bob, a public channel `town` (bot, ada, bob).
struct World {
    fake: FakeMattermost,
    api: Api,
    bot: String,
    ada: String,
    bob: String,
    town: String,
}

async fn world() -> World {
    let fake = FakeMattermost::start(TOKEN).await;
    let api = Api::of(&fake);
    let bot = fake.bot_user_id();
    let ada = fake.add_user("ada");
    let bob = fake.add_user("bob");
    let town = fake.add_channel(ChannelKind::Public, "town", &[&ada, &bob]);
    World {
        fake,
        api,
        bot,
        ada,
        bob,
        town,
    }
}

fn assert_app_error(answer: &Answer, status: u16, id: &str) {
    assert_eq!(answer.status.as_u16(), status, "{}", answer.text);
    assert_eq!(answer.error_id(), id, "{}", answer.text);
    for field in ["message", "detailed_error", "request_id"] {
        assert!(answer.body[field].is_string(), "{field} in {}", answer.text);
    }
    assert_eq!(answer.body["status_code"], status);
}

// ---- REST ----

#[tokio::test]
async fn the_token_is_checked_and_unknown_routes_are_404() {
    let w = world().await;
    let none = Api::with_token(&w.fake, None).get("/users/me").await;
    assert_app_error(&none, 401, "api.context.session_expired.app_error");
    let wrong = Api::with_token(&w.fake, Some("nope"))
        .get("/users/me")
        .await;
    assert_app_error(&wrong, 401, "api.context.session_expired.app_error");
    let request_id = wrong
        .headers
        .get("x-request-id")
        .and_then(|v| v.to_str().ok());
    assert_eq!(request_id, wrong.body["request_id"].as_str());
    let unknown = w.api.get("/no/such/route").await;
    assert_app_error(&unknown, 404, "api.context.404.app_error");
    let calls = w.fake.calls();
    assert_eq!(
        calls,
        vec!["GET /users/me", "GET /users/me", "GET /no/such/route"]
    );
}

#[tokio::test]
async fn users_and_the_team() {
    let w = world().await;
    let me = w.api.get("/users/me").await;
    assert_eq!(me.status, StatusCode::OK);
    assert_eq!(
        (me.body["id"].as_str(), me.body["is_bot"].as_bool()),
        (Some(w.bot.as_str()), Some(true))
    );
    let id = me.body["id"].as_str().unwrap_or_default();
    assert!(
        id.len() == 26
            && id
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()),
        "{id}"
    );
    let ada = w.api.get(&format!("/users/{}", w.ada)).await;
    assert_eq!(ada.body["username"], "ada");
    assert_eq!(
        w.api.get("/users/username/bob").await.body["id"],
        w.bob.as_str()
    );
    let nobody = w.api.get("/users/username/carol").await;
    assert_app_error(&nobody, 404, "app.user.get_by_username.app_error");
    let unknown = w.api.get("/users/aaaaaaaaaaaaaaaaaaaaaaaaaa").await;
    assert_app_error(&unknown, 404, "app.user.missing_account.const");
    let some = w
        .api
        .post(
            "/users/ids",
            json!([w.ada, "aaaaaaaaaaaaaaaaaaaaaaaaaa", w.bob]),
        )
        .await;
    let names: Vec<&str> = some
        .body
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|u| u["username"].as_str())
        .collect();
    assert_eq!(names, vec!["ada", "bob"]);

    let team = w.api.get(&format!("/teams/{}", w.fake.team_id())).await;
    assert_eq!(
        (team.status, team.body["name"].as_str()),
        (StatusCode::OK, Some("calvin"))
    );
    let teams = w.api.get("/users/me/teams").await;
    assert_eq!(teams.body[0]["id"], w.fake.team_id().as_str());
    let no_team = w.api.get("/teams/aaaaaaaaaaaaaaaaaaaaaaaaaa").await;
    assert_app_error(&no_team, 404, "app.team.get.find.app_error");
}

#[tokio::test]
async fn channels_show_what_the_bot_may_see() {
    let w = world().await;
    let lounge = w
        .fake
        .add_channel_without_bot(ChannelKind::Public, "lounge", &[&w.ada]);
    let secret = w
        .fake
        .add_channel_without_bot(ChannelKind::Private, "secret", &[&w.ada]);
    let dm = w.fake.add_channel(ChannelKind::Direct, "", &[&w.ada]);
    let group = w
        .fake
        .add_channel(ChannelKind::Group, "", &[&w.ada, &w.bob]);

    let town = w.api.get(&format!("/channels/{}", w.town)).await;
    assert_eq!(
        (town.body["type"].as_str(), town.body["name"].as_str()),
        (Some("O"), Some("town"))
    );
    assert_eq!(town.body["team_id"], w.fake.team_id().as_str());
    assert_eq!(
        w.api.get(&format!("/channels/{lounge}")).await.status,
        StatusCode::OK
    );
    let hidden = w.api.get(&format!("/channels/{secret}")).await;
    assert_app_error(&hidden, 403, "api.context.permissions.app_error");
    for (id, kind) in [(&dm, "D"), (&group, "G")] {
        let channel = w.api.get(&format!("/channels/{id}")).await;
        assert_eq!(
            (
                channel.body["type"].as_str(),
                channel.body["team_id"].as_str()
            ),
            (Some(kind), Some(""))
        );
    }
    let mut pair = [w.bot.clone(), w.ada.clone()];
    pair.sort();
    assert_eq!(
        w.api.get(&format!("/channels/{dm}")).await.body["name"],
        pair.join("__")
    );
    let unknown = w.api.get("/channels/aaaaaaaaaaaaaaaaaaaaaaaaaa").await;
    assert_app_error(&unknown, 404, "app.channel.get.existing.app_error");

    let page = w
        .api
        .get(&format!("/channels/{}/members?page=1&per_page=1", w.town))
        .await;
    let users: Vec<&str> = page
        .body
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["user_id"].as_str())
        .collect();
    assert_eq!(users, vec![w.ada.as_str()]);
    let member = w
        .api
        .get(&format!("/channels/{}/members/{}", w.town, w.bob))
        .await;
    assert_eq!(
        (member.status, member.body["roles"].as_str()),
        (StatusCode::OK, Some("channel_user"))
    );
    let not_member = w
        .api
        .get(&format!("/channels/{lounge}/members/{}", w.bob))
        .await;
    assert_app_error(&not_member, 404, "app.channel.get_member.missing.app_error");

    let direct = w.api.post("/channels/direct", json!([w.bot, w.bob])).await;
    assert_eq!(
        (direct.status, direct.body["type"].as_str()),
        (StatusCode::CREATED, Some("D"))
    );
    let again = w.api.post("/channels/direct", json!([w.bob, w.bot])).await;
    assert_eq!(again.body["id"], direct.body["id"]);
    let existing = w.api.post("/channels/direct", json!([w.ada, w.bot])).await;
    assert_eq!(existing.body["id"], dm.as_str());
    let others = w.api.post("/channels/direct", json!([w.ada, w.bob])).await;
    assert_app_error(&others, 403, "api.context.permissions.app_error");
}

/// A message with a button whose integration calls `url`.
fn card(url: &str) -> Value {
    json!({ "attachments": [{
        "text": "Deploy?",
        "actions": [{
            "name": "Approve", "type": "button", "style": "primary",
            "integration": { "url": url, "context": { "decision": "approve", "n": 7 } }
        }]
    }]})
}

#[tokio::test]
async fn create_post_checks_what_mattermost_checks() {
    let w = world().await;
    let secret = w
        .fake
        .add_channel_without_bot(ChannelKind::Private, "secret", &[&w.ada]);
    let props = card("http://127.0.0.1:9/act");
    let body = json!({ "channel_id": w.town, "message": "Deploy?", "props": props, "pending_post_id": "p1" });
    let created = w.api.post("/posts", body.clone()).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    let post = &created.body;
    assert_eq!(
        (post["channel_id"].as_str(), post["user_id"].as_str()),
        (Some(w.town.as_str()), Some(w.bot.as_str()))
    );
    assert_eq!(
        (post["root_id"].as_str(), post["edit_at"].as_i64()),
        (Some(""), Some(0))
    );
    assert_eq!(post["pending_post_id"], "p1");
    assert_eq!(post["props"]["from_bot"], "true");
    let action = &post["props"]["attachments"][0]["actions"][0];
    assert_eq!(
        action["id"].as_str().map(str::len),
        Some(26),
        "an id is generated"
    );
    assert!(
        action.get("integration").is_none(),
        "integrations never go out: {action}"
    );
    let id = post["id"].as_str().unwrap_or_default().to_string();
    let stored = w.fake.post(&id).expect("stored");
    assert_eq!(
        stored["props"]["attachments"][0]["actions"][0]["integration"]["context"]["n"],
        7
    );
    let records = w.fake.posts();
    assert_eq!(records.len(), 1);
    assert_eq!(
        (records[0].source, records[0].props.clone()),
        (Source::Api, props)
    );
    assert_eq!(records[0].body.as_ref(), Some(&body));

    let in_secret = w
        .api
        .post("/posts", json!({ "channel_id": secret, "message": "hi" }))
        .await;
    assert_app_error(&in_secret, 403, "api.context.permissions.app_error");
    let longest = "x".repeat(MAX_MESSAGE_RUNES);
    let fits = w
        .api
        .post(
            "/posts",
            json!({ "channel_id": w.town, "message": longest }),
        )
        .await;
    assert_eq!(fits.status, StatusCode::CREATED);
    let too_long = w
        .api
        .post(
            "/posts",
            json!({ "channel_id": w.town, "message": "é".repeat(MAX_MESSAGE_RUNES + 1) }),
        )
        .await;
    assert_app_error(
        &too_long,
        400,
        "model.post.is_valid.message_length.app_error",
    );
    let empty = w
        .api
        .post("/posts", json!({ "channel_id": w.town, "message": " " }))
        .await;
    assert_eq!(empty.status, StatusCode::BAD_REQUEST);

    let reply = w
        .api
        .post(
            "/posts",
            json!({ "channel_id": w.town, "message": "r", "root_id": id }),
        )
        .await;
    assert_eq!(
        (reply.status, reply.body["root_id"].as_str()),
        (StatusCode::CREATED, Some(id.as_str()))
    );
    let reply_id = reply.body["id"].as_str().unwrap_or_default();
    let nested = w
        .api
        .post(
            "/posts",
            json!({ "channel_id": w.town, "message": "r", "root_id": reply_id }),
        )
        .await;
    assert_app_error(&nested, 400, "api.post.create_post.root_id.app_error");
    let unknown_root = w.api.post("/posts", json!({ "channel_id": w.town, "message": "r", "root_id": "aaaaaaaaaaaaaaaaaaaaaaaaaa" })).await;
    assert_app_error(&unknown_root, 400, "api.post.create_post.root_id.app_error");
    let dm = w.fake.add_channel(ChannelKind::Direct, "", &[&w.ada]);
    let elsewhere = w
        .api
        .post(
            "/posts",
            json!({ "channel_id": dm, "message": "r", "root_id": id }),
        )
        .await;
    assert_app_error(
        &elsewhere,
        400,
        "api.post.create_post.channel_root_id.app_error",
    );
    let not_json = w
        .api
        .send(Method::POST, "/posts", "application/json", b"{".to_vec())
        .await;
    assert_app_error(&not_json, 400, "api.context.invalid_body_param.app_error");
}

fn order(list: &Value) -> Vec<String> {
    let ids = list["order"].as_array().into_iter().flatten();
    ids.filter_map(|id| id.as_str().map(str::to_string))
        .collect()
}

#[tokio::test]
async fn channel_posts_are_newest_first_in_pages_replies_included() {
    let w = world().await;
    let a = w.fake.add_post(&w.town, &w.ada, "one", None);
    let b = w.fake.add_post(&w.town, &w.bob, "two", None);
    let c = w.fake.add_post(&w.town, &w.ada, "reply to one", Some(&a));
    let d = w.fake.add_post(&w.town, &w.bob, "three", None);
    let created: Vec<i64> = [&a, &b, &c, &d]
        .iter()
        .map(|id| {
            w.fake.post(id).expect("post")["create_at"]
                .as_i64()
                .unwrap_or(0)
        })
        .collect();
    assert!(
        created.windows(2).all(|p| p[0] < p[1]),
        "create_at strictly increases: {created:?}"
    );

    let all = w.api.get(&format!("/channels/{}/posts", w.town)).await;
    assert_eq!(
        order(&all.body),
        vec![d.clone(), c.clone(), b.clone(), a.clone()]
    );
    let page = w
        .api
        .get(&format!("/channels/{}/posts?page=1&per_page=2", w.town))
        .await;
    assert_eq!(order(&page.body), vec![b.clone(), a.clone()]);
    assert_eq!(
        (
            page.body["next_post_id"].as_str(),
            page.body["prev_post_id"].as_str()
        ),
        (Some(c.as_str()), Some(""))
    );
    assert_eq!(page.body["has_next"], false);
    let first = w
        .api
        .get(&format!("/channels/{}/posts?per_page=2", w.town))
        .await;
    assert_eq!(order(&first.body), vec![d.clone(), c.clone()]);
    assert_eq!(
        (
            first.body["prev_post_id"].as_str(),
            first.body["has_next"].as_bool()
        ),
        (Some(b.as_str()), Some(true))
    );
    assert_eq!(
        first.body["posts"][&a]["message"], "one",
        "a reply brings its root"
    );

    let lounge = w
        .fake
        .add_channel_without_bot(ChannelKind::Public, "lounge", &[&w.ada]);
    w.fake.add_post(&lounge, &w.ada, "open to all", None);
    let public = w.api.get(&format!("/channels/{lounge}/posts")).await;
    assert_eq!(order(&public.body).len(), 1);
    let secret = w
        .fake
        .add_channel_without_bot(ChannelKind::Private, "secret", &[&w.ada]);
    let hidden = w.api.get(&format!("/channels/{secret}/posts")).await;
    assert_app_error(&hidden, 403, "api.context.permissions.app_error");
}

#[tokio::test]
async fn a_thread_comes_whole_from_any_of_its_posts() {
    let w = world().await;
    let root = w.fake.add_post(&w.town, &w.ada, "root", None);
    let r1 = w.fake.add_post(&w.town, &w.bob, "r1", Some(&root));
    let r2 = w.fake.add_post(&w.town, &w.ada, "r2", Some(&root));
    w.fake.add_post(&w.town, &w.ada, "unrelated", None);
    let thread = w.api.get(&format!("/posts/{r1}/thread")).await;
    let mut got = order(&thread.body);
    got.sort();
    let mut want = vec![root.clone(), r1.clone(), r2.clone()];
    want.sort();
    assert_eq!(got, want);
    assert_eq!(thread.body["posts"][&root]["reply_count"], 2);
    let single = w.api.get(&format!("/posts/{r2}")).await;
    assert_eq!(
        (
            single.body["message"].as_str(),
            single.body["root_id"].as_str()
        ),
        (Some("r2"), Some(root.as_str()))
    );
    let unknown = w.api.get("/posts/aaaaaaaaaaaaaaaaaaaaaaaaaa/thread").await;
    assert_app_error(&unknown, 404, "app.post.get.app_error");
    let secret = w
        .fake
        .add_channel_without_bot(ChannelKind::Private, "secret", &[&w.ada]);
    let hidden = w.fake.add_post(&secret, &w.ada, "psst", None);
    assert_app_error(
        &w.api.get(&format!("/posts/{hidden}")).await,
        403,
        "api.context.permissions.app_error",
    );
}

#[tokio::test]
async fn patch_edits_only_the_bots_own_posts() {
    let w = world().await;
    let created = w
        .api
        .post(
            "/posts",
            json!({ "channel_id": w.town, "message": "draft" }),
        )
        .await;
    let id = created.body["id"].as_str().unwrap_or_default().to_string();
    let patched = w
        .api
        .put(
            &format!("/posts/{id}/patch"),
            json!({ "message": "final", "props": { "k": "v" } }),
        )
        .await;
    assert_eq!(patched.status, StatusCode::OK, "{}", patched.text);
    assert_eq!(
        (
            patched.body["message"].as_str(),
            patched.body["props"]["k"].as_str()
        ),
        (Some("final"), Some("v"))
    );
    assert!(patched.body["edit_at"].as_i64() > created.body["create_at"].as_i64());
    let updates = w.fake.updates();
    assert_eq!(updates.len(), 1);
    assert_eq!(
        (updates[0].message.as_deref(), updates[0].source),
        (Some("final"), Source::Api)
    );

    let adas = w.fake.add_post(&w.town, &w.ada, "mine", None);
    let refused = w
        .api
        .put(
            &format!("/posts/{adas}/patch"),
            json!({ "message": "yours now" }),
        )
        .await;
    assert_app_error(&refused, 403, "api.context.permissions.app_error");
    assert_eq!(w.fake.post(&adas).expect("post")["message"], "mine");
    let unknown = w
        .api
        .put(
            "/posts/aaaaaaaaaaaaaaaaaaaaaaaaaa/patch",
            json!({ "message": "x" }),
        )
        .await;
    assert_app_error(&unknown, 403, "api.context.permissions.app_error");
}

#[tokio::test]
async fn ephemeral_posts_are_recorded_not_stored() {
    let w = world().await;
    let body = json!({ "user_id": w.ada, "post": { "channel_id": w.town, "message": "only you" } });
    let sent = w.api.post("/posts/ephemeral", body).await;
    assert_eq!(
        (sent.status, sent.body["type"].as_str()),
        (StatusCode::CREATED, Some("system_ephemeral"))
    );
    let ephemerals = w.fake.ephemerals();
    assert_eq!(
        (ephemerals.len(), ephemerals[0].user_id.as_str()),
        (1, w.ada.as_str())
    );
    assert!(w.fake.posts().is_empty());
    let id = sent.body["id"].as_str().unwrap_or_default();
    assert_eq!(
        w.api.get(&format!("/posts/{id}")).await.status,
        StatusCode::NOT_FOUND
    );
    w.fake.set_ephemeral_allowed(false);
    let body = json!({ "user_id": w.ada, "post": { "channel_id": w.town, "message": "again" } });
    assert_app_error(
        &w.api.post("/posts/ephemeral", body).await,
        403,
        "api.context.permissions.app_error",
    );
}

#[tokio::test]
async fn reactions_follow_the_emoji_rules_and_do_not_duplicate() {
    let w = world().await;
    let post = w.fake.add_post(&w.town, &w.ada, "ship it", None);
    let body = json!({ "user_id": w.bot, "post_id": post, "emoji_name": "+1" });
    let saved = w.api.post("/reactions", body.clone()).await;
    assert_eq!(
        (saved.status, saved.body["emoji_name"].as_str()),
        (StatusCode::OK, Some("+1"))
    );
    assert_eq!(w.api.post("/reactions", body).await.status, StatusCode::OK);
    w.fake.react(&post, &w.ada, "white_check_mark");
    assert_eq!(
        w.fake.reactions(&post),
        vec![
            ("+1".to_string(), w.bot.clone()),
            ("white_check_mark".to_string(), w.ada.clone())
        ]
    );
    let listed = w.api.get(&format!("/posts/{post}/reactions")).await;
    assert_eq!(listed.body.as_array().map(Vec::len), Some(2));
    let got = w.api.get(&format!("/posts/{post}")).await;
    assert_eq!(
        got.body["metadata"]["reactions"].as_array().map(Vec::len),
        Some(2)
    );

    let for_ada = w
        .api
        .post(
            "/reactions",
            json!({ "user_id": w.ada, "post_id": post, "emoji_name": "+1" }),
        )
        .await;
    assert_app_error(
        &for_ada,
        403,
        "api.reaction.save_reaction.user_id.app_error",
    );
    for bad in [":+1:", "thumbs up", "a.b"] {
        let refused = w
            .api
            .post(
                "/reactions",
                json!({ "user_id": w.bot, "post_id": post, "emoji_name": bad }),
            )
            .await;
        assert_app_error(
            &refused,
            400,
            "model.reaction.is_valid.emoji_name.app_error",
        );
    }
    let long = w
        .api
        .post(
            "/reactions",
            json!({ "user_id": w.bot, "post_id": post, "emoji_name": "x".repeat(65) }),
        )
        .await;
    assert_app_error(&long, 400, "api.reaction.save_reaction.invalid.app_error");
    let lounge = w
        .fake
        .add_channel_without_bot(ChannelKind::Public, "lounge", &[&w.ada]);
    let elsewhere = w.fake.add_post(&lounge, &w.ada, "hi", None);
    let outside = w
        .api
        .post(
            "/reactions",
            json!({ "user_id": w.bot, "post_id": elsewhere, "emoji_name": "wave" }),
        )
        .await;
    assert_app_error(&outside, 403, "api.context.permissions.app_error");
    assert_eq!(w.fake.reactions(&post).len(), 2);

    // The bot reads the reactions of a public channel it has not joined,
    // unless the server keeps them to members, as older ones do.
    let path = format!("/posts/{elsewhere}/reactions");
    assert_eq!(w.api.get(&path).await.status, StatusCode::OK);
    w.fake.set_reactions_members_only(true);
    let kept = w.api.get(&path).await;
    assert_app_error(&kept, 403, "api.context.permissions.app_error");
    assert!(
        kept.text.contains("permission=read_channel"),
        "{}",
        kept.text
    );
    let mine = w.api.get(&format!("/posts/{post}/reactions")).await;
    assert_eq!(
        mine.body.as_array().map(Vec::len),
        Some(2),
        "a member reads them"
    );
    // The post itself stays readable.
    let read = w.api.get(&format!("/posts/{elsewhere}")).await;
    assert_eq!(read.status, StatusCode::OK);
}

fn multipart(boundary: &str, channel: &str, files: &[(&str, &[u8])]) -> Vec<u8> {
    let mut body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"channel_id\"\r\n\r\n{channel}\r\n"
    )
    .into_bytes();
    for (name, bytes) in files {
        let head = format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"files\"; filename=\"{name}\"\r\nContent-Type: application/octet-stream\r\n\r\n"
        );
        body.extend(head.into_bytes());
        body.extend(*bytes);
        body.extend(b"\r\n");
    }
    body.extend(format!("--{boundary}--\r\n").into_bytes());
    body
}

#[tokio::test]
async fn files_upload_and_attach_to_a_post() {
    let w = world().await;
    let content_type = "multipart/form-data; boundary=XYZ";
    let body = multipart(
        "XYZ",
        &w.town,
        &[("notes.txt", b"hello\r\n"), ("data.bin", &[0, 1, 2])],
    );
    let uploaded = w.api.send(Method::POST, "/files", content_type, body).await;
    assert_eq!(uploaded.status, StatusCode::CREATED, "{}", uploaded.text);
    let infos = uploaded.body["file_infos"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let names: Vec<(&str, u64)> = infos
        .iter()
        .map(|f| {
            (
                f["name"].as_str().unwrap_or(""),
                f["size"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(names, vec![("notes.txt", 7), ("data.bin", 3)]);
    assert_eq!(
        (
            infos[0]["extension"].as_str(),
            infos[0]["channel_id"].as_str()
        ),
        (Some("txt"), Some(w.town.as_str()))
    );
    assert_eq!(uploaded.body["client_ids"], json!([]));
    let file_id = infos[0]["id"].as_str().unwrap_or_default().to_string();

    let post = w
        .api
        .post(
            "/posts",
            json!({ "channel_id": w.town, "message": "", "file_ids": [file_id] }),
        )
        .await;
    assert_eq!(post.status, StatusCode::CREATED, "{}", post.text);
    assert_eq!(post.body["file_ids"], json!([file_id]));
    assert_eq!(post.body["metadata"]["files"][0]["name"], "notes.txt");
    let files = w.fake.files();
    assert_eq!(
        (files[0].bytes.as_slice(), files[0].post_id.as_deref()),
        (&b"hello\r\n"[..], post.body["id"].as_str())
    );
    assert_eq!(files[1].post_id, None);

    w.fake.set_max_file_size(4);
    let big = multipart("XYZ", &w.town, &[("big.bin", b"12345")]);
    let refused = w.api.send(Method::POST, "/files", content_type, big).await;
    assert_app_error(
        &refused,
        413,
        "api.file.upload_file.too_large_detailed.app_error",
    );
    let secret = w
        .fake
        .add_channel_without_bot(ChannelKind::Private, "secret", &[&w.ada]);
    let outside = w
        .api
        .send(
            Method::POST,
            "/files",
            content_type,
            multipart("XYZ", &secret, &[("a", b"1")]),
        )
        .await;
    assert_app_error(&outside, 403, "api.context.permissions.app_error");
    assert_eq!(w.fake.files().len(), 2);
}

async fn search(w: &World, terms: &str, extra: Value) -> Vec<String> {
    let mut body = json!({ "terms": terms, "is_or_search": false });
    if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        body.extend(extra.clone());
    }
    let answer = w
        .api
        .post(&format!("/teams/{}/posts/search", w.fake.team_id()), body)
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
    order(&answer.body)
}

#[tokio::test]
async fn search_covers_the_bots_channels_with_phrases_and_filters() {
    let w = world().await;
    let lounge = w
        .fake
        .add_channel_without_bot(ChannelKind::Public, "lounge", &[&w.ada]);
    let ops = w.fake.add_channel(ChannelKind::Private, "ops", &[&w.bob]);
    let a = w
        .fake
        .add_post(&w.town, &w.ada, "Deploy the green build now", None);
    let b = w
        .fake
        .add_post(&ops, &w.bob, "deploy: build is green", None);
    let c = w.fake.add_post(&w.town, &w.bob, "redeploy tomorrow", None);
    w.fake.add_post(
        &lounge,
        &w.ada,
        "deploy the green build from the lounge",
        None,
    );

    assert_eq!(
        search(&w, "deploy", json!({})).await,
        vec![b.clone(), a.clone()],
        "whole words, newest first, member channels only"
    );
    assert_eq!(
        search(&w, "\"green build\"", json!({})).await,
        vec![a.clone()]
    );
    assert_eq!(
        search(&w, "green build", json!({})).await,
        vec![b.clone(), a.clone()]
    );
    assert_eq!(
        search(&w, "deploy from:bob", json!({})).await,
        vec![b.clone()]
    );
    assert_eq!(
        search(&w, "deploy in:town", json!({})).await,
        vec![a.clone()]
    );
    assert_eq!(
        search(&w, "tomorrow now", json!({ "is_or_search": true })).await,
        vec![c.clone(), a.clone()]
    );
    assert_eq!(
        search(&w, "deploy", json!({ "per_page": 1, "page": 1 })).await,
        vec![a.clone()]
    );
    let other_team = w
        .api
        .post(
            "/teams/aaaaaaaaaaaaaaaaaaaaaaaaaa/posts/search",
            json!({ "terms": "x", "is_or_search": false }),
        )
        .await;
    assert_app_error(&other_team, 403, "api.context.permissions.app_error");
}

#[tokio::test]
async fn injected_faults_come_once() {
    let w = world().await;
    w.fake
        .fail_next("POST /posts", 500, "app.post.save.app_error");
    w.fake.rate_limit_next("GET /users/me", 3);
    let failed = w
        .api
        .post("/posts", json!({ "channel_id": w.town, "message": "x" }))
        .await;
    assert_app_error(&failed, 500, "app.post.save.app_error");
    assert!(w.fake.posts().is_empty());
    assert_eq!(
        w.api
            .post("/posts", json!({ "channel_id": w.town, "message": "x" }))
            .await
            .status,
        StatusCode::CREATED
    );
    let limited = w.api.get("/users/me").await;
    assert_eq!(
        (limited.status, limited.text.as_str()),
        (StatusCode::TOO_MANY_REQUESTS, "limit exceeded\n")
    );
    let header = |name: &str| {
        limited
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    assert_eq!(header("retry-after").as_deref(), Some("3"));
    assert_eq!(header("x-ratelimit-remaining").as_deref(), Some("0"));
    assert!(header("x-ratelimit-limit").is_some() && header("x-ratelimit-reset").is_some());
    assert_eq!(w.api.get("/users/me").await.status, StatusCode::OK);
}

// ---- the WebSocket ----

async fn connect(
    fake: &FakeMattermost,
    query: &str,
    token: Option<&str>,
) -> Result<Ws, tokio_tungstenite::tungstenite::Error> {
    let mut request = format!("{}{query}", fake.websocket_url()).into_client_request()?;
    if let Some(token) = token {
        let value = format!("Bearer {token}").parse().expect("header");
        request.headers_mut().insert(header::AUTHORIZATION, value);
    }
    let (ws, _) = tokio_tungstenite::connect_async(request).await?;
    Ok(ws)
}

/// The next JSON frame, or `None` once the socket ends.
async fn next(ws: &mut Ws) -> Option<Value> {
    loop {
        let frame = tokio::time::timeout(WAIT, ws.next())
            .await
            .expect("a frame in time");
        match frame {
            Some(Ok(Message::Text(text))) => {
                return Some(serde_json::from_str(text.as_str()).expect("JSON frame"));
            }
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
            Some(Ok(_)) | Some(Err(_)) | None => return None,
        }
    }
}

async fn expect_event(ws: &mut Ws, name: &str) -> Value {
    let frame = next(ws).await.expect("an event");
    assert_eq!(frame["event"], name, "{frame}");
    frame
}

#[tokio::test]
async fn events_reach_the_bot_for_its_channels_in_order() {
    let w = world().await;
    let mut ws = connect(&w.fake, "", Some(TOKEN)).await.expect("connect");
    let hello = expect_event(&mut ws, "hello").await;
    assert_eq!(
        (
            hello["seq"].as_i64(),
            hello["broadcast"]["user_id"].as_str()
        ),
        (Some(0), Some(w.bot.as_str()))
    );
    assert_eq!(
        hello["data"]["connection_id"].as_str().map(str::len),
        Some(26)
    );
    assert!(hello["data"]["server_version"].is_string());

    let lounge = w
        .fake
        .add_channel_without_bot(ChannelKind::Public, "lounge", &[&w.ada]);
    w.fake.add_post(&lounge, &w.ada, "not for the bot", None);
    let post = w.fake.add_post(&w.town, &w.ada, "hello bot", None);
    let posted = expect_event(&mut ws, "posted").await;
    assert_eq!(posted["seq"], 1);
    let data = &posted["data"];
    assert_eq!(
        (data["channel_name"].as_str(), data["channel_type"].as_str()),
        (Some("town"), Some("O"))
    );
    assert_eq!(
        (data["sender_name"].as_str(), data["team_id"].as_str()),
        (Some("@ada"), Some(w.fake.team_id().as_str()))
    );
    assert_eq!(data["channel_display_name"], "town");
    let inner: Value = serde_json::from_str(data["post"].as_str().expect("post is a JSON string"))
        .expect("post JSON");
    assert_eq!(
        (inner["id"].as_str(), inner["message"].as_str()),
        (Some(post.as_str()), Some("hello bot"))
    );
    let broadcast = &posted["broadcast"];
    assert_eq!(
        (
            broadcast["channel_id"].as_str(),
            broadcast["user_id"].as_str()
        ),
        (Some(w.town.as_str()), Some(""))
    );
    assert!(broadcast.get("omit_users").is_some() && broadcast.get("team_id").is_some());

    // The bot's own writes through the API come back too.
    let mine = w
        .api
        .post(
            "/posts",
            json!({ "channel_id": w.town, "message": "from the bot" }),
        )
        .await;
    let own = expect_event(&mut ws, "posted").await;
    assert_eq!(
        (own["seq"].as_i64(), own["data"]["sender_name"].as_str()),
        (Some(2), Some("@calvin-bot"))
    );
    let mine = mine.body["id"].as_str().unwrap_or_default().to_string();
    w.api
        .put(
            &format!("/posts/{mine}/patch"),
            json!({ "message": "edited" }),
        )
        .await;
    let edited = expect_event(&mut ws, "post_edited").await;
    let inner: Value =
        serde_json::from_str(edited["data"]["post"].as_str().unwrap_or("{}")).expect("post JSON");
    assert_eq!(inner["message"], "edited");
    w.fake.react(&post, &w.bob, "tada");
    let reacted = expect_event(&mut ws, "reaction_added").await;
    let reaction: Value =
        serde_json::from_str(reacted["data"]["reaction"].as_str().unwrap_or("{}"))
            .expect("reaction JSON");
    assert_eq!(
        (
            reaction["emoji_name"].as_str(),
            reaction["user_id"].as_str()
        ),
        (Some("tada"), Some(w.bob.as_str()))
    );
    assert_eq!(
        (
            reacted["broadcast"]["channel_id"].as_str(),
            reacted["seq"].as_i64()
        ),
        (Some(w.town.as_str()), Some(4))
    );
    assert_eq!(w.fake.socket_count(), 1);
}

#[tokio::test]
async fn the_socket_authenticates_by_header_or_challenge() {
    let w = world().await;
    let refused = connect(&w.fake, "", Some("wrong")).await;
    assert!(
        refused.is_err(),
        "a wrong header token is refused before the upgrade"
    );

    let mut ws = connect(&w.fake, "", None).await.expect("connect");
    let challenge =
        json!({ "seq": 1, "action": "authentication_challenge", "data": { "token": TOKEN } });
    ws.send(Message::text(challenge.to_string()))
        .await
        .expect("send");
    expect_event(&mut ws, "hello").await;
    let ok = next(&mut ws).await.expect("the challenge's answer");
    assert_eq!(ok, json!({ "status": "OK", "seq_reply": 1 }));
    let typing = json!({ "seq": 2, "action": "user_typing", "data": { "channel_id": w.town } });
    ws.send(Message::text(typing.to_string()))
        .await
        .expect("send");
    assert_eq!(
        next(&mut ws).await,
        Some(json!({ "status": "OK", "seq_reply": 2 }))
    );
    w.fake
        .add_post(&w.town, &w.ada, "after the challenge", None);
    assert_eq!(expect_event(&mut ws, "posted").await["seq"], 1);

    let mut bad = connect(&w.fake, "", None).await.expect("connect");
    let wrong =
        json!({ "seq": 1, "action": "authentication_challenge", "data": { "token": "nope" } });
    bad.send(Message::text(wrong.to_string()))
        .await
        .expect("send");
    assert_eq!(
        next(&mut bad).await,
        None,
        "a bad token closes the socket, unanswered"
    );
    assert_eq!((w.fake.socket_count(), w.fake.connections_opened()), (1, 2));
}

#[tokio::test]
async fn a_dropped_socket_resumes_where_it_left_off() {
    let w = world().await;
    let mut ws = connect(&w.fake, "", Some(TOKEN)).await.expect("connect");
    let hello = expect_event(&mut ws, "hello").await;
    let connection_id = hello["data"]["connection_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    w.fake.add_post(&w.town, &w.ada, "seen", None);
    assert_eq!(expect_event(&mut ws, "posted").await["seq"], 1);

    w.fake.drop_sockets();
    assert_eq!(next(&mut ws).await, None, "the socket is cut");
    w.fake.add_post(&w.town, &w.ada, "missed", None);
    assert_eq!(w.fake.socket_count(), 0);

    let query = format!("?connection_id={connection_id}&sequence_number=2");
    let mut again = connect(&w.fake, &query, Some(TOKEN))
        .await
        .expect("reconnect");
    let missed = expect_event(&mut again, "posted").await;
    assert_eq!(missed["seq"], 2, "no hello on a resume, the next seq");
    let inner: Value =
        serde_json::from_str(missed["data"]["post"].as_str().unwrap_or("{}")).expect("post JSON");
    assert_eq!(inner["message"], "missed");
    w.fake.wait_for_sockets(1, WAIT).await.expect("one socket");

    // Asking for a seq that was never sent: events were lost, start over.
    w.fake.drop_sockets();
    let query = format!("?connection_id={connection_id}&sequence_number=9");
    let mut lost = connect(&w.fake, &query, Some(TOKEN))
        .await
        .expect("reconnect");
    let fresh = expect_event(&mut lost, "hello").await;
    assert_eq!(fresh["seq"], 0);
    assert_ne!(fresh["data"]["connection_id"], connection_id.as_str());
    assert_eq!(w.fake.connections_opened(), 3);
}

#[tokio::test]
async fn events_for_nobody_are_dropped_unless_held() {
    let w = world().await;
    w.fake
        .add_post(&w.town, &w.ada, "before anyone listened", None);
    let mut ws = connect(&w.fake, "", Some(TOKEN)).await.expect("connect");
    expect_event(&mut ws, "hello").await;
    w.fake.add_post(&w.town, &w.ada, "live", None);
    let first = expect_event(&mut ws, "posted").await;
    assert!(
        first["data"]["post"]
            .as_str()
            .unwrap_or_default()
            .contains("\"live\""),
        "{first}"
    );
    drop(ws);
    w.fake
        .wait_until("the socket's end", WAIT, |f| f.socket_count() == 0)
        .await
        .expect("closed");

    let fresh = FakeMattermost::start(TOKEN).await;
    fresh.hold_events(true);
    let ada = fresh.add_user("ada");
    let town = fresh.add_channel(ChannelKind::Public, "town", &[&ada]);
    fresh.add_post(&town, &ada, "held for the bot", None);
    let mut ws = connect(&fresh, "", Some(TOKEN)).await.expect("connect");
    expect_event(&mut ws, "hello").await;
    let held = expect_event(&mut ws, "posted").await;
    assert!(
        held["data"]["post"]
            .as_str()
            .unwrap_or_default()
            .contains("held for the bot")
    );
}

// ---- interactions ----

/// A tiny integration: records each request's JSON body and answers the
/// queued JSON bodies in turn (`{}` once they run out).
struct Integration {
    url: String,
    seen: mpsc::UnboundedReceiver<Value>,
    answers: Arc<Mutex<VecDeque<(u16, Value)>>>,
}

async fn integration() -> Integration {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr: SocketAddr = listener.local_addr().expect("addr");
    let (tx, seen) = mpsc::unbounded_channel();
    let answers: Arc<Mutex<VecDeque<(u16, Value)>>> = Arc::default();
    let queued = answers.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (tx, queued) = (tx.clone(), queued.clone());
            let service = service_fn(move |req: Request<Incoming>| {
                let (tx, queued) = (tx.clone(), queued.clone());
                async move {
                    let bytes = req
                        .into_body()
                        .collect()
                        .await
                        .map(|b| b.to_bytes())
                        .unwrap_or_default();
                    let _ = tx.send(serde_json::from_slice(&bytes).unwrap_or(Value::Null));
                    let (status, body) = queued
                        .lock()
                        .map(|mut q| q.pop_front())
                        .ok()
                        .flatten()
                        .unwrap_or((200, json!({})));
                    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
                    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
                    Ok::<_, Infallible>(response)
                }
            });
            tokio::spawn(http1::Builder::new().serve_connection(TokioIo::new(stream), service));
        }
    });
    Integration {
        url: format!("http://{addr}/act"),
        seen,
        answers,
    }
}

impl Integration {
    fn answer(&self, status: u16, body: Value) {
        self.answers
            .lock()
            .expect("answers")
            .push_back((status, body));
    }

    async fn request(&mut self) -> Value {
        tokio::time::timeout(WAIT, self.seen.recv())
            .await
            .expect("a request in time")
            .expect("a request")
    }
}

fn dialog(url: &str, trigger_id: &str) -> Value {
    json!({ "trigger_id": trigger_id, "url": url, "dialog": {
        "callback_id": "deploy", "title": "Why deploy?", "state": "s1", "submit_label": "Send",
        "introduction_text": "Tell us", "notify_on_cancel": true,
        "elements": [{ "display_name": "Reason", "name": "reason", "type": "textarea", "max_length": 3000 }]
    }})
}

#[tokio::test]
async fn a_click_posts_mattermosts_payload_and_applies_the_answer() {
    let w = world().await;
    let mut hook = integration().await;
    let created = w
        .api
        .post(
            "/posts",
            json!({ "channel_id": w.town, "message": "Deploy?", "props": card(&hook.url) }),
        )
        .await;
    let post_id = created.body["id"].as_str().unwrap_or_default().to_string();
    let action_id = created.body["props"]["attachments"][0]["actions"][0]["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let update = json!({ "message": "Approved by ada", "props": { "attachments": [] } });
    hook.answer(200, json!({ "update": update, "ephemeral_text": "Done." }));
    let mut ws = connect(&w.fake, "", Some(TOKEN)).await.expect("connect");
    expect_event(&mut ws, "hello").await;

    let answer = w
        .fake
        .click(&post_id, &action_id, &w.ada)
        .await
        .expect("click");
    assert_eq!(answer["ephemeral_text"], "Done.");
    let payload = hook.request().await;
    let expected = [
        ("user_id", json!(w.ada)),
        ("user_name", json!("ada")),
        ("channel_id", json!(w.town)),
        ("channel_name", json!("town")),
        ("team_id", json!(w.fake.team_id())),
        ("team_domain", json!("calvin")),
        ("post_id", json!(post_id)),
        ("type", json!("button")),
        ("data_source", json!("")),
        ("context", json!({ "decision": "approve", "n": 7 })),
    ];
    for (field, value) in expected {
        assert_eq!(payload[field], value, "{field} in {payload}");
    }
    let trigger_id = payload["trigger_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(!trigger_id.is_empty());

    let post = w.fake.post(&post_id).expect("post");
    assert_eq!(
        (
            post["message"].as_str(),
            post["props"]["attachments"].clone()
        ),
        (Some("Approved by ada"), json!([]))
    );
    assert_eq!(post["props"]["from_bot"], "true", "kept across the update");
    assert_eq!(w.fake.updates()[0].source, Source::Callback);
    let ephemeral = &w.fake.ephemerals()[0];
    assert_eq!(
        (
            ephemeral.user_id.as_str(),
            ephemeral.root_id.as_str(),
            ephemeral.message.as_str()
        ),
        (w.ada.as_str(), post_id.as_str(), "Done.")
    );
    assert_eq!(
        expect_event(&mut ws, "post_edited").await["broadcast"]["channel_id"],
        w.town.as_str()
    );

    // The trigger opens one dialog, once.
    let opened = w
        .api
        .post("/actions/dialogs/open", dialog(&hook.url, &trigger_id))
        .await;
    assert_eq!(
        (opened.status, opened.body.clone()),
        (StatusCode::OK, json!({ "status": "OK" })),
        "{}",
        opened.text
    );
    let dialogs = w.fake.dialogs();
    assert_eq!(
        (dialogs.len(), dialogs[0].user_id.as_str(), dialogs[0].open),
        (1, w.ada.as_str(), true)
    );
    let twice = w
        .api
        .post("/actions/dialogs/open", dialog(&hook.url, &trigger_id))
        .await;
    assert_app_error(&twice, 400, "fake_mattermost.trigger_id.used");
    let made_up = w
        .api
        .post("/actions/dialogs/open", dialog(&hook.url, "bm90IG91cnM="))
        .await;
    assert_app_error(
        &made_up,
        400,
        "interactive_message.decode_trigger_id.verify_signature_failed",
    );

    // By name too; a late trigger is refused; an invalid dialog as well.
    w.fake
        .add_post_with_props(&w.town, &w.bot, "again?", None, card(&hook.url));
    let again = w
        .fake
        .posts()
        .last()
        .map(|p| p.id.clone())
        .unwrap_or_default();
    w.fake
        .click(&again, "Approve", &w.bob)
        .await
        .expect("click by name");
    let late_trigger = hook.request().await["trigger_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let mut bad = dialog(&hook.url, &late_trigger);
    bad["dialog"]["title"] = json!("A title far longer than twenty-four bytes");
    let invalid = w.api.post("/actions/dialogs/open", bad).await;
    assert_app_error(&invalid, 400, "fake_mattermost.dialog.invalid");
    w.fake.set_trigger_ttl(Duration::ZERO);
    let late = w
        .api
        .post("/actions/dialogs/open", dialog(&hook.url, &late_trigger))
        .await;
    assert_app_error(&late, 400, "interactive_message.decode_trigger_id.expired");

    hook.answer(500, json!({}));
    let failed = w.fake.click(&again, "Approve", &w.bob).await;
    assert!(failed.is_err_and(|e| e.contains("status=500")));
    assert!(w.fake.click(&again, "Nope", &w.bob).await.is_err());
    let carol = w.fake.add_user("carol");
    let secret = w
        .fake
        .add_channel(ChannelKind::Private, "secret", &[&w.ada]);
    let hidden = w
        .fake
        .add_post_with_props(&secret, &w.bot, "psst", None, card(&hook.url));
    let outsider = w.fake.click(&hidden, "Approve", &carol).await;
    assert!(outsider.is_err_and(|e| e.contains("cannot read")));
}

#[tokio::test]
async fn submit_dialog_posts_the_submission_until_it_has_no_errors() {
    let w = world().await;
    let mut hook = integration().await;
    let post = w
        .fake
        .add_post_with_props(&w.town, &w.bot, "Deploy?", None, card(&hook.url));
    w.fake.click(&post, "Approve", &w.ada).await.expect("click");
    let trigger_id = hook.request().await["trigger_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let opened = w
        .api
        .post("/actions/dialogs/open", dialog(&hook.url, &trigger_id))
        .await;
    assert_eq!(opened.status, StatusCode::OK);

    hook.answer(200, json!({ "errors": { "reason": "Too short" } }));
    let mut values = Map::new();
    values.insert("reason".into(), json!("x"));
    let answer = w
        .fake
        .submit_dialog(&w.ada, values.clone(), false)
        .await
        .expect("submit");
    assert_eq!(answer["errors"]["reason"], "Too short");
    let sent = hook.request().await;
    let want = json!({
        "type": "dialog_submission", "callback_id": "deploy", "state": "s1", "user_id": w.ada,
        "channel_id": w.town, "team_id": w.fake.team_id(), "submission": { "reason": "x" }, "cancelled": false,
    });
    assert_eq!(sent, want);
    assert!(w.fake.dialogs()[0].open, "errors keep the dialog open");

    values.insert("reason".into(), json!("a good reason"));
    w.fake
        .submit_dialog(&w.ada, values, false)
        .await
        .expect("submit");
    assert_eq!(
        hook.request().await["submission"]["reason"],
        "a good reason"
    );
    assert!(
        !w.fake.dialogs()[0].open,
        "an answer without errors closes it"
    );
    assert!(
        w.fake
            .submit_dialog(&w.ada, Map::new(), true)
            .await
            .is_err(),
        "no dialog left open"
    );
    assert_eq!(w.fake.callbacks().len(), 3);
}
