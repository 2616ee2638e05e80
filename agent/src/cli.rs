//! The `calvin-agent` commands.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, anyhow};
#[cfg(feature = "dev-edge")]
use calvin_edge::dev::DevArgs;
use calvin_proto::{Port, PreviewName};
use clap::{Args, Parser, Subcommand};

use calvin_agent::api::{PreviewCreated, PreviewDeleted, PreviewList};
use calvin_agent::control_api;
use calvin_agent::control_client::{Answer, ControlClient};
use calvin_agent::{Agent, EdgeAddress};

/// How long `share` waits for its first connection to the edge.
const FIRST_CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

#[derive(Parser)]
#[command(
    name = "calvin-agent",
    version,
    about = "Gives an HTTP server on a port of this machine a public URL"
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the agent daemon: keep a connection to the edge, serve the control API
    Up {
        #[command(flatten)]
        edge: EdgeArgs,
        #[command(flatten)]
        socket: SocketArg,
    },
    /// Give PORT a public URL (through the running daemon)
    Preview {
        port: i64,
        /// One DNS label; omitted: the port's existing name or a new one
        #[arg(long)]
        name: Option<String>,
        /// Print the control API's JSON answer as it is
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        socket: SocketArg,
    },
    /// Take a preview URL down
    Unpreview {
        name: String,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        socket: SocketArg,
    },
    /// List this machine's previews
    Ls {
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        socket: SocketArg,
    },
    /// Give PORT a public URL and serve it until Ctrl-C (no daemon needed)
    Share(ShareArgs),
}

#[derive(Args)]
struct EdgeArgs {
    /// The edge's QUIC address
    #[arg(long, value_name = "HOST:PORT")]
    edge: String,
    /// File holding this agent's token
    #[arg(long, value_name = "F")]
    token_file: PathBuf,
    /// Trust only this CA for the edge (default: the system's roots)
    #[arg(long, value_name = "PEM")]
    ca: Option<PathBuf>,
    /// The name the edge's certificate must carry (default: HOST)
    #[arg(long, value_name = "NAME")]
    server_name: Option<String>,
}

#[derive(Args)]
struct SocketArg {
    /// The control socket [default: $XDG_RUNTIME_DIR/calvin/agent.sock]
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
}

impl EdgeArgs {
    /// The edge to dial and the token to show it.
    fn open(&self) -> anyhow::Result<(EdgeAddress, String)> {
        let token = read_token(&self.token_file)?;
        let edge = EdgeAddress::new(&self.edge, self.ca.as_deref(), self.server_name.as_deref())?;
        Ok((edge, token))
    }
}

impl SocketArg {
    fn path(&self) -> PathBuf {
        self.socket
            .clone()
            .unwrap_or_else(control_api::default_socket_path)
    }
}

#[derive(Args)]
struct ShareArgs {
    port: i64,
    /// One DNS label; omitted: a generated one
    #[arg(long)]
    name: Option<String>,
    /// Run a dev edge on loopback in this process (no configuration needed)
    #[cfg(feature = "dev-edge")]
    #[arg(
        long,
        conflicts_with = "EdgeArgs",
        required_unless_present = "EdgeArgs"
    )]
    dev: bool,
    #[cfg(feature = "dev-edge")]
    #[command(flatten)]
    dev_edge: DevArgs,
    #[command(flatten)]
    remote: Option<EdgeArgs>,
}

pub async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Up { edge, socket } => up(edge, socket.path()).await,
        Command::Preview {
            port,
            name,
            json,
            socket,
        } => {
            let answer = ControlClient::new(&socket.path())
                .preview(port, name)
                .await?;
            Ok(report(&answer, json, |c: PreviewCreated| {
                println!("{}", c.url);
                if !c.listening {
                    eprintln!(
                        "note: nothing is listening on port {port} yet; the URL works once something does"
                    );
                }
            }))
        }
        Command::Unpreview { name, json, socket } => {
            let answer = ControlClient::new(&socket.path()).unpreview(&name).await?;
            Ok(report(&answer, json, |d: PreviewDeleted| {
                println!("unpreviewed {}", d.name);
            }))
        }
        Command::Ls { json, socket } => {
            let answer = ControlClient::new(&socket.path()).list().await?;
            Ok(report(&answer, json, print_list))
        }
        Command::Share(args) => share(args).await,
    }
}

/// Prints an API answer: as it is with `--json`, else through `human`.
/// Errors go to stderr and make the exit status 1.
fn report<T: serde::de::DeserializeOwned>(
    answer: &Answer,
    json: bool,
    human: impl FnOnce(T),
) -> ExitCode {
    if json {
        println!("{}", String::from_utf8_lossy(&answer.body));
    }
    match answer.parse::<T>() {
        Ok(value) => {
            if !json {
                human(value);
            }
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("calvin-agent: {}", err.error);
            ExitCode::FAILURE
        }
    }
}

