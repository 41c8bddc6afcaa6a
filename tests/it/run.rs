//! `tagpin run`, the controller, as a process: a real registry, a real bare Git remote,
//! webhook deliveries (signed and not), `/metrics` scraped, and SIGTERM.

use crate::support;
use crate::support::{eventually, eventually_async, eventually_or};

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use support::git::BareRepo;
use support::manifests::deployment;
use support::registry::{free_port, Mode, TestRegistry};
use support::workloads::LiveDeployment;
use tokio::process::{Child, Command};

pub(crate) const SECRET: &str = "hook-secret-81f2";

/// A registry with `acme/web:1.0` (and its host), and a bare repository whose
/// `apps/web.yaml` names it by tag, not pinned yet.
async fn web_one_registry_and_repo() -> (TestRegistry, String, BareRepo) {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    registry.push_image("acme/web", "1.0", "one").await;
    let repo = BareRepo::create(&[(
        "apps/web.yaml",
        &deployment("web", &format!("{host}/acme/web:1.0")),
    )]);
    (registry, host, repo)
}

pub(crate) struct Controller {
    child: Child,
    pub(crate) base: String,
    http: reqwest::Client,
}

impl Controller {
    async fn start(dir: &std::path::Path, config: &PathBuf) -> Controller {
        Controller::start_with(dir, config, &[]).await
    }

    async fn start_with(
        dir: &std::path::Path,
        config: &PathBuf,
        env: &[(&str, &str)],
    ) -> Controller {
        Controller::start_with_args(dir, config, env, &["--interval", "1h"]).await
    }

    /// Started with `args` added to `run --verify-interval 1s` (`--interval` is theirs).
    pub(crate) async fn start_with_args(
        dir: &std::path::Path,
        config: &PathBuf,
        env: &[(&str, &str)],
        args: &[&str],
    ) -> Controller {
        let port = free_port();
        let child = Command::new(env!("CARGO_BIN_EXE_tagpin"))
            .args(["run", "--verify-interval", "1s"])
            .args(args)
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--config")
            .arg(config)
            .arg("--cache-dir")
            .arg(dir.join("cache"))
            .env("HOME", dir)
            .env("TAGPIN_WEBHOOK_SECRET", SECRET)
            .env("RUST_LOG", "tagpin=info")
            .env_remove("DOCKER_CONFIG")
            .env("KUBECONFIG", dir.join("no-kubeconfig"))
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start tagpin run");
        let controller = Controller {
            child,
            base: format!("http://127.0.0.1:{port}"),
            http: reqwest::Client::new(),
        };
        controller.wait_ready().await;
        controller
    }

    async fn wait_ready(&self) {
        let readyz = format!("{}/readyz", self.base);
        support::eventually_async("tagpin run to become ready", || async {
            let answer = self.http.get(&readyz).send().await;
            answer.is_ok_and(|r| r.status() == 200)
        })
        .await;
    }

    pub(crate) async fn deliver(&self, sender: &str, auth: Option<&str>, body: &str) -> u16 {
        let mut request = self
            .http
            .post(format!("{}/webhooks/{sender}", self.base))
            .body(body.to_string());
        if let Some(auth) = auth {
            request = request.header("authorization", auth);
        }
        request.send().await.unwrap().status().as_u16()
    }

    /// A GitHub `package` event, signed with `secret` as GitHub signs deliveries.
    async fn deliver_ghcr(&self, secret: &str, body: &str) -> u16 {
        self.http
            .post(format!("{}/webhooks/ghcr", self.base))
            .header(
                "x-hub-signature-256",
                tagpin::webhook::sign(secret, body.as_bytes()),
            )
            .header("x-github-event", "package")
            .body(body.to_string())
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    }

