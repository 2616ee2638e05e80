//! A runner's session: where its tools post (channel and thread), its
//! directory, its owner, and its per-runner counters.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;

use serde::Deserialize;

use crate::chat::ThreadRef;

/// What a runner tells the gateway about its session.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionContext {
    /// Slack channel id of the session's thread.
    pub channel: String,
    /// `ts` of the thread's parent message.
    pub thread_ts: String,
    /// The session directory: send_file's relative paths start here.
    pub session_dir: PathBuf,
    /// Slack user id of the session's owner.
    #[serde(default)]
    pub owner: Option<String>,
}

impl SessionContext {
    pub fn thread(&self) -> ThreadRef {
        ThreadRef {
            channel: self.channel.clone(),
            thread_ts: self.thread_ts.clone(),
        }
    }

    /// The secret store's key for this session.
    pub fn secrets_key(&self) -> String {
        format!("{}-{}", self.channel, self.thread_ts)
    }
}

/// Per-runner limits of the spec.
pub fn limit_of(tool: &str) -> Option<u32> {
    Some(match tool {
        "send_file" => 50,
        "post_card" => 50,
        "spawn_thread" => 8,
        "read_thread" => 40,
        "post_thread" => 20,
        "request_secret" => 10,
        _ => return None,
    })
}

/// Calls counted per tool. A call takes its slot before it runs, under a
/// lock, so concurrent calls never get past a limit; a call that ends
/// without posting (refused, failed, cancelled) gives its slot back.
#[derive(Debug, Default)]
pub struct Counters {
    used: Mutex<HashMap<&'static str, u32>>,
}

/// A slot taken by a call: given back when dropped, unless [`Slot::keep`]
/// says the call happened.
#[must_use]
pub struct Slot<'a> {
    counters: &'a Counters,
    tool: &'static str,
    kept: bool,
}

impl Slot<'_> {
    /// The call happened: it counts.
    pub fn keep(mut self) {
        self.kept = true;
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        if self.kept {
            return;
        }
        let mut used = self.counters.used.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = used.get_mut(self.tool) {
            *n = n.saturating_sub(1);
        }
    }
}

impl Counters {
    /// Takes one of `tool`'s calls, or says which limit refuses it.
    pub fn take(&self, tool: &'static str) -> Result<Slot<'_>, String> {
        let Some(limit) = limit_of(tool) else {
            return Ok(Slot {
                counters: self,
                tool,
                kept: false,
            });
        };
        let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        let n = used.entry(tool).or_default();
        if *n >= limit {
            return Err(format!(
                "{tool} is limited to {limit} calls per runner, and this session has used them all; \
                 the count starts again when the session's runner restarts"
            ));
        }
        *n += 1;
        Ok(Slot {
            counters: self,
            tool,
            kept: false,
        })
    }

    pub fn used(&self, tool: &str) -> u32 {
        let used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        used.get(tool).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn the_51st_send_file_is_refused_and_released_slots_return() {
        let c = Counters::default();
        for _ in 0..50 {
            c.take("send_file").unwrap().keep();
        }
        let err = c.take("send_file").err().unwrap();
        assert!(
            err.starts_with("send_file is limited to 50 calls per runner"),
            "{err}"
        );
        assert!(c.take("post_card").is_ok());
        let c = Counters::default();
        for _ in 0..49 {
            c.take("post_card").unwrap().keep();
        }
        drop(c.take("post_card").unwrap());
        c.take("post_card").unwrap().keep();
        assert!(c.take("post_card").is_err());
    }

    #[test]
    fn concurrent_calls_never_pass_the_limit() {
        let c = Arc::new(Counters::default());
        let granted: usize = (0..8)
            .map(|_| {
                let c = c.clone();
                std::thread::spawn(move || {
                    (0..20)
                        .filter(|_| c.take("send_file").map(Slot::keep).is_ok())
                        .count()
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().unwrap())
            .sum();
        assert_eq!(granted, 50);
        assert_eq!(c.used("send_file"), 50);
    }
}
