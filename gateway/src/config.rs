//! `gateway.toml`.
//!
//! ```toml
//! mode = "hosted"                  # "one-machine" | "self-hosted" | "hosted"
//! agent_socket = "/run/user/1000/calvin/agent.sock"   # hosted: the calvin agent's control socket
//!
//! [slack]                          # the chat platform: [slack] or [mattermost], exactly one
//! api_url = "https://slack.com/api/"       # the default
//! # bot_token = "xoxb-..."                 # or the environment's SLACK_BOT_TOKEN
//! # app_token = "xapp-..."                 # or SLACK_APP_TOKEN: Socket Mode (`serve` only)
//! # socket_connections = 2                 # Socket Mode WebSockets held open (1..10)
//! # reconnect_secs = 5                     # wait between failed Socket Mode connects (1..300)
//! # user_token = "xoxp-..."                # or SLACK_USER_TOKEN: search_messages (search:read)
//!
//! # [mattermost]                   # instead of [slack]
//! # url = "https://chat.example.com"       # the site URL (plain http only to a loopback host)
//! # token = "..."                          # or MATTERMOST_TOKEN: the bot account's access token
//! # channel = "<26-character id>"          # the bot's channel: its team is the one searched and linked
//! # callback_url = "https://mm-hooks.example.com"  # where Mattermost POSTs button clicks and dialogs (`serve`)
//! # callback_listen = "127.0.0.1:8766"     # what callback_url reaches: the daemon's callback listener
//! # reconnect_secs = 30                    # the longest wait between WebSocket reconnects (1..300)
//!
//! [permissions]                    # permission_prompt and send_dm's first DM
//! allow_users = []                 # Slack user ids whose reactions decide, besides the session's owner
//! timeout_secs = 120               # no decision by then: denied (1..86400)
//! decision_timeout_secs = 3600     # a plan or a question (the decision bridge; 1..86400)
//!
//! [daemon]                         # `mcp`: the `serve` daemon that receives the chat's events
//! # url = "http://127.0.0.1:8765"
//! # token_file = "/home/me/.local/state/calvin/gateway.token"   # default: the daemon's; or CALVIN_DAEMON_TOKEN
//!
//! [uploads]
//! enabled = true                   # false: send_file refuses, and says so
//! max_bytes = 104857600            # 100 MiB, the most
//!
//! [secrets]                        # request_secret's store, encrypted with the environment's SP_STORE_KEY
//! # store_dir = "/var/lib/calvin-gateway/secrets"   # default $XDG_STATE_HOME/calvin/secrets, else ~/.local/state/calvin/secrets (made 0700)
//! # runtime_dir = "/run/user/1000/calvin/sessions"   # the sessions' env files (BASH_ENV); default $XDG_RUNTIME_DIR/calvin/sessions, else ~/.local/state/calvin/sessions
//!
//! [spawn]
//! code_channels = []               # spawn_thread from these posts into the owner's DM
//!
//! [launcher]                       # spawn_thread starts sessions with this (no shell)
//! # The coding CLI gives up on a tool call after its own MCP timeout (about 2 minutes): the
//! # launcher gets MCP_TOOL_TIMEOUT = (decision_timeout_secs + 60) * 1000 to start it with, unless
//! # env names MCP_TOOL_TIMEOUT and the gateway's environment has it (that value goes instead).
//! command = ["start-session", "--channel", "{channel}", "--thread-ts", "{thread_ts}"]
//! timeout_secs = 30                # 1..600
//! env = []                         # variables passed besides PATH, HOME, LANG, ... (never SP_STORE_KEY unless named)
//!
//! [workspace]                      # checkout_repo's definition
//! # file = "workspace.toml"        # [[repos]] entries; or inline:
//! # cache_dir = "repos"           # relative to this file's folder; default ~/.local/state/calvin/repos
//! # [[workspace.repos]]
//! # name = "web"
//! # url = "https://github.com/acme/web.git"
//! # published = true
//!
//! [serve]                          # calvin-gateway serve
//! listen = "127.0.0.1:8765"        # loopback only
//! allowed_origins = []             # browser origins allowed besides loopback ones
//! # token_file = "/home/me/.local/state/calvin/gateway.token"   # registering a session needs it; made (0600) if missing; default ~/.local/state/calvin/gateway.token
//! # metrics = "127.0.0.1:9181"     # GET /metrics for Prometheus (see `metrics`); "" or absent: none
//! ```
//!
//! Paths are full paths (`~` and `$VARIABLES` are not expanded), but for
//! `[workspace]`'s, which start in this file's folder. `calvin-gateway
//! check-config` names every problem ([`crate::check_config`]).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use calvin_common::config_check::out_of_range;
use serde::{Deserialize, Deserializer};

use crate::chat::Platform;
use crate::secrets::StoreDir;
use crate::workspace::WorkspaceConfig;

