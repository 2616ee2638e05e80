//! The agent survives a change of network: its QUIC connection moves to
//! the new path (migration, which the edge validates) and what is under
//! way goes on; only when that fails does the agent reconnect.
//!
//! The agent and its dev server live in a network namespace whose UDP to
//! the edge goes through nftables SNAT, as behind a home router; the test
//! moves that NAT mid-download, to another port (a NAT that rebinds), then
//! to another address of the namespace (a laptop on another network).
//! Changing a NAT rule changes nothing for a flow conntrack already
//! tracks, so each move also puts the flow in a conntrack zone of its own
//! (`ct zone set`, before conntrack, both ways): the next packet is a new
//! flow there and takes the new rule, with no `conntrack -D` (no tool to
//! install) and in one atomic nft transaction. The edge is
//! `calvin-edge serve` on this side of the link, so its log and
//! `/metrics` are what an operator reads; curl plays the visitor.
//!
//! The throttled visitor keeps the agent waiting on the edge's
//! flow-control window most of the time, sending nothing: its path probe
//! (the agent's `path_probe`) is what gets it heard on the new path before
//! the edge's liveness watch gives up on it.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use calvin_proto::IDLE_TIMEOUT;
use calvin_tests::netns::Netns;
use calvin_tests::serve_edge::ServeEdge;
use calvin_tests::{
    CurlOutput, Origin, Process, binary, curl, eventually, pattern_bytes, preview_when_connected,
    sha256_hex, token_for, write_secret,
};

const ZONE: &str = "preview.test";

/// The download: 64 MiB at 7 MiB/s, so that it lasts about 9 s and both
/// moves land in its middle.
const LEN: usize = 64 << 20;
const RATE: &str = "7M";

/// The ports the namespace's NAT gives the agent's flow.
const FIRST_PORT: u16 = 40_001;
const SECOND_PORT: u16 = 40_002;

/// An edge here (QUIC on this side of the link), and in the namespace an
/// agent process and its origin, previewed.
struct Moving {
    ns: Netns,
    edge: ServeEdge,
    /// The edge's QUIC address, as the agent dials it.
    quic: SocketAddr,
    agent: Process,
    origin: Origin,
    /// The agent's `/metrics`, in the namespace.
    agent_metrics: String,
    url: String,
    /// curl's `--resolve` for the preview's name.
    resolve: String,
    ca: PathBuf,
    _dir: tempfile::TempDir,
}

impl Moving {
    /// The set-up, the agent's flow NATed to the namespace's address and
    /// [`FIRST_PORT`] from its first packet; `None` when this machine
    /// cannot make a namespace (the test is skipped, saying why).
    async fn start(test: &str) -> Option<Moving> {
        let ns = Netns::or_skip(test)?;
        let dir = tempfile::tempdir().expect("tempdir");
        let certs = calvin_edge::dev::load_or_create(&dir.path().join("certs"), ZONE)
            .expect("certificates");
        let config = format!(
            r#"domain = "{ZONE}"
state_dir = "{state}"
[admin]
listen = "127.0.0.1:0"
[listen]
https = "127.0.0.1:0"
http = "127.0.0.1:0"
quic = "{host}:0"
plain_http = "serve"
[tls]
cert_file = "{cert}"
key_file = "{key}"
[[accounts]]
name = "a"
token = "{token}"
"#,
            state = dir.path().join("state").display(),
            host = ns.host_ip,
            cert = certs.dir.join("edge.pem").display(),
            key = certs.dir.join("edge.key").display(),
            token = token_for("a"),
        );
        write_secret(&dir.path().join("edge.toml"), &config);
        let edge =
            ServeEdge::start(&dir.path().join("edge.toml"), &dir.path().join("edge.log")).await;
        let quic = edge.quic;
        nat(&ns, quic, 1, &format!("{}:{FIRST_PORT}", ns.ns_ip));

        let origin = Origin::start_in(ns.tcp_listener("127.0.0.1:0".parse().expect("addr")));
        let token = dir.path().join("token");
        std::fs::write(&token, token_for("a")).expect("token file");
        let socket = dir.path().join("agent.sock");
        let ca = certs.dir.join("ca.pem");
        let path = |p: &Path| p.to_str().expect("utf-8 path").to_owned();
        let mut command = ns.command(&binary("calvin-agent"));
        command.args([
            "up",
            "--edge",
            &quic.to_string(),
            "--token-file",
            &path(&token),
            "--ca",
            &path(&ca),
            "--server-name",
            "localhost",
            "--socket",
            &path(&socket),
            "--metrics",
            &format!("{}:0", ns.ns_ip),
        ]);
        let mut agent = Process::spawn(command);
        agent.line_after("control socket ").await;
        let metrics_at = agent.line_after("listening metrics ").await;
        let agent_metrics = format!("http://{}/metrics", metrics_at.trim_end_matches("/tcp"));
        let created = preview_when_connected(&socket, origin.port).await;
        let https = edge.https.expect("https");
        let resolve = format!("{}.{ZONE}:{}:127.0.0.1", created.name, https.port());
        Some(Moving {
            ns,
            edge,
            quic,
            agent,
            origin,
            agent_metrics,
            url: created.url,
            resolve,
            ca,
            _dir: dir,
        })
    }

