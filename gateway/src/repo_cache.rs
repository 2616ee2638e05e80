//! checkout_repo's checkouts of the workspace's repositories (the
//! definition is [`crate::workspace`]'s).
//!
//! [`Workspace::checkout`] clones each repository once into the cache, as
//! the bare repository `<cache>/<name>.git` with remote-tracking branches
//! (`+refs/heads/*:refs/remotes/origin/*`) and `origin/HEAD` set, and adds
//! it to a session directory as the git worktree `<session>/<name>` on the
//! session's branch, made from `origin/HEAD` after a fetch. Everything that
//! changes a repository's cache happens under the exclusive lock
//! `<cache>/<name>.lock`, so sessions in several processes can check out
//! the same repository at once.
//!
//! The cache is keyed by the repository's name, and the definition is the
//! truth about where it lives: before each fetch, a cache whose `origin`
//! names another URL than the definition's `url` (the repository moved, a
//! typo was fixed) is pointed at the definition's.

use std::fs::File;
use std::io::{self, ErrorKind};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::git::{GitError, git, git_within, origin_head, redact_urls};
use crate::workspace::{RepoDef, Workspace};

/// How long the first fetch of a repository into the cache may take.
pub const CLONE_TIMEOUT: Duration = Duration::from_secs(600);

/// How long a fetch into an existing cache may take.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(120);

/// How long adding a worktree (checking out its files) may take.
pub const WORKTREE_TIMEOUT: Duration = Duration::from_secs(300);

/// What [`Workspace::checkout`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkout {
    pub name: String,
    /// `<session_dir>/<name>`.
    pub path: PathBuf,
    /// The branch checked out there.
    pub branch: String,
    /// It was checked out already and was left as it was.
    pub already: bool,
    /// This call made the repository's cache clone.
    pub cloned: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum CheckoutError {
    #[error("{branch:?} is not a usable branch name")]
    BadBranch { branch: String },

    #[error(
        "{} already exists and is not a checkout of {name}: move it away, then call checkout_repo again",
        path.display()
    )]
    Occupied { name: String, path: PathBuf },

    #[error("cannot check out {name}: branch {branch} is already checked out at {}", path.display())]
    BranchInUse {
        name: String,
        branch: String,
        path: PathBuf,
    },

    #[error("cannot check out {name}: {}: {source}", path.display())]
    Io {
        name: String,
        path: PathBuf,
        source: io::Error,
    },

    #[error("cannot clone {name}: {source}")]
    Clone { name: String, source: GitError },

    #[error("cannot fetch {name}: {source}")]
    Fetch { name: String, source: GitError },

    #[error("cannot check out {name}: its remote does not say which branch is its default{}", reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default())]
    NoDefaultBranch {
        name: String,
        reason: Option<String>,
    },

    #[error("cannot add {name} to the session directory: {source}")]
    Worktree { name: String, source: GitError },
}

impl Workspace {
    /// Adds `repo` (one [`Workspace::resolve`] gave) to `session_dir` as the
    /// worktree `<session_dir>/<name>` on `branch`, made from `origin/HEAD`
    /// after a fetch (or the existing `branch` of the cache when no
    /// worktree has it), cloning the repository into the cache first when
    /// it is not there. A worktree of the same cache already at that path
    /// is returned as it is, with `already`.
    pub async fn checkout(
        &self,
        repo: &RepoDef,
        session_dir: &Path,
        branch: &str,
    ) -> Result<Checkout, CheckoutError> {
        if !is_branch_name(branch) {
            return Err(CheckoutError::BadBranch {
                branch: branch.to_owned(),
            });
        }
        let name = repo.name.as_str();
        let io = |path: &Path| io_error(name, path);
        let session_dir = std::path::absolute(session_dir).map_err(io(session_dir))?;
        let path = session_dir.join(name);
        let cache = self.cache_dir().join(format!("{name}.git"));
        if let Some(found) = existing(name, &path, &cache).await? {
            return Ok(found);
        }

        tokio::fs::create_dir_all(self.cache_dir())
            .await
            .map_err(io(self.cache_dir()))?;
        let lock_path = self.cache_dir().join(format!("{name}.lock"));
        let _lock = lock(&lock_path).await.map_err(io(&lock_path))?;
        let cloned = if tokio::fs::try_exists(&cache).await.map_err(io(&cache))? {
            update(repo, &cache).await?;
            false
        } else {
            clone(repo, self.cache_dir(), &cache).await?;
            true
        };
        // Another call for the same session may have added it meanwhile.
        if let Some(found) = existing(name, &path, &cache).await? {
            return Ok(Checkout { cloned, ..found });
        }
        add_worktree(name, &cache, &path, branch).await?;
        Ok(Checkout {
            name: name.to_owned(),
            path,
            branch: branch.to_owned(),
            already: false,
            cloned,
        })
    }
}

