//! The QUIC both ends of the tunnel run: the crypto provider, the
//! transport settings, the endpoint's packet size and the UDP socket.

use std::net::SocketAddr;
use std::sync::Arc;

use rustls::crypto::CryptoProvider;

/// The one crypto provider in the tree (see DEPENDENCIES.md).
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Bidi streams an agent may open towards the edge: the control stream and
/// spare. Stream slots cost memory on every idle connection.
pub const AGENT_STREAMS: u32 = 4;

/// The QUIC transport both sides use: the protocol's keep-alive and idle
/// timeout, `bidi_streams` streams the peer may open, no uni streams, and
/// a small buffer for the probe datagrams neither side reads.
///
/// On a `loopback` path (agent and edge on one machine) packets start and
/// stay at 9,000 bytes and may grow to the loopback MTU, without GSO: the
/// default path settles at 1,452-byte packets, six times the packets, and
/// their per-packet cost (encryption, syscalls, wake-ups) capped a 1 GiB
/// download at 0.6x of rathole (see DEPENDENCIES.md). Never on another
/// path: the floor would break a path narrower than 9,000 bytes.
pub fn transport_config(bidi_streams: u32, loopback: bool) -> quinn::TransportConfig {
    let mut transport = quinn::TransportConfig::default();
    transport
        .keep_alive_interval(Some(calvin_proto::KEEP_ALIVE_INTERVAL))
        .max_idle_timeout(quinn::IdleTimeout::try_from(calvin_proto::IDLE_TIMEOUT).ok())
        .max_concurrent_bidi_streams(bidi_streams.into())
        .max_concurrent_uni_streams(0u32.into())
        .datagram_receive_buffer_size(Some(DATAGRAM_BUFFER));
    if loopback {
        let mut mtu = quinn::MtuDiscoveryConfig::default();
        mtu.upper_bound(LOOPBACK_MAX_MTU);
        transport
            .initial_mtu(LOOPBACK_MTU)
            .min_mtu(LOOPBACK_MTU)
            .mtu_discovery_config(Some(mtu))
            .send_window(LOOPBACK_SEND_WINDOW)
            // Ten 9,000-byte segments overflow one UDP send.
            .enable_segmentation_offload(false);
    }
    transport
}

/// The agent's QUIC transport: [`transport_config`] with the edge allowed
/// its data streams, and the edge asked (QUIC's ACK frequency extension,
/// which quinn supports on both sides) to acknowledge each packet that
/// needs it at once. An idle agent's keep-alive then costs the edge one
/// wake-up, the ping and its ACK together, instead of two: the ping, then
/// its 25 ms ACK-delay timer. With 10,000 idle agents that took the edge
/// from 6.1% to 4.3% of a core. Under load quinn acknowledges a whole batch
/// of received packets with one ACK, and requests/s and transfers measured
/// the same in an A/B run.
pub fn agent_transport_config(loopback: bool) -> quinn::TransportConfig {
    let mut transport = transport_config(calvin_proto::MAX_DATA_STREAMS, loopback);
    let mut ack = quinn::AckFrequencyConfig::default();
    ack.ack_eliciting_threshold(0u32.into());
    transport.ack_frequency_config(Some(ack));
    transport
}

/// Datagrams received and not read, in bytes (with quinn's overhead,
/// about 40 bytes for a one-byte datagram). Neither side reads datagrams:
/// each is a probe, sent only to be acknowledged (the edge's liveness watch
/// and the agent's path probe). quinn keeps them until this is full, then
/// drops the oldest; its default, 1.25 MB, is a megabyte per connection
/// that nobody reads.
const DATAGRAM_BUFFER: usize = 1024;

/// QUIC packet sizes on loopback: the floor and start, and the most MTU
/// discovery tries (UDP's largest payload over IPv4).
const LOOPBACK_MTU: u16 = 9_000;
const LOOPBACK_MAX_MTU: u16 = MAX_UDP_PAYLOAD;

/// Bytes a loopback sender keeps unacknowledged over all its streams. A
/// receiver that falls behind holds them in its UDP buffer, which the
/// kernel caps (`net.core.rmem_max`, 4 MiB here) and charges with each
/// packet's overhead; quinn's default (10 MB) overflowed it with 8 streams
/// and every drop was taken for congestion.
const LOOPBACK_SEND_WINDOW: u64 = 2 << 20;

/// The largest UDP payload an endpoint takes in (quinn's default is 1,472,
/// which a peer honours, so jumbo packets need it raised on both sides).
/// Only what this side accepts: a sender still probes its path's MTU.
pub const MAX_UDP_PAYLOAD: u16 = 65_527;

/// An endpoint configuration that accepts packets up to [`MAX_UDP_PAYLOAD`].
pub fn endpoint_config(mut config: quinn::EndpointConfig) -> quinn::EndpointConfig {
    config
        .max_udp_payload_size(MAX_UDP_PAYLOAD)
        .expect("65,527 is within QUIC's bounds");
    config
}

/// Whether `addr` is this machine (including IPv4-mapped loopback).
pub fn is_loopback(addr: std::net::SocketAddr) -> bool {
    addr.ip().to_canonical().is_loopback()
}

/// UDP receive and send buffers; the kernel may cap them (net.core.rmem_max).
pub const UDP_BUFFER: usize = 8 << 20;

/// A UDP socket with large buffers, as QUIC bulk transfer needs.
pub fn udp_socket(addr: SocketAddr) -> std::io::Result<std::net::UdpSocket> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::DGRAM,
        Some(socket2::Protocol::UDP),
    )?;
    if addr.is_ipv6() {
        let _ = socket.set_only_v6(false);
    }
    let _ = socket.set_recv_buffer_size(UDP_BUFFER);
    let _ = socket.set_send_buffer_size(UDP_BUFFER);
    socket.bind(&addr.into())?;
    Ok(socket.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_addresses_include_mapped_ipv4() {
        let is = |s: &str| is_loopback(s.parse().unwrap());
        assert!(is("127.0.0.1:4443"));
        assert!(is("127.3.2.1:4443"));
        assert!(is("[::1]:4443"));
        assert!(is("[::ffff:127.0.0.1]:4443"));
        assert!(!is("10.0.0.1:4443"));
        assert!(!is("[::ffff:10.0.0.1]:4443"));
        assert!(!is("[2001:db8::1]:4443"));
    }
}
