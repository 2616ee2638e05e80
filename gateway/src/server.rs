//! The MCP server over its two transports, and the send-file API scripts
//! use.
//!
//! - stdio ([`serve_stdio`]): one process per session; the session comes as
//!   flags. `calvin-send-file` reaches it on a Unix socket (0600, same user
//!   only) at `$CALVIN_SEND_FILE_SOCKET`, by default
//!   `<session_dir>/.calvin/send-file.sock`.
//! - streamable HTTP ([`serve_http`]): one daemon on loopback. A runner
//!   registers its session with `POST /sessions`, authorized by the
//!   daemon's registration token (a 0600 file), and gets its own MCP
//!   endpoint `/sessions/<id>/mcp` and send-file endpoint
//!   `/sessions/<id>/send-file`; the unguessable id is the session's
//!   capability. `DELETE /sessions/<id>` ends it. The session's counts
//!   belong to the registration: every MCP session and script of it shares
//!   them, and a restarted runner registers again. Host and Origin are
//!   checked on every request (DNS rebinding).
//! - Slack's events (the daemon holds Socket Mode when it has an app
//!   token): `GET /sessions/<id>/events` streams the events of that
//!   session's thread, one JSON object per line (messages posted in it,
//!   reactions to its messages); `POST /secret-requests` (the registration
//!   token) posts request_secret's button for a stdio gateway, whose
//!   clicks and form only the daemon receives; `GET /reactions?channel=C`
//!   (the registration token) streams the reactions added in a channel for
//!   a stdio gateway's prompt, after a first line `{"watching": true}`.
//! - A session's env file (its secrets, for BASH_ENV) is written when it
//!   starts (stdio) or registers (daemon) and removed when it ends; the
//!   workspace's repository list goes into its AGENTS.md.
//! - A session's previews end with it (see [`crate::session_previews`]):
//!   a stdio gateway takes them down when its client goes away or it is
//!   told to stop (SIGTERM, Ctrl-C), the daemon at `DELETE /sessions/<id>`
//!   and, for the sessions still registered, when it stops.
//! - Metrics ([`crate::metrics`]): every tool call is counted here, by tool
//!   and outcome, as it ends (or is cancelled); the daemon's sessions too.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, InitializeResult, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::transport::StreamableHttpServerConfig;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::net::{TcpListener, UnixListener};
use tracing::{info, warn};

use crate::events::EventHub;
use crate::mcp_endpoint::McpEndpoint;
use crate::metrics::{Metrics, ToolOutcome};
use crate::secret_request::PostRequest;
use crate::session::SessionContext;
use crate::session_env;
use crate::session_previews::PreviewOwners;
use crate::tools::{Gateway, Runner, SecretRoute, SendFileArgs};

/// The environment variable naming the stdio gateway's send-file socket.
pub const SEND_FILE_SOCKET_ENV: &str = "CALVIN_SEND_FILE_SOCKET";
/// The environment variable naming a daemon session's send-file URL.
pub const SEND_FILE_URL_ENV: &str = "CALVIN_SEND_FILE_URL";
/// Where the stdio gateway puts its socket when the variable is unset,
/// relative to the session directory; `calvin-send-file` looks for it from
/// its working directory upwards.
pub const DEFAULT_SOCKET: &str = ".calvin/send-file.sock";

/// One MCP session: the gateway and the runner it serves, and where its
/// tool calls count.
#[derive(Clone)]
pub struct McpHandler {
    gateway: Arc<Gateway>,
    runner: Arc<Runner>,
    metrics: Metrics,
}

impl McpHandler {
    pub fn new(gateway: Arc<Gateway>, runner: Arc<Runner>, metrics: Metrics) -> Self {
        Self {
            gateway,
            runner,
            metrics,
        }
    }
}

impl ServerHandler for McpHandler {
    fn get_info(&self) -> ServerConfig {
        InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("calvin", env!("CARGO_PKG_VERSION")))
            .with_instructions(self.gateway.instructions())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.gateway.tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let args = request.arguments.unwrap_or_default();
        // Counted as cancelled unless it ends below.
        let counted = self
            .metrics
            .tool_call(crate::tools::known_tool(&request.name).unwrap_or("unknown"));
        let call = self.gateway.call_tool(&self.runner, &request.name, &args);
        // A call the client cancels (notifications/cancelled, or the
        // session going away) stops here: what it waited for is dropped,
        // and a prompt it posted says nobody waits for it any more.
        tokio::select! {
            result = call => {
                counted.finish(if result.is_error == Some(true) {
                    ToolOutcome::Error
                } else {
                    ToolOutcome::Ok
                });
                Ok(result.into())
            }
            () = context.ct.cancelled() => {
                info!(tool = %request.name, "tool call cancelled by the client");
                Err(McpError::internal_error("the call was cancelled", None))
            }
        }
    }
}

