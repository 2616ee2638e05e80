//! The chat platform as the tools see it: a small backend trait, so the
//! tools do not depend on Slack's or Mattermost's types, and the syntax of
//! each platform's ids ([`Platform`]). [`crate::slack::backend`] and
//! [`crate::mattermost::backend`] are the implementations; tests point
//! them at a fake Slack or a fake Mattermost.
//!
//! The trait speaks Slack's vocabulary, the first platform's, and the
//! Mattermost backend translates:
//!
//! - a message's `ts` is its id (a Mattermost post id), a thread's
//!   `thread_ts` the id of its first message (`root_id`);
//! - text is Slack mrkdwn (`<@U…>` mentions, `<url|label>` links) and
//!   blocks are Block Kit; Mattermost's backend renders both as Markdown
//!   and message attachments;
//! - [`ChatError::Api`] carries Slack's error codes where the tools act on
//!   one (`channel_not_found`, `thread_not_found`, `not_in_channel`,
//!   `invalid_name`), whatever the platform answered.

use serde_json::Value;

use crate::permalink::Target;

/// The chat platform a gateway serves, for what is a matter of syntax
/// (ids a tool or a config names) or of the platform's rules of reading
/// (who may read what), not of calling it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Platform {
    Slack,
    Mattermost,
}

