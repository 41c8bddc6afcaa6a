//! `tagpin sync` in pull-request mode: the real binary, a real registry, a real bare Git
//! remote, and the local GitHub REST server (built from GitHub's OpenAPI description, validating
//! every request body it receives).

use crate::support;

use support::output_text as text;

use std::path::PathBuf;
use std::process::Output;

use support::git::BareRepo;
use support::github::{Fault, GitHubServer, PrState};
use support::registry::{Mode, TestRegistry};

const GH_TOKEN: &str = "ghs_test_4b1d9e0c7a";

/// `name` in namespace shop, which the PR body names.
fn deployment(name: &str, image: &str) -> String {
    support::manifests::deployment_in("shop", name, image)
}

/// A registry with two images, a bare repository naming them, a GitHub server, and a config.
struct World {
    registry: TestRegistry,
    repo: BareRepo,
    github: GitHubServer,
    dir: tempfile::TempDir,
}

impl World {
    async fn new(grouping: &str) -> World {
        let registry = TestRegistry::start(Mode::Plain).await;
        let host = registry.host();
        registry.push_image("acme/web", "1.0", "web-1").await;
        registry.push_image("acme/api", "2", "api-2").await;
        let repo = BareRepo::create(&[
            (
                "apps/web.yaml",
                &deployment("web", &format!("{host}/acme/web:1.0")),
            ),
            (
                "apps/api.yaml",
                &deployment("api", &format!("{host}/acme/api:2")),
            ),
        ]);
        let github = GitHubServer::start(GH_TOKEN, "acme", "gitops", repo.path()).await;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("tagpin.yaml"),
            format!(
                "repository: {{url: '{}', branch: main}}\n\
                 paths: [apps]\n\
                 mode: pull-request\n\
                 pull_request: {{grouping: {grouping}, labels: [tagpin, dependencies]}}\n\
                 registries: {{insecure: ['{host}']}}\n\
                 forge: {{api_url: '{}', owner: acme, repo: gitops, token_env: TAGPIN_GITHUB_TOKEN}}\n",
                repo.file_url(),
                github.api_url()
            ),
        )
        .unwrap();
        World {
            registry,
            repo,
            github,
            dir,
        }
    }

    fn config(&self) -> PathBuf {
        self.dir.path().join("tagpin.yaml")
    }

    async fn sync(&self, extra: &[&str]) -> Output {
        self.sync_with_token(extra, GH_TOKEN).await
    }

    async fn sync_with_token(&self, extra: &[&str], token: &str) -> Output {
        tokio::process::Command::new(env!("CARGO_BIN_EXE_tagpin"))
            .args(["sync", "--config"])
            .arg(self.config())
            .arg("--cache-dir")
            .arg(self.dir.path().join("cache"))
            .args(extra)
            .env("HOME", self.dir.path())
            .env("TAGPIN_GITHUB_TOKEN", token)
            .env_remove("DOCKER_CONFIG")
            .env_remove("RUST_LOG")
            .output()
            .await
            .expect("run tagpin")
    }

    fn mutating_requests(&self) -> usize {
        self.github
            .requests()
            .iter()
            .filter(|r| r.method != "GET")
            .count()
    }
}

#[tokio::test]
async fn a_pass_opens_one_pr_whose_branch_holds_the_pinning_commit() {
    let w = World::new("single").await;
    let main_before = w.repo.head("main");

    let out = w.sync(&[]).await;

    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let prs = w.github.prs();
    assert_eq!(prs.len(), 1);
    let pr = &prs[0];
    assert_eq!(
        (pr.head_ref.as_str(), pr.base_ref.as_str()),
        ("tagpin/main", "main")
    );
    assert_eq!(pr.labels, vec!["tagpin", "dependencies"]);
    assert_eq!(pr.title, "Pin 2 image(s) to digests");
    let body = pr.body.clone().unwrap();
    assert!(
        body.contains("| `apps/web.yaml` | shop/Deployment/web | app |"),
        "{body}"
    );
    assert!(body.contains("<!-- tagpin-plan"), "{body}");
    assert_eq!(
        w.repo.head("main"),
        main_before,
        "the target branch is untouched"
    );
    let pinned = w.repo.read("tagpin/main", "apps/web.yaml").unwrap();
    assert!(pinned.contains("@sha256:"), "{pinned}");
    assert_eq!(Some(pr.head_sha.clone()), w.repo.head("tagpin/main"));
    assert!(
        text(&out).contains("opened pull request #1"),
        "{}",
        text(&out)
    );
    assert!(!text(&out).contains(GH_TOKEN));
    w.github.assert_no_violations();
}

