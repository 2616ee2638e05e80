//! The edge's own wildcard certificate from a real ACME CA (Pebble),
//! through DNS-01 challenges answered by the edge's own DNS: issuance,
//! serving previews with it, the HTTP->HTTPS redirect, a renewal that swaps
//! the certificate under open connections, a restart that reuses it, and a
//! CA that cannot be reached.

use std::os::unix::fs::PermissionsExt;

use rustls_pki_types::pem::PemObject;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use calvin_edge::certs::cert_store::CertInfo;
use calvin_tests::free_udp_tcp_port;
use calvin_tests::pebble::Pebble;
use calvin_tests::serve_edge::{ServeEdge, served_serial};
use calvin_tests::{
    Origin, Process, curl, eventually, preview_when_connected, tls_client_config, write_secret,
};
use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;

const ZONE: &str = "preview.test";

struct Setup {
    dir: tempfile::TempDir,
    pebble: Pebble,
    dns_port: u16,
}

impl Setup {
    async fn new() -> Setup {
        Self::with_authz_reuse(0).await
    }

    async fn with_authz_reuse(percent: u8) -> Setup {
        let dns_port = free_udp_tcp_port();
        let dns = ([127, 0, 0, 1], dns_port).into();
        let pebble = Pebble::start_with_authz_reuse(dns, percent).await;
        Setup {
            dir: tempfile::tempdir().expect("tempdir"),
            pebble,
            dns_port,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Writes edge.toml (`extra_acme` goes into [acme]) and starts the edge.
    async fn edge(&self, extra_acme: &str) -> ServeEdge {
        self.edge_for(&self.pebble.directory(), extra_acme).await
    }

    /// The same, with another directory URL.
    async fn edge_for(&self, directory: &str, extra_acme: &str) -> ServeEdge {
        write_secret(
            &self.path("tokens.toml"),
            "team-a = \"0123456789abcdef0123456789abcdef\"\n",
        );
        let config = format!(
            r#"
domain = "{ZONE}"
public_ips = ["127.0.0.1"]
state_dir = "{state}"
[admin]
listen = "127.0.0.1:0"
[listen]
https = "127.0.0.1:0"
http = "127.0.0.1:0"
quic = "127.0.0.1:0"
dns = "127.0.0.1:{dns}"
[acme]
directory = "{directory}"
contact = "mailto:ops@preview.test"
ca_file = "{ca}"
retry_min_secs = 1
retry_max_secs = 2
{extra_acme}
[agents]
tokens_file = "{tokens}"
"#,
            state = self.path("state").display(),
            dns = self.dns_port,
            directory = directory,
            ca = self.pebble.listener_ca().display(),
            tokens = self.path("tokens.toml").display(),
        );
        std::fs::write(self.path("edge.toml"), config).expect("config");
        ServeEdge::start(&self.path("edge.toml"), &self.path("edge.log")).await
    }

    fn failed(&self, edge: &ServeEdge) -> String {
        format!(
            "--- edge log\n{}\n--- pebble log\n{}",
            edge.log(),
            self.pebble.log()
        )
    }
}

/// Waits until the edge has saved the certificate `serial` (it serves a
/// new certificate first, then writes it to disk, then logs it).
async fn wait_saved(edge: &ServeEdge, serial: &str) {
    let saved = eventually(Duration::from_secs(20), || async {
        edge.log()
            .lines()
            .any(|l| l.contains("new certificate") && l.contains(serial))
            .then_some(())
    })
    .await;
    assert!(saved.is_some(), "{serial} was not saved:\n{}", edge.log());
}

/// Waits until the health endpoint reports `ok` with a serial other than
/// `not`; returns the serial.
async fn serial_other_than(edge: &ServeEdge, not: Option<&str>) -> Option<String> {
    eventually(Duration::from_secs(60), || async {
        let (status, health) = edge.health().await;
        let serial = health["certificate"]["serial"].as_str()?.to_owned();
        (status == 200 && health["status"] == "ok" && Some(serial.as_str()) != not)
            .then_some(serial)
    })
    .await
}

/// Sends `text` on the WebSocket and expects it back.
async fn echo<S>(ws: &mut tokio_tungstenite::WebSocketStream<S>, text: &str)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    ws.send(Message::text(text)).await.expect("send");
    let back = ws.next().await.expect("an echo").expect("a frame");
    assert_eq!(back.into_text().expect("text"), text);
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).expect("file").permissions().mode() & 0o777
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pebble_issues_the_wildcard_through_the_edge_dns_and_a_renewal_keeps_connections() {
    // The renewal reuses the authorizations of the first order, as Let's
    // Encrypt does within 30 days.
    let s = Setup::with_authz_reuse(100).await;
    let edge = s.edge("").await;
    let https = edge.https.expect("https");
    let http = edge.http.expect("http");
    let serial = serial_other_than(&edge, None)
        .await
        .unwrap_or_else(|| panic!("no certificate issued\n{}", s.failed(&edge)));
    let root = s.pebble.issued_root().await;
    wait_saved(&edge, &serial).await;

    // The certificate is for the zone and its wildcard, and kept 0600.
    let (_, health) = edge.health().await;
    let names: Vec<&str> = health["certificate"]["names"]
        .as_array()
        .expect("names")
        .iter()
        .filter_map(|n| n.as_str())
        .collect();
    assert!(
        names.contains(&ZONE) && names.contains(&"*.preview.test"),
        "{health}"
    );
    assert_eq!(health["certificate"]["source"], "acme");
    let acme = s.path("state").join("acme");
    for file in ["account.json", "cert.pem", "key.pem"] {
        assert_eq!(mode(&acme.join(file)), 0o600, "{file}");
    }
    assert!(
        edge.log().contains("new certificate"),
        "{}",
        s.failed(&edge)
    );
    // Both values (apex and wildcard) were published at once.
    assert!(
        edge.log().contains("challenges published pending=2"),
        "{}",
        s.failed(&edge)
    );

    // An agent verifies edge.<zone> against Pebble's root (the wildcard
    // covers it), and a preview answers through HTTPS; curl trusts only
    // Pebble's root.
    std::fs::write(s.path("token"), "0123456789abcdef0123456789abcdef").expect("token");
    let origin = Origin::start().await;
    let socket = s.path("agent.sock");
    let path = |p: &Path| p.to_str().expect("utf-8").to_owned();
    let _agent = Process::start(
        "calvin-agent",
        &[
            "up",
            "--edge",
            &edge.quic.to_string(),
            "--server-name",
            "edge.preview.test",
            "--ca",
            &path(&root),
            "--token-file",
            &path(&s.path("token")),
            "--socket",
            &path(&socket),
        ],
    );
    let created = preview_when_connected(&socket, origin.addr().port()).await;
    let host = format!("{}.{ZONE}", created.name);
    let resolve = format!("{host}:{}:127.0.0.1", https.port());
    let url = format!("https://{host}:{}/hello", https.port());
    let out = curl(&root, &["--resolve", &resolve, &url]).await;
    assert_eq!(out.status, 200, "{out:?}");
    assert_eq!(out.text(), "hello from origin\n");
    assert_eq!(created.url, format!("https://{host}:{}", https.port()));

    // Plain HTTP redirects a preview to HTTPS, path and query kept (308:
    // a POST stays a POST); the health endpoint stays on plain HTTP.
    let resolve_http = format!("{host}:{}:127.0.0.1", http.port());
    let plain = format!("http://{host}:{}/a/b?c=d", http.port());
    let out = curl(&root, &["--resolve", &resolve_http, "-X", "POST", &plain]).await;
    assert_eq!(out.status, 308, "{out:?}");
    assert_eq!(
        out.header("location"),
        Some(format!("https://{host}:{}/a/b?c=d", https.port()).as_str())
    );
    let out = curl(
        &root,
        &[
            "-L",
            "--resolve",
            &resolve_http,
            "--resolve",
            &resolve,
            &format!("http://{host}:{}/hello", http.port()),
        ],
    )
    .await;
    assert_eq!(
        (out.status, out.text().as_str()),
        (200, "hello from origin\n"),
        "{out:?}"
    );

    // A WebSocket opened before the renewal...
    let tcp = tokio::net::TcpStream::connect(https).await.expect("tcp");
    let connector = tokio_rustls::TlsConnector::from(Arc::new(tls_client_config(&root, &[])));
    let server_name = rustls_pki_types::ServerName::try_from(host.clone()).expect("name");
    let tls = connector.connect(server_name, tcp).await.expect("tls");
    let old_leaf = tls.get_ref().1.peer_certificates().expect("certs")[0].clone();
    assert_eq!(CertInfo::of(&old_leaf).expect("leaf").serial, serial);
    let (mut ws, _) =
        tokio_tungstenite::client_async(format!("wss://{host}:{}/ws", https.port()), tls)
            .await
            .expect("websocket through the edge");
    echo(&mut ws, "before").await;

    // ...a forced renewal (SIGHUP) gets a new certificate from Pebble...
    let connects = |log: &str| log.matches("agent connected").count();
    assert_eq!(connects(&edge.log()), 1, "{}", edge.log());
    edge.signal("HUP").await;
    let renewed = serial_other_than(&edge, Some(&serial))
        .await
        .unwrap_or_else(|| panic!("no renewal\n{}", s.failed(&edge)));

    // ...the WebSocket keeps flowing on the old certificate, new
    // connections get the new one, and the agent's QUIC connection lives on.
    for i in 0..3 {
        echo(&mut ws, &format!("after {i}")).await;
    }
    assert_eq!(served_serial(https, &host, &root).await, renewed);
    assert_ne!(renewed, serial);
    let out = curl(&root, &["--resolve", &resolve, &url]).await;
    assert_eq!(out.status, 200, "{out:?}");
    let log = edge.log();
    assert_eq!(connects(&log), 1, "the agent reconnected:\n{log}");
    assert!(log.contains("challenges published pending=0"), "{log}");
    ws.close(None).await.expect("close");
    drop(ws);
    edge.stop().await;
}

/// The serial of the certificate saved on disk.
fn saved_serial(s: &Setup) -> String {
    let pem = std::fs::read(s.path("state/acme/cert.pem")).expect("cert.pem");
    let leaf = rustls_pki_types::CertificateDer::pem_slice_iter(&pem)
        .next()
        .expect("a certificate")
        .expect("PEM");
    CertInfo::of(&leaf).expect("leaf").serial
}

fn orders(log: &str) -> usize {
    log.matches("ordering a certificate").count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_that_cannot_be_saved_is_served_and_saved_later_without_ordering_again() {
    let s = Setup::new().await;
    let edge = s.edge("").await;
    let first = serial_other_than(&edge, None)
        .await
        .unwrap_or_else(|| panic!("no certificate issued\n{}", s.failed(&edge)));
    wait_saved(&edge, &first).await;
    assert_eq!(saved_serial(&s), first);

    // The chain's temporary file cannot be made: saving fails.
    let blocker = s.path("state/acme/cert.pem.tmp");
    std::fs::create_dir(&blocker).expect("blocker");
    edge.signal("HUP").await;
    let second = serial_other_than(&edge, Some(&first))
        .await
        .unwrap_or_else(|| panic!("no renewal\n{}", s.failed(&edge)));
    // Served at once, reported, retried (1 s, then 2 s) as a save only.
    let reported = eventually(Duration::from_secs(10), || async {
        (edge.log().matches("saving it failed").count() >= 2).then_some(())
    })
    .await;
    assert!(reported.is_some(), "{}", s.failed(&edge));
    let (_, health) = edge.health().await;
    assert!(health["renewal"]["last_error"].is_string(), "{health}");
    assert_eq!(orders(&edge.log()), 2, "{}", edge.log());
    assert_eq!(saved_serial(&s), first, "the old pair stays whole on disk");

    // Once the disk takes it, the served certificate is saved, and still
    // only two orders were made.
    std::fs::remove_dir(&blocker).expect("unblock");
    let saved = eventually(Duration::from_secs(10), || async {
        (saved_serial(&s) == second).then_some(())
    })
    .await;
    assert!(saved.is_some(), "{}", s.failed(&edge));
    let cleared = eventually(Duration::from_secs(5), || async {
        let (_, health) = edge.health().await;
        health["renewal"]["last_error"].is_null().then_some(())
    })
    .await;
    assert!(cleared.is_some(), "{}", edge.log());
    assert_eq!(orders(&edge.log()), 2, "{}", edge.log());
    edge.stop().await;

    // A restart pointed at another directory URL (the same Pebble under
    // another name) serves the saved certificate, then replaces it with one
    // from the new directory, on a new account.
    let other = s.pebble.directory().replace("127.0.0.1", "localhost");
    let edge = s.edge_for(&other, "").await;
    let third = serial_other_than(&edge, Some(&second))
        .await
        .unwrap_or_else(|| panic!("no new certificate\n{}", s.failed(&edge)));
    assert_ne!(third, first);
    let log = edge.log();
    assert!(log.contains("from another ACME directory"), "{log}");
    assert!(
        log.contains("the ACME directory changed; making a new account"),
        "{log}"
    );
    edge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_reuses_the_certificate_and_an_unreachable_ca_keeps_it_serving() {
    let mut s = Setup::new().await;
    let edge = s.edge("").await;
    let serial = serial_other_than(&edge, None)
        .await
        .unwrap_or_else(|| panic!("no certificate issued\n{}", s.failed(&edge)));
    let root = s.pebble.issued_root().await;
    wait_saved(&edge, &serial).await;
    let account = std::fs::read(s.path("state/acme/account.json")).expect("account");
    edge.stop().await;
    let before = orders(&std::fs::read_to_string(s.path("edge.log")).expect("log"));
    assert_eq!(before, 1);

    // A restart serves the saved certificate at once and orders nothing.
    let edge = s.edge("").await;
    let (status, health) = edge.health().await;
    assert_eq!(status, 200, "{health}");
    assert_eq!(health["certificate"]["serial"], serial.as_str());
    tokio::time::sleep(Duration::from_secs(1)).await;
    let log = edge.log();
    assert_eq!(orders(&log), before, "{log}");
    assert!(log.contains("serving the saved certificate"), "{log}");
    assert!(log.contains("next certificate renewal"), "{log}");
    edge.stop().await;

    // The CA gone, and renewal due (renew_days_before longer than the
    // lifetime): the edge serves the certificate it has and reports the
    // failures; it keeps its account.
    s.pebble.stop().await;
    let edge = s.edge("renew_days_before = 100000").await;
    let https = edge.https.expect("https");
    let failing = eventually(Duration::from_secs(30), || async {
        let (status, health) = edge.health().await;
        (status == 200 && health["renewal"]["last_error"].is_string()).then_some(health)
    })
    .await
    .unwrap_or_else(|| panic!("no failed renewal reported\n{}", edge.log()));
    assert_eq!(failing["certificate"]["serial"], serial.as_str());
    assert_eq!(failing["status"], "ok");
    assert!(
        edge.log()
            .contains("certificate renewal failed; still serving"),
        "{}",
        edge.log()
    );
    // A second failure comes after the backoff, not in a tight loop.
    let failures = |log: &str| log.matches("certificate renewal failed").count();
    assert!(
        eventually(Duration::from_secs(10), || async {
            (failures(&edge.log()) >= 2).then_some(())
        })
        .await
        .is_some(),
        "{}",
        edge.log()
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(failures(&edge.log()) <= 5, "{}", edge.log());

    // TLS clients still verify the edge against Pebble's root.
    assert_eq!(served_serial(https, ZONE, &root).await, serial);
    let out = curl(
        &root,
        &[
            "--resolve",
            &format!("{ZONE}:{}:127.0.0.1", https.port()),
            &format!("https://{ZONE}:{}/healthz", https.port()),
        ],
    )
    .await;
    assert_eq!(out.status, 200, "{out:?}");
    assert_eq!(
        std::fs::read(s.path("state/acme/account.json")).expect("account"),
        account
    );
    edge.stop().await;

    // A CA that accepts connections and never answers: each attempt ends at
    // attempt_timeout_secs, and the certificate keeps serving.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let silent_url = format!(
        "https://127.0.0.1:{}/dir",
        silent.local_addr().expect("addr").port()
    );
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((conn, _)) = silent.accept().await {
            open.push(conn);
        }
    });
    let edge = s
        .edge_for(
            &silent_url,
            "renew_days_before = 100000\nattempt_timeout_secs = 2",
        )
        .await;
    let timed_out = eventually(Duration::from_secs(20), || async {
        let (status, health) = edge.health().await;
        let error = health["renewal"]["last_error"].as_str()?.to_owned();
        (status == 200).then_some(error)
    })
    .await
    .unwrap_or_else(|| panic!("no timeout reported\n{}", edge.log()));
    assert_eq!(timed_out, "ACME attempt took longer than 2 s");
    let https = edge.https.expect("https");
    assert_eq!(served_serial(https, ZONE, &root).await, serial);
    edge.stop().await;
    held.abort();
}

/// `/readyz` on the admin listener: 503 while no certificate is loaded
/// (the CA is down at the start), 200 once Pebble issues one; the ACME
/// attempts and failures show in `/metrics`, and `/healthz` (live) is 200
/// throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_waits_for_the_certificate_and_metrics_count_the_attempts() {
    let mut s = Setup::new().await;
    s.pebble.stop().await;
    let edge = s.edge("").await;

