//! Who gets which WebSocket event, without the sockets: Mattermost's hub
//! (`server/channels/app/platform/web_hub.go`, `web_conn.go`).
//!
//! Each authenticated socket belongs to a *connection* with an id and its
//! own `seq` counter: `hello` is 0, each event after it one more. An event
//! goes to every connection whose user it is for (a channel's members, or
//! one user). The last [`DEAD_QUEUE_SIZE`] events sent stay in the
//! connection's dead queue. When a socket goes away its connection stays,
//! inactive, for the resume window, and queues what is published meanwhile
//! (at most [`SEND_QUEUE_SIZE`]; past that it is dropped, as the hub drops
//! a connection whose queue is full). A client that reconnects with
//! `?connection_id=…&sequence_number=N` (the next `seq` it wants) gets,
//! as `writePump` gives it: the dead queue from `N` on and then what was
//! queued; or, when `N` is neither in the dead queue nor right after its
//! last event (events were lost), a new connection id, `seq` back to 0 and
//! a fresh `hello`; with the right `N` and nothing missed, just what was
//! queued. An unknown or expired connection id gets a fresh connection.
//!
//! An event for users with no connection at all goes nowhere, as in
//! Mattermost; [`Hub::hold`] (a test knob) keeps such events instead and
//! hands them to the next fresh connection of one of their users.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::mpsc::UnboundedSender;

use super::ids;
use super::state::SERVER_VERSION;

/// `deadQueueSize` in `web_conn.go`.
pub const DEAD_QUEUE_SIZE: usize = 128;
/// `sendQueueSize` in `web_conn.go`.
pub const SEND_QUEUE_SIZE: usize = 256;
/// How long an inactive connection can be resumed (Mattermost reaps
/// inactive connections after the hub's stale threshold; the fake's
/// default is this, [`super::FakeMattermost::set_resume_window`] changes it).
pub const RESUME_WINDOW: Duration = Duration::from_secs(300);

/// A command to a socket's task.
#[derive(Debug)]
pub(crate) enum Outgoing {
    Frame(String),
    /// Cut the TCP connection, no close frame.
    Drop,
}

struct Connection {
    user: String,
    next_seq: i64,
    /// `(seq, frame)` of the last events sent.
    dead: VecDeque<(i64, String)>,
    /// Events published while no socket was attached.
    queued: VecDeque<Value>,
    socket: Option<(u64, UnboundedSender<Outgoing>)>,
    inactive_since: Option<Instant>,
}

impl Connection {
    fn new(user: &str) -> Connection {
        Connection {
            user: user.to_string(),
            next_seq: 0,
            dead: VecDeque::new(),
            queued: VecDeque::new(),
            socket: None,
            inactive_since: None,
        }
    }

    /// Sends (numbering it) or queues an event; false when the queue is
    /// full and the connection must go.
    fn deliver(&mut self, event: &Value) -> bool {
        let Some((_, tx)) = &self.socket else {
            self.queued.push_back(event.clone());
            return self.queued.len() <= SEND_QUEUE_SIZE;
        };
        let mut event = event.clone();
        event["seq"] = json!(self.next_seq);
        let frame = event.to_string();
        // A closed receiver means the task is ending; it detaches itself.
        let _ = tx.send(Outgoing::Frame(frame.clone()));
        self.dead.push_back((self.next_seq, frame));
        if self.dead.len() > DEAD_QUEUE_SIZE {
            self.dead.pop_front();
        }
        self.next_seq += 1;
        true
    }

    fn flush(&mut self) {
        while let Some(event) = self.queued.pop_front() {
            self.deliver(&event);
        }
    }

    fn hello(&mut self, connection_id: &str) {
        let hello = event(
            "hello",
            json!({ "server_version": SERVER_VERSION, "connection_id": connection_id }),
            Broadcast::user(&self.user),
        );
        self.deliver(&hello);
    }
}

/// Where a socket asked to resume.
pub(crate) struct Resume {
    pub connection_id: String,
    /// `sequence_number`, unparsed.
    pub sequence: Option<String>,
}

pub(crate) struct Hub {
    connections: HashMap<String, Connection>,
    sockets_opened: usize,
    pub hold: bool,
    held: Vec<(Value, Vec<String>)>,
    pub resume_window: Duration,
}

impl Hub {
    pub fn new() -> Hub {
        Hub {
            connections: HashMap::new(),
            sockets_opened: 0,
            hold: false,
            held: Vec::new(),
            resume_window: RESUME_WINDOW,
        }
    }

