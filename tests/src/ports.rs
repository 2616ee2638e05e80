//! Ports for the tests, which run in parallel in one process: a port a
//! test means to be its own is never one the kernel may give another
//! test's port-0 bind meanwhile. A port bound and released at once can be
//! (CI, stop 29: a preview of a "silent" port reached another test's edge,
//! which answered "no preview named quiet"; a `share --dev` test found
//! the port it had just been given taken).
//!
//! - [`silent_port`]: a port where nothing listens, held by a bound socket
//!   for as long as the test keeps it.
//! - [`free_port`], [`free_udp_tcp_port`]: a port for a server another
//!   process starts, or one a test stops and starts again
//!   ([`edge_addresses`]). They lie below the kernel's ephemeral range, so
//!   no port-0 bind takes them, and this process hands each out once.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU32, Ordering};

/// The walk's step through the ports below the ephemeral range: a prime,
/// so it visits each port of a span it does not divide once.
const STEP: u64 = 7919;

/// A port on 127.0.0.1 where nothing listens, held for as long as the
/// test keeps this: a socket is bound to the port and never listens, so a
/// connection is refused, and the port is given to no other socket that
/// asks for any port.
///
/// The socket has `SO_REUSEADDR`, as tokio's listeners do: a server of the
/// test may listen on the port beside it (a dev server starting late, or
/// restarting), and once that server stops the port is silent again, and
/// still held.
pub struct SilentPort {
    _socket: tokio::net::TcpSocket,
    port: u16,
}

impl SilentPort {
    pub fn port(&self) -> u16 {
        self.port
    }
}

pub fn silent_port() -> SilentPort {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_reuseaddr(true).expect("SO_REUSEADDR");
    socket
        .bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .expect("bind");
    let port = socket.local_addr().expect("addr").port();
    SilentPort {
        _socket: socket,
        port,
    }
}

/// A TCP port free on 127.0.0.1 now, for a server another process starts
/// (a dev server, an edge, a gateway's callback listener).
pub fn free_port() -> u16 {
    below_ephemeral(false)
}

/// A port free for both UDP and TCP on 127.0.0.1, for a server whose
/// address another program must know before it starts (Pebble's
/// `-dnsserver`, an edge's HTTPS and QUIC on one number); no port-0 bind
/// of a parallel test can take it while the server restarts.
pub fn free_udp_tcp_port() -> u16 {
    below_ephemeral(true)
}

/// HTTPS, plain HTTP and QUIC addresses on 127.0.0.1 for an edge a test
/// stops and starts again: while it is down, no other test's edge can be
/// given them (and an agent waiting to reconnect reach that edge instead).
pub fn edge_addresses() -> (SocketAddr, SocketAddr, SocketAddr) {
    let loopback = |port| SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    (
        loopback(free_port()),
        loopback(free_port()),
        loopback(free_udp_tcp_port()),
    )
}

/// The ports below the kernel's ephemeral range this walks: (the lowest,
/// how many), read once.
static BELOW_EPHEMERAL: LazyLock<(u16, u32)> = LazyLock::new(|| {
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let low = ephemeral_low.saturating_sub(12_000).max(1024);
    let span = u32::from(ephemeral_low - low);
    assert!(
        span > 0 && u64::from(span) % STEP != 0,
        "no walk of the {span} ports below {ephemeral_low}"
    );
    (low, span)
});

/// The next port of this process's walk of the ports below the ephemeral
/// range that is free now (for UDP too, with `udp`). The walk starts where
/// the process id says and visits each port once, so a port is never
/// handed out twice.
fn below_ephemeral(udp: bool) -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let (low, span) = *BELOW_EPHEMERAL;
    let start = u64::from(std::process::id().wrapping_mul(2_654_435_761));
    loop {
        let i = NEXT.fetch_add(1, Ordering::Relaxed);
        assert!(i < span, "every port from {low} on was handed out");
        let step = (start + u64::from(i) * STEP) % u64::from(span);
        let port = low + step as u16;
        let free = (!udp || UdpSocket::bind(("127.0.0.1", port)).is_ok())
            && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok();
        if free {
            return port;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn connects(port: u16) -> bool {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    }

    /// What the tests rely on: connecting to a held silent port is refused;
    /// a server binds beside it and is reached; once that server stops the
    /// port is refused again and still held.
    #[tokio::test]
    async fn a_silent_port_refuses_serves_beside_and_stays_held() {
        use tokio::io::AsyncReadExt;
        let silent = silent_port();
        let port = silent.port();
        // A bind without SO_REUSEADDR meets the held socket as the kernel's
        // choice of a port for a port-0 bind does.
        let plain = || {
            let socket = tokio::net::TcpSocket::new_v4().expect("socket");
            socket.bind(SocketAddr::from((Ipv4Addr::LOCALHOST, port)))
        };
        assert!(plain().is_err(), "held before anything listened");
        assert!(!connects(port), "nothing listens yet");

        let server = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .expect("a server binds beside the held socket");
        let served = tokio::spawn(async move {
            let (mut stream, _) = server.accept().await.expect("accept");
            // The client closes first, so no TIME_WAIT holds the port here.
            let mut rest = Vec::new();
            stream.read_to_end(&mut rest).await.expect("read")
        });
        let client = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("the server is reached");
        drop(client);
        assert_eq!(served.await.expect("task"), 0, "the client's end");

        assert!(!connects(port), "refused again once the server stopped");
        let held = plain();
        assert!(held.is_err(), "still held: {held:?}");
        drop(silent);
        let free = plain();
        assert!(free.is_ok(), "free once let go: {free:?}");
    }

    #[test]
    fn free_ports_are_distinct_and_below_the_ephemeral_range() {
        let (low, span) = *BELOW_EPHEMERAL;
        let ports: Vec<u16> = (0..40)
            .map(|i| {
                if i % 2 == 0 {
                    free_port()
                } else {
                    free_udp_tcp_port()
                }
            })
            .collect();
        let distinct: std::collections::HashSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), ports.len(), "{ports:?}");
        let high = u32::from(low) + span;
        assert!(
            ports.iter().all(|p| *p >= low && u32::from(*p) < high),
            "{ports:?} outside {low}..{high}"
        );
    }
}
