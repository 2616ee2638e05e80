//! Figure 10: N real agents (the agent library's [`Agent`], as
//! `calvin-agent up` runs it), each given every edge of a cluster in the
//! same order and holding one named preview. Unlike [`crate::agents`],
//! which speaks the protocol by hand to weigh idle connections, these do
//! what the agent does when its edge dies: notice the silence, move to the
//! next edge and register their previews there again.
//!
//! Prints `{"ready": N, "prefix": P, ...}` once every agent is connected to
//! the first edge with its preview `P-<i>` (i in 0..N), then holds them
//! until SIGTERM or Ctrl-C, and prints where they are connected then:
//! `{"stopped": N, "on": {"ADDR": count, ...}, "not_connected": k}`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use calvin_agent::{Agent, EdgeAddress};
use calvin_proto::{Port, PreviewName};
use serde_json::json;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

use crate::stats::emit;

/// An agent slower than this to connect and make its preview fails the run.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, clap::Args)]
pub struct FleetArgs {
    /// An edge's QUIC listener, IP:PORT; give it again for more edges, in
    /// the order every agent tries them (all start on the first)
    #[arg(long, required = true)]
    pub edge: Vec<SocketAddr>,
    /// The CA the edges' certificates chain to
    #[arg(long, value_name = "PEM")]
    pub ca: PathBuf,
    /// The name the edges' certificates must carry
    #[arg(long, default_value = "localhost")]
    pub server_name: String,
    /// File holding the account's agent token
    #[arg(long, value_name = "F")]
    pub token_file: PathBuf,
    #[arg(long)]
    pub count: usize,
    /// The local port every preview forwards to
    #[arg(long)]
    pub port: u16,
    /// Agents connecting at once
    #[arg(long, default_value_t = 64)]
    pub parallel: usize,
    /// Preview names are PREFIX-PID-N
    #[arg(long, default_value = "fleet")]
    pub prefix: String,
}

pub async fn run(args: FleetArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.parallel > 0, "give --parallel above 0");
    let token = std::fs::read_to_string(&args.token_file)
        .with_context(|| args.token_file.display().to_string())?
        .trim()
        .to_owned();
    let port = Port::try_from(args.port)?;
    let edges = args
        .edge
        .iter()
        .map(|edge| EdgeAddress::new(&edge.to_string(), Some(&args.ca), Some(&args.server_name)))
        .collect::<Result<Vec<_>, _>>()?;
    let first = args.edge[0];
    let prefix = format!("{}-{}", args.prefix, std::process::id());

    let (stop, stopped) = watch::channel(false);
    let started = Instant::now();
    // Each agent starts once it has a permit, and keeps it until its
    // preview is made: `--parallel` agents connecting at once (all at
    // once, the edge's handshakes outlast the agent's patience and send
    // some to the next edge before the measurement starts).
    let gate = Arc::new(Semaphore::new(args.parallel));
    let mut ready = JoinSet::new();
    for i in 0..args.count {
        let agent = Agent::with_edges(edges.clone(), token.clone());
        let name = PreviewName::parse(&format!("{prefix}-{i}"))?;
        let (gate, stopped) = (gate.clone(), stopped.clone());
        ready.spawn(async move {
            let _permit = gate.acquire_owned().await?;
            let runner = agent.clone();
            let mut stopped = stopped;
            let run = tokio::spawn(async move {
                runner
                    .run(async move {
                        let _ = stopped.wait_for(|s| *s).await;
                    })
                    .await;
            });
            tokio::time::timeout(READY_TIMEOUT, preview(&agent, port, name, first))
                .await
                .map_err(|_| anyhow::anyhow!("not ready within {READY_TIMEOUT:?}"))??;
            anyhow::Ok((agent, run))
        });
    }
    let (mut agents, mut runs) = (Vec::with_capacity(args.count), Vec::new());
    while let Some(joined) = ready.join_next().await {
        let (agent, run) =
            joined?.with_context(|| format!("agent {} of {}", agents.len() + 1, args.count))?;
        agents.push(agent);
        runs.push(run);
    }
    let done = agents.len();
    emit(&json!({
        "ready": done,
        "prefix": prefix,
        "connect_s": started.elapsed().as_secs_f64(),
    }));

    let mut term = signal(SignalKind::terminate())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    let mut on: BTreeMap<String, usize> = BTreeMap::new();
    let mut not_connected = 0;
    for agent in &agents {
        match agent.connected_edge() {
            Some(edge) => *on.entry(edge.addr().to_string()).or_default() += 1,
            None => not_connected += 1,
        }
    }
    emit(&json!({ "stopped": agents.len(), "on": on, "not_connected": not_connected }));
    stop.send_replace(true);
    let _ = tokio::time::timeout(Duration::from_secs(5), async {
        for run in runs {
            let _ = run.await;
        }
    })
    .await;
    Ok(())
}

/// Waits for `agent` to connect, checks it chose `first`, and gives
/// `port` the preview `name`.
async fn preview(
    agent: &Agent,
    port: Port,
    name: PreviewName,
    first: SocketAddr,
) -> anyhow::Result<()> {
    agent
        .wait_connected(READY_TIMEOUT)
        .await
        .map_err(anyhow::Error::msg)?;
    let on = agent.connected_edge().map(|edge| edge.addr());
    if on != Some(first) {
        bail!("connected to {on:?}, not to the first edge {first}");
    }
    agent
        .preview(port, Some(name.clone()))
        .await
        .with_context(|| format!("preview {name}"))?;
    Ok(())
}
