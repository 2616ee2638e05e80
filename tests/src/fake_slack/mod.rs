//! A fake Slack on 127.0.0.1:0, for tests of the gateway's Slack backend
//! and the tools above it: a workspace (people, conversations, messages),
//! the Web API methods calvin calls, and Socket Mode. It keeps what it was
//! given, for assertions.
//!
//! Web API methods, under `/api/`, each checked against its contract in
//! `shared/reference/slack-api-ref/methods/` (arguments, error codes,
//! example responses); answers carry every field slack-morphism's strict
//! response types require:
//!
//! - `auth.test`: the workspace (`https://fake-slack.test/`) and the bot.
//! - `users.info`: `user` (unknown: `user_not_found`).
//! - `chat.postMessage`: `channel` (unknown, or private / IM without the
//!   bot: `channel_not_found`; public without the bot: `not_in_channel`),
//!   `text` / `markdown_text` / `blocks` / `attachments` (none: `no_text`;
//!   `markdown_text` with `text` or `blocks`: `markdown_text_conflict`),
//!   `blocks` a JSON array of objects with a `type` (else
//!   `invalid_blocks_format` / `invalid_blocks`), `thread_ts`. Every
//!   argument is recorded ([`PostedMessage::args`]) and the message joins
//!   the conversation's history.
//! - `chat.update`: the bot's own message (`cant_update_message`;
//!   `message_not_found`), content checked as above. Recorded as an
//!   [`Update`].
//! - `chat.postEphemeral`: `user` must see the conversation (any known
//!   user in a public channel, a member elsewhere; else
//!   `user_not_in_channel`). Answers `message_ts`; recorded as an
//!   [`Ephemeral`].
//! - `chat.getPermalink`: `https://fake-slack.test/archives/<C>/p<ts>`,
//!   with `?thread_ts=<parent>&cid=<C>` for a reply (`message_not_found`).
//! - `conversations.info`, `conversations.members` (`limit` 100 by
//!   default, at most 1000; `cursor`, `invalid_cursor`),
//!   `conversations.replies` (the whole thread of a parent or reply ts,
//!   parent first; `limit`, `cursor`, `oldest` / `latest` / `inclusive`;
//!   `thread_not_found`), `conversations.open` (`users`: the IM with one
//!   person, an MPIM with two to eight; or `channel`).
//! - `conversations.history`: a conversation the bot is in (unknown, or
//!   private / IM / MPIM without the bot: `channel_not_found`; public
//!   without the bot: `not_in_channel`); its top-level messages, newest
//!   first, `limit` 100 by default, at most 999, `cursor`
//!   (`invalid_cursor`), `oldest` / `latest` / `inclusive`
//!   (`invalid_ts_oldest` / `invalid_ts_latest`), `has_more`.
//! - `reactions.add`: `channel` (as chat.postMessage), `timestamp`
//!   (`no_item_specified`, `bad_timestamp`, `message_not_found`), `name`
//!   an emoji name without colons (`[a-z0-9_+'-]+`, optionally
//!   `::skin-tone-2`..`6`; else `invalid_name`); `already_reacted`,
//!   `too_many_reactions` (the bot's [`MAX_REACTIONS_PER_PERSON`]),
//!   `too_many_emoji` ([`MAX_EMOJI_PER_MESSAGE`] distinct). The reaction
//!   is stored on the message and, as Slack does for an app subscribed to
//!   reaction_added, a `reaction_added` event whose `user` is
//!   [`BOT_USER_ID`] goes out over Socket Mode. Each call is recorded
//!   ([`FakeSlack::reactions_added`]).
//! - `search.messages`: with the user token only. `query` (`no_query`):
//!   every stored message, top-level or reply, holding each of its words
//!   (any case), in any conversation the token's person can read (public
//!   channels; others as a member), whether the bot is in it or not;
//!   newest first (`sort_dir=asc`: oldest first), `count` 20 by default,
//!   at most 100, `page`.
//! - `views.open`: a `trigger_id` this fake issued in an interaction
//!   payload, once (`exchanged_trigger_id`), within 3 s
//!   (`expired_trigger_id`; else `invalid_trigger_id`), and a modal `view`
//!   with a title and blocks (else `invalid_arguments`). Recorded as an
//!   [`OpenedView`].
//! - `apps.connections.open`: with the app-level token only. Answers a
//!   `ws://127.0.0.1:PORT/link/?ticket=…&app_id=A0FAKEAPP1` URL good for
//!   one connection.
//! - `files.getUploadURLExternal`, `POST /upload/<file_id>`,
//!   `files.completeUploadExternal`: Slack's v2 upload (see `files.rs`).
//!
//! Every other method answers `unknown_method`. Messages in answers have
//! Slack's shape: `user`, and for the bot's posts `bot_id` ([`BOT_ID`])
//! too; `reactions: [{name, users, count}]` once someone reacted (with
//! reactions.add or [`FakeSlack::reaction_event`]; see
//! [`FakeSlack::reactions`]).
//!
//! Tokens as Slack takes them: `Authorization: Bearer` or a `token`
//! argument; none: `not_authed`, a wrong one: `invalid_auth`. Three kinds:
//! the bot token for every method but two, the app-level token for
//! apps.connections.open, the user token ([`FakeSlack::user_token`], the
//! person [`SEARCHER_ID`] or [`FakeSlack::set_user_token_user`]'s) for
//! search.messages; another kind than the method's is
//! `not_allowed_token_type`. Arguments come in the query string and in a
//! form-urlencoded, multipart or JSON body.
//!
//! Socket Mode: a client connects with the URL from apps.connections.open
//! and gets `hello`. The event builders ([`FakeSlack::message_event`],
//! [`FakeSlack::reaction_event`], [`FakeSlack::click`],
//! [`FakeSlack::submit`]) send envelopes, each to one open socket chosen at
//! random, or queued until one connects. The fake records each delivery and
//! ack ([`FakeSlack::deliveries`], [`FakeSlack::wait_ack`]) and redelivers
//! an `events_api` envelope not acked within 3 s
//! ([`FakeSlack::set_ack_timeout`]) or whose socket closed first, with the
//! same payload (same `event_id`) and `retry_attempt` + 1, up to 3 times.
//! [`FakeSlack::drop_sockets`] and [`FakeSlack::send_disconnect`] make
//! clients reconnect.
//!
//! Faults, each once, for the named method (`"upload"` names the upload
//! URL): [`FakeSlack::fail_next`] answers `{ok: false, error}` (a 500 for
//! the upload), [`FakeSlack::rate_limit_next`] answers HTTP 429 with
//! Retry-After and `{ok: false, error: "ratelimited"}`. Faults come before
//! the token check. [`FakeSlack::reject_block_type`] makes chat.postMessage
//! answer `invalid_blocks` for a block of that type, with Slack's `errors`
//! and `response_metadata.messages`.

