//! A dev server to preview: a real HTTP/1.1 server on 127.0.0.1:0.
//!
//! - `GET /hello` -> `hello from origin\n`
//! - `GET /bytes/N` -> N bytes of [`pattern`], streamed
//! - `POST /echo` -> the request body, streamed back as it arrives
//! - `POST /sha256` -> the hex SHA-256 and length of the body
//! - `POST /count` -> the length of the body and the sum of its bytes
//! - `GET /events?type=T` -> three events 300 ms apart, content type T
//!   (default `text/event-stream`)
//! - `GET /headers` -> the request headers as JSON `[[name, value], ...]`
//! - `GET /request...` (any path under it) -> what arrived, as JSON
//!   `{"target": path and query, "headers": [[name, value], ...]}`
//! - `GET /slow?ms=N` -> waits N ms before answering
//! - `GET /ws` -> WebSocket echo
//! - `GET /cookies` -> four Set-Cookie headers: host-only, scoped to the
//!   preview zone, scoped to the preview's own host, and one naming both
//! - `GET /hop` -> hop-by-hop headers an edge must not pass on
//!
//! It counts the connections it accepted and those open now.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http::{Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use sha2::{Digest, Sha256};
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;

type Body = BoxBody<Bytes, hyper::Error>;

/// The byte at `offset` of every `/bytes/N` body.
pub fn pattern(offset: u64) -> u8 {
    (offset.wrapping_mul(31) ^ (offset >> 9)) as u8
}

/// `len` bytes of the pattern, from offset 0.
pub fn pattern_bytes(len: usize) -> Vec<u8> {
    (0..len as u64).map(pattern).collect()
}

/// A running origin; dropped, it stops accepting.
pub struct Origin {
    pub port: u16,
    /// Connections accepted so far.
    pub accepted: Arc<AtomicUsize>,
    /// Connections open now.
    pub open: Arc<AtomicUsize>,
    /// Request heads received so far (see [`Origin::requests`]).
    seen: tokio::sync::watch::Sender<usize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Origin {
    pub async fn start() -> Origin {
        Self::start_on(0).await
    }

    /// An origin on `port` (0: any), as a dev server restarting on its
    /// port would be.
    pub async fn start_on(port: u16) -> Origin {
        let listener = TcpListener::bind(("127.0.0.1", port))
            .await
            .expect("bind origin");
        Self::serve(listener)
    }

    /// An origin on a listener made elsewhere (in a network namespace).
    pub fn start_in(listener: std::net::TcpListener) -> Origin {
        Self::serve(TcpListener::from_std(listener).expect("tokio listener"))
    }

    fn serve(listener: TcpListener) -> Origin {
        let port = listener.local_addr().expect("origin addr").port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let open = Arc::new(AtomicUsize::new(0));
        let (count_accepted, count_open) = (accepted.clone(), open.clone());
        let seen = tokio::sync::watch::Sender::new(0);
        let count_seen = seen.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let _ = stream.set_nodelay(true);
                count_accepted.fetch_add(1, Ordering::SeqCst);
                count_open.fetch_add(1, Ordering::SeqCst);
                let open = count_open.clone();
                let seen = count_seen.clone();
                let service = service_fn(move |req| {
                    seen.send_modify(|seen| *seen += 1);
                    handle(req)
                });
                tokio::spawn(async move {
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .with_upgrades()
                        .await;
                    open.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        Origin {
            port,
            accepted,
            open,
            seen,
            task,
        }
    }

    /// Request heads received so far.
    pub fn requests(&self) -> usize {
        *self.seen.borrow()
    }

    /// Waits until the origin has received `n` request heads in all (the
    /// event a test waits for before acting on a request in flight);
    /// panics after 10 s.
    pub async fn has_seen(&self, n: usize) {
        let mut seen = self.seen.subscribe();
        let waited =
            tokio::time::timeout(Duration::from_secs(10), seen.wait_for(|&s| s >= n)).await;
        assert!(
            matches!(waited, Ok(Ok(_))),
            "the origin saw {} requests, not {n}, within 10 s",
            self.requests()
        );
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }
}

fn full(status: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(Full::new(body.into()).map_err(|e| match e {}).boxed());
    *r.status_mut() = status;
    r
}

fn query(req: &Request<Incoming>, key: &str) -> Option<String> {
    req.uri().query()?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == key).then(|| v.replace("%2F", "/"))
    })
}