    pub(crate) async fn metrics(&self) -> String {
        self.http
            .get(format!("{}/metrics", self.base))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// Sends SIGTERM and waits for the exit; returns the exit code and what it logged.
    pub(crate) async fn stop(self) -> (Option<i32>, String) {
        let output = support::terminate(self.child, "tagpin run").await;
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }
}

/// A commit-mode `tagpin.yaml` for `repo`, pinning `apps/` against the registry at `host`.
/// A repository pinning `acme/web:1.0` and `acme/api:1` of `host`, and a commit-mode
/// configuration for it in a new directory.
fn web_and_api_in_commit_mode(host: &str) -> (BareRepo, tempfile::TempDir, PathBuf) {
    let repo = BareRepo::create(&[
        (
            "apps/web.yaml",
            &deployment("web", &format!("{host}/acme/web:1.0")),
        ),
        (
            "apps/api.yaml",
            &deployment("api", &format!("{host}/acme/api:1")),
        ),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let config = commit_mode_config(dir.path(), &repo, host);
    (repo, dir, config)
}

/// `tagpin.yaml` in `dir`: commit mode on `repo`'s `main`, manifests under `apps`, `host` an
/// insecure (plain HTTP) registry. Returns its path.
pub(crate) fn commit_mode_config(dir: &std::path::Path, repo: &BareRepo, host: &str) -> PathBuf {
    let config = dir.join("tagpin.yaml");
    std::fs::write(
        &config,
        format!(
            "repository: {{url: '{}', branch: main}}\npaths: [apps]\nregistries: {{insecure: ['{host}']}}\n",
            repo.file_url()
        ),
    )
    .unwrap();
    config
}

/// The sum of a metric family's samples in a `/metrics` page (`family` with its `{`).
pub(crate) fn metric_sum(metrics: &str, family: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(family))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// `shop/Deployment/<name>` as Argo CD applied it from `image`, its rollout finished, and its
/// one pod `pod_name` running and reporting `image_id`.
pub(crate) fn runs(
    kube: &support::kube::KubeServer,
    name: &str,
    image: &str,
    image_id: &str,
    pod_name: &str,
) {
    let live = LiveDeployment::new("shop", name).container("app", image);
    live.apply(kube);
    live.pod(pod_name).running(kube, &[image_id]);
}

#[tokio::test]
async fn the_controller_pins_on_start_and_within_seconds_of_a_webhook_then_stops_cleanly() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let first = registry.push_image("acme/web", "1.0", "one").await;
    registry.push_image("acme/api", "1", "api").await;
    let (repo, dir, config) = web_and_api_in_commit_mode(&host);
    let commits_before = repo.log("main").len();

    let controller = Controller::start(dir.path(), &config).await;
    assert_eq!(
        repo.log("main").len(),
        commits_before + 1,
        "the first pass pinned"
    );
    assert!(repo
        .read("main", "apps/web.yaml")
        .unwrap()
        .contains(&first.manifest));

    // A push, announced by the distribution registry's notification.
    let second = registry.push_image("acme/web", "1.0", "two").await;
    let event = format!(
        r#"{{"events":[{{"action":"push","target":{{"repository":"acme/web","tag":"1.0"}},"request":{{"host":"{host}"}}}}]}}"#
    );
    assert_eq!(controller.deliver("distribution", None, &event).await, 401);
    assert_eq!(
        controller
            .deliver("distribution", Some("Bearer wrong"), &event)
            .await,
        401
    );
    assert_eq!(
        controller
            .deliver("distribution", Some("not json"), "{")
            .await,
        401
    );
    assert_eq!(
        controller
            .deliver("distribution", Some(&format!("Bearer {SECRET}")), "{")
            .await,
        400
    );
    // GHCR signs its deliveries: a wrong signature is refused, a right one accepted (it names
    // an image this repository does not use, served by the same pass as the pushes below).
    let package = r#"{"action":"published","package":{"name":"other","namespace":"acme","package_type":"container"}}"#;
    assert_eq!(
        controller.deliver_ghcr("not-the-secret", package).await,
        401
    );
    assert_eq!(controller.deliver_ghcr(SECRET, package).await, 202);
    let started = Instant::now();
    for _ in 0..5 {
        // A flood of deliveries for one push, within the webhook window the GHCR delivery's
        // pass opened: served together by one follow-up pass at the window's end.
        assert_eq!(
            controller
                .deliver("distribution", Some(&format!("Bearer {SECRET}")), &event)
                .await,
            202
        );
    }
    eventually("the webhook pass to commit", || {
        repo.log("main").len() == commits_before + 2
    })
    .await;

    let latency = started.elapsed();
    assert!(repo
        .read("main", "apps/web.yaml")
        .unwrap()
        .contains(&second.manifest));

    let metrics = controller.metrics().await;
    for expected in [
        "tagpin_passes_total{outcome=\"ok\",trigger=\"schedule\"} 1",
        "tagpin_webhook_deliveries_total{sender=\"distribution\",result=\"accepted\"} 5",
        "tagpin_webhook_deliveries_total{sender=\"distribution\",result=\"unauthorized\"} 3",
        "tagpin_webhook_deliveries_total{sender=\"distribution\",result=\"bad_payload\"} 1",
        "tagpin_webhook_deliveries_total{sender=\"ghcr\",result=\"unauthorized\"} 1",
        "tagpin_webhook_deliveries_total{sender=\"ghcr\",result=\"accepted\"} 1",
        "tagpin_commits_total 2",
        "tagpin_last_success_timestamp_seconds",
    ] {
        assert!(
            metrics.contains(expected),
            "missing {expected} in\n{metrics}"
        );
    }
    // Six accepted deliveries, never a pass each: the GHCR one's pass at once, and one
    // follow-up at the end of its webhook window for the five distribution deliveries (or a
    // single pass for all six, when they all came before the loop took the first). Each
    // re-asks only acme/web, once the first pass asked both images.
    let webhook_passes = metric_value(
        &metrics,
        "tagpin_passes_total{outcome=\"ok\",trigger=\"webhook\"}",
    );
    assert!((1.0..=2.0).contains(&webhook_passes), "{metrics}");
    let asked = metric_value(
        &metrics,
        &format!("tagpin_registry_requests_total{{host=\"{host}\",status=\"200\"}}"),
    );
    assert!((3.0..=4.0).contains(&asked), "{metrics}");
    assert!(!metrics.contains("sha256:"), "no digest as a label");

    let (code, log) = controller.stop().await;
    assert_eq!(code, Some(0), "{log}");
    assert!(!log.contains(SECRET), "the secret leaked into the log");
    eprintln!("webhook to commit: {latency:?}");

    // A new start carries on: nothing to do, nothing repeated.
    let again = Controller::start(dir.path(), &config).await;
    assert_eq!(repo.log("main").len(), commits_before + 2);
    let (code, log) = again.stop().await;
    assert_eq!(code, Some(0), "{log}");
}

/// The value of the sample named exactly `name` (with its labels), 0 when absent.
fn metric_value(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .map_or(0.0, |value| value.trim().parse().expect("a sample value"))
}

fn push_event(host: &str, repository: &str, tag: &str) -> String {
    format!(
        r#"{{"events":[{{"action":"push","target":{{"repository":"{repository}","tag":"{tag}"}},"request":{{"host":"{host}"}}}}]}}"#
    )
}

/// Leading edge: a delivery starts a pass at once; what arrives while that pass runs is served
/// by one follow-up pass, nothing dropped and never a pass per delivery.
#[tokio::test]
async fn deliveries_during_a_pass_are_served_by_one_follow_up_pass() {
    use std::sync::Arc;
    use support::registry::{Fault, FaultProxy, FaultRule};

    let registry = TestRegistry::start(Mode::Plain).await;
    let proxy = FaultProxy::start(&registry.base_url(), vec![]).await;
    let host = proxy.host();
    registry.push_image("acme/web", "1.0", "one").await;
    registry.push_image("acme/api", "1", "api-one").await;
    let (repo, dir, config) = web_and_api_in_commit_mode(&host);
    let controller = Controller::start(dir.path(), &config).await;
    let auth = format!("Bearer {SECRET}");
    let web_head = "/v2/acme/web/manifests/";

    // web is pushed again; the pass its delivery starts is held at the registry.
    let two = registry.push_image("acme/web", "1.0", "two").await;
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    proxy.add_rule(FaultRule::new("HEAD", web_head, Fault::Hold(gate.clone())).times(1));
    let asked = proxy.count("HEAD", web_head);
    let event = push_event(&host, "acme/web", "1.0");
    assert_eq!(
        controller
            .deliver("distribution", Some(&auth), &event)
            .await,
        202
    );
    eventually("the pass to start and ask the registry", || {
        proxy.count("HEAD", web_head) > asked
    })
    .await;

    // While it waits: api is pushed too, and five deliveries arrive.
    let api_two = registry.push_image("acme/api", "1", "api-two").await;
    for _ in 0..4 {
        assert_eq!(
            controller
                .deliver("distribution", Some(&auth), &event)
                .await,
            202
        );
    }
    let api_event = push_event(&host, "acme/api", "1");
    assert_eq!(
        controller
            .deliver("distribution", Some(&auth), &api_event)
            .await,
        202
    );
    gate.add_permits(1);

    eventually("web and api both pinned to their new digests", || {
        repo.read("main", "apps/web.yaml")
            .is_some_and(|t| t.contains(&two.manifest))
            && repo
                .read("main", "apps/api.yaml")
                .is_some_and(|t| t.contains(&api_two.manifest))
    })
    .await;

    // One more push and delivery: its pass is the third. Had every delivery its own pass, the
    // five queued ones would run before it.
    let three = registry.push_image("acme/web", "1.0", "three").await;
    assert_eq!(
        controller
            .deliver("distribution", Some(&auth), &event)
            .await,
        202
    );
    eventually("the last push pinned", || {
        repo.read("main", "apps/web.yaml")
            .is_some_and(|t| t.contains(&three.manifest))
    })
    .await;
    let webhook_passes = "tagpin_passes_total{outcome=\"ok\",trigger=\"webhook\"}";
    let mut metrics = controller.metrics().await;
    // A pass is counted just after its push.
    let deadline = Instant::now() + Duration::from_secs(30);
    while metric_value(&metrics, webhook_passes) < 3.0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        metrics = controller.metrics().await;
    }
    assert_eq!(metric_value(&metrics, webhook_passes), 3.0, "{metrics}");
    let (code, log) = controller.stop().await;
    assert_eq!(code, Some(0), "{log}");
}

/// A build pushes the same tag five times within moments (multi-arch pushes, retries), each
/// push announced by its own delivery. The first delivery's pass starts at once and pins its
/// digest; the four that follow within the webhook window (1 s by default) wait for the
/// window's end and are served by one follow-up pass, which pins the last digest: two commits
/// on `main`, not five, and none but the first before the window is over.
#[tokio::test]
async fn a_burst_of_five_pushes_of_one_tag_makes_two_commits_pinning_the_last() {
    const WINDOW: Duration = Duration::from_secs(1);
    let (registry, host, repo) = web_one_registry_and_repo().await;
    let dir = tempfile::tempdir().unwrap();
    let config = commit_mode_config(dir.path(), &repo, &host);
    let controller = Controller::start(dir.path(), &config).await;
    let before = repo.log("main").len();
    let auth = format!("Bearer {SECRET}");
    let event = push_event(&host, "acme/web", "1.0");
    let pinned = |digest: &str| {
        repo.read("main", "apps/web.yaml")
            .is_some_and(|t| t.contains(digest))
    };

    // The five builds' layers are uploaded beforehand; each push of the burst is the manifest
    // PUT under `1.0`, the request that makes the registry send its notification.
    let media_type = support::registry::ImageKind::Oci.manifest_media_type();
    let mut builds = Vec::new();
    for round in 1..=5 {
        let tag = format!("build-{round}");
        registry
            .push_image("acme/web", &tag, &format!("burst-{round}"))
            .await;
        builds.push(registry.manifest_bytes("acme/web", &tag).await);
    }

    // Leading edge: the first delivery's pass is not held back.
    let started = Instant::now();
    let first = registry
        .push_manifest("acme/web", "1.0", media_type, &builds[0])
        .await;
    assert_eq!(
        controller
            .deliver("distribution", Some(&auth), &event)
            .await,
        202
    );
    eventually("the first delivery's pass to pin its digest", || {
        pinned(&first)
    })
    .await;
    let first_pinned = started.elapsed();
    assert_eq!(repo.log("main").len(), before + 1);

    // The rest of the burst, within the window the first pass opened.
    let mut last = String::new();
    for manifest in &builds[1..] {
        last = registry
            .push_manifest("acme/web", "1.0", media_type, manifest)
            .await;
        assert_eq!(
            controller
                .deliver("distribution", Some(&auth), &event)
                .await,
            202
        );
    }
    let burst = started.elapsed();
    let mut second_commit_seen = None;
    eventually("the last push of the burst pinned", || {
        if second_commit_seen.is_none() && repo.log("main").len() > before + 1 {
            second_commit_seen = Some(started.elapsed());
        }
        pinned(&last)
    })
    .await;
    let second_commit_seen = second_commit_seen.unwrap_or_else(|| started.elapsed());

    let commits = repo.log("main").len() - before;
    let metrics = controller.metrics().await;
    let (code, log) = controller.stop().await;
    assert_eq!(code, Some(0), "{log}");
    eprintln!(
        "burst of 5 sent in {burst:?}: {commits} commit(s); the first pinned within \
         {first_pinned:?}, the second seen after {second_commit_seen:?}"
    );
    assert!(
        burst < WINDOW,
        "the burst took {burst:?}, longer than the window: the machine is too slow for this test"
    );
    assert_eq!(
        commits,
        2,
        "one burst of 5 pushes:\n{:#?}",
        repo.log("main")
    );
    assert!(
        second_commit_seen >= WINDOW,
        "a second commit {second_commit_seen:?} after the first delivery, inside the window"
    );
    // The leading pass and one follow-up: the other three deliveries rode along.
    assert_eq!(
        metric_value(
            &metrics,
            "tagpin_passes_total{outcome=\"ok\",trigger=\"webhook\"}"
        ),
        2.0,
        "{metrics}"
    );
    assert_eq!(
        metric_value(&metrics, "tagpin_webhook_deliveries_coalesced_total"),
        3.0,
        "{metrics}"
    );
}

#[tokio::test]
async fn sigterm_during_a_pass_leaves_nothing_half_done() {
    let (registry, host, repo) = web_one_registry_and_repo().await;
    let dir = tempfile::tempdir().unwrap();
    let config = commit_mode_config(dir.path(), &repo, &host);
    let controller = Controller::start(dir.path(), &config).await;
    let base_commits = repo.log("main").len();

    // Stop right after a webhook: the pass may be under way, or not started yet.
    let second = registry.push_image("acme/web", "1.0", "two").await;
    let event = format!(
        r#"{{"events":[{{"action":"push","target":{{"repository":"acme/web","tag":"1.0"}},"request":{{"host":"{host}"}}}}]}}"#
    );
    controller
        .deliver("distribution", Some(&format!("Bearer {SECRET}")), &event)
        .await;
    let (code, log) = controller.stop().await;
    assert_eq!(code, Some(0), "{log}");

    // Either the pass landed whole, or it did not start: never a partial file or commit.
    let web = repo.read("main", "apps/web.yaml").unwrap();
    let commits = repo.log("main").len();
    assert!(
        commits == base_commits || (commits == base_commits + 1 && web.contains(&second.manifest))
    );

    // The next start carries on to the new digest.
    let again = Controller::start(dir.path(), &config).await;
    assert!(repo
        .read("main", "apps/web.yaml")
        .unwrap()
        .contains(&second.manifest));
    let (code, _) = again.stop().await;
    assert_eq!(code, Some(0));
}

#[tokio::test]
async fn in_pull_request_mode_the_controller_verifies_what_it_opened_until_converged() {
    let w = PrModeWorld::start("ghs_run_token").await;
    let (github, repo, kube, controller) = (&w.github, &w.repo, &w.kube, w.controller);
    let (host, pushed) = (w.registry.host(), &w.pushed);
    let head = github.prs()[0].head_sha.clone();
    eventually("a pending status on the PR head", || {
        github
            .statuses(&head)
            .iter()
            .any(|s| s.state == "pending" && s.context == "tagpin/converged")
    })
    .await;

    // A person merges; Argo CD applies; the kubelet runs the pinned digest.
    let pinned = format!("{host}/acme/web:1.0@{}", pushed.manifest);
    let merge = repo.commit_as_other_writer(
        "main",
        &[("apps/web.yaml", &deployment("web", &pinned))],
        "Merge #1",
    );
    github.merge_pr(1, &merge);
    runs(
        kube,
        "web",
        &pinned,
        &format!("{host}/acme/web@{}", pushed.manifest),
        "web-1",
    );

    let converged = eventually_or("success on the merge commit", || {
        github.statuses(&merge).iter().any(|s| s.state == "success")
    })
    .await;
    if !converged {
        let (_, log) = controller.stop().await;
        panic!("no success status: {:?}\n{log}", github.statuses(&merge));
    }
    // The status is set before the comment is edited: wait for the comment too.
    let commented = eventually_or("the verdict comment says Converged", || {
        github
            .comments(1)
            .iter()
            .any(|c| c.body.contains("cluster Converged"))
    })
    .await;
    let comments = github.comments(1);
    assert!(commented, "{comments:?}");
    assert_eq!(comments.len(), 1, "{comments:?}");
    let metrics = controller.metrics().await;
    assert!(
        // An open pull request: not yet what the branch holds.
        metrics.contains("tagpin_verifications_total{verdict=\"converged\",source=\"open\"}"),
        "{metrics}"
    );
    let (code, log) = controller.stop().await;
    assert_eq!(code, Some(0), "{log}");
    github.assert_no_violations();
    kube.assert_no_writes();
}

#[tokio::test]
async fn a_workload_the_pin_names_is_awaited_until_it_is_created_not_failed() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let pushed = registry.push_image("acme/web", "1.0", "one").await;
    let repo = BareRepo::create(&[(
        "apps/web.yaml",
        &deployment("web", &format!("{host}/acme/web:1.0")),
    )]);
    let token = "ghs_run_grace";
    // Nothing runs web yet: Argo CD creates it once it applies the pin commit.
    let (github, kube, dir, config) = forge_world(&repo, &host, token, "commit", "").await;
    let controller = pr_mode_controller(dir.path(), &config, &kube, token).await;
    let pinned = format!("{host}/acme/web:1.0@{}", pushed.manifest);
    assert!(repo
        .read("main", "apps/web.yaml")
        .unwrap()
        .contains(&pinned));
    let pin = repo.head("main").unwrap();

