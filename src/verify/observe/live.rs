//! Reads what runs: the live workload and its pods, through a [`Cluster`] (kube).
//!
//! Read-only by construction: this module only lists, so the verifier needs nothing but
//! get/list/watch on pods and the workload kinds (see `deploy/common/rbac.yaml`).
//! Everything read is turned into the plain structs of [`super::verdict`] at once, so the
//! judgement stays pure.

use std::collections::{BTreeMap, BTreeSet};

use futures::stream::{self, StreamExt};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};

use crate::cluster::{
    impersonation_refused, retrying, Cluster, ClusterError, Follow, Refused, ServiceAccount,
};
use crate::verify::judge::helm::{NamespaceWorkloads, ReleaseWorkload};
use crate::verify::judge::observed::{Inventory, Refusal};
use crate::verify::judge::verdict::{
    ArgoRollout, Live, LiveContainer, LivePod, LiveWorkload, RolloutStatus, RolloutStrategy,
};
use crate::workload::{WorkloadId, WorkloadKind};

/// Namespaces read concurrently: enough to hide the API server's latency at fleet size, few
/// enough not to look like a burst to its priority and fairness limits.
const NAMESPACES_AT_ONCE: usize = 4;

/// Reads every workload in `ids` and their pods with as few requests as the API allows:
/// one paginated list per namespace and kind, and one paginated pod list per namespace
/// (matched to each workload's selector here), instead of a get and a list per workload.
/// A workload that is not there is [`Live::Missing`]; a list the API refuses (403) makes
/// every workload it would have served [`Live::Forbidden`] ([`Live::Denied`] when a
/// tenant's ServiceAccount is impersonated).
/// Transient failures (timeouts, 5xx, 429) are tried again ([`retrying`]), so one hiccup of
/// the API server does not fail a check.
pub async fn workloads(
    cluster: &Cluster,
    ids: &[&WorkloadId],
) -> Result<BTreeMap<WorkloadId, Live>, ClusterError> {
    retrying(|| workloads_once(cluster, ids)).await
}

/// Every workload of each kind in `wanted` (by namespace) with its pods, read as
/// [`workloads`] reads (one paginated list per namespace and kind, one pod list per
/// namespace, transient failures tried again) but keeping every workload listed, not only
/// those asked for by name: `tagpin audit` reports the workloads Git does not name too.
/// With `Pod` wanted, every pod of the namespace is also a workload of its own. A list the
/// API refuses (403) is kept in [`Inventory::refused`], in tagpin's words.
pub async fn namespaces(
    cluster: &Cluster,
    wanted: &BTreeMap<String, BTreeSet<WorkloadKind>>,
) -> Result<Inventory, ClusterError> {
    retrying(|| namespaces_once(cluster, wanted)).await
}

async fn namespaces_once(
    cluster: &Cluster,
    wanted: &BTreeMap<String, BTreeSet<WorkloadKind>>,
) -> Result<Inventory, ClusterError> {
    if let Some(kind) = wanted.values().flatten().find(|k| !k.is_verifiable()) {
        return Err(ClusterError::NotReadable(kind.clone()));
    }
    let mut inventory = Inventory::default();
    let mut namespaces = stream::iter(wanted)
        .map(|(namespace, kinds)| read_namespace(cluster, namespace, kinds))
        .buffer_unordered(NAMESPACES_AT_ONCE);
    while let Some(read) = namespaces.next().await {
        let (namespace, pods, found) = read?;
        for (kind, listed) in found {
            let (found, pods) = match (&listed, &pods) {
                (Err(refusal), _) | (_, Err(refusal)) => {
                    let key = (namespace.to_string(), kind);
                    inventory.refused.insert(key, refusal.0.clone());
                    continue;
                }
                (Ok(found), Ok(pods)) => (found, pods),
            };
            for (name, (workload, selector)) in found {
                let id = WorkloadId {
                    namespace: Some(namespace.to_string()),
                    kind: kind.clone(),
                    name: name.clone(),
                };
                let pods = pods
                    .iter()
                    .filter(|p| selector.matches(&p.labels, &p.pod.name))
                    .map(|p| p.pod.clone())
                    .collect();
                inventory.workloads.insert(id, (workload.clone(), pods));
            }
        }
    }
    Ok(inventory)
}

