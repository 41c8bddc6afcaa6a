//! Reads what runs: the live workload and its pods, through the Kubernetes API (kube).
//!
//! Read-only by construction: this module only calls `get` and `list`, so the verifier needs
//! nothing but get/list/watch on pods and the workload kinds (see `deploy/common/rbac.yaml`).
//! Everything read is turned into the plain structs of [`super::verdict`] at once, so the
//! judgement stays pure.

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use futures::stream::{self, StreamExt};

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use std::time::Duration;

use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, WatchEvent, WatchParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError};

use crate::bounded;
use crate::config::ClusterTarget;
use crate::mutex::lock;
use crate::verify::judge::verdict::{
    ArgoRollout, Live, LiveContainer, LivePod, LiveWorkload, RolloutStatus, RolloutStrategy,
};

use super::shared_lists::SharedLists;
use crate::verify::judge::observed::{Inventory, Refusal};
use crate::workload::{WorkloadId, WorkloadKind};

/// Objects asked for per page: large enough for big namespaces in few requests, small enough
/// to keep each answer bounded.
const PAGE: u32 = 500;

/// The longest Retry-After a check honours before trying again.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(10);

/// Attempts of one read when the API server fails transiently.
const READ_ATTEMPTS: u32 = 3;

/// Namespaces read concurrently: enough to hide the API server's latency at fleet size, few
/// enough not to look like a burst to its priority and fairness limits.
const NAMESPACES_AT_ONCE: usize = 4;

/// How long one request to the Kubernetes API may go without progress, by default: to connect
/// (TCP and TLS), to send, and between two reads of the answer. A list of 500 objects starts
/// answering within a second on a healthy API server; a hung one never does.
pub const DEFAULT_API_TIMEOUT: Duration = Duration::from_secs(30);

/// The largest answer read from a Kubernetes API server. A page of [`PAGE`] pods is about
/// 10 MB with `managedFields` (pods of 5 to 20 KB); Argo CD Applications listing many
/// resources run to 100 KB each. 64 MiB holds a page of 500 objects of 128 KB, and keeps a
/// server that answers without end (a stage kubeconfig's `server` is a tenant's to choose) to
/// that much memory per request. See [`crate::bounded`].
pub const MAX_ANSWER_BYTES: usize = 64 * crate::bounded::MIB;

/// How long one request (watches aside) may take in all, from sending it to the last byte of
/// its answer, as a multiple of the timeout without progress: a server that sends a byte just
/// within each read timeout would otherwise hold a check for as long as it likes. Twice the
/// timeout leaves a large answer on a slow link the time it needs, and keeps the read timeout
/// the first to end a silent server.
pub const DEADLINE_PER_TIMEOUT: u32 = 2;

/// The cluster could not be reached or asked at all (as opposed to answering 403 or 404).
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// The cluster's client could not be configured; the message names the target
    /// (`kubeconfig context "prod": …`).
    #[error("{0}")]
    Config(String),
    /// The API call failed; the kube error keeps its kind (status code, transport) so callers
    /// can tell [`LiveError::is_transient`] causes from permanent ones. The message names the
    /// API server: with several clusters configured, "timed out" alone does not say which.
    #[error("Kubernetes API {}: reading {what}: {}", server.url, cause(source, server.timeout))]
    Api {
        server: Arc<Server>,
        what: String,
        #[source]
        source: kube::Error,
    },
    /// A kind [`WorkloadKind::is_verifiable`] rules out; expectations never hold one.
    #[error("{0} is not a kind tagpin reads live")]
    NotReadable(WorkloadKind),
    /// tagpin's own identity may not impersonate the ServiceAccount it reads as: the
    /// install's fault, which stops the check rather than passing for the tenant's limits.
    #[error(
        "Kubernetes API {}: reading {what}: tagpin may not impersonate the ServiceAccount \
         {account} (403 Forbidden); grant the operator `impersonate` on serviceaccounts",
        server.url
    )]
    ImpersonationRefused {
        server: Arc<Server>,
        what: String,
        account: ServiceAccount,
    },
}

impl LiveError {
    /// How long the API server asked to wait before trying again, for a 429.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            LiveError::Api {
                source: kube::Error::Api(status),
                ..
            } => status
                .details
                .as_ref()
                .map(|d| d.retry_after_seconds)
                .filter(|s| *s > 0)
                .map(|s| Duration::from_secs(u64::from(s))),
            _ => None,
        }
    }

    /// Timeouts, connection failures, 5xx and 429: worth another try after a pause. An answer
    /// past [`MAX_ANSWER_BYTES`] is not.
    pub fn is_transient(&self) -> bool {
        match self {
            LiveError::Api {
                source: kube::Error::Api(status),
                ..
            } => status.code == 429 || status.code >= 500,
            // An answer past its cap would be as large the next time.
            LiveError::Api { source, .. }
                if matches!(
                    bounded::exceeded_in(source),
                    Some(bounded::Exceeded::TooLarge { .. })
                ) =>
            {
                false
            }
            LiveError::Api { source, .. } => !matches!(
                source,
                kube::Error::SerdeError(_) | kube::Error::BuildRequest(_)
            ),
            LiveError::Config(_)
            | LiveError::NotReadable(_)
            | LiveError::ImpersonationRefused { .. } => false,
        }
    }
}

/// The API server a [`Cluster`] talks to, as its errors name it.
#[derive(Debug)]
pub struct Server {
    /// `https://10.0.0.1:6443`.
    pub url: String,
    /// How long one request may go without progress (see [`Cluster::connect_to`]).
    pub timeout: Duration,
}

/// A ServiceAccount a [`Cluster`] reads as, impersonated: in a shared operator install, the
/// tenant's, so that the tenant's RBAC (not the operator's) decides what its objects see.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServiceAccount {
    pub namespace: String,
    pub name: String,
}

impl ServiceAccount {
    /// The user the API server knows it as, and the `Impersonate-User` header carries.
    pub fn user(&self) -> String {
        format!("system:serviceaccount:{}:{}", self.namespace, self.name)
    }
}

/// `team-a/tagpin`.
impl std::fmt::Display for ServiceAccount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

impl Server {
    /// `Kubernetes API https://10.0.0.1:6443: list pods in namespace team-b: 403 Forbidden`:
    /// a refusal in tagpin's words. The API server's `message` is not quoted: a stage
    /// kubeconfig's `server` may be any service a tenant names, and its answer must not reach
    /// a status, an Event or a log.
    pub fn refused(&self, what: &str, code: u16) -> String {
        format!(
            "Kubernetes API {}: list {what}: {}",
            self.url,
            status_text(code)
        )
    }
}

