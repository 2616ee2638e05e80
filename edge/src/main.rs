//! `calvin-edge`: parses the command line and runs the library's edge.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use calvin_common::Level;
use calvin_common::{Fact, LogFormat, say, tell};
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
    #[command(flatten)]
    log: calvin_common::LogArgs,
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
    Dev {
        #[command(flatten)]
        args: DevArgs,
        /// Serve /metrics, /healthz and /readyz on ADDR (off by default)
        #[arg(long, value_name = "ADDR")]
        admin: Option<std::net::SocketAddr>,
    },
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
    let cli = Cli::parse();
    let format = cli.log.format;
    calvin_edge::init_tracing(format);
    calvin_common::json_panics(format);
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            say(format, Level::ERROR, &format!("calvin-edge: {err:#}"));
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let format = cli.log.format;
    // Caught before anything starts, so none is lost to the default action.
    let shutdown = calvin_edge::shutdown_signal();
    let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .context("catching SIGHUP")?;
    // A dev edge holds its state folder's lock while it runs, so that a
    // `share --dev` of the same folder and addresses joins it.
    let mut dev_lock = None;
    let edge = match cli.command {
        Command::Serve { config } => {
            let (mut file, _) = checked(&config, "; nothing was started", format)?;
            let (admin, log) = (file.admin.listen.take(), file.log.take());
            let settings = file.into_settings()?;
            let mut edge = Edge::bind(settings).await.map_err(|e| match e {
                StartError::Bind { kind, .. } => anyhow::anyhow!(
                    "{e}\n  (change [listen] {} in {})",
                    kind.to_string().to_lowercase(),
                    config.display()
                ),
                other => other.into(),
            })?;
            if let Some(addr) = admin {
                edge.bind_admin(addr).await.map_err(|e| {
                    anyhow::anyhow!(
                        "cannot listen for admin on {addr}/tcp: {e}\n  (change [admin] listen in {}; \"\" turns it off)",
                        config.display()
                    )
                })?;
            }
            edge.set_access_log(log.access, log.access_query);
            edge
        }
        Command::CheckConfig { config } => {
            let (_, summary) = checked(&config, "", format)?;
            tell(
                format,
                "configuration checked",
                &[Fact::new("summary", "", summary)],
            );
            return Ok(());
        }
        Command::Dev { args, admin } => {
            // The lock first: while a `share --dev` runs this folder's edge
            // (or is taking it over), this one does not start beside it.
            let mut new_ca = false;
            if args.joinable() {
                let state = args.state()?;
                new_ca = state.new_ca;
                dev_lock = calvin_edge::dev::DevLock::try_take(&state.dir)?;
                anyhow::ensure!(
                    dev_lock.is_some(),
                    "a share --dev already runs the dev edge of {}; it serves your previews",
                    state.dir.display()
                );
            }
            let (mut edge, state) = args.bind().await?;
            let new_ca = new_ca || state.new_ca;
            if let Some(addr) = admin {
                edge.bind_admin(addr).await.map_err(|e| {
                    anyhow::anyhow!(
                        "cannot listen for admin on {addr}/tcp: {e} (pass --admin ADDR)"
                    )
                })?;
            }
            if new_ca {
                let note = format!(
                    "made a new local CA: trust {} (it can vouch only for {} and localhost)",
                    state.ca_path().display(),
                    args.domain
                );
                say(format, Level::WARN, &note);
            }
            let facts = [
                Fact::new("state", "state", state.dir.display()),
                Fact::new("ca", "ca", state.ca_path().display()),
                Fact::new("token", "token", state.token_path().display()),
            ];
            tell(format, "dev edge state", &facts);
            edge
        }
    };
    print_bound(edge.bound(), format);
    let renewal = edge.renewal();
    tokio::spawn(async move {
        while hangup.recv().await.is_some() {
            renewal.renew_now();
        }
    });
    edge.run(shutdown).await;
    drop(dev_lock);
    Ok(())
}

/// The configuration at `path` if it has no problem; else each problem on
/// a line of its own (stderr) and an error that counts them.
fn checked(path: &Path, then: &str, format: LogFormat) -> anyhow::Result<(ConfigFile, String)> {
    check_config::check(path).map_err(|problems: Vec<Problem>| {
        for problem in &problems {
            say(format, Level::ERROR, &problem.to_string());
        }
        let n = problems.len();
        anyhow::anyhow!(
            "{} has {n} problem{}{then}",
            path.display(),
            if n == 1 { "" } else { "s" }
        )
    })
}

/// Each listener with the address really bound, and the previews' URLs:
/// a line each in text, one event in JSON.
fn print_bound(bound: &Bound, format: LogFormat) {
    let listeners = [
        ("https", "listening https", bound.https, "tcp"),
        ("http", "listening http", bound.http, "tcp"),
        ("quic", "listening quic", Some(bound.quic), "udp"),
        ("dns", "listening dns", bound.dns, "udp+tcp"),
        ("admin", "listening admin", bound.admin, "tcp"),
        ("peer", "listening peer", bound.peer, "udp"),
    ];
    let mut facts: Vec<Fact> = listeners
        .into_iter()
        .filter_map(|(key, label, addr, transport)| {
            addr.map(|addr| Fact::new(key, label, format_args!("{addr}/{transport}")))
        })
        .collect();
    facts.push(Fact::new("previews", "previews", &bound.url_template));
    tell(format, "listening", &facts);
}
