//! Benchmark of `tagpin plan` on a generated repository against a real local registry.
//!
//! Run: `cargo run --release --example bench_plan` (needs Debian's `docker-registry`).
//!
//! It pushes 500 distinct images to a `docker-registry` on loopback (one in ten a multi-arch
//! OCI index) and writes 2,000 Deployment manifests naming them. Then, in each of `ROUNDS`
//! rounds, it runs once each, in an order rotated from round to round:
//! - the registry floor: a bare concurrent HEAD client sending the same 500 requests on
//!   `FLOOR_CONNECTIONS` connections (and on tagpin's per-host limit, for comparison);
//! - the floor again on a current-thread runtime of its own (the bare client's cheapest form);
//! - a full plan pass (walk, read, scan, resolve, plan, diffs), at the default per-host limit
//!   and at the floor's connection count, on a current-thread runtime as `tagpin plan` runs it
//!   (`Command::is_one_shot`); and once on the bench's multi-thread runtime, to compare;
//! - the resolution alone (the 500 references, no files);
//! - the pass as it was at e8876cd, before this round's profiling (see `plan_as_last_round`);
//! - `sync` when nothing changed, on a Git repository holding the same manifests already
//!   pinned (a fetch that brings nothing, the scan, the HEADs, no commit);
//! - `tagpin plan --insecure-registry HOST <tree>` as a user meets it: the release binary as
//!   a whole process, from spawn to exit (start-up, runtime, client setup, reading, output and
//!   exit included), its stdout drained; and `tagpin plan` on an empty directory, what the
//!   process costs around the pass. The floor run before it in the round is its pair.
//!
//! Every run starts with a new client, so each opens its connections cold, like the floor.
//! The machine is shared, so absolute times move between runs: the ratios are taken within
//! a round (adjacent runs) and reported as median, min and max over the rounds. Also
//! reported: CPU time per run of tagpin's process and of the registry's, connections opened
//! per run, the phases of the plan pass (from its `tracing` debug events), manifest
//! requests sent, peak RSS during the pass, and scanning throughput without network.
//!
//! Figures are printed, never asserted: speed is measured here, not tested.
//!
//! `-- --helm` runs the Helm variant instead (`support/bench_plan_helm.rs`); `-- --signed`
//! the variant with every image signed (`support/bench_plan_signed.rs`), `-- --provenance` the
//! same with every image's build provenance required.
//!
//! `BENCH_PROFILE=<kind>` runs one kind of run `BENCH_ROUNDS` times (default 50) back to back
//! and prints its wall and CPU per run, for a profiler (`perf record -p <pid>`; see
//! [`profile`]). `BENCH_PROFILE=serve` keeps the registry and the tree until Ctrl-C and
//! prints the `tagpin plan` command that plans them, to profile the whole process.

#[path = "support/bare_repo.rs"]
mod bare_repo;
#[path = "support/binary.rs"]
mod binary;
#[path = "support/bench_plan_helm.rs"]
mod helm_variant;
#[path = "../tests/it/support/registry.rs"]
#[allow(dead_code)]
mod registry_support;
#[path = "support/bench_plan_signed.rs"]
mod signed_variant;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::stream::{self, StreamExt};
use registry_support::{IndexKind, Mode, TestRegistry};
use tagpin::manifest::{self, FileFilter};
use tagpin::reference::Reference;
use tagpin::registry::{Client, Settings, DEFAULT_CONCURRENCY_PER_HOST};

const MANIFESTS: usize = 2_000;
const IMAGES: usize = 500;
const REPOSITORIES: usize = 50;
/// Rounds measured (after one warm-up round); `BENCH_ROUNDS` overrides.
const ROUNDS: usize = 7;
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

/// Pushes the `IMAGES` images (every `INDEX_EVERY`th an OCI index of two platforms) to
/// `registry`, eight at a time; returns their names as `image_name` gives them.
async fn push_images(registry: &TestRegistry, host: &str) -> Vec<(String, String)> {
    let images: Vec<(String, String)> = (0..IMAGES).map(|i| image_name(host, i)).collect();
    stream::iter(images.iter().enumerate())
        .for_each_concurrent(8, |(i, (_, repo_tag))| async move {
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
        })
        .await;
    images
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

/// `getconf CLK_TCK` on Linux: the unit of utime and stime in `/proc/<pid>/stat`.
const CLOCK_TICKS_PER_SECOND: f64 = 100.0;

/// utime + stime of a process, in clock ticks, dead threads included.
fn cpu_ticks(pid: &str) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    // After `(comm)`: state is field 0, utime 11, stime 12.
    fields
        .get(11)
        .and_then(|u| u.parse::<u64>().ok())
        .unwrap_or(0)
        + fields
            .get(12)
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(0)
}

