//! `calvin-agent`: parses the command line and runs the command (`cli`)
//! with the agent library.

use std::process::ExitCode;

use clap::Parser;

mod cli;

/// With the dev edge in the process, its filter (hickory's per-query lines
/// off); else everything at info.
#[cfg(feature = "dev-edge")]
const LOG_FILTER: &str = calvin_edge::DEFAULT_LOG_FILTER;
#[cfg(not(feature = "dev-edge"))]
const LOG_FILTER: &str = "info";

fn main() -> ExitCode {
    // The agent relays bytes; one thread does it without handing tasks
    // and wake-ups between threads.
    calvin_common::process::block_on(1, main_async())
}

async fn main_async() -> ExitCode {
    let cli = cli::Cli::parse();
    calvin_common::process::init_tracing(LOG_FILTER);
    match cli::run(cli).await {
        Ok(code) => code,
        Err(err) => {
            eprintln!("calvin-agent: {err:#}");
            ExitCode::FAILURE
        }
    }
}
