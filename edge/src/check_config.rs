//! `calvin-edge check-config FILE`: everything wrong with an `edge.toml`,
//! each problem with its key and line, before a restart finds it. `serve`
//! runs the same checks before it starts.
//!
//! It reads the file as `serve` would (unknown keys, types and addresses,
//! through serde), and goes on past the first such error: the offending
//! line (or table) is blanked and the file read again, so one run names
//! every one. Then what serde cannot see: the files the configuration
//! names (present, readable, secrets not readable by others), the
//! certificate source, the zone, the accounts and their tokens, and every
//! limit's range.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use toml::de::{DeTable, DeValue};

use crate::StartError;
use crate::accounts::{AccountError, MIN_TOKEN_LEN};
use crate::config::{ConfigError, ConfigFile};
use crate::settings::{canonical_domain, out_of_range};

/// One thing wrong with a configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file it is in (the configuration, or a file it names).
    pub file: PathBuf,
    /// 1-based, when the problem is at a place in the file.
    pub line: Option<usize>,
    /// The dotted key (`limits.grace_period_secs`, `accounts[1].token`), or
    /// empty for the file as a whole.
    pub key: String,
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if !self.key.is_empty() {
            write!(f, ": {}", self.key)?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Errors serde reports one at a time; past this many, the rest wait for
/// the next run.
const MOST_READ_ERRORS: usize = 50;

/// Checks the configuration at `path`: the parsed file and a one-line
/// summary, or every problem found.
pub fn check(path: &Path) -> Result<(ConfigFile, String), Vec<Problem>> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        vec![Problem {
            file: path.to_owned(),
            line: None,
            key: String::new(),
            message: format!("cannot read {}: {e}", path.display()),
        }]
    })?;
    let doc = Doc {
        path,
        text: &text,
        table: DeTable::parse(&text).ok().map(|t| t.into_inner()),
    };
    let (config, mut problems) = doc.read();
    // In the file's order; those of no place (a missing key) last.
    let in_order =
        |problems: &mut Vec<Problem>| problems.sort_by_key(|p| p.line.unwrap_or(usize::MAX));
    let Some(config) = config else {
        in_order(&mut problems);
        return Err(problems);
    };
    // Keys blanked after a read error stand at their defaults now: what
    // is found wrong under them only repeats that error.
    let blanked: Vec<String> = problems.iter().map(|p| p.key.clone()).collect();
    let under = |key: &str, top: &str| {
        !top.is_empty()
            && (key == top
                || key.starts_with(&format!("{top}."))
                || key.starts_with(&format!("{top}[")))
    };
    let (more, accounts) = doc.check(&config);
    problems.extend(more.into_iter().filter(|p| {
        !blanked
            .iter()
            .any(|top| under(&p.key, top) || under(top, &p.key))
    }));
    in_order(&mut problems);
    if problems.is_empty() {
        let summary = summary(path, &config, accounts);
        Ok((config, summary))
    } else {
        Err(problems)
    }
}

/// The configuration's text, and its table (when it parses), to find
/// keys' lines in.
struct Doc<'a> {
    path: &'a Path,
    text: &'a str,
    table: Option<DeTable<'a>>,
}

