//! `POST /actions/dialogs/open` (`actions.yaml`): `{trigger_id, url,
//! dialog}`.
//!
//! The trigger id must be one this fake issued in a click
//! ([`FakeMattermost::click`](super::FakeMattermost::click)), within the
//! trigger TTL (`interactive_message.decode_trigger_id.expired`; an id it
//! never issued: `...verify_signature_failed`), and — stricter than
//! Mattermost, whose signed trigger ids can be replayed until they expire —
//! only once (`fake_mattermost.trigger_id.used`), since a second dialog
//! for one click is a bug worth seeing.
//!
//! The dialog is checked as `OpenDialogRequest.IsValid` in
//! `server/public/model/integration_action.go` checks it: a `url`; a
//! `title` of 1..=24 bytes; elements with unique names, each with a
//! `display_name` (1..=24), a `name` (1..=300), `help_text` up to 150,
//! `min_length` ≤ `max_length`, and a `type` among `text`, `textarea`,
//! `select`, `bool`, `radio`, `date`, `datetime` (text and textarea: a
//! `subtype` among "", text, email, number, tel, url, password;
//! `default`/`placeholder` up to 150 for text, 3000 for textarea and
//! select; a select or radio's `default` among its options). Mattermost
//! only logs an invalid dialog and opens it anyway; the fake refuses it
//! with 400 `fake_mattermost.dialog.invalid`, naming what is wrong.
//!
//! An opened dialog is recorded and sent to the user as `open_dialog`.
//! Answers `{"status": "OK"}`.

use std::collections::HashSet;
use std::time::Instant;

use http::StatusCode;
use serde_json::{Value, json};

use super::answers::{AppError, Outcome};
use super::records::OpenedDialog;
use super::state::State;

const TITLE_MAX: usize = 24;
const DISPLAY_NAME_MAX: usize = 24;
const NAME_MAX: usize = 300;
const HELP_TEXT_MAX: usize = 150;
const TEXT_MAX: usize = 150;
const TEXTAREA_MAX: usize = 3000;
const TEXT_SUBTYPES: [&str; 7] = ["", "text", "email", "number", "tel", "url", "password"];

fn text<'a>(value: &'a Value, name: &str) -> &'a str {
    value.get(name).and_then(Value::as_str).unwrap_or_default()
}

fn check_max(problems: &mut Vec<String>, element: &str, field: &str, value: &str, max: usize) {
    if value.len() > max {
        problems.push(format!(
            "{element:?}: {field} cannot be longer than {max} characters, got {}",
            value.len()
        ));
    }
}

fn in_options(element: &Value, default: &str) -> bool {
    let options = element.get("options").and_then(Value::as_array);
    default.is_empty()
        || options
            .into_iter()
            .flatten()
            .any(|o| text(o, "value") == default)
}

fn check_element(element: &Value, problems: &mut Vec<String>) {
    let name = text(element, "name");
    let display_name = text(element, "display_name");
    if display_name.is_empty() {
        problems.push(format!("{name:?}: DisplayName cannot be empty"));
    }
    if name.is_empty() {
        problems.push("an element's Name cannot be empty".into());
    }
    check_max(
        problems,
        name,
        "DisplayName",
        display_name,
        DISPLAY_NAME_MAX,
    );
    check_max(problems, name, "Name", name, NAME_MAX);
    check_max(
        problems,
        name,
        "HelpText",
        text(element, "help_text"),
        HELP_TEXT_MAX,
    );
    let number = |field: &str| element.get(field).and_then(Value::as_i64).unwrap_or(0);
    if number("min_length") < 0 || number("min_length") > number("max_length") {
        problems.push(format!(
            "{name:?}: min_length must be within 0..=max_length"
        ));
    }
    let (default, placeholder) = (text(element, "default"), text(element, "placeholder"));
    let subtype = text(element, "subtype");
    let kind = text(element, "type");
    if element.get("multiselect").and_then(Value::as_bool) == Some(true) && kind != "select" {
        problems.push(format!(
            "{name:?}: multiselect can only be used with select elements"
        ));
    }
    match kind {
        "text" | "textarea" => {
            let max = if kind == "text" {
                TEXT_MAX
            } else {
                TEXTAREA_MAX
            };
            check_max(problems, name, "Default", default, max);
            check_max(problems, name, "Placeholder", placeholder, max);
            if !TEXT_SUBTYPES.contains(&subtype) {
                problems.push(format!("{name:?}: invalid subtype {subtype:?}"));
            }
        }
        "select" => {
            check_max(problems, name, "Default", default, TEXTAREA_MAX);
            check_max(problems, name, "Placeholder", placeholder, TEXTAREA_MAX);
            let source = text(element, "data_source");
            if !["", "users", "channels", "dynamic"].contains(&source) {
                problems.push(format!("{name:?}: invalid data source {source:?}"));
            }
            if source.is_empty()
                && !element
                    .get("multiselect")
                    .and_then(Value::as_bool)
                    .unwrap_or(false)
                && !in_options(element, default)
            {
                problems.push(format!(
                    "{name:?}: default value {default:?} doesn't exist in options"
                ));
            }
        }
        "bool" => {
            if !["", "true", "false"].contains(&default) {
                problems.push(format!("{name:?}: invalid default of bool"));
            }
            check_max(problems, name, "Placeholder", placeholder, TEXT_MAX);
        }
        "radio" => {
            if !in_options(element, default) {
                problems.push(format!(
                    "{name:?}: default value {default:?} doesn't exist in options"
                ));
            }
        }
        "date" | "datetime" => check_max(problems, name, "Default", default, TEXT_MAX),
        other => problems.push(format!("{name:?}: invalid element type: {other:?}")),
    }
}

