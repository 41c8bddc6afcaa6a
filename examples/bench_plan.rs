//! Benchmark of `tagpin plan` on a generated repository against a real local registry.
//!
//! Run: `cargo run --release --example bench_plan` (needs Debian's `docker-registry`).
//!
//! It pushes 500 distinct images to a `docker-registry` on loopback (one in ten a multi-arch OCI
//! index), writes 2,000 Deployment manifests naming them, and reports:
//! - wall time of a full plan pass (walk, read, scan, resolve, plan, diff), median of 3;
//! - manifest requests the pass sent (must equal the number of distinct references);
//! - the registry floor: a bare concurrent HEAD client sending the same 500 requests on
//!   `FLOOR_CONNECTIONS` connections, median of 3, and the ratio plan / floor;
//! - `sync` when nothing changed, on a Git repository holding the same manifests already
//!   pinned (a fetch that brings nothing, the scan, the HEADs, no commit), median of 3, and its
//!   ratio to plan;
//! - peak RSS during the plan pass (VmHWM, reset before the pass);
//! - scanning throughput without network, in manifests per second.
//!
//! Figures are printed, never asserted: speed is measured here, not tested.
//!
//! `-- --helm` runs the Helm variant instead (`support/bench_plan_helm.rs`).

#[path = "support/bare_repo.rs"]
mod bare_repo;
#[path = "support/bench_plan_helm.rs"]
mod helm_variant;
#[path = "../tests/it/support/registry.rs"]
#[allow(dead_code)]
mod registry_support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures::stream::{self, StreamExt};
use registry_support::{IndexKind, Mode, TestRegistry};
use tagpin::manifest::{self, FileFilter};
use tagpin::registry::{Client, Settings, DEFAULT_CONCURRENCY_PER_HOST};

const MANIFESTS: usize = 2_000;
const IMAGES: usize = 500;
const REPOSITORIES: usize = 50;
const ROUNDS: usize = 3;
const SCAN_REPEATS: usize = 10;
/// Every this-many-th image is a multi-arch OCI index.
const INDEX_EVERY: usize = 10;
/// Concurrent connections of the bare HEAD client that sets the floor.
const FLOOR_CONNECTIONS: usize = 16;

fn image_name(host: &str, i: usize) -> (String, String) {
    let repo = format!("bench/app{}", i % REPOSITORIES);
    let tag = format!("v{}", i / REPOSITORIES);
    (format!("{host}/{repo}:{tag}"), format!("{repo}:{tag}"))
}

fn deployment(n: usize, image: &str) -> String {
    format!(
        "# generated for the benchmark\n\
         apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app-{n}\n  namespace: bench\n  labels:\n    app: app-{n}\n\
         spec:\n  replicas: 2\n  selector:\n    matchLabels:\n      app: app-{n}\n  template:\n    metadata:\n      labels:\n        app: app-{n}\n\
         \x20   spec:\n      containers:\n        - name: app\n          image: {image}  # pinned by tagpin\n\
         \x20         ports:\n            - containerPort: 8080\n          resources:\n            requests: {{cpu: 10m, memory: 16Mi}}\n"
    )
}

fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Resets VmHWM to the current RSS (Linux ≥ 4.0), so the peak covers only what follows.
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

async fn baseline(host: &str, images: &[(String, String)], connections: usize) -> Duration {
    let http = reqwest::Client::new();
    let started = Instant::now();
    let repo_tags = images.iter().map(|(_, repo_tag)| {
        let (repo, tag) = repo_tag.split_once(':').unwrap();
        (repo.to_string(), tag.to_string())
    });
    registry_support::head_manifests(&http, host, repo_tags, connections).await;
    started.elapsed()
}

