//! `tagpin operator` as a shared service: teams that do not trust each other, each allowed to
//! create `PinnedRepository` objects in its own namespace and nothing else. Each test is a
//! way one tenant could hurt the others or borrow the controller's rights, run against the
//! real binary and the local API server (issue #25).

use crate::operator::{
    announced, cluster, condition, is_ready, lease_holder, pinned_repository, runs_converged, spec,
    Operator, NS,
};
use crate::support;
use crate::support::eventually;

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use serde_json::{json, Value};
use support::git::BareRepo;
use support::kube::{KubeServer, TAGPIN_SECRET};
use support::manifests::deployment;
use support::registry::{Mode, TestRegistry};

/// A registry that accepts connections and never answers a byte; counts the connections.
struct SilentRegistry {
    host: String,
    accepted: Arc<AtomicUsize>,
    _task: tokio::task::JoinHandle<()>,
}

impl SilentRegistry {
    async fn start() -> SilentRegistry {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let host = listener.local_addr().unwrap().to_string();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counted = accepted.clone();
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                held.push(socket);
            }
        });
        SilentRegistry {
            host,
            accepted,
            _task: task,
        }
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

/// A `PinnedRepository` in `namespace`.
fn object_in(namespace: &str, name: &str, spec: Value) -> Value {
    let mut object = pinned_repository(name, json!({}), spec);
    object["metadata"]["namespace"] = json!(namespace);
    object
}

/// A repository whose one Deployment runs `image`.
fn repo_running(image: &str) -> BareRepo {
    BareRepo::create(&[("apps/web.yaml", &deployment("web", image))])
}

/// A registry holding `acme/web:1.0`, a cluster with tagpin's CRD, and a repository whose one
/// Deployment runs that tag: where most tests here start. Bind `registry` even where unused
/// (`_registry`): its server stops when it is dropped.
struct WebOnOne {
    registry: TestRegistry,
    host: String,
    kube: KubeServer,
    repo: BareRepo,
}

async fn web_on_one() -> WebOnOne {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    registry.push_image("acme/web", "1.0", "one").await;
    let kube = cluster().await;
    let repo = repo_running(&format!("{host}/acme/web:1.0"));
    WebOnOne {
        registry,
        host,
        kube,
        repo,
    }
}

/// The operator's resident memory now and at its peak, in MiB, from /proc.
fn rss_mib(operator: &Operator) -> (u64, u64) {
    let pid = operator.child.id().unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib = |field: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    (kib("VmRSS:") / 1024, kib("VmHWM:") / 1024)
}

fn stalled_reason(kube: &KubeServer, name: &str) -> Option<String> {
    condition(kube, name, "Stalled").map(|c| c["reason"].as_str().unwrap_or_default().into())
}

/// Four objects of team-b whose registry never answers, each asking for an hour, used to fill
/// the operator's four reconcile slots: team-a's object waited until one of them gave up.
#[tokio::test(flavor = "multi_thread")]
async fn another_teams_object_starts_at_once_while_four_objects_of_one_team_hang() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let web = registry.push_image("acme/web", "1.0", "one").await;
    let silent = SilentRegistry::start().await;
    let kube = cluster().await;
    let mut hung = Vec::new();
    for i in 0..4u64 {
        let repo = repo_running(&format!("{}/acme/web:1.0", silent.host));
        let mut hostile = spec(&repo.file_url(), &silent.host);
        // Distinct settings: four registry clients, four connections held.
        hostile["registries"]["concurrency"] = json!(i + 1);
        hostile["registries"]["timeout_seconds"] = json!(3600);
        hostile["registries"]["budget_seconds"] = json!(3600);
        kube.apply(object_in("team-b", &format!("hang-{i}"), hostile));
        hung.push(repo);
    }
    let dir = tempfile::tempdir().unwrap();
    let operator = Operator::start(dir.path(), &kube, "op", &["--concurrent", "4"]).await;
    eventually("team-b's four reconciles hang on their registry", || {
        silent.accepted() >= 4
    })
    .await;

    let repo = repo_running(&format!("{host}/acme/web:1.0"));
    runs_converged(&kube, "web", &format!("{host}/acme/web:1.0"), &web.manifest);
    let applied = Instant::now();
    kube.apply(pinned_repository(
        "web",
        json!({}),
        spec(&repo.file_url(), &host),
    ));
    eventually("team-a's object is pinned and verified", || {
        is_ready(&kube, "web")
    })
    .await;
    let waited = applied.elapsed();
    // team-b's reconciles are still under way: team-a's did not wait for one to end.
    for i in 0..4 {
        let object = kube
            .get("PinnedRepository", "team-b", &format!("hang-{i}"))
            .unwrap();
        assert!(object["status"].is_null(), "hang-{i}: {object}");
    }
    let (rss, peak) = rss_mib(&operator);
    eprintln!(
        "with 4 hanging objects in team-b, team-a's object was Ready {waited:?} after it was \
         created; operator RSS {rss} MiB (peak {peak} MiB)"
    );
    operator.stop().await;
}