/// Which tools exist and which refuse (the spec's availability table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// `npm start` on one machine: no tunnel, no thread tools.
    OneMachine,
    /// A team's own gateway and host: the tunnel is off.
    SelfHosted,
    /// Everything.
    Hosted,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::OneMachine => "one-machine",
            Mode::SelfHosted => "self-hosted",
            Mode::Hosted => "hosted",
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewayConfig {
    pub mode: Mode,
    #[serde(default)]
    pub agent_socket: Option<PathBuf>,
    /// The chat platform: exactly one of `[slack]` and `[mattermost]`.
    #[serde(default)]
    pub slack: Option<SlackConfig>,
    #[serde(default)]
    pub mattermost: Option<MattermostConfig>,
    #[serde(default)]
    pub uploads: UploadsConfig,
    #[serde(default)]
    pub secrets: SecretsConfig,
    #[serde(default)]
    pub serve: ServeConfig,
    #[serde(default)]
    pub daemon: DaemonConfig,
    #[serde(default)]
    pub spawn: SpawnConfig,
    #[serde(default)]
    pub launcher: LauncherConfig,
    #[serde(default)]
    pub workspace: WorkspaceConfig,
    #[serde(default)]
    pub permissions: PermissionsConfig,
    /// The folder of the file this was read from (relative paths in it
    /// start there).
    #[serde(skip)]
    pub dir: PathBuf,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SlackConfig {
    pub api_url: String,
    pub bot_token: Option<String>,
    /// The app-level token (`xapp-...`) Socket Mode connects with.
    pub app_token: Option<String>,
    /// How many Socket Mode WebSockets the daemon keeps open (Slack
    /// allows 10; each event arrives on one of them).
    pub socket_connections: u32,
    /// How long to wait after a failed Socket Mode connect.
    pub reconnect_secs: u64,
    /// A person's token (`xoxp-...`) with `search:read`, for
    /// search_messages (Slack's search refuses bot tokens).
    pub user_token: Option<String>,
}

impl Default for SlackConfig {
    fn default() -> Self {
        Self {
            api_url: "https://slack.com/api/".into(),
            bot_token: None,
            app_token: None,
            socket_connections: 2,
            reconnect_secs: 5,
            user_token: None,
        }
    }
}

/// Mattermost, instead of Slack.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MattermostConfig {
    /// The site URL, e.g. `https://chat.example.com` (links start with it).
    pub url: String,
    /// The bot account's access token; else `MATTERMOST_TOKEN`.
    #[serde(default)]
    pub token: Option<String>,
    /// The bot's channel: its team is the one search_messages searches and
    /// the team of the links to direct messages.
    pub channel: String,
    /// Where Mattermost POSTs a button's click and a dialog's submission
    /// (request_secret); it must reach `callback_listen`, directly or
    /// through a tunnel. `None`: request_secret refuses, and says why.
    #[serde(default)]
    pub callback_url: Option<String>,
    /// The `serve` daemon's listener for those callbacks.
    #[serde(default = "default_callback_listen")]
    pub callback_listen: SocketAddr,
    /// The longest wait between WebSocket reconnects (the first is 1 s,
    /// doubling up to this).
    #[serde(default = "default_mm_reconnect")]
    pub reconnect_secs: u64,
}

fn default_callback_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8766))
}

fn default_mm_reconnect() -> u64 {
    30
}

/// Which chat platform a configuration names, and its section.
pub enum ChatConfig<'a> {
    Slack(&'a SlackConfig),
    Mattermost(&'a MattermostConfig),
}

/// Who decides permission prompts, and how long they wait.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PermissionsConfig {
    /// Slack user ids whose reactions decide, besides each session's owner.
    pub allow_users: Vec<String>,
    /// A permission prompt with no decision by then is denied.
    pub timeout_secs: u64,
    /// How long a plan or a question waits (the decision bridge).
    pub decision_timeout_secs: u64,
}

impl Default for PermissionsConfig {
    fn default() -> Self {
        Self {
            allow_users: vec![],
            timeout_secs: 120,
            decision_timeout_secs: 3600,
        }
    }
}

/// Where a stdio gateway finds the `serve` daemon that receives Slack's
/// events.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DaemonConfig {
    pub url: Option<String>,
    pub token_file: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SpawnConfig {
    /// Channels whose spawned threads go to the owner's DM instead.
    pub code_channels: Vec<String>,
}

/// How spawn_thread starts a session: an argv template.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LauncherConfig {
    pub command: Vec<String>,
    pub timeout_secs: u64,
    /// Variables of the gateway's environment passed to the launcher
    /// besides the few every program needs (it never sees the others:
    /// SP_STORE_KEY and the Slack tokens stay in the gateway).
    pub env: Vec<String>,
}

impl Default for LauncherConfig {
    fn default() -> Self {
        Self {
            command: vec![],
            timeout_secs: 30,
            env: vec![],
        }
    }
}

/// The longest a prompt may wait for its decision: a day.
pub const MAX_DECISION_SECS: u64 = 86_400;

const BOTH_PLATFORMS: &str = "both [slack] and [mattermost] are set: a gateway serves one chat \
     platform; keep the section of the one this gateway serves";
