//! checkout_repo's repositories: the workspace definition from
//! gateway.toml's `[workspace]` table, resolving checkout_repo's names
//! against it, and the list of them kept in each session's `AGENTS.md`.
//!
//! ```toml
//! [workspace]
//! cache_dir = "/var/cache/calvin/repos"   # default: ~/.local/state/calvin/repos
//! [[workspace.repos]]
//! name = "api"
//! url = "git@github.com:acme/api.git"
//! [[workspace.repos]]
//! name = "web"
//! url = "https://github.com/acme/web"
//! published = false                       # listed, but checkout_repo refuses it
//! ```
//!
//! or `file = "repos.toml"` (relative to gateway.toml's folder) holding the
//! same `[[repos]]` entries.
//!
//! Their checkouts ([`Workspace::checkout`]) are [`crate::repo_cache`]'s.

use std::io::{self, ErrorKind};
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Longest repository name.
pub const MAX_NAME_LEN: usize = 100;

/// The line that opens the repository list in `AGENTS.md`; any line
/// starting with `<!-- calvin:workspace-repos begin` is taken for it.
pub const BEGIN_MARKER: &str =
    "<!-- calvin:workspace-repos begin: written by calvin-gateway, edits here are replaced -->";
const BEGIN_PREFIX: &str = "<!-- calvin:workspace-repos begin";
/// The line that closes it.
pub const END_MARKER: &str = "<!-- calvin:workspace-repos end -->";

/// `[workspace]` in gateway.toml.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorkspaceConfig {
    /// A TOML file of `[[repos]]`, relative to gateway.toml's folder.
    pub file: Option<PathBuf>,
    /// Where the clones live; relative to gateway.toml's folder.
    pub cache_dir: Option<PathBuf>,
    pub repos: Vec<RepoDef>,
}

/// One repository of the workspace.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RepoDef {
    /// Its folder's name in a session directory.
    pub name: String,
    /// What `git fetch` reaches it by.
    pub url: String,
    /// An unpublished repository is listed but not checked out.
    #[serde(default = "yes")]
    pub published: bool,
}

fn yes() -> bool {
    true
}

/// The `workspace.file` file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WorkspaceFile {
    #[serde(default)]
    repos: Vec<RepoDef>,
}

/// A checked workspace definition: names usable as folder names and
/// unique ignoring case, as are the owner/name pairs taken from the URLs.
#[derive(Debug, Clone)]
pub struct Workspace {
    repos: Vec<Repo>,
    cache_dir: PathBuf,
}

#[derive(Debug, Clone)]
struct Repo {
    def: RepoDef,
    /// `owner/name` from the URL's last two path segments, `.git` removed.
    owner_name: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    #[error(
        "[workspace] lists repositories both inline ([[workspace.repos]]) and in file = {}: keep one of the two",
        file.display()
    )]
    InlineAndFile { file: PathBuf },

    #[error("cannot read the workspace file {}: {source}", path.display())]
    ReadFile { path: PathBuf, source: io::Error },

    #[error("the workspace file {}: {source}", path.display())]
    ParseFile {
        path: PathBuf,
        source: toml::de::Error,
    },

    #[error("the workspace file {} lists no repositories ([[repos]] with name and url)", path.display())]
    NoRepos { path: PathBuf },

    #[error(
        "the workspace repository name {name:?} cannot be a folder name: use 1 to {MAX_NAME_LEN} of A-Z, a-z, 0-9, '.', '_' and '-', not starting with '.'"
    )]
    BadName { name: String },

    #[error(
        "the workspace repositories {first:?} and {second:?} have the same name (names are compared ignoring case)"
    )]
    DuplicateName { first: String, second: String },

    #[error("the workspace repository {name} has no usable url (empty, or starting with '-')")]
    BadUrl { name: String },

    #[error(
        "the workspace repositories {first} and {second} are both {owner_name} (compared ignoring case): checkout_repo could not tell them apart by owner/name"
    )]
    DuplicateOwnerName {
        first: String,
        second: String,
        owner_name: String,
    },

    #[error("no folder for the repository cache: set [workspace] cache_dir")]
    NoCacheDir,
}

