//! The integration callbacks of the gateway's Mattermost buttons and
//! dialogs, in the `serve` daemon: an HTTP/1.1 listener Mattermost posts
//! to, routing to the [`EventHub`] what Slack's Socket Mode brings as
//! interactions ([`crate::socket_mode`]).
//!
//! - `POST /actions`: a button clicked. Mattermost posts the integration
//!   request `{user_id, channel_id, post_id, trigger_id, context, ...}` to
//!   the button's `integration.url` and waits for the answer (a post
//!   update or an ephemeral text; `{}` changes nothing). Its `context` must
//!   be one [`CallbackKey::button_context`] signed. A click that opens
//!   nothing (a request no longer open, a person not its owner) is told
//!   why in the answer's `ephemeral_text`; any other goes to
//!   [`EventHub::on_click`], which answers at once and works in the
//!   background.
//! - `POST /dialogs`: a dialog submitted (`{type: "dialog_submission",
//!   callback_id, state, user_id, channel_id, team_id, submission,
//!   cancelled}`). A cancellation (sent only with `notify_on_cancel`) is
//!   answered `{}` and routed nowhere. Otherwise `state` must be one
//!   [`CallbackKey::dialog_state`] signed for that `callback_id`; each
//!   element (named `BLOCK_ID:ACTION_ID`, [`sign::element_name`]) becomes
//!   a [`FormSubmit`] value, and [`EventHub::on_submit`]'s answer decides:
//!   `{}` closes the dialog, `{"errors": {ELEMENT_NAME: message}}` keeps
//!   it open with each message under its element (a block none of the
//!   submitted elements belongs to goes to the dialog-wide `"error"`).
//! - Refusals: a callback whose signature does not verify is 403, nothing
//!   routed; a body over [`MAX_CALLBACK_BODY`] 413; another method 405;
//!   another path 404; a body that is not such a request 400. Errors are
//!   JSON `{"error": text}` and never repeat the body.
//! - Logs: never a body (a submission's values may be secrets).
//! - Metrics: each callback by route and outcome ([`crate::metrics`]).
//!
//! Sources: the API v4 reference (`api/v4/source/actions.yaml` of
//! github.com/mattermost/mattermost: `/actions/dialogs/open`'s `url`,
//! `callback_id`, `state`, `notify_on_cancel`; `/actions/dialogs/submit`'s
//! `submission`, a map of element names to values). The reference does not
//! describe what Mattermost posts to an integration or what it reads back;
//! that is from the developer documentation ("Interactive messages",
//! "Interactive dialogs", developers.mattermost.com) and
//! `server/public/model/integration_action.go` (`PostActionIntegrationRequest`,
//! `SubmitDialogRequest`, `SubmitDialogResponse{error, errors}`).

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tracing::{Instrument, debug, info, warn};

use super::sign::{self, CallbackKey};
use crate::events::{ButtonClick, EventHub, FormAnswer, FormSubmit};
use crate::metrics::{CallbackOutcome, CallbackRoute, Metrics};

/// The largest request body read.
pub const MAX_CALLBACK_BODY: usize = 64 << 10;
/// Time to send a request's head, and then its body.
const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once; more wait to be accepted.
const MAX_CONNECTIONS: usize = 256;
/// How long a shutdown waits for requests under way.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// A running listener.
pub struct Callbacks {
    addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Callbacks {
    /// Serves the callbacks on `listener` (in the background, on the
    /// current Tokio runtime), checking signatures with `key` and routing
    /// to `hub`.
    pub fn start(
        listener: TcpListener,
        key: CallbackKey,
        hub: Arc<EventHub>,
        metrics: Metrics,
    ) -> std::io::Result<Callbacks> {
        let addr = listener.local_addr()?;
        let (stop, stopped) = watch::channel(false);
        let routes = Arc::new(Routes { key, hub, metrics });
        let span = tracing::info_span!("mattermost_callbacks", %addr);
        let task = tokio::spawn(serve(listener, routes, stopped).instrument(span));
        Ok(Callbacks { addr, stop, task })
    }

    /// The address really bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting; requests under way finish within a grace period.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

async fn serve(listener: TcpListener, routes: Arc<Routes>, mut stop: watch::Receiver<bool>) {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    info!("Mattermost callbacks listening");
    loop {
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot,
            () = stopped(&mut stop) => break,
        };
        let Ok(slot) = slot else { break };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = stopped(&mut stop) => break,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(err) => {
                // Out of descriptors, most likely: let some close.
                warn!(%err, "cannot accept a callback connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let routes = routes.clone();
        let service = service_fn(move |req| {
            let routes = routes.clone();
            async move { Ok::<_, Infallible>(routes.route(req).await) }
        });
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(READ_TIMEOUT)
            .serve_connection(TokioIo::new(stream), service);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            let _ = connection.await;
            drop(slot);
        });
    }
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        warn!("the Mattermost callbacks stopped before every request was answered");
    }
}