async fn workloads_once(
    cluster: &Cluster,
    ids: &[&WorkloadId],
) -> Result<BTreeMap<WorkloadId, Live>, ClusterError> {
    let mut by_namespace: BTreeMap<&str, BTreeSet<WorkloadKind>> = BTreeMap::new();
    for id in ids {
        if !id.kind.is_verifiable() {
            return Err(ClusterError::NotReadable(id.kind.clone()));
        }
        by_namespace
            .entry(namespace_of(id))
            .or_default()
            .insert(id.kind.clone());
    }
    let mut workloads: BTreeMap<(String, WorkloadKind), Listed<Found>> = BTreeMap::new();
    let mut pods: BTreeMap<String, Listed<Vec<LabelledPod>>> = BTreeMap::new();
    let mut namespaces = stream::iter(&by_namespace)
        .map(|(namespace, kinds)| read_namespace(cluster, namespace, kinds))
        .buffer_unordered(NAMESPACES_AT_ONCE);
    while let Some(read) = namespaces.next().await {
        let (namespace, listed, found) = read?;
        for (kind, found) in found {
            workloads.insert((namespace.to_string(), kind), found);
        }
        pods.insert(namespace.to_string(), listed);
    }
    let mut live = BTreeMap::new();
    for id in ids {
        let namespace = namespace_of(id).to_string();
        let found = &workloads[&(namespace.clone(), id.kind.clone())];
        let read = match (found, &pods[&namespace]) {
            (Err(message), _) | (_, Err(message)) => match cluster.acting_as() {
                Some(_) => Live::Denied(message.0.clone()),
                None => Live::Forbidden(message.0.clone()),
            },
            (Ok(found), Ok(all_pods)) => match found.get(&id.name) {
                None => Live::Missing,
                Some((workload, selector)) => Live::Found {
                    workload: workload.clone(),
                    pods: all_pods
                        .iter()
                        .filter(|p| selector.matches(&p.labels, &p.pod.name))
                        .map(|p| p.pod.clone())
                        .collect(),
                },
            },
        };
        live.insert((*id).clone(), read);
    }
    Ok(live)
}

/// The pods of one namespace and its workloads of each of `kinds`.
async fn read_namespace<'n>(
    cluster: &Cluster,
    namespace: &'n str,
    kinds: &BTreeSet<WorkloadKind>,
) -> Result<NamespaceRead<'n>, ClusterError> {
    let pods = listed(
        cluster,
        list_pods(cluster, namespace).await,
        namespace,
        "pods",
    )?;
    let mut found = Vec::new();
    for kind in kinds {
        let workloads = match kind {
            WorkloadKind::Pod => Ok(pod_workloads(pods.as_ref().ok())),
            kind => listed(
                cluster,
                list_kind(cluster, kind, namespace).await,
                namespace,
                kind.as_str(),
            )?,
        };
        found.push((kind.clone(), workloads));
    }
    Ok((namespace, pods, found))
}

/// Every object of `kind` in `namespace`, by name, page by page.
async fn list_kind(
    cluster: &Cluster,
    kind: &WorkloadKind,
    namespace: &str,
) -> Result<Found, kube::Error> {
    match kind {
        WorkloadKind::Deployment => list_typed(cluster, namespace, deployment).await,
        WorkloadKind::StatefulSet => list_typed(cluster, namespace, stateful_set).await,
        WorkloadKind::DaemonSet => list_typed(cluster, namespace, daemon_set).await,
        WorkloadKind::ReplicaSet => list_typed(cluster, namespace, replica_set).await,
        WorkloadKind::Job => list_typed(cluster, namespace, job).await,
        WorkloadKind::CronJob => list_cron_jobs(cluster, namespace).await,
        WorkloadKind::DeploymentConfig => {
            let gvk = GroupVersionKind::gvk("apps.openshift.io", "v1", "DeploymentConfig");
            let resource = ApiResource::from_gvk_with_plural(&gvk, "deploymentconfigs");
            // Not watched: `--wait` falls back to polling for DeploymentConfigs.
            let items = cluster
                .list_objects(Some(namespace), &resource, Follow::No)
                .await?;
            Ok(items
                .iter()
                .map(|o| {
                    (
                        o.metadata.name.clone().unwrap_or_default(),
                        deployment_config(o),
                    )
                })
                .collect())
        }
        WorkloadKind::Rollout => list_rollouts(cluster, namespace).await,
        // Pods are read with the namespace's pod list; the other kinds never get here.
        WorkloadKind::Pod
        | WorkloadKind::PodTemplate
        | WorkloadKind::ReplicationController
        | WorkloadKind::Other(_) => Ok(Found::new()),
    }
}

