//! The env file a session's shell commands source: its secrets as
//! exported variables.
//!
//! A coding CLI runs each shell command with `bash -c`; a non-interactive
//! bash sources the file named by `BASH_ENV` first. The launcher (or
//! whoever starts the CLI) sets `BASH_ENV` to the session's env file, so
//! every command sees the secrets set so far, and a secret set during the
//! session reaches the next command without a restart.
//!
//! - The file: a header line, then `export NAME='value'` lines, values
//!   single-quoted (a `'` written as `'\''`), mode 0600, replaced
//!   atomically (written beside it, then renamed), rebuilt whole from the
//!   secret store each time, under a lock on its folder so two writers
//!   (two submissions, the stdio gateway and the daemon) never lose one.
//! - A secret asked for with `file: true` is written to `<env file>.d/NAME`
//!   (0600, in a 0700 folder marked as calvin's) and the variable holds
//!   that path.
//! - Its folder is made 0700 if missing. That folder and every folder
//!   above it must be the user's own and writable by no one else, or
//!   root's (world-writable only with the sticky bit), so another local
//!   user cannot swap the file. A file there that calvin did not write is
//!   never replaced, and only calvin's own files in `.d` are removed.
//! - The file is derived state, and its existence says the session is
//!   live: [`start`] writes it when a session starts (the stdio gateway, a
//!   daemon registration), [`update`] rewrites it when a secret is set but
//!   only while it exists, and [`end`] removes it when the session ends.
//!   A secret set after its session ended stays in the encrypted store and
//!   reaches the file when the session starts again.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::atomic_file;
use crate::secrets::{Secret, is_env_name};

/// The first line of every env file calvin writes.
const HEADER: &str =
    "# Written by calvin-gateway: this session's secrets (request_secret). Do not edit.\n";
/// The file that marks a `.d` folder as calvin's.
const FILES_MARKER: &str = ".calvin-secret-files";

/// The folder holding the files of `file: true` secrets.
pub fn files_dir(env_file: &Path) -> PathBuf {
    let mut name = env_file.file_name().unwrap_or_default().to_os_string();
    name.push(".d");
    env_file.with_file_name(name)
}

/// A session starts: its env file is written (an empty one when it has no
/// secrets, so `BASH_ENV` always names a file).
pub fn start(env_file: &Path, secrets: &[Secret]) -> std::io::Result<()> {
    let dir = folder(env_file)?;
    private_dir(dir)?;
    let _lock = atomic_file::lock(dir)?;
    write(env_file, secrets)
}

/// A secret was set: the env file is rewritten if its session is live
/// (the file exists). Whether it was.
pub fn update(
    env_file: &Path,
    secrets: impl FnOnce() -> std::io::Result<Vec<Secret>>,
) -> std::io::Result<bool> {
    let Ok(dir) = folder(env_file) else {
        return Ok(false);
    };
    if !dir.is_dir() {
        return Ok(false);
    }
    check_ancestors(dir)?;
    let _lock = atomic_file::lock(dir)?;
    if !env_file.exists() {
        return Ok(false);
    }
    write(env_file, &secrets()?)?;
    Ok(true)
}

/// The session ended: the env file and its secrets' files go (and the
/// folder, when that leaves it empty).
pub fn end(env_file: &Path) {
    let Ok(dir) = folder(env_file) else { return };
    if let Ok(_lock) = atomic_file::lock(dir) {
        if is_ours(env_file) {
            let _ = std::fs::remove_file(env_file);
        }
        remove_files(&files_dir(env_file), &[]);
        let _ = std::fs::remove_dir(files_dir(env_file));
    }
    let _ = std::fs::remove_dir(dir);
}

/// `value` as one single-quoted shell word.
fn quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', "'\\''"))
}

fn folder(env_file: &Path) -> std::io::Result<&Path> {
    env_file
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .ok_or_else(|| std::io::Error::other("the env file has no folder"))
}

/// `bytes` into `path`, 0600, atomically.
fn replace_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    atomic_file::replace(path, bytes, atomic_file::Mode::Exact(0o600))
}

/// Writes the file (the caller holds the folder's lock).
fn write(env_file: &Path, secrets: &[Secret]) -> std::io::Result<()> {
    if env_file.exists() && !is_ours(env_file) {
        return Err(std::io::Error::other(format!(
            "{} exists and was not written by calvin: it is not replaced",
            env_file.display()
        )));
    }
    let files = files_dir(env_file);
    let mut text = String::from(HEADER);
    let mut kept = Vec::new();
    for secret in secrets {
        let value = if secret.file {
            files_folder(&files)?;
            let path = files.join(&secret.name);
            replace_private(&path, secret.value.as_bytes())?;
            kept.push(secret.name.clone());
            path.to_string_lossy().into_owned()
        } else {
            secret.value.clone()
        };
        text.push_str(&format!("export {}={}\n", secret.name, quote(&value)));
    }
    replace_private(env_file, text.as_bytes())?;
    remove_files(&files, &kept);
    Ok(())
}

/// Whether `path` is an env file calvin wrote.
fn is_ours(path: &Path) -> bool {
    let mut start = vec![0; HEADER.len()];
    File::open(path)
        .and_then(|mut f| f.read_exact(&mut start))
        .is_ok_and(|()| start == HEADER.as_bytes())
}

