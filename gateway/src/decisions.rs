//! Asking the people of a session's thread and hearing their answer as a
//! reaction: permission_prompt, the decision bridge (plans and questions)
//! and send_dm's first DM use it.
//!
//! A question is a message in the session's thread with one reaction per
//! option, added by the bot. The answer is the first reaction naming an
//! option from someone allowed to decide (the session's owner, and
//! `[permissions] allow_users`); the bot's own reactions (the options it
//! adds, which Slack also reports) and anyone else's are ignored.
//!
//! Reactions arrive as Slack events, which only the `serve` daemon
//! receives: in the daemon the hub hands them over directly; a stdio
//! gateway streams them from the daemon (`GET /reactions`). The watch
//! (of the channel) starts before the question is posted, so no answer is
//! lost. A question abandoned while it waits says so in Slack.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc;

use crate::chat::{ChatBackend, Text, ThreadRef};
use crate::daemon_client::DaemonClient;
use crate::events::EventHub;
use crate::session::SessionContext;
use crate::tools::{Gateway, chat_reason};

/// Where a process hears reactions.
pub enum ReactionRoute {
    /// This process is the daemon and holds Socket Mode.
    Here(Arc<EventHub>),
    /// A stdio gateway: the daemon at `[daemon] url` streams them.
    Daemon(Box<DaemonClient>),
    /// Nowhere: every question is refused for this reason.
    Nowhere(String),
}

impl ReactionRoute {
    /// The reactions added in `channel`, from now on.
    async fn watch(&self, channel: &str) -> Result<mpsc::Receiver<Value>, String> {
        match self {
            ReactionRoute::Here(hub) => Ok(hub.watch_reactions(channel)),
            ReactionRoute::Daemon(daemon) => daemon.watch_reactions(channel).await,
            ReactionRoute::Nowhere(why) => Err(why.clone()),
        }
    }
}

/// A question to post in a thread.
pub struct Question {
    /// The message (Slack mrkdwn, already escaped).
    pub text: String,
    /// The reaction of each option (`+1`, `white_check_mark`, `one`...).
    pub options: Vec<&'static str>,
    /// Who may answer.
    pub deciders: BTreeSet<String>,
    pub timeout: Duration,
}

/// What was heard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Heard {
    /// `user` reacted with option `option` (its index).
    Chose { option: usize, user: String },
    /// Nobody allowed to answer did in time.
    NoAnswer,
}

/// A question posted, and its answer; [`Gateway::settle`] writes the
/// outcome into it.
pub struct Asked {
    pub heard: Heard,
    pending: Pending,
}

/// The reaction's name without a skin tone (`+1::skin-tone-3` is `+1`).
fn base_reaction(name: &str) -> &str {
    name.split("::").next().unwrap_or(name)
}

impl Gateway {
    /// Who may answer the session's questions: its owner and
    /// `[permissions] allow_users`; a refusal when nobody is.
    pub(crate) fn deciders(&self, session: &SessionContext) -> Result<BTreeSet<String>, String> {
        let mut deciders: BTreeSet<String> = self.permissions.allow_users.iter().cloned().collect();
        deciders.extend(session.owner.clone());
        if deciders.is_empty() {
            return Err(
                "nobody can answer: this session has no owner and [permissions] allow_users is \
                 empty"
                    .into(),
            );
        }
        Ok(deciders)
    }

