//! Slack's events over Socket Mode, in the `serve` daemon: slack-morphism's
//! Socket Mode listener (`apps.connections.open` with the app-level token,
//! then a WebSocket), its payloads turned into [`crate::events`] types for
//! the [`EventHub`].
//!
//! - Acknowledgement: the listener acknowledges an envelope when its
//!   callback returns, and Slack wants that within 3 s. The callbacks here
//!   only route: a click's work (views.open, an ephemeral refusal) and a
//!   submission's storing are spawned; a submission's checks are in memory.
//! - Reconnection: a socket that drops, or that Slack asks to refresh (a
//!   `disconnect` envelope), is replaced by a new one at once; a failed
//!   connect is retried every `[slack] reconnect_secs` (the listener's
//!   fixed interval), and the daemon keeps `[slack] socket_connections`
//!   sockets so one dropping loses no event while the next connects.
//! - Redelivery: Slack retries an Events API envelope it saw no ack for; an
//!   event id already routed is acknowledged and not routed again.
//! - Logs: the listener's own trace output carries payloads (a submitted
//!   secret among them), so the binary caps its log level at info; the
//!   error handler here never logs a payload.
//! - Metrics: each socket Slack greets (`hello`), each event routed by
//!   kind, each redelivery ([`crate::metrics`]).

use std::sync::{Arc, Mutex};

use slack_morphism::errors::{SlackClientError, SlackClientProtocolError};
use slack_morphism::prelude::*;
use tracing::{debug, info, warn};

use crate::events::{ButtonClick, ChatEvent, EventHub, FormAnswer, FormSubmit, Remembered};
use crate::metrics::{Metrics, SlackEvent};
use crate::slack::{Connector, SlackSetupError};

/// How many event ids are remembered for deduplication.
const REMEMBERED_EVENTS: usize = 10_000;

/// The state the callbacks reach through the listener.
struct Routing {
    hub: Arc<EventHub>,
    seen: Mutex<Remembered<String, ()>>,
    metrics: Metrics,
}

impl Routing {
    fn new(hub: Arc<EventHub>, metrics: Metrics) -> Self {
        Self {
            hub,
            seen: Mutex::new(Remembered::new(REMEMBERED_EVENTS)),
            metrics,
        }
    }

    /// Whether `event_id` is new (and remember it).
    fn first_time(&self, event_id: &str) -> bool {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.insert(event_id.to_owned(), ())
    }
}

/// Socket Mode settings.
pub struct SocketModeConfig {
    pub api_url: String,
    pub app_token: String,
    pub connections: u32,
    pub reconnect_secs: u64,
}

