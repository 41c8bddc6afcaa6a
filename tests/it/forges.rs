//! The same change-request scenarios on both forges, so neither can drift: the real binary, a
//! real registry, a real bare Git remote, the local Kubernetes API server, and either the local
//! GitHub server (`support::github`) or the local GitLab server (`support::gitlab`). Each
//! scenario is one function over [`Kind`], run once per forge by [`both_forges!`]; what differs
//! between the forges (how a person merges, GitLab's status state machine) is said where it
//! differs.

use crate::support;

use support::output_text as text;

use std::path::PathBuf;
use std::process::Output;

use serde_json::json;
use support::git::BareRepo;
use support::github::{GitHubServer, PrState};
use support::gitlab::{GitLabServer, MrState};
use support::kube::{pod, KubeServer};
use support::registry::{Mode, TestRegistry};

use crate::verify::{live_deployment, live_pod, manifest};

/// The token both servers accept; it must never appear in tagpin's output.
const TOKEN: &str = "glpat-forges-3c9e1f7a";
/// The GitLab user the token belongs to (the GitHub server's is `tagpin-bot` too).
const BOT: &str = "tagpin-bot";
const PROJECT: &str = "acme/platform/gitops";

#[derive(Clone, Copy, Debug)]
enum Kind {
    GitHub,
    GitLab,
}

/// One scenario, once per forge.
macro_rules! both_forges {
    ($scenario:ident: $github:ident, $gitlab:ident) => {
        #[tokio::test]
        async fn $github() {
            $scenario(Kind::GitHub).await;
        }
        #[tokio::test]
        async fn $gitlab() {
            $scenario(Kind::GitLab).await;
        }
    };
}

/// A change request as the scenarios look at it, whichever forge holds it.
#[derive(Debug, Clone)]
struct Change {
    number: u64,
    title: String,
    body: String,
    labels: Vec<String>,
    open: bool,
    merged: bool,
    head_ref: String,
    /// Opened from a fork.
    fork: bool,
}

/// The forge server of a scenario.
enum Hub {
    GitHub(GitHubServer),
    GitLab(GitLabServer),
}

impl Hub {
    async fn start(kind: Kind, repo: &BareRepo) -> Hub {
        match kind {
            Kind::GitHub => {
                Hub::GitHub(GitHubServer::start(TOKEN, "acme", "gitops", repo.path()).await)
            }
            Kind::GitLab => {
                Hub::GitLab(GitLabServer::start(TOKEN, BOT, PROJECT, repo.path()).await)
            }
        }
    }

    /// The `forge:` section of `tagpin.yaml`.
    fn forge_yaml(&self) -> String {
        match self {
            Hub::GitHub(gh) => format!(
                "forge: {{api_url: '{}', owner: acme, repo: gitops, token_env: TAGPIN_FORGE_TOKEN}}\n",
                gh.api_url()
            ),
            Hub::GitLab(gl) => format!(
                "forge: {{kind: gitlab, api_url: '{}', project: {PROJECT}, token_env: TAGPIN_FORGE_TOKEN}}\n",
                gl.api_url()
            ),
        }
    }

    /// Every change request, by number.
    fn changes(&self) -> Vec<Change> {
        let mut changes: Vec<Change> = match self {
            Hub::GitHub(gh) => gh
                .prs()
                .into_iter()
                .map(|p| Change {
                    number: p.number,
                    title: p.title,
                    body: p.body.unwrap_or_default(),
                    labels: p.labels,
                    open: p.state == PrState::Open,
                    merged: p.merged,
                    head_ref: p.head_ref,
                    fork: p.fork_owner.is_some(),
                })
                .collect(),
            Hub::GitLab(gl) => gl
                .mrs(PROJECT)
                .into_iter()
                .map(|m| Change {
                    number: m.iid,
                    title: m.title,
                    body: m.description.unwrap_or_default(),
                    labels: m.labels,
                    open: m.state == MrState::Opened,
                    merged: m.state == MrState::Merged,
                    head_ref: m.source_branch,
                    fork: m.source_project_id != m.project_id,
                })
                .collect(),
        };
        changes.sort_by_key(|c| c.number);
        changes
    }

