//! Figure 6: N previews created on one agent, one control API call each,
//! then all N deleted; the latency of each call.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;

use serde_json::json;

use crate::control::ControlClient;
use crate::stats::{Samples, emit};

#[derive(Debug, clap::Args)]
pub struct PreviewsArgs {
    /// The agent's control socket
    #[arg(long)]
    pub socket: PathBuf,
    /// The local port the previews forward to
    #[arg(long)]
    pub port: u16,
    #[arg(long, default_value_t = 10_000)]
    pub count: usize,
    /// Names are PREFIX-PID-N
    #[arg(long, default_value = "many")]
    pub prefix: String,
}

pub async fn run(args: PreviewsArgs) -> anyhow::Result<()> {
    let client = ControlClient::new(&args.socket);
    let pid = std::process::id();
    let mut names = Vec::with_capacity(args.count);
    let mut create = Vec::with_capacity(args.count);
    let started = Instant::now();
    for i in 0..args.count {
        let name = format!("{}-{pid}-{i}", args.prefix);
        let t = Instant::now();
        let made = client
            .preview(args.port, &name)
            .await
            .with_context(|| format!("preview {} of {}", i + 1, args.count))?;
        create.push(t.elapsed());
        names.push(made.name);
    }
    let create_secs = started.elapsed().as_secs_f64();
    let mut delete = Vec::with_capacity(args.count);
    let started = Instant::now();
    for name in &names {
        let t = Instant::now();
        client.unpreview(name).await?;
        delete.push(t.elapsed());
    }
    let delete_secs = started.elapsed().as_secs_f64();
    let create = Samples::from_durations(&create);
    let delete = Samples::from_durations(&delete);
    emit(&json!({
        "count": args.count,
        "create_p50_us": create.percentile_us(50.0),
        "create_p99_us": create.percentile_us(99.0),
        "create_max_us": create.max_us(),
        "create_total_s": create_secs,
        "delete_p50_us": delete.percentile_us(50.0),
        "delete_p99_us": delete.percentile_us(99.0),
        "delete_max_us": delete.max_us(),
        "delete_total_s": delete_secs,
    }));
    Ok(())
}
