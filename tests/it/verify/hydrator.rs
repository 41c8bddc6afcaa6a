//! `tagpin verify` with Argo CD's Source Hydrator: the real binary against the local Kubernetes
//! API server serving an `Application` with `spec.sourceHydrator` (checked against the CRD's
//! schema) and a real bare Git repository holding the dry source on `main` and the hydrated
//! branch Argo CD writes (`support::hydrator`, from the fixtures in `tests/fixtures/gitops/`).
//!
//! The manifest pins `web` without a namespace and the configuration sets no
//! `verify.default_namespace`, as a user of Argo CD 3.5 lays it out: the Application's
//! destination namespace is where `web` runs, and a `web` in `default` is someone else's.

use crate::support;
use crate::verify::gitops::{tagpin_verify, verifier_grants};

use std::process::Output;

use serde_json::{json, Value};
use support::git::{git_ok, BareRepo};
use support::hydrator::{self as argo, application};
use support::kube::KubeServer;
use support::manifests::deployment_with_replicas;
use support::output_text as text;
use support::workloads::LiveDeployment;

const DIGEST: &str = "sha256:8888888888888888888888888888888888888888888888888888888888888888";
const NEWER: &str = "sha256:9999999999999999999999999999999999999999999999999999999999999999";
const SYNC_BRANCH: &str = "environments/shop";
const REVIEW_BRANCH: &str = "environments/shop-next";

fn image(digest: &str) -> String {
    format!("ghcr.io/acme/web:1@{digest}")
}

fn short(sha: &str) -> &str {
    &sha[..7]
}

/// The dry source (`apps/web.yaml` on `main`), the cluster, and tagpin's configuration.
struct World {
    repo: BareRepo,
    kube: KubeServer,
    dir: tempfile::TempDir,
    url: String,
}

impl World {
    async fn new() -> World {
        let repo = BareRepo::create(&[(
            "apps/web.yaml",
            &deployment_with_replicas("web", &image(DIGEST), 1),
        )]);
        let url = repo.file_url();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("tagpin.yaml"),
            format!("repository: {{url: '{url}', branch: main}}\npaths: [apps]\n"),
        )
        .unwrap();
        let kube = KubeServer::start().await;
        // Only what deploy/common/rbac.yaml grants.
        kube.set_grants(verifier_grants());
        World {
            repo,
            kube,
            dir,
            url,
        }
    }

    fn tip(&self) -> String {
        self.repo.head("main").unwrap()
    }

    /// The next pin on `main`: `web` on the newer digest.
    fn pin_newer(&self) -> String {
        self.repo.commit_as_other_writer(
            "main",
            &[(
                "apps/web.yaml",
                &deployment_with_replicas("web", &image(NEWER), 1),
            )],
            "Pin web to a newer digest",
        )
    }

    /// Argo CD hydrates `dry` into `branch` (a new one starting from the sync branch): the dry
    /// manifests, under the sync path `shop`.
    fn hydrate_into(&self, dry: &str, branch: &str) -> String {
        let manifests = git_ok(self.repo.path(), &["show", &format!("{dry}:apps/web.yaml")]);
        argo::hydrate(
            &self.repo,
            &self.url,
            dry,
            branch,
            Some(SYNC_BRANCH),
            &[("shop", &format!("{manifests}\n"))],
        )
    }

    fn hydrate(&self, dry: &str) -> String {
        self.hydrate_into(dry, SYNC_BRANCH)
    }

    /// The Application `argocd/shop`: the dry `apps` of the repository, hydrated into `shop`
    /// of the sync branch, deployed to namespace `shop`.
    fn application(&self) -> Value {
        application("shop", "shop", &self.url, "apps", SYNC_BRANCH, "shop")
    }

    /// `namespace/web`, rolled out, its one pod on `digest`; the template pins `template`.
    fn running(&self, namespace: &str, template: &str, digest: &str) {
        let web = LiveDeployment::new(namespace, "web").container("app", &image(template));
        web.apply(&self.kube);
        web.pod("web-1")
            .running(&self.kube, &[&format!("ghcr.io/acme/web@{digest}")]);
    }

    async fn verify(&self) -> Output {
        tagpin_verify(self.dir.path(), &self.kube, &["--branch", "main"]).await
    }

    async fn verify_json(&self) -> (Option<i32>, Value) {
        self.verify_json_of(&["--branch", "main"]).await
    }

    /// `verify ARGS --output json`: the exit code and the document.
    async fn verify_json_of(&self, args: &[&str]) -> (Option<i32>, Value) {
        let mut args = args.to_vec();
        args.extend(["--output", "json"]);
        let out = tagpin_verify(self.dir.path(), &self.kube, &args).await;
        let document = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", text(&out)));
        (out.status.code(), document)
    }

    fn assert_read_only(&self) {
        let refused = self.kube.refused_requests();
        assert!(
            refused.is_empty(),
            "the verifier role is not enough: {refused:?}"
        );
        self.kube.assert_no_writes();
    }
}

