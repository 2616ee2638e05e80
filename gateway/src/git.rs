//! The one way the gateway runs git: [`git`] (and [`git_within`] with a
//! time limit of the caller's choosing).
//!
//! git runs as a child process, never through a shell, with its arguments
//! given one by one. It never asks anyone anything: stdin is `/dev/null`,
//! `GIT_TERMINAL_PROMPT=0` and `GIT_ASKPASS=true` turn a credential prompt
//! into a failure, and `LC_ALL=C` keeps its messages in English. It works
//! on the repository `dir` is in, whatever `GIT_DIR` and its kin say. It
//! runs in a process group of its own, and when it does not finish in time
//! the whole group (git and the helpers it started, such as
//! `git-remote-https` or `ssh`) is killed.
//!
//! A [`GitError`] names the subcommand and carries git's last non-empty
//! line of stderr (skipping the advice git adds after any failure to reach
//! a remote, "Please make sure you have the correct access rights"), e.g.
//! `git fetch failed: fatal: 'origin' does not appear to be a git
//! repository`. Credentials in URLs (`https://user:token@host`) are removed
//! from everything a [`GitError`] holds.

use std::io::ErrorKind;
use std::path::Path;
use std::pin::pin;
use std::process::Stdio;
use std::time::Duration;

/// How long a git command may run unless the caller says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// Why a git command did not succeed. `Display` names the subcommand (not
/// the whole command line) and git's own words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GitError {
    #[error("git is not installed")]
    NotInstalled,

    #[error("git {command} could not be started in {dir}: {reason}")]
    Spawn {
        command: String,
        dir: String,
        reason: String,
    },

    #[error("git {command} failed: {message}")]
    Failed {
        /// The subcommand, e.g. `fetch`.
        command: String,
        /// Every argument, credentials removed.
        args: Vec<String>,
        /// The exit code, or `None` when git was killed by a signal.
        code: Option<i32>,
        /// git's last non-empty line of stderr (not counting its generic
        /// advice), or the exit status when stderr was empty.
        message: String,
    },

    #[error("git {command} did not finish within {}", human_duration(*timeout))]
    TimedOut {
        command: String,
        args: Vec<String>,
        timeout: Duration,
    },
}

/// origin's default branch and its commit, when `origin/HEAD` (in the
/// repository of `dir`) names one.
pub async fn origin_head(dir: &Path) -> Result<Option<(String, String)>, GitError> {
    let target = match git(
        dir,
        &["symbolic-ref", "--quiet", "refs/remotes/origin/HEAD"],
    )
    .await
    {
        Ok(target) => target,
        Err(GitError::Failed { .. }) => return Ok(None),
        Err(other) => return Err(other),
    };
    let Some(branch) = target.strip_prefix("refs/remotes/origin/") else {
        return Ok(None);
    };
    let commit = [
        "rev-parse",
        "--verify",
        "--quiet",
        "refs/remotes/origin/HEAD^{commit}",
    ];
    match git(dir, &commit).await {
        Ok(commit) => Ok(Some((branch.to_owned(), commit))),
        Err(GitError::Failed { .. }) => Ok(None),
        Err(other) => Err(other),
    }
}

/// Runs `git <args>` in `dir` with [`DEFAULT_TIMEOUT`] and returns its
/// stdout (lossily UTF-8) without the trailing newline.
pub async fn git(dir: &Path, args: &[&str]) -> Result<String, GitError> {
    git_within(dir, args, DEFAULT_TIMEOUT).await
}

