//! Several `calvin-agent share --dev` at once, as a person runs them (a
//! frontend in one terminal, an API in another, each with the same
//! command): one runs the dev edge, the others join it, and when the one
//! running it stops, one of the others takes it over. Every URL keeps
//! serving its own origin, and after the last share nothing is left.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use calvin_tests::*;
use tokio::io::{AsyncBufReadExt, BufReader};

/// How long the other shares' URLs may be down while one of them takes
/// the dev edge over.
const TAKEOVER_LIMIT: Duration = Duration::from_secs(10);

/// The flags every share of the test is given, as a user gives the same
/// command in each terminal: a state folder of its own and fixed ports,
/// free for the test (not the default 4443 and 4480).
struct DevFlags {
    dir: PathBuf,
    https: SocketAddr,
    http: SocketAddr,
}

impl DevFlags {
    fn new(dir: PathBuf) -> DevFlags {
        let (https, http) = free_ports();
        DevFlags { dir, https, http }
    }

    fn args(&self) -> Vec<String> {
        let https = self.https.to_string();
        vec![
            "--dev".into(),
            "--state-dir".into(),
            self.dir.display().to_string(),
            "--https".into(),
            https.clone(),
            "--http".into(),
            self.http.to_string(),
            "--quic".into(),
            https,
        ]
    }

    fn ca(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }
}

/// A port free on 127.0.0.1 for TCP and UDP both (the dev edge's HTTPS
/// and QUIC listeners share its number, as by default), and another free
/// for TCP.
fn free_ports() -> (SocketAddr, SocketAddr) {
    let loopback = |port| SocketAddr::from(([127, 0, 0, 1], port));
    (loopback(free_udp_tcp_port()), loopback(free_port()))
}

/// One `calvin-agent share PORT --dev ...` in its terminal: what it
/// printed on stdout (its URL) and on stderr.
struct Share {
    label: &'static str,
    child: tokio::process::Child,
    url: String,
    stderr: tokio::sync::watch::Receiver<String>,
}

impl Share {
    /// Starts a share of `port` and waits until it has printed its URL and
    /// the note that follows it.
    async fn start(label: &'static str, port: u16, flags: &DevFlags, verbose: bool) -> Share {
        let mut command = tokio::process::Command::new(binary("calvin-agent"));
        command
            .arg("share")
            .arg(port.to_string())
            .args(flags.args())
            .args(verbose.then_some("-v"))
            // The user's own shell: no log filter set.
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().expect("calvin-agent share starts");
        let (said, stderr) = tokio::sync::watch::channel(String::new());
        let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                said.send_modify(|all| {
                    all.push_str(&line);
                    all.push('\n');
                });
            }
        });
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let url = tokio::time::timeout(Duration::from_secs(60), stdout.next_line())
            .await
            .unwrap_or_else(|_| panic!("{label}: no URL within 60 s"))
            .expect("stdout")
            .unwrap_or_else(|| panic!("{label}: ended without a URL: {}", *stderr.borrow()));
        assert!(url.starts_with("https://"), "{label}: {url}");
        let mut share = Share {
            label,
            child,
            url,
            stderr,
        };
        share.said("forwarding ", Duration::from_secs(10)).await;
        share
    }

    /// Waits until stderr has a line containing `text`; panics after `limit`.
    async fn said(&mut self, text: &str, limit: Duration) {
        let found = tokio::time::timeout(limit, self.stderr.wait_for(|all| all.contains(text)))
            .await
            .is_ok_and(|said| said.is_ok());
        assert!(
            found,
            "{}: no {text:?} on stderr within {limit:?}:\n{}",
            self.label,
            *self.stderr.borrow()
        );
    }

    fn stderr(&self) -> String {
        self.stderr.borrow().clone()
    }

    fn joined(&self) -> bool {
        self.stderr()
            .contains("dev edge: joined the one running at")
    }

    fn took_over(&self) -> bool {
        self.stderr()
            .contains("dev edge: took over (the share that ran it stopped)")
    }

    /// Ctrl-C, as in its terminal; the share exits by itself and cleanly.
    async fn interrupt(mut self) -> String {
        send_signal(&self.child, "INT").await;
        let status = tokio::time::timeout(Duration::from_secs(10), self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("{}: still running 10 s after Ctrl-C", self.label))
            .expect("status");
        let stderr = self.stderr();
        assert!(status.success(), "{}: {status}:\n{stderr}", self.label);
        stderr
    }
}