    /// Counts a WebSocket upgrade; answers the socket's number.
    pub fn open_socket(&mut self) -> u64 {
        self.sockets_opened += 1;
        self.sockets_opened as u64
    }

    pub fn sockets_opened(&self) -> usize {
        self.sockets_opened
    }

    /// Sockets attached to a connection (authenticated and open).
    pub fn live_count(&self) -> usize {
        self.connections
            .values()
            .filter(|c| c.socket.is_some())
            .count()
    }

    fn reap(&mut self) {
        let window = self.resume_window;
        self.connections.retain(|_, c| match c.inactive_since {
            Some(since) => since.elapsed() < window,
            None => true,
        });
    }

    /// Attaches an authenticated socket of `user`, fresh or resumed (see
    /// the module doc); answers its connection id, or why the socket must
    /// close (a connection id without a good `sequence_number`).
    pub fn attach(
        &mut self,
        user: &str,
        resume: Option<Resume>,
        socket: u64,
        tx: UnboundedSender<Outgoing>,
    ) -> Result<String, String> {
        self.reap();
        let resumable = resume.as_ref().is_some_and(|r| {
            let found = self.connections.get(&r.connection_id);
            found.is_some_and(|c| c.user == user && c.socket.is_none())
        });
        let Some(resume) = resume.filter(|_| resumable) else {
            return Ok(self.attach_fresh(user, socket, tx));
        };
        let sequence = resume
            .sequence
            .ok_or("sequence number not present in websocket request")?;
        let sequence: i64 = sequence
            .parse()
            .ok()
            .filter(|n: &i64| *n >= 0)
            .ok_or_else(|| format!("invalid sequence number {sequence}"))?;
        let mut id = resume.connection_id;
        let Some(mut connection) = self.connections.remove(&id) else {
            return Ok(self.attach_fresh(user, socket, tx));
        };
        connection.socket = Some((socket, tx));
        connection.inactive_since = None;
        let from = connection.dead.iter().position(|(seq, _)| *seq == sequence);
        let lossless = connection
            .dead
            .back()
            .is_none_or(|(last, _)| *last == sequence - 1);
        match from {
            Some(from) => {
                let frames: Vec<String> = connection
                    .dead
                    .range(from..)
                    .map(|(_, f)| f.clone())
                    .collect();
                if let Some((_, tx)) = &connection.socket {
                    for frame in frames {
                        let _ = tx.send(Outgoing::Frame(frame));
                    }
                }
            }
            None if lossless => connection.next_seq = sequence,
            None => {
                id = ids::new_id();
                connection.dead.clear();
                connection.next_seq = 0;
                connection.hello(&id);
            }
        }
        connection.flush();
        self.connections.insert(id.clone(), connection);
        Ok(id)
    }

    fn attach_fresh(&mut self, user: &str, socket: u64, tx: UnboundedSender<Outgoing>) -> String {
        let id = ids::new_id();
        let mut connection = Connection::new(user);
        connection.socket = Some((socket, tx));
        connection.hello(&id);
        let (mine, others): (Vec<_>, Vec<_>) = std::mem::take(&mut self.held)
            .into_iter()
            .partition(|(_, users)| users.iter().any(|u| u == user));
        self.held = others;
        for (event, _) in mine {
            connection.deliver(&event);
        }
        self.connections.insert(id.clone(), connection);
        id
    }

    /// Publishes an event to the connections of `users`.
    pub fn publish(&mut self, event: Value, users: &[String]) {
        self.reap();
        let mut reached = false;
        let mut full = Vec::new();
        for (id, connection) in &mut self.connections {
            if users.contains(&connection.user) {
                reached = true;
                if !connection.deliver(&event) {
                    full.push(id.clone());
                }
            }
        }
        for id in full {
            self.connections.remove(&id);
        }
        if !reached && self.hold {
            self.held.push((event, users.to_vec()));
        }
    }

    /// The socket's task ended by itself: its connection goes inactive.
    pub fn detach(&mut self, socket: u64) {
        for connection in self.connections.values_mut() {
            if connection
                .socket
                .as_ref()
                .is_some_and(|(s, _)| *s == socket)
            {
                connection.socket = None;
                connection.inactive_since = Some(Instant::now());
            }
        }
    }

    /// Cuts every socket; their connections go inactive.
    pub fn drop_all(&mut self) {
        for connection in self.connections.values_mut() {
            if let Some((_, tx)) = connection.socket.take() {
                let _ = tx.send(Outgoing::Drop);
                connection.inactive_since = Some(Instant::now());
            }
        }
    }
}

