//! Keeping the edge's way back to the agent open when the agent's address
//! changes under a connection (a NAT that rebinds its port, a laptop that
//! moves to another network).
//!
//! The edge sends to the address the agent's packets last came from, so
//! after such a change nothing it sends arrives until the agent sends
//! something: then QUIC moves the connection to the new address
//! (migration; the edge validates the path). An agent that is sending
//! (a download) does so at once. One that is waiting (on its dev server,
//! or for the edge to open its flow-control window, which it does by
//! sending) would send nothing until its next keep-alive, 5 s away; the
//! edge, which probes an agent it has requests waiting on, takes one
//! silent for a second for dead and ends its requests (see the edge's
//! `upstream` liveness watch). So an agent that heard the edge busy and
//! then nothing for [`PROBE_AFTER`] sends it a probe, which takes the new
//! path if there is one, and again every [`PROBE_AFTER`] while the silence
//! lasts, for [`PROBE_FOR`] at most.
//!
//! An agent whose edge was quiet before (idle, with only its keep-alives
//! answered) sends nothing more: probes cost the edge a wake-up each.

use std::time::Duration;

use tokio::time::Instant;

/// How often the agent looks at what it heard from the edge.
const TICK: Duration = Duration::from_millis(100);

/// Silence after which the agent probes, and between probes: inside the
/// edge's liveness floor (1 s), so that the edge hears the agent on its
/// new path before it gives up on it, and longer than the 500 ms between
/// the probes of an edge waiting on an idle agent, so that the two do not
/// answer each other's.
const PROBE_AFTER: Duration = Duration::from_millis(600);

/// How long a silence is probed; past it QUIC's idle timeout decides.
const PROBE_FOR: Duration = Duration::from_secs(3);

/// Datagrams heard within the last [`BUSY_TICKS`] ticks (1 s) before a
/// silence that make the edge busy: more than a keep-alive's answer. An
/// edge with a request waiting on an idle agent probes it twice a second,
/// and one moving data sends acknowledgements or data. The answers to the
/// agent's own probes do not count, or they would keep it probing.
const BUSY_DATAGRAMS: u64 = 2;
const BUSY_TICKS: usize = 10;

/// Probes the edge when it falls silent after being busy (see the module's
/// doc). Never returns: it is dropped with the connection.
pub(crate) async fn keep_path_open(conn: &quinn::Connection) -> std::convert::Infallible {
    let mut watch = Silence::new(conn.stats().udp_rx.datagrams, Instant::now());
    loop {
        tokio::time::sleep(TICK).await;
        let now = Instant::now();
        if watch.tick(conn.stats().udp_rx.datagrams, now) && conn.max_datagram_size().is_some() {
            // An ACK-eliciting packet, which the edge reads no further.
            let _ = conn.send_datagram(bytes::Bytes::from_static(b"?"));
        }
    }
}

/// What the agent heard from the edge, tick by tick, and when to probe.
struct Silence {
    heard: u64,
    /// Datagrams heard in each of the last ticks, the newest last, less
    /// the answers to probes.
    recent: [u64; BUSY_TICKS],
    /// Probes not answered yet (each draws one acknowledgement).
    answers_due: u64,
    /// The last tick that heard anything.
    last_heard: Instant,
    /// While silent: whether the edge was busy before.
    busy_before: Option<bool>,
    probed: Option<Instant>,
}

impl Silence {
    fn new(heard: u64, now: Instant) -> Self {
        Self {
            heard,
            recent: [0; BUSY_TICKS],
            answers_due: 0,
            last_heard: now,
            busy_before: None,
            probed: None,
        }
    }

    /// `heard`: the connection's datagrams received so far. Whether to
    /// probe now.
    fn tick(&mut self, heard: u64, now: Instant) -> bool {
        let new = heard.saturating_sub(self.heard);
        self.heard = heard;
        if new > 0 {
            let answers = new.min(self.answers_due);
            self.answers_due -= answers;
            self.push(new - answers);
            self.last_heard = now;
            self.busy_before = None;
            self.probed = None;
            return false;
        }
        let busy = *self
            .busy_before
            .get_or_insert_with(|| self.recent.iter().sum::<u64>() >= BUSY_DATAGRAMS);
        self.push(0);
        let silent = now - self.last_heard;
        let due = self.probed.is_none_or(|at| now - at >= PROBE_AFTER);
        if busy && silent >= PROBE_AFTER && silent <= PROBE_FOR && due {
            self.probed = Some(now);
            self.answers_due = (self.answers_due + 1).min(BUSY_TICKS as u64);
            return true;
        }
        false
    }

    fn push(&mut self, n: u64) {
        self.recent.rotate_left(1);
        self.recent[BUSY_TICKS - 1] = n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs ticks with `heard` counts; the ticks at which it probes.
    fn probes(heard: &[u64]) -> Vec<usize> {
        let start = Instant::now();
        let mut watch = Silence::new(0, start);
        heard
            .iter()
            .enumerate()
            .filter(|&(i, &h)| watch.tick(h, start + TICK * (i as u32 + 1)))
            .map(|(i, _)| i)
            .collect()
    }

    /// Cumulative counts from the datagrams heard at each tick.
    fn cumulative(each: &[u64]) -> Vec<u64> {
        each.iter()
            .scan(0, |sum, n| {
                *sum += n;
                Some(*sum)
            })
            .collect()
    }

    #[test]
    fn a_busy_edge_gone_silent_is_probed_every_600_ms_for_3_s() {
        // Busy for five ticks, then silent for 5 s.
        let mut each = vec![10; 5];
        each.extend([0; 50]);
        // The silence is counted from tick 4, when the edge was last
        // heard: probes 600 ms in, then every 600 ms, up to 3 s.
        assert_eq!(probes(&cumulative(&each)), vec![10, 16, 22, 28, 34]);
    }

    #[test]
    fn answered_probes_of_an_edge_gone_idle_end() {
        // Busy, then silent from tick 3; the probe at tick 8 is answered
        // at tick 10, while the busy ticks are less than a second old: one
        // more probe, answered at tick 17, and then none.
        let mut each = vec![10; 3];
        each.extend([0; 7]);
        each.push(1);
        each.extend([0; 6]);
        each.push(1);
        each.extend([0; 40]);
        assert_eq!(probes(&cumulative(&each)), vec![8, 16]);
    }

    #[test]
    fn an_idle_edge_is_not_probed() {
        // Only a keep-alive's answer now and then.
        let mut each = vec![1];
        each.extend([0; 49]);
        each.push(1);
        each.extend([0; 49]);
        assert!(probes(&cumulative(&each)).is_empty());
    }

    #[test]
    fn an_edge_probing_a_waiting_agent_is_not_probed_back() {
        // The edge's liveness probes, every 500 ms: busy, but never
        // silent for 600 ms.
        let each: Vec<u64> = (0..60).map(|i| u64::from(i % 5 == 0)).collect();
        assert!(probes(&cumulative(&each)).is_empty());
    }
}
