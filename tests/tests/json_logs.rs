//! `--log-format json` as a log collector sees it: stdout and stderr of a
//! real run in one stream (as Kubernetes and journald collect them), every
//! line one JSON object, the facts a process tells (where it listens, its
//! URL, its files) fields of an event.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use calvin_tests::gateway::GatewaySetup;
use calvin_tests::*;
use serde_json::Value;

/// A binary run with `--log-format json` first, its stdout and stderr
/// written to one file.
struct Combined {
    child: tokio::process::Child,
    output: PathBuf,
}

impl Combined {
    fn start(bin: &str, args: &[&str], output: &Path, env: &[(&str, &str)]) -> Combined {
        let file = std::fs::File::create(output).expect("output file");
        let mut command = tokio::process::Command::new(binary(bin));
        command
            .args(["--log-format", "json"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("file"))
            .stderr(file)
            .kill_on_drop(true);
        for (key, value) in env {
            command.env(key, value);
        }
        Combined {
            child: command.spawn().expect("starts"),
            output: output.to_owned(),
        }
    }

    /// Every whole line so far, each parsed; a line that is not a JSON
    /// object with a level, a message and a time fails. (A last line
    /// without its newline is still being written.)
    fn lines(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.output).unwrap_or_default();
        let whole = text.rfind('\n').map_or("", |end| &text[..end]);
        whole
            .lines()
            .map(|line| {
                let value: Value = serde_json::from_str(line)
                    .unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}\nin:\n{text}"));
                for key in ["level", "message", "timestamp", "target"] {
                    assert!(value[key].is_string(), "no {key}: {line}\nin:\n{text}");
                }
                value
            })
            .collect()
    }

    /// The first event whose message is `message`, once it is written.
    async fn event(&self, message: &str) -> Value {
        let find = || self.lines().into_iter().find(|l| l["message"] == message);
        let seen = wait_until(Duration::from_secs(30), || find().is_some()).await;
        assert!(seen, "no {message:?} event in {:?}", self.lines());
        find().expect("found")
    }

    /// SIGTERM, then every line it wrote.
    async fn stop(mut self) -> Vec<Value> {
        send_signal(&self.child, "TERM").await;
        let exited = tokio::time::timeout(Duration::from_secs(40), self.child.wait()).await;
        assert!(exited.is_ok(), "it did not stop: {:?}", self.lines());
        self.lines()
    }
}

fn field(event: &Value, key: &str) -> String {
    event[key]
        .as_str()
        .unwrap_or_else(|| panic!("no {key} in {event}"))
        .to_owned()
}

/// An address told as `ADDR/tcp`, `ADDR/udp`.
fn address(event: &Value, key: &str) -> std::net::SocketAddr {
    let text = field(event, key);
    let addr = text.split('/').next().unwrap_or_default();
    addr.parse()
        .unwrap_or_else(|e| panic!("{key}: {text:?} ({e})"))
}

