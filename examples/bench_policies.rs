//! Benchmark of following versions (`images.policies`) at scale, against a real local registry.
//!
//! Run: `cargo run --release --example bench_policies` (needs Debian's `docker-registry` and
//! `git`).
//!
//! What it really does (scaled from issue #12's "500 images × 200 tags" to what loads in
//! seconds on a 2-core machine):
//! - pushes one image to each of 50 repositories of a `docker-registry` on loopback and PUTs
//!   that manifest under 200 tags `1.<minor>.<patch>` (minor 0–19, patch 0–9): 10,000 tags;
//! - writes 500 Deployments into a bare Git repository (`tests/it/support/git.rs`), each naming
//!   one of the 50 repositories (10 image fields per repository) by an unpinned tag
//!   `1.<m>.0`, m in 0–9;
//! - gives every repository its own `images.policies` entry, a semver range
//!   `>=1.0.0, <1.<10 + r % 10>.0`, so each of the 500 fields moves to its repository's
//!   `1.<9 + r % 10>.9`: 50 chosen tags;
//! - runs `tagpin sync --dry-run` in commit mode through the library (`sync::Syncer`, as the
//!   binary does): fetch the mirror, read and scan the tip, list tags, resolve, plan.
//!
//! It reports, printed and never asserted:
//! - the requests the pass sent to the registry, counted by a recording proxy in front of it
//!   (`FaultProxy` of `tests/it/support/registry.rs`) on one extra pass, split into tag-list
//!   pages, manifest requests and others, against the target: one tag-list walk per repository
//!   (its pages counted by the floor client, following `Link`) plus one manifest request per
//!   chosen tag;
//! - the wall time of the whole pass (median of 3, direct to the registry, warm Git mirror) and
//!   of its registry part alone (`SyncReport::resolve_time`: tag lists and manifests), against
//!   a physical floor: a bare concurrent client that walks the same tag lists, then sends one
//!   manifest HEAD per chosen tag, at the same per-host concurrency (median of 3); and the
//!   ratios.

#[path = "../tests/it/support"]
#[allow(dead_code)]
mod support {
    #[path = "git.rs"]
    pub mod git;
    #[path = "registry.rs"]
    pub mod registry;
}

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use futures::stream::{self, StreamExt};
use support::git::BareRepo;
use support::registry::{FaultProxy, ImageKind, Mode, TestRegistry};
use tagpin::config::Config;
use tagpin::registry::{Client, Settings};
use tagpin::sync::{SyncOptions, SyncReport, Syncer, TAG_PAGE_SIZE};

const REPOSITORIES: usize = 50;
const TAGS: usize = 200;
const FIELDS: usize = 500;
const ROUNDS: usize = 3;

fn repo_name(r: usize) -> String {
    format!("bench/app{r}")
}

fn tag(n: usize) -> String {
    format!("1.{}.{}", n / 10, n % 10)
}

/// The tag the policy of repository `r` chooses.
fn chosen(r: usize) -> String {
    format!("1.{}.9", 9 + r % 10)
}

fn deployment(n: usize, image: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app-{n}\n  namespace: bench\n\
         spec:\n  selector:\n    matchLabels:\n      app: app-{n}\n  template:\n    metadata:\n      labels:\n        app: app-{n}\n\
         \x20   spec:\n      containers:\n        - name: app\n          image: {image}\n"
    )
}

fn bare_repo(host: &str) -> BareRepo {
    let files: Vec<(String, String)> = (0..FIELDS)
        .map(|n| {
            let r = n % REPOSITORIES;
            let current = format!("1.{}.0", (n / REPOSITORIES) % 10);
            (
                format!("apps/team{}/app-{n}.yaml", n % 20),
                deployment(n, &format!("{host}/{}:{current}", repo_name(r))),
            )
        })
        .collect();
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .collect();
    BareRepo::create(&refs)
}

fn config(dir: &Path, url: &str, host: &str) -> Config {
    let mut text = format!(
        "repository:\n  url: {url}\n  branch: main\nmode: commit\n\
         author: {{name: tagpin-bot, email: bot@example.com}}\npaths: [apps]\n\
         registries:\n  insecure: [\"{host}\"]\nimages:\n  policies:\n"
    );
    for r in 0..REPOSITORIES {
        text.push_str(&format!(
            "  - {{match: '**/{}', semver: '>=1.0.0, <1.{}.0'}}\n",
            repo_name(r),
            10 + r % 10
        ));
    }
    let path = dir.join(format!("tagpin-{}.yaml", host.replace(':', "-")));
    std::fs::write(&path, &text).unwrap();
    Config::load(&path).unwrap_or_else(|e| panic!("{:?}", e.problems))
}

fn client(config: &Config) -> Client {
    let c = &config.registries;
    Client::new(Settings {
        insecure_hosts: c.insecure.clone(),
        concurrency_per_host: c.concurrency,
        request_timeout: Duration::from_secs(c.timeout_seconds),
        resolve_budget: Duration::from_secs(c.budget_seconds),
        ..Settings::default()
    })
    .unwrap()
}

/// One dry-run sync pass; returns its wall time and report.
async fn sync_once(config: &Config, cache: &Path) -> (Duration, SyncReport) {
    let registry = client(config);
    let syncer = Syncer::new(config, &registry, None, cache).unwrap();
    let started = Instant::now();
    let report = syncer.run(SyncOptions { dry_run: true }).await.unwrap();
    let elapsed = started.elapsed();
    assert!(!report.has_failures(), "{:?}", report.failures);
    (elapsed, report)
}

