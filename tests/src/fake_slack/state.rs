//! The fake's state behind one lock, and what every part shares: the
//! tokens, its addresses, and a change counter that wakes test waiters.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

use crate::fake_state::Watched;

use super::envelopes::SocketMode;
use super::records::{AddedReaction, Ephemeral, OpenedView, PostedMessage, SharedFile, Update};
use super::workspace::{SEARCHER_ID, USER_TOKEN, Workspace};

/// How long a trigger id can be exchanged for a view (Slack: 3 s).
pub const TRIGGER_TTL: Duration = Duration::from_secs(3);

pub(crate) struct Shared {
    /// The bot token (`xoxb-...`).
    pub token: String,
    /// The app-level token (`xapp-...`), for apps.connections.open.
    pub app_token: String,
    /// The user token (`xoxp-...`), for search.messages; whose it is is
    /// [`State::user_token_user`].
    pub user_token: String,
    /// `http://127.0.0.1:PORT`.
    pub base_url: String,
    /// The Socket Mode listener.
    pub ws_addr: SocketAddr,
    /// Its change counter bumped after each Socket Mode change (sockets,
    /// deliveries, acks).
    pub watched: Watched<State>,
}

impl Shared {
    pub fn new(token: String, app_token: String, base_url: String, ws_addr: SocketAddr) -> Shared {
        Shared {
            token,
            app_token,
            user_token: USER_TOKEN.to_string(),
            base_url,
            ws_addr,
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

    /// An injected answer for this call of `method`, if one is queued.
    pub fn fault(&self, method: &str) -> Option<Fault> {
        let mut state = self.state();
        state.calls.push(method.to_string());
        if let Some(secs) = state
            .rate_limits
            .get_mut(method)
            .and_then(VecDeque::pop_front)
        {
            return Some(Fault::RateLimited(secs));
        }
        let error = state
            .failures
            .get_mut(method)
            .and_then(VecDeque::pop_front)?;
        Some(Fault::Error(error))
    }
}

pub(crate) enum Fault {
    RateLimited(u64),
    Error(String),
}

/// A trigger id handed out in an interaction payload.
pub(crate) struct Trigger {
    pub user: String,
    pub issued: Instant,
    pub exchanged: bool,
}

pub(crate) struct State {
    pub workspace: Workspace,
    pub messages: Vec<PostedMessage>,
    pub files: Vec<SharedFile>,
    pub pending: HashMap<String, PendingUpload>,
    pub updates: Vec<Update>,
    pub ephemerals: Vec<Ephemeral>,
    pub triggers: HashMap<String, Trigger>,
    pub trigger_ttl: Duration,
    pub views: Vec<OpenedView>,
    pub reactions_added: Vec<AddedReaction>,
    /// The person the user token acts for.
    pub user_token_user: String,
    pub socket_mode: SocketMode,
    pub failures: HashMap<String, VecDeque<String>>,
    pub rate_limits: HashMap<String, VecDeque<u64>>,
    pub rejected_block_types: HashSet<String>,
    pub calls: Vec<String>,
}

/// A file between files.getUploadURLExternal and its completion.
pub(crate) struct PendingUpload {
    pub filename: String,
    pub length: usize,
    pub alt_txt: Option<String>,
    pub bytes: Option<Vec<u8>>,
}

impl State {
    fn new() -> State {
        State {
            workspace: Workspace::new(),
            messages: Vec::new(),
            files: Vec::new(),
            pending: HashMap::new(),
            updates: Vec::new(),
            ephemerals: Vec::new(),
            triggers: HashMap::new(),
            trigger_ttl: TRIGGER_TTL,
            views: Vec::new(),
            reactions_added: Vec::new(),
            user_token_user: SEARCHER_ID.to_string(),
            socket_mode: SocketMode::new(),
            failures: HashMap::new(),
            rate_limits: HashMap::new(),
            rejected_block_types: HashSet::new(),
            calls: Vec::new(),
        }
    }

    /// A fresh trigger id for `user`'s interaction.
    pub fn issue_trigger(&mut self, user: &str) -> String {
        let trigger_id = super::ids::trigger_id(self.workspace.next_serial());
        let trigger = Trigger {
            user: user.to_string(),
            issued: Instant::now(),
            exchanged: false,
        };
        self.triggers.insert(trigger_id.clone(), trigger);
        trigger_id
    }
}
