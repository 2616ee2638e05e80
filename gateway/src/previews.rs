//! preview, unpreview and preview_log: the agent's control API
//! (`/v1/previews` on its Unix socket) for a session, and the previews a
//! session's end takes down ([`crate::session_previews`] says which).
//! preview_log's text is [`crate::preview_log`]'s.

use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::time::Duration;

use calvin_common::control_client::{Answer, ClientError, ControlClient};
use calvin_proto::PreviewName;
use calvin_proto::control::{
    PreviewCreated, PreviewDeleted, PreviewList, PreviewRequest, RequestLog,
};
use rmcp::model::JsonObject;
use serde_json::{Value, json};

use crate::args::{Args, integer};
use crate::preview_log;
use crate::session_previews::Ownership;
use crate::tools::{Gateway, Runner, ToolOutcome};

/// preview's `ttl_secs`: one minute to seven days.
pub const TTL_SECS: RangeInclusive<i64> = 60..=604_800;
/// preview_log's `limit`: its default and its range.
pub const LOG_LIMIT_DEFAULT: i64 = 20;
pub const LOG_LIMIT: RangeInclusive<i64> = 1..=100;
/// The most requests one answer of the agent's log holds.
const ONE_ANSWER_MAX: usize = 1000;
/// The longest a session's end waits for the agent to take one preview
/// down (a stdio client kills its server 2 s after closing its stdin).
const TAKE_DOWN_TIMEOUT: Duration = Duration::from_millis(1500);

/// An integer argument in `range` (absent: `None`), with a message of its
/// own for each way it misses: `what` names its unit ("seconds").
fn bounded(
    a: &mut Args,
    key: &str,
    range: &RangeInclusive<i64>,
    what: &str,
    said: impl Fn(i64) -> String,
) -> Option<i64> {
    let v = a.raw().get(key)?;
    if v.is_null() {
        return None;
    }
    let Some(n) = integer(v) else {
        a.found.push(format!(
            "{key} must be a whole number of {what} ({} to {}), got {v}",
            range.start(),
            range.end()
        ));
        return None;
    };
    if n < *range.start() {
        a.found
            .push(format!("{key} is {n}; at least {}", said(*range.start())));
        None
    } else if n > *range.end() {
        a.found
            .push(format!("{key} is {n}; at most {}", said(*range.end())));
        None
    } else {
        Some(n)
    }
}

/// A preview's name: one DNS label, as the agent will check it.
fn preview_name(a: &mut Args, required: bool) -> Option<String> {
    match a.raw().get("name") {
        None | Some(Value::Null) => {
            if required {
                a.found
                    .push("name is required: the label at the start of the preview's URL".into());
            }
            None
        }
        Some(Value::String(s)) => match PreviewName::parse(s) {
            Ok(n) => Some(n.to_string()),
            Err(e) => {
                a.found.push(format!("name {s:?}: {e}"));
                None
            }
        },
        Some(v) => {
            a.found
                .push(format!("name must be a string (one DNS label), got {v}"));
            None
        }
    }
}

fn seconds(n: i64) -> String {
    match n {
        60 => "60 (one minute)".into(),
        604_800 => "604800 (7 days)".into(),
        n => n.to_string(),
    }
}

/// preview's arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreviewArgs {
    pub port: i64,
    pub name: Option<String>,
    pub ttl_secs: Option<i64>,
    pub keep: bool,
    /// Only visitors with the share link get in.
    pub protect: bool,
}

impl PreviewArgs {
    pub fn parse(args: &JsonObject) -> Result<Self, String> {
        let mut a = Args::new(args, &["port", "name", "ttl_secs", "keep", "protect"]);
        let port = match args.get("port") {
            None | Some(Value::Null) => {
                a.found
                    .push("port is required: the port the server listens on, 1 to 65535".into());
                None
            }
            Some(v) => match integer(v) {
                Some(p) if (1..=65535).contains(&p) => Some(p),
                _ => {
                    a.found
                        .push(format!("port must be an integer from 1 to 65535, got {v}"));
                    None
                }
            },
        };
        let name = preview_name(&mut a, false);
        let ttl_secs = bounded(&mut a, "ttl_secs", &TTL_SECS, "seconds", seconds);
        let keep = a.boolean("keep").unwrap_or(false);
        let protect = a.boolean("protect").unwrap_or(false);
        match port {
            Some(port) if a.found.is_empty() => Ok(Self {
                port,
                name,
                ttl_secs,
                keep,
                protect,
            }),
            _ => Err(crate::args::problems("no preview was made", &a.found)),
        }
    }
}

