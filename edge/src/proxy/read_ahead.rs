//! The read-ahead of request bodies, one policy for both places it runs.
//!
//! Of a request body of declared length (Content-Length), the edge reads
//! [`READ_AHEAD`], or all of it when it is smaller, before the origin gets
//! any, as nginx reads bodies by default (`proxy_request_buffering`). A dev
//! server often serves one request at a time: a visitor trickling a POST to
//! it would hold it for everyone, and a slow-POST attack would cost the
//! tunnel, the agent and the origin a packet, a wake-up and a write per
//! byte. Such a body is judged by the least rate at the edge alone, and a
//! real upload, which passes the mark in milliseconds, streams on from
//! there. Bodies of unknown length (chunked, or HTTP/2 without a length)
//! stream from their first byte: the origin may answer parts of them as
//! they come (gRPC, full-duplex streams). So do requests that `Expect:
//! 100-continue` (the origin may refuse them before their body) and
//! upgrades.
//!
//! It runs in two places. A connection's first HTTP/1 request is read on
//! the listener's front thread ([`on_front`], through the framing gate,
//! on raw bytes), so a slow POST costs the runtime serving requests
//! nothing; every request's body is read ahead again by the proxy
//! ([`in_proxy`], on hyper's body), which for a first request finds it
//! already there.

use std::time::{Duration, Instant};

use tokio::io::AsyncRead;

use crate::error_page::EdgeError;
use crate::h1_framing::FramingGate;
use crate::request_body::{BodyOutcome, BodyWatch, MinRate, RateWindows, RequestBody};

/// Bytes of a body of declared length read ahead at most.
pub const READ_AHEAD: u64 = 64 << 10;

/// The rules a body read ahead at the edge is held to: the least rate, the
/// longest it may stop, and the cap on its size.
#[derive(Debug, Clone, Copy)]
pub struct BodyRules {
    pub min_rate: Option<MinRate>,
    pub stall: Duration,
    pub cap: Option<u64>,
}

impl BodyRules {
    /// How much of a request's body is read ahead: some for a declared,
    /// non-empty length within the cap, of a request without `Expect` that
    /// asks for no upgrade; `None` for the rest.
    pub fn ahead(&self, length: Option<u64>, expects: bool, upgrade: bool) -> Option<u64> {
        let length = length.filter(|&n| n > 0)?;
        if expects || upgrade || self.cap.is_some_and(|cap| length > cap) {
            return None;
        }
        Some(length.min(READ_AHEAD))
    }

    /// 408 for a body slower than the least rate.
    pub fn too_slow(&self) -> EdgeError {
        let rate = self.min_rate.unwrap_or(MinRate {
            bytes: 0,
            window: Duration::ZERO,
        });
        EdgeError::BodyTooSlow(rate.bytes, rate.window.as_secs())
    }
}

/// On the front, after a connection's first head (which the gate holds):
/// reads what [`BodyRules::ahead`] says of its body into the gate, under
/// the least rate; what to answer instead if it was too slow or stalled,
/// `Err(None)` if the connection failed. A body cut short is left for the
/// proxy to answer as broken.
pub(crate) async fn on_front<S: AsyncRead + Unpin>(
    gate: &mut FramingGate<S>,
    rules: &BodyRules,
) -> Result<(), Option<EdgeError>> {
    let Some(first) = gate.first_head() else {
        return Ok(());
    };
    let Some(ahead) = rules.ahead(first.length, first.expects, first.upgrade) else {
        return Ok(());
    };
    let end = first.head_end + ahead;
    let mut windows = RateWindows::new(rules.min_rate, gate.read_end());
    let mut moved = Instant::now();
    while gate.read_end() < end {
        let stalls = moved + rules.stall;
        let wake = windows.end().map_or(stalls, |end| end.min(stalls));
        match tokio::time::timeout_at(wake.into(), gate.read_more()).await {
            Ok(Ok(0)) => return Ok(()),
            Ok(Ok(_)) => moved = Instant::now(),
            Ok(Err(_)) => return Err(None),
            Err(_) if moved.elapsed() >= rules.stall => {
                return Err(Some(EdgeError::BodyStalled(rules.stall.as_secs())));
            }
            Err(_) => {}
        }
        if windows.over() && windows.judge(gate.read_end(), false) {
            return Err(Some(rules.too_slow()));
        }
    }
    Ok(())
}

