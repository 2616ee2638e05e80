//! `GET /api/v4/websocket` (`introduction.yaml`, "WebSocket";
//! `server/channels/api4/websocket.go`, `app/platform/websocket_router.go`).
//!
//! A socket authenticates with the `Authorization: Bearer` header of the
//! upgrade (a wrong token: 401 before any upgrade), or with a first frame
//! `{"seq": N, "action": "authentication_challenge", "data": {"token": T}}`.
//! A good challenge gets `hello`, then `{"status": "OK", "seq_reply": N}`
//! (the hub registers the socket, and so sends `hello`, before the reply
//! goes out); a bad token, or none, closes the socket without an answer,
//! as the router does; no authentication within 5 s closes it too. A
//! challenge on an authenticated socket is ignored.
//!
//! Only a header-authenticated upgrade can resume a connection with
//! `?connection_id=…&sequence_number=…` (the server knows the user only
//! then); see `hub.rs` for what a resume delivers. A connection id without
//! a valid `sequence_number` closes the socket.
//!
//! Other requests (`user_typing`, `get_statuses`, `get_statuses_by_ids`)
//! are answered `OK`; an unknown action, a missing one or a `seq` ≤ 0 get
//! `{"status": "FAIL", "seq_reply", "error"}`.

use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use http::{HeaderValue, Request, StatusCode, header};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;

use super::answers::{Answer, AppError, json_answer};
use super::hub::{Outgoing, Resume};
use super::rest::{bearer_token, query_map};
use super::state::Shared;

/// `authCheckInterval` in `web_conn.go`: time to authenticate.
pub const AUTH_TIMEOUT: Duration = Duration::from_secs(5);

pub(crate) fn upgrade(shared: Arc<Shared>, req: Request<Incoming>, request_id: &str) -> Answer {
    let user = match bearer_token(req.headers()) {
        Some(token) if token == shared.token => Some(shared.state().bot_id.clone()),
        Some(_) => return AppError::unauthorized().answer(request_id),
        None => None,
    };
    let key = req
        .headers()
        .get("sec-websocket-key")
        .map(|k| derive_accept_key(k.as_bytes()));
    let upgrading = req
        .headers()
        .get(header::UPGRADE)
        .and_then(|u| u.to_str().ok())
        .is_some_and(|u| u.eq_ignore_ascii_case("websocket"));
    let (Some(accept), true) = (key, upgrading) else {
        let id = "api.web_socket.connect.upgrade.app_error";
        return AppError::bad_request(id, "Failed to upgrade websocket connection.")
            .answer(request_id);
    };
    let query = query_map(req.uri().query());
    let resume = query
        .get("connection_id")
        .filter(|id| !id.is_empty() && user.is_some())
        .map(|id| Resume {
            connection_id: id.clone(),
            sequence: query.get("sequence_number").cloned(),
        });
    tokio::spawn(async move {
        let Ok(upgraded) = hyper::upgrade::on(req).await else {
            return;
        };
        let ws = WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None).await;
        session(shared, ws, user, resume).await;
    });
    let mut answer = json_answer(StatusCode::SWITCHING_PROTOCOLS, &Value::Null);
    *answer.body_mut() = Default::default();
    let headers = answer.headers_mut();
    headers.remove(header::CONTENT_TYPE);
    headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    headers.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    if let Ok(accept) = HeaderValue::from_str(&accept) {
        headers.insert("Sec-WebSocket-Accept", accept);
    }
    answer
}

/// What to do with a client's frame.
enum Reaction {
    Reply(Option<Value>),
    Close,
}

fn reply(seq: i64) -> Value {
    json!({ "status": "OK", "seq_reply": seq })
}

fn failure(seq: i64, error: AppError) -> Value {
    json!({ "status": "FAIL", "seq_reply": seq, "error": error.to_json("") })
}

