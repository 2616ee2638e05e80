//! `calvin-edge check-config FILE`, run as an operator would before a
//! restart: every problem with its key and line, exit 1; a one-line
//! summary, exit 0. `serve` refuses the same file with the same report.

use std::path::{Path, PathBuf};
use std::process::Output;

use calvin_tests::{binary, line_of, stderr_lines, write_secret};

const TOKEN: &str = "0123456789abcdef0123456789abcdef";

/// A directory with a certificate and key (from the dev CA, 0600), a
/// private tokens file, and room for configurations.
struct Setup {
    dir: tempfile::TempDir,
}

impl Setup {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        calvin_edge::dev::load_or_create(&dir.path().join("certs"), "preview.test").expect("certs");
        write_secret(
            &dir.path().join("tokens.toml"),
            &format!("team-a = \"{TOKEN}\"\nteam-b = \"{TOKEN}ff\"\n"),
        );
        Self { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A configuration that passes, with `limits` in its [limits] and
    /// `listen` in its [listen].
    fn config(&self, listen: &str, limits: &str) -> String {
        format!(
            r#"domain = "preview.test"
state_dir = "{state}"

[listen]
https = "127.0.0.1:0"
http = "127.0.0.1:0"
quic = "127.0.0.1:0"
{listen}

[tls]
cert_file = "{cert}"
key_file = "{key}"

[agents]
tokens_file = "{tokens}"

[limits]
{limits}
"#,
            state = self.path("state").display(),
            cert = self.path("certs/edge.pem").display(),
            key = self.path("certs/edge.key").display(),
            tokens = self.path("tokens.toml").display(),
        )
    }

    /// Writes a configuration, private (it may hold tokens).
    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.path(name);
        write_secret(&path, text);
        path
    }
}

/// `calvin-edge COMMAND... CONFIG`.
fn edge(command: &[&str], config: &Path) -> Output {
    std::process::Command::new(binary("calvin-edge"))
        .args(command)
        .arg(config)
        .output()
        .expect("calvin-edge runs")
}

fn check(config: &Path) -> Output {
    edge(&["check-config"], config)
}

#[test]
fn a_good_config_passes_with_a_one_line_summary() {
    let s = Setup::new();
    let path = s.write("edge.toml", &s.config("", "grace_period_secs = 5"));
    let out = check(&path);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    assert_eq!(
        stdout.trim(),
        format!(
            "{}: ok: domain preview.test, certificate from files, 2 accounts, listening https \
             127.0.0.1:0, http 127.0.0.1:0, quic 127.0.0.1:0",
            path.display()
        )
    );
    // Checking touches nothing: no state directory was made.
    assert!(!s.path("state").exists());
}