const NO_PLATFORM: &str = "no chat platform: add a [slack] section (its tokens may come from \
     SLACK_BOT_TOKEN and SLACK_APP_TOKEN) or a [mattermost] section (url, channel; the token may \
     come from MATTERMOST_TOKEN)";

/// The placeholders a launcher template may use.
pub const LAUNCHER_PLACEHOLDERS: [&str; 7] = [
    "channel",
    "thread_ts",
    "owner",
    "model",
    "permission_mode",
    "brief",
    "task",
];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UploadsConfig {
    pub enabled: bool,
    pub max_bytes: u64,
}

/// The spec's send_file limit: 100 MiB.
pub const DEFAULT_MAX_UPLOAD: u64 = 100 << 20;

impl Default for UploadsConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            max_bytes: DEFAULT_MAX_UPLOAD,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SecretsConfig {
    /// The secret store's folder; the default is [`GatewayConfig::store_dir`]'s.
    pub store_dir: Option<PathBuf>,
    /// Where each session's env file (its secrets, for BASH_ENV) is kept
    /// by default: `$XDG_RUNTIME_DIR/calvin/sessions`, else
    /// `~/.local/state/calvin/sessions`.
    pub runtime_dir: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServeConfig {
    pub listen: SocketAddr,
    pub allowed_origins: Vec<String>,
    pub token_file: Option<PathBuf>,
    /// Where `GET /metrics` is served ([`crate::metrics`]); `""`, or no
    /// key, serves none.
    #[serde(deserialize_with = "optional_addr")]
    pub metrics: Option<SocketAddr>,
}

impl Default for ServeConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8765)),
            allowed_origins: vec![],
            token_file: None,
            metrics: None,
        }
    }
}

/// An address, or `""` for none.
fn optional_addr<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SocketAddr>, D::Error> {
    let s = String::deserialize(d)?;
    if s.is_empty() {
        return Ok(None);
    }
    s.parse().map(Some).map_err(|_| {
        serde::de::Error::custom(format!(
            "{s:?} is not an address: IP:PORT (\"127.0.0.1:9181\", \"[::1]:9181\"), or \"\" for none"
        ))
    })
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Parse {
        path: PathBuf,
        source: toml::de::Error,
    },
    /// Every problem [`GatewayConfig::problems`] found, a line each.
    #[error("{}", list(path, problems))]
    Invalid {
        path: PathBuf,
        problems: Vec<(String, String)>,
    },
    #[error("no Slack bot token: set [slack] bot_token or SLACK_BOT_TOKEN")]
    NoToken,
    #[error("no Mattermost token: set [mattermost] token or MATTERMOST_TOKEN")]
    NoMattermostToken,
    #[error("{0}")]
    Platform(&'static str),
    #[error("the registration token {path}: {source}")]
    TokenFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("[daemon] url = {0}")]
    DaemonUrl(String),
    #[error("no token for the daemon at {url}: {reason}")]
    DaemonToken { url: String, reason: String },
}

