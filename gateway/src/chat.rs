//! The chat platform as the tools see it: a small backend trait, so the
//! tools do not depend on Slack's types. [`crate::slack::backend`] is
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

/// The workspace the bot belongs to (Slack's auth.test).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    /// The host of its permalinks, e.g. `acme.slack.com`.
    pub host: String,
    /// The bot's own user id.
    pub bot_user: String,
    /// The bot's id (`B…`), which its messages carry as `bot_id`.
    pub bot_id: Option<String>,
}

/// What the tools need to know of a conversation (conversations.info).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conversation {
    pub id: String,
    pub name: Option<String>,
    pub is_private: bool,
    /// A direct message between two people (or a person and the bot).
    pub is_im: bool,
    /// A group direct message.
    pub is_mpim: bool,
    /// Whether the bot is a member.
    pub is_member: bool,
}

impl Conversation {
    /// A channel anyone in the workspace can read.
    pub fn is_public(&self) -> bool {
        !self.is_private && !self.is_im && !self.is_mpim
    }

    /// How to name it in a sentence: `#name`, or the id.
    pub fn label(&self) -> String {
        match &self.name {
            Some(name) if !self.is_im && !self.is_mpim => format!("#{name}"),
            _ => self.id.clone(),
        }
    }
}

/// A message read back from a thread (conversations.replies).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadMessage {
    pub ts: String,
    /// The author, for a person's message.
    pub user: Option<String>,
    /// The bot that posted it, for an app's message.
    pub bot_id: Option<String>,
    pub text: String,
}

/// A message found by a search (search.messages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub channel: String,
    pub ts: String,
    pub user: Option<String>,
    pub text: String,
    pub permalink: Option<String>,
}

/// A message to post: text (mrkdwn) and optional Block Kit blocks.
#[derive(Debug, Clone, Copy)]
pub struct Text<'a> {
    pub text: &'a str,
    pub blocks: Option<&'a Value>,
}

impl<'a> Text<'a> {
    pub fn plain(text: &'a str) -> Self {
        Self { text, blocks: None }
    }
}

/// The chat platform as the tools use it.
#[async_trait::async_trait]
pub trait ChatBackend: Send + Sync + 'static {
    /// Uploads a file into the thread (Slack: files.getUploadURLExternal,
    /// the upload, files.completeUploadExternal with channel_id,
    /// thread_ts, title, initial_comment and alt_txt).
    async fn upload_file(&self, thread: &ThreadRef, upload: Upload) -> Result<Uploaded, ChatError>;

    /// Posts a message with Block Kit `blocks` (a JSON array) and `text` as
    /// the notification fallback into the thread: [`ChatBackend::post`].
    async fn post_blocks(
        &self,
        thread: &ThreadRef,
        text: &str,
        blocks: &Value,
    ) -> Result<Posted, ChatError> {
        let message = Text {
            text,
            blocks: Some(blocks),
        };
        self.post(&thread.channel, Some(&thread.thread_ts), message)
            .await
    }

    /// The workspace and the bot (auth.test).
    async fn workspace(&self) -> Result<Workspace, ChatError>;

    /// A conversation's kind and whether the bot is in it
    /// (conversations.info).
    async fn conversation(&self, channel: &str) -> Result<Conversation, ChatError>;

    /// Every member of a conversation (conversations.members, all pages).
    async fn members(&self, channel: &str) -> Result<Vec<String>, ChatError>;

    /// The whole thread of the message `ts` (its parent or any reply):
    /// parent first, then the replies, oldest first
    /// (conversations.replies, all pages).
    async fn replies(&self, channel: &str, ts: &str) -> Result<Vec<ThreadMessage>, ChatError>;

    /// A message's permalink (chat.getPermalink).
    async fn permalink(&self, channel: &str, ts: &str) -> Result<String, ChatError>;

    /// Posts a message (chat.postMessage) into `channel`, as a reply in
    /// `thread_ts` when given, with Slack's own parsing of the text off
    /// (`parse: none`, `link_names: false`): only mentions written in
    /// Slack's `<...>` syntax notify anyone.
    async fn post(
        &self,
        channel: &str,
        thread_ts: Option<&str>,
        message: Text<'_>,
    ) -> Result<Posted, ChatError>;

    /// Replaces the text and blocks of one of the bot's messages
    /// (chat.update).
    async fn update(&self, channel: &str, ts: &str, message: Text<'_>) -> Result<(), ChatError>;

    /// Shows `text` to `user` alone (chat.postEphemeral).
    async fn post_ephemeral(
        &self,
        channel: &str,
        user: &str,
        thread_ts: Option<&str>,
        text: &str,
    ) -> Result<(), ChatError>;

    /// Opens a modal for the person whose interaction gave `trigger_id`
    /// (views.open); the view's id.
    async fn open_view(&self, trigger_id: &str, view: &Value) -> Result<String, ChatError>;

    /// The bot's direct-message conversation with `user`
    /// (conversations.open).
    async fn open_dm(&self, user: &str) -> Result<String, ChatError>;

    /// A person's display name (users.info), for showing who wrote what.
    async fn user_name(&self, user: &str) -> Result<String, ChatError>;

    /// Adds the bot's reaction `name` to a message (reactions.add); `false`
    /// when the bot had already reacted so (Slack's `already_reacted`).
    async fn add_reaction(&self, channel: &str, ts: &str, name: &str) -> Result<bool, ChatError>;

    /// The latest `limit` top-level messages of a conversation, oldest
    /// first, and whether older ones exist (conversations.history).
    async fn history(
        &self,
        channel: &str,
        limit: usize,
    ) -> Result<(Vec<ThreadMessage>, bool), ChatError>;

    /// Whether [`ChatBackend::search`] can run (Slack: a user token with
    /// `search:read` is configured; a bot token cannot search).
    fn can_search(&self) -> bool;

    /// Messages matching `query`, newest first, at most `count`
    /// (search.messages, with the user token).
    async fn search(&self, query: &str, count: usize) -> Result<Vec<Found>, ChatError>;
}
