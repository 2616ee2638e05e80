//! A fake Mattermost on 127.0.0.1:0, for tests of the gateway's Mattermost
//! backend: one team, its people (the bot among them), channels, posts,
//! reactions and files; the REST API v4 endpoints calvin calls and the
//! WebSocket; and the server's side of interactive messages and dialogs.
//! It keeps what it was given, for assertions.
//!
//! Built from Mattermost's API reference, `api/v4/source/*.yaml` in
//! `mattermost/mattermost` (field names, status codes), and where the
//! reference is silent or wrong, from the server code it documents
//! (`server/channels/api4`, `server/channels/app`, `server/public/model`);
//! each module cites its source. Every error is an `AppError` JSON
//! `{id, message, detailed_error, request_id, status_code}`.
//!
//! Endpoints, under `/api/v4`, all taking the bot's token as
//! `Authorization: Bearer` (none or another: 401
//! `api.context.session_expired.app_error`); an unknown route is 404
//! `api.context.404.app_error`; a body that is not JSON is 400
//! `api.context.invalid_body_param.app_error`:
//!
//! - `GET /users/me`, `GET /users/{user_id}` (`me` works; unknown: 404
//!   `app.user.missing_account.const`), `GET /users/username/{username}`
//!   (404 `app.user.get_by_username.app_error`), `POST /users/ids` (an array
//!   of ids; the known users; empty: 400).
//! - `GET /teams/{team_id}` (404 `app.team.get.find.app_error`),
//!   `GET /users/{user_id}/teams` (another user's: 403).
//! - `GET /channels/{channel_id}` (404 `app.channel.get.existing.app_error`;
//!   a private, D or G channel without the bot: 403
//!   `api.context.permissions.app_error`; a public one is readable by any
//!   team member), `GET /channels/{channel_id}/members` (`page`,
//!   `per_page` 60 by default, at most 200), `GET
//!   /channels/{channel_id}/members/{user_id}` (not a member: 404
//!   `app.channel.get_member.missing.app_error`), `GET
//!   /channels/{channel_id}/posts` (a `PostList` of every post, replies
//!   too, newest first, `page`/`per_page`, `next_post_id`/`prev_post_id`/
//!   `has_next`; unreadable or unknown: 403), `POST /channels/direct`
//!   (`[user_id, user_id]`, the bot one of them, else 403; an unknown user:
//!   400; 201 with the D channel, made once).
//! - `POST /posts` (see `posts.rs`: not a member: 403; over 16383
//!   characters: 400 `model.post.is_valid.message_length.app_error`; a
//!   `root_id` that is unknown or a reply: 400
//!   `api.post.create_post.root_id.app_error`, of another channel: 400
//!   `api.post.create_post.channel_root_id.app_error`; nothing to show:
//!   400; 201 with the Post), `POST /posts/ephemeral` (201; recorded, sent
//!   as `ephemeral_message`, never stored), `GET /posts/{post_id}` (404
//!   `app.post.get.app_error`, unreadable 403), `GET
//!   /posts/{post_id}/thread` (the root and its replies, from any post of
//!   the thread), `PUT /posts/{post_id}/patch` (another's post, or an
//!   unknown one: 403; sets `edit_at`; sends `post_edited`), `GET
//!   /posts/{post_id}/reactions`.
//! - `POST /reactions` (see `reactions.rs`: 200, an upsert; another
//!   user's: 403 `api.reaction.save_reaction.user_id.app_error`; a bad
//!   emoji name: 400 `model.reaction.is_valid.emoji_name.app_error`).
//! - `POST /files` (see `files.rs`: 201 `{file_infos, client_ids}`; too
//!   large: 413).
//! - `POST /teams/{team_id}/posts/search` (see `search.rs`: only channels
//!   the bot is a member of).
//! - `POST /actions/dialogs/open` (see `dialogs.rs`: a trigger this fake
//!   issued, once, within [`TRIGGER_TTL`]; a valid dialog).
//! - `GET /websocket` (see `websocket.rs` and `hub.rs`: events `hello`,
//!   `posted`, `post_edited`, `reaction_added`, `ephemeral_message`,
//!   `open_dialog`, each to the sockets of the users it is for, with
//!   increasing `seq`; resumption by `connection_id` and `sequence_number`).
//!
//! Posts and reactions made through the API and through the test helpers
//! ([`add_post`](FakeMattermost::add_post), [`react`](FakeMattermost::react))
//! alike are published, the bot's own included, as Mattermost does.
//! Posts go out without their actions' `integration` (the server strips
//! it from everything it sends); [`post`](FakeMattermost::post) shows them
//! whole. [`click`](FakeMattermost::click) and
//! [`submit_dialog`](FakeMattermost::submit_dialog) play the server calling
//! the integration (see `interactions.rs`).
//!
//! Faults, once each, by route template (`"POST /posts"`, as
//! [`calls`](FakeMattermost::calls) names them), before the token check:
//! [`fail_next`](FakeMattermost::fail_next) answers an `AppError` with the
//! given status and id; [`rate_limit_next`](FakeMattermost::rate_limit_next)
//! answers 429 `limit exceeded` with `Retry-After` and `X-Ratelimit-Limit`,
//! `X-Ratelimit-Remaining: 0`, `X-Ratelimit-Reset`.

