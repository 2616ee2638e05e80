//! `calvin-gateway`: the MCP server "calvin" over stdio (`mcp`, one process
//! per session) or streamable HTTP (`serve`, one daemon, which also holds
//! Slack's Socket Mode).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use calvin_gateway::config::GatewayConfig;
use calvin_gateway::daemon_client::DaemonClient;
use calvin_gateway::events::EventHub;
use calvin_gateway::secret_request::SecretRequests;
use calvin_gateway::secrets::SecretStore;
use calvin_gateway::server::{self, DaemonSetup};
use calvin_gateway::session::{Model, PermissionMode, SessionContext};
use calvin_gateway::slack;
use calvin_gateway::socket_mode::{SocketMode, SocketModeConfig};
use calvin_gateway::tools::{Gateway, SecretRoute};
use calvin_gateway::workspace::Workspace;
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
}

/// A session as the flags (or the runner's environment) give it.
#[derive(clap::Args)]
struct SessionFlags {
    /// Slack channel id of the session's thread
    #[arg(long, env = "CALVIN_CHANNEL")]
    channel: String,
    /// ts of the thread's parent message
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
        /// Slack user id of the session's owner
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
    /// Serve sessions over streamable HTTP on loopback, and Slack's events
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
}

#[tokio::main]
async fn main() -> ExitCode {
    // stdout carries MCP over stdio: logs go to stderr. Slack's client, its
    // WebSocket and the MCP library log payloads (a submitted secret, a
    // tool call's arguments) below info: those targets never log below
    // info, whatever RUST_LOG says (a second filter beside the user's,
    // which RUST_LOG cannot loosen).
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
    let _ = tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(false)
                .with_filter(wanted.and(capped)),
        )
        .try_init();
    match run(Cli::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("calvin-gateway: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// Which process this is: where request_secret's clicks are handled.
enum Process {
    Stdio,
    Daemon,
}

fn gateway(
    config: &GatewayConfig,
    process: Process,
) -> anyhow::Result<(Arc<Gateway>, Option<Arc<EventHub>>)> {
    let chat =
        slack::backend(&config.slack.api_url, config.bot_token()?).context("the Slack client")?;
    let secrets = match &config.secrets.store_dir {
        Some(dir) => SecretStore::from_env(dir).context("the secret store")?,
        None => None,
    };
    let workspace = Workspace::from_config(&config.workspace, &config.dir)
        .map_err(|e| anyhow::anyhow!("[workspace]: {e}"))?
        .map(Arc::new);
    let runtime_dir = config.runtime_dir();
    let mut hub = None;
    let secret_route = match process {
        Process::Daemon => match config.app_token() {
            Some(_) => {
                let requests = Arc::new(SecretRequests::new(
                    chat.clone(),
                    secrets.clone(),
                    runtime_dir.clone(),
                ));
                hub = Some(Arc::new(EventHub::new(requests.clone())));
                SecretRoute::Here(requests)
            }
            None => SecretRoute::Nowhere(
                "no secret was requested: this calvin-gateway serve daemon does not receive \
                 Slack's events (the button click and the form); set [slack] app_token or \
                 SLACK_APP_TOKEN so it connects with Socket Mode"
                    .into(),
            ),
        },
        Process::Stdio => match config.daemon()? {
            Some((url, token)) => SecretRoute::Daemon(Box::new(DaemonClient::new(url, token))),
            None => SecretRoute::Nowhere(
                "no secret was requested: request_secret needs Slack's events (the button click \
                 and the form), which only the calvin-gateway serve daemon receives; set [daemon] \
                 url in gateway.toml to its address (its token comes from [daemon] token_file or \
                 CALVIN_DAEMON_TOKEN)"
                    .into(),
            ),
        },
    };
    let gateway = Gateway {
        mode: config.mode,
        agent_socket: config.agent_socket.clone(),
        chat,
        uploads_enabled: config.uploads.enabled,
        max_upload_bytes: config.uploads.max_bytes,
        secrets,
        workspace,
        launcher: calvin_gateway::config::LauncherConfig {
            command: config.launcher.command.clone(),
            timeout_secs: config.launcher.timeout_secs,
            env: config.launcher.env.clone(),
        },
        code_channels: config.spawn.code_channels.clone(),
        runtime_dir,
        secret_route,
    };
    Ok((Arc::new(gateway), hub))
}

/// Ctrl-C or SIGTERM.
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

async fn run(cli: Cli) -> anyhow::Result<()> {
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
            let config = GatewayConfig::load(&config)?;
            let session_dir = std::path::absolute(&session_dir)
                .with_context(|| format!("session directory {}", session_dir.display()))?;
            let context = SessionContext {
                channel: session.channel,
                thread_ts: session.thread_ts,
                session_dir,
                owner,
                permission_mode,
                model,
                branch,
                env_file,
            };
            context.check().map_err(anyhow::Error::msg)?;
            let (gateway, _) = gateway(&config, Process::Stdio)?;
            server::serve_stdio(gateway, context, send_file_socket).await
        }
        Command::Serve { config, listen } => {
            let config = GatewayConfig::load(&config)?;
            let addr = listen.unwrap_or(config.serve.listen);
            anyhow::ensure!(
                addr.ip().is_loopback(),
                "--listen {addr}: the gateway daemon listens on loopback only"
            );
            let (token_file, token) = config.registration_token()?;
            let (gateway, hub) = gateway(&config, Process::Daemon)?;
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr} (change [serve] listen)"))?;
            let socket_mode = match (&hub, config.app_token()) {
                (Some(hub), Some(app_token)) => Some(
                    SocketMode::start(
                        SocketModeConfig {
                            api_url: config.slack.api_url.clone(),
                            app_token,
                            connections: config.slack.socket_connections,
                            reconnect_secs: config.slack.reconnect_secs,
                        },
                        hub.clone(),
                    )
                    .await
                    .context("Socket Mode")?,
                ),
                _ => {
                    tracing::info!(
                        "no Slack app token: Slack's events are not received (request_secret refuses)"
                    );
                    None
                }
            };
            println!("listening http://{}", listener.local_addr()?);
            println!("token file {}", token_file.display());
            let setup = DaemonSetup {
                gateway,
                hub,
                allowed_origins: config.serve.allowed_origins,
                registration_token: token,
            };
            let env_files = server::serve_http(setup, listener, stop_signal()).await?;
            // No secret can be set once Socket Mode is closed: then the
            // sessions' env files go.
            if let Some(socket_mode) = socket_mode {
                socket_mode.shutdown().await;
            }
            for env_file in env_files {
                calvin_gateway::session_env::end(&env_file);
            }
            Ok(())
        }
        Command::EnvFile { config, session } => {
            let config = GatewayConfig::load(&config)?;
            let context = SessionContext {
                channel: session.channel,
                thread_ts: session.thread_ts,
                session_dir: PathBuf::from("/"),
                owner: None,
                permission_mode: PermissionMode::Ask,
                model: Model::Default,
                branch: None,
                env_file: None,
            };
            context.check().map_err(anyhow::Error::msg)?;
            println!("{}", context.env_file(&config.runtime_dir()).display());
            Ok(())
        }
    }
}
