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

/// Slack's events for a daemon: the hub routing them, and the listener's
/// settings.
pub struct Events {
    pub hub: Arc<EventHub>,
    pub socket_mode: SocketModeConfig,
}

const DAEMON_WITHOUT_EVENTS: &str = "no secret was requested: this calvin-gateway serve daemon \
     does not receive Slack's events (the button click and the form); set [slack] app_token or \
     SLACK_APP_TOKEN so it connects with Socket Mode";

const STDIO_WITHOUT_DAEMON: &str = "no secret was requested: request_secret needs Slack's events \
     (the button click and the form), which only the calvin-gateway serve daemon receives; set \
     [daemon] url in gateway.toml to its address (its token comes from [daemon] token_file or \
     CALVIN_DAEMON_TOKEN)";

const DAEMON_HEARS_NOTHING: &str = "this calvin-gateway serve daemon does not receive Slack's \
     events, so no reaction can answer a prompt; set [slack] app_token or SLACK_APP_TOKEN so it \
     connects with Socket Mode";

const STDIO_HEARS_NOTHING: &str = "a prompt is answered with a reaction in Slack, which only the \
     calvin-gateway serve daemon receives; set [daemon] url in gateway.toml to its address";

/// Prompts remembered (update_own_post refuses to edit them).
const REMEMBERED_PROMPTS: usize = 10_000;

/// The gateway `config` describes, for `process`.
pub fn assemble(
    config: &GatewayConfig,
    process: Process,
    metrics: &Metrics,
) -> anyhow::Result<Assembled> {
    let slack = match config.chat()? {
        ChatConfig::Slack(slack) => slack,
        ChatConfig::Mattermost(_) => anyhow::bail!("Mattermost: not yet"),
    };
    let chat = slack::backend_counted(
        &slack.api_url,
        config.bot_token()?,
        config.user_token(),
        metrics.clone(),
    )
    .context("the Slack client")?;
    let secrets = match &config.secrets.store_dir {
        Some(dir) => SecretStore::from_env(dir).context("the secret store")?,
        None => None,
    };
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
    let secret_route = match (process, config.app_token()) {
        (Process::Daemon, Some(app_token)) => {
            let requests = Arc::new(SecretRequests::new(
                chat.clone(),
                secrets.clone(),
                runtime_dir.clone(),
            ));
            let hub = Arc::new(EventHub::new(requests.clone()));
            reactions = ReactionRoute::Here(hub.clone());
            events = Some(Events {
                hub,
                socket_mode: SocketModeConfig {
                    api_url: slack.api_url.clone(),
                    app_token,
                    connections: slack.socket_connections,
                    reconnect_secs: slack.reconnect_secs,
                },
            });
            SecretRoute::Here(requests)
        }
        (Process::Daemon, None) => SecretRoute::Nowhere(DAEMON_WITHOUT_EVENTS.into()),
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
