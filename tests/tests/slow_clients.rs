//! Slow clients: slowloris heads and slow POSTs are closed by the header
//! timeout and the body's minimum rate while other visitors go on, and the
//! edge's accept loop lives through running out of file descriptors.

use std::time::{Duration, Instant};

use calvin_edge::Limits;
use calvin_tests::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Latencies of `n` GETs over one keep-alive HTTP/1.1 connection, sorted.
async fn latencies(edge: &TestEdge, host: &str, n: usize) -> Vec<Duration> {
    let tcp = TcpStream::connect(edge.http).await.expect("tcp");
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
            .await
            .expect("h1");
    tokio::spawn(conn);
    let mut all = Vec::new();
    for _ in 0..n {
        let req = http::Request::get("/hello")
            .header(http::header::HOST, host)
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .expect("request");
        let started = Instant::now();
        sender.ready().await.expect("connection ready");
        let response = sender.send_request(req).await.expect("response");
        assert_eq!(response.status(), 200);
        http_body_util::BodyExt::collect(response.into_body())
            .await
            .expect("body");
        all.push(started.elapsed());
    }
    all.sort();
    all
}

/// Writes `opening`, then `trickle` every 500 ms until the edge closes the
/// connection; how long that took, and what the edge said.
async fn trickle(
    edge: std::net::SocketAddr,
    opening: String,
    trickle: &'static [u8],
) -> (Duration, String) {
    let started = Instant::now();
    let Ok(mut tcp) = TcpStream::connect(edge).await else {
        return (Duration::MAX, String::new());
    };
    let _ = tcp.write_all(opening.as_bytes()).await;
    let mut said = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        match tokio::time::timeout(Duration::from_millis(500), tcp.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => break,
            Ok(Ok(n)) => said.extend_from_slice(&buf[..n]),
            Err(_) => {
                if tcp.write_all(trickle).await.is_err() {
                    break;
                }
            }
        }
        if started.elapsed() > Duration::from_secs(30) {
            return (Duration::MAX, String::from_utf8_lossy(&said).into_owned());
        }
    }
    (
        started.elapsed(),
        String::from_utf8_lossy(&said).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_and_slow_posts_are_closed_while_others_go_on() {
    let edge = TestEdge::with_limits(Limits {
        header_read_timeout_secs: 2,
        min_request_body_bytes: 1000,
        request_body_rate_window_secs: 2,
        requests_per_second_per_ip: 0,
        requests_per_second_per_preview: 0,
        ..Default::default()
    })
    .await;
    let agent = TestAgent::start(&edge, "alice").await;
    let origin = Origin::start().await;
    let created = agent.preview(origin.port, None).await;
    let host = format!("{}.{DOMAIN}", created.name);

    let quiet = latencies(&edge, &host, 300).await;

    let slowloris: Vec<_> = (0..5000)
        .map(|_| {
            let opening = format!("GET / HTTP/1.1\r\nHost: {host}\r\n");
            tokio::spawn(trickle(edge.http, opening, b"X-a: b\r\n"))
        })
        .collect();
    let slow_posts: Vec<_> = (0..500)
        .map(|_| {
            let opening = format!(
                "POST /count HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n\r\n"
            );
            tokio::spawn(trickle(edge.http, opening, b"1\r\na\r\n"))
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let busy = latencies(&edge, &host, 300).await;

    let mut slowloris_slowest = Duration::ZERO;
    for task in slowloris {
        let (took, _) = task.await.expect("slowloris");
        assert!(
            took < Duration::from_secs(10),
            "a slowloris connection lasted {took:?}"
        );
        slowloris_slowest = slowloris_slowest.max(took);
    }
    let mut post_slowest = Duration::ZERO;
    for task in slow_posts {
        let (took, said) = task.await.expect("slow post");
        assert!(
            took < Duration::from_secs(10),
            "a slow POST lasted {took:?}"
        );
        assert!(
            said.starts_with("HTTP/1.1 408 ") && said.contains("body-too-slow"),
            "{said}"
        );
        post_slowest = post_slowest.max(took);
    }
    println!(
        "p99 quiet {:?}, under 5,000 slowloris and 500 slow POSTs {:?} ({:.2}x); \
         slowest slowloris closed after {slowloris_slowest:?}, slow POST after {post_slowest:?}",
        p99(&quiet),
        p99(&busy),
        p99(&busy).as_secs_f64() / p99(&quiet).as_secs_f64(),
    );
    // Loose: the attackers run in this same process, on the same 2 cores.
    assert!(
        p99(&busy) < p99(&quiet) * 3 + Duration::from_millis(20),
        "p99 quiet {:?}, under attack {:?}",
        p99(&quiet),
        p99(&busy)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_at_a_fair_rate_passes_and_a_trickle_gets_408() {
    let edge = TestEdge::with_limits(Limits {
        min_request_body_bytes: 1000,
        request_body_rate_window_secs: 1,
        ..Default::default()
    })
    .await;
    let agent = TestAgent::start(&edge, "alice").await;
    let origin = Origin::start().await;
    let created = agent.preview(origin.port, None).await;
    let host = format!("{}.{DOMAIN}", created.name);

    // 3 s at 4,000 bytes a second: served whole.
    let mut tcp = TcpStream::connect(edge.http).await.expect("tcp");
    let head =
        format!("POST /count HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n\r\n");
    tcp.write_all(head.as_bytes()).await.expect("head");
    let chunk = format!("{:x}\r\n{}\r\n", 400, "a".repeat(400));
    for _ in 0..30 {
        tcp.write_all(chunk.as_bytes()).await.expect("chunk");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tcp.write_all(b"0\r\n\r\n").await.expect("end");
    let out = read_all(&mut tcp).await;
    assert!(out.text.starts_with("HTTP/1.1 200 "), "{}", out.text);
    assert!(
        out.text.ends_with(&format!("12000 {}\n", 12000 * 97)),
        "{}",
        out.text
    );

    // 100 bytes a second: cut after its first window.
    let started = Instant::now();
    let (took, said) = trickle(
        edge.http,
        head.clone(),
        b"32\r\naaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n",
    )
    .await;
    assert!(said.starts_with("HTTP/1.1 408 "), "{said}");
    assert!(
        said.contains("the request body came slower than 1000 bytes in 1 s"),
        "{said}"
    );
    assert!(
        took < Duration::from_secs(3),
        "{took:?} ({:?})",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_accept_loop_lives_through_running_out_of_descriptors() {
    let state = tempfile::tempdir().expect("tempdir");
    let edge_dir = state.path().join("edge");
    let any = "127.0.0.1:0";
    let edge = EdgeProcess::start(&edge_dir, any, any, any).await;
    let pid = edge.process.child.id().expect("pid");
    let ca = edge_dir.join("ca.pem");
    let health = format!("http://127.0.0.1:{}/healthz", edge.http.port());
    assert_eq!(curl(&ca, &[&health]).await.status, 200);

    // 64 descriptors, then 200 connections that send nothing.
    let limited = tokio::process::Command::new("prlimit")
        .args(["--pid", &pid.to_string(), "--nofile=64:64"])
        .status()
        .await
        .expect("prlimit runs");
    assert!(limited.success());
    let mut held = Vec::new();
    for _ in 0..200 {
        // Past the listen backlog a connect waits for SYN retries.
        let connect = TcpStream::connect(edge.http);
        if let Ok(Ok(tcp)) = tokio::time::timeout(Duration::from_millis(200), connect).await {
            held.push(tcp);
        }
    }
    assert!(held.len() > 64, "only {} connections", held.len());
    // While it is out of descriptors the edge waits instead of spinning.
    let cpu = |pid: u32| -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let fields: Vec<&str> = stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .collect();
        fields
            .get(11)
            .and_then(|u| u.parse::<u64>().ok())
            .unwrap_or(0)
            + fields
                .get(12)
                .and_then(|s| s.parse::<u64>().ok())
                .unwrap_or(0)
    };
    let before = cpu(pid);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let ticks = cpu(pid) - before;
    println!("edge CPU while out of descriptors: {ticks} ticks in 2 s");
    assert!(ticks < 100, "the edge spun: {ticks} clock ticks in 2 s");

    // The descriptors come back: the edge serves again.
    drop(held);
    let dropped = Instant::now();
    let served = eventually(Duration::from_secs(10), || async {
        let out = curl(&ca, &["--max-time", "2", &health]).await;
        (out.status == 200).then_some(())
    })
    .await;
    assert!(served.is_some(), "the edge did not serve again");
    println!(
        "served again {:?} after the descriptors came back",
        dropped.elapsed()
    );
}
