//! Accounts and the agent tokens that authenticate them.

use std::fmt;
use std::sync::Arc;

use ring::digest::{SHA256, digest};
use subtle::ConstantTimeEq;

/// The shortest token an account may have: 128 bits written as 32 hex digits.
pub const MIN_TOKEN_LEN: usize = 32;

/// An account: the owner of the preview names its agents claim.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct AccountId(Arc<str>);

impl AccountId {
    pub fn new(name: &str) -> Self {
        Self(name.into())
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for AccountId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for AccountId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AccountError {
    #[error("account {0:?}: a token must be at least {MIN_TOKEN_LEN} characters")]
    ShortToken(String),
    #[error("accounts {0:?} and {1:?} have the same token")]
    SharedToken(String, String),
    #[error("account {0:?} is listed twice")]
    Duplicate(String),
}

/// The accounts an edge knows, found by token. Tokens are kept only as
/// SHA-256 digests and compared in constant time, against every account.
pub struct Accounts {
    entries: Vec<(AccountId, [u8; 32])>,
}

impl Accounts {
    pub fn new<'a>(
        accounts: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Self, AccountError> {
        let mut entries: Vec<(AccountId, [u8; 32])> = Vec::new();
        for (name, token) in accounts {
            if token.len() < MIN_TOKEN_LEN {
                return Err(AccountError::ShortToken(name.into()));
            }
            let hash = hash(token);
            for (other, other_hash) in &entries {
                if other.as_str() == name {
                    return Err(AccountError::Duplicate(name.into()));
                }
                if *other_hash == hash {
                    return Err(AccountError::SharedToken(other.to_string(), name.into()));
                }
            }
            entries.push((AccountId::new(name), hash));
        }
        Ok(Self { entries })
    }

    /// The account whose token this is. Takes the same time whichever
    /// account matches, and whether one does.
    pub fn authenticate(&self, token: &str) -> Option<AccountId> {
        let presented = hash(token);
        let mut found = None;
        for (account, expected) in &self.entries {
            if bool::from(expected.ct_eq(&presented)) {
                found = Some(account.clone());
            }
        }
        found
    }
}

fn hash(token: &str) -> [u8; 32] {
    let mut out = [0; 32];
    out.copy_from_slice(digest(&SHA256, token.as_bytes()).as_ref());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

    #[test]
    fn finds_the_account_of_a_token() {
        let accounts = Accounts::new([("alice", A), ("bob", B)]).unwrap();
        assert_eq!(accounts.authenticate(A), Some(AccountId::new("alice")));
        assert_eq!(accounts.authenticate(B), Some(AccountId::new("bob")));
        assert_eq!(accounts.authenticate("nope"), None);
        assert_eq!(accounts.authenticate(&A[1..]), None);
        assert_eq!(accounts.authenticate(""), None);
    }

    #[test]
    fn token_length_limit() {
        let at = "x".repeat(MIN_TOKEN_LEN);
        assert!(Accounts::new([("a", at.as_str())]).is_ok());
        let short = "x".repeat(MIN_TOKEN_LEN - 1);
        let err = Accounts::new([("a", short.as_str())]).err().unwrap();
        assert!(err.to_string().contains("at least 32"), "{err}");
    }

    #[test]
    fn refuses_shared_tokens_and_duplicate_names() {
        assert!(matches!(
            Accounts::new([("a", A), ("b", A)]),
            Err(AccountError::SharedToken(..))
        ));
        assert!(matches!(
            Accounts::new([("a", A), ("a", B)]),
            Err(AccountError::Duplicate(..))
        ));
    }
}
