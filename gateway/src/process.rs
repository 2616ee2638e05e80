//! A gateway put together from its configuration, for the process it runs
//! in: the one place that decides where request_secret's button and form
//! are handled, and where prompts hear their reactions (they arrive as
//! Slack events, which only the `serve` daemon receives).

use crate::metrics::Metrics;
use std::sync::Arc;

use anyhow::Context;

use crate::config::{ChatConfig, GatewayConfig};
use crate::daemon_client::DaemonClient;
use crate::decisions::ReactionRoute;
use crate::events::EventHub;
use crate::mattermost::{
    self, backend::MattermostSettings, events::EventsConfig, sign::CallbackKey,
};
use crate::permalink::ChannelId;
use crate::secret_request::SecretRequests;
use crate::secrets::SecretStore;
use crate::slack;
use crate::socket_mode::SocketModeConfig;
use crate::tools::{Gateway, SecretRoute};
use crate::workspace::Workspace;

/// Which process this is.
pub enum Process {
    /// `calvin-gateway mcp`: one session over stdio.
    Stdio,
    /// `calvin-gateway serve`: the daemon.
    Daemon,
}

/// The gateway, and (in a daemon with an app token) what Socket Mode
/// needs to start.
pub struct Assembled {
    pub gateway: Arc<Gateway>,
    pub events: Option<Events>,
}

/// The platform's events for a daemon: the hub routing them, and what
/// brings them.
pub struct Events {
    pub hub: Arc<EventHub>,
    pub source: EventSource,
}

/// Where a daemon's events come from.
pub enum EventSource {
    /// Slack's Socket Mode.
    SocketMode(SocketModeConfig),
    /// Mattermost's WebSocket, and (with `[mattermost] callback_url`) the
    /// listener its buttons' and dialogs' callbacks reach.
    Mattermost(Box<MattermostSource>),
}

/// Mattermost's WebSocket, and the callback listener's address and key.
pub struct MattermostSource {
    pub events: EventsConfig,
    pub callbacks: Option<(std::net::SocketAddr, CallbackKey)>,
}

const DAEMON_WITHOUT_EVENTS: &str = "no secret was requested: this calvin-gateway serve daemon \
     does not receive Slack's events (the button click and the form); set [slack] app_token or \
     SLACK_APP_TOKEN so it connects with Socket Mode";

const STDIO_WITHOUT_DAEMON: &str = "no secret was requested: request_secret needs the chat's \
     events (the button click and the form), which only the calvin-gateway serve daemon receives; set \
     [daemon] url in gateway.toml to its address (its token comes from [daemon] token_file or \
     CALVIN_DAEMON_TOKEN)";

const DAEMON_HEARS_NOTHING: &str = "this calvin-gateway serve daemon does not receive Slack's \
     events, so no reaction can answer a prompt; set [slack] app_token or SLACK_APP_TOKEN so it \
     connects with Socket Mode";

const STDIO_HEARS_NOTHING: &str = "a prompt is answered with a reaction in the chat, which only \
     the calvin-gateway serve daemon receives; set [daemon] url in gateway.toml to its address";

const MATTERMOST_WITHOUT_CALLBACKS: &str = "no secret was requested: request_secret's button and \
     form reach this daemon through Mattermost's integration callbacks; set [mattermost] \
     callback_url to an address Mattermost can POST to that reaches [mattermost] callback_listen \
     (directly, or through a calvin preview of that port)";

/// Prompts remembered (update_own_post refuses to edit them).
const REMEMBERED_PROMPTS: usize = 10_000;

