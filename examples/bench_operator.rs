//! Benchmark of `tagpin operator` at fleet size, against the local Kubernetes API server.
//!
//! Run: `cargo build --release --bin tagpin --example bench_operator &&
//! target/release/examples/bench_operator` (it starts `target/release/tagpin`).
//!
//! It creates `BENCH_OBJECTS` (100) local bare Git repositories, each pinning one of
//! `BENCH_IMAGES` (10) images of one local registry (`registry:2`, as the tests use), a
//! `PinnedRepository` for each in the API server
//! of `tests/it/support/kube.rs` (with the CRD of `deploy/operator/crd.yaml`, and only the
//! writes `deploy/operator/rbac.yaml` grants), and the live Deployments the verification
//! finds converged; then starts the operator (release build, default `--concurrent`) and
//! reports:
//! - the time from its start until every object is Ready (pinned and verified);
//! - the API requests it sent, by verb and resource;
//! - the registry requests it sent (its `tagpin_registry_requests_total`): shared resolution
//!   asks each distinct tag once per interval, so 10, not 100;
//! - its peak memory (VmHWM);
//! - with `BENCH_IDLE_SECONDS=N` (the operator's `--interval`, 1h otherwise): the API requests
//!   and writes during the next full interval after all are Ready, when nothing changes;
//! - with `BENCH_SHARDS=S` (1): the objects spread over S label shards (`tagpin.dev/shard`),
//!   one operator process per shard (`--watch-label-selector`), as Flux and Argo CD shard a
//!   controller; the figures are the fleet's (requests summed, the largest peak memory and
//!   the sum of all);
//! - with `BENCH_NAMESPACES=K` (1): the objects, their workloads and pods spread over K
//!   namespaces (`fleet-0` ... `fleet-{K-1}`), as tenants keep them; an object's reconcile
//!   lists its own namespace, so this is the fleet's shape at 10,000 objects;
//! - then how fast a change reaches its object at that size: a new digest pushed for the tag
//!   of one image (`acme/app-0:1`, used by `BENCH_OBJECTS / BENCH_IMAGES` objects) and the
//!   registry's webhook posted to every operator: the time until each of those repositories
//!   has its new pin (the slowest and the median), and what else the delivery cost; and with
//!   `BENCH_IDLE_SECONDS`, a commit pushed to one object's repository naming another tag: the
//!   time until the operator pinned it (its next pass lists the repository's refs: within one
//!   interval; the operator takes no forge push webhook).
//!
//! Repositories are written with libgit2, each its own bare repository with one commit, on
//! all cores: 10,000 take seconds, not the minutes of one `git` process after another.
//!
//! Figures are printed, never asserted: speed is measured here, not tested.

#[path = "support/binary.rs"]
mod binary;
#[path = "../tests/it/support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use binary::tagpin_binary;
use serde_json::json;
use support::kube::{deployment, pod, running_pod_status, KubeServer};
use support::registry::{free_port, Mode, TestRegistry};

/// The webhook secret every operator of the benchmark takes deliveries with.
const WEBHOOK_SECRET: &str = "bench-webhook-secret";
/// Where each object's manifest lives in its repository.
const MANIFEST: &str = "apps/app.yaml";

/// A bare repository at `path` with one commit on `main` holding [`MANIFEST`]: `content`.
fn create_repository(path: &Path, content: &str) {
    let mut options = git2::RepositoryInitOptions::new();
    options.bare(true).initial_head("main");
    let repo = git2::Repository::init_opts(path, &options).unwrap();
    commit_manifest(&repo, content, "initial commit");
}

/// Commits [`MANIFEST`]: `content` on `main` of `repo`, as a push would.
fn commit_manifest(repo: &git2::Repository, content: &str, message: &str) {
    let blob = repo.blob(content.as_bytes()).unwrap();
    let mut apps = repo.treebuilder(None).unwrap();
    apps.insert("app.yaml", blob, 0o100644).unwrap();
    let apps = apps.write().unwrap();
    let mut root = repo.treebuilder(None).unwrap();
    root.insert("apps", apps, 0o040000).unwrap();
    let tree = repo.find_tree(root.write().unwrap()).unwrap();
    let parent = repo
        .find_reference("refs/heads/main")
        .ok()
        .and_then(|r| r.peel_to_commit().ok());
    let signature = git2::Signature::now("bench", "bench@example.invalid").unwrap();
    let parents: Vec<&git2::Commit> = parent.iter().collect();
    repo.commit(
        Some("refs/heads/main"),
        &signature,
        &signature,
        message,
        &tree,
        &parents,
    )
    .unwrap();
}