/// A connection to the cluster.
pub struct Cluster {
    /// Every read goes through this client, whose requests give up after [`Cluster::timeout`]
    /// without progress.
    client: kube::Client,
    /// For watches only: a quiet watch sends nothing for minutes, so it has no read timeout;
    /// [`Cluster::wait_for_change`] bounds and ends every watch itself.
    watch_client: kube::Client,
    server: Arc<Server>,
    /// The resourceVersion of the last list of each (namespace, resource): where a watch for
    /// what changed since starts.
    seen: std::sync::Mutex<BTreeMap<(String, Watched), String>>,
    /// The connection's configuration with its timeouts and retry settings, before any
    /// impersonation: what [`Cluster::impersonating`] starts from.
    config: Arc<kube::Config>,
    /// The ServiceAccount every request impersonates, if any. A read it is refused is then
    /// the tenant's limit, not a fault of tagpin's: not verified, said in tagpin's words.
    acting_as: Option<Arc<ServiceAccount>>,
    /// Lists reused by every reconcile reading as this identity (the operator); `None`: each
    /// check lists afresh (`verify`, `run`, `--wait`).
    shared_lists: Option<Arc<SharedLists>>,
}

/// Another handle on the same API server, sharing its clients: the operator's own cluster is
/// also the cluster of a stage declared `in_cluster`.
impl Clone for Cluster {
    fn clone(&self) -> Cluster {
        Cluster {
            client: self.client.clone(),
            watch_client: self.watch_client.clone(),
            server: self.server.clone(),
            seen: std::sync::Mutex::new(lock(&self.seen).clone()),
            config: self.config.clone(),
            acting_as: self.acting_as.clone(),
            shared_lists: self.shared_lists.clone(),
        }
    }
}

impl Cluster {
    /// Connects as kube does by default (kubeconfig, else in-cluster), with `context` chosen
    /// from the kubeconfig when given. Each request gives up after `timeout` without progress.
    pub async fn connect(context: Option<&str>, timeout: Duration) -> Result<Cluster, LiveError> {
        let target = match context {
            Some(context) => ClusterTarget::Context(context.to_string()),
            None => ClusterTarget::Default,
        };
        Cluster::connect_to(&target, timeout).await
    }

    /// Connects to `target` (a promotion stage's `cluster`). Errors name the target: with
    /// several clusters configured, "context not found" alone does not say which one.
    ///
    /// kube sets no read timeout by default, so an API server that accepts a connection and
    /// never answers would hold a check (and the controller's loop) forever. Here connecting,
    /// sending and each wait for more of the answer give up after `timeout`; the read timeout
    /// counts from the request sent, not from when a pooled connection went idle. A read
    /// timeout does not bound a server that keeps sending a byte now and then, so every
    /// request but a watch must also end, answer included, within [`DEADLINE_PER_TIMEOUT`]
    /// times `timeout`, and every answer (watches too) is cut at [`MAX_ANSWER_BYTES`].
    pub async fn connect_to(
        target: &ClusterTarget,
        timeout: Duration,
    ) -> Result<Cluster, LiveError> {
        let failed =
            |message: &dyn std::fmt::Display| LiveError::Config(format!("{target}: {message}"));
        let mut config = match target {
            ClusterTarget::Default => kube::Config::infer().await.map_err(|e| failed(&e))?,
            ClusterTarget::Context(context) => {
                let kubeconfig = Kubeconfig::read().map_err(|e| failed(&read_error(e)))?;
                from_kubeconfig(kubeconfig, Some(context))
                    .await
                    .map_err(|e| failed(&e))?
            }
            ClusterTarget::Kubeconfig { path, context } => {
                let kubeconfig = Kubeconfig::read_from(path).map_err(|e| failed(&read_error(e)))?;
                from_kubeconfig(kubeconfig, context.as_deref())
                    .await
                    .map_err(|e| failed(&e))?
            }
            ClusterTarget::InCluster => kube::Config::incluster().map_err(|e| failed(&e))?,
            // Only a PinnedRepository names one, and the operator reads the Secret first.
            ClusterTarget::KubeconfigSecret { .. } => {
                return Err(failed(
                    &"a kubeconfig Secret is read by `tagpin operator` only",
                ))
            }
        };
        // kube's default retry waits up to 1000 s over 15 attempts: right for a controller
        // that runs forever, not for a verdict someone is waiting on. tagpin retries itself,
        // bounded (see [`Cluster::read_all`] and `--wait`).
        config.default_retry = false;
        config.connect_timeout = Some(timeout);
        config.write_timeout = Some(timeout);
        Cluster::with_config(config, timeout, None).map_err(|e| failed(&e))
    }

    /// The same API server, reached with the same credentials, timeouts and retry settings,
    /// with every request impersonating `account` (`Impersonate-User:
    /// system:serviceaccount:<namespace>:<name>`; the API server adds the ServiceAccount's
    /// groups itself). The credentials must hold `impersonate` on that ServiceAccount, and
    /// what the ServiceAccount may read is then all this cluster sees.
    pub fn impersonating(&self, account: ServiceAccount) -> Result<Cluster, LiveError> {
        let mut config = kube::Config::clone(&self.config);
        config.auth_info.impersonate = Some(account.user());
        // Only the user: groups, a uid or extras would need `impersonate` on those too.
        config.auth_info.impersonate_groups = None;
        config.auth_info.impersonate_uid = None;
        config.auth_info.impersonate_user_extra = None;
        let cluster = Cluster::with_config(config, self.server.timeout, Some(account.clone()))
            .map_err(|e| {
                LiveError::Config(format!("impersonating ServiceAccount {account}: {e}"))
            })?;
        Ok(match &self.shared_lists {
            Some(lists) => cluster.sharing_lists(lists.max_age()),
            None => cluster,
        })
    }

    /// The ServiceAccount this cluster impersonates, if any.
    pub fn acting_as(&self) -> Option<&ServiceAccount> {
        self.acting_as.as_deref()
    }

    /// The clients of `config` (its connect and write timeouts set): one whose reads give up
    /// after `timeout` without progress, one for watches without a read timeout.
    fn with_config(
        config: kube::Config,
        timeout: Duration,
        acting_as: Option<ServiceAccount>,
    ) -> Result<Cluster, kube::Error> {
        let base = Arc::new(config.clone());
        let mut config = config;
        // A watch is quiet by design: [`Cluster::wait_for_change`] ends it itself.
        let watch_client = crate::bounded::kube_client(config.clone(), MAX_ANSWER_BYTES, None)?;
        config.read_timeout = Some(timeout);
        config.reset_reader_on_write = true;
        let server = Server {
            url: config
                .cluster_url
                .to_string()
                .trim_end_matches('/')
                .to_string(),
            timeout,
        };
        let deadline = Some(timeout * DEADLINE_PER_TIMEOUT);
        let client = crate::bounded::kube_client(config, MAX_ANSWER_BYTES, deadline)?;
        Ok(Cluster {
            client,
            watch_client,
            server: Arc::new(server),
            seen: std::sync::Mutex::default(),
            config: base,
            acting_as: acting_as.map(Arc::new),
            shared_lists: None,
        })
    }

