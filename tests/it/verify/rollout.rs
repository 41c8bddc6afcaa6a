//! `tagpin verify` on Argo Rollouts, as Argo Rollouts judges them, and on kinds it cannot judge.
//!
//! The Rollouts are real captures (`tests/fixtures/rollouts`, sources in its README): a canary
//! paused at its second step, an aborted one, and the status a controller writes once a
//! rollout is Healthy. Git holds the capture with its image pinned; the local API server
//! serves it (the Rollout CRD registered as Argo Rollouts installs it) with the ReplicaSets
//! the Argo Rollouts controller creates for each template and their pods.

use std::path::Path;

use serde_json::{json, Value};

use crate::support::output_text as text;
use crate::support::workloads::{image_id, install_argo_rollouts, RolloutReplicaSet};
use crate::verify::gitops::verifier_grants;
use crate::verify::World;

const OLD: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
const NEW: &str = "sha256:7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a";

fn capture(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/rollouts")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn yaml(text: &str) -> Value {
    serde_yaml::from_str(text).unwrap()
}

/// The captured canary paused at its pause step (`rollouts-demo`, 8 steps, `setWeight: 21`
/// first), its image pinned to `NEW` the way tagpin writes it.
fn paused_canary_pinned() -> String {
    let capture = capture("suspended_v1.0_pausedRollout.yaml");
    let pinned = capture.replace(
        "image: 'argoproj/rollouts-demo:yellow'",
        &format!("image: 'argoproj/rollouts-demo:yellow@{NEW}'"),
    );
    assert_ne!(pinned, capture);
    pinned
}

/// The status the Argo Rollouts controller writes once the canary is promoted: the captured
/// Healthy status (`healthy_newWorkloadGeneration.yaml`), its template hash renamed to the
/// canary's, observing the Rollout's generation.
fn healthy_status(generation: &Value) -> Value {
    let healthy = capture("healthy_newWorkloadGeneration.yaml").replace("75bbd56864", "8566c77b97");
    let mut status = yaml(&healthy)["status"].clone();
    status["observedGeneration"] = json!(generation.to_string());
    status
}

const STABLE: &str = "77f4f8ff97";
const CANARY: &str = "8566c77b97";

