//! What the gateway counts, served as Prometheus text by the `serve`
//! daemon on `[serve] metrics` (see `calvin_common::metrics_http`): tool
//! calls by tool and outcome, Slack Web API calls by method and outcome,
//! the waits Slack's rate limits cost, the daemon's sessions and its
//! Socket Mode; on Mattermost, its WebSocket's connections and events and
//! the integration callbacks of its buttons and dialogs.
//!
//! Every label takes few values: a tool is one of
//! [`crate::tools::tool_names`] (any other name is `unknown`), a Slack
//! method a name written in `slack.rs` (a `&'static str`), an outcome one
//! of its enum's. No series is per session, channel or person. A series
//! appears at its first count.
//!
//! [`Metrics`] is a handle; clones share the counts. `main` makes one and
//! passes it to the Slack client (`process::assemble`), the MCP handler,
//! the session endpoints and Socket Mode.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64};
use std::time::Duration;

use prometheus_client::encoding::text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

type Labels<const N: usize> = [(&'static str, &'static str); N];

/// How a tool call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolOutcome {
    /// The tool answered.
    Ok,
    /// The tool answered with an error (`isError`): a bad argument, a
    /// refusal, a failure on the way.
    Error,
    /// The client cancelled the call, or went away, before its answer.
    Cancelled,
}

impl ToolOutcome {
    fn label(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Error => "error",
            Self::Cancelled => "cancelled",
        }
    }
}

/// How Slack answered one Web API request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlackOutcome {
    Ok,
    /// HTTP 429.
    RateLimited,
    /// An error about the token: `invalid_auth`, `missing_scope`, ...
    AuthError,
    /// A `*_not_found` error.
    NotFound,
    /// Any other error Slack answered (`{"ok": false, "error"}`).
    ApiError,
    /// Another HTTP status than 200 or 429.
    HttpError,
    /// No answer (the connection failed), or one that could not be read.
    TransportError,
}

/// Slack's error codes about the token: the bot's configuration, not the
/// call.
const AUTH_ERRORS: [&str; 11] = [
    "not_authed",
    "invalid_auth",
    "account_inactive",
    "token_revoked",
    "token_expired",
    "no_permission",
    "missing_scope",
    "not_allowed_token_type",
    "ekm_access_denied",
    "team_access_not_granted",
    "org_login_required",
];

impl SlackOutcome {
    /// The class of Slack's error `code`.
    pub fn of_code(code: &str) -> SlackOutcome {
        if AUTH_ERRORS.contains(&code) {
            Self::AuthError
        } else if code.ends_with("_not_found") {
            Self::NotFound
        } else if code == "ratelimited" {
            Self::RateLimited
        } else {
            Self::ApiError
        }
    }

    fn label(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::RateLimited => "rate_limited",
            Self::AuthError => "auth_error",
            Self::NotFound => "not_found",
            Self::ApiError => "api_error",
            Self::HttpError => "http_error",
            Self::TransportError => "transport_error",
        }
    }
}

/// A Slack event the daemon routed (received over Socket Mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlackEvent {
    Message,
    Reaction,
    /// A button click (request_secret's).
    Click,
    /// A form submitted (request_secret's).
    Form,
}

impl SlackEvent {
    fn label(self) -> &'static str {
        match self {
            Self::Message => "message",
            Self::Reaction => "reaction",
            Self::Click => "click",
            Self::Form => "form",
        }
    }
}

/// How a Mattermost WebSocket connection began
/// ([`crate::mattermost::events`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MattermostConnect {
    /// A new connection: Mattermost said `hello`.
    New,
    /// The previous connection resumed (`connection_id` and
    /// `sequence_number`): Mattermost replays what it missed.
    Resumed,
}

impl MattermostConnect {
    fn label(self) -> &'static str {
        match self {
            Self::New => "new",
            Self::Resumed => "resumed",
        }
    }
}

/// A Mattermost event the daemon routed, received over its WebSocket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MattermostEvent {
    Message,
    Reaction,
}

impl MattermostEvent {
    fn label(self) -> &'static str {
        match self {
            Self::Message => "message",
            Self::Reaction => "reaction",
        }
    }
}

