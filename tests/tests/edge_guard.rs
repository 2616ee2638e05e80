//! The edge against agents that misbehave: a raw QUIC client speaks the
//! protocol (or not) to a real edge.

use std::sync::Arc;
use std::time::{Duration, Instant};

use calvin_proto::io::{read_frame, write_frame};
use calvin_proto::{
    AgentMessage, EdgeMessage, ErrorCode, Hello, PROTOCOL_VERSION, Port, Preview, PreviewName,
};
use calvin_tests::*;

/// A QUIC connection to the edge, as an agent would open it.
async fn dial(edge: &TestEdge) -> quinn::Connection {
    dial_from(edge, "127.0.0.1").await
}

/// The same from another loopback address.
async fn dial_from(edge: &TestEdge, source: &str) -> quinn::Connection {
    let crypto = tls_client_config(&edge.ca(), &[calvin_proto::ALPN]);
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(crypto).expect("quic crypto");
    let mut endpoint =
        quinn::Endpoint::client(format!("{source}:0").parse().expect("addr")).expect("endpoint");
    endpoint.set_default_client_config(quinn::ClientConfig::new(Arc::new(crypto)));
    endpoint
        .connect(edge.quic, "localhost")
        .expect("connect")
        .await
        .expect("handshake")
}

fn hello(token: String, version: u32) -> AgentMessage {
    AgentMessage::Hello(Hello {
        version,
        token,
        previews: vec![],
    })
}

