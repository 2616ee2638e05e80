//! `calvin-bench`: parses the command line and runs one measurement.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = calvin_bench::Cli::parse();
    // One thread: the load program should take as little of the machine
    // from what it measures as it can (the pacer of `rate` is its own);
    // `load --threads N` takes as many as wrk's -t it stands beside.
    let threads = match &cli.command {
        calvin_bench::Command::Load(args) => args.threads,
        _ => 1,
    };
    let mut builder = if threads > 1 {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        builder.worker_threads(threads);
        builder
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    let runtime = match builder.enable_all().build() {
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