    // For rounds of verification within the interval (1 h), the pin commit says pending.
    // (A failed verdict would be final: no third round, and the statuses below say failure.)
    support::eventually_async_or("three verifications", || async {
        metric_sum(&controller.metrics().await, "tagpin_verifications_total{") >= 3.0
    })
    .await;
    let statuses = github.statuses(&pin);
    let converged: Vec<_> = statuses
        .iter()
        .filter(|s| s.context == "tagpin/converged")
        .collect();
    assert!(
        converged.iter().all(|s| s.state == "pending"),
        "{statuses:?}"
    );
    assert!(
        converged
            .last()
            .and_then(|s| s.description.as_deref())
            .is_some_and(|d| d.contains("not created yet")),
        "{statuses:?}"
    );

    // Argo CD creates it; the kubelet runs the pinned digest.
    runs(
        &kube,
        "web",
        &pinned,
        &format!("{host}/acme/web@{}", pushed.manifest),
        "web-1",
    );
    let done = eventually_or("success on the pin commit", || {
        github.has_status(&pin, "tagpin/converged", "success")
    })
    .await;
    let (code, log) = controller.stop().await;
    assert!(done, "{:?}\n{log}", github.statuses(&pin));
    assert_eq!(code, Some(0), "{log}");
    github.assert_no_violations();
    kube.assert_no_writes();
}

