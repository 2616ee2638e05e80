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
        let conn = accept_agent(&plain).await;
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

/// Streams at once, and bytes on each, in the many-streams test.
const STREAMS: usize = 8;
const PER_STREAM: usize = 16 << 20;

/// The most bytes read or written at once in the many-streams test.
const CHUNK: usize = 64 << 10;

/// Every stream in the many-streams test carries bytes 0..251 over and
/// over: the bytes from `offset` on are this buffer's from `offset % 251`,
/// so one buffer serves every write and check, and both sides keep pace.
fn pattern_source() -> Vec<u8> {
    (0..CHUNK + 251).map(|i| (i % 251) as u8).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_streams_to_a_receiver_that_falls_behind_lose_no_packets() {
    // The edge's side on a thread of its own that stalls for 60 ms of
    // every 65 (an edge busy with other work): whatever the agent has sent
    // meanwhile waits in the edge's UDP buffer. The agent may keep only so
    // much unacknowledged, over all its streams, that the buffer never
    // overflows; a drop would be taken for congestion and slow every
    // transfer on the connection.
    let (address_tx, address_rx) = std::sync::mpsc::channel();
    let edge = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async move {
            let (endpoint, address, _dir) = quic_server(true);
            address_tx.send(address).expect("test waits");
            let conn = accept_agent(&endpoint).await;
            let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let stall = tokio::spawn({
                let done = done.clone();
                async move {
                    while !done.load(std::sync::atomic::Ordering::Relaxed) {
                        std::thread::sleep(Duration::from_millis(60));
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                }
            });
            let mut readers = Vec::new();
            for i in 0..STREAMS {
                let (mut send, mut recv) = conn.open_bi().await.expect("open stream");
                send.write_all(&[i as u8]).await.expect("first byte");
                readers.push(tokio::spawn(async move {
                    let source = pattern_source();
                    let mut offset = 0;
                    while let Some(chunk) = recv.read_chunk(CHUNK, true).await.expect("read") {
                        let start = offset % 251;
                        assert!(
                            chunk.bytes[..] == source[start..start + chunk.bytes.len()],
                            "the bytes at {offset}"
                        );
                        offset += chunk.bytes.len();
                    }
                    drop(send);
                    offset
                }));
            }
            let mut got = Vec::new();
            for reader in readers {
                got.push(reader.await.expect("reader"));
            }
            done.store(true, std::sync::atomic::Ordering::Relaxed);
            let _ = stall.await;
            conn.close(0u32.into(), b"done");
            got
        })
    });

    let address = address_rx.recv().expect("edge up");
    let conn = address.connect().await.expect("handshake");
    let mut writers = Vec::new();
    for _ in 0..STREAMS {
        let (mut send, mut recv) = conn.accept_bi().await.expect("stream from the edge");
        let mut first = [0u8; 1];
        recv.read_exact(&mut first).await.expect("first byte");
        writers.push(tokio::spawn(async move {
            let source = pattern_source();
            let mut offset = 0;
            while offset < PER_STREAM {
                let len = CHUNK.min(PER_STREAM - offset);
                let start = offset % 251;
                send.write_all(&source[start..start + len])
                    .await
                    .expect("write");
                offset += len;
            }
            send.finish().expect("finish");
            let _ = send.stopped().await;
        }));
    }
    for writer in writers {
        writer.await.expect("writer");
    }
    let got = tokio::task::spawn_blocking(move || edge.join().expect("edge thread"))
        .await
        .expect("join");
    assert_eq!(
        got,
        vec![PER_STREAM; STREAMS],
        "bytes each stream delivered"
    );
    let path = conn.stats().path;
    assert_eq!(
        (path.lost_packets, path.congestion_events),
        (0, 0),
        "packets lost and congestion events on a loopback path whose receiver fell behind \
         ({} packets sent)",
        path.sent_packets
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_asks_the_edge_to_acknowledge_its_pings_at_once() {
    // With the ACK delay the edge would wake twice per keep-alive (the
    // ping, then its ACK timer); an ACK_FREQUENCY frame asking for an ACK
    // on every packet makes it once. Both ends must take part: the agent
    // sends the frame, the edge's configuration receives it.
    for loopback in [true, false] {
        let (server, address, _dir) = quic_server(loopback);
        let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
        let accepted = tokio::spawn(async move {
            let conn = accept_agent(&server).await;
            let _ = done_rx.await;
            conn.stats().frame_rx.ack_frequency
        });
        let conn = address.connect().await.expect("handshake");
        tokio::time::sleep(Duration::from_millis(200)).await;

        // What the edge does with it: a lone packet from the agent (one
        // stream write the edge never answers) is acknowledged at once, not
        // after quinn's 25 ms ACK delay.
        let (mut send, _recv) = conn.open_bi().await.expect("stream");
        let mut waits = Vec::new();
        for _ in 0..15 {
            let acks = conn.stats().frame_rx.acks;
            let sent = std::time::Instant::now();
            send.write_all(b"x").await.expect("write");
            while conn.stats().frame_rx.acks == acks && sent.elapsed() < Duration::from_secs(1) {
                tokio::time::sleep(Duration::from_micros(200)).await;
            }
            waits.push(sent.elapsed());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        waits.sort();
        // Every lone packet acknowledged; how soon (quinn's ACK delay is
        // 25 ms) is this machine's timing, printed: that the edge was told
        // to acknowledge at once is the frames' count below.
        assert!(
            waits.iter().all(|w| *w < Duration::from_secs(1)),
            "a lone packet was not acknowledged: {waits:?}"
        );
        eprintln!(
            "the edge's ACK of a lone packet: median {:?} (all: {waits:?}; loopback path: {loopback})",
            waits[waits.len() / 2]
        );

        let _ = done_tx.send(());
        let received = accepted.await.expect("edge side");
        let sent = conn.stats().frame_tx.ack_frequency;
        assert!(
            sent >= 1 && received == sent,
            "ACK_FREQUENCY frames: {sent} sent by the agent, {received} received by the edge \
             (loopback path: {loopback})"
        );
        conn.close(0u32.into(), b"done");
    }
}
