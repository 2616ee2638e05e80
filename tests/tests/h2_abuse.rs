//! HTTP/2 abuse at the edge, with frames written by hand.

use std::time::{Duration, Instant};

use calvin_tests::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// A HEADERS block for `GET /` on `authority` (HPACK, static table).
fn get_block(authority: &str) -> Vec<u8> {
    let mut b = vec![0x82, 0x87, 0x84, 0x01, authority.len() as u8];
    b.extend_from_slice(authority.as_bytes());
    b
}

async fn h2_conn(edge: &TestEdge, host: &str) -> TlsStream<TcpStream> {
    let mut tls = tls_to(edge.https, &edge.ca(), host, &[b"h2"]).await;
    tls.write_all(PREFACE).await.expect("preface");
    tls.write_all(&frame(4, 0, 0, &[])).await.expect("settings");
    tls
}

/// A preview on a fresh edge, and the names a raw client needs for it.
struct Preview {
    edge: TestEdge,
    created: calvin_agent::api::PreviewCreated,
    host: String,
    authority: String,
    _agent: TestAgent,
    _origin: Origin,
}

impl Preview {
    async fn start() -> Preview {
        let PreviewSetup {
            edge,
            agent,
            origin,
            created,
        } = PreviewSetup::start().await;
        let host = format!("{}.{DOMAIN}", created.name);
        let authority = format!("{host}:{}", edge.https.port());
        Preview {
            edge,
            created,
            host,
            authority,
            _agent: agent,
            _origin: origin,
        }
    }
}

/// What a connection sent back until it ended or `limit` passed: the
/// GOAWAY error code if one came, frame types seen, and whether it ended.
struct Answer {
    goaway: Option<u32>,
    kinds: Vec<u8>,
    closed: bool,
}

async fn answer<R: tokio::io::AsyncRead + Unpin>(r: &mut R, limit: Duration) -> Answer {
    let (mut buf, mut chunk) = (Vec::new(), vec![0u8; 1 << 16]);
    let mut out = Answer {
        goaway: None,
        kinds: Vec::new(),
        closed: false,
    };
    let deadline = Instant::now() + limit;
    loop {
        let mut at = 0;
        while buf.len() >= at + 9 {
            let len = (usize::from(buf[at]) << 16)
                | (usize::from(buf[at + 1]) << 8)
                | usize::from(buf[at + 2]);
            if buf.len() < at + 9 + len {
                break;
            }
            out.kinds.push(buf[at + 3]);
            if buf[at + 3] == 7 {
                let p = &buf[at + 9..at + 9 + len];
                out.goaway = Some(u32::from_be_bytes([p[4], p[5], p[6], p[7]]));
            }
            at += 9 + len;
        }
        buf.drain(..at);
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, r.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => buf.extend_from_slice(&chunk[..n]),
            Ok(_) => {
                out.closed = true;
                return out;
            }
            Err(_) => return out,
        }
    }
}

/// The test process's resident memory (the edge runs in it), in KiB.
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The floods, as bytes a client writes after its preface and SETTINGS.
fn floods(authority: &str) -> Vec<(&'static str, Vec<u8>)> {
    let post_block: Vec<u8> = [0x83, 0x87, 0x84, 0x01, authority.len() as u8]
        .into_iter()
        .chain(authority.bytes())
        .collect();
    vec![
        ("rapid reset", {
            let mut v = Vec::new();
            for i in 0..5000u32 {
                let id = 2 * i + 1;
                v.extend(frame(1, 0x5, id, &get_block(authority)));
                v.extend(frame(3, 0, id, &8u32.to_be_bytes()));
            }
            v
        }),
        ("CONTINUATION", {
            let mut v = frame(1, 0x1, 1, &get_block(authority));
            for _ in 0..20_000 {
                v.extend(frame(9, 0, 1, &[0x40, 1, b'a', 1, b'b']));
            }
            v
        }),
        (
            "PING",
            (0..100_000u64)
                .flat_map(|i| frame(6, 0, 0, &i.to_be_bytes()))
                .collect(),
        ),
        (
            "SETTINGS",
            (0..100_000).flat_map(|_| frame(4, 0, 0, &[])).collect(),
        ),
        ("empty DATA", {
            let mut v = frame(1, 0x4, 1, &post_block);
            for _ in 0..100_000 {
                v.extend(frame(0, 0, 1, &[]));
            }
            v
        }),
    ]
}

