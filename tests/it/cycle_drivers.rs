//! One repository through both drivers of the one cycle (`src/cycle/`): `tagpin run` and
//! `tagpin operator`, the real binaries, against the same stand-ins (a real registry, real
//! bare Git repositories, the local GitHub server, the local Kubernetes API servers). Each
//! driver gets its own copy of the same repository; both must write the same commits (the same
//! trees, the same pins, the same message) and reach the same verdicts, which each maps to its
//! own outputs (run: the forge's statuses and its metrics; the operator: those statuses, and
//! the object's status).

use crate::operator::{cluster, is_ready, pinned_repository, runs_converged, Operator, NS};
use crate::run::{metric_sum, Controller};
use crate::support;
use crate::support::eventually_or;

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{json, Value};
use support::git::{git_ok, BareRepo};
use support::github::GitHubServer;
use support::kube::{secret, KubeServer};
use support::manifests::deployment;
use support::registry::{ImageDigests, Mode, TestRegistry};

const TOKEN: &str = "ghs_cycle_drivers_5c1e";
const PROMOTION_BRANCH: &str = "tagpin/promote/production";

/// The stand-ins both drivers share: the registry (so both resolve the same digest), the
/// cluster the operator runs in, where `web` already runs the digest `acme/web:1.0` points
/// to (staging's, with promotion), and production's cluster.
struct Shared {
    _registry: TestRegistry,
    host: String,
    pushed: ImageDigests,
    kube: KubeServer,
    production: KubeServer,
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
        let production = KubeServer::start().await;
        kube.apply(secret(
            NS,
            "prod-kubeconfig",
            &[support::kube::TAGPIN_SECRET],
            &[("kubeconfig", &production.kubeconfig_yaml())],
        ));
        Shared {
            _registry: registry,
            host,
            pushed,
            kube,
            production,
        }
    }

    /// A new copy of the repository holding `files` (each naming `acme/web` of `{host}`), and
    /// the GitHub server in front of it.
    async fn repository(&self, files: &[(&str, &str)]) -> (BareRepo, GitHubServer) {
        let files: Vec<(&str, String)> = files
            .iter()
            .map(|(path, image)| {
                (
                    *path,
                    deployment("web", &image.replace("{host}", &self.host)),
                )
            })
            .collect();
        let files: Vec<(&str, &str)> = files.iter().map(|(p, c)| (*p, c.as_str())).collect();
        let repo = BareRepo::create(&files);
        let github = GitHubServer::start(TOKEN, "acme", "gitops", repo.path()).await;
        (repo, github)
    }
}

/// What a driver left: the tree and message of the branch's tip, the commits on it, each
/// status context on the tip with its state, and the promotion's pull request (its tree, and
/// its statuses) when one was opened.
#[derive(Debug, PartialEq)]
struct Left {
    tree: String,
    message: String,
    commits: usize,
    verdicts: BTreeMap<String, String>,
    promotion: Option<(String, BTreeMap<String, String>)>,
}

fn statuses(github: &GitHubServer, sha: &str) -> BTreeMap<String, String> {
    github
        .statuses(sha)
        .into_iter()
        .map(|s| (s.context, s.state))
        .collect()
}

fn tree(repo: &BareRepo, branch: &str) -> String {
    let spec = format!("{branch}^{{tree}}");
    git_ok(repo.path(), &["rev-parse", &spec])
        .trim()
        .to_string()
}

fn left(repo: &BareRepo, github: &GitHubServer) -> Left {
    let tip = repo.head("main").unwrap();
    let prs = github.prs();
    assert!(prs.len() <= 1, "{prs:?}");
    Left {
        tree: tree(repo, "main"),
        message: git_ok(repo.path(), &["log", "-1", "--format=%B", "main"]),
        commits: repo.log("main").len(),
        verdicts: statuses(github, &tip),
        promotion: prs
            .first()
            .map(|pr| (tree(repo, &pr.head_ref), statuses(github, &pr.head_sha))),
    }
}