    async fn get(&self, path: &str, extra: &[&str]) -> CurlOutput {
        let url = format!("{}{path}", self.url);
        let mut args = vec!["--resolve", &self.resolve];
        args.extend_from_slice(extra);
        args.push(&url);
        curl(&self.ca, &args).await
    }

    /// The agent's metrics: its connects and reconnects.
    async fn agent_series(&self) -> BTreeMap<String, f64> {
        let out = curl(Path::new("/dev/null"), &[&self.agent_metrics]).await;
        assert_eq!(out.status, 200, "{out:?}");
        series(&out.text())
    }

    /// The edge's log lines that contain `text`.
    fn log_lines(&self, text: &str) -> Vec<String> {
        self.edge
            .log()
            .lines()
            .filter(|l| l.contains(text))
            .map(str::to_owned)
            .collect()
    }
}

/// Each series of a Prometheus exposition and its value.
fn series(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_owned(), v.parse().ok()?))
        })
        .collect()
}

fn value(series: &BTreeMap<String, f64>, name: &str) -> f64 {
    *series
        .get(name)
        .unwrap_or_else(|| panic!("no series {name} in {series:?}"))
}

/// The edge's "agent path changed" lines, once there are `n`.
async fn changes(link: &Moving, n: usize) -> Vec<String> {
    eventually(Duration::from_secs(5), || async {
        let lines = link.log_lines("agent path changed");
        (lines.len() >= n).then_some(lines)
    })
    .await
    .unwrap_or_else(|| {
        panic!(
            "the edge logged no path change {n} within 5 s:\n{}\n{}",
            link.edge.log(),
            link.ns.ruleset()
        )
    })
}

