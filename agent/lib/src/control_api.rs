//! The agent's control API: HTTP/1.1 + JSON on a Unix socket (mode 0600,
//! same user only). The gateway and the `preview`, `unpreview` and `ls`
//! commands call it.
//!
//! - `POST /v1/previews {port, name?, ttl_secs?, probe?, protect?,
//!   expires_secs?}` -> `{url, name, listening, reached?, warnings,
//!   expires_at?, share_url?, share_expires?}`
//! - `POST /v1/previews/{name}/protect {rotate?, expires_secs?, off?}` ->
//!   `{name, url, protected, share_url?, share_expires?}`
//! - `DELETE /v1/previews/{name}` -> `{name}`
//! - `GET /v1/previews` -> `{connected, previews: [{name, port, url}]}`
//! - `GET /v1/previews/{name}/requests?after=ID&limit=N&wait=SECS` ->
//!   `{name, requests: [...], hints: [...]}` (the request log, newest last;
//!   `wait` holds the answer until a request after `after` comes)
//! - `POST /v1/previews/{name}/requests/{id}/replay` -> the replay, as one
//!   logged request
//!
//! Errors are `{code, error}` with a status that fits.

use std::convert::Infallible;

use bytes::Bytes;
use calvin_proto::{ErrorCode, Port, PreviewName, SHARE_MAX_SECS, SHARE_MIN_SECS};
use http::header::{ALLOW, CONTENT_TYPE, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde::Serialize;
use tokio::net::UnixListener;
use tracing::{debug, warn};

use crate::agent::{Agent, PreviewError, PreviewOptions, ProtectChange};
use crate::api::{ApiError, PreviewDeleted, PreviewRequest, ProtectRequest};
use crate::request_log::ReplayError;
use calvin_common::unix_socket::{self, SocketError};

/// `$XDG_RUNTIME_DIR/calvin/agent.sock`, or `/tmp/calvin-<uid>/agent.sock`.
pub fn default_socket_path() -> std::path::PathBuf {
    let dir = match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(runtime) if !runtime.is_empty() => std::path::PathBuf::from(runtime).join("calvin"),
        _ => std::env::temp_dir().join(format!("calvin-{}", rustix::process::getuid().as_raw())),
    };
    dir.join("agent.sock")
}

/// Binds the agent's control socket (see [`unix_socket::bind`]). Its
/// default folder may sit in /tmp: when it exists already it must be this
/// user's alone. A live socket there is another agent's.
pub async fn bind(path: &std::path::Path) -> anyhow::Result<UnixListener> {
    if path == default_socket_path()
        && let Some(dir) = path.parent().filter(|dir| dir.exists())
    {
        unix_socket::check_private_dir(dir)?;
    }
    unix_socket::bind(path).await.map_err(|err| match err {
        SocketError::InUse(path) => {
            anyhow::anyhow!("another calvin-agent already serves {}", path.display())
        }
        other => other.into(),
    })
}

/// The largest request body the API reads.
pub const MAX_BODY: usize = 64 * 1024;

/// Serves the API until `listener` fails. Connections from another user are
/// closed unanswered.
pub async fn serve(listener: UnixListener, agent: Agent) {
    let me = rustix::process::getuid().as_raw();
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(err) => {
                warn!(%err, "control socket accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        match stream.peer_cred() {
            Ok(cred) if cred.uid() == me => {}
            other => {
                warn!(
                    ?other,
                    "control socket: refused a connection from another user"
                );
                continue;
            }
        }
        let agent = agent.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let agent = agent.clone();
                async move { Ok::<_, Infallible>(route(&agent, req).await) }
            });
            if let Err(err) = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                debug!(%err, "control connection ended");
            }
        });
    }
}

pub(crate) type Answer = Response<Full<Bytes>>;

async fn route(agent: &Agent, req: Request<Incoming>) -> Answer {
    let path = req.uri().path().to_owned();
    match (req.method().clone(), path.as_str()) {
        (Method::POST, "/v1/previews") => create(agent, req).await,
        (Method::GET, "/v1/previews") => json(StatusCode::OK, &agent.list()),
        (method, p) if p.starts_with("/v1/previews/") => {
            let rest: Vec<&str> = p["/v1/previews/".len()..].split('/').collect();
            match (method, rest.as_slice()) {
                (Method::DELETE, [name]) => delete(agent, name).await,
                (_, [_]) => method_not_allowed("DELETE"),
                (Method::POST, [name, "protect"]) => protect(agent, name, req).await,
                (_, [_, "protect"]) => method_not_allowed("POST"),
                (Method::GET, [name, "requests"]) => {
                    requests(agent, name, req.uri().query().unwrap_or("")).await
                }
                (_, [_, "requests"]) => method_not_allowed("GET"),
                (Method::POST, [name, "requests", id, "replay"]) => replay(agent, name, id).await,
                (_, [_, "requests", _, "replay"]) => method_not_allowed("POST"),
                _ => error(
                    StatusCode::NOT_FOUND,
                    "not_found",
                    &format!("no such endpoint: {path}"),
                ),
            }
        }
        (_, "/v1/previews") => method_not_allowed("GET, POST"),
        _ => error(
            StatusCode::NOT_FOUND,
            "not_found",
            &format!("no such endpoint: {path}"),
        ),
    }
}

