//! The convergence verdict: did the cluster do what Git now says?
//!
//! After tagpin pins `image: repo:tag@sha256:…` in Git, a GitOps tool applies it and a workload
//! controller rolls it out. A merged pull request proves none of that, and a green rollout alone
//! is not enough either: a partitioned StatefulSet, a ReplicaSet (which never replaces its pods)
//! or an `OnDelete` DaemonSet can report success while old bytes keep running. So the verdict
//! rests on three independent conditions, in the Kubernetes style:
//!
//! - `Synced`: the live pod template carries the pinned digest, so the GitOps tool applied it;
//! - `RolledOut`: the controller finished, judged as `kubectl rollout status` judges it
//!   (`oc rollout status` for an OpenShift DeploymentConfig);
//! - `DigestsMatch`: every pod that is not being deleted reports, in
//!   `status.containerStatuses[].imageID`, the pinned digest or a digest known to stand for it
//!   (a platform manifest of a multi-arch index, or the config digest Docker reports).
//!
//! The module is pure: plain structs in, a serializable [`Verdict`] out, so every rule is tested
//! with plain data. Reading the cluster and asking the registry what a digest stands for are the
//! caller's job; nothing here knows about kube or k8s-openapi types.

use serde::Serialize;

pub use super::expected::Expected;
use crate::reference::Digest;
use crate::workload::WorkloadId;

/// GitHub rejects a commit status whose description is longer than this many characters.
pub const STATUS_DESCRIPTION_MAX_CHARS: usize = 140;

/// How many pod names a reason line lists before "and N more": the line must stay readable in a
/// commit status or a terminal, and [`Verdict::stale_pods`] keeps the full list.
const PODS_NAMED_IN_REASON: usize = 5;

/// Waiting reasons with which the kubelet says a container cannot run as specified. Waiting
/// longer does not help (the kubelet only backs off), so they make a verdict Failed rather than
/// Progressing. `ErrImageNeverPull` is here too: with `imagePullPolicy: Never` and the image
/// absent, nothing will ever pull it.
const FATAL_WAITING_REASONS: &[&str] = &[
    "ImagePullBackOff",
    "ErrImagePull",
    "ErrImageNeverPull",
    "CrashLoopBackOff",
    "CreateContainerConfigError",
    "InvalidImageName",
];

/// What the registry says the pinned digest stands for. Any part may be empty when unknown;
/// then only the pinned digest itself is accepted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DigestFamily {
    /// The digest this family was resolved for. When set and different from
    /// [`Expected::digest`] the family is stale and is ignored, so that the children of another
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
    /// A bare Pod: judged from the pod itself, which the caller passes in [`Live::Found`].
    Pod,
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
    /// Container statuses (init containers may be included; names are unique within a pod).
    pub containers: Vec<LiveContainer>,
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

/// What the cluster holds for an expected workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Live {
    Missing,
    /// The API refused the read; the string is the API server's message.
    Forbidden(String),
    Found {
        workload: LiveWorkload,
        pods: Vec<LivePod>,
    },
}

/// The overall judgement for one container, or for a whole set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    Converged,
    Progressing,
    Failed,
    /// Something pinned was not checked (no live workload to check it on, or nothing selected
    /// at all): never reported as Converged.
    Unverified,
}

impl State {
    /// The same spelling as the serialized form, for human output.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Converged => "converged",
            State::Progressing => "progressing",
            State::Failed => "failed",
            State::Unverified => "unverified",
        }
    }
}

/// The three conditions a verdict always carries, in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ConditionType {
    Synced,
    RolledOut,
    DigestsMatch,
}

/// A Kubernetes condition status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

/// A Kubernetes-style condition, so that people and tools used to `kubectl describe` read the
/// verdict without a legend.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: ConditionType,
    pub status: ConditionStatus,
    /// A CamelCase reason, stable enough to match on.
    pub reason: String,
    pub message: String,
}

/// The judgement for one container of one workload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verdict {
    /// Serialized as `namespace/Kind/name`.
    pub workload: WorkloadId,
    pub container: String,
    pub pinned_digest: Digest,
    /// Pods, not being deleted, whose imageID stands for the pinned digest.
    pub pods_on_pinned: usize,
    /// Pods not being deleted.
    pub pods_total: usize,
    /// Pods, not being deleted, that do not run the pinned digest (yet).
    pub stale_pods: Vec<String>,
    /// `Synced`, `RolledOut` and `DigestsMatch`, in that order.
    pub conditions: Vec<Condition>,
    pub state: State,
    /// One line a person can act on.
    pub reason: String,
}

impl Verdict {
    /// The condition of the given type, so callers need not rely on the order.
    pub fn condition(&self, type_: ConditionType) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }
}

/// The digest a runtime reported in `status.containerStatuses[].imageID`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageIdDigest {
    /// `repo@sha256:…`: a manifest digest (the index, or the platform manifest pulled).
    WithRepo(String),
    /// A bare `sha256:…`: Docker-based runtimes report the image config digest this way.
    Bare(String),
}

/// Reads the digest out of a container status `imageID`, however the runtime spelled it.
///
/// Docker-era kubelets prefix `docker-pullable://` or `docker://` (any `scheme://` is dropped);
/// after that, whatever follows the last `@` is a manifest digest. Without `@`, a well-formed
/// digest is a config digest, and so is a bare 64-character hex image ID (read as sha256).
/// The repository is deliberately not returned: mirrors and runtimes spell it differently, and
/// only the digest identifies the bytes. Returns `None` for an empty or unreadable imageID.
pub fn digest_of_image_id(image_id: &str) -> Option<ImageIdDigest> {
    let id = image_id.trim();
    let id = id.split_once("://").map_or(id, |(_, rest)| rest);
    if let Some((_, digest)) = id.rsplit_once('@') {
        return is_digest(digest).then(|| ImageIdDigest::WithRepo(digest.to_owned()));
    }
    if is_digest(id) {
        return Some(ImageIdDigest::Bare(id.to_owned()));
    }
    if is_hex(id, 64) {
        return Some(ImageIdDigest::Bare(format!("sha256:{id}")));
    }
    None
}

/// Judges one pinned container against what the cluster holds.
pub fn judge(expected: &Expected, family: &DigestFamily, live: &Live) -> Verdict {
    let mut verdict = Verdict {
        workload: expected.workload.clone(),
        container: expected.container.clone(),
        pinned_digest: expected.digest.clone(),
        pods_on_pinned: 0,
        pods_total: 0,
        stale_pods: Vec::new(),
        conditions: Vec::new(),
        state: State::Failed,
        reason: String::new(),
    };
    match live {
        Live::Missing => {
            let message = "the workload does not exist in the cluster";
            verdict.conditions = vec![
                condition(
                    ConditionType::Synced,
                    ConditionStatus::False,
                    "WorkloadMissing",
                    message,
                ),
                condition(
                    ConditionType::RolledOut,
                    ConditionStatus::Unknown,
                    "WorkloadMissing",
                    message,
                ),
                condition(
                    ConditionType::DigestsMatch,
                    ConditionStatus::Unknown,
                    "WorkloadMissing",
                    message,
                ),
            ];
            verdict.reason = "workload missing".to_owned();
        }
        Live::Forbidden(api_message) => {
            let message = one_line(api_message);
            verdict.conditions = [
                ConditionType::Synced,
                ConditionType::RolledOut,
                ConditionType::DigestsMatch,
            ]
            .into_iter()
            .map(|t| condition(t, ConditionStatus::Unknown, "Forbidden", &message))
            .collect();
            verdict.reason = format!("no permission: {message}");
        }
        Live::Found { workload, pods } => {
            let synced = judge_synced(expected, workload);
            let rollout = judge_rollout(workload, pods);
            let digests = judge_pods(expected, family, &workload.rollout, pods);
            let is_true = |j: &Judged| j.condition.status == ConditionStatus::True;
            // Before the sync, the rollout and the pods describe the old spec: a failure there
            // may be exactly what the pin fixes, so it must not end the wait.
            let (state, reason) = if !is_true(&synced) {
                (State::Progressing, synced.summary.clone())
            } else if digests.judged.failed {
                // The kubelet's words say why a rollout is stuck; they come before the deadline.
                (State::Failed, digests.judged.summary.clone())
            } else if rollout.failed {
                (State::Failed, rollout.summary.clone())
            } else if is_true(&rollout) && is_true(&digests.judged) {
                (State::Converged, digests.judged.summary.clone())
            } else if !is_true(&rollout) {
                (State::Progressing, rollout.summary.clone())
            } else {
                (State::Progressing, digests.judged.summary.clone())
            };
            verdict.pods_on_pinned = digests.on_pinned;
            verdict.pods_total = digests.total;
            verdict.stale_pods = digests.stale.into_iter().map(|s| s.name).collect();
            verdict.conditions = vec![
                synced.condition,
                rollout.condition,
                digests.judged.condition,
            ];
            verdict.state = state;
            verdict.reason = reason;
        }
    }
    verdict
}

