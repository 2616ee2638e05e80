//! Closed-loop HTTP/2 or HTTP/3 load (figure 1's h2 and h3 rows), and
//! large transfers over them (figure 2's).
//!
//! Closed loop: `--connections` connections, each with one request at a
//! time (as wrk's `-c` is for HTTP/1.1), for `--duration`. For HTTP/3 that
//! is N QUIC connections, each its own UDP socket, rather than N streams on
//! one: the edge's per-connection work (a handshake, a congestion
//! controller, its own packets) is then what 64 visitors make it do, and the
//! h2 row has the same shape over TCP, so their ratio compares protocols,
//! not multiplexing. Each connection carries one request before the clock
//! starts. Every answer is checked: a non-2xx status, or a body shorter or
//! longer than `--expect-bytes` (or than its content-length), is counted
//! and not a fast answer; `bench/run` fails the row on any.
//!
//! Transfer (`--download N` / `--upload N` MiB): `--parallel` streams on one
//! connection, each a GET of the URL whose body must be N MiB, or a POST of
//! N MiB that must be answered 2xx; MiB/s over the wall time. Any other
//! answer is an error (exit status 1).

use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use serde_json::json;

use crate::h2h3::{Answer, Conn, Endpoint, EndpointArgs, Protocol};
use crate::stats::{Samples, emit, micros};

/// A request that takes longer than this is an error.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
const MIB: u64 = 1 << 20;

#[derive(Debug, clap::Args)]
pub struct LoadArgs {
    #[command(flatten)]
    pub endpoint: EndpointArgs,
    /// Connections, each with one request at a time
    #[arg(long, default_value_t = 64)]
    pub connections: usize,
    /// How long to load, e.g. 10s
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
    pub duration: Duration,
    /// The body length every answer must have [default: its content-length]
    #[arg(long, value_name = "BYTES")]
    pub expect_bytes: Option<u64>,
    /// Transfer mode: GET the URL, whose body must be this many MiB
    #[arg(long, value_name = "MIB", conflicts_with = "upload")]
    pub download: Option<u64>,
    /// Transfer mode: POST this many MiB to the URL
    #[arg(long, value_name = "MIB")]
    pub upload: Option<u64>,
    /// Transfer mode: streams at once on the one connection
    #[arg(long, default_value_t = 1)]
    pub parallel: usize,
    /// Threads of the load program (wrk's -t); the other subcommands run on one
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
}

pub async fn run(args: LoadArgs) -> anyhow::Result<()> {
    emit(&measure(&args).await?);
    Ok(())
}

/// The measurement `args` asks for, as the JSON line `run` prints.
pub async fn measure(args: &LoadArgs) -> anyhow::Result<serde_json::Value> {
    let endpoint = Endpoint::new(&args.endpoint).await?;
    match (args.download, args.upload) {
        (Some(mib), _) => transfer(&endpoint, mib * MIB, 0, args.parallel).await,
        (_, Some(mib)) => transfer(&endpoint, 0, mib * MIB, args.parallel).await,
        _ => closed_loop(&endpoint, args).await,
    }
}

fn protocol_name(endpoint: &Endpoint) -> &'static str {
    match endpoint.protocol() {
        Protocol::H2 => "h2",
        Protocol::H3 => "h3",
    }
}

/// What went wrong with an answer, if anything: not 2xx, or a body of
/// another length than expected.
fn fault(answer: &Answer, expect: Option<u64>) -> Option<Fault> {
    if !answer.status.is_success() {
        return Some(Fault::Status);
    }
    match expect.or(answer.content_length) {
        Some(n) if n != answer.body_bytes => Some(Fault::Length),
        _ => None,
    }
}

enum Fault {
    Status,
    Length,
}

#[derive(Default)]
struct Tally {
    ok: u64,
    non_2xx: u64,
    wrong_length: u64,
    errors: u64,
    /// Connections the server closed between requests, dialled again.
    reconnects: u64,
    body_bytes: u64,
    latencies: Vec<u64>,
    last_error: Option<String>,
    last_done: Option<Instant>,
}

