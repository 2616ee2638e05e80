//! permission_prompt: the coding CLI's permission handler
//! (`--permission-prompt-tool mcp__calvin__permission_prompt`).
//!
//! The CLI calls it with `{tool_name, input, tool_use_id?}` before a tool
//! that needs approval, and reads the first text block of the result as
//! JSON: `{"behavior": "allow", "updatedInput": {...}}` or
//! `{"behavior": "deny", "message": "..."}` (Claude Code's permission
//! prompt tool contract; see the README). Those are the answers here.
//!
//! - Tools that never ask ([`never_asks`]) and tools already allowed for
//!   the rest of the session are allowed at once, without a post.
//! - `ExitPlanMode` and `AskUserQuestion` go over the decision bridge: the
//!   plan, or each question with its numbered options, is posted with its
//!   own reactions. A multi-select question, or a failure of that path,
//!   falls back: a plan to the generic prompt, a question to allow.
//! - Anything else gets the generic prompt, whose first line reads as the
//!   spec's example, "⚠️ Permission requested: Write file.txt" (the tool
//!   and its main argument, [`headline`]), with the input's details below
//!   it ([`summary`]), and 👍 (once), ✅ (this tool for the rest of the
//!   session) and 👎 (deny).

use std::time::Duration;

use rmcp::model::JsonObject;
use serde_json::{Map, Value, json};

use crate::card::escape_mrkdwn;
use crate::decisions::{Heard, Question};
use crate::threads::{cut, neutralise_mentions};
use crate::tools::{CHAT_TOOLS, Gateway, Runner};

/// This server's tools as the CLI names them.
const OWN_PREFIX: &str = "mcp__calvin__";

/// Whether `tool` (this server's, without the prefix) is allowed without
/// a post: read_thread (never asked, says agent-tools.txt) and every tool
/// the threads spec auto-approves, send_file and its family (each has its
/// own guardrail; send_dm asks by itself before a first DM).
pub fn never_asks(tool: &str) -> bool {
    matches!(tool, "read_thread" | "send_file") || CHAT_TOOLS.contains(&tool)
}

/// The generic prompt's reactions: once, all uses, deny.
pub const ALLOW_ONCE: &str = "+1";
pub const ALLOW_ALL: &str = "white_check_mark";
pub const DENY: &str = "-1";
/// A plan's reactions.
pub const APPROVE_PLAN: &str = "white_check_mark";
pub const REJECT_PLAN: &str = "x";
/// A question's options, in order.
pub const NUMBERS: [&str; 10] = [
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "keycap_ten",
];

/// The longest summary of a tool's input shown, and of each value in it.
pub const SUMMARY_CHARS: usize = 1_500;
pub const VALUE_CHARS: usize = 300;
/// The longest plan shown in full.
pub const PLAN_CHARS: usize = 12_000;
/// The longest tool name shown.
pub const TOOL_NAME_CHARS: usize = 200;
/// The longest main argument on a prompt's first line, in characters.
pub const HEADLINE_ARG_CHARS: usize = 80;
/// How every permission request starts (⚠️ in Slack and Mattermost).
pub const REQUESTED: &str = ":warning: Permission requested:";

/// The CLI's answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    Allow(Value),
    Deny(String),
}

impl Decision {
    /// The JSON the CLI parses.
    pub fn to_json(&self) -> Value {
        match self {
            Decision::Allow(input) => json!({ "behavior": "allow", "updatedInput": input }),
            Decision::Deny(message) => json!({ "behavior": "deny", "message": message }),
        }
    }
}

/// The generic prompt's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Once(String),
    All(String),
    Denied(String),
    NoAnswer,
}

