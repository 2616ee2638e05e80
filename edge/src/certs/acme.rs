//! The edge's own certificate for `zone` and `*.zone`, from an ACME CA
//! through DNS-01 challenges that the edge's DNS server answers.
//!
//! Files in `<state_dir>/acme/` (0600): `account.json` (the ACME account
//! and the directory it belongs to), `cert.pem` (chain, leaf first) and
//! `key.pem`. A restart serves the certificate on disk and orders nothing
//! while it is valid and not due. Renewal is due when a third of the
//! lifetime remains (or `renew_days_before` days before expiry); a failed
//! attempt keeps the current certificate serving and is retried with a
//! capped exponential backoff. [`Renewal::renew_now`] (SIGHUP) forces one.
//!
//! [`renew`] is that loop; where an order's challenge values are published
//! and who else gets the certificate is its [`Publish`]: this edge's own
//! DNS alone ([`keep_renewed`]), or a cluster's store (`cluster::acme`).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use instant_acme::{
    Account, AccountCredentials, AuthorizationStatus, ChallengeType, Identifier, NewAccount,
    NewOrder, OrderStatus, RetryPolicy,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use tokio::sync::{Notify, watch};
use tracing::{info, warn};

use crate::certs::cert_store::{CertInfo, CertStore};
use crate::certs::dns::Challenges;
use crate::certs::tls::{TlsError, TlsMaterial};
use crate::state_files::{self, FileError};

const ACCOUNT_FILE: &str = "account.json";
const CERT_FILE: &str = "cert.pem";
const KEY_FILE: &str = "key.pem";
const CERT_META_FILE: &str = "cert.json";

