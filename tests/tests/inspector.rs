//! The inspector (`calvin-agent up --inspect ADDR`): its page in headless
//! Chromium (driven over the DevTools protocol) lists what went through a
//! preview and replays it; its JSON masks secrets as the control API does;
//! web pages of other sites can neither replay nor read through it.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use calvin_agent::api::{PreviewCreated, PreviewList, RequestLog};
use calvin_agent::control_client::ControlClient;
use calvin_tests::*;

/// `calvin-edge dev`, `calvin-agent up --inspect 127.0.0.1:0` and an
/// origin previewed through them.
struct Inspected {
    edge_dir: PathBuf,
    socket: PathBuf,
    _edge: EdgeProcess,
    _agent: Process,
    origin: Origin,
    created: PreviewCreated,
    /// `http://127.0.0.1:PORT`, where the inspector listens.
    inspector: String,
    _state: tempfile::TempDir,
}

fn up_args(edge_dir: &Path, quic: &str, socket: &Path, inspect: &str) -> Vec<String> {
    let path = |p: PathBuf| p.to_str().expect("utf-8 path").to_owned();
    vec![
        "up".into(),
        "--edge".into(),
        quic.into(),
        "--token-file".into(),
        path(edge_dir.join("agent.token")),
        "--ca".into(),
        path(edge_dir.join("ca.pem")),
        "--server-name".into(),
        "localhost".into(),
        "--socket".into(),
        path(socket.to_owned()),
        "--inspect".into(),
        inspect.into(),
    ]
}

impl Inspected {
    async fn start() -> Inspected {
        let state = tempfile::tempdir().expect("tempdir");
        let edge_dir = state.path().join("edge");
        let any = "127.0.0.1:0";
        let edge = EdgeProcess::start(&edge_dir, any, any, any).await;
        let socket = state.path().join("agent.sock");
        let args = up_args(&edge_dir, &edge.quic.to_string(), &socket, "127.0.0.1:0");
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut agent = Process::start("calvin-agent", &args);
        agent.line_after("control socket ").await;
        let inspector = agent.line_after("listening inspector ").await;
        let inspector = format!("http://{}", inspector.trim_end_matches("/tcp"));
        let origin = Origin::start().await;
        let created = preview_when_connected(&socket, origin.port).await;
        Inspected {
            edge_dir,
            socket,
            _edge: edge,
            _agent: agent,
            origin,
            created,
            inspector,
            _state: state,
        }
    }

    fn ca(&self) -> PathBuf {
        self.edge_dir.join("ca.pem")
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.created.url)
    }

    /// The inspector's `host:port`.
    fn host(&self) -> &str {
        self.inspector.trim_start_matches("http://")
    }

    /// The inspector's URL of the preview's request log.
    fn requests_api(&self) -> String {
        format!(
            "{}/api/previews/{}/requests",
            self.inspector, self.created.name
        )
    }

    /// The log (through the control API) once it holds `n` finished
    /// requests.
    async fn finished(&self, n: usize) -> RequestLog {
        let client = ControlClient::new(&self.socket);
        eventually(Duration::from_secs(10), || async {
            let log: RequestLog = client
                .requests(&self.created.name, "")
                .await
                .ok()?
                .parse()
                .ok()?;
            let done = log
                .requests
                .iter()
                .filter(|r| r.duration_ms.is_some())
                .count();
            (done >= n).then_some(log)
        })
        .await
        .unwrap_or_else(|| panic!("{n} requests logged"))
    }
}

