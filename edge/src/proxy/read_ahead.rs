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
//! the listener's front thread (`front::h1::Reading::read_ahead`, on raw
//! bytes), so a slow POST costs the runtime serving requests nothing;
//! every request's body is read ahead again by the proxy ([`in_proxy`], on
//! the request's body), which for a first request finds it already
//! there.

use std::time::Duration;

use crate::error_page::EdgeError;
use crate::request_body::{BodyOutcome, BodyWatch, MinRate, RequestBody};

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

    fn rules(min_rate: Option<MinRate>, stall_ms: u64) -> BodyRules {
        BodyRules {
            min_rate,
            stall: Duration::from_millis(stall_ms),
            cap: None,
        }
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
