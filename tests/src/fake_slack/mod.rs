//! A fake Slack Web API on 127.0.0.1:0, for tests of the gateway's Slack
//! backend and the tools above it. It keeps every message and file it was
//! given, for assertions.
//!
//! Methods, under `/api/`, each checked against its contract in
//! `shared/reference/slack-api-ref/methods/` (arguments, error codes,
//! example responses):
//!
//! - `auth.test`: the workspace and bot identity.
//! - `chat.postMessage`: `channel` (one of the known channel IDs, else
//!   `channel_not_found`), `text` / `markdown_text` / `blocks` /
//!   `attachments` (none: `no_text`; `markdown_text` with `text` or
//!   `blocks`: `markdown_text_conflict`), `blocks` a JSON array of objects
//!   with a `type` (else `invalid_blocks_format` / `invalid_blocks`),
//!   `thread_ts`. Answers `ok, channel, ts, message {type, user, bot_id,
//!   team, text, ts, thread_ts, blocks}`.
//! - `files.getUploadURLExternal`: `filename`, `length` (missing:
//!   `invalid_arguments`; 0: `missing_argument`), `alt_txt` (over 1,000
//!   characters: `alt_txt_too_large`). Answers `ok, upload_url, file_id`;
//!   the URL is `http://127.0.0.1:PORT/upload/<file_id>`.
//! - `POST /upload/<file_id>`: the bytes, raw (what slack-morphism's
//!   `files_upload_via_url` sends) or as the `file` part of a
//!   multipart/form-data body. No token needed (the URL is the secret);
//!   more or fewer bytes than the declared `length` is a 400. Answers
//!   `200 text/plain "OK - <length>"` like files.slack.com.
//! - `files.completeUploadExternal`: `files` (a JSON array of `{id,
//!   title}`; missing: `invalid_arguments`; not uploaded: `file_not_found`),
//!   `channel_id` or `channels` (unknown: `channel_not_found`),
//!   `thread_ts`, `initial_comment`. Each file shared becomes a
//!   [`SharedFile`] (Slack's `file_share` message). Answers `ok, files
//!   [{id, name, title, mimetype, size, permalink}]`.
//!
//! Every other method answers `unknown_method`. Responses carry every field
//! slack-morphism's strict response types require.
//!
//! Requests as Slack takes them: the token as `Authorization: Bearer` (or a
//! `token` argument; none: `not_authed`, a wrong one: `invalid_auth`);
//! arguments in the query string and in a form-urlencoded, multipart or JSON
//! body (JSON-typed arguments such as `blocks` may be JSON text). A POST body
//! without a content type is `missing_post_type`, another type
//! `invalid_post_type`, one that does not parse `invalid_form_data`.
//!
//! Faults, each once, for the named method (`"upload"` names the upload
//! URL): [`FakeSlack::fail_next`] answers `{ok: false, error}` (a 500 for
//! the upload), [`FakeSlack::rate_limit_next`] answers HTTP 429 with
//! Retry-After and `{ok: false, error: "ratelimited"}`. Faults come before
//! the token check. [`FakeSlack::reject_block_type`] makes chat.postMessage
//! answer `invalid_blocks` for a block of that type, with Slack's `errors`
//! and `response_metadata.messages`.

use std::collections::{HashMap, HashSet, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Map, Value, json};
use tokio::net::TcpListener;

const TEAM_ID: &str = "T0FAKE0001";
const BOT_USER_ID: &str = "U0FAKEBOT1";
const BOT_ID: &str = "B0FAKEBOT1";
/// files.getUploadURLExternal's limit on `alt_txt`.
const MAX_ALT_TXT_CHARS: usize = 1000;

/// A message posted with chat.postMessage.
#[derive(Debug, Clone, PartialEq)]
pub struct PostedMessage {
    pub channel: String,
    pub ts: String,
    pub thread_ts: Option<String>,
    pub text: Option<String>,
    /// The `blocks` array exactly as received.
    pub blocks: Option<Value>,
}

/// A file shared by files.completeUploadExternal.
#[derive(Debug, Clone, PartialEq)]
pub struct SharedFile {
    pub file_id: String,
    /// `None`: completed without a channel (a private file).
    pub channel: Option<String>,
    /// The `ts` of the file-share message (when shared into a channel).
    pub ts: Option<String>,
    pub thread_ts: Option<String>,
    pub filename: String,
    /// The title given, else the file name (as Slack does).
    pub title: String,
    pub initial_comment: Option<String>,
    pub alt_txt: Option<String>,
    pub bytes: Vec<u8>,
}