fn on_request(
    shared: &Shared,
    text: &str,
    socket: u64,
    tx: &UnboundedSender<Outgoing>,
    authed: &mut bool,
) -> Reaction {
    let Ok(request) = serde_json::from_str::<Value>(text) else {
        return Reaction::Close;
    };
    let seq = request.get("seq").and_then(Value::as_i64).unwrap_or(0);
    let action = request
        .get("action")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if action.is_empty() {
        let error = AppError::bad_request(
            "api.web_socket_router.no_action.app_error",
            "No websocket action.",
        );
        return Reaction::Reply(Some(failure(seq, error)));
    }
    if seq <= 0 {
        let error = AppError::bad_request(
            "api.web_socket_router.bad_seq.app_error",
            "Invalid sequence for WebSocket message.",
        );
        return Reaction::Reply(Some(failure(seq, error)));
    }
    if action == "authentication_challenge" {
        if *authed {
            return Reaction::Reply(None);
        }
        let token = request.pointer("/data/token").and_then(Value::as_str);
        if token != Some(shared.token.as_str()) {
            return Reaction::Close;
        }
        let mut state = shared.state();
        let bot = state.bot_id.clone();
        if state.hub.attach(&bot, None, socket, tx.clone()).is_err() {
            return Reaction::Close;
        }
        *authed = true;
        return Reaction::Reply(Some(reply(seq)));
    }
    if !*authed {
        let error = AppError::new(
            StatusCode::UNAUTHORIZED,
            "api.web_socket_router.not_authenticated.app_error",
            "No websocket connection authenticated.",
        );
        return Reaction::Reply(Some(failure(seq, error)));
    }
    match action {
        "user_typing" => Reaction::Reply(Some(reply(seq))),
        "get_statuses" | "get_statuses_by_ids" => Reaction::Reply(Some(
            json!({ "status": "OK", "seq_reply": seq, "data": {} }),
        )),
        _ => {
            let error = AppError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "api.web_socket_router.bad_action.app_error",
                "Unknown WebSocket action.",
            );
            Reaction::Reply(Some(failure(seq, error)))
        }
    }
}

async fn session(
    shared: Arc<Shared>,
    ws: WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>,
    user: Option<String>,
    resume: Option<Resume>,
) {
    let (tx, mut commands) = unbounded_channel();
    let socket = shared.state().hub.open_socket();
    let mut authed = false;
    if let Some(user) = &user {
        let attached = shared.state().hub.attach(user, resume, socket, tx.clone());
        if attached.is_err() {
            shared.changed();
            return;
        }
        authed = true;
    }
    shared.changed();
    let (mut sink, mut frames) = ws.split();
    let deadline = tokio::time::Instant::now() + AUTH_TIMEOUT;
    let mut dropped = false;
    loop {
        tokio::select! {
            frame = frames.next() => match frame {
                Some(Ok(Message::Text(text))) => {
                    match on_request(&shared, text.as_str(), socket, &tx, &mut authed) {
                        Reaction::Reply(Some(answer)) => {
                            let _ = tx.send(Outgoing::Frame(answer.to_string()));
                        }
                        Reaction::Reply(None) => {}
                        Reaction::Close => break,
                    }
                    shared.changed();
                }
                Some(Ok(Message::Close(_))) => {
                    let _ = tokio::time::timeout(Duration::from_secs(1), sink.close()).await;
                    break;
                }
                Some(Ok(_)) => {}
                Some(Err(_)) | None => break,
            },
            command = commands.recv() => match command {
                Some(Outgoing::Frame(text)) => {
                    if sink.send(Message::text(text)).await.is_err() {
                        break;
                    }
                }
                // Dropping both halves cuts the TCP connection, no close frame.
                Some(Outgoing::Drop) | None => {
                    dropped = true;
                    break;
                }
            },
            () = tokio::time::sleep_until(deadline), if !authed => break,
        }
    }
    drop((sink, frames));
    if !dropped {
        shared.state().hub.detach(socket);
    }
    shared.changed();
}