async fn closed_loop(endpoint: &Endpoint, args: &LoadArgs) -> anyhow::Result<serde_json::Value> {
    ensure!(args.connections > 0, "--connections must be above 0");
    let mut warming = tokio::task::JoinSet::new();
    for _ in 0..args.connections {
        let (endpoint, expect) = (endpoint.clone(), args.expect_bytes);
        warming.spawn(async move {
            let mut conn = endpoint.connect().await?;
            let answer = conn
                .request(&endpoint, 0)
                .await?
                .context("warm-up request: the connection closed at once")?;
            if fault(&answer, expect).is_some() {
                bail!(
                    "warm-up request: {} with {} body bytes",
                    answer.status,
                    answer.body_bytes
                );
            }
            anyhow::Ok(conn)
        });
    }
    let mut conns = Vec::with_capacity(args.connections);
    while let Some(conn) = warming.join_next().await {
        conns.push(conn??);
    }
    let start = Instant::now();
    let stop = start + args.duration;
    let mut workers = tokio::task::JoinSet::new();
    for conn in conns {
        workers.spawn(worker(endpoint.clone(), conn, args.expect_bytes, stop));
    }
    let mut tally = Tally::default();
    let mut closing = tokio::task::JoinSet::new();
    while let Some(done) = workers.join_next().await {
        let (t, conn) = done?;
        if let Some(conn) = conn {
            closing.spawn(conn.close());
        }
        tally.ok += t.ok;
        tally.non_2xx += t.non_2xx;
        tally.wrong_length += t.wrong_length;
        tally.errors += t.errors;
        tally.reconnects += t.reconnects;
        tally.body_bytes += t.body_bytes;
        tally.latencies.extend(t.latencies);
        tally.last_error = t.last_error.or(tally.last_error);
        tally.last_done = tally.last_done.max(t.last_done);
    }
    let elapsed = tally.last_done.map_or(0.0, |t| (t - start).as_secs_f64());
    closing.join_all().await;
    let samples = Samples::new(tally.latencies);
    Ok(json!({
        "protocol": protocol_name(endpoint),
        "connections": args.connections,
        "requests": tally.ok + tally.non_2xx + tally.wrong_length,
        "ok": tally.ok,
        "non_2xx": tally.non_2xx,
        "wrong_length": tally.wrong_length,
        "errors": tally.errors,
        "reconnects": tally.reconnects,
        "body_bytes": tally.body_bytes,
        "seconds": elapsed,
        "rps": if elapsed > 0.0 { tally.ok as f64 / elapsed } else { 0.0 },
        "p50_ms": samples.percentile_ms(50.0),
        "p90_ms": samples.percentile_ms(90.0),
        "p99_ms": samples.percentile_ms(99.0),
        "max_ms": samples.max_us() as f64 / 1000.0,
        "last_error": tally.last_error,
    }))
}

/// One connection: a request after another until `stop`; after an error,
/// or the server's closing it, a new connection, and the worker ends when
/// that cannot be had.
async fn worker(
    endpoint: Endpoint,
    conn: Conn,
    expect: Option<u64>,
    stop: Instant,
) -> (Tally, Option<Conn>) {
    let mut tally = Tally::default();
    let mut conn = Some(conn);
    while Instant::now() < stop {
        let mut c = match conn.take() {
            Some(c) => c,
            None => match endpoint.connect().await {
                Ok(c) => c,
                Err(err) => {
                    tally.errors += 1;
                    tally.last_error = Some(format!("{err:#}"));
                    break;
                }
            },
        };
        let sent = Instant::now();
        match tokio::time::timeout(REQUEST_TIMEOUT, c.request(&endpoint, 0)).await {
            Ok(Ok(None)) => tally.reconnects += 1,
            Ok(Ok(Some(answer))) => {
                let done = Instant::now();
                tally.body_bytes += answer.body_bytes;
                match fault(&answer, expect) {
                    None => {
                        tally.ok += 1;
                        tally.latencies.push(micros(done - sent));
                        tally.last_done = Some(done);
                    }
                    Some(Fault::Status) => {
                        tally.non_2xx += 1;
                        tally.last_error = Some(format!("status {}", answer.status));
                    }
                    Some(Fault::Length) => {
                        tally.wrong_length += 1;
                        tally.last_error = Some(format!(
                            "{} body bytes, expected {:?}",
                            answer.body_bytes,
                            expect.or(answer.content_length)
                        ));
                    }
                }
                conn = Some(c);
            }
            Ok(Err(err)) => {
                tally.errors += 1;
                tally.last_error = Some(format!("{err:#}"));
            }
            Err(_) => {
                tally.errors += 1;
                tally.last_error = Some("timed out".into());
            }
        }
    }
    (tally, conn)
}

