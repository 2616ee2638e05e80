//! HTTP/3 visitors of an edge: `tests/h3client.py` (aioquic, a real
//! client from the registries) for what a user would see, and a client on
//! the `h3` crate for a load of requests.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;

use bytes::{Buf, Bytes};

use crate::harness::{TestEdge, tls_client_config};

/// What `tests/h3client.py` printed for one exchange.
#[derive(Debug)]
pub struct H3Exchange {
    /// Its exit status: 0 when the exchange completed.
    pub code: i32,
    /// Its JSON summary (`status`, `headers`, `body_bytes`, `body_sha256`,
    /// ...), `Null` when it printed none.
    pub summary: serde_json::Value,
    /// `--events`: each DATA chunk's text and its arrival, in ms after the
    /// response head.
    pub events: Vec<(String, f64)>,
    pub stderr: String,
}

impl H3Exchange {
    pub fn status(&self) -> u64 {
        self.summary["status"].as_u64().unwrap_or(0)
    }

    /// The value of the response's header `name` (lower case), if any.
    pub fn header(&self, name: &str) -> Option<String> {
        self.summary["headers"]
            .as_array()?
            .iter()
            .find(|pair| pair[0] == name)
            .and_then(|pair| pair[1].as_str().map(str::to_owned))
    }

    pub fn body_bytes(&self) -> u64 {
        self.summary["body_bytes"].as_u64().unwrap_or(0)
    }

    pub fn body_sha256(&self) -> String {
        self.summary["body_sha256"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }
}

/// `tests/h3client.py`.
pub fn h3client_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("h3client.py")
}

/// The HTTP/3 URL of `path` on preview `name` of `edge`: the edge's QUIC
/// port, where HTTP/3 is served.
pub fn h3_url(edge: &TestEdge, name: &str, path: &str) -> String {
    format!("https://{name}.{}:{}{path}", edge.domain, edge.quic.port())
}

/// Runs `tests/h3client.py URL --cacert CA --resolve ... ARGS...` against
/// `edge`'s QUIC listener (without `--cacert` when ARGS has `-k`).
pub async fn h3client(edge: &TestEdge, url: &str, args: &[&str]) -> H3Exchange {
    h3client_at(edge.quic, &edge.ca(), url, args).await
}

/// Runs `tests/h3client.py` as [`h3client`] does, against any edge: its
/// QUIC address and CA.
pub async fn h3client_at(quic: SocketAddr, ca: &Path, url: &str, args: &[&str]) -> H3Exchange {
    let authority = url
        .trim_start_matches("https://")
        .split('/')
        .next()
        .unwrap_or_default()
        .to_owned();
    let resolve = format!("{authority}:{}", quic.ip());
    let mut command = tokio::process::Command::new(crate::python::python());
    command.arg(h3client_path()).arg(url);
    // `-k` (no certificate check) or the edge's CA.
    if !args.contains(&"-k") {
        command.arg("--cacert").arg(ca);
    }
    let output = command
        .args(["--resolve", &resolve])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .await
        .expect("the tests' Python runs tests/h3client.py (tests/run --install-only makes it, with aioquic)");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let mut summary = serde_json::Value::Null;
    let mut events = Vec::new();
    for line in stdout.lines() {
        let Ok(value) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if value["event"] == "data" {
            let text = value["text"].as_str().unwrap_or_default().to_owned();
            events.push((text, value["ms"].as_f64().unwrap_or(-1.0)));
        } else {
            summary = value;
        }
    }
    H3Exchange {
        code: output.status.code().unwrap_or(-1),
        summary,
        events,
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// An HTTP/3 connection to `quic` (the edge's certificate checked against
/// `ca`): its request sender; the connection is driven by a task of its
/// own until it closes.
pub async fn h3_connect(
    quic: SocketAddr,
    ca: &Path,
) -> (
    quinn::Connection,
    h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>,
) {
    let tls = tls_client_config(ca, &[b"h3"]);
    let crypto =
        quinn::crypto::rustls::QuicClientConfig::try_from(tls).expect("a QUIC client config");
    let mut endpoint =
        quinn::Endpoint::client("127.0.0.1:0".parse().expect("addr")).expect("client endpoint");
    endpoint.set_default_client_config(quinn::ClientConfig::new(Arc::new(crypto)));
    let conn = endpoint
        .connect(quic, "localhost")
        .expect("connect")
        .await
        .expect("QUIC handshake with ALPN h3");
    let (mut driver, send) = h3::client::new(h3_quinn::Connection::new(conn.clone()))
        .await
        .expect("HTTP/3 connection");
    tokio::spawn(async move {
        let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
        drop(endpoint);
    });
    (conn, send)
}

/// A GET of `url` over `send`: its status and body (`None` when the
/// exchange failed).
pub async fn h3_get(
    send: &mut h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>,
    url: &str,
) -> Option<(u16, Bytes)> {
    let req = http::Request::get(url).body(()).ok()?;
    let mut stream = send.send_request(req).await.ok()?;
    stream.finish().await.ok()?;
    let response = stream.recv_response().await.ok()?;
    let mut body = Vec::new();
    while let Some(mut chunk) = stream.recv_data().await.ok()? {
        let len = chunk.remaining();
        body.extend_from_slice(&chunk.copy_to_bytes(len));
    }
    Some((response.status().as_u16(), Bytes::from(body)))
}
