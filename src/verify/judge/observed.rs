//! What tagpin read of the cluster and the registry, reduced to the plain data the verdict
//! judges: the live workload and its rollout fields, its pods and their container statuses,
//! and what a pinned digest stands for. No logic; every judging module reads these types.

use std::collections::BTreeMap;

use crate::workload::{WorkloadId, WorkloadKind};

/// What the registry says the pinned digest stands for. Any part may be empty when unknown;
/// then only the pinned digest itself is accepted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DigestFamily {
    /// The digest this family was resolved for. When set and different from
    /// [`Expected::digest`](super::expected::Expected::digest) the family is stale and is ignored, so that the children of another
    /// index can never vouch for a pod.
    pub pinned: String,
    /// For a multi-arch index, the digests of its platform manifests: CRI-O and containerd may
    /// report the platform manifest a node pulled instead of the index.
    pub platform_children: Vec<String>,
    /// The image config digests (image IDs), which Docker-based runtimes report as a bare
    /// `sha256:…` without a repository.
    pub config_digests: Vec<String>,
}

/// The live workload object, reduced to what the verdict reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveWorkload {
    pub kind: String,
    /// `metadata.generation`; absent reads as 0, as in Go.
    pub generation: Option<i64>,
    /// `status.observedGeneration`; absent reads as 0, as in Go.
    pub observed_generation: Option<i64>,
    /// The live pod template's containers and init containers: `(name, image)`.
    pub template_images: Vec<(String, String)>,
    pub rollout: RolloutStatus,
}

/// The fields `kubectl rollout status` (or `oc rollout status`) reads, per kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RolloutStatus {
    Deployment {
        spec_replicas: i32,
        replicas: i32,
        updated: i32,
        ready: i32,
        available: i32,
        /// The `Progressing` condition has reason `ProgressDeadlineExceeded`.
        progress_deadline_exceeded: bool,
    },
    StatefulSet {
        spec_replicas: i32,
        ready: i32,
        updated: i32,
        current_revision: Option<String>,
        update_revision: Option<String>,
        /// `spec.updateStrategy.type` is `RollingUpdate` (the default).
        rolling_update: bool,
        /// `spec.updateStrategy.rollingUpdate.partition`.
        partition: Option<i32>,
    },
    DaemonSet {
        desired: i32,
        updated: i32,
        available: i32,
        /// `spec.updateStrategy.type` is `RollingUpdate` (the default).
        rolling_update: bool,
    },
    ReplicaSet {
        spec_replicas: i32,
        ready: i32,
        available: i32,
    },
    Job {
        active: i32,
        succeeded: i32,
        failed: i32,
        /// The message of a `Failed` condition with status `True`.
        failed_condition: Option<String>,
    },
    /// A CronJob, judged by the newest Job it created from its current `jobTemplate` (once the
    /// template carries the pin, those are the runs since the pin). The caller passes the pods
    /// of those Jobs, and of any run of an older template still active (they run the old digest
    /// now), only.
    CronJob {
        /// Jobs created from the current template.
        runs: usize,
        /// The newest of them, as [`RolloutStatus::Job`].
        latest: Option<Box<RolloutStatus>>,
    },
    /// A bare Pod: judged from the pod itself, which the caller passes in [`Live::Found`].
    Pod,
    /// An Argo Rollouts `Rollout`, judged as Argo Rollouts judges it: the caller passes the
    /// pods of the ReplicaSets the Rollout owns (matched by their `rollouts-pod-template-hash`),
    /// canary and stable alike.
    Rollout(Box<ArgoRollout>),
    DeploymentConfig {
        spec_replicas: i32,
        updated: i32,
        available: i32,
        /// `status.latestVersion`; 0 or absent means no deployment has run yet.
        latest_version: Option<i64>,
        /// The message of the `Progressing` condition when its reason says the rollout failed
        /// (`ProgressDeadlineExceeded`, `RolloutCancelled`).
        progressing_failed: Option<String>,
    },
}

