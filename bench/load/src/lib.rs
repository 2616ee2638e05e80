//! calvin-bench: the load program `bench/run` drives for the figures wrk
//! and curl cannot measure. Each subcommand prints its results as one JSON
//! line on stdout.
//!
//! - [`rate`]: open-loop constant-rate GETs, latency from each request's
//!   scheduled send time (figure 3).
//! - [`first200`]: control API preview call -> first 200 (figure 4).
//! - [`previews`]: create and delete many previews on one agent (figure 6).
//! - [`agents`]: many idle agents, each its own QUIC connection (figure 5).
//! - [`fleet`]: many real agents given every edge of a cluster, and
//!   [`recovery`]: how long after an edge's SIGKILL all their names serve
//!   again through another edge (figure 10).
//! - [`sse`]: an SSE origin stamping each event, and a client measuring the
//!   delay (figure 7).
//! - [`hyper_proxy`]: the least a hyper-based HTTP/1 proxy does per request,
//!   figure 9's floor for the edge.
//! - [`pipe`]: an origin and a load over connections that switched
//!   protocols first, so a tunnel only pipes their bytes (figure 9).
//! - [`slowloris`]: slow heads and slow POST bodies, reopened as the
//!   server closes them (figure 8).
//! - [`load`]: closed-loop HTTP/2 or HTTP/3 GETs over N connections, and
//!   large transfers over them (figures 1 and 2's h2 and h3 rows), on the
//!   clients of [`h2h3`].
//! - [`target`]: the HTTP/1.1 (+TLS) client they share; [`control`]: the
//!   agent's control API; [`stats`]: percentiles.
//!
//! It depends on calvin-proto (the wire protocol) and, for [`fleet`] only,
//! on the agent library's public `Agent` (what moves an agent to another
//! edge is the thing measured there); never on the edge's crate.

pub mod agents;
pub mod control;
pub mod first200;
pub mod fleet;
pub mod h2h3;
pub mod hyper_proxy;
pub mod load;
pub mod pipe;
pub mod previews;
pub mod rate;
pub mod recovery;
pub mod slowloris;
pub mod sse;
pub mod stats;
pub mod target;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "calvin-bench",
    about = "calvin's load program: each subcommand prints one JSON line"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Open-loop GETs at a constant rate; latency from the scheduled time
    Rate(rate::RateArgs),
    /// Closed-loop HTTP/2 or HTTP/3 GETs, or one large transfer over them
    Load(load::LoadArgs),
    /// Time from the agent's preview call to the first 200 through the URL
    First200(first200::First200Args),
    /// Create then delete N previews on one agent; per-call latency
    Previews(previews::PreviewsArgs),
    /// N idle agents, each its own QUIC connection with one preview
    Agents(agents::AgentsArgs),
    /// N real agents given every edge, each with one named preview
    Fleet(fleet::FleetArgs),
    /// SIGKILL an edge; time until every name answers 200 through another
    Recovery(recovery::RecoveryArgs),
    /// An HTTP origin whose /events streams timestamped server-sent events
    SseOrigin(sse::OriginArgs),
    /// Read N events from an SSE URL; delay from the origin's send time
    Sse(sse::ClientArgs),
    /// Slow heads and slow POST bodies held against an HTTP address
    Slowloris(slowloris::SlowlorisArgs),
    /// A bare HTTP/1 proxy on hyper (server and client) to one origin
    HyperProxy(hyper_proxy::HyperProxyArgs),
    /// An origin that switches protocols, then serves HTTP/1.1 on the pipe
    PipeOrigin(pipe::OriginArgs),
    /// GETs over connections upgraded first; requests answered
    PipeLoad(pipe::LoadArgs),
}

pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Rate(args) => rate::run(args).await,
        Command::Load(args) => load::run(args).await,
        Command::First200(args) => first200::run(args).await,
        Command::Previews(args) => previews::run(args).await,
        Command::Agents(args) => agents::run(args).await,
        Command::Fleet(args) => fleet::run(args).await,
        Command::Recovery(args) => recovery::run(args).await,
        Command::SseOrigin(args) => sse::serve_origin(args).await,
        Command::Sse(args) => sse::run_client(args).await,
        Command::Slowloris(args) => slowloris::run(args).await,
        Command::HyperProxy(args) => hyper_proxy::run(args).await,
        Command::PipeOrigin(args) => pipe::serve_origin(args).await,
        Command::PipeLoad(args) => pipe::run_load(args).await,
    }
}
