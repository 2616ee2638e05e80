//! The HTTP side: each request under `/api/v4` is matched to a route
//! template (`"GET /posts/{post_id}"`, as [`calls`](super::FakeMattermost::calls)
//! records it), then faults, then the token, then the endpoint. The
//! WebSocket upgrade at `/api/v4/websocket` goes to `websocket.rs`.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;

use http::{HeaderMap, HeaderValue, Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use serde_json::Value;

use super::answers::{Answer, AppError, Outcome, json_answer, rate_limited};
use super::state::{Fault, Shared, State};
use super::{channels, dialogs, files, ids, people, posts, reactions, search, websocket};

/// The most a JSON body may weigh.
const MAX_JSON_BODY: usize = 8 << 20;

/// An endpoint and its path parameters.
enum Endpoint {
    Me,
    User(String),
    UserByName(String),
    UsersByIds,
    UserTeams(String),
    Team(String),
    Channel(String),
    ChannelMembers(String),
    ChannelMember(String, String),
    ChannelPosts(String),
    Direct,
    CreatePost,
    Ephemeral,
    Post(String),
    Thread(String),
    Patch(String),
    PostReactions(String),
    SaveReaction,
    Files,
    Search(String),
    OpenDialog,
}

/// The endpoint and its route template, or `None` for an unknown route.
fn route(method: &Method, path: &str) -> Option<(Endpoint, &'static str)> {
    let rest = path.strip_prefix("/api/v4/")?;
    let segments: Vec<String> = rest
        .trim_end_matches('/')
        .split('/')
        .map(str::to_string)
        .collect();
    let s: Vec<&str> = segments.iter().map(String::as_str).collect();
    let own = |i: usize| segments[i].clone();
    let found = match (method.as_str(), s.as_slice()) {
        ("GET", ["users", "me"]) => (Endpoint::Me, "GET /users/me"),
        ("GET", ["users", "username", _]) => (
            Endpoint::UserByName(own(2)),
            "GET /users/username/{username}",
        ),
        ("POST", ["users", "ids"]) => (Endpoint::UsersByIds, "POST /users/ids"),
        ("GET", ["users", _, "teams"]) => {
            (Endpoint::UserTeams(own(1)), "GET /users/{user_id}/teams")
        }
        ("GET", ["users", _]) => (Endpoint::User(own(1)), "GET /users/{user_id}"),
        ("GET", ["teams", _]) => (Endpoint::Team(own(1)), "GET /teams/{team_id}"),
        ("POST", ["teams", _, "posts", "search"]) => (
            Endpoint::Search(own(1)),
            "POST /teams/{team_id}/posts/search",
        ),
        ("POST", ["channels", "direct"]) => (Endpoint::Direct, "POST /channels/direct"),
        ("GET", ["channels", _]) => (Endpoint::Channel(own(1)), "GET /channels/{channel_id}"),
        ("GET", ["channels", _, "members"]) => (
            Endpoint::ChannelMembers(own(1)),
            "GET /channels/{channel_id}/members",
        ),
        ("GET", ["channels", _, "members", _]) => (
            Endpoint::ChannelMember(own(1), own(3)),
            "GET /channels/{channel_id}/members/{user_id}",
        ),
        ("GET", ["channels", _, "posts"]) => (
            Endpoint::ChannelPosts(own(1)),
            "GET /channels/{channel_id}/posts",
        ),
        ("POST", ["posts"]) => (Endpoint::CreatePost, "POST /posts"),
        ("POST", ["posts", "ephemeral"]) => (Endpoint::Ephemeral, "POST /posts/ephemeral"),
        ("GET", ["posts", _]) => (Endpoint::Post(own(1)), "GET /posts/{post_id}"),
        ("GET", ["posts", _, "thread"]) => {
            (Endpoint::Thread(own(1)), "GET /posts/{post_id}/thread")
        }
        ("PUT", ["posts", _, "patch"]) => (Endpoint::Patch(own(1)), "PUT /posts/{post_id}/patch"),
        ("GET", ["posts", _, "reactions"]) => (
            Endpoint::PostReactions(own(1)),
            "GET /posts/{post_id}/reactions",
        ),
        ("POST", ["reactions"]) => (Endpoint::SaveReaction, "POST /reactions"),
        ("POST", ["files"]) => (Endpoint::Files, "POST /files"),
        ("POST", ["actions", "dialogs", "open"]) => {
            (Endpoint::OpenDialog, "POST /actions/dialogs/open")
        }
        _ => return None,
    };
    Some(found)
}

pub(crate) fn bearer_token(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then(|| token.to_string())
}

pub(crate) fn query_map(query: Option<&str>) -> HashMap<String, String> {
    let pairs = query
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty());
    pairs
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            (name.to_string(), value.to_string())
        })
        .collect()
}

