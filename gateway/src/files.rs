//! send_file's checks, shared by the MCP tool and the `calvin-send-file`
//! script path: which file a path names, whether it may be sent, and its
//! bytes.
//!
//! [`open_for_upload`] never checks a path and then reads it. It opens the
//! path once, and every decision is made about the object that open
//! returned:
//!
//! 1. `open(path, O_PATH | O_CLOEXEC)`. An `O_PATH` handle names the file
//!    without opening it for I/O, so naming a FIFO never blocks and naming a
//!    device never runs its driver's open (no terminal becomes the
//!    controlling one, no tape rewinds).
//! 2. `fstat` on the handle: it must be a regular file (directories, FIFOs,
//!    sockets and devices are refused, naming their kind), non-empty and at
//!    most `max_bytes`.
//! 3. The handle's real path, `readlink /proc/self/fd/<fd>` (every symlink
//!    already resolved by the kernel, for the object actually opened): it
//!    must not be under `/proc`, `/sys` or `/dev` (nor on a procfs or sysfs
//!    mount), and must lie inside the canonical session directory or the
//!    canonical temp directory.
//! 4. The bytes are read from a reopening of that same handle through
//!    `/proc/self/fd/<fd>` (`O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK`),
//!    which reaches the same inode whatever happened to the path meanwhile;
//!    device and inode numbers are compared to be sure. At most
//!    `max_bytes + 1` bytes are read and the length is checked again.
//! 5. The bytes must not contain the value of any of the session's secrets.
//!
//! So a symlink swapped between any two of these steps cannot make the
//! gateway send a file other than the one that was checked.
//!
//! A hard link is a name like any other: a hard link inside the session
//! directory to a file elsewhere counts as inside (the kernel's
//! `protected_hardlinks` keeps that to files the runner's user owns).

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{FileType, Mode, OFlags};
use rustix::io::Errno;

/// Largest file send_file accepts unless configured otherwise: 100 MiB.
pub const DEFAULT_MAX_BYTES: u64 = 100 * 1024 * 1024;

/// Directories whose files are never sent, wherever the session lives.
const SYSTEM_DIRS: [&str; 3] = ["/proc", "/sys", "/dev"];

/// `statfs.f_type` of sysfs (`linux/magic.h`); procfs's is rustix's.
const SYSFS_MAGIC: rustix::fs::FsWord = 0x6265_6572;

/// A file that passed every check, with its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileToSend {
    /// The last component of [`FileToSend::resolved`], e.g. `plot.png`.
    pub filename: String,
    /// Exactly the bytes read from the checked handle.
    pub bytes: Vec<u8>,
    /// The real path of the file that was opened (symlinks resolved).
    pub resolved: PathBuf,
}

/// Why a file was not sent. `Display` is one complete sentence naming the
/// path as it was given (never any secret content), for a model to act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FileRefusal {
    #[error(
        "No file was sent: the path is empty; give the file's path, absolute or relative to the session directory."
    )]
    EmptyPath,

    #[error("Cannot send {path:?}: a path cannot contain a NUL byte.")]
    InvalidPath { path: String },

    #[error(
        "Cannot send {path:?}: {} does not exist (a relative path is taken from the session directory).",
        looked_at.display()
    )]
    NotFound { path: String, looked_at: PathBuf },

    #[error("Cannot send {path:?}: permission denied opening {}.", looked_at.display())]
    PermissionDenied { path: String, looked_at: PathBuf },

    #[error("Cannot send {path:?}: opening {} failed: {reason}.", looked_at.display())]
    OpenFailed {
        path: String,
        looked_at: PathBuf,
        reason: String,
    },

    #[error("Cannot send {path:?}: it is a {kind}; only regular files can be sent.")]
    NotRegular { path: String, kind: &'static str },

    #[error(
        "Cannot send {path:?}: it resolves to {}, and files under /proc, /sys and /dev are never sent.",
        resolved.display()
    )]
    SystemPath { path: String, resolved: PathBuf },

    #[error(
        "Cannot send {path:?}: it resolves to {}, which is outside the session directory ({}) and the system temp directory ({}); only files inside one of those can be sent.",
        resolved.display(),
        session_dir.display(),
        temp_dir.display()
    )]
    Outside {
        path: String,
        resolved: PathBuf,
        session_dir: PathBuf,
        temp_dir: PathBuf,
    },

    #[error(
        "Cannot send {path:?}: it resolves to {}, inside {}, where the sessions' secrets are kept in clear; those files are never sent.",
        resolved.display(),
        folder.display()
    )]
    SecretsFolder {
        path: String,
        resolved: PathBuf,
        folder: PathBuf,
    },

    #[error("Cannot send {path:?}: the file is empty (0 bytes); only non-empty files can be sent.")]
    Empty { path: String },

    #[error("Cannot send {path:?}: it is {size} bytes; at most {max} ({}) can be sent.", human_size(*max))]
    TooLarge { path: String, size: u64, max: u64 },

    #[error(
        "Cannot send {path:?}: it grew past the limit of {max} bytes ({}) while it was being read.",
        human_size(*max)
    )]
    GrewWhileReading { path: String, max: u64 },

    #[error(
        "Cannot send {path:?}: the file was deleted or replaced while it was being opened; try again."
    )]
    Vanished { path: String },

    #[error(
        "Cannot send {path:?}: it contains the value of one of the session's secrets, and such files are never sent; remove the secret from the file first."
    )]
    ContainsSecret { path: String },

    #[error("Cannot send {path:?}: reading it failed: {reason}.")]
    ReadFailed { path: String, reason: String },
}