#[tokio::test]
async fn a_canary_paused_at_a_step_is_progressing_until_the_stable_replica_set_runs_the_pin() {
    let pinned = paused_canary_pinned();
    let w = World::new(&[("apps/rollouts-demo.yaml", &pinned)], "127.0.0.1:1").await;
    w.write_config("rollouts-demo", "");
    install_argo_rollouts(&w.kube);
    // Only what deploy/common/rbac.yaml grants the verifier.
    w.kube.set_grants(verifier_grants());
    let applied = yaml(&pinned);
    let rollout = w.kube.apply(applied.clone());
    w.kube.set_status(
        "Rollout",
        "rollouts-demo",
        "rollouts-demo",
        applied["status"].clone(),
    );
    let old_image = format!("argoproj/rollouts-demo:yellow@{OLD}");
    let new_image = format!("argoproj/rollouts-demo:yellow@{NEW}");
    // 21 % of the traffic: 2 canary pods on the pin, 4 stable ones on the previous digest.
    let stable = RolloutReplicaSet::apply(
        &w.kube,
        &rollout,
        STABLE,
        &[("rollouts-demo", &old_image)],
        4,
    );
    for suffix in ["s1", "s2", "s3", "s4"] {
        stable.pod(suffix).running(&w.kube, &[image_id(&old_image)]);
    }
    let canary = RolloutReplicaSet::apply(
        &w.kube,
        &rollout,
        CANARY,
        &[("rollouts-demo", &new_image)],
        2,
    );
    for suffix in ["c1", "c2"] {
        canary.pod(suffix).running(&w.kube, &[image_id(&new_image)]);
    }

    let paused = w.verify(&["--branch", "main"]).await;

    assert_eq!(paused.status.code(), Some(3), "{}", text(&paused));
    let out = text(&paused);
    assert!(
        out.contains("rollouts-demo/Rollout/rollouts-demo rollouts-demo: Progressing (2 of 6 pods"),
        "{out}"
    );
    assert!(
        out.contains("rollout paused: canary at step 2 of 8, 21 % (CanaryPauseStep)"),
        "{out}"
    );

    // Resumed to the last step, every pod on the pin, but the stable ReplicaSet is still the
    // old template's: not converged yet.
    for suffix in ["s1", "s2", "s3", "s4"] {
        w.kube.delete(
            "Pod",
            "rollouts-demo",
            &format!("rollouts-demo-{STABLE}-{suffix}"),
        );
    }
    for suffix in ["c3", "c4", "c5"] {
        canary.pod(suffix).running(&w.kube, &[image_id(&new_image)]);
    }
    let mut last_step = applied["status"].clone();
    for key in ["pauseConditions", "controllerPause"] {
        last_step.as_object_mut().unwrap().remove(key);
    }
    last_step["phase"] = json!("Progressing");
    last_step["message"] = json!("more replicas need to be updated");
    last_step["currentStepIndex"] = json!(6);
    w.kube
        .set_status("Rollout", "rollouts-demo", "rollouts-demo", last_step);

    let last = w.verify(&["--branch", "main"]).await;

    assert_eq!(last.status.code(), Some(3), "{}", text(&last));
    assert!(
        text(&last).contains("Progressing (5 of 5 pods")
            && text(&last)
                .contains("canary at step 7 of 8, 80 % (more replicas need to be updated)"),
        "{}",
        text(&last)
    );

    // Promoted: the stable ReplicaSet is the pinned template's. An Experiment's ReplicaSet
    // matching the Rollout's selector is not the Rollout's, and its pod does not count.
    w.kube.set_status(
        "Rollout",
        "rollouts-demo",
        "rollouts-demo",
        healthy_status(&rollout["metadata"]["generation"]),
    );
    experiment_pod_on(&w, &old_image);

    let promoted = w.verify(&["--branch", "main", "--output", "json"]).await;

    assert_eq!(promoted.status.code(), Some(0), "{}", text(&promoted));
    let json: Value = serde_json::from_slice(&promoted.stdout).unwrap();
    let verdict = &json["verdicts"][0];
    assert_eq!(verdict["workload"], "rollouts-demo/Rollout/rollouts-demo");
    assert_eq!(verdict["state"], "converged");
    assert_eq!(
        (
            verdict["pods_on_pinned"].as_u64(),
            verdict["pods_total"].as_u64()
        ),
        (Some(5), Some(5))
    );
    let rolled_out = verdict["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "RolledOut")
        .unwrap();
    assert!(
        rolled_out["message"].as_str().unwrap().contains(&format!(
            "Healthy: the stable ReplicaSet {CANARY} runs the current template"
        )),
        "{rolled_out:#}"
    );
    w.kube.assert_no_writes();
}

/// A ReplicaSet an Argo Rollouts Experiment created (owned by the Experiment, not the
/// Rollout), whose pod carries the Rollout's labels and runs `image`.
fn experiment_pod_on(w: &World, image: &str) {
    let labels = json!({"app": "rollouts-demo", "rollouts-pod-template-hash": "5d8c7d9b6f"});
    w.kube.apply(json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "rollouts-demo-experiment-baseline", "namespace": "rollouts-demo",
                     "labels": labels,
                     "ownerReferences": [{"apiVersion": "argoproj.io/v1alpha1", "kind": "Experiment",
                        "name": "rollouts-demo-experiment", "uid": "0b6a1c3e-5f1d-4c61-9f9e-3c0de0000001",
                        "controller": true}]},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels},
                              "spec": {"containers": [{"name": "rollouts-demo", "image": image}]}}},
    }));
    crate::support::workloads::LivePod::new(
        "rollouts-demo",
        "rollouts-demo-experiment-baseline-x1",
    )
    .label("app", "rollouts-demo")
    .label("rollouts-pod-template-hash", "5d8c7d9b6f")
    .container("rollouts-demo", image)
    .running(&w.kube, &[image_id(image)]);
}