/// Why a callback is refused.
#[derive(Debug, PartialEq, Eq)]
enum Refusal {
    /// 400, with what was wrong.
    BadRequest(&'static str),
    /// 403: not signed with the bot's key.
    Forbidden,
}

/// What a dialog submission asks for (no `Debug`: it may hold secrets).
enum Submission {
    Cancelled,
    /// The form, and the element names of each block submitted.
    Form(FormSubmit, HashMap<String, Vec<String>>),
}

/// A button's integration request (`PostActionIntegrationRequest`).
#[derive(Deserialize)]
struct ActionRequest {
    #[serde(default)]
    user_id: String,
    #[serde(default)]
    channel_id: String,
    #[serde(default)]
    post_id: String,
    #[serde(default)]
    trigger_id: String,
    #[serde(default)]
    context: Value,
}

/// A dialog submission (`SubmitDialogRequest`).
#[derive(Deserialize)]
struct DialogRequest {
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    callback_id: String,
    #[serde(default)]
    state: String,
    #[serde(default)]
    user_id: String,
    #[serde(default)]
    submission: Map<String, Value>,
    #[serde(default)]
    cancelled: bool,
}

struct Routes {
    key: CallbackKey,
    hub: Arc<EventHub>,
    metrics: Metrics,
}

type Answer = (CallbackOutcome, StatusCode, Value);

impl Routes {
    async fn route(&self, req: Request<Incoming>) -> Response<Full<Bytes>> {
        // `[mattermost] callback_url` may have a path (a reverse proxy's
        // prefix, kept or not): the last segment names the route.
        let path = req.uri().path();
        let route = match path.rsplit('/').next() {
            Some("actions") if path.starts_with('/') => CallbackRoute::Action,
            Some("dialogs") if path.starts_with('/') => CallbackRoute::Dialog,
            _ => {
                self.metrics
                    .mattermost_callback(CallbackRoute::Other, CallbackOutcome::BadRequest);
                return error(
                    StatusCode::NOT_FOUND,
                    "no such callback: the gateway serves POST /actions and POST /dialogs",
                );
            }
        };
        let (outcome, status, body) = if req.method() != Method::POST {
            let (status, body) = refusal(StatusCode::METHOD_NOT_ALLOWED, "only POST is served");
            (CallbackOutcome::BadRequest, status, body)
        } else {
            match read_body(req).await {
                Ok(body) if route == CallbackRoute::Action => self.action(&body).await,
                Ok(body) => self.dialog(&body),
                Err(BodyError::TooLarge) => {
                    let text = "the body is over 64 KiB";
                    let (status, body) = refusal(StatusCode::PAYLOAD_TOO_LARGE, text);
                    (CallbackOutcome::TooLarge, status, body)
                }
                Err(BodyError::Unreadable) => {
                    let (status, body) =
                        refusal(StatusCode::BAD_REQUEST, "the body could not be read");
                    (CallbackOutcome::BadRequest, status, body)
                }
            }
        };
        self.metrics.mattermost_callback(route, outcome);
        let mut response = json_response(status, &body);
        if status == StatusCode::METHOD_NOT_ALLOWED {
            response
                .headers_mut()
                .insert(header::ALLOW, header::HeaderValue::from_static("POST"));
        }
        response
    }

    async fn action(&self, body: &[u8]) -> Answer {
        match self.click(body) {
            // A click that opens nothing is told why in the answer: an
            // ephemeral text needs no permission, a posted ephemeral
            // message a system admin's.
            Ok(click) => match self.hub.click_refusal(&click).await {
                Some(text) => (
                    CallbackOutcome::Routed,
                    StatusCode::OK,
                    json!({ "ephemeral_text": text }),
                ),
                None => {
                    debug!(user = %click.user, action_id = %click.action_id, "a button click was routed");
                    self.hub.on_click(click);
                    (CallbackOutcome::Routed, StatusCode::OK, json!({}))
                }
            },
            Err(refused) => self.refused(refused),
        }
    }

