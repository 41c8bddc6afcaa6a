//! Reads what runs: the live workloads a check or an audit asks for, and their pods, through
//! a [`Cluster`].
//!
//! Read-only by construction: only lists are made, so the verifier needs nothing but
//! get/list/watch on pods and the workload kinds (see `deploy/common/rbac.yaml`). Reads are
//! grouped: one paginated list per namespace and kind, and one paginated pod list per
//! namespace, matched to each workload's selector here, however many workloads and containers
//! there are. Everything read is turned into the judge's plain structs at once (`convert.rs`),
//! so the judgement stays pure.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use futures::stream::{self, StreamExt};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ApiResource, GroupVersionKind};

use super::convert::{self, Selector};
use crate::cluster::{retrying, Cluster, ClusterError, Follow, Namespaced, Refused};
use crate::verify::judge::helm::NamespaceWorkloads;
use crate::verify::judge::observed::{Inventory, Refusal};
use crate::verify::judge::verdict::{Live, LivePod, LiveWorkload, RolloutStatus};
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
            for (name, (workload, selector)) in found.iter() {
                let id = WorkloadId {
                    namespace: Some(namespace.to_string()),
                    kind: kind.clone(),
                    name: name.clone(),
                };
                let pods = pods.selected(selector);
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
    let mut workloads: BTreeMap<(String, WorkloadKind), Listed<Arc<Found>>> = BTreeMap::new();
    let mut pods: BTreeMap<String, Listed<Arc<NamespacePods>>> = BTreeMap::new();
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
                    pods: all_pods.selected(selector),
                },
            },
        };
        live.insert((*id).clone(), read);
    }
    Ok(live)
}

/// The pods of one namespace and its workloads of each of `kinds`, converted once and
/// shared by the reconciles of one identity ([`Cluster::shared_view`]).
async fn read_namespace<'n>(
    cluster: &Cluster,
    namespace: &'n str,
    kinds: &BTreeSet<WorkloadKind>,
) -> Result<NamespaceRead<'n>, ClusterError> {
    let pods = cluster
        .shared_view(&format!("pods {namespace}"), || {
            list_pods(cluster, namespace)
        })
        .await;
    let pods = listed(cluster, pods, namespace, "pods")?;
    let mut found = Vec::new();
    for kind in kinds {
        let workloads = match kind {
            WorkloadKind::Pod => Ok(Arc::new(pod_workloads(pods.as_ref().ok()))),
            kind => {
                let key = format!("{} {namespace}", kind.as_str());
                let read = cluster.shared_view(&key, || list_kind(cluster, kind, namespace));
                listed(cluster, read.await, namespace, kind.as_str())?
            }
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
        WorkloadKind::Deployment => list_typed(cluster, namespace, convert::deployment).await,
        WorkloadKind::StatefulSet => list_typed(cluster, namespace, convert::stateful_set).await,
        WorkloadKind::DaemonSet => list_typed(cluster, namespace, convert::daemon_set).await,
        WorkloadKind::ReplicaSet => list_typed(cluster, namespace, convert::replica_set).await,
        WorkloadKind::Job => list_typed(cluster, namespace, convert::job).await,
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
                        convert::deployment_config(o),
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
                convert::cron_job(c, &jobs),
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
                convert::rollout(o, &replica_sets),
            )
        })
        .collect())
}

