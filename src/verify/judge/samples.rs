//! Plain live workloads, pods and expectations for the verdict's unit tests.
//!
//! The rules are split over `verdict.rs`, `rollout.rs`, `pods.rs` and `wording.rs`, but their
//! tests judge the same healthy Deployment with small changes: one copy of how it is built keeps
//! every test module describing the same cluster.

use super::verdict::{
    judge, ConditionStatus, ConditionType, DigestFamily, Expected, Live, LiveContainer, LivePod,
    LiveWorkload, RolloutStatus, State, Verdict,
};

pub(crate) fn digest(c: char) -> String {
    format!("sha256:{}", c.to_string().repeat(64))
}

pub(crate) fn pinned() -> String {
    digest('a')
}

pub(crate) fn old() -> String {
    digest('0')
}

pub(crate) fn expected() -> Expected {
    Expected {
        workload: "shop/Deployment/web".parse().unwrap(),
        container: "web".to_owned(),
        pinned_ref: format!("ghcr.io/acme/web:latest@{}", pinned()),
        digest: pinned().parse().unwrap(),
    }
}

pub(crate) fn no_family() -> DigestFamily {
    DigestFamily::default()
}

pub(crate) fn deployment(spec: i32, replicas: i32, updated: i32, available: i32) -> RolloutStatus {
    RolloutStatus::Deployment {
        spec_replicas: spec,
        replicas,
        updated,
        ready: available,
        available,
        progress_deadline_exceeded: false,
    }
}

pub(crate) fn workload(rollout: RolloutStatus) -> LiveWorkload {
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

pub(crate) fn pod(name: &str, image_id: &str) -> LivePod {
    LivePod {
        name: name.to_owned(),
        phase: "Running".to_owned(),
        ready: true,
        deleting: false,
        reason: None,
        containers: vec![container(image_id)],
        ..LivePod::default()
    }
}

/// A pod whose containers ended: in the phase `Succeeded` or `Failed`, no longer ready.
pub(crate) fn ended_pod(name: &str, image_id: &str, phase: &str) -> LivePod {
    LivePod {
        phase: phase.to_owned(),
        ready: false,
        ..pod(name, image_id)
    }
}

pub(crate) fn waiting_pod(name: &str, reason: &str, message: &str) -> LivePod {
    let mut p = pod(name, "");
    p.phase = "Pending".to_owned();
    p.ready = false;
    p.containers[0].waiting_reason = Some(reason.to_owned());
    p.containers[0].waiting_message = Some(message.to_owned());
    p
}

pub(crate) fn on(digest: &str) -> String {
    format!("ghcr.io/acme/web@{digest}")
}

pub(crate) fn found(workload: LiveWorkload, pods: Vec<LivePod>) -> Live {
    Live::Found { workload, pods }
}

pub(crate) fn judge_default(live: Live) -> Verdict {
    judge(&expected(), &no_family(), &live)
}

/// A healthy Deployment of `n` replicas whose pods report the given imageIDs.
pub(crate) fn deployment_with_pods(image_ids: &[String]) -> Live {
    let n = i32::try_from(image_ids.len()).unwrap();
    let pods = image_ids
        .iter()
        .enumerate()
        .map(|(i, id)| pod(&format!("web-{i}"), id))
        .collect();
    found(workload(deployment(n, n, n, n)), pods)
}

pub(crate) fn status_of(v: &Verdict, t: ConditionType) -> ConditionStatus {
    v.condition(t).unwrap().status
}

pub(crate) fn reason_of(v: &Verdict, t: ConditionType) -> String {
    v.condition(t).unwrap().reason.clone()
}

pub(crate) fn job(active: i32, succeeded: i32, failed_condition: Option<&str>) -> RolloutStatus {
    RolloutStatus::Job {
        active,
        succeeded,
        failed: 0,
        failed_condition: failed_condition.map(str::to_owned),
    }
}

/// The verdict on `workload` with one ready pod, `web-0`, on the pinned digest.
pub(crate) fn judged_with_one_pod(workload: LiveWorkload) -> Verdict {
    judge_default(found(workload, vec![pod("web-0", &on(&pinned()))]))
}

/// The verdict is `state`, for `reason`.
#[track_caller]
pub(crate) fn assert_verdict(v: &Verdict, state: State, reason: &str) {
    assert_eq!(v.state, state, "{v:?}");
    assert_eq!(v.reason, reason);
}
