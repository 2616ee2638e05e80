//! The fake workspace: its identity, people, conversations and the messages
//! in them, and the rules for who sees what (the bot sees every public
//! channel, and a private channel, IM or MPIM only as a member).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::ids::slack_id;

/// The workspace's host: permalinks and `auth.test`'s `url` use it.
pub const HOST: &str = "fake-slack.test";
pub const TEAM_ID: &str = "T0FAKE0001";
pub const TEAM_DOMAIN: &str = "fake-slack";
/// The bot's user.
pub const BOT_USER_ID: &str = "U0FAKEBOT1";
pub const BOT_NAME: &str = "calvin";
pub const BOT_ID: &str = "B0FAKEBOT1";
pub const APP_ID: &str = "A0FAKEAPP1";
/// The app-level token (`xapp-...`) when the test gives none.
pub const DEFAULT_APP_TOKEN: &str = "xapp-1-A0FAKEAPP1-calvin-test";
/// The user token (`xoxp-...`), the only one search.messages takes.
pub const USER_TOKEN: &str = "xoxp-1-T0FAKE0001-calvin-test";
/// The person the user token belongs to until a test picks another.
pub const SEARCHER_ID: &str = "U0SEARCHER";
const SEARCHER_NAME: &str = "searcher";
/// When every conversation was created (Unix seconds).
const CREATED: u64 = 1_700_000_000;
/// The seconds of the first generated `ts`: above the hand-written
/// `1700000000.xxxxxx` values tests use for threads of their own.
const TS_BASE_SECS: u64 = 1_700_001_000;

/// What kind of conversation: its ID starts with C (public, private), G
/// (MPIM, old private channels) or D (IM).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Public,
    Private,
    Im,
    Mpim,
}

/// A conversation of the workspace.
#[derive(Debug, Clone, PartialEq)]
pub struct Conversation {
    /// Upper case: `C…`, `G…`, `D…`.
    pub id: String,
    pub name: String,
    pub kind: Kind,
    /// Its people (the bot is a member through `bot_member`, listed or not).
    pub members: Vec<String>,
    pub bot_member: bool,
}

impl Conversation {
    /// A public channel with the bot in it and no one else.
    pub fn public(id: &str, name: &str) -> Conversation {
        Conversation {
            id: id.to_string(),
            name: name.to_string(),
            kind: Kind::Public,
            members: Vec::new(),
            bot_member: true,
        }
    }

    /// A private channel of `members`, with the bot in it.
    pub fn private(id: &str, name: &str, members: &[&str]) -> Conversation {
        Conversation {
            kind: Kind::Private,
            ..Conversation::public(id, name).with_members(members)
        }
    }

    /// The IM between `user` and the bot.
    pub fn im(id: &str, user: &str) -> Conversation {
        Conversation {
            kind: Kind::Im,
            ..Conversation::public(id, user).with_members(&[user, BOT_USER_ID])
        }
    }

    /// A multi-person IM of `members` and the bot.
    pub fn mpim(id: &str, members: &[&str]) -> Conversation {
        let name = format!("mpdm-{}-1", members.join("--").to_lowercase());
        Conversation {
            kind: Kind::Mpim,
            ..Conversation::public(id, &name).with_members(members)
        }
    }

    /// The same, with these members.
    pub fn with_members(mut self, members: &[&str]) -> Conversation {
        self.members = members.iter().map(|m| m.to_string()).collect();
        self
    }

    /// The same, without the bot.
    pub fn without_bot(mut self) -> Conversation {
        self.bot_member = false;
        self.members.retain(|m| m != BOT_USER_ID);
        self
    }

    /// Every member, the bot included when it is one; no duplicates.
    pub(crate) fn member_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = Vec::new();
        let bot = self.bot_member.then(|| BOT_USER_ID.to_string());
        for id in self.members.iter().cloned().chain(bot) {
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        ids
    }

    pub(crate) fn has_member(&self, user: &str) -> bool {
        self.member_ids().iter().any(|m| m == user)
    }

    /// Whether `user` can read it: anyone in a public channel, members
    /// elsewhere.
    pub(crate) fn visible_to(&self, user: &str) -> bool {
        self.kind == Kind::Public || self.has_member(user)
    }

    /// Whether the bot can see it at all.
    pub(crate) fn visible(&self) -> bool {
        self.kind == Kind::Public || self.bot_member
    }

    /// The person at the other end of an IM.
    pub(crate) fn im_user(&self) -> Option<&str> {
        let mut people = self.members.iter().filter(|m| *m != BOT_USER_ID);
        people.next().map(String::as_str)
    }

