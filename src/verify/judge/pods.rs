//! The `DigestsMatch` condition: does every pod run the pinned bytes?
//!
//! A green rollout is not proof: a partitioned StatefulSet, a ReplicaSet or an `OnDelete`
//! DaemonSet report success while old pods keep running. So each pod not being deleted is asked
//! what its runtime reports in `status.containerStatuses[].imageID`, read however the runtime
//! spelled it, and compared with the pinned digest and the digests the registry says stand for
//! it. A kubelet waiting reason
//! that no wait will cure fails the verdict here, unless the pod is an old one the rollout will
//! replace anyway. Pure, like the rest of the verdict: plain structs in.

use super::condition::{judged, ConditionStatus, ConditionType, Judged};
use super::expected::Expected;
use super::observed::{DigestFamily, LivePod, RolloutStatus};
use super::wording::{fatal_line, plural, stale_line, Stale};

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

/// The `DigestsMatch` judgement with the pod counts it was made from.
pub(super) struct PodsJudged {
    pub(super) judged: Judged,
    pub(super) on_pinned: usize,
    pub(super) total: usize,
    pub(super) stale: Vec<Stale>,
    /// Pods that are no replicas any more, with why: `name (Evicted)`.
    pub(super) finished: Vec<String>,
    /// The container's restarts, summed over the replicas on the pinned digest.
    pub(super) restarts: u64,
}

/// Why a pod is not one of the workload's replicas any more, as kubectl counts them: it is
/// being deleted, or it ended (phase Failed or Succeeded; an evicted pod lingers in phase
/// Failed until garbage collection). A Job's pods are its work, so for Jobs (and a CronJob's
/// Jobs) only pods being deleted are set apart.
fn finished(pod: &LivePod, rollout: &RolloutStatus) -> Option<String> {
    let runs_to_completion = matches!(
        rollout,
        RolloutStatus::Job { .. } | RolloutStatus::CronJob { .. }
    );
    let why = if pod.deleting {
        "being deleted".to_owned()
    } else if !runs_to_completion && matches!(pod.phase.as_str(), "Failed" | "Succeeded") {
        pod.reason.clone().unwrap_or_else(|| pod.phase.clone())
    } else {
        return None;
    };
    Some(format!("{} ({why})", pod.name))
}