/// What a check could not look at: pinned images with no live workload to check them on, and
/// manifests that could not be read (which may hold pins).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Unchecked {
    pub images: usize,
    pub files: usize,
}

impl std::fmt::Display for Unchecked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        if self.images > 0 {
            parts.push(format!(
                "{} pinned {} matched no live workload",
                self.images,
                plural(self.images, "image", "images")
            ));
        }
        if self.files > 0 {
            parts.push(format!(
                "{} {} could not be read",
                self.files,
                plural(self.files, "manifest", "manifests")
            ));
        }
        f.write_str(&parts.join(", "))
    }
}

/// The state of a whole set and one line saying so: Failed if any failed, Progressing if any
/// progress, else Unverified if `not_verified` pins were not checked (or nothing was checked at
/// all), else Converged; the line names the first verdict in the worst state, so the one thing
/// to look at is in the headline.
pub fn summarize(verdicts: &[Verdict], unchecked: Unchecked) -> (State, String) {
    let not_verified = unchecked.images + unchecked.files;
    if verdicts.is_empty() && not_verified == 0 {
        return (
            State::Unverified,
            "nothing to verify: no pinned image in the selected manifests".to_owned(),
        );
    }
    if verdicts.iter().all(|v| v.state == State::Converged) && not_verified > 0 {
        return (
            State::Unverified,
            format!("{unchecked}; {} converged", verdicts.len()),
        );
    }
    let count = |state: State| verdicts.iter().filter(|v| v.state == state).count();
    let (failed, progressing, converged) = (
        count(State::Failed),
        count(State::Progressing),
        count(State::Converged),
    );
    let not_checked = count(State::Unverified) + not_verified;
    let state = if failed > 0 {
        State::Failed
    } else if progressing > 0 {
        State::Progressing
    } else {
        State::Converged
    };
    if state == State::Converged {
        let images = if converged == 1 { "image" } else { "images" };
        return (state, format!("all {converged} pinned {images} converged"));
    }
    let counts: Vec<String> = [
        (failed, State::Failed),
        (progressing, State::Progressing),
        (converged, State::Converged),
    ]
    .into_iter()
    .chain([(not_checked, State::Unverified)])
    .filter(|(n, _)| *n > 0)
    .map(|(n, s)| format!("{n} {}", s.as_str()))
    .collect();
    let line = match verdicts.iter().find(|v| v.state == state) {
        Some(v) => format!(
            "{}; {} ({}): {}",
            counts.join(", "),
            v.workload,
            v.container,
            v.reason
        ),
        None => counts.join(", "),
    };
    (state, line)
}

/// The [`summarize`] line fitted to a GitHub commit status: one line of at most
/// [`STATUS_DESCRIPTION_MAX_CHARS`] characters, cut on a character boundary with `…`, because
/// GitHub rejects the whole status when the description is longer.
pub fn status_description(verdicts: &[Verdict], unchecked: Unchecked) -> String {
    let (_, line) = summarize(verdicts, unchecked);
    truncate_chars(&one_line(&line), STATUS_DESCRIPTION_MAX_CHARS)
}

/// One condition as judged, with what it means for the overall state.
struct Judged {
    condition: Condition,
    /// This condition alone makes the verdict Failed.
    failed: bool,
    /// The one-line reason to show when this condition decides the verdict.
    summary: String,
}

/// A pod that does not run the pinned digest, and whether it never started the container.
struct Stale {
    name: String,
    not_started: bool,
}

/// The `DigestsMatch` judgement with the pod counts it was made from.
struct PodsJudged {
    judged: Judged,
    on_pinned: usize,
    total: usize,
    stale: Vec<Stale>,
}

fn condition(
    type_: ConditionType,
    status: ConditionStatus,
    reason: &str,
    message: &str,
) -> Condition {
    Condition {
        type_,
        status,
        reason: reason.to_owned(),
        message: message.to_owned(),
    }
}

fn judged(
    type_: ConditionType,
    status: ConditionStatus,
    reason: &str,
    message: String,
    summary: String,
) -> Judged {
    Judged {
        condition: condition(type_, status, reason, &message),
        failed: false,
        summary,
    }
}

/// `Synced`: the live template's container carries the expected digest. Only the digest part is
/// compared: the GitOps tool may render the repository differently (a mirror, an expanded
/// `docker.io/library/` name) and still run the same bytes.
fn judge_synced(expected: &Expected, workload: &LiveWorkload) -> Judged {
    let t = ConditionType::Synced;
    let pinned = expected.digest.to_string();
    let image = workload
        .template_images
        .iter()
        .find(|(name, _)| *name == expected.container)
        .map(|(_, image)| one_line(image));
    match image {
        None => {
            let message = format!("live template has no container \"{}\"", expected.container);
            judged(
                t,
                ConditionStatus::False,
                "ContainerNotInTemplate",
                message.clone(),
                format!("not synced yet: {message}"),
            )
        }
        Some(image) if digest_part(&image) == Some(pinned.as_str()) => judged(
            t,
            ConditionStatus::True,
            "TemplatePinned",
            format!("live template has {image}"),
            format!("synced: live template has {image}"),
        ),
        Some(image) => judged(
            t,
            ConditionStatus::False,
            "TemplateNotPinned",
            format!("live template has {image}, not {pinned}"),
            format!("not synced yet: live template has {image}"),
        ),
    }
}

fn rollout_done(message: String) -> Judged {
    judged(
        ConditionType::RolledOut,
        ConditionStatus::True,
        "RolloutComplete",
        message.clone(),
        format!("rolled out: {message}"),
    )
}

fn rollout_waiting(reason: &str, message: String) -> Judged {
    judged(
        ConditionType::RolledOut,
        ConditionStatus::False,
        reason,
        message.clone(),
        format!("rollout in progress: {message}"),
    )
}

fn rollout_failed(reason: &str, message: String, summary: String) -> Judged {
    Judged {
        failed: true,
        ..judged(
            ConditionType::RolledOut,
            ConditionStatus::False,
            reason,
            message,
            summary,
        )
    }
}

const SPEC_NOT_OBSERVED: &str = "waiting for spec update to be observed";

/// kubectl's `generation <= status.observedGeneration`, with absent fields read as Go's zero.
fn generation_observed(workload: &LiveWorkload) -> bool {
    workload.generation.unwrap_or(0) <= workload.observed_generation.unwrap_or(0)
}

