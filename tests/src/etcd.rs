//! A real etcd v3 server (`/usr/bin/etcd`, Debian package `etcd-server`)
//! on loopback, for the tests of a cluster of edges, and what they need to
//! look at what the edges wrote: keys and leases, read through etcd's JSON
//! gateway with curl (no `etcdctl`: it is another package).
//!
//! Its client and peer ports lie below the kernel's ephemeral range (see
//! [`free_udp_tcp_port`]), so [`Etcd::restart`] finds them free again even
//! after a long stop. Its data dir is a tempdir the [`Etcd`] owns: keys
//! and leases outlive a stop.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use base64::Engine;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};

use crate::harness::send_signal;
use crate::ports::free_udp_tcp_port;

const ETCD: &str = "/usr/bin/etcd";
/// The member's name, in `--initial-cluster`.
const NAME: &str = "calvin-test";

/// A running etcd, killed when dropped.
pub struct Etcd {
    child: Option<Child>,
    client_port: u16,
    peer_port: u16,
    dir: tempfile::TempDir,
}

/// One key as etcd holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdEntry {
    pub key: String,
    pub value: String,
    /// The lease the key is attached to; `None` for a key without one.
    pub lease: Option<i64>,
}

impl Etcd {
    /// Starts etcd on free loopback ports with an empty data dir; returns
    /// once `/health` says it serves.
    pub async fn start() -> Etcd {
        let client_port = free_udp_tcp_port();
        let peer_port = loop {
            let port = free_udp_tcp_port();
            if port != client_port {
                break port;
            }
        };
        let mut etcd = Etcd {
            child: None,
            client_port,
            peer_port,
            dir: tempfile::tempdir().expect("tempdir"),
        };
        etcd.launch().await;
        etcd
    }

