//! `tagpin verify` asks Argo CD and Flux directly: the real binary against the local Kubernetes
//! API server serving Applications, Kustomizations and GitRepositories (each checked against its
//! CRD's schema), and a real bare Git repository whose commits those objects report as applied.
//! The objects are built from the real captures in `tests/fixtures/gitops/`.

use crate::support;
use crate::verify::live_web;

use std::path::Path;
use std::process::Output;

use serde::Deserialize;
use serde_json::{json, Value};
use support::git::{BareRepo, GitHttpServer, HttpAuth};
use support::kube::{Grant, KubeServer, CRD_GROUPS};
use support::manifests::deployment_with_replicas;
use support::output_text as text;

const DIGEST: &str = "sha256:8888888888888888888888888888888888888888888888888888888888888888";
const NEWER: &str = "sha256:9999999999999999999999999999999999999999999999999999999999999999";

fn image(digest: &str) -> String {
    format!("ghcr.io/acme/web:1@{digest}")
}

/// A repository whose `apps/web.yaml` pins the web Deployment, the cluster, and tagpin's
/// configuration. The repository is reached as a `file://` URL, or over HTTP (a Flux
/// GitRepository accepts only `http`, `https` and `ssh` URLs).
struct World {
    repo: BareRepo,
    kube: KubeServer,
    dir: tempfile::TempDir,
    url: String,
    _http: Option<GitHttpServer>,
}

impl World {
    async fn new(over_http: bool) -> World {
        let repo = BareRepo::create(&[(
            "apps/web.yaml",
            &deployment_with_replicas("web", &image(DIGEST), 1),
        )]);
        let http = over_http.then(|| GitHttpServer::start(repo.base_dir(), HttpAuth::None));
        let url = match &http {
            Some(server) => server.url(repo.name()),
            None => repo.file_url(),
        };
        let world = World {
            repo,
            kube: KubeServer::start().await,
            dir: tempfile::tempdir().unwrap(),
            url,
            _http: http,
        };
        world.configure("");
        world
    }

    /// Writes `tagpin.yaml`; `verify` is added to the `verify:` mapping.
    fn configure(&self, verify: &str) {
        std::fs::write(
            self.dir.path().join("tagpin.yaml"),
            format!(
                "repository: {{url: '{}', branch: main}}\npaths: [apps]\nverify: {{default_namespace: shop{verify}}}\n",
                self.url
            ),
        )
        .unwrap();
    }

    /// The tip of `main`: the pin commit of `--branch main`.
    fn tip(&self) -> String {
        self.repo.head("main").unwrap()
    }

    async fn verify(&self, args: &[&str]) -> Output {
        tagpin_verify(self.dir.path(), &self.kube, args).await
    }

    async fn verify_json(&self, args: &[&str]) -> (Option<i32>, Value) {
        let mut args = args.to_vec();
        args.extend(["--output", "json"]);
        let out = self.verify(&args).await;
        let document = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", text(&out)));
        (out.status.code(), document)
    }

    /// `name` in namespace shop, rolled out with one pod on `digest`.
    fn running(&self, name: &str, digest: &str) {
        let workload = live_web(name, &image(digest));
        workload.apply(&self.kube);
        workload
            .pod(&format!("{name}-1"))
            .running(&self.kube, &[&format!("ghcr.io/acme/web@{digest}")]);
    }
}

/// The real `tagpin verify` with `args`, configured by `dir/tagpin.yaml` (its cache in
/// `dir/cache`, `HOME` there) against `kube`, with no Docker config or log filter inherited.
pub(crate) async fn tagpin_verify(dir: &Path, kube: &KubeServer, args: &[&str]) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_tagpin"))
        .args(["verify", "--config"])
        .arg(dir.join("tagpin.yaml"))
        .arg("--cache-dir")
        .arg(dir.join("cache"))
        .args(args)
        .env("HOME", dir)
        .env("KUBECONFIG", kube.kubeconfig(dir))
        .env_remove("DOCKER_CONFIG")
        .env_remove("RUST_LOG")
        .output()
        .await
        .expect("run tagpin")
}

/// Asserts that `verify` exited 0 with the `app` container of `workload` converged.
fn assert_converged(out: &Output, workload: &str) {
    assert_eq!(out.status.code(), Some(0), "{}", text(out));
    let line = format!("{workload} app: Converged");
    assert!(text(out).contains(&line), "{}", text(out));
}

fn short(sha: &str) -> &str {
    &sha[..7]
}

