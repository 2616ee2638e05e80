//! Open-loop load: GETs scheduled at a constant rate, sent over a fixed set
//! of keep-alive connections, each latency counted from the request's
//! scheduled send time. A request that waits for a free connection is late,
//! and its wait counts (no coordinated omission, as in wrk2).
//!
//! A pacer thread (`std::thread::sleep` wakes within tens of microseconds;
//! tokio's timer only to the millisecond) hands out the scheduled instants;
//! each connection's task takes the next one when it is free. Instants
//! nobody took within `DRAIN` of the end are "missed": they enter the
//! percentiles with the time they waited so far, a lower bound.
//!
//! Each connection carries one request before the clock starts, so a tunnel
//! has set up its path for it (a data channel, an upstream stream) and the
//! figure is the steady state.

use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use serde_json::json;
use tokio::sync::{Mutex, mpsc};

use crate::stats::{Samples, emit, micros};
use crate::target::{Sender, Target, TargetArgs};

/// A request that takes longer than this is an error.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Instants still queued this long after the end are not sent.
const DRAIN: Duration = Duration::from_secs(1);

#[derive(Debug, clap::Args)]
pub struct RateArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// Requests per second
    #[arg(long)]
    pub rate: f64,
    /// Seconds of load
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Keep-alive connections
    #[arg(long, default_value_t = 64)]
    pub connections: usize,
    /// Also write each request's scheduled time and latency (ms from the
    /// start, µs), one per line in order of schedule, to this file: where
    /// in the run the slow ones fall
    #[arg(long)]
    pub timeline: Option<std::path::PathBuf>,
}

#[derive(Default)]
struct Tally {
    sent: u64,
    ok: u64,
    errors: u64,
    missed: u64,
    /// Each request's scheduled instant and latency (µs).
    latencies: Vec<(Instant, u64)>,
    last_error: Option<String>,
    /// When the last successful response ended.
    last_done: Option<Instant>,
}

pub async fn run(args: RateArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.rate > 0.0, "--rate must be above 0");
    anyhow::ensure!(args.connections > 0, "--connections must be above 0");
    let target = Target::new(&args.target)?;
    // Connected, and one request each, before the clock starts.
    let mut warming = tokio::task::JoinSet::new();
    for _ in 0..args.connections {
        let target = target.clone();
        warming.spawn(async move {
            let conn = target.connect().await?;
            let (conn, status) = get(conn, &target).await?;
            anyhow::ensure!(status.is_success(), "warm-up request: {status}");
            anyhow::Ok(conn)
        });
    }
    let mut senders = Vec::with_capacity(args.connections);
    while let Some(conn) = warming.join_next().await {
        senders.push(conn??);
    }
    let total = (args.rate * args.duration).round() as u64;
    let interval = Duration::from_secs_f64(1.0 / args.rate);
    let start = Instant::now() + Duration::from_millis(50);
    let end = start + Duration::from_secs_f64(args.duration);

    let (slots, queue) = mpsc::unbounded_channel::<Instant>();
    let pacer = std::thread::spawn(move || {
        for i in 0..total {
            let due = start + interval.mul_f64(i as f64);
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
            if slots.send(due).is_err() {
                break;
            }
        }
    });
    let queue = Arc::new(Mutex::new(queue));
    let mut workers = Vec::with_capacity(senders.len());
    for sender in senders {
        let (target, queue) = (target.clone(), queue.clone());
        workers.push(tokio::spawn(worker(target, sender, queue, end + DRAIN)));
    }
    let mut tally = Tally::default();
    for worker in workers {
        let t = worker.await?;
        tally.sent += t.sent;
        tally.ok += t.ok;
        tally.errors += t.errors;
        tally.missed += t.missed;
        tally.latencies.extend(t.latencies);
        tally.last_error = t.last_error.or(tally.last_error);
        tally.last_done = tally.last_done.max(t.last_done);
    }
    let elapsed = tally.last_done.map_or(0.0, |t| (t - start).as_secs_f64());
    let _ = pacer.join();
    if let Some(path) = &args.timeline {
        tally.latencies.sort_unstable();
        let text: String = tally
            .latencies
            .iter()
            .map(|(due, latency)| {
                format!("{:.3} {latency}\n", (*due - start).as_secs_f64() * 1000.0)
            })
            .collect();
        std::fs::write(path, text)?;
    }
    let samples = Samples::new(tally.latencies.into_iter().map(|(_, us)| us).collect());
    emit(&json!({
        "rate": args.rate,
        "scheduled": total,
        "sent": tally.sent,
        "ok": tally.ok,
        "errors": tally.errors,
        "missed": tally.missed,
        "rps": if elapsed > 0.0 { tally.ok as f64 / elapsed } else { 0.0 },
        "p50_ms": samples.percentile_ms(50.0),
        "p90_ms": samples.percentile_ms(90.0),
        "p99_ms": samples.percentile_ms(99.0),
        "max_ms": samples.max_us() as f64 / 1000.0,
        "last_error": tally.last_error,
    }));
    Ok(())
}

/// One connection: takes the next scheduled instant, sends, waits for the
/// whole response, records the latency; reconnects after an error.
async fn worker(
    target: Target,
    sender: Sender,
    queue: Arc<Mutex<mpsc::UnboundedReceiver<Instant>>>,
    stop: Instant,
) -> Tally {
    let mut tally = Tally::default();
    let mut sender = Some(sender);
    loop {
        let Some(due) = queue.lock().await.recv().await else {
            break;
        };
        let now = Instant::now();
        if now >= stop {
            tally.missed += 1;
            tally.latencies.push((due, micros(now - due)));
            continue;
        }
        let conn = match sender.take().filter(|c| !c.is_closed()) {
            Some(conn) => conn,
            None => match target.connect().await {
                Ok(conn) => conn,
                Err(err) => {
                    tally.errors += 1;
                    tally.last_error = Some(format!("{err:#}"));
                    continue;
                }
            },
        };
        tally.sent += 1;
        match tokio::time::timeout(REQUEST_TIMEOUT, get(conn, &target)).await {
            Ok(Ok((conn, status))) if status.is_success() => {
                tally.ok += 1;
                let done = Instant::now();
                tally.latencies.push((due, micros(done - due)));
                tally.last_done = Some(done);
                sender = Some(conn);
            }
            Ok(Ok((conn, status))) => {
                tally.errors += 1;
                tally.last_error = Some(format!("status {status}"));
                sender = Some(conn);
            }
            Ok(Err(err)) => {
                tally.errors += 1;
                tally.last_error = Some(format!("{err:#}"));
            }
            Err(_) => {
                tally.errors += 1;
                tally.last_error = Some("timed out".into());
            }
        }
    }
    tally
}

async fn get(mut conn: Sender, target: &Target) -> anyhow::Result<(Sender, http::StatusCode)> {
    conn.ready().await?;
    let response = conn.send_request(target.get()).await?;
    let status = response.status();
    response.into_body().collect().await?;
    Ok((conn, status))
}
