//! The deploy kit (`deploy/`), checked as far as a machine with no Docker
//! engine, no systemd running and no cluster allows:
//!
//! - the systemd units pass `systemd-analyze verify` (the agent's, a user
//!   unit, with `--user`), their binaries pointed at the ones built here;
//!   any line it prints that names one of them fails, as does its exit
//!   status; and each unit's command line is one the binary accepts;
//! - the Kubernetes manifests validate against the API's schemas
//!   (kubernetes-validate, offline, strict: no unknown field) of 1.26, the
//!   first with mixed-protocol LoadBalancers, and of the newest it knows;
//!   the Service exposes the edge's ports, the probes are the admin
//!   listener's, the state is on a volume, the pod is not root, and the
//!   ConfigMap's edge.toml passes check-config;
//! - the Dockerfile is read (it cannot be built here): several stages, the
//!   builder on the workspace's rust-version and the runtime's Debian
//!   release, its `cargo build -p` exactly the packages whose binaries the
//!   runtime copies, a numeric non-root USER, the entrypoint one of them;
//! - deploy/edge.toml passes check-config: as shipped, but for its files
//!   under /etc/calvin missing here; moved to a folder that has them,
//!   with no problem at all.
//!
//! systemd-analyze and kubernetes-validate are installed by tests/run.
//! Without one, its test prints why it skips, unless
//! `CALVIN_REQUIRE_DEPLOY_TOOLS` is set (CI sets it), when it fails.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use calvin_tests::{binary, write_secret};
use serde_json::Value;

/// Set (to anything but empty or `0`), a missing tool fails its test
/// instead of skipping it.
const REQUIRE_ENV: &str = "CALVIN_REQUIRE_DEPLOY_TOOLS";

/// The keys of edge.toml that name a file: the only ones whose problem may
/// be that the file is missing here.
const FILE_KEYS: [&str; 4] = [
    "agents.tokens_file",
    "tls.cert_file",
    "tls.key_file",
    "acme.ca_file",
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_owned()
}

