//! `tagpin verify`, the real binary, against the local Kubernetes API server (driven through a
//! kubeconfig, as kube does by default), a real registry, a real bare Git repository holding
//! the pinned manifests, and (for pull requests) the local GitHub server.

mod audit;
pub(crate) mod gitops;
mod helm;
mod hydrator;
mod rollout;

use crate::support;

use support::{output_text as text, shared_fixture};

use std::process::Output;

use serde_json::{json, Value};
use support::git::BareRepo;
use support::github::GitHubServer;
use support::kube::{running_pod_status, Fault, KubeServer};
use support::manifests::deployment_with_replicas;
use support::registry::{IndexKind, Mode, TestRegistry};
use support::workloads::{LiveCronJob, LiveDeployment, LivePod};

const GH_TOKEN: &str = "ghs_verify_5e1f";
const QUAY_DIGEST: &str = "sha256:0f152bc1261aea012bbf89977a821f1b319b9dc9feb7f4ba54f08f617b2937ec";
const OLD: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";

/// The Git repository, the cluster, and a config pointing at both (shared with the other
/// verify tests, such as `kustomize`).
pub(crate) struct World {
    repo: BareRepo,
    pub(crate) kube: KubeServer,
    dir: tempfile::TempDir,
    registry_host: String,
}

impl World {
    pub(crate) async fn new(files: &[(&str, &str)], registry_host: &str) -> World {
        let repo = BareRepo::create(files);
        let kube = KubeServer::start().await;
        let dir = tempfile::tempdir().unwrap();
        let world = World {
            repo,
            kube,
            dir,
            registry_host: registry_host.to_string(),
        };
        world.write_config("shop", "");
        world
    }

    pub(crate) fn write_config(&self, namespace: &str, extra: &str) {
        std::fs::write(
            self.dir.path().join("tagpin.yaml"),
            format!(
                "repository: {{url: '{}', branch: main}}\nregistries: {{insecure: ['{}']}}\nverify: {{default_namespace: {namespace}}}\n{extra}",
                self.repo.file_url(),
                self.registry_host
            ),
        )
        .unwrap();
    }

    pub(crate) async fn verify(&self, args: &[&str]) -> Output {
        let kubeconfig = self.kube.kubeconfig(self.dir.path());
        tokio::process::Command::new(env!("CARGO_BIN_EXE_tagpin"))
            .arg("verify")
            .arg("--config")
            .arg(self.dir.path().join("tagpin.yaml"))
            .arg("--cache-dir")
            .arg(self.dir.path().join("cache"))
            .args(args)
            .env("HOME", self.dir.path())
            .env("KUBECONFIG", kubeconfig)
            .env("TAGPIN_GITHUB_TOKEN", GH_TOKEN)
            .env_remove("DOCKER_CONFIG")
            .env_remove("RUST_LOG")
            .output()
            .await
            .expect("run tagpin")
    }
}

impl World {
    /// The branch pins `web` to `digest`, and the cluster runs it: one replica, rolled out,
    /// its pod on the digest.
    async fn converged_web(digest: &str) -> World {
        let image = format!("ghcr.io/acme/web:1@{digest}");
        let w = World::new(
            &[("apps/web.yaml", &deployment_with_replicas("web", &image, 1))],
            "127.0.0.1:1",
        )
        .await;
        let web = live_web("web", &image);
        web.apply(&w.kube);
        web.pod("web-1")
            .running(&w.kube, &[&format!("ghcr.io/acme/web@{digest}")]);
        w
    }
}

/// The Deployment `name` in shop as the GitOps tool applied it, its container `app` on
/// `image`.
pub(crate) fn live_web(name: &str, image: &str) -> LiveDeployment {
    LiveDeployment::new("shop", name).container("app", image)
}

