//! The zone's certificate in a cluster: one edge at a time orders it,
//! every edge serves it, and every edge's DNS answers the order's
//! challenges (a CA asks whichever of the zone's name servers it likes).
//!
//! Keys, under `calvin/acme/`:
//! - `orderer`: the edge that orders (its advertised address), on its
//!   lease, created only if absent: one edge orders at a time. When it
//!   dies its lease takes the key, another edge creates it and takes over
//!   the renewals. (A key rather than etcd's lock API: it names its
//!   holder, and no call stays blocked across a change of lease.)
//! - `challenges/<value>`: the TXT values of the order under way, on the
//!   orderer's lease, deleted when the attempt ends.
//! - `seen/<edge>`: the values that edge's DNS answers now (JSON), on its
//!   lease. The orderer tells the CA to look once every live edge answers
//!   its values, or after [`SPREAD_WAIT`].
//! - `certificate`: the chain and **its private key** (PEM, in JSON with
//!   the directory that issued them), on no lease. Whoever reads etcd can
//!   impersonate the zone: etcd must be reachable by the edges alone
//!   (client certificates or etcd's authentication, no other tenant).
//!
//! Every edge follows these keys with one watch: the challenge values into
//! its DNS ([`Challenges`]), a newer certificate into its [`CertStore`]
//! (new handshakes get it) and onto its disk (a restart serves it without
//! etcd). It reads them before it contends for `orderer`, so an edge that
//! joins a cluster holding a valid certificate orders none.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{
    Compare, CompareOp, EventType, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse, WatchOptions,
};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use super::store::{Store, timed};
use crate::certs::acme::{self, AcmeError, AcmeSettings, Issued, Publish, Renewal};
use crate::certs::cert_store::{CertInfo, CertStore};
use crate::certs::dns::Challenges;

pub const ACME: &str = "calvin/acme/";
pub const ORDERER: &str = "calvin/acme/orderer";
pub const CHALLENGES: &str = "calvin/acme/challenges/";
pub const SEEN: &str = "calvin/acme/seen/";
pub const CERTIFICATE: &str = "calvin/acme/certificate";

/// How long the orderer waits for every edge's DNS to answer its values
/// before it asks the CA anyway (an edge cut from etcd must not stop
/// renewals: the CA may well ask another name server).
pub const SPREAD_WAIT: Duration = Duration::from_secs(10);
/// The first wait before reading etcd again after a failure, and the most.
const RETRY_MIN: Duration = Duration::from_millis(250);
const RETRY_MAX: Duration = Duration::from_secs(2);

/// `certificate`.
#[derive(Serialize, Deserialize)]
struct CertificateRecord {
    directory: String,
    chain: String,
    key: String,
}

/// What this edge knows of `calvin/acme/` (but the certificate).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct View {
    /// The etcd revision it has caught up with; 0 before the first read.
    revision: i64,
    orderer: Option<String>,
    challenges: BTreeSet<String>,
    /// Per live edge, the values its DNS answers.
    seen: BTreeMap<String, BTreeSet<String>>,
}

/// Applies a put (`Some(value)`) or a delete of `key`.
fn apply(view: &mut View, key: &str, value: Option<&[u8]>) {
    if key == ORDERER {
        view.orderer = value.map(|v| String::from_utf8_lossy(v).into_owned());
    } else if let Some(challenge) = key.strip_prefix(CHALLENGES) {
        match value {
            Some(_) => view.challenges.insert(challenge.to_owned()),
            None => view.challenges.remove(challenge),
        };
    } else if let Some(edge) = key.strip_prefix(SEEN) {
        match value.map(serde_json::from_slice::<BTreeSet<String>>) {
            Some(Ok(values)) => {
                view.seen.insert(edge.to_owned(), values);
            }
            // Gone, or another version's: not waited for.
            _ => {
                view.seen.remove(edge);
            }
        }
    }
}

