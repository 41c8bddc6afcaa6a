//! Pinned Helm values verified without running Helm: tagpin's verifier against the local
//! Kubernetes API server serving Flux HelmReleases (checked against the real CRD's schema, see
//! `tests/fixtures/crds/`), the Flux Kustomization or Argo CD Application that applied them,
//! and workloads Helm annotated with their release; a real Git repository (served over HTTP,
//! as a Flux GitRepository requires) holds the pin commit.
//!
//! The first tests drive the library with Helm pins built by hand, to pin down each verdict;
//! the `binary` tests run the real `tagpin verify`, where the pins come from the scanned
//! commit or from a sync pull request's plan block.

use crate::support;
use crate::verify::gitops::{argo_application, flux_objects, tagpin_verify, verifier_grants};

use std::process::Output;

use serde_json::{json, Value};
use support::git::{BareRepo, GitHttpServer, HttpAuth};
use support::github::GitHubServer;
use support::kube::{deployment, KubeServer};
use support::output_text as text;
use support::registry::{Mode, TestRegistry};
use support::workloads::{image_id, LiveDeployment};

use tagpin::cluster::{Cluster, DEFAULT_API_TIMEOUT};
use tagpin::config::{ClusterTarget, Config};
use tagpin::verify::judge::check::Check;
use tagpin::verify::judge::expected::NotVerifiedReason;
use tagpin::verify::judge::helm::{HelmPin, ReleaseRef};
use tagpin::verify::judge::verdict::State;
use tagpin::verify::{check, expectations_at, Families};

const DIGEST: &str = "sha256:8888888888888888888888888888888888888888888888888888888888888888";
const OLD_DIGEST: &str = "sha256:7777777777777777777777777777777777777777777777777777777777777777";
const CONFIG: &str = "sha256:9933f58f8bf459eb199d59ebc8a05683f3944e1242d9f5467d99aa2cf08a5370";
const OLD_CONFIG: &str = "sha256:a856118d270c0db44a9019d51e2bba4fc3e6bac7a856118d270c0db44a9019d5";

/// The HelmRelease manifest in Git, its values pinning `digest`.
fn release_manifest(digest: &str) -> String {
    format!(
        "apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata:\n  name: web\n  namespace: shop\nspec:\n  interval: 10m\n  chart:\n    spec:\n      chart: web\n      version: 1.2.0\n      sourceRef: {{kind: HelmRepository, name: acme, namespace: flux-system}}\n  values:\n    image:\n      repository: ghcr.io/acme/web\n      tag: '1.4'\n      digest: {digest}\n"
    )
}

/// The repository (the pin commit at its tip), served over HTTP, the cluster, and tagpin's
/// configuration.
struct World {
    repo: BareRepo,
    kube: KubeServer,
    dir: tempfile::TempDir,
    url: String,
    _http: GitHttpServer,
}

impl World {
    /// The repository's first commit pins `digest` in the HelmRelease and [`DIGEST`] in the
    /// chart's production values.
    async fn new(digest: &str) -> World {
        let repo = BareRepo::create(&[
            ("apps/web/release.yaml", &release_manifest(digest)),
            (
                "charts/web/values-prod.yaml",
                &format!(
                    "image:\n  repository: ghcr.io/acme/web\n  tag: '1.4'\n  digest: {DIGEST}\n"
                ),
            ),
        ]);
        let http = GitHttpServer::start(repo.base_dir(), HttpAuth::None);
        let url = http.url(repo.name());
        let world = World {
            repo,
            kube: KubeServer::start().await,
            dir: tempfile::tempdir().unwrap(),
            url,
            _http: http,
        };
        std::fs::write(
            world.dir.path().join("tagpin.yaml"),
            format!(
                "repository: {{url: '{}', branch: main}}\npaths: [apps, charts]\nverify: {{default_namespace: shop}}\n",
                world.url
            ),
        )
        .unwrap();
        world
    }

    fn tip(&self) -> String {
        self.repo.head("main").unwrap()
    }

    /// A commit on `main` whose HelmRelease values pin `digest`; its SHA.
    fn pin_release(&self, digest: &str) -> String {
        self.repo.commit_as_other_writer(
            "main",
            &[("apps/web/release.yaml", &release_manifest(digest))],
            "Pin web to a newer digest",
        )
    }

    /// The Flux GitRepository and Kustomization of `./apps`, having applied `revision`, with
    /// the HelmRelease shop/web in their inventory.
    fn flux_applied(&self, revision: &str) {
        flux_applied_release(&self.kube, &self.url, revision);
    }

