//! chat.postMessage, chat.update, chat.postEphemeral, chat.getPermalink.

use std::collections::HashSet;

use serde_json::{Value, json};

use super::answers::{Outcome, Refusal};
use super::conversations::{postable_in, seen_in};
use super::http_forms::{Args, json_arg, str_arg};
use super::records::{Ephemeral, PostedMessage, Update};
use super::state::State;
use super::workspace::{BOT_USER_ID, with_block_ids};

/// A message's content arguments, checked as Slack checks them.
struct Content {
    text: Option<String>,
    markdown_text: Option<String>,
    blocks: Option<Value>,
}

impl Content {
    /// `text` / `markdown_text` / `blocks` / `attachments`: none is
    /// `no_text`, `markdown_text` with `text` or `blocks` is
    /// `markdown_text_conflict`, `blocks` must be an array of objects with
    /// a `type` (`invalid_blocks_format` / `invalid_blocks`).
    fn from_args(args: &Args, rejected: &HashSet<String>) -> Result<Content, Refusal> {
        let text = str_arg(args, "text");
        let markdown_text = str_arg(args, "markdown_text");
        let blocks = match json_arg(args, "blocks") {
            None => None,
            Some(Ok(blocks @ Value::Array(_))) => Some(blocks),
            Some(_) => return Err(Refusal::code("invalid_blocks_format")),
        };
        if markdown_text.is_some() && (text.is_some() || blocks.is_some()) {
            return Err(Refusal::code("markdown_text_conflict"));
        }
        if text.is_none()
            && markdown_text.is_none()
            && blocks.is_none()
            && !args.contains_key("attachments")
        {
            return Err(Refusal::code("no_text"));
        }
        if let Some(blocks) = &blocks {
            check_blocks(blocks, rejected)?;
        }
        Ok(Content {
            text,
            markdown_text,
            blocks,
        })
    }

    /// The text the message shows.
    fn shown(&self) -> String {
        self.text
            .clone()
            .or_else(|| self.markdown_text.clone())
            .unwrap_or_default()
    }
}

/// Every block an object with a `type`, none of a rejected type.
pub(crate) fn check_blocks(blocks: &Value, rejected: &HashSet<String>) -> Result<(), Refusal> {
    for (i, block) in blocks.as_array().into_iter().flatten().enumerate() {
        let Some(ty) = block.get("type").and_then(Value::as_str) else {
            let message = format!("missing required field: type [json-pointer:/blocks/{i}]");
            return Err(Refusal::with("invalid_blocks", message));
        };
        if rejected.contains(ty) {
            let message = format!("unsupported type: {ty} [json-pointer:/blocks/{i}/type]");
            return Err(Refusal::with("invalid_blocks", message));
        }
    }
    Ok(())
}

/// The arguments worth recording: all but the token.
fn recorded(args: &Args) -> Args {
    let mut args = args.clone();
    args.remove("token");
    args
}

pub(crate) fn post_message(state: &mut State, args: &Args) -> Outcome {
    let channel = postable_in(state, args)?.id.clone();
    let content = Content::from_args(args, &state.rejected_block_types)?;
    let thread_ts = str_arg(args, "thread_ts");
    let shown = content.shown();
    let ts = state.workspace.post(
        &channel,
        BOT_USER_ID,
        &shown,
        content.blocks.clone(),
        thread_ts.as_deref(),
    );
    state.messages.push(PostedMessage {
        channel: channel.clone(),
        ts: ts.clone(),
        thread_ts: thread_ts.clone(),
        text: content.text.clone(),
        blocks: content.blocks.clone(),
        args: recorded(args),
    });
    let message = stored_json(state, &channel, &ts);
    Ok(json!({ "channel": channel, "ts": ts, "message": message }))
}

/// A stored message as Slack's answers show it.
fn stored_json(state: &State, channel: &str, ts: &str) -> Value {
    state
        .workspace
        .message(channel, ts)
        .map(|m| state.workspace.message_json(m))
        .unwrap_or(Value::Null)
}

/// Only the bot's own messages; `blocks` left out keep the old ones.
pub(crate) fn update(state: &mut State, args: &Args) -> Outcome {
    let channel = seen_in(state, args)?.id.clone();
    let ts = str_arg(args, "ts").ok_or(Refusal::code("message_not_found"))?;
    let message = state
        .workspace
        .message(&channel, &ts)
        .ok_or(Refusal::code("message_not_found"))?;
    if !message.from_bot {
        return Err(Refusal::code("cant_update_message"));
    }
    let content = Content::from_args(args, &state.rejected_block_types)?;
    let edited = state.workspace.next_ts();
    let shown = content.shown();
    let Some(message) = state.workspace.message_mut(&channel, &ts) else {
        return Err(Refusal::code("message_not_found"));
    };
    message.text = shown.clone();
    if content.blocks.is_some() {
        message.blocks = with_block_ids(content.blocks.clone());
    }
    message.edited = Some(edited);
    let thread_ts = message.thread_ts.clone();
    state.updates.push(Update {
        channel: channel.clone(),
        ts: ts.clone(),
        text: content.text.or(content.markdown_text),
        blocks: content.blocks,
    });
    let updated = stored_json(state, &channel, &ts);
    let mut answer = json!({ "channel": channel, "ts": ts, "text": shown, "message": updated });
    if let Some(thread_ts) = thread_ts {
        answer["thread_ts"] = json!(thread_ts);
    }
    Ok(answer)
}

/// `user` must see the conversation: anyone known in a public channel, a
/// member elsewhere (else `user_not_in_channel`).
pub(crate) fn post_ephemeral(state: &mut State, args: &Args) -> Outcome {
    let conversation = postable_in(state, args)?;
    let user = str_arg(args, "user").ok_or(Refusal::code("user_not_in_channel"))?;
    let sees = state.workspace.users.contains_key(&user) && conversation.visible_to(&user);
    if !sees {
        return Err(Refusal::code("user_not_in_channel"));
    }
    let channel = conversation.id.clone();
    let content = Content::from_args(args, &state.rejected_block_types)?;
    let message_ts = state.workspace.next_ts();
    state.ephemerals.push(Ephemeral {
        channel,
        user,
        message_ts: message_ts.clone(),
        thread_ts: str_arg(args, "thread_ts"),
        text: content.text.or(content.markdown_text),
        blocks: content.blocks,
    });
    Ok(json!({ "message_ts": message_ts }))
}

/// `https://fake-slack.test/archives/<channel>/p<ts without the dot>`, and
/// for a reply `?thread_ts=<parent>&cid=<channel>`.
pub(crate) fn get_permalink(state: &State, args: &Args) -> Outcome {
    let channel = seen_in(state, args)?;
    let ts = str_arg(args, "message_ts").ok_or(Refusal::code("message_not_found"))?;
    let message = state
        .workspace
        .message(&channel.id, &ts)
        .ok_or(Refusal::code("message_not_found"))?;
    let permalink = message.permalink();
    Ok(json!({ "channel": channel.id, "permalink": permalink }))
}
