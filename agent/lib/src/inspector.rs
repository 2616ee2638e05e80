//! The inspector (`calvin-agent up --inspect 127.0.0.1:4040`, ngrok's
//! habit): a page on loopback with every preview's requests, live, one
//! request's details, and a button that replays it.
//!
//! - `GET /`: the page ([`PAGE`], self-contained: no resource from
//!   elsewhere).
//! - `GET /api/previews`, `GET /api/previews/{name}/requests?after=&limit=&wait=`
//!   and `POST /api/previews/{name}/requests/{id}/replay`: the control API's
//!   answers (see [`crate::control_api`]), from the same [`Agent`] and
//!   [`crate::request_log::RequestLog`] calls, so with the same masking of
//!   `Authorization`, `Cookie` and `Set-Cookie`.
//!
//! It binds loopback addresses only ([`bind`]): what it shows is what
//! visitors sent, and it sends requests to the port. Web pages the user
//! visits reach loopback too, so every request must name the inspector in
//! its `Host` (`127.0.0.1:PORT`, `localhost:PORT`: a rebound DNS name of
//! another site is refused), and a replay must carry
//! `X-Calvin-Inspector: 1`, a header a page of another site cannot send
//! without a CORS preflight the inspector never allows.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_SECURITY_POLICY, HOST, ORIGIN};
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde::Serialize;
use tokio::net::TcpListener;
use tracing::debug;

use crate::agent::Agent;
use crate::control_api::{self, Answer};

/// The page, served at `/`.
pub const PAGE: &str = include_str!("inspector.html");

/// The header a replay must carry (with the value `1`): the page's script
/// sends it; a page of another site cannot.
pub const REPLAY_HEADER: &str = "x-calvin-inspector";

/// The longest a connection may take to send a request's head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// The page may run its own inline script and style and ask its own
/// origin, nothing else; no other site may frame it (its Replay button).
const CSP: &str = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
                   connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; \
                   frame-ancestors 'none'";

/// Why the inspector cannot listen.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error(
        "the inspector listens on loopback only (127.0.0.1 or [::1]), not {0}: it shows what \
         visitors sent and replays it; to see it from another machine, forward the port \
         (ssh -L 4040:127.0.0.1:4040 ...)"
    )]
    NotLoopback(SocketAddr),
    #[error("cannot listen for the inspector on {addr}/tcp: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// Binds the inspector's listener on `addr`, a loopback address.
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, BindError> {
    if !addr.ip().is_loopback() {
        return Err(BindError::NotLoopback(addr));
    }
    TcpListener::bind(addr)
        .await
        .map_err(|source| BindError::Listen { addr, source })
}

/// Serves the inspector on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, agent: Agent) {
    let hosts = match listener.local_addr() {
        Ok(local) => Arc::new(Hosts::of(local)),
        Err(_) => return,
    };
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(_) => {
                // Out of file descriptors, most likely: not in a tight loop.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let (agent, hosts) = (agent.clone(), hosts.clone());
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let (agent, hosts) = (agent.clone(), hosts.clone());
                async move { Ok::<_, Infallible>(route(&agent, &hosts, req).await) }
            });
            if let Err(err) = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEAD_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                debug!(%err, "inspector connection ended");
            }
        });
    }
}

/// The `Host` values that name the inspector: its address and
/// `localhost`, with its port.
#[derive(Debug)]
struct Hosts {
    names: Vec<String>,
}

impl Hosts {
    fn of(local: SocketAddr) -> Self {
        let port = local.port();
        let mut names = vec![local.to_string(), format!("localhost:{port}")];
        if port == 80 {
            names.extend([local.ip().to_string(), "localhost".into()]);
            if local.is_ipv6() {
                names.push(format!("[{}]", local.ip()));
            }
        }
        Self { names }
    }

    fn allows(&self, host: &str) -> bool {
        self.names.iter().any(|n| n.eq_ignore_ascii_case(host))
    }

    /// What a refusal says the inspector answers to.
    fn listed(&self) -> String {
        self.names[..2].join(" or ")
    }
}

/// A request the inspector does not answer, and why.
#[derive(Debug, PartialEq, Eq)]
struct Refusal {
    code: &'static str,
    message: String,
}

