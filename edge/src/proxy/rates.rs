//! Request rates: per visitor address (an IPv4 address or an IPv6 /64)
//! and per preview, each a rate per second with bursts of ten seconds'
//! worth, so a dev server's page load of hundreds of module requests
//! passes while a flood does not. Past either, 429 with Retry-After.

use std::net::IpAddr;
use std::num::NonZeroU32;

use crate::error_page::Exceeded;
use calvin_proto::PreviewName;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

use crate::guesses::Source;

/// How many seconds' worth of requests a burst may hold.
pub const BURST_SECONDS: u32 = 10;

struct Limiter<K: std::hash::Hash + Eq + Clone> {
    limiter: DefaultKeyedRateLimiter<K>,
    per_second: u32,
}

impl<K: std::hash::Hash + Eq + Clone> Limiter<K> {
    /// `None` when `per_second` is 0 (no limit).
    fn new(per_second: u32) -> Option<Self> {
        let rate = NonZeroU32::new(per_second)?;
        let burst = rate.saturating_mul(NonZeroU32::new(BURST_SECONDS)?);
        Some(Self {
            limiter: RateLimiter::dashmap(Quota::per_second(rate).allow_burst(burst)),
            per_second,
        })
    }

    fn check(&self, key: &K, clock: &DefaultClock) -> Result<(), Exceeded> {
        self.limiter.check_key(key).map_err(|not_until| Exceeded {
            per_second: self.per_second,
            burst: self.per_second.saturating_mul(BURST_SECONDS),
            retry_after: not_until.wait_time_from(clock.now()),
        })
    }

    fn sweep(&self) {
        self.limiter.retain_recent();
        self.limiter.shrink_to_fit();
    }
}

/// The edge's request rates.
pub struct Rates {
    per_address: Option<Limiter<Source>>,
    per_preview: Option<Limiter<PreviewName>>,
    clock: DefaultClock,
}

impl Rates {
    /// Rates per second; 0 turns a limit off.
    pub fn new(per_address: u32, per_preview: u32) -> Self {
        Self {
            per_address: Limiter::new(per_address),
            per_preview: Limiter::new(per_preview),
            clock: DefaultClock::default(),
        }
    }

    /// Counts a request from `ip`.
    pub fn from_address(&self, ip: IpAddr) -> Result<(), Exceeded> {
        match &self.per_address {
            Some(limiter) => limiter.check(&Source::from(ip), &self.clock),
            None => Ok(()),
        }
    }

    /// Counts a request for `name`.
    pub fn for_preview(&self, name: &PreviewName) -> Result<(), Exceeded> {
        match &self.per_preview {
            Some(limiter) => limiter.check(name, &self.clock),
            None => Ok(()),
        }
    }

    /// Forgets keys whose bursts are whole again.
    pub fn sweep(&self) {
        if let Some(l) = &self.per_address {
            l.sweep();
        }
        if let Some(l) = &self.per_preview {
            l.sweep();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_burst_passes_then_the_rate_holds() {
        let rates = Rates::new(2, 0);
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        for _ in 0..20 {
            assert_eq!(rates.from_address(ip), Ok(()));
        }
        let exceeded = rates.from_address(ip).unwrap_err();
        assert_eq!((exceeded.per_second, exceeded.burst), (2, 20));
        assert!(exceeded.retry_after <= Duration::from_millis(500));
        // Another address, and previews (no limit), are not held back.
        assert_eq!(rates.from_address("192.0.2.2".parse().unwrap()), Ok(()));
        let name = PreviewName::parse("web").unwrap();
        for _ in 0..100 {
            assert_eq!(rates.for_preview(&name), Ok(()));
        }
    }

    #[test]
    fn an_ipv6_slash_64_is_one_address() {
        let rates = Rates::new(1, 0);
        for n in 0..10 {
            let ip: IpAddr = format!("2001:db8::{n}").parse().unwrap();
            assert_eq!(rates.from_address(ip), Ok(()));
        }
        assert!(
            rates
                .from_address("2001:db8::ffff".parse().unwrap())
                .is_err()
        );
        assert_eq!(
            rates.from_address("2001:db8:0:1::1".parse().unwrap()),
            Ok(())
        );
    }
}
