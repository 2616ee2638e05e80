//! spawn_thread's `brief`: "a path of a .md file inside the session
//! directory, relative to it, with an optional #anchor; it must be on the
//! fetched default branch of its repository".
//!
//! [`check_brief`] turns that string into a [`Brief`], in this order, and
//! stops at the first condition that fails with a [`BriefError`] whose
//! `Display` tells the model what to do:
//!
//! 1. the path: not empty, relative, ending in `.md`, and inside the
//!    session directory both as written (`..`) and once every symlink is
//!    resolved;
//! 2. it is a regular file;
//! 3. in a git repository,
//! 4. which has an `origin` remote;
//! 5. `git fetch origin` succeeds within [`crate::git::DEFAULT_TIMEOUT`];
//! 6. origin's default branch is known: `origin/HEAD`, set once with
//!    `git remote set-head origin --auto` when missing;
//! 7. the file is in that branch's tree,
//! 8. with the same content as the working copy (`git hash-object`);
//! 9. an `#anchor` is the GitHub-style slug of one of its headings.
//!
//! The anchors come from [`crate::markdown_anchor`]; [`web_url`] (from
//! [`crate::web_link`]) links to the checked file on GitHub, GitLab or
//! Bitbucket.

use std::fmt;
use std::io::ErrorKind;
use std::path::{Component, Path, PathBuf};

use crate::git::{GitError, git, git_within, origin_head, redact_urls};
use crate::markdown_anchor::anchors;
use crate::web_link::web_url;

/// How many of a file's anchors a [`BriefError::NoSuchAnchor`] lists.
pub const MAX_LISTED_ANCHORS: usize = 20;

/// A brief that passed every check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Brief {
    /// Relative to the session directory, '/'-separated, as given but with
    /// `.`, `..` and empty components resolved, e.g. `repo/docs/brief.md`.
    pub path: String,
    /// The part after `#`, when there was one.
    pub anchor: Option<String>,
    /// The repository's top-level folder (symlinks resolved).
    pub repo_root: PathBuf,
    /// The file's path in the repository's tree, '/'-separated.
    pub path_in_repo: String,
    /// origin's default branch, e.g. `main`.
    pub branch: String,
    /// The commit `origin/HEAD` named after the fetch.
    pub commit: String,
    /// origin's URL, without any credentials it held.
    pub remote_url: String,
    /// The file at [`Brief::commit`] on its web host, when it is a known one.
    pub web_url: Option<String>,
}

/// Why a brief was refused. `Display` is shown to the model as the tool's
/// error, so each says what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BriefError {
    #[error(
        "the brief is empty: give the path of a .md file relative to the session directory, e.g. docs/brief.md or docs/brief.md#plan"
    )]
    Empty,

    #[error(
        "the brief {brief:?} contains a NUL byte: give the path of a .md file relative to the session directory"
    )]
    Nul { brief: String },

    #[error(
        "the brief {path} is an absolute path: give it relative to the session directory, e.g. docs/brief.md"
    )]
    Absolute { path: String },

    #[error(
        "the brief {path} is not a .md file: write the brief in Markdown, in a file whose name ends in .md"
    )]
    NotMarkdown { path: String },

    #[error(
        "the brief {path} resolves to {}, outside the session directory {}: put the brief inside the session directory",
        resolved.display(),
        session_dir.display()
    )]
    Outside {
        path: String,
        resolved: PathBuf,
        session_dir: PathBuf,
    },

    #[error("the session directory {} cannot be read: {reason}", dir.display())]
    SessionDir { dir: PathBuf, reason: String },

    #[error(
        "the brief {path} does not exist: write it in the session directory, commit it and push it"
    )]
    NotFound { path: String },

    #[error("the brief {path} is a {kind}, not a regular file: give the path of a .md file")]
    NotAFile { path: String, kind: &'static str },

    #[error("the brief {path} cannot be read: {reason}")]
    Unreadable { path: String, reason: String },

    #[error(
        "the brief {path} is not inside a git repository: put it in a repository that has an origin remote, commit it and push it"
    )]
    NotInRepo { path: String },

    #[error(
        "the repository {} holding {path} has no origin remote: add one (git remote add origin <url>) and push the brief to it",
        repo_root.display()
    )]
    NoOrigin { path: String, repo_root: PathBuf },

    #[error(
        "cannot fetch origin in {}: {source}; check that origin is reachable, then try again",
        repo_root.display()
    )]
    Fetch {
        repo_root: PathBuf,
        source: GitError,
    },

    #[error(
        "origin's default branch is unknown in {}: origin/HEAD is not set and `git remote set-head origin --auto` could not set it{}; set it with `git remote set-head origin <branch>`",
        repo_root.display(),
        reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default()
    )]
    NoDefaultBranch {
        repo_root: PathBuf,
        reason: Option<String>,
    },

    #[error(
        "{path} is committed but not pushed: it is not on origin/{branch}; push it to {branch} (merge it there first if it is on another branch)"
    )]
    NotPushed { path: String, branch: String },

    #[error("{path} is not on origin/{branch}: commit it and push")]
    NotCommitted { path: String, branch: String },

    #[error("{path} differs from the version on origin/{branch}: push your changes first")]
    Modified { path: String, branch: String },

    #[error("{}", AnchorList { path, anchor, anchors })]
    NoSuchAnchor {
        path: String,
        anchor: String,
        /// Every anchor the file has, in order.
        anchors: Vec<String>,
    },

    #[error("checking the brief failed: {0}")]
    Git(GitError),
}

