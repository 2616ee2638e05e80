//! Several edges for one agent: in-process edges that share a CA and the
//! test accounts, `calvin-edge serve` processes that share a certificate
//! and a token (to SIGKILL one), and a clock for how long a preview takes
//! to serve again (the agent given all of them is
//! [`crate::harness::TestAgent::spawn_to_edges`]).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::harness::{DOMAIN, EdgeOptions, TestEdge, curl, token_for, write_secret};
use crate::serve_edge::ServeEdge;

/// `n` in-process edges with the default accounts, all with one CA and
/// certificate (the first one's state folder), as an operator runs
/// several edges of one zone.
pub async fn edges_sharing_a_ca(n: usize) -> (Vec<TestEdge>, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut edges = Vec::new();
    for _ in 0..n {
        edges.push(
            TestEdge::start_with(EdgeOptions {
                state_dir: Some(dir.path().join("edge")),
                ..Default::default()
            })
            .await,
        );
    }
    (edges, dir)
}

/// `n` `calvin-edge serve` processes of one account, `alice`, with one
/// certificate from files; each has its own state folder and log.
pub struct ServeEdges {
    pub edges: Vec<ServeEdge>,
    /// The CA the certificate chains to, and alice's token file.
    pub ca: PathBuf,
    pub token_file: PathBuf,
    pub dir: tempfile::TempDir,
}

impl ServeEdges {
    pub async fn start(n: usize) -> ServeEdges {
        let dir = tempfile::tempdir().expect("tempdir");
        let certs =
            calvin_edge::dev::load_or_create(&dir.path().join("certs"), DOMAIN).expect("certs");
        let token_file = dir.path().join("alice.token");
        write_secret(&token_file, &format!("{}\n", token_for("alice")));
        let mut edges = Vec::new();
        for i in 0..n {
            let config = dir.path().join(format!("edge{i}.toml"));
            write_secret(
                &config,
                &format!(
                    r#"domain = "{DOMAIN}"
state_dir = "{state}"
[admin]
listen = "127.0.0.1:0"
[listen]
https = "127.0.0.1:0"
http = "127.0.0.1:0"
quic = "127.0.0.1:0"
[tls]
cert_file = "{cert}"
key_file = "{key}"
[[accounts]]
name = "alice"
token_file = "{token}"
"#,
                    state = dir.path().join(format!("state{i}")).display(),
                    cert = certs.dir.join("edge.pem").display(),
                    key = certs.dir.join("edge.key").display(),
                    token = token_file.display(),
                ),
            );
            let log = dir.path().join(format!("edge{i}.log"));
            edges.push(ServeEdge::start(&config, &log).await);
        }
        ServeEdges {
            edges,
            ca: certs.ca_path(),
            token_file,
            dir,
        }
    }

    /// The HTTPS URL of `path` on preview `name` at edge `i`.
    pub fn url(&self, i: usize, name: &str, path: &str) -> String {
        let https = self.edges[i].https.expect("https listener");
        format!("https://{name}.{DOMAIN}:{}{path}", https.port())
    }
}

/// Whether `url` answers 200 with exactly `body` (curl, 2 s at most).
pub async fn serves(ca: &Path, url: &str, body: &[u8]) -> bool {
    let out = curl(ca, &["--max-time", "2", url]).await;
    out.status == 200 && out.body == body
}

/// How long from `since` until `url` answered 200 with exactly `body`,
/// asked every 100 ms; `None` when it did not within `limit` of `since`.
pub async fn served_after(
    ca: &Path,
    url: &str,
    body: &[u8],
    since: Instant,
    limit: Duration,
) -> Option<Duration> {
    while since.elapsed() < limit {
        if serves(ca, url, body).await {
            return Some(since.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}
