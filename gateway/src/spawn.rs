//! spawn_thread: a new session in a new thread.
//!
//! 1. The arguments, the launcher, the owner and the brief are checked
//!    ([`crate::brief`]: inside the session directory, committed and pushed
//!    to its repository's default branch) before anything is posted.
//! 2. The task and a link to the brief (the file on the repository's web
//!    host, else its path) are posted as a top-level message in the
//!    session's channel, or in the owner's DM when the session's channel is
//!    one of `[spawn] code_channels`. That message starts the new thread.
//! 3. The launcher (`[launcher] command`, an argv template) is run with the
//!    new thread's values, each one argument, never through a shell, and
//!    with the same values in `CALVIN_*` variables. Exit 0 within
//!    `timeout_secs`: started. Still running then: taken as started (it is
//!    running the session) and left to run. Non-zero: the tool says so
//!    with its stderr's last line, and the posted message says the session
//!    did not start.

use std::process::Stdio;
use std::time::Duration;

use rmcp::model::JsonObject;
use serde_json::json;
use tokio::io::AsyncReadExt;

use crate::args::{Args, problems};
use crate::brief::{Brief, check_brief};
use crate::card::escape_mrkdwn as escape;
use crate::chat::Text;
use crate::config::Piece;
use crate::files;
use crate::session::Model;
use crate::threads::neutralise_mentions;
use crate::tools::{Gateway, Runner, ToolOutcome, chat_reason};

/// The most of the launcher's stderr kept (its last line is reported).
const MAX_STDERR: usize = 64 << 10;

/// `task`'s length, in characters (the spec's).
pub const TASK_CHARS: std::ops::RangeInclusive<usize> = 3..=150;
/// The longest `brief` path taken.
pub const BRIEF_MAX: usize = 4096;

/// spawn_thread's arguments.
struct SpawnArgs {
    task: String,
    brief: String,
    model: Option<Model>,
}

fn parse(raw: &JsonObject) -> Result<SpawnArgs, String> {
    let mut a = Args::new(raw, &["task", "brief", "model"]);
    let task = a.text(
        "task",
        Some("what the new thread should do, one line of 3 to 150 characters"),
        TASK_CHARS,
        true,
    );
    let brief = a.text(
        "brief",
        Some("the path of a .md file in the session directory, relative to it"),
        1..=BRIEF_MAX,
        true,
    );
    let model = match a.raw().get("model") {
        None | Some(serde_json::Value::Null) => None,
        Some(v) => match serde_json::from_value::<Model>(v.clone()) {
            Ok(m) => Some(m),
            Err(_) => {
                a.found
                    .push(format!("model must be smart, fast or default, got {v}"));
                None
            }
        },
    };
    match (task, brief) {
        (Some(task), Some(brief)) if a.found.is_empty() => Ok(SpawnArgs { task, brief, model }),
        _ => Err(problems("no thread was started", &a.found)),
    }
}

/// How the launcher ended.
enum Launched {
    Exited,
    StillRunning,
    Failed(String),
}

