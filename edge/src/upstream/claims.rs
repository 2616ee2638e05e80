//! The seam between an edge's own table of names and a store they are
//! claimed in first when several edges act as one ([`crate::cluster`]):
//! the agents' side asks a [`NameClaims`] when it has one, and knows
//! nothing of etcd. An edge alone has none, and its table decides.

use std::time::SystemTime;

use calvin_proto::{Port, PreviewName, ShareSalt};
use serde::{Deserialize, Serialize};

use crate::accounts::AccountId;

/// Names claimed in a store shared with other edges.
#[async_trait::async_trait]
pub trait NameClaims: Send + Sync {
    /// Whether claims can be made now (a cluster edge holds its lease):
    /// an agent is refused at its hello otherwise, rather than have its
    /// previews refused one by one.
    fn can_claim(&self) -> bool;

    /// Claims `name` for `account`'s preview of `port` (with its end and
    /// its share salt, which the other edges serve it with).
    async fn claim(
        &self,
        name: &PreviewName,
        account: &AccountId,
        port: Port,
        ends: Option<SystemTime>,
        protect: Option<ShareSalt>,
    ) -> Result<Claim, StoreRefusal>;

    /// Ends this edge's `claim` of `name`: its agent went (`Offline`, the
    /// name stays the account's) or took it down (`Released`).
    async fn end(&self, name: &PreviewName, claim: &Claim, account: &AccountId, state: NameState);
}

/// A claim the store granted: the route's record as stored, and the
/// store's revision of the transaction that made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim(pub(crate) Vec<u8>, pub(crate) i64);

/// A name's state in the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NameState {
    /// An agent serves it (its edge holds `routes/<name>`).
    Live,
    /// Its agent disconnected.
    Offline,
    /// Taken down (unpreview).
    Released,
}

/// Why the store did not give a name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreRefusal {
    #[error("the name {0} belongs to another account")]
    Taken(PreviewName),
    #[error(
        "the cluster's store (etcd) cannot be reached ({0}); names cannot be claimed until it is back, previews already up keep serving"
    )]
    Unavailable(String),
}
