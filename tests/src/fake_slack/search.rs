//! search.messages, which takes only the user token: every stored message
//! (top-level or reply) whose text holds each word of the query, from
//! every conversation the token's person can read — not only those the
//! bot is in. Shapes from the contract's example.

use serde_json::{Value, json};

use super::answers::{Outcome, Refusal};
use super::http_forms::{Args, str_arg};
use super::ids::uuid;
use super::state::State;
use super::workspace::{BOT_ID, Conversation, Kind, StoredMessage, TEAM_ID, ts_key};

/// Matches per page when `count` is not given.
const DEFAULT_COUNT: usize = 20;
/// The most matches a page holds.
const MAX_COUNT: usize = 100;

/// `query` (none or blank: `no_query`), `count`, `page`, `sort_dir`
/// (`asc`, else newest first); `sort` and `highlight` change nothing:
/// matches come by time.
pub(crate) fn messages(state: &State, args: &Args) -> Outcome {
    let query = str_arg(args, "query")
        .filter(|q| !q.trim().is_empty())
        .ok_or(Refusal::code("no_query"))?;
    let words: Vec<String> = query.split_whitespace().map(str::to_lowercase).collect();
    let count = positive(args, "count")
        .unwrap_or(DEFAULT_COUNT)
        .min(MAX_COUNT);
    let page = positive(args, "page").unwrap_or(1);
    let searcher = &state.user_token_user;
    let workspace = &state.workspace;
    let mut found: Vec<(&StoredMessage, &Conversation)> = workspace
        .history
        .iter()
        .filter_map(|m| Some((m, workspace.conversations.get(&m.channel)?)))
        .filter(|(_, c)| c.visible_to(searcher))
        .filter(|(m, _)| {
            let text = m.text.to_lowercase();
            words.iter().all(|word| text.contains(word))
        })
        .collect();
    found.sort_by_key(|(m, _)| ts_key(&m.ts));
    if str_arg(args, "sort_dir").as_deref() != Some("asc") {
        found.reverse();
    }
    let total = found.len();
    let offset = (page - 1).saturating_mul(count);
    let matches: Vec<Value> = found
        .iter()
        .skip(offset)
        .take(count)
        .map(|(m, c)| match_json(state, m, c))
        .collect();
    let (first, last) = match matches.len() {
        0 => (0, 0),
        n => (offset + 1, offset + n),
    };
    let pages = total.div_ceil(count);
    Ok(json!({
        "query": query,
        "messages": {
            "total": total,
            "matches": matches,
            "pagination": {
                "total_count": total,
                "page": page,
                "per_page": count,
                "page_count": pages,
                "first": first,
                "last": last,
            },
            "paging": { "count": count, "total": total, "page": page, "pages": pages },
        },
    }))
}

/// A number argument above zero; anything else counts as absent.
fn positive(args: &Args, name: &str) -> Option<usize> {
    let n = str_arg(args, name)?.parse::<usize>().ok()?;
    (n > 0).then_some(n)
}

/// One match: the message with its conversation, author and permalink;
/// the bot's own posts carry `bot_id`.
fn match_json(state: &State, message: &StoredMessage, conversation: &Conversation) -> Value {
    let username = state
        .workspace
        .users
        .get(&message.user)
        .map_or(message.user.as_str(), |u| u.name.as_str());
    let mut found = json!({
        "type": "message",
        "channel": {
            "id": conversation.id,
            "name": conversation.name,
            "is_channel": matches!(conversation.kind, Kind::Public | Kind::Private),
            "is_group": conversation.kind == Kind::Mpim,
            "is_im": conversation.kind == Kind::Im,
            "is_mpim": conversation.kind == Kind::Mpim,
            "is_private": conversation.kind != Kind::Public,
            "is_shared": false,
            "is_ext_shared": false,
            "is_org_shared": false,
            "is_pending_ext_shared": false,
            "pending_shared": [],
        },
        "user": message.user,
        "username": username,
        "ts": message.ts,
        "text": message.text,
        "permalink": message.permalink(),
        "iid": uuid(),
        "team": TEAM_ID,
    });
    if message.from_bot {
        found["bot_id"] = json!(BOT_ID);
    }
    found
}