async fn handle(req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let path = req.uri().path().to_owned();
    let response = match path.as_str() {
        "/hello" => full(StatusCode::OK, "hello from origin\n"),
        "/echo" => Response::new(req.into_body().boxed()),
        "/sha256" => {
            let mut hasher = Sha256::new();
            let mut len = 0u64;
            let mut body = req.into_body();
            while let Some(frame) = body.frame().await {
                match frame {
                    Ok(frame) => {
                        if let Some(data) = frame.data_ref() {
                            hasher.update(data);
                            len += data.len() as u64;
                        }
                    }
                    Err(e) => return Ok(full(StatusCode::BAD_REQUEST, e.to_string())),
                }
            }
            full(
                StatusCode::OK,
                format!("{} {len}\n", hex(&hasher.finalize())),
            )
        }
        "/count" => {
            // Length and a sum of every byte (cheap enough for a GiB in a
            // debug build, unlike a hash).
            let (mut len, mut sum) = (0u64, 0u64);
            let mut body = req.into_body();
            while let Some(frame) = body.frame().await {
                match frame {
                    Ok(frame) => {
                        if let Some(data) = frame.data_ref() {
                            len += data.len() as u64;
                            sum = data.iter().fold(sum, |s, b| s.wrapping_add(u64::from(*b)));
                        }
                    }
                    Err(e) => return Ok(full(StatusCode::BAD_REQUEST, e.to_string())),
                }
            }
            full(StatusCode::OK, format!("{len} {sum}\n"))
        }
        "/events" => {
            let gap = query(&req, "gap_ms").and_then(|v| v.parse().ok());
            events(query(&req, "type"), gap.unwrap_or(300))
        }
        "/headers" => {
            let pairs: Vec<(String, String)> = req
                .headers()
                .iter()
                .map(|(k, v)| (k.to_string(), String::from_utf8_lossy(v.as_bytes()).into()))
                .collect();
            full(
                StatusCode::OK,
                serde_json::to_vec(&pairs).unwrap_or_default(),
            )
        }
        p if p.starts_with("/request") => {
            let headers: Vec<(String, String)> = req
                .headers()
                .iter()
                .map(|(k, v)| (k.to_string(), String::from_utf8_lossy(v.as_bytes()).into()))
                .collect();
            let target = req.uri().path_and_query().map_or("", |p| p.as_str());
            let seen = serde_json::json!({ "target": target, "headers": headers });
            let mut r = full(StatusCode::OK, seen.to_string());
            r.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/json"),
            );
            r
        }
        "/slow" => {
            let ms = query(&req, "ms")
                .and_then(|v| v.parse().ok())
                .unwrap_or(1000);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            full(StatusCode::OK, "slow\n")
        }
        "/ws" => websocket(req),
        "/cookies" => {
            let host = req
                .headers()
                .get(http::header::HOST)
                .and_then(|h| h.to_str().ok())
                .and_then(|h| h.split(':').next())
                .unwrap_or("")
                .to_owned();
            let zone = host.split_once('.').map_or("", |(_, z)| z).to_owned();
            let mut r = full(StatusCode::OK, "cookies\n");
            for cookie in [
                "plain=1; Path=/".to_owned(),
                format!("zone=1; Domain=.{zone}; Path=/"),
                format!("own=1; Domain={host}"),
                format!("double=1; Domain={host}; Domain=.{zone}"),
            ] {
                if let Ok(v) = http::HeaderValue::from_str(&cookie) {
                    r.headers_mut().append(http::header::SET_COOKIE, v);
                }
            }
            r
        }
        "/hop" => {
            let mut r = full(StatusCode::OK, "hop\n");
            let h = r.headers_mut();
            for (k, v) in [
                ("connection", "x-internal"),
                ("x-internal", "secret"),
                ("keep-alive", "timeout=5"),
                ("proxy-authenticate", "Basic"),
                ("x-end-to-end", "kept"),
            ] {
                h.insert(k, http::HeaderValue::from_static(v));
            }
            r
        }
        p if p.starts_with("/bytes/") => match p["/bytes/".len()..].parse::<u64>() {
            Ok(n) => bytes_body(n),
            Err(_) => full(StatusCode::BAD_REQUEST, "bad length\n"),
        },
        _ => full(StatusCode::NOT_FOUND, "origin: not found\n"),
    };
    Ok(response)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The hex SHA-256 of `data`, as `/sha256` writes it.
