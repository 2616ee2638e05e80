//! Events from the chat platform in the gateway's own terms, and the hub
//! that routes them to the session each concerns (in the `serve` daemon,
//! the one process that holds the platform's event connection).
//!
//! - A message, or a reaction to one, goes to the subscribers of its
//!   thread (`GET /sessions/<id>/events` streams them). A reaction names
//!   only its message, so the hub remembers which thread each message it
//!   saw belongs to; a reaction to a message it never saw goes to the
//!   thread that message starts.
//! - A reaction also goes to the watchers of its channel
//!   ([`EventHub::watch_reactions`]): a prompt waiting for its answer, which
//!   watches before it posts and keeps the reactions to its own message.
//! - A button click and a submitted form go to the flow that posted the
//!   button ([`crate::secret_request`]); they carry its request id.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::secret_request::SecretRequests;

/// A message posted, or a reaction added, somewhere the bot can see.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChatEvent {
    Message {
        channel: String,
        ts: String,
        thread_ts: Option<String>,
        user: Option<String>,
        text: String,
    },
    Reaction {
        channel: String,
        /// The message reacted to.
        ts: String,
        user: String,
        reaction: String,
    },
}

impl ChatEvent {
    pub fn to_json(&self, thread_ts: &str) -> Value {
        match self {
            ChatEvent::Message {
                channel,
                ts,
                user,
                text,
                ..
            } => json!({
                "type": "message", "channel": channel, "thread_ts": thread_ts,
                "ts": ts, "user": user, "text": text,
            }),
            ChatEvent::Reaction {
                channel,
                ts,
                user,
                reaction,
            } => json!({
                "type": "reaction_added", "channel": channel, "thread_ts": thread_ts,
                "ts": ts, "user": user, "reaction": reaction,
            }),
        }
    }
}

/// A click on one of the gateway's buttons.
#[derive(Debug, Clone)]
pub struct ButtonClick {
    pub user: String,
    pub channel: String,
    pub message_ts: String,
    /// Lets the app open a modal for this person, within 3 s.
    pub trigger_id: String,
    pub action_id: String,
    pub value: String,
}

/// A modal submitted. Its values may be secrets: never logged.
#[derive(Clone)]
pub struct FormSubmit {
    pub user: String,
    pub callback_id: String,
    pub private_metadata: String,
    /// `(block_id, action_id, value)` of each input.
    pub values: Vec<(String, String, String)>,
}

/// What the modal does after a submission.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FormAnswer {
    /// It closes.
    Close,
    /// It stays open, showing each message under its block.
    Errors(Vec<(String, String)>),
}

/// How many message-to-thread links the hub remembers.
const REMEMBERED_MESSAGES: usize = 50_000;
/// Events a slow subscriber may have waiting before it misses some.
const SUBSCRIBER_QUEUE: usize = 256;

type ThreadKey = (String, String);

/// A map that keeps at most `cap` keys, forgetting the oldest first.
pub(crate) struct Remembered<K, V> {
    cap: usize,
    map: HashMap<K, V>,
    order: VecDeque<K>,
}

impl<K: std::hash::Hash + Eq + Clone, V> Remembered<K, V> {
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            cap,
            map: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    /// Keeps `value` for `key`; whether the key was new.
    pub(crate) fn insert(&mut self, key: K, value: V) -> bool {
        if self.map.insert(key.clone(), value).is_some() {
            return false;
        }
        self.order.push_back(key);
        while self.order.len() > self.cap {
            if let Some(old) = self.order.pop_front() {
                self.map.remove(&old);
            }
        }
        true
    }

    pub(crate) fn get(&self, key: &K) -> Option<&V> {
        self.map.get(key)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.map.len()
    }
}

/// Routes events to sessions.
pub struct EventHub {
    subscribers: Mutex<HashMap<ThreadKey, Vec<mpsc::Sender<Value>>>>,
    /// Watchers of the reactions in a channel, by channel.
    watchers: Mutex<HashMap<String, Vec<mpsc::Sender<Value>>>>,
    /// Which thread each message seen is in.
    threads: Mutex<Remembered<ThreadKey, String>>,
    pub secrets: Arc<SecretRequests>,
}

impl EventHub {
    pub fn new(secrets: Arc<SecretRequests>) -> Self {
        Self {
            subscribers: Mutex::default(),
            watchers: Mutex::default(),
            threads: Mutex::new(Remembered::new(REMEMBERED_MESSAGES)),
            secrets,
        }
    }

