//! Which previews end with which session. A preview the preview tool
//! makes belongs to the session that asked for it and is taken down when
//! that session ends: a daemon session at `DELETE /sessions/<id>` (or when
//! the daemon stops), a stdio gateway when its client goes away or it is
//! told to stop. Three exceptions, so that a session never takes down a
//! URL someone else still counts on:
//!
//! - `keep: true` makes a preview nobody's: it stays until unpreview (or
//!   its TTL), whichever sessions asked for it before.
//! - A preview that existed before the call (made by a person with
//!   `calvin-agent preview`, by another gateway process, or kept) stays
//!   nobody's; the call only reuses it.
//! - Sessions of one process that ask for the same preview share it: it
//!   goes down when the last of them ends.
//!
//! [`PreviewOwners`] is the table one process keeps; [`SessionPreviews`]
//! is one session's handle on it.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The previews the sessions of one process made, by name.
#[derive(Debug, Default)]
pub struct PreviewOwners {
    by_name: Mutex<HashMap<String, Owned>>,
    next_session: AtomicU64,
}

#[derive(Debug)]
struct Owned {
    sessions: HashSet<u64>,
    /// When the agent takes it down by itself (its TTL): past this the
    /// name may be someone else's preview, which no session end touches.
    ends: Option<Instant>,
}

/// What a preview call left the preview as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ownership {
    /// It is taken down when this session ends (and every other session
    /// of this process that asked for it).
    EndsWithSession,
    /// Made with `keep: true`: it outlives every session.
    Kept,
    /// It existed before the call and was no session's here: left as it
    /// was, it outlives this session.
    Existing,
    /// This session ended while the call ran: the caller takes the
    /// preview down (nobody is left to).
    SessionEnded,
}

impl Ownership {
    pub fn ends_with_session(self) -> bool {
        self == Ownership::EndsWithSession
    }
}

impl PreviewOwners {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Owned>> {
        self.by_name.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One session's previews, in its process's table.
#[derive(Debug)]
pub struct SessionPreviews {
    owners: Arc<PreviewOwners>,
    session: u64,
    ended: AtomicBool,
}

impl SessionPreviews {
    /// A session whose previews are counted in `owners` (shared by every
    /// session of the process).
    pub fn new(owners: Arc<PreviewOwners>) -> Self {
        let session = owners.next_session.fetch_add(1, Ordering::Relaxed);
        Self {
            owners,
            session,
            ended: AtomicBool::new(false),
        }
    }

    /// The preview `name` was made or reused by this session; `existed`:
    /// the agent had it before the call. `ttl`: the time to live the call
    /// gave it.
    pub fn made(&self, name: &str, existed: bool, keep: bool, ttl: Option<Duration>) -> Ownership {
        let mut by_name = self.owners.lock();
        if keep {
            by_name.remove(name);
            return Ownership::Kept;
        }
        if self.ended.load(Ordering::Relaxed) {
            return if existed {
                Ownership::Existing
            } else {
                Ownership::SessionEnded
            };
        }
        let ends = ttl.map(|ttl| Instant::now() + ttl);
        match by_name.get_mut(name) {
            Some(owned) => {
                owned.sessions.insert(self.session);
                // The latest call's end replaces the earlier one, as on the
                // agent (none: it no longer ends).
                owned.ends = ends;
                Ownership::EndsWithSession
            }
            None if existed => Ownership::Existing,
            None => {
                by_name.insert(
                    name.to_owned(),
                    Owned {
                        sessions: HashSet::from([self.session]),
                        ends,
                    },
                );
                Ownership::EndsWithSession
            }
        }
    }

    /// `name` was taken down (unpreview, or found gone): nobody's now.
    pub fn taken_down(&self, name: &str) {
        self.owners.lock().remove(name);
    }

    /// The names this session holds now, sorted.
    pub fn names(&self) -> Vec<String> {
        let by_name = self.owners.lock();
        let mut names: Vec<String> = by_name
            .iter()
            .filter(|(_, owned)| owned.sessions.contains(&self.session))
            .map(|(name, _)| name.clone())
            .collect();
        names.sort();
        names
    }

