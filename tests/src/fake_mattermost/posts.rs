//! Posts (`posts.yaml`): `POST /posts`, `POST /posts/ephemeral`,
//! `GET /posts/{post_id}`, `GET /posts/{post_id}/thread`,
//! `PUT /posts/{post_id}/patch`, and `GET /channels/{channel_id}/posts`.

use http::StatusCode;
use serde_json::{Map, Value, json};

use super::answers::{AppError, Outcome};
use super::ids;
use super::model::{Post, generate_action_ids};
use super::records::{Ephemeral, PostRecord, Source, Update};
use super::state::{Cursors, MAX_MESSAGE_RUNES, State, paging};

/// A post about to be stored.
pub(crate) struct NewPost {
    pub channel_id: String,
    pub user_id: String,
    pub root_id: String,
    pub message: String,
    pub props: Map<String, Value>,
    pub file_ids: Vec<String>,
    pub pending_post_id: String,
}

impl State {
    /// Stores a post (action ids filled in, `from_bot` set for a bot, the
    /// files attached, the root's `update_at` bumped) and publishes
    /// `posted`; answers its id.
    pub fn insert_post(&mut self, new: NewPost) -> String {
        let id = ids::new_id();
        let now = self.now();
        let mut props = new.props;
        generate_action_ids(&mut props);
        if self.user(&new.user_id).is_some_and(|u| u.is_bot) {
            props.insert("from_bot".into(), json!("true"));
        }
        for file in self
            .files
            .iter_mut()
            .filter(|f| new.file_ids.contains(&f.id))
        {
            file.post_id = Some(id.clone());
        }
        if let Some(root) = self.post_mut(&new.root_id) {
            root.update_at = now;
        }
        self.posts.push(Post {
            id: id.clone(),
            create_at: now,
            update_at: now,
            edit_at: 0,
            user_id: new.user_id,
            channel_id: new.channel_id,
            root_id: new.root_id,
            message: new.message,
            kind: String::new(),
            props,
            file_ids: new.file_ids,
            reactions: Vec::new(),
            pending_post_id: new.pending_post_id,
        });
        self.publish_posted(&id);
        // Only the create answer and the event echo it.
        if let Some(post) = self.post_mut(&id) {
            post.pending_post_id.clear();
        }
        id
    }
}

fn str_field<'a>(fields: &'a Map<String, Value>, name: &str) -> Result<&'a str, AppError> {
    match fields.get(name) {
        None | Some(Value::Null) => Ok(""),
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(AppError::invalid_body(name)),
    }
}

fn check_length(message: &str) -> Result<(), AppError> {
    if message.chars().count() > MAX_MESSAGE_RUNES {
        let detail = format!("length={}", message.chars().count());
        let id = "model.post.is_valid.message_length.app_error";
        return Err(AppError::bad_request(id, "Invalid Message parameter.").detail(detail));
    }
    Ok(())
}

fn props_field(fields: &Map<String, Value>) -> Result<Option<Map<String, Value>>, AppError> {
    match fields.get("props") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(props)) => Ok(Some(props.clone())),
        Some(_) => Err(AppError::invalid_body("props")),
    }
}

/// The root a reply may hang from: a root post of the same channel.
fn check_root(state: &State, channel_id: &str, root_id: &str) -> Result<(), AppError> {
    let bad_root = || {
        AppError::bad_request(
            "api.post.create_post.root_id.app_error",
            "Invalid RootId parameter.",
        )
    };
    let root = state.post(root_id).ok_or_else(bad_root)?;
    if root.channel_id != channel_id {
        let id = "api.post.create_post.channel_root_id.app_error";
        return Err(AppError::bad_request(
            id,
            "Invalid ChannelId for RootId parameter.",
        ));
    }
    if !root.root_id.is_empty() {
        return Err(bad_root());
    }
    Ok(())
}