/// The live edges whose DNS does not answer all of `values` yet.
fn lacking(view: &View, values: &[String]) -> Vec<String> {
    view.seen
        .iter()
        .filter(|(_, seen)| !values.iter().all(|v| seen.contains(v)))
        .map(|(edge, _)| edge.clone())
        .collect()
}

/// Whether `candidate` replaces `current`: it is for the zone and valid,
/// and `current` is missing, expired, from another directory
/// (`current_here` false) or issued before it.
fn replaces(
    candidate: &CertInfo,
    current: Option<&CertInfo>,
    current_here: bool,
    domain: &str,
    now: OffsetDateTime,
) -> bool {
    if !candidate.covers_zone(domain) || candidate.not_after <= now {
        return false;
    }
    match current {
        None => true,
        Some(current) if current.serial == candidate.serial => false,
        Some(current) => {
            !current_here || current.not_after <= now || candidate.not_before >= current.not_before
        }
    }
}

/// Keeps `certs` holding the cluster's certificate for `domain` until
/// `stop`: follows `calvin/acme/`, and orders while this edge holds
/// `orderer`.
pub async fn keep(
    settings: AcmeSettings,
    domain: String,
    store: Arc<Store>,
    certs: Arc<CertStore>,
    challenges: Challenges,
    renewal: Renewal,
    stop: watch::Receiver<bool>,
) {
    let shared = Shared {
        settings,
        domain,
        store,
        certs,
        challenges,
        view: watch::channel(View::default()).0,
    };
    tokio::join!(shared.follow(stop.clone()), shared.order(&renewal, stop));
}

struct Shared {
    settings: AcmeSettings,
    domain: String,
    store: Arc<Store>,
    certs: Arc<CertStore>,
    challenges: Challenges,
    view: watch::Sender<View>,
}

/// What a contention for `orderer` found.
enum Claim {
    /// This edge holds it since this revision.
    Mine(i64),
    /// That edge does.
    Held(String),
}

impl Shared {
    /// Follows `calvin/acme/` until `stop`, reading it again (with a
    /// backoff) whenever the watch breaks.
    async fn follow(&self, mut stop: watch::Receiver<bool>) {
        let mut wait = RETRY_MIN;
        loop {
            let err = tokio::select! {
                err = self.follow_once(&mut wait) => err,
                _ = stop.wait_for(|s| *s) => return,
            };
            debug!(%err, "following calvin/acme/ in the cluster's store; trying again");
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            wait = (wait * 2).min(RETRY_MAX);
        }
    }

    /// One read and the watch after it; returns why it ended.
    async fn follow_once(&self, wait: &mut Duration) -> String {
        let mut client = self.store.client();
        let read = client.get(ACME, Some(GetOptions::new().with_prefix()));
        let got = match timed("reading calvin/acme/", read).await {
            Ok(got) => got,
            Err(err) => return err,
        };
        *wait = RETRY_MIN;
        let revision = got.header().map_or(0, |h| h.revision());
        let mut view = View {
            revision,
            ..View::default()
        };
        for kv in got.kvs() {
            let key = String::from_utf8_lossy(kv.key());
            if key == CERTIFICATE {
                self.consider(kv.value());
            } else {
                apply(&mut view, &key, Some(kv.value()));
            }
        }
        self.show(view);
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(revision + 1);
        let mut stream =
            match timed("watching calvin/acme/", client.watch(ACME, Some(options))).await {
                Ok(stream) => stream,
                Err(err) => return err,
            };
        let mut up = self.store.up();
        let mut acked = None;
        loop {
            self.ack(&mut acked).await;
            tokio::select! {
                answer = stream.message() => {
                    let answer = match answer {
                        Ok(Some(answer)) => answer,
                        Ok(None) => return "the watch ended".into(),
                        Err(err) => return err.to_string(),
                    };
                    if answer.canceled() {
                        return format!("watch canceled: {}", answer.cancel_reason());
                    }
                    let mut view = self.view.borrow().clone();
                    for event in answer.events() {
                        let Some(kv) = event.kv() else { continue };
                        let key = String::from_utf8_lossy(kv.key());
                        let value = (event.event_type() == EventType::Put).then(|| kv.value());
                        view.revision = view.revision.max(kv.mod_revision());
                        match value {
                            Some(value) if key == CERTIFICATE => self.consider(value),
                            _ => apply(&mut view, &key, value),
                        }
                    }
                    if let Some(header) = answer.header() {
                        view.revision = view.revision.max(header.revision());
                    }
                    self.show(view);
                }
                // A new lease: `seen/<me>` went with the old one.
                changed = up.changed() => {
                    if changed.is_err() {
                        return "the store is gone".into();
                    }
                }
            }
        }
    }

