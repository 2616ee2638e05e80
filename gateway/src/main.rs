//! `calvin-gateway`: the MCP server "calvin" over stdio (`mcp`, one process
//! per session) or streamable HTTP (`serve`, one daemon, which also holds
//! the chat platform's events: Slack's Socket Mode, or Mattermost's
//! WebSocket and integration callbacks).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use calvin_common::{Fact, LogFormat, tell};
use calvin_gateway::check_config;
use calvin_gateway::config::GatewayConfig;
use calvin_gateway::mattermost::callbacks::Callbacks;
use calvin_gateway::mattermost::events::MattermostEvents;
use calvin_gateway::metrics::Metrics;
use calvin_gateway::process::{
    Assembled, EventSource, Events, MattermostSource, Process, assemble,
};
use calvin_gateway::server::{self, DaemonSetup};
use calvin_gateway::session::{Model, PermissionMode, SessionContext, check_ids, default_env_file};
use calvin_gateway::socket_mode::SocketMode;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "calvin-gateway",
    version,
    about = "calvin's MCP server for AI coding sessions"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    log: calvin_common::LogArgs,
}

/// A session as the flags (or the runner's environment) give it.
#[derive(clap::Args)]
struct SessionFlags {
    /// Channel id of the session's thread (Slack's C…/G…/D…, or a
    /// Mattermost channel id)
    #[arg(long, env = "CALVIN_CHANNEL")]
    channel: String,
    /// The thread's first message: Slack's ts, or a Mattermost post id
    #[arg(long, env = "CALVIN_THREAD_TS")]
    thread_ts: String,
}

#[derive(Subcommand)]
enum Command {
    /// Serve one session over stdio (how a coding CLI spawns MCP servers)
    Mcp {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        #[command(flatten)]
        session: SessionFlags,
        /// The session directory (send_file's relative paths start here)
        #[arg(long, env = "CALVIN_SESSION_DIR")]
        session_dir: PathBuf,
        /// User id of the session's owner
        #[arg(long, env = "CALVIN_OWNER")]
        owner: Option<String>,
        /// The CLI's permission mode; spawned sessions get the same
        #[arg(
            long,
            env = "CALVIN_PERMISSION_MODE",
            value_enum,
            default_value = "ask"
        )]
        permission_mode: PermissionMode,
        /// The session's model tier; spawned sessions get it by default
        #[arg(long, env = "CALVIN_MODEL", value_enum, default_value = "default")]
        model: Model,
        /// The branch of checkout_repo's worktrees [default: calvin/<thread-ts>]
        #[arg(long, env = "CALVIN_BRANCH")]
        branch: Option<String>,
        /// The env file the session's shells source (BASH_ENV) [default: see env-file]
        #[arg(long, env = "CALVIN_ENV_FILE", value_name = "PATH")]
        env_file: Option<PathBuf>,
        /// Socket for calvin-send-file [default: <session-dir>/.calvin/send-file.sock]
        #[arg(long, env = server::SEND_FILE_SOCKET_ENV, value_name = "PATH")]
        send_file_socket: Option<PathBuf>,
    },
    /// Serve sessions over streamable HTTP on loopback, and the chat's events
    Serve {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// Overrides [serve] listen
        #[arg(long, value_name = "ADDR")]
        listen: Option<SocketAddr>,
    },
    /// Print the default env file of a session (set BASH_ENV to it)
    EnvFile {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        #[command(flatten)]
        session: SessionFlags,
    },
    /// Check a configuration file without starting: every problem, with
    /// its key and line, and exit 1; or a one-line summary and exit 0.
    /// The other commands run the same checks before they start.
    CheckConfig {
        #[arg(value_name = "FILE")]
        config: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let format = cli.log.format;
    init_tracing(format);
    calvin_common::json_panics(format);
    let stdio = matches!(cli.command, Command::Mcp { .. });
    let failed = |err: &dyn std::fmt::Display| {
        calvin_common::say(
            format,
            calvin_common::Level::ERROR,
            &format!("calvin-gateway: {err:#}"),
        );
        ExitCode::FAILURE
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => return failed(&err),
    };
    let code = match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => failed(&format!("{err:#}")),
    };
    if stdio {
        // A stdio session's stdin is read on a blocking thread, which a
        // session ended by a signal leaves waiting: the process does not
        // wait for it.
        runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    }
    code
}