impl Gateway {
    pub(crate) async fn permission_prompt(
        &self,
        runner: &Runner,
        args: &JsonObject,
    ) -> Result<Decision, String> {
        // Only tool_name and input are read: a later CLI may send more
        // (tool_use_id today), which must not turn into a refusal.
        let mut found = Vec::new();
        let tool = match args.get("tool_name") {
            None | Some(Value::Null) => {
                found.push("tool_name is required: the tool asking for permission".into());
                None
            }
            Some(Value::String(s)) if s.trim().is_empty() => {
                found.push("tool_name is empty".into());
                None
            }
            Some(Value::String(s)) => Some(s.trim().to_owned()),
            Some(v) => {
                found.push(format!("tool_name must be a string, got {v}"));
                None
            }
        };
        let input = match args.get("input") {
            Some(Value::Object(o)) => Some(o.clone()),
            Some(v) => {
                found.push(format!("input must be an object, got {v}"));
                None
            }
            None => {
                found.push("input is required: the tool's input parameters".into());
                None
            }
        };
        let (Some(tool), Some(input), true) = (tool, input, found.is_empty()) else {
            return Err(crate::args::problems("no permission was decided", &found));
        };
        let own = tool.strip_prefix(OWN_PREFIX);
        if own.is_some_and(never_asks) || runner.allowed_all(&tool) {
            return Ok(Decision::Allow(Value::Object(input)));
        }
        // What is shown never holds a secret: without the session's secret
        // values to hide, nothing is shown (and nothing allowed).
        let secrets = match self.secret_values(&runner.context).await {
            Ok(secrets) => secrets,
            Err(why) => {
                return Ok(Decision::Deny(format!(
                    "Permission to use {} was denied: it could not be asked without showing \
                     secrets ({why}).",
                    cut(&tool, TOOL_NAME_CHARS)
                )));
            }
        };
        match tool.as_str() {
            "ExitPlanMode" => {
                if let Some(decision) = self.plan(runner, &input, &secrets).await {
                    return Ok(decision);
                }
            }
            "AskUserQuestion" => return Ok(self.questions(runner, input, &secrets).await),
            _ => {}
        }
        Ok(self.generic_prompt(runner, &tool, input, &secrets).await)
    }

    /// The generic prompt, and its decision (denied when it cannot be
    /// asked).
    async fn generic_prompt(
        &self,
        runner: &Runner,
        tool: &str,
        input: JsonObject,
        secrets: &[String],
    ) -> Decision {
        let name = cut(&hide_secrets(tool, secrets), TOOL_NAME_CHARS);
        let head = headline(&name, tool, &input, secrets);
        let summary = summary(tool, &input, secrets);
        let verdict = self.ask_permission(runner, &head, &summary).await;
        match verdict {
            Ok(Verdict::Once(_)) => Decision::Allow(Value::Object(input)),
            Ok(Verdict::All(_)) => {
                runner.allow_all(tool);
                Decision::Allow(Value::Object(input))
            }
            Ok(Verdict::Denied(user)) => Decision::Deny(format!(
                "Permission to use {name} was denied in {} by {}.",
                self.chat.platform().name(),
                self.name_of(&user).await
            )),
            Ok(Verdict::NoAnswer) => Decision::Deny(format!(
                "Permission to use {name} was denied: nobody answered in {} within {} s.",
                self.chat.platform().name(),
                self.permissions.timeout_secs
            )),
            Err(why) => Decision::Deny(format!(
                "Permission to use {name} was denied: it could not be asked in {} ({why}).",
                self.chat.platform().name()
            )),
        }
    }

    /// Posts "<head>\n<body>" with the three reactions in the session's
    /// thread and waits `[permissions] timeout_secs`; the post then says
    /// the outcome and who decided. Used by permission_prompt and by
    /// send_dm's first DM.
    pub(crate) async fn ask_permission(
        &self,
        runner: &Runner,
        head: &str,
        body: &str,
    ) -> Result<Verdict, String> {
        let context = &runner.context;
        let deciders = self.deciders(context)?;
        let text = format!(
            "{head}\n{body}\n_:+1: allow once · :white_check_mark: allow every use for the rest of \
             this session · :-1: deny_"
        );
        let question = Question {
            text,
            options: vec![ALLOW_ONCE, ALLOW_ALL, DENY],
            deciders,
            timeout: Duration::from_secs(self.permissions.timeout_secs),
        };
        let asked = self.ask(&context.thread(), question).await?;
        let (verdict, outcome) = match asked.heard.clone() {
            Heard::Chose { option: 0, user } => (
                Verdict::Once(user.clone()),
                format!(":+1: Allowed once by <@{user}>"),
            ),
            Heard::Chose { option: 1, user } => (
                Verdict::All(user.clone()),
                format!(":white_check_mark: Allowed for the rest of this session by <@{user}>"),
            ),
            Heard::Chose { user, .. } => (
                Verdict::Denied(user.clone()),
                format!(":-1: Denied by <@{user}>"),
            ),
            Heard::NoAnswer => (
                Verdict::NoAnswer,
                format!(
                    ":hourglass: Denied: no answer within {} s",
                    self.permissions.timeout_secs
                ),
            ),
        };
        self.settle(asked, &format!("{head}\n{body}\n{outcome}"))
            .await;
        Ok(verdict)
    }