    /// The events of one thread, from now on.
    pub fn subscribe(&self, channel: &str, thread_ts: &str) -> mpsc::Receiver<Value> {
        let (tx, rx) = mpsc::channel(SUBSCRIBER_QUEUE);
        let mut subscribers = self.subscribers.lock().unwrap_or_else(|e| e.into_inner());
        let list = subscribers
            .entry((channel.to_owned(), thread_ts.to_owned()))
            .or_default();
        // Those gone since (a quiet thread never prunes on an event).
        list.retain(|tx| !tx.is_closed());
        list.push(tx);
        rx
    }

    /// The reactions added in `channel`, from now on (as
    /// [`ChatEvent::to_json`] gives them).
    pub fn watch_reactions(&self, channel: &str) -> mpsc::Receiver<Value> {
        let (tx, rx) = mpsc::channel(SUBSCRIBER_QUEUE);
        let mut watchers = self.watchers.lock().unwrap_or_else(|e| e.into_inner());
        // Those gone since, in every channel (a quiet channel never prunes
        // on an event).
        watchers.retain(|_, list| {
            list.retain(|tx| !tx.is_closed());
            !list.is_empty()
        });
        watchers.entry(channel.to_owned()).or_default().push(tx);
        rx
    }

    /// Routes `event` to its thread's subscribers (and a reaction to its
    /// channel's watchers), without waiting.
    pub fn on_event(&self, event: ChatEvent) {
        let watched = match &event {
            ChatEvent::Reaction { channel, .. } => Some(channel.clone()),
            ChatEvent::Message { .. } => None,
        };
        let key = match &event {
            ChatEvent::Message {
                channel,
                ts,
                thread_ts,
                ..
            } => {
                let root = thread_ts.clone().unwrap_or_else(|| ts.clone());
                self.remember(channel, ts, &root);
                (channel.clone(), root)
            }
            ChatEvent::Reaction { channel, ts, .. } => {
                let threads = self.threads.lock().unwrap_or_else(|e| e.into_inner());
                let root = threads
                    .get(&(channel.clone(), ts.clone()))
                    .cloned()
                    .unwrap_or_else(|| ts.clone());
                (channel.clone(), root)
            }
        };
        let value = event.to_json(&key.1);
        if let Some(channel) = watched {
            deliver(&self.watchers, &channel, &value);
        }
        deliver(&self.subscribers, &key, &value);
    }

    /// Remembers that the message `ts` is in the thread `root`.
    fn remember(&self, channel: &str, ts: &str, root: &str) {
        let mut threads = self.threads.lock().unwrap_or_else(|e| e.into_inner());
        threads.insert((channel.to_owned(), ts.to_owned()), root.to_owned());
    }

    /// A click: handled in the background, so the envelope is acknowledged
    /// at once.
    /// Why `click` opens nothing, as the platform shows it, if so: see
    /// [`SecretRequests::click_refusal`].
    pub async fn click_refusal(&self, click: &ButtonClick) -> Option<String> {
        self.secrets.click_refusal(click).await
    }

    pub fn on_click(&self, click: ButtonClick) {
        let secrets = self.secrets.clone();
        tokio::spawn(async move { secrets.on_click(click).await });
    }

    /// A submission: checked now (the answer may keep the modal open),
    /// stored in the background.
    pub fn on_submit(&self, form: FormSubmit) -> FormAnswer {
        self.secrets.on_submit(form)
    }
}