/// Every object of one type in `namespace`, by name, as `convert` reads it.
async fn list_typed<K: Namespaced>(
    cluster: &Cluster,
    namespace: &str,
    convert: fn(K) -> (LiveWorkload, Selector),
) -> Result<Found, kube::Error> {
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
async fn list_pods(cluster: &Cluster, namespace: &str) -> Result<NamespacePods, kube::Error> {
    let pods = cluster.list::<Pod>(namespace).await?;
    Ok(NamespacePods::new(
        pods.iter()
            .map(|p| LabelledPod {
                labels: p.metadata.labels.clone().unwrap_or_default(),
                pod: convert::live_pod(p),
            })
            .collect(),
    ))
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
        convert::release_workload(WorkloadKind::Deployment, namespace, d, template)
    }));
    found.extend(stateful_sets.iter().map(|s| {
        let template = s.spec.as_ref().map(|s| &s.template);
        convert::release_workload(WorkloadKind::StatefulSet, namespace, s, template)
    }));
    found.extend(daemon_sets.iter().map(|d| {
        let template = d.spec.as_ref().map(|s| &s.template);
        convert::release_workload(WorkloadKind::DaemonSet, namespace, d, template)
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
    Listed<Arc<NamespacePods>>,
    Vec<(WorkloadKind, Listed<Arc<Found>>)>,
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

/// One namespace's pods as the judge reads them, with what selectors look them up by: a
/// selector with `matchLabels` looks only at the pods carrying its first label, a bare pod at
/// its own name, instead of at every pod of the namespace. With a workload per object and a
/// thousand objects in a namespace, matching each selector against every pod was the
/// operator's quadratic cost.
struct NamespacePods {
    pods: Vec<LabelledPod>,
    /// Label key, then value: the pods carrying it, in list order.
    by_label: HashMap<String, HashMap<String, Vec<usize>>>,
    by_name: HashMap<String, usize>,
}

impl NamespacePods {
    fn new(pods: Vec<LabelledPod>) -> NamespacePods {
        let mut by_label: HashMap<String, HashMap<String, Vec<usize>>> = HashMap::new();
        let mut by_name = HashMap::new();
        for (at, pod) in pods.iter().enumerate() {
            by_name.insert(pod.pod.name.clone(), at);
            for (key, value) in &pod.labels {
                let values = by_label.entry(key.clone()).or_default();
                values.entry(value.clone()).or_default().push(at);
            }
        }
        NamespacePods {
            pods,
            by_label,
            by_name,
        }
    }

    /// The pods `selector` selects, in the order the API listed them.
    fn selected(&self, selector: &Selector) -> Vec<LivePod> {
        let mut candidates = Vec::new();
        self.candidates(selector, &mut candidates);
        candidates.sort_unstable();
        candidates.dedup();
        candidates
            .into_iter()
            .map(|at| &self.pods[at])
            .filter(|p| selector.matches(&p.labels, &p.pod.name))
            .map(|p| p.pod.clone())
            .collect()
    }

    /// Where the pods `selector` may select are: a superset, matched in full by `selected`.
    fn candidates(&self, selector: &Selector, into: &mut Vec<usize>) {
        match selector {
            Selector::Name(name) => into.extend(self.by_name.get(name)),
            Selector::AnyOf(any) => any.iter().for_each(|s| self.candidates(s, into)),
            Selector::Labels { labels, .. } => match labels.iter().next() {
                Some((key, value)) => {
                    let pods = self.by_label.get(key).and_then(|values| values.get(value));
                    into.extend(pods.into_iter().flatten());
                }
                None => into.extend(0..self.pods.len()),
            },
        }
    }
}

fn namespace_of(id: &WorkloadId) -> &str {
    id.namespace.as_deref().unwrap_or("default")
}

/// Bare pods as workloads of their own: each selects itself by name.
fn pod_workloads(pods: Option<&Arc<NamespacePods>>) -> Found {
    pods.into_iter()
        .flat_map(|pods| &pods.pods)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, labels: &[(&str, &str)]) -> LabelledPod {
        LabelledPod {
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            pod: LivePod {
                name: name.into(),
                phase: "Running".into(),
                ready: true,
                deleting: false,
                reason: None,
                containers: Vec::new(),
                node: None,
                spec_images: Vec::new(),
            },
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> Selector {
        Selector::Labels {
            labels: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            expressions: Vec::new(),
        }
    }

    fn names(pods: &[LivePod]) -> Vec<&str> {
        pods.iter().map(|p| p.name.as_str()).collect()
    }

    #[test]
    fn the_index_selects_what_matching_every_pod_selects_in_list_order() {
        let pods = vec![
            pod("web-b", &[("app", "web"), ("tier", "front")]),
            pod("api-a", &[("app", "api")]),
            pod("web-a", &[("app", "web")]),
            pod("bare", &[]),
            pod("web-c", &[("app", "web"), ("tier", "back")]),
        ];
        let naive: Vec<(String, BTreeMap<String, String>)> = pods
            .iter()
            .map(|p| (p.pod.name.clone(), p.labels.clone()))
            .collect();
        let namespace = NamespacePods::new(pods);
        let selectors = [
            labels(&[("app", "web")]),
            labels(&[("app", "web"), ("tier", "front")]),
            labels(&[("tier", "back"), ("app", "web")]),
            labels(&[("app", "none")]),
            labels(&[]),
            Selector::Labels {
                labels: BTreeMap::new(),
                expressions: vec![("tier".into(), "Exists".into(), Vec::new())],
            },
            Selector::Labels {
                labels: [("app".to_string(), "web".to_string())].into(),
                expressions: vec![("tier".into(), "NotIn".into(), vec!["front".into()])],
            },
            Selector::Name("bare".into()),
            Selector::Name("gone".into()),
            Selector::AnyOf(vec![labels(&[("app", "api")]), labels(&[("app", "web")])]),
            Selector::AnyOf(Vec::new()),
        ];
        for selector in &selectors {
            let expected: Vec<&str> = naive
                .iter()
                .filter(|(name, labels)| selector.matches(labels, name))
                .map(|(name, _)| name.as_str())
                .collect();
            assert_eq!(
                names(&namespace.selected(selector)),
                expected,
                "{selector:?}"
            );
        }
        assert_eq!(
            names(&namespace.selected(&selectors[9])),
            ["web-b", "api-a", "web-a", "web-c"]
        );
        assert_eq!(
            names(&namespace.selected(&selectors[6])),
            ["web-a", "web-c"]
        );
    }
}