/// Logs to stderr in `format`: stdout carries MCP over stdio. Slack's
/// client, its WebSocket and the MCP library log payloads (a submitted
/// secret, a tool call's arguments) below info: those targets never log
/// below info, whatever RUST_LOG says (a second filter beside the user's,
/// which RUST_LOG cannot loosen). JSON lines carry the time, level,
/// target, the event's fields and the spans it is in.
fn init_tracing(format: LogFormat) {
    use tracing_subscriber::Layer;
    use tracing_subscriber::filter::FilterExt;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let wanted = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let capped = tracing_subscriber::filter::filter_fn(|meta| {
        // rmcp logs each tool call's arguments, where a model may have
        // pasted a secret.
        let carries_payloads = ["slack_morphism", "tungstenite", "tokio_tungstenite", "rmcp"]
            .iter()
            .any(|t| {
                meta.target() == *t
                    || meta
                        .target()
                        .strip_prefix(t)
                        .is_some_and(|rest| rest.starts_with("::"))
            });
        !carries_payloads || *meta.level() <= tracing::Level::INFO
    });
    let layer = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let layer = match format {
        LogFormat::Text => layer.with_ansi(false).boxed(),
        LogFormat::Json => layer
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(true)
            .boxed(),
    };
    let _ = tracing_subscriber::registry()
        .with(layer.with_filter(wanted.and(capped)))
        .try_init();
}

/// Ctrl-C or SIGTERM: the daemon drains, a stdio gateway ends its session
/// (taking its previews down).
async fn stop_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(term) => term,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

/// What brings the platform's events to a daemon, running.
#[derive(Default)]
struct Listening {
    socket_mode: Option<SocketMode>,
    mattermost: Option<MattermostEvents>,
    callbacks: Option<Callbacks>,
}

impl Listening {
    async fn shutdown(self) {
        if let Some(callbacks) = self.callbacks {
            callbacks.shutdown().await;
        }
        if let Some(socket_mode) = self.socket_mode {
            socket_mode.shutdown().await;
        }
        if let Some(mattermost) = self.mattermost {
            mattermost.shutdown().await;
        }
    }
}