/// Resolves `path` (absolute, or relative to `session_dir`), checks it as
/// described in the module documentation, and returns its bytes.
///
/// `temp_dir` is the system temp directory (usually
/// [`std::env::temp_dir`]); `secret_dirs` are folders whose files are never
/// sent, wherever they are (the sessions' env files: every session's
/// secrets in clear); `secrets` are the session's secret values (empty
/// values are ignored). Blocking: call it from
/// `tokio::task::spawn_blocking` in async code.
pub fn open_for_upload(
    path: &str,
    session_dir: &Path,
    temp_dir: &Path,
    secret_dirs: &[PathBuf],
    max_bytes: u64,
    secrets: &[String],
) -> Result<FileToSend, FileRefusal> {
    let given = || path.to_owned();
    if path.is_empty() {
        return Err(FileRefusal::EmptyPath);
    }
    if path.contains('\0') {
        return Err(FileRefusal::InvalidPath { path: given() });
    }
    let looked_at = if Path::new(path).is_absolute() {
        PathBuf::from(path)
    } else {
        session_dir.join(path)
    };

    // 1. The one open of the path. Everything below is about this handle.
    let handle = rustix::fs::open(&looked_at, OFlags::PATH | OFlags::CLOEXEC, Mode::empty())
        .map_err(|errno| open_refusal(path, &looked_at, errno))?;

    // 2. Its kind and size.
    let stat = rustix::fs::fstat(&handle).map_err(|errno| FileRefusal::ReadFailed {
        path: given(),
        reason: format!("fstat: {errno}"),
    })?;
    let kind = FileType::from_raw_mode(stat.st_mode);
    if kind != FileType::RegularFile {
        return Err(FileRefusal::NotRegular {
            path: given(),
            kind: kind_name(kind),
        });
    }

    // 3. Where the opened object really is.
    let resolved = real_path(path, &handle, &stat)?;
    if is_system_path(&resolved) || on_system_filesystem(&handle) {
        return Err(FileRefusal::SystemPath {
            path: given(),
            resolved,
        });
    }
    if let Some(folder) = secret_dirs
        .iter()
        .filter_map(|dir| std::fs::canonicalize(dir).ok())
        .find(|dir| resolved.starts_with(dir))
    {
        return Err(FileRefusal::SecretsFolder {
            path: given(),
            resolved,
            folder,
        });
    }
    let session_root = std::fs::canonicalize(session_dir).ok();
    let temp_root = std::fs::canonicalize(temp_dir).ok();
    let inside = [&session_root, &temp_root]
        .into_iter()
        .flatten()
        .any(|root| resolved.starts_with(root) && resolved != *root);
    if !inside {
        return Err(FileRefusal::Outside {
            path: given(),
            resolved,
            session_dir: session_root.unwrap_or_else(|| session_dir.to_owned()),
            temp_dir: temp_root.unwrap_or_else(|| temp_dir.to_owned()),
        });
    }

    let size = u64::try_from(stat.st_size).unwrap_or(0);
    if size == 0 {
        return Err(FileRefusal::Empty { path: given() });
    }
    if size > max_bytes {
        return Err(FileRefusal::TooLarge {
            path: given(),
            size,
            max: max_bytes,
        });
    }

    // 4. Read the same inode, bounded.
    let bytes = read_handle(path, &handle, &stat, max_bytes)?;
    if bytes.is_empty() {
        return Err(FileRefusal::Empty { path: given() });
    }
    if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > max_bytes {
        return Err(FileRefusal::GrewWhileReading {
            path: given(),
            max: max_bytes,
        });
    }

    // 5. Secrets.
    if contains_secret(&bytes, secrets) {
        return Err(FileRefusal::ContainsSecret { path: given() });
    }

    let filename = resolved
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_else(|| "file".to_owned());
    Ok(FileToSend {
        filename,
        bytes,
        resolved,
    })
}

