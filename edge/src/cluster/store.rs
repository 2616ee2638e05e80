//! What the edges of a cluster share, in etcd (v3, through `etcd-client`).
//!
//! Keys, under `calvin/`:
//! - `routes/<name>`: the edge whose agent serves the name now, its
//!   account and port, attached to that edge's lease: an edge that dies
//!   takes its routes with it within the lease's TTL.
//! - `names/<name>`: the account that owns the name and the end of its
//!   reservation (the name lease), and whether it is live, offline or was
//!   taken down. Claimed in a transaction, so of two agents racing for a
//!   name on two edges exactly one wins, and a name never passes to
//!   another account while it is live or reserved.
//! - `edges/<advertise>`: every live edge (its lease), with its public
//!   addresses.
//!
//! A visitor's request never waits on etcd: each edge follows these keys
//! into its own route table (see [`super::mirror`]). What needs etcd is a
//! claim; while etcd cannot be reached, claims are refused with the reason
//! and what was claimed before keeps being served.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use calvin_proto::{Port, PreviewName, ShareSalt};
use etcd_client::{Client, Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::accounts::AccountId;
use crate::upstream::claims::NameClaims;
pub use crate::upstream::claims::{Claim, NameState, StoreRefusal};

/// The prefix of every key calvin keeps in etcd.
pub const PREFIX: &str = "calvin/";
pub const ROUTES: &str = "calvin/routes/";
pub const NAMES: &str = "calvin/names/";
pub const EDGES: &str = "calvin/edges/";
/// The cluster's share key (64 hex digits): protected previews' tokens
/// are made with it on every edge (see [`crate::share`]).
pub const SHARE_KEY: &str = "calvin/share_key";

/// Time for one etcd request: past it, etcd counts as unreachable.
pub(super) const OP_TIMEOUT: Duration = Duration::from_secs(2);

/// How many times a claim reads and tries again when another edge changed
/// the name in between.
const CLAIM_TRIES: usize = 4;

/// `routes/<name>`. `claim` tells one claim from the next of the same
/// edge, account and port, so that ending an old one cannot end its
/// successor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteRecord {
    pub edge: String,
    pub account: String,
    pub port: Port,
    pub claim: u64,
    /// Unix milliseconds: when the preview ends (made with a time to
    /// live).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ends_ms: Option<u64>,
    /// A protected preview's salt (see [`crate::share`]): every edge
    /// checks its visitors' share tokens with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protect: Option<ShareSalt>,
}

/// `names/<name>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NameRecord {
    pub account: String,
    /// Unix seconds: the reservation's end once the name is not live.
    pub until: u64,
    pub state: NameState,
    /// Unix milliseconds: when the preview ends (made with a time to
    /// live); past it the name reads "ended" on every edge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ends_ms: Option<u64>,
}

/// `edges/<advertise>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EdgeRecord {
    /// The address other edges dial.
    pub advertise: String,
    /// Its public addresses, for the zone's A and AAAA answers.
    pub addresses: Vec<IpAddr>,
}

/// This edge's side of the store.
pub struct Store {
    client: Client,
    me: EdgeRecord,
    ttl: Duration,
    name_lease: Duration,
    /// The lease this edge's keys live on; 0 while it has none (etcd not
    /// reached since the last one ended).
    lease: AtomicI64,
    /// Turns true once the edge has a lease, false when it loses it.
    up: watch::Sender<bool>,
    /// The routes this edge put, to put again on a new lease.
    owned: Mutex<HashMap<PreviewName, (Claim, AccountId)>>,
    /// Ends that etcd did not take yet (it was unreachable).
    unended: Mutex<HashMap<PreviewName, (Claim, AccountId, NameState)>>,
    next_claim: std::sync::atomic::AtomicU64,
}

fn key(prefix: &str, name: &PreviewName) -> String {
    format!("{prefix}{name}")
}

