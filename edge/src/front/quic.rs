//! The QUIC endpoint's connections: agents (ALPN `calvin/1`) and HTTP/3
//! visitors (`h3`) share one port. Each connection's handshake is done
//! here; its ALPN then sends it to the agents' side
//! ([`crate::upstream::tunnel::serve_agent`]) or to HTTP/3 ([`Http3`]).

use std::sync::{Arc, Weak};

use tokio::sync::watch;
use tracing::{Instrument, debug, info_span};

use crate::counts::HandshakeFailure;
use crate::front::http3::Http3;
use crate::upstream::tunnel::{AgentHub, accept_until, serve_agent};

/// Accepts agents until `stop` turns true. Connections already made stay
/// up (they carry in-flight requests); the caller closes the endpoint.
/// An HTTP/3 visitor's connection (ALPN `h3`) goes to `http3`, when the
/// edge serves HTTP/3.
pub(crate) async fn accept_quic(
    endpoint: quinn::Endpoint,
    hub: Arc<AgentHub>,
    http3: Option<Arc<Http3>>,
    stop: watch::Receiver<bool>,
) {
    accept_until(&endpoint, stop, |incoming| {
        let span = info_span!(
            "agent",
            remote = %incoming.remote_address(),
            account = tracing::field::Empty,
        );
        // Weak: a handshake under way must not hold what a stop drains by.
        let http3 = http3.as_ref().map(Arc::downgrade);
        tokio::spawn(serve_connection(hub.clone(), http3, incoming).instrument(span));
    })
    .await;
    // Turn away agents that arrive while the edge drains.
    endpoint.set_server_config(None);
}

/// A connection to the QUIC endpoint: its handshake, then an agent's
/// session, or an HTTP/3 visitor's requests.
async fn serve_connection(
    hub: Arc<AgentHub>,
    http3: Option<Weak<Http3>>,
    incoming: quinn::Incoming,
) {
    let connecting = if crate::certs::tls::is_loopback(incoming.remote_address()) {
        incoming.accept_with(hub.loopback_quic.clone())
    } else {
        incoming.accept()
    };
    let failed = |why| hub.counts.handshake_failed(why);
    let connecting = match connecting {
        Ok(connecting) => connecting,
        Err(err) => {
            failed(HandshakeFailure::QuicError);
            return debug!(%err, "handshake failed");
        }
    };
    let conn = match tokio::time::timeout(hub.hello_timeout, connecting).await {
        Ok(Ok(conn)) => conn,
        Ok(Err(err)) => {
            failed(HandshakeFailure::QuicError);
            return debug!(%err, "handshake failed");
        }
        Err(_) => {
            failed(HandshakeFailure::AgentTimeout);
            return debug!("handshake timed out");
        }
    };
    if crate::certs::tls::is_h3(&conn) {
        // Gone: the edge is stopping.
        match http3.map(|weak| weak.upgrade()) {
            Some(None) => return conn.close(0u32.into(), b"stopping"),
            Some(Some(http3)) => {
                // Not an agent's: its requests are logged in their own spans.
                let serving = http3.serve(conn);
                return serving.instrument(tracing::Span::none()).await;
            }
            None => return conn.close(0u32.into(), b"HTTP/3 is off"),
        }
    }
    serve_agent(hub, conn).await;
}
