//! One world of people, channels and threads, on either chat platform:
//! the same cases of the tool tests run against the fake Slack and the
//! fake Mattermost through it (`tests/tests/chat_platforms.rs`), each
//! assertion in terms a user of either platform would check (who posted
//! what where, which reactions a post has), never in one platform's ids.
//!
//! The world: a session thread in a private channel `session` of the
//! owner (Olive), Alice, Bob and Carol, and around it a public channel the
//! bot is in (`general`), a public one it is not in (`elsewhere`), a
//! private one with the bot (`team`) and a private one without it
//! (`hidden`).

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::fake_mattermost::{ChannelKind, FakeMattermost};
use crate::fake_slack::{BOT_USER_ID, Conversation, SEARCHER_ID};
use crate::gateway::{BOT_TOKEN, GatewayDaemon, GatewaySetup, OWNER};
use crate::ports::free_port;

/// The Mattermost bot's token in tests.
pub const MM_TOKEN: &str = "mm-calvin-test-token-0001";
const WAIT: Duration = Duration::from_secs(15);

/// Which fake a world runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Platform {
    Slack,
    Mattermost,
}

/// The channels around the session's.
#[derive(Debug, Clone)]
pub struct Channels {
    pub session: String,
    /// Public, the bot in it.
    pub general: String,
    /// Public, the bot not in it.
    pub elsewhere: String,
    /// Private, the bot in it.
    pub team: String,
    /// Private, the bot not in it.
    pub hidden: String,
}

/// Something the bot posted, as a person sees it.
#[derive(Debug, Clone)]
pub struct Said {
    pub channel: String,
    pub id: String,
    /// The thread it was posted into.
    pub thread: Option<String>,
    /// The message's text.
    pub text: String,
    /// All a person sees of it: the text and what its blocks or
    /// attachments show, as JSON text.
    pub visible: String,
    /// Slack's blocks, or Mattermost's props (its attachments).
    pub rendered: Value,
}

/// A file the bot shared.
#[derive(Debug, Clone)]
pub struct Shared {
    pub name: String,
    pub bytes: Vec<u8>,
    pub channel: String,
    pub thread: Option<String>,
    /// The message posted with it.
    pub comment: String,
}

enum Fake {
    Slack,
    Mattermost(FakeMattermost),
}

/// A gateway setup on one platform, its world seeded.
pub struct World {
    pub setup: GatewaySetup,
    fake: Fake,
    pub channels: Channels,
    /// Display name (Slack) or username (Mattermost) → user id.
    people: HashMap<String, String>,
    /// Where Mattermost's callbacks reach the daemon.
    callback_port: u16,
}

impl World {
    /// A world on `platform`, its gateway in `mode`.
    pub async fn on(platform: Platform, mode: &'static str) -> World {
        match platform {
            Platform::Slack => World::slack(mode).await,
            Platform::Mattermost => World::mattermost(mode).await,
        }
    }

    async fn slack(mode: &'static str) -> World {
        let mut setup = GatewaySetup::new(mode).await;
        let slack = &setup.slack;
        let mut people = HashMap::new();
        for (id, name) in [
            (OWNER, "Olive"),
            ("U0ALICE", "Alice"),
            ("U0BOB", "Bob"),
            ("U0CAROL", "Carol"),
        ] {
            slack.add_user(id, name);
            people.insert(name.to_lowercase(), id.to_owned());
        }
        let channels = Channels {
            session: setup.channel.clone(),
            general: "C0GENERAL".into(),
            elsewhere: "C0ELSEWHERE".into(),
            team: "G0TEAM".into(),
            hidden: "G0HIDDEN".into(),
        };
        slack.add_conversation(Conversation::private(
            &channels.session,
            "session",
            &[OWNER, "U0ALICE", "U0BOB", SEARCHER_ID],
        ));
        slack.add_conversation(Conversation::public(&channels.general, "general"));
        slack
            .add_conversation(Conversation::public(&channels.elsewhere, "elsewhere").without_bot());
        slack.add_conversation(Conversation::private(
            &channels.team,
            "team",
            &[OWNER, SEARCHER_ID],
        ));
        slack.add_conversation(
            Conversation::private(&channels.hidden, "hidden", &["U0ALICE", SEARCHER_ID])
                .without_bot(),
        );
        setup.thread_ts = slack.add_message(&channels.session, OWNER, "the session's task", None);
        let _ = BOT_TOKEN;
        World {
            setup,
            fake: Fake::Slack,
            channels,
            people,
            callback_port: 0,
        }
    }

