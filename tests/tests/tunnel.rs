//! A visitor's view of the tunnel: curl (and a WebSocket client) against
//! the edge, an origin behind an agent.

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use calvin_agent::api::ApiError;
use calvin_tests::*;
use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_over_https_and_plain_http() {
    let s = PreviewSetup::start().await;
    let out = curl(&s.edge.ca(), &[&s.url("/hello")]).await;
    assert_eq!(out.status, 200, "{out:?}");
    assert_eq!(out.text(), "hello from origin\n");

    let out = curl(
        &s.edge.ca(),
        &[&format!("{}/hello", s.edge.http_url(&s.created.name))],
    )
    .await;
    assert_eq!(out.status, 200, "{out:?}");
    assert_eq!(out.text(), "hello from origin\n");
    assert_eq!(out.http_version, "1.1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_from_curl() {
    let s = PreviewSetup::start().await;
    let out = curl(&s.edge.ca(), &["--http2", &s.url("/hello")]).await;
    assert_eq!(out.status, 200, "{out:?}");
    assert_eq!(out.http_version, "2");
    assert_eq!(out.text(), "hello from origin\n");
    let out = curl(&s.edge.ca(), &["--http1.1", &s.url("/hello")]).await;
    assert_eq!(out.http_version, "1.1");
    assert_eq!(out.text(), "hello from origin\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn download_64_mib_byte_identical() {
    let s = PreviewSetup::start().await;
    const LEN: usize = 64 << 20;
    for version in ["--http1.1", "--http2"] {
        let out = curl(&s.edge.ca(), &[version, &s.url(&format!("/bytes/{LEN}"))]).await;
        assert_eq!(out.status, 200, "{version}: {}", out.stderr);
        assert_eq!(out.body.len(), LEN, "{version}");
        assert!(out.body == pattern_bytes(LEN), "{version}: bytes differ");
    }
}

fn upload_file(len: usize) -> (tempfile::NamedTempFile, Vec<u8>) {
    // Not the origin's pattern, so an echo cannot be mistaken for a download.
    let data: Vec<u8> = (0..len).map(|i| (i * 7 + i / 251) as u8).collect();
    let mut file = tempfile::NamedTempFile::new().expect("temp file");
    file.write_all(&data).expect("write");
    (file, data)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_10_mib_echo_and_chunked_upload_byte_identical() {
    let s = PreviewSetup::start().await;
    let (file, data) = upload_file(10 << 20);
    let at_file = format!("@{}", file.path().display());

    let out = curl(&s.edge.ca(), &["--data-binary", &at_file, &s.url("/echo")]).await;
    assert_eq!(out.status, 200, "{}", out.stderr);
    assert!(
        out.body == data,
        "echo differs ({} bytes back)",
        out.body.len()
    );

    // Chunked, over HTTP/1.1 and as an HTTP/2 stream of unknown length.
    for version in ["--http1.1", "--http2"] {
        let out = curl(
            &s.edge.ca(),
            &[
                version,
                "-H",
                "Transfer-Encoding: chunked",
                "--data-binary",
                &at_file,
                &s.url("/sha256"),
            ],
        )
        .await;
        assert_eq!(out.status, 200, "{version}: {}", out.stderr);
        assert_eq!(
            out.text(),
            format!("{} {}\n", sha256_hex(&data), data.len()),
            "{version}"
        );
    }
    let out = curl(
        &s.edge.ca(),
        &[
            "-H",
            "Transfer-Encoding: chunked",
            "--data-binary",
            &at_file,
            &s.url("/echo"),
        ],
    )
    .await;
    assert!(out.body == data, "chunked echo differs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_arrive_when_written_whatever_the_content_type() {
    let s = PreviewSetup::start().await;
    for (version, query) in [
        ("--http1.1", ""),
        ("--http2", ""),
        ("--http1.1", "?type=application%2Foctet-stream"),
        ("--http2", "?type=text%2Fplain"),
    ] {
        let url = s.url(&format!("/events{query}"));
        let arrivals = event_arrivals(&s.edge.ca(), &[version, &url]).await;
        let lines: Vec<&str> = arrivals.iter().map(|(l, _)| l.as_str()).collect();
        assert_eq!(
            lines,
            ["data: event 0", "data: event 1", "data: event 2"],
            "{version} {query}"
        );
        for pair in arrivals.windows(2) {
            let gap = pair[1].1 - pair[0].1;
            assert!(
                gap >= Duration::from_millis(200) && gap <= Duration::from_millis(450),
                "{version} {query}: events 300 ms apart arrived {gap:?} apart: {arrivals:?}"
            );
        }
    }
}

fn tls_client(ca: &std::path::Path) -> tokio_rustls::TlsConnector {
    tokio_rustls::TlsConnector::from(Arc::new(tls_client_config(ca, &[])))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_echo_of_a_70_kb_binary_frame() {
    let s = PreviewSetup::start().await;
    let host = format!("{}.{DOMAIN}", s.created.name);
    let frame: Vec<u8> = (0..70_000u32).map(|i| (i % 253) as u8).collect();

    // Over HTTPS...
    let tcp = tokio::net::TcpStream::connect(s.edge.https)
        .await
        .expect("tcp");
    let server_name = rustls_pki_types::ServerName::try_from(host.clone()).expect("name");
    let tls = tls_client(&s.edge.ca())
        .connect(server_name, tcp)
        .await
        .expect("tls");
    let url = format!("wss://{host}:{}/ws", s.edge.https.port());
    let (mut ws, response) = tokio_tungstenite::client_async(url, tls)
        .await
        .expect("websocket handshake through the edge");
    assert_eq!(response.status(), 101);
    ws.send(Message::binary(frame.clone())).await.expect("send");
    let echoed = ws.next().await.expect("an answer").expect("a frame");
    assert_eq!(echoed.into_data().as_ref(), frame.as_slice());
    ws.send(Message::text("and text")).await.expect("send");
    assert_eq!(
        ws.next()
            .await
            .expect("answer")
            .expect("frame")
            .into_text()
            .expect("text"),
        "and text"
    );
    ws.close(None).await.expect("close");

    // ...and plain HTTP.
    let tcp = tokio::net::TcpStream::connect(s.edge.http)
        .await
        .expect("tcp");
    let url = format!("ws://{host}:{}/ws", s.edge.http.port());
    let (mut ws, _) = tokio_tungstenite::client_async(url, tcp)
        .await
        .expect("ws over http");
    ws.send(Message::binary(frame.clone())).await.expect("send");
    let echoed = ws.next().await.expect("an answer").expect("a frame");
    assert_eq!(echoed.into_data().as_ref(), frame.as_slice());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarding_headers_are_the_edges_own() {
    let s = PreviewSetup::start().await;
    let out = curl(
        &s.edge.ca(),
        &[
            "-H",
            "X-Forwarded-For: 6.6.6.6",
            "-H",
            "X-Forwarded-Host: evil.example",
            "-H",
            "X-Forwarded-Proto: gopher",
            "-H",
            "Forwarded: for=6.6.6.6;host=evil.example",
            "-H",
            "Connection: X-Forwarded-For",
            "--http1.1",
            &s.url("/headers"),
        ],
    )
    .await;
    assert_eq!(out.status, 200);
    let headers: Vec<(String, String)> = serde_json::from_slice(&out.body).expect("json");
    let all = |name: &str| -> Vec<&str> {
        headers
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect()
    };
    let host = format!("{}.{DOMAIN}:{}", s.created.name, s.edge.https.port());
    assert_eq!(all("x-forwarded-for"), ["127.0.0.1"]);
    assert_eq!(all("x-forwarded-proto"), ["https"]);
    assert_eq!(all("x-forwarded-host"), [host.as_str()]);
    assert_eq!(
        all("forwarded"),
        [format!("for=127.0.0.1;host=\"{host}\";proto=https").as_str()]
    );
    assert_eq!(all("host"), [host.as_str()]);
    assert!(!out.text().contains("6.6.6.6") && !out.text().contains("evil.example"));

    let out = curl(
        &s.edge.ca(),
        &[
            "-H",
            "X-Forwarded-For: 6.6.6.6",
            &format!("{}/headers", s.edge.http_url(&s.created.name)),
        ],
    )
    .await;
    let headers: Vec<(String, String)> = serde_json::from_slice(&out.body).expect("json");
    let all = |name: &str| -> Vec<&str> {
        headers
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect()
    };
    assert_eq!(all("x-forwarded-for"), ["127.0.0.1"]);
    assert_eq!(all("x-forwarded-proto"), ["http"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_names_get_404_and_foreign_hosts_421() {
    let s = PreviewSetup::start().await;
    let out = curl(&s.edge.ca(), &[&s.edge.url("no-such-preview")]).await;
    assert_eq!(out.status, 404);
    assert_eq!(out.edge_text(), "no preview named no-such-preview\n");
    assert_eq!(
        out.header("content-type"),
        Some("text/plain; charset=utf-8")
    );

    let out = curl(
        &s.edge.ca(),
        &["-H", "Accept: text/html", &s.edge.url("no-such-preview")],
    )
    .await;
    assert_eq!(out.status, 404);
    assert_eq!(out.header("content-type"), Some("text/html; charset=utf-8"));
    assert!(
        out.text().contains("no preview named no-such-preview"),
        "{}",
        out.text()
    );

    // The bare domain, a deeper name and a foreign host are not previews.
    // (A deeper name is outside the wildcard certificate, so it is asked
    // over plain HTTP.)
    let (https, http) = (s.edge.https.port(), s.edge.http.port());
    for url in [
        format!("https://{DOMAIN}:{https}/"),
        format!("http://{DOMAIN}:{http}/"),
        format!("http://a.{}.{DOMAIN}:{http}/", s.created.name),
    ] {
        let out = curl(&s.edge.ca(), &[&url]).await;
        assert_eq!(out.status, 404, "{url}");
        assert!(
            out.text().starts_with("not a preview"),
            "{url}: {}",
            out.text()
        );
    }
    let out = curl(
        &s.edge.ca(),
        &[
            "-H",
            "Host: example.com",
            &format!("http://127.0.0.1:{http}/"),
        ],
    )
    .await;
    // A host under another domain is not this edge's to answer at all.
    assert_eq!(out.status, 421);
    assert!(
        out.text()
            .starts_with("misdirected request: example.com is not served here")
    );
    // And a name the same edge serves still works afterwards.
    let out = curl(&s.edge.ca(), &[&s.url("/hello")]).await;
    assert_eq!(out.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_port_says_so_then_serves_once_something_listens() {
    let edge = TestEdge::start().await;
    let agent = TestAgent::start(&edge, "alice").await;
    let silent = silent_port();
    let port = silent.port();
    let created = agent.preview(port, None).await;
    assert!(!created.listening);

    let out = curl(&edge.ca(), &[&created.url]).await;
    assert_eq!(out.status, 502);
    assert_eq!(
        out.edge_text(),
        format!(
            "preview {}: nothing is listening on port {port}\n",
            created.name
        )
    );
    assert_eq!(out.header("x-calvin-error"), Some("not-listening"));

    // A server starts on the port: the same URL serves, with no new preview.
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .expect("listen beside the held port");
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(|_req| async {
                    Ok::<_, std::convert::Infallible>(hyper::Response::new(
                        http_body_util::Full::new(bytes::Bytes::from_static(b"late server\n")),
                    ))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    let out = curl(&edge.ca(), &[&created.url]).await;
    assert_eq!(out.status, 200, "{out:?}");
    assert_eq!(out.text(), "late server\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn omitted_name_gives_the_ports_existing_name() {
    let edge = TestEdge::start().await;
    let agent = TestAgent::start(&edge, "alice").await;
    let origin = Origin::start().await;
    let first = agent.preview(origin.port, None).await;
    let again = agent.preview(origin.port, None).await;
    assert_eq!(again, first);

    // A generated name is one readable DNS label.
    let parts: Vec<&str> = first.name.split('-').collect();
    assert_eq!(parts.len(), 3, "{}", first.name);
    assert!(first.name.len() <= 63);

    // Another port gets another name.
    let silent = silent_port();
    let other = agent.preview(silent.port(), None).await;
    assert_ne!(other.name, first.name);

    // A chosen name is used, case-folded, and both names serve the port.
    let named = agent.preview(origin.port, Some("My-App")).await;
    assert_eq!(named.name, "my-app");
    assert_eq!(named.url, edge.url("my-app"));
    for url in [&first.url, &named.url] {
        let out = curl(&edge.ca(), &[&format!("{url}/hello")]).await;
        assert_eq!(out.status, 200, "{url}");
    }
}

async fn api_error(answer: calvin_agent::control_client::Answer) -> (u16, ApiError) {
    let status = answer.status.as_u16();
    let err: ApiError = serde_json::from_slice(&answer.body).expect("error json");
    (status, err)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_names_and_ports_are_refused_with_their_own_message() {
    let edge = TestEdge::start().await;
    let agent = TestAgent::start(&edge, "alice").await;
    let silent = silent_port();
    let port = silent.port();

    let at_limit = "a".repeat(63);
    assert_eq!(agent.preview(port, Some(&at_limit)).await.name, at_limit);
    let past = "a".repeat(64);
    let (status, err) = api_error(agent.try_preview(port.into(), Some(&past)).await).await;
    assert_eq!((status, err.code.as_str()), (400, "invalid_name"));
    assert_eq!(
        err.error,
        "invalid name: a preview name is at most 63 characters (one DNS label); got 64"
    );

    for (name, needle) in [
        ("bad_name", "'_' is not allowed"),
        ("-lead", "cannot start or end with a hyphen"),
        ("trail-", "cannot start or end with a hyphen"),
        ("a.b", "'.' is not allowed"),
        ("", "cannot be empty"),
    ] {
        let (status, err) = api_error(agent.try_preview(port.into(), Some(name)).await).await;
        assert_eq!(status, 400, "{name:?}");
        assert_eq!(err.code, "invalid_name", "{name:?}");
        assert!(err.error.contains(needle), "{name:?}: {}", err.error);
    }

    assert_eq!(agent.preview(1, Some("port-one")).await.name, "port-one");
    assert_eq!(
        agent.preview(65535, Some("port-max")).await.name,
        "port-max"
    );
    for bad in [0i64, 65536, -1] {
        let (status, err) = api_error(agent.try_preview(bad, None).await).await;
        assert_eq!((status, err.code.as_str()), (400, "invalid_port"), "{bad}");
        assert_eq!(err.error, format!("port must be 1 to 65535; got {bad}"));
    }

    // Nothing invalid was registered.
    let list = agent.list().await;
    let names: Vec<&str> = list.previews.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, [at_limit.as_str(), "port-max", "port-one"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_accounts_cannot_share_a_name() {
    let edge = TestEdge::start().await;
    let alice = TestAgent::start(&edge, "alice").await;
    let bob = TestAgent::start(&edge, "bob").await;
    let origin = Origin::start().await;
    alice.preview(origin.port, Some("shared")).await;

    let (status, err) = api_error(bob.try_preview(origin.port.into(), Some("shared")).await).await;
    assert_eq!((status, err.code.as_str()), (409, "name_taken"));
    assert_eq!(err.error, "the name shared belongs to another account");

    // Taken down, the name stays alice's: bob still cannot have it...
    alice.client().unpreview("shared").await.expect("unpreview");
    let (status, _) = api_error(bob.try_preview(origin.port.into(), Some("shared")).await).await;
    assert_eq!(status, 409);
    // ...and alice can, from another agent of hers.
    let alice2 = TestAgent::start(&edge, "alice").await;
    alice2.preview(origin.port, Some("shared")).await;
    let out = curl(&edge.ca(), &[&format!("{}/hello", edge.url("shared"))]).await;
    assert_eq!(out.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unpreview_takes_the_url_down() {
    let s = PreviewSetup::start().await;
    let out = curl(&s.edge.ca(), &[&s.url("/hello")]).await;
    assert_eq!(out.status, 200);

    let answer = s
        .agent
        .client()
        .unpreview(&s.created.name)
        .await
        .expect("unpreview");
    assert_eq!(answer.status, 200);
    let out = curl(&s.edge.ca(), &[&s.url("/hello")]).await;
    assert_eq!(out.status, 404);
    assert_eq!(
        out.edge_text(),
        format!("no preview named {}\n", s.created.name)
    );

    let (status, err) = api_error(
        s.agent
            .client()
            .unpreview(&s.created.name)
            .await
            .expect("answer"),
    )
    .await;
    assert_eq!((status, err.code.as_str()), (404, "unknown_name"));
    assert_eq!(err.error, format!("no preview named {}", s.created.name));
    let list = s.agent.list().await;
    assert!(list.previews.is_empty());
    drop(s.origin);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_agent_reads_offline() {
    let s = PreviewSetup::start().await;
    s.agent.stop().await;
    let ca = s.edge.ca();
    let url = s.created.url.clone();
    let out = eventually(Duration::from_secs(5), || {
        let (ca, url) = (ca.clone(), url.clone());
        async move {
            let out = curl(&ca, &[&url]).await;
            (out.status == 502).then_some(out)
        }
    })
    .await
    .expect("502 once the agent is gone");
    assert_eq!(out.header("x-calvin-error"), Some("agent-offline"));
    assert_eq!(
        out.edge_text(),
        format!(
            "preview {} is offline: the computer serving it is not connected\n",
            s.created.name
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_origin_gets_504() {
    let edge = TestEdge::start_with(EdgeOptions {
        limits: calvin_edge::Limits {
            upstream_timeout_secs: 1,
            ..Default::default()
        },
        ..Default::default()
    })
    .await;
    let agent = TestAgent::start(&edge, "alice").await;
    let origin = Origin::start().await;
    let created = agent.preview(origin.port, Some("slow")).await;
    let started = Instant::now();
    let out = curl(&edge.ca(), &[&format!("{}/slow?ms=3000", created.url)]).await;
    assert_eq!(out.status, 504);
    assert!(
        started.elapsed() < Duration::from_millis(2500),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        out.edge_text(),
        format!(
            "preview slow: the server on port {} did not answer within 1 s\n",
            origin.port
        )
    );
    let out = curl(&edge.ca(), &[&format!("{}/slow?ms=100", created.url)]).await;
    assert_eq!(out.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ls_lists_names_ports_and_urls() {
    let s = PreviewSetup::start().await;
    let list = s.agent.list().await;
    assert!(list.connected);
    assert_eq!(list.previews.len(), 1);
    assert_eq!(list.previews[0].name, s.created.name);
    assert_eq!(list.previews[0].port, s.origin.port);
    assert_eq!(list.previews[0].url, s.created.url);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_given_again_with_another_port_moves_there() {
    let edge = TestEdge::start().await;
    let agent = TestAgent::start(&edge, "alice").await;
    let first = Origin::start().await;
    let silent = silent_port();
    let created = agent.preview(silent.port(), Some("moving")).await;
    assert!(!created.listening);
    let moved = agent.preview(first.port, Some("moving")).await;
    assert_eq!(moved.url, created.url);
    assert!(moved.listening);
    let out = curl(&edge.ca(), &[&format!("{}/hello", moved.url)]).await;
    assert_eq!(out.status, 200, "{out:?}");
    let list = agent.list().await;
    assert_eq!(list.previews.len(), 1);
    assert_eq!(list.previews[0].port, first.port);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preview_without_an_edge_is_a_clear_503() {
    let state = tempfile::tempdir().expect("tempdir");
    let edge = TestEdge::start_with(EdgeOptions {
        state_dir: Some(state.path().join("edge")),
        ..Default::default()
    })
    .await;
    let quic = edge.quic;
    let ca = edge.ca();
    edge.stop().await;
    let agent = TestAgent::spawn_to(quic, &ca, &token_for("alice")).await;
    let answer = agent.try_preview(8000, None).await;
    let (status, err) = api_error(answer).await;
    assert_eq!((status, err.code.as_str()), (503, "not_connected"));
    assert!(
        err.error
            .starts_with(&format!("not connected to the edge at {quic}")),
        "{}",
        err.error
    );
}

async fn get_text<B>(sender: &mut B, host: &str, path: &str, h2: bool) -> (u16, String)
where
    B: SendsRequests,
{
    use http_body_util::BodyExt;
    let mut req = http::Request::builder().uri(path);
    req = if h2 {
        req.uri(format!("https://{host}{path}"))
    } else {
        req.header(http::header::HOST, host)
    };
    let req = req
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .expect("request");
    let response = sender.send(req).await;
    let status = response.status().as_u16();
    let id = response.headers().contains_key("x-calvin-error").then(|| {
        response.headers()["x-request-id"]
            .to_str()
            .expect("id")
            .to_owned()
    });
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    let text = String::from_utf8_lossy(&body).into_owned();
    // The edge's own answers end naming their id; that line is checked
    // here and left out.
    match id {
        Some(id) => {
            let message = text
                .strip_suffix(&format!("request id: {id}\n"))
                .unwrap_or_else(|| panic!("no request id line: {text:?}"));
            (status, message.to_owned())
        }
        None => (status, text),
    }
}

/// hyper's HTTP/1 and HTTP/2 senders, for one test helper.
trait SendsRequests {
    fn send(
        &mut self,
        req: http::Request<http_body_util::Empty<bytes::Bytes>>,
    ) -> impl std::future::Future<Output = http::Response<hyper::body::Incoming>>;
}

impl SendsRequests
    for hyper::client::conn::http1::SendRequest<http_body_util::Empty<bytes::Bytes>>
{
    async fn send(
        &mut self,
        req: http::Request<http_body_util::Empty<bytes::Bytes>>,
    ) -> http::Response<hyper::body::Incoming> {
        // The previous exchange may still be retiring on this connection.
        self.ready().await.expect("connection ready");
        self.send_request(req).await.expect("response")
    }
}

impl SendsRequests
    for hyper::client::conn::http2::SendRequest<http_body_util::Empty<bytes::Bytes>>
{
    async fn send(
        &mut self,
        req: http::Request<http_body_util::Empty<bytes::Bytes>>,
    ) -> http::Response<hyper::body::Incoming> {
        // The previous exchange may still be retiring on this connection.
        self.ready().await.expect("connection ready");
        self.send_request(req).await.expect("response")
    }
}

/// Browsers reuse one HTTP/2 connection for every name under a wildcard
/// certificate, and keep-alive HTTP/1.1 clients may change Host between
/// requests: each request is routed by its own authority.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_request_is_routed_by_its_own_host() {
    let edge = TestEdge::start().await;
    let agent = TestAgent::start(&edge, "alice").await;
    let origin = Origin::start().await;
    let silent = silent_port();
    let port = silent.port();
    agent.preview(origin.port, Some("live")).await;
    agent.preview(port, Some("quiet")).await;
    let live = format!("live.{DOMAIN}:{}", edge.https.port());
    let quiet = format!("quiet.{DOMAIN}:{}", edge.https.port());
    let quiet_text = format!("preview quiet: nothing is listening on port {port}\n");

    // One HTTP/2 connection, opened for the first name.
    let mut h2 = h2_client(edge.https, &edge.ca(), &format!("live.{DOMAIN}")).await;
    for _ in 0..2 {
        assert_eq!(
            get_text(&mut h2, &live, "/hello", true).await,
            (200, "hello from origin\n".into())
        );
        assert_eq!(
            get_text(&mut h2, &quiet, "/hello", true).await,
            (502, quiet_text.clone())
        );
        let (status, text) = get_text(&mut h2, &format!("nope.{DOMAIN}"), "/", true).await;
        assert_eq!((status, text.as_str()), (404, "no preview named nope\n"));
    }

    // One HTTP/1.1 keep-alive connection whose Host changes.
    let mut h1 = h1_client(edge.http).await;
    let live = format!("live.{DOMAIN}");
    let quiet = format!("quiet.{DOMAIN}");
    for _ in 0..2 {
        assert_eq!(
            get_text(&mut h1, &live, "/hello", false).await,
            (200, "hello from origin\n".into())
        );
        assert_eq!(
            get_text(&mut h1, &quiet, "/hello", false).await,
            (502, quiet_text.clone())
        );
    }
}