#[tokio::test]
async fn the_real_openshift_capture_is_converged() {
    let capture =
        std::fs::read_to_string(shared_fixture("openshift-nginx-deployment.yaml")).unwrap();
    let pinned_ref = format!("quay.io/k_nakajima/nginx-sample:latest@{QUAY_DIGEST}");
    let quay: Value = serde_json::from_str(
        &std::fs::read_to_string(shared_fixture("quay-repository-api.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(quay["tags"]["latest"]["manifest_digest"], QUAY_DIGEST);
    // Git holds the capture pinned the way tagpin writes it; Argo CD applied it.
    let pinned = capture.replace(
        "image: quay.io/k_nakajima/nginx-sample:latest",
        &format!("image: {pinned_ref}"),
    );
    let w = World::new(&[("apps/nginx.yaml", &pinned)], "127.0.0.1:1").await;
    w.write_config("test-wp", "");
    let mut applied: Value = serde_yaml::from_str(&pinned).unwrap();
    applied["metadata"]["namespace"] = json!("test-wp");
    w.kube.apply(applied);
    w.kube.set_status(
        "Deployment",
        "test-wp",
        "nginx",
        json!({"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "readyReplicas": 1, "availableReplicas": 1}),
    );
    w.kube
        .load_yaml(&shared_fixture("openshift-nginx-pods.yaml"), "test-wp");

    let out = w.verify(&["--branch", "main"]).await;

    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains("test-wp/Deployment/nginx nginx: Converged (1 of 1 pods"),
        "{}",
        text(&out)
    );
    w.kube.assert_no_writes();
}

#[tokio::test]
async fn stale_replicas_keep_it_progressing_and_are_named() {
    let new = "sha256:2222222222222222222222222222222222222222222222222222222222222222";
    let image = format!("ghcr.io/acme/web:1@{new}");
    let w = World::new(
        &[("apps/web.yaml", &deployment_with_replicas("web", &image, 3))],
        "127.0.0.1:1",
    )
    .await;
    let web = live_web("web", &image).replicas(3);
    web.apply(&w.kube);
    web.pod("web-new-1")
        .running(&w.kube, &[&format!("ghcr.io/acme/web@{new}")]);
    for name in ["web-old-1", "web-old-2"] {
        web.pod(name)
            .image("ghcr.io/acme/web:1")
            .running(&w.kube, &[&format!("ghcr.io/acme/web@{OLD}")]);
    }

    let out = w.verify(&["--branch", "main"]).await;

    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let t = text(&out);
    assert!(
        t.contains("web-old-1") && t.contains("web-old-2") && !t.contains("web-new-1,"),
        "{t}"
    );
    assert!(t.contains("1 of 3 pods"), "{t}");
}

#[tokio::test]
async fn image_pull_back_off_fails_with_the_kubelet_message() {
    let new = "sha256:3333333333333333333333333333333333333333333333333333333333333333";
    let image = format!("ghcr.io/acme/web:1@{new}");
    let w = World::new(
        &[("apps/web.yaml", &deployment_with_replicas("web", &image, 1))],
        "127.0.0.1:1",
    )
    .await;
    let web = live_web("web", &image);
    web.apply(&w.kube);
    web.pod("web-abc").waiting(
        &w.kube,
        "ImagePullBackOff",
        "Back-off pulling image \"ghcr.io/acme/web:1@sha256:3333\"",
    );

    let out = w.verify(&["--branch", "main"]).await;

    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let t = text(&out);
    assert!(
        t.contains("ImagePullBackOff")
            && t.contains("web-abc")
            && t.contains("Back-off pulling image"),
        "{t}"
    );
}

#[tokio::test]
async fn multi_arch_platform_digests_match_only_their_own_index() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let platforms = [("linux", "amd64"), ("linux", "arm64")];
    let pinned = registry
        .push_index("acme/multi", "1", IndexKind::Oci, &platforms, "mine")
        .await;
    let other = registry
        .push_index("acme/multi", "2", IndexKind::Oci, &platforms, "other")
        .await;
    let image = format!("{host}/acme/multi:1@{}", pinned.index);
    let w = World::new(
        &[(
            "apps/multi.yaml",
            &deployment_with_replicas("multi", &image, 2),
        )],
        &host,
    )
    .await;
    let multi = live_web("multi", &image).replicas(2);
    multi.apply(&w.kube);
    let repo = format!("{host}/acme/multi");
    multi.pod("multi-a").running(
        &w.kube,
        &[&format!("{repo}@{}", pinned.children[0].manifest)],
    );
    multi.pod("multi-b").running(
        &w.kube,
        &[&format!(
            "docker-pullable://{repo}@{}",
            pinned.children[1].manifest
        )],
    );

    let out = w.verify(&["--branch", "main"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));

    multi.pod("multi-b").running(
        &w.kube,
        &[&format!("{repo}@{}", other.children[1].manifest)],
    );
    let out = w.verify(&["--branch", "main"]).await;
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(text(&out).contains("multi-b"), "{}", text(&out));
}

#[tokio::test]
async fn a_bare_config_digest_matches_the_pinned_image_config() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let pushed = registry.push_image("acme/web", "1", "w").await;
    let image = format!("{host}/acme/web:1@{}", pushed.manifest);
    let w = World::new(
        &[("apps/web.yaml", &deployment_with_replicas("web", &image, 1))],
        &host,
    )
    .await;
    let web = live_web("web", &image);
    web.apply(&w.kube);
    web.pod("web-1")
        .running(&w.kube, &[&format!("docker://{}", pushed.config)]);

    let out = w.verify(&["--branch", "main"]).await;

    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
}

#[tokio::test]
async fn an_unsynced_spec_a_deleted_workload_and_a_forbidden_read_are_told_apart() {
    let new = "sha256:4444444444444444444444444444444444444444444444444444444444444444";
    let image = format!("ghcr.io/acme/web:1@{new}");
    let w = World::new(
        &[("apps/web.yaml", &deployment_with_replicas("web", &image, 1))],
        "127.0.0.1:1",
    )
    .await;
    let unsynced = live_web("web", "ghcr.io/acme/web:1");
    unsynced.apply(&w.kube);
    unsynced
        .pod("web-1")
        .running(&w.kube, &[&format!("ghcr.io/acme/web@{OLD}")]);
    let out = w.verify(&["--branch", "main"]).await;
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(text(&out).contains("not synced"), "{}", text(&out));

    w.kube.delete("Deployment", "shop", "web");
    let out = w.verify(&["--branch", "main"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("workload missing"), "{}", text(&out));

    live_web("web", &image).apply(&w.kube);
    w.kube.deny("list", "pods", Some("shop"));
    let out = w.verify(&["--branch", "main"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("no permission"), "{}", text(&out));
    w.kube.assert_no_writes();
}

#[tokio::test]
async fn an_evicted_pod_of_the_old_replica_set_does_not_hold_convergence_back() {
    let new = "sha256:2323232323232323232323232323232323232323232323232323232323232323";
    let image = format!("ghcr.io/acme/web:1@{new}");
    let w = World::new(
        &[("apps/web.yaml", &deployment_with_replicas("web", &image, 2))],
        "127.0.0.1:1",
    )
    .await;
    let web = live_web("web", &image).replicas(2);
    web.apply(&w.kube);
    for name in ["web-new-1", "web-new-2"] {
        web.pod(name)
            .running(&w.kube, &[&format!("ghcr.io/acme/web@{new}")]);
    }
    // Evicted under node pressure before the rollout: phase Failed, reason Evicted, kept
    // until garbage collection. `kubectl rollout status` says the rollout succeeded.
    web.pod("web-old-1")
        .image("ghcr.io/acme/web:1")
        .evicted(&w.kube, &[&format!("ghcr.io/acme/web@{OLD}")]);

    let out = w.verify(&["--branch", "main"]).await;

    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("(2 of 2 pods on"), "{stdout}");
    assert!(
        stdout.contains("not counted (ended or being deleted): web-old-1 (Evicted)"),
        "{stdout}"
    );
}

#[tokio::test]
async fn a_commit_is_named_by_any_unique_prefix_of_seven_or_more_hex_digits() {
    let new = "sha256:7878787878787878787878787878787878787878787878787878787878787878";
    let w = World::converged_web(new).await;
    let head = w.repo.head("main").unwrap();

    // As people paste it from `git log --oneline`.
    let short = w.verify(&["--commit", &head[..7]]).await;
    assert_eq!(short.status.code(), Some(0), "{}", text(&short));
    let full = w.verify(&["--commit", &head]).await;
    assert_eq!(full.stdout, short.stdout);

    let too_short = w.verify(&["--commit", &head[..6]]).await;
    assert_eq!(too_short.status.code(), Some(2), "{}", text(&too_short));
    assert!(
        String::from_utf8_lossy(&too_short.stderr)
            .contains("is not a commit id (7 to 40 hex digits)"),
        "{}",
        text(&too_short)
    );
    let unknown = if head.starts_with("0000000") {
        "1111111"
    } else {
        "0000000"
    };
    let missing = w.verify(&["--commit", unknown]).await;
    assert_eq!(missing.status.code(), Some(2), "{}", text(&missing));
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains(&format!("commit {unknown}")),
        "{}",
        text(&missing)
    );
}

#[tokio::test]
async fn wait_watches_what_it_listed_and_answers_on_the_change() {
    let new = "sha256:5555555555555555555555555555555555555555555555555555555555555555";
    let image = format!("ghcr.io/acme/web:1@{new}");
    let w = World::new(
        &[("apps/web.yaml", &deployment_with_replicas("web", &image, 1))],
        "127.0.0.1:1",
    )
    .await;
    let web = live_web("web", &image);
    web.apply(&w.kube);
    web.pod("web-1").waiting(&w.kube, "ContainerCreating", "");

    let verify = w.verify(&["--branch", "main", "--wait", "--timeout", "60s"]);
    let kubelet =
        async {
            // Once verify watches the pods it listed, the kubelet reports the container running.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            while !w.kube.requests().iter().any(|r| {
                r.path.ends_with("/pods") && r.query_param("watch").as_deref() == Some("true")
            }) {
                assert!(
                    std::time::Instant::now() < deadline,
                    "verify never watched the pods"
                );
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            w.kube.set_pod_status(
                "shop",
                "web-1",
                running_pod_status(&[("app", &image, &format!("ghcr.io/acme/web@{new}"))]),
            );
            std::time::Instant::now()
        };
    let (out, changed_at) = tokio::join!(verify, kubelet);

    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    eprintln!(
        "verdict {:?} after the pod turned ready",
        changed_at.elapsed()
    );
    // It watched the pods it had listed, from the version of that list, rather than only
    // polling.
    let requests = w.kube.requests();
    let watch = requests
        .iter()
        .find(|r| {
            r.path == "/api/v1/namespaces/shop/pods"
                && r.query_param("watch").as_deref() == Some("true")
        })
        .unwrap_or_else(|| panic!("no watch on the pods: {requests:#?}"));
    assert!(
        watch
            .query_param("resourceVersion")
            .is_some_and(|v| v != "0"),
        "{watch:?}"
    );
}

#[tokio::test]
async fn transient_api_errors_are_retried_and_do_not_fail_the_check() {
    let new = "sha256:5656565656565656565656565656565656565656565656565656565656565656";
    let w = World::converged_web(new).await;
    // The API server sheds load once (429 with Retry-After), then times out once.
    w.kube.inject(Fault {
        path_contains: "/namespaces/shop/pods".into(),
        status: 429,
        times: 1,
    });
    w.kube.inject(Fault {
        path_contains: "/namespaces/shop/deployments".into(),
        status: 504,
        times: 1,
    });

    let out = w.verify(&["--branch", "main"]).await;

    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let failed: Vec<u16> = w
        .kube
        .requests()
        .iter()
        .map(|r| r.status)
        .filter(|s| *s >= 400)
        .collect();
    assert_eq!(failed, [429, 504]);
}

#[tokio::test]
async fn a_persistent_api_failure_is_reported_naming_what_was_read() {
    let image = format!("ghcr.io/acme/web:1@{OLD}");
    let w = World::new(
        &[("apps/web.yaml", &deployment_with_replicas("web", &image, 1))],
        "127.0.0.1:1",
    )
    .await;
    w.kube.inject(Fault {
        path_contains: "/namespaces/shop/pods".into(),
        status: 503,
        times: 100,
    });

    let out = w.verify(&["--branch", "main"]).await;

    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("reading pods in namespace shop"),
        "{stderr}"
    );
}

