//! A client of the agent's control API (HTTP/1.1 + JSON on its Unix
//! socket): preview and unpreview, one new connection per call as the CLI
//! and the gateway make them. Written against the API, not the agent crate,
//! so the load program builds whatever the agent's internals become.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use bytes::Bytes;
use http::{Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::UnixStream;

pub struct ControlClient {
    socket: PathBuf,
}

/// The answer to a preview call: the name and its public URL.
pub struct Created {
    pub name: String,
    pub url: String,
}

impl ControlClient {
    pub fn new(socket: &Path) -> Self {
        Self {
            socket: socket.to_owned(),
        }
    }

    /// `POST /v1/previews {port, name}`.
    pub async fn preview(&self, port: u16, name: &str) -> anyhow::Result<Created> {
        let body = json!({ "port": port, "name": name }).to_string();
        let answer = self.call(Method::POST, "/v1/previews", body).await?;
        let field = |key: &str| {
            answer[key]
                .as_str()
                .map(str::to_owned)
                .with_context(|| format!("preview {name}: no {key} in {answer}"))
        };
        Ok(Created {
            name: field("name")?,
            url: field("url")?,
        })
    }

    /// `DELETE /v1/previews/{name}`.
    pub async fn unpreview(&self, name: &str) -> anyhow::Result<()> {
        let path = format!("/v1/previews/{name}");
        self.call(Method::DELETE, &path, String::new()).await?;
        Ok(())
    }

    /// One call on a new connection; the JSON of a 2xx answer, else an
    /// error carrying the agent's message.
    async fn call(&self, method: Method, path: &str, body: String) -> anyhow::Result<Value> {
        let stream = UnixStream::connect(&self.socket)
            .await
            .with_context(|| format!("agent socket {}", self.socket.display()))?;
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let req = Request::builder()
            .method(method.clone())
            .uri(path)
            .header(http::header::HOST, "calvin-agent")
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))?;
        let response = sender.send_request(req).await?;
        let status = response.status();
        let bytes = response.into_body().collect().await?.to_bytes();
        let answer: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        if !status.is_success() {
            bail!("{method} {path}: {status} {answer}");
        }
        Ok(answer)
    }
}