/// `RolledOut`, following kubectl's `rollout_status.go` (and `oc` for DeploymentConfig) check by
/// check and in the same order, so the verdict never disagrees with what a person runs by hand.
/// Where kubectl gives no judgement (non-rolling strategies, ReplicaSet, Job, Pod) the rule is
/// the closest one it would give, written out at each arm.
fn judge_rollout(workload: &LiveWorkload, pods: &[LivePod]) -> Judged {
    match &workload.rollout {
        RolloutStatus::Deployment {
            spec_replicas,
            replicas,
            updated,
            available,
            progress_deadline_exceeded,
            ..
        } => {
            if !generation_observed(workload) {
                return rollout_waiting("SpecUpdateNotObserved", SPEC_NOT_OBSERVED.to_owned());
            }
            if *progress_deadline_exceeded {
                return rollout_failed(
                    "ProgressDeadlineExceeded",
                    "the deployment exceeded its progress deadline".to_owned(),
                    "progress deadline exceeded".to_owned(),
                );
            }
            if updated < spec_replicas {
                return rollout_waiting(
                    "ReplicasNotUpdated",
                    format!("{updated} out of {spec_replicas} new replicas have been updated"),
                );
            }
            if replicas > updated {
                return rollout_waiting(
                    "OldReplicasPendingTermination",
                    format!(
                        "{} old replicas are pending termination",
                        replicas - updated
                    ),
                );
            }
            if available < updated {
                return rollout_waiting(
                    "ReplicasNotAvailable",
                    format!("{available} of {updated} updated replicas are available"),
                );
            }
            rollout_done(format!("{updated} updated replicas are available"))
        }
        RolloutStatus::StatefulSet {
            spec_replicas,
            ready,
            updated,
            current_revision,
            update_revision,
            rolling_update,
            partition,
        } => {
            // kubectl treats an unset observedGeneration as "not observed" for StatefulSets.
            if workload.observed_generation.unwrap_or(0) == 0 || !generation_observed(workload) {
                return rollout_waiting("SpecUpdateNotObserved", SPEC_NOT_OBSERVED.to_owned());
            }
            if ready < spec_replicas {
                return rollout_waiting(
                    "PodsNotReady",
                    format!("waiting for {} pods to be ready", spec_replicas - ready),
                );
            }
            if !rolling_update {
                // kubectl refuses to judge OnDelete; all replicas ready is the most it could
                // say, and DigestsMatch still catches pods nobody deleted.
                return rollout_done(format!(
                    "{ready} of {spec_replicas} replicas are ready (OnDelete strategy)"
                ));
            }
            if let Some(partition) = partition {
                let wanted = spec_replicas - partition;
                if *updated < wanted {
                    return rollout_waiting(
                        "PartitionedRolloutPending",
                        format!("{updated} out of {wanted} new pods have been updated"),
                    );
                }
                // As in kubectl, a partitioned rollout is complete without comparing revisions.
                return rollout_done(format!(
                    "partitioned roll out complete: {updated} new pods have been updated"
                ));
            }
            if update_revision != current_revision {
                return rollout_waiting(
                    "RevisionUpdatePending",
                    format!(
                        "waiting for rolling update to complete {updated} pods at revision {}",
                        update_revision.as_deref().unwrap_or("(unknown)")
                    ),
                );
            }
            rollout_done(format!(
                "rolling update complete at revision {}",
                current_revision.as_deref().unwrap_or("(unknown)")
            ))
        }
        RolloutStatus::DaemonSet {
            desired,
            updated,
            available,
            rolling_update,
        } => {
            if !generation_observed(workload) {
                return rollout_waiting("SpecUpdateNotObserved", SPEC_NOT_OBSERVED.to_owned());
            }
            if !rolling_update {
                // kubectl refuses to judge OnDelete; judge by availability only.
                if available < desired {
                    return rollout_waiting(
                        "PodsNotAvailable",
                        format!("{available} of {desired} pods are available"),
                    );
                }
                return rollout_done(format!(
                    "{available} of {desired} pods are available (OnDelete strategy)"
                ));
            }
            if updated < desired {
                return rollout_waiting(
                    "PodsNotUpdated",
                    format!("{updated} out of {desired} new pods have been updated"),
                );
            }
            if available < desired {
                return rollout_waiting(
                    "PodsNotAvailable",
                    format!("{available} of {desired} updated pods are available"),
                );
            }
            rollout_done(format!(
                "{available} of {desired} updated pods are available"
            ))
        }
        RolloutStatus::ReplicaSet {
            spec_replicas,
            ready,
            available,
        } => {
            if !generation_observed(workload) {
                return rollout_waiting("SpecUpdateNotObserved", SPEC_NOT_OBSERVED.to_owned());
            }
            if ready < spec_replicas {
                return rollout_waiting(
                    "PodsNotReady",
                    format!("{ready} of {spec_replicas} replicas are ready"),
                );
            }
            if available < spec_replicas {
                return rollout_waiting(
                    "ReplicasNotAvailable",
                    format!("{available} of {spec_replicas} replicas are available"),
                );
            }
            rollout_done(format!(
                "{available} of {spec_replicas} replicas are available"
            ))
        }
        RolloutStatus::Job {
            active,
            succeeded,
            failed,
            failed_condition,
        } => {
            if let Some(message) = failed_condition {
                let message = one_line(message);
                return rollout_failed(
                    "JobFailed",
                    message.clone(),
                    format!("job failed: {message}"),
                );
            }
            if *succeeded >= 1 && *active == 0 {
                return rollout_done(format!("job complete: {succeeded} succeeded"));
            }
            rollout_waiting(
                "JobRunning",
                format!("job running: {active} active, {succeeded} succeeded, {failed} failed"),
            )
        }
        RolloutStatus::Pod => {
            let live: Vec<&LivePod> = pods.iter().filter(|p| !p.deleting).collect();
            if live.is_empty() {
                return rollout_waiting("PodNotFound", "the pod is not there yet".to_owned());
            }
            if let Some(pod) = live.iter().find(|p| p.phase == "Failed") {
                let message = format!("pod {} failed", pod.name);
                return rollout_failed("PodFailed", message.clone(), message);
            }
            if let Some(pod) = live.iter().find(|p| !(p.phase == "Running" && p.ready)) {
                let message = if pod.phase == "Running" {
                    format!("pod {} is running but not ready", pod.name)
                } else {
                    format!("pod {} is {} and not ready", pod.name, pod.phase)
                };
                return rollout_waiting("PodNotReady", message);
            }
            rollout_done("the pod is running and ready".to_owned())
        }
        RolloutStatus::DeploymentConfig {
            spec_replicas,
            updated,
            available,
            latest_version,
            progressing_failed,
        } => {
            if latest_version.unwrap_or(0) == 0 {
                return rollout_waiting(
                    "NoDeploymentYet",
                    "no deployment has run yet (waiting on a trigger or `oc rollout latest`)"
                        .to_owned(),
                );
            }
            if !generation_observed(workload) {
                return rollout_waiting("SpecUpdateNotObserved", SPEC_NOT_OBSERVED.to_owned());
            }
            if let Some(message) = progressing_failed {
                let message = one_line(message);
                return rollout_failed(
                    "RolloutFailed",
                    message.clone(),
                    format!("rollout failed: {message}"),
                );
            }
            if updated < spec_replicas {
                return rollout_waiting(
                    "ReplicasNotUpdated",
                    format!("{updated} out of {spec_replicas} new replicas have been updated"),
                );
            }
            if available < updated {
                return rollout_waiting(
                    "ReplicasNotAvailable",
                    format!("{available} of {updated} updated replicas are available"),
                );
            }
            rollout_done(format!("{updated} updated replicas are available"))
        }
    }
}

/// Whether a workload in this state legitimately has no pods, so that an empty pod list proves
/// nothing is stale rather than that the pods have not appeared yet.
fn no_pods_expected(rollout: &RolloutStatus) -> bool {
    match rollout {
        RolloutStatus::Deployment { spec_replicas, .. }
        | RolloutStatus::StatefulSet { spec_replicas, .. }
        | RolloutStatus::ReplicaSet { spec_replicas, .. }
        | RolloutStatus::DeploymentConfig { spec_replicas, .. } => *spec_replicas == 0,
        RolloutStatus::DaemonSet { desired, .. } => *desired == 0,
        // A finished Job's pods may have been cleaned up (ttlSecondsAfterFinished).
        RolloutStatus::Job {
            active, succeeded, ..
        } => *active == 0 && *succeeded >= 1,
        RolloutStatus::Pod => false,
    }
}

/// Whether a reported digest stands for the pinned one. Repositories are never compared.
fn runs_pinned(id: &ImageIdDigest, expected_digest: &str, family: &DigestFamily) -> bool {
    let pinned = expected_digest.trim();
    let family_pinned = family.pinned.trim();
    let family_applies = family_pinned.is_empty() || family_pinned == pinned;
    let listed =
        |list: &[String], digest: &str| family_applies && list.iter().any(|d| d.trim() == digest);
    match id {
        ImageIdDigest::WithRepo(digest) => {
            (!pinned.is_empty() && digest == pinned) || listed(&family.platform_children, digest)
        }
        ImageIdDigest::Bare(digest) => listed(&family.config_digests, digest),
    }
}

/// `DigestsMatch`: every pod that is not being deleted runs the pinned digest for the container.
/// A fatal waiting reason on a pod that is, or may be, on the new template fails the verdict; on
/// a pod that is clearly on another digest it only makes the pod stale, since the rollout will
/// replace that pod anyway.
fn judge_pods(
    expected: &Expected,
    family: &DigestFamily,
    rollout: &RolloutStatus,
    pods: &[LivePod],
) -> PodsJudged {
    let t = ConditionType::DigestsMatch;
    let pinned_digest = expected.digest.to_string();
    let mut on_pinned = 0;
    let mut total = 0;
    let mut stale = Vec::new();
    let mut fatal: Vec<(String, String)> = Vec::new();
    for pod in pods.iter().filter(|p| !p.deleting) {
        total += 1;
        let Some(status) = pod.containers.iter().find(|c| c.name == expected.container) else {
            stale.push(Stale {
                name: pod.name.clone(),
                not_started: true,
            });
            continue;
        };
        let started = !status.image_id.trim().is_empty();
        let pinned = digest_of_image_id(&status.image_id)
            .is_some_and(|id| runs_pinned(&id, &pinned_digest, family));
        if pinned {
            on_pinned += 1;
        } else {
            stale.push(Stale {
                name: pod.name.clone(),
                not_started: !started,
            });
        }
        let Some(reason) = status
            .waiting_reason
            .as_deref()
            .filter(|r| FATAL_WAITING_REASONS.contains(r))
        else {
            continue;
        };
        // The status `image` of a container that never started is the template's image.
        let spec_on_other_digest = digest_part(&status.image).is_some_and(|d| {
            !runs_pinned(
                &ImageIdDigest::WithRepo(d.to_owned()),
                &pinned_digest,
                family,
            )
        });
        let old_pod = !pinned && (started || spec_on_other_digest);
        if !old_pod {
            fatal.push((reason.to_owned(), fatal_line(reason, &pod.name, status)));
        }
    }

    let judgement = if let Some((reason, line)) = fatal.first() {
        let line = match fatal.len() - 1 {
            0 => line.clone(),
            more => format!("{line} (and {more} more {})", plural(more, "pod", "pods")),
        };
        Judged {
            failed: true,
            ..judged(t, ConditionStatus::False, reason, line.clone(), line)
        }
    } else if total == 0 && no_pods_expected(rollout) {
        judged(
            t,
            ConditionStatus::True,
            "NoPodsExpected",
            "no pods are expected, so none runs an old digest".to_owned(),
            "converged: no pods expected".to_owned(),
        )
    } else if total == 0 {
        judged(
            t,
            ConditionStatus::Unknown,
            "NoPods",
            "no pods to check yet".to_owned(),
            "no pods to check yet".to_owned(),
        )
    } else if !stale.is_empty() {
        let line = stale_line(&stale, total);
        judged(t, ConditionStatus::False, "StalePods", line.clone(), line)
    } else {
        judged(
            t,
            ConditionStatus::True,
            "AllPodsOnPinnedDigest",
            format!("{on_pinned}/{total} pods on {pinned_digest}"),
            format!("converged: {on_pinned}/{total} pods on the pinned digest"),
        )
    };
    PodsJudged {
        judged: judgement,
        on_pinned,
        total,
        stale,
    }
}