/// preview_log's arguments: the latest `limit` requests, or request `id`
/// in full.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogArgs {
    pub name: String,
    pub limit: i64,
    pub id: Option<u64>,
}

impl LogArgs {
    pub fn parse(args: &JsonObject) -> Result<Self, String> {
        let mut a = Args::new(args, &["name", "limit", "id"]);
        let name = preview_name(&mut a, true);
        let limit = bounded(&mut a, "limit", &LOG_LIMIT, "requests", |n| n.to_string());
        let id = match args.get("id") {
            None | Some(Value::Null) => None,
            Some(v) => match integer(v) {
                Some(id) if id >= 1 => Some(id),
                _ => {
                    a.found.push(format!(
                        "id must be a request's id as preview_log lists it (#12 is 12), got {v}"
                    ));
                    None
                }
            },
        };
        if limit.is_some() && id.is_some() {
            a.found.push(
                "give id (one request in full) or limit (the latest requests), not both".into(),
            );
        }
        match name {
            Some(name) if a.found.is_empty() => Ok(Self {
                name,
                limit: limit.unwrap_or(LOG_LIMIT_DEFAULT),
                id: id.map(|id| id as u64),
            }),
            _ => Err(crate::args::problems(
                "the request log was not read",
                &a.found,
            )),
        }
    }
}

/// The agent's control API, for tools.
struct Agent {
    socket: PathBuf,
    client: ControlClient,
}

impl Agent {
    fn of(gateway: &Gateway) -> Result<Agent, String> {
        let socket = gateway
            .agent_socket
            .clone()
            .ok_or("no agent_socket is configured on this gateway")?;
        let client = ControlClient::new(&socket);
        Ok(Agent { socket, client })
    }

    fn failed(&self, err: &ClientError) -> String {
        agent_unreachable(&self.socket, err)
    }

    /// The names the agent previews now; `None` when it cannot say.
    async fn names(&self) -> Option<Vec<String>> {
        let list: PreviewList = self.client.list().await.ok()?.parse().ok()?;
        Some(list.previews.into_iter().map(|p| p.name).collect())
    }
}

pub(crate) fn agent_unreachable(socket: &Path, err: &ClientError) -> String {
    match err {
        ClientError::Unreachable { .. } => format!(
            "the calvin agent is not running at {} (start it with `calvin-agent up`)",
            socket.display()
        ),
        other => format!("the calvin agent at {} failed: {other}", socket.display()),
    }
}

impl Gateway {
    pub(crate) async fn preview(&self, runner: &Runner, args: &JsonObject) -> ToolOutcome {
        let request = PreviewArgs::parse(args)?;
        let agent = Agent::of(self)?;
        // Whether the agent had it before: a preview made elsewhere is
        // not this session's to take down.
        let before = agent.names().await.unwrap_or_default();
        let answer = agent
            .client
            .create(&PreviewRequest {
                port: request.port,
                name: request.name.clone(),
                ttl_secs: request.ttl_secs,
                probe: None,
                // Without protect, a protected preview stays protected.
                protect: request.protect.then_some(true),
                expires_secs: None,
            })
            .await
            .map_err(|e| agent.failed(&e))?;
        let created: PreviewCreated = answer
            .parse()
            .map_err(|e| format!("no preview was made: {}", e.error))?;
        let ttl = request
            .ttl_secs
            .map(|secs| Duration::from_secs(secs.unsigned_abs()));
        let ownership = runner.previews.made(
            &created.name,
            before.contains(&created.name),
            request.keep,
            ttl,
        );
        if ownership == Ownership::SessionEnded {
            let _ = agent.client.unpreview(&created.name).await;
            return Err(
                "no preview was made: this session ended while it was being made, so it was \
                 taken down"
                    .into(),
            );
        }
        Ok((
            created_text(&created, request.port, ownership),
            json!({
                "url": created.url,
                "name": created.name,
                "port": request.port,
                "listening": created.listening,
                "reached": created.reached,
                "warnings": created.warnings,
                "expires_at": created.expires_at,
                "protected": created.share_url.is_some(),
                "share_url": created.share_url,
                "share_expires": created.share_expires,
                "ends_with_session": ownership.ends_with_session(),
            }),
        ))
    }

