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
//! starts before the options are added, so no answer to an option is lost.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc;

use crate::chat::{Text, ThreadRef};
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
    /// The reactions to the message `ts`, from now on.
    async fn watch(&self, channel: &str, ts: &str) -> Result<mpsc::Receiver<Value>, String> {
        match self {
            ReactionRoute::Here(hub) => Ok(hub.watch_message(channel, ts)),
            ReactionRoute::Daemon(daemon) => daemon.watch_reactions(channel, ts).await,
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

/// A question posted, and its answer.
#[derive(Debug, Clone)]
pub struct Asked {
    pub channel: String,
    pub ts: String,
    pub heard: Heard,
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
    pub(crate) async fn ask(
        &self,
        thread: &ThreadRef,
        question: Question,
    ) -> Result<Asked, String> {
        // Nothing is posted that nobody could hear answered.
        if let ReactionRoute::Nowhere(why) = &self.reactions {
            return Err(why.clone());
        }
        let bot = self
            .chat
            .workspace()
            .await
            .map_err(|e| format!("cannot ask Slack who the bot is: {}", chat_reason(&e)))?
            .bot_user;
        let posted = self
            .chat
            .post(
                &thread.channel,
                Some(&thread.thread_ts),
                Text::plain(&question.text),
            )
            .await
            .map_err(|e| format!("the question was not posted: {}", chat_reason(&e)))?;
        let (channel, ts) = (posted.channel, posted.ts);
        let not_heard = |why: String| {
            let said = format!(
                "{}\n\n_Cannot wait for an answer here: {why}_",
                question.text
            );
            let (channel, ts) = (channel.clone(), ts.clone());
            async move {
                let _ = self.chat.update(&channel, &ts, Text::plain(&said)).await;
                why
            }
        };
        let mut reactions = match self.reactions.watch(&channel, &ts).await {
            Ok(reactions) => reactions,
            Err(why) => return Err(not_heard(why).await),
        };
        for option in &question.options {
            if let Err(e) = self.chat.add_reaction(&channel, &ts, option).await {
                return Err(not_heard(format!(
                    "the option :{option}: could not be added: {}",
                    chat_reason(&e)
                ))
                .await);
            }
        }
        let deadline = tokio::time::Instant::now() + question.timeout;
        loop {
            let event = match tokio::time::timeout_at(deadline, reactions.recv()).await {
                Err(_) => {
                    return Ok(Asked {
                        channel,
                        ts,
                        heard: Heard::NoAnswer,
                    });
                }
                Ok(None) => {
                    return Err(not_heard("the stream of Slack's events ended".into()).await);
                }
                Ok(Some(event)) => event,
            };
            let (Some(user), Some(reaction)) = (event["user"].as_str(), event["reaction"].as_str())
            else {
                continue;
            };
            if user == bot || !question.deciders.contains(user) {
                continue;
            }
            let reaction = base_reaction(reaction);
            if let Some(option) = question.options.iter().position(|o| *o == reaction) {
                return Ok(Asked {
                    channel,
                    ts,
                    heard: Heard::Chose {
                        option,
                        user: user.to_owned(),
                    },
                });
            }
        }
    }

    /// Replaces a question's text with its outcome (best effort: the
    /// decision stands if Slack refuses the edit).
    pub(crate) async fn settle(&self, asked: &Asked, text: &str) {
        if let Err(e) = self
            .chat
            .update(&asked.channel, &asked.ts, Text::plain(text))
            .await
        {
            tracing::warn!(error = %chat_reason(&e), "a question's outcome was not written into it");
        }
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
