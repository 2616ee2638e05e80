//! Channels (`channels.yaml`): `GET /channels/{channel_id}`,
//! `GET /channels/{channel_id}/members`,
//! `GET /channels/{channel_id}/members/{user_id}`, `POST /channels/direct`.

use std::collections::HashMap;

use http::StatusCode;
use serde_json::{Value, json};

use super::ChannelKind;
use super::answers::{AppError, Outcome};
use super::ids;
use super::model::Channel;
use super::people::resolve;
use super::state::{State, paging};

impl State {
    /// Adds a channel with these members (in order); answers its id. A D
    /// channel is named `<id>__<id>` (sorted) and a G channel gets a made-up
    /// name, as Mattermost names them; neither has a team.
    pub fn create_channel(
        &mut self,
        kind: ChannelKind,
        name: &str,
        members: Vec<String>,
    ) -> String {
        let id = ids::new_id();
        let create_at = self.now();
        let usernames: Vec<String> = members
            .iter()
            .filter_map(|m| self.user(m).map(|u| u.username.clone()))
            .collect();
        let (name, display_name) = match kind {
            ChannelKind::Direct => {
                let mut pair = members.clone();
                pair.sort();
                (pair.join("__"), String::new())
            }
            ChannelKind::Group => (ids::new_id() + &ids::new_id()[..14], usernames.join(", ")),
            _ => (name.to_string(), name.to_string()),
        };
        let team_id = if kind.has_team() {
            self.team.id.clone()
        } else {
            String::new()
        };
        let creator_id = members.first().cloned().unwrap_or_default();
        self.channels.push(Channel {
            id: id.clone(),
            kind,
            name,
            display_name,
            team_id,
            creator_id,
            create_at,
            members,
        });
        id
    }

    /// The D channel between two people, if one exists.
    pub fn direct_between(&self, a: &str, b: &str) -> Option<String> {
        let size = if a == b { 1 } else { 2 };
        let found = self.channels.iter().find(|c| {
            c.kind == ChannelKind::Direct
                && c.members.len() == size
                && c.is_member(a)
                && c.is_member(b)
        });
        found.map(|c| c.id.clone())
    }
}

/// The channel, if `caller` may read it: unknown is 404
/// (`app.channel.get.existing.app_error`), unreadable 403.
fn readable<'a>(state: &'a State, caller: &str, channel_id: &str) -> Result<&'a Channel, AppError> {
    let channel = state.channel(channel_id).ok_or_else(|| {
        AppError::not_found(
            "app.channel.get.existing.app_error",
            "Unable to find the existing channel.",
        )
    })?;
    if !state.can_read(channel, caller) {
        return Err(AppError::permissions("read_channel"));
    }
    Ok(channel)
}

pub(crate) fn get(state: &State, caller: &str, channel_id: &str) -> Outcome {
    let channel = readable(state, caller, channel_id)?;
    Ok((StatusCode::OK, state.channel_json(channel)))
}

pub(crate) fn members(
    state: &State,
    caller: &str,
    channel_id: &str,
    query: &HashMap<String, String>,
) -> Outcome {
    let channel = readable(state, caller, channel_id)?;
    let (page, per_page) = paging(query);
    let members: Vec<Value> = channel
        .members
        .iter()
        .skip(page * per_page)
        .take(per_page)
        .map(|m| channel.member_json(m))
        .collect();
    Ok((StatusCode::OK, json!(members)))
}

pub(crate) fn member(state: &State, caller: &str, channel_id: &str, user_id: &str) -> Outcome {
    let channel = readable(state, caller, channel_id)?;
    let user_id = resolve(caller, user_id);
    if !channel.is_member(user_id) {
        let id = "app.channel.get_member.missing.app_error";
        return Err(AppError::not_found(
            id,
            "No channel member found for that user ID and channel ID.",
        ));
    }
    Ok((StatusCode::OK, channel.member_json(user_id)))
}

/// `[user_id, user_id]`: the D channel between them, made once. The
/// caller must be one of the two (`manage_system` otherwise).
pub(crate) fn direct(state: &mut State, caller: &str, body: &Value) -> Outcome {
    let pair: Vec<String> =
        serde_json::from_value(body.clone()).map_err(|_| AppError::invalid_body("user_ids"))?;
    if pair.len() != 2 || pair.iter().any(|id| !ids::is_valid_id(id)) {
        return Err(AppError::invalid_body("user_ids"));
    }
    if !pair.iter().any(|id| id == caller) {
        return Err(AppError::permissions("manage_system"));
    }
    if pair.iter().any(|id| state.user(id).is_none()) {
        let id = "api.channel.create_direct_channel.invalid_user.app_error";
        return Err(AppError::bad_request(
            id,
            "Invalid user ID for direct channel creation.",
        ));
    }
    let existing = state.direct_between(&pair[0], &pair[1]);
    let id = match existing {
        Some(id) => id,
        None => {
            let mut members = pair.clone();
            members.dedup();
            state.create_channel(ChannelKind::Direct, "", members)
        }
    };
    let channel = state
        .channel(&id)
        .map(|c| state.channel_json(c))
        .unwrap_or_default();
    Ok((StatusCode::CREATED, channel))
}