/// `DigestsMatch`: every replica (a pod neither ended nor being deleted, see [`finished`]) runs
/// the pinned digest for the container.
/// A fatal waiting reason on a pod that is, or may be, on the new template fails the verdict; on
/// a pod that is clearly on another digest it only makes the pod stale, since the rollout will
/// replace that pod anyway.
pub(super) fn judge_pods(
    expected: &Expected,
    family: &DigestFamily,
    rollout: &RolloutStatus,
    pods: &[LivePod],
) -> PodsJudged {
    let pinned_digest = expected.digest.to_string();
    let mut on_pinned = 0;
    let mut total = 0;
    let mut stale = Vec::new();
    let mut finished_pods = Vec::new();
    let mut fatal: Vec<(String, String)> = Vec::new();
    let mut restarts: u64 = 0;
    for pod in pods {
        if let Some(line) = finished(pod, rollout) {
            finished_pods.push(line);
            continue;
        }
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
            restarts += u64::try_from(status.restart_count).unwrap_or(0);
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

    let judgement = digests_match(&fatal, &stale, (on_pinned, total), rollout, &pinned_digest);
    PodsJudged {
        judged: judgement,
        on_pinned,
        total,
        stale,
        finished: finished_pods,
        restarts,
    }
}

/// The `DigestsMatch` condition from what the replicas showed: a fatal waiting reason on a
/// pod that may be on the new template fails it; else the pods on another digest, or the
/// count on the pinned one (`on_pinned` of `total`), decide it.
fn digests_match(
    fatal: &[(String, String)],
    stale: &[Stale],
    (on_pinned, total): (usize, usize),
    rollout: &RolloutStatus,
    pinned_digest: &str,
) -> Judged {
    let t = ConditionType::DigestsMatch;
    if let Some((reason, line)) = fatal.first() {
        let line = match fatal.len() - 1 {
            0 => line.clone(),
            more => format!("{line} (and {more} more {})", plural(more, "pod", "pods")),
        };
        Judged {
            failed: true,
            ..judged(t, ConditionStatus::False, reason, line.clone(), line)
        }
    } else if total == 0 && matches!(rollout, RolloutStatus::CronJob { runs: 0, .. }) {
        judged(
            t,
            ConditionStatus::True,
            "NotRunSinceSync",
            "no Job has run from the current template, so no pod runs an old digest".to_owned(),
            "synced, not run since".to_owned(),
        )
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
        let line = stale_line(stale, total);
        judged(t, ConditionStatus::False, "StalePods", line.clone(), line)
    } else {
        judged(
            t,
            ConditionStatus::True,
            "AllPodsOnPinnedDigest",
            format!("{on_pinned}/{total} pods on {pinned_digest}"),
            format!("converged: {on_pinned}/{total} pods on the pinned digest"),
        )
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
        RolloutStatus::CronJob { latest: None, .. } => true,
        RolloutStatus::CronJob {
            latest: Some(latest),
            ..
        } => no_pods_expected(latest),
        RolloutStatus::Rollout(rollout) => rollout.spec_replicas == 0,
        RolloutStatus::Pod => false,
    }
}

/// The digest part of an image reference (after the last `@`), if it has one.
pub(super) fn digest_part(image: &str) -> Option<&str> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::judge::samples::*;

    /// The verdict waits on the `stale` pods, which run another digest.
    #[track_caller]
    fn assert_stale(v: &Verdict, stale: &[&str]) {
        assert_eq!(v.state, State::Progressing, "{v:?}");
        assert_eq!(v.stale_pods, stale);
    }
    use crate::verify::judge::verdict::{judge, ConditionStatus, ConditionType, State, Verdict};

    /// The verdict on a Deployment of `replicas` whose rollout is complete (all updated and
    /// available), running `pods`.
    fn rolled_out(replicas: i32, pods: Vec<LivePod>) -> Verdict {
        let done = deployment(replicas, replicas, replicas, replicas);
        judge_default(found(workload(done), pods))
    }

    #[test]
    fn a_moved_tag_with_two_of_three_pods_on_the_old_digest_is_progressing_naming_them() {
        let live = deployment_with_pods(&[on(&pinned()), on(&old()), on(&old())]);
        let v = judge_default(live);
        assert_stale(&v, &["web-1", "web-2"]);
        assert_eq!((v.pods_on_pinned, v.pods_total), (1, 3));
        assert_eq!(v.reason, "2 of 3 pods still on an old digest: web-1, web-2");
        assert_eq!(reason_of(&v, ConditionType::DigestsMatch), "StalePods");
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
        assert_verdict(
            &v,
            State::Failed,
            &format!("ImagePullBackOff on web-xyz: {message}"),
        );
        assert_eq!(
            reason_of(&v, ConditionType::DigestsMatch),
            "ImagePullBackOff"
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
        let v = rolled_out(2, vec![pod("web-new", &on(&pinned())), old_pod]);
        assert_verdict(
            &v,
            State::Progressing,
            "1 of 2 pods not started yet: web-old",
        );
    }

    #[test]
    fn a_crash_loop_on_a_pod_running_an_old_digest_is_only_stale() {
        let mut p = pod("web-old", &on(&old()));
        p.containers[0].waiting_reason = Some("CrashLoopBackOff".to_owned());
        let v = rolled_out(1, vec![p]);
        assert_stale(&v, &["web-old"]);
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
        assert_stale(&v, &["web-0"]);
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
        assert_stale(&v, &["web-0"]);
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
    fn pods_being_deleted_are_not_counted() {
        let mut leaving = pod("web-old", &on(&old()));
        leaving.deleting = true;
        let v = rolled_out(1, vec![pod("web-new", &on(&pinned())), leaving]);
        assert_eq!(v.state, State::Converged);
        assert_eq!((v.pods_on_pinned, v.pods_total), (1, 1));
    }

    #[test]
    fn evicted_and_completed_pods_of_the_old_replica_set_are_listed_apart_not_stale() {
        let mut evicted = ended_pod("web-old-1", &on(&old()), "Failed");
        evicted.reason = Some("Evicted".to_owned());
        let mut completed = pod("web-old-2", &on(&old()));
        completed.phase = "Succeeded".to_owned();
        let mut leaving = pod("web-old-3", &on(&old()));
        leaving.deleting = true;
        let v = rolled_out(
            2,
            vec![
                pod("web-new-1", &on(&pinned())),
                pod("web-new-2", &on(&pinned())),
                evicted,
                completed,
                leaving,
            ],
        );
        assert_eq!(v.state, State::Converged, "{v:#?}");
        assert_eq!((v.pods_on_pinned, v.pods_total), (2, 2));
        assert!(v.stale_pods.is_empty());
        assert_eq!(
            v.finished_pods,
            [
                "web-old-1 (Evicted)",
                "web-old-2 (Succeeded)",
                "web-old-3 (being deleted)"
            ]
        );
    }

    #[test]
    fn a_jobs_succeeded_pods_are_its_work_and_count() {
        let done = ended_pod("job-1", &on(&pinned()), "Succeeded");
        let live = found(
            workload(RolloutStatus::Job {
                active: 0,
                succeeded: 1,
                failed: 0,
                failed_condition: None,
            }),
            vec![done],
        );
        let v = judge_default(live);
        assert_eq!(v.state, State::Converged, "{v:#?}");
        assert_eq!((v.pods_on_pinned, v.pods_total), (1, 1));
        assert!(v.finished_pods.is_empty());
    }

    #[test]
    fn a_pod_without_an_image_id_is_not_on_the_pinned_digest() {
        let mut starting = pod("web-1", "");
        starting.phase = "Pending".to_owned();
        let v = rolled_out(2, vec![pod("web-0", &on(&pinned())), starting]);
        assert_verdict(&v, State::Progressing, "1 of 2 pods not started yet: web-1");
    }

    #[test]
    fn a_pod_without_a_status_for_the_container_is_not_started() {
        let mut p = pod("web-0", &on(&pinned()));
        p.containers[0].name = "sidecar".to_owned();
        let v = rolled_out(1, vec![p]);
        assert_eq!(v.stale_pods, vec!["web-0"]);
        assert_eq!(v.state, State::Progressing);
    }

    #[test]
    fn no_pods_while_replicas_are_expected_is_progressing() {
        let v = rolled_out(1, Vec::new());
        assert_verdict(&v, State::Progressing, "no pods to check yet");
        assert_eq!(
            status_of(&v, ConditionType::DigestsMatch),
            ConditionStatus::Unknown
        );
    }

    #[test]
    fn a_workload_scaled_to_zero_is_converged() {
        let v = rolled_out(0, Vec::new());
        assert_eq!(v.state, State::Converged, "{v:#?}");
    }

    #[test]
    fn a_finished_job_whose_pods_were_cleaned_up_is_converged() {
        let v = judge_default(found(workload(job(0, 1, None)), Vec::new()));
        assert_eq!(v.state, State::Converged, "{v:#?}");
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
}
