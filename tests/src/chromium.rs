//! Headless Chromium driven over the DevTools protocol: one page, its
//! JavaScript evaluated, for tests that check what a browser does.

use std::process::Stdio;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use crate::harness::eventually;

/// Headless Chromium with one page, driven over the DevTools protocol.
pub struct Chromium {
    child: tokio::process::Child,
    devtools: tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
    session: String,
    next_id: u64,
    _profile: tempfile::TempDir,
}

impl Chromium {
    /// Starts Chromium (a fresh profile, nothing fetched but what the page
    /// asks) and opens `url` in a tab.
    pub async fn open(url: &str) -> Chromium {
        Self::open_with(url, &[]).await
    }

    /// [`Self::open`], with more command-line flags.
    pub async fn open_with(url: &str, flags: &[&str]) -> Chromium {
        let profile = tempfile::tempdir().expect("tempdir");
        let child = tokio::process::Command::new("chromium")
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--no-proxy-server",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--remote-debugging-port=0",
            ])
            .args(flags)
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("chromium runs (tests/run installs it)");
        // Chromium writes the port it bound and the browser's path there.
        let active = profile.path().join("DevToolsActivePort");
        let endpoint = eventually(Duration::from_secs(30), || async {
            let text = std::fs::read_to_string(&active).ok()?;
            let mut lines = text.lines();
            let (port, path) = (lines.next()?, lines.next()?);
            Some(format!("ws://127.0.0.1:{port}{path}"))
        })
        .await
        .expect("Chromium's DevTools endpoint within 30 s");
        let (devtools, _) = tokio_tungstenite::connect_async(&endpoint)
            .await
            .expect("DevTools");
        let mut chromium = Chromium {
            child,
            devtools,
            session: String::new(),
            next_id: 0,
            _profile: profile,
        };
        let target = chromium
            .call("Target.createTarget", json!({ "url": url }))
            .await;
        let attached = chromium
            .call(
                "Target.attachToTarget",
                json!({ "targetId": target["targetId"], "flatten": true }),
            )
            .await;
        chromium.session = attached["sessionId"]
            .as_str()
            .expect("a session")
            .to_owned();
        chromium
    }

    /// Sends one command (to the page once attached) and returns its
    /// result; events in between are skipped.
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({ "id": id, "method": method, "params": params });
        if !self.session.is_empty() {
            message["sessionId"] = json!(self.session);
        }
        self.devtools
            .send(Message::text(message.to_string()))
            .await
            .expect("send to DevTools");
        let answer = tokio::time::timeout(Duration::from_secs(30), async {
            while let Some(Ok(message)) = self.devtools.next().await {
                let Ok(text) = message.into_text() else {
                    continue;
                };
                let Ok(value) = serde_json::from_str::<Value>(&text) else {
                    continue;
                };
                if value["id"] == json!(id) {
                    return Some(value);
                }
            }
            None
        })
        .await
        .ok()
        .flatten()
        .unwrap_or_else(|| panic!("no answer from DevTools to {method}"));
        assert!(answer["error"].is_null(), "{method}: {}", answer["error"]);
        answer["result"].clone()
    }

    /// The value of a JavaScript expression in the page.
    pub async fn eval(&mut self, expression: &str) -> Value {
        let result = self
            .call(
                "Runtime.evaluate",
                json!({ "expression": expression, "returnByValue": true, "awaitPromise": true }),
            )
            .await;
        assert!(
            result["exceptionDetails"].is_null(),
            "{expression}: {}",
            result["exceptionDetails"]
        );
        result["result"]["value"].clone()
    }

    /// Waits until `expression` is neither null nor false (nor empty) in
    /// the page, and returns it; on a timeout, panics with what the page
    /// shows.
    pub async fn wait_for(&mut self, expression: &str, what: &str) -> Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        loop {
            let value = self.eval(expression).await;
            if !matches!(value, Value::Null | Value::Bool(false)) && value != json!("") {
                return value;
            }
            if tokio::time::Instant::now() >= deadline {
                let shown = self.eval("document.body.innerText").await;
                panic!("{what}: not within 15 s; the page shows:\n{shown}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub async fn close(mut self) {
        self.session.clear();
        let _ = tokio::time::timeout(
            Duration::from_secs(5),
            self.call("Browser.close", json!({})),
        )
        .await;
        let _ = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await;
    }
}