/// The pid of our `docker-registry` child.
fn registry_pid() -> String {
    let me = std::process::id().to_string();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let pid = entry.file_name().to_string_lossy().to_string();
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some((head, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let ppid = rest.split_whitespace().nth(1).unwrap_or("");
        if ppid == me && head.contains("(docker-registr") {
            return pid;
        }
    }
    panic!("no docker-registry child");
}

/// Wall time, and connections open at the end.
async fn baseline(
    host: &str,
    images: &[(String, String)],
    connections: usize,
) -> (Duration, usize) {
    let http = reqwest::Client::new();
    let started = Instant::now();
    let repo_tags = images.iter().map(|(_, repo_tag)| {
        let (repo, tag) = repo_tag.split_once(':').unwrap();
        (repo.to_string(), tag.to_string())
    });
    registry_support::head_manifests(&http, host, repo_tags, connections).await;
    (started.elapsed(), connections_to(port_of(host)))
}

fn port_of(host: &str) -> u16 {
    host.rsplit_once(':').unwrap().1.parse().unwrap()
}

/// What one plan pass measured.
struct PlanRun {
    wall: Duration,
    requests: u64,
    to_pin: usize,
    peak_rss_kib: Option<u64>,
    open_at_end: usize,
    /// Instants of the pass's phase events, from its start.
    phases: Vec<(String, Duration)>,
}

/// A new registry client for the plain-HTTP bench registry at `host`, `per_host` connections:
/// every run starts cold, as the floor does.
fn client_for(host: &str, per_host: usize) -> Client {
    Client::new(Settings {
        insecure_hosts: vec![host.to_string()],
        concurrency_per_host: per_host,
        ..Settings::default()
    })
    .unwrap()
}

async fn plan_once(host: &str, root: &Path, per_host: usize, marks: &PhaseMarks) -> PlanRun {
    let client = client_for(host, per_host);
    reset_peak_rss();
    marks.clear();
    let started = Instant::now();
    let pass = tagpin::pass::run(&[root.to_path_buf()], &FileFilter::default(), &client).await;
    let wall = started.elapsed();
    let peak_rss_kib = peak_rss_kib();
    assert!(!pass.has_failures(), "{:?}", pass.failures());
    PlanRun {
        wall,
        requests: client.stats().manifest_requests,
        to_pin: pass.plan.summary.to_pin,
        peak_rss_kib,
        open_at_end: connections_to(port_of(host)),
        phases: marks.since(started),
    }
}

/// The pass as it was before issue #16's last changes, for comparison in the same rounds:
/// every file read before the first is scanned, and the whole plan made after the last
/// answer. Built from the same public pieces `pass::run` uses.
async fn plan_as_before(host: &str, root: &Path) -> (Duration, usize) {
    use tagpin::pipeline::{self, ImageSelection};
    use tagpin::policy::Follow;
    let client = client_for(host, DEFAULT_CONCURRENCY_PER_HOST);
    let started = Instant::now();
    let (found, references) = tokio::sync::mpsc::unbounded_channel();
    let paths = vec![root.to_path_buf()];
    let scanning = tokio::task::spawn_blocking(move || {
        let follow = Follow::default();
        let gathered = pipeline::gather_working_tree(&paths, &FileFilter::default());
        pipeline::scan_with(gathered, &ImageSelection::default(), |file| {
            for reference in
                tagpin::plan::references_to_resolve(std::slice::from_ref(file), &follow)
            {
                let _ = found.send(vec![reference]);
            }
        })
    });
    let resolutions = client.resolve_as_found(references, |_, _| {}).await;
    let scanned = scanning.await.unwrap();
    let plan = tagpin::plan::plan(&scanned.files, &resolutions, &Follow::default());
    let elapsed = started.elapsed();
    assert_eq!(plan.summary.to_pin, MANIFESTS);
    (elapsed, connections_to(port_of(host)))
}

/// The pass as it was before the wake-up changes of issue #16's profiling round (commit
/// e8876cd): every image field handed to the resolver (2,000 hand-overs, not 500), every
/// answer handed to the planning thread on its own (500 wake-ups), on the multi-thread
/// runtime. Built from the same public pieces `pass::run` uses, for comparison in the same
/// rounds.
async fn plan_as_last_round(host: &str, root: &Path) -> (Duration, usize) {
    use tagpin::pipeline::{self, ImageSelection};
    use tagpin::policy::Follow;
    let client = client_for(host, DEFAULT_CONCURRENCY_PER_HOST);
    let started = Instant::now();
    let (found, references) = tokio::sync::mpsc::unbounded_channel();
    let (answered, answers) = std::sync::mpsc::channel();
    let paths = vec![root.to_path_buf()];
    let planning = tokio::task::spawn_blocking(move || {
        let follow = Follow::default();
        let scanned = pipeline::scan_working_tree_with(
            &paths,
            &FileFilter::default(),
            &ImageSelection::default(),
            |file| {
                for reference in
                    tagpin::plan::references_to_resolve(std::slice::from_ref(file), &follow)
                {
                    let _ = found.send(vec![reference]);
                }
            },
        );
        drop(found);
        let mut planner = tagpin::plan::Planner::new(&scanned.files, &follow);
        for (key, result) in answers {
            planner.answer(key, result);
        }
        planner.finish()
    });
    client
        .resolve_as_found(references, |key, result| {
            let _ = answered.send((key.clone(), result.clone()));
        })
        .await;
    drop(answered);
    let plan = planning.await.unwrap();
    let elapsed = started.elapsed();
    assert_eq!(plan.summary.to_pin, MANIFESTS);
    (elapsed, connections_to(port_of(host)))
}

async fn resolve_once(host: &str, refs: &[Reference]) -> (Duration, usize) {
    let client = client_for(host, DEFAULT_CONCURRENCY_PER_HOST);
    let started = Instant::now();
    let results = client.resolve_all(refs).await;
    let elapsed = started.elapsed();
    assert!(results.values().all(|r| r.is_ok()));
    (elapsed, connections_to(port_of(host)))
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

async fn sync_once(config: &tagpin::config::Config, host: &str, cache: &Path) -> (Duration, usize) {
    let client = client_for(host, DEFAULT_CONCURRENCY_PER_HOST);
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
    (elapsed, connections_to(port_of(host)))
}

/// Scans each of `files` (read already) `SCAN_REPEATS` times, no network: how long that took
/// and how many image fields it found.
fn scan_repeatedly(files: &[(PathBuf, Vec<u8>)]) -> (Duration, usize) {
    let started = Instant::now();
    let mut fields = 0usize;
    for _ in 0..SCAN_REPEATS {
        for (path, bytes) in files {
            fields += manifest::scan(path, bytes).unwrap().fields.len();
        }
    }
    (started.elapsed(), fields)
}

fn scan_rate(files: &[(PathBuf, Vec<u8>)]) -> f64 {
    let (elapsed, fields) = scan_repeatedly(files);
    assert_eq!(fields, files.len() * SCAN_REPEATS);
    (files.len() * SCAN_REPEATS) as f64 / elapsed.as_secs_f64()
}

/// Records when each `phase` debug event of `tagpin::pass` fires: the bench reads the pass's
/// own phases instead of timing a copy of it.
#[derive(Clone, Default)]
struct PhaseMarks(Arc<Mutex<Vec<(String, Instant)>>>);

impl PhaseMarks {
    fn clear(&self) {
        self.0.lock().unwrap().clear();
    }

    fn since(&self, start: Instant) -> Vec<(String, Duration)> {
        let marks = self.0.lock().unwrap();
        marks
            .iter()
            .map(|(phase, at)| (phase.clone(), at.duration_since(start)))
            .collect()
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for PhaseMarks {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Phase(Option<String>);
        impl tracing::field::Visit for Phase {
            fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
                if field.name() == "phase" {
                    self.0 = Some(value.to_string());
                }
            }
            fn record_debug(&mut self, _: &tracing::field::Field, _: &dyn std::fmt::Debug) {}
        }
        let at = Instant::now();
        let mut phase = Phase(None);
        event.record(&mut phase);
        if let Some(phase) = phase.0 {
            self.0.lock().unwrap().push((phase, at));
        }
    }
}

/// Established TCP connections from a client to `port`. Counted right before a run's client
/// is dropped, less those open before the run (the harness's own), it is the number of
/// connections the run opened: none is closed during a run, keep-alive holds them all.
fn connections_to(port: u16) -> usize {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let port = format!(":{port:04X}");
    table
        .lines()
        .skip(1)
        .filter(|line| {
            let cols: Vec<&str> = line.split_whitespace().collect();
            cols.len() > 3 && cols[2].ends_with(&port) && cols[3] == "01"
        })
        .count()
}

/// Waits (up to a second) until the connections of the last run, whose client is dropped,
/// are closed, so that each run starts as cold as the floor does; the number still open.
async fn settle(port: u16, before_any_run: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        let open = connections_to(port);
        if open <= before_any_run || Instant::now() > deadline {
            return open;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// One kind of run, and what each round measured of it.
struct Row {
    name: &'static str,
    walls: Vec<Duration>,
    own_cpu_ticks: u64,
    registry_cpu_ticks: u64,
    connections: usize,
}

impl Row {
    fn new(name: &'static str) -> Row {
        Row {
            name,
            walls: Vec::new(),
            own_cpu_ticks: 0,
            registry_cpu_ticks: 0,
            connections: 0,
        }
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// `median (min to max)` of per-round values.
fn spread(mut values: Vec<f64>, digits: usize) -> String {
    values.sort_by(f64::total_cmp);
    let (lo, mid, hi) = (
        values[0],
        values[values.len() / 2],
        values[values.len() - 1],
    );
    format!("{mid:.digits$} ({lo:.digits$} to {hi:.digits$})")
}

const FLOOR: usize = 0;
const FLOOR_AT_LIMIT: usize = 1;
const PLAN: usize = 2;
const PLAN_AT_FLOOR: usize = 3;
const RESOLVE: usize = 4;
const SYNC: usize = 5;
const PLAN_AS_BEFORE: usize = 6;
const PLAN_MULTI_THREAD: usize = 7;
const FLOOR_ONE_THREAD: usize = 8;
const PLAN_AS_LAST_ROUND: usize = 9;
const PROCESS: usize = 10;
const PROCESS_EMPTY: usize = 11;

/// `tagpin plan` as a process, from spawn to exit: the release binary on `root`, its stdout
/// drained as a terminal or a pipe would take it.
async fn plan_process(tagpin: &Path, host: &str, root: &Path, port: u16) -> (Duration, usize) {
    let started = Instant::now();
    let output = tokio::process::Command::new(tagpin)
        .args(["plan", "--insecure-registry", host])
        .arg(root)
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .output()
        .await
        .expect("start tagpin plan");
    let wall = started.elapsed();
    // 0: nothing to pin, 1: pins to make (plan's "needs attention").
    assert!(
        matches!(output.status.code(), Some(0 | 1)),
        "tagpin plan failed: {:?}",
        output.status
    );
    (wall, connections_to(port))
}

/// Runs `work` on a current-thread runtime of its own, on a thread of its own.
fn on_current_thread<F, Fut>(work: F)
where
    F: FnOnce() -> Fut + Send,
    Fut: std::future::Future<Output = ()>,
{
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap()
                    .block_on(work())
            })
            .join()
            .unwrap()
    })
}

/// `BENCH_PROFILE=<kind>`: runs one kind of run `runs` times back to back, for a profiler
/// attached to this process (`perf record -p`), and prints the CPU of each. It announces
/// `profiling <kind> in pid <pid>` on stderr before the first run, and starts after a second,
/// so that the profiler can be attached in time. Kinds: `plan` (on a current-thread runtime,
/// as `tagpin plan` runs), `plan-mt` (on the bench's multi-thread runtime), `floor`,
/// `floor-ct` (the floor on a current-thread runtime), `resolve`, `before`, `e8876cd`.
#[allow(clippy::too_many_arguments)]
async fn profile(
    kind: &str,
    runs: usize,
    host: &str,
    tree: &Path,
    images: &[(String, String)],
    refs: &[Reference],
    marks: &PhaseMarks,
    registry_pid: &str,
    port: u16,
) {
    let harness_connections = connections_to(port);
    eprintln!("profiling {kind} in pid {}", std::process::id());
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (mut own_total, mut registry_total, mut walls) = (0, 0, Vec::new());
    for _ in 0..runs {
        settle(port, harness_connections).await;
        let (own, reg) = (cpu_ticks("self"), cpu_ticks(registry_pid));
        let started = Instant::now();
        match kind {
            "plan-mt" => drop(plan_once(host, tree, DEFAULT_CONCURRENCY_PER_HOST, marks).await),
            "floor" => drop(baseline(host, images, FLOOR_CONNECTIONS).await),
            "resolve" => drop(resolve_once(host, refs).await),
            "before" => drop(plan_as_before(host, tree).await),
            "e8876cd" => drop(plan_as_last_round(host, tree).await),
            "plan" => on_current_thread(|| async {
                drop(plan_once(host, tree, DEFAULT_CONCURRENCY_PER_HOST, marks).await)
            }),
            "floor-ct" => on_current_thread(|| async {
                {
                    baseline(host, images, FLOOR_CONNECTIONS).await;
                }
            }),
            other => panic!(
                "BENCH_PROFILE={other}: not one of plan, plan-mt, floor, floor-ct, resolve, before, e8876cd"
            ),
        }
        walls.push(ms(started.elapsed()));
        own_total += cpu_ticks("self") - own;
        registry_total += cpu_ticks(registry_pid) - reg;
    }
    let tick_ms = 1e3 / CLOCK_TICKS_PER_SECOND;
    println!(
        "{kind}: {runs} runs, wall {} ms, CPU per run: tagpin {:.1} ms, registry {:.1} ms",
        spread(walls, 1),
        own_total as f64 * tick_ms / runs as f64,
        registry_total as f64 * tick_ms / runs as f64
    );
}

/// `BENCH_PROFILE=serve`: keeps the registry and the generated tree until Ctrl-C (SIGINT) and
/// prints the `tagpin plan` command line that plans them, so that the whole process can be run
/// under a profiler (`perf stat -e instructions,task-clock`, `valgrind --tool=callgrind`) on
/// the bench's fixture.
async fn serve(host: &str, tree: &Path) {
    println!(
        "{} plan --insecure-registry {host} {}",
        binary::tagpin_binary().display(),
        tree.display()
    );
    eprintln!("serving the fixture until Ctrl-C (SIGINT)");
    let _ = tokio::signal::ctrl_c().await;
}

#[tokio::main]
async fn main() {
    // The Helm variant: values files against plain manifests, per image field.
    if std::env::args().any(|arg| arg == "--helm") {
        helm_variant::run().await;
        return;
    }
    // Every image signed: what signature checks add to a pass.
    if std::env::args().any(|arg| arg == "--signed") {
        signed_variant::run(signed_variant::Gate::Signatures).await;
        return;
    }
    // Every image with build provenance required: what provenance checks add to a pass.
    if std::env::args().any(|arg| arg == "--provenance") {
        signed_variant::run(signed_variant::Gate::Provenance).await;
        return;
    }

    use tracing_subscriber::layer::SubscriberExt as _;
    let marks = PhaseMarks::default();
    let only_pass_phases = tracing_subscriber::filter::Targets::new()
        .with_target("tagpin::pass", tracing::Level::DEBUG);
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(
        tracing_subscriber::Layer::with_filter(marks.clone(), only_pass_phases),
    ))
    .unwrap();

    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    eprintln!("pushing {IMAGES} images to {host} …");
    let images = push_images(&registry, &host).await;

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
    let refs: Vec<Reference> = images
        .iter()
        .map(|(image, _)| Reference::parse(image).unwrap())
        .collect();

    let rate = scan_rate(&files);
    // Peak RSS of a plan pass in a process that has done nothing bigger before it (the
    // allocator keeps what `sync` used, so later passes start higher).
    let first = plan_once(&host, tree.path(), DEFAULT_CONCURRENCY_PER_HOST, &marks).await;
    let peak = first.peak_rss_kib.unwrap_or(0);

    // The same manifests, already pinned, in a Git repository: sync has nothing to do.
    let client = client_for(&host, DEFAULT_CONCURRENCY_PER_HOST);
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

    let registry_pid = registry_pid();
    let port = registry.port();
    let harness_connections = connections_to(port);
    if std::env::var("BENCH_PROFILE").as_deref() == Ok("serve") {
        serve(&host, tree.path()).await;
        return;
    }
    if let Ok(kind) = std::env::var("BENCH_PROFILE") {
        let runs = std::env::var("BENCH_ROUNDS")
            .ok()
            .and_then(|r| r.parse().ok())
            .unwrap_or(50);
        profile(
            &kind,
            runs,
            &host,
            tree.path(),
            &images,
            &refs,
            &marks,
            &registry_pid,
            port,
        )
        .await;
        return;
    }
    let mut rows = [
        Row::new("registry floor, 16 connections"),
        Row::new("registry floor, 8 connections"),
        Row::new("plan, 8 per host (default)"),
        Row::new("plan, 16 per host"),
        Row::new("resolution alone, 8 per host"),
        Row::new("sync, nothing changed"),
        Row::new("plan as before (8 per host)"),
        Row::new("plan, multi-thread runtime"),
        Row::new("registry floor, 16 conns, 1 thread"),
        Row::new("plan as at e8876cd (8 per host)"),
        Row::new("tagpin plan, spawn to exit"),
        Row::new("tagpin plan, empty directory"),
    ];
    let tagpin = binary::tagpin_binary();
    let empty = tempfile::tempdir().unwrap();
    let mut requests = 0;
    let mut phases: Vec<Vec<(String, Duration)>> = Vec::new();
    // Round 0 warms up (page cache, the registry's own caches) and is not counted.
    let rounds = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(ROUNDS);
    for round in 0..=rounds {
        // The whole process always runs right after the floor, its pair: a bare HEAD flood at
        // 16 connections just before it, as the user-side measurement pairs them.
        let mut order: Vec<usize> = (0..rows.len()).filter(|&i| i != PROCESS).collect();
        let turn = round % order.len();
        order.rotate_left(turn);
        let floor_at = order.iter().position(|&i| i == FLOOR).unwrap_or(0);
        order.insert(floor_at + 1, PROCESS);
        for i in order {
            let open_before = settle(port, harness_connections).await;
            let (own, reg) = (cpu_ticks("self"), cpu_ticks(&registry_pid));
            let (wall, open_at_end) = match i {
                FLOOR => baseline(&host, &images, FLOOR_CONNECTIONS).await,
                FLOOR_AT_LIMIT => baseline(&host, &images, DEFAULT_CONCURRENCY_PER_HOST).await,
                PLAN | PLAN_AT_FLOOR | PLAN_MULTI_THREAD => {
                    let per_host = match i {
                        PLAN_AT_FLOOR => FLOOR_CONNECTIONS,
                        _ => DEFAULT_CONCURRENCY_PER_HOST,
                    };
                    // As `tagpin plan` runs it: on a current-thread runtime (see
                    // `Command::is_one_shot`); and once on this multi-thread one, to compare.
                    let run = if i == PLAN_MULTI_THREAD {
                        plan_once(&host, tree.path(), per_host, &marks).await
                    } else {
                        let mut run = None;
                        on_current_thread(|| async {
                            run = Some(plan_once(&host, tree.path(), per_host, &marks).await);
                        });
                        run.unwrap()
                    };
                    assert_eq!(run.to_pin, MANIFESTS);
                    assert_eq!(run.requests, IMAGES as u64);
                    if i == PLAN {
                        requests = run.requests;
                        phases.push(run.phases);
                    }
                    (run.wall, run.open_at_end)
                }
                FLOOR_ONE_THREAD => {
                    let mut measured = None;
                    on_current_thread(|| async {
                        measured = Some(baseline(&host, &images, FLOOR_CONNECTIONS).await);
                    });
                    measured.unwrap()
                }
                RESOLVE => resolve_once(&host, &refs).await,
                PLAN_AS_BEFORE => plan_as_before(&host, tree.path()).await,
                PLAN_AS_LAST_ROUND => plan_as_last_round(&host, tree.path()).await,
                PROCESS => plan_process(&tagpin, &host, tree.path(), port).await,
                PROCESS_EMPTY => plan_process(&tagpin, &host, empty.path(), port).await,
                _ => sync_once(&config, &host, &cache).await,
            };
            let (own, reg) = (cpu_ticks("self") - own, cpu_ticks(&registry_pid) - reg);
            let opened = open_at_end.saturating_sub(open_before);
            if round > 0 {
                let row = &mut rows[i];
                row.walls.push(wall);
                row.own_cpu_ticks += own;
                row.registry_cpu_ticks += reg;
                row.connections += opened;
            }
        }
    }

    let per_round = |a: usize, b: usize| -> Vec<f64> {
        rows[a]
            .walls
            .iter()
            .zip(&rows[b].walls)
            .map(|(x, y)| x.as_secs_f64() / y.as_secs_f64())
            .collect()
    };
    let plan_ratio = per_round(PLAN, FLOOR);
    let plan_ratio_at_limit = per_round(PLAN, FLOOR_AT_LIMIT);
    let plan_at_floor_ratio = per_round(PLAN_AT_FLOOR, FLOOR);
    let resolve_ratio = per_round(RESOLVE, FLOOR);
    let sync_ratio = per_round(SYNC, PLAN);
    let before_ratio = per_round(PLAN_AS_BEFORE, FLOOR);
    let multi_thread_ratio = per_round(PLAN_MULTI_THREAD, FLOOR);
    let last_round_ratio = per_round(PLAN_AS_LAST_ROUND, FLOOR);
    let plan_ratio_one_thread = per_round(PLAN, FLOOR_ONE_THREAD);
    let process_ratio = per_round(PROCESS, FLOOR);

    println!("tagpin plan benchmark: {MANIFESTS} manifests, {IMAGES} distinct images (1 in {INDEX_EVERY} an OCI index), {rounds} rounds, median (min to max)");
    println!(
        "  {:<32} {:>26} {:>11} {:>13} {:>6}",
        "run", "wall ms", "CPU tagpin", "CPU registry", "conns"
    );
    for row in &rows {
        let n = row.walls.len() as f64;
        let tick_ms = 1e3 / CLOCK_TICKS_PER_SECOND;
        println!(
            "  {:<32} {:>26} {:>8.0} ms {:>10.0} ms {:>6.1}",
            row.name,
            spread(row.walls.iter().copied().map(ms).collect(), 1),
            row.own_cpu_ticks as f64 * tick_ms / n,
            row.registry_cpu_ticks as f64 * tick_ms / n,
            row.connections as f64 / n,
        );
    }
    println!(
        "  ratio plan / floor (16 conns)    {}   (target <= 1.1)",
        spread(plan_ratio, 3)
    );
    println!(
        "  ratio plan / floor (8 conns)     {}",
        spread(plan_ratio_at_limit, 3)
    );
    println!(
        "  ratio plan at 16/host / floor    {}",
        spread(plan_at_floor_ratio, 3)
    );
    println!(
        "  ratio resolution alone / floor   {}",
        spread(resolve_ratio, 3)
    );
    println!(
        "  ratio plan as before / floor     {}",
        spread(before_ratio, 3)
    );
    println!(
        "  ratio plan as at e8876cd / floor {}",
        spread(last_round_ratio, 3)
    );
    println!(
        "  ratio plan multi-thread / floor  {}",
        spread(multi_thread_ratio, 3)
    );
    println!(
        "  ratio plan / floor on 1 thread   {}",
        spread(plan_ratio_one_thread, 3)
    );
    println!(
        "  ratio sync / plan                {}   (target <= 1.2)",
        spread(sync_ratio, 3)
    );
    println!(
        "  ratio tagpin plan process / floor {}  (target <= 1.1; spawn to exit, floor just before)",
        spread(process_ratio, 3)
    );
    let phase_at = |name: &str| -> Vec<f64> {
        phases
            .iter()
            .map(|run| {
                run.iter()
                    .find(|(phase, _)| phase == name)
                    .map_or(f64::NAN, |(_, at)| ms(*at))
            })
            .collect()
    };
    println!("  plan phases, ms from the start of the pass:");
    for (name, what) in [
        ("first image", "first image found (first request)"),
        ("scanned", "files scanned"),
        ("resolved", "last registry answer"),
        ("planned", "pass done"),
    ] {
        println!("    {what:<40} {}", spread(phase_at(name), 1));
    }
    let tail: Vec<f64> = phase_at("planned")
        .iter()
        .zip(phase_at("resolved"))
        .map(|(end, last)| end - last)
        .collect();
    println!("    {:<40} {}", "after the last answer", spread(tail, 1));
    println!(
        "  scan of all manifests            {:>9.1} ms   (no network)",
        MANIFESTS as f64 / rate * 1e3
    );
    println!("  manifest requests sent           {requests:>9}   (distinct refs: {IMAGES})");
    println!(
        "  peak RSS during plan             {:>9.1} MB  (target <= 100)",
        peak as f64 / 1024.0
    );
    println!("  scan throughput                  {rate:>9.0} manifests/s (target >= 20000)");
}
