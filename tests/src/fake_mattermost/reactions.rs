//! Reactions (`reactions.yaml`): `POST /reactions` and
//! `GET /posts/{post_id}/reactions`, checked as `saveReaction` in
//! `server/channels/api4/reaction.go` and `Reaction.IsValid` in
//! `server/public/model/reaction.go` check them.
//!
//! The reference promises 201 for a save; the server never sets a status,
//! so it answers 200, and so does the fake. A save is an upsert: saving the
//! same reaction again answers it, stores nothing new, and sends
//! `reaction_added` again.

use http::StatusCode;
use serde_json::{Value, json};

use super::answers::{AppError, Outcome};
use super::ids::is_valid_id;
use super::model::Reaction;
use super::state::{MAX_UNIQUE_REACTIONS, State};

/// `model.EmojiNameMaxLength`.
pub const EMOJI_NAME_MAX_LEN: usize = 64;

/// `^[a-zA-Z0-9\-\+_]+$`, at most 64 bytes.
pub(crate) fn valid_emoji_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= EMOJI_NAME_MAX_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'+' | b'_'))
}

impl State {
    /// Stores `user`'s reaction (once per person and name) and publishes
    /// `reaction_added`; answers it. Checks none of the API's rules.
    pub fn save_reaction(&mut self, post_id: &str, user: &str, emoji: &str) -> Option<Reaction> {
        let now = self.now();
        let post = self.post_mut(post_id)?;
        let existing = post
            .reactions
            .iter()
            .find(|r| r.user_id == user && r.emoji_name == emoji)
            .cloned();
        let reaction = match existing {
            Some(reaction) => reaction,
            None => {
                let reaction = Reaction {
                    user_id: user.to_string(),
                    post_id: post_id.to_string(),
                    emoji_name: emoji.to_string(),
                    create_at: now,
                    channel_id: post.channel_id.clone(),
                };
                post.reactions.push(reaction.clone());
                post.update_at = now;
                reaction
            }
        };
        self.publish_reaction(&reaction);
        Some(reaction)
    }
}

pub(crate) fn save(state: &mut State, caller: &str, body: &Value) -> Outcome {
    let field = |name: &str| {
        body.get(name)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let (user_id, post_id) = (field("user_id"), field("post_id"));
    // v11 lowercases the name before it checks it.
    let emoji = field("emoji_name").to_lowercase();
    if !body.is_object()
        || !is_valid_id(&user_id)
        || !is_valid_id(&post_id)
        || emoji.is_empty()
        || emoji.len() > EMOJI_NAME_MAX_LEN
    {
        let id = "api.reaction.save_reaction.invalid.app_error";
        return Err(AppError::bad_request(id, "Reaction is not valid."));
    }
    if user_id != caller {
        let id = "api.reaction.save_reaction.user_id.app_error";
        return Err(AppError::new(
            StatusCode::FORBIDDEN,
            id,
            "You can only save reactions for yourself.",
        ));
    }
    // `add_reaction` is a channel member's permission, public channel or not.
    let post = state.post(&post_id);
    let channel = post.and_then(|p| state.channel(&p.channel_id));
    if !channel.is_some_and(|c| c.is_member(caller)) {
        return Err(AppError::permissions("add_reaction"));
    }
    if !valid_emoji_name(&emoji) {
        let id = "model.reaction.is_valid.emoji_name.app_error";
        return Err(
            AppError::bad_request(id, "Invalid emoji name.").detail(format!("emoji_name={emoji}"))
        );
    }
    let reactions = state.reactions(&post_id).unwrap_or_default();
    let mut names: Vec<&str> = reactions.iter().map(|r| r.emoji_name.as_str()).collect();
    names.dedup();
    names.sort_unstable();
    names.dedup();
    if !names.contains(&emoji.as_str()) && names.len() >= MAX_UNIQUE_REACTIONS {
        let id = "app.reaction.save.save.too_many_reactions";
        return Err(AppError::bad_request(
            id,
            "Reaction limit has been reached for this post.",
        ));
    }
    let reaction = state.save_reaction(&post_id, caller, &emoji);
    let reaction = reaction
        .ok_or_else(|| AppError::not_found("app.post.get.app_error", "Unable to get the post."))?;
    Ok((StatusCode::OK, reaction.to_json()))
}

pub(crate) fn list(state: &State, caller: &str, post_id: &str) -> Outcome {
    let post = state.post(post_id);
    let channel = post.and_then(|p| state.channel(&p.channel_id));
    // `reactions.yaml`: "Must have `read_channel` permission for the
    // channel the post is in", which older servers give members only.
    if state.reactions_members_only {
        if !channel.is_some_and(|c| c.is_member(caller)) {
            return Err(AppError::permissions("read_channel"));
        }
    } else if !channel.is_some_and(|c| state.can_read(c, caller)) {
        return Err(AppError::permissions("read_channel_content"));
    }
    let reactions = state.reactions(post_id).unwrap_or_default();
    let reactions: Vec<Value> = reactions.iter().map(Reaction::to_json).collect();
    Ok((StatusCode::OK, json!(reactions)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emoji_names_follow_mattermosts_rule() {
        for good in ["+1", "white_check_mark", "thumbsup", "e-mail", "A1"] {
            assert!(valid_emoji_name(good), "{good}");
        }
        for bad in ["", ":+1:", "two words", "é", "a.b", &"x".repeat(65)] {
            assert!(!valid_emoji_name(bad), "{bad}");
        }
        assert!(valid_emoji_name(&"x".repeat(64)));
    }
}
