//! Benchmark of the controller's reaction: registry webhook delivered → pinned commit pushed.
//!
//! Run: `cargo build --release && cargo run --release --example bench_webhook` (needs Debian's
//! `docker-registry` and `git`; the controller is the release `tagpin` binary beside this
//! example's directory).
//!
//! It starts `tagpin run` on a bare Git repository with two manifests and a real registry on
//! loopback, then five times: pushes a new image under the same tag, delivers the registry's
//! notification (distribution format) and waits for the branch to move. It prints each latency
//! and the median. Figures are printed, never asserted.

#[path = "support/bare_repo.rs"]
mod bare_repo;
#[path = "../tests/it/support/registry.rs"]
#[allow(dead_code)]
mod registry_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bare_repo::{bare_repo, git};
use registry_support::{free_port, Mode, TestRegistry};

const ROUNDS: usize = 5;
const SECRET: &str = "bench-webhook-secret";

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

fn tagpin_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("this example's path");
    let binary = exe
        .parent()
        .and_then(Path::parent)
        .map(|dir| dir.join("tagpin"))
        .expect("target directory");
    assert!(
        binary.is_file(),
        "{} is missing: build it first with `cargo build --release`",
        binary.display()
    );
    binary
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[tokio::main]
async fn main() {
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
    let mut controller = Command::new(tagpin_binary())
        .args(["run", "--interval", "1h", "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("--config")
        .arg(&config)
        .arg("--cache-dir")
        .arg(work.path().join("cache"))
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
    let mut latencies = Vec::new();
    for round in 1..=ROUNDS {
        registry
            .push_image("acme/web", "1.0", &format!("web-{round}"))
            .await;
        let before = git(&bare, &["rev-parse", "main"]);
        let started = Instant::now();
        let answer = http
            .post(format!("{base}/webhooks/distribution"))
            .header("authorization", format!("Bearer {SECRET}"))
            .body(event.clone())
            .send()
            .await
            .expect("deliver the webhook");
        assert_eq!(answer.status(), 202);
        let deadline = started + Duration::from_secs(60);
        while git(&bare, &["rev-parse", "main"]) == before {
            assert!(Instant::now() < deadline, "no commit after the webhook");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        latencies.push(started.elapsed());
    }
    let _ = controller.kill();
    let _ = controller.wait();

    println!("tagpin run: registry webhook to pushed commit, {ROUNDS} pushes");
    for (i, latency) in latencies.iter().enumerate() {
        println!(
            "  push {}                    {:>8.1} ms",
            i + 1,
            latency.as_secs_f64() * 1e3
        );
    }
    println!(
        "  median                    {:>8.1} ms   (target <= 500)",
        median(latencies).as_secs_f64() * 1e3
    );
}
