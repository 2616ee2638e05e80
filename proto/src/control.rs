//! The JSON of the agent's control API (`/v1/previews` on its Unix socket),
//! shared by the agent that serves it and every client (the agent's own
//! commands, the gateway): a wire fact, so it lives here.

use serde::{Deserialize, Serialize};

/// `POST /v1/previews`. Fields are checked by the daemon, which answers
/// each problem with its own message.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PreviewRequest {
    pub port: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Seconds until the preview is taken down; a visitor then reads
    /// "this preview has ended" (410). Absent: it lasts until unpreview.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_secs: Option<i64>,
    /// Whether the agent probes the port for the usual mistakes (one
    /// `HEAD /` with the preview's Host, bounded to 1 s). Absent: true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe: Option<bool>,
    /// Only visitors with a share link open it (others get 401): the
    /// answer's `share_url`. Absent: false (public).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protect: Option<bool>,
    /// With `protect`: seconds the share link works (60 to 31536000).
    /// Absent: 7 days.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_secs: Option<i64>,
}

/// `POST /v1/previews/{name}/protect`: protect the preview (if it is
/// not) and make a fresh share link.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProtectRequest {
    /// A new salt first: every share link made before stops working.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rotate: bool,
    /// Seconds the new link works (60 to 31536000). Absent: 7 days.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_secs: Option<i64>,
    /// Make the preview public again (no link is made).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub off: bool,
}

/// The answer to `POST /v1/previews/{name}/protect`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Protected {
    pub name: String,
    pub url: String,
    /// Whether the preview is protected now.
    pub protected: bool,
    /// The preview's URL with a share token; absent when not protected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_url: Option<String>,
    /// When the share link stops working (RFC 3339, UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_expires: Option<String>,
}

/// The answer to `POST /v1/previews`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreviewCreated {
    pub url: String,
    pub name: String,
    /// Whether a TCP connect to the port succeeded when the preview was made.
    pub listening: bool,
    /// Where the agent reached the server, `127.0.0.1:PORT` or
    /// `[::1]:PORT` (it tries IPv4 loopback, then IPv6); absent when
    /// nothing listened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reached: Option<String>,
    /// What the probe found that will stop the preview from working as
    /// meant, each with its fix. Empty when all is well or not probed.
    #[serde(default)]
    pub warnings: Vec<Warning>,
    /// When the preview ends (RFC 3339, UTC), if it was made with a TTL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// A protected preview's share link: its URL with a token that lets
    /// a visitor in (`?calvin_share=...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_url: Option<String>,
    /// When the share link stops working (RFC 3339, UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_expires: Option<String>,
}

/// A problem the agent found with a preview, and how to fix it: a warning
/// of the probe at creation, or a hint from a response that a dev server
/// refused a visitor with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Warning {
    /// Stable, for programs: `ipv6_loopback_only`, `other_interface_only`,
    /// `tls_not_http`, `vite_host_blocked`, `django_disallowed_host`,
    /// `webpack_invalid_host`, `rails_blocked_host`, `django_csrf_origin`...
    pub code: String,
    /// One sentence: what is wrong.
    pub message: String,
    /// What to change, with the exact value.
    pub fix: String,
}

/// One entry of `GET /v1/previews`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreviewEntry {
    pub name: String,
    pub port: u16,
    pub url: String,
    /// When the preview ends (RFC 3339, UTC), if it has a TTL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// Only visitors with a share link open it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub protected: bool,
    /// Refusals by the dev server that visitors met, each once, with the
    /// setting that fixes it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hints: Vec<Warning>,
}

/// The answer to `GET /v1/previews`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreviewList {
    /// Whether the agent is connected to its edge now.
    pub connected: bool,
    /// The edge it is connected to now (of those `--edge` named), as
    /// `host:port`, or `host:port (address)` for a name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edge: Option<String>,
    pub previews: Vec<PreviewEntry>,
}

/// The answer to `DELETE /v1/previews/{name}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreviewDeleted {
    pub name: String,
}

/// Every error answer: a stable code and a message for a person.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiError {
    pub code: String,
    pub error: String,
}

/// A body as the request log keeps it: its first bytes (4 KiB at most),
/// as text when they are UTF-8, else base64.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoggedBody {
    /// The whole body's size in bytes (as far as it went).
    pub size: u64,
    /// The first bytes kept.
    pub text: String,
    /// `text` holds base64, the bytes not being UTF-8.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub base64: bool,
    /// The body was longer than what was kept.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cut: bool,
}

/// One request through a preview, as the agent saw it go to the local
/// port and come back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoggedRequest {
    /// Increasing per agent; what replay takes.
    pub id: u64,
    /// When the request's head reached the agent (RFC 3339, UTC).
    pub time: String,
    pub method: String,
    /// Path and query, as sent.
    pub path: String,
    /// The visitor's address, as the edge saw it (`X-Forwarded-For`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// The response's status; absent while it is awaited, or when the
    /// connection ended before one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// From the request's head to the response's end, or to the end of
    /// the connection when that came first; absent while the response is
    /// still coming.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<f64>,
    /// Bytes of the request's and the response's bodies.
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Headers in order; `Authorization`, `Cookie`, `Set-Cookie` (and
    /// `Proxy-Authorization`) values masked unless the agent was told not to.
    pub request_headers: Vec<(String, String)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_body: Option<LoggedBody>,
    #[serde(default)]
    pub response_headers: Vec<(String, String)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_body: Option<LoggedBody>,
    /// The connection switched protocols (a WebSocket): what followed is
    /// not logged.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub upgraded: bool,
    /// This entry is a replay of the request with this id, sent by the
    /// agent straight to the port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_of: Option<u64>,
}

/// `GET /v1/previews/{name}/requests`: the newest last.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestLog {
    pub name: String,
    pub requests: Vec<LoggedRequest>,
    /// What the dev server's refusals suggest (see [`Warning`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hints: Vec<Warning>,
}
