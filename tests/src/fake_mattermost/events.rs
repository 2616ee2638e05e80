//! The events the fake publishes, with the data Mattermost puts in them
//! (`SendNotifications` in `app/notification.go`, `UpdatePost` in
//! `app/post.go`, `sendReactionEvent` in `app/reaction.go`): `posted`,
//! `post_edited`, `reaction_added` to a channel's members, `ephemeral_message`
//! and `open_dialog` to one user. Posts and reactions travel as JSON
//! *strings* in `data`.

use serde_json::{Value, json};

use super::hub::{Broadcast, event};
use super::model::Reaction;
use super::state::State;

impl State {
    fn members(&self, channel_id: &str) -> Vec<String> {
        let channel = self.channel(channel_id);
        channel.map(|c| c.members.clone()).unwrap_or_default()
    }

    /// `posted`: to every member of the post's channel, the author too.
    pub fn publish_posted(&mut self, post_id: &str) {
        let Some(post) = self.post(post_id) else {
            return;
        };
        let Some(channel) = self.channel(&post.channel_id) else {
            return;
        };
        let sender = self.user(&post.user_id).map(|u| u.username.as_str());
        let data = json!({
            "channel_display_name": channel.display_name,
            "channel_name": channel.name,
            "channel_type": channel.kind.wire(),
            "post": self.post_json(post).to_string(),
            "sender_name": format!("@{}", sender.unwrap_or_default()),
            "set_online": true,
            "team_id": channel.team_id,
        });
        let channel_id = channel.id.clone();
        let members = self.members(&channel_id);
        let posted = event("posted", data, Broadcast::channel(&channel_id));
        self.hub.publish(posted, &members);
    }

    /// `post_edited`: the post as it is now.
    pub fn publish_edited(&mut self, post_id: &str) {
        let Some(post) = self.post(post_id) else {
            return;
        };
        let data = json!({ "post": self.post_json(post).to_string() });
        let channel_id = post.channel_id.clone();
        let members = self.members(&channel_id);
        let edited = event("post_edited", data, Broadcast::channel(&channel_id));
        self.hub.publish(edited, &members);
    }

    /// `reaction_added`: sent for every save, a repeated one too.
    pub fn publish_reaction(&mut self, reaction: &Reaction) {
        let data = json!({ "reaction": reaction.to_json().to_string() });
        let members = self.members(&reaction.channel_id);
        let added = event(
            "reaction_added",
            data,
            Broadcast::channel(&reaction.channel_id),
        );
        self.hub.publish(added, &members);
    }

    /// An event for one user's connections only.
    pub fn publish_to_user(&mut self, user: &str, name: &str, data: Value) {
        let to_user = event(name, data, Broadcast::user(user));
        self.hub.publish(to_user, &[user.to_string()]);
    }
}
