//! Host confusion: a request reaches the preview its canonical label names,
//! or is refused (400 malformed, 421 not this edge's), never another
//! preview.

use calvin_tests::*;
use tokio::io::AsyncWriteExt;

/// Two previews of one agent, each with a recording origin.
struct Two {
    edge: TestEdge,
    agent: TestAgent,
    a: (String, RawOrigin),
    b: (String, RawOrigin),
}

async fn two() -> Two {
    let edge = TestEdge::start().await;
    let agent = TestAgent::start(&edge, "alice").await;
    let (oa, ob) = (RawOrigin::start().await, RawOrigin::start().await);
    let a = agent.preview(oa.port, None).await.name;
    let b = agent.preview(ob.port, None).await.name;
    Two {
        edge,
        agent,
        a: (format!("{a}.{DOMAIN}"), oa),
        b: (format!("{b}.{DOMAIN}"), ob),
    }
}

fn paths(origin: &RawOrigin) -> Vec<String> {
    origin
        .requests()
        .iter()
        .map(|r| {
            let text = String::from_utf8_lossy(r);
            text.lines().next().unwrap_or_default().to_owned()
        })
        .collect()
}

/// Browsers reuse one connection for every name under the wildcard
/// certificate: a request goes to the preview it names, whatever server
/// name the TLS connection was opened for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_goes_where_it_names_not_where_tls_was_opened() {
    let t = two().await;
    let port = t.edge.https.port();
    for version in ["--http2", "--http1.1"] {
        // curl sends a custom Host as HTTP/2's :authority.
        let out = curl(
            &t.edge.ca(),
            &[
                version,
                "-H",
                &format!("Host: {}:{port}", t.b.0),
                &format!("https://{}:{port}/{version}", t.a.0),
            ],
        )
        .await;
        assert_eq!(out.status, 200, "{version}: {out:?}");
    }
    assert!(t.a.1.requests().is_empty());
    assert_eq!(
        paths(&t.b.1),
        ["GET /--http2 HTTP/1.1", "GET /--http1.1 HTTP/1.1"]
    );

    // A keep-alive TLS connection that changes Host.
    let mut tls = tls_h1(t.edge.https, &t.edge.ca(), &t.a.0).await;
    let sent = format!(
        "GET /first HTTP/1.1\r\nHost: {}\r\n\r\nGET /second HTTP/1.1\r\nHost: {}\r\n\r\n",
        t.a.0, t.b.0
    );
    tls.write_all(sent.as_bytes()).await.expect("write");
    let out = read_all(&mut tls).await;
    assert_eq!(out.statuses(), [200, 200], "{}", out.text);
    assert_eq!(paths(&t.a.1), ["GET /first HTTP/1.1"]);
    assert_eq!(paths(&t.b.1)[2], "GET /second HTTP/1.1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_keep_alive_routes_each_request_by_its_own_host() {
    let t = two().await;
    let sent = format!(
        "GET /to-a HTTP/1.1\r\nHost: {}\r\n\r\nGET /to-b HTTP/1.1\r\nHost: {}\r\n\r\nGET /a-again HTTP/1.1\r\nHost: {}\r\n\r\n",
        t.a.0, t.b.0, t.a.0
    );
    let out = exchange(t.edge.http, sent.as_bytes()).await;
    assert_eq!(out.statuses(), [200, 200, 200], "{}", out.text);
    assert_eq!(
        paths(&t.a.1),
        ["GET /to-a HTTP/1.1", "GET /a-again HTTP/1.1"]
    );
    assert_eq!(paths(&t.b.1), ["GET /to-b HTTP/1.1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_or_ambiguous_hosts_get_400_or_421() {
    let t = two().await;
    let (a, b) = (&t.a.0, &t.b.0);
    let upper_a = a.to_ascii_uppercase();
    let cases: Vec<(&str, String, u16, &str)> = vec![
        (
            "two Host headers",
            format!("GET / HTTP/1.1\r\nHost: {a}\r\nHost: {b}\r\n\r\n"),
            400,
            "more than one Host header",
        ),
        (
            "two equal Host headers",
            format!("GET / HTTP/1.1\r\nHost: {a}\r\nHost: {a}\r\n\r\n"),
            400,
            "more than one Host header",
        ),
        (
            "no Host on HTTP/1.1",
            "GET / HTTP/1.1\r\n\r\n".into(),
            400,
            "no Host header",
        ),
        (
            "an absolute-form target naming another preview",
            format!("GET http://{b}/x HTTP/1.1\r\nHost: {a}\r\n\r\n"),
            400,
            "name different hosts",
        ),
        (
            "userinfo in Host",
            format!("GET / HTTP/1.1\r\nHost: user@{a}\r\n\r\n"),
            400,
            "userinfo",
        ),
        (
            "userinfo in an absolute-form target",
            format!("GET http://user@{a}/ HTTP/1.1\r\nHost: user@{a}\r\n\r\n"),
            400,
            "userinfo",
        ),
        (
            "a port past 65535",
            format!("GET / HTTP/1.1\r\nHost: {a}:99999999\r\n\r\n"),
            400,
            "port is not a number",
        ),
        (
            "a Host that is not ASCII",
            format!("GET / HTTP/1.1\r\nHost: {a}\u{e9}\r\n\r\n"),
            400,
            "not plain ASCII",
        ),
        (
            "a preview label under a foreign domain",
            format!("GET / HTTP/1.1\r\nHost: {a}.evil.com\r\n\r\n"),
            421,
            "is not served here",
        ),
        (
            "a foreign host",
            "GET / HTTP/1.1\r\nHost: example.com\r\n\r\n".into(),
            421,
            "is not served here",
        ),
        (
            "a punycode label",
            format!("GET / HTTP/1.1\r\nHost: xn--80ak6aa92e.{DOMAIN}\r\n\r\n"),
            404,
            "not a preview",
        ),
        (
            "a deeper name",
            format!("GET / HTTP/1.1\r\nHost: x.{a}\r\n\r\n"),
            404,
            "not a preview",
        ),
        (
            "upper case and a trailing dot",
            format!("GET /dot HTTP/1.1\r\nHost: {upper_a}.:8080\r\n\r\n"),
            200,
            "ok",
        ),
        (
            "an absolute-form target agreeing with Host",
            format!("GET http://{a}/absolute?q=1 HTTP/1.1\r\nHost: {a}\r\n\r\n"),
            200,
            "ok",
        ),
    ];
    for (label, request, status, says) in &cases {
        let out = exchange(t.edge.http, request.as_bytes()).await;
        assert_eq!(out.statuses(), [*status], "{label}: {}", out.text);
        assert!(out.text.contains(says), "{label}: {}", out.text);
    }
    // Only the two accepted requests reached a preview, both A, both with
    // origin-form targets and the canonical host.
    let requests = t.a.1.requests();
    let heads: Vec<String> = requests
        .iter()
        .map(|r| String::from_utf8_lossy(r).into_owned())
        .collect();
    assert_eq!(
        paths(&t.a.1),
        ["GET /dot HTTP/1.1", "GET /absolute?q=1 HTTP/1.1"]
    );
    assert!(
        heads[0].contains(&format!("\r\nhost: {a}:8080\r\n")),
        "{}",
        heads[0]
    );
    assert!(
        heads[1].contains(&format!("\r\nhost: {a}\r\n")),
        "{}",
        heads[1]
    );
    assert!(t.b.1.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn punycode_names_cannot_be_taken() {
    let t = two().await;
    for name in ["xn--80ak6aa92e", "ab--cd"] {
        let answer = t.agent.try_preview(i64::from(t.a.1.port), Some(name)).await;
        let body = String::from_utf8_lossy(&answer.body);
        assert_eq!(answer.status, 400, "{name}: {body}");
        assert!(
            body.contains("third and fourth characters"),
            "{name}: {body}"
        );
    }
}
