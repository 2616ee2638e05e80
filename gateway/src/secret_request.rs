//! request_secret: a button in the session's thread, a private form, the
//! value stored encrypted and given to the session's shell commands.
//!
//! 1. The tool posts a message with a "Set NAME" button (its value: this
//!    request's random id) and answers at once.
//! 2. A click by the session's owner opens a modal (views.open with the
//!    click's trigger_id) with one text input; anyone else's click gets an
//!    ephemeral refusal.
//! 3. The submitted value goes into the secret store (encrypted with
//!    `SP_STORE_KEY`), the session's env file is rewritten
//!    ([`crate::session_env`]), the button message says the secret is set,
//!    and "NAME is set" is posted in the thread (the runner passes thread
//!    messages to the session).
//!
//! Steps 2 and 3 need Slack's events, which only the `serve` daemon
//! receives; pending requests live there, so a click after the requesting
//! process ended (a CLI turn that finished) is still answered. A daemon
//! restart forgets pending requests: their buttons then say so.
//!
//! The value never appears in a log line, a message, a tool result or an
//! error. Slack has no masked text input: the form is visible to the one
//! person who opened it and is closed on submission.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::JsonObject;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tracing::{info, warn};

use crate::args::Args;
use crate::card::escape_mrkdwn;
use crate::chat::{ChatBackend, Text};
use crate::events::{ButtonClick, FormAnswer, FormSubmit};
use crate::secrets::{NoStore, SecretError, SecretStore, is_env_name};
use crate::session::SessionContext;
use crate::session_env;

/// The button's action id and the modal's callback id.
pub const ACTION_ID: &str = "calvin_set_secret";
pub const CALLBACK_ID: &str = "calvin_secret";
const BLOCK_ID: &str = "secret";
const INPUT_ACTION: &str = "value";
/// Slack's plain_text_input takes at most 3,000 characters.
const MAX_VALUE_CHARS: u64 = 3000;
/// A request not answered within a day is forgotten.
const PENDING_TTL: Duration = Duration::from_secs(24 * 3600);

/// Names a secret may not take: the shell and the session need them as
/// they are.
const RESERVED: [&str; 22] = [
    "PATH",
    "HOME",
    "SHELL",
    "USER",
    "LOGNAME",
    "PWD",
    "OLDPWD",
    "TERM",
    "LANG",
    "TMPDIR",
    "BASH_ENV",
    "ENV",
    "IFS",
    "CDPATH",
    "PROMPT_COMMAND",
    "PS1",
    "PS2",
    "PS4",
    "SHELLOPTS",
    "BASHOPTS",
    "GLOBIGNORE",
    "SP_STORE_KEY",
];
const RESERVED_PREFIXES: [&str; 4] = ["LD_", "DYLD_", "BASH_FUNC_", "CALVIN_"];

/// The longest variable name taken.
pub const NAME_MAX: usize = 128;
/// `reason`'s length, in characters (the spec's).
pub const REASON_CHARS: std::ops::RangeInclusive<usize> = 3..=200;

/// request_secret's arguments.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretRequest {
    pub name: String,
    pub reason: String,
    #[serde(default)]
    pub file: bool,
}

impl SecretRequest {
    pub fn parse(raw: &JsonObject) -> Result<SecretRequest, String> {
        let mut a = Args::new(raw, &["name", "reason", "file"]);
        let name = a.text(
            "name",
            Some("the environment variable to set, for example STRIPE_API_KEY"),
            1..=NAME_MAX,
            true,
        );
        let reason = a.text(
            "reason",
            Some("one line, 3 to 200 characters, shown to the person"),
            REASON_CHARS,
            true,
        );
        let file = a.boolean("file").unwrap_or(false);
        if let Some(name) = &name
            && let Err(why) = check_name(name)
        {
            a.found.push(why);
        }
        match (name, reason) {
            (Some(name), Some(reason)) if a.found.is_empty() => {
                Ok(SecretRequest { name, reason, file })
            }
            _ => Err(a
                .finish("no secret was requested")
                .err()
                .unwrap_or_default()),
        }
    }

    /// The tool's checks on a request that arrived typed (the daemon's
    /// `POST /secret-requests`); [`SecretRequests::post`] takes checked
    /// requests.
    pub fn check(&self) -> Result<(), String> {
        let mut raw = JsonObject::new();
        raw.insert("name".into(), self.name.clone().into());
        raw.insert("reason".into(), self.reason.clone().into());
        raw.insert("file".into(), self.file.into());
        SecretRequest::parse(&raw).map(|_| ())
    }
}