    /// The HelmRelease shop/web as Flux applied it from Git (values pinning `digest`), and its
    /// status: helm-controller attempted `attempted` generation with [`CONFIG`], and the newest
    /// Helm release (revision 4) is `state` with `config`.
    fn helm_release(&self, digest: &str, attempted: i64, state: &str, config: &str) {
        released(
            &self.kube,
            &release_manifest(digest),
            attempted,
            state,
            config,
        );
    }

    /// A Deployment of shop Helm annotated with `release`, running one pod on `digest` of
    /// ghcr.io/acme/web (its only container named `container`).
    fn released_workload(&self, name: &str, release: &str, container: &str, digest: &str) {
        let image = format!("ghcr.io/acme/web:1.4@{digest}");
        let image_id = format!("ghcr.io/acme/web@{digest}");
        released_workload(&self.kube, name, release, container, (&image, &image_id));
    }
}

/// The Flux GitRepository of `url` and the Kustomization of its `./apps`, having applied
/// `revision`, with the HelmRelease shop/web in their inventory.
fn flux_applied_release(kube: &KubeServer, url: &str, revision: &str) {
    let [repository, mut kustomization] = flux_objects(url.trim_end_matches(".git"), revision, &[]);
    kustomization["status"]["inventory"]["entries"] =
        json!([{"id": "shop_web_helm.toolkit.fluxcd.io_HelmRelease", "v": "v2"}]);
    kube.apply(repository);
    kube.apply(kustomization);
}

/// The Argo CD Application argocd/shop, having applied `revision` of `url`, rendering
/// charts/web with `values_file`; its inventory names the Deployment shop/`deployment`.
fn argo_chart_app(url: &str, revision: &str, deployment: &str, values_file: &str) -> Value {
    let mut app = argo_application(url, revision, &[("shop", deployment)]);
    let source = json!({"repoURL": url, "path": "charts/web", "targetRevision": "main",
                        "helm": {"valueFiles": [values_file]}});
    app["spec"]["source"] = source.clone();
    app["status"]["sync"]["comparedTo"]["source"] = source;
    app
}

/// The HelmRelease shop/web as Flux applied it from Git (`manifest`), and its status:
/// helm-controller attempted `attempted` generation with [`CONFIG`], and the newest Helm release
/// (revision 4) is `state` with `config`.
fn released(kube: &KubeServer, manifest: &str, attempted: i64, state: &str, config: &str) {
    let manifest: Value = serde_yaml::from_str(manifest).unwrap();
    let stored = kube.apply(manifest);
    let generation = stored["metadata"]["generation"].as_i64().unwrap();
    let ready = match state {
            "deployed" => ("True", "UpgradeSucceeded", "Helm upgrade succeeded for release shop/web.v4 with chart web@1.2.0"),
            "pending-upgrade" => ("Unknown", "Progressing", "Running 'upgrade' action with timeout of 5m0s"),
            _ => ("False", "UpgradeFailed", "Helm upgrade failed for release shop/web with chart web@1.2.0: context deadline exceeded"),
        };
    kube.set_status(
        "HelmRelease",
        "shop",
        "web",
        json!({
            "observedGeneration": attempted,
            "lastAttemptedGeneration": attempted,
            "lastAttemptedConfigDigest": CONFIG,
            "lastAttemptedRevision": "1.2.0",
            "lastAttemptedReleaseAction": "upgrade",
            "helmChart": "flux-system/shop-web",
            "storageNamespace": "shop",
            "history": [{
                "chartName": "web", "chartVersion": "1.2.0", "configDigest": config,
                "digest": "sha256:e4a5e1b5f1f0b1a9d0c3f7c6a1e1b2c3d4e5f60718293a4b5c6d7e8f9a0b1c2d",
                "firstDeployed": "2026-11-20T10:00:00Z", "lastDeployed": "2026-11-25T06:00:00Z",
                "name": "web", "namespace": "shop", "status": state, "version": 4
            }],
            "conditions": [{
                "type": "Ready", "status": ready.0, "reason": ready.1, "message": ready.2,
                "lastTransitionTime": "2026-11-25T06:00:00Z", "observedGeneration": generation
            }]
        }),
    );
}