/// A capture from `tests/fixtures/gitops/`: its objects.
fn capture(name: &str) -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/gitops")
        .join(name);
    let value: Value = serde_yaml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    match value["items"].as_array() {
        Some(items) => items.clone(),
        None => vec![value],
    }
}

/// The real sock-shop Application, made to apply `apps/` of `repo_url` at `revision`, managing
/// the Deployments `(namespace, name)` (each in the capture's own resource form).
pub(crate) fn argo_application(
    repo_url: &str,
    revision: &str,
    deployments: &[(&str, &str)],
) -> Value {
    let mut app = capture("argocd-application-sock-shop.yaml").remove(0);
    app["metadata"] = json!({"name": "shop", "namespace": "argocd"});
    let source = json!({"repoURL": repo_url, "path": "./apps", "targetRevision": "main"});
    app["spec"]["source"] = source.clone();
    app["spec"]["destination"]["namespace"] = json!("shop");
    app["status"]["sync"]["revision"] = json!(revision);
    app["status"]["sync"]["comparedTo"]["source"] = source;
    let resources = app["status"]["resources"].as_array().unwrap();
    let deployment = resources
        .iter()
        .find(|r| r["kind"] == "Deployment")
        .unwrap()
        .clone();
    app["status"]["resources"] = deployments
        .iter()
        .map(|(namespace, name)| {
            let mut resource = deployment.clone();
            resource["namespace"] = json!(namespace);
            resource["name"] = json!(name);
            resource
        })
        .collect();
    app
}

/// The documented podinfo GitRepository and Kustomization, made to apply `./apps` of `url` at
/// `revision` (reported as `main@sha1:<revision>`), with the Deployments `(namespace, name)` in
/// its inventory.
pub(crate) fn flux_objects(url: &str, revision: &str, deployments: &[(&str, &str)]) -> [Value; 2] {
    let objects = capture("flux-kustomization-podinfo.yaml");
    let mut repository = objects[0].clone();
    repository["metadata"]["name"] = json!("gitops");
    repository["spec"]["url"] = json!(url);
    repository["spec"]["ref"] = json!({"branch": "main"});
    let mut kustomization = objects[1].clone();
    kustomization["metadata"]["name"] = json!("apps");
    kustomization["spec"]["sourceRef"]["name"] = json!("gitops");
    kustomization["spec"]["path"] = json!("./apps");
    kustomization["spec"]["targetNamespace"] = json!("shop");
    let applied = format!("main@sha1:{revision}");
    let status = &mut kustomization["status"];
    status["lastAppliedRevision"] = json!(applied);
    status["lastAttemptedRevision"] = json!(applied);
    status["conditions"][0]["message"] = json!(format!("Applied revision: {applied}"));
    status["inventory"]["entries"] = deployments
        .iter()
        .map(|(namespace, name)| json!({"id": format!("{namespace}_{name}_apps_Deployment"), "v": "v1"}))
        .collect();
    [repository, kustomization]
}

/// The grants of the ClusterRole in `deploy/common/rbac.yaml`, as the test server applies them.
pub(crate) fn verifier_grants() -> Vec<Grant> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/common/rbac.yaml");
    let text = std::fs::read_to_string(path).unwrap();
    let strings = |v: &serde_yaml::Value| -> Vec<String> {
        v.as_sequence()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_string())
            .collect()
    };
    let mut grants = Vec::new();
    for document in serde_yaml::Deserializer::from_str(&text) {
        let object = serde_yaml::Value::deserialize(document).unwrap();
        if object["kind"] != "ClusterRole" {
            continue;
        }
        for rule in object["rules"].as_sequence().unwrap() {
            let (verbs, resources) = (strings(&rule["verbs"]), strings(&rule["resources"]));
            let verbs: Vec<&str> = verbs.iter().map(String::as_str).collect();
            let resources: Vec<&str> = resources.iter().map(String::as_str).collect();
            grants.push(Grant::cluster(&verbs, &resources));
        }
    }
    grants
}