#[tokio::test]
async fn an_api_server_that_never_answers_fails_the_check_naming_it_within_the_timeout() {
    let image = format!("ghcr.io/acme/web:1@{OLD}");
    let w = World::new(
        &[("apps/web.yaml", &deployment_with_replicas("web", &image, 1))],
        "127.0.0.1:1",
    )
    .await;
    // It accepts every connection and reads every request, and never answers.
    w.kube.hang("");
    let kubeconfig = w.kube.kubeconfig(w.dir.path());
    let started = std::time::Instant::now();
    let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_tagpin"))
        .args([
            "verify",
            "--branch",
            "main",
            "--kube-timeout",
            "1",
            "--config",
        ])
        .arg(w.dir.path().join("tagpin.yaml"))
        .arg("--cache-dir")
        .arg(w.dir.path().join("cache"))
        .env("HOME", w.dir.path())
        .env("KUBECONFIG", kubeconfig)
        .env_remove("DOCKER_CONFIG")
        .env_remove("RUST_LOG")
        .kill_on_drop(true)
        .output();
    // Three attempts of one second each, and the pauses between them, are the bound.
    let out = tokio::time::timeout(std::time::Duration::from_secs(30), run)
        .await
        .expect("tagpin verify gives up on a silent API server")
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        stderr.contains(&format!("Kubernetes API {}", w.kube.url())),
        "the error names the API server: {stderr}"
    );
    assert!(stderr.contains("no answer within 1s"), "{stderr}");
    assert!(!w.kube.hung_requests().is_empty());
    eprintln!("gave up after {:?}: {stderr}", started.elapsed());
}

