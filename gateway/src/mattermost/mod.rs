//! Mattermost as the gateway's chat platform: the REST API v4 behind
//! [`crate::chat::ChatBackend`], its WebSocket events into the
//! [`crate::events::EventHub`], and the integration callbacks of its
//! buttons and dialogs ([`sign`]).

pub mod callbacks;
pub mod events;
pub mod sign;
