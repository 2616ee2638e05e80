//! What makes a Mattermost callback the gateway's own: the integration
//! callbacks of its buttons and the submissions of its dialogs arrive as
//! plain HTTP POSTs from the Mattermost server to `[mattermost]
//! callback_url`, an address anyone who learns it can post to. So each
//! button's `context` and each dialog's `state` carry an HMAC-SHA256 of
//! what they say, under a key derived from the bot token (the same in
//! every gateway process of one bot, and changed with the token); a
//! callback whose signature does not verify is refused before it is read.
//!
//! - A button: `integration.context` is
//!   `{"action_id": A, "value": V, "sig": hex(HMAC(key, "action\n" A "\n" V))}`.
//! - A dialog: `state` is `hex(HMAC(key, "dialog\n" CALLBACK_ID "\n" M)) "." M`,
//!   M the Slack view's `private_metadata`.
//! - A dialog element's `name` is `BLOCK_ID:ACTION_ID` of the Slack input
//!   it came from ([`element_name`], [`split_element_name`]).

use ring::hmac;
use serde_json::{Value, json};

/// The key the signatures of one bot's callbacks are made with.
#[derive(Clone)]
pub struct CallbackKey(hmac::Key);

impl CallbackKey {
    /// The key of the bot whose token is `token`.
    pub fn from_token(token: &str) -> CallbackKey {
        let derive = hmac::Key::new(hmac::HMAC_SHA256, b"calvin mattermost callbacks/1");
        let bytes = hmac::sign(&derive, token.as_bytes());
        CallbackKey(hmac::Key::new(hmac::HMAC_SHA256, bytes.as_ref()))
    }

    fn sign(&self, parts: &[&str]) -> String {
        let mut ctx = hmac::Context::with_key(&self.0);
        for (i, part) in parts.iter().enumerate() {
            if i > 0 {
                ctx.update(b"\n");
            }
            ctx.update(part.as_bytes());
        }
        hex(ctx.sign().as_ref())
    }

    fn verify(&self, parts: &[&str], sig: &str) -> bool {
        let Some(tag) = unhex(sig) else {
            return false;
        };
        let joined = parts.join("\n");
        hmac::verify(&self.0, joined.as_bytes(), &tag).is_ok()
    }

    /// A button's `integration.context` for `action_id` and `value`.
    pub fn button_context(&self, action_id: &str, value: &str) -> Value {
        json!({
            "action_id": action_id,
            "value": value,
            "sig": self.sign(&["action", action_id, value]),
        })
    }

    /// `(action_id, value)` of a button's context, if this key signed it.
    pub fn open_button_context(&self, context: &Value) -> Option<(String, String)> {
        let action_id = context.get("action_id")?.as_str()?;
        let value = context.get("value")?.as_str()?;
        let sig = context.get("sig")?.as_str()?;
        self.verify(&["action", action_id, value], sig)
            .then(|| (action_id.to_owned(), value.to_owned()))
    }

    /// A dialog's `state` carrying `private_metadata`.
    pub fn dialog_state(&self, callback_id: &str, private_metadata: &str) -> String {
        let sig = self.sign(&["dialog", callback_id, private_metadata]);
        format!("{sig}.{private_metadata}")
    }

    /// The `private_metadata` of a dialog's `state`, if this key signed it
    /// for `callback_id`.
    pub fn open_dialog_state(&self, callback_id: &str, state: &str) -> Option<String> {
        let (sig, metadata) = state.split_once('.')?;
        self.verify(&["dialog", callback_id, metadata], sig)
            .then(|| metadata.to_owned())
    }
}

/// A dialog element's name for the Slack input `block_id` / `action_id`.
pub fn element_name(block_id: &str, action_id: &str) -> String {
    format!("{block_id}:{action_id}")
}

/// `(block_id, action_id)` of a dialog element's name.
pub fn split_element_name(name: &str) -> Option<(&str, &str)> {
    name.split_once(':')
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_button_context_opens_only_with_its_own_key_and_words() {
        let key = CallbackKey::from_token("xoxb-or-mm-token");
        let ctx = key.button_context("set_secret", "abc123");
        assert_eq!(
            key.open_button_context(&ctx),
            Some(("set_secret".into(), "abc123".into()))
        );
        let other = CallbackKey::from_token("another-token");
        assert_eq!(other.open_button_context(&ctx), None);
        let mut forged = ctx.clone();
        forged["value"] = json!("abc124");
        assert_eq!(key.open_button_context(&forged), None);
        let mut unsigned = ctx;
        unsigned.as_object_mut().map(|o| o.remove("sig"));
        assert_eq!(key.open_button_context(&unsigned), None);
    }

    #[test]
    fn a_dialog_state_is_bound_to_its_callback_id() {
        let key = CallbackKey::from_token("t");
        let state = key.dialog_state("secret_form", "req.1:2");
        assert_eq!(
            key.open_dialog_state("secret_form", &state).as_deref(),
            Some("req.1:2")
        );
        assert_eq!(key.open_dialog_state("other_form", &state), None);
        assert_eq!(key.open_dialog_state("secret_form", "zz.req"), None);
        assert_eq!(key.open_dialog_state("secret_form", "no-dot"), None);
    }

    #[test]
    fn element_names_split_back() {
        let name = element_name("value_block", "value");
        assert_eq!(split_element_name(&name), Some(("value_block", "value")));
    }
}
