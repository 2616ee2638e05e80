//! Figure 10: how long after an edge's SIGKILL every name of a fleet of
//! agents ([`crate::fleet`]) answers 200 again through another edge.
//!
//! First every name must answer through the edge asked (the settle check:
//! through the hop to the edge that holds its agent). Then, with `--kill
//! PID`, the clock starts, the edge is sent SIGKILL (kill(1)), and every
//! name is asked again, all at once, each as a visitor who keeps
//! reloading would: a GET on a fresh connection, its answer waited for (up
//! to `--try-timeout-ms`), the next `--pause-ms` after one that failed,
//! until one is a 200 with the body's length. So at most `--count`
//! requests are out at once, and a name's time is when its visitor got
//! the page: a request the edge held until the name was back counts when
//! it was answered, one that hung on the dead edge costs its wait.
//!
//! Prints one line: when the last name answered, the percentiles over
//! names, and what the failed tries got.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use http_body_util::BodyExt;
use serde_json::json;
use tokio::task::JoinSet;

use crate::stats::{Samples, emit};
use crate::target::{Target, TargetArgs};

#[derive(Debug, clap::Args)]
pub struct RecoveryArgs {
    /// The edge asked and the path, e.g. http://127.0.0.2:8080/1k; the
    /// Host is each name's (--host is ignored)
    #[command(flatten)]
    pub target: TargetArgs,
    /// Names are PREFIX-0 .. PREFIX-(COUNT-1), under --domain
    #[arg(long)]
    pub prefix: String,
    #[arg(long)]
    pub count: usize,
    #[arg(long, default_value = "preview.localhost")]
    pub domain: String,
    /// The body's length in a good answer
    #[arg(long, default_value_t = 1024)]
    pub bytes: usize,
    /// The process to SIGKILL after the settle check (the clock starts
    /// just before); without it, only the settle check is run
    #[arg(long)]
    pub kill: Option<u32>,
    /// Pause after a failed try before the name's next
    #[arg(long, default_value_t = 100)]
    pub pause_ms: u64,
    /// A try with no whole answer by then counts as failed (the edge
    /// holds a request for a name whose agent is away for 5 s)
    #[arg(long, default_value_t = 10_000)]
    pub try_timeout_ms: u64,
    /// Every name must answer before the kill within this
    #[arg(long, default_value_t = 30)]
    pub settle_secs: u64,
    /// ... and again after it within this
    #[arg(long, default_value_t = 60)]
    pub limit_secs: u64,
}

/// What the tries that did not count got: a status, or `timeout`,
/// `200-wrong-length` or `error`.
type Outcomes = BTreeMap<String, u64>;

pub async fn run(args: RecoveryArgs) -> anyhow::Result<()> {
    let edge = Target::new(&args.target)?;
    let targets: Vec<Target> = (0..args.count)
        .map(|i| edge.with_host(&format!("{}-{i}.{}", args.prefix, args.domain)))
        .collect();
    let poll = Arc::new(Poll {
        pause: Duration::from_millis(args.pause_ms),
        try_timeout: Duration::from_millis(args.try_timeout_ms),
        bytes: args.bytes,
    });

    let settle = Instant::now();
    let (_, before) = poll
        .all_served(&targets, settle, Duration::from_secs(args.settle_secs))
        .await
        .context("before the kill")?;
    let settle_ms = settle.elapsed().as_secs_f64() * 1e3;
    let Some(pid) = args.kill else {
        emit(&json!({ "names": targets.len(), "settle_ms": settle_ms, "failed_tries": before }));
        return Ok(());
    };

    let killed = Instant::now();
    let status = tokio::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .await
        .context("kill(1)")?;
    anyhow::ensure!(status.success(), "kill -KILL {pid}: {status}");
    let (times, failed) = poll
        .all_served(&targets, killed, Duration::from_secs(args.limit_secs))
        .await
        .context("after the kill")?;
    let samples = Samples::from_durations(&times);
    emit(&json!({
        "names": targets.len(),
        "settle_ms": settle_ms,
        "all_ms": samples.max_us() as f64 / 1e3,
        "p50_ms": samples.percentile_ms(50.0),
        "p99_ms": samples.percentile_ms(99.0),
        "first_ms": samples.percentile_ms(0.0),
        "tries": failed.values().sum::<u64>() + times.len() as u64,
        "failed_tries": failed,
    }));
    Ok(())
}

struct Poll {
    pause: Duration,
    try_timeout: Duration,
    bytes: usize,
}

impl Poll {
    /// Asks every target until each answered once; for each, how long
    /// after `since` its answer was whole, and what failed tries got.
    async fn all_served(
        self: &Arc<Self>,
        targets: &[Target],
        since: Instant,
        limit: Duration,
    ) -> anyhow::Result<(Vec<Duration>, Outcomes)> {
        let mut names = JoinSet::new();
        for target in targets {
            let (target, poll) = (target.clone(), Arc::clone(self));
            names.spawn(async move {
                let mut failed = Outcomes::new();
                let deadline = tokio::time::Instant::from_std(since + limit);
                let served =
                    tokio::time::timeout_at(deadline, poll.one(&target, since, &mut failed));
                (served.await.ok(), failed)
            });
        }
        let (mut times, mut failed, mut missing) = (Vec::new(), Outcomes::new(), 0);
        while let Some(joined) = names.join_next().await {
            let (time, outcomes) = joined?;
            match time {
                Some(time) => times.push(time),
                None => missing += 1,
            }
            for (outcome, n) in outcomes {
                *failed.entry(outcome).or_default() += n;
            }
        }
        if missing > 0 {
            bail!(
                "{missing} of {} names did not answer 200 within {limit:?}; failed tries: {failed:?}",
                targets.len()
            );
        }
        Ok((times, failed))
    }

    /// Asks `target` as a visitor who keeps reloading would: one request
    /// at a time, waited for (up to `try_timeout`), the next `pause` after
    /// one that failed; when the first whole good answer arrived, after
    /// `since`. Failed tries are tallied in `failed`.
    async fn one(&self, target: &Target, since: Instant, failed: &mut Outcomes) -> Duration {
        loop {
            let outcome =
                match tokio::time::timeout(self.try_timeout, get(target, self.bytes)).await {
                    Ok(Ok(())) => return since.elapsed(),
                    Ok(Err(why)) => why,
                    Err(_) => "timeout".to_owned(),
                };
            *failed.entry(outcome).or_default() += 1;
            tokio::time::sleep(self.pause).await;
        }
    }
}

/// One GET on a fresh connection: `Ok` for a 200 whose body has `bytes`
/// bytes, else what it got.
async fn get(target: &Target, bytes: usize) -> Result<(), String> {
    let mut conn = target.connect().await.map_err(|_| "error".to_owned())?;
    let response = conn
        .send_request(target.get())
        .await
        .map_err(|_| "error".to_owned())?;
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|_| "error".to_owned())?
        .to_bytes();
    match (status, body.len()) {
        (200, n) if n == bytes => Ok(()),
        (200, _) => Err("200-wrong-length".to_owned()),
        (status, _) => Err(status.to_string()),
    }
}
