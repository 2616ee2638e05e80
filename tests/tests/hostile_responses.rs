//! Hostile or broken origins: a response whose framing is ambiguous or
//! whose head is malformed becomes the edge's 502, never passed on; a body
//! cut short reaches the visitor as a failure, never as a shorter body that
//! looks whole; Location and other headers are the origin's own.

use calvin_tests::*;

async fn preview_answering(answer: &[u8]) -> (TestEdge, TestAgent, RawOrigin, String) {
    let edge = TestEdge::start().await;
    let agent = TestAgent::start(&edge, "alice").await;
    let origin = RawOrigin::answering(answer.to_vec()).await;
    let url = agent.preview(origin.port, None).await.url;
    (edge, agent, origin, url)
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
        let host = url
            .trim_start_matches("https://")
            .split(':')
            .next()
            .unwrap_or_default()
            .to_owned();
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
