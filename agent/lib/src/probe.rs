//! What a new preview's port is found to be when it is made: where the
//! server listens, and the usual reasons a preview "does not work" that are
//! not the tunnel's.
//!
//! [`run`] connects as the agent's streams do (127.0.0.1, else ::1), sends
//! one `HEAD /` with the preview's Host (and a `GET /` when that is
//! refused, to read why: see [`crate::refusals`]), and when no HTTP comes
//! back, checks whether the port speaks TLS. When nothing listens on
//! loopback it looks for a listener on another address. All of it within
//! [`PROBE_BUDGET`], once per preview made, never per visitor.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use calvin_proto::Port;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout_at};

use crate::api::Warning;
use crate::forward;
use crate::refusals::{self, BODY_PEEK};

/// The probe's whole time: connect, request (and its GET), TLS check.
pub const PROBE_BUDGET: Duration = Duration::from_secs(1);

/// What the probe found.
#[derive(Debug, Default)]
pub struct Found {
    /// Where the agent reached the server (127.0.0.1, else ::1).
    pub reached: Option<SocketAddr>,
    pub warnings: Vec<Warning>,
}

impl Found {
    pub fn reached(reached: Option<SocketAddr>) -> Self {
        Self {
            reached,
            warnings: Vec::new(),
        }
    }
}

/// Probes `port` as a visitor of `host` (the preview's authority) would
/// reach it.
pub async fn run(port: Port, host: &str) -> Found {
    let deadline = Instant::now() + PROBE_BUDGET;
    let stream = match timeout_at(deadline, forward::connect_local(port)).await {
        Ok(Ok(stream)) => stream,
        _ => {
            return Found {
                reached: None,
                warnings: listening_elsewhere(port)
                    .await
                    .map(other_interface)
                    .into_iter()
                    .collect(),
            };
        }
    };
    let Ok(reached) = stream.peer_addr() else {
        return Found::reached(None);
    };
    let mut found = Found::reached(Some(reached));
    if reached.is_ipv6() {
        found.warnings.push(ipv6_loopback(port));
    }
    let url = format!("https://{host}");
    if let Ok(Some(warning)) = timeout_at(deadline, examine(stream, reached, host, &url)).await {
        found.warnings.push(warning);
    }
    found
}

/// What the server's answer to `HEAD /` says is wrong, if anything.
async fn examine(stream: TcpStream, reached: SocketAddr, host: &str, url: &str) -> Option<Warning> {
    match ask(stream, hyper::Method::HEAD, host).await {
        Ok(answer) if is_refusal(answer.status) => {
            // A refusal's body says why: read it from a GET, on a new
            // connection (the server may have closed the first).
            let stream = TcpStream::connect(reached).await.ok()?;
            let answer = ask(stream, hyper::Method::GET, host).await.ok()?;
            refusals::recognise_probe(answer.status, &answer.headers, &answer.body, url)
        }
        Ok(_) => None,
        Err(_) => speaks_tls(reached)
            .await
            .then(|| tls_not_http(reached.port())),
    }
}

/// Statuses a dev server refuses an unknown Host with, or a HEAD.
fn is_refusal(status: u16) -> bool {
    matches!(status, 400 | 403 | 405 | 421 | 501)
}

struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    /// The body's first [`BODY_PEEK`] bytes.
    body: Vec<u8>,
}

/// One request on `stream`, as a visitor's browser would send it through
/// the edge.
async fn ask(stream: TcpStream, method: hyper::Method, host: &str) -> Result<Answer, hyper::Error> {
    let (mut sender, conn) = http1::handshake(TokioIo::new(stream)).await?;
    let request = hyper::Request::builder()
        .method(method)
        .uri("/")
        .header(hyper::header::HOST, host)
        .header(hyper::header::ACCEPT, "text/html,*/*")
        .header(hyper::header::USER_AGENT, "calvin-agent-probe")
        .header("x-forwarded-proto", "https")
        .body(Empty::<Bytes>::new());
    let Ok(request) = request else {
        // A host that is no header value: the edge would have refused it.
        return Ok(Answer {
            status: 0,
            headers: Vec::new(),
            body: Vec::new(),
        });
    };
    let exchange = async move {
        let response = sender.send_request(request).await?;
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .map(|(name, value)| {
                let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
                (name.as_str().to_owned(), value)
            })
            .collect();
        let mut body = response.into_body();
        let mut peek = Vec::new();
        while peek.len() < BODY_PEEK {
            match body.frame().await {
                Some(Ok(frame)) => {
                    if let Some(data) = frame.data_ref() {
                        peek.extend_from_slice(&data[..data.len().min(BODY_PEEK - peek.len())]);
                    }
                }
                // What came before a cut is still worth reading.
                Some(Err(_)) | None => break,
            }
        }
        Ok(Answer {
            status,
            headers,
            body: peek,
        })
    };
    tokio::pin!(exchange, conn);
    tokio::select! {
        answer = &mut exchange => answer,
        // The connection ended: the exchange has all it will get.
        _ = &mut conn => exchange.await,
    }
}

/// Whether the server at `addr` answers a TLS ClientHello with a TLS
/// record (a handshake or an alert).
async fn speaks_tls(addr: SocketAddr) -> bool {
    let Some(hello) = client_hello() else {
        return false;
    };
    let Ok(mut stream) = TcpStream::connect(addr).await else {
        return false;
    };
    if stream.write_all(&hello).await.is_err() {
        return false;
    }
    let mut head = [0u8; 2];
    stream.read_exact(&mut head).await.is_ok() && matches!(head, [0x15 | 0x16, 0x03])
}

