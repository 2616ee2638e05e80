//! A runner's session: where its tools post (channel and thread), its
//! directory, its owner, and its per-runner counters.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::chat::{Platform, ThreadRef};

/// What a runner tells the gateway about its session.
#[derive(Debug, Clone, Deserialize, Serialize)]
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
    /// How the session's CLI asks for approval; spawned sessions get the
    /// same.
    #[serde(default)]
    pub permission_mode: PermissionMode,
    /// The session's model tier; spawned sessions get it unless they ask
    /// for another.
    #[serde(default)]
    pub model: Model,
    /// The branch checkout_repo puts worktrees on (default
    /// `calvin/<thread_ts>`).
    #[serde(default)]
    pub branch: Option<String>,
    /// The file the session's shells source (BASH_ENV): its secrets.
    /// Default: `<runtime_dir>/<channel>-<thread_ts>/env.sh`.
    #[serde(default)]
    pub env_file: Option<PathBuf>,
}

/// `bypass` (the CLI's bypassPermissions mode) or `ask`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum PermissionMode {
    Bypass,
    #[default]
    Ask,
}

impl PermissionMode {
    pub fn as_str(self) -> &'static str {
        match self {
            PermissionMode::Bypass => "bypass",
            PermissionMode::Ask => "ask",
        }
    }
}

/// spawn_thread's model tiers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Model {
    Smart,
    Fast,
    #[default]
    Default,
}

impl Model {
    pub fn as_str(self) -> &'static str {
        match self {
            Model::Smart => "smart",
            Model::Fast => "fast",
            Model::Default => "default",
        }
    }
}

impl SessionContext {
    /// The channel and thread are Slack ids (they name files and
    /// branches), the directory absolute.
    pub fn check(&self, platform: Platform) -> Result<(), String> {
        check_ids(platform, &self.channel, &self.thread_ts)?;
        if !self.session_dir.is_absolute() {
            return Err("session_dir must be an absolute path".into());
        }
        if let Some(owner) = &self.owner
            && (owner.is_empty() || !owner.bytes().all(|b| b.is_ascii_alphanumeric()))
        {
            return Err(format!(
                "owner {owner:?} is not a {} user id",
                platform.name()
            ));
        }
        if let Some(branch) = &self.branch
            && (branch.is_empty() || branch.starts_with('-') || branch.contains(".."))
        {
            return Err(format!("branch {branch:?} is not a usable branch name"));
        }
        if let Some(env_file) = &self.env_file
            && !env_file.is_absolute()
        {
            return Err("env_file must be an absolute path".into());
        }
        Ok(())
    }

    /// The session's owner, or a refusal: `why` (what needs the owner),
    /// and how to give one.
    pub fn owner_for(&self, why: &str) -> Result<String, String> {
        self.owner.clone().ok_or_else(|| {
            format!(
                "{why}, and this session has none (start the gateway with --owner, or register \
                 the session with an owner)"
            )
        })
    }

    /// The branch of this session's worktrees.
    pub fn branch(&self) -> String {
        self.branch
            .clone()
            .unwrap_or_else(|| format!("calvin/{}", self.thread_ts))
    }

    /// The env file of this session: the one it named, else the default
    /// in `runtime_dir`.
    pub fn env_file(&self, runtime_dir: &std::path::Path) -> PathBuf {
        self.env_file
            .clone()
            .unwrap_or_else(|| default_env_file(runtime_dir, &self.channel, &self.thread_ts))
    }

    /// Names the env file when the session did not, so that every process
    /// handling the session (a stdio gateway and the daemon it asks) uses
    /// the same one.
    pub fn resolve_env_file(&mut self, runtime_dir: &std::path::Path) {
        self.env_file = Some(self.env_file(runtime_dir));
    }

    pub fn thread(&self) -> ThreadRef {
        ThreadRef {
            channel: self.channel.clone(),
            thread_ts: self.thread_ts.clone(),
        }
    }

    /// The secret store's key for this session.
    pub fn secrets_key(&self) -> String {
        session_key(&self.channel, &self.thread_ts)
    }
}

