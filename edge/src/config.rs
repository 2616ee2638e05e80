//! `edge.toml`, the configuration of `calvin-edge serve`.
//!
//! ```toml
//! domain = "preview.example.com"
//! public_ips = ["203.0.113.7"]          # what the zone's DNS answers
//! state_dir = "/var/lib/calvin-edge"
//! # public_url = "https://{name}.preview.example.com"  # derived when absent
//!
//! [listen]             # the defaults, but dns (off unless given)
//! https = "0.0.0.0:443"
//! http = "0.0.0.0:80"  # "" turns a TCP listener off
//! quic = "0.0.0.0:443"
//! dns = "0.0.0.0:53"   # UDP and TCP
//! plain_http = "redirect"  # or "serve" (a TLS-terminating proxy in front)
//! http3 = true         # visitors may speak HTTP/3 on quic's UDP port
//! alt_svc = true       # HTTPS responses say so (Alt-Svc: h3=":443")
//! # alt_svc_port = 443 # the UDP port Alt-Svc names; default: quic's
//!
//! [acme]               # the certificate from an ACME CA, through DNS-01
//! directory = "https://acme-v02.api.letsencrypt.org/directory"
//! contact = "mailto:ops@example.com"
//! # ca_file = "/path/ca.pem"     # an extra root for the directory
//! # renew_days_before = 30       # default: a third of the lifetime left
//! # retry_min_secs = 600         # failed attempts back off, doubling...
//! # retry_max_secs = 21600       # ...up to this
//! # attempt_timeout_secs = 300
//!
//! # [tls]              # or: a certificate of your own (SIGHUP reads it again)
//! # cert_file = "/etc/calvin/edge.pem"   # chain, leaf first
//! # key_file = "/etc/calvin/edge.key"
//!
//! [dns]                # optional; these are the defaults
//! # nameservers = ["ns.preview.example.com"]
//! # hostmaster = "hostmaster.preview.example.com"
//! # ttl = 300
//! # caa_issuers = ["letsencrypt.org"]    # default: no CAA record
//!
//! [agents]
//! tokens_file = "/etc/calvin/tokens.toml"   # lines of: account = "token"
//!
//! # [[accounts]]       # or accounts inline
//! # name = "team-a"
//! # token_file = "/etc/calvin/team-a.token"   # or: token = "..."
//!
//! [limits]             # see `Limits` for every field and its default
//! grace_period_secs = 30
//!
//! [admin]              # /metrics, /healthz, /readyz
//! listen = "127.0.0.1:9180"   # the default; "" turns it off
//!
//! [log]
//! access = true        # a line per request at info (target calvin_edge::access)
//! access_query = false # paths without their query (it may carry tokens)
//! ```

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use crate::certs::acme::AcmeSettings;
use crate::certs::dns::ZoneSettings;
use crate::certs::tls::TlsError;
use crate::state_files::{self, FileError};
use crate::{Certificates, DnsSettings, Limits, Listen, PlainHttp, Settings};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    pub domain: String,
    pub state_dir: PathBuf,
    #[serde(default)]
    pub public_url: Option<String>,
    #[serde(default)]
    pub public_ips: Vec<IpAddr>,
    #[serde(default)]
    pub listen: ListenConfig,
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    #[serde(default)]
    pub acme: Option<AcmeConfig>,
    #[serde(default)]
    pub dns: DnsConfig,
    #[serde(default)]
    pub agents: Option<AgentsConfig>,
    #[serde(default)]
    pub accounts: Vec<AccountConfig>,
    #[serde(default)]
    pub limits: Limits,
    #[serde(default)]
    pub admin: AdminConfig,
    #[serde(default)]
    pub log: LogConfig,
    /// Several edges acting as one (see [`crate::cluster`]); absent: one
    /// edge, its routes in memory.
    #[serde(default)]
    pub cluster: Option<ClusterConfig>,
}

/// `[cluster]`: the etcd endpoints, the edge-to-edge QUIC address and its
/// mutual TLS.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    pub etcd: Vec<String>,
    pub peer_listen: SocketAddr,
    pub advertise: String,
    pub peer_ca: PathBuf,
    pub peer_cert: PathBuf,
    pub peer_key: PathBuf,
    #[serde(default = "default_lease_ttl")]
    pub lease_ttl_secs: u64,
}

fn default_lease_ttl() -> u64 {
    crate::cluster::DEFAULT_LEASE_TTL_SECS
}