    /// This cluster with its lists shared by every check made through it (and its clones) for
    /// `max_age` ([`SharedLists`]). Impersonating clusters made from it share theirs among
    /// themselves, never with it.
    pub fn sharing_lists(mut self, max_age: Duration) -> Cluster {
        self.shared_lists = Some(Arc::new(SharedLists::new(max_age)));
        self
    }

    /// Every item of the list `api` reads, shared when this cluster shares its lists.
    async fn list<K>(&self, api: &Api<K>) -> Result<(Vec<K>, Option<String>), kube::Error>
    where
        K: kube::Resource
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug
            + Send
            + Sync
            + 'static,
    {
        match &self.shared_lists {
            None => list_pages(api).await,
            Some(lists) => {
                lists
                    .get_or_read(api.resource_url(), || list_pages(api))
                    .await
            }
        }
    }

    /// Reads every workload in `ids` and their pods with as few requests as the API allows:
    /// one paginated list per namespace and kind, and one paginated pod list per namespace
    /// (matched to each workload's selector here), instead of a get and a list per workload.
    /// A workload that is not there is [`Live::Missing`]; a list the API refuses (403) makes
    /// every workload it would have served [`Live::Forbidden`] ([`Live::Denied`] when a
    /// tenant's ServiceAccount is impersonated).
    /// Transient failures (timeouts, 5xx, 429) are tried again, up to [`READ_ATTEMPTS`] times
    /// with a short backoff, so one hiccup of the API server does not fail a check.
    pub async fn read_all(
        &self,
        ids: &[&WorkloadId],
    ) -> Result<BTreeMap<WorkloadId, Live>, LiveError> {
        retrying(|| self.read_all_once(ids)).await
    }

    /// Every workload of each kind in `wanted` (by namespace) with its pods, read as
    /// [`Cluster::read_all`] reads (one paginated list per namespace and kind, one pod list per
    /// namespace, transient failures tried again) but keeping every workload listed, not only
    /// those asked for by name: `tagpin audit` reports the workloads Git does not name too.
    /// With `Pod` wanted, every pod of the namespace is also a workload of its own. A list the
    /// API refuses (403) is kept in [`Inventory::refused`], in tagpin's words.
    pub async fn read_namespaces(
        &self,
        wanted: &BTreeMap<String, BTreeSet<WorkloadKind>>,
    ) -> Result<Inventory, LiveError> {
        retrying(|| self.read_namespaces_once(wanted)).await
    }

