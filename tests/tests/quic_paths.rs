//! The QUIC path between agent and edge: jumbo packets when both are on
//! this machine, and who keeps an idle connection alive.

use std::time::Duration;

use calvin_agent::{EdgeAddress, LinkState};
use calvin_tests::*;

/// The path MTU a connection has settled on, once it stops changing.
async fn settled_mtu(conn: &quinn::Connection) -> u16 {
    let mut last = conn.stats().path.current_mtu;
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = conn.stats().path.current_mtu;
        if now == last && now > 1200 {
            break;
        }
        last = now;
    }
    conn.stats().path.current_mtu
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_on_this_machine_gets_jumbo_packets() {
    let edge = TestEdge::start().await;
    let address = EdgeAddress::new(&edge.quic.to_string(), Some(&edge.ca()), Some("localhost"))
        .expect("edge address");
    let conn = address.connect().await.expect("handshake");
    let mtu = settled_mtu(&conn).await;
    assert!(
        mtu >= 9_000,
        "a loopback agent's path should carry jumbo packets, got {mtu}"
    );

    // The same dial to a QUIC server with quinn's default endpoint (which
    // takes datagrams of 1,472 bytes at most) stays at Ethernet size: the
    // edge's raised limit is what lets the agent's packets grow.
    let (plain, address, _dir) = plain_quic_server();
    let accept = tokio::spawn(async move {
        let conn = plain
            .accept()
            .await
            .expect("incoming")
            .await
            .expect("handshake");
        conn.closed().await;
    });
    let small = address.connect().await.expect("handshake");
    let mtu = settled_mtu(&small).await;
    assert!(
        mtu <= 1_472,
        "a peer that takes 1,472-byte datagrams must not get bigger ones, got {mtu}"
    );
    small.close(0u32.into(), b"done");
    let _ = tokio::time::timeout(Duration::from_secs(5), accept).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_agent_stays_connected_past_the_idle_timeout() {
    // The edge sends no pings of its own: the agent's keep the connection
    // (and the edge's idle timer) alive.
    let edge = TestEdge::start().await;
    let agent = TestAgent::start(&edge, "alice").await;
    let origin = Origin::start().await;
    let created = agent.preview(origin.port, None).await;
    let mut state = agent.agent.state();
    state.borrow_and_update();

    let idle = calvin_proto::IDLE_TIMEOUT + Duration::from_secs(5);
    tokio::time::sleep(idle).await;

    assert!(
        !state.has_changed().expect("agent running"),
        "the link changed state while idle"
    );
    assert!(matches!(*state.borrow(), LinkState::Connected(_)));
    let got = curl(&edge.ca(), &[&format!("{}/hello", created.url)]).await;
    assert_eq!(got.status, 200, "{}", got.text());
}