/// A Mattermost id: 26 lower case letters and digits.
fn is_mattermost_id(s: &str) -> bool {
    s.len() == 26
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

/// Slack's ids: upper case letters and digits after a kind letter.
fn is_slack_id(s: &str, kinds: &[u8]) -> bool {
    s.len() >= 3
        && kinds.contains(&s.as_bytes()[0])
        && s.bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
}

impl Platform {
    /// Its name in sentences.
    pub fn name(self) -> &'static str {
        match self {
            Platform::Slack => "Slack",
            Platform::Mattermost => "Mattermost",
        }
    }

    /// What a channel id looks like, for messages.
    pub fn channel_form(self) -> &'static str {
        match self {
            Platform::Slack => "C… or G…",
            Platform::Mattermost => "26 lower case letters and digits",
        }
    }

    /// A channel id a tool or a config may name (Slack: a channel `C…` or
    /// private channel `G…`; Mattermost: any channel's 26-character id).
    pub fn check_channel_id(self, s: &str) -> Result<(), String> {
        match self {
            Platform::Slack => {
                if is_slack_id(s, b"CG") {
                    return Ok(());
                }
                let upper = s.to_ascii_uppercase();
                if is_slack_id(&upper, b"CG") {
                    return Err(format!(
                        "the channel id {s:?} is in lower case; Slack's ids are upper case ({upper})"
                    ));
                }
                Err(format!(
                    "{s:?} is not a Slack channel id (C… or G…, upper case letters and digits)"
                ))
            }
            Platform::Mattermost => {
                if is_mattermost_id(s) {
                    return Ok(());
                }
                let lower = s.to_ascii_lowercase();
                if is_mattermost_id(&lower) {
                    return Err(format!(
                        "the channel id {s:?} has upper case letters; Mattermost's ids are lower \
                         case ({lower})"
                    ));
                }
                Err(format!(
                    "{s:?} is not a Mattermost channel id (26 lower case letters and digits)"
                ))
            }
        }
    }

    /// A session's conversation: any kind, a direct message's included
    /// (Slack's `D…`); it names files and branches.
    pub fn check_session_channel(self, s: &str) -> Result<(), String> {
        let ok = match self {
            Platform::Slack => {
                s.len() >= 3
                    && s.bytes()
                        .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
            }
            Platform::Mattermost => is_mattermost_id(s),
        };
        if ok {
            Ok(())
        } else {
            Err(match self {
                Platform::Slack => {
                    format!("channel {s:?} is not a Slack conversation id (C…, G… or D…)")
                }
                Platform::Mattermost => format!(
                    "channel {s:?} is not a Mattermost channel id (26 lower case letters and \
                     digits)"
                ),
            })
        }
    }

    /// A message id: Slack's `ts` (10 digits, a dot, 6 digits) or a
    /// Mattermost post id.
    pub fn check_message_id(self, s: &str) -> Result<(), String> {
        match self {
            Platform::Slack => {
                let ok = s.len() == 17
                    && s.as_bytes()[10] == b'.'
                    && s.bytes()
                        .enumerate()
                        .all(|(i, b)| i == 10 || b.is_ascii_digit());
                if ok {
                    Ok(())
                } else {
                    Err(format!(
                        "{s:?} is not a Slack message timestamp (10 digits, a dot, 6 digits, for \
                         example 1700000000.000100)"
                    ))
                }
            }
            Platform::Mattermost => {
                if is_mattermost_id(s) {
                    Ok(())
                } else {
                    Err(format!(
                        "{s:?} is not a Mattermost post id (26 lower case letters and digits)"
                    ))
                }
            }
        }
    }

    /// What a message id looks like, for messages.
    pub fn message_form(self) -> &'static str {
        match self {
            Platform::Slack => "the timestamp of a message, for example 1700000000.000100",
            Platform::Mattermost => "the id of a post, 26 lower case letters and digits",
        }
    }

    /// A person's id (Slack: `U…` or `W…`; Mattermost: a user id).
    pub fn check_user_id(self, s: &str) -> Result<(), String> {
        let ok = match self {
            Platform::Slack => is_slack_id(s, b"UW"),
            Platform::Mattermost => is_mattermost_id(s),
        };
        if ok {
            Ok(())
        } else {
            Err(match self {
                Platform::Slack => format!("{s:?} is not a Slack user id (U… or W…)"),
                Platform::Mattermost => {
                    format!("{s:?} is not a Mattermost user id (26 lower case letters and digits)")
                }
            })
        }
    }

    /// Whether the bot reads a public channel it is not a member of
    /// (Mattermost: yes, as any member of the team; Slack: a bot reads
    /// only where it was invited).
    pub fn reads_public_channels_unjoined(self) -> bool {
        self == Platform::Mattermost
    }

    /// Whether read_post follows a link into a public channel other than
    /// the session's (claude-threads: on Slack it must point at the bot's
    /// channel; on Mattermost it resolves within the bot's channel and
    /// public channels).
    pub fn read_post_reaches_public_channels(self) -> bool {
        self == Platform::Mattermost
    }
}

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
    #[error("the chat platform answered {0}")]
    Api(String),
    /// Slack refused the blocks (`invalid_blocks`); the caller may post a
    /// simpler form.
    #[error("the chat platform refused the blocks: {0}")]
    InvalidBlocks(String),
    /// Still rate limited after honouring Retry-After.
    #[error("{} is rate limiting; retry in {retry_after_secs} s", platform.name())]
    RateLimited {
        platform: Platform,
        retry_after_secs: u64,
    },
    /// The platform could not be reached, or answered something unreadable.
    #[error("cannot reach the chat platform: {0}")]
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
    /// Which platform this is: the syntax of its ids.
    fn platform(&self) -> Platform;

    /// A message link of this workspace, parsed strictly and resolved to
    /// the message it names; the reason when it is not one. A link into
    /// `own`, the session's channel, is taken whatever that channel's kind.
    async fn resolve_link(&self, link: &str, own: &str) -> Result<Target, String>;

    /// How a message link of this workspace reads, for messages.
    async fn link_form(&self) -> String;

    /// The user id of a person a tool names (send_dm's recipient: on Slack
    /// `U0123ABC` or `<@U0123ABC>`; on Mattermost a username, with or
    /// without `@`); the reason when it names nobody.
    async fn find_person(&self, recipient: &str) -> Result<String, String>;

    /// How a tool may name a person, for messages.
    fn person_form(&self) -> &'static str;

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

    /// `text` (mrkdwn) as the platform shows it, for an answer given
    /// outside a post (Mattermost: a click's `ephemeral_text`, Markdown).
    async fn shown(&self, text: &str) -> String {
        text.to_owned()
    }

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
    ///
    /// `from` is the channel the search is made from (the session's):
    /// Mattermost searches its team.
    async fn search(&self, query: &str, count: usize, from: &str) -> Result<Vec<Found>, ChatError>;
}