/// The checkout at `path` when it is a worktree of `cache`; `None` when
/// nothing is there; [`CheckoutError::Occupied`] for anything else.
async fn existing(
    name: &str,
    path: &Path,
    cache: &Path,
) -> Result<Option<Checkout>, CheckoutError> {
    let occupied = || CheckoutError::Occupied {
        name: name.to_owned(),
        path: path.to_owned(),
    };
    match tokio::fs::symlink_metadata(path).await {
        Err(err) if err.kind() == ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(io_error(name, path)(source)),
        Ok(meta) if !meta.is_dir() => return Err(occupied()),
        Ok(_) => {}
    }
    // Its repository, its top folder and its branch, in one git run.
    let asked = [
        "rev-parse",
        "--path-format=absolute",
        "--git-common-dir",
        "--show-toplevel",
        "--abbrev-ref",
        "HEAD",
    ];
    let answer = git(path, &asked).await.map_err(|_| occupied())?;
    let mut lines = answer.lines();
    let (Some(common), Some(top), Some(branch)) = (lines.next(), lines.next(), lines.next()) else {
        return Err(occupied());
    };
    if !same_place(Path::new(common), cache).await || !same_place(Path::new(top), path).await {
        return Err(occupied());
    }
    let branch = branch.to_owned();
    Ok(Some(Checkout {
        name: name.to_owned(),
        path: path.to_owned(),
        branch,
        already: true,
        cloned: false,
    }))
}

/// Whether `a` and `b` both exist and are the same once symlinks are
/// resolved.
async fn same_place(a: &Path, b: &Path) -> bool {
    let (a, b) = (
        tokio::fs::canonicalize(a).await,
        tokio::fs::canonicalize(b).await,
    );
    matches!((a, b), (Ok(a), Ok(b)) if a == b)
}

/// Waits (off the async threads) for the exclusive lock on `path`, made
/// if missing; held until the returned file is dropped.
async fn lock(path: &Path) -> io::Result<File> {
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || crate::atomic_file::lock(&path))
        .await
        .map_err(io::Error::other)?
}

/// An I/O failure on `path` while checking out `name`.
fn io_error(name: &str, path: &Path) -> impl FnOnce(std::io::Error) -> CheckoutError + use<> {
    let (name, path) = (name.to_owned(), path.to_owned());
    move |source| CheckoutError::Io { name, path, source }
}

