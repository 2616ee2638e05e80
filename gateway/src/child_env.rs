//! The environment of the programs the gateway starts (git, the
//! launcher): an allowlist, so that what the gateway holds (SP_STORE_KEY,
//! which opens every session's secrets, the Slack tokens, the daemon's
//! token) never reaches them. git runs in repositories the session
//! controls, whose configuration can run programs; the launcher starts a
//! session whose shells must not see the key either.

use tokio::process::Command;

/// What a program needs from the gateway's environment to run as the
/// user: the locale, the home, the path, its runtime and state folders,
/// ssh (its agent and the user's command) and proxies.
const PASSED: [&str; 27] = [
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "LC_MESSAGES",
    "TZ",
    "TMPDIR",
    "XDG_RUNTIME_DIR",
    // Where the state folders are (the secret store's default among
    // them): a session's gateway finds the daemon's.
    "XDG_STATE_HOME",
    "TERM",
    "SSH_AUTH_SOCK",
    "GIT_SSH_COMMAND",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    // curl, and so git over http(s), reads the lower-case ones.
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
];

/// Clears `command`'s environment and passes [`PASSED`] and `extra` (more
/// names the operator chose) from the gateway's own.
pub fn restrict(command: &mut Command, extra: &[String]) {
    command.env_clear();
    let names = PASSED
        .iter()
        .copied()
        .chain(extra.iter().map(String::as_str));
    for name in names {
        if let Some(value) = std::env::var_os(name) {
            command.env(name, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn only_the_allowlist_and_the_chosen_names_pass() {
        // cargo runs tests with CARGO_MANIFEST_DIR set: chosen, it passes;
        // CARGO_PKG_NAME, also set, is not chosen and does not.
        let out = {
            let mut command = Command::new("env");
            restrict(&mut command, &["CARGO_MANIFEST_DIR".to_owned()]);
            command.env("CALVIN_TEST_SET_HERE", "1");
            command.output().await.expect("env runs")
        };
        let seen = String::from_utf8_lossy(&out.stdout);
        for line in seen.lines() {
            let name = line.split('=').next().unwrap_or_default();
            assert!(
                PASSED.contains(&name)
                    || name == "CALVIN_TEST_SET_HERE"
                    || name == "CARGO_MANIFEST_DIR",
                "{name} passed"
            );
        }
        assert!(seen.contains("CALVIN_TEST_SET_HERE=1"));
        assert!(seen.contains(&format!(
            "CARGO_MANIFEST_DIR={}",
            env!("CARGO_MANIFEST_DIR")
        )));
        assert!(std::env::var("CARGO_PKG_NAME").is_ok() && !seen.contains("CARGO_PKG_NAME="));
    }
}
