//! reactions.add: the bot reacts to a stored message. The reaction is
//! stored on the message, and Slack's `reaction_added` event for it (the
//! bot's own user as `user`) is built for Socket Mode, as Slack sends it
//! to an app subscribed to reaction_added.

use serde_json::Value;

use super::answers::Refusal;
use super::conversations::postable_in;
use super::http_forms::{Args, str_arg};
use super::payloads;
use super::records::AddedReaction;
use super::state::State;
use super::workspace::{BOT_USER_ID, parse_ts};

/// Distinct emoji a message may carry; one more is `too_many_emoji`.
pub const MAX_EMOJI_PER_MESSAGE: usize = 50;
/// Reactions one person may add to a message; one more is
/// `too_many_reactions`.
pub const MAX_REACTIONS_PER_PERSON: usize = 23;

/// Records the call (with its error, if refused) and, when the reaction
/// is added, answers the payload of the bot's `reaction_added` event.
pub(crate) fn add(state: &mut State, args: &Args) -> Result<Value, Refusal> {
    let answer = react(state, args);
    let arg = |name: &str| str_arg(args, name).unwrap_or_default();
    state.reactions_added.push(AddedReaction {
        channel: arg("channel"),
        name: arg("name"),
        timestamp: arg("timestamp"),
        error: answer
            .as_ref()
            .err()
            .map(|refusal| refusal.code.to_string()),
    });
    answer
}

/// The checks, in order: the channel (`channel_not_found`,
/// `not_in_channel`), `timestamp` (`no_item_specified`, `bad_timestamp`),
/// `name` (`invalid_name`), the message (`message_not_found`), then the
/// bot's reactions on it (`already_reacted`, `too_many_reactions`,
/// `too_many_emoji`).
fn react(state: &mut State, args: &Args) -> Result<Value, Refusal> {
    let channel = postable_in(state, args)?.id.clone();
    let ts = str_arg(args, "timestamp").ok_or(Refusal::code("no_item_specified"))?;
    if parse_ts(&ts).is_none() {
        return Err(Refusal::code("bad_timestamp"));
    }
    let name = str_arg(args, "name")
        .filter(|name| is_emoji_name(name))
        .ok_or(Refusal::code("invalid_name"))?;
    let message = state
        .workspace
        .message(&channel, &ts)
        .ok_or(Refusal::code("message_not_found"))?;
    if message.has_reaction(&name, BOT_USER_ID) {
        return Err(Refusal::code("already_reacted"));
    }
    let by_bot = message
        .reactions
        .iter()
        .filter(|(_, users)| users.iter().any(|u| u == BOT_USER_ID))
        .count();
    if by_bot >= MAX_REACTIONS_PER_PERSON {
        return Err(Refusal::code("too_many_reactions"));
    }
    let known = message.reactions.iter().any(|(n, _)| *n == name);
    if !known && message.reactions.len() >= MAX_EMOJI_PER_MESSAGE {
        return Err(Refusal::code("too_many_emoji"));
    }
    payloads::reaction_event(state, BOT_USER_ID, &name, &channel, &ts)
        .map_err(|_| Refusal::code("message_not_found"))
}

/// An emoji name as reactions take it: `[a-z0-9_+'-]+`, optionally with a
/// skin tone (`::skin-tone-2` to `6`). No colons around it.
fn is_emoji_name(name: &str) -> bool {
    let (base, tone) = match name.split_once("::") {
        Some((base, tone)) => (base, Some(tone)),
        None => (name, None),
    };
    let tone_ok = tone.is_none_or(|tone| {
        let digit = tone.strip_prefix("skin-tone-");
        matches!(digit, Some("2" | "3" | "4" | "5" | "6"))
    });
    let base_ok = !base.is_empty()
        && base
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_+'-".contains(&b));
    tone_ok && base_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emoji_names_as_reactions_take_them() {
        for good in [
            "eyes",
            "+1",
            "white_check_mark",
            "thumbsup::skin-tone-2",
            "e-mail",
        ] {
            assert!(is_emoji_name(good), "{good}");
        }
        for bad in [
            ":eyes:",
            "",
            "Eyes",
            "eyes:",
            "thumbsup::skin-tone-7",
            "thumbsup::",
            "::skin-tone-2",
            "two words",
        ] {
            assert!(!is_emoji_name(bad), "{bad}");
        }
    }
}