    pub(crate) async fn unpreview(&self, runner: &Runner, args: &JsonObject) -> ToolOutcome {
        let mut a = Args::new(args, &["name"]);
        let name = match args.get("name") {
            Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
            Some(v) => {
                a.found
                    .push(format!("name must be the preview's name, got {v}"));
                None
            }
            None => {
                a.found
                    .push("name is required: the label at the start of the preview's URL".into());
                None
            }
        };
        let (Some(name), true) = (name, a.found.is_empty()) else {
            return Err(crate::args::problems("nothing was taken down", &a.found));
        };
        let agent = Agent::of(self)?;
        let answer = agent
            .client
            .unpreview(&name)
            .await
            .map_err(|e| agent.failed(&e))?;
        let deleted: PreviewDeleted = answer.parse().map_err(|e| {
            if e.code == "unknown_name" {
                runner.previews.taken_down(&name);
            }
            format!("nothing was taken down: {}", e.error)
        })?;
        runner.previews.taken_down(&deleted.name);
        Ok((
            format!("the preview {} is down", deleted.name),
            json!({ "name": deleted.name }),
        ))
    }

    pub(crate) async fn preview_log(&self, args: &JsonObject) -> ToolOutcome {
        let request = LogArgs::parse(args)?;
        let agent = Agent::of(self)?;
        // The log answers the newest `limit` after `after`: for one
        // request, every one from it on, as many as one answer holds (a
        // log keeps 100 per preview by default).
        let query = match request.id {
            Some(id) => format!("after={}&limit={ONE_ANSWER_MAX}", id - 1),
            None => format!("limit={}", request.limit),
        };
        let answer = agent
            .client
            .requests(&request.name, &query)
            .await
            .map_err(|e| agent.failed(&e))?;
        let log = log_of(&answer, &agent.socket)?;
        match request.id {
            None => Ok((
                preview_log::list(&log),
                serde_json::to_value(&log).unwrap_or_default(),
            )),
            Some(id) => {
                let Some(logged) = log.requests.iter().find(|r| r.id == id) else {
                    return Err(format!(
                        "the log of {} has no request {id}: it keeps the latest requests \
                         only (preview_log without id lists them)",
                        log.name
                    ));
                };
                Ok((
                    preview_log::one(&log.name, logged),
                    json!({ "name": log.name, "request": logged }),
                ))
            }
        }
    }

    /// A session ended: the previews that end with it are taken down, at
    /// once, each within [`TAKE_DOWN_TIMEOUT`]; the names taken down (or
    /// found gone).
    pub async fn end_session_previews(&self, runner: &Runner) -> Vec<String> {
        let names = runner.previews.end();
        if names.is_empty() {
            return names;
        }
        let Ok(agent) = Agent::of(self) else {
            return Vec::new();
        };
        // All at once: a stdio client may stop the gateway soon after it
        // closes its input.
        let mut asked = tokio::task::JoinSet::new();
        for name in names {
            let client = ControlClient::new(&agent.socket);
            asked.spawn(async move {
                let answer = tokio::time::timeout(TAKE_DOWN_TIMEOUT, client.unpreview(&name)).await;
                (name, answer)
            });
        }
        let mut down = Vec::new();
        while let Some(Ok((name, answer))) = asked.join_next().await {
            match answer {
                Ok(Ok(answer)) => match answer.parse::<PreviewDeleted>() {
                    Ok(_) => {
                        tracing::info!(preview = %name, "the session ended: its preview is down");
                        down.push(name);
                    }
                    Err(e) if e.code == "unknown_name" => down.push(name),
                    Err(e) => {
                        tracing::warn!(preview = %name, err = %e.error, "the session ended, its preview was not taken down")
                    }
                },
                Ok(Err(err)) => {
                    tracing::warn!(preview = %name, err = %agent.failed(&err), "the session ended, its preview was not taken down")
                }
                Err(_) => {
                    tracing::warn!(preview = %name, "the session ended; the agent did not take its preview down in time")
                }
            }
        }
        // In name order, whichever answered first.
        down.sort();
        down
    }
}

