//! `edge.toml`, the configuration of `calvin-edge serve`.
//!
//! ```toml
//! domain = "preview.example.com"
//! state_dir = "/var/lib/calvin-edge"
//! # public_url = "https://{name}.preview.example.com"  # derived when absent
//!
//! [listen]             # these are the defaults
//! https = "0.0.0.0:443"
//! http = "0.0.0.0:80"  # "" turns a TCP listener off
//! quic = "0.0.0.0:443"
//!
//! [tls]
//! cert_file = "/etc/calvin/edge.pem"   # chain, leaf first
//! key_file = "/etc/calvin/edge.key"
//!
//! [[accounts]]
//! name = "team-a"
//! token_file = "/etc/calvin/team-a.token"   # or: token = "..."
//!
//! [limits]             # see `Limits` for every field and its default
//! grace_period_secs = 30
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer};

use crate::state_files::{self, FileError};
use crate::tls::{TlsError, TlsMaterial};
use crate::{Limits, Listen, Settings};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    pub domain: String,
    pub state_dir: PathBuf,
    #[serde(default)]
    pub public_url: Option<String>,
    #[serde(default)]
    pub listen: ListenConfig,
    pub tls: TlsConfig,
    pub accounts: Vec<AccountConfig>,
    #[serde(default)]
    pub limits: Limits,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ListenConfig {
    #[serde(deserialize_with = "optional_addr")]
    pub https: Option<SocketAddr>,
    #[serde(deserialize_with = "optional_addr")]
    pub http: Option<SocketAddr>,
    pub quic: SocketAddr,
}

impl Default for ListenConfig {
    fn default() -> Self {
        let any = |port| SocketAddr::from(([0, 0, 0, 0], port));
        Self {
            https: Some(any(443)),
            http: Some(any(80)),
            quic: any(443),
        }
    }
}

/// An address, or `""` for "no listener".
fn optional_addr<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SocketAddr>, D::Error> {
    let s = String::deserialize(d)?;
    if s.is_empty() {
        return Ok(None);
    }
    s.parse().map(Some).map_err(serde::de::Error::custom)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccountConfig {
    pub name: String,
    #[serde(default)]
    pub token: Option<String>,
    #[serde(default)]
    pub token_file: Option<PathBuf>,
}

impl std::fmt::Debug for AccountConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccountConfig")
            .field("name", &self.name)
            .field("token_file", &self.token_file)
            .finish_non_exhaustive()
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
    #[error("account {0:?}: give exactly one of token and token_file")]
    Token(String),
    #[error("no accounts: add at least one [[accounts]] with a token")]
    NoAccounts,
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error(transparent)]
    State(#[from] FileError),
}

impl ConfigFile {
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        toml::from_str(&text).map_err(|source| ConfigError::Parse {
            path: path.to_owned(),
            source,
        })
    }

    /// Reads the files the configuration names and makes the settings.
    pub fn into_settings(self) -> Result<Settings, ConfigError> {
        if self.accounts.is_empty() {
            return Err(ConfigError::NoAccounts);
        }
        let mut accounts = Vec::new();
        for account in self.accounts {
            let token = match (account.token, &account.token_file) {
                (Some(token), None) => token,
                (None, Some(file)) => std::fs::read_to_string(file)
                    .map_err(|source| ConfigError::Read {
                        path: file.clone(),
                        source,
                    })?
                    .trim()
                    .to_owned(),
                _ => return Err(ConfigError::Token(account.name)),
            };
            accounts.push((account.name, token));
        }
        std::fs::create_dir_all(&self.state_dir).map_err(|source| ConfigError::Read {
            path: self.state_dir.clone(),
            source,
        })?;
        let reset_path = self.state_dir.join("reset.key");
        let reset_hex = state_files::load_or_make_secret(&reset_path)?;
        Ok(Settings {
            domain: self.domain,
            public_url: self.public_url,
            listen: Listen {
                https: self.listen.https,
                http: self.listen.http,
                quic: self.listen.quic,
            },
            tls: TlsMaterial::from_pem_files(&self.tls.cert_file, &self.tls.key_file)?,
            accounts,
            limits: self.limits,
            reset_key: state_files::decode_hex32(&reset_path, &reset_hex)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minimal_file_takes_defaults() {
        let c: ConfigFile = toml::from_str(
            r#"
            domain = "p.example.com"
            state_dir = "/tmp/x"
            [tls]
            cert_file = "a.pem"
            key_file = "a.key"
            [[accounts]]
            name = "a"
            token = "t"
            "#,
        )
        .unwrap();
        assert_eq!(c.listen.https, Some("0.0.0.0:443".parse().unwrap()));
        assert_eq!(c.listen.quic, "0.0.0.0:443".parse().unwrap());
        assert_eq!(c.limits.grace_period_secs, 30);
        assert_eq!(c.limits.upstream_timeout_secs, 100);
    }

    #[test]
    fn unknown_fields_and_bad_addresses_are_errors() {
        let base = "domain = \"d\"\nstate_dir = \"/s\"\n[tls]\ncert_file = \"c\"\nkey_file = \"k\"\n[[accounts]]\nname = \"a\"\ntoken = \"t\"\n";
        let err =
            toml::from_str::<ConfigFile>(&format!("{base}[limits]\ngrace = 3\n")).unwrap_err();
        assert!(err.to_string().contains("unknown field `grace`"), "{err}");
        let err = toml::from_str::<ConfigFile>(&format!("{base}[listen]\nhttps = \"nope\"\n"))
            .unwrap_err();
        assert!(err.to_string().contains("invalid socket address"), "{err}");
        let off: ConfigFile = toml::from_str(&format!("{base}[listen]\nhttp = \"\"\n")).unwrap();
        assert_eq!(off.listen.http, None);
    }
}
