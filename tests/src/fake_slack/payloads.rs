//! The payloads Slack puts in Socket Mode envelopes, built from the
//! workspace: an `event_callback` around a `message` or `reaction_added`
//! event, a `block_actions` click on a stored message's button, a
//! `view_submission` of an opened modal. Shapes from the reference
//! (`events/*.json`) and slack-morphism's `SlackPushEventCallback` and
//! `SlackInteractionEvent`.

use serde_json::{Map, Value, json};

use super::ids::{now_ts, random_u64, slack_id, unix_now, uuid};
use super::state::State;
use super::workspace::{APP_ID, BOT_USER_ID, Conversation, Kind, TEAM_DOMAIN, TEAM_ID, User};

/// The legacy verification token in payloads (Socket Mode apps ignore it).
const VERIFICATION_TOKEN: &str = "fakeVerificationToken0001";

/// Every `event_callback` payload: the event, a fresh `event_id`, and the
/// bot's authorization.
fn event_callback(event: Value) -> Value {
    json!({
        "token": VERIFICATION_TOKEN,
        "team_id": TEAM_ID,
        "context_team_id": TEAM_ID,
        "context_enterprise_id": null,
        "api_app_id": APP_ID,
        "event": event,
        "type": "event_callback",
        "event_id": slack_id("Ev"),
        "event_time": unix_now().as_secs(),
        "authorizations": [{
            "enterprise_id": null,
            "team_id": TEAM_ID,
            "user_id": BOT_USER_ID,
            "is_bot": true,
            "is_enterprise_install": false,
        }],
        "is_ext_shared_channel": false,
        "event_context": format!("4-{:016x}", random_u64()),
    })
}

fn known_user<'a>(state: &'a State, user: &str) -> Result<&'a User, String> {
    state
        .workspace
        .users
        .get(user)
        .ok_or_else(|| format!("no user {user}: add_user it first"))
}

/// The conversation, which `user` must be able to see.
fn seen_by<'a>(state: &'a State, user: &str, channel: &str) -> Result<&'a Conversation, String> {
    let conversation = state
        .workspace
        .conversations
        .get(channel)
        .ok_or_else(|| format!("no conversation {channel}"))?;
    let sees = conversation.visible_to(user);
    if !sees {
        return Err(format!("{user} is not in {channel}"));
    }
    Ok(conversation)
}

/// `user` writes `text` into `channel` (a conversation the bot is in, as
/// Slack only sends those): the message is stored, and the payload of its
/// `message` event is answered with its `ts`.
pub(crate) fn message_event(
    state: &mut State,
    channel: &str,
    user: &str,
    text: &str,
    thread_ts: Option<&str>,
) -> Result<(String, Value), String> {
    known_user(state, user)?;
    let conversation = seen_by(state, user, channel)?;
    if !conversation.bot_member {
        return Err(format!(
            "the bot is not in {channel}: Slack sends it no events"
        ));
    }
    let channel_type = conversation.channel_type();
    let ts = state.workspace.post(channel, user, text, None, thread_ts);
    let mut event = json!({
        "type": "message",
        "channel": channel,
        "user": user,
        "text": text,
        "ts": ts,
        "event_ts": ts,
        "channel_type": channel_type,
        "team": TEAM_ID,
        "client_msg_id": uuid(),
    });
    let stored = state.workspace.message(channel, &ts);
    if let Some(parent_ts) = stored.and_then(|m| m.thread_ts.clone()) {
        if let Some(parent) = state.workspace.message(channel, &parent_ts) {
            event["parent_user_id"] = json!(parent.user);
        }
        event["thread_ts"] = json!(parent_ts);
    }
    Ok((ts, event_callback(event)))
}

/// `user` reacts with `reaction` to a stored message: the reaction is
/// stored on it (once per person and name), and the payload of its
/// `reaction_added` event answered.
pub(crate) fn reaction_event(
    state: &mut State,
    user: &str,
    reaction: &str,
    channel: &str,
    message_ts: &str,
) -> Result<Value, String> {
    known_user(state, user)?;
    seen_by(state, user, channel)?;
    let message = state
        .workspace
        .message_mut(channel, message_ts)
        .ok_or_else(|| format!("no message {message_ts} in {channel}"))?;
    message.add_reaction(reaction, user);
    Ok(event_callback(json!({
        "type": "reaction_added",
        "user": user,
        "reaction": reaction,
        "item_user": message.user,
        "item": { "type": "message", "channel": channel, "ts": message_ts },
        "event_ts": now_ts(),
    })))
}

fn user_json(user: &User) -> Value {
    json!({ "id": user.id, "username": user.name, "name": user.name, "team_id": TEAM_ID })
}

fn team_json() -> Value {
    json!({ "id": TEAM_ID, "domain": TEAM_DOMAIN })
}

