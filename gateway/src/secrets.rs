//! The secret store: each session's secrets, encrypted at rest.
//!
//! # Key
//!
//! `SP_STORE_KEY` holds a 256-bit key, written either as 64 hexadecimal
//! digits (upper or lower case; `openssl rand -hex 32`) or as the base64 of
//! 32 bytes (standard or URL-safe alphabet, padding optional;
//! `openssl rand -base64 32`). Surrounding whitespace is ignored. Anything
//! else is refused with [`SecretError::BadKey`], whose message never
//! repeats the key. Without `SP_STORE_KEY` there is no store
//! ([`SecretStore::from_env`] says [`NoStore::NoKey`]) and request_secret
//! refuses, naming what is missing.
//!
//! # Folder
//!
//! `[secrets] store_dir`, else the default like every other piece of
//! state: `$XDG_STATE_HOME/calvin/secrets`, else
//! `~/.local/state/calvin/secrets` ([`StoreDir`]). The key alone is enough.
//! A configured folder that cannot be used stops the gateway; the default
//! one only makes request_secret refuse, naming the folder
//! ([`NoStore::Folder`]).
//!
//! # Layout
//!
//! A store is a directory (mode 0700, created if missing, tightened to 0700
//! if it exists) holding one JSON file per session (mode 0600):
//! `session-<base64url of the session id>.json`, plus a `.lock` file that
//! serialises writers across threads and processes (`flock`). A file is
//! replaced atomically (write a temporary file, fsync, rename), so readers
//! never see half of one. The file:
//!
//! ```json
//! {
//!   "version": 1,
//!   "session": "<session id>",
//!   "key_check": {"nonce": "<base64>", "ciphertext": "<base64>"},
//!   "secrets": [{"name": "STRIPE_API_KEY", "nonce": "<base64>", "ciphertext": "<base64>"}]
//! }
//! ```
//!
//! Names are stored in the clear (they are not secret; request_secret shows
//! them in Slack). Each value is sealed with XChaCha20-Poly1305 under a
//! fresh random 192-bit nonce, with the session id and the name as
//! associated data, so a ciphertext moved to another entry or another
//! session's file fails to open. `key_check` seals the empty string (bound
//! to the session id) so that a wrong key is told apart from a damaged
//! file.
//!
//! All methods block on file I/O; call them from
//! `tokio::task::spawn_blocking` in async code.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use base64::Engine;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD};
use base64::engine::{DecodePaddingMode, general_purpose};
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{Key, XChaCha20Poly1305, XNonce};
use serde::{Deserialize, Serialize};

/// The environment variable holding the store key.
pub const KEY_ENV: &str = "SP_STORE_KEY";

const FORMAT_VERSION: u32 = 1;
const NONCE_LEN: usize = 24;
const TAG_LEN: usize = 16;
/// Longest session id, in bytes, so the file name stays under 255 bytes.
const MAX_SESSION_LEN: usize = 180;
const VALUE_DOMAIN: &[u8] = b"calvin secret value v1\0";
const CHECK_DOMAIN: &[u8] = b"calvin secret store key check v1\0";

/// Why the store could not do something. Messages never contain a key or a
/// secret value.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error(
        "{KEY_ENV} is not a valid key: {reason}; it must be 64 hex digits or the base64 of 32 bytes (for example the output of `openssl rand -hex 32`)"
    )]
    BadKey { reason: String },

    #[error(
        "{name:?} is not an environment variable name: use letters, digits and underscores, not starting with a digit"
    )]
    InvalidName { name: String },

    #[error("a secret named {name} is already set")]
    Duplicate { name: String },

    #[error("invalid session id for the secret store: {reason}")]
    InvalidSession { reason: String },

    #[error("secret store: cannot {action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("secret store file {} is not valid: {reason}", path.display())]
    Corrupt { path: PathBuf, reason: String },

    #[error(
        "cannot decrypt the secret store file {}: {KEY_ENV} is not the key it was written with",
        path.display()
    )]
    WrongKey { path: PathBuf },

    #[error("cannot encrypt the secret {name}: the value is too long")]
    Encrypt { name: String },

    #[error(
        "the secret {name} in {} failed authentication: the file was modified or damaged",
        path.display()
    )]
    Tampered { path: PathBuf, name: String },
}

