//! `calvin-edge check-config FILE`: everything wrong with an `edge.toml`,
//! each problem with its key and line, before a restart finds it. `serve`
//! runs the same checks before it starts.
//!
//! It reads the file as `serve` would (unknown keys, types and addresses,
//! through serde), and goes on past the first such error: the offending
//! line (or table) is blanked and the file read again, so one run names
//! every one ([`calvin_common::config_check`], which the gateway's check
//! shares). Then what serde cannot see: the files the configuration
//! names (present, readable, secrets not readable by others), the
//! certificate source, the zone, the accounts and their tokens, and every
//! limit's range.

use std::collections::BTreeMap;
use std::path::Path;

pub use calvin_common::config_check::Problem;
use calvin_common::config_check::{
    self, Doc, error_at, open_to, out_of_range, secret, uncreatable_dir, unreadable,
};

use crate::StartError;
use crate::accounts::{AccountError, MIN_TOKEN_LEN};
use crate::certs::cert_store::CertStore;
use crate::certs::dns::{Challenges, ZoneAnswers, ZoneError};
use crate::certs::tls::TlsMaterial;
use crate::config::{ConfigError, ConfigFile};
use crate::settings::canonical_domain;

/// Checks the configuration at `path`: the parsed file and a one-line
/// summary, or every problem found.
pub fn check(path: &Path) -> Result<(ConfigFile, String), Vec<Problem>> {
    let mut accounts = 0;
    let config = config_check::check(path, |doc, config: &ConfigFile| {
        let (problems, n) = problems(doc, config);
        accounts = n;
        problems
    })?;
    let summary = summary(path, &config, accounts);
    Ok((config, summary))
}

