//! The request log: per preview, the last requests that went through it to
//! the local port and what came back (`GET /v1/previews/{name}/requests`,
//! `calvin-agent log`, the gateway's `preview_log`), and replay: the same
//! request sent to the port again.
//!
//! Memory is bounded: at most `capacity` requests per preview, each with
//! its heads and the first [`BODY_KEPT`] bytes of either body (the rest is
//! counted, not kept). `Authorization`, `Proxy-Authorization`, `Cookie`
//! and `Set-Cookie` values are kept (replay sends them) but masked in
//! everything the log gives out unless the agent was told otherwise.
//!
//! A response that shows a dev server refusing a visitor in a way calvin
//! knows (see [`crate::refusals`]) leaves a hint on its preview, once per
//! kind.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use bytes::Bytes;
use calvin_proto::{Port, PreviewName};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use time::OffsetDateTime;
use tokio::sync::Notify;

use crate::api::{LoggedBody, LoggedRequest, RequestLog as LogAnswer, Warning};
use crate::tap::{RequestHead, Sink, Tap};

/// How many requests a preview's log keeps unless told otherwise.
pub const DEFAULT_CAPACITY: usize = 100;
/// The bytes of each body kept.
pub const BODY_KEPT: usize = 4096;
/// The longest a replay waits for the whole answer.
const REPLAY_TIMEOUT: Duration = Duration::from_secs(30);
/// The most of a replay's answer read (past it, the answer is cut).
const REPLAY_MAX_BODY: u64 = 16 << 20;

/// Headers whose values the log masks.
const SECRET_HEADERS: [&str; 4] = [
    "authorization",
    "proxy-authorization",
    "cookie",
    "set-cookie",
];

/// Headers a replay does not copy: they belong to the first connection,
/// or are set again from the body.
const NOT_REPLAYED: [&str; 7] = [
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "upgrade",
    "content-length",
    "proxy-connection",
];

/// How a message ended (see [`crate::tap`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageEnd {
    Complete,
    /// The connection ended in the middle of it.
    Cut,
    /// The connection ended before an answer began.
    NoAnswer,
    /// A 101: the connection switched protocols.
    Upgraded,
}

/// What the log gives the tap for a request it opened.
#[derive(Debug, Clone, Copy)]
pub struct Started {
    pub id: u64,
}

/// Why a replay was not made.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("no preview named {0} on this agent")]
    UnknownName(PreviewName),
    #[error("the log of {name} has no request {id} (it holds {held})")]
    UnknownRequest {
        name: PreviewName,
        id: u64,
        held: String,
    },
    #[error(
        "request {0}'s body was {1} bytes and the log keeps the first {BODY_KEPT}: it cannot be sent again as it was"
    )]
    BodyCut(u64, u64),
    #[error("request {0} switched protocols (a WebSocket): it cannot be replayed")]
    Upgrade(u64),
    #[error("request {0} has not been sent whole yet; replay it once it has")]
    Unfinished(u64),
    #[error("request {0} cannot be rebuilt: {1}")]
    Invalid(u64, String),
    #[error("port {port}: {error}")]
    Port { port: Port, error: String },
}

/// The log of every preview of one agent; clones share it.
#[derive(Clone)]
pub struct RequestLog {
    inner: Arc<Inner>,
}

struct Inner {
    capacity: usize,
    show_secrets: bool,
    next_id: AtomicU64,
    previews: Mutex<HashMap<PreviewName, PreviewLog>>,
    /// Woken at every change, for those waiting on new requests.
    changed: Notify,
}

struct PreviewLog {
    url: String,
    port: Port,
    entries: VecDeque<Entry>,
    hints: Vec<Warning>,
}

#[derive(Debug, Clone)]
struct Entry {
    id: u64,
    time: OffsetDateTime,
    started: Instant,
    method: String,
    path: String,
    client: Option<String>,
    status: Option<u16>,
    duration: Option<Duration>,
    request_head: Heads,
    request_body: Sample,
    response_head: Heads,
    response_body: Sample,
    request_end: Option<MessageEnd>,
    upgraded: bool,
    replay_of: Option<u64>,
}

/// A message's headers: kept as the head's bytes as they passed (read
/// into a list only when the log is), or as a list (a replay's answer,
/// from hyper).
#[derive(Debug, Clone, Default)]
enum Heads {
    #[default]
    None,
    Raw(Vec<u8>),
    Listed(Vec<(String, String)>),
}