/// Makes the cache `cache` in `<cache_dir>/.<name>.git.partial` and renames
/// it into place only once it is complete; a failure leaves nothing.
///
/// A bare `git init` with `origin` added, rather than `git clone --bare`:
/// the same repository, fetch refspec `+refs/heads/*:refs/remotes/origin/*`
/// included, without the copies of the remote's branches a bare clone
/// makes as local branches, which would go stale in the cache and shadow
/// `origin/*` in the worktrees (`git switch main`).
async fn clone(repo: &RepoDef, cache_dir: &Path, cache: &Path) -> Result<(), CheckoutError> {
    let name = repo.name.as_str();
    let partial = cache_dir.join(format!(".{name}.git.partial"));
    let io = |path: &Path| io_error(name, path);
    remove_dir_if_present(&partial)
        .await
        .map_err(io(&partial))?;
    tokio::fs::create_dir(&partial)
        .await
        .map_err(io(&partial))?;
    let made = async {
        let failed = |source| CheckoutError::Clone {
            name: name.to_owned(),
            source,
        };
        git(&partial, &["init", "--quiet", "--bare"])
            .await
            .map_err(failed)?;
        git(&partial, &["remote", "add", "--", "origin", &repo.url])
            .await
            .map_err(failed)?;
        let fetch = ["fetch", "--quiet", "--prune", "origin"];
        git_within(&partial, &fetch, CLONE_TIMEOUT)
            .await
            .map_err(failed)?;
        set_head(name, &partial).await
    }
    .await;
    if let Err(err) = made {
        let _ = remove_dir_if_present(&partial).await;
        return Err(err);
    }
    tokio::fs::rename(&partial, cache).await.map_err(io(cache))
}

async fn remove_dir_if_present(path: &Path) -> io::Result<()> {
    match tokio::fs::remove_dir_all(path).await {
        Err(err) if err.kind() != ErrorKind::NotFound => Err(err),
        _ => Ok(()),
    }
}

/// Fetches into the cache from the definition's URL and updates
/// `origin/HEAD`.
async fn update(repo: &RepoDef, cache: &Path) -> Result<(), CheckoutError> {
    let name = repo.name.as_str();
    follow_definition(repo, cache).await?;
    let fetch = ["fetch", "--quiet", "--prune", "origin"];
    git_within(cache, &fetch, FETCH_TIMEOUT)
        .await
        .map_err(|source| CheckoutError::Fetch {
            name: name.to_owned(),
            source,
        })?;
    set_head(name, cache).await
}

/// Points the cache's `origin` at the definition's `url` when it names
/// another (or is missing), so the fetch that follows reads the
/// repository the definition names, not the one the cache was made from.
async fn follow_definition(repo: &RepoDef, cache: &Path) -> Result<(), CheckoutError> {
    let name = repo.name.as_str();
    let failed = |source| CheckoutError::Fetch {
        name: name.to_owned(),
        source,
    };
    // The URL as configured (`remote get-url` would apply insteadOf).
    let known = match git(cache, &["config", "--get", "remote.origin.url"]).await {
        Ok(url) => Some(url),
        // Exit 1: no such key.
        Err(GitError::Failed { code: Some(1), .. }) => None,
        Err(other) => return Err(failed(other)),
    };
    let args = match &known {
        Some(url) if *url == repo.url => return Ok(()),
        Some(_) => ["remote", "set-url", "--", "origin", repo.url.as_str()],
        None => ["remote", "add", "--", "origin", repo.url.as_str()],
    };
    git(cache, &args).await.map_err(failed)?;
    tracing::info!(
        repo = name,
        was = %known.as_deref().map(redact_urls).unwrap_or_default(),
        now = %redact_urls(&repo.url),
        "the workspace definition names another url: the cache's origin follows it"
    );
    Ok(())
}

/// `git remote set-head origin --auto`; when the remote does not answer,
/// the `origin/HEAD` already known will do.
async fn set_head(name: &str, repo: &Path) -> Result<(), CheckoutError> {
    let set = git(repo, &["remote", "set-head", "origin", "--auto"]).await;
    match (origin_head(repo).await, set) {
        (Ok(Some(_)), Ok(_)) => Ok(()),
        (Ok(Some(_)), Err(err)) => {
            tracing::warn!(repo = name, %err, "keeping the default branch known before");
            Ok(())
        }
        (_, set) => Err(CheckoutError::NoDefaultBranch {
            name: name.to_owned(),
            reason: set.err().map(|err| err.to_string()),
        }),
    }
}

