//! `calvin-agent`: parses the command line and runs the command (`cli`)
//! with the agent library.

use std::process::ExitCode;

use clap::Parser;

mod cli;

fn main() -> ExitCode {
    // The agent relays bytes; one thread does it without handing tasks
    // and wake-ups between threads.
    calvin_common::process::block_on(1, main_async())
}

async fn main_async() -> ExitCode {
    let cli = cli::Cli::parse();
    let format = cli.log.format;
    calvin_common::process::init_tracing(cli.log_filter(), format);
    calvin_common::json_panics(format);
    match cli::run(cli).await {
        Ok(code) => code,
        Err(err) => {
            calvin_common::say(
                format,
                calvin_common::Level::ERROR,
                &format!("calvin-agent: {err:#}"),
            );
            ExitCode::FAILURE
        }
    }
}