impl Heads {
    fn list(&self) -> Vec<(String, String)> {
        match self {
            Heads::None => Vec::new(),
            Heads::Raw(head) => crate::tap::headers_of(head),
            Heads::Listed(list) => list.clone(),
        }
    }
}

/// The first bytes of a body and its whole size.
#[derive(Debug, Clone, Default)]
struct Sample {
    kept: Vec<u8>,
    size: u64,
}

impl Sample {
    fn add(&mut self, bytes: &[u8]) {
        self.size += bytes.len() as u64;
        self.keep(bytes);
    }

    /// Keeps what fits of `bytes` in the first [`BODY_KEPT`].
    fn keep(&mut self, bytes: &[u8]) {
        let room = BODY_KEPT.saturating_sub(self.kept.len());
        self.kept.extend_from_slice(&bytes[..room.min(bytes.len())]);
    }

    fn cut(&self) -> bool {
        self.size > self.kept.len() as u64
    }

    fn logged(&self) -> Option<LoggedBody> {
        if self.size == 0 {
            return None;
        }
        let (text, base64) = match std::str::from_utf8(&self.kept) {
            Ok(text) => (text.to_owned(), false),
            // Cut in the middle of a character: the characters before it.
            Err(e) if e.error_len().is_none() => (
                String::from_utf8_lossy(&self.kept[..e.valid_up_to()]).into_owned(),
                false,
            ),
            Err(_) => (
                base64::engine::general_purpose::STANDARD.encode(&self.kept),
                true,
            ),
        };
        Some(LoggedBody {
            size: self.size,
            text,
            base64,
            cut: self.cut(),
        })
    }
}

impl RequestLog {
    /// A log keeping `capacity` requests per preview (0: none, and no
    /// connection is followed); `show_secrets` stops the masking.
    pub fn new(capacity: usize, show_secrets: bool) -> Self {
        Self {
            inner: Arc::new(Inner {
                capacity,
                show_secrets,
                next_id: AtomicU64::new(1),
                previews: Mutex::default(),
                changed: Notify::new(),
            }),
        }
    }

    fn previews(&self) -> std::sync::MutexGuard<'_, HashMap<PreviewName, PreviewLog>> {
        self.inner
            .previews
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// A preview was made (or made again, with this URL and port): its log
    /// starts, or goes on.
    pub fn open(&self, name: &PreviewName, port: Port, url: &str) {
        let mut previews = self.previews();
        let log = previews.entry(name.clone()).or_insert_with(|| PreviewLog {
            url: String::new(),
            port,
            entries: VecDeque::new(),
            hints: Vec::new(),
        });
        log.url = url.to_owned();
        log.port = port;
    }

    /// The preview was taken down: its log goes.
    pub fn close(&self, name: &PreviewName) {
        self.previews().remove(name);
        self.inner.changed.notify_waiters();
    }

    /// The hints of `name`'s log.
    pub fn hints(&self, name: &PreviewName) -> Vec<Warning> {
        self.previews()
            .get(name)
            .map(|log| log.hints.clone())
            .unwrap_or_default()
    }

    /// A follower for one connection to `name`'s port; `None` when the log
    /// keeps nothing.
    pub fn tap(&self, name: &PreviewName) -> Option<ConnectionTap> {
        (self.inner.capacity > 0 && self.previews().contains_key(name)).then(|| ConnectionTap {
            log: self.clone(),
            name: name.clone(),
            tap: Mutex::default(),
        })
    }

    /// `name`'s requests after `after`, the newest `limit`; `None` for a
    /// name this agent does not preview.
    pub fn requests(&self, name: &PreviewName, after: u64, limit: usize) -> Option<LogAnswer> {
        // Copied out under the lock, which the connections' taps take;
        // made into JSON (masking, base64) after.
        let (entries, hints) = {
            let previews = self.previews();
            let log = previews.get(name)?;
            let newer = log.entries.iter().filter(|e| e.id > after);
            let skip = newer.clone().count().saturating_sub(limit);
            let entries: Vec<Entry> = newer.skip(skip).cloned().collect();
            (entries, log.hints.clone())
        };
        Some(LogAnswer {
            name: name.to_string(),
            requests: entries.iter().map(|e| self.logged(e)).collect(),
            hints,
        })
    }

