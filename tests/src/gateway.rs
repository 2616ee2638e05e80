//! calvin-gateway under test: its configuration, a fake Slack behind it,
//! and the official MCP Python SDK driving it (`tests/py/mcp_drive.py`)
//! over stdio or streamable HTTP.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

use crate::fake_slack::FakeSlack;
use crate::harness::binary;

pub const CHANNEL: &str = "C0SESSION1";
pub const THREAD_TS: &str = "1700000000.000100";
/// The session's owner.
pub const OWNER: &str = "U0OWNER";
pub const BOT_TOKEN: &str = "xoxb-calvin-test-token";
/// A store key for tests: 32 bytes as 64 hex digits.
pub const STORE_KEY: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

/// A gateway's files: its configuration, a session directory and a
/// secret store, in a temporary folder.
pub struct GatewaySetup {
    pub dir: tempfile::TempDir,
    pub slack: FakeSlack,
    pub mode: &'static str,
    pub agent_socket: Option<PathBuf>,
    /// Lines added at the end of gateway.toml (whole sections).
    pub extra: String,
    /// Lines added to its `[slack]` section.
    pub slack_extra: String,
    /// The chat platform's section instead of `[slack]` (a `[mattermost]`
    /// section: see [`crate::chat_world`]).
    pub chat_section: Option<String>,
    /// Lines added to its `[serve]` section.
    pub serve_extra: String,
    /// Whether the gateway's environment has `SP_STORE_KEY`.
    pub store_key: bool,
    /// Whether gateway.toml names [`store_dir`](Self::store_dir) (else
    /// the gateway's default folder is used).
    pub store_dir_configured: bool,
    /// Variables set in the gateway's environment besides [`env`](Self::env)'s
    /// (`XDG_STATE_HOME`, `HOME`); an empty `XDG_*` one counts as unset.
    pub env_extra: Vec<(String, String)>,
    /// The session's channel, thread and owner.
    pub channel: String,
    pub thread_ts: String,
    pub owner: Option<String>,
    /// The gateway's RUST_LOG.
    pub rust_log: &'static str,
}

