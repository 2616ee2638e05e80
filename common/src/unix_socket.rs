//! Private Unix sockets (the agent's control socket, the gateway's
//! send-file socket): 0600 in a folder of its own, and a stale socket
//! file is replaced while a live one is refused.

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use tokio::net::UnixListener;

#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    #[error("another process already serves {0}")]
    InUse(PathBuf),
    #[error(
        "{0} must be a folder of yours that only you can use (owner you, mode 0700); another user could have made it"
    )]
    UnsafeFolder(PathBuf),
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
}

/// Binds a private Unix socket: its folder is made 0700 if missing, a stale
/// socket file is replaced, a live one is an error, and the socket is 0600.
/// (Whether an existing folder is private enough is the caller's to say:
/// see [`check_private_dir`].)
pub async fn bind(path: &Path) -> Result<UnixListener, SocketError> {
    let io_err = |source| SocketError::Io {
        path: path.to_owned(),
        source,
    };
    if let Some(dir) = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty() && !d.exists())
    {
        std::fs::create_dir_all(dir).map_err(io_err)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(io_err)?;
    }
    if path.exists() {
        if tokio::net::UnixStream::connect(path).await.is_ok() {
            return Err(SocketError::InUse(path.to_owned()));
        }
        std::fs::remove_file(path).map_err(io_err)?;
    }
    let listener = UnixListener::bind(path).map_err(io_err)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(io_err)?;
    Ok(listener)
}

/// Refuses a folder that is not owned by this user or that others may use.
pub fn check_private_dir(dir: &Path) -> Result<(), SocketError> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(dir).map_err(|source| SocketError::Io {
        path: dir.to_owned(),
        source,
    })?;
    let mine = meta.uid() == rustix::process::getuid().as_raw();
    if !meta.is_dir() || !mine || meta.mode() & 0o077 != 0 {
        return Err(SocketError::UnsafeFolder(dir.to_owned()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn a_folder_others_can_use_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let open = dir.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = check_private_dir(&open).unwrap_err();
        assert!(err.to_string().contains("only you can use"), "{err}");
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o700)).unwrap();
        check_private_dir(&open).unwrap();
    }

    #[tokio::test]
    async fn the_socket_is_0600_and_a_live_one_is_not_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/agent.sock");
        let _listener = bind(&path).await.unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let dir_mode = std::fs::metadata(path.parent().unwrap())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(dir_mode & 0o777, 0o700);
        assert!(matches!(bind(&path).await, Err(SocketError::InUse(_))));
    }

    #[tokio::test]
    async fn a_stale_socket_file_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.sock");
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        assert!(path.exists());
        bind(&path).await.unwrap();
    }
}