mod answers;
mod channels;
mod dialogs;
mod events;
mod files;
mod hub;
mod ids;
mod interactions;
mod model;
mod people;
mod posts;
mod reactions;
mod records;
mod rest;
mod search;
mod state;
mod websocket;

use std::net::SocketAddr;
use std::sync::{Arc, MutexGuard};
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Map, Value};
use tokio::net::TcpListener;

pub use hub::{DEAD_QUEUE_SIZE, RESUME_WINDOW, SEND_QUEUE_SIZE};
pub use model::ChannelKind;
pub use reactions::EMOJI_NAME_MAX_LEN;
pub use records::{Callback, Ephemeral, OpenedDialog, PostRecord, Source, Update, UploadedFile};
pub use state::{
    DEFAULT_PER_PAGE, MAX_FILE_SIZE, MAX_MESSAGE_RUNES, MAX_PER_PAGE, MAX_UNIQUE_REACTIONS,
    TRIGGER_TTL,
};
pub use websocket::AUTH_TIMEOUT;

use posts::NewPost;
use state::{Shared, State};

/// A running fake; dropped, it stops accepting and cuts its sockets.
pub struct FakeMattermost {
    addr: SocketAddr,
    shared: Arc<Shared>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for FakeMattermost {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
        self.state().hub.drop_all();
    }
}