#[tokio::test]
async fn a_broken_manifest_makes_the_pass_partial_while_the_good_ones_are_pinned() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let pushed = registry.push_image("acme/web", "1.0", "one").await;
    let repo = BareRepo::create(&[
        (
            "apps/web.yaml",
            &deployment("web", &format!("{host}/acme/web:1.0")),
        ),
        ("apps/broken.yaml", "kind: Pod\nmetadata: [unclosed\n"),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let config = commit_mode_config(dir.path(), &repo, &host);

    let controller = Controller::start(dir.path(), &config).await;
    assert!(repo
        .read("main", "apps/web.yaml")
        .unwrap()
        .contains(&pushed.manifest));
    let metrics = controller.metrics().await;
    assert!(
        metrics.contains("tagpin_passes_total{outcome=\"partial\",trigger=\"schedule\"} 1"),
        "{metrics}"
    );
    let (_, log) = controller.stop().await;
    assert!(log.contains("apps/broken.yaml:3:1"), "{log}");
}

#[tokio::test]
async fn the_controller_promotes_what_converged_in_staging_and_verifies_production_after_the_merge()
{
    use support::github::GitHubServer;
    use support::kube::{deployment as live_deployment, KubeServer};

    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let pushed = registry.push_image("acme/web", "1.0", "one").await;
    let production_before = deployment("web", &format!("{host}/acme/web:0.9"));
    let repo = BareRepo::create(&[
        (
            "envs/staging/web.yaml",
            &deployment("web", &format!("{host}/acme/web:1.0")),
        ),
        ("envs/production/web.yaml", &production_before),
    ]);
    let github = GitHubServer::start("ghs_promote_run", "acme", "gitops", repo.path()).await;
    let (staging, production) = (KubeServer::start().await, KubeServer::start().await);
    let dir = tempfile::tempdir().unwrap();
    let mut kubeconfigs = Vec::new();
    for (name, kube) in [("staging", &staging), ("production", &production)] {
        let at = dir.path().join(name);
        std::fs::create_dir_all(&at).unwrap();
        kubeconfigs.push(kube.kubeconfig(&at));
    }
    let config = dir.path().join("tagpin.yaml");
    std::fs::write(
        &config,
        format!(
            "repository: {{url: '{}', branch: main}}\nmode: commit\n\
             registries: {{insecure: ['{host}']}}\nverify: {{default_namespace: shop}}\n\
             forge: {{api_url: '{}', owner: acme, repo: gitops, token_env: GH_TOKEN}}\n\
             promotion:\n  stages:\n\
             \x20 - {{name: staging, paths: [envs/staging], cluster: {{kubeconfig: '{}'}}}}\n\
             \x20 - {{name: production, paths: [envs/production], cluster: {{kubeconfig: '{}'}}}}\n",
            repo.file_url(),
            github.api_url(),
            kubeconfigs[0].display(),
            kubeconfigs[1].display(),
        ),
    )
    .unwrap();
    let converge = |kube: &KubeServer, image: &str, pod_name: &str| {
        let image_id = format!("{host}/acme/web@{}", pushed.manifest);
        runs(kube, "web", image, &image_id, pod_name);
    };
    // Staging runs the tag, unpinned, as before tagpin; production the older version.
    staging.apply(live_deployment(
        "shop",
        "web",
        &[("app", "web")],
        &[("app", &format!("{host}/acme/web:1.0"))],
    ));
    production.apply(live_deployment(
        "shop",
        "web",
        &[("app", "web")],
        &[("app", &format!("{host}/acme/web:0.9"))],
    ));

    let controller =
        Controller::start_with(dir.path(), &config, &[("GH_TOKEN", "ghs_promote_run")]).await;
    // The first pass pins staging from the registry; staging does not run the pin yet, so
    // nothing is promoted.
    let pinned = format!("{host}/acme/web:1.0@{}", pushed.manifest);
    assert!(repo
        .read("main", "envs/staging/web.yaml")
        .unwrap()
        .contains(&pinned));
    assert_eq!(
        repo.read("main", "envs/production/web.yaml").unwrap(),
        production_before
    );
    let tip = repo.head("main").unwrap();
    eventually("staging's verdict on the tip", || {
        github
            .statuses(&tip)
            .iter()
            .any(|s| s.context == "tagpin/stage/staging" && s.state == "pending")
    })
    .await;
    assert!(github.prs().is_empty(), "staging has not converged yet");

    // Argo CD applies staging's pin and the pod runs it; the next pass promotes.
    converge(&staging, &pinned, "web-1");
    let event = format!(
        r#"{{"events":[{{"action":"push","target":{{"repository":"acme/web","tag":"1.0"}},"request":{{"host":"{host}"}}}}]}}"#
    );
    assert_eq!(
        controller
            .deliver("distribution", Some(&format!("Bearer {SECRET}")), &event)
            .await,
        202
    );
    eventually("the promotion pull request", || github.prs().len() == 1).await;
    let pr = github.prs()[0].clone();
    assert_eq!(pr.head_ref, "tagpin/promote/production");
    assert_eq!(
        repo.read("tagpin/promote/production", "envs/production/web.yaml")
            .unwrap(),
        production_before.replace(&format!("{host}/acme/web:0.9"), &pinned),
        "only the image value moved, to staging's tag and digest"
    );
    eventually("tagpin/promotion success on the PR head", || {
        github
            .statuses(&pr.head_sha)
            .iter()
            .any(|s| s.context == "tagpin/promotion" && s.state == "success")
    })
    .await;

    // A person merges; production runs it; the controller verifies it on production's cluster.
    let merge = repo.commit_as_other_writer(
        "main",
        &[(
            "envs/production/web.yaml",
            &production_before.replace(&format!("{host}/acme/web:0.9"), &pinned),
        )],
        "Merge #1",
    );
    github.merge_pr(pr.number, &merge);
    // A pass fetches the merge, which is now the branch's tip. Production does not run it
    // yet: for rounds of verification the merge commit must say pending, never staging's
    // success as commit-mode verification of the same commit would.
    let passes = metric_sum(&controller.metrics().await, "tagpin_passes_total{");
    assert_eq!(
        controller
            .deliver("distribution", Some(&format!("Bearer {SECRET}")), &event)
            .await,
        202
    );
    eventually_async("a pass after the merge", || async {
        metric_sum(&controller.metrics().await, "tagpin_passes_total{") > passes
    })
    .await;
    let rounds = metric_sum(&controller.metrics().await, "tagpin_verifications_total{");
    let verified = support::eventually_async_or("three more verifications", || async {
        metric_sum(&controller.metrics().await, "tagpin_verifications_total{") >= rounds + 3.0
    })
    .await;
    if !verified {
        let metrics = controller.metrics().await;
        let (_, log) = controller.stop().await;
        panic!("no verification rounds ({rounds} before):\n{metrics}\n{log}");
    }
    let before = github.statuses(&merge);
    assert!(
        before
            .iter()
            .any(|s| s.context == "tagpin/converged" && s.state == "pending"),
        "{before:?}"
    );
    assert!(
        !before
            .iter()
            .any(|s| s.context == "tagpin/converged" && s.state == "success"),
        "production does not run the promotion yet: {before:?}"
    );
    converge(&production, &pinned, "web-p1");
    let converged = eventually_or("tagpin/converged success on the merge commit", || {
        github.has_status(&merge, "tagpin/converged", "success")
    })
    .await;
    if !converged {
        let (_, log) = controller.stop().await;
        panic!("no success status: {:?}\n{log}", github.statuses(&merge));
    }
    // The status is posted before the comment is updated: wait for the comment too.
    eventually("the verdict comment says Converged", || {
        github
            .comments(pr.number)
            .first()
            .is_some_and(|c| c.body.contains("cluster Converged"))
    })
    .await;
    let metrics = controller.metrics().await;
    assert!(
        metrics.contains("tagpin_promotions_total{stage=\"production\",gate=\"open\"}"),
        "{metrics}"
    );
    let (code, log) = controller.stop().await;
    assert_eq!(code, Some(0), "{log}");
    github.assert_no_violations();
    staging.assert_no_writes();
    production.assert_no_writes();
}

/// A pull-request-mode controller verifying against a local Kubernetes API server, whose
/// first pass opened tagpin's pull request #1 (Progressing: the cluster runs the tag).
struct PrModeWorld {
    registry: TestRegistry,
    /// What `acme/web:1.0` was when the controller started.
    pushed: support::registry::ImageDigests,
    repo: BareRepo,
    github: support::github::GitHubServer,
    kube: support::kube::KubeServer,
    dir: tempfile::TempDir,
    controller: Controller,
}

/// A local GitHub serving `repo` as `acme/gitops` and accepting `token`, a cluster, and a
/// pull-request-mode `tagpin.yaml` for them (plus the `extra` YAML lines) in a new directory.
/// Returns them and the config's path.
async fn pr_mode_world(repo: &BareRepo, host: &str, token: &str, extra: &str) -> ForgeWorld {
    forge_world(repo, host, token, "pull-request", extra).await
}

/// A GitHub server, an API server, the test's directory and its configuration file.
pub(crate) type ForgeWorld = (
    support::github::GitHubServer,
    support::kube::KubeServer,
    tempfile::TempDir,
    PathBuf,
);

/// A GitHub server for `repo`, an empty API server, and a configuration for `mode` naming
/// both, with `extra` configuration lines.
pub(crate) async fn forge_world(
    repo: &BareRepo,
    host: &str,
    token: &str,
    mode: &str,
    extra: &str,
) -> ForgeWorld {
    let github = support::github::GitHubServer::start(token, "acme", "gitops", repo.path()).await;
    let kube = support::kube::KubeServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tagpin.yaml");
    std::fs::write(
        &config,
        format!(
            "repository: {{url: '{}', branch: main}}\npaths: [apps]\nmode: {mode}\n\
             {extra}\
             registries: {{insecure: ['{host}']}}\nverify: {{default_namespace: shop}}\n\
             forge: {{api_url: '{}', owner: acme, repo: gitops, token_env: GH_TOKEN}}\n",
            repo.file_url(),
            github.api_url()
        ),
    )
    .unwrap();
    (github, kube, dir, config)
}

/// `tagpin run` on a [`pr_mode_world`]: `kube`'s kubeconfig written in `dir`, `token` for
/// GitHub.
async fn pr_mode_controller(
    dir: &std::path::Path,
    config: &PathBuf,
    kube: &support::kube::KubeServer,
    token: &str,
) -> Controller {
    let kubeconfig = kube.kubeconfig(dir);
    let kubeconfig = kubeconfig.to_str().unwrap().to_string();
    Controller::start_with(
        dir,
        config,
        &[("KUBECONFIG", kubeconfig.as_str()), ("GH_TOKEN", token)],
    )
    .await
}

impl PrModeWorld {
    async fn start(token: &str) -> PrModeWorld {
        use support::kube::deployment as live_deployment;
        let registry = TestRegistry::start(Mode::Plain).await;
        let host = registry.host();
        let pushed = registry.push_image("acme/web", "1.0", "one").await;
        let repo = BareRepo::create(&[(
            "apps/web.yaml",
            &deployment("web", &format!("{host}/acme/web:1.0")),
        )]);
        let (github, kube, dir, config) = pr_mode_world(&repo, &host, token, "").await;
        // The workload already runs the tag, unpinned, as before tagpin.
        kube.apply(live_deployment(
            "shop",
            "web",
            &[("app", "web")],
            &[("app", &format!("{host}/acme/web:1.0"))],
        ));
        let controller = pr_mode_controller(dir.path(), &config, &kube, token).await;
        assert_eq!(github.prs().len(), 1, "the first pass opened the PR");
        PrModeWorld {
            registry,
            pushed,
            repo,
            github,
            kube,
            dir,
            controller,
        }
    }

    /// Indexes into the request log where a verification cycle starts: its list of open pull
    /// requests into main (a sync pass lists by `head=`, and not first).
    fn cycle_starts(&self) -> Vec<usize> {
        self.github
            .requests()
            .iter()
            .enumerate()
            .filter(|(_, r)| {
                r.method == "GET"
                    && r.path == "/repos/acme/gitops/pulls"
                    && r.query
                        .as_deref()
                        .is_some_and(|q| !q.contains("head=") && !q.contains("state=closed"))
            })
            .map(|(i, _)| i)
            .collect()
    }

    /// Waits until `n` more verification cycles have started.
    async fn cycles(&self, n: usize) {
        let before = self.cycle_starts().len();
        eventually("verification cycles", || {
            self.cycle_starts().len() >= before + n
        })
        .await;
    }
}

#[tokio::test]
async fn a_pull_request_from_a_fork_is_not_verified_nor_answered() {
    let w = PrModeWorld::start("ghs_fork_token").await;
    let ours = w.github.prs()[0].clone();
    // An outsider forks the repository and opens a pull request from a branch named like
    // tagpin's, whose body is a plan block of its choosing (here, tagpin's own, copied).
    let main = w.repo.head("main").unwrap();
    let fork = w.github.open_outsider_fork_pr(
        &main,
        "Pin 1 image(s) to digests",
        ours.body.as_deref().unwrap(),
    );
    w.cycles(3).await;

    assert!(
        w.github.comments(fork).is_empty(),
        "{:?}",
        w.github.comments(fork)
    );
    assert!(
        w.github.statuses(&main).is_empty(),
        "{:?}",
        w.github.statuses(&main)
    );
    let fork_reads: Vec<_> = w
        .github
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with(&format!("/pulls/{fork}")))
        .collect();
    assert!(fork_reads.is_empty(), "{fork_reads:?}");
    // tagpin's own pull request is verified as before.
    assert!(w
        .github
        .statuses(&ours.head_sha)
        .iter()
        .any(|s| s.context == "tagpin/converged"));
    let (code, log) = w.controller.stop().await;
    assert_eq!(code, Some(0), "{log}");
    assert_eq!(
        log.matches(&format!("pull request #{fork} is not verified"))
            .count(),
        1,
        "said once: {log}"
    );
    assert!(log.contains("in a fork"), "{log}");
    w.github.assert_no_violations();
    drop(w.dir);
}