impl Doc<'_> {
    fn line_at(&self, offset: usize) -> usize {
        self.text[..offset.min(self.text.len())]
            .bytes()
            .filter(|&b| b == b'\n')
            .count()
            + 1
    }

    fn problem(&self, key: impl Into<String>, message: impl Into<String>) -> Problem {
        let key = key.into();
        Problem {
            file: self.path.to_owned(),
            line: self.line_of(&key),
            key,
            message: message.into(),
        }
    }

    /// Reads the file as `serve` does, going on past each error serde
    /// reports by blanking what it was about; the configuration if it
    /// reads (with what was blanked at its defaults), and every error met.
    fn read(&self) -> (Option<ConfigFile>, Vec<Problem>) {
        let (_, syntax) = DeTable::parse_recoverable(self.text);
        if !syntax.is_empty() {
            let problems = syntax
                .iter()
                .map(|e| Problem {
                    file: self.path.to_owned(),
                    line: e.span().map(|s| self.line_at(s.start)),
                    key: String::new(),
                    message: e.message().trim().to_owned(),
                })
                .collect();
            return (None, problems);
        }
        let mut work = self.text.to_owned();
        let mut problems = Vec::new();
        for _ in 0..MOST_READ_ERRORS {
            let error = match toml::from_str::<ConfigFile>(&work) {
                Ok(config) => return (Some(config), problems),
                Err(error) => error,
            };
            let message = error.message().trim().to_owned();
            // An empty span is the whole document's (the root table).
            let span = error
                .span()
                .filter(|s| s.start < s.end && s.start < work.len());
            if let Some(field) = missing_field(&message) {
                // Named by its table; nothing to blank, so the read ends.
                let table = span
                    .as_ref()
                    .map(|s| locate(&work, s.start).0)
                    .unwrap_or_default();
                let key = if table.is_empty() {
                    field.to_owned()
                } else {
                    format!("{table}.{field}")
                };
                problems.push(Problem {
                    file: self.path.to_owned(),
                    line: self.line_of(&table),
                    key,
                    message,
                });
                return (None, problems);
            }
            let key = span
                .as_ref()
                .map(|s| locate(self.text, s.start).0)
                .unwrap_or_default();
            problems.push(Problem {
                file: self.path.to_owned(),
                line: span.as_ref().map(|s| self.line_at(s.start)),
                key,
                message,
            });
            match span {
                Some(span) if blank(&mut work, span.start) => {}
                _ => return (None, problems),
            }
        }
        (None, problems)
    }

    /// The line of a dotted key (`a.b`, `accounts[1].c`): its own, or that
    /// of its nearest table present in the file.
    fn line_of(&self, key: &str) -> Option<usize> {
        if key.is_empty() {
            return None;
        }
        let mut span = None;
        let mut here: &DeTable = self.table.as_ref()?;
        for part in key.split('.') {
            let (name, index) = match part.split_once('[') {
                Some((name, rest)) => (name, rest.trim_end_matches(']').parse::<usize>().ok()),
                None => (part, None),
            };
            let Some((k, v)) = here.get_key_value(name) else {
                break;
            };
            span = Some(k.span().start);
            let value = match (v.get_ref(), index) {
                (DeValue::Array(items), Some(i)) => match items.get(i) {
                    Some(item) => {
                        span = Some(item.span().start);
                        item
                    }
                    None => break,
                },
                _ => v,
            };
            match value.get_ref() {
                DeValue::Table(t) => here = t,
                _ => break,
            }
        }
        span.map(|s| self.line_at(s))
    }

    /// What serde cannot see.
    /// Also how many accounts there are.
    fn check(&self, config: &ConfigFile) -> (Vec<Problem>, usize) {
        let mut problems = Vec::new();
        let mut add = |key: &str, message: String| problems.push(self.problem(key, message));

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
        if config.state_dir.exists() && !config.state_dir.is_dir() {
            add(
                "state_dir",
                format!("{} is not a directory", config.state_dir.display()),
            );
        }
        match (&config.tls, &config.acme) {
            (Some(tls), None) => {
                if let Some(why) = unreadable(&tls.cert_file) {
                    add("tls.cert_file", why);
                }
                // A key may be shared with a group (Debian's ssl-cert), not
                // with everyone.
                if let Some(why) =
                    unreadable(&tls.key_file).or_else(|| open_to(&tls.key_file, 0o007))
                {
                    add("tls.key_file", why);
                }
            }
            (None, Some(acme)) => {
                if config.listen.dns.is_none() {
                    add("acme", StartError::AcmeWithoutDns.to_string());
                }
                if !(acme.directory.starts_with("https://")
                    || acme.directory.starts_with("http://"))
                {
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
        }
        if let Some(problem) = config
            .dns
            .ttl
            .and_then(|ttl| out_of_range("ttl", ttl.into(), 1, 86_400))
        {
            add("dns.ttl", problem);
        }
        for (key, message) in config.limits.problems() {
            add(&format!("limits.{key}"), message);
        }
        let (more, accounts) = self.check_accounts(config);
        problems.extend(more);
        (problems, accounts)
    }

    /// Accounts from the tokens file and the `[[accounts]]`: each token
    /// readable, private and long enough, no name given twice.
    /// Also how many accounts there are.
    fn check_accounts(&self, config: &ConfigFile) -> (Vec<Problem>, usize) {
        let mut problems = Vec::new();
        // (name, token, the key it came from)
        let mut tokens: Vec<(String, String, String)> = Vec::new();
        let mut names: Vec<String> = Vec::new();
        if let Some(agents) = &config.agents {
            let file = &agents.tokens_file;
            let key = "agents.tokens_file";
            match secret(file).and_then(|t| {
                toml::from_str::<BTreeMap<String, String>>(&t).map_err(|e| {
                    let line = e
                        .span()
                        .map(|s| t[..s.start.min(t.len())].matches('\n').count() + 1);
                    format!(
                        "{}{}: {}",
                        file.display(),
                        line.map(|l| format!(":{l}")).unwrap_or_default(),
                        e.message().trim()
                    )
                })
            }) {
                Ok(read) => {
                    for (name, token) in read {
                        names.push(name.clone());
                        tokens.push((name, token, key.into()));
                    }
                }
                Err(why) => problems.push(self.problem(key, why)),
            }
        }
        for (i, account) in config.accounts.iter().enumerate() {
            let key = format!("accounts[{i}]");
            match (&account.token, &account.token_file) {
                (Some(token), None) => {
                    tokens.push((account.name.clone(), token.clone(), format!("{key}.token")));
                }
                (None, Some(file)) => {
                    let key = format!("{key}.token_file");
                    match secret(file) {
                        Ok(token) => tokens.push((account.name.clone(), token.trim().into(), key)),
                        Err(why) => problems.push(self.problem(&key, why)),
                    }
                }
                _ => problems
                    .push(self.problem(&key, ConfigError::Token(account.name.clone()).to_string())),
            }
            if names.contains(&account.name) {
                problems.push(self.problem(
                    format!("{key}.name"),
                    ConfigError::DuplicateAccount(account.name.clone()).to_string(),
                ));
            }
            names.push(account.name.clone());
        }
        for (i, (name, token, key)) in tokens.iter().enumerate() {
            if token.len() < MIN_TOKEN_LEN {
                problems
                    .push(self.problem(key, AccountError::ShortToken(name.clone()).to_string()));
            } else if let Some((first, ..)) = tokens[..i].iter().find(|(_, t, _)| t == token) {
                problems.push(self.problem(
                    key,
                    AccountError::SharedToken(first.clone(), name.clone()).to_string(),
                ));
            }
        }
        if names.is_empty() && problems.is_empty() {
            problems.push(self.problem("accounts", ConfigError::NoAccounts.to_string()));
        }
        (problems, names.len())
    }
}

/// A secret file's text: readable, and open to its owner alone.
fn secret(path: &Path) -> Result<String, String> {
    if let Some(why) = unreadable(path).or_else(|| open_to(path, 0o077)) {
        return Err(why);
    }
    std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

/// The field a "missing field `x`" error names.
fn missing_field(message: &str) -> Option<&str> {
    message.strip_prefix("missing field `")?.split('`').next()
}

/// Why a file cannot be read, if it cannot.
fn unreadable(path: &Path) -> Option<String> {
    match std::fs::File::open(path) {
        Ok(file) => match file.metadata() {
            Ok(meta) if meta.is_file() => None,
            Ok(_) => Some(format!("{} is not a file", path.display())),
            Err(e) => Some(format!("cannot read {}: {e}", path.display())),
        },
        Err(e) => Some(format!("cannot read {}: {e}", path.display())),
    }
}

/// Why a secret file is too open, if any of the permission bits in `mask`
/// is set.
fn open_to(path: &Path, mask: u32) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path).ok()?.permissions().mode() & 0o777;
    (mode & mask != 0).then(|| {
        let who = if mask & 0o070 != 0 {
            "its group or others"
        } else {
            "others"
        };
        format!(
            "{} holds a secret but is open to {who} (mode {mode:04o}): chmod {} it",
            path.display(),
            if mask & 0o070 != 0 { "600" } else { "o-rwx" }
        )
    })
}