#[tokio::test]
async fn an_argo_cd_application_synced_to_the_pin_commit_is_named_in_a_converged_verdict() {
    let w = World::new(false).await;
    // Only what deploy/common/rbac.yaml grants: the GitOps reads must need nothing more.
    w.kube.set_grants(verifier_grants());
    w.running("web", DIGEST);
    // Argo CD spells the repository its own way: no `.git`, a trailing slash.
    let repo_url = format!("{}/", w.url.trim_end_matches(".git"));
    let pin = w.tip();
    w.kube
        .apply(argo_application(&repo_url, &pin, &[("shop", "web")]));

    let out = w.verify(&["--branch", "main"]).await;

    assert_converged(&out, "shop/Deployment/web");
    let line = format!(
        "Argo CD Application argocd/shop: Synced to {}, Healthy",
        short(&pin)
    );
    assert!(text(&out).contains(&line), "{}", text(&out));

    let (code, report) = w.verify_json(&["--branch", "main"]).await;
    assert_eq!(code, Some(0), "{report:#}");
    let app = &report["gitops"][0];
    assert_eq!(
        (&app["tool"], &app["kind"], &app["synced"]),
        (&json!("argocd"), &json!("Application"), &json!(true))
    );
    assert_eq!(app["revision"], json!(pin));
    assert_eq!(app["health"], "Healthy");
    assert_eq!(app["workloads"], json!(["shop/Deployment/web"]));

    let refused = w.kube.refused_requests();
    assert!(
        refused.is_empty(),
        "the verifier role is not enough: {refused:?}"
    );
    w.kube.assert_no_writes();
}

#[tokio::test]
async fn an_application_at_an_older_revision_keeps_the_pin_progressing_naming_both_revisions() {
    let w = World::new(false).await;
    let applied = w.tip();
    w.running("web", DIGEST);
    // The next pin: Argo CD has not applied it, so the old rollout says nothing about it.
    let pin = w.repo.commit_as_other_writer(
        "main",
        &[(
            "apps/web.yaml",
            &deployment_with_replicas("web", &image(NEWER), 1),
        )],
        "Pin web to a newer digest",
    );
    w.kube
        .apply(argo_application(&w.url, &applied, &[("shop", "web")]));

    let out = w.verify(&["--branch", "main"]).await;

    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let reason = format!(
        "Argo CD has not synced {} yet (at {})",
        short(&pin),
        short(&applied)
    );
    assert!(
        text(&out).contains(&format!(
            "shop/Deployment/web app: Progressing (0 of 0 pods on {NEWER}) {reason}"
        )),
        "{}",
        text(&out)
    );
    let (_, report) = w.verify_json(&["--branch", "main"]).await;
    assert_eq!(
        report["verdicts"][0]["conditions"][0]["reason"],
        "GitOpsNotSynced"
    );
    assert_eq!(report["gitops"][0]["synced"], false);
    assert_eq!(report["gitops"][0]["revision"], json!(applied));
    assert_eq!(report["gitops"][0]["pin_commit"], json!(pin));
    w.kube.assert_no_writes();
}

#[tokio::test]
async fn a_flux_kustomization_at_a_later_commit_than_the_pin_is_synced() {
    let w = World::new(true).await;
    let pin = w.tip();
    // Someone pushed after the pin; Flux applied that.
    let later = w
        .repo
        .commit_as_other_writer("main", &[("README.md", "# gitops\n")], "Docs");
    w.running("web", DIGEST);
    // Flux names the repository without `.git`.
    let url = w.url.trim_end_matches(".git").to_string();
    for object in flux_objects(&url, &later, &[("shop", "web")]) {
        w.kube.apply(object);
    }

    let out = w.verify(&["--commit", &pin]).await;

    assert_converged(&out, "shop/Deployment/web");
    let line = format!(
        "Flux Kustomization flux-system/apps: Synced to {}, Ready",
        short(&later)
    );
    assert!(text(&out).contains(&line), "{}", text(&out));

    // Before that push, Flux was at a commit before the pin.
    let parent_of_pin = "0123456789abcdef0123456789abcdef01234567";
    for object in flux_objects(&url, parent_of_pin, &[("shop", "web")]) {
        w.kube.apply(object);
    }
    let out = w.verify(&["--commit", &pin]).await;
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(
        text(&out).contains(&format!(
            "Flux has not synced {} yet (at 0123456)",
            short(&pin)
        )),
        "{}",
        text(&out)
    );
    w.kube.assert_no_writes();
}

#[tokio::test]
async fn a_prefixed_name_in_the_inventory_is_the_live_workload() {
    let w = World::new(false).await;
    // kustomize's namePrefix made `web` into `prod-web`; nothing called `web` runs.
    w.running("prod-web", DIGEST);
    w.kube
        .apply(argo_application(&w.url, &w.tip(), &[("shop", "prod-web")]));

    let out = w.verify(&["--branch", "main"]).await;

    assert_converged(&out, "shop/Deployment/prod-web");
    w.kube.assert_no_writes();
}

