//! Limits on a visitor's request head, each with its own status, enforced
//! before routing: a refused request never reaches the agent.

use calvin_edge::Limits;
use calvin_tests::*;

const MAX_URI: usize = 1_000;
const MAX_HEADERS: usize = 20;
const MAX_HEAD: usize = 16 << 10;

/// curl over HTTPS with `protocol`, without its default User-Agent and
/// Accept, and with `headers` fields `x-n: n` of its own.
async fn get(ca: &std::path::Path, url: &str, protocol: &str, headers: usize) -> CurlOutput {
    let mut args = vec![
        protocol.to_owned(),
        "-H".into(),
        "User-Agent:".into(),
        "-H".into(),
        "Accept:".into(),
    ];
    for n in 0..headers {
        args.push("-H".into());
        args.push(format!("x-{n}: {n}"));
    }
    args.push(url.to_owned());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    curl(ca, &args).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_heads_past_a_limit_get_414_or_431_and_never_reach_the_origin() {
    let edge = TestEdge::with_limits(Limits {
        max_uri_bytes: MAX_URI,
        max_request_headers: MAX_HEADERS,
        max_request_head_bytes: MAX_HEAD,
        ..Default::default()
    })
    .await;
    let agent = TestAgent::start(&edge, "alice").await;
    let origin = Origin::start().await;
    let created = agent.preview(origin.port, None).await;
    let ca = edge.ca();
    // Request heads, not connections: the preview's listening probe is a
    // connection whose accept may be counted only after this point.
    let before = origin.requests();

    // The request target (path and query) one byte past the limit.
    let target = |len: usize| format!("/hello?q={}", "a".repeat(len - "/hello?q=".len()));
    let long_url = format!("{}{}", created.url, target(MAX_URI + 1));
    // Header fields: HTTP/1.1 counts the Host header, HTTP/2 has none.
    for (protocol, host) in [("--http1.1", 1), ("--http2", 0)] {
        let got = get(&ca, &long_url, protocol, 0).await;
        assert_eq!(
            (got.status, got.http_version.as_str()),
            (414, &protocol[6..])
        );
        assert_eq!(got.header("x-calvin-error"), Some("uri-too-long"));
        assert_eq!(
            got.edge_text(),
            format!("the request's URI is longer than {MAX_URI} bytes\n")
        );

        let url = format!("{}/hello", created.url);
        let got = get(&ca, &url, protocol, MAX_HEADERS + 1 - host).await;
        assert_eq!(got.status, 431, "{protocol}: one header past the limit");
        if host == 0 {
            // HTTP/2's count is the proxy's, with its own page; hyper
            // answers HTTP/1.1's with the bare status.
            assert_eq!(got.header("x-calvin-error"), Some("too-many-headers"));
        }

        let big = format!("x-big: {}", "b".repeat(MAX_HEAD + 1));
        let got = curl(&ca, &[protocol, "-H", &big, &url]).await;
        assert_eq!(got.status, 431, "{protocol}: a head past {MAX_HEAD} bytes");
    }
    assert_eq!(
        origin.requests(),
        before,
        "a refused request reached the origin"
    );

    // At each limit the request goes through.
    for protocol in ["--http1.1", "--http2"] {
        let host = usize::from(protocol == "--http1.1");
        let got = get(
            &ca,
            &format!("{}{}", created.url, target(MAX_URI)),
            protocol,
            0,
        )
        .await;
        assert_eq!(got.status, 200, "{protocol}: a target of {MAX_URI} bytes");
        let url = format!("{}/hello", created.url);
        let got = get(&ca, &url, protocol, MAX_HEADERS - host).await;
        assert_eq!(got.status, 200, "{protocol}: {MAX_HEADERS} header fields");
        let big = format!("x-big: {}", "b".repeat(MAX_HEAD / 2));
        let got = curl(&ca, &[protocol, "-H", &big, &url]).await;
        assert_eq!(got.status, 200, "{protocol}: a head of half the limit");
    }
}
