//! Benchmark of one verification at fleet size against the local Kubernetes API server.
//!
//! Run: `cargo run --release --example bench_verify`.
//!
//! It loads 1,000 Deployments (100 in each of 10 namespaces), each rolled out with 10 ready
//! pods on the pinned digest (10,000 pods), into the test API server of `tests/it/support/kube.rs`
//! (the real list, pagination and selector semantics over HTTP), then runs
//! `tagpin::verify::check` for all 1,000 expectations and reports:
//! - API requests sent per check (target: at most 60; one get and one list per workload would
//!   be 2,000);
//! - wall time of a check, median of 3;
//! - that every verdict is Converged (a benchmark that judged wrongly would measure nothing).
//!
//! Figures are printed, never asserted: speed is measured here, not tested.

#[path = "../tests/it/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::kube::{deployment, pod, running_pod_status, KubeServer};
use tagpin::cluster::Cluster;
use tagpin::registry::{Client, Settings};
use tagpin::verify::judge::check::Expectations;
use tagpin::verify::judge::expected::Expected;
use tagpin::verify::judge::verdict::State;
use tagpin::verify::{check, Families};

const NAMESPACES: usize = 10;
const DEPLOYMENTS_PER_NAMESPACE: usize = 100;
const PODS_PER_DEPLOYMENT: usize = 10;
const ROUNDS: usize = 3;
const DIGEST: &str = "sha256:5b0c5c3f6d2e0a1b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b";

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

#[tokio::main]
async fn main() {
    let kube = KubeServer::start().await;
    let image = format!("registry.example/acme/app:1@{DIGEST}");
    let image_id = format!("registry.example/acme/app@{DIGEST}");
    let mut expected = Vec::new();
    let loading = Instant::now();
    for n in 0..NAMESPACES {
        let namespace = format!("team-{n}");
        for d in 0..DEPLOYMENTS_PER_NAMESPACE {
            let name = format!("app-{d}");
            let labels = [("app", name.as_str())];
            let mut object = deployment(&namespace, &name, &labels, &[("app", &image)]);
            object["spec"]["replicas"] = json!(PODS_PER_DEPLOYMENT);
            kube.apply(object);
            let replicas = PODS_PER_DEPLOYMENT;
            kube.set_status(
                "Deployment",
                &namespace,
                &name,
                json!({"observedGeneration": 1, "replicas": replicas, "updatedReplicas": replicas,
                       "readyReplicas": replicas, "availableReplicas": replicas}),
            );
            for p in 0..PODS_PER_DEPLOYMENT {
                let pod_name = format!("{name}-{p}");
                kube.apply(pod(&namespace, &pod_name, &labels, &[("app", &image)]));
                kube.set_pod_status(
                    &namespace,
                    &pod_name,
                    running_pod_status(&[("app", &image, &image_id)]),
                );
            }
            expected.push(Expected {
                workload: format!("{namespace}/Deployment/{name}").parse().unwrap(),
                container: "app".into(),
                pinned_ref: image.clone(),
                digest: DIGEST.parse().unwrap(),
            });
        }
    }
    println!(
        "loaded {} Deployments and {} pods in {NAMESPACES} namespaces in {:?}",
        expected.len(),
        expected.len() * PODS_PER_DEPLOYMENT,
        loading.elapsed()
    );
    let dir = tempfile::tempdir().unwrap();
    std::env::set_var("KUBECONFIG", kube.kubeconfig(dir.path()));
    let cluster = Cluster::connect(None, tagpin::cluster::DEFAULT_API_TIMEOUT)
        .await
        .expect("connect");
    let registry = Client::new(Settings::default()).expect("registry client");
    let expectations = Expectations {
        expected,
        ..Expectations::default()
    };

    let mut times = Vec::new();
    let mut requests = Vec::new();
    for _ in 0..ROUNDS {
        let before = kube.requests().len();
        let started = Instant::now();
        let result = check(&expectations, &cluster, &registry, &mut Families::default())
            .await
            .expect("check");
        times.push(started.elapsed());
        requests.push(kube.requests().len() - before);
        let converged = result
            .verdicts
            .iter()
            .filter(|v| v.state == State::Converged)
            .count();
        println!(
            "check: {:?}, {} API requests, {converged} of {} verdicts converged, overall {}",
            started.elapsed(),
            kube.requests().len() - before,
            result.verdicts.len(),
            result.state.as_str()
        );
    }
    println!(
        "\nAPI requests per check: {} (target <= 60)\nwall time per check, median of {ROUNDS}: {:?}",
        requests[0],
        median(times)
    );
}