    async fn mattermost(mode: &'static str) -> World {
        let mut setup = GatewaySetup::new(mode).await;
        let mm = FakeMattermost::start(MM_TOKEN).await;
        let mut people = HashMap::new();
        for name in ["olive", "alice", "bob", "carol"] {
            people.insert(name.to_owned(), mm.add_user(name));
        }
        let p = |n: &str| people[n].clone();
        let session = mm.add_channel(
            ChannelKind::Private,
            "session",
            &[&p("olive"), &p("alice"), &p("bob")],
        );
        let channels = Channels {
            general: mm.add_channel(ChannelKind::Public, "general", &[&p("alice")]),
            elsewhere: mm.add_channel_without_bot(ChannelKind::Public, "elsewhere", &[&p("alice")]),
            team: mm.add_channel(ChannelKind::Private, "team", &[&p("olive")]),
            hidden: mm.add_channel_without_bot(ChannelKind::Private, "hidden", &[&p("alice")]),
            session,
        };
        setup.thread_ts = mm.add_post(&channels.session, &p("olive"), "the session's task", None);
        setup.channel = channels.session.clone();
        setup.owner = Some(p("olive"));
        let callback_port = free_port();
        setup.chat_section = Some(format!(
            "[mattermost]\nurl = \"{url}\"\ntoken = \"{MM_TOKEN}\"\nchannel = \"{channel}\"\n\
             callback_url = \"http://127.0.0.1:{callback_port}\"\n\
             callback_listen = \"127.0.0.1:{callback_port}\"\nreconnect_secs = 1\n",
            url = mm.url(),
            channel = channels.session,
        ));
        World {
            setup,
            fake: Fake::Mattermost(mm),
            channels,
            people,
            callback_port,
        }
    }

    pub fn platform(&self) -> Platform {
        match self.fake {
            Fake::Slack => Platform::Slack,
            Fake::Mattermost(_) => Platform::Mattermost,
        }
    }

    /// The fake Mattermost (panics on Slack).
    pub fn fake_mattermost(&self) -> &FakeMattermost {
        match &self.fake {
            Fake::Mattermost(mm) => mm,
            Fake::Slack => panic!("a Slack world has no Mattermost"),
        }
    }

    /// The id of `name` (olive, alice, bob, carol).
    pub fn person(&self, name: &str) -> String {
        self.people
            .get(name)
            .unwrap_or_else(|| panic!("nobody named {name}"))
            .clone()
    }

    /// How send_dm names `name`: Slack's user id, Mattermost's username.
    pub fn recipient(&self, name: &str) -> String {
        match self.fake {
            Fake::Slack => self.person(name),
            Fake::Mattermost(_) => format!("@{name}"),
        }
    }

    /// How the tools show `name` as an author: `Name (id)`.
    pub fn author(&self, name: &str) -> String {
        let shown = match self.fake {
            Fake::Slack => {
                let mut c = name.chars();
                c.next()
                    .map(|f| f.to_uppercase().chain(c).collect())
                    .unwrap_or_default()
            }
            Fake::Mattermost(_) => name.to_owned(),
        };
        format!("{shown} ({})", self.person(name))
    }

    /// The bot's user id.
    pub fn bot(&self) -> String {
        match &self.fake {
            Fake::Slack => BOT_USER_ID.to_owned(),
            Fake::Mattermost(mm) => mm.bot_user_id(),
        }
    }

    /// The session's thread: its first message's id.
    pub fn thread(&self) -> String {
        self.setup.thread_ts.clone()
    }

