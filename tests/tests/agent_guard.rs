//! The agent against an edge that asks for things it should not: a fake
//! edge speaks the protocol to a real agent and opens streams with crafted
//! headers. The agent forwards only to the ports it previews, under their
//! names, on loopback.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use calvin_agent::Agent;
use calvin_proto::io::{read_frame, write_frame};
use calvin_proto::{
    AgentMessage, EdgeMessage, Port, Preview, PreviewName, StreamAnswer, StreamHeader,
    StreamRefusal, Welcome,
};
use calvin_tests::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A fake edge: answers the agent's hello and open requests like the real
/// one, and hands the test the agent's connection.
async fn fake_edge() -> (Agent, quinn::Connection, tempfile::TempDir) {
    fake_edge_that(true).await
}

/// [`fake_edge`], or (`protects` false) one of a version before protected
/// previews: it takes `protect` for an unknown field and opens a public
/// preview.
async fn fake_edge_that(protects: bool) -> (Agent, quinn::Connection, tempfile::TempDir) {
    let (endpoint, edge, dir) = plain_quic_server();
    let agent = Agent::new(edge, "any-token".into());
    let runner = agent.clone();
    tokio::spawn(async move { runner.run(std::future::pending()).await });

    let conn = accept_agent(&endpoint).await;
    let (mut send, mut recv) = conn.accept_bi().await.expect("control stream");
    let Some(AgentMessage::Hello(_)) = read_frame(&mut recv).await.expect("hello") else {
        panic!("expected a hello");
    };
    let welcome = Welcome {
        account: "fake".into(),
        domain: DOMAIN.into(),
        url_template: "https://{name}.preview.localhost".into(),
        restored: vec![],
        rejected: vec![],
    };
    write_frame(&mut send, &EdgeMessage::Welcome(welcome))
        .await
        .expect("welcome");
    tokio::spawn(async move {
        let _endpoint = endpoint;
        while let Ok(Some(msg)) = read_frame::<AgentMessage, _>(&mut recv).await {
            let answer = match msg {
                AgentMessage::Open {
                    id,
                    port,
                    name,
                    ttl_secs,
                    protect,
                } => EdgeMessage::Opened {
                    id,
                    preview: Preview {
                        name: name.unwrap_or_else(|| PreviewName::parse("fake").expect("name")),
                        port,
                        ttl_secs,
                        protect: protect.filter(|_| protects),
                    },
                },
                AgentMessage::Close { id, name } => EdgeMessage::Closed { id, name },
                AgentMessage::Hello(_) | AgentMessage::ShareLink { .. } => return,
            };
            if write_frame(&mut send, &answer).await.is_err() {
                return;
            }
        }
    });
    agent
        .wait_connected(Duration::from_secs(10))
        .await
        .expect("agent connects to the fake edge");
    (agent, conn, dir)
}

/// Opens a data stream as the edge would and returns the agent's answer
/// and the stream.
async fn ask(
    conn: &quinn::Connection,
    name: &str,
    port: u16,
) -> (StreamAnswer, quinn::SendStream, quinn::RecvStream) {
    ask_waiting(conn, name, port, None).await
}

/// [`ask`], with the header's wait for a server to listen.
async fn ask_waiting(
    conn: &quinn::Connection,
    name: &str,
    port: u16,
    wait_ms: Option<u32>,
) -> (StreamAnswer, quinn::SendStream, quinn::RecvStream) {
    let (mut send, mut recv) = conn.open_bi().await.expect("stream");
    let header = StreamHeader {
        name: PreviewName::parse(name).expect("name"),
        port: Port::try_from(port).expect("port"),
        client: "198.51.100.1:1234".parse().expect("addr"),
        wait_ms,
    };
    write_frame(&mut send, &header).await.expect("header");
    let answer = tokio::time::timeout(Duration::from_secs(10), read_frame(&mut recv))
        .await
        .expect("an answer in time")
        .expect("a frame")
        .expect("not the end");
    (answer, send, recv)
}