impl Gateway {
    pub(crate) async fn spawn_thread(&self, runner: &Runner, raw: &JsonObject) -> ToolOutcome {
        let args = parse(raw)?;
        let context = &runner.context;
        if self.launcher.command.is_empty() {
            return Err(
                "no thread was started: this gateway has no launcher to start sessions \
                 with ([launcher] command in gateway.toml)"
                    .into(),
            );
        }
        let owner = context
            .owner_for("no thread was started: the new session gets this session's owner")?;
        let secrets = self.secret_values(context).await?;
        if files::contains_secret(args.task.as_bytes(), &secrets)
            || files::contains_secret(args.brief.as_bytes(), &secrets)
        {
            return Err(
                "no thread was started: the task or brief contains the value of one of the \
                 session's secrets"
                    .into(),
            );
        }
        let slot = runner.counters.take("spawn_thread")?;
        let brief = check_brief(&context.session_dir, &args.brief)
            .await
            .map_err(|e| format!("no thread was started: {e}"))?;
        let model = args.model.unwrap_or(context.model);
        let channel = if self
            .code_channels
            .iter()
            .any(|c| c.as_str() == context.channel)
        {
            self.chat.open_dm(&owner).await.map_err(|e| {
                format!(
                    "no thread was started: cannot open the owner's DM: {}",
                    chat_reason(&e)
                )
            })?
        } else {
            context.channel.clone()
        };
        let parent = self.session_link(runner).await.ok();
        let shown_brief = brief_label(&brief);
        let text = format!(
            "*{}*\nBrief: {}\nA new session for <@{owner}>{}",
            escape(&neutralise_mentions(&args.task)),
            match &brief.web_url {
                Some(url) => format!("<{url}|{}>", escape(&shown_brief)),
                None => format!("`{}`", shown_brief.replace('`', "'")),
            },
            parent
                .as_ref()
                .map(|p| format!(", started from <{p}|this thread>"))
                .unwrap_or_default()
        );
        let posted = self
            .chat
            .post(&channel, None, Text::plain(&text))
            .await
            .map_err(|e| format!("no thread was started: {}", chat_reason(&e)))?;
        slot.keep();
        let values = [
            ("channel", posted.channel.clone()),
            ("thread_ts", posted.ts.clone()),
            ("owner", owner.clone()),
            ("model", model.as_str().to_owned()),
            (
                "permission_mode",
                context.permission_mode.as_str().to_owned(),
            ),
            ("brief", shown_brief.clone()),
            ("task", args.task.clone()),
        ];
        let new_env =
            crate::session::default_env_file(&self.runtime_dir, &posted.channel, &posted.ts);
        let mut env: Vec<(String, String)> = values
            .iter()
            .map(|(k, v)| (format!("CALVIN_{}", k.to_ascii_uppercase()), v.clone()))
            .collect();
        env.push((
            "CALVIN_ENV_FILE".into(),
            new_env.to_string_lossy().into_owned(),
        ));
        env.push(("CALVIN_PARENT_CHANNEL".into(), context.channel.clone()));
        env.push(("CALVIN_PARENT_THREAD_TS".into(), context.thread_ts.clone()));
        if let Some(url) = &brief.web_url {
            env.push(("CALVIN_BRIEF_URL".into(), url.clone()));
        }
        // The CLI gives up on a tool call after its own MCP timeout (about
        // 2 minutes): permission_prompt may wait for a plan or a question
        // up to decision_timeout_secs, so the new session's CLI waits a
        // minute longer, unless the launcher is given a value of the
        // gateway's own environment.
        let own_value = self.launcher.env.iter().any(|v| v == MCP_TOOL_TIMEOUT)
            && std::env::var_os(MCP_TOOL_TIMEOUT).is_some();
        if !own_value {
            let wait = self
                .permissions
                .decision_timeout_secs
                .max(self.permissions.timeout_secs)
                + 60;
            env.push((MCP_TOOL_TIMEOUT.into(), (wait * 1000).to_string()));
        }
        let argv: Vec<String> = self
            .launcher
            .command
            .iter()
            .map(|arg| fill(arg, &values))
            .collect();
        let launched = launch(
            &argv,
            &env,
            &self.launcher.env,
            Duration::from_secs(self.launcher.timeout_secs),
        )
        .await;
        let link = self.chat.permalink(&posted.channel, &posted.ts).await.ok();
        let started = match launched {
            Launched::Exited => "the launcher started it".to_owned(),
            Launched::StillRunning => format!(
                "the launcher is still running after {} s (taken as started)",
                self.launcher.timeout_secs
            ),
            Launched::Failed(why) => {
                let why = if files::contains_secret(why.as_bytes(), &secrets) {
                    "its output holds one of the session's secrets, not shown".to_owned()
                } else {
                    why
                };
                let failed = format!("{text}\n:x: The session did not start.");
                if let Err(err) = self
                    .chat
                    .update(&posted.channel, &posted.ts, Text::plain(&failed))
                    .await
                {
                    tracing::warn!(%err, "could not mark the spawned thread as not started");
                }
                return Err(format!(
                    "the thread was posted{} but the session did not start: {why}",
                    link.as_ref().map(|l| format!(" ({l})")).unwrap_or_default()
                ));
            }
        };
        Ok((
            format!(
                "Started a new thread for \"{}\"{}: {started}.",
                args.task,
                link.as_ref()
                    .map(|l| format!(" at {l}"))
                    .unwrap_or_default()
            ),
            json!({
                "channel": posted.channel,
                "thread_ts": posted.ts,
                "permalink": link,
                "brief": shown_brief,
                "brief_url": brief.web_url,
                "model": model.as_str(),
                "permission_mode": context.permission_mode.as_str(),
                "spawned": runner.counters.used("spawn_thread"),
            }),
        ))
    }
}

