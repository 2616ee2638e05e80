//! Figure 4: from the control API's preview call to the first 200 through
//! the preview's URL, for fresh names; each is taken down after its trial.
//!
//! Each trial dials the edge afresh (a visitor following a new link does),
//! so an HTTPS URL includes its TLS handshake. Requests that do not answer
//! 200 are repeated, 1 ms apart, until one does.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use http_body_util::BodyExt;
use serde_json::json;

use crate::control::ControlClient;
use crate::stats::{Samples, emit};
use crate::target::{Target, TargetArgs};

#[derive(Debug, clap::Args)]
pub struct First200Args {
    /// The agent's control socket
    #[arg(long)]
    pub socket: PathBuf,
    /// The local port the previews forward to
    #[arg(long)]
    pub port: u16,
    /// The edge's listener and the path, e.g. https://127.0.0.1:4443/1k;
    /// the Host is the preview URL's (--host is ignored)
    #[command(flatten)]
    pub target: TargetArgs,
    #[arg(long, default_value_t = 200)]
    pub trials: usize,
    /// Names are PREFIX-PID-N
    #[arg(long, default_value = "first200")]
    pub prefix: String,
    /// A trial with no 200 after this many milliseconds fails the run
    #[arg(long, default_value_t = 10_000)]
    pub timeout_ms: u64,
}

pub async fn run(args: First200Args) -> anyhow::Result<()> {
    let client = ControlClient::new(&args.socket);
    let edge = Target::new(&args.target)?;
    let limit = Duration::from_millis(args.timeout_ms);
    let pid = std::process::id();
    let (mut totals, mut calls) = (Vec::new(), Vec::new());
    let mut retried = 0u64;
    for trial in 0..args.trials {
        let name = format!("{}-{pid}-{trial}", args.prefix);
        let started = Instant::now();
        let answer = client.preview(args.port, &name).await?;
        calls.push(started.elapsed());
        let host = authority(&answer.url).with_context(|| format!("URL {}", answer.url))?;
        let target = edge.with_host(host);
        let mut attempts = 0;
        loop {
            attempts += 1;
            if let Ok(200) = status(&target).await {
                break;
            }
            anyhow::ensure!(
                started.elapsed() < limit,
                "{}: no 200 within {limit:?}",
                answer.url
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        totals.push(started.elapsed());
        if attempts > 1 {
            retried += 1;
        }
        client.unpreview(&answer.name).await?;
    }
    let totals = Samples::from_durations(&totals);
    let calls = Samples::from_durations(&calls);
    emit(&json!({
        "trials": totals.len(),
        "p50_ms": totals.percentile_ms(50.0),
        "p99_ms": totals.percentile_ms(99.0),
        "max_ms": totals.max_us() as f64 / 1000.0,
        "preview_call_p50_ms": calls.percentile_ms(50.0),
        "preview_call_p99_ms": calls.percentile_ms(99.0),
        "trials_retried": retried,
    }));
    Ok(())
}

/// `name.domain[:port]` of `https://name.domain[:port]/...`.
fn authority(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    let end = rest.find('/').unwrap_or(rest.len());
    Some(&rest[..end]).filter(|a| !a.is_empty())
}

/// One GET on a fresh connection; the status, after the whole body.
async fn status(target: &Target) -> anyhow::Result<u16> {
    let mut conn = target.connect().await?;
    let response = conn.send_request(target.get()).await?;
    let status = response.status().as_u16();
    response.into_body().collect().await?;
    Ok(status)
}

#[cfg(test)]
mod tests {
    use super::authority;

    #[test]
    fn authority_of_a_preview_url() {
        assert_eq!(
            authority("https://a.preview.localhost:4443"),
            Some("a.preview.localhost:4443")
        );
        assert_eq!(authority("https://a.example.com/x"), Some("a.example.com"));
        assert_eq!(authority("nope"), None);
    }
}