mod answers;
mod chat;
mod conversations;
mod envelopes;
mod files;
mod http_forms;
mod ids;
mod payloads;
mod reactions;
mod records;
mod search;
mod socket_mode;
mod state;
mod views;
mod web_api;
mod workspace;

use std::net::SocketAddr;
use std::sync::{Arc, MutexGuard};
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpListener;

pub use envelopes::{
    ACK_TIMEOUT, Ack, DISCONNECT_GRACE, Delivery, EnvelopeKind, EnvelopeStatus, MAX_RETRIES,
    SocketEnd, SocketInfo,
};
pub use reactions::{MAX_EMOJI_PER_MESSAGE, MAX_REACTIONS_PER_PERSON};
pub use records::{AddedReaction, Ephemeral, OpenedView, PostedMessage, SharedFile, Update};
pub use state::TRIGGER_TTL;
pub use workspace::{
    APP_ID, BOT_ID, BOT_USER_ID, Conversation, DEFAULT_APP_TOKEN, HOST, Kind, SEARCHER_ID, TEAM_ID,
    USER_TOKEN,
};

use state::{Shared, State};

/// A running fake; dropped, it stops accepting and cuts its sockets.
pub struct FakeSlack {
    addr: SocketAddr,
    shared: Arc<Shared>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for FakeSlack {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
        let _ = self.state().socket_mode.drop_all();
    }
}

impl FakeSlack {
    /// Starts a fake accepting the bot token `token` and the app-level
    /// token [`DEFAULT_APP_TOKEN`], with a public channel (the bot in it)
    /// for each ID in `channels`.
    pub async fn start(token: &str, channels: &[&str]) -> FakeSlack {
        FakeSlack::start_with_app_token(token, DEFAULT_APP_TOKEN, channels).await
    }