/// Serves one session over stdin/stdout until the client goes away or
/// `shutdown` completes, with the send-file socket beside it; its tool
/// calls count in `metrics`. Then the session's previews are taken down.
pub async fn serve_stdio(
    gateway: Arc<Gateway>,
    context: SessionContext,
    socket: Option<PathBuf>,
    metrics: Metrics,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    let socket = socket.unwrap_or_else(|| context.session_dir.join(DEFAULT_SOCKET));
    let env_file = session_started(&gateway, &context).await;
    let runner = Arc::new(Runner::new(context));
    // Scripts are a convenience: the tools work without their socket.
    let scripts = match calvin_common::unix_socket::bind(&socket).await {
        Ok(listener) => {
            info!(
                socket = %socket.display(),
                secrets = %gateway.secret_store_said(),
                "send-file socket ({SEND_FILE_SOCKET_ENV})"
            );
            Some(tokio::spawn(serve_send_file_socket(
                listener,
                gateway.clone(),
                runner.clone(),
            )))
        }
        Err(err) => {
            warn!(%err, "no send-file socket: calvin-send-file will not reach this session");
            None
        }
    };
    let service = McpHandler::new(gateway.clone(), runner.clone(), metrics)
        .serve(rmcp::transport::stdio())
        .await?;
    let stop = service.cancellation_token();
    let waiting = service.waiting();
    tokio::pin!(waiting);
    tokio::select! {
        _ = &mut waiting => {}
        () = shutdown => {
            info!("told to stop: the session ends");
            stop.cancel();
            let _ = waiting.await;
        }
    }
    let down = gateway.end_session_previews(&runner).await;
    if !down.is_empty() {
        info!(previews = ?down, "the session ended: its previews are down");
    }
    if let Some(scripts) = scripts {
        scripts.abort();
        let _ = std::fs::remove_file(&socket);
    }
    if let Some(env_file) = env_file {
        session_env::end(&env_file);
    }
    Ok(())
}

/// A session starts: its env file is written from the store (so BASH_ENV
/// names a file from the first command on) and the workspace's list goes
/// into its AGENTS.md. The env file's path when it was written.
async fn session_started(gateway: &Gateway, context: &SessionContext) -> Option<PathBuf> {
    gateway.keep_workspace_list(&context.session_dir).await;
    let store = gateway.secrets.clone().ok()?;
    let env_file = context.env_file(&gateway.runtime_dir);
    let key = context.secrets_key();
    let path = env_file.clone();
    let written = tokio::task::spawn_blocking(move || {
        let secrets = store.secrets(&key).map_err(|e| e.to_string())?;
        session_env::start(&path, &secrets).map_err(|e| e.to_string())
    })
    .await;
    match written {
        Ok(Ok(())) => Some(env_file),
        Ok(Err(err)) => {
            warn!(%err, env_file = %env_file.display(), "the session's env file was not written");
            None
        }
        Err(err) => {
            warn!(%err, "the session's env file was not written");
            None
        }
    }
}

type Body = BoxBody<Bytes, Infallible>;

fn json_response(status: StatusCode, value: Value) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(value.to_string())).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    response
}

/// What `calvin-send-file` sends: the path (made absolute by the script)
/// and an optional comment.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SendFileRequest {
    pub path: String,
    #[serde(default)]
    pub comment: Option<String>,
}

/// The largest request body the send-file and session APIs read.
const MAX_API_BODY: usize = 64 << 10;

async fn read_json<T: serde::de::DeserializeOwned>(req: Request<Incoming>) -> Result<T, String> {
    let body = Limited::new(req.into_body(), MAX_API_BODY)
        .collect()
        .await
        .map_err(|e| format!("cannot read the request: {e}"))?
        .to_bytes();
    serde_json::from_slice(&body).map_err(|e| format!("bad request: {e}"))
}

