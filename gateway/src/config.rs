//! `gateway.toml`.
//!
//! ```toml
//! mode = "hosted"                  # "one-machine" | "self-hosted" | "hosted"
//! agent_socket = "/run/user/1000/calvin/agent.sock"   # hosted: the calvin agent's control socket
//!
//! [slack]
//! api_url = "https://slack.com/api/"       # the default
//! # bot_token = "xoxb-..."                 # or the environment's SLACK_BOT_TOKEN
//!
//! [uploads]
//! enabled = true                   # false: send_file refuses, and says so
//! max_bytes = 104857600            # 100 MiB
//!
//! [secrets]
//! store_dir = "/var/lib/calvin-gateway/secrets"   # key: the environment's SP_STORE_KEY
//!
//! [serve]                          # calvin-gateway serve
//! listen = "127.0.0.1:8765"        # loopback only
//! allowed_origins = []             # browser origins allowed besides loopback ones
//! # token_file = "~/.local/state/calvin/gateway.token"   # registering a session needs it; made (0600) if missing
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

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
    #[serde(default)]
    pub slack: SlackConfig,
    #[serde(default)]
    pub uploads: UploadsConfig,
    #[serde(default)]
    pub secrets: SecretsConfig,
    #[serde(default)]
    pub serve: ServeConfig,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SlackConfig {
    pub api_url: String,
    pub bot_token: Option<String>,
}

impl Default for SlackConfig {
    fn default() -> Self {
        Self {
            api_url: "https://slack.com/api/".into(),
            bot_token: None,
        }
    }
}

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
    pub store_dir: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServeConfig {
    pub listen: SocketAddr,
    pub allowed_origins: Vec<String>,
    pub token_file: Option<PathBuf>,
}

impl Default for ServeConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8765)),
            allowed_origins: vec![],
            token_file: None,
        }
    }
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
    #[error("mode = \"hosted\" needs agent_socket: the calvin agent's control socket")]
    NoAgentSocket,
    #[error("[uploads] max_bytes must be from 1 to {DEFAULT_MAX_UPLOAD} (100 MiB), got {0}")]
    MaxBytes(u64),
    #[error("no Slack bot token: set [slack] bot_token or SLACK_BOT_TOKEN")]
    NoToken,
    #[error("[serve] listen = {0}: the gateway daemon listens on loopback only")]
    NotLoopback(SocketAddr),
    #[error("the registration token {path}: {source}")]
    TokenFile {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl GatewayConfig {
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let config: GatewayConfig = toml::from_str(&text).map_err(|source| ConfigError::Parse {
            path: path.to_owned(),
            source,
        })?;
        config.check()?;
        Ok(config)
    }

    fn check(&self) -> Result<(), ConfigError> {
        if self.mode == Mode::Hosted && self.agent_socket.is_none() {
            return Err(ConfigError::NoAgentSocket);
        }
        if !(1..=DEFAULT_MAX_UPLOAD).contains(&self.uploads.max_bytes) {
            return Err(ConfigError::MaxBytes(self.uploads.max_bytes));
        }
        if !self.serve.listen.ip().is_loopback() {
            return Err(ConfigError::NotLoopback(self.serve.listen));
        }
        Ok(())
    }

    /// The daemon's registration token and its file: read, or made (256
    /// random bits, 0600) when missing.
    pub fn registration_token(&self) -> Result<(PathBuf, String), ConfigError> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let path = self.serve.token_file.clone().unwrap_or_else(|| {
            dirs::state_dir()
                .or_else(|| dirs::home_dir().map(|h| h.join(".local/state")))
                .unwrap_or_else(std::env::temp_dir)
                .join("calvin/gateway.token")
        });
        let io = |source| ConfigError::TokenFile {
            path: path.clone(),
            source,
        };
        match std::fs::read_to_string(&path) {
            Ok(text) if !text.trim().is_empty() => return Ok((path.clone(), text.trim().into())),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(e)),
        }
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let bytes: [u8; 32] = rand::RngExt::random(&mut rand::rng());
        let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
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
            .bot_token
            .clone()
            .or_else(|| std::env::var("SLACK_BOT_TOKEN").ok())
            .filter(|t| !t.is_empty())
            .ok_or(ConfigError::NoToken)
    }
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

    #[test]
    fn hosted_needs_the_agent_and_uploads_are_capped() {
        let c: GatewayConfig = toml::from_str("mode = \"hosted\"").unwrap();
        assert!(matches!(c.check(), Err(ConfigError::NoAgentSocket)));
        let at = format!("mode = \"one-machine\"\n[uploads]\nmax_bytes = {DEFAULT_MAX_UPLOAD}");
        assert!(
            toml::from_str::<GatewayConfig>(&at)
                .unwrap()
                .check()
                .is_ok()
        );
        let past = format!(
            "mode = \"one-machine\"\n[uploads]\nmax_bytes = {}",
            DEFAULT_MAX_UPLOAD + 1
        );
        let err = toml::from_str::<GatewayConfig>(&past)
            .unwrap()
            .check()
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "[uploads] max_bytes must be from 1 to 104857600 (100 MiB), got 104857601"
        );
    }

    #[test]
    fn the_daemon_stays_on_loopback_and_keeps_its_token() {
        let c: GatewayConfig =
            toml::from_str("mode = \"one-machine\"\n[serve]\nlisten = \"0.0.0.0:8765\"").unwrap();
        assert_eq!(
            c.check().unwrap_err().to_string(),
            "[serve] listen = 0.0.0.0:8765: the gateway daemon listens on loopback only"
        );
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("t/gateway.token");
        let text = format!(
            "mode = \"one-machine\"\n[serve]\nlisten = \"[::1]:1\"\ntoken_file = \"{}\"",
            file.display()
        );
        let c: GatewayConfig = toml::from_str(&text).unwrap();
        c.check().unwrap();
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
}