fn deploy(path: &str) -> PathBuf {
    repo().join("deploy").join(path)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn output_text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Whether `program ARGS` runs; if not, prints why `test` skips (or fails
/// with [`REQUIRE_ENV`] set).
fn tool_or_skip(test: &str, program: &str, args: &[&str], install: &str) -> bool {
    let runs = Command::new(program)
        .args(args)
        .output()
        .is_ok_and(|out| out.status.success());
    if runs {
        return true;
    }
    let why = format!("`{program} {}` does not run ({install})", args.join(" "));
    let required = std::env::var(REQUIRE_ENV).is_ok_and(|v| !v.is_empty() && v != "0");
    assert!(
        !required,
        "{test} cannot run and {REQUIRE_ENV} is set: {why}"
    );
    eprintln!("skipped {test}: {why}");
    false
}

/// The workspace's binaries, each with its package, and the packages'
/// rust-version (from `cargo metadata`).
struct Workspace {
    bins: BTreeMap<String, String>,
    rust_version: String,
}

fn workspace() -> Workspace {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| env!("CARGO").to_owned());
    let out = Command::new(cargo)
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .current_dir(repo())
        .output()
        .expect("cargo metadata");
    assert!(out.status.success(), "{}", output_text(&out));
    let meta: Value = serde_json::from_slice(&out.stdout).expect("cargo metadata's JSON");
    let mut bins = BTreeMap::new();
    let mut rust_version = None;
    for package in meta["packages"].as_array().expect("packages") {
        let name = package["name"].as_str().expect("package name");
        if name == "calvin-edge" {
            rust_version = package["rust_version"].as_str().map(str::to_owned);
        }
        for target in package["targets"].as_array().expect("targets") {
            let is_bin = target["kind"]
                .as_array()
                .is_some_and(|kinds| kinds.iter().any(|k| k == "bin"));
            if is_bin {
                bins.insert(
                    target["name"].as_str().expect("target name").to_owned(),
                    name.to_owned(),
                );
            }
        }
    }
    Workspace {
        bins,
        rust_version: rust_version.expect("calvin-edge's rust-version"),
    }
}

// ---- systemd ----------------------------------------------------------

/// The units, and whether each is a user unit.
const UNITS: [(&str, bool); 3] = [
    ("calvin-edge.service", false),
    ("calvin-agent.service", true),
    ("calvin-gateway.service", false),
];

const INSTALLED: &str = "/usr/local/bin/";

/// `unit` with each `/usr/local/bin/NAME` replaced by the binary built here
/// (`systemd-analyze verify` checks that ExecStart's program exists).
fn with_built_binaries(unit: &str) -> String {
    let mut out = String::new();
    let mut rest = unit;
    while let Some(at) = rest.find(INSTALLED) {
        out.push_str(&rest[..at]);
        let after = &rest[at + INSTALLED.len()..];
        let end = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
            .unwrap_or(after.len());
        let path = binary(&after[..end]);
        let path = path.to_str().expect("a UTF-8 path");
        assert!(
            !path.contains(char::is_whitespace),
            "{path}: systemd would split it"
        );
        out.push_str(path);
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// The values of `key=` lines in `unit`.
fn unit_values<'a>(unit: &'a str, key: &str) -> Vec<&'a str> {
    unit.lines()
        .filter_map(|line| line.trim().strip_prefix(key)?.strip_prefix('='))
        .collect()
}

#[test]
fn systemd_units_pass_systemd_analyze_verify() {
    let mut files: Vec<String> = std::fs::read_dir(deploy("systemd"))
        .expect("deploy/systemd")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    let mut expected: Vec<String> = UNITS.iter().map(|(u, _)| u.to_string()).collect();
    expected.sort();
    assert_eq!(
        files, expected,
        "deploy/systemd holds the units checked here"
    );

    if !tool_or_skip(
        "systemd_units_pass_systemd_analyze_verify",
        "systemd-analyze",
        &["--version"],
        "apt-get install systemd",
    ) {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    // `--user` needs a runtime folder (it has no user manager to ask).
    let runtime = dir.path().join("runtime");
    std::fs::create_dir(&runtime).expect("runtime dir");
    std::fs::set_permissions(
        &runtime,
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .expect("chmod");
    for (name, user) in UNITS {
        let shipped = read(&deploy(&format!("systemd/{name}")));
        let exec_start = unit_values(&shipped, "ExecStart");
        assert_eq!(exec_start.len(), 1, "{name}: one ExecStart");
        assert!(
            exec_start[0].starts_with(INSTALLED),
            "{name}: ExecStart runs a binary of {INSTALLED}"
        );
        let path = dir.path().join(name);
        std::fs::write(&path, with_built_binaries(&shipped)).expect("write unit");
        let mut command = Command::new("systemd-analyze");
        if user {
            command.arg("--user").env("XDG_RUNTIME_DIR", &runtime);
        }
        let out = command
            .args(["verify", "--man=no"])
            .arg(&path)
            .output()
            .expect("systemd-analyze");
        let text = output_text(&out);
        // Lines about other units are the machine's, not ours.
        let ours: Vec<&str> = text.lines().filter(|l| l.contains("calvin-")).collect();
        assert!(
            out.status.success() && ours.is_empty(),
            "systemd-analyze{} verify {name}: {}\n{text}",
            if user { " --user" } else { "" },
            out.status
        );
        command_line_is_accepted(name, exec_start[0]);
    }
    // The edge renews (or rereads its certificate files) on SIGHUP.
    let edge = read(&deploy("systemd/calvin-edge.service"));
    assert_eq!(
        unit_values(&edge, "ExecReload"),
        ["/bin/kill -HUP $MAINPID"]
    );
}

/// ExecStart's command line, with `--help` after it, exits 0: every
/// subcommand and flag in it is one the binary knows. Specifiers (`%t`)
/// stand for a path; `${VAR}` for a value; `$VAR` (split into words, maybe
/// none) for nothing.
fn command_line_is_accepted(unit: &str, exec_start: &str) {
    let mut words = exec_start.split_whitespace();
    let program = words.next().expect("program");
    let name = program.strip_prefix(INSTALLED).expect("installed binary");
    let args: Vec<String> = words
        .filter(|w| !w.starts_with('$') || w.starts_with("${"))
        .map(|w| {
            if w.starts_with("${") {
                "value".to_owned()
            } else {
                let mut out = String::new();
                let mut chars = w.chars();
                while let Some(c) = chars.next() {
                    if c == '%' {
                        chars.next();
                        out.push_str("/specifier");
                    } else {
                        out.push(c);
                    }
                }
                out
            }
        })
        .collect();
    let out = Command::new(binary(name))
        .args(&args)
        .arg("--help")
        .output()
        .expect("run binary");
    assert!(
        out.status.success(),
        "{unit}: {name} {} --help: {}\n{}",
        args.join(" "),
        out.status,
        output_text(&out)
    );
}

// ---- Kubernetes -------------------------------------------------------

fn manifests() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(deploy("k8s"))
        .expect("deploy/k8s")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "deploy/k8s has no manifest");
    files
}

/// The documents of a YAML file, as JSON (PyYAML comes with
/// kubernetes-validate).
fn yaml_documents(path: &Path) -> Vec<Value> {
    let out = Command::new(calvin_tests::python::python())
        .args([
            "-c",
            "import json, sys, yaml; json.dump([d for d in yaml.safe_load_all(open(sys.argv[1])) if d], sys.stdout)",
        ])
        .arg(path)
        .output()
        .expect("the tests' Python");
    assert!(out.status.success(), "{}", output_text(&out));
    serde_json::from_slice(&out.stdout).expect("JSON")
}

#[test]
fn kubernetes_manifests_validate_and_hold_what_the_edge_needs() {
    let python = calvin_tests::python::python();
    if !tool_or_skip(
        "kubernetes_manifests_validate_and_hold_what_the_edge_needs",
        &python.to_string_lossy(),
        &["-m", "kubernetes_validate", "--version"],
        "tests/run --install-only puts kubernetes-validate in the tests' Python",
    ) {
        return;
    }
    let mut documents = Vec::new();
    for file in manifests() {
        // 1.26: mixed TCP and UDP on one LoadBalancer is GA from there.
        for version in [Some("1.26.0"), None] {
            let mut command = Command::new(&python);
            command.args(["-m", "kubernetes_validate", "--strict"]);
            if let Some(v) = version {
                command.args(["-k", v]);
            }
            let out = command.arg(&file).output().expect("kubernetes-validate");
            let text = output_text(&out);
            assert!(
                out.status.success() && !text.contains("ERROR") && !text.contains("WARN"),
                "kubernetes-validate {} {}:\n{text}",
                version.unwrap_or("(newest)"),
                file.display()
            );
            assert!(
                text.contains("passed for resource"),
                "{}: nothing validated\n{text}",
                file.display()
            );
        }
        documents.extend(yaml_documents(&file));
    }
    let of_kind =
        |kind: &str| -> Vec<&Value> { documents.iter().filter(|d| d["kind"] == kind).collect() };

    // The Services: visitors, agents and the zone's DNS. The DNS must
    // answer before the edge is ready (its first certificate's DNS-01
    // challenges are this edge's own answers): its Service publishes
    // addresses that are not ready.
    let mut exposed = BTreeSet::new();
    for service in of_kind("Service") {
        let early = service["spec"]["publishNotReadyAddresses"] == true;
        for port in service["spec"]["ports"].as_array().expect("ports") {
            let protocol = port["protocol"].as_str().unwrap_or("TCP");
            let number = port["port"].as_u64().expect("port");
            assert!(
                number != 53 || early,
                "the Service of port 53 must set publishNotReadyAddresses: {service}"
            );
            exposed.insert((protocol.to_owned(), number));
        }
    }
    for wanted in [
        ("TCP", 443),
        ("UDP", 443),
        ("TCP", 80),
        ("UDP", 53),
        ("TCP", 53),
    ] {
        assert!(
            exposed.contains(&(wanted.0.to_owned(), wanted.1)),
            "no Service exposes {}/{}",
            wanted.1,
            wanted.0
        );
    }

    // The edge's pod.
    let workloads: Vec<&Value> = of_kind("Deployment")
        .into_iter()
        .chain(of_kind("StatefulSet"))
        .collect();
    assert_eq!(workloads.len(), 1, "one Deployment or StatefulSet");
    let workload = workloads[0];
    let pod = &workload["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert!(
        pod["securityContext"]["runAsUser"]
            .as_u64()
            .is_some_and(|uid| uid != 0),
        "a fixed non-root uid"
    );
    let containers = pod["containers"].as_array().expect("containers");
    assert_eq!(containers.len(), 1, "one container: the edge");
    let edge = &containers[0];
    let probe = |kind: &str, path: &str| {
        let get = &edge[kind]["httpGet"];
        assert_eq!(get["path"], path, "{kind}");
        assert_eq!(get["port"], 9090, "{kind}: the admin listener");
    };
    probe("readinessProbe", "/readyz");
    probe("livenessProbe", "/healthz");
    let capabilities = &edge["securityContext"]["capabilities"];
    assert_eq!(capabilities["drop"], serde_json::json!(["ALL"]));
    assert_eq!(capabilities["add"], serde_json::json!(["NET_BIND_SERVICE"]));
    assert_eq!(edge["securityContext"]["allowPrivilegeEscalation"], false);

    // The state on a volume: a claim, or a claim template.
    let state = edge["volumeMounts"]
        .as_array()
        .expect("volumeMounts")
        .iter()
        .find(|m| m["mountPath"] == "/var/lib/calvin-edge")
        .expect("a volume at /var/lib/calvin-edge");
    let volume = &state["name"];
    let claimed = pod["volumes"].as_array().is_some_and(|volumes| {
        volumes
            .iter()
            .any(|v| v["name"] == *volume && v["persistentVolumeClaim"].is_object())
    }) || workload["spec"]["volumeClaimTemplates"]
        .as_array()
        .is_some_and(|t| t.iter().any(|c| c["metadata"]["name"] == *volume));
    assert!(claimed, "the state volume {volume} is a persistent claim");

    // The ConfigMap's edge.toml, with the tokens file the pod has.
    let config = of_kind("ConfigMap")
        .into_iter()
        .find_map(|c| c["data"]["edge.toml"].as_str())
        .expect("a ConfigMap with edge.toml");
    let args = edge["args"].as_array().expect("args");
    assert!(
        args.iter().any(|a| a == "/etc/calvin/edge.toml"),
        "the edge reads /etc/calvin/edge.toml: {args:?}"
    );
    // The probes' port is the admin listener's, on the pod's address.
    assert!(
        config.contains("[admin]\nlisten = \"0.0.0.0:9090\"\n"),
        "the ConfigMap's edge.toml: [admin] listen = \"0.0.0.0:9090\""
    );
    let out = Relocated::new(config).check();
    assert!(
        problems(&out).is_empty() && out.status.success(),
        "the ConfigMap's edge.toml:\n{}",
        output_text(&out)
    );
}

// ---- Dockerfile -------------------------------------------------------

/// One instruction: its keyword (upper case) and its arguments, the
/// continuation lines joined.
struct Instruction {
    keyword: String,
    args: String,
}

/// A stage: its base image, its name, its instructions after FROM.
struct Stage {
    image: String,
    name: Option<String>,
    instructions: Vec<Instruction>,
}

impl Stage {
    fn all<'a>(&'a self, keyword: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.instructions
            .iter()
            .filter(move |i| i.keyword == keyword)
            .map(|i| i.args.as_str())
    }
}

