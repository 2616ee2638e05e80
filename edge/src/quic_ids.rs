//! The edge's QUIC connection IDs: 16 bytes, 8 of random nonce and 8 of a
//! signature keyed by a secret kept across restarts.
//!
//! After a restart the edge answers an agent's packet for a connection it
//! no longer has with a stateless reset, so the agent reconnects at its
//! next keep-alive instead of at its idle timeout. That takes two things:
//! the packet's connection ID must read as one of the edge's (the
//! signature, with the same key as before the restart), and it must not
//! be the ID of a connection the new process made since. quinn's own keyed
//! generator makes 8-byte IDs with a 3-byte nonce: the restarted edge
//! issues 8 IDs per reconnected agent, and with 1,000 agents an agent still
//! on its old connection found its ID taken by a new one in about one
//! restart in five. Its packets then went to that connection, which
//! cannot read them and sends no reset, and the agent waited out its idle
//! timeout (`mass_restart` failed so, once in 8 runs). With 8 bytes of
//! nonce, the odds for the same restart are below one in a billion.

use std::time::Duration;

use quinn_proto::{ConnectionId, ConnectionIdGenerator, InvalidCid};
use rand::RngExt;
use ring::hmac;
use subtle::ConstantTimeEq;

const NONCE: usize = 8;
const SIGNATURE: usize = 8;

/// Issues and recognises the edge's connection IDs; see the module.
pub struct SignedIds {
    key: hmac::Key,
}

impl SignedIds {
    /// IDs signed with `key`: the same key, the same IDs recognised.
    pub fn new(key: &[u8]) -> Self {
        Self {
            key: hmac::Key::new(hmac::HMAC_SHA256, key),
        }
    }

    fn signature(&self, nonce: &[u8]) -> [u8; SIGNATURE] {
        let tag = hmac::sign(&self.key, nonce);
        let mut signature = [0; SIGNATURE];
        signature.copy_from_slice(&tag.as_ref()[..SIGNATURE]);
        signature
    }
}

impl ConnectionIdGenerator for SignedIds {
    fn generate_cid(&mut self) -> ConnectionId {
        let nonce: [u8; NONCE] = rand::rng().random();
        let mut id = [0; NONCE + SIGNATURE];
        id[..NONCE].copy_from_slice(&nonce);
        id[NONCE..].copy_from_slice(&self.signature(&nonce));
        ConnectionId::new(&id)
    }

    /// Only for packets of connections the edge does not have (one HMAC).
    fn validate(&self, id: &ConnectionId) -> Result<(), InvalidCid> {
        if id.len() != NONCE + SIGNATURE {
            return Err(InvalidCid);
        }
        let (nonce, signature) = id.split_at(NONCE);
        if bool::from(self.signature(nonce)[..].ct_eq(signature)) {
            Ok(())
        } else {
            Err(InvalidCid)
        }
    }

    fn cid_len(&self) -> usize {
        NONCE + SIGNATURE
    }

    fn cid_lifetime(&self) -> Option<Duration> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_recognised_by_the_same_key_only() {
        let mut before = SignedIds::new(b"kept across restarts");
        let after = SignedIds::new(b"kept across restarts");
        let other = SignedIds::new(b"another edge");
        for _ in 0..1000 {
            let id = before.generate_cid();
            assert_eq!(id.len(), before.cid_len());
            assert_eq!(id.len(), 16);
            assert!(after.validate(&id).is_ok(), "{id:?}");
            assert!(other.validate(&id).is_err(), "{id:?}");
            for at in [0, 7, 8, 15] {
                let mut bad = id.to_vec();
                bad[at] ^= 1;
                assert!(after.validate(&ConnectionId::new(&bad)).is_err(), "{at}");
            }
        }
        // quinn's 8-byte IDs (an edge before this one) are not the edge's.
        let mut old = quinn_proto::HashedConnectionIdGenerator::from_key(7);
        assert!(after.validate(&old.generate_cid()).is_err());
    }

    #[test]
    fn a_restart_does_not_reissue_the_ids_in_use() {
        // 8,000 IDs from before a restart, 8,000 after (1,000 agents), no
        // ID in both. quinn's 3-byte nonces expect 3.8 IDs in both: they
        // fail this 98% of the time.
        let mut before = SignedIds::new(b"k");
        let mut after = SignedIds::new(b"k");
        let old: std::collections::HashSet<_> = (0..8000).map(|_| before.generate_cid()).collect();
        assert_eq!(old.len(), 8000);
        assert!((0..8000).all(|_| !old.contains(&after.generate_cid())));
    }
}
