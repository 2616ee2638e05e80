//! A fake server's state behind a mutex, and the changes to it that tests
//! wait on: shared by the fake Slack and the fake Mattermost.

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::watch;

/// The state, and a counter bumped after each change to it.
pub struct Watched<S> {
    state: Mutex<S>,
    changes: watch::Sender<u64>,
}

impl<S> Watched<S> {
    pub fn new(state: S) -> Self {
        Watched {
            state: Mutex::new(state),
            changes: watch::Sender::new(0),
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, S> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Wakes whoever waits for a change.
    pub fn changed(&self) {
        self.changes.send_modify(|n| *n += 1);
    }

    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Waits until `done` holds, checked after each change; `fake` and
    /// `what` name them in the error.
    pub async fn wait_until(
        &self,
        fake: &str,
        what: &str,
        timeout: Duration,
        done: impl Fn() -> bool,
    ) -> Result<(), String> {
        let mut changes = self.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if done() {
                return Ok(());
            }
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return Err(format!("{fake} stopped before {what}")),
                Err(_) => return Err(format!("no {what} within {timeout:?}")),
            }
        }
    }
}