/// How the edge talks to its CA.
#[derive(Debug, Clone)]
pub struct AcmeSettings {
    /// The directory URL.
    pub directory: String,
    /// Contact URIs (`mailto:...`) for the account.
    pub contact: Vec<String>,
    /// A root to trust for the directory besides the system's.
    pub ca_file: Option<PathBuf>,
    /// Where the account and certificate are kept (`<state_dir>/acme`).
    pub dir: PathBuf,
    /// Renew this long before expiry; `None`: when a third of the
    /// certificate's lifetime remains.
    pub renew_before: Option<Duration>,
    /// A failed attempt is retried after `retry_min`, doubling up to
    /// `retry_max`.
    pub retry_min: Duration,
    pub retry_max: Duration,
    /// One whole attempt (account, order, challenges, issuance) gets this long.
    pub attempt_timeout: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum AcmeError {
    #[error("ACME: {0}")]
    Protocol(#[from] instant_acme::Error),
    #[error("ACME: {0}")]
    Order(String),
    #[error("ACME attempt took longer than {0} s")]
    Timeout(u64),
    #[error("the CA root {path}: {why}")]
    Root { path: PathBuf, why: String },
    #[error(transparent)]
    File(#[from] FileError),
    #[error("the issued certificate: {0}")]
    Tls(#[from] TlsError),
    #[error("the cluster's store: {0}")]
    Store(String),
}

/// What the health endpoint tells about renewals.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RenewalStatus {
    /// The last failure, until an attempt succeeds.
    pub last_error: Option<String>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub last_error_at: Option<OffsetDateTime>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub last_renewed_at: Option<OffsetDateTime>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub next_attempt_at: Option<OffsetDateTime>,
    /// Attempts since the start (ACME orders; with certificate files,
    /// reads of them again), and how many failed.
    pub attempts: u64,
    pub failures: u64,
}

/// A handle on the renewal loop: its status, and a way to force a renewal.
#[derive(Debug, Clone, Default)]
pub struct Renewal {
    status: Arc<Mutex<RenewalStatus>>,
    requested: Arc<AtomicBool>,
    wake: Arc<Notify>,
}

impl Renewal {
    pub fn status(&self) -> RenewalStatus {
        self.status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Starts an attempt now, whether or not one is due. Requests made
    /// while an attempt runs are served by it.
    pub fn renew_now(&self) {
        self.requested.store(true, Ordering::SeqCst);
        self.wake.notify_one();
    }

    /// Resolves when [`renew_now`](Self::renew_now) has been called since
    /// the last [`take_request`](Self::take_request).
    pub async fn requested(&self) {
        loop {
            let woken = self.wake.notified();
            if self.requested.load(Ordering::SeqCst) {
                return;
            }
            woken.await;
        }
    }

    /// Marks the pending request (if any) as served.
    pub fn take_request(&self) {
        self.requested.store(false, Ordering::SeqCst);
    }

    /// Notes how an attempt ended.
    pub fn record(&self, outcome: Result<(), String>) {
        let now = OffsetDateTime::now_utc();
        self.update(|s| {
            s.attempts += 1;
            match outcome {
                Ok(()) => {
                    s.last_error = None;
                    s.last_error_at = None;
                    s.last_renewed_at = Some(now);
                }
                Err(err) => {
                    s.failures += 1;
                    s.last_error = Some(err);
                    s.last_error_at = Some(now);
                }
            }
        });
    }

    fn update(&self, change: impl FnOnce(&mut RenewalStatus)) {
        change(&mut self.status.lock().unwrap_or_else(|e| e.into_inner()));
    }
}

/// Installs the certificate on disk, if it is usable for `domain`.
/// Returns what it installed; a missing, expired, foreign or broken
/// certificate is logged and left for the renewal loop to replace.
pub fn load_saved(settings: &AcmeSettings, domain: &str, store: &CertStore) -> Option<CertInfo> {
    let (cert, key) = (settings.dir.join(CERT_FILE), settings.dir.join(KEY_FILE));
    if !cert.exists() {
        return None;
    }
    let loaded = TlsMaterial::from_pem_files(&cert, &key).and_then(|material| {
        let info = CertInfo::of(&material.certs[0])?;
        Ok((material, info))
    });
    match loaded {
        Ok((_, info)) if !info.covers_zone(domain) => {
            warn!(%info, "the saved certificate is for other names; ordering a new one");
            None
        }
        Ok((_, info)) if info.not_after <= OffsetDateTime::now_utc() => {
            warn!(%info, "the saved certificate has expired; ordering a new one");
            None
        }
        Ok((material, _)) => match store.install(&material) {
            Ok(info) => {
                info!(%info, "serving the saved certificate");
                Some(info)
            }
            Err(err) => {
                warn!(%err, "the saved certificate cannot be served; ordering a new one");
                None
            }
        },
        Err(err) => {
            warn!(%err, "the saved certificate cannot be read; ordering a new one");
            None
        }
    }
}

/// When the certificate is due for renewal.
pub fn renewal_due(info: &CertInfo, renew_before: Option<Duration>) -> OffsetDateTime {
    let before = match renew_before {
        Some(before) => time::Duration::try_from(before).unwrap_or(time::Duration::MAX),
        None => (info.not_after - info.not_before) / 3,
    };
    info.not_after
        .checked_sub(before)
        .map_or(info.not_before, |due| due.max(info.not_before))
}

/// Delay before retry number `failures` (1 for the first).
fn backoff(settings: &AcmeSettings, failures: u32) -> Duration {
    let factor = 1u32
        .checked_shl(failures.saturating_sub(1))
        .unwrap_or(u32::MAX);
    settings
        .retry_min
        .saturating_mul(factor)
        .min(settings.retry_max)
}

/// The longest single sleep: the wall clock is read again after it, so a
/// suspended machine or a changed clock cannot postpone a renewal, and no
/// timer has to span months.
const MAX_SLEEP: Duration = Duration::from_secs(3600);

/// An issued certificate: its chain (leaf first) and key, as PEM.
#[derive(Clone)]
pub struct Issued {
    pub chain_pem: String,
    pub key_pem: String,
    pub info: CertInfo,
}

impl Issued {
    /// Reads a chain and key; checks that both parse (not that they match:
    /// [`CertStore::install`] does).
    pub fn from_pem(chain_pem: String, key_pem: String) -> Result<Issued, AcmeError> {
        let material = material_from_pem(&chain_pem, &key_pem)?;
        let info = CertInfo::of(&material.certs[0])?;
        Ok(Issued {
            chain_pem,
            key_pem,
            info,
        })
    }
}

/// Where an order's challenge values go and who else gets the issued
/// certificate.
pub trait Publish: Sync {
    /// Makes `values` answered at `_acme-challenge.<zone>`, all of them
    /// before the CA is told to look.
    fn publish(&self, values: &[String]) -> impl Future<Output = Result<(), AcmeError>> + Send;
    /// Takes back every value published, whatever the order's outcome.
    fn withdraw(&self) -> impl Future<Output = ()> + Send;
    /// Hands on a certificate served and saved here; retried while it fails.
    fn share(&self, issued: &Issued) -> impl Future<Output = Result<(), AcmeError>> + Send;
}

/// One edge: its own DNS answers the values, and nobody else needs the
/// certificate.
impl Publish for Challenges {
    async fn publish(&self, values: &[String]) -> Result<(), AcmeError> {
        for value in values {
            self.add(value);
        }
        Ok(())
    }

    async fn withdraw(&self) {
        for value in self.values().iter() {
            self.remove(value);
        }
    }

    async fn share(&self, _: &Issued) -> Result<(), AcmeError> {
        Ok(())
    }
}

/// Issued and served, not yet saved to disk (`saved` false) or not yet
/// shared.
struct Undelivered {
    issued: Issued,
    saved: bool,
}

/// Keeps `store` holding a valid certificate for `domain` and `*.domain`
/// until `stop` turns true.
pub async fn keep_renewed(
    settings: AcmeSettings,
    domain: String,
    store: Arc<CertStore>,
    challenges: Challenges,
    renewal: Renewal,
    stop: watch::Receiver<bool>,
) {
    renew(&settings, &domain, &store, &challenges, &renewal, stop).await
}

/// The renewal loop: orders when the certificate `store` serves is due
/// (or missing, or from another directory), publishing the challenges
/// and handing the certificate on through `board`; returns when `stop`
/// turns true.
pub async fn renew(
    settings: &AcmeSettings,
    domain: &str,
    store: &CertStore,
    board: &impl Publish,
    renewal: &Renewal,
    mut stop: watch::Receiver<bool>,
) {
    // A certificate from another directory (Let's Encrypt's staging, say)
    // serves until its replacement comes, which is ordered at once.
    let mut renew_first = store.info().is_some() && !saved_for(settings);
    if renew_first {
        info!(
            directory = settings.directory,
            "the saved certificate is from another ACME directory; ordering one from this one"
        );
    }
    let mut failures = 0u32;
    let mut retry_at: Option<OffsetDateTime> = None;
    let mut undelivered: Option<Undelivered> = None;
    let mut announced = None;
    loop {
        let now = OffsetDateTime::now_utc();
        let next = match (retry_at, store.info()) {
            (Some(at), _) => at,
            (None, Some(info)) if !renew_first => renewal_due(&info, settings.renew_before),
            _ => now,
        };
        renewal.update(|s| s.next_attempt_at = Some(next));
        if next > now {
            if announced != Some(next) {
                info!(at = %next, "next certificate renewal");
                announced = Some(next);
            }
            let wait = Duration::try_from(next - now).unwrap_or(Duration::ZERO);
            tokio::select! {
                _ = tokio::time::sleep(wait.min(MAX_SLEEP)) => continue,
                _ = renewal.requested() => info!("certificate renewal requested"),
                _ = stop.wait_for(|s| *s) => return,
            }
        }
        // A request made before this point is served by this attempt.
        renewal.take_request();
        renew_first = false;

        let outcome = match undelivered.take() {
            // Issued but not saved or shared: do that, do not order again.
            Some(pending) => deliver(settings, board, pending, &mut undelivered).await,
            None => {
                let limit = settings.attempt_timeout;
                let attempt = tokio::time::timeout(limit, obtain(settings, domain, board));
                let obtained = tokio::select! {
                    obtained = attempt => obtained.unwrap_or(Err(AcmeError::Timeout(limit.as_secs()))),
                    _ = stop.wait_for(|s| *s) => return,
                };
                // Whatever happened, no challenge value outlives its attempt.
                board.withdraw().await;
                match obtained.and_then(|(chain_pem, key_pem)| {
                    let issued = Issued::from_pem(chain_pem, key_pem)?;
                    install(store, &issued)?;
                    Ok(issued)
                }) {
                    Err(err) => Err(err),
                    Ok(issued) => {
                        let pending = Undelivered {
                            issued,
                            saved: false,
                        };
                        deliver(settings, board, pending, &mut undelivered).await
                    }
                }
            }
        };
        renewal.record(outcome.as_ref().map(|_| ()).map_err(|e| e.to_string()));
        match outcome {
            Ok(info) => {
                failures = 0;
                retry_at = None;
                info!(%info, renew_at = %renewal_due(&info, settings.renew_before), "new certificate");
            }
            Err(err) => {
                failures = failures.saturating_add(1);
                let retry = backoff(settings, failures);
                retry_at = Some(OffsetDateTime::now_utc() + retry);
                match (store.info(), &undelivered) {
                    (Some(current), Some(pending)) if !pending.saved => warn!(
                        %err, retry_in_secs = retry.as_secs(),
                        "serving the new certificate ({current}), but saving it failed; saving again later"
                    ),
                    (Some(current), Some(_)) => warn!(
                        %err, retry_in_secs = retry.as_secs(),
                        "serving the new certificate ({current}), but handing it on failed; trying again later"
                    ),
                    (Some(current), None) => warn!(
                        %err, retry_in_secs = retry.as_secs(),
                        "certificate renewal failed; still serving {current}"
                    ),
                    (None, _) => warn!(
                        %err, retry_in_secs = retry.as_secs(),
                        "no certificate yet: HTTPS and agents cannot connect until one is issued"
                    ),
                }
            }
        }
    }
}

/// Saves `pending` (unless it is) and shares it; what failed stays in
/// `undelivered`.
async fn deliver(
    settings: &AcmeSettings,
    board: &impl Publish,
    mut pending: Undelivered,
    undelivered: &mut Option<Undelivered>,
) -> Result<CertInfo, AcmeError> {
    if !pending.saved {
        if let Err(err) = save(settings, &pending.issued) {
            *undelivered = Some(pending);
            return Err(err);
        }
        pending.saved = true;
    }
    match board.share(&pending.issued).await {
        Ok(()) => Ok(pending.issued.info),
        Err(err) => {
            *undelivered = Some(pending);
            Err(err)
        }
    }
}

/// Checks the chain and key (rustls refuses a chain it cannot serve, so a
/// bad one never replaces a good one) and serves them.
pub fn install(store: &CertStore, issued: &Issued) -> Result<CertInfo, AcmeError> {
    Ok(store.install(&material_from_pem(&issued.chain_pem, &issued.key_pem)?)?)
}

/// The certificate on disk, if the configured directory issued it and it
/// reads.
pub fn saved(settings: &AcmeSettings) -> Option<Issued> {
    if !saved_for(settings) {
        return None;
    }
    let read = |name| {
        state_files::read_optional(&settings.dir.join(name))
            .ok()
            .flatten()
    };
    Issued::from_pem(read(CERT_FILE)?, read(KEY_FILE)?).ok()
}

/// Which directory issued the saved certificate.
#[derive(Serialize, Deserialize)]
struct SavedCert {
    directory: String,
}

/// Saves key and chain side by side: both are written in full under new
/// names first, then renamed, so a failed write leaves the old pair whole.
pub fn save(settings: &AcmeSettings, issued: &Issued) -> Result<(), AcmeError> {
    let dir = &settings.dir;
    let (key_new, cert_new) = (dir.join("key.pem.new"), dir.join("cert.pem.new"));
    state_files::write_private(&key_new, &issued.key_pem)?;
    state_files::write_private(&cert_new, &issued.chain_pem)?;
    state_files::rename(&key_new, &dir.join(KEY_FILE))?;
    state_files::rename(&cert_new, &dir.join(CERT_FILE))?;
    let meta = serde_json::to_string(&SavedCert {
        directory: settings.directory.clone(),
    })
    .map_err(|e| AcmeError::Order(e.to_string()))?;
    state_files::write_private(&dir.join(CERT_META_FILE), &meta)?;
    Ok(())
}

/// Whether the saved certificate came from the configured directory.
pub fn saved_for(settings: &AcmeSettings) -> bool {
    state_files::read_optional(&settings.dir.join(CERT_META_FILE))
        .ok()
        .flatten()
        .and_then(|text| serde_json::from_str::<SavedCert>(&text).ok())
        .is_some_and(|saved| saved.directory == settings.directory)
}

fn material_from_pem(chain_pem: &str, key_pem: &str) -> Result<TlsMaterial, AcmeError> {
    let certs = CertificateDer::pem_slice_iter(chain_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| AcmeError::Order(format!("the issued chain does not parse: {e}")))?;
    if certs.is_empty() {
        return Err(AcmeError::Order("the CA sent an empty chain".into()));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
        .map_err(|e| AcmeError::Order(format!("the new key does not parse: {e}")))?;
    Ok(TlsMaterial { certs, key })
}

/// The account file: credentials and the directory they belong to.
#[derive(Serialize, Deserialize)]
struct SavedAccount {
    directory: String,
    credentials: AccountCredentials,
}

/// One order for `domain` and `*.domain`: returns (chain PEM, key PEM).
async fn obtain(
    settings: &AcmeSettings,
    domain: &str,
    board: &impl Publish,
) -> Result<(String, String), AcmeError> {
    let account = account(settings).await?;
    let identifiers = [
        Identifier::Dns(domain.to_owned()),
        Identifier::Dns(format!("*.{domain}")),
    ];
    let mut order = account.new_order(&NewOrder::new(&identifiers)).await?;
    info!(
        order = order.url(),
        "ordering a certificate for {domain} and *.{domain}"
    );
    // Both authorizations validate at _acme-challenge.<domain>. Every value
    // is published before the CA is told to look: a CA's resolver that
    // cached the TXT set with one value would fail the other.
    let mut values = Vec::new();
    let mut authorizations = order.authorizations();
    while let Some(authz) = authorizations.next().await {
        let mut authz = authz?;
        match authz.status {
            AuthorizationStatus::Pending => {}
            // Validated recently for this account: the CA reuses it.
            AuthorizationStatus::Valid => continue,
            other => {
                return Err(AcmeError::Order(format!(
                    "an authorization is {other:?}, not pending"
                )));
            }
        }
        let challenge = authz.challenge(ChallengeType::Dns01).ok_or_else(|| {
            AcmeError::Order("the CA offers no dns-01 challenge for the zone".into())
        })?;
        values.push(challenge.key_authorization().dns_value());
    }
    board.publish(&values).await?;
    // The second pass reads the authorizations fetched by the first.
    let mut authorizations = order.authorizations();
    while let Some(authz) = authorizations.next().await {
        let mut authz = authz?;
        if authz.status != AuthorizationStatus::Pending {
            continue;
        }
        if let Some(mut challenge) = authz.challenge(ChallengeType::Dns01) {
            challenge.set_ready().await?;
        }
    }
    info!(pending = values.len(), "challenges published");
    let retries = RetryPolicy::new()
        .initial_delay(Duration::from_millis(250))
        .timeout(settings.attempt_timeout);
    let status = order.poll_ready(&retries).await?;
    if status != OrderStatus::Ready {
        let why = order
            .state()
            .error
            .as_ref()
            .map(|p| p.to_string())
            .unwrap_or_else(|| format!("{status:?}"));
        return Err(AcmeError::Order(format!(
            "the order did not become ready: {why}"
        )));
    }
    let key_pem = order.finalize().await?;
    let chain_pem = order.poll_certificate(&retries).await?;
    Ok((chain_pem, key_pem))
}

/// The saved account for the configured directory, or a new one.
async fn account(settings: &AcmeSettings) -> Result<Account, AcmeError> {
    let path = settings.dir.join(ACCOUNT_FILE);
    if let Some(text) = state_files::read_optional(&path)? {
        match serde_json::from_str::<SavedAccount>(&text) {
            Ok(saved) if saved.directory == settings.directory => {
                return Ok(builder(settings)?
                    .from_credentials(saved.credentials)
                    .await?);
            }
            Ok(saved) => info!(
                old = saved.directory,
                "the ACME directory changed; making a new account"
            ),
            Err(err) => {
                return Err(FileError::Corrupt {
                    path,
                    why: err.to_string(),
                }
                .into());
            }
        }
    }
    let contact: Vec<&str> = settings.contact.iter().map(String::as_str).collect();
    let (account, credentials) = builder(settings)?
        .create(
            &NewAccount {
                contact: &contact,
                terms_of_service_agreed: true,
                only_return_existing: false,
            },
            settings.directory.clone(),
            None,
        )
        .await?;
    let saved = SavedAccount {
        directory: settings.directory.clone(),
        credentials,
    };
    let text = serde_json::to_string_pretty(&saved)
        .map_err(|e| AcmeError::Order(format!("cannot save the account: {e}")))?;
    state_files::write_private(&path, &text)?;
    info!(id = account.id(), "made an ACME account");
    Ok(account)
}

/// An ACME HTTP client trusting the system's roots and `ca_file`.
fn builder(settings: &AcmeSettings) -> Result<instant_acme::AccountBuilder, AcmeError> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    if let Some(path) = &settings.ca_file {
        add_roots(&mut roots, path)?;
    }
    let tls = rustls::ClientConfig::builder_with_provider(crate::certs::tls::provider())
        .with_safe_default_protocol_versions()
        .map_err(TlsError::from)?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_only()
        .enable_http1()
        .enable_http2()
        .build();
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build(connector);
    Ok(Account::builder_with_http(Box::new(client)))
}

fn add_roots(roots: &mut rustls::RootCertStore, path: &Path) -> Result<(), AcmeError> {
    let root_err = |why: String| AcmeError::Root {
        path: path.to_owned(),
        why,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| root_err(e.to_string()))?;
    if certs.is_empty() {
        return Err(root_err("holds no certificate".into()));
    }
    for cert in certs {
        roots.add(cert).map_err(|e| root_err(e.to_string()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(days: i64) -> CertInfo {
        let not_before = OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap();
        CertInfo {
            serial: "01".into(),
            not_before,
            not_after: not_before + time::Duration::days(days),
            names: vec![],
        }
    }

    #[test]
    fn renewal_is_due_with_a_third_of_the_lifetime_left() {
        let cert = info(90);
        assert_eq!(
            renewal_due(&cert, None),
            cert.not_before + time::Duration::days(60)
        );
        let days = |d: u64| Some(Duration::from_secs(d * 86_400));
        assert_eq!(
            renewal_due(&cert, days(10)),
            cert.not_after - time::Duration::days(10)
        );
        // Longer than the lifetime: due at once.
        assert_eq!(renewal_due(&cert, days(1000)), cert.not_before);
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let settings = AcmeSettings {
            directory: String::new(),
            contact: vec![],
            ca_file: None,
            dir: PathBuf::new(),
            renew_before: None,
            retry_min: Duration::from_secs(60),
            retry_max: Duration::from_secs(3600),
            attempt_timeout: Duration::from_secs(300),
        };
        let secs: Vec<u64> = (1..=8).map(|f| backoff(&settings, f).as_secs()).collect();
        assert_eq!(secs, [60, 120, 240, 480, 960, 1920, 3600, 3600]);
        assert_eq!(backoff(&settings, 200).as_secs(), 3600);
    }
}