/// A running fake; dropped, it stops accepting.
pub struct FakeSlack {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeSlack {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Shared {
    token: String,
    base_url: String,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    channels: HashSet<String>,
    messages: Vec<PostedMessage>,
    files: Vec<SharedFile>,
    pending: HashMap<String, PendingUpload>,
    failures: HashMap<String, VecDeque<String>>,
    rate_limits: HashMap<String, VecDeque<u64>>,
    rejected_block_types: HashSet<String>,
    calls: Vec<String>,
    serial: u64,
}

/// A file between files.getUploadURLExternal and its completion.
struct PendingUpload {
    filename: String,
    length: usize,
    alt_txt: Option<String>,
    bytes: Option<Vec<u8>>,
}

impl State {
    fn next_serial(&mut self) -> u64 {
        self.serial += 1;
        self.serial
    }

    fn next_ts(&mut self) -> String {
        format!("1700000000.{:06}", self.next_serial())
    }
}

impl FakeSlack {
    /// Starts a fake accepting `token` and knowing the channel IDs
    /// `channels`.
    pub async fn start(token: &str, channels: &[&str]) -> FakeSlack {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind fake Slack");
        let addr = listener.local_addr().expect("fake Slack addr");
        let state = State {
            channels: channels.iter().map(|c| c.to_string()).collect(),
            ..State::default()
        };
        let shared = Arc::new(Shared {
            token: token.to_string(),
            base_url: format!("http://{addr}"),
            state: Mutex::new(state),
        });
        let serving = shared.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let shared = serving.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req| handle(shared.clone(), req));
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        FakeSlack { addr, shared, task }
    }

    /// The Web API base, e.g. `http://127.0.0.1:PORT/api/`.
    pub fn api_url(&self) -> String {
        format!("http://{}/api/", self.addr)
    }

    /// The token it accepts.
    pub fn token(&self) -> String {
        self.shared.token.clone()
    }

    /// Messages posted with chat.postMessage, oldest first.
    pub fn messages(&self) -> Vec<PostedMessage> {
        self.state().messages.clone()
    }

    /// Files shared by files.completeUploadExternal, oldest first.
    pub fn files(&self) -> Vec<SharedFile> {
        self.state().files.clone()
    }

    /// Every request's method name in order (`"upload"` for the upload
    /// URL), including those answered with an error.
    pub fn calls(&self) -> Vec<String> {
        self.state().calls.clone()
    }

    /// Makes `channel` known.
    pub fn add_channel(&self, channel: &str) {
        self.state().channels.insert(channel.to_string());
    }

    /// The next call of `method` answers `{"ok": false, "error": error}`.
    pub fn fail_next(&self, method: &str, error: &str) {
        let mut state = self.state();
        let queue = state.failures.entry(method.to_string()).or_default();
        queue.push_back(error.to_string());
    }

    /// The next call of `method` answers HTTP 429 with `Retry-After:
    /// retry_after_secs`.
    pub fn rate_limit_next(&self, method: &str, retry_after_secs: u64) {
        let mut state = self.state();
        let queue = state.rate_limits.entry(method.to_string()).or_default();
        queue.push_back(retry_after_secs);
    }

