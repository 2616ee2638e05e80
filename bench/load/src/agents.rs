//! Figure 5: N idle agents against one edge. Each is its own QUIC
//! connection doing the real agent handshake (control stream, Hello with one
//! preview, Welcome), with what the protocol fixes of the agent's transport:
//! TLS 1.3, the ALPN, the keep-alive and idle timeout,
//! `MAX_DATA_STREAMS` streams the edge may open (stream slots cost the edge
//! memory), and the request that the edge acknowledge each ping at once.
//! The connections share a few UDP endpoints, one per `--per-endpoint`.
//!
//! Prints `{"ready": N, ...}` once every agent is welcomed, then holds the
//! connections until SIGTERM or Ctrl-C.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use calvin_proto::io::{read_frame, write_frame};
use calvin_proto::{
    AgentMessage, EdgeMessage, Hello, PROTOCOL_VERSION, Port, Preview, PreviewName,
};
use serde_json::json;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::stats::emit;
use crate::target::roots;

/// A handshake plus Hello/Welcome slower than this fails the run.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, clap::Args)]
pub struct AgentsArgs {
    /// The edge's QUIC listener, IP:PORT
    #[arg(long)]
    pub edge: SocketAddr,
    /// The CA the edge's certificate chains to
    #[arg(long, value_name = "PEM")]
    pub ca: PathBuf,
    /// The name the edge's certificate must carry
    #[arg(long, default_value = "localhost")]
    pub server_name: String,
    /// File holding the account's agent token
    #[arg(long, value_name = "F")]
    pub token_file: PathBuf,
    #[arg(long)]
    pub count: usize,
    /// The port each agent's preview forwards to (no traffic is sent)
    #[arg(long)]
    pub port: u16,
    /// Connections per UDP endpoint
    #[arg(long, default_value_t = 1000)]
    pub per_endpoint: usize,
    /// Handshakes in flight at once
    #[arg(long, default_value_t = 64)]
    pub parallel: usize,
    /// Preview names are PREFIX-PID-N
    #[arg(long, default_value = "idle")]
    pub prefix: String,
}

/// One welcomed agent: dropping the streams would end its session.
struct Held {
    conn: quinn::Connection,
    _control: (quinn::SendStream, quinn::RecvStream),
}

pub async fn run(args: AgentsArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.per_endpoint > 0 && args.parallel > 0,
        "give counts above 0"
    );
    let token = std::fs::read_to_string(&args.token_file)
        .with_context(|| args.token_file.display().to_string())?
        .trim()
        .to_owned();
    let port = Port::try_from(args.port)?;
    let config = client_config(&args)?;
    let mut endpoints = Vec::new();
    for _ in 0..args.count.div_ceil(args.per_endpoint) {
        let any: SocketAddr = if args.edge.is_ipv6() {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        } else {
            (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
        };
        let mut endpoint = quinn::Endpoint::client(any)?;
        endpoint.set_default_client_config(config.clone());
        endpoints.push(endpoint);
    }

    let started = Instant::now();
    let gate = Arc::new(Semaphore::new(args.parallel));
    let pid = std::process::id();
    let mut tasks = JoinSet::new();
    for i in 0..args.count {
        let endpoint = endpoints[i / args.per_endpoint].clone();
        let name = PreviewName::parse(&format!("{}-{pid}-{i}", args.prefix))?;
        let hello = Hello {
            version: PROTOCOL_VERSION,
            token: token.clone(),
            previews: vec![Preview {
                name,
                port,
                ttl_secs: None,
                protect: None,
            }],
        };
        let (gate, edge, server_name) = (gate.clone(), args.edge, args.server_name.clone());
        tasks.spawn(async move {
            let _permit = gate.acquire_owned().await?;
            tokio::time::timeout(CONNECT_TIMEOUT, agent(endpoint, edge, server_name, hello))
                .await
                .map_err(|_| anyhow::anyhow!("no welcome within {CONNECT_TIMEOUT:?}"))?
        });
    }
    let mut held = Vec::with_capacity(args.count);
    while let Some(joined) = tasks.join_next().await {
        match joined? {
            Ok(agent) => held.push(agent),
            Err(err) => bail!("agent {} of {}: {err:#}", held.len() + 1, args.count),
        }
    }
    emit(&json!({
        "ready": held.len(),
        "endpoints": endpoints.len(),
        "connect_s": started.elapsed().as_secs_f64(),
    }));

    let mut term = signal(SignalKind::terminate())?;
    let closed_early = async {
        for agent in &held {
            agent.conn.closed().await;
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
        // Only when every connection ended: the edge went away.
        _ = closed_early => bail!("every connection closed"),
    }
    for agent in &held {
        agent.conn.close(0u32.into(), b"bench done");
    }
    for endpoint in &endpoints {
        let _ = tokio::time::timeout(Duration::from_secs(2), endpoint.wait_idle()).await;
    }
    Ok(())
}

/// QUIC handshake, control stream, Hello, Welcome with the preview restored.
async fn agent(
    endpoint: quinn::Endpoint,
    edge: SocketAddr,
    server_name: String,
    hello: Hello,
) -> anyhow::Result<Held> {
    let conn = endpoint.connect(edge, &server_name)?.await?;
    let (mut send, mut recv) = conn.open_bi().await?;
    write_frame(&mut send, &AgentMessage::Hello(hello)).await?;
    match read_frame::<EdgeMessage, _>(&mut recv).await? {
        Some(EdgeMessage::Welcome(welcome)) if welcome.restored.len() == 1 => Ok(Held {
            conn,
            _control: (send, recv),
        }),
        Some(EdgeMessage::Welcome(welcome)) => {
            bail!("the preview was not registered: {:?}", welcome.rejected)
        }
        other => bail!("expected a welcome, got {other:?}"),
    }
}

fn client_config(args: &AgentsArgs) -> anyhow::Result<quinn::ClientConfig> {
    let mut crypto = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13])?
    .with_root_certificates(roots(&args.ca)?)
    .with_no_client_auth();
    crypto.alpn_protocols = vec![calvin_proto::ALPN.to_vec()];
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(crypto)?;
    let mut config = quinn::ClientConfig::new(Arc::new(crypto));
    let mut transport = quinn::TransportConfig::default();
    transport
        .keep_alive_interval(Some(calvin_proto::KEEP_ALIVE_INTERVAL))
        .max_idle_timeout(quinn::IdleTimeout::try_from(calvin_proto::IDLE_TIMEOUT).ok())
        .max_concurrent_bidi_streams(calvin_proto::MAX_DATA_STREAMS.into())
        .max_concurrent_uni_streams(0u32.into());
    // As the agent asks: the edge acknowledges each ping at once.
    let mut ack = quinn::AckFrequencyConfig::default();
    ack.ack_eliciting_threshold(0u32.into());
    transport.ack_frequency_config(Some(ack));
    config.transport_config(Arc::new(transport));
    Ok(config)
}