pub(crate) fn create(state: &mut State, caller: &str, body: &Value) -> Outcome {
    let fields = body
        .as_object()
        .ok_or_else(|| AppError::invalid_body("post"))?;
    let channel_id = str_field(fields, "channel_id")?.to_string();
    let member = state
        .channel(&channel_id)
        .is_some_and(|c| c.is_member(caller));
    if !member {
        return Err(AppError::permissions("create_post"));
    }
    if str_field(fields, "type")?.starts_with("system_") {
        return Err(AppError::invalid_body("post.type"));
    }
    let message = str_field(fields, "message")?.to_string();
    check_length(&message)?;
    let root_id = str_field(fields, "root_id")?.to_string();
    if !root_id.is_empty() {
        check_root(state, &channel_id, &root_id)?;
    }
    let file_ids: Vec<String> = match fields.get("file_ids") {
        None | Some(Value::Null) => Vec::new(),
        Some(ids) => {
            serde_json::from_value(ids.clone()).map_err(|_| AppError::invalid_body("file_ids"))?
        }
    };
    // `Post.IsValid`: the file ids' JSON is at most 300 characters.
    if json!(file_ids).to_string().chars().count() > 300 {
        let id = "model.post.is_valid.file_ids.app_error";
        return Err(AppError::bad_request(id, "Invalid file ids."));
    }
    let props = props_field(fields)?.unwrap_or_default();
    // `attachFilesToPost` drops, silently, a file of another channel or
    // uploader, or one already attached.
    let mut attached: Vec<String> = Vec::new();
    for id in &file_ids {
        let attachable = state.files.iter().any(|f| {
            &f.id == id && f.channel_id == channel_id && f.user_id == caller && f.post_id.is_none()
        });
        if attachable && !attached.contains(id) {
            attached.push(id.clone());
        }
    }
    let has_attachments = props
        .get("attachments")
        .is_some_and(|a| a.as_array().is_some_and(|a| !a.is_empty()));
    if message.trim().is_empty() && attached.is_empty() && !has_attachments {
        let id = "fake_mattermost.post.empty";
        return Err(AppError::bad_request(
            id,
            "A post needs a message, a file or attachments.",
        ));
    }
    let pending_post_id = str_field(fields, "pending_post_id")?.to_string();
    let record = PostRecord {
        id: String::new(),
        channel_id: channel_id.clone(),
        user_id: caller.to_string(),
        root_id: root_id.clone(),
        message: message.clone(),
        props: Value::Object(props.clone()),
        file_ids,
        source: Source::Api,
        body: Some(body.clone()),
    };
    let new = NewPost {
        channel_id,
        user_id: caller.to_string(),
        root_id,
        message,
        props,
        file_ids: attached,
        pending_post_id: pending_post_id.clone(),
    };
    let id = state.insert_post(new);
    state.post_records.push(PostRecord {
        id: id.clone(),
        ..record
    });
    let mut answer = state
        .post(&id)
        .map(|p| state.post_json(p))
        .unwrap_or_default();
    answer["pending_post_id"] = json!(pending_post_id);
    Ok((StatusCode::CREATED, answer))
}

/// The post, if `caller` may read it: unknown is 404
/// (`app.post.get.app_error`), unreadable 403.
fn readable<'a>(state: &'a State, caller: &str, post_id: &str) -> Result<&'a Post, AppError> {
    let post = state
        .post(post_id)
        .ok_or_else(|| AppError::not_found("app.post.get.app_error", "Unable to get the post."))?;
    let channel = state.channel(&post.channel_id);
    if !channel.is_some_and(|c| state.can_read(c, caller)) {
        return Err(AppError::permissions("read_channel_content"));
    }
    Ok(post)
}

pub(crate) fn get(state: &State, caller: &str, post_id: &str) -> Outcome {
    let post = readable(state, caller, post_id)?;
    Ok((StatusCode::OK, state.post_json(post)))
}

/// The root and every reply, newest first; any post of the thread names it.
pub(crate) fn thread(state: &State, caller: &str, post_id: &str) -> Outcome {
    let post = readable(state, caller, post_id)?;
    let root = if post.root_id.is_empty() {
        post.id.clone()
    } else {
        post.root_id.clone()
    };
    let mut order: Vec<String> = state
        .posts
        .iter()
        .filter(|p| p.id == root || p.root_id == root)
        .map(|p| p.id.clone())
        .collect();
    order.reverse();
    Ok((
        StatusCode::OK,
        state.post_list(&order, &[], Cursors::default()),
    ))
}

/// `PUT /posts/{post_id}/patch`: `message` and `props` (which replaces
/// the whole map); the author only. A missing post is 403 too, as the
/// permission check comes first.
pub(crate) fn patch(state: &mut State, caller: &str, post_id: &str, body: &Value) -> Outcome {
    let fields = body
        .as_object()
        .ok_or_else(|| AppError::invalid_body("post"))?;
    let post = state
        .post(post_id)
        .ok_or_else(|| AppError::permissions("edit_post"))?;
    if post.user_id != caller {
        return Err(AppError::permissions("edit_others_posts"));
    }
    let message = match fields.get("message") {
        None | Some(Value::Null) => None,
        Some(Value::String(m)) => Some(m.clone()),
        Some(_) => return Err(AppError::invalid_body("message")),
    };
    if let Some(message) = &message {
        check_length(message)?;
    }
    let props = props_field(fields)?;
    let now = state.now();
    let Some(post) = state.post_mut(post_id) else {
        return Err(AppError::permissions("edit_post"));
    };
    let mut edited = false;
    if let Some(message) = &message {
        edited |= *message != post.message;
        post.message = message.clone();
    }
    if let Some(props) = &props {
        let mut props = props.clone();
        generate_action_ids(&mut props);
        if let Some(from_bot) = post.props.get("from_bot").cloned() {
            props.insert("from_bot".into(), from_bot);
        }
        edited |= props.get("attachments") != post.props.get("attachments");
        post.props = props;
    }
    if edited {
        post.edit_at = now;
    }
    post.update_at = now;
    state.updates.push(Update {
        post_id: post_id.to_string(),
        message,
        props: props.map(Value::Object),
        source: Source::Api,
        body: body.clone(),
    });
    state.publish_edited(post_id);
    get(state, caller, post_id)
}

