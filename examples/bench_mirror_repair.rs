//! Benchmark of what repairing a damaged Git mirror costs a pass (issue #43).
//!
//! Run: `cargo run --release --example bench_mirror_repair`.
//!
//! For repositories of 3 manifests (the size of the tests), 1,000 and 10,000 (about 600 bytes
//! each, all distinct), over `file://`, it measures with the library a pass's Git work
//! (`Mirror::fetch`, `require_tip`, `read_files` of every manifest):
//! - the first pass, into an empty cache (the clone);
//! - an ordinary pass on a good mirror (nothing new to fetch);
//! - a pass that meets a truncated pack: the failed read that finds the damage, then
//!   `Mirror::repair` (move aside, clone again) and the read on the fresh clone.
//!
//! Medians of 3 rounds. Figures are printed, never asserted: speed is measured here, not
//! tested. Over a network the clone costs what a first pass costs there.

#[path = "support/bare_repo.rs"]
mod bare_repo;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tagpin::git::{Credentials, GitError, Mirror};
use tagpin::manifest::FileFilter;

const ROUNDS: usize = 3;
const SIZES: [usize; 3] = [3, 1_000, 10_000];

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

fn manifests(n: usize) -> Vec<(PathBuf, Vec<u8>)> {
    (0..n)
        .map(|i| {
            let text = format!(
                "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app-{i}\n  namespace: team-{}\nspec:\n  replicas: 2\n  template:\n    metadata:\n      labels: {{app: app-{i}}}\n    spec:\n      containers:\n      - name: app\n        image: registry.example/acme/app-{i}:1.{}\n        args: [--port, \"{}\"]\n",
                i % 10,
                i % 7,
                8000 + i
            );
            (PathBuf::from(format!("apps/app-{i}.yaml")), text.into_bytes())
        })
        .collect()
}

/// What a pass reads from the mirror; the number of files read.
fn pass(mirror: &Mirror, filter: &FileFilter) -> Result<usize, GitError> {
    mirror.fetch("main", "tagpin/")?;
    let tip = mirror.require_tip("main")?;
    Ok(mirror
        .read_files(tip, &["apps".to_string()], filter)?
        .files
        .len())
}

/// Cuts every pack of the mirror in `cache` to half its length, as a full disk leaves it.
fn truncate_packs(cache: &Path) {
    for entry in walkdir::WalkDir::new(cache) {
        let path = entry.unwrap().into_path();
        if path.extension().is_some_and(|e| e == "pack")
            && !path.to_string_lossy().contains(".damaged")
        {
            let bytes = std::fs::read(&path).unwrap();
            let temporary = path.with_extension("cut");
            std::fs::write(&temporary, &bytes[..bytes.len() / 2]).unwrap();
            std::fs::rename(&temporary, &path).unwrap();
        }
    }
}

fn dir_bytes(dir: &Path) -> u64 {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum()
}

fn main() {
    let filter = FileFilter::with_default_include(&[], &[]).unwrap();
    println!(
        "manifests | clone | ordinary pass | finding the damage | repair | read after | mirror"
    );
    for size in SIZES {
        let work = tempfile::tempdir().unwrap();
        let remote = bare_repo::bare_repo(work.path(), &manifests(size));
        let url = format!("file://{}", remote.display());
        let (mut clone, mut ordinary, mut finding, mut repair, mut after) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut mirror_size = 0;
        for round in 0..ROUNDS {
            let cache = work.path().join(format!("cache-{round}"));
            let started = Instant::now();
            let mirror = Mirror::open(&cache, &url, Credentials::None).unwrap();
            assert_eq!(pass(&mirror, &filter).unwrap(), size);
            clone.push(started.elapsed());
            let started = Instant::now();
            assert_eq!(pass(&mirror, &filter).unwrap(), size);
            ordinary.push(started.elapsed());
            drop(mirror);
            mirror_size = dir_bytes(&cache);

            truncate_packs(&cache);
            let started = Instant::now();
            let mirror = Mirror::open(&cache, &url, Credentials::None).unwrap();
            let found = pass(&mirror, &filter).unwrap_err();
            assert!(found.damage().is_some(), "{found}");
            finding.push(started.elapsed());
            let started = Instant::now();
            mirror.repair(found, "main", "tagpin/").unwrap();
            repair.push(started.elapsed());
            let started = Instant::now();
            assert_eq!(pass(&mirror, &filter).unwrap(), size);
            after.push(started.elapsed());
            assert_eq!(mirror.take_repairs(), 1);
        }
        println!(
            "{size} | {:?} | {:?} | {:?} | {:?} | {:?} | {} KiB",
            median(clone),
            median(ordinary),
            median(finding),
            median(repair),
            median(after),
            mirror_size / 1024
        );
    }
}