/// Which integration callback Mattermost posted
/// ([`crate::mattermost::callbacks`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallbackRoute {
    /// `POST /actions`: a button clicked.
    Action,
    /// `POST /dialogs`: a dialog submitted or cancelled.
    Dialog,
    /// Any other path.
    Other,
}

impl CallbackRoute {
    fn label(self) -> &'static str {
        match self {
            Self::Action => "action",
            Self::Dialog => "dialog",
            Self::Other => "other",
        }
    }
}

/// How the gateway answered an integration callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallbackOutcome {
    /// Routed to the hub; the dialog (if one) closes.
    Routed,
    /// Routed; the dialog stays open, showing errors.
    KeptOpen,
    /// A dialog cancelled: nothing routed.
    Cancelled,
    /// Its signature did not verify (403).
    Forbidden,
    /// Not a callback the gateway reads (400, 404, 405).
    BadRequest,
    /// Its body was over the cap (413).
    TooLarge,
}

impl CallbackOutcome {
    fn label(self) -> &'static str {
        match self {
            Self::Routed => "routed",
            Self::KeptOpen => "kept_open",
            Self::Cancelled => "cancelled",
            Self::Forbidden => "forbidden",
            Self::BadRequest => "bad_request",
            Self::TooLarge => "too_large",
        }
    }
}

/// The gateway's counts; clones share them.
#[derive(Clone)]
pub struct Metrics(Arc<Inner>);

struct Inner {
    registry: Registry,
    tool_calls: Family<Labels<2>, Counter>,
    slack_calls: Family<Labels<2>, Counter>,
    mattermost_calls: Family<Labels<2>, Counter>,
    rate_limit_waits: Counter,
    rate_limit_wait_seconds: Counter<f64, AtomicU64>,
    sessions: Gauge<i64, AtomicI64>,
    registrations: Counter,
    socket_mode_connects: Counter,
    slack_events: Family<Labels<1>, Counter>,
    redeliveries: Counter,
    mattermost_connects: Family<Labels<1>, Counter>,
    mattermost_events: Family<Labels<1>, Counter>,
    mattermost_callbacks: Family<Labels<2>, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("calvin_gateway");
        let tool_calls = Family::<Labels<2>, Counter>::default();
        registry.register(
            "tool_calls",
            "MCP tool calls, by tool and outcome (ok, error, cancelled)",
            tool_calls.clone(),
        );
        let slack_calls = Family::<Labels<2>, Counter>::default();
        registry.register(
            "slack_calls",
            "Slack Web API requests, by method and outcome (ok, rate_limited, auth_error, \
             not_found, api_error, http_error, transport_error); a retry is a request of its own",
            slack_calls.clone(),
        );
        let mattermost_calls = Family::<Labels<2>, Counter>::default();
        registry.register(
            "mattermost_calls",
            "Mattermost REST API v4 requests, by route (e.g. POST /posts) and outcome (the same \
             classes as slack_calls); a retry is a request of its own",
            mattermost_calls.clone(),
        );
        let rate_limit_waits = Counter::default();
        registry.register(
            "slack_rate_limit_waits",
            "Waits for a rate-limited request's Retry-After before retrying it (Slack's, or \
             Mattermost's on a Mattermost gateway)",
            rate_limit_waits.clone(),
        );
        let rate_limit_wait_seconds = Counter::<f64, AtomicU64>::default();
        registry.register_with_unit(
            "slack_rate_limit_wait",
            "Time spent waiting for Slack's Retry-After",
            Unit::Seconds,
            rate_limit_wait_seconds.clone(),
        );
        let sessions = Gauge::<i64, AtomicI64>::default();
        registry.register(
            "sessions",
            "Runner sessions registered with the daemon now",
            sessions.clone(),
        );
        let registrations = Counter::default();
        registry.register(
            "session_registrations",
            "Runner sessions registered with the daemon (POST /sessions)",
            registrations.clone(),
        );
        let socket_mode_connects = Counter::default();
        registry.register(
            "socket_mode_connects",
            "Socket Mode connections opened (Slack's hello), first ones and reconnections",
            socket_mode_connects.clone(),
        );
        let slack_events = Family::<Labels<1>, Counter>::default();
        registry.register(
            "slack_events",
            "Slack events routed, by kind (message, reaction, click, form)",
            slack_events.clone(),
        );
        let redeliveries = Counter::default();
        registry.register(
            "slack_event_redeliveries",
            "Events Slack delivered again (already routed: acknowledged, not routed twice)",
            redeliveries.clone(),
        );
        let mattermost_connects = Family::<Labels<1>, Counter>::default();
        registry.register(
            "mattermost_websocket_connects",
            "Mattermost WebSocket connections opened, new (its hello) or resumed",
            mattermost_connects.clone(),
        );
        let mattermost_events = Family::<Labels<1>, Counter>::default();
        registry.register(
            "mattermost_events",
            "Mattermost WebSocket events routed, by kind (message, reaction)",
            mattermost_events.clone(),
        );
        let mattermost_callbacks = Family::<Labels<2>, Counter>::default();
        registry.register(
            "mattermost_callbacks",
            "Mattermost integration callbacks, by route (action, dialog, other) and outcome \
             (routed, kept_open, cancelled, forbidden, bad_request, too_large)",
            mattermost_callbacks.clone(),
        );
        Self(Arc::new(Inner {
            registry,
            tool_calls,
            slack_calls,
            mattermost_calls,
            rate_limit_waits,
            rate_limit_wait_seconds,
            sessions,
            registrations,
            socket_mode_connects,
            slack_events,
            redeliveries,
            mattermost_connects,
            mattermost_events,
            mattermost_callbacks,
        }))
    }
}