    /// ExitPlanMode over the bridge; `None` when the bridge failed (the
    /// generic prompt follows).
    async fn plan(
        &self,
        runner: &Runner,
        input: &JsonObject,
        secrets: &[String],
    ) -> Option<Decision> {
        let plan = input.get("plan").and_then(Value::as_str)?;
        let deciders = self.deciders(&runner.context).ok()?;
        let head = "*Plan for approval*";
        let body = shown_text(&cut(plan, PLAN_CHARS), secrets);
        let question = Question {
            text: format!("{head}\n{body}\n_:white_check_mark: approve · :x: reject_"),
            options: vec![APPROVE_PLAN, REJECT_PLAN],
            deciders,
            timeout: Duration::from_secs(self.permissions.decision_timeout_secs),
        };
        let asked = match self.ask(&runner.context.thread(), question).await {
            Ok(asked) => asked,
            Err(why) => {
                tracing::warn!(%why, "the plan went to the generic prompt");
                return None;
            }
        };
        let (decision, outcome) = match asked.heard.clone() {
            Heard::Chose { option: 0, user } => (
                Decision::Allow(Value::Object(input.clone())),
                format!(":white_check_mark: Approved by <@{user}>"),
            ),
            Heard::Chose { user, .. } => (
                Decision::Deny(format!(
                    "The plan was rejected in {} by {}. Ask in the thread what to change, then \
                     present a new plan.",
                    self.chat.platform().name(),
                    self.name_of(&user).await
                )),
                format!(":x: Rejected by <@{user}>"),
            ),
            Heard::NoAnswer => (
                Decision::Deny(format!(
                    "The plan was not approved: nobody answered in {} within {} s.",
                    self.chat.platform().name(),
                    self.permissions.decision_timeout_secs
                )),
                format!(
                    ":hourglass: Not approved: no answer within {} s",
                    self.permissions.decision_timeout_secs
                ),
            ),
        };
        self.settle(asked, &format!("{head}\n{body}\n{outcome}"))
            .await;
        Some(decision)
    }

