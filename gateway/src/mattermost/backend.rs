//! The Mattermost implementation of [`ChatBackend`], over [`Client`]
//! (REST API v4). Each method and the endpoints it calls:
//!
//! | method | endpoints |
//! |---|---|
//! | `workspace` | `GET /users/me` (once; the host is the site URL's) |
//! | `resolve_link` | [`link::parse_post_link`], `GET /posts/{id}`, `GET /channels/{id}`, `GET /teams/{id}` (or `GET /users/me/teams` for a direct message) |
//! | `find_person` | `GET /users/username/{username}` |
//! | `conversation` | `GET /channels/{id}`, `GET /channels/{id}/members/{bot}` |
//! | `members` | `GET /channels/{id}/members`, every page of 200 |
//! | `replies` | `GET /posts/{ts}/thread` |
//! | `permalink` | `GET /channels/{id}` and `GET /teams/{id}` (both cached): `{site}/{team}/pl/{ts}` |
//! | `post`, `post_blocks` | `POST /posts` (`GET /users/{id}` for each `<@ID>`, cached) |
//! | `update` | `GET /posts/{ts}`, `PUT /posts/{ts}/patch` |
//! | `post_ephemeral` | `POST /posts/ephemeral` |
//! | `open_view` | `POST /actions/dialogs/open` ([`dialog::dialog_request`]) |
//! | `open_dm` | `POST /channels/direct` |
//! | `user_name` | `GET /users/{id}` (cached): the user name |
//! | `add_reaction` | `GET /posts/{ts}`, `GET /posts/{ts}/reactions`, `POST /reactions` |
//! | `history` | `GET /channels/{id}/posts`, pages of 200 |
//! | `search` | `POST /teams/{team}/posts/search`, the bot channel's team |
//! | `upload_file` | `POST /files`, then `POST /posts` with its `file_ids` |
//!
//! The trait speaks Slack: a message's `ts` is a post id, a thread's
//! `thread_ts` its root post's id; text and blocks are translated by
//! [`markup`] and [`blocks`] (a message over [`MAX_MESSAGE_CHARS`] is
//! refused, never cut); errors carry Slack's codes where the tools act on them
//! (`channel_not_found`, `thread_not_found`, `not_in_channel`,
//! `invalid_name`, and `message_not_found`, `cant_update_message`,
//! `msg_too_long`, `user_not_found`), else Mattermost's `AppError` id.
//! A Mattermost bot's posts carry its user id and `props.from_bot`, so
//! [`Workspace::bot_id`] is `None` and a bot's message has `bot_id` set to
//! its user id.
//!
//! An upload's `alt_text` has no place in Mattermost (files have no
//! description): it is shown under the comment as an italic line
//! `Image description: …`. The id [`ChatBackend::open_view`] returns is
//! the trigger id: Mattermost answers a dialog's opening with no id.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value};

use super::api::{ApiError, Client, ClientSetupError, PER_PAGE};
use super::blocks::{self, Interactivity, Rendered};
use super::markup::{self, Names};
use super::model::{EphemeralPost, NewPost, Post, PostPatch, Reaction, Search, Team};
use super::sign::CallbackKey;
use super::{dialog, link};
use crate::chat::{
    ChatBackend, ChatError, Conversation, Found, Platform, Posted, Text, ThreadMessage, ThreadRef,
    Upload, Uploaded, Workspace,
};
use crate::metrics::Metrics;
use crate::permalink::{ChannelId, Target, Ts};

/// The longest message Mattermost stores, in characters
/// (`PostMessageMaxRunesV2` in `server/public/model/post.go`).
pub const MAX_MESSAGE_CHARS: usize = 16383;
/// Names and teams kept at most, so a long-running daemon's caches stay
/// small.
const MAX_CACHED: usize = 10_000;
/// Pages of members or posts read at most (200 each).
const MAX_PAGES: usize = 50;
/// `<@ID>` mentions of one message looked up at most (others show inert).
const MAX_MENTION_LOOKUPS: usize = 50;

/// `[mattermost]` as the backend takes it.
pub struct MattermostSettings {
    /// The site URL ([`super::site_url`]).
    pub url: String,
    /// The bot account's access token.
    pub token: String,
    /// The bot's channel: its team is the one searched and the one of the
    /// links to direct messages.
    pub channel: String,
    /// Where Mattermost POSTs button clicks (`{callback_url}/actions`)
    /// and dialog submissions (`{callback_url}/dialogs`); without it,
    /// buttons and dialogs are refused.
    pub callback_url: Option<String>,
    /// Signs the buttons' contexts and the dialogs' states.
    pub key: CallbackKey,
}

