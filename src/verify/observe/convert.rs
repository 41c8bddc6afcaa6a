//! The objects the API server lists, turned into the judge's plain structs: per kind, what
//! the verdict reads of the workload (its template's images, the fields `kubectl rollout
//! status` reads) and which pods are its own ([`Selector`]), and each pod's container
//! statuses. Pure: no request is made here, so each kind's reading is tested on plain
//! objects, and the judgement never sees a kube type.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::DynamicObject;

use crate::verify::judge::helm::ReleaseWorkload;
use crate::verify::judge::verdict::{
    ArgoRollout, LiveContainer, LivePod, LiveWorkload, RolloutStatus, RolloutStrategy,
};
use crate::workload::{WorkloadId, WorkloadKind};

/// A workload's pod selector, matched against the labels of the namespace's pods (listed once
/// per namespace, see `read.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// `matchLabels` and `matchExpressions`. An empty selector matches no pod: the API
    /// refuses empty selectors on workloads, and claiming every pod would be a lie.
    Labels {
        labels: BTreeMap<String, String>,
        expressions: Vec<(String, String, Vec<String>)>,
    },
    /// A bare pod is its own workload.
    Name(String),
    /// Pods of any of several owners (a CronJob's Jobs); none at all matches no pod.
    AnyOf(Vec<Selector>),
}

impl Selector {
    fn of(selector: Option<&LabelSelector>) -> Selector {
        let Some(selector) = selector else {
            return Selector::Labels {
                labels: BTreeMap::new(),
                expressions: Vec::new(),
            };
        };
        Selector::Labels {
            labels: selector.match_labels.clone().unwrap_or_default(),
            expressions: selector
                .match_expressions
                .iter()
                .flatten()
                .map(|e| {
                    (
                        e.key.clone(),
                        e.operator.clone(),
                        e.values.clone().unwrap_or_default(),
                    )
                })
                .collect(),
        }
    }

    /// Label selector semantics as the API server applies them.
    pub fn matches(&self, pod_labels: &BTreeMap<String, String>, pod_name: &str) -> bool {
        match self {
            Selector::Name(name) => name == pod_name,
            Selector::AnyOf(any) => any.iter().any(|s| s.matches(pod_labels, pod_name)),
            Selector::Labels {
                labels,
                expressions,
            } => {
                if labels.is_empty() && expressions.is_empty() {
                    return false;
                }
                labels.iter().all(|(k, v)| pod_labels.get(k) == Some(v))
                    && expressions.iter().all(|(key, op, values)| {
                        let value = pod_labels.get(key);
                        match op.as_str() {
                            "In" => value.is_some_and(|v| values.contains(v)),
                            "NotIn" => value.is_none_or(|v| !values.contains(v)),
                            "Exists" => value.is_some(),
                            "DoesNotExist" => value.is_none(),
                            // An operator the API would have refused: match nothing.
                            _ => false,
                        }
                    })
            }
        }
    }
}

fn template_images(template: Option<&PodTemplateSpec>) -> Vec<(String, String)> {
    template
        .and_then(|t| t.spec.as_ref())
        .map(spec_images)
        .unwrap_or_default()
}

fn spec_images(spec: &PodSpec) -> Vec<(String, String)> {
    let image = |c: &Container| (c.name.clone(), c.image.clone().unwrap_or_default());
    spec.containers
        .iter()
        .map(image)
        .chain(spec.init_containers.iter().flatten().map(image))
        .collect()
}

pub fn deployment(d: Deployment) -> (LiveWorkload, Selector) {
    let spec = d.spec.unwrap_or_default();
    let status = d.status.unwrap_or_default();
    let deadline = status.conditions.iter().flatten().any(|c| {
        c.type_ == "Progressing" && c.reason.as_deref() == Some("ProgressDeadlineExceeded")
    });
    let workload = LiveWorkload {
        kind: "Deployment".into(),
        generation: d.metadata.generation,
        observed_generation: status.observed_generation,
        template_images: template_images(Some(&spec.template)),
        rollout: RolloutStatus::Deployment {
            spec_replicas: spec.replicas.unwrap_or(1),
            replicas: status.replicas.unwrap_or(0),
            updated: status.updated_replicas.unwrap_or(0),
            ready: status.ready_replicas.unwrap_or(0),
            available: status.available_replicas.unwrap_or(0),
            progress_deadline_exceeded: deadline,
        },
    };
    (workload, Selector::of(Some(&spec.selector)))
}

