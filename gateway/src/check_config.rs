//! `calvin-gateway check-config FILE`: everything wrong with a
//! `gateway.toml`, each problem with its key and line, before a restart
//! finds it. `serve`, `mcp` and `env-file` run the same checks before they
//! start.
//!
//! The file is read past serde's errors ([`calvin_common::config_check`]:
//! unknown keys, types, a malformed `serve.listen` or `serve.metrics`), then
//! [`GatewayConfig::problems`] names every value out of its range or of
//! its mode, and this module what the file names: the Slack API's URL, the
//! agent's socket, the secret store's and the sessions' folders, the
//! registration token files (secrets: open to their owner alone), the
//! launcher's program, and the workspace's repositories and their cache.

use std::os::unix::fs::FileTypeExt;
use std::path::Path;

use calvin_common::config_check::{
    self, Doc, Problem, error_at, not_absolute, not_executable, private, uncreatable_dir,
};

use crate::config::{GatewayConfig, Mode};
use crate::secrets::StoreDir;
use crate::workspace::{Workspace, WorkspaceError};

/// Checks the configuration at `path`: the configuration (its `dir` set)
/// and a one-line summary, or every problem found, in the file's order.
pub fn check(path: &Path) -> Result<(GatewayConfig, String), Vec<Problem>> {
    let dir = GatewayConfig::dir_of(path);
    let mut repos = 0;
    let mut config = config_check::check(path, |doc, config: &GatewayConfig| {
        let mut problems: Vec<Problem> = config
            .problems()
            .into_iter()
            .map(|(key, message)| doc.problem(key, message))
            .collect();
        if let Some(slack) = &config.slack
            && let Err(e) = crate::slack::Connector::for_url(&slack.api_url)
        {
            problems.push(doc.problem("slack.api_url", e.to_string()));
        }
        problems.extend(files(doc, config));
        match workspace(config, &dir) {
            Ok((n, cache)) => {
                repos = n;
                if let Some(why) = cache {
                    problems.push(doc.problem("workspace.cache_dir", why));
                }
            }
            Err((key, why)) => problems.push(doc.problem(key, why)),
        }
        problems
    })?;
    config.dir = dir;
    let summary = summary(path, &config, repos);
    Ok((config, summary))
}

/// The files and folders the configuration names, but the workspace's:
/// each where the gateway will look for it (full paths: they are taken as
/// written), what must be there, there.
fn files(doc: &Doc<'_>, config: &GatewayConfig) -> Vec<Problem> {
    let mut problems = Vec::new();
    let mut add = |key: &str, path: &Path, check: &dyn Fn(&Path) -> Option<String>| {
        if let Some(why) = not_absolute(path).or_else(|| check(path)) {
            problems.push(doc.problem(key, why));
        }
    };
    if config.mode == Mode::Hosted
        && let Some(socket) = &config.agent_socket
    {
        add("agent_socket", socket, &agent_socket);
    }
    for (key, dir) in [
        ("secrets.store_dir", &config.secrets.store_dir),
        ("secrets.runtime_dir", &config.secrets.runtime_dir),
    ] {
        if let Some(dir) = dir {
            add(key, dir, &uncreatable_dir);
        }
    }
    // The daemon's, made if missing; its default too (`mcp` reads it).
    let registration = config.token_path();
    add("serve.token_file", &registration, &registration_token);
    if let Some(file) = &config.daemon.token_file
        && *file != registration
    {
        add("daemon.token_file", file, &private);
    }
    // A bare name is looked up in PATH when a session is spawned.
    if let Some(program) = config.launcher.command.first()
        && program.contains('/')
    {
        add("launcher.command[0]", Path::new(program), &not_executable);
    }
    problems
}

/// Why the agent's control socket cannot be at `path`, if it cannot:
/// something else is there, or its folder cannot be made. (The agent need
/// not be running: a preview says so then.)
fn agent_socket(path: &Path) -> Option<String> {
    match std::fs::metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => None,
        Ok(_) => Some(format!("{} is not a socket", path.display())),
        Err(_) => path.parent().and_then(uncreatable_dir),
    }
}

