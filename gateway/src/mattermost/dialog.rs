//! A Slack modal view as a Mattermost interactive dialog
//! (`POST /actions/dialogs/open`, actions.yaml; the elements in
//! Mattermost's "Interactive dialogs" documentation; the limits in
//! `server/public/model/integration_action.go`, `Dialog.IsValid`, which
//! counts bytes).
//!
//! | Slack view | dialog |
//! |---|---|
//! | `title.text` | `title`, cut to [`TITLE_MAX`] bytes |
//! | `callback_id` | `callback_id` |
//! | `private_metadata` | `state`: [`CallbackKey::dialog_state`] (signed) |
//! | `submit.text` | `submit_label` |
//! | `section`, `context`, `header` blocks | `introduction_text`, as Markdown |
//! | `input` with `plain_text_input` | an element: `display_name` the label (cut to [`DISPLAY_NAME_MAX`] bytes), `name` [`element_name`] of block and action ids, `type` `text` or `textarea` (`multiline`), `optional`, `min_length`, `max_length` (at most [`TEXTAREA_MAX`]), `placeholder` and `default` (`initial_value`; at most [`TEXT_MAX`] bytes for a text, [`TEXTAREA_MAX`] for a textarea), `help_text` the hint (cut to [`HELP_TEXT_MAX`] bytes) |
//!
//! The single-line input of request_secret's form (callback id
//! [`crate::secret_request::CALLBACK_ID`]) has `subtype: password`, so
//! the secret is masked as it is typed; a textarea (a secret file) has no
//! masked form. Any other block or element type is refused with
//! [`ChatError::InvalidBlocks`] naming it, and so is an element name over
//! [`NAME_MAX`] bytes or a default value over its limit (cutting either
//! would change what is submitted).

use serde_json::{Value, json};

use super::markup::{Names, mrkdwn_to_markdown, plain_to_markdown};
use super::sign::{CallbackKey, element_name};
use crate::chat::ChatError;

/// `DialogTitleMaxLength`.
pub const TITLE_MAX: usize = 24;
/// `DialogElementDisplayNameMaxLength`.
pub const DISPLAY_NAME_MAX: usize = 24;
/// `DialogElementNameMaxLength`.
pub const NAME_MAX: usize = 300;
/// `DialogElementHelpTextMaxLength`.
pub const HELP_TEXT_MAX: usize = 150;
/// `DialogElementTextMaxLength`: a text element's placeholder and default.
pub const TEXT_MAX: usize = 150;
/// `DialogElementTextareaMaxLength`: a textarea's placeholder, default and
/// input.
pub const TEXTAREA_MAX: usize = 3000;

fn invalid(why: String) -> ChatError {
    ChatError::InvalidBlocks(why)
}

/// `text` in at most `max` bytes, cut at a character with `…`.
fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let room = max.saturating_sub('…'.len_utf8());
    let mut end = room;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", text[..end].trim_end())
}

fn text_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key)?.get("text")?.as_str()
}

/// The body of `POST /actions/dialogs/open` for the Slack modal `view`:
/// `{trigger_id, url: "{callback_url}/dialogs", dialog}`.
pub fn dialog_request(
    trigger_id: &str,
    view: &Value,
    callback_url: &str,
    key: &CallbackKey,
) -> Result<Value, ChatError> {
    if let Some(kind) = view.get("type").and_then(Value::as_str)
        && kind != "modal"
    {
        return Err(invalid(format!("a view of type {kind:?}, not a modal")));
    }
    let title = text_of(view, "title")
        .filter(|t| !t.trim().is_empty())
        .ok_or_else(|| invalid("the view needs a title".into()))?;
    let callback_id = view
        .get("callback_id")
        .and_then(Value::as_str)
        .unwrap_or("");
    let metadata = view
        .get("private_metadata")
        .and_then(Value::as_str)
        .unwrap_or("");
    let masked = callback_id == crate::secret_request::CALLBACK_ID;
    let blocks = view
        .get("blocks")
        .and_then(Value::as_array)
        .ok_or_else(|| invalid("the view needs blocks".into()))?;
    let names = Names::new();
    let mut introduction: Vec<String> = Vec::new();
    let mut elements: Vec<Value> = Vec::new();
    for (i, block) in blocks.iter().enumerate() {
        let at = format!("blocks[{i}]");
        let kind = block.get("type").and_then(Value::as_str).unwrap_or("");
        let markdown = |v: &Value| match v.get("type").and_then(Value::as_str) {
            Some("mrkdwn") => v
                .get("text")
                .and_then(Value::as_str)
                .map(|t| mrkdwn_to_markdown(t, &names)),
            _ => v.get("text").and_then(Value::as_str).map(plain_to_markdown),
        };
        match kind {
            "input" => elements.push(element(block, masked, &at)?),
            "section" => introduction.extend(block.get("text").and_then(markdown)),
            "header" => introduction.extend(
                block
                    .get("text")
                    .and_then(markdown)
                    .map(|t| format!("#### {t}")),
            ),
            "context" => {
                let parts: Vec<String> = block
                    .get("elements")
                    .and_then(Value::as_array)
                    .map(|e| e.iter().filter_map(markdown).collect())
                    .unwrap_or_default();
                if !parts.is_empty() {
                    introduction.push(parts.join(" · "));
                }
            }
            other => {
                return Err(invalid(format!(
                    "{at}: a Mattermost dialog has no counterpart of a {other:?} block"
                )));
            }
        }
    }
    let mut dialog = json!({
        "callback_id": callback_id,
        "title": cut(title.trim(), TITLE_MAX),
        "elements": elements,
        "state": key.dialog_state(callback_id, metadata),
    });
    if !introduction.is_empty() {
        dialog["introduction_text"] = json!(introduction.join("\n\n"));
    }
    if let Some(submit) = text_of(view, "submit") {
        dialog["submit_label"] = json!(submit);
    }
    Ok(json!({
        "trigger_id": trigger_id,
        "url": format!("{callback_url}/dialogs"),
        "dialog": dialog,
    }))
}