/// In the proxy: reads what [`BodyRules::ahead`] says of `body` under the
/// least rate; what to answer instead when it fails, stalls or is too slow.
pub(crate) async fn in_proxy(
    body: &mut RequestBody,
    watch: &mut BodyWatch,
    rules: &BodyRules,
) -> Option<EdgeError> {
    let read = body.read_ahead(READ_AHEAD);
    tokio::pin!(read);
    let read = tokio::select! {
        read = &mut read => read,
        outcome = watch.ended_or_stalled(rules.stall, rules.min_rate) => match outcome {
            BodyOutcome::Ended => read.await,
            BodyOutcome::Stalled => return Some(EdgeError::BodyStalled(rules.stall.as_secs())),
            BodyOutcome::TooSlow => return Some(rules.too_slow()),
        },
    };
    match read {
        Ok(()) => None,
        Err(_) if watch.too_large() => Some(EdgeError::BodyTooLarge(rules.cap.unwrap_or_default())),
        Err(_) => Some(EdgeError::BadRequestBody),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::h1_framing::HeadLimits;
    use tokio::io::{AsyncWriteExt, DuplexStream};

    const LIMITS: HeadLimits = HeadLimits {
        max_head_bytes: 8192,
        max_headers: 100,
    };

    fn rules(min_rate: Option<MinRate>, stall_ms: u64) -> BodyRules {
        BodyRules {
            min_rate,
            stall: Duration::from_millis(stall_ms),
            cap: None,
        }
    }

    /// A gate over one end of a pipe that has read the first head `head`
    /// and then `sent` of its body: the visitor's end, the gate, and the
    /// head's length.
    async fn front(head: &str, sent: &[u8]) -> (DuplexStream, FramingGate<DuplexStream>, u64) {
        let (mut visitor, edge) = tokio::io::duplex(1 << 20);
        visitor.write_all(head.as_bytes()).await.unwrap();
        visitor.write_all(sent).await.unwrap();
        let mut gate = FramingGate::new(edge, LIMITS);
        while !gate.first_head_done() {
            assert_ne!(gate.read_more().await.unwrap(), 0, "the head is whole");
        }
        (visitor, gate, head.len() as u64)
    }

    fn post(length: u64, extra: &str) -> String {
        format!("POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n{extra}\r\n")
    }

    #[tokio::test]
    async fn a_small_body_is_read_whole_before_the_proxy_gets_it() {
        let (mut visitor, mut gate, head) = front(&post(5, ""), b"hel").await;
        let late = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            visitor.write_all(b"lo").await.unwrap();
            visitor
        });
        let started = Instant::now();
        assert!(on_front(&mut gate, &rules(None, 5_000)).await.is_ok());
        assert!(
            started.elapsed() >= Duration::from_millis(40),
            "it waited for the rest"
        );
        assert_eq!(gate.read_end(), head + 5);
        drop(late.await.unwrap());
    }

    /// Bodies that need no more than what came with the head, or than the
    /// mark: the front returns at once, though the rest never comes,
    /// having read at least what the rule says and no more than was sent.
    #[tokio::test]
    async fn the_front_reads_no_further_than_the_rule() {
        let large = vec![b'a'; READ_AHEAD as usize + 10];
        for (case, head, sent, least) in [
            (
                "a 1 MB body, to the mark",
                post(1_000_000, ""),
                &large[..],
                READ_AHEAD,
            ),
            (
                "Expect: 100-continue, nothing",
                post(5, "Expect: 100-continue\r\n"),
                &[][..],
                0,
            ),
        ] {
            let (_visitor, mut gate, head) = front(&head, sent).await;
            let done = tokio::time::timeout(
                Duration::from_secs(5),
                on_front(&mut gate, &rules(None, 5_000)),
            )
            .await
            .expect(case);
            assert!(done.is_ok(), "{case}");
            let read = gate.read_end() - head;
            assert!(
                (least..=sent.len() as u64).contains(&read),
                "{case}: read {read}"
            );
        }
    }

    #[tokio::test]
    async fn a_body_that_stops_is_answered_as_stalled() {
        let (_visitor, mut gate, _) = front(&post(5, ""), b"he").await;
        let started = Instant::now();
        let got = on_front(&mut gate, &rules(None, 200)).await;
        assert!(
            matches!(got, Err(Some(EdgeError::BodyStalled(_)))),
            "{got:?}"
        );
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(190) && took < Duration::from_secs(2),
            "{took:?}"
        );
    }

    #[tokio::test]
    async fn a_body_under_the_least_rate_is_answered_as_too_slow() {
        // A byte every 50 ms, against at least 100 bytes per second.
        let (mut visitor, mut gate, _) = front(&post(1000, ""), b"").await;
        let trickle = tokio::spawn(async move {
            for _ in 0..100 {
                tokio::time::sleep(Duration::from_millis(50)).await;
                if visitor.write_all(b"a").await.is_err() {
                    break;
                }
            }
        });
        let slow = MinRate {
            bytes: 100,
            window: Duration::from_secs(1),
        };
        let started = Instant::now();
        let got = on_front(&mut gate, &rules(Some(slow), 5_000)).await;
        assert!(
            matches!(got, Err(Some(EdgeError::BodyTooSlow(100, 1)))),
            "{got:?}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
        trickle.abort();
    }

    #[tokio::test]
    async fn a_body_cut_short_is_left_for_the_proxy() {
        let (visitor, mut gate, head) = front(&post(5, ""), b"he").await;
        drop(visitor);
        assert!(on_front(&mut gate, &rules(None, 5_000)).await.is_ok());
        assert_eq!(gate.read_end(), head + 2);
    }

    #[test]
    fn only_a_declared_length_within_the_cap_is_read_ahead() {
        let capped = |cap| BodyRules {
            cap,
            ..rules(None, 1_000)
        };
        let free = capped(None);
        assert_eq!(free.ahead(Some(10), false, false), Some(10));
        assert_eq!(
            free.ahead(Some(100_000_000), false, false),
            Some(READ_AHEAD)
        );
        assert_eq!(free.ahead(Some(0), false, false), None);
        assert_eq!(free.ahead(None, false, false), None);
        assert_eq!(free.ahead(Some(10), true, false), None);
        assert_eq!(free.ahead(Some(10), false, true), None);
        assert_eq!(capped(Some(10)).ahead(Some(10), false, false), Some(10));
        assert_eq!(capped(Some(9)).ahead(Some(10), false, false), None);
        // A large length within a cap is read ahead up to READ_AHEAD; one
        // byte over the cap, not at all.
        let large = 100_000_000;
        let within = capped(Some(large)).ahead(Some(large), false, false);
        assert_eq!(within, Some(READ_AHEAD));
        assert_eq!(
            capped(Some(large - 1)).ahead(Some(large), false, false),
            None
        );
    }
}