#[test]
fn every_problem_is_named_with_its_key_and_line() {
    let s = Setup::new();
    std::fs::set_permissions(
        s.path("tokens.toml"),
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .expect("chmod");
    let text = s
        .config(
            "dns = \"127.0.0.1:5353:1\"",
            "colour = \"blue\"\nupstream_idle_timeout_secs = 86401\nhello_timeout_secs = 300",
        )
        .replace("certs/edge.pem", "certs/missing.pem");
    let path = s.write("edge.toml", &text);
    let out = check(&path);
    assert_eq!(out.status.code(), Some(1));
    let lines = stderr_lines(&out);
    let at = |start: &str| format!("{}:{}: ", path.display(), line_of(&text, start));
    let want = [
        format!("{}listen.dns: invalid socket address syntax", at("dns =")),
        format!(
            "{}tls.cert_file: cannot read {}: No such file or directory (os error 2)",
            at("cert_file"),
            s.path("certs/missing.pem").display()
        ),
        format!(
            "{}agents.tokens_file: {} holds a secret but is open to its group or others (mode \
             0644): chmod 600 it",
            at("tokens_file"),
            s.path("tokens.toml").display()
        ),
        format!("{}limits.colour: unknown field `colour`", at("colour")),
        format!(
            "{}limits.upstream_idle_timeout_secs: upstream_idle_timeout_secs must be from 1 to \
             86400, got 86401",
            at("upstream_idle_timeout_secs")
        ),
    ];
    for want in &want {
        assert!(
            lines.iter().any(|l| l.starts_with(want.as_str())),
            "{want:?} not in\n{}",
            lines.join("\n")
        );
    }
    // hello_timeout_secs = 300 is its most, and passes; nothing else is
    // reported but the count.
    assert!(
        !lines
            .iter()
            .any(|l| l.contains(": limits.hello_timeout_secs:")),
        "{lines:?}"
    );
    assert_eq!(lines.len(), want.len() + 1, "{lines:?}");
    // In the file's order.
    let numbers: Vec<usize> = lines[..want.len()]
        .iter()
        .map(|l| {
            let rest = &l[path.display().to_string().len() + 1..];
            rest[..rest.find(':').expect("line number")]
                .parse()
                .expect("a number")
        })
        .collect();
    assert!(numbers.is_sorted(), "{numbers:?}");
    assert_eq!(
        lines.last().map(String::as_str),
        Some(format!("calvin-edge: {} has 5 problems", path.display()).as_str())
    );
}

/// Each duration at its bound passes and one past it fails, named.
#[test]
fn durations_are_bounded_at_both_ends() {
    let s = Setup::new();
    for (key, min, max) in [
        ("grace_period_secs", 0u64, 3600u64),
        ("hello_timeout_secs", 1, 300),
        ("reconnect_wait_secs", 0, 300),
        ("name_lease_secs", 0, 366 * 86_400),
    ] {
        let ok = s.write("ok.toml", &s.config("", &format!("{key} = {max}\n")));
        assert!(check(&ok).status.success(), "{key} = {max}");
        let ok = s.write("ok.toml", &s.config("", &format!("{key} = {min}\n")));
        assert!(check(&ok).status.success(), "{key} = {min}");
        let mut past = vec![max + 1];
        if min > 0 {
            past.push(min - 1);
        }
        for value in past {
            let bad = s.write("bad.toml", &s.config("", &format!("{key} = {value}\n")));
            let out = check(&bad);
            let lines = stderr_lines(&out);
            assert_eq!(out.status.code(), Some(1), "{key} = {value}");
            assert!(
                lines[0].contains(&format!(
                    "limits.{key}: {key} must be from {min} to {max}, got {value}"
                )),
                "{lines:?}"
            );
        }
    }
}

#[test]
fn an_absurd_duration_is_refused_by_serve_before_anything_starts() {
    let s = Setup::new();
    let path = s.write(
        "edge.toml",
        &s.config("", "grace_period_secs = 18446744073709551615\n"),
    );
    let out = edge(&["serve", "--config"], &path);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("limits.grace_period_secs: grace_period_secs must be from 0 to 3600"),
        "{err}"
    );
    assert!(err.contains("nothing was started"), "{err}");
    assert!(!s.path("state").exists(), "nothing was made");
}

#[test]
fn a_missing_file_and_accounts_are_named() {
    let s = Setup::new();
    write_secret(&s.path("short.token"), "short\n");
    let text = format!(
        "{}\n[[accounts]]\nname = \"team-a\"\ntoken = \"{TOKEN}\"\n\n[[accounts]]\nname = \
         \"team-c\"\ntoken_file = \"{}\"\n",
        s.config("", "").replace(
            &s.path("tokens.toml").display().to_string(),
            "/nonexistent/tokens.toml"
        ),
        s.path("short.token").display()
    );
    let path = s.write("edge.toml", &text);
    let out = check(&path);
    assert_eq!(out.status.code(), Some(1));
    let lines = stderr_lines(&out);
    assert_eq!(lines.len(), 3, "two problems and the count: {lines:?}");
    let short = line_of(
        &text,
        &format!("token_file = \"{}", s.path("short.token").display()),
    );
    for want in [
        format!(
            "{}:{}: agents.tokens_file: cannot read /nonexistent/tokens.toml: No such file or \
             directory (os error 2)",
            path.display(),
            line_of(&text, "tokens_file")
        ),
        format!(
            "{}:{short}: accounts[1].token_file: account \"team-c\": a token must be at least 32 \
             characters",
            path.display()
        ),
    ] {
        assert!(
            lines.contains(&want),
            "{want:?} not in\n{}",
            lines.join("\n")
        );
    }
}

/// A required key missing is named once, by its table, at the table's
/// line; a value over several lines is passed over whole, so its other
/// lines are not taken for more problems.
#[test]
fn a_missing_key_and_a_long_value_are_each_one_problem() {
    let s = Setup::new();
    let text = s.config("", "").replace(
        &format!("tokens_file = \"{}\"", s.path("tokens.toml").display()),
        "tokens-file = [\n  \"a\",\n  [\"b\"],\n]",
    );
    let path = s.write("edge.toml", &text);
    let out = check(&path);
    assert_eq!(out.status.code(), Some(1));
    let lines = stderr_lines(&out);
    let at = |start: &str| format!("{}:{}: ", path.display(), line_of(&text, start));
    assert_eq!(
        lines,
        vec![
            format!(
                "{}agents.tokens_file: missing field `tokens_file`",
                at("[agents]")
            ),
            format!(
                "{}agents.tokens-file: unknown field `tokens-file`, expected `tokens_file`",
                at("tokens-file")
            ),
            format!("calvin-edge: {} has 2 problems", path.display()),
        ]
    );
}