/// The stages of a Dockerfile. Lines starting with `#` are comments (a
/// parser directive is one too, here), within a continuation as well;
/// blank lines are nothing.
fn stages(text: &str) -> Vec<Stage> {
    let mut stages: Vec<Stage> = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(body) = line.strip_suffix('\\') {
            current.push_str(body);
            current.push(' ');
            continue;
        }
        current.push_str(line);
        let (keyword, args) = current
            .split_once(char::is_whitespace)
            .unwrap_or((&current, ""));
        let (keyword, args) = (keyword.to_ascii_uppercase(), args.trim().to_owned());
        current.clear();
        if keyword == "FROM" {
            let words: Vec<&str> = args
                .split_whitespace()
                .filter(|w| !w.starts_with("--"))
                .collect();
            let name = match words.as_slice() {
                [_, r#as, name] if r#as.eq_ignore_ascii_case("as") => Some(name.to_string()),
                [_] => None,
                _ => panic!("FROM {args}: expected IMAGE [AS NAME]"),
            };
            stages.push(Stage {
                image: words[0].to_owned(),
                name,
                instructions: Vec::new(),
            });
        } else {
            stages
                .last_mut()
                .unwrap_or_else(|| panic!("{keyword} before any FROM"))
                .instructions
                .push(Instruction { keyword, args });
        }
    }
    assert!(current.is_empty(), "the Dockerfile ends in a continuation");
    stages
}

