//! The state of a one-machine edge (`calvin-edge dev`, `calvin-agent share
//! --dev`): a local CA, a wildcard certificate for the preview domain signed
//! by it, and an agent token, made on the first start and reused after.
//!
//! Files in the state folder (0700): `ca.pem` (the CA a client trusts,
//! name-constrained to the domain, `localhost` and loopback), `ca.key`,
//! `ca.toml` (its domain), `edge.pem` (leaf then CA), `edge.key`,
//! `edge.toml` (what the leaf was made for), `agent.token`, `reset.key`;
//! keys and the token are 0600. Two empty lock files: `state.lock`, held
//! while a process reads or makes the state (two shares starting at once
//! on a new folder make one CA, not two), and `edge.lock`, held by the
//! process whose `share --dev` runs the folder's dev edge ([`DevLock`]).

use std::fs;
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CidrSubnet, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, GeneralSubtree, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    NameConstraints, SanType,
};
use serde::{Deserialize, Serialize};
use time::{Duration, OffsetDateTime};

use crate::certs::tls::{TlsError, TlsMaterial};
use crate::state_files::{
    FileError, decode_hex32, load_or_make_key, load_or_make_secret, read_optional, write_private,
    write_public,
};
use crate::{Certificates, Edge, Limits, Listen, ListenerKind, PlainHttp, Settings, StartError};

pub const CA_FILE: &str = "ca.pem";
pub const TOKEN_FILE: &str = "agent.token";
const CA_KEY_FILE: &str = "ca.key";
const LEAF_FILE: &str = "edge.pem";
const LEAF_KEY_FILE: &str = "edge.key";
const LEAF_INFO_FILE: &str = "edge.toml";
const CA_INFO_FILE: &str = "ca.toml";
const RESET_KEY_FILE: &str = "reset.key";
const STATE_LOCK_FILE: &str = "state.lock";
const EDGE_LOCK_FILE: &str = "edge.lock";

/// How long a process that has just taken over the dev edge tries again a
/// port still taken: the process that ran the edge released the lock as
/// it exits, and its sockets may close a moment after.
const TAKEOVER_BIND_WAIT: std::time::Duration = std::time::Duration::from_secs(2);
const TAKEOVER_BIND_RETRY: std::time::Duration = std::time::Duration::from_millis(20);

/// The grace period of a dev edge that processes share: while it drains,
/// its ports stay closed to the one taking over, so every other preview
/// waits too (a dev server's live-reload WebSocket would hold them for the
/// whole 30 s of an edge's default). The stopping process's own previews
/// end with its agent, before its edge stops.
const SHARED_GRACE_SECS: u64 = 2;

/// The leaf is valid this long (under the 398 days browsers accept)...
const LEAF_VALIDITY_DAYS: i64 = 397;
/// ...and made again when it is older than this at start.
const LEAF_RENEW_AFTER_DAYS: i64 = 300;
const CA_VALIDITY_DAYS: i64 = 3650;

#[derive(Debug, thiserror::Error)]
pub enum DevError {
    #[error("state folder {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot make the local certificates: {0}")]
    Cert(#[from] rcgen::Error),
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error(
        "{path} is not what this version of calvin wrote ({why}); move it away to start afresh"
    )]
    Corrupt { path: PathBuf, why: String },
}

impl From<FileError> for DevError {
    fn from(e: FileError) -> Self {
        match e {
            FileError::Io { path, source } => DevError::Io { path, source },
            FileError::Corrupt { path, why } => DevError::Corrupt { path, why },
        }
    }
}

/// The flags of a one-machine edge, shared by `calvin-edge dev` and
/// `calvin-agent share --dev`.
#[derive(Debug, Clone, clap::Args)]
pub struct DevArgs {
    /// State folder: local CA, certificate and agent token [default: ~/.local/state/calvin/dev]
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// HTTPS listener for visitors
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:4443")]
    pub https: SocketAddr,
    /// Plain HTTP listener for visitors
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:4480")]
    pub http: SocketAddr,
    /// QUIC listener for agents (UDP; may share the HTTPS port number)
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:4443")]
    pub quic: SocketAddr,
    /// Preview domain: previews are https://NAME.DOMAIN:PORT
    #[arg(long, value_name = "D", default_value = "preview.localhost")]
    pub domain: String,
}