/// Why a gateway has no secret store: request_secret's refusal says it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoStore {
    #[error(
        "{KEY_ENV} is not set in the gateway's environment, so a secret could not be stored \
         encrypted; set {KEY_ENV} (64 hex digits, `openssl rand -hex 32`) where calvin-gateway \
         starts"
    )]
    NoKey,

    #[error(
        "the secret store's folder {} cannot be used ({reason}); make it usable, or set [secrets] \
         store_dir to a folder that is",
        path.display()
    )]
    Folder { path: PathBuf, reason: String },

    #[error(
        "the secret store has no folder: [secrets] store_dir is not set, and neither \
         XDG_STATE_HOME nor HOME names a state folder; set [secrets] store_dir"
    )]
    NoFolder,
}

/// Where the store lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreDir {
    /// `[secrets] store_dir`: a folder that cannot be used is an error.
    Configured(PathBuf),
    /// The default, `<state folder>/calvin/secrets` (`None`: no state
    /// folder is known): a folder that cannot be used is [`NoStore`].
    Default(Option<PathBuf>),
}

/// A directory of per-session encrypted secrets. Cheap to clone; `Send` and
/// `Sync`.
#[derive(Clone)]
pub struct SecretStore {
    dir: PathBuf,
    cipher: XChaCha20Poly1305,
}

impl std::fmt::Debug for SecretStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretStore")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

#[derive(Serialize, Deserialize)]
struct StoreFile {
    version: u32,
    session: String,
    key_check: Sealed,
    #[serde(default)]
    secrets: Vec<Entry>,
}

#[derive(Serialize, Deserialize)]
struct Sealed {
    nonce: String,
    ciphertext: String,
}

#[derive(Serialize, Deserialize)]
struct Entry {
    name: String,
    /// The session sees the value as a file whose path the variable holds
    /// (request_secret's `file: true`). Bound to the ciphertext.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    file: bool,
    #[serde(flatten)]
    sealed: Sealed,
}

/// One secret, decrypted.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret {
    pub name: String,
    pub value: String,
    /// Given to the session as a file (the variable holds its path).
    pub file: bool,
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secret")
            .field("name", &self.name)
            .field("file", &self.file)
            .finish_non_exhaustive()
    }
}

impl SecretStore {
    /// Opens (creating it if needed) the store in `dir`, with `key` as
    /// described in the module documentation.
    pub fn open(dir: &Path, key: &str) -> Result<SecretStore, SecretError> {
        let key = parse_key(key)?;
        std::fs::create_dir_all(dir).map_err(|source| SecretError::Io {
            action: "create the directory",
            path: dir.to_owned(),
            source,
        })?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(
            |source| SecretError::Io {
                action: "set mode 0700 on",
                path: dir.to_owned(),
                source,
            },
        )?;
        Ok(SecretStore {
            dir: dir.to_owned(),
            cipher: XChaCha20Poly1305::new(Key::from_slice(&key)),
        })
    }

    /// The store in `dir` with the key from `SP_STORE_KEY`, or why there
    /// is none ([`NoStore`]: no key; the default folder unusable or
    /// unknown). A key set but empty or malformed, or a configured folder
    /// that cannot be used, is an error.
    pub fn from_env(dir: &StoreDir) -> Result<Result<SecretStore, NoStore>, SecretError> {
        Self::from_key_var(dir, std::env::var_os(KEY_ENV))
    }

