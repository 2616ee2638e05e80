//! The fake as the Mattermost server calling an integration: a click on a
//! message button (`DoPostActionWithCookie` in
//! `server/channels/app/integration_action.go`) and a dialog submission
//! (`SubmitInteractiveDialog`), each a JSON POST over plain HTTP/1.1.
//!
//! A click finds the action in `props.attachments[].actions[]` (by `id`, as
//! Mattermost does, or by `name`, for the tests' convenience), issues a
//! trigger id, and POSTs `{user_id, user_name, channel_id, channel_name,
//! team_id, team_domain, post_id, trigger_id, type, data_source, context}`
//! (`PostActionIntegrationRequest`) to the action's `integration.url`. Any
//! status but 200 is a failure, and so is a clicker who cannot read the
//! channel. Of the JSON answer
//! (`PostActionIntegrationResponse`) the fake applies, as Mattermost does:
//! `update`, which replaces the post's `message` and `file_ids` (a missing
//! one becomes empty) and its `props` unless `update.props` is missing
//! (`from_webhook`, `override_username`, `override_icon_url` are kept as
//! they were), recorded and sent as `post_edited`; and `ephemeral_text`,
//! an ephemeral post to the clicker in the post's thread.
//!
//! A submission goes to the URL of the user's last open dialog:
//! `{type: "dialog_submission", callback_id, state, user_id, channel_id,
//! team_id, submission, cancelled}` (`SubmitDialogRequest`). An answer
//! with `errors` or `error` keeps the dialog open; any other closes it. A
//! cancel is sent only when the dialog asked for it (`notify_on_cancel`),
//! as the webapp does; it closes the dialog either way.

use bytes::Bytes;
use http::{Request, header};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Map, Value, json};

use super::posts::send_ephemeral;
use super::records::{Callback, Source, Update};
use super::state::{State, Trigger};
use super::{ids, model};

/// A click about to be sent.
pub(crate) struct Click {
    pub url: String,
    pub payload: Value,
    post_id: String,
    root_id: String,
    channel_id: String,
    user_id: String,
}

/// The request for a click, with a freshly issued trigger id.
pub(crate) fn prepare_click(
    state: &mut State,
    post_id: &str,
    action: &str,
    user_id: &str,
) -> Result<Click, String> {
    let post = state
        .post(post_id)
        .ok_or_else(|| format!("no post {post_id}"))?;
    let found = post.actions().into_iter().find(|a| {
        a.get("id").and_then(Value::as_str) == Some(action)
            || a.get("name").and_then(Value::as_str) == Some(action)
    });
    let found = found.ok_or_else(|| format!("post {post_id} has no action {action:?}"))?;
    let integration = found
        .get("integration")
        .ok_or_else(|| format!("action {action:?} has no integration"))?;
    let url = integration
        .get("url")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let context = integration.get("context").cloned();
    let kind = found
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let data_source = found
        .get("data_source")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let channel = state
        .channel(&post.channel_id)
        .ok_or("the post's channel is gone")?;
    let user = state
        .user(user_id)
        .ok_or_else(|| format!("no user {user_id}"))?;
    // `DoPostAction` wants `read_channel` of the clicker.
    if !state.can_read(channel, user_id) {
        return Err(format!(
            "{} cannot read the channel of post {post_id}",
            user.username
        ));
    }
    let team_domain = if channel.team_id.is_empty() {
        String::new()
    } else {
        state.team.name.clone()
    };
    let root_id = if post.root_id.is_empty() {
        post.id.clone()
    } else {
        post.root_id.clone()
    };
    let trigger_id = ids::trigger_id(user_id);
    let mut payload = json!({
        "user_id": user_id, "user_name": user.username, "channel_id": channel.id,
        "channel_name": channel.name, "team_id": channel.team_id, "team_domain": team_domain,
        "post_id": post_id, "trigger_id": trigger_id, "type": kind, "data_source": data_source,
    });
    if let Some(context) = context.filter(|c| !c.is_null()) {
        payload["context"] = context;
    }
    let click = Click {
        url,
        payload,
        post_id: post_id.to_string(),
        root_id,
        channel_id: channel.id.clone(),
        user_id: user_id.to_string(),
    };
    let trigger = Trigger {
        user: user_id.to_string(),
        channel_id: click.channel_id.clone(),
        issued: std::time::Instant::now(),
        used: false,
    };
    state.triggers.insert(trigger_id, trigger);
    Ok(click)
}

/// Applies an integration's answer to a click.
pub(crate) fn apply_click_answer(state: &mut State, click: &Click, answer: &Value) {
    if let Some(update) = answer.get("update").filter(|u| u.is_object()) {
        apply_update(state, &click.post_id, update);
    }
    let text = answer
        .get("ephemeral_text")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if !text.is_empty() {
        let (user, channel, root) = (&click.user_id, &click.channel_id, &click.root_id);
        send_ephemeral(state, user, user, channel, root, text, Source::Callback);
    }
}

const RETAINED_PROPS: [&str; 3] = ["from_webhook", "override_username", "override_icon_url"];

