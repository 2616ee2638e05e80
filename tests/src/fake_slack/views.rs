//! views.open: a trigger id this fake issued in an interaction payload,
//! exchanged once within its time to live, for a modal view.

use std::time::Instant;

use serde_json::{Map, Value, json};

use super::answers::{Outcome, Refusal};
use super::http_forms::{Args, json_arg, str_arg};
use super::ids::{is_trigger_shaped, random_u64, slack_id, unix_now};
use super::records::OpenedView;
use super::state::State;
use super::workspace::{APP_ID, BOT_ID, TEAM_ID};

/// A view's largest serialised size (`view_too_large`).
const MAX_VIEW_BYTES: usize = 250 * 1024;
/// A modal holds at most this many blocks.
const MAX_VIEW_BLOCKS: usize = 100;

/// A view refused as Slack refuses it: `invalid_arguments` with a
/// JSON pointer into `view`.
fn invalid_view(message: &str, pointer: &str) -> Refusal {
    Refusal::with(
        "invalid_arguments",
        format!("{message} [json-pointer:/view{pointer}]"),
    )
}

pub(crate) fn open(state: &mut State, args: &Args) -> Outcome {
    let trigger_id = str_arg(args, "trigger_id")
        .or_else(|| str_arg(args, "interactivity_pointer"))
        .ok_or_else(|| Refusal::missing("trigger_id"))?;
    if !is_trigger_shaped(&trigger_id) {
        return Err(Refusal::code("invalid_trigger_id"));
    }
    let trigger = state
        .triggers
        .get(&trigger_id)
        .ok_or(Refusal::code("invalid_trigger_id"))?;
    if trigger.exchanged {
        return Err(Refusal::code("exchanged_trigger_id"));
    }
    if trigger.issued.elapsed() > state.trigger_ttl {
        return Err(Refusal::code("expired_trigger_id"));
    }
    let user = trigger.user.clone();
    let view = modal(args)?;

    let id = slack_id("V");
    let mut stateful = view;
    let defaults = [
        ("private_metadata", json!("")),
        ("callback_id", json!("")),
        ("external_id", json!("")),
        ("clear_on_close", json!(false)),
        ("notify_on_close", json!(false)),
        ("close", Value::Null),
        ("submit", Value::Null),
    ];
    for (field, value) in defaults {
        stateful.entry(field).or_insert(value);
    }
    let now = unix_now();
    let fields = [
        ("id", json!(id)),
        ("team_id", json!(TEAM_ID)),
        ("state", json!({ "values": {} })),
        (
            "hash",
            json!(format!(
                "{}.{:08}",
                now.as_secs(),
                random_u64() % 100_000_000
            )),
        ),
        ("previous_view_id", Value::Null),
        ("root_view_id", json!(id)),
        ("app_id", json!(APP_ID)),
        ("app_installed_team_id", json!(TEAM_ID)),
        ("bot_id", json!(BOT_ID)),
    ];
    stateful.extend(fields.map(|(k, v)| (k.to_string(), v)));
    let stateful = Value::Object(stateful);

    if let Some(trigger) = state.triggers.get_mut(&trigger_id) {
        trigger.exchanged = true;
    }
    state.views.push(OpenedView {
        id,
        user,
        trigger_id,
        view: stateful.clone(),
        opened_at: Instant::now(),
    });
    Ok(json!({ "view": stateful }))
}

/// `view`: a JSON object (or its text) of type `modal` with a plain-text
/// `title` and `blocks`, each with a `type`.
fn modal(args: &Args) -> Result<Map<String, Value>, Refusal> {
    let view = match json_arg(args, "view") {
        None => return Err(Refusal::missing("view")),
        Some(Err(_)) => return Err(invalid_view("invalid json", "")),
        Some(Ok(Value::Object(view))) => view,
        Some(Ok(_)) => return Err(invalid_view("must be an object", "")),
    };
    if serde_json::to_vec(&view).map_or(0, |bytes| bytes.len()) > MAX_VIEW_BYTES {
        return Err(Refusal::code("view_too_large"));
    }
    match view.get("type").and_then(Value::as_str) {
        None => return Err(invalid_view("missing required field: type", "/type")),
        Some("modal") => {}
        Some(_) => return Err(invalid_view("must be one of: modal", "/type")),
    }
    let title = view
        .get("title")
        .ok_or_else(|| invalid_view("missing required field: title", "/title"))?;
    let plain = title.get("type").and_then(Value::as_str) == Some("plain_text");
    if !plain || !title.get("text").is_some_and(Value::is_string) {
        return Err(invalid_view("must be a plain_text object", "/title"));
    }
    let blocks = view
        .get("blocks")
        .ok_or_else(|| invalid_view("missing required field: blocks", "/blocks"))?
        .as_array()
        .ok_or_else(|| invalid_view("must be an array", "/blocks"))?;
    if blocks.len() > MAX_VIEW_BLOCKS {
        return Err(invalid_view("must have at most 100 items", "/blocks"));
    }
    for (i, block) in blocks.iter().enumerate() {
        if block.get("type").and_then(Value::as_str).is_none() {
            let pointer = format!("/blocks/{i}");
            return Err(invalid_view("missing required field: type", &pointer));
        }
    }
    Ok(view)
}