fn check_name(name: &str) -> Result<(), String> {
    if !is_env_name(name) {
        return Err(format!(
            "name {name:?} is not an environment variable name (letters, digits and _, not \
             starting with a digit)"
        ));
    }
    let upper = name.to_ascii_uppercase();
    if RESERVED.contains(&upper.as_str()) || RESERVED_PREFIXES.iter().any(|p| upper.starts_with(p))
    {
        return Err(format!(
            "name {name} is reserved: the shell or calvin needs it as it is; choose another name"
        ));
    }
    Ok(())
}

/// What the daemon's `POST /secret-requests` takes from a stdio gateway.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostRequest {
    pub session: SessionContext,
    #[serde(flatten)]
    pub request: SecretRequest,
}

/// The tool's refusal when this process has no store, naming what is
/// missing.
pub fn unavailable(why: &NoStore) -> String {
    format!("request_secret is not available: {why}")
}

struct Pending {
    session: SessionContext,
    owner: String,
    name: String,
    file: bool,
    message_ts: String,
    created: Instant,
}

/// The requests waiting for their form, in the daemon.
pub struct SecretRequests {
    chat: Arc<dyn ChatBackend>,
    store: Result<SecretStore, NoStore>,
    runtime_dir: PathBuf,
    pending: Mutex<HashMap<String, Pending>>,
}

