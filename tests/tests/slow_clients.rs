//! Slow clients: slowloris heads and slow POSTs are closed by the header
//! timeout and the body's minimum rate while other visitors go on, and the
//! edge's accept loop lives through running out of file descriptors.

use std::time::{Duration, Instant};

use calvin_agent::api::PreviewCreated;
use calvin_edge::Limits;
use calvin_tests::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// An edge with `limits`, an agent of alice's on it, and a preview of an
/// origin.
async fn preview_with(limits: Limits) -> PreviewSetup {
    PreviewSetup::on(TestEdge::with_limits(limits).await).await
}

/// Latencies of `n` GETs over one keep-alive HTTP/1.1 connection, sorted.
async fn latencies(edge: &TestEdge, host: &str, n: usize) -> Vec<Duration> {
    let mut sender = h1_client(edge.http).await;
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
    // 5,500 connections from this process: past a soft limit of 1,024 (a
    // contributor's usual), which the edge raises for itself too.
    calvin_edge::raise_open_files_limit();
    let PreviewSetup {
        edge,
        agent: _agent,
        origin: _origin,
        created: PreviewCreated { name, .. },
    } = preview_with(Limits {
        header_read_timeout_secs: 2,
        min_request_body_bytes: 1000,
        request_body_rate_window_secs: 2,
        requests_per_second_per_ip: 0,
        requests_per_second_per_preview: 0,
        ..Default::default()
    })
    .await;
    let host = format!("{name}.{DOMAIN}");

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
    // How much the attack slows the others is a benchmark's figure
    // (bench: figure 8), not this test's: a timing of a shared machine
    // would fail it for no fault of the edge's.
    println!(
        "300 GETs answered 200 under 5,000 slowloris and 500 slow POSTs (p99 {:?}); \
         slowest slowloris closed after {slowloris_slowest:?}, slow POST after {post_slowest:?}",
        p99(&busy),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_at_a_fair_rate_passes_and_a_trickle_gets_408() {
    let PreviewSetup {
        edge,
        agent: _agent,
        origin: _origin,
        created: PreviewCreated { name, .. },
    } = preview_with(Limits {
        min_request_body_bytes: 1000,
        request_body_rate_window_secs: 1,
        ..Default::default()
    })
    .await;
    let host = format!("{name}.{DOMAIN}");

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

/// A slow POST of declared length (the classic slow-POST attack declares a
/// large one) is judged at the edge alone: the edge reads 64 KiB of it
/// ahead of the origin, and this one never gets there, so the origin (a
/// dev server that may serve one request at a time) never sees it. That
/// holds on every path: a plain-HTTP connection's first request (read on
/// the front), a later one on the same connection, HTTPS over HTTP/1.1 and
/// HTTP/2. A body of unknown length (chunked) streams from its first byte,
/// as a full-duplex stream must, and is still cut by the least rate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_post_of_declared_length_never_reaches_the_origin() {
    let PreviewSetup {
        edge,
        agent: _agent,
        origin,
        created: PreviewCreated { name, .. },
    } = preview_with(Limits {
        min_request_body_bytes: 1000,
        request_body_rate_window_secs: 1,
        requests_per_second_per_ip: 0,
        requests_per_second_per_preview: 0,
        ..Default::default()
    })
    .await;
    let (http, https) = (edge.http_url(&name), edge.url(&name));
    let dir = tempfile::tempdir().expect("tempdir");
    let body = dir.path().join("body");
    std::fs::write(&body, pattern_bytes(100_000)).expect("body");
    let upload = format!("@{}", body.display());
    let slow = ["--limit-rate", "200", "--max-time", "20"];

    let cases: [(&str, Vec<&str>); 3] = [
        ("plain HTTP, first request", vec![]),
        ("HTTPS, HTTP/1.1", vec!["--http1.1"]),
        (
            "chunked",
            vec!["--http1.1", "-H", "Transfer-Encoding: chunked"],
        ),
    ];
    for (case, extra) in cases {
        let before = origin.requests();
        let url = match case {
            "plain HTTP, first request" => format!("{http}/count"),
            _ => format!("{https}/count"),
        };
        let mut args: Vec<&str> = slow.to_vec();
        args.extend(extra);
        args.extend(["--data-binary", &upload, &url]);
        let out = curl(&edge.ca(), &args).await;
        let reached = origin.requests() - before;
        eprintln!("{case}: {}, the origin got {reached}", out.status);
        assert_eq!(out.status, 408, "{case}: {out:?}");
        assert_eq!(
            out.header("x-calvin-error"),
            Some("body-too-slow"),
            "{case}"
        );
        let expected = usize::from(case == "chunked");
        assert_eq!(reached, expected, "{case}: requests the origin got");
    }
    // HTTP/2, from hyper: curl 7.88 sleeping for its --limit-rate reads
    // the answer only after the edge has reset the unread upload, and then
    // reports the reset instead of the answer.
    let before = origin.requests();
    let status = h2_slow_post(&edge, &name).await;
    let reached = origin.requests() - before;
    eprintln!("HTTPS, HTTP/2: {status}, the origin got {reached}");
    assert_eq!((status, reached), (408, 0), "HTTPS, HTTP/2");

    // A later request on a plain-HTTP connection (the proxy reads it, not
    // the front): a GET, then the slow POST, one byte every 500 ms.
    let before = origin.requests();
    let host = format!("{name}.{DOMAIN}");
    let opening = format!(
        "GET /hello HTTP/1.1\r\nHost: {host}\r\n\r\n\
         POST /count HTTP/1.1\r\nHost: {host}\r\nContent-Length: 100000\r\n\r\n"
    );
    let (took, said) = trickle(edge.http, opening, b"a").await;
    let reached = origin.requests() - before;
    eprintln!("plain HTTP, second request: closed after {took:?}, the origin got {reached}");
    assert!(said.starts_with("HTTP/1.1 200 "), "{said}");
    assert!(
        said.contains("HTTP/1.1 408 ") && said.contains("body-too-slow"),
        "{said}"
    );
    assert_eq!(reached, 1, "only the GET reaches the origin");

    // At full speed the same upload passes whole, on each path.
    for target in [format!("{http}/count"), format!("{https}/count")] {
        let out = curl(&edge.ca(), &["--data-binary", &upload, &target]).await;
        assert_eq!(out.status, 200, "{out:?}");
        let sum: u64 = pattern_bytes(100_000).iter().map(|&b| u64::from(b)).sum();
        assert_eq!(out.text(), format!("{} {sum}\n", 100_000));
    }
}

/// The edge reads ahead 64 KiB of a body and no more: with 64 KiB sent and
/// the rest held back, a body of 65,536 bytes has not reached the origin
/// (one byte is missing), one of 65,537 has. On a plain-HTTP connection's
/// first request (the front) and on a later one (the proxy).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_edge_reads_64_kib_ahead_and_no_more() {
    let PreviewSetup {
        edge,
        agent: _agent,
        origin,
        created: PreviewCreated { name, .. },
    } = preview_with(Limits {
        min_request_body_bytes: 1,
        request_body_rate_window_secs: 30,
        requests_per_second_per_ip: 0,
        requests_per_second_per_preview: 0,
        ..Default::default()
    })
    .await;
    let host = format!("{name}.{DOMAIN}");
    for later in [false, true] {
        for (length, sent, reaches) in [(65_536usize, 65_535usize, false), (65_537, 65_536, true)] {
            let mut tcp = TcpStream::connect(edge.http).await.expect("tcp");
            if later {
                let get = format!("GET /hello HTTP/1.1\r\nHost: {host}\r\n\r\n");
                tcp.write_all(get.as_bytes()).await.expect("write");
                let mut answer = vec![0u8; 4096];
                let n = tcp.read(&mut answer).await.expect("read");
                assert!(answer[..n].starts_with(b"HTTP/1.1 200 "));
            }
            let before = origin.requests();
            let head =
                format!("POST /count HTTP/1.1\r\nHost: {host}\r\nContent-Length: {length}\r\n\r\n");
            tcp.write_all(head.as_bytes()).await.expect("head");
            tcp.write_all(&pattern_bytes(sent)).await.expect("body");
            let got = eventually(Duration::from_secs(3), || async {
                (origin.requests() > before).then_some(())
            })
            .await
            .is_some();
            eprintln!("later {later}, {length} bytes with {sent} sent: the origin got it: {got}");
            assert_eq!(
                got, reaches,
                "later {later}: a body of {length} with {sent} sent"
            );
            // The rest: the request is served, whole.
            tcp.write_all(&pattern_bytes(length)[sent..])
                .await
                .expect("rest");
            let mut answer = Vec::new();
            let mut buf = [0u8; 4096];
            while !answer.ends_with(b"\n") {
                let n = tcp.read(&mut buf).await.expect("read");
                assert!(n > 0, "closed: {}", String::from_utf8_lossy(&answer));
                answer.extend_from_slice(&buf[..n]);
            }
            let answer = String::from_utf8_lossy(&answer);
            assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
            assert!(answer.contains(&format!("\r\n\r\n{length} ")), "{answer}");
        }
    }
}

/// POSTs to `name` over HTTP/2 a body declared 100,000 bytes long, one
/// byte every 500 ms; the answer's status.
async fn h2_slow_post(edge: &TestEdge, name: &str) -> u16 {
    let host = format!("{name}.{DOMAIN}");
    let mut sender = h2_client(edge.https, &edge.ca(), &host).await;
    let trickle = futures_util::stream::unfold((), |()| async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let frame = hyper::body::Frame::data(bytes::Bytes::from_static(b"a"));
        Some((Ok::<_, std::convert::Infallible>(frame), ()))
    });
    let req = http::Request::post(format!("https://{host}:{}/count", edge.https.port()))
        .header(http::header::CONTENT_LENGTH, "100000")
        .body(http_body_util::StreamBody::new(Box::pin(trickle)))
        .expect("request");
    let response = tokio::time::timeout(Duration::from_secs(10), sender.send_request(req))
        .await
        .expect("answered within 10 s")
        .expect("response");
    response.status().as_u16()
}

