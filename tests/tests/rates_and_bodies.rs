//! A configured body cap (413, while streaming too), request rates per
//! visitor address and per preview (429 with Retry-After), requests under
//! way per account (503), and bandwidth per account (shaped, both ways).

use std::io::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use calvin_edge::Limits;
use calvin_tests::*;
use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;

const CAP: u64 = 1 << 20;

fn body_file(len: u64) -> tempfile::NamedTempFile {
    let mut file = tempfile::NamedTempFile::new().expect("temp file");
    file.write_all(&vec![1u8; len as usize]).expect("write");
    file
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_the_cap_gets_413_declared_or_streamed() {
    let edge = TestEdge::with_limits(Limits {
        max_request_body_bytes: CAP,
        ..Default::default()
    })
    .await;
    let s = PreviewSetup::on(edge).await;
    let edge = &s.edge;
    let url = s.url("/count");
    let (at, past) = (body_file(CAP), body_file(CAP + 1));
    let file = |f: &tempfile::NamedTempFile| format!("@{}", f.path().display());
    for (label, framing) in [
        ("declared", vec![]),
        ("streamed", vec!["-H", "Transfer-Encoding: chunked"]),
    ] {
        for version in ["--http1.1", "--http2"] {
            if label == "streamed" && version == "--http2" {
                continue; // curl declares a file's length on HTTP/2.
            }
            let mut args = vec![version, "--data-binary"];
            let at_arg = file(&at);
            args.push(&at_arg);
            args.extend(&framing);
            args.push(&url);
            let out = curl(&edge.ca(), &args).await;
            assert_eq!(out.status, 200, "{label} {version} at the cap: {out:?}");
            assert_eq!(out.text(), format!("{CAP} {CAP}\n"));

            let past_arg = file(&past);
            args[2] = &past_arg;
            let out = curl(&edge.ca(), &args).await;
            assert_eq!(out.status, 413, "{label} {version} past the cap: {out:?}");
            assert_eq!(out.header("x-calvin-error"), Some("body-too-large"));
            assert_eq!(
                out.edge_text(),
                format!("the request body is larger than {CAP} bytes\n")
            );
        }
    }
}

/// `n` GETs of `url` at once, from the addresses `from` gives for each.
async fn burst(
    ca: &std::path::Path,
    url: &str,
    n: usize,
    from: impl Fn(usize) -> String,
) -> Vec<CurlOutput> {
    let args: Vec<[String; 3]> = (0..n)
        .map(|i| ["--interface".into(), from(i), url.to_owned()])
        .collect();
    futures_util::future::join_all(args.iter().map(|a| async move {
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        curl(ca, &a).await
    }))
    .await
}

/// The refused ones among `outs`, checking the others were served.
fn refused(outs: Vec<CurlOutput>) -> Vec<CurlOutput> {
    let statuses: Vec<u16> = outs.iter().map(|o| o.status).collect();
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        10,
        "the burst of ten seconds' worth passes: {statuses:?}"
    );
    let refused: Vec<CurlOutput> = outs.into_iter().filter(|o| o.status != 200).collect();
    assert!(refused.iter().all(|o| o.status == 429), "{statuses:?}");
    refused
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_past_the_rate_of_an_address_get_429_with_retry_after() {
    let edge = TestEdge::with_limits(Limits {
        requests_per_second_per_ip: 1,
        requests_per_second_per_preview: 0,
        ..Default::default()
    })
    .await;
    let s = PreviewSetup::on(edge).await;
    let edge = &s.edge;
    let url = s.url("/hello");
    let ca = edge.ca();

    // A burst of ten seconds' worth passes; the rest is refused.
    let refused = refused(burst(&ca, &url, 12, |_| "127.0.0.1".into()).await);
    assert_eq!(refused.len(), 2);
    let refused = &refused[0];
    assert_eq!(refused.header("x-calvin-error"), Some("rate-limited"));
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert_eq!(
        refused.edge_text(),
        "too many requests from 127.0.0.1: at most 1 per second (bursts of 10); retry in 1 s\n"
    );
    // Another address is not held back...
    assert_eq!(
        burst(&ca, &url, 1, |_| "127.0.0.2".into()).await[0].status,
        200
    );
    // ...and the first one is served again once it waited.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(
        burst(&ca, &url, 1, |_| "127.0.0.1".into()).await[0].status,
        200
    );
}