    fn close_by_hand(&self, number: u64) {
        match self {
            Hub::GitHub(gh) => gh.close_pr(number),
            Hub::GitLab(gl) => gl.close_mr_as("reviewer", PROJECT, number),
        }
    }

    /// A person merges the change request; returns the commit the target branch is at.
    fn merge_by_hand(&self, repo: &BareRepo, number: u64) -> String {
        match self {
            Hub::GitHub(gh) => {
                // The local GitHub records a merge; the commit is made as GitHub would.
                let branch = gh
                    .prs()
                    .into_iter()
                    .find(|p| p.number == number)
                    .unwrap()
                    .head_ref;
                let file = repo.read(&branch, "apps/web.yaml").unwrap();
                let merge = repo.commit_as_other_writer(
                    "main",
                    &[("apps/web.yaml", &file)],
                    &format!("Merge pull request #{number}"),
                );
                gh.merge_pr(number, &merge);
                merge
            }
            Hub::GitLab(gl) => gl.merge_mr_as("reviewer", PROJECT, number).target_head,
        }
    }

    /// `(context, state)` of every status on `sha`, oldest first.
    fn statuses(&self, sha: &str) -> Vec<(String, String)> {
        match self {
            Hub::GitHub(gh) => gh
                .statuses(sha)
                .into_iter()
                .map(|s| (s.context, s.state))
                .collect(),
            Hub::GitLab(gl) => gl
                .statuses(PROJECT, sha)
                .into_iter()
                .map(|s| (s.name, s.status))
                .collect(),
        }
    }

    /// The bodies of the comments (GitLab: notes people and bots wrote, not system notes).
    fn comments(&self, number: u64) -> Vec<String> {
        match self {
            Hub::GitHub(gh) => gh.comments(number).into_iter().map(|c| c.body).collect(),
            Hub::GitLab(gl) => gl
                .notes(PROJECT, number)
                .into_iter()
                .filter(|n| !n.system)
                .map(|n| n.body)
                .collect(),
        }
    }

    /// Requests that change something on the forge.
    fn writes(&self) -> usize {
        match self {
            Hub::GitHub(gh) => gh.requests().iter().filter(|r| r.method != "GET").count(),
            Hub::GitLab(gl) => gl.requests().iter().filter(|r| r.method != "GET").count(),
        }
    }

    /// The next attempt to open a change request fails with a 502, before it is made.
    fn fail_next_open(&self) {
        match self {
            Hub::GitHub(gh) => gh.fail_next_pr_create(502),
            Hub::GitLab(gl) => {
                gl.inject(support::gitlab::Fault::new("POST", "/merge_requests", 502).times(1))
            }
        }
    }

    fn assert_no_violations(&self) {
        match self {
            Hub::GitHub(gh) => gh.assert_no_violations(),
            Hub::GitLab(gl) => gl.assert_no_violations(),
        }
    }
}

/// A registry with `acme/web:1.0`, a repository naming it, a forge, a cluster, a config.
struct World {
    kind: Kind,
    registry: TestRegistry,
    repo: BareRepo,
    hub: Hub,
    kube: KubeServer,
    dir: tempfile::TempDir,
}