/// A Deployment of shop Helm annotated with `release`, running one pod on `image` (the pod
/// reporting `image_id`), its only container named `container`.
fn released_workload(
    kube: &KubeServer,
    name: &str,
    release: &str,
    container: &str,
    (image, image_id): (&str, &str),
) {
    let workload = LiveDeployment::new("shop", name)
        .container(container, image)
        .label("app.kubernetes.io/managed-by", "Helm")
        .annotation("meta.helm.sh/release-name", release)
        .annotation("meta.helm.sh/release-namespace", "shop");
    // A workload released again (a new image) is a new generation, rolled out.
    workload.apply(kube);
    workload
        .pod(&format!("{name}-1"))
        .running(kube, &[image_id]);
}

impl World {
    /// The Argo CD Application argocd/shop, having applied `revision`, rendering charts/web
    /// with values-prod.yaml; its inventory names the Deployment the chart made,
    /// shop/acme-web-frontend, under a name found nowhere in Git.
    fn argo_values_app(&self, revision: &str) {
        self.kube.apply(argo_chart_app(
            &self.url,
            revision,
            "acme-web-frontend",
            "values-prod.yaml",
        ));
    }

    /// shop/acme-web-frontend rolled out, its container `web` on `digest` of ghcr.io/acme/web.
    fn frontend_running(&self, digest: &str) {
        let image = format!("ghcr.io/acme/web:1.4@{digest}");
        let frontend = LiveDeployment::new("shop", "acme-web-frontend")
            .app("frontend")
            .label("app.kubernetes.io/instance", "shop")
            .container("web", &image);
        frontend.apply(&self.kube);
        frontend
            .pod("frontend-1")
            .running(&self.kube, &[&format!("ghcr.io/acme/web@{digest}")]);
    }

    /// The real `tagpin verify` with `args`, on this world's cluster and configuration.
    async fn verify(&self, args: &[&str]) -> Output {
        tagpin_verify(self.dir.path(), &self.kube, args).await
    }

    /// One check of the tip of `main`, with `pins` as the Helm pins of that commit.
    async fn check(&self, pins: Vec<HelmPin>) -> Check {
        let config = Config::load(&self.dir.path().join("tagpin.yaml")).unwrap();
        let mirror = support::mirror(&config, &self.dir.path().join("cache"));
        mirror
            .fetch(
                &config.repository.branch,
                &config.pull_request.branch_prefix,
            )
            .unwrap();
        let tip = mirror.require_tip("main").unwrap();
        let mut expectations = expectations_at(tip, &config, &mirror).unwrap();
        assert!(
            expectations.expected.is_empty(),
            "the Helm values pin no workload manifest"
        );
        expectations.helm = pins;
        let cluster = Cluster::connect_to(
            &ClusterTarget::Kubeconfig {
                path: self.kube.kubeconfig(self.dir.path()),
                context: None,
            },
            DEFAULT_API_TIMEOUT,
        )
        .await
        .unwrap();
        let registry =
            tagpin::registry::Client::new(tagpin::registry::Settings::default()).unwrap();
        check(&expectations, &cluster, &registry, &mut Families::default())
            .await
            .unwrap()
    }
}

/// The pin of `spec.values.image.digest` in the HelmRelease shop/web.
fn release_pin() -> HelmPin {
    HelmPin {
        file: "apps/web/release.yaml".into(),
        line: Some(17),
        key_path: "spec.values.image.digest".into(),
        repository: "ghcr.io/acme/web".into(),
        tag: Some("1.4".into()),
        digest: DIGEST.parse().unwrap(),
        release: ReleaseRef::HelmRelease {
            namespace: Some("shop".into()),
            name: "web".into(),
        },
    }
}

fn summaries(check: &Check) -> Vec<&str> {
    check
        .gitops
        .objects
        .iter()
        .map(|o| o.summary.as_str())
        .collect()
}

#[tokio::test]
async fn a_helm_release_that_released_the_pin_commits_values_is_converged() {
    let w = World::new(DIGEST).await;
    // Only what deploy/common/rbac.yaml grants.
    w.kube.set_grants(verifier_grants());
    w.flux_applied(&w.tip());
    w.helm_release(DIGEST, 1, "deployed", CONFIG);
    w.released_workload("web", "web", "app", DIGEST);
    // Another release running the same repository is not this release's workload.
    w.released_workload("web-canary", "canary", "app", OLD_DIGEST);

    let check = w.check(vec![release_pin()]).await;

    assert_eq!(check.state, State::Converged, "{check:#?}");
    assert_eq!(check.verdicts.len(), 1);
    assert_eq!(
        check.verdicts[0].workload.to_string(),
        "shop/Deployment/web"
    );
    assert_eq!(check.verdicts[0].container, "app");
    assert_eq!(check.verdicts[0].pods_on_pinned, 1);
    assert_eq!(
        summaries(&check),
        ["Flux HelmRelease shop/web: Synced: Helm release shop/web revision 4 (chart web 1.2.0) has the current values, Ready"]
    );
    let refused = w.kube.refused_requests();
    assert!(
        refused.is_empty(),
        "the verifier role is not enough: {refused:?}"
    );
    assert!(w
        .kube
        .requests()
        .iter()
        .any(|r| r.path == "/apis/helm.toolkit.fluxcd.io/v2/helmreleases"));
    w.kube.assert_no_writes();
}