fn print_list(list: PreviewList) {
    if !list.connected {
        eprintln!("note: the agent is not connected to its edge now");
    }
    if list.previews.is_empty() {
        eprintln!("no previews");
        return;
    }
    let width = list
        .previews
        .iter()
        .map(|p| p.name.len())
        .max()
        .unwrap_or(4)
        .max(4);
    println!("{:width$}  {:>5}  URL", "NAME", "PORT");
    for p in list.previews {
        println!("{:width$}  {:>5}  {}", p.name, p.port, p.url);
    }
}

fn read_token(path: &Path) -> anyhow::Result<String> {
    let token = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the token file {}", path.display()))?;
    let token = token.trim().to_owned();
    if token.is_empty() {
        return Err(anyhow!("the token file {} is empty", path.display()));
    }
    Ok(token)
}

async fn up(args: EdgeArgs, socket: PathBuf) -> anyhow::Result<ExitCode> {
    let (edge, token) = args.open()?;
    let listener = control_api::bind(&socket).await?;
    println!("control socket {}", socket.display());
    let agent = Agent::new(edge, token);
    let api = tokio::spawn(control_api::serve(listener, agent.clone()));
    agent.run(calvin_common::process::shutdown_signal()).await;
    api.abort();
    let _ = std::fs::remove_file(&socket);
    Ok(ExitCode::SUCCESS)
}

/// What `share` connects to: an edge's address, the token, and the dev
/// edge's task when it runs one.
type Target = (EdgeAddress, String, Option<tokio::task::JoinHandle<()>>);

/// `share --dev`: an edge on loopback in this process, stopped by `stop`;
/// `None` without `--dev`.
#[cfg(feature = "dev-edge")]
async fn start_dev_edge(
    args: &ShareArgs,
    stop: tokio::sync::oneshot::Receiver<()>,
) -> anyhow::Result<Option<Target>> {
    if !args.dev {
        return Ok(None);
    }
    let (edge, state) = args.dev_edge.bind().await?;
    let address = EdgeAddress::new(
        &edge.bound().quic.to_string(),
        Some(&state.ca_path()),
        Some("localhost"),
    )?;
    if state.new_ca {
        eprintln!("made a new local CA for the dev edge");
    }
    eprintln!(
        "dev edge: trust {} (curl --cacert {0})",
        state.ca_path().display()
    );
    let task = tokio::spawn(edge.run(async {
        let _ = stop.await;
    }));
    Ok(Some((address, state.token, Some(task))))
}

/// Built without the `dev-edge` feature: no `--dev`.
#[cfg(not(feature = "dev-edge"))]
async fn start_dev_edge(
    _args: &ShareArgs,
    _stop: tokio::sync::oneshot::Receiver<()>,
) -> anyhow::Result<Option<Target>> {
    Ok(None)
}

async fn share(args: ShareArgs) -> anyhow::Result<ExitCode> {
    let port = Port::try_from(args.port)?;
    let name = args
        .name
        .as_deref()
        .map(PreviewName::parse)
        .transpose()
        .context("invalid --name")?;

    let (stop_edge, stop_edge_rx) = tokio::sync::oneshot::channel::<()>();
    let (edge, token, dev_edge) = match start_dev_edge(&args, stop_edge_rx).await? {
        Some(dev) => dev,
        None => {
            let remote = args.remote.context("--edge and --token-file, or --dev")?;
            let (address, token) = remote.open()?;
            (address, token, None)
        }
    };

    let agent = Agent::new(edge, token);
    let (stop_agent, stop_agent_rx) = tokio::sync::oneshot::channel::<()>();
    let runner = agent.clone();
    let agent_task = tokio::spawn(async move {
        runner
            .run(async {
                let _ = stop_agent_rx.await;
            })
            .await;
    });
    agent
        .wait_connected(FIRST_CONNECT_TIMEOUT)
        .await
        .map_err(|e| anyhow!(e))?;
    let created = agent.preview(port, name).await?;
    println!("{}", created.url);
    eprintln!(
        "forwarding {} -> 127.0.0.1:{port}; press Ctrl-C to stop",
        created.url
    );
    if !created.listening {
        eprintln!("nothing is listening on port {port} yet; the URL works once something does");
    }

    calvin_common::process::shutdown_signal().await;
    let _ = stop_agent.send(());
    let _ = agent_task.await;
    if let Some(task) = dev_edge {
        let _ = stop_edge.send(());
        let _ = task.await;
    }
    Ok(ExitCode::SUCCESS)
}
