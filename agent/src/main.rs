//! `calvin-agent`: parses the command line and runs the library's command.

use std::process::ExitCode;

use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
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
