//! Socket Mode's delivery rules, without the sockets: which open socket an
//! envelope goes to (one, at random), what waits while none is open, what
//! an ack settles, and what is redelivered (an `events_api` envelope whose
//! ack does not come within the ack window, or whose socket closes first:
//! up to [`MAX_RETRIES`] times, with `retry_attempt` and `retry_reason`;
//! an `interactive` one never, as Slack shows the user an error instead).
//!
//! Each socket is a channel of [`Outgoing`] commands to its connection task
//! (`socket_mode.rs`); each delivery yields a [`Deadline`] the caller arms.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::mpsc::UnboundedSender;

use super::ids::random_u64;
use super::workspace::APP_ID;

/// How long Slack waits for an ack before it redelivers.
pub const ACK_TIMEOUT: Duration = Duration::from_secs(3);
/// How many times Slack redelivers an `events_api` envelope.
pub const MAX_RETRIES: u32 = 3;
/// How long a socket told to disconnect stays open if its client keeps it.
pub const DISCONNECT_GRACE: Duration = Duration::from_secs(10);
/// The `host` in hello's and disconnect's `debug_info`.
const DEBUG_HOST: &str = "fake-slack-1";

/// An envelope's `type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnvelopeKind {
    EventsApi,
    Interactive,
}

impl EnvelopeKind {
    fn wire_name(self) -> &'static str {
        match self {
            EnvelopeKind::EventsApi => "events_api",
            EnvelopeKind::Interactive => "interactive",
        }
    }
}

/// One time an envelope was sent down a socket.
#[derive(Debug, Clone, PartialEq)]
pub struct Delivery {
    pub socket: u64,
    pub at: Instant,
    /// 0 for the first delivery.
    pub retry_attempt: u32,
    /// `""` for the first delivery, else `"timeout"` or `"socket closed"`.
    pub retry_reason: String,
}

/// A client's acknowledgement of an envelope.
#[derive(Debug, Clone, PartialEq)]
pub struct Ack {
    pub envelope_id: String,
    /// The socket it came on.
    pub socket: u64,
    pub at: Instant,
    /// Since the envelope's latest delivery.
    pub delay: Duration,
    /// The ack's `payload` (a `response_action`, options, ...), if any.
    pub payload: Option<Value>,
}

/// Where an envelope stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvelopeStatus {
    /// Waiting for an open socket (never sent, or to be redelivered).
    Queued,
    /// Sent, not acked yet.
    Delivered,
    Acked,
    /// Not acked and not redelivered any more; the reason of the last
    /// failed delivery (`"timeout"`, `"socket closed"`).
    GaveUp(String),
}

/// How a socket ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocketEnd {
    /// The client sent a close frame.
    ClientClosed,
    /// The connection broke or ended without a close frame.
    Lost,
    /// [`drop_sockets`](super::FakeSlack::drop_sockets) cut it.
    Dropped,
    /// Told to disconnect, the client kept it past the grace period.
    DisconnectGraceExpired,
}

/// A Socket Mode connection, open or past.
#[derive(Debug, Clone, PartialEq)]
pub struct SocketInfo {
    pub id: u64,
    pub opened_at: Instant,
    /// A `disconnect` message was sent on it.
    pub disconnect_sent: bool,
    pub ended: Option<(Instant, SocketEnd)>,
}

/// A command to a socket's connection task.
#[derive(Debug)]
pub(crate) enum Outgoing {
    Frame(String),
    /// Send this `disconnect` frame, then close after the grace period.
    Disconnect {
        frame: String,
        grace: Duration,
    },
    /// Cut the TCP connection, no close frame.
    Drop,
}

/// A delivery whose ack window the caller must watch.
#[derive(Debug)]
pub(crate) struct Deadline {
    pub envelope_id: String,
    /// Which delivery (1 = the first).
    pub delivery: usize,
    pub after: Duration,
}

struct Envelope {
    kind: EnvelopeKind,
    accepts_response_payload: bool,
    payload: Value,
    retry_attempt: u32,
    retry_reason: String,
    deliveries: Vec<Delivery>,
    ack: Option<Ack>,
    status: EnvelopeStatus,
}

struct OpenSocket {
    tx: UnboundedSender<Outgoing>,
    /// Told to disconnect: no new envelopes go to it.
    draining: bool,
}

/// Tickets, sockets and envelopes.
pub(crate) struct SocketMode {
    tickets: HashSet<String>,
    open: BTreeMap<u64, OpenSocket>,
    sockets: BTreeMap<u64, SocketInfo>,
    envelopes: HashMap<String, Envelope>,
    queue: VecDeque<String>,
    acks: Vec<Ack>,
    pub ack_timeout: Duration,
    pub disconnect_grace: Duration,
}