/// A dev edge, an agent daemon serving a preview through it and a `share`
/// of its own, all in JSON: every line of each one's output parses, and
/// what each tells is in its fields.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_edge_and_the_agent_write_only_json_lines() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("edge");
    let state_arg = state.to_str().expect("utf-8");
    let any = "127.0.0.1:0";
    let edge = Combined::start(
        "calvin-edge",
        &[
            "dev",
            "--state-dir",
            state_arg,
            "--https",
            any,
            "--http",
            any,
            "--quic",
            any,
            "--admin",
            any,
        ],
        &dir.path().join("edge.out"),
        &[],
    );
    let listening = edge.event("listening").await;
    let (quic, https) = (address(&listening, "quic"), address(&listening, "https"));
    address(&listening, "http");
    address(&listening, "admin");
    assert!(
        field(&listening, "previews").contains("{name}"),
        "{listening}"
    );
    assert_eq!(listening["target"], "calvin_edge", "{listening}");
    let told = edge.event("dev edge state").await;
    assert_eq!(
        field(&told, "ca"),
        state.join("ca.pem").display().to_string()
    );

    let socket = dir.path().join("agent.sock");
    let path = |p: &Path| p.to_str().expect("utf-8").to_owned();
    let agent = Combined::start(
        "calvin-agent",
        &[
            "up",
            "--edge",
            &quic.to_string(),
            "--token-file",
            &path(&state.join("agent.token")),
            "--ca",
            &path(&state.join("ca.pem")),
            "--server-name",
            "localhost",
            "--socket",
            &path(&socket),
            "--metrics",
            any,
        ],
        &dir.path().join("agent.out"),
        &[],
    );
    let up = agent.event("listening").await;
    assert_eq!(field(&up, "control_socket"), path(&socket));
    address(&up, "metrics");
    let origin = Origin::start().await;
    let created = preview_when_connected(&socket, origin.port).await;
    let out = curl(
        &state.join("ca.pem"),
        &["--max-time", "10", &format!("{}/hello", created.url)],
    )
    .await;
    assert_eq!(out.status, 200, "{out:?}");

    // A share of its own, with its dev edge in the process.
    let share_state = dir.path().join("share-edge");
    let share = Combined::start(
        "calvin-agent",
        &[
            "share",
            &origin.port.to_string(),
            "--dev",
            "--state-dir",
            &path(&share_state),
            "--https",
            any,
            "--http",
            any,
            "--quic",
            any,
        ],
        &dir.path().join("share.out"),
        &[],
    );
    let sharing = share.event("sharing").await;
    assert!(field(&sharing, "url").starts_with("https://"), "{sharing}");
    let share_lines = share.stop().await;
    assert!(
        share_lines.iter().any(|l| l["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("forwarding "))),
        "the share's notes are JSON lines too: {share_lines:?}"
    );

    let agent_lines = agent.stop().await;
    let edge_lines = edge.stop().await;
    assert!(
        edge_lines.iter().any(|l| l["message"] == "agent connected"),
        "the edge's log is in the same stream: {edge_lines:?}"
    );
    eprintln!(
        "JSON lines: edge {}, agent {}, share {}; https at {https}",
        edge_lines.len(),
        agent_lines.len(),
        share_lines.len()
    );
}

/// `calvin-edge serve` in JSON, as an operator runs it: its facts and its
/// log (an access line, a refused request) in one stream, every line an
/// object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_served_edge_writes_only_json_lines() {
    let dir = tempfile::tempdir().expect("tempdir");
    let zone = "preview.test";
    let config_path = calvin_tests::serve_edge::write_config(dir.path(), zone, "access = true");
    let edge = Combined::start(
        "calvin-edge",
        &["serve", "--config", config_path.to_str().expect("utf-8")],
        &dir.path().join("edge.out"),
        &[("RUST_LOG", calvin_edge::DEFAULT_LOG_FILTER)],
    );
    let listening = edge.event("listening").await;
    let (https, quic) = (address(&listening, "https"), address(&listening, "quic"));
    for key in ["http", "admin"] {
        address(&listening, key);
    }
    assert_eq!(
        field(&listening, "previews"),
        format!("https://{{name}}.{zone}:{}", https.port())
    );
    let ca = dir.path().join("certs/ca.pem");
    let agent = TestAgent::start_to(quic, &ca, &token_for("a")).await;
    let origin = Origin::start().await;
    agent.preview(origin.port, Some("web")).await;
    let resolve = |name: &str| format!("{name}.{zone}:{}:127.0.0.1", https.port());
    let url = |name: &str| format!("https://{name}.{zone}:{}/hello", https.port());
    let served = curl(&ca, &["--resolve", &resolve("web"), &url("web")]).await;
    assert_eq!(served.status, 200, "{served:?}");
    let unknown = curl(&ca, &["--resolve", &resolve("nowhere"), &url("nowhere")]).await;
    assert_eq!(unknown.status, 404, "{unknown:?}");
    drop(agent);
    let lines = edge.stop().await;
    let access: Vec<&Value> = lines.iter().filter(|l| l["message"] == "access").collect();
    assert_eq!(access.len(), 2, "{lines:?}");
    assert!(
        lines.iter().any(|l| l["message"] == "edge stopped"),
        "{lines:?}"
    );
}

/// The gateway daemon in JSON: its facts (URL, token file, metrics) and
/// its log in one stream, every line an object; and check-config's
/// summary too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_writes_only_json_lines() {
    let setup = GatewaySetup::new("self-hosted")
        .await
        .with_socket_mode()
        .with_metrics();
    let env = setup.env();
    let env: Vec<(&str, &str)> = env
        .as_object()
        .expect("env")
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str().expect("string")))
        .collect();
    let config = setup.config();
    let config_arg = config.to_str().expect("utf-8");
    let checked = Combined::start(
        "calvin-gateway",
        &["check-config", config_arg],
        &setup.temp_dir().join("check.out"),
        &env,
    );
    let summary = checked.event("configuration checked").await;
    assert!(field(&summary, "summary").contains("ok"), "{summary}");

    let daemon = Combined::start(
        "calvin-gateway",
        &["serve", "--config", config_arg, "--listen", "127.0.0.1:0"],
        &setup.temp_dir().join("daemon.out"),
        &env,
    );
    let listening = daemon.event("listening").await;
    let url = field(&listening, "url");
    assert!(url.starts_with("http://127.0.0.1:"), "{listening}");
    assert!(Path::new(&field(&listening, "token_file")).exists());
    address(&listening, "metrics");
    daemon.event("calvin-gateway serving").await;
    let health = curl(Path::new("/dev/null"), &[&format!("{url}/healthz")]).await;
    assert_eq!(health.status, 200, "{health:?}");
    let lines = daemon.stop().await;
    assert!(lines.len() >= 3, "{lines:?}");
}