/// Whether the tip carries a success for `context` and, with `promotion`, the promotion's
/// pull request its `tagpin/promotion` success.
fn done(repo: &BareRepo, github: &GitHubServer, context: &str, promotion: bool) -> bool {
    let verified = repo
        .head("main")
        .is_some_and(|tip| github.has_status(&tip, context, "success"));
    let promoted = github.prs().iter().any(|pr| {
        pr.head_ref == PROMOTION_BRANCH
            && github.has_status(&pr.head_sha, "tagpin/promotion", "success")
    });
    verified && (promoted || !promotion)
}

/// One way through both drivers: the repository's files, the configuration's lines beyond
/// `repository` and `forge` (run's YAML, the operator's spec fields), and the verdict's
/// status context awaited on the tip.
struct Scenario<'s> {
    files: &'s [(&'s str, &'s str)],
    run_yaml: String,
    spec: Value,
    context: &'s str,
    promotion: bool,
}

/// `tagpin run` over a copy of the repository, until its cycle has verified the pin (and
/// opened the promotion).
async fn through_run(shared: &Shared, dir: &Path, scenario: &Scenario<'_>) -> Left {
    let (repo, github) = shared.repository(scenario.files).await;
    let config = dir.join("tagpin.yaml");
    std::fs::write(
        &config,
        format!(
            "repository: {{url: '{}', branch: main}}\nmode: commit\n\
             registries: {{insecure: ['{}']}}\n\
             forge: {{api_url: '{}', owner: acme, repo: gitops, token_env: GITHUB_TOKEN}}\n{}",
            repo.file_url(),
            shared.host,
            github.api_url(),
            scenario.run_yaml,
        ),
    )
    .unwrap();
    let kubeconfig = shared.kube.kubeconfig(dir);
    let kubeconfig = kubeconfig.to_str().unwrap();
    let env = [("GITHUB_TOKEN", TOKEN), ("KUBECONFIG", kubeconfig)];
    let controller = Controller::start_with_args(dir, &config, &env, &["--interval", "1h"]).await;
    let finished = eventually_or("run: the verdict on the tip", || {
        done(&repo, &github, scenario.context, scenario.promotion)
    })
    .await;
    if !finished {
        let (_, log) = controller.stop().await;
        panic!("run: {:?} {:?}\n{log}", repo.log("main"), github.prs());
    }
    // The verdict is posted within the verification step and counted once the step is over:
    // a scrape between the two sees the status but not yet the count.
    let converged = "tagpin_verifications_total{verdict=\"converged\"";
    let counted = support::eventually_async_or("run: the Converged verdict counted", || async {
        metric_sum(&controller.metrics().await, converged) >= 1.0
    })
    .await;
    let metrics = controller.metrics().await;
    assert!(counted, "run counts the Converged verdict: {metrics}");
    let (code, log) = controller.stop().await;
    assert_eq!(code, Some(0), "{log}");
    github.assert_no_violations();
    left(&repo, &github)
}

/// `tagpin operator` over a copy of the repository, until the object is Ready on its verdict
/// (and the promotion is open).
async fn through_operator(shared: &Shared, dir: &Path, scenario: &Scenario<'_>) -> Left {
    let (repo, github) = shared.repository(scenario.files).await;
    let mut spec = json!({
        "repository": {"url": repo.file_url(), "branch": "main"},
        "mode": "commit",
        "registries": {"insecure": [shared.host]},
        "secret_ref": {"name": "git-creds"},
        "forge": {"api_url": github.api_url(), "owner": "acme", "repo": "gitops",
                  "token_env": "GITHUB_TOKEN"},
    });
    for (key, value) in scenario.spec.as_object().unwrap() {
        spec[key] = value.clone();
    }
    let name = "web";
    shared.kube.apply(pinned_repository(name, json!({}), spec));
    let operator = Operator::start(dir, &shared.kube, "op", &[]).await;
    let object = || {
        shared
            .kube
            .get("PinnedRepository", NS, name)
            .unwrap_or_default()
    };
    let finished = eventually_or("operator: the object Ready on its verdict", || {
        is_ready(&shared.kube, name)
            && object()["status"]["verdict"]["state"] == "converged"
            && done(&repo, &github, scenario.context, scenario.promotion)
    })
    .await;
    if !finished {
        let log = operator.stop().await;
        panic!("operator: {}\n{log}", object()["status"]);
    }
    let status = &object()["status"];
    assert_eq!(
        status["lastPin"]["commit"],
        repo.head("main").unwrap().as_str()
    );
    if scenario.promotion {
        assert_eq!(status["promotions"][0]["gate"], "open", "{status}");
        assert_eq!(status["promotions"][0]["stage"], "production", "{status}");
    }
    operator.stop().await;
    github.assert_no_violations();
    left(&repo, &github)
}