impl SocketMode {
    pub fn new() -> SocketMode {
        SocketMode {
            tickets: HashSet::new(),
            open: BTreeMap::new(),
            sockets: BTreeMap::new(),
            envelopes: HashMap::new(),
            queue: VecDeque::new(),
            acks: Vec::new(),
            ack_timeout: ACK_TIMEOUT,
            disconnect_grace: DISCONNECT_GRACE,
        }
    }

    /// A new ticket for apps.connections.open's URL.
    pub fn issue_ticket(&mut self) -> String {
        let ticket = (random_u64() % 1_000_000_000_000).to_string();
        self.tickets.insert(ticket.clone());
        ticket
    }

    /// Uses up `ticket`; false if it was never issued or already used.
    pub fn take_ticket(&mut self, ticket: &str) -> bool {
        self.tickets.remove(ticket)
    }

    /// Registers a connected socket, says hello on it and hands it what
    /// was waiting.
    pub fn open_socket(&mut self, tx: UnboundedSender<Outgoing>) -> (u64, Vec<Deadline>) {
        let id = self.sockets.len() as u64 + 1;
        let num_connections = self.open.len() + 1;
        let hello = json!({
            "type": "hello",
            "num_connections": num_connections,
            "debug_info": {
                "host": DEBUG_HOST,
                "build_number": 1,
                "approximate_connection_time": 18060,
            },
            "connection_info": { "app_id": APP_ID },
        });
        // The connection task is alive: it holds the receiver.
        let _ = tx.send(Outgoing::Frame(hello.to_string()));
        self.open.insert(
            id,
            OpenSocket {
                tx,
                draining: false,
            },
        );
        let info = SocketInfo {
            id,
            opened_at: Instant::now(),
            disconnect_sent: false,
            ended: None,
        };
        self.sockets.insert(id, info);
        (id, self.dispatch())
    }

    /// Queues a new envelope and sends what can be sent.
    pub fn enqueue(
        &mut self,
        id: String,
        kind: EnvelopeKind,
        accepts_response_payload: bool,
        payload: Value,
    ) -> Vec<Deadline> {
        let envelope = Envelope {
            kind,
            accepts_response_payload,
            payload,
            retry_attempt: 0,
            retry_reason: String::new(),
            deliveries: Vec::new(),
            ack: None,
            status: EnvelopeStatus::Queued,
        };
        self.envelopes.insert(id.clone(), envelope);
        self.queue.push_back(id);
        self.dispatch()
    }

    /// Sends each queued envelope to one live socket chosen at random.
    fn dispatch(&mut self) -> Vec<Deadline> {
        let mut deadlines = Vec::new();
        loop {
            let live: Vec<u64> = self
                .open
                .iter()
                .filter(|(_, socket)| !socket.draining)
                .map(|(id, _)| *id)
                .collect();
            if live.is_empty() {
                return deadlines;
            }
            let Some(envelope_id) = self.queue.pop_front() else {
                return deadlines;
            };
            let socket_id = live[(random_u64() % live.len() as u64) as usize];
            let Some(envelope) = self.envelopes.get_mut(&envelope_id) else {
                continue;
            };
            let frame = json!({
                "envelope_id": envelope_id,
                "type": envelope.kind.wire_name(),
                "accepts_response_payload": envelope.accepts_response_payload,
                "retry_attempt": envelope.retry_attempt,
                "retry_reason": envelope.retry_reason,
                "payload": envelope.payload,
            });
            let sent = self
                .open
                .get(&socket_id)
                .is_some_and(|s| s.tx.send(Outgoing::Frame(frame.to_string())).is_ok());
            if !sent {
                // Its task is gone: the socket is as good as closed.
                self.queue.push_front(envelope_id);
                deadlines.extend(self.socket_closed(socket_id, SocketEnd::Lost));
                continue;
            }
            envelope.deliveries.push(Delivery {
                socket: socket_id,
                at: Instant::now(),
                retry_attempt: envelope.retry_attempt,
                retry_reason: envelope.retry_reason.clone(),
            });
            envelope.status = EnvelopeStatus::Delivered;
            deadlines.push(Deadline {
                envelope_id,
                delivery: envelope.deliveries.len(),
                after: self.ack_timeout,
            });
        }
    }