/// What holds `offset` in `text`: the dotted key of the deepest entry
/// whose key or value holds it, and that entry's span (key to the end of
/// its value) unless it is a table.
fn locate(text: &str, offset: usize) -> (String, Option<(usize, usize)>) {
    let Ok(table) = DeTable::parse(text) else {
        return (String::new(), None);
    };
    let mut path = Vec::new();
    let entry = find(table.get_ref(), offset, &mut path).flatten();
    (path.join("."), entry)
}

/// Pushes onto `path` the keys down to the entry that holds `offset`;
/// `None` if no entry of `table` does, else the entry's span unless it is
/// a table.
fn find(table: &DeTable, offset: usize, path: &mut Vec<String>) -> Option<Option<(usize, usize)>> {
    for (k, v) in table {
        let span = (k.span().start, v.span().end.max(k.span().end));
        let own = k.span().contains(&offset)
            || v.span().contains(&offset)
            || (span.0..span.1).contains(&offset);
        let name = k.get_ref().to_string();
        match v.get_ref() {
            // A table's entries may lie anywhere (under its header, or
            // dotted keys): it holds the offset if one of them does.
            DeValue::Table(t) => {
                path.push(name);
                match find(t, offset, path) {
                    Some(found) => return Some(found),
                    None if own => return Some(None),
                    None => path.pop(),
                };
            }
            DeValue::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    let DeValue::Table(t) = item.get_ref() else {
                        continue;
                    };
                    path.push(format!("{name}[{i}]"));
                    match find(t, offset, path) {
                        Some(found) => return Some(found),
                        None if item.span().contains(&offset) => return Some(None),
                        None => path.pop(),
                    };
                }
                if own {
                    path.push(name);
                    return Some(Some(span));
                }
            }
            _ if own => {
                path.push(name);
                return Some(Some(span));
            }
            _ => {}
        }
    }
    None
}