    /// AskUserQuestion over the bridge: each single-select question posted
    /// in turn with one reaction per option, all within one
    /// `decision_timeout_secs`; the answers go back in the input's
    /// `answers` (question text -> chosen label). A multi-select question,
    /// an unreadable one or a failure: allowed with the answers so far, for
    /// the CLI to handle the rest.
    async fn questions(
        &self,
        runner: &Runner,
        mut input: JsonObject,
        secrets: &[String],
    ) -> Decision {
        let Some(questions) = single_select_questions(&input) else {
            return Decision::Allow(Value::Object(input));
        };
        let Ok(deciders) = self.deciders(&runner.context) else {
            return Decision::Allow(Value::Object(input));
        };
        let wait = Duration::from_secs(self.permissions.decision_timeout_secs);
        let deadline = tokio::time::Instant::now() + wait;
        let mut answers = Map::new();
        for q in questions {
            let header = q
                .header
                .as_deref()
                .map(|h| format!(" ({})", shown_text(h, secrets)))
                .unwrap_or_default();
            let head = format!("*Question*{header}: {}", shown_text(&q.question, secrets));
            let lines: Vec<String> = q
                .options
                .iter()
                .enumerate()
                .map(|(i, (label, description))| {
                    let mut line = format!(":{}: {}", NUMBERS[i], shown_text(label, secrets));
                    if let Some(d) = description.as_deref().filter(|d| !d.is_empty()) {
                        line.push_str(&format!(" — {}", shown_text(d, secrets)));
                    }
                    line
                })
                .collect();
            let options = lines.join("\n");
            let question = Question {
                text: format!("{head}\n{options}\n_React with the number of your answer._"),
                options: NUMBERS[..q.options.len()].to_vec(),
                deciders: deciders.clone(),
                timeout: deadline.saturating_duration_since(tokio::time::Instant::now()),
            };
            let asked = match self.ask(&runner.context.thread(), question).await {
                Ok(asked) => asked,
                Err(why) => {
                    tracing::warn!(%why, "a question went back to the CLI unanswered");
                    break;
                }
            };
            match asked.heard.clone() {
                Heard::Chose { option, user } => {
                    let label = &q.options[option].0;
                    let said = format!(
                        "{head}\n{options}\n:ballot_box_with_check: <@{user}> answered *{}*",
                        shown_text(label, secrets)
                    );
                    self.settle(asked, &said).await;
                    answers.insert(q.question.clone(), Value::String(label.clone()));
                }
                Heard::NoAnswer => {
                    let said = format!(
                        "{head}\n{options}\n:hourglass: No answer within {} s",
                        wait.as_secs()
                    );
                    self.settle(asked, &said).await;
                    break;
                }
            }
        }
        if !answers.is_empty() {
            input.insert("answers".into(), Value::Object(answers));
        }
        Decision::Allow(Value::Object(input))
    }

    /// A person's name for a message to the model: "Name (U…)".
    pub(crate) async fn name_of(&self, user: &str) -> String {
        match self.chat.user_name(user).await {
            Ok(name) if name != user => format!("{name} ({user})"),
            _ => user.to_owned(),
        }
    }
}

/// One question of AskUserQuestion.
struct AskedQuestion {
    question: String,
    header: Option<String>,
    /// (label, description)
    options: Vec<(String, Option<String>)>,
}

/// AskUserQuestion's questions when every one is single-select with 1 to
/// 10 options; `None` otherwise (the CLI handles it).
fn single_select_questions(input: &JsonObject) -> Option<Vec<AskedQuestion>> {
    let list = input.get("questions")?.as_array()?;
    if list.is_empty() {
        return None;
    }
    list.iter()
        .map(|q| {
            if q.get("multiSelect").and_then(Value::as_bool) == Some(true) {
                return None;
            }
            let options = q.get("options")?.as_array()?;
            if !(1..=NUMBERS.len()).contains(&options.len()) {
                return None;
            }
            let options = options
                .iter()
                .map(|o| {
                    let label = match o {
                        Value::String(s) => s.clone(),
                        o => o.get("label")?.as_str()?.to_owned(),
                    };
                    let description = o
                        .get("description")
                        .and_then(Value::as_str)
                        .map(str::to_owned);
                    Some((label, description))
                })
                .collect::<Option<Vec<_>>>()?;
            Some(AskedQuestion {
                question: q.get("question")?.as_str()?.to_owned(),
                header: q.get("header").and_then(Value::as_str).map(str::to_owned),
                options,
            })
        })
        .collect()
}

/// Text from the model as a prompt shows it: the session's secret values
/// hidden, channel-wide mentions neutral, escaped for Slack.
fn shown_text(text: &str, secrets: &[String]) -> String {
    escape_mrkdwn(&neutralise_mentions(&hide_secrets(text, secrets)))
}

/// `text` with each of the session's secret values replaced by `[secret]`.
fn hide_secrets(text: &str, secrets: &[String]) -> String {
    let mut shown = text.to_owned();
    for secret in secrets.iter().filter(|s| !s.is_empty()) {
        shown = shown.replace(secret.as_str(), "[secret]");
    }
    shown
}

/// Whether a key's value is a secret by its name.
fn secret_key(key: &str) -> bool {
    let k = key.to_ascii_lowercase().replace(['-', '_'], "");
    [
        "password",
        "passwd",
        "secret",
        "token",
        "apikey",
        "authorization",
        "credential",
        "privatekey",
        "cookie",
    ]
    .iter()
    .any(|s| k.contains(s))
}