    /// Seeds a message by `name` in `channel` (a reply in `thread`): its id.
    pub fn post(&self, channel: &str, name: &str, text: &str, thread: Option<&str>) -> String {
        let user = self.person(name);
        match &self.fake {
            Fake::Slack => self.setup.slack.add_message(channel, &user, text, thread),
            Fake::Mattermost(mm) => mm.add_post(channel, &user, text, thread),
        }
    }

    /// A thread in `channel`: Alice's first message and `replies` by Bob.
    pub fn seed_thread(&self, channel: &str, replies: usize) -> (String, Vec<String>) {
        let parent = self.post(channel, "alice", "the first message", None);
        let ids = (1..=replies)
            .map(|i| self.post(channel, "bob", &format!("reply {i}"), Some(&parent)))
            .collect();
        (parent, ids)
    }

    /// A message's permalink, as the platform makes them.
    pub fn link(&self, channel: &str, id: &str) -> String {
        match &self.fake {
            Fake::Slack => {
                let digits = id.replace('.', "");
                format!(
                    "https://{}/archives/{channel}/p{digits}",
                    crate::fake_slack::HOST
                )
            }
            Fake::Mattermost(mm) => mm.permalink(id),
        }
    }

    /// A link on another host, otherwise well formed.
    pub fn foreign_link(&self, channel: &str, id: &str) -> String {
        let link = self.link(channel, id);
        match &self.fake {
            Fake::Slack => link.replace(crate::fake_slack::HOST, "evil.example"),
            Fake::Mattermost(mm) => link.replace(&mm.url(), "http://127.0.0.2:9"),
        }
    }

    /// An id no message has.
    pub fn no_such_message(&self) -> String {
        match self.fake {
            Fake::Slack => "1700000999.000001".into(),
            Fake::Mattermost(_) => "ybndrfg8ejkmcpqxot1uwisza3".into(),
        }
    }

    /// What the bot posted, oldest first (messages and file posts).
    pub fn said(&self) -> Vec<Said> {
        match &self.fake {
            Fake::Slack => self
                .setup
                .slack
                .messages()
                .into_iter()
                .map(|m| {
                    let text = m.text.clone().unwrap_or_default();
                    let blocks = m.blocks.clone().unwrap_or(Value::Null);
                    Said {
                        channel: m.channel,
                        id: m.ts,
                        thread: m.thread_ts,
                        visible: format!("{text}\n{blocks}"),
                        rendered: blocks,
                        text,
                    }
                })
                .collect(),
            Fake::Mattermost(mm) => {
                let bot = mm.bot_user_id();
                mm.posts()
                    .into_iter()
                    .filter(|p| p.user_id == bot)
                    .map(|p| Said {
                        visible: format!("{}\n{}", p.message, p.props),
                        rendered: p.props.clone(),
                        channel: p.channel_id,
                        id: p.id,
                        thread: (!p.root_id.is_empty()).then_some(p.root_id),
                        text: p.message,
                    })
                    .collect()
            }
        }
    }

    /// Each edit of a message: its id and new text, oldest first.
    pub fn updates(&self) -> Vec<(String, String)> {
        match &self.fake {
            Fake::Slack => self
                .setup
                .slack
                .updates()
                .into_iter()
                .map(|u| (u.ts, u.text.unwrap_or_default()))
                .collect(),
            Fake::Mattermost(mm) => mm
                .updates()
                .into_iter()
                .map(|u| (u.post_id, u.message.unwrap_or_default()))
                .collect(),
        }
    }

    /// The reactions on a message: `(emoji, user id)`, in the order added.
    pub fn reactions(&self, channel: &str, id: &str) -> Vec<(String, String)> {
        match &self.fake {
            Fake::Slack => self
                .setup
                .slack
                .reactions(channel, id)
                .into_iter()
                .flat_map(|(name, users)| users.into_iter().map(move |u| (name.clone(), u)))
                .collect(),
            Fake::Mattermost(mm) => mm.reactions(id),
        }
    }

