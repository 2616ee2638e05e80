//! The route table: which preview name is served by what, and who owns it.
//!
//! A name is *live* while an agent serves it. After unpreview or a
//! disconnect it stays *held* by its account for a lease, so a link posted in
//! a chat never starts serving another account's content: a held name that
//! went offline answers "agent offline", one that was taken down answers
//! "unknown", and only its owner can claim it again before the lease ends.
//!
//! One `DashMap` in memory today; the interface (claim, lookup, release,
//! disconnect) is what a shared store would implement for several edges.
//!
//! Each name has a [`Notify`] that every change of its entry wakes (a claim,
//! an end, the lease running out), so a request waiting for an offline
//! name's agent to come back wakes the moment it does instead of polling.
//!
//! After a restart, the names the edge served before (its state folder
//! keeps them: [`crate::live_names`]) are *coming back* for a while: the
//! table has no entry for them yet, but their agents are reconnecting, so
//! a request for one waits and then hears "retry shortly" rather than "no
//! such preview". Any name the table then binds or holds is no longer
//! coming back: from then on the table itself is the answer.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use calvin_proto::PreviewName;
use dashmap::DashMap;
use dashmap::mapref::entry::Entry as MapEntry;
use tokio::sync::Notify;

use crate::accounts::AccountId;

/// Identifies one binding of a name, so a stale holder cannot release a
/// binding that replaced its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RouteId(u64);

/// How many random names `claim` tries before giving up (each collision is
/// one in 2^42 per live name).
const GENERATE_ATTEMPTS: usize = 16;

pub struct RouteTable<T> {
    entries: DashMap<PreviewName, Entry<T>>,
    live_per_account: DashMap<AccountId, usize>,
    next_id: AtomicU64,
    lease: Duration,
    max_per_account: usize,
    /// Woken by every name that enters the table (see [`Self::added`]).
    added: Notify,
    /// When names made with a time to live end (see [`Self::set_ends`]);
    /// `ending` counts them, so a lookup reads the map only when there
    /// are some.
    ends: DashMap<PreviewName, Instant>,
    ending: std::sync::atomic::AtomicUsize,
    /// Names served before this start whose agents are not back yet, and
    /// until when they may be (see [`Self::expect_back`]); `coming_back`
    /// counts them, so a lookup of an unknown name reads the set only
    /// when there are some.
    returning: DashMap<PreviewName, ()>,
    returning_until: std::sync::OnceLock<Instant>,
    coming_back: std::sync::atomic::AtomicUsize,
    /// Woken (one permit kept) by every change of which names are served
    /// or held offline: what keeps [`crate::live_names`]' file current.
    served_changed: Notify,
}

enum Entry<T> {
    Live {
        account: AccountId,
        id: RouteId,
        target: T,
        changed: Arc<Notify>,
    },
    Held {
        account: AccountId,
        offline: bool,
        until: Instant,
        changed: Arc<Notify>,
    },
}

impl<T> Entry<T> {
    /// Woken at every change of this name's entry.
    fn changed(&self) -> &Arc<Notify> {
        match self {
            Entry::Live { changed, .. } | Entry::Held { changed, .. } => changed,
        }
    }
}

/// Who decides that an account may bind a name (see [`RouteTable::bind`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owner {
    /// This table: another account's live or reserved name is refused.
    Checked,
    /// The cluster's store granted it to this edge's agent.
    Granted,
    /// Another edge of the cluster serves it.
    Mirrored,
}

/// What a visitor's request for a name finds.
#[derive(Debug)]
pub enum Lookup<T> {
    Live(T),
    /// The name's agent disconnected; its owner may bring it back.
    Offline,
    /// It was made with a time to live, which is over.
    Ended,
    Unknown,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClaimError {
    #[error("the name {0} belongs to another account")]
    Taken(PreviewName),
    #[error("this account already has {0} previews, the most it may have")]
    LimitReached(usize),
    #[error("no free name found; try again")]
    NoFreeName,
}

impl<T: Clone> RouteTable<T> {
    pub fn new(lease: Duration, max_per_account: usize) -> Self {
        Self {
            entries: DashMap::new(),
            live_per_account: DashMap::new(),
            next_id: AtomicU64::new(1),
            lease,
            max_per_account,
            added: Notify::new(),
            ends: DashMap::new(),
            ending: std::sync::atomic::AtomicUsize::new(0),
            returning: DashMap::new(),
            returning_until: std::sync::OnceLock::new(),
            coming_back: std::sync::atomic::AtomicUsize::new(0),
            served_changed: Notify::new(),
        }
    }

