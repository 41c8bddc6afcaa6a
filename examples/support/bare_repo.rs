//! A bare Git repository made with the `git` command, for the benchmarks that run `sync` or
//! `tagpin run` against one (included by path, like the tests' registry support).

use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs `git args` in `dir`; its trimmed stdout. Panics if git fails.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("run git");
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// `work/gitops.git`, whose `main` holds `files` (path relative to the root, contents) in one
/// commit.
pub fn bare_repo(work: &Path, files: &[(PathBuf, Vec<u8>)]) -> PathBuf {
    let checkout = work.join("checkout");
    std::fs::create_dir_all(&checkout).unwrap();
    git(&checkout, &["init", "-q", "-b", "main"]);
    for (relative, contents) in files {
        let path = checkout.join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, contents).unwrap();
    }
    git(&checkout, &["add", "."]);
    git(
        &checkout,
        &[
            "-c",
            "user.name=bench",
            "-c",
            "user.email=bench@example.com",
            "commit",
            "-qm",
            "manifests",
        ],
    );
    git(work, &["clone", "-q", "--bare", "checkout", "gitops.git"]);
    work.join("gitops.git")
}