pub fn sha256_hex(data: &[u8]) -> String {
    hex(&Sha256::digest(data))
}

fn bytes_body(len: u64) -> Response<Body> {
    const CHUNK: u64 = 64 * 1024;
    let chunks = futures_util::stream::iter((0..len.div_ceil(CHUNK)).map(move |i| {
        let start = i * CHUNK;
        let end = (start + CHUNK).min(len);
        let chunk: Vec<u8> = (start..end).map(pattern).collect();
        Ok::<_, hyper::Error>(Frame::data(Bytes::from(chunk)))
    }));
    let mut r = Response::new(BodyExt::boxed(StreamBody::new(chunks)));
    r.headers_mut()
        .insert(http::header::CONTENT_LENGTH, http::HeaderValue::from(len));
    r
}

/// Three events, `gap_ms` apart (`/events?gap_ms=N`, 300 by default).
fn events(content_type: Option<String>, gap_ms: u64) -> Response<Body> {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, hyper::Error>>(4);
    tokio::spawn(async move {
        for i in 0..3 {
            if i > 0 {
                tokio::time::sleep(Duration::from_millis(gap_ms)).await;
            }
            let event = format!("data: event {i}\n\n");
            if tx.send(Ok(Frame::data(Bytes::from(event)))).await.is_err() {
                return;
            }
        }
    });
    let stream = tokio_stream_from(rx);
    let mut r = Response::new(BodyExt::boxed(StreamBody::new(stream)));
    let ct = content_type.unwrap_or_else(|| "text/event-stream".into());
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_str(&ct).unwrap_or(http::HeaderValue::from_static("text/plain")),
    );
    r
}

fn tokio_stream_from<T: Send + 'static>(
    mut rx: tokio::sync::mpsc::Receiver<T>,
) -> impl futures_util::Stream<Item = T> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

fn websocket(mut req: Request<Incoming>) -> Response<Body> {
    let Some(key) = req.headers().get("sec-websocket-key").cloned() else {
        return full(StatusCode::BAD_REQUEST, "not a websocket request\n");
    };
    let upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        let Ok(upgraded) = upgrade.await else { return };
        let mut ws = tokio_tungstenite::WebSocketStream::from_raw_socket(
            TokioIo::new(upgraded),
            Role::Server,
            None,
        )
        .await;
        while let Some(Ok(msg)) = ws.next().await {
            if msg.is_close() {
                break;
            }
            if (msg.is_binary() || msg.is_text()) && ws.send(msg).await.is_err() {
                break;
            }
        }
    });
    let mut r = full(StatusCode::SWITCHING_PROTOCOLS, Bytes::new());
    let h = r.headers_mut();
    h.insert(
        http::header::CONNECTION,
        http::HeaderValue::from_static("upgrade"),
    );
    h.insert(
        http::header::UPGRADE,
        http::HeaderValue::from_static("websocket"),
    );
    if let Ok(accept) = http::HeaderValue::from_str(&derive_accept_key(key.as_bytes())) {
        h.insert("sec-websocket-accept", accept);
    }
    r
}