    /// Makes `view` current: its values answered by this edge's DNS first,
    /// then told to whoever waits on the view.
    fn show(&self, view: View) {
        if self.view.borrow().challenges != view.challenges {
            self.challenges.replace(view.challenges.iter().cloned());
        }
        self.view.send_replace(view);
    }

    /// Puts `seen/<me>` when what this edge's DNS answers, or its lease,
    /// changed since `acked`.
    async fn ack(&self, acked: &mut Option<(i64, BTreeSet<String>)>) {
        let lease = self.store.lease();
        let values = self.view.borrow().challenges.clone();
        if lease == 0 || acked.as_ref() == Some(&(lease, values.clone())) {
            return;
        }
        let mut client = self.store.client();
        let put = client.put(
            format!("{SEEN}{}", self.store.me()),
            serde_json::to_vec(&values).unwrap_or_default(),
            Some(PutOptions::new().with_lease(lease)),
        );
        match timed("telling what this edge's DNS answers", put).await {
            Ok(_) => *acked = Some((lease, values)),
            Err(err) => debug!(%err, "telling the cluster's store; again at the next change"),
        }
    }

    /// Serves (and saves) the store's certificate if it is newer than the
    /// one served.
    fn consider(&self, value: &[u8]) {
        let record = match serde_json::from_slice::<CertificateRecord>(value) {
            Ok(record) => record,
            Err(err) => {
                warn!(%err, "the cluster's certificate does not read; ignored");
                return;
            }
        };
        if record.directory != self.settings.directory {
            info!(
                directory = record.directory,
                "the cluster's certificate is from another ACME directory; not served"
            );
            return;
        }
        let issued = match Issued::from_pem(record.chain, record.key) {
            Ok(issued) => issued,
            Err(err) => {
                warn!(%err, "the cluster's certificate does not parse; ignored");
                return;
            }
        };
        let here = acme::saved_for(&self.settings);
        let now = OffsetDateTime::now_utc();
        let current = self.certs.info();
        if !replaces(&issued.info, current.as_ref(), here, &self.domain, now) {
            return;
        }
        match acme::install(&self.certs, &issued) {
            Ok(info) => info!(%info, "serving the cluster's certificate"),
            Err(err) => {
                warn!(%err, "the cluster's certificate cannot be served; keeping the current one");
                return;
            }
        }
        if let Err(err) = acme::save(&self.settings, &issued) {
            warn!(%err, "cannot save the cluster's certificate here; it serves, but a restart without etcd would not find it");
        }
    }

