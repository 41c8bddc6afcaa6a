//! One repository through both drivers of the one cycle (`src/cycle/`): `tagpin run` and
//! `tagpin operator`, the real binaries, against the same stand-ins (a real registry, real
//! bare Git repositories, the local GitHub server, the local Kubernetes API server). Each
//! driver gets its own copy of the same repository; both must write the same commit (the same
//! tree, the same pins, the same message) and reach the same verdicts, which each maps to its
//! own outputs (run: the forge's statuses and its metrics; the operator: those statuses, and
//! the object's status).

use crate::operator::{cluster, is_ready, pinned_repository, runs_converged, Operator, NS};
use crate::run::{metric_sum, Controller};
use crate::support;
use crate::support::eventually_or;

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::json;
use support::git::{git_ok, BareRepo};
use support::github::GitHubServer;
use support::kube::{secret, KubeServer};
use support::manifests::deployment;
use support::registry::{ImageDigests, Mode, TestRegistry};

const TOKEN: &str = "ghs_cycle_drivers_5c1e";

/// The stand-ins both drivers share: the registry (so both resolve the same digest) and the
/// cluster, where `web` already runs the digest `acme/web:1.0` points to.
struct Shared {
    _registry: TestRegistry,
    host: String,
    pushed: ImageDigests,
    kube: KubeServer,
}

impl Shared {
    async fn start() -> Shared {
        let registry = TestRegistry::start(Mode::Plain).await;
        let host = registry.host();
        let pushed = registry.push_image("acme/web", "1.0", "web-1.0").await;
        let kube = cluster().await;
        let image = format!("{host}/acme/web:1.0");
        runs_converged(&kube, "web", &image, &pushed.manifest);
        kube.apply(secret(
            NS,
            "git-creds",
            &[support::kube::TAGPIN_SECRET],
            &[("GITHUB_TOKEN", TOKEN)],
        ));
        Shared {
            _registry: registry,
            host,
            pushed,
            kube,
        }
    }

    /// A new copy of the repository: `apps/web.yaml` names `acme/web:1.0` by tag, not pinned
    /// yet; and the GitHub server in front of it.
    async fn repository(&self) -> (BareRepo, GitHubServer) {
        let repo = BareRepo::create(&[(
            "apps/web.yaml",
            &deployment("web", &format!("{}/acme/web:1.0", self.host)),
        )]);
        let github = GitHubServer::start(TOKEN, "acme", "gitops", repo.path()).await;
        (repo, github)
    }
}

/// What a driver left: the tree and message of the branch's tip, the commits it added, and
/// each status context on the tip with its state.
#[derive(Debug, PartialEq)]
struct Left {
    tree: String,
    message: String,
    commits: usize,
    verdicts: BTreeMap<String, String>,
}

fn left(repo: &BareRepo, github: &GitHubServer) -> Left {
    let tip = repo.head("main").unwrap();
    Left {
        tree: git_ok(repo.path(), &["rev-parse", "main^{tree}"])
            .trim()
            .to_string(),
        message: git_ok(repo.path(), &["log", "-1", "--format=%B", "main"]),
        commits: repo.log("main").len(),
        verdicts: github
            .statuses(&tip)
            .into_iter()
            .map(|s| (s.context, s.state))
            .collect(),
    }
}

/// Waits for the forge's `tagpin/converged` success on `repo`'s tip; false if it never came.
async fn converged_on_the_tip(repo: &BareRepo, github: &GitHubServer) -> bool {
    eventually_or("tagpin/converged success on the tip", || {
        repo.head("main")
            .is_some_and(|tip| github.has_status(&tip, "tagpin/converged", "success"))
    })
    .await
}

/// `tagpin run` over a copy of the repository, until its cycle has verified the pin.
async fn through_run(shared: &Shared, dir: &Path) -> Left {
    let (repo, github) = shared.repository().await;
    let config = dir.join("tagpin.yaml");
    std::fs::write(
        &config,
        format!(
            "repository: {{url: '{}', branch: main}}\nmode: commit\npaths: [apps]\n\
             registries: {{insecure: ['{}']}}\n\
             forge: {{api_url: '{}', owner: acme, repo: gitops, token_env: GITHUB_TOKEN}}\n",
            repo.file_url(),
            shared.host,
            github.api_url(),
        ),
    )
    .unwrap();
    let kubeconfig = shared.kube.kubeconfig(dir);
    let kubeconfig = kubeconfig.to_str().unwrap();
    let env = [("GITHUB_TOKEN", TOKEN), ("KUBECONFIG", kubeconfig)];
    let controller = Controller::start_with_args(dir, &config, &env, &["--interval", "1h"]).await;
    if !converged_on_the_tip(&repo, &github).await {
        let (_, log) = controller.stop().await;
        panic!("run: no verdict on the tip {:?}\n{log}", repo.log("main"));
    }
    let metrics = controller.metrics().await;
    assert!(
        metric_sum(&metrics, "tagpin_verifications_total{verdict=\"converged\"") >= 1.0,
        "run counts the Converged verdict: {metrics}"
    );
    let (code, log) = controller.stop().await;
    assert_eq!(code, Some(0), "{log}");
    github.assert_no_violations();
    left(&repo, &github)
}

/// `tagpin operator` over a copy of the repository, until the object is Ready on its verdict.
async fn through_operator(shared: &Shared, dir: &Path) -> Left {
    let (repo, github) = shared.repository().await;
    let spec = json!({
        "repository": {"url": repo.file_url(), "branch": "main"},
        "mode": "commit",
        "paths": ["apps"],
        "registries": {"insecure": [shared.host]},
        "secret_ref": {"name": "git-creds"},
        "forge": {"api_url": github.api_url(), "owner": "acme", "repo": "gitops",
                  "token_env": "GITHUB_TOKEN"},
    });
    shared.kube.apply(pinned_repository("web", json!({}), spec));
    let operator = Operator::start(dir, &shared.kube, "op", &[]).await;
    let verdict = || {
        let object = shared.kube.get("PinnedRepository", NS, "web")?;
        object["status"]["verdict"]["state"]
            .as_str()
            .map(str::to_string)
    };
    let ready = eventually_or("the object Ready on a Converged verdict", || {
        is_ready(&shared.kube, "web") && verdict().as_deref() == Some("converged")
    })
    .await;
    if !ready || !converged_on_the_tip(&repo, &github).await {
        let log = operator.stop().await;
        panic!(
            "operator: {:?}\n{log}",
            shared.kube.get("PinnedRepository", NS, "web")
        );
    }
    let object = shared.kube.get("PinnedRepository", NS, "web").unwrap();
    assert_eq!(
        object["status"]["lastPin"]["commit"],
        repo.head("main").unwrap().as_str()
    );
    operator.stop().await;
    github.assert_no_violations();
    left(&repo, &github)
}

#[tokio::test(flavor = "multi_thread")]
async fn run_and_the_operator_write_the_same_commit_and_reach_the_same_verdict() {
    let shared = Shared::start().await;
    let dirs = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let by_run = through_run(&shared, dirs.0.path()).await;
    let by_operator = through_operator(&shared, dirs.1.path()).await;

    assert_eq!(
        by_run.commits, 2,
        "one commit of tagpin's on the first: {by_run:?}"
    );
    assert_eq!(by_run, by_operator, "the same commit and verdicts");
    assert!(
        by_run.message.contains(&shared.pushed.manifest),
        "{}",
        by_run.message
    );
    assert_eq!(
        by_run.verdicts.get("tagpin/converged").map(String::as_str),
        Some("success")
    );
}
