//! `calvin-agent`: parses the command line and runs the library's command.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    // The agent relays bytes; one thread does it without handing tasks
    // and wake-ups between threads.
    let runtime = match calvin_edge::runtime(1) {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("cannot start the runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(main_async())
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