impl Metrics {
    /// A call of `tool` begins; it counts when its guard says how it
    /// ended, or as cancelled when dropped first.
    pub fn tool_call(&self, tool: &'static str) -> ToolCall {
        ToolCall {
            metrics: self.clone(),
            tool,
            outcome: ToolOutcome::Cancelled,
        }
    }

    /// Slack answered a request of `method`.
    pub fn slack_call(&self, method: &'static str, outcome: SlackOutcome) {
        self.0
            .slack_calls
            .get_or_create(&[("method", method), ("outcome", outcome.label())])
            .inc();
    }

    /// Mattermost answered a request of `route` (its template).
    pub fn mattermost_call(&self, route: &'static str, outcome: SlackOutcome) {
        self.0
            .mattermost_calls
            .get_or_create(&[("route", route), ("outcome", outcome.label())])
            .inc();
    }

    /// A rate-limited request waits `wait` before its retry.
    pub fn rate_limit_wait(&self, wait: Duration) {
        self.0.rate_limit_waits.inc();
        self.0.rate_limit_wait_seconds.inc_by(wait.as_secs_f64());
    }

    /// A session registered; `now` are registered.
    pub fn session_registered(&self, now: usize) {
        self.0.registrations.inc();
        self.sessions(now);
    }

    /// `now` sessions are registered.
    pub fn sessions(&self, now: usize) {
        self.0.sessions.set(i64::try_from(now).unwrap_or(i64::MAX));
    }

    pub fn socket_mode_connected(&self) {
        self.0.socket_mode_connects.inc();
    }

    pub fn slack_event(&self, kind: SlackEvent) {
        self.0
            .slack_events
            .get_or_create(&[("kind", kind.label())])
            .inc();
    }

    pub fn slack_event_redelivered(&self) {
        self.0.redeliveries.inc();
    }

    pub fn mattermost_connected(&self, how: MattermostConnect) {
        self.0
            .mattermost_connects
            .get_or_create(&[("how", how.label())])
            .inc();
    }

    pub fn mattermost_event(&self, kind: MattermostEvent) {
        self.0
            .mattermost_events
            .get_or_create(&[("kind", kind.label())])
            .inc();
    }

    pub fn mattermost_callback(&self, route: CallbackRoute, outcome: CallbackOutcome) {
        self.0
            .mattermost_callbacks
            .get_or_create(&[("route", route.label()), ("outcome", outcome.label())])
            .inc();
    }