/// Whether `haystack` contains any of the non-empty `secrets`. Shared with
/// the other tools that refuse secret-bearing content (post_card).
pub fn contains_secret(haystack: &[u8], secrets: &[String]) -> bool {
    secrets
        .iter()
        .map(String::as_bytes)
        .filter(|needle| !needle.is_empty())
        .any(|needle| contains_subslice(haystack, needle))
}

fn contains_subslice(haystack: &[u8], needle: &[u8]) -> bool {
    let Some((&first, rest)) = needle.split_first() else {
        return true;
    };
    if haystack.len() < needle.len() {
        return false;
    }
    let last_start = haystack.len() - needle.len();
    let mut from = 0;
    while from <= last_start {
        match haystack[from..=last_start].iter().position(|&b| b == first) {
            None => return false,
            Some(offset) => {
                let at = from + offset;
                if &haystack[at + 1..at + needle.len()] == rest {
                    return true;
                }
                from = at + 1;
            }
        }
    }
    false
}

/// `104857600` -> `100 MiB`; sizes that are no whole number of KiB, MiB or
/// GiB as bytes.
fn human_size(bytes: u64) -> String {
    const KIB: u64 = 1024;
    for (unit, name) in [(KIB * KIB * KIB, "GiB"), (KIB * KIB, "MiB"), (KIB, "KiB")] {
        if bytes >= unit && bytes.is_multiple_of(unit) {
            return format!("{} {name}", bytes / unit);
        }
    }
    format!("{bytes} bytes")
}

fn open_refusal(path: &str, looked_at: &Path, errno: Errno) -> FileRefusal {
    let path = path.to_owned();
    let looked_at = looked_at.to_owned();
    match errno {
        Errno::NOENT => FileRefusal::NotFound { path, looked_at },
        Errno::ACCESS | Errno::PERM => FileRefusal::PermissionDenied { path, looked_at },
        Errno::NOTDIR => FileRefusal::OpenFailed {
            path,
            looked_at,
            reason: "a component of the path is not a directory".to_owned(),
        },
        Errno::LOOP => FileRefusal::OpenFailed {
            path,
            looked_at,
            reason: "too many levels of symbolic links".to_owned(),
        },
        Errno::NAMETOOLONG => FileRefusal::OpenFailed {
            path,
            looked_at,
            reason: "the path is too long".to_owned(),
        },
        other => FileRefusal::OpenFailed {
            path,
            looked_at,
            reason: other.to_string(),
        },
    }
}

fn kind_name(kind: FileType) -> &'static str {
    match kind {
        FileType::RegularFile => "regular file",
        FileType::Directory => "directory",
        FileType::Symlink => "symbolic link",
        FileType::Fifo => "FIFO (named pipe)",
        FileType::Socket => "socket",
        FileType::CharacterDevice => "character device",
        FileType::BlockDevice => "block device",
        _ => "special file",
    }
}

fn proc_fd_path(handle: &OwnedFd) -> String {
    format!("/proc/self/fd/{}", handle.as_raw_fd())
}