    fn dialog(&self, body: &[u8]) -> Answer {
        match self.submission(body) {
            Ok(Submission::Cancelled) => (CallbackOutcome::Cancelled, StatusCode::OK, json!({})),
            Ok(Submission::Form(form, names)) => match self.hub.on_submit(form) {
                FormAnswer::Close => (CallbackOutcome::Routed, StatusCode::OK, json!({})),
                FormAnswer::Errors(errors) => (
                    CallbackOutcome::KeptOpen,
                    StatusCode::OK,
                    errors_answer(errors, &names),
                ),
            },
            Err(refused) => self.refused(refused),
        }
    }

    fn refused(&self, why: Refusal) -> Answer {
        let (outcome, (status, body)) = match why {
            Refusal::BadRequest(why) => (
                CallbackOutcome::BadRequest,
                refusal(StatusCode::BAD_REQUEST, why),
            ),
            Refusal::Forbidden => {
                info!("a callback not signed by this gateway was refused");
                (
                    CallbackOutcome::Forbidden,
                    refusal(
                        StatusCode::FORBIDDEN,
                        "this callback's signature does not verify: it is not one of this \
                         gateway's buttons or dialogs (or the bot token changed since)",
                    ),
                )
            }
        };
        (outcome, status, body)
    }

    /// The click a button's integration request is, if signed.
    fn click(&self, body: &[u8]) -> Result<ButtonClick, Refusal> {
        let request: ActionRequest = serde_json::from_slice(body)
            .map_err(|_| Refusal::BadRequest("the body is not a Mattermost integration request"))?;
        if request.user_id.is_empty() {
            return Err(Refusal::BadRequest("the request names no user_id"));
        }
        let (action_id, value) = self
            .key
            .open_button_context(&request.context)
            .ok_or(Refusal::Forbidden)?;
        Ok(ButtonClick {
            user: request.user_id,
            channel: request.channel_id,
            message_ts: request.post_id,
            trigger_id: request.trigger_id,
            action_id,
            value,
        })
    }

    /// The form a dialog submission is, if signed (or its cancellation).
    fn submission(&self, body: &[u8]) -> Result<Submission, Refusal> {
        let request: DialogRequest = serde_json::from_slice(body)
            .map_err(|_| Refusal::BadRequest("the body is not a Mattermost dialog submission"))?;
        if request
            .kind
            .as_deref()
            .is_some_and(|k| k != "dialog_submission")
        {
            return Err(Refusal::BadRequest(
                "only dialog submissions are served here",
            ));
        }
        if request.cancelled {
            return Ok(Submission::Cancelled);
        }
        if request.user_id.is_empty() {
            return Err(Refusal::BadRequest("the submission names no user_id"));
        }
        let private_metadata = self
            .key
            .open_dialog_state(&request.callback_id, &request.state)
            .ok_or(Refusal::Forbidden)?;
        let mut values = Vec::new();
        let mut names: HashMap<String, Vec<String>> = HashMap::new();
        for (name, value) in &request.submission {
            let Some((block, action)) = sign::split_element_name(name) else {
                continue;
            };
            let value = match value {
                Value::String(s) => s.clone(),
                Value::Bool(b) => b.to_string(),
                Value::Number(n) => n.to_string(),
                Value::Null => String::new(),
                // Not an element the gateway's dialogs have.
                Value::Array(_) | Value::Object(_) => continue,
            };
            values.push((block.to_owned(), action.to_owned(), value));
            names
                .entry(block.to_owned())
                .or_default()
                .push(name.clone());
        }
        Ok(Submission::Form(
            FormSubmit {
                user: request.user_id,
                callback_id: request.callback_id,
                private_metadata,
                values,
            },
            names,
        ))
    }
}

/// `{"errors": {ELEMENT_NAME: message}}` for the blocks' errors; a block
/// without a submitted element goes to `"error"`, under the whole dialog.
fn errors_answer(errors: Vec<(String, String)>, names: &HashMap<String, Vec<String>>) -> Value {
    let mut by_element = Map::new();
    let mut general = Vec::new();
    for (block, message) in errors {
        match names.get(&block) {
            Some(elements) => {
                for name in elements {
                    by_element.insert(name.clone(), Value::String(message.clone()));
                }
            }
            None => general.push(message),
        }
    }
    let mut answer = json!({"errors": by_element});
    if !general.is_empty() {
        answer["error"] = Value::String(general.join(" "));
    }
    answer
}

enum BodyError {
    TooLarge,
    Unreadable,
}

/// The body, at most [`MAX_CALLBACK_BODY`] bytes, within [`READ_TIMEOUT`].
async fn read_body(req: Request<Incoming>) -> Result<Bytes, BodyError> {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_CALLBACK_BODY as u64) {
        return Err(BodyError::TooLarge);
    }
    let body = Limited::new(req.into_body(), MAX_CALLBACK_BODY).collect();
    match tokio::time::timeout(READ_TIMEOUT, body).await {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(err)) if err.downcast_ref::<LengthLimitError>().is_some() => {
            Err(BodyError::TooLarge)
        }
        Ok(Err(_)) | Err(_) => Err(BodyError::Unreadable),
    }
}

