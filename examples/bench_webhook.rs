//! Benchmark of the controller's reaction to registry webhooks: how soon a push is pinned, and
//! how many commits a burst of pushes of one tag makes.
//!
//! Run: `cargo build --release && cargo run --release --example bench_webhook` (needs Debian's
//! `docker-registry` and `git`; the controller is the release `tagpin` binary beside this
//! example's directory, or `$TAGPIN_BINARY`). Arguments after `--` go to `tagpin run`, e.g.
//! `-- --webhook-window 0` to hold nothing back.
//!
//! It starts `tagpin run` on a bare Git repository with two manifests and a real registry on
//! loopback, then:
//! - single pushes, [`ROUNDS`] times: pushes a new image under the same tag, delivers the
//!   registry's notification (distribution format) and waits for the branch to move, each
//!   round after the webhook window of the one before is over: delivery → commit latency;
//! - bursts, [`BURSTS`] times: five pushes of one tag back to back (the layers uploaded
//!   beforehand, each push the manifest PUT under the tag, as a multi-arch build or a retry
//!   makes them), each announced: the commits each burst makes, and the time from its first
//!   delivery to the first commit and to the last digest pinned (a thread watches the branch
//!   every millisecond meanwhile).
//!
//! Figures are printed, never asserted.

#[path = "support/bare_repo.rs"]
mod bare_repo;
#[path = "support/binary.rs"]
mod binary;
#[path = "../tests/it/support/registry.rs"]
#[allow(dead_code)]
mod registry_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bare_repo::{bare_repo, git};
use registry_support::{free_port, ImageKind, Mode, TestRegistry};

const ROUNDS: usize = 5;
const BURSTS: usize = 5;
const PUSHES_PER_BURST: usize = 5;
const SECRET: &str = "bench-webhook-secret";
/// `tagpin run`'s default `--webhook-window`, for spacing the rounds when no other is given.
const DEFAULT_WINDOW: Duration = Duration::from_secs(1);

fn deployment(name: &str, image: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\nspec:\n  template:\n    spec:\n      containers:\n      - name: app\n        image: {image}\n"
    )
}

/// A bare repository whose `main` holds the two manifests.
fn repository(work: &Path, host: &str) -> PathBuf {
    let files: Vec<(PathBuf, Vec<u8>)> = ["web", "api"]
        .iter()
        .map(|name| {
            let manifest = deployment(name, &format!("{host}/acme/{name}:1.0"));
            (
                PathBuf::from(format!("apps/{name}.yaml")),
                manifest.into_bytes(),
            )
        })
        .collect();
    bare_repo(work, &files)
}

/// The `--webhook-window` among the arguments for `tagpin run`, else its default.
fn window(args: &[String]) -> Duration {
    args.iter()
        .position(|a| a == "--webhook-window")
        .and_then(|i| args.get(i + 1))
        .map(|text| match text.strip_suffix("ms") {
            Some(ms) => Duration::from_millis(ms.parse().expect("a window in ms")),
            None => Duration::from_secs(
                text.trim_end_matches('s')
                    .parse()
                    .expect("a window in seconds"),
            ),
        })
        .unwrap_or(DEFAULT_WINDOW)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn commits(bare: &Path) -> usize {
    git(bare, &["rev-list", "--count", "main"])
        .parse()
        .expect("a commit count")
}

fn pinned(bare: &Path, digest: &str) -> bool {
    git(bare, &["show", "main:apps/web.yaml"]).contains(digest)
}

/// Polls (every millisecond) until `done`, failing after a minute.
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// When each new commit appeared on `main`, seen from a thread of its own (every
/// millisecond) while the burst is being sent.
struct CommitWatch {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<Instant>>,
}

impl CommitWatch {
    fn start(bare: &Path) -> CommitWatch {
        let (bare, stop) = (bare.to_path_buf(), Arc::new(AtomicBool::new(false)));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut seen = commits(&bare);
            let mut times = Vec::new();
            while !stopped.load(Ordering::Relaxed) {
                let now = commits(&bare);
                if now > seen {
                    times.extend(std::iter::repeat_n(Instant::now(), now - seen));
                    seen = now;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            times
        });
        CommitWatch { stop, thread }
    }

    fn stop(self) -> Vec<Instant> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("the commit watch")
    }
}

struct Burst {
    sent_in: Duration,
    commits: usize,
    first_commit: Duration,
    last_pinned: Duration,
}