/// The path the kernel has for the opened object. For an unlinked file
/// Linux appends " (deleted)"; such a name is accepted only when it really
/// names the opened inode (a file may be called that).
fn real_path(
    path: &str,
    handle: &OwnedFd,
    stat: &rustix::fs::Stat,
) -> Result<PathBuf, FileRefusal> {
    let link = rustix::fs::readlink(proc_fd_path(handle), Vec::new()).map_err(|errno| {
        FileRefusal::ReadFailed {
            path: path.to_owned(),
            reason: format!("cannot read its real path from /proc/self/fd: {errno}"),
        }
    })?;
    let link = PathBuf::from(std::ffi::OsStr::from_bytes(link.as_bytes()));
    if !link.is_absolute() {
        // Not reachable from this mount namespace's root (e.g. a detached
        // mount): no path to check, so refuse.
        return Err(FileRefusal::Vanished {
            path: path.to_owned(),
        });
    }
    if link.as_os_str().as_bytes().ends_with(b" (deleted)") {
        let same = rustix::fs::lstat(&link)
            .is_ok_and(|now| now.st_dev == stat.st_dev && now.st_ino == stat.st_ino);
        if !same {
            return Err(FileRefusal::Vanished {
                path: path.to_owned(),
            });
        }
    }
    Ok(link)
}

fn is_system_path(resolved: &Path) -> bool {
    SYSTEM_DIRS
        .iter()
        .any(|dir| resolved.starts_with(Path::new(dir)))
}

fn on_system_filesystem(handle: &OwnedFd) -> bool {
    rustix::fs::fstatfs(handle)
        .is_ok_and(|fs| fs.f_type == rustix::fs::PROC_SUPER_MAGIC || fs.f_type == SYSFS_MAGIC)
}