fn apply_update(state: &mut State, post_id: &str, update: &Value) {
    let message = update
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let file_ids: Vec<String> = update
        .get("file_ids")
        .and_then(|f| serde_json::from_value(f.clone()).ok())
        .unwrap_or_default();
    let new_props = update.get("props").and_then(Value::as_object).cloned();
    let now = state.now();
    let Some(post) = state.post_mut(post_id) else {
        return;
    };
    let mut props = match &new_props {
        Some(props) => {
            let mut props = props.clone();
            for key in RETAINED_PROPS {
                match post.props.get(key) {
                    Some(value) => props.insert(key.into(), value.clone()),
                    None => props.remove(key),
                };
            }
            props
        }
        None => post.props.clone(),
    };
    model::generate_action_ids(&mut props);
    if let Some(from_bot) = post.props.get("from_bot").cloned() {
        props.insert("from_bot".into(), from_bot);
    }
    let edited = message != post.message
        || file_ids != post.file_ids
        || props.get("attachments") != post.props.get("attachments");
    post.message = message.clone();
    post.file_ids = file_ids;
    post.props = props;
    post.update_at = now;
    if edited {
        post.edit_at = now;
    }
    state.updates.push(Update {
        post_id: post_id.to_string(),
        message: Some(message),
        props: new_props.map(Value::Object),
        source: Source::Callback,
        body: update.clone(),
    });
    state.publish_edited(post_id);
}

/// A submission about to be sent: the URL and body, and which dialog.
pub(crate) struct Submission {
    pub url: String,
    pub body: Value,
    pub dialog: usize,
}

/// The request for `user_id`'s last open dialog; `None` when nothing is
/// to be sent (a cancel the dialog did not ask to hear of: it is closed).
pub(crate) fn prepare_submission(
    state: &mut State,
    user_id: &str,
    submission: Map<String, Value>,
    cancelled: bool,
) -> Result<Option<Submission>, String> {
    let index = state
        .dialogs
        .iter()
        .rposition(|d| d.open && d.user_id == user_id)
        .ok_or_else(|| format!("no dialog open for {user_id}"))?;
    let dialog = &state.dialogs[index];
    let field = |name: &str| {
        dialog
            .dialog
            .get(name)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let notify = dialog
        .dialog
        .get("notify_on_cancel")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if cancelled && !notify {
        state.dialogs[index].open = false;
        return Ok(None);
    }
    let team_id = state
        .channel(&dialog.channel_id)
        .map(|c| c.team_id.clone())
        .unwrap_or_default();
    let body = json!({
        "type": "dialog_submission", "callback_id": field("callback_id"), "state": field("state"),
        "user_id": user_id, "channel_id": dialog.channel_id, "team_id": team_id,
        "submission": submission, "cancelled": cancelled,
    });
    Ok(Some(Submission {
        url: dialog.url.clone(),
        body,
        dialog: index,
    }))
}

/// Records the answer; a dialog answered without errors closes.
pub(crate) fn apply_submission_answer(state: &mut State, submission: &Submission, answer: &Value) {
    let errors = answer
        .get("errors")
        .and_then(Value::as_object)
        .is_some_and(|e| !e.is_empty());
    let error = answer
        .get("error")
        .and_then(Value::as_str)
        .is_some_and(|e| !e.is_empty());
    let cancelled = submission.body["cancelled"] == json!(true);
    let closes = cancelled || !(errors || error);
    if let Some(dialog) = state.dialogs.get_mut(submission.dialog).filter(|_| closes) {
        dialog.open = false;
    }
}

/// POSTs `body` as JSON to `url`; answers the status and the JSON answer
/// (`Null` for an empty body), recording the call.
pub(crate) async fn post_json(url: &str, body: &Value) -> Callback {
    let mut callback = Callback {
        url: url.to_string(),
        body: body.clone(),
        status: None,
        answer: None,
        error: None,
    };
    let request = Request::post(url)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json")
        .body(Full::new(Bytes::from(body.to_string())));
    let request = match request {
        Ok(request) => request,
        Err(err) => {
            callback.error = Some(format!("bad URL {url:?}: {err}"));
            return callback;
        }
    };
    let client: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    let response = match client.request(request).await {
        Ok(response) => response,
        Err(err) => {
            callback.error = Some(format!("POST {url}: {err}"));
            return callback;
        }
    };
    let status = response.status().as_u16();
    callback.status = Some(status);
    let bytes = match response.into_body().collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(err) => {
            callback.error = Some(format!("reading the answer of {url}: {err}"));
            return callback;
        }
    };
    if status != 200 {
        callback.error = Some(format!("{url} answered status={status}"));
    }
    if bytes.is_empty() {
        callback.answer = Some(Value::Null);
    } else {
        match serde_json::from_slice(&bytes) {
            Ok(answer) => callback.answer = Some(answer),
            Err(err) => {
                if callback.error.is_none() {
                    callback.error = Some(format!("{url} answered no JSON: {err}"));
                }
            }
        }
    }
    callback
}
