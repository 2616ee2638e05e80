//! The `calvin-agent` commands.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, anyhow};
#[cfg(feature = "dev-edge")]
use calvin_edge::dev::{DevArgs, DevState, Running};
use calvin_proto::{Port, PreviewName};
use clap::{Args, Parser, Subcommand};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use calvin_agent::api::{
    LoggedRequest, PreviewCreated, PreviewDeleted, PreviewList, Protected, RequestLog,
};
use calvin_agent::control_api;
use calvin_agent::control_client::{Answer, ControlClient, human_size};
use calvin_agent::{Agent, EdgeAddress, LinkState};
use calvin_common::{Fact, Level, LogFormat, say, tell};

/// How long `share` waits for its first connection to the edge.
const FIRST_CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// The log filter of the daemon and of `share -v` (when `RUST_LOG` is
/// unset). With the dev edge in the process, its filter (hickory's
/// per-query lines off); else everything at info.
#[cfg(feature = "dev-edge")]
const INFO_FILTER: &str = calvin_edge::DEFAULT_LOG_FILTER;
#[cfg(not(feature = "dev-edge"))]
const INFO_FILTER: &str = "info";

/// `share` without `-v`: its own lines (the URL, its notes) and the
/// libraries' warnings and errors, not their info lines.
const SHARE_FILTER: &str = "warn";

#[derive(Parser)]
#[command(
    name = "calvin-agent",
    version,
    about = "Gives an HTTP server on a port of this machine a public URL"
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    pub log: calvin_common::LogArgs,
}

impl Cli {
    /// The log filter when `RUST_LOG` is unset (`RUST_LOG` wins).
    pub fn log_filter(&self) -> &'static str {
        match &self.command {
            Command::Share(args) if !args.verbose => SHARE_FILTER,
            _ => INFO_FILTER,
        }
    }
}

#[derive(Subcommand)]
enum Command {
    /// Run the agent daemon: keep a connection to the edge, serve the control API
    Up {
        #[command(flatten)]
        edge: EdgeArgs,
        #[command(flatten)]
        socket: SocketArg,
        /// Serve Prometheus metrics at http://ADDR/metrics (off by default)
        #[arg(long, value_name = "ADDR")]
        metrics: Option<std::net::SocketAddr>,
        /// Serve the inspector (the previews' requests, live, and replay)
        /// at http://ADDR/ (off by default; loopback addresses only)
        #[arg(long, value_name = "ADDR")]
        inspect: Option<std::net::SocketAddr>,
        #[command(flatten)]
        log: LogKeeping,
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
        /// Send the server no probe request (no warnings then)
        #[arg(long)]
        no_probe: bool,
        /// Take the preview down after this long (90s, 15m, 2h, 7d; at
        /// most 30 days); a visitor then reads "this preview has ended"
        #[arg(long, value_name = "DURATION", value_parser = parse_ttl)]
        ttl: Option<u64>,
        /// Only visitors with the share link this prints get in (others
        /// get 401)
        #[arg(long)]
        protect: bool,
        /// How long the share link works (2h, 30d; 60s to 365d) [default: 7d]
        #[arg(long, value_name = "DURATION", value_parser = parse_expires, requires = "protect")]
        expires: Option<u64>,
        #[command(flatten)]
        socket: SocketArg,
    },
    /// Protect a preview (only visitors with a share link get in) and print a fresh share link
    Protect {
        name: String,
        /// Revoke every share link made before (a new secret), then print a new one
        #[arg(long, conflicts_with = "off")]
        rotate: bool,
        /// How long the new link works (2h, 30d; 60s to 365d) [default: 7d]
        #[arg(long, value_name = "DURATION", value_parser = parse_expires, conflicts_with = "off")]
        expires: Option<u64>,
        /// Make the preview public again
        #[arg(long)]
        off: bool,
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
    /// Show the last requests through a preview (the agent's request log)
    Log {
        name: String,
        /// Keep printing requests as they complete, until Ctrl-C
        #[arg(long, short)]
        follow: bool,
        /// The newest N requests
        #[arg(long, value_name = "N", default_value_t = 20,
              value_parser = clap::value_parser!(u64).range(1..=control_api::MAX_LIMIT as u64))]
        limit: u64,
        /// One JSON object per request, with its headers and bodies
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        socket: SocketArg,
    },
    /// Send a logged request to the preview's port again and show the answer
    Replay {
        name: String,
        /// The request's id (from `log`)
        id: u64,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        socket: SocketArg,
    },
}