    /// As [`Self::requests`], waiting up to `wait` for one after `after`
    /// when there is none yet.
    pub async fn wait_requests(
        &self,
        name: &PreviewName,
        after: u64,
        limit: usize,
        wait: Duration,
    ) -> Option<LogAnswer> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let changed = self.inner.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let answer = self.requests(name, after, limit)?;
            if !answer.requests.is_empty() || tokio::time::Instant::now() >= deadline {
                return Some(answer);
            }
            tokio::select! {
                _ = changed => {}
                _ = tokio::time::sleep_until(deadline) => {}
            }
        }
    }

    fn logged(&self, e: &Entry) -> LoggedRequest {
        let mask = |headers: &[(String, String)]| -> Vec<(String, String)> {
            headers
                .iter()
                .map(|(name, value)| {
                    let secret = SECRET_HEADERS.iter().any(|s| name.eq_ignore_ascii_case(s));
                    if secret && !self.inner.show_secrets {
                        (name.clone(), format!("(masked, {} bytes)", value.len()))
                    } else {
                        (name.clone(), value.clone())
                    }
                })
                .collect()
        };
        LoggedRequest {
            id: e.id,
            time: e
                .time
                .format(&time::format_description::well_known::Rfc3339)
                .unwrap_or_default(),
            method: e.method.clone(),
            path: e.path.clone(),
            client: e.client.clone(),
            status: e.status,
            duration_ms: e.duration.map(|d| (d.as_secs_f64() * 1e6).round() / 1e3),
            bytes_in: e.request_body.size,
            bytes_out: e.response_body.size,
            request_headers: mask(&e.request_head.list()),
            request_body: e.request_body.logged(),
            response_headers: mask(&e.response_head.list()),
            response_body: e.response_body.logged(),
            upgraded: e.upgraded,
            replay_of: e.replay_of,
        }
    }

    /// Adds an entry to `name`'s log (the oldest goes past the capacity),
    /// under the next id, which it returns: taken under the lock, so the
    /// log's ids are in order.
    fn push(&self, name: &PreviewName, mut entry: Entry) -> u64 {
        let mut previews = self.previews();
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        entry.id = id;
        if let Some(log) = previews.get_mut(name) {
            while log.entries.len() >= self.inner.capacity.max(1) {
                log.entries.pop_front();
            }
            log.entries.push_back(entry);
        }
        drop(previews);
        self.inner.changed.notify_waiters();
        id
    }

    /// Changes entry `id` of `name`'s log, if it is still there; `f` also
    /// gets the preview's URL and hints.
    fn update(
        &self,
        name: &PreviewName,
        id: u64,
        f: impl FnOnce(&mut Entry, &str, &mut Vec<Warning>),
    ) {
        let mut previews = self.previews();
        let Some(log) = previews.get_mut(name) else {
            return;
        };
        if let Ok(at) = log.entries.binary_search_by_key(&id, |e| e.id) {
            f(&mut log.entries[at], &log.url, &mut log.hints);
        }
    }

    /// Sends request `id` of `name`'s log to the port again, logs the
    /// answer as a new request and returns it.
    pub async fn replay(&self, name: &PreviewName, id: u64) -> Result<LoggedRequest, ReplayError> {
        let (entry, port) = {
            let previews = self.previews();
            let log = previews
                .get(name)
                .ok_or_else(|| ReplayError::UnknownName(name.clone()))?;
            let at = log
                .entries
                .binary_search_by_key(&id, |e| e.id)
                .map_err(|_| ReplayError::UnknownRequest {
                    name: name.clone(),
                    id,
                    held: match (log.entries.front(), log.entries.back()) {
                        (Some(first), Some(last)) => format!("{} to {}", first.id, last.id),
                        _ => "none yet".into(),
                    },
                })?;
            (log.entries[at].clone(), log.port)
        };
        let request_headers = entry.request_head.list();
        if entry.upgraded || is_upgrade(&request_headers) {
            return Err(ReplayError::Upgrade(id));
        }
        if entry.request_body.cut() {
            return Err(ReplayError::BodyCut(id, entry.request_body.size));
        }
        if entry.request_end != Some(MessageEnd::Complete) {
            return Err(ReplayError::Unfinished(id));
        }
        let mut builder = http::Request::builder()
            .method(entry.method.as_str())
            .uri(entry.path.as_str());
        for (header, value) in &request_headers {
            if !NOT_REPLAYED.iter().any(|h| header.eq_ignore_ascii_case(h)) {
                builder = builder.header(header.as_str(), value.as_str());
            }
        }
        let request = builder
            .body(Full::new(Bytes::from(entry.request_body.kept.clone())))
            .map_err(|e| ReplayError::Invalid(id, e.to_string()))?;

        let started = Instant::now();
        let time = OffsetDateTime::now_utc();
        let port_error = |error: String| ReplayError::Port { port, error };
        let answer = tokio::time::timeout(REPLAY_TIMEOUT, async {
            let tcp = crate::forward::connect_local(port)
                .await
                .map_err(|e| port_error(e.to_string()))?;
            let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
                .await
                .map_err(|e| port_error(e.to_string()))?;
            tokio::spawn(conn);
            let response = sender
                .send_request(request)
                .await
                .map_err(|e| port_error(e.to_string()))?;
            let status = response.status().as_u16();
            let headers = response
                .headers()
                .iter()
                .map(|(n, v)| {
                    (
                        n.to_string(),
                        String::from_utf8_lossy(v.as_bytes()).into_owned(),
                    )
                })
                .collect::<Vec<_>>();
            let mut body = response.into_body();
            let mut sample = Sample::default();
            while let Some(frame) = body.frame().await {
                let frame = frame.map_err(|e| port_error(e.to_string()))?;
                if let Some(data) = frame.data_ref() {
                    sample.add(data);
                }
                if sample.size > REPLAY_MAX_BODY {
                    break;
                }
            }
            Ok::<_, ReplayError>((status, headers, sample))
        })
        .await
        .map_err(|_| {
            port_error(format!(
                "no whole answer within {} s",
                REPLAY_TIMEOUT.as_secs()
            ))
        })??;

        let (status, response_headers, response_body) = answer;
        let mut replayed = Entry {
            id: 0,
            time,
            started,
            method: entry.method,
            path: entry.path,
            client: None,
            status: Some(status),
            duration: Some(started.elapsed()),
            request_head: entry.request_head,
            request_body: entry.request_body,
            response_head: Heads::Listed(response_headers),
            response_body,
            request_end: Some(MessageEnd::Complete),
            upgraded: false,
            replay_of: Some(id),
        };
        replayed.id = self.push(name, replayed.clone());
        Ok(self.logged(&replayed))
    }
}

