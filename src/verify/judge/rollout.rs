//! The `RolledOut` condition: has the workload's controller finished rolling out the new spec?
//!
//! Each kind is judged by its own function, following kubectl's `rollout_status.go` (`oc rollout
//! status` for an OpenShift DeploymentConfig) check by check and in the same order, so the
//! verdict never disagrees with what a person runs by hand, and a kind's rules can be read next
//! to kubectl's without the other kinds in between. Where kubectl gives no judgement
//! (non-rolling strategies, ReplicaSet, Job, Pod) the rule is the closest one it would give,
//! written out in that kind's function. Pure, like the rest of the verdict: plain structs in.

use super::condition::{judged, ConditionStatus, ConditionType, Judged};
use super::observed::{ArgoRollout, LivePod, LiveWorkload, RolloutStatus, RolloutStrategy};
use super::wording::one_line;

/// `RolledOut` for the workload, by its kind. Only unpacks the kind's status fields, so that
/// each rule below names what it reads.
pub(super) fn judge_rollout(workload: &LiveWorkload, pods: &[LivePod]) -> Judged {
    match &workload.rollout {
        RolloutStatus::Deployment {
            spec_replicas,
            replicas,
            updated,
            available,
            progress_deadline_exceeded,
            ..
        } => deployment(
            workload,
            *spec_replicas,
            *replicas,
            *updated,
            *available,
            *progress_deadline_exceeded,
        ),
        RolloutStatus::StatefulSet {
            spec_replicas,
            ready,
            updated,
            current_revision,
            update_revision,
            rolling_update,
            partition,
        } => stateful_set(
            workload,
            (*spec_replicas, *ready, *updated),
            current_revision.as_deref(),
            update_revision.as_deref(),
            *rolling_update,
            *partition,
        ),
        RolloutStatus::DaemonSet {
            desired,
            updated,
            available,
            rolling_update,
        } => daemon_set(workload, *desired, *updated, *available, *rolling_update),
        RolloutStatus::ReplicaSet {
            spec_replicas,
            ready,
            available,
        } => replica_set(workload, *spec_replicas, *ready, *available),
        RolloutStatus::Job {
            active,
            succeeded,
            failed,
            failed_condition,
        } => job(*active, *succeeded, *failed, failed_condition.as_deref()),
        RolloutStatus::CronJob { latest: None, .. } => cron_job_not_run(),
        // The newest run is judged as the Job it is.
        RolloutStatus::CronJob {
            latest: Some(latest),
            ..
        } => judge_rollout(
            &LiveWorkload {
                rollout: latest.as_ref().clone(),
                ..workload.clone()
            },
            pods,
        ),
        RolloutStatus::Pod => pod(pods),
        RolloutStatus::Rollout(rollout) => argo_rollout(workload, rollout),
        RolloutStatus::DeploymentConfig {
            spec_replicas,
            updated,
            available,
            latest_version,
            progressing_failed,
        } => deployment_config(
            workload,
            *spec_replicas,
            *updated,
            *available,
            *latest_version,
            progressing_failed.as_deref(),
        ),
    }
}