/// Makes the `.d` folder (marked as calvin's), or checks an existing one
/// is.
fn files_folder(files: &Path) -> std::io::Result<()> {
    if files.exists() {
        if !files.join(FILES_MARKER).exists() {
            return Err(std::io::Error::other(format!(
                "{} exists and is not calvin's: no secret file is written there",
                files.display()
            )));
        }
        return check_own(files);
    }
    std::fs::DirBuilder::new().mode(0o700).create(files)?;
    replace_private(
        &files.join(FILES_MARKER),
        b"calvin-gateway keeps secret files here\n",
    )
}

/// Removes calvin's secret files from `files` but those in `kept`.
fn remove_files(files: &Path, kept: &[String]) {
    if !files.join(FILES_MARKER).exists() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(files) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if is_env_name(&name) && !kept.contains(&name) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    if kept.is_empty() {
        let _ = std::fs::remove_file(files.join(FILES_MARKER));
    }
}

/// Makes `dir` (0700) or checks an existing one, and checks every folder
/// above it.
fn private_dir(dir: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(dir) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)?;
        }
        Err(e) => return Err(e),
    }
    check_own(dir)?;
    check_ancestors(dir)
}

/// `dir` is a folder of this user's that no one else can write to.
fn check_own(dir: &Path) -> std::io::Result<()> {
    let meta = std::fs::symlink_metadata(dir)?;
    if !meta.is_dir() || !users_own(&meta) {
        return Err(std::io::Error::other(format!(
            "{} must be a folder of this user's that no one else can write to",
            dir.display()
        )));
    }
    Ok(())
}

/// Whether `meta` is of this user's and no one else can write to it.
pub(crate) fn users_own(meta: &std::fs::Metadata) -> bool {
    meta.uid() == rustix::process::getuid().as_raw() && meta.mode() & 0o022 == 0
}

/// Every folder from `dir` up is this user's and writable by no one else,
/// or root's and world-writable only with the sticky bit: no one else can
/// rename the path to the env file.
fn check_ancestors(dir: &Path) -> std::io::Result<()> {
    let real = std::fs::canonicalize(dir)?;
    let uid = rustix::process::getuid().as_raw();
    for folder in real.ancestors() {
        let meta = std::fs::metadata(folder)?;
        let mode = meta.mode();
        let unwritable = mode & 0o022 == 0;
        let sticky = mode & 0o1000 != 0;
        let safe = match meta.uid() {
            0 => unwritable || sticky,
            owner => owner == uid && unwritable,
        };
        if !safe {
            return Err(std::io::Error::other(format!(
                "{} could be changed by another user (owner {}, mode {:o}): the env file is not kept under it",
                folder.display(),
                meta.uid(),
                mode & 0o7777
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn secret(name: &str, value: &str, file: bool) -> Secret {
        Secret {
            name: name.into(),
            value: value.into(),
            file,
        }
    }

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).expect("exists").permissions().mode() & 0o777
    }

    #[test]
    fn bash_reads_every_value_back_exactly() {
        let dir = tempfile::tempdir().expect("tempdir");
        let env = dir.path().join("s/env.sh");
        let tricky = "it's $HOME `id` \"q\" \\n\nline two";
        start(
            &env,
            &[
                secret("API_KEY", tricky, false),
                secret("CERT", "-----BEGIN-----\nx\n", true),
            ],
        )
        .expect("written");
        assert_eq!(mode(&env), 0o600);
        assert_eq!(mode(env.parent().expect("dir")), 0o700);
        let out = std::process::Command::new("bash")
            .args(["-c", "printf '%s' \"$API_KEY\"; printf '|'; cat \"$CERT\""])
            .env("BASH_ENV", &env)
            .output()
            .expect("bash");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("{tricky}|-----BEGIN-----\nx\n")
        );
        assert_eq!(mode(&files_dir(&env).join("CERT")), 0o600);

        // Rewritten without CERT: its file goes.
        let updated = update(&env, || Ok(vec![secret("API_KEY", "v2", false)])).expect("updated");
        assert!(updated);
        assert!(!files_dir(&env).join("CERT").exists());
        end(&env);
        assert!(!env.exists() && !env.parent().expect("dir").exists());
        // Once the session ended, a secret set later does not bring it back.
        let updated = update(&env, || Ok(vec![secret("API_KEY", "v3", false)])).expect("no error");
        assert!(!updated);
        assert!(!env.exists());
    }

    #[test]
    fn folders_others_can_write_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let shared = dir.path().join("shared");
        std::fs::create_dir(&shared).expect("dir");
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        let err = start(&shared.join("env.sh"), &[]).expect_err("refused");
        assert!(
            err.to_string().contains("no one else can write to"),
            "{err}"
        );
        // Nor under a folder others can write to, higher up.
        let err = start(&shared.join("below/env.sh"), &[]).expect_err("refused");
        assert!(
            err.to_string().contains("could be changed by another user"),
            "{err}"
        );
    }

    #[test]
    fn files_calvin_did_not_write_are_left_alone() {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("ssh/config");
        std::fs::create_dir(dir.path().join("ssh")).expect("dir");
        std::fs::set_permissions(
            dir.path().join("ssh"),
            std::fs::Permissions::from_mode(0o700),
        )
        .expect("chmod");
        std::fs::write(&config, "Host *\n").expect("file");
        std::fs::create_dir(files_dir(&config)).expect("dir");
        std::fs::write(files_dir(&config).join("KEEP"), "mine").expect("file");
        let err = start(&config, &[]).expect_err("refused");
        assert!(
            err.to_string().contains("was not written by calvin"),
            "{err}"
        );
        assert_eq!(std::fs::read_to_string(&config).expect("kept"), "Host *\n");
        end(&config);
        assert!(config.exists() && files_dir(&config).join("KEEP").exists());
    }
}
