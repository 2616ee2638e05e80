//! The agent link's budgets, over a real QUIC connection on loopback: the
//! idle connections an agent's previews may keep, and the requests an
//! account may have under way, each at its limit and one past it.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

use super::*;
use crate::bandwidth::Buckets;
use crate::certs::cert_store::CertStore;

fn settings(max_idle_per_agent: usize, max_streams_per_account: usize) -> Arc<UpstreamSettings> {
    Arc::new(UpstreamSettings {
        connect_timeout: Duration::from_secs(5),
        max_idle_per_preview: 8,
        max_idle_per_agent,
        idle_timeout: Duration::from_secs(60),
        reconnect_wait: Duration::from_secs(1),
        max_streams_per_account,
        bandwidth: Buckets::new(0),
    })
}

/// The edge's side of a QUIC connection an agent opened on loopback, and
/// what keeps it open.
async fn agent_connection() -> (quinn::Connection, Kept) {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = crate::dev::load_or_create(dir.path(), "preview.test").expect("dev state");
    let certs = Arc::new(CertStore::new());
    certs.install(&state.tls).expect("certificate");
    let server = crate::certs::tls::quic_config(certs, true, false).expect("quic config");
    let edge = quinn::Endpoint::server(server, "127.0.0.1:0".parse().expect("addr"))
        .expect("edge endpoint");
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_file_iter(state.ca_path()).expect("CA file") {
        roots.add(ca.expect("CA")).expect("root");
    }
    let mut tls = rustls::ClientConfig::builder_with_provider(crate::certs::tls::provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("TLS 1.3")
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![calvin_proto::ALPN.to_vec()];
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls).expect("QUIC TLS");
    let mut agent =
        quinn::Endpoint::client("127.0.0.1:0".parse().expect("addr")).expect("agent endpoint");
    agent.set_default_client_config(quinn::ClientConfig::new(Arc::new(crypto)));
    let dialled = agent
        .connect(edge.local_addr().expect("addr"), "localhost")
        .expect("connect");
    let (accepted, dialled) = tokio::join!(
        async {
            edge.accept()
                .await
                .expect("incoming")
                .await
                .expect("handshake")
        },
        dialled
    );
    let kept = Kept {
        _agent: dialled.expect("agent's handshake"),
        _endpoints: [agent, edge],
        _dir: dir,
    };
    (accepted, kept)
}

/// What a test's connection needs kept open: the agent's side, both
/// endpoints, the state folder.
struct Kept {
    _agent: quinn::Connection,
    _endpoints: [quinn::Endpoint; 2],
    _dir: tempfile::TempDir,
}

#[tokio::test]
async fn an_agents_idle_connections_are_kept_up_to_its_budget() {
    let (conn, _kept) = agent_connection().await;
    let link = AgentLink::new(conn, settings(2, 10), Arc::default(), None);
    assert!(link.reserve_idle() && link.reserve_idle());
    assert!(!link.reserve_idle(), "a third past a budget of 2");
    link.release_idle(1);
    assert!(link.reserve_idle(), "one freed, one more kept");
}

#[tokio::test]
async fn a_link_through_another_edge_keeps_at_most_its_own_smaller_budget() {
    let (conn, _kept) = agent_connection().await;
    let link = AgentLink::through_peer(conn, settings(1000, 10), Arc::default(), None);
    for i in 0..PEER_MAX_IDLE {
        assert!(link.reserve_idle(), "idle connection {i}");
    }
    assert!(!link.reserve_idle(), "one past {PEER_MAX_IDLE}");
}

#[tokio::test]
async fn an_account_has_at_most_its_requests_under_way_over_all_its_agents() {
    let (first, _kept_first) = agent_connection().await;
    let (second, _kept_second) = agent_connection().await;
    // Two agents of one account share its count.
    let account = Arc::new(AtomicUsize::new(0));
    let one = AgentLink::new(first, settings(8, 2), account.clone(), None);
    let other = AgentLink::new(second, settings(8, 2), account.clone(), None);
    let a = one.wait_on().expect("first under way");
    let _b = other.wait_on().expect("second under way");
    assert!(matches!(one.wait_on(), Err(UpstreamError::AccountBusy(2))));
    assert!(matches!(
        other.wait_on(),
        Err(UpstreamError::AccountBusy(2))
    ));
    drop(a);
    assert!(other.wait_on().is_ok(), "one ended, one more under way");
}

