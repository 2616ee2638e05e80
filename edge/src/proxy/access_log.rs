//! A visitor request's id, its access log line and its byte counts.
//!
//! Every request gets an id: the visitor's own `X-Request-Id` when it sent
//! a sane one, else 16 random hex digits, which the origin receives in
//! `X-Request-Id` and the edge's error pages show. When the response body
//! ends (or the visitor goes), [`Counted`] adds the bytes moved to the
//! metrics and writes the access line (target `calvin_edge::access`, at
//! info), unless `[log] access = false`.

use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http::header::HeaderValue;
use http::{Method, Request, Version};
use hyper::body::{Body, Frame, SizeHint};

use calvin_common::{Level, LogField, write_log_line};

use crate::counts::Counts;
use crate::error_page::REQUEST_ID_HEADER;
use crate::request_body::BodyWatch;

/// The access log's target.
pub const ACCESS_TARGET: &str = "calvin_edge::access";

/// Longest visitor-sent request id the edge keeps (Heroku's router keeps
/// 20 to 200 characters); longer or with other than visible ASCII, it is
/// replaced with the edge's own.
pub const MAX_VISITOR_ID: usize = 200;

/// A request's id: the visitor's (kept), or the edge's own, kept on the
/// stack until the request needs it as a header (one allocation then).
#[derive(Clone)]
pub enum RequestId {
    Theirs(HeaderValue),
    Ours([u8; 16]),
}

impl RequestId {
    pub fn as_str(&self) -> &str {
        match self {
            // A kept id is visible ASCII (see `acceptable`).
            Self::Theirs(value) => value.to_str().unwrap_or("-"),
            Self::Ours(digits) => std::str::from_utf8(digits).unwrap_or("-"),
        }
    }

    /// Whether the request must be given this id (the visitor sent none,
    /// or none kept).
    pub fn ours(&self) -> bool {
        matches!(self, Self::Ours(_))
    }
}

/// The request's id: the visitor's when it sent one sane one, or a new
/// one, which [`set`] gives the request once its head passes the limits.
pub fn identify<B>(req: &Request<B>) -> RequestId {
    if let Some(theirs) = req.headers().get(REQUEST_ID_HEADER)
        && acceptable(theirs.as_bytes())
        && req.headers().get_all(REQUEST_ID_HEADER).iter().count() == 1
    {
        return RequestId::Theirs(theirs.clone());
    }
    new_id()
}

/// Gives the request the edge's id, for the origin, replacing any the
/// visitor sent.
pub fn set<B>(req: &mut Request<B>, id: &RequestId) {
    if let RequestId::Ours(digits) = id
        && let Ok(value) = HeaderValue::from_bytes(digits)
    {
        req.headers_mut().insert(REQUEST_ID_HEADER, value);
    }
}

fn acceptable(id: &[u8]) -> bool {
    (1..=MAX_VISITOR_ID).contains(&id.len()) && id.iter().all(|b| b.is_ascii_graphic())
}

/// 16 random lowercase hex digits.
pub fn new_id() -> RequestId {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bits: u64 = rand::random();
    let mut digits = [0u8; 16];
    for (i, digit) in digits.iter_mut().enumerate() {
        *digit = HEX[((bits >> (60 - 4 * i)) & 0xf) as usize];
    }
    RequestId::Ours(digits)
}

/// What the access line says of a request besides its outcome.
pub struct AccessRecord {
    pub id: RequestId,
    pub method: Method,
    /// The path, with the query when `[log] access_query` asks for it.
    pub target: String,
    pub client: SocketAddr,
    pub version: Version,
    /// The preview, once routed.
    pub preview: Option<String>,
}

impl AccessRecord {
    pub fn new<B>(req: &Request<B>, id: RequestId, client: SocketAddr, query: bool) -> Self {
        let uri = req.uri();
        let target = match (query, uri.path_and_query()) {
            // A share link's token is a secret: never in a log.
            (true, Some(pq)) => crate::share::masked(pq.as_str()).into_owned(),
            _ => uri.path().to_owned(),
        };
        Self {
            id,
            method: req.method().clone(),
            target,
            client,
            version: req.version(),
            preview: None,
        }
    }
}

/// What is counted and logged when a response ends.
pub struct Finish {
    pub counts: Counts,
    pub arrived: Instant,
    pub status: u16,
    /// The request body's progress (its bytes), when it was forwarded.
    pub upload: Option<BodyWatch>,
    pub access: Option<Box<AccessRecord>>,
}

/// A response body that counts what it sends, and at its end (or when the
/// visitor goes) counts the request's bytes and writes its access line.
pub struct Counted<B> {
    inner: B,
    sent: u64,
    finish: Option<Finish>,
}

impl<B> Counted<B> {
    pub fn new(inner: B, finish: Finish) -> Self {
        Self {
            inner,
            sent: 0,
            finish: Some(finish),
        }
    }
}

