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
//! The names served and held are kept across restarts
//! ([`crate::upstream::name_store`]): an edge started again holds each for its
//! owner as before, and the names served before are *coming back* for a
//! while ([`returning`]): their agents are reconnecting, so a request for
//! one waits and then hears "retry shortly" rather than "agent offline"
//! or "no such preview". A name bound or held since is no longer coming
//! back: from then on the table itself is the answer.

mod returning;

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
    /// Names served before this start whose agents are not back yet (see
    /// [`Self::expect_back`]).
    returning: returning::Returning,
    /// Woken (one permit kept) by every change of the names served or
    /// held: what keeps [`crate::upstream::name_store`]'s file current.
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

/// A name as an edge keeps it for its next start (see
/// [`RouteTable::kept_names`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept {
    pub name: PreviewName,
    /// Its owner; `None` for a name only expected back (a cluster's edge).
    pub account: Option<AccountId>,
    /// Served (live, or offline: its agent may come back), rather than
    /// taken down.
    pub served: bool,
    /// How long it stays held from now.
    pub until: Duration,
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
            returning: returning::Returning::default(),
            served_changed: Notify::new(),
        }
    }

    /// `names` were served before this edge started (an edge that
    /// restarted): until `until`, each is [coming
    /// back](Self::is_coming_back) unless the table binds or holds it
    /// meanwhile. Called once, before serving; later calls are ignored.
    pub fn expect_back(&self, names: impl IntoIterator<Item = PreviewName>, until: Instant) {
        self.returning.expect(names, until);
    }

    /// Whether `name` was served before this edge started, its agent is
    /// not back yet (the table has not bound or held it since), and the
    /// time its agent has to come back is not over.
    pub fn is_coming_back(&self, name: &PreviewName) -> bool {
        self.returning.expects(name)
    }

    /// Until when the names served before this start may come back.
    pub fn coming_back_until(&self) -> Option<Instant> {
        self.returning.until()
    }

    /// Holds `name` for `account` until `until`, as an edge that restarted
    /// found it kept ([`crate::upstream::name_store`]): offline (served before), or
    /// taken down; unless the table has an entry for it already. It stays
    /// [coming back](Self::is_coming_back) if expected.
    pub fn restore(&self, name: PreviewName, account: &AccountId, offline: bool, until: Instant) {
        if until <= Instant::now() {
            return;
        }
        if let MapEntry::Vacant(v) = self.entries.entry(name) {
            v.insert(Entry::Held {
                account: account.clone(),
                offline,
                until,
                changed: Arc::new(Notify::new()),
            });
        }
    }

    /// What wakes when the names served or held may have changed; a
    /// change while nobody waits is kept for the next wait.
    pub fn served_changed(&self) -> &Notify {
        &self.served_changed
    }

    /// Every name served now or held within its lease, with its owner,
    /// whether it is served (live, or offline: its agent may come back)
    /// and how long it stays held (a live one: a lease from now); and the
    /// names still coming back that the table has no entry for (a
    /// cluster's edge, which restores nothing of its own). What an edge
    /// keeps for its next start.
    pub fn kept_names(&self) -> Vec<Kept> {
        let now = Instant::now();
        let mut kept: Vec<Kept> = self
            .entries
            .iter()
            .filter_map(|e| {
                let (account, served, until) = match e.value() {
                    Entry::Live { account, .. } => (account, true, now + self.lease),
                    Entry::Held { until, .. } if *until <= now => return None,
                    Entry::Held {
                        account,
                        offline,
                        until,
                        ..
                    } => (account, *offline, *until),
                };
                Some(Kept {
                    name: e.key().clone(),
                    account: Some(account.clone()),
                    served,
                    until: until - now,
                })
            })
            .collect();
        for name in self.returning.names() {
            if !self.entries.contains_key(&name) {
                kept.push(Kept {
                    name,
                    account: None,
                    served: true,
                    until: self.lease,
                });
            }
        }
        kept
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
        self.returning.arrived(&name);
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
        // Certain now (a refused claim leaves the name expected): back.
        self.returning.arrived(&name);
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
        // Past the window, nothing is coming back any more.
        self.returning.sweep(now);
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
mod tests;