/// Sends one message on a new control stream and reads the answer.
async fn first_exchange(conn: &quinn::Connection, msg: &AgentMessage) -> Option<EdgeMessage> {
    let (mut send, mut recv) = conn.open_bi().await.expect("stream");
    write_frame(&mut send, msg).await.expect("write");
    read_frame::<EdgeMessage, _>(&mut recv).await.ok().flatten()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_tokens_and_old_protocols_are_refused_with_the_reason() {
    let edge = TestEdge::start().await;
    for (msg, code, text) in [
        (
            hello(token_for("mallory"), PROTOCOL_VERSION),
            ErrorCode::BadToken,
            "the edge does not know this token".to_owned(),
        ),
        (
            hello(token_for("alice"), 99),
            ErrorCode::UnsupportedVersion,
            format!("this edge speaks protocol {PROTOCOL_VERSION}; the agent speaks 99"),
        ),
        (
            AgentMessage::Close {
                id: 1,
                name: PreviewName::parse("x").expect("name"),
            },
            ErrorCode::Protocol,
            "the first message must be a hello".to_owned(),
        ),
    ] {
        let conn = dial(&edge).await;
        let answer = first_exchange(&conn, &msg).await;
        let Some(EdgeMessage::Refused(failure)) = answer else {
            panic!("expected a refusal, got {answer:?}");
        };
        assert_eq!(
            (failure.code, failure.message.as_str()),
            (code, text.as_str())
        );
        let closed = tokio::time::timeout(Duration::from_secs(5), conn.closed()).await;
        assert!(closed.is_ok(), "the edge closes a refused connection");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_guessing_tokens_is_refused_even_the_right_one() {
    let edge = TestEdge::start().await;
    let max = calvin_edge::guesses::MAX_UNKNOWN_TOKENS;
    for attempt in 1..=max {
        let conn = dial(&edge).await;
        let answer = first_exchange(&conn, &hello(token_for("mallory"), PROTOCOL_VERSION)).await;
        let Some(EdgeMessage::Refused(failure)) = answer else {
            panic!("unknown token {attempt}: expected a refusal, got {answer:?}");
        };
        assert_eq!(failure.code, ErrorCode::BadToken, "unknown token {attempt}");
    }

    // One past the limit, even a real token is refused unchecked: the
    // source learns nothing more until its window ends.
    let conn = dial(&edge).await;
    let answer = first_exchange(&conn, &hello(token_for("alice"), PROTOCOL_VERSION)).await;
    let Some(EdgeMessage::Refused(failure)) = answer else {
        panic!("expected a refusal, got {answer:?}");
    };
    assert_eq!(failure.code, ErrorCode::TooManyAttempts);
    let prefix = format!("{max} unknown tokens from 127.0.0.1 within 60 s: try again in ");
    let secs = failure
        .message
        .strip_prefix(&prefix)
        .and_then(|rest| rest.strip_suffix(" s"))
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("{:?}", failure.message));
    assert!((1..=60).contains(&secs), "{secs}");

    // Another source is not held back by this one.
    let conn = dial_from(&edge, "127.0.0.2").await;
    let answer = first_exchange(&conn, &hello(token_for("alice"), PROTOCOL_VERSION)).await;
    assert!(
        matches!(answer, Some(EdgeMessage::Welcome(_))),
        "{answer:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_without_a_hello_is_cut_off() {
    let edge = TestEdge::with_limits(calvin_edge::Limits {
        hello_timeout_secs: 1,
        ..Default::default()
    })
    .await;
    let conn = dial(&edge).await;
    let started = Instant::now();
    let reason = tokio::time::timeout(Duration::from_secs(5), conn.closed())
        .await
        .expect("closed within 5 s");
    assert!(started.elapsed() >= Duration::from_millis(900));
    assert!(reason.to_string().contains("no hello in time"), "{reason}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ending_the_control_stream_ends_the_connection_and_the_previews() {
    let edge = TestEdge::start().await;
    let conn = dial(&edge).await;
    let (mut send, mut recv) = conn.open_bi().await.expect("stream");
    write_frame(&mut send, &hello(token_for("alice"), PROTOCOL_VERSION))
        .await
        .expect("hello");
    let Some(EdgeMessage::Welcome(welcome)) = read_frame(&mut recv).await.expect("answer") else {
        panic!("expected a welcome");
    };
    assert_eq!(welcome.account, "alice");
    let silent = silent_port();
    let port = Port::try_from(silent.port()).expect("port");
    let open = AgentMessage::Open {
        id: 1,
        port,
        name: Some(PreviewName::parse("ctl").expect("name")),
        ttl_secs: None,
        protect: None,
    };
    write_frame(&mut send, &open).await.expect("open");
    let answer: Option<EdgeMessage> = read_frame(&mut recv).await.expect("answer");
    assert!(
        matches!(answer, Some(EdgeMessage::Opened { id: 1, .. })),
        "{answer:?}"
    );
    // A second hello is a protocol error, answered, not fatal.
    write_frame(&mut send, &hello(token_for("alice"), PROTOCOL_VERSION))
        .await
        .expect("hello");
    let answer: Option<EdgeMessage> = read_frame(&mut recv).await.expect("answer");
    assert!(
        matches!(&answer, Some(EdgeMessage::Error { id: None, failure }) if failure.code == ErrorCode::Protocol),
        "{answer:?}"
    );

    send.finish().expect("finish");
    let reason = tokio::time::timeout(Duration::from_secs(5), conn.closed())
        .await
        .expect("the edge closes a connection whose control stream ended");
    assert!(
        reason.to_string().contains("control stream ended"),
        "{reason:?}"
    );
    let out = curl(&edge.ca(), &[&edge.url("ctl")]).await;
    assert_eq!(out.header("x-calvin-error"), Some("agent-offline"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnecting_agent_gets_its_names_back_and_not_anothers() {
    let edge = TestEdge::start().await;
    let bob = TestAgent::start(&edge, "bob").await;
    let bobs = silent_port();
    bob.preview(bobs.port(), Some("bobs")).await;

    let conn = dial(&edge).await;
    let silent = silent_port();
    let port = Port::try_from(silent.port()).expect("port");
    let held = |name: &str| Preview {
        name: PreviewName::parse(name).expect("name"),
        port,
        ttl_secs: None,
        protect: None,
    };
    let msg = AgentMessage::Hello(Hello {
        version: PROTOCOL_VERSION,
        token: token_for("alice"),
        previews: vec![held("alices"), held("bobs")],
    });
    let Some(EdgeMessage::Welcome(welcome)) = first_exchange(&conn, &msg).await else {
        panic!("expected a welcome");
    };
    assert_eq!(welcome.restored, [held("alices")]);
    assert_eq!(welcome.rejected.len(), 1);
    assert_eq!(welcome.rejected[0].name.as_str(), "bobs");
    assert_eq!(welcome.rejected[0].failure.code, ErrorCode::NameTaken);
}

/// A good agent's preview, to check that a bad agent never touches it.
async fn good_preview(edge: &TestEdge) -> (TestAgent, Origin, String) {
    let agent = TestAgent::start(edge, "alice").await;
    let origin = Origin::start().await;
    let url = agent.preview(origin.port, None).await.url;
    (agent, origin, url)
}

/// A connection past its Welcome, for bob, with its control stream.
async fn welcomed(edge: &TestEdge) -> (quinn::Connection, quinn::SendStream, quinn::RecvStream) {
    let conn = dial(edge).await;
    let (mut send, mut recv) = conn.open_bi().await.expect("stream");
    write_frame(&mut send, &hello(token_for("bob"), PROTOCOL_VERSION))
        .await
        .expect("hello");
    let welcome = read_frame::<EdgeMessage, _>(&mut recv).await.expect("read");
    assert!(
        matches!(welcome, Some(EdgeMessage::Welcome(_))),
        "{welcome:?}"
    );
    (conn, send, recv)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_on_the_control_stream_cuts_off_only_that_agent() {
    let edge = TestEdge::start().await;
    let (_alice, _origin, url) = good_preview(&edge).await;
    let (conn, mut send, _recv) = welcomed(&edge).await;
    send.write_all(&[0, 0, 0, 9, b'{', 0xff, 0xfe, b'x', b'}', 1, 2, 3, 4])
        .await
        .expect("garbage");
    let reason = tokio::time::timeout(Duration::from_secs(5), conn.closed())
        .await
        .expect("cut off within 5 s");
    assert!(
        reason.to_string().contains("bad control message"),
        "{reason}"
    );
    assert_eq!(
        curl(&edge.ca(), &[&format!("{url}/hello")]).await.status,
        200
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_preview_requests_cuts_off_only_that_agent() {
    let edge = TestEdge::start().await;
    let (_alice, _origin, url) = good_preview(&edge).await;
    let (conn, mut send, mut recv) = welcomed(&edge).await;
    let port = Port::try_from(8080u16).expect("port");
    let flood = tokio::spawn(async move {
        for id in 0..10_000u64 {
            let open = AgentMessage::Open {
                id,
                port,
                name: None,
                ttl_secs: None,
                protect: None,
            };
            if write_frame(&mut send, &open).await.is_err() {
                return id;
            }
        }
        10_000
    });
    // Answers, until the edge says why it stops.
    let mut last = None;
    while let Ok(Some(msg)) = read_frame::<EdgeMessage, _>(&mut recv).await {
        last = Some(msg);
    }
    let Some(EdgeMessage::Error { id: None, failure }) = last else {
        panic!("the last answer: {last:?}");
    };
    assert_eq!(failure.code, ErrorCode::TooManyRequests);
    assert!(
        failure.message.contains("control messages"),
        "{}",
        failure.message
    );
    let reason = tokio::time::timeout(Duration::from_secs(5), conn.closed())
        .await
        .expect("cut off");
    assert!(
        reason.to_string().contains("too many control messages"),
        "{reason}"
    );
    let _ = flood.await;
    assert_eq!(
        curl(&edge.ca(), &[&format!("{url}/hello")]).await.status,
        200
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_never_takes_its_streams_holds_up_only_its_own_visitors() {
    let edge = TestEdge::with_limits(calvin_edge::Limits {
        upstream_connect_timeout_secs: 2,
        ..Default::default()
    })
    .await;
    let (_alice, _origin, url) = good_preview(&edge).await;
    // Bob previews a port, then never accepts the streams the edge opens
    // (no flow-control credit is ever used or given back).
    let (_conn, mut send, mut recv) = welcomed(&edge).await;
    let open = AgentMessage::Open {
        id: 1,
        port: Port::try_from(8080u16).expect("port"),
        name: None,
        ttl_secs: None,
        protect: None,
    };
    write_frame(&mut send, &open).await.expect("open");
    let Ok(Some(EdgeMessage::Opened { preview, .. })) = read_frame(&mut recv).await else {
        panic!("opened");
    };
    let bobs = edge.url(preview.name.as_str());
    let stalled: Vec<_> = (0..20)
        .map(|i| {
            let (ca, url) = (edge.ca(), format!("{bobs}/{i}"));
            tokio::spawn(async move { curl(&ca, &["--max-time", "10", &url]).await })
        })
        .collect();
    // Alice's visitors are served meanwhile, promptly.
    for _ in 0..20 {
        let started = Instant::now();
        assert_eq!(
            curl(&edge.ca(), &[&format!("{url}/hello")]).await.status,
            200
        );
        assert!(started.elapsed() < Duration::from_secs(1));
    }
    for task in stalled {
        let out = task.await.expect("curl");
        assert_eq!(out.status, 504, "{out:?}");
        assert_eq!(out.header("x-calvin-error"), Some("agent-not-answering"));
    }
}

/// An agent that opens stream after stream towards the edge (which never
/// asks it for any) gets three besides its control stream: QUIC grants no
/// more, so 10,000 attempts hold no more of the edge than that, and other
/// agents' visitors are served meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_opening_10000_streams_gets_three() {
    let edge = TestEdge::start().await;
    let (_alice, _origin, url) = good_preview(&edge).await;
    let (conn, _send, _recv) = welcomed(&edge).await;
    let opened = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let opening = {
        let (conn, opened) = (conn.clone(), opened.clone());
        tokio::spawn(async move {
            let mut held = Vec::new();
            for _ in 0..10_000 {
                let Ok((mut send, recv)) = conn.open_bi().await else {
                    break;
                };
                // Each carries what it may, unread by the edge.
                let _ = tokio::time::timeout(
                    Duration::from_millis(100),
                    send.write_all(&[0x55; 64 << 10]),
                )
                .await;
                held.push((send, recv));
                opened.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    for _ in 0..10 {
        let started = Instant::now();
        assert_eq!(
            curl(&edge.ca(), &[&format!("{url}/hello")]).await.status,
            200
        );
        assert!(started.elapsed() < Duration::from_secs(1));
    }
    let opened = opened.load(std::sync::atomic::Ordering::SeqCst);
    eprintln!("streams opened besides the control stream: {opened}");
    assert_eq!(
        opened, 3,
        "the edge grants 4 streams, the control stream one"
    );
    assert!(!opening.is_finished(), "the 5th open_bi should still wait");
    opening.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn share_links_are_made_only_for_the_agent_s_protected_previews_within_their_bounds() {
    // This raw agent answers no data stream: a request let through waits
    // for it a second.
    let edge = TestEdge::with_limits(calvin_edge::Limits {
        upstream_connect_timeout_secs: 1,
        ..Default::default()
    })
    .await;
    let conn = dial(&edge).await;
    let (mut send, mut recv) = conn.open_bi().await.expect("stream");
    write_frame(&mut send, &hello(token_for("alice"), PROTOCOL_VERSION))
        .await
        .expect("hello");
    let Some(EdgeMessage::Welcome(_)) = read_frame(&mut recv).await.expect("answer") else {
        panic!("expected a welcome");
    };
    let silent = silent_port();
    let port = Port::try_from(silent.port()).expect("port");
    let name = |n: &str| PreviewName::parse(n).expect("name");
    let salt = calvin_proto::ShareSalt::try_from("a".repeat(22)).expect("salt");
    for (id, preview, protect) in [(1, "shut", Some(salt)), (2, "open", None)] {
        let open = AgentMessage::Open {
            id,
            port,
            name: Some(name(preview)),
            ttl_secs: None,
            protect,
        };
        write_frame(&mut send, &open).await.expect("open");
        let answer: Option<EdgeMessage> = read_frame(&mut recv).await.expect("answer");
        assert!(
            matches!(answer, Some(EdgeMessage::Opened { .. })),
            "{answer:?}"
        );
    }
    let mut ask = async |id: u64, preview: &str, expires_secs: Option<u32>| {
        let msg = AgentMessage::ShareLink {
            id,
            name: name(preview),
            expires_secs,
        };
        write_frame(&mut send, &msg).await.expect("share link");
        read_frame::<EdgeMessage, _>(&mut recv)
            .await
            .expect("answer")
            .expect("an answer")
    };
    let refused = |answer: EdgeMessage, code: ErrorCode, text: &str| match answer {
        EdgeMessage::Error {
            failure,
            id: Some(_),
        } => {
            assert_eq!(failure.code, code, "{failure:?}");
            assert!(failure.message.contains(text), "{failure:?}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    };
    let bounds = "expires_secs must be from 60 to 31536000";
    refused(ask(3, "shut", Some(59)).await, ErrorCode::Protocol, bounds);
    refused(
        ask(4, "shut", Some(31_536_001)).await,
        ErrorCode::Protocol,
        bounds,
    );
    refused(
        ask(5, "open", None).await,
        ErrorCode::Protocol,
        "preview open is not protected",
    );
    refused(
        ask(6, "nosuch", None).await,
        ErrorCode::UnknownName,
        "this agent has no preview named nosuch",
    );
    let mut tokens = Vec::new();
    for (id, secs) in [(7, 60), (8, 31_536_000)] {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_secs();
        match ask(id, "shut", Some(secs)).await {
            EdgeMessage::Shared {
                token,
                expires_unix,
                ..
            } => {
                assert!(expires_unix.abs_diff(now + u64::from(secs)) <= 2);
                assert!(token.starts_with(&format!("{expires_unix}.")), "{token}");
                tokens.push(token);
            }
            other => panic!("expected a token, got {other:?}"),
        }
    }
    // The token passed: the request went on to the agent (which answers
    // nothing); without it, refused.
    let link = format!("{}/?calvin_share={}", edge.url("shut"), tokens[0]);
    let out = curl(&edge.ca(), &[&link]).await;
    assert_eq!(out.header("x-calvin-error"), Some("agent-not-answering"));
    let out = curl(&edge.ca(), &[&edge.url("shut")]).await;
    assert_eq!(out.header("x-calvin-error"), Some("share-token-missing"));
}