/// `[admin]`: the listener for `/metrics`, `/healthz` and `/readyz`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    /// `""` turns it off.
    #[serde(deserialize_with = "optional_addr")]
    pub listen: Option<SocketAddr>,
}

/// The admin listener's address unless `[admin] listen` says otherwise:
/// loopback (Prometheus' own port is 9090; 9180 is seldom taken).
pub const DEFAULT_ADMIN: SocketAddr =
    SocketAddr::new(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 9180);

impl Default for AdminConfig {
    fn default() -> Self {
        Self {
            listen: Some(DEFAULT_ADMIN),
        }
    }
}

/// `[log]`: the access log (a line per request, at info).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    pub access: bool,
    /// Whether its paths keep their query (which may carry tokens).
    pub access_query: bool,
}

impl LogConfig {
    /// Takes it out, leaving the default.
    pub fn take(&mut self) -> Self {
        std::mem::take(self)
    }
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            access: true,
            access_query: false,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcmeConfig {
    pub directory: String,
    #[serde(default)]
    pub contact: Contact,
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    #[serde(default)]
    pub renew_days_before: Option<u32>,
    #[serde(default = "default_retry_min")]
    pub retry_min_secs: u64,
    #[serde(default = "default_retry_max")]
    pub retry_max_secs: u64,
    #[serde(default = "default_attempt_timeout")]
    pub attempt_timeout_secs: u64,
}

// Let's Encrypt allows 5 failed validations per name and hour: the first
// retries come 10, 20 and 40 minutes apart.
fn default_retry_min() -> u64 {
    600
}
fn default_retry_max() -> u64 {
    6 * 3600
}
fn default_attempt_timeout() -> u64 {
    300
}

/// One contact URI or several.
#[derive(Debug, Default, Deserialize)]
#[serde(untagged)]
pub enum Contact {
    #[default]
    None,
    One(String),
    Many(Vec<String>),
}

impl Contact {
    fn into_vec(self) -> Vec<String> {
        match self {
            Contact::None => vec![],
            Contact::One(c) => vec![c],
            Contact::Many(c) => c,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DnsConfig {
    pub nameservers: Option<Vec<String>>,
    pub hostmaster: Option<String>,
    pub ttl: Option<u32>,
    pub caa_issuers: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentsConfig {
    /// A TOML file of `account = "token"` lines.
    pub tokens_file: PathBuf,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ListenConfig {
    #[serde(deserialize_with = "optional_addr")]
    pub https: Option<SocketAddr>,
    #[serde(deserialize_with = "optional_addr")]
    pub http: Option<SocketAddr>,
    pub quic: SocketAddr,
    #[serde(deserialize_with = "optional_addr")]
    pub dns: Option<SocketAddr>,
    pub plain_http: PlainHttp,
    /// HTTP/3 for visitors on `quic`.
    pub http3: bool,
    /// `Alt-Svc` on HTTPS responses, naming `alt_svc_port` (default:
    /// `quic`'s port).
    pub alt_svc: bool,
    pub alt_svc_port: Option<std::num::NonZeroU16>,
}

impl Default for ListenConfig {
    fn default() -> Self {
        let any = |port| SocketAddr::from(([0, 0, 0, 0], port));
        Self {
            https: Some(any(443)),
            http: Some(any(80)),
            quic: any(443),
            dns: None,
            plain_http: PlainHttp::Redirect,
            http3: true,
            alt_svc: true,
            alt_svc_port: None,
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
    #[error("no accounts: give [agents] tokens_file, or at least one [[accounts]] with a token")]
    NoAccounts,
    #[error("account {0:?} is given twice")]
    DuplicateAccount(String),
    #[error(
        "give exactly one of [tls] (a certificate of your own) and [acme] (one the edge obtains)"
    )]
    CertificateSource,
    #[error("[listen] dns is set but public_ips is empty: the zone would have no addresses")]
    NoPublicIps,
    #[error("[acme] {0}")]
    Acme(String),
    #[error("[cluster] {0}")]
    Cluster(String),
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error(transparent)]
    State(#[from] FileError),
}

impl ClusterConfig {
    /// What is wrong with it, by key: etcd endpoints given and URLs,
    /// `advertise` a `HOST:PORT`, the lease's TTL within its bounds.
    pub(crate) fn problems(&self) -> Vec<(&'static str, String)> {
        let mut problems = Vec::new();
        if self.etcd.is_empty() {
            problems.push((
                "etcd",
                "etcd is empty: give the etcd client URLs (http://HOST:2379)".to_owned(),
            ));
        }
        if let Some(bad) = self
            .etcd
            .iter()
            .find(|url| !url.starts_with("http://") && !url.starts_with("https://"))
        {
            problems.push((
                "etcd",
                format!("etcd endpoint {bad:?} is not an http:// or https:// URL"),
            ));
        }
        let port_ok = self.advertise.rsplit_once(':').is_some_and(|(host, port)| {
            !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0)
        });
        if !port_ok {
            problems.push((
                "advertise",
                format!("advertise {:?} is not HOST:PORT", self.advertise),
            ));
        }
        let (min, max) = crate::cluster::LEASE_TTL_BOUNDS;
        if let Some(problem) =
            crate::settings::out_of_range("lease_ttl_secs", self.lease_ttl_secs, min, max)
        {
            problems.push(("lease_ttl_secs", problem));
        }
        problems
    }
}

/// `[cluster]` checked (see [`ClusterConfig::problems`]).
fn cluster_settings(
    cluster: ClusterConfig,
    public_ips: &[IpAddr],
) -> Result<crate::cluster::ClusterSettings, ConfigError> {
    if let Some((_, problem)) = cluster.problems().into_iter().next() {
        return Err(ConfigError::Cluster(problem));
    }
    Ok(crate::cluster::ClusterSettings {
        etcd: cluster.etcd,
        peer_listen: cluster.peer_listen,
        advertise: cluster.advertise,
        peer_ca: cluster.peer_ca,
        peer_cert: cluster.peer_cert,
        peer_key: cluster.peer_key,
        lease_ttl: Duration::from_secs(cluster.lease_ttl_secs),
        addresses: public_ips.to_vec(),
    })
}

/// `value` seconds, if within `min..=max`; else an error naming `key`.
fn bounded((key, value, min, max): AcmeBound) -> Result<Duration, ConfigError> {
    match crate::settings::out_of_range(key, value, min, max) {
        None => Ok(Duration::from_secs(value)),
        Some(problem) => Err(ConfigError::Acme(problem)),
    }
}

/// One of `[acme]`'s durations: its key, value, least and most.
pub(crate) type AcmeBound = (&'static str, u64, u64, u64);

impl AcmeConfig {
    /// Its durations (retry_min, retry_max, attempt_timeout) and their
    /// ranges.
    pub(crate) fn bounds(&self) -> [AcmeBound; 3] {
        [
            ("retry_min_secs", self.retry_min_secs, 1, 86_400),
            (
                "retry_max_secs",
                self.retry_max_secs,
                self.retry_min_secs,
                7 * 86_400,
            ),
            ("attempt_timeout_secs", self.attempt_timeout_secs, 1, 3600),
        ]
    }
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
    /// The zone `[dns]` and `public_ips` describe, with its defaults.
    pub fn zone(&self) -> ZoneSettings {
        let domain = self.domain.trim_end_matches('.').to_ascii_lowercase();
        ZoneSettings {
            nameservers: self
                .dns
                .nameservers
                .clone()
                .unwrap_or_else(|| vec![format!("ns.{domain}")]),
            hostmaster: self
                .dns
                .hostmaster
                .clone()
                .unwrap_or_else(|| format!("hostmaster.{domain}")),
            ttl: self.dns.ttl.unwrap_or(300),
            caa_issuers: self.dns.caa_issuers.clone(),
            public_ips: self.public_ips.clone(),
            domain,
        }
    }

    pub fn into_settings(self) -> Result<Settings, ConfigError> {
        let zone = self.zone();
        let mut accounts = Vec::new();
        if let Some(agents) = &self.agents {
            let file = &agents.tokens_file;
            let text = std::fs::read_to_string(file).map_err(|source| ConfigError::Read {
                path: file.clone(),
                source,
            })?;
            let tokens: BTreeMap<String, String> =
                toml::from_str(&text).map_err(|source| ConfigError::Parse {
                    path: file.clone(),
                    source,
                })?;
            accounts.extend(tokens);
        }
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
            if accounts.iter().any(|(name, _)| *name == account.name) {
                return Err(ConfigError::DuplicateAccount(account.name));
            }
            accounts.push((account.name, token));
        }
        if accounts.is_empty() {
            return Err(ConfigError::NoAccounts);
        }
        state_files::create_private_dir(&self.state_dir)?;
        let reset_path = self.state_dir.join("reset.key");
        let reset_hex = state_files::load_or_make_secret(&reset_path)?;
        let domain = self.domain.trim_end_matches('.').to_ascii_lowercase();
        let certificates = match (self.tls, self.acme) {
            (Some(tls), None) => Certificates::Files {
                cert_file: tls.cert_file,
                key_file: tls.key_file,
            },
            (None, Some(acme)) => {
                let [retry_min, retry_max, attempt_timeout] = acme.bounds();
                Certificates::Acme(AcmeSettings {
                    retry_min: bounded(retry_min)?,
                    retry_max: bounded(retry_max)?,
                    attempt_timeout: bounded(attempt_timeout)?,
                    directory: acme.directory,
                    contact: acme.contact.into_vec(),
                    ca_file: acme.ca_file,
                    dir: self.state_dir.join("acme"),
                    renew_before: acme
                        .renew_days_before
                        .map(|days| Duration::from_secs(u64::from(days) * 86_400)),
                })
            }
            _ => return Err(ConfigError::CertificateSource),
        };
        if let Certificates::Acme(acme) = &certificates {
            state_files::create_private_dir(&acme.dir)?;
        }
        let dns = match self.listen.dns {
            None => None,
            Some(_) if self.public_ips.is_empty() => return Err(ConfigError::NoPublicIps),
            Some(listen) => Some(DnsSettings { listen, zone }),
        };
        let cluster = match self.cluster {
            None => None,
            Some(cluster) => Some(cluster_settings(cluster, &self.public_ips)?),
        };
        Ok(Settings {
            cluster,
            domain,
            public_url: self.public_url,
            listen: Listen {
                https: self.listen.https,
                http: self.listen.http,
                quic: self.listen.quic,
                http3: crate::Http3Settings {
                    enabled: self.listen.http3,
                    advertise: self.listen.http3 && self.listen.alt_svc,
                    port: self.listen.alt_svc_port.map(std::num::NonZeroU16::get),
                },
            },
            certificates,
            dns,
            plain_http: self.listen.plain_http,
            accounts,
            limits: self.limits,
            reset_key: state_files::decode_hex32(&reset_path, &reset_hex)?,
            share_key: state_files::load_or_make_key(
                &self.state_dir.join(crate::share::SHARE_KEY_FILE),
            )?,
            names_file: Some(self.state_dir.join(crate::upstream::name_store::FILE)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The smallest file: a domain, a state folder, a certificate, an
    /// account; `extra` after them.
    fn minimal(extra: &str) -> ConfigFile {
        let text = format!(
            "domain = \"p.example.com\"\nstate_dir = \"/tmp/x\"\n[tls]\ncert_file = \"a.pem\"\n\
             key_file = \"a.key\"\n[[accounts]]\nname = \"a\"\ntoken = \"t\"\n{extra}"
        );
        toml::from_str(&text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn the_admin_listener_is_loopback_by_default_and_off_when_empty() {
        assert_eq!(minimal("").admin.listen, Some(DEFAULT_ADMIN));
        assert!(DEFAULT_ADMIN.ip().is_loopback());
        assert_eq!(minimal("[admin]\nlisten = \"\"").admin.listen, None);
        assert_eq!(
            minimal("[admin]\nlisten = \"127.0.0.1:9999\"").admin.listen,
            Some("127.0.0.1:9999".parse().expect("addr"))
        );
    }

    #[test]
    fn http3_is_served_and_advertised_by_default() {
        let listen = minimal("").listen;
        assert!(listen.http3 && listen.alt_svc);
        assert_eq!(listen.alt_svc_port, None);
        let listen = minimal("[listen]\nhttp3 = false").listen;
        assert!(!listen.http3);
        let listen = minimal("[listen]\nalt_svc = false\nalt_svc_port = 8443").listen;
        assert!(listen.http3 && !listen.alt_svc);
        assert_eq!(
            listen.alt_svc_port.map(std::num::NonZeroU16::get),
            Some(8443)
        );
    }

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

    /// The issue's example configuration, with files in a temporary folder.
    fn acme_example(dir: &Path, extra: &str) -> String {
        std::fs::write(
            dir.join("tokens.toml"),
            "team-a = \"t-a\"\nteam-b = \"t-b\"\n",
        )
        .unwrap();
        format!(
            r#"
            domain = "Preview.Example.com."
            public_ips = ["203.0.113.7", "2001:db8::7"]
            state_dir = "{state}"
            [listen]
            https = "0.0.0.0:443"
            http = "0.0.0.0:80"
            quic = "0.0.0.0:443"
            dns = "0.0.0.0:53"
            [acme]
            directory = "https://acme-v02.api.letsencrypt.org/directory"
            contact = "mailto:ops@example.com"
            ca_file = "/path/ca.pem"
            [agents]
            tokens_file = "{tokens}"
            {extra}
            "#,
            state = dir.join("state").display(),
            tokens = dir.join("tokens.toml").display(),
        )
    }

    fn settings(text: &str) -> Result<Settings, ConfigError> {
        toml::from_str::<ConfigFile>(text).unwrap().into_settings()
    }

    #[test]
    fn the_acme_example_makes_a_zone_and_an_acme_source() {
        let dir = tempfile::tempdir().unwrap();
        let s = settings(&acme_example(dir.path(), "")).unwrap();
        assert_eq!(s.domain, "preview.example.com");
        let mut accounts = s.accounts.clone();
        accounts.sort();
        assert_eq!(
            accounts,
            [
                ("team-a".into(), "t-a".into()),
                ("team-b".into(), "t-b".into())
            ]
        );
        let Certificates::Acme(acme) = &s.certificates else {
            panic!("not acme");
        };
        assert_eq!(acme.contact, ["mailto:ops@example.com"]);
        assert_eq!(acme.ca_file.as_deref(), Some(Path::new("/path/ca.pem")));
        assert_eq!(acme.renew_before, None);
        assert_eq!(acme.retry_min, Duration::from_secs(600));
        assert_eq!(acme.retry_max, Duration::from_secs(21_600));
        assert_eq!(acme.dir, dir.path().join("state/acme"));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&acme.dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        let dns = s.dns.as_ref().unwrap();
        assert_eq!(dns.listen, "0.0.0.0:53".parse().unwrap());
        assert_eq!(dns.zone.domain, "preview.example.com");
        assert_eq!(dns.zone.nameservers, ["ns.preview.example.com"]);
        assert_eq!(dns.zone.hostmaster, "hostmaster.preview.example.com");
        assert_eq!(dns.zone.public_ips.len(), 2);
        assert_eq!(s.plain_http, PlainHttp::Redirect);
    }

    #[test]
    fn certificate_sources_and_zone_mistakes_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let both = acme_example(dir.path(), "[tls]\ncert_file = \"c\"\nkey_file = \"k\"");
        let err = settings(&both).err().unwrap();
        assert!(matches!(err, ConfigError::CertificateSource), "{err}");
        let neither = acme_example(dir.path(), "").replace("[acme]", "[unused]");
        let err = toml::from_str::<ConfigFile>(&neither).unwrap_err();
        assert!(err.to_string().contains("unknown field `unused`"), "{err}");
        let no_acme = acme_example(dir.path(), "")
            .lines()
            .filter(|l| {
                !l.contains("[acme]")
                    && !l.contains("directory")
                    && !l.contains("contact")
                    && !l.contains("ca_file")
            })
            .collect::<Vec<_>>()
            .join("\n");
        let err = settings(&no_acme).err().unwrap();
        assert_eq!(
            err.to_string(),
            "give exactly one of [tls] (a certificate of your own) and [acme] (one the edge obtains)"
        );
        let no_ips = acme_example(dir.path(), "")
            .replace("public_ips = [\"203.0.113.7\", \"2001:db8::7\"]", "");
        let err = settings(&no_ips).err().unwrap();
        assert!(matches!(err, ConfigError::NoPublicIps), "{err}");
        let typo = acme_example(dir.path(), "").replace("contact =", "contacts =");
        let err = toml::from_str::<ConfigFile>(&typo).unwrap_err();
        assert!(
            err.to_string().contains("unknown field `contacts`"),
            "{err}"
        );
    }

    #[test]
    fn retry_settings_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let with = |extra: &str| {
            settings(
                &acme_example(dir.path(), "").replace("[agents]", &format!("{extra}\n[agents]")),
            )
        };
        let err = with("retry_min_secs = 0").err().unwrap();
        assert_eq!(
            err.to_string(),
            "[acme] retry_min_secs must be from 1 to 86400, got 0"
        );
        assert!(with("retry_min_secs = 1\nretry_max_secs = 1").is_ok());
        let err = with("retry_min_secs = 10\nretry_max_secs = 5")
            .err()
            .unwrap();
        assert_eq!(
            err.to_string(),
            "[acme] retry_max_secs must be from 10 to 604800, got 5"
        );
        let err = with("retry_max_secs = 604801").err().unwrap();
        assert!(err.to_string().contains("got 604801"), "{err}");
        let err = with("attempt_timeout_secs = 3601").err().unwrap();
        assert_eq!(
            err.to_string(),
            "[acme] attempt_timeout_secs must be from 1 to 3600, got 3601"
        );
        assert!(with("attempt_timeout_secs = 3600").is_ok());
    }

    #[test]
    fn an_account_given_twice_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let text = acme_example(dir.path(), "[[accounts]]\nname = \"team-a\"\ntoken = \"x\"");
        let err = settings(&text).err().unwrap();
        assert_eq!(err.to_string(), "account \"team-a\" is given twice");
    }

    /// The ACME example with a `[cluster]` of `body` (after the header).
    fn cluster_example(dir: &Path, body: &str) -> String {
        acme_example(dir, &format!("[cluster]\n{body}"))
    }

    const CLUSTER: &str = r#"
            etcd = ["http://10.0.0.9:2379", "http://10.0.0.10:2379"]
            peer_listen = "0.0.0.0:7443"
            advertise = "edge-2.example.com:7443"
            peer_ca = "/etc/calvin/cluster-ca.pem"
            peer_cert = "/etc/calvin/edge-2.pem"
            peer_key = "/etc/calvin/edge-2.key"
            "#;

    #[test]
    fn a_cluster_section_makes_cluster_settings_and_none_is_one_edge() {
        let dir = tempfile::tempdir().unwrap();
        assert!(
            settings(&acme_example(dir.path(), ""))
                .unwrap()
                .cluster
                .is_none()
        );
        let s = settings(&cluster_example(dir.path(), CLUSTER)).unwrap();
        let cluster = s.cluster.expect("a cluster");
        assert_eq!(cluster.etcd.len(), 2);
        assert_eq!(cluster.advertise, "edge-2.example.com:7443");
        assert_eq!(cluster.peer_listen, "0.0.0.0:7443".parse().unwrap());
        assert_eq!(cluster.lease_ttl, Duration::from_secs(5));
        // The zone answers every live edge's public_ips: this one's go in.
        assert_eq!(
            cluster.addresses,
            [
                "203.0.113.7".parse::<IpAddr>().unwrap(),
                "2001:db8::7".parse().unwrap()
            ]
        );
    }

    #[test]
    fn cluster_mistakes_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let with = |from: &str, to: &str| {
            settings(&cluster_example(dir.path(), &CLUSTER.replace(from, to)))
                .err()
                .map(|e| e.to_string())
        };
        assert_eq!(
            with(r#"["http://10.0.0.9:2379", "http://10.0.0.10:2379"]"#, "[]").as_deref(),
            Some("[cluster] etcd is empty: give the etcd client URLs (http://HOST:2379)")
        );
        assert_eq!(
            with("http://10.0.0.9:2379", "10.0.0.9:2379").as_deref(),
            Some("[cluster] etcd endpoint \"10.0.0.9:2379\" is not an http:// or https:// URL")
        );
        for bad in [
            "edge-2.example.com",
            ":7443",
            "edge-2.example.com:0",
            "edge-2:http",
        ] {
            assert_eq!(
                with("edge-2.example.com:7443", bad),
                Some(format!("[cluster] advertise \"{bad}\" is not HOST:PORT")),
            );
        }
        let ttl = |secs: u64| {
            settings(&cluster_example(
                dir.path(),
                &format!("{CLUSTER}lease_ttl_secs = {secs}\n"),
            ))
            .map(|s| s.cluster.unwrap().lease_ttl.as_secs())
            .map_err(|e| e.to_string())
        };
        assert_eq!(ttl(2), Ok(2));
        assert_eq!(ttl(60), Ok(60));
        for past in [1, 61] {
            let err = ttl(past).unwrap_err();
            assert!(err.starts_with("[cluster] lease_ttl_secs"), "{err}");
        }
        let err =
            toml::from_str::<ConfigFile>(&cluster_example(dir.path(), "etcd = []\nwho = 1\n"))
                .unwrap_err();
        assert!(err.to_string().contains("unknown field `who`"), "{err}");
    }
}