/// Why checkout_repo's name matched no repository it may check out. The
/// texts are the spec's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    #[error("no repository {0} in this workspace; the list is in AGENTS.md")]
    Unknown(String),
    #[error("{0} is not published yet")]
    NotPublished(String),
}

impl Workspace {
    /// The workspace `config` defines, or `None` when it defines none.
    /// `config_dir` is gateway.toml's folder: relative paths are taken from
    /// it. Reads `config.file`.
    pub fn from_config(
        config: &WorkspaceConfig,
        config_dir: &Path,
    ) -> Result<Option<Workspace>, WorkspaceError> {
        let defs = match &config.file {
            None if config.repos.is_empty() => return Ok(None),
            None => config.repos.clone(),
            Some(file) if !config.repos.is_empty() => {
                return Err(WorkspaceError::InlineAndFile { file: file.clone() });
            }
            Some(file) => {
                let path = config_dir.join(file);
                let text =
                    std::fs::read_to_string(&path).map_err(|source| WorkspaceError::ReadFile {
                        path: path.clone(),
                        source,
                    })?;
                let parsed: WorkspaceFile =
                    toml::from_str(&text).map_err(|source| WorkspaceError::ParseFile {
                        path: path.clone(),
                        source,
                    })?;
                if parsed.repos.is_empty() {
                    return Err(WorkspaceError::NoRepos { path });
                }
                parsed.repos
            }
        };
        let cache_dir = match &config.cache_dir {
            Some(dir) => config_dir.join(dir),
            None => dirs::state_dir()
                .or_else(|| dirs::home_dir().map(|home| home.join(".local/state")))
                .ok_or(WorkspaceError::NoCacheDir)?
                .join("calvin/repos"),
        };
        let mut repos: Vec<Repo> = Vec::with_capacity(defs.len());
        for def in defs {
            if !is_folder_name(&def.name) {
                return Err(WorkspaceError::BadName { name: def.name });
            }
            if def.url.trim().is_empty() || def.url.starts_with('-') {
                return Err(WorkspaceError::BadUrl { name: def.name });
            }
            let owner_name = owner_name(&def.url);
            for other in &repos {
                if other.def.name.eq_ignore_ascii_case(&def.name) {
                    return Err(WorkspaceError::DuplicateName {
                        first: other.def.name.clone(),
                        second: def.name,
                    });
                }
                if let (Some(a), Some(b)) = (&other.owner_name, &owner_name)
                    && a.to_lowercase() == b.to_lowercase()
                {
                    return Err(WorkspaceError::DuplicateOwnerName {
                        first: other.def.name.clone(),
                        second: def.name,
                        owner_name: b.clone(),
                    });
                }
            }
            repos.push(Repo { def, owner_name });
        }
        Ok(Some(Workspace { repos, cache_dir }))
    }

    /// The repositories, in the definition's order.
    pub fn repos(&self) -> impl Iterator<Item = &RepoDef> {
        self.repos.iter().map(|repo| &repo.def)
    }

    /// Where the clones live.
    pub fn cache_dir(&self) -> &Path {
        &self.cache_dir
    }

    /// The published repository named `wanted`, or whose URL ends in
    /// `wanted` as `owner/name`, ignoring case.
    pub fn resolve(&self, wanted: &str) -> Result<&RepoDef, ResolveError> {
        let key = wanted.trim().to_lowercase();
        let found = self
            .repos
            .iter()
            .find(|repo| repo.def.name.to_lowercase() == key)
            .or_else(|| {
                self.repos.iter().find(|repo| {
                    repo.owner_name
                        .as_ref()
                        .is_some_and(|owner_name| owner_name.to_lowercase() == key)
                })
            })
            .ok_or_else(|| ResolveError::Unknown(wanted.to_owned()))?;
        if !found.def.published {
            return Err(ResolveError::NotPublished(wanted.to_owned()));
        }
        Ok(&found.def)
    }
}

