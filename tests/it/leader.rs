//! `tagpin run --leader-elect`: two real controller processes against the local Kubernetes
//! API server (for the Lease), a real bare Git repository and a real registry. Only the
//! leader pushes; a killed leader is replaced within the lease duration, a stopped one at
//! once, and a leader that loses its Lease stops and exits non-zero.

use crate::run::commit_mode_config;
use crate::support;
use crate::support::eventually_async;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use support::git::BareRepo;
use support::kube::{Grant, KubeServer};
use support::manifests::deployment;
use support::registry::{free_port, Mode, TestRegistry};
use tokio::process::{Child, Command};

const NAMESPACE: &str = "tagpin";
const LEASE: &str = "tagpin-leader";

/// Lease timings for a test: (lease duration, renew deadline, retry period).
struct Timings {
    lease: Duration,
    renew: Duration,
    retry: Duration,
}

/// A 3 s lease renewed within 2 s, retried every 500 ms: a lapse is quick to wait out.
const SHORT_LEASE: Timings = Timings {
    lease: Duration::from_secs(3),
    renew: Duration::from_millis(2000),
    retry: Duration::from_millis(500),
};

impl Timings {
    fn args(&self) -> Vec<String> {
        vec![
            "--leader-elect-lease-duration".into(),
            format!("{}s", self.lease.as_secs()),
            "--leader-elect-renew-deadline".into(),
            format!("{}ms", self.renew.as_millis()),
            "--leader-elect-retry-period".into(),
            format!("{}ms", self.retry.as_millis()),
        ]
    }

    /// The longest a candidate may take to see and take a lapsed Lease: its retries are
    /// jittered up to 2.2 × the retry period.
    fn takeover_bound(&self) -> Duration {
        self.retry.mul_f64(2.2)
    }
}

/// One `tagpin run --leader-elect` replica, its stderr in a file (never a full pipe).
struct Replica {
    name: &'static str,
    child: Child,
    base: String,
    log: PathBuf,
}

impl Replica {
    async fn start(world: &World, name: &'static str, timings: &Timings) -> Replica {
        let port = free_port();
        let dir = world.dir.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("stderr.log");
        let child = Command::new(env!("CARGO_BIN_EXE_tagpin"))
            .args(["run", "--interval", "1s", "--verify-interval", "1h"])
            .arg("--leader-elect")
            .args(timings.args())
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--config")
            .arg(&world.config)
            .arg("--cache-dir")
            .arg(dir.join("cache"))
            .env("HOME", &dir)
            .env("RUST_LOG", "tagpin=info")
            .env_remove("DOCKER_CONFIG")
            .env_remove("TAGPIN_WEBHOOK_SECRET")
            .env("KUBECONFIG", &world.kubeconfig)
            .env("POD_NAME", name)
            .env("POD_NAMESPACE", NAMESPACE)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .kill_on_drop(true)
            .spawn()
            .expect("start tagpin run");
        let replica = Replica {
            name,
            child,
            base: format!("http://127.0.0.1:{port}"),
            log,
        };
        let healthz = format!("{}/healthz", replica.base);
        eventually_async(&format!("{name} serves /healthz"), || async {
            probe(&healthz).await == Some(200)
        })
        .await;
        replica
    }

    /// Sync passes run so far, from `/metrics`.
    async fn passes(&self) -> f64 {
        let metrics = reqwest::get(format!("{}/metrics", self.base))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        metrics
            .lines()
            .filter(|l| l.starts_with("tagpin_passes_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.id().expect("running").to_string();
        let status = std::process::Command::new("kill")
            .args([signal, &pid])
            .status()
            .unwrap();
        assert!(status.success());
    }

    async fn exit_code(&mut self) -> Option<i32> {
        let status = tokio::time::timeout(Duration::from_secs(60), self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("{} did not exit:\n{}", self.name, self.stderr()))
            .unwrap();
        status.code()
    }
}

async fn probe(url: &str) -> Option<u16> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    client
        .get(url)
        .send()
        .await
        .ok()
        .map(|r| r.status().as_u16())
}

/// A registry with `acme/web:1`, a repository whose `apps/web.yaml` uses it, a Kubernetes API
/// server where the controller may read and write Leases in its namespace, and the
/// configuration and kubeconfig the replicas share.
struct World {
    registry: TestRegistry,
    repo: BareRepo,
    kube: KubeServer,
    dir: tempfile::TempDir,
    config: PathBuf,
    kubeconfig: PathBuf,
}

impl World {
    async fn start() -> World {
        let registry = TestRegistry::start(Mode::Plain).await;
        let host = registry.host();
        let repo = BareRepo::create(&[(
            "apps/web.yaml",
            &deployment("web", &format!("{host}/acme/web:1")),
        )]);
        let kube = KubeServer::start().await;
        kube.grant(Grant::namespaced(
            NAMESPACE,
            &["get", "create", "update"],
            &["leases"],
        ));
        let dir = tempfile::tempdir().unwrap();
        let config = commit_mode_config(dir.path(), &repo, &host);
        let kubeconfig = kube.kubeconfig(dir.path());
        World {
            registry,
            repo,
            kube,
            dir,
            config,
            kubeconfig,
        }
    }

