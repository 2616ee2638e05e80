//! `calvin-edge`: parses the command line and runs the library's edge.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use calvin_edge::check_config::{self, Problem};
use calvin_edge::config::ConfigFile;
use calvin_edge::dev::DevArgs;
use calvin_edge::{Bound, Edge, StartError};
use clap::{Parser, Subcommand};

/// mimalloc instead of glibc's allocator: a request's few allocations of a
/// kilobyte or more made glibc consolidate its small-chunk bins on every
/// request (perf: `malloc_consolidate`, `unlink_chunk` and `_int_free`
/// were ~5% of the edge's CPU on 1 KiB GETs).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "calvin-edge",
    version,
    about = "calvin's public server: gives local HTTP servers a public URL"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a public edge from a configuration file. SIGHUP renews an ACME
    /// certificate now, or reads [tls] certificate files again.
    Serve {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
    },
    /// Run an edge for this machine only, with a local CA (no configuration)
    Dev(DevArgs),
    /// Check a configuration file without starting: every problem, with
    /// its key and line, and exit 1; or a one-line summary and exit 0.
    /// `serve` runs the same checks before it starts.
    CheckConfig {
        #[arg(value_name = "FILE")]
        config: PathBuf,
    },
}

fn main() -> ExitCode {
    // One core is left to the kernel's network work (on loopback it also
    // runs the receiving side of every send): on 2 cores one thread served
    // 8-13% more 1 KiB GETs and 40% more download than two (bench/).
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    calvin_edge::block_on(cores.saturating_sub(1).max(1), main_async())
}

async fn main_async() -> ExitCode {
    calvin_edge::init_tracing();
    match run(Cli::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("calvin-edge: {err:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    // Caught before anything starts, so none is lost to the default action.
    let shutdown = calvin_edge::shutdown_signal();
    let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .context("catching SIGHUP")?;
    let edge = match cli.command {
        Command::Serve { config } => {
            let (file, _) = checked(&config, "; nothing was started")?;
            let settings = file.into_settings()?;
            Edge::bind(settings).await.map_err(|e| match e {
                StartError::Bind { kind, .. } => anyhow::anyhow!(
                    "{e}\n  (change [listen] {} in {})",
                    kind.to_string().to_lowercase(),
                    config.display()
                ),
                other => other.into(),
            })?
        }
        Command::CheckConfig { config } => {
            let (_, summary) = checked(&config, "")?;
            println!("{summary}");
            return Ok(());
        }
        Command::Dev(args) => {
            let (edge, state) = args.bind().await?;
            if state.new_ca {
                eprintln!(
                    "made a new local CA: trust {} (it can vouch only for {} and localhost)",
                    state.ca_path().display(),
                    args.domain
                );
            }
            println!("state {}", state.dir.display());
            println!("ca {}", state.ca_path().display());
            println!("token {}", state.token_path().display());
            edge
        }
    };
    print_bound(edge.bound());
    let renewal = edge.renewal();
    tokio::spawn(async move {
        while hangup.recv().await.is_some() {
            renewal.renew_now();
        }
    });
    edge.run(shutdown).await;
    Ok(())
}

/// The configuration at `path` if it has no problem; else each problem on
/// a line of its own (stderr) and an error that counts them.
fn checked(path: &Path, then: &str) -> anyhow::Result<(ConfigFile, String)> {
    check_config::check(path).map_err(|problems: Vec<Problem>| {
        for problem in &problems {
            eprintln!("{problem}");
        }
        let n = problems.len();
        anyhow::anyhow!(
            "{} has {n} problem{}{then}",
            path.display(),
            if n == 1 { "" } else { "s" }
        )
    })
}

/// One line per listener, with the address really bound.
fn print_bound(bound: &Bound) {
    if let Some(addr) = bound.https {
        println!("listening https {addr}/tcp");
    }
    if let Some(addr) = bound.http {
        println!("listening http {addr}/tcp");
    }
    println!("listening quic {}/udp", bound.quic);
    if let Some(addr) = bound.dns {
        println!("listening dns {addr}/udp+tcp");
    }
    println!("previews {}", bound.url_template);
}
