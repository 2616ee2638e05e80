//! `calvin-gateway check-config FILE`, run as an operator would before a
//! restart: every problem with its key and line, exit 1; a one-line
//! summary, exit 0. `serve` and `mcp` refuse the same file with the same
//! report, and start nothing.

use std::path::{Path, PathBuf};
use std::process::Output;

use calvin_tests::{binary, line_of, stderr_lines, write_secret};

/// A directory with what a hosted gateway names: a private registration
/// token, a workspace file, a launcher, and room for the rest.
struct Setup {
    dir: tempfile::TempDir,
}

impl Setup {
    fn new() -> Self {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        write_secret(&dir.path().join("gateway.token"), "0123456789abcdef\n");
        std::fs::write(
            dir.path().join("repos.toml"),
            "[[repos]]\nname = \"web\"\nurl = \"https://github.com/acme/web.git\"\n\n\
             [[repos]]\nname = \"api\"\nurl = \"https://github.com/acme/api.git\"\n",
        )
        .expect("repos.toml");
        let launcher = dir.path().join("start-session");
        std::fs::write(&launcher, "#!/bin/sh\n").expect("launcher");
        std::fs::set_permissions(&launcher, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        Self { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A configuration that passes, with `extra` at the end of its
    /// `[permissions]` table.
    fn config(&self, extra: &str) -> String {
        format!(
            r#"mode = "hosted"
agent_socket = "{socket}"

[slack]
api_url = "http://127.0.0.1:1/api/"
socket_connections = 2
reconnect_secs = 5

[secrets]
store_dir = "{store}"
runtime_dir = "{run}"

[launcher]
command = ["{launcher}", "--channel", "{{channel}}"]
timeout_secs = 30

[workspace]
file = "repos.toml"
cache_dir = "cache/repos"

[serve]
listen = "127.0.0.1:8765"
token_file = "{token}"

[daemon]
url = "http://127.0.0.1:8765"

[permissions]
{extra}
"#,
            socket = self.path("agent/agent.sock").display(),
            store = self.path("secrets").display(),
            run = self.path("run").display(),
            launcher = self.path("start-session").display(),
            token = self.path("gateway.token").display(),
        )
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, text).expect("config");
        path
    }
}

fn gateway(args: &[&str]) -> Output {
    std::process::Command::new(binary("calvin-gateway"))
        .args(args)
        .env_remove("SLACK_BOT_TOKEN")
        .output()
        .expect("calvin-gateway runs")
}

fn check(config: &Path) -> Output {
    gateway(&["check-config", &config.display().to_string()])
}

#[test]
fn a_good_config_passes_with_a_one_line_summary() {
    let s = Setup::new();
    let path = s.write("gateway.toml", &s.config(""));
    let out = check(&path);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout,
        format!(
            "{}: ok: mode hosted, serve on 127.0.0.1:8765, agent at {}, daemon at \
             http://127.0.0.1:8765, 2 workspace repositories, uploads up to 104857600 bytes, \
             secrets in {}\n",
            path.display(),
            s.path("agent/agent.sock").display(),
            s.path("secrets").display()
        )
    );
    assert!(out.stderr.is_empty());
    // Checking makes nothing.
    for made in ["agent", "secrets", "run", "cache"] {
        assert!(!s.path(made).exists(), "{made}");
    }
}

#[test]
fn without_store_dir_the_summary_names_the_default_secret_folder() {
    let s = Setup::new();
    let config = s.config("").replace(
        &format!("store_dir = \"{}\"\n", s.path("secrets").display()),
        "",
    );
    let path = s.write("gateway.toml", &config);
    let run = |env: &[(&str, &Path)]| {
        let mut command = std::process::Command::new(binary("calvin-gateway"));
        command
            .args(["check-config", &path.display().to_string()])
            .env_remove("XDG_STATE_HOME")
            .env_remove("SLACK_BOT_TOKEN");
        for (k, v) in env {
            command.env(k, v);
        }
        let out = command.output().expect("calvin-gateway runs");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let stdout = run(&[("XDG_STATE_HOME", &s.path("state"))]);
    assert!(
        stdout.ends_with(&format!(
            ", secrets in {} (the default)\n",
            s.path("state/calvin/secrets").display()
        )),
        "{stdout}"
    );
    let stdout = run(&[("HOME", &s.path("home"))]);
    assert!(
        stdout.ends_with(&format!(
            ", secrets in {} (the default)\n",
            s.path("home/.local/state/calvin/secrets").display()
        )),
        "{stdout}"
    );
    // A file where the state folder should be: the gateway would run, and
    // request_secret would refuse, naming it.
    std::fs::write(s.path("blocked"), "a file\n").expect("file");
    let stdout = run(&[("XDG_STATE_HOME", &s.path("blocked"))]);
    assert!(
        stdout.contains(&format!(
            ", no usable secret store folder (cannot create {}: {} is not a directory): set \
             [secrets] store_dir",
            s.path("blocked/calvin/secrets").display(),
            s.path("blocked").display()
        )),
        "{stdout}"
    );
    assert!(!s.path("state").exists(), "checking makes nothing");
}

#[test]
fn every_problem_is_named_with_its_key_and_line_in_line_order() {
    let s = Setup::new();
    std::fs::set_permissions(
        s.path("gateway.token"),
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .expect("chmod");
    let text = s
        .config("colour = \"blue\"\ndecision_timeout_secs = 86401")
        .replace("repos.toml", "missing.toml")
        .replace("listen = \"127.0.0.1:8765\"", "listen = \"0.0.0.0:8765\"")
        .replace(
            "url = \"http://127.0.0.1:8765\"",
            "url = \"https://example.com\"",
        );
    let path = s.write("gateway.toml", &text);
    let out = check(&path);
    assert_eq!(out.status.code(), Some(1));
    let at = |start: &str| format!("{}:{}: ", path.display(), line_of(&text, start));
    let want = vec![
        format!(
            "{}workspace.file: cannot read the workspace file {}: No such file or directory (os \
             error 2)",
            at("file ="),
            s.path("missing.toml").display()
        ),
        format!(
            "{}serve.listen: 0.0.0.0:8765: the gateway daemon listens on loopback only",
            at("listen =")
        ),
        format!(
            "{}serve.token_file: {} holds a secret but is open to its group or others (mode \
             0644): chmod 600 it",
            at("token_file ="),
            s.path("gateway.token").display()
        ),
        format!(
            "{}daemon.url: \"https://example.com\": the daemon is reached over plain http on \
             loopback only",
            at("url = \"https")
        ),
        format!(
            "{}permissions.colour: unknown field `colour`, expected one of `allow_users`, \
             `timeout_secs`, `decision_timeout_secs`",
            at("colour =")
        ),
        format!(
            "{}permissions.decision_timeout_secs: decision_timeout_secs must be from 1 to 86400, \
             got 86401",
            at("decision_timeout_secs =")
        ),
        format!("calvin-gateway: {} has 6 problems", path.display()),
    ];
    assert_eq!(stderr_lines(&out), want);
    assert!(out.stdout.is_empty());
}

/// What the mode needs, paths written as a shell would take them, and
/// the workspace's own problems, each at its line.
#[test]
fn the_mode_paths_and_workspace_are_named() {
    let s = Setup::new();
    std::fs::write(s.path("not-a-dir"), "").expect("file");
    let text = s
        .config("")
        .replace(
            &format!("agent_socket = \"{}\"\n", s.path("agent/agent.sock").display()),
            "",
        )
        .replace(
            &format!("store_dir = \"{}\"", s.path("secrets").display()),
            "store_dir = \"~/secrets\"",
        )
        .replace(
            &format!("runtime_dir = \"{}\"", s.path("run").display()),
            &format!("runtime_dir = \"{}\"", s.path("not-a-dir/run").display()),
        )
        .replace(
            "file = \"repos.toml\"",
            "repos = [\n  { name = \"web\", url = \"https://x/a/web\" },\n  { name = \"WEB\", url = \
             \"https://x/b/web2\" },\n]",
        );
    let path = s.write("gateway.toml", &text);
    let out = check(&path);
    assert_eq!(out.status.code(), Some(1));
    let at = |start: &str| format!("{}:{}: ", path.display(), line_of(&text, start));
    assert_eq!(
        stderr_lines(&out),
        [
            format!(
                "{}mode: mode = \"hosted\" needs agent_socket: the calvin agent's control socket",
                at("mode =")
            ),
            format!(
                "{}secrets.store_dir: \"~/secrets\" is not a full path: ~ and $VARIABLES are not \
                 expanded, and a relative path would be taken from wherever the program starts",
                at("store_dir =")
            ),
            format!(
                "{}secrets.runtime_dir: cannot create {}: {} is not a directory",
                at("runtime_dir ="),
                s.path("not-a-dir/run").display(),
                s.path("not-a-dir").display()
            ),
            format!(
                "{}workspace.repos[1].name: the workspace repositories \"web\" and \"WEB\" have \
                 the same name (names are compared ignoring case)",
                at("  { name = \"WEB\"")
            ),
            format!("calvin-gateway: {} has 4 problems", path.display()),
        ]
    );
}

/// A Mattermost section with what it needs.
const MATTERMOST: &str =
    "[mattermost]\nurl = \"https://chat.example.com\"\nchannel = \"ybndrfg8ejkmcpqxot1uwisza3\"\n";

/// A gateway serves one chat platform: neither section, or both, is a
/// problem named in the report; either alone passes.
#[test]
fn the_chat_platform_is_one_section_exactly() {
    let s = Setup::new();
    let with = |platform: &str| {
        let text = format!(
            "mode = \"one-machine\"\n[serve]\ntoken_file = \"{}\"\n{platform}",
            s.path("gateway.token").display()
        );
        check(&s.write("platform.toml", &text))
    };
    let file = s.path("platform.toml").display().to_string();
    let neither = with("");
    assert_eq!(neither.status.code(), Some(1));
    assert!(
        stderr_lines(&neither)[0].starts_with(&format!(
            "{file}: slack: no chat platform: add a [slack] section"
        )),
        "{:?}",
        stderr_lines(&neither)
    );
    let both = with(&format!("[slack]\n{MATTERMOST}"));
    assert_eq!(both.status.code(), Some(1));
    assert!(
        stderr_lines(&both)[0].contains("mattermost: both [slack] and [mattermost] are set"),
        "{:?}",
        stderr_lines(&both)
    );
    for one in ["[slack]\n", MATTERMOST] {
        let out = with(one);
        assert!(
            out.status.success(),
            "{one}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // A Mattermost section's own values, each named on its line.
    let bad = with(
        "[mattermost]\nurl = \"http://chat.example.com\"\nchannel = \"C0123\"\ncallback_url = \"x\"\n",
    );
    let lines = stderr_lines(&bad);
    assert!(
        lines[0].contains(":5: mattermost.url:") && lines[0].contains("loopback"),
        "{lines:?}"
    );
    assert!(lines[1].contains(":6: mattermost.channel:"), "{lines:?}");
    assert!(
        lines[2].contains(":7: mattermost.callback_url:"),
        "{lines:?}"
    );
}

/// Each duration and limit passes at its bounds and is refused one past
/// either, named.
#[test]
fn every_limit_passes_at_its_bounds_and_fails_one_past() {
    let s = Setup::new();
    for (table, key, min, max) in [
        ("slack", "socket_connections", 1u64, 10u64),
        ("slack", "reconnect_secs", 1, 300),
        ("mattermost", "reconnect_secs", 1, 300),
        ("permissions", "timeout_secs", 1, 86_400),
        ("permissions", "decision_timeout_secs", 1, 86_400),
        ("launcher", "timeout_secs", 1, 600),
        ("uploads", "max_bytes", 1, 100 << 20),
    ] {
        // The platform's section, with the key when it is the platform's.
        let platform = match table {
            "mattermost" => MATTERMOST,
            "slack" => "[slack]\n",
            _ => "[slack]\n",
        };
        let text = |value: u64| {
            let head = format!(
                "mode = \"one-machine\"\n[serve]\ntoken_file = \"{}\"\n{platform}",
                s.path("gateway.token").display()
            );
            if platform.starts_with(&format!("[{table}]")) {
                format!("{head}{key} = {value}\n")
            } else {
                format!("{head}[{table}]\n{key} = {value}\n")
            }
        };
        let line = text(0).lines().count();
        let with = |value: u64| check(&s.write("limit.toml", &text(value)));
        for value in [min, max] {
            let out = with(value);
            assert!(
                out.status.success(),
                "{table}.{key} = {value}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        for value in [min - 1, max + 1] {
            let out = with(value);
            assert_eq!(out.status.code(), Some(1), "{table}.{key} = {value}");
            assert_eq!(
                stderr_lines(&out)[0],
                format!(
                    "{}:{line}: {table}.{key}: {key} must be from {min} to {max}, got {value}",
                    s.path("limit.toml").display()
                )
            );
        }
    }
}

/// `serve` and `mcp` run the same checks first: the same report, and
/// nothing started or made.
#[test]
fn serve_and_mcp_refuse_a_bad_file_with_the_same_report() {
    let s = Setup::new();
    std::fs::remove_file(s.path("gateway.token")).expect("rm");
    let text = s.config("timeout_secs = 0");
    let path = s.write("gateway.toml", &text);
    let report = stderr_lines(&check(&path));
    assert_eq!(
        report,
        [
            format!(
                "{}:{}: permissions.timeout_secs: timeout_secs must be from 1 to 86400, got 0",
                path.display(),
                line_of(&text, "timeout_secs = 0")
            ),
            format!("calvin-gateway: {} has 1 problem", path.display()),
        ]
    );
    let config = path.display().to_string();
    let session = s.path("session").display().to_string();
    for args in [
        vec!["serve", "--config", &config, "--listen", "127.0.0.1:0"],
        vec![
            "mcp",
            "--config",
            &config,
            "--channel",
            "C0SESSION1",
            "--thread-ts",
            "1700000000.000100",
            "--session-dir",
            &session,
        ],
    ] {
        let out = gateway(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let mut want = report.clone();
        if let Some(last) = want.last_mut() {
            last.push_str("; nothing was started");
        }
        assert_eq!(stderr_lines(&out), want, "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}: nothing listened");
        // The daemon makes its token file first thing once it starts.
        assert!(!s.path("gateway.token").exists(), "{args:?}");
        assert!(!s.path("secrets").exists(), "{args:?}");
    }
}

/// deploy/gateway.toml stays a valid example: its only problems are what
/// this machine lacks (the files it names under /etc/calvin, and, not as
/// root, the right to make its state folders).
#[test]
fn the_deploy_example_has_no_problem_but_missing_files() {
    for example in ["gateway.toml", "gateway-mattermost.toml"] {
        deploy_example_has_no_problem_but_missing_files(example);
    }
}

fn deploy_example_has_no_problem_but_missing_files(name: &str) {
    let example = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(name);
    let out = check(&example);
    let lines = stderr_lines(&out);
    if out.status.success() {
        return;
    }
    let (count, problems) = lines.split_last().expect("a report");
    assert!(
        count.ends_with(" problems") || count.ends_with(" problem"),
        "{lines:?}"
    );
    let root = rustix::process::geteuid().is_root();
    for problem in problems {
        let missing = problem.contains(" /etc/calvin/")
            && problem.ends_with(": No such file or directory (os error 2)");
        let unwritable = !root
            && problem.contains(": cannot create /")
            && problem.ends_with("is not writable by this user");
        assert!(missing || unwritable, "{problem}\nin\n{}", lines.join("\n"));
    }
}