/// One `input` block as a dialog element.
fn element(block: &Value, masked: bool, at: &str) -> Result<Value, ChatError> {
    let input = block
        .get("element")
        .ok_or_else(|| invalid(format!("{at}: an input block needs an element")))?;
    let kind = input.get("type").and_then(Value::as_str).unwrap_or("");
    if kind != "plain_text_input" {
        return Err(invalid(format!(
            "{at}: Mattermost's translation has no dialog element for a {kind:?} input"
        )));
    }
    let block_id = block.get("block_id").and_then(Value::as_str);
    let action_id = input.get("action_id").and_then(Value::as_str);
    let (Some(block_id), Some(action_id)) = (block_id, action_id) else {
        return Err(invalid(format!(
            "{at}: an input needs a block_id and an action_id (they name its value)"
        )));
    };
    let name = element_name(block_id, action_id);
    if name.len() > NAME_MAX {
        return Err(invalid(format!(
            "{at}: the element's name is {} bytes; Mattermost takes at most {NAME_MAX}",
            name.len()
        )));
    }
    let label = text_of(block, "label").unwrap_or(block_id);
    let multiline = input
        .get("multiline")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let limit = if multiline { TEXTAREA_MAX } else { TEXT_MAX };
    let mut element = json!({
        "display_name": cut(label, DISPLAY_NAME_MAX),
        "name": name,
        "type": if multiline { "textarea" } else { "text" },
        "optional": block.get("optional").and_then(Value::as_bool).unwrap_or(false),
    });
    if masked && !multiline {
        element["subtype"] = json!("password");
    }
    let max_length = input
        .get("max_length")
        .and_then(Value::as_u64)
        .map(|m| m.min(TEXTAREA_MAX as u64));
    if let Some(max) = max_length {
        element["max_length"] = json!(max);
    }
    if let Some(min) = input.get("min_length").and_then(Value::as_u64) {
        element["min_length"] = json!(max_length.map_or(min, |max| min.min(max)));
    }
    if let Some(placeholder) = text_of(input, "placeholder") {
        element["placeholder"] = json!(cut(placeholder, limit));
    }
    if let Some(default) = input.get("initial_value").and_then(Value::as_str) {
        if default.len() > limit {
            return Err(invalid(format!(
                "{at}: the initial value is {} bytes; a Mattermost {} takes at most {limit}",
                default.len(),
                if multiline { "textarea" } else { "text" }
            )));
        }
        element["default"] = json!(default);
    }
    if let Some(hint) = text_of(block, "hint") {
        element["help_text"] = json!(cut(hint, HELP_TEXT_MAX));
    }
    Ok(element)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret_view(multiline: bool) -> Value {
        json!({
            "type": "modal",
            "callback_id": crate::secret_request::CALLBACK_ID,
            "private_metadata": "req-1",
            "title": {"type": "plain_text", "text": "Set a secret"},
            "submit": {"type": "plain_text", "text": "Save"},
            "close": {"type": "plain_text", "text": "Cancel"},
            "blocks": [
                {"type": "input", "block_id": "secret",
                 "label": {"type": "plain_text", "text": "STRIPE_API_KEY"},
                 "element": {"type": "plain_text_input", "action_id": "value",
                             "multiline": multiline, "min_length": 1, "max_length": 3000}},
                {"type": "context", "elements": [{"type": "mrkdwn", "text": "Only *you* see this form."}]},
            ],
        })
    }

    #[test]
    fn the_secret_form_becomes_a_masked_dialog() {
        let key = CallbackKey::from_token("t");
        let request = dialog_request(
            "trig",
            &secret_view(false),
            "https://hooks.example/mm",
            &key,
        )
        .unwrap();
        assert_eq!(
            request,
            json!({
                "trigger_id": "trig",
                "url": "https://hooks.example/mm/dialogs",
                "dialog": {
                    "callback_id": "calvin_secret",
                    "title": "Set a secret",
                    "introduction_text": "Only **you** see this form.",
                    "submit_label": "Save",
                    "state": key.dialog_state("calvin_secret", "req-1"),
                    "elements": [{
                        "display_name": "STRIPE_API_KEY",
                        "name": "secret:value",
                        "type": "text",
                        "subtype": "password",
                        "optional": false,
                        "min_length": 1,
                        "max_length": 3000,
                    }],
                },
            })
        );
        let file = dialog_request("t", &secret_view(true), "https://h.example", &key).unwrap();
        let element = &file["dialog"]["elements"][0];
        assert_eq!(element["type"], "textarea");
        assert!(element.get("subtype").is_none());
    }

    #[test]
    fn limits_are_kept() {
        let key = CallbackKey::from_token("t");
        let mut view = secret_view(false);
        view["callback_id"] = json!("other");
        view["title"]["text"] = json!("A title far longer than twenty-four bytes");
        view["blocks"][0]["label"]["text"] = json!("ÉÉÉÉÉÉÉÉÉÉÉÉÉÉÉÉ");
        view["blocks"][0]["hint"] = json!({"type": "plain_text", "text": "h".repeat(200)});
        view["blocks"][0]["element"]["max_length"] = json!(10_000);
        view["blocks"][0]["element"]["placeholder"] =
            json!({"type": "plain_text", "text": "p".repeat(200)});
        let d = dialog_request("t", &view, "https://h.example", &key).unwrap();
        let dialog = &d["dialog"];
        let title = dialog["title"].as_str().unwrap();
        assert!(title.len() <= TITLE_MAX && title.ends_with('…'), "{title}");
        let element = &dialog["elements"][0];
        assert!(
            element.get("subtype").is_none(),
            "only the secret form is masked"
        );
        let display = element["display_name"].as_str().unwrap();
        assert!(
            display.len() <= DISPLAY_NAME_MAX && display.starts_with("ÉÉÉ"),
            "{display}"
        );
        assert!(element["help_text"].as_str().unwrap().len() <= HELP_TEXT_MAX);
        assert!(element["placeholder"].as_str().unwrap().len() <= TEXT_MAX);
        assert_eq!(element["max_length"], 3000);

        view["blocks"][0]["element"]["initial_value"] = json!("v".repeat(151));
        let err = dialog_request("t", &view, "https://h.example", &key).unwrap_err();
        assert!(
            err.to_string().contains("initial value is 151 bytes"),
            "{err}"
        );
        view["blocks"][0]["element"]["initial_value"] = json!("v");
        view["blocks"][0]["block_id"] = json!("b".repeat(300));
        let err = dialog_request("t", &view, "https://h.example", &key).unwrap_err();
        assert!(err.to_string().contains("at most 300"), "{err}");
    }

    #[test]
    fn other_views_are_refused_by_name() {
        let key = CallbackKey::from_token("t");
        let mut view = secret_view(false);
        view["blocks"][0]["element"]["type"] = json!("static_select");
        let err = dialog_request("t", &view, "https://h.example", &key).unwrap_err();
        assert!(err.to_string().contains("\"static_select\" input"), "{err}");
        let mut view = secret_view(false);
        view["blocks"][1] = json!({"type": "actions", "elements": []});
        let err = dialog_request("t", &view, "https://h.example", &key).unwrap_err();
        assert!(err.to_string().contains("\"actions\" block"), "{err}");
        let mut view = secret_view(false);
        view["type"] = json!("home");
        assert!(dialog_request("t", &view, "https://h.example", &key).is_err());
        let mut view = secret_view(false);
        view["title"]["text"] = json!(" ");
        assert!(dialog_request("t", &view, "https://h.example", &key).is_err());
    }
}
