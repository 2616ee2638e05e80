//! The names this edge serves and holds, kept in its state folder
//! (`names`, a JSON object a line), so that an edge started again knows
//! them: each is held for its owner as before (a link posted in a chat
//! never starts serving another account's content after a restart), and
//! the names served before are expected back with their agents for a
//! while ([`RouteTable::expect_back`]): those answer "retry shortly",
//! every other name its real answer at once. A fresh edge has no file and
//! expects nothing.
//!
//! The file follows the table: written at the first change, then at most
//! every [`EVERY`], and once more when the edge stops, so that even a
//! killed edge leaves what it served a moment before. A cluster's edges
//! keep their names in etcd: one restores none from the file, and only
//! expects its names back. The file is a hint, not a record: one that
//! cannot be read or written is logged, never fatal.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use calvin_proto::PreviewName;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tracing::warn;

use crate::accounts::AccountId;
use crate::state_files::{self, FileError};
use crate::unix_now;
use crate::upstream::route_table::{Kept, RouteTable};

/// The file's name in the state folder.
pub const FILE: &str = "names";

/// The least time between two writes: a burst of claims (a thousand agents
/// coming back) is one write, not a thousand.
const EVERY: Duration = Duration::from_millis(100);

/// A line of the file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Line {
    name: PreviewName,
    /// Its owner; absent for a name only expected back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    account: Option<String>,
    /// Served (live or offline) rather than taken down.
    served: bool,
    /// Held until then (seconds since the Unix epoch).
    until: u64,
}

/// The names in `path`, held past now; none when there is no file. A line
/// that is not one is skipped (and said once).
pub fn load(path: &Path) -> Result<Vec<Kept>, FileError> {
    let Some(text) = state_files::read_optional(path)? else {
        return Ok(Vec::new());
    };
    let now = unix_now();
    let mut kept = Vec::new();
    let mut skipped = 0usize;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        match serde_json::from_str::<Line>(line) {
            Ok(line) if line.until > now => kept.push(Kept {
                name: line.name,
                account: line.account.as_deref().map(AccountId::new),
                served: line.served,
                until: Duration::from_secs(line.until - now),
            }),
            Ok(_) => {}
            Err(_) => skipped += 1,
        }
    }
    if skipped > 0 {
        warn!(file = %path.display(), skipped, "lines that are not kept names were skipped");
    }
    Ok(kept)
}

/// What an edge that starts finds in `path`: each name held for its owner
/// again (unless `restore` is off: a cluster's edge), and the names served
/// before expected back. Their agents learn that their connection is gone
/// at their next packet (the new edge's stateless reset), at the latest at
/// their idle timeout, and a request waits `reconnect_wait` for its agent
/// besides.
pub fn start<T: Clone>(
    routes: &RouteTable<T>,
    path: &Path,
    reconnect_wait: Duration,
    restore: bool,
) {
    let kept = match load(path) {
        Ok(kept) => kept,
        Err(err) => {
            warn!(%err, "the names served before this start are not known");
            return;
        }
    };
    let now = Instant::now();
    if restore {
        for k in &kept {
            if let Some(account) = &k.account {
                routes.restore(k.name.clone(), account, k.served, now + k.until);
            }
        }
    }
    let served = kept.into_iter().filter(|k| k.served).map(|k| k.name);
    routes.expect_back(served, now + calvin_proto::IDLE_TIMEOUT + reconnect_wait);
}

/// Keeps `path` holding the names `routes` serves and holds until `stop`
/// is set, then writes it a last time.
pub async fn keep<T: Clone + Send + Sync + 'static>(
    routes: Arc<RouteTable<T>>,
    path: PathBuf,
    mut stop: watch::Receiver<bool>,
) {
    let mut written: Option<Vec<(PreviewName, Option<AccountId>, bool)>> = None;
    loop {
        tokio::select! {
            () = routes.served_changed().notified() => {}
            _ = stop.wait_for(|stop| *stop) => break,
        }
        write(&routes, &path, &mut written).await;
        tokio::select! {
            () = tokio::time::sleep(EVERY) => {}
            _ = stop.wait_for(|stop| *stop) => break,
        }
    }
    write(&routes, &path, &mut written).await;
}