/// Blanks (to spaces, keeping every offset and line) what an error at
/// `offset` is about: a table from its header to the next header, or the
/// whole entry (key to the end of its value, over as many lines as it
/// takes) that holds `offset`, widened to whole lines. False if nothing
/// was left to blank.
fn blank(text: &mut String, offset: usize) -> bool {
    let start = text[..offset].rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[offset..].find('\n').map_or(text.len(), |i| offset + i);
    let (_, entry) = locate(text, offset);
    let (start, end) = if text[start..line_end].trim_start().starts_with('[') && entry.is_none() {
        // A table: to the next header.
        let mut end = line_end;
        while end < text.len() {
            let next = text[end + 1..]
                .find('\n')
                .map_or(text.len(), |i| end + 1 + i);
            if text[end + 1..next].trim_start().starts_with('[') {
                break;
            }
            end = next;
        }
        (start, end)
    } else {
        match entry {
            Some((from, to)) => {
                let from = text[..from].rfind('\n').map_or(0, |i| i + 1);
                let to = text[to..].find('\n').map_or(text.len(), |i| to + i);
                (from.min(start), to.max(line_end))
            }
            None => (start, line_end),
        }
    };
    if text[start..end].trim().is_empty() {
        return false;
    }
    let blanked: String = text[start..end]
        .bytes()
        .map(|b| if b == b'\n' { '\n' } else { ' ' })
        .collect();
    text.replace_range(start..end, &blanked);
    true
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