    /// `channel_type` in message events.
    pub(crate) fn channel_type(&self) -> &'static str {
        match self.kind {
            Kind::Public => "channel",
            Kind::Private => "group",
            Kind::Im => "im",
            Kind::Mpim => "mpim",
        }
    }

    /// The conversation object of conversations.info and friends.
    pub(crate) fn to_json(&self, with_num_members: bool) -> Value {
        let mut object = json!({
            "id": self.id,
            "created": CREATED,
            "is_archived": false,
            "is_channel": matches!(self.kind, Kind::Public | Kind::Private),
            "is_group": self.kind == Kind::Mpim,
            "is_im": self.kind == Kind::Im,
            "is_mpim": self.kind == Kind::Mpim,
            "is_private": self.kind != Kind::Public,
            "is_member": self.bot_member,
            "is_general": false,
            "is_shared": false,
            "is_ext_shared": false,
            "is_org_shared": false,
            "context_team_id": TEAM_ID,
        });
        if self.kind == Kind::Im {
            object["user"] = json!(self.im_user().unwrap_or_default());
            object["is_user_deleted"] = json!(false);
            object["is_open"] = json!(true);
            object["priority"] = json!(0);
        } else {
            object["name"] = json!(self.name);
            object["name_normalized"] = json!(self.name);
            object["creator"] = json!(BOT_USER_ID);
            object["topic"] = json!({"value": "", "creator": "", "last_set": 0});
            object["purpose"] = json!({"value": "", "creator": "", "last_set": 0});
            object["previous_names"] = json!([]);
        }
        if with_num_members {
            object["num_members"] = json!(self.member_ids().len());
        }
        object
    }
}

/// A person (or the bot) of the workspace.
#[derive(Debug, Clone)]
pub(crate) struct User {
    pub id: String,
    pub name: String,
    pub is_bot: bool,
}

impl User {
    /// The user object of users.info.
    pub fn to_json(&self) -> Value {
        let mut user = json!({
            "id": self.id,
            "team_id": TEAM_ID,
            "name": self.name,
            "real_name": self.name,
            "deleted": false,
            "is_bot": self.is_bot,
            "is_app_user": false,
            "is_admin": false,
            "is_owner": false,
            "is_primary_owner": false,
            "is_restricted": false,
            "is_ultra_restricted": false,
            "tz": "Europe/London",
            "tz_label": "Greenwich Mean Time",
            "tz_offset": 0,
            "updated": CREATED,
            "profile": {
                "display_name": self.name,
                "display_name_normalized": self.name,
                "real_name": self.name,
                "real_name_normalized": self.name,
                "team": TEAM_ID,
            },
        });
        if self.is_bot {
            user["profile"]["bot_id"] = json!(BOT_ID);
        }
        user
    }
}

/// A message in a conversation's history.
#[derive(Debug, Clone)]
pub(crate) struct StoredMessage {
    pub channel: String,
    pub ts: String,
    /// The parent's `ts`, for a reply.
    pub thread_ts: Option<String>,
    pub user: String,
    pub from_bot: bool,
    pub text: String,
    pub blocks: Option<Value>,
    /// The `ts` of its last edit.
    pub edited: Option<String>,
    /// Each emoji name with the people who reacted with it, both in the
    /// order added.
    pub reactions: Vec<(String, Vec<String>)>,
}

impl StoredMessage {
    /// `https://fake-slack.test/archives/<channel>/p<ts without the dot>`,
    /// and for a reply `?thread_ts=<parent>&cid=<channel>`.
    pub fn permalink(&self) -> String {
        let mut permalink = format!(
            "https://{HOST}/archives/{}/p{}",
            self.channel,
            self.ts.replace('.', "")
        );
        if let Some(parent) = &self.thread_ts {
            permalink.push_str(&format!("?thread_ts={parent}&cid={}", self.channel));
        }
        permalink
    }

    /// Whether `user` already reacted with `name`.
    pub fn has_reaction(&self, name: &str, user: &str) -> bool {
        self.reactions
            .iter()
            .any(|(n, users)| n == name && users.iter().any(|u| u == user))
    }

    /// Adds `user`'s `name` reaction (once).
    pub fn add_reaction(&mut self, name: &str, user: &str) {
        match self.reactions.iter_mut().find(|(n, _)| n == name) {
            Some((_, users)) if users.iter().any(|u| u == user) => {}
            Some((_, users)) => users.push(user.to_string()),
            None => self
                .reactions
                .push((name.to_string(), vec![user.to_string()])),
        }
    }
}