/// The brief as the new session names it: its path and anchor.
fn brief_label(brief: &Brief) -> String {
    match &brief.anchor {
        Some(anchor) => format!("{}#{anchor}", brief.path),
        None => brief.path.clone(),
    }
}

/// `arg` with each `{placeholder}` replaced by its value (the template was
/// checked against the known ones when the configuration was loaded).
fn fill(arg: &str, values: &[(&str, String)]) -> String {
    let Ok(pieces) = crate::config::pieces(arg) else {
        return arg.to_owned();
    };
    pieces
        .into_iter()
        .map(|piece| match piece {
            Piece::Text(text) => text.to_owned(),
            Piece::Placeholder(name) => values
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.clone())
                .unwrap_or_else(|| format!("{{{name}}}")),
        })
        .collect()
}

/// The coding CLI's MCP tool call timeout, in milliseconds.
pub const MCP_TOOL_TIMEOUT: &str = "MCP_TOOL_TIMEOUT";

/// Runs the launcher: no shell, no stdin, the allowlisted environment
/// ([`crate::child_env`]) plus `passed` and the `env` given, the tail of
/// its stderr kept.
async fn launch(
    argv: &[String],
    env: &[(String, String)],
    passed: &[String],
    timeout: Duration,
) -> Launched {
    let Some((program, args)) = argv.split_first() else {
        return Launched::Failed("the launcher command is empty".into());
    };
    let mut command = tokio::process::Command::new(program);
    crate::child_env::restrict(&mut command, passed);
    command
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(err) => {
            return Launched::Failed(format!("the launcher {program:?} could not run: {err}"));
        }
    };
    // stderr is read beside the wait: a launcher that leaves a process
    // holding it open must not look like one still running.
    let reader = child.stderr.take().map(|mut stderr| {
        tokio::spawn(async move {
            // Read to the end (a launcher blocked on a full pipe, or
            // killed by a closed one, would look like a failure), keeping
            // the last MAX_STDERR bytes.
            let mut tail = Vec::new();
            let mut chunk = vec![0; 8192];
            while let Ok(n) = stderr.read(&mut chunk).await {
                if n == 0 {
                    break;
                }
                tail.extend_from_slice(&chunk[..n]);
                if tail.len() > MAX_STDERR {
                    tail.drain(..tail.len() - MAX_STDERR);
                }
            }
            tail
        })
    });
    let outcome = match tokio::time::timeout(timeout, child.wait()).await {
        Ok(status) => {
            let text = match reader {
                Some(reader) => tokio::time::timeout(Duration::from_millis(500), reader)
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .unwrap_or_default(),
                None => vec![],
            };
            Ok((status, text))
        }
        Err(elapsed) => Err(elapsed),
    };
    match outcome {
        Ok((Ok(status), _)) if status.success() => Launched::Exited,
        Ok((Ok(status), text)) => {
            let text = String::from_utf8_lossy(&text);
            let last = text
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("(nothing on stderr)")
                .trim()
                .to_owned();
            let status = status
                .code()
                .map(|c| format!("status {c}"))
                .unwrap_or_else(|| format!("{status}"));
            Launched::Failed(format!("the launcher exited with {status}: {last}"))
        }
        Ok((Err(err), _)) => Launched::Failed(format!("waiting for the launcher failed: {err}")),
        Err(_) => Launched::StillRunning,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_fill_whole_arguments_and_parts_of_them() {
        let values = [
            ("channel", "C1".to_owned()),
            ("task", "a b; rm -rf /".to_owned()),
        ];
        assert_eq!(fill("{channel}", &values), "C1");
        assert_eq!(
            fill("--x={channel}/{task}", &values),
            "--x=C1/a b; rm -rf /"
        );
        assert_eq!(fill("{nope} {", &values), "{nope} {");
    }

    #[test]
    fn task_limits() {
        let p = |v: serde_json::Value| parse(v.as_object().unwrap());
        assert!(p(json!({"task": "abc", "brief": "b.md"})).is_ok());
        assert!(p(json!({"task": "x".repeat(150), "brief": "b.md", "model": "fast"})).is_ok());
        let err = p(json!({"task": "x".repeat(151), "brief": "b.md"}))
            .err()
            .unwrap();
        assert!(err.contains("task is 151 characters; at most 150"), "{err}");
        let err = p(json!({"task": "ab", "brief": "b.md", "model": "huge"}))
            .err()
            .unwrap();
        assert!(
            err.contains("at least 3") && err.contains("model must be smart, fast or default"),
            "{err}"
        );
        let err = p(json!({"task": "  ab  ", "brief": "b.md"})).err().unwrap();
        assert!(err.contains("task is 2 characters; at least 3"), "{err}");
        assert!(p(json!({"task": "abc", "brief": "b".repeat(4096)})).is_ok());
        let err = p(json!({"task": "abc", "brief": "b".repeat(4097)}))
            .err()
            .unwrap();
        assert!(
            err.contains("brief is 4097 characters; at most 4096"),
            "{err}"
        );
        let err = p(json!({"task": "one\ntwo", "brief": "b.md"}))
            .err()
            .unwrap();
        assert!(err.contains("task must be one line"), "{err}");
    }

    #[tokio::test]
    async fn the_launcher_runs_without_a_shell_and_its_failure_is_reported() {
        let ok = launch(&["true".into()], &[], &[], Duration::from_secs(5)).await;
        assert!(matches!(ok, Launched::Exited));
        let argv: Vec<String> = [
            "sh",
            "-c",
            "echo first >&2; echo 'the last line' >&2; exit 3",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        match launch(&argv, &[], &[], Duration::from_secs(5)).await {
            Launched::Failed(why) => {
                assert_eq!(why, "the launcher exited with status 3: the last line")
            }
            _ => panic!("expected a failure"),
        }
        // More than MAX_STDERR on stderr: read to the end, the last line kept.
        let script = format!(
            "head -c {} /dev/zero | tr '\\0' x >&2; echo >&2; echo 'the very last line' >&2; exit 5",
            MAX_STDERR + 1
        );
        let loud: Vec<String> = ["sh", "-c", &script]
            .iter()
            .map(|s| s.to_string())
            .collect();
        match launch(&loud, &[], &[], Duration::from_secs(10)).await {
            Launched::Failed(why) => {
                assert_eq!(why, "the launcher exited with status 5: the very last line")
            }
            _ => panic!("expected a failure"),
        }
        let slow: Vec<String> = ["sleep", "5"].iter().map(|s| s.to_string()).collect();
        assert!(matches!(
            launch(&slow, &[], &[], Duration::from_millis(200)).await,
            Launched::StillRunning
        ));
        let missing = launch(
            &["/nonexistent/launcher".into()],
            &[],
            &[],
            Duration::from_secs(1),
        )
        .await;
        assert!(matches!(missing, Launched::Failed(w) if w.contains("could not run")));
    }
}
