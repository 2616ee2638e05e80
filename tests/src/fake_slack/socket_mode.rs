//! The Socket Mode WebSocket server: `/link/?ticket=…` with a ticket from
//! apps.connections.open (used once; else the upgrade is refused with a
//! 4xx), `hello` on connect, then envelopes down and acks up. Each
//! connection is a task driven by [`Outgoing`] commands from the delivery
//! rules in `envelopes.rs`; this module also arms their ack deadlines.

use std::sync::{Arc, MutexGuard};

use futures_util::{SinkExt, StreamExt};
use http::{StatusCode, Uri};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc::unbounded_channel;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};

use serde_json::Value;

use super::envelopes::{Deadline, EnvelopeKind, Outgoing, SocketEnd};
use super::http_forms::form_pairs;
use super::ids;
use super::state::{Shared, State};

/// How long closing a socket may take once decided.
const CLOSE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

/// Accepts WebSocket connections until aborted.
pub(crate) async fn serve(shared: Arc<Shared>, listener: TcpListener) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        tokio::spawn(connection(shared.clone(), stream));
    }
}

/// Sends `payload` in a fresh envelope of `kind` (to an open socket, or
/// queued until one connects), releasing the lock first; answers its id.
pub(crate) fn send(
    shared: &Arc<Shared>,
    mut state: MutexGuard<'_, State>,
    kind: EnvelopeKind,
    accepts_response_payload: bool,
    payload: Value,
) -> String {
    let envelope_id = ids::uuid();
    let deadlines =
        state
            .socket_mode
            .enqueue(envelope_id.clone(), kind, accepts_response_payload, payload);
    drop(state);
    arm(shared, deadlines);
    envelope_id
}

/// Watches each delivery's ack window, and wakes test waiters.
pub(crate) fn arm(shared: &Arc<Shared>, deadlines: Vec<Deadline>) {
    for deadline in deadlines {
        let shared = shared.clone();
        tokio::spawn(async move {
            tokio::time::sleep(deadline.after).await;
            let more = shared.state().socket_mode.deadline_passed(&deadline);
            arm(&shared, more);
        });
    }
    shared.changed();
}

/// Whether the upgrade request may connect: the path and an unused ticket.
fn admit(shared: &Shared, uri: &Uri) -> Result<(), (StatusCode, &'static str)> {
    if !matches!(uri.path(), "/link" | "/link/") {
        return Err((StatusCode::NOT_FOUND, "not found"));
    }
    let ticket = form_pairs(uri.query().unwrap_or_default())
        .into_iter()
        .find(|(name, _)| name == "ticket")
        .map(|(_, value)| value)
        .ok_or((StatusCode::BAD_REQUEST, "no ticket"))?;
    if shared.state().socket_mode.take_ticket(&ticket) {
        Ok(())
    } else {
        Err((StatusCode::UNAUTHORIZED, "invalid or used ticket"))
    }
}

async fn connection(shared: Arc<Shared>, stream: TcpStream) {
    let checking = shared.clone();
    // The callback's type is tungstenite's, refusal and all.
    #[allow(clippy::result_large_err)]
    let check = move |request: &Request, response: Response| match admit(&checking, request.uri()) {
        Ok(()) => Ok(response),
        Err((status, why)) => {
            let mut refusal = ErrorResponse::new(Some(why.to_string()));
            *refusal.status_mut() = status;
            Err(refusal)
        }
    };
    let Ok(ws) = tokio_tungstenite::accept_hdr_async(stream, check).await else {
        return;
    };
    let (tx, mut commands) = unbounded_channel();
    let (id, deadlines) = shared.state().socket_mode.open_socket(tx);
    arm(&shared, deadlines);

    let (mut sink, mut frames) = ws.split();
    let mut close_at: Option<Instant> = None;
    let end = loop {
        let grace_over = async {
            match close_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            frame = frames.next() => match frame {
                Some(Ok(Message::Text(text))) => {
                    shared.state().socket_mode.on_frame(id, text.as_str());
                    shared.changed();
                }
                Some(Ok(Message::Close(_))) => {
                    let _ = tokio::time::timeout(CLOSE_TIMEOUT, sink.close()).await;
                    break SocketEnd::ClientClosed;
                }
                Some(Ok(_)) => {}
                Some(Err(_)) | None => break SocketEnd::Lost,
            },
            command = commands.recv() => match command {
                Some(Outgoing::Frame(text)) => {
                    if sink.send(Message::text(text)).await.is_err() {
                        break SocketEnd::Lost;
                    }
                }
                Some(Outgoing::Disconnect { frame, grace }) => {
                    if sink.send(Message::text(frame)).await.is_err() {
                        break SocketEnd::Lost;
                    }
                    close_at = Some(Instant::now() + grace);
                }
                // Dropping both halves below closes the TCP connection
                // without a close frame.
                Some(Outgoing::Drop) | None => break SocketEnd::Dropped,
            },
            () = grace_over => {
                let _ = tokio::time::timeout(CLOSE_TIMEOUT, sink.close()).await;
                break SocketEnd::DisconnectGraceExpired;
            }
        }
    };
    drop((sink, frames));
    let deadlines = shared.state().socket_mode.socket_closed(id, end);
    arm(&shared, deadlines);
}
