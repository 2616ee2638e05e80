//! Hostile HTTP/1 at the edge: ambiguous framing, requests hidden in
//! bodies, and upgrades, sent as raw bytes. Whatever the edge refuses never
//! reaches the origin (the recording origin counts every connection its
//! agent opens); whatever it passes on is canonical HTTP/1.1.

use std::time::Duration;

use calvin_tests::*;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

struct Live {
    edge: TestEdge,
    _agent: TestAgent,
    origin: RawOrigin,
    host: String,
}

async fn live_with(origin: RawOrigin) -> Live {
    let edge = TestEdge::start().await;
    let agent = TestAgent::start(&edge, "alice").await;
    let created = agent.preview(origin.port, None).await;
    let host = format!("{}.{DOMAIN}", created.name);
    Live {
        edge,
        _agent: agent,
        origin,
        host,
    }
}

async fn live() -> Live {
    live_with(RawOrigin::start().await).await
}

/// Requests whose framing is ambiguous or malformed, and the status each
/// gets.
const AMBIGUOUS: &[(&str, &str, u16)] = &[
    (
        "Content-Length and Transfer-Encoding",
        "POST / HTTP/1.1\r\nHost: H\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        400,
    ),
    (
        "Transfer-Encoding then Content-Length",
        "POST / HTTP/1.1\r\nHost: H\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n",
        400,
    ),
    (
        "chunked, chunked",
        "POST / HTTP/1.1\r\nHost: H\r\nTransfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n",
        400,
    ),
    (
        "two chunked lines",
        "POST / HTTP/1.1\r\nHost: H\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        400,
    ),
    (
        "chunked not last",
        "POST / HTTP/1.1\r\nHost: H\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n",
        400,
    ),
    (
        "xchunked",
        "POST / HTTP/1.1\r\nHost: H\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n",
        400,
    ),
    (
        "gzip, chunked",
        "POST / HTTP/1.1\r\nHost: H\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
        501,
    ),
    (
        "space before the colon",
        "POST / HTTP/1.1\r\nHost: H\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n",
        400,
    ),
    (
        "vertical tab before chunked",
        "POST / HTTP/1.1\r\nHost: H\r\nTransfer-Encoding: \x0bchunked\r\n\r\n0\r\n\r\n",
        400,
    ),
    (
        "two different Content-Lengths",
        "POST / HTTP/1.1\r\nHost: H\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nabc",
        400,
    ),
    (
        "two equal Content-Lengths",
        "POST / HTTP/1.1\r\nHost: H\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nab",
        400,
    ),
    (
        "Content-Length list",
        "POST / HTTP/1.1\r\nHost: H\r\nContent-Length: 2, 2\r\n\r\nab",
        400,
    ),
    (
        "Content-Length +2",
        "POST / HTTP/1.1\r\nHost: H\r\nContent-Length: +2\r\n\r\nab",
        400,
    ),
    (
        "Content-Length -2",
        "POST / HTTP/1.1\r\nHost: H\r\nContent-Length: -2\r\n\r\nab",
        400,
    ),
    (
        "Content-Length 0x2",
        "POST / HTTP/1.1\r\nHost: H\r\nContent-Length: 0x2\r\n\r\nab",
        400,
    ),
    (
        "Content-Length 1 1",
        "POST / HTTP/1.1\r\nHost: H\r\nContent-Length: 1 1\r\n\r\nab",
        400,
    ),
    (
        "Content-Length past u64",
        "POST / HTTP/1.1\r\nHost: H\r\nContent-Length: 99999999999999999999999\r\n\r\nab",
        400,
    ),
    (
        "empty Content-Length",
        "POST / HTTP/1.1\r\nHost: H\r\nContent-Length: \r\n\r\nab",
        400,
    ),
    (
        "HTTP/1.0 with Transfer-Encoding",
        "POST / HTTP/1.0\r\nHost: H\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        400,
    ),
    (
        "bare CR in a value",
        "GET / HTTP/1.1\r\nHost: H\r\nX-A: a\rb\r\n\r\n",
        400,
    ),
    (
        "bare CR ending a line",
        "GET / HTTP/1.1\r\nHost: H\rX-A: b\r\n\r\n",
        400,
    ),
    (
        "NUL in a value",
        "GET / HTTP/1.1\r\nHost: H\r\nX-A: a\0b\r\n\r\n",
        400,
    ),
    (
        "empty header name",
        "GET / HTTP/1.1\r\nHost: H\r\n: b\r\n\r\n",
        400,
    ),
    (
        "space in a header name",
        "GET / HTTP/1.1\r\nHost: H\r\nX A: b\r\n\r\n",
        400,
    ),
    (
        "folded header line",
        "GET / HTTP/1.1\r\nHost: H\r\nX-A: a\r\n b\r\n\r\n",
        400,
    ),
    (
        "chunk size zz",
        "POST / HTTP/1.1\r\nHost: H\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nab\r\n0\r\n\r\n",
        400,
    ),
    (
        "chunk size -1",
        "POST / HTTP/1.1\r\nHost: H\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\nab\r\n0\r\n\r\n",
        400,
    ),
    (
        "chunk size past u64",
        "POST / HTTP/1.1\r\nHost: H\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffffff\r\nab\r\n0\r\n\r\n",
        400,
    ),
    (
        "chunk longer than its size",
        "POST / HTTP/1.1\r\nHost: H\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabXX0\r\n\r\n",
        400,
    ),
    (
        "chunk size 2 2",
        "POST / HTTP/1.1\r\nHost: H\r\nTransfer-Encoding: chunked\r\n\r\n2 2\r\nab\r\n0\r\n\r\n",
        400,
    ),
    (
        "chunk size 0x2",
        "POST / HTTP/1.1\r\nHost: H\r\nTransfer-Encoding: chunked\r\n\r\n0x2\r\nab\r\n0\r\n\r\n",
        400,
    ),
    (
        "chunk size line ending in a bare LF",
        "POST / HTTP/1.1\r\nHost: H\r\nTransfer-Encoding: chunked\r\n\r\n2\nab\r\n0\r\n\r\n",
        400,
    ),
    (
        "chunk data ending in a bare LF",
        "POST / HTTP/1.1\r\nHost: H\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\n0\r\n\r\n",
        400,
    ),
    (
        "last chunk ending in a bare LF",
        "POST / HTTP/1.1\r\nHost: H\r\nTransfer-Encoding: chunked\r\n\r\n0\n\r\n",
        400,
    ),
    (
        "Transfer-Encoding folded onto a second line",
        "POST / HTTP/1.1\r\nHost: H\r\nTransfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n",
        400,
    ),
    (
        "a tab before the colon of Transfer-Encoding",
        "POST / HTTP/1.1\r\nHost: H\r\nTransfer-Encoding\t: chunked\r\n\r\n0\r\n\r\n",
        400,
    ),
    (
        "Transfer-Encoding chunked then a tab and more",
        "POST / HTTP/1.1\r\nHost: H\r\nTransfer-Encoding: chunked\t,identity\r\n\r\n0\r\n\r\n",
        400,
    ),
    (
        "NUL in a header name",
        "GET / HTTP/1.1\r\nHost: H\r\nX\0A: b\r\n\r\n",
        400,
    ),
    (
        "a control character in a header value",
        "GET / HTTP/1.1\r\nHost: H\r\nX-A: a\x01b\r\n\r\n",
        400,
    ),
    (
        "a chunk extension past the bound",
        "POST / HTTP/1.1\r\nHost: H\r\nTransfer-Encoding: chunked\r\n\r\n2;EXTENSION\r\nab\r\n0\r\n\r\n",
        400,
    ),
];