/// A preview's upstream over a real QUIC connection, and the agent's end
/// of it: each stream the edge opens is accepted as an agent accepts it
/// (its header read, `Accepted` answered) and handed to the test, which
/// plays the origin on it.
async fn upstream_to_origin() -> (Arc<Upstream>, Streams, Kept) {
    let (conn, kept) = agent_connection().await;
    let agent = kept._agent.clone();
    let (handed, streams) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut send, mut recv)) = agent.accept_bi().await {
            let header = read_frame::<StreamHeader, _>(&mut recv).await;
            assert!(matches!(header, Ok(Some(_))), "a stream header");
            write_frame(&mut send, &StreamAnswer::Accepted)
                .await
                .expect("accepted");
            if handed.send((send, recv)).is_err() {
                return;
            }
        }
    });
    let link = AgentLink::new(conn, settings(8, 10), Arc::default(), None);
    let name = PreviewName::parse("app").expect("name");
    let port = Port::try_from(3000u16).expect("port");
    (Upstream::new(name, port, link, None), streams, kept)
}

type Streams = tokio::sync::mpsc::UnboundedReceiver<(quinn::SendStream, quinn::RecvStream)>;

const VISITOR: &str = "192.0.2.7:4000";

/// A request through the upstream, its body's frames as `frames` gives
/// them (none: no body).
fn request(
    method: &str,
    target: &str,
    fields: &[(&str, &str)],
    frames: Option<tokio::sync::mpsc::Receiver<Frame<Bytes>>>,
) -> Outgoing {
    let body = match frames {
        Some(frames) => http_body_util::combinators::BoxBody::new(Frames(frames)),
        None => http_body_util::combinators::BoxBody::new(
            http_body_util::Empty::new().map_err(|never| match never {}),
        ),
    };
    let (body, _watch) = crate::request_body::RequestBody::new(
        crate::request_body::VisitorBody::Test(body),
        None,
        None,
    );
    let mut req = http::Request::builder().method(method).uri(target);
    for (name, value) in fields {
        req = req.header(*name, *value);
    }
    origin::OriginRequest::new(req.body(body).expect("request"))
}

use http_body_util::BodyExt as _;

/// A body whose frames a channel brings.
struct Frames(tokio::sync::mpsc::Receiver<Frame<Bytes>>);

impl Body for Frames {
    type Data = Bytes;
    type Error = crate::request_body::BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.0.poll_recv(cx).map(|frame| frame.map(Ok))
    }
}

/// Reads what the edge wrote on an origin's stream until it ends with
/// `end`.
async fn read_until(recv: &mut quinn::RecvStream, end: &[u8]) -> Vec<u8> {
    let mut read = Vec::new();
    while !read.ends_with(end) {
        let chunk = tokio::time::timeout(Duration::from_secs(5), recv.read_chunk(usize::MAX, true))
            .await
            .expect("the edge wrote on")
            .expect("a read")
            .expect("not the stream's end");
        read.extend_from_slice(&chunk.bytes);
    }
    read
}

/// The origin's side of the next stream the edge opens: what the edge
/// wrote on it up to `until`, answered with `answer`; the stream kept for
/// what follows.
async fn answer_next(
    streams: &mut Streams,
    until: &[u8],
    answer: &[u8],
) -> (quinn::SendStream, quinn::RecvStream, Vec<u8>) {
    let (mut send, mut recv) = streams.recv().await.expect("a new stream");
    let asked = read_until(&mut recv, until).await;
    send.write_all(answer).await.expect("answer");
    (send, recv, asked)
}

/// A response body's data, and its trailers.
async fn collect(body: OriginBody, waiting: Waiting) -> (Vec<u8>, Option<http::HeaderMap>) {
    let mut body = ResponseBody::new(body, waiting);
    let (mut data, mut trailers) = (Vec::new(), None);
    while let Some(frame) = body.frame().await {
        let frame = frame.expect("a whole body");
        match frame.into_data() {
            Ok(bytes) => data.extend_from_slice(&bytes),
            Err(frame) => trailers = frame.into_trailers().ok(),
        }
    }
    (data, trailers)
}

