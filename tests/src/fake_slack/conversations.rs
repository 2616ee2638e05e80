//! conversations.info, conversations.members, conversations.replies,
//! conversations.history, conversations.open.

use std::cmp::Reverse;

use serde_json::{Value, json};

use super::answers::{Outcome, Refusal};
use super::http_forms::{Args, bool_arg, hex_decode, hex_encode, list_arg, str_arg};
use super::state::State;
use super::workspace::{BOT_USER_ID, Conversation, Kind, StoredMessage, parse_ts, ts_key};

/// The conversation the `channel` argument names, as the bot sees it
/// (else `channel_not_found`).
pub(crate) fn seen_in<'a>(state: &'a State, args: &Args) -> Result<&'a Conversation, Refusal> {
    let channel = str_arg(args, "channel");
    state
        .workspace
        .seen(channel.as_deref())
        .map_err(Refusal::code)
}

/// As [`seen_in`], and the bot is in it, to post, react or read its
/// history (else `not_in_channel`).
pub(crate) fn postable_in<'a>(state: &'a State, args: &Args) -> Result<&'a Conversation, Refusal> {
    let channel = str_arg(args, "channel");
    state
        .workspace
        .postable(channel.as_deref())
        .map_err(Refusal::code)
}

/// conversations.members' page size when `limit` is not given.
const MEMBERS_DEFAULT_LIMIT: usize = 100;
/// conversations.replies' page size when `limit` is not given.
const REPLIES_DEFAULT_LIMIT: usize = 1000;
/// The largest page either gives.
const MAX_LIMIT: usize = 1000;
/// conversations.history's page size when `limit` is not given.
const HISTORY_DEFAULT_LIMIT: usize = 100;
/// The largest page conversations.history gives.
const HISTORY_MAX_LIMIT: usize = 999;
/// An MPIM holds at most this many people besides the caller.
const MAX_MPIM_USERS: usize = 8;

pub(crate) fn info(state: &State, args: &Args) -> Outcome {
    let conversation = seen_in(state, args)?;
    let with_num_members = args
        .get("include_num_members")
        .is_some_and(|_| bool_arg(args, "include_num_members"));
    Ok(json!({ "channel": conversation.to_json(with_num_members) }))
}

/// `limit`: absent or 0 is `default`, above `max` is `max`, not a number
/// is `invalid` (or `default` for a method whose contract names no
/// error for it).
fn page_size(
    args: &Args,
    default: usize,
    max: usize,
    invalid: Option<&'static str>,
) -> Result<usize, Refusal> {
    let Some(limit) = str_arg(args, "limit") else {
        return Ok(default);
    };
    match (limit.parse::<usize>(), invalid) {
        (Ok(0), _) | (Err(_), None) => Ok(default),
        (Ok(n), _) => Ok(n.min(max)),
        (Err(_), Some(invalid)) => Err(Refusal::code(invalid)),
    }
}

/// `oldest` / `latest` / `inclusive`: which `ts` a listing keeps.
struct Window {
    oldest: Option<(u64, u64)>,
    latest: Option<(u64, u64)>,
    inclusive: bool,
}

impl Window {
    /// `invalid_ts_oldest` / `invalid_ts_latest` for a bound that is not
    /// a timestamp.
    fn from_args(args: &Args) -> Result<Window, Refusal> {
        let bound = |name: &str, error: &'static str| match str_arg(args, name) {
            None => Ok(None),
            Some(text) => parse_ts(&text).map(Some).ok_or(Refusal::code(error)),
        };
        Ok(Window {
            oldest: bound("oldest", "invalid_ts_oldest")?,
            latest: bound("latest", "invalid_ts_latest")?,
            inclusive: bool_arg(args, "inclusive"),
        })
    }

    fn contains(&self, ts: &str) -> bool {
        let key = ts_key(ts);
        let after = self
            .oldest
            .is_none_or(|o| key > o || (self.inclusive && key == o));
        let before = self
            .latest
            .is_none_or(|l| key < l || (self.inclusive && key == l));
        after && before
    }
}

/// Where a page starts: the item the cursor names (`<kind>:<key>`, hex
/// encoded), or the first one.
fn page_start<T>(
    args: &Args,
    kind: &str,
    items: &[T],
    key: impl Fn(&T) -> &str,
) -> Result<usize, Refusal> {
    let Some(cursor) = str_arg(args, "cursor") else {
        return Ok(0);
    };
    let named = hex_decode(&cursor)
        .and_then(|text| Some(text.strip_prefix(kind)?.strip_prefix(':')?.to_string()));
    named
        .and_then(|named| items.iter().position(|item| key(item) == named))
        .ok_or(Refusal::code("invalid_cursor"))
}

fn next_cursor(kind: &str, next: Option<&str>) -> String {
    next.map(|key| hex_encode(&format!("{kind}:{key}")))
        .unwrap_or_default()
}

pub(crate) fn members(state: &State, args: &Args) -> Outcome {
    let conversation = seen_in(state, args)?;
    let limit = page_size(
        args,
        MEMBERS_DEFAULT_LIMIT,
        MAX_LIMIT,
        Some("invalid_limit"),
    )?;
    let members = conversation.member_ids();
    let start = page_start(args, "user_id", &members, |m| m)?;
    let page: Vec<&String> = members.iter().skip(start).take(limit).collect();
    let next = members.get(start + limit).map(String::as_str);
    Ok(json!({
        "members": page,
        "response_metadata": { "next_cursor": next_cursor("user_id", next) },
    }))
}

