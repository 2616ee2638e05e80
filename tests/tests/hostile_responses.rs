//! Hostile or broken origins: a response whose framing is ambiguous or
//! whose head is malformed becomes the edge's 502, never passed on; a body
//! cut short reaches the visitor as a failure, never as a shorter body that
//! looks whole; Location and other headers are the origin's own.

use std::sync::{Arc, Mutex};

use calvin_tests::raw_origin::next_request;
use calvin_tests::*;

async fn preview_answering(answer: &[u8]) -> (TestEdge, TestAgent, RawOrigin, String) {
    let edge = TestEdge::start().await;
    let agent = TestAgent::start(&edge, "alice").await;
    let origin = RawOrigin::answering(answer.to_vec()).await;
    let url = agent.preview(origin.port, None).await.url;
    (edge, agent, origin, url)
}

/// The host of a preview's URL.
fn host_of(url: &str) -> String {
    let authority = url.trim_start_matches("https://");
    authority.split(':').next().unwrap_or_default().to_owned()
}

const MALFORMED: &[(&str, &[u8], &str)] = &[
    (
        "Content-Length and Transfer-Encoding",
        b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n",
        "the response has both Content-Length and Transfer-Encoding",
    ),
    (
        "Transfer-Encoding then Content-Length",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n2\r\nab\r\n0\r\n\r\n",
        "the response has both Content-Length and Transfer-Encoding",
    ),
    (
        "two different Content-Lengths",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nabc",
        "more than one Content-Length",
    ),
    (
        "two equal Content-Lengths",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nab",
        "more than one Content-Length",
    ),
    (
        "a signed Content-Length",
        b"HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\nab",
        "Content-Length is not a decimal number",
    ),
    (
        "chunked twice",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n",
        "chunked more than once",
    ),
    (
        "a transfer coding the edge cannot undo",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nabc",
        "Transfer-Encoding must end with chunked",
    ),
    (
        "a CR inside a header value",
        b"HTTP/1.1 200 OK\r\nX-A: a\rb\r\nContent-Length: 2\r\n\r\nab",
        "invalid header value",
    ),
    (
        "a NUL inside a header value",
        b"HTTP/1.1 200 OK\r\nX-A: a\0b\r\nContent-Length: 2\r\n\r\nab",
        "invalid header value",
    ),
    (
        "a folded header",
        b"HTTP/1.1 200 OK\r\nX-A: a\r\n b\r\nContent-Length: 2\r\n\r\nab",
        "malformed response head",
    ),
    (
        "a space before the colon",
        b"HTTP/1.1 200 OK\r\nX-A : a\r\nContent-Length: 2\r\n\r\nab",
        "malformed response head",
    ),
    (
        "a bad chunk size",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nab\r\n0\r\n\r\n",
        "a chunk size is not a hexadecimal number",
    ),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_responses_become_502() {
    for (label, answer, says) in MALFORMED {
        let (edge, _agent, origin, url) = preview_answering(answer).await;
        for version in ["--http2", "--http1.1"] {
            let out = curl(&edge.ca(), &[version, &format!("{url}/")]).await;
            assert_eq!(out.status, 502, "{label} {version}: {out:?}");
            assert_eq!(out.header("x-calvin-error"), Some("bad-gateway"), "{label}");
            assert!(
                out.text().contains("sent a malformed response") && out.text().contains(says),
                "{label}: {}",
                out.text()
            );
            assert_eq!(out.header("x-a"), None);
        }
        assert_eq!(origin.requests().len(), 2, "{label}: the origin was asked");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_cut_short_fails_for_the_visitor() {
    let cut = [
        (
            "Content-Length 10, 2 bytes sent",
            &b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nab"[..],
        ),
        (
            "chunked, no last chunk",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
        ),
    ];
    for (label, answer) in cut {
        let (edge, _agent, _origin, url) = preview_answering(answer).await;
        for version in ["--http2", "--http1.1"] {
            let out = curl(&edge.ca(), &[version, &format!("{url}/")]).await;
            assert!(
                out.stderr.contains("curl: ("),
                "{label} {version}: curl took it as whole: {out:?}"
            );
        }
        // On HTTP/1.1 the chunked answer ends without its last chunk.
        let host = host_of(&url);
        let out = exchange(
            edge.http,
            format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes(),
        )
        .await;
        // hyper may drop the head it had not flushed yet when the body
        // fails at once: nothing at all is a failure too. What must never
        // come is an answer that reads as whole.
        assert!(out.closed, "{label}: the connection stays open");
        if !out.text.is_empty() {
            assert!(out.text.starts_with("HTTP/1.1 200 "), "{}", out.text);
            assert!(!out.text.ends_with("0\r\n\r\n"), "{label}: {}", out.text);
            if let Some(body) = out.text.split_once("\r\n\r\n").map(|(_, b)| b) {
                assert!(
                    !out.text.contains("content-length: 10\r\n") || body.len() < 10,
                    "{label}: {}",
                    out.text
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_origins_early_hints_reach_an_http11_visitor_before_its_answer() {
    let answer = b"HTTP/1.1 100 Continue\r\n\r\n\
        HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\
        Connection: x-hop\r\nX-Hop: 1\r\n\r\n\
        HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    let (edge, _agent, _origin, url) = preview_answering(answer).await;
    let host = host_of(&url);
    let asked = format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    let out = exchange(edge.http, asked.as_bytes()).await;
    // The origin's own 100 is not passed on: the edge answers Expect itself.
    assert_eq!(out.statuses(), [103, 200], "{}", out.text);
    let (hints, answer) = out
        .text
        .split_once("HTTP/1.1 200 OK\r\n")
        .expect("the answer");
    let hints = hints.to_ascii_lowercase();
    assert!(hints.starts_with("http/1.1 103 early hints\r\n"), "{hints}");
    assert!(
        hints.contains("\r\nlink: </style.css>; rel=preload\r\n"),
        "{hints}"
    );
    assert!(
        !hints.contains("x-hop") && !hints.contains("connection"),
        "{hints}"
    );
    assert!(answer.ends_with("\r\n\r\nok"), "{answer}");
    // An HTTP/1.0 visitor takes no interim answer; neither does one over
    // HTTP/2 (hyper's server sends none).
    let old = format!("GET / HTTP/1.0\r\nHost: {host}\r\n\r\n");
    let out = exchange(edge.http, old.as_bytes()).await;
    assert!(out.text.starts_with("HTTP/1.0 200 OK\r\n"), "{}", out.text);
    assert!(!out.text.contains(" 103 "), "{}", out.text);
    let out = curl(&edge.ca(), &["--http2", &format!("{url}/")]).await;
    assert_eq!((out.status, out.text()), (200, "ok".to_owned()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn location_points_where_the_origin_pointed_it() {
    for location in [
        "http://localhost:3000/next",
        "/relative?x=1",
        "https://example.com/elsewhere",
    ] {
        let answer =
            format!("HTTP/1.1 302 Found\r\nLocation: {location}\r\nContent-Length: 0\r\n\r\n");
        let (edge, _agent, _origin, url) = preview_answering(answer.as_bytes()).await;
        let out = curl(
            &edge.ca(),
            &[
                "-H",
                "X-Forwarded-Host: evil.example",
                "-H",
                "Forwarded: host=evil.example",
                &format!("{url}/"),
            ],
        )
        .await;
        assert_eq!(out.status, 302);
        assert_eq!(out.header("location"), Some(location));
    }
}

/// A hand-made dev server that keeps its connections alive and slips: its
/// `204`, its `304` and its answer to a `HEAD` carry five body bytes
/// (`hello`) they must not have. Any other request gets `200` with its
/// method and path as the body. Each request's line is recorded.
struct SlippingOrigin {
    port: u16,
    lines: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for SlippingOrigin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl SlippingOrigin {
    async fn start() -> SlippingOrigin {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind origin");
        let port = listener.local_addr().expect("addr").port();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let record = lines.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(Self::serve(stream, record.clone()));
            }
        });
        SlippingOrigin { port, lines, task }
    }

    async fn serve(mut stream: tokio::net::TcpStream, record: Arc<Mutex<Vec<String>>>) {
        use tokio::io::AsyncWriteExt;
        let mut buffered = Vec::new();
        while let Some(request) = next_request(&mut stream, &mut buffered).await {
            let head = String::from_utf8_lossy(&request);
            let line = head.lines().next().unwrap_or_default().to_owned();
            record.lock().expect("record").push(line.clone());
            let mut parts = line.split(' ');
            let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            let answer = match (method, path) {
                (_, "/nothing") => {
                    b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\nhello".to_vec()
                }
                (_, "/unchanged") => {
                    b"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\nhello".to_vec()
                }
                ("HEAD", _) => b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello".to_vec(),
                _ => {
                    let body = format!("{method} {path}");
                    format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    )
                    .into_bytes()
                }
            };
            if stream.write_all(&answer).await.is_err() {
                return;
            }
        }
    }

    /// How many requests with this request line the origin received.
    fn received(&self, line: &str) -> usize {
        let lines = self.lines.lock().expect("record");
        lines.iter().filter(|l| l.as_str() == line).count()
    }
}

/// The slips that answer a request at its head while more bytes follow.
const SLIPS: [(&str, &str, u16); 3] = [
    ("GET", "/nothing", 204),
    ("GET", "/unchanged", 304),
    ("HEAD", "/", 200),
];

/// A visitor is served its answer; the next request, from a new visitor
/// connection, is answered by the origin's own answer to it, not by the
/// bytes the slip left behind (which made it a 502 "invalid HTTP version"
/// although the origin had answered it, a POST's write done).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_after_an_answer_never_reach_the_next_visitor() {
    let edge = TestEdge::start().await;
    let agent = TestAgent::start(&edge, "alice").await;
    let origin = SlippingOrigin::start().await;
    let url = agent.preview(origin.port, None).await.url;
    for (i, (method, path, status)) in SLIPS.iter().enumerate() {
        for version in ["--http1.1", "--http2"] {
            let slip_url = format!("{url}{path}");
            let mut args = vec![version, "-X", method, &slip_url];
            if *method == "HEAD" {
                args.insert(1, "-I");
            }
            let out = curl(&edge.ca(), &args).await;
            assert_eq!(out.status, *status, "{method} {path} {version}: {out:?}");
            assert!(out.body.is_empty() || *method == "HEAD", "{out:?}");
            // Another visitor, another connection: a POST, answered once.
            let post_url = format!("{url}/write-{i}{version}");
            let out = curl(&edge.ca(), &[version, "-d", "x=1", &post_url]).await;
            let post_line = format!("POST /write-{i}{version} HTTP/1.1");
            assert_eq!(
                (out.status, out.text()),
                (200, format!("POST /write-{i}{version}")),
                "after {method} {path} {version}"
            );
            assert_eq!(origin.received(&post_line), 1, "{post_line}");
        }
    }
}

/// The same on one visitor connection kept alive: each answer is the
/// origin's answer to that request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_after_an_answer_never_reach_the_next_request_of_the_same_visitor() {
    let edge = TestEdge::start().await;
    let agent = TestAgent::start(&edge, "alice").await;
    let origin = SlippingOrigin::start().await;
    let name = agent.preview(origin.port, None).await.name;
    let host = format!("{name}.{DOMAIN}");
    let mut sender = h1_client(edge.http).await;
    for (i, (method, path, status)) in SLIPS.iter().enumerate() {
        for (method, path, status) in [
            (*method, path.to_string(), *status),
            ("POST", format!("/write-{i}"), 200),
        ] {
            let req = http::Request::builder()
                .method(method)
                .uri(path.as_str())
                .header(http::header::HOST, &host)
                .body(http_body_util::Full::new(bytes::Bytes::from_static(b"x=1")))
                .expect("request");
            sender
                .ready()
                .await
                .expect("the visitor's connection goes on");
            let response = sender.send_request(req).await.expect("answered");
            assert_eq!(response.status(), status, "{method} {path}");
            let body = http_body_util::BodyExt::collect(response.into_body())
                .await
                .expect("body")
                .to_bytes();
            let want = if status == 200 && method != "HEAD" {
                format!("{method} {path}")
            } else {
                String::new()
            };
            assert_eq!(String::from_utf8_lossy(&body), want, "{method} {path}");
        }
        assert_eq!(origin.received(&format!("POST /write-{i} HTTP/1.1")), 1);
    }
}