    /// The session ended: it lets go of its previews, and the ones no
    /// other session holds are returned (sorted) for the caller to take
    /// down, except those whose TTL has passed (the agent took them down;
    /// the name may be another preview's by now). A second call returns
    /// nothing.
    pub fn end(&self) -> Vec<String> {
        let now = Instant::now();
        let mut by_name = self.owners.lock();
        // Under the lock: a call that ends after this sees it.
        self.ended.store(true, Ordering::Relaxed);
        let mut down = Vec::new();
        by_name.retain(|name, owned| {
            if !owned.sessions.remove(&self.session) || !owned.sessions.is_empty() {
                return true;
            }
            if owned.ends.is_none_or(|ends| ends > now) {
                down.push(name.clone());
            }
            false
        });
        down.sort();
        down
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_sessions() -> (SessionPreviews, SessionPreviews) {
        let owners = Arc::new(PreviewOwners::default());
        (
            SessionPreviews::new(owners.clone()),
            SessionPreviews::new(owners),
        )
    }

    #[test]
    fn a_session_ends_its_own_previews_once() {
        let (a, _) = two_sessions();
        assert_eq!(
            a.made("web", false, false, None),
            Ownership::EndsWithSession
        );
        assert_eq!(
            a.made("api", false, false, None),
            Ownership::EndsWithSession
        );
        // Asking again for its own preview keeps it the session's.
        assert_eq!(a.made("web", true, false, None), Ownership::EndsWithSession);
        assert_eq!(a.names(), ["api", "web"]);
        assert_eq!(a.end(), ["api", "web"]);
        assert!(a.end().is_empty());
    }

    #[test]
    fn kept_existing_and_taken_down_previews_are_left_alone() {
        let (a, _) = two_sessions();
        assert_eq!(a.made("mine", true, false, None), Ownership::Existing);
        assert_eq!(a.made("kept", false, true, None), Ownership::Kept);
        a.made("web", false, false, None);
        // keep on a preview the session made lets go of it.
        assert_eq!(a.made("web", true, true, None), Ownership::Kept);
        a.made("gone", false, false, None);
        a.taken_down("gone");
        assert!(a.names().is_empty());
        assert!(a.end().is_empty());
    }

    #[test]
    fn sessions_sharing_a_preview_end_it_with_the_last() {
        let (a, b) = two_sessions();
        a.made("web", false, false, None);
        assert_eq!(b.made("web", true, false, None), Ownership::EndsWithSession);
        assert!(a.end().is_empty(), "b still holds it");
        assert_eq!(b.end(), ["web"]);
        // keep by one takes it from both.
        let (a, b) = two_sessions();
        a.made("web", false, false, None);
        b.made("web", true, true, None);
        assert!(a.end().is_empty());
    }

    #[test]
    fn a_preview_past_its_ttl_is_not_taken_down_again() {
        let (a, _) = two_sessions();
        a.made("short", false, false, Some(Duration::ZERO));
        a.made("long", false, false, Some(Duration::from_secs(3600)));
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(a.end(), ["long"]);
    }

    #[test]
    fn a_preview_made_again_without_a_ttl_no_longer_ends_by_it() {
        let (a, _) = two_sessions();
        a.made("web", false, false, Some(Duration::ZERO));
        // Made again with no TTL: the agent no longer ends it, so the
        // session does.
        a.made("web", true, false, None);
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(a.end(), ["web"]);
    }

    #[test]
    fn a_preview_made_as_the_session_ends_is_not_left_behind() {
        let (a, b) = two_sessions();
        b.made("shared", false, false, None);
        assert!(a.end().is_empty());
        assert_eq!(a.made("late", false, false, None), Ownership::SessionEnded);
        assert_eq!(a.made("shared", true, false, None), Ownership::Existing);
        assert_eq!(a.made("kept", false, true, None), Ownership::Kept);
        assert_eq!(b.end(), ["shared"], "the ended session never joined it");
    }
}
