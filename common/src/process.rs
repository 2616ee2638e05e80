//! What a calvin process (the edge, the agent) runs on: its tokio runtime,
//! its open-files limit, its log and its shutdown signals.

use std::future::Future;

pub use crate::LogFormat;

/// Logs to stderr in `format`; `RUST_LOG` filters (default
/// `default_filter`). JSON lines carry the time, level, target, the
/// event's fields and the spans it is in (a visitor request's id, an
/// agent connection's address and account).
pub fn init_tracing(default_filter: &str, format: LogFormat) {
    let _ = LOG_FORMAT.set(format);
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(true)
            .try_init(),
    };
}

/// The tokio runtime a calvin process runs on. `CALVIN_THREADS` picks
/// its worker threads; 1 (or `default_threads` of 1 when unset) is a
/// single-threaded runtime, which spends no time handing tasks and wake-ups
/// between threads.
fn runtime(default_threads: usize) -> Result<tokio::runtime::Runtime, String> {
    let value = std::env::var("CALVIN_THREADS").ok();
    let threads = runtime_threads(value.as_deref(), default_threads)?;
    let mut builder = if threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(threads);
        b
    };
    builder
        .enable_all()
        .build()
        .map_err(|err| format!("cannot start the tokio runtime: {err}"))
}

/// The worker threads `CALVIN_THREADS` asks for (1 to 1,024), or the
/// default when it is unset.
fn runtime_threads(value: Option<&str>, default_threads: usize) -> Result<usize, String> {
    let Some(value) = value else {
        return Ok(default_threads.max(1));
    };
    match value.trim().parse::<usize>() {
        Ok(n @ 1..=1024) => Ok(n),
        _ => Err(format!(
            "CALVIN_THREADS must be a number of threads from 1 to 1024, not {value:?}"
        )),
    }
}

static LOG_FORMAT: std::sync::OnceLock<LogFormat> = std::sync::OnceLock::new();

/// The format [`init_tracing`] set, for lines a process writes itself in
/// the log's format (the edge's access lines).
pub fn log_format() -> LogFormat {
    LOG_FORMAT.get().copied().unwrap_or(LogFormat::Text)
}

/// How long a process's end waits for its batched log lines to be written.
const LAST_LINES: std::time::Duration = std::time::Duration::from_secs(2);

/// Runs a binary's `main` on [`runtime`]; a runtime that cannot start is
/// reported and ends the process with a failure.
pub fn block_on(
    default_threads: usize,
    main: impl Future<Output = std::process::ExitCode>,
) -> std::process::ExitCode {
    raise_open_files_limit();
    match runtime(default_threads) {
        Ok(runtime) => {
            let code = runtime.block_on(main);
            crate::batched_log::flush(LAST_LINES);
            code
        }
        Err(err) => {
            eprintln!("{err}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Raises the soft limit on open files to the hard one, as servers do (Go
/// does it for every program): a busy edge holds a socket per visitor and
/// per connection, an agent one per local connect, and a soft limit of
/// 1,024 (a common default) would refuse connections long before the
/// machine runs out. Needs no privilege; an unlimited hard limit is left
/// alone (the kernel's `nr_open` still caps it).
pub fn raise_open_files_limit() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    if let (Some(current), Some(maximum)) = (limit.current, limit.maximum)
        && current < maximum
    {
        let raised = Rlimit {
            current: Some(maximum),
            maximum: Some(maximum),
        };
        if let Err(err) = setrlimit(Resource::Nofile, raised) {
            eprintln!("cannot raise the open files limit from {current} to {maximum}: {err}");
        }
    }
}

/// Resolves on SIGTERM or Ctrl-C. A second one exits at once. The signals
/// are caught from the call on (not from the first poll), so a signal that
/// comes while the process is starting is not lost to the default action.
pub fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{SignalKind, signal};
    let term = signal(SignalKind::terminate());
    let interrupt = signal(SignalKind::interrupt());
    async move {
        let (Ok(mut term), Ok(mut interrupt)) = (term, interrupt) else {
            let _ = tokio::signal::ctrl_c().await;
            return;
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = interrupt.recv() => {}
        }
        tokio::spawn(async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = interrupt.recv() => {}
            }
            // A log line, in the log's format (text or JSON).
            tracing::warn!("second signal: stopping now");
            crate::batched_log::flush(LAST_LINES);
            std::process::exit(130);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calvin_threads_from_1_to_1024() {
        assert_eq!(runtime_threads(None, 3), Ok(3));
        assert_eq!(runtime_threads(None, 0), Ok(1));
        assert_eq!(runtime_threads(Some("1"), 3), Ok(1));
        assert_eq!(runtime_threads(Some(" 4 "), 1), Ok(4));
        assert_eq!(runtime_threads(Some("1024"), 1), Ok(1024));
        for bad in ["0", "1025", "two", "", "-1"] {
            let err = runtime_threads(Some(bad), 1).unwrap_err();
            assert!(err.contains("CALVIN_THREADS must be"), "{bad:?}: {err}");
        }
    }
}
