//! The byte pipe: each stream the edge opens becomes one TCP connection to
//! a previewed port on loopback.

use std::io;
use std::time::Duration;

use calvin_common::tunnel_stream::{Moved, TunnelStream};
use calvin_proto::io::{read_frame, write_frame};
use calvin_proto::{Port, StreamAnswer, StreamHeader, StreamRefusal};
use tokio::net::TcpStream;
use tracing::{Instrument, debug, debug_span};

use crate::agent::Previews;
use crate::metrics::{AgentCounts, LocalRefusal};
use crate::request_log::RequestLog;

/// Time for the edge to send a stream's header.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Time for the local server to accept a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest an edge may have the agent wait for a server to listen.
const MAX_LISTENER_WAIT: Duration = Duration::from_secs(60);
/// How often the agent tries a port that refuses connections meanwhile.
const LISTENER_RETRY: Duration = Duration::from_millis(50);
/// Time for `reach`'s connect.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// Serves the edge's streams until the connection ends.
pub(crate) async fn accept_streams(
    conn: quinn::Connection,
    previews: Previews,
    counts: AgentCounts,
    log: RequestLog,
) {
    while let Ok((send, recv)) = conn.accept_bi().await {
        let span = debug_span!("stream", id = %send.id());
        let serve = serve_stream(send, recv, previews.clone(), counts.clone(), log.clone());
        tokio::spawn(serve.instrument(span));
    }
}

async fn serve_stream(
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    previews: Previews,
    counts: AgentCounts,
    log: RequestLog,
) {
    let _open = counts.stream();
    let header = match tokio::time::timeout(
        HEADER_TIMEOUT,
        read_frame::<StreamHeader, _>(&mut recv),
    )
    .await
    {
        Ok(Ok(Some(header))) => header,
        Ok(Ok(None)) => return,
        Ok(Err(err)) => return debug!(%err, "bad stream header"),
        Err(_) => return debug!("no stream header in time"),
    };
    let previewed = previews
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&header.name)
        == Some(&header.port);
    let answer = if !previewed {
        Err(StreamAnswer::Refused {
            reason: StreamRefusal::NotPreviewed,
            message: format!("port {} is not previewed as {}", header.port, header.name),
        })
    } else {
        let wait = Duration::from_millis(header.wait_ms.unwrap_or(0).into());
        connect_waiting(header.port, wait.min(MAX_LISTENER_WAIT))
            .await
            .map_err(|err| StreamAnswer::Refused {
                reason: if err.kind() == io::ErrorKind::ConnectionRefused {
                    StreamRefusal::ConnectionRefused
                } else {
                    StreamRefusal::ConnectFailed
                },
                message: format!("port {}: {err}", header.port),
            })
    };
    let tcp = match answer {
        Ok(tcp) => tcp,
        Err(refusal) => {
            if let StreamAnswer::Refused { reason, .. } = &refusal {
                counts.refused(match reason {
                    StreamRefusal::NotPreviewed => LocalRefusal::NotPreviewed,
                    StreamRefusal::ConnectionRefused => LocalRefusal::ConnectionRefused,
                    _ => LocalRefusal::ConnectFailed,
                });
            }
            let _ = write_frame(&mut send, &refusal).await;
            let _ = send.finish();
            return;
        }
    };
    if write_frame(&mut send, &StreamAnswer::Accepted)
        .await
        .is_err()
    {
        return;
    }
    debug!(name = %header.name, port = %header.port, client = %header.client, "forwarding");
    let mut tunnel = TunnelStream::new(recv, send);
    let mut tcp = tcp;
    let tap = log.tap(&header.name);
    let tally = |moved: Moved, bytes: &[u8]| {
        counts.moved(moved.to_tcp, moved.from_tcp);
        if let Some(tap) = &tap {
            tap.seen(moved.to_tcp > 0, bytes);
        }
    };
    let spliced = tunnel.splice(&mut tcp, tally).await;
    if let Some(tap) = &tap {
        tap.close(spliced.is_ok());
    }
    if let Err(err) = spliced {
        // A reset on either side is passed on as a reset, never as a clean
        // end that would make a cut-off transfer look complete.
        debug!(%err, "stream cut off");
        tunnel.abort();
        let _ = tcp.set_zero_linger();
    }
}

/// A connection to the port (see [`connect_local`]); while it refuses
/// connections, tried again every [`LISTENER_RETRY`] for up to `wait` (a
/// dev server restarting).
async fn connect_waiting(port: Port, wait: Duration) -> io::Result<TcpStream> {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        match connect_local(port).await {
            Err(err)
                if err.kind() == io::ErrorKind::ConnectionRefused
                    && tokio::time::Instant::now() + LISTENER_RETRY < deadline =>
            {
                tokio::time::sleep(LISTENER_RETRY).await;
            }
            connected => return connected,
        }
    }
}

/// A connection to the port on 127.0.0.1, or on ::1 when nothing listens
/// on 127.0.0.1 (servers that bind `localhost` as IPv6 only). Never any
/// other host.
pub(crate) async fn connect_local(port: Port) -> io::Result<TcpStream> {
    let v4 = connect_with_timeout((std::net::Ipv4Addr::LOCALHOST, port.get()).into()).await;
    let stream = match v4 {
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
            connect_with_timeout((std::net::Ipv6Addr::LOCALHOST, port.get()).into())
                .await
                .map_err(|_| e)?
        }
        other => other?,
    };
    stream.set_nodelay(true)?;
    Ok(stream)
}

async fn connect_with_timeout(addr: std::net::SocketAddr) -> io::Result<TcpStream> {
    tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))?
}

/// Where something accepts TCP connections on the port now: 127.0.0.1,
/// else ::1 (see [`connect_local`]); `None` when nothing does.
pub(crate) async fn reach(port: Port) -> Option<std::net::SocketAddr> {
    match tokio::time::timeout(PROBE_TIMEOUT, connect_local(port)).await {
        Ok(Ok(stream)) => stream.peer_addr().ok(),
        _ => None,
    }
}