/// Sends `value` to the receivers listed under `key`, without waiting;
/// forgets the closed ones.
fn deliver<K: std::hash::Hash + Eq + std::fmt::Debug>(
    map: &Mutex<HashMap<K, Vec<mpsc::Sender<Value>>>>,
    key: &K,
    value: &Value,
) {
    let mut map = map.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(list) = map.get_mut(key) {
        list.retain(|tx| match tx.try_send(value.clone()) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                tracing::warn!(
                    ?key,
                    "an event receiver is behind; an event was dropped for it"
                );
                true
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        });
        if list.is_empty() {
            map.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hub() -> EventHub {
        // A client that is never called: clicks and forms are not tried here.
        let chat = crate::slack::backend("http://127.0.0.1:9/api/", "xoxb-unused".into())
            .expect("a client");
        EventHub::new(Arc::new(SecretRequests::new(
            chat,
            Err(crate::secrets::NoStore::NoKey),
            std::path::PathBuf::from("/nonexistent"),
        )))
    }

    fn message(channel: &str, ts: &str, thread: Option<&str>, text: &str) -> ChatEvent {
        ChatEvent::Message {
            channel: channel.into(),
            ts: ts.into(),
            thread_ts: thread.map(Into::into),
            user: Some("U1".into()),
            text: text.into(),
        }
    }

    #[test]
    fn events_reach_the_subscribers_of_their_thread_only() {
        let hub = hub();
        let mut mine = hub.subscribe("C1", "1.0");
        let mut theirs = hub.subscribe("C1", "2.0");
        hub.on_event(message("C1", "1.5", Some("1.0"), "hello"));
        hub.on_event(ChatEvent::Reaction {
            channel: "C1".into(),
            ts: "1.5".into(),
            user: "U2".into(),
            reaction: "eyes".into(),
        });
        assert_eq!(mine.try_recv().expect("message")["text"], "hello");
        let reaction = mine.try_recv().expect("reaction");
        assert_eq!(
            (
                reaction["thread_ts"].as_str(),
                reaction["reaction"].as_str()
            ),
            (Some("1.0"), Some("eyes"))
        );
        assert!(theirs.try_recv().is_err());
    }

    #[test]
    fn a_channel_watcher_hears_its_channels_reactions_only() {
        let hub = hub();
        let mut watcher = hub.watch_reactions("C1");
        hub.on_event(message("C1", "1.5", Some("1.0"), "prompt"));
        for (channel, reaction) in [("C2", "eyes"), ("C1", "+1")] {
            hub.on_event(ChatEvent::Reaction {
                channel: channel.into(),
                ts: "1.5".into(),
                user: "U2".into(),
                reaction: reaction.into(),
            });
        }
        let heard = watcher.try_recv().expect("the reaction in C1");
        assert_eq!(
            (heard["ts"].as_str(), heard["reaction"].as_str()),
            (Some("1.5"), Some("+1"))
        );
        assert!(
            watcher.try_recv().is_err(),
            "messages and other channels' reactions are not watched"
        );
        drop(watcher);
        drop(hub.watch_reactions("C3"));
        let _kept = hub.watch_reactions("C4");
        let watched: Vec<String> = hub.watchers.lock().expect("lock").keys().cloned().collect();
        assert_eq!(watched, ["C4"], "closed watchers go, in every channel");
    }

    #[test]
    fn a_subscriber_256_behind_misses_the_next_and_keeps_its_place() {
        let hub = hub();
        let mut slow = hub.subscribe("C1", "1.0");
        for i in 0..=SUBSCRIBER_QUEUE {
            hub.on_event(message(
                "C1",
                &format!("1.{i}"),
                Some("1.0"),
                &format!("m{i}"),
            ));
        }
        let mut got = Vec::new();
        while let Ok(v) = slow.try_recv() {
            got.push(v["text"].as_str().unwrap_or_default().to_owned());
        }
        assert_eq!(got.len(), SUBSCRIBER_QUEUE, "256 queued, the 257th dropped");
        assert_eq!(
            got[SUBSCRIBER_QUEUE - 1],
            format!("m{}", SUBSCRIBER_QUEUE - 1)
        );
        hub.on_event(message("C1", "9.0", Some("1.0"), "after"));
        assert_eq!(slow.try_recv().expect("still subscribed")["text"], "after");
    }

    #[test]
    fn a_closed_subscriber_is_forgotten_and_threads_are_remembered_up_to_the_cap() {
        let hub = hub();
        drop(hub.subscribe("C1", "1.0"));
        hub.on_event(message("C1", "1.1", Some("1.0"), "x"));
        assert!(hub.subscribers.lock().expect("lock").is_empty());
        for i in 1..REMEMBERED_MESSAGES {
            hub.remember("C2", &format!("2.{i}"), "2.0");
        }
        let first = ("C1".to_owned(), "1.1".to_owned());
        let known = |hub: &EventHub| {
            let threads = hub.threads.lock().expect("lock");
            (threads.len(), threads.get(&first).is_some())
        };
        assert_eq!(
            known(&hub),
            (REMEMBERED_MESSAGES, true),
            "all kept at the cap"
        );
        hub.remember("C2", "3.0", "3.0");
        assert_eq!(
            known(&hub),
            (REMEMBERED_MESSAGES, false),
            "the oldest forgotten past it"
        );
    }
}