#[tokio::test]
async fn a_pull_request_gets_statuses_in_order_and_one_comment_edited_in_place() {
    let new = "sha256:6666666666666666666666666666666666666666666666666666666666666666";
    let image = format!("ghcr.io/acme/web:1@{new}");
    let w = World::new(
        &[(
            "apps/web.yaml",
            &deployment_with_replicas("web", "ghcr.io/acme/web:1", 1),
        )],
        "127.0.0.1:1",
    )
    .await;
    let head = w.repo.commit_as_other_writer(
        "tagpin/main",
        &[("apps/web.yaml", &deployment_with_replicas("web", &image, 1))],
        "Pin",
    );
    let github = GitHubServer::start(GH_TOKEN, "acme", "gitops", w.repo.path()).await;
    w.write_config(
        "shop",
        &format!(
            "forge: {{api_url: '{}', owner: acme, repo: gitops, token_env: TAGPIN_GITHUB_TOKEN}}\n",
            github.api_url()
        ),
    );
    // The PR as `tagpin sync` opens it: its body carries the plan block.
    let block = tagpin::proposal::PlanBlock {
        version: 1,
        target: "main".into(),
        pins: vec![tagpin::proposal::Pin {
            file: "apps/web.yaml".into(),
            workload: "Deployment/web".parse().unwrap(),
            container: "app".into(),
            image: "ghcr.io/acme/web:1".into(),
            new_value: image.clone(),
            new_digest: new.parse().unwrap(),
            old_digest: None,
            old_tag: None,
            new_tag: None,
        }],
    };
    let octo_body = tagpin::proposal::body::render(&block);
    let client = reqwest::Client::new();
    let created = client
        .post(format!("{}/repos/acme/gitops/pulls", github.api_url()))
        .bearer_auth(GH_TOKEN)
        .header("user-agent", "test")
        .json(&json!({"title": "Pin", "head": "tagpin/main", "base": "main", "body": octo_body}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);

    let web = live_web("web", &image);
    web.apply(&w.kube);
    web.pod("web-1").waiting(&w.kube, "ContainerCreating", "");
    let out = w.verify(&["--pr", "1"]).await;
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));

    w.kube.set_pod_status(
        "shop",
        "web-1",
        running_pod_status(&[("app", &image, &format!("ghcr.io/acme/web@{new}"))]),
    );
    let merge_sha = w.repo.commit_as_other_writer(
        "main",
        &[("apps/web.yaml", &deployment_with_replicas("web", &image, 1))],
        "Merge",
    );
    github.merge_pr(1, &merge_sha);
    let out = w.verify(&["--pr", "1"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));

    let states: Vec<String> = github
        .statuses(&head)
        .iter()
        .map(|s| s.state.clone())
        .collect();
    assert_eq!(
        states,
        vec!["pending", "pending", "pending", "success"],
        "oldest first"
    );
    let merge_states: Vec<String> = github
        .statuses(&merge_sha)
        .iter()
        .map(|s| s.state.clone())
        .collect();
    assert_eq!(merge_states, vec!["pending", "success"]);
    assert!(github
        .statuses(&head)
        .iter()
        .all(|s| s.context == "tagpin/converged"));
    let comments = github.comments(1);
    assert_eq!(comments.len(), 1, "one comment, edited in place");
    let body = &comments[0].body;
    assert!(
        body.contains("| shop/Deployment/web | app | `sha256:666666666666` | 1 / 1 | Converged |"),
        "{body}"
    );
    github.assert_no_violations();
    w.kube.assert_no_writes();
}

