//! Pinned Helm values verified without running Helm: tagpin's verifier against the local
//! Kubernetes API server serving Flux HelmReleases (checked against the real CRD's schema, see
//! `tests/fixtures/crds/`), the Flux Kustomization or Argo CD Application that applied them,
//! and workloads Helm annotated with their release; a real Git repository (served over HTTP,
//! as a Flux GitRepository requires) holds the pin commit.
//!
//! Which values are pinned comes from the Helm pins of `verify::helm` (built here as the
//! scanner of Helm values will report them); everything after that is tagpin's own code, from
//! the commit's expectations to the verdict.

use crate::gitops::{argo_application, flux_objects, verifier_grants};
use crate::support;

use serde_json::{json, Value};
use support::git::{BareRepo, GitHttpServer, HttpAuth};
use support::kube::{deployment, pod, running_pod_status, KubeServer};

use tagpin::config::{ClusterTarget, Config};
use tagpin::verify::expected::NotVerifiedReason;
use tagpin::verify::helm::{HelmPin, ReleaseRef};
use tagpin::verify::live::{Cluster, DEFAULT_API_TIMEOUT};
use tagpin::verify::verdict::State;
use tagpin::verify::{check, expectations_at, Check, Families};

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

    /// The Flux GitRepository and Kustomization of `./apps`, having applied `revision`, with
    /// the HelmRelease shop/web in their inventory.
    fn flux_applied(&self, revision: &str) {
        let url = self.url.trim_end_matches(".git").to_string();
        let [repository, mut kustomization] = flux_objects(&url, revision, &[]);
        kustomization["status"]["inventory"]["entries"] =
            json!([{"id": "shop_web_helm.toolkit.fluxcd.io_HelmRelease", "v": "v2"}]);
        self.kube.apply(repository);
        self.kube.apply(kustomization);
    }

    /// The HelmRelease shop/web as Flux applied it from Git (values pinning `digest`), and its
    /// status: helm-controller attempted `attempted` generation with [`CONFIG`], and the newest
    /// Helm release (revision 4) is `state` with `config`.
    fn helm_release(&self, digest: &str, attempted: i64, state: &str, config: &str) {
        let manifest: Value = serde_yaml::from_str(&release_manifest(digest)).unwrap();
        let stored = self.kube.apply(manifest);
        let generation = stored["metadata"]["generation"].as_i64().unwrap();
        let ready = match state {
            "deployed" => ("True", "UpgradeSucceeded", "Helm upgrade succeeded for release shop/web.v4 with chart web@1.2.0"),
            "pending-upgrade" => ("Unknown", "Progressing", "Running 'upgrade' action with timeout of 5m0s"),
            _ => ("False", "UpgradeFailed", "Helm upgrade failed for release shop/web with chart web@1.2.0: context deadline exceeded"),
        };
        self.kube.set_status(
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

    /// A Deployment of shop Helm annotated with `release`, running one pod on `digest` of
    /// ghcr.io/acme/web (its only container named `container`).
    fn released_workload(&self, name: &str, release: &str, container: &str, digest: &str) {
        let image = format!("ghcr.io/acme/web:1.4@{digest}");
        let mut d = deployment("shop", name, &[("app", name)], &[(container, &image)]);
        d["metadata"]["annotations"] = json!({
            "meta.helm.sh/release-name": release,
            "meta.helm.sh/release-namespace": "shop",
        });
        d["metadata"]["labels"]["app.kubernetes.io/managed-by"] = json!("Helm");
        self.kube.apply(d);
        self.kube.set_status(
            "Deployment",
            "shop",
            name,
            json!({"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1,
                   "readyReplicas": 1, "availableReplicas": 1}),
        );
        let pod_name = format!("{name}-1");
        self.kube.apply(pod(
            "shop",
            &pod_name,
            &[("app", name)],
            &[(container, &image)],
        ));
        self.kube.set_pod_status(
            "shop",
            &pod_name,
            running_pod_status(&[(container, &image, &format!("ghcr.io/acme/web@{digest}"))]),
        );
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
        line: 17,
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
    let pin = w.repo.commit_as_other_writer(
        "main",
        &[("apps/web/release.yaml", &release_manifest(DIGEST))],
        "Pin web to a newer digest",
    );
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
    // Argo CD renders charts/web with values-prod.yaml; its inventory names the Deployment the
    // chart made, under a name found nowhere in Git.
    let mut app = argo_application(&w.url, &pin, &[("shop", "acme-web-frontend")]);
    let source = json!({"repoURL": w.url, "path": "charts/web", "targetRevision": "main",
                        "helm": {"valueFiles": ["values-prod.yaml"]}});
    app["spec"]["source"] = source.clone();
    app["status"]["sync"]["comparedTo"]["source"] = source;
    w.kube.apply(app);
    let mut frontend = deployment(
        "shop",
        "acme-web-frontend",
        &[("app", "frontend")],
        &[("web", &format!("ghcr.io/acme/web:1.4@{DIGEST}"))],
    );
    frontend["metadata"]["labels"]["app.kubernetes.io/instance"] = json!("shop");
    w.kube.apply(frontend);
    w.kube.set_status(
        "Deployment",
        "shop",
        "acme-web-frontend",
        json!({"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1,
               "readyReplicas": 1, "availableReplicas": 1}),
    );
    let image = format!("ghcr.io/acme/web:1.4@{DIGEST}");
    w.kube.apply(pod(
        "shop",
        "frontend-1",
        &[("app", "frontend")],
        &[("web", &image)],
    ));
    w.kube.set_pod_status(
        "shop",
        "frontend-1",
        running_pod_status(&[("web", &image, &format!("ghcr.io/acme/web@{DIGEST}"))]),
    );
    let values_pin = HelmPin {
        file: "charts/web/values-prod.yaml".into(),
        line: 4,
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
    let mut behind = argo_application(
        &w.url,
        "0123456789abcdef0123456789abcdef01234567",
        &[("shop", "acme-web-frontend")],
    );
    behind["spec"]["source"] = json!({"repoURL": w.url, "path": "charts/web", "targetRevision": "main",
                                      "helm": {"valueFiles": ["values-prod.yaml"]}});
    w.kube.apply(behind);
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
