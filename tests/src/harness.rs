//! Real edges and agents on port 0, through the same library code their
//! binaries run, and real curl against them.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use calvin_agent::api::{PreviewCreated, PreviewList};
use calvin_agent::control_client::{Answer, ControlClient};
use calvin_agent::{Agent, EdgeAddress, control_api};
use calvin_edge::{Certificates, Edge, Limits, Listen, PlainHttp, Settings};

use crate::Origin;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The preview domain of test edges: curl resolves `*.localhost` to
/// loopback by itself, as browsers do.
pub const DOMAIN: &str = "preview.localhost";

/// The token of a test account (at least 32 characters, as the edge wants).
pub fn token_for(account: &str) -> String {
    format!("test-token-{account}-{}", "0".repeat(32))
}

pub struct EdgeOptions {
    pub accounts: Vec<&'static str>,
    pub limits: Limits,
    /// Fixed addresses (https, http, quic); port 0 when `None`.
    pub listen: Option<(SocketAddr, SocketAddr, SocketAddr)>,
    /// Reuse the CA, certificate and reset key of an earlier edge.
    pub state_dir: Option<PathBuf>,
    /// The preview domain.
    pub domain: &'static str,
    /// HTTP/3 for visitors (on, advertised, by default).
    pub http3: calvin_edge::Http3Settings,
}

impl Default for EdgeOptions {
    fn default() -> Self {
        Self {
            accounts: vec!["alice", "bob"],
            limits: Limits::default(),
            listen: None,
            state_dir: None,
            domain: DOMAIN,
            http3: calvin_edge::Http3Settings::default(),
        }
    }
}

/// A running edge.
pub struct TestEdge {
    pub https: SocketAddr,
    pub http: SocketAddr,
    pub quic: SocketAddr,
    pub url_template: String,
    pub state_dir: PathBuf,
    pub domain: &'static str,
    metrics: std::sync::Arc<calvin_edge::ops::metrics::Metrics>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
    _dir: Option<tempfile::TempDir>,
}

impl TestEdge {
    pub async fn start() -> TestEdge {
        Self::start_with(EdgeOptions::default()).await
    }

    /// An edge with the default options but these limits.
    pub async fn with_limits(limits: Limits) -> TestEdge {
        Self::start_with(EdgeOptions {
            limits,
            ..Default::default()
        })
        .await
    }

    /// An edge started again with the options of a stopped one, which
    /// name its addresses (from [`crate::edge_addresses`], so no other
    /// test's edge takes them while it is down), once the old endpoint's
    /// UDP socket is free (under load it may close a moment after the stop
    /// returns).
    pub async fn start_again(options: EdgeOptions) -> TestEdge {
        let (.., quic) = options
            .listen
            .expect("an edge started again names its addresses");
        let free = eventually(Duration::from_secs(5), || async move {
            std::net::UdpSocket::bind(quic).ok().map(drop)
        })
        .await;
        assert!(free.is_some(), "the QUIC port {quic} stays taken");
        TestEdge::start_with(options).await
    }

    pub async fn start_with(options: EdgeOptions) -> TestEdge {
        let (dir, state_dir) = match options.state_dir {
            Some(path) => (None, path),
            None => {
                let dir = tempfile::tempdir().expect("tempdir");
                let path = dir.path().join("edge");
                (Some(dir), path)
            }
        };
        let domain = options.domain;
        let state = calvin_edge::dev::load_or_create(&state_dir, domain).expect("dev state");
        let any: SocketAddr = "127.0.0.1:0".parse().expect("addr");
        let (https, http, quic) = options.listen.unwrap_or((any, any, any));
        let settings = Settings {
            domain: domain.into(),
            public_url: None,
            listen: Listen {
                https: Some(https),
                http: Some(http),
                quic,
                http3: options.http3,
            },
            certificates: Certificates::Fixed(state.tls.clone()),
            dns: None,
            plain_http: PlainHttp::Serve,
            accounts: options
                .accounts
                .iter()
                .map(|a| (a.to_string(), token_for(a)))
                .collect(),
            limits: options.limits,
            reset_key: state.reset_key,
            share_key: state.share_key,
            names_file: Some(state_dir.join(calvin_edge::upstream::name_store::FILE)),
            cluster: None,
        };
        let edge = Edge::bind(settings).await.expect("edge binds");
        let bound = edge.bound().clone();
        let metrics = edge.metrics();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(edge.run(async {
            let _ = stopped.await;
        }));
        TestEdge {
            https: bound.https.expect("https bound"),
            http: bound.http.expect("http bound"),
            quic: bound.quic,
            url_template: bound.url_template,
            state_dir,
            domain,
            metrics,
            stop: Some(stop),
            task: Some(task),
            _dir: dir,
        }
    }

