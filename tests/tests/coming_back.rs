//! A preview that is briefly away (its dev server restarting, its agent
//! reconnecting): requests wait a bounded time for it instead of failing at
//! once, past it get 502 with Retry-After, and a request that reached the
//! origin is never sent again.

use std::time::{Duration, Instant};

use calvin_edge::Limits;
use calvin_tests::*;

/// Runs curl in the background; its output and how long it took.
fn spawn_curl(
    ca: std::path::PathBuf,
    args: Vec<String>,
) -> tokio::task::JoinHandle<(CurlOutput, Duration)> {
    tokio::spawn(async move {
        let started = Instant::now();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = curl(&ca, &args).await;
        (out, started.elapsed())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarting_dev_server_is_waited_for() {
    let edge = TestEdge::start().await;
    let agent = TestAgent::start(&edge, "alice").await;
    // The port stays the test's while no server listens on it.
    let held = silent_port();
    let port = held.port();
    let origin = Origin::start_on(port).await;
    let url = agent.preview(port, None).await.url;

    // The server goes down (before any request, so no connection to it
    // lives on in the edge's pool) and comes back a second later.
    drop(origin);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let get = spawn_curl(edge.ca(), vec![format!("{url}/hello")]);
    // Nothing reached the server, so a POST waits too.
    let post = spawn_curl(
        edge.ca(),
        vec![
            "--data-binary".into(),
            "posted".into(),
            format!("{url}/echo"),
        ],
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let _origin = Origin::start_on(port).await;

    let (out, took) = get.await.expect("get");
    assert_eq!(
        (out.status, out.text().as_str()),
        (200, "hello from origin\n")
    );
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(3),
        "{took:?}"
    );
    let (out, _) = post.await.expect("post");
    assert_eq!((out.status, out.text().as_str()), (200, "posted"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_wait_a_silent_port_gets_502_with_retry_after() {
    let edge = TestEdge::with_limits(Limits {
        reconnect_wait_secs: 1,
        ..Default::default()
    })
    .await;
    let agent = TestAgent::start(&edge, "alice").await;
    let silent = silent_port();
    let port = silent.port();
    let url = agent.preview(port, None).await.url;
    let started = Instant::now();
    let out = curl(&edge.ca(), &[&url]).await;
    let took = started.elapsed();
    assert_eq!(out.status, 502, "{out:?}");
    assert_eq!(out.header("x-calvin-error"), Some("not-listening"));
    assert_eq!(out.header("retry-after"), Some("5"));
    assert!(
        took >= Duration::from_millis(800) && took < Duration::from_secs(3),
        "{took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnecting_agent_is_waited_for_and_past_the_wait_is_502() {
    let edge = TestEdge::with_limits(Limits {
        reconnect_wait_secs: 3,
        ..Default::default()
    })
    .await;
    let origin = Origin::start().await;
    let agent = TestAgent::start(&edge, "alice").await;
    let name = agent.preview(origin.port, Some("back")).await.name;
    let url = edge.url(&name);
    agent.stop().await;
    edge.wait_agents_connected(0).await;

    // Back within the wait: served.
    let waiting = spawn_curl(edge.ca(), vec![format!("{url}/hello")]);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let agent = TestAgent::start(&edge, "alice").await;
    agent.preview(origin.port, Some("back")).await;
    let (out, took) = waiting.await.expect("curl");
    assert_eq!(
        (out.status, out.text().as_str()),
        (200, "hello from origin\n")
    );
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(3),
        "{took:?}"
    );

    // Not back: 502 once the wait is over.
    agent.stop().await;
    edge.wait_agents_connected(0).await;
    let started = Instant::now();
    let out = curl(&edge.ca(), &[&format!("{url}/hello")]).await;
    let took = started.elapsed();
    assert_eq!(out.status, 502);
    assert_eq!(out.header("x-calvin-error"), Some("agent-offline"));
    assert_eq!(out.header("retry-after"), Some("5"));
    assert!(
        took >= Duration::from_millis(2800) && took < Duration::from_secs(5),
        "{took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_the_origin_got_is_never_sent_again() {
    let edge = TestEdge::start().await;
    let agent = TestAgent::start(&edge, "alice").await;
    // It reads the request, then closes without an answer.
    let origin = RawOrigin::answering(Vec::new()).await;
    let url = agent.preview(origin.port, None).await.url;
    let started = Instant::now();
    let out = curl(
        &edge.ca(),
        &["--data-binary", "once", &format!("{url}/pay")],
    )
    .await;
    assert_eq!(out.status, 502, "{out:?}");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let requests = origin.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert!(requests[0].starts_with(b"POST /pay "));
}

/// An agent that dies without a word (here frozen with SIGSTOP, as a
/// laptop's lid closes) is found gone by the edge's probe about 1 s into a
/// request. A request the edge had already handed to the agent gets 502
/// then (the origin may have got it; it is not sent again, even a GET). A
/// request the edge had not yet passed on (it was waiting for the agent to
/// open a connection to the origin), even a POST, waits for the agent to
/// come back and is sent there, as it would be had the agent's goodbye
/// arrived first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silently_dead_agent_is_waited_for_by_what_had_not_left() {
    let dev = DevPreview::start().await;
    let (agent, socket, ca) = (&dev.agent, &dev.socket, &dev.ca);
    let hello = format!("{}/hello", dev.created.url);
    let mut origins = Vec::new();

    for case in ["GET handed over", "POST not passed on"] {
        let (args, expected) = match case {
            // A request before leaves an idle connection to the origin,
            // which the next takes: the edge hands it to the agent at once.
            "GET handed over" => {
                assert_eq!(curl(ca, &[&hello]).await.status, 200);
                (vec![hello.clone()], None)
            }
            // A preview not used yet: the edge must first ask the agent for
            // a connection to the origin.
            _ => {
                let other = Origin::start().await;
                let fresh = preview_when_connected(socket, other.port).await.url;
                origins.push(other);
                let echo = format!("{fresh}/echo");
                (
                    vec!["--data-binary".into(), "once".into(), echo],
                    Some("once"),
                )
            }
        };
        agent.signal("STOP").await;
        let waiting = spawn_curl(ca.clone(), args);
        tokio::time::sleep(Duration::from_millis(2500)).await;
        agent.signal("CONT").await;
        let (out, took) = waiting.await.expect("curl");
        eprintln!("{case}: {} after {took:?}", out.status);
        match expected {
            Some(body) => {
                assert_eq!((out.status, out.text().as_str()), (200, body), "{out:?}");
                assert!(took >= Duration::from_millis(2400), "{took:?}");
            }
            None => {
                assert_eq!(out.status, 502, "{out:?}");
                assert_eq!(out.header("x-calvin-error"), Some("agent-offline"));
                assert!(took < Duration::from_secs(2), "{took:?}");
            }
        }
        // The agent is back (it reconnects once it wakes).
        eventually(Duration::from_secs(10), || async {
            (curl(ca, &[&hello]).await.status == 200).then_some(())
        })
        .await
        .expect("the agent is back");
    }
}
