//! The fake's objects and their JSON, with the fields of `definitions.yaml`
//! (`User`, `Team`, `Channel`, `ChannelMember`, `Post`, `PostMetadata`,
//! `Reaction`, `FileInfo`) and the extra ones today's server sends.

use serde_json::{Map, Value, json};

/// A channel's type (`Channel.type`: `O`, `P`, `D`, `G`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChannelKind {
    /// `O`: readable by every member of the team.
    Public,
    /// `P`: members only.
    Private,
    /// `D`: a direct message between two people; no team.
    Direct,
    /// `G`: a group message between three to eight people; no team.
    Group,
}

impl ChannelKind {
    pub fn wire(self) -> &'static str {
        match self {
            ChannelKind::Public => "O",
            ChannelKind::Private => "P",
            ChannelKind::Direct => "D",
            ChannelKind::Group => "G",
        }
    }

    /// D and G channels belong to no team (`team_id: ""`).
    pub fn has_team(self) -> bool {
        matches!(self, ChannelKind::Public | ChannelKind::Private)
    }
}

pub(crate) struct Team {
    pub id: String,
    pub name: String,
    pub display_name: String,
    pub create_at: i64,
}

impl Team {
    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id, "create_at": self.create_at, "update_at": self.create_at,
            "delete_at": 0, "display_name": self.display_name, "name": self.name,
            "description": "", "email": "", "type": "O", "company_name": "",
            "allowed_domains": "", "invite_id": "", "allow_open_invite": false,
            "last_team_icon_update": 0, "scheme_id": "", "group_constrained": false,
            "policy_id": null,
        })
    }
}

pub(crate) struct User {
    pub id: String,
    pub username: String,
    pub is_bot: bool,
    pub create_at: i64,
}

impl User {
    pub fn to_json(&self) -> Value {
        let mut user = json!({
            "id": self.id, "create_at": self.create_at, "update_at": self.create_at,
            "delete_at": 0, "username": self.username, "auth_data": "",
            "auth_service": "", "email": format!("{}@fake-mattermost.test", self.username),
            "nickname": "", "first_name": "", "last_name": "", "position": "",
            "roles": "system_user", "locale": "en", "timezone": {
                "automaticTimezone": "", "manualTimezone": "", "useAutomaticTimezone": "true"
            },
            "last_picture_update": 0, "disable_welcome_email": false,
        });
        if self.is_bot {
            user["is_bot"] = json!(true);
            user["bot_description"] = json!("");
        }
        user
    }
}

pub(crate) struct Channel {
    pub id: String,
    pub kind: ChannelKind,
    pub name: String,
    pub display_name: String,
    pub team_id: String,
    pub creator_id: String,
    pub create_at: i64,
    /// In the order they joined.
    pub members: Vec<String>,
}

impl Channel {
    pub fn is_member(&self, user: &str) -> bool {
        self.members.iter().any(|m| m == user)
    }

    pub fn to_json(&self, last_post_at: i64, total_msg_count: usize) -> Value {
        json!({
            "id": self.id, "create_at": self.create_at, "update_at": self.create_at,
            "delete_at": 0, "team_id": self.team_id, "type": self.kind.wire(),
            "display_name": self.display_name, "name": self.name, "header": "",
            "purpose": "", "last_post_at": last_post_at, "total_msg_count": total_msg_count,
            "extra_update_at": 0, "creator_id": self.creator_id, "scheme_id": null,
            "props": null, "group_constrained": null, "shared": null,
            "total_msg_count_root": total_msg_count, "policy_id": null,
            "last_root_post_at": last_post_at,
        })
    }

    /// The `ChannelMember` of `user`, as a member with default settings.
    pub fn member_json(&self, user: &str) -> Value {
        json!({
            "channel_id": self.id, "user_id": user, "roles": "channel_user",
            "last_viewed_at": 0, "msg_count": 0, "mention_count": 0,
            "mention_count_root": 0, "urgent_mention_count": 0, "msg_count_root": 0,
            "notify_props": {
                "desktop": "default", "email": "default", "ignore_channel_mentions": "default",
                "mark_unread": "all", "push": "default",
            },
            "last_update_at": self.create_at, "scheme_guest": false, "scheme_user": true,
            "scheme_admin": false, "explicit_roles": "",
        })
    }
}

#[derive(Clone)]
pub(crate) struct Reaction {
    pub user_id: String,
    pub post_id: String,
    pub emoji_name: String,
    pub create_at: i64,
    pub channel_id: String,
}

impl Reaction {
    pub fn to_json(&self) -> Value {
        json!({
            "user_id": self.user_id, "post_id": self.post_id, "emoji_name": self.emoji_name,
            "create_at": self.create_at, "update_at": self.create_at, "delete_at": 0,
            "remote_id": "", "channel_id": self.channel_id,
        })
    }
}