/// The text of the detail pane's fact `name` (`status`, `path`...).
fn fact(name: &str) -> String {
    format!(
        "document.querySelector('#facts [data-fact={name}]') && \
         document.querySelector('#facts [data-fact={name}]').textContent"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_lists_a_request_through_the_preview_and_replays_it_to_the_origin() {
    let s = Inspected::start().await;
    // A visitor's request, with a secret and a header meant to run as HTML.
    let trap = "<img src=x onerror=\"document.title='pwned'\">";
    let visit = curl(
        &s.ca(),
        &[
            "-H",
            "Authorization: Bearer sekrit-token",
            "-H",
            &format!("X-Note: {trap}"),
            &s.url("/hello?from=curl"),
        ],
    )
    .await;
    assert_eq!(visit.status, 200);
    assert_eq!(visit.text(), "hello from origin\n");
    s.finished(1).await;

    let mut page = Chromium::open(&format!("{}/", s.inspector)).await;
    let title = page
        .wait_for(
            "document.readyState === 'complete' && document.title",
            "the page loaded",
        )
        .await;
    assert_eq!(title, "calvin inspector");
    let name = &s.created.name;
    page.wait_for(
        &format!("[...document.querySelectorAll('.preview')].some(p => p.dataset.name === '{name}' && p.classList.contains('selected'))"),
        "the preview listed and chosen",
    )
    .await;
    let row = "[...document.querySelectorAll('.request')]\
               .find(r => r.querySelector('.path').textContent === '/hello?from=curl')";
    let id = page
        .wait_for(&format!("{row} && {row}.dataset.id"), "the request listed")
        .await;
    page.eval(&format!("{row}.click()")).await;
    let path = page.wait_for(&fact("path"), "the request's details").await;
    assert_eq!(path, "/hello?from=curl");
    assert_eq!(page.eval(&fact("method")).await, "GET");
    assert_eq!(page.eval(&fact("status")).await, "200");
    assert_eq!(page.eval(&fact("client")).await, "127.0.0.1");
    assert_eq!(page.eval(&fact("received")).await, "18 bytes");
    let shown = page
        .eval("document.getElementById('detail').innerText")
        .await;
    let shown = shown.as_str().unwrap();
    assert!(shown.contains("hello from origin"), "{shown}");
    assert!(shown.contains(trap), "the header shown as text: {shown}");
    assert!(shown.contains("(masked"), "{shown}");
    assert!(!shown.contains("sekrit"), "a secret on the page: {shown}");
    assert_eq!(
        page.eval("document.title").await,
        "calvin inspector",
        "the visitor's header ran as HTML"
    );

    // Replay, from the page's button: the origin sees the request again
    // and the page shows the new entry.
    let seen = s.origin.requests();
    page.eval("document.getElementById('replay').click()").await;
    let result = page
        .wait_for(
            "document.getElementById('replay-result').textContent.startsWith('replayed') && \
             document.getElementById('replay-result').textContent",
            "the replay's answer",
        )
        .await;
    assert!(result.as_str().unwrap().ends_with(": 200"), "{result}");
    s.origin.has_seen(seen + 1).await;
    assert_eq!(s.origin.requests(), seen + 1, "one replay, once");
    let replay_of = page.eval(&fact("request")).await;
    assert!(
        replay_of
            .as_str()
            .unwrap()
            .ends_with(&format!("(replay of #{})", id.as_str().unwrap())),
        "{replay_of}"
    );
    // Newest first: the replay heads the list.
    let first = page
        .eval("document.querySelector('.request').dataset.id")
        .await;
    let log = s.finished(2).await;
    let replayed = log.requests.last().unwrap();
    assert_eq!(
        replayed.replay_of.map(|id| id.to_string()),
        id.as_str().map(String::from)
    );
    assert_eq!(first, replayed.id.to_string());

    // A new request shows up without reloading the page.
    assert_eq!(curl(&s.ca(), &[&s.url("/bytes/5")]).await.status, 200);
    page.wait_for(
        "document.querySelector('.request .path').textContent === '/bytes/5'",
        "a later request listed, first",
    )
    .await;
    page.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_json_api_answers_as_the_control_api_and_masks_secrets() {
    let s = Inspected::start().await;
    let visit = curl(
        &s.ca(),
        &[
            "-H",
            "Authorization: Bearer sekrit-token",
            "-H",
            "Cookie: session=sekrit-cookie",
            &s.url("/cookies"),
        ],
    )
    .await;
    assert_eq!(visit.status, 200);
    assert!(visit.header("set-cookie").is_some());
    let control = s.finished(1).await;

    let answer = curl(&s.ca(), &[&s.requests_api()]).await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.header("content-type"), Some("application/json"));
    let text = answer.text();
    for secret in ["sekrit-token", "sekrit-cookie", "plain=1"] {
        assert!(!text.contains(secret), "{secret} in {text}");
    }
    let log: RequestLog = serde_json::from_str(&text).expect("a request log");
    assert_eq!(log, control, "the same answer as the control API's");
    let r = &log.requests[0];
    for (headers, name) in [
        (&r.request_headers, "authorization"),
        (&r.request_headers, "cookie"),
        (&r.response_headers, "set-cookie"),
    ] {
        let value = headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str());
        assert!(
            value.is_some_and(|v| v.starts_with("(masked")),
            "{name}: {value:?}"
        );
    }

    let list = curl(&s.ca(), &[&format!("{}/api/previews", s.inspector)]).await;
    let list: PreviewList = serde_json::from_slice(&list.body).expect("a preview list");
    assert!(list.connected);
    assert_eq!(list.previews.len(), 1);
    assert_eq!(list.previews[0].url, s.created.url);

    // The query's bounds are the control API's.
    let wrong = curl(&s.ca(), &[&format!("{}?limit=0", s.requests_api())]).await;
    assert_eq!(wrong.status, 400);
    assert!(
        wrong.text().contains("limit must be from 1 to 1000"),
        "{}",
        wrong.text()
    );
    let missing = curl(
        &s.ca(),
        &[&format!("{}/api/previews/nosuchname/requests", s.inspector)],
    )
    .await;
    assert_eq!(missing.status, 404);
    assert!(
        missing.text().contains("unknown_name"),
        "{}",
        missing.text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_sites_cannot_replay_or_read_and_a_public_address_is_refused() {
    let s = Inspected::start().await;
    assert_eq!(curl(&s.ca(), &[&s.url("/hello")]).await.status, 200);
    let id = s.finished(1).await.requests[0].id;
    let replay = format!("{}/{id}/replay", s.requests_api());
    let seen = s.origin.requests();
    let own_host = format!("Host: {}", s.host());
    let port = s.host().rsplit(':').next().unwrap().to_owned();

    // A page of another site posts a form (no custom header possible).
    let forged = curl(
        &s.ca(),
        &["-X", "POST", "-H", "Origin: http://evil.example", &replay],
    )
    .await;
    assert_eq!(forged.status, 403);
    let text = forged.text();
    assert!(text.contains("\"cross_site\""), "{text}");
    assert!(
        text.contains("X-Calvin-Inspector: 1 header is missing"),
        "{text}"
    );
    // The header, but sent from another site's page.
    let other_origin = curl(
        &s.ca(),
        &[
            "-X",
            "POST",
            "-H",
            "X-Calvin-Inspector: 1",
            "-H",
            "Origin: http://evil.example",
            &replay,
        ],
    )
    .await;
    assert_eq!(other_origin.status, 403);
    assert!(
        other_origin
            .text()
            .contains("a page of http://evil.example may not replay")
    );
    // DNS rebinding: evil.example now resolves to 127.0.0.1, so the
    // browser sends its name as the Host, for reads and for replays.
    let rebound = format!("Host: evil.example:{port}");
    for args in [
        vec![
            "-X",
            "POST",
            "-H",
            "X-Calvin-Inspector: 1",
            "-H",
            &rebound,
            &replay,
        ],
        vec!["-H", &rebound, &s.requests_api()],
        vec!["-H", &rebound, &s.inspector],
    ] {
        let refused = curl(&s.ca(), &args).await;
        assert_eq!(refused.status, 403, "{args:?}");
        let text = refused.text();
        assert!(text.contains("\"wrong_host\""), "{text}");
        assert!(
            text.contains(&format!("not \\\"evil.example:{port}\\\"")),
            "{text}"
        );
        assert!(
            text.contains(&format!("{} or localhost:{port}", s.host())),
            "{text}"
        );
    }
    assert_eq!(
        s.origin.requests(),
        seen,
        "nothing refused reached the origin"
    );

    // The page's own request passes, by either name.
    for host in [own_host, format!("Host: localhost:{port}")] {
        let ok = curl(
            &s.ca(),
            &[
                "-X",
                "POST",
                "-H",
                "X-Calvin-Inspector: 1",
                "-H",
                &host,
                &replay,
            ],
        )
        .await;
        assert_eq!(ok.status, 200, "{host}: {}", ok.text());
    }
    s.origin.has_seen(seen + 2).await;

    // The page itself: never framed by another site, never cached.
    let page = curl(&s.ca(), &[&format!("{}/", s.inspector)]).await;
    assert_eq!(page.status, 200);
    assert!(page.text().contains("<title>calvin inspector</title>"));
    let csp = page.header("content-security-policy").unwrap();
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert!(csp.contains("connect-src 'self'"), "{csp}");

    // `up` will not serve it on an address other machines reach.
    let args = up_args(
        &s.edge_dir,
        "127.0.0.1:9",
        &s.edge_dir.join("other.sock"),
        "0.0.0.0:0",
    );
    let out = tokio::process::Command::new(binary("calvin-agent"))
        .args(&args)
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr
            .contains("the inspector listens on loopback only (127.0.0.1 or [::1]), not 0.0.0.0:0"),
        "{stderr}"
    );
}