/// [`git`] with a time limit: past `timeout`, git and every process it
/// started are killed and [`GitError::TimedOut`] is returned.
pub async fn git_within(dir: &Path, args: &[&str], timeout: Duration) -> Result<String, GitError> {
    let command = subcommand(args);
    let mut cmd = tokio::process::Command::new("git");
    // Only the allowlisted environment (never the gateway's key or
    // tokens, nor a GIT_DIR that would point git at another repository),
    // and no hook or fsmonitor program from the repository's own
    // configuration.
    crate::child_env::restrict(&mut cmd, &[]);
    cmd.args([
        "-c",
        "core.hooksPath=/dev/null",
        "-c",
        "core.fsmonitor=false",
    ])
    .args(args)
    .current_dir(dir)
    .env("GIT_TERMINAL_PROMPT", "0")
    .env("GIT_ASKPASS", "true")
    .env("LC_ALL", "C")
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .process_group(0)
    .kill_on_drop(true);
    let child = match cmd.spawn() {
        Ok(child) => child,
        Err(err) if err.kind() == ErrorKind::NotFound && dir.is_dir() => {
            return Err(GitError::NotInstalled);
        }
        Err(err) => {
            let reason = if dir.is_dir() {
                err.to_string()
            } else {
                "the folder does not exist".to_owned()
            };
            return Err(GitError::Spawn {
                command,
                dir: dir.display().to_string(),
                reason,
            });
        }
    };
    let group = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .and_then(rustix::process::Pid::from_raw);
    let mut output = pin!(child.wait_with_output());
    let output = match tokio::time::timeout(timeout, &mut output).await {
        Ok(Ok(output)) => output,
        Ok(Err(err)) => {
            return Err(GitError::Failed {
                command,
                args: redacted_args(args),
                code: None,
                message: format!("reading its output failed: {err}"),
            });
        }
        Err(_elapsed) => {
            // The child is not reaped yet (its future is still alive), so
            // its pid still names its group.
            if let Some(group) = group {
                let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
            }
            return Err(GitError::TimedOut {
                command,
                args: redacted_args(args),
                timeout,
            });
        }
    };
    if output.status.success() {
        let stdout = String::from_utf8_lossy(&output.stdout);
        return Ok(stdout.trim_end_matches(['\n', '\r']).to_owned());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    let message = last_line(&stderr)
        .map(redact_urls)
        .unwrap_or_else(|| output.status.to_string());
    Err(GitError::Failed {
        command,
        args: redacted_args(args),
        code: output.status.code(),
        message,
    })
}

/// Lines git prints after any failure to reach a remote, which say nothing
/// about the failure itself.
const BOILERPLATE: [&str; 3] = [
    "fatal: Could not read from remote repository.",
    "Please make sure you have the correct access rights",
    "and the repository exists.",
];

/// The last non-empty line of `stderr`, not counting [`BOILERPLATE`] unless
/// there is nothing else.
fn last_line(stderr: &str) -> Option<&str> {
    let lines = || {
        stderr
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty())
    };
    lines()
        .rfind(|line| !BOILERPLATE.contains(line))
        .or_else(|| lines().next_back())
}

/// `60 s`, or `300 ms` below a second.
fn human_duration(duration: Duration) -> String {
    if duration >= Duration::from_secs(1) {
        format!("{} s", duration.as_secs())
    } else {
        format!("{} ms", duration.as_millis())
    }
}

/// The subcommand in `args`: the first argument that is not a global
/// option (`-c name=value` and `-C dir` take a value), with its action for
/// the [`GROUPS`] (`remote set-head`).
fn subcommand(args: &[&str]) -> String {
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match *arg {
            "-c" | "-C" => {
                rest.next();
            }
            option if option.starts_with('-') => {}
            name if GROUPS.contains(&name) => {
                return match rest.next() {
                    Some(action) if !action.starts_with('-') => format!("{name} {action}"),
                    _ => name.to_owned(),
                };
            }
            name => return name.to_owned(),
        }
    }
    String::new()
}

/// Commands whose first argument names what they do (`git remote set-head`).
const GROUPS: [&str; 5] = ["remote", "worktree", "submodule", "stash", "notes"];

fn redacted_args(args: &[&str]) -> Vec<String> {
    args.iter().map(|arg| redact_urls(arg)).collect()
}