/// `git worktree add` of `cache` at `path` on `branch`.
async fn add_worktree(
    name: &str,
    cache: &Path,
    path: &Path,
    branch: &str,
) -> Result<(), CheckoutError> {
    let failed = |source| CheckoutError::Worktree {
        name: name.to_owned(),
        source,
    };
    let Some(at) = path.to_str() else {
        return Err(CheckoutError::Io {
            name: name.to_owned(),
            path: path.to_owned(),
            source: io::Error::new(ErrorKind::InvalidInput, "the path is not UTF-8"),
        });
    };
    // Forget worktrees whose folders were deleted, and their branches.
    git(cache, &["worktree", "prune"]).await.map_err(failed)?;
    let local = format!("refs/heads/{branch}");
    let exists = match git(cache, &["rev-parse", "--verify", "--quiet", &local]).await {
        Ok(_) => true,
        Err(GitError::Failed { .. }) => false,
        Err(other) => return Err(failed(other)),
    };
    let args = if exists {
        let list = git(cache, &["worktree", "list", "--porcelain"])
            .await
            .map_err(failed)?;
        if let Some(elsewhere) = checked_out_at(&list, &local) {
            return Err(CheckoutError::BranchInUse {
                name: name.to_owned(),
                branch: branch.to_owned(),
                path: elsewhere,
            });
        }
        vec!["worktree", "add", "--quiet", "--", at, branch]
    } else {
        let start = "refs/remotes/origin/HEAD";
        vec![
            "worktree",
            "add",
            "--quiet",
            "--no-track",
            "-b",
            branch,
            "--",
            at,
            start,
        ]
    };
    if let Err(source) = git_within(cache, &args, WORKTREE_TIMEOUT).await {
        // Only a worktree this call registered can be removed this way.
        let _ = git(cache, &["worktree", "remove", "--force", "--", at]).await;
        return Err(failed(source));
    }
    Ok(())
}

/// The worktree that has `local` (`refs/heads/...`) checked out, from
/// `git worktree list --porcelain`.
fn checked_out_at(list: &str, local: &str) -> Option<PathBuf> {
    let mut current = None;
    for line in list.lines() {
        if let Some(path) = line.strip_prefix("worktree ") {
            current = Some(path);
        } else if line.strip_prefix("branch ") == Some(local) {
            return current.map(PathBuf::from);
        }
    }
    None
}