    /// chat.postMessage answers `invalid_blocks` for blocks of type `ty`.
    pub fn reject_block_type(&self, ty: &str) {
        self.state().rejected_block_types.insert(ty.to_string());
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.shared.state()
    }
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// An injected answer for this call of `method`, if one is queued.
    fn fault(&self, method: &str) -> Option<Fault> {
        let mut state = self.state();
        state.calls.push(method.to_string());
        if let Some(secs) = state
            .rate_limits
            .get_mut(method)
            .and_then(VecDeque::pop_front)
        {
            return Some(Fault::RateLimited(secs));
        }
        let error = state
            .failures
            .get_mut(method)
            .and_then(VecDeque::pop_front)?;
        Some(Fault::Error(error))
    }
}

enum Fault {
    RateLimited(u64),
    Error(String),
}

type Answer = Response<Full<Bytes>>;
type Args = Map<String, Value>;

async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Result<Answer, Infallible> {
    let path = req.uri().path().to_string();
    let answer = if let Some(method) = path.strip_prefix("/api/") {
        api(&shared, method, req).await
    } else if let Some(file_id) = path.strip_prefix("/upload/") {
        upload(&shared, file_id, req).await
    } else {
        text(StatusCode::NOT_FOUND, "not found")
    };
    Ok(answer)
}

async fn api(shared: &Shared, method: &str, req: Request<Incoming>) -> Answer {
    match shared.fault(method) {
        Some(Fault::RateLimited(secs)) => return rate_limited(secs),
        Some(Fault::Error(error)) => return slack_error(&error),
        None => {}
    }
    let (parts, body) = req.into_parts();
    let Ok(body) = body.collect().await.map(|b| b.to_bytes()) else {
        return slack_error("request_timeout");
    };
    let args = match arguments(&parts.method, &parts.headers, parts.uri.query(), &body) {
        Ok(args) => args,
        Err(code) => return slack_error(code),
    };
    let token = bearer_token(&parts.headers).or_else(|| str_arg(&args, "token"));
    match token {
        None => return slack_error("not_authed"),
        Some(token) if token != shared.token => return slack_error("invalid_auth"),
        Some(_) => {}
    }
    let answer = match method {
        "auth.test" => Ok(json!({
            "url": "https://fake-slack.test/",
            "team": "Fake Workspace",
            "user": "calvin",
            "team_id": TEAM_ID,
            "user_id": BOT_USER_ID,
            "bot_id": BOT_ID,
        })),
        "chat.postMessage" => post_message(&mut shared.state(), &args),
        "files.getUploadURLExternal" => get_upload_url(shared, &args),
        "files.completeUploadExternal" => complete_upload(shared, &args),
        _ => Err(Refusal::code("unknown_method")),
    };
    match answer {
        Ok(Value::Object(mut fields)) => {
            fields.insert("ok".into(), Value::Bool(true));
            json_answer(StatusCode::OK, Value::Object(fields))
        }
        Ok(other) => json_answer(StatusCode::OK, other),
        Err(refusal) => refusal.answer(),
    }
}

/// Slack's `ok: false` answer, with the details its validation adds.
struct Refusal {
    code: &'static str,
    messages: Vec<String>,
}

impl Refusal {
    fn code(code: &'static str) -> Refusal {
        Refusal {
            code,
            messages: Vec::new(),
        }
    }

    fn with(code: &'static str, message: String) -> Refusal {
        Refusal {
            code,
            messages: vec![message],
        }
    }