#[tokio::main]
async fn main() {
    let run_args: Vec<String> = std::env::args().skip(1).collect();
    let window = window(&run_args);
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    registry.push_image("acme/web", "1.0", "web-0").await;
    registry.push_image("acme/api", "1.0", "api-0").await;
    let work = tempfile::tempdir().unwrap();
    let bare = repository(work.path(), &host);
    let config = work.path().join("tagpin.yaml");
    std::fs::write(
        &config,
        format!(
            "repository: {{url: 'file://{}', branch: main}}\npaths: [apps]\nregistries: {{insecure: ['{host}']}}\n",
            bare.display()
        ),
    )
    .unwrap();
    let port = free_port();
    let mut controller = Command::new(binary::tagpin_binary())
        .args(["run", "--interval", "1h", "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("--config")
        .arg(&config)
        .arg("--cache-dir")
        .arg(work.path().join("cache"))
        .args(&run_args)
        .env("HOME", work.path())
        .env("TAGPIN_WEBHOOK_SECRET", SECRET)
        .env("KUBECONFIG", work.path().join("no-kubeconfig"))
        .env_remove("DOCKER_CONFIG")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start tagpin run");
    let http = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}");
    let ready = Instant::now() + Duration::from_secs(60);
    while !http
        .get(format!("{base}/readyz"))
        .send()
        .await
        .is_ok_and(|r| r.status() == 200)
    {
        assert!(Instant::now() < ready, "tagpin run never became ready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let event = format!(
        r#"{{"events":[{{"action":"push","target":{{"repository":"acme/web","tag":"1.0"}},"request":{{"host":"{host}"}}}}]}}"#
    );
    let deliver = || async {
        let answer = http
            .post(format!("{base}/webhooks/distribution"))
            .header("authorization", format!("Bearer {SECRET}"))
            .body(event.clone())
            .send()
            .await
            .expect("deliver the webhook");
        assert_eq!(answer.status(), 202);
    };
    // Past the window the last webhook pass opened: the next delivery is a leading edge.
    let quiet = window + Duration::from_millis(200);

    let mut latencies = Vec::new();
    for round in 1..=ROUNDS {
        tokio::time::sleep(quiet).await;
        registry
            .push_image("acme/web", "1.0", &format!("web-{round}"))
            .await;
        let before = git(&bare, &["rev-parse", "main"]);
        let started = Instant::now();
        deliver().await;
        until("a commit after the webhook", || {
            git(&bare, &["rev-parse", "main"]) != before
        })
        .await;
        latencies.push(started.elapsed());
    }

    let media_type = ImageKind::Oci.manifest_media_type();
    let mut bursts = Vec::new();
    for burst in 1..=BURSTS {
        let mut builds = Vec::new();
        for push in 1..=PUSHES_PER_BURST {
            let tag = format!("burst-{burst}-{push}");
            registry
                .push_image("acme/web", &tag, &format!("burst-{burst}-{push}"))
                .await;
            builds.push(registry.manifest_bytes("acme/web", &tag).await);
        }
        tokio::time::sleep(quiet).await;
        let before = commits(&bare);
        let watch = CommitWatch::start(&bare);
        let started = Instant::now();
        let mut first_delivery = None;
        let mut last = String::new();
        for manifest in &builds {
            last = registry
                .push_manifest("acme/web", "1.0", media_type, manifest)
                .await;
            first_delivery.get_or_insert_with(Instant::now);
            deliver().await;
        }
        let sent_in = started.elapsed();
        let first_delivery = first_delivery.expect("a delivery");
        until("the burst's last digest pinned", || pinned(&bare, &last)).await;
        let last_pinned = first_delivery.elapsed();
        let seen = watch.stop();
        bursts.push(Burst {
            sent_in,
            commits: commits(&bare) - before,
            first_commit: seen
                .first()
                .map_or(last_pinned, |t| t.duration_since(first_delivery)),
            last_pinned,
        });
    }
    let _ = controller.kill();
    let _ = controller.wait();

    let flags = if run_args.is_empty() {
        "defaults".to_string()
    } else {
        run_args.join(" ")
    };
    println!("tagpin run ({flags}): registry webhook to pushed commit");
    println!("single pushes, each {quiet:?} after the one before:");
    for (i, latency) in latencies.iter().enumerate() {
        println!(
            "  push {}                    {:>8.1} ms",
            i + 1,
            ms(*latency)
        );
    }
    println!(
        "  median                    {:>8.1} ms   (target <= 500)",
        ms(median(latencies))
    );
    println!("bursts of {PUSHES_PER_BURST} pushes of one tag, back to back:");
    for (i, b) in bursts.iter().enumerate() {
        println!(
            "  burst {}: 5 pushes in {:>6.1} ms, {} commit(s); from the first delivery: first \
             commit {:>7.1} ms, last digest pinned {:>7.1} ms",
            i + 1,
            ms(b.sent_in),
            b.commits,
            ms(b.first_commit),
            ms(b.last_pinned)
        );
    }
    let per_burst: Vec<usize> = bursts.iter().map(|b| b.commits).collect();
    println!(
        "  commits per burst         {:?}, max {}   (target <= 2)",
        per_burst,
        per_burst.iter().max().copied().unwrap_or(0)
    );
    println!(
        "  median first commit       {:>8.1} ms   (target <= 500)",
        ms(median(bursts.iter().map(|b| b.first_commit).collect()))
    );
    println!(
        "  median last digest pinned {:>8.1} ms",
        ms(median(bursts.iter().map(|b| b.last_pinned).collect()))
    );
}