fn with_request_id(mut answer: Answer, request_id: &str) -> Answer {
    if let Ok(value) = HeaderValue::from_str(request_id) {
        answer.headers_mut().insert("X-Request-Id", value);
    }
    answer
        .headers_mut()
        .insert("X-Version-Id", HeaderValue::from_static("10.11.0.fake"));
    answer
}

pub(crate) async fn handle(
    shared: Arc<Shared>,
    req: Request<Incoming>,
) -> Result<Answer, Infallible> {
    let request_id = ids::new_id();
    let path = req.uri().path().to_string();
    if req.method() == Method::GET
        && matches!(path.as_str(), "/api/v4/websocket" | "/api/v4/websocket/")
    {
        shared.fault("GET /websocket");
        return Ok(with_request_id(
            websocket::upgrade(shared, req, &request_id),
            &request_id,
        ));
    }
    let answer = api(&shared, req, &request_id).await;
    // Tests waiting on what was posted, opened or updated wake up.
    shared.changed();
    Ok(with_request_id(answer, &request_id))
}

async fn api(shared: &Arc<Shared>, req: Request<Incoming>, request_id: &str) -> Answer {
    let found = route(req.method(), req.uri().path());
    let template = match &found {
        Some((_, template)) => template.to_string(),
        None => {
            let path = req.uri().path();
            format!(
                "{} {}",
                req.method(),
                path.strip_prefix("/api/v4").unwrap_or(path)
            )
        }
    };
    match shared.fault(&template) {
        Some(Fault::RateLimited(secs)) => return rate_limited(secs),
        Some(Fault::Error(status, id)) => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            return AppError::new(status, &id, "Injected by the test.").answer(request_id);
        }
        None => {}
    }
    if bearer_token(req.headers()).as_deref() != Some(shared.token.as_str()) {
        return AppError::unauthorized().answer(request_id);
    }
    let Some((endpoint, _)) = found else {
        return AppError::no_route().answer(request_id);
    };
    let (parts, body) = req.into_parts();
    let cap = match endpoint {
        Endpoint::Files => files::body_cap(shared.state().max_file_size),
        _ => MAX_JSON_BODY,
    };
    let body = match Limited::new(body, cap).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => {
            let max = shared.state().max_file_size;
            let id = "api.file.upload_file.too_large_detailed.app_error";
            let message =
                format!("Unable to upload file. File is too large. Max file size is {max} bytes.");
            return AppError::new(StatusCode::PAYLOAD_TOO_LARGE, id, &message).answer(request_id);
        }
    };
    let query = query_map(parts.uri.query());
    let outcome = match endpoint {
        Endpoint::Files => {
            let mut state = shared.state();
            let caller = state.bot_id.clone();
            files::upload(&mut state, &caller, &parts.headers, &query, &body)
        }
        endpoint => match serde_json::from_slice::<Value>(&body) {
            _ if body.is_empty() => call(&mut shared.state(), endpoint, &Value::Null, &query),
            Ok(json) => call(&mut shared.state(), endpoint, &json, &query),
            Err(_) => Err(AppError::invalid_body("body")),
        },
    };
    match outcome {
        Ok((status, body)) => json_answer(status, &body),
        Err(error) => error.answer(request_id),
    }
}

fn call(
    state: &mut State,
    endpoint: Endpoint,
    body: &Value,
    query: &HashMap<String, String>,
) -> Outcome {
    let caller = state.bot_id.clone();
    let caller = caller.as_str();
    match endpoint {
        Endpoint::Me => people::get(state, caller, "me"),
        Endpoint::User(id) => people::get(state, caller, &id),
        Endpoint::UserByName(name) => people::by_username(state, &name),
        Endpoint::UsersByIds => people::by_ids(state, body),
        Endpoint::UserTeams(id) => people::teams_of(state, caller, &id),
        Endpoint::Team(id) => people::team(state, &id),
        Endpoint::Channel(id) => channels::get(state, caller, &id),
        Endpoint::ChannelMembers(id) => channels::members(state, caller, &id, query),
        Endpoint::ChannelMember(id, user) => channels::member(state, caller, &id, &user),
        Endpoint::ChannelPosts(id) => posts::channel_posts(state, caller, &id, query),
        Endpoint::Direct => channels::direct(state, caller, body),
        Endpoint::CreatePost => posts::create(state, caller, body),
        Endpoint::Ephemeral => posts::ephemeral(state, caller, body),
        Endpoint::Post(id) => posts::get(state, caller, &id),
        Endpoint::Thread(id) => posts::thread(state, caller, &id),
        Endpoint::Patch(id) => posts::patch(state, caller, &id, body),
        Endpoint::PostReactions(id) => reactions::list(state, caller, &id),
        Endpoint::SaveReaction => reactions::save(state, caller, body),
        Endpoint::Search(team) => search::search(state, caller, &team, body),
        Endpoint::OpenDialog => dialogs::open(state, body),
        Endpoint::Files => Err(AppError::no_route()),
    }
}