#[tokio::test]
async fn a_request_is_written_once_and_its_answer_read_with_every_field_then_the_stream_serves_the_next()
 {
    let (upstream, mut streams, _kept) = upstream_to_origin().await;
    let visitor = VISITOR.parse().expect("addr");
    let get = request("GET", "/page?x=1", &[("host", "app.preview.test")], None);
    let answer = b"HTTP/1.1 200 Fine\r\nX-Two: 1\r\nx-two: 2\r\nContent-Length: 5\r\n\r\nhello";
    let origin = answer_next(&mut streams, b"\r\n\r\n", answer);
    let (sent, (mut send, mut recv, asked)) = tokio::join!(upstream.send(get, visitor), origin);
    assert_eq!(
        String::from_utf8_lossy(&asked),
        "GET /page?x=1 HTTP/1.1\r\nhost: app.preview.test\r\n\r\n"
    );
    let Ok((response, waiting)) = sent else {
        panic!("no answer")
    };
    assert_eq!(response.status(), 200);
    let twos: Vec<_> = response.headers().get_all("x-two").iter().collect();
    assert_eq!(twos, ["1", "2"]);
    let reason = response.extensions().get::<hyper::ext::ReasonPhrase>();
    assert_eq!(reason.map(|r| r.as_bytes()), Some(&b"Fine"[..]));
    assert_eq!(response.body().size_hint().exact(), Some(5));
    let (data, trailers) = collect(response.into_body(), waiting).await;
    assert_eq!((&data[..], trailers), (&b"hello"[..], None));

    // Ended where its length said: the same stream carries the next.
    let next = request("DELETE", "/item", &[("host", "app.preview.test")], None);
    let origin = async {
        let asked = read_until(&mut recv, b"\r\n\r\n").await;
        send.write_all(b"HTTP/1.1 204 No Content\r\n\r\n")
            .await
            .expect("answer");
        asked
    };
    let (sent, asked) = tokio::join!(upstream.send(next, visitor), origin);
    assert!(asked.starts_with(b"DELETE /item HTTP/1.1\r\n"));
    assert_eq!(
        sent.ok().map(|(r, _)| r.status()),
        Some(http::StatusCode::NO_CONTENT)
    );
    assert!(streams.try_recv().is_err(), "no second stream was opened");
}

#[tokio::test]
async fn a_chunked_answer_reaches_the_visitor_as_its_data_then_its_trailers() {
    let (upstream, mut streams, _kept) = upstream_to_origin().await;
    let visitor = VISITOR.parse().expect("addr");
    let origin = async {
        let (mut send, mut recv) = streams.recv().await.expect("a stream");
        read_until(&mut recv, b"\r\n\r\n").await;
        // In pieces that cut a size line, data and the trailers.
        let pieces: [&[u8]; 4] = [
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r",
            b"\nhel",
            b"lo\r\n6\r\n world\r\n0\r\nx-sum: 1",
            b"1\r\n\r\n",
        ];
        for piece in pieces {
            send.write_all(piece).await.expect("answer");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        (send, recv)
    };
    let get = request("GET", "/", &[("host", "app.preview.test")], None);
    let (sent, _kept_stream) = tokio::join!(
        async {
            let (response, waiting) = upstream.send(get, visitor).await.ok().expect("answer");
            collect(response.into_body(), waiting).await
        },
        origin
    );
    let (data, trailers) = sent;
    assert_eq!(String::from_utf8_lossy(&data), "hello world");
    let trailers = trailers.expect("trailers");
    assert_eq!(
        trailers.get("x-sum").map(|v| v.as_bytes()),
        Some(&b"11"[..])
    );
    assert_eq!(upstream.lock().len(), 1, "the connection is pooled");
}

#[tokio::test]
async fn an_answer_followed_by_bytes_no_request_asked_for_is_never_pooled() {
    let (upstream, mut streams, _kept) = upstream_to_origin().await;
    let visitor = VISITOR.parse().expect("addr");
    for (answer, status) in [
        (&b"HTTP/1.1 204 No Content\r\n\r\nextra"[..], 204),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\n\r\n",
            200,
        ),
    ] {
        let origin = answer_next(&mut streams, b"\r\n\r\n", answer);
        let get = request("GET", "/", &[("host", "app.preview.test")], None);
        let (sent, _stream) = tokio::join!(
            async {
                let (response, waiting) = upstream.send(get, visitor).await.ok().expect("answer");
                assert_eq!(response.status().as_u16(), status);
                collect(response.into_body(), waiting).await
            },
            origin
        );
        assert_eq!(sent.0.len(), if status == 200 { 2 } else { 0 });
        assert_eq!(upstream.lock().len(), 0, "{status}: not pooled");
    }
}