    /// Pushes a first `acme/web:1` and starts `replica-a`; returns it once it leads and has
    /// pinned that digest.
    async fn first_leader(&self, timings: &Timings) -> Replica {
        let one = self.registry.push_image("acme/web", "1", "one").await;
        let a = Replica::start(self, "replica-a", timings).await;
        eventually_async("replica-a leads and pins", || async {
            self.held_by("replica-a") && self.pinned_to(&one.manifest)
        })
        .await;
        a
    }

    /// `holderIdentity` of the Lease, if any.
    fn holder(&self) -> Option<String> {
        self.kube
            .get("Lease", NAMESPACE, LEASE)?
            .pointer("/spec/holderIdentity")?
            .as_str()
            .map(str::to_string)
    }

    fn held_by(&self, replica: &str) -> bool {
        self.holder()
            .is_some_and(|h| h.starts_with(&format!("{replica}_")))
    }

    fn transitions(&self) -> i64 {
        self.kube.get("Lease", NAMESPACE, LEASE).unwrap()["spec"]["leaseTransitions"]
            .as_i64()
            .unwrap()
    }

    fn pinned_to(&self, digest: &str) -> bool {
        self.repo
            .read("main", "apps/web.yaml")
            .is_some_and(|y| y.contains(digest))
    }

    /// The replica is standing by: it said so, and it is alive but not ready.
    async fn standing_by(&self, replica: &Replica) {
        eventually_async(&format!("{} standing by", replica.name), || async {
            replica.stderr().contains("standing by")
        })
        .await;
        assert_eq!(probe(&format!("{}/healthz", replica.base)).await, Some(200));
        assert_eq!(
            probe(&format!("{}/readyz", replica.base)).await,
            Some(503),
            "a standby must not take webhooks"
        );
    }
}

/// How long until `check` holds, polling every 20 ms for up to 60 s.
async fn time_until(what: &str, mut check: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !check() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    start.elapsed()
}

fn subjects(repo: &BareRepo) -> Vec<String> {
    repo.log("main").into_iter().map(|(_, s)| s).collect()
}

#[tokio::test]
async fn only_the_leader_pushes_and_a_killed_leader_is_replaced_within_the_lease_duration() {
    let world = World::start().await;
    let timings = SHORT_LEASE;
    let mut a = world.first_leader(&timings).await;
    let b = Replica::start(&world, "replica-b", &timings).await;
    world.standing_by(&b).await;
    assert!(world.held_by("replica-a"));

    // While both run, a new digest is pinned once, by the leader; the standby runs no pass.
    let two = world.registry.push_image("acme/web", "1", "two").await;
    eventually_async("replica-a pins the new digest", || async {
        world.pinned_to(&two.manifest)
    })
    .await;
    let a_passes = a.passes().await;
    eventually_async("replica-a runs two more passes", || async {
        a.passes().await >= a_passes + 2.0
    })
    .await;
    assert_eq!(b.passes().await, 0.0, "the standby ran a pass");
    assert_eq!(
        subjects(&world.repo).len(),
        3,
        "{:?}",
        subjects(&world.repo)
    );

    // SIGKILL: no release. replica-b takes over once the Lease lapses.
    a.signal("-KILL");
    assert_eq!(a.exit_code().await, None, "killed by a signal");
    let took = time_until("replica-b takes over", || world.held_by("replica-b")).await;
    let bound = timings.lease + timings.takeover_bound() + Duration::from_secs(1);
    assert!(
        took <= bound,
        "replica-b took over {took:?} after the kill; bound {bound:?}\n{}",
        b.stderr()
    );
    eprintln!(
        "takeover after SIGKILL: {took:?} (lease {:?})",
        timings.lease
    );
    assert_eq!(world.transitions(), 1);

    // The new leader pins what changes from now on.
    let three = world.registry.push_image("acme/web", "1", "three").await;
    eventually_async("replica-b pins the next digest", || async {
        world.pinned_to(&three.manifest)
    })
    .await;

    // One commit per change, none written twice: the initial one, two pins by A, one by B.
    let log = world.repo.log("main");
    assert_eq!(log.len(), 4, "{log:?}");
    assert!(b.passes().await >= 1.0);
    assert!(
        !b.stderr().contains("lost the leadership"),
        "{}",
        b.stderr()
    );
}

#[tokio::test]
async fn a_leader_stopped_gracefully_releases_the_lease_and_the_standby_takes_over_at_once() {
    let world = World::start().await;
    // A long lease: waiting it out would take 10 s; a release is taken at the next retry.
    let timings = Timings {
        lease: Duration::from_secs(10),
        renew: Duration::from_millis(6000),
        retry: Duration::from_millis(500),
    };
    let mut a = world.first_leader(&timings).await;
    let b = Replica::start(&world, "replica-b", &timings).await;
    world.standing_by(&b).await;

    a.signal("-TERM");
    assert_eq!(a.exit_code().await, Some(0), "{}", a.stderr());
    assert!(a.stderr().contains("released Lease"), "{}", a.stderr());
    let took = time_until("replica-b takes over", || world.held_by("replica-b")).await;
    // Without the release, replica-b waits the Lease out (at least lease - retry = 9.5 s after
    // the last renewal); half the lease tells the two apart with room for a loaded machine.
    let bound = timings.lease / 2;
    assert!(
        took <= bound,
        "replica-b took over {took:?} after replica-a exited; bound {bound:?} (lease {:?})",
        timings.lease
    );
    eprintln!(
        "takeover after release: {took:?} (lease {:?})",
        timings.lease
    );
    assert_eq!(world.transitions(), 1);
    let lease = world.kube.get("Lease", NAMESPACE, LEASE).unwrap();
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 10);