/// What serde cannot see.
/// Also how many accounts there are.
fn problems(doc: &Doc<'_>, config: &ConfigFile) -> (Vec<Problem>, usize) {
    let mut problems = Vec::new();
    let mut add = |key: &str, message: String| problems.push(doc.problem(key, message));

    if let Err(e) = canonical_domain(&config.domain) {
        add("domain", e.to_string());
    }
    if let Some(url) = &config.public_url
        && !url.contains("{name}")
    {
        add(
            "public_url",
            format!("{url:?} has no {{name}} for the preview's name"),
        );
    }
    if let Some(why) = uncreatable_dir(&config.state_dir) {
        add("state_dir", why);
    } else if let Some(why) = corrupt_key(
        &config.state_dir,
        "reset.key",
        "its agents reconnect at their idle timeout once",
    ) {
        add("state_dir", why);
    } else if let Some(why) = corrupt_key(
        &config.state_dir,
        crate::share::SHARE_KEY_FILE,
        "every share link made so far stops working",
    ) {
        add("state_dir", why);
    }
    match (&config.tls, &config.acme) {
        (Some(tls), None) => {
            if let Some(why) = unreadable(&tls.cert_file) {
                add("tls.cert_file", why);
            }
            // A key may be shared with a group (Debian's ssl-cert), not
            // with everyone.
            let key_problem = unreadable(&tls.key_file).or_else(|| open_to(&tls.key_file, 0o007));
            let readable = unreadable(&tls.cert_file).is_none() && key_problem.is_none();
            if let Some(why) = key_problem {
                add("tls.key_file", why);
            }
            // Both readable: a pair the edge can serve (PEM, the key the
            // certificate's).
            if readable
                && let Err(e) = TlsMaterial::from_pem_files(&tls.cert_file, &tls.key_file)
                    .and_then(|material| CertStore::new().install(&material))
            {
                add("tls.cert_file", e.to_string());
            }
        }
        (None, Some(acme)) => {
            if config.listen.dns.is_none() {
                add("acme", StartError::AcmeWithoutDns.to_string());
            }
            if !(acme.directory.starts_with("https://") || acme.directory.starts_with("http://")) {
                add(
                    "acme.directory",
                    format!("{:?} is not an http(s) URL", acme.directory),
                );
            }
            if let Some(why) = acme.ca_file.as_deref().and_then(unreadable) {
                add("acme.ca_file", why);
            }
            for (key, value, min, max) in acme.bounds() {
                if let Some(problem) = out_of_range(key, value, min, max) {
                    add(&format!("acme.{key}"), problem);
                }
            }
            // Any larger value is safe: past the lifetime it means
            // "renew at once".
            if acme.renew_days_before == Some(0) {
                add(
                    "acme.renew_days_before",
                    "must be at least 1: 0 would renew only once the certificate has expired"
                        .into(),
                );
            }
        }
        _ => add("tls", ConfigError::CertificateSource.to_string()),
    }
    if config.listen.dns.is_some() && config.public_ips.is_empty() {
        add("public_ips", ConfigError::NoPublicIps.to_string());
    } else if config.listen.dns.is_some() {
        let zone = config.zone();
        if let Err(e) = ZoneAnswers::new(&zone, Challenges::default()) {
            let key = match &e {
                ZoneError::Name(name) if zone.hostmaster == *name => "dns.hostmaster",
                ZoneError::Name(name) if zone.nameservers.contains(name) => "dns.nameservers",
                ZoneError::Name(_) => "dns.caa_issuers",
                ZoneError::NoAddresses => "public_ips",
            };
            add(key, e.to_string());
        }
    }
    if let Some(problem) = config
        .dns
        .ttl
        .and_then(|ttl| out_of_range("ttl", ttl.into(), 1, 86_400))
    {
        add("dns.ttl", problem);
    }
    #[cfg(not(feature = "cluster"))]
    if config.cluster.is_some() {
        add(
            "cluster",
            "this calvin-edge was built without the `cluster` feature: build it with its default features (which need protoc) to run in a cluster".into(),
        );
    }
    if let Some(cluster) = &config.cluster {
        for (key, message) in cluster.problems() {
            add(&format!("cluster.{key}"), message);
        }
        let files = [
            ("cluster.peer_ca", &cluster.peer_ca),
            ("cluster.peer_cert", &cluster.peer_cert),
        ];
        let mut readable = true;
        for (key, file) in files {
            if let Some(why) = unreadable(file) {
                add(key, why);
                readable = false;
            }
        }
        if let Some(why) =
            unreadable(&cluster.peer_key).or_else(|| open_to(&cluster.peer_key, 0o007))
        {
            add("cluster.peer_key", why);
            readable = false;
        }
        // Built without the cluster, the peer TLS is never loaded (the
        // problem above says so).
        #[cfg(not(feature = "cluster"))]
        let _ = readable;
        #[cfg(feature = "cluster")]
        if readable
            && let Err(e) = crate::cluster::peer::PeerTls::load(
                &cluster.peer_ca,
                &cluster.peer_cert,
                &cluster.peer_key,
            )
            .map_err(crate::cluster::peer::PeerError::from)
            .and_then(|tls| crate::cluster::peer::configs(&tls))
        {
            add("cluster.peer_cert", e.to_string());
        }
    }
    for (key, message) in config.limits.problems() {
        add(&format!("limits.{key}"), message);
    }
    let (more, accounts) = check_accounts(doc, config);
    problems.extend(more);
    (problems, accounts)
}

/// Why a 32-byte hex key in the state folder (`file`) cannot be used, if
/// it is there and cannot; `removing` says what removing it costs.
fn corrupt_key(state_dir: &Path, file: &str, removing: &str) -> Option<String> {
    let path = state_dir.join(file);
    let text = match crate::state_files::read_optional(&path) {
        Ok(Some(text)) => text,
        Ok(None) => return None,
        Err(e) => return Some(e.to_string()),
    };
    crate::state_files::decode_hex32(&path, text.trim())
        .err()
        .map(|e| format!("{e} (remove it: the edge makes a new one, and {removing})"))
}