/// A request's body, up to [`MAX_BODY`]; `None` past it.
async fn body(req: Request<Incoming>) -> Option<Bytes> {
    let body = Limited::new(req.into_body(), MAX_BODY).collect().await;
    body.ok().map(|body| body.to_bytes())
}

fn too_large() -> Answer {
    error(
        StatusCode::PAYLOAD_TOO_LARGE,
        "too_large",
        &format!("the request body is over {MAX_BODY} bytes"),
    )
}

/// A share link's life, in seconds, checked against its bounds (the
/// refusal's `invalid_expires` message otherwise).
fn share_secs(expires_secs: Option<i64>) -> Result<Option<u32>, String> {
    let (min, max) = (SHARE_MIN_SECS, SHARE_MAX_SECS);
    match expires_secs {
        None => Ok(None),
        Some(secs) if (i64::from(min)..=i64::from(max)).contains(&secs) => {
            Ok(u32::try_from(secs).ok())
        }
        Some(secs) if secs < i64::from(min) => Err(format!(
            "expires_secs is {secs}; at least {min} (one minute)"
        )),
        Some(secs) => Err(format!("expires_secs is {secs}; at most {max} (365 days)")),
    }
}

async fn protect(agent: &Agent, name: &str, req: Request<Incoming>) -> Answer {
    let name = match PreviewName::parse(name) {
        Ok(name) => name,
        Err(e) => return invalid_name(e),
    };
    let Some(body) = body(req).await else {
        return too_large();
    };
    // An empty body asks for the defaults.
    let parsed = if body.is_empty() {
        Ok(ProtectRequest::default())
    } else {
        serde_json::from_slice(&body)
    };
    let request: ProtectRequest = match parsed {
        Ok(r) => r,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                &format!(
                    "expected {{\"rotate\"?: bool, \"expires_secs\"?: number, \"off\"?: bool}}: {e}"
                ),
            );
        }
    };
    if request.off && (request.rotate || request.expires_secs.is_some()) {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "off makes the preview public: it takes neither rotate nor expires_secs",
        );
    }
    let share_secs = match share_secs(request.expires_secs) {
        Ok(secs) => secs,
        Err(why) => return error(StatusCode::BAD_REQUEST, "invalid_expires", &why),
    };
    let change = ProtectChange {
        rotate: request.rotate,
        off: request.off,
        share_secs,
    };
    match agent.protect(&name, change).await {
        Ok(protected) => json(StatusCode::OK, &protected),
        Err(err) => preview_error(err),
    }
}

async fn create(agent: &Agent, req: Request<Incoming>) -> Answer {
    let Some(body) = body(req).await else {
        return too_large();
    };
    let request: PreviewRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                &format!("expected {{\"port\": 1-65535, \"name\"?: string}}: {e}"),
            );
        }
    };
    let port = match Port::try_from(request.port) {
        Ok(port) => port,
        Err(e) => return error(StatusCode::BAD_REQUEST, "invalid_port", &e.to_string()),
    };
    let name = match request.name.as_deref().map(PreviewName::parse).transpose() {
        Ok(name) => name,
        Err(e) => return invalid_name(e),
    };
    let ttl = match request.ttl_secs {
        None => None,
        Some(secs) if (1..=MAX_TTL_SECS).contains(&secs) => {
            Some(std::time::Duration::from_secs(secs as u64))
        }
        Some(secs) => {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_ttl",
                &format!("ttl_secs must be from 1 to {MAX_TTL_SECS} (30 days), got {secs}"),
            );
        }
    };
    if request.expires_secs.is_some() && request.protect != Some(true) {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "expires_secs is the share link's life: it goes with protect: true",
        );
    }
    let share_secs = match share_secs(request.expires_secs) {
        Ok(secs) => secs,
        Err(why) => return error(StatusCode::BAD_REQUEST, "invalid_expires", &why),
    };
    let options = PreviewOptions {
        probe: request.probe.unwrap_or(true),
        ttl,
        protect: request.protect,
        share_secs,
    };
    match agent.preview_with(port, name, options).await {
        Ok(created) => json(StatusCode::OK, &created),
        Err(err) => preview_error(err),
    }
}

async fn delete(agent: &Agent, name: &str) -> Answer {
    let name = match PreviewName::parse(name) {
        Ok(name) => name,
        Err(e) => return invalid_name(e),
    };
    match agent.unpreview(&name).await {
        Ok(()) => json(
            StatusCode::OK,
            &PreviewDeleted {
                name: name.to_string(),
            },
        ),
        Err(err) => preview_error(err),
    }
}