impl<B: Body<Data = Bytes> + Unpin> Body for Counted<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled
            && let Some(data) = frame.data_ref()
        {
            self.sent += data.len() as u64;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<B> Drop for Counted<B> {
    fn drop(&mut self) {
        let Some(finish) = self.finish.take() else {
            return;
        };
        let received = finish.upload.as_ref().map_or(0, BodyWatch::bytes);
        finish.counts.moved(received, self.sent);
        if let Some(access) = finish.access {
            log_access(&access, finish.status, received, self.sent, finish.arrived);
        }
    }
}

/// Writes a request's access line, in the log's format, through the
/// batched writer ([`calvin_common::batched_log`]): built in a buffer the
/// thread keeps, with no allocation and no system call on the request's
/// way (tracing's formatter and a write to stderr per line cost as much as
/// proxying the request). Its fields and their order are those a tracing
/// event would have.
fn log_access(access: &AccessRecord, status: u16, received: u64, sent: u64, arrived: Instant) {
    let protocol = match access.version {
        Version::HTTP_2 => "h2",
        Version::HTTP_3 => "h3",
        Version::HTTP_10 => "http/1.0",
        _ => "http/1.1",
    };
    let fields = [
        ("request_id", LogField::Str(access.id.as_str())),
        (
            "preview",
            LogField::Str(access.preview.as_deref().unwrap_or("-")),
        ),
        ("method", LogField::Display(&access.method)),
        ("path", LogField::Str(&access.target)),
        ("status", LogField::Number(u64::from(status))),
        ("bytes_in", LogField::Number(received)),
        ("bytes_out", LogField::Number(sent)),
        (
            "duration_ms",
            LogField::Float(arrived.elapsed().as_micros() as f64 / 1e3),
        ),
        ("client", LogField::Display(&access.client)),
        ("protocol", LogField::Str(protocol)),
    ];
    thread_local! {
        static LINE: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    LINE.with_borrow_mut(|line| {
        line.clear();
        let format = calvin_common::process::log_format();
        write_log_line(line, format, Level::INFO, ACCESS_TARGET, "access", &fields);
        calvin_common::batched_log::push(line);
        line.shrink_to(4096);
    });
}

#[cfg(test)]
mod tests {
    use calvin_common::LogFormat;

    use super::*;

    #[test]
    fn a_sane_visitor_id_is_kept_and_others_replaced() {
        let with = |ids: &[&[u8]]| {
            let mut req = Request::new(());
            for id in ids {
                req.headers_mut()
                    .append(REQUEST_ID_HEADER, HeaderValue::from_bytes(id).unwrap());
            }
            let id = identify(&req);
            set(&mut req, &id);
            let sent: Vec<_> = req.headers().get_all(REQUEST_ID_HEADER).iter().collect();
            (id.as_str().to_owned(), sent.len(), sent[0].clone())
        };
        let at_most = vec![b'a'; MAX_VISITOR_ID];
        for keep in [&b"abc-123"[..], &at_most] {
            let (id, n, sent) = with(&[keep]);
            assert_eq!(id.as_bytes(), keep);
            assert_eq!((n, sent.as_bytes()), (1, keep));
        }
        let one_past = vec![b'a'; MAX_VISITOR_ID + 1];
        for replace in [&[&one_past[..]][..], &[b"has space"], &[b""], &[b"a", b"b"]] {
            let (id, n, sent) = with(replace);
            assert_eq!(id.len(), 16, "{replace:?}");
            assert!(id.bytes().all(|b| b.is_ascii_hexdigit()));
            assert_eq!((n, sent.to_str().unwrap()), (1, id.as_str()), "{replace:?}");
        }
        let (none, _, _) = with(&[]);
        let (other, _, _) = with(&[]);
        assert_ne!(none, other);
    }

    fn record() -> AccessRecord {
        let req = Request::get("/a%22b?token=x").body(()).unwrap();
        let mut access = AccessRecord::new(
            &req,
            RequestId::Theirs(HeaderValue::from_static("id-\"quoted\"")),
            "127.0.0.1:4242".parse().unwrap(),
            false,
        );
        access.preview = Some("web".into());
        access
    }

    /// The line of [`record`] answered 200 in 1.25 ms, in `format`.
    fn written(format: LogFormat) -> String {
        let access = record();
        let mut line = Vec::new();
        write_log_line(
            &mut line,
            format,
            Level::INFO,
            ACCESS_TARGET,
            "access",
            &[
                ("request_id", LogField::Str(access.id.as_str())),
                ("method", LogField::Display(&access.method)),
                ("path", LogField::Str(&access.target)),
                ("status", LogField::Number(200)),
                ("duration_ms", LogField::Float(1.25)),
                ("client", LogField::Display(&access.client)),
            ],
        );
        String::from_utf8(line).unwrap()
    }

    #[test]
    fn the_json_access_line_is_the_object_tracing_would_write() {
        let text = written(LogFormat::Json);
        assert!(
            text.ends_with("}\n") && text.matches('\n').count() == 1,
            "{text}"
        );
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert!(
            value["timestamp"].as_str().unwrap().ends_with('Z'),
            "{value}"
        );
        assert_eq!(value["level"], "INFO");
        assert_eq!(value["message"], "access");
        assert_eq!(value["target"], "calvin_edge::access");
        assert_eq!(value["request_id"], "id-\"quoted\"");
        assert_eq!(value["method"], "GET");
        assert_eq!(value["path"], "/a%22b");
        assert_eq!(value["status"], 200);
        assert_eq!(value["duration_ms"], 1.25);
        assert_eq!(value["client"], "127.0.0.1:4242");
    }

    #[test]
    fn the_text_access_line_reads_as_tracing_would_write_it() {
        let text = written(LogFormat::Text);
        let (_, rest) = text.split_once("  ").unwrap();
        assert_eq!(
            rest,
            "INFO calvin_edge::access: access request_id=\"id-\\\"quoted\\\"\" method=GET \
             path=\"/a%22b\" status=200 duration_ms=1.25 client=127.0.0.1:4242\n"
        );
    }
}