/// Why a Mattermost backend could not be built.
#[derive(Debug, thiserror::Error)]
pub enum MattermostSetupError {
    #[error("[mattermost] url: {0}")]
    InvalidUrl(String),
    #[error("[mattermost] channel: {0}")]
    InvalidChannel(String),
    #[error("[mattermost] callback_url: {0}")]
    InvalidCallbackUrl(String),
    #[error("the Mattermost client: {0}")]
    Client(#[from] ClientSetupError),
}

/// Mattermost as the bot whose token `settings` holds, its requests
/// counted in `metrics`.
pub fn backend(
    settings: MattermostSettings,
    metrics: Metrics,
) -> Result<Arc<dyn ChatBackend>, MattermostSetupError> {
    let site = super::site_url(&settings.url).map_err(MattermostSetupError::InvalidUrl)?;
    Platform::Mattermost
        .check_channel_id(&settings.channel)
        .map_err(MattermostSetupError::InvalidChannel)?;
    let callback_url = settings
        .callback_url
        .as_deref()
        .map(super::callback_url)
        .transpose()
        .map_err(MattermostSetupError::InvalidCallbackUrl)?;
    let parsed =
        url::Url::parse(&site).map_err(|e| MattermostSetupError::InvalidUrl(e.to_string()))?;
    let host = match (parsed.host_str(), parsed.port()) {
        (Some(host), Some(port)) => format!("{host}:{port}"),
        (Some(host), None) => host.to_owned(),
        (None, _) => {
            return Err(MattermostSetupError::InvalidUrl(format!(
                "{site:?} has no host"
            )));
        }
    };
    let client = Client::new(&site, &settings.token, metrics)?;
    Ok(Arc::new(MattermostBackend {
        client,
        site,
        host,
        channel: settings.channel,
        callback_url,
        key: settings.key,
        workspace: tokio::sync::OnceCell::new(),
        home_team: tokio::sync::OnceCell::new(),
        team_names: Mutex::default(),
        channel_teams: Mutex::default(),
        names: Mutex::default(),
    }))
}

struct MattermostBackend {
    client: Client,
    /// The site URL, without a trailing slash.
    site: String,
    /// The site's `host[:port]`.
    host: String,
    /// The bot's channel.
    channel: String,
    callback_url: Option<String>,
    key: CallbackKey,
    /// `GET /users/me`'s answer, asked once.
    workspace: tokio::sync::OnceCell<Workspace>,
    /// The bot channel's team.
    home_team: tokio::sync::OnceCell<Team>,
    /// Team id to team name.
    team_names: Mutex<HashMap<String, String>>,
    /// Channel id to its team's id (empty for a direct or group message).
    channel_teams: Mutex<HashMap<String, String>>,
    /// User id to user name.
    names: Mutex<HashMap<String, String>>,
}

/// A bounded cache's entry.
fn cached(cache: &Mutex<HashMap<String, String>>, key: &str) -> Option<String> {
    cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(key)
        .cloned()
}

fn remember(cache: &Mutex<HashMap<String, String>>, key: &str, value: &str) {
    let mut cache = cache.lock().unwrap_or_else(|e| e.into_inner());
    if cache.len() >= MAX_CACHED {
        cache.clear();
    }
    cache.insert(key.to_owned(), value.to_owned());
}

/// Mattermost's answer as a [`ChatError`]: the `AppError` id, a 5xx as
/// a transport failure.
fn chat_error(err: ApiError) -> ChatError {
    match err {
        ApiError::Status { status, .. } if status >= 500 => {
            ChatError::Transport(format!("Mattermost answered HTTP status {status}"))
        }
        ApiError::Status { status, id } if id.is_empty() => {
            ChatError::Api(format!("http_{status}"))
        }
        ApiError::Status { id, .. } => ChatError::Api(id),
        ApiError::RateLimited { retry_after_secs } => ChatError::RateLimited {
            platform: Platform::Mattermost,
            retry_after_secs,
        },
        ApiError::Transport(why) => ChatError::Transport(why),
    }
}

/// A 403 or 404 as Slack's `code`, anything else as [`chat_error`].
fn or_code(err: ApiError, code: &str) -> ChatError {
    match err.status() {
        Some(403 | 404) => ChatError::Api(code.into()),
        _ => chat_error(err),
    }
}

/// Refuses a message Mattermost would not store (it is never cut).
fn check_length(message: &str) -> Result<(), ChatError> {
    let n = message.chars().count();
    if n > MAX_MESSAGE_CHARS {
        return Err(ChatError::Api(format!(
            "msg_too_long (the message is {n} characters as Markdown; a Mattermost post takes at \
             most {MAX_MESSAGE_CHARS})"
        )));
    }
    Ok(())
}

/// An emoji name as Mattermost takes it (`^[a-zA-Z0-9\-\+_]+$`, at most
/// 64 characters: `model/emoji.go`).
fn is_emoji_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-+_".contains(&b))
}

fn thread_message(post: Post) -> ThreadMessage {
    let bot_id = post.from_bot().then(|| post.user_id.clone());
    ThreadMessage {
        ts: post.id,
        user: (!post.user_id.is_empty()).then_some(post.user_id),
        bot_id,
        text: post.message,
    }
}

/// `props` carrying `attachments` (none: the key removed).
fn with_attachments(mut props: Map<String, Value>, attachments: Vec<Value>) -> Map<String, Value> {
    props.remove("attachments");
    if !attachments.is_empty() {
        props.insert("attachments".into(), Value::Array(attachments));
    }
    props
}

impl MattermostBackend {
    async fn bot(&self) -> Result<String, ChatError> {
        Ok(self.workspace().await?.bot_user)
    }

    /// The bot channel's team (for a bot channel that is a direct
    /// message, the first of the bot's teams by name).
    async fn home_team(&self) -> Result<Team, ChatError> {
        self.home_team
            .get_or_try_init(|| async {
                let team_id = self.channel_team(&self.channel).await?;
                if !team_id.is_empty() {
                    let name = self.team_name(&team_id).await?;
                    return Ok(Team { id: team_id, name });
                }
                let mut teams = self.client.my_teams().await.map_err(chat_error)?;
                teams.sort_by(|a, b| a.name.cmp(&b.name));
                teams
                    .into_iter()
                    .next()
                    .ok_or_else(|| ChatError::Api("the bot is on no team: add it to one".into()))
            })
            .await
            .cloned()
    }

    /// A channel's team id (empty for a direct or group message).
    async fn channel_team(&self, channel: &str) -> Result<String, ChatError> {
        if let Some(team) = cached(&self.channel_teams, channel) {
            return Ok(team);
        }
        let c = self
            .client
            .channel(channel)
            .await
            .map_err(|e| or_code(e, "channel_not_found"))?;
        remember(&self.channel_teams, channel, &c.team_id);
        Ok(c.team_id)
    }

    async fn team_name(&self, team: &str) -> Result<String, ChatError> {
        if let Some(name) = cached(&self.team_names, team) {
            return Ok(name);
        }
        let t = self.client.team(team).await.map_err(chat_error)?;
        remember(&self.team_names, team, &t.name);
        Ok(t.name)
    }

    /// The name of the team a channel's links go through: its own, or the
    /// bot channel's for a direct or group message.
    async fn link_team(&self, channel: &str) -> Result<String, ChatError> {
        let team = self.channel_team(channel).await?;
        if team.is_empty() {
            return Ok(self.home_team().await?.name);
        }
        self.team_name(&team).await
    }

    /// User names of the ids mentioned (those found; at most
    /// [`MAX_MENTION_LOOKUPS`]).
    async fn usernames(&self, ids: &[String]) -> Names {
        let mut names = Names::new();
        for id in ids.iter().take(MAX_MENTION_LOOKUPS) {
            if Platform::Mattermost.check_user_id(id).is_err() {
                continue;
            }
            if let Ok(name) = self.user_name(id).await {
                names.insert(id.clone(), name);
            }
        }
        names
    }

    /// A message's Markdown and attachments.
    async fn render(&self, message: Text<'_>) -> Result<Rendered, ChatError> {
        let mut ids = markup::mentioned_users(message.text);
        if let Some(blocks) = message.blocks {
            ids.extend(blocks::block_mentions(blocks));
        }
        let names = self.usernames(&ids).await;
        let rendered = match message.blocks {
            Some(blocks) => blocks::render_blocks(
                blocks,
                message.text,
                &names,
                &Interactivity {
                    callback_url: self.callback_url.as_deref(),
                    key: &self.key,
                },
            )?,
            None => Rendered {
                message: markup::mrkdwn_to_markdown(message.text, &names),
                attachments: Vec::new(),
            },
        };
        check_length(&rendered.message)?;
        Ok(rendered)
    }

