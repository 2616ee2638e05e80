//! The way to one preview's origin: HTTP/1.1 over QUIC bidi streams to its
//! agent, one stream per upstream connection, kept in a pool per preview.
//!
//! The pool belongs to the route, not to a host key: when a name is taken
//! down or moves to another agent, its route and pool go with it, so a
//! pooled connection can never serve a request for the binding that
//! replaced it.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use calvin_proto::io::{read_frame, write_frame};
use calvin_proto::{Port, PreviewName, StreamAnswer, StreamHeader, StreamRefusal};
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tracing::debug;

/// Timeouts and sizes of the upstream side.
#[derive(Debug, Clone)]
pub struct UpstreamSettings {
    /// Time for the agent to answer a new stream (it connects to the port
    /// meanwhile).
    pub connect_timeout: Duration,
    /// Idle connections kept per preview.
    pub max_idle: usize,
    /// How long an idle connection is kept.
    pub idle_timeout: Duration,
}

impl Default for UpstreamSettings {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(10),
            max_idle: 128,
            idle_timeout: Duration::from_secs(60),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("the agent is not connected")]
    AgentOffline,
    #[error("nothing is listening on port {0}")]
    NotListening(Port),
    #[error("the agent refused: {0}")]
    Refused(String),
    #[error("the agent did not answer within {0} s")]
    ConnectTimeout(u64),
    #[error("the tunnel failed: {0}")]
    Tunnel(String),
    #[error("the origin's HTTP failed: {0}")]
    Http(#[from] hyper::Error),
}

/// One preview's upstream: where it goes and its idle connections.
pub struct Upstream {
    name: PreviewName,
    port: Port,
    conn: quinn::Connection,
    settings: Arc<UpstreamSettings>,
    idle: Mutex<Vec<Idle>>,
}

struct Idle {
    sender: SendRequest<Incoming>,
    since: Instant,
}

impl Upstream {
    pub fn new(
        name: PreviewName,
        port: Port,
        conn: quinn::Connection,
        settings: Arc<UpstreamSettings>,
    ) -> Arc<Self> {
        Arc::new(Self {
            name,
            port,
            conn,
            settings,
            idle: Mutex::new(Vec::new()),
        })
    }

    pub fn name(&self) -> &PreviewName {
        &self.name
    }

    pub fn port(&self) -> Port {
        self.port
    }

    /// Sends `req` to the origin and returns its response head; the body
    /// streams. Uses an idle connection when one is ready, else opens one
    /// for `client`. A request that an idle connection could not even start
    /// (the origin had closed it) is sent again on the next.
    pub async fn send(
        self: &Arc<Self>,
        mut req: Request<Incoming>,
        client: SocketAddr,
    ) -> Result<Response<Incoming>, UpstreamError> {
        while let Some(mut sender) = self.take_idle() {
            match sender.try_send_request(req).await {
                Ok(response) => {
                    self.recycle(sender);
                    return Ok(response);
                }
                Err(mut failed) => match failed.take_message() {
                    Some(unsent) => req = unsent,
                    None => return Err(failed.into_error().into()),
                },
            }
        }
        let mut sender = self.connect(client).await?;
        let response = sender.send_request(req).await?;
        self.recycle(sender);
        Ok(response)
    }

    fn take_idle(&self) -> Option<SendRequest<Incoming>> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(entry) = idle.pop() {
            if entry.sender.is_ready() && entry.since.elapsed() < self.settings.idle_timeout {
                return Some(entry.sender);
            }
        }
        None
    }

    /// Puts `sender` back in the pool once its connection is free again
    /// (its response body read). Connections that end, or upgrade, are not.
    fn recycle(self: &Arc<Self>, mut sender: SendRequest<Incoming>) {
        let pool: Weak<Self> = Arc::downgrade(self);
        tokio::spawn(async move {
            if sender.ready().await.is_err() {
                return;
            }
            let Some(pool) = pool.upgrade() else { return };
            let mut idle = pool.idle.lock().unwrap_or_else(|e| e.into_inner());
            idle.retain(|i| !i.sender.is_closed());
            if idle.len() < pool.settings.max_idle {
                idle.push(Idle {
                    sender,
                    since: Instant::now(),
                });
            }
        });
    }

    /// Opens a stream to the agent, asks it to connect to the port, and
    /// starts HTTP/1.1 on the stream.
    async fn connect(&self, client: SocketAddr) -> Result<SendRequest<Incoming>, UpstreamError> {
        let limit = self.settings.connect_timeout;
        let opened = tokio::time::timeout(limit, self.open_stream(client))
            .await
            .map_err(|_| UpstreamError::ConnectTimeout(limit.as_secs()))??;
        let (sender, connection) = http1::Builder::new()
            .handshake(TokioIo::new(opened))
            .await?;
        let name = self.name.clone();
        tokio::spawn(async move {
            if let Err(err) = connection.with_upgrades().await {
                debug!(%name, %err, "upstream connection ended");
            }
        });
        Ok(sender)
    }

    async fn open_stream(
        &self,
        client: SocketAddr,
    ) -> Result<tokio::io::Join<quinn::RecvStream, quinn::SendStream>, UpstreamError> {
        let (mut send, mut recv) = self.conn.open_bi().await.map_err(offline)?;
        let header = StreamHeader {
            name: self.name.clone(),
            port: self.port,
            client,
        };
        write_frame(&mut send, &header)
            .await
            .map_err(|e| UpstreamError::Tunnel(e.to_string()))?;
        match read_frame::<StreamAnswer, _>(&mut recv).await {
            Ok(Some(StreamAnswer::Accepted)) => Ok(tokio::io::join(recv, send)),
            Ok(Some(StreamAnswer::Refused { reason, message })) => Err(match reason {
                StreamRefusal::ConnectionRefused => UpstreamError::NotListening(self.port),
                StreamRefusal::NotPreviewed | StreamRefusal::ConnectFailed => {
                    UpstreamError::Refused(message)
                }
            }),
            Ok(None) => Err(UpstreamError::Tunnel(
                "the agent closed the stream without an answer".into(),
            )),
            Err(_) if self.conn.close_reason().is_some() => Err(UpstreamError::AgentOffline),
            Err(err) => Err(UpstreamError::Tunnel(err.to_string())),
        }
    }
}

fn offline(_: quinn::ConnectionError) -> UpstreamError {
    UpstreamError::AgentOffline
}