/// The request log out of the agent's answer, or a refusal that says why.
fn log_of(answer: &Answer, socket: &Path) -> Result<RequestLog, String> {
    answer.parse().map_err(|e| match e.code.as_str() {
        // An agent from before the request log.
        "not_found" => format!(
            "the request log was not read: the calvin agent at {} keeps no request log \
             (update calvin-agent)",
            socket.display()
        ),
        _ => format!("the request log was not read: {}", e.error),
    })
}

/// preview's answer: the URL, the name, where the server was reached, when
/// the preview ends and what the probe found.
fn created_text(created: &PreviewCreated, port: i64, ownership: Ownership) -> String {
    let mut text = format!(
        "{} serves port {port} (name {}); ",
        created.url, created.name
    );
    match &created.reached {
        Some(at) => text.push_str(&format!(
            "a server is listening on the port (reached at {at})."
        )),
        None if created.listening => text.push_str("a server is listening on the port."),
        None => {
            text.push_str("nothing is listening on the port yet; the URL works once a server does.")
        }
    }
    let ends = created
        .expires_at
        .as_deref()
        .map(|at| format!("at {at} (its ttl_secs)"));
    text.push_str("\nIt is taken down ");
    text.push_str(&match (ownership, ends) {
        (Ownership::EndsWithSession, Some(at)) => format!(
            "{at} or when this session ends, whichever comes first (keep: true keeps it after \
             the session)."
        ),
        (Ownership::EndsWithSession, None) => {
            "when this session ends (keep: true keeps it after the session).".into()
        }
        (Ownership::Kept, Some(at)) => format!("{at}; it stays up after this session (keep)."),
        (Ownership::Kept, None) => {
            "by unpreview only; it stays up after this session (keep).".into()
        }
        (Ownership::Existing, Some(at)) => {
            format!("{at}; it existed before this call, so it stays up after this session.")
        }
        (Ownership::Existing, None) => {
            "by unpreview only: it existed before this call, so it stays up after this session."
                .into()
        }
        (Ownership::SessionEnded, _) => "now: this session has ended.".into(),
    });
    if let Some(link) = &created.share_url {
        let until = created
            .share_expires
            .as_deref()
            .map(|at| format!(" until {at}"))
            .unwrap_or_default();
        text.push_str(&format!(
            "\nProtected: the URL alone answers 401; share this link instead (it works{until}): \
             {link}"
        ));
    }
    for w in &created.warnings {
        text.push_str(&format!("\nWarning: {} Fix: {}", w.message, w.fix));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(v: Value) -> JsonObject {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn ttl_secs_is_checked_at_each_limit_with_its_own_message() {
        let ok = |ttl: Value| PreviewArgs::parse(&obj(json!({"port": 3000, "ttl_secs": ttl})));
        assert_eq!(ok(json!(60)).unwrap().ttl_secs, Some(60));
        assert_eq!(ok(json!("604800")).unwrap().ttl_secs, Some(604_800));
        let err = ok(json!(59)).unwrap_err();
        assert!(
            err.contains("ttl_secs is 59; at least 60 (one minute)"),
            "{err}"
        );
        let err = ok(json!(604_801)).unwrap_err();
        assert!(
            err.contains("ttl_secs is 604801; at most 604800 (7 days)"),
            "{err}"
        );
        let err = ok(json!("2h")).unwrap_err();
        assert!(
            err.contains("ttl_secs must be a whole number of seconds (60 to 604800), got \"2h\""),
            "{err}"
        );
    }

    #[test]
    fn preview_arguments_list_every_problem() {
        let err = PreviewArgs::parse(&obj(
            json!({"port": 0, "name": "Bad_Name", "keep": "yes", "ttl": 60}),
        ))
        .unwrap_err();
        for expected in [
            "no preview was made: 4 problem(s)",
            "port must be an integer from 1 to 65535, got 0",
            "name \"Bad_Name\"",
            "keep must be true or false, got \"yes\"",
            "unknown argument \"ttl\" (this tool takes port, name, ttl_secs, keep, protect)",
        ] {
            assert!(err.contains(expected), "{expected:?} missing from:\n{err}");
        }
        let args = PreviewArgs::parse(&obj(json!({"port": "8080", "keep": true}))).unwrap();
        assert_eq!(
            args,
            PreviewArgs {
                port: 8080,
                name: None,
                ttl_secs: None,
                keep: true,
                protect: false,
            }
        );
    }

    #[test]
    fn preview_log_limits_have_their_own_messages() {
        let parse = |v: Value| LogArgs::parse(&obj(v));
        assert_eq!(parse(json!({"name": "web"})).unwrap().limit, 20);
        assert_eq!(
            parse(json!({"name": "web", "limit": 100})).unwrap().limit,
            100
        );
        assert_eq!(parse(json!({"name": "web", "limit": 1})).unwrap().limit, 1);
        for (args, expected) in [
            (
                json!({"name": "web", "limit": 101}),
                "limit is 101; at most 100",
            ),
            (json!({"name": "web", "limit": 0}), "limit is 0; at least 1"),
            (
                json!({"name": "web", "limit": "all"}),
                "limit must be a whole number of requests (1 to 100), got \"all\"",
            ),
            (
                json!({"name": "web", "id": 0}),
                "id must be a request's id as preview_log lists it (#12 is 12), got 0",
            ),
            (json!({"limit": 5}), "name is required"),
            (json!({"name": "web", "id": 3, "limit": 5}), "not both"),
        ] {
            let err = parse(args.clone()).unwrap_err();
            assert!(
                err.contains(expected),
                "{args}: {expected:?} missing from:\n{err}"
            );
        }
        assert_eq!(
            parse(json!({"name": "web", "id": "7"})).unwrap().id,
            Some(7)
        );
    }

    #[test]
    fn the_answer_says_where_the_server_was_reached_and_when_it_ends() {
        let created = PreviewCreated {
            url: "https://web.example.test".into(),
            name: "web".into(),
            listening: true,
            reached: Some("[::1]:3000".into()),
            warnings: vec![calvin_proto::control::Warning {
                code: "ipv6_loopback_only".into(),
                message: "The server listens on [::1] only.".into(),
                fix: "Listen on 127.0.0.1 too.".into(),
            }],
            expires_at: Some("2026-12-02T10:00:00Z".into()),
            share_url: None,
            share_expires: None,
        };
        let text = created_text(&created, 3000, Ownership::EndsWithSession);
        assert_eq!(
            text,
            "https://web.example.test serves port 3000 (name web); a server is listening on the \
             port (reached at [::1]:3000).\nIt is taken down at 2026-12-02T10:00:00Z (its \
             ttl_secs) or when this session ends, whichever comes first (keep: true keeps it \
             after the session).\nWarning: The server listens on [::1] only. Fix: Listen on \
             127.0.0.1 too."
        );
        let quiet = PreviewCreated {
            listening: false,
            reached: None,
            warnings: Vec::new(),
            expires_at: None,
            ..created
        };
        let text = created_text(&quiet, 3000, Ownership::Existing);
        assert!(
            text.contains("nothing is listening on the port yet"),
            "{text}"
        );
        assert!(
            text.ends_with("it existed before this call, so it stays up after this session."),
            "{text}"
        );
    }
}