    /// The post `ts`, which must be in `channel`.
    async fn post_in(&self, channel: &str, ts: &str) -> Result<Post, ChatError> {
        let post = self
            .client
            .post(ts)
            .await
            .map_err(|e| or_code(e, "message_not_found"))?;
        if post.channel_id != channel {
            return Err(ChatError::Api("message_not_found".into()));
        }
        Ok(post)
    }

    /// What an upload's post says: the title (when not the file's name)
    /// in bold, the comment, the image's description.
    async fn upload_message(&self, upload: &Upload) -> String {
        let mut lines = Vec::new();
        if let Some(title) = upload.title.as_deref().filter(|t| *t != upload.filename) {
            lines.push(format!("**{}**", markup::plain_to_markdown(title.trim())));
        }
        if let Some(comment) = &upload.comment {
            let names = self.usernames(&markup::mentioned_users(comment)).await;
            lines.push(markup::mrkdwn_to_markdown(comment, &names));
        }
        if let Some(alt) = upload.alt_text.as_deref().filter(|a| !a.trim().is_empty()) {
            lines.push(format!(
                "_Image description: {}_",
                markup::plain_to_markdown(alt.trim())
            ));
        }
        lines.join("\n")
    }
}

#[async_trait::async_trait]
impl ChatBackend for MattermostBackend {
    fn platform(&self) -> Platform {
        Platform::Mattermost
    }

    async fn resolve_link(&self, link: &str, _own: &str) -> Result<Target, String> {
        // Mattermost's links name a post, whatever its channel's kind: the
        // session's own channel needs no exception.
        let parsed = link::parse_post_link(link, &self.site)?;
        let post = self
            .client
            .post(&parsed.post)
            .await
            .map_err(|e| match e.status() {
                Some(403 | 404) => format!(
                    "the link {link:?} names a post that does not exist or that the bot cannot read"
                ),
                _ => format!("cannot read the post of {link:?}: {}", chat_error(e)),
            })?;
        let asked = |e: ChatError| format!("cannot check the team of {link:?}: {e}");
        let team = self.channel_team(&post.channel_id).await.map_err(asked)?;
        if team.is_empty() {
            // A direct or group message has no team: its link may go
            // through any team the bot is on.
            let teams = self
                .client
                .my_teams()
                .await
                .map_err(|e| asked(chat_error(e)))?;
            if !teams.iter().any(|t| t.name == parsed.team) {
                return Err(format!(
                    "the link {link:?} goes through the team {}, which the bot is not on",
                    parsed.team
                ));
            }
        } else if self.team_name(&team).await.map_err(asked)? != parsed.team {
            return Err(format!(
                "the link {link:?} names the team {}, but its post is in another team's channel",
                parsed.team
            ));
        }
        Ok(Target {
            channel: ChannelId::trusted(&post.channel_id),
            ts: Ts::trusted(&post.id),
            thread_ts: (!post.root_id.is_empty()).then(|| Ts::trusted(&post.root_id)),
        })
    }

    async fn link_form(&self) -> String {
        link::link_form(&self.site)
    }

    async fn find_person(&self, recipient: &str) -> Result<String, String> {
        let trimmed = recipient.trim();
        let name = trimmed.strip_prefix('@').unwrap_or(trimmed);
        link::check_username(name)?;
        match self.client.user_by_username(name).await {
            Ok(user) if user.delete_at != 0 => {
                Err(format!("@{name}'s Mattermost account is deactivated"))
            }
            Ok(user) => {
                remember(&self.names, &user.id, &user.username);
                Ok(user.id)
            }
            Err(e) if e.status() == Some(404) => {
                Err(format!("no Mattermost user is named @{name}"))
            }
            Err(e) => Err(format!("cannot look up @{name}: {}", chat_error(e))),
        }
    }

