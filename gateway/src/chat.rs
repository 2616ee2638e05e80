//! The chat platform as the tools see it: a small backend trait, so the
//! tools do not depend on Slack's types. [`crate::slack::SlackBackend`] is
//! the implementation; tests point it at a fake Slack server.

use serde_json::Value;

/// A thread to post into: a channel and the `ts` of the thread's parent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadRef {
    pub channel: String,
    pub thread_ts: String,
}

/// A file to upload into a thread.
#[derive(Debug, Clone)]
pub struct Upload {
    /// The file's name (no directories), e.g. `plot.png`.
    pub filename: String,
    pub bytes: Vec<u8>,
    /// Defaults to the file name when `None`.
    pub title: Option<String>,
    /// Posted with the file (Slack's `initial_comment`).
    pub comment: Option<String>,
    /// Image description for screen readers.
    pub alt_text: Option<String>,
}

/// What an upload created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uploaded {
    pub file_id: String,
    pub permalink: Option<String>,
}

/// What a posted message created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Posted {
    pub channel: String,
    pub ts: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChatError {
    /// The platform refused the request with this error code
    /// (Slack's `"error"`, e.g. `channel_not_found`).
    #[error("Slack answered {0}")]
    Api(String),
    /// Slack refused the blocks (`invalid_blocks`); the caller may post a
    /// simpler form.
    #[error("Slack refused the blocks: {0}")]
    InvalidBlocks(String),
    /// Still rate limited after honouring Retry-After.
    #[error("Slack is rate limiting; retry in {retry_after_secs} s")]
    RateLimited { retry_after_secs: u64 },
    /// The platform could not be reached, or answered something unreadable.
    #[error("cannot reach Slack: {0}")]
    Transport(String),
}

/// Posting into threads: what send_file and post_card need. Later tools add
/// methods here.
#[async_trait::async_trait]
pub trait ChatBackend: Send + Sync + 'static {
    /// Uploads a file into the thread (Slack: files.getUploadURLExternal,
    /// the upload, files.completeUploadExternal with channel_id,
    /// thread_ts, title, initial_comment and alt_txt).
    async fn upload_file(&self, thread: &ThreadRef, upload: Upload) -> Result<Uploaded, ChatError>;

    /// Posts a message with Block Kit `blocks` (a JSON array) and `text` as
    /// the notification fallback into the thread (chat.postMessage).
    async fn post_blocks(
        &self,
        thread: &ThreadRef,
        text: &str,
        blocks: &Value,
    ) -> Result<Posted, ChatError>;
}