/// [`MANIFEST`] at the tip of `main` of the repository at `path`.
fn manifest_at_tip(path: &Path) -> Option<String> {
    let repo = git2::Repository::open_bare(path).ok()?;
    let tree = repo
        .revparse_single("refs/heads/main")
        .ok()?
        .peel_to_tree()
        .ok()?;
    let blob = tree
        .get_path(Path::new(MANIFEST))
        .ok()?
        .to_object(&repo)
        .ok()?;
    Some(String::from_utf8_lossy(blob.as_blob()?.content()).into_owned())
}

/// Commits on `main` of the repository at `path`.
fn commits(path: &Path) -> usize {
    let Ok(repo) = git2::Repository::open_bare(path) else {
        return 0;
    };
    let Ok(mut walk) = repo.revwalk() else {
        return 0;
    };
    if walk.push_ref("refs/heads/main").is_err() {
        return 0;
    }
    walk.count()
}

/// Object `n`'s repository under `base`, its manifest naming image `n % images` of `host`:
/// written on every core at once (each a repository of its own).
fn create_repositories(base: &Path, objects: usize, images: usize, host: &str) -> Vec<PathBuf> {
    let paths: Vec<PathBuf> = (0..objects)
        .map(|n| base.join(format!("app-{n}.git")))
        .collect();
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::thread::scope(|scope| {
        for t in 0..threads {
            let paths = &paths;
            scope.spawn(move || {
                for n in (t..objects).step_by(threads) {
                    let image = format!("{host}/acme/app-{}:1", n % images);
                    create_repository(&paths[n], &manifest(&format!("app-{n}"), &image));
                }
            });
        }
    });
    paths
}

/// A count from the environment, or its default.
fn env_count(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The label that spreads objects over shards (`BENCH_SHARDS`), as each object carries it.
const SHARD_LABEL: &str = "tagpin.dev/shard";
const NS: &str = "fleet";

/// The namespace of object `n` when the fleet spreads over `namespaces` (`BENCH_NAMESPACES`).
fn namespace_of(n: usize, namespaces: usize) -> String {
    match namespaces {
        1 => NS.to_string(),
        k => format!("{NS}-{}", n % k),
    }
}

fn manifest(name: &str, image: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\nspec:\n  template:\n    spec:\n      containers:\n      - name: app\n        image: {image}\n"
    )
}

fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The bytes of every file under `dir`.
/// Each process's peak memory so far, raised to what it is now.
fn sample_peaks(peaks: &mut [u64], pids: &[u32]) {
    for (peak, pid) in peaks.iter_mut().zip(pids) {
        *peak = (*peak).max(peak_rss_kib(*pid).unwrap_or(0));
    }
}

fn disk_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match entry.file_type() {
            Ok(t) if t.is_dir() => disk_bytes(&entry.path()),
            Ok(_) => entry.metadata().map_or(0, |m| m.len()),
            Err(_) => 0,
        })
        .sum()
}

/// How many objects of each shard are Ready.
fn ready_counts(kube: &KubeServer, shards: usize) -> Vec<usize> {
    let mut ready = vec![0; shards];
    kube.for_each("PinnedRepository", |o| {
        let is_ready = o["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        let shard = o["metadata"]["labels"][SHARD_LABEL]
            .as_str()
            .and_then(|s| s.parse::<usize>().ok())
            .unwrap_or(0);
        if is_ready && shard < shards {
            ready[shard] += 1;
        }
    });
    ready
}

/// CPU seconds (user and system) a process used so far, from `/proc/<pid>/stat`.
fn cpu_seconds(pid: &str) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // The fields after the command's closing parenthesis: utime and stime are 14th and 15th.
    let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i)?.parse::<f64>().ok())
        .sum();
    ticks / 100.0
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// Sums of some counters of each operator's `/metrics`: registry requests, Git fetches and
/// ref listings.
#[derive(Default, Clone, Copy, Debug)]
struct Counters {
    registry: f64,
    fetches: f64,
    listings: f64,
}