impl FakeMattermost {
    /// Starts a fake whose bot (`calvin-bot`, `is_bot: true`, in the team
    /// `calvin`) has the token `token`.
    pub async fn start(token: &str) -> FakeMattermost {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind fake Mattermost");
        let addr = listener.local_addr().expect("fake Mattermost addr");
        let shared = Arc::new(Shared::new(token.to_string(), format!("http://{addr}")));
        let serving = shared.clone();
        let server = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let shared = serving.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req| rest::handle(shared.clone(), req));
                    let connection =
                        http1::Builder::new().serve_connection(TokioIo::new(stream), service);
                    let _ = connection.with_upgrades().await;
                });
            }
        });
        FakeMattermost {
            addr,
            shared,
            tasks: vec![server],
        }
    }

    /// The site URL, `http://127.0.0.1:PORT` (no trailing slash); the API
    /// is under `/api/v4`.
    pub fn url(&self) -> String {
        self.shared.site_url.clone()
    }

    /// The WebSocket URL, `ws://127.0.0.1:PORT/api/v4/websocket`.
    pub fn websocket_url(&self) -> String {
        format!("ws://{}/api/v4/websocket", self.addr)
    }

    /// The bot's token.
    pub fn token(&self) -> String {
        self.shared.token.clone()
    }

    pub fn team_id(&self) -> String {
        self.state().team.id.clone()
    }

    /// The team's name (`calvin`), as in permalinks.
    pub fn team_name(&self) -> String {
        self.state().team.name.clone()
    }

    pub fn bot_user_id(&self) -> String {
        self.state().bot_id.clone()
    }

    // ---- the team ----

    /// Adds a person to the team; answers their id.
    pub fn add_user(&self, username: &str) -> String {
        self.state().add_user(username, false)
    }

    /// Adds a channel with the bot and `members` (user ids) in it; answers
    /// its id. For [`ChannelKind::Direct`], `members` is the other person;
    /// a D or G channel's `name` is made up, as Mattermost does.
    pub fn add_channel(&self, kind: ChannelKind, name: &str, members: &[&str]) -> String {
        let bot = self.bot_user_id();
        let others = members.iter().map(|m| m.to_string()).filter(|m| *m != bot);
        let all = std::iter::once(bot.clone()).chain(others).collect();
        self.add_channel_of(kind, name, all)
    }

    /// [`add_channel`](Self::add_channel) without the bot.
    pub fn add_channel_without_bot(
        &self,
        kind: ChannelKind,
        name: &str,
        members: &[&str],
    ) -> String {
        self.add_channel_of(kind, name, members.iter().map(|m| m.to_string()).collect())
    }

    fn add_channel_of(&self, kind: ChannelKind, name: &str, members: Vec<String>) -> String {
        let mut state = self.state();
        for member in &members {
            assert!(
                state.user(member).is_some(),
                "no user {member}: add_user it first"
            );
        }
        state.create_channel(kind, name, members)
    }

    /// Adds `user` to a channel. Panics for an unknown channel.
    pub fn add_member(&self, channel: &str, user: &str) {
        let mut state = self.state();
        let channel = state
            .channel_mut(channel)
            .unwrap_or_else(|| panic!("no channel {channel}"));
        if !channel.is_member(user) {
            channel.members.push(user.to_string());
        }
    }

    /// Takes `user` out of a channel. Panics for an unknown channel.
    pub fn remove_member(&self, channel: &str, user: &str) {
        let mut state = self.state();
        let channel = state
            .channel_mut(channel)
            .unwrap_or_else(|| panic!("no channel {channel}"));
        channel.members.retain(|m| m != user);
    }

    /// `user` posts `message` (a reply when `root` is given): stored,
    /// recorded, and sent as `posted`. Answers the post id. Panics if the
    /// channel or user is unknown.
    pub fn add_post(&self, channel: &str, user: &str, message: &str, root: Option<&str>) -> String {
        self.add_post_with_props(channel, user, message, root, Value::Object(Map::new()))
    }

    /// [`add_post`](Self::add_post) with `props` (attachments, ...).
    pub fn add_post_with_props(
        &self,
        channel: &str,
        user: &str,
        message: &str,
        root: Option<&str>,
        props: Value,
    ) -> String {
        let mut state = self.state();
        assert!(state.channel(channel).is_some(), "no channel {channel}");
        assert!(state.user(user).is_some(), "no user {user}");
        let props = props.as_object().cloned().unwrap_or_default();
        let root_id = root.unwrap_or_default().to_string();
        let new = NewPost {
            channel_id: channel.to_string(),
            user_id: user.to_string(),
            root_id: root_id.clone(),
            message: message.to_string(),
            props: props.clone(),
            file_ids: Vec::new(),
            pending_post_id: String::new(),
        };
        let id = state.insert_post(new);
        state.post_records.push(PostRecord {
            id: id.clone(),
            channel_id: channel.to_string(),
            user_id: user.to_string(),
            root_id,
            message: message.to_string(),
            props: Value::Object(props),
            file_ids: Vec::new(),
            source: Source::Helper,
            body: None,
        });
        drop(state);
        self.shared.changed();
        id
    }

    /// `user` reacts to a post with `emoji`: stored (once per person and
    /// name) and sent as `reaction_added`. Panics for an unknown post.
    pub fn react(&self, post: &str, user: &str, emoji: &str) {
        let saved = self.state().save_reaction(post, user, emoji);
        assert!(saved.is_some(), "no post {post}");
        self.shared.changed();
    }

    /// `{url}/{team_name}/pl/{post_id}`, as Mattermost links a post.
    pub fn permalink(&self, post_id: &str) -> String {
        format!("{}/{}/pl/{post_id}", self.url(), self.team_name())
    }

    // ---- records ----

    /// Every post created, by the API or a helper, oldest first, as asked.
    pub fn posts(&self) -> Vec<PostRecord> {
        self.state().post_records.clone()
    }

    /// A post as it is now, with its actions' integrations.
    pub fn post(&self, id: &str) -> Option<Value> {
        let state = self.state();
        state.post(id).map(|p| state.raw_post_json(p))
    }

    /// Changes to posts (patches and clicks' updates), oldest first.
    pub fn updates(&self) -> Vec<Update> {
        self.state().updates.clone()
    }

    /// Ephemeral posts, oldest first.
    pub fn ephemerals(&self) -> Vec<Ephemeral> {
        self.state().ephemerals.clone()
    }

    /// A post's reactions as `(emoji, user_id)`, in the order made.
    pub fn reactions(&self, post_id: &str) -> Vec<(String, String)> {
        let state = self.state();
        let reactions = state.reactions(post_id).unwrap_or_default();
        reactions
            .iter()
            .map(|r| (r.emoji_name.clone(), r.user_id.clone()))
            .collect()
    }

    /// Files uploaded, oldest first, with their bytes.
    pub fn files(&self) -> Vec<UploadedFile> {
        let state = self.state();
        let files = state.files.iter().map(|f| UploadedFile {
            id: f.id.clone(),
            name: f.name.clone(),
            channel_id: f.channel_id.clone(),
            bytes: f.bytes.clone(),
            post_id: f.post_id.clone(),
        });
        files.collect()
    }

    /// Dialogs opened, oldest first.
    pub fn dialogs(&self) -> Vec<OpenedDialog> {
        self.state().dialogs.clone()
    }

    /// Requests the fake made to integrations (clicks, submissions).
    pub fn callbacks(&self) -> Vec<Callback> {
        self.state().callbacks.clone()
    }

    /// Every request's `"METHOD /route/{template}"` in order (an unknown
    /// route by its path; the WebSocket as `"GET /websocket"`), answered
    /// with an error or not.
    pub fn calls(&self) -> Vec<String> {
        self.state().calls.clone()
    }

    // ---- faults and limits ----

    /// The next request of `route` answers an `AppError` `error_id` with
    /// HTTP `status`.
    pub fn fail_next(&self, route: &str, status: u16, error_id: &str) {
        let mut state = self.state();
        let queue = state.failures.entry(route.to_string()).or_default();
        queue.push_back((status, error_id.to_string()));
    }

    /// The next request of `route` answers 429, retry after
    /// `retry_after_secs`.
    pub fn rate_limit_next(&self, route: &str, retry_after_secs: u64) {
        let mut state = self.state();
        let queue = state.rate_limits.entry(route.to_string()).or_default();
        queue.push_back(retry_after_secs);
    }

    /// How long a trigger id stays good (default [`TRIGGER_TTL`]).
    pub fn set_trigger_ttl(&self, ttl: Duration) {
        self.state().trigger_ttl = ttl;
    }

    /// The largest file `POST /files` takes (default [`MAX_FILE_SIZE`]).
    pub fn set_max_file_size(&self, bytes: u64) {
        self.state().max_file_size = bytes;
    }

    /// Whether the bot may `POST /posts/ephemeral` (default yes; Mattermost
    /// allows it to system admins only).
    pub fn set_ephemeral_allowed(&self, allowed: bool) {
        self.state().ephemeral_allowed = allowed;
    }

    /// Whether reading a post's reactions needs the channel's membership,
    /// as on older servers (default no: anyone who may read the channel,
    /// a public one included, as on current servers).
    pub fn set_reactions_members_only(&self, members_only: bool) {
        self.state().reactions_members_only = members_only;
    }

    /// How long a dropped connection can be resumed (default
    /// [`RESUME_WINDOW`]).
    pub fn set_resume_window(&self, window: Duration) {
        self.state().hub.resume_window = window;
    }

    /// Keep events that reach no connection for the next fresh one of
    /// their users (default off: dropped, as Mattermost drops them).
    pub fn hold_events(&self, hold: bool) {
        self.state().hub.hold = hold;
    }

    // ---- the WebSocket ----

    /// Authenticated sockets now open.
    pub fn socket_count(&self) -> usize {
        self.state().hub.live_count()
    }

    /// WebSocket upgrades since the start, authenticated or not.
    pub fn connections_opened(&self) -> usize {
        self.state().hub.sockets_opened()
    }

    /// Cuts every socket's TCP connection, no close frame; their
    /// connections can be resumed.
    pub fn drop_sockets(&self) {
        self.state().hub.drop_all();
        self.shared.changed();
    }

    /// Waits until at least `n` authenticated sockets are open.
    pub async fn wait_for_sockets(&self, n: usize, timeout: Duration) -> Result<(), String> {
        let what = format!("{n} open sockets");
        self.wait_until(&what, timeout, |fake| fake.socket_count() >= n)
            .await
    }

    // ---- interactions ----

    /// `user` clicks the action `action` (its `id`, or its `name`) of a
    /// post: the fake POSTs the action payload to the action's integration
    /// URL, applies the answer's `update` and `ephemeral_text`, and
    /// answers the answer's JSON (`Null` when empty), or why not.
    pub async fn click(&self, post_id: &str, action: &str, user_id: &str) -> Result<Value, String> {
        let click = interactions::prepare_click(&mut self.state(), post_id, action, user_id)?;
        self.exchange(&click.url, &click.payload, |state, answer| {
            interactions::apply_click_answer(state, &click, answer)
        })
        .await
    }

    /// `user` submits (or cancels) their last open dialog with these
    /// element values: the fake POSTs the submission to the dialog's URL
    /// and answers the answer's JSON (`Null` when empty or when nothing
    /// was sent), or why not.
    pub async fn submit_dialog(
        &self,
        user_id: &str,
        submission: Map<String, Value>,
        cancelled: bool,
    ) -> Result<Value, String> {
        let prepared =
            interactions::prepare_submission(&mut self.state(), user_id, submission, cancelled)?;
        let Some(submission) = prepared else {
            self.shared.changed();
            return Ok(Value::Null);
        };
        self.exchange(&submission.url, &submission.body, |state, answer| {
            interactions::apply_submission_answer(state, &submission, answer)
        })
        .await
    }

    /// POSTs `body` to the integration at `url`, records the callback,
    /// and applies its answer with `apply`: the answer (`Null` when
    /// empty), or why there was none.
    async fn exchange(
        &self,
        url: &str,
        body: &Value,
        apply: impl FnOnce(&mut state::State, &Value),
    ) -> Result<Value, String> {
        let callback = interactions::post_json(url, body).await;
        let mut state = self.state();
        state.callbacks.push(callback.clone());
        let outcome = match (callback.error, callback.answer) {
            (Some(error), _) => Err(error),
            (None, answer) => {
                let answer = answer.unwrap_or(Value::Null);
                apply(&mut state, &answer);
                Ok(answer)
            }
        };
        drop(state);
        self.shared.changed();
        outcome
    }

    /// Waits until `done` holds, checked after each change (a request, a
    /// socket, an interaction); `what` names it in the error.
    pub async fn wait_until(
        &self,
        what: &str,
        timeout: Duration,
        done: impl Fn(&FakeMattermost) -> bool,
    ) -> Result<(), String> {
        let watched = &self.shared.watched;
        watched
            .wait_until("fake Mattermost", what, timeout, || done(self))
            .await
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.shared.state()
    }
}