#[tokio::test]
async fn a_deployment_config_in_a_kustomization_namespace_is_verified() {
    let new = "sha256:7777777777777777777777777777777777777777777777777777777777777777";
    let image = format!("quay.io/acme/legacy:2@{new}");
    let dc = format!(
        "apiVersion: apps.openshift.io/v1\nkind: DeploymentConfig\nmetadata:\n  name: legacy\nspec:\n  replicas: 1\n  selector: {{app: legacy}}\n  template:\n    metadata:\n      labels: {{app: legacy}}\n    spec:\n      containers:\n      - name: app\n        image: {image}\n"
    );
    let w = World::new(
        &[
            (
                "apps/kustomization.yaml",
                "namespace: legacy\nresources: [dc.yaml]\n",
            ),
            ("apps/dc.yaml", &dc),
        ],
        "127.0.0.1:1",
    )
    .await;
    let mut live: Value = serde_yaml::from_str(&dc).unwrap();
    live["metadata"]["namespace"] = json!("legacy");
    w.kube.apply(live);
    w.kube.set_status(
        "DeploymentConfig",
        "legacy",
        "legacy",
        json!({"observedGeneration": 1, "latestVersion": 1, "replicas": 1, "updatedReplicas": 1, "availableReplicas": 1}),
    );
    LivePod::new("legacy", "legacy-1-abcde")
        .label("app", "legacy")
        .container("app", &image)
        .running(&w.kube, &[&format!("quay.io/acme/legacy@{new}")]);

    let out = w.verify(&["--branch", "main"]).await;

    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains("legacy/DeploymentConfig/legacy app: Converged"),
        "{}",
        text(&out)
    );
}