#[tokio::test]
async fn a_helm_release_not_yet_released_with_the_pin_is_progressing() {
    let w = World::new(OLD_DIGEST).await;
    let older = w.tip();
    let pin = w.pin_release(DIGEST);
    // The old release still runs the old digest: nothing is judged on it.
    w.released_workload("web", "web", "app", OLD_DIGEST);
    w.helm_release(OLD_DIGEST, 1, "deployed", CONFIG);

    // Flux applied the commit before the pin.
    w.flux_applied(&older);
    let check = w.check(vec![release_pin()]).await;
    assert_eq!(check.state, State::Progressing, "{check:#?}");
    assert_eq!(
        check.verdicts[0].reason,
        format!(
            "Flux HelmRelease shop/web has not released it yet: Flux has not synced {} yet (at {})",
            &pin[..7],
            &older[..7]
        )
    );
    assert_eq!(
        check.verdicts[0].pods_total, 0,
        "the old pods are not judged"
    );

    // Flux applied the pin, but helm-controller's newest release has the older values.
    w.flux_applied(&pin);
    w.helm_release(DIGEST, 1, "deployed", OLD_CONFIG);
    let check = w.check(vec![release_pin()]).await;
    assert_eq!(check.state, State::Progressing, "{check:#?}");
    assert_eq!(
        check.verdicts[0].reason,
        "Flux HelmRelease shop/web has not released it yet: helm-controller has not acted on generation 2 yet (last attempted: 1)"
    );

    // It attempted the new generation; the upgrade is still running.
    w.helm_release(DIGEST, 2, "pending-upgrade", CONFIG);
    let check = w.check(vec![release_pin()]).await;
    assert_eq!(check.state, State::Progressing, "{check:#?}");
    assert!(
        check.verdicts[0]
            .reason
            .ends_with("Helm release shop/web revision 4 is pending-upgrade"),
        "{}",
        check.verdicts[0].reason
    );
    assert_eq!(
        summaries(&check),
        ["Flux HelmRelease shop/web: not synced: Helm release shop/web revision 4 is pending-upgrade, Progressing: Running 'upgrade' action with timeout of 5m0s"]
    );
    w.kube.assert_no_writes();
}

#[tokio::test]
async fn a_pin_no_container_or_two_workloads_match_is_unverified_with_the_reason() {
    let w = World::new(DIGEST).await;
    w.flux_applied(&w.tip());
    w.helm_release(DIGEST, 1, "deployed", CONFIG);
    // The release's only workload runs another repository.
    let mut api = deployment(
        "shop",
        "api",
        &[("app", "api")],
        &[("api", "ghcr.io/acme/api:2")],
    );
    api["metadata"]["annotations"] =
        json!({"meta.helm.sh/release-name": "web", "meta.helm.sh/release-namespace": "shop"});
    w.kube.apply(api);

    let check = w.check(vec![release_pin()]).await;

    assert_eq!(check.state, State::Unverified, "{check:#?}");
    assert!(check.verdicts.is_empty());
    let not_verified = &check.gitops.not_verified;
    assert_eq!(not_verified.len(), 1);
    assert_eq!(
        not_verified[0].reason,
        NotVerifiedReason::HelmNoMatchingContainer
    );
    assert_eq!(
        not_verified[0].why(),
        "no live container of the Helm release runs the pinned repository: apps/web/release.yaml:17 spec.values.image.digest: Flux HelmRelease shop/web: none of its 1 workload annotated meta.helm.sh/release-name=web in shop runs ghcr.io/acme/web"
    );

    // Two workloads of the release run it: which one the value reaches is the chart's business.
    w.released_workload("web", "web", "app", DIGEST);
    w.released_workload("worker", "web", "worker", DIGEST);
    let check = w.check(vec![release_pin()]).await;
    assert_eq!(check.state, State::Unverified, "{check:#?}");
    assert!(check.verdicts.is_empty(), "never a guess: {check:#?}");
    let not_verified = &check.gitops.not_verified;
    assert_eq!(not_verified[0].reason, NotVerifiedReason::HelmAmbiguous);
    assert!(
        not_verified[0].why().ends_with(
            "2 run ghcr.io/acme/web: shop/Deployment/web container app, shop/Deployment/worker container worker"
        ),
        "{}",
        not_verified[0].why()
    );
    assert_eq!(
        check.summary,
        "1 pinned image matched no live workload; 0 converged"
    );

    // A role without HelmReleases: the verdict says so instead of "not in the cluster".
    w.kube.deny("list", "helmreleases", None);
    let check = w.check(vec![release_pin()]).await;
    assert_eq!(check.state, State::Unverified, "{check:#?}");
    let not_verified = &check.gitops.not_verified[0];
    assert_eq!(not_verified.reason, NotVerifiedReason::HelmReleaseMissing);
    assert!(
        not_verified
            .why()
            .contains("Flux HelmRelease shop/web cannot be read: tagpin may not list HelmReleases"),
        "{}",
        not_verified.why()
    );
    w.kube.assert_no_writes();
}