    /// The files the bot shared, oldest first.
    pub fn files(&self) -> Vec<Shared> {
        match &self.fake {
            Fake::Slack => self
                .setup
                .slack
                .files()
                .into_iter()
                .map(|f| Shared {
                    name: f.filename,
                    bytes: f.bytes,
                    channel: f.channel.unwrap_or_default(),
                    thread: f.thread_ts,
                    comment: f.initial_comment.unwrap_or_default(),
                })
                .collect(),
            Fake::Mattermost(mm) => mm
                .files()
                .into_iter()
                .map(|f| {
                    let post = f.post_id.as_deref().and_then(|id| mm.post(id));
                    let root = post
                        .as_ref()
                        .and_then(|p| p["root_id"].as_str().map(str::to_owned))
                        .filter(|r| !r.is_empty());
                    Shared {
                        name: f.name,
                        bytes: f.bytes,
                        channel: f.channel_id,
                        thread: root,
                        comment: post
                            .and_then(|p| p["message"].as_str().map(str::to_owned))
                            .unwrap_or_default(),
                    }
                })
                .collect(),
        }
    }

    /// Requests that wrote something (posts, edits, reactions, uploads,
    /// DMs opened), by name.
    pub fn writes(&self) -> Vec<String> {
        match &self.fake {
            Fake::Slack => {
                let writes = [
                    "chat.postMessage",
                    "chat.update",
                    "chat.postEphemeral",
                    "reactions.add",
                    "conversations.open",
                    "files.completeUploadExternal",
                ];
                self.setup
                    .slack
                    .calls()
                    .into_iter()
                    .filter(|c| writes.contains(&c.as_str()))
                    .collect()
            }
            Fake::Mattermost(mm) => mm
                .calls()
                .into_iter()
                .filter(|c| !c.starts_with("GET ") && !c.contains("/search"))
                .collect(),
        }
    }

    /// Asserts that nothing was written.
    pub fn nothing_written(&self) {
        let writes = self.writes();
        assert!(writes.is_empty(), "written: {writes:?}");
    }

    /// Makes search work: on Slack a user token (`search:read`); on
    /// Mattermost it always does.
    pub fn with_search(&mut self) {
        if self.platform() == Platform::Slack {
            let token = self.setup.slack.user_token();
            self.setup
                .slack_extra
                .push_str(&format!("user_token = \"{token}\"\n"));
        }
    }

    // ---- the daemon and the platform's events ----

    /// Lets the daemon hear the platform's events: Socket Mode on Slack;
    /// on Mattermost the WebSocket and the callback listener are always
    /// on.
    pub fn with_events(&mut self) {
        if self.platform() == Platform::Slack {
            let app = self.setup.slack.app_token();
            self.setup
                .slack_extra
                .push_str(&format!("app_token = \"{app}\"\nreconnect_secs = 1\n"));
        }
    }

    /// The daemon, its event connections up, the session registered: the
    /// daemon and the session's MCP URL.
    pub async fn daemon(&self) -> (GatewayDaemon, String) {
        let (daemon, registered) = self.daemon_session().await;
        let mcp = registered["mcp_url"].as_str().expect("mcp_url").to_owned();
        (daemon, mcp)
    }

    /// [`daemon`](Self::daemon), with the registration's whole answer
    /// (`mcp_url`, `events_url`, `env_file`).
    pub async fn daemon_session(&self) -> (GatewayDaemon, Value) {
        let daemon = GatewayDaemon::start(&self.setup).await;
        match &self.fake {
            Fake::Slack => self
                .setup
                .slack
                .wait_for_sockets(2, WAIT)
                .await
                .expect("the daemon opens its Socket Mode connections"),
            Fake::Mattermost(mm) => {
                mm.wait_for_sockets(1, WAIT)
                    .await
                    .expect("the daemon opens its WebSocket");
                wait_listening(self.callback_port).await;
            }
        }
        let registered = daemon
            .register(GatewayDaemon::context_of(&self.setup))
            .await;
        (daemon, registered)
    }

