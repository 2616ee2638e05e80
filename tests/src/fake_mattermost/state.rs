//! The fake's state behind one lock (the team, its people, channels,
//! posts, files and what was recorded), the limits Mattermost applies, and
//! what every part shares: the token, the site URL, a change counter.

use std::collections::{HashMap, VecDeque};
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

use crate::fake_state::Watched;
use serde_json::{Map, Value, json};

use super::hub::Hub;
use super::ids;
use super::model::{Channel, Post, Reaction, StoredFile, Team, User};
use super::records::{Callback, Ephemeral, OpenedDialog, PostRecord, Update};

/// How long a trigger id stays good. Mattermost verifies it against
/// `ServiceSettings.OutgoingIntegrationRequestsTimeout`, 30 s by default
/// (`OpenInteractiveDialog` in `server/channels/app/integration_action.go`;
/// before, a 3000 ms constant, `InteractiveDialogTriggerTimeoutMilliseconds`).
pub const TRIGGER_TTL: Duration = Duration::from_secs(30);
/// `FileSettings.MaxFileSize` by default: 100 MiB (104857600 bytes).
pub const MAX_FILE_SIZE: u64 = 100 * 1024 * 1024;
/// `model.PostMessageMaxRunesV2`: a message's length, in characters.
pub const MAX_MESSAGE_RUNES: usize = 16383;
/// `per_page` when none is given (`introduction.yaml`, "common parameters").
pub const DEFAULT_PER_PAGE: usize = 60;
/// `per_page` is silently capped at 200.
pub const MAX_PER_PAGE: usize = 200;
/// `ServiceSettings.UniqueEmojiReactionLimitPerPost` by default.
pub const MAX_UNIQUE_REACTIONS: usize = 50;
/// The version `hello` reports.
pub const SERVER_VERSION: &str = "10.11.0.0.fake.false";

pub(crate) struct Shared {
    /// The bot's token.
    pub token: String,
    /// `http://127.0.0.1:PORT`, the site URL.
    pub site_url: String,
    pub watched: Watched<State>,
}

/// An injected answer for one request of a route.
pub(crate) enum Fault {
    RateLimited(u64),
    Error(u16, String),
}

impl Shared {
    pub fn new(token: String, site_url: String) -> Shared {
        Shared {
            token,
            site_url,
            watched: Watched::new(State::new()),
        }
    }

    pub fn state(&self) -> MutexGuard<'_, State> {
        self.watched.lock()
    }

    /// Wakes whoever waits for a change.
    pub fn changed(&self) {
        self.watched.changed();
    }

    /// Records the call of `route` and takes a fault queued for it.
    pub fn fault(&self, route: &str) -> Option<Fault> {
        let mut state = self.state();
        state.calls.push(route.to_string());
        let limited = state
            .rate_limits
            .get_mut(route)
            .and_then(VecDeque::pop_front);
        if let Some(secs) = limited {
            return Some(Fault::RateLimited(secs));
        }
        let failure = state
            .failures
            .get_mut(route)
            .and_then(VecDeque::pop_front)?;
        Some(Fault::Error(failure.0, failure.1))
    }
}

/// A trigger id this fake handed out in a click.
pub(crate) struct Trigger {
    pub user: String,
    pub channel_id: String,
    pub issued: Instant,
    pub used: bool,
}

pub(crate) struct State {
    pub team: Team,
    pub bot_id: String,
    pub users: Vec<User>,
    pub channels: Vec<Channel>,
    /// Oldest first; `create_at` strictly increasing.
    pub posts: Vec<Post>,
    pub files: Vec<StoredFile>,
    last_millis: i64,
    pub triggers: HashMap<String, Trigger>,
    pub trigger_ttl: Duration,
    pub max_file_size: u64,
    pub ephemeral_allowed: bool,
    /// Reading a post's reactions needs the channel's membership, as on
    /// older servers (`read_channel`), not only the right to read it.
    pub reactions_members_only: bool,
    pub post_records: Vec<PostRecord>,
    pub updates: Vec<Update>,
    pub ephemerals: Vec<Ephemeral>,
    pub dialogs: Vec<OpenedDialog>,
    pub callbacks: Vec<Callback>,
    pub calls: Vec<String>,
    pub failures: HashMap<String, VecDeque<(u16, String)>>,
    pub rate_limits: HashMap<String, VecDeque<u64>>,
    pub hub: Hub,
}

