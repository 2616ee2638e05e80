//! `calvin-gateway`: the MCP server "calvin" over stdio (`mcp`, one process
//! per session) or streamable HTTP (`serve`, one daemon).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use calvin_gateway::config::GatewayConfig;
use calvin_gateway::secrets::SecretStore;
use calvin_gateway::server;
use calvin_gateway::session::SessionContext;
use calvin_gateway::slack::SlackBackend;
use calvin_gateway::tools::Gateway;
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

#[derive(Subcommand)]
enum Command {
    /// Serve one session over stdio (how a coding CLI spawns MCP servers)
    Mcp {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// Slack channel id of the session's thread
        #[arg(long, env = "CALVIN_CHANNEL")]
        channel: String,
        /// ts of the thread's parent message
        #[arg(long, env = "CALVIN_THREAD_TS")]
        thread_ts: String,
        /// The session directory (send_file's relative paths start here)
        #[arg(long, env = "CALVIN_SESSION_DIR")]
        session_dir: PathBuf,
        /// Slack user id of the session's owner
        #[arg(long, env = "CALVIN_OWNER")]
        owner: Option<String>,
        /// Socket for calvin-send-file [default: <session-dir>/.calvin/send-file.sock]
        #[arg(long, env = server::SEND_FILE_SOCKET_ENV, value_name = "PATH")]
        send_file_socket: Option<PathBuf>,
    },
    /// Serve sessions over streamable HTTP on loopback
    Serve {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// Overrides [serve] listen
        #[arg(long, value_name = "ADDR")]
        listen: Option<SocketAddr>,
    },
}

#[tokio::main]
async fn main() -> ExitCode {
    // stdout carries MCP over stdio: logs go to stderr.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
    match run(Cli::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("calvin-gateway: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn gateway(config: &GatewayConfig) -> anyhow::Result<Arc<Gateway>> {
    let chat = SlackBackend::new(&config.slack.api_url, config.bot_token()?)
        .context("the Slack client")?;
    let secrets = match &config.secrets.store_dir {
        Some(dir) => SecretStore::from_env(dir).context("the secret store")?,
        None => None,
    };
    Ok(Arc::new(Gateway {
        mode: config.mode,
        agent_socket: config.agent_socket.clone(),
        chat: Arc::new(chat),
        uploads_enabled: config.uploads.enabled,
        max_upload_bytes: config.uploads.max_bytes,
        secrets,
    }))
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Mcp {
            config,
            channel,
            thread_ts,
            session_dir,
            owner,
            send_file_socket,
        } => {
            let config = GatewayConfig::load(&config)?;
            let session_dir = std::path::absolute(&session_dir)
                .with_context(|| format!("session directory {}", session_dir.display()))?;
            let context = SessionContext {
                channel,
                thread_ts,
                session_dir,
                owner,
            };
            server::serve_stdio(gateway(&config)?, context, send_file_socket).await
        }
        Command::Serve { config, listen } => {
            let config = GatewayConfig::load(&config)?;
            let addr = listen.unwrap_or(config.serve.listen);
            anyhow::ensure!(
                addr.ip().is_loopback(),
                "--listen {addr}: the gateway daemon listens on loopback only"
            );
            let (token_file, token) = config.registration_token()?;
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr} (change [serve] listen)"))?;
            println!("listening http://{}", listener.local_addr()?);
            println!("token file {}", token_file.display());
            let gateway = gateway(&config)?;
            server::serve_http(gateway, listener, config.serve.allowed_origins, token).await
        }
    }
}