/// Slowloris over HTTPS: 200 visitors make their TLS handshake (HTTP/1.1),
/// then trickle a request head a line every 300 ms; the edge closes each
/// at its header timeout (1 s, at most a quarter more), while a visitor on
/// a TLS connection that moved to the serving runtime after its first
/// request goes on being served on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_slowloris_is_closed_by_the_header_timeout() {
    let PreviewSetup {
        edge,
        agent: _agent,
        origin: _origin,
        created: PreviewCreated { name, .. },
    } = preview_with(Limits {
        header_read_timeout_secs: 1,
        requests_per_second_per_ip: 0,
        requests_per_second_per_preview: 0,
        ..Default::default()
    })
    .await;
    let host = format!("{name}.{DOMAIN}");
    let (https, ca) = (edge.https, edge.ca());
    // A visitor whose connection moved after its first request.
    let mut kept = tls_h1(https, &ca, &host).await;
    served(&mut kept, &host).await;

    let slow: Vec<_> = (0..200)
        .map(|_| {
            let (ca, host) = (ca.clone(), host.clone());
            tokio::spawn(async move {
                let mut tls = tls_h1(https, &ca, &host).await;
                let started = Instant::now();
                let opening = format!("GET / HTTP/1.1\r\nHost: {host}\r\n");
                let _ = tls.write_all(opening.as_bytes()).await;
                let mut buf = [0u8; 1024];
                loop {
                    match tokio::time::timeout(Duration::from_millis(300), tls.read(&mut buf)).await
                    {
                        Ok(Ok(0) | Err(_)) => return started.elapsed(),
                        Ok(Ok(_)) => {}
                        Err(_) => {
                            if tls.write_all(b"X-a: b\r\n").await.is_err() {
                                return started.elapsed();
                            }
                        }
                    }
                    if started.elapsed() > Duration::from_secs(10) {
                        return started.elapsed();
                    }
                }
            })
        })
        .collect();
    // Meanwhile, and on the same connection as before.
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        served(&mut kept, &host).await;
    }
    let mut slowest = Duration::ZERO;
    for task in slow {
        slowest = slowest.max(task.await.expect("slow visitor"));
    }
    eprintln!("the slowest HTTPS slowloris connection was closed after {slowest:?}");
    assert!(
        slowest >= Duration::from_millis(900) && slowest < Duration::from_millis(2500),
        "{slowest:?}"
    );
}