    /// Contends for `orderer` whenever it is free, and runs the renewals
    /// while this edge holds it; until `stop`.
    async fn order(&self, renewal: &Renewal, mut stop: watch::Receiver<bool>) {
        let mut view = self.view.subscribe();
        let mut up = self.store.up();
        let me = self.store.me().to_owned();
        loop {
            // The store's certificate first (never order while a valid
            // one is there), and a lease to hold the role on.
            let ready = async {
                let _ = view.wait_for(|v| v.revision > 0).await;
                let _ = up.wait_for(|_| self.store.lease() != 0).await;
            };
            tokio::select! {
                () = ready => {}
                () = decline(renewal, None) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            let lease = self.store.lease();
            match self.claim(lease, &me).await {
                Err(err) => {
                    warn!(%err, "cannot contend to order the cluster's certificate; trying again");
                    tokio::select! {
                        () = tokio::time::sleep(RETRY_MAX) => {}
                        _ = stop.wait_for(|s| *s) => return,
                    }
                }
                Ok(Claim::Held(holder)) => {
                    debug!(%holder, "another edge orders the cluster's certificate");
                    // Until its key goes (or this edge's lease does); the
                    // pause spares etcd while this edge's view lags.
                    let freed = async {
                        tokio::time::sleep(RETRY_MIN).await;
                        tokio::select! {
                            _ = view.wait_for(|v| v.orderer.as_deref() != Some(holder.as_str())) => {}
                            _ = up.wait_for(|_| self.store.lease() != lease) => {}
                        }
                    };
                    tokio::select! {
                        () = freed => {}
                        () = decline(renewal, Some(&holder)) => {}
                        _ = stop.wait_for(|s| *s) => return,
                    }
                }
                Ok(Claim::Mine(since)) => {
                    info!(lease, "this edge orders the cluster's certificate");
                    let board = Board {
                        shared: self,
                        lease,
                        me: &me,
                        published: Mutex::default(),
                    };
                    self.hand_on_current(&board).await;
                    let lost = async {
                        tokio::select! {
                            _ = up.wait_for(|_| self.store.lease() != lease) => "its lease ended",
                            _ = view.wait_for(|v| v.revision >= since && v.orderer.as_deref() != Some(me.as_str())) => "the store names another edge",
                        }
                    };
                    let renewals = acme::renew(
                        &self.settings,
                        &self.domain,
                        &self.certs,
                        &board,
                        renewal,
                        stop.clone(),
                    );
                    tokio::select! {
                        () = renewals => return,
                        why = lost => warn!(why, "this edge no longer orders the cluster's certificate"),
                    }
                    board.withdraw().await;
                }
            }
        }
    }

    /// Creates `orderer` on `lease` unless another edge holds it.
    async fn claim(&self, lease: i64, me: &str) -> Result<Claim, String> {
        let txn = Txn::new()
            .when([Compare::create_revision(ORDERER, CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                ORDERER,
                me,
                Some(PutOptions::new().with_lease(lease)),
            )])
            .or_else([TxnOp::get(ORDERER, None)]);
        let done = timed(
            "contending to order the certificate",
            self.store.client().txn(txn),
        )
        .await?;
        if done.succeeded() {
            return Ok(Claim::Mine(done.header().map_or(0, |h| h.revision())));
        }
        match done.op_responses().as_slice() {
            [TxnOpResponse::Get(got)] => match got.kvs().first() {
                Some(kv) if kv.value() == me.as_bytes() && kv.lease() == lease => {
                    Ok(Claim::Mine(kv.mod_revision()))
                }
                Some(kv) => Ok(Claim::Held(
                    String::from_utf8_lossy(kv.value()).into_owned(),
                )),
                None => Err("the key went during the transaction".into()),
            },
            _ => Err("an odd answer".into()),
        }
    }

    /// Hands the certificate this edge serves to the store if the store
    /// has none as good (an edge that ran alone before the cluster, or a
    /// store that lost it), so that every edge serves it.
    async fn hand_on_current(&self, board: &Board<'_>) {
        let Some(mine) = acme::saved(&self.settings) else {
            return;
        };
        if self.certs.info().map(|i| i.serial) != Some(mine.info.serial.clone()) {
            return;
        }
        let read = timed(
            "reading the cluster's certificate",
            self.store.client().get(CERTIFICATE, None),
        )
        .await;
        let stored = match read {
            Ok(got) => got.kvs().first().map(|kv| {
                serde_json::from_slice::<CertificateRecord>(kv.value())
                    .ok()
                    .and_then(|r| {
                        let here = r.directory == self.settings.directory;
                        Some((Issued::from_pem(r.chain, r.key).ok()?.info, here))
                    })
            }),
            Err(err) => {
                debug!(%err, "cannot compare the served certificate with the cluster's");
                return;
            }
        };
        let (stored, here) = match stored {
            None => (None, true),
            // Unreadable: replaced.
            Some(None) => (None, true),
            Some(Some((info, here))) => (Some(info), here),
        };
        let now = OffsetDateTime::now_utc();
        if replaces(&mine.info, stored.as_ref(), here, &self.domain, now) {
            match board.share(&mine).await {
                Ok(()) => {
                    info!(info = %mine.info, "handed the certificate this edge serves to the cluster")
                }
                Err(err) => warn!(%err, "cannot hand the served certificate to the cluster"),
            }
        }
    }
}

/// Answers the renewal requests (SIGHUP) of an edge that does not order.
async fn decline(renewal: &Renewal, orderer: Option<&str>) {
    loop {
        renewal.requested().await;
        renewal.take_request();
        info!(
            orderer = orderer.unwrap_or("none yet"),
            "certificate renewal requested, but another edge of the cluster orders the certificate: ask it"
        );
    }
}

/// The orderer's side of an order: its values and certificate go through
/// the store.
struct Board<'a> {
    shared: &'a Shared,
    lease: i64,
    me: &'a str,
    /// The values put and not deleted yet.
    published: Mutex<Vec<String>>,
}