#[tokio::test]
async fn a_verify_cycle_of_ten_open_pull_requests_spends_almost_no_rate_limit() {
    let w = PrModeWorld::start("ghs_cycle_token").await;
    let ours = w.github.prs()[0].clone();
    // Nine more open tagpin pull requests, each on its own branch, all still Progressing
    // (waiting for review: the cluster does not run their pins).
    for i in 2..=10 {
        let branch = format!("tagpin/extra-{i}");
        support::git::git_ok(
            w.repo.path(),
            &[
                "update-ref",
                &format!("refs/heads/{branch}"),
                &ours.head_sha,
            ],
        );
        w.github.open_pr_as(
            support::github::TOKEN_USER_LOGIN,
            None,
            &branch,
            &ours.head_sha,
            "main",
            &ours.title,
            ours.body.as_deref().unwrap(),
        );
    }
    // Let every pull request get its first verdict and comment (a comment changes the pull
    // request, so the cycle after it reads it in full once), then measure a whole cycle.
    w.cycles(4).await;
    let starts = w.cycle_starts();
    let from = starts[starts.len() - 2];
    let to = starts[starts.len() - 1];
    let cycle: Vec<_> = w.github.requests()[from..to].to_vec();
    let counted = cycle.iter().filter(|r| r.status != 304).count();
    eprintln!(
        "one verification cycle, 10 open pull requests: {} GitHub requests, {} counted against the rate limit (the rest 304)",
        cycle.len(),
        counted
    );
    let shown: Vec<String> = cycle
        .iter()
        .map(|r| format!("{} {} {}", r.method, r.path, r.status))
        .collect();
    assert!(counted <= 2, "{counted} counted:\n{}", shown.join("\n"));
    assert!(cycle.len() <= 14, "{}", shown.join("\n"));
    // Every pull request is still verified: each has tagpin's pending verdict.
    for pr in w.github.prs() {
        assert!(
            w.github
                .has_status(&pr.head_sha, "tagpin/converged", "pending"),
            "#{}",
            pr.number
        );
    }
    let (code, log) = w.controller.stop().await;
    assert_eq!(code, Some(0), "{log}");
    w.github.assert_no_violations();
}

