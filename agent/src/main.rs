//! `calvin-agent`: parses the command line and runs the library's command.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    // The agent relays bytes; one thread does it without handing tasks
    // and wake-ups between threads.
    calvin_edge::block_on(1, main_async())
}

async fn main_async() -> ExitCode {
    let cli = calvin_agent::cli::Cli::parse();
    calvin_edge::init_tracing();
    match calvin_agent::cli::run(cli).await {
        Ok(code) => code,
        Err(err) => {
            eprintln!("calvin-agent: {err:#}");
            ExitCode::FAILURE
        }
    }
}
