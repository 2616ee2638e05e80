//! Log lines written to stderr in batches by a thread of their own, for
//! lines a process writes once per request (the edge's access log).
//!
//! A request's line is copied into a shared buffer (no allocation once the
//! buffer has grown, no system call); the first line of a batch wakes the
//! writer thread, which waits [`GATHER`] for more and writes them all with
//! one `write`. At 20,000 requests a second that is about one write per 200
//! lines, where stderr took one per line; a slow terminal or disk holds up
//! only the writer thread. When the buffer is full (the writer is that far
//! behind), a line is dropped and counted ([`dropped`]), never waited for.
//!
//! tracing-appender's `non_blocking` was the first choice; its worker wakes
//! for each line sent while it waits and flushes when its channel is empty,
//! so under a steady load of requests it writes about one line per write,
//! with a futex wake per line on the request's thread.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::Duration;

/// How long the writer gathers lines after the first of a batch.
pub const GATHER: Duration = Duration::from_millis(10);

/// The most bytes waiting to be written; past it, lines are dropped.
pub const MAX_PENDING: usize = 4 << 20;

struct Shared {
    pending: Mutex<Pending>,
    woken: Condvar,
    dropped: AtomicU64,
    /// The most bytes waiting ([`MAX_PENDING`]).
    cap: usize,
    /// How long a batch gathers ([`GATHER`]).
    gather: Duration,
}

#[derive(Default)]
struct Pending {
    lines: Vec<u8>,
    /// Set while the writer writes a batch it took.
    writing: bool,
    /// Set by [`flush`]: the batch is written without gathering more.
    hurry: bool,
}

static SHARED: OnceLock<&'static Shared> = OnceLock::new();

fn shared() -> &'static Shared {
    SHARED.get_or_init(|| Shared::start(MAX_PENDING, GATHER, std::io::stderr()))
}

impl Shared {
    /// A buffer of at most `cap` bytes and its writer thread, writing to
    /// `out` batches gathered for `gather`.
    fn start(cap: usize, gather: Duration, mut out: impl Write + Send + 'static) -> &'static Self {
        let shared: &'static Self = Box::leak(Box::new(Self {
            pending: Mutex::new(Pending::default()),
            woken: Condvar::new(),
            dropped: AtomicU64::new(0),
            cap,
            gather,
        }));
        let started = std::thread::Builder::new()
            .name("calvin-log".into())
            .spawn(move || shared.write_batches(&mut out));
        if let Err(err) = started {
            eprintln!("cannot start the log writer thread ({err}); batched lines are dropped");
        }
        shared
    }

    /// The writer thread: waits for a first line, gathers for `gather`
    /// (or until a flush), and writes what came with one write.
    fn write_batches(&self, out: &mut impl Write) {
        let mut batch = Vec::new();
        loop {
            {
                let mut pending = self.lock();
                pending.writing = false;
                self.woken.notify_all();
                while pending.lines.is_empty() {
                    pending = self.wait(pending, None);
                }
                let until = std::time::Instant::now() + self.gather;
                while !pending.hurry && std::time::Instant::now() < until {
                    pending = self.wait(pending, Some(until));
                }
                std::mem::swap(&mut pending.lines, &mut batch);
                pending.writing = true;
                pending.hurry = false;
            }
            // Nothing to tell of a log that cannot be written.
            let _ = out.write_all(&batch).and_then(|()| out.flush());
            batch.clear();
            // A burst's buffer is not kept for ever.
            batch.shrink_to(64 << 10);
        }
    }

    /// Waits to be woken, or until `until`.
    fn wait<'a>(
        &self,
        pending: std::sync::MutexGuard<'a, Pending>,
        until: Option<std::time::Instant>,
    ) -> std::sync::MutexGuard<'a, Pending> {
        match until {
            None => self
                .woken
                .wait(pending)
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
            Some(until) => {
                let left = until.saturating_duration_since(std::time::Instant::now());
                let (pending, _) = self
                    .woken
                    .wait_timeout(pending, left)
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                pending
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn push(&self, line: &[u8]) {
        let mut pending = self.lock();
        if pending.lines.len() + line.len() > self.cap {
            drop(pending);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let first = pending.lines.is_empty();
        pending.lines.extend_from_slice(line);
        drop(pending);
        if first {
            self.woken.notify_all();
        }
    }

    fn flush(&self, limit: Duration) {
        let deadline = std::time::Instant::now() + limit;
        let mut pending = self.lock();
        while !pending.lines.is_empty() || pending.writing {
            if std::time::Instant::now() >= deadline {
                return;
            }
            if !pending.lines.is_empty() {
                pending.hurry = true;
                self.woken.notify_all();
            }
            pending = self.wait(pending, Some(deadline));
        }
    }
}

/// Adds one line (or several whole ones) to the next batch, or drops it
/// when [`MAX_PENDING`] bytes already wait.
pub fn push(line: &[u8]) {
    shared().push(line);
}

/// Lines dropped so far because the writer was [`MAX_PENDING`] behind.
pub fn dropped() -> u64 {
    SHARED
        .get()
        .map_or(0, |shared| shared.dropped.load(Ordering::Relaxed))
}

/// Waits (up to `limit`) until every line pushed so far is written: at a
/// process's end, so that its last requests' lines are not lost.
pub fn flush(limit: Duration) {
    if let Some(shared) = SHARED.get() {
        shared.flush(limit);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    /// A gathering time no test reaches: a batch is written by its flush.
    const LONG: Duration = Duration::from_secs(600);

    /// A writer that records what it is given, and how many writes.
    #[derive(Clone, Default)]
    struct Recorded(Arc<Mutex<(Vec<u8>, usize)>>);

    impl Write for Recorded {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let mut got = self.0.lock().unwrap();
            got.0.extend_from_slice(buf);
            got.1 += 1;
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_burst_of_lines_is_written_whole_in_order_in_a_few_writes() {
        let out = Recorded::default();
        let shared = Shared::start(MAX_PENDING, LONG, out.clone());
        let lines: Vec<String> = (0..1000).map(|i| format!("line {i}\n")).collect();
        for line in &lines {
            shared.push(line.as_bytes());
        }
        shared.flush(Duration::from_secs(5));
        let (written, writes) = out.0.lock().unwrap().clone();
        assert_eq!(String::from_utf8(written).unwrap(), lines.concat());
        assert_eq!(writes, 1, "1,000 lines pushed at once");
        assert_eq!(shared.dropped.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn lines_past_the_cap_are_dropped_and_counted_never_waited_for() {
        let out = Recorded::default();
        // 10 bytes a line: the cap holds exactly 3.
        let shared = Shared::start(30, LONG, out.clone());
        for i in 0..5 {
            shared.push(format!("line {i:04}\n").as_bytes());
        }
        shared.flush(Duration::from_secs(5));
        let (written, _) = out.0.lock().unwrap().clone();
        assert_eq!(written, b"line 0000\nline 0001\nline 0002\n");
        assert_eq!(shared.dropped.load(Ordering::Relaxed), 2);
    }
}