/// Accounts from the tokens file and the `[[accounts]]`: each token
/// readable, private and long enough, no name given twice.
/// Also how many accounts there are.
fn check_accounts(doc: &Doc<'_>, config: &ConfigFile) -> (Vec<Problem>, usize) {
    let mut problems = Vec::new();
    // (name, token, the key it came from)
    let mut tokens: Vec<(String, String, String)> = Vec::new();
    let mut names: Vec<String> = Vec::new();
    if let Some(agents) = &config.agents {
        let file = &agents.tokens_file;
        let key = "agents.tokens_file";
        match secret(file).and_then(|t| {
            toml::from_str::<BTreeMap<String, String>>(&t).map_err(|e| error_at(file, &t, &e))
        }) {
            Ok(read) => {
                for (name, token) in read {
                    names.push(name.clone());
                    tokens.push((name, token, key.into()));
                }
            }
            Err(why) => problems.push(doc.problem(key, why)),
        }
    }
    for (i, account) in config.accounts.iter().enumerate() {
        let key = format!("accounts[{i}]");
        match (&account.token, &account.token_file) {
            (Some(token), None) => {
                // A token in the file makes the file a secret.
                if let Some(why) = open_to(doc.path(), 0o077) {
                    problems.push(doc.problem(
                        format!("{key}.token"),
                        format!("{why} (it holds this token; or move it to a token_file)"),
                    ));
                }
                tokens.push((account.name.clone(), token.clone(), format!("{key}.token")));
            }
            (None, Some(file)) => {
                let key = format!("{key}.token_file");
                match secret(file) {
                    Ok(token) => tokens.push((account.name.clone(), token.trim().into(), key)),
                    Err(why) => problems.push(doc.problem(&key, why)),
                }
            }
            _ => problems
                .push(doc.problem(&key, ConfigError::Token(account.name.clone()).to_string())),
        }
        if names.contains(&account.name) {
            problems.push(doc.problem(
                format!("{key}.name"),
                ConfigError::DuplicateAccount(account.name.clone()).to_string(),
            ));
        }
        names.push(account.name.clone());
    }
    for (i, (name, token, key)) in tokens.iter().enumerate() {
        if token.len() < MIN_TOKEN_LEN {
            problems.push(doc.problem(key, AccountError::ShortToken(name.clone()).to_string()));
        } else if let Some((first, ..)) = tokens[..i].iter().find(|(_, t, _)| t == token) {
            problems.push(doc.problem(
                key,
                AccountError::SharedToken(first.clone(), name.clone()).to_string(),
            ));
        }
    }
    if names.is_empty() && problems.is_empty() {
        problems.push(doc.problem("accounts", ConfigError::NoAccounts.to_string()));
    }
    (problems, names.len())
}

/// One line: what the edge would run.
fn summary(path: &Path, config: &ConfigFile, accounts: usize) -> String {
    let listen = &config.listen;
    let mut listeners = Vec::new();
    if let Some(a) = listen.https {
        listeners.push(format!("https {a}"));
    }
    if let Some(a) = listen.http {
        listeners.push(format!("http {a}"));
    }
    listeners.push(format!("quic {}", listen.quic));
    if let Some(a) = listen.dns {
        listeners.push(format!("dns {a}"));
    }
    if let Some(cluster) = &config.cluster {
        listeners.push(format!(
            "peer {} (advertised as {}, etcd at {})",
            cluster.peer_listen,
            cluster.advertise,
            cluster.etcd.join(", ")
        ));
    }
    let certificate = if config.acme.is_some() {
        "acme"
    } else {
        "files"
    };
    format!(
        "{}: ok: domain {}, certificate from {certificate}, {accounts} account{}, listening {}",
        path.display(),
        config.domain,
        if accounts == 1 { "" } else { "s" },
        listeners.join(", ")
    )
}
