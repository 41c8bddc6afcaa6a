//! `tagpin operator` as a process, against the local Kubernetes API server with the generated
//! CRD installed and only the writes `deploy/operator/rbac.yaml` grants: real bare Git
//! repositories, a real registry, Secrets rotated, shards split by label, and the real
//! `kubectl wait`.

mod at_rest;
mod azure_devops;
mod bitbucket;
mod bitbucket_server;
mod dashboard;
mod gitea;
mod hostile;
pub(crate) mod promote;
mod provenance;
mod routing;
mod shared;
mod signatures;
mod tenancy;

use crate::support;
use crate::support::eventually;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::git::{BareRepo, GitHttpServer, HttpAuth};
use support::kube::KubeServer;
use support::manifests::deployment;
use support::registry::{free_port, Mode, TestRegistry};
use support::workloads::{LiveDeployment, LivePod};
use tokio::process::{Child, Command};

pub(crate) const NS: &str = "team-a";

/// The API server with the CRD of `deploy/operator/crd.yaml` installed, and granted exactly
/// the writes `deploy/operator/rbac.yaml` gives the operator: a write it is not granted is
/// refused (403) and fails the test.
pub(crate) async fn cluster() -> KubeServer {
    let kube = KubeServer::start().await;
    kube.install_tagpin_operator();
    kube
}

pub(crate) fn pinned_repository(name: &str, labels: Value, spec: Value) -> Value {
    json!({
        "apiVersion": "tagpin.dev/v1alpha1",
        "kind": "PinnedRepository",
        "metadata": {"name": name, "namespace": NS, "labels": labels},
        "spec": spec,
    })
}

/// A commit-mode spec pinning `apps/` of `url` against the registry at `host`.
pub(crate) fn spec(url: &str, host: &str) -> Value {
    json!({
        "repository": {"url": url, "branch": "main"},
        "paths": ["apps"],
        "registries": {"insecure": [host]},
    })
}

pub(crate) struct Operator {
    pub(crate) child: Child,
    base: String,
}

/// `args` and `--allow-local-repositories`: the test repositories are bare repositories on
/// this machine, reached by file:// URL.
fn with_local<'a>(args: &[&'a str]) -> Vec<&'a str> {
    let mut all = vec!["--allow-local-repositories"];
    all.extend_from_slice(args);
    all
}

impl Operator {
    pub(crate) async fn start(
        dir: &Path,
        kube: &KubeServer,
        name: &str,
        args: &[&str],
    ) -> Operator {
        Operator::start_waiting_for(dir, kube, name, &with_local(args), "/readyz").await
    }

    /// As a deployment runs it: repositories by local path or file:// URL refused.
    async fn start_remote_only(dir: &Path, kube: &KubeServer, name: &str) -> Operator {
        Operator::start_waiting_for(dir, kube, name, &[], "/readyz").await
    }