/// What `OpenDialogRequest.IsValid` would say about the request.
pub(crate) fn problems(url: &str, dialog: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    if url.is_empty() {
        problems.push("empty URL".into());
    }
    let title = text(dialog, "title");
    if title.is_empty() || title.len() > TITLE_MAX {
        problems.push(format!("invalid dialog title {title:?}"));
    }
    let mut names = HashSet::new();
    let elements = dialog.get("elements").and_then(Value::as_array);
    for element in elements.into_iter().flatten() {
        if !names.insert(text(element, "name")) {
            problems.push(format!(
                "duplicate dialog element {:?}",
                text(element, "name")
            ));
        }
        check_element(element, &mut problems);
    }
    problems
}

fn trigger_error(id: &str, message: &str) -> AppError {
    AppError::bad_request(id, message)
}

pub(crate) fn open(state: &mut State, body: &Value) -> Outcome {
    let trigger_id = text(body, "trigger_id").to_string();
    let url = text(body, "url").to_string();
    let dialog = body.get("dialog").cloned().unwrap_or(Value::Null);
    if trigger_id.is_empty() {
        return Err(AppError::invalid_body("trigger_id"));
    }
    let ttl = state.trigger_ttl;
    let trigger = state.triggers.get_mut(&trigger_id).ok_or_else(|| {
        trigger_error(
            "interactive_message.decode_trigger_id.verify_signature_failed",
            "Failed to verify signature of trigger ID for interactive dialog.",
        )
    })?;
    if trigger.issued.elapsed() > ttl {
        let message = format!(
            "Trigger ID for interactive dialog is expired. Maximum time for trigger ID is {ttl:?}."
        );
        return Err(trigger_error(
            "interactive_message.decode_trigger_id.expired",
            &message,
        ));
    }
    if trigger.used {
        return Err(trigger_error(
            "fake_mattermost.trigger_id.used",
            "This trigger ID already opened a dialog.",
        ));
    }
    let problems = problems(&url, &dialog);
    if !problems.is_empty() {
        let error =
            AppError::bad_request("fake_mattermost.dialog.invalid", "The dialog is not valid.");
        return Err(error.detail(problems.join("; ")));
    }
    trigger.used = true;
    let (user_id, channel_id) = (trigger.user.clone(), trigger.channel_id.clone());
    state.dialogs.push(OpenedDialog {
        trigger_id: trigger_id.clone(),
        url: url.clone(),
        dialog: dialog.clone(),
        user_id: user_id.clone(),
        channel_id,
        opened_at: Instant::now(),
        open: true,
    });
    let request = json!({ "trigger_id": trigger_id, "url": url, "dialog": dialog });
    state.publish_to_user(
        &user_id,
        "open_dialog",
        json!({ "dialog": request.to_string() }),
    );
    Ok((StatusCode::OK, json!({ "status": "OK" })))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn element(kind: &str) -> Value {
        json!({ "display_name": "Reason", "name": "reason", "type": kind })
    }

    #[test]
    fn a_good_dialog_has_no_problems() {
        let dialog = json!({ "title": "Why deploy?", "elements": [
            element("text"), {"display_name": "Area", "name": "area", "type": "textarea", "max_length": 3000},
            {"display_name": "Env", "name": "env", "type": "select", "default": "prod",
             "options": [{"text": "Prod", "value": "prod"}]},
        ]});
        assert_eq!(problems("http://x/", &dialog), Vec::<String>::new());
    }

    #[test]
    fn mattermosts_rules_are_checked() {
        let long_title = json!({ "title": "x".repeat(25), "elements": [] });
        assert_eq!(problems("http://x/", &long_title).len(), 1);
        let cases = [
            json!({ "display_name": "", "name": "a", "type": "text" }),
            json!({ "display_name": "A", "name": "a", "type": "slider" }),
            json!({ "display_name": "A", "name": "a", "type": "text", "subtype": "color" }),
            json!({ "display_name": "A", "name": "a", "type": "text", "min_length": 5, "max_length": 2 }),
            json!({ "display_name": "A", "name": "a", "type": "text", "placeholder": "p".repeat(151) }),
            json!({ "display_name": "A", "name": "a", "type": "radio", "default": "z", "options": [] }),
            json!({ "display_name": "A", "name": "a", "type": "bool", "default": "yes" }),
        ];
        for case in cases {
            let dialog = json!({ "title": "T", "elements": [case] });
            assert_eq!(problems("http://x/", &dialog).len(), 1, "{case}");
        }
        let twice = json!({ "title": "T", "elements": [element("text"), element("text")] });
        assert_eq!(problems("http://x/", &twice).len(), 1);
        assert_eq!(problems("", &json!({ "title": "T" })).len(), 1);
    }
}
