//! A registered session's MCP endpoint, `/sessions/<id>/mcp`: rmcp's
//! streamable HTTP service ([`StreamableHttpService`]), with the end of an
//! MCP session answered the way clients expect.
//!
//! A client ends its MCP session with a DELETE carrying `Mcp-Session-Id`.
//! rmcp answers 202 Accepted, and answers so whatever the id names; the
//! official Python SDK takes only 200 or 204 and logs "Session termination
//! failed: 202" at the end of every session (its own server answers 200).
//! Here a DELETE of a live MCP session is answered 204 No Content, and one
//! of an id no live session has 404 Not Found, as the transport spec has a
//! server answer any request for a terminated or unknown session. Every
//! other request goes to rmcp as it is.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};
use rmcp::ServerHandler;
use rmcp::transport::streamable_http_server::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};

type Body = BoxBody<Bytes, Infallible>;

/// The header that names an MCP session.
const SESSION_HEADER: &str = "mcp-session-id";

/// One registration's MCP endpoint: its MCP sessions and the service.
pub struct McpEndpoint<S> {
    service: StreamableHttpService<S, LocalSessionManager>,
    sessions: Arc<LocalSessionManager>,
}

impl<S: ServerHandler + Send + 'static> McpEndpoint<S> {
    /// The endpoint serving a handler from `factory` to each MCP session.
    pub fn new(
        factory: impl Fn() -> Result<S, std::io::Error> + Send + Sync + 'static,
        config: StreamableHttpServerConfig,
    ) -> Self {
        let sessions = Arc::new(LocalSessionManager::default());
        Self {
            service: StreamableHttpService::new(factory, sessions.clone(), config),
            sessions,
        }
    }

    /// Answers a request to the endpoint.
    pub async fn handle<B>(&self, req: Request<B>) -> Response<Body>
    where
        B: hyper::body::Body + Send + 'static,
        B::Error: std::fmt::Display,
    {
        if req.method() != Method::DELETE {
            return self.service.handle(req).await;
        }
        // Without the header (or with an unreadable one), rmcp's own
        // answer says what is wrong.
        let id = req
            .headers()
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(Arc::<str>::from);
        if let Some(id) = &id {
            let live = self.sessions.has_session(id).await.unwrap_or(false);
            if !live {
                return not_found();
            }
        }
        let answer = self.service.handle(req).await;
        if answer.status() == StatusCode::ACCEPTED {
            // Ended: nothing to say.
            let mut ended = Response::new(Empty::new().boxed());
            *ended.status_mut() = StatusCode::NO_CONTENT;
            return ended;
        }
        answer
    }
}

fn not_found() -> Response<Body> {
    let mut response =
        Response::new(Full::new(Bytes::from_static(b"Not Found: no such MCP session")).boxed());
    *response.status_mut() = StatusCode::NOT_FOUND;
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone)]
    struct Nothing;
    impl ServerHandler for Nothing {}

    fn endpoint() -> McpEndpoint<Nothing> {
        McpEndpoint::new(|| Ok(Nothing), StreamableHttpServerConfig::default())
    }

    fn delete(id: Option<&str>) -> Request<Empty<Bytes>> {
        let mut req = Request::builder()
            .method(Method::DELETE)
            .uri("http://localhost/mcp")
            .header(http::header::HOST, "localhost");
        if let Some(id) = id {
            req = req.header(SESSION_HEADER, id);
        }
        req.body(Empty::new()).expect("request")
    }

    #[tokio::test]
    async fn a_delete_of_an_unknown_session_is_404_and_without_an_id_rmcps_answer() {
        let endpoint = endpoint();
        let answer = endpoint.handle(delete(Some("no-such-session"))).await;
        assert_eq!(answer.status(), StatusCode::NOT_FOUND);
        let body = answer.into_body().collect().await.expect("body").to_bytes();
        assert_eq!(&body[..], b"Not Found: no such MCP session");
        let answer = endpoint.handle(delete(None)).await;
        assert_eq!(answer.status(), StatusCode::BAD_REQUEST);
    }
}