/// The packages of the `cargo build` in `run` (`-p P`, `--package P`,
/// `--package=P`), and its other flags.
fn cargo_build(run: &str) -> Option<(BTreeSet<String>, BTreeSet<String>)> {
    let words: Vec<&str> = run.split_whitespace().collect();
    let at = words.windows(2).position(|w| w == ["cargo", "build"])?;
    let mut packages = BTreeSet::new();
    let mut flags = BTreeSet::new();
    let mut words = words[at + 2..]
        .iter()
        .take_while(|w| !["&&", "||", ";"].contains(w));
    while let Some(&word) = words.next() {
        if word == "-p" || word == "--package" {
            packages.insert(words.next().expect("a package after -p").to_string());
        } else if let Some(p) = word.strip_prefix("--package=") {
            packages.insert(p.to_owned());
        } else {
            flags.insert(word.to_owned());
        }
    }
    Some((packages, flags))
}

#[test]
fn dockerfile_builds_the_binaries_it_copies() {
    let text = read(&deploy("Dockerfile"));
    let stages = stages(&text);
    assert!(stages.len() >= 2, "a multi-stage build");
    let runtime = stages.last().expect("stages");
    let workspace = workspace();

    // The runtime copies binaries from one builder stage.
    let mut copied = BTreeSet::new();
    let mut from = None;
    for copy in runtime.all("COPY") {
        let words: Vec<&str> = copy.split_whitespace().collect();
        let Some(stage) = words.iter().find_map(|w| w.strip_prefix("--from=")) else {
            continue;
        };
        assert!(
            from.replace(stage.to_owned()).is_none_or(|f| f == stage),
            "binaries from one stage"
        );
        let paths: Vec<&str> = words
            .iter()
            .filter(|w| !w.starts_with("--"))
            .copied()
            .collect();
        let (destination, sources) = paths.split_last().expect("COPY SRC... DEST");
        assert_eq!(
            *destination, INSTALLED,
            "the binaries go where the units run them"
        );
        for source in sources {
            let name = Path::new(source)
                .file_name()
                .expect("a file")
                .to_string_lossy();
            copied.insert(name.into_owned());
        }
    }
    assert!(!copied.is_empty(), "the runtime stage copies no binary");
    let from = from.expect("COPY --from");
    let builder = stages
        .iter()
        .find(|s| s.name.as_deref() == Some(from.as_str()))
        .unwrap_or_else(|| panic!("no stage {from}"));

    // It builds them: `cargo build --release --locked -p ...`, exactly the
    // packages of the binaries copied, and takes each out of target/.
    let runs: Vec<&str> = builder.all("RUN").collect();
    let (packages, flags) = runs
        .iter()
        .find_map(|r| cargo_build(r))
        .expect("the builder runs cargo build");
    for flag in ["--release", "--locked"] {
        assert!(flags.contains(flag), "cargo build {flag}");
    }
    let mut of_copied = BTreeSet::new();
    for name in &copied {
        let package = workspace
            .bins
            .get(name)
            .unwrap_or_else(|| panic!("{name} is no binary of the workspace"));
        of_copied.insert(package.clone());
        assert!(
            runs.iter()
                .any(|r| r.contains(&format!("target/release/{name} "))
                    || r.ends_with(&format!("target/release/{name}"))),
            "the builder takes {name} out of target/release"
        );
    }
    assert_eq!(
        packages, of_copied,
        "cargo build -p: exactly the packages whose binaries are copied"
    );

    // A non-root numeric user, and an entrypoint it copied.
    let user = runtime
        .all("USER")
        .last()
        .expect("USER in the runtime stage");
    let uid: u32 = user
        .split(':')
        .next()
        .and_then(|u| u.parse().ok())
        .unwrap_or_else(|| panic!("USER {user}: a numeric uid"));
    assert_ne!(uid, 0, "USER is not root");
    let entrypoint: Vec<String> = serde_json::from_str(
        runtime
            .all("ENTRYPOINT")
            .last()
            .expect("ENTRYPOINT in the runtime stage"),
    )
    .expect("ENTRYPOINT in exec form");
    let program = entrypoint.first().expect("a program");
    let program = Path::new(program)
        .file_name()
        .expect("name")
        .to_string_lossy();
    assert!(copied.contains(program.as_ref()), "ENTRYPOINT {program}");

    // The edge's ports.
    let exposed: BTreeSet<&str> = runtime
        .all("EXPOSE")
        .flat_map(str::split_whitespace)
        .collect();
    for port in ["443/tcp", "443/udp", "80/tcp", "53/udp", "53/tcp"] {
        assert!(exposed.contains(port), "EXPOSE {port}");
    }

    // The builder's toolchain is the workspace's, on the runtime's Debian
    // release (whose glibc the binaries link).
    let tag = builder
        .image
        .strip_prefix("rust:")
        .unwrap_or_else(|| panic!("builder {}: a rust image", builder.image));
    let (version, release) = tag.split_once('-').expect("rust:VERSION-RELEASE");
    assert_eq!(version, workspace.rust_version, "the builder's Rust");
    let release = release.trim_start_matches("slim-");
    assert!(
        runtime.image.contains(release),
        "runtime {} on the builder's release {release}",
        runtime.image
    );
}