#[test]
fn two_accounts_with_one_token_are_refused() {
    let s = Setup::new();
    write_secret(
        &s.path("tokens.toml"),
        &format!("team-a = \"{TOKEN}\"\nteam-b = \"{TOKEN}\"\n"),
    );
    let path = s.write("edge.toml", &s.config("", ""));
    let out = check(&path);
    assert_eq!(out.status.code(), Some(1));
    let lines = stderr_lines(&out);
    assert_eq!(
        lines[0],
        format!(
            "{}:{}: agents.tokens_file: accounts \"team-a\" and \"team-b\" have the same token",
            path.display(),
            line_of(&s.config("", ""), "tokens_file")
        )
    );
    assert_eq!(lines.len(), 2, "{lines:?}");
}

#[test]
fn a_config_with_a_token_in_it_is_a_secret_and_its_files_are_read_as_serve_would() {
    let s = Setup::new();
    // An inline token in a file others can read; a certificate that is not
    // PEM; a name server that is not a DNS name; a state folder whose QUIC
    // reset key is corrupt.
    std::fs::write(s.path("not-a.pem"), "hello\n").expect("write");
    std::fs::create_dir_all(s.path("state")).expect("state");
    std::fs::write(s.path("state/reset.key"), "zz\n").expect("reset key");
    let text = format!(
        "{}\n[[accounts]]\nname = \"team-c\"\ntoken = \"{TOKEN}00\"\n",
        s.config("dns = \"127.0.0.1:0\"", "")
            .replace(
                &s.path("certs/edge.pem").display().to_string(),
                &s.path("not-a.pem").display().to_string()
            )
            .replace(
                "domain = \"preview.test\"\n",
                "domain = \"preview.test\"\npublic_ips = [\"192.0.2.1\"]\n"
            )
            .replace(
                "[agents]",
                "[dns]\nnameservers = [\"ns 1.preview.test\"]\n\n[agents]"
            )
    );
    let path = s.path("edge.toml");
    std::fs::write(&path, &text).expect("config");
    let mut perms = std::fs::metadata(&path).expect("meta").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o644);
    std::fs::set_permissions(&path, perms).expect("chmod");
    let out = check(&path);
    assert_eq!(out.status.code(), Some(1));
    let lines = stderr_lines(&out);
    let with = |key: &str| {
        lines
            .iter()
            .find(|l| l.contains(&format!(": {key}: ")))
            .unwrap_or_else(|| panic!("no {key} in {lines:?}"))
            .clone()
    };
    assert!(with("state_dir").contains("reset.key"), "{lines:?}");
    assert!(with("tls.cert_file").contains("not-a.pem"), "{lines:?}");
    assert!(
        with("dns.nameservers").contains("\"ns 1.preview.test\" is not a DNS name"),
        "{lines:?}"
    );
    let token = with("accounts[0].token");
    assert!(
        token.contains("mode 0644") && token.contains("chmod 600"),
        "{token}"
    );
    assert_eq!(lines.len(), 5, "four problems and the count: {lines:?}");

    // A corrupt share key is named too, with what removing it costs.
    std::fs::remove_file(s.path("state/reset.key")).expect("rm");
    std::fs::write(s.path("state/share.key"), "zz\n").expect("share key");
    let lines = stderr_lines(&check(&path));
    let state = lines
        .iter()
        .find(|l| l.contains(": state_dir: "))
        .unwrap_or_else(|| panic!("no state_dir in {lines:?}"));
    assert!(
        state.contains("share.key") && state.contains("every share link made so far stops working"),
        "{state}"
    );
    std::fs::remove_file(s.path("state/share.key")).expect("rm");

    // The same, private and with the files fixed: no problem.
    let fixed = text
        .replace(
            &s.path("not-a.pem").display().to_string(),
            &s.path("certs/edge.pem").display().to_string(),
        )
        .replace("ns 1.preview.test", "ns1.preview.test");
    let path = s.write("fixed.toml", &fixed);
    let out = check(&path);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // A state folder that cannot be made.
    std::fs::write(s.path("file"), "").expect("write");
    let blocked = fixed.replace(
        &s.path("state").display().to_string(),
        &s.path("file/state").display().to_string(),
    );
    let out = check(&s.write("blocked.toml", &blocked));
    assert_eq!(out.status.code(), Some(1));
    let lines = stderr_lines(&out);
    assert!(
        lines
            .iter()
            .any(|l| l.contains(": state_dir: cannot create")),
        "{lines:?}"
    );
}

