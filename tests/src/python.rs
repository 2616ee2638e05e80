//! The Python the tests run (the MCP SDK's client, the HTTP/3 visitor,
//! Django, kubernetes-validate): the project's own virtual environment,
//! which `tests/run` makes in `<target>/test-python` from
//! `tests/python-requirements.txt`, never the user's Python.

use std::path::PathBuf;

/// The folder of the virtual environment within the target folder.
pub const VENV: &str = "test-python";

/// The interpreter: `CALVIN_TEST_PYTHON` when set; else the virtual
/// environment's, found beside the running test (the target folder is
/// `<target>/<profile>/deps/<test>`'s third ancestor, wherever
/// `CARGO_TARGET_DIR` puts it); else `python3` from the PATH (whose
/// missing packages then say to run `tests/run --install-only`).
pub fn python() -> PathBuf {
    if let Some(set) = std::env::var_os("CALVIN_TEST_PYTHON").filter(|v| !v.is_empty()) {
        return PathBuf::from(set);
    }
    let found = std::env::current_exe().ok().and_then(|exe| {
        exe.ancestors()
            .skip(1)
            .map(|dir| dir.join(VENV).join("bin/python3"))
            .find(|python| python.exists())
    });
    found.unwrap_or_else(|| PathBuf::from("python3"))
}