/// A running listener; [`SocketMode::shutdown`] closes its sockets.
pub struct SocketMode {
    stop: Arc<tokio::sync::Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl SocketMode {
    /// Connects (in the background) and routes events to `hub`,
    /// counting sockets and events in `metrics`.
    pub async fn start(
        config: SocketModeConfig,
        hub: Arc<EventHub>,
        metrics: Metrics,
    ) -> Result<SocketMode, SlackSetupError> {
        let stop = Arc::new(tokio::sync::Notify::new());
        let routing = Arc::new(Routing::new(hub, metrics));
        let task = match Connector::for_url(&config.api_url)? {
            Connector::Https(connector) => {
                tokio::spawn(run(connector, config, routing, stop.clone()))
            }
            Connector::Http(connector) => {
                tokio::spawn(run(connector, config, routing, stop.clone()))
            }
        };
        Ok(SocketMode { stop, task })
    }

    pub async fn shutdown(self) {
        self.stop.notify_one();
        let _ = self.task.await;
    }
}

async fn run<H>(
    connector: SlackClientHyperConnector<H>,
    config: SocketModeConfig,
    routing: Arc<Routing>,
    stop: Arc<tokio::sync::Notify>,
) where
    H: hyper_util::client::legacy::connect::Connect + Clone + Send + Sync + 'static,
{
    let client = Arc::new(SlackClient::new(connector));
    let environment = Arc::new(
        SlackClientEventsListenerEnvironment::new(client)
            .with_error_handler(on_error)
            .with_user_state(routing),
    );
    let callbacks = SlackSocketModeListenerCallbacks::new()
        .with_hello_events(on_hello)
        .with_push_events(on_push)
        .with_interaction_events(on_interaction);
    let listener_config = SlackClientSocketModeConfig::new()
        .with_max_connections_count(config.connections)
        .with_initial_backoff_in_seconds(1)
        .with_reconnect_timeout_in_seconds(config.reconnect_secs.max(1));
    let listener = SlackClientSocketModeListener::new(&listener_config, environment, callbacks);
    let token = SlackApiToken::new(SlackApiTokenValue::new(config.app_token));
    if let Err(err) = listener.listen_for(&token).await {
        warn!(%err, "Socket Mode could not start");
        return;
    }
    listener.start().await;
    info!(connections = config.connections, "Socket Mode started");
    stop.notified().await;
    listener.shutdown().await;
}

async fn routing(states: &SlackClientEventsUserState) -> Option<Arc<Routing>> {
    states
        .read()
        .await
        .get_user_state::<Arc<Routing>>()
        .cloned()
}

/// Slack's `hello` on each new socket (its type is not exported by
/// slack-morphism, hence the type parameter).
async fn on_hello<E, C: SlackClientHttpConnector + Send + Sync>(
    _event: E,
    _client: Arc<SlackClient<C>>,
    states: SlackClientEventsUserState,
) {
    info!("Socket Mode connected");
    if let Some(routing) = routing(&states).await {
        routing.metrics.socket_mode_connected();
    }
}

async fn on_push<C: SlackClientHttpConnector + Send + Sync>(
    event: SlackPushEventCallback,
    _client: Arc<SlackClient<C>>,
    states: SlackClientEventsUserState,
) -> UserCallbackResult<()> {
    let Some(routing) = routing(&states).await else {
        return Ok(());
    };
    if !routing.first_time(&event.event_id.0) {
        debug!(event_id = %event.event_id.0, "a redelivered event was acknowledged again");
        routing.metrics.slack_event_redelivered();
        return Ok(());
    }
    let chat_event = match event.event {
        SlackEventCallbackBody::Message(m) => match m.origin.channel {
            Some(channel) => Some(ChatEvent::Message {
                channel: channel.0,
                ts: m.origin.ts.0,
                thread_ts: m.origin.thread_ts.map(|t| t.0),
                user: m.sender.user.map(|u| u.0),
                text: m.content.and_then(|c| c.text).unwrap_or_default(),
            }),
            None => None,
        },
        SlackEventCallbackBody::ReactionAdded(r) => match r.item {
            SlackReactionsItem::Message(m) => m.origin.channel.map(|channel| ChatEvent::Reaction {
                channel: channel.0,
                ts: m.origin.ts.0,
                user: r.user.0,
                reaction: r.reaction.0,
            }),
            SlackReactionsItem::File(_) => None,
        },
        _ => None,
    };
    if let Some(chat_event) = chat_event {
        routing.metrics.slack_event(match chat_event {
            ChatEvent::Message { .. } => SlackEvent::Message,
            ChatEvent::Reaction { .. } => SlackEvent::Reaction,
        });
        routing.hub.on_event(chat_event);
    }
    Ok(())
}

async fn on_interaction<C: SlackClientHttpConnector + Send + Sync>(
    event: SlackInteractionEvent,
    _client: Arc<SlackClient<C>>,
    states: SlackClientEventsUserState,
) -> UserCallbackResult<SlackInteractionResponse> {
    let Some(routing) = routing(&states).await else {
        return Ok(SlackInteractionResponse::Empty);
    };
    match event {
        SlackInteractionEvent::BlockActions(click) => {
            let (Some(user), SlackInteractionActionContainer::Message(container)) =
                (click.user, click.container)
            else {
                return Ok(SlackInteractionResponse::Empty);
            };
            let channel = container
                .channel_id
                .map(|c| c.0)
                .or_else(|| click.channel.map(|c| c.id.0))
                .unwrap_or_default();
            routing.metrics.slack_event(SlackEvent::Click);
            for action in click.actions.unwrap_or_default() {
                routing.hub.on_click(ButtonClick {
                    user: user.id.0.clone(),
                    channel: channel.clone(),
                    message_ts: container.message_ts.0.clone(),
                    trigger_id: click.trigger_id.0.clone(),
                    action_id: action.action_id.0,
                    value: action.value.unwrap_or_default(),
                });
            }
            Ok(SlackInteractionResponse::Empty)
        }
        SlackInteractionEvent::ViewSubmission(submission) => {
            let SlackView::Modal(modal) = submission.view.view else {
                return Ok(SlackInteractionResponse::Empty);
            };
            routing.metrics.slack_event(SlackEvent::Form);
            let mut values = Vec::new();
            for (block, actions) in submission
                .view
                .state_params
                .state
                .map(|s| s.values)
                .unwrap_or_default()
            {
                for (action, value) in actions {
                    values.push((block.0.clone(), action.0, value.value.unwrap_or_default()));
                }
            }
            let answer = routing.hub.on_submit(FormSubmit {
                user: submission.user.id.0,
                callback_id: modal.callback_id.map(|c| c.0).unwrap_or_default(),
                private_metadata: modal.private_metadata.unwrap_or_default(),
                values,
            });
            Ok(match answer {
                FormAnswer::Close => SlackInteractionResponse::Empty,
                FormAnswer::Errors(errors) => {
                    SlackInteractionResponse::ViewSubmission(SlackViewSubmissionResponse::Errors(
                        SlackViewSubmissionErrorsResponse::new(errors.into_iter().collect()),
                    ))
                }
            })
        }
        _ => Ok(SlackInteractionResponse::Empty),
    }
}

/// Logs what went wrong, never a payload: a payload that failed to parse
/// may be a submitted secret, and slack-morphism hands it over inside the
/// error (a bare `SlackClientProtocolError` whose text holds the body).
fn on_error<C: SlackClientHttpConnector + Send + Sync>(
    err: Box<dyn std::error::Error + Send + Sync>,
    _client: Arc<SlackClient<C>>,
    _states: SlackClientEventsUserState,
) -> http::StatusCode {
    warn!("Socket Mode: {}", describe(err.as_ref()));
    http::StatusCode::OK
}

/// What an error from the listener is, without any payload it carries.
fn describe(err: &(dyn std::error::Error + 'static)) -> String {
    const UNREADABLE: &str = "a payload could not be read; it was acknowledged and dropped";
    if err.downcast_ref::<SlackClientProtocolError>().is_some() {
        return UNREADABLE.into();
    }
    match err.downcast_ref::<SlackClientError>() {
        Some(SlackClientError::ProtocolError(_)) => UNREADABLE.into(),
        // "Slack WSS error: <the WebSocket error>": no payload, but
        // "Unexpected binary received" carries the frame. (slack-morphism
        // 2.31 builds this error in those two places only; a new one that
        // carries a payload would need its own arm here.)
        Some(SlackClientError::SocketModeProtocolError(e)) if !e.message.contains("binary") => {
            e.message.clone()
        }
        Some(SlackClientError::SocketModeProtocolError(_)) => {
            "an unexpected binary frame (not shown)".into()
        }
        Some(SlackClientError::ApiError(e)) => format!("Slack answered {}", e.code),
        Some(SlackClientError::HttpError(e)) => format!("HTTP status {}", e.status_code),
        Some(SlackClientError::RateLimitError(_)) => "Slack is rate limiting".into(),
        Some(SlackClientError::EndOfStream(_)) => "the connection ended".into(),
        Some(_) | None => "an error (its details are not logged: they may hold a payload)".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_ids_are_remembered_up_to_the_cap() {
        let chat = crate::slack::backend("http://127.0.0.1:9/api/", "xoxb-unused".into())
            .expect("a client");
        let requests = Arc::new(crate::secret_request::SecretRequests::new(
            chat,
            Err(crate::secrets::NoStore::NoKey),
            std::path::PathBuf::from("/nonexistent"),
        ));
        let routing = Routing::new(Arc::new(EventHub::new(requests)), Metrics::default());
        assert!(routing.first_time("Ev0"));
        assert!(!routing.first_time("Ev0"), "a redelivery is seen");
        for i in 1..REMEMBERED_EVENTS {
            assert!(routing.first_time(&format!("Ev{i}")));
        }
        assert!(!routing.first_time("Ev0"), "still remembered at the cap");
        assert!(routing.first_time("Ev-next"));
        assert!(
            routing.first_time("Ev0"),
            "the oldest forgotten past the cap"
        );
    }

    #[test]
    fn a_payload_in_an_error_is_never_described() {
        let body = r#"{"view":{"state":{"values":{"secret":{"value":{"value":"hunter2"}}}}}}"#;
        let parse = serde_json::from_str::<u8>("x").expect_err("not a number");
        let bare = SlackClientProtocolError::new(parse).with_json_body(body.to_owned());
        assert!(
            bare.to_string().contains("hunter2"),
            "the library's own text holds it"
        );
        assert!(!describe(&bare).contains("hunter2"));
        let parse = serde_json::from_str::<u8>("x").expect_err("not a number");
        let wrapped = SlackClientError::ProtocolError(
            SlackClientProtocolError::new(parse).with_json_body(body.to_owned()),
        );
        assert!(!describe(&wrapped).contains("hunter2"));
        let binary = SlackClientError::SocketModeProtocolError(
            slack_morphism::errors::SlackClientSocketModeProtocolError::new(
                "Unexpected binary received from Slack: hunter2".into(),
            ),
        );
        assert!(!describe(&binary).contains("hunter2"));
    }
}