impl Controller {
    /// Sends SIGTERM and waits at most `bound` for the exit; returns the exit code, the log and
    /// how long it took. Panics, with what was logged so far unknown, if it is still running.
    async fn stop_within(mut self, bound: Duration) -> (Option<i32>, String, Duration) {
        let pid = self.child.id().expect("running") as i32;
        let sent = Instant::now();
        std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .unwrap();
        let status = tokio::time::timeout(bound, self.child.wait()).await;
        let took = sent.elapsed();
        let Ok(status) = status else {
            let _ = self.child.kill().await;
            panic!("tagpin run still running {bound:?} after SIGTERM");
        };
        let mut log = String::new();
        if let Some(mut stderr) = self.child.stderr.take() {
            use tokio::io::AsyncReadExt;
            let _ = stderr.read_to_string(&mut log).await;
        }
        (status.unwrap().code(), log, took)
    }

    async fn healthz(&self) -> (u16, String) {
        let r = self
            .http
            .get(format!("{}/healthz", self.base))
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    }
}

/// What a controller started by [`controller_on_a_hung_api_server`] works on; kept alive
/// with it.
struct HungWorld {
    _registry: TestRegistry,
    _repo: BareRepo,
    kube: support::kube::KubeServer,
    _dir: tempfile::TempDir,
}

/// `tagpin run` with `args` in commit mode, with a Kubernetes API server that accepts every
/// request and never answers: the first pass pins, then the verification of the tip hangs.
async fn controller_on_a_hung_api_server(args: &[&str]) -> (Controller, HungWorld) {
    let (registry, host, repo) = web_one_registry_and_repo().await;
    let kube = support::kube::KubeServer::start().await;
    kube.hang("");
    let dir = tempfile::tempdir().unwrap();
    let config = commit_mode_config(dir.path(), &repo, &host);
    let kubeconfig = kube.kubeconfig(dir.path());
    let controller = Controller::start_with_args(
        dir.path(),
        &config,
        &[("KUBECONFIG", kubeconfig.to_str().unwrap())],
        args,
    )
    .await;
    let world = HungWorld {
        _registry: registry,
        _repo: repo,
        kube,
        _dir: dir,
    };
    (controller, world)
}

#[tokio::test]
async fn sigterm_while_a_verification_hangs_stops_within_the_grace_period() {
    // The API server's silence would hold a request for ten minutes: only the grace period
    // can end the verification.
    let (controller, world) = controller_on_a_hung_api_server(&[
        "--interval",
        "1h",
        "--grace-period",
        "2s",
        "--kube-timeout",
        "600",
    ])
    .await;
    let kube = &world.kube;
    eventually("the verification to be waiting on the API server", || {
        !kube.hung_requests().is_empty()
    })
    .await;

    let (code, log, took) = controller.stop_within(Duration::from_secs(20)).await;

    assert_eq!(code, Some(0), "{log}");
    assert!(took < Duration::from_secs(10), "took {took:?}\n{log}");
    assert!(
        log.contains("stopped during a verification after the 2s grace period"),
        "{log}"
    );
}