pub fn stateful_set(s: StatefulSet) -> (LiveWorkload, Selector) {
    let spec = s.spec.unwrap_or_default();
    let status = s.status.unwrap_or_default();
    let strategy = spec.update_strategy.clone().unwrap_or_default();
    let workload = LiveWorkload {
        kind: "StatefulSet".into(),
        generation: s.metadata.generation,
        observed_generation: status.observed_generation,
        template_images: template_images(Some(&spec.template)),
        rollout: RolloutStatus::StatefulSet {
            spec_replicas: spec.replicas.unwrap_or(1),
            ready: status.ready_replicas.unwrap_or(0),
            updated: status.updated_replicas.unwrap_or(0),
            current_revision: status.current_revision.clone(),
            update_revision: status.update_revision.clone(),
            rolling_update: strategy.type_.as_deref().unwrap_or("RollingUpdate") == "RollingUpdate",
            partition: strategy.rolling_update.and_then(|r| r.partition),
        },
    };
    (workload, Selector::of(Some(&spec.selector)))
}

pub fn daemon_set(d: DaemonSet) -> (LiveWorkload, Selector) {
    let spec = d.spec.unwrap_or_default();
    let status = d.status.unwrap_or_default();
    let rolling = spec
        .update_strategy
        .as_ref()
        .and_then(|s| s.type_.as_deref())
        .unwrap_or("RollingUpdate")
        == "RollingUpdate";
    let workload = LiveWorkload {
        kind: "DaemonSet".into(),
        generation: d.metadata.generation,
        observed_generation: status.observed_generation,
        template_images: template_images(Some(&spec.template)),
        rollout: RolloutStatus::DaemonSet {
            desired: status.desired_number_scheduled,
            updated: status.updated_number_scheduled.unwrap_or(0),
            available: status.number_available.unwrap_or(0),
            rolling_update: rolling,
        },
    };
    (workload, Selector::of(Some(&spec.selector)))
}

pub fn replica_set(r: ReplicaSet) -> (LiveWorkload, Selector) {
    let spec = r.spec.unwrap_or_default();
    let status = r.status.unwrap_or_default();
    let workload = LiveWorkload {
        kind: "ReplicaSet".into(),
        generation: r.metadata.generation,
        observed_generation: status.observed_generation,
        template_images: template_images(spec.template.as_ref()),
        rollout: RolloutStatus::ReplicaSet {
            spec_replicas: spec.replicas.unwrap_or(1),
            ready: status.ready_replicas.unwrap_or(0),
            available: status.available_replicas.unwrap_or(0),
        },
    };
    (workload, Selector::of(Some(&spec.selector)))
}

pub fn job(j: Job) -> (LiveWorkload, Selector) {
    let spec = j.spec.unwrap_or_default();
    let status = j.status.unwrap_or_default();
    let failed = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Failed" && c.status == "True")
        .map(|c| c.message.clone().or(c.reason.clone()).unwrap_or_default());
    let workload = LiveWorkload {
        kind: "Job".into(),
        generation: j.metadata.generation,
        observed_generation: j.metadata.generation,
        template_images: template_images(Some(&spec.template)),
        rollout: RolloutStatus::Job {
            active: status.active.unwrap_or(0),
            succeeded: status.succeeded.unwrap_or(0),
            failed: status.failed.unwrap_or(0),
            failed_condition: failed,
        },
    };
    (workload, Selector::of(spec.selector.as_ref()))
}

/// A CronJob's runs since its template last changed: the Jobs it owns whose pod template is its
/// current `jobTemplate`. Once the template carries the pin (Synced), those are exactly the runs
/// since the pin; older runs, on the old digest, are history, not stale replicas, once they
/// ended. A run of an older template that is still active runs the old digest right now, so its
/// pods are judged with the others (as stale) until it ends: the CronJob is not converged while
/// the old image still runs.
pub fn cron_job(c: CronJob, jobs: &[Job]) -> (LiveWorkload, Selector) {
    let template = c
        .spec
        .as_ref()
        .and_then(|s| s.job_template.spec.as_ref())
        .map(|s| &s.template);
    let images = template_images(template);
    let uid = c.metadata.uid.clone().unwrap_or_default();
    let (mut runs, earlier): (Vec<&Job>, Vec<&Job>) = jobs
        .iter()
        .filter(|j| {
            j.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.uid == uid && o.kind == "CronJob")
        })
        .partition(|j| template_images(j.spec.as_ref().map(|s| &s.template)) == images);
    runs.sort_by(|a, b| {
        a.metadata
            .creation_timestamp
            .cmp(&b.metadata.creation_timestamp)
    });
    let still_running = earlier
        .into_iter()
        .filter(|j| j.status.as_ref().and_then(|s| s.active).unwrap_or(0) > 0);
    let selector = Selector::AnyOf(
        runs.iter()
            .copied()
            .chain(still_running)
            .map(|j| Selector::of(j.spec.as_ref().and_then(|s| s.selector.as_ref())))
            .collect(),
    );
    let latest = runs.last().map(|j| Box::new(job((*j).clone()).0.rollout));
    let workload = LiveWorkload {
        kind: "CronJob".into(),
        generation: c.metadata.generation,
        // A CronJob has no observedGeneration; its controller reads the spec at each run.
        observed_generation: c.metadata.generation,
        template_images: images,
        rollout: RolloutStatus::CronJob {
            runs: runs.len(),
            latest,
        },
    };
    (workload, selector)
}