/// The namespace's UDP to `edge` NATed to `to` (`ADDR:PORT`), in
/// conntrack zone `zone` both ways: a zone not used before makes the flow
/// new, so the rule applies to packets of a flow under way. The table is
/// replaced in one transaction.
fn nat(ns: &Netns, edge: SocketAddr, zone: u16, to: &str) {
    let (ip, port) = (edge.ip(), edge.port());
    let replace = if ns.ruleset().contains("table ip moving") {
        "delete table ip moving\n"
    } else {
        ""
    };
    ns.nft(&format!(
        "{replace}table ip moving {{
            chain out {{ type filter hook output priority raw;
                ip daddr {ip} udp dport {port} counter ct zone set {zone}; }}
            chain in {{ type filter hook prerouting priority raw;
                ip saddr {ip} udp sport {port} counter ct zone set {zone}; }}
            chain post {{ type nat hook postrouting priority srcnat;
                ip daddr {ip} udp dport {port} counter snat to {to}; }}
        }}"
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_download_goes_on_byte_exact_while_the_agents_port_then_address_change() {
    let Some(link) =
        Moving::start("a_download_goes_on_byte_exact_while_the_agents_port_then_address_change")
            .await
    else {
        return;
    };
    let ns_ip = link.ns.ns_ip;
    let first = format!("{ns_ip}:{FIRST_PORT}");
    let second = format!("{ns_ip}:{SECOND_PORT}");
    let hello = link.get("/hello", &[]).await;
    assert_eq!(hello.status, 200, "{}", hello.text());
    assert!(
        link.log_lines("agent path changed").is_empty(),
        "{}",
        link.edge.log()
    );
    let expected = sha256_hex(&pattern_bytes(LEN));
    let before = link.origin.requests();

    let started = Instant::now();
    let download = {
        let url = format!("{}/bytes/{LEN}", link.url);
        let (ca, resolve) = (link.ca.clone(), link.resolve.clone());
        tokio::spawn(async move {
            curl(&ca, &["--resolve", &resolve, "--limit-rate", RATE, &url]).await
        })
    };
    link.origin.has_seen(before + 1).await;
    // A NAT that rebinds the agent's port.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert!(!download.is_finished(), "the download ended too soon");
    nat(&link.ns, link.quic, 2, &second);
    let moved = Instant::now();
    changes(&link, 1).await;
    eprintln!(
        "port change seen {:?} after it, {:?} into the download",
        moved.elapsed(),
        started.elapsed()
    );

    // The agent's network changes: another address.
    let ns_ip2: Ipv4Addr = link.ns.add_address();
    let third = format!("{ns_ip2}:{SECOND_PORT}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !download.is_finished(),
        "the download ended before the address changed"
    );
    nat(&link.ns, link.quic, 3, &third);
    let moved = Instant::now();
    let lines = changes(&link, 2).await;
    eprintln!(
        "address change seen {:?} after it, {:?} into the download",
        moved.elapsed(),
        started.elapsed()
    );
    assert!(
        !download.is_finished(),
        "the download ended before the edge saw the address change"
    );

    let down = download.await.expect("download task");
    let took = started.elapsed();
    eprintln!("64 MiB down in {took:?} across two path changes");
    assert_eq!(down.status, 200, "{}", down.stderr);
    assert_eq!(down.body.len(), LEN, "the whole body");
    assert_eq!(sha256_hex(&down.body), expected, "byte-exact");
    assert_eq!(
        link.origin.requests(),
        before + 1,
        "the origin saw the download once: nothing was retried"
    );

    // The edge logged each change, in the agent's span, from the old
    // address to the new one.
    assert_eq!(lines.len(), 2, "{lines:#?}");
    for (line, (from, to)) in lines.iter().zip([(&first, &second), (&second, &third)]) {
        assert!(
            line.contains(&format!("from={from}")) && line.contains(&format!("to={to}")),
            "{line}"
        );
        assert!(
            line.contains("account=\"a\""),
            "in the agent's span: {line}"
        );
    }
    // One connection throughout: the agent connected once and never lost
    // it, and the edge welcomed it once.
    let agent = link.agent_series().await;
    assert_eq!(
        value(&agent, "calvin_agent_connects_total"),
        1.0,
        "{agent:?}"
    );
    assert_eq!(
        value(&agent, "calvin_agent_reconnects_total"),
        0.0,
        "{agent:?}"
    );
    assert_eq!(
        link.log_lines("agent connected").len(),
        1,
        "{}",
        link.edge.log()
    );
    assert!(
        link.log_lines("agent disconnected").is_empty(),
        "{}",
        link.edge.log()
    );
    let edge = link.edge.metrics().await;
    assert_eq!(value(&edge, "calvin_edge_agent_path_changes_total"), 2.0);
    assert_eq!(value(&edge, "calvin_edge_agents_connected"), 1.0);
    assert!(
        edge.contains_key(r#"calvin_edge_agent_rtt_seconds{stat="min"}"#),
        "{edge:?}"
    );
    let after = link.get("/hello", &[]).await;
    assert_eq!(after.status, 200, "{}", after.text());

    // The connection's entry, with the address it was last seen at, goes
    // when it ends: no agent's path is read any more.
    link.agent.signal("TERM").await;
    let gone = eventually(Duration::from_secs(5), || async {
        let m = link.edge.metrics().await;
        (m.get("calvin_edge_agents_connected") == Some(&0.0)).then_some(m)
    })
    .await
    .expect("the agent leaves");
    assert!(
        !gone
            .keys()
            .any(|k| k.starts_with("calvin_edge_agent_rtt_seconds")),
        "{gone:?}"
    );
    assert_eq!(value(&gone, "calvin_edge_agent_path_changes_total"), 2.0);
}

/// A request waiting on the dev server when the NAT rebinds: the agent
/// sends nothing while it waits and the edge's packets go to the old
/// port, so only the agent's path probe gets it heard on the new one
/// before the edge's liveness watch (1 s) would answer the visitor 502.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_waiting_on_the_dev_server_survives_a_port_change() {
    let Some(link) =
        Moving::start("a_request_waiting_on_the_dev_server_survives_a_port_change").await
    else {
        return;
    };
    assert_eq!(link.get("/hello", &[]).await.status, 200);
    let before = link.origin.requests();
    let waiting = {
        let url = format!("{}/slow?ms=4000", link.url);
        let (ca, resolve) = (link.ca.clone(), link.resolve.clone());
        tokio::spawn(async move { curl(&ca, &["--resolve", &resolve, &url]).await })
    };
    link.origin.has_seen(before + 1).await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    nat(
        &link.ns,
        link.quic,
        2,
        &format!("{}:{SECOND_PORT}", link.ns.ns_ip),
    );
    let lines = changes(&link, 1).await;
    assert!(
        !waiting.is_finished(),
        "the request ended before the move was seen"
    );
    let out = waiting.await.expect("request task");
    assert_eq!(
        (out.status, out.text().as_str()),
        (200, "slow\n"),
        "{}",
        out.stderr
    );
    assert_eq!(link.origin.requests(), before + 1, "nothing was retried");
    assert_eq!(lines.len(), 1, "{lines:#?}");
    let agent = link.agent_series().await;
    assert_eq!(
        value(&agent, "calvin_agent_reconnects_total"),
        0.0,
        "{agent:?}"
    );
}

/// A move whose new path never answers (the old mapping is gone too):
/// the edge tries it, the agent hears nothing more on that connection and
/// reconnects at its idle timeout, on a new socket whose flow the NAT
/// serves, and the preview serves again under its name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_to_a_dead_path_ends_in_a_reconnect_and_the_preview_serves_again() {
    let Some(link) =
        Moving::start("a_move_to_a_dead_path_ends_in_a_reconnect_and_the_preview_serves_again")
            .await
    else {
        return;
    };
    assert_eq!(link.get("/hello", &[]).await.status, 200);
    let ports = link.ns.udp_ports();
    assert_eq!(ports.len(), 1, "the agent's one UDP socket: {ports:?}");
    let old = ports[0];
    let (ip, port, ns_ip) = (link.quic.ip(), link.quic.port(), link.ns.ns_ip);
    // The agent's socket now goes out as port 40003, whose answers are
    // dropped, as are those to its old port; a new socket is NATed to
    // 40004, which works.
    link.ns.nft(&format!(
        "delete table ip moving
        table ip moving {{
            chain out {{ type filter hook output priority raw;
                ip daddr {ip} udp dport {port} ct zone set 4; }}
            chain in {{ type filter hook prerouting priority raw;
                ip saddr {ip} udp sport {port} udp dport {{ {FIRST_PORT}, 40003 }} counter drop;
                ip saddr {ip} udp sport {port} ct zone set 4; }}
            chain post {{ type nat hook postrouting priority srcnat;
                ip daddr {ip} udp dport {port} udp sport {old} snat to {ns_ip}:40003;
                ip daddr {ip} udp dport {port} snat to {ns_ip}:40004; }}
        }}"
    ));
    let cut = Instant::now();

    let back = eventually(IDLE_TIMEOUT + Duration::from_secs(10), || async {
        let out = link.get("/hello", &["--max-time", "2"]).await;
        (out.status == 200 && out.text() == "hello from origin\n").then(|| cut.elapsed())
    })
    .await
    .unwrap_or_else(|| panic!("the preview never served again:\n{}", link.edge.log()));
    eprintln!("serving again {back:?} after the move to a dead path");
    assert!(
        back <= IDLE_TIMEOUT + Duration::from_secs(5),
        "back after {back:?}"
    );
    let agent = link.agent_series().await;
    assert_eq!(
        value(&agent, "calvin_agent_reconnects_total"),
        1.0,
        "{agent:?}"
    );
    assert_eq!(
        value(&agent, "calvin_agent_connects_total"),
        2.0,
        "{agent:?}"
    );
    assert_eq!(
        link.log_lines("agent connected").len(),
        2,
        "{}",
        link.edge.log()
    );
    // The edge tried the new path each time a packet came from it, and
    // went back to the old one when the new one failed validation (a few
    // round trips later): its look once a second may or may not fall in
    // between.
    eprintln!(
        "path changes the edge logged: {:?}",
        link.log_lines("agent path changed")
    );
}