/// `FILE: key: message`, a line each.
fn list(path: &Path, problems: &[(String, String)]) -> String {
    problems
        .iter()
        .map(|(key, message)| format!("{}: {key}: {message}", path.display()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The longest wait between failed Socket Mode connects: 5 minutes.
pub const MAX_RECONNECT_SECS: u64 = 300;
/// The longest spawn_thread waits for its launcher: 10 minutes.
pub const MAX_LAUNCH_SECS: u64 = 600;
/// Slack's most Socket Mode connections for an app.
pub const MAX_SOCKET_CONNECTIONS: u64 = 10;

/// A bounded value's dotted key in gateway.toml, its value, and its least
/// and most.
pub type Bounded = (&'static str, u64, u64, u64);

impl GatewayConfig {
    /// The configuration at `path`, refused with every problem
    /// [`problems`](Self::problems) finds (serde's first error alone: see
    /// `check_config` for every one, and the files it names).
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let mut config: GatewayConfig =
            toml::from_str(&text).map_err(|source| ConfigError::Parse {
                path: path.to_owned(),
                source,
            })?;
        config.dir = Self::dir_of(path);
        let problems = config.problems();
        if !problems.is_empty() {
            return Err(ConfigError::Invalid {
                path: path.to_owned(),
                problems,
            });
        }
        Ok(config)
    }

    /// The folder of gateway.toml at `path`: relative paths in it start
    /// there.
    pub fn dir_of(path: &Path) -> PathBuf {
        std::path::absolute(path)
            .ok()
            .and_then(|p| p.parent().map(Path::to_owned))
            .unwrap_or_default()
    }

    /// Every bounded value: the durations, the connections, the upload
    /// size.
    pub fn bounds(&self) -> Vec<Bounded> {
        let mut bounds = Vec::new();
        if let Some(slack) = &self.slack {
            bounds.push((
                "slack.socket_connections",
                slack.socket_connections.into(),
                1,
                MAX_SOCKET_CONNECTIONS,
            ));
            bounds.push((
                "slack.reconnect_secs",
                slack.reconnect_secs,
                1,
                MAX_RECONNECT_SECS,
            ));
        }
        if let Some(mm) = &self.mattermost {
            bounds.push((
                "mattermost.reconnect_secs",
                mm.reconnect_secs,
                1,
                MAX_RECONNECT_SECS,
            ));
        }
        bounds.extend([
            (
                "permissions.timeout_secs",
                self.permissions.timeout_secs,
                1,
                MAX_DECISION_SECS,
            ),
            (
                "permissions.decision_timeout_secs",
                self.permissions.decision_timeout_secs,
                1,
                MAX_DECISION_SECS,
            ),
            (
                "launcher.timeout_secs",
                self.launcher.timeout_secs,
                1,
                MAX_LAUNCH_SECS,
            ),
            (
                "uploads.max_bytes",
                self.uploads.max_bytes,
                1,
                DEFAULT_MAX_UPLOAD,
            ),
        ]);
        bounds
    }

    /// The chat platform's section, or why there is none to choose.
    pub fn chat(&self) -> Result<ChatConfig<'_>, ConfigError> {
        match (&self.slack, &self.mattermost) {
            (Some(slack), None) => Ok(ChatConfig::Slack(slack)),
            (None, Some(mm)) => Ok(ChatConfig::Mattermost(mm)),
            (Some(_), Some(_)) => Err(ConfigError::Platform(BOTH_PLATFORMS)),
            (None, None) => Err(ConfigError::Platform(NO_PLATFORM)),
        }
    }

    /// The chat platform, for the syntax of ids (Slack when the file names
    /// none: its problem is reported on its own).
    pub fn platform(&self) -> Platform {
        match self.chat() {
            Ok(ChatConfig::Mattermost(_)) => Platform::Mattermost,
            _ => Platform::Slack,
        }
    }

    /// Every value that would break the gateway: its dotted key and what is
    /// wrong with it. (The files it names are `check_config`'s.)
    pub fn problems(&self) -> Vec<(String, String)> {
        let platform = self.platform();
        let mut problems = Vec::new();
        let mut add = |key: String, message: String| problems.push((key, message));
        if self.mode == Mode::Hosted && self.agent_socket.is_none() {
            add(
                "mode".into(),
                "mode = \"hosted\" needs agent_socket: the calvin agent's control socket".into(),
            );
        }
        for (key, value, min, max) in self.bounds() {
            let name = key.rsplit('.').next().unwrap_or(key);
            if let Some(problem) = out_of_range(name, value, min, max) {
                add(key.into(), problem);
            }
        }
        if !self.serve.listen.ip().is_loopback() {
            add(
                "serve.listen".into(),
                format!(
                    "{}: the gateway daemon listens on loopback only",
                    self.serve.listen
                ),
            );
        }
        if let Some(metrics) = self.serve.metrics
            && metrics == self.serve.listen
            && metrics.port() != 0
        {
            add(
                "serve.metrics".into(),
                format!("{metrics} is serve.listen's address: give /metrics a port of its own"),
            );
        }
        if let Err(ConfigError::Platform(why)) = self.chat() {
            let key = if self.slack.is_some() {
                "mattermost"
            } else {
                "slack"
            };
            add(key.into(), why.into());
        }
        if let Some(mm) = &self.mattermost {
            if let Err(e) = crate::mattermost::site_url(&mm.url) {
                add("mattermost.url".into(), e);
            }
            if let Err(e) = Platform::Mattermost.check_channel_id(&mm.channel) {
                add("mattermost.channel".into(), e);
            }
            if let Some(url) = &mm.callback_url
                && let Err(e) = crate::mattermost::callback_url(url)
            {
                add("mattermost.callback_url".into(), e);
            }
        }
        if let Err(e) = check_launcher(&self.launcher.command) {
            add("launcher.command".into(), e);
        }
        for (i, channel) in self.spawn.code_channels.iter().enumerate() {
            if let Err(e) = platform.check_channel_id(channel) {
                add(format!("spawn.code_channels[{i}]"), e);
            }
        }
        if let Some(url) = &self.daemon.url
            && let Err(e) = daemon_url(url)
        {
            add("daemon.url".into(), e);
        }
        for (i, user) in self.permissions.allow_users.iter().enumerate() {
            if let Err(e) = platform.check_user_id(user) {
                add(format!("permissions.allow_users[{i}]"), e);
            }
        }
        problems
    }

    /// The user token for search: from the file, else `SLACK_USER_TOKEN`.
    pub fn user_token(&self) -> Option<String> {
        self.slack
            .as_ref()?
            .user_token
            .clone()
            .or_else(|| std::env::var("SLACK_USER_TOKEN").ok())
            .filter(|t| !t.trim().is_empty())
    }

    /// The daemon's registration token file: `[serve] token_file`, else
    /// `~/.local/state/calvin/gateway.token`.
    pub fn token_path(&self) -> PathBuf {
        self.serve.token_file.clone().unwrap_or_else(|| {
            state_dir()
                .unwrap_or_else(std::env::temp_dir)
                .join("calvin/gateway.token")
        })
    }

    /// The daemon a stdio gateway asks for what needs Slack's events: its
    /// base URL and token (`CALVIN_DAEMON_TOKEN`, else `[daemon]
    /// token_file`, else the daemon's default token file). `None` when
    /// `[daemon] url` is not set.
    pub fn daemon(&self) -> Result<Option<(String, String)>, ConfigError> {
        let Some(url) = &self.daemon.url else {
            return Ok(None);
        };
        let url = daemon_url(url).map_err(ConfigError::DaemonUrl)?;
        if let Ok(token) = std::env::var("CALVIN_DAEMON_TOKEN")
            && !token.trim().is_empty()
        {
            return Ok(Some((url, token.trim().to_owned())));
        }
        let path = self
            .daemon
            .token_file
            .clone()
            .unwrap_or_else(|| self.token_path());
        match read_token(&path) {
            Ok(Some(token)) => Ok(Some((url, token))),
            Ok(None) => Err(ConfigError::DaemonToken {
                url,
                reason: format!("{} is empty", path.display()),
            }),
            Err(e) => Err(ConfigError::DaemonToken {
                url,
                reason: format!(
                    "cannot read {} ({e}); set [daemon] token_file or CALVIN_DAEMON_TOKEN",
                    path.display()
                ),
            }),
        }
    }

    /// The app-level token for Socket Mode: from the file, else
    /// `SLACK_APP_TOKEN`; `None` when neither is set.
    pub fn app_token(&self) -> Option<String> {
        self.slack
            .as_ref()?
            .app_token
            .clone()
            .or_else(|| std::env::var("SLACK_APP_TOKEN").ok())
            .filter(|t| !t.trim().is_empty())
    }

    /// The secret store's folder: `[secrets] store_dir`, else
    /// `$XDG_STATE_HOME/calvin/secrets`, else `~/.local/state/calvin/secrets`.
    pub fn store_dir(&self) -> StoreDir {
        match &self.secrets.store_dir {
            Some(dir) => StoreDir::Configured(dir.clone()),
            None => StoreDir::Default(state_dir().map(|state| state.join("calvin/secrets"))),
        }
    }

    /// The folder of the sessions' env files.
    pub fn runtime_dir(&self) -> PathBuf {
        if let Some(dir) = &self.secrets.runtime_dir {
            return dir.clone();
        }
        // Not the temp directory: another user could make the folder
        // first, and send_file may send from there.
        dirs::runtime_dir()
            .or_else(state_dir)
            .unwrap_or_else(|| PathBuf::from("/nonexistent"))
            .join("calvin/sessions")
    }

    /// The daemon's registration token and its file: read, or made (256
    /// random bits, 0600) when missing.
    pub fn registration_token(&self) -> Result<(PathBuf, String), ConfigError> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let path = self.token_path();
        let io = |source| ConfigError::TokenFile {
            path: path.clone(),
            source,
        };
        match read_token(&path) {
            Ok(Some(token)) => return Ok((path.clone(), token)),
            Ok(None) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(e)),
        }
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let token = crate::random_id::random_hex::<32>();
        let _ = std::fs::remove_file(&path);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(io)?;
        file.write_all(format!("{token}\n").as_bytes())
            .map_err(io)?;
        Ok((path, token))
    }

    /// The bot token: from the file, else `SLACK_BOT_TOKEN`.
    pub fn bot_token(&self) -> Result<String, ConfigError> {
        self.slack
            .as_ref()
            .and_then(|s| s.bot_token.clone())
            .or_else(|| std::env::var("SLACK_BOT_TOKEN").ok())
            .filter(|t| !t.is_empty())
            .ok_or(ConfigError::NoToken)
    }

    /// The Mattermost bot's token: from the file, else `MATTERMOST_TOKEN`.
    pub fn mattermost_token(&self) -> Result<String, ConfigError> {
        self.mattermost
            .as_ref()
            .and_then(|m| m.token.clone())
            .or_else(|| std::env::var("MATTERMOST_TOKEN").ok())
            .map(|t| t.trim().to_owned())
            .filter(|t| !t.is_empty())
            .ok_or(ConfigError::NoMattermostToken)
    }
}