    /// [`Operator::start`] with `env` added to its environment.
    pub(crate) async fn start_with_env(
        dir: &Path,
        kube: &KubeServer,
        name: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Operator {
        let args = with_local(args);
        Operator::start_with(dir, kube, name, &args, "/readyz", env).await
    }

    /// Started, once `path` answers 200: `/readyz` for one that acts, `/healthz` for a
    /// standby (alive, not ready).
    async fn start_waiting_for(
        dir: &Path,
        kube: &KubeServer,
        name: &str,
        args: &[&str],
        path: &str,
    ) -> Operator {
        Operator::start_with(dir, kube, name, args, path, &[]).await
    }

    async fn start_with(
        dir: &Path,
        kube: &KubeServer,
        name: &str,
        args: &[&str],
        path: &str,
        env: &[(&str, &str)],
    ) -> Operator {
        let port = free_port();
        let kubeconfig = kube.kubeconfig(dir);
        // An hour between passes unless the test names its own interval.
        let interval = match args.contains(&"--interval") {
            true => &[][..],
            false => &["--interval", "1h"][..],
        };
        let child = Command::new(env!("CARGO_BIN_EXE_tagpin"))
            .args(["operator", "--verify-interval", "1s"])
            .args(interval)
            .args(args)
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--cache-dir")
            .arg(dir.join(format!("cache-{name}")))
            .env("HOME", dir)
            .env("KUBECONFIG", &kubeconfig)
            .env("POD_NAME", name)
            .env("POD_NAMESPACE", "tagpin")
            .env(
                "RUST_LOG",
                std::env::var("TEST_OPERATOR_LOG").unwrap_or("tagpin=info".into()),
            )
            .env_remove("DOCKER_CONFIG")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start tagpin operator");
        let operator = Operator {
            child,
            base: format!("http://127.0.0.1:{port}"),
        };
        let http = reqwest::Client::new();
        let url = format!("{}{path}", operator.base);
        support::eventually_async("tagpin operator answers 200", || async {
            http.get(&url).send().await.is_ok_and(|r| r.status() == 200)
        })
        .await;
        operator
    }

    /// When the operator last finished reconciling `name` of [`NS`] (Unix seconds), from its
    /// metrics: a reconcile that changes nothing writes nothing to the object.
    pub(crate) async fn reconciled_at(&self, name: &str) -> Option<i64> {
        self.metric(&format!(
            "tagpin_object_last_reconcile_timestamp_seconds{{namespace=\"{NS}\",name=\"{name}\"}}"
        ))
        .await
    }

    /// The operator's `/metrics` page.
    pub(crate) async fn metrics_page(&self) -> String {
        let url = format!("{}/metrics", self.base);
        reqwest::get(url).await.unwrap().text().await.unwrap()
    }

    /// The value of one series (`name{labels}` as exposed) of the operator's `/metrics`.
    pub(crate) async fn metric(&self, series: &str) -> Option<i64> {
        let url = format!("{}/metrics", self.base);
        let text = reqwest::get(url).await.ok()?.text().await.ok()?;
        text.lines()
            .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
            .and_then(|value| value.trim().parse().ok())
    }

    async fn ready(&self) -> bool {
        let url = format!("{}/readyz", self.base);
        matches!(reqwest::get(url).await, Ok(r) if r.status() == 200)
    }

    /// SIGTERM, then what it logged.
    pub(crate) async fn stop(self) -> String {
        let output = support::terminate(self.child, "tagpin operator").await;
        let log = String::from_utf8_lossy(&output.stderr).into_owned();
        assert_eq!(output.status.code(), Some(0), "the operator's log:\n{log}");
        log
    }
}

/// Argo CD applied `default/Deployment/<name>` with its container `app` running `image` (a
/// tag) pinned to `digest`, its rollout done, and its one pod runs that digest: what the
/// operator's verification finds Converged.
pub(crate) fn runs_converged(kube: &KubeServer, name: &str, image: &str, digest: &str) {
    let (repository, _tag) = image.rsplit_once(':').unwrap();
    let live = LiveDeployment::new("default", name).container("app", &format!("{image}@{digest}"));
    live.apply(kube);
    live.pod(&format!("{name}-1"))
        .running(kube, &[format!("{repository}@{digest}")]);
}

pub(crate) fn condition(kube: &KubeServer, name: &str, type_: &str) -> Option<Value> {
    let object = kube.get("PinnedRepository", NS, name)?;
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
}

pub(crate) fn is_ready(kube: &KubeServer, name: &str) -> bool {
    condition(kube, name, "Ready").is_some_and(|c| c["status"] == "True")
}

pub(crate) fn event_reasons(kube: &KubeServer, name: &str) -> Vec<String> {
    kube.events(NS)
        .iter()
        .filter(|e| e["regarding"]["name"] == name)
        .map(|e| e["reason"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn two_objects_are_pinned_in_one_run_while_a_broken_one_and_a_missing_secret_stall() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let web = registry.push_image("acme/web", "1.0", "one").await;
    let api = registry.push_image("acme/api", "1", "api").await;
    let repo_web = BareRepo::create(&[(
        "apps/web.yaml",
        &deployment("web", &format!("{host}/acme/web:1.0")),
    )]);
    let repo_api = BareRepo::create(&[(
        "apps/api.yaml",
        &deployment("api", &format!("{host}/acme/api:1")),
    )]);
    let kube = cluster().await;
    let dir = tempfile::tempdir().unwrap();
    kube.apply(pinned_repository(
        "web",
        json!({}),
        spec(&repo_web.file_url(), &host),
    ));
    kube.apply(pinned_repository(
        "api",
        json!({}),
        spec(&repo_api.file_url(), &host),
    ));
    // The schema admits it, the validator does not: the same message as in tagpin.yaml.
    let mut broken = spec(&repo_web.file_url(), &host);
    broken["paths"] = json!(["../outside"]);
    kube.apply(pinned_repository("broken", json!({}), broken));
    let mut no_secret = spec(&repo_api.file_url(), &host);
    no_secret["secret_ref"] = json!({"name": "missing"});
    no_secret["repository"]["auth"] = json!({"token_env": "GIT_TOKEN"});
    kube.apply(pinned_repository("no-secret", json!({}), no_secret));

    for (name, repository, pushed) in [("web", "acme/web", &web), ("api", "acme/api", &api)] {
        let tag = if name == "web" { "1.0" } else { "1" };
        runs_converged(
            &kube,
            name,
            &format!("{host}/{repository}:{tag}"),
            &pushed.manifest,
        );
    }

    let operator = Operator::start(dir.path(), &kube, "op", &[]).await;
    eventually("both good objects Ready", || {
        is_ready(&kube, "web") && is_ready(&kube, "api")
    })
    .await;
    assert!(repo_web
        .read("main", "apps/web.yaml")
        .unwrap()
        .contains(&web.manifest));
    assert!(repo_api
        .read("main", "apps/api.yaml")
        .unwrap()
        .contains(&api.manifest));
    for (name, repo) in [("web", &repo_web), ("api", &repo_api)] {
        let object = kube.get("PinnedRepository", NS, name).unwrap();
        let status = &object["status"];
        assert_eq!(
            status["observedGeneration"], object["metadata"]["generation"],
            "{name}"
        );
        assert_eq!(
            status["lastPin"]["commit"],
            repo.head("main").unwrap().as_str(),
            "{name}"
        );
        assert_eq!(status["lastPin"]["images"], 1, "{name}");
        // Pinned, and verified on the cluster the operator runs in.
        assert_eq!(
            condition(&kube, name, "Ready").unwrap()["reason"],
            "Converged"
        );
        assert_eq!(status["verdict"]["state"], "converged", "{name}");
        assert_eq!(status["verdict"]["converged"], 1, "{name}");
        assert!(condition(&kube, name, "Stalled").is_none(), "{name}");
        eventually(&format!("{name}'s pin is announced"), || {
            event_reasons(&kube, name).contains(&"Pinned".to_string())
        })
        .await;
    }

    eventually("the broken object Stalled", || {
        condition(&kube, "broken", "Stalled").is_some()
    })
    .await;
    let stalled = condition(&kube, "broken", "Stalled").unwrap();
    assert_eq!(stalled["reason"], "InvalidSpec");
    assert_eq!(
        stalled["message"],
        "spec.paths[0]: \"../outside\" must be relative to the repository and stay inside it"
    );
    assert_eq!(
        condition(&kube, "broken", "Ready").unwrap()["status"],
        "False"
    );
    eventually("the object without its Secret Stalled", || {
        condition(&kube, "no-secret", "Stalled").is_some()
    })
    .await;
    let stalled = condition(&kube, "no-secret", "Stalled").unwrap();
    assert_eq!(stalled["reason"], "SecretNotFound");
    assert_eq!(stalled["message"], format!("Secret {NS}/missing not found"));
    // Events follow the status write that records what they announce.
    eventually("SecretNotFound is announced", || {
        event_reasons(&kube, "no-secret").contains(&"SecretNotFound".to_string())
    })
    .await;

    // Nothing moved: a reconcile with nothing to do writes no status and makes no commit.
    let commits = repo_web.log("main").len();
    let patches = kube.request_count("patch", "pinnedrepositories");
    operator.stop().await;
    assert_eq!(repo_web.log("main").len(), commits);
    assert_eq!(kube.request_count("patch", "pinnedrepositories"), patches);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rotated_secret_is_used_by_the_next_reconcile() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let web = registry.push_image("acme/web", "1.0", "one").await;
    let base = tempfile::tempdir().unwrap();
    let repo = BareRepo::create_in(
        base.path(),
        "gitops.git",
        &[(
            "apps/web.yaml",
            &deployment("web", &format!("{host}/acme/web:1.0")),
        )],
    );
    let server = GitHttpServer::start(
        base.path(),
        HttpAuth::basic("x-access-token", "right-token"),
    );
    let kube = cluster().await;
    runs_converged(&kube, "web", &format!("{host}/acme/web:1.0"), &web.manifest);
    kube.apply(support::kube::secret(
        NS,
        "git-creds",
        &[support::kube::TAGPIN_SECRET],
        &[("GIT_TOKEN", "wrong-token")],
    ));
    let mut with_token = spec(&server.url("gitops.git"), &host);
    with_token["repository"]["auth"] = json!({"token_env": "GIT_TOKEN"});
    with_token["secret_ref"] = json!({"name": "git-creds"});
    kube.apply(pinned_repository("web", json!({}), with_token));
    let dir = tempfile::tempdir().unwrap();
    let operator = Operator::start(dir.path(), &kube, "op", &[]).await;

    eventually("the refused token stalls the object", || {
        condition(&kube, "web", "Stalled").is_some_and(|c| c["reason"] == "AuthFailed")
    })
    .await;
    let message = condition(&kube, "web", "Stalled").unwrap()["message"].to_string();
    assert!(!message.contains("wrong-token"), "{message}");

    // The rotation reaches the object through the watch of labelled Secrets, long before its
    // one-hour interval.
    kube.rotate_secret(NS, "git-creds", &[("GIT_TOKEN", "right-token")]);
    eventually("the rotated token pins", || is_ready(&kube, "web")).await;
    assert!(repo
        .read("main", "apps/web.yaml")
        .unwrap()
        .contains(&web.manifest));
    assert!(condition(&kube, "web", "Stalled").is_none());
    let log = operator.stop().await;
    assert!(!log.contains("right-token") && !log.contains("wrong-token"));
}

#[tokio::test(flavor = "multi_thread")]
async fn two_shards_each_reconcile_only_the_objects_labelled_for_them() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let web = registry.push_image("acme/web", "1.0", "one").await;
    let repos: Vec<BareRepo> = (0..4)
        .map(|_| {
            BareRepo::create(&[(
                "apps/web.yaml",
                &deployment("web", &format!("{host}/acme/web:1.0")),
            )])
        })
        .collect();
    let kube = cluster().await;
    runs_converged(&kube, "web", &format!("{host}/acme/web:1.0"), &web.manifest);
    let shard_of = |i: usize| {
        if i.is_multiple_of(2) {
            "shard1"
        } else {
            "shard2"
        }
    };
    for (i, repo) in repos.iter().enumerate() {
        kube.apply(pinned_repository(
            &format!("repo-{i}"),
            json!({ "sharding.tagpin.dev/key": shard_of(i) }),
            spec(&repo.file_url(), &host),
        ));
    }
    let dir = tempfile::tempdir().unwrap();
    let one = Operator::start(
        dir.path(),
        &kube,
        "shard1",
        &["--watch-label-selector", "sharding.tagpin.dev/key=shard1"],
    )
    .await;
    let two = Operator::start(
        dir.path(),
        &kube,
        "shard2",
        &["--watch-label-selector", "sharding.tagpin.dev/key=shard2"],
    )
    .await;
    eventually("every object Ready", || {
        (0..4).all(|i| is_ready(&kube, &format!("repo-{i}")))
    })
    .await;
    for (i, repo) in repos.iter().enumerate() {
        let name = format!("repo-{i}");
        // Each shard keeps mirrors only of its own objects, and only it reported on them.
        for shard in ["shard1", "shard2"] {
            let mirrored = dir
                .path()
                .join(format!("cache-{shard}"))
                .join(NS)
                .join(&name)
                .exists();
            assert_eq!(mirrored, shard == shard_of(i), "{name} in {shard}'s cache");
        }
        let reporters: Vec<Value> = kube
            .events(NS)
            .iter()
            .filter(|e| e["regarding"]["name"] == name.as_str())
            .map(|e| e["reportingInstance"].clone())
            .collect();
        assert!(!reporters.is_empty(), "{name}: no Event");
        assert!(
            reporters.iter().all(|r| r == shard_of(i)),
            "{name}: {reporters:?}"
        );
        assert_eq!(repo.log("main").len(), 2, "{name}: pinned once");
    }
    one.stop().await;
    two.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_wait_returns_when_the_operator_reports_ready() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let web = registry.push_image("acme/web", "1.0", "one").await;
    let repo = BareRepo::create(&[(
        "apps/web.yaml",
        &deployment("web", &format!("{host}/acme/web:1.0")),
    )]);
    let kube = cluster().await;
    // kubectl sends no token over plain HTTP.
    kube.allow_anonymous();
    runs_converged(&kube, "web", &format!("{host}/acme/web:1.0"), &web.manifest);
    kube.apply(pinned_repository(
        "web",
        json!({}),
        spec(&repo.file_url(), &host),
    ));
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig: PathBuf = kube.kubeconfig(dir.path());
    let kubectl = std::env::var_os("KUBECTL").unwrap_or_else(|| "kubectl".into());
    let wait = move |timeout: &str| {
        std::process::Command::new(&kubectl)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args([
                "-n",
                NS,
                "wait",
                "pinnedrepository/web",
                "--for=condition=Ready",
            ])
            .arg(format!("--timeout={timeout}"))
            .output()
            .unwrap()
    };
    let before = wait("1s");
    assert!(
        !before.status.success(),
        "not Ready before the operator runs"
    );

    let waiting = tokio::task::spawn_blocking({
        let wait = wait.clone();
        move || wait("60s")
    });
    let operator = Operator::start(dir.path(), &kube, "op", &[]).await;
    let output = waiting.await.unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        "pinnedrepository.tagpin.dev/web condition met"
    );
    assert!(is_ready(&kube, "web"));
    operator.stop().await;
}

pub(crate) fn lease_holder(kube: &KubeServer) -> String {
    kube.get("Lease", "tagpin", "tagpin-leader")
        .and_then(|lease| lease["spec"]["holderIdentity"].as_str().map(str::to_string))
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn of_two_replicas_only_the_leader_acts_and_the_standby_takes_over_after_a_sigkill() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let one = registry.push_image("acme/web", "1.0", "one").await;
    let repo = BareRepo::create(&[(
        "apps/web.yaml",
        &deployment("web", &format!("{host}/acme/web:1.0")),
    )]);
    let kube = cluster().await;
    runs_converged(&kube, "web", &format!("{host}/acme/web:1.0"), &one.manifest);
    kube.apply(pinned_repository(
        "web",
        json!({}),
        spec(&repo.file_url(), &host),
    ));
    let dir = tempfile::tempdir().unwrap();
    let lease = Duration::from_secs(2);
    let election = [
        "--leader-elect",
        "--leader-elect-lease-duration",
        "2s",
        "--leader-elect-renew-deadline",
        "1000ms",
        "--leader-elect-retry-period",
        "200ms",
    ];
    let a = Operator::start(dir.path(), &kube, "op-a", &election).await;
    eventually("op-a leads and pins", || {
        lease_holder(&kube).starts_with("op-a") && is_ready(&kube, "web")
    })
    .await;
    let b = Operator::start_waiting_for(
        dir.path(),
        &kube,
        "op-b",
        &with_local(&election),
        "/healthz",
    )
    .await;
    // The standby is alive, not ready, and reconciles nothing: no mirror of its own, while
    // op-a renews the Lease twice more (each time op-b has read it and stood by).
    let renewed = |kube: &KubeServer| {
        kube.get("Lease", "tagpin", "tagpin-leader").unwrap()["spec"]["renewTime"].clone()
    };
    for _ in 0..2 {
        let before = renewed(&kube);
        eventually("op-a renews its Lease", || renewed(&kube) != before).await;
    }
    assert!(!b.ready().await, "a standby is not ready");
    assert!(!dir.path().join("cache-op-b").join(NS).exists());
    assert!(lease_holder(&kube).starts_with("op-a"));

    // SIGKILL: no release. A new digest is pushed meanwhile; op-b takes over once the Lease
    // lapses, and its first reconcile of every object pins it, once.
    let pid = a.child.id().unwrap().to_string();
    std::process::Command::new("kill")
        .args(["-KILL", &pid])
        .status()
        .unwrap();
    let two = registry.push_image("acme/web", "1.0", "two").await;
    let killed = Instant::now();
    eventually("op-b takes over", || {
        lease_holder(&kube).starts_with("op-b")
    })
    .await;
    let took = killed.elapsed();
    assert!(
        took <= lease + Duration::from_millis(200).mul_f64(2.2) + Duration::from_secs(1),
        "took over after {took:?}"
    );
    eprintln!("operator takeover after SIGKILL: {took:?} (lease {lease:?})");
    eventually("op-b pins the new digest", || {
        repo.read("main", "apps/web.yaml")
            .unwrap()
            .contains(&two.manifest)
    })
    .await;
    // The initial commit, op-a's pin, op-b's pin: nothing committed twice.
    assert_eq!(repo.log("main").len(), 3, "{:?}", repo.log("main"));
    assert!(b.ready().await);
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn objects_pinning_the_same_tag_ask_the_registry_once_per_interval() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let web = registry.push_image("acme/web", "1.0", "one").await;
    let kube = cluster().await;
    runs_converged(&kube, "web", &format!("{host}/acme/web:1.0"), &web.manifest);
    let repos: Vec<BareRepo> = (0..5)
        .map(|_| {
            BareRepo::create(&[(
                "apps/web.yaml",
                &deployment("web", &format!("{host}/acme/web:1.0")),
            )])
        })
        .collect();
    for (i, repo) in repos.iter().enumerate() {
        kube.apply(pinned_repository(
            &format!("repo-{i}"),
            json!({}),
            spec(&repo.file_url(), &host),
        ));
    }
    let dir = tempfile::tempdir().unwrap();
    let operator = Operator::start(dir.path(), &kube, "op", &["--concurrent", "5"]).await;
    eventually("every object Ready", || {
        (0..5).all(|i| is_ready(&kube, &format!("repo-{i}")))
    })
    .await;
    let metrics = operator.metrics_page().await;
    let asked: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("tagpin_registry_requests_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    // Five repositories reconciled at once, one tag: one HEAD to the registry for all of them
    // (the verification of the pins asks nothing more of it), and for the delivery metrics
    // the pinned digest's build time, once for all of them: its manifest and config blob.
    assert_eq!(asked, 3.0, "{metrics}");
    for repo in &repos {
        assert!(repo
            .read("main", "apps/web.yaml")
            .unwrap()
            .contains(&web.manifest));
    }
    operator.stop().await;
}

/// `default/Deployment/<name>` as the GitOps tool applied it on `image`, no rollout reported.
fn applied(kube: &KubeServer, name: &str, image: &str) {
    kube.apply(support::kube::deployment(
        "default",
        name,
        &[("app", name)],
        &[("app", image)],
    ));
}

/// [`applied`], and its pod `<name>-1` unable to pull `image` (`ImagePullBackOff`).
fn cannot_pull(kube: &KubeServer, name: &str, image: &str) {
    applied(kube, name, image);
    LivePod::new("default", &format!("{name}-1"))
        .label("app", name)
        .container("app", image)
        .waiting(
            kube,
            "ImagePullBackOff",
            &format!("Back-off pulling image \"{image}\""),
        );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pin_not_applied_yet_is_reconciling_until_the_cluster_runs_it_and_a_failure_stalls() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let mut pushed = Vec::new();
    let mut repos = Vec::new();
    let kube = cluster().await;
    // web: live, at the tag Git had before the pin. fresh: new in Git, not created yet.
    // broken: the pin applied, and the kubelet cannot pull it.
    for name in ["web", "fresh", "broken"] {
        let image = format!("{host}/acme/{name}:1.0");
        pushed.push(
            registry
                .push_image(&format!("acme/{name}"), "1.0", name)
                .await,
        );
        let repo = BareRepo::create(&[(
            &format!("apps/{name}.yaml") as &str,
            &deployment(name, &image),
        )]);
        kube.apply(pinned_repository(
            name,
            json!({}),
            spec(&repo.file_url(), &host),
        ));
        repos.push(repo);
    }
    applied(&kube, "web", &format!("{host}/acme/web:1.0"));
    let broken = format!("{host}/acme/broken:1.0@{}", pushed[2].manifest);
    cannot_pull(&kube, "broken", &broken);

    let dir = tempfile::tempdir().unwrap();
    let operator = Operator::start(dir.path(), &kube, "op", &[]).await;
    let awaiting =
        |name: &str| condition(&kube, name, "Ready").is_some_and(|c| c["reason"] == "AwaitingSync");
    eventually("web and fresh await their sync", || {
        awaiting("web") && awaiting("fresh")
    })
    .await;
    for (name, repo) in [("web", &repos[0]), ("fresh", &repos[1])] {
        assert!(repo
            .read("main", &format!("apps/{name}.yaml"))
            .unwrap()
            .contains('@'));
        let ready = condition(&kube, name, "Ready").unwrap();
        assert_eq!(ready["status"], "False", "{name}");
        let message = ready["message"].as_str().unwrap();
        assert!(
            message.contains(&format!(
                "waiting for the GitOps tool to apply the pins: default/Deployment/{name} (app)"
            )),
            "{name}: {message}"
        );
        assert_eq!(
            condition(&kube, name, "Reconciling").unwrap()["reason"],
            "AwaitingSync",
            "{name}"
        );
        assert!(condition(&kube, name, "Stalled").is_none(), "{name}");
        let object = kube.get("PinnedRepository", NS, name).unwrap();
        assert_eq!(
            object["status"]["verdict"]["state"], "progressing",
            "{name}"
        );
    }
    assert!(condition(&kube, "fresh", "Ready").unwrap()["message"]
        .as_str()
        .unwrap()
        .contains("not created yet"),);
    // A genuine failure is not progress.
    eventually("broken stalls", || {
        condition(&kube, "broken", "Stalled").is_some()
    })
    .await;
    assert_eq!(
        condition(&kube, "broken", "Stalled").unwrap()["reason"],
        "VerificationFailed"
    );
    assert!(condition(&kube, "broken", "Reconciling").is_none());
    eventually("VerificationFailed is announced", || {
        event_reasons(&kube, "broken").contains(&"VerificationFailed".to_string())
    })
    .await;

    // Argo CD applies both pins and the pods run them: the next verification, one verify
    // interval later and with no change to the objects, finds them Converged.
    for (name, digest) in [("web", &pushed[0].manifest), ("fresh", &pushed[1].manifest)] {
        runs_converged(&kube, name, &format!("{host}/acme/{name}:1.0"), digest);
    }
    eventually("web and fresh converge", || {
        is_ready(&kube, "web") && is_ready(&kube, "fresh")
    })
    .await;
    for name in ["web", "fresh"] {
        assert_eq!(
            condition(&kube, name, "Ready").unwrap()["reason"],
            "Converged"
        );
        assert!(condition(&kube, name, "Reconciling").is_none(), "{name}");
        let reasons = event_reasons(&kube, name);
        assert!(
            !reasons.contains(&"VerificationFailed".to_string()),
            "{name}: {reasons:?}"
        );
    }
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn objects_following_one_repository_list_its_tags_once_per_interval_per_credentials() {
    use base64::Engine as _;
    use support::registry::FaultProxy;
    let registry = TestRegistry::start(Mode::Plain).await;
    registry.push_image("acme/web", "1.4.0", "old").await;
    let newest = registry.push_image("acme/web", "1.4.1", "new").await;
    // Every request the operator makes to the registry goes through the proxy, which counts.
    let proxy = FaultProxy::start(&registry.base_url(), Vec::new()).await;
    let host = proxy.host();
    let kube = cluster().await;
    let auth = base64::engine::general_purpose::STANDARD.encode("puller:secret");
    let docker_config = json!({"auths": {host.as_str(): {"auth": auth}}}).to_string();
    kube.apply(support::kube::secret(
        NS,
        "pull",
        &[support::kube::TAGPIN_SECRET],
        &[(".dockerconfigjson", &docker_config)],
    ));
    let mut repos = Vec::new();
    // Two objects without registry credentials, one with its own: the same image, the same
    // semver policy.
    for name in ["one", "two", "private"] {
        let repo = BareRepo::create(&[(
            "apps/web.yaml",
            &deployment("web", &format!("{host}/acme/web:1.4.0")),
        )]);
        let mut spec = spec(&repo.file_url(), &host);
        spec["images"] = json!({"policies": [{"match": "**/acme/web", "semver": "~1.4"}]});
        if name == "private" {
            spec["registries"]["docker_config_secret_ref"] = json!({"name": "pull"});
        }
        kube.apply(pinned_repository(name, json!({}), spec));
        repos.push(repo);
    }
    let dir = tempfile::tempdir().unwrap();
    let operator = Operator::start(dir.path(), &kube, "op", &["--concurrent", "3"]).await;
    let pinned = |name: &str| {
        kube.get("PinnedRepository", NS, name)
            .is_some_and(|o| o["status"]["lastPin"]["commit"].is_string())
    };
    eventually("every object pinned", || {
        ["one", "two", "private"].iter().all(|n| pinned(n))
    })
    .await;
    for repo in &repos {
        let manifest = repo.read("main", "apps/web.yaml").unwrap();
        assert!(
            manifest.contains(&format!("acme/web:1.4.1@{}", newest.manifest)),
            "{manifest}"
        );
    }
    // The workloads are not created yet: each object passes again every verify interval,
    // within the same one-hour interval of answers.
    let first = operator.reconciled_at("one").await;
    support::eventually_async("another pass of one", || async {
        operator.reconciled_at("one").await > first
    })
    .await;
    // One list for the two objects without credentials, one for the object with its own:
    // what a client with credentials was told never answers a pass without them.
    assert_eq!(proxy.count("GET", "/v2/acme/web/tags/list"), 2);
    operator.stop().await;
}

/// The Events about `name` with one of tagpin's own reasons, as (reason, note, series count).
pub(crate) fn announced(kube: &KubeServer, name: &str) -> Vec<(String, String, u64)> {
    kube.events(NS)
        .iter()
        .filter(|e| e["regarding"]["name"] == name)
        .filter(|e| {
            ["Pinned", "PullRequestOpened", "VerificationFailed"]
                .contains(&e["reason"].as_str().unwrap_or_default())
        })
        .map(|e| {
            (
                e["reason"].as_str().unwrap_or_default().to_string(),
                e["note"].as_str().unwrap_or_default().to_string(),
                e["series"]["count"].as_u64().unwrap_or(1),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restarted_operator_announces_nothing_the_first_one_already_did() {
    use support::github::GitHubServer;
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let web = registry.push_image("acme/web", "1.0", "web").await;
    let broken = registry.push_image("acme/broken", "1.0", "broken").await;
    registry.push_image("acme/api", "1.0", "api").await;
    let kube = cluster().await;
    let repo = |name: &str| {
        BareRepo::create(&[(
            &format!("apps/{name}.yaml") as &str,
            &deployment(name, &format!("{host}/acme/{name}:1.0")),
        )])
    };
    let (repo_web, repo_broken, repo_api) = (repo("web"), repo("broken"), repo("api"));
    let github = GitHubServer::start("gh-token", "acme", "gitops", repo_api.path()).await;
    kube.apply(support::kube::secret(
        NS,
        "forge",
        &[support::kube::TAGPIN_SECRET],
        &[("GITHUB_TOKEN", "gh-token")],
    ));
    kube.apply(pinned_repository(
        "web",
        json!({}),
        spec(&repo_web.file_url(), &host),
    ));
    kube.apply(pinned_repository(
        "broken",
        json!({}),
        spec(&repo_broken.file_url(), &host),
    ));
    let mut proposed = spec(&repo_api.file_url(), &host);
    proposed["mode"] = json!("pull-request");
    proposed["secret_ref"] = json!({"name": "forge"});
    proposed["forge"] = json!({"api_url": github.api_url(), "owner": "acme", "repo": "gitops",
                               "token_env": "GITHUB_TOKEN"});
    kube.apply(pinned_repository("api", json!({}), proposed));
    // web runs its pin; broken's pin is applied and cannot be pulled; api runs the tag Git
    // has until its pull request is merged.
    runs_converged(&kube, "web", &format!("{host}/acme/web:1.0"), &web.manifest);
    let pinned = format!("{host}/acme/broken:1.0@{}", broken.manifest);
    cannot_pull(&kube, "broken", &pinned);
    applied(&kube, "api", &format!("{host}/acme/api:1.0"));

    let dir = tempfile::tempdir().unwrap();
    let first = Operator::start(dir.path(), &kube, "op-1", &[]).await;
    let reason = |name: &str| {
        condition(&kube, name, "Ready")
            .map(|c| c["reason"].as_str().unwrap_or_default().to_string())
            .unwrap_or_default()
    };
    eventually("each object reports what it did", || {
        reason("web") == "Converged"
            && reason("broken") == "VerificationFailed"
            && reason("api") == "PullRequestOpen"
    })
    .await;
    let expected = [
        ("web", "Pinned"),
        ("broken", "Pinned"),
        ("broken", "VerificationFailed"),
        ("api", "PullRequestOpened"),
    ];
    // Events follow the status write that records what they announce.
    eventually("each announcement is published", || {
        expected
            .iter()
            .all(|(name, reason)| event_reasons(&kube, name).iter().any(|r| r == reason))
    })
    .await;
    let before: Vec<_> = ["web", "broken", "api"]
        .iter()
        .map(|name| (*name, announced(&kube, name)))
        .collect();
    for (name, events) in &before {
        let reasons: Vec<&str> = events.iter().map(|(r, _, _)| r.as_str()).collect();
        let wanted: Vec<&str> = expected
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, r)| *r)
            .collect();
        assert_eq!(reasons, wanted, "{name}: {events:?}");
        assert!(
            events.iter().all(|(_, _, count)| *count == 1),
            "{name}: announced more than once: {events:?}"
        );
    }
    first.stop().await;

    // A second process, as after a failover: it reconciles every object again.
    let second = Operator::start(dir.path(), &kube, "op-2", &[]).await;
    support::eventually_async("op-2 reconciled every object", || async {
        for name in ["web", "broken", "api"] {
            if second.reconciled_at(name).await.is_none() {
                return false;
            }
        }
        true
    })
    .await;
    second.stop().await;
    for (name, events) in &before {
        assert_eq!(&announced(&kube, name), events, "{name}");
    }
    assert_eq!(github.prs().len(), 1);
}

/// A merged sync pull request is verified after its merge, as `tagpin run` verifies it: the
/// object reports it while the cluster rolls it out, then Converged, with the verdict on the
/// merge commit and in the pull request's comment. A fork's pull request on a branch named
/// like tagpin's, merged after it, is never verified.
#[tokio::test(flavor = "multi_thread")]
async fn a_merged_pull_request_is_verified_until_the_cluster_runs_it() {
    use support::github::GitHubServer;
    use support::kube::secret;
    use support::workloads::{image_id, LiveDeployment};
    const TOKEN: &str = "ghs_operator_merged_5c1e";
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let digest = registry
        .push_image("acme/web", "1.0", "web-1.0")
        .await
        .manifest;
    let tag = format!("{host}/acme/web:1.0");
    let pinned = format!("{tag}@{digest}");
    let repo = BareRepo::create(&[("apps/web.yaml", &deployment("web", &tag))]);
    let before = repo.head("main").unwrap();
    let github = GitHubServer::start(TOKEN, "acme", "gitops", repo.path()).await;
    let kube = cluster().await;
    kube.apply(secret(
        NS,
        "git-creds",
        &[support::kube::TAGPIN_SECRET],
        &[("GITHUB_TOKEN", TOKEN)],
    ));
    // Argo CD applied the tag as Git had it before the pin.
    let web = LiveDeployment::new("default", "web").container("app", &tag);
    web.apply(&kube);
    kube.apply(pinned_repository(
        "shop",
        json!({}),
        json!({
            "repository": {"url": repo.file_url(), "branch": "main"},
            "paths": ["apps"],
            "mode": "pull-request",
            "registries": {"insecure": [host]},
            "secret_ref": {"name": "git-creds"},
            "forge": {"api_url": github.api_url(), "owner": "acme", "repo": "gitops",
                      "token_env": "GITHUB_TOKEN"},
        }),
    ));
    let dir = tempfile::tempdir().unwrap();
    let operator = Operator::start(dir.path(), &kube, "op", &[]).await;
    let reason = |kube: &KubeServer| {
        condition(kube, "shop", "Ready").map(|c| c["reason"].as_str().unwrap().to_string())
    };
    let verdict = |kube: &KubeServer| {
        kube.get("PinnedRepository", NS, "shop")
            .map(|o| o["status"]["verdict"].clone())
            .unwrap_or_default()
    };

    eventually("the pull request is open and the object Ready", || {
        reason(&kube).as_deref() == Some("PullRequestOpen")
    })
    .await;
    let prs = github.prs();
    assert_eq!(prs.len(), 1);
    let branch = prs[0].head_ref.clone();
    let object = kube.get("PinnedRepository", NS, "shop").unwrap();
    assert_eq!(object["status"]["pullRequest"]["number"], 1);
    assert_eq!(object["status"]["verdict"]["source"], "pull request #1");

    // A person merges it; Argo CD has not applied the merge yet.
    let merge = repo.commit_as_other_writer(
        "main",
        &[(
            "apps/web.yaml",
            &repo.read(&branch, "apps/web.yaml").unwrap(),
        )],
        &format!("Merge pull request #1 from acme/{branch}"),
    );
    github.merge_pr(1, &merge);
    let source = format!("pull request #1, merged as {}", &merge[..12]);
    eventually("the merge is awaited", || {
        reason(&kube).as_deref() == Some("AwaitingSync") && verdict(&kube)["source"] == source
    })
    .await;
    let object = kube.get("PinnedRepository", NS, "shop").unwrap();
    assert!(object["status"].get("pullRequest").is_none(), "{object}");
    assert_eq!(object["status"]["verdict"]["state"], "progressing");
    let ready = condition(&kube, "shop", "Ready").unwrap();
    assert_eq!(ready["status"], "False");
    assert!(
        ready["message"]
            .as_str()
            .unwrap()
            .contains("waiting for the GitOps tool to apply the pins: default/Deployment/web"),
        "{ready}"
    );
    assert_eq!(
        condition(&kube, "shop", "Reconciling").unwrap()["reason"],
        "AwaitingSync"
    );
    assert!(condition(&kube, "shop", "Stalled").is_none());
    let on_merge = |state: &str| github.has_status(&merge, "tagpin/converged", state);
    assert!(on_merge("pending"), "{:?}", github.statuses(&merge));

    // An outsider's fork, on a branch named like tagpin's with the same plan block, merged
    // after it: never tagpin's to verify.
    let fork =
        github.open_outsider_fork_pr(&before, &prs[0].title, prs[0].body.as_deref().unwrap());
    let fork_merge = repo.commit_as_other_writer(
        "main",
        &[("README.md", "# gitops\n")],
        &format!("Merge pull request #{fork} from mallory/tagpin/main"),
    );
    github.merge_pr(fork, &fork_merge);

    // Argo CD applies the pin; the rollout is under way.
    let rolling = LiveDeployment::new("default", "web").container("app", &pinned);
    let stored = rolling.apply(&kube);
    kube.set_status(
        "Deployment",
        "default",
        "web",
        json!({"observedGeneration": stored["metadata"]["generation"], "replicas": 1,
               "updatedReplicas": 0, "readyReplicas": 1, "availableReplicas": 1}),
    );
    eventually("the merge is rolling out", || {
        reason(&kube).as_deref() == Some("Progressing")
    })
    .await;
    assert_eq!(
        verdict(&kube)["source"],
        source,
        "the fork is not the last merged"
    );

    // The pods run the pinned digest.
    rolling.apply(&kube);
    rolling.pod("web-1").running(&kube, &[image_id(&pinned)]);
    eventually("the merge converges", || {
        reason(&kube).as_deref() == Some("Converged")
    })
    .await;
    assert_eq!(condition(&kube, "shop", "Ready").unwrap()["status"], "True");
    assert!(condition(&kube, "shop", "Reconciling").is_none());
    let verdict_now = verdict(&kube);
    assert_eq!(verdict_now["state"], "converged");
    assert_eq!(verdict_now["source"], source);
    assert_eq!(verdict_now["converged"], 1);
    assert!(on_merge("success"), "{:?}", github.statuses(&merge));
    // The status is posted before the comment is updated: wait for the comment too.
    eventually("the pull request's comment says Converged", || {
        github.comments(1).iter().any(|c| {
            c.body.contains("<!-- tagpin-verify -->") && c.body.contains("cluster Converged")
        })
    })
    .await;
    assert_eq!(
        github
            .comments(1)
            .iter()
            .filter(|c| c.body.contains("<!-- tagpin-verify -->"))
            .count(),
        1,
        "one comment, updated"
    );
    for sha in [&before, &fork_merge] {
        assert!(
            github.statuses(sha).is_empty(),
            "the fork's commits: {:?}",
            github.statuses(sha)
        );
    }
    assert!(
        github.comments(fork).is_empty(),
        "{:?}",
        github.comments(fork)
    );
    let log = operator.stop().await;
    assert!(!log.contains(TOKEN), "{log}");
    github.assert_no_violations();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_file_that_cannot_be_pinned_is_retried_while_the_rest_is_pinned_and_verified() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let web = registry.push_image("acme/web", "1.0", "one").await;
    let repo = BareRepo::create(&[
        (
            "apps/web.yaml",
            &deployment("web", &format!("{host}/acme/web:1.0")),
        ),
        // No such image in the registry: this file cannot be pinned.
        (
            "apps/gone.yaml",
            &deployment("gone", &format!("{host}/acme/gone:1.0")),
        ),
    ]);
    let kube = cluster().await;
    runs_converged(&kube, "web", &format!("{host}/acme/web:1.0"), &web.manifest);
    kube.apply(pinned_repository(
        "web",
        json!({}),
        spec(&repo.file_url(), &host),
    ));
    let dir = tempfile::tempdir().unwrap();
    let operator = Operator::start(dir.path(), &kube, "op", &[]).await;

    eventually("the object says what it retries", || {
        condition(&kube, "web", "Reconciling").is_some_and(|c| c["reason"] == "PartiallyPinned")
    })
    .await;
    assert!(repo
        .read("main", "apps/web.yaml")
        .unwrap()
        .contains(&web.manifest));
    let ready = condition(&kube, "web", "Ready").unwrap();
    assert_eq!(ready["status"], "False");
    assert!(
        ready["message"].as_str().unwrap().contains("acme/gone:1.0"),
        "{ready}"
    );
    // What was pinned is recorded and verified all the same.
    let status = kube.get("PinnedRepository", NS, "web").unwrap()["status"].clone();
    assert_eq!(
        status["lastPin"]["commit"],
        repo.head("main").unwrap().as_str()
    );
    assert!(
        status["verdict"]["source"]
            .as_str()
            .is_some_and(|s| s.contains(&repo.head("main").unwrap()[..12])),
        "{status}"
    );
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_docker_config_secret_naming_credential_helpers_is_refused() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let repo = BareRepo::create(&[(
        "apps/web.yaml",
        &deployment("web", &format!("{host}/acme/web:1.0")),
    )]);
    let kube = cluster().await;
    let docker_config =
        json!({"auths": {}, "credsStore": "ecr-login", "credHelpers": {host.as_str(): "gcloud"}})
            .to_string();
    kube.apply(support::kube::secret(
        NS,
        "pull",
        &[support::kube::TAGPIN_SECRET],
        &[(".dockerconfigjson", &docker_config)],
    ));
    let mut with_helpers = spec(&repo.file_url(), &host);
    with_helpers["registries"]["docker_config_secret_ref"] = json!({"name": "pull"});
    kube.apply(pinned_repository("web", json!({}), with_helpers));
    let dir = tempfile::tempdir().unwrap();
    let operator = Operator::start(dir.path(), &kube, "op", &[]).await;

    eventually("the object stalls on its Docker config", || {
        condition(&kube, "web", "Stalled").is_some()
    })
    .await;
    let stalled = condition(&kube, "web", "Stalled").unwrap();
    assert_eq!(stalled["reason"], "InvalidSpec");
    assert_eq!(
        stalled["message"],
        format!(
            "spec.registries.docker_config_secret_ref: Secret {NS}/pull names credential \
             helpers (credsStore: ecr-login, credHelpers.{host}: gcloud); a Secret's Docker \
             config must carry its credentials in `auths`"
        )
    );
    assert_eq!(repo.log("main").len(), 1, "nothing pinned");
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_repository_on_the_controllers_own_disk_is_refused_unless_allowed() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    registry.push_image("acme/web", "1.0", "one").await;
    let base = tempfile::tempdir().unwrap();
    let files = [(
        "apps/web.yaml",
        deployment("web", &format!("{host}/acme/web:1.0")),
    )];
    let files: Vec<(&str, &str)> = files.iter().map(|(p, t)| (*p, t.as_str())).collect();
    let local = BareRepo::create_in(base.path(), "local.git", &files);
    let remote = BareRepo::create_in(base.path(), "remote.git", &files);
    let server = GitHttpServer::start(base.path(), HttpAuth::None);
    let kube = cluster().await;
    kube.apply(pinned_repository(
        "local",
        json!({}),
        spec(&local.file_url(), &host),
    ));
    kube.apply(pinned_repository(
        "remote",
        json!({}),
        spec(&server.url("remote.git"), &host),
    ));
    let dir = tempfile::tempdir().unwrap();
    let operator = Operator::start_remote_only(dir.path(), &kube, "op").await;

    eventually("the local one stalls, the remote one is pinned", || {
        condition(&kube, "local", "Stalled").is_some()
            && kube
                .get("PinnedRepository", NS, "remote")
                .is_some_and(|o| o["status"]["lastPin"]["commit"].is_string())
    })
    .await;
    let stalled = condition(&kube, "local", "Stalled").unwrap();
    assert_eq!(stalled["reason"], "InvalidSpec");
    let message = stalled["message"].as_str().unwrap();
    assert!(
        message.starts_with("spec.repository.url: \"file://")
            && message.contains("--allow-local-repositories"),
        "{message}"
    );
    assert!(remote
        .read("main", "apps/web.yaml")
        .unwrap()
        .contains("@sha256:"));
    assert_eq!(
        local.log("main").len(),
        1,
        "the local repository was not touched"
    );
    assert!(!dir.path().join("cache-op").join(NS).join("local").exists());
    operator.stop().await;
}