#[tokio::test]
async fn an_argo_cd_application_with_a_helm_source_is_judged_on_its_inventory() {
    let w = World::new(DIGEST).await;
    let pin = w.tip();
    w.argo_values_app(&pin);
    w.frontend_running(DIGEST);
    let values_pin = HelmPin {
        file: "charts/web/values-prod.yaml".into(),
        line: Some(4),
        key_path: "image.digest".into(),
        release: ReleaseRef::ValuesFile {
            path: "charts/web/values-prod.yaml".into(),
        },
        ..release_pin()
    };

    let check = w.check(vec![values_pin.clone()]).await;

    assert_eq!(check.state, State::Converged, "{check:#?}");
    assert_eq!(
        check.verdicts[0].workload.to_string(),
        "shop/Deployment/acme-web-frontend"
    );
    assert_eq!(check.verdicts[0].container, "web");
    assert_eq!(
        summaries(&check),
        [format!(
            "Argo CD Application argocd/shop: Synced: Argo CD applied {} from the repository, Healthy",
            &pin[..7]
        )]
    );

    // Before Argo CD synced the pin commit, the container waits for it.
    w.kube.apply(argo_chart_app(
        &w.url,
        "0123456789abcdef0123456789abcdef01234567",
        "acme-web-frontend",
        "values-prod.yaml",
    ));
    let check = w.check(vec![values_pin]).await;
    assert_eq!(check.state, State::Progressing, "{check:#?}");
    assert!(
        check.verdicts[0].reason.contains(&format!(
            "Argo CD has not synced {} yet (at 0123456)",
            &pin[..7]
        )),
        "{}",
        check.verdicts[0].reason
    );
    w.kube.assert_no_writes();
}

#[tokio::test]
async fn the_test_server_holds_helm_releases_to_their_crd_schema() {
    let kube = KubeServer::start().await;
    let valid: Value = serde_yaml::from_str(&release_manifest(DIGEST)).unwrap();
    kube.try_apply(valid.clone()).unwrap();

    let mut no_interval = valid.clone();
    no_interval["spec"]
        .as_object_mut()
        .unwrap()
        .remove("interval");
    let refused = kube.try_apply(no_interval).unwrap_err();
    assert!(refused.contains("interval"), "{refused}");

    let mut both = valid.clone();
    both["spec"]["chartRef"] = json!({"kind": "OCIRepository", "name": "web"});
    let refused = kube.try_apply(both).unwrap_err();
    assert!(refused.contains("flux-helmrelease-v2.yaml"), "{refused}");

    let mut long_name = valid.clone();
    long_name["spec"]["releaseName"] = json!("r".repeat(54));
    let refused = kube.try_apply(long_name).unwrap_err();
    assert!(refused.contains("/spec/releaseName"), "{refused}");

    let mut snapshot_without_digest = valid;
    snapshot_without_digest["status"] =
        json!({"history": [{"name": "web", "namespace": "shop", "version": 1}]});
    let refused = kube.try_apply(snapshot_without_digest).unwrap_err();
    assert!(refused.contains("configDigest"), "{refused}");
}

// ---------------------------------------------------------------------------------------------
// The real binary: Helm pins read from the commit, or from a sync pull request's plan block.