/// The checks of every request (`Host`) and of a replay (its header, and
/// its `Origin` when it has one).
fn guard<B>(req: &Request<B>, hosts: &Hosts, changes: bool) -> Result<(), Refusal> {
    let host = req
        .headers()
        .get(HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    if !hosts.allows(host) {
        return Err(Refusal {
            code: "wrong_host",
            message: format!(
                "the inspector answers to Host {}, not {host:?}: another name may be a web \
                 page's DNS rebinding",
                hosts.listed()
            ),
        });
    }
    if !changes {
        return Ok(());
    }
    if req.headers().get(REPLAY_HEADER).map(HeaderValue::as_bytes) != Some(b"1") {
        return Err(Refusal {
            code: "cross_site",
            message: format!(
                "a replay must come from the inspector's page: the {}: 1 header is missing \
                 (a page of another site cannot send it)",
                "X-Calvin-Inspector"
            ),
        });
    }
    if let Some(origin) = req.headers().get(ORIGIN) {
        let origin = String::from_utf8_lossy(origin.as_bytes());
        let own = origin
            .strip_prefix("http://")
            .is_some_and(|host| hosts.allows(host));
        if !own {
            return Err(Refusal {
                code: "cross_site",
                message: format!("a page of {origin} may not replay requests"),
            });
        }
    }
    Ok(())
}

async fn route(agent: &Agent, hosts: &Hosts, req: Request<Incoming>) -> Answer {
    let changes = req.method() != Method::GET && req.method() != Method::HEAD;
    if let Err(refusal) = guard(&req, hosts, changes) {
        debug!(code = refusal.code, "inspector refused a request");
        return error(StatusCode::FORBIDDEN, refusal.code, &refusal.message);
    }
    let path = req.uri().path().to_owned();
    let rest: Vec<&str> = match path.strip_prefix("/api/previews") {
        Some("") => Vec::new(),
        Some(rest) => match rest.strip_prefix('/') {
            Some(rest) => rest.split('/').collect(),
            None => return not_found(&path),
        },
        None if path == "/" => {
            return match *req.method() {
                Method::GET | Method::HEAD => page(),
                _ => method_not_allowed("GET"),
            };
        }
        None => return not_found(&path),
    };
    let method = req.method().clone();
    match (method, rest.as_slice()) {
        (Method::GET, []) => json(StatusCode::OK, &agent.list()),
        (_, []) => method_not_allowed("GET"),
        // The control API's own answers, from the same log.
        (Method::GET, [name, "requests"]) => {
            no_store(control_api::requests(agent, name, req.uri().query().unwrap_or("")).await)
        }
        (_, [_, "requests"]) => method_not_allowed("GET"),
        (Method::POST, [name, "requests", id, "replay"]) => {
            no_store(control_api::replay(agent, name, id).await)
        }
        (_, [_, "requests", _, "replay"]) => method_not_allowed("POST"),
        _ => not_found(&path),
    }
}

fn json<T: Serialize>(status: StatusCode, value: &T) -> Answer {
    no_store(control_api::json(status, value))
}

fn error(status: StatusCode, code: &str, message: &str) -> Answer {
    no_store(control_api::error(status, code, message))
}

fn method_not_allowed(allow: &'static str) -> Answer {
    no_store(control_api::method_not_allowed(allow))
}

fn page() -> Answer {
    let mut r = Response::new(Full::new(Bytes::from_static(PAGE.as_bytes())));
    let h = r.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(
        http::header::X_FRAME_OPTIONS,
        HeaderValue::from_static("DENY"),
    );
    h.insert(
        http::header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    no_store(r)
}

fn no_store(mut r: Answer) -> Answer {
    let h = r.headers_mut();
    h.insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-store"),
    );
    h.insert(
        http::header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    r
}

fn not_found(path: &str) -> Answer {
    error(
        StatusCode::NOT_FOUND,
        "not_found",
        &format!("no such page: {path} (the inspector is at /)"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts() -> Hosts {
        Hosts::of("127.0.0.1:4040".parse().unwrap())
    }

    fn request(host: &str, headers: &[(&str, &str)]) -> Request<()> {
        let mut b = Request::builder().method(Method::POST).uri("/api/x");
        if !host.is_empty() {
            b = b.header(HOST, host);
        }
        for (n, v) in headers {
            b = b.header(*n, *v);
        }
        b.body(()).unwrap()
    }

    #[test]
    fn only_the_inspector_s_own_names_are_answered() {
        for host in ["127.0.0.1:4040", "localhost:4040", "LocalHost:4040"] {
            assert_eq!(
                guard(&request(host, &[]), &hosts(), false),
                Ok(()),
                "{host}"
            );
        }
        for host in ["evil.example:4040", "127.0.0.1:4041", "localhost", ""] {
            let refused = guard(&request(host, &[]), &hosts(), false).unwrap_err();
            assert_eq!(refused.code, "wrong_host", "{host}");
            assert!(refused.message.contains("127.0.0.1:4040 or localhost:4040"));
        }
        let v6 = Hosts::of("[::1]:4040".parse().unwrap());
        assert!(v6.allows("[::1]:4040") && v6.allows("localhost:4040"));
        assert!(!v6.allows("::1:4040"));
    }

    #[test]
    fn a_replay_needs_the_header_and_its_own_origin() {
        let ok = [("x-calvin-inspector", "1")];
        assert_eq!(
            guard(&request("localhost:4040", &ok), &hosts(), true),
            Ok(())
        );
        let own = [
            ("x-calvin-inspector", "1"),
            ("origin", "http://127.0.0.1:4040"),
        ];
        assert_eq!(
            guard(&request("127.0.0.1:4040", &own), &hosts(), true),
            Ok(())
        );
        let missing = guard(&request("127.0.0.1:4040", &[]), &hosts(), true).unwrap_err();
        assert_eq!(missing.code, "cross_site");
        assert!(missing.message.contains("X-Calvin-Inspector: 1"));
        let other = [
            ("x-calvin-inspector", "1"),
            ("origin", "http://evil.example"),
        ];
        let other = guard(&request("127.0.0.1:4040", &other), &hosts(), true).unwrap_err();
        assert_eq!(other.code, "cross_site");
        assert!(other.message.contains("evil.example"));
    }

    #[tokio::test]
    async fn a_public_address_is_refused() {
        let err = bind("0.0.0.0:0".parse().unwrap()).await.unwrap_err();
        assert!(matches!(err, BindError::NotLoopback(_)));
        assert!(err.to_string().contains("loopback only"), "{err}");
        assert!(bind("127.0.0.1:0".parse().unwrap()).await.is_ok());
    }
}