/// A TCP server that counts the connections it accepts and answers each
/// with `reply`.
async fn counting_server(bind: SocketAddr, reply: &'static [u8]) -> (u16, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind(bind).await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let _ = stream.write_all(reply).await;
            });
        }
    });
    (port, accepted)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_previewed_ports_under_their_own_names_are_forwarded() {
    let (agent, conn, _dir) = fake_edge().await;
    let loopback: SocketAddr = "127.0.0.1:0".parse().expect("addr");
    let (previewed, previewed_hits) = counting_server(loopback, b"previewed\n").await;
    let (other, other_hits) = counting_server(loopback, b"secret\n").await;
    let web = PreviewName::parse("web").expect("name");
    agent
        .preview_with(
            Port::try_from(previewed).expect("port"),
            Some(web),
            unprobed(),
        )
        .await
        .expect("preview");

    // The edge asks for a port that is not previewed: refused, never dialled.
    let (answer, ..) = ask(&conn, "web", other).await;
    assert_eq!(
        answer,
        StreamAnswer::Refused {
            reason: StreamRefusal::NotPreviewed,
            message: format!("port {other} is not previewed as web"),
        }
    );
    // A previewed port under a name it is not previewed as: refused too.
    let (answer, ..) = ask(&conn, "other-name", previewed).await;
    assert!(matches!(
        answer,
        StreamAnswer::Refused {
            reason: StreamRefusal::NotPreviewed,
            ..
        }
    ));
    assert_eq!(other_hits.load(Ordering::SeqCst), 0);
    // The preview's check that something listens connects once; its
    // accept may be counted a moment after the connect returned (under
    // load, after the refusals above): wait for it, then it is the only
    // one.
    let checked = calvin_tests::eventually(std::time::Duration::from_secs(5), || async {
        (previewed_hits.load(Ordering::SeqCst) > 0).then_some(())
    })
    .await;
    assert!(
        checked.is_some(),
        "the preview's listening check never came"
    );
    assert_eq!(
        previewed_hits.load(Ordering::SeqCst),
        1,
        "only the preview's listening check"
    );

    // The right name and port: accepted, and the bytes are the server's.
    let (answer, _send, mut recv) = ask(&conn, "web", previewed).await;
    assert_eq!(answer, StreamAnswer::Accepted);
    let mut got = Vec::new();
    AsyncReadExt::read_to_end(&mut recv, &mut got)
        .await
        .expect("read");
    assert_eq!(got, b"previewed\n");
    assert_eq!(other_hits.load(Ordering::SeqCst), 0);

    // After unpreview the port is refused again.
    agent
        .unpreview(&PreviewName::parse("web").expect("name"))
        .await
        .expect("unpreview");
    let (answer, ..) = ask(&conn, "web", previewed).await;
    assert!(matches!(
        answer,
        StreamAnswer::Refused {
            reason: StreamRefusal::NotPreviewed,
            ..
        }
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_on_ipv6_loopback_only_is_reached() {
    let (agent, conn, _dir) = fake_edge().await;
    let (port, hits) = counting_server("[::1]:0".parse().expect("addr"), b"over ::1\n").await;
    let created = agent
        .preview_with(Port::try_from(port).expect("port"), None, unprobed())
        .await
        .expect("preview");
    assert!(
        created.listening,
        "a server on ::1 only counts as listening"
    );
    let (answer, _send, mut recv) = ask(&conn, &created.name, port).await;
    assert_eq!(answer, StreamAnswer::Accepted);
    let mut got = Vec::new();
    AsyncReadExt::read_to_end(&mut recv, &mut got)
        .await
        .expect("read");
    assert_eq!(got, b"over ::1\n");
    assert_eq!(hits.load(Ordering::SeqCst), 2, "the probe and the stream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_listening_is_refused_as_such() {
    let (agent, conn, _dir) = fake_edge().await;
    let silent = silent_port();
    let port = silent.port();
    agent
        .preview_with(Port::try_from(port).expect("port"), None, unprobed())
        .await
        .expect("preview");
    let (answer, ..) = ask(&conn, "fake", port).await;
    assert!(
        matches!(
            answer,
            StreamAnswer::Refused {
                reason: StreamRefusal::ConnectionRefused,
                ..
            }
        ),
        "{answer:?}"
    );
}

/// A server restarting is waited for on the agent's machine when the edge
/// asks it to (`wait_ms`): one stream, answered once the port listens; a
/// port that stays shut is refused once the wait is over; without a wait,
/// at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_waits_for_a_restarting_server_as_long_as_asked() {
    let (agent, conn, _dir) = fake_edge().await;
    let silent = silent_port();
    let port = silent.port();
    let created = agent
        .preview_with(Port::try_from(port).expect("port"), None, unprobed())
        .await
        .expect("preview");
    assert!(!created.listening);

    let started = std::time::Instant::now();
    let (answer, ..) = ask(&conn, &created.name, port).await;
    assert!(matches!(
        answer,
        StreamAnswer::Refused {
            reason: StreamRefusal::ConnectionRefused,
            ..
        }
    ));
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );

    let started = std::time::Instant::now();
    let (answer, ..) = ask_waiting(&conn, &created.name, port, Some(800)).await;
    assert!(matches!(
        answer,
        StreamAnswer::Refused {
            reason: StreamRefusal::ConnectionRefused,
            ..
        }
    ));
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(700) && took < Duration::from_secs(3),
        "refused after {took:?} for a wait of 800 ms"
    );

    // The server comes up 400 ms into a 10 s wait: accepted then.
    let started = std::time::Instant::now();
    let bind: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
    let late = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(400)).await;
        counting_server(bind, b"back\n").await
    });
    let (answer, _send, mut recv) = ask_waiting(&conn, &created.name, port, Some(10_000)).await;
    let took = started.elapsed();
    assert_eq!(answer, StreamAnswer::Accepted);
    assert!(
        took >= Duration::from_millis(400) && took < Duration::from_secs(3),
        "accepted after {took:?}"
    );
    let (_, hits) = late.await.expect("server");
    let mut got = Vec::new();
    AsyncReadExt::read_to_end(&mut recv, &mut got)
        .await
        .expect("read");
    assert_eq!(got, b"back\n");
    assert_eq!(
        hits.load(Ordering::SeqCst),
        1,
        "one connection, not one per try"
    );
}

/// The counting servers here count connections, and answer no HTTP: the
/// probe's request (and its TLS check) would be counted too. The probe has
/// its own tests (`preview_diagnostics`).
fn unprobed() -> calvin_agent::PreviewOptions {
    calvin_agent::PreviewOptions {
        probe: false,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_that_does_not_protect_previews_gets_no_protected_preview() {
    let (agent, conn, _dir) = fake_edge_that(false).await;
    let silent = silent_port();
    let port = Port::try_from(silent.port()).expect("port");
    let options = calvin_agent::PreviewOptions {
        probe: false,
        protect: Some(true),
        ..Default::default()
    };
    let name = PreviewName::parse("guarded").expect("name");
    let err = agent
        .preview_with(port, Some(name.clone()), options)
        .await
        .expect_err("an edge that cannot protect it");
    assert!(
        err.to_string()
            .contains("this edge does not protect previews (an older version)"),
        "{err}"
    );
    // Not held: a stream the edge opens for it is refused.
    assert!(agent.list().previews.is_empty());
    let (answer, _, _) = ask(&conn, "guarded", port.get()).await;
    assert!(matches!(answer, StreamAnswer::Refused { .. }), "{answer:?}");
}
