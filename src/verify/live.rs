//! Reads what runs: the live workload and its pods, through the Kubernetes API (kube).
//!
//! Read-only by construction: this module only calls `get` and `list`, so the verifier needs
//! nothing but get/list/watch on pods and the workload kinds (see `deploy/common/rbac.yaml`).
//! Everything read is turned into the plain structs of [`super::verdict`] at once, so the
//! judgement stays pure.

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::config::KubeConfigOptions;

use super::verdict::{Live, LiveContainer, LivePod, LiveWorkload, RolloutStatus};
use crate::workload::{WorkloadId, WorkloadKind};

/// Pods asked for per page: large enough for big workloads in few requests, small enough to
/// keep each answer bounded.
const POD_PAGE: u32 = 500;

/// The cluster could not be reached or asked at all (as opposed to answering 403 or 404).
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    #[error("kubeconfig: {0}")]
    Config(String),
    /// The API call failed; the kube error keeps its kind (status code, transport) so callers
    /// can tell [`LiveError::is_transient`] causes from permanent ones.
    #[error("Kubernetes API: reading {what}: {source}")]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
    /// A kind [`WorkloadKind::is_verifiable`] rules out; expectations never hold one.
    #[error("{0} is not a kind tagpin reads live")]
    NotReadable(WorkloadKind),
}

impl LiveError {
    /// Timeouts, connection failures, 5xx and 429: worth another try after a pause.
    pub fn is_transient(&self) -> bool {
        match self {
            LiveError::Api {
                source: kube::Error::Api(status),
                ..
            } => status.code == 429 || status.code >= 500,
            LiveError::Api { source, .. } => !matches!(
                source,
                kube::Error::SerdeError(_) | kube::Error::BuildRequest(_)
            ),
            LiveError::Config(_) | LiveError::NotReadable(_) => false,
        }
    }
}

/// A connection to the cluster.
pub struct Cluster {
    client: kube::Client,
}

impl Cluster {
    /// Connects as kube does by default (kubeconfig, else in-cluster), with `context` chosen
    /// from the kubeconfig when given.
    pub async fn connect(context: Option<&str>) -> Result<Cluster, LiveError> {
        let config = match context {
            Some(context) => kube::Config::from_kubeconfig(&KubeConfigOptions {
                context: Some(context.to_string()),
                ..KubeConfigOptions::default()
            })
            .await
            .map_err(|e| LiveError::Config(e.to_string()))?,
            None => kube::Config::infer()
                .await
                .map_err(|e| LiveError::Config(e.to_string()))?,
        };
        let client =
            kube::Client::try_from(config).map_err(|e| LiveError::Config(e.to_string()))?;
        Ok(Cluster { client })
    }

    /// Reads one workload and its pods. A 404 is [`Live::Missing`], a 403 [`Live::Forbidden`].
    pub async fn read(&self, id: &WorkloadId) -> Result<Live, LiveError> {
        let namespace = id.namespace.as_deref().unwrap_or("default");
        let name = id.name.as_str();
        let forbidden_or = |e| forbidden_or(e, id);
        let found = match id.kind {
            WorkloadKind::Deployment => self
                .typed::<Deployment>(namespace, name)
                .await
                .map(|o| o.map(deployment)),
            WorkloadKind::StatefulSet => self
                .typed::<StatefulSet>(namespace, name)
                .await
                .map(|o| o.map(stateful_set)),
            WorkloadKind::DaemonSet => self
                .typed::<DaemonSet>(namespace, name)
                .await
                .map(|o| o.map(daemon_set)),
            WorkloadKind::ReplicaSet => self
                .typed::<ReplicaSet>(namespace, name)
                .await
                .map(|o| o.map(replica_set)),
            WorkloadKind::Job => self.typed::<Job>(namespace, name).await.map(|o| o.map(job)),
            WorkloadKind::DeploymentConfig => self.deployment_config(namespace, name).await,
            WorkloadKind::Pod => {
                return match self.typed::<Pod>(namespace, name).await {
                    Ok(Some(pod)) => Ok(Live::Found {
                        workload: pod_workload(&pod),
                        pods: vec![live_pod(&pod)],
                    }),
                    Ok(None) => Ok(Live::Missing),
                    Err(e) => forbidden_or(e),
                }
            }
            kind @ (WorkloadKind::PodTemplate
            | WorkloadKind::CronJob
            | WorkloadKind::ReplicationController) => return Err(LiveError::NotReadable(kind)),
        };
        match found {
            Ok(Some((workload, selector))) => {
                let pods = match self.pods(namespace, &selector).await {
                    Ok(pods) => pods,
                    Err(e) => return forbidden_or(e),
                };
                Ok(Live::Found { workload, pods })
            }
            Ok(None) => Ok(Live::Missing),
            Err(e) => forbidden_or(e),
        }
    }

