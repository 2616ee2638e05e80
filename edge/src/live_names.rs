//! The names this edge serves, kept in its state folder (`live-names`, one
//! per line), so that an edge started again knows which names were served
//! before it and are coming back with their agents (see
//! [`RouteTable::expect_back`]): those answer "retry shortly" for a while,
//! every other name its real answer at once. A fresh edge has no file, and
//! no name is coming back.
//!
//! The file follows the table: written at the first change, then at most
//! every [`EVERY`], and once more when the edge stops, so that even a
//! killed edge leaves what it served a moment before. It is a hint, not
//! a record: one that cannot be read or written is logged, never fatal.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use calvin_proto::PreviewName;
use tokio::sync::watch;
use tracing::warn;

use crate::route_table::RouteTable;
use crate::state_files::{self, FileError};

/// The file's name in the state folder.
pub const FILE: &str = "live-names";

/// The least time between two writes: a burst of claims (a thousand agents
/// coming back) is one write, not a thousand.
const EVERY: Duration = Duration::from_millis(250);

/// The names in `path`; none when there is no file. A line that is not a
/// name is skipped (and said once).
pub fn load(path: &Path) -> Result<Vec<PreviewName>, FileError> {
    let Some(text) = state_files::read_optional(path)? else {
        return Ok(Vec::new());
    };
    let mut names = Vec::new();
    let mut skipped = 0usize;
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        match PreviewName::parse(line) {
            Ok(name) => names.push(name),
            Err(_) => skipped += 1,
        }
    }
    if skipped > 0 {
        warn!(file = %path.display(), skipped, "lines that are not preview names were skipped");
    }
    Ok(names)
}

/// Marks the names in `path` as coming back to `routes`: an edge that
/// restarted. Its agents learn that their connection is gone at their
/// next packet (the new edge's stateless reset), at the latest at their
/// idle timeout, and a request waits `reconnect_wait` for its agent
/// besides.
pub fn expect_back<T: Clone>(routes: &RouteTable<T>, path: &Path, reconnect_wait: Duration) {
    match load(path) {
        Ok(names) if names.is_empty() => {}
        Ok(names) => {
            let window = calvin_proto::IDLE_TIMEOUT + reconnect_wait;
            routes.expect_back(names, std::time::Instant::now() + window);
        }
        Err(err) => warn!(%err, "the names served before this start are not known"),
    }
}

/// Keeps `path` holding the names `routes` serves (or holds offline) until
/// `stop` is set, then writes it a last time.
pub async fn keep<T: Clone + Send + Sync + 'static>(
    routes: Arc<RouteTable<T>>,
    path: PathBuf,
    mut stop: watch::Receiver<bool>,
) {
    let mut written: Option<Vec<PreviewName>> = None;
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

/// Writes the table's names to `path` unless they are those written last.
async fn write<T: Clone + Send + Sync + 'static>(
    routes: &RouteTable<T>,
    path: &Path,
    written: &mut Option<Vec<PreviewName>>,
) {
    let mut names = routes.served_names();
    names.sort();
    if written.as_ref() == Some(&names) {
        return;
    }
    let text: String = names.iter().map(|n| format!("{n}\n")).collect();
    let target = path.to_owned();
    let done = tokio::task::spawn_blocking(move || state_files::write_private(&target, &text))
        .await
        .map_err(|err| err.to_string())
        .and_then(|r| r.map_err(|err| err.to_string()));
    match done {
        Ok(()) => *written = Some(names),
        Err(err) => warn!(%err, "cannot keep the names served in the state folder"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accounts::AccountId;

    fn name(s: &str) -> PreviewName {
        PreviewName::parse(s).expect("name")
    }

    #[test]
    fn no_file_is_no_names_and_bad_lines_are_skipped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(FILE);
        assert!(load(&path).expect("load").is_empty());
        std::fs::write(&path, "web\n\nNot A Name\napi\n").expect("write");
        assert_eq!(load(&path).expect("load"), vec![name("web"), name("api")]);
    }

    #[tokio::test]
    async fn the_file_follows_the_table_and_is_written_at_stop() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(FILE);
        let routes = Arc::new(RouteTable::<u32>::new(Duration::from_secs(60), 10));
        let (stop_tx, stop) = watch::channel(false);
        let keeper = tokio::spawn(keep(routes.clone(), path.clone(), stop));
        let alice = AccountId::new("alice");
        let (_, web) = routes
            .claim(Some(name("web")), &alice, |_, _| 1)
            .expect("claim");
        let (_, api) = routes
            .claim(Some(name("api")), &alice, |_, _| 2)
            .expect("claim");
        let names = || load(&path).expect("load");
        let wait_for = |want: Vec<PreviewName>| {
            let names = &names;
            async move {
                for _ in 0..100 {
                    if names() == want {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                panic!("the file has {:?}, not {want:?}", names());
            }
        };
        wait_for(vec![name("api"), name("web")]).await;
        // Offline (its agent may come back): kept. Taken down: gone.
        routes.disconnect(&name("web"), web);
        routes.release(&name("api"), api);
        wait_for(vec![name("web")]).await;
        routes
            .claim(Some(name("docs")), &alice, |_, _| 3)
            .expect("claim");
        stop_tx.send_replace(true);
        keeper.await.expect("keeper");
        assert_eq!(names(), vec![name("docs"), name("web")]);
    }
}