fn is_upgrade(headers: &[(String, String)]) -> bool {
    headers
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case("upgrade"))
}

/// Follows one connection to a preview's port into the log.
pub struct ConnectionTap {
    log: RequestLog,
    name: PreviewName,
    tap: Mutex<(Tap, Bodies)>,
}

/// The bodies under way on one connection, counted here: the log (and its
/// lock) is told only while a body's first bytes are kept, every
/// [`SIZE_STEP`] more, and at its end.
#[derive(Default)]
struct Bodies(HashMap<(u64, bool), u64>);

/// How often a long body's size reaches the log while it goes on.
const SIZE_STEP: u64 = 64 << 10;

impl ConnectionTap {
    /// Bytes that moved: `to_server` from the edge to the port, else back.
    pub fn seen(&self, to_server: bool, bytes: &[u8]) {
        let mut guard = self.tap.lock().unwrap_or_else(|e| e.into_inner());
        let (tap, bodies) = &mut *guard;
        let mut sink = LogSink {
            log: &self.log,
            name: &self.name,
            bodies,
        };
        if to_server {
            tap.request_bytes(bytes, &mut sink);
        } else {
            tap.response_bytes(bytes, &mut sink);
        }
    }

    /// The connection ended (`clean`: both ways finished).
    pub fn close(&self, clean: bool) {
        let mut guard = self.tap.lock().unwrap_or_else(|e| e.into_inner());
        let (tap, bodies) = &mut *guard;
        tap.close(
            clean,
            &mut LogSink {
                log: &self.log,
                name: &self.name,
                bodies,
            },
        );
    }
}

struct LogSink<'a> {
    log: &'a RequestLog,
    name: &'a PreviewName,
    bodies: &'a mut Bodies,
}

