//! The binary's usage names every command. (Being an integration test, this
//! also makes `cargo test --workspace` build the binary that the tests crate
//! runs.)

#[test]
fn help_lists_every_command() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_calvin-edge"))
        .arg("--help")
        .output()
        .expect("calvin-edge runs");
    assert!(out.status.success());
    let usage = String::from_utf8_lossy(&out.stdout);
    for command in ["serve", "dev"] {
        assert!(
            usage.lines().any(|l| l.trim_start().starts_with(command)),
            "{command} missing from:\n{usage}"
        );
    }
}

#[test]
fn serve_reports_a_missing_config_file() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_calvin-edge"))
        .args(["serve", "--config", "/nonexistent/edge.toml"])
        .output()
        .expect("calvin-edge runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot read /nonexistent/edge.toml"), "{err}");
}