impl Board<'_> {
    fn published(&self) -> std::sync::MutexGuard<'_, Vec<String>> {
        self.published.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Publish for Board<'_> {
    /// Puts the values on this edge's lease and waits until every live
    /// edge's DNS answers them (or [`SPREAD_WAIT`]).
    async fn publish(&self, values: &[String]) -> Result<(), AcmeError> {
        if values.is_empty() {
            return Ok(());
        }
        let mut client = self.shared.store.client();
        let mut revision = 0;
        for value in values {
            let put = client.put(
                format!("{CHALLENGES}{value}"),
                self.me,
                Some(PutOptions::new().with_lease(self.lease)),
            );
            let done = timed("publishing a challenge", put)
                .await
                .map_err(AcmeError::Store)?;
            self.published().push(value.clone());
            revision = done.header().map_or(revision, |h| h.revision());
        }
        let mut view = self.shared.view.subscribe();
        let spread = view.wait_for(|v| v.revision >= revision && lacking(v, values).is_empty());
        match tokio::time::timeout(SPREAD_WAIT, spread).await {
            Ok(Ok(view)) => info!(
                edges = view.seen.len(),
                "every edge's DNS answers the challenges"
            ),
            _ => warn!(
                lacking = ?lacking(&self.shared.view.borrow(), values),
                "some edges' DNS does not answer the challenges yet; asking the CA anyway"
            ),
        }
        Ok(())
    }

    async fn withdraw(&self) {
        let values = std::mem::take(&mut *self.published());
        let mut client = self.shared.store.client();
        let mut kept = Vec::new();
        for value in values {
            let delete = client.delete(format!("{CHALLENGES}{value}"), None);
            if let Err(err) = timed("withdrawing a challenge", delete).await {
                // Tried again after the next attempt; the lease ends it
                // at the latest.
                debug!(%err, "a challenge stays in the cluster's store for now");
                kept.push(value);
            }
        }
        self.published().extend(kept);
    }

    /// Puts `certificate`, if this edge still orders.
    async fn share(&self, issued: &Issued) -> Result<(), AcmeError> {
        let record = CertificateRecord {
            directory: self.shared.settings.directory.clone(),
            chain: issued.chain_pem.clone(),
            key: issued.key_pem.clone(),
        };
        let txn = Txn::new()
            .when([
                Compare::value(ORDERER, CompareOp::Equal, self.me),
                Compare::lease(ORDERER, CompareOp::Equal, self.lease),
            ])
            .and_then([TxnOp::put(
                CERTIFICATE,
                serde_json::to_vec(&record).unwrap_or_default(),
                None,
            )]);
        let done = timed(
            "handing the certificate to the cluster",
            self.shared.store.client().txn(txn),
        )
        .await
        .map_err(AcmeError::Store)?;
        if done.succeeded() {
            Ok(())
        } else {
            Err(AcmeError::Store(
                "this edge no longer orders the cluster's certificate".into(),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(serial: &str, issued_day: i64, names: &[&str]) -> CertInfo {
        let not_before = OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap()
            + time::Duration::days(issued_day);
        CertInfo {
            serial: serial.into(),
            not_before,
            not_after: not_before + time::Duration::days(90),
            names: names.iter().map(|n| (*n).to_owned()).collect(),
        }
    }

    const ZONE: [&str; 2] = ["p.test", "*.p.test"];

    fn day(d: i64) -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap() + time::Duration::days(d)
    }

    #[test]
    fn a_later_certificate_for_the_zone_replaces_the_served_one() {
        let served = info("01", 0, &ZONE);
        let later = info("02", 30, &ZONE);
        assert!(replaces(&later, None, true, "p.test", day(31)));
        assert!(replaces(&later, Some(&served), true, "p.test", day(31)));
        // The same certificate, or an older one, does not.
        assert!(!replaces(&served, Some(&served), true, "p.test", day(31)));
        assert!(!replaces(&served, Some(&later), true, "p.test", day(31)));
        // An older one does replace one from another directory, or an
        // expired one.
        assert!(replaces(&served, Some(&later), false, "p.test", day(31)));
        let expired = info("03", -200, &ZONE);
        assert!(replaces(&served, Some(&expired), true, "p.test", day(31)));
        // Never one for other names, or expired itself.
        let other = info("04", 40, &["q.test", "*.q.test"]);
        assert!(!replaces(&other, Some(&served), true, "p.test", day(41)));
        assert!(!replaces(&later, None, true, "p.test", day(200)));
    }

    #[test]
    fn the_view_follows_puts_and_deletes() {
        let mut view = View::default();
        apply(&mut view, ORDERER, Some(b"127.0.0.1:7000"));
        apply(
            &mut view,
            "calvin/acme/challenges/abc",
            Some(b"127.0.0.1:7000"),
        );
        apply(
            &mut view,
            "calvin/acme/challenges/def",
            Some(b"127.0.0.1:7000"),
        );
        apply(
            &mut view,
            "calvin/acme/seen/127.0.0.2:7000",
            Some(br#"["abc"]"#),
        );
        apply(
            &mut view,
            "calvin/acme/seen/127.0.0.3:7000",
            Some(b"not json"),
        );
        apply(&mut view, "calvin/acme/other", Some(b"x"));
        assert_eq!(view.orderer.as_deref(), Some("127.0.0.1:7000"));
        assert_eq!(view.challenges.iter().collect::<Vec<_>>(), ["abc", "def"]);
        assert_eq!(view.seen.len(), 1);

        apply(&mut view, "calvin/acme/challenges/abc", None);
        apply(&mut view, ORDERER, None);
        apply(&mut view, "calvin/acme/seen/127.0.0.2:7000", None);
        assert_eq!(view.challenges.iter().collect::<Vec<_>>(), ["def"]);
        assert_eq!(view.orderer, None);
        assert!(view.seen.is_empty());
    }

    #[test]
    fn the_orderer_waits_for_every_edge_that_lacks_a_value() {
        let mut view = View::default();
        let values = ["a".to_owned(), "b".to_owned()];
        // No edge told anything: nobody to wait for.
        assert!(lacking(&view, &values).is_empty());
        apply(
            &mut view,
            "calvin/acme/seen/one",
            Some(br#"["a","b","old"]"#),
        );
        apply(&mut view, "calvin/acme/seen/two", Some(br#"["a"]"#));
        apply(&mut view, "calvin/acme/seen/three", Some(b"[]"));
        assert_eq!(lacking(&view, &values), ["three", "two"]);
        apply(&mut view, "calvin/acme/seen/two", Some(br#"["a","b"]"#));
        // An edge that died (its key went with its lease) is not waited for.
        apply(&mut view, "calvin/acme/seen/three", None);
        assert!(lacking(&view, &values).is_empty());
        assert!(lacking(&view, &[]).is_empty());
    }
}