impl SecretRequests {
    pub fn new(
        chat: Arc<dyn ChatBackend>,
        store: Result<SecretStore, NoStore>,
        runtime_dir: PathBuf,
    ) -> Self {
        Self {
            chat,
            store,
            runtime_dir,
            pending: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Pending>> {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending.retain(|_, p| p.created.elapsed() < PENDING_TTL);
        pending
    }

    /// Posts the button; the tool's structured answer.
    pub async fn post(
        &self,
        session: &SessionContext,
        request: &SecretRequest,
    ) -> Result<Value, String> {
        let store = self.store.as_ref().map_err(unavailable)?;
        let owner = session
            .owner_for("no secret was requested: only the session's owner may set a secret")?;
        let name = &request.name;
        let key = session.secrets_key();
        let (store2, key2) = (store.clone(), key.clone());
        let names = tokio::task::spawn_blocking(move || store2.names(&key2))
            .await
            .unwrap_or_default();
        if names.contains(name) {
            return Err(format!(
                "a secret named {name} is already set for this session: it is in the environment \
                 of the session's shell commands; choose another name"
            ));
        }
        // The name is reserved before the button is posted, so two calls
        // at once cannot both post one.
        let id = crate::random_id::random_hex::<16>();
        {
            let mut pending = self.lock();
            if pending
                .values()
                .any(|p| p.session.secrets_key() == key && &p.name == name)
            {
                return Err(format!(
                    "a request for {name} is already waiting in the thread for {owner}'s answer"
                ));
            }
            pending.insert(
                id.clone(),
                Pending {
                    session: session.clone(),
                    owner: owner.clone(),
                    name: name.clone(),
                    file: request.file,
                    message_ts: String::new(),
                    created: Instant::now(),
                },
            );
        }
        let reason = escape_mrkdwn(&request.reason);
        let text = format!(
            "<@{owner}>, this session asks for a secret: `{name}`\n>{reason}\nThe button opens a \
             private form; the value is stored encrypted and given to the session's shell \
             commands, never shown in {}.",
            self.chat.platform().name()
        );
        let blocks = json!([
            {"type": "section", "text": {"type": "mrkdwn", "text": text}},
            {"type": "actions", "elements": [{
                "type": "button",
                "action_id": ACTION_ID,
                "text": {"type": "plain_text", "text": format!("Set {name}")},
                "style": "primary",
                "value": id,
            }]},
        ]);
        let posted = self
            .chat
            .post(
                &session.channel,
                Some(&session.thread_ts),
                Text {
                    text: &text,
                    blocks: Some(&blocks),
                },
            )
            .await;
        let posted = match posted {
            Ok(posted) => posted,
            Err(e) => {
                self.lock().remove(&id);
                return Err(format!(
                    "no secret was requested: {}",
                    crate::tools::chat_reason(&e)
                ));
            }
        };
        info!(channel = %session.channel, thread_ts = %session.thread_ts, %name, "secret requested");
        if let Some(p) = self.lock().get_mut(&id) {
            p.message_ts = posted.ts.clone();
        }
        Ok(json!({
            "name": name,
            "file": request.file,
            "message_ts": posted.ts,
            "status": "posted",
        }))
    }

    /// Why a click on a "Set NAME" button opens nothing, if it does not
    /// (the request is no longer open, or the clicker is not its owner),
    /// as the platform shows it: an answer the click can carry at once
    /// (Mattermost's `ephemeral_text`, which needs no permission, where
    /// `POST /posts/ephemeral` needs a system admin's).
    pub async fn click_refusal(&self, click: &ButtonClick) -> Option<String> {
        if click.action_id != ACTION_ID {
            return None;
        }
        let found = self
            .lock()
            .get(&click.value)
            .map(|p| (p.owner.clone(), p.name.clone()));
        let text = match found {
            None => NO_LONGER_OPEN.to_owned(),
            Some((owner, name)) if click.user != owner => {
                info!(user = %click.user, %name, "a click on another person's secret request was refused");
                refused_to(&owner, &name)
            }
            Some(_) => return None,
        };
        Some(self.chat.shown(&text).await)
    }

    /// A click on a "Set NAME" button.
    pub async fn on_click(&self, click: ButtonClick) {
        if click.action_id != ACTION_ID {
            return;
        }
        let found = self
            .lock()
            .get(&click.value)
            .map(|p| (p.owner.clone(), p.name.clone(), p.file));
        let (channel, user) = (&click.channel, &click.user);
        let refuse = |text: String| async move {
            if let Err(err) = self.chat.post_ephemeral(channel, user, None, &text).await {
                warn!(%err, "could not tell a clicker why the button did nothing");
            }
        };
        let Some((owner, name, file)) = found else {
            return refuse(NO_LONGER_OPEN.into()).await;
        };
        if click.user != owner {
            info!(user = %click.user, %name, "a click on another person's secret request was refused");
            return refuse(refused_to(&owner, &name)).await;
        }
        let view = modal(&click.value, &name, file, self.chat.platform().name());
        if let Err(err) = self.chat.open_view(&click.trigger_id, &view).await {
            warn!(%err, %name, "could not open the secret's form");
            refuse(format!(
                "The form for `{name}` could not be opened ({err}); click the button again."
            ))
            .await;
        }
    }

    /// A submitted form: checked now, stored in the background.
    pub fn on_submit(self: &Arc<Self>, form: FormSubmit) -> FormAnswer {
        if form.callback_id != CALLBACK_ID {
            return FormAnswer::Close;
        }
        let error = |text: &str| FormAnswer::Errors(vec![(BLOCK_ID.to_owned(), text.to_owned())]);
        let mut pending = self.lock();
        let Some(p) = pending.get(&form.private_metadata) else {
            return error("This request is no longer open: ask the session to request it again.");
        };
        if form.user != p.owner {
            return error("Only the session's owner can set this secret.");
        }
        let value = form
            .values
            .iter()
            .find(|(block, action, _)| block == BLOCK_ID && action == INPUT_ACTION)
            .map(|(_, _, v)| v.clone())
            .unwrap_or_default();
        if value.trim().is_empty() {
            return error("The value is empty.");
        }
        let Some(p) = pending.remove(&form.private_metadata) else {
            return FormAnswer::Close;
        };
        drop(pending);
        let me = self.clone();
        tokio::spawn(async move { me.store(p, value).await });
        FormAnswer::Close
    }

    async fn store(&self, p: Pending, value: String) {
        let Ok(store) = self.store.clone() else {
            return;
        };
        let key = p.session.secrets_key();
        let env_file = p.session.env_file(&self.runtime_dir);
        let (name, file) = (p.name.clone(), p.file);
        let stored = tokio::task::spawn_blocking(move || {
            store.set_secret(&key, &name, &value, file)?;
            // The session's shells see it now if the session is live (its
            // env file exists); else when it starts again. The store is
            // read again under the env folder's lock on purpose: a snapshot
            // taken before it could miss a secret another writer just set.
            let live = session_env::update(&env_file, || {
                store.secrets(&key).map_err(std::io::Error::other)
            });
            Ok::<_, SecretError>(live.map(|_| ()))
        })
        .await;
        let (channel, thread) = (&p.session.channel, &p.session.thread_ts);
        let name = &p.name;
        let said = match stored {
            Ok(Ok(Ok(()))) => {
                info!(%channel, thread_ts = %thread, %name, "secret set");
                let done = format!("<@{}> set `{name}`.", p.owner);
                if let Err(err) = self
                    .chat
                    .update(channel, &p.message_ts, Text::plain(&done))
                    .await
                {
                    warn!(%err, "could not take the button off the secret request");
                }
                format!("{name} is set")
            }
            Ok(Ok(Err(err))) => {
                warn!(%err, %name, "secret stored, env file not written");
                format!(
                    "{name} is stored, but the session's env file could not be written ({err}); \
                     it reaches the session's shells when the session starts again"
                )
            }
            Ok(Err(SecretError::Duplicate { .. })) => {
                format!("{name} was already set; the value just entered was not stored")
            }
            Ok(Err(err)) => {
                warn!(%err, %name, "secret not stored");
                format!("{name} could not be stored: {err}")
            }
            Err(err) => {
                warn!(%err, %name, "secret not stored");
                format!("{name} could not be stored: the store failed")
            }
        };
        if let Err(err) = self
            .chat
            .post(channel, Some(thread), Text::plain(&said))
            .await
        {
            warn!(%err, %name, "could not post the secret's outcome in the thread");
        }
    }
}

const NO_LONGER_OPEN: &str = "This request for a secret is no longer open: it was answered, or \
     the gateway restarted since. Ask the session to request it again.";

/// What a person other than the owner is told of their click.
fn refused_to(owner: &str, name: &str) -> String {
    format!("Only <@{owner}> can set `{name}`: it goes into their session.")
}

/// The form: the variable's name, one input (multi-line for a file).
fn modal(id: &str, name: &str, file: bool, platform: &str) -> Value {
    json!({
        "type": "modal",
        "callback_id": CALLBACK_ID,
        "private_metadata": id,
        "title": {"type": "plain_text", "text": "Set a secret"},
        "submit": {"type": "plain_text", "text": "Save"},
        "close": {"type": "plain_text", "text": "Cancel"},
        "clear_on_close": true,
        "blocks": [
            {
                "type": "input",
                "block_id": BLOCK_ID,
                "label": {"type": "plain_text", "text": name},
                "element": {
                    "type": "plain_text_input",
                    "action_id": INPUT_ACTION,
                    "multiline": file,
                    "min_length": 1,
                    "max_length": MAX_VALUE_CHARS,
                },
            },
            {"type": "context", "elements": [{"type": "mrkdwn", "text":
                format!("Only you see this form. The value is stored encrypted and given to the \
                 session's shell commands; it is never shown in {platform}.")}]},
        ],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: Value) -> Result<SecretRequest, String> {
        SecretRequest::parse(v.as_object().unwrap())
    }

    #[test]
    fn arguments_at_their_limits() {
        let ok = parse(json!({"name": "STRIPE_API_KEY", "reason": "abc"})).unwrap();
        assert!(!ok.file);
        assert!(
            parse(json!({"name": "K", "reason": "r".repeat(200), "file": true}))
                .unwrap()
                .file
        );
        let err = parse(json!({"name": "K", "reason": "r".repeat(201)})).unwrap_err();
        assert!(
            err.contains("reason is 201 characters; at most 200"),
            "{err}"
        );
        let err = parse(json!({"name": "K", "reason": "ab"})).unwrap_err();
        assert!(err.contains("reason is 2 characters; at least 3"), "{err}");
        let err = parse(json!({"name": "K", "reason": "two\nlines"})).unwrap_err();
        assert!(err.contains("reason must be one line"), "{err}");
        let err = parse(json!({"name": "1BAD", "reason": "abc", "file": "yes"})).unwrap_err();
        assert!(err.contains("not an environment variable name"), "{err}");
        assert!(err.contains("file must be true or false"), "{err}");
        for reserved in ["PATH", "BASH_ENV", "LD_PRELOAD", "calvin_x"] {
            let err = parse(json!({"name": reserved, "reason": "abc"})).unwrap_err();
            assert!(err.contains("is reserved"), "{reserved}: {err}");
        }
        assert!(parse(json!({"name": "N".repeat(128), "reason": "abc"})).is_ok());
        let err = parse(json!({"name": "N".repeat(129), "reason": "abc"})).unwrap_err();
        assert!(err.contains("name is 129 characters; at most 128"), "{err}");
        let err = parse(json!({"name": "K", "reason": "  ab  "})).unwrap_err();
        assert!(err.contains("reason is 2 characters; at least 3"), "{err}");
        let err = parse(json!({})).unwrap_err();
        assert!(
            err.contains("name is required") && err.contains("reason is required"),
            "{err}"
        );
    }

    #[test]
    fn the_reason_is_shown_literally() {
        assert_eq!(
            escape_mrkdwn("<!channel> & <@U1>"),
            "&lt;!channel&gt; &amp; &lt;@U1&gt;"
        );
    }
}
