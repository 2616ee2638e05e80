//! Identifiers shaped like Mattermost's: `model.NewId()` (26 characters of
//! the base32 alphabet `ybndrfg8ejkmcpqxot1uwisza345h769`, 128 random
//! bits) and trigger ids (base64 of `client_id:user_id:millis:signature`,
//! as `model.GenerateTriggerId` in `server/public/model/integration_action.go`
//! builds them).

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

/// Mattermost's id alphabet (`server/public/model/utils.go`, `encoding`).
const ALPHABET: &[u8; 32] = b"ybndrfg8ejkmcpqxot1uwisza345h769";
/// Every id is this long.
pub const ID_LEN: usize = 26;

/// 64 unpredictable bits from std's per-call random hash keys.
pub(crate) fn random_u64() -> u64 {
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u128(unix_millis() as u128);
    hasher.finish()
}

pub(crate) fn unix_millis() -> i64 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH);
    now.map(|d| d.as_millis() as i64).unwrap_or_default()
}

/// A fresh id: 128 random bits in base32, big-endian, as Go's
/// `base32.NewEncoding(...).WithPadding(NoPadding)` writes 16 bytes.
pub(crate) fn new_id() -> String {
    let bits = (u128::from(random_u64()) << 64) | u128::from(random_u64());
    (0..ID_LEN)
        .map(|i| {
            let shift = 128 - 5 * (i as i32 + 1);
            let chunk = if shift >= 0 {
                (bits >> shift) & 31
            } else {
                (bits << -shift) & 31
            };
            char::from(ALPHABET[chunk as usize])
        })
        .collect()
}

/// `model.IsValidId`: 26 lowercase letters and digits.
pub(crate) fn is_valid_id(id: &str) -> bool {
    id.len() == ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

/// A trigger id for `user`, shaped as Mattermost's (the signature is
/// random bytes: only this fake checks it, by remembering what it issued).
pub(crate) fn trigger_id(user: &str) -> String {
    let signature =
        STANDARD.encode([random_u64().to_be_bytes(), random_u64().to_be_bytes()].concat());
    let data = format!("{}:{user}:{}:{signature}", new_id(), unix_millis());
    STANDARD.encode(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_have_mattermosts_shape() {
        let id = new_id();
        assert!(is_valid_id(&id), "{id}");
        assert!(id.bytes().all(|b| ALPHABET.contains(&b)), "{id}");
        assert_ne!(new_id(), new_id());
        assert!(!is_valid_id("short"));
        assert!(!is_valid_id("ABCDEFGHIJKLMNOPQRSTUVWXYZ"));
    }

    #[test]
    fn trigger_ids_carry_the_user() {
        let trigger = trigger_id("ada");
        let decoded = String::from_utf8(STANDARD.decode(trigger).expect("base64")).expect("utf8");
        let fields: Vec<&str> = decoded.split(':').collect();
        assert_eq!(fields.len(), 4, "{decoded}");
        assert_eq!(fields[1], "ada");
        assert!(fields[2].parse::<i64>().is_ok());
    }
}