/// Sends `flood` on a new connection; what came back.
async fn flood(edge: &TestEdge, host: &str, bytes: Vec<u8>) -> Answer {
    let tls = h2_conn(edge, host).await;
    let (mut r, mut w) = tokio::io::split(tls);
    let writer = tokio::spawn(async move {
        let _ = w.write_all(&bytes).await;
        w
    });
    let out = answer(&mut r, Duration::from_secs(5)).await;
    drop(writer.await);
    out
}

/// Latencies of `n` GETs over one HTTP/2 connection, sorted.
async fn latencies(edge: &TestEdge, url: &str, n: usize) -> Vec<Duration> {
    let host = url.trim_start_matches("https://");
    let host = host.split(':').next().unwrap_or_default().to_owned();
    let mut sender = h2_client(edge.https, &edge.ca(), &host).await;
    let mut all = Vec::new();
    for _ in 0..n {
        let req = http::Request::get(format!("{url}/hello"))
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .expect("request");
        let started = Instant::now();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn floods_get_goaway_while_other_visitors_go_on() {
    let Preview {
        edge,
        created,
        host,
        authority,
        _agent,
        _origin,
    } = Preview::start().await;

    let rss_before = rss_kib();
    // The floods, three rounds, each while another visitor goes on.
    let mut rounds = 0;
    let mut busy = Vec::new();
    for _ in 0..3 {
        let floods_done = async {
            for (label, bytes) in floods(&authority) {
                let out = flood(&edge, &host, bytes).await;
                assert_eq!(out.goaway, Some(11), "{label}: GOAWAY ENHANCE_YOUR_CALM");
                assert!(out.closed, "{label}: the connection ends");
            }
        };
        let (_, measured) = tokio::join!(floods_done, latencies(&edge, &created.url, 100));
        busy.extend(measured);
        rounds += 1;
    }
    busy.sort();
    let rss_after = rss_kib();
    // What a visitor can rely on during the floods: every request
    // answered 200. How much slower, a timing of this shared machine, is
    // printed, never asserted (as figure 8 measures it for slowloris).
    println!(
        "{} GETs answered 200 during {rounds} rounds of floods (p99 {:?}); RSS {} -> {} KiB",
        busy.len(),
        p99(&busy),
        rss_before,
        rss_after
    );
    assert!(
        rss_after < rss_before + 64 * 1024,
        "memory grew from {rss_before} to {rss_after} KiB"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_pinging_as_browsers_do_is_served() {
    let Preview {
        edge,
        host,
        authority,
        created: _,
        _agent,
        _origin,
    } = Preview::start().await;
    let mut tls = h2_conn(&edge, &host).await;
    let mut bytes: Vec<u8> = (0..50u64)
        .flat_map(|i| frame(6, 0, 0, &i.to_be_bytes()))
        .collect();
    bytes.extend(frame(4, 0, 0, &[]));
    bytes.extend(frame(1, 0x5, 1, &get_block(&authority)));
    tls.write_all(&bytes).await.expect("write");
    let out = answer(&mut tls, Duration::from_secs(2)).await;
    assert_eq!(out.goaway, None);
    assert!(
        out.kinds.contains(&1),
        "a response HEADERS frame: {:?}",
        out.kinds
    );
    assert_eq!(
        out.kinds.iter().filter(|k| **k == 6).count(),
        50,
        "50 PING ACKs"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zero_window_holds_only_a_bounded_buffer() {
    let Preview {
        edge,
        created,
        host,
        authority,
        _agent,
        _origin,
    } = Preview::start().await;
    let rss_before = rss_kib();
    // SETTINGS_INITIAL_WINDOW_SIZE = 0, then 20 downloads of 64 MiB each.
    let mut conns = Vec::new();
    for _ in 0..4 {
        let mut tls = h2_conn(&edge, &host).await;
        let mut bytes = frame(4, 0, 0, &[0, 4, 0, 0, 0, 0]);
        for i in 0..5u32 {
            let path = b"/bytes/67108864";
            let mut block = vec![0x82, 0x87, 0x04, path.len() as u8];
            block.extend_from_slice(path);
            block.extend_from_slice(&[0x01, authority.len() as u8]);
            block.extend_from_slice(authority.as_bytes());
            bytes.extend(frame(1, 0x5, 2 * i + 1, &block));
        }
        tls.write_all(&bytes).await.expect("write");
        conns.push(tls);
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_held = rss_kib();
    println!("RSS {rss_before} -> {rss_held} KiB with 20 stalled 64 MiB downloads");
    assert!(
        rss_held < rss_before + 64 * 1024,
        "memory grew from {rss_before} to {rss_held} KiB"
    );
    // Another visitor is served meanwhile.
    let out = curl(&edge.ca(), &[&format!("{}/hello", created.url)]).await;
    assert_eq!(out.status, 200);
    drop(conns);
}