impl World {
    async fn new(kind: Kind) -> World {
        let registry = TestRegistry::start(Mode::Plain).await;
        let host = registry.host();
        registry.push_image("acme/web", "1.0", "web-1").await;
        let repo = BareRepo::create(&[(
            "apps/web.yaml",
            &manifest("web", &format!("{host}/acme/web:1.0"), 1),
        )]);
        let hub = Hub::start(kind, &repo).await;
        let kube = KubeServer::start().await;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("tagpin.yaml"),
            format!(
                "repository: {{url: '{}', branch: main}}\n\
                 paths: [apps]\n\
                 mode: pull-request\n\
                 pull_request: {{labels: [tagpin, dependencies]}}\n\
                 registries: {{insecure: ['{host}']}}\n\
                 verify: {{default_namespace: shop}}\n{}",
                repo.file_url(),
                hub.forge_yaml()
            ),
        )
        .unwrap();
        World {
            kind,
            registry,
            repo,
            hub,
            kube,
            dir,
        }
    }

    /// Replaces `tagpin.yaml`.
    fn write_config(&self, text: &str) {
        std::fs::write(self.config(), text).unwrap();
    }

    fn config(&self) -> PathBuf {
        self.dir.path().join("tagpin.yaml")
    }

    async fn tagpin(&self, command: &str, args: &[&str]) -> Output {
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_tagpin"))
            .arg(command)
            .arg("--config")
            .arg(self.config())
            .arg("--cache-dir")
            .arg(self.dir.path().join("cache"))
            .args(args)
            .env("HOME", self.dir.path())
            .env("KUBECONFIG", self.kube.kubeconfig(self.dir.path()))
            .env("TAGPIN_FORGE_TOKEN", TOKEN)
            // The example configurations' names.
            .env("GITHUB_TOKEN", TOKEN)
            .env("GITLAB_TOKEN", TOKEN)
            .env("GIT_TOKEN", "unused-for-a-file-remote")
            .env_remove("DOCKER_CONFIG")
            .env_remove("RUST_LOG")
            .output()
            .await
            .expect("run tagpin");
        assert!(
            !text(&out).contains(TOKEN),
            "the token is shown: {}",
            text(&out)
        );
        out
    }

    async fn sync(&self) -> Output {
        self.tagpin("sync", &[]).await
    }

    /// `verify` of change request `number`: `--pr N` on GitHub, `--mr N` on GitLab.
    async fn verify(&self, number: u64) -> Output {
        let flag = match self.kind {
            Kind::GitHub => "--pr",
            Kind::GitLab => "--mr",
        };
        self.tagpin("verify", &[flag, &number.to_string()]).await
    }
}

async fn opens_one_change_request_then_updates_it(kind: Kind) {
    let w = World::new(kind).await;

    let first = w.sync().await;
    assert_eq!(first.status.code(), Some(0), "{}", text(&first));
    let changes = w.hub.changes();
    assert_eq!(changes.len(), 1, "{changes:?}");
    let change = &changes[0];
    assert!(change.open);
    assert_eq!(change.head_ref, "tagpin/main");
    assert_eq!(change.title, "Pin 1 image(s) to digests");
    let mut labels = change.labels.clone();
    labels.sort();
    assert_eq!(labels, ["dependencies", "tagpin"]);
    assert!(change.body.contains("<!-- tagpin-plan"), "{}", change.body);
    let pinned = w.repo.read("tagpin/main", "apps/web.yaml").unwrap();
    assert!(pinned.contains("@sha256:"), "{pinned}");
    if let Hub::GitLab(gl) = &w.hub {
        assert!(
            gl.mr(PROJECT, change.number).force_remove_source_branch,
            "tagpin's branch goes once merged"
        );
    }

    let writes = w.hub.writes();
    let quiet = w.sync().await;
    assert_eq!(quiet.status.code(), Some(0), "{}", text(&quiet));
    assert_eq!(w.hub.writes(), writes, "a quiet pass writes nothing");

    let moved = w
        .registry
        .push_image("acme/web", "1.0", "web-1-rebuilt")
        .await;
    let again = w.sync().await;
    assert_eq!(again.status.code(), Some(0), "{}", text(&again));
    let changes = w.hub.changes();
    assert_eq!(changes.len(), 1, "the same change request: {changes:?}");
    assert!(changes[0].body.contains(&moved.manifest[..19]));
    assert!(w
        .repo
        .read("tagpin/main", "apps/web.yaml")
        .unwrap()
        .contains(&moved.manifest));
    w.hub.assert_no_violations();
}
both_forges!(opens_one_change_request_then_updates_it:
    github_opens_one_change_request_then_updates_it,
    gitlab_opens_one_change_request_then_updates_it);

async fn closed_by_hand_is_not_reopened_until_a_digest_moves(kind: Kind) {
    let w = World::new(kind).await;
    assert_eq!(w.sync().await.status.code(), Some(0));
    w.hub.close_by_hand(1);

    let out = w.sync().await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("closed by hand"), "{}", text(&out));
    let changes = w.hub.changes();
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert!(!changes[0].open && !changes[0].merged);

    w.registry
        .push_image("acme/web", "1.0", "web-1-rebuilt")
        .await;
    let out = w.sync().await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let changes = w.hub.changes();
    assert_eq!(
        changes.len(),
        2,
        "a new one for the new digest: {changes:?}"
    );
    assert!(changes[1].open);
    w.hub.assert_no_violations();
}
both_forges!(closed_by_hand_is_not_reopened_until_a_digest_moves:
    github_closed_by_hand_is_not_reopened_until_a_digest_moves,
    gitlab_closed_by_hand_is_not_reopened_until_a_digest_moves);