/// `[A-Za-z0-9._-]`, 1 to [`MAX_NAME_LEN`] of them, not starting with '.'.
fn is_folder_name(name: &str) -> bool {
    (1..=MAX_NAME_LEN).contains(&name.len())
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// `owner/name` from a remote URL's last two path segments, `.git` removed:
/// `https://host/o/r.git`, `git@host:o/r`, `ssh://git@host:22/o/r`,
/// `file:///srv/o/r.git` and `/srv/o/r.git` all give `o/r`.
fn owner_name(url: &str) -> Option<String> {
    let mut segments = crate::web_link::remote_path(url)
        .split('/')
        .filter(|segment| !segment.is_empty() && *segment != ".");
    let mut name = segments.next_back()?;
    name = name.strip_suffix(".git").unwrap_or(name);
    let owner = segments.next_back()?;
    if name.is_empty() || owner == ".." || name == ".." {
        return None;
    }
    Some(format!("{owner}/{name}"))
}

impl Workspace {
    /// Keeps the repository list in `<session_dir>/AGENTS.md` between
    /// [`BEGIN_MARKER`] and [`END_MARKER`]: creates the file when missing,
    /// replaces what is between the markers when they are there, and
    /// appends the block after a blank line when they are not, leaving
    /// every other byte as it was. Written atomically (a temporary file
    /// renamed over it), and not at all when nothing changes. An
    /// `AGENTS.md` that is a symlink is followed when it leads to a file
    /// inside the session directory, and refused otherwise. Blocking.
    pub fn write_agents_md(&self, session_dir: &Path) -> io::Result<()> {
        let path = session_dir.join("AGENTS.md");
        let target = match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.file_type().is_symlink() => {
                let target = std::fs::canonicalize(&path)?;
                if !target.starts_with(std::fs::canonicalize(session_dir)?) {
                    return Err(io::Error::other(format!(
                        "{} is a symbolic link to {}, outside the session directory; not written",
                        path.display(),
                        target.display()
                    )));
                }
                target
            }
            _ => path,
        };
        let old = match std::fs::read(&target) {
            Ok(bytes) => Some(bytes),
            Err(err) if err.kind() == ErrorKind::NotFound => None,
            Err(err) => return Err(err),
        };
        let new = splice(old.as_deref().unwrap_or_default(), &self.agents_block());
        if old.as_deref() == Some(new.as_slice()) {
            return Ok(());
        }
        write_atomically(&target, &new)
    }

    /// The list, markers included, without a final newline.
    fn agents_block(&self) -> String {
        let mut block = format!(
            "{BEGIN_MARKER}\n## Workspace repositories\n\nThe checkout_repo tool adds these repositories to the session directory, each as a git worktree on the session's branch; give it the name or owner/name.\n\n"
        );
        for repo in &self.repos {
            block.push_str(&format!("- `{}`", repo.def.name));
            if let Some(owner_name) = &repo.owner_name {
                block.push_str(&format!(" ({owner_name})"));
            }
            let state = if repo.def.published {
                "published"
            } else {
                "not published yet"
            };
            block.push_str(&format!(": {state}\n"));
        }
        block.push_str(END_MARKER);
        block
    }
}

/// `old` with `block` in place of the marked one, or appended.
fn splice(old: &[u8], block: &str) -> Vec<u8> {
    let mut lines = Vec::new();
    let mut start = 0;
    while start < old.len() {
        let end = old[start..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(old.len(), |i| start + i + 1);
        lines.push(start..end);
        start = end;
    }
    let text = |range: &std::ops::Range<usize>| old[range.clone()].trim_ascii_end();
    let begin = lines
        .iter()
        .position(|line| text(line).starts_with(BEGIN_PREFIX.as_bytes()));
    let mut out = Vec::with_capacity(old.len() + block.len() + 2);
    match begin {
        Some(b) => {
            let end = lines[b..]
                .iter()
                .find(|line| text(line) == END_MARKER.as_bytes())
                .unwrap_or(&lines[b]);
            out.extend_from_slice(&old[..lines[b].start]);
            out.extend_from_slice(block.as_bytes());
            if old[..end.end].ends_with(b"\n") {
                out.push(b'\n');
            }
            out.extend_from_slice(&old[end.end..]);
        }
        None => {
            out.extend_from_slice(old);
            if !out.is_empty() {
                if !out.ends_with(b"\n") {
                    out.push(b'\n');
                }
                if !out.ends_with(b"\n\n") {
                    out.push(b'\n');
                }
            }
            out.extend_from_slice(block.as_bytes());
            out.push(b'\n');
        }
    }
    out
}

/// Writes `bytes` over `path` atomically, keeping `path`'s permissions
/// when it exists.
fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = match std::fs::metadata(path) {
        Ok(meta) => crate::atomic_file::Mode::Exact(meta.permissions().mode() & 0o7777),
        Err(_) => crate::atomic_file::Mode::Umasked(0o644),
    };
    crate::atomic_file::replace(path, bytes, mode)
}