/// The gateway `config` describes, for `process`.
pub fn assemble(
    config: &GatewayConfig,
    process: Process,
    metrics: &Metrics,
) -> anyhow::Result<Assembled> {
    let platform = config.chat()?;
    let chat = match &platform {
        ChatConfig::Slack(slack) => slack::backend_counted(
            &slack.api_url,
            config.bot_token()?,
            config.user_token(),
            metrics.clone(),
        )
        .context("the Slack client")?,
        ChatConfig::Mattermost(mm) => {
            let token = config.mattermost_token()?;
            let settings = MattermostSettings {
                url: mattermost::site_url(&mm.url).map_err(anyhow::Error::msg)?,
                token: token.clone(),
                channel: mm.channel.clone(),
                callback_url: mm
                    .callback_url
                    .as_deref()
                    .map(mattermost::callback_url)
                    .transpose()
                    .map_err(anyhow::Error::msg)?,
                key: CallbackKey::from_token(&token),
            };
            mattermost::backend::backend(settings, metrics.clone())
                .context("the Mattermost client")?
        }
    };
    let secrets = SecretStore::from_env(&config.store_dir()).context("the secret store")?;
    let workspace = Workspace::from_config(&config.workspace, &config.dir)
        .map_err(|e| anyhow::anyhow!("[workspace]: {e}"))?
        .map(Arc::new);
    let code_channels = config
        .spawn
        .code_channels
        .iter()
        .map(|c| ChannelId::parse(config.platform(), c).map_err(anyhow::Error::msg))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let runtime_dir = config.runtime_dir();
    let mut events = None;
    let mut reactions = ReactionRoute::Nowhere(match process {
        Process::Daemon => DAEMON_HEARS_NOTHING.into(),
        Process::Stdio => STDIO_HEARS_NOTHING.into(),
    });
    // A daemon that hears the platform: the secret flow, and the hub that
    // routes events to it and to the prompts.
    let hearing = || {
        let requests = Arc::new(SecretRequests::new(
            chat.clone(),
            secrets.clone(),
            runtime_dir.clone(),
        ));
        let hub = Arc::new(EventHub::new(requests.clone()));
        (requests, hub)
    };
    let secret_route = match (process, &platform) {
        (Process::Daemon, ChatConfig::Mattermost(mm)) => {
            let token = config.mattermost_token()?;
            let (requests, hub) = hearing();
            reactions = ReactionRoute::Here(hub.clone());
            let site = mattermost::site_url(&mm.url).map_err(anyhow::Error::msg)?;
            let mut events_config = EventsConfig::new(site, token.clone());
            events_config.backoff_max = std::time::Duration::from_secs(mm.reconnect_secs);
            events_config.backoff_min = events_config.backoff_min.min(events_config.backoff_max);
            let callbacks = mm
                .callback_url
                .as_ref()
                .map(|_| (mm.callback_listen, CallbackKey::from_token(&token)));
            events = Some(Events {
                hub,
                source: EventSource::Mattermost(Box::new(MattermostSource {
                    events: events_config,
                    callbacks,
                })),
            });
            match mm.callback_url {
                Some(_) => SecretRoute::Here(requests),
                None => SecretRoute::Nowhere(MATTERMOST_WITHOUT_CALLBACKS.into()),
            }
        }
        (Process::Daemon, ChatConfig::Slack(slack)) => match config.app_token() {
            Some(app_token) => {
                let (requests, hub) = hearing();
                reactions = ReactionRoute::Here(hub.clone());
                events = Some(Events {
                    hub,
                    source: EventSource::SocketMode(SocketModeConfig {
                        api_url: slack.api_url.clone(),
                        app_token,
                        connections: slack.socket_connections,
                        reconnect_secs: slack.reconnect_secs,
                    }),
                });
                SecretRoute::Here(requests)
            }
            None => SecretRoute::Nowhere(DAEMON_WITHOUT_EVENTS.into()),
        },
        (Process::Stdio, _) => match config.daemon()? {
            Some((url, token)) => {
                let daemon = DaemonClient::new(url, token);
                reactions = ReactionRoute::Daemon(Box::new(daemon.clone()));
                SecretRoute::Daemon(Box::new(daemon))
            }
            None => SecretRoute::Nowhere(STDIO_WITHOUT_DAEMON.into()),
        },
    };
    let gateway = Gateway {
        mode: config.mode,
        agent_socket: config.agent_socket.clone(),
        chat,
        uploads_enabled: config.uploads.enabled,
        max_upload_bytes: config.uploads.max_bytes,
        secrets,
        workspace,
        launcher: config.launcher.clone(),
        code_channels,
        runtime_dir,
        secret_route,
        permissions: config.permissions.clone(),
        reactions,
        prompts: std::sync::Mutex::new(crate::events::Remembered::new(REMEMBERED_PROMPTS)),
    };
    Ok(Assembled {
        gateway: Arc::new(gateway),
        events,
    })
}