/// A dev server answering `GET /` with its name, and `GET /hang` never
/// (a request in flight, as a dev server's live-reload connection is).
struct NamedOrigin {
    port: u16,
    /// `/hang` requests received so far.
    hanging: tokio::sync::watch::Receiver<usize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for NamedOrigin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl NamedOrigin {
    async fn start(name: &'static str) -> NamedOrigin {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind origin");
        let port = listener.local_addr().expect("addr").port();
        let (count, hanging) = tokio::sync::watch::channel(0);
        let count = std::sync::Arc::new(count);
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    continue;
                };
                let count = count.clone();
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    if head.starts_with(b"GET /hang ") {
                        count.send_modify(|n| *n += 1);
                        // Until the visitor or the edge gives up.
                        let _ = stream.read(&mut buf).await;
                        return;
                    }
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{name}",
                        name.len()
                    );
                    let _ = stream.write_all(answer.as_bytes()).await;
                });
            }
        });
        NamedOrigin {
            port,
            hanging,
            task,
        }
    }
}

/// Whether `url` answers 200 with `body` now.
async fn serves(ca: &Path, url: &str, body: &str) -> bool {
    let out = curl(ca, &["--max-time", "2", url]).await;
    out.status == 200 && out.text() == body
}

/// Waits until every share's URL serves its origin again; how long that
/// took from `since`, for each.
async fn all_serve(ca: &Path, shares: &[(&Share, &str)], since: Instant) -> Vec<Duration> {
    let mut gaps = Vec::new();
    for (share, body) in shares {
        let served = eventually(TAKEOVER_LIMIT, || async {
            serves(ca, &share.url, body).await.then_some(())
        })
        .await;
        assert!(
            served.is_some(),
            "{} ({}) did not serve {body:?} within {TAKEOVER_LIMIT:?}:\n{}",
            share.label,
            share.url,
            share.stderr()
        );
        gaps.push(since.elapsed());
    }
    gaps
}

