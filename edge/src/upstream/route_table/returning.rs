//! The names an edge that restarted expects back: served before the
//! restart, their agents not reconnected yet. For a while (until the
//! window's end) a request for one waits for its agent and then hears
//! "retry shortly", not "no such preview"; a name the table binds or holds
//! since is no longer expected, and the table answers for it.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use calvin_proto::PreviewName;
use dashmap::DashMap;

#[derive(Default)]
pub(super) struct Returning {
    names: DashMap<PreviewName, ()>,
    until: OnceLock<Instant>,
    /// How many `names` holds, so that a lookup reads the map only when
    /// some are expected.
    count: AtomicUsize,
}

impl Returning {
    /// Expects `names` back until `until`; only the first call counts.
    pub(super) fn expect(&self, names: impl IntoIterator<Item = PreviewName>, until: Instant) {
        if self.until.set(until).is_err() {
            return;
        }
        for name in names {
            if self.names.insert(name, ()).is_none() {
                self.count.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Whether some names are expected and the window is not over at `now`.
    fn open(&self, now: Instant) -> bool {
        self.count.load(Ordering::Relaxed) > 0 && self.until.get().is_some_and(|until| now < *until)
    }

    /// Whether `name` is expected back now (the window is not over).
    pub(super) fn expects(&self, name: &PreviewName) -> bool {
        self.open(Instant::now()) && self.names.contains_key(name)
    }

    pub(super) fn until(&self) -> Option<Instant> {
        self.until.get().copied()
    }

    /// `name` is back (or the table knows better now).
    pub(super) fn arrived(&self, name: &PreviewName) {
        if self.count.load(Ordering::Relaxed) > 0 && self.names.remove(name).is_some() {
            // Saturating: a sweep may have emptied the set meanwhile.
            let _ = self
                .count
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                    Some(n.saturating_sub(1))
                });
        }
    }

    /// The names still expected, while the window lasts.
    pub(super) fn names(&self) -> Vec<PreviewName> {
        if !self.open(Instant::now()) {
            return Vec::new();
        }
        self.names.iter().map(|e| e.key().clone()).collect()
    }

    /// Forgets every name once the window is over.
    pub(super) fn sweep(&self, now: Instant) {
        if self.count.load(Ordering::Relaxed) > 0 && !self.open(now) {
            self.names.clear();
            self.count.store(0, Ordering::Relaxed);
        }
    }

    #[cfg(test)]
    pub(super) fn count(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }
}