    async fn typed<K>(&self, namespace: &str, name: &str) -> Result<Option<K>, kube::Error>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        Api::<K>::namespaced(self.client.clone(), namespace)
            .get_opt(name)
            .await
    }

    /// OpenShift's DeploymentConfig has no k8s-openapi type; it is read as a dynamic object.
    async fn deployment_config(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<(LiveWorkload, String)>, kube::Error> {
        let gvk = GroupVersionKind::gvk("apps.openshift.io", "v1", "DeploymentConfig");
        let resource = ApiResource::from_gvk_with_plural(&gvk, "deploymentconfigs");
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), namespace, &resource);
        Ok(api.get_opt(name).await?.map(|o| deployment_config(&o)))
    }

    /// Every pod matching `selector`, page by page.
    async fn pods(&self, namespace: &str, selector: &str) -> Result<Vec<LivePod>, kube::Error> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let mut params = ListParams::default().labels(selector).limit(POD_PAGE);
        let mut pods = Vec::new();
        loop {
            let page = api.list(&params).await?;
            pods.extend(page.items.iter().map(live_pod));
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => return Ok(pods),
            }
        }
    }
}

fn forbidden_or(e: kube::Error, id: &WorkloadId) -> Result<Live, LiveError> {
    match e {
        kube::Error::Api(status) if status.code == 403 => Ok(Live::Forbidden(status.message)),
        kube::Error::Api(status) if status.code == 404 => Ok(Live::Missing),
        source => Err(LiveError::Api {
            what: id.to_string(),
            source,
        }),
    }
}

/// `matchLabels` and `matchExpressions` as a label selector string.
pub fn selector_string(selector: &LabelSelector) -> String {
    let mut parts: Vec<String> = selector
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    for e in selector.match_expressions.iter().flatten() {
        let values = e.values.clone().unwrap_or_default().join(",");
        parts.push(match e.operator.as_str() {
            "In" => format!("{} in ({values})", e.key),
            "NotIn" => format!("{} notin ({values})", e.key),
            "Exists" => e.key.clone(),
            _ => format!("!{}", e.key),
        });
    }
    parts.join(",")
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

fn deployment(d: Deployment) -> (LiveWorkload, String) {
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
    (workload, selector_string(&spec.selector))
}

fn stateful_set(s: StatefulSet) -> (LiveWorkload, String) {
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
    (workload, selector_string(&spec.selector))
}

fn daemon_set(d: DaemonSet) -> (LiveWorkload, String) {
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
    (workload, selector_string(&spec.selector))
}

fn replica_set(r: ReplicaSet) -> (LiveWorkload, String) {
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
    (workload, selector_string(&spec.selector))
}

fn job(j: Job) -> (LiveWorkload, String) {
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
    let selector = spec
        .selector
        .as_ref()
        .map(selector_string)
        .unwrap_or_default();
    (workload, selector)
}

fn deployment_config(o: &DynamicObject) -> (LiveWorkload, String) {
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
    let selector: String = spec["selector"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
        .collect::<Vec<_>>()
        .join(",");
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

fn pod_workload(p: &Pod) -> LiveWorkload {
    LiveWorkload {
        kind: "Pod".into(),
        generation: p.metadata.generation,
        observed_generation: p.metadata.generation,
        template_images: p.spec.as_ref().map(spec_images).unwrap_or_default(),
        rollout: RolloutStatus::Pod,
    }
}

fn live_pod(p: &Pod) -> LivePod {
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
        containers,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    #[test]
    fn selectors_render_as_the_api_expects() {
        let selector = LabelSelector {
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
        };
        assert_eq!(selector_string(&selector), "app=web,tier in (a,b),!canary");
    }
}