    pub fn ca(&self) -> PathBuf {
        self.state_dir.join(calvin_edge::dev::CA_FILE)
    }

    /// The HTTPS URL of a preview name.
    pub fn url(&self, name: &str) -> String {
        self.url_template.replace("{name}", name)
    }

    /// The plain-HTTP URL of a preview name.
    pub fn http_url(&self, name: &str) -> String {
        format!("http://{name}.{}:{}", self.domain, self.http.port())
    }

    /// The value of each series the edge's `/metrics` would serve now.
    pub fn metrics(&self) -> std::collections::BTreeMap<String, f64> {
        metric_values(&self.metrics.encode())
    }

    /// Waits (up to 10 s) until the edge counts `n` agents connected: an
    /// agent's stop returns once it has closed its connection, which the
    /// edge may see a moment later (and forward a request to it meanwhile).
    pub async fn wait_agents_connected(&self, n: u64) {
        let connected = || self.metrics().get("calvin_edge_agents_connected").copied();
        let reached = wait_until(Duration::from_secs(10), || connected() == Some(n as f64)).await;
        assert!(reached, "{:?} agents connected, not {n}", connected());
    }

    /// Graceful shutdown; returns when the edge has stopped.
    pub async fn stop(mut self) {
        self.shutdown().await;
    }