    /// A text frame from a client: an ack settles its envelope. Anything
    /// else is ignored, as Slack ignores it.
    pub fn on_frame(&mut self, socket: u64, text: &str) {
        let Ok(Value::Object(frame)) = serde_json::from_str::<Value>(text) else {
            return;
        };
        let Some(envelope_id) = frame.get("envelope_id").and_then(Value::as_str) else {
            return;
        };
        let Some(envelope) = self.envelopes.get_mut(envelope_id) else {
            return;
        };
        if envelope.ack.is_some() {
            return;
        }
        let at = Instant::now();
        let delivered = envelope.deliveries.last().map(|d| d.at).unwrap_or(at);
        let ack = Ack {
            envelope_id: envelope_id.to_string(),
            socket,
            at,
            delay: at.saturating_duration_since(delivered),
            payload: frame.get("payload").cloned(),
        };
        envelope.ack = Some(ack.clone());
        if !matches!(envelope.status, EnvelopeStatus::GaveUp(_)) {
            envelope.status = EnvelopeStatus::Acked;
        }
        self.queue.retain(|queued| queued != envelope_id);
        self.acks.push(ack);
    }

    /// The ack window of a delivery has passed.
    pub fn deadline_passed(&mut self, deadline: &Deadline) -> Vec<Deadline> {
        let Some(envelope) = self.envelopes.get(&deadline.envelope_id) else {
            return Vec::new();
        };
        let current = envelope.deliveries.len() == deadline.delivery;
        if !current || envelope.status != EnvelopeStatus::Delivered {
            return Vec::new();
        }
        self.fail_delivery(&deadline.envelope_id, "timeout");
        self.dispatch()
    }

    /// A socket is gone: what it held unacked is redelivered elsewhere.
    pub fn socket_closed(&mut self, socket: u64, end: SocketEnd) -> Vec<Deadline> {
        self.forget_socket(socket, end);
        self.dispatch()
    }

    /// Marks a socket ended and queues what it held unacked; no dispatch.
    fn forget_socket(&mut self, socket: u64, end: SocketEnd) {
        if self.open.remove(&socket).is_none() {
            return;
        }
        if let Some(info) = self.sockets.get_mut(&socket) {
            info.ended = Some((Instant::now(), end));
        }
        let unacked: Vec<String> = self
            .envelopes
            .iter()
            .filter(|(_, e)| e.status == EnvelopeStatus::Delivered)
            .filter(|(_, e)| e.deliveries.last().is_some_and(|d| d.socket == socket))
            .map(|(id, _)| id.clone())
            .collect();
        for envelope_id in unacked {
            self.fail_delivery(&envelope_id, "socket closed");
        }
    }

    fn fail_delivery(&mut self, envelope_id: &str, reason: &str) {
        let Some(envelope) = self.envelopes.get_mut(envelope_id) else {
            return;
        };
        if envelope.kind == EnvelopeKind::Interactive || envelope.retry_attempt >= MAX_RETRIES {
            envelope.status = EnvelopeStatus::GaveUp(reason.to_string());
            return;
        }
        envelope.retry_attempt += 1;
        envelope.retry_reason = reason.to_string();
        envelope.status = EnvelopeStatus::Queued;
        self.queue.push_back(envelope_id.to_string());
    }

    /// Cuts every open socket; what they held waits for the next one.
    pub fn drop_all(&mut self) -> Vec<Deadline> {
        let ids: Vec<u64> = self.open.keys().copied().collect();
        for id in ids {
            if let Some(socket) = self.open.get(&id) {
                let _ = socket.tx.send(Outgoing::Drop);
            }
            self.forget_socket(id, SocketEnd::Dropped);
        }
        self.dispatch()
    }

    /// Tells every open socket to go away (`reason`, e.g.
    /// `refresh_requested`).
    pub fn disconnect_all(&mut self, reason: &str) {
        let frame = json!({
            "type": "disconnect",
            "reason": reason,
            "debug_info": { "host": DEBUG_HOST },
        })
        .to_string();
        for (id, socket) in self.open.iter_mut().filter(|(_, s)| !s.draining) {
            socket.draining = true;
            let grace = self.disconnect_grace;
            let _ = socket.tx.send(Outgoing::Disconnect {
                frame: frame.clone(),
                grace,
            });
            if let Some(info) = self.sockets.get_mut(id) {
                info.disconnect_sent = true;
            }
        }
    }

    /// Open sockets that take new envelopes (not told to disconnect).
    pub fn live_count(&self) -> usize {
        self.open.values().filter(|s| !s.draining).count()
    }

    pub fn sockets(&self) -> Vec<SocketInfo> {
        self.sockets.values().cloned().collect()
    }

    #[cfg(test)]
    pub fn acks(&self) -> Vec<Ack> {
        self.acks.clone()
    }

    pub fn ack(&self, envelope_id: &str) -> Option<Ack> {
        self.envelopes.get(envelope_id)?.ack.clone()
    }

    pub fn deliveries(&self, envelope_id: &str) -> Vec<Delivery> {
        self.envelopes
            .get(envelope_id)
            .map(|e| e.deliveries.clone())
            .unwrap_or_default()
    }

