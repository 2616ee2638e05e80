//! `calvin-bench`: parses the command line and runs one measurement.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = calvin_bench::Cli::parse();
    // One thread: the load program should take as little of the machine
    // from what it measures as it can (the pacer of `rate` is its own).
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("calvin-bench: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(calvin_bench::run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("calvin-bench: {err:#}");
            ExitCode::FAILURE
        }
    }
}