/// After SIGTERM the operator used to wait for every reconcile under way, however long, still
/// renewing its Lease: it now gives them `--grace-period`, releases the Lease and exits.
#[tokio::test(flavor = "multi_thread")]
async fn sigterm_ends_a_hung_reconcile_after_the_grace_period_and_releases_the_lease() {
    let silent = SilentRegistry::start().await;
    let kube = cluster().await;
    let repo = repo_running(&format!("{}/acme/web:1.0", silent.host));
    let mut hostile = spec(&repo.file_url(), &silent.host);
    hostile["registries"]["timeout_seconds"] = json!(3600);
    hostile["registries"]["budget_seconds"] = json!(3600);
    kube.apply(pinned_repository("hang", json!({}), hostile));
    let dir = tempfile::tempdir().unwrap();
    let operator = Operator::start(
        dir.path(),
        &kube,
        "op",
        &[
            "--grace-period",
            "2s",
            "--leader-elect",
            "--leader-elect-lease-duration",
            "15s",
        ],
    )
    .await;
    eventually("the reconcile hangs while op leads", || {
        silent.accepted() >= 1 && lease_holder(&kube).starts_with("op")
    })
    .await;
    let signalled = Instant::now();
    // `terminate` fails the test if the process is still there a minute later.
    let log = operator.stop().await;
    eprintln!("operator exited {:?} after SIGTERM", signalled.elapsed());
    assert!(log.contains("grace period"), "{log}");
    // The abandoned reconcile is dropped with the process, not woken into a runtime that is
    // shutting down (which panicked: "A Tokio 1.x context was found, but it is being shutdown").
    assert!(!log.contains("panicked"), "{log}");
    assert_eq!(lease_holder(&kube), "", "the Lease is released");
}

