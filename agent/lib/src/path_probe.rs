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

/// Datagrams heard within the [`BUSY_TICKS`] ticks (1 s) before a
/// silence that make the edge busy: more than a keep-alive's answer. An
/// edge with a request waiting on an idle agent probes it twice a second,
/// and one moving data sends acknowledgements or data.
const BUSY_DATAGRAMS: u64 = 2;
const BUSY_TICKS: usize = 10;

/// Probes the edge when it falls silent after being busy (see the module's
/// doc). Never returns: it is dropped with the connection.
pub(crate) async fn keep_path_open(conn: &quinn::Connection) -> std::convert::Infallible {
    let mut watch = Silence::new(conn.stats().udp_rx.datagrams);
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
    /// Datagrams heard in each of the last ticks, the newest last.
    recent: [u64; BUSY_TICKS],
    /// When the silence began, if the edge was busy before it.
    since: Option<Instant>,
    probed: Option<Instant>,
}

impl Silence {
    fn new(heard: u64) -> Self {
        Self {
            heard,
            recent: [0; BUSY_TICKS],
            since: None,
            probed: None,
        }
    }

    /// `heard`: the connection's datagrams received so far. Whether to
    /// probe now.
    fn tick(&mut self, heard: u64, now: Instant) -> bool {
        let new = heard.saturating_sub(self.heard);
        self.heard = heard;
        if new > 0 {
            self.recent.rotate_left(1);
            self.recent[BUSY_TICKS - 1] = new;
            self.since = None;
            self.probed = None;
            return false;
        }
        let since = match self.since {
            Some(since) => since,
            None => {
                let busy = self.recent.iter().sum::<u64>() >= BUSY_DATAGRAMS;
                self.recent = [0; BUSY_TICKS];
                if !busy {
                    return false;
                }
                // It began a tick ago, at most.
                let since = now - TICK;
                self.since = Some(since);
                since
            }
        };
        let silent = now - since;
        let due = self.probed.is_none_or(|at| now - at >= PROBE_AFTER);
        if silent >= PROBE_AFTER && silent <= PROBE_FOR && due {
            self.probed = Some(now);
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs ticks with `heard` counts; the ticks at which it probes.
    fn probes(heard: &[u64]) -> Vec<usize> {
        let start = Instant::now();
        let mut watch = Silence::new(0);
        heard
            .iter()
            .enumerate()
            .filter(|&(i, &h)| watch.tick(h, start + TICK * (i as u32 + 1)))
            .map(|(i, _)| i)
            .collect()
    }

    #[test]
    fn a_busy_edge_gone_silent_is_probed_every_600_ms_for_3_s() {
        // Busy for five ticks, then silent for 5 s.
        let mut heard: Vec<u64> = (1..=5).map(|i| i * 10).collect();
        heard.extend(std::iter::repeat_n(50, 50));
        // The silence is counted from tick 4, when the edge was last
        // heard: probes 600 ms in, then every 600 ms, up to 3 s.
        assert_eq!(probes(&heard), vec![10, 16, 22, 28, 34]);
    }

    #[test]
    fn hearing_the_edge_again_ends_the_probes() {
        let mut heard: Vec<u64> = vec![10, 20, 30, 30, 30, 30, 30, 30, 30, 30, 31];
        heard.extend(std::iter::repeat_n(31, 30));
        // Silent from tick 2, probed at tick 8; heard at tick 10, after
        // which one datagram is not busy: no more probes.
        assert_eq!(probes(&heard), vec![8]);
    }

    #[test]
    fn an_idle_edge_is_not_probed() {
        // Only a keep-alive's answer now and then.
        let mut heard = vec![1; 50];
        heard.extend(std::iter::repeat_n(2, 50));
        assert!(probes(&heard).is_empty());
    }
}