    /// Starts a graceful shutdown and returns the task that finishes it.
    pub fn begin_stop(&mut self) -> JoinHandle<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.take().expect("edge running")
    }

    async fn shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for TestEdge {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// A running agent with its control API on a socket of its own.
pub struct TestAgent {
    pub agent: Agent,
    pub socket: PathBuf,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
    api: JoinHandle<()>,
    _dir: tempfile::TempDir,
}

impl TestAgent {
    /// An agent of `account` connected to `edge`.
    pub async fn start(edge: &TestEdge, account: &str) -> TestAgent {
        Self::start_to(edge.quic, &edge.ca(), &token_for(account)).await
    }

    /// An agent of any edge, connected.
    pub async fn start_to(quic: SocketAddr, ca: &Path, token: &str) -> TestAgent {
        let agent = Self::spawn_to(quic, ca, token).await;
        agent
            .agent
            .wait_connected(Duration::from_secs(10))
            .await
            .expect("agent connects");
        agent
    }

    /// An agent that is started but may not be connected yet.
    pub async fn spawn(edge: &TestEdge, account: &str) -> TestAgent {
        Self::spawn_to(edge.quic, &edge.ca(), &token_for(account)).await
    }

    /// An agent of any edge: its QUIC address, CA and a token.
    pub async fn spawn_to(quic: SocketAddr, ca: &Path, token: &str) -> TestAgent {
        Self::spawn_to_edges(&[quic], ca, token).await
    }

    /// An agent given several edges (`--edge` more than once), in order,
    /// all verified with `ca`: started, maybe not connected yet.
    pub async fn spawn_to_edges(edges: &[SocketAddr], ca: &Path, token: &str) -> TestAgent {
        let addresses: Vec<EdgeAddress> = edges
            .iter()
            .map(|quic| {
                EdgeAddress::new(&quic.to_string(), Some(ca), Some("localhost"))
                    .expect("edge address")
            })
            .collect();
        let agent = Agent::with_edges(addresses, token.to_owned());
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
        TestAgent {
            agent,
            socket,
            stop: Some(stop),
            task,
            api,
            _dir: dir,
        }
    }

    /// The QUIC address of the edge it is connected to now.
    pub fn edge_now(&self) -> Option<SocketAddr> {
        self.agent.connected_edge().map(|edge| edge.addr())
    }

    pub fn client(&self) -> ControlClient {
        ControlClient::new(&self.socket)
    }

    /// `POST /v1/previews` through the control socket; panics on an error.
    pub async fn preview(&self, port: u16, name: Option<&str>) -> PreviewCreated {
        let answer = self.try_preview(port.into(), name).await;
        answer
            .parse()
            .unwrap_or_else(|e| panic!("preview {port} {name:?}: {e:?}"))
    }

    /// `GET /v1/previews` through the control socket.
    pub async fn list(&self) -> PreviewList {
        self.client()
            .list()
            .await
            .expect("control API answers")
            .parse()
            .expect("a preview list")
    }

    /// `POST /v1/previews` without the probe's request (see
    /// [`unprobed`]).
    pub async fn try_preview(&self, port: i64, name: Option<&str>) -> Answer {
        self.client()
            .create(&unprobed(port, name.map(str::to_owned)))
            .await
            .expect("control API answers")
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

impl Drop for TestAgent {
    fn drop(&mut self) {
        self.task.abort();
        self.api.abort();
    }
}

/// What curl printed for one request.
#[derive(Debug)]
pub struct CurlOutput {
    pub status: u16,
    pub http_version: String,
    /// Header lines of the final response, lower-cased names.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub stderr: String,
}

impl CurlOutput {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The text of one of the edge's own plain-text answers, without its
    /// last line: `request id: ID`, which must name the `x-request-id` the
    /// answer carries.
    pub fn edge_text(&self) -> String {
        let text = self.text();
        let id = self
            .header("x-request-id")
            .expect("the edge's answer has an x-request-id");
        text.strip_suffix(&format!("request id: {id}\n"))
            .unwrap_or_else(|| panic!("no `request id: {id}` line ending: {text:?}"))
            .to_owned()
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Writes a secret as an operator should: readable by its owner alone
/// (`calvin-edge serve` refuses a tokens file open to others), whatever
/// the mode of a file already there.
pub fn write_secret(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).expect("secret file");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("chmod 600");
}

/// Reads a streaming response with `curl -N` (`args` after the CA) and
/// notes when each `data:` line arrives.
pub async fn event_arrivals(ca: &Path, args: &[&str]) -> Vec<(String, Duration)> {
    use tokio::io::AsyncBufReadExt;
    let start = std::time::Instant::now();
    let mut child = tokio::process::Command::new("curl")
        .args(["-sS", "-N", "--cacert"])
        .arg(ca)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("curl");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let mut arrivals = Vec::new();
    while let Ok(Some(line)) = lines.next_line().await {
        if line.starts_with("data:") {
            arrivals.push((line, start.elapsed()));
        }
    }
    let _ = child.wait().await;
    arrivals
}

/// Runs `curl -sS --cacert CA ARGS...` and returns the status, headers and
/// body of the response.
pub async fn curl(ca: &Path, args: &[&str]) -> CurlOutput {
    let dir = tempfile::tempdir().expect("tempdir");
    let body = dir.path().join("body");
    let headers = dir.path().join("headers");
    let output = tokio::process::Command::new("curl")
        .arg("-sS")
        .arg("--cacert")
        .arg(ca)
        .arg("-o")
        .arg(&body)
        .arg("-D")
        .arg(&headers)
        .args(["-w", "%{http_code} %{http_version}"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .await
        .expect("curl runs (install curl)");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let mut parts = stdout.split_whitespace();
    let status = parts.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    let http_version = parts.next().unwrap_or("").to_owned();
    let header_text = std::fs::read_to_string(&headers).unwrap_or_default();
    // With 1xx answers curl writes several blocks; the last one is final.
    let last_block = header_text
        .split("\r\n\r\n")
        .filter(|b| !b.trim().is_empty())
        .last()
        .unwrap_or("");
    let headers = last_block
        .lines()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    CurlOutput {
        status,
        http_version,
        headers,
        body: std::fs::read(&body).unwrap_or_default(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// `GET /healthz` on an edge's plain HTTP listener: (status, JSON body).
pub async fn health_of(http: SocketAddr) -> (u16, serde_json::Value) {
    let url = format!("http://127.0.0.1:{}/healthz", http.port());
    let out = curl(Path::new("/dev/null"), &[&url]).await;
    let json = serde_json::from_slice(&out.body).unwrap_or(serde_json::Value::Null);
    (out.status, json)
}

/// A finished process's stderr, line by line.
pub fn stderr_lines(out: &std::process::Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The 1-based line of the first line of `text` that starts with `start`
/// (a key's line in a configuration a test wrote).
pub fn line_of(text: &str, start: &str) -> usize {
    text.lines()
        .position(|l| l.starts_with(start))
        .expect("line in config")
        + 1
}

/// POSTs `data` with curl (`--data-binary` from a temporary file), with
/// `extra` arguments; the answer and how long it took.
pub async fn curl_post(
    ca: &Path,
    url: &str,
    data: &[u8],
    extra: &[&str],
) -> (CurlOutput, Duration) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("body");
    std::fs::write(&file, data).expect("body file");
    let body = format!("@{}", file.display());
    let mut args = extra.to_vec();
    args.extend(["--data-binary", &body, url]);
    let started = std::time::Instant::now();
    let out = curl(ca, &args).await;
    (out, started.elapsed())
}

/// The 99th percentile of sorted latencies.
pub fn p99(sorted: &[Duration]) -> Duration {
    sorted[(sorted.len() * 99 / 100).min(sorted.len() - 1)]
}

/// Retries `check` every 100 ms until it returns `Some` or `limit` passes.
pub async fn eventually<T, F, Fut>(limit: Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(value) = check().await {
            return Some(value);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The path of a workspace binary, built by `cargo test --workspace`.
pub fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    // target/<profile>/deps/<test> -> target/<profile>/<name>
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target directory");
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is missing: run `cargo build --workspace --bins` (cargo test --workspace builds it)",
        path.display()
    );
    path
}

/// A `calvin-*` binary running as a child process, killed when dropped.
pub struct Process {
    pub child: tokio::process::Child,
    pub stdout: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
}

impl Process {
    /// Starts `binary(name) ARGS`, stdout piped, stderr inherited.
    pub fn start(name: &str, args: &[&str]) -> Process {
        let mut command = tokio::process::Command::new(binary(name));
        command.args(args);
        Self::spawn(command)
    }

    /// Starts `command` (stdout piped, stderr inherited).
    pub fn spawn(mut command: tokio::process::Command) -> Process {
        use tokio::io::AsyncBufReadExt;
        let name = format!("{:?}", command.as_std().get_program());
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("start {name}: {e}"));
        let stdout = tokio::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
        Process { child, stdout }
    }

    /// Reads stdout lines until one starts with `prefix`; returns the rest
    /// of that line.
    pub async fn line_after(&mut self, prefix: &str) -> String {
        let read = async {
            while let Ok(Some(line)) = self.stdout.next_line().await {
                if let Some(rest) = line.strip_prefix(prefix) {
                    return Some(rest.trim().to_owned());
                }
            }
            None
        };
        tokio::time::timeout(Duration::from_secs(60), read)
            .await
            .ok()
            .flatten()
            .unwrap_or_else(|| panic!("no line starting with {prefix:?}"))
    }

    /// The first JSON object on its stdout whose message is `message`: an
    /// event of facts told with `--log-format json` (what text lines say
    /// after their labels, its fields).
    pub async fn event(&mut self, message: &str) -> serde_json::Value {
        let read = async {
            while let Ok(Some(line)) = self.stdout.next_line().await {
                let Ok(event) = serde_json::from_str::<serde_json::Value>(&line) else {
                    continue;
                };
                if event["message"] == message {
                    return Some(event);
                }
            }
            None
        };
        tokio::time::timeout(Duration::from_secs(60), read)
            .await
            .ok()
            .flatten()
            .unwrap_or_else(|| panic!("no JSON event {message:?}"))
    }

    /// Sends a signal (`TERM`, `KILL`, ...) with kill(1).
    pub async fn signal(&self, signal: &str) {
        send_signal(&self.child, signal).await;
    }
}

/// Sends `signal` (`TERM`, `HUP`, ...) to a running child with kill(1).
pub async fn send_signal(child: &tokio::process::Child, signal: &str) {
    let pid = child.id().expect("running").to_string();
    let status = tokio::process::Command::new("kill")
        .args([&format!("-{signal}"), &pid])
        .status()
        .await
        .expect("kill runs");
    assert!(status.success());
}

/// `calvin-edge dev` as a process; fields are the addresses it printed.
pub struct EdgeProcess {
    pub process: Process,
    pub https: SocketAddr,
    pub http: SocketAddr,
    pub quic: SocketAddr,
    pub url_template: String,
}

impl EdgeProcess {
    /// Starts `calvin-edge dev --state-dir DIR` on the given addresses
    /// (port 0 for any) and reads the addresses it bound.
    pub async fn start(state_dir: &Path, https: &str, http: &str, quic: &str) -> EdgeProcess {
        let dir = state_dir.to_str().expect("utf-8 path");
        let mut process = Process::start(
            "calvin-edge",
            &[
                "dev",
                "--state-dir",
                dir,
                "--https",
                https,
                "--http",
                http,
                "--quic",
                quic,
            ],
        );
        let addr = |s: String, suffix: &str| -> SocketAddr {
            s.trim_end_matches(suffix).parse().expect("printed address")
        };
        let https = addr(process.line_after("listening https ").await, "/tcp");
        let http = addr(process.line_after("listening http ").await, "/tcp");
        let quic = addr(process.line_after("listening quic ").await, "/udp");
        let url_template = process.line_after("previews ").await;
        EdgeProcess {
            process,
            https,
            http,
            quic,
            url_template,
        }
    }
}

/// `calvin-agent up` against a `calvin-edge dev` whose state is in
/// `edge_dir`, with its control socket at `socket`; returns once the socket
/// is served.
pub async fn agent_up(edge_dir: &Path, quic: SocketAddr, socket: &Path) -> Process {
    let path = |p: PathBuf| p.to_str().expect("utf-8 path").to_owned();
    let mut up = Process::start(
        "calvin-agent",
        &[
            "up",
            "--edge",
            &quic.to_string(),
            "--token-file",
            &path(edge_dir.join("agent.token")),
            "--ca",
            &path(edge_dir.join("ca.pem")),
            "--server-name",
            "localhost",
            "--socket",
            &path(socket.to_owned()),
        ],
    );
    up.line_after("control socket ").await;
    up
}

/// A TLS client that trusts only `ca`, offering `alpn`.
pub fn tls_client_config(ca: &Path, alpn: &[&[u8]]) -> rustls::ClientConfig {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).expect("ca") {
        roots.add(cert.expect("cert")).expect("root");
    }
    let mut config =
        rustls::ClientConfig::builder_with_provider(calvin_edge::certs::tls::provider())
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    config
}

/// Previews `port` through the control socket once its agent is connected.
pub async fn preview_when_connected(socket: &Path, port: u16) -> PreviewCreated {
    let client = ControlClient::new(socket);
    eventually(Duration::from_secs(10), || async {
        client
            .create(&unprobed(port.into(), None))
            .await
            .ok()?
            .parse()
            .ok()
    })
    .await
    .expect("the agent connects and previews")
}

/// A preview request without the probe: the origins of most tests count
/// the requests they see, and the probe's `HEAD /` is not one of the
/// test's. The probe has its own tests (`preview_diagnostics`).
pub fn unprobed(port: i64, name: Option<String>) -> calvin_agent::api::PreviewRequest {
    calvin_agent::api::PreviewRequest {
        port,
        name,
        ttl_secs: None,
        probe: Some(false),
        protect: None,
        expires_secs: None,
    }
}

/// The setup most end-to-end tests start from: an in-process edge, an
/// agent of alice's on it, an origin, and the origin previewed (under a
/// generated name).
pub struct PreviewSetup {
    pub edge: TestEdge,
    pub agent: TestAgent,
    pub origin: Origin,
    pub created: PreviewCreated,
}

impl PreviewSetup {
    /// On an edge with the default limits.
    pub async fn start() -> PreviewSetup {
        Self::on(TestEdge::start().await).await
    }

    /// On `edge`.
    pub async fn on(edge: TestEdge) -> PreviewSetup {
        let agent = TestAgent::start(&edge, "alice").await;
        let origin = Origin::start().await;
        let created = agent.preview(origin.port, None).await;
        assert!(created.listening, "{created:?}");
        assert_eq!(created.url, edge.url(&created.name));
        PreviewSetup {
            edge,
            agent,
            origin,
            created,
        }
    }

    /// The preview's HTTPS URL followed by `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.created.url)
    }
}

/// `calvin-edge dev` and `calvin-agent up` as processes, on any loopback
/// ports, with an origin previewed through them.
pub struct DevPreview {
    pub edge: EdgeProcess,
    pub agent: Process,
    pub origin: Origin,
    pub created: PreviewCreated,
    /// The edge's state folder, and its CA.
    pub edge_dir: PathBuf,
    pub ca: PathBuf,
    /// The agent's control socket.
    pub socket: PathBuf,
    /// Holds both folders; dropped last.
    pub state: tempfile::TempDir,
}

impl DevPreview {
    pub async fn start() -> DevPreview {
        let state = tempfile::tempdir().expect("tempdir");
        let edge_dir = state.path().join("edge");
        let any = "127.0.0.1:0";
        let edge = EdgeProcess::start(&edge_dir, any, any, any).await;
        let socket = state.path().join("agent.sock");
        let agent = agent_up(&edge_dir, edge.quic, &socket).await;
        let origin = Origin::start().await;
        let created = preview_when_connected(&socket, origin.port).await;
        DevPreview {
            edge,
            agent,
            origin,
            created,
            ca: edge_dir.join("ca.pem"),
            edge_dir,
            socket,
            state,
        }
    }
}

/// The value of each series (name and labels, as the exposition writes
/// them) of a `/metrics` text.
pub fn metric_values(exposition: &str) -> std::collections::BTreeMap<String, f64> {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_owned(), value.parse().ok()?))
        })
        .collect()
}

/// Polls `done` every 100 ms until it holds or `limit` passes.
pub async fn wait_until(limit: Duration, done: impl Fn() -> bool) -> bool {
    eventually(limit, || {
        let ok = done();
        async move { ok.then_some(()) }
    })
    .await
    .is_some()
}

/// A QUIC server with the edge's agent configuration (not the loopback
/// one) on quinn's default endpoint, and the address an agent dials to
/// reach it; the folder holds its dev CA.
pub fn plain_quic_server() -> (
    quinn::Endpoint,
    calvin_agent::EdgeAddress,
    tempfile::TempDir,
) {
    quic_server(false)
}

/// The next agent's connection to a test QUIC server, handshake done.
pub async fn accept_agent(endpoint: &quinn::Endpoint) -> quinn::Connection {
    endpoint
        .accept()
        .await
        .expect("incoming")
        .await
        .expect("handshake")
}

/// A QUIC server as [`plain_quic_server`], or with `loopback` as the edge
/// serves an agent on this machine: the edge's own kind of endpoint (its
/// UDP buffers and datagram size) with the loopback configuration. Call it
/// inside a tokio runtime.
pub fn quic_server(
    loopback: bool,
) -> (
    quinn::Endpoint,
    calvin_agent::EdgeAddress,
    tempfile::TempDir,
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = calvin_edge::dev::load_or_create(dir.path(), DOMAIN).expect("state");
    let certs = std::sync::Arc::new(calvin_edge::certs::cert_store::CertStore::new());
    certs.install(&state.tls).expect("dev certificate");
    let server = calvin_edge::certs::tls::quic_config(certs, loopback, false).expect("quic config");
    let local: SocketAddr = "127.0.0.1:0".parse().expect("addr");
    let endpoint = if loopback {
        let socket = calvin_edge::udp_socket(local).expect("udp socket");
        let config = calvin_edge::certs::tls::endpoint_config(quinn::EndpointConfig::default());
        quinn::Endpoint::new(
            config,
            Some(server),
            socket,
            std::sync::Arc::new(quinn::TokioRuntime),
        )
        .expect("endpoint")
    } else {
        quinn::Endpoint::server(server, local).expect("endpoint")
    };
    let addr = endpoint.local_addr().expect("addr");
    let edge = calvin_agent::EdgeAddress::new(
        &addr.to_string(),
        Some(&state.ca_path()),
        Some("localhost"),
    )
    .expect("edge address");
    (endpoint, edge, dir)
}