#[tokio::test]
async fn an_upload_of_unknown_length_goes_chunked_with_the_trailers_it_declared() {
    let (upstream, mut streams, _kept) = upstream_to_origin().await;
    let visitor = VISITOR.parse().expect("addr");
    let (frames, body) = tokio::sync::mpsc::channel(4);
    for data in ["ab", "cde"] {
        frames
            .send(Frame::data(Bytes::from(data)))
            .await
            .expect("frame");
    }
    let mut trailers = http::HeaderMap::new();
    trailers.insert("x-check", http::HeaderValue::from_static("ok"));
    trailers.insert("content-type", http::HeaderValue::from_static("text/nope"));
    trailers.insert("x-undeclared", http::HeaderValue::from_static("no"));
    frames
        .send(Frame::trailers(trailers))
        .await
        .expect("trailers");
    drop(frames);
    let fields = [
        ("host", "app.preview.test"),
        ("trailer", "x-check, content-type"),
    ];
    let post = request("POST", "/up", &fields, Some(body));
    let origin = answer_next(
        &mut streams,
        b"0\r\nx-check: ok\r\n\r\n",
        b"HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n",
    );
    let (sent, (_send, _recv, asked)) = tokio::join!(upstream.send(post, visitor), origin);
    assert_eq!(
        String::from_utf8_lossy(&asked),
        "POST /up HTTP/1.1\r\nhost: app.preview.test\r\ntrailer: x-check, content-type\r\n\
         transfer-encoding: chunked\r\n\r\n2\r\nab\r\n3\r\ncde\r\n0\r\nx-check: ok\r\n\r\n"
    );
    assert_eq!(sent.ok().map(|(r, _)| r.status().as_u16()), Some(201));
    assert_eq!(upstream.lock().len(), 1, "all sent, all answered: pooled");
}

#[tokio::test]
async fn interim_answers_are_read_past_to_the_final_one() {
    let (upstream, mut streams, _kept) = upstream_to_origin().await;
    let visitor = VISITOR.parse().expect("addr");
    let answer = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n\
        HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    let origin = answer_next(&mut streams, b"\r\n\r\n", answer);
    let get = request("GET", "/", &[("host", "app.preview.test")], None);
    let (sent, _stream) = tokio::join!(
        async {
            let (response, waiting) = upstream.send(get, visitor).await.ok().expect("answer");
            assert_eq!(response.status(), 200);
            assert_eq!(response.headers().get("link"), None);
            collect(response.into_body(), waiting).await
        },
        origin
    );
    assert_eq!(sent.0, b"ok");
}

#[tokio::test]
async fn an_answer_before_the_upload_ended_ends_the_connection_with_it() {
    let (upstream, mut streams, _kept) = upstream_to_origin().await;
    let visitor = VISITOR.parse().expect("addr");
    let (frames, body) = tokio::sync::mpsc::channel(4);
    frames
        .send(Frame::data(Bytes::from_static(b"abc")))
        .await
        .expect("frame");
    let fields = [("host", "app.preview.test"), ("content-length", "10")];
    let post = request("POST", "/up", &fields, Some(body));
    let origin = answer_next(
        &mut streams,
        b"abc",
        b"HTTP/1.1 413 Content Too Large\r\nContent-Length: 0\r\n\r\n",
    );
    let (sent, (_send, mut recv, asked)) = tokio::join!(upstream.send(post, visitor), origin);
    assert!(String::from_utf8_lossy(&asked).contains("content-length: 10\r\n\r\nabc"));
    let (response, waiting) = sent.ok().expect("answer");
    assert_eq!(response.status().as_u16(), 413);
    drop(collect(response.into_body(), waiting).await);
    assert_eq!(upstream.lock().len(), 0, "7 bytes never sent: not pooled");
    // The rest of the upload is not sent: the stream is cut off.
    let rest = tokio::time::timeout(Duration::from_secs(5), recv.read_chunk(usize::MAX, true))
        .await
        .expect("the edge let go");
    assert!(rest.is_err(), "reset, not ended: {rest:?}");
    drop(frames);
}
