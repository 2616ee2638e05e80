//! `calvin-edge serve --config FILE` as a process, with its log captured,
//! and `dig` against its DNS listener.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncBufReadExt;

use crate::harness::{binary, curl, health_of, metric_values, send_signal, tls_client_config};

/// Writes `<dir>/edge.toml` for `calvin-edge serve` on loopback (port 0
/// everywhere, plain HTTP served, the admin listener on), for `zone`, with
/// a certificate of its own (its CA at `<dir>/certs/ca.pem`), one account
/// `a` ([`crate::token_for`]), and `log` in its `[log]`; its path.
pub fn write_config(dir: &Path, zone: &str, log: &str) -> PathBuf {
    let certs = calvin_edge::dev::load_or_create(&dir.join("certs"), zone).expect("certs");
    let config = format!(
        r#"domain = "{zone}"
state_dir = "{state}"
[admin]
listen = "127.0.0.1:0"
[listen]
https = "127.0.0.1:0"
http = "127.0.0.1:0"
quic = "127.0.0.1:0"
plain_http = "serve"
[tls]
cert_file = "{cert}"
key_file = "{key}"
[[accounts]]
name = "a"
token = "{token}"
[log]
{log}
"#,
        state = dir.join("state").display(),
        cert = certs.dir.join("edge.pem").display(),
        key = certs.dir.join("edge.key").display(),
        token = crate::token_for("a"),
    );
    let path = dir.join("edge.toml");
    crate::write_secret(&path, &config);
    path
}

/// A running `calvin-edge serve`; the addresses are those it printed.
pub struct ServeEdge {
    pub child: tokio::process::Child,
    pub https: Option<SocketAddr>,
    pub http: Option<SocketAddr>,
    pub quic: SocketAddr,
    pub dns: Option<SocketAddr>,
    /// The admin listener (`/metrics`, `/healthz`, `/readyz`).
    pub admin: Option<SocketAddr>,
    /// The edge-to-edge listener of a cluster member (`[cluster]`).
    pub peer: Option<SocketAddr>,
    pub url_template: String,
    log: PathBuf,
}

impl ServeEdge {
    /// Starts the edge and reads the addresses it bound; stderr (the log)
    /// goes to `log`, appended.
    pub async fn start(config: &Path, log: &Path) -> ServeEdge {
        Self::start_with(config, log, &[]).await
    }

    /// The same, with more arguments (`--log-format json`).
    pub async fn start_with(config: &Path, log: &Path, args: &[&str]) -> ServeEdge {
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .expect("log file");
        let mut child = tokio::process::Command::new(binary("calvin-edge"))
            .args(["serve", "--config"])
            .arg(config)
            .args(args)
            .env("RUST_LOG", calvin_edge::DEFAULT_LOG_FILTER)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log_file)
            .kill_on_drop(true)
            .spawn()
            .expect("start calvin-edge");
        let mut lines = tokio::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
        let mut edge = ServeEdge {
            child,
            https: None,
            http: None,
            quic: "0.0.0.0:0".parse().expect("addr"),
            dns: None,
            admin: None,
            peer: None,
            url_template: String::new(),
            log: log.to_owned(),
        };
        let addr = |s: &str| -> SocketAddr {
            s.split('/')
                .next()
                .unwrap_or(s)
                .parse()
                .expect("printed address")
        };
        let read = async {
            while let Ok(Some(line)) = lines.next_line().await {
                // `--log-format json`: the same facts, fields of one event.
                if let Ok(event) = serde_json::from_str::<serde_json::Value>(&line) {
                    if event["message"] != "listening" {
                        continue;
                    }
                    let fact = |key: &str| event[key].as_str().map(addr);
                    edge.https = fact("https");
                    edge.http = fact("http");
                    edge.quic = fact("quic").expect("the quic listener");
                    edge.dns = fact("dns");
                    edge.admin = fact("admin");
                    edge.peer = fact("peer");
                    edge.url_template = event["previews"].as_str().expect("previews").to_owned();
                    return true;
                }
                if let Some(a) = line.strip_prefix("listening https ") {
                    edge.https = Some(addr(a));
                } else if let Some(a) = line.strip_prefix("listening http ") {
                    edge.http = Some(addr(a));
                } else if let Some(a) = line.strip_prefix("listening quic ") {
                    edge.quic = addr(a);
                } else if let Some(a) = line.strip_prefix("listening dns ") {
                    edge.dns = Some(addr(a));
                } else if let Some(a) = line.strip_prefix("listening admin ") {
                    edge.admin = Some(addr(a));
                } else if let Some(a) = line.strip_prefix("listening peer ") {
                    edge.peer = Some(addr(a));
                } else if let Some(t) = line.strip_prefix("previews ") {
                    edge.url_template = t.to_owned();
                    return true;
                }
            }
            false
        };
        let started = tokio::time::timeout(Duration::from_secs(60), read)
            .await
            .unwrap_or(false);
        assert!(started, "the edge did not start:\n{}", edge.log());
        // Keep draining stdout so the edge never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        edge
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends a signal (`TERM`, `HUP`, ...) with kill(1).
    pub async fn signal(&self, signal: &str) {
        send_signal(&self.child, signal).await;
    }

