//! The edge's own answers when a request cannot reach an origin: short,
//! specific, HTML for browsers and plain text for everything else.

use bytes::Bytes;
use calvin_proto::{Port, PreviewName};
use http::header::{
    ACCEPT, CACHE_CONTROL, CONTENT_TYPE, HeaderValue, RETRY_AFTER, WWW_AUTHENTICATE,
};
use http::{HeaderMap, Response, StatusCode};
use http_body_util::Full;

/// A rate that was passed: the rate, and how long until a request passes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exceeded {
    pub per_second: u32,
    pub burst: u32,
    pub retry_after: std::time::Duration,
}

/// Names the failure in a response header, for scripts and tests.
pub const ERROR_HEADER: &str = "x-calvin-error";
/// A request's id: sent to the origin, and on the edge's own answers.
pub const REQUEST_ID_HEADER: &str = "x-request-id";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EdgeError {
    /// The host is not `<name>.<domain>`.
    NotAPreview,
    /// No preview has this name.
    UnknownName(PreviewName),
    /// The preview's agent is not connected.
    AgentOffline(PreviewName),
    /// The agent is connected, but nothing accepts connections on the port.
    NotListening(PreviewName, Port),
    /// The origin did not answer in time.
    Timeout(PreviewName, Port, u64),
    /// The agent did not answer a new connection in time.
    AgentNotAnswering(PreviewName, u64),
    /// The tunnel or the origin failed otherwise.
    BadGateway(PreviewName, String),
    /// The request's target is longer than the edge takes (bytes).
    UriTooLong(usize),
    /// The request has more header fields than the edge takes.
    TooManyHeaders(usize),
    /// The visitor's request body broke off or was malformed.
    BadRequestBody,
    /// The request's host is malformed or ambiguous.
    BadHost(&'static str),
    /// The host is not this edge's (or not this connection's) to serve.
    Misdirected(String),
    /// The preview's account has its most requests under way.
    AccountBusy(PreviewName, usize),
    /// The request body is over the configured cap (bytes).
    BodyTooLarge(u64),
    /// The request body came slower than the least rate: bytes per window
    /// of seconds.
    BodyTooSlow(u64, u64),
    /// The request body, read whole at the edge, stopped for this many
    /// seconds.
    BodyStalled(u64),
    /// Too many requests from an address or for a preview (`from ...`,
    /// `for preview ...`).
    RateLimited(String, Exceeded),
    /// The edge is stopping, and its grace period for requests under way
    /// ran out.
    Stopping,
    /// The edge restarted moments ago and the name is not claimed yet: its
    /// agent may still be reconnecting (it waited as long as for an
    /// offline preview).
    NotBackYet(PreviewName),
    /// The preview was made with a time to live, which is over.
    Ended(PreviewName),
    /// The preview is protected and the request holds no share token.
    ShareTokenMissing(PreviewName),
    /// The preview is protected and the request's share token is not one
    /// for it (altered, another preview's, revoked).
    ShareTokenInvalid(PreviewName),
    /// The preview is protected and the request's share token is past its
    /// expiry.
    ShareTokenExpired(PreviewName),
}

impl EdgeError {
    /// Every [`code`](Self::code), in the order of the variants.
    pub const CODES: [&'static str; 23] = [
        "not-a-preview",
        "unknown-preview",
        "agent-offline",
        "not-listening",
        "upstream-timeout",
        "agent-not-answering",
        "bad-gateway",
        "uri-too-long",
        "too-many-headers",
        "bad-request-body",
        "bad-host",
        "misdirected",
        "body-too-large",
        "account-busy",
        "body-too-slow",
        "body-stalled",
        "rate-limited",
        "edge-stopping",
        "not-back-yet",
        "preview-ended",
        "share-token-missing",
        "share-token-invalid",
        "share-token-expired",
    ];

    pub fn status(&self) -> StatusCode {
        match self {
            Self::NotAPreview | Self::UnknownName(_) => StatusCode::NOT_FOUND,
            Self::Ended(_) => StatusCode::GONE,
            Self::ShareTokenMissing(_)
            | Self::ShareTokenInvalid(_)
            | Self::ShareTokenExpired(_) => StatusCode::UNAUTHORIZED,
            Self::AgentOffline(_) | Self::NotListening(..) | Self::BadGateway(..) => {
                StatusCode::BAD_GATEWAY
            }
            Self::Timeout(..) | Self::AgentNotAnswering(..) => StatusCode::GATEWAY_TIMEOUT,
            Self::UriTooLong(_) => StatusCode::URI_TOO_LONG,
            Self::TooManyHeaders(_) => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            Self::BadRequestBody | Self::BadHost(_) => StatusCode::BAD_REQUEST,
            Self::Misdirected(_) => StatusCode::MISDIRECTED_REQUEST,
            Self::BodyTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::AccountBusy(..) | Self::Stopping | Self::NotBackYet(_) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            Self::BodyTooSlow(..) | Self::BodyStalled(_) => StatusCode::REQUEST_TIMEOUT,
            Self::RateLimited(..) => StatusCode::TOO_MANY_REQUESTS,
        }
    }

    /// The preview the request was for, when the error names one.
    pub fn preview(&self) -> Option<&PreviewName> {
        match self {
            Self::UnknownName(n)
            | Self::AgentOffline(n)
            | Self::NotListening(n, _)
            | Self::Timeout(n, ..)
            | Self::AgentNotAnswering(n, _)
            | Self::BadGateway(n, _)
            | Self::AccountBusy(n, _)
            | Self::NotBackYet(n)
            | Self::Ended(n)
            | Self::ShareTokenMissing(n)
            | Self::ShareTokenInvalid(n)
            | Self::ShareTokenExpired(n) => Some(n),
            _ => None,
        }
    }

    /// A stable code for the `x-calvin-error` header.
    pub fn code(&self) -> &'static str {
        match self {
            Self::NotAPreview => "not-a-preview",
            Self::UnknownName(_) => "unknown-preview",
            Self::AgentOffline(_) => "agent-offline",
            Self::NotListening(..) => "not-listening",
            Self::Timeout(..) => "upstream-timeout",
            Self::AgentNotAnswering(..) => "agent-not-answering",
            Self::BadGateway(..) => "bad-gateway",
            Self::UriTooLong(_) => "uri-too-long",
            Self::TooManyHeaders(_) => "too-many-headers",
            Self::BadRequestBody => "bad-request-body",
            Self::BadHost(_) => "bad-host",
            Self::Misdirected(_) => "misdirected",
            Self::BodyTooLarge(_) => "body-too-large",
            Self::AccountBusy(..) => "account-busy",
            Self::BodyTooSlow(..) => "body-too-slow",
            Self::BodyStalled(_) => "body-stalled",
            Self::RateLimited(..) => "rate-limited",
            Self::Stopping => "edge-stopping",
            Self::NotBackYet(_) => "not-back-yet",
            Self::Ended(_) => "preview-ended",
            Self::ShareTokenMissing(_) => "share-token-missing",
            Self::ShareTokenInvalid(_) => "share-token-invalid",
            Self::ShareTokenExpired(_) => "share-token-expired",
        }
    }

    pub fn message(&self) -> String {
        match self {
            Self::NotAPreview => "not a preview: this address does not name a preview".into(),
            Self::UnknownName(n) => format!("no preview named {n}"),
            Self::AgentOffline(n) => {
                format!("preview {n} is offline: the computer serving it is not connected")
            }
            Self::NotListening(n, port) => {
                format!("preview {n}: nothing is listening on port {port}")
            }
            Self::Timeout(n, port, secs) => {
                format!("preview {n}: the server on port {port} did not answer within {secs} s")
            }
            Self::AgentNotAnswering(n, secs) => {
                format!("preview {n}: the computer serving it did not answer within {secs} s")
            }
            Self::BadGateway(n, why) => format!("preview {n}: {why}"),
            Self::UriTooLong(max) => format!("the request's URI is longer than {max} bytes"),
            Self::TooManyHeaders(max) => format!("the request has more than {max} header fields"),
            Self::BadRequestBody => {
                "the request body broke off or was malformed; it was not passed on whole".into()
            }
            Self::BadHost(why) => format!("bad host: {why}"),
            Self::Misdirected(why) => format!("misdirected request: {why}"),
            Self::BodyTooLarge(cap) => format!("the request body is larger than {cap} bytes"),
            Self::AccountBusy(n, max) => format!(
                "preview {n}: its account has {max} requests under way, its most; retry shortly"
            ),
            Self::BodyTooSlow(bytes, secs) => format!(
                "the request body came slower than {bytes} bytes in {secs} s; it was not passed on whole"
            ),
            Self::BodyStalled(secs) => format!(
                "the request body stopped for {secs} s before its end; it was not passed on"
            ),
            Self::RateLimited(scope, e) => format!(
                "too many requests {scope}: at most {} per second (bursts of {}); retry in {} s",
                e.per_second,
                e.burst,
                self.retry_after().unwrap_or(1)
            ),
            Self::Stopping => {
                "the edge is restarting or stopping, and this request ran past its grace period; retry shortly".into()
            }
            Self::NotBackYet(n) => format!(
                "no preview named {n} yet: the edge restarted moments ago and the computers serving previews are still reconnecting; retry shortly"
            ),
            Self::Ended(n) => format!(
                "this preview has ended: {n} was made to last a set time, which is over"
            ),
            Self::ShareTokenMissing(n) => format!(
                "preview {n} is private: open it with the share link from the person who shared it"
            ),
            Self::ShareTokenInvalid(n) => format!(
                "preview {n} is private and this link does not open it (it was changed, is for another preview, or was revoked): ask the person who shared it for a new share link"
            ),
            Self::ShareTokenExpired(n) => format!(
                "preview {n} is private and this share link has expired: ask the person who shared it for a new one"
            ),
        }
    }

    /// The response for a visitor who accepts HTML (see [`accepts_html`]),
    /// or plain text; it names the request's id (also in `X-Request-Id`),
    /// for the visitor to quote.
    pub fn response(&self, as_html: bool, request_id: &str) -> Response<Full<Bytes>> {
        let status = self.status();
        let message = self.message();
        let (content_type, body) = if as_html {
            (
                "text/html; charset=utf-8",
                html(status, &message, request_id),
            )
        } else {
            (
                "text/plain; charset=utf-8",
                format!("{message}\nrequest id: {request_id}\n"),
            )
        };
        let mut response = Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() = status;
        let h = response.headers_mut();
        h.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
        h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
        h.insert(ERROR_HEADER, HeaderValue::from_static(self.code()));
        if let Some(secs) = self.retry_after() {
            h.insert(RETRY_AFTER, HeaderValue::from(secs));
        }
        if status == StatusCode::UNAUTHORIZED {
            h.insert(
                WWW_AUTHENTICATE,
                HeaderValue::from_static(r#"Bearer realm="calvin""#),
            );
        }
        if let Ok(id) = HeaderValue::from_str(request_id) {
            h.insert(REQUEST_ID_HEADER, id);
        }
        response
    }

    /// Whole seconds a refused visitor should wait, when that is known.
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            Self::RateLimited(_, e) => Some(e.retry_after.as_secs_f64().ceil().max(1.0) as u64),
            // The edge already waited for it to come back; a few seconds
            // more is a fair guess.
            Self::AgentOffline(_) | Self::NotListening(..) => Some(5),
            // An edge restarting is back within seconds, and its agents
            // with it.
            Self::Stopping | Self::NotBackYet(_) => Some(5),
            Self::AccountBusy(..) => Some(1),
            _ => None,
        }
    }
}