    fn person_form(&self) -> &'static str {
        "a Mattermost user name, ann or @ann"
    }

    async fn upload_file(&self, thread: &ThreadRef, upload: Upload) -> Result<Uploaded, ChatError> {
        let message = self.upload_message(&upload).await;
        check_length(&message)?;
        let uploads = self
            .client
            .upload(&thread.channel, &upload.filename, &upload.bytes)
            .await
            .map_err(|e| match e.status() {
                Some(413) => ChatError::Api(
                    "file_too_large (over the Mattermost server's MaxFileSize)".into(),
                ),
                Some(403) => ChatError::Api("not_in_channel".into()),
                Some(404) => ChatError::Api("channel_not_found".into()),
                _ => chat_error(e),
            })?;
        let file_id = uploads
            .file_infos
            .into_iter()
            .next()
            .map(|f| f.id)
            .ok_or_else(|| ChatError::Transport("Mattermost stored no file".into()))?;
        let post = self
            .client
            .create_post(&NewPost {
                channel_id: thread.channel.clone(),
                root_id: thread.thread_ts.clone(),
                message,
                props: None,
                file_ids: vec![file_id.clone()],
            })
            .await
            .map_err(post_error)?;
        let permalink = self.permalink(&thread.channel, &post.id).await.ok();
        Ok(Uploaded { file_id, permalink })
    }

    async fn workspace(&self) -> Result<Workspace, ChatError> {
        self.workspace
            .get_or_try_init(|| async {
                let me = self.client.me().await.map_err(chat_error)?;
                Ok(Workspace {
                    host: self.host.clone(),
                    bot_user: me.id,
                    bot_id: None,
                })
            })
            .await
            .cloned()
    }

    async fn conversation(&self, channel: &str) -> Result<Conversation, ChatError> {
        let c = self
            .client
            .channel(channel)
            .await
            .map_err(|e| or_code(e, "channel_not_found"))?;
        remember(&self.channel_teams, &c.id, &c.team_id);
        let bot = self.bot().await?;
        let is_member = match self.client.channel_member(channel, &bot).await {
            Ok(_) => true,
            Err(e) if matches!(e.status(), Some(403 | 404)) => false,
            Err(e) => return Err(chat_error(e)),
        };
        Ok(Conversation {
            name: (!c.name.is_empty()).then_some(c.name),
            // Public only when Mattermost says "O": a type it adds later
            // is out of scope until known.
            is_private: !matches!(c.kind.as_str(), "O" | "D" | "G"),
            is_im: c.kind == "D",
            is_mpim: c.kind == "G",
            is_member,
            id: c.id,
        })
    }

    async fn members(&self, channel: &str) -> Result<Vec<String>, ChatError> {
        let mut members = Vec::new();
        for page in 0..MAX_PAGES {
            let got = self
                .client
                .channel_members(channel, page)
                .await
                .map_err(|e| or_code(e, "channel_not_found"))?;
            let full = got.len() >= PER_PAGE;
            members.extend(got.into_iter().map(|m| m.user_id));
            if !full {
                return Ok(members);
            }
        }
        Err(ChatError::Transport(format!(
            "the channel has more than the {} members calvin reads",
            MAX_PAGES * PER_PAGE
        )))
    }

    async fn replies(&self, channel: &str, ts: &str) -> Result<Vec<ThreadMessage>, ChatError> {
        let list = self
            .client
            .thread(ts)
            .await
            .map_err(|e| or_code(e, "thread_not_found"))?;
        let mut posts: Vec<Post> = list.posts.into_values().collect();
        let named = posts
            .iter()
            .find(|p| p.id == ts)
            .ok_or_else(|| ChatError::Api("thread_not_found".into()))?;
        if named.channel_id != channel {
            return Err(ChatError::Api("thread_not_found".into()));
        }
        // The root first, then the replies by time.
        posts.sort_by(|a, b| {
            (!a.root_id.is_empty(), a.create_at, &a.id).cmp(&(
                !b.root_id.is_empty(),
                b.create_at,
                &b.id,
            ))
        });
        Ok(posts.into_iter().map(thread_message).collect())
    }

    async fn permalink(&self, channel: &str, ts: &str) -> Result<String, ChatError> {
        let team = self.link_team(channel).await?;
        Ok(link::permalink(&self.site, &team, ts))
    }

    async fn post(
        &self,
        channel: &str,
        thread_ts: Option<&str>,
        message: Text<'_>,
    ) -> Result<Posted, ChatError> {
        let rendered = self.render(message).await?;
        let props = (!rendered.attachments.is_empty())
            .then(|| with_attachments(Map::new(), rendered.attachments));
        let post = self
            .client
            .create_post(&NewPost {
                channel_id: channel.to_owned(),
                root_id: thread_ts.unwrap_or_default().to_owned(),
                message: rendered.message,
                props,
                file_ids: Vec::new(),
            })
            .await
            .map_err(post_error)?;
        Ok(Posted {
            channel: if post.channel_id.is_empty() {
                channel.to_owned()
            } else {
                post.channel_id
            },
            ts: post.id,
        })
    }

    async fn update(&self, channel: &str, ts: &str, message: Text<'_>) -> Result<(), ChatError> {
        let post = self.post_in(channel, ts).await?;
        if post.user_id != self.bot().await? {
            return Err(ChatError::Api("cant_update_message".into()));
        }
        let rendered = self.render(message).await?;
        // The post's other props (from_bot, ...) stay; its buttons are
        // replaced, or removed when the new message has none.
        let patch = PostPatch {
            message: rendered.message,
            props: with_attachments(post.props, rendered.attachments),
        };
        self.client
            .patch_post(ts, &patch)
            .await
            .map_err(|e| match e.status() {
                Some(403) => ChatError::Api("cant_update_message".into()),
                Some(404) => ChatError::Api("message_not_found".into()),
                _ => chat_error(e),
            })?;
        Ok(())
    }

    async fn shown(&self, text: &str) -> String {
        match self.render(Text::plain(text)).await {
            Ok(rendered) => rendered.message,
            Err(_) => markup::plain_to_markdown(text),
        }
    }

    async fn post_ephemeral(
        &self,
        channel: &str,
        user: &str,
        thread_ts: Option<&str>,
        text: &str,
    ) -> Result<(), ChatError> {
        let rendered = self.render(Text::plain(text)).await?;
        let request = EphemeralPost {
            user_id: user.to_owned(),
            post: NewPost {
                channel_id: channel.to_owned(),
                root_id: thread_ts.unwrap_or_default().to_owned(),
                message: rendered.message,
                props: None,
                file_ids: Vec::new(),
            },
        };
        self.client
            .ephemeral_post(&request)
            .await
            .map_err(chat_error)?;
        Ok(())
    }

    async fn open_view(&self, trigger_id: &str, view: &Value) -> Result<String, ChatError> {
        let callback_url = self.callback_url.as_deref().ok_or_else(|| {
            ChatError::Api(
                "dialogs need [mattermost] callback_url in gateway.toml: Mattermost posts a \
                 dialog's submission to it"
                    .into(),
            )
        })?;
        let request = dialog::dialog_request(trigger_id, view, callback_url, &self.key)?;
        self.client
            .open_dialog(&request)
            .await
            .map_err(chat_error)?;
        Ok(trigger_id.to_owned())
    }

    async fn open_dm(&self, user: &str) -> Result<String, ChatError> {
        let bot = self.bot().await?;
        let channel =
            self.client
                .direct_channel(&bot, user)
                .await
                .map_err(|e| match e.status() {
                    Some(400 | 404) => ChatError::Api("user_not_found".into()),
                    _ => chat_error(e),
                })?;
        remember(&self.channel_teams, &channel.id, "");
        Ok(channel.id)
    }

    async fn user_name(&self, user: &str) -> Result<String, ChatError> {
        if let Some(name) = cached(&self.names, user) {
            return Ok(name);
        }
        let u = self
            .client
            .user(user)
            .await
            .map_err(|e| or_code(e, "user_not_found"))?;
        let name = if u.username.is_empty() {
            u.id
        } else {
            u.username
        };
        remember(&self.names, user, &name);
        Ok(name)
    }

    async fn add_reaction(&self, channel: &str, ts: &str, name: &str) -> Result<bool, ChatError> {
        if !is_emoji_name(name) {
            return Err(ChatError::Api("invalid_name".into()));
        }
        let bot = self.bot().await?;
        self.post_in(channel, ts).await?;
        let reactions = self
            .client
            .reactions(ts)
            .await
            .map_err(|e| match e.status() {
                // The post was just read, so it is there: a server that keeps
                // a post's reactions to channel members (older ones check
                // `read_channel`) refuses a bot that has not joined the
                // public channel, as saving a reaction does.
                Some(403) => ChatError::Api("not_in_channel".into()),
                _ => or_code(e, "message_not_found"),
            })?;
        if reactions
            .iter()
            .any(|r| r.user_id == bot && r.emoji_name == name)
        {
            return Ok(false);
        }
        let reaction = Reaction {
            user_id: bot,
            post_id: ts.to_owned(),
            emoji_name: name.to_owned(),
        };
        self.client
            .add_reaction(&reaction)
            .await
            .map_err(|e| match e {
                ApiError::Status { status: 400, .. } => ChatError::Api("invalid_name".into()),
                ApiError::Status {
                    status: 404,
                    ref id,
                } if id.contains("emoji") => ChatError::Api("invalid_name".into()),
                // A public channel the bot reads but has not joined.
                ApiError::Status { status: 403, .. } => ChatError::Api("not_in_channel".into()),
                e => or_code(e, "message_not_found"),
            })?;
        Ok(true)
    }

    async fn history(
        &self,
        channel: &str,
        limit: usize,
    ) -> Result<(Vec<ThreadMessage>, bool), ChatError> {
        let mut kept: Vec<Post> = Vec::new();
        let mut seen = HashSet::new();
        let mut older = false;
        'pages: for page in 0..MAX_PAGES {
            let list = self
                .client
                .channel_posts(channel, page)
                .await
                .map_err(|e| match e.status() {
                    Some(403) => ChatError::Api("not_in_channel".into()),
                    Some(404) => ChatError::Api("channel_not_found".into()),
                    _ => chat_error(e),
                })?;
            let full = list.order.len() >= PER_PAGE;
            for post in list.into_ordered() {
                // A page may repeat a post when new ones arrive meanwhile.
                if !post.root_id.is_empty() || post.is_system() || !seen.insert(post.id.clone()) {
                    continue;
                }
                if kept.len() == limit {
                    older = true;
                    break 'pages;
                }
                kept.push(post);
            }
            if !full {
                break;
            }
            // Past the pages read, older posts may remain.
            older = page + 1 == MAX_PAGES;
        }
        kept.reverse();
        Ok((kept.into_iter().map(thread_message).collect(), older))
    }

    fn can_search(&self) -> bool {
        true
    }

    async fn search(&self, query: &str, count: usize, from: &str) -> Result<Vec<Found>, ChatError> {
        // The team of the channel searched from (a session in another team
        // than the bot's channel finds its own posts); a direct or group
        // message has none: the bot channel's.
        let team = match self.channel_team(from).await {
            Ok(id) if !id.is_empty() => Team {
                name: self.team_name(&id).await?,
                id,
            },
            // A direct message, or a channel the bot can no longer read.
            _ => self.home_team().await?,
        };
        let request = Search {
            terms: query.to_owned(),
            is_or_search: false,
            page: 0,
            per_page: count,
        };
        let list = self
            .client
            .search(&team.id, &request)
            .await
            .map_err(chat_error)?;
        // per_page works with Elasticsearch only: the count is kept here.
        let mut posts = list.into_ordered();
        posts.sort_by_key(|p| std::cmp::Reverse(p.create_at));
        posts.truncate(count);
        Ok(posts
            .into_iter()
            .map(|p| Found {
                permalink: Some(link::permalink(&self.site, &team.name, &p.id)),
                channel: p.channel_id,
                ts: p.id,
                user: (!p.user_id.is_empty()).then_some(p.user_id),
                text: p.message,
            })
            .collect())
    }
}