    async fn read_namespaces_once(
        &self,
        wanted: &BTreeMap<String, BTreeSet<WorkloadKind>>,
    ) -> Result<Inventory, LiveError> {
        if let Some(kind) = wanted.values().flatten().find(|k| !k.is_verifiable()) {
            return Err(LiveError::NotReadable(kind.clone()));
        }
        let mut inventory = Inventory::default();
        let mut namespaces = stream::iter(wanted)
            .map(|(namespace, kinds)| self.read_namespace(namespace, kinds))
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

    async fn read_all_once(
        &self,
        ids: &[&WorkloadId],
    ) -> Result<BTreeMap<WorkloadId, Live>, LiveError> {
        let mut by_namespace: BTreeMap<&str, BTreeSet<WorkloadKind>> = BTreeMap::new();
        for id in ids {
            if !id.kind.is_verifiable() {
                return Err(LiveError::NotReadable(id.kind.clone()));
            }
            by_namespace
                .entry(namespace_of(id))
                .or_default()
                .insert(id.kind.clone());
        }
        let mut workloads: BTreeMap<(String, WorkloadKind), Listed<Found>> = BTreeMap::new();
        let mut pods: BTreeMap<String, Listed<Vec<LabelledPod>>> = BTreeMap::new();
        let mut namespaces = stream::iter(&by_namespace)
            .map(|(namespace, kinds)| self.read_namespace(namespace, kinds))
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
                (Err(message), _) | (_, Err(message)) => match self.acting_as {
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
        &self,
        namespace: &'n str,
        kinds: &BTreeSet<WorkloadKind>,
    ) -> Result<NamespaceRead<'n>, LiveError> {
        let listed = self.refused_or(self.list_pods(namespace).await, namespace, "pods")?;
        let mut found = Vec::new();
        for kind in kinds {
            let workloads = match kind {
                WorkloadKind::Pod => Ok(pod_workloads(listed.as_ref().ok())),
                kind => self.refused_or(
                    self.list_kind(kind, namespace).await,
                    namespace,
                    kind.as_str(),
                )?,
            };
            found.push((kind.clone(), workloads));
        }
        Ok((namespace, listed, found))
    }

    /// Every object of `kind` in `namespace`, by name, page by page.
    async fn list_kind(&self, kind: &WorkloadKind, namespace: &str) -> Result<Found, kube::Error> {
        match kind {
            WorkloadKind::Deployment => {
                self.list_typed(namespace, deployment, Watched::Deployments)
                    .await
            }
            WorkloadKind::StatefulSet => {
                self.list_typed(namespace, stateful_set, Watched::StatefulSets)
                    .await
            }
            WorkloadKind::DaemonSet => {
                self.list_typed(namespace, daemon_set, Watched::DaemonSets)
                    .await
            }
            WorkloadKind::ReplicaSet => {
                self.list_typed(namespace, replica_set, Watched::ReplicaSets)
                    .await
            }
            WorkloadKind::Job => self.list_typed(namespace, job, Watched::Jobs).await,
            WorkloadKind::CronJob => self.list_cron_jobs(namespace).await,
            WorkloadKind::DeploymentConfig => {
                let gvk = GroupVersionKind::gvk("apps.openshift.io", "v1", "DeploymentConfig");
                let resource = ApiResource::from_gvk_with_plural(&gvk, "deploymentconfigs");
                let api: Api<DynamicObject> =
                    Api::namespaced_with(self.client.clone(), namespace, &resource);
                // Not watched: `--wait` falls back to polling for DeploymentConfigs.
                let (items, _) = self.list(&api).await?;
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
            WorkloadKind::Rollout => self.list_rollouts(namespace).await,
            // Pods are read with the namespace's pod list; the other kinds never get here.
            WorkloadKind::Pod
            | WorkloadKind::PodTemplate
            | WorkloadKind::ReplicationController
            | WorkloadKind::Other(_) => Ok(Found::new()),
        }
    }

    /// The namespace's CronJobs, each with the Jobs it created from its current template.
    async fn list_cron_jobs(&self, namespace: &str) -> Result<Found, kube::Error> {
        let cron_jobs: Vec<CronJob> = self.list_all(namespace, Watched::CronJobs).await?;
        if cron_jobs.is_empty() {
            return Ok(Found::new());
        }
        let jobs: Vec<Job> = self.list_all(namespace, Watched::Jobs).await?;
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

    /// The namespace's Argo Rollouts, each with the ReplicaSets it owns: their pods are the
    /// Rollout's (by `rollouts-pod-template-hash`), and the stable one's template says what
    /// the stable pods run. A cluster that serves no Rollouts (the CRD is not installed) has
    /// none, so a pinned Rollout is missing there.
    async fn list_rollouts(&self, namespace: &str) -> Result<Found, kube::Error> {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), namespace, &rollout_resource());
        let rollouts = match self.list(&api).await {
            Ok((items, version)) => {
                if let Some(version) = version {
                    lock(&self.seen).insert((namespace.to_string(), Watched::Rollouts), version);
                }
                items
            }
            Err(kube::Error::Api(status)) if status.code == 404 => Vec::new(),
            Err(e) => return Err(e),
        };
        if rollouts.is_empty() {
            return Ok(Found::new());
        }
        let replica_sets: Vec<ReplicaSet> = self.list_all(namespace, Watched::ReplicaSets).await?;
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

    async fn list_typed<K>(
        &self,
        namespace: &str,
        convert: fn(K) -> (LiveWorkload, Selector),
        watched: Watched,
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
        Ok(self
            .list_all::<K>(namespace, watched)
            .await?
            .into_iter()
            .map(|o| {
                let name = o.meta().name.clone().unwrap_or_default();
                (name, convert(o))
            })
            .collect())
    }

    /// Every object of one type in `namespace`, page by page; remembers where a watch for
    /// what changes next would start.
    async fn list_all<K>(&self, namespace: &str, watched: Watched) -> Result<Vec<K>, kube::Error>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug
            + Send
            + Sync
            + 'static,
    {
        let api = Api::<K>::namespaced(self.client.clone(), namespace);
        let (items, version) = self.list(&api).await?;
        if let Some(version) = version {
            lock(&self.seen).insert((namespace.to_string(), watched), version);
        }
        Ok(items)
    }

    /// Waits until something tagpin last listed changes (a pod turns ready, a rollout moves),
    /// or `timeout` passes. Watches start at the resourceVersion of the last lists, so only
    /// real changes wake it; where a watch cannot be opened (no `watch` permission, an old
    /// server) it simply waits out the timeout, which makes `--wait` poll.
    pub async fn wait_for_change(&self, timeout: Duration) -> bool {
        let seen = lock(&self.seen).clone();
        let seconds = u32::try_from(timeout.as_secs().max(1)).unwrap_or(u32::MAX);
        let (tx, mut rx) = tokio::sync::mpsc::channel::<()>(1);
        let mut watches = Vec::new();
        for ((namespace, watched), version) in seen {
            let (client, tx) = (self.watch_client.clone(), tx.clone());
            watches.push(tokio::spawn(async move {
                let changed = match watched {
                    Watched::Pods => changes::<Pod>(client, &namespace, &version, seconds).await,
                    Watched::Deployments => {
                        changes::<Deployment>(client, &namespace, &version, seconds).await
                    }
                    Watched::StatefulSets => {
                        changes::<StatefulSet>(client, &namespace, &version, seconds).await
                    }
                    Watched::DaemonSets => {
                        changes::<DaemonSet>(client, &namespace, &version, seconds).await
                    }
                    Watched::ReplicaSets => {
                        changes::<ReplicaSet>(client, &namespace, &version, seconds).await
                    }
                    Watched::Jobs => changes::<Job>(client, &namespace, &version, seconds).await,
                    Watched::CronJobs => {
                        changes::<CronJob>(client, &namespace, &version, seconds).await
                    }
                    Watched::Rollouts => {
                        let api = Api::<DynamicObject>::namespaced_with(
                            client,
                            &namespace,
                            &rollout_resource(),
                        );
                        watch_changes(api, &namespace, &version, seconds).await
                    }
                };
                if changed {
                    let _ = tx.send(()).await;
                }
            }));
        }
        drop(tx);
        let started = tokio::time::Instant::now();
        let changed = match tokio::time::timeout(timeout, rx.recv()).await {
            Ok(Some(())) => true,
            // Every watch ended without a change (refused, or closed by the server): poll.
            Ok(None) => {
                tokio::time::sleep(timeout.saturating_sub(started.elapsed())).await;
                false
            }
            Err(_) => false,
        };
        for watch in watches {
            watch.abort();
        }
        changed
    }

    /// Every pod of `namespace` with its labels, page by page.
    async fn list_pods(&self, namespace: &str) -> Result<Vec<LabelledPod>, kube::Error> {
        Ok(self
            .list_all::<Pod>(namespace, Watched::Pods)
            .await?
            .iter()
            .map(|p| LabelledPod {
                labels: p.metadata.labels.clone().unwrap_or_default(),
                pod: live_pod(p),
            })
            .collect())
    }
}

/// What [`Cluster::wait_for_change`] watches, per namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Watched {
    Pods,
    Deployments,
    StatefulSets,
    DaemonSets,
    ReplicaSets,
    Jobs,
    CronJobs,
    Rollouts,
}

/// Whether a watch from `version` sees an object added, modified or deleted within
/// `seconds`. An `ERROR` event (the version expired) counts as a change: the caller lists
/// again. A watch that cannot be opened or fails sees nothing.
async fn changes<K>(client: kube::Client, namespace: &str, version: &str, seconds: u32) -> bool
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
{
    watch_changes(
        Api::<K>::namespaced(client, namespace),
        namespace,
        version,
        seconds,
    )
    .await
}

/// [`changes`] through any namespaced API, custom resources' (Argo Rollouts) included.
async fn watch_changes<K>(api: Api<K>, namespace: &str, version: &str, seconds: u32) -> bool
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let params = WatchParams::default().timeout(seconds);
    let Ok(stream) = api.watch(&params, version).await else {
        return false;
    };
    let mut stream = std::pin::pin!(stream);
    while let Some(event) = stream.next().await {
        match event {
            Ok(WatchEvent::Bookmark(_)) => continue,
            Ok(_) => return true,
            Err(e) => {
                tracing::debug!("watch of {namespace} ended: {e}");
                return false;
            }
        }
    }
    false
}