    /// `names` were served before this edge started (an edge that
    /// restarted): until `until`, each one the table has no entry for is
    /// [coming back](Self::is_coming_back). Called once, before serving;
    /// later calls are ignored.
    pub fn expect_back(&self, names: impl IntoIterator<Item = PreviewName>, until: Instant) {
        if self.returning_until.set(until).is_err() {
            return;
        }
        for name in names {
            if !self.entries.contains_key(&name) && self.returning.insert(name, ()).is_none() {
                self.coming_back.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Whether `name` was served before this edge started, its agent is
    /// not back yet (the table has had no entry for it since), and the
    /// time its agent has to come back is not over.
    pub fn is_coming_back(&self, name: &PreviewName) -> bool {
        self.coming_back.load(Ordering::Relaxed) > 0
            && self
                .returning_until
                .get()
                .is_some_and(|until| Instant::now() < *until)
            && self.returning.contains_key(name)
    }

    /// Until when the names served before this start may come back.
    pub fn coming_back_until(&self) -> Option<Instant> {
        self.returning_until.get().copied()
    }

    /// `name` has an entry now: it is no longer coming back.
    fn arrived(&self, name: &PreviewName) {
        if self.coming_back.load(Ordering::Relaxed) > 0 && self.returning.remove(name).is_some() {
            self.coming_back.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// What wakes when the names served (or held offline) may have
    /// changed; a change while nobody waits is kept for the next wait.
    pub fn served_changed(&self) -> &Notify {
        &self.served_changed
    }

    /// The names served now, or held offline within their lease (their
    /// agent may come back): those an edge that restarts expects back.
    pub fn served_names(&self) -> Vec<PreviewName> {
        let now = Instant::now();
        self.entries
            .iter()
            .filter(|e| match e.value() {
                Entry::Live { .. } => true,
                Entry::Held { offline, until, .. } => *offline && *until > now,
            })
            .map(|e| e.key().clone())
            .collect()
    }

    /// `name` ends at `at` (made with a time to live), or never (`None`):
    /// from then on it reads [`Lookup::Ended`] until its reservation ends,
    /// and the next sweep stops serving it. A new binding of the name
    /// clears it.
    pub fn set_ends(&self, name: &PreviewName, at: Option<Instant>) {
        let before = match at {
            Some(at) => self.ends.insert(name.clone(), at),
            None => self.ends.remove(name).map(|(_, at)| at),
        };
        match (before.is_some(), at.is_some()) {
            (false, true) => {
                self.ending.fetch_add(1, Ordering::Relaxed);
            }
            (true, false) => {
                self.ending.fetch_sub(1, Ordering::Relaxed);
            }
            _ => {}
        }
        if let Some(entry) = self.entries.get(name) {
            entry.changed().notify_waiters();
        }
    }

    /// When `name` ends, if it was made with a time to live.
    pub fn ends_at(&self, name: &PreviewName) -> Option<Instant> {
        if self.ending.load(Ordering::Relaxed) == 0 {
            return None;
        }
        self.ends.get(name).map(|at| *at)
    }

    /// Whether `name` was made with a time to live that is over.
    fn has_ended(&self, name: &PreviewName, now: Instant) -> bool {
        self.ending.load(Ordering::Relaxed) > 0 && self.ends.get(name).is_some_and(|at| *at <= now)
    }

    /// What wakes when a name the table had no entry for is claimed: a
    /// request for a name unknown so far waits on it (an edge that just
    /// started, before its agents are back). Enable the `notified()` future
    /// before [`Self::lookup`].
    pub fn added(&self) -> &Notify {
        &self.added
    }

    /// Binds `name` (a fresh random one when `None`) to `account`, with the
    /// target that `make` builds. A name the same account holds, live or
    /// not, is taken over; another account's is refused.
    pub fn claim(
        &self,
        name: Option<PreviewName>,
        account: &AccountId,
        make: impl FnOnce(&PreviewName, RouteId) -> T,
    ) -> Result<(PreviewName, RouteId), ClaimError> {
        self.bind(name, account, Owner::Checked, make)
    }

    /// [`Self::claim`] for a name the cluster's store has already given
    /// `account` (see [`crate::cluster`]): what this table holds for the
    /// name (another edge's binding, a reservation that ended earlier
    /// there) is replaced, only the per-account cap is checked here.
    pub fn claim_granted(
        &self,
        name: PreviewName,
        account: &AccountId,
        make: impl FnOnce(&PreviewName, RouteId) -> T,
    ) -> Result<RouteId, ClaimError> {
        self.bind(Some(name), account, Owner::Granted, make)
            .map(|(_, id)| id)
    }

    /// Binds `name` as another edge of the cluster serves it: whatever
    /// this table held for it is replaced, and no cap applies (the edge
    /// that holds the agent checked it).
    pub fn mirror(
        &self,
        name: PreviewName,
        account: &AccountId,
        make: impl FnOnce(&PreviewName, RouteId) -> T,
    ) -> RouteId {
        match self.bind(Some(name), account, Owner::Mirrored, make) {
            Ok((_, id)) => id,
            Err(_) => unreachable!("a mirrored binding is never refused"),
        }
    }

    /// Whether `account` may claim one more name here (`name`, if it
    /// serves it already, is not one more): the per-account cap, checked
    /// before a cluster's store is asked.
    pub fn may_claim(
        &self,
        name: Option<&PreviewName>,
        account: &AccountId,
    ) -> Result<(), ClaimError> {
        let serving = name.is_some_and(|name| {
            matches!(self.entries.get(name).as_deref(),
                Some(Entry::Live { account: owner, .. }) if owner == account)
        });
        if !serving && self.live_count(account) >= self.max_per_account {
            return Err(ClaimError::LimitReached(self.max_per_account));
        }
        Ok(())
    }

    /// Marks `name` as held by `account` (offline, or taken down), unless
    /// an agent serves it here: what the cluster's store says of a name
    /// whose edge is gone or not reached yet.
    pub fn hold(&self, name: PreviewName, account: &AccountId, offline: bool) {
        let until = Instant::now() + self.lease;
        self.arrived(&name);
        let changed = match self.entries.entry(name) {
            MapEntry::Occupied(o) if matches!(o.get(), Entry::Live { .. }) => return,
            MapEntry::Occupied(mut o) => {
                let changed = o.get().changed().clone();
                o.insert(Entry::Held {
                    account: account.clone(),
                    offline,
                    until,
                    changed: changed.clone(),
                });
                changed
            }
            MapEntry::Vacant(v) => {
                let changed = Arc::new(Notify::new());
                v.insert(Entry::Held {
                    account: account.clone(),
                    offline,
                    until,
                    changed: changed.clone(),
                });
                self.added.notify_waiters();
                changed
            }
        };
        changed.notify_waiters();
        self.served_changed.notify_one();
    }

    /// Whether an agent of this edge or another serves `name` now.
    pub fn is_live(&self, name: &PreviewName) -> bool {
        matches!(self.entries.get(name).as_deref(), Some(Entry::Live { .. }))
    }

    fn bind(
        &self,
        name: Option<PreviewName>,
        account: &AccountId,
        owner: Owner,
        make: impl FnOnce(&PreviewName, RouteId) -> T,
    ) -> Result<(PreviewName, RouteId), ClaimError> {
        let id = RouteId(self.next_id.fetch_add(1, Ordering::Relaxed));
        let now = Instant::now();
        let entry = match name {
            Some(name) => self.entries.entry(name),
            None => self.vacant_random_name()?,
        };
        let name = entry.key().clone();
        self.arrived(&name);
        // The account whose live count this binding replaces.
        let replaced = match &entry {
            MapEntry::Vacant(_) => None,
            MapEntry::Occupied(o) => match (o.get(), owner) {
                (Entry::Live { account: owner, .. }, _) if owner == account => Some(owner.clone()),
                (Entry::Live { account: other, .. }, Owner::Granted | Owner::Mirrored) => {
                    Some(other.clone())
                }
                (Entry::Held { .. }, Owner::Granted | Owner::Mirrored) => None,
                (Entry::Held { until, .. }, Owner::Checked) if *until <= now => None,
                (Entry::Held { account: owner, .. }, Owner::Checked) if owner == account => None,
                _ => return Err(ClaimError::Taken(name)),
            },
        };
        match &replaced {
            Some(same) if same == account => {}
            _ if owner == Owner::Mirrored => self.count_live_uncapped(account),
            _ => self.count_live(account)?,
        }
        if let Some(other) = replaced.filter(|other| other != account) {
            self.uncount_live(&other);
        }
        let (changed, added) = match &entry {
            MapEntry::Occupied(o) => (o.get().changed().clone(), false),
            MapEntry::Vacant(_) => (Arc::new(Notify::new()), true),
        };
        let live = Entry::Live {
            account: account.clone(),
            id,
            target: make(&name, id),
            changed: changed.clone(),
        };
        // A binding starts without an end (its maker sets one): cleared
        // only now that the binding is certain, so a refused claim leaves
        // the name's end as it was. `entries` is locked, then `ends`, the
        // order everywhere both are.
        if self.ending.load(Ordering::Relaxed) > 0 && self.ends.remove(&name).is_some() {
            self.ending.fetch_sub(1, Ordering::Relaxed);
        }
        match entry {
            MapEntry::Occupied(mut o) => {
                o.insert(live);
            }
            MapEntry::Vacant(v) => {
                v.insert(live);
            }
        }
        changed.notify_waiters();
        if added {
            self.added.notify_waiters();
        }
        self.served_changed.notify_one();
        Ok((name, id))
    }

    fn vacant_random_name(&self) -> Result<MapEntry<'_, PreviewName, Entry<T>>, ClaimError> {
        for _ in 0..GENERATE_ATTEMPTS {
            let entry = self.entries.entry(PreviewName::random());
            if matches!(entry, MapEntry::Vacant(_)) {
                return Ok(entry);
            }
        }
        Err(ClaimError::NoFreeName)
    }

    fn count_live_uncapped(&self, account: &AccountId) {
        *self.live_per_account.entry(account.clone()).or_insert(0) += 1;
    }

    /// Counts one more live name for `account`, refused past the cap.
    fn count_live(&self, account: &AccountId) -> Result<(), ClaimError> {
        let mut count = self.live_per_account.entry(account.clone()).or_insert(0);
        if *count >= self.max_per_account {
            return Err(ClaimError::LimitReached(self.max_per_account));
        }
        *count += 1;
        Ok(())
    }

    fn uncount_live(&self, account: &AccountId) {
        if let MapEntry::Occupied(mut o) = self.live_per_account.entry(account.clone()) {
            *o.get_mut() -= 1;
            if *o.get() == 0 {
                o.remove();
            }
        }
    }

    pub fn lookup(&self, name: &PreviewName) -> Lookup<T> {
        if self.has_ended(name, Instant::now()) && self.entries.contains_key(name) {
            return Lookup::Ended;
        }
        match self.entries.get(name).as_deref() {
            Some(Entry::Live { target, .. }) => Lookup::Live(target.clone()),
            Some(Entry::Held {
                offline: true,
                until,
                ..
            }) if *until > Instant::now() => Lookup::Offline,
            _ => Lookup::Unknown,
        }
    }

    /// What wakes at the next change of `name`'s entry; `None` when the
    /// table has no entry for it. Enable the `notified()` future before
    /// [`Self::lookup`] so that no change in between is missed.
    pub fn changed(&self, name: &PreviewName) -> Option<Arc<Notify>> {
        self.entries.get(name).map(|e| e.changed().clone())
    }

    /// Unpreview: binding `id` of `name` stops serving; the name stays held
    /// by its account for the lease. False when `id` no longer holds it.
    pub fn release(&self, name: &PreviewName, id: RouteId) -> bool {
        self.end(name, id, false)
    }

    /// The agent behind binding `id` went away: the name answers "offline"
    /// and stays held for the lease.
    pub fn disconnect(&self, name: &PreviewName, id: RouteId) -> bool {
        self.end(name, id, true)
    }

    fn end(&self, name: &PreviewName, id: RouteId, offline: bool) -> bool {
        let Some(mut entry) = self.entries.get_mut(name) else {
            return false;
        };
        let (account, changed) = match &*entry {
            Entry::Live {
                account,
                id: live,
                changed,
                ..
            } if *live == id => (account.clone(), changed.clone()),
            _ => return false,
        };
        *entry = Entry::Held {
            account: account.clone(),
            offline,
            until: Instant::now() + self.lease,
            changed: changed.clone(),
        };
        drop(entry);
        self.uncount_live(&account);
        changed.notify_waiters();
        self.served_changed.notify_one();
        true
    }

    /// Forgets held names whose lease has ended, and calls `on_live` with
    /// the target of every live name, in one pass.
    pub fn sweep(&self, mut on_live: impl FnMut(&T)) {
        let now = Instant::now();
        let mut ended = Vec::new();
        let mut forgot = false;
        self.entries.retain(|name, entry| match entry {
            Entry::Live {
                account, changed, ..
            } if self.has_ended(name, now) => {
                // Its time to live is over: no longer served, held as
                // taken down (it reads "ended" until the lease ends).
                ended.push(account.clone());
                changed.notify_waiters();
                *entry = Entry::Held {
                    account: account.clone(),
                    offline: false,
                    until: now + self.lease,
                    changed: changed.clone(),
                };
                true
            }
            Entry::Live { target, .. } => {
                on_live(target);
                true
            }
            Entry::Held { until, .. } if *until > now => true,
            Entry::Held { changed, .. } => {
                forgot = true;
                changed.notify_waiters();
                false
            }
        });
        if forgot || !ended.is_empty() {
            self.served_changed.notify_one();
        }
        for account in ended {
            self.uncount_live(&account);
        }
        if self.coming_back.load(Ordering::Relaxed) > 0
            && self
                .returning_until
                .get()
                .is_some_and(|until| now >= *until)
        {
            // The window is over: nothing is coming back any more.
            self.returning.clear();
            self.coming_back.store(0, Ordering::Relaxed);
        }
        if self.ending.load(Ordering::Relaxed) > 0 {
            // Ends of names the table no longer has go; never with a lock
            // of `ends` held while `entries` is read (a claim locks
            // `entries`, then `ends`).
            // One set meanwhile is in the future: it stays.
            let past: Vec<PreviewName> = self
                .ends
                .iter()
                .filter(|e| *e.value() <= now)
                .map(|e| e.key().clone())
                .collect();
            for name in past {
                if !self.entries.contains_key(&name)
                    && self.ends.remove_if(&name, |_, at| *at <= now).is_some()
                {
                    self.ending.fetch_sub(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// The number of names, live or held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How many names are served now, over all accounts.
    pub fn live_total(&self) -> usize {
        self.live_per_account.iter().map(|c| *c.value()).sum()
    }

    /// How many names `account` serves now.
    pub fn live_count(&self, account: &AccountId) -> usize {
        self.live_per_account.get(account).map_or(0, |c| *c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> PreviewName {
        PreviewName::parse(s).unwrap()
    }

    fn table(lease: Duration) -> RouteTable<u32> {
        RouteTable::new(lease, 3)
    }

    const DAY: Duration = Duration::from_secs(86_400);

    #[test]
    fn an_end_reads_ended_survives_a_refused_claim_and_goes_with_its_name() {
        let t = RouteTable::new(Duration::from_millis(50), 3);
        let (alice, bob) = (AccountId::new("alice"), AccountId::new("bob"));
        let web = name("web");
        let (_, id) = t.claim(Some(web.clone()), &alice, |_, _| 1).unwrap();
        let past = Instant::now() - Duration::from_millis(1);
        t.set_ends(&web, Some(Instant::now() + DAY));
        assert!(matches!(t.lookup(&web), Lookup::Live(1)));
        // Bob's refused claim leaves alice's end as it was.
        assert!(t.claim(Some(web.clone()), &bob, |_, _| 2).is_err());
        assert_eq!(t.ends_at(&web).map(|at| at > Instant::now()), Some(true));
        t.set_ends(&web, Some(past));
        assert!(matches!(t.lookup(&web), Lookup::Ended));
        // The sweep stops serving it; it stays ended while held.
        t.sweep(|_| {});
        assert_eq!(t.live_count(&alice), 0);
        assert!(matches!(t.lookup(&web), Lookup::Ended));
        assert!(!t.release(&web, id), "no longer live");
        // Its owner binds it again: no end.
        t.claim(Some(web.clone()), &alice, |_, _| 3).unwrap();
        assert!(matches!(t.lookup(&web), Lookup::Live(3)));
        assert_eq!(t.ends_at(&web), None);
        // Ended and past its lease: gone, end and all.
        t.set_ends(&web, Some(past));
        t.sweep(|_| {});
        std::thread::sleep(Duration::from_millis(60));
        t.sweep(|_| {});
        assert!(matches!(t.lookup(&web), Lookup::Unknown));
        assert_eq!(t.ends_at(&web), None);
        assert_eq!(t.ending.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn claim_lookup_release() {
        let t = table(DAY);
        let alice = AccountId::new("alice");
        let (n, id) = t.claim(Some(name("web")), &alice, |_, _| 7).unwrap();
        assert_eq!(n, name("web"));
        assert!(matches!(t.lookup(&n), Lookup::Live(7)));
        assert!(t.release(&n, id));
        assert!(matches!(t.lookup(&n), Lookup::Unknown));
        assert!(!t.release(&n, id), "a second release finds nothing");
        assert_eq!(t.live_count(&alice), 0);
    }

    #[test]
    fn generated_names_are_fresh() {
        let t = table(DAY);
        let alice = AccountId::new("alice");
        let (a, _) = t.claim(None, &alice, |_, _| 1).unwrap();
        let (b, _) = t.claim(None, &alice, |_, _| 2).unwrap();
        assert_ne!(a, b);
        assert!(matches!(t.lookup(&a), Lookup::Live(1)));
        assert!(matches!(t.lookup(&b), Lookup::Live(2)));
    }

    #[test]
    fn another_account_cannot_take_a_name_live_or_held() {
        let t = table(DAY);
        let (alice, bob) = (AccountId::new("alice"), AccountId::new("bob"));
        let (n, id) = t.claim(Some(name("web")), &alice, |_, _| 1).unwrap();
        let err = t.claim(Some(n.clone()), &bob, |_, _| 2).unwrap_err();
        assert_eq!(err, ClaimError::Taken(n.clone()));
        assert_eq!(err.to_string(), "the name web belongs to another account");

        t.release(&n, id);
        assert_eq!(
            t.claim(Some(n.clone()), &bob, |_, _| 2),
            Err(ClaimError::Taken(n.clone()))
        );
        t.claim(Some(n.clone()), &alice, |_, _| 3).unwrap();
        assert!(matches!(t.lookup(&n), Lookup::Live(3)));
    }

    #[tokio::test]
    async fn a_waiter_wakes_when_its_name_comes_back() {
        let t = table(Duration::from_secs(60));
        let alice = AccountId::new("alice");
        let (n, id) = t.claim(Some(name("web")), &alice, |_, _| 1).unwrap();
        assert!(t.disconnect(&n, id));
        let changed = t.changed(&n).expect("a held name has a signal");
        let woken = changed.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        assert!(matches!(t.lookup(&n), Lookup::Offline));
        t.claim(Some(n.clone()), &alice, |_, _| 2).unwrap();
        tokio::time::timeout(Duration::from_secs(1), woken)
            .await
            .expect("the claim wakes the waiter");
        assert!(matches!(t.lookup(&n), Lookup::Live(2)));
        assert!(t.changed(&name("other")).is_none());
    }

    #[test]
    fn a_disconnect_reads_offline_until_the_owner_returns() {
        let t = table(DAY);
        let alice = AccountId::new("alice");
        let (n, id) = t.claim(Some(name("web")), &alice, |_, _| 1).unwrap();
        assert!(t.disconnect(&n, id));
        assert!(matches!(t.lookup(&n), Lookup::Offline));
        t.claim(Some(n.clone()), &alice, |_, _| 2).unwrap();
        assert!(matches!(t.lookup(&n), Lookup::Live(2)));
    }

    #[test]
    fn a_replaced_binding_cannot_release_its_successor() {
        let t = table(DAY);
        let alice = AccountId::new("alice");
        let (n, old) = t.claim(Some(name("web")), &alice, |_, _| 1).unwrap();
        let (_, new) = t.claim(Some(n.clone()), &alice, |_, _| 2).unwrap();
        assert!(!t.disconnect(&n, old));
        assert!(matches!(t.lookup(&n), Lookup::Live(2)));
        assert_eq!(
            t.live_count(&alice),
            1,
            "a takeover is not a second preview"
        );
        assert!(t.release(&n, new));
    }

    #[test]
    fn lease_expiry_frees_the_name() {
        let t = table(Duration::ZERO);
        let (alice, bob) = (AccountId::new("alice"), AccountId::new("bob"));
        let (n, id) = t.claim(Some(name("web")), &alice, |_, _| 1).unwrap();
        t.disconnect(&n, id);
        assert!(matches!(t.lookup(&n), Lookup::Unknown));
        t.claim(Some(n.clone()), &bob, |_, _| 2).unwrap();
        assert!(matches!(t.lookup(&n), Lookup::Live(2)));
    }

    #[test]
    fn names_served_before_a_restart_come_back_until_claimed_or_the_window_ends() {
        let t = table(DAY);
        let alice = AccountId::new("alice");
        let (web, api, docs) = (name("web"), name("api"), name("docs"));
        t.expect_back(
            [web.clone(), api.clone(), docs.clone()],
            Instant::now() + DAY,
        );
        // Only the names served before are expected; another is unknown.
        assert!(t.is_coming_back(&web) && t.is_coming_back(&api));
        assert!(!t.is_coming_back(&name("typo")));
        // Back, then taken down: the table answers from then on.
        let (_, id) = t.claim(Some(web.clone()), &alice, |_, _| 1).unwrap();
        assert!(!t.is_coming_back(&web));
        assert!(t.release(&web, id));
        assert!(matches!(t.lookup(&web), Lookup::Unknown));
        assert!(!t.is_coming_back(&web));
        // Held by the cluster's store: not coming back either.
        t.hold(api.clone(), &alice, false);
        assert!(!t.is_coming_back(&api));
        // A second call does not open another window.
        t.expect_back([name("late")], Instant::now() + DAY);
        assert!(!t.is_coming_back(&name("late")));
        assert!(t.is_coming_back(&docs));

        // Past the window nothing is coming back, and the sweep forgets.
        let short = table(DAY);
        short.expect_back([docs.clone()], Instant::now() + Duration::from_millis(30));
        assert!(short.is_coming_back(&docs));
        std::thread::sleep(Duration::from_millis(40));
        assert!(!short.is_coming_back(&docs));
        short.sweep(|_| {});
        assert_eq!(short.coming_back.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn served_names_are_the_live_and_the_offline() {
        let t = table(DAY);
        let alice = AccountId::new("alice");
        let (_, web) = t.claim(Some(name("web")), &alice, |_, _| 1).unwrap();
        let (_, api) = t.claim(Some(name("api")), &alice, |_, _| 2).unwrap();
        t.claim(Some(name("docs")), &alice, |_, _| 3).unwrap();
        t.disconnect(&name("web"), web);
        t.release(&name("api"), api);
        let mut served = t.served_names();
        served.sort();
        assert_eq!(served, vec![name("docs"), name("web")]);
    }

    #[test]
    fn sweep_forgets_only_expired_names() {
        let t = table(Duration::ZERO);
        let alice = AccountId::new("alice");
        let (n, id) = t.claim(Some(name("gone")), &alice, |_, _| 1).unwrap();
        t.claim(Some(name("kept")), &alice, |_, _| 2).unwrap();
        t.release(&n, id);
        assert_eq!(t.len(), 2);
        t.sweep(|_| {});
        assert_eq!(t.len(), 1);
        assert!(matches!(t.lookup(&name("kept")), Lookup::Live(2)));
    }

    #[test]
    fn per_account_cap_at_the_limit_and_one_past() {
        let t = table(DAY);
        let (alice, bob) = (AccountId::new("alice"), AccountId::new("bob"));
        for i in 0..3 {
            t.claim(Some(name(&format!("a{i}"))), &alice, |_, _| i)
                .unwrap();
        }
        assert_eq!(t.live_count(&alice), 3);
        assert_eq!(
            t.claim(Some(name("a3")), &alice, |_, _| 9),
            Err(ClaimError::LimitReached(3))
        );
        assert!(matches!(t.lookup(&name("a3")), Lookup::Unknown));
        // Re-claiming a name it serves is not one more.
        t.claim(Some(name("a0")), &alice, |_, _| 5).unwrap();
        // Others are not affected.
        t.claim(Some(name("b0")), &bob, |_, _| 1).unwrap();
    }

    #[test]
    fn a_granted_claim_replaces_what_the_table_held_and_keeps_the_cap() {
        let t = table(DAY);
        let (alice, bob) = (AccountId::new("alice"), AccountId::new("bob"));
        // Bob's name, mirrored from another edge, then taken down there.
        let id = t.mirror(name("web"), &bob, |_, _| 1);
        assert!(t.release(&name("web"), id));
        // The store gave it to alice (bob's reservation ended there).
        t.claim_granted(name("web"), &alice, |_, _| 2).unwrap();
        assert!(matches!(t.lookup(&name("web")), Lookup::Live(2)));
        assert_eq!((t.live_count(&alice), t.live_count(&bob)), (1, 0));
        for i in 1..3 {
            t.claim_granted(name(&format!("a{i}")), &alice, |_, _| 3)
                .unwrap();
        }
        assert_eq!(
            t.claim_granted(name("a3"), &alice, |_, _| 4),
            Err(ClaimError::LimitReached(3))
        );
        assert_eq!(
            t.may_claim(Some(&name("a3")), &alice),
            Err(ClaimError::LimitReached(3))
        );
        // A name it serves already is not one more.
        assert_eq!(t.may_claim(Some(&name("a1")), &alice), Ok(()));
        assert_eq!(t.may_claim(None, &bob), Ok(()));
    }

    #[test]
    fn a_mirrored_binding_counts_for_its_account_past_the_cap() {
        let t = table(DAY);
        let (alice, bob) = (AccountId::new("alice"), AccountId::new("bob"));
        for i in 0..4 {
            t.mirror(name(&format!("m{i}")), &alice, |_, _| i);
        }
        assert_eq!(
            t.live_count(&alice),
            4,
            "the edge holding them checked the cap"
        );
        // Moved to another account's agent (the store said so): the
        // counts follow.
        t.mirror(name("m0"), &bob, |_, _| 9);
        assert_eq!((t.live_count(&alice), t.live_count(&bob)), (3, 1));
        assert!(matches!(t.lookup(&name("m0")), Lookup::Live(9)));
        assert_eq!(t.live_total(), 4);
    }

    #[test]
    fn a_hold_reads_offline_but_never_hides_a_live_binding() {
        let t = table(DAY);
        let alice = AccountId::new("alice");
        t.hold(name("gone"), &alice, true);
        assert!(matches!(t.lookup(&name("gone")), Lookup::Offline));
        t.hold(name("down"), &alice, false);
        assert!(matches!(t.lookup(&name("down")), Lookup::Unknown));
        t.claim(Some(name("live")), &alice, |_, _| 1).unwrap();
        t.hold(name("live"), &alice, true);
        assert!(matches!(t.lookup(&name("live")), Lookup::Live(1)));
        assert!(t.is_live(&name("live")) && !t.is_live(&name("gone")));
        // Only alice may claim what is held for her, here too.
        assert_eq!(
            t.claim(Some(name("gone")), &AccountId::new("bob"), |_, _| 2),
            Err(ClaimError::Taken(name("gone")))
        );
    }

    #[tokio::test]
    async fn a_hold_wakes_a_request_waiting_for_an_unknown_name() {
        let t = table(DAY);
        let woken = t.added().notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        t.hold(name("soon"), &AccountId::new("alice"), true);
        tokio::time::timeout(Duration::from_secs(1), woken)
            .await
            .expect("a new entry wakes who waits for one");
    }
}
