//! Previews that end: made with a time to live, a preview is taken down at
//! its end, and its visitors read "this preview has ended" (410), not
//! "no such preview".

use std::time::{Duration, Instant};

use calvin_agent::api::{PreviewCreated, PreviewRequest};
use calvin_tests::*;

fn with_ttl(port: u16, ttl_secs: i64) -> PreviewRequest {
    PreviewRequest {
        port: port.into(),
        name: None,
        ttl_secs: Some(ttl_secs),
        probe: Some(false),
        protect: None,
        expires_secs: None,
    }
}

/// Polls `url` until it answers `status`; the time that took.
async fn until_status(ca: &std::path::Path, url: &str, status: u16, limit: Duration) -> CurlOutput {
    eventually(limit, || async {
        let out = curl(ca, &[url]).await;
        (out.status == status).then_some(out)
    })
    .await
    .unwrap_or_else(|| panic!("{url} never answered {status}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preview_ends_at_its_time_to_live_with_a_410_distinct_from_an_unknown_name() {
    let edge = TestEdge::start().await;
    let agent = TestAgent::start(&edge, "alice").await;
    let origin = Origin::start().await;
    let made = Instant::now();
    let answer = agent
        .client()
        .create(&with_ttl(origin.port, 3))
        .await
        .unwrap();
    let created: PreviewCreated = answer.parse().unwrap();
    let expires = time::OffsetDateTime::parse(
        created.expires_at.as_deref().expect("expires_at"),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    let left = expires - time::OffsetDateTime::now_utc();
    assert!(
        left > time::Duration::seconds(1) && left <= time::Duration::seconds(3),
        "{left}"
    );
    let listed = agent.list().await.previews;
    assert_eq!(listed[0].expires_at, created.expires_at);

    let url = format!("{}/hello", created.url);
    assert_eq!(curl(&edge.ca(), &[&url]).await.status, 200);
    let ended = until_status(&edge.ca(), &url, 410, Duration::from_secs(6)).await;
    let at = made.elapsed();
    assert!(at >= Duration::from_millis(2900), "ended early: {at:?}");
    assert!(at < Duration::from_secs(8), "ended late: {at:?}");
    assert_eq!(ended.header("x-calvin-error"), Some("preview-ended"));
    assert!(
        ended.text().contains("this preview has ended"),
        "{}",
        ended.text()
    );
    let unknown = curl(&edge.ca(), &[&edge.url("nosuchname")]).await;
    assert_eq!(unknown.status, 404);

    // The agent takes it down too, and the name stays ended, not free.
    let gone = eventually(Duration::from_secs(5), || async {
        agent.list().await.previews.is_empty().then_some(())
    })
    .await;
    assert!(gone.is_some(), "the agent still lists it");
    assert_eq!(curl(&edge.ca(), &[&url]).await.status, 410);
    // Its owner may make it again, with no end.
    let again = agent
        .client()
        .create(&PreviewRequest {
            port: origin.port.into(),
            name: Some(created.name.clone()),
            ttl_secs: None,
            probe: Some(false),
            protect: None,
            expires_secs: None,
        })
        .await
        .unwrap()
        .parse::<PreviewCreated>()
        .unwrap();
    assert_eq!(again.expires_at, None);
    assert_eq!(curl(&edge.ca(), &[&url]).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preview_whose_agent_is_offline_still_ends_on_time() {
    // A visitor of an offline preview waits this long for its agent.
    let edge = TestEdge::with_limits(calvin_edge::Limits {
        reconnect_wait_secs: 10,
        ..Default::default()
    })
    .await;
    let agent = TestAgent::start(&edge, "alice").await;
    let origin = Origin::start().await;
    let made = Instant::now();
    let created: PreviewCreated = agent
        .client()
        .create(&with_ttl(origin.port, 4))
        .await
        .unwrap()
        .parse()
        .unwrap();
    let url = format!("{}/hello", created.url);
    assert_eq!(curl(&edge.ca(), &[&url]).await.status, 200);
    agent.stop().await;
    // A visitor now waits for the agent, until the preview's end: there it
    // reads "ended", not "offline" after the whole wait.
    let waited = curl(&edge.ca(), &["--max-time", "15", &url]).await;
    let at = made.elapsed();
    assert_eq!(waited.status, 410, "{waited:?}");
    assert_eq!(waited.header("x-calvin-error"), Some("preview-ended"));
    assert!(
        at >= Duration::from_millis(3900) && at < Duration::from_secs(8),
        "answered at {at:?}, the end being at 4 s"
    );
    let later = curl(&edge.ca(), &[&url]).await;
    assert_eq!(later.header("x-calvin-error"), Some("preview-ended"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttl_limits_are_enforced_at_the_api_and_the_command_line() {
    let edge = TestEdge::start().await;
    let agent = TestAgent::start(&edge, "alice").await;
    let origin = Origin::start().await;
    for (ttl, ok) in [(1, true), (2_592_000, true), (0, false), (2_592_001, false)] {
        let answer = agent
            .client()
            .create(&with_ttl(origin.port, ttl))
            .await
            .unwrap();
        assert_eq!(answer.status.is_success(), ok, "ttl_secs {ttl}");
        if !ok {
            let err = answer.parse::<PreviewCreated>().unwrap_err();
            assert_eq!(err.code, "invalid_ttl");
            assert!(
                err.error.contains("ttl_secs must be from 1 to 2592000"),
                "{}",
                err.error
            );
        }
    }
    let socket = agent.socket.to_str().unwrap().to_owned();
    let port = origin.port.to_string();
    let cli = |ttl: &'static str| {
        let (socket, port) = (socket.clone(), port.clone());
        async move {
            tokio::process::Command::new(binary("calvin-agent"))
                .args([
                    "preview",
                    &port,
                    "--json",
                    "--no-probe",
                    "--ttl",
                    ttl,
                    "--socket",
                    &socket,
                ])
                .output()
                .await
                .unwrap()
        }
    };
    let two_hours = cli("2h").await;
    assert!(
        two_hours.status.success(),
        "{}",
        String::from_utf8_lossy(&two_hours.stderr)
    );
    let made: PreviewCreated = serde_json::from_slice(&two_hours.stdout).unwrap();
    let expires = time::OffsetDateTime::parse(
        made.expires_at.as_deref().unwrap(),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    let left = (expires - time::OffsetDateTime::now_utc()).whole_seconds();
    assert!((7190..=7200).contains(&left), "{left}");
    let thirty_one_days = cli("31d").await;
    assert!(!thirty_one_days.status.success());
    let said = String::from_utf8_lossy(&thirty_one_days.stderr);
    assert!(said.contains("--ttl") && said.contains("30d"), "{said}");
    let nonsense = cli("soon").await;
    assert!(!nonsense.status.success());
}