/// `value` with the values of secret-named keys hidden at any depth and
/// the session's secret values replaced in every string.
fn redact(value: &Value, secrets: &[String]) -> Value {
    match value {
        Value::String(s) => Value::String(hide_secrets(s, secrets)),
        Value::Array(items) => Value::Array(items.iter().map(|v| redact(v, secrets)).collect()),
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .map(|(k, v)| {
                    let v = if secret_key(k) {
                        Value::String("[hidden]".into())
                    } else {
                        redact(v, secrets)
                    };
                    (hide_secrets(k, secrets), v)
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

/// What a prompt names first for each of the CLI's tools: the input's
/// key, and whether it is a path (shown as its file's name).
fn main_key(tool: &str) -> Option<(&'static str, bool)> {
    Some(match tool {
        "Write" | "Edit" | "MultiEdit" | "Read" => ("file_path", true),
        "NotebookEdit" | "NotebookRead" => ("notebook_path", true),
        "Bash" => ("command", false),
        "WebFetch" => ("url", false),
        "WebSearch" => ("query", false),
        "Glob" | "Grep" => ("pattern", false),
        "LS" => ("path", false),
        "Task" => ("description", false),
        _ => return None,
    })
}

/// Keys taken as the main argument of a tool [`main_key`] does not know,
/// the first one present; a `*path` key is shown as its file's name.
const USUAL_KEYS: [&str; 9] = [
    "file_path",
    "notebook_path",
    "path",
    "command",
    "url",
    "query",
    "pattern",
    "description",
    "name",
];

/// The prompt's first line: "⚠️ Permission requested: *Write* file.txt",
/// the tool (`name`, already cut) and its main argument: a path as its
/// file's name, a command as code, each on one line and cut at
/// [`HEADLINE_ARG_CHARS`]; nothing when the input has none. The session's
/// secret values are hidden, mentions neutral, escaped for the chat.
pub fn headline(name: &str, tool: &str, input: &JsonObject, secrets: &[String]) -> String {
    let tool_shown = shown_text(name, secrets);
    let found = match main_key(tool) {
        Some((key, is_path)) => input.get(key).map(|v| (key, is_path, v)),
        None => USUAL_KEYS
            .iter()
            .find_map(|key| input.get(*key).map(|v| (*key, key.ends_with("path"), v))),
    };
    let Some((key, is_path, Value::String(value))) = found else {
        return format!("{REQUESTED} *{tool_shown}*");
    };
    let value = hide_secrets(value, secrets);
    let mut lines = value.trim().lines();
    let first = lines.next().unwrap_or_default().trim();
    let shown = if is_path {
        std::path::Path::new(first)
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_else(|| first.to_owned())
    } else if lines.next().is_some() {
        format!("{first} …")
    } else {
        first.to_owned()
    };
    if shown.is_empty() {
        return format!("{REQUESTED} *{tool_shown}*");
    }
    let shown = if shown.chars().count() > HEADLINE_ARG_CHARS {
        let kept: String = shown.chars().take(HEADLINE_ARG_CHARS - 1).collect();
        format!("{kept}…")
    } else {
        shown
    };
    let shown = shown_text(&shown, &[]);
    if key == "command" && shown.contains('`') {
        // A code span cannot hold a backtick, and one replaced would show
        // another command (`id` run, 'id' read): the command is shown
        // whole below, in a block that can.
        format!("{REQUESTED} *{tool_shown}* (a command with backticks, below)")
    } else if key == "command" {
        format!("{REQUESTED} *{tool_shown}* `{shown}`")
    } else {
        format!("{REQUESTED} *{tool_shown}* {shown}")
    }
}

/// A tool's input as a person reads it: a command or a path first, then
/// `key: value` lines; values cut at [`VALUE_CHARS`], the whole at
/// [`SUMMARY_CHARS`]. The session's secret values and the values of
/// secret-named keys (at any depth) are hidden. Escaped for Slack,
/// mentions neutral.
pub fn summary(tool: &str, input: &JsonObject, secrets: &[String]) -> String {
    let Value::Object(input) = redact(&Value::Object(input.clone()), secrets) else {
        return String::new();
    };
    let value_text = |v: &Value| -> String {
        let raw = match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        cut(&raw, VALUE_CHARS)
    };
    // The field a person looks at first, for the CLI's common tools.
    let lead = match tool {
        "Bash" => Some("command"),
        "Write" | "Edit" | "MultiEdit" | "Read" | "NotebookEdit" => Some("file_path"),
        "WebFetch" => Some("url"),
        "Glob" | "Grep" => Some("pattern"),
        _ => None,
    };
    let mut lines = Vec::new();
    if let Some(key) = lead
        && let Some(v) = input.get(key)
    {
        lines.push(as_code(&value_text(v)));
    }
    for (key, v) in &input {
        if Some(key.as_str()) == lead {
            continue;
        }
        lines.push(format!("{key}: {}", value_text(v)));
    }
    // The secrets were hidden before cutting, so a cut never leaves half
    // of one.
    shown_text(&cut(&lines.join("\n"), SUMMARY_CHARS), &[])
}

/// `text` as code exactly as it is: a code span, or, when it holds a
/// backtick or a line break, a code block (which shows single backticks
/// as they are; a run of three is broken with zero-width spaces, so that
/// it cannot end the block).
fn as_code(text: &str) -> String {
    if text.contains('`') || text.contains('\n') {
        let text = text.replace("```", "`\u{200b}`\u{200b}`");
        format!("```\n{text}\n```")
    } else {
        format!("`{text}`")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_with_backticks_is_shown_as_it_is() {
        let input = obj(json!({"command": "echo `id` > out"}));
        let line = headline("Bash", "Bash", &input, &[]);
        assert!(
            line.ends_with("*Bash* (a command with backticks, below)"),
            "{line}"
        );
        let below = summary("Bash", &input, &[]);
        assert!(below.starts_with("```\necho `id` &gt; out\n```"), "{below}");
        let plain = obj(json!({"command": "make test"}));
        assert!(headline("Bash", "Bash", &plain, &[]).ends_with("*Bash* `make test`"));
        assert!(summary("Bash", &plain, &[]).starts_with("`make test`"));
        // Three backticks cannot close the block early.
        let fence = obj(json!({"command": "echo ```; rm -rf x"}));
        let below = summary("Bash", &fence, &[]);
        assert_eq!(below.matches("```").count(), 2, "{below}");
    }

    fn obj(v: Value) -> JsonObject {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn summaries_hide_secrets_and_cut_long_values() {
        let input = obj(json!({
            "command": "curl -H 'x: hunter2-value' https://example.com",
            "api_key": "abc",
            "description": "d".repeat(VALUE_CHARS + 5),
        }));
        let s = summary("Bash", &input, &["hunter2-value".into()]);
        assert!(
            s.starts_with("`curl -H 'x: [secret]' https://example.com`"),
            "{s}"
        );
        assert!(s.contains("api_key: [hidden]"), "{s}");
        assert!(!s.contains("hunter2"), "{s}");
        assert!(s.contains("[cut: 5 more characters]"), "{s}");
        let long = obj(
            json!({ "a": "x".repeat(VALUE_CHARS), "b": "y".repeat(VALUE_CHARS), "c": "z".repeat(VALUE_CHARS), "d": "w".repeat(VALUE_CHARS), "e": "v".repeat(VALUE_CHARS) }),
        );
        let s = summary("Other", &long, &[]);
        assert!(s.chars().count() < SUMMARY_CHARS + 40, "{}", s.len());
        assert!(s.ends_with("more characters]"), "{s}");
    }

    #[test]
    fn secrets_are_hidden_at_any_depth_and_before_json_escaping() {
        let secret = "pa\"ss\\word-42";
        let input = obj(json!({
            "env": {"API_TOKEN": "tok-1", "list": [{"Authorization": "Bearer abc"}]},
            "args": ["--key", secret],
            "note": format!("uses {secret}"),
        }));
        let s = summary("Other", &input, &[secret.to_owned()]);
        for leaked in ["tok-1", "Bearer abc", "word-42"] {
            assert!(!s.contains(leaked), "{leaked} in {s}");
        }
        assert!(s.contains(r#""API_TOKEN":"[hidden]""#), "{s}");
        assert!(s.contains("note: uses [secret]"), "{s}");
    }
    #[test]
    fn the_first_line_names_the_tool_and_its_main_argument() {
        let head = |tool: &str, input: Value| headline(tool, tool, &obj(input), &[]);
        let cases = [
            (
                "Write",
                json!({"file_path": "/work/s1/file.txt", "content": "x"}),
                "*Write* file.txt",
            ),
            (
                "Edit",
                json!({"file_path": "src/main.rs", "old_string": "a"}),
                "*Edit* main.rs",
            ),
            (
                "Bash",
                json!({"command": "npm test", "description": "Run the tests"}),
                "*Bash* `npm test`",
            ),
            (
                "Bash",
                json!({"command": "echo id\nrm -rf /tmp/x"}),
                "*Bash* `echo id …`",
            ),
            (
                "Bash",
                json!({"command": "echo `id`\nrm -rf /tmp/x"}),
                "*Bash* (a command with backticks, below)",
            ),
            (
                "WebFetch",
                json!({"url": "https://example.com/a?b=1&c=<2>", "prompt": "p"}),
                "*WebFetch* https://example.com/a?b=1&amp;c=&lt;2&gt;",
            ),
            // A tool of another server: the first usual key.
            (
                "mcp__fs__move",
                json!({"mode": "fast", "path": "/a/b/report.pdf"}),
                "*mcp__fs__move* report.pdf",
            ),
            // Nothing to name, or not a string: the tool alone.
            ("ExitPlanMode", json!({"plan": "Ship it"}), "*ExitPlanMode*"),
            ("Bash", json!({"command": 42}), "*Bash*"),
        ];
        for (tool, input, want) in cases {
            assert_eq!(head(tool, input), format!("{REQUESTED} {want}"));
        }
        // Cut at the limit and one past it.
        let at = "x".repeat(HEADLINE_ARG_CHARS);
        assert_eq!(
            head("WebSearch", json!({"query": at})),
            format!(":warning: Permission requested: *WebSearch* {at}")
        );
        let past = "y".repeat(HEADLINE_ARG_CHARS + 1);
        assert_eq!(
            head("WebSearch", json!({"query": past})),
            format!(
                ":warning: Permission requested: *WebSearch* {}…",
                "y".repeat(HEADLINE_ARG_CHARS - 1)
            )
        );
        // No mention, no secret.
        let line = headline(
            "Bash",
            "Bash",
            &obj(json!({"command": "curl -H 'x: hunter2' <!channel> @here"})),
            &["hunter2".into()],
        );
        assert!(!line.contains("hunter2"), "{line}");
        assert!(
            !line.contains("<!channel>") && !line.contains("@here"),
            "{line}"
        );
        assert!(line.contains("@\u{2060}here"), "{line}");
        assert!(line.contains("[secret]"), "{line}");
    }

    #[test]
    fn only_single_select_questions_are_bridged() {
        let one = obj(
            json!({"questions": [{"question": "Which?", "header": "Pick", "multiSelect": false,
            "options": [{"label": "A", "description": "first"}, {"label": "B", "description": "second"}]}]}),
        );
        let qs = single_select_questions(&one).expect("bridged");
        assert_eq!(qs[0].options[1].0, "B");
        let multi = obj(
            json!({"questions": [{"question": "Which?", "header": "Pick", "multiSelect": true,
            "options": [{"label": "A"}, {"label": "B"}]}]}),
        );
        assert!(single_select_questions(&multi).is_none());
        assert!(single_select_questions(&obj(json!({"questions": []}))).is_none());
    }

    #[test]
    fn decisions_have_the_clis_shape() {
        assert_eq!(
            Decision::Allow(json!({"a": 1})).to_json(),
            json!({"behavior": "allow", "updatedInput": {"a": 1}})
        );
        assert_eq!(
            Decision::Deny("no".into()).to_json(),
            json!({"behavior": "deny", "message": "no"})
        );
    }
}
