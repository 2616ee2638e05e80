//! Several edges for one agent: in-process edges that share a CA and the
//! test accounts, `calvin-edge serve` processes that share a certificate
//! and a token (to SIGKILL one), an agent given all of them, and a clock
//! for how long a preview takes to serve again.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use calvin_agent::api::{PreviewCreated, PreviewList};
use calvin_agent::control_client::ControlClient;
use calvin_agent::{Agent, EdgeAddress, control_api};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

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

/// An agent given several edges (by QUIC address, each checked against
/// `ca` for `localhost`), with its control API on a socket of its own.
pub struct MultiEdgeAgent {
    pub agent: Agent,
    pub socket: PathBuf,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
    api: JoinHandle<()>,
    _dir: tempfile::TempDir,
}

impl MultiEdgeAgent {
    /// Started, maybe not connected yet.
    pub async fn spawn(edges: &[SocketAddr], ca: &Path, token: &str) -> MultiEdgeAgent {
        let edges = edges
            .iter()
            .map(|quic| {
                EdgeAddress::new(&quic.to_string(), Some(ca), Some("localhost"))
                    .expect("edge address")
            })
            .collect();
        let agent = Agent::with_edges(edges, token.to_owned());
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("agent.sock");
        let listener = control_api::bind(&socket).await.expect("control socket");
        let api = tokio::spawn(control_api::serve(listener, agent.clone()));
        let (stop, stopped) = oneshot::channel::<()>();
        let runner = agent.clone();
        let task = tokio::spawn(async move {
            runner
                .run(async {
                    let _ = stopped.await;
                })
                .await;
        });
        MultiEdgeAgent {
            agent,
            socket,
            stop: Some(stop),
            task,
            api,
            _dir: dir,
        }
    }

    pub fn client(&self) -> ControlClient {
        ControlClient::new(&self.socket)
    }

    /// `POST /v1/previews {port}` through the control socket.
    pub async fn preview(&self, port: u16) -> PreviewCreated {
        let answer = self.client().preview(port.into(), None).await;
        answer
            .expect("control API answers")
            .parse()
            .unwrap_or_else(|e| panic!("preview {port}: {e:?}"))
    }

    /// `GET /v1/previews` through the control socket.
    pub async fn list(&self) -> PreviewList {
        let answer = self.client().list().await.expect("control API answers");
        answer.parse().expect("a preview list")
    }

    /// The QUIC address of the edge it is connected to now.
    pub fn edge_now(&self) -> Option<SocketAddr> {
        self.agent.connected_edge().map(|edge| edge.addr())
    }

    /// Stops the agent: it closes its connection to the edge.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
        self.api.abort();
    }
}

impl Drop for MultiEdgeAgent {
    fn drop(&mut self) {
        self.task.abort();
        self.api.abort();
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