    fn from_key_var(
        dir: &StoreDir,
        var: Option<std::ffi::OsString>,
    ) -> Result<Result<SecretStore, NoStore>, SecretError> {
        let Some(var) = var else {
            return Ok(Err(NoStore::NoKey));
        };
        let key = var.into_string().map_err(|_| SecretError::BadKey {
            reason: "it is not valid UTF-8".to_owned(),
        })?;
        match dir {
            StoreDir::Configured(dir) => Self::open(dir, &key).map(Ok),
            StoreDir::Default(None) => {
                parse_key(&key)?;
                Ok(Err(NoStore::NoFolder))
            }
            StoreDir::Default(Some(dir)) => match Self::open(dir, &key) {
                Ok(store) => Ok(Ok(store)),
                Err(SecretError::Io { path, source, .. }) => Ok(Err(NoStore::Folder {
                    path,
                    reason: source.to_string(),
                })),
                Err(other) => Err(other),
            },
        }
    }

    /// A new random key, as 64 hex digits, suitable for `SP_STORE_KEY`.
    pub fn generate_key() -> String {
        crate::random_id::random_hex::<32>()
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Stores `value` as the session's secret `name`. A name can be set once
    /// per session; setting it again is [`SecretError::Duplicate`].
    pub fn set(&self, session: &str, name: &str, value: &str) -> Result<(), SecretError> {
        self.set_secret(session, name, value, false)
    }

    /// As [`SecretStore::set`], recording whether the session gets the
    /// value as a file.
    pub fn set_secret(
        &self,
        session: &str,
        name: &str,
        value: &str,
        as_file: bool,
    ) -> Result<(), SecretError> {
        validate_name(name)?;
        let path = self.session_path(session)?;
        let _lock = self.lock()?;
        let encrypt_failed = |_| SecretError::Encrypt {
            name: name.to_owned(),
        };
        let mut file = match self.load(session, &path)? {
            Some(file) => {
                // Opening every value also proves the file is intact and the
                // key right before it is rewritten.
                self.open_entries(session, &path, &file)?;
                file
            }
            None => StoreFile {
                version: FORMAT_VERSION,
                session: session.to_owned(),
                key_check: self
                    .seal(&check_aad(session), b"")
                    .map_err(encrypt_failed)?,
                secrets: Vec::new(),
            },
        };
        if file.secrets.iter().any(|entry| entry.name == name) {
            return Err(SecretError::Duplicate {
                name: name.to_owned(),
            });
        }
        file.secrets.push(Entry {
            name: name.to_owned(),
            file: as_file,
            sealed: self
                .seal(&value_aad(session, name, as_file), value.as_bytes())
                .map_err(encrypt_failed)?,
        });
        self.write(&path, &file)
    }

    /// The session's secret values, decrypted, in the order they were set
    /// (for scanning outgoing files and cards). No secrets: empty.
    pub fn values(&self, session: &str) -> Result<Vec<String>, SecretError> {
        Ok(self
            .secrets(session)?
            .into_iter()
            .map(|s| s.value)
            .collect())
    }

    /// The session's secrets as `(name, value)` pairs, in the order they
    /// were set.
    pub fn entries(&self, session: &str) -> Result<Vec<(String, String)>, SecretError> {
        Ok(self
            .secrets(session)?
            .into_iter()
            .map(|s| (s.name, s.value))
            .collect())
    }

    /// The session's secrets, in the order they were set.
    pub fn secrets(&self, session: &str) -> Result<Vec<Secret>, SecretError> {
        let path = self.session_path(session)?;
        match self.load(session, &path)? {
            Some(file) => self.open_entries(session, &path, &file),
            None => Ok(Vec::new()),
        }
    }

    /// The names of the session's secrets, in the order they were set, as
    /// recorded in its file (names are stored in the clear, so this needs
    /// no decryption). A file that cannot be read counts as no secrets and
    /// is logged; use [`SecretStore::entries`] to see the error.
    pub fn names(&self, session: &str) -> Vec<String> {
        let loaded = self
            .session_path(session)
            .and_then(|path| self.load(session, &path));
        match loaded {
            Ok(Some(file)) => file.secrets.into_iter().map(|entry| entry.name).collect(),
            Ok(None) => Vec::new(),
            Err(error) => {
                tracing::warn!(%error, "listing secret names");
                Vec::new()
            }
        }
    }

    fn session_path(&self, session: &str) -> Result<PathBuf, SecretError> {
        if session.is_empty() {
            return Err(SecretError::InvalidSession {
                reason: "it is empty".to_owned(),
            });
        }
        if session.len() > MAX_SESSION_LEN {
            return Err(SecretError::InvalidSession {
                reason: format!(
                    "it is {} bytes long; at most {MAX_SESSION_LEN}",
                    session.len()
                ),
            });
        }
        let encoded = general_purpose::URL_SAFE_NO_PAD.encode(session.as_bytes());
        Ok(self.dir.join(format!("session-{encoded}.json")))
    }

    fn lock(&self) -> Result<File, SecretError> {
        let path = self.dir.join(".lock");
        let io = |action| {
            let path = path.clone();
            move |source| SecretError::Io {
                action,
                path,
                source,
            }
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(io("open"))?;
        file.lock().map_err(io("lock"))?;
        Ok(file)
    }

    fn load(&self, session: &str, path: &Path) -> Result<Option<StoreFile>, SecretError> {
        let text = match std::fs::read(path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(SecretError::Io {
                    action: "read",
                    path: path.to_owned(),
                    source,
                });
            }
        };
        let corrupt = |reason: String| SecretError::Corrupt {
            path: path.to_owned(),
            reason,
        };
        let file: StoreFile =
            serde_json::from_slice(&text).map_err(|error| corrupt(error.to_string()))?;
        if file.version != FORMAT_VERSION {
            return Err(corrupt(format!(
                "format version {} (this gateway reads version {FORMAT_VERSION})",
                file.version
            )));
        }
        if file.session != session {
            return Err(corrupt("it belongs to another session".to_owned()));
        }
        Ok(Some(file))
    }

    fn open_entries(
        &self,
        session: &str,
        path: &Path,
        file: &StoreFile,
    ) -> Result<Vec<Secret>, SecretError> {
        self.unseal(&check_aad(session), &file.key_check)
            .map_err(|_| SecretError::WrongKey {
                path: path.to_owned(),
            })?;
        file.secrets
            .iter()
            .map(|entry| {
                let tampered = || SecretError::Tampered {
                    path: path.to_owned(),
                    name: entry.name.clone(),
                };
                let plain = self
                    .unseal(&value_aad(session, &entry.name, entry.file), &entry.sealed)
                    .map_err(|()| tampered())?;
                let value = String::from_utf8(plain).map_err(|_| tampered())?;
                Ok(Secret {
                    name: entry.name.clone(),
                    value,
                    file: entry.file,
                })
            })
            .collect()
    }

    /// Seals `plaintext` under a fresh random nonce. Fails only for
    /// messages beyond 256 GiB.
    fn seal(&self, aad: &[u8], plaintext: &[u8]) -> Result<Sealed, ()> {
        let nonce: [u8; NONCE_LEN] = rand::random();
        let ciphertext = self
            .cipher
            .encrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: plaintext,
                    aad,
                },
            )
            .map_err(|_| ())?;
        Ok(Sealed {
            nonce: STANDARD.encode(nonce),
            ciphertext: STANDARD.encode(ciphertext),
        })
    }

    fn unseal(&self, aad: &[u8], sealed: &Sealed) -> Result<Vec<u8>, ()> {
        let nonce = STANDARD.decode(&sealed.nonce).map_err(|_| ())?;
        let ciphertext = STANDARD.decode(&sealed.ciphertext).map_err(|_| ())?;
        if nonce.len() != NONCE_LEN || ciphertext.len() < TAG_LEN {
            return Err(());
        }
        self.cipher
            .decrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: &ciphertext,
                    aad,
                },
            )
            .map_err(|_| ())
    }

    /// Replaces `path` with `file` atomically; the new file is 0600.
    fn write(&self, path: &Path, file: &StoreFile) -> Result<(), SecretError> {
        let io = |action, at: &Path| {
            let at = at.to_owned();
            move |source| SecretError::Io {
                action,
                path: at,
                source,
            }
        };
        let text = serde_json::to_vec_pretty(file).map_err(|error| SecretError::Corrupt {
            path: path.to_owned(),
            reason: error.to_string(),
        })?;
        let suffix: u64 = rand::random();
        let name = path
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = self.dir.join(format!(".{name}.{suffix:016x}.tmp"));
        let result = (|| {
            let mut out = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)
                .map_err(io("create", &tmp))?;
            out.set_permissions(std::fs::Permissions::from_mode(0o600))
                .map_err(io("set mode 0600 on", &tmp))?;
            out.write_all(&text).map_err(io("write", &tmp))?;
            out.sync_all().map_err(io("sync", &tmp))?;
            std::fs::rename(&tmp, path).map_err(io("replace", path))
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result?;
        // Make the rename durable; a failure here loses nothing already
        // visible, so it is not an error.
        if let Ok(dir) = File::open(&self.dir) {
            let _ = dir.sync_all();
        }
        Ok(())
    }
}