impl State {
    fn new() -> State {
        let now = ids::unix_millis();
        let team = Team {
            id: ids::new_id(),
            name: "calvin".into(),
            display_name: "Calvin".into(),
            create_at: now,
        };
        let bot = User {
            id: ids::new_id(),
            username: "calvin-bot".into(),
            is_bot: true,
            create_at: now,
        };
        State {
            team,
            bot_id: bot.id.clone(),
            users: vec![bot],
            channels: Vec::new(),
            posts: Vec::new(),
            files: Vec::new(),
            last_millis: now,
            triggers: HashMap::new(),
            trigger_ttl: TRIGGER_TTL,
            max_file_size: MAX_FILE_SIZE,
            ephemeral_allowed: true,
            reactions_members_only: false,
            post_records: Vec::new(),
            updates: Vec::new(),
            ephemerals: Vec::new(),
            dialogs: Vec::new(),
            callbacks: Vec::new(),
            calls: Vec::new(),
            failures: HashMap::new(),
            rate_limits: HashMap::new(),
            hub: Hub::new(),
        }
    }

    /// Now in milliseconds, later than any time handed out before.
    pub fn now(&mut self) -> i64 {
        self.last_millis = ids::unix_millis().max(self.last_millis + 1);
        self.last_millis
    }

    pub fn user(&self, id: &str) -> Option<&User> {
        self.users.iter().find(|u| u.id == id)
    }

    pub fn user_by_name(&self, username: &str) -> Option<&User> {
        self.users.iter().find(|u| u.username == username)
    }

    pub fn channel(&self, id: &str) -> Option<&Channel> {
        self.channels.iter().find(|c| c.id == id)
    }

    pub fn channel_mut(&mut self, id: &str) -> Option<&mut Channel> {
        self.channels.iter_mut().find(|c| c.id == id)
    }

    pub fn post(&self, id: &str) -> Option<&Post> {
        self.posts.iter().find(|p| p.id == id)
    }

    pub fn post_mut(&mut self, id: &str) -> Option<&mut Post> {
        self.posts.iter_mut().find(|p| p.id == id)
    }

    /// Whether `user` may read the channel: anyone in the team for a
    /// public channel (`read_public_channel`), members otherwise.
    pub fn can_read(&self, channel: &Channel, user: &str) -> bool {
        channel.kind == super::ChannelKind::Public || channel.is_member(user)
    }

    pub fn add_user(&mut self, username: &str, is_bot: bool) -> String {
        let id = ids::new_id();
        let create_at = self.now();
        let user = User {
            id: id.clone(),
            username: username.to_string(),
            is_bot,
            create_at,
        };
        self.users.push(user);
        id
    }

    fn files_json(&self, post: &Post) -> Vec<Value> {
        let attached = post.file_ids.iter();
        attached
            .filter_map(|id| self.files.iter().find(|f| &f.id == id))
            .map(StoredFile::to_json)
            .collect()
    }

    fn reply_count(&self, post: &Post) -> usize {
        let root = if post.root_id.is_empty() {
            &post.id
        } else {
            &post.root_id
        };
        self.posts.iter().filter(|p| &p.root_id == root).count()
    }

    /// A post as the API sends it.
    pub fn post_json(&self, post: &Post) -> Value {
        post.to_json(&self.files_json(post), self.reply_count(post))
    }

    /// A post as stored, integrations included.
    pub fn raw_post_json(&self, post: &Post) -> Value {
        post.to_raw_json(&self.files_json(post), self.reply_count(post))
    }

    pub fn channel_json(&self, channel: &Channel) -> Value {
        let posts = self.posts.iter().filter(|p| p.channel_id == channel.id);
        let (count, last) = posts.fold((0, 0), |(n, _), p| (n + 1, p.create_at));
        channel.to_json(last.max(channel.create_at), count)
    }

    /// A `PostList` of `order` (ids, as given), with `extra` posts in
    /// `posts` only, and the cursors around the page.
    pub fn post_list(&self, order: &[String], extra: &[String], cursors: Cursors) -> Value {
        let mut posts = Map::new();
        for id in order.iter().chain(extra) {
            if let Some(post) = self.post(id) {
                posts.insert(id.clone(), self.post_json(post));
            }
        }
        json!({
            "order": order, "posts": posts, "next_post_id": cursors.next_post_id,
            "prev_post_id": cursors.prev_post_id, "has_next": cursors.has_next,
            "first_inaccessible_post_time": 0,
        })
    }

    /// The reactions of a post, or `None` for an unknown post.
    pub fn reactions(&self, post_id: &str) -> Option<&[Reaction]> {
        self.post(post_id).map(|p| p.reactions.as_slice())
    }
}

/// A `PostList`'s neighbours: the newer post before the page, the older
/// one after it, and whether more pages follow.
#[derive(Default)]
pub(crate) struct Cursors {
    pub next_post_id: String,
    pub prev_post_id: String,
    pub has_next: bool,
}

/// `page` and `per_page` from a query: 60 by default, at most 200.
pub(crate) fn paging(query: &HashMap<String, String>) -> (usize, usize) {
    let page = query.get("page").and_then(|p| p.parse().ok()).unwrap_or(0);
    let per_page = query
        .get("per_page")
        .and_then(|p| p.parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or(DEFAULT_PER_PAGE)
        .min(MAX_PER_PAGE);
    (page, per_page)
}