/// An event's `broadcast`: who it was sent to.
pub(crate) struct Broadcast {
    pub user_id: String,
    pub channel_id: String,
    pub team_id: String,
}

impl Broadcast {
    pub fn user(user: &str) -> Broadcast {
        Broadcast {
            user_id: user.to_string(),
            channel_id: String::new(),
            team_id: String::new(),
        }
    }

    pub fn channel(channel: &str) -> Broadcast {
        Broadcast {
            user_id: String::new(),
            channel_id: channel.to_string(),
            team_id: String::new(),
        }
    }
}

/// A WebSocket event without its `seq` (each connection numbers it).
pub(crate) fn event(name: &str, data: Value, broadcast: Broadcast) -> Value {
    json!({
        "event": name,
        "data": data,
        "broadcast": {
            "omit_users": null,
            "user_id": broadcast.user_id,
            "channel_id": broadcast.channel_id,
            "team_id": broadcast.team_id,
            "connection_id": "",
            "omit_connection_id": "",
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

    fn frames(rx: &mut UnboundedReceiver<Outgoing>) -> Vec<Value> {
        let mut out = Vec::new();
        while let Ok(Outgoing::Frame(frame)) = rx.try_recv() {
            out.push(serde_json::from_str(&frame).expect("json"));
        }
        out
    }

    fn posted(n: u32) -> Value {
        event("posted", json!({ "n": n }), Broadcast::channel("c"))
    }

    #[test]
    fn events_are_numbered_after_hello_and_replayed_on_resume() {
        let mut hub = Hub::new();
        let users = vec!["u".to_string()];
        let (tx, mut rx) = unbounded_channel();
        let id = hub.attach("u", None, 1, tx).expect("attach");
        hub.publish(posted(1), &users);
        let seen = frames(&mut rx);
        assert_eq!(seen[0]["event"], "hello");
        assert_eq!(seen[0]["data"]["connection_id"], id.as_str());
        assert_eq!(
            (seen[0]["seq"].as_i64(), seen[1]["seq"].as_i64()),
            (Some(0), Some(1))
        );

        hub.drop_all();
        hub.publish(posted(2), &users);
        // The client saw seq 0 only: it asks for 1 again.
        let (tx, mut rx) = unbounded_channel();
        let resume = Resume {
            connection_id: id.clone(),
            sequence: Some("1".into()),
        };
        assert_eq!(
            hub.attach("u", Some(resume), 2, tx).as_deref(),
            Ok(id.as_str())
        );
        let seen = frames(&mut rx);
        let got: Vec<(i64, u64)> = seen
            .iter()
            .map(|e| {
                (
                    e["seq"].as_i64().unwrap_or(-1),
                    e["data"]["n"].as_u64().unwrap_or(0),
                )
            })
            .collect();
        assert_eq!(got, vec![(1, 1), (2, 2)]);
    }

    #[test]
    fn a_lost_sequence_gets_a_new_connection_and_hello() {
        let mut hub = Hub::new();
        let (tx, _rx) = unbounded_channel();
        let id = hub.attach("u", None, 1, tx).expect("attach");
        hub.drop_all();
        let (tx, mut rx) = unbounded_channel();
        let resume = Resume {
            connection_id: id.clone(),
            sequence: Some("7".into()),
        };
        let new_id = hub.attach("u", Some(resume), 2, tx).expect("attach");
        assert_ne!(new_id, id);
        let seen = frames(&mut rx);
        assert_eq!(seen[0]["event"], "hello");
        assert_eq!(seen[0]["seq"], 0);

        hub.drop_all();
        let (tx, _rx) = unbounded_channel();
        let resume = Resume {
            connection_id: new_id,
            sequence: None,
        };
        assert!(hub.attach("u", Some(resume), 3, tx).is_err());
    }

    #[test]
    fn events_for_nobody_are_dropped_unless_held() {
        let mut hub = Hub::new();
        let users = vec!["u".to_string()];
        hub.publish(posted(1), &users);
        hub.hold = true;
        hub.publish(posted(2), &users);
        let (tx, mut rx) = unbounded_channel();
        hub.attach("u", None, 1, tx).expect("attach");
        let seen = frames(&mut rx);
        let ns: Vec<u64> = seen
            .iter()
            .filter_map(|e| e["data"]["n"].as_u64())
            .collect();
        assert_eq!(ns, vec![2]);
    }
}
