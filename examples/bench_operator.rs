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
//!   and writes during the next full interval after all are Ready, when nothing changes.
//!
//! Figures are printed, never asserted: speed is measured here, not tested.

#[path = "support/binary.rs"]
mod binary;
#[path = "../tests/it/support/mod.rs"]
mod support;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use binary::tagpin_binary;
use serde_json::json;
use support::git::BareRepo;
use support::kube::{deployment, pod, running_pod_status, KubeServer};
use support::registry::{free_port, Mode, TestRegistry};

/// A count from the environment, or its default.
fn env_count(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
const NS: &str = "fleet";

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

fn ready_count(kube: &KubeServer) -> usize {
    kube.list("PinnedRepository", Some(NS))
        .iter()
        .filter(|o| {
            o["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
        .count()
}

#[tokio::main]
async fn main() {
    let objects = env_count("BENCH_OBJECTS", 100);
    let images = env_count("BENCH_IMAGES", 10);
    let idle = env_count("BENCH_IDLE_SECONDS", 0);
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
    let mut repos = Vec::new();
    for n in 0..objects {
        let image = n % images;
        let name = format!("app-{n}");
        let repo = BareRepo::create_in(
            base.path(),
            &format!("{name}.git"),
            &[(
                "apps/app.yaml",
                &manifest(&name, &format!("{host}/acme/app-{image}:1")),
            )],
        );
        kube.apply(json!({
            "apiVersion": "tagpin.dev/v1alpha1",
            "kind": "PinnedRepository",
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "repository": {"url": repo.file_url()},
                "paths": ["apps"],
                "registries": {"insecure": [host]},
                "verify": {"default_namespace": NS},
            },
        }));
        // What Argo CD applies from the pin, rolled out, its pod on the pinned digest.
        let digest = &pushed[image].manifest;
        let pinned = format!("{host}/acme/app-{image}:1@{digest}");
        let image_id = format!("{host}/acme/app-{image}@{digest}");
        kube.apply(deployment(
            NS,
            &name,
            &[("app", &name)],
            &[("app", &pinned)],
        ));
        kube.set_status(
            "Deployment",
            NS,
            &name,
            json!({"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1,
                   "readyReplicas": 1, "availableReplicas": 1}),
        );
        let pod_name = format!("{name}-1");
        kube.apply(pod(NS, &pod_name, &[("app", &name)], &[("app", &pinned)]));
        kube.set_pod_status(
            NS,
            &pod_name,
            running_pod_status(&[("app", &pinned, &image_id)]),
        );
        repos.push(repo);
    }
    let before: usize = kube.request_counts().values().sum();

    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = kube.kubeconfig(dir.path());
    let port = free_port();
    let started = Instant::now();
    let mut child = tokio::process::Command::new(&binary)
        .args([
            "operator",
            "--allow-local-repositories",
            "--interval",
            &match idle {
                0 => "1h".to_string(),
                seconds => format!("{seconds}s"),
            },
            "--listen",
        ])
        .arg(format!("127.0.0.1:{port}"))
        .arg("--cache-dir")
        .arg(dir.path().join("cache"))
        .env("HOME", dir.path())
        .env("KUBECONFIG", &kubeconfig)
        .env("RUST_LOG", "warn")
        .env_remove("DOCKER_CONFIG")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = child.id().unwrap();
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut peak = 0;
    while ready_count(&kube) < objects {
        assert!(Instant::now() < deadline, "not all Ready after 10 minutes");
        peak = peak.max(peak_rss_kib(pid).unwrap_or(0));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let all_ready = started.elapsed();
    peak = peak.max(peak_rss_kib(pid).unwrap_or(0));
    let metrics = reqwest::get(format!("http://127.0.0.1:{port}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let registry_requests: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("tagpin_registry_requests_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    let pinned = repos.iter().filter(|r| r.log("main").len() == 2).count();
    let mirrors = disk_bytes(&dir.path().join("cache"));
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
            tokio::time::sleep(Duration::from_secs(seconds as u64)).await;
            let after = kube.request_counts();
            Some((
                after.values().sum::<usize>() - all,
                writes(&after) - written,
                seconds,
            ))
        }
    };
    std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    let _ = tokio::time::timeout(Duration::from_secs(60), child.wait()).await;

    println!("bench_operator: {objects} PinnedRepository objects, {objects} repositories, {images} distinct tags, one registry");
    println!(
        "  all Ready (pinned and verified Converged): {:.2} s",
        all_ready.as_secs_f64()
    );
    println!("  repositories pinned with one commit each: {pinned}/{objects}");
    println!("  registry requests: {registry_requests} (distinct tags: {images})");
    println!("  API requests: {total} (the benchmark's own reads excluded)");
    let mut by_kind: Vec<_> = counts.iter().collect();
    by_kind.sort_by(|a, b| b.1.cmp(a.1));
    for ((verb, resource), n) in by_kind.iter().take(12) {
        println!("    {verb:>6} {resource}: {n}");
    }
    println!("  peak memory (VmHWM): {:.1} MiB", peak as f64 / 1024.0);
    println!(
        "  mirrors on disk: {:.1} MiB ({:.0} KiB per repository)",
        mirrors as f64 / (1024.0 * 1024.0),
        mirrors as f64 / 1024.0 / objects as f64
    );
    if let Some((requests, writes, seconds)) = at_rest {
        println!(
            "  at rest, one interval ({seconds} s) after all Ready: {requests} API requests \
             ({:.2} per object), {writes} writes",
            requests as f64 / objects as f64
        );
    }
}