    /// SIGTERM, then waits for the exit.
    pub async fn stop(mut self) {
        self.signal("TERM").await;
        let exited = tokio::time::timeout(Duration::from_secs(40), self.child.wait()).await;
        assert!(exited.is_ok(), "the edge did not stop:\n{}", self.log());
    }

    /// SIGKILL, and reaps it (no clean-up of any kind: a crash).
    pub async fn kill(&mut self) {
        let _ = self.child.kill().await;
    }

    /// `GET path` on the admin listener, with curl: (status, body).
    pub async fn admin(&self, path: &str) -> (u16, String) {
        let admin = self.admin.expect("an admin listener");
        let url = format!("http://{admin}{path}");
        let out = curl(Path::new("/dev/null"), &[&url]).await;
        (out.status, String::from_utf8_lossy(&out.body).into_owned())
    }

    /// The value of each metric series (name and labels, as the
    /// exposition writes them) in the admin listener's `/metrics`.
    pub async fn metrics(&self) -> std::collections::BTreeMap<String, f64> {
        let (status, text) = self.admin("/metrics").await;
        assert_eq!(status, 200, "{text}");
        metric_values(&text)
    }

    /// `GET /healthz` on the plain HTTP listener: (status, JSON body).
    pub async fn health(&self) -> (u16, serde_json::Value) {
        health_of(self.http.expect("an HTTP listener")).await
    }
}

/// The serial of the certificate a new TLS connection to `addr` for `host`
/// gets, the connection verified against `root`.
pub async fn served_serial(addr: SocketAddr, host: &str, root: &Path) -> String {
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("tcp");
    let connector =
        tokio_rustls::TlsConnector::from(std::sync::Arc::new(tls_client_config(root, &[])));
    let name = rustls_pki_types::ServerName::try_from(host.to_owned()).expect("name");
    let tls = connector
        .connect(name, tcp)
        .await
        .expect("verified handshake");
    let leaf = &tls.get_ref().1.peer_certificates().expect("certificates")[0];
    calvin_edge::certs::cert_store::CertInfo::of(leaf)
        .expect("leaf parses")
        .serial
}

/// Runs `dig @127.0.0.1 -p PORT ARGS` (two tries of two seconds) and
/// returns its output.
pub async fn dig(server: SocketAddr, args: &[&str]) -> String {
    let out = tokio::process::Command::new("dig")
        .arg(format!("@{}", server.ip()))
        .args(["-p", &server.port().to_string(), "+time=2", "+tries=2"])
        .args(args)
        .output()
        .await
        .expect("dig runs (Debian package dnsutils)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The `status:` of a dig answer (`NOERROR`, `NXDOMAIN`, `REFUSED`, ...).
pub fn dig_status(output: &str) -> &str {
    output
        .split("status: ")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .unwrap_or("no answer")
}

/// The header flags of a dig answer (`qr aa rd`, ...).
pub fn dig_flags(output: &str) -> Vec<&str> {
    output
        .lines()
        .find_map(|l| l.strip_prefix(";; flags: "))
        .and_then(|rest| rest.split(';').next())
        .map(|flags| flags.split_whitespace().collect())
        .unwrap_or_default()
}