    fn answer(self) -> Answer {
        if self.messages.is_empty() {
            return slack_error(self.code);
        }
        let logged: Vec<String> = self
            .messages
            .iter()
            .map(|m| format!("[ERROR] {m}"))
            .collect();
        json_answer(
            StatusCode::OK,
            json!({
                "ok": false,
                "error": self.code,
                "errors": self.messages,
                "response_metadata": { "messages": logged },
            }),
        )
    }
}

fn post_message(state: &mut State, args: &Args) -> Result<Value, Refusal> {
    let channel = str_arg(args, "channel").ok_or(Refusal::code("channel_not_found"))?;
    if !state.channels.contains(&channel) {
        return Err(Refusal::code("channel_not_found"));
    }
    let text = str_arg(args, "text");
    let markdown_text = str_arg(args, "markdown_text");
    let blocks = match json_arg(args, "blocks") {
        None => None,
        Some(Ok(blocks @ Value::Array(_))) => Some(blocks),
        Some(_) => return Err(Refusal::code("invalid_blocks_format")),
    };
    if markdown_text.is_some() && (text.is_some() || blocks.is_some()) {
        return Err(Refusal::code("markdown_text_conflict"));
    }
    if text.is_none()
        && markdown_text.is_none()
        && blocks.is_none()
        && !args.contains_key("attachments")
    {
        return Err(Refusal::code("no_text"));
    }
    if let Some(blocks) = &blocks {
        check_blocks(blocks, &state.rejected_block_types)?;
    }
    let thread_ts = str_arg(args, "thread_ts");
    let ts = state.next_ts();
    state.messages.push(PostedMessage {
        channel: channel.clone(),
        ts: ts.clone(),
        thread_ts: thread_ts.clone(),
        text: text.clone(),
        blocks: blocks.clone(),
    });
    let mut message = json!({
        "type": "message",
        "user": BOT_USER_ID,
        "bot_id": BOT_ID,
        "team": TEAM_ID,
        "text": text.or(markdown_text).unwrap_or_default(),
        "ts": ts,
    });
    if let Some(thread_ts) = thread_ts {
        message["thread_ts"] = Value::String(thread_ts);
    }
    if let Some(blocks) = blocks {
        message["blocks"] = blocks;
    }
    Ok(json!({ "channel": channel, "ts": ts, "message": message }))
}

/// Every block an object with a `type`, none of a rejected type.
fn check_blocks(blocks: &Value, rejected: &HashSet<String>) -> Result<(), Refusal> {
    for (i, block) in blocks.as_array().into_iter().flatten().enumerate() {
        let Some(ty) = block.get("type").and_then(Value::as_str) else {
            let message = format!("missing required field: type [json-pointer:/blocks/{i}]");
            return Err(Refusal::with("invalid_blocks", message));
        };
        if rejected.contains(ty) {
            let message = format!("unsupported type: {ty} [json-pointer:/blocks/{i}/type]");
            return Err(Refusal::with("invalid_blocks", message));
        }
    }
    Ok(())
}

fn get_upload_url(shared: &Shared, args: &Args) -> Result<Value, Refusal> {
    let missing = |field: &str| {
        Refusal::with(
            "invalid_arguments",
            format!("missing required field: {field}"),
        )
    };
    let filename = str_arg(args, "filename").ok_or_else(|| missing("filename"))?;
    let length = str_arg(args, "length").ok_or_else(|| missing("length"))?;
    let length: usize = length.parse().map_err(|_| {
        Refusal::with(
            "invalid_arguments",
            "must be an integer [json-pointer:/length]".into(),
        )
    })?;
    if length == 0 {
        return Err(Refusal::code("missing_argument"));
    }
    let alt_txt = str_arg(args, "alt_txt");
    if alt_txt
        .as_ref()
        .is_some_and(|alt| alt.chars().count() > MAX_ALT_TXT_CHARS)
    {
        return Err(Refusal::code("alt_txt_too_large"));
    }
    let mut state = shared.state();
    let file_id = format!("F{:010}", state.next_serial());
    let pending = PendingUpload {
        filename,
        length,
        alt_txt,
        bytes: None,
    };
    state.pending.insert(file_id.clone(), pending);
    let upload_url = format!("{}/upload/{file_id}", shared.base_url);
    Ok(json!({ "upload_url": upload_url, "file_id": file_id }))
}

fn complete_upload(shared: &Shared, args: &Args) -> Result<Value, Refusal> {
    let invalid = |message: &str| Refusal::with("invalid_arguments", message.to_string());
    let files = match json_arg(args, "files") {
        None => return Err(invalid("missing required field: files")),
        Some(Ok(Value::Array(files))) if !files.is_empty() => files,
        Some(_) => return Err(invalid("must be a non-empty array [json-pointer:/files]")),
    };
    let mut wanted = Vec::new();
    for file in &files {
        let id = file.get("id").and_then(Value::as_str);
        let id = id.ok_or_else(|| invalid("missing required field: id [json-pointer:/files]"))?;
        let title = file
            .get("title")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty());
        wanted.push((id.to_string(), title.map(str::to_string)));
    }
    let mut channels: Vec<String> = str_arg(args, "channels")
        .map(|list| list.split(',').map(|c| c.trim().to_string()).collect())
        .unwrap_or_default();
    channels.extend(str_arg(args, "channel_id"));
    let thread_ts = str_arg(args, "thread_ts");
    let initial_comment = str_arg(args, "initial_comment");

    let mut state = shared.state();
    if channels.iter().any(|c| !state.channels.contains(c)) {
        return Err(Refusal::code("channel_not_found"));
    }
    let uploaded = |id: &String| state.pending.get(id).is_some_and(|p| p.bytes.is_some());
    if !wanted.iter().all(|(id, _)| uploaded(id)) {
        return Err(Refusal::code("file_not_found"));
    }
    let targets: Vec<Option<String>> = if channels.is_empty() {
        vec![None]
    } else {
        channels.into_iter().map(Some).collect()
    };
    let share_ts: Vec<Option<String>> = targets
        .iter()
        .map(|target| target.as_ref().map(|_| state.next_ts()))
        .collect();
    let mut answered = Vec::new();
    for (file_id, title) in wanted {
        let Some(pending) = state.pending.remove(&file_id) else {
            return Err(Refusal::code("file_not_found"));
        };
        let title = title.unwrap_or_else(|| pending.filename.clone());
        let bytes = pending.bytes.unwrap_or_default();
        answered.push(json!({
            "id": file_id,
            "name": pending.filename,
            "title": title,
            "mimetype": "application/octet-stream",
            "size": bytes.len(),
            "permalink": format!("{}/files/{file_id}", shared.base_url),
        }));
        for (channel, ts) in targets.iter().zip(&share_ts) {
            state.files.push(SharedFile {
                file_id: file_id.clone(),
                channel: channel.clone(),
                ts: ts.clone(),
                thread_ts: thread_ts.clone(),
                filename: pending.filename.clone(),
                title: title.clone(),
                initial_comment: initial_comment.clone(),
                alt_txt: pending.alt_txt.clone(),
                bytes: bytes.clone(),
            });
        }
    }
    Ok(json!({ "files": answered }))
}