// ---- check-config -----------------------------------------------------

fn check_config(path: &Path) -> Output {
    Command::new(binary("calvin-edge"))
        .arg("check-config")
        .arg(path)
        .output()
        .expect("calvin-edge check-config")
}

/// The problem lines of a check-config run (its last line is the count).
fn problems(out: &Output) -> Vec<&str> {
    let stderr = std::str::from_utf8(&out.stderr).expect("UTF-8");
    stderr
        .lines()
        .filter(|l| !l.starts_with("calvin-edge: "))
        .collect()
}

/// An edge.toml whose /etc/calvin and /var/lib/calvin-edge are moved into
/// a temporary folder, with deploy/tokens.toml there (0600).
struct Relocated {
    _dir: tempfile::TempDir,
    config: PathBuf,
}

impl Relocated {
    fn new(config: &str) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let etc = dir.path().join("etc/calvin/");
        std::fs::create_dir_all(&etc).expect("etc");
        write_secret(&etc.join("tokens.toml"), &read(&deploy("tokens.toml")));
        let text = config
            .replace("/etc/calvin/", etc.to_str().expect("UTF-8"))
            .replace(
                "/var/lib/calvin-edge",
                dir.path().join("state").to_str().expect("UTF-8"),
            );
        let path = dir.path().join("edge.toml");
        std::fs::write(&path, text).expect("write edge.toml");
        Self {
            _dir: dir,
            config: path,
        }
    }

    fn check(&self) -> Output {
        check_config(&self.config)
    }
}