/// What the daemon keeps of the requests through its previews.
#[derive(Args)]
struct LogKeeping {
    /// Requests kept per preview for `log` and replay (0: none, and
    /// connections are not followed)
    #[arg(long, value_name = "N", default_value_t = calvin_agent::request_log::DEFAULT_CAPACITY)]
    log_requests: usize,
    /// Show Authorization, Cookie and Set-Cookie values in the log
    /// (masked by default)
    #[arg(long)]
    log_secrets: bool,
}

#[derive(Args)]
struct EdgeArgs {
    /// The edge's QUIC address; give it again for more edges (the agent
    /// uses one and moves to the next when it fails). A name with several
    /// addresses counts as several edges.
    #[arg(long, value_name = "HOST:PORT", required = true)]
    edge: Vec<String>,
    /// File holding this agent's token
    #[arg(long, value_name = "F")]
    token_file: PathBuf,
    /// Trust only this CA for the edge (default: the system's roots)
    #[arg(long, value_name = "PEM")]
    ca: Option<PathBuf>,
    /// The name each edge's certificate must carry (default: its HOST)
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
    /// The edges to dial, in the order given, and the token to show them.
    fn open(&self) -> anyhow::Result<(Vec<EdgeAddress>, String)> {
        let token = read_token(&self.token_file)?;
        let edges = self
            .edge
            .iter()
            .map(|edge| {
                EdgeAddress::new(edge, self.ca.as_deref(), self.server_name.as_deref())
                    .with_context(|| format!("--edge {edge}"))
            })
            .collect::<anyhow::Result<_>>()?;
        Ok((edges, token))
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
    /// Send the server no probe request (no warnings then)
    #[arg(long)]
    no_probe: bool,
    /// Log the agent's (and the dev edge's) info lines too
    #[arg(short, long)]
    verbose: bool,
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
    let format = cli.log.format;
    match cli.command {
        Command::Up {
            edge,
            socket,
            metrics,
            inspect,
            log,
        } => up(edge, socket.path(), metrics, inspect, log, format).await,
        Command::Preview {
            port,
            name,
            json,
            no_probe,
            ttl,
            protect,
            expires,
            socket,
        } => {
            let request = calvin_agent::api::PreviewRequest {
                port,
                name,
                ttl_secs: ttl.map(|secs| secs as i64),
                probe: no_probe.then_some(false),
                protect: protect.then_some(true),
                expires_secs: expires.map(|secs| secs as i64),
            };
            let answer = ControlClient::new(&socket.path()).create(&request).await?;
            Ok(report(&answer, json, |c: PreviewCreated| {
                match (&c.share_url, &c.share_expires) {
                    (Some(link), expires) => {
                        println!("{link}");
                        print_protected(&c.name, expires.as_deref());
                    }
                    (None, _) => println!("{}", c.url),
                }
                if !c.listening {
                    eprintln!(
                        "note: nothing is listening on port {port} yet; the URL works once something does"
                    );
                }
                print_warnings(&c, format);
            }))
        }
        Command::Protect {
            name,
            rotate,
            expires,
            off,
            json,
            socket,
        } => {
            let request = calvin_agent::api::ProtectRequest {
                rotate,
                expires_secs: expires.map(|secs| secs as i64),
                off,
            };
            let answer = ControlClient::new(&socket.path())
                .protect(&name, &request)
                .await?;
            Ok(report(&answer, json, |p: Protected| match &p.share_url {
                Some(link) => {
                    println!("{link}");
                    print_protected(&p.name, p.share_expires.as_deref());
                }
                None => {
                    println!("{}", p.url);
                    eprintln!("{} is public: anyone with its URL opens it", p.name);
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
        Command::Share(args) => share(args, format).await,
        Command::Log {
            name,
            follow,
            limit,
            json,
            socket,
        } => log(&socket.path(), &name, limit, follow, json).await,
        Command::Replay {
            name,
            id,
            json,
            socket,
        } => {
            let answer = ControlClient::new(&socket.path()).replay(&name, id).await?;
            Ok(report(&answer, json, |r: LoggedRequest| {
                println!("{}", request_line(&r));
            }))
        }
    }
}

/// `log`: the newest `limit` requests, then with `follow` each new one as
/// it completes (asking the daemon to hold its answer until there is one).
async fn log(
    socket: &Path,
    name: &str,
    limit: u64,
    follow: bool,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let client = ControlClient::new(socket);
    let mut printer = LogPrinter {
        json,
        follow,
        ..LogPrinter::default()
    };
    let mut query = format!("limit={limit}");
    loop {
        let Some(log) = fetch_log(&client, name, &query).await? else {
            return Ok(ExitCode::FAILURE);
        };
        printer.print(&log)?;
        if !follow {
            if log.requests.is_empty() && !json {
                eprintln!("no requests through {name} yet");
            }
            return Ok(ExitCode::SUCCESS);
        }
        // Requests still awaiting their answers are asked for again (each
        // is printed once it has one, in the order they complete), and
        // new ones are waited for: a second at a time while some are open
        // (a stream may stay open for hours), else up to 30 s.
        if let Some(&first) = printer.open.first() {
            let again = format!("after={}&limit={}", first - 1, control_api::MAX_LIMIT);
            let Some(log) = fetch_log(&client, name, &again).await? else {
                return Ok(ExitCode::FAILURE);
            };
            // Those the log no longer holds will not complete here.
            let held: std::collections::BTreeSet<u64> = log.requests.iter().map(|r| r.id).collect();
            printer.open.retain(|id| held.contains(id));
            printer.print(&log)?;
        }
        let wait = if printer.open.is_empty() { 30 } else { 1 };
        query = format!("after={}&wait={wait}", printer.last);
    }
}

/// The log's answer to `query`; `None` (said on stderr) when it refused.
async fn fetch_log(
    client: &ControlClient,
    name: &str,
    query: &str,
) -> anyhow::Result<Option<RequestLog>> {
    let answer = client.requests(name, query).await?;
    match answer.parse() {
        Ok(log) => Ok(Some(log)),
        Err(err) => {
            eprintln!("calvin-agent: {}", err.error);
            Ok(None)
        }
    }
}

/// What `log` has printed, and what it waits on.
#[derive(Default)]
struct LogPrinter {
    json: bool,
    follow: bool,
    /// Hints printed (by code).
    hinted: std::collections::BTreeSet<String>,
    /// Requests seen without their answer yet (`--follow`).
    open: std::collections::BTreeSet<u64>,
    /// The newest request seen.
    last: u64,
}

impl LogPrinter {
    /// Prints each request of `log` that is complete and new (all of them,
    /// without `--follow`), and each new hint.
    fn print(&mut self, log: &RequestLog) -> anyhow::Result<()> {
        for hint in &log.hints {
            if self.hinted.insert(hint.code.clone()) {
                eprintln!("hint: {}\n  fix: {}", hint.message, hint.fix);
            }
        }
        for r in &log.requests {
            let new = r.id > self.last;
            self.last = self.last.max(r.id);
            let done = r.duration_ms.is_some() || !self.follow;
            if !done {
                if new {
                    self.open.insert(r.id);
                }
                continue;
            }
            if new || self.open.remove(&r.id) {
                if self.json {
                    println!("{}", serde_json::to_string(r)?);
                } else {
                    println!("{}", request_line(r));
                }
            }
        }
        Ok(())
    }
}

/// One request on a line: `HH:MM:SS METHOD PATH STATUS DURATION in -> out
/// CLIENT`.
fn request_line(r: &LoggedRequest) -> String {
    let time = r.time.get(11..19).unwrap_or(&r.time);
    let status = r.status.map_or("---".to_owned(), |s| s.to_string());
    let duration = r
        .duration_ms
        .map_or(String::new(), |ms| format!("{ms:.1} ms"));
    let mut line = format!(
        "{:>4}  {time}  {} {}  {status}  {duration}  {} -> {}",
        r.id,
        r.method,
        r.path,
        human_size(r.bytes_in),
        human_size(r.bytes_out)
    );
    if let Some(client) = &r.client {
        line.push_str(&format!("  {client}"));
    }
    if let Some(of) = r.replay_of {
        line.push_str(&format!("  (replay of {of})"));
    }
    if r.upgraded {
        line.push_str("  (switched protocols)");
    }
    line
}

/// `--ttl`: a duration such as `90s`, `15m`, `2h` or `1h 30m`, in whole
/// seconds, from 1 s to 30 days.
fn parse_ttl(text: &str) -> Result<u64, String> {
    let ttl = humantime::parse_duration(text)
        .map_err(|e| format!("{e}; give a duration such as 90s, 15m, 2h or 7d"))?;
    let secs = ttl.as_secs();
    let max = control_api::MAX_TTL_SECS as u64;
    if !(1..=max).contains(&secs) {
        return Err(format!("from 1s to 30d ({max} s), got {secs} s"));
    }
    Ok(secs)
}

/// `--expires`: a share link's life such as `2h` or `30d`, in whole
/// seconds, from 60 s to 365 days.
fn parse_expires(text: &str) -> Result<u64, String> {
    let life = humantime::parse_duration(text)
        .map_err(|e| format!("{e}; give a duration such as 2h, 7d or 30d"))?;
    let secs = life.as_secs();
    let (min, max) = (
        u64::from(calvin_proto::SHARE_MIN_SECS),
        u64::from(calvin_proto::SHARE_MAX_SECS),
    );
    if secs < min {
        return Err(format!("at least 60s (one minute), got {secs} s"));
    }
    if secs > max {
        return Err(format!("at most 365d ({max} s), got {secs} s"));
    }
    Ok(secs)
}

/// Under a share link: what it does, until when, and how to revoke it.
fn print_protected(name: &str, expires: Option<&str>) {
    let until = expires.map(|at| format!(" until {at}")).unwrap_or_default();
    eprintln!(
        "protected: only visitors with this link get in (it works{until}); \
         `calvin-agent protect {name} --rotate` revokes every link made so far"
    );
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
    match &list.edge {
        Some(edge) if list.connected => eprintln!("connected to {edge}"),
        _ => eprintln!("note: the agent is not connected to its edge now"),
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
    println!("{:width$}  {:>5}  {:9}  URL", "NAME", "PORT", "ACCESS");
    for p in &list.previews {
        let access = if p.protected { "protected" } else { "public" };
        println!("{:width$}  {:>5}  {access:9}  {}", p.name, p.port, p.url);
    }
    for p in &list.previews {
        for hint in &p.hints {
            eprintln!("hint ({}): {}\n  fix: {}", p.name, hint.message, hint.fix);
        }
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

async fn up(
    args: EdgeArgs,
    socket: PathBuf,
    metrics: Option<std::net::SocketAddr>,
    inspect: Option<std::net::SocketAddr>,
    keeping: LogKeeping,
    format: LogFormat,
) -> anyhow::Result<ExitCode> {
    let (edges, token) = args.open()?;
    let metrics = match metrics {
        Some(addr) => Some(tokio::net::TcpListener::bind(addr).await.with_context(|| {
            format!("cannot listen for metrics on {addr}/tcp (pass --metrics ADDR)")
        })?),
        None => None,
    };
    let inspect = match inspect {
        Some(addr) => Some(calvin_agent::inspector::bind(addr).await?),
        None => None,
    };
    let listener = control_api::bind(&socket).await?;
    let mut facts = vec![Fact::new(
        "control_socket",
        "control socket",
        socket.display(),
    )];
    if let Some(listener) = &metrics {
        let at = listener.local_addr()?;
        facts.push(Fact::new(
            "metrics",
            "listening metrics",
            format_args!("{at}/tcp"),
        ));
    }
    if let Some(listener) = &inspect {
        let at = listener.local_addr()?;
        facts.push(Fact::new(
            "inspector",
            "listening inspector",
            format_args!("{at}/tcp"),
        ));
    }
    tell(format, "listening", &facts);
    let log = calvin_agent::request_log::RequestLog::new(keeping.log_requests, keeping.log_secrets);
    let agent = Agent::with_log(edges, token, log);
    let metrics = metrics.map(|listener| {
        let counts = agent.counts().clone();
        tokio::spawn(calvin_common::metrics_http::serve(listener, move || {
            counts.encode()
        }))
    });
    let inspect = inspect
        .map(|listener| tokio::spawn(calvin_agent::inspector::serve(listener, agent.clone())));
    let api = tokio::spawn(control_api::serve(listener, agent.clone()));
    agent.run(calvin_common::process::shutdown_signal()).await;
    api.abort();
    if let Some(metrics) = metrics {
        metrics.abort();
    }
    if let Some(inspect) = inspect {
        inspect.abort();
    }
    let _ = std::fs::remove_file(&socket);
    Ok(ExitCode::SUCCESS)
}

/// What `share` connects to: the edges' addresses and the token, and with
/// `--dev` the dev edge's task (which ends early only when the edge fails).
struct Target {
    edges: Vec<EdgeAddress>,
    token: String,
    dev_edge: Option<JoinHandle<anyhow::Result<()>>>,
}

/// `share --dev`: the dev edge of the state folder, run in this process,
/// or joined when another `share --dev` runs it and taken over when that
/// one stops; stopped by `stop`. `None` without `--dev`.
#[cfg(feature = "dev-edge")]
async fn start_dev_edge(
    args: &ShareArgs,
    stop: oneshot::Receiver<()>,
    format: LogFormat,
) -> anyhow::Result<Option<Target>> {
    if !args.dev {
        return Ok(None);
    }
    let dev = &args.dev_edge;
    if !dev.joinable() {
        // Port 0: an edge of its own, on ports no other share could find.
        let (edge, state) = dev.bind().await?;
        print_trust(&state, format);
        let address = dev_address(edge.bound().quic, &state)?;
        let task = tokio::spawn(async move {
            edge.run(async {
                let _ = stop.await;
            })
            .await;
            Ok(())
        });
        return Ok(Some(Target {
            edges: vec![address],
            token: state.token,
            dev_edge: Some(task),
        }));
    }
    let (state, running) = dev.bind_or_join().await?;
    print_trust(&state, format);
    if running.is_none() {
        let joined = format!(
            "dev edge: joined the one running at {} (another `share --dev` of {} runs it)",
            dev.quic,
            state.dir.display()
        );
        say(format, Level::INFO, &joined);
    }
    let address = dev_address(dev.quic, &state)?;
    let task = tokio::spawn(keep_dev_edge(dev.clone(), running, stop, format));
    Ok(Some(Target {
        edges: vec![address],
        token: state.token,
        dev_edge: Some(task),
    }))
}

/// Runs the dev edge while this process holds it; else waits to take it
/// over from the share that runs it. Ends when `stop` comes, or with what
/// kept it from taking over.
#[cfg(feature = "dev-edge")]
async fn keep_dev_edge(
    args: DevArgs,
    running: Option<Running>,
    mut stop: oneshot::Receiver<()>,
    format: LogFormat,
) -> anyhow::Result<()> {
    let Running { edge, lock } = match running {
        Some(running) => running,
        None => {
            let running = tokio::select! {
                running = args.take_over() => running.context("dev edge: cannot take over")?,
                _ = &mut stop => return Ok(()),
            };
            let took = "dev edge: took over (the share that ran it stopped)";
            say(format, Level::INFO, took);
            running
        }
    };
    edge.run(async {
        let _ = stop.await;
    })
    .await;
    // Let go only now: the share that takes over binds the same ports.
    drop(lock);
    Ok(())
}

#[cfg(feature = "dev-edge")]
fn print_trust(state: &DevState, format: LogFormat) {
    if state.new_ca {
        say(format, Level::INFO, "made a new local CA for the dev edge");
    }
    let trust = format!(
        "dev edge: trust {} (curl --cacert {0})",
        state.ca_path().display()
    );
    say(format, Level::INFO, &trust);
}

/// The dev edge at `quic`, checked against the state folder's CA.
#[cfg(feature = "dev-edge")]
fn dev_address(quic: std::net::SocketAddr, state: &DevState) -> anyhow::Result<EdgeAddress> {
    Ok(EdgeAddress::new(
        &quic.to_string(),
        Some(&state.ca_path()),
        Some("localhost"),
    )?)
}

/// Built without the `dev-edge` feature: no `--dev`.
#[cfg(not(feature = "dev-edge"))]
async fn start_dev_edge(
    _args: &ShareArgs,
    _stop: oneshot::Receiver<()>,
    _format: LogFormat,
) -> anyhow::Result<Option<Target>> {
    Ok(None)
}

async fn share(args: ShareArgs, format: LogFormat) -> anyhow::Result<ExitCode> {
    // From now on Ctrl-C stops the share rather than the process.
    let signal = calvin_common::process::shutdown_signal();
    let port = Port::try_from(args.port)?;
    let probe = calvin_agent::PreviewOptions {
        probe: !args.no_probe,
        ..Default::default()
    };
    let name = args
        .name
        .as_deref()
        .map(PreviewName::parse)
        .transpose()
        .context("invalid --name")?;

    let (stop_edge, stop_edge_rx) = oneshot::channel::<()>();
    let Target {
        edges,
        token,
        mut dev_edge,
    } = match start_dev_edge(&args, stop_edge_rx, format).await? {
        Some(dev) => dev,
        None => {
            let remote = args.remote.context("--edge and --token-file, or --dev")?;
            let (edges, token) = remote.open()?;
            Target {
                edges,
                token,
                dev_edge: None,
            }
        }
    };

    let agent = Agent::with_edges(edges, token);
    let (stop_agent, stop_agent_rx) = oneshot::channel::<()>();
    let runner = agent.clone();
    let agent_task = tokio::spawn(async move {
        runner
            .run(async {
                let _ = stop_agent_rx.await;
            })
            .await;
    });
    let outcome = tokio::select! {
        served = serve(&agent, port, name, probe, signal, format) => served,
        Some(ended) = join_once(&mut dev_edge) => Err(match ended {
            Ok(Ok(())) => anyhow!("the dev edge stopped"),
            Ok(Err(err)) => err,
            Err(err) => anyhow!("the dev edge failed: {err}"),
        }),
    };

    let _ = stop_agent.send(());
    let _ = agent_task.await;
    if let Some(task) = dev_edge {
        let _ = stop_edge.send(());
        let _ = task.await;
    }
    outcome.map(|()| ExitCode::SUCCESS)
}

/// Makes the preview once the agent is connected, prints its URL, and
/// serves it until `signal` (Ctrl-C, SIGTERM).
async fn serve(
    agent: &Agent,
    port: Port,
    name: Option<PreviewName>,
    options: calvin_agent::PreviewOptions,
    signal: impl Future<Output = ()>,
    format: LogFormat,
) -> anyhow::Result<()> {
    tokio::pin!(signal);
    let created = tokio::select! {
        created = async {
            agent
                .wait_connected(FIRST_CONNECT_TIMEOUT)
                .await
                .map_err(|e| anyhow!(e))?;
            anyhow::Ok(agent.preview_with(port, name, options).await?)
        } => created?,
        _ = &mut signal => return Ok(()),
    };
    tell(format, "sharing", &[Fact::new("url", "", &created.url)]);
    let to = created
        .reached
        .clone()
        .unwrap_or_else(|| format!("127.0.0.1:{port}"));
    let forwarding = format!("forwarding {} -> {to}; press Ctrl-C to stop", created.url);
    say(format, Level::INFO, &forwarding);
    if !created.listening {
        let nothing =
            format!("nothing is listening on port {port} yet; the URL works once something does");
        say(format, Level::WARN, &nothing);
    }
    print_warnings(&created, format);
    tokio::select! {
        _ = signal => {}
        _ = say_reconnects(agent, format) => {}
    }
    Ok(())
}

/// What the probe found wrong with a new preview, on stderr.
fn print_warnings(created: &PreviewCreated, format: LogFormat) {
    for warning in &created.warnings {
        let line = format!("warning: {}\n  fix: {}", warning.message, warning.fix);
        say(format, Level::WARN, &line);
    }
}

/// Says when the connection to an edge is back after a loss, naming the
/// edge (the agent warns of the loss). Never ends while the agent runs.
async fn say_reconnects(agent: &Agent, format: LogFormat) {
    let mut state = agent.state();
    let mut connected = true;
    while state.changed().await.is_ok() {
        let edge = match &*state.borrow_and_update() {
            LinkState::Connected(link) => Some(link.edge().to_string()),
            _ => None,
        };
        if let Some(edge) = &edge
            && !connected
        {
            let again = format!("connected to the edge again ({edge})");
            say(format, Level::INFO, &again);
        }
        connected = edge.is_some();
    }
    std::future::pending().await
}

/// Waits for `task` and empties it (a finished task is not awaited twice);
/// `None` at once when there is none.
async fn join_once<T>(
    task: &mut Option<JoinHandle<T>>,
) -> Option<Result<T, tokio::task::JoinError>> {
    let ended = task.as_mut()?.await;
    *task = None;
    Some(ended)
}