/// The whole thread of `ts`, parent first; `oldest` / `latest` /
/// `inclusive` narrow the replies (the parent always comes first).
pub(crate) fn replies(state: &State, args: &Args) -> Outcome {
    let conversation = seen_in(state, args)?;
    let ts = str_arg(args, "ts").ok_or(Refusal::code("thread_not_found"))?;
    let window = Window::from_args(args)?;
    let limit = page_size(
        args,
        REPLIES_DEFAULT_LIMIT,
        MAX_LIMIT,
        Some("invalid_limit"),
    )?;
    let thread = state
        .workspace
        .thread(&conversation.id, &ts)
        .ok_or(Refusal::code("thread_not_found"))?;
    let root = thread
        .first()
        .map(|m| m.thread_ts.clone().unwrap_or(m.ts.clone()));
    let thread: Vec<_> = thread
        .into_iter()
        .filter(|m| Some(&m.ts) == root.as_ref() || window.contains(&m.ts))
        .collect();
    let start = page_start(args, "next_ts", &thread, |m| &m.ts)?;
    let page: Vec<Value> = thread
        .iter()
        .skip(start)
        .take(limit)
        .map(|m| state.workspace.message_json(m))
        .collect();
    let next = thread.get(start + limit).map(|m| m.ts.as_str());
    Ok(json!({
        "messages": page,
        "has_more": next.is_some(),
        "response_metadata": { "next_cursor": next_cursor("next_ts", next) },
    }))
}

/// The conversation's top-level messages (replies left out), newest
/// first, within `oldest` / `latest` / `inclusive`; `limit` and `cursor`
/// page them. The bot must be in the conversation.
pub(crate) fn history(state: &State, args: &Args) -> Outcome {
    let conversation = postable_in(state, args)?;
    let window = Window::from_args(args)?;
    let limit = page_size(args, HISTORY_DEFAULT_LIMIT, HISTORY_MAX_LIMIT, None)?;
    let top_level = |m: &&StoredMessage| m.thread_ts.as_deref().is_none_or(|t| t == m.ts);
    let mut messages: Vec<&StoredMessage> = state
        .workspace
        .history
        .iter()
        .filter(|m| m.channel == conversation.id)
        .filter(top_level)
        .filter(|m| window.contains(&m.ts))
        .collect();
    messages.sort_by_key(|m| Reverse(ts_key(&m.ts)));
    let start = page_start(args, "next_ts", &messages, |m| &m.ts)?;
    let page: Vec<Value> = messages
        .iter()
        .skip(start)
        .take(limit)
        .map(|m| state.workspace.message_json(m))
        .collect();
    let next = messages.get(start + limit).map(|m| m.ts.as_str());
    let mut answer = json!({
        "messages": page,
        "has_more": next.is_some(),
        "pin_count": 0,
        "response_metadata": { "next_cursor": next_cursor("next_ts", next) },
    });
    if let Some(latest) = str_arg(args, "latest") {
        answer["latest"] = json!(latest);
    }
    Ok(answer)
}

/// `users` (one: the IM with the bot; two to eight: an MPIM) or `channel`
/// (an IM or MPIM the bot is in). An existing conversation is answered
/// again with `already_open`. `return_im` gives the whole object, else
/// only its `id`.
pub(crate) fn open(state: &mut State, args: &Args) -> Outcome {
    let existing = match (list_arg(args, "users"), str_arg(args, "channel")) {
        (Some(users), _) => find_or_create(state, users)?,
        (None, Some(channel)) => {
            let conversation = state
                .workspace
                .seen(Some(&channel))
                .map_err(Refusal::code)?;
            if !matches!(conversation.kind, Kind::Im | Kind::Mpim) {
                return Err(Refusal::code("method_not_supported_for_channel_type"));
            }
            (conversation.id.clone(), true)
        }
        (None, None) => return Err(Refusal::code("users_list_not_supplied")),
    };
    let (id, already_open) = existing;
    let Some(conversation) = state.workspace.conversations.get(&id) else {
        return Err(Refusal::code("channel_not_found"));
    };
    let channel = if bool_arg(args, "return_im") {
        conversation.to_json(false)
    } else {
        json!({ "id": id })
    };
    let mut answer = json!({ "channel": channel });
    if already_open {
        answer["no_op"] = json!(true);
        answer["already_open"] = json!(true);
    }
    Ok(answer)
}

/// The IM or MPIM of exactly these people and the bot: its id, and
/// whether it existed.
fn find_or_create(state: &mut State, users: Vec<String>) -> Result<(String, bool), Refusal> {
    let mut people: Vec<String> = Vec::new();
    for user in users {
        if !state.workspace.users.contains_key(&user) {
            return Err(Refusal::code("user_not_found"));
        }
        if user != BOT_USER_ID && !people.contains(&user) {
            people.push(user);
        }
    }
    let kind = match people.len() {
        0 => return Err(Refusal::code("not_enough_users")),
        1 => Kind::Im,
        n if n <= MAX_MPIM_USERS => Kind::Mpim,
        _ => return Err(Refusal::code("too_many_users")),
    };
    let same_people = |c: &&Conversation| {
        let mut theirs: Vec<&String> = c.members.iter().filter(|m| *m != BOT_USER_ID).collect();
        let mut ours: Vec<&String> = people.iter().collect();
        theirs.sort();
        ours.sort();
        c.kind == kind && c.bot_member && theirs == ours
    };
    if let Some(found) = state.workspace.conversations.values().find(same_people) {
        return Ok((found.id.clone(), true));
    }
    let serial = state.workspace.next_serial();
    let names: Vec<&str> = people.iter().map(String::as_str).collect();
    let conversation = match names.as_slice() {
        [one] => Conversation::im(&format!("D{serial:09}"), one),
        _ => Conversation::mpim(&format!("G{serial:09}"), &names),
    };
    let id = conversation.id.clone();
    state
        .workspace
        .conversations
        .insert(id.clone(), conversation);
    Ok((id, false))
}
