//! Token guessing: unknown tokens are counted per source, and a source that
//! presents too many in a window is refused, token unchecked, until the
//! window ends.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use dashmap::DashMap;

/// Unknown tokens a source may present per [`WINDOW`]...
pub const MAX_UNKNOWN_TOKENS: u32 = 10;
/// ...after which it waits out the rest of the window.
pub const WINDOW: Duration = Duration::from_secs(60);

/// A source: an IPv4 address, or an IPv6 /64 (one host's usual share, which
/// it could otherwise spread its guesses over).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Source {
    V4(u32),
    V6(u64),
}

impl From<IpAddr> for Source {
    fn from(ip: IpAddr) -> Self {
        match ip.to_canonical() {
            IpAddr::V4(v4) => Source::V4(v4.into()),
            IpAddr::V6(v6) => Source::V6((u128::from(v6) >> 64) as u64),
        }
    }
}

/// Unknown tokens per source in its current window.
pub struct Guesses {
    windows: DashMap<Source, (Instant, u32)>,
    max: u32,
    window: Duration,
}

impl Default for Guesses {
    fn default() -> Self {
        Self::new(MAX_UNKNOWN_TOKENS, WINDOW)
    }
}

impl Guesses {
    pub fn new(max: u32, window: Duration) -> Self {
        Self {
            windows: DashMap::new(),
            max,
            window,
        }
    }

    /// Unknown tokens allowed per window.
    pub fn max(&self) -> u32 {
        self.max
    }

    pub fn window(&self) -> Duration {
        self.window
    }

    /// How long `ip` must still wait, if it has used up its unknown tokens.
    pub fn wait(&self, ip: IpAddr) -> Option<Duration> {
        let entry = self.windows.get(&Source::from(ip))?;
        let (started, count) = *entry;
        let left = self.window.checked_sub(started.elapsed())?;
        (count >= self.max).then_some(left)
    }

    /// `ip` presented a token the edge does not know.
    pub fn unknown(&self, ip: IpAddr) {
        let mut entry = self
            .windows
            .entry(Source::from(ip))
            .or_insert((Instant::now(), 0));
        if entry.0.elapsed() >= self.window {
            *entry = (Instant::now(), 0);
        }
        entry.1 += 1;
    }

    /// Forgets the windows that have ended.
    pub fn sweep(&self) {
        self.windows
            .retain(|_, (started, _)| started.elapsed() < self.window);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_is_refused_after_its_last_allowed_unknown_token() {
        let guesses = Guesses::new(3, Duration::from_millis(300));
        let ip: IpAddr = "192.0.2.7".parse().unwrap();
        for _ in 0..2 {
            guesses.unknown(ip);
        }
        assert_eq!(guesses.wait(ip), None, "two of three: still allowed");
        guesses.unknown(ip);
        let wait = guesses.wait(ip).expect("three of three: refused");
        assert!(wait <= Duration::from_millis(300));
        assert_eq!(guesses.wait("192.0.2.8".parse().unwrap()), None);

        std::thread::sleep(Duration::from_millis(350));
        assert_eq!(guesses.wait(ip), None, "the window ended");
        guesses.unknown(ip);
        assert_eq!(guesses.wait(ip), None, "a new window counts from one");
        guesses.sweep();
        assert_eq!(guesses.windows.len(), 1, "a window still open is kept");
        std::thread::sleep(Duration::from_millis(350));
        guesses.sweep();
        assert!(guesses.windows.is_empty(), "an ended window is forgotten");
    }

    #[test]
    fn an_ipv6_host_cannot_spread_its_guesses_over_its_64() {
        let guesses = Guesses::new(2, WINDOW);
        guesses.unknown("2001:db8:1:2::1".parse().unwrap());
        guesses.unknown("2001:db8:1:2:ffff::9".parse().unwrap());
        assert!(guesses.wait("2001:db8:1:2::77".parse().unwrap()).is_some());
        assert_eq!(guesses.wait("2001:db8:1:3::1".parse().unwrap()), None);
        // An IPv4-mapped address counts as its IPv4 address.
        guesses.unknown("::ffff:192.0.2.1".parse().unwrap());
        guesses.unknown("192.0.2.1".parse().unwrap());
        assert!(guesses.wait("192.0.2.1".parse().unwrap()).is_some());
    }
}