impl Sink for LogSink<'_> {
    fn request(&mut self, head: RequestHead) -> Started {
        let id = self.log.push(
            self.name,
            Entry {
                id: 0,
                time: OffsetDateTime::now_utc(),
                started: Instant::now(),
                client: head.client,
                method: head.method,
                path: head.path,
                status: None,
                duration: None,
                request_head: Heads::Raw(head.head),
                request_body: Sample::default(),
                response_head: Heads::None,
                response_body: Sample::default(),
                request_end: None,
                upgraded: false,
                replay_of: None,
            },
        );
        Started { id }
    }

    fn response(&mut self, id: u64, status: u16, head: Vec<u8>) {
        self.log.update(self.name, id, |e, _, _| {
            e.status = Some(status);
            e.response_head = Heads::Raw(head);
        });
        self.log.inner.changed.notify_waiters();
    }

    fn body(&mut self, id: u64, to_server: bool, bytes: &[u8]) {
        let size = self.bodies.0.entry((id, to_server)).or_default();
        let before = *size;
        *size += bytes.len() as u64;
        let keeping = before < BODY_KEPT as u64;
        if !keeping && before / SIZE_STEP == *size / SIZE_STEP {
            return;
        }
        let size = *size;
        self.log.update(self.name, id, |e, _, _| {
            let sample = if to_server {
                &mut e.request_body
            } else {
                &mut e.response_body
            };
            if keeping {
                sample.keep(bytes);
            }
            sample.size = size;
        });
    }

    fn end(&mut self, id: u64, to_server: bool, how: MessageEnd) {
        let size = self.bodies.0.remove(&(id, to_server));
        self.log.update(self.name, id, |e, url, hints| {
            if let Some(size) = size {
                if to_server {
                    e.request_body.size = size;
                } else {
                    e.response_body.size = size;
                }
            }
            if to_server {
                e.request_end = Some(how);
                return;
            }
            e.duration = Some(e.started.elapsed());
            e.upgraded = how == MessageEnd::Upgraded;
            if let Some(status) = e.status
                && status >= 400
                && let Some(hint) = crate::refusals::recognise(
                    status,
                    &e.response_head.list(),
                    &e.response_body.kept,
                    url,
                )
                && !hints.iter().any(|h| h.code == hint.code)
            {
                hints.push(hint);
            }
        });
        if !to_server {
            self.log.inner.changed.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> PreviewName {
        PreviewName::parse(s).unwrap()
    }

    fn port() -> Port {
        Port::try_from(8000u16).unwrap()
    }

    #[test]
    fn a_full_log_keeps_the_newest_and_bodies_keep_their_first_4_kib() {
        let log = RequestLog::new(3, false);
        let web = name("web");
        log.open(&web, port(), "https://web.example.test");
        let tap = log.tap(&web).unwrap();
        for i in 0..4 {
            tap.seen(
                true,
                format!("GET /{i} HTTP/1.1\r\nhost: web\r\n\r\n").as_bytes(),
            );
            tap.seen(false, b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok");
        }
        let big = vec![b'x'; 5 << 20];
        tap.seen(
            true,
            format!(
                "POST /big HTTP/1.1\r\ncontent-length: {}\r\n\r\n",
                big.len()
            )
            .as_bytes(),
        );
        tap.seen(true, &big);
        tap.seen(false, b"HTTP/1.1 204 No Content\r\n\r\n");
        let got = log.requests(&web, 0, 100).unwrap().requests;
        let paths: Vec<&str> = got.iter().map(|r| r.path.as_str()).collect();
        assert_eq!(paths, ["/2", "/3", "/big"]);
        let body = got[2].request_body.as_ref().unwrap();
        assert_eq!(
            (body.size, body.text.len(), body.cut),
            (5 << 20, BODY_KEPT, true)
        );
        assert_eq!(got[2].status, Some(204));
        assert_eq!(got[0].response_body.as_ref().unwrap().text, "ok");
        // `after` and `limit`.
        let after = log.requests(&web, got[0].id, 1).unwrap().requests;
        assert_eq!(after.len(), 1);
        assert_eq!(after[0].path, "/big");
    }

    #[test]
    fn secrets_are_masked_unless_shown() {
        for show in [false, true] {
            let log = RequestLog::new(10, show);
            let web = name("web");
            log.open(&web, port(), "https://web.example.test");
            let tap = log.tap(&web).unwrap();
            tap.seen(
                true,
                b"GET / HTTP/1.1\r\nAuthorization: Bearer s3cret\r\nCookie: a=b\r\nx-forwarded-for: 203.0.113.7\r\n\r\n",
            );
            tap.seen(
                false,
                b"HTTP/1.1 200 OK\r\nSet-Cookie: sid=xyz\r\ncontent-length: 0\r\n\r\n",
            );
            let r = &log.requests(&web, 0, 10).unwrap().requests[0];
            let all = format!("{:?}{:?}", r.request_headers, r.response_headers);
            for secret in ["s3cret", "a=b", "sid=xyz"] {
                assert_eq!(all.contains(secret), show, "{secret} in {all}");
            }
            assert_eq!(r.client.as_deref(), Some("203.0.113.7"));
        }
    }

    #[test]
    fn a_log_of_nothing_follows_nothing() {
        let log = RequestLog::new(0, false);
        let web = name("web");
        log.open(&web, port(), "https://web.example.test");
        assert!(log.tap(&web).is_none());
        assert!(
            RequestLog::new(5, false).tap(&web).is_none(),
            "not previewed"
        );
    }
}
