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

#[test]
fn share_needs_an_edge_or_dev() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_calvin-agent"))
        .args(["share", "8000"])
        .output()
        .expect("calvin-agent runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--edge") && err.contains("--token-file"),
        "{err}"
    );
}