/// Whether `name` is an environment variable name, `[A-Za-z_][A-Za-z0-9_]*`.
pub fn is_env_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

fn validate_name(name: &str) -> Result<(), SecretError> {
    if is_env_name(name) {
        Ok(())
    } else {
        Err(SecretError::InvalidName {
            name: name.to_owned(),
        })
    }
}

fn parse_key(key: &str) -> Result<[u8; 32], SecretError> {
    let bad = |reason: String| SecretError::BadKey { reason };
    let key = key.trim();
    if key.is_empty() {
        return Err(bad("it is empty".to_owned()));
    }
    if key.len() == 64 && key.bytes().all(|b| b.is_ascii_hexdigit()) {
        let mut out = [0u8; 32];
        for (byte, pair) in out.iter_mut().zip(key.as_bytes().chunks_exact(2)) {
            let text = std::str::from_utf8(pair).map_err(|_| bad("not hex".to_owned()))?;
            *byte = u8::from_str_radix(text, 16).map_err(|_| bad("not hex".to_owned()))?;
        }
        return Ok(out);
    }
    let indifferent =
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent);
    let engines = [
        GeneralPurpose::new(&base64::alphabet::STANDARD, indifferent),
        GeneralPurpose::new(&base64::alphabet::URL_SAFE, indifferent),
    ];
    for engine in &engines {
        if let Ok(bytes) = engine.decode(key) {
            return <[u8; 32]>::try_from(bytes.as_slice())
                .map_err(|_| bad(format!("it is base64 of {} bytes, not 32", bytes.len())));
        }
    }
    Err(bad(format!(
        "it is {} characters that are neither 64 hex digits nor base64",
        key.chars().count()
    )))
}

