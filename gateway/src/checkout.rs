//! checkout_repo: the tool around [`crate::workspace`]. Every name is
//! resolved first (an unknown or unpublished one refuses the call with
//! every problem), then each repository is checked out in turn.

use rmcp::model::JsonObject;
use serde_json::{Value, json};

use crate::args::{problems, unknown_args};
use crate::tools::{Gateway, Runner, ToolOutcome};

/// At most this many repositories per call (the spec's).
pub const MAX_REPOS: usize = 10;

impl Gateway {
    pub(crate) async fn checkout_repo(&self, runner: &Runner, raw: &JsonObject) -> ToolOutcome {
        let mut found = unknown_args(raw, &["repos"]);
        let names: Vec<String> = match raw.get("repos") {
            None | Some(Value::Null) => {
                found.push(format!(
                    "repos is required: 1 to {MAX_REPOS} repository names"
                ));
                vec![]
            }
            Some(Value::Array(items)) => {
                if items.is_empty() || items.len() > MAX_REPOS {
                    found.push(format!(
                        "repos has {} names; give 1 to {MAX_REPOS}",
                        items.len()
                    ));
                }
                let mut names: Vec<String> = Vec::new();
                for item in items {
                    match item.as_str().map(str::trim) {
                        Some(name) if !name.is_empty() => {
                            if !names.iter().any(|n| n.eq_ignore_ascii_case(name)) {
                                names.push(name.to_owned());
                            }
                        }
                        _ => {
                            found.push(format!("each repository is a non-empty string, got {item}"))
                        }
                    }
                }
                names
            }
            Some(v) => {
                found.push(format!("repos must be an array of names, got {v}"));
                vec![]
            }
        };
        if !found.is_empty() {
            return Err(problems("nothing was checked out", &found));
        }
        let context = &runner.context;
        let Some(workspace) = &self.workspace else {
            let found: Vec<String> = names
                .iter()
                .map(|n| crate::workspace::ResolveError::Unknown(n.clone()).to_string())
                .collect();
            return Err(problems(
                "nothing was checked out (this gateway has no workspace definition)",
                &found,
            ));
        };
        let mut repos = Vec::new();
        for name in &names {
            match workspace.resolve(name) {
                Ok(repo) => repos.push(repo.clone()),
                Err(why) => found.push(why.to_string()),
            }
        }
        if !found.is_empty() {
            // The refusal points at AGENTS.md's list: make sure it is there
            // (it was written when the session started; it may have been
            // edited away since).
            self.keep_workspace_list(&context.session_dir).await;
            return Err(problems("nothing was checked out", &found));
        }
        let branch = context.branch();
        let mut done = Vec::new();
        let mut lines = Vec::new();
        for repo in &repos {
            match workspace
                .checkout(repo, &context.session_dir, &branch)
                .await
            {
                Ok(c) => {
                    lines.push(format!(
                        "{}: {} at {} on branch {}",
                        c.name,
                        if c.already {
                            "already checked out"
                        } else {
                            "checked out"
                        },
                        c.path.display(),
                        c.branch
                    ));
                    done.push(json!({
                        "name": c.name, "path": c.path, "branch": c.branch,
                        "already": c.already, "cloned": c.cloned,
                    }));
                }
                Err(err) => {
                    let mut text = format!("{}: not checked out: {err}", repo.name);
                    if !lines.is_empty() {
                        text.push_str(&format!(
                            "\nchecked out before the failure:\n{}",
                            lines.join("\n")
                        ));
                    }
                    return Err(text);
                }
            }
        }
        Ok((lines.join("\n"), json!({ "repos": done })))
    }
}