/// The controller's own `--docker-config` login served every object that named no Docker
/// config of its own: a tenant could pin a private image it has no right to.
#[tokio::test(flavor = "multi_thread")]
async fn the_controllers_registry_credentials_serve_a_tenant_only_for_registries_shared_with_it() {
    let registry = TestRegistry::start(Mode::htpasswd("puller", "s3cret")).await;
    let host = registry.host();
    let private = registry.push_image("acme/private", "1.0", "one").await;
    let kube = cluster().await;
    let repo = BareRepo::create(&[(
        "apps/web.yaml",
        &deployment("web", &format!("{host}/acme/private:1.0")),
    )]);
    kube.apply(pinned_repository(
        "web",
        json!({}),
        spec(&repo.file_url(), &host),
    ));
    let dir = tempfile::tempdir().unwrap();
    let docker = dir.path().join("docker");
    std::fs::create_dir_all(&docker).unwrap();
    std::fs::write(
        docker.join("config.json"),
        json!({"auths": {host.as_str(): {"username": "puller", "password": "s3cret"}}}).to_string(),
    )
    .unwrap();
    let docker = docker.to_str().unwrap();

    let operator = Operator::start(dir.path(), &kube, "op-1", &["--docker-config", docker]).await;
    eventually("the object reports its image failing", || {
        condition(&kube, "web", "Reconciling").is_some_and(|c| c["reason"] == "PartiallyPinned")
    })
    .await;
    let message = condition(&kube, "web", "Ready").unwrap()["message"].clone();
    let message = message.as_str().unwrap();
    assert!(
        message.contains(&host) && message.contains("requires credentials"),
        "{message}"
    );
    assert_eq!(repo.log("main").len(), 1, "nothing pinned");
    operator.stop().await;

    // The platform shares its login for this registry: now it serves the tenant.
    let operator = Operator::start(
        dir.path(),
        &kube,
        "op-2",
        &[
            "--docker-config",
            docker,
            "--share-registry-credentials",
            &host,
        ],
    )
    .await;
    eventually("pinned with the shared credentials", || {
        repo.read("main", "apps/web.yaml")
            .unwrap()
            .contains(&private.manifest)
    })
    .await;
    operator.stop().await;
}

/// A spec could name any Secret of its namespace and have its keys sent, as a Git password or
/// a forge token, wherever the spec says: only Secrets labelled for tagpin are read now.
#[tokio::test(flavor = "multi_thread")]
async fn a_secret_not_labelled_for_tagpin_is_not_read() {
    let WebOnOne {
        registry: _registry,
        host,
        kube,
        repo,
    } = web_on_one().await;
    kube.apply(support::kube::secret(
        NS,
        "database",
        &[("app", "db")],
        &[("password", "db-password-7f3a")],
    ));
    let mut borrowing = spec(&repo.file_url(), &host);
    borrowing["secret_ref"] = json!({"name": "database"});
    borrowing["repository"]["auth"] = json!({"token_env": "password"});
    kube.apply(pinned_repository("web", json!({}), borrowing));
    let dir = tempfile::tempdir().unwrap();
    let operator = Operator::start(dir.path(), &kube, "op", &[]).await;
    eventually("the object stalls", || {
        stalled_reason(&kube, "web").is_some()
    })
    .await;
    assert_eq!(
        stalled_reason(&kube, "web").as_deref(),
        Some("SecretNotLabelled")
    );
    let message = condition(&kube, "web", "Stalled").unwrap()["message"].clone();
    assert_eq!(
        message,
        format!(
            "Secret {NS}/database is not labelled tagpin.dev/secret-type=credentials; tagpin \
             reads only the Secrets labelled for it"
        )
    );
    assert_eq!(repo.log("main").len(), 1, "nothing fetched nor pinned");
    let log = operator.stop().await;
    assert!(!log.contains("db-password-7f3a"));
}

/// Each distinct `registries:` setting kept a registry client for ever (29 → 318 MB after
/// 2,000 edits): at most 64 are kept now.
#[tokio::test(flavor = "multi_thread")]
async fn registry_clients_stay_bounded_however_many_settings_a_tenant_writes() {
    let WebOnOne {
        registry: _registry,
        host,
        kube,
        repo,
    } = web_on_one().await;
    let dir = tempfile::tempdir().unwrap();
    let operator = Operator::start(dir.path(), &kube, "op", &[]).await;
    let observed = |kube: &KubeServer| {
        kube.get("PinnedRepository", NS, "web")
            .is_some_and(|o| o["status"]["observedGeneration"] == o["metadata"]["generation"])
    };
    for seconds in 1..=70 {
        let mut edited = spec(&repo.file_url(), &host);
        edited["registries"]["timeout_seconds"] = json!(seconds);
        kube.apply(pinned_repository("web", json!({}), edited));
        eventually("the edit is reconciled", || observed(&kube)).await;
    }
    let clients = operator.metric("tagpin_registry_clients").await;
    assert_eq!(clients, Some(64), "at most 64 registry clients kept");
    let (rss, peak) = rss_mib(&operator);
    eprintln!("after 70 distinct registry settings: RSS {rss} MiB (peak {peak} MiB)");
    operator.stop().await;
}