/// Sends a GET for /hello on `tls` and reads its answer.
async fn served<S: AsyncReadExt + AsyncWriteExt + Unpin>(tls: &mut S, host: &str) {
    let get = format!("GET /hello HTTP/1.1\r\nHost: {host}\r\n\r\n");
    tls.write_all(get.as_bytes()).await.expect("write");
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    while !answer.ends_with(b"hello from origin\n") {
        let n = tls.read(&mut buf).await.expect("read");
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&answer));
        answer.extend_from_slice(&buf[..n]);
    }
}

/// A connection that times out before its first request is reset, not
/// closed: the visitor reads a reset, and the edge keeps no socket in
/// TIME_WAIT for it (`ss`). Three ways to time out: a plain HTTP head
/// that never ends, the same over TLS, and a TLS handshake never begun
/// (its own 10 s limit). A connection the edge closes after answering
/// (a slow POST's 408) still ends with its answer and a FIN.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_times_out_unstarted_is_reset() {
    let PreviewSetup {
        edge,
        agent: _agent,
        origin: _origin,
        created: PreviewCreated { name, .. },
    } = preview_with(Limits {
        header_read_timeout_secs: 1,
        min_request_body_bytes: 1_000,
        request_body_rate_window_secs: 1,
        requests_per_second_per_ip: 0,
        requests_per_second_per_preview: 0,
        ..Default::default()
    })
    .await;
    let host = format!("{name}.{DOMAIN}");
    let head = format!("GET / HTTP/1.1\r\nHost: {host}\r\n");

    /// How the edge ended a connection nothing more is written to: the
    /// error kind read (or "end" for a FIN), what it said, and the time.
    async fn ending<S: AsyncReadExt + Unpin>(mut stream: S) -> (String, String, Duration) {
        let started = Instant::now();
        let mut said = Vec::new();
        let mut buf = [0u8; 1024];
        let how = loop {
            match tokio::time::timeout(Duration::from_secs(15), stream.read(&mut buf)).await {
                Ok(Ok(0)) => break "end".to_owned(),
                Ok(Ok(n)) => said.extend_from_slice(&buf[..n]),
                Ok(Err(err)) => break format!("{:?}", err.kind()),
                Err(_) => break "still open".to_owned(),
            }
        };
        let said = String::from_utf8_lossy(&said).into_owned();
        (how, said, started.elapsed())
    }

    let mut plain = Vec::new();
    for _ in 0..20 {
        let mut tcp = TcpStream::connect(edge.http).await.expect("tcp");
        tcp.write_all(head.as_bytes()).await.expect("head");
        plain.push((tcp.local_addr().expect("port").port(), tcp));
    }
    let mut tls = tls_h1(edge.https, &edge.ca(), &host).await;
    tls.write_all(head.as_bytes()).await.expect("head over TLS");
    let tls_port = tls.get_ref().0.local_addr().expect("port").port();
    let silent = TcpStream::connect(edge.https).await.expect("tcp");
    let silent_port = silent.local_addr().expect("port").port();
    let mut post = TcpStream::connect(edge.http).await.expect("tcp");
    let post_head =
        format!("POST /echo HTTP/1.1\r\nHost: {host}\r\nContent-Length: 100000\r\n\r\nx");
    post.write_all(post_head.as_bytes()).await.expect("post");
    let post_port = post.local_addr().expect("port").port();

    let plain_ports: Vec<u16> = plain.iter().map(|(port, _)| *port).collect();
    let plain_endings =
        futures_util::future::join_all(plain.into_iter().map(|(_, tcp)| ending(tcp)));
    let (plain_endings, tls_ending, silent_ending, post_ending) =
        tokio::join!(plain_endings, ending(tls), ending(silent), ending(post));
    for (how, said, took) in &plain_endings {
        assert_eq!(
            how, "ConnectionReset",
            "plain head: said {said:?} after {took:?}"
        );
        assert!(said.is_empty(), "{said}");
        assert!(
            *took >= Duration::from_millis(900) && *took < Duration::from_millis(2500),
            "{took:?}"
        );
    }
    let (how, said, took) = &tls_ending;
    assert_eq!(
        how, "ConnectionReset",
        "TLS head: said {said:?} after {took:?}"
    );
    assert!(
        *took >= Duration::from_millis(900) && *took < Duration::from_millis(2500),
        "{took:?}"
    );
    let (how, _, took) = &silent_ending;
    assert_eq!(how, "ConnectionReset", "no TLS handshake, after {took:?}");
    assert!(
        *took >= Duration::from_secs(9) && *took < Duration::from_secs(12),
        "{took:?}"
    );
    let (how, said, _) = &post_ending;
    assert!(said.starts_with("HTTP/1.1 408"), "slow POST: {said:?}");
    assert_eq!(how, "end", "slow POST after its 408");
    eprintln!(
        "reset: 20 plain heads after {:?} at most, a TLS head after {:?}, a silent TLS \
         connection after {:?}; the slow POST got its 408 and a FIN",
        plain_endings.iter().map(|e| e.2).max().unwrap_or_default(),
        tls_ending.2,
        silent_ending.2
    );

    // What the edge holds in TIME_WAIT, by the visitor port it was for.
    let ss = std::process::Command::new("ss")
        .args(["-Htan", "state", "time-wait"])
        .output()
        .expect("ss (iproute2)");
    assert!(ss.status.success(), "ss failed");
    let edge_ports = [edge.http.port(), edge.https.port()];
    let waiting: Vec<u16> = String::from_utf8_lossy(&ss.stdout)
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let port = |f: &str| f.rsplit_once(':').and_then(|(_, p)| p.parse::<u16>().ok());
            let local = port(fields.get(2)?)?;
            edge_ports.contains(&local).then(|| port(fields.get(3)?))?
        })
        .collect();
    let reset_ports: Vec<u16> = plain_ports
        .iter()
        .copied()
        .chain([tls_port, silent_port])
        .collect();
    let held: Vec<&u16> = waiting.iter().filter(|p| reset_ports.contains(p)).collect();
    assert!(
        held.is_empty(),
        "the edge holds these visitors' sockets in TIME_WAIT: {held:?}"
    );
    assert!(
        waiting.contains(&post_port),
        "the slow POST's close (a FIN after its 408) should leave the edge in TIME_WAIT: {waiting:?}"
    );
}