/// A CronJob is verified by the Jobs it ran since its template carries the pin, with only the
/// reads the verifier ClusterRole in `deploy/common/rbac.yaml` grants (CronJobs, Jobs, pods).
#[tokio::test]
async fn a_cron_job_is_judged_by_its_runs_since_the_pin_under_the_verifier_role() {
    let new = "sha256:4545454545454545454545454545454545454545454545454545454545454545";
    let image = format!("ghcr.io/acme/job:2@{new}");
    let pulled = format!("ghcr.io/acme/job@{new}");
    let w = World::new(
        &[("apps/nightly.yaml", &crate::pipeline::cronjob(&image))],
        "127.0.0.1:1",
    )
    .await;
    w.kube.set_grants(crate::verify::gitops::verifier_grants());
    let verdict = |out: &Output, code: i32, line: &str| {
        assert_eq!(out.status.code(), Some(code), "{}", text(out));
        assert!(text(out).contains(line), "{line:?} in:\n{}", text(out));
    };

    // The GitOps tool has not applied the pin yet: the CronJob and tonight's run, still going,
    // are on the tag.
    let tagged = LiveCronJob::new("shop", "nightly").container("job", "ghcr.io/acme/job:2");
    tagged.apply(&w.kube);
    let tonight = tagged.run(&w.kube, "nightly-29170080");
    let old = [format!("ghcr.io/acme/job@{OLD}")];
    tonight.active(&w.kube, &old);
    let out = w.verify(&["--branch", "main"]).await;
    verdict(&out, 3, "shop/CronJob/nightly job: Progressing");
    assert!(text(&out).contains("not synced"), "{}", text(&out));

    // Applied while that run still runs the old digest: not converged yet, naming its pod.
    let pinned = LiveCronJob::new("shop", "nightly").container("job", &image);
    pinned.apply(&w.kube);
    let out = w.verify(&["--branch", "main"]).await;
    verdict(
        &out,
        3,
        "shop/CronJob/nightly job: Progressing (0 of 1 pods",
    );
    assert!(text(&out).contains("nightly-29170080-x1"), "{}", text(&out));

    // That run ended, not run since: the template is what the next run pulls, and the old run
    // is history, not a stale replica.
    tonight.succeeded(&w.kube, &old);
    let out = w.verify(&["--branch", "main"]).await;
    verdict(&out, 0, "shop/CronJob/nightly job: Converged");
    assert!(
        text(&out).contains("synced, not run since"),
        "{}",
        text(&out)
    );

    // The first run since the pin is under way on the pinned digest: not done yet.
    let run = pinned.run(&w.kube, "nightly-29171520");
    run.active(&w.kube, &[&pulled]);
    let out = w.verify(&["--branch", "main"]).await;
    verdict(&out, 3, "shop/CronJob/nightly job: Progressing");
    assert!(text(&out).contains("job running"), "{}", text(&out));

    // It finished: its pod ran the pinned digest.
    run.succeeded(&w.kube, &[&pulled]);
    let out = w.verify(&["--branch", "main"]).await;
    verdict(
        &out,
        0,
        "shop/CronJob/nightly job: Converged (1 of 1 pods on",
    );

    // The next run cannot pull the image: failed, naming its pod and the kubelet's message.
    pinned.run(&w.kube, "nightly-29172960").waiting(
        &w.kube,
        "ImagePullBackOff",
        &format!("Back-off pulling image \"{image}\""),
    );
    let out = w.verify(&["--branch", "main"]).await;
    verdict(&out, 1, "shop/CronJob/nightly job: Failed");
    assert!(
        text(&out).contains("ImagePullBackOff") && text(&out).contains("nightly-29172960-x1"),
        "{}",
        text(&out)
    );

    let refused = w.kube.refused_requests();
    assert!(
        refused.is_empty(),
        "the verifier role is not enough: {refused:?}"
    );
    // Without the Jobs, nothing says what ran: never Converged.
    w.kube.deny("list", "jobs", Some("shop"));
    let out = w.verify(&["--branch", "main"]).await;
    verdict(&out, 1, "no permission");
    w.kube.assert_no_writes();
}