fn mirror_dir(dir: &Path, operator: &str, name: &str) -> std::path::PathBuf {
    dir.join(format!("cache-{operator}")).join(NS).join(name)
}

/// Mirrors of deleted objects stayed on the controller's disk for ever.
#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_objects_mirror_is_removed_even_when_deleted_while_the_operator_was_down() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    registry.push_image("acme/web", "1.0", "one").await;
    let kube = cluster().await;
    let repos: Vec<BareRepo> = (0..2)
        .map(|_| repo_running(&format!("{host}/acme/web:1.0")))
        .collect();
    for (name, repo) in ["web", "api"].iter().zip(&repos) {
        kube.apply(pinned_repository(
            name,
            json!({}),
            spec(&repo.file_url(), &host),
        ));
    }
    let dir = tempfile::tempdir().unwrap();
    let pinned = |name: &str| {
        kube.get("PinnedRepository", NS, name)
            .is_some_and(|o| o["status"]["lastPin"]["commit"].is_string())
    };
    let operator = Operator::start(dir.path(), &kube, "op", &[]).await;
    eventually("both pinned", || pinned("web") && pinned("api")).await;
    assert!(mirror_dir(dir.path(), "op", "web").exists());
    assert!(mirror_dir(dir.path(), "op", "api").exists());
    assert!(kube.delete("PinnedRepository", NS, "web"));
    eventually("web's mirror is removed", || {
        !mirror_dir(dir.path(), "op", "web").exists()
    })
    .await;
    operator.stop().await;

    // Deleted while no operator ran: removed when the next one lists the objects.
    assert!(kube.delete("PinnedRepository", NS, "api"));
    assert!(mirror_dir(dir.path(), "op", "api").exists());
    let operator = Operator::start(dir.path(), &kube, "op", &[]).await;
    eventually("api's mirror is removed", || {
        !mirror_dir(dir.path(), "op", "api").exists()
    })
    .await;
    operator.stop().await;
}

/// A repository's size was not capped: a tenant could fill the controller's disk.
#[tokio::test(flavor = "multi_thread")]
async fn a_repository_over_the_size_limit_is_refused_with_its_size() {
    use sha2::{Digest as _, Sha256};
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    registry.push_image("acme/web", "1.0", "one").await;
    let kube = cluster().await;
    // About 1 MiB once compressed: hex of a hash chain does not compress below half.
    let mut noise = String::new();
    let mut block = Sha256::digest(b"seed").to_vec();
    while noise.len() < 2 << 20 {
        block = Sha256::digest(&block).to_vec();
        noise.extend(block.iter().map(|b| format!("{b:02x}")));
    }
    let repo = BareRepo::create(&[
        (
            "apps/web.yaml",
            &deployment("web", &format!("{host}/acme/web:1.0")),
        ),
        ("blob.txt", &noise),
    ]);
    kube.apply(pinned_repository(
        "big",
        json!({}),
        spec(&repo.file_url(), &host),
    ));
    let dir = tempfile::tempdir().unwrap();
    let operator = Operator::start(
        dir.path(),
        &kube,
        "op",
        &["--max-repository-size", "256KiB"],
    )
    .await;
    eventually("the object stalls", || {
        stalled_reason(&kube, "big").is_some()
    })
    .await;
    assert_eq!(
        stalled_reason(&kube, "big").as_deref(),
        Some("RepositoryTooLarge")
    );
    let message = condition(&kube, "big", "Stalled").unwrap()["message"].clone();
    let message = message.as_str().unwrap();
    assert!(
        message.contains("the repository is larger than the 256 KiB limit ("),
        "{message}"
    );
    assert!(
        message.contains("MiB fetched so far); refused"),
        "{message}"
    );
    // What was fetched is not kept.
    let objects: u64 = walkdir::WalkDir::new(mirror_dir(dir.path(), "op", "big"))
        .into_iter()
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum();
    assert!(objects < 256 << 10, "{objects} bytes kept");
    assert_eq!(repo.log("main").len(), 1);
    operator.stop().await;
}

