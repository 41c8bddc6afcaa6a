//! The Helm variant of `bench_plan`: `cargo run --release --example bench_plan -- --helm`.
//!
//! Kept in its own file so the plain benchmark and this one change apart. It pushes the same 500
//! images, then writes two trees naming them with the same number of image fields: 2,000
//! Deployment manifests (one `image:` each) and 1,000 Helm values files (two images each: a
//! bitnami-style `registry`/`repository`/`tag`/`digest: ""` block and an `image:` string of a
//! sidecar). It reports, median of 3, the wall time of a full `plan` pass over each tree and
//! the time per image field, and the scan alone (no network) per image field: Helm values must
//! be no slower per image field than plain manifests.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tagpin::registry::DEFAULT_CONCURRENCY_PER_HOST;

use super::registry_support::{Mode, TestRegistry};
use super::{
    deployment, plan_once, push_images, scan_repeatedly, PhaseMarks, IMAGES, ROUNDS, SCAN_REPEATS,
};

const VALUES_FILES: usize = 1_000;
const FIELDS: usize = 2 * VALUES_FILES;

/// A values file with two images: `images[a]` as a bitnami block, `images[b]` as a string.
fn values_file(n: usize, host: &str, a: &str, b: &str) -> String {
    let (repository, tag) = a.split_once(':').unwrap();
    format!(
        "# generated for the benchmark: release {n}\n\
         global:\n  imageRegistry: \"\"\n\
         replicaCount: 2\n\
         image:\n  registry: {host}\n  repository: {repository}\n  tag: {tag}\n  digest: \"\"\n  pullPolicy: IfNotPresent\n  pullSecrets: []\n\
         service:\n  type: ClusterIP\n  ports: {{http: 80, https: 443}}\n\
         sidecars:\n  - name: proxy\n    image: \"{host}/{b}\"\n    ports: [{{containerPort: 8080}}]\n\
         resources:\n  requests: {{cpu: 10m, memory: 16Mi}}\n"
    )
}

fn write_tree(root: &Path, files: &[(String, String)]) -> Vec<(PathBuf, Vec<u8>)> {
    files
        .iter()
        .map(|(relative, text)| {
            let path = root.join(relative);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, text).unwrap();
            (path, text.clone().into_bytes())
        })
        .collect()
}

/// The scan alone, per image field, over `files` (read already).
fn scan_per_field(files: &[(PathBuf, Vec<u8>)], fields_each: usize) -> Duration {
    let (elapsed, fields) = scan_repeatedly(files);
    assert_eq!(fields, files.len() * fields_each * SCAN_REPEATS);
    elapsed / (fields as u32)
}

pub(crate) async fn run() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    eprintln!("pushing {IMAGES} images to {host} …");
    let images = push_images(&registry, &host).await;

    let plain_dir = tempfile::tempdir().unwrap();
    let helm_dir = tempfile::tempdir().unwrap();
    let plain: Vec<(String, String)> = (0..FIELDS)
        .map(|n| {
            (
                format!("team{}/app-{n}.yaml", n % 20),
                deployment(n, &images[n % IMAGES].0),
            )
        })
        .collect();
    let helm: Vec<(String, String)> = (0..VALUES_FILES)
        .map(|n| {
            let (a, b) = (&images[(2 * n) % IMAGES].1, &images[(2 * n + 1) % IMAGES].1);
            (
                format!("team{}/release-{n}/values-production.yaml", n % 20),
                values_file(n, &host, a, b),
            )
        })
        .collect();
    let plain_files = write_tree(plain_dir.path(), &plain);
    let helm_files = write_tree(helm_dir.path(), &helm);

    let scan_plain = scan_per_field(&plain_files, 1);
    let scan_helm = scan_per_field(&helm_files, 2);

    let (mut plain_times, mut helm_times) = (Vec::new(), Vec::new());
    let marks = PhaseMarks::default();
    for _ in 0..ROUNDS {
        let run = plan_once(
            &host,
            plain_dir.path(),
            DEFAULT_CONCURRENCY_PER_HOST,
            &marks,
        )
        .await;
        assert_eq!(run.to_pin, FIELDS);
        plain_times.push(run.wall);
        let run = plan_once(&host, helm_dir.path(), DEFAULT_CONCURRENCY_PER_HOST, &marks).await;
        assert_eq!(run.to_pin, FIELDS);
        helm_times.push(run.wall);
    }
    let (plain_plan, helm_plan) = (median(plain_times), median(helm_times));
    let per_field = |d: Duration| d.as_secs_f64() * 1e6 / FIELDS as f64;

    println!("tagpin plan benchmark, Helm variant: {FIELDS} image fields, {IMAGES} distinct images, median of {ROUNDS}");
    println!(
        "  plan, {FIELDS} manifests        {:>9.1} ms   {:>7.1} µs/field",
        plain_plan.as_secs_f64() * 1e3,
        per_field(plain_plan)
    );
    println!(
        "  plan, {VALUES_FILES} values files     {:>9.1} ms   {:>7.1} µs/field",
        helm_plan.as_secs_f64() * 1e3,
        per_field(helm_plan)
    );
    println!(
        "  ratio helm / plain (plan)     {:>9.2}   (target <= 1.0)",
        helm_plan.as_secs_f64() / plain_plan.as_secs_f64()
    );
    println!(
        "  scan, manifests               {:>9.2} µs/field   (no network)",
        scan_plain.as_secs_f64() * 1e6
    );
    println!(
        "  scan, values files            {:>9.2} µs/field   (no network)",
        scan_helm.as_secs_f64() * 1e6
    );
    println!(
        "  ratio helm / plain (scan)     {:>9.2}   (target <= 1.0)",
        scan_helm.as_secs_f64() / scan_plain.as_secs_f64()
    );
}

/// The middle value of `times`.
fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}
