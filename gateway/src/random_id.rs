//! Random identifiers: `N` random bytes as lowercase hex (session ids,
//! secret-request ids, tokens, the end marker of untrusted text).

/// `N` random bytes as `2 * N` lowercase hex digits.
pub fn random_hex<const N: usize>() -> String {
    let bytes: [u8; N] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn hex_of_the_asked_length_and_fresh() {
        let a = super::random_hex::<16>();
        assert_eq!(a.len(), 32);
        assert!(
            a.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
        assert_ne!(a, super::random_hex::<16>());
    }
}