#[tokio::test]
async fn a_moved_tag_updates_the_same_pr_and_a_quiet_pass_writes_nothing() {
    let w = World::new("single").await;
    let first = w.sync(&[]).await;
    assert_eq!(first.status.code(), Some(0), "{}", text(&first));
    let branch_tip = w.repo.head("tagpin/main");

    let quiet = w.sync(&[]).await;
    assert_eq!(quiet.status.code(), Some(0), "{}", text(&quiet));
    assert_eq!(w.repo.head("tagpin/main"), branch_tip, "no push");
    let mutations = w.mutating_requests();
    assert!(
        text(&quiet).contains("already proposes"),
        "{}",
        text(&quiet)
    );

    let moved = w
        .registry
        .push_image("acme/web", "1.0", "web-1-rebuilt")
        .await;
    let again = w.sync(&[]).await;
    assert_eq!(again.status.code(), Some(0), "{}", text(&again));
    assert_eq!(w.github.prs().len(), 1, "the same PR, not a second one");
    let pr = &w.github.prs()[0];
    assert!(pr.body.clone().unwrap().contains(&moved.manifest[..19]));
    assert_ne!(w.repo.head("tagpin/main"), branch_tip, "the branch moved");
    assert!(w
        .repo
        .read("tagpin/main", "apps/web.yaml")
        .unwrap()
        .contains(&moved.manifest));
    assert_eq!(
        mutations, 2,
        "first pass: create + labels; quiet pass: nothing"
    );
    w.github.assert_no_violations();
}

#[tokio::test]
async fn a_failed_pr_creation_is_reconciled_by_the_next_pass_without_a_duplicate() {
    let w = World::new("single").await;
    w.github.fail_next_pr_create(502);

    let failed = w.sync(&[]).await;
    // A group that could not be proposed is a failure of the pass (1), not a pass that could
    // not run (2): the other groups, if any, were proposed.
    assert_eq!(failed.status.code(), Some(1), "{}", text(&failed));
    assert!(
        text(&failed).contains("open a pull request from tagpin/main"),
        "{}",
        text(&failed)
    );
    assert!(
        w.repo.head("tagpin/main").is_some(),
        "the branch was pushed"
    );
    let tip = w.repo.head("tagpin/main");

    let retried = w.sync(&[]).await;
    assert_eq!(retried.status.code(), Some(0), "{}", text(&retried));
    assert_eq!(w.github.prs().len(), 1);
    assert_eq!(w.repo.head("tagpin/main"), tip, "nothing pushed again");
    w.github.assert_no_violations();
}