/// The text of [`BriefError::NoSuchAnchor`].
struct AnchorList<'a> {
    path: &'a str,
    anchor: &'a str,
    anchors: &'a [String],
}

impl fmt::Display for AnchorList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self {
            path,
            anchor,
            anchors,
        } = self;
        if anchors.is_empty() {
            return write!(
                f,
                "{path} has no headings, so it has no #{anchor}: give the brief without #{anchor}"
            );
        }
        write!(
            f,
            "{path} has no heading with the anchor #{anchor}; its anchors are"
        )?;
        for (i, listed) in anchors.iter().take(MAX_LISTED_ANCHORS).enumerate() {
            let sep = if i == 0 { " " } else { ", " };
            write!(f, "{sep}#{listed}")?;
        }
        if anchors.len() > MAX_LISTED_ANCHORS {
            write!(f, " and {} more", anchors.len() - MAX_LISTED_ANCHORS)?;
        }
        write!(f, ": use one of them, or give the brief without an anchor")
    }
}

/// Checks spawn_thread's `brief` against `session_dir` as the module
/// documentation describes. Runs git (fetch included), so it can take up
/// to [`crate::git::DEFAULT_TIMEOUT`] and a few seconds more.
pub async fn check_brief(session_dir: &Path, brief: &str) -> Result<Brief, BriefError> {
    let (given, anchor) = split_anchor(brief)?;
    let session =
        tokio::fs::canonicalize(session_dir)
            .await
            .map_err(|err| BriefError::SessionDir {
                dir: session_dir.to_owned(),
                reason: err.to_string(),
            })?;
    let path = normalise(given, &session)?;
    let named = || path.clone();

    // 1-2. Inside the session directory once resolved, and a regular file.
    let resolved = tokio::fs::canonicalize(session.join(given))
        .await
        .map_err(|err| match err.kind() {
            ErrorKind::NotFound | ErrorKind::NotADirectory => {
                BriefError::NotFound { path: named() }
            }
            _ => BriefError::Unreadable {
                path: named(),
                reason: err.to_string(),
            },
        })?;
    if !resolved.starts_with(&session) || resolved == session {
        return Err(BriefError::Outside {
            path,
            resolved,
            session_dir: session,
        });
    }
    let metadata = tokio::fs::metadata(&resolved)
        .await
        .map_err(|err| BriefError::Unreadable {
            path: named(),
            reason: err.to_string(),
        })?;
    if !metadata.is_file() {
        let kind = if metadata.is_dir() {
            "directory"
        } else {
            "special file"
        };
        return Err(BriefError::NotAFile { path, kind });
    }

    // 3. Its repository.
    let parent = resolved.parent().unwrap_or(&session);
    let toplevel = match git(parent, &["rev-parse", "--show-toplevel"]).await {
        Ok(toplevel) => toplevel,
        Err(GitError::Failed { .. }) => return Err(BriefError::NotInRepo { path }),
        Err(other) => return Err(BriefError::Git(other)),
    };
    let repo_root =
        tokio::fs::canonicalize(&toplevel)
            .await
            .map_err(|err| BriefError::Unreadable {
                path: named(),
                reason: format!("its repository {toplevel}: {err}"),
            })?;
    let Some(path_in_repo) = relative_slash_path(&resolved, &repo_root) else {
        return Err(BriefError::NotInRepo { path });
    };
    let root = repo_root.as_path();

    // 4-5. origin, fetched.
    let remote_url = match git(root, &["remote", "get-url", "origin"]).await {
        Ok(url) => url,
        Err(GitError::Failed { .. }) => return Err(BriefError::NoOrigin { path, repo_root }),
        Err(other) => return Err(BriefError::Git(other)),
    };
    let fetch = ["fetch", "--quiet", "--no-write-fetch-head", "origin"];
    if let Err(source) = git_within(root, &fetch, crate::git::DEFAULT_TIMEOUT).await {
        return Err(BriefError::Fetch { repo_root, source });
    }

    // 6. The default branch.
    let (branch, commit) = match origin_head(root).await.map_err(BriefError::Git)? {
        Some(head) => head,
        None => {
            let set = git(root, &["remote", "set-head", "origin", "--auto"]).await;
            match origin_head(root).await.map_err(BriefError::Git)? {
                Some(head) => head,
                None => {
                    let reason = set.err().map(|err| err.to_string());
                    return Err(BriefError::NoDefaultBranch { repo_root, reason });
                }
            }
        }
    };

    // 7-8. On that branch, as it is here.
    let Some(pushed) = blob(root, &commit, &path_in_repo).await? else {
        return Err(match blob(root, "HEAD", &path_in_repo).await? {
            Some(_) => BriefError::NotPushed { path, branch },
            None => BriefError::NotCommitted { path, branch },
        });
    };
    let here = git(root, &["hash-object", "--", &path_in_repo])
        .await
        .map_err(BriefError::Git)?;
    if here != pushed {
        return Err(BriefError::Modified { path, branch });
    }

    // 9. The anchor.
    if let Some(anchor) = &anchor {
        let bytes = tokio::fs::read(&resolved)
            .await
            .map_err(|err| BriefError::Unreadable {
                path: named(),
                reason: err.to_string(),
            })?;
        let anchors = anchors(&String::from_utf8_lossy(&bytes));
        if !anchors.contains(anchor) {
            return Err(BriefError::NoSuchAnchor {
                path,
                anchor: anchor.clone(),
                anchors: anchors.into_iter().filter(|a| !a.is_empty()).collect(),
            });
        }
    }

    let web_url = web_url(&remote_url, &commit, &path_in_repo, anchor.as_deref());
    Ok(Brief {
        path,
        anchor,
        repo_root,
        path_in_repo,
        branch,
        commit,
        remote_url: redact_urls(&remote_url),
        web_url,
    })
}