#[tokio::test]
async fn healthz_fails_once_the_loop_has_finished_nothing_for_three_intervals() {
    // A pass every second: three seconds without a finished pass or verification is stuck.
    let (controller, world) = controller_on_a_hung_api_server(&[
        "--interval",
        "1s",
        "--grace-period",
        "0s",
        "--kube-timeout",
        "600",
    ])
    .await;
    let kube = &world.kube;
    // Ready: the first pass just finished.
    assert_eq!(controller.healthz().await.0, 200);

    let deadline = Instant::now() + Duration::from_secs(30);
    let (status, body) = loop {
        let (status, body) = controller.healthz().await;
        if status != 200 || Instant::now() >= deadline {
            break (status, body);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };

    assert_eq!(status, 503, "{body}");
    assert!(body.contains("limit 3s"), "{body}");
    assert!(!kube.hung_requests().is_empty());
    let (code, log, _) = controller.stop_within(Duration::from_secs(20)).await;
    assert_eq!(code, Some(0), "{log}");
}

#[tokio::test]
async fn a_pull_request_that_lost_its_plan_block_does_not_stop_the_others_verification() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let names = ["api", "web", "worker"];
    let mut files = Vec::new();
    let mut pushed = Vec::new();
    for name in names {
        pushed.push(
            registry
                .push_image(&format!("acme/{name}"), "1", name)
                .await,
        );
        files.push((
            format!("apps/{name}.yaml"),
            deployment(name, &format!("{host}/acme/{name}:1")),
        ));
    }
    let files: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, c)| (p.as_str(), c.as_str()))
        .collect();
    let repo = BareRepo::create(&files);
    let (github, kube, dir, config) = pr_mode_world(
        &repo,
        &host,
        "ghs_three_prs",
        "pull_request: {grouping: per-image}\n",
    )
    .await;
    // The workloads already run the tags, unpinned, as before tagpin: Progressing, not final.
    for (name, image) in names.iter().zip(&pushed) {
        runs(
            &kube,
            name,
            &format!("{host}/acme/{name}:1"),
            &format!("{host}/acme/{name}@{}", image.manifest),
            &format!("{name}-1"),
        );
    }
    let controller = pr_mode_controller(dir.path(), &config, &kube, "ghs_three_prs").await;
    let prs = github.prs();
    assert_eq!(prs.len(), 3, "one pull request per image");

    // Someone rewrites the middle pull request's description, plan block and all. Whichever
    // order the pull requests are listed in, one of the others comes after it.
    let broken = prs.iter().find(|p| p.number == 2).unwrap();
    let edited = reqwest::Client::new()
        .patch(format!("{}/repos/acme/gitops/pulls/2", github.api_url()))
        .bearer_auth("ghs_three_prs")
        .header("user-agent", "a-person")
        .json(&serde_json::json!({"body": "Bumps the image. (Description rewritten by hand.)"}))
        .send()
        .await
        .unwrap();
    assert!(edited.status().is_success(), "{}", edited.status());
    // A round that read the edited body has ended (the next one lists the pull requests
    // again); only then does the cluster run every pin, so no round that began before the
    // edit can see them converge.
    eventually("a whole verification round after the edit", || {
        let requests = github.requests();
        let is = |r: &support::github::RecordedRequest, method: &str, end: &str| {
            r.method == method && r.path.ends_with(end)
        };
        let Some(edit) = requests.iter().position(|r| is(r, "PATCH", "/pulls/2")) else {
            return false;
        };
        let after = &requests[edit + 1..];
        after
            .iter()
            .position(|r| is(r, "GET", "/pulls/2"))
            .is_some_and(|read| after[read + 1..].iter().any(|r| is(r, "GET", "/pulls")))
    })
    .await;
    for (name, image) in names.iter().zip(&pushed) {
        runs(
            &kube,
            name,
            &format!("{host}/acme/{name}:1@{}", image.manifest),
            &format!("{host}/acme/{name}@{}", image.manifest),
            &format!("{name}-1"),
        );
    }

    let others: Vec<_> = prs.iter().filter(|p| p.number != 2).collect();
    let converged = eventually_or("success on the two intact pull requests", || {
        others
            .iter()
            .all(|pr| github.has_status(&pr.head_sha, "tagpin/converged", "success"))
    })
    .await;
    let metrics = controller.metrics().await;
    let (_, log, _) = controller.stop_within(Duration::from_secs(60)).await;
    assert!(converged, "{log}");
    assert!(
        !github
            .statuses(&broken.head_sha)
            .iter()
            .any(|s| s.state == "success"),
        "nothing to verify the edited one against"
    );
    assert!(
        metrics.contains("tagpin_verification_errors_total{kind=\"no_plan_block\"}"),
        "{metrics}"
    );
    assert!(
        log.contains("pull request #2 has no tagpin plan block"),
        "{log}"
    );
    github.assert_no_violations();
    kube.assert_no_writes();
}

// --- the HTTP side against slow and numerous clients -----------------------------------------

/// `tagpin::server::serve` on a loopback port with `limits`, as `tagpin run` serves it; the
/// sender stops it.
async fn http_side(
    limits: tagpin::server::HttpLimits,
) -> (
    std::net::SocketAddr,
    tokio::sync::watch::Sender<bool>,
    tokio::task::JoinHandle<()>,
) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shared = tagpin::server::Shared::new(Some(SECRET.to_string()), Duration::from_secs(3600));
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let server = tokio::spawn(tagpin::server::serve(
        listener,
        shared,
        stopped,
        limits,
        tagpin::server::Routes::All,
    ));
    (addr, stop, server)
}

fn short_limits() -> tagpin::server::HttpLimits {
    tagpin::server::HttpLimits {
        header_timeout: Duration::from_millis(500),
        request_timeout: Duration::from_secs(1),
        max_connections: 8,
        drain: Duration::from_secs(1),
    }
}

/// Everything the server sends on `stream` until it closes it (or 15 s pass: then `None`).
/// A connection to `addr` on which `bytes` have been sent (a request, or the start of one).
async fn sent(addr: impl tokio::net::ToSocketAddrs, bytes: &[u8]) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(bytes).await.unwrap();
    stream
}

async fn read_until_closed(stream: &mut tokio::net::TcpStream) -> Option<String> {
    use tokio::io::AsyncReadExt;
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(15), stream.read_to_end(&mut answer));
    match read.await {
        Ok(_) => Some(String::from_utf8_lossy(&answer).into_owned()),
        Err(_) => None,
    }
}

#[tokio::test]
async fn a_half_sent_header_and_a_body_trickled_byte_by_byte_are_cut_off() {
    use tokio::io::AsyncWriteExt;
    let (addr, _stop, _server) = http_side(short_limits()).await;

    let mut half = sent(addr, b"GET /healthz HTTP/1.1\r\nHost: tagpin\r\n").await;
    let cut = read_until_closed(&mut half).await;
    assert!(cut.is_some(), "a half-sent header holds its connection");

    // Authenticated, then a byte at a time: the whole request has a deadline.
    let head = format!(
        "POST /webhooks/distribution HTTP/1.1\r\nHost: tagpin\r\nAuthorization: Bearer {SECRET}\r\nContent-Length: 1000\r\n\r\n"
    );
    let slow = sent(addr, head.as_bytes()).await;
    let (mut reader, mut writer) = slow.into_split();
    let trickle = tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        for _ in 0..1000 {
            tick.tick().await;
            if writer.write_all(b"{").await.is_err() {
                return;
            }
        }
    });
    let mut answer = Vec::new();
    use tokio::io::AsyncReadExt;
    let read = tokio::time::timeout(Duration::from_secs(15), reader.read_to_end(&mut answer));
    let answered = read.await.is_ok();
    trickle.abort();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answered, "a trickled body holds its connection");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
}

