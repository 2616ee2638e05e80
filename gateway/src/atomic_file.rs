//! Files replaced whole (written beside, synced, renamed over), so a reader
//! never sees half of one, and exclusive locks held on a file or a folder
//! (`flock`, across threads and processes).

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// The permissions of a file [`replace`] writes.
#[derive(Debug, Clone, Copy)]
pub enum Mode {
    /// Exactly these bits.
    Exact(u32),
    /// These bits less the process's umask (a new file's usual mode).
    Umasked(u32),
}

/// Replaces `path` with `bytes`: a new file beside it, synced, renamed
/// over it. A failure leaves `path` as it was and no temporary file.
pub fn replace(path: &Path, bytes: &[u8], mode: Mode) -> io::Result<()> {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".{}.tmp", crate::random_id::random_hex::<8>()));
    let temp = path.with_file_name(name);
    let written = (|| {
        let bits = match mode {
            Mode::Exact(bits) | Mode::Umasked(bits) => bits,
        };
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(bits)
            .open(&temp)?;
        if let Mode::Exact(bits) = mode {
            file.set_permissions(std::fs::Permissions::from_mode(bits))?;
        }
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&temp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written
}

/// Waits for an exclusive lock on `path`, a folder or a file (made if
/// missing); it is held until the returned handle is dropped. Blocking.
pub fn lock(path: &Path) -> io::Result<File> {
    let handle = if path.is_dir() {
        File::open(path)?
    } else {
        OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)?
    };
    handle.lock()?;
    Ok(handle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replaced_file_has_its_mode_and_no_temporary_is_left() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        replace(&path, b"one", Mode::Exact(0o600)).expect("written");
        replace(&path, b"two", Mode::Exact(0o640)).expect("replaced");
        assert_eq!(std::fs::read(&path).expect("read"), b"two");
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o640);
        assert_eq!(std::fs::read_dir(dir.path()).expect("list").count(), 1);
        let missing = dir.path().join("no/such/f");
        assert!(replace(&missing, b"x", Mode::Exact(0o600)).is_err());
    }

    #[test]
    fn a_lock_waits_for_the_holder() {
        let dir = tempfile::tempdir().expect("tempdir");
        let held = lock(dir.path()).expect("the folder");
        let (tx, rx) = std::sync::mpsc::channel();
        let path = dir.path().to_owned();
        let waiter = std::thread::spawn(move || {
            let _second = lock(&path).expect("then ours");
            tx.send(()).expect("sent");
        });
        assert!(
            rx.recv_timeout(std::time::Duration::from_millis(200))
                .is_err()
        );
        drop(held);
        rx.recv_timeout(std::time::Duration::from_secs(5))
            .expect("taken after");
        waiter.join().expect("thread");
        let file_lock = lock(&dir.path().join("x.lock")).expect("a file made");
        drop(file_lock);
    }
}
