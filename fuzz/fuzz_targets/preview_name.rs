//! `PreviewName::parse` on arbitrary UTF-8: whatever it accepts is one
//! canonical DNS label, as its docs say, and parses back to itself.

#![no_main]

use calvin_proto::{MAX_NAME_LEN, NameError, PreviewName};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|s: &str| {
    // Serde applies the same rules as `parse`.
    let quoted = serde_json::to_string(s).expect("a str serializes");
    let via_serde = serde_json::from_str::<PreviewName>(&quoted).ok();
    assert_eq!(via_serde, PreviewName::parse(s).ok(), "{s:?}");

    match PreviewName::parse(s) {
        Ok(name) => {
            let n = name.as_str();
            assert!((1..=MAX_NAME_LEN).contains(&n.len()), "{n:?}");
            assert!(
                n.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
                "{n:?}"
            );
            assert!(!n.starts_with('-') && !n.ends_with('-'), "{n:?}");
            assert_ne!(n.get(2..4), Some("--"), "{n:?}");
            // Case-folding is all parsing changes.
            assert!(n.eq_ignore_ascii_case(s), "{s:?} became {n:?}");
            assert_eq!(n, s.to_ascii_lowercase());
            // Canonical: parses to itself, by every route in.
            assert_eq!(PreviewName::parse(n).as_ref(), Ok(&name));
            assert_eq!(n.parse::<PreviewName>().as_ref(), Ok(&name));
            assert_eq!(PreviewName::try_from(n.to_owned()).as_ref(), Ok(&name));
            assert_eq!(name.to_string(), n);
            assert_eq!(String::from(name.clone()), n);
            // Serde applies the same rules, both ways.
            let json = serde_json::to_string(&name).expect("a name serializes");
            assert_eq!(json, format!("\"{n}\""));
            let back: PreviewName = serde_json::from_str(&json).expect("a name deserializes");
            assert_eq!(back, name);
        }
        Err(e) => {
            // The error names a real fault of the input.
            match e {
                NameError::Empty => assert!(s.is_empty()),
                NameError::TooLong(len) => {
                    assert_eq!(len, s.len());
                    assert!(len > MAX_NAME_LEN);
                }
                NameError::BadChar(c) => {
                    assert!(s.contains(c));
                    assert!(!(c.is_ascii_alphanumeric() || c == '-'));
                }
                NameError::EdgeHyphen => assert!(s.starts_with('-') || s.ends_with('-')),
                NameError::ReservedHyphens => assert_eq!(s.get(2..4), Some("--")),
            }
        }
    }
});