#[tokio::test]
async fn a_named_application_speaks_for_the_pins_even_from_a_mirror() {
    let w = World::new(false).await;
    w.running("prod-web", DIGEST);
    // Argo CD reads a mirror of the repository: only its name ties it to the pins.
    let mirror = "https://git-mirror.example.com/acme/gitops.git";
    w.kube
        .apply(argo_application(mirror, &w.tip(), &[("shop", "prod-web")]));
    let out = w.verify(&["--branch", "main"]).await;
    assert_eq!(
        out.status.code(),
        Some(1),
        "not found, so not consulted: {}",
        text(&out)
    );

    w.configure(", gitops: {applications: [argocd/shop]}");
    let out = w.verify(&["--branch", "main"]).await;
    assert_converged(&out, "shop/Deployment/prod-web");
    w.kube.assert_no_writes();
}

#[tokio::test]
async fn a_workload_missing_from_the_inventory_is_not_verified_with_its_reason() {
    let w = World::new(false).await;
    w.running("web", DIGEST);
    w.kube
        .apply(argo_application(&w.url, &w.tip(), &[("shop", "api")]));

    let (code, report) = w.verify_json(&["--branch", "main"]).await;

    assert_eq!(code, Some(4), "{report:#}");
    assert_eq!(
        report["not_verified"],
        json!([{"image": image(DIGEST), "workload": "shop/Deployment/web",
                "reason": "not_in_gitops_inventory"}])
    );
    assert_eq!(
        report["summary"],
        "1 pinned image matched no live workload; 0 converged"
    );
    w.kube.assert_no_writes();
}

#[tokio::test]
async fn without_the_crds_verify_is_what_it_was() {
    let w = World::new(false).await;
    w.running("web", DIGEST);
    // An Application that would hold the pin back, were it consulted.
    w.kube.apply(argo_application(
        &w.url,
        "0123456789abcdef0123456789abcdef01234567",
        &[("shop", "web")],
    ));
    for group in CRD_GROUPS {
        w.kube.uninstall(group);
    }

    let (code, without_crds) = w.verify_json(&["--branch", "main"]).await;

    assert_eq!(code, Some(0), "{without_crds:#}");
    assert!(without_crds.get("gitops").is_none(), "{without_crds:#}");
    let mut not_found: Vec<String> = w
        .kube
        .requests()
        .iter()
        .filter(|r| r.status == 404)
        .map(|r| r.path.clone())
        .collect();
    not_found.sort();
    assert_eq!(
        not_found,
        [
            "/apis/argoproj.io/v1alpha1/applications",
            "/apis/kustomize.toolkit.fluxcd.io/v1/kustomizations",
            "/apis/source.toolkit.fluxcd.io/v1/gitrepositories",
        ],
        "asked once each, and told quietly that there are none"
    );

    // The same document as with the CRDs installed and no GitOps object at all.
    w.kube.delete("Application", "argocd", "shop");
    w.kube.reinstall();
    let (code, without_objects) = w.verify_json(&["--branch", "main"]).await;
    assert_eq!(code, Some(0));
    assert_eq!(without_crds, without_objects);
    w.kube.assert_no_writes();
}

#[tokio::test]
async fn the_test_server_holds_gitops_objects_to_their_crd_schemas() {
    let kube = KubeServer::start().await;
    // The real captures are valid.
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gitops");
    let loaded = kube.load_yaml(&fixtures.join("argocd-application-sock-shop.yaml"), "argo");
    assert_eq!(loaded[0].kind, "Application");
    let loaded = kube.load_yaml(
        &fixtures.join("flux-kustomization-podinfo.yaml"),
        "flux-system",
    );
    assert_eq!(loaded.len(), 2);

    // What the real API server would refuse, this one refuses.
    let mut app = capture("argocd-application-sock-shop.yaml").remove(0);
    app["spec"].as_object_mut().unwrap().remove("project");
    let refused = kube.try_apply(app).unwrap_err();
    assert!(refused.contains("project"), "{refused}");

    let [mut repository, mut kustomization] =
        flux_objects("file:///srv/git/gitops.git", "abc", &[]);
    repository["metadata"]["namespace"] = json!("flux-system");
    let refused = kube.try_apply(repository).unwrap_err();
    assert!(refused.contains("/spec/url"), "{refused}");
    kustomization["spec"]["sourceRef"]["kind"] = json!("HelmRepository");
    let refused = kube.try_apply(kustomization).unwrap_err();
    assert!(refused.contains("/spec/sourceRef/kind"), "{refused}");
    kube.assert_no_writes();
}