#[tokio::test]
async fn a_pr_closed_by_hand_is_not_reopened_until_a_digest_moves() {
    let w = World::new("single").await;
    assert_eq!(w.sync(&[]).await.status.code(), Some(0));
    w.github.close_pr(1);

    let out = w.sync(&[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("closed by hand"), "{}", text(&out));
    assert_eq!(w.github.prs().len(), 1);
    assert_eq!(w.github.prs()[0].state, PrState::Closed);

    w.registry
        .push_image("acme/api", "2", "api-2-rebuilt")
        .await;
    let out = w.sync(&[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let prs = w.github.prs();
    assert_eq!(prs.len(), 2, "a new PR for the new digest");
    assert_eq!(prs[1].state, PrState::Open);
    w.github.assert_no_violations();
}

#[tokio::test]
async fn dry_run_prints_the_plan_and_the_pr_and_writes_nothing() {
    let w = World::new("single").await;
    let out = w.sync(&["--dry-run"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let t = text(&out);
    assert!(t.contains("+++ b/apps/web.yaml"), "{t}");
    assert!(t.contains("dry run: would propose on tagpin/main"), "{t}");
    assert!(t.contains("title: Pin 2 image(s) to digests"), "{t}");
    assert!(w.repo.head("tagpin/main").is_none());
    assert_eq!(w.mutating_requests(), 0);
}

#[tokio::test]
async fn per_image_grouping_opens_one_pr_per_image() {
    let w = World::new("per-image").await;
    let out = w.sync(&[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let mut heads: Vec<String> = w.github.prs().iter().map(|p| p.head_ref.clone()).collect();
    heads.sort();
    let host = w.registry.host().replace(':', "-");
    assert_eq!(
        heads,
        vec![
            format!("tagpin/main/{host}-acme-api"),
            format!("tagpin/main/{host}-acme-web"),
        ]
    );
    let api_branch = w.repo.read(&heads[0], "apps/web.yaml").unwrap();
    assert!(
        !api_branch.contains("@sha256:"),
        "the api PR leaves web alone"
    );
    w.github.assert_no_violations();
}

#[tokio::test]
async fn a_github_rate_limit_is_waited_out() {
    let w = World::new("single").await;
    w.github
        .inject(Fault::secondary_rate_limit("POST", "/pulls", 1).times(1));
    let out = w.sync(&[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(w.github.prs().len(), 1);
}

#[tokio::test]
async fn a_bad_github_token_is_reported_without_being_shown() {
    let w = World::new("single").await;
    let wrong = "ghs_wrong_token_0000";
    let out = w.sync_with_token(&[], wrong).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    // GitHub's "Bad credentials" is its own text: tagpin says the status and what it means.
    assert!(
        text(&out).contains("401 Unauthorized (the token is not valid"),
        "{}",
        text(&out)
    );
    assert!(!text(&out).contains(wrong));
    assert!(w.github.prs().is_empty());
}

#[tokio::test]
async fn an_exhausted_primary_rate_limit_is_waited_out_until_its_reset() {
    let w = World::new("single").await;
    let reset = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 1;
    w.github
        .inject(Fault::rate_limit_exhausted("POST", "/pulls", reset).times(1));
    let out = w.sync(&[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(w.github.prs().len(), 1);
    w.github.assert_no_violations();
}

/// The hidden marker of tagpin's "edited by hand" comment.
const HAND_EDIT_MARKER: &str = "<!-- tagpin-edited-by-hand -->";

fn hand_edit_notes(w: &World, pr: u64) -> usize {
    w.github
        .comments(pr)
        .iter()
        .filter(|c| c.body.contains(HAND_EDIT_MARKER))
        .count()
}

#[tokio::test]
async fn a_reviewers_commit_on_the_pr_branch_is_kept_and_said_once() {
    let w = World::new("single").await;
    let first = w.sync(&[]).await;
    assert_eq!(first.status.code(), Some(0), "{}", text(&first));
    let tagpins = w.repo.head("tagpin/main").unwrap();
    let reviewer = w.repo.commit_as_other_writer(
        "tagpin/main",
        &[("apps/README.md", "Reviewed: web needs 2 replicas.\n")],
        "Review: a note for the deploy",
    );
    // A digest moves, so tagpin has something new to push.
    let moved = w
        .registry
        .push_image("acme/web", "1.0", "web-1-rebuilt")
        .await;

    let out = w.sync(&[]).await;

    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(
        w.repo.head("tagpin/main").as_deref(),
        Some(reviewer.as_str()),
        "the reviewer's commit is still the tip"
    );
    assert!(text(&out).contains("edited by hand"), "{}", text(&out));
    assert!(text(&out).contains(&reviewer[..12]), "{}", text(&out));
    let pr = &w.github.prs()[0];
    assert!(
        !pr.body.clone().unwrap().contains(&moved.manifest[..19]),
        "the body does not promise what the branch does not hold"
    );
    assert_eq!(hand_edit_notes(&w, 1), 1);
    let note = &w.github.comments(1)[0].body;
    assert!(
        note.contains(&reviewer[..12]) && note.contains("tagpin/main"),
        "{note}"
    );

    // Said once: the next pass repeats it on its report, not on the pull request.
    let mutations = w.mutating_requests();
    let again = w.sync(&[]).await;
    assert_eq!(again.status.code(), Some(0), "{}", text(&again));
    assert!(text(&again).contains("edited by hand"), "{}", text(&again));
    assert_eq!(
        w.repo.head("tagpin/main").as_deref(),
        Some(reviewer.as_str())
    );
    assert_eq!(hand_edit_notes(&w, 1), 1);
    assert_eq!(w.mutating_requests(), mutations, "no write at all");

    // The reviewer hands the branch back: tagpin carries on with the moved digest.
    w.repo.reset_branch("tagpin/main", &tagpins);
    let back = w.sync(&[]).await;
    assert_eq!(back.status.code(), Some(0), "{}", text(&back));
    assert!(w
        .repo
        .read("tagpin/main", "apps/web.yaml")
        .unwrap()
        .contains(&moved.manifest));
    assert!(w.github.prs()[0]
        .body
        .clone()
        .unwrap()
        .contains(&moved.manifest[..19]));
    w.github.assert_no_violations();
}

#[tokio::test]
async fn an_amended_commit_with_tagpins_message_and_identity_is_still_a_hand_edit() {
    let w = World::new("single").await;
    let first = w.sync(&[]).await;
    assert_eq!(first.status.code(), Some(0), "{}", text(&first));
    // Same message (trailer and all), same author, committed under tagpin's own identity:
    // only the content differs from what tagpin wrote.
    let amended = w.repo.amend_tip_as(
        "tagpin/main",
        &[("apps/README.md", "Reviewed.\n")],
        "tagpin",
        "tagpin@localhost",
    );

    let out = w.sync(&[]).await;

    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(
        w.repo.head("tagpin/main").as_deref(),
        Some(amended.as_str())
    );
    assert!(text(&out).contains("edited by hand"), "{}", text(&out));
    assert_eq!(hand_edit_notes(&w, 1), 1);

    // Closed by hand, the branch is tagpin's again: the next proposal goes over it.
    w.github.close_pr(1);
    w.registry
        .push_image("acme/web", "1.0", "web-1-rebuilt")
        .await;
    let out = w.sync(&[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_ne!(
        w.repo.head("tagpin/main").as_deref(),
        Some(amended.as_str())
    );
    assert_eq!(w.github.prs().len(), 2);
    w.github.assert_no_violations();
}

#[tokio::test]
async fn a_refused_pr_for_one_image_does_not_stop_the_others() {
    let w = World::new("per-image").await;
    // Groups go in name order: acme/api is proposed first, and GitHub refuses it.
    w.github.fail_next_pr_create(422);

    let out = w.sync(&[]).await;

    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let host = w.registry.host().replace(':', "-");
    let heads: Vec<String> = w.github.prs().iter().map(|p| p.head_ref.clone()).collect();
    assert_eq!(heads, vec![format!("tagpin/main/{host}-acme-web")]);
    let t = text(&out);
    assert!(
        t.contains(&format!("{}/acme/api", w.registry.host())) && t.contains("422"),
        "{t}"
    );
    w.github.assert_no_violations();
}

#[tokio::test]
async fn a_push_rejected_for_one_image_does_not_stop_the_others() {
    let w = World::new("per-image").await;
    let host = w.registry.host().replace(':', "-");
    let api_branch = format!("tagpin/main/{host}-acme-api");
    w.repo.protect(&api_branch);
    // Hooks run in receive-pack, so the rejection needs a server (as on any forge).
    let server =
        support::git::GitHttpServer::start(w.repo.base_dir(), support::git::HttpAuth::None);
    let config = std::fs::read_to_string(w.config())
        .unwrap()
        .replace(&w.repo.file_url(), &server.url(w.repo.name()));
    std::fs::write(w.config(), config).unwrap();

    let out = w.sync(&[]).await;

    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(w.repo.head(&api_branch).is_none());
    let heads: Vec<String> = w.github.prs().iter().map(|p| p.head_ref.clone()).collect();
    assert_eq!(heads, vec![format!("tagpin/main/{host}-acme-web")]);
    let t = text(&out);
    assert!(t.contains(&api_branch) && t.contains("rejected"), "{t}");
    w.github.assert_no_violations();
}

#[tokio::test]
async fn a_fork_pull_request_on_a_tagpin_branch_is_never_adopted() {
    let w = World::new("single").await;
    // An outsider's fork has a branch named like tagpin's, with a pull request into main.
    let main = w.repo.head("main").unwrap();
    let fork =
        w.github
            .open_outsider_fork_pr(&main, "Pin 2 image(s) to digests", "<!-- tagpin-plan -->");

    let out = w.sync(&[]).await;

    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let prs = w.github.prs();
    assert_eq!(prs.len(), 2, "{prs:?}");
    let ours = prs.iter().find(|p| p.number != fork).unwrap();
    assert_eq!(ours.fork_owner, None);
    assert_eq!(ours.head_ref, "tagpin/main");
    let theirs = prs.iter().find(|p| p.number == fork).unwrap();
    assert_eq!(
        theirs.body.as_deref(),
        Some("<!-- tagpin-plan -->"),
        "untouched"
    );
    assert!(theirs.labels.is_empty());
    let edits: Vec<_> = w
        .github
        .requests()
        .into_iter()
        .filter(|r| r.method != "GET" && r.path.contains(&format!("/{fork}")))
        .collect();
    assert!(edits.is_empty(), "{edits:?}");
    w.github.assert_no_violations();
}

#[tokio::test]
async fn verify_refuses_a_pull_request_from_a_fork() {
    let w = World::new("single").await;
    let out = w.sync(&[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let ours = w.github.prs()[0].clone();
    // The fork's body is a plan block of the outsider's choosing (tagpin's own, copied).
    let main = w.repo.head("main").unwrap();
    let fork = w
        .github
        .open_outsider_fork_pr(&main, &ours.title, ours.body.as_deref().unwrap());

    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_tagpin"))
        .args(["verify", "--pr", &fork.to_string(), "--config"])
        .arg(w.config())
        .arg("--cache-dir")
        .arg(w.dir.path().join("cache"))
        .env("HOME", w.dir.path())
        .env("KUBECONFIG", w.dir.path().join("no-kubeconfig"))
        .env("TAGPIN_GITHUB_TOKEN", GH_TOKEN)
        .env_remove("DOCKER_CONFIG")
        .env_remove("RUST_LOG")
        .output()
        .await
        .expect("run tagpin");

    assert_ne!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains(&format!(
            "pull request #{fork} comes from a fork (mallory:tagpin/main)"
        )),
        "{}",
        text(&out)
    );
    assert!(w.github.comments(fork).is_empty());
    assert!(w.github.statuses(&main).is_empty());
    w.github.assert_no_violations();
}

/// A GitHub App installation token cannot read `GET /user` (GitHub answers 403): with
/// `forge.login` configured, tagpin takes that login and never asks; without it, the failure
/// names the call.
#[tokio::test]
async fn a_configured_login_stands_in_for_get_user_which_app_tokens_cannot_read() {
    let repo = BareRepo::create(&[("apps/web.yaml", &deployment("web", "nginx:1.27"))]);
    let github = GitHubServer::start(GH_TOKEN, "acme", "gitops", repo.path()).await;
    github.inject(support::github::Fault::new("GET", "/user", 403).times(2));
    let forge = |login: Option<&str>| tagpin::config::Forge {
        api_url: github.api_url(),
        kind: tagpin::config::ForgeKind::GitHub {
            owner: "acme".into(),
            repo: "gitops".into(),
        },
        token_env: "TAGPIN_GITHUB_TOKEN".into(),
        login: login.map(str::to_string),
        username_env: None,
        api_commits: false,
        timeout_seconds: tagpin::config::DEFAULT_FORGE_TIMEOUT_SECONDS,
    };

    let configured =
        tagpin::forge::ForgeClient::new(&forge(Some("tagpin-app[bot]")), GH_TOKEN.into()).unwrap();
    assert_eq!(configured.login().await.unwrap(), "tagpin-app[bot]");
    assert!(
        !github.requests().iter().any(|r| r.path == "/user"),
        "{:?}",
        github.requests()
    );

    let asked = tagpin::forge::ForgeClient::new(&forge(None), GH_TOKEN.into()).unwrap();
    let error = asked.login().await.unwrap_err().to_string();
    assert!(error.contains("GET /user"), "{error}");
    assert!(error.contains("403"), "{error}");
}
