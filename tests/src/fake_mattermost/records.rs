//! What the fake keeps for assertions: each write as it was asked for,
//! each dialog, and each call the fake made to an integration.

use std::time::Instant;

use serde_json::Value;

/// Where a write came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A REST request (the integration under test).
    Api,
    /// A test helper ([`add_post`](super::FakeMattermost::add_post), ...).
    Helper,
    /// An integration's answer to a click (`update`, `ephemeral_text`).
    Callback,
}

/// A post, as it was created.
#[derive(Debug, Clone, PartialEq)]
pub struct PostRecord {
    pub id: String,
    pub channel_id: String,
    pub user_id: String,
    /// `""` for a root post.
    pub root_id: String,
    pub message: String,
    /// The `props` as given (attachments verbatim, before action ids were
    /// filled in).
    pub props: Value,
    /// The `file_ids` as given (those that did not attach are dropped from
    /// the stored post, as Mattermost does).
    pub file_ids: Vec<String>,
    pub source: Source,
    /// The request body exactly as received (`None` for helpers).
    pub body: Option<Value>,
}

/// A change to a post: `PUT /posts/{id}/patch`, or a click's `update`.
#[derive(Debug, Clone, PartialEq)]
pub struct Update {
    pub post_id: String,
    /// The new message, when the change set one.
    pub message: Option<String>,
    /// The new props, when the change set them.
    pub props: Option<Value>,
    pub source: Source,
    /// The request body (or the `update` object) as received.
    pub body: Value,
}

/// An ephemeral post: `POST /posts/ephemeral`, or a click's
/// `ephemeral_text`. Never stored as a post.
#[derive(Debug, Clone, PartialEq)]
pub struct Ephemeral {
    pub id: String,
    /// Who sees it.
    pub user_id: String,
    pub channel_id: String,
    pub root_id: String,
    pub message: String,
    pub source: Source,
}

/// A file uploaded with `POST /files`.
#[derive(Debug, Clone, PartialEq)]
pub struct UploadedFile {
    pub id: String,
    /// The part's filename.
    pub name: String,
    pub channel_id: String,
    pub bytes: Vec<u8>,
    /// The post it was attached to, if any.
    pub post_id: Option<String>,
}

/// A dialog opened with `POST /actions/dialogs/open`.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenedDialog {
    pub trigger_id: String,
    /// Where its submission goes.
    pub url: String,
    /// The `dialog` object as received.
    pub dialog: Value,
    /// Whose click issued the trigger.
    pub user_id: String,
    /// The channel of the post clicked.
    pub channel_id: String,
    pub opened_at: Instant,
    /// Still shown: not submitted successfully, nor cancelled.
    pub open: bool,
}

/// A request the fake made to an integration, as Mattermost would: a
/// click's action payload or a dialog submission.
#[derive(Debug, Clone, PartialEq)]
pub struct Callback {
    pub url: String,
    /// The JSON body sent.
    pub body: Value,
    /// The HTTP status answered (`None`: no answer).
    pub status: Option<u16>,
    /// The answer's JSON (`Null` for an empty body).
    pub answer: Option<Value>,
    /// Why it failed, if it did.
    pub error: Option<String>,
}
