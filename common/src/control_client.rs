//! A client of the agent's control API, for the agent's `preview`,
//! `unpreview` and `ls` commands, the gateway's preview tools and tests.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;

use calvin_proto::control::{ApiError, PreviewRequest, ProtectRequest};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot reach the agent at {path} ({source}); is `calvin-agent up` running?")]
    Unreachable {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the agent's answer was cut: {0}")]
    Http(#[from] hyper::Error),
    #[error("{path} is served by another user (uid {uid}); not talking to it")]
    Stranger { path: PathBuf, uid: u32 },
}

/// A raw answer: the status and the JSON exactly as the agent sent it.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub body: Bytes,
}

impl Answer {
    /// The body as `T` when the status is a success, else the API's error.
    pub fn parse<T: serde::de::DeserializeOwned>(&self) -> Result<T, ApiError> {
        let bad = |e: serde_json::Error| ApiError {
            code: "bad_answer".into(),
            error: format!("the agent answered {}: {e}", self.status),
        };
        if self.status.is_success() {
            serde_json::from_slice(&self.body).map_err(bad)
        } else {
            Err(serde_json::from_slice(&self.body).unwrap_or_else(bad))
        }
    }
}

pub struct ControlClient {
    socket: PathBuf,
}

impl ControlClient {
    pub fn new(socket: &Path) -> Self {
        Self {
            socket: socket.to_owned(),
        }
    }

    pub async fn preview(&self, port: i64, name: Option<String>) -> Result<Answer, ClientError> {
        self.create(&PreviewRequest {
            port,
            name,
            ttl_secs: None,
            probe: None,
            protect: None,
            expires_secs: None,
        })
        .await
    }

    /// `POST /v1/previews` with every field.
    pub async fn create(&self, request: &PreviewRequest) -> Result<Answer, ClientError> {
        let body = serde_json::to_vec(request).unwrap_or_default();
        self.call(Method::POST, "/v1/previews", body).await
    }

    /// `GET /v1/previews/{name}/requests?QUERY` (`after=ID`, `limit=N`,
    /// `wait=SECS`; empty for the whole log).
    pub async fn requests(&self, name: &str, query: &str) -> Result<Answer, ClientError> {
        let path = match query {
            "" => format!("/v1/previews/{name}/requests"),
            query => format!("/v1/previews/{name}/requests?{query}"),
        };
        self.call(Method::GET, &path, Vec::new()).await
    }

    /// `POST /v1/previews/{name}/requests/{id}/replay`.
    pub async fn replay(&self, name: &str, id: u64) -> Result<Answer, ClientError> {
        let path = format!("/v1/previews/{name}/requests/{id}/replay");
        self.call(Method::POST, &path, Vec::new()).await
    }

    /// `POST /v1/previews/{name}/protect`: protect it (or, with `off`,
    /// not) and make a fresh share link.
    pub async fn protect(
        &self,
        name: &str,
        request: &ProtectRequest,
    ) -> Result<Answer, ClientError> {
        let body = serde_json::to_vec(request).unwrap_or_default();
        let path = format!("/v1/previews/{name}/protect");
        self.call(Method::POST, &path, body).await
    }

    pub async fn unpreview(&self, name: &str) -> Result<Answer, ClientError> {
        self.call(Method::DELETE, &format!("/v1/previews/{name}"), Vec::new())
            .await
    }

    pub async fn list(&self) -> Result<Answer, ClientError> {
        self.call(Method::GET, "/v1/previews", Vec::new()).await
    }

    async fn call(&self, method: Method, path: &str, body: Vec<u8>) -> Result<Answer, ClientError> {
        let stream =
            UnixStream::connect(&self.socket)
                .await
                .map_err(|source| ClientError::Unreachable {
                    path: self.socket.clone(),
                    source,
                })?;
        let me = rustix::process::getuid().as_raw();
        match stream.peer_cred() {
            Ok(cred) if cred.uid() == me => {}
            other => {
                return Err(ClientError::Stranger {
                    path: self.socket.clone(),
                    uid: other.map_or(u32::MAX, |c| c.uid()),
                });
            }
        }
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(conn);
        let req = Request::builder()
            .method(method)
            .uri(path)
            .header(http::header::HOST, "calvin-agent")
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| ClientError::Unreachable {
                path: self.socket.clone(),
                source: std::io::Error::other(e),
            })?;
        let response = sender.send_request(req).await?;
        let status = response.status();
        let body = response.into_body().collect().await?.to_bytes();
        Ok(Answer { status, body })
    }
}

/// A size as the control API's clients show it: `812 B`, `1.2 KiB`,
/// `3.4 MiB`, `1.1 GiB`.
pub fn human_size(bytes: u64) -> String {
    const KIB: f64 = 1024.0;
    let b = bytes as f64;
    if bytes < 1024 {
        format!("{bytes} B")
    } else if b < KIB * KIB {
        format!("{:.1} KiB", b / KIB)
    } else if b < KIB * KIB * KIB {
        format!("{:.1} MiB", b / KIB / KIB)
    } else {
        format!("{:.1} GiB", b / KIB / KIB / KIB)
    }
}
