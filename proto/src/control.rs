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
}

/// The answer to `POST /v1/previews`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreviewCreated {
    pub url: String,
    pub name: String,
    /// Whether a TCP connect to the port succeeded when the preview was made.
    pub listening: bool,
}

/// One entry of `GET /v1/previews`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreviewEntry {
    pub name: String,
    pub port: u16,
    pub url: String,
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