impl DevArgs {
    /// The state folder these flags name, or the per-user default.
    pub fn state_dir(&self) -> PathBuf {
        self.state_dir.clone().unwrap_or_else(default_state_dir)
    }

    /// Loads (or makes) the state and the settings of the dev edge: one
    /// account, `dev`, whose token is in `DIR/agent.token`.
    pub fn settings(&self) -> Result<(Settings, DevState), DevError> {
        let state = self.state()?;
        Ok((self.settings_for(&state), state))
    }

    /// Loads (or makes) the state these flags name.
    pub fn state(&self) -> Result<DevState, DevError> {
        load_or_create(&self.state_dir(), &self.domain)
    }

    /// Whether another process can join this dev edge: every address is
    /// fixed. With port 0 the ports are known only to the process that
    /// bound them, and a process taking the edge over would bind others.
    pub fn joinable(&self) -> bool {
        [self.https, self.http, self.quic]
            .iter()
            .all(|addr| addr.port() != 0)
    }

    /// The settings of a dev edge that processes share.
    fn shared_settings(&self, state: &DevState) -> Settings {
        let mut settings = self.settings_for(state);
        settings.limits.grace_period_secs = SHARED_GRACE_SECS;
        settings
    }

    fn settings_for(&self, state: &DevState) -> Settings {
        Settings {
            domain: self.domain.clone(),
            public_url: None,
            listen: Listen {
                https: Some(self.https),
                http: Some(self.http),
                quic: self.quic,
                // Served, but not advertised: a dev edge's visitors are
                // this machine's browser and tools, and a browser that
                // moves to HTTP/3 on a local CA's certificate is not shown
                // to work yet.
                http3: crate::Http3Settings {
                    enabled: true,
                    advertise: false,
                    port: None,
                },
            },
            certificates: Certificates::Fixed(state.tls.clone()),
            dns: None,
            plain_http: PlainHttp::Serve,
            accounts: vec![(DEV_ACCOUNT.to_owned(), state.token.clone())],
            // A dev edge serves this machine: every visitor is its own
            // user, from one address, and the internet's request rates
            // would throttle their browser and their test runs (and the
            // benchmarks' load) with 429s.
            limits: Limits {
                requests_per_second_per_ip: 0,
                requests_per_second_per_preview: 0,
                ..Limits::default()
            },
            reset_key: state.reset_key,
            share_key: state.share_key,
            names_file: Some(state.dir.join(crate::upstream::name_store::FILE)),
            cluster: None,
        }
    }
}