/// Writes the table's names to `path` unless they are what was written
/// last (a live name's lease, from now, is not a change).
async fn write<T: Clone + Send + Sync + 'static>(
    routes: &RouteTable<T>,
    path: &Path,
    written: &mut Option<Vec<(PreviewName, Option<AccountId>, bool)>>,
) {
    let mut kept = routes.kept_names();
    kept.sort_by(|a, b| a.name.cmp(&b.name));
    let shape: Vec<_> = kept
        .iter()
        .map(|k| (k.name.clone(), k.account.clone(), k.served))
        .collect();
    if written.as_ref() == Some(&shape) {
        return;
    }
    let now = unix_now();
    let text: String = kept
        .into_iter()
        .map(|k| Line {
            name: k.name,
            account: k.account.map(|a| a.as_str().to_owned()),
            served: k.served,
            until: now + k.until.as_secs(),
        })
        .filter_map(|line| serde_json::to_string(&line).ok())
        .map(|line| line + "\n")
        .collect();
    let target = path.to_owned();
    let done = tokio::task::spawn_blocking(move || state_files::write_private(&target, &text))
        .await
        .map_err(|err| err.to_string())
        .and_then(|r| r.map_err(|err| err.to_string()));
    match done {
        Ok(()) => *written = Some(shape),
        Err(err) => warn!(%err, "cannot keep the names served in the state folder"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::route_table::Lookup;

    fn name(s: &str) -> PreviewName {
        PreviewName::parse(s).expect("name")
    }

    const DAY: Duration = Duration::from_secs(86_400);

    fn names(kept: &[Kept]) -> Vec<(String, Option<String>, bool)> {
        let mut all: Vec<_> = kept
            .iter()
            .map(|k| {
                let account = k.account.as_ref().map(|a| a.as_str().to_owned());
                (k.name.to_string(), account, k.served)
            })
            .collect();
        all.sort();
        all
    }

    fn own(name: &str, account: &str, served: bool) -> (String, Option<String>, bool) {
        (name.to_owned(), Some(account.to_owned()), served)
    }

    #[test]
    fn no_file_is_no_names_and_bad_or_past_lines_are_skipped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(FILE);
        assert!(load(&path).expect("load").is_empty());
        let later = unix_now() + 60;
        let text = format!(
            "{{\"name\":\"web\",\"account\":\"alice\",\"served\":true,\"until\":{later}}}\n\
             not json\n\
             {{\"name\":\"Not A Name\",\"served\":true,\"until\":{later}}}\n\
             {{\"name\":\"old\",\"account\":\"alice\",\"served\":true,\"until\":5}}\n\
             {{\"name\":\"api\",\"served\":true,\"until\":{later}}}\n"
        );
        std::fs::write(&path, text).expect("write");
        let kept = load(&path).expect("load");
        assert_eq!(
            names(&kept),
            vec![("api".to_owned(), None, true), own("web", "alice", true)]
        );
    }

    /// What an edge keeps is what the next one holds and expects: the
    /// served names back for their owners, offline and coming back; a
    /// taken-down one reserved; another account refused either.
    #[tokio::test]
    async fn the_file_follows_the_table_and_the_next_start_holds_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(FILE);
        let routes = Arc::new(RouteTable::<u32>::new(DAY, 10));
        let (stop_tx, stop) = watch::channel(false);
        let keeper = tokio::spawn(keep(routes.clone(), path.clone(), stop));
        let (alice, bob) = (AccountId::new("alice"), AccountId::new("bob"));
        let (_, web) = routes
            .claim(Some(name("web")), &alice, |_, _| 1)
            .expect("claim");
        let (_, api) = routes
            .claim(Some(name("api")), &alice, |_, _| 2)
            .expect("claim");
        let read = || names(&load(&path).expect("load"));
        let wait_for = |want: Vec<(String, Option<String>, bool)>| {
            let read = &read;
            async move {
                for _ in 0..100 {
                    if read() == want {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                panic!("the file has {:?}, not {want:?}", read());
            }
        };
        wait_for(vec![own("api", "alice", true), own("web", "alice", true)]).await;
        routes.disconnect(&name("web"), web);
        routes.release(&name("api"), api);
        wait_for(vec![own("api", "alice", false), own("web", "alice", true)]).await;
        routes
            .claim(Some(name("docs")), &bob, |_, _| 3)
            .expect("claim");
        stop_tx.send_replace(true);
        keeper.await.expect("keeper");
        assert_eq!(
            read(),
            vec![
                own("api", "alice", false),
                own("docs", "bob", true),
                own("web", "alice", true)
            ]
        );

        // The next start.
        let next = RouteTable::<u32>::new(DAY, 10);
        start(&next, &path, Duration::from_secs(5), true);
        assert!(matches!(next.lookup(&name("web")), Lookup::Offline));
        assert!(next.is_coming_back(&name("web")) && next.is_coming_back(&name("docs")));
        assert!(matches!(next.lookup(&name("api")), Lookup::Unknown));
        assert!(!next.is_coming_back(&name("api")));
        assert!(next.claim(Some(name("web")), &bob, |_, _| 4).is_err());
        assert!(next.claim(Some(name("api")), &bob, |_, _| 4).is_err());
        // Its owner's agent back: served, no longer coming back.
        next.claim(Some(name("web")), &alice, |_, _| 5)
            .expect("owner");
        assert!(!next.is_coming_back(&name("web")));
        assert!(matches!(next.lookup(&name("web")), Lookup::Live(5)));

        // A cluster's edge holds nothing from the file, and keeps what it
        // expects for the start after.
        let cluster = RouteTable::<u32>::new(DAY, 10);
        start(&cluster, &path, Duration::from_secs(5), false);
        assert!(matches!(cluster.lookup(&name("web")), Lookup::Unknown));
        assert!(cluster.is_coming_back(&name("web")));
        let expected: Vec<String> = names(&cluster.kept_names())
            .into_iter()
            .map(|(n, ..)| n)
            .collect();
        assert_eq!(expected, vec!["docs", "web"]);
    }
}