/// The people, conversations and messages.
pub(crate) struct Workspace {
    pub users: BTreeMap<String, User>,
    pub conversations: BTreeMap<String, Conversation>,
    pub history: Vec<StoredMessage>,
    serial: u64,
}

impl Workspace {
    pub fn new() -> Workspace {
        let bot = User {
            id: BOT_USER_ID.to_string(),
            name: BOT_NAME.to_string(),
            is_bot: true,
        };
        let searcher = User {
            id: SEARCHER_ID.to_string(),
            name: SEARCHER_NAME.to_string(),
            is_bot: false,
        };
        Workspace {
            users: BTreeMap::from([(bot.id.clone(), bot), (searcher.id.clone(), searcher)]),
            conversations: BTreeMap::new(),
            history: Vec::new(),
            serial: 0,
        }
    }

    pub fn next_serial(&mut self) -> u64 {
        self.serial += 1;
        self.serial
    }

    /// A fresh `ts`, above every earlier one: `1700001000.000001`, ...
    pub fn next_ts(&mut self) -> String {
        let serial = self.next_serial();
        let secs = TS_BASE_SECS + serial / 1_000_000;
        format!("{secs}.{:06}", serial % 1_000_000)
    }

    /// The conversation, if the bot can see it; else `channel_not_found`.
    pub fn seen(&self, channel: Option<&str>) -> Result<&Conversation, &'static str> {
        channel
            .and_then(|id| self.conversations.get(id))
            .filter(|c| c.visible())
            .ok_or("channel_not_found")
    }

    /// The conversation, if the bot is in it (to post, react or read its
    /// history): a public channel it is not in is `not_in_channel`.
    pub fn postable(&self, channel: Option<&str>) -> Result<&Conversation, &'static str> {
        let conversation = self.seen(channel)?;
        if conversation.bot_member {
            Ok(conversation)
        } else {
            Err("not_in_channel")
        }
    }

    pub fn message(&self, channel: &str, ts: &str) -> Option<&StoredMessage> {
        self.history
            .iter()
            .find(|m| m.channel == channel && m.ts == ts)
    }

    pub fn message_mut(&mut self, channel: &str, ts: &str) -> Option<&mut StoredMessage> {
        self.history
            .iter_mut()
            .find(|m| m.channel == channel && m.ts == ts)
    }

    /// Adds a message and answers its `ts`. A `thread_ts` naming a reply
    /// lands in that reply's thread, as in Slack.
    pub fn post(
        &mut self,
        channel: &str,
        user: &str,
        text: &str,
        blocks: Option<Value>,
        thread_ts: Option<&str>,
    ) -> String {
        let thread_ts = thread_ts.map(|given| {
            self.message(channel, given)
                .and_then(|m| m.thread_ts.clone())
                .unwrap_or_else(|| given.to_string())
        });
        let ts = self.next_ts();
        self.history.push(StoredMessage {
            channel: channel.to_string(),
            ts: ts.clone(),
            thread_ts,
            user: user.to_string(),
            from_bot: user == BOT_USER_ID,
            text: text.to_string(),
            blocks: with_block_ids(blocks),
            edited: None,
            reactions: Vec::new(),
        });
        ts
    }

    /// The whole thread `ts` belongs to (it may be the parent or any
    /// reply): the parent first, then the replies, oldest first.
    pub fn thread(&self, channel: &str, ts: &str) -> Option<Vec<&StoredMessage>> {
        let message = self.message(channel, ts)?;
        let root = message.thread_ts.as_deref().unwrap_or(&message.ts);
        let mut thread: Vec<&StoredMessage> = self
            .history
            .iter()
            .filter(|m| m.channel == channel)
            .filter(|m| m.ts == root || m.thread_ts.as_deref() == Some(root))
            .collect();
        thread.sort_by_key(|m| (m.ts != root, ts_key(&m.ts)));
        Some(thread)
    }

    fn replies(&self, channel: &str, parent_ts: &str) -> Vec<&StoredMessage> {
        let mut replies: Vec<&StoredMessage> = self
            .history
            .iter()
            .filter(|m| m.channel == channel && m.thread_ts.as_deref() == Some(parent_ts))
            .filter(|m| m.ts != parent_ts)
            .collect();
        replies.sort_by_key(|m| ts_key(&m.ts));
        replies
    }

    /// A message as conversations.replies and interaction payloads show
    /// it: a parent carries its replies' summary, a reply its parent.
    pub fn message_json(&self, message: &StoredMessage) -> Value {
        let mut json = json!({
            "type": "message",
            "user": message.user,
            "text": message.text,
            "ts": message.ts,
            "team": TEAM_ID,
        });
        if message.from_bot {
            json["bot_id"] = json!(BOT_ID);
            json["app_id"] = json!(APP_ID);
        }
        if let Some(blocks) = &message.blocks {
            json["blocks"] = blocks.clone();
        }
        if let Some(edited) = &message.edited {
            json["edited"] = json!({"user": message.user, "ts": edited});
        }
        if !message.reactions.is_empty() {
            let reactions: Vec<Value> = message
                .reactions
                .iter()
                .map(|(name, users)| json!({"name": name, "users": users, "count": users.len()}))
                .collect();
            json["reactions"] = json!(reactions);
        }
        if let Some(parent_ts) = &message.thread_ts {
            json["thread_ts"] = json!(parent_ts);
            if let Some(parent) = self.message(&message.channel, parent_ts) {
                json["parent_user_id"] = json!(parent.user);
            }
            return json;
        }
        let replies = self.replies(&message.channel, &message.ts);
        if let Some(latest) = replies.last() {
            let mut people: Vec<&str> = Vec::new();
            for reply in &replies {
                if !people.contains(&reply.user.as_str()) {
                    people.push(&reply.user);
                }
            }
            json["thread_ts"] = json!(message.ts);
            json["reply_count"] = json!(replies.len());
            json["reply_users_count"] = json!(people.len());
            json["reply_users"] = json!(people);
            json["latest_reply"] = json!(latest.ts);
        }
        json
    }
}