#[cfg(test)]
pub(crate) mod test_support {
    //! The fixture of this module's tests and of [`crate::repo_cache`]'s.

    use super::*;
    use crate::git::test_support::{bare_remote, s};

    /// Two remotes, `acme/api.git` and `acme/web.git` (bare, with `main`),
    /// a workspace of them with its cache in the temporary directory, and
    /// room for session directories.
    pub(crate) struct Fixture {
        _tmp: tempfile::TempDir,
        pub(crate) root: PathBuf,
        pub(crate) workspace: Workspace,
    }

    fn remote(root: &Path, owner_repo: &str, file: &str) -> PathBuf {
        let bare = root.join("remotes").join(format!("{owner_repo}.git"));
        let seed = root.join("seeds").join(owner_repo);
        bare_remote(&bare, &seed, &[(file, "first\n")]);
        bare
    }

    pub(crate) fn fixture() -> Fixture {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = std::fs::canonicalize(tmp.path()).expect("canonical");
        let api = remote(&root, "acme/api", "api.txt");
        let web = remote(&root, "acme/web", "web.txt");
        let config = WorkspaceConfig {
            file: None,
            cache_dir: Some("cache".into()),
            repos: vec![
                RepoDef {
                    name: "api".into(),
                    url: s(&api).into(),
                    published: true,
                },
                RepoDef {
                    name: "web".into(),
                    url: format!("file://{}", s(&web)),
                    published: true,
                },
            ],
        };
        let workspace = Workspace::from_config(&config, &root)
            .expect("config")
            .expect("defined");
        Fixture {
            _tmp: tmp,
            root,
            workspace,
        }
    }