/// A name `git check-ref-format --branch` accepts, not starting with '-'.
fn is_branch_name(branch: &str) -> bool {
    let bad_char =
        |c: char| c.is_control() || matches!(c, ' ' | '~' | '^' | ':' | '?' | '*' | '[' | '\\');
    !branch.is_empty()
        && branch.len() <= 200
        && branch != "@"
        && branch != "HEAD"
        && !branch.starts_with('-')
        && !branch.ends_with('.')
        && !["..", "@{"].iter().any(|bad| branch.contains(bad))
        && !branch.chars().any(bad_char)
        && branch
            .split('/')
            .all(|part| !part.is_empty() && !part.starts_with('.') && !part.ends_with(".lock"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::git::test_support::{run, s, write};
    use crate::workspace::WorkspaceConfig;
    use crate::workspace::test_support::{Fixture, fixture};

    /// The checkout tests' own helpers on [`crate::workspace`]'s fixture.
    impl Fixture {
        async fn checkout(&self, name: &str, session: &Path, branch: &str) -> Checkout {
            let repo = self.workspace.resolve(name).expect("resolve").clone();
            self.workspace
                .checkout(&repo, session, branch)
                .await
                .expect("checkout")
        }

        /// The error of a checkout expected to fail.
        async fn refused(&self, name: &str, session: &Path, branch: &str) -> CheckoutError {
            let repo = self.workspace.resolve(name).expect("resolve").clone();
            self.workspace
                .checkout(&repo, session, branch)
                .await
                .expect_err("the checkout is refused")
        }

        fn cache(&self, name: &str) -> PathBuf {
            self.root.join("cache").join(format!("{name}.git"))
        }

        /// Pushes a commit adding `file` to `owner_repo`'s remote; returns
        /// its id.
        fn push(&self, owner_repo: &str, file: &str) -> String {
            let seed = self.root.join("seeds").join(owner_repo);
            write(&seed.join(file), "later\n");
            run(&seed, &["add", "."]);
            run(&seed, &["commit", "-q", "-m", file]);
            let bare = self.root.join("remotes").join(format!("{owner_repo}.git"));
            run(&seed, &["push", "-q", s(&bare), "main"]);
            run(&seed, &["rev-parse", "HEAD"])
        }
    }

    #[tokio::test]
    async fn the_first_checkout_clones_and_adds_a_worktree_on_the_session_branch() {
        let f = fixture();
        let session = f.session("s1");
        let got = f
            .checkout("api", &session, "calvin/1700000000.000100")
            .await;
        assert_eq!(
            got,
            Checkout {
                name: "api".into(),
                path: session.join("api"),
                branch: "calvin/1700000000.000100".into(),
                already: false,
                cloned: true,
            }
        );
        // trim_end: a user's core.autocrlf may check it out with CRLF.
        let text = std::fs::read_to_string(session.join("api/api.txt")).expect("file");
        assert_eq!(text.trim_end(), "first");
        let wt = session.join("api");
        assert_eq!(
            run(&wt, &["rev-parse", "--abbrev-ref", "HEAD"]),
            "calvin/1700000000.000100"
        );
        assert_eq!(
            run(&wt, &["rev-parse", "HEAD"]),
            run(&wt, &["rev-parse", "origin/main"])
        );
        // No upstream: pushing the session branch never pushes to main.
        assert!(
            std::process::Command::new("git")
                .args(["rev-parse", "--abbrev-ref", "@{upstream}"])
                .current_dir(&wt)
                .output()
                .is_ok_and(|out| !out.status.success())
        );
        let cache = f.cache("api");
        assert_eq!(run(&cache, &["rev-parse", "--is-bare-repository"]), "true");
        assert_eq!(
            run(&cache, &["config", "--get-all", "remote.origin.fetch"]),
            "+refs/heads/*:refs/remotes/origin/*"
        );
        assert_eq!(
            run(&cache, &["symbolic-ref", "refs/remotes/origin/HEAD"]),
            "refs/remotes/origin/main"
        );
        assert_eq!(
            run(
                &cache,
                &["for-each-ref", "--format=%(refname)", "refs/heads/"]
            ),
            "refs/heads/calvin/1700000000.000100"
        );
        assert!(!f.root.join("cache/.api.git.partial").exists());
    }

    #[tokio::test]
    async fn a_repeat_returns_the_checkout_as_it_is() {
        let f = fixture();
        let session = f.session("s1");
        f.checkout("api", &session, "calvin/1").await;
        write(&session.join("api/work.txt"), "in progress\n");
        let head = run(&session.join("api"), &["rev-parse", "HEAD"]);
        f.push("acme/api", "later.txt");
        let again = f.checkout("API", &session, "calvin/other").await;
        assert_eq!(
            again,
            Checkout {
                name: "api".into(),
                path: session.join("api"),
                branch: "calvin/1".into(),
                already: true,
                cloned: false,
            }
        );
        assert_eq!(run(&session.join("api"), &["rev-parse", "HEAD"]), head);
        assert!(session.join("api/work.txt").exists());
        assert!(!session.join("api/later.txt").exists());
    }

    #[tokio::test]
    async fn a_second_session_gets_its_own_worktree_and_the_remotes_new_commits() {
        let f = fixture();
        let (s1, s2) = (f.session("s1"), f.session("s2"));
        f.checkout("api", &s1, "calvin/1").await;
        let later = f.push("acme/api", "later.txt");
        let second = f.checkout("acme/API", &s2, "calvin/2").await;
        assert!(!second.cloned && !second.already, "{second:?}");
        assert_eq!(second.branch, "calvin/2");
        assert_eq!(run(&s2.join("api"), &["rev-parse", "HEAD"]), later);
        assert!(s2.join("api/later.txt").exists());
        assert!(!s1.join("api/later.txt").exists());
        let list = run(&f.cache("api"), &["worktree", "list", "--porcelain"]);
        assert_eq!(
            list.matches("\nbranch refs/heads/calvin/").count(),
            2,
            "{list}"
        );

        // The other repository is cloned on its own.
        let web = f.checkout("web", &s2, "calvin/2").await;
        assert!(web.cloned);
        assert!(s2.join("web/web.txt").exists());
    }

    #[tokio::test]
    async fn a_moved_repository_is_fetched_from_the_definitions_new_url() {
        let f = fixture();
        let (s1, s2) = (f.session("s1"), f.session("s2"));
        f.checkout("api", &s1, "calvin/1").await;
        // The repository moves, gets a commit there, and the definition
        // follows it; the old place is gone.
        let old = f.root.join("remotes/acme/api.git");
        let moved = f.root.join("remotes/acme/api-moved.git");
        std::fs::rename(&old, &moved).expect("move the remote");
        let seed = f.root.join("seeds/acme/api");
        write(&seed.join("moved.txt"), "after the move\n");
        run(&seed, &["add", "."]);
        run(&seed, &["commit", "-q", "-m", "moved"]);
        run(&seed, &["push", "-q", s(&moved), "main"]);
        let later = run(&seed, &["rev-parse", "HEAD"]);
        let config = WorkspaceConfig {
            file: None,
            cache_dir: Some(f.root.join("cache")),
            repos: vec![RepoDef {
                name: "api".into(),
                url: s(&moved).into(),
                published: true,
            }],
        };
        let workspace = Workspace::from_config(&config, &f.root)
            .expect("config")
            .expect("defined");
        let repo = workspace.resolve("api").expect("api").clone();
        let second = workspace
            .checkout(&repo, &s2, "calvin/2")
            .await
            .expect("the checkout fetches from the new url");
        assert!(!second.cloned && !second.already, "{second:?}");
        assert_eq!(run(&s2.join("api"), &["rev-parse", "HEAD"]), later);
        assert!(s2.join("api/moved.txt").exists());
        assert_eq!(
            run(&f.cache("api"), &["config", "--get", "remote.origin.url"]),
            s(&moved)
        );
        // A third session on the same definition fetches from there too.
        let s3 = f.session("s3");
        let third = workspace.checkout(&repo, &s3, "calvin/3").await;
        assert!(third.is_ok(), "{third:?}");
    }

    #[tokio::test]
    async fn a_cache_without_origin_gets_the_definitions() {
        let f = fixture();
        let s1 = f.session("s1");
        f.checkout("api", &s1, "calvin/1").await;
        run(&f.cache("api"), &["remote", "remove", "origin"]);
        let s2 = f.session("s2");
        let later = f.push("acme/api", "later.txt");
        f.checkout("api", &s2, "calvin/2").await;
        assert_eq!(run(&s2.join("api"), &["rev-parse", "HEAD"]), later);
        assert_eq!(
            run(&f.cache("api"), &["config", "--get", "remote.origin.url"]),
            s(&f.root.join("remotes/acme/api.git"))
        );
    }

    #[tokio::test]
    async fn an_existing_branch_is_reused_unless_checked_out() {
        let f = fixture();
        let (s1, s2, s3) = (f.session("s1"), f.session("s2"), f.session("s3"));
        f.checkout("api", &s1, "calvin/1").await;
        let repo = f.workspace.resolve("api").expect("api").clone();
        let err = f.refused("api", &s2, "calvin/1").await;
        assert_eq!(
            err.to_string(),
            format!(
                "cannot check out api: branch calvin/1 is already checked out at {}",
                s1.join("api").display()
            )
        );
        assert!(!s2.join("api").exists());
        write(&s1.join("api/kept.txt"), "kept\n");
        run(&s1.join("api"), &["add", "kept.txt"]);
        run(&s1.join("api"), &["commit", "-q", "-m", "kept"]);
        std::fs::remove_dir_all(&s1).expect("session gone");
        let got = f.checkout("api", &s3, "calvin/1").await;
        assert_eq!(got.branch, "calvin/1");
        assert!(s3.join("api/kept.txt").exists());
        for bad in [
            "", "-x", "a..b", "a b", "x.lock", "a/.b", "HEAD", "a//b", "a:b",
        ] {
            let err = f.workspace.checkout(&repo, &s2, bad).await.expect_err(bad);
            assert!(
                matches!(err, CheckoutError::BadBranch { .. }),
                "{bad}: {err:?}"
            );
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn two_sessions_racing_for_one_repository_both_succeed() {
        let f = fixture();
        let (s1, s2) = (f.session("s1"), f.session("s2"));
        let repo = f.workspace.resolve("api").expect("api").clone();
        let (a, b) = tokio::join!(
            f.workspace.checkout(&repo, &s1, "calvin/1"),
            f.workspace.checkout(&repo, &s2, "calvin/2"),
        );
        let (a, b) = (a.expect("first"), b.expect("second"));
        assert_eq!(u8::from(a.cloned) + u8::from(b.cloned), 1, "{a:?} {b:?}");
        assert_eq!(
            (a.branch.as_str(), b.branch.as_str()),
            ("calvin/1", "calvin/2")
        );
        assert!(s1.join("api/api.txt").exists() && s2.join("api/api.txt").exists());
        let cache_entries: Vec<String> = std::fs::read_dir(f.root.join("cache"))
            .expect("cache")
            .map(|entry| {
                entry
                    .expect("entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        let mut sorted = cache_entries.clone();
        sorted.sort();
        assert_eq!(sorted, ["api.git", "api.lock"]);

        // The same session twice at once: one adds it, the other finds it.
        let s3 = f.session("s3");
        let (c, d) = tokio::join!(
            f.workspace.checkout(&repo, &s3, "calvin/3"),
            f.workspace.checkout(&repo, &s3, "calvin/3"),
        );
        let (c, d) = (c.expect("third"), d.expect("fourth"));
        assert!(c.already != d.already, "{c:?} {d:?}");
    }

    #[tokio::test]
    async fn something_else_at_the_path_is_refused() {
        let f = fixture();
        let session = f.session("s1");
        write(&session.join("api/notes.txt"), "mine\n");
        let err = f.refused("api", &session, "calvin/1").await;
        assert_eq!(
            err.to_string(),
            format!(
                "{} already exists and is not a checkout of api: move it away, then call checkout_repo again",
                session.join("api").display()
            )
        );
        assert_eq!(
            std::fs::read_to_string(session.join("api/notes.txt")).expect("kept"),
            "mine\n"
        );
        // A clone of the same remote is not a worktree of the cache either.
        let other = f.session("s2");
        let remote = f.root.join("remotes/acme/api.git");
        run(&other, &["clone", "-q", s(&remote), "api"]);
        let err = f.refused("api", &other, "calvin/2").await;
        assert!(matches!(err, CheckoutError::Occupied { .. }), "{err:?}");
        // A file, too.
        let third = f.session("s3");
        write(&third.join("api"), "a file\n");
        let err = f.refused("api", &third, "calvin/3").await;
        assert!(matches!(err, CheckoutError::Occupied { .. }), "{err:?}");
    }

    #[tokio::test]
    async fn a_failed_clone_leaves_no_cache() {
        let f = fixture();
        let config = WorkspaceConfig {
            file: None,
            cache_dir: Some(f.root.join("cache")),
            repos: vec![RepoDef {
                name: "gone".into(),
                url: s(&f.root.join("remotes/acme/gone.git")).into(),
                published: true,
            }],
        };
        let workspace = Workspace::from_config(&config, &f.root)
            .expect("config")
            .expect("defined");
        let repo = workspace.resolve("gone").expect("gone").clone();
        let session = f.session("s1");
        let err = workspace
            .checkout(&repo, &session, "calvin/1")
            .await
            .expect_err("no remote");
        assert!(matches!(err, CheckoutError::Clone { .. }), "{err:?}");
        assert!(
            err.to_string()
                .starts_with("cannot clone gone: git fetch failed: "),
            "{err}"
        );
        assert!(!f.root.join("cache/gone.git").exists());
        assert!(!f.root.join("cache/.gone.git.partial").exists());
        assert!(!session.join("gone").exists());
    }
}