/// kubectl's `DeploymentStatusViewer`.
fn deployment(
    workload: &LiveWorkload,
    spec_replicas: i32,
    replicas: i32,
    updated: i32,
    available: i32,
    progress_deadline_exceeded: bool,
) -> Judged {
    if !generation_observed(workload) {
        return spec_update_not_observed();
    }
    if progress_deadline_exceeded {
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

/// kubectl's `StatefulSetStatusViewer`. The replica counts are `(spec, ready, updated)`.
fn stateful_set(
    workload: &LiveWorkload,
    (spec_replicas, ready, updated): (i32, i32, i32),
    current_revision: Option<&str>,
    update_revision: Option<&str>,
    rolling_update: bool,
    partition: Option<i32>,
) -> Judged {
    // kubectl treats an unset observedGeneration as "not observed" for StatefulSets.
    if workload.observed_generation.unwrap_or(0) == 0 || !generation_observed(workload) {
        return spec_update_not_observed();
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
        if updated < wanted {
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
                update_revision.unwrap_or("(unknown)")
            ),
        );
    }
    rollout_done(format!(
        "rolling update complete at revision {}",
        current_revision.unwrap_or("(unknown)")
    ))
}

/// kubectl's `DaemonSetStatusViewer`.
fn daemon_set(
    workload: &LiveWorkload,
    desired: i32,
    updated: i32,
    available: i32,
    rolling_update: bool,
) -> Judged {
    if !generation_observed(workload) {
        return spec_update_not_observed();
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

/// kubectl has no viewer for a ReplicaSet: the closest judgement is all replicas ready, then
/// available. A ReplicaSet never replaces its pods, so DigestsMatch is what catches those still
/// on an old digest.
fn replica_set(workload: &LiveWorkload, spec_replicas: i32, ready: i32, available: i32) -> Judged {
    if !generation_observed(workload) {
        return spec_update_not_observed();
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

/// kubectl has no viewer for a Job: a `Failed` condition fails it, and it is complete once a
/// pod succeeded and none is active.
fn job(active: i32, succeeded: i32, failed: i32, failed_condition: Option<&str>) -> Judged {
    if let Some(message) = failed_condition {
        let message = one_line(message);
        return rollout_failed(
            "JobFailed",
            message.clone(),
            format!("job failed: {message}"),
        );
    }
    if succeeded >= 1 && active == 0 {
        return rollout_done(format!("job complete: {succeeded} succeeded"));
    }
    rollout_waiting(
        "JobRunning",
        format!("job running: {active} active, {succeeded} succeeded, {failed} failed"),
    )
}

/// A CronJob whose template carries the pin but that has not run since: there is nothing to
/// roll out, and nothing old runs under it either. It does not hold a verdict back.
fn cron_job_not_run() -> Judged {
    judged(
        ConditionType::RolledOut,
        ConditionStatus::True,
        "NotRunSinceSync",
        "no Job has run from the current template yet".to_owned(),
        "synced, not run since".to_owned(),
    )
}

/// kubectl has no viewer for a bare Pod: it is rolled out once running and ready, and failed in
/// the `Failed` phase. A pod being deleted is not the one that will run.
fn pod(pods: &[LivePod]) -> Judged {
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

/// `oc rollout status` for an OpenShift DeploymentConfig: nothing to judge before its first
/// deployment has run.
fn deployment_config(
    workload: &LiveWorkload,
    spec_replicas: i32,
    updated: i32,
    available: i32,
    latest_version: Option<i64>,
    progressing_failed: Option<&str>,
) -> Judged {
    if latest_version.unwrap_or(0) == 0 {
        return rollout_waiting(
            "NoDeploymentYet",
            "no deployment has run yet (waiting on a trigger or `oc rollout latest`)".to_owned(),
        );
    }
    if !generation_observed(workload) {
        return spec_update_not_observed();
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

/// An Argo Rollouts `Rollout`, judged as Argo Rollouts judges it (`GetRolloutPhase` in
/// `utils/rollout/rolloututil.go`, which `kubectl argo rollouts status` and Argo CD's health
/// check read): the phase the controller wrote (Argo Rollouts 1.0 and later), or the one it
/// computes from the older status fields, once the controller observed the spec. Healthy
/// means the stable ReplicaSet is the current template's (`stableRS == currentPodHash`); a
/// canary paused at a step or still moving through its steps is Progressing, with how far it
/// got ("canary at step 2 of 4, 20 %"), never rolled out; Degraded (aborted, timed out, an
/// invalid spec) fails.
fn argo_rollout(workload: &LiveWorkload, rollout: &ArgoRollout) -> Judged {
    if !argo_generation_observed(workload.generation, rollout.observed_generation.as_deref()) {
        return rollout_waiting(
            "SpecUpdateNotObserved",
            "waiting for rollout spec update to be observed".to_owned(),
        );
    }
    if rollout.controller_pause && rollout.pause_conditions.is_empty() {
        return rollout_waiting(
            "RolloutUnpausing",
            "waiting for rollout to unpause".to_owned(),
        );
    }
    let (phase, message) = match rollout.phase.as_deref().filter(|p| !p.is_empty()) {
        Some(phase) => (phase, rollout.message.clone().unwrap_or_default()),
        None => legacy_rollout_phase(rollout),
    };
    let progress = rollout_progress(rollout);
    let with_progress = |message: &str| match (&progress, message.is_empty()) {
        (Some(progress), true) => progress.clone(),
        (Some(progress), false) => format!("{progress} ({message})"),
        (None, true) => "the rollout is progressing".to_owned(),
        (None, false) => message.to_owned(),
    };
    match phase {
        "Healthy" => healthy_rollout(workload, rollout),
        "Degraded" => {
            let message = one_line(if message.is_empty() {
                "the rollout is degraded"
            } else {
                &message
            });
            rollout_failed(
                "RolloutDegraded",
                message.clone(),
                format!("rollout degraded: {message}"),
            )
        }
        "Paused" => {
            let message = with_progress(&message);
            judged(
                ConditionType::RolledOut,
                ConditionStatus::False,
                "RolloutPaused",
                message.clone(),
                format!("rollout paused: {message}"),
            )
        }
        _ => rollout_waiting("RolloutProgressing", with_progress(&message)),
    }
}

/// Healthy as Argo Rollouts says it, checked once more against what it rests on: the stable
/// ReplicaSet is the current template's and runs that template.
fn healthy_rollout(workload: &LiveWorkload, rollout: &ArgoRollout) -> Judged {
    let current = rollout.current_pod_hash.as_deref();
    let stable = rollout.stable_rs.as_deref();
    let has_steps = !matches!(rollout.strategy, RolloutStrategy::Unknown);
    if has_steps && (stable.is_none() || stable != current) {
        return rollout_waiting(
            "StableNotCurrent",
            format!(
                "the stable ReplicaSet is {}, the current template's is {}",
                stable.unwrap_or("(none yet)"),
                current.unwrap_or("(none)")
            ),
        );
    }
    let Some(stable) = stable else {
        return rollout_done("Healthy".to_owned());
    };
    if let Some(images) = &rollout.stable_template_images {
        if images != &workload.template_images {
            return rollout_waiting(
                "StableNotCurrent",
                format!("the stable ReplicaSet {stable} does not run the current template yet"),
            );
        }
    }
    rollout_done(format!(
        "Healthy: the stable ReplicaSet {stable} runs the current template"
    ))
}

/// Argo Rollouts' `isGenerationObserved`: a numeric `status.observedGeneration` must be the
/// generation (or later); an older controller's hash says nothing, and is taken as observed.
fn argo_generation_observed(generation: Option<i64>, observed: Option<&str>) -> bool {
    let Some(observed) = observed.and_then(|o| o.parse::<i64>().ok()) else {
        return true;
    };
    observed >= generation.unwrap_or(0)
}

/// Argo Rollouts' `CalculateRolloutPhase`, for a controller older than 1.0 that writes no
/// phase: the phase and its message from the conditions, pauses and replica counts.
fn legacy_rollout_phase(rollout: &ArgoRollout) -> (&'static str, String) {
    if let Some(condition) = &rollout.degraded_condition {
        return ("Degraded", condition.clone());
    }
    if rollout.spec_paused {
        return ("Paused", "manually paused".to_owned());
    }
    if let Some(reason) = rollout.pause_conditions.first() {
        return ("Paused", reason.clone());
    }
    let progressing = |message: &str| ("Progressing", message.to_owned());
    if rollout.updated < rollout.spec_replicas {
        return progressing("more replicas need to be updated");
    }
    if rollout.available < rollout.updated {
        return progressing("updated replicas are still becoming available");
    }
    let current = rollout.current_pod_hash.as_deref();
    let promoted = rollout.stable_rs.is_some() && rollout.stable_rs.as_deref() == current;
    match &rollout.strategy {
        RolloutStrategy::BlueGreen { active_selector } => {
            if active_selector.is_none() || active_selector.as_deref() != current {
                return progressing("active service cutover pending");
            }
            if !promoted {
                return progressing("waiting for post-promotion verification to complete");
            }
        }
        RolloutStrategy::Canary {
            traffic_routing, ..
        } => {
            if !traffic_routing && rollout.replicas > rollout.updated {
                return progressing("old replicas are pending termination");
            }
            if !promoted {
                return progressing("waiting for all steps to complete");
            }
        }
        RolloutStrategy::Unknown => {}
    }
    ("Healthy", String::new())
}

/// How far a canary got through its steps, as people say it: "canary at step 2 of 4, 20 %"
/// (the step it is at, counted from 1, and the weight Argo Rollouts' `GetCurrentSetWeight`
/// gives it: the last `setWeight` at or before that step, 0 once aborted). For a blue-green
/// rollout, which hash the active Service selects.
fn rollout_progress(rollout: &ArgoRollout) -> Option<String> {
    match &rollout.strategy {
        RolloutStrategy::Canary {
            steps,
            current_step_index,
            ..
        } if !steps.is_empty() => {
            let index = usize::try_from(current_step_index.unwrap_or(0)).unwrap_or(0);
            if index >= steps.len() {
                return Some(format!("canary past all {} steps", steps.len()));
            }
            let weight = if rollout.abort {
                0
            } else {
                steps[..=index].iter().rev().find_map(|w| *w).unwrap_or(0)
            };
            Some(format!(
                "canary at step {} of {}, {weight} %",
                index + 1,
                steps.len()
            ))
        }
        RolloutStrategy::BlueGreen { active_selector } => Some(format!(
            "blue-green: the active Service selects {}, the current template is {}",
            active_selector.as_deref().unwrap_or("nothing yet"),
            rollout.current_pod_hash.as_deref().unwrap_or("(none)")
        )),
        _ => None,
    }
}

/// kubectl's `generation <= status.observedGeneration`, with absent fields read as Go's zero.
fn generation_observed(workload: &LiveWorkload) -> bool {
    workload.generation.unwrap_or(0) <= workload.observed_generation.unwrap_or(0)
}

/// Until the controller has seen the new spec, its status describes the old one: waiting, not
/// judging, is the only honest answer.
fn spec_update_not_observed() -> Judged {
    rollout_waiting(
        "SpecUpdateNotObserved",
        "waiting for spec update to be observed".to_owned(),
    )
}

/// Finished: the condition is True and the summary says what was checked.
fn rollout_done(message: String) -> Judged {
    judged(
        ConditionType::RolledOut,
        ConditionStatus::True,
        "RolloutComplete",
        message.clone(),
        format!("rolled out: {message}"),
    )
}

/// Not finished yet, for a reason that waiting may resolve: the verdict stays Progressing.
fn rollout_waiting(reason: &str, message: String) -> Judged {
    judged(
        ConditionType::RolledOut,
        ConditionStatus::False,
        reason,
        message.clone(),
        format!("rollout in progress: {message}"),
    )
}

/// Will not finish without someone acting: the verdict is Failed.
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

#[cfg(test)]
mod tests {
    // Not `super::*`: the kinds' functions share their names with the samples.
    use crate::verify::judge::samples::*;
    use crate::verify::judge::verdict::{
        ArgoRollout, ConditionStatus, ConditionType, LiveWorkload, RolloutStatus, RolloutStrategy,
        State, Verdict,
    };

    fn rollout_of(rollout: RolloutStatus) -> Verdict {
        judged_with_one_pod(workload(rollout))
    }

    /// [`rollout_of`] a workload at `generation` whose controller has seen `observed`.
    fn judged_at_generations(
        rollout: RolloutStatus,
        generation: Option<i64>,
        observed: Option<i64>,
    ) -> Verdict {
        judged_with_one_pod(LiveWorkload {
            generation,
            observed_generation: observed,
            ..workload(rollout)
        })
    }

    #[test]
    fn deployment_waits_for_the_spec_update_to_be_observed() {
        let v = judged_at_generations(deployment(1, 1, 1, 1), Some(2), Some(1));
        assert_verdict(
            &v,
            State::Progressing,
            "rollout in progress: waiting for spec update to be observed",
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
        assert_verdict(&v, State::Failed, "progress deadline exceeded");
    }

    #[test]
    fn deployment_deadline_is_not_judged_before_the_spec_update_is_observed() {
        let past_deadline = RolloutStatus::Deployment {
            spec_replicas: 1,
            replicas: 1,
            updated: 1,
            ready: 1,
            available: 1,
            progress_deadline_exceeded: true,
        };
        let v = judged_at_generations(past_deadline, Some(2), Some(1));
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
        let v = judged_at_generations(deployment(1, 1, 1, 1), None, None);
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
        let v = judged_at_generations(statefulset(3, 3, Some(0)), None, None);
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
        let v = judged_at_generations(daemonset(3, 3, true), Some(2), Some(1));
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
        assert_verdict(
            &v,
            State::Failed,
            "job failed: Job has reached the specified backoff limit",
        );
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
        let p = ended_pod("web-0", &on(&pinned()), "Failed");
        let v = judge_default(found(workload(RolloutStatus::Pod), vec![p]));
        assert_verdict(&v, State::Failed, "pod web-0 failed");
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
        assert_verdict(
            &v,
            State::Failed,
            "rollout failed: replication controller \"web-3\" has failed progressing",
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

    /// A canary Rollout as an Argo Rollouts 1.x controller leaves it once Healthy: 4 steps
    /// (`setWeight: 20`, `pause`, `setWeight: 40`, `pause`), all done, the stable ReplicaSet
    /// the current template's and running it.
    fn argo(phase: Option<&str>) -> ArgoRollout {
        ArgoRollout {
            phase: phase.map(str::to_owned),
            message: None,
            observed_generation: Some("2".to_owned()),
            spec_replicas: 2,
            replicas: 2,
            updated: 2,
            available: 2,
            current_pod_hash: Some("new".to_owned()),
            stable_rs: Some("new".to_owned()),
            strategy: RolloutStrategy::Canary {
                steps: vec![Some(20), None, Some(40), None],
                current_step_index: Some(4),
                traffic_routing: false,
            },
            stable_template_images: Some(workload(deployment(1, 1, 1, 1)).template_images),
            ..ArgoRollout::default()
        }
    }

    fn rollout_judged(argo: ArgoRollout) -> Verdict {
        rollout_of(RolloutStatus::Rollout(Box::new(argo)))
    }

    /// The verdict on an [`argo`] Rollout in `phase` after `change`.
    fn argo_judged(phase: Option<&str>, change: impl FnOnce(&mut ArgoRollout)) -> Verdict {
        let mut rollout = argo(phase);
        change(&mut rollout);
        rollout_judged(rollout)
    }

    #[test]
    fn a_healthy_rollout_whose_stable_replica_set_runs_the_template_is_converged() {
        let v = rollout_judged(argo(Some("Healthy")));
        assert_eq!(v.state, State::Converged, "{v:?}");
        assert_eq!(
            v.condition(ConditionType::RolledOut).unwrap().message,
            "Healthy: the stable ReplicaSet new runs the current template"
        );
    }

    #[test]
    fn a_canary_paused_at_a_step_is_progressing_with_how_far_it_got() {
        let mut paused = argo(Some("Paused"));
        paused.message = Some("CanaryPauseStep".to_owned());
        paused.pause_conditions = vec!["CanaryPauseStep".to_owned()];
        paused.controller_pause = true;
        paused.stable_rs = Some("old".to_owned());
        paused.strategy = RolloutStrategy::Canary {
            steps: vec![Some(20), None, Some(40), None],
            current_step_index: Some(1),
            traffic_routing: false,
        };
        let v = rollout_judged(paused.clone());
        assert_verdict(
            &v,
            State::Progressing,
            "rollout paused: canary at step 2 of 4, 20 % (CanaryPauseStep)",
        );
        assert_eq!(reason_of(&v, ConditionType::RolledOut), "RolloutPaused");
        // Moving on to its third step, the weight is the third step's.
        paused.phase = Some("Progressing".to_owned());
        paused.message = Some("more replicas need to be updated".to_owned());
        paused.pause_conditions.clear();
        paused.controller_pause = false;
        paused.strategy = RolloutStrategy::Canary {
            steps: vec![Some(20), None, Some(40), None],
            current_step_index: Some(2),
            traffic_routing: false,
        };
        assert_eq!(
            rollout_judged(paused).reason,
            "rollout in progress: canary at step 3 of 4, 40 % (more replicas need to be updated)"
        );
    }

    #[test]
    fn healthy_is_not_enough_while_the_stable_replica_set_is_another_template_s() {
        let v = argo_judged(Some("Healthy"), |a| a.stable_rs = Some("old".to_owned()));
        assert_verdict(
            &v,
            State::Progressing,
            "rollout in progress: the stable ReplicaSet is old, the current template's is new",
        );
        let stale = argo_judged(Some("Healthy"), |a| {
            a.stable_template_images = Some(vec![("web".to_owned(), "web:0".to_owned())]);
        });
        assert_eq!(
            stale.reason,
            "rollout in progress: the stable ReplicaSet new does not run the current template yet"
        );
    }

    #[test]
    fn a_degraded_rollout_fails_with_argo_rollouts_message() {
        let v = argo_judged(Some("Degraded"), |a| {
            a.message = Some("RolloutAborted: Rollout aborted update to revision 3".to_owned());
        });
        assert_verdict(
            &v,
            State::Failed,
            "rollout degraded: RolloutAborted: Rollout aborted update to revision 3",
        );
    }

    #[test]
    fn a_rollout_waits_for_its_spec_to_be_observed_and_for_an_unpause() {
        let unobserved = argo_judged(Some("Healthy"), |a| {
            a.observed_generation = Some("1".to_owned());
        });
        assert_eq!(
            unobserved.reason,
            "rollout in progress: waiting for rollout spec update to be observed"
        );
        // An Argo Rollouts 0.9 hash says nothing of the generation: taken as observed.
        let hashed = argo_judged(Some("Healthy"), |a| {
            a.observed_generation = Some("5c76fd9f86".to_owned());
        });
        assert_eq!(hashed.state, State::Converged);
        let unpausing = argo_judged(Some("Paused"), |a| a.controller_pause = true);
        assert_eq!(
            unpausing.reason,
            "rollout in progress: waiting for rollout to unpause"
        );
    }

    #[test]
    fn an_older_controller_s_rollout_is_judged_as_calculate_rollout_phase_does() {
        let legacy = |change: &dyn Fn(&mut ArgoRollout)| {
            argo_judged(None, |a| {
                a.observed_generation = Some("58b949649c".to_owned());
                change(a);
            })
        };
        assert_eq!(legacy(&|_| {}).state, State::Converged);
        assert_eq!(
            legacy(&|a| a.degraded_condition = Some("RolloutAborted: Rollout is aborted".into()))
                .reason,
            "rollout degraded: RolloutAborted: Rollout is aborted"
        );
        assert_eq!(
            legacy(&|a| a.spec_paused = true).reason,
            "rollout paused: canary past all 4 steps (manually paused)"
        );
        assert_eq!(
            legacy(&|a| a.updated = 1).reason,
            "rollout in progress: canary past all 4 steps (more replicas need to be updated)"
        );
        assert_eq!(
            legacy(&|a| a.replicas = 3).reason,
            "rollout in progress: canary past all 4 steps (old replicas are pending termination)"
        );
        // With traffic routing, old replicas may stay up after promotion.
        let routed = legacy(&|a| {
            a.replicas = 3;
            a.strategy = RolloutStrategy::Canary {
                steps: vec![Some(20), None, Some(40), None],
                current_step_index: Some(4),
                traffic_routing: true,
            };
        });
        assert_eq!(routed.state, State::Converged);
        let blue_green = legacy(&|a| {
            a.strategy = RolloutStrategy::BlueGreen {
                active_selector: Some("old".into()),
            }
        });
        assert_eq!(
            blue_green.reason,
            "rollout in progress: blue-green: the active Service selects old, the current template is new (active service cutover pending)"
        );
        // Aborted, the canary's weight is 0.
        let aborted = legacy(&|a| {
            a.abort = true;
            a.pause_conditions = vec!["CanaryPauseStep".into()];
            a.strategy = RolloutStrategy::Canary {
                steps: vec![Some(20), None, Some(40), None],
                current_step_index: Some(1),
                traffic_routing: false,
            };
        });
        assert_eq!(
            aborted.reason,
            "rollout paused: canary at step 2 of 4, 0 % (CanaryPauseStep)"
        );
    }
}