#[tokio::test]
async fn a_wrong_shared_secret_is_refused_before_the_body_is_sent() {
    let (addr, _stop, _server) = http_side(short_limits()).await;
    // Announces a whole MiB and sends none of it: the answer must not wait for it. (With
    // the request deadline of 1 s, a body-first server answers only after it: 408.)
    let mut stream = sent(addr, b"POST /webhooks/harbor HTTP/1.1\r\nHost: tagpin\r\nAuthorization: Bearer wrong\r\nContent-Length: 1048576\r\n\r\n").await;
    let answer = read_until_closed(&mut stream).await.unwrap_or_default();
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");

    // A signed delivery needs its body, but not one over the limit.
    let mut stream = sent(addr, b"POST /webhooks/ghcr HTTP/1.1\r\nHost: tagpin\r\nX-Hub-Signature-256: sha256=00\r\nContent-Length: 2097152\r\n\r\n").await;
    let answer = read_until_closed(&mut stream).await.unwrap_or_default();
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
}

#[tokio::test]
async fn connections_beyond_the_limit_wait_unread_until_a_slot_frees() {
    let limits = tagpin::server::HttpLimits {
        max_connections: 2,
        ..short_limits()
    };
    let (addr, _stop, _server) = http_side(limits).await;
    // Two slow clients take both slots.
    let mut slow = Vec::new();
    for _ in 0..2 {
        let stream = sent(addr, b"GET /healthz HTTP/1.1\r\n").await;
        slow.push(stream);
    }
    // A third, complete request is served only once the header timeout freed a slot.
    let mut third = sent(
        addr,
        b"GET /healthz HTTP/1.1\r\nHost: tagpin\r\nConnection: close\r\n\r\n",
    )
    .await;
    let answer = read_until_closed(&mut third).await;
    let answer = answer.expect("the third connection is served in the end");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // By then the server had closed a slow one: its end is already here, read without waiting.
    let closed = slow.iter().any(|stream| {
        let mut buf = [0u8; 1024];
        loop {
            match stream.try_read(&mut buf) {
                Ok(0) => return true,
                Ok(_) => continue,
                Err(_) => return false,
            }
        }
    });
    assert!(
        closed,
        "the third connection was served while both slots were held"
    );
}

/// `--health-listen`: clients that hold every slot of the webhook port (here forever) delay
/// neither the kubelet's probes nor a scrape, served on a port of their own, which serves
/// nothing else.
#[tokio::test]
async fn probes_on_their_own_port_are_answered_while_the_webhook_port_is_full() {
    use tokio::io::AsyncWriteExt;
    let held = tagpin::server::HttpLimits {
        header_timeout: Duration::from_secs(600),
        request_timeout: Duration::from_secs(600),
        max_connections: 2,
        ..short_limits()
    };
    let webhooks = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let webhook_addr = webhooks.local_addr().unwrap();
    let probes = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let probe_addr = probes.local_addr().unwrap();
    let shared = tagpin::server::Shared::new(Some(SECRET.to_string()), Duration::from_secs(3600));
    let (_stop, stopped) = tokio::sync::watch::channel(false);
    for (listener, routes) in [
        (webhooks, tagpin::server::Routes::All),
        (probes, tagpin::server::Routes::Probes),
    ] {
        tokio::spawn(tagpin::server::serve(
            listener,
            shared.clone(),
            stopped.clone(),
            held,
            routes,
        ));
    }
    let mut slow = Vec::new();
    for _ in 0..2 {
        let stream = sent(webhook_addr, b"POST /webhooks/harbor HTTP/1.1\r\n").await;
        slow.push(stream);
    }
    let ask = |path: &'static str| async move {
        let mut stream = tokio::net::TcpStream::connect(probe_addr).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nHost: tagpin\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        read_until_closed(&mut stream)
            .await
            .expect("the probe port answers")
    };
    assert!(ask("/healthz").await.starts_with("HTTP/1.1 200"));
    assert!(ask("/metrics").await.starts_with("HTTP/1.1 200"));
    let webhook = ask("/webhooks/harbor").await;
    assert!(webhook.starts_with("HTTP/1.1 404"), "{webhook}");
}

#[tokio::test]
async fn stopping_cuts_a_half_sent_request_after_the_drain_time() {
    let limits = tagpin::server::HttpLimits {
        // Longer than the test: only the stop can end the connection.
        header_timeout: Duration::from_secs(600),
        request_timeout: Duration::from_secs(600),
        ..short_limits()
    };
    let (addr, stop, server) = http_side(limits).await;
    let mut half = sent(addr, b"POST /webhooks/harbor HTTP/1.1\r\nHost: tagpin\r\n").await;
    // The server holds the connection (a request to it is answered, so it is up).
    let mut probe = sent(
        addr,
        b"GET /readyz HTTP/1.1\r\nHost: tagpin\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(read_until_closed(&mut probe).await.is_some());

    stop.send(true).unwrap();
    let stopped = tokio::time::timeout(Duration::from_secs(10), server).await;
    assert!(stopped.is_ok(), "the server waited on a half-sent request");
    assert!(read_until_closed(&mut half).await.is_some());
}

#[tokio::test]
async fn sigterm_with_a_half_sent_request_open_exits_within_the_bound() {
    use tokio::io::AsyncWriteExt;
    let (_registry, host, repo) = web_one_registry_and_repo().await;
    let dir = tempfile::tempdir().unwrap();
    let config = commit_mode_config(dir.path(), &repo, &host);
    let controller = Controller::start(dir.path(), &config).await;
    let addr = controller.base.trim_start_matches("http://").to_string();
    let mut half = tokio::net::TcpStream::connect(&addr).await.unwrap();
    half.write_all(b"POST /webhooks/distribution HTTP/1.1\r\nHost: tagpin\r\n")
        .await
        .unwrap();

    // Nothing is under way: the HTTP side's drain (5 s) is the bound.
    let (code, log, took) = controller.stop_within(Duration::from_secs(30)).await;

    assert_eq!(code, Some(0), "{log}");
    assert!(took < Duration::from_secs(15), "took {took:?}\n{log}");
    drop(half);
}

#[tokio::test]
async fn signed_bodies_read_before_their_check_are_few_and_the_next_is_turned_away_at_once() {
    use tokio::io::AsyncWriteExt;
    let limits = tagpin::server::HttpLimits {
        request_timeout: Duration::from_secs(600),
        ..short_limits()
    };
    let (addr, _stop, _server) = http_side(limits).await;
    let head = b"POST /webhooks/ghcr HTTP/1.1\r\nHost: tagpin\r\nX-Hub-Signature-256: sha256=00\r\nContent-Length: 1000\r\n\r\n{";
    // Four deliveries nobody signed, their bodies never finished, are being read.
    let mut held = Vec::new();
    for _ in 0..4 {
        let stream = sent(addr, head).await;
        held.push(stream);
    }
    // A fifth is not read: answered at once (well before the request deadline of 600 s).
    let mut fifth = sent(addr, head).await;
    let answer = read_until_closed(&mut fifth).await.unwrap_or_default();
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    // Once one of the four is gone, a signed delivery is read (and checked) again.
    drop(held.pop());
    let body = br#"{"action":"published"}"#;
    let signed = format!(
        "POST /webhooks/ghcr HTTP/1.1\r\nHost: tagpin\r\nX-Hub-Signature-256: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        tagpin::webhook::sign("not-the-secret", body),
        body.len()
    );
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let mut stream = sent(addr, signed.as_bytes()).await;
        stream.write_all(body).await.unwrap();
        let answer = read_until_closed(&mut stream).await.unwrap_or_default();
        if answer.starts_with("HTTP/1.1 401") {
            break;
        }
        // The server may not have seen the dropped connection close yet.
        assert!(Instant::now() < deadline, "{answer}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