#[test]
fn a_cluster_section_is_checked_with_its_certificates() {
    let s = Setup::new();
    let host: std::net::IpAddr = "127.0.0.1".parse().expect("ip");
    let certs = calvin_tests::cluster::ClusterCerts::generate(&s.path("cluster"), &[host]);
    let peer = &certs.edges[0];
    let cluster = |advertise: &str, cert: &Path, ttl: u64| {
        format!(
            "\n[cluster]\netcd = [\"http://127.0.0.1:2379\"]\npeer_listen = \"127.0.0.1:7443\"\n\
             advertise = \"{advertise}\"\npeer_ca = \"{}\"\npeer_cert = \"{}\"\npeer_key = \"{}\"\n\
             lease_ttl_secs = {ttl}\n",
            certs.ca.display(),
            cert.display(),
            peer.key.display()
        )
    };
    let good = s.config("", "") + &cluster("127.0.0.1:7443", &peer.cert, 2);
    let out = check(&s.write("good.toml", &good));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.trim().ends_with(
            "quic 127.0.0.1:0, peer 127.0.0.1:7443 (advertised as 127.0.0.1:7443, etcd at \
             http://127.0.0.1:2379)"
        ),
        "{stdout}"
    );

    // An advertised address without a port, a TTL one past its floor, a
    // certificate that is not PEM, a key others can read.
    std::fs::write(s.path("not-a.pem"), "hello\n").expect("write");
    let bad = s.config("", "") + &cluster("edge-1.example.com", &s.path("not-a.pem"), 1);
    let key = &peer.key;
    let mut perms = std::fs::metadata(key).expect("meta").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o644);
    std::fs::set_permissions(key, perms.clone()).expect("chmod");
    let out = check(&s.write("bad.toml", &bad));
    assert_eq!(out.status.code(), Some(1));
    let lines = stderr_lines(&out);
    let with = |key: &str| {
        lines
            .iter()
            .find(|l| l.contains(&format!(": {key}: ")))
            .unwrap_or_else(|| panic!("no {key} in {lines:?}"))
            .clone()
    };
    assert!(
        with("cluster.advertise").contains("\"edge-1.example.com\" is not HOST:PORT"),
        "{lines:?}"
    );
    assert!(
        with("cluster.lease_ttl_secs").contains("lease_ttl_secs"),
        "{lines:?}"
    );
    assert!(with("cluster.peer_key").contains("mode 0644"), "{lines:?}");
    assert_eq!(lines.len(), 4, "three problems and the count: {lines:?}");
    // The key private again: the certificate that is not PEM is named.
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o600);
    std::fs::set_permissions(key, perms).expect("chmod");
    let out = check(&s.path("bad.toml"));
    let lines = stderr_lines(&out);
    assert!(
        with_key(&lines, "cluster.peer_cert").contains("not-a.pem"),
        "{lines:?}"
    );
    // serve refuses the same file before it binds anything.
    let out = edge(&["serve", "--config"], &s.path("bad.toml"));
    assert_eq!(out.status.code(), Some(1));
}

fn with_key(lines: &[String], key: &str) -> String {
    lines
        .iter()
        .find(|l| l.contains(&format!(": {key}: ")))
        .unwrap_or_else(|| panic!("no {key} in {lines:?}"))
        .clone()
}

#[test]
fn http3_keys_are_checked() {
    let s = Setup::new();
    for (port, ok) in [("1", true), ("65535", true), ("0", false), ("65536", false)] {
        let text = s.config(
            &format!("http3 = true\nalt_svc = true\nalt_svc_port = {port}"),
            "",
        );
        let path = s.write("edge.toml", &text);
        let out = check(&path);
        let lines = stderr_lines(&out);
        if ok {
            assert_eq!(
                out.status.code(),
                Some(0),
                "alt_svc_port = {port}: {lines:?}"
            );
        } else {
            assert_eq!(out.status.code(), Some(1), "alt_svc_port = {port}");
            let want = format!(
                "{}:{}: listen.alt_svc_port: ",
                path.display(),
                line_of(&text, "alt_svc_port")
            );
            assert!(
                lines.iter().any(|l| l.starts_with(&want)),
                "alt_svc_port = {port}: {want:?} not in {lines:?}"
            );
        }
    }
    let text = s.config("http3 = \"yes\"", "");
    let path = s.write("edge.toml", &text);
    let out = check(&path);
    assert_eq!(out.status.code(), Some(1));
    let want = format!(
        "{}:{}: listen.http3: ",
        path.display(),
        line_of(&text, "http3")
    );
    assert!(
        stderr_lines(&out).iter().any(|l| l.starts_with(&want)),
        "{:?}",
        stderr_lines(&out)
    );
}