/// The user's state folder: `$XDG_STATE_HOME`, else `~/.local/state`.
fn state_dir() -> Option<PathBuf> {
    dirs::state_dir().or_else(|| dirs::home_dir().map(|h| h.join(".local/state")))
}

/// The token in `path` (surrounding whitespace dropped); `None` when the
/// file is empty.
fn read_token(path: &Path) -> std::io::Result<Option<String>> {
    let text = std::fs::read_to_string(path)?;
    let token = text.trim();
    Ok((!token.is_empty()).then(|| token.to_owned()))
}

/// A launcher template: a program and its arguments, each placeholder one
/// of [`LAUNCHER_PLACEHOLDERS`].
fn check_launcher(command: &[String]) -> Result<(), String> {
    if command.first().is_some_and(|p| p.trim().is_empty()) {
        return Err("the program (the first element) is empty".into());
    }
    for arg in command {
        for piece in pieces(arg)? {
            if let Piece::Placeholder(name) = piece
                && !LAUNCHER_PLACEHOLDERS.contains(&name)
            {
                return Err(format!(
                    "{arg:?}: unknown placeholder {{{name}}} (known: {})",
                    LAUNCHER_PLACEHOLDERS
                        .iter()
                        .map(|p| format!("{{{p}}}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        }
    }
    Ok(())
}

/// A piece of a launcher argument.
#[derive(Debug, PartialEq, Eq)]
pub enum Piece<'a> {
    Text(&'a str),
    /// `{name}`: the name.
    Placeholder(&'a str),
}

/// A launcher argument cut into text and `{placeholders}`; a `{` without
/// its `}` is refused.
pub fn pieces(arg: &str) -> Result<Vec<Piece<'_>>, String> {
    let mut out = Vec::new();
    let mut rest = arg;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        let close = after
            .find('}')
            .ok_or_else(|| format!("{arg:?} has a '{{' without its '}}'"))?;
        out.push(Piece::Text(&rest[..open]));
        out.push(Piece::Placeholder(&after[..close]));
        rest = &after[close + 1..];
    }
    out.push(Piece::Text(rest));
    Ok(out)
}

/// `[daemon] url`: plain http to a loopback address, without a trailing
/// slash.
fn daemon_url(url: &str) -> Result<String, String> {
    let bad = || format!("{url:?}: the daemon is reached over plain http on loopback only");
    let uri: http::Uri = url.parse().map_err(|_| bad())?;
    let host = uri.host().ok_or_else(bad)?;
    if uri.scheme_str() != Some("http") || !crate::slack::is_loopback(host) {
        return Err(bad());
    }
    Ok(url.trim_end_matches('/').to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_and_defaults() {
        let c: GatewayConfig = toml::from_str("mode = \"self-hosted\"").unwrap();
        assert_eq!(c.mode, Mode::SelfHosted);
        assert!(c.uploads.enabled);
        assert_eq!(c.uploads.max_bytes, 100 * 1024 * 1024);
        assert_eq!(c.serve.listen, "127.0.0.1:8765".parse().unwrap());
        let err = toml::from_str::<GatewayConfig>("mode = \"cloud\"").unwrap_err();
        assert!(err.to_string().contains("one-machine"), "{err}");
        let err = toml::from_str::<GatewayConfig>("mode = \"hosted\"\nagent = 1").unwrap_err();
        assert!(err.to_string().contains("unknown field `agent`"), "{err}");
    }

    /// Every problem of `text`, `key: message` a line each (with an empty
    /// `[slack]` when it names no platform).
    fn check(text: &str) -> Result<(), String> {
        let text = if text.contains("[slack]") || text.contains("[mattermost]") {
            text.to_owned()
        } else {
            format!("{text}\n[slack]\n")
        };
        let c: GatewayConfig = toml::from_str(&text).map_err(|e| e.to_string())?;
        let problems = c.problems();
        if problems.is_empty() {
            return Ok(());
        }
        Err(problems
            .iter()
            .map(|(key, message)| format!("{key}: {message}"))
            .collect::<Vec<_>>()
            .join("\n"))
    }

    #[test]
    fn one_chat_platform_exactly() {
        let mm = "[mattermost]\nurl = \"https://chat.example.com\"\nchannel = \"ybndrfg8ejkmcpqxot1uwisza3\"\n";
        let parse = |text: &str| toml::from_str::<GatewayConfig>(text).unwrap();
        let both = parse(&format!("mode = \"self-hosted\"\n[slack]\n{mm}"));
        assert_eq!(
            both.problems(),
            [("mattermost".to_owned(), BOTH_PLATFORMS.to_owned())]
        );
        assert!(both.chat().is_err());
        let neither = parse("mode = \"self-hosted\"\n");
        assert_eq!(
            neither.problems(),
            [("slack".to_owned(), NO_PLATFORM.to_owned())]
        );
        let slack = parse("mode = \"self-hosted\"\n[slack]\n");
        assert!(matches!(slack.chat(), Ok(ChatConfig::Slack(_))));
        assert_eq!(slack.platform(), Platform::Slack);
        let only_mm = parse(&format!("mode = \"self-hosted\"\n{mm}"));
        assert!(matches!(only_mm.chat(), Ok(ChatConfig::Mattermost(_))));
        assert_eq!(only_mm.platform(), Platform::Mattermost);
        assert_eq!(only_mm.problems(), vec![]);
        let m = only_mm.mattermost.as_ref().unwrap();
        assert_eq!(m.callback_listen, "127.0.0.1:8766".parse().unwrap());
        assert_eq!(m.reconnect_secs, 30);
        assert_eq!(m.callback_url, None);
        // Its values, each checked.
        let bad = parse(
            "mode = \"self-hosted\"\n[mattermost]\nurl = \"http://chat.example.com\"\nchannel = \"C0123\"\ncallback_url = \"nowhere\"\n",
        );
        let keys: Vec<String> = bad.problems().into_iter().map(|p| p.0).collect();
        assert_eq!(
            keys,
            [
                "mattermost.url",
                "mattermost.channel",
                "mattermost.callback_url"
            ]
        );
        // A Mattermost gateway names Mattermost's ids.
        let ids = parse(&format!(
            "mode = \"self-hosted\"\n{mm}[spawn]\ncode_channels = [\"C0123\"]\n[permissions]\nallow_users = [\"U0ANN\", \"ybndrfg8ejkmcpqxot1uwisza3\"]\n"
        ));
        let problems = ids.problems();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert_eq!(problems[0].0, "spawn.code_channels[0]");
        assert!(problems[0].1.contains("not a Mattermost channel id"));
        assert_eq!(problems[1].0, "permissions.allow_users[0]");
        assert!(problems[1].1.contains("not a Mattermost user id"));
        // The token: the file's, else the environment's.
        assert_eq!(
            parse(&format!("mode = \"self-hosted\"\n{mm}token = \" t0k \"\n"))
                .mattermost_token()
                .unwrap(),
            "t0k"
        );
    }

    #[test]
    fn hosted_needs_the_agent() {
        assert_eq!(
            check("mode = \"hosted\"").unwrap_err(),
            "mode: mode = \"hosted\" needs agent_socket: the calvin agent's control socket"
        );
        assert!(check("mode = \"hosted\"\nagent_socket = \"/run/a.sock\"").is_ok());
    }

    /// Each bounded value passes at its bounds and is refused one past
    /// either.
    #[test]
    fn every_bounded_value_is_refused_one_past_its_bounds() {
        const MM: &str = "[mattermost]\nurl = \"https://chat.example.com\"\nchannel = \"ybndrfg8ejkmcpqxot1uwisza3\"\n";
        for (platform, named) in [
            (
                "[slack]\n",
                &[
                    "slack.socket_connections",
                    "slack.reconnect_secs",
                    "permissions.timeout_secs",
                    "permissions.decision_timeout_secs",
                    "launcher.timeout_secs",
                    "uploads.max_bytes",
                ][..],
            ),
            (
                MM,
                &[
                    "mattermost.reconnect_secs",
                    "permissions.timeout_secs",
                    "permissions.decision_timeout_secs",
                    "launcher.timeout_secs",
                    "uploads.max_bytes",
                ][..],
            ),
        ] {
            let c: GatewayConfig =
                toml::from_str(&format!("mode = \"one-machine\"\n{platform}")).unwrap();
            assert_eq!(c.problems(), vec![]);
            let keys: Vec<_> = c.bounds().iter().map(|b| b.0).collect();
            assert_eq!(keys, named);
            for (key, _, min, max) in c.bounds() {
                let (table, name) = key.split_once('.').unwrap();
                let with = |value: u64| {
                    let line = format!("{name} = {value}\n");
                    let text = if platform.starts_with(&format!("[{table}]")) {
                        format!("mode = \"one-machine\"\n{platform}{line}")
                    } else {
                        format!("mode = \"one-machine\"\n{platform}[{table}]\n{line}")
                    };
                    check(&text)
                };
                assert_eq!(with(min), Ok(()), "{key} = {min}");
                assert_eq!(with(max), Ok(()), "{key} = {max}");
                for past in [min - 1, max + 1] {
                    assert_eq!(
                        with(past),
                        Err(format!(
                            "{key}: {name} must be from {min} to {max}, got {past}"
                        ))
                    );
                }
            }
        }
        assert_eq!(
            check(&format!(
                "mode = \"one-machine\"\n[uploads]\nmax_bytes = {}",
                DEFAULT_MAX_UPLOAD + 1
            ))
            .unwrap_err(),
            "uploads.max_bytes: max_bytes must be from 1 to 104857600, got 104857601"
        );
    }

    /// `load` names every problem, not the first.
    #[test]
    fn load_names_every_problem() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gateway.toml");
        std::fs::write(
            &path,
            "mode = \"hosted\"\n[slack]\nreconnect_secs = 0\n[serve]\nlisten = \"0.0.0.0:1\"\n",
        )
        .unwrap();
        let err = GatewayConfig::load(&path).unwrap_err().to_string();
        let at = path.display();
        assert_eq!(
            err,
            format!(
                "{at}: mode: mode = \"hosted\" needs agent_socket: the calvin agent's control \
                 socket\n{at}: slack.reconnect_secs: reconnect_secs must be from 1 to 300, got \
                 0\n{at}: serve.listen: 0.0.0.0:1: the gateway daemon listens on loopback only"
            )
        );
    }

    #[test]
    fn metrics_are_served_on_an_address_of_their_own_or_not_at_all() {
        let read = |line: &str| -> Result<GatewayConfig, String> {
            toml::from_str(&format!("mode = \"one-machine\"\n[serve]\n{line}"))
                .map_err(|e| e.message().to_owned())
        };
        assert_eq!(read("").unwrap().serve.metrics, None);
        assert_eq!(read("metrics = \"\"").unwrap().serve.metrics, None);
        assert_eq!(
            read("metrics = \"127.0.0.1:9181\"").unwrap().serve.metrics,
            Some(SocketAddr::from(([127, 0, 0, 1], 9181)))
        );
        assert_eq!(
            read("metrics = \"localhost:9181\"").unwrap_err(),
            "\"localhost:9181\" is not an address: IP:PORT (\"127.0.0.1:9181\", \"[::1]:9181\"), \
             or \"\" for none"
        );
        assert_eq!(
            check("mode = \"one-machine\"\n[serve]\nlisten = \"127.0.0.1:8765\"\nmetrics = \"127.0.0.1:8765\"")
                .unwrap_err(),
            "serve.metrics: 127.0.0.1:8765 is serve.listen's address: give /metrics a port of its own"
        );
        assert_eq!(
            check(
                "mode = \"one-machine\"\n[serve]\nlisten = \"127.0.0.1:0\"\nmetrics = \"127.0.0.1:0\""
            ),
            Ok(())
        );
    }

    #[test]
    fn the_daemon_stays_on_loopback_and_keeps_its_token() {
        assert_eq!(
            check("mode = \"one-machine\"\n[serve]\nlisten = \"0.0.0.0:8765\"").unwrap_err(),
            "serve.listen: 0.0.0.0:8765: the gateway daemon listens on loopback only"
        );
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("t/gateway.token");
        let text = format!(
            "mode = \"one-machine\"\n[serve]\nlisten = \"[::1]:1\"\ntoken_file = \"{}\"",
            file.display()
        );
        assert_eq!(check(&text), Ok(()));
        let c: GatewayConfig = toml::from_str(&text).unwrap();
        let (path, token) = c.registration_token().unwrap();
        assert_eq!(path, file);
        assert_eq!(token.len(), 64);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(
            c.registration_token().unwrap().1,
            token,
            "kept across starts"
        );
    }

    #[test]
    fn permissions_wait_1_s_to_a_day_and_name_user_ids() {
        let with = |key: &str, secs: u64| {
            check(&format!(
                "mode = \"one-machine\"\n[permissions]\n{key} = {secs}"
            ))
        };
        for key in ["timeout_secs", "decision_timeout_secs"] {
            assert!(with(key, 1).is_ok() && with(key, 86_400).is_ok(), "{key}");
            assert_eq!(
                with(key, 86_401).unwrap_err(),
                format!("permissions.{key}: {key} must be from 1 to 86400, got 86401")
            );
            assert!(with(key, 0).is_err(), "{key}");
        }
        let c: GatewayConfig = toml::from_str("mode = \"one-machine\"").unwrap();
        assert_eq!(
            (
                c.permissions.timeout_secs,
                c.permissions.decision_timeout_secs
            ),
            (120, 3600)
        );
        let users = |list: &str| {
            check(&format!(
                "mode = \"one-machine\"\n[permissions]\nallow_users = {list}"
            ))
        };
        assert!(users("[\"U0123ABC\", \"W0ENTERPRISE\"]").is_ok());
        assert_eq!(
            users("[\"U0OK\", \"@ann\", \"bob\"]").unwrap_err(),
            "permissions.allow_users[1]: \"@ann\" is not a Slack user id (U… or W…)\n\
             permissions.allow_users[2]: \"bob\" is not a Slack user id (U… or W…)"
        );
    }

    #[test]
    fn the_launcher_uses_known_placeholders_only() {
        let with = |cmd: &str| {
            check(&format!(
                "mode = \"self-hosted\"\n[launcher]\ncommand = {cmd}"
            ))
        };
        assert!(with(r#"["run", "--c={channel}", "{thread_ts}{owner}", "{model}", "{permission_mode}", "{brief}", "{task}"]"#).is_ok());
        let err = with(r#"["run", "{session}"]"#).unwrap_err();
        assert!(
            err.starts_with("launcher.command: \"{session}\": unknown placeholder {session}"),
            "{err}"
        );
        let err = with(r#"["run", "{channel"]"#).unwrap_err();
        assert!(err.contains("has a '{' without its '}'"), "{err}");
        assert!(
            with(r#"[" "]"#)
                .unwrap_err()
                .contains("the program (the first element) is empty")
        );
    }

    #[test]
    fn the_daemon_is_reached_on_loopback_only() {
        let with = |url: &str| {
            check(&format!(
                "mode = \"self-hosted\"\n[daemon]\nurl = \"{url}\""
            ))
        };
        assert!(with("http://127.0.0.1:8765").is_ok());
        assert!(with("http://[::1]:8765/").is_ok());
        assert!(with("http://localhost:8765").is_ok());
        for bad in [
            "http://10.0.0.1:8765",
            "https://127.0.0.1:8765",
            "not a url",
        ] {
            assert!(with(bad).unwrap_err().contains("loopback only"), "{bad}");
        }
        let code = |ch: &str| {
            check(&format!(
                "mode = \"self-hosted\"\n[spawn]\ncode_channels = [\"{ch}\"]"
            ))
        };
        assert!(code("C0CODE").is_ok());
        assert!(
            code("general")
                .unwrap_err()
                .contains("is in lower case; Slack's ids are upper case (GENERAL)")
        );
        assert!(
            code("#general")
                .unwrap_err()
                .contains("is not a Slack channel id")
        );
    }
}