/// Both drivers over `scenario`, one after the other on the same stand-ins: what each left.
async fn through_both(shared: &Shared, scenario: &Scenario<'_>) -> (Left, Left) {
    let dirs = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let by_run = through_run(shared, dirs.0.path(), scenario).await;
    let by_operator = through_operator(shared, dirs.1.path(), scenario).await;
    (by_run, by_operator)
}

#[tokio::test(flavor = "multi_thread")]
async fn run_and_the_operator_write_the_same_commit_and_reach_the_same_verdict() {
    let shared = Shared::start().await;
    let scenario = Scenario {
        files: &[("apps/web.yaml", "{host}/acme/web:1.0")],
        run_yaml: "paths: [apps]\n".into(),
        spec: json!({"paths": ["apps"]}),
        context: "tagpin/converged",
        promotion: false,
    };
    let (by_run, by_operator) = through_both(&shared, &scenario).await;

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
    assert_eq!(by_run.verdicts["tagpin/converged"], "success");
}

#[tokio::test(flavor = "multi_thread")]
async fn run_and_the_operator_pin_staging_verify_it_and_promote_it_alike() {
    let shared = Shared::start().await;
    let dir = tempfile::tempdir().unwrap();
    let [staging, production] = [
        ("staging", &shared.kube),
        ("production", &shared.production),
    ]
    .map(|(name, kube)| {
        let at = dir.path().join(name);
        std::fs::create_dir_all(&at).unwrap();
        kube.kubeconfig(&at)
    });
    let scenario = Scenario {
        files: &[
            ("envs/staging/web.yaml", "{host}/acme/web:1.0"),
            ("envs/production/web.yaml", "{host}/acme/web:0.9"),
        ],
        run_yaml: format!(
            "promotion:\n  stages:\n\
             \x20 - {{name: staging, paths: [envs/staging], cluster: {{kubeconfig: '{}'}}}}\n\
             \x20 - {{name: production, paths: [envs/production], cluster: {{kubeconfig: '{}'}}, \
             soak: 0s, mode: pull-request}}\n",
            staging.display(),
            production.display(),
        ),
        spec: json!({"promotion": {"stages": [
            {"name": "staging", "paths": ["envs/staging"], "cluster": {"in_cluster": true}},
            {"name": "production", "paths": ["envs/production"],
             "cluster": {"kubeconfig_secret_ref": {"name": "prod-kubeconfig"}},
             "soak": "0s", "mode": "pull-request"},
        ]}}),
        context: "tagpin/stage/staging",
        promotion: true,
    };
    let (by_run, by_operator) = through_both(&shared, &scenario).await;

    assert_eq!(by_run, by_operator, "the same commits and verdicts");
    let (promoted, verdicts) = by_run.promotion.as_ref().expect("a promotion opened");
    assert_ne!(
        *promoted, by_run.tree,
        "production's paths moved on its branch"
    );
    assert_eq!(verdicts["tagpin/promotion"], "success");
    assert_eq!(by_run.verdicts["tagpin/stage/staging"], "success");
    shared.production.assert_no_writes();
}