/// Starts Socket Mode, or Mattermost's WebSocket and callback listener.
async fn start_events(
    source: EventSource,
    hub: std::sync::Arc<calvin_gateway::events::EventHub>,
    metrics: &Metrics,
) -> anyhow::Result<Listening> {
    let mut listening = Listening::default();
    match source {
        EventSource::SocketMode(config) => {
            listening.socket_mode = Some(
                SocketMode::start(config, hub, metrics.clone())
                    .await
                    .context("Socket Mode")?,
            );
        }
        EventSource::Mattermost(source) => {
            let MattermostSource { events, callbacks } = *source;
            if let Some((at, key)) = callbacks {
                let listener = tokio::net::TcpListener::bind(at).await.with_context(|| {
                    format!(
                        "cannot listen for Mattermost's callbacks on {at} (change [mattermost] \
                         callback_listen)"
                    )
                })?;
                let started = Callbacks::start(listener, key, hub.clone(), metrics.clone())
                    .context("Mattermost's callback listener")?;
                tracing::info!(listen = %started.local_addr(), "Mattermost's callbacks heard");
                listening.callbacks = Some(started);
            }
            listening.mattermost = Some(
                MattermostEvents::start(events, hub, metrics.clone())
                    .context("Mattermost's WebSocket")?,
            );
        }
    }
    Ok(listening)
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let format = cli.log.format;
    match cli.command {
        Command::Mcp {
            config,
            session,
            session_dir,
            owner,
            permission_mode,
            model,
            branch,
            env_file,
            send_file_socket,
        } => {
            let (config, _) = checked(&config, "; nothing was started", format)?;
            let session_dir = std::path::absolute(&session_dir)
                .with_context(|| format!("session directory {}", session_dir.display()))?;
            let mut context = SessionContext {
                channel: session.channel,
                thread_ts: session.thread_ts,
                session_dir,
                owner,
                permission_mode,
                model,
                branch,
                env_file,
            };
            context
                .check(config.platform())
                .map_err(anyhow::Error::msg)?;
            context.resolve_env_file(&config.runtime_dir());
            let metrics = Metrics::default();
            let gateway = assemble(&config, Process::Stdio, &metrics)?.gateway;
            server::serve_stdio(gateway, context, send_file_socket, metrics, stop_signal()).await
        }
        Command::Serve {
            config: path,
            listen,
        } => {
            let (config, _) = checked(&path, "; nothing was started", format)?;
            let addr = listen.unwrap_or(config.serve.listen);
            anyhow::ensure!(
                addr.ip().is_loopback(),
                "--listen {addr}: the gateway daemon listens on loopback only"
            );
            let (token_file, token) = config.registration_token()?;
            let metrics = Metrics::default();
            let Assembled { gateway, events } = assemble(&config, Process::Daemon, &metrics)?;
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr} (change [serve] listen)"))?;
            let metrics_listener = match config.serve.metrics {
                Some(at) => Some(tokio::net::TcpListener::bind(at).await.with_context(|| {
                    format!(
                        "cannot listen for metrics on {at} (change [serve] metrics in {}; \"\" \
                         turns it off)",
                        path.display()
                    )
                })?),
                None => None,
            };
            let (hub, listening) = match events {
                Some(Events { hub, source }) => {
                    let started = start_events(source, hub.clone(), &metrics).await?;
                    (Some(hub), started)
                }
                None => {
                    tracing::info!(
                        "no Slack app token: Slack's events are not received (request_secret refuses)"
                    );
                    (None, Listening::default())
                }
            };
            let http = listener.local_addr()?;
            let metrics_addr = match &metrics_listener {
                Some(l) => Some(l.local_addr()?),
                None => None,
            };
            tracing::info!(
                version = env!("CARGO_PKG_VERSION"),
                mode = config.mode.as_str(),
                listen = %http,
                metrics = metrics_addr.map(|a| a.to_string()).unwrap_or_default(),
                events = hub.is_some(),
                secrets = %gateway.secret_store_said(),
                "calvin-gateway serving"
            );
            let serving_metrics = metrics_listener.map(|l| {
                let counts = metrics.clone();
                tokio::spawn(calvin_common::metrics_http::serve(l, move || {
                    counts.encode()
                }))
            });
            let mut facts = vec![
                Fact::new("url", "listening", format_args!("http://{http}")),
                Fact::new("token_file", "token file", token_file.display()),
            ];
            if let Some(at) = metrics_addr {
                facts.push(Fact::new("metrics", "listening metrics", at));
            }
            tell(format, "listening", &facts);
            let setup = DaemonSetup {
                gateway,
                hub,
                allowed_origins: config.serve.allowed_origins,
                registration_token: token,
                metrics,
            };
            let env_files = server::serve_http(setup, listener, stop_signal()).await?;
            if let Some(task) = serving_metrics {
                task.abort();
            }
            // No secret can be set once the events are closed: then the
            // sessions' env files go.
            listening.shutdown().await;
            for env_file in env_files {
                calvin_gateway::session_env::end(&env_file);
            }
            Ok(())
        }
        Command::EnvFile { config, session } => {
            let (config, _) = checked(&config, "; nothing was started", format)?;
            check_ids(config.platform(), &session.channel, &session.thread_ts)
                .map_err(anyhow::Error::msg)?;
            let env_file =
                default_env_file(&config.runtime_dir(), &session.channel, &session.thread_ts);
            println!("{}", env_file.display());
            Ok(())
        }
        Command::CheckConfig { config } => {
            let (_, summary) = checked(&config, "", format)?;
            let summary = Fact::new("summary", "", summary);
            tell(format, "configuration checked", &[summary]);
            Ok(())
        }
    }
}

/// The configuration at `path` if it has no problem; else each problem on
/// a line of its own (stderr) and an error that counts them.
fn checked(path: &Path, then: &str, format: LogFormat) -> anyhow::Result<(GatewayConfig, String)> {
    check_config::check(path).map_err(|problems| {
        for problem in &problems {
            calvin_common::say(format, calvin_common::Level::ERROR, &problem.to_string());
        }
        let n = problems.len();
        anyhow::anyhow!(
            "{} has {n} problem{}{then}",
            path.display(),
            if n == 1 { "" } else { "s" }
        )
    })
}