/// The upload URL: stores the bytes of a pending file.
async fn upload(shared: &Shared, file_id: &str, req: Request<Incoming>) -> Answer {
    match shared.fault("upload") {
        Some(Fault::RateLimited(secs)) => return rate_limited(secs),
        Some(Fault::Error(error)) => return text(StatusCode::INTERNAL_SERVER_ERROR, &error),
        None => {}
    }
    if req.method() != Method::POST {
        return text(StatusCode::METHOD_NOT_ALLOWED, "POST the file");
    }
    let (parts, body) = req.into_parts();
    let Ok(body) = body.collect().await.map(|b| b.to_bytes()) else {
        return text(StatusCode::BAD_REQUEST, "truncated body");
    };
    let bytes = match content_type(&parts.headers) {
        Some((essence, params)) if essence == "multipart/form-data" => {
            let file = param(&params, "boundary")
                .map(|boundary| multipart(&body, &boundary))
                .and_then(|parts| parts.into_iter().find(|part| part.name == "file"));
            match file {
                Some(part) => part.bytes,
                None => return text(StatusCode::BAD_REQUEST, "no file part"),
            }
        }
        _ => body.to_vec(),
    };
    let mut state = shared.state();
    let Some(pending) = state.pending.get_mut(file_id) else {
        return text(StatusCode::NOT_FOUND, "unknown upload");
    };
    if bytes.len() != pending.length {
        let message = format!("expected {} bytes, got {}", pending.length, bytes.len());
        return text(StatusCode::BAD_REQUEST, &message);
    }
    let answer = format!("OK - {}", bytes.len());
    pending.bytes = Some(bytes);
    text(StatusCode::OK, &answer)
}

// ---- requests ----

/// The arguments from the query string and the body.
fn arguments(
    method: &Method,
    headers: &HeaderMap,
    query: Option<&str>,
    body: &[u8],
) -> Result<Args, &'static str> {
    let mut args = Args::new();
    for (name, value) in form_pairs(query.unwrap_or_default()) {
        args.insert(name, Value::String(value));
    }
    if method != Method::POST || body.is_empty() {
        return Ok(args);
    }
    let Some((essence, params)) = content_type(headers) else {
        return Err("missing_post_type");
    };
    let charset = param(&params, "charset").map(|c| c.to_ascii_lowercase());
    if charset.is_some_and(|c| c != "utf-8" && c != "iso-8859-1") {
        return Err("invalid_charset");
    }
    match essence.as_str() {
        "application/json" => match serde_json::from_slice(body) {
            Ok(Value::Object(fields)) => args.extend(fields),
            _ => return Err("invalid_form_data"),
        },
        "application/x-www-form-urlencoded" => {
            let body = std::str::from_utf8(body).map_err(|_| "invalid_form_data")?;
            for (name, value) in form_pairs(body) {
                args.insert(name, Value::String(value));
            }
        }
        "multipart/form-data" => {
            let boundary = param(&params, "boundary").ok_or("invalid_form_data")?;
            for part in multipart(body, &boundary) {
                let value = String::from_utf8_lossy(&part.bytes).into_owned();
                args.insert(part.name, Value::String(value));
            }
        }
        _ => return Err("invalid_post_type"),
    }
    Ok(args)
}

/// A string argument; empty counts as absent, as in Slack.
fn str_arg(args: &Args, name: &str) -> Option<String> {
    match args.get(name)? {
        Value::String(s) if s.is_empty() => None,
        Value::String(s) => Some(s.clone()),
        Value::Null => None,
        other => Some(other.to_string()),
    }
}

/// A JSON-typed argument, given as JSON or as JSON text.
fn json_arg(args: &Args, name: &str) -> Option<Result<Value, serde_json::Error>> {
    match args.get(name)? {
        Value::String(s) => Some(serde_json::from_str(s)),
        other => Some(Ok(other.clone())),
    }
}

fn bearer_token(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let token = value.strip_prefix("Bearer ")?.trim();
    (!token.is_empty()).then(|| token.to_string())
}

