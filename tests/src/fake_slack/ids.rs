//! Identifiers the fake makes up, shaped like Slack's: envelope ids (UUIDs),
//! event ids (`Ev…`), view ids (`V…`), trigger ids (`<digits>.<digits>.<hex>`).

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::{SystemTime, UNIX_EPOCH};

/// 64 unpredictable bits from std's per-call random hash keys.
pub(crate) fn random_u64() -> u64 {
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u128(unix_now().as_nanos());
    hasher.finish()
}

pub(crate) fn unix_now() -> std::time::Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

/// Now as a Slack `ts`-shaped time (`action_ts`, `event_ts` of reactions).
pub(crate) fn now_ts() -> String {
    let now = unix_now();
    format!("{}.{:06}", now.as_secs(), now.subsec_micros())
}

/// A version-4 UUID, as Slack's envelope ids.
pub(crate) fn uuid() -> String {
    let (a, b) = (random_u64(), random_u64());
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        ((b >> 48) & 0x3fff) | 0x8000,
        b & 0xffff_ffff_ffff
    )
}

/// `prefix` and ten upper-case letters and digits: `Ev0A1B2C3D4E`.
pub(crate) fn slack_id(prefix: &str) -> String {
    const ALPHABET: &[u8] = b"0123456789ABCDEFGHJKLMNPQRSTUVWXYZ";
    let mut bits = random_u64();
    let mut id = prefix.to_string();
    for _ in 0..10 {
        id.push(char::from(
            ALPHABET[(bits % ALPHABET.len() as u64) as usize],
        ));
        bits /= ALPHABET.len() as u64;
    }
    id
}

/// A trigger id as the views.open contract describes it:
/// `132456.7890123.abcdef`.
pub(crate) fn trigger_id(serial: u64) -> String {
    format!(
        "{}.{}.{:016x}{:016x}",
        10_000_000_000 + serial,
        738_474_920,
        random_u64(),
        random_u64()
    )
}

/// Whether `id` has a trigger id's shape.
pub(crate) fn is_trigger_shaped(id: &str) -> bool {
    let mut parts = id.split('.');
    let digits =
        |s: Option<&str>| s.is_some_and(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()));
    let hex = |s: Option<&str>| {
        s.is_some_and(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit()))
    };
    digits(parts.next()) && digits(parts.next()) && hex(parts.next()) && parts.next().is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_have_slacks_shapes() {
        let id = uuid();
        assert_eq!(id.len(), 36);
        assert_eq!(id.matches('-').count(), 4);
        assert_ne!(uuid(), uuid());
        let event = slack_id("Ev");
        assert!(event.starts_with("Ev") && event.len() == 12, "{event}");
        assert!(is_trigger_shaped(&trigger_id(1)));
        assert!(is_trigger_shaped("132456.7890123.abcdef"));
        assert!(!is_trigger_shaped("132456.7890123"));
        assert!(!is_trigger_shaped("a.1.ff"));
    }
}