/// Why the daemon's registration token file is unfit, if it is: there but
/// unreadable or open to others, or missing where it cannot be made.
fn registration_token(path: &Path) -> Option<String> {
    if std::fs::symlink_metadata(path).is_ok() {
        private(path)
    } else {
        path.parent().and_then(uncreatable_dir)
    }
}

/// The workspace as checkout_repo will read it: how many repositories,
/// and why their cache cannot be made if it cannot; or the key that is
/// wrong and why.
fn workspace(
    config: &GatewayConfig,
    dir: &Path,
) -> Result<(usize, Option<String>), (String, String)> {
    let defined = &config.workspace;
    match Workspace::from_config(defined, dir) {
        Ok(None) => Ok((0, None)),
        Ok(Some(workspace)) => Ok((
            workspace.repos().count(),
            uncreatable_dir(workspace.cache_dir()),
        )),
        Err(e) => {
            // An inline repository, by its name (the last of a pair).
            let inline = |name: &str, field: &str| match defined
                .repos
                .iter()
                .rposition(|r| r.name == name)
            {
                Some(i) if defined.file.is_none() => format!("workspace.repos[{i}].{field}"),
                _ => "workspace.file".to_owned(),
            };
            let key = match &e {
                WorkspaceError::BadName { name } => inline(name, "name"),
                WorkspaceError::DuplicateName { second, .. } => inline(second, "name"),
                WorkspaceError::BadUrl { name } => inline(name, "url"),
                WorkspaceError::DuplicateOwnerName { second, .. } => inline(second, "url"),
                WorkspaceError::NoCacheDir => "workspace.cache_dir".to_owned(),
                WorkspaceError::InlineAndFile { .. }
                | WorkspaceError::ReadFile { .. }
                | WorkspaceError::ParseFile { .. }
                | WorkspaceError::NoRepos { .. } => "workspace.file".to_owned(),
            };
            let why = match &e {
                // On one line, with the line in that file.
                WorkspaceError::ParseFile { path, source } => {
                    let text = std::fs::read_to_string(path).unwrap_or_default();
                    format!("the workspace file {}", error_at(path, &text, source))
                }
                _ => e.to_string(),
            };
            Err((key, why))
        }
    }
}

/// One line: what the gateway would run.
fn summary(path: &Path, config: &GatewayConfig, repos: usize) -> String {
    let mut parts = vec![
        format!("mode {}", config.mode.as_str()),
        format!("serve on {}", config.serve.listen),
    ];
    if let Some(metrics) = config.serve.metrics {
        parts.push(format!("metrics on {metrics}"));
    }
    if config.mode == Mode::Hosted
        && let Some(socket) = &config.agent_socket
    {
        parts.push(format!("agent at {}", socket.display()));
    }
    if let Some(url) = &config.daemon.url {
        parts.push(format!("daemon at {url}"));
    }
    parts.push(match repos {
        0 => "no workspace".to_owned(),
        1 => "1 workspace repository".to_owned(),
        n => format!("{n} workspace repositories"),
    });
    parts.push(if config.uploads.enabled {
        format!("uploads up to {} bytes", config.uploads.max_bytes)
    } else {
        "uploads off".to_owned()
    });
    parts.push(match config.store_dir() {
        StoreDir::Configured(dir) => format!("secrets in {}", dir.display()),
        // Not a problem of the file: only request_secret refuses then.
        StoreDir::Default(Some(dir)) => match uncreatable_dir(&dir) {
            None => format!("secrets in {} (the default)", dir.display()),
            Some(why) => format!("no usable secret store folder ({why}): set [secrets] store_dir"),
        },
        StoreDir::Default(None) => "no secret store folder: set [secrets] store_dir".to_owned(),
    });
    format!("{}: ok: {}", path.display(), parts.join(", "))
}