    /// `http://127.0.0.1:PORT`, for `[cluster] etcd` and `--endpoints`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    /// Everything etcd logged so far (across restarts), for assertion
    /// messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// SIGTERM, then waits for the exit; idempotent.
    pub async fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if child.try_wait().ok().flatten().is_none() {
                send_signal(&child, "TERM").await;
            }
            let exited = tokio::time::timeout(Duration::from_secs(20), child.wait()).await;
            assert!(exited.is_ok(), "etcd did not stop:\n{}", self.log());
        }
    }

    /// SIGKILL (and reaps it); idempotent.
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }

    /// Starts it again on the same ports and data dir (after [`stop`] or
    /// [`kill`]; a running etcd is stopped first) and waits until it
    /// serves.
    ///
    /// [`stop`]: Self::stop
    /// [`kill`]: Self::kill
    pub async fn restart(&mut self) {
        self.stop().await;
        self.launch().await;
    }

    /// Whether `GET /health` answers `{"health":"true"}` within a second.
    pub async fn healthy(&self) -> bool {
        let ask = async {
            let mut tcp = tokio::net::TcpStream::connect(("127.0.0.1", self.client_port))
                .await
                .ok()?;
            let request = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
            tcp.write_all(request.as_bytes()).await.ok()?;
            let mut answer = String::new();
            tcp.read_to_string(&mut answer).await.ok()?;
            Some(answer.starts_with("HTTP/1.1 200") && answer.contains(r#""health":"true""#))
        };
        tokio::time::timeout(Duration::from_secs(1), ask)
            .await
            .ok()
            .flatten()
            .unwrap_or(false)
    }

    /// POSTs `body` to etcd's JSON gateway (`/v3/kv/range`, ...) with
    /// curl; panics with the answer and etcd's log unless it is a 200.
    /// Keys and values in it are base64, 64-bit numbers are strings.
    pub async fn call(&self, path: &str, body: serde_json::Value) -> serde_json::Value {
        let url = format!("{}{path}", self.endpoint());
        let out = Command::new("curl")
            .args([
                "-sS",
                "--max-time",
                "5",
                "-w",
                "\n%{http_code}",
                "-X",
                "POST",
            ])
            .args(["-d", &body.to_string(), &url])
            .stdin(Stdio::null())
            .output()
            .await
            .expect("curl runs (install curl)");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let (answer, status) = stdout.rsplit_once('\n').unwrap_or(("", &stdout));
        assert!(
            status == "200",
            "POST {url} {body}: {status} {answer}{}\netcd log:\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.log()
        );
        serde_json::from_str(answer).expect("etcd answers JSON")
    }

    /// Puts `key` = `value`.
    pub async fn put(&self, key: &str, value: &str) {
        let body =
            serde_json::json!({ "key": b64(key.as_bytes()), "value": b64(value.as_bytes()) });
        self.call("/v3/kv/put", body).await;
    }

    /// Puts `key` = `value` attached to `lease` (from [`grant_lease`]).
    ///
    /// [`grant_lease`]: Self::grant_lease
    pub async fn put_with_lease(&self, key: &str, value: &str, lease: i64) {
        let body = serde_json::json!({
            "key": b64(key.as_bytes()),
            "value": b64(value.as_bytes()),
            "lease": lease.to_string(),
        });
        self.call("/v3/kv/put", body).await;
    }

    /// The keys under `prefix` and their values, in key order.
    pub async fn get_prefix(&self, prefix: &str) -> Vec<(String, String)> {
        self.entries(prefix)
            .await
            .into_iter()
            .map(|e| (e.key, e.value))
            .collect()
    }

    /// The keys under `prefix` with their values and leases, in key order.
    pub async fn entries(&self, prefix: &str) -> Vec<EtcdEntry> {
        // etcd wants a key: "\0" to "\0" is every key.
        let key = if prefix.is_empty() {
            b"\0"
        } else {
            prefix.as_bytes()
        };
        let body = serde_json::json!({
            "key": b64(key),
            "range_end": b64(&prefix_end(prefix.as_bytes())),
        });
        let answer = self.call("/v3/kv/range", body).await;
        let text = |v: &serde_json::Value| -> String {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(v.as_str().unwrap_or(""))
                .expect("base64 from etcd");
            String::from_utf8_lossy(&bytes).into_owned()
        };
        answer["kvs"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(|kv| EtcdEntry {
                key: text(&kv["key"]),
                value: text(&kv["value"]),
                lease: int64(&kv["lease"]).filter(|&id| id != 0),
            })
            .collect()
    }

    /// The ids of the leases etcd holds, in no order.
    pub async fn leases(&self) -> Vec<i64> {
        let answer = self.call("/v3/lease/leases", serde_json::json!({})).await;
        answer["leases"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .filter_map(|l| int64(&l["ID"]))
            .collect()
    }

    /// The seconds `lease` has left; `None` once it has expired.
    pub async fn lease_ttl(&self, lease: i64) -> Option<i64> {
        let body = serde_json::json!({ "ID": lease.to_string() });
        let answer = self.call("/v3/lease/timetolive", body).await;
        int64(&answer["TTL"]).filter(|&ttl| ttl >= 0)
    }

    /// Grants a lease of `ttl_secs`; returns its id.
    pub async fn grant_lease(&self, ttl_secs: u64) -> i64 {
        let body = serde_json::json!({ "TTL": ttl_secs.to_string() });
        let answer = self.call("/v3/lease/grant", body).await;
        int64(&answer["ID"]).expect("a lease id")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("etcd.log")
    }

    /// Spawns etcd on the ports and data dir and waits up to 30 s until it
    /// serves; panics with its log if it exits or never does.
    async fn launch(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("etcd log");
        let client = self.endpoint();
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let mut command = Command::new(ETCD);
        command
            .arg("--name")
            .arg(NAME)
            .arg("--data-dir")
            .arg(self.dir.path().join("data"))
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("{NAME}={peer}")])
            .args(["--initial-cluster-state", "new"])
            .args(["--logger", "zap", "--log-outputs", "stderr"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("etcd log"))
            .stderr(log)
            .kill_on_drop(true);
        // etcd 3.4 refuses to start on arm64 unless told this.
        if std::env::consts::ARCH == "aarch64" {
            command.env("ETCD_UNSUPPORTED_ARCH", "arm64");
        }
        let child = command
            .spawn()
            .expect("etcd runs (apt-get install etcd-server)");
        self.child = Some(child);

        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let child = self.child.as_mut().expect("etcd spawned");
            if let Some(status) = child.try_wait().expect("etcd status") {
                panic!("etcd exited ({status}):\n{}", self.log());
            }
            if self.healthy().await {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "etcd did not serve within 30 s:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The end of the range of the keys that start with `prefix` (etcd's
/// `GetPrefixRangeEnd`): its last byte below 0xff plus one; `\0` (every
/// key) for an empty or all-0xff prefix.
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// A 64-bit number of etcd's JSON: a string (or a number).
fn int64(v: &serde_json::Value) -> Option<i64> {
    v.as_str()
        .and_then(|s| s.parse().ok())
        .or_else(|| v.as_i64())
}