/// `docs/brief.md#plan` -> (`docs/brief.md`, `plan`). A `#` belongs to the
/// path unless what precedes the last one ends in `.md`, so `C#.md` is a
/// file name; an empty anchor (`brief.md#`) is no anchor.
fn split_anchor(brief: &str) -> Result<(&str, Option<String>), BriefError> {
    if brief.is_empty() {
        return Err(BriefError::Empty);
    }
    if brief.contains('\0') {
        return Err(BriefError::Nul {
            brief: brief.to_owned(),
        });
    }
    let (path, anchor) = match brief.rsplit_once('#') {
        Some((path, anchor)) if is_markdown(path) => (path, Some(anchor).filter(|a| !a.is_empty())),
        _ => (brief, None),
    };
    if path.is_empty() {
        return Err(BriefError::Empty);
    }
    if Path::new(path).is_absolute() {
        return Err(BriefError::Absolute {
            path: path.to_owned(),
        });
    }
    if !is_markdown(path) {
        return Err(BriefError::NotMarkdown {
            path: path.to_owned(),
        });
    }
    Ok((path, anchor.map(str::to_owned)))
}

fn is_markdown(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.len() > 3
        && name
            .get(name.len() - 3..)
            .is_some_and(|ext| ext.eq_ignore_ascii_case(".md"))
}

