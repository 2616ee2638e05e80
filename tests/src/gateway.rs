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
    /// Lines added to gateway.toml.
    pub extra: String,
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
        }
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
        let text = format!(
            "mode = \"{mode}\"\n{agent}\n[slack]\napi_url = \"{api}\"\nbot_token = \"{BOT_TOKEN}\"\n\
             [secrets]\nstore_dir = \"{store}\"\n[serve]\ntoken_file = \"{token}\"\n{extra}\n",
            mode = self.mode,
            api = self.slack.api_url(),
            store = self.store_dir().display(),
            token = self.dir.path().join("gateway.token").display(),
            extra = self.extra,
        );
        let path = self.dir.path().join("gateway.toml");
        std::fs::write(&path, text).expect("gateway.toml");
        path
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
            channel: CHANNEL.into(),
            thread_ts: THREAD_TS.into(),
            session_dir: self.session_dir(),
            owner: Some("U0OWNER".into()),
        }
    }

    /// A stdio scenario: the gateway spawned by the SDK as a coding CLI
    /// would.
    pub fn stdio(&self, steps: Value) -> Value {
        json!({
            "transport": "stdio",
            "command": binary("calvin-gateway"),
            "args": [
                "mcp", "--config", self.config(),
                "--channel", CHANNEL, "--thread-ts", THREAD_TS,
                "--session-dir", self.session_dir(),
            ],
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

/// Runs a scenario through the Python SDK; returns one JSON value per step.
pub async fn drive(scenario: Value) -> Vec<Value> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("py/mcp_drive.py");
    let mut child = tokio::process::Command::new("python3")
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("python3 runs (pip install mcp)");
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
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
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
    pub child: tokio::process::Child,
    pub base: String,
    /// The registration token, read from the file the daemon named.
    pub token: String,
}

impl GatewayDaemon {
    pub async fn start(setup: &GatewaySetup) -> GatewayDaemon {
        use tokio::io::AsyncBufReadExt;
        let config = setup.config();
        let env = setup.env();
        let mut command = tokio::process::Command::new(binary("calvin-gateway"));
        command
            .args(["serve", "--config"])
            .arg(&config)
            .args(["--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .kill_on_drop(true);
        for (k, v) in env.as_object().expect("env") {
            command.env(k, v.as_str().expect("string"));
        }
        let mut child = command.spawn().expect("calvin-gateway serve");
        let mut lines = tokio::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
        let mut next = async || {
            tokio::time::timeout(Duration::from_secs(30), lines.next_line())
                .await
                .expect("the daemon starts")
                .expect("stdout")
                .expect("a line")
        };
        let base = next()
            .await
            .strip_prefix("listening ")
            .expect("listening line")
            .to_owned();
        let token_file = next()
            .await
            .strip_prefix("token file ")
            .expect("token file line")
            .to_owned();
        let token = std::fs::read_to_string(&token_file)
            .expect("token file")
            .trim()
            .to_owned();
        GatewayDaemon { child, base, token }
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

    /// Registers a runner's session; the daemon's answer.
    pub async fn register(&self, context: Value) -> Value {
        let out = self.try_register(&context, &self.token).await;
        assert_eq!(out.status, 201, "{}", out.text());
        serde_json::from_slice(&out.body).expect("JSON")
    }
}