    let two = world.registry.push_image("acme/web", "1", "two").await;
    eventually_async("replica-b pins the new digest", || async {
        world.pinned_to(&two.manifest)
    })
    .await;
    assert_eq!(world.repo.log("main").len(), 3);
}

#[tokio::test]
async fn a_conflict_on_renew_makes_the_leader_stop_and_exit_non_zero() {
    let world = World::start().await;
    let timings = SHORT_LEASE;
    let mut a = world.first_leader(&timings).await;

    // Another writer got the Lease in between replica-a's read and its renewal.
    world.kube.conflict_writes(LEASE, 1);
    let code = a.exit_code().await;
    let stderr = a.stderr();
    assert!(matches!(code, Some(c) if c != 0), "exit {code:?}\n{stderr}");
    assert!(
        stderr.contains("lost the leadership") && stderr.contains("409 Conflict on renew"),
        "{stderr}"
    );
    assert_eq!(world.repo.log("main").len(), 2);
}

#[tokio::test]
async fn leader_election_flags_that_cannot_work_are_refused_by_name() {
    let world = World::start().await;
    let run = |args: &[&str], namespace: Option<&str>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_tagpin"));
        command
            .args(["run", "--leader-elect", "--listen", "127.0.0.1:0"])
            .args(args)
            .arg("--config")
            .arg(&world.config)
            .env("HOME", world.dir.path())
            .env("KUBECONFIG", &world.kubeconfig)
            .env_remove("POD_NAMESPACE");
        if let Some(namespace) = namespace {
            command.env("POD_NAMESPACE", namespace);
        }
        command.kill_on_drop(true).output()
    };

    let out = run(&[], None).await.unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", support::output_text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--leader-elect-namespace: not given"),
        "{}",
        support::output_text(&out)
    );

    let out = run(&["--leader-elect-renew-deadline", "20s"], Some(NAMESPACE))
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", support::output_text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("renew deadline 20s must be shorter than the lease duration 15s"),
        "{}",
        support::output_text(&out)
    );
    // Nothing was written: the checks come before any Lease.
    assert!(world.kube.get("Lease", NAMESPACE, LEASE).is_none());
}
