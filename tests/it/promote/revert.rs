//! `verify.on_failure: revert` (issue #28), end to end with `tagpin run` in commit mode: the
//! real binary, a real registry and bare repository, and the local Kubernetes API server. A
//! pin whose pods cannot pull its digest is reverted once its failure is final (past the
//! grace of one interval), byte for byte, exactly once; the failed digest is held until the
//! tag moves again, and then pinned as any other.

use crate::run::{metric_sum, Controller};
use crate::support;
use crate::sync::deployment;

use support::git::{git_ok, BareRepo};
use support::kube::KubeServer;
use support::registry::{Mode, TestRegistry};
use support::workloads::LiveDeployment;

/// `shop/Deployment/web` as Argo CD applied `image`, its one pod unable to pull it.
fn cannot_pull(kube: &KubeServer, image: &str) {
    let live = LiveDeployment::new("shop", "web").container("app", image);
    live.apply(kube);
    live.pod("web-1").waiting(
        kube,
        "ImagePullBackOff",
        &format!("Back-off pulling image \"{image}\""),
    );
}

/// A registry whose `acme/web:1.0` moved from a good image to one the nodes cannot pull, and
/// a repository whose `apps/web.yaml` pins the good one.
struct World {
    registry: TestRegistry,
    host: String,
    good: support::registry::ImageDigests,
    /// `apps/web.yaml` pinning the good digest.
    before: String,
    repo: BareRepo,
    bad: support::registry::ImageDigests,
    /// The reference pinning the bad digest.
    bad_ref: String,
}

impl World {
    async fn start() -> World {
        let registry = TestRegistry::start(Mode::Plain).await;
        let host = registry.host();
        let good = registry.push_image("acme/web", "1.0", "good").await;
        let before = deployment("web", &format!("{host}/acme/web:1.0@{}", good.manifest));
        let repo = BareRepo::create(&[("apps/web.yaml", &before)]);
        let bad = registry.push_image("acme/web", "1.0", "bad").await;
        let bad_ref = format!("{host}/acme/web:1.0@{}", bad.manifest);
        World {
            registry,
            host,
            good,
            before,
            repo,
            bad,
            bad_ref,
        }
    }
}