/// Reads at most `max_bytes + 1` bytes from a reopening of `handle` (which
/// is an `O_PATH` handle) that is checked to be the same inode.
fn read_handle(
    path: &str,
    handle: &OwnedFd,
    stat: &rustix::fs::Stat,
    max_bytes: u64,
) -> Result<Vec<u8>, FileRefusal> {
    let failed = |reason: String| FileRefusal::ReadFailed {
        path: path.to_owned(),
        reason,
    };
    let readable = rustix::fs::open(
        proc_fd_path(handle),
        OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK,
        Mode::empty(),
    )
    .map_err(|errno| match errno {
        Errno::ACCESS | Errno::PERM => failed("permission denied".to_owned()),
        other => failed(other.to_string()),
    })?;
    let now = rustix::fs::fstat(&readable).map_err(|errno| failed(format!("fstat: {errno}")))?;
    if now.st_dev != stat.st_dev
        || now.st_ino != stat.st_ino
        || FileType::from_raw_mode(now.st_mode) != FileType::RegularFile
    {
        return Err(FileRefusal::Vanished {
            path: path.to_owned(),
        });
    }
    let size_hint = usize::try_from(stat.st_size.max(0)).unwrap_or(0);
    let mut bytes = Vec::with_capacity(size_hint.saturating_add(1));
    File::from(readable)
        .take(max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|error| failed(error.to_string()))?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    const MAX: u64 = DEFAULT_MAX_BYTES;

    struct Dirs {
        session: tempfile::TempDir,
        temp: tempfile::TempDir,
        outside: tempfile::TempDir,
    }

    fn dirs() -> Dirs {
        Dirs {
            session: tempfile::tempdir().expect("session dir"),
            temp: tempfile::tempdir().expect("temp dir"),
            outside: tempfile::tempdir().expect("outside dir"),
        }
    }

    #[test]
    fn env_files_are_never_sent_even_from_the_temp_directory() {
        let d = dirs();
        let run = d.temp.path().join("calvin/sessions");
        std::fs::create_dir_all(run.join("C1-1.2")).expect("dir");
        std::fs::write(run.join("C1-1.2/env.sh"), "export K='v'\n").expect("env");
        std::fs::write(d.temp.path().join("fine.txt"), "fine").expect("file");
        let open = |path: &Path| {
            open_for_upload(
                path.to_str().expect("utf-8"),
                d.session.path(),
                d.temp.path(),
                std::slice::from_ref(&run),
                MAX,
                &[],
            )
        };
        let err = open(&run.join("C1-1.2/env.sh")).expect_err("refused");
        assert!(matches!(err, FileRefusal::SecretsFolder { .. }), "{err:?}");
        assert!(
            err.to_string()
                .contains("where the sessions' secrets are kept in clear")
        );
        // A symlink in the session directory to it is refused the same.
        std::os::unix::fs::symlink(run.join("C1-1.2/env.sh"), d.session.path().join("e"))
            .expect("symlink");
        let err = open(&d.session.path().join("e")).expect_err("refused");
        assert!(matches!(err, FileRefusal::SecretsFolder { .. }), "{err:?}");
        assert!(open(&d.temp.path().join("fine.txt")).is_ok());
    }

    impl Dirs {
        fn open(&self, path: &str) -> Result<FileToSend, FileRefusal> {
            self.open_with(path, MAX, &[])
        }

        fn open_with(
            &self,
            path: &str,
            max: u64,
            secrets: &[String],
        ) -> Result<FileToSend, FileRefusal> {
            open_for_upload(
                path,
                self.session.path(),
                self.temp.path(),
                &[],
                max,
                secrets,
            )
        }
    }

    fn write(path: &Path, bytes: &[u8]) {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(path, bytes).expect("write");
    }

    #[test]
    fn relative_and_absolute_paths_inside_the_session_dir() {
        let d = dirs();
        write(&d.session.path().join("out/plot.png"), b"PNG bytes");
        let rel = d.open("out/plot.png").expect("relative");
        assert_eq!(rel.bytes, b"PNG bytes");
        assert_eq!(rel.filename, "plot.png");
        let canon = std::fs::canonicalize(d.session.path().join("out/plot.png")).expect("canon");
        assert_eq!(rel.resolved, canon);

        let abs_path = d.session.path().join("out/plot.png");
        let abs = d.open(abs_path.to_str().expect("utf-8")).expect("absolute");
        assert_eq!(abs, rel);

        let dotted = d.open("./out/../out/plot.png").expect("dots inside");
        assert_eq!(dotted.bytes, b"PNG bytes");
    }

    #[test]
    fn dot_dot_escape_is_refused() {
        let d = dirs();
        write(&d.outside.path().join("secret.txt"), b"outside");
        let escape = format!(
            "../{}/secret.txt",
            d.outside
                .path()
                .file_name()
                .expect("name")
                .to_str()
                .expect("utf-8")
        );
        // The session and outside dirs are siblings under the temp root.
        let err = d.open(&escape).expect_err("escape");
        assert!(matches!(err, FileRefusal::Outside { .. }), "{err:?}");
        let msg = err.to_string();
        assert!(msg.contains(&escape), "{msg}");
        assert!(msg.contains("outside the session directory"), "{msg}");
    }

    #[test]
    fn absolute_path_outside_is_refused() {
        let d = dirs();
        for path in ["/etc/hostname", "/etc/passwd"] {
            if !Path::new(path).exists() {
                continue;
            }
            let err = d.open(path).expect_err(path);
            assert!(matches!(err, FileRefusal::Outside { .. }), "{err:?}");
            assert!(err.to_string().contains(path));
        }
        let outside = d.outside.path().join("x.txt");
        write(&outside, b"x");
        let err = d
            .open(outside.to_str().expect("utf-8"))
            .expect_err("outside");
        assert!(matches!(err, FileRefusal::Outside { .. }), "{err:?}");
    }

    #[test]
    fn symlinks_are_judged_by_their_target() {
        let d = dirs();
        let outside = d.outside.path().join("private.txt");
        write(&outside, b"private");
        std::os::unix::fs::symlink(&outside, d.session.path().join("leak")).expect("symlink");
        let err = d.open("leak").expect_err("symlink out");
        assert!(matches!(err, FileRefusal::Outside { .. }), "{err:?}");
        assert!(
            err.to_string().contains(
                &*std::fs::canonicalize(&outside)
                    .expect("c")
                    .to_string_lossy()
            )
        );

        std::os::unix::fs::symlink("/etc/passwd", d.session.path().join("passwd"))
            .expect("symlink");
        assert!(matches!(d.open("passwd"), Err(FileRefusal::Outside { .. })));

        write(&d.session.path().join("real/data.csv"), b"a,b\n1,2\n");
        std::os::unix::fs::symlink("real/data.csv", d.session.path().join("alias.csv"))
            .expect("symlink");
        let ok = d.open("alias.csv").expect("symlink inside");
        assert_eq!(ok.bytes, b"a,b\n1,2\n");
        assert_eq!(ok.filename, "data.csv");

        // A directory symlink inside pointing outside does not help either.
        std::os::unix::fs::symlink(d.outside.path(), d.session.path().join("outdir"))
            .expect("symlink");
        assert!(matches!(
            d.open("outdir/private.txt"),
            Err(FileRefusal::Outside { .. })
        ));
    }

    #[test]
    fn temp_dir_files_are_allowed() {
        let d = dirs();
        let file = d.temp.path().join("report.txt");
        write(&file, b"report");
        let ok = d.open(file.to_str().expect("utf-8")).expect("temp dir");
        assert_eq!(ok.bytes, b"report");
        assert_eq!(ok.filename, "report.txt");
        // A relative path is still taken from the session directory.
        assert!(matches!(
            d.open("report.txt"),
            Err(FileRefusal::NotFound { .. })
        ));
    }

    #[test]
    fn non_regular_files_are_refused_by_kind() {
        let d = dirs();
        std::fs::create_dir(d.session.path().join("sub")).expect("mkdir");
        let err = d.open("sub").expect_err("dir");
        assert_eq!(
            err,
            FileRefusal::NotRegular {
                path: "sub".into(),
                kind: "directory"
            }
        );
        assert!(err.to_string().contains("it is a directory"));

        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            d.session.path().join("pipe"),
            Mode::from_raw_mode(0o600),
        )
        .expect("mkfifo");
        // Must not block (nobody writes to the FIFO).
        let err = d.open("pipe").expect_err("fifo");
        assert!(err.to_string().contains("FIFO"), "{err}");

        let _listener =
            std::os::unix::net::UnixListener::bind(d.session.path().join("sock")).expect("bind");
        let err = d.open("sock").expect_err("socket");
        assert!(err.to_string().contains("it is a socket"), "{err}");

        let err = d.open("/dev/null").expect_err("/dev/null");
        assert!(err.to_string().contains("character device"), "{err}");

        let err = d.open("/proc/self/status").expect_err("/proc");
        assert!(matches!(err, FileRefusal::SystemPath { .. }), "{err:?}");
        assert!(err.to_string().contains("/proc"), "{err}");

        // Through a symlink inside the session directory, too.
        std::os::unix::fs::symlink("/proc/self/status", d.session.path().join("status"))
            .expect("symlink");
        assert!(matches!(
            d.open("status"),
            Err(FileRefusal::SystemPath { .. })
        ));
        std::os::unix::fs::symlink("/dev/zero", d.session.path().join("zero")).expect("symlink");
        assert!(matches!(
            d.open("zero"),
            Err(FileRefusal::NotRegular { .. })
        ));
    }

    #[test]
    fn empty_missing_and_empty_path() {
        let d = dirs();
        write(&d.session.path().join("empty"), b"");
        let err = d.open("empty").expect_err("empty file");
        assert_eq!(
            err,
            FileRefusal::Empty {
                path: "empty".into()
            }
        );
        assert!(err.to_string().contains("empty"));

        assert_eq!(d.open("").expect_err("empty path"), FileRefusal::EmptyPath);
        let err = d.open("nope.txt").expect_err("missing");
        assert!(matches!(err, FileRefusal::NotFound { .. }), "{err:?}");
        assert!(err.to_string().contains("\"nope.txt\""), "{err}");
        assert!(matches!(
            d.open("a\0b"),
            Err(FileRefusal::InvalidPath { .. })
        ));
    }

    #[test]
    fn size_limit_is_inclusive() {
        let d = dirs();
        write(&d.session.path().join("at"), &[7u8; 100]);
        write(&d.session.path().join("over"), &[7u8; 101]);
        assert_eq!(
            d.open_with("at", 100, &[]).expect("at limit").bytes.len(),
            100
        );
        let err = d.open_with("over", 100, &[]).expect_err("over limit");
        assert_eq!(
            err,
            FileRefusal::TooLarge {
                path: "over".into(),
                size: 101,
                max: 100
            }
        );
        assert!(
            err.to_string().contains("is 101 bytes; at most 100"),
            "{err}"
        );

        let message = FileRefusal::TooLarge {
            path: "big.bin".into(),
            size: MAX + 1,
            max: MAX,
        }
        .to_string();
        assert!(
            message.contains("is 104857601 bytes; at most 104857600 (100 MiB)"),
            "{message}"
        );
    }

    #[test]
    fn secret_bearing_files_are_refused_without_echoing_the_secret() {
        let d = dirs();
        let secret = "sk_live_abcdef123456".to_owned();
        write(
            &d.session.path().join("config.env"),
            format!("KEY={secret}\n").as_bytes(),
        );
        write(&d.session.path().join("clean.txt"), b"nothing here");
        let secrets = vec![String::new(), "other-value".to_owned(), secret.clone()];

        let err = d
            .open_with("config.env", MAX, &secrets)
            .expect_err("secret");
        assert_eq!(
            err,
            FileRefusal::ContainsSecret {
                path: "config.env".into()
            }
        );
        let msg = err.to_string();
        assert!(msg.contains("contains the value of one of the session's secrets"));
        assert!(!msg.contains(&secret), "{msg}");
        assert!(!format!("{err:?}").contains(&secret));

        // An empty secret value matches nothing.
        assert!(d.open_with("clean.txt", MAX, &secrets).is_ok());
    }

    #[test]
    fn substring_search() {
        assert!(contains_subslice(b"abcabd", b"abd"));
        assert!(contains_subslice(b"abd", b"abd"));
        assert!(!contains_subslice(b"ab", b"abd"));
        assert!(!contains_subslice(b"abcab", b"abd"));
        assert!(contains_subslice(b"aaab", b"aab"));
        assert!(!contains_secret(b"anything", &[String::new()]));
        assert_eq!(human_size(1536), "1536 bytes");
        assert_eq!(human_size(2048), "2 KiB");
        assert_eq!(human_size(1 << 30), "1 GiB");
    }

    /// One thread keeps swapping a symlink inside the session directory
    /// between a file inside and /etc/passwd; every successful call must
    /// return the inside file's bytes.
    #[test]
    fn swapped_symlink_never_leaks() {
        let d = dirs();
        let session = d.session.path().to_owned();
        let inside_bytes = b"inside file, safe to send\n".to_vec();
        write(&session.join("inside.txt"), &inside_bytes);
        let outside = if Path::new("/etc/passwd").exists() {
            PathBuf::from("/etc/passwd")
        } else {
            let p = d.outside.path().join("passwd");
            write(&p, b"root:x:0:0::/root:/bin/sh\n");
            p
        };
        let outside_bytes = std::fs::read(&outside).expect("read outside");
        assert_ne!(outside_bytes, inside_bytes);
        std::os::unix::fs::symlink("inside.txt", session.join("link")).expect("symlink");

        let stop = Arc::new(AtomicBool::new(false));
        let swaps = Arc::new(AtomicUsize::new(0));
        let swapper = {
            let (stop, swaps, session, outside) = (
                stop.clone(),
                swaps.clone(),
                session.clone(),
                outside.clone(),
            );
            std::thread::spawn(move || {
                let mut to_outside = true;
                while !stop.load(Ordering::Relaxed) {
                    let tmp = session.join("link.tmp");
                    let _ = std::fs::remove_file(&tmp);
                    let target = if to_outside {
                        outside.clone()
                    } else {
                        PathBuf::from("inside.txt")
                    };
                    std::os::unix::fs::symlink(&target, &tmp).expect("symlink tmp");
                    std::fs::rename(&tmp, session.join("link")).expect("rename over");
                    to_outside = !to_outside;
                    swaps.fetch_add(1, Ordering::Relaxed);
                }
            })
        };
        while swaps.load(Ordering::Relaxed) < 10 {
            std::thread::yield_now();
        }

        let (mut sent, mut refused) = (0, 0);
        for _ in 0..2000 {
            match d.open("link") {
                Ok(file) => {
                    assert_eq!(file.bytes, inside_bytes, "leaked another file");
                    assert_eq!(file.filename, "inside.txt");
                    sent += 1;
                }
                Err(FileRefusal::Outside { .. }) => refused += 1,
                Err(other) => panic!("unexpected refusal: {other:?}"),
            }
        }
        stop.store(true, Ordering::Relaxed);
        swapper.join().expect("swapper");
        assert_eq!(sent + refused, 2000);
        assert!(swaps.load(Ordering::Relaxed) > 10);
    }
}