/// The client configuration for `context` of `kubeconfig` (its current context when `None`).
/// A missing context is reported with the contexts the file does have.
async fn from_kubeconfig(
    kubeconfig: Kubeconfig,
    context: Option<&str>,
) -> Result<kube::Config, ContextError> {
    let known: Vec<String> = kubeconfig.contexts.iter().map(|c| c.name.clone()).collect();
    let options = KubeConfigOptions {
        context: context.map(str::to_string),
        ..KubeConfigOptions::default()
    };
    kube::Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .map_err(|e| match e {
            KubeconfigError::LoadContext(name) => ContextError::NotFound {
                // A named context is in the target already; the current one is not.
                current: context.is_none().then_some(name),
                known,
            },
            KubeconfigError::CurrentContextNotSet => ContextError::NotSet,
            e => ContextError::Kube(e),
        })
}

/// Why a kubeconfig's context cannot be used.
#[derive(Debug, thiserror::Error)]
enum ContextError {
    /// `current`: the file's current-context, when that is the one missing (a context the
    /// target names is in the target's own words already); `known`: the contexts it has.
    #[error("{}", context_not_found(.current.as_deref(), .known))]
    NotFound {
        current: Option<String>,
        known: Vec<String>,
    },
    #[error("no current-context is set; name one (cluster.context)")]
    NotSet,
    #[error(transparent)]
    Kube(KubeconfigError),
}

fn context_not_found(current: Option<&str>, known: &[String]) -> String {
    let missing = match current {
        None => "context not found".to_string(),
        Some(name) => format!("current-context {name:?} not found"),
    };
    if known.is_empty() {
        format!("{missing}: the kubeconfig has no contexts")
    } else {
        format!("{missing} (the kubeconfig has {})", known.join(", "))
    }
}

/// A kubeconfig that could not be read, without kube's repetition of the path (the target
/// names it already).
#[derive(Debug, thiserror::Error)]
enum UnreadKubeconfig {
    #[error("cannot read: {0}")]
    Read(#[source] std::io::Error),
    #[error(transparent)]
    Kube(KubeconfigError),
}

fn read_error(e: KubeconfigError) -> UnreadKubeconfig {
    match e {
        KubeconfigError::ReadConfig(source, _) => UnreadKubeconfig::Read(source),
        e => UnreadKubeconfig::Kube(e),
    }
}

/// Runs `read` until it succeeds or fails for good: a transient failure (timeout, 5xx, 429) is
/// tried again, up to [`READ_ATTEMPTS`] times with a short backoff, so one hiccup of the API
/// server does not fail a check.
async fn retrying<T, F, Fut>(mut read: F) -> Result<T, LiveError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, LiveError>>,
{
    let mut pause = Duration::from_millis(500);
    for _ in 1..READ_ATTEMPTS {
        match read().await {
            Err(e) if e.is_transient() => {
                // A 429 says how long to wait (`details.retryAfterSeconds`); honour it,
                // within reason.
                let wait = e
                    .retry_after()
                    .map_or(pause, |asked| asked.min(MAX_RETRY_AFTER));
                tracing::warn!("{e}; trying again in {wait:?}");
                tokio::time::sleep(wait).await;
                pause *= 2;
            }
            done => return done,
        }
    }
    read().await
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
/// ([`Server::refused`]).
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

/// Every item of a list, following `continue` tokens, and the list's resourceVersion (of the
/// first page: the snapshot all pages belong to).
async fn list_pages<K>(api: &Api<K>) -> Result<(Vec<K>, Option<String>), kube::Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut params = ListParams::default().limit(PAGE);
    let mut items = Vec::new();
    let mut version = None;
    loop {
        let page = api.list(&params).await?;
        version = version.or(page.metadata.resource_version.clone());
        items.extend(page.items);
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok((items, version)),
        }
    }
}

impl Cluster {
    /// A refused list (403) is data for the verdict; any other failure stops the check.
    /// `what` names the resource listed (`pods`, `Deployment`).
    ///
    /// The refusal is the API server's message, which names the identity that was refused.
    /// When a tenant's ServiceAccount is impersonated it is tagpin's own words instead ("the
    /// ServiceAccount team-a/tagpin may not list deployments in team-b"): what the tenant may
    /// not read is not tagpin's fault to report, and nothing but the refusal is said.
    fn refused_or<T>(
        &self,
        result: Result<T, kube::Error>,
        namespace: &str,
        what: &str,
    ) -> Result<Listed<T>, LiveError> {
        match result {
            Ok(items) => Ok(Ok(items)),
            Err(kube::Error::Api(status))
                if status.code == 403 && !impersonation_refused(&status) =>
            {
                Ok(Err(Refusal(match self.acting_as() {
                    Some(account) => {
                        let resource = refused_resource(&status, what);
                        format!(
                            "the ServiceAccount {account} may not list {resource} in {namespace}"
                        )
                    }
                    None => self
                        .server
                        .refused(&format!("{what} in namespace {namespace}"), status.code),
                })))
            }
            Err(source) => Err(self.failed(format!("{what} in namespace {namespace}"), source)),
        }
    }

    fn failed(&self, what: String, source: kube::Error) -> LiveError {
        match (&source, self.acting_as()) {
            (kube::Error::Api(status), Some(account)) if impersonation_refused(status) => {
                LiveError::ImpersonationRefused {
                    server: Arc::clone(&self.server),
                    what,
                    account: account.clone(),
                }
            }
            _ => LiveError::Api {
                server: Arc::clone(&self.server),
                what,
                source,
            },
        }
    }
}

/// Whether a 403 refuses the impersonation itself (tagpin's own identity may not impersonate
/// the ServiceAccount: `serviceaccounts "tagpin" is forbidden: User "…" cannot impersonate
/// resource "serviceaccounts"…`), not the read: an install's fault, which stops the check
/// with the API server's words rather than passing for the tenant's limits.
fn impersonation_refused(status: &kube::core::Status) -> bool {
    status.code == 403 && status.message.contains("cannot impersonate")
}

/// The resource a 403 refused, as the API server names it in the Status's details (its
/// plural: `jobs` when listing a CronJob's runs was refused), else `fallback`.
fn refused_resource(status: &kube::core::Status, fallback: &str) -> String {
    match status.details.as_ref().map(|d| d.kind.as_str()) {
        Some(kind) if !kind.is_empty() => kind.to_string(),
        _ => plural(fallback),
    }
}

/// `Deployment` → `deployments`, `pods` stays.
fn plural(resource: &str) -> String {
    let resource = resource.to_ascii_lowercase();
    match resource.ends_with('s') {
        true => resource,
        false => format!("{resource}s"),
    }
}