/// `POST .../send-file`: the tool's checks and the runner's count.
async fn send_file_api(
    req: Request<Incoming>,
    gateway: &Gateway,
    runner: &Runner,
) -> Response<Body> {
    let request: SendFileRequest = match read_json(req).await {
        Ok(r) => r,
        Err(e) => return json_response(StatusCode::BAD_REQUEST, json!({ "error": e })),
    };
    let mut args = serde_json::Map::new();
    args.insert("path".into(), Value::String(request.path));
    if let Some(comment) = request.comment {
        args.insert("comment".into(), Value::String(comment));
    }
    let outcome = match SendFileArgs::parse(&args) {
        Ok(args) => gateway.send_file(runner, args).await,
        Err(e) => Err(e),
    };
    match outcome {
        Ok((text, structured)) => json_response(
            StatusCode::OK,
            json!({ "message": text, "result": structured }),
        ),
        Err(reason) => json_response(StatusCode::UNPROCESSABLE_ENTITY, json!({ "error": reason })),
    }
}

async fn serve_send_file_socket(
    listener: UnixListener,
    gateway: Arc<Gateway>,
    runner: Arc<Runner>,
) {
    let uid = rustix::process::getuid().as_raw();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        match stream.peer_cred() {
            Ok(cred) if cred.uid() == uid => {}
            _ => {
                warn!("send-file socket: refused a connection from another user");
                continue;
            }
        }
        let (gateway, runner) = (gateway.clone(), runner.clone());
        tokio::spawn(async move {
            let service = service_fn(move |req: Request<Incoming>| {
                let (gateway, runner) = (gateway.clone(), runner.clone());
                async move {
                    let response = if req.method() == Method::POST
                        && req.uri().path() == "/send-file"
                    {
                        send_file_api(req, &gateway, &runner).await
                    } else {
                        json_response(StatusCode::NOT_FOUND, json!({ "error": "POST /send-file" }))
                    };
                    Ok::<_, Infallible>(response)
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// A runner's registration with the daemon: one runner, whatever number
/// of MCP sessions and scripts use it.
struct Registration {
    runner: Arc<Runner>,
    mcp: McpEndpoint<McpHandler>,
    /// The env file written for it, removed when it ends.
    env_file: Option<PathBuf>,
}

struct Daemon {
    gateway: Arc<Gateway>,
    /// Which sessions' previews end with them.
    previews: Arc<PreviewOwners>,
    /// Slack's events, when this daemon holds Socket Mode.
    hub: Option<Arc<EventHub>>,
    sessions: Mutex<HashMap<String, Arc<Registration>>>,
    allowed_origins: Vec<String>,
    addr: SocketAddr,
    registration_token: String,
    metrics: Metrics,
}

/// What the daemon serves with.
pub struct DaemonSetup {
    pub gateway: Arc<Gateway>,
    pub hub: Option<Arc<EventHub>>,
    pub allowed_origins: Vec<String>,
    pub registration_token: String,
    /// Where its sessions and their tool calls count.
    pub metrics: Metrics,
}

/// How long a stopping daemon takes its sessions' previews down.
const SHUTDOWN_PREVIEWS_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// Serves the daemon on `listener` until `shutdown` completes; the env
/// files of the sessions still registered then, for the caller to end
/// ([`session_env::end`]) once nothing can set a secret any more.
/// Registering a session needs `Authorization: Bearer
/// <registration_token>`.
pub async fn serve_http(
    setup: DaemonSetup,
    listener: TcpListener,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<Vec<PathBuf>> {
    let addr = listener.local_addr()?;
    anyhow::ensure!(
        addr.ip().is_loopback(),
        "the gateway daemon listens on loopback only, not {addr}"
    );
    let daemon = Arc::new(Daemon {
        gateway: setup.gateway,
        previews: Arc::default(),
        hub: setup.hub,
        sessions: Mutex::new(HashMap::new()),
        allowed_origins: setup.allowed_origins,
        addr,
        registration_token: setup.registration_token,
        metrics: setup.metrics,
    });
    tokio::pin!(shutdown);
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => accepted?,
            () = &mut shutdown => break,
        };
        let daemon = daemon.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let daemon = daemon.clone();
                async move { Ok::<_, Infallible>(daemon.route(req).await) }
            });
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
    let ended: Vec<Arc<Registration>> = daemon.lock().drain().map(|(_, r)| r).collect();
    // The sessions end with the daemon, and their previews with them,
    // within a grace period (each take-down has its own bound too).
    let previews_down = async {
        for registration in &ended {
            daemon
                .gateway
                .end_session_previews(&registration.runner)
                .await;
        }
    };
    if tokio::time::timeout(SHUTDOWN_PREVIEWS_GRACE, previews_down)
        .await
        .is_err()
    {
        warn!("the daemon stopped before every session's previews were taken down");
    }
    let mut env_files: Vec<PathBuf> = ended.iter().filter_map(|r| r.env_file.clone()).collect();
    env_files.sort();
    env_files.dedup();
    Ok(env_files)
}

/// An NDJSON stream of a session's events, with an empty line every 15 s
/// so that a dead client is noticed.
struct EventStream {
    /// A line sent before the events (`{"watching": true}`).
    first: Option<Bytes>,
    events: tokio::sync::mpsc::Receiver<Value>,
    heartbeat: tokio::time::Interval,
}

impl EventStream {
    fn response(
        first: Option<Value>,
        events: tokio::sync::mpsc::Receiver<Value>,
    ) -> Response<Body> {
        let heartbeat = tokio::time::interval_at(
            tokio::time::Instant::now() + std::time::Duration::from_secs(15),
            std::time::Duration::from_secs(15),
        );
        let first = first.map(|v| Bytes::from(format!("{v}\n")));
        let mut response = Response::new(
            EventStream {
                first,
                events,
                heartbeat,
            }
            .boxed(),
        );
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("application/x-ndjson"),
        );
        response
    }
}

impl hyper::body::Body for EventStream {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Infallible>>> {
        use std::task::Poll;
        if let Some(first) = self.first.take() {
            return Poll::Ready(Some(Ok(hyper::body::Frame::data(first))));
        }
        match self.events.poll_recv(cx) {
            Poll::Ready(Some(event)) => {
                let line = format!("{event}\n");
                return Poll::Ready(Some(Ok(hyper::body::Frame::data(Bytes::from(line)))));
            }
            Poll::Ready(None) => return Poll::Ready(None),
            Poll::Pending => {}
        }
        match self.heartbeat.poll_tick(cx) {
            Poll::Ready(_) => Poll::Ready(Some(Ok(hyper::body::Frame::data(Bytes::from_static(
                b"\n",
            ))))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Daemon {
    async fn route(&self, req: Request<Incoming>) -> Response<Body> {
        if let Err(why) = self.check_host_and_origin(&req) {
            return json_response(StatusCode::FORBIDDEN, json!({ "error": why }));
        }
        let path = req.uri().path().to_owned();
        let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
        match (req.method().clone(), parts.as_slice()) {
            (Method::POST, ["sessions"]) => self.register(req).await,
            (Method::POST, ["secret-requests"]) => self.secret_request(req).await,
            (Method::GET, ["reactions"]) => self.reactions(&req),
            (Method::GET, ["healthz"]) => json_response(
                StatusCode::OK,
                json!({ "status": "ok", "events": self.hub.is_some() }),
            ),
            (method, ["sessions", id, rest @ ..]) => {
                let Some(registration) = self.session(id) else {
                    return json_response(
                        StatusCode::NOT_FOUND,
                        json!({ "error": "no such session: register with POST /sessions" }),
                    );
                };
                match (method, rest) {
                    (Method::DELETE, []) => {
                        let (ended, env_file) = {
                            let mut sessions = self.lock();
                            let ended = sessions.remove(*id);
                            self.metrics.sessions(sessions.len());
                            let env_file = ended.as_ref().and_then(|ended| {
                                // A restarted runner's new registration of
                                // the same thread keeps the file.
                                let shared =
                                    sessions.values().any(|r| r.env_file == ended.env_file);
                                ended.env_file.clone().filter(|_| !shared)
                            });
                            (ended, env_file)
                        };
                        if let Some(env_file) = env_file {
                            session_env::end(&env_file);
                        }
                        // Two DELETEs at once: only the one that removed it
                        // takes its previews down.
                        let down = match ended {
                            Some(ended) => self.gateway.end_session_previews(&ended.runner).await,
                            None => Vec::new(),
                        };
                        json_response(
                            StatusCode::OK,
                            json!({ "ended": id, "previews_down": down }),
                        )
                    }
                    (Method::GET, ["events"]) => self.events(&registration.runner.context),
                    (_, ["mcp"]) => registration.mcp.handle(req).await,
                    (Method::POST, ["send-file"]) => {
                        send_file_api(req, &self.gateway, &registration.runner).await
                    }
                    _ => json_response(
                        StatusCode::NOT_FOUND,
                        json!({ "error": "no such endpoint" }),
                    ),
                }
            }
            _ => json_response(
                StatusCode::NOT_FOUND,
                json!({ "error": "no such endpoint" }),
            ),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Registration>>> {
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn session(&self, id: &str) -> Option<Arc<Registration>> {
        self.lock().get(id).cloned()
    }

    /// `POST /sessions` with the session's context: its endpoints.
    async fn register(&self, req: Request<Incoming>) -> Response<Body> {
        if !self.authorized(&req) {
            return json_response(
                StatusCode::UNAUTHORIZED,
                json!({ "error": "registering a session needs Authorization: Bearer <the daemon's registration token>" }),
            );
        }
        let mut context: SessionContext = match read_json(req).await {
            Ok(c) => c,
            Err(e) => return json_response(StatusCode::BAD_REQUEST, json!({ "error": e })),
        };
        if let Err(why) = context.check(self.gateway.chat.platform()) {
            return json_response(StatusCode::BAD_REQUEST, json!({ "error": why }));
        }
        context.resolve_env_file(&self.gateway.runtime_dir);
        let env_file = session_started(&self.gateway, &context).await;
        let id = crate::random_id::random_hex::<16>();
        info!(
            session = %id,
            channel = %context.channel,
            thread_ts = %context.thread_ts,
            "runner session registered"
        );
        let runner = Arc::new(Runner::sharing_previews(context, self.previews.clone()));
        let (gateway, shared, metrics) =
            (self.gateway.clone(), runner.clone(), self.metrics.clone());
        let mcp = McpEndpoint::new(
            move || {
                Ok(McpHandler::new(
                    gateway.clone(),
                    shared.clone(),
                    metrics.clone(),
                ))
            },
            StreamableHttpServerConfig::default()
                .with_allowed_hosts(loopback_hosts(self.addr))
                .with_allowed_origins(self.origins())
                .enforce_origin_validation(),
        );
        let registration = Arc::new(Registration {
            runner,
            mcp,
            env_file: env_file.clone(),
        });
        {
            let mut sessions = self.lock();
            sessions.insert(id.clone(), registration);
            self.metrics.session_registered(sessions.len());
        }
        let base = format!("http://{}/sessions/{id}", self.addr);
        json_response(
            StatusCode::CREATED,
            json!({
                "session": id,
                "mcp_url": format!("{base}/mcp"),
                "send_file_url": format!("{base}/send-file"),
                "events_url": format!("{base}/events"),
                "env_file": env_file,
            }),
        )
    }

    /// `GET /sessions/<id>/events`: the session's thread's events.
    fn events(&self, context: &SessionContext) -> Response<Body> {
        let Some(hub) = &self.hub else {
            return json_response(
                StatusCode::SERVICE_UNAVAILABLE,
                json!({ "error": "this daemon does not receive Slack's events: set [slack] app_token (or SLACK_APP_TOKEN) for Socket Mode" }),
            );
        };
        let events = hub.subscribe(&context.channel, &context.thread_ts);
        EventStream::response(None, events)
    }

    /// `GET /reactions?channel=C`: the reactions added in a channel, for a
    /// stdio gateway's prompt; the first line says the watch is on.
    fn reactions(&self, req: &Request<Incoming>) -> Response<Body> {
        if !self.authorized(req) {
            return json_response(
                StatusCode::UNAUTHORIZED,
                json!({ "error": "this needs Authorization: Bearer <the daemon's registration token>" }),
            );
        }
        let Some(hub) = &self.hub else {
            return json_response(
                StatusCode::SERVICE_UNAVAILABLE,
                json!({ "error": "this daemon does not receive Slack's events: set [slack] app_token (or SLACK_APP_TOKEN) for Socket Mode" }),
            );
        };
        let query: HashMap<String, String> = req
            .uri()
            .query()
            .map(|q| {
                url::form_urlencoded::parse(q.as_bytes())
                    .into_owned()
                    .collect()
            })
            .unwrap_or_default();
        let Some(channel) = query.get("channel") else {
            return json_response(
                StatusCode::BAD_REQUEST,
                json!({ "error": "give channel: the conversation whose reactions to stream" }),
            );
        };
        if let Err(why) = self.gateway.chat.platform().check_session_channel(channel) {
            return json_response(StatusCode::BAD_REQUEST, json!({ "error": why }));
        }
        let events = hub.watch_reactions(channel);
        EventStream::response(Some(json!({ "watching": true })), events)
    }

    /// `POST /secret-requests`: request_secret for a stdio gateway.
    async fn secret_request(&self, req: Request<Incoming>) -> Response<Body> {
        if !self.authorized(&req) {
            return json_response(
                StatusCode::UNAUTHORIZED,
                json!({ "error": "this needs Authorization: Bearer <the daemon's registration token>" }),
            );
        }
        let mut posted: PostRequest = match read_json(req).await {
            Ok(p) => p,
            Err(e) => return json_response(StatusCode::BAD_REQUEST, json!({ "error": e })),
        };
        // The same checks as the tool's, at this boundary.
        if let Err(why) = posted
            .session
            .check(self.gateway.chat.platform())
            .and_then(|()| posted.request.check())
        {
            return json_response(StatusCode::UNPROCESSABLE_ENTITY, json!({ "error": why }));
        }
        posted.session.resolve_env_file(&self.gateway.runtime_dir);
        match &self.gateway.secret_route {
            SecretRoute::Here(requests) => {
                match requests.post(&posted.session, &posted.request).await {
                    Ok(result) => json_response(StatusCode::OK, json!({ "result": result })),
                    Err(why) => {
                        json_response(StatusCode::UNPROCESSABLE_ENTITY, json!({ "error": why }))
                    }
                }
            }
            SecretRoute::Nowhere(why) => {
                json_response(StatusCode::SERVICE_UNAVAILABLE, json!({ "error": why }))
            }
            SecretRoute::Daemon(_) => json_response(
                StatusCode::SERVICE_UNAVAILABLE,
                json!({ "error": "no secret was requested: this daemon forwards secret requests itself" }),
            ),
        }
    }

    fn authorized(&self, req: &Request<Incoming>) -> bool {
        use subtle::ConstantTimeEq;
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or_default();
        !self.registration_token.is_empty()
            && bool::from(given.as_bytes().ct_eq(self.registration_token.as_bytes()))
    }

    /// Loopback origins on any port, and the configured ones.
    fn origins(&self) -> Vec<String> {
        let mut origins: Vec<String> =
            ["http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*"]
                .iter()
                .map(|s| s.to_string())
                .collect();
        origins.extend(self.allowed_origins.iter().cloned());
        origins
    }

    /// Host must name this loopback daemon; a browser's Origin must be a
    /// loopback page or a configured one.
    fn check_host_and_origin(&self, req: &Request<Incoming>) -> Result<(), String> {
        let host = req
            .headers()
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or_default();
        let host_name = host
            .parse::<http::uri::Authority>()
            .map(|a| a.host().to_owned())
            .unwrap_or_default();
        if !["localhost", "127.0.0.1", "[::1]"].contains(&host_name.as_str()) {
            return Err(format!("Host {host:?} is not this loopback gateway"));
        }
        if let Some(origin) = req.headers().get(header::ORIGIN) {
            let origin = origin.to_str().unwrap_or_default();
            let loopback = ["http://localhost", "http://127.0.0.1", "http://[::1]"]
                .iter()
                .any(|o| origin == *o || origin.starts_with(&format!("{o}:")));
            if !loopback && !self.allowed_origins.iter().any(|o| o == origin) {
                return Err(format!("Origin {origin:?} is not allowed"));
            }
        }
        Ok(())
    }
}

fn loopback_hosts(addr: SocketAddr) -> Vec<String> {
    let port = addr.port();
    ["localhost", "127.0.0.1", "[::1]"]
        .iter()
        .flat_map(|h| [h.to_string(), format!("{h}:{port}")])
        .collect()
}

/// Finds the stdio gateway's socket for a script: the variable, else
/// `.calvin/send-file.sock` in `dir` or a parent, if it is the user's own
/// in a folder only the user can write to (another user could plant one
/// in a shared folder such as /tmp).
pub fn find_send_file_socket(dir: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    if let Some(path) = std::env::var_os(SEND_FILE_SOCKET_ENV) {
        return Some(PathBuf::from(path));
    }
    let uid = rustix::process::getuid().as_raw();
    let ours = |path: &Path| {
        std::fs::symlink_metadata(path).is_ok_and(|m| m.uid() == uid)
            && path.parent().is_some_and(|folder| {
                std::fs::symlink_metadata(folder).is_ok_and(|m| session_env::users_own(&m))
            })
    };
    dir.ancestors()
        .map(|d| d.join(DEFAULT_SOCKET))
        .find(|p| ours(p))
}