    /// The exposition (OpenMetrics text).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String fails only if a metric's own encoding does.
        if let Err(err) = text::encode(&mut out, &self.0.registry) {
            tracing::warn!(%err, "cannot encode the metrics");
        }
        out
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

/// A tool call under way: counted once, with the outcome
/// [`finish`](Self::finish) gives, or as cancelled if dropped before it.
pub struct ToolCall {
    metrics: Metrics,
    tool: &'static str,
    outcome: ToolOutcome,
}

impl ToolCall {
    pub fn finish(mut self, outcome: ToolOutcome) {
        self.outcome = outcome;
    }
}

impl Drop for ToolCall {
    fn drop(&mut self) {
        self.metrics
            .0
            .tool_calls
            .get_or_create(&[("tool", self.tool), ("outcome", self.outcome.label())])
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of the series `series` (its name and labels).
    fn value(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    #[test]
    fn counts_are_exposed_by_their_labels() {
        let metrics = Metrics::default();
        metrics.tool_call("post_card").finish(ToolOutcome::Ok);
        metrics.tool_call("post_card").finish(ToolOutcome::Ok);
        metrics.tool_call("post_card").finish(ToolOutcome::Error);
        drop(metrics.tool_call("permission_prompt"));
        metrics.slack_call("chat.postMessage", SlackOutcome::RateLimited);
        metrics.slack_call("chat.postMessage", SlackOutcome::Ok);
        metrics.slack_call("users.info", SlackOutcome::of_code("user_not_found"));
        metrics.rate_limit_wait(Duration::from_millis(1_500));
        metrics.rate_limit_wait(Duration::from_secs(2));
        metrics.session_registered(1);
        metrics.session_registered(2);
        metrics.sessions(1);
        metrics.socket_mode_connected();
        metrics.slack_event(SlackEvent::Reaction);
        metrics.slack_event_redelivered();
        metrics.mattermost_connected(MattermostConnect::New);
        metrics.mattermost_connected(MattermostConnect::Resumed);
        metrics.mattermost_connected(MattermostConnect::Resumed);
        metrics.mattermost_event(MattermostEvent::Message);
        metrics.mattermost_callback(CallbackRoute::Dialog, CallbackOutcome::KeptOpen);
        let text = metrics.encode();
        for (series, want) in [
            (
                r#"calvin_gateway_tool_calls_total{tool="post_card",outcome="ok"}"#,
                2.0,
            ),
            (
                r#"calvin_gateway_tool_calls_total{tool="post_card",outcome="error"}"#,
                1.0,
            ),
            (
                r#"calvin_gateway_tool_calls_total{tool="permission_prompt",outcome="cancelled"}"#,
                1.0,
            ),
            (
                r#"calvin_gateway_slack_calls_total{method="chat.postMessage",outcome="rate_limited"}"#,
                1.0,
            ),
            (
                r#"calvin_gateway_slack_calls_total{method="chat.postMessage",outcome="ok"}"#,
                1.0,
            ),
            (
                r#"calvin_gateway_slack_calls_total{method="users.info",outcome="not_found"}"#,
                1.0,
            ),
            ("calvin_gateway_slack_rate_limit_waits_total", 2.0),
            ("calvin_gateway_slack_rate_limit_wait_seconds_total", 3.5),
            ("calvin_gateway_sessions", 1.0),
            ("calvin_gateway_session_registrations_total", 2.0),
            ("calvin_gateway_socket_mode_connects_total", 1.0),
            (r#"calvin_gateway_slack_events_total{kind="reaction"}"#, 1.0),
            ("calvin_gateway_slack_event_redeliveries_total", 1.0),
            (
                r#"calvin_gateway_mattermost_websocket_connects_total{how="new"}"#,
                1.0,
            ),
            (
                r#"calvin_gateway_mattermost_websocket_connects_total{how="resumed"}"#,
                2.0,
            ),
            (
                r#"calvin_gateway_mattermost_events_total{kind="message"}"#,
                1.0,
            ),
            (
                r#"calvin_gateway_mattermost_callbacks_total{route="dialog",outcome="kept_open"}"#,
                1.0,
            ),
        ] {
            let got = value(&text, series).unwrap_or_else(|| panic!("no {series} in\n{text}"));
            assert!((got - want).abs() < 1e-9, "{series}: {got}, not {want}");
        }
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn slack_error_codes_fall_in_their_class() {
        for (code, class) in [
            ("invalid_auth", SlackOutcome::AuthError),
            ("missing_scope", SlackOutcome::AuthError),
            ("channel_not_found", SlackOutcome::NotFound),
            ("ratelimited", SlackOutcome::RateLimited),
            ("not_in_channel", SlackOutcome::ApiError),
            ("already_reacted", SlackOutcome::ApiError),
        ] {
            assert_eq!(SlackOutcome::of_code(code), class, "{code}");
        }
    }
}