/// A TLS ClientHello's bytes, as rustls first sends them. Nothing is
/// verified: the handshake goes no further.
fn client_hello() -> Option<Vec<u8>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .ok()?
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let name = rustls_pki_types::ServerName::try_from("localhost").ok()?;
    let mut conn = rustls::ClientConnection::new(Arc::new(config), name).ok()?;
    let mut hello = Vec::new();
    conn.write_tls(&mut hello).ok()?;
    Some(hello)
}

/// A TCP listener on `port` at an address that is not loopback nor a
/// wildcard, from the kernel's socket tables (Linux; elsewhere `None`).
async fn listening_elsewhere(port: Port) -> Option<SocketAddr> {
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = tokio::fs::read_to_string(table).await else {
            continue;
        };
        let found = listeners(&text)
            .filter(|addr| addr.port() == port.get())
            .find(|addr| !addr.ip().is_loopback() && !addr.ip().is_unspecified());
        if found.is_some() {
            return found;
        }
    }
    None
}

/// The listening sockets' local addresses in a `/proc/net/tcp{,6}` table:
/// lines `sl local_address rem_address st ...`, addresses as the hex of
/// the kernel's 32-bit words, `st` 0A for LISTEN.
fn listeners(table: &str) -> impl Iterator<Item = SocketAddr> + '_ {
    table.lines().skip(1).filter_map(|line| {
        let mut fields = line.split_whitespace();
        let local = fields.nth(1)?;
        let state = fields.nth(1)?;
        if state != "0A" {
            return None;
        }
        let (ip, port) = local.split_once(':')?;
        let port = u16::from_str_radix(port, 16).ok()?;
        let mut bytes = Vec::with_capacity(16);
        for word in ip.as_bytes().chunks(8) {
            let word = u32::from_str_radix(std::str::from_utf8(word).ok()?, 16).ok()?;
            bytes.extend_from_slice(&word.to_ne_bytes());
        }
        let ip = match bytes.len() {
            4 => IpAddr::from(<[u8; 4]>::try_from(bytes).ok()?),
            16 => {
                let v6 = Ipv6Addr::from(<[u8; 16]>::try_from(bytes).ok()?);
                v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4)
            }
            _ => return None,
        };
        Some(SocketAddr::new(ip, port))
    })
}

fn ipv6_loopback(port: Port) -> Warning {
    Warning {
        code: "ipv6_loopback_only".into(),
        message: format!(
            "Nothing listens on 127.0.0.1:{port}, so the agent forwards to the server on [::1]:{port} (IPv6 loopback), which works."
        ),
        fix: format!(
            "Nothing is needed; for tools that try 127.0.0.1, have the server listen there too, e.g. `vite --host 127.0.0.1` or `python3 -m http.server --bind 127.0.0.1 {port}` (or on `::`, which takes IPv4 as well)."
        ),
    }
}

fn other_interface(addr: SocketAddr) -> Warning {
    let port = addr.port();
    Warning {
        code: "other_interface_only".into(),
        message: format!(
            "The server on port {port} listens only on {addr}, not on loopback, where the agent forwards visitors."
        ),
        fix: format!(
            "Have the server listen on `127.0.0.1:{port}` (or on every address, `0.0.0.0:{port}`), e.g. `vite --host 127.0.0.1` or `manage.py runserver 127.0.0.1:{port}`."
        ),
    }
}

fn tls_not_http(port: u16) -> Warning {
    Warning {
        code: "tls_not_http".into(),
        message: format!(
            "Port {port} answers with TLS (HTTPS), not plain HTTP, so the edge's requests to it fail."
        ),
        fix: format!(
            "Preview the server's plain-HTTP port, or run the dev server on port {port} without HTTPS (no `--https`, no `server.https`): the edge already serves the preview over HTTPS."
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    #[cfg(target_endian = "little")]
    fn socket_tables() {
        // Lines of /proc/net/tcp and tcp6 on x86-64 (little-endian words).
        let tcp = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0\n   1: 1402A8C0:1F91 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2 1 0 100 0 0 10 0\n   2: 1402A8C0:1F92 0200A8C0:D431 01 00000000:00000000 00:00000000 00000000     0        0 3 1 0 100 0 0 10 0\n";
        let found: Vec<SocketAddr> = listeners(tcp).collect();
        let local = SocketAddr::from((Ipv4Addr::LOCALHOST, 8080));
        let lan = SocketAddr::from((Ipv4Addr::new(192, 168, 2, 20), 8081));
        assert_eq!(found, [local, lan], "established sockets are left out");
        let tcp6 = "  sl  local_address                         remote_address                        st\n   0: 00000000000000000000000001000000:1F90 00000000000000000000000000000000:0000 0A 0\n   1: 0000000000000000FFFF00001402A8C0:1F93 00000000000000000000000000000000:0000 0A 0\n";
        let found: Vec<SocketAddr> = listeners(tcp6).collect();
        assert_eq!(
            found,
            [
                SocketAddr::from((Ipv6Addr::LOCALHOST, 8080)),
                SocketAddr::from((Ipv4Addr::new(192, 168, 2, 20), 8083)),
            ]
        );
    }

    #[test]
    fn a_listener_of_this_process_is_found() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let text = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
        if text.is_empty() {
            return; // not Linux
        }
        assert!(listeners(&text).any(|a| a == addr), "{addr} in {text}");
    }

    #[test]
    fn the_client_hello_is_a_tls_record() {
        let hello = client_hello().expect("a ClientHello");
        assert_eq!(&hello[..2], &[0x16, 0x03]);
    }
}