pub fn deployment_config(o: &DynamicObject) -> (LiveWorkload, Selector) {
    let data = &o.data;
    let spec = &data["spec"];
    let status = &data["status"];
    let int = |v: &serde_json::Value| v.as_i64().unwrap_or(0) as i32;
    let template: Option<PodTemplateSpec> = serde_json::from_value(spec["template"].clone()).ok();
    let progressing_failed = status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Progressing" && c["status"] == "False")
        .map(|c| {
            c["message"]
                .as_str()
                .or(c["reason"].as_str())
                .unwrap_or("")
                .to_string()
        });
    // A DeploymentConfig's selector is a plain label map.
    let selector = Selector::Labels {
        labels: spec["selector"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
            .collect(),
        expressions: Vec::new(),
    };
    let workload = LiveWorkload {
        kind: "DeploymentConfig".into(),
        generation: o.metadata.generation,
        observed_generation: status["observedGeneration"].as_i64(),
        template_images: template_images(template.as_ref()),
        rollout: RolloutStatus::DeploymentConfig {
            spec_replicas: spec["replicas"].as_i64().map_or(1, |r| r as i32),
            updated: int(&status["updatedReplicas"]),
            available: int(&status["availableReplicas"]),
            latest_version: status["latestVersion"].as_i64(),
            progressing_failed,
        },
    };
    (workload, selector)
}

/// The label Argo Rollouts puts on each ReplicaSet it creates, and on its pods: the hash of
/// the pod template, which `status.currentPodHash` and `status.stableRS` name.
const ROLLOUT_HASH_LABEL: &str = "rollouts-pod-template-hash";

/// A Rollout as the verdict reads it. Its pods are those of the ReplicaSets it owns (by owner
/// uid), selected by the Rollout's selector and each ReplicaSet's
/// `rollouts-pod-template-hash`: canary and stable alike, and never the pods of an Experiment
/// or an analysis Job that happen to match the selector.
pub fn rollout(o: &DynamicObject, replica_sets: &[ReplicaSet]) -> (LiveWorkload, Selector) {
    let (spec, status) = (&o.data["spec"], &o.data["status"]);
    let int = |v: &serde_json::Value| v.as_i64().and_then(|n| i32::try_from(n).ok()).unwrap_or(0);
    let text = |v: &serde_json::Value| v.as_str().filter(|s| !s.is_empty()).map(str::to_string);
    let template: Option<PodTemplateSpec> = serde_json::from_value(spec["template"].clone()).ok();
    let selector: Option<LabelSelector> = serde_json::from_value(spec["selector"].clone()).ok();
    let uid = o.metadata.uid.clone().unwrap_or_default();
    let owned: Vec<(&str, &ReplicaSet)> = replica_sets
        .iter()
        .filter(|r| {
            r.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|owner| owner.uid == uid && owner.kind == "Rollout")
        })
        .filter_map(|r| {
            let hash = r.metadata.labels.as_ref()?.get(ROLLOUT_HASH_LABEL)?;
            Some((hash.as_str(), r))
        })
        .collect();
    let stable_rs = text(&status["stableRS"]);
    let stable_template_images = stable_rs.as_deref().and_then(|stable| {
        owned
            .iter()
            .find(|(hash, _)| *hash == stable)
            .map(|(_, r)| template_images(r.spec.as_ref().and_then(|s| s.template.as_ref())))
    });
    let strategy = rollout_strategy(spec, status);
    let degraded_condition = legacy_degraded_condition(status);
    let observed_generation = match &status["observedGeneration"] {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    let argo = ArgoRollout {
        phase: text(&status["phase"]),
        message: text(&status["message"]),
        observed_generation,
        controller_pause: status["controllerPause"].as_bool().unwrap_or(false),
        pause_conditions: status["pauseConditions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["reason"].as_str().map(str::to_string))
            .collect(),
        spec_paused: spec["paused"].as_bool().unwrap_or(false),
        abort: status["abort"].as_bool().unwrap_or(false),
        degraded_condition,
        spec_replicas: spec["replicas"]
            .as_i64()
            .and_then(|n| i32::try_from(n).ok())
            .unwrap_or(1),
        replicas: int(&status["replicas"]),
        updated: int(&status["updatedReplicas"]),
        available: int(&status["availableReplicas"]),
        current_pod_hash: text(&status["currentPodHash"]),
        stable_rs,
        strategy,
        stable_template_images,
    };
    let base = Selector::of(selector.as_ref());
    let selector = Selector::AnyOf(
        owned
            .iter()
            .filter_map(|(hash, _)| match &base {
                Selector::Labels {
                    labels,
                    expressions,
                } if !(labels.is_empty() && expressions.is_empty()) => {
                    let mut labels = labels.clone();
                    labels.insert(ROLLOUT_HASH_LABEL.to_string(), hash.to_string());
                    Some(Selector::Labels {
                        labels,
                        expressions: expressions.clone(),
                    })
                }
                _ => None,
            })
            .collect(),
    );
    let workload = LiveWorkload {
        kind: "Rollout".into(),
        generation: o.metadata.generation,
        observed_generation: argo
            .observed_generation
            .as_deref()
            .and_then(|g| g.parse().ok()),
        template_images: template_images(template.as_ref()),
        rollout: RolloutStatus::Rollout(Box::new(argo)),
    };
    (workload, selector)
}

/// A Rollout's strategy, with how far its status says it got.
fn rollout_strategy(spec: &serde_json::Value, status: &serde_json::Value) -> RolloutStrategy {
    let strategy = &spec["strategy"];
    if strategy["canary"].is_object() {
        RolloutStrategy::Canary {
            steps: strategy["canary"]["steps"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|step| {
                    step["setWeight"]
                        .as_i64()
                        .and_then(|w| i32::try_from(w).ok())
                })
                .collect(),
            current_step_index: status["currentStepIndex"]
                .as_i64()
                .and_then(|i| i32::try_from(i).ok()),
            traffic_routing: strategy["canary"]["trafficRouting"].is_object(),
        }
    } else if strategy["blueGreen"].is_object() {
        RolloutStrategy::BlueGreen {
            active_selector: status["blueGreen"]["activeSelector"]
                .as_str()
                .filter(|s| !s.is_empty())
                .map(str::to_string),
        }
    } else {
        RolloutStrategy::Unknown
    }
}

/// What makes an older controller's Rollout Degraded (`CalculateRolloutPhase`): an
/// `InvalidSpec` condition, or one whose reason is `RolloutAborted` or
/// `ProgressDeadlineExceeded`, as `reason: message`.
fn legacy_degraded_condition(status: &serde_json::Value) -> Option<String> {
    status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| {
            c["type"] == "InvalidSpec"
                || c["reason"] == "RolloutAborted"
                || c["reason"] == "ProgressDeadlineExceeded"
        })
        .map(|c| {
            let message = c["message"].as_str().unwrap_or("");
            if c["type"] == "InvalidSpec" {
                format!("InvalidSpec: {message}")
            } else {
                format!("{}: {message}", c["reason"].as_str().unwrap_or(""))
            }
        })
}

pub fn live_pod(p: &Pod) -> LivePod {
    let status = p.status.clone().unwrap_or_default();
    let ready = status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    let containers = status
        .container_statuses
        .iter()
        .flatten()
        .chain(status.init_container_statuses.iter().flatten())
        .map(|c| {
            let waiting = c.state.as_ref().and_then(|s| s.waiting.as_ref());
            LiveContainer {
                name: c.name.clone(),
                image: c.image.clone(),
                image_id: c.image_id.clone(),
                ready: c.ready,
                waiting_reason: waiting.and_then(|w| w.reason.clone()),
                waiting_message: waiting.and_then(|w| w.message.clone()),
                restart_count: c.restart_count,
                last_terminated_reason: c
                    .last_state
                    .as_ref()
                    .and_then(|s| s.terminated.as_ref())
                    .and_then(|t| t.reason.clone()),
            }
        })
        .collect();
    LivePod {
        name: p.metadata.name.clone().unwrap_or_default(),
        phase: status.phase.clone().unwrap_or_default(),
        ready,
        deleting: p.metadata.deletion_timestamp.is_some(),
        reason: status.reason.clone(),
        containers,
        node: p.spec.as_ref().and_then(|s| s.node_name.clone()),
        spec_images: p.spec.as_ref().map(spec_images).unwrap_or_default(),
    }
}

/// A workload a Helm release may run its containers in ([`crate::verify::judge::helm`]), with
/// its annotations (the release's) and its template's images.
pub fn release_workload<K: kube::Resource>(
    kind: WorkloadKind,
    namespace: &str,
    o: &K,
    template: Option<&PodTemplateSpec>,
) -> ReleaseWorkload {
    ReleaseWorkload {
        workload: WorkloadId {
            namespace: Some(namespace.to_string()),
            kind,
            name: o.meta().name.clone().unwrap_or_default(),
        },
        annotations: o.meta().annotations.clone().unwrap_or_default(),
        containers: template_images(template),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn selectors_match_as_the_api_server_matches() {
        let selector = Selector::of(Some(&LabelSelector {
            match_labels: Some([("app".to_string(), "web".to_string())].into()),
            match_expressions: Some(vec![
                LabelSelectorRequirement {
                    key: "tier".into(),
                    operator: "In".into(),
                    values: Some(vec!["a".into(), "b".into()]),
                },
                LabelSelectorRequirement {
                    key: "canary".into(),
                    operator: "DoesNotExist".into(),
                    values: None,
                },
            ]),
        }));
        assert!(selector.matches(&labels(&[("app", "web"), ("tier", "a")]), "p"));
        assert!(!selector.matches(&labels(&[("app", "web"), ("tier", "c")]), "p"));
        assert!(!selector.matches(&labels(&[("app", "web")]), "p"));
        assert!(!selector.matches(
            &labels(&[("app", "web"), ("tier", "b"), ("canary", "1")]),
            "p"
        ));
        assert!(!selector.matches(&labels(&[("app", "api"), ("tier", "a")]), "p"));
    }

    /// A Job `name` of the CronJob with `owner_uid`, from `image`, with `active` pods running.
    fn cron_run(name: &str, owner_uid: &str, image: &str, active: i32) -> Job {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "ownerReferences": [{"apiVersion": "batch/v1",
                "kind": "CronJob", "name": "nightly", "uid": owner_uid, "controller": true}]},
            "spec": {"selector": {"matchLabels": {"job-name": name}},
                     "template": {"spec": {"containers": [{"name": "job", "image": image}]}}},
            "status": {"active": active, "succeeded": 1 - active}
        }))
        .unwrap()
    }

    #[test]
    fn a_cron_job_judges_its_runs_since_the_template_and_older_runs_still_going() {
        let pinned =
            "acme/job:2@sha256:0000000000000000000000000000000000000000000000000000000000000000";
        let cron: CronJob = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "nightly", "uid": "cron-uid"},
            "spec": {"schedule": "0 3 * * *", "jobTemplate": {"spec": {"template": {"spec": {
                "containers": [{"name": "job", "image": pinned}]}}}}}
        }))
        .unwrap();
        let jobs = [
            cron_run("old-done", "cron-uid", "acme/job:2", 0),
            cron_run("old-running", "cron-uid", "acme/job:2", 1),
            cron_run("new-done", "cron-uid", pinned, 0),
            cron_run("other-cron", "another-uid", pinned, 1),
        ];
        let (workload, selector) = cron_job(cron, &jobs);

        let selects = |job: &str| selector.matches(&labels(&[("job-name", job)]), "p");
        assert!(selects("new-done"), "a run since the pin is judged");
        assert!(
            selects("old-running"),
            "an old run still going runs the old digest now"
        );
        assert!(!selects("old-done"), "an old run that ended is history");
        assert!(
            !selects("other-cron"),
            "another CronJob's run is not this one's"
        );
        assert!(matches!(
            workload.rollout,
            RolloutStatus::CronJob {
                runs: 1,
                latest: Some(_)
            }
        ));
    }

    #[test]
    fn an_empty_selector_claims_no_pod() {
        assert!(!Selector::of(None).matches(&labels(&[("app", "web")]), "p"));
        assert!(!Selector::of(Some(&LabelSelector::default())).matches(&labels(&[]), "p"));
    }

    #[test]
    fn a_bare_pod_selects_itself_by_name() {
        let selector = Selector::Name("web-1".into());
        assert!(selector.matches(&labels(&[]), "web-1"));
        assert!(!selector.matches(&labels(&[]), "web-2"));
    }
}