/// Why a request failed, in tagpin's words: "no answer within 30s" when the client gave up
/// waiting (kube's own message only says "client error"), the bound an answer passed, the
/// HTTP status of a refusal (never the API server's message: see [`Server::refused`]), the
/// line and column of an answer that is not what the API sends; else kube's message for a
/// transport failure, and its causes.
fn cause(error: &kube::Error, timeout: Duration) -> String {
    if let Some(exceeded) = bounded::exceeded_in(error) {
        return exceeded.to_string();
    }
    match error {
        kube::Error::Api(status) => return status_text(status.code),
        kube::Error::SerdeError(e) => {
            return format!("unexpected answer: {}", bounded::json_problem(e))
        }
        kube::Error::FromUtf8(_) => return "unexpected answer: not UTF-8 text".to_string(),
        _ => {}
    }
    let mut messages = vec![error.to_string()];
    let mut next: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(error);
    while let Some(e) = next {
        if e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
        {
            return format!("no answer within {timeout:?} (timed out)");
        }
        let message = e.to_string();
        if !messages.iter().any(|m| m.contains(&message)) {
            messages.push(message);
        }
        next = e.source();
    }
    messages.join(": ")
}

/// `403 Forbidden`: the status and its standard reason.
fn status_text(code: u16) -> String {
    match http::StatusCode::from_u16(code)
        .ok()
        .and_then(|s| s.canonical_reason())
    {
        Some(reason) => format!("{code} {reason}"),
        None => format!("HTTP {code}"),
    }
}

/// A workload's pod selector, matched here against the labels of the namespace's pods.
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