/// The namespace's CronJobs, each with the Jobs it created from its current template.
async fn list_cron_jobs(cluster: &Cluster, namespace: &str) -> Result<Found, kube::Error> {
    let cron_jobs: Vec<CronJob> = cluster.list(namespace).await?;
    if cron_jobs.is_empty() {
        return Ok(Found::new());
    }
    let jobs: Vec<Job> = cluster.list(namespace).await?;
    Ok(cron_jobs
        .into_iter()
        .map(|c| {
            (
                c.metadata.name.clone().unwrap_or_default(),
                cron_job(c, &jobs),
            )
        })
        .collect())
}

/// Where the cluster serves Argo Rollouts: `rollouts.argoproj.io/v1alpha1`.
fn rollout_resource() -> ApiResource {
    let gvk = GroupVersionKind::gvk("argoproj.io", "v1alpha1", "Rollout");
    ApiResource::from_gvk_with_plural(&gvk, "rollouts")
}

/// The namespace's Argo Rollouts, each with the ReplicaSets it owns: their pods are the
/// Rollout's (by `rollouts-pod-template-hash`), and the stable one's template says what
/// the stable pods run. A cluster that serves no Rollouts (the CRD is not installed) has
/// none, so a pinned Rollout is missing there.
async fn list_rollouts(cluster: &Cluster, namespace: &str) -> Result<Found, kube::Error> {
    let listed = cluster
        .list_objects(Some(namespace), &rollout_resource(), Follow::Changes)
        .await;
    let rollouts = match listed {
        Ok(items) => items,
        Err(kube::Error::Api(status)) if status.code == 404 => Vec::new(),
        Err(e) => return Err(e),
    };
    if rollouts.is_empty() {
        return Ok(Found::new());
    }
    let replica_sets: Vec<ReplicaSet> = cluster.list(namespace).await?;
    Ok(rollouts
        .iter()
        .map(|o| {
            (
                o.metadata.name.clone().unwrap_or_default(),
                rollout(o, &replica_sets),
            )
        })
        .collect())
}

/// Every object of one type in `namespace`, by name, as `convert` reads it.
async fn list_typed<K>(
    cluster: &Cluster,
    namespace: &str,
    convert: fn(K) -> (LiveWorkload, Selector),
) -> Result<Found, kube::Error>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    Ok(cluster
        .list::<K>(namespace)
        .await?
        .into_iter()
        .map(|o| {
            let name = o.meta().name.clone().unwrap_or_default();
            (name, convert(o))
        })
        .collect())
}

/// Every pod of `namespace` with its labels, page by page.
async fn list_pods(cluster: &Cluster, namespace: &str) -> Result<Vec<LabelledPod>, kube::Error> {
    Ok(cluster
        .list::<Pod>(namespace)
        .await?
        .iter()
        .map(|p| LabelledPod {
            labels: p.metadata.labels.clone().unwrap_or_default(),
            pod: live_pod(p),
        })
        .collect())
}

/// The workloads of `namespace` a Helm release may run its containers in
/// ([`crate::verify::judge::helm::RELEASE_KINDS`]), with their annotations and template
/// images; the message of a refusal (403) instead, for the verdict to name.
pub async fn release_workloads(
    cluster: &Cluster,
    namespace: &str,
) -> Result<NamespaceWorkloads, ClusterError> {
    let deployments = listed(
        cluster,
        cluster.list::<Deployment>(namespace).await,
        namespace,
        "Deployment",
    )?;
    let stateful_sets = listed(
        cluster,
        cluster.list::<StatefulSet>(namespace).await,
        namespace,
        "StatefulSet",
    )?;
    let daemon_sets = listed(
        cluster,
        cluster.list::<DaemonSet>(namespace).await,
        namespace,
        "DaemonSet",
    )?;
    let (deployments, stateful_sets, daemon_sets) = match (deployments, stateful_sets, daemon_sets)
    {
        (Ok(deployments), Ok(stateful_sets), Ok(daemon_sets)) => {
            (deployments, stateful_sets, daemon_sets)
        }
        (Err(message), _, _) | (_, Err(message), _) | (_, _, Err(message)) => {
            return Ok(Err(message))
        }
    };
    let mut found = Vec::new();
    found.extend(deployments.iter().map(|d| {
        let template = d.spec.as_ref().map(|s| &s.template);
        release_workload(WorkloadKind::Deployment, namespace, d, template)
    }));
    found.extend(stateful_sets.iter().map(|s| {
        let template = s.spec.as_ref().map(|s| &s.template);
        release_workload(WorkloadKind::StatefulSet, namespace, s, template)
    }));
    found.extend(daemon_sets.iter().map(|d| {
        let template = d.spec.as_ref().map(|s| &s.template);
        release_workload(WorkloadKind::DaemonSet, namespace, d, template)
    }));
    Ok(Ok(found))
}

