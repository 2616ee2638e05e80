//! A configured body cap (413, while streaming too) and request rates per
//! visitor address and per preview (429 with Retry-After).

use std::io::Write as _;
use std::time::Duration;

use calvin_edge::Limits;
use calvin_tests::*;

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
    let agent = TestAgent::start(&edge, "alice").await;
    let origin = Origin::start().await;
    let url = format!("{}/count", agent.preview(origin.port, None).await.url);
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
                out.text(),
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
    let agent = TestAgent::start(&edge, "alice").await;
    let origin = Origin::start().await;
    let url = format!("{}/hello", agent.preview(origin.port, None).await.url);
    let ca = edge.ca();

    // A burst of ten seconds' worth passes; the rest is refused.
    let refused = refused(burst(&ca, &url, 12, |_| "127.0.0.1".into()).await);
    assert_eq!(refused.len(), 2);
    let refused = &refused[0];
    assert_eq!(refused.header("x-calvin-error"), Some("rate-limited"));
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert_eq!(
        refused.text(),
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_past_the_rate_of_a_preview_get_429_with_retry_after() {
    let edge = TestEdge::with_limits(Limits {
        requests_per_second_per_ip: 0,
        requests_per_second_per_preview: 1,
        ..Default::default()
    })
    .await;
    let agent = TestAgent::start(&edge, "alice").await;
    let origin = Origin::start().await;
    let created = agent.preview(origin.port, None).await;
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
        refused.text(),
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
    let slow: Vec<_> = (0..2)
        .map(|_| {
            let (ca, url) = (ca.clone(), format!("{url}/slow?ms=1500"));
            tokio::spawn(async move { curl(&ca, &[&url]).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
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