async fn plan_once(
    host: &str,
    root: &Path,
    per_host: usize,
) -> (Duration, u64, usize, Option<u64>) {
    let client = Client::new(Settings {
        insecure_hosts: vec![host.to_string()],
        concurrency_per_host: per_host,
        ..Settings::default()
    })
    .unwrap();
    reset_peak_rss();
    let started = Instant::now();
    let pass = tagpin::pass::run(&[root.to_path_buf()], &FileFilter::default(), &client).await;
    let elapsed = started.elapsed();
    let peak = peak_rss_kib();
    assert!(!pass.has_failures(), "{:?}", pass.failures());
    (
        elapsed,
        client.stats().manifest_requests,
        pass.plan.summary.to_pin,
        peak,
    )
}

/// A bare Git repository whose `main` holds every manifest of `tree` pinned as `plan` would pin
/// it, and the configuration that syncs it: a pass over it has nothing to commit.
fn pinned_repository(tree: &Path, pass: &tagpin::pass::Pass, work: &Path) -> PathBuf {
    let files: Vec<(PathBuf, Vec<u8>)> = pass
        .plan
        .files
        .iter()
        .map(|file| {
            let relative = file.path.strip_prefix(tree).unwrap();
            (Path::new("apps").join(relative), file.updated.clone())
        })
        .collect();
    bare_repo::bare_repo(work, &files)
}

async fn sync_once(config: &tagpin::config::Config, host: &str, cache: &Path) -> Duration {
    let client = Client::new(Settings {
        insecure_hosts: vec![host.to_string()],
        ..Settings::default()
    })
    .unwrap();
    let syncer = tagpin::sync::Syncer::new(config, &client, None, cache).unwrap();
    let started = Instant::now();
    let report = syncer
        .run(tagpin::sync::SyncOptions { dry_run: false })
        .await
        .unwrap();
    let elapsed = started.elapsed();
    assert!(!report.has_failures(), "{:?}", report.failures);
    assert!(
        report
            .groups
            .iter()
            .all(|g| matches!(g.outcome, tagpin::sync::Outcome::NothingToDo)),
        "sync found something to do"
    );
    assert_eq!(client.stats().manifest_requests, IMAGES as u64);
    elapsed
}

fn scan_rate(files: &[(PathBuf, Vec<u8>)]) -> f64 {
    let started = Instant::now();
    let mut fields = 0usize;
    for _ in 0..SCAN_REPEATS {
        for (path, bytes) in files {
            fields += manifest::scan(path, bytes).unwrap().fields.len();
        }
    }
    let elapsed = started.elapsed();
    assert_eq!(fields, files.len() * SCAN_REPEATS);
    (files.len() * SCAN_REPEATS) as f64 / elapsed.as_secs_f64()
}