#[test]
fn example_edge_toml_passes_check_config() {
    // As shipped: a problem only for a file under /etc/calvin that this
    // machine lacks, and no other.
    let shipped = deploy("edge.toml");
    let out = check_config(&shipped);
    let mut missing = Vec::new();
    for problem in problems(&out) {
        let accepted = FILE_KEYS.iter().any(|key| {
            let Some((_, message)) = problem.split_once(&format!(": {key}: ")) else {
                return false;
            };
            let Some(path) = message
                .strip_prefix("cannot read ")
                .and_then(|m| m.strip_suffix(": No such file or directory (os error 2)"))
            else {
                return false;
            };
            path.starts_with("/etc/calvin/") && !Path::new(path).exists()
        });
        // A user who is not root cannot make /var/lib/calvin-edge; the
        // service's StateDirectory= makes it.
        let not_root = rustix::process::geteuid().as_raw() != 0;
        let state_here = problem.ends_with(
            ": state_dir: cannot create /var/lib/calvin-edge: /var/lib is not writable by this user",
        );
        let accepted = accepted || (not_root && state_here);
        assert!(
            accepted,
            "deploy/edge.toml: {problem}\n{}",
            output_text(&out)
        );
        missing.push(problem);
    }
    assert_eq!(
        out.status.success(),
        missing.is_empty(),
        "{}",
        output_text(&out)
    );

    // With those files present (deploy/tokens.toml, 0600): no problem.
    let relocated = Relocated::new(&read(&shipped));
    let out = relocated.check();
    assert!(out.status.success(), "{}", output_text(&out));
    let summary = String::from_utf8_lossy(&out.stdout);
    assert!(
        summary.contains("ok: domain preview.example.com, certificate from acme, 1 account, "),
        "{summary}"
    );
}

