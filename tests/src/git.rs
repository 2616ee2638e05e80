//! Real git for tests: commands with no user or system configuration, and
//! local bare repositories (file paths as remotes).

use std::path::{Path, PathBuf};

/// git in `dir`, with no user or system configuration.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args([
            "-c",
            "user.name=Test",
            "-c",
            "user.email=test@example.com",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A bare repository `<root>/remotes/<owner>/<name>.git` whose main branch
/// holds `files`.
pub fn bare_repo(root: &Path, owner: &str, name: &str, files: &[(&str, &str)]) -> PathBuf {
    let bare = root.join(format!("remotes/{owner}/{name}.git"));
    std::fs::create_dir_all(&bare).expect("dir");
    git(&bare, &["init", "--bare", "-q", "-b", "main"]);
    let work = root.join(format!("seed-{owner}-{name}"));
    git(
        root,
        &[
            "clone",
            "-q",
            bare.to_str().expect("path"),
            work.to_str().expect("path"),
        ],
    );
    for (path, content) in files {
        let at = work.join(path);
        std::fs::create_dir_all(at.parent().expect("parent")).expect("dir");
        std::fs::write(at, content).expect("file");
    }
    git(&work, &["add", "-A"]);
    git(&work, &["commit", "-q", "-m", "seed"]);
    git(&work, &["push", "-q", "origin", "HEAD:main"]);
    bare
}