/// A request in [`AMBIGUOUS`], its placeholders filled: `Host: H` names
/// the preview, `EXTENSION` is a chunk extension one byte past the bound.
fn filled(request: &str, host: &str) -> String {
    let extension = format!("x={}", "e".repeat(4096));
    request
        .replace("Host: H", &format!("Host: {host}"))
        .replace("EXTENSION", &extension)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ambiguous_framing_gets_400_and_close_before_any_stream() {
    let l = live().await;
    for (label, request, status) in AMBIGUOUS {
        let request = filled(request, &l.host);
        let out = exchange(l.edge.http, request.as_bytes()).await;
        assert_eq!(out.statuses(), [*status], "{label}: {}", out.text);
        assert!(out.closed, "{label}: the connection stays open");
        assert!(
            out.text.contains("connection: close\r\n") && out.text.contains("x-calvin-error: "),
            "{label}: {}",
            out.text
        );
    }
    assert_eq!(
        l.origin.connections(),
        0,
        "a refused request reached the agent"
    );

    // The same over HTTPS (HTTP/1.1 by ALPN).
    let request = format!(
        "POST / HTTP/1.1\r\nHost: {}\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        l.host
    );
    let mut tls = tls_h1(l.edge.https, &l.edge.ca(), &l.host).await;
    tls.write_all(request.as_bytes()).await.expect("write");
    let out = read_all(&mut tls).await;
    assert_eq!(out.statuses(), [400], "{}", out.text);
    assert!(
        out.text
            .contains("the request has both Content-Length and Transfer-Encoding"),
        "{}",
        out.text
    );
    assert!(out.closed);
    assert_eq!(l.origin.connections(), 0);

    // A well-formed request on the same edge does reach it.
    let out = exchange(
        l.edge.http,
        format!("GET / HTTP/1.1\r\nHost: {}\r\n\r\n", l.host).as_bytes(),
    )
    .await;
    assert_eq!(out.statuses(), [200], "{}", out.text);
    assert_eq!(l.origin.connections(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_reaches_the_origin_is_canonical_http_1_1() {
    let l = live().await;
    // The edge's request id (16 hex digits) stands as ID.
    let forwarded = |host: &str| {
        format!(
            "host: {host}\r\nx-request-id: ID\r\nx-forwarded-for: 127.0.0.1\r\n\
             x-forwarded-proto: http\r\nx-forwarded-host: {host}\r\n\
             forwarded: for=127.0.0.1;host=\"{host}\";proto=http\r\n"
        )
    };
    let with_id_as_id = |request: &str| -> String {
        let (before, after) = request
            .split_once("x-request-id: ")
            .unwrap_or_else(|| panic!("no request id: {request}"));
        let (id, rest) = after.split_at(16);
        assert!(id.bytes().all(|b| b.is_ascii_hexdigit()), "{request}");
        format!("{before}x-request-id: ID{rest}")
    };
    let h = &l.host;
    let cases = [
        (
            "an upper-case coding, a tab, chunk extensions and a trailer",
            format!(
                "POST /up HTTP/1.1\r\nHOST: {h}\r\nTransfer-Encoding:\tChunked\r\n\r\n\
                 2;name=value\r\nab\r\n1\r\nc\r\n0\r\nX-Trailer: t\r\n\r\n"
            ),
            format!(
                "POST /up HTTP/1.1\r\n{}transfer-encoding: chunked\r\n\r\n2\r\nab\r\n1\r\nc\r\n0\r\n\r\n",
                forwarded(h)
            ),
        ),
        (
            "bare LF line ends and padded values",
            format!("GET /lf HTTP/1.1\nHost: {h}\nX-Padded:   v  \n\n"),
            format!("GET /lf HTTP/1.1\r\nhost: {h}\r\nx-padded: v\r\n{}\r\n", {
                let f = forwarded(h);
                f.replacen(&format!("host: {h}\r\n"), "", 1)
            }),
        ),
    ];
    for (label, sent, expected) in cases {
        let before = l.origin.requests().len();
        let out = exchange(l.edge.http, sent.as_bytes()).await;
        assert_eq!(out.statuses(), [200], "{label}: {}", out.text);
        let requests = l.origin.requests();
        assert_eq!(requests.len(), before + 1, "{label}");
        assert_eq!(
            with_id_as_id(&String::from_utf8_lossy(&requests[before])),
            expected,
            "{label}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_request_after_good_ones_is_refused_alone() {
    let l = live().await;
    let h = &l.host;
    let pipelined = format!(
        "GET /first HTTP/1.1\r\nHost: {h}\r\n\r\n\
         POST /second HTTP/1.1\r\nHost: {h}\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n\r\n\
         GET /third HTTP/1.1\r\nHost: {h}\r\n\r\n"
    );
    let out = exchange(l.edge.http, pipelined.as_bytes()).await;
    assert_eq!(out.statuses(), [200, 400], "{}", out.text);
    assert!(
        out.text
            .contains("a chunk size is not a hexadecimal number")
    );
    assert!(out.closed);
    let requests = l.origin.requests();
    assert_eq!(requests.len(), 1);
    assert!(requests[0].starts_with(b"GET /first "));
    assert_eq!(l.origin.connections(), 1);
}

/// A request written after one that said `Connection: close` is never
/// read: the first is answered, the connection closes, and the second
/// reaches nothing (an origin that keeps its connection open must not see
/// it either).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_written_after_connection_close_never_runs() {
    let l = live().await;
    let h = &l.host;
    for first in [
        format!("GET /first HTTP/1.1\r\nHost: {h}\r\nConnection: close\r\n\r\n"),
        format!("GET /first HTTP/1.0\r\nHost: {h}\r\n\r\n"),
        format!(
            "POST /first HTTP/1.1\r\nHost: {h}\r\nConnection: close\r\nContent-Length: 2\r\n\r\nab"
        ),
    ] {
        let before = l.origin.requests().len();
        let sent = format!("{first}GET /smuggled HTTP/1.1\r\nHost: {h}\r\n\r\n");
        let out = exchange(l.edge.http, sent.as_bytes()).await;
        // One answer (an HTTP/1.0 request's is HTTP/1.0).
        assert_eq!(
            out.text.matches(" 200 OK\r\n").count(),
            1,
            "{first:?}: {}",
            out.text
        );
        assert!(out.text.starts_with("HTTP/1."), "{first:?}: {}", out.text);
        assert!(out.closed, "{first:?}");
        // The origin's agent may still be writing the first: a moment for
        // a second to arrive, if it were to.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let requests = l.origin.requests();
        assert_eq!(requests.len(), before + 1, "{first:?}");
        // The first, with its own method.
        let method = first.split(' ').next().unwrap_or_default();
        assert!(
            requests[before].starts_with(format!("{method} /first ").as_bytes()),
            "{first:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_chunk_after_the_request_went_on_aborts_it() {
    let l = live().await;
    let mut tcp = TcpStream::connect(l.edge.http).await.expect("tcp");
    let head = format!(
        "POST /late HTTP/1.1\r\nHost: {}\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n",
        l.host
    );
    tcp.write_all(head.as_bytes()).await.expect("write");
    assert!(
        wait_until(Duration::from_secs(5), || l.origin.connections() == 1).await,
        "the request went on"
    );
    tcp.write_all(b"1\r\ncXX\r\n0\r\n\r\n")
        .await
        .expect("write");
    let out = read_all(&mut tcp).await;
    assert_eq!(out.statuses(), [400], "{}", out.text);
    assert!(out.text.contains("x-calvin-error: bad-request-body"));
    assert!(out.closed);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        l.origin.requests().is_empty(),
        "the origin got a whole request: {:?}",
        l.origin.requests()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_hidden_in_a_refused_body_never_runs() {
    // The offline agent is answered at once, without waiting for it.
    let edge = TestEdge::with_limits(calvin_edge::Limits {
        reconnect_wait_secs: 0,
        ..Default::default()
    })
    .await;
    let alice = TestAgent::start(&edge, "alice").await;
    let origin = RawOrigin::start().await;
    let live = alice.preview(origin.port, None).await.name;
    let live = format!("{live}.{DOMAIN}");
    let bob = TestAgent::start(&edge, "bob").await;
    let bob_origin = RawOrigin::start().await;
    let offline = bob.preview(bob_origin.port, None).await.name;
    bob.stop().await;
    let offline = format!("{offline}.{DOMAIN}");
    let long_path = format!("/{}", "a".repeat(9000));

    let hidden = format!("GET /hidden HTTP/1.1\r\nHost: {live}\r\n\r\n");
    let chunked_hidden = format!("{:x}\r\n{hidden}\r\n0\r\n\r\n", hidden.len());
    let targets = [
        ("an unknown name", "/", format!("nobody.{DOMAIN}"), 404),
        ("an offline agent", "/", offline.clone(), 502),
        (
            "a URI over the limit",
            long_path.as_str(),
            live.clone(),
            414,
        ),
    ];
    for (label, path, host, status) in &targets {
        for (framing, body) in [
            (format!("Content-Length: {}", hidden.len()), &hidden),
            ("Transfer-Encoding: chunked".to_owned(), &chunked_hidden),
        ] {
            let request =
                format!("POST {path} HTTP/1.1\r\nHost: {host}\r\n{framing}\r\n\r\n{body}");
            let out = exchange(edge.http, request.as_bytes()).await;
            assert_eq!(
                out.statuses(),
                [*status],
                "{label}, {framing}: {}",
                out.text
            );
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        origin.connections(),
        0,
        "hidden requests ran: {:?}",
        origin.requests()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_answered_200_or_426_stays_http() {
    for answer in [
        &b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"[..],
        b"HTTP/1.1 426 Upgrade Required\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    ] {
        let l = live_with(RawOrigin::answering(answer.to_vec()).await).await;
        let h = &l.host;
        let sent = format!(
            "GET /ws HTTP/1.1\r\nHost: {h}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n\
             GET /second HTTP/1.1\r\nHost: {h}\r\n\r\n"
        );
        let out = exchange(l.edge.http, sent.as_bytes()).await;
        let status = String::from_utf8_lossy(&answer[9..12])
            .parse::<u16>()
            .expect("a status");
        assert_eq!(out.statuses(), [status, status], "{}", out.text);
        let requests = l.origin.requests();
        assert_eq!(requests.len(), 2, "{requests:?}");
        assert!(requests[1].starts_with(b"GET /second HTTP/1.1\r\n"));
    }
}

/// An origin that answers an upgrade after `delay` and reports the bytes
/// that arrived before its 101, sends `origin-first;` with the 101, then
/// echoes what follows.
async fn slow_upgrading_origin(delay: Duration) -> (u16, tokio::sync::oneshot::Receiver<usize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let (early_tx, early_rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let mut buf = [0u8; 4096];
        // The agent's listening probe connects and sends nothing.
        let (mut stream, mut head) = loop {
            let (mut stream, _) = listener.accept().await.expect("accept");
            match stream.read(&mut buf).await {
                Ok(n) if n > 0 => break (stream, buf[..n].to_vec()),
                _ => continue,
            }
        };
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = stream.read(&mut buf).await.expect("read");
            assert!(n > 0, "the head came whole");
            head.extend_from_slice(&buf[..n]);
        }
        let end = head
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("a head")
            + 4;
        let mut early = head.len() - end;
        tokio::time::sleep(delay).await;
        while let Ok(Ok(n)) =
            tokio::time::timeout(Duration::from_millis(50), stream.read(&mut buf)).await
        {
            if n == 0 {
                break;
            }
            early += n;
        }
        let _ = early_tx.send(early);
        stream
            .write_all(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: x-test\r\n\r\norigin-first;")
            .await
            .expect("101");
        echo(stream).await;
    });
    (port, early_rx)
}

async fn echo<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S) {
    let mut buf = [0u8; 4096];
    while let Ok(n) = stream.read(&mut buf).await {
        if n == 0 || stream.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_after_an_upgrade_request_wait_for_the_101() {
    let edge = TestEdge::start().await;
    let agent = TestAgent::start(&edge, "alice").await;
    let (port, early) = slow_upgrading_origin(Duration::from_millis(400)).await;
    let name = agent.preview(port, None).await.name;
    let mut tcp = TcpStream::connect(edge.http).await.expect("tcp");
    let sent = format!(
        "GET /up HTTP/1.1\r\nHost: {name}.{DOMAIN}\r\nConnection: Upgrade\r\nUpgrade: x-test\r\n\r\nsent-early"
    );
    tcp.write_all(sent.as_bytes()).await.expect("write");
    assert_eq!(
        early.await.expect("origin ran"),
        0,
        "bytes went before the 101"
    );
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !got.ends_with(b"sent-early") {
        let n = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut buf))
            .await
            .expect("the echo in time")
            .expect("read");
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 101 "), "{text}");
    // What the origin sent with its 101 comes first, then the echo.
    assert!(text.ends_with("\r\n\r\norigin-first;sent-early"), "{text}");
    tcp.write_all(b" and after").await.expect("write");
    let n = tcp.read(&mut buf).await.expect("read");
    assert_eq!(&buf[..n], b" and after");
}