/// What Argo Rollouts' own judgement (`GetRolloutPhase`) reads of a Rollout, and what the
/// status says of its steps.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ArgoRollout {
    /// `status.phase`, computed by the controller since Argo Rollouts 1.0: `Healthy`,
    /// `Progressing`, `Paused` or `Degraded`. Absent from older controllers' status.
    pub phase: Option<String>,
    /// `status.message`: why the phase is what it is (`CanaryPauseStep`, `RolloutAborted: …`).
    pub message: Option<String>,
    /// `status.observedGeneration` as written: the generation in a string (v0.10 and later),
    /// or a hash of the spec (earlier), which says nothing about the generation.
    pub observed_generation: Option<String>,
    /// `status.controllerPause`.
    pub controller_pause: bool,
    /// The reasons of `status.pauseConditions` (`CanaryPauseStep`, `BlueGreenPause`).
    pub pause_conditions: Vec<String>,
    /// `spec.paused`: paused by hand.
    pub spec_paused: bool,
    /// `status.abort`.
    pub abort: bool,
    /// What makes an older controller's Rollout Degraded: an `InvalidSpec` condition, or a
    /// condition with reason `RolloutAborted` or `ProgressDeadlineExceeded`, as
    /// `reason: message`.
    pub degraded_condition: Option<String>,
    /// `spec.replicas` (1 when absent).
    pub spec_replicas: i32,
    pub replicas: i32,
    pub updated: i32,
    pub available: i32,
    /// `status.currentPodHash`: the `rollouts-pod-template-hash` of the current template.
    pub current_pod_hash: Option<String>,
    /// `status.stableRS`: the hash of the ReplicaSet that takes all traffic once promoted.
    pub stable_rs: Option<String>,
    pub strategy: RolloutStrategy,
    /// The pod template images of the stable ReplicaSet, when the Rollout owns one with that
    /// hash.
    pub stable_template_images: Option<Vec<(String, String)>>,
}

/// A Rollout's strategy, with what its status says of the way through it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum RolloutStrategy {
    Canary {
        /// Each step's `setWeight`, `None` for the other steps (`pause`, `analysis`, …).
        steps: Vec<Option<i32>>,
        /// `status.currentStepIndex`: the step the rollout is at (0-based); the number of
        /// steps once all are done.
        current_step_index: Option<i32>,
        /// `spec.strategy.canary.trafficRouting` is set: old replicas may stay up a while
        /// after promotion (`scaleDownDelaySeconds`).
        traffic_routing: bool,
    },
    BlueGreen {
        /// `status.blueGreen.activeSelector`: the hash the active Service selects.
        active_selector: Option<String>,
    },
    /// Neither strategy is set (the API server refuses such a Rollout).
    #[default]
    Unknown,
}

/// One pod of the workload.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LivePod {
    pub name: String,
    /// `status.phase`: `Pending`, `Running`, `Succeeded`, `Failed` or `Unknown`.
    pub phase: String,
    /// The pod's `Ready` condition is `True`.
    pub ready: bool,
    /// `metadata.deletionTimestamp` is set: the pod is on its way out and says nothing about
    /// what the workload will run.
    pub deleting: bool,
    /// `status.reason`, such as `Evicted`, for a pod that ended.
    pub reason: Option<String>,
    /// Container statuses (init containers may be included; names are unique within a pod).
    pub containers: Vec<LiveContainer>,
    /// `spec.nodeName`: the node the pod was scheduled to, whose image cache decides which
    /// digest a tag runs as under `imagePullPolicy: IfNotPresent`.
    pub node: Option<String>,
    /// The pod's own containers and init containers as its spec names them: `(name, image)`.
    /// The reference the pod asked for, which the runtime's `status.image` may spell otherwise
    /// (normalized, or as a bare image ID).
    pub spec_images: Vec<(String, String)>,
}

/// One entry of a pod's `status.containerStatuses`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LiveContainer {
    pub name: String,
    pub image: String,
    /// Empty until the runtime has the image and created the container.
    pub image_id: String,
    pub ready: bool,
    pub waiting_reason: Option<String>,
    pub waiting_message: Option<String>,
    pub restart_count: i32,
    pub last_terminated_reason: Option<String>,
}

/// A list the API server refused (403), in tagpin's words (never the server's own message):
/// data for the verdict, which then says what was not verified and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal(pub String);

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What the cluster holds for an expected workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Live {
    Missing,
    /// The API refused the read (403); the string says so in tagpin's words, naming the API
    /// server and the list (never the server's own message: see `cluster::Server::refused`).
    Forbidden(String),
    /// The ServiceAccount tagpin reads as for a tenant (impersonated) may not read it: the
    /// tenant's RBAC draws that line, so the pin is not verified (rather than failed), and
    /// the string is tagpin's own words naming the account, the resource and the namespace.
    /// Nothing of the workload is known, or ever said.
    Denied(String),
    Found {
        workload: LiveWorkload,
        pods: Vec<LivePod>,
    },
}

/// Every workload of some kinds in some namespaces, as listed: what `tagpin audit` compares
/// with Git, the workloads Git does not name included.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inventory {
    /// Each workload listed (its namespace always set), with the pods its selector matches.
    pub workloads: BTreeMap<WorkloadId, (LiveWorkload, Vec<LivePod>)>,
    /// The lists the API refused (403), by namespace and kind, in tagpin's words (see
    /// [`Live::Forbidden`]): what they would have listed is unknown.
    pub refused: BTreeMap<(String, WorkloadKind), String>,
}