/// `calvin-edge dev` serves this machine only: its one visitor address
/// is its own user, so it does not limit request rates. 2,000 GETs on a
/// keep-alive connection, twice the default burst per address and per
/// preview, are all served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dev_edge_does_not_limit_its_own_machine() {
    let dev = DevPreview::start().await;
    let name = &dev.created.name;
    let mut sender = h1_client(dev.edge.http).await;
    let started = Instant::now();
    let mut statuses = std::collections::BTreeMap::new();
    for _ in 0..2000 {
        let req = http::Request::get("/hello")
            .header(http::header::HOST, format!("{name}.{DOMAIN}"))
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .expect("request");
        sender.ready().await.expect("connection ready");
        let response = sender.send_request(req).await.expect("response");
        *statuses.entry(response.status().as_u16()).or_insert(0) += 1;
        http_body_util::BodyExt::collect(response.into_body())
            .await
            .expect("body");
    }
    eprintln!("2,000 GETs in {:?}: {statuses:?}", started.elapsed());
    assert_eq!(statuses, [(200, 2000)].into());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_past_the_rate_of_a_preview_get_429_with_retry_after() {
    let edge = TestEdge::with_limits(Limits {
        requests_per_second_per_ip: 0,
        requests_per_second_per_preview: 1,
        ..Default::default()
    })
    .await;
    let s = PreviewSetup::on(edge).await;
    let (edge, agent) = (&s.edge, &s.agent);
    let created = &s.created;
    let other_origin = Origin::start().await;
    let other = agent.preview(other_origin.port, None).await;
    let url = format!("{}/hello", created.url);
    let ca = edge.ca();

    // Twelve addresses share the preview's burst of ten.
    let refused = refused(burst(&ca, &url, 12, |n| format!("127.0.0.{}", n + 1)).await);
    assert_eq!(refused.len(), 2);
    let refused = &refused[0];
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert_eq!(
        refused.edge_text(),
        format!(
            "too many requests for preview {}: at most 1 per second (bursts of 10); retry in 1 s\n",
            created.name
        )
    );
    // Another preview is not held back.
    let out = curl(&ca, &[&format!("{}/hello", other.url)]).await;
    assert_eq!(out.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_account_past_its_requests_under_way_gets_503_for_the_rest() {
    let edge = TestEdge::with_limits(Limits {
        max_streams_per_account: 2,
        ..Default::default()
    })
    .await;
    let agent = TestAgent::start(&edge, "alice").await;
    let (origin, other_origin) = (Origin::start().await, Origin::start().await);
    let url = agent.preview(origin.port, None).await.url;
    let other = agent.preview(other_origin.port, None).await.url;
    let bob = TestAgent::start(&edge, "bob").await;
    let bobs = bob.preview(origin.port, None).await.url;
    let ca = edge.ca();

    // Two slow requests hold the account's two slots; a third, even to
    // another preview of the account, is refused until they are done.
    let before = origin.requests();
    let slow: Vec<_> = (0..2)
        .map(|_| {
            let (ca, url) = (ca.clone(), format!("{url}/slow?ms=1500"));
            tokio::spawn(async move { curl(&ca, &[&url]).await })
        })
        .collect();
    origin.has_seen(before + 2).await;
    let refused = curl(&ca, &[&format!("{other}/hello")]).await;
    assert_eq!(refused.status, 503, "{refused:?}");
    assert_eq!(refused.header("x-calvin-error"), Some("account-busy"));
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert!(
        refused
            .text()
            .contains("its account has 2 requests under way"),
        "{}",
        refused.text()
    );
    // Another account is not held back meanwhile.
    assert_eq!(curl(&ca, &[&format!("{bobs}/hello")]).await.status, 200);
    for task in slow {
        assert_eq!(task.await.expect("curl").status, 200);
    }
    // The slots came back.
    assert_eq!(curl(&ca, &[&format!("{other}/hello")]).await.status, 200);
}

const MIB: usize = 1 << 20;

/// An edge shaping every account to 1 MiB/s (bursts of 1 MiB).
async fn one_mib_per_second() -> TestEdge {
    TestEdge::with_limits(Limits {
        max_bytes_per_second_per_account: MIB as u64,
        ..Default::default()
    })
    .await
}

/// GETs `/bytes/{len}` from `url`: checks the bytes, returns the time.
async fn timed_download(ca: &std::path::Path, url: &str, len: usize) -> Duration {
    let start = Instant::now();
    let out = curl(ca, &[&format!("{url}/bytes/{len}")]).await;
    let took = start.elapsed();
    assert_eq!(out.status, 200, "{out:?}");
    assert!(
        out.body == pattern_bytes(len),
        "{len} bytes, byte-exact (got {})",
        out.body.len()
    );
    took
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_accounts_downloads_are_shaped_to_its_bandwidth_and_others_are_not_held_back() {
    let edge = one_mib_per_second().await;
    let alice = TestAgent::start(&edge, "alice").await;
    let bob = TestAgent::start(&edge, "bob").await;
    let origin = Origin::start().await;
    let alices = alice.preview(origin.port, None).await.url;
    let bobs = bob.preview(origin.port, None).await.url;
    let ca = edge.ca();

    // Alice's 3 MiB: her burst of 1 MiB at once, the other 2 MiB at
    // 1 MiB/s.
    let download = {
        let (ca, url) = (ca.clone(), alices.clone());
        tokio::spawn(async move { timed_download(&ca, &url, 3 * MIB).await })
    };
    // Once Alice has spent her burst, Bob downloads his own burst's worth:
    // his bucket is his, full, so it comes at once.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let bobs_took = timed_download(&ca, &bobs, MIB).await;
    let alices_took = download.await.expect("alice's download");
    eprintln!("alice: 3 MiB in {alices_took:?}; bob meanwhile: 1 MiB in {bobs_took:?}");
    assert!(
        alices_took >= Duration::from_millis(1800),
        "alice's 3 MiB at 1 MiB/s took {alices_took:?}"
    );
    assert!(
        bobs_took < Duration::from_millis(1000),
        "bob's 1 MiB took {bobs_took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_and_its_echo_share_the_accounts_bandwidth() {
    let edge = one_mib_per_second().await;
    let agent = TestAgent::start(&edge, "alice").await;
    let origin = Origin::start().await;
    let url = format!("{}/echo", agent.preview(origin.port, None).await.url);
    let data = pattern_bytes(3 * MIB);

    // 3 MiB up and the same 3 MiB echoed back: 6 MiB through the one
    // bucket, 1 MiB of it the burst.
    let (out, took) = curl_post(&edge.ca(), &url, &data, &[]).await;
    eprintln!("alice: 3 MiB up and echoed in {took:?}");
    assert_eq!(out.status, 200, "{out:?}");
    assert_eq!(out.body.len(), data.len());
    assert_eq!(
        sha256_hex(&out.body),
        sha256_hex(&data),
        "echoed byte-exact"
    );
    assert!(
        took >= Duration::from_millis(4500),
        "6 MiB at 1 MiB/s took {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_agents_of_an_account_share_its_bandwidth() {
    let edge = one_mib_per_second().await;
    let first = TestAgent::start(&edge, "alice").await;
    let second = TestAgent::start(&edge, "alice").await;
    let origin = Origin::start().await;
    let urls = [
        first.preview(origin.port, None).await.url,
        second.preview(origin.port, None).await.url,
    ];
    let ca = edge.ca();

    // 2 x 2 MiB at once: 1 MiB of burst, then 3 MiB at 1 MiB/s.
    let start = Instant::now();
    let took =
        futures_util::future::join_all(urls.iter().map(|url| timed_download(&ca, url, 2 * MIB)))
            .await;
    let total = start.elapsed();
    eprintln!("alice: 2 x 2 MiB over two agents in {total:?} (each {took:?})");
    assert!(
        total >= Duration::from_millis(2800),
        "4 MiB at 1 MiB/s took {total:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_is_shaped_both_ways() {
    let edge = one_mib_per_second().await;
    let agent = TestAgent::start(&edge, "alice").await;
    let origin = Origin::start().await;
    let name = agent.preview(origin.port, None).await.name;
    let host = format!("{name}.{DOMAIN}");
    let tcp = tokio::net::TcpStream::connect(edge.https)
        .await
        .expect("tcp");
    let server_name = rustls_pki_types::ServerName::try_from(host.clone()).expect("name");
    let tls = tokio_rustls::TlsConnector::from(Arc::new(tls_client_config(&edge.ca(), &[])))
        .connect(server_name, tcp)
        .await
        .expect("tls");
    let url = format!("wss://{host}:{}/ws", edge.https.port());
    let (mut ws, _) = tokio_tungstenite::client_async(url, tls)
        .await
        .expect("websocket handshake through the edge");

    // 1.5 MiB each way: 3 MiB through the bucket, 1 MiB of it the burst.
    let message = pattern_bytes(3 * MIB / 2);
    let start = Instant::now();
    ws.send(Message::binary(message.clone()))
        .await
        .expect("send");
    let echoed = ws.next().await.expect("an answer").expect("a message");
    let took = start.elapsed();
    eprintln!("alice: a 1.5 MiB WebSocket message echoed in {took:?}");
    assert!(
        echoed.into_data().as_ref() == message.as_slice(),
        "byte-exact"
    );
    assert!(
        took >= Duration::from_millis(1800),
        "3 MiB at 1 MiB/s took {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_held_back_for_the_accounts_bandwidth_is_not_too_slow() {
    // 8 KiB/s for the account, while a body must bring 20 KiB a second:
    // the edge's own shaping is not the visitor's slowness (no 408).
    let edge = TestEdge::with_limits(Limits {
        max_bytes_per_second_per_account: 8 << 10,
        min_request_body_bytes: 20 << 10,
        request_body_rate_window_secs: 1,
        ..Default::default()
    })
    .await;
    let s = PreviewSetup::on(edge).await;
    let edge = &s.edge;
    let url = s.url("/sha256");
    let data = pattern_bytes(24 << 10);
    let (out, took) = curl_post(&edge.ca(), &url, &data, &[]).await;
    eprintln!("alice: 24 KiB up at 8 KiB/s in {took:?}");
    assert_eq!(out.status, 200, "{out:?}");
    assert_eq!(
        out.text(),
        format!("{} {}\n", sha256_hex(&data), data.len())
    );
    assert!(
        took >= Duration::from_millis(1800),
        "24 KiB at 8 KiB/s took {took:?}"
    );
}