fn refusal(status: StatusCode, text: &str) -> (StatusCode, Value) {
    (status, json!({"error": text}))
}

fn error(status: StatusCode, text: &str) -> Response<Full<Bytes>> {
    json_response(status, &json!({"error": text}))
}

fn json_response(status: StatusCode, body: &Value) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    use http::HeaderMap;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;
    use tokio::sync::mpsc;

    use crate::chat::{
        ChatBackend, ChatError, Conversation, Found, Posted, Text, ThreadMessage, ThreadRef,
        Upload, Uploaded, Workspace,
    };
    use crate::secret_request::{ACTION_ID, CALLBACK_ID, SecretRequests};

    const WITHIN: Duration = Duration::from_secs(10);
    const TOKEN: &str = "mm-bot-token";

    /// A chat backend that only records ephemeral messages (what a click
    /// on a request no longer open gets).
    struct Recorder(mpsc::UnboundedSender<(String, String, String)>);

    fn unused<T>() -> Result<T, ChatError> {
        Err(ChatError::Api("not_in_this_test".into()))
    }

    #[async_trait::async_trait]
    impl ChatBackend for Recorder {
        fn platform(&self) -> crate::chat::Platform {
            crate::chat::Platform::Mattermost
        }
        async fn resolve_link(&self, _: &str, _: &str) -> Result<crate::permalink::Target, String> {
            Err("not in this test".into())
        }
        async fn link_form(&self) -> String {
            String::new()
        }
        async fn find_person(&self, _: &str) -> Result<String, String> {
            Err("not in this test".into())
        }
        fn person_form(&self) -> &'static str {
            ""
        }
        async fn upload_file(&self, _: &ThreadRef, _: Upload) -> Result<Uploaded, ChatError> {
            unused()
        }
        async fn workspace(&self) -> Result<Workspace, ChatError> {
            unused()
        }
        async fn conversation(&self, _: &str) -> Result<Conversation, ChatError> {
            unused()
        }
        async fn members(&self, _: &str) -> Result<Vec<String>, ChatError> {
            unused()
        }
        async fn replies(&self, _: &str, _: &str) -> Result<Vec<ThreadMessage>, ChatError> {
            unused()
        }
        async fn permalink(&self, _: &str, _: &str) -> Result<String, ChatError> {
            unused()
        }
        async fn post(&self, _: &str, _: Option<&str>, _: Text<'_>) -> Result<Posted, ChatError> {
            unused()
        }
        async fn update(&self, _: &str, _: &str, _: Text<'_>) -> Result<(), ChatError> {
            unused()
        }
        async fn post_ephemeral(
            &self,
            channel: &str,
            user: &str,
            _: Option<&str>,
            text: &str,
        ) -> Result<(), ChatError> {
            let _ = self.0.send((channel.into(), user.into(), text.into()));
            Ok(())
        }
        async fn open_view(&self, _: &str, _: &Value) -> Result<String, ChatError> {
            unused()
        }
        async fn open_dm(&self, _: &str) -> Result<String, ChatError> {
            unused()
        }
        async fn user_name(&self, _: &str) -> Result<String, ChatError> {
            unused()
        }
        async fn add_reaction(&self, _: &str, _: &str, _: &str) -> Result<bool, ChatError> {
            unused()
        }
        async fn history(
            &self,
            _: &str,
            _: usize,
        ) -> Result<(Vec<ThreadMessage>, bool), ChatError> {
            unused()
        }
        fn can_search(&self) -> bool {
            false
        }
        async fn search(&self, _: &str, _: usize, _: &str) -> Result<Vec<Found>, ChatError> {
            unused()
        }
    }

    type Ephemerals = mpsc::UnboundedReceiver<(String, String, String)>;

    fn hub() -> (Arc<EventHub>, Ephemerals) {
        let (tx, rx) = mpsc::unbounded_channel();
        let requests = SecretRequests::new(
            Arc::new(Recorder(tx)),
            Err(crate::secrets::NoStore::NoKey),
            PathBuf::from("/none"),
        );
        (Arc::new(EventHub::new(Arc::new(requests))), rx)
    }

    async fn started() -> (Callbacks, Ephemerals, Metrics) {
        let (hub, ephemerals) = hub();
        let metrics = Metrics::default();
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let key = CallbackKey::from_token(TOKEN);
        let callbacks = Callbacks::start(listener, key, hub, metrics.clone()).expect("started");
        (callbacks, ephemerals, metrics)
    }

    /// A request through hyper's client: the status, headers and body.
    async fn request(
        addr: SocketAddr,
        method: &str,
        path: &str,
        body: Vec<u8>,
    ) -> (StatusCode, HeaderMap, Value) {
        let tcp = TcpStream::connect(addr).await.expect("connect");
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
            .await
            .expect("handshake");
        tokio::spawn(connection);
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, "gateway.test")
            .header(header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))
            .expect("a request");
        let response = tokio::time::timeout(WITHIN, sender.send_request(request))
            .await
            .expect("in time")
            .expect("an answer");
        let (status, headers) = (response.status(), response.headers().clone());
        let body = response
            .into_body()
            .collect()
            .await
            .expect("a body")
            .to_bytes();
        let body = serde_json::from_slice(&body).expect("a JSON answer");
        (status, headers, body)
    }

    async fn post(addr: SocketAddr, path: &str, body: Value) -> (StatusCode, Value) {
        let (status, _, body) = request(addr, "POST", path, body.to_string().into_bytes()).await;
        (status, body)
    }

    fn count(metrics: &Metrics, route: &str, outcome: &str) -> f64 {
        let series = format!(
            r#"calvin_gateway_mattermost_callbacks_total{{route="{route}",outcome="{outcome}"}} "#
        );
        let text = metrics.encode();
        text.lines()
            .find_map(|l| l.strip_prefix(&series)?.parse().ok())
            .unwrap_or(0.0)
    }

    fn click(context: Value) -> Value {
        json!({
            "user_id": "u1", "user_name": "ann", "channel_id": "ch1", "channel_name": "town",
            "team_id": "t1", "team_domain": "acme", "post_id": "p1", "trigger_id": "trig1",
            "type": "", "data_source": "", "context": context,
        })
    }

    #[tokio::test]
    async fn a_signed_click_reaches_the_hub_and_a_forged_one_is_refused() {
        let (callbacks, mut ephemerals, metrics) = started().await;
        let addr = callbacks.local_addr();
        let key = CallbackKey::from_token(TOKEN);
        let other = CallbackKey::from_token("another-token");
        let forged = [
            click(other.button_context(ACTION_ID, "req1")),
            click(json!({"action_id": ACTION_ID, "value": "req1"})),
            click(json!({"action_id": ACTION_ID, "value": "req2",
                         "sig": key.button_context(ACTION_ID, "req1")["sig"]})),
        ];
        for body in forged {
            let (status, answer) = post(addr, "/actions", body).await;
            assert_eq!(status, StatusCode::FORBIDDEN);
            assert!(
                answer["error"]
                    .as_str()
                    .is_some_and(|e| e.contains("does not verify")),
                "{answer}"
            );
        }
        let signed = click(key.button_context(ACTION_ID, "req-unknown"));
        let (status, answer) = post(addr, "/actions", signed).await;
        // A click on a request the flow does not hold is told so in the
        // answer itself, and no ephemeral message is posted.
        assert_eq!(status, StatusCode::OK);
        assert!(
            answer["ephemeral_text"]
                .as_str()
                .is_some_and(|t| t.contains("no longer open")),
            "{answer}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            ephemerals.try_recv().is_err(),
            "nothing was posted: neither for the forged clicks nor for the refused one"
        );
        assert_eq!(count(&metrics, "action", "routed"), 1.0);
        assert_eq!(count(&metrics, "action", "forbidden"), 3.0);
        callbacks.shutdown().await;
        assert!(
            TcpStream::connect(addr).await.is_err(),
            "nothing listens after the shutdown"
        );
    }

    /// Routes over a hub, and their key.
    fn routes() -> (CallbackKey, Routes) {
        let (hub, _) = hub();
        let key = CallbackKey::from_token(TOKEN);
        let routes = Routes {
            key: key.clone(),
            hub,
            metrics: Metrics::default(),
        };
        (key, routes)
    }

    #[tokio::test]
    async fn a_click_keeps_its_ids_and_the_signed_action() {
        let (key, routes) = routes();
        let body = click(key.button_context("calvin_set_secret", "abc")).to_string();
        let routed = routes.click(body.as_bytes()).expect("signed");
        assert_eq!(
            (
                routed.user.as_str(),
                routed.channel.as_str(),
                routed.message_ts.as_str(),
                routed.trigger_id.as_str(),
                routed.action_id.as_str(),
                routed.value.as_str()
            ),
            ("u1", "ch1", "p1", "trig1", "calvin_set_secret", "abc")
        );
        let mut nobody = click(key.button_context("a", "b"));
        nobody["user_id"] = json!("");
        assert!(matches!(
            routes.click(nobody.to_string().as_bytes()),
            Err(Refusal::BadRequest(_))
        ));
    }

    fn submission(callback_id: &str, state: &str, values: Value, cancelled: bool) -> Value {
        json!({
            "type": "dialog_submission", "callback_id": callback_id, "state": state,
            "user_id": "u1", "channel_id": "ch1", "team_id": "t1",
            "submission": values, "cancelled": cancelled,
        })
    }

    #[tokio::test]
    async fn dialogs_answer_errors_by_element_and_cancellations_route_nothing() {
        let (callbacks, _ephemerals, metrics) = started().await;
        let addr = callbacks.local_addr();
        let key = CallbackKey::from_token(TOKEN);
        let state = key.dialog_state(CALLBACK_ID, "req-unknown");
        let values = json!({"secret:value": "hunter2"});

        // The secret flow keeps the dialog open: the request is not held.
        let (status, answer) = post(
            addr,
            "/dialogs",
            submission(CALLBACK_ID, &state, values.clone(), false),
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            answer,
            json!({"errors": {"secret:value":
                "This request is no longer open: ask the session to request it again."}})
        );
        assert!(!answer.to_string().contains("hunter2"));

        // A cancellation is answered and not routed (routed, it would get
        // the same errors).
        for state in [state.as_str(), "forged.state"] {
            let body = submission(CALLBACK_ID, state, json!({}), true);
            assert_eq!(
                post(addr, "/dialogs", body).await,
                (StatusCode::OK, json!({}))
            );
        }

        // Another form of the gateway's: routed, and it closes.
        let other_state = key.dialog_state("other_form", "m");
        let body = submission("other_form", &other_state, values.clone(), false);
        assert_eq!(
            post(addr, "/dialogs", body).await,
            (StatusCode::OK, json!({}))
        );

        // A state signed for another callback id, or by another key.
        let forged = [
            submission(CALLBACK_ID, &other_state, values.clone(), false),
            submission(
                CALLBACK_ID,
                &CallbackKey::from_token("x").dialog_state(CALLBACK_ID, "req-unknown"),
                values.clone(),
                false,
            ),
        ];
        for body in forged {
            let (status, answer) = post(addr, "/dialogs", body).await;
            assert_eq!(status, StatusCode::FORBIDDEN, "{answer}");
        }
        let mut lookup = submission(CALLBACK_ID, &state, values, false);
        lookup["type"] = json!("refresh");
        assert_eq!(
            post(addr, "/dialogs", lookup).await.0,
            StatusCode::BAD_REQUEST
        );
        for (outcome, n) in [
            ("kept_open", 1.0),
            ("cancelled", 2.0),
            ("routed", 1.0),
            ("forbidden", 2.0),
            ("bad_request", 1.0),
        ] {
            assert_eq!(count(&metrics, "dialog", outcome), n, "{outcome}");
        }
        callbacks.shutdown().await;
    }

    #[tokio::test]
    async fn submitted_values_become_strings_keyed_by_block_and_action() {
        let (key, routes) = routes();
        let values = json!({
            "b1:text": "x", "b1:flag": true, "b2:count": 3, "b3:empty": null,
            "no_colon": "skipped", "b4:multi": ["a", "b"],
        });
        let state = key.dialog_state("form", "meta");
        let body = submission("form", &state, values, false).to_string();
        let Ok(Submission::Form(form, names)) = routes.submission(body.as_bytes()) else {
            panic!("a form");
        };
        assert_eq!(
            (
                form.user.as_str(),
                form.callback_id.as_str(),
                form.private_metadata.as_str()
            ),
            ("u1", "form", "meta")
        );
        let mut got = form.values.clone();
        got.sort();
        let want: Vec<(String, String, String)> = [
            ("b1", "flag", "true"),
            ("b1", "text", "x"),
            ("b2", "count", "3"),
            ("b3", "empty", ""),
        ]
        .iter()
        .map(|(b, a, v)| ((*b).into(), (*a).into(), (*v).into()))
        .collect();
        assert_eq!(got, want);
        let mut b1 = names.get("b1").cloned().unwrap_or_default();
        b1.sort();
        assert_eq!(b1, ["b1:flag", "b1:text"]);

        let answer = errors_answer(
            vec![
                ("b1".into(), "fix this".into()),
                ("gone".into(), "not shown in a field".into()),
            ],
            &names,
        );
        assert_eq!(
            answer,
            json!({"errors": {"b1:flag": "fix this", "b1:text": "fix this"},
                   "error": "not shown in a field"})
        );
    }

    /// Sends `raw` as it is; the answer's status line.
    async fn raw(addr: SocketAddr, raw: &[u8]) -> String {
        let mut tcp = TcpStream::connect(addr).await.expect("connect");
        tcp.write_all(raw).await.expect("sent");
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(WITHIN, tcp.read_to_end(&mut answer)).await;
        let answer = String::from_utf8_lossy(&answer).into_owned();
        answer.lines().next().unwrap_or_default().to_owned()
    }

    #[tokio::test]
    async fn bodies_methods_and_paths_are_limited() {
        let (callbacks, _ephemerals, metrics) = started().await;
        let addr = callbacks.local_addr();
        let (status, _, answer) =
            request(addr, "POST", "/actions", vec![b' '; MAX_CALLBACK_BODY + 1]).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{answer}");
        let (status, _, _) = request(addr, "POST", "/actions", vec![b' '; MAX_CALLBACK_BODY]).await;
        assert_eq!(
            status,
            StatusCode::BAD_REQUEST,
            "at the cap: read, not JSON"
        );
        // Chunked, so no Content-Length announces it.
        let chunk = vec![b'x'; MAX_CALLBACK_BODY + 1];
        let mut chunked = format!(
            "POST /dialogs HTTP/1.1\r\nHost: g\r\nTransfer-Encoding: chunked\r\n\
             Connection: close\r\n\r\n{:x}\r\n",
            chunk.len()
        )
        .into_bytes();
        chunked.extend_from_slice(&chunk);
        chunked.extend_from_slice(b"\r\n0\r\n\r\n");
        assert_eq!(raw(addr, &chunked).await, "HTTP/1.1 413 Payload Too Large");

        let (status, headers, _) = request(addr, "GET", "/actions", Vec::new()).await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(
            headers.get(header::ALLOW).map(|v| v.as_bytes()),
            Some(&b"POST"[..])
        );
        let (status, _, answer) = request(addr, "POST", "/hooks/x", b"{}".to_vec()).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{answer}");
        let (status, _, answer) = request(addr, "POST", "/dialogs", b"hunter2".to_vec()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(!answer.to_string().contains("hunter2"), "{answer}");
        assert_eq!(count(&metrics, "action", "too_large"), 1.0);
        assert_eq!(count(&metrics, "dialog", "too_large"), 1.0);
        assert_eq!(count(&metrics, "other", "bad_request"), 1.0);
        callbacks.shutdown().await;
    }
}