/// The controller keeps its digest families across checks: a registry that failed once must
/// be asked again on the next check, not leave the pin judged by its own digest for ever.
#[tokio::test]
async fn a_failed_registry_lookup_is_asked_again_on_the_next_check() {
    use support::registry::{Fault as RegistryFault, FaultProxy, FaultRule};
    use tagpin::cluster::Cluster;
    use tagpin::config::ClusterTarget;
    use tagpin::verify::judge::check::Expectations;
    use tagpin::verify::judge::expected::Expected;
    use tagpin::verify::judge::verdict::State;
    use tagpin::verify::{check, Families};
    use tagpin::workload::{WorkloadId, WorkloadKind};

    let registry = TestRegistry::start(Mode::Plain).await;
    let platforms = [("linux", "amd64"), ("linux", "arm64")];
    let pinned = registry
        .push_index("acme/multi", "1", IndexKind::Oci, &platforms, "mine")
        .await;
    let proxy = FaultProxy::start(
        &registry.base_url(),
        vec![FaultRule::any_method(
            "/manifests/",
            RegistryFault::status(503),
        )],
    )
    .await;
    let host = proxy.host();
    let image = format!("{host}/acme/multi:1@{}", pinned.index);
    let kube = KubeServer::start().await;
    let multi = live_web("multi", &image);
    multi.apply(&kube);
    // The node pulled the amd64 manifest: only the index's family says it is the pinned one.
    multi.pod("multi-a").running(
        &kube,
        &[&format!(
            "{host}/acme/multi@{}",
            pinned.children[0].manifest
        )],
    );
    let dir = tempfile::tempdir().unwrap();
    let cluster = Cluster::connect_to(
        &ClusterTarget::Kubeconfig {
            path: kube.kubeconfig(dir.path()),
            context: None,
        },
        tagpin::cluster::DEFAULT_API_TIMEOUT,
    )
    .await
    .unwrap();
    let client = tagpin::registry::Client::new(tagpin::registry::Settings {
        insecure_hosts: vec![host.clone()],
        retry: tagpin::registry::RetryPolicy {
            max_attempts: 1,
            ..Default::default()
        },
        ..Default::default()
    })
    .unwrap();
    let expectations = Expectations {
        expected: vec![Expected {
            workload: WorkloadId {
                namespace: Some("shop".into()),
                kind: WorkloadKind::Deployment,
                name: "multi".into(),
            },
            container: "app".into(),
            pinned_ref: image.clone(),
            digest: tagpin::reference::Digest::parse(&pinned.index).unwrap(),
        }],
        ..Default::default()
    };
    let mut families = Families::default();

    let first = check(&expectations, &cluster, &client, &mut families)
        .await
        .unwrap();
    assert_ne!(first.state, State::Converged, "{}", first.summary);
    assert!(proxy.count("GET", "/manifests/") >= 1);

    proxy.clear_rules();
    let second = check(&expectations, &cluster, &client, &mut families)
        .await
        .unwrap();
    assert_eq!(second.state, State::Converged, "{}", second.summary);
}