/// Asserts `verify` said `line` and exited with `code`.
fn assert_says(out: &Output, code: i32, line: &str) {
    assert_eq!(out.status.code(), Some(code), "{}", text(out));
    assert!(text(out).contains(line), "no {line:?} in:\n{}", text(out));
}

#[tokio::test]
async fn an_application_synced_to_a_hydrated_commit_of_the_pin_is_converged_where_it_deploys() {
    let w = World::new().await;
    let pin = w.tip();
    w.running("shop", DIGEST, DIGEST);
    let hydrated = w.hydrate(&pin);
    let mut app = w.application();
    argo::hydrated(&mut app, &pin, &hydrated);
    argo::synced(&mut app, &hydrated, &[("shop", "web")]);
    w.kube.apply(app.clone());

    let out = w.verify().await;

    assert_says(&out, 0, "shop/Deployment/web app: Converged");
    assert_says(
        &out,
        0,
        &format!(
            "Argo CD Application argocd/shop: Synced to {} (hydrated as {} on {SYNC_BRANCH}), Healthy",
            short(&pin),
            short(&hydrated)
        ),
    );

    // Argo CD has since hydrated a later dry commit, and not synced it: the status no longer
    // pairs the synced commit with its dry commit, its hydrator.metadata does.
    let later = w
        .repo
        .commit_as_other_writer("main", &[("README.md", "# shop\n")], "Docs");
    let rehydrated = w.hydrate(&later);
    argo::hydrated(&mut app, &later, &rehydrated);
    w.kube.apply(app);

    let (code, report) = w.verify_json_of(&["--commit", &pin]).await;

    assert_eq!(code, Some(0), "{report:#}");
    assert_eq!(report["verdicts"][0]["workload"], "shop/Deployment/web");
    assert_eq!(report["gitops"][0]["synced"], true);
    assert_eq!(report["gitops"][0]["revision"], json!(pin), "{report:#}");
    w.assert_read_only();
}

#[tokio::test]
async fn a_hydration_of_the_pin_not_synced_yet_is_progressing_naming_both_commits() {
    let w = World::new().await;
    let old = w.tip();
    w.running("shop", DIGEST, DIGEST);
    let synced = w.hydrate(&old);
    let pin = w.pin_newer();
    // Argo CD hydrated the pin; the cluster still runs what it synced of the old commit.
    let hydrated = w.hydrate(&pin);
    let mut app = w.application();
    argo::hydrated(&mut app, &pin, &hydrated);
    argo::synced(&mut app, &synced, &[("shop", "web")]);
    w.kube.apply(app);

    let out = w.verify().await;

    let reason = format!(
        "Argo CD has not synced {} yet (at {})",
        short(&pin),
        short(&old)
    );
    assert_says(
        &out,
        3,
        &format!("shop/Deployment/web app: Progressing (0 of 0 pods on {NEWER}) {reason}"),
    );
    let (_, report) = w.verify_json().await;
    assert_eq!(
        report["verdicts"][0]["conditions"][0]["reason"],
        "GitOpsNotSynced"
    );
    assert_eq!(report["gitops"][0]["revision"], json!(old));
    assert_eq!(report["gitops"][0]["pin_commit"], json!(pin));
    w.assert_read_only();
}

