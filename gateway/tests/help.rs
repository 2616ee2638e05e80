//! The binaries' usage and first errors. (Being integration tests, these
//! also make `cargo test --workspace` build the binaries that the tests
//! crate runs.)

use std::process::Command;

#[test]
fn help_lists_both_transports() {
    let out = Command::new(env!("CARGO_BIN_EXE_calvin-gateway"))
        .arg("--help")
        .output()
        .expect("calvin-gateway runs");
    assert!(out.status.success());
    let usage = String::from_utf8_lossy(&out.stdout);
    for command in ["mcp", "serve"] {
        assert!(
            usage.lines().any(|l| l.trim_start().starts_with(command)),
            "{command} missing from:\n{usage}"
        );
    }
}

#[test]
fn mcp_names_the_session_flags_it_lacks() {
    let out = Command::new(env!("CARGO_BIN_EXE_calvin-gateway"))
        .args(["mcp", "--config", "/nonexistent/gateway.toml"])
        .env_remove("CALVIN_CHANNEL")
        .env_remove("CALVIN_THREAD_TS")
        .env_remove("CALVIN_SESSION_DIR")
        .output()
        .expect("calvin-gateway runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    for flag in ["--channel", "--thread-ts", "--session-dir"] {
        assert!(err.contains(flag), "{flag} missing from:\n{err}");
    }
}

#[test]
fn calvin_send_file_explains_its_usage_and_a_missing_gateway() {
    let out = Command::new(env!("CARGO_BIN_EXE_calvin-send-file"))
        .output()
        .expect("calvin-send-file runs");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("usage: calvin-send-file <path> [comment]"),
        "{err}"
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let out = Command::new(env!("CARGO_BIN_EXE_calvin-send-file"))
        .arg("a.txt")
        .current_dir(dir.path())
        .env_remove("CALVIN_SEND_FILE_SOCKET")
        .env_remove("CALVIN_SEND_FILE_URL")
        .output()
        .expect("calvin-send-file runs");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no calvin gateway found"), "{err}");
}