/// `given` with `.`, `..` and empty components resolved as written (no
/// symlink followed), '/'-separated; refused when `..` leaves the session
/// directory.
fn normalise(given: &str, session: &Path) -> Result<String, BriefError> {
    let mut parts: Vec<&str> = Vec::new();
    for part in given.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    let mut resolved = session.to_owned();
                    for component in Path::new(given).components() {
                        match component {
                            Component::ParentDir => {
                                resolved.pop();
                            }
                            Component::Normal(name) => resolved.push(name),
                            _ => {}
                        }
                    }
                    return Err(BriefError::Outside {
                        path: given.to_owned(),
                        resolved,
                        session_dir: session.to_owned(),
                    });
                }
            }
            name => parts.push(name),
        }
    }
    Ok(parts.join("/"))
}

/// `path` below `root`, '/'-separated, when it is below and UTF-8.
fn relative_slash_path(path: &Path, root: &Path) -> Option<String> {
    let relative = path.strip_prefix(root).ok()?;
    let parts: Option<Vec<&str>> = relative
        .components()
        .map(|c| c.as_os_str().to_str())
        .collect();
    let parts = parts?;
    (!parts.is_empty()).then(|| parts.join("/"))
}

/// The object id of `path` in `rev`'s tree, when it has one.
async fn blob(root: &Path, rev: &str, path: &str) -> Result<Option<String>, BriefError> {
    match git(
        root,
        &["rev-parse", "--verify", "--quiet", &format!("{rev}:{path}")],
    )
    .await
    {
        Ok(id) => Ok(Some(id)),
        Err(GitError::Failed { .. }) => Ok(None),
        Err(other) => Err(BriefError::Git(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::git::test_support::{bare_remote, run, s, write};

    const BRIEF: &str = "# Plan\n\nIntro.\n\n## Next steps\n\n```sh\n# not a heading\n```\n\n## Next steps\n\nSet-up & *run*\n===\n";

    /// A bare `origin.git` with `main` holding `docs/brief.md`, and a
    /// session directory holding a clone of it as `repo`.
    struct Fixture {
        _tmp: tempfile::TempDir,
        root: PathBuf,
        origin: PathBuf,
        session: PathBuf,
        repo: PathBuf,
    }

    fn fixture() -> Fixture {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = std::fs::canonicalize(tmp.path()).expect("canonical tempdir");
        let origin = root.join("origin.git");
        bare_remote(
            &origin,
            &root.join("seed"),
            &[("docs/brief.md", BRIEF), ("README.md", "readme\n")],
        );
        let session = root.join("session");
        std::fs::create_dir(&session).expect("mkdir session");
        run(&session, &["clone", "-q", s(&origin), "repo"]);
        let repo = session.join("repo");
        Fixture {
            _tmp: tmp,
            root,
            origin,
            session,
            repo,
        }
    }

    impl Fixture {
        async fn check(&self, brief: &str) -> Result<Brief, BriefError> {
            check_brief(&self.session, brief).await
        }

        fn commit(&self, path: &str, text: &str) {
            write(&self.repo.join(path), text);
            run(&self.repo, &["add", path]);
            run(&self.repo, &["commit", "-q", "-m", path]);
        }
    }

    #[tokio::test]
    async fn a_pushed_brief_is_accepted_with_its_branch_and_commit() {
        let f = fixture();
        let brief = f.check("./repo//docs/./brief.md").await.expect("pushed");
        let head = run(&f.origin, &["rev-parse", "main"]);
        assert_eq!(
            brief,
            Brief {
                path: "repo/docs/brief.md".into(),
                anchor: None,
                repo_root: f.repo.clone(),
                path_in_repo: "docs/brief.md".into(),
                branch: "main".into(),
                commit: head,
                remote_url: s(&f.origin).into(),
                web_url: None,
            }
        );
        // Upper-case extension, a `..` that stays inside, an empty anchor.
        f.commit("NOTES.MD", "# Notes\n");
        run(&f.repo, &["push", "-q", "origin", "HEAD:main"]);
        let brief = f.check("repo/docs/../NOTES.MD#").await.expect("pushed");
        assert_eq!(brief.path, "repo/NOTES.MD");
        assert_eq!(brief.anchor, None);
    }

    #[tokio::test]
    async fn committed_but_not_pushed_and_not_committed() {
        let f = fixture();
        f.commit("docs/local.md", "# Local\n");
        let err = f.check("repo/docs/local.md").await.expect_err("not pushed");
        assert_eq!(
            err.to_string(),
            "repo/docs/local.md is committed but not pushed: it is not on origin/main; push it to main (merge it there first if it is on another branch)"
        );
        write(&f.repo.join("docs/new.md"), "# New\n");
        let err = f
            .check("repo/docs/new.md")
            .await
            .expect_err("not committed");
        assert_eq!(
            err.to_string(),
            "repo/docs/new.md is not on origin/main: commit it and push"
        );
    }

    #[tokio::test]
    async fn missing_files_directories_and_bad_paths() {
        let f = fixture();
        let err = f.check("repo/docs/none.md").await.expect_err("missing");
        assert_eq!(
            err.to_string(),
            "the brief repo/docs/none.md does not exist: write it in the session directory, commit it and push it"
        );
        std::fs::create_dir(f.repo.join("dir.md")).expect("mkdir");
        let err = f.check("repo/dir.md").await.expect_err("directory");
        assert!(
            matches!(
                err,
                BriefError::NotAFile {
                    kind: "directory",
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(
            err.to_string()
                .contains("is a directory, not a regular file"),
            "{err}"
        );

        assert_eq!(f.check("").await, Err(BriefError::Empty));
        assert_eq!(f.check("#plan").await.map_err(|e| e.to_string()), Err(
            "the brief #plan is not a .md file: write the brief in Markdown, in a file whose name ends in .md".into()
        ));
        let err = f.check("repo/README.txt").await.expect_err("not .md");
        assert!(matches!(err, BriefError::NotMarkdown { .. }), "{err:?}");
        let err = f.check(".md").await.expect_err("no name");
        assert!(matches!(err, BriefError::NotMarkdown { .. }), "{err:?}");
        let absolute = f.repo.join("docs/brief.md");
        let err = f.check(s(&absolute)).await.expect_err("absolute");
        assert_eq!(
            err.to_string(),
            format!(
                "the brief {} is an absolute path: give it relative to the session directory, e.g. docs/brief.md",
                absolute.display()
            )
        );
        assert!(matches!(
            f.check("a\0.md").await,
            Err(BriefError::Nul { .. })
        ));
    }

    #[tokio::test]
    async fn paths_leaving_the_session_directory_are_refused() {
        let f = fixture();
        write(&f.root.join("outside.md"), "# Out\n");
        let err = f.check("repo/../../outside.md").await.expect_err("dotdot");
        assert_eq!(
            err.to_string(),
            format!(
                "the brief repo/../../outside.md resolves to {}, outside the session directory {}: put the brief inside the session directory",
                f.root.join("outside.md").display(),
                f.session.display()
            )
        );
        std::os::unix::fs::symlink(f.root.join("outside.md"), f.session.join("link.md"))
            .expect("symlink");
        let err = f.check("link.md").await.expect_err("symlink");
        assert!(
            matches!(&err, BriefError::Outside { resolved, .. } if *resolved == f.root.join("outside.md")),
            "{err:?}"
        );
        // A symlinked folder leading out, too.
        std::os::unix::fs::symlink(&f.root, f.session.join("up")).expect("symlink");
        let err = f.check("up/outside.md").await.expect_err("symlinked dir");
        assert!(matches!(err, BriefError::Outside { .. }), "{err:?}");
    }

    #[tokio::test]
    async fn no_repository_and_no_origin() {
        let f = fixture();
        write(&f.session.join("loose.md"), "# Loose\n");
        let err = f.check("loose.md").await.expect_err("no repo");
        assert_eq!(
            err.to_string(),
            "the brief loose.md is not inside a git repository: put it in a repository that has an origin remote, commit it and push it"
        );
        run(&f.repo, &["remote", "rename", "origin", "upstream"]);
        let err = f.check("repo/docs/brief.md").await.expect_err("no origin");
        assert_eq!(
            err.to_string(),
            format!(
                "the repository {} holding repo/docs/brief.md has no origin remote: add one (git remote add origin <url>) and push the brief to it",
                f.repo.display()
            )
        );
    }

    #[tokio::test]
    async fn a_failed_fetch_says_what_git_said() {
        let f = fixture();
        std::fs::rename(&f.origin, f.root.join("moved.git")).expect("move origin");
        let err = f.check("repo/docs/brief.md").await.expect_err("fetch");
        assert!(matches!(err, BriefError::Fetch { .. }), "{err:?}");
        assert_eq!(
            err.to_string(),
            format!(
                "cannot fetch origin in {}: git fetch failed: fatal: '{}' does not appear to be a git repository; check that origin is reachable, then try again",
                f.repo.display(),
                f.origin.display()
            )
        );
    }

    #[tokio::test]
    async fn a_copy_modified_after_the_push_is_refused() {
        let f = fixture();
        write(&f.repo.join("docs/brief.md"), "# Plan\n\nChanged.\n");
        let err = f.check("repo/docs/brief.md").await.expect_err("modified");
        assert_eq!(
            err.to_string(),
            "repo/docs/brief.md differs from the version on origin/main: push your changes first"
        );
        // Committed and pushed elsewhere meanwhile: the fetch sees it.
        let other = f.root.join("other");
        run(&f.root, &["clone", "-q", s(&f.origin), s(&other)]);
        write(&other.join("docs/brief.md"), "# Plan\n\nChanged.\n");
        run(&other, &["commit", "-q", "-am", "change"]);
        run(&other, &["push", "-q", "origin", "main"]);
        let brief = f.check("repo/docs/brief.md").await.expect("now on origin");
        assert_eq!(brief.commit, run(&other, &["rev-parse", "HEAD"]));
    }

    #[tokio::test]
    async fn anchors_must_name_a_heading() {
        let f = fixture();
        let brief = f
            .check("repo/docs/brief.md#next-steps")
            .await
            .expect("anchor");
        assert_eq!(brief.anchor.as_deref(), Some("next-steps"));
        f.check("repo/docs/brief.md#next-steps-1")
            .await
            .expect("duplicate");
        f.check("repo/docs/brief.md#set-up--run")
            .await
            .expect("setext");
        let err = f
            .check("repo/docs/brief.md#not-a-heading")
            .await
            .expect_err("code");
        assert_eq!(
            err.to_string(),
            "repo/docs/brief.md has no heading with the anchor #not-a-heading; its anchors are #plan, #next-steps, #next-steps-1, #set-up--run: use one of them, or give the brief without an anchor"
        );
        f.commit("docs/flat.md", "no headings\n");
        run(&f.repo, &["push", "-q", "origin", "HEAD:main"]);
        let err = f
            .check("repo/docs/flat.md#x")
            .await
            .expect_err("no headings");
        assert_eq!(
            err.to_string(),
            "repo/docs/flat.md has no headings, so it has no #x: give the brief without #x"
        );
    }

    #[test]
    fn at_most_twenty_anchors_are_listed() {
        let anchors: Vec<String> = (1..=23).map(|n| format!("a{n}")).collect();
        let err = BriefError::NoSuchAnchor {
            path: "b.md".into(),
            anchor: "z".into(),
            anchors,
        };
        let text = err.to_string();
        assert!(text.contains("#a20 and 3 more: use one"), "{text}");
        assert!(!text.contains("#a21"), "{text}");
    }

    #[tokio::test]
    async fn a_missing_origin_head_is_set_once() {
        let f = fixture();
        run(&f.repo, &["remote", "set-head", "origin", "--delete"]);
        let brief = f.check("repo/docs/brief.md").await.expect("set-head");
        assert_eq!(brief.branch, "main");
        assert_eq!(
            run(&f.repo, &["symbolic-ref", "refs/remotes/origin/HEAD"]),
            "refs/remotes/origin/main"
        );

        // origin's HEAD names a branch it does not have: nothing to set.
        run(&f.origin, &["symbolic-ref", "HEAD", "refs/heads/gone"]);
        run(&f.repo, &["remote", "set-head", "origin", "--delete"]);
        let err = f.check("repo/docs/brief.md").await.expect_err("no default");
        assert!(matches!(err, BriefError::NoDefaultBranch { .. }), "{err:?}");
        let text = err.to_string();
        assert!(text.starts_with(&format!("origin's default branch is unknown in {}: origin/HEAD is not set and `git remote set-head origin --auto` could not set it", f.repo.display())), "{text}");
        assert!(
            text.contains("(git remote set-head failed: error: Cannot determine remote HEAD)"),
            "{text}"
        );
        assert!(
            text.ends_with("; set it with `git remote set-head origin <branch>`"),
            "{text}"
        );
    }

    #[test]
    fn anchors_split_only_after_a_md_name() {
        assert_eq!(split_anchor("C#.md"), Ok(("C#.md", None)));
        assert_eq!(
            split_anchor("a/C#.md#run"),
            Ok(("a/C#.md", Some("run".to_owned())))
        );
        assert!(is_markdown("x.Md"));
        assert!(!is_markdown("dir.md/x"));
    }
}