#[tokio::test]
async fn a_dry_commit_argo_cd_has_not_hydrated_yet_is_progressing() {
    let w = World::new().await;
    let old = w.tip();
    w.running("shop", DIGEST, DIGEST);
    let synced = w.hydrate(&old);
    let pin = w.pin_newer();
    let mut app = w.application();
    argo::hydrated(&mut app, &old, &synced);
    argo::synced(&mut app, &synced, &[("shop", "web")]);
    argo::hydrating(&mut app);
    w.kube.apply(app);

    let out = w.verify().await;

    assert_says(
        &out,
        3,
        &format!(
            "Argo CD has not hydrated {} yet (hydrating; at {})",
            short(&pin),
            short(&old)
        ),
    );
    assert_says(
        &out,
        3,
        &format!(
            "Argo CD Application argocd/shop: not hydrated: at {}, hydrating, waiting for {}, Healthy",
            short(&old),
            short(&pin)
        ),
    );
    let (_, report) = w.verify_json().await;
    assert_eq!(
        report["verdicts"][0]["conditions"][0]["reason"],
        "GitOpsNotHydrated"
    );
    w.assert_read_only();
}

#[tokio::test]
async fn a_failed_hydration_fails_the_pin_in_argo_cds_words() {
    let w = World::new().await;
    let old = w.tip();
    w.running("shop", DIGEST, DIGEST);
    let synced = w.hydrate(&old);
    let pin = w.pin_newer();
    let mut app = w.application();
    argo::synced(&mut app, &synced, &[("shop", "web")]);
    // The words of controller/hydrator/hydrator.go around a repo-server error.
    let message = format!(
        "Failed to hydrate revision \"{pin}\": failed to hydrate apps: failed to get repo objects for app \"argocd/shop\": rpc error: code = Unknown desc = Manifest generation error (cached): apps/web.yaml: error converting YAML to JSON"
    );
    argo::failed(&mut app, &pin, &message);
    w.kube.apply(app);

    let out = w.verify().await;

    assert_says(
        &out,
        1,
        &format!(
            "shop/Deployment/web app: Failed (0 of 0 pods on {NEWER}) Argo CD could not hydrate {}: {message}",
            short(&pin)
        ),
    );
    assert_says(
        &out,
        1,
        &format!("Argo CD Application argocd/shop: hydration failed: {message}, Healthy"),
    );
    let (code, report) = w.verify_json().await;
    assert_eq!(code, Some(1));
    assert_eq!(report["state"], "failed");
    assert_eq!(
        report["verdicts"][0]["conditions"][0]["reason"],
        "GitOpsHydrationFailed"
    );
    w.assert_read_only();
}

#[tokio::test]
async fn pods_on_another_digest_while_the_application_says_synced_are_not_converged() {
    let w = World::new().await;
    let pin = w.tip();
    // Someone else's `web` in `default` runs the pinned digest; the Application's own, in its
    // destination namespace, has the pin in its template but its pod still runs another one.
    w.running("default", DIGEST, DIGEST);
    w.running("shop", DIGEST, NEWER);
    let hydrated = w.hydrate(&pin);
    let mut app = w.application();
    argo::hydrated(&mut app, &pin, &hydrated);
    argo::synced(&mut app, &hydrated, &[("shop", "web")]);
    w.kube.apply(app);

    let (code, report) = w.verify_json().await;

    assert_eq!(code, Some(3), "{report:#}");
    let verdicts = report["verdicts"].as_array().unwrap();
    assert_eq!(verdicts.len(), 1, "{report:#}");
    assert_eq!(verdicts[0]["workload"], "shop/Deployment/web");
    assert_eq!(verdicts[0]["state"], "progressing");
    assert_eq!(verdicts[0]["stale_pods"], json!(["web-1"]));
    assert_eq!(report["gitops"][0]["synced"], true);
    w.assert_read_only();
}