pub(crate) struct Post {
    pub id: String,
    pub create_at: i64,
    pub update_at: i64,
    pub edit_at: i64,
    pub user_id: String,
    pub channel_id: String,
    pub root_id: String,
    pub message: String,
    pub kind: String,
    pub props: Map<String, Value>,
    pub file_ids: Vec<String>,
    pub reactions: Vec<Reaction>,
    /// Echoed in the create answer and the `posted` event only.
    pub pending_post_id: String,
}

impl Post {
    /// The post as stored, integrations and all (for assertions).
    pub fn to_raw_json(&self, files: &[Value], reply_count: usize) -> Value {
        let mut metadata = Map::new();
        if !self.reactions.is_empty() {
            let reactions: Vec<Value> = self.reactions.iter().map(Reaction::to_json).collect();
            metadata.insert("reactions".into(), Value::Array(reactions));
        }
        if !files.is_empty() {
            metadata.insert("files".into(), Value::Array(files.to_vec()));
        }
        let mut post = json!({
            "id": self.id, "create_at": self.create_at, "update_at": self.update_at,
            "edit_at": self.edit_at, "delete_at": 0, "is_pinned": false,
            "user_id": self.user_id, "channel_id": self.channel_id, "root_id": self.root_id,
            "original_id": "", "message": self.message, "type": self.kind,
            "props": self.props, "hashtags": "", "file_ids": self.file_ids,
            "pending_post_id": self.pending_post_id, "reply_count": reply_count,
            "last_reply_at": 0, "participants": null, "metadata": metadata,
        });
        if !self.reactions.is_empty() {
            post["has_reactions"] = json!(true);
        }
        post
    }

    /// The post as the API sends it: `Post.ToJSON` strips every action's
    /// `integration` (`StripActionIntegrations`), so clients never see an
    /// integration's URL or context.
    pub fn to_json(&self, files: &[Value], reply_count: usize) -> Value {
        let mut post = self.to_raw_json(files, reply_count);
        strip_integrations(&mut post["props"]);
        post
    }

    /// The `props.attachments[].actions[]`.
    pub fn actions(&self) -> Vec<&Value> {
        let attachments = self.props.get("attachments").and_then(Value::as_array);
        attachments
            .into_iter()
            .flatten()
            .filter_map(|a| a.get("actions").and_then(Value::as_array))
            .flatten()
            .collect()
    }
}

/// Removes `integration` from every action of `props.attachments`.
pub(crate) fn strip_integrations(props: &mut Value) {
    let attachments = props.get_mut("attachments").and_then(Value::as_array_mut);
    for attachment in attachments.into_iter().flatten() {
        let actions = attachment.get_mut("actions").and_then(Value::as_array_mut);
        for action in actions.into_iter().flatten() {
            if let Some(action) = action.as_object_mut() {
                action.remove("integration");
            }
        }
    }
}

/// Gives every action of `props.attachments` without an `id` a fresh one,
/// as `Post.GenerateActionIds` does when a post is saved.
pub(crate) fn generate_action_ids(props: &mut Map<String, Value>) {
    let attachments = props.get_mut("attachments").and_then(Value::as_array_mut);
    for attachment in attachments.into_iter().flatten() {
        let actions = attachment.get_mut("actions").and_then(Value::as_array_mut);
        for action in actions.into_iter().flatten() {
            let Some(action) = action.as_object_mut() else {
                continue;
            };
            let has_id = action
                .get("id")
                .and_then(Value::as_str)
                .is_some_and(|id| !id.is_empty());
            if !has_id {
                action.insert("id".into(), json!(super::ids::new_id()));
            }
        }
    }
}

pub(crate) struct StoredFile {
    pub id: String,
    pub user_id: String,
    pub channel_id: String,
    pub post_id: Option<String>,
    pub name: String,
    pub bytes: Vec<u8>,
    pub create_at: i64,
}

impl StoredFile {
    pub fn extension(&self) -> String {
        match self.name.rsplit_once('.') {
            Some((_, ext)) if !ext.is_empty() => ext.to_ascii_lowercase(),
            _ => String::new(),
        }
    }

    pub fn mime_type(&self) -> &'static str {
        match self.extension().as_str() {
            "txt" | "log" | "md" => "text/plain",
            "json" => "application/json",
            "png" => "image/png",
            "jpg" | "jpeg" => "image/jpeg",
            "gif" => "image/gif",
            "pdf" => "application/pdf",
            "diff" | "patch" => "text/x-diff",
            _ => "application/octet-stream",
        }
    }

    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id, "user_id": self.user_id, "channel_id": self.channel_id,
            "post_id": self.post_id.clone().unwrap_or_default(),
            "create_at": self.create_at, "update_at": self.create_at, "delete_at": 0,
            "name": self.name, "extension": self.extension(), "size": self.bytes.len(),
            "mime_type": self.mime_type(), "width": 0, "height": 0,
            "has_preview_image": false, "mini_preview": null, "remote_id": "",
            "archived": false,
        })
    }
}