fn deployment(d: Deployment) -> (LiveWorkload, Selector) {
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

fn stateful_set(s: StatefulSet) -> (LiveWorkload, Selector) {
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

fn daemon_set(d: DaemonSet) -> (LiveWorkload, Selector) {
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

fn replica_set(r: ReplicaSet) -> (LiveWorkload, Selector) {
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

fn job(j: Job) -> (LiveWorkload, Selector) {
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
fn cron_job(c: CronJob, jobs: &[Job]) -> (LiveWorkload, Selector) {
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

fn deployment_config(o: &DynamicObject) -> (LiveWorkload, Selector) {
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

/// Where the cluster serves Argo Rollouts: `rollouts.argoproj.io/v1alpha1`.
fn rollout_resource() -> ApiResource {
    let gvk = GroupVersionKind::gvk("argoproj.io", "v1alpha1", "Rollout");
    ApiResource::from_gvk_with_plural(&gvk, "rollouts")
}

/// The label Argo Rollouts puts on each ReplicaSet it creates, and on its pods: the hash of
/// the pod template, which `status.currentPodHash` and `status.stableRS` name.
const ROLLOUT_HASH_LABEL: &str = "rollouts-pod-template-hash";

/// A Rollout as the verdict reads it. Its pods are those of the ReplicaSets it owns (by owner
/// uid), selected by the Rollout's selector and each ReplicaSet's
/// `rollouts-pod-template-hash`: canary and stable alike, and never the pods of an Experiment
/// or an analysis Job that happen to match the selector.
fn rollout(o: &DynamicObject, replica_sets: &[ReplicaSet]) -> (LiveWorkload, Selector) {
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
        reason: status.reason.clone(),
        containers,
        node: p.spec.as_ref().and_then(|s| s.node_name.clone()),
        spec_images: p.spec.as_ref().map(spec_images).unwrap_or_default(),
    }
}

/// The GitOps objects the cluster holds, as listed (JSON), for [`super::gitops`] to read.
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

/// Objects listed, and why some could not be (see [`Cluster::list_everywhere`]).
type Everywhere = (Vec<serde_json::Value>, Option<String>);

impl Cluster {
    /// Every Argo CD Application, Flux Kustomization and Flux GitRepository, in all namespaces,
    /// page by page. A kind whose CRD is not installed (404) or that tagpin may not list (403)
    /// is simply absent: most clusters run one of the two tools, or neither. An impersonated
    /// ServiceAccount refused them in all namespaces reads those of its own namespace (where a
    /// tenant's Flux objects live), and [`GitOpsListing::unread`] says so.
    pub async fn gitops_objects(&self) -> Result<GitOpsListing, LiveError> {
        let (applications, kustomizations, git_repositories) = futures::try_join!(
            self.list_everywhere("argoproj.io", "v1alpha1", "Application", "applications"),
            self.list_everywhere(
                "kustomize.toolkit.fluxcd.io",
                "v1",
                "Kustomization",
                "kustomizations"
            ),
            self.list_everywhere(
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
    pub async fn helm_releases(&self) -> Result<Everywhere, LiveError> {
        let gvk = GroupVersionKind::gvk("helm.toolkit.fluxcd.io", "v2", "HelmRelease");
        let resource = ApiResource::from_gvk_with_plural(&gvk, "helmreleases");
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &resource);
        let status = match self.list(&api).await {
            Ok((items, _)) => return Ok((as_json(&items), None)),
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 403 => status,
            Err(source) => {
                return Err(self.failed(
                    "helmreleases.helm.toolkit.fluxcd.io in all namespaces".to_string(),
                    source,
                ))
            }
        };
        let why = match (status.code, self.acting_as()) {
            (404, _) => "the cluster serves no helm.toolkit.fluxcd.io/v2 HelmReleases (CRD not \
                         installed, or Flux older than 2.3)"
                .to_string(),
            _ if impersonation_refused(&status) => {
                return Err(self.failed(
                    "helmreleases.helm.toolkit.fluxcd.io in all namespaces".to_string(),
                    kube::Error::Api(status),
                ))
            }
            (_, Some(account)) => return self.list_own_namespace(account, &resource).await,
            (_, None) => format!(
                "tagpin may not list HelmReleases ({})",
                self.server
                    .refused("helmreleases.helm.toolkit.fluxcd.io", status.code)
            ),
        };
        Ok((Vec::new(), Some(why)))
    }

    /// The workloads of `namespace` a Helm release may run its containers in
    /// ([`crate::verify::judge::helm::RELEASE_KINDS`]), with their annotations and template images; the
    /// message of a refusal (403) instead, for the verdict to name.
    pub async fn release_workloads(
        &self,
        namespace: &str,
    ) -> Result<crate::verify::judge::helm::NamespaceWorkloads, LiveError> {
        use crate::verify::judge::helm::ReleaseWorkload;
        fn of<K: kube::Resource>(
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
        let mut found = Vec::new();
        let deployments = self.refused_or(
            self.list_all::<Deployment>(namespace, Watched::Deployments)
                .await,
            namespace,
            "Deployment",
        )?;
        let stateful_sets = self.refused_or(
            self.list_all::<StatefulSet>(namespace, Watched::StatefulSets)
                .await,
            namespace,
            "StatefulSet",
        )?;
        let daemon_sets = self.refused_or(
            self.list_all::<DaemonSet>(namespace, Watched::DaemonSets)
                .await,
            namespace,
            "DaemonSet",
        )?;
        match (deployments, stateful_sets, daemon_sets) {
            (Ok(deployments), Ok(stateful_sets), Ok(daemon_sets)) => {
                found.extend(deployments.iter().map(|d| {
                    let template = d.spec.as_ref().map(|s| &s.template);
                    of(WorkloadKind::Deployment, namespace, d, template)
                }));
                found.extend(stateful_sets.iter().map(|s| {
                    let template = s.spec.as_ref().map(|s| &s.template);
                    of(WorkloadKind::StatefulSet, namespace, s, template)
                }));
                found.extend(daemon_sets.iter().map(|d| {
                    let template = d.spec.as_ref().map(|s| &s.template);
                    of(WorkloadKind::DaemonSet, namespace, d, template)
                }));
                Ok(Ok(found))
            }
            (Err(message), _, _) | (_, Err(message), _) | (_, _, Err(message)) => Ok(Err(message)),
        }
    }

    /// Every object of a custom resource in all namespaces, as JSON, and why not all could
    /// be read. A resource not served (404) or not readable (403) has none, and says nothing
    /// (most clusters run one GitOps tool, or none); an impersonated ServiceAccount refused
    /// them in all namespaces reads those of its own namespace instead, and says so.
    async fn list_everywhere(
        &self,
        group: &str,
        version: &str,
        kind: &str,
        plural: &str,
    ) -> Result<Everywhere, LiveError> {
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let resource = ApiResource::from_gvk_with_plural(&gvk, plural);
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &resource);
        match self.list(&api).await {
            Ok((items, _)) => Ok((as_json(&items), None)),
            Err(kube::Error::Api(status))
                if (status.code == 403 && !impersonation_refused(&status))
                    || status.code == 404 =>
            {
                if let (403, Some(account)) = (status.code, self.acting_as()) {
                    return self.list_own_namespace(account, &resource).await;
                }
                tracing::debug!("no {plural}.{group} to consult (HTTP {})", status.code);
                Ok((Vec::new(), None))
            }
            Err(source) => Err(self.failed(format!("{plural}.{group} in all namespaces"), source)),
        }
    }

    /// The objects of `resource` in `account`'s own namespace, read after it was refused them
    /// in all namespaces, with what that leaves out. Never the operator's own identity: a
    /// tenant sees what its RBAC grants, or nothing.
    async fn list_own_namespace(
        &self,
        account: &ServiceAccount,
        resource: &ApiResource,
    ) -> Result<Everywhere, LiveError> {
        let name = match resource.group.as_str() {
            "" => resource.plural.clone(),
            group => format!("{}.{group}", resource.plural),
        };
        let namespace = &account.namespace;
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), namespace, resource);
        let refused = format!("the ServiceAccount {account} may not list {name} in all namespaces");
        match self.list(&api).await {
            Ok((items, _)) => Ok((
                as_json(&items),
                Some(format!("{refused}; only those of {namespace} were read")),
            )),
            Err(kube::Error::Api(status))
                if (status.code == 403 && !impersonation_refused(&status))
                    || status.code == 404 =>
            {
                Ok((Vec::new(), Some(format!("{refused}, nor in {namespace}"))))
            }
            Err(source) => Err(self.failed(format!("{name} in namespace {namespace}"), source)),
        }
    }
}

/// Listed objects as JSON, for the pure readers of [`super::gitops`] and [`super::helm`].
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

/// [`Cluster::connect_to`] against kubeconfig files, with local API servers that record who
/// asked them what.
#[cfg(test)]
mod connect_tests {
    use super::*;
    use std::path::{Path, PathBuf};
    use std::sync::{Arc, Mutex};
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    /// What one request asked: `GET /path?query Bearer token`.
    type Requests = Arc<Mutex<Vec<String>>>;

    /// A plain-HTTP API server that answers every request 404 (no such resource, which
    /// [`Cluster::gitops_objects`] reads as "none") and records each request line with its
    /// Authorization header.
    async fn recording_server() -> (String, Requests) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let requests = Requests::default();
        let record = requests.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let record = record.clone();
                tokio::spawn(async move {
                    let mut stream = BufReader::new(stream);
                    let (mut request, mut authorization) = (String::new(), String::new());
                    let mut acting_as = String::new();
                    let mut line = String::new();
                    while stream.read_line(&mut line).await.unwrap_or(0) > 0 {
                        let header = line.trim_end();
                        if header.is_empty() {
                            break;
                        }
                        if request.is_empty() {
                            request = header.trim_end_matches(" HTTP/1.1").to_string();
                        } else if let Some((name, value)) = header.split_once(':') {
                            if name.eq_ignore_ascii_case("authorization") {
                                authorization = value.trim().to_string();
                            } else if name.eq_ignore_ascii_case("impersonate-user") {
                                acting_as = format!(" as {}", value.trim());
                            }
                        }
                        line.clear();
                    }
                    lock(&record).push(format!("{request} {authorization}{acting_as}"));
                    let body = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"not found","reason":"NotFound","code":404}"#;
                    let response = format!(
                        "HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let stream = stream.get_mut();
                    let _ = stream.write_all(response.as_bytes()).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        (url, requests)
    }

    /// A kubeconfig with contexts `staging` (current) and `prod`, each with its own cluster
    /// and user, written to `dir/kubeconfig`.
    fn two_contexts(dir: &Path, staging_url: &str, prod_url: &str) -> PathBuf {
        let path = dir.join("kubeconfig");
        let text = format!(
            "apiVersion: v1
kind: Config
clusters:
- name: staging
  cluster: {{server: '{staging_url}'}}
- name: prod
  cluster: {{server: '{prod_url}'}}
users:
- name: staging
  user: {{token: staging-token}}
- name: prod
  user: {{token: prod-token}}
contexts:
- name: staging
  context: {{cluster: staging, user: staging}}
- name: prod
  context: {{cluster: prod, user: prod}}
current-context: staging
"
        );
        std::fs::write(&path, text).unwrap();
        path
    }

    fn kubeconfig(path: &Path, context: Option<&str>) -> ClusterTarget {
        ClusterTarget::Kubeconfig {
            path: path.to_path_buf(),
            context: context.map(str::to_string),
        }
    }

    #[tokio::test]
    async fn an_impersonating_cluster_keeps_the_connection_and_adds_only_the_user_header() {
        let (staging_url, _) = recording_server().await;
        let (prod_url, prod) = recording_server().await;
        let dir = tempfile::tempdir().unwrap();
        let path = two_contexts(dir.path(), &staging_url, &prod_url);
        let timeout = Duration::from_secs(7);
        let own = Cluster::connect_to(&kubeconfig(&path, Some("prod")), timeout)
            .await
            .unwrap();
        let account = ServiceAccount {
            namespace: "team-a".into(),
            name: "tagpin".into(),
        };
        let tenant = own.impersonating(account.clone()).unwrap();
        assert_eq!(tenant.acting_as(), Some(&account));
        assert_eq!(own.acting_as(), None);
        assert_eq!(tenant.server.url, own.server.url);
        assert_eq!(tenant.server.timeout, timeout);
        assert_eq!(tenant.config.default_retry, own.config.default_retry);
        assert_eq!(tenant.config.connect_timeout, Some(timeout));
        assert_eq!(tenant.config.auth_info.impersonate_groups, None);

        tenant.gitops_objects().await.unwrap();
        own.gitops_objects().await.unwrap();
        let asked = lock(&prod).clone();
        assert_eq!(asked.len(), 6, "{asked:?}");
        let (as_tenant, as_own): (Vec<&String>, Vec<&String>) =
            asked.iter().partition(|r| r.contains(" as "));
        assert_eq!(as_tenant.len(), 3, "{asked:?}");
        assert!(
            as_tenant
                .iter()
                .all(|r| r.ends_with(" Bearer prod-token as system:serviceaccount:team-a:tagpin")),
            "{asked:?}"
        );
        assert!(
            as_own.iter().all(|r| r.ends_with(" Bearer prod-token")),
            "{asked:?}"
        );
    }

    #[tokio::test]
    async fn a_kubeconfig_target_reaches_the_named_contexts_server_as_its_user() {
        let (staging_url, staging) = recording_server().await;
        let (prod_url, prod) = recording_server().await;
        let dir = tempfile::tempdir().unwrap();
        let path = two_contexts(dir.path(), &staging_url, &prod_url);

        let cluster = Cluster::connect_to(&kubeconfig(&path, Some("prod")), DEFAULT_API_TIMEOUT)
            .await
            .unwrap();
        let listing = cluster.gitops_objects().await.unwrap();
        assert!(listing.applications.is_empty());
        assert!(lock(&staging).is_empty(), "{:?}", lock(&staging));
        let asked = lock(&prod).clone();
        assert_eq!(asked.len(), 3, "{asked:?}");
        assert!(
            asked.iter().all(|r| r.ends_with(" Bearer prod-token")),
            "{asked:?}"
        );
        assert!(
            asked
                .iter()
                .any(|r| r.starts_with("GET /apis/argoproj.io/v1alpha1/applications?")),
            "{asked:?}"
        );
    }

    #[tokio::test]
    async fn a_kubeconfig_target_without_a_context_uses_the_files_current_one() {
        let (staging_url, staging) = recording_server().await;
        let (prod_url, prod) = recording_server().await;
        let dir = tempfile::tempdir().unwrap();
        let path = two_contexts(dir.path(), &staging_url, &prod_url);

        let cluster = Cluster::connect_to(&kubeconfig(&path, None), DEFAULT_API_TIMEOUT)
            .await
            .unwrap();
        cluster.gitops_objects().await.unwrap();
        assert!(lock(&prod).is_empty(), "{:?}", lock(&prod));
        let asked = lock(&staging).clone();
        assert_eq!(asked.len(), 3, "{asked:?}");
        assert!(
            asked.iter().all(|r| r.ends_with(" Bearer staging-token")),
            "{asked:?}"
        );
    }

    #[tokio::test]
    async fn a_missing_kubeconfig_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("absent.kubeconfig");
        let Err(e) = Cluster::connect_to(&kubeconfig(&path, None), DEFAULT_API_TIMEOUT).await
        else {
            panic!("connected with a kubeconfig that does not exist");
        };
        let text = e.to_string();
        assert!(
            text.starts_with(&format!("kubeconfig {}: cannot read: ", path.display())),
            "{text}"
        );
        assert!(text.contains("No such file"), "{text}");
        assert!(matches!(e, LiveError::Config(_)) && !e.is_transient());
    }

    #[tokio::test]
    async fn a_missing_context_is_named_with_the_ones_there_are() {
        let dir = tempfile::tempdir().unwrap();
        let path = two_contexts(dir.path(), "http://127.0.0.1:1", "http://127.0.0.1:2");
        let Err(e) =
            Cluster::connect_to(&kubeconfig(&path, Some("dev")), DEFAULT_API_TIMEOUT).await
        else {
            panic!("connected to a context that does not exist");
        };
        assert_eq!(
            e.to_string(),
            format!(
                "context \"dev\" of kubeconfig {}: context not found (the kubeconfig has staging, prod)",
                path.display()
            )
        );

        let text = std::fs::read_to_string(&path)
            .unwrap()
            .replace("current-context: staging", "current-context: gone");
        std::fs::write(&path, text).unwrap();
        let Err(e) = Cluster::connect_to(&kubeconfig(&path, None), DEFAULT_API_TIMEOUT).await
        else {
            panic!("connected to a current-context that does not exist");
        };
        assert_eq!(
            e.to_string(),
            format!(
                "kubeconfig {}: current-context \"gone\" not found (the kubeconfig has staging, prod)",
                path.display()
            )
        );
    }

    #[tokio::test]
    async fn an_unparsable_kubeconfig_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubeconfig");
        std::fs::write(&path, "clusters: [unclosed\n").unwrap();
        let Err(e) =
            Cluster::connect_to(&kubeconfig(&path, Some("prod")), DEFAULT_API_TIMEOUT).await
        else {
            panic!("connected with a kubeconfig that is not YAML");
        };
        let text = e.to_string();
        assert!(
            text.starts_with(&format!(
                "context \"prod\" of kubeconfig {}: failed to parse kubeconfig YAML",
                path.display()
            )),
            "{text}"
        );
    }

    #[tokio::test]
    async fn in_cluster_outside_a_pod_names_the_service_account() {
        if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() {
            return; // Running in a pod: in-cluster configuration may well succeed.
        }
        let Err(e) = Cluster::connect_to(&ClusterTarget::InCluster, DEFAULT_API_TIMEOUT).await
        else {
            panic!("connected in-cluster outside a pod");
        };
        assert!(
            e.to_string().starts_with(
                "the in-cluster service account: failed to read an incluster environment variable"
            ),
            "{e}"
        );
    }
}
