//! Preview names: one DNS label, and a generator of readable random ones.

use std::fmt;

use rand::Rng;
use serde::{Deserialize, Serialize};

/// The longest DNS label (RFC 1035 §2.3.4).
pub const MAX_NAME_LEN: usize = 63;

/// A preview name: one DNS label of `[a-z0-9-]`, 1..=63 characters, with no
/// leading or trailing hyphen. Parsing case-folds, so `My-App` becomes
/// `my-app`; past parsing a name is always canonical.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct PreviewName(String);

/// Why a string is not a preview name. Each message says what a name must be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("a preview name cannot be empty")]
    Empty,
    #[error("a preview name is at most {MAX_NAME_LEN} characters (one DNS label); got {0}")]
    TooLong(usize),
    #[error("a preview name may hold only letters a-z, digits and hyphens; {0:?} is not allowed")]
    BadChar(char),
    #[error("a preview name cannot start or end with a hyphen")]
    EdgeHyphen,
    #[error(
        "a preview name cannot have hyphens as its third and fourth characters \
         (DNS keeps those for internationalised names such as xn--)"
    )]
    ReservedHyphens,
}

impl PreviewName {
    /// Parses and case-folds `s`.
    pub fn parse(s: &str) -> Result<Self, NameError> {
        if s.is_empty() {
            return Err(NameError::Empty);
        }
        if let Some(c) = s
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || *c == '-'))
        {
            return Err(NameError::BadChar(c));
        }
        // Only ASCII from here on, so bytes are characters.
        if s.len() > MAX_NAME_LEN {
            return Err(NameError::TooLong(s.len()));
        }
        if s.starts_with('-') || s.ends_with('-') {
            return Err(NameError::EdgeHyphen);
        }
        if s.get(2..4) == Some("--") {
            // A browser shows an `xn--` label as Unicode: a look-alike of
            // another name could be registered.
            return Err(NameError::ReservedHyphens);
        }
        Ok(Self(s.to_ascii_lowercase()))
    }

    /// A readable random name such as `brisk-otter-7k2qx9`: an adjective
    /// (6 bits), a noun (6 bits) and six base-32 characters (30 bits), 42 bits
    /// of randomness in all.
    pub fn random() -> Self {
        Self::from_entropy(rand::rng().next_u64())
    }

    /// The name that `random` makes from these random bits (the low 42 are used).
    pub fn from_entropy(bits: u64) -> Self {
        const SUFFIX_ALPHABET: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";
        let adjective = ADJECTIVES[(bits & 63) as usize];
        let noun = NOUNS[((bits >> 6) & 63) as usize];
        let mut name = format!("{adjective}-{noun}-");
        let mut rest = bits >> 12;
        for _ in 0..6 {
            name.push(char::from(SUFFIX_ALPHABET[(rest & 31) as usize]));
            rest >>= 5;
        }
        Self(name)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for PreviewName {
    type Error = NameError;
    fn try_from(s: String) -> Result<Self, NameError> {
        Self::parse(&s)
    }
}

impl std::str::FromStr for PreviewName {
    type Err = NameError;
    fn from_str(s: &str) -> Result<Self, NameError> {
        Self::parse(s)
    }
}

impl From<PreviewName> for String {
    fn from(name: PreviewName) -> String {
        name.0
    }
}

impl fmt::Display for PreviewName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for PreviewName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

const ADJECTIVES: [&str; 64] = [
    "amber", "bold", "brave", "bright", "brisk", "calm", "clever", "cosmic", "crisp", "dapper",
    "eager", "early", "fancy", "fleet", "fresh", "gentle", "glad", "golden", "grand", "happy",
    "hardy", "honest", "jolly", "keen", "kind", "lively", "lucky", "mellow", "merry", "mighty",
    "misty", "modest", "noble", "plucky", "polite", "proud", "quick", "quiet", "rapid", "ready",
    "rosy", "royal", "rustic", "sharp", "shiny", "silent", "silver", "sleek", "smooth", "snappy",
    "solid", "spry", "steady", "sturdy", "sunny", "swift", "tidy", "tranquil", "upbeat", "vivid",
    "warm", "wise", "witty", "zesty",
];

const NOUNS: [&str; 64] = [
    "badger", "beaver", "bison", "bobcat", "condor", "coral", "crane", "dingo", "dolphin", "eagle",
    "falcon", "ferret", "finch", "gecko", "gibbon", "heron", "ibis", "impala", "jackal", "jaguar",
    "koala", "lemur", "lynx", "magpie", "marmot", "marten", "meerkat", "mink", "moose", "narwhal",
    "newt", "ocelot", "orca", "osprey", "otter", "owl", "panda", "pelican", "puffin", "quail",
    "rabbit", "raven", "robin", "salmon", "seal", "shrike", "sparrow", "stoat", "swan", "tapir",
    "tern", "thrush", "tiger", "toucan", "trout", "turtle", "viper", "vole", "walrus", "weasel",
    "whale", "wombat", "wren", "yak",
];

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn accepts_labels_and_case_folds() {
        assert_eq!(PreviewName::parse("a").unwrap().as_str(), "a");
        assert_eq!(PreviewName::parse("My-App2").unwrap().as_str(), "my-app2");
        assert_eq!(PreviewName::parse("a-b-c").unwrap().as_str(), "a-b-c");
        assert_eq!(PreviewName::parse("0").unwrap().as_str(), "0");
    }

    #[test]
    fn length_limit_is_63_exactly() {
        let at_limit = "a".repeat(63);
        assert_eq!(PreviewName::parse(&at_limit).unwrap().as_str(), at_limit);
        let past = "a".repeat(64);
        assert_eq!(PreviewName::parse(&past), Err(NameError::TooLong(64)));
    }

    #[test]
    fn refuses_what_is_not_one_label() {
        assert_eq!(PreviewName::parse(""), Err(NameError::Empty));
        assert_eq!(PreviewName::parse("-a"), Err(NameError::EdgeHyphen));
        assert_eq!(PreviewName::parse("a-"), Err(NameError::EdgeHyphen));
        for reserved in ["xn--80ak6aa92e", "XN--abc", "ab--c"] {
            assert_eq!(
                PreviewName::parse(reserved),
                Err(NameError::ReservedHyphens),
                "{reserved}"
            );
        }
        assert!(PreviewName::parse("abc--d").is_ok());
        assert!(PreviewName::parse("a--").is_err());
        assert_eq!(PreviewName::parse("a.b"), Err(NameError::BadChar('.')));
        assert_eq!(PreviewName::parse("a_b"), Err(NameError::BadChar('_')));
        assert_eq!(PreviewName::parse("a b"), Err(NameError::BadChar(' ')));
        assert_eq!(PreviewName::parse("café"), Err(NameError::BadChar('é')));
        // A multi-byte character is refused for what it is, not for a length
        // counted in bytes.
        let wide = "é".repeat(40);
        assert_eq!(PreviewName::parse(&wide), Err(NameError::BadChar('é')));
    }

    #[test]
    fn error_messages_say_what_a_name_must_be() {
        let e = PreviewName::parse(&"x".repeat(64)).unwrap_err().to_string();
        assert!(e.contains("at most 63"), "{e}");
        let e = PreviewName::parse("a.b").unwrap_err().to_string();
        assert!(e.contains("'.'"), "{e}");
    }

    #[test]
    fn serde_applies_the_same_rules() {
        let n: PreviewName = serde_json::from_str("\"Brisk-Otter\"").unwrap();
        assert_eq!(n.as_str(), "brisk-otter");
        assert!(serde_json::from_str::<PreviewName>("\"-bad\"").is_err());
        assert_eq!(serde_json::to_string(&n).unwrap(), "\"brisk-otter\"");
    }

    #[test]
    fn generated_names_are_valid_labels_with_42_bits() {
        for bits in [0, u64::MAX, 0x0123_4567_89ab_cdef, 1 << 41] {
            let name = PreviewName::from_entropy(bits);
            assert_eq!(PreviewName::parse(name.as_str()).unwrap(), name);
        }
        assert_eq!(PreviewName::from_entropy(0).as_str(), "amber-badger-000000");
        // Every one of the 42 low bits changes the name.
        let base = PreviewName::from_entropy(0);
        for bit in 0..42 {
            assert_ne!(
                PreviewName::from_entropy(1 << bit),
                base,
                "bit {bit} is unused"
            );
        }
        // Bits above 42 are not used, so the name space is exactly 2^42.
        assert_eq!(PreviewName::from_entropy(1 << 42), base);
    }

    #[test]
    fn word_lists_have_no_repeats() {
        assert_eq!(ADJECTIVES.iter().collect::<HashSet<_>>().len(), 64);
        assert_eq!(NOUNS.iter().collect::<HashSet<_>>().len(), 64);
    }

    #[test]
    fn random_names_differ() {
        let names: HashSet<_> = (0..1000).map(|_| PreviewName::random()).collect();
        assert_eq!(names.len(), 1000);
    }
}