/// The blocks, each with a `block_id`: Slack gives one to every block
/// posted without.
pub(crate) fn with_block_ids(blocks: Option<Value>) -> Option<Value> {
    let mut blocks = blocks?;
    for block in blocks.as_array_mut().into_iter().flatten() {
        if let Some(block) = block.as_object_mut() {
            block
                .entry("block_id")
                .or_insert_with(|| json!(slack_id("").get(..5).unwrap_or("b0000")));
        }
    }
    Some(blocks)
}

/// A `ts` (or any Unix time with up to 6 decimals) as (seconds,
/// microseconds), for ordering; `None` if it is not one.
pub(crate) fn parse_ts(ts: &str) -> Option<(u64, u64)> {
    let (secs, fraction) = ts.split_once('.').unwrap_or((ts, ""));
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(secs) || !(fraction.is_empty() || digits(fraction)) {
        return None;
    }
    let micros = format!("{:0<6}", fraction.get(..6).unwrap_or(fraction));
    Some((secs.parse().ok()?, micros.parse().ok()?))
}

/// A sort key: unparsable `ts` values sort last.
pub(crate) fn ts_key(ts: &str) -> (u64, u64) {
    parse_ts(ts).unwrap_or((u64::MAX, u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ts_values_are_fixed_width_and_increasing() {
        let mut workspace = Workspace::new();
        let first = workspace.next_ts();
        let second = workspace.next_ts();
        assert_eq!(first, "1700001000.000001");
        assert!(ts_key(&first) < ts_key(&second));
        assert_eq!(parse_ts("1700000000"), Some((1_700_000_000, 0)));
        assert_eq!(parse_ts("1.5"), Some((1, 500_000)));
        assert_eq!(parse_ts("1.x"), None);
        assert_eq!(parse_ts(""), None);
    }

    #[test]
    fn a_reply_to_a_reply_joins_the_parents_thread() {
        let mut workspace = Workspace::new();
        workspace
            .conversations
            .insert("C1".into(), Conversation::public("C1", "one"));
        let parent = workspace.post("C1", "U1", "parent", None, None);
        let reply = workspace.post("C1", "U2", "reply", None, Some(&parent));
        let nested = workspace.post("C1", "U1", "nested", None, Some(&reply));
        let thread = workspace.thread("C1", &nested).expect("thread");
        let order: Vec<&str> = thread.iter().map(|m| m.ts.as_str()).collect();
        assert_eq!(order, [&parent, &reply, &nested]);
        let summary = workspace.message_json(thread[0]);
        assert_eq!(summary["reply_count"], 2);
        assert_eq!(summary["latest_reply"], json!(nested));
        assert_eq!(summary["reply_users"], json!(["U2", "U1"]));
    }
}