    /// Posts `question` in `thread`, adds its options and waits for an
    /// answer. An error when it could not be asked (nothing is waited for).
    /// The watch starts before the post, so no reaction to it is missed.
    pub(crate) async fn ask(
        &self,
        thread: &ThreadRef,
        question: Question,
    ) -> Result<Asked, String> {
        let bot = self
            .chat
            .workspace()
            .await
            .map_err(|e| format!("cannot ask Slack who the bot is: {}", chat_reason(&e)))?
            .bot_user;
        // Nothing is posted that nobody could hear answered.
        let mut reactions = self.reactions.watch(&thread.channel).await?;
        let posted = self
            .chat
            .post(
                &thread.channel,
                Some(&thread.thread_ts),
                Text::plain(&question.text),
            )
            .await
            .map_err(|e| format!("the question was not posted: {}", chat_reason(&e)))?;
        self.remember_prompt(&posted.channel, &posted.ts);
        let mut pending = Pending {
            chat: self.chat.clone(),
            channel: posted.channel,
            ts: posted.ts,
            text: question.text.clone(),
            open: true,
        };
        for option in &question.options {
            if let Err(e) = self
                .chat
                .add_reaction(&pending.channel, &pending.ts, option)
                .await
            {
                let why = format!(
                    "the option :{option}: could not be added: {}",
                    chat_reason(&e)
                );
                pending
                    .close(&format!("_Cannot wait for an answer here: {why}_"))
                    .await;
                return Err(why);
            }
        }
        let deadline = tokio::time::Instant::now() + question.timeout;
        let heard = loop {
            let event = match tokio::time::timeout_at(deadline, reactions.recv()).await {
                Err(_) => break Heard::NoAnswer,
                Ok(None) => {
                    let why = "the stream of Slack's events ended";
                    pending
                        .close(&format!("_Cannot wait for an answer here: {why}_"))
                        .await;
                    return Err(why.into());
                }
                Ok(Some(event)) => event,
            };
            let (Some(user), Some(reaction)) = (event["user"].as_str(), event["reaction"].as_str())
            else {
                continue;
            };
            if event["ts"].as_str() != Some(pending.ts.as_str())
                || user == bot
                || !question.deciders.contains(user)
            {
                continue;
            }
            let reaction = base_reaction(reaction);
            if let Some(option) = question.options.iter().position(|o| *o == reaction) {
                break Heard::Chose {
                    option,
                    user: user.to_owned(),
                };
            }
        };
        Ok(Asked { heard, pending })
    }

    /// Replaces a question's text with its outcome (best effort: the
    /// decision stands if Slack refuses the edit).
    pub(crate) async fn settle(&self, asked: Asked, text: &str) {
        let mut pending = asked.pending;
        pending.open = false;
        if let Err(e) = self
            .chat
            .update(&pending.channel, &pending.ts, Text::plain(text))
            .await
        {
            tracing::warn!(error = %chat_reason(&e), "a question's outcome was not written into it");
        }
    }

    /// The gateway's prompts are not the model's to edit (update_own_post):
    /// it could reword a request before a person answers it.
    fn remember_prompt(&self, channel: &str, ts: &str) {
        let mut prompts = self.prompts.lock().unwrap_or_else(|e| e.into_inner());
        prompts.insert((channel.to_owned(), ts.to_owned()), ());
    }

    pub(crate) fn is_prompt(&self, channel: &str, ts: &str) -> bool {
        let prompts = self.prompts.lock().unwrap_or_else(|e| e.into_inner());
        prompts.get(&(channel.to_owned(), ts.to_owned())).is_some()
    }
}

/// A question posted and not yet settled. Dropped open (the tool call was
/// abandoned: the CLI gave up, the session ended), the post says that
/// nobody waits for it any more, so a late answer does not look taken.
pub(crate) struct Pending {
    chat: Arc<dyn ChatBackend>,
    channel: String,
    ts: String,
    text: String,
    open: bool,
}

impl Pending {
    /// Ends the question with `note` under its text.
    async fn close(&mut self, note: &str) {
        self.open = false;
        let said = format!("{}\n\n{note}", self.text);
        let _ = self
            .chat
            .update(&self.channel, &self.ts, Text::plain(&said))
            .await;
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.open {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (chat, channel, ts) = (self.chat.clone(), self.channel.clone(), self.ts.clone());
        let said = format!(
            "{}\n\n_No longer waiting: the session stopped asking._",
            self.text
        );
        runtime.spawn(async move {
            let _ = chat.update(&channel, &ts, Text::plain(&said)).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skin_tones_name_the_same_option() {
        assert_eq!(base_reaction("+1::skin-tone-3"), "+1");
        assert_eq!(base_reaction("white_check_mark"), "white_check_mark");
    }
}