/// `POST /posts/ephemeral`: `{user_id, post: {channel_id, message,
/// root_id}}`. Mattermost grants `create_post_ephemeral` to system admins
/// only; the fake grants it to the bot unless
/// [`set_ephemeral_allowed`](super::FakeMattermost::set_ephemeral_allowed)
/// says otherwise.
pub(crate) fn ephemeral(state: &mut State, caller: &str, body: &Value) -> Outcome {
    if !state.ephemeral_allowed {
        return Err(AppError::permissions("create_post_ephemeral"));
    }
    let fields = body
        .as_object()
        .ok_or_else(|| AppError::invalid_body("ephemeral_post"))?;
    let user_id = str_field(fields, "user_id")?.to_string();
    if state.user(&user_id).is_none() {
        return Err(AppError::invalid_body("user_id"));
    }
    let post = fields
        .get("post")
        .and_then(Value::as_object)
        .ok_or_else(|| AppError::invalid_body("post"))?;
    let channel_id = str_field(post, "channel_id")?.to_string();
    if !state
        .channel(&channel_id)
        .is_some_and(|c| c.is_member(caller))
    {
        return Err(AppError::permissions("create_post"));
    }
    let message = str_field(post, "message")?.to_string();
    check_length(&message)?;
    let root_id = str_field(post, "root_id")?.to_string();
    let answer = send_ephemeral(
        state,
        caller,
        &user_id,
        &channel_id,
        &root_id,
        &message,
        Source::Api,
    );
    Ok((StatusCode::CREATED, answer))
}

/// Records an ephemeral post for `user_id`, sends it as
/// `ephemeral_message`, and answers it.
pub(crate) fn send_ephemeral(
    state: &mut State,
    author: &str,
    user_id: &str,
    channel_id: &str,
    root_id: &str,
    message: &str,
    source: Source,
) -> Value {
    let id = ids::new_id();
    let now = state.now();
    let post = json!({
        "id": id, "create_at": now, "update_at": now, "edit_at": 0, "delete_at": 0,
        "is_pinned": false, "user_id": author, "channel_id": channel_id, "root_id": root_id,
        "original_id": "", "message": message, "type": "system_ephemeral", "props": {},
        "hashtags": "", "file_ids": [], "pending_post_id": "", "reply_count": 0,
        "metadata": {},
    });
    state.ephemerals.push(Ephemeral {
        id,
        user_id: user_id.to_string(),
        channel_id: channel_id.to_string(),
        root_id: root_id.to_string(),
        message: message.to_string(),
        source,
    });
    let data = json!({ "post": post.to_string() });
    state.publish_to_user(user_id, "ephemeral_message", data);
    post
}

/// `GET /channels/{channel_id}/posts`: every post, replies included,
/// newest first, in pages; `posts` also carries the root of each reply.
pub(crate) fn channel_posts(
    state: &State,
    caller: &str,
    channel_id: &str,
    query: &std::collections::HashMap<String, String>,
) -> Outcome {
    let channel = state.channel(channel_id);
    if !channel.is_some_and(|c| state.can_read(c, caller)) {
        return Err(AppError::permissions("read_channel_content"));
    }
    let (page, per_page) = paging(query);
    let all: Vec<&Post> = state
        .posts
        .iter()
        .rev()
        .filter(|p| p.channel_id == channel_id)
        .collect();
    let start = (page * per_page).min(all.len());
    let end = (start + per_page).min(all.len());
    let order: Vec<String> = all[start..end].iter().map(|p| p.id.clone()).collect();
    let roots: Vec<String> = all[start..end]
        .iter()
        .filter(|p| !p.root_id.is_empty() && !order.contains(&p.root_id))
        .map(|p| p.root_id.clone())
        .collect();
    let cursors = Cursors {
        next_post_id: start
            .checked_sub(1)
            .map(|i| all[i].id.clone())
            .unwrap_or_default(),
        prev_post_id: all.get(end).map(|p| p.id.clone()).unwrap_or_default(),
        has_next: end < all.len(),
    };
    Ok((StatusCode::OK, state.post_list(&order, &roots, cursors)))
}
