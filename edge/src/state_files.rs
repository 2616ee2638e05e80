//! Files in a state folder: secrets kept 0600, written atomically.

use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use rand::RngExt;

#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{path} is not what this version of calvin wrote ({why}); move it away to start afresh"
    )]
    Corrupt { path: PathBuf, why: String },
}

/// The secret in `path`, or a new random one (256 bits as 64 hex digits)
/// written there 0600.
pub fn load_or_make_secret(path: &Path) -> Result<String, FileError> {
    if let Some(text) = read_optional(path)? {
        let secret = text.trim().to_owned();
        if secret.len() >= crate::accounts::MIN_TOKEN_LEN {
            return Ok(secret);
        }
        return Err(FileError::Corrupt {
            path: path.to_owned(),
            why: "too short".into(),
        });
    }
    let bytes: [u8; 32] = rand::rng().random();
    let secret: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    write_private(path, &format!("{secret}\n"))?;
    Ok(secret)
}

/// The 32-byte key in `path` (64 hex digits), or a new random one
/// written there 0600.
pub fn load_or_make_key(path: &Path) -> Result<[u8; 32], FileError> {
    let hex = load_or_make_secret(path)?;
    decode_hex32(path, &hex)
}

/// 64 hex digits read from `path` as 32 bytes.
pub fn decode_hex32(path: &Path, hex: &str) -> Result<[u8; 32], FileError> {
    let corrupt = || FileError::Corrupt {
        path: path.to_owned(),
        why: "expected 64 hex digits".into(),
    };
    let mut out = [0u8; 32];
    if hex.len() != 64 {
        return Err(corrupt());
    }
    for (i, byte) in out.iter_mut().enumerate() {
        let pair = hex.get(2 * i..2 * i + 2).ok_or_else(corrupt)?;
        *byte = u8::from_str_radix(pair, 16).map_err(|_| corrupt())?;
    }
    Ok(out)
}

pub fn read_optional(path: &Path) -> Result<Option<String>, FileError> {
    match fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(FileError::Io {
            path: path.to_owned(),
            source,
        }),
    }
}

pub fn write_private(path: &Path, text: &str) -> Result<(), FileError> {
    write_file(path, text, 0o600)
}

pub fn write_public(path: &Path, text: &str) -> Result<(), FileError> {
    write_file(path, text, 0o644)
}

/// Writes through a temporary file and a rename, so a crash never leaves a
/// half-written key behind.
fn write_file(path: &Path, text: &str, mode: u32) -> Result<(), FileError> {
    let io = |source| FileError::Io {
        path: path.to_owned(),
        source,
    };
    let tmp = path.with_extension("tmp");
    let _ = fs::remove_file(&tmp);
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)
        .map_err(io)?;
    file.write_all(text.as_bytes()).map_err(io)?;
    file.sync_all().map_err(io)?;
    fs::rename(&tmp, path).map_err(io)
}

/// Makes `dir` (and its parents) if missing, and keeps it 0700.
pub fn create_private_dir(dir: &Path) -> Result<(), FileError> {
    use std::os::unix::fs::PermissionsExt;
    let io = |source| FileError::Io {
        path: dir.to_owned(),
        source,
    };
    fs::create_dir_all(dir).map_err(io)?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(io)
}

pub fn rename(from: &Path, to: &Path) -> Result<(), FileError> {
    fs::rename(from, to).map_err(|source| FileError::Io {
        path: to.to_owned(),
        source,
    })
}