/// `ImagePullBackOff on web-xyz: <kubelet message>`, plus the last exit for a crash loop, since
/// the back-off message alone does not say why the container died.
fn fatal_line(reason: &str, pod: &str, status: &LiveContainer) -> String {
    let mut line = format!("{reason} on {pod}");
    if let Some(message) = status
        .waiting_message
        .as_deref()
        .map(one_line)
        .filter(|m| !m.is_empty())
    {
        line.push_str(": ");
        line.push_str(&message);
    }
    if reason == "CrashLoopBackOff" {
        let restarts = status.restart_count;
        let restarts = format!(
            "{restarts} {}",
            plural(
                usize::try_from(restarts).unwrap_or(0),
                "restart",
                "restarts"
            )
        );
        match status.last_terminated_reason.as_deref().map(one_line) {
            Some(last) if !last.is_empty() => {
                line.push_str(&format!(" (last exit: {last}, {restarts})"));
            }
            _ => line.push_str(&format!(" ({restarts})")),
        }
    }
    line
}

/// "2 of 3 pods still on an old digest: a, b", naming at most [`PODS_NAMED_IN_REASON`] pods.
fn stale_line(stale: &[Stale], total: usize) -> String {
    let not_started = stale.iter().filter(|s| s.not_started).count();
    let (what, mark) = if not_started == 0 {
        ("still on an old digest", false)
    } else if not_started == stale.len() {
        ("not started yet", false)
    } else {
        ("not on the pinned digest yet", true)
    };
    let mut names: Vec<String> = stale
        .iter()
        .take(PODS_NAMED_IN_REASON)
        .map(|s| match (mark, s.not_started) {
            (false, _) => s.name.clone(),
            (true, true) => format!("{} (not started)", s.name),
            (true, false) => format!("{} (old digest)", s.name),
        })
        .collect();
    if stale.len() > PODS_NAMED_IN_REASON {
        names.push(format!("and {} more", stale.len() - PODS_NAMED_IN_REASON));
    }
    format!(
        "{} of {total} {} {what}: {}",
        stale.len(),
        plural(total, "pod", "pods"),
        names.join(", ")
    )
}

/// The digest part of an image reference (after the last `@`), if it has one.
fn digest_part(image: &str) -> Option<&str> {
    image
        .trim()
        .rsplit_once('@')
        .map(|(_, digest)| digest.trim())
}

/// A digest in one of the algorithms the OCI image spec registers, `sha256` and `sha512`, with
/// their exact encoded lengths. Unregistered algorithms are refused rather than guessed at: the
/// generic grammar would read a tag reference such as `nginx:latest` as a digest.
fn is_digest(s: &str) -> bool {
    match s.split_once(':') {
        Some(("sha256", encoded)) => is_hex(encoded, 64),
        Some(("sha512", encoded)) => is_hex(encoded, 128),
        _ => false,
    }
}