/// `text` with the user information removed from every `scheme://user@host`
/// in it: `https://x:token@github.com/o/r` becomes `https://github.com/o/r`.
pub fn redact_urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (before, after) = rest.split_at(at + 3);
        out.push_str(before);
        let authority_len = after
            .find(|c: char| c == '/' || c.is_whitespace() || matches!(c, '\'' | '"' | '<' | '>'))
            .unwrap_or(after.len());
        let authority = &after[..authority_len];
        match authority.rfind('@') {
            Some(at) => out.push_str(&authority[at + 1..]),
            None => out.push_str(authority),
        }
        rest = &after[authority_len..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
pub(crate) mod test_support {
    //! Setting up repositories in tests, isolated from the user's and the
    //! system's git configuration.

    use std::path::Path;

    /// A bare repository at `bare` whose `main` holds `files` (`(path,
    /// text)`), pushed from a work tree made at `seed`.
    pub(crate) fn bare_remote(bare: &Path, seed: &Path, files: &[(&str, &str)]) {
        let parent = |p: &Path| p.parent().map(Path::to_owned).unwrap_or_default();
        std::fs::create_dir_all(parent(bare)).expect("mkdir");
        std::fs::create_dir_all(parent(seed)).expect("mkdir");
        let text = |p: &Path| p.to_str().expect("utf-8 path").to_owned();
        run(
            &parent(bare),
            &["init", "-q", "--bare", "-b", "main", &text(bare)],
        );
        run(&parent(seed), &["init", "-q", "-b", "main", &text(seed)]);
        for (path, content) in files {
            write(&seed.join(path), content);
        }
        run(seed, &["add", "."]);
        run(seed, &["commit", "-q", "-m", "first"]);
        run(seed, &["push", "-q", &text(bare), "main"]);
    }

    /// Runs git synchronously for a test fixture and returns its stdout;
    /// panics with git's stderr when it fails.
    pub(crate) fn run(dir: &Path, args: &[&str]) -> String {
        let output = std::process::Command::new("git")
            .args([
                "-c",
                "user.name=Calvin Test",
                "-c",
                "user.email=calvin@example.invalid",
                "-c",
                "init.defaultBranch=main",
                "-c",
                "commit.gpgSign=false",
                "-c",
                "protocol.file.allow=always",
            ])
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("LC_ALL", "C")
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run git");
        assert!(
            output.status.success(),
            "git {args:?} in {} failed: {}",
            dir.display(),
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout)
            .trim_end()
            .to_owned()
    }

    /// Writes `path` (making its folders) with `text`.
    pub(crate) fn write(path: &Path, text: &str) {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(path, text).expect("write");
    }

    /// `path` as a `&str`, for git arguments.
    pub(crate) fn s(path: &Path) -> &str {
        path.to_str().expect("utf-8 temp path")
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::run;
    use super::*;
    use std::time::Instant;

    #[tokio::test]
    async fn stdout_without_trailing_newline() {
        let dir = tempfile::tempdir().expect("tempdir");
        run(dir.path(), &["init", "-q"]);
        let out = git(dir.path(), &["rev-parse", "--is-inside-work-tree"])
            .await
            .expect("rev-parse");
        assert_eq!(out, "true");
    }

    #[tokio::test]
    async fn failure_names_the_subcommand_and_the_last_stderr_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        run(dir.path(), &["init", "-q"]);
        let err = git(dir.path(), &["fetch", "origin"])
            .await
            .expect_err("no origin");
        assert_eq!(
            err.to_string(),
            "git fetch failed: fatal: 'origin' does not appear to be a git repository"
        );
        assert!(matches!(
            err,
            GitError::Failed {
                code: Some(128),
                ..
            }
        ));

        let err = git(
            dir.path(),
            &["-c", "core.x=y", "rev-parse", "--verify", "nope"],
        )
        .await
        .expect_err("no such revision");
        assert!(
            err.to_string().starts_with("git rev-parse failed: "),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_missing_folder_is_not_a_missing_git() {
        let err = git(Path::new("/nonexistent/calvin-test"), &["status"])
            .await
            .expect_err("no folder");
        assert!(
            err.to_string()
                .contains("could not be started in /nonexistent/calvin-test"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_slow_command_is_killed_at_the_time_limit() {
        let dir = tempfile::tempdir().expect("tempdir");
        run(dir.path(), &["init", "-q"]);
        // An alias running a shell command that would take 30 s.
        let started = Instant::now();
        let err = git_within(
            dir.path(),
            &["-c", "alias.nap=!sleep 30", "nap"],
            Duration::from_millis(300),
        )
        .await
        .expect_err("too slow");
        assert!(started.elapsed() < Duration::from_secs(10));
        assert_eq!(err.to_string(), "git nap did not finish within 300 ms");
        let err = GitError::TimedOut {
            command: "fetch".into(),
            args: vec![],
            timeout: DEFAULT_TIMEOUT,
        };
        assert_eq!(err.to_string(), "git fetch did not finish within 60 s");
    }

    #[test]
    fn credentials_are_removed_from_urls() {
        assert_eq!(
            redact_urls("https://x:tok@github.com/o/r.git"),
            "https://github.com/o/r.git"
        );
        assert_eq!(
            redact_urls("fatal: unable to access 'https://tok@gitlab.com/o/r/': 403"),
            "fatal: unable to access 'https://gitlab.com/o/r/': 403"
        );
        assert_eq!(
            redact_urls("git@github.com:o/r.git"),
            "git@github.com:o/r.git"
        );
        assert_eq!(
            redact_urls("ssh://git@host:22/o/r and http://a@b"),
            "ssh://host:22/o/r and http://b"
        );
        assert_eq!(last_line("\n\n"), None);
        assert_eq!(
            last_line(
                "ERROR: Repository not found.\nfatal: Could not read from remote repository.\n\nPlease make sure you have the correct access rights\nand the repository exists.\n"
            ),
            Some("ERROR: Repository not found.")
        );
        assert_eq!(
            last_line("and the repository exists.\n"),
            Some("and the repository exists.")
        );
        assert_eq!(
            subcommand(&["-C", "x", "-c", "a=b", "--bare", "clone"]),
            "clone"
        );
        assert_eq!(
            redacted_args(&["clone", "https://u:p@h/o/r"]),
            vec!["clone", "https://h/o/r"]
        );
    }
}
