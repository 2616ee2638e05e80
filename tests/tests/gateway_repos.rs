//! spawn_thread and checkout_repo with real git and local bare
//! repositories (file paths as remotes), driven by the MCP Python SDK over
//! stdio against the fake Slack.

use std::path::{Path, PathBuf};

use calvin_tests::gateway::{GatewaySetup, OWNER, assert_ok, assert_refused, call, drive, text};
use calvin_tests::git::{bare_repo, git};
use serde_json::{Value, json};

/// A self-hosted setup whose session directory holds a clone of a docs
/// repository, and a launcher script that records its arguments and
/// environment.
struct Spawn {
    setup: GatewaySetup,
    docs: PathBuf,
    record: PathBuf,
}

fn launcher_script(dir: &Path, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/bash\n{body}\n")).expect("script");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

async fn spawn_setup(launcher_body: Option<&str>) -> Spawn {
    let mut setup = GatewaySetup::new("self-hosted").await;
    setup.slack.add_user(OWNER, "Olive");
    setup.thread_ts = setup
        .slack
        .add_message(&setup.channel, OWNER, "the parent task", None);
    let root = setup.dir.path().to_owned();
    let bare = bare_repo(&root, "acme", "docs", &[("README.md", "# docs\n")]);
    let docs = setup.session_dir().join("docs");
    git(
        &root,
        &[
            "clone",
            "-q",
            bare.to_str().expect("p"),
            docs.to_str().expect("p"),
        ],
    );
    let brief = "# Plan\n\nWhat to do.\n\n## Step one\n\nFirst.\n";
    std::fs::create_dir_all(docs.join("briefs")).expect("dir");
    std::fs::write(docs.join("briefs/plan.md"), brief).expect("brief");
    git(&docs, &["add", "-A"]);
    git(&docs, &["commit", "-q", "-m", "the brief"]);
    git(&docs, &["push", "-q", "origin", "HEAD:main"]);
    let record = root.join("launched");
    let body = launcher_body.map(str::to_owned).unwrap_or_else(|| {
        format!(
            "printf '%s\\0' \"$@\" >> {r}\nprintf 'ENV %s %s %s %s %s\\0' \"$CALVIN_THREAD_TS\" \"$CALVIN_PARENT_THREAD_TS\" \"$CALVIN_ENV_FILE\" \"${{SP_STORE_KEY-unset}}\" \"${{MCP_TOOL_TIMEOUT-unset}}\" >> {r}",
            r = record.display()
        )
    });
    let script = launcher_script(&root, "start-session", &body);
    setup.extra = format!(
        "[launcher]\ncommand = [\"{}\", \"--channel\", \"{{channel}}\", \"--thread-ts\", \"{{thread_ts}}\", \
         \"--owner\", \"{{owner}}\", \"--model\", \"{{model}}\", \"--mode\", \"{{permission_mode}}\", \
         \"--brief\", \"{{brief}}\", \"--task\", \"{{task}}\", \"literal-{{channel}}-x\"]\ntimeout_secs = 10\n",
        script.display()
    );
    Spawn {
        setup,
        docs,
        record,
    }
}

/// The launcher's recorded runs: each run's arguments, then its `ENV`
/// line.
fn launches(record: &Path) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(record).unwrap_or_default();
    let mut runs = vec![vec![]];
    for field in text.split('\0').filter(|f| !f.is_empty()) {
        runs.last_mut().expect("run").push(field.to_owned());
        if field.starts_with("ENV ") {
            runs.push(vec![]);
        }
    }
    runs.pop();
    runs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spawn_thread_posts_the_task_and_starts_the_launcher_with_one_argument_each() {
    let s = spawn_setup(None).await;
    let setup = &s.setup;
    let task = "Fix the $(touch pwned) footer; echo `id` & ship";
    let out = drive(setup.stdio(json!([call(
        "spawn_thread",
        json!({"task": task, "brief": "docs/briefs/plan.md#step-one", "model": "fast"})
    ),])))
    .await;
    assert_ok(&out[0]);
    let posted = setup.slack.messages();
    assert_eq!(posted.len(), 1, "{posted:?}");
    let m = &posted[0];
    assert_eq!(m.channel, setup.channel);
    assert_eq!(m.thread_ts, None, "a new thread starts at the top level");
    let body = m.text.as_deref().expect("text");
    assert!(
        body.contains("Fix the $(touch pwned) footer; echo `id` &amp; ship"),
        "{body}"
    );
    assert!(
        body.contains("Brief: `docs/briefs/plan.md#step-one`"),
        "{body}"
    );
    assert!(
        body.contains(&format!("A new session for <@{OWNER}>")),
        "{body}"
    );
    let runs = launches(&s.record);
    assert_eq!(runs.len(), 1, "{runs:?}");
    let want: Vec<String> = [
        "--channel",
        &setup.channel,
        "--thread-ts",
        &m.ts,
        "--owner",
        OWNER,
        "--model",
        "fast",
        "--mode",
        "ask",
        "--brief",
        "docs/briefs/plan.md#step-one",
        "--task",
        task,
        &format!("literal-{}-x", setup.channel),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(runs[0][..want.len()], want[..]);
    let env_line = &runs[0][want.len()];
    let default_env = setup
        .runtime_dir()
        .join(format!("{}-{}/env.sh", setup.channel, m.ts));
    assert_eq!(
        env_line,
        &format!(
            "ENV {} {} {} unset 3660000",
            m.ts,
            setup.thread_ts,
            default_env.display()
        ),
        "the launcher never sees SP_STORE_KEY; the CLI waits past the decision bridge's hour"
    );
    assert!(
        !setup.session_dir().join("pwned").exists(),
        "no shell ran the task"
    );
    let st = &out[0]["structured"];
    assert_eq!(
        (st["model"].as_str(), st["permission_mode"].as_str()),
        (Some("fast"), Some("ask"))
    );
    assert_eq!(st["thread_ts"], m.ts.as_str());

    // Omitted, the model is the parent's; the permission mode always is.
    let mut args = setup.stdio_args();
    args.extend(["--model", "smart", "--permission-mode", "bypass"].map(|a| json!(a)));
    let args = Value::Array(args);
    let out = drive(setup.stdio_with(
        args,
        json!([call(
            "spawn_thread",
            json!({"task": "Write the changelog", "brief": "docs/briefs/plan.md"})
        ),]),
    ))
    .await;
    assert_ok(&out[0]);
    let runs = launches(&s.record);
    assert_eq!(&runs[1][6..10], ["--model", "smart", "--mode", "bypass"]);
    assert_eq!(runs[1][11], "docs/briefs/plan.md");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spawn_thread_refuses_a_brief_not_pushed_missing_or_outside_and_posts_nothing() {
    let s = spawn_setup(None).await;
    let setup = &s.setup;
    std::fs::write(s.docs.join("briefs/local.md"), "# Local\n").expect("file");
    git(&s.docs, &["add", "-A"]);
    git(&s.docs, &["commit", "-q", "-m", "not pushed"]);
    std::fs::write(setup.dir.path().join("outside.md"), "# Out\n").expect("file");
    std::fs::write(s.docs.join("briefs/plan.md"), "# Plan\n\nchanged\n").expect("edit");
    let spawn = |brief: &str| {
        call(
            "spawn_thread",
            json!({"task": "Do the thing", "brief": brief}),
        )
    };
    let out = drive(setup.stdio(json!([
        spawn("docs/briefs/local.md"),
        spawn("docs/briefs/missing.md"),
        spawn("../outside.md"),
        spawn("docs/README.txt"),
        spawn("docs/briefs/plan.md"),
        spawn("docs/README.md#nowhere"),
    ])))
    .await;
    assert_refused(
        &out[0],
        "docs/briefs/local.md is committed but not pushed: it is not on origin/main",
    );
    assert_refused(&out[1], "the brief docs/briefs/missing.md does not exist");
    assert_refused(&out[2], "the brief ../outside.md resolves to");
    assert_refused(&out[2], "outside the session directory");
    assert_refused(&out[3], "the brief docs/README.txt is not a .md file");
    assert_refused(
        &out[4],
        "docs/briefs/plan.md differs from the version on origin/main: push your changes first",
    );
    assert_refused(
        &out[5],
        "has no heading with the anchor #nowhere; its anchors are #docs",
    );
    for v in &out {
        assert!(text(v).starts_with("no thread was started: "), "{v}");
    }
    assert!(
        setup.slack.messages().is_empty(),
        "nothing is posted for a bad brief"
    );
    assert!(launches(&s.record).is_empty(), "the launcher never ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_a_code_channel_the_thread_starts_in_the_owners_dm_and_a_failed_launch_says_so() {
    let mut s = spawn_setup(Some(
        "echo 'starting' >&2; echo 'boom: no runner capacity' >&2; exit 7",
    ))
    .await;
    s.setup.extra.push_str(&format!(
        "[spawn]\ncode_channels = [\"{}\"]\n",
        s.setup.channel
    ));
    let setup = &s.setup;
    let out = drive(setup.stdio(json!([call(
        "spawn_thread",
        json!({"task": "Refactor the parser", "brief": "docs/briefs/plan.md"})
    ),])))
    .await;
    assert_refused(
        &out[0],
        "the session did not start: the launcher exited with status 7: boom: no runner capacity",
    );
    let posted = setup.slack.messages();
    assert_eq!(posted.len(), 1);
    assert!(
        posted[0].channel.starts_with('D'),
        "posted in the owner's DM: {:?}",
        posted[0]
    );
    let dm = setup
        .slack
        .conversation(&posted[0].channel)
        .expect("the DM");
    assert!(dm.members.contains(&OWNER.to_string()));
    let update = setup
        .slack
        .updates()
        .pop()
        .expect("the message was updated");
    assert_eq!(update.ts, posted[0].ts);
    assert!(
        update
            .text
            .as_deref()
            .expect("t")
            .ends_with(":x: The session did not start.")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spawn_thread_checks_the_task_and_counts_8_per_runner() {
    let s = spawn_setup(Some("exit 0")).await;
    let setup = &s.setup;
    let spawn = |task: String| {
        call(
            "spawn_thread",
            json!({"task": task, "brief": "docs/briefs/plan.md"}),
        )
    };
    let mut steps = vec![
        spawn("x".repeat(151)),
        spawn("ab".into()),
        spawn("two\nlines".into()),
        call(
            "spawn_thread",
            json!({"task": "abc", "brief": "docs/briefs/plan.md", "model": "huge"}),
        ),
        spawn("x".repeat(150)),
        spawn("abc".into()),
    ];
    for i in 3..=8 {
        steps.push(spawn(format!("task number {i}")));
    }
    steps.push(spawn("task number 9".into()));
    let out = drive(setup.stdio(Value::Array(steps))).await;
    assert_refused(&out[0], "task is 151 characters; at most 150");
    assert_refused(&out[1], "task is 2 characters; at least 3");
    assert_refused(&out[2], "task must be one line");
    assert_refused(&out[3], "model must be smart, fast or default");
    for (i, v) in out[4..12].iter().enumerate() {
        assert_eq!(v["is_error"], false, "spawn {} refused: {v}", i + 1);
    }
    assert_refused(&out[12], "spawn_thread is limited to 8 calls per runner");
    assert_eq!(setup.slack.messages().len(), 8);

    let mut bare = GatewaySetup::new("self-hosted").await;
    bare.thread_ts = bare.slack.add_message(&bare.channel, OWNER, "task", None);
    let out = drive(bare.stdio(json!([spawn("abc".into())]))).await;
    assert_refused(
        &out[0],
        "this gateway has no launcher to start sessions with ([launcher] command",
    );
}

/// A workspace of three repositories (one unpublished) with a shared cache.
fn workspace(root: &Path, cache: &Path) -> String {
    let web = bare_repo(root, "acme", "web", &[("index.html", "<h1>web</h1>\n")]);
    let lib = bare_repo(root, "acme", "lib", &[("lib.rs", "pub fn f() {}\n")]);
    let api = bare_repo(root, "acme", "api", &[("api.go", "package api\n")]);
    format!(
        "[workspace]\ncache_dir = \"{}\"\n\
         [[workspace.repos]]\nname = \"web\"\nurl = \"{}\"\n\
         [[workspace.repos]]\nname = \"lib\"\nurl = \"{}\"\n\
         [[workspace.repos]]\nname = \"api\"\nurl = \"{}\"\npublished = false\n",
        cache.display(),
        web.display(),
        lib.display(),
        api.display()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkout_repo_clones_once_and_adds_worktrees_on_the_session_branch() {
    let mut setup = GatewaySetup::new("self-hosted").await;
    let cache = setup.dir.path().join("cache");
    setup.extra = workspace(setup.dir.path(), &cache);
    let agents = setup.session_dir().join("AGENTS.md");
    std::fs::write(&agents, "# Notes of mine\n\nKeep this.\n").expect("agents");
    let checkout = |repos: Value| call("checkout_repo", json!({ "repos": repos }));
    let ten: Vec<&str> = vec!["web"; 10];
    let eleven: Vec<&str> = vec!["web"; 11];
    let out = drive(setup.stdio(json!([
        checkout(json!(["web", "ACME/LIB"])),
        checkout(json!(["Web"])),
        checkout(json!(["nope"])),
        checkout(json!(["api"])),
        checkout(json!(eleven)),
        checkout(json!([])),
        checkout(json!(ten)),
    ])))
    .await;
    assert_ok(&out[0]);
    let branch = format!("calvin/{}", setup.thread_ts);
    for name in ["web", "lib"] {
        let path = setup.session_dir().join(name);
        assert_eq!(git(&path, &["branch", "--show-current"]), branch);
    }
    assert!(setup.session_dir().join("web/index.html").exists());
    assert!(setup.session_dir().join("lib/lib.rs").exists());
    let repos = out[0]["structured"]["repos"].as_array().expect("repos");
    assert_eq!(
        (repos[0]["already"].as_bool(), repos[0]["cloned"].as_bool()),
        (Some(false), Some(true))
    );
    assert_ok(&out[1]);
    assert_eq!(out[1]["structured"]["repos"][0]["already"], true);
    assert!(
        text(&out[1]).contains("web: already checked out at"),
        "{}",
        text(&out[1])
    );
    assert_refused(
        &out[2],
        "no repository nope in this workspace; the list is in AGENTS.md",
    );
    assert_refused(&out[3], "api is not published yet");
    assert_refused(&out[4], "repos has 11 names; give 1 to 10");
    assert_refused(&out[5], "repos has 0 names; give 1 to 10");
    // Ten names (all the same repository) are one checkout, already there.
    assert_ok(&out[6]);
    let repos = out[6]["structured"]["repos"].as_array().expect("repos");
    assert_eq!(repos.len(), 1);
    assert_eq!(
        (repos[0]["name"].as_str(), repos[0]["already"].as_bool()),
        (Some("web"), Some(true))
    );
    let list = std::fs::read_to_string(&agents).expect("AGENTS.md");
    assert!(
        list.starts_with("# Notes of mine\n\nKeep this.\n"),
        "{list}"
    );
    let lines: Vec<&str> = list.lines().collect();
    for line in [
        "- `web` (acme/web): published",
        "- `lib` (acme/lib): published",
        "- `api` (acme/api): not published yet",
        "<!-- calvin:workspace-repos end -->",
    ] {
        assert!(
            lines.contains(&line),
            "{line:?} missing from AGENTS.md:\n{list}"
        );
    }
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("<!-- calvin:workspace-repos begin")),
        "{list}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sessions_racing_for_one_repository_both_get_it_on_their_own_branch() {
    let root = tempfile::tempdir().expect("tempdir");
    let cache = root.path().join("cache");
    let definition = workspace(root.path(), &cache);
    let mut first = GatewaySetup::new("hosted").await;
    let mut second = GatewaySetup::new("hosted").await;
    for (setup, ts) in [
        (&mut first, "1700000000.000100"),
        (&mut second, "1700000000.000200"),
    ] {
        setup.extra = definition.clone();
        setup.thread_ts = ts.into();
        setup.agent_socket = Some(setup.dir.path().join("no-agent.sock"));
    }
    let step = json!([call("checkout_repo", json!({"repos": ["web"]}))]);
    let (a, b) = tokio::join!(drive(first.stdio(step.clone())), drive(second.stdio(step)));
    assert_ok(&a[0]);
    assert_ok(&b[0]);
    let cloned = [&a[0], &b[0]]
        .iter()
        .filter(|v| v["structured"]["repos"][0]["cloned"] == true)
        .count();
    assert_eq!(cloned, 1, "the cache is cloned once: {a:?} {b:?}");
    assert_eq!(
        git(
            &first.session_dir().join("web"),
            &["branch", "--show-current"]
        ),
        "calvin/1700000000.000100"
    );
    assert_eq!(
        git(
            &second.session_dir().join("web"),
            &["branch", "--show-current"]
        ),
        "calvin/1700000000.000200"
    );
    let worktrees = git(&cache.join("web.git"), &["worktree", "list"]);
    assert_eq!(
        worktrees.lines().count(),
        3,
        "the cache and two worktrees:\n{worktrees}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repository_whose_url_changes_is_fetched_from_the_new_url_by_the_next_session() {
    let root = tempfile::tempdir().expect("tempdir");
    let cache = root.path().join("cache");
    let old = bare_repo(
        root.path(),
        "acme",
        "web",
        &[("index.html", "<h1>v1</h1>\n")],
    );
    let definition = |url: &Path| {
        format!(
            "[workspace]\ncache_dir = \"{}\"\n[[workspace.repos]]\nname = \"web\"\nurl = \"{}\"\n",
            cache.display(),
            url.display()
        )
    };
    let mut first = GatewaySetup::new("self-hosted").await;
    first.extra = definition(&old);
    first.thread_ts = "1700000000.000100".into();
    let step = json!([call("checkout_repo", json!({"repos": ["web"]}))]);
    let out = drive(first.stdio(step.clone())).await;
    assert_ok(&out[0]);
    assert_eq!(out[0]["structured"]["repos"][0]["cloned"], true);

    // The repository moves (its old place is gone), gets a commit there,
    // and the definition is changed to its new URL.
    let moved = root.path().join("remotes/acme/web-moved.git");
    std::fs::rename(&old, &moved).expect("move the remote");
    let seed = root.path().join("seed-acme-web");
    git(
        &seed,
        &["remote", "set-url", "origin", moved.to_str().expect("p")],
    );
    std::fs::write(seed.join("index.html"), "<h1>v2</h1>\n").expect("edit");
    git(&seed, &["commit", "-q", "-am", "after the move"]);
    git(&seed, &["push", "-q", "origin", "HEAD:main"]);
    let later = git(&seed, &["rev-parse", "HEAD"]);

    let mut second = GatewaySetup::new("self-hosted").await;
    second.extra = definition(&moved);
    second.thread_ts = "1700000000.000200".into();
    let out = drive(second.stdio(step)).await;
    assert_ok(&out[0]);
    assert_eq!(out[0]["structured"]["repos"][0]["cloned"], false);
    let web = second.session_dir().join("web");
    assert_eq!(git(&web, &["rev-parse", "HEAD"]), later);
    assert_eq!(
        std::fs::read_to_string(web.join("index.html")).expect("file"),
        "<h1>v2</h1>\n"
    );
    assert_eq!(
        git(
            &cache.join("web.git"),
            &["config", "--get", "remote.origin.url"]
        ),
        moved.display().to_string()
    );
}