/// The media type (lowercase) and its parameters.
fn content_type(headers: &HeaderMap) -> Option<(String, Vec<(String, String)>)> {
    let value = headers.get(header::CONTENT_TYPE)?.to_str().ok()?;
    let mut pieces = value.split(';');
    let essence = pieces.next()?.trim().to_ascii_lowercase();
    let params = pieces
        .filter_map(|p| p.split_once('='))
        .map(|(k, v)| {
            (
                k.trim().to_ascii_lowercase(),
                v.trim().trim_matches('"').to_string(),
            )
        })
        .collect();
    Some((essence, params))
}

fn param(params: &[(String, String)], name: &str) -> Option<String> {
    params
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
}

/// `a=1&b=x%20y` as pairs, decoded.
fn form_pairs(encoded: &str) -> Vec<(String, String)> {
    encoded
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(name), percent_decode(value))
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
                continue;
            }
            (b'+', _) => out.push(b' '),
            (other, _) => out.push(other),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

struct Part {
    name: String,
    bytes: Vec<u8>,
}

/// The named parts of a multipart/form-data body.
fn multipart(body: &[u8], boundary: &str) -> Vec<Part> {
    let delimiter = format!("--{boundary}");
    let mut parts = Vec::new();
    let mut rest = match find(body, delimiter.as_bytes()) {
        Some(at) => &body[at + delimiter.len()..],
        None => return parts,
    };
    while !rest.starts_with(b"--") {
        let Some(end) = find(rest, delimiter.as_bytes()) else {
            break;
        };
        let part = rest[..end].strip_prefix(b"\r\n").unwrap_or(&rest[..end]);
        let part = part.strip_suffix(b"\r\n").unwrap_or(part);
        if let Some(split) = find(part, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&part[..split]);
            let name = head
                .lines()
                .filter(|line| {
                    line.to_ascii_lowercase()
                        .starts_with("content-disposition:")
                })
                .flat_map(|line| line.split(';'))
                .find_map(|p| p.trim().strip_prefix("name="))
                .map(|n| n.trim_matches('"').to_string());
            if let Some(name) = name {
                let bytes = part[split + 4..].to_vec();
                parts.push(Part { name, bytes });
            }
        }
        rest = &rest[end + delimiter.len()..];
    }
    parts
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

// ---- answers ----

fn json_answer(status: StatusCode, body: Value) -> Answer {
    let mut answer = Response::new(Full::new(Bytes::from(body.to_string())));
    *answer.status_mut() = status;
    let json = header::HeaderValue::from_static("application/json; charset=utf-8");
    answer.headers_mut().insert(header::CONTENT_TYPE, json);
    answer
}

fn slack_error(code: &str) -> Answer {
    json_answer(StatusCode::OK, json!({ "ok": false, "error": code }))
}

fn rate_limited(retry_after_secs: u64) -> Answer {
    let body = json!({ "ok": false, "error": "ratelimited" });
    let mut answer = json_answer(StatusCode::TOO_MANY_REQUESTS, body);
    answer
        .headers_mut()
        .insert(header::RETRY_AFTER, retry_after_secs.into());
    answer
}

fn text(status: StatusCode, body: &str) -> Answer {
    let mut answer = Response::new(Full::new(Bytes::from(body.to_string())));
    *answer.status_mut() = status;
    let plain = header::HeaderValue::from_static("text/plain; charset=utf-8");
    answer.headers_mut().insert(header::CONTENT_TYPE, plain);
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_decode() {
        let pairs = form_pairs("a=1&b=x%20y+z&c=%7B%22k%22%3A1%7D&d");
        let want = [("a", "1"), ("b", "x y z"), ("c", "{\"k\":1}"), ("d", "")];
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(pairs, want);
        assert_eq!(percent_decode("100%"), "100%");
    }

    #[test]
    fn multipart_parts() {
        let body = b"--XX\r\nContent-Disposition: form-data; name=\"title\"\r\n\r\nhi\r\n\
            --XX\r\nContent-Disposition: form-data; filename=\"a.bin\"; name=\"file\"\r\n\
            Content-Type: application/octet-stream\r\n\r\n\x00\r\n\x01\r\n--XX--\r\n";
        let parts = multipart(body, "XX");
        assert_eq!(parts.len(), 2);
        assert_eq!(
            (parts[0].name.as_str(), parts[0].bytes.as_slice()),
            ("title", &b"hi"[..])
        );
        assert_eq!(
            (parts[1].name.as_str(), parts[1].bytes.as_slice()),
            ("file", &b"\x00\r\n\x01"[..])
        );
    }
}