/// `--output json` of a run: the exit code and the document.
fn json_of(out: &Output) -> (Option<i32>, Value) {
    let document = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", text(out)));
    (out.status.code(), document)
}

/// Each verdict of a JSON report as `workload container state`.
fn verdict_lines(report: &Value) -> Vec<String> {
    let mut lines: Vec<String> = report["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            format!(
                "{} {} {}",
                v["workload"].as_str().unwrap(),
                v["container"].as_str().unwrap(),
                v["state"].as_str().unwrap()
            )
        })
        .collect();
    lines.sort();
    lines
}

#[tokio::test]
async fn binary_verify_at_a_commit_follows_a_helm_release_and_a_values_file_to_convergence() {
    let w = World::new(OLD_DIGEST).await;
    let older = w.tip();
    let pin = w.pin_release(DIGEST);
    w.kube.set_grants(verifier_grants());
    // Argo CD applied the pin commit's values-prod.yaml; its Deployment runs the digest.
    w.argo_values_app(&pin);
    w.frontend_running(DIGEST);
    // Flux has applied only the commit before: the HelmRelease still has the old values.
    w.flux_applied(&older);
    w.helm_release(OLD_DIGEST, 1, "deployed", CONFIG);
    w.released_workload("web", "web", "app", OLD_DIGEST);

    let out = w.verify(&["--commit", &pin, "--output", "json"]).await;

    let (code, report) = json_of(&out);
    assert_eq!(code, Some(3), "progressing exits 3: {}", text(&out));
    assert_eq!(report["state"], "progressing", "{report:#}");
    assert_eq!(
        verdict_lines(&report),
        [
            "shop/Deployment/acme-web-frontend web converged",
            "shop/Deployment/web app progressing",
        ]
    );
    let web = report["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["workload"] == "shop/Deployment/web")
        .unwrap();
    assert_eq!(
        web["reason"],
        format!(
            "Flux HelmRelease shop/web has not released it yet: Flux has not synced {} yet (at {})",
            &pin[..7],
            &older[..7]
        )
    );
    assert_eq!(web["pods_total"], 0, "the old pods are not judged");

    // Flux applies the pin commit and helm-controller releases its values.
    w.flux_applied(&pin);
    w.helm_release(DIGEST, 2, "deployed", CONFIG);
    w.released_workload("web", "web", "app", DIGEST);

    let out = w.verify(&["--commit", &pin]).await;

    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    for line in [
        "shop/Deployment/web app: Converged",
        "shop/Deployment/acme-web-frontend web: Converged",
    ] {
        assert!(text(&out).contains(line), "{line} in {}", text(&out));
    }
    let (code, report) = json_of(&w.verify(&["--commit", &pin, "--output", "json"]).await);
    assert_eq!(code, Some(0));
    assert_eq!(report["state"], "converged", "{report:#}");
    assert_eq!(
        verdict_lines(&report),
        [
            "shop/Deployment/acme-web-frontend web converged",
            "shop/Deployment/web app converged",
        ]
    );
    for v in report["verdicts"].as_array().unwrap() {
        assert_eq!(v["pinned_digest"], DIGEST);
        assert_eq!(
            (&v["pods_on_pinned"], &v["pods_total"]),
            (&json!(1), &json!(1))
        );
    }
    let refused: Vec<String> = w
        .kube
        .requests()
        .iter()
        .filter(|r| r.status >= 400)
        .map(|r| format!("{} {} -> {}", r.method, r.path, r.status))
        .collect();
    assert!(
        refused.is_empty(),
        "the verifier role is not enough: {refused:?}"
    );
    w.kube.assert_no_writes();
}

const GH_TOKEN: &str = "ghs_helm_verify_5e0c1d";

/// A HelmRelease shop/web whose values name `repository` at tag 1.4, unpinned.
fn unpinned_release(repository: &str) -> String {
    release_manifest(DIGEST).replace(
        &format!("      repository: ghcr.io/acme/web\n      tag: '1.4'\n      digest: {DIGEST}\n"),
        &format!("      repository: {repository}\n      tag: '1.4'\n"),
    )
}

#[tokio::test]
async fn binary_verify_of_a_merged_sync_pull_request_pinning_a_helm_release_says_converged() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let digest = registry
        .push_image("acme/web", "1.4", "web-1.4")
        .await
        .manifest;
    let repository = format!("{host}/acme/web");
    let unpinned = unpinned_release(&repository);
    assert!(unpinned.contains(&repository), "{unpinned}");
    let repo = BareRepo::create(&[("apps/web/release.yaml", &unpinned)]);
    let http = GitHttpServer::start(repo.base_dir(), HttpAuth::None);
    let url = http.url(repo.name());
    let github = GitHubServer::start(GH_TOKEN, "acme", "gitops", repo.path()).await;
    let kube = KubeServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tagpin.yaml");
    std::fs::write(
        &config,
        format!(
            "repository: {{url: '{url}', branch: main}}\n\
             paths: [apps]\n\
             mode: pull-request\n\
             registries: {{insecure: ['{host}']}}\n\
             verify: {{default_namespace: shop}}\n\
             forge: {{api_url: '{}', owner: acme, repo: gitops, token_env: TAGPIN_GITHUB_TOKEN}}\n",
            github.api_url()
        ),
    )
    .unwrap();
    let tagpin = |args: &[&str]| {
        tokio::process::Command::new(env!("CARGO_BIN_EXE_tagpin"))
            .args(args)
            .arg("--config")
            .arg(&config)
            .arg("--cache-dir")
            .arg(dir.path().join("cache"))
            .env("HOME", dir.path())
            .env("KUBECONFIG", kube.kubeconfig(dir.path()))
            .env("TAGPIN_GITHUB_TOKEN", GH_TOKEN)
            .env_remove("DOCKER_CONFIG")
            .env_remove("RUST_LOG")
            .output()
    };

    let out = tagpin(&["sync"]).await.unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let prs = github.prs();
    assert_eq!(prs.len(), 1, "{}", text(&out));
    let body = prs[0].body.clone().unwrap();
    assert!(
        body.contains("helm:HelmRelease/shop/web"),
        "the plan block names the release: {body}"
    );
    let pinned = repo.read("tagpin/main", "apps/web/release.yaml").unwrap();
    assert!(pinned.contains(&digest), "{pinned}");
    // A person merges it; Flux applies the merge and helm-controller releases its values.
    let merge = repo.commit_as_other_writer(
        "main",
        &[("apps/web/release.yaml", &pinned)],
        "Merge pull request #1 from acme/tagpin/main",
    );
    github.merge_pr(1, &merge);
    flux_applied_release(&kube, &url, &merge);
    released(&kube, &pinned, 1, "deployed", CONFIG);
    let image = format!("{repository}:1.4@{digest}");
    let image_id = format!("{repository}@{digest}");
    released_workload(&kube, "web", "web", "app", (&image, &image_id));
    kube.set_grants(verifier_grants());

    let out = tagpin(&["verify", "--pr", "1"]).await.unwrap();

    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains("shop/Deployment/web app: Converged"),
        "{}",
        text(&out)
    );
    let converged: Vec<String> = github
        .statuses(&merge)
        .into_iter()
        .filter(|s| s.context == "tagpin/converged")
        .map(|s| s.state)
        .collect();
    assert_eq!(converged, ["pending", "success"]);
    let comments = github.comments(1);
    assert_eq!(comments.len(), 1, "{comments:?}");
    let row = format!(
        "| shop/Deployment/web | app | `{}` | 1 / 1 | Converged |",
        &digest[..19]
    );
    assert!(
        comments[0].body.contains(&row),
        "{row} in:\n{}",
        comments[0].body
    );
    github.assert_no_violations();
    kube.assert_no_writes();
}