async fn counters(port: u16) -> Counters {
    let metrics = reqwest::get(format!("http://127.0.0.1:{port}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let sum = |prefix: &str| -> f64 {
        metrics
            .lines()
            .filter(|l| l.starts_with(prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    Counters {
        registry: sum("tagpin_registry_requests_total{"),
        fetches: sum("tagpin_git_fetches_total"),
        listings: sum("tagpin_git_ref_listings_total"),
    }
}

async fn all_counters(ports: &[u16]) -> Vec<Counters> {
    let mut all = Vec::new();
    for port in ports {
        all.push(counters(*port).await);
    }
    all
}

/// How fast a registry push reached the objects using the pushed tag, and what it cost.
struct Reach {
    /// The objects using the tag.
    objects: usize,
    /// When each of them had its new pin, from the delivery; `None`: not within the limit.
    times: Vec<Option<Duration>>,
    /// Counters of all operators from the delivery until the last of them was pinned.
    cost: Counters,
    api_requests: usize,
}

/// A registry push of a new digest for `acme/app-0:1`, announced to every operator's webhook
/// port as Distribution does: the time until each repository using it is pinned to it.
async fn webhook_reach(
    registry: &TestRegistry,
    kube: &KubeServer,
    ports: &[u16],
    repos: &[PathBuf],
    images: usize,
) -> Reach {
    let users: Vec<&PathBuf> = repos.iter().step_by(images).collect();
    let pushed = registry.push_image("acme/app-0", "1", "pushed-0").await;
    let event = json!({"events": [{"action": "push",
        "target": {"repository": "acme/app-0", "tag": "1"},
        "request": {"host": registry.host()}}]})
    .to_string();
    let before = all_counters(ports).await;
    let api_before: usize = kube.request_counts().values().sum();
    let http = reqwest::Client::new();
    let started = Instant::now();
    for port in ports {
        let answer = http
            .post(format!("http://127.0.0.1:{port}/webhooks/distribution"))
            .header("authorization", format!("Bearer {WEBHOOK_SECRET}"))
            .body(event.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 202, "the webhook was refused");
    }
    let mut times: Vec<Option<Duration>> = vec![None; users.len()];
    let deadline = started + Duration::from_secs(300);
    while times.iter().any(Option::is_none) && Instant::now() < deadline {
        for (time, repo) in times.iter_mut().zip(&users) {
            if time.is_none() && manifest_at_tip(repo).is_some_and(|m| m.contains(&pushed.manifest))
            {
                *time = Some(started.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let after = all_counters(ports).await;
    let sum = |all: &[Counters], f: fn(&Counters) -> f64| all.iter().map(f).sum::<f64>();
    Reach {
        objects: users.len(),
        times,
        cost: Counters {
            registry: sum(&after, |c| c.registry) - sum(&before, |c| c.registry),
            fetches: sum(&after, |c| c.fetches) - sum(&before, |c| c.fetches),
            listings: sum(&after, |c| c.listings) - sum(&before, |c| c.listings),
        },
        api_requests: kube.request_counts().values().sum::<usize>() - api_before,
    }
}

/// A commit pushed to object 1's repository naming a new image (`acme/moved:1`): the time
/// until the operator pinned it, or `None` within `limit`.
async fn commit_reach(
    registry: &TestRegistry,
    repos: &[PathBuf],
    limit: Duration,
) -> Option<Duration> {
    let repo = repos.get(1).or(repos.first())?;
    let moved = registry.push_image("acme/moved", "1", "moved").await;
    let image = format!("{}/acme/moved:1", registry.host());
    let git = git2::Repository::open_bare(repo).unwrap();
    let started = Instant::now();
    commit_manifest(&git, &manifest("app-1", &image), "app-1 runs acme/moved");
    let deadline = started + limit;
    while Instant::now() < deadline {
        if manifest_at_tip(repo).is_some_and(|m| m.contains(&moved.manifest)) {
            return Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

/// The webhook's figures: the slowest and the median object, and what the delivery cost.
fn print_reach(reach: &Reach, objects: usize) {
    let mut reached: Vec<Duration> = reach.times.iter().flatten().copied().collect();
    reached.sort();
    let median = reached.get(reached.len() / 2).copied().unwrap_or_default();
    println!(
        "  a registry push of one tag used by {} objects, its webhook posted to every operator: \
         {}/{} pinned, the slowest in {:.2} s, the median in {:.2} s; meanwhile {} ref \
         listings, {} Git fetches, {} registry requests, {} API requests (of {objects} objects)",
        reach.objects,
        reached.len(),
        reach.objects,
        reached.last().copied().unwrap_or_default().as_secs_f64(),
        median.as_secs_f64(),
        reach.cost.listings,
        reach.cost.fetches,
        reach.cost.registry,
        reach.api_requests
    );
}

#[tokio::main]
async fn main() {
    let objects = env_count("BENCH_OBJECTS", 100);
    let images = env_count("BENCH_IMAGES", 10);
    let idle = env_count("BENCH_IDLE_SECONDS", 0);
    let shards = env_count("BENCH_SHARDS", 1).max(1);
    let namespaces = env_count("BENCH_NAMESPACES", 1).max(1);
    let binary = tagpin_binary();
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let kube = KubeServer::start().await;
    kube.install_tagpin_operator();
    let mut pushed = Vec::new();
    for i in 0..images {
        pushed.push(
            registry
                .push_image(&format!("acme/app-{i}"), "1", &format!("seed-{i}"))
                .await,
        );
    }
    let base = tempfile::tempdir().unwrap();
    let creating = Instant::now();
    let repos = create_repositories(base.path(), objects, images, &host);
    let created_repositories = creating.elapsed();
    for (n, repo) in repos.iter().enumerate() {
        let image = n % images;
        let name = format!("app-{n}");
        let ns = namespace_of(n, namespaces);
        let ns = ns.as_str();
        let url = format!("file://{}", repo.display());
        kube.apply(json!({
            "apiVersion": "tagpin.dev/v1alpha1",
            "kind": "PinnedRepository",
            "metadata": {"name": name, "namespace": ns,
                         "labels": {"tagpin.dev/shard": (n % shards).to_string()}},
            "spec": {
                "repository": {"url": url},
                "paths": ["apps"],
                "registries": {"insecure": [host]},
                "verify": {"default_namespace": ns},
            },
        }));
        // What Argo CD applies from the pin, rolled out, its pod on the pinned digest.
        let digest = &pushed[image].manifest;
        let pinned = format!("{host}/acme/app-{image}:1@{digest}");
        let image_id = format!("{host}/acme/app-{image}@{digest}");
        kube.apply(deployment(
            ns,
            &name,
            &[("app", &name)],
            &[("app", &pinned)],
        ));
        kube.set_status(
            "Deployment",
            ns,
            &name,
            json!({"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1,
                   "readyReplicas": 1, "availableReplicas": 1}),
        );
        let pod_name = format!("{name}-1");
        kube.apply(pod(ns, &pod_name, &[("app", &name)], &[("app", &pinned)]));
        kube.set_pod_status(
            ns,
            &pod_name,
            running_pod_status(&[("app", &pinned, &image_id)]),
        );
    }
    let created = creating.elapsed();
    println!(
        "bench_operator: {objects} repositories written in {:.1} s, all objects and workloads in {:.1} s",
        created_repositories.as_secs_f64(),
        created.as_secs_f64()
    );
    let before: usize = kube.request_counts().values().sum();

    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = kube.kubeconfig(dir.path());
    let interval = match idle {
        0 => "1h".to_string(),
        seconds => format!("{seconds}s"),
    };
    let started = Instant::now();
    let mut operators = Vec::new();
    for shard in 0..shards {
        let port = free_port();
        let mut command = tokio::process::Command::new(&binary);
        command
            .args([
                "operator",
                "--allow-local-repositories",
                "--interval",
                &interval,
                "--listen",
            ])
            .arg(format!("127.0.0.1:{port}"))
            .arg("--cache-dir")
            .arg(dir.path().join(format!("cache-{shard}")));
        if shards > 1 {
            command
                .arg("--watch-label-selector")
                .arg(format!("{SHARD_LABEL}={shard}"));
        }
        let child = command
            .env("HOME", dir.path())
            .env("KUBECONFIG", &kubeconfig)
            .env("RUST_LOG", "warn")
            .env("TAGPIN_WEBHOOK_SECRET", WEBHOOK_SECRET)
            .env_remove("DOCKER_CONFIG")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        operators.push((child, port));
    }
    let pids: Vec<u32> = operators.iter().map(|(c, _)| c.id().unwrap()).collect();
    let load_at_start = load();
    let deadline = Instant::now() + Duration::from_secs(1800);
    let mut peaks = vec![0; shards];
    let per_shard: Vec<usize> = (0..shards)
        .map(|s| (0..objects).filter(|n| n % shards == s).count())
        .collect();
    let mut shard_ready: Vec<Option<Duration>> = vec![None; shards];
    let poll = Duration::from_millis(50.max(objects as u64 / 20));
    while shard_ready.iter().any(Option::is_none) {
        assert!(Instant::now() < deadline, "not all Ready after 30 minutes");
        sample_peaks(&mut peaks, &pids);
        for (shard, ready) in ready_counts(&kube, shards).into_iter().enumerate() {
            if ready >= per_shard[shard] && shard_ready[shard].is_none() {
                shard_ready[shard] = Some(started.elapsed());
            }
        }
        // Reading every object's status costs the local API server in this process, which the
        // operators share: at fleet size it is asked less often (0.5 s at 10,000 objects).
        tokio::time::sleep(poll).await;
    }
    let all_ready = started.elapsed();
    sample_peaks(&mut peaks, &pids);
    let pid_names: Vec<String> = pids.iter().map(u32::to_string).collect();
    let cpu_at_ready: Vec<f64> = pid_names.iter().map(|p| cpu_seconds(p)).collect();
    let bench_cpu_at_ready = cpu_seconds("self");
    let ports: Vec<u16> = operators.iter().map(|(_, port)| *port).collect();
    let at_ready = all_counters(&ports).await;
    let registry_requests: f64 = at_ready.iter().map(|c| c.registry).sum();
    let pinned = repos.iter().filter(|r| commits(r) == 2).count();
    let mirrors: u64 = (0..shards)
        .map(|shard| disk_bytes(&dir.path().join(format!("cache-{shard}"))))
        .sum();
    let counts = kube.request_counts();
    let total: usize = counts.values().sum::<usize>() - before;
    // One whole interval with nothing to change: what the fleet costs at rest.
    let at_rest = match idle {
        0 => None,
        seconds => {
            let writes = |counts: &std::collections::BTreeMap<(String, String), usize>| -> usize {
                counts
                    .iter()
                    .filter(|((verb, _), _)| !matches!(verb.as_str(), "get" | "list" | "watch"))
                    .map(|(_, n)| n)
                    .sum()
            };
            let (all, written) = (counts.values().sum::<usize>(), writes(&counts));
            let before = all_counters(&ports).await;
            tokio::time::sleep(Duration::from_secs(seconds as u64)).await;
            let after = kube.request_counts();
            let later = all_counters(&ports).await;
            let delta = |f: fn(&Counters) -> f64| -> f64 {
                later.iter().map(f).sum::<f64>() - before.iter().map(f).sum::<f64>()
            };
            let by_kind: Vec<((String, String), usize)> = after
                .iter()
                .map(|(k, n)| (k.clone(), n - counts.get(k).copied().unwrap_or(0)))
                .filter(|(_, n)| *n > 0)
                .collect();
            Some((
                by_kind,
                after.values().sum::<usize>() - all,
                writes(&after) - written,
                seconds,
                Counters {
                    registry: delta(|c| c.registry),
                    fetches: delta(|c| c.fetches),
                    listings: delta(|c| c.listings),
                },
            ))
        }
    };
    let cpu_at_end: Vec<f64> = pid_names.iter().map(|p| cpu_seconds(p)).collect();
    let bench_cpu_at_end = cpu_seconds("self");
    let load_at_end = load();
    // How fast a change reaches its object, with the fleet at rest.
    let reach = webhook_reach(&registry, &kube, &ports, &repos, images).await;
    let committed = match idle {
        0 => None,
        seconds => {
            let limit = Duration::from_secs(2 * seconds as u64 + 60);
            Some((commit_reach(&registry, &repos, limit).await, seconds))
        }
    };
    let load_after_reach = load();
    for pid in &pids {
        std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .unwrap();
    }
    for (mut child, _) in operators {
        let _ = tokio::time::timeout(Duration::from_secs(60), child.wait()).await;
    }

    println!("bench_operator: {objects} PinnedRepository objects, {objects} repositories, {images} distinct tags, {namespaces} namespace(s), one registry, {shards} operator process(es)");
    println!(
        "  all Ready (pinned and verified Converged): {:.2} s",
        all_ready.as_secs_f64()
    );
    for (shard, ready) in shard_ready.iter().enumerate().filter(|_| shards > 1) {
        let c = at_ready[shard];
        println!(
            "    shard {shard}: {} objects Ready at {:.2} s, {:.1} CPU s, peak {:.1} MiB, \
             {} registry requests, {} Git fetches, {} ref listings",
            per_shard[shard],
            ready.unwrap_or_default().as_secs_f64(),
            cpu_at_ready[shard],
            peaks[shard] as f64 / 1024.0,
            c.registry,
            c.fetches,
            c.listings
        );
    }
    println!(
        "  load average (1, 5, 15 min): {load_at_start} at the start, {load_at_end} at the end"
    );
    println!(
        "  CPU until all Ready: operators {:.1} s, the benchmark's process (the local API \
         server) {bench_cpu_at_ready:.1} s",
        cpu_at_ready.iter().sum::<f64>()
    );
    println!("  repositories pinned with one commit each: {pinned}/{objects}");
    println!("  registry requests: {registry_requests} (distinct tags: {images})");
    println!(
        "  Git: {} fetches, {} ref listings",
        at_ready.iter().map(|c| c.fetches).sum::<f64>(),
        at_ready.iter().map(|c| c.listings).sum::<f64>()
    );
    println!("  API requests: {total} (the benchmark's own reads excluded)");
    let mut by_kind: Vec<_> = counts.iter().collect();
    by_kind.sort_by(|a, b| b.1.cmp(a.1));
    for ((verb, resource), n) in by_kind.iter().take(40) {
        println!("    {verb:>6} {resource}: {n}");
    }
    let (largest, all) = (
        peaks.iter().copied().max().unwrap_or(0),
        peaks.iter().sum::<u64>(),
    );
    println!(
        "  peak memory (VmHWM): {:.1} MiB (largest process), {:.1} MiB (all {shards})",
        largest as f64 / 1024.0,
        all as f64 / 1024.0
    );
    println!(
        "  mirrors on disk: {:.1} MiB ({:.0} KiB per repository)",
        mirrors as f64 / (1024.0 * 1024.0),
        mirrors as f64 / 1024.0 / objects as f64
    );
    if let Some((by_kind, requests, writes, seconds, c)) = at_rest {
        println!(
            "  at rest, one interval ({seconds} s) after all Ready: {requests} API requests \
             ({:.2} per object), {writes} writes, {} registry requests, {} Git fetches, \
             {} ref listings; CPU in it: operators {:.1} s, the benchmark's process {:.1} s",
            requests as f64 / objects as f64,
            c.registry,
            c.fetches,
            c.listings,
            cpu_at_end.iter().sum::<f64>() - cpu_at_ready.iter().sum::<f64>(),
            bench_cpu_at_end - bench_cpu_at_ready
        );
        for ((verb, resource), n) in &by_kind {
            println!("    {verb:>6} {resource}: {n}");
        }
    }
    print_reach(&reach, objects);
    match committed {
        Some((Some(took), seconds)) => println!(
            "  a commit pushed to one repository (a new image): pinned {:.2} s after the push \
             (interval {seconds} s: its next pass lists the repository's refs)",
            took.as_secs_f64()
        ),
        Some((None, seconds)) => println!(
            "  a commit pushed to one repository (a new image): NOT pinned within {} s",
            2 * seconds + 60
        ),
        None => println!(
            "  a commit pushed to one repository: not measured (BENCH_IDLE_SECONDS=0, the interval is 1h)"
        ),
    }
    println!("  load average after those: {load_after_reach}");
}