/// The event recorder folded a second `Pinned` Event into the first (same type, reason and
/// object): the new commit appeared in no Event.
#[tokio::test(flavor = "multi_thread")]
async fn every_pin_is_announced_in_an_event_of_its_own() {
    let WebOnOne {
        registry,
        host,
        kube,
        repo,
    } = web_on_one().await;
    kube.apply(pinned_repository(
        "web",
        json!({}),
        spec(&repo.file_url(), &host),
    ));
    let dir = tempfile::tempdir().unwrap();
    let operator = Operator::start(dir.path(), &kube, "op", &[]).await;
    eventually("first pin", || repo.log("main").len() == 2).await;
    let first = repo.head("main").unwrap();
    // The tag moves; an edit of the spec brings the object back at once (with registry
    // settings of its own, so that no answer of this interval is reused).
    registry.push_image("acme/web", "1.0", "two").await;
    let mut edited = spec(&repo.file_url(), &host);
    edited["registries"]["timeout_seconds"] = json!(29);
    kube.apply(pinned_repository("web", json!({}), edited));
    eventually("second pin", || repo.log("main").len() == 3).await;
    let second = repo.head("main").unwrap();
    eventually("both announced", || {
        announced(&kube, "web")
            .iter()
            .filter(|(reason, _, _)| reason == "Pinned")
            .count()
            == 2
    })
    .await;
    let pins: Vec<_> = announced(&kube, "web")
        .into_iter()
        .filter(|(reason, _, _)| reason == "Pinned")
        .collect();
    assert!(pins[0].1.contains(&first), "{pins:?}");
    assert!(pins[1].1.contains(&second), "{pins:?}");
    assert!(pins.iter().all(|(_, _, count)| *count == 1), "{pins:?}");
    operator.stop().await;
}

/// Every pass wrote the status to refresh `verdict.time`: each object's resourceVersion moved
/// at every pass and every watcher woke.
#[tokio::test(flavor = "multi_thread")]
async fn a_pass_that_finds_everything_as_it_was_writes_nothing() {
    let WebOnOne {
        registry: _registry,
        host,
        kube,
        repo,
    } = web_on_one().await;
    kube.apply(pinned_repository(
        "web",
        json!({}),
        spec(&repo.file_url(), &host),
    ));
    let dir = tempfile::tempdir().unwrap();
    // The workload is never created: the young pin is awaited, and the object passes again
    // every --verify-interval (1s), finding the same each time.
    let operator = Operator::start(dir.path(), &kube, "op", &[]).await;
    eventually("pinned and awaiting the GitOps tool", || {
        condition(&kube, "web", "Reconciling").is_some_and(|c| c["reason"] == "AwaitingSync")
    })
    .await;
    let writes = kube.request_count("patch", "pinnedrepositories/status");
    let version =
        kube.get("PinnedRepository", NS, "web").unwrap()["metadata"]["resourceVersion"].clone();
    for _ in 0..3 {
        let before = operator.reconciled_at("web").await;
        support::eventually_async("another pass", || async {
            operator.reconciled_at("web").await > before
        })
        .await;
    }
    assert_eq!(
        kube.request_count("patch", "pinnedrepositories/status"),
        writes
    );
    assert_eq!(
        kube.get("PinnedRepository", NS, "web").unwrap()["metadata"]["resourceVersion"],
        version
    );
    operator.stop().await;
}

