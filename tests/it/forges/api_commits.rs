//! `forge.api_commits` (issue #40): tagpin's commits made through GitHub's Git Data API, with
//! the real binary, a real registry, a real bare repository behind the local GitHub server,
//! and the real `git verify-commit`. The server signs what it commits with its own key, as
//! GitHub signs with its web-flow key; the repository refuses every push, so a commit that
//! lands came through the API.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::json;

use crate::support;
use crate::sync::deployment;
use support::git::{git_ok, run_git, BareRepo};
use support::github::{Fault, GitHubServer};
use support::output_text as text;
use support::registry::{Mode, TestRegistry};

const TOKEN: &str = "ghs_api_commits_5c2e";

/// A registry with one image, two repositories naming it (one written through the API, one
/// pushed to, to compare), the local GitHub over the first.
struct World {
    registry: TestRegistry,
    repo: BareRepo,
    pushed: BareRepo,
    github: GitHubServer,
    dir: tempfile::TempDir,
}

impl World {
    async fn new() -> World {
        let registry = TestRegistry::start(Mode::Plain).await;
        let host = registry.host();
        registry.push_image("acme/web", "1.0", "web-1").await;
        let files = [
            (
                "apps/web.yaml",
                deployment("web", &format!("{host}/acme/web:1.0")),
            ),
            ("apps/notes.txt", "left alone\n".to_string()),
        ];
        let files: Vec<(&str, &str)> = files.iter().map(|(p, c)| (*p, c.as_str())).collect();
        let repo = BareRepo::create(&files);
        let pushed = BareRepo::create(&files);
        // Stands in for branch protection that requires signed commits tagpin cannot make:
        // every push is refused.
        repo.pre_receive("#!/bin/sh\necho 'push refused: commits must be signed' >&2\nexit 1\n");
        let github = GitHubServer::start(TOKEN, "acme", "gitops", repo.path()).await;
        World {
            registry,
            repo,
            pushed,
            github,
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn config(&self, name: &str, url: &str, mode: &str, forge: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(
            &path,
            format!(
                "repository: {{url: '{url}', branch: main}}\npaths: [apps]\nmode: {mode}\n\
                 registries: {{insecure: ['{}']}}\n{forge}",
                self.registry.host()
            ),
        )
        .unwrap();
        path
    }

    fn api_config(&self, mode: &str) -> PathBuf {
        let forge = format!(
            "forge: {{api_url: '{}', owner: acme, repo: gitops, token_env: TAGPIN_GITHUB_TOKEN, api_commits: true}}\n",
            self.github.api_url()
        );
        self.config("api.yaml", &self.repo.file_url(), mode, &forge)
    }

    /// `tagpin sync`, awaited: the local GitHub answers on this test's runtime.
    async fn sync(&self, config: &Path, cache: &str) -> Output {
        tokio::process::Command::new(env!("CARGO_BIN_EXE_tagpin"))
            .args(["sync", "--config"])
            .arg(config)
            .arg("--cache-dir")
            .arg(self.dir.path().join(cache))
            .env("HOME", self.dir.path())
            .env("TAGPIN_GITHUB_TOKEN", TOKEN)
            .env_remove("DOCKER_CONFIG")
            .env_remove("RUST_LOG")
            .output()
            .await
            .expect("run tagpin")
    }

    /// `git verify-commit` of `commit` against the server's signing key.
    fn verify(&self, commit: &str) -> Output {
        let signers = self.dir.path().join("allowed_signers");
        std::fs::write(&signers, self.github.web_flow_allowed_signers()).unwrap();
        let config = format!("gpg.ssh.allowedSignersFile={}", signers.display());
        run_git(self.repo.path(), &["-c", &config, "verify-commit", commit])
    }
}

fn tree_of(repo: &BareRepo, rev: &str) -> String {
    git_ok(repo.path(), &["rev-parse", &format!("{rev}^{{tree}}")])
}

#[tokio::test]
async fn commit_mode_commits_through_the_api_signed_by_github_with_the_tree_a_push_makes() {
    let w = World::new().await;
    let before = w.repo.head("main").unwrap();
    let out = w.sync(&w.api_config("commit"), "cache").await;
    assert!(out.status.success(), "{}", text(&out));
    let after = w.repo.head("main").unwrap();
    assert_ne!(after, before, "nothing landed: {}", text(&out));
    assert_eq!(
        git_ok(w.repo.path(), &["rev-parse", &format!("{after}^")]),
        before,
        "one commit on the tip tagpin planned on"
    );
    // Byte-exact: the same tree as tagpin's own commit pushed to a twin repository.
    let plain = w.config("push.yaml", &w.pushed.file_url(), "commit", "");
    let pushed = w.sync(&plain, "cache-push").await;
    assert!(pushed.status.success(), "{}", text(&pushed));
    assert_eq!(tree_of(&w.repo, "main"), tree_of(&w.pushed, "main"));
    let verified = w.verify(&after);
    assert!(verified.status.success(), "{}", text(&verified));
    assert!(
        text(&verified).contains("noreply@github.com"),
        "{}",
        text(&verified)
    );
    let message = git_ok(w.repo.path(), &["log", "-1", "--format=%B", "main"]);
    assert!(message.contains("Tagpin-Tree: "), "{message}");
    // tagpin reads its commit back as its own: the next pass writes nothing.
    let again = w.sync(&w.api_config("commit"), "cache").await;
    assert!(again.status.success(), "{}", text(&again));
    assert_eq!(w.repo.head("main").unwrap(), after);
    w.github.assert_no_violations();
}

#[tokio::test]
async fn a_ref_update_github_refuses_as_not_a_fast_forward_is_a_lost_race_planned_again() {
    let w = World::new().await;
    w.github.inject(
        Fault::new("PATCH", "/git/refs/heads/main", 422).body(json!({
            "message": "Update is not a fast forward",
            "documentation_url": "https://docs.github.com/rest/git/refs#update-a-reference",
            "status": "422"
        })),
    );
    let out = w.sync(&w.api_config("commit"), "cache").await;
    assert!(out.status.success(), "{}", text(&out));
    let patches = w
        .github
        .requests()
        .iter()
        .filter(|r| r.method == "PATCH" && r.path.ends_with("/git/refs/heads/main"))
        .count();
    assert_eq!(patches, 2, "the refused update is tried again once");
    let head = w.repo.head("main").unwrap();
    assert!(w.verify(&head).status.success());
    assert!(
        w.repo
            .read("main", "apps/web.yaml")
            .unwrap()
            .contains("@sha256:"),
        "pinned on the second attempt"
    );
}

#[tokio::test]
async fn pull_request_mode_puts_a_github_signed_commit_on_tagpins_branch_and_replaces_it() {
    let w = World::new().await;
    let config = w.api_config("pull-request");
    let out = w.sync(&config, "cache").await;
    assert!(out.status.success(), "{}", text(&out));
    let prs = w.github.prs();
    assert_eq!(prs.len(), 1, "{}", text(&out));
    let branch = prs[0].head_ref.clone();
    let first = w.repo.head(&branch).expect("tagpin's branch");
    assert!(w.verify(&first).status.success());
    // The tag moves: the branch is replaced through the API, its pull request kept.
    w.registry.push_image("acme/web", "1.0", "web-1b").await;
    let out = w.sync(&config, "cache").await;
    assert!(out.status.success(), "{}", text(&out));
    let second = w.repo.head(&branch).unwrap();
    assert_ne!(second, first);
    assert!(w.verify(&second).status.success());
    assert_eq!(w.github.prs().len(), 1);
    assert_eq!(w.repo.head("main"), Some(prs[0].base_sha.clone()));
    w.github.assert_no_violations();
}

#[tokio::test]
async fn api_commits_with_a_signing_key_or_on_another_forge_is_a_configuration_error() {
    let w = World::new().await;
    let both = w.config(
        "both.yaml",
        &w.repo.file_url(),
        "commit",
        &format!(
            "author: {{name: tagpin, email: t@example.com, signing: {{format: ssh, key_file: /nonexistent}}}}\n\
             forge: {{api_url: '{}', owner: acme, repo: gitops, token_env: TAGPIN_GITHUB_TOKEN, api_commits: true}}\n",
            w.github.api_url()
        ),
    );
    let out = w.sync(&both, "cache").await;
    assert!(!out.status.success());
    assert!(
        text(&out).contains("forge.api_commits: GitHub signs the commits it makes"),
        "{}",
        text(&out)
    );
    let gitlab = w.config(
        "gitlab.yaml",
        &w.repo.file_url(),
        "commit",
        "forge: {kind: gitlab, api_url: 'https://gitlab.example/api/v4', project: acme/gitops, token_env: T, api_commits: true}\n",
    );
    let out = w.sync(&gitlab, "cache").await;
    assert!(!out.status.success());
    assert!(
        text(&out).contains("forge.api_commits: commits through the forge's API are GitHub's only"),
        "{}",
        text(&out)
    );
    assert!(
        w.github.requests().is_empty(),
        "nothing was asked of GitHub"
    );
}

#[tokio::test]
async fn a_tree_github_builds_otherwise_than_tagpin_stops_before_any_commit_is_made() {
    let w = World::new().await;
    let before = w.repo.head("main").unwrap();
    let other = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";
    w.github
        .inject(Fault::new("POST", "/git/trees", 201).body(json!({
        "sha": other, "url": format!("{}/repos/acme/gitops/git/trees/{other}", w.github.api_url()),
        "tree": [], "truncated": false
    })));
    let out = w.sync(&w.api_config("commit"), "cache").await;
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains(&format!(
            "GitHub built tree {other}, not the tree tagpin computed"
        )),
        "{}",
        text(&out)
    );
    assert_eq!(w.repo.head("main").unwrap(), before, "nothing moved");
    let commits = w
        .github
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/git/commits"))
        .count();
    assert_eq!(commits, 0, "no commit was asked for");
}