/// Why a dev edge did not start.
#[derive(Debug, thiserror::Error)]
pub enum DevStartError {
    #[error("dev edge state: {0}")]
    State(#[from] DevError),
    /// A taken address says which flag moves it.
    #[error("{0}{hint}", hint = move_hint(.0))]
    Start(#[from] StartError),
}

fn move_hint(e: &StartError) -> String {
    match e {
        StartError::Bind { kind, .. } => {
            format!("\n  (pass {} ADDR to use another address)", flag_for(*kind))
        }
        _ => String::new(),
    }
}

impl DevArgs {
    /// Makes or loads the dev state these flags name and binds its edge.
    pub async fn bind(&self) -> Result<(Edge, DevState), DevStartError> {
        let (settings, state) = self.settings()?;
        Ok((Edge::bind(settings).await?, state))
    }

    /// The dev edge of a state folder that several processes share (each
    /// `share --dev` of a machine): binds it and takes the folder's lock,
    /// or, when another process holds the lock, binds nothing: that
    /// process runs the edge, at these flags' addresses. A taken port while
    /// no process holds the lock is another program's, and an error.
    pub async fn bind_or_join(&self) -> Result<(DevState, Option<Running>), DevStartError> {
        let state = self.state()?;
        let Some(lock) = DevLock::try_take(&state.dir)? else {
            return Ok((state, None));
        };
        let edge = Edge::bind(self.shared_settings(&state)).await?;
        Ok((state, Some(Running { edge, lock })))
    }

    /// Waits until the process running the folder's dev edge lets it go
    /// (it stopped, or died), then binds it here. When several wait, the
    /// kernel hands the lock to one; the others go on waiting.
    pub async fn take_over(&self) -> Result<Running, DevStartError> {
        let lock = DevLock::wait(&self.state_dir()).await?;
        let state = self.state()?;
        let deadline = tokio::time::Instant::now() + TAKEOVER_BIND_WAIT;
        // Polled: nothing tells one process that another's socket closed.
        loop {
            match Edge::bind(self.shared_settings(&state)).await {
                Ok(edge) => return Ok(Running { edge, lock }),
                Err(StartError::Bind { source, .. })
                    if source.kind() == ErrorKind::AddrInUse
                        && tokio::time::Instant::now() < deadline =>
                {
                    tokio::time::sleep(TAKEOVER_BIND_RETRY).await;
                }
                Err(err) => return Err(err.into()),
            }
        }
    }
}

/// A dev edge bound by this process, and the state folder's lock it holds
/// while it runs.
pub struct Running {
    pub edge: Edge,
    pub lock: DevLock,
}

/// The right to run the dev edge of a state folder: an exclusive `flock`
/// on `DIR/edge.lock`. It is released when dropped, or when the process
/// ends however it ends (the kernel drops it with the file), so a process
/// that holds it is one whose edge runs, never a stale file.
pub struct DevLock {
    _file: fs::File,
}

impl DevLock {
    /// Takes the lock of the folder `dir`, or `None` when another process
    /// holds it.
    pub fn try_take(dir: &Path) -> Result<Option<DevLock>, DevError> {
        let path = dir.join(EDGE_LOCK_FILE);
        let file = open_lock_file(&path)?;
        match file.try_lock() {
            Ok(()) => Ok(Some(DevLock { _file: file })),
            Err(fs::TryLockError::WouldBlock) => Ok(None),
            Err(fs::TryLockError::Error(source)) => Err(DevError::Io { path, source }),
        }
    }

    /// Waits for the lock of the folder `dir` and takes it. The wait runs on
    /// a thread of its own rather than tokio's blocking pool, which a
    /// runtime waits for when it shuts down: a process that stops while
    /// waiting exits at once. Dropped meanwhile, the lock is let go as soon
    /// as the thread gets it.
    pub async fn wait(dir: &Path) -> Result<DevLock, DevError> {
        let path = dir.join(EDGE_LOCK_FILE);
        let file = open_lock_file(&path)?;
        let (taken, lock) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name("dev-edge-lock".into())
            .spawn(move || {
                let _ = taken.send(file.lock().map(|()| DevLock { _file: file }));
            })
            .map_err(|source| DevError::Io {
                path: path.clone(),
                source,
            })?;
        match lock.await {
            Ok(Ok(lock)) => Ok(lock),
            Ok(Err(source)) => Err(DevError::Io { path, source }),
            Err(_) => Err(DevError::Io {
                path,
                source: std::io::Error::other("the thread waiting for the lock ended"),
            }),
        }
    }
}

/// Opens (or makes, 0600) a lock file of the state folder.
fn open_lock_file(path: &Path) -> Result<fs::File, DevError> {
    fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .map_err(|source| DevError::Io {
            path: path.to_owned(),
            source,
        })
}

/// The flag that moves a dev listener, for a "port taken" error.
pub fn flag_for(kind: ListenerKind) -> &'static str {
    match kind {
        ListenerKind::Https => "--https",
        ListenerKind::Http => "--http",
        ListenerKind::Quic => "--quic",
        // The dev edge serves no DNS and is never in a cluster.
        ListenerKind::Dns | ListenerKind::Peer => "(none)",
    }
}

/// The account of a dev edge.
pub const DEV_ACCOUNT: &str = "dev";

/// What a dev edge needs from its state folder.
pub struct DevState {
    pub dir: PathBuf,
    pub tls: TlsMaterial,
    pub token: String,
    pub reset_key: [u8; 32],
    /// Protected previews' share tokens are made with it.
    pub share_key: [u8; 32],
    /// This start made a new CA: clients must trust the new `ca.pem`.
    pub new_ca: bool,
}

impl DevState {
    pub fn ca_path(&self) -> PathBuf {
        self.dir.join(CA_FILE)
    }
    pub fn token_path(&self) -> PathBuf {
        self.dir.join(TOKEN_FILE)
    }
}

/// The per-user folder used when none is given: `$XDG_STATE_HOME/calvin/dev`
/// (`~/.local/state/calvin/dev`).
pub fn default_state_dir() -> PathBuf {
    dirs::state_dir()
        .or_else(|| dirs::home_dir().map(|h| h.join(".local/state")))
        .unwrap_or_else(std::env::temp_dir)
        .join("calvin")
        .join("dev")
}

#[derive(Serialize, Deserialize)]
struct CaInfo {
    domain: String,
}

#[derive(Serialize, Deserialize, PartialEq)]
struct LeafInfo {
    domain: String,
    created_unix: i64,
}

/// Loads the state in `dir`, making what is missing. The leaf is made again
/// when it is near its end, with the same CA, so a client that trusts
/// `ca.pem` keeps trusting the edge. Another domain needs a new CA (each is
/// constrained to its domain); `DevState::new_ca` says when one was made.
pub fn load_or_create(dir: &Path, domain: &str) -> Result<DevState, DevError> {
    let io = |source| DevError::Io {
        path: dir.to_owned(),
        source,
    };
    fs::create_dir_all(dir).map_err(io)?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(io)?;
    // Held to the end: another process making the state at the same time
    // would mix its CA with this one's.
    let state_lock = dir.join(STATE_LOCK_FILE);
    let making = open_lock_file(&state_lock)?;
    making.lock().map_err(|source| DevError::Io {
        path: state_lock.clone(),
        source,
    })?;

    // The CA is name-constrained to the domain, so another domain needs
    // another CA (and the client must trust the new ca.pem).
    let ca_info_path = dir.join(CA_INFO_FILE);
    let ca_domain = read_optional(&ca_info_path)?
        .map(|text| toml::from_str::<CaInfo>(&text))
        .transpose()
        .map_err(|e| DevError::Corrupt {
            path: ca_info_path.clone(),
            why: e.to_string(),
        })?
        .map(|info| info.domain);
    let (ca_pem, ca_key, new_ca) = match (
        read_optional(&dir.join(CA_FILE))?,
        read_optional(&dir.join(CA_KEY_FILE))?,
    ) {
        (Some(pem), Some(key)) if ca_domain.as_deref() == Some(domain) => (pem, key, false),
        _ => {
            // The old leaf goes first: a crash from here on must not leave a
            // leaf of the old CA looking fresh next to the new one.
            match std::fs::remove_file(dir.join(LEAF_INFO_FILE)) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(DevError::Io {
                        path: dir.join(LEAF_INFO_FILE),
                        source: e,
                    });
                }
                _ => {}
            }
            let (pem, key) = make_ca(domain)?;
            write_private(&dir.join(CA_KEY_FILE), &key)?;
            write_public(&dir.join(CA_FILE), &pem)?;
            let info = toml::to_string(&CaInfo {
                domain: domain.to_owned(),
            })
            .map_err(|e| DevError::Corrupt {
                path: ca_info_path.clone(),
                why: e.to_string(),
            })?;
            write_public(&ca_info_path, &info)?;
            (pem, key, true)
        }
    };

    let now = OffsetDateTime::now_utc();
    let info_path = dir.join(LEAF_INFO_FILE);
    let info: Option<LeafInfo> = read_optional(&info_path)?
        .map(|text| toml::from_str(&text))
        .transpose()
        .map_err(|e| DevError::Corrupt {
            path: info_path.clone(),
            why: e.to_string(),
        })?;
    let leaf_fresh = !new_ca
        && info.is_some_and(|i| {
            i.domain == domain
                && now.unix_timestamp() - i.created_unix < LEAF_RENEW_AFTER_DAYS * 86_400
        })
        && dir.join(LEAF_FILE).exists()
        && dir.join(LEAF_KEY_FILE).exists();
    if !leaf_fresh {
        let ca_key = KeyPair::from_pem(&ca_key).map_err(|e| DevError::Corrupt {
            path: dir.join(CA_KEY_FILE),
            why: e.to_string(),
        })?;
        let issuer = Issuer::from_ca_cert_pem(&ca_pem, ca_key).map_err(|e| DevError::Corrupt {
            path: dir.join(CA_FILE),
            why: e.to_string(),
        })?;
        let (leaf_pem, leaf_key) = make_leaf(domain, &issuer, now)?;
        write_private(&dir.join(LEAF_KEY_FILE), &leaf_key)?;
        write_public(&dir.join(LEAF_FILE), &format!("{leaf_pem}{ca_pem}"))?;
        let info = LeafInfo {
            domain: domain.to_owned(),
            created_unix: now.unix_timestamp(),
        };
        let text = toml::to_string(&info).map_err(|e| DevError::Corrupt {
            path: info_path.clone(),
            why: e.to_string(),
        })?;
        write_public(&info_path, &text)?;
    }
    let tls = TlsMaterial::from_pem_files(&dir.join(LEAF_FILE), &dir.join(LEAF_KEY_FILE))?;

    let token = load_or_make_secret(&dir.join(TOKEN_FILE))?;
    let reset_hex = load_or_make_secret(&dir.join(RESET_KEY_FILE))?;
    let reset_key = decode_hex32(&dir.join(RESET_KEY_FILE), &reset_hex)?;
    let share_key = load_or_make_key(&dir.join(crate::share::SHARE_KEY_FILE))?;
    drop(making);
    Ok(DevState {
        dir: dir.to_owned(),
        tls,
        token,
        reset_key,
        share_key,
        new_ca,
    })
}