/// A session's name in files: `<channel>-<thread_ts>`.
fn session_key(channel: &str, thread_ts: &str) -> String {
    format!("{channel}-{thread_ts}")
}

/// The env file of the session of this thread when it names none:
/// `<runtime_dir>/<channel>-<thread_ts>/env.sh`.
pub fn default_env_file(runtime_dir: &std::path::Path, channel: &str, thread_ts: &str) -> PathBuf {
    runtime_dir
        .join(session_key(channel, thread_ts))
        .join("env.sh")
}

/// A session's channel and thread are the platform's ids (they name files
/// and branches).
pub fn check_ids(platform: Platform, channel: &str, thread_ts: &str) -> Result<(), String> {
    platform.check_session_channel(channel)?;
    platform
        .check_message_id(thread_ts)
        .map_err(|e| format!("thread_ts: {e}"))?;
    Ok(())
}

/// send_dm's DMs to one recipient per session.
pub const DMS_PER_RECIPIENT: u32 = 3;

/// Per-runner limits of the spec.
pub fn limit_of(tool: &str) -> Option<u32> {
    Some(match tool {
        "send_file" => 50,
        "post_card" => 50,
        "spawn_thread" => 8,
        "read_thread" => 40,
        "post_thread" => 20,
        "request_secret" => 10,
        // Per recipient ([`Counters::take_per`]).
        "send_dm" => DMS_PER_RECIPIENT,
        _ => return None,
    })
}

/// Calls counted per tool. A call takes its slot before it runs, under a
/// lock, so concurrent calls never get past a limit; a call that ends
/// without posting (refused, failed, cancelled) gives its slot back.
#[derive(Debug, Default)]
pub struct Counters {
    /// By tool, or by tool and who (`send_dm <recipient>`).
    used: Mutex<HashMap<String, u32>>,
}

/// A slot taken by a call: given back when dropped, unless [`Slot::keep`]
/// says the call happened.
#[must_use]
pub struct Slot<'a> {
    counters: &'a Counters,
    key: String,
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
        if let Some(n) = used.get_mut(&self.key) {
            *n = n.saturating_sub(1);
        }
    }
}

impl Counters {
    /// Takes one of `tool`'s calls, or says which limit refuses it.
    pub fn take(&self, tool: &'static str) -> Result<Slot<'_>, String> {
        self.take_key(tool, tool.to_owned()).map_err(|limit| {
            format!(
                "{tool} is limited to {limit} calls per runner, and this session has used them all; \
                 the count starts again when the session's runner restarts"
            )
        })
    }

    /// Takes one of `tool`'s calls for `who` (its limit counts per who:
    /// send_dm's per recipient); `Err` is the limit reached.
    pub fn take_per(&self, tool: &'static str, who: &str) -> Result<Slot<'_>, u32> {
        self.take_key(tool, format!("{tool} {who}"))
    }

    fn take_key(&self, tool: &'static str, key: String) -> Result<Slot<'_>, u32> {
        let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(limit) = limit_of(tool) {
            let n = used.entry(key.clone()).or_default();
            if *n >= limit {
                return Err(limit);
            }
            *n += 1;
        }
        Ok(Slot {
            counters: self,
            key,
            kept: false,
        })
    }

    pub fn used(&self, tool: &str) -> u32 {
        let used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        used.get(tool).copied().unwrap_or(0)
    }

    /// [`Counters::used`] for `who`.
    pub fn used_per(&self, tool: &str, who: &str) -> u32 {
        self.used(&format!("{tool} {who}"))
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
    fn per_recipient_limits_count_each_recipient_apart() {
        let c = Counters::default();
        for _ in 0..3 {
            c.take_per("send_dm", "U1").unwrap().keep();
        }
        assert_eq!(c.take_per("send_dm", "U1").err(), Some(3));
        drop(c.take_per("send_dm", "U2").unwrap());
        assert_eq!(
            (c.used_per("send_dm", "U1"), c.used_per("send_dm", "U2")),
            (3, 0)
        );
        c.take("send_file").unwrap().keep();
        assert_eq!(c.used_per("send_dm", "U1"), 3, "other tools count apart");
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