/// The button with `action_id` in a message's blocks (in an `actions`
/// block or as a section's accessory), with its block's id.
fn find_button<'a>(blocks: &'a Value, action_id: &str) -> Option<(&'a Value, &'a Value)> {
    blocks.as_array()?.iter().find_map(|block| {
        let elements = block.get("elements").and_then(Value::as_array);
        let accessory = block.get("accessory");
        elements
            .into_iter()
            .flatten()
            .chain(accessory)
            .find(|e| {
                e.get("type").and_then(Value::as_str) == Some("button")
                    && e.get("action_id").and_then(Value::as_str) == Some(action_id)
            })
            .map(|button| (block, button))
    })
}

/// `user` clicks the button `action_id` of a stored message: a
/// `block_actions` payload with a fresh trigger id.
pub(crate) fn block_actions(
    state: &mut State,
    base_url: &str,
    user: &str,
    channel: &str,
    message_ts: &str,
    action_id: &str,
) -> Result<Value, String> {
    let clicker = user_json(known_user(state, user)?);
    let conversation = seen_by(state, user, channel)?;
    let channel_name = match conversation.kind {
        Kind::Im => "directmessage".to_string(),
        _ => conversation.name.clone(),
    };
    let message = state
        .workspace
        .message(channel, message_ts)
        .ok_or_else(|| format!("no message {message_ts} in {channel}"))?;
    let blocks = message.blocks.clone().unwrap_or(Value::Null);
    let (block, button) = find_button(&blocks, action_id)
        .ok_or_else(|| format!("no button {action_id:?} in message {message_ts}"))?;
    let mut action = json!({
        "type": "button",
        "action_id": action_id,
        "block_id": block.get("block_id").cloned().unwrap_or(Value::Null),
        "text": button.get("text").cloned().unwrap_or(Value::Null),
        "action_ts": now_ts(),
    });
    for field in ["value", "style", "url"] {
        if let Some(value) = button.get(field) {
            action[field] = value.clone();
        }
    }
    let message_json = state.workspace.message_json(message);
    let trigger_id = state.issue_trigger(user);
    let response_url = format!("{base_url}/actions/{}", state.workspace.next_serial());
    Ok(json!({
        "type": "block_actions",
        "user": clicker,
        "api_app_id": APP_ID,
        "token": VERIFICATION_TOKEN,
        "container": {
            "type": "message",
            "message_ts": message_ts,
            "channel_id": channel,
            "is_ephemeral": false,
        },
        "trigger_id": trigger_id,
        "team": team_json(),
        "enterprise": null,
        "is_enterprise_install": false,
        "channel": { "id": channel, "name": channel_name },
        "message": message_json,
        "state": { "values": {} },
        "response_url": response_url,
        "actions": [action],
    }))
}

/// `user` submits the modal `view_id` this fake opened for them, with
/// `values` typed into its `plain_text_input`s.
pub(crate) fn view_submission(
    state: &mut State,
    user: &str,
    view_id: &str,
    values: &[(&str, &str, &str)],
) -> Result<Value, String> {
    let submitter = user_json(known_user(state, user)?);
    let opened = state
        .views
        .iter()
        .find(|v| v.id == view_id)
        .ok_or_else(|| format!("no view {view_id} was opened"))?;
    if opened.user != user {
        return Err(format!(
            "view {view_id} was opened for {}, not {user}",
            opened.user
        ));
    }
    let mut view = opened.view.clone();
    let blocks = view.get("blocks").cloned().unwrap_or(Value::Null);
    let mut state_values: Map<String, Value> = Map::new();
    for (block_id, action_id, value) in values {
        let element = input_element(&blocks, block_id, action_id)
            .ok_or_else(|| format!("no input {block_id}/{action_id} in view {view_id}"))?;
        let kind = element.get("type").and_then(Value::as_str);
        if kind != Some("plain_text_input") {
            return Err(format!("{block_id}/{action_id} is not a plain_text_input"));
        }
        let block = state_values
            .entry(block_id.to_string())
            .or_insert_with(|| json!({}));
        block[*action_id] = json!({ "type": "plain_text_input", "value": value });
    }
    view["state"] = json!({ "values": state_values });
    let trigger_id = state.issue_trigger(user);
    Ok(json!({
        "type": "view_submission",
        "team": team_json(),
        "user": submitter,
        "api_app_id": APP_ID,
        "token": VERIFICATION_TOKEN,
        "trigger_id": trigger_id,
        "view": view,
        "response_urls": [],
        "enterprise": null,
        "is_enterprise_install": false,
    }))
}

/// The element `action_id` of the input block `block_id`.
fn input_element<'a>(blocks: &'a Value, block_id: &str, action_id: &str) -> Option<&'a Value> {
    let block = blocks.as_array()?.iter().find(|b| {
        b.get("type").and_then(Value::as_str) == Some("input")
            && b.get("block_id").and_then(Value::as_str) == Some(block_id)
    })?;
    let element = block.get("element")?;
    (element.get("action_id").and_then(Value::as_str) == Some(action_id)).then_some(element)
}