    impl Fixture {
        pub(crate) fn session(&self, name: &str) -> PathBuf {
            let dir = self.root.join("sessions").join(name);
            std::fs::create_dir_all(&dir).expect("mkdir session");
            dir
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::fixture;
    use super::*;
    use crate::git::test_support::write;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn names_and_owner_names_resolve_ignoring_case() {
        let f = fixture();
        assert_eq!(f.workspace.resolve("API").expect("name").name, "api");
        assert_eq!(
            f.workspace.resolve("Acme/Web").expect("owner/name").name,
            "web"
        );
        assert_eq!(
            f.workspace.resolve("acme/nope"),
            Err(ResolveError::Unknown("acme/nope".into()))
        );
        assert_eq!(
            f.workspace.resolve("Nope").map_err(|e| e.to_string()),
            Err("no repository Nope in this workspace; the list is in AGENTS.md".into())
        );
        assert_eq!(
            owner_name("https://u:p@github.com/acme/api.git/").as_deref(),
            Some("acme/api")
        );
        assert_eq!(
            owner_name("git@github.com:acme/api.git").as_deref(),
            Some("acme/api")
        );
        assert_eq!(
            owner_name("ssh://git@host:22/acme/api").as_deref(),
            Some("acme/api")
        );
        assert_eq!(
            owner_name("file:///srv/git/acme/api.git").as_deref(),
            Some("acme/api")
        );
        assert_eq!(
            owner_name("/srv/git/acme/api.git").as_deref(),
            Some("acme/api")
        );
        assert_eq!(owner_name("../api.git"), None);
        assert_eq!(owner_name("git@host:api.git"), None);
    }

    #[test]
    fn unpublished_repositories_are_listed_but_not_resolved() {
        let config: WorkspaceConfig = toml::from_str(
            "cache_dir = \"/c\"\n[[repos]]\nname = \"Tools\"\nurl = \"git@github.com:acme/tools.git\"\npublished = false\n",
        )
        .expect("toml");
        let workspace = Workspace::from_config(&config, Path::new("/etc"))
            .expect("config")
            .expect("defined");
        assert_eq!(
            workspace.resolve("acme/tools").map_err(|e| e.to_string()),
            Err("acme/tools is not published yet".into())
        );
        assert_eq!(
            workspace.resolve("tools"),
            Err(ResolveError::NotPublished("tools".into()))
        );
        assert_eq!(workspace.repos().count(), 1);
        assert_eq!(workspace.cache_dir(), Path::new("/c"));
    }

    #[test]
    fn agents_md_keeps_the_list_between_its_markers() {
        let f = fixture();
        let session = f.session("s1");
        let agents = session.join("AGENTS.md");
        f.workspace.write_agents_md(&session).expect("create");
        let made = std::fs::read_to_string(&agents).expect("read");
        assert_eq!(
            made,
            format!(
                "{BEGIN_MARKER}\n## Workspace repositories\n\nThe checkout_repo tool adds these repositories to the session directory, each as a git worktree on the session's branch; give it the name or owner/name.\n\n- `api` (acme/api): published\n- `web` (acme/web): published\n{END_MARKER}\n"
            )
        );

        // Unchanged: not rewritten.
        let before = std::fs::metadata(&agents).expect("stat");
        f.workspace.write_agents_md(&session).expect("again");
        let after = std::fs::metadata(&agents).expect("stat");
        assert_eq!(
            (before.ino(), before.mtime_nsec()),
            (after.ino(), after.mtime_nsec())
        );

        // Text around the block stays byte for byte; the block is replaced.
        let edited = format!(
            "# Rules\r\nBe kind.\n\n{BEGIN_MARKER}\nstale list\n{END_MARKER}\nAfter.\nno newline"
        );
        std::fs::write(&agents, &edited).expect("write");
        f.workspace.write_agents_md(&session).expect("update");
        let updated = std::fs::read_to_string(&agents).expect("read");
        let block = made.trim_end();
        assert_eq!(
            updated,
            format!("# Rules\r\nBe kind.\n\n{block}\nAfter.\nno newline")
        );

        // No markers: appended after a blank line.
        std::fs::write(&agents, "# Rules\nBe kind.").expect("write");
        f.workspace.write_agents_md(&session).expect("append");
        assert_eq!(
            std::fs::read_to_string(&agents).expect("read"),
            format!("# Rules\nBe kind.\n\n{made}")
        );
        // A begin marker without its end: only that line is replaced.
        std::fs::write(&agents, format!("a\n{BEGIN_MARKER}\nb\n")).expect("write");
        f.workspace.write_agents_md(&session).expect("lone marker");
        assert_eq!(
            std::fs::read_to_string(&agents).expect("read"),
            format!("a\n{made}b\n")
        );
        let leftovers = std::fs::read_dir(&session)
            .expect("ls")
            .filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
            })
            .count();
        assert_eq!(leftovers, 0);
    }

    #[test]
    fn agents_md_as_a_symlink_is_followed_inside_only() {
        let f = fixture();
        let session = f.session("s1");
        std::fs::write(session.join("CLAUDE.md"), "# Claude\n").expect("write");
        std::os::unix::fs::symlink("CLAUDE.md", session.join("AGENTS.md")).expect("symlink");
        f.workspace
            .write_agents_md(&session)
            .expect("through the link");
        assert!(
            std::fs::symlink_metadata(session.join("AGENTS.md"))
                .expect("stat")
                .file_type()
                .is_symlink()
        );
        let text = std::fs::read_to_string(session.join("CLAUDE.md")).expect("read");
        assert!(
            text.starts_with("# Claude\n\n<!-- calvin:workspace-repos begin"),
            "{text}"
        );

        let other = f.session("s2");
        let outside = f.root.join("outside.md");
        std::fs::write(&outside, "outside\n").expect("write");
        std::os::unix::fs::symlink(&outside, other.join("AGENTS.md")).expect("symlink");
        let err = f.workspace.write_agents_md(&other).expect_err("outside");
        assert!(
            err.to_string().contains("outside the session directory"),
            "{err}"
        );
        assert_eq!(
            std::fs::read_to_string(&outside).expect("read"),
            "outside\n"
        );
    }

