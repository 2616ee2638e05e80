//! The binary's usage names every command. (Being an integration test, this
//! also makes `cargo test --workspace` build the binary that the tests crate
//! runs.)

#[test]
fn help_lists_every_command() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_calvin-agent"))
        .arg("--help")
        .output()
        .expect("calvin-agent runs");
    assert!(out.status.success());
    let usage = String::from_utf8_lossy(&out.stdout);
    for command in ["up", "preview", "unpreview", "ls", "share"] {
        assert!(
            usage.lines().any(|l| l.trim_start().starts_with(command)),
            "{command} missing from:\n{usage}"
        );
    }
}

/// Runs `calvin-agent ARGS`, expects it to fail, and returns its stderr.
fn refused(args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_calvin-agent"))
        .args(args)
        .output()
        .expect("calvin-agent runs");
    assert!(!out.status.success(), "{args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn share_needs_an_edge_or_dev() {
    let err = refused(&["share", "8000"]);
    for flag in ["--edge", "--token-file", "--dev"] {
        assert!(err.contains(flag), "{flag} not named in: {err}");
    }
    // Half an edge is named for what it lacks; an edge and --dev conflict.
    let err = refused(&["share", "8000", "--edge", "h:1"]);
    assert!(err.contains("--token-file"), "{err}");
    let err = refused(&[
        "share",
        "8000",
        "--dev",
        "--edge",
        "h:1",
        "--token-file",
        "t",
    ]);
    assert!(err.contains("cannot be used with"), "{err}");
}