    pub fn payload(&self, envelope_id: &str) -> Option<Value> {
        Some(self.envelopes.get(envelope_id)?.payload.clone())
    }

    pub fn status(&self, envelope_id: &str) -> Option<EnvelopeStatus> {
        Some(self.envelopes.get(envelope_id)?.status.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

    fn socket(mode: &mut SocketMode) -> (u64, UnboundedReceiver<Outgoing>) {
        let (tx, rx) = unbounded_channel();
        let (id, _) = mode.open_socket(tx);
        (id, rx)
    }

    fn frames(rx: &mut UnboundedReceiver<Outgoing>) -> Vec<Value> {
        let mut frames = Vec::new();
        while let Ok(Outgoing::Frame(text)) = rx.try_recv() {
            frames.push(serde_json::from_str(&text).expect("JSON frame"));
        }
        frames
    }

    #[test]
    fn an_envelope_waits_for_a_socket_and_goes_to_one() {
        let mut mode = SocketMode::new();
        let deadlines = mode.enqueue("e1".into(), EnvelopeKind::EventsApi, false, json!({}));
        assert!(deadlines.is_empty());
        assert_eq!(mode.status("e1"), Some(EnvelopeStatus::Queued));
        let (_, mut rx) = socket(&mut mode);
        let sent = frames(&mut rx);
        assert_eq!(sent[0]["type"], "hello");
        assert_eq!(sent[1]["envelope_id"], "e1");
        assert_eq!(sent[1]["retry_attempt"], 0);
        assert_eq!(mode.status("e1"), Some(EnvelopeStatus::Delivered));
    }

    #[test]
    fn events_are_retried_three_times_interactions_never() {
        let mut mode = SocketMode::new();
        let (_, mut rx) = socket(&mut mode);
        let mut deadlines = mode.enqueue("ev".into(), EnvelopeKind::EventsApi, false, json!({}));
        for attempt in 1..=MAX_RETRIES {
            let deadline = deadlines.pop().expect("a deadline");
            deadlines = mode.deadline_passed(&deadline);
            let last = mode.deliveries("ev").pop().expect("delivery");
            assert_eq!(
                (last.retry_attempt, last.retry_reason.as_str()),
                (attempt, "timeout")
            );
        }
        let deadline = deadlines.pop().expect("a deadline");
        assert!(mode.deadline_passed(&deadline).is_empty());
        assert_eq!(
            mode.status("ev"),
            Some(EnvelopeStatus::GaveUp("timeout".into()))
        );
        assert_eq!(mode.deliveries("ev").len(), 4);

        let deadlines = mode.enqueue("in".into(), EnvelopeKind::Interactive, true, json!({}));
        assert!(mode.deadline_passed(&deadlines[0]).is_empty());
        assert_eq!(
            mode.status("in"),
            Some(EnvelopeStatus::GaveUp("timeout".into()))
        );
        assert_eq!(frames(&mut rx).len(), 1 + 4 + 1);
    }

    #[test]
    fn an_ack_settles_and_a_closed_socket_hands_over() {
        let mut mode = SocketMode::new();
        let (first, _rx1) = socket(&mut mode);
        mode.enqueue("a".into(), EnvelopeKind::EventsApi, false, json!({}));
        mode.on_frame(first, r#"{"envelope_id":"a","payload":{"x":1}}"#);
        assert_eq!(mode.status("a"), Some(EnvelopeStatus::Acked));
        assert_eq!(mode.acks()[0].payload, Some(json!({"x": 1})));

        mode.enqueue("b".into(), EnvelopeKind::EventsApi, false, json!({}));
        let (second, mut rx2) = socket(&mut mode);
        mode.socket_closed(first, SocketEnd::Lost);
        let last = mode.deliveries("b").pop().expect("redelivered");
        assert_eq!(last.socket, second);
        assert_eq!(last.retry_reason, "socket closed");
        assert!(frames(&mut rx2).iter().any(|f| f["envelope_id"] == "b"));
    }

    #[test]
    fn dropped_sockets_hand_nothing_to_each_other() {
        let mut mode = SocketMode::new();
        let (_, _rx1) = socket(&mut mode);
        let (_, _rx2) = socket(&mut mode);
        mode.enqueue("c".into(), EnvelopeKind::EventsApi, false, json!({}));
        assert!(mode.drop_all().is_empty());
        assert_eq!(mode.deliveries("c").len(), 1);
        assert_eq!(mode.status("c"), Some(EnvelopeStatus::Queued));
        let (third, _rx3) = socket(&mut mode);
        let last = mode.deliveries("c").pop().expect("redelivered");
        assert_eq!((last.socket, last.retry_attempt), (third, 1));
    }
}