/// A list's answer, a refusal (403) kept as the verdict's data ([`Cluster::refused_or`]).
fn listed<T>(
    cluster: &Cluster,
    result: Result<T, kube::Error>,
    namespace: &str,
    what: &str,
) -> Result<Listed<T>, ClusterError> {
    Ok(cluster
        .refused_or(result, namespace, what)?
        .map_err(|Refused(why)| Refusal(why)))
}

/// One namespace as read: its pods, and its workloads by kind.
type NamespaceRead<'n> = (
    &'n str,
    Listed<Vec<LabelledPod>>,
    Vec<(WorkloadKind, Listed<Found>)>,
);

/// Workloads of one kind in one namespace, by name, with their pod selectors.
type Found = BTreeMap<String, (LiveWorkload, Selector)>;

/// A list the API answered, or why it refused it (403), in tagpin's words
/// ([`crate::cluster::Server::refused`]).
type Listed<T> = Result<T, Refusal>;

/// A pod with the labels workload selectors match against (its own containers' images, for a
/// bare pod its "template", are in [`LivePod::spec_images`]).
struct LabelledPod {
    labels: BTreeMap<String, String>,
    pod: LivePod,
}

fn namespace_of(id: &WorkloadId) -> &str {
    id.namespace.as_deref().unwrap_or("default")
}

/// Bare pods as workloads of their own: each selects itself by name.
fn pod_workloads(pods: Option<&Vec<LabelledPod>>) -> Found {
    pods.into_iter()
        .flatten()
        .map(|p| {
            let workload = LiveWorkload {
                kind: "Pod".into(),
                generation: None,
                observed_generation: None,
                template_images: p.pod.spec_images.clone(),
                rollout: RolloutStatus::Pod,
            };
            (
                p.pod.name.clone(),
                (workload, Selector::Name(p.pod.name.clone())),
            )
        })
        .collect()
}

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

/// The GitOps objects the cluster holds, as listed (JSON), for
/// [`crate::verify::judge::gitops`] to read.
#[derive(Debug, Default)]
pub struct GitOpsListing {
    pub applications: Vec<serde_json::Value>,
    pub kustomizations: Vec<serde_json::Value>,
    pub git_repositories: Vec<serde_json::Value>,
    /// Why some kinds could not be listed in every namespace, where that is worth saying: an
    /// impersonated ServiceAccount's refusals (a kind simply not installed is not).
    pub unread: Vec<String>,
    /// Why Argo CD Applications could not all be listed (one of `unread`), for the verdicts
    /// of the Helm pins an Application deploys.
    pub applications_unread: Option<String>,
}

/// Objects listed, and why some could not be (see [`list_everywhere`]).
type Everywhere = (Vec<serde_json::Value>, Option<String>);

/// Every Argo CD Application, Flux Kustomization and Flux GitRepository, in all namespaces,
/// page by page. A kind whose CRD is not installed (404) or that tagpin may not list (403)
/// is simply absent: most clusters run one of the two tools, or neither. An impersonated
/// ServiceAccount refused them in all namespaces reads those of its own namespace (where a
/// tenant's Flux objects live), and [`GitOpsListing::unread`] says so.
pub async fn objects(cluster: &Cluster) -> Result<GitOpsListing, ClusterError> {
    let (applications, kustomizations, git_repositories) = futures::try_join!(
        list_everywhere(
            cluster,
            "argoproj.io",
            "v1alpha1",
            "Application",
            "applications"
        ),
        list_everywhere(
            cluster,
            "kustomize.toolkit.fluxcd.io",
            "v1",
            "Kustomization",
            "kustomizations"
        ),
        list_everywhere(
            cluster,
            "source.toolkit.fluxcd.io",
            "v1",
            "GitRepository",
            "gitrepositories"
        ),
    )?;
    let unread = [&applications.1, &kustomizations.1, &git_repositories.1]
        .into_iter()
        .flatten()
        .cloned()
        .collect();
    Ok(GitOpsListing {
        applications: applications.0,
        kustomizations: kustomizations.0,
        git_repositories: git_repositories.0,
        unread,
        applications_unread: applications.1,
    })
}