#[test]
fn example_gateway_toml_passes_check_config_with_its_files() {
    // deploy/gateway.toml with the files it names made in a temporary
    // folder standing for /etc/calvin, /var/lib, /var/cache and the
    // user's runtime folder: the launcher command (executable) and the
    // workspace file ([[repos]]).
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().to_str().expect("UTF-8");
    let etc = dir.path().join("etc/calvin");
    std::fs::create_dir_all(&etc).expect("etc");
    let launcher = etc.join("start-session");
    std::fs::write(&launcher, "#!/bin/sh\nexit 0\n").expect("launcher");
    std::fs::set_permissions(
        &launcher,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    std::fs::write(
        etc.join("workspace.toml"),
        "[[repos]]\nname = \"app\"\nurl = \"https://git.example.com/app.git\"\npublished = true\n",
    )
    .expect("workspace");
    let text = read(&deploy("gateway.toml"))
        .replace("/etc/calvin/", &format!("{root}/etc/calvin/"))
        .replace("/var/lib/calvin-gateway", &format!("{root}/lib"))
        .replace("/var/cache/calvin-gateway", &format!("{root}/cache"))
        .replace("/run/user/1000", &format!("{root}/run"));
    let config = dir.path().join("gateway.toml");
    std::fs::write(&config, text).expect("gateway.toml");
    let out = Command::new(binary("calvin-gateway"))
        .arg("check-config")
        .arg(&config)
        .output()
        .expect("calvin-gateway check-config");
    assert!(out.status.success(), "{}", output_text(&out));
    let summary = String::from_utf8_lossy(&out.stdout);
    assert!(
        summary.contains(": ok: mode hosted, serve on 127.0.0.1:8765, metrics on 127.0.0.1:9181, "),
        "{summary}"
    );
}

/// No Docker engine runs here: the stages' commands run on the host
/// instead, as far as a host allows. The builder's `cargo build` with its
/// flags but `--release` (the dev profile the tests built already: the
/// same packages, `--locked` against Cargo.lock), then its `install` into a
/// folder standing for `/out`; each binary there starts. The runtime's
/// `setcap` on the copied edge, then `getcap` reads it back (root, with
/// libcap2-bin). Not run: apt-get, groupadd and useradd, which would change
/// the host itself.
#[test]
fn the_stages_commands_run_on_the_host() {
    let text = read(&deploy("Dockerfile"));
    let stages = stages(&text);
    let builder = stages
        .iter()
        .find(|s| s.all("RUN").any(|r| r.contains("cargo build")))
        .expect("a stage runs cargo build");
    let run = builder
        .all("RUN")
        .find(|r| r.contains("cargo build"))
        .expect("RUN");
    // `--mount=...` flags, then `cargo build ... && install -D -m 0755 -t /out FILES`.
    let command = run
        .split_whitespace()
        .skip_while(|w| w.starts_with("--mount"))
        .collect::<Vec<_>>()
        .join(" ");
    let (build, install) = command.split_once(" && ").expect("cargo build && install");
    let build_args: Vec<&str> = build
        .split_whitespace()
        .skip(2)
        .filter(|a| *a != "--release")
        .collect();
    assert_eq!(
        &build.split_whitespace().take(2).collect::<Vec<_>>(),
        &["cargo", "build"]
    );
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| env!("CARGO").to_owned());
    let built = Command::new(cargo)
        .arg("build")
        .args(&build_args)
        .current_dir(repo())
        .output()
        .expect("cargo build");
    assert!(built.status.success(), "{}", output_text(&built));

    let out = tempfile::tempdir().expect("tempdir");
    let install: Vec<String> = install
        .split_whitespace()
        .map(|w| match w {
            "/out" => out.path().display().to_string(),
            _ => w.replace("target/release/", "target/debug/"),
        })
        .collect();
    assert_eq!(install[0], "install", "{install:?}");
    let installed = Command::new("install")
        .args(&install[1..])
        .current_dir(repo())
        .output()
        .expect("install runs");
    assert!(installed.status.success(), "{}", output_text(&installed));
    let copied: Vec<PathBuf> = std::fs::read_dir(out.path())
        .expect("out")
        .map(|e| e.expect("entry").path())
        .collect();
    assert_eq!(copied.len(), 4, "{copied:?}");
    // Each starts and is what its name says (calvin-send-file, run outside
    // a session, says it finds no gateway: under its own name).
    for binary in &copied {
        let name = binary.file_name().expect("name").to_string_lossy();
        let ran = Command::new(binary).arg("--help").output().expect("runs");
        assert!(
            output_text(&ran).contains(&*name),
            "{}: {}",
            binary.display(),
            output_text(&ran)
        );
    }

    // The runtime's capability, on the copied edge.
    let runtime = stages.last().expect("runtime");
    let setcap = runtime
        .all("RUN")
        .flat_map(|r| r.split(';'))
        .map(str::trim)
        .find(|c| c.starts_with("setcap "))
        .expect("the runtime sets the edge's capability");
    if rustix::process::geteuid().as_raw() != 0 {
        let required = std::env::var(REQUIRE_ENV).is_ok_and(|v| !v.is_empty() && v != "0");
        assert!(
            !required,
            "setcap needs root, and {REQUIRE_ENV} is set: run as root"
        );
        eprintln!("skipped setcap: it needs root");
        return;
    }
    if !tool_or_skip(
        "setcap",
        "setcap",
        &["-v", "-h"],
        "apt-get install libcap2-bin",
    ) {
        return;
    }
    let edge = out.path().join("calvin-edge");
    let words: Vec<String> = setcap
        .split_whitespace()
        .map(|w| match w {
            "/usr/local/bin/calvin-edge" => edge.display().to_string(),
            _ => w.to_owned(),
        })
        .collect();
    let set = Command::new(&words[0])
        .args(&words[1..])
        .output()
        .expect("setcap");
    assert!(set.status.success(), "{}", output_text(&set));
    let got = Command::new("getcap").arg(&edge).output().expect("getcap");
    assert!(
        String::from_utf8_lossy(&got.stdout).contains("cap_net_bind_service=ep"),
        "{}",
        output_text(&got)
    );
}
