//! People and the team (`users.yaml`, `teams.yaml`): `GET /users/me`,
//! `GET /users/{user_id}`, `GET /users/username/{username}`,
//! `POST /users/ids`, `GET /teams/{team_id}`, `GET /users/{user_id}/teams`.

use http::StatusCode;
use serde_json::{Value, json};

use super::answers::{AppError, Outcome};
use super::model::User;
use super::state::State;

/// `me` stands for the caller.
pub(crate) fn resolve<'a>(caller: &'a str, user_id: &'a str) -> &'a str {
    if user_id == "me" { caller } else { user_id }
}

pub(crate) fn get(state: &State, caller: &str, user_id: &str) -> Outcome {
    let user_id = resolve(caller, user_id);
    let user = state.user(user_id).ok_or_else(|| {
        AppError::not_found("app.user.missing_account.const", "Unable to find the user.")
    })?;
    Ok((StatusCode::OK, user.to_json()))
}

pub(crate) fn by_username(state: &State, username: &str) -> Outcome {
    let user = state.user_by_name(username).ok_or_else(|| {
        AppError::not_found("app.user.get_by_username.app_error", "Unable to find an existing account matching your username for this team. This team may require an invite from the team owner to join.")
    })?;
    Ok((StatusCode::OK, user.to_json()))
}

/// The users among the ids; unknown ids are left out.
pub(crate) fn by_ids(state: &State, body: &Value) -> Outcome {
    let ids: Vec<String> =
        serde_json::from_value(body.clone()).map_err(|_| AppError::invalid_body("user_ids"))?;
    if ids.is_empty() {
        return Err(AppError::invalid_body("user_ids"));
    }
    let users: Vec<Value> = state
        .users
        .iter()
        .filter(|u| ids.contains(&u.id))
        .map(User::to_json)
        .collect();
    Ok((StatusCode::OK, json!(users)))
}

pub(crate) fn team(state: &State, team_id: &str) -> Outcome {
    if team_id != state.team.id {
        return Err(AppError::not_found(
            "app.team.get.find.app_error",
            "Unable to find the existing team.",
        ));
    }
    Ok((StatusCode::OK, state.team.to_json()))
}

/// Everyone in the fake is in its one team; another user's teams need
/// `edit_other_users`.
pub(crate) fn teams_of(state: &State, caller: &str, user_id: &str) -> Outcome {
    if resolve(caller, user_id) != caller {
        return Err(AppError::permissions("edit_other_users"));
    }
    Ok((StatusCode::OK, json!([state.team.to_json()])))
}