/// Every Flux HelmRelease (`helm.toolkit.fluxcd.io/v2`, Flux 2.3 and later) in all
/// namespaces, and why some or all could not be read: the CRD is not installed (404), or
/// tagpin may not list them (403; an impersonated ServiceAccount then reads those of its
/// own namespace). Unlike the other GitOps objects, a pin names its HelmRelease, so its
/// verdict must say why it is not among them.
pub async fn helm_releases(cluster: &Cluster) -> Result<Everywhere, ClusterError> {
    let gvk = GroupVersionKind::gvk("helm.toolkit.fluxcd.io", "v2", "HelmRelease");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "helmreleases");
    let status = match cluster.list_objects(None, &resource, Follow::No).await {
        Ok(items) => return Ok((as_json(&items), None)),
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 403 => status,
        Err(source) => {
            return Err(cluster.failed(
                "helmreleases.helm.toolkit.fluxcd.io in all namespaces".to_string(),
                source,
            ))
        }
    };
    let why = match (status.code, cluster.acting_as()) {
        (404, _) => "the cluster serves no helm.toolkit.fluxcd.io/v2 HelmReleases (CRD not \
                     installed, or Flux older than 2.3)"
            .to_string(),
        _ if impersonation_refused(&status) => {
            return Err(cluster.failed(
                "helmreleases.helm.toolkit.fluxcd.io in all namespaces".to_string(),
                kube::Error::Api(status),
            ))
        }
        (_, Some(account)) => return list_own_namespace(cluster, account, &resource).await,
        (_, None) => format!(
            "tagpin may not list HelmReleases ({})",
            cluster
                .server()
                .refused("helmreleases.helm.toolkit.fluxcd.io", status.code)
        ),
    };
    Ok((Vec::new(), Some(why)))
}

/// Every object of a custom resource in all namespaces, as JSON, and why not all could
/// be read. A resource not served (404) or not readable (403) has none, and says nothing
/// (most clusters run one GitOps tool, or none); an impersonated ServiceAccount refused
/// them in all namespaces reads those of its own namespace instead, and says so.
async fn list_everywhere(
    cluster: &Cluster,
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
) -> Result<Everywhere, ClusterError> {
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let resource = ApiResource::from_gvk_with_plural(&gvk, plural);
    match cluster.list_objects(None, &resource, Follow::No).await {
        Ok(items) => Ok((as_json(&items), None)),
        Err(kube::Error::Api(status))
            if (status.code == 403 && !impersonation_refused(&status)) || status.code == 404 =>
        {
            if let (403, Some(account)) = (status.code, cluster.acting_as()) {
                return list_own_namespace(cluster, account, &resource).await;
            }
            tracing::debug!("no {plural}.{group} to consult (HTTP {})", status.code);
            Ok((Vec::new(), None))
        }
        Err(source) => Err(cluster.failed(format!("{plural}.{group} in all namespaces"), source)),
    }
}

/// The objects of `resource` in `account`'s own namespace, read after it was refused them
/// in all namespaces, with what that leaves out. Never the operator's own identity: a
/// tenant sees what its RBAC grants, or nothing.
async fn list_own_namespace(
    cluster: &Cluster,
    account: &ServiceAccount,
    resource: &ApiResource,
) -> Result<Everywhere, ClusterError> {
    let name = match resource.group.as_str() {
        "" => resource.plural.clone(),
        group => format!("{}.{group}", resource.plural),
    };
    let namespace = &account.namespace;
    let refused = format!("the ServiceAccount {account} may not list {name} in all namespaces");
    match cluster
        .list_objects(Some(namespace), resource, Follow::No)
        .await
    {
        Ok(items) => Ok((
            as_json(&items),
            Some(format!("{refused}; only those of {namespace} were read")),
        )),
        Err(kube::Error::Api(status))
            if (status.code == 403 && !impersonation_refused(&status)) || status.code == 404 =>
        {
            Ok((Vec::new(), Some(format!("{refused}, nor in {namespace}"))))
        }
        Err(source) => Err(cluster.failed(format!("{name} in namespace {namespace}"), source)),
    }
}

/// Listed objects as JSON, for the pure readers of [`crate::verify::judge::gitops`] and
/// [`crate::verify::judge::helm`].
fn as_json(items: &[DynamicObject]) -> Vec<serde_json::Value> {
    items
        .iter()
        .filter_map(|o| serde_json::to_value(o).ok())
        .collect()
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
