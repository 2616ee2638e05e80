//! The env file a session's shell commands source: its secrets as
//! exported variables.
//!
//! A coding CLI runs each shell command with `bash -c`; a non-interactive
//! bash sources the file named by `BASH_ENV` first. The launcher (or
//! whoever starts the CLI) sets `BASH_ENV` to the session's env file, so
//! every command sees the secrets set so far, and a secret set during the
//! session reaches the next command without a restart.
//!
//! - The file: `export NAME='value'` lines, values single-quoted (a `'`
//!   written as `'\''`), mode 0600, replaced atomically (written beside it,
//!   then renamed), rebuilt whole from the secret store each time.
//! - A secret asked for with `file: true` is written to `<env file>.d/NAME`
//!   (0600, in a 0700 folder) and the variable holds that path.
//! - Its folder is made 0700 if missing; an existing one must be the
//!   user's own and writable by no one else, so another user cannot swap
//!   the file.
//! - It is derived state: written when a session starts (the stdio gateway,
//!   a daemon registration) and when a secret is set; removed when the
//!   session ends. The encrypted store stays the record.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::secrets::Secret;

/// The folder holding the files of `file: true` secrets.
pub fn files_dir(env_file: &Path) -> PathBuf {
    let mut name = env_file.file_name().unwrap_or_default().to_os_string();
    name.push(".d");
    env_file.with_file_name(name)
}

/// Writes the env file for `secrets` (an empty file when there are none,
/// so `BASH_ENV` always names a file).
pub fn write(env_file: &Path, secrets: &[Secret]) -> std::io::Result<()> {
    let dir = env_file
        .parent()
        .ok_or_else(|| std::io::Error::other("the env file has no folder"))?;
    private_dir(dir)?;
    let files = files_dir(env_file);
    let mut text = String::from(
        "# Written by calvin-gateway: this session's secrets (request_secret). Do not edit.\n",
    );
    let mut kept = Vec::new();
    for secret in secrets {
        let value = if secret.file {
            private_dir(&files)?;
            let path = files.join(&secret.name);
            replace(&path, secret.value.as_bytes())?;
            kept.push(secret.name.clone());
            path.to_string_lossy().into_owned()
        } else {
            secret.value.clone()
        };
        text.push_str(&format!("export {}={}\n", secret.name, quote(&value)));
    }
    replace(env_file, text.as_bytes())?;
    // Files of secrets no longer in the store go.
    if let Ok(entries) = std::fs::read_dir(&files) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !kept.contains(&name) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
    Ok(())
}

/// Removes the env file and its secrets' files.
pub fn remove(env_file: &Path) {
    let _ = std::fs::remove_file(env_file);
    let _ = std::fs::remove_dir_all(files_dir(env_file));
    // The per-session folder made for it goes too when empty.
    if let Some(dir) = env_file.parent() {
        let _ = std::fs::remove_dir(dir);
    }
}

/// `value` as one single-quoted shell word.
pub fn quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', "'\\''"))
}

/// Makes `dir` (0700, with missing parents 0700) or checks that an
/// existing one is the user's own and not writable by others.
fn private_dir(dir: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(dir) {
        Ok(meta) => {
            let uid = rustix::process::getuid().as_raw();
            if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o022 != 0 {
                return Err(std::io::Error::other(format!(
                    "{} must be a folder of this user's that no one else can write to",
                    dir.display()
                )));
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir),
        Err(e) => Err(e),
    }
}

/// Replaces `path` with `bytes` (0600) atomically.
fn replace(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let suffix: u64 = rand::random();
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".{suffix:016x}.tmp"));
    let tmp = path.with_file_name(name);
    let result = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(name: &str, value: &str, file: bool) -> Secret {
        Secret {
            name: name.into(),
            value: value.into(),
            file,
        }
    }

    #[test]
    fn bash_reads_every_value_back_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let env = dir.path().join("s/env.sh");
        let tricky = "it's $HOME `id` \"q\" \\n\nline two";
        write(
            &env,
            &[
                secret("API_KEY", tricky, false),
                secret("CERT", "-----BEGIN-----\nx\n", true),
            ],
        )
        .unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&env), 0o600);
        assert_eq!(mode(env.parent().unwrap()), 0o700);
        let out = std::process::Command::new("bash")
            .args(["-c", "printf '%s' \"$API_KEY\"; printf '|'; cat \"$CERT\""])
            .env("BASH_ENV", &env)
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("{tricky}|-----BEGIN-----\nx\n")
        );
        assert_eq!(mode(&files_dir(&env).join("CERT")), 0o600);

        // Rewritten without CERT: its file goes.
        write(&env, &[secret("API_KEY", "v2", false)]).unwrap();
        assert!(!files_dir(&env).join("CERT").exists());
        remove(&env);
        assert!(!env.exists() && !env.parent().unwrap().exists());
    }

    #[test]
    fn a_folder_others_can_write_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let shared = dir.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = write(&shared.join("env.sh"), &[]).unwrap_err();
        assert!(
            err.to_string().contains("no one else can write to"),
            "{err}"
        );
    }
}