#[tokio::main]
async fn main() {
    // The Helm variant: values files against plain manifests, per image field.
    if std::env::args().any(|arg| arg == "--helm") {
        helm_variant::run().await;
        return;
    }
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    eprintln!("pushing {IMAGES} images to {host} …");
    let images: Vec<(String, String)> = (0..IMAGES).map(|i| image_name(&host, i)).collect();
    stream::iter(images.iter().enumerate())
        .for_each_concurrent(8, |(i, (_, repo_tag))| {
            let registry = &registry;
            async move {
                let (repo, tag) = repo_tag.split_once(':').unwrap();
                let seed = format!("seed-{i}");
                if i % INDEX_EVERY == 0 {
                    let platforms = [("linux", "amd64"), ("linux", "arm64")];
                    registry
                        .push_index(repo, tag, IndexKind::Oci, &platforms, &seed)
                        .await;
                } else {
                    registry.push_image(repo, tag, &seed).await;
                }
            }
        })
        .await;

    let tree = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for n in 0..MANIFESTS {
        let dir = tree.path().join(format!("team{}", n % 20));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("app-{n}.yaml"));
        let text = deployment(n, &images[n % IMAGES].0);
        std::fs::write(&path, &text).unwrap();
        files.push((path, text.into_bytes()));
    }

    let rate = scan_rate(&files);

    let mut plan_times = Vec::new();
    let mut base_times = Vec::new();
    // Where the time goes: the floor at tagpin's own per-host limit, and plan at the floor's.
    let mut base_at_limit = Vec::new();
    let mut plan_at_floor = Vec::new();
    let mut requests = 0;
    let mut peak = 0;
    for _ in 0..ROUNDS {
        base_times.push(baseline(&host, &images, FLOOR_CONNECTIONS).await);
        base_at_limit.push(baseline(&host, &images, DEFAULT_CONCURRENCY_PER_HOST).await);
        let (elapsed, sent, to_pin, rss) =
            plan_once(&host, tree.path(), DEFAULT_CONCURRENCY_PER_HOST).await;
        assert_eq!(to_pin, MANIFESTS);
        plan_times.push(elapsed);
        requests = sent;
        peak = peak.max(rss.unwrap_or(0));
        plan_at_floor.push(plan_once(&host, tree.path(), FLOOR_CONNECTIONS).await.0);
    }
    let plan = median(plan_times);
    let base = median(base_times);
    let ratio = plan.as_secs_f64() / base.as_secs_f64();
    let base_at_limit = median(base_at_limit);
    let plan_at_floor = median(plan_at_floor);

    // The same manifests, already pinned, in a Git repository: sync has nothing to do.
    let client = Client::new(Settings {
        insecure_hosts: vec![host.to_string()],
        ..Settings::default()
    })
    .unwrap();
    let pass = tagpin::pass::run(
        &[tree.path().to_path_buf()],
        &FileFilter::default(),
        &client,
    )
    .await;
    let work = tempfile::tempdir().unwrap();
    let bare = pinned_repository(tree.path(), &pass, work.path());
    let config_text = format!(
        "repository: {{url: 'file://{}', branch: main}}\npaths: [apps]\nauthor: {{name: bench, email: bench@example.com}}\n",
        bare.display()
    );
    let config = tagpin::config::Config::parse(&config_text, Path::new("tagpin.yaml")).unwrap();
    let cache = work.path().join("cache");
    sync_once(&config, &host, &cache).await; // clones the mirror once, as a controller's first pass
    let mut sync_times = Vec::new();
    for _ in 0..ROUNDS {
        sync_times.push(sync_once(&config, &host, &cache).await);
    }
    let sync = median(sync_times);
    let sync_ratio = sync.as_secs_f64() / plan.as_secs_f64();

    println!("tagpin plan benchmark: {MANIFESTS} manifests, {IMAGES} distinct images (1 in {INDEX_EVERY} an OCI index), concurrency {DEFAULT_CONCURRENCY_PER_HOST}/host, median of {ROUNDS}");
    println!(
        "  plan wall time            {:>9.1} ms",
        plan.as_secs_f64() * 1e3
    );
    println!(
        "  registry floor ({FLOOR_CONNECTIONS} conns)  {:>9.1} ms",
        base.as_secs_f64() * 1e3
    );
    println!("  ratio plan / floor        {ratio:>9.2}   (target <= 1.1)");
    println!(
        "  floor at {DEFAULT_CONCURRENCY_PER_HOST} conns            {:>9.1} ms   (plan / it: {:.2})",
        base_at_limit.as_secs_f64() * 1e3,
        plan.as_secs_f64() / base_at_limit.as_secs_f64()
    );
    println!(
        "  plan at {FLOOR_CONNECTIONS}/host            {:>9.1} ms   (/ floor: {:.2})",
        plan_at_floor.as_secs_f64() * 1e3,
        plan_at_floor.as_secs_f64() / base.as_secs_f64()
    );
    println!(
        "  scan of all manifests     {:>9.1} ms   (no network)",
        MANIFESTS as f64 / rate * 1e3
    );
    println!(
        "  sync, nothing changed     {:>9.1} ms",
        sync.as_secs_f64() * 1e3
    );
    println!("  ratio sync / plan         {sync_ratio:>9.2}   (target <= 1.2)");
    println!("  manifest requests sent    {requests:>9}   (distinct refs: {IMAGES})");
    println!(
        "  peak RSS during plan      {:>9.1} MB  (target <= 100)",
        peak as f64 / 1024.0
    );
    println!("  scan throughput           {rate:>9.0} manifests/s (target >= 20000)");
}