    #[test]
    fn config_errors() {
        let dir = Path::new("/etc/calvin");
        let def = |name: &str, url: &str| RepoDef {
            name: name.into(),
            url: url.into(),
            published: true,
        };
        let inline = |repos: Vec<RepoDef>| WorkspaceConfig {
            file: None,
            cache_dir: None,
            repos,
        };
        let err = |config: &WorkspaceConfig| {
            Workspace::from_config(config, dir)
                .expect_err("refused")
                .to_string()
        };
        assert!(
            Workspace::from_config(&WorkspaceConfig::default(), dir)
                .expect("empty")
                .is_none()
        );
        assert_eq!(
            err(&inline(vec![
                def("api", "/r/a/api"),
                def("API", "/r/b/other")
            ])),
            "the workspace repositories \"api\" and \"API\" have the same name (names are compared ignoring case)"
        );
        for bad in ["", ".hidden", "..", "a/b", "a b", "ünï", &"x".repeat(101)] {
            assert_eq!(
                err(&inline(vec![def(bad, "/r/a/api")])),
                format!(
                    "the workspace repository name {bad:?} cannot be a folder name: use 1 to 100 of A-Z, a-z, 0-9, '.', '_' and '-', not starting with '.'"
                )
            );
        }
        assert_eq!(
            err(&inline(vec![
                def("a", "https://github.com/acme/api"),
                def("b", "git@gitlab.com:ACME/api.git")
            ])),
            "the workspace repositories a and b are both ACME/api (compared ignoring case): checkout_repo could not tell them apart by owner/name"
        );
        assert_eq!(
            err(&inline(vec![def("a", "--upload-pack=evil")])),
            "the workspace repository a has no usable url (empty, or starting with '-')"
        );
        let both = WorkspaceConfig {
            file: Some("repos.toml".into()),
            cache_dir: None,
            repos: vec![def("api", "/r/a/api")],
        };
        assert_eq!(
            err(&both),
            "[workspace] lists repositories both inline ([[workspace.repos]]) and in file = repos.toml: keep one of the two"
        );
        let unknown = toml::from_str::<WorkspaceConfig>("repo = []");
        assert!(unknown.is_err());
        let default_cache = Workspace::from_config(&inline(vec![def("api", "/r/a/api")]), dir)
            .expect("config")
            .expect("defined");
        assert!(default_cache.cache_dir().ends_with("calvin/repos"));
    }

    #[test]
    fn a_relative_file_is_read_from_the_config_folder() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let config_dir = tmp.path().join("etc");
        write(
            &config_dir.join("ws/repos.toml"),
            "[[repos]]\nname = \"api\"\nurl = \"https://github.com/acme/api\"\n\n[[repos]]\nname = \"web\"\nurl = \"git@github.com:acme/web.git\"\npublished = false\n",
        );
        let config: WorkspaceConfig =
            toml::from_str("file = \"ws/repos.toml\"\ncache_dir = \"cache\"\n").expect("toml");
        let workspace = Workspace::from_config(&config, &config_dir)
            .expect("config")
            .expect("defined");
        let names: Vec<&str> = workspace.repos().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["api", "web"]);
        assert_eq!(workspace.cache_dir(), config_dir.join("cache"));

        let missing = WorkspaceConfig {
            file: Some("nope.toml".into()),
            ..WorkspaceConfig::default()
        };
        let err = Workspace::from_config(&missing, &config_dir).expect_err("missing");
        assert!(
            err.to_string().starts_with(&format!(
                "cannot read the workspace file {}: ",
                config_dir.join("nope.toml").display()
            )),
            "{err}"
        );
        write(&config_dir.join("empty.toml"), "");
        let empty = WorkspaceConfig {
            file: Some("empty.toml".into()),
            ..WorkspaceConfig::default()
        };
        let err = Workspace::from_config(&empty, &config_dir).expect_err("empty");
        assert!(matches!(err, WorkspaceError::NoRepos { .. }), "{err:?}");
        write(
            &config_dir.join("typo.toml"),
            "[[repos]]\nname = \"a\"\nurl = \"/x\"\npublish = true\n",
        );
        let typo = WorkspaceConfig {
            file: Some("typo.toml".into()),
            ..WorkspaceConfig::default()
        };
        let err = Workspace::from_config(&typo, &config_dir).expect_err("typo");
        assert!(matches!(err, WorkspaceError::ParseFile { .. }), "{err:?}");
        assert!(err.to_string().contains("publish"), "{err}");
    }
}