// ---------------------------------------------------------------------------------------------
// Promotion: a staging verified through the Argo CD Application reading its values file.

const API_DIGEST: &str = "sha256:6666666666666666666666666666666666666666666666666666666666666666";
const API_OLD_DIGEST: &str =
    "sha256:5555555555555555555555555555555555555555555555555555555555555555";

/// A stage's values file: ghcr.io/acme/web and a worker on ghcr.io/acme/api, each pinned.
fn stage_values(stage: &str, web: &str, api: &str) -> String {
    format!(
        "# {stage}: what the web chart deploys there.\nimage:\n  repository: ghcr.io/acme/web\n  tag: '1.4'\n  digest: {web}\nworker:\n  replicas: 2\n  image:\n    repository: ghcr.io/acme/api\n    tag: '2.0'\n    digest: \"{api}\"  # quoted on purpose\n"
    )
}

#[tokio::test]
async fn binary_promote_carries_the_digests_of_a_staging_helm_release_verified_converged() {
    let production_values = stage_values("production", OLD_DIGEST, API_OLD_DIGEST);
    let repo = BareRepo::create(&[
        (
            "envs/staging/values-staging.yaml",
            &stage_values("staging", DIGEST, API_DIGEST),
        ),
        ("envs/production/values-production.yaml", &production_values),
        (
            "charts/web/Chart.yaml",
            "apiVersion: v2\nname: web\nversion: 1.2.0\n",
        ),
    ]);
    let http = GitHttpServer::start(repo.base_dir(), HttpAuth::None);
    let url = http.url(repo.name());
    let (staging, production) = (KubeServer::start().await, KubeServer::start().await);
    let dir = tempfile::tempdir().unwrap();
    for (name, kube) in [("staging", &staging), ("production", &production)] {
        std::fs::create_dir_all(dir.path().join(name)).unwrap();
        kube.kubeconfig(&dir.path().join(name));
    }
    let kubeconfig = |stage: &str| dir.path().join(stage).join("kubeconfig");
    let config = dir.path().join("tagpin.yaml");
    std::fs::write(
        &config,
        format!(
            "repository: {{url: '{url}', branch: main}}\n\
             mode: commit\n\
             verify: {{default_namespace: shop}}\n\
             promotion:\n  stages:\n\
             \x20 - name: staging\n    paths: [envs/staging]\n    cluster: {{kubeconfig: '{}'}}\n\
             \x20 - name: production\n    paths: [envs/production]\n    cluster: {{kubeconfig: '{}'}}\n    mode: commit\n",
            kubeconfig("staging").display(),
            kubeconfig("production").display(),
        ),
    )
    .unwrap();
    let tip = repo.head("main").unwrap();
    // Staging's Argo CD renders charts/web with values-staging.yaml; it applied main's tip, and
    // the chart's Deployment runs both pinned digests.
    let app = argo_chart_app(
        &url,
        &tip,
        "staging-web",
        "../../envs/staging/values-staging.yaml",
    );
    let images = [
        ("web", format!("ghcr.io/acme/web:1.4@{DIGEST}"), DIGEST),
        (
            "worker",
            format!("ghcr.io/acme/api:2.0@{API_DIGEST}"),
            API_DIGEST,
        ),
    ];
    let staging_web = images.iter().fold(
        LiveDeployment::new("shop", "staging-web"),
        |web, (c, i, _)| web.container(c, i),
    );
    let promote = || {
        tokio::process::Command::new(env!("CARGO_BIN_EXE_tagpin"))
            .args([
                "promote",
                "--to",
                "production",
                "--output",
                "json",
                "--config",
            ])
            .arg(&config)
            .arg("--cache-dir")
            .arg(dir.path().join("cache"))
            .env("HOME", dir.path())
            .env("KUBECONFIG", dir.path().join("no-such-kubeconfig"))
            .env_remove("DOCKER_CONFIG")
            .env_remove("RUST_LOG")
            .output()
    };

    // Before the chart's Deployment is there, no live container carries the pins: staging is
    // unverified, and nothing is promoted.
    staging.apply(app);
    let out = promote().await.unwrap();
    let (code, report) = json_of(&out);
    assert_eq!(code, Some(4), "{report:#}");
    assert_eq!(
        report["reason"],
        "staging is unverified: 2 pinned images matched no live workload; 0 converged"
    );
    assert_eq!(
        repo.head("main").unwrap(),
        tip,
        "nothing promoted: {report:#}"
    );

    staging_web.apply(&staging);
    let pulled: Vec<String> = images.iter().map(|(_, i, _)| image_id(i)).collect();
    staging_web.pod("staging-web-1").running(&staging, &pulled);

    let out = promote().await.unwrap();

    let (code, report) = json_of(&out);
    assert_eq!(code, Some(0), "{report:#}\n{}", text(&out));
    assert_eq!(report["source"]["state"], "converged", "{report:#}");
    let commit = repo.head("main").unwrap();
    assert_ne!(commit, tip);
    assert_eq!(
        report["outcome"],
        json!({"outcome": "committed", "branch": "main", "commit": commit, "attempts": 1})
    );
    assert_eq!(
        repo.read("main", "envs/production/values-production.yaml")
            .unwrap(),
        production_values
            .replace(OLD_DIGEST, DIGEST)
            .replace(API_OLD_DIGEST, API_DIGEST),
        "exactly staging's digests, the rest byte for byte"
    );
    assert_eq!(
        repo.read("main", "envs/staging/values-staging.yaml")
            .unwrap(),
        stage_values("staging", DIGEST, API_DIGEST)
    );
    staging.assert_no_writes();
    production.assert_no_writes();
}