/// The longest time to live a preview may be made with (the edge's own
/// bound): 30 days.
pub const MAX_TTL_SECS: i64 = 30 * 86_400;

/// The most requests one answer of the log holds.
pub const MAX_LIMIT: usize = 1000;
/// The longest `wait` of the log, in seconds.
pub const MAX_WAIT_SECS: u64 = 60;

pub(crate) async fn requests(agent: &Agent, name: &str, query: &str) -> Answer {
    let name = match PreviewName::parse(name) {
        Ok(name) => name,
        Err(e) => return invalid_name(e),
    };
    let (mut after, mut limit, mut wait) = (0u64, MAX_LIMIT, 0u64);
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let number = value.parse::<u64>();
        match (key, number) {
            ("after", Ok(n)) => after = n,
            ("limit", Ok(n)) if (1..=MAX_LIMIT as u64).contains(&n) => limit = n as usize,
            ("wait", Ok(n)) if n <= MAX_WAIT_SECS => wait = n,
            ("after", Err(_)) => return bad_query("after must be a request id (a whole number)"),
            ("limit", _) => {
                return bad_query(&format!(
                    "limit must be from 1 to {MAX_LIMIT}, got {value:?}"
                ));
            }
            ("wait", _) => {
                return bad_query(&format!(
                    "wait must be from 0 to {MAX_WAIT_SECS} seconds, got {value:?}"
                ));
            }
            _ => {
                return bad_query(&format!(
                    "unknown parameter {key:?}: use after, limit, wait"
                ));
            }
        }
    }
    let wait = std::time::Duration::from_secs(wait);
    match agent.log().wait_requests(&name, after, limit, wait).await {
        Some(log) => json(StatusCode::OK, &log),
        None => preview_error(PreviewError::UnknownName(name)),
    }
}

pub(crate) async fn replay(agent: &Agent, name: &str, id: &str) -> Answer {
    let name = match PreviewName::parse(name) {
        Ok(name) => name,
        Err(e) => return invalid_name(e),
    };
    let Ok(id) = id.parse::<u64>() else {
        return error(
            StatusCode::NOT_FOUND,
            "unknown_request",
            &format!("{id:?} is not a request id"),
        );
    };
    match agent.log().replay(&name, id).await {
        Ok(replayed) => json(StatusCode::OK, &replayed),
        Err(err) => {
            let (status, code) = match &err {
                ReplayError::UnknownName(_) => (StatusCode::NOT_FOUND, "unknown_name"),
                ReplayError::UnknownRequest { .. } => (StatusCode::NOT_FOUND, "unknown_request"),
                ReplayError::BodyCut(..)
                | ReplayError::Upgrade(_)
                | ReplayError::Unfinished(_)
                | ReplayError::Invalid(..) => (StatusCode::CONFLICT, "not_replayable"),
                ReplayError::Port { .. } => (StatusCode::BAD_GATEWAY, "port_failed"),
            };
            error(status, code, &err.to_string())
        }
    }
}

fn bad_query(message: &str) -> Answer {
    error(StatusCode::BAD_REQUEST, "invalid_query", message)
}

/// The 400 that refuses a preview name.
pub(crate) fn invalid_name(why: impl std::fmt::Display) -> Answer {
    error(
        StatusCode::BAD_REQUEST,
        "invalid_name",
        &format!("invalid name: {why}"),
    )
}

fn preview_error(err: PreviewError) -> Answer {
    let (status, code) = match &err {
        PreviewError::NotConnected { .. } => (StatusCode::SERVICE_UNAVAILABLE, "not_connected"),
        PreviewError::Lost => (StatusCode::SERVICE_UNAVAILABLE, "connection_lost"),
        PreviewError::UnknownName(_) => (StatusCode::NOT_FOUND, "unknown_name"),
        PreviewError::Edge(f) => match f.code {
            ErrorCode::NameTaken => (StatusCode::CONFLICT, "name_taken"),
            ErrorCode::LimitReached => (StatusCode::TOO_MANY_REQUESTS, "limit_reached"),
            ErrorCode::UnknownName => (StatusCode::NOT_FOUND, "unknown_name"),
            ErrorCode::Unavailable => (StatusCode::SERVICE_UNAVAILABLE, "edge_unavailable"),
            _ => (StatusCode::BAD_GATEWAY, "edge_error"),
        },
    };
    error(status, code, &err.to_string())
}

pub(crate) fn method_not_allowed(allow: &'static str) -> Answer {
    let mut r = error(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        &format!("use {}", allow.replace(", ", " or ")),
    );
    r.headers_mut()
        .insert(ALLOW, HeaderValue::from_static(allow));
    r
}

pub(crate) fn json<T: Serialize>(status: StatusCode, value: &T) -> Answer {
    let body = serde_json::to_vec(value).unwrap_or_default();
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

pub(crate) fn error(status: StatusCode, code: &str, message: &str) -> Answer {
    json(
        status,
        &ApiError {
            code: code.to_owned(),
            error: message.to_owned(),
        },
    )
}