/// A leader that died between its push and its status write left `status.lastPin` on the
/// previous commit for ever: the next leader found nothing to commit.
#[tokio::test(flavor = "multi_thread")]
async fn a_pin_pushed_by_a_leader_that_died_before_its_status_write_is_read_back_from_git() {
    let WebOnOne {
        registry: _registry,
        host,
        kube,
        repo,
    } = web_on_one().await;
    kube.apply(pinned_repository(
        "web",
        json!({}),
        spec(&repo.file_url(), &host),
    ));
    // The first leader pushes, then cannot write the status, and is killed.
    kube.deny("patch", "pinnedrepositories/status", Some(NS));
    let dir = tempfile::tempdir().unwrap();
    let first = Operator::start(dir.path(), &kube, "op-1", &[]).await;
    eventually("op-1 pushed its pin", || repo.log("main").len() == 2).await;
    let pin = repo.head("main").unwrap();
    eventually("op-1 tried to record it", || {
        kube.requests()
            .iter()
            .any(|r| r.resource == "pinnedrepositories/status" && r.status == 403)
    })
    .await;
    let pid = first.child.id().unwrap().to_string();
    std::process::Command::new("kill")
        .args(["-KILL", &pid])
        .status()
        .unwrap();
    kube.take_writes();
    kube.lift_denials();
    assert!(kube.get("PinnedRepository", NS, "web").unwrap()["status"]["lastPin"].is_null());

    let second = Operator::start(dir.path(), &kube, "op-2", &[]).await;
    eventually("op-2 records the pin op-1 pushed", || {
        kube.get("PinnedRepository", NS, "web").unwrap()["status"]["lastPin"]["commit"] == pin
    })
    .await;
    let object = kube.get("PinnedRepository", NS, "web").unwrap();
    assert_eq!(object["status"]["lastPin"]["images"], 1);
    assert_eq!(repo.log("main").len(), 2, "nothing committed twice");
    eventually("op-2 announces the pin op-1 pushed", || {
        announced(&kube, "web")
            .iter()
            .any(|(reason, note, _)| reason == "Pinned" && note.contains(&pin))
    })
    .await;
    second.stop().await;
}

/// Status and Events said "pull request #N" to GitLab users.
#[tokio::test(flavor = "multi_thread")]
async fn a_gitlab_object_speaks_of_merge_requests() {
    use support::gitlab::GitLabServer;
    let WebOnOne {
        registry: _registry,
        host,
        kube,
        repo,
    } = web_on_one().await;
    let gitlab = GitLabServer::start("gl-token", "tagpin-bot", "acme/gitops", repo.path()).await;
    kube.apply(support::kube::secret(
        NS,
        "forge",
        &[TAGPIN_SECRET],
        &[("GITLAB_TOKEN", "gl-token")],
    ));
    let mut proposed = spec(&repo.file_url(), &host);
    proposed["mode"] = json!("pull-request");
    proposed["secret_ref"] = json!({"name": "forge"});
    proposed["forge"] = json!({"kind": "gitlab", "api_url": gitlab.api_url(),
                               "project": "acme/gitops", "token_env": "GITLAB_TOKEN"});
    kube.apply(pinned_repository("web", json!({}), proposed));
    let dir = tempfile::tempdir().unwrap();
    let operator = Operator::start(dir.path(), &kube, "op", &[]).await;
    eventually("the merge request is open", || {
        kube.get("PinnedRepository", NS, "web")
            .is_some_and(|o| o["status"]["pullRequest"]["number"] == 1)
    })
    .await;
    let object = kube.get("PinnedRepository", NS, "web").unwrap();
    assert_eq!(object["status"]["verdict"]["source"], "merge request !1");
    let message = condition(&kube, "web", "Ready").unwrap()["message"].clone();
    assert!(
        message
            .as_str()
            .unwrap()
            .starts_with("pins proposed in merge request !1 for main"),
        "{message}"
    );
    // The Event is published after the status write that reports the merge request.
    eventually("the opening is announced in merge request words", || {
        announced(&kube, "web").iter().any(|(reason, note, _)| {
            reason == "PullRequestOpened"
                && note.starts_with("opened merge request !1 from tagpin/main")
        })
    })
    .await;
    operator.stop().await;
}