#[tokio::test]
async fn a_hydration_waiting_for_review_on_its_hydrate_to_branch_says_so_until_merged() {
    let w = World::new().await;
    let old = w.tip();
    let synced = w.hydrate(&old);
    let pin = w.pin_newer();
    w.running("shop", NEWER, NEWER);
    // Argo CD commits the pin's hydration to the review branch only.
    let proposed = w.hydrate_into(&pin, REVIEW_BRANCH);
    let mut app = w.application();
    argo::hydrate_to(&mut app, REVIEW_BRANCH);
    argo::hydrated(&mut app, &pin, &proposed);
    argo::synced(&mut app, &synced, &[("shop", "web")]);
    w.kube.apply(app.clone());

    let out = w.verify().await;

    assert_says(
        &out,
        3,
        &format!(
            "Argo CD hydrated {} into {REVIEW_BRANCH} as {}, waiting for it to reach {SYNC_BRANCH} (at {})",
            short(&pin),
            short(&proposed),
            short(&old)
        ),
    );

    // The review merges it (a merge commit, not the hydrated commit itself), Argo CD syncs it.
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    git_ok(
        dir,
        &["clone", "--quiet", &w.url, "--branch", SYNC_BRANCH, "."],
    );
    git_ok(
        dir,
        &[
            "merge",
            "--quiet",
            "--no-ff",
            "-m",
            "Merge the hydration",
            &format!("origin/{REVIEW_BRANCH}"),
        ],
    );
    git_ok(dir, &["push", "--quiet", "origin", SYNC_BRANCH]);
    let merge = w.repo.head(SYNC_BRANCH).unwrap();
    argo::synced(&mut app, &merge, &[("shop", "web")]);
    w.kube.apply(app);

    let out = w.verify().await;

    assert_says(&out, 0, "shop/Deployment/web app: Converged");
    assert_says(
        &out,
        0,
        &format!("Synced to {} (hydrated as {}", short(&pin), short(&merge)),
    );
    w.assert_read_only();
}

#[tokio::test]
async fn without_a_source_hydrator_an_application_is_read_as_before() {
    // The same repository and cluster, and a plain Application of the dry path: its revision
    // is the dry commit itself.
    let w = World::new().await;
    w.running("shop", DIGEST, DIGEST);
    let app = crate::verify::gitops::argo_application(&w.url, &w.tip(), &[("shop", "web")]);
    w.kube.apply(app);

    let out = w.verify().await;

    assert_says(&out, 0, "shop/Deployment/web app: Converged");
    w.assert_read_only();
}

#[tokio::test]
async fn the_test_server_holds_a_hydrator_application_to_its_crd_schema() {
    let kube = KubeServer::start().await;
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/gitops/argocd-application-hydrator.yaml");
    assert_eq!(kube.load_yaml(&fixture, "argocd")[0].kind, "Application");

    let app = application(
        "shop",
        "shop",
        "https://git.example.com/acme/gitops",
        "apps",
        "env/shop",
        "shop",
    );
    let refused = |edit: &dyn Fn(&mut Value)| {
        let mut app = app.clone();
        edit(&mut app);
        kube.try_apply(app).unwrap_err()
    };
    let missing = refused(&|a| {
        a["spec"]["sourceHydrator"]["syncSource"]
            .as_object_mut()
            .unwrap()
            .remove("targetBranch");
    });
    assert!(missing.contains("targetBranch"), "{missing}");
    // The sync path may not be the root of the repository.
    let root = refused(&|a| a["spec"]["sourceHydrator"]["syncSource"]["path"] = json!("."));
    assert!(
        root.contains("/spec/sourceHydrator/syncSource/path"),
        "{root}"
    );
    let phase = refused(&|a| {
        argo::failed(a, "abc", "x");
        a["status"]["sourceHydrator"]["currentOperation"]["phase"] = json!("Unknown");
    });
    assert!(
        phase.contains("/status/sourceHydrator/currentOperation/phase"),
        "{phase}"
    );
    kube.assert_no_writes();
}