/// `POST /posts`'s refusal in Slack's words where the tools read one.
fn post_error(err: ApiError) -> ChatError {
    match &err {
        ApiError::Status { status: 400, id } if id.contains("root_id") => {
            ChatError::Api("thread_not_found".into())
        }
        ApiError::Status { status: 403, .. } => ChatError::Api("not_in_channel".into()),
        ApiError::Status { status: 404, .. } => ChatError::Api("channel_not_found".into()),
        _ => chat_error(err),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::api::fake::{Answer, Seen, serve};
    use super::*;

    fn settings(url: &str) -> MattermostSettings {
        MattermostSettings {
            url: url.into(),
            token: "tok".into(),
            channel: "ybndrfg8ejkmcpqxot1uwisza3".into(),
            callback_url: None,
            key: CallbackKey::from_token("tok"),
        }
    }

    #[test]
    fn settings_are_checked() {
        assert!(backend(settings("http://127.0.0.1:8065"), Metrics::default()).is_ok());
        assert!(matches!(
            backend(settings("http://chat.example.com"), Metrics::default()),
            Err(MattermostSetupError::InvalidUrl(_))
        ));
        let mut s = settings("http://127.0.0.1:8065");
        s.channel = "C0123".into();
        assert!(matches!(
            backend(s, Metrics::default()),
            Err(MattermostSetupError::InvalidChannel(_))
        ));
        let mut s = settings("http://127.0.0.1:8065");
        s.callback_url = Some("nowhere".into());
        assert!(matches!(
            backend(s, Metrics::default()),
            Err(MattermostSetupError::InvalidCallbackUrl(_))
        ));
        let mut s = settings("http://127.0.0.1:8065");
        s.token = "a\nb".into();
        assert!(matches!(
            backend(s, Metrics::default()),
            Err(MattermostSetupError::Client(ClientSetupError::InvalidToken))
        ));
    }

    #[test]
    fn errors_in_slack_words_and_never_a_body() {
        let status = |status, id: &str| ApiError::Status {
            status,
            id: id.into(),
        };
        assert_eq!(
            chat_error(status(400, "api.post.create_post.x.app_error")),
            ChatError::Api("api.post.create_post.x.app_error".into())
        );
        assert_eq!(
            chat_error(status(400, "")),
            ChatError::Api("http_400".into())
        );
        assert_eq!(
            chat_error(status(502, "x")),
            ChatError::Transport("Mattermost answered HTTP status 502".into())
        );
        assert_eq!(
            chat_error(ApiError::RateLimited {
                retry_after_secs: 7
            }),
            ChatError::RateLimited {
                platform: Platform::Mattermost,
                retry_after_secs: 7
            }
        );
        assert_eq!(
            or_code(status(403, "x"), "channel_not_found"),
            ChatError::Api("channel_not_found".into())
        );
        assert_eq!(
            post_error(status(400, "api.post.create_post.root_id.app_error")),
            ChatError::Api("thread_not_found".into())
        );
        assert_eq!(
            post_error(status(403, "")),
            ChatError::Api("not_in_channel".into())
        );
    }

    #[test]
    fn long_messages_are_refused_not_cut() {
        assert!(check_length(&"é".repeat(MAX_MESSAGE_CHARS)).is_ok());
        let err = check_length(&"é".repeat(MAX_MESSAGE_CHARS + 1)).unwrap_err();
        assert!(err.to_string().contains("msg_too_long"), "{err}");
    }

    #[test]
    fn emoji_names_and_messages() {
        for good in ["+1", "white_check_mark", "thumbsup", "e-mail"] {
            assert!(is_emoji_name(good), "{good}");
        }
        for bad in ["", ":+1:", "a b", &"a".repeat(65)] {
            assert!(!is_emoji_name(bad), "{bad}");
        }
        let mut post = Post {
            id: "p".into(),
            user_id: "u".into(),
            message: "hi".into(),
            ..Post::default()
        };
        assert_eq!(thread_message(post.clone()).bot_id, None);
        post.props.insert("from_bot".into(), json!("true"));
        let m = thread_message(post);
        assert_eq!(
            (m.user.as_deref(), m.bot_id.as_deref()),
            (Some("u"), Some("u"))
        );
        let props = with_attachments(
            [
                ("from_bot".to_owned(), json!("true")),
                ("attachments".to_owned(), json!([1])),
            ]
            .into_iter()
            .collect(),
            vec![],
        );
        assert_eq!(Value::Object(props), json!({"from_bot": "true"}));
    }

    const C: &str = "cccccccccccccccccccccccccc";
    const D: &str = "dddddddddddddddddddddddddd";
    const BOT: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbb";
    const ANN: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaa";
    const P: &str = "pppppppppppppppppppppppppp";
    const R: &str = "rrrrrrrrrrrrrrrrrrrrrrrrrr";
    const T: &str = "tttttttttttttttttttttttttt";

    fn ok(body: Value) -> Answer {
        (200, vec![], body.to_string())
    }

    fn refused(status: u16, id: &str) -> Answer {
        (
            status,
            vec![],
            json!({"id": id, "message": "m", "status_code": status}).to_string(),
        )
    }

    type Seens = Arc<Mutex<Vec<Seen>>>;

    /// A backend on a fake Mattermost answering `route(method, path and
    /// query, JSON body)`, with a callback URL.
    async fn mm(
        route: impl Fn(&str, &str, &Value) -> Answer + Send + Sync + 'static,
    ) -> (Arc<dyn ChatBackend>, Seens) {
        let (site, seen) = serve(move |_, s: &Seen| {
            let body = serde_json::from_slice(&s.body).unwrap_or(Value::Null);
            let path = s.path_and_query.trim_start_matches("/api/v4");
            match (s.method.as_str(), path) {
                ("GET", "/users/me") => ok(json!({"id": BOT, "username": "calvin"})),
                (method, path) => route(method, path, &body),
            }
        })
        .await;
        let mut s = settings(&site);
        s.channel = C.into();
        s.callback_url = Some("https://hooks.example/mm".into());
        (backend(s, Metrics::default()).unwrap(), seen)
    }

    fn body(seen: &Seens, method: &str, path: &str) -> Value {
        let seen = seen.lock().unwrap();
        let one = seen
            .iter()
            .rfind(|s| s.method == method && s.path_and_query == format!("/api/v4{path}"))
            .unwrap_or_else(|| panic!("no {method} {path} in {seen:?}"));
        serde_json::from_slice(&one.body).unwrap()
    }

    #[tokio::test]
    async fn a_post_is_translated_and_its_buttons_attached() {
        let (chat, seen) = mm(|method, path, _| match (method, path) {
            ("GET", p) if p == format!("/users/{ANN}") => ok(json!({"id": ANN, "username": "ann"})),
            ("POST", "/posts") => (201, vec![], json!({"id": P, "channel_id": C}).to_string()),
            _ => refused(404, "nope"),
        })
        .await;
        let text = format!("hi <@{ANN}> *x* @all");
        let posted = chat.post(C, Some(R), Text::plain(&text)).await.unwrap();
        assert_eq!(
            posted,
            Posted {
                channel: C.into(),
                ts: P.into()
            }
        );
        assert_eq!(
            body(&seen, "POST", "/posts"),
            json!({"channel_id": C, "root_id": R, "message": "hi @ann **x** @\u{2060}all"})
        );
        let blocks = json!([
            {"type": "section", "text": {"type": "mrkdwn", "text": "Set it"}},
            {"type": "actions", "elements": [{"type": "button", "action_id": "calvin_set_secret",
              "value": "id1", "text": {"type": "plain_text", "text": "Set K"}}]},
        ]);
        let thread = ThreadRef {
            channel: C.into(),
            thread_ts: R.into(),
        };
        chat.post_blocks(&thread, "Set it", &blocks).await.unwrap();
        let sent = body(&seen, "POST", "/posts");
        assert_eq!(sent["message"], "Set it");
        let action = &sent["props"]["attachments"][0]["actions"][0];
        assert_eq!(
            action["integration"]["url"],
            "https://hooks.example/mm/actions"
        );
        assert_eq!(action["integration"]["context"]["value"], "id1");
        let long = "x".repeat(MAX_MESSAGE_CHARS + 1);
        let err = chat.post(C, None, Text::plain(&long)).await.unwrap_err();
        assert!(err.to_string().contains("msg_too_long"), "{err}");
    }

    #[tokio::test]
    async fn a_thread_is_its_root_then_its_replies_by_time() {
        let (chat, _) = mm(|_, path, _| match path {
            p if p == format!("/posts/{P}/thread") => ok(json!({
                "order": [P, R, "b"],
                "posts": {
                    P: {"id": P, "channel_id": C, "root_id": R, "create_at": 3, "user_id": ANN, "message": "late"},
                    "b": {"id": "b", "channel_id": C, "root_id": R, "create_at": 2, "user_id": BOT,
                          "message": "bot", "props": {"from_bot": "true"}},
                    R: {"id": R, "channel_id": C, "root_id": "", "create_at": 1, "user_id": ANN, "message": "root"},
                }
            })),
            _ => refused(404, "app.post.get.app_error"),
        })
        .await;
        let thread = chat.replies(C, P).await.unwrap();
        let ids: Vec<&str> = thread.iter().map(|m| m.ts.as_str()).collect();
        assert_eq!(ids, [R, "b", P]);
        assert_eq!(thread[1].bot_id.as_deref(), Some(BOT));
        assert_eq!(thread[0].bot_id, None);
        let thread_not_found = ChatError::Api("thread_not_found".into());
        assert_eq!(chat.replies(D, P).await.unwrap_err(), thread_not_found);
        assert_eq!(chat.replies(C, R).await.unwrap_err(), thread_not_found);
    }

    #[tokio::test]
    async fn history_keeps_the_latest_top_level_posts() {
        let (chat, _) = mm(|_, path, _| match path {
            p if p.starts_with(&format!("/channels/{C}/posts?page=0")) => {
                let post = |id: &str, root: &str, kind: &str| {
                    json!({"id": id, "channel_id": C, "root_id": root, "type": kind, "message": id})
                };
                ok(json!({
                    "order": ["t4", "re", "sys", "t3", "t2", "t1"],
                    "posts": {
                        "t4": post("t4", "", ""), "re": post("re", "t1", ""),
                        "sys": post("sys", "", "system_join_channel"), "t3": post("t3", "", ""),
                        "t2": post("t2", "", ""), "t1": post("t1", "", ""),
                    }
                }))
            }
            _ => refused(403, "api.context.permissions.app_error"),
        })
        .await;
        let texts = |m: Vec<ThreadMessage>| m.into_iter().map(|m| m.text).collect::<Vec<_>>();
        let (messages, older) = chat.history(C, 3).await.unwrap();
        assert_eq!(
            (texts(messages), older),
            (vec!["t2".to_owned(), "t3".into(), "t4".into()], true)
        );
        let (messages, older) = chat.history(C, 10).await.unwrap();
        assert_eq!(texts(messages).len(), 4);
        assert!(!older);
        assert_eq!(
            chat.history(D, 3).await.unwrap_err(),
            ChatError::Api("not_in_channel".into())
        );
    }

    #[tokio::test]
    async fn members_are_read_page_by_page() {
        let (chat, seen) = mm(|_, path, _| {
            let page = |n: usize| {
                ok(Value::Array(
                    (0..n)
                        .map(|i| json!({"channel_id": C, "user_id": format!("u{i}")}))
                        .collect(),
                ))
            };
            match path {
                p if p.ends_with("page=0&per_page=200") => page(PER_PAGE),
                p if p.ends_with("page=1&per_page=200") => page(1),
                _ => refused(404, "x"),
            }
        })
        .await;
        assert_eq!(chat.members(C).await.unwrap().len(), PER_PAGE + 1);
        assert_eq!(seen.lock().unwrap().len(), 2);
    }

    #[tokio::test]
    async fn reactions_are_added_once() {
        let (chat, seen) = mm(|method, path, body| match (method, path) {
            ("GET", p) if p == format!("/posts/{P}") => ok(json!({"id": P, "channel_id": C})),
            ("GET", p) if p == format!("/posts/{P}/reactions") => {
                ok(json!([{"user_id": BOT, "post_id": P, "emoji_name": "+1"}]))
            }
            ("POST", "/reactions") if body["emoji_name"] == "nope_x" => {
                refused(400, "api.reaction.save.app_error")
            }
            ("POST", "/reactions") => (201, vec![], body.to_string()),
            _ => refused(404, "x"),
        })
        .await;
        assert!(!chat.add_reaction(C, P, "+1").await.unwrap());
        assert!(chat.add_reaction(C, P, "eyes").await.unwrap());
        assert_eq!(
            body(&seen, "POST", "/reactions"),
            json!({"user_id": BOT, "post_id": P, "emoji_name": "eyes"})
        );
        let invalid = ChatError::Api("invalid_name".into());
        assert_eq!(
            chat.add_reaction(C, P, "nope_x").await.unwrap_err(),
            invalid
        );
        assert_eq!(
            chat.add_reaction(C, P, ":eyes:").await.unwrap_err(),
            invalid
        );
        assert_eq!(
            chat.add_reaction(D, P, "eyes").await.unwrap_err(),
            ChatError::Api("message_not_found".into())
        );
    }

    #[tokio::test]
    async fn reactions_kept_to_members_say_the_bot_is_not_in_the_channel() {
        // An older server: reading a post is a public channel's right,
        // reading its reactions a member's.
        let (chat, seen) = mm(|method, path, _| match (method, path) {
            ("GET", p) if p == format!("/posts/{P}") => ok(json!({"id": P, "channel_id": C})),
            ("GET", p) if p == format!("/posts/{P}/reactions") => {
                refused(403, "api.context.permissions.app_error")
            }
            _ => refused(404, "x"),
        })
        .await;
        assert_eq!(
            chat.add_reaction(C, P, "eyes").await.unwrap_err(),
            ChatError::Api("not_in_channel".into())
        );
        assert!(
            !seen.lock().unwrap().iter().any(|s| s.method == "POST"),
            "nothing was saved"
        );
        // A post that is not there is still not found.
        assert_eq!(
            chat.add_reaction(C, R, "eyes").await.unwrap_err(),
            ChatError::Api("message_not_found".into())
        );
    }

    #[tokio::test]
    async fn only_the_bots_posts_are_updated_and_keep_their_props() {
        let (chat, seen) = mm(|method, path, body| match (method, path) {
            ("GET", p) if p == format!("/posts/{P}") => ok(json!({"id": P, "channel_id": C,
                "user_id": BOT, "props": {"from_bot": "true", "attachments": [{"actions": []}]}})),
            ("GET", p) if p == format!("/posts/{R}") => {
                ok(json!({"id": R, "channel_id": C, "user_id": ANN}))
            }
            ("PUT", p) if p == format!("/posts/{P}/patch") => ok(body.clone()),
            _ => refused(404, "x"),
        })
        .await;
        assert_eq!(
            chat.update(C, R, Text::plain("x")).await.unwrap_err(),
            ChatError::Api("cant_update_message".into())
        );
        chat.update(C, P, Text::plain("*done*")).await.unwrap();
        assert_eq!(
            body(&seen, "PUT", &format!("/posts/{P}/patch")),
            json!({"message": "**done**", "props": {"from_bot": "true"}})
        );
    }

    /// A search runs in the team of the channel it is made from (the
    /// bot channel's for a direct message), newest first, links in that
    /// team.
    #[tokio::test]
    async fn search_runs_in_the_team_of_the_channel_searched_from() {
        const U: &str = "uuuuuuuuuuuuuuuuuuuuuuuuuu";
        let (chat, seen) = mm(|method, path, _| match (method, path) {
            (_, p) if p == format!("/channels/{C}") => {
                ok(json!({"id": C, "team_id": T, "type": "O"}))
            }
            (_, p) if p == format!("/channels/{D}") => {
                ok(json!({"id": D, "team_id": U, "type": "P"}))
            }
            (_, p) if p == format!("/channels/{R}") => {
                ok(json!({"id": R, "team_id": "", "type": "D"}))
            }
            (_, p) if p == format!("/teams/{T}") => ok(json!({"id": T, "name": "home"})),
            (_, p) if p == format!("/teams/{U}") => ok(json!({"id": U, "name": "other"})),
            ("POST", p) if p.ends_with("/posts/search") => ok(json!({
                "order": [P, ANN],
                "posts": {
                    P: {"id": P, "channel_id": D, "user_id": BOT, "message": "old", "create_at": 1},
                    ANN: {"id": ANN, "channel_id": D, "user_id": BOT, "message": "new", "create_at": 2},
                },
            })),
            _ => refused(404, "x"),
        })
        .await;
        let found = chat.search("kiwi", 10, D).await.unwrap();
        assert_eq!(
            body(&seen, "POST", &format!("/teams/{U}/posts/search"))["terms"],
            "kiwi"
        );
        let texts: Vec<&str> = found.iter().map(|f| f.text.as_str()).collect();
        assert_eq!(texts, ["new", "old"]);
        assert!(
            found[0]
                .permalink
                .as_deref()
                .is_some_and(|l| l.ends_with(&format!("/other/pl/{ANN}"))),
            "{found:?}"
        );
        assert_eq!(chat.search("kiwi", 1, D).await.unwrap().len(), 1);
        // A direct message has no team: the bot channel's.
        chat.search("kiwi", 10, R).await.unwrap();
        body(&seen, "POST", &format!("/teams/{T}/posts/search"));
    }

    #[tokio::test]
    async fn links_resolve_within_their_team() {
        let (chat, _) = mm(|_, path, _| match path {
            p if p == format!("/posts/{P}") => ok(json!({"id": P, "channel_id": C, "root_id": R})),
            p if p == format!("/posts/{R}") => ok(json!({"id": R, "channel_id": D, "root_id": ""})),
            p if p == format!("/channels/{C}") => ok(json!({"id": C, "team_id": T, "type": "O"})),
            p if p == format!("/channels/{D}") => ok(json!({"id": D, "team_id": "", "type": "D"})),
            p if p == format!("/teams/{T}") => ok(json!({"id": T, "name": "acme"})),
            "/users/me/teams" => ok(json!([{"id": T, "name": "acme"}])),
            _ => refused(404, "x"),
        })
        .await;
        let site = chat
            .link_form()
            .await
            .split("/<team>")
            .next()
            .unwrap()
            .to_owned();
        let target = chat
            .resolve_link(&format!("{site}/acme/pl/{P}"), C)
            .await
            .unwrap();
        assert_eq!(target.channel.as_str(), C);
        assert_eq!(target.ts.as_str(), P);
        assert_eq!(
            target.thread_ts.map(|t| t.as_str().to_owned()).as_deref(),
            Some(R)
        );
        let err = chat
            .resolve_link(&format!("{site}/zeta/pl/{P}"), C)
            .await
            .unwrap_err();
        assert!(err.contains("another team's channel"), "{err}");
        let dm = chat
            .resolve_link(&format!("{site}/acme/pl/{R}"), C)
            .await
            .unwrap();
        assert_eq!((dm.channel.as_str(), dm.thread_ts), (D, None));
        let err = chat
            .resolve_link(&format!("{site}/zeta/pl/{R}"), C)
            .await
            .unwrap_err();
        assert!(err.contains("which the bot is not on"), "{err}");
        let err = chat
            .resolve_link(&format!("{site}/acme/pl/{T}"), C)
            .await
            .unwrap_err();
        assert!(
            err.contains("does not exist or that the bot cannot read"),
            "{err}"
        );
        assert_eq!(
            chat.permalink(D, P).await.unwrap(),
            format!("{site}/acme/pl/{P}")
        );
    }

    #[tokio::test]
    async fn people_are_found_by_user_name() {
        let (chat, seen) = mm(|_, path, _| match path {
            "/users/username/ann" => ok(json!({"id": ANN, "username": "ann"})),
            "/users/username/old" => ok(json!({"id": BOT, "username": "old", "delete_at": 5})),
            _ => refused(404, "app.user.missing_account.const"),
        })
        .await;
        assert_eq!(chat.find_person("@ann").await.unwrap(), ANN);
        assert_eq!(chat.find_person(" ann ").await.unwrap(), ANN);
        assert_eq!(
            chat.user_name(ANN).await.unwrap(),
            "ann",
            "cached by find_person"
        );
        assert!(
            chat.find_person("bob")
                .await
                .unwrap_err()
                .contains("no Mattermost user is named @bob")
        );
        assert!(
            chat.find_person("old")
                .await
                .unwrap_err()
                .contains("deactivated")
        );
        let before = seen.lock().unwrap().len();
        assert!(
            chat.find_person("Ann")
                .await
                .unwrap_err()
                .contains("lower case")
        );
        assert_eq!(
            seen.lock().unwrap().len(),
            before,
            "a bad name is not looked up"
        );
    }

    #[tokio::test]
    async fn an_upload_is_a_file_then_a_post() {
        let (chat, seen) = mm(|method, path, _| match (method, path) {
            ("POST", "/files") => (
                201,
                vec![],
                json!({"file_infos": [{"id": "f1"}]}).to_string(),
            ),
            ("POST", "/posts") => (201, vec![], json!({"id": P, "channel_id": C}).to_string()),
            ("GET", p) if p == format!("/channels/{C}") => ok(json!({"id": C, "team_id": T})),
            ("GET", p) if p == format!("/teams/{T}") => ok(json!({"id": T, "name": "acme"})),
            _ => refused(404, "x"),
        })
        .await;
        let thread = ThreadRef {
            channel: C.into(),
            thread_ts: R.into(),
        };
        let uploaded = chat
            .upload_file(
                &thread,
                Upload {
                    filename: "plot.png".into(),
                    bytes: b"png".to_vec(),
                    title: Some("Weekly plot".into()),
                    comment: Some("see *this*".into()),
                    alt_text: Some("a line going up".into()),
                },
            )
            .await
            .unwrap();
        assert_eq!(uploaded.file_id, "f1");
        assert!(
            uploaded
                .permalink
                .unwrap()
                .ends_with(&format!("/acme/pl/{P}"))
        );
        assert_eq!(
            body(&seen, "POST", "/posts"),
            json!({"channel_id": C, "root_id": R, "file_ids": ["f1"],
                   "message": "**Weekly plot**\nsee **this**\n_Image description: a line going up_"})
        );
    }

    #[tokio::test]
    async fn a_dialog_needs_the_callback_url_and_answers_the_trigger_id() {
        let (chat, seen) = mm(|method, path, _| match (method, path) {
            ("POST", "/actions/dialogs/open") => ok(json!({"status": "OK"})),
            _ => refused(404, "x"),
        })
        .await;
        let view = json!({"type": "modal", "callback_id": "calvin_secret", "private_metadata": "m",
            "title": {"type": "plain_text", "text": "Set a secret"},
            "blocks": [{"type": "input", "block_id": "secret", "label": {"type": "plain_text", "text": "K"},
                        "element": {"type": "plain_text_input", "action_id": "value"}}]});
        assert_eq!(chat.open_view("trig", &view).await.unwrap(), "trig");
        let sent = body(&seen, "POST", "/actions/dialogs/open");
        assert_eq!(sent["url"], "https://hooks.example/mm/dialogs");
        assert_eq!(sent["dialog"]["elements"][0]["subtype"], "password");

        let site = format!("http://{}", "127.0.0.1:9");
        let without = backend(settings(&site), Metrics::default()).unwrap();
        let err = without.open_view("trig", &view).await.unwrap_err();
        assert!(err.to_string().contains("callback_url"), "{err}");
    }
}