/// Whether a request's Accept header names `text/html`.
pub fn accepts_html(headers: &HeaderMap) -> bool {
    headers
        .get_all(ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|media| {
            let media = media.split(';').next().unwrap_or("").trim();
            media.eq_ignore_ascii_case("text/html")
        })
}

fn html(status: StatusCode, message: &str, request_id: &str) -> String {
    let title = format!(
        "{} {}",
        status.as_u16(),
        status.canonical_reason().unwrap_or("")
    );
    format!(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>{title}</title></head>\n\
         <body><h1>{title}</h1><p>{}</p><p><small>calvin &middot; request id {}</small></p></body></html>\n",
        escape(message),
        escape(request_id)
    )
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(r: Response<Full<Bytes>>) -> String {
        use http_body_util::BodyExt;
        let collected = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(r.into_body().collect());
        let Ok(collected) = collected;
        String::from_utf8(collected.to_bytes().to_vec()).unwrap()
    }

    #[test]
    fn plain_text_unless_html_is_accepted() {
        let err = EdgeError::NotListening(
            PreviewName::parse("web").unwrap(),
            3000u16.try_into().unwrap(),
        );
        assert!(!accepts_html(&HeaderMap::new()));
        let r: Response<Full<Bytes>> = err.response(false, "0f1e2d3c4b5a6978");
        assert_eq!(r.status(), 502);
        assert_eq!(r.headers()[CONTENT_TYPE], "text/plain; charset=utf-8");
        assert_eq!(r.headers()[ERROR_HEADER], "not-listening");
        assert_eq!(r.headers()[REQUEST_ID_HEADER], "0f1e2d3c4b5a6978");
        assert_eq!(
            body(r),
            "preview web: nothing is listening on port 3000\nrequest id: 0f1e2d3c4b5a6978\n"
        );

        let mut h = HeaderMap::new();
        h.insert(
            ACCEPT,
            HeaderValue::from_static("text/html,application/xhtml+xml;q=0.9"),
        );
        assert!(accepts_html(&h));
        let r: Response<Full<Bytes>> = err.response(true, "<id>");
        assert_eq!(r.headers()[CONTENT_TYPE], "text/html; charset=utf-8");
        let page = body(r);
        assert!(page.contains("request id &lt;id&gt;"), "{page}");
        assert!(page.contains("<title>502 Bad Gateway</title>"), "{page}");
        assert!(page.contains("nothing is listening on port 3000"), "{page}");
    }

    #[test]
    fn statuses() {
        let n = PreviewName::parse("x").unwrap();
        let p: Port = 1u16.try_into().unwrap();
        assert_eq!(EdgeError::NotAPreview.status(), 404);
        assert_eq!(EdgeError::UnknownName(n.clone()).status(), 404);
        assert_eq!(EdgeError::AgentOffline(n.clone()).status(), 502);
        assert_eq!(EdgeError::NotListening(n.clone(), p).status(), 502);
        assert_eq!(EdgeError::Timeout(n.clone(), p, 5).status(), 504);
        assert_eq!(EdgeError::AgentNotAnswering(n.clone(), 5).status(), 504);
        assert_eq!(EdgeError::BadGateway(n, "x".into()).status(), 502);
        assert_eq!(EdgeError::Stopping.status(), 503);
    }

    #[test]
    fn every_code_is_listed_once() {
        let n = PreviewName::parse("x").unwrap();
        let p: Port = 1u16.try_into().unwrap();
        let exceeded = Exceeded {
            per_second: 1,
            burst: 1,
            retry_after: std::time::Duration::from_secs(1),
        };
        let every = [
            EdgeError::NotAPreview,
            EdgeError::UnknownName(n.clone()),
            EdgeError::AgentOffline(n.clone()),
            EdgeError::NotListening(n.clone(), p),
            EdgeError::Timeout(n.clone(), p, 1),
            EdgeError::AgentNotAnswering(n.clone(), 1),
            EdgeError::BadGateway(n.clone(), "x".into()),
            EdgeError::UriTooLong(1),
            EdgeError::TooManyHeaders(1),
            EdgeError::BadRequestBody,
            EdgeError::BadHost("x"),
            EdgeError::Misdirected("x".into()),
            EdgeError::BodyTooLarge(1),
            EdgeError::AccountBusy(n.clone(), 1),
            EdgeError::BodyTooSlow(1, 1),
            EdgeError::BodyStalled(1),
            EdgeError::RateLimited("x".into(), exceeded),
            EdgeError::Stopping,
            EdgeError::NotBackYet(n.clone()),
            EdgeError::Ended(n.clone()),
            EdgeError::ShareTokenMissing(n.clone()),
            EdgeError::ShareTokenInvalid(n.clone()),
            EdgeError::ShareTokenExpired(n.clone()),
        ];
        let codes: Vec<&str> = every.iter().map(EdgeError::code).collect();
        assert_eq!(codes, EdgeError::CODES);
    }

    #[test]
    fn html_is_escaped() {
        assert_eq!(
            escape("<a href=\"x\">&</a>"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&lt;/a&gt;"
        );
    }
}
