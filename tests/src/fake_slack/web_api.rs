//! The HTTP side: `/api/<method>` (faults first, then the token, then the
//! method) and the upload URL.

use std::convert::Infallible;
use std::sync::Arc;

use http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::json;

use super::answers::{Answer, Outcome, Refusal, outcome_answer, rate_limited, slack_error, text};
use super::envelopes::EnvelopeKind;
use super::http_forms::{Args, arguments, bearer_token, str_arg};
use super::state::{Fault, Shared};
use super::workspace::{APP_ID, BOT_ID, BOT_NAME, BOT_USER_ID, HOST, TEAM_ID};
use super::{chat, conversations, files, reactions, search, socket_mode, views};

/// The one method that takes the app-level token.
const APP_TOKEN_METHOD: &str = "apps.connections.open";
/// The one method that takes the user token.
const USER_TOKEN_METHOD: &str = "search.messages";

/// The kinds of token the fake issues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TokenKind {
    /// `xoxb-...`: every method but those below.
    Bot,
    /// `xoxp-...`: search.messages.
    User,
    /// `xapp-...`: apps.connections.open.
    App,
}

impl TokenKind {
    fn wanted_by(method: &str) -> TokenKind {
        match method {
            APP_TOKEN_METHOD => TokenKind::App,
            USER_TOKEN_METHOD => TokenKind::User,
            _ => TokenKind::Bot,
        }
    }
}

pub(crate) async fn handle(
    shared: Arc<Shared>,
    req: Request<Incoming>,
) -> Result<Answer, Infallible> {
    let path = req.uri().path().to_string();
    let answer = if let Some(method) = path.strip_prefix("/api/") {
        api(&shared, method, req).await
    } else if let Some(file_id) = path.strip_prefix("/upload/") {
        files::upload(&shared, file_id, req).await
    } else {
        text(StatusCode::NOT_FOUND, "not found")
    };
    Ok(answer)
}

async fn api(shared: &Arc<Shared>, method: &str, req: Request<Incoming>) -> Answer {
    match shared.fault(method) {
        Some(Fault::RateLimited(secs)) => return rate_limited(secs),
        Some(Fault::Error(error)) => return slack_error(&error),
        None => {}
    }
    let (parts, body) = req.into_parts();
    let Ok(body) = body.collect().await.map(|b| b.to_bytes()) else {
        return slack_error("request_timeout");
    };
    let args = match arguments(&parts.method, &parts.headers, parts.uri.query(), &body) {
        Ok(args) => args,
        Err(code) => return slack_error(code),
    };
    let token = bearer_token(&parts.headers).or_else(|| str_arg(&args, "token"));
    if let Err(code) = check_token(shared, method, token.as_deref()) {
        return slack_error(code);
    }
    let answer = outcome_answer(call(shared, method, &parts.method, &args));
    // Tests waiting on what was posted, opened or updated wake up.
    shared.changed();
    answer
}

/// The bot token for every method but apps.connections.open, which
/// wants the app-level token, and search.messages, which wants the user
/// token; one of the others is `not_allowed_token_type`, anything else
/// `invalid_auth`.
fn check_token(shared: &Shared, method: &str, token: Option<&str>) -> Result<(), &'static str> {
    let token = token.ok_or("not_authed")?;
    let kind = match token {
        t if t == shared.token => TokenKind::Bot,
        t if t == shared.user_token => TokenKind::User,
        t if t == shared.app_token => TokenKind::App,
        _ => return Err("invalid_auth"),
    };
    if kind == TokenKind::wanted_by(method) {
        Ok(())
    } else {
        Err("not_allowed_token_type")
    }
}

fn call(shared: &Arc<Shared>, method: &str, http_method: &Method, args: &Args) -> Outcome {
    match method {
        "auth.test" => Ok(json!({
            "url": format!("https://{HOST}/"),
            "team": "Fake Workspace",
            "user": BOT_NAME,
            "team_id": TEAM_ID,
            "user_id": BOT_USER_ID,
            "bot_id": BOT_ID,
            "is_enterprise_install": false,
        })),
        "users.info" => users_info(shared, args),
        "chat.postMessage" => chat::post_message(&mut shared.state(), args),
        "chat.update" => chat::update(&mut shared.state(), args),
        "chat.postEphemeral" => chat::post_ephemeral(&mut shared.state(), args),
        "chat.getPermalink" => chat::get_permalink(&shared.state(), args),
        "conversations.info" => conversations::info(&shared.state(), args),
        "conversations.members" => conversations::members(&shared.state(), args),
        "conversations.replies" => conversations::replies(&shared.state(), args),
        "conversations.history" => conversations::history(&shared.state(), args),
        "conversations.open" => conversations::open(&mut shared.state(), args),
        "reactions.add" => reactions_add(shared, args),
        "views.open" => views::open(&mut shared.state(), args),
        "files.getUploadURLExternal" => files::get_upload_url(shared, args),
        "files.completeUploadExternal" => files::complete_upload(shared, args),
        USER_TOKEN_METHOD => search::messages(&shared.state(), args),
        APP_TOKEN_METHOD => connections_open(shared, http_method),
        _ => Err(Refusal::code("unknown_method")),
    }
}

fn users_info(shared: &Shared, args: &Args) -> Outcome {
    let state = shared.state();
    let user = str_arg(args, "user")
        .and_then(|id| state.workspace.users.get(&id))
        .ok_or(Refusal::code("user_not_found"))?;
    Ok(json!({ "user": user.to_json() }))
}

/// The reaction is stored, and the bot's own `reaction_added` event goes
/// out over Socket Mode, as Slack sends it to an app subscribed to it.
fn reactions_add(shared: &Arc<Shared>, args: &Args) -> Outcome {
    let mut state = shared.state();
    let event = reactions::add(&mut state, args)?;
    socket_mode::send(shared, state, EnvelopeKind::EventsApi, false, event);
    Ok(json!({}))
}

/// A WebSocket URL with a ticket good for one connection.
fn connections_open(shared: &Shared, http_method: &Method) -> Outcome {
    if http_method != Method::POST {
        return Err(Refusal::code("insecure_request"));
    }
    let ticket = shared.state().socket_mode.issue_ticket();
    let url = format!(
        "ws://{}/link/?ticket={ticket}&app_id={APP_ID}",
        shared.ws_addr
    );
    Ok(json!({ "url": url }))
}