/// `streams` GETs of `download` bytes each, or POSTs of `upload` bytes,
/// at once on one connection; MiB/s over the wall time.
async fn transfer(
    endpoint: &Endpoint,
    download: u64,
    upload: u64,
    streams: usize,
) -> anyhow::Result<serde_json::Value> {
    ensure!(streams > 0, "--parallel must be above 0");
    ensure!(download + upload > 0, "transfer 1 MiB or more");
    let conn = endpoint.connect().await?;
    let started = Instant::now();
    let mut running = tokio::task::JoinSet::new();
    for _ in 0..streams {
        let (endpoint, mut conn) = (endpoint.clone(), conn.clone());
        running.spawn(async move { conn.request(&endpoint, upload).await });
    }
    let mut moved = 0;
    while let Some(answer) = running.join_next().await {
        let answer = answer?
            .context("transfer")?
            .context("transfer: the connection closed before the request left")?;
        ensure!(
            answer.status.is_success(),
            "transfer answered {}",
            answer.status
        );
        if download > 0 {
            ensure!(
                answer.body_bytes == download,
                "download of {} bytes, expected {download}",
                answer.body_bytes
            );
            moved += answer.body_bytes;
        } else {
            moved += upload;
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    conn.close().await;
    Ok(json!({
        "protocol": protocol_name(endpoint),
        "direction": if download > 0 { "download" } else { "upload" },
        "streams": streams,
        "bytes": moved,
        "seconds": seconds,
        "mib_per_s": moved as f64 / MIB as f64 / seconds,
    }))
}

#[cfg(test)]
mod tests {
    //! Against this file's own HTTP/2 (hyper) and HTTP/3 (h3 over quinn)
    //! servers, which answer some requests wrongly on purpose.

    use std::net::SocketAddr;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use bytes::{Buf, Bytes};
    use http::{Response, StatusCode};
    use http_body_util::{BodyExt, Full};
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use rustls_pki_types::PrivateKeyDer;
    use rustls_pki_types::pem::PemObject;

    use super::*;

    const NAME: &str = "bench.test";
    /// The servers close a connection (GOAWAY) after this many requests, as
    /// nginx does after 1,000.
    const PER_CONNECTION: u64 = 40;

    /// The answer to the `n`th request (from 0) of `path` with a body of
    /// `got` bytes: `/flaky` is 503 every 5th and 1,000 bytes (no
    /// content-length) every 7th; `/big` is 4 MiB; a POST gets its length.
    fn answer(n: u64, path: &str, got: u64) -> (StatusCode, Bytes) {
        match path {
            "/flaky" if n % 5 == 4 => (StatusCode::SERVICE_UNAVAILABLE, Bytes::new()),
            "/flaky" if n % 7 == 6 => (StatusCode::OK, Bytes::from(vec![b'x'; 1000])),
            "/flaky" | "/1k" => (StatusCode::OK, Bytes::from(vec![b'x'; 1024])),
            "/big" => (StatusCode::OK, Bytes::from(vec![0; 4 << 20])),
            "/upload" => (StatusCode::OK, Bytes::from(got.to_string())),
            _ => (StatusCode::NOT_FOUND, Bytes::new()),
        }
    }

    fn tls(alpn: &[u8]) -> (rustls::ServerConfig, tempfile::NamedTempFile) {
        let cert = rcgen::generate_simple_self_signed(vec![NAME.to_owned()]).expect("cert");
        let ca = tempfile::NamedTempFile::new().expect("temp file");
        std::fs::write(ca.path(), cert.cert.pem()).expect("write");
        let key = PrivateKeyDer::from_pem_slice(cert.signing_key.serialize_pem().as_bytes())
            .expect("key");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .expect("versions")
            .with_no_client_auth()
            .with_single_cert(vec![cert.cert.der().clone()], key)
            .expect("server config");
        config.alpn_protocols = vec![alpn.to_vec()];
        (config, ca)
    }

    /// An HTTP/2 server on a port of loopback; its address and CA file.
    async fn h2_server() -> (SocketAddr, tempfile::NamedTempFile) {
        let (config, ca) = tls(b"h2");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let count = Arc::new(AtomicU64::new(0));
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, count) = (acceptor.clone(), count.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let served = Arc::new(AtomicU64::new(0));
                    let enough = Arc::new(tokio::sync::Notify::new());
                    let (on_conn, notify) = (served.clone(), enough.clone());
                    let service = hyper::service::service_fn(
                        move |req: http::Request<hyper::body::Incoming>| {
                            let count = count.clone();
                            if on_conn.fetch_add(1, Ordering::Relaxed) + 1 == PER_CONNECTION {
                                notify.notify_one();
                            }
                            async move {
                                let path = req.uri().path().to_owned();
                                let got = req.into_body().collect().await?.to_bytes().len();
                                let n = count.fetch_add(1, Ordering::Relaxed);
                                let (status, body) = answer(n, &path, got as u64);
                                let mut response = Response::new(Full::new(body));
                                *response.status_mut() = status;
                                Ok::<_, hyper::Error>(response)
                            }
                        },
                    );
                    let conn = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tls), service);
                    tokio::pin!(conn);
                    tokio::select! {
                        _ = conn.as_mut() => {}
                        () = enough.notified() => {
                            conn.as_mut().graceful_shutdown();
                            let _ = conn.await;
                        }
                    }
                });
            }
        });
        (addr, ca)
    }

    /// An HTTP/3 server on a UDP port of loopback; its address and CA file.
    async fn h3_server() -> (SocketAddr, tempfile::NamedTempFile) {
        quic_server(b"h3").await
    }

    /// The same, offering `alpn` in TLS.
    async fn quic_server(alpn: &[u8]) -> (SocketAddr, tempfile::NamedTempFile) {
        let (config, ca) = tls(alpn);
        let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(config).expect("quic");
        let endpoint = quinn::Endpoint::server(
            quinn::ServerConfig::with_crypto(Arc::new(crypto)),
            "127.0.0.1:0".parse().expect("addr"),
        )
        .expect("endpoint");
        let addr = endpoint.local_addr().expect("addr");
        let count = Arc::new(AtomicU64::new(0));
        tokio::spawn(async move {
            while let Some(incoming) = endpoint.accept().await {
                let count = count.clone();
                tokio::spawn(async move {
                    let Ok(quic) = incoming.await else { return };
                    let Ok(mut conn) =
                        h3::server::Connection::<_, Bytes>::new(h3_quinn::Connection::new(quic))
                            .await
                    else {
                        return;
                    };
                    let mut served = 0;
                    while let Ok(Some(resolver)) = conn.accept().await {
                        served += 1;
                        if served == PER_CONNECTION {
                            // Room for the one request the client may send
                            // before it reads the GOAWAY.
                            let _ = conn.shutdown(2).await;
                        }
                        let count = count.clone();
                        tokio::spawn(async move {
                            let Ok((req, mut stream)) = resolver.resolve_request().await else {
                                return;
                            };
                            let mut got = 0;
                            while let Ok(Some(chunk)) = stream.recv_data().await {
                                got += chunk.remaining() as u64;
                            }
                            let n = count.fetch_add(1, Ordering::Relaxed);
                            let (status, body) = answer(n, req.uri().path(), got);
                            let mut head = Response::builder().status(status);
                            if body.len() != 1000 {
                                head = head.header("content-length", body.len());
                            }
                            let head = head.body(()).expect("response");
                            if stream.send_response(head).await.is_ok()
                                && stream.send_data(body).await.is_ok()
                            {
                                let _ = stream.finish().await;
                            }
                        });
                    }
                });
            }
        });
        (addr, ca)
    }

    async fn server(protocol: Protocol) -> (SocketAddr, tempfile::NamedTempFile) {
        match protocol {
            Protocol::H2 => h2_server().await,
            Protocol::H3 => h3_server().await,
        }
    }

    fn args(
        protocol: Protocol,
        addr: SocketAddr,
        ca: &tempfile::NamedTempFile,
        path: &str,
    ) -> LoadArgs {
        LoadArgs {
            endpoint: EndpointArgs {
                protocol,
                url: format!("https://{NAME}:{}{path}", addr.port()),
                connect: Some(addr),
                cacert: Some(ca.path().to_owned()),
                insecure: false,
            },
            connections: 4,
            duration: Duration::from_millis(300),
            expect_bytes: None,
            download: None,
            upload: None,
            parallel: 1,
            threads: 1,
        }
    }

    async fn closed_loop_counts_what_is_wrong(protocol: Protocol) {
        let (addr, ca) = server(protocol).await;
        let got = measure(&args(protocol, addr, &ca, "/1k"))
            .await
            .expect("load");
        assert!(
            got["ok"].as_u64().expect("ok") > PER_CONNECTION * 4,
            "{got}"
        );
        // The servers' GOAWAYs were followed by new connections, no error.
        assert!(got["reconnects"].as_u64() > Some(0), "{got}");
        assert_eq!(got["errors"], 0, "{got}");
        assert_eq!(got["requests"], got["ok"], "{got}");
        assert_eq!(
            got["body_bytes"].as_u64(),
            got["ok"].as_u64().map(|n| n * 1024)
        );

        let (addr, ca) = server(protocol).await;
        let mut flaky = args(protocol, addr, &ca, "/flaky");
        flaky.expect_bytes = Some(1024);
        let got = measure(&flaky).await.expect("load");
        let (ok, non_2xx, short) = (&got["ok"], &got["non_2xx"], &got["wrong_length"]);
        assert!(
            non_2xx.as_u64() > Some(0) && short.as_u64() > Some(0),
            "{got}"
        );
        let requests = got["requests"].as_u64().expect("requests");
        assert_eq!(
            ok.as_u64()
                .map(|n| n + non_2xx.as_u64().unwrap_or(0) + short.as_u64().unwrap_or(0)),
            Some(requests),
            "{got}"
        );
        assert_eq!(got["errors"], 0, "{got}");
    }

    #[tokio::test]
    async fn h2_closed_loop_counts_what_is_wrong() {
        closed_loop_counts_what_is_wrong(Protocol::H2).await;
    }

    #[tokio::test]
    async fn h3_closed_loop_counts_what_is_wrong() {
        closed_loop_counts_what_is_wrong(Protocol::H3).await;
    }

    async fn transfers_check_their_bytes(protocol: Protocol) {
        let (addr, ca) = server(protocol).await;
        let mut down = args(protocol, addr, &ca, "/big");
        (down.download, down.parallel) = (Some(4), 3);
        let got = measure(&down).await.expect("download");
        assert_eq!(got["bytes"], 3 * (4 << 20), "{got}");
        assert_eq!(got["direction"], "download");

        down.download = Some(5);
        let err = measure(&down).await.expect_err("a short download");
        assert!(format!("{err:#}").contains("expected 5242880"), "{err:#}");

        let mut up = args(protocol, addr, &ca, "/upload");
        (up.upload, up.parallel) = (Some(3), 2);
        let got = measure(&up).await.expect("upload");
        assert_eq!(got["bytes"], 2 * (3 << 20), "{got}");

        let mut missing = args(protocol, addr, &ca, "/nothing");
        missing.upload = Some(1);
        let err = measure(&missing).await.expect_err("a 404");
        assert!(format!("{err:#}").contains("404"), "{err:#}");
    }

    #[tokio::test]
    async fn h2_transfers_check_their_bytes() {
        transfers_check_their_bytes(Protocol::H2).await;
    }

    #[tokio::test]
    async fn h3_transfers_check_their_bytes() {
        transfers_check_their_bytes(Protocol::H3).await;
    }

    #[tokio::test]
    async fn a_quic_endpoint_without_h3_is_named() {
        // What bench/run sees of an edge whose QUIC endpoint speaks only the
        // agents' protocol: TLS alert 120, no_application_protocol.
        let (addr, ca) = quic_server(b"calvin/1").await;
        let err = measure(&args(Protocol::H3, addr, &ca, "/1k"))
            .await
            .expect_err("no h3 there");
        assert!(format!("{err:#}").contains("error 120"), "{err:#}");

        let (addr, ca) = h3_server().await;
        let mut other_name = args(Protocol::H3, addr, &ca, "/1k");
        other_name.endpoint.url = format!("https://other.test:{}/1k", addr.port());
        let err = measure(&other_name)
            .await
            .expect_err("a name the cert lacks");
        assert!(format!("{err:#}").contains("QUIC handshake"), "{err:#}");
    }
}
