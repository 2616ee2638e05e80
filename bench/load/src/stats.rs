//! Percentiles of a set of samples, and the one JSON line each command prints.

use std::time::Duration;

/// Samples in microseconds, sorted once for any number of percentiles.
pub struct Samples(Vec<u64>);

impl Samples {
    pub fn new(mut micros: Vec<u64>) -> Self {
        micros.sort_unstable();
        Self(micros)
    }

    pub fn from_durations(durations: &[Duration]) -> Self {
        Self::new(durations.iter().map(|d| micros(*d)).collect())
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Nearest-rank percentile `p` (0-100) in microseconds; 0 when empty.
    pub fn percentile_us(&self, p: f64) -> u64 {
        if self.0.is_empty() {
            return 0;
        }
        let rank = (p / 100.0 * self.0.len() as f64).ceil() as usize;
        self.0[rank.clamp(1, self.0.len()) - 1]
    }

    /// Percentile `p` in milliseconds.
    pub fn percentile_ms(&self, p: f64) -> f64 {
        self.percentile_us(p) as f64 / 1000.0
    }

    pub fn max_us(&self) -> u64 {
        self.0.last().copied().unwrap_or(0)
    }
}

pub fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// Prints `value` as one line on stdout (line-buffered, so a reader of a
/// pipe sees it at once).
pub fn emit(value: &serde_json::Value) {
    println!("{value}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let s = Samples::new((1..=100).rev().collect());
        assert_eq!(s.percentile_us(50.0), 50);
        assert_eq!(s.percentile_us(99.0), 99);
        assert_eq!(s.percentile_us(100.0), 100);
        assert_eq!(s.percentile_us(0.0), 1);
        assert_eq!(Samples::new(vec![7]).percentile_us(99.0), 7);
        assert_eq!(Samples::new(vec![]).percentile_us(50.0), 0);
    }
}
