//! Protected previews, the agent's side: each has a salt made here (16
//! random bytes, base64url) and sent to the edge with the preview, and
//! again in every hello; the edge makes share tokens with it and its own
//! key. A new salt (rotation) makes every earlier link fail.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use calvin_proto::{EdgeMessage, ErrorCode, Failure, Preview, PreviewName, ShareSalt};
use rand::RngExt;
use tracing::warn;

use super::{Agent, Link, PreviewError, Request, rfc3339, unexpected};
use crate::api::Protected;

/// What `protect` changes (see [`Agent::protect`]).
#[derive(Debug, Clone, Default)]
pub struct ProtectChange {
    /// A new salt first: every link made before stops working.
    pub rotate: bool,
    /// Public again.
    pub off: bool,
    /// Seconds the new link works; `None`: the default (7 days).
    pub share_secs: Option<u32>,
}

/// A share link the edge made.
pub(super) struct ShareLink {
    pub url: String,
    pub expires: SystemTime,
}

/// A fresh salt: 16 random bytes, base64url without padding.
fn new_salt() -> ShareSalt {
    let bytes: [u8; 16] = rand::rng().random();
    // 22 characters of the base64url alphabet: always a valid salt.
    ShareSalt::try_from(URL_SAFE_NO_PAD.encode(bytes)).expect("16 bytes make a valid salt")
}

/// `url` with the share token in its query.
fn share_url(url: &str, token: &str) -> String {
    let slash = if url.ends_with('/') { "" } else { "/" };
    format!("{url}{slash}?calvin_share={token}")
}

impl Agent {
    pub(super) fn salts(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<PreviewName, ShareSalt>> {
        self.shared.salts.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn set_salt(&self, name: &PreviewName, salt: Option<ShareSalt>) {
        match salt {
            Some(salt) => self.salts().insert(name.clone(), salt),
            None => self.salts().remove(name),
        };
    }

    /// The salt a preview of `name` is to have: `protect` asked for, or
    /// (`None`) what it has now. A preview protected already keeps its
    /// salt, so its links keep working.
    pub(super) fn salt_wanted(
        &self,
        name: Option<&PreviewName>,
        protect: Option<bool>,
    ) -> Option<ShareSalt> {
        let current = name.and_then(|n| self.salts().get(n).cloned());
        match protect {
            Some(false) => None,
            Some(true) => Some(current.unwrap_or_else(new_salt)),
            None => current,
        }
    }

    /// An edge that took a protected preview as a public one (a version
    /// before protected previews): it is taken down again, and the caller
    /// told why.
    pub(super) async fn unprotected_by_edge(&self, link: &Link, preview: Preview) -> PreviewError {
        warn!(name = %preview.name, "the edge does not protect previews; taking it down");
        let _ = link
            .call(Request::Close {
                name: preview.name.clone(),
            })
            .await;
        self.previews().remove(&preview.name);
        self.shared.log.close(&preview.name);
        PreviewError::Edge(Failure::new(
            ErrorCode::Protocol,
            "this edge does not protect previews (an older version); the preview was not made",
        ))
    }

    /// A new share link for the protected preview `name` (whose URL is
    /// `url`), made by the edge, valid for `secs` (default 7 days).
    pub(super) async fn share_link(
        &self,
        name: &PreviewName,
        url: &str,
        secs: Option<u32>,
    ) -> Result<ShareLink, PreviewError> {
        let link = self.link()?;
        let answer = link
            .call(Request::ShareLink {
                name: name.clone(),
                expires_secs: secs,
            })
            .await?;
        match answer {
            EdgeMessage::Shared {
                token,
                expires_unix,
                ..
            } => Ok(ShareLink {
                url: share_url(url, &token),
                expires: UNIX_EPOCH + Duration::from_secs(expires_unix),
            }),
            other => Err(unexpected(other)),
        }
    }

    /// Protects the preview `name` (if it is not) and makes a fresh share
    /// link; with `rotate`, under a new salt first (every earlier link
    /// fails from then on); with `off`, makes it public again.
    pub async fn protect(
        &self,
        name: &PreviewName,
        change: ProtectChange,
    ) -> Result<Protected, PreviewError> {
        let _op = self.shared.ops.lock().await;
        let Some(port) = self.previews().get(name).copied() else {
            return Err(PreviewError::UnknownName(name.clone()));
        };
        let current = self.salts().get(name).cloned();
        let wanted = match (&current, change.off, change.rotate) {
            (_, true, _) => None,
            (Some(salt), false, false) => Some(salt.clone()),
            (_, false, _) => Some(new_salt()),
        };
        if wanted != current {
            let link = self.link()?;
            let answer = link
                .call(Request::Open {
                    port,
                    name: Some(name.clone()),
                    ttl_secs: self.ttl_left(name),
                    protect: wanted.clone(),
                })
                .await?;
            match answer {
                EdgeMessage::Opened { preview, .. }
                    if wanted.is_some() && preview.protect.is_none() =>
                {
                    return Err(PreviewError::Edge(Failure::new(
                        ErrorCode::Protocol,
                        "this edge does not protect previews (an older version); the preview stays public",
                    )));
                }
                EdgeMessage::Opened { .. } => self.set_salt(name, wanted.clone()),
                other => return Err(unexpected(other)),
            }
        }
        let url = self.url_for(name);
        let share = match wanted {
            Some(_) => Some(self.share_link(name, &url, change.share_secs).await?),
            None => None,
        };
        Ok(Protected {
            name: name.to_string(),
            url,
            protected: share.is_some(),
            share_url: share.as_ref().map(|s| s.url.clone()),
            share_expires: share.map(|s| rfc3339(s.expires)),
        })
    }

    /// What is left of `name`'s time to live, to open it again with the
    /// same end.
    fn ttl_left(&self, name: &PreviewName) -> Option<u32> {
        let end = *self.ends().get(name)?;
        let left = end.duration_since(SystemTime::now()).unwrap_or_default();
        Some(u32::try_from(left.as_secs()).unwrap_or(u32::MAX).max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn salts_are_22_characters_and_differ() {
        let (a, b) = (new_salt(), new_salt());
        assert_eq!(a.as_str().len(), 22);
        assert_ne!(a, b);
    }

    #[test]
    fn the_share_url_puts_the_token_in_the_query() {
        assert_eq!(
            share_url("https://web.preview.localhost:4443", "9.x"),
            "https://web.preview.localhost:4443/?calvin_share=9.x"
        );
        assert_eq!(
            share_url("https://a.b/", "9.x"),
            "https://a.b/?calvin_share=9.x"
        );
    }
}