    let (status, why) = edge.admin("/readyz").await;
    assert_eq!(status, 503, "{why}");
    assert!(why.contains("no certificate is loaded yet"), "{why}");
    let (status, live) = edge.admin("/healthz").await;
    assert_eq!(status, 200, "{live}");
    // The first attempt fails on the CA being down; retries come 1 s apart.
    let failed = eventually(Duration::from_secs(20), || async {
        let m = edge.metrics().await;
        (m.get("calvin_edge_acme_failures_total")
            .copied()
            .unwrap_or(0.0)
            >= 1.0)
            .then_some(m)
    })
    .await
    .unwrap_or_else(|| panic!("no failed attempt counted\n{}", edge.log()));
    assert!(
        failed["calvin_edge_acme_attempts_total"] >= failed["calvin_edge_acme_failures_total"],
        "{failed:?}"
    );
    assert!(!failed.contains_key("calvin_edge_certificate_expiry_timestamp_seconds"));
    assert_eq!(edge.admin("/readyz").await.0, 503);

    s.pebble.restart().await;
    let ready = eventually(Duration::from_secs(30), || async {
        let (status, body) = edge.admin("/readyz").await;
        (status == 200).then_some(body)
    })
    .await
    .unwrap_or_else(|| panic!("never ready\n{}", s.failed(&edge)));
    assert_eq!(ready, "ready\n");
    let m = edge.metrics().await;
    let attempts = m["calvin_edge_acme_attempts_total"];
    let failures = m["calvin_edge_acme_failures_total"];
    assert_eq!(attempts - failures, 1.0, "one attempt succeeded: {m:?}");
    let (_, health) = edge.health().await;
    let not_after = health["certificate"]["not_after"]
        .as_str()
        .expect("not_after");
    let not_after =
        time::OffsetDateTime::parse(not_after, &time::format_description::well_known::Rfc3339)
            .expect("rfc3339");
    assert_eq!(
        m["calvin_edge_certificate_expiry_timestamp_seconds"],
        not_after.unix_timestamp() as f64
    );
    edge.stop().await;
}
