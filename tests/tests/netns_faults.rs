//! Faults on a real link: the agent and its dev server live in a network
//! namespace of the test's own, the edge in this one, and the tunnel
//! crosses a veth pair whose far end drops packets at random (nftables
//! `numgen random`; `tc netem` is missing on these kernels), carries at most
//! 1280 bytes, or drops everything for 20 s.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use calvin_edge::Limits;
use calvin_proto::KEEP_ALIVE_INTERVAL;
use calvin_tests::netns::{Netns, counters};
use calvin_tests::{
    EdgeOptions, Origin, Process, TestEdge, binary, curl, curl_post, eventually, health_of,
    pattern_bytes, preview_when_connected, sha256_hex, token_for,
};

/// An edge here, and in the namespace an agent process and its origin.
struct Link {
    ns: Netns,
    edge: TestEdge,
    _agent: Process,
    _origin: Origin,
    url: String,
    _dir: tempfile::TempDir,
}

impl Link {
    /// The link, or `None` when this machine cannot make a namespace (the
    /// test is skipped, saying why).
    async fn start(test: &str, limits: Limits) -> Option<Link> {
        let ns = Netns::or_skip(test)?;
        let local: SocketAddr = "127.0.0.1:0".parse().expect("addr");
        let edge = TestEdge::start_with(EdgeOptions {
            limits,
            listen: Some((local, local, SocketAddr::from((ns.host_ip, 0)))),
            ..Default::default()
        })
        .await;
        let origin = Origin::start_in(ns.tcp_listener("127.0.0.1:0".parse().expect("addr")));
        let dir = tempfile::tempdir().expect("tempdir");
        let token = dir.path().join("token");
        std::fs::write(&token, token_for("alice")).expect("token file");
        let socket = dir.path().join("agent.sock");
        let path = |p: &Path| p.to_str().expect("utf-8 path").to_owned();
        let mut command = ns.command(&binary("calvin-agent"));
        command.args([
            "up",
            "--edge",
            &edge.quic.to_string(),
            "--token-file",
            &path(&token),
            "--ca",
            &path(&edge.ca()),
            "--server-name",
            "localhost",
            "--socket",
            &path(&socket),
        ]);
        let mut agent = Process::spawn(command);
        agent.line_after("control socket ").await;
        let created = preview_when_connected(&socket, origin.port).await;
        Some(Link {
            ns,
            edge,
            _agent: agent,
            _origin: origin,
            url: created.url,
            _dir: dir,
        })
    }

    fn ca(&self) -> PathBuf {
        self.edge.ca()
    }

    /// (agents connected, previews online) as the edge's /healthz tells.
    async fn health(&self) -> (u64, u64) {
        let (_, report) = health_of(self.edge.http).await;
        let count = |key: &str| report[key].as_u64().expect("a count");
        (count("agents_connected"), count("previews_online"))
    }

    async fn get(&self, path: &str, extra: &[&str]) -> calvin_tests::CurlOutput {
        let url = format!("{}{path}", self.url);
        let mut args = extra.to_vec();
        args.push(&url);
        curl(&self.ca(), &args).await
    }
}

/// Drops `percent`% of UDP in each direction inside the namespace, counted.
/// With GSO one dropped packet can be a run of datagrams: bursty loss.
fn lose(ns: &Netns, percent: u32) {
    ns.nft(&format!(
        "table inet loss {{
            chain in {{ type filter hook input priority 0;
                meta l4proto udp numgen random mod 100 < {percent} counter drop; }}
            chain out {{ type filter hook output priority 0;
                meta l4proto udp numgen random mod 100 < {percent} counter drop; }}
        }}"
    ));
}

fn blackhole(ns: &Netns) {
    ns.nft(
        "table inet blackhole {
            chain in { type filter hook input priority 0; meta l4proto udp counter drop; }
            chain out { type filter hook output priority 0; meta l4proto udp counter drop; }
        }",
    );
}