/// Lowercase hex of exactly `len` characters, as the OCI spec requires for sha256 and sha512.
fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Text from the cluster as one line: kubelet and API messages may hold newlines and control
/// characters, which would break a status line or a terminal.
fn one_line(s: &str) -> String {
    let cleaned: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    cleaned.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// At most `max` characters, ending in `…` when cut; never splits a character.
fn truncate_chars(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let kept: String = s.chars().take(max.saturating_sub(1)).collect();
    let mut out = kept.trim_end().to_owned();
    out.push('…');
    out
}

fn plural<'a>(n: usize, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 {
        one
    } else {
        many
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn digest(c: char) -> String {
        format!("sha256:{}", c.to_string().repeat(64))
    }

    fn pinned() -> String {
        digest('a')
    }

    fn old() -> String {
        digest('0')
    }

    fn expected() -> Expected {
        Expected {
            workload: "shop/Deployment/web".parse().unwrap(),
            container: "web".to_owned(),
            pinned_ref: format!("ghcr.io/acme/web:latest@{}", pinned()),
            digest: pinned().parse().unwrap(),
        }
    }

    fn no_family() -> DigestFamily {
        DigestFamily::default()
    }

    fn deployment(spec: i32, replicas: i32, updated: i32, available: i32) -> RolloutStatus {
        RolloutStatus::Deployment {
            spec_replicas: spec,
            replicas,
            updated,
            ready: available,
            available,
            progress_deadline_exceeded: false,
        }
    }

    fn workload(rollout: RolloutStatus) -> LiveWorkload {
        LiveWorkload {
            kind: "Deployment".to_owned(),
            generation: Some(2),
            observed_generation: Some(2),
            template_images: vec![("web".to_owned(), expected().pinned_ref)],
            rollout,
        }
    }

    fn container(image_id: &str) -> LiveContainer {
        LiveContainer {
            name: "web".to_owned(),
            image: expected().pinned_ref,
            image_id: image_id.to_owned(),
            ready: !image_id.is_empty(),
            ..LiveContainer::default()
        }
    }

    fn pod(name: &str, image_id: &str) -> LivePod {
        LivePod {
            name: name.to_owned(),
            phase: "Running".to_owned(),
            ready: true,
            deleting: false,
            containers: vec![container(image_id)],
        }
    }

    fn waiting_pod(name: &str, reason: &str, message: &str) -> LivePod {
        let mut p = pod(name, "");
        p.phase = "Pending".to_owned();
        p.ready = false;
        p.containers[0].waiting_reason = Some(reason.to_owned());
        p.containers[0].waiting_message = Some(message.to_owned());
        p
    }

    fn on(digest: &str) -> String {
        format!("ghcr.io/acme/web@{digest}")
    }

    fn found(workload: LiveWorkload, pods: Vec<LivePod>) -> Live {
        Live::Found { workload, pods }
    }

    fn judge_default(live: Live) -> Verdict {
        judge(&expected(), &no_family(), &live)
    }

    /// A healthy Deployment of `n` replicas whose pods report the given imageIDs.
    fn deployment_with_pods(image_ids: &[String]) -> Live {
        let n = i32::try_from(image_ids.len()).unwrap();
        let pods = image_ids
            .iter()
            .enumerate()
            .map(|(i, id)| pod(&format!("web-{i}"), id))
            .collect();
        found(workload(deployment(n, n, n, n)), pods)
    }

    fn status_of(v: &Verdict, t: ConditionType) -> ConditionStatus {
        v.condition(t).unwrap().status
    }

    fn reason_of(v: &Verdict, t: ConditionType) -> String {
        v.condition(t).unwrap().reason.clone()
    }

    fn rollout_of(rollout: RolloutStatus) -> Verdict {
        judge_default(found(workload(rollout), vec![pod("web-0", &on(&pinned()))]))
    }

    fn verdict_in(state: State, reason: &str) -> Verdict {
        Verdict {
            workload: "shop/Deployment/web".parse().unwrap(),
            container: "web".to_owned(),
            pinned_digest: pinned().parse().unwrap(),
            pods_on_pinned: 0,
            pods_total: 0,
            stale_pods: Vec::new(),
            conditions: Vec::new(),
            state,
            reason: reason.to_owned(),
        }
    }

    /// A real-world capture, read from the byte-identical copies in `tests/fixtures/shared/`
    /// so that the tests need nothing outside the repository. A missing copy fails the test:
    /// a capture test that passes without its capture proves nothing.
    fn fixture(name: &str) -> String {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/shared")
            .join(name);
        std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read the capture {}: {e}", path.display()))
    }

    fn yaml_str(v: &serde_yaml::Value) -> String {
        v.as_str().unwrap_or_default().to_owned()
    }

    /// The captured pod list, turned into [`LivePod`]s field by field as `live.rs` would.
    fn captured_pods() -> Vec<LivePod> {
        let text = fixture("openshift-nginx-pods.yaml");
        let list: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
        list["items"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|item| LivePod {
                name: yaml_str(&item["metadata"]["name"]),
                phase: yaml_str(&item["status"]["phase"]),
                ready: item["status"]["conditions"]
                    .as_sequence()
                    .unwrap()
                    .iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True"),
                deleting: !item["metadata"]["deletionTimestamp"].is_null(),
                containers: item["status"]["containerStatuses"]
                    .as_sequence()
                    .unwrap()
                    .iter()
                    .map(|s| LiveContainer {
                        name: yaml_str(&s["name"]),
                        image: yaml_str(&s["image"]),
                        image_id: yaml_str(&s["imageID"]),
                        ready: s["ready"].as_bool().unwrap(),
                        waiting_reason: s["state"]["waiting"]["reason"].as_str().map(str::to_owned),
                        waiting_message: s["state"]["waiting"]["message"]
                            .as_str()
                            .map(str::to_owned),
                        restart_count: i32::try_from(s["restartCount"].as_i64().unwrap()).unwrap(),
                        last_terminated_reason: s["lastState"]["terminated"]["reason"]
                            .as_str()
                            .map(str::to_owned),
                    })
                    .collect(),
            })
            .collect()
    }

    /// The digest Quay answered for `latest` at the moment of the pod capture.
    fn captured_quay_digest() -> String {
        let text = fixture("quay-repository-api.json");
        let answer: serde_json::Value = serde_json::from_str(&text).unwrap();
        answer["tags"]["latest"]["manifest_digest"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// The real capture as `judge` sees it; the live template carries `template_image`.
    /// The Deployment's status was not captured; the counts are those of its one ready pod.
    fn captured(template_image: &str) -> (Expected, Live) {
        let pods = captured_pods();
        let digest = captured_quay_digest();
        let expected = Expected {
            workload: "test-wp/Deployment/nginx".parse().unwrap(),
            container: "nginx".to_owned(),
            pinned_ref: format!("quay.io/k_nakajima/nginx-sample:latest@{digest}"),
            digest: digest.parse().unwrap(),
        };
        let workload = LiveWorkload {
            kind: "Deployment".to_owned(),
            generation: Some(1),
            observed_generation: Some(1),
            template_images: vec![("nginx".to_owned(), template_image.to_owned())],
            rollout: deployment(1, 1, 1, 1),
        };
        (expected, found(workload, pods))
    }

    #[test]
    fn the_real_openshift_capture_with_the_pin_applied_is_converged() {
        let digest = captured_quay_digest();
        let (expected, live) =
            captured(&format!("quay.io/k_nakajima/nginx-sample:latest@{digest}"));
        let v = judge(&expected, &no_family(), &live);
        assert_eq!(v.state, State::Converged, "{v:#?}");
        assert_eq!(v.reason, "converged: 1/1 pods on the pinned digest");
        assert_eq!((v.pods_on_pinned, v.pods_total), (1, 1));
        assert_eq!(v.workload.to_string(), "test-wp/Deployment/nginx");
        assert_eq!(v.pinned_digest.to_string(), digest);
        assert!(v
            .conditions
            .iter()
            .all(|c| c.status == ConditionStatus::True));
    }

    #[test]
    fn the_real_openshift_capture_before_the_sync_is_not_synced_yet() {
        let (expected, live) = captured("quay.io/k_nakajima/nginx-sample:latest");
        let v = judge(&expected, &no_family(), &live);
        assert_eq!(v.state, State::Progressing);
        assert_eq!(
            v.reason,
            "not synced yet: live template has quay.io/k_nakajima/nginx-sample:latest"
        );
        // The pod already runs the digest the tag pointed at; only the template lags.
        assert_eq!(
            status_of(&v, ConditionType::DigestsMatch),
            ConditionStatus::True
        );
    }

    #[test]
    fn a_moved_tag_with_two_of_three_pods_on_the_old_digest_is_progressing_naming_them() {
        let live = deployment_with_pods(&[on(&pinned()), on(&old()), on(&old())]);
        let v = judge_default(live);
        assert_eq!(v.state, State::Progressing);
        assert_eq!(v.stale_pods, vec!["web-1", "web-2"]);
        assert_eq!((v.pods_on_pinned, v.pods_total), (1, 3));
        assert_eq!(v.reason, "2 of 3 pods still on an old digest: web-1, web-2");
        assert_eq!(reason_of(&v, ConditionType::DigestsMatch), "StalePods");
    }

    #[test]
    fn a_long_stale_list_names_five_pods_and_counts_the_rest() {
        let ids: Vec<String> = (0..8).map(|_| on(&old())).collect();
        let v = judge_default(deployment_with_pods(&ids));
        assert_eq!(v.stale_pods.len(), 8);
        assert_eq!(
            v.reason,
            "8 of 8 pods still on an old digest: web-0, web-1, web-2, web-3, web-4, and 3 more"
        );
    }

    #[test]
    fn image_pull_back_off_is_failed_with_the_kubelet_message_and_the_pod_name() {
        let message = "Back-off pulling image \"ghcr.io/acme/web:latest@sha256:aaaa\"";
        let live = found(
            workload(deployment(2, 2, 1, 1)),
            vec![
                pod("web-old", &on(&old())),
                waiting_pod("web-xyz", "ImagePullBackOff", message),
            ],
        );
        let v = judge_default(live);
        assert_eq!(v.state, State::Failed);
        assert_eq!(v.reason, format!("ImagePullBackOff on web-xyz: {message}"));
        assert_eq!(
            reason_of(&v, ConditionType::DigestsMatch),
            "ImagePullBackOff"
        );
    }

    #[test]
    fn a_multi_line_kubelet_message_becomes_one_line() {
        let live = found(
            workload(deployment(1, 1, 0, 0)),
            vec![waiting_pod(
                "web-xyz",
                "ErrImagePull",
                "rpc error:\n  not found\r\n",
            )],
        );
        assert_eq!(
            judge_default(live).reason,
            "ErrImagePull on web-xyz: rpc error: not found"
        );
    }

    #[test]
    fn crash_loop_back_off_is_failed_with_the_last_exit_and_restarts() {
        let mut p = pod("web-abc", &on(&pinned()));
        p.ready = false;
        p.containers[0].waiting_reason = Some("CrashLoopBackOff".to_owned());
        p.containers[0].waiting_message = Some("back-off 5m0s restarting failed container".into());
        p.containers[0].restart_count = 7;
        p.containers[0].last_terminated_reason = Some("OOMKilled".to_owned());
        let v = judge_default(found(workload(deployment(1, 1, 1, 0)), vec![p]));
        assert_eq!(v.state, State::Failed);
        assert_eq!(
            v.reason,
            "CrashLoopBackOff on web-abc: back-off 5m0s restarting failed container \
             (last exit: OOMKilled, 7 restarts)"
        );
    }

    #[test]
    fn several_failing_pods_name_the_first_and_count_the_others() {
        let live = found(
            workload(deployment(3, 3, 3, 0)),
            vec![
                waiting_pod("web-a", "InvalidImageName", "bad"),
                waiting_pod("web-b", "InvalidImageName", "bad"),
                waiting_pod("web-c", "InvalidImageName", "bad"),
            ],
        );
        assert_eq!(
            judge_default(live).reason,
            "InvalidImageName on web-a: bad (and 2 more pods)"
        );
    }

    #[test]
    fn a_failing_pod_from_the_old_template_is_only_stale() {
        let mut old_pod = waiting_pod("web-old", "ImagePullBackOff", "gone");
        old_pod.containers[0].image = format!("ghcr.io/acme/web:latest@{}", old());
        let live = found(
            workload(deployment(2, 2, 2, 2)),
            vec![pod("web-new", &on(&pinned())), old_pod],
        );
        let v = judge_default(live);
        assert_eq!(v.state, State::Progressing);
        assert_eq!(v.reason, "1 of 2 pods not started yet: web-old");
    }

    #[test]
    fn a_crash_loop_on_a_pod_running_an_old_digest_is_only_stale() {
        let mut p = pod("web-old", &on(&old()));
        p.containers[0].waiting_reason = Some("CrashLoopBackOff".to_owned());
        let v = judge_default(found(workload(deployment(1, 1, 1, 1)), vec![p]));
        assert_eq!(v.state, State::Progressing);
        assert_eq!(v.stale_pods, vec!["web-old"]);
    }

    #[test]
    fn a_pod_failure_is_reported_before_the_progress_deadline() {
        let mut rollout = deployment(1, 1, 1, 0);
        if let RolloutStatus::Deployment {
            progress_deadline_exceeded,
            ..
        } = &mut rollout
        {
            *progress_deadline_exceeded = true;
        }
        let live = found(
            workload(rollout),
            vec![waiting_pod(
                "web-x",
                "CreateContainerConfigError",
                "secret \"db\" not found",
            )],
        );
        let v = judge_default(live);
        assert_eq!(v.state, State::Failed);
        assert_eq!(
            v.reason,
            "CreateContainerConfigError on web-x: secret \"db\" not found"
        );
        assert_eq!(
            reason_of(&v, ConditionType::RolledOut),
            "ProgressDeadlineExceeded"
        );
    }

    #[test]
    fn a_platform_manifest_of_the_pinned_index_is_converged() {
        let family = DigestFamily {
            pinned: pinned(),
            platform_children: vec![digest('b'), digest('c')],
            config_digests: Vec::new(),
        };
        let live = deployment_with_pods(&[on(&digest('b')), on(&digest('c'))]);
        let v = judge(&expected(), &family, &live);
        assert_eq!(v.state, State::Converged, "{v:#?}");
    }

    #[test]
    fn a_platform_manifest_of_another_index_is_not_the_pinned_digest() {
        let family = DigestFamily {
            pinned: pinned(),
            platform_children: vec![digest('b')],
            config_digests: Vec::new(),
        };
        let v = judge(
            &expected(),
            &family,
            &deployment_with_pods(&[on(&digest('d'))]),
        );
        assert_eq!(v.state, State::Progressing);
        assert_eq!(v.stale_pods, vec!["web-0"]);
    }

    #[test]
    fn a_family_resolved_for_another_digest_vouches_for_nothing() {
        let family = DigestFamily {
            pinned: old(),
            platform_children: vec![digest('b')],
            config_digests: vec![digest('c')],
        };
        let live = deployment_with_pods(&[on(&digest('b')), digest('c')]);
        let v = judge(&expected(), &family, &live);
        assert_eq!(v.pods_on_pinned, 0);
        assert_eq!(v.state, State::Progressing);
    }

    #[test]
    fn a_bare_config_digest_listed_in_config_digests_is_converged() {
        let family = DigestFamily {
            pinned: pinned(),
            platform_children: Vec::new(),
            config_digests: vec![digest('e')],
        };
        let live = deployment_with_pods(&[format!("docker://{}", digest('e'))]);
        let v = judge(&expected(), &family, &live);
        assert_eq!(v.state, State::Converged, "{v:#?}");
    }

    #[test]
    fn a_bare_digest_is_a_config_digest_even_when_it_equals_the_manifest_digest() {
        let v = judge_default(deployment_with_pods(&[pinned()]));
        assert_eq!(v.state, State::Progressing);
        assert_eq!(v.stale_pods, vec!["web-0"]);
    }

    #[test]
    fn a_docker_pullable_image_id_is_read_past_its_prefix() {
        let id = format!("docker-pullable://ghcr.io/acme/web@{}", pinned());
        let v = judge_default(deployment_with_pods(&[id]));
        assert_eq!(v.state, State::Converged, "{v:#?}");
    }

    #[test]
    fn a_mirror_repository_in_the_image_id_still_matches_by_digest() {
        let id = format!("mirror.internal:5000/acme/web@{}", pinned());
        assert_eq!(
            judge_default(deployment_with_pods(&[id])).state,
            State::Converged
        );
    }

    #[test]
    fn a_template_without_the_pinned_digest_is_not_synced_yet() {
        let mut w = workload(deployment(1, 1, 1, 1));
        w.template_images = vec![("web".to_owned(), "ghcr.io/acme/web:latest".to_owned())];
        let v = judge_default(found(w, vec![pod("web-0", &on(&old()))]));
        assert_eq!(v.state, State::Progressing);
        assert_eq!(
            v.reason,
            "not synced yet: live template has ghcr.io/acme/web:latest"
        );
        assert_eq!(reason_of(&v, ConditionType::Synced), "TemplateNotPinned");
    }

    #[test]
    fn a_template_on_a_mirror_with_the_pinned_digest_is_synced() {
        let mut w = workload(deployment(1, 1, 1, 1));
        w.template_images = vec![(
            "web".to_owned(),
            format!("docker.io/acme/web:latest@{}", pinned()),
        )];
        let v = judge_default(found(w, vec![pod("web-0", &on(&pinned()))]));
        assert_eq!(status_of(&v, ConditionType::Synced), ConditionStatus::True);
    }

    #[test]
    fn a_template_without_the_container_is_not_synced_yet() {
        let mut w = workload(deployment(1, 1, 1, 1));
        w.template_images = vec![("sidecar".to_owned(), expected().pinned_ref)];
        let v = judge_default(found(w, vec![pod("web-0", &on(&pinned()))]));
        assert_eq!(v.state, State::Progressing);
        assert_eq!(
            v.reason,
            "not synced yet: live template has no container \"web\""
        );
    }

    #[test]
    fn not_synced_stays_progressing_even_if_the_old_rollout_failed() {
        let mut w = workload(RolloutStatus::Deployment {
            spec_replicas: 1,
            replicas: 1,
            updated: 1,
            ready: 0,
            available: 0,
            progress_deadline_exceeded: true,
        });
        w.template_images = vec![("web".to_owned(), "ghcr.io/acme/web:latest".to_owned())];
        let v = judge_default(found(w, vec![waiting_pod("web-0", "ErrImagePull", "x")]));
        assert_eq!(v.state, State::Progressing);
        assert!(v.reason.starts_with("not synced yet"), "{}", v.reason);
    }

    #[test]
    fn a_deleted_workload_is_failed() {
        let v = judge_default(Live::Missing);
        assert_eq!(v.state, State::Failed);
        assert_eq!(v.reason, "workload missing");
        assert_eq!(reason_of(&v, ConditionType::Synced), "WorkloadMissing");
        assert_eq!(v.conditions.len(), 3);
    }

    #[test]
    fn a_forbidden_read_is_failed_with_the_api_message() {
        let message = "deployments.apps \"web\" is forbidden: User \"system:serviceaccount:tagpin:tagpin\" cannot get resource \"deployments\"";
        let v = judge_default(Live::Forbidden(message.to_owned()));
        assert_eq!(v.state, State::Failed);
        assert_eq!(v.reason, format!("no permission: {message}"));
        assert!(v.conditions.iter().all(|c| c.reason == "Forbidden"));
    }

    #[test]
    fn pods_being_deleted_are_not_counted() {
        let mut leaving = pod("web-old", &on(&old()));
        leaving.deleting = true;
        let live = found(
            workload(deployment(1, 1, 1, 1)),
            vec![pod("web-new", &on(&pinned())), leaving],
        );
        let v = judge_default(live);
        assert_eq!(v.state, State::Converged);
        assert_eq!((v.pods_on_pinned, v.pods_total), (1, 1));
    }

    #[test]
    fn a_pod_without_an_image_id_is_not_on_the_pinned_digest() {
        let mut starting = pod("web-1", "");
        starting.phase = "Pending".to_owned();
        let live = found(
            workload(deployment(2, 2, 2, 2)),
            vec![pod("web-0", &on(&pinned())), starting],
        );
        let v = judge_default(live);
        assert_eq!(v.state, State::Progressing);
        assert_eq!(v.reason, "1 of 2 pods not started yet: web-1");
    }

    #[test]
    fn old_and_unstarted_pods_are_told_apart() {
        let live = found(
            workload(deployment(2, 2, 2, 2)),
            vec![pod("web-0", &on(&old())), pod("web-1", "")],
        );
        assert_eq!(
            judge_default(live).reason,
            "2 of 2 pods not on the pinned digest yet: web-0 (old digest), web-1 (not started)"
        );
    }

    #[test]
    fn a_pod_without_a_status_for_the_container_is_not_started() {
        let mut p = pod("web-0", &on(&pinned()));
        p.containers[0].name = "sidecar".to_owned();
        let v = judge_default(found(workload(deployment(1, 1, 1, 1)), vec![p]));
        assert_eq!(v.stale_pods, vec!["web-0"]);
        assert_eq!(v.state, State::Progressing);
    }

    #[test]
    fn no_pods_while_replicas_are_expected_is_progressing() {
        let v = judge_default(found(workload(deployment(1, 1, 1, 1)), Vec::new()));
        assert_eq!(v.state, State::Progressing);
        assert_eq!(v.reason, "no pods to check yet");
        assert_eq!(
            status_of(&v, ConditionType::DigestsMatch),
            ConditionStatus::Unknown
        );
    }

    #[test]
    fn a_workload_scaled_to_zero_is_converged() {
        let v = judge_default(found(workload(deployment(0, 0, 0, 0)), Vec::new()));
        assert_eq!(v.state, State::Converged, "{v:#?}");
    }

    #[test]
    fn deployment_waits_for_the_spec_update_to_be_observed() {
        let mut w = workload(deployment(1, 1, 1, 1));
        w.observed_generation = Some(1);
        let v = judge_default(found(w, vec![pod("web-0", &on(&pinned()))]));
        assert_eq!(v.state, State::Progressing);
        assert_eq!(
            v.reason,
            "rollout in progress: waiting for spec update to be observed"
        );
    }

    #[test]
    fn deployment_past_its_progress_deadline_is_failed() {
        let v = rollout_of(RolloutStatus::Deployment {
            spec_replicas: 2,
            replicas: 2,
            updated: 1,
            ready: 1,
            available: 1,
            progress_deadline_exceeded: true,
        });
        assert_eq!(v.state, State::Failed);
        assert_eq!(v.reason, "progress deadline exceeded");
    }

    #[test]
    fn deployment_deadline_is_not_judged_before_the_spec_update_is_observed() {
        let mut w = workload(RolloutStatus::Deployment {
            spec_replicas: 1,
            replicas: 1,
            updated: 1,
            ready: 1,
            available: 1,
            progress_deadline_exceeded: true,
        });
        w.observed_generation = Some(1);
        let v = judge_default(found(w, vec![pod("web-0", &on(&pinned()))]));
        assert_eq!(v.state, State::Progressing);
    }

    #[test]
    fn deployment_waits_for_new_replicas_to_be_updated() {
        let v = rollout_of(deployment(3, 3, 1, 1));
        assert_eq!(
            v.reason,
            "rollout in progress: 1 out of 3 new replicas have been updated"
        );
        assert_eq!(
            reason_of(&v, ConditionType::RolledOut),
            "ReplicasNotUpdated"
        );
    }

    #[test]
    fn deployment_waits_for_old_replicas_to_terminate() {
        let v = rollout_of(deployment(3, 4, 3, 3));
        assert_eq!(
            v.reason,
            "rollout in progress: 1 old replicas are pending termination"
        );
    }

    #[test]
    fn deployment_waits_for_updated_replicas_to_be_available() {
        let v = rollout_of(deployment(3, 3, 3, 1));
        assert_eq!(
            v.reason,
            "rollout in progress: 1 of 3 updated replicas are available"
        );
    }

    #[test]
    fn deployment_with_absent_generations_reads_them_as_zero() {
        let mut w = workload(deployment(1, 1, 1, 1));
        w.generation = None;
        w.observed_generation = None;
        let v = judge_default(found(w, vec![pod("web-0", &on(&pinned()))]));
        assert_eq!(
            status_of(&v, ConditionType::RolledOut),
            ConditionStatus::True
        );
    }

    fn statefulset(ready: i32, updated: i32, partition: Option<i32>) -> RolloutStatus {
        RolloutStatus::StatefulSet {
            spec_replicas: 3,
            ready,
            updated,
            current_revision: Some("web-1".to_owned()),
            update_revision: Some("web-2".to_owned()),
            rolling_update: true,
            partition,
        }
    }

    #[test]
    fn statefulset_without_an_observed_generation_waits() {
        let mut w = workload(statefulset(3, 3, Some(0)));
        w.generation = None;
        w.observed_generation = None;
        let v = judge_default(found(w, vec![pod("web-0", &on(&pinned()))]));
        assert_eq!(
            reason_of(&v, ConditionType::RolledOut),
            "SpecUpdateNotObserved"
        );
    }

    #[test]
    fn statefulset_waits_for_pods_to_be_ready() {
        let v = rollout_of(statefulset(1, 3, Some(0)));
        assert_eq!(
            v.reason,
            "rollout in progress: waiting for 2 pods to be ready"
        );
    }

    #[test]
    fn statefulset_partition_waits_for_the_pods_above_it() {
        let v = rollout_of(statefulset(3, 1, Some(1)));
        assert_eq!(
            v.reason,
            "rollout in progress: 1 out of 2 new pods have been updated"
        );
    }

    #[test]
    fn statefulset_partitioned_rollout_is_complete_without_comparing_revisions() {
        let v = rollout_of(statefulset(3, 2, Some(1)));
        assert_eq!(
            status_of(&v, ConditionType::RolledOut),
            ConditionStatus::True
        );
    }

    #[test]
    fn statefulset_without_partition_waits_for_the_update_revision() {
        let v = rollout_of(statefulset(3, 3, None));
        assert_eq!(
            reason_of(&v, ConditionType::RolledOut),
            "RevisionUpdatePending"
        );
        let done = rollout_of(RolloutStatus::StatefulSet {
            spec_replicas: 3,
            ready: 3,
            updated: 3,
            current_revision: Some("web-2".to_owned()),
            update_revision: Some("web-2".to_owned()),
            rolling_update: true,
            partition: None,
        });
        assert_eq!(
            status_of(&done, ConditionType::RolledOut),
            ConditionStatus::True
        );
    }

    #[test]
    fn statefulset_on_delete_is_rolled_out_once_all_replicas_are_ready() {
        let on_delete = |ready| RolloutStatus::StatefulSet {
            spec_replicas: 3,
            ready,
            updated: 0,
            current_revision: Some("web-1".to_owned()),
            update_revision: Some("web-2".to_owned()),
            rolling_update: false,
            partition: None,
        };
        assert_eq!(
            status_of(&rollout_of(on_delete(2)), ConditionType::RolledOut),
            ConditionStatus::False
        );
        assert_eq!(
            status_of(&rollout_of(on_delete(3)), ConditionType::RolledOut),
            ConditionStatus::True
        );
    }

    fn daemonset(updated: i32, available: i32, rolling_update: bool) -> RolloutStatus {
        RolloutStatus::DaemonSet {
            desired: 3,
            updated,
            available,
            rolling_update,
        }
    }

    #[test]
    fn daemonset_waits_for_new_pods_to_be_updated() {
        let v = rollout_of(daemonset(2, 3, true));
        assert_eq!(
            v.reason,
            "rollout in progress: 2 out of 3 new pods have been updated"
        );
    }

    #[test]
    fn daemonset_waits_for_updated_pods_to_be_available() {
        let v = rollout_of(daemonset(3, 2, true));
        assert_eq!(
            v.reason,
            "rollout in progress: 2 of 3 updated pods are available"
        );
    }

    #[test]
    fn daemonset_waits_for_the_spec_update_to_be_observed() {
        let mut w = workload(daemonset(3, 3, true));
        w.observed_generation = Some(1);
        let v = judge_default(found(w, vec![pod("web-0", &on(&pinned()))]));
        assert_eq!(
            reason_of(&v, ConditionType::RolledOut),
            "SpecUpdateNotObserved"
        );
    }

    #[test]
    fn daemonset_on_delete_is_judged_by_availability_only() {
        let done = rollout_of(daemonset(0, 3, false));
        assert_eq!(
            status_of(&done, ConditionType::RolledOut),
            ConditionStatus::True
        );
        let waiting = rollout_of(daemonset(0, 2, false));
        assert_eq!(
            status_of(&waiting, ConditionType::RolledOut),
            ConditionStatus::False
        );
    }

    #[test]
    fn replicaset_waits_for_ready_then_available_replicas() {
        let rs = |ready, available| RolloutStatus::ReplicaSet {
            spec_replicas: 2,
            ready,
            available,
        };
        assert_eq!(
            reason_of(&rollout_of(rs(1, 1)), ConditionType::RolledOut),
            "PodsNotReady"
        );
        assert_eq!(
            reason_of(&rollout_of(rs(2, 1)), ConditionType::RolledOut),
            "ReplicasNotAvailable"
        );
        assert_eq!(
            status_of(&rollout_of(rs(2, 2)), ConditionType::RolledOut),
            ConditionStatus::True
        );
    }

    fn job(active: i32, succeeded: i32, failed_condition: Option<&str>) -> RolloutStatus {
        RolloutStatus::Job {
            active,
            succeeded,
            failed: 0,
            failed_condition: failed_condition.map(str::to_owned),
        }
    }

    #[test]
    fn job_is_complete_when_one_succeeded_and_none_is_active() {
        let v = rollout_of(job(0, 1, None));
        assert_eq!(v.state, State::Converged, "{v:#?}");
    }

    #[test]
    fn job_with_active_pods_is_progressing() {
        let v = rollout_of(job(1, 1, None));
        assert_eq!(v.state, State::Progressing);
        assert_eq!(reason_of(&v, ConditionType::RolledOut), "JobRunning");
    }

    #[test]
    fn job_with_a_failed_condition_is_failed() {
        let v = rollout_of(job(
            0,
            0,
            Some("Job has reached the specified backoff limit"),
        ));
        assert_eq!(v.state, State::Failed);
        assert_eq!(
            v.reason,
            "job failed: Job has reached the specified backoff limit"
        );
    }

    #[test]
    fn a_finished_job_whose_pods_were_cleaned_up_is_converged() {
        let v = judge_default(found(workload(job(0, 1, None)), Vec::new()));
        assert_eq!(v.state, State::Converged, "{v:#?}");
    }

    #[test]
    fn pod_is_rolled_out_when_running_and_ready() {
        let v = rollout_of(RolloutStatus::Pod);
        assert_eq!(v.state, State::Converged, "{v:#?}");
    }

    #[test]
    fn pod_that_is_not_ready_is_progressing() {
        let mut p = pod("web-0", &on(&pinned()));
        p.ready = false;
        let v = judge_default(found(workload(RolloutStatus::Pod), vec![p]));
        assert_eq!(
            v.reason,
            "rollout in progress: pod web-0 is running but not ready"
        );
    }

    #[test]
    fn pod_in_the_failed_phase_is_failed() {
        let mut p = pod("web-0", &on(&pinned()));
        p.phase = "Failed".to_owned();
        p.ready = false;
        let v = judge_default(found(workload(RolloutStatus::Pod), vec![p]));
        assert_eq!(v.state, State::Failed);
        assert_eq!(v.reason, "pod web-0 failed");
    }

    fn deployment_config(
        updated: i32,
        available: i32,
        latest_version: Option<i64>,
        failed: Option<&str>,
    ) -> RolloutStatus {
        RolloutStatus::DeploymentConfig {
            spec_replicas: 2,
            updated,
            available,
            latest_version,
            progressing_failed: failed.map(str::to_owned),
        }
    }

    #[test]
    fn deployment_config_without_a_first_deployment_waits() {
        let v = rollout_of(deployment_config(2, 2, Some(0), None));
        assert_eq!(reason_of(&v, ConditionType::RolledOut), "NoDeploymentYet");
    }

    #[test]
    fn deployment_config_with_a_failed_rollout_is_failed() {
        let v = rollout_of(deployment_config(
            1,
            1,
            Some(3),
            Some("replication controller \"web-3\" has failed progressing"),
        ));
        assert_eq!(v.state, State::Failed);
        assert_eq!(
            v.reason,
            "rollout failed: replication controller \"web-3\" has failed progressing"
        );
    }

    #[test]
    fn deployment_config_waits_for_updated_then_available_replicas() {
        assert_eq!(
            reason_of(
                &rollout_of(deployment_config(1, 1, Some(3), None)),
                ConditionType::RolledOut
            ),
            "ReplicasNotUpdated"
        );
        assert_eq!(
            reason_of(
                &rollout_of(deployment_config(2, 1, Some(3), None)),
                ConditionType::RolledOut
            ),
            "ReplicasNotAvailable"
        );
        assert_eq!(
            rollout_of(deployment_config(2, 2, Some(3), None)).state,
            State::Converged
        );
    }

    #[test]
    fn image_id_with_a_repository_is_a_manifest_digest() {
        let id = format!(
            "quay.io/k_nakajima/nginx-sample@{}",
            "sha256:0f152bc1261aea012bbf89977a821f1b319b9dc9feb7f4ba54f08f617b2937ec"
        );
        assert_eq!(
            digest_of_image_id(&id),
            Some(ImageIdDigest::WithRepo(
                "sha256:0f152bc1261aea012bbf89977a821f1b319b9dc9feb7f4ba54f08f617b2937ec"
                    .to_owned()
            ))
        );
    }

    #[test]
    fn image_id_prefixes_of_docker_runtimes_are_stripped() {
        assert_eq!(
            digest_of_image_id(&format!("docker-pullable://nginx@{}", pinned())),
            Some(ImageIdDigest::WithRepo(pinned()))
        );
        assert_eq!(
            digest_of_image_id(&format!("docker://{}", pinned())),
            Some(ImageIdDigest::Bare(pinned()))
        );
    }

    #[test]
    fn a_bare_image_id_is_a_config_digest() {
        assert_eq!(
            digest_of_image_id(&pinned()),
            Some(ImageIdDigest::Bare(pinned()))
        );
        assert_eq!(
            digest_of_image_id(&"a".repeat(64)),
            Some(ImageIdDigest::Bare(pinned()))
        );
    }

    #[test]
    fn an_unreadable_image_id_has_no_digest() {
        for id in [
            "",
            "   ",
            "nginx:latest",
            "nginx@sha256:abc",
            "nginx@",
            "sha256:ABCDEF",
        ] {
            assert_eq!(digest_of_image_id(id), None, "{id:?}");
        }
    }

    #[test]
    fn summary_is_failed_when_any_verdict_failed_and_names_it() {
        let verdicts = [
            verdict_in(State::Converged, "converged"),
            verdict_in(State::Progressing, "rollout in progress: x"),
            verdict_in(State::Failed, "workload missing"),
        ];
        assert_eq!(
            summarize(&verdicts, Unchecked::default()),
            (
                State::Failed,
                "1 failed, 1 progressing, 1 converged; shop/Deployment/web (web): workload missing"
                    .to_owned()
            )
        );
    }

    #[test]
    fn summary_is_progressing_when_any_verdict_progresses() {
        let verdicts = [
            verdict_in(State::Converged, "converged"),
            verdict_in(State::Progressing, "no pods to check yet"),
        ];
        assert_eq!(
            summarize(&verdicts, Unchecked::default()).0,
            State::Progressing
        );
    }

    #[test]
    fn summary_is_converged_when_all_converged() {
        let verdicts = [
            verdict_in(State::Converged, "a"),
            verdict_in(State::Converged, "b"),
        ];
        assert_eq!(
            summarize(&verdicts, Unchecked::default()),
            (State::Converged, "all 2 pinned images converged".to_owned())
        );
    }

    #[test]
    fn nothing_checked_is_never_converged() {
        assert_eq!(summarize(&[], Unchecked::default()).0, State::Unverified);
        let converged = [verdict_in(State::Converged, "a")];
        let images = |images| Unchecked { images, files: 0 };
        assert_eq!(
            summarize(&converged, images(2)),
            (
                State::Unverified,
                "2 pinned images matched no live workload; 1 converged".to_owned()
            )
        );
        assert_eq!(
            summarize(
                &converged,
                Unchecked {
                    images: 1,
                    files: 1
                }
            )
            .1,
            "1 pinned image matched no live workload, 1 manifest could not be read; 1 converged"
        );
        // A worse state still leads the headline and counts what was not checked.
        let failed = [verdict_in(State::Failed, "workload missing")];
        assert_eq!(
            summarize(&failed, images(1)),
            (
                State::Failed,
                "1 failed, 1 unverified; shop/Deployment/web (web): workload missing".to_owned()
            )
        );
    }

    #[test]
    fn status_description_fits_githubs_limit_with_multibyte_text() {
        let reason = format!(
            "ImagePullBackOff on wéb-ü: {}",
            "拉取镜像失败🚫 ".repeat(40)
        );
        let verdicts = [verdict_in(State::Failed, &reason)];
        let description = status_description(&verdicts, Unchecked::default());
        assert!(description.chars().count() <= STATUS_DESCRIPTION_MAX_CHARS);
        assert!(description.chars().count() >= STATUS_DESCRIPTION_MAX_CHARS - 1);
        assert!(
            description.len() > STATUS_DESCRIPTION_MAX_CHARS,
            "multibyte text is cut"
        );
        assert!(description.ends_with('…'));
        assert!(description.starts_with("1 failed; shop/Deployment/web (web): ImagePullBackOff"));
    }

    #[test]
    fn status_description_is_one_line() {
        let verdicts = [verdict_in(State::Failed, "line one\nline two\ttab")];
        assert_eq!(
            status_description(&verdicts, Unchecked::default()),
            "1 failed; shop/Deployment/web (web): line one line two tab"
        );
    }

    #[test]
    fn status_description_of_exactly_the_limit_is_not_cut() {
        let text = "é".repeat(STATUS_DESCRIPTION_MAX_CHARS);
        assert_eq!(truncate_chars(&text, STATUS_DESCRIPTION_MAX_CHARS), text);
    }

    #[test]
    fn verdict_serializes_with_kubernetes_condition_names_and_a_lowercase_state() {
        let v = judge_default(deployment_with_pods(&[on(&pinned())]));
        let json = serde_json::to_value(&v).unwrap();
        assert_eq!(json["state"], "converged");
        assert_eq!(json["conditions"][0]["type"], "Synced");
        assert_eq!(json["conditions"][0]["status"], "True");
        assert_eq!(json["conditions"][1]["type"], "RolledOut");
        assert_eq!(json["conditions"][2]["type"], "DigestsMatch");
    }
}
