//! A stdio gateway's line to the `serve` daemon, for what needs Slack's
//! events (which only the daemon receives): request_secret's button and
//! form are handled there, and the reactions a prompt waits for are
//! streamed from there (`GET /reactions`).

use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, header};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::secret_request::{PostRequest, SecretRequest};
use crate::session::SessionContext;

/// How long a call to the daemon may take (it posts into Slack).
const CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// The largest answer read.
const MAX_ANSWER: usize = 1 << 20;

/// The daemon at `base` (`http://127.0.0.1:8765`), with its token.
#[derive(Clone)]
pub struct DaemonClient {
    base: String,
    token: String,
    client: Client<HttpConnector, Full<Bytes>>,
}

impl DaemonClient {
    pub fn new(base: String, token: String) -> Self {
        Self {
            base,
            token,
            client: Client::builder(TokioExecutor::new()).build_http(),
        }
    }

    /// `POST /secret-requests`: the daemon posts the button; its answer.
    pub async fn request_secret(
        &self,
        session: &SessionContext,
        request: &SecretRequest,
    ) -> Result<Value, String> {
        let body = PostRequest {
            session: session.clone(),
            request: request.clone(),
        };
        let body = serde_json::to_vec(&body).map_err(|e| e.to_string())?;
        let url = format!("{}/secret-requests", self.base);
        let unreachable = |why: String| {
            format!(
                "no secret was requested: the calvin-gateway serve daemon at {} (which receives \
                 Slack's clicks and forms) {why}",
                self.base
            )
        };
        let req = Request::builder()
            .method(Method::POST)
            .uri(&url)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::AUTHORIZATION, format!("Bearer {}", self.token))
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| unreachable(e.to_string()))?;
        let answer = tokio::time::timeout(CALL_TIMEOUT, async {
            let response = self.client.request(req).await.map_err(|e| {
                unreachable(format!(
                    "cannot be reached ({e}); start it, or fix [daemon] url"
                ))
            })?;
            let status = response.status();
            let body = http_body_util::Limited::new(response.into_body(), MAX_ANSWER)
                .collect()
                .await
                .map_err(|e| unreachable(format!("broke off its answer ({e})")))?
                .to_bytes();
            let value: Value = serde_json::from_slice(&body)
                .map_err(|_| unreachable(format!("answered {status} with something not JSON")))?;
            Ok::<_, String>((status, value))
        })
        .await
        .map_err(|_| {
            unreachable(format!(
                "did not answer within {} s",
                CALL_TIMEOUT.as_secs()
            ))
        })??;
        match answer {
            (status, value) if status.is_success() => Ok(value["result"].clone()),
            (status, value) if status == http::StatusCode::UNAUTHORIZED => {
                Err(unreachable(format!(
                    "refused this gateway's token ({}); set [daemon] token_file or CALVIN_DAEMON_TOKEN \
                 to the daemon's token file",
                    value["error"].as_str().unwrap_or("401")
                )))
            }
            (_, value) => Err(value["error"]
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| unreachable("answered without a reason".into()))),
        }
    }

    /// `GET /reactions`: the reactions added in `channel` from the moment
    /// this returns (the daemon answers a first line once it is watching),
    /// each as the daemon's event JSON. The stream ends when the receiver
    /// is dropped.
    pub async fn watch_reactions(&self, channel: &str) -> Result<mpsc::Receiver<Value>, String> {
        let url = format!("{}/reactions?channel={channel}", self.base);
        let failed = |why: String| {
            format!(
                "cannot hear reactions through the calvin-gateway serve daemon at {} (which \
                 receives Slack's events): it {why}",
                self.base
            )
        };
        let req = Request::builder()
            .method(Method::GET)
            .uri(&url)
            .header(header::AUTHORIZATION, format!("Bearer {}", self.token))
            .body(Full::new(Bytes::new()))
            .map_err(|e| failed(e.to_string()))?;
        let (mut body, first) = tokio::time::timeout(CALL_TIMEOUT, async {
            let response = self.client.request(req).await.map_err(|e| {
                failed(format!(
                    "cannot be reached ({e}); start it, or fix [daemon] url"
                ))
            })?;
            let status = response.status();
            let mut body = response.into_body();
            let mut buf = Vec::new();
            while !buf.contains(&b'\n') && buf.len() < MAX_ANSWER {
                match body.frame().await {
                    Some(Ok(frame)) => {
                        if let Ok(data) = frame.into_data() {
                            buf.extend_from_slice(&data);
                        }
                    }
                    Some(Err(e)) => return Err(failed(format!("broke off its answer ({e})"))),
                    None => break,
                }
            }
            if !status.is_success() {
                let value: Value = serde_json::from_slice(&buf).unwrap_or_default();
                return Err(failed(format!(
                    "answered {status}: {}",
                    value["error"].as_str().unwrap_or("no reason given")
                )));
            }
            Ok((body, buf))
        })
        .await
        .map_err(|_| {
            failed(format!(
                "did not answer within {} s",
                CALL_TIMEOUT.as_secs()
            ))
        })??;
        let mut buf = first;
        let Some(end) = buf.iter().position(|b| *b == b'\n') else {
            return Err(failed("ended its answer before watching".into()));
        };
        let watching: Value = serde_json::from_slice(&buf[..end]).unwrap_or_default();
        if watching["watching"] != Value::Bool(true) {
            return Err(failed(
                "answered something else than its reaction stream".into(),
            ));
        }
        buf.drain(..=end);
        let (tx, rx) = mpsc::channel(64);
        tokio::spawn(async move {
            loop {
                while let Some(end) = buf.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = buf.drain(..=end).collect();
                    let Ok(value) = serde_json::from_slice::<Value>(&line) else {
                        continue; // the heartbeat's empty line
                    };
                    if tx.send(value).await.is_err() {
                        return;
                    }
                }
                if buf.len() > MAX_ANSWER {
                    return;
                }
                tokio::select! {
                    () = tx.closed() => return,
                    frame = body.frame() => match frame {
                        Some(Ok(frame)) => {
                            if let Ok(data) = frame.into_data() {
                                buf.extend_from_slice(&data);
                            }
                        }
                        _ => return,
                    },
                }
            }
        });
        Ok(rx)
    }
}