async fn passes(controller: &Controller) -> f64 {
    metric_sum(&controller.metrics().await, "tagpin_passes_total{")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pin_the_cluster_cannot_pull_is_reverted_once_and_held_until_the_tag_moves() {
    let World {
        registry,
        host,
        good,
        before,
        repo,
        bad,
        bad_ref,
    } = World::start().await;
    let kube = KubeServer::start().await;
    cannot_pull(&kube, &bad_ref);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tagpin.yaml");
    std::fs::write(
        &config,
        format!(
            "repository: {{url: '{}', branch: main}}\npaths: [apps]\n\
             registries: {{insecure: ['{host}']}}\n\
             verify: {{default_namespace: shop, on_failure: revert}}\n",
            repo.file_url()
        ),
    )
    .unwrap();
    let kubeconfig = kube.kubeconfig(dir.path());
    let kubeconfig = kubeconfig.to_str().unwrap();
    let base = repo.log("main").len();
    // A pass every 2 s: the grace a fresh pin gets before its failure is final.
    let controller = Controller::start_with_args(
        dir.path(),
        &config,
        &[("KUBECONFIG", kubeconfig)],
        &["--interval", "2s"],
    )
    .await;

    let reverted = support::eventually_or("the pin and its revert", || {
        repo.log("main")
            .first()
            .is_some_and(|(_, subject)| subject.starts_with("Revert pin of 1 image(s): "))
    })
    .await;
    let log = repo.log("main");
    assert!(reverted, "{log:?}");
    assert_eq!(log.len(), base + 2, "one pin, one revert: {log:?}");
    let (revert, pin) = (&log[0].0, &log[1].0);
    assert!(log[1].1.starts_with("Pin 1 image(s)"), "{log:?}");
    // Byte for byte what it was before the pin.
    assert_eq!(repo.read("main", "apps/web.yaml").unwrap(), before);
    let message = git_ok(repo.path(), &["log", "-1", "--format=%B", revert]);
    for expected in [
        "shop/Deployment/web (app): ".to_string(),
        "ImagePullBackOff".to_string(),
        format!("Reverted: {pin}"),
        format!("Tagpin-Reverts: {pin}"),
        format!("Tagpin-Held: {host}/acme/web@{}", bad.manifest),
        format!("{} -> {}", bad.manifest, good.manifest),
    ] {
        assert!(message.contains(&expected), "{expected:?} in:\n{message}");
    }

    // A contributor's side branch of 201 commits merged on top: the hold does not wear off
    // by commit count.
    let merge = repo.merge_side_branch(&[], 201, "Merge pull request #9 from contributor/many");

    // Later passes neither pin the held digest again nor revert twice.
    let now = passes(&controller).await;
    support::eventually_async("three more passes", || async {
        passes(&controller).await >= now + 3.0
    })
    .await;
    assert_eq!(
        repo.head("main").as_deref(),
        Some(merge.as_str()),
        "nothing on top of the merge: {:?}",
        &repo.log("main")[..3]
    );
    // What a pass would do says why, naming the revert.
    let dry = std::process::Command::new(env!("CARGO_BIN_EXE_tagpin"))
        .args(["sync", "--dry-run", "--output", "json", "--config"])
        .arg(&config)
        .arg("--cache-dir")
        .arg(dir.path().join("dry-run"))
        .env("HOME", dir.path())
        .env_remove("DOCKER_CONFIG")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let value: serde_json::Value = serde_json::from_slice(&dry.stdout).unwrap();
    let held = &value["held"][0];
    assert_eq!(held["commit"], revert.as_str(), "{value:#}");
    assert_eq!(held["would_be"], bad.manifest.to_string());
    assert_eq!(held["line"], 10);

    // The tag moves on: the new digest is pinned as any other.
    let fixed = registry.push_image("acme/web", "1.0", "fixed").await;
    let pinned = support::eventually_or("the new digest pinned", || {
        repo.read("main", "apps/web.yaml")
            .is_some_and(|text| text.contains(&fixed.manifest.to_string()))
    })
    .await;
    let (code, log) = controller.stop().await;
    assert!(pinned, "{:?}\n{log}", repo.log("main"));
    assert_eq!(code, Some(0), "{log}");
    assert!(log.contains("reverted: commit"), "{log}");
    assert!(
        log.contains(&format!("not moved to {}: revert ", bad.manifest)),
        "{log}"
    );
    kube.assert_no_writes();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_merged_pull_request_that_fails_gets_one_revert_pull_request_and_a_merged_revert_holds() {
    use crate::run::forge_world;
    let World {
        registry: _registry,
        host,
        good,
        before,
        repo,
        bad,
        bad_ref,
    } = World::start().await;
    let token = "ghs_revert";
    let (github, kube, dir, config) = forge_world(
        &repo,
        &host,
        token,
        "pull-request",
        "verify: {default_namespace: shop, on_failure: revert}\n",
    )
    .await;
    // forge_world names `verify:` itself: keep one, with on_failure.
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        text.replace("verify: {default_namespace: shop}\n", ""),
    )
    .unwrap();
    cannot_pull(&kube, &bad_ref);
    let kubeconfig = kube.kubeconfig(dir.path());
    let controller = Controller::start_with_args(
        dir.path(),
        &config,
        &[
            ("KUBECONFIG", kubeconfig.to_str().unwrap()),
            ("GH_TOKEN", token),
        ],
        &["--interval", "2s"],
    )
    .await;
    assert_eq!(
        github.prs().len(),
        1,
        "the first pass proposed the bad digest"
    );

    // A person merges it (squashed); Argo CD applies it; the kubelet cannot pull it.
    let merge = repo.commit_as_other_writer(
        "main",
        &[("apps/web.yaml", &deployment("web", &bad_ref))],
        "Pin acme/web (#1)",
    );
    github.merge_pr(1, &merge);
    // The label is put on by a request after the one that opens the pull request.
    let proposed = support::eventually_or("one revert pull request, labelled", || {
        github.prs().iter().any(|p| {
            p.head_ref == "tagpin/revert/main" && p.labels.contains(&"tagpin-revert".to_string())
        })
    })
    .await;
    assert!(proposed, "{:?}", github.prs());
    let revert = github
        .prs()
        .into_iter()
        .find(|p| p.head_ref == "tagpin/revert/main")
        .unwrap();
    assert!(
        revert
            .title
            .starts_with("Revert pin of 1 image(s): shop/Deployment/web (app): ImagePullBackOff"),
        "{}",
        revert.title
    );
    let body = revert.body.clone().unwrap_or_default();
    for expected in [
        format!("Reverted: {merge}"),
        "Failed verdict:".to_string(),
        format!("{} -> {}", bad.manifest, good.manifest),
        "<!-- tagpin-plan".to_string(),
    ] {
        assert!(body.contains(&expected), "{expected:?} in:\n{body}");
    }
    assert_eq!(
        repo.read("tagpin/revert/main", "apps/web.yaml").unwrap(),
        before,
        "the revert restores the file byte for byte"
    );

    // More rounds: the same pull request, never a second one.
    let now = metric_sum(&controller.metrics().await, "tagpin_passes_total{");
    support::eventually_async("three more passes", || async {
        metric_sum(&controller.metrics().await, "tagpin_passes_total{") >= now + 3.0
    })
    .await;
    assert_eq!(github.prs().len(), 2, "{:?}", github.prs());

    // A person squash-merges the revert (its trailers lost): the digest stays held, as the
    // merge moves the field back to the digest it had before.
    let merged = repo.commit_as_other_writer("main", &[("apps/web.yaml", &before)], "Revert (#2)");
    github.merge_pr(revert.number, &merged);
    let now = metric_sum(&controller.metrics().await, "tagpin_passes_total{");
    support::eventually_async("three more passes", || async {
        metric_sum(&controller.metrics().await, "tagpin_passes_total{") >= now + 3.0
    })
    .await;
    let (code, log) = controller.stop().await;
    assert_eq!(
        github.prs().len(),
        2,
        "the held digest is not proposed again: {:?}\n{log}",
        github.prs()
    );
    assert_eq!(repo.read("main", "apps/web.yaml").unwrap(), before);
    assert!(
        log.contains("by hand; it is pinned again once its tag points"),
        "{log}"
    );
    assert_eq!(code, Some(0), "{log}");
    github.assert_no_violations();
    kube.assert_no_writes();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_operator_reverts_a_failed_pin_of_its_object_once_and_announces_it() {
    use crate::operator::{cluster, event_reasons, pinned_repository, spec, Operator};
    let World {
        registry: _registry,
        host,
        good: _,
        before,
        repo,
        bad: _,
        bad_ref,
    } = World::start().await;
    let kube = cluster().await;
    let live = LiveDeployment::new("default", "web").container("app", &bad_ref);
    live.apply(&kube);
    live.pod("web-1")
        .waiting(&kube, "ImagePullBackOff", "Back-off pulling image");
    let mut spec = spec(&repo.file_url(), &host);
    spec["verify"] = serde_json::json!({"on_failure": "revert"});
    kube.apply(pinned_repository("web", serde_json::json!({}), spec));
    let base = repo.log("main").len();
    let dir = tempfile::tempdir().unwrap();
    let operator = Operator::start(dir.path(), &kube, "op", &["--interval", "2s"]).await;

    let reverted = support::eventually_or("the pin and its revert", || {
        event_reasons(&kube, "web").contains(&"Reverted".to_string())
    })
    .await;
    let log = repo.log("main");
    assert!(reverted, "{log:?} {:?}", event_reasons(&kube, "web"));
    assert_eq!(log.len(), base + 2, "{log:?}");
    assert!(log[0]
        .1
        .starts_with("Revert pin of 1 image(s): default/Deployment/web (app)"));
    assert_eq!(repo.read("main", "apps/web.yaml").unwrap(), before);
    // Passes go on; the held digest is not pinned again and nothing is reverted twice.
    let at = operator.reconciled_at("web").await.unwrap_or_default();
    support::eventually_async("two more reconciles", || async {
        operator.reconciled_at("web").await.unwrap_or_default() >= at + 4
    })
    .await;
    assert_eq!(repo.log("main").len(), base + 2, "{:?}", repo.log("main"));
    let reverts = event_reasons(&kube, "web")
        .iter()
        .filter(|r| *r == "Reverted")
        .count();
    assert_eq!(reverts, 1);
    operator.stop().await;
}