/// A CA that can vouch only for `domain`, `localhost` and loopback
/// addresses (name constraints): trusting it exposes no other site, even if
/// its key leaks.
fn make_ca(domain: &str) -> Result<(String, String), DevError> {
    let mut params = CertificateParams::default();
    params.name_constraints = Some(NameConstraints {
        permitted_subtrees: vec![
            GeneralSubtree::DnsName(domain.to_owned()),
            GeneralSubtree::DnsName("localhost".to_owned()),
            GeneralSubtree::IpAddress(CidrSubnet::V4([127, 0, 0, 0], [255, 0, 0, 0])),
            GeneralSubtree::IpAddress(CidrSubnet::V6(
                std::net::Ipv6Addr::LOCALHOST.octets(),
                [0xff; 16],
            )),
        ],
        excluded_subtrees: vec![],
    });
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "calvin local development CA");
    dn.push(DnType::OrganizationName, "calvin");
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let now = OffsetDateTime::now_utc();
    params.not_before = now - Duration::days(1);
    params.not_after = now + Duration::days(CA_VALIDITY_DAYS);
    let key = KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    Ok((cert.pem(), key.serialize_pem()))
}

fn make_leaf(
    domain: &str,
    issuer: &Issuer<'_, KeyPair>,
    now: OffsetDateTime,
) -> Result<(String, String), DevError> {
    let mut params = CertificateParams::new(vec![
        format!("*.{domain}"),
        domain.to_owned(),
        "localhost".to_owned(),
    ])?;
    params
        .subject_alt_names
        .push(SanType::IpAddress([127, 0, 0, 1].into()));
    params
        .subject_alt_names
        .push(SanType::IpAddress(std::net::Ipv6Addr::LOCALHOST.into()));
    params
        .distinguished_name
        .push(DnType::CommonName, format!("*.{domain}"));
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    params.not_before = now - Duration::days(1);
    params.not_after = now + Duration::days(LEAF_VALIDITY_DAYS);
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, issuer)?;
    Ok((cert.pem(), key.serialize_pem()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn first_start_makes_state_and_later_starts_reuse_it() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let first = load_or_create(&state, "preview.localhost").unwrap();
        assert_eq!(first.token.len(), 64);
        for (file, mode) in [
            (CA_KEY_FILE, 0o600),
            (LEAF_KEY_FILE, 0o600),
            (TOKEN_FILE, 0o600),
            (RESET_KEY_FILE, 0o600),
            (crate::share::SHARE_KEY_FILE, 0o600),
            (CA_FILE, 0o644),
        ] {
            let meta = fs::metadata(state.join(file)).unwrap();
            assert_eq!(meta.mode() & 0o777, mode, "{file}");
        }
        assert_eq!(fs::metadata(&state).unwrap().mode() & 0o777, 0o700);
        let ca = fs::read(state.join(CA_FILE)).unwrap();
        let leaf = fs::read(state.join(LEAF_FILE)).unwrap();

        let second = load_or_create(&state, "preview.localhost").unwrap();
        assert_eq!(second.token, first.token);
        assert_eq!(second.reset_key, first.reset_key);
        assert_eq!(second.share_key, first.share_key);
        assert_eq!(fs::read(state.join(CA_FILE)).unwrap(), ca);
        assert_eq!(fs::read(state.join(LEAF_FILE)).unwrap(), leaf);

        assert!(first.new_ca && !second.new_ca);

        // Another domain needs another CA (the CA is constrained to its
        // domain); the token stays.
        let third = load_or_create(&state, "preview.test").unwrap();
        assert!(third.new_ca);
        assert_ne!(fs::read(state.join(CA_FILE)).unwrap(), ca);
        assert_ne!(fs::read(state.join(LEAF_FILE)).unwrap(), leaf);
        assert_eq!(third.token, first.token);
    }

    #[test]
    fn the_leaf_verifies_against_the_ca_for_every_name() {
        let dir = tempfile::tempdir().unwrap();
        let state = load_or_create(dir.path(), "preview.localhost").unwrap();
        let mut roots = rustls::RootCertStore::empty();
        for ca in CertificateDer::pem_file_iter(state.ca_path()).unwrap() {
            roots.add(ca.unwrap()).unwrap();
        }
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            roots.into(),
            crate::certs::tls::provider(),
        )
        .build()
        .unwrap();
        let now = rustls_pki_types::UnixTime::now();
        for name in [
            "web.preview.localhost",
            "preview.localhost",
            "localhost",
            "127.0.0.1",
            "::1",
        ] {
            let server = rustls_pki_types::ServerName::try_from(name).unwrap();
            verifier
                .verify_server_cert(
                    &state.tls.certs[0],
                    &state.tls.certs[1..],
                    &server,
                    &[],
                    now,
                )
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        let other = rustls_pki_types::ServerName::try_from("example.com").unwrap();
        assert!(
            verifier
                .verify_server_cert(&state.tls.certs[0], &[], &other, &[], now)
                .is_err()
        );
    }

    #[test]
    fn the_ca_cannot_vouch_for_other_sites() {
        let dir = tempfile::tempdir().unwrap();
        let state = load_or_create(dir.path(), "preview.localhost").unwrap();
        // Someone with ca.key signs a certificate for another site...
        let ca_pem = fs::read_to_string(state.ca_path()).unwrap();
        let ca_key =
            KeyPair::from_pem(&fs::read_to_string(dir.path().join(CA_KEY_FILE)).unwrap()).unwrap();
        let issuer = Issuer::from_ca_cert_pem(&ca_pem, ca_key).unwrap();
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec!["bank.example.com".to_owned()]).unwrap();
        params.use_authority_key_identifier_extension = true;
        let forged = params.signed_by(&key, &issuer).unwrap();
        // ...and a client that trusts ca.pem refuses it.
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap())
            .unwrap();
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            roots.into(),
            crate::certs::tls::provider(),
        )
        .build()
        .unwrap();
        let name = rustls_pki_types::ServerName::try_from("bank.example.com").unwrap();
        let err = verifier
            .verify_server_cert(
                forged.der(),
                &[],
                &name,
                &[],
                rustls_pki_types::UnixTime::now(),
            )
            .unwrap_err();
        assert!(format!("{err:?}").contains("NameConstraint"), "{err:?}");
    }

    #[test]
    fn processes_starting_at_once_on_a_new_folder_make_one_ca() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let made: Vec<DevState> = std::thread::scope(|s| {
            let starts: Vec<_> = (0..4)
                .map(|_| s.spawn(|| load_or_create(&state, "preview.localhost").unwrap()))
                .collect();
            starts.into_iter().map(|t| t.join().unwrap()).collect()
        });
        assert_eq!(made.iter().filter(|s| s.new_ca).count(), 1);
        assert!(made.iter().all(|s| s.token == made[0].token));
        assert!(made.iter().all(|s| s.tls.certs == made[0].tls.certs));
    }

    #[tokio::test]
    async fn one_holder_of_the_edge_lock_and_the_next_waits_for_it() {
        let dir = tempfile::tempdir().unwrap();
        let first = DevLock::try_take(dir.path()).unwrap().expect("free");
        assert!(DevLock::try_take(dir.path()).unwrap().is_none(), "held");
        let next = tokio::spawn({
            let dir = dir.path().to_owned();
            async move { DevLock::wait(&dir).await }
        });
        tokio::task::yield_now().await;
        assert!(!next.is_finished(), "waits while the first holds it");
        drop(first);
        let second = tokio::time::timeout(std::time::Duration::from_secs(5), next)
            .await
            .expect("woken when the first lets go")
            .unwrap()
            .unwrap();
        assert!(DevLock::try_take(dir.path()).unwrap().is_none());
        drop(second);
        assert!(DevLock::try_take(dir.path()).unwrap().is_some());
    }

    use rustls::client::danger::ServerCertVerifier;
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
}