    /// Where Mattermost's callbacks reach the daemon:
    /// `http://127.0.0.1:PORT`.
    pub fn callback_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.callback_port)
    }

    /// `name` reacts to a message, and the event is on its way to the
    /// daemon (on Slack: acknowledged).
    pub async fn react(&self, name: &str, emoji: &str, channel: &str, id: &str) {
        let user = self.person(name);
        match &self.fake {
            Fake::Slack => {
                let envelope = self.setup.slack.reaction_event(&user, emoji, channel, id);
                self.setup
                    .slack
                    .wait_ack(&envelope, WAIT)
                    .await
                    .expect("acked");
            }
            Fake::Mattermost(mm) => mm.react(id, &user, emoji),
        }
    }

    /// `name` clicks the button of the bot's message `said`, and (when
    /// the click opens a form) answers the form with `value` in its one
    /// input: the form's answer, or why there was none.
    pub async fn click_and_submit(
        &self,
        name: &str,
        said: &Said,
        value: &str,
    ) -> Result<Value, String> {
        let user = self.person(name);
        match &self.fake {
            Fake::Slack => {
                let slack = &self.setup.slack;
                let before = slack.views().len();
                let action = first_action_id(said)?;
                let envelope = slack.click(&user, &said.channel, &said.id, &action)?;
                slack.wait_ack(&envelope, WAIT).await?;
                slack
                    .wait_until("the form opens", WAIT, |s| s.views().len() > before)
                    .await?;
                let view = slack.views().last().cloned().ok_or("no view")?;
                let (block, action) = first_input(&view.view)?;
                let envelope = slack.submit(&user, &view.id, &[(&block, &action, value)])?;
                let ack = slack.wait_ack(&envelope, WAIT).await?;
                Ok(ack.payload.unwrap_or(Value::Null))
            }
            Fake::Mattermost(mm) => {
                let before = mm.dialogs().len();
                let action = mm_first_action(mm, &said.id)?;
                mm.click(&said.id, &action, &user).await?;
                mm.wait_until("the dialog opens", WAIT, |m| m.dialogs().len() > before)
                    .await?;
                let dialog = mm.dialogs().last().cloned().ok_or("no dialog")?;
                let name = dialog.dialog["elements"][0]["name"]
                    .as_str()
                    .ok_or("the dialog has no element")?
                    .to_owned();
                let mut submission = Map::new();
                submission.insert(name, json!(value));
                mm.submit_dialog(&user, submission, false).await
            }
        }
    }
}

/// The first button's action id in a Slack message's blocks.
fn first_action_id(said: &Said) -> Result<String, String> {
    said.rendered
        .as_array()
        .into_iter()
        .flatten()
        .filter(|b| b["type"] == "actions")
        .flat_map(|b| b["elements"].as_array().cloned().unwrap_or_default())
        .find_map(|e| e["action_id"].as_str().map(str::to_owned))
        .ok_or_else(|| "the message has no button".into())
}

/// The first `input` block of a Slack view: its block and action ids.
fn first_input(view: &Value) -> Result<(String, String), String> {
    let block = view["blocks"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|b| b["type"] == "input")
        .ok_or("the form has no input")?;
    let block_id = block["block_id"].as_str().ok_or("no block_id")?;
    let action_id = block["element"]["action_id"]
        .as_str()
        .ok_or("no action_id")?;
    Ok((block_id.to_owned(), action_id.to_owned()))
}

/// The first button of a Mattermost post's attachments: its id.
fn mm_first_action(mm: &FakeMattermost, post: &str) -> Result<String, String> {
    let post = mm.post(post).ok_or("no such post")?;
    post["props"]["attachments"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|a| a["actions"].as_array().cloned().unwrap_or_default())
        .find_map(|a| {
            a["id"]
                .as_str()
                .or_else(|| a["name"].as_str())
                .map(str::to_owned)
        })
        .ok_or_else(|| "the post has no button".into())
}

/// Waits until something accepts connections on `port`.
async fn wait_listening(port: u16) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "nothing listens on the callback port {port}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