    /// [`start`](Self::start) with this app-level token.
    async fn start_with_app_token(token: &str, app_token: &str, channels: &[&str]) -> FakeSlack {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind fake Slack");
        let addr = listener.local_addr().expect("fake Slack addr");
        let ws_listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind fake Socket Mode");
        let ws_addr = ws_listener.local_addr().expect("fake Socket Mode addr");
        let shared = Arc::new(Shared::new(
            token.to_string(),
            app_token.to_string(),
            format!("http://{addr}"),
            ws_addr,
        ));
        let serving = shared.clone();
        let web = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let shared = serving.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req| web_api::handle(shared.clone(), req));
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        let sockets = tokio::spawn(socket_mode::serve(shared.clone(), ws_listener));
        let fake = FakeSlack {
            addr,
            shared,
            tasks: vec![web, sockets],
        };
        for channel in channels {
            fake.add_channel(channel);
        }
        fake
    }

    /// The Web API base, e.g. `http://127.0.0.1:PORT/api/`.
    pub fn api_url(&self) -> String {
        format!("http://{}/api/", self.addr)
    }

    /// The bot token it accepts.
    pub fn token(&self) -> String {
        self.shared.token.clone()
    }

    /// The app-level token apps.connections.open accepts.
    pub fn app_token(&self) -> String {
        self.shared.app_token.clone()
    }

    /// The user token (`xoxp-...`, [`USER_TOKEN`]) search.messages
    /// accepts, acting for [`SEARCHER_ID`] unless
    /// [`set_user_token_user`](Self::set_user_token_user) says otherwise.
    pub fn user_token(&self) -> String {
        self.shared.user_token.clone()
    }

    /// Makes the user token act for `user`, a person added with
    /// [`add_user`](Self::add_user) (or [`SEARCHER_ID`]). Panics for an
    /// unknown user.
    pub fn set_user_token_user(&self, user: &str) {
        let mut state = self.state();
        let known = state.workspace.users.contains_key(user);
        assert!(known, "no user {user}: add_user it first");
        state.user_token_user = user.to_string();
    }

    // ---- the workspace ----

    /// Makes `channel` a public channel with the bot in it.
    pub fn add_channel(&self, channel: &str) {
        let name = channel.to_lowercase();
        self.add_conversation(Conversation::public(channel, &name));
    }

    /// Adds (or replaces) a conversation. Panics on an ID that is not upper
    /// case letters and digits.
    pub fn add_conversation(&self, conversation: Conversation) {
        let id = &conversation.id;
        let shaped = !id.is_empty()
            && id
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit());
        assert!(
            shaped,
            "conversation IDs are upper case (C…, G…, D…): {id:?}"
        );
        let mut state = self.state();
        let conversations = &mut state.workspace.conversations;
        conversations.insert(conversation.id.clone(), conversation);
    }

    /// Sets the people of a conversation (the bot's membership stays as it
    /// is). Panics if there is no such conversation.
    pub fn set_members(&self, channel: &str, members: &[&str]) {
        let mut state = self.state();
        let conversation = state.workspace.conversations.get_mut(channel);
        let conversation = conversation.unwrap_or_else(|| panic!("no conversation {channel}"));
        conversation.members = members.iter().map(|m| m.to_string()).collect();
    }

    /// A conversation as it stands now (an IM opened by
    /// conversations.open, for one).
    pub fn conversation(&self, channel: &str) -> Option<Conversation> {
        self.state().workspace.conversations.get(channel).cloned()
    }

    /// Adds a person; `name` is their display name (and real name).
    pub fn add_user(&self, id: &str, name: &str) {
        let user = workspace::User {
            id: id.to_string(),
            name: name.to_string(),
            is_bot: false,
        };
        self.state().workspace.users.insert(id.to_string(), user);
    }

    /// Seeds a message `user` wrote (a reply when `thread_ts` is given) and
    /// answers its `ts`. No event is sent. Panics if there is no such
    /// conversation.
    pub fn add_message(
        &self,
        channel: &str,
        user: &str,
        text: &str,
        thread_ts: Option<&str>,
    ) -> String {
        let mut state = self.state();
        let known = state.workspace.conversations.contains_key(channel);
        assert!(known, "no conversation {channel}");
        state.workspace.post(channel, user, text, None, thread_ts)
    }

    /// The reactions on a stored message: each emoji name with who
    /// reacted, both in the order added (empty for an unknown message).
    pub fn reactions(&self, channel: &str, ts: &str) -> Vec<(String, Vec<String>)> {
        let state = self.state();
        let message = state.workspace.message(channel, ts);
        message.map(|m| m.reactions.clone()).unwrap_or_default()
    }

    // ---- records ----

    /// Messages posted with chat.postMessage, oldest first.
    pub fn messages(&self) -> Vec<PostedMessage> {
        self.state().messages.clone()
    }

    /// Files shared by files.completeUploadExternal, oldest first.
    pub fn files(&self) -> Vec<SharedFile> {
        self.state().files.clone()
    }

    /// Messages changed with chat.update, oldest first.
    pub fn updates(&self) -> Vec<Update> {
        self.state().updates.clone()
    }

    /// Messages posted with chat.postEphemeral, oldest first.
    pub fn ephemerals(&self) -> Vec<Ephemeral> {
        self.state().ephemerals.clone()
    }

    /// Every reactions.add call that passed the token check, oldest first,
    /// with the error of those refused.
    pub fn reactions_added(&self) -> Vec<AddedReaction> {
        self.state().reactions_added.clone()
    }

    /// Modals opened with views.open, oldest first.
    pub fn views(&self) -> Vec<OpenedView> {
        self.state().views.clone()
    }

    /// Every request's method name in order (`"upload"` for the upload
    /// URL), including those answered with an error.
    pub fn calls(&self) -> Vec<String> {
        self.state().calls.clone()
    }

    // ---- faults and limits ----

    /// The next call of `method` answers `{"ok": false, "error": error}`.
    pub fn fail_next(&self, method: &str, error: &str) {
        let mut state = self.state();
        let queue = state.failures.entry(method.to_string()).or_default();
        queue.push_back(error.to_string());
    }

    /// The next call of `method` answers HTTP 429 with `Retry-After:
    /// retry_after_secs`.
    pub fn rate_limit_next(&self, method: &str, retry_after_secs: u64) {
        let mut state = self.state();
        let queue = state.rate_limits.entry(method.to_string()).or_default();
        queue.push_back(retry_after_secs);
    }

    /// chat.postMessage answers `invalid_blocks` for blocks of type `ty`.
    pub fn reject_block_type(&self, ty: &str) {
        self.state().rejected_block_types.insert(ty.to_string());
    }

    /// How long a trigger id stays good for views.open (default
    /// [`TRIGGER_TTL`], 3 s).
    pub fn set_trigger_ttl(&self, ttl: Duration) {
        self.state().trigger_ttl = ttl;
    }

    /// How long an envelope may go unacked before it is redelivered
    /// (default [`ACK_TIMEOUT`], 3 s). Applies to later deliveries.
    pub fn set_ack_timeout(&self, timeout: Duration) {
        self.state().socket_mode.ack_timeout = timeout;
    }

    /// How long a socket told to disconnect stays open if its client
    /// keeps it (default [`DISCONNECT_GRACE`], 10 s).
    pub fn set_disconnect_grace(&self, grace: Duration) {
        self.state().socket_mode.disconnect_grace = grace;
    }

    // ---- Socket Mode ----

    /// A user's message event: stores the message as
    /// [`add_message`](Self::add_message) does and sends an `events_api`
    /// envelope. Answers the message's `ts` and the envelope id. Panics
    /// if the user or conversation is unknown, or the bot is not in it
    /// (Slack would send nothing).
    pub fn message_event(
        &self,
        channel: &str,
        user: &str,
        text: &str,
        thread_ts: Option<&str>,
    ) -> (String, String) {
        let mut state = self.state();
        let built = payloads::message_event(&mut state, channel, user, text, thread_ts);
        let (ts, payload) = built.unwrap_or_else(|why| panic!("message_event: {why}"));
        let envelope_id = self.enqueue(state, EnvelopeKind::EventsApi, false, payload);
        (ts, envelope_id)
    }

    /// `user` reacts to a stored message: the reaction is stored on it
    /// (see [`reactions`](Self::reactions); once per person and name) and
    /// a `reaction_added` event is sent. Answers the envelope id. Panics if
    /// the user, conversation or message is unknown.
    pub fn reaction_event(
        &self,
        user: &str,
        reaction: &str,
        channel: &str,
        message_ts: &str,
    ) -> String {
        let mut state = self.state();
        let built = payloads::reaction_event(&mut state, user, reaction, channel, message_ts);
        let payload = built.unwrap_or_else(|why| panic!("reaction_event: {why}"));
        self.enqueue(state, EnvelopeKind::EventsApi, false, payload)
    }

    /// `user` clicks the button `action_id` in a stored message: a
    /// `block_actions` interactive envelope with a fresh trigger id.
    /// Answers the envelope id, or why not (no such message or button).
    pub fn click(
        &self,
        user: &str,
        channel: &str,
        message_ts: &str,
        action_id: &str,
    ) -> Result<String, String> {
        let mut state = self.state();
        let base_url = self.shared.base_url.clone();
        let payload =
            payloads::block_actions(&mut state, &base_url, user, channel, message_ts, action_id)?;
        Ok(self.enqueue(state, EnvelopeKind::Interactive, false, payload))
    }

    /// `user` submits the modal `view_id` opened for them, `values` being
    /// `(block_id, action_id, value)` of its `plain_text_input`s: a
    /// `view_submission` interactive envelope that accepts a response
    /// payload. Answers the envelope id, or why not.
    pub fn submit(
        &self,
        user: &str,
        view_id: &str,
        values: &[(&str, &str, &str)],
    ) -> Result<String, String> {
        let mut state = self.state();
        let payload = payloads::view_submission(&mut state, user, view_id, values)?;
        Ok(self.enqueue(state, EnvelopeKind::Interactive, true, payload))
    }

    /// Sends any payload in an envelope of `kind`; answers its id.
    pub fn send_envelope(
        &self,
        kind: EnvelopeKind,
        accepts_response_payload: bool,
        payload: Value,
    ) -> String {
        self.enqueue(self.state(), kind, accepts_response_payload, payload)
    }

    fn enqueue(
        &self,
        state: MutexGuard<'_, State>,
        kind: EnvelopeKind,
        accepts_response_payload: bool,
        payload: Value,
    ) -> String {
        socket_mode::send(&self.shared, state, kind, accepts_response_payload, payload)
    }

    /// Open sockets that take envelopes (not told to disconnect).
    pub fn socket_count(&self) -> usize {
        self.state().socket_mode.live_count()
    }

    /// How many sockets have connected since the start.
    pub fn connections_opened(&self) -> usize {
        self.state().socket_mode.sockets().len()
    }

    /// Every socket that connected, open or ended, in order.
    pub fn sockets(&self) -> Vec<SocketInfo> {
        self.state().socket_mode.sockets()
    }

    /// Cuts every open socket's TCP connection, without a close frame.
    /// What they held unacked is queued for redelivery.
    pub fn drop_sockets(&self) {
        let deadlines = self.state().socket_mode.drop_all();
        socket_mode::arm(&self.shared, deadlines);
    }

    /// Sends `{"type": "disconnect", "reason": reason, ...}` on every open
    /// socket; each is closed when its client closes it, or after
    /// [`DISCONNECT_GRACE`]. New envelopes go to other sockets.
    pub fn send_disconnect(&self, reason: &str) {
        self.state().socket_mode.disconnect_all(reason);
        self.shared.changed();
    }

    /// Each time the envelope was sent, in order.
    pub fn deliveries(&self, envelope_id: &str) -> Vec<Delivery> {
        self.state().socket_mode.deliveries(envelope_id)
    }

    /// The payload the envelope carries (a trigger id, an event id, ...).
    pub fn envelope_payload(&self, envelope_id: &str) -> Option<Value> {
        self.state().socket_mode.payload(envelope_id)
    }

    /// Where the envelope stands; `None` for an unknown id.
    pub fn envelope_status(&self, envelope_id: &str) -> Option<EnvelopeStatus> {
        self.state().socket_mode.status(envelope_id)
    }

    /// Waits until at least `n` sockets take envelopes.
    pub async fn wait_for_sockets(&self, n: usize, timeout: Duration) -> Result<(), String> {
        let what = format!("{n} open sockets");
        self.wait_until(&what, timeout, |fake| fake.socket_count() >= n)
            .await
    }

    /// Waits for the envelope's ack.
    pub async fn wait_ack(&self, envelope_id: &str, timeout: Duration) -> Result<Ack, String> {
        let what = format!("the ack of {envelope_id}");
        let acked = |fake: &FakeSlack| fake.state().socket_mode.ack(envelope_id).is_some();
        self.wait_until(&what, timeout, acked).await?;
        let ack = self.state().socket_mode.ack(envelope_id);
        ack.ok_or_else(|| format!("no ack of {envelope_id}"))
    }

    /// Waits until `done` holds, checked after each Socket Mode change
    /// (a socket, a delivery, an ack); `what` names it in the error.
    pub async fn wait_until(
        &self,
        what: &str,
        timeout: Duration,
        done: impl Fn(&FakeSlack) -> bool,
    ) -> Result<(), String> {
        let watched = &self.shared.watched;
        watched
            .wait_until("fake Slack", what, timeout, || done(self))
            .await
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.shared.state()
    }
}