impl GatewaySetup {
    pub async fn new(mode: &'static str) -> GatewaySetup {
        // The gateway's own TMPDIR is a folder of its own (see `env`), so
        // an escape from the session directory lands somewhere refused
        // wherever the checkout lies.
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("session")).expect("session dir");
        std::fs::create_dir(dir.path().join("tmp")).expect("temp dir");
        GatewaySetup {
            dir,
            slack: FakeSlack::start(BOT_TOKEN, &[CHANNEL]).await,
            mode,
            agent_socket: None,
            extra: String::new(),
            slack_extra: String::new(),
            chat_section: None,
            serve_extra: String::new(),
            store_key: true,
            store_dir_configured: true,
            env_extra: Vec::new(),
            channel: CHANNEL.into(),
            thread_ts: THREAD_TS.into(),
            owner: Some(OWNER.into()),
            rust_log: "info",
        }
    }

    /// `[slack] app_token`: the daemon connects with Socket Mode,
    /// reconnecting after 1 s.
    pub fn with_socket_mode(mut self) -> Self {
        self.slack_extra.push_str(&format!(
            "app_token = \"{}\"\nreconnect_secs = 1\n",
            self.slack.app_token()
        ));
        self
    }

    /// `[serve] metrics` on a port of its own: the daemon serves
    /// `/metrics` (see [`GatewayDaemon::metrics_addr`]).
    pub fn with_metrics(mut self) -> Self {
        self.serve_extra.push_str("metrics = \"127.0.0.1:0\"\n");
        self
    }

    /// The folder of the sessions' env files.
    pub fn runtime_dir(&self) -> PathBuf {
        self.dir.path().join("run")
    }

    /// The env file of this setup's session.
    pub fn env_file(&self) -> PathBuf {
        self.runtime_dir()
            .join(format!("{}-{}", self.channel, self.thread_ts))
            .join("env.sh")
    }

    pub fn session_dir(&self) -> PathBuf {
        self.dir.path().join("session")
    }

    /// The gateway's system temp directory (its TMPDIR): send_file allows
    /// it besides the session directory.
    pub fn temp_dir(&self) -> PathBuf {
        self.dir.path().join("tmp")
    }

    /// The gateway's environment: [`gateway_env`] with TMPDIR set to
    /// [`temp_dir`](Self::temp_dir), wherever the checkout lies.
    pub fn env(&self) -> Value {
        let mut env = gateway_env();
        env["TMPDIR"] = json!(self.temp_dir());
        env["RUST_LOG"] = json!(self.rust_log);
        if let Some(env) = env.as_object_mut() {
            if !self.store_key {
                env.remove("SP_STORE_KEY");
            }
            for (key, value) in &self.env_extra {
                env.insert(key.clone(), json!(value));
            }
        }
        env
    }

    pub fn store_dir(&self) -> PathBuf {
        self.dir.path().join("secrets")
    }

    /// Writes gateway.toml and returns its path.
    pub fn config(&self) -> PathBuf {
        let agent = self
            .agent_socket
            .as_ref()
            .map(|p| format!("agent_socket = \"{}\"\n", p.display()))
            .unwrap_or_default();
        let chat = match &self.chat_section {
            Some(section) => section.clone(),
            None => format!(
                "[slack]\napi_url = \"{api}\"\nbot_token = \"{BOT_TOKEN}\"\n{slack_extra}",
                api = self.slack.api_url(),
                slack_extra = self.slack_extra,
            ),
        };
        let store = if self.store_dir_configured {
            format!("store_dir = \"{}\"\n", self.store_dir().display())
        } else {
            String::new()
        };
        let text = format!(
            "mode = \"{mode}\"\n{agent}\n{chat}[secrets]\n{store}\
             runtime_dir = \"{run}\"\n[serve]\ntoken_file = \"{token}\"\n{serve_extra}{extra}\n",
            mode = self.mode,
            run = self.runtime_dir().display(),
            token = self.token_file().display(),
            serve_extra = self.serve_extra,
            extra = self.extra,
        );
        let path = self.dir.path().join("gateway.toml");
        std::fs::write(&path, text).expect("gateway.toml");
        path
    }

    /// The daemon's registration token file.
    pub fn token_file(&self) -> PathBuf {
        self.dir.path().join("gateway.token")
    }

    /// Seeds a secret of this session, as request_secret will.
    pub fn seed_secret(&self, name: &str, value: &str) {
        let store = calvin_gateway::secrets::SecretStore::open(&self.store_dir(), STORE_KEY)
            .expect("store");
        let context = self.context();
        store
            .set(&context.secrets_key(), name, value)
            .expect("secret set");
    }

    pub fn context(&self) -> calvin_gateway::session::SessionContext {
        calvin_gateway::session::SessionContext {
            channel: self.channel.clone(),
            thread_ts: self.thread_ts.clone(),
            session_dir: self.session_dir(),
            owner: self.owner.clone(),
            permission_mode: Default::default(),
            model: Default::default(),
            branch: None,
            env_file: None,
        }
    }

    /// A stdio scenario: the gateway spawned by the SDK as a coding CLI
    /// would.
    pub fn stdio(&self, steps: Value) -> Value {
        self.stdio_with(Value::Array(self.stdio_args()), steps)
    }

    /// `calvin-gateway mcp`'s arguments for this session (owner included),
    /// for a caller to add flags to.
    pub fn stdio_args(&self) -> Vec<Value> {
        let mut args = vec![
            json!("mcp"),
            json!("--config"),
            json!(self.config()),
            json!("--channel"),
            json!(self.channel),
            json!("--thread-ts"),
            json!(self.thread_ts),
            json!("--session-dir"),
            json!(self.session_dir()),
        ];
        if let Some(owner) = &self.owner {
            args.extend([json!("--owner"), json!(owner)]);
        }
        args
    }

    /// A stdio scenario with these `calvin-gateway` arguments.
    pub fn stdio_with(&self, args: Value, steps: Value) -> Value {
        json!({
            "transport": "stdio",
            "command": binary("calvin-gateway"),
            "args": args,
            "env": self.env(),
            "cwd": self.session_dir(),
            "steps": steps,
        })
    }
}