#[tokio::test]
async fn an_aborted_rollout_is_failed_with_the_reason_argo_rollouts_gives() {
    // An Argo Rollouts 0.x capture: no phase yet, the abort said by a condition.
    let capture = capture("degraded_abortedRollout.yaml");
    let pinned = capture.replace(
        "image: argoproj/rollouts-demo:yellow",
        &format!("image: argoproj/rollouts-demo:yellow@{NEW}"),
    );
    let w = World::new(&[("apps/canary-demo.yaml", &pinned)], "127.0.0.1:1").await;
    w.write_config("default", "");
    install_argo_rollouts(&w.kube);
    let applied = yaml(&pinned);
    let rollout = w.kube.apply(applied.clone());
    w.kube.set_status(
        "Rollout",
        "default",
        "canary-demo",
        applied["status"].clone(),
    );
    let old_image = format!("argoproj/rollouts-demo:yellow@{OLD}");
    let stable = RolloutReplicaSet::apply(
        &w.kube,
        &rollout,
        "645d5dbc4c",
        &[("canary-demo", &old_image)],
        5,
    );
    stable.pod("a").running(&w.kube, &[image_id(&old_image)]);

    let out = w.verify(&["--branch", "main"]).await;

    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("default/Rollout/canary-demo canary-demo: Failed")
            && text(&out).contains("rollout degraded: RolloutAborted: Rollout is aborted"),
        "{}",
        text(&out)
    );
}

#[tokio::test]
async fn wait_watches_the_rollouts_it_listed_and_answers_when_one_is_promoted() {
    let pinned = paused_canary_pinned();
    let w = World::new(&[("apps/rollouts-demo.yaml", &pinned)], "127.0.0.1:1").await;
    w.write_config("rollouts-demo", "");
    install_argo_rollouts(&w.kube);
    let applied = yaml(&pinned);
    let rollout = w.kube.apply(applied.clone());
    w.kube.set_status(
        "Rollout",
        "rollouts-demo",
        "rollouts-demo",
        applied["status"].clone(),
    );
    let new_image = format!("argoproj/rollouts-demo:yellow@{NEW}");
    let canary = RolloutReplicaSet::apply(
        &w.kube,
        &rollout,
        CANARY,
        &[("rollouts-demo", &new_image)],
        1,
    );
    canary.pod("c1").running(&w.kube, &[image_id(&new_image)]);

    let verify = w.verify(&["--branch", "main", "--wait", "--timeout", "60s"]);
    let promote = async {
        // Once verify watches the Rollouts it listed, the controller promotes the canary:
        // only the Rollout's status changes, no pod.
        crate::support::eventually_async("a watch on the Rollouts", || async {
            w.kube.requests().iter().any(|r| {
                r.path == "/apis/argoproj.io/v1alpha1/namespaces/rollouts-demo/rollouts"
                    && r.query_param("watch").as_deref() == Some("true")
            })
        })
        .await;
        w.kube.set_status(
            "Rollout",
            "rollouts-demo",
            "rollouts-demo",
            healthy_status(&rollout["metadata"]["generation"]),
        );
    };
    let (out, ()) = tokio::join!(verify, promote);

    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
}

#[tokio::test]
async fn kinds_tagpin_cannot_judge_live_are_unverified_with_their_kind_named() {
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/golden");
    let read = |path: &str| std::fs::read_to_string(golden.join(path)).unwrap();
    let w = World::new(
        &[
            (
                "apps/cloneset-guestbook.yaml",
                &read("openkruise-cloneset/expected/cloneset-guestbook.yaml"),
            ),
            (
                "apps/knative-service.yaml",
                &read("knative-service/expected/service.yaml"),
            ),
        ],
        "127.0.0.1:1",
    )
    .await;

    let out = w.verify(&["--branch", "main", "--output", "json"]).await;

    assert_eq!(out.status.code(), Some(4), "{}", text(&out));
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut named: Vec<(String, String)> = json["not_verified"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            assert_eq!(n["reason"], "kind_not_verifiable", "{n:#}");
            (
                n["workload"].as_str().unwrap().to_string(),
                n["detail"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    named.sort();
    named.dedup();
    assert_eq!(
        named,
        [
            (
                "default/Service.serving.knative.dev/multi-container".to_string(),
                "kind Service.serving.knative.dev".to_string()
            ),
            (
                "shop/CloneSet.apps.kruise.io/guestbook-clone".to_string(),
                "kind CloneSet.apps.kruise.io".to_string()
            ),
        ]
    );
    assert!(json["verdicts"].as_array().unwrap().is_empty(), "{json:#}");
}
