//! What the fake keeps for assertions: each accepted write, as it was
//! asked for, and each reactions.add call, refused or not.

use std::time::Instant;

use serde_json::{Map, Value};

/// A message posted with chat.postMessage.
#[derive(Debug, Clone, PartialEq)]
pub struct PostedMessage {
    pub channel: String,
    pub ts: String,
    /// The `thread_ts` argument as given.
    pub thread_ts: Option<String>,
    pub text: Option<String>,
    /// The `blocks` array exactly as received.
    pub blocks: Option<Value>,
    /// Every argument received but the token (`parse`, `link_names`,
    /// `unfurl_links`, `unfurl_media`, ...), as given: text from a form or
    /// query string, JSON values from a JSON body.
    pub args: Map<String, Value>,
}

impl PostedMessage {
    /// One argument as given, e.g. `arg("unfurl_links")`.
    pub fn arg(&self, name: &str) -> Option<&Value> {
        self.args.get(name)
    }
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

/// A message changed with chat.update.
#[derive(Debug, Clone, PartialEq)]
pub struct Update {
    pub channel: String,
    pub ts: String,
    /// The new text (`text`, else `markdown_text`), if one was given.
    pub text: Option<String>,
    /// The new `blocks` as received, if given (else the old ones stay).
    pub blocks: Option<Value>,
}

/// A message posted with chat.postEphemeral.
#[derive(Debug, Clone, PartialEq)]
pub struct Ephemeral {
    pub channel: String,
    /// Who sees it.
    pub user: String,
    pub message_ts: String,
    pub thread_ts: Option<String>,
    pub text: Option<String>,
    pub blocks: Option<Value>,
}

/// A reactions.add call, as asked for, and how it was answered.
#[derive(Debug, Clone, PartialEq)]
pub struct AddedReaction {
    /// The `channel` argument (empty when missing).
    pub channel: String,
    /// The `name` argument (empty when missing).
    pub name: String,
    /// The `timestamp` argument (empty when missing).
    pub timestamp: String,
    /// The error code it was refused with; `None` when the reaction was
    /// added.
    pub error: Option<String>,
}

/// A modal opened with views.open.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenedView {
    /// `V…`.
    pub id: String,
    /// The user whose interaction issued the trigger.
    pub user: String,
    pub trigger_id: String,
    /// The view as views.open answered it (with id, hash, state, ...).
    pub view: Value,
    pub opened_at: Instant,
}