async fn a_failed_open_is_reconciled_without_a_duplicate(kind: Kind) {
    let w = World::new(kind).await;
    w.hub.fail_next_open();

    let failed = w.sync().await;
    assert_eq!(failed.status.code(), Some(1), "{}", text(&failed));
    assert!(w.hub.changes().is_empty());
    let tip = w.repo.head("tagpin/main");
    assert!(tip.is_some(), "the branch was pushed");

    let retried = w.sync().await;
    assert_eq!(retried.status.code(), Some(0), "{}", text(&retried));
    assert_eq!(w.hub.changes().len(), 1);
    assert_eq!(w.repo.head("tagpin/main"), tip, "nothing pushed again");
    w.hub.assert_no_violations();
}
both_forges!(a_failed_open_is_reconciled_without_a_duplicate:
    github_a_failed_open_is_reconciled_without_a_duplicate,
    gitlab_a_failed_open_is_reconciled_without_a_duplicate);

/// The change request is merged by a person; the cluster then runs the pinned digest, and
/// `verify` of it posts `tagpin/converged` success on the commit that landed and one verdict
/// comment, edited in place by the next run. On GitLab the run also shows that no status is
/// posted that GitLab's state machine would refuse.
async fn merged_then_verified(kind: Kind) {
    let w = World::new(kind).await;
    assert_eq!(w.sync().await.status.code(), Some(0));
    let pinned = w.repo.read("tagpin/main", "apps/web.yaml").unwrap();
    let image = pinned
        .lines()
        .find_map(|l| l.trim().strip_prefix("image: "))
        .unwrap()
        .to_string();
    // `HOST:PORT/acme/web:1.0@sha256:…`: the pod runs `HOST:PORT/acme/web@sha256:…`.
    let (tagged, digest) = image.split_once('@').unwrap();
    let repository = tagged.rsplit_once(':').unwrap().0;

    let merged = w.hub.merge_by_hand(&w.repo, 1);
    assert!(w.hub.changes()[0].merged);
    // The pod is still pulling: the check is pending twice in a row (being checked, then
    // what it waits for), which GitLab takes only as pending, then running.
    live_deployment(&w.kube, "web", &image, 1);
    w.kube
        .apply(pod("shop", "web-1", &[("app", "web")], &[("app", &image)]));
    w.kube.set_pod_status(
        "shop",
        "web-1",
        json!({"phase": "Pending", "containerStatuses": [{"name": "app", "image": image, "imageID": "",
               "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}}}]}),
    );
    let waiting = w.verify(1).await;
    assert_eq!(waiting.status.code(), Some(3), "{}", text(&waiting));

    live_pod(
        &w.kube,
        "web",
        "web-1",
        &image,
        &format!("{repository}@{digest}"),
    );
    let out = w.verify(1).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let again = w.verify(1).await;
    assert_eq!(again.status.code(), Some(0), "{}", text(&again));
    for run in [&waiting, &out, &again] {
        assert!(
            !text(run).contains("cannot set the") && !text(run).contains("cannot mark"),
            "every status was taken: {}",
            text(run)
        );
    }

    let statuses = w.hub.statuses(&merged);
    let (context, state) = statuses.last().unwrap();
    assert_eq!(
        (context.as_str(), state.as_str()),
        ("tagpin/converged", "success"),
        "{statuses:?}"
    );
    let comments = w.hub.comments(1);
    assert_eq!(comments.len(), 1, "one verdict comment: {comments:?}");
    assert!(comments[0].contains("| Converged |"), "{}", comments[0]);
    w.hub.assert_no_violations();
    w.kube.assert_no_writes();
}
both_forges!(merged_then_verified:
    github_merged_then_verified,
    gitlab_merged_then_verified);

/// A fork's change request from a branch named like tagpin's is never adopted, edited or
/// verified: tagpin opens its own.
async fn a_fork_change_request_is_never_adopted(kind: Kind) {
    let w = World::new(kind).await;
    let main = w.repo.head("main").unwrap();
    let fork = match &w.hub {
        Hub::GitHub(gh) => gh.open_pr_as(
            "mallory",
            Some("mallory"),
            "tagpin/main",
            &main,
            "main",
            "Pin 1 image(s) to digests",
            "<!-- tagpin-plan -->",
        ),
        Hub::GitLab(gl) => {
            gl.fork_project(PROJECT, "mallory/gitops", "mallory");
            gl.open_fork_mr_as(
                "mallory",
                "mallory/gitops",
                "tagpin/main",
                &main,
                PROJECT,
                "main",
                "Pin 1 image(s) to digests",
            )
        }
    };

    let out = w.sync().await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let changes = w.hub.changes();
    assert_eq!(changes.len(), 2, "{changes:?}");
    let theirs = changes.iter().find(|c| c.number == fork).unwrap();
    assert!(
        theirs.fork && theirs.labels.is_empty(),
        "untouched: {theirs:?}"
    );
    let ours = changes.iter().find(|c| c.number != fork).unwrap();
    assert!(!ours.fork && ours.open);

    let refused = w.verify(fork).await;
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    assert!(text(&refused).contains("fork"), "{}", text(&refused));
    w.hub.assert_no_violations();
}
both_forges!(a_fork_change_request_is_never_adopted:
    github_a_fork_change_request_is_never_adopted,
    gitlab_a_fork_change_request_is_never_adopted);

/// GitLab answers `409` when a merge request is already open for the source branch: one
/// opened after tagpin listed (another replica, a person) is adopted in the same pass, given
/// tagpin's title, body and labels, and no second one is opened.
#[tokio::test]
async fn gitlab_a_merge_request_opened_meanwhile_is_adopted_on_409() {
    let w = World::new(Kind::GitLab).await;
    let Hub::GitLab(gl) = &w.hub else {
        unreachable!()
    };
    // A first pass pushed tagpin's branch but could not open its merge request; a person
    // opened one on it since, which tagpin's next list does not see yet (it was opened
    // between tagpin's list and its open).
    w.hub.fail_next_open();
    assert_eq!(w.sync().await.status.code(), Some(1));
    gl.open_mr_as("reviewer", PROJECT, "tagpin/main", "main", "WIP");
    gl.inject(
        support::gitlab::Fault::new("GET", "/merge_requests", 200)
            .json_body(json!([]))
            .times(1),
    );

    let out = w.sync().await;

    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let changes = w.hub.changes();
    assert_eq!(changes.len(), 1, "adopted, not doubled: {changes:?}");
    assert_eq!(changes[0].title, "Pin 1 image(s) to digests");
    assert!(changes[0].body.contains("<!-- tagpin-plan"));
    assert!(changes[0].labels.contains(&"tagpin".to_string()));
    assert!(gl
        .requests()
        .iter()
        .any(|r| r.method == "POST" && r.status == 409));
    gl.assert_no_violations();
}

/// `examples/config`'s pull-request configuration for the forge, pointed at the local servers
/// (only the addresses change), opens its change request.
async fn the_pull_request_example_runs(kind: Kind) {
    let w = World::new(kind).await;
    let (file, remote, api) = match &w.hub {
        Hub::GitHub(gh) => (
            "pull-request-mode.yaml",
            "https://github.com/acme/gitops.git",
            ("https://api.github.com", gh.api_url()),
        ),
        Hub::GitLab(gl) => (
            "pull-request-mode-gitlab.yaml",
            "https://gitlab.example.com/acme/platform/gitops.git",
            ("https://gitlab.example.com/api/v4", gl.api_url()),
        ),
    };
    let example = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples/config")
            .join(file),
    )
    .unwrap();
    assert!(
        example.contains(remote) && example.contains(api.0),
        "{example}"
    );
    let local = example
        .replace(remote, &w.repo.file_url())
        .replace(api.0, &api.1);
    w.write_config(&format!(
        "{local}\nregistries: {{insecure: ['{}']}}\n",
        w.registry.host()
    ));

    let out = w.sync().await;

    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let changes = w.hub.changes();
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert!(changes[0].open && changes[0].labels.contains(&"dependencies".to_string()));
    w.hub.assert_no_violations();
}
both_forges!(the_pull_request_example_runs:
    github_the_pull_request_example_runs,
    gitlab_the_pull_request_example_runs);