/// The environment the gateway and scripts get: PATH with the workspace
/// binaries first, and the store key.
pub fn gateway_env() -> Value {
    let bins = binary("calvin-gateway")
        .parent()
        .expect("target dir")
        .to_owned();
    let path = format!(
        "{}:{}",
        bins.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    json!({
        "PATH": path,
        "HOME": std::env::var("HOME").unwrap_or_default(),
        "SP_STORE_KEY": STORE_KEY,
        "RUST_LOG": "info",
    })
}

/// 0, 1, 2, ...: names files apart within one test process.
fn next_number() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Runs a scenario through the Python SDK; returns one JSON value per step.
pub async fn drive(scenario: Value) -> Vec<Value> {
    drive_logged(scenario).await.0
}

/// [`drive`], with what the SDK logged (its stderr: warnings such as
/// "Session termination failed: 202").
pub async fn drive_logged(scenario: Value) -> (Vec<Value>, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("py/mcp_drive.py");
    let mut child = tokio::process::Command::new(crate::python::python())
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the tests' Python runs (tests/run --install-only makes it, with the MCP SDK)");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin
        .write_all(scenario.to_string().as_bytes())
        .await
        .expect("scenario");
    drop(stdin);
    let output = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
        .await
        .expect("the MCP client finished within 120 s")
        .expect("mcp_drive.py output");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "mcp_drive.py failed\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    );
    let steps = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    (steps, stderr.into_owned())
}

/// A call result's text.
pub fn text(v: &Value) -> &str {
    v["text"].as_str().unwrap_or_default()
}

/// The call succeeded.
pub fn assert_ok(v: &Value) {
    assert_eq!(v["is_error"], false, "expected success: {v}");
}

/// The call was refused with a reason containing `needle`.
pub fn assert_refused(v: &Value, needle: &str) {
    assert_eq!(v["is_error"], true, "expected a refusal: {v}");
    assert!(text(v).contains(needle), "{needle:?} missing from {v}");
}

/// A call step.
pub fn call(tool: &str, args: Value) -> Value {
    json!({ "op": "call", "tool": tool, "args": args })
}

/// The tool names of a list step's answer.
pub fn tool_names(listed: &Value) -> Vec<String> {
    listed["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["name"].as_str().expect("name").to_owned())
        .collect()
}

/// `calvin-gateway serve` on a loopback port.
pub struct GatewayDaemon {
    pub process: crate::harness::Process,
    pub base: String,
    /// The registration token, read from the file the daemon named.
    pub token: String,
    /// Where its stderr (its log) goes.
    pub log_file: PathBuf,
}

impl GatewayDaemon {
    pub async fn start(setup: &GatewaySetup) -> GatewayDaemon {
        GatewayDaemon::start_with_args(setup, &[]).await
    }

    /// [`start`](Self::start) with `calvin-gateway`'s global flags
    /// `args` (`--log-format json`).
    pub async fn start_with_args(setup: &GatewaySetup, args: &[&str]) -> GatewayDaemon {
        let log_file = setup
            .dir
            .path()
            .join(format!("daemon-{}.log", next_number()));
        let log = std::fs::File::create(&log_file).expect("daemon log");
        let mut command = tokio::process::Command::new(binary("calvin-gateway"));
        command
            .args(args)
            .args(["serve", "--config"])
            .arg(setup.config())
            .args(["--listen", "127.0.0.1:0"])
            .stderr(log);
        for (k, v) in setup.env().as_object().expect("env") {
            command.env(k, v.as_str().expect("string"));
        }
        let mut process = crate::harness::Process::spawn(command);
        // With `--log-format json` the same facts are one JSON event.
        let (base, token_file) = if args.contains(&"json") {
            let told = process.event("listening").await;
            let fact = |key: &str| told[key].as_str().unwrap_or_default().to_owned();
            (fact("url"), fact("token_file"))
        } else {
            (
                process.line_after("listening ").await,
                process.line_after("token file ").await,
            )
        };
        let token = std::fs::read_to_string(&token_file)
            .expect("token file")
            .trim()
            .to_owned();
        GatewayDaemon {
            process,
            base,
            token,
            log_file,
        }
    }

    /// [`start_with_sockets`](Self::start_with_sockets) and `setup`'s
    /// session registered: the daemon and the registration's answer.
    pub async fn start_with_session(setup: &GatewaySetup) -> (GatewayDaemon, Value) {
        let daemon = GatewayDaemon::start_with_sockets(setup).await;
        let registered = daemon.register(GatewayDaemon::context_of(setup)).await;
        (daemon, registered)
    }

    /// [`start`](Self::start), returning once its 2 Socket Mode sockets
    /// are open at the fake Slack.
    pub async fn start_with_sockets(setup: &GatewaySetup) -> GatewayDaemon {
        let daemon = GatewayDaemon::start(setup).await;
        setup
            .slack
            .wait_for_sockets(2, Duration::from_secs(15))
            .await
            .expect("the daemon opens its Socket Mode connections");
        daemon
    }

    /// The `[daemon]` section a stdio gateway of `setup` names this daemon
    /// with (its URL and token file).
    pub fn config_section(&self, setup: &GatewaySetup) -> String {
        format!(
            "[daemon]\nurl = \"{}\"\ntoken_file = \"{}\"\n",
            self.base,
            setup.token_file().display()
        )
    }

    /// The address of its `/metrics` (`listening metrics ADDR`, printed
    /// after the lines [`start`](Self::start) reads) when the setup has
    /// [`with_metrics`](GatewaySetup::with_metrics).
    pub async fn metrics_addr(&mut self) -> String {
        self.process.line_after("listening metrics ").await
    }

    /// What the daemon has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_file).unwrap_or_default()
    }

    /// Sends SIGTERM and waits for it to exit; its log.
    pub async fn stop(mut self) -> String {
        self.process.signal("TERM").await;
        let _ = tokio::time::timeout(Duration::from_secs(10), self.process.child.wait()).await;
        self.log()
    }

    /// `DELETE /sessions/<id>`: ends a registered session.
    pub async fn end(&self, session: &Value) {
        let id = session.as_str().expect("a session id");
        let url = format!("{}/sessions/{id}", self.base);
        let out = crate::harness::curl(Path::new("/dev/null"), &["-X", "DELETE", &url]).await;
        assert_eq!(out.status, 200, "{}", out.text());
    }

    /// `POST /sessions` with `token`: curl's answer.
    pub async fn try_register(&self, context: &Value, token: &str) -> crate::harness::CurlOutput {
        crate::harness::curl(
            Path::new("/dev/null"),
            &[
                "-X",
                "POST",
                "-H",
                "content-type: application/json",
                "-H",
                &format!("authorization: Bearer {token}"),
                "--data",
                &context.to_string(),
                &format!("{}/sessions", self.base),
            ],
        )
        .await
    }

    /// The registration body of `setup`'s session.
    pub fn context_of(setup: &GatewaySetup) -> Value {
        json!({
            "channel": setup.channel,
            "thread_ts": setup.thread_ts,
            "session_dir": setup.session_dir(),
            "owner": setup.owner,
        })
    }

    /// An http scenario on a registered session's MCP endpoint.
    pub fn http(mcp_url: &str, steps: Value) -> Value {
        json!({ "transport": "http", "url": mcp_url, "steps": steps })
    }

    /// Registers a runner's session; the daemon's answer.
    pub async fn register(&self, context: Value) -> Value {
        let out = self.try_register(&context, &self.token).await;
        assert_eq!(out.status, 201, "{}", out.text());
        serde_json::from_slice(&out.body).expect("JSON")
    }
}

/// A daemon session's `GET /sessions/<id>/events`, read line by line.
pub struct EventStream {
    lines: tokio::sync::mpsc::UnboundedReceiver<Value>,
    _task: tokio::task::JoinHandle<()>,
}

impl EventStream {
    /// Opens `events_url` (`http://127.0.0.1:PORT/sessions/<id>/events`)
    /// and waits for the answer's head.
    pub async fn open(events_url: &str) -> EventStream {
        use http_body_util::BodyExt;
        let uri: http::Uri = events_url.parse().expect("events url");
        let authority = uri.authority().expect("authority").to_string();
        let mut sender = crate::raw_client::h1_client(&authority).await;
        let req = http::Request::get(uri.path())
            .header(http::header::HOST, &authority)
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .expect("request");
        let response = sender.send_request(req).await.expect("events answer");
        assert_eq!(response.status(), 200, "GET {events_url}");
        let (tx, lines) = tokio::sync::mpsc::unbounded_channel();
        let mut body = response.into_body();
        let task = tokio::spawn(async move {
            let mut pending = Vec::new();
            while let Some(Ok(frame)) = body.frame().await {
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                pending.extend_from_slice(&data);
                while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = pending.drain(..=end).collect();
                    let line = String::from_utf8_lossy(&line).trim().to_owned();
                    if line.is_empty() {
                        continue;
                    }
                    let value = serde_json::from_str(&line).expect("a JSON event line");
                    if tx.send(value).is_err() {
                        return;
                    }
                }
            }
        });
        EventStream { lines, _task: task }
    }

    /// The next event, if one comes within `wait`.
    pub async fn next(&mut self, wait: Duration) -> Option<Value> {
        tokio::time::timeout(wait, self.lines.recv())
            .await
            .ok()
            .flatten()
    }
}