/// Associated data for a value: domain, then the session id and the name,
/// each length-prefixed so no two (session, name) pairs share an encoding.
fn value_aad(session: &str, name: &str, as_file: bool) -> Vec<u8> {
    let mut aad = VALUE_DOMAIN.to_vec();
    for part in [session, name] {
        aad.extend_from_slice(&u64::try_from(part.len()).unwrap_or(u64::MAX).to_be_bytes());
        aad.extend_from_slice(part.as_bytes());
    }
    // A value kept as a file is sealed apart, so flipping the flag in the
    // file fails to open it (and files written before the flag open as
    // before).
    if as_file {
        aad.extend_from_slice(b"\0file");
    }
    aad
}

fn check_aad(session: &str) -> Vec<u8> {
    let mut aad = CHECK_DOMAIN.to_vec();
    aad.extend_from_slice(session.as_bytes());
    aad
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY_HEX: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

    fn store() -> (tempfile::TempDir, SecretStore) {
        let root = tempfile::tempdir().expect("tempdir");
        let store = SecretStore::open(&root.path().join("store"), KEY_HEX).expect("open");
        (root, store)
    }

    fn session_files(store: &SecretStore) -> Vec<PathBuf> {
        std::fs::read_dir(store.dir())
            .expect("read_dir")
            .map(|entry| entry.expect("entry").path())
            .filter(|path| {
                path.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("session-"))
            })
            .collect()
    }

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path)
            .expect("metadata")
            .permissions()
            .mode()
            & 0o777
    }

    #[test]
    fn round_trip() {
        let (_root, store) = store();
        assert!(
            store
                .values("C1/1700000000.000100")
                .expect("empty")
                .is_empty()
        );
        assert!(store.names("C1/1700000000.000100").is_empty());
        store
            .set("C1/1700000000.000100", "STRIPE_API_KEY", "sk_live_1")
            .expect("set");
        store
            .set("C1/1700000000.000100", "_TOKEN2", "ünïcode ✓")
            .expect("set");
        store
            .set("other", "STRIPE_API_KEY", "sk_other")
            .expect("set");

        assert_eq!(
            store.values("C1/1700000000.000100").expect("values"),
            vec!["sk_live_1".to_owned(), "ünïcode ✓".to_owned()]
        );
        assert_eq!(
            store.names("C1/1700000000.000100"),
            vec!["STRIPE_API_KEY".to_owned(), "_TOKEN2".to_owned()]
        );
        assert_eq!(
            store.entries("other").expect("entries"),
            vec![("STRIPE_API_KEY".to_owned(), "sk_other".to_owned())]
        );

        // Another handle with the same key (base64 form) reads the same.
        let key = (0u8..32).collect::<Vec<u8>>();
        let again = SecretStore::open(store.dir(), &STANDARD.encode(&key)).expect("reopen");
        assert_eq!(again.values("other").expect("values"), vec!["sk_other"]);
    }

    #[test]
    fn plaintext_is_not_on_disk_and_nonces_are_fresh() {
        let (_root, store) = store();
        let value = "correct-horse-battery-staple";
        store.set("s", "A", value).expect("set");
        store.set("s", "B", value).expect("set");
        for path in session_files(&store) {
            let bytes = std::fs::read(&path).expect("read");
            let text = String::from_utf8_lossy(&bytes);
            assert!(!text.contains(value), "plaintext on disk: {text}");
            let file: StoreFile = serde_json::from_slice(&bytes).expect("json");
            assert_eq!(file.secrets.len(), 2);
            assert_ne!(file.secrets[0].sealed.nonce, file.secrets[1].sealed.nonce);
            assert_ne!(
                file.secrets[0].sealed.ciphertext,
                file.secrets[1].sealed.ciphertext
            );
        }
    }

    #[test]
    fn wrong_key_is_a_clear_error() {
        let (_root, store) = store();
        store.set("s", "A", "value").expect("set");
        let other = SecretStore::open(store.dir(), &SecretStore::generate_key()).expect("open");
        let err = other.values("s").expect_err("wrong key");
        assert!(matches!(err, SecretError::WrongKey { .. }), "{err:?}");
        assert!(
            err.to_string().contains("SP_STORE_KEY is not the key"),
            "{err}"
        );
        // Nor can it add to the file.
        assert!(matches!(
            other.set("s", "B", "v"),
            Err(SecretError::WrongKey { .. })
        ));
        assert!(other.names("s") == vec!["A".to_owned()]);
    }

    #[test]
    fn tampering_is_detected() {
        let (_root, store) = store();
        store.set("s", "A", "value-a").expect("set");
        store.set("s", "B", "value-b").expect("set");
        let path = session_files(&store).pop().expect("file");
        let original = std::fs::read(&path).expect("read");

        // Flip one ciphertext bit.
        let mut file: StoreFile = serde_json::from_slice(&original).expect("json");
        let mut ct = STANDARD
            .decode(&file.secrets[0].sealed.ciphertext)
            .expect("b64");
        ct[0] ^= 1;
        file.secrets[0].sealed.ciphertext = STANDARD.encode(&ct);
        std::fs::write(&path, serde_json::to_vec(&file).expect("json")).expect("write");
        let err = store.values("s").expect_err("tampered");
        assert!(
            matches!(&err, SecretError::Tampered { name, .. } if name == "A"),
            "{err:?}"
        );
        assert!(!err.to_string().contains("value-"), "{err}");

        // Swap the names: the associated data no longer matches.
        let mut file: StoreFile = serde_json::from_slice(&original).expect("json");
        file.secrets[0].name = "B".into();
        file.secrets[1].name = "A".into();
        std::fs::write(&path, serde_json::to_vec(&file).expect("json")).expect("write");
        assert!(matches!(
            store.values("s"),
            Err(SecretError::Tampered { .. })
        ));

        // Moving a session's file to another session's name fails too.
        std::fs::write(&path, &original).expect("restore");
        let other_path = store.session_path("t").expect("path");
        std::fs::copy(&path, &other_path).expect("copy");
        assert!(matches!(
            store.values("t"),
            Err(SecretError::Corrupt { .. })
        ));
        let mut file: StoreFile = serde_json::from_slice(&original).expect("json");
        file.session = "t".into();
        std::fs::write(&other_path, serde_json::to_vec(&file).expect("json")).expect("write");
        assert!(store.values("t").is_err());

        // Garbage is a clear error, not a panic.
        std::fs::write(&path, b"{not json").expect("write");
        assert!(matches!(
            store.values("s"),
            Err(SecretError::Corrupt { .. })
        ));
        std::fs::write(&path, &original).expect("restore");
        assert_eq!(
            store.values("s").expect("values"),
            vec!["value-a", "value-b"]
        );
    }

    #[test]
    fn modes_are_0700_and_0600() {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = root.path().join("store");
        std::fs::create_dir(&dir).expect("mkdir");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let store = SecretStore::open(&dir, KEY_HEX).expect("open");
        assert_eq!(mode(&dir), 0o700);
        store.set("s", "A", "v").expect("set");
        store.set("s", "B", "v").expect("set");
        let files = session_files(&store);
        assert_eq!(files.len(), 1);
        assert_eq!(mode(&files[0]), 0o600);
        assert_eq!(mode(&dir.join(".lock")), 0o600);
        // No temporary files left behind.
        assert_eq!(std::fs::read_dir(&dir).expect("read_dir").count(), 2);
    }

    #[test]
    fn duplicate_names_are_refused() {
        let (_root, store) = store();
        store.set("s", "API_KEY", "one").expect("set");
        let err = store.set("s", "API_KEY", "two").expect_err("duplicate");
        assert_eq!(err.to_string(), "a secret named API_KEY is already set");
        assert_eq!(store.values("s").expect("values"), vec!["one"]);
        // Names are per session and case-sensitive.
        store.set("t", "API_KEY", "three").expect("other session");
        store.set("s", "api_key", "four").expect("other case");
    }

    #[test]
    fn concurrent_sets_of_one_name_store_one() {
        let (_root, store) = store();
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let store = store.clone();
                std::thread::spawn(move || store.set("s", "SAME", &format!("v{i}")).is_ok())
            })
            .collect();
        let ok = handles
            .into_iter()
            .map(|h| h.join().expect("join"))
            .filter(|ok| *ok)
            .count();
        assert_eq!(ok, 1);
        assert_eq!(store.names("s"), vec!["SAME".to_owned()]);
    }

    #[test]
    fn bad_names_and_sessions_are_refused() {
        let (_root, store) = store();
        for name in ["", "1ABC", "A-B", "A B", "A=B", "ÄPI", "A\n", "$A"] {
            let err = store.set("s", name, "v").expect_err(name);
            assert!(matches!(err, SecretError::InvalidName { .. }), "{name:?}");
            assert!(err.to_string().contains("environment variable name"));
        }
        for name in ["A", "_", "_1", "STRIPE_API_KEY", "a1_b2"] {
            assert!(is_env_name(name), "{name}");
        }
        assert!(matches!(
            store.set("", "A", "v"),
            Err(SecretError::InvalidSession { .. })
        ));
        assert!(matches!(
            store.values(&"x".repeat(MAX_SESSION_LEN + 1)),
            Err(SecretError::InvalidSession { .. })
        ));
        // Any characters are fine in a session id; it never becomes a path.
        store.set("../../etc/x", "A", "v").expect("odd session id");
        assert_eq!(session_files(&store).len(), 1);
    }

    #[test]
    fn keys() {
        let bytes: Vec<u8> = (0u8..32).collect();
        assert_eq!(parse_key(KEY_HEX).expect("hex").to_vec(), bytes);
        assert_eq!(
            parse_key(&KEY_HEX.to_uppercase()).expect("HEX").to_vec(),
            bytes
        );
        assert_eq!(
            parse_key(&format!(" {KEY_HEX}\n"))
                .expect("trimmed")
                .to_vec(),
            bytes
        );
        for encoded in [
            STANDARD.encode(&bytes),
            general_purpose::STANDARD_NO_PAD.encode(&bytes),
            general_purpose::URL_SAFE.encode(&bytes),
            general_purpose::URL_SAFE_NO_PAD.encode(&bytes),
        ] {
            assert_eq!(parse_key(&encoded).expect("base64").to_vec(), bytes);
        }
        let generated = SecretStore::generate_key();
        assert_eq!(generated.len(), 64);
        assert!(parse_key(&generated).is_ok());
        assert_ne!(generated, SecretStore::generate_key());

        let secretish = "not-a-key-but-private";
        for bad in [
            "",
            "   ",
            &KEY_HEX[..62],
            &STANDARD.encode([1u8; 16]),
            secretish,
            &format!("{KEY_HEX}00"),
        ] {
            let err = parse_key(bad).expect_err(bad);
            let msg = err.to_string();
            assert!(msg.starts_with("SP_STORE_KEY is not a valid key"), "{msg}");
            assert!(!msg.contains(secretish), "{msg}");
            if bad.len() > 8 {
                assert!(!msg.contains(bad.trim()), "{msg}");
            }
        }
    }

    #[test]
    fn from_env_value() {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = root.path().join("store");
        let configured = StoreDir::Configured(dir.clone());
        assert_eq!(
            SecretStore::from_key_var(&configured, None)
                .expect("unset")
                .map(|_| ()),
            Err(NoStore::NoKey)
        );
        assert!(!dir.exists(), "no store without a key");
        assert!(matches!(
            SecretStore::from_key_var(&configured, Some("".into())),
            Err(SecretError::BadKey { .. })
        ));
        let store = SecretStore::from_key_var(&configured, Some(KEY_HEX.into()))
            .expect("set")
            .expect("some");
        assert_eq!(store.dir(), dir);
        assert!(!format!("{store:?}").contains("0001"));
    }

    #[test]
    fn the_default_folder_is_made_0700_and_an_unusable_one_is_named() {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = root.path().join("state/calvin/secrets");
        let default = StoreDir::Default(Some(dir.clone()));
        let store = SecretStore::from_key_var(&default, Some(KEY_HEX.into()))
            .expect("a good key")
            .expect("the default folder");
        assert_eq!(store.dir(), dir);
        let mode = std::fs::metadata(&dir).expect("made").permissions().mode();
        assert_eq!(mode & 0o777, 0o700);

        // A file where the folder's parent should be.
        let blocked = root.path().join("file");
        std::fs::write(&blocked, "x").expect("file");
        let under_file = blocked.join("calvin/secrets");
        let no = SecretStore::from_key_var(
            &StoreDir::Default(Some(under_file.clone())),
            Some(KEY_HEX.into()),
        )
        .expect("not an error: the default folder only refuses")
        .map(|_| ())
        .expect_err("unusable");
        assert!(matches!(&no, NoStore::Folder { path, .. } if *path == under_file));
        assert!(
            no.to_string().starts_with(&format!(
                "the secret store's folder {} cannot be used (",
                under_file.display()
            )),
            "{no}"
        );
        // Configured, the same folder is an error.
        assert!(matches!(
            SecretStore::from_key_var(&StoreDir::Configured(under_file), Some(KEY_HEX.into())),
            Err(SecretError::Io { .. })
        ));
        let none = SecretStore::from_key_var(&StoreDir::Default(None), Some(KEY_HEX.into()))
            .expect("a good key");
        assert_eq!(none.map(|_| ()), Err(NoStore::NoFolder));
        // A bad key is an error whatever the folder.
        assert!(matches!(
            SecretStore::from_key_var(&StoreDir::Default(None), Some("short".into())),
            Err(SecretError::BadKey { .. })
        ));
    }
}