fn heal(ns: &Netns) {
    ns.nft("delete table inet blackhole");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfers_stay_byte_exact_through_loss_and_a_1280_byte_mtu() {
    let Some(link) = Link::start(
        "transfers_stay_byte_exact_through_loss_and_a_1280_byte_mtu",
        Limits::default(),
    )
    .await
    else {
        return;
    };
    link.ns.set_mtu(1280);
    lose(&link.ns, 5);
    const LEN: usize = 8 << 20;
    let expected = sha256_hex(&pattern_bytes(LEN));

    for http in ["--http2", "--http1.1"] {
        let started = Instant::now();
        let down = link.get(&format!("/bytes/{LEN}"), &[http]).await;
        let took = started.elapsed();
        assert_eq!(down.status, 200, "{http}: {}", down.stderr);
        assert_eq!(down.body.len(), LEN, "{http}: the whole body");
        assert_eq!(sha256_hex(&down.body), expected, "{http}: byte-exact");
        eprintln!("{http}: 8 MiB down through 5% loss, MTU 1280, in {took:?}");
    }

    let echo = format!("{}/echo", link.url);
    let (up, took) = curl_post(&link.ca(), &echo, &pattern_bytes(LEN), &[]).await;
    assert_eq!(up.status, 200, "{}", up.stderr);
    assert_eq!(up.body.len(), LEN);
    assert_eq!(sha256_hex(&up.body), expected, "the echo is byte-exact");
    eprintln!("8 MiB up and echoed back through 5% loss, MTU 1280, in {took:?}");

    let mut served = 0;
    for _ in 0..20 {
        let out = link.get("/hello", &[]).await;
        served += usize::from(out.status == 200 && out.text() == "hello from origin\n");
    }
    assert_eq!(served, 20, "every small request through the loss");

    // The loss was real: packets were dropped both ways.
    let dropped = counters(&link.ns.ruleset());
    eprintln!("dropped packets in, out: {dropped:?}");
    assert_eq!(dropped.len(), 2);
    assert!(dropped.iter().all(|&n| n > 20), "{dropped:?}");
}

/// A 20 s blackhole: the edge reads the agent offline within three
/// keep-alive intervals (its QUIC idle timeout, 12 s), a visitor meanwhile
/// gets a clear 502, and the preview serves again within 10 s of the path
/// healing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_20_s_blackhole_reads_offline_then_serves_within_10_s_of_healing() {
    let Some(link) = Link::start(
        "a_20_s_blackhole_reads_offline_then_serves_within_10_s_of_healing",
        Limits {
            reconnect_wait_secs: 1,
            ..Limits::default()
        },
    )
    .await
    else {
        return;
    };
    assert_eq!(link.get("/hello", &[]).await.status, 200);
    assert_eq!(link.health().await, (1, 1));

    blackhole(&link.ns);
    let cut = Instant::now();
    let three_keep_alives = 3 * KEEP_ALIVE_INTERVAL;
    let offline = eventually(three_keep_alives + Duration::from_secs(2), || async {
        (link.health().await == (0, 0)).then(|| cut.elapsed())
    })
    .await
    .expect("the edge reads the agent offline");
    eprintln!("offline {offline:?} into the blackhole");
    assert!(
        offline <= three_keep_alives,
        "offline after {offline:?}, past three keep-alive intervals"
    );
    let meanwhile = link.get("/hello", &[]).await;
    assert_eq!(meanwhile.status, 502, "{}", meanwhile.text());
    assert!(meanwhile.text().contains("offline"), "{}", meanwhile.text());
    assert_eq!(meanwhile.header("retry-after"), Some("5"));

    tokio::time::sleep(Duration::from_secs(20).saturating_sub(cut.elapsed())).await;
    heal(&link.ns);
    let healed = Instant::now();
    let back = eventually(Duration::from_secs(15), || async {
        let out = link.get("/hello", &[]).await;
        (out.status == 200 && out.text() == "hello from origin\n").then(|| healed.elapsed())
    })
    .await
    .expect("the preview serves again");
    eprintln!("serving again {back:?} after the path healed");
    assert!(back <= Duration::from_secs(10), "back after {back:?}");
    assert_eq!(link.health().await, (1, 1));
}

/// A request under way when the path goes dark is not left hanging until
/// the idle timeout: the edge's probe finds the agent silent and answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_waiting_on_a_blackholed_agent_gets_502_within_2_s() {
    let Some(link) = Link::start(
        "a_request_waiting_on_a_blackholed_agent_gets_502_within_2_s",
        Limits {
            reconnect_wait_secs: 0,
            ..Limits::default()
        },
    )
    .await
    else {
        return;
    };
    assert_eq!(link.get("/hello", &[]).await.status, 200);
    let waiting = {
        let url = format!("{}/slow?ms=8000", link.url);
        let ca = link.ca();
        tokio::spawn(async move {
            let started = Instant::now();
            let out = curl(&ca, &[&url]).await;
            (out, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    blackhole(&link.ns);
    let cut = Instant::now();
    let (out, _) = waiting.await.expect("request task");
    let after = cut.elapsed();
    eprintln!(
        "answered {after:?} after the path went dark: {}",
        out.status
    );
    assert_eq!(out.status, 502, "{}", out.text());
    assert!(out.text().contains("offline"), "{}", out.text());
    assert!(after <= Duration::from_secs(2), "answered after {after:?}");
}