/// `op`, failing with what it was (`what`) past [`OP_TIMEOUT`] or on
/// etcd's error.
pub(super) async fn timed<T>(
    what: &str,
    op: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, String> {
    match tokio::time::timeout(OP_TIMEOUT, op).await {
        Ok(Ok(done)) => Ok(done),
        Ok(Err(err)) => Err(format!("{what}: {err}")),
        Err(_) => Err(format!(
            "{what}: no answer within {} s",
            OP_TIMEOUT.as_secs()
        )),
    }
}

impl Store {
    /// A store on `endpoints` for the edge `me`; nothing is asked of etcd
    /// until [`Self::keep`] runs.
    pub async fn connect(
        endpoints: &[String],
        me: EdgeRecord,
        ttl: Duration,
        name_lease: Duration,
    ) -> Result<Self, etcd_client::Error> {
        let options = etcd_client::ConnectOptions::new()
            .with_connect_timeout(OP_TIMEOUT)
            .with_keep_alive(Duration::from_secs(2), OP_TIMEOUT);
        let client = Client::connect(endpoints, Some(options)).await?;
        Ok(Self {
            client,
            me,
            ttl,
            name_lease,
            lease: AtomicI64::new(0),
            up: watch::channel(false).0,
            owned: Mutex::default(),
            unended: Mutex::default(),
            next_claim: std::sync::atomic::AtomicU64::new(rand::random::<u32>().into()),
        })
    }

    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// The lease this edge's keys live on now; 0 while it has none.
    pub fn lease(&self) -> i64 {
        self.lease.load(Ordering::Acquire)
    }

    /// This edge's advertised address.
    pub fn me(&self) -> &str {
        &self.me.advertise
    }

    /// Whether the edge holds a lease now (etcd reached).
    pub fn up(&self) -> watch::Receiver<bool> {
        self.up.subscribe()
    }

    /// The cluster's share key: the one in the store, or `mine` if there
    /// is none yet, put there in a create-if-absent transaction (of two
    /// edges starting at once, one puts its key and both read it).
    pub async fn share_key(&self, mine: &[u8; 32]) -> Result<[u8; 32], String> {
        let hex: String = mine.iter().map(|b| format!("{b:02x}")).collect();
        let txn = Txn::new()
            .when([Compare::create_revision(SHARE_KEY, CompareOp::Equal, 0)])
            .and_then([TxnOp::put(SHARE_KEY, hex, None)])
            .or_else([TxnOp::get(SHARE_KEY, None)]);
        let mut client = self.client.clone();
        let answer = timed("reading the share key", client.txn(txn)).await?;
        if answer.succeeded() {
            return Ok(*mine);
        }
        let value = match answer.op_responses().as_slice() {
            [TxnOpResponse::Get(got)] => got.kvs().first().map(|kv| kv.value().to_vec()),
            _ => None,
        };
        let text = value
            .and_then(|v| String::from_utf8(v).ok())
            .ok_or_else(|| format!("{SHARE_KEY} is missing or not text"))?;
        crate::state_files::decode_hex32(std::path::Path::new(SHARE_KEY), text.trim())
            .map_err(|e| e.to_string())
    }

    /// The revision of this edge's claim of `name`, if it holds one.
    pub fn claimed_at(&self, name: &PreviewName) -> Option<i64> {
        self.owned_lock().get(name).map(|(claim, _)| claim.1)
    }

    /// Another edge's claim replaced this edge's of `name` (its agent
    /// moved): this edge no longer puts it again or renews it.
    pub fn forget(&self, name: &PreviewName) {
        self.owned_lock().remove(name);
    }

    fn owned_lock(&self) -> std::sync::MutexGuard<'_, HashMap<PreviewName, (Claim, AccountId)>> {
        self.owned.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn unended_lock(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<PreviewName, (Claim, AccountId, NameState)>> {
        self.unended.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn write_end(
        &self,
        name: &PreviewName,
        claim: &Claim,
        account: &AccountId,
        state: NameState,
    ) -> Result<(), String> {
        let (names_key, routes_key) = (key(NAMES, name), key(ROUTES, name));
        let record = NameRecord {
            account: account.to_string(),
            until: crate::unix_now() + self.name_lease.as_secs(),
            state,
            ends_ms: claim_ends_ms(claim),
        };
        let txn = Txn::new()
            .when([Compare::value(
                routes_key.clone(),
                CompareOp::Equal,
                claim.0.clone(),
            )])
            .and_then([
                TxnOp::delete(routes_key.clone(), None),
                TxnOp::put(
                    names_key.clone(),
                    serde_json::to_vec(&record).unwrap_or_default(),
                    None,
                ),
            ]);
        let mut client = self.client.clone();
        let ended = timed("ending the route", client.txn(txn)).await?;
        if ended.succeeded() {
            return Ok(());
        }
        // No route of this claim: another claim replaced it (nothing to
        // do), or none is there (its lease ran out before this end came):
        // the name is still recorded taken down or offline, if it is
        // still this account's and unrouted.
        let read = timed(
            "reading the name",
            client.get(names_key.clone(), None::<GetOptions>),
        )
        .await?;
        let Some(kv) = read.kvs().first() else {
            return Ok(());
        };
        let ours = serde_json::from_slice::<NameRecord>(kv.value())
            .is_ok_and(|r| r.account == account.as_str() && r.state == NameState::Live);
        if !ours {
            return Ok(());
        }
        let txn = Txn::new()
            .when([
                Compare::mod_revision(names_key.clone(), CompareOp::Equal, kv.mod_revision()),
                Compare::create_revision(routes_key, CompareOp::Equal, 0),
            ])
            .and_then([TxnOp::put(
                names_key,
                serde_json::to_vec(&record).unwrap_or_default(),
                None,
            )]);
        timed("recording the end", client.txn(txn))
            .await
            .map(|_| ())
    }

    /// Puts `name`'s route of `claim` on `lease`, unless another claim
    /// replaced it.
    async fn put_route(
        &self,
        client: &mut Client,
        name: &PreviewName,
        claim: &Claim,
        lease: i64,
    ) -> Result<(), String> {
        let routes_key = key(ROUTES, name);
        let put = || {
            TxnOp::put(
                routes_key.clone(),
                claim.0.clone(),
                Some(PutOptions::new().with_lease(lease)),
            )
        };
        let txn = Txn::new()
            .when([Compare::create_revision(
                routes_key.clone(),
                CompareOp::Equal,
                0,
            )])
            .and_then([put()])
            .or_else([TxnOp::txn(
                Txn::new()
                    .when([Compare::value(
                        routes_key.clone(),
                        CompareOp::Equal,
                        claim.0.clone(),
                    )])
                    .and_then([put()]),
            )]);
        timed("registering a route again", client.txn(txn))
            .await
            .map(|_| ())
    }

    /// Keeps this edge's lease and keys in etcd until `stop`: takes a
    /// lease, puts `edges/<me>` and every route it serves on it, keeps it
    /// alive; when the lease is lost (etcd unreachable past its TTL, or
    /// restarted without it), takes a new one and puts them again.
    pub async fn keep(&self, mut stop: watch::Receiver<bool>) {
        let mut failing_since: Option<String> = None;
        loop {
            let kept = tokio::select! {
                kept = self.keep_one_lease() => kept,
                _ = stop.wait_for(|s| *s) => break,
            };
            self.up.send_replace(false);
            if failing_since.as_deref() != Some(kept.as_str()) {
                warn!(err = %kept, "the cluster's store: lease lost or not reached; claims are refused until it is back");
                failing_since = Some(kept);
            }
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(500)) => {}
                _ = stop.wait_for(|s| *s) => break,
            }
        }
        // Leaving: the routes go at once rather than at the TTL.
        let lease = self.lease.swap(0, Ordering::AcqRel);
        if lease != 0 {
            let _ = timed(
                "revoking the lease",
                self.client.clone().lease_revoke(lease),
            )
            .await;
        }
    }

    /// One lease's life: returns why it ended. The lease is kept alive
    /// from the moment it is granted, beside the work done on it (putting
    /// every route again, renewing reservations), however long that takes.
    async fn keep_one_lease(&self) -> String {
        let mut client = self.client.clone();
        let ttl = i64::try_from(self.ttl.as_secs()).unwrap_or(5);
        let granted = match timed("granting a lease", client.lease_grant(ttl, None)).await {
            Ok(granted) => granted,
            Err(err) => return err,
        };
        let lease = granted.id();
        let (mut keeper, mut answers) =
            match timed("keeping the lease alive", client.lease_keep_alive(lease)).await {
                Ok(pair) => pair,
                Err(err) => return err,
            };
        let every = (self.ttl / 3).max(Duration::from_millis(300));
        let alive = async {
            loop {
                tokio::time::sleep(every).await;
                if keeper.keep_alive().await.is_err() {
                    return "the lease's keep-alive stream ended".to_owned();
                }
                match tokio::time::timeout(OP_TIMEOUT, answers.message()).await {
                    Ok(Ok(Some(answer))) if answer.ttl() > 0 => {}
                    Ok(Ok(Some(_))) => return "the lease expired".into(),
                    Ok(Ok(None)) => return "the lease's keep-alive stream ended".into(),
                    Ok(Err(err)) => return format!("keeping the lease alive: {err}"),
                    Err(_) => return "no keep-alive answer in time".into(),
                }
            }
        };
        let work = async {
            // Claims go on this lease from now on; the routes claimed
            // before are put on it here.
            self.lease.store(lease, Ordering::Release);
            if let Err(err) = self.put_all(lease).await {
                return err;
            }
            self.up.send_replace(true);
            info!(lease, "the cluster's store: lease taken, routes registered");
            let refresh_every =
                (self.name_lease / 4).clamp(Duration::from_secs(1), Duration::from_secs(3600));
            let mut refreshed = tokio::time::Instant::now();
            loop {
                tokio::time::sleep(every).await;
                self.end_unended().await;
                if refreshed.elapsed() >= refresh_every {
                    refreshed = tokio::time::Instant::now();
                    self.refresh_reservations().await;
                }
            }
        };
        let ended = tokio::select! {
            why = alive => why,
            why = work => why,
        };
        let _ = self
            .lease
            .compare_exchange(lease, 0, Ordering::AcqRel, Ordering::Acquire);
        ended
    }

    /// Puts `edges/<me>` and this edge's routes on `lease`. A route that
    /// another edge took meanwhile (the agent moved) is left to it.
    async fn put_all(&self, lease: i64) -> Result<(), String> {
        let mut client = self.client.clone();
        let me = serde_json::to_vec(&self.me).unwrap_or_default();
        timed(
            "registering the edge",
            client.put(
                format!("{EDGES}{}", self.me.advertise),
                me,
                Some(PutOptions::new().with_lease(lease)),
            ),
        )
        .await?;
        let owned: Vec<(PreviewName, Claim)> = self
            .owned_lock()
            .iter()
            .map(|(name, (claim, _))| (name.clone(), claim.clone()))
            .collect();
        for (name, claim) in owned {
            self.put_route(&mut client, &name, &claim, lease).await?;
        }
        Ok(())
    }

    /// Ends what could not be ended while etcd was unreachable.
    async fn end_unended(&self) {
        let unended: Vec<_> = self.unended_lock().drain().collect();
        for (name, (claim, account, state)) in unended {
            if self
                .write_end(&name, &claim, &account, state)
                .await
                .is_err()
            {
                self.unended_lock().insert(name, (claim, account, state));
            }
        }
    }

    /// Moves the end of every live name's reservation forward, so that a
    /// name live longer than the name lease on an edge that dies is still
    /// reserved for the lease after.
    async fn refresh_reservations(&self) {
        let owned: Vec<_> = self
            .owned_lock()
            .iter()
            .map(|(name, (claim, account))| (name.clone(), claim.clone(), account.clone()))
            .collect();
        let mut client = self.client.clone();
        for (name, claim, account) in owned {
            let record = NameRecord {
                account: account.to_string(),
                until: crate::unix_now() + self.name_lease.as_secs(),
                state: NameState::Live,
                ends_ms: claim_ends_ms(&claim),
            };
            let txn = Txn::new()
                .when([Compare::value(
                    key(ROUTES, &name),
                    CompareOp::Equal,
                    claim.0,
                )])
                .and_then([TxnOp::put(
                    key(NAMES, &name),
                    serde_json::to_vec(&record).unwrap_or_default(),
                    None,
                )]);
            if timed("renewing a reservation", client.txn(txn))
                .await
                .is_err()
            {
                return;
            }
        }
    }

    /// Reads every key under [`PREFIX`]: each key, value and revision of
    /// its last change, and the snapshot's revision.
    pub async fn snapshot(&self) -> Result<(Vec<(String, Vec<u8>, i64)>, i64), String> {
        let mut got = timed(
            "reading the cluster",
            self.client
                .clone()
                .get(PREFIX, Some(GetOptions::new().with_prefix())),
        )
        .await?;
        let revision = got.header().map_or(0, |h| h.revision());
        let kvs = got
            .take_kvs()
            .into_iter()
            .map(|kv| {
                let revision = kv.mod_revision();
                let (key, value) = kv.into_key_value();
                (String::from_utf8_lossy(&key).into_owned(), value, revision)
            })
            .collect();
        Ok((kvs, revision))
    }
}

/// When a claimed preview ends, if it has a time to live.
fn claim_ends_ms(claim: &Claim) -> Option<u64> {
    serde_json::from_slice::<RouteRecord>(&claim.0)
        .ok()
        .and_then(|r| r.ends_ms)
}

#[async_trait::async_trait]
impl NameClaims for Store {
    fn can_claim(&self) -> bool {
        self.lease() != 0
    }

    /// Gives `name` to `account`, served by this edge's agent on `port`:
    /// created if nobody has it, or taken over from the same account
    /// (an agent that moved here), or from another account whose
    /// reservation has ended and that no edge serves. The claim to end it
    /// with.
    async fn claim(
        &self,
        name: &PreviewName,
        account: &AccountId,
        port: Port,
        ends: Option<SystemTime>,
        protect: Option<ShareSalt>,
    ) -> Result<Claim, StoreRefusal> {
        let ends_ms = ends.map(|at| {
            at.duration_since(UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        });
        let lease = self.lease.load(Ordering::Acquire);
        if lease == 0 {
            return Err(StoreRefusal::Unavailable(
                "this edge has no lease in it now".into(),
            ));
        }
        let (names_key, routes_key) = (key(NAMES, name), key(ROUTES, name));
        let route = RouteRecord {
            edge: self.me.advertise.clone(),
            account: account.to_string(),
            port,
            claim: self.next_claim.fetch_add(1, Ordering::Relaxed),
            ends_ms,
            protect,
        };
        let value = serde_json::to_vec(&route).unwrap_or_default();
        let record = NameRecord {
            account: account.to_string(),
            until: crate::unix_now() + self.name_lease.as_secs(),
            state: NameState::Live,
            ends_ms,
        };
        let record = serde_json::to_vec(&record).unwrap_or_default();
        let mut client = self.client.clone();
        for _ in 0..CLAIM_TRIES {
            let read = Txn::new().and_then([
                TxnOp::get(names_key.clone(), None),
                TxnOp::get(routes_key.clone(), None),
            ]);
            let read = timed("reading the name", client.txn(read))
                .await
                .map_err(StoreRefusal::Unavailable)?;
            let (owner, routed) = match read.op_responses().as_slice() {
                [TxnOpResponse::Get(names), TxnOpResponse::Get(routes)] => (
                    names.kvs().first().map(|kv| {
                        let record = serde_json::from_slice::<NameRecord>(kv.value()).ok();
                        (record, kv.mod_revision())
                    }),
                    !routes.kvs().is_empty(),
                ),
                _ => return Err(StoreRefusal::Unavailable("an odd answer".into())),
            };
            let when = match owner {
                None => vec![Compare::create_revision(
                    names_key.clone(),
                    CompareOp::Equal,
                    0,
                )],
                Some((Some(record), revision)) if record.account == account.as_str() => {
                    vec![Compare::mod_revision(
                        names_key.clone(),
                        CompareOp::Equal,
                        revision,
                    )]
                }
                // Another account's: only once its reservation has ended
                // and no edge serves it (an edge that died with the name
                // live leaves `live` behind, with the reservation renewed
                // while it lived).
                Some((Some(record), revision)) if record.until <= crate::unix_now() && !routed => {
                    vec![
                        Compare::mod_revision(names_key.clone(), CompareOp::Equal, revision),
                        Compare::create_revision(routes_key.clone(), CompareOp::Equal, 0),
                    ]
                }
                // A record this edge cannot read is another version's: not ours.
                Some(_) => return Err(StoreRefusal::Taken(name.clone())),
            };
            let write = Txn::new().when(when).and_then([
                TxnOp::put(names_key.clone(), record.clone(), None),
                TxnOp::put(
                    routes_key.clone(),
                    value.clone(),
                    Some(PutOptions::new().with_lease(lease)),
                ),
            ]);
            let written = timed("claiming the name", client.txn(write))
                .await
                .map_err(StoreRefusal::Unavailable)?;
            if written.succeeded() {
                let revision = written.header().map_or(0, |h| h.revision());
                let claim = Claim(value, revision);
                self.owned_lock()
                    .insert(name.clone(), (claim.clone(), account.clone()));
                // The keeper may have moved to a new lease meanwhile (and
                // put the routes it knew of on it, before this one): this
                // route goes on the lease it has now.
                let now = self.lease.load(Ordering::Acquire);
                if now != lease && now != 0 {
                    let _ = self.put_route(&mut client, name, &claim, now).await;
                }
                return Ok(claim);
            }
        }
        Err(StoreRefusal::Unavailable(format!(
            "the name {name} changed {CLAIM_TRIES} times while this edge claimed it"
        )))
    }

    /// This edge no longer serves `name` under `claim`: its route goes
    /// (unless another claim replaced it) and the name stays reserved to
    /// its account for the name lease, `state` saying why. Done later if
    /// etcd cannot be reached now.
    async fn end(&self, name: &PreviewName, claim: &Claim, account: &AccountId, state: NameState) {
        {
            let mut owned = self.owned_lock();
            if owned.get(name).is_some_and(|(c, _)| c == claim) {
                owned.remove(name);
            }
        }
        if self.lease.load(Ordering::Acquire) == 0 {
            // etcd is not reached now: no wait for a timeout per name.
            self.unended_lock()
                .insert(name.clone(), (claim.clone(), account.clone(), state));
            return;
        }
        if let Err(err) = self.write_end(name, claim, account, state).await {
            warn!(%name, %err, "cannot end the name's route in etcd now; trying again later");
            self.unended_lock()
                .insert(name.clone(), (claim.clone(), account.clone(), state));
        }
    }
}
