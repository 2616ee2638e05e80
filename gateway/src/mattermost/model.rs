//! Mattermost's REST API v4 schemas as far as the gateway reads or sends
//! them: the fields it uses, the rest ignored (`definitions.yaml` and the
//! request bodies of `posts.yaml`, `reactions.yaml` in
//! `mattermost/mattermost`'s `api/v4/source/`). [`super::api`] sends them.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `AppError` (definitions.yaml): every error answer's body.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct AppError {
    pub id: String,
}

/// `Post` (definitions.yaml).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Post {
    pub id: String,
    /// Milliseconds since the epoch.
    pub create_at: i64,
    pub user_id: String,
    pub channel_id: String,
    /// The thread's first post; empty for a post that starts one.
    pub root_id: String,
    pub message: String,
    /// Empty for a person's or a bot's post; `system_*` for the server's.
    #[serde(rename = "type")]
    pub kind: String,
    pub props: Map<String, Value>,
}

impl Post {
    /// Posted by a bot account (`props.from_bot`, which Mattermost sets
    /// to the string `"true"`).
    pub fn from_bot(&self) -> bool {
        match self.props.get("from_bot") {
            Some(Value::String(s)) => s == "true",
            Some(Value::Bool(b)) => *b,
            _ => false,
        }
    }

    /// A post of the server's own (a join, a header change, ...).
    pub fn is_system(&self) -> bool {
        self.kind.starts_with("system_")
    }
}

/// `PostList` (definitions.yaml): `order` lists the ids, newest first.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct PostList {
    pub order: Vec<String>,
    pub posts: std::collections::HashMap<String, Post>,
}

impl PostList {
    /// The posts in `order`.
    pub fn into_ordered(mut self) -> Vec<Post> {
        self.order
            .iter()
            .filter_map(|id| self.posts.remove(id))
            .collect()
    }
}

/// `Channel` (definitions.yaml).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Channel {
    pub id: String,
    /// Empty for a direct or group message.
    pub team_id: String,
    /// `O` public, `P` private, `D` direct, `G` group message.
    #[serde(rename = "type")]
    pub kind: String,
    pub name: String,
}

/// `ChannelMember` (definitions.yaml).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ChannelMember {
    pub channel_id: String,
    pub user_id: String,
}

/// `User` (definitions.yaml).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct User {
    pub id: String,
    pub username: String,
    /// Non-zero once the account is deactivated.
    pub delete_at: i64,
}

/// `Team` (definitions.yaml).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Team {
    pub id: String,
    pub name: String,
}

/// `Reaction` (definitions.yaml), also the body of `POST /reactions`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Reaction {
    pub user_id: String,
    pub post_id: String,
    pub emoji_name: String,
}

/// `FileInfo` (definitions.yaml).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct FileInfo {
    pub id: String,
}

/// `POST /files`'s answer.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Uploads {
    pub file_infos: Vec<FileInfo>,
}

/// `POST /posts`'s body.
#[derive(Debug, Clone, Default, Serialize)]
pub struct NewPost {
    pub channel_id: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub root_id: String,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub props: Option<Map<String, Value>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub file_ids: Vec<String>,
}

/// `PUT /posts/{post_id}/patch`'s body. (The reference types `props` as
/// a string; the server takes, and answers, an object.)
#[derive(Debug, Clone, Default, Serialize)]
pub struct PostPatch {
    pub message: String,
    pub props: Map<String, Value>,
}

/// `POST /posts/ephemeral`'s body.
#[derive(Debug, Clone, Serialize)]
pub struct EphemeralPost {
    pub user_id: String,
    pub post: NewPost,
}

/// `POST /teams/{team_id}/posts/search`'s body.
#[derive(Debug, Clone, Serialize)]
pub struct Search {
    pub terms: String,
    pub is_or_search: bool,
    pub page: usize,
    pub per_page: usize,
}