/// No tracing line at info: `share` without `-v` prints its own lines.
fn assert_no_info_lines(label: &str, stderr: &str) {
    assert!(
        !stderr.lines().any(|l| l.contains(" INFO ")),
        "{label} printed info lines without -v:\n{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shares_of_one_machine_join_one_dev_edge_and_take_it_over() {
    let state = tempfile::tempdir().expect("tempdir");
    let flags = DevFlags::new(state.path().join("dev"));
    let ca = flags.ca();
    let (web, api, docs, admin) = (
        NamedOrigin::start("web").await,
        NamedOrigin::start("api").await,
        NamedOrigin::start("docs").await,
        NamedOrigin::start("admin").await,
    );

    // Three terminals, the same command, started at once on a folder that
    // does not exist yet: one runs the edge, the other two join it.
    let (a, b, c) = tokio::join!(
        Share::start("web", web.port, &flags, false),
        Share::start("api", api.port, &flags, false),
        Share::start("docs", docs.port, &flags, false),
    );
    let mut started = vec![(a, "web", &web), (b, "api", &api), (c, "docs", &docs)];
    let urls: std::collections::HashSet<_> = started.iter().map(|(s, ..)| s.url.clone()).collect();
    assert_eq!(urls.len(), 3, "three URLs: {urls:?}");
    for (share, body, _) in &started {
        assert!(
            share
                .url
                .ends_with(&format!(".preview.localhost:{}", flags.https.port())),
            "{}",
            share.url
        );
        assert!(serves(&ca, &share.url, body).await, "{}", share.label);
        assert!(
            share.stderr().contains("dev edge: trust "),
            "{}",
            share.stderr()
        );
    }
    let runs = started.iter().filter(|(s, ..)| !s.joined()).count();
    assert_eq!(runs, 1, "one share runs the edge, the others join it");
    let first = started
        .iter()
        .position(|(s, ..)| !s.joined())
        .expect("the runner");
    let (first, first_body, _) = started.remove(first);
    let first_url = first.url.clone();
    let [(x, x_body, x_origin), (y, y_body, _)] =
        <[_; 2]>::try_from(started).ok().expect("two left");

    // A request in flight to another share's URL (a live-reload
    // connection) does not hold the edge's ports for long.
    let hang = format!("{}/hang", x.url);
    let hanging = tokio::spawn({
        let ca = ca.clone();
        async move { curl(&ca, &["--max-time", "60", &hang]).await }
    });
    let mut seen = x_origin.hanging.clone();
    tokio::time::timeout(Duration::from_secs(10), seen.wait_for(|&n| n == 1))
        .await
        .expect("the request reaches the origin")
        .expect("origin runs");

    // Ctrl-C in the terminal that runs the edge: the other two keep their
    // URLs, one of them taking the edge over.
    let stopped = Instant::now();
    let first_said = first.interrupt().await;
    let gaps = all_serve(&ca, &[(&x, x_body), (&y, y_body)], stopped).await;
    eprintln!("first takeover: the other URLs served again after {gaps:?}");
    let cut = hanging.await.expect("curl");
    assert_ne!(cut.status, 200, "{cut:?}");
    assert!(
        !serves(&ca, &first_url, first_body).await,
        "the stopped share's URL no longer serves"
    );
    let (runner, mut joiner) = match (x.took_over(), y.took_over()) {
        (true, false) => ((x, x_body), (y, y_body)),
        (false, true) => ((y, y_body), (x, x_body)),
        other => panic!(
            "exactly one share takes over, not {other:?}:\n{}\n{}",
            x.stderr(),
            y.stderr()
        ),
    };
    // The other one is told its connection is back.
    joiner
        .0
        .said("connected to the edge again", Duration::from_secs(1))
        .await;

    // A fourth share, with -v, while the edge runs in the one that took
    // it over: it joins, and its info lines are back.
    let mut fourth = Share::start("admin", admin.port, &flags, true).await;
    assert!(fourth.joined(), "{}", fourth.stderr());
    fourth
        .said(
            " INFO calvin_agent::agent: connected to the edge",
            Duration::from_secs(1),
        )
        .await;
    all_serve(
        &ca,
        &[
            (&runner.0, runner.1),
            (&joiner.0, joiner.1),
            (&fourth, "admin"),
        ],
        Instant::now(),
    )
    .await;

    // Mixed order: a share that only joined stops (the edge stays), then
    // the one running the edge (the fourth takes over), then the last.
    let joiner_said = joiner.0.interrupt().await;
    assert!(serves(&ca, &runner.0.url, runner.1).await);
    assert!(serves(&ca, &fourth.url, "admin").await);

    let stopped = Instant::now();
    let runner_said = runner.0.interrupt().await;
    let gaps = all_serve(&ca, &[(&fourth, "admin")], stopped).await;
    eprintln!("second takeover: the fourth URL served again after {gaps:?}");
    assert!(fourth.took_over(), "{}", fourth.stderr());
    let fourth_said = fourth.interrupt().await;

    // Nothing runs on the dev ports any more.
    for tcp in [flags.https, flags.http] {
        assert!(
            tokio::net::TcpStream::connect(tcp).await.is_err(),
            "something still listens on {tcp}"
        );
    }
    assert!(
        std::net::UdpSocket::bind(flags.https).is_ok(),
        "something still holds {}/udp",
        flags.https
    );

    // Without -v: the shares' own lines, no info lines; with -v, info lines.
    for (label, said) in [
        ("the first", &first_said),
        ("a joiner", &joiner_said),
        ("the first to take over", &runner_said),
    ] {
        assert_no_info_lines(label, said);
    }
    assert!(fourth_said.contains(" INFO "), "{fourth_said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dev_port_taken_by_another_program_is_still_an_error() {
    let state = tempfile::tempdir().expect("tempdir");
    let flags = DevFlags::new(state.path().join("dev"));
    // Another program on the HTTPS port: no dev edge of this folder runs,
    // so the share does not join anything; it says which flag moves it.
    let other = std::net::TcpListener::bind(flags.https).expect("the other program");
    let out = tokio::process::Command::new(binary("calvin-agent"))
        .args(["share", "3000"])
        .args(flags.args())
        .env_remove("RUST_LOG")
        .output()
        .await
        .expect("calvin-agent runs");
    drop(other);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "cannot listen for HTTPS on {}/tcp: Address already in use",
            flags.https
        )) && stderr.contains("(pass --https ADDR to use another address)"),
        "{stderr}"
    );
    assert!(!stderr.contains("joined"), "{stderr}");
    assert!(out.stdout.is_empty(), "no URL: {out:?}");
}

/// `calvin-edge dev` on the same folder and addresses runs the dev edge a
/// `share --dev` joins, as a share's would be; when it stops, the share
/// takes the edge over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_share_joins_the_dev_edge_of_calvin_edge_dev() {
    let state = tempfile::tempdir().expect("tempdir");
    let flags = DevFlags::new(state.path().join("dev"));
    // The edge's flags are the share's without --dev.
    let edge_args: Vec<String> = flags.args().into_iter().skip(1).collect();
    let mut edge = Process::spawn({
        let mut command = tokio::process::Command::new(binary("calvin-edge"));
        command.arg("dev").args(&edge_args);
        command
    });
    edge.line_after("previews ").await;
    let origin = NamedOrigin::start("web").await;
    let share = Share::start("share", origin.port, &flags, false).await;
    assert!(share.joined(), "{}", share.stderr());
    assert!(serves(&flags.ca(), &share.url, "web").await);

    // The edge stops: the share takes it over and its URL serves again.
    send_signal(&edge.child, "TERM").await;
    let since = Instant::now();
    let gaps = all_serve(&flags.ca(), &[(&share, "web")], since).await;
    eprintln!("served again {:?} after calvin-edge dev stopped", gaps[0]);
    assert!(share.took_over(), "{}", share.stderr());
    share.interrupt().await;
}