fn changes(report: &SyncReport) -> usize {
    report.groups.iter().map(|g| g.changes.len()).sum()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Walks one repository's tag list as a client must, following `Link`; returns the pages.
async fn walk_tags(http: &reqwest::Client, host: &str, repo: &str) -> usize {
    let mut url = format!("http://{host}/v2/{repo}/tags/list?n={TAG_PAGE_SIZE}");
    let mut pages = 0;
    loop {
        let response = http.get(&url).send().await.unwrap();
        assert!(response.status().is_success(), "tag list of {repo}");
        pages += 1;
        let next = response
            .headers()
            .get("link")
            .and_then(|l| l.to_str().ok())
            .and_then(|l| Some(l.split_once('<')?.1.split_once('>')?.0.to_string()));
        let body = response.bytes().await.unwrap();
        assert!(!body.is_empty());
        match next {
            Some(path) => url = format!("http://{host}{path}"),
            None => return pages,
        }
    }
}

/// The floor: every tag list, then one manifest HEAD per chosen tag, `concurrency` at a time.
/// Returns the wall time and the tag-list pages.
async fn floor(host: &str, concurrency: usize) -> (Duration, usize) {
    let http = reqwest::Client::new();
    let started = Instant::now();
    let pages: usize = stream::iter((0..REPOSITORIES).map(|r| {
        let http = http.clone();
        async move { walk_tags(&http, host, &repo_name(r)).await }
    }))
    .buffer_unordered(concurrency)
    .collect::<Vec<_>>()
    .await
    .into_iter()
    .sum();
    let repo_tags = (0..REPOSITORIES).map(|r| (repo_name(r), chosen(r)));
    support::registry::head_manifests(&http, host, repo_tags, concurrency).await;
    (started.elapsed(), pages)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[tokio::main]
async fn main() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    eprintln!("loading {REPOSITORIES} repositories × {TAGS} tags into {host} …");
    let loading = Instant::now();
    let media_type = ImageKind::Oci.manifest_media_type();
    stream::iter(0..REPOSITORIES)
        .for_each_concurrent(8, |r| {
            let registry = &registry;
            async move {
                let repo = repo_name(r);
                let image = registry
                    .push_image(&repo, &tag(0), &format!("seed-{r}"))
                    .await;
                let bytes = registry.manifest_bytes(&repo, &image.manifest).await;
                for n in 1..TAGS {
                    registry
                        .push_manifest(&repo, &tag(n), media_type, &bytes)
                        .await;
                }
            }
        })
        .await;
    let loaded = loading.elapsed();
    eprintln!("loaded in {:.1} s", loaded.as_secs_f64());

    let proxy = FaultProxy::start(&registry.base_url(), Vec::new()).await;
    let work = tempfile::tempdir().unwrap();
    let direct_repo = bare_repo(&host);
    let counted_repo = bare_repo(&proxy.host());
    let direct = config(work.path(), &direct_repo.file_url(), &host);
    let counted = config(work.path(), &counted_repo.file_url(), &proxy.host());
    let concurrency = direct.registries.concurrency;

    // The counting pass, through the proxy, on its own cold mirror; the mirror fetch and the
    // clone are Git, not registry, traffic.
    let (_, report) = sync_once(&counted, &work.path().join("cache-counted")).await;
    let moved = changes(&report);
    let requests = proxy.requests();
    let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
    for request in &requests {
        let kind = if request.path.ends_with("/tags/list") {
            "tag list pages"
        } else if request.path.contains("/manifests/") {
            "manifest requests"
        } else {
            "other"
        };
        *kinds.entry(kind).or_default() += 1;
    }

    // Timed passes, direct, on a warm mirror.
    let cache = work.path().join("cache-direct");
    sync_once(&direct, &cache).await;
    let mut pass_times = Vec::new();
    let mut resolve_times = Vec::new();
    let mut floor_times = Vec::new();
    let mut pages = 0;
    for _ in 0..ROUNDS {
        let (elapsed, p) = floor(&host, concurrency).await;
        floor_times.push(elapsed);
        pages = p;
        let (elapsed, report) = sync_once(&direct, &cache).await;
        assert_eq!(changes(&report), FIELDS);
        pass_times.push(elapsed);
        resolve_times.push(report.resolve_time);
    }
    let pass = median(pass_times);
    let resolve = median(resolve_times);
    let base = median(floor_times);

    let target_manifests = REPOSITORIES;
    let count = |k: &str| kinds.get(k).copied().unwrap_or(0);
    println!(
        "tagpin policies benchmark: {FIELDS} image fields with policies over {REPOSITORIES} repositories × {TAGS} tags, \
         concurrency {concurrency}/host, median of {ROUNDS}"
    );
    println!(
        "  loading the registry       {:>9.1} s",
        loaded.as_secs_f64()
    );
    println!("  fields moved               {moved:>9}   (expected {FIELDS})");
    println!(
        "  tag list pages             {:>9}   (target {pages}: one walk per repository)",
        count("tag list pages")
    );
    println!(
        "  manifest requests          {:>9}   (target {target_manifests}: one per chosen tag)",
        count("manifest requests")
    );
    println!(
        "  other requests             {:>9}   (target 0)",
        count("other")
    );
    println!(
        "  total                      {:>9}   (target {})",
        requests.len(),
        pages + target_manifests
    );
    println!("  sync --dry-run wall time   {:>9.1} ms", ms(pass));
    println!("  of which registry          {:>9.1} ms", ms(resolve));
    println!("  bare floor (lists + HEADs) {:>9.1} ms", ms(base));
    println!(
        "  ratio pass / floor         {:>9.2}",
        pass.as_secs_f64() / base.as_secs_f64()
    );
    println!(
        "  ratio registry / floor     {:>9.2}",
        resolve.as_secs_f64() / base.as_secs_f64()
    );
}
