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
//!
//! This file holds the types, the `Synced` condition, and how the three conditions make one
//! verdict and many verdicts one headline. The other two conditions have rules enough for files
//! of their own: `RolledOut`, kind by kind, in `rollout.rs`; `DigestsMatch`, pod by pod, in
//! `pods.rs`. `wording.rs` turns what they find into the lines people read.

use serde::Serialize;

use super::condition::{condition, judged, Judged};
pub use super::condition::{Condition, ConditionStatus, ConditionType, State};
pub use super::expected::Expected;
pub use super::observed::{
    ArgoRollout, DigestFamily, Live, LiveContainer, LivePod, LiveWorkload, RolloutStatus,
    RolloutStrategy,
};
pub use super::pods::{digest_of_image_id, ImageIdDigest};
use super::pods::{digest_part, judge_pods};
use super::rollout::judge_rollout;
use super::wording::{one_line, plural, truncate_chars};
use crate::reference::Digest;
use crate::workload::WorkloadId;

/// GitHub rejects a commit status whose description is longer than this many characters.
pub(crate) const STATUS_DESCRIPTION_MAX_CHARS: usize = 140;

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
    /// Pods that are not replicas of the workload any more, as kubectl counts them: ended
    /// (phase Failed or Succeeded, e.g. evicted; they linger until garbage collection) or being
    /// deleted. Named with why (`web-7d9f-x2 (Evicted)`), never counted as stale.
    pub finished_pods: Vec<String>,
    /// How many times the container restarted, summed over the pods on the pinned digest
    /// (`restartCount`): what a soak with `soak_restarts` counts. Omitted when zero.
    #[serde(skip_serializing_if = "is_zero")]
    pub restarts: u64,
    /// `Synced`, `RolledOut` and `DigestsMatch`, in that order.
    pub conditions: Vec<Condition>,
    pub state: State,
    /// One line a person can act on.
    pub reason: String,
}

impl Verdict {
    /// The verdict on `expected` before anything is judged: no pods counted, no conditions,
    /// and `Failed` with no reason until a judge says what it found.
    pub(crate) fn unjudged(expected: &Expected) -> Verdict {
        Verdict {
            workload: expected.workload.clone(),
            container: expected.container.clone(),
            pinned_digest: expected.digest.clone(),
            pods_on_pinned: 0,
            pods_total: 0,
            stale_pods: Vec::new(),
            finished_pods: Vec::new(),
            restarts: 0,
            conditions: Vec::new(),
            state: State::Failed,
            reason: String::new(),
        }
    }

    /// The condition of the given type, so callers need not rely on the order.
    pub fn condition(&self, type_: ConditionType) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Judges one pinned container against what the cluster holds.
pub fn judge(expected: &Expected, family: &DigestFamily, live: &Live) -> Verdict {
    let mut verdict = Verdict::unjudged(expected);
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
        Live::Forbidden(refusal) => {
            let message = one_line(refusal);
            verdict.conditions = forbidden(&message);
            verdict.reason = format!("no permission: {message}");
        }
        Live::Denied(message) => {
            let message = one_line(message);
            verdict.conditions = forbidden(&message);
            verdict.state = State::Unverified;
            verdict.reason = message;
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
            verdict.finished_pods = digests.finished;
            verdict.restarts = digests.restarts;
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
pub(crate) fn summarize(verdicts: &[Verdict], unchecked: Unchecked) -> (State, String) {
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
    // A pin whose workload could not be read (a tenant's ServiceAccount may not) is never
    // counted as converged.
    let state = if failed > 0 {
        State::Failed
    } else if progressing > 0 {
        State::Progressing
    } else if not_checked > 0 {
        State::Unverified
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
pub(crate) fn status_description(verdicts: &[Verdict], unchecked: Unchecked) -> String {
    let (_, line) = summarize(verdicts, unchecked);
    truncate_chars(&one_line(&line), STATUS_DESCRIPTION_MAX_CHARS)
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

/// Every condition Unknown because the cluster refused the read, with its message.
fn forbidden(message: &str) -> Vec<Condition> {
    [
        ConditionType::Synced,
        ConditionType::RolledOut,
        ConditionType::DigestsMatch,
    ]
    .into_iter()
    .map(|t| condition(t, ConditionStatus::Unknown, "Forbidden", message))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::judge::samples::*;
    use std::path::Path;

    fn verdict_in(state: State, reason: &str) -> Verdict {
        Verdict {
            state,
            reason: reason.to_owned(),
            ..Verdict::unjudged(&expected())
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

    /// The captured pod list, turned into [`LivePod`]s field by field as `observe/convert.rs` would.
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
                reason: item["status"]["reason"].as_str().map(str::to_owned),
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
                ..LivePod::default()
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
        assert_verdict(
            &v,
            State::Progressing,
            "not synced yet: live template has quay.io/k_nakajima/nginx-sample:latest",
        );
        // The pod already runs the digest the tag pointed at; only the template lags.
        assert_eq!(
            status_of(&v, ConditionType::DigestsMatch),
            ConditionStatus::True
        );
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
        assert_verdict(
            &v,
            State::Failed,
            "CreateContainerConfigError on web-x: secret \"db\" not found",
        );
        assert_eq!(
            reason_of(&v, ConditionType::RolledOut),
            "ProgressDeadlineExceeded"
        );
    }

    #[test]
    fn a_template_without_the_pinned_digest_is_not_synced_yet() {
        let mut w = workload(deployment(1, 1, 1, 1));
        w.template_images = vec![("web".to_owned(), "ghcr.io/acme/web:latest".to_owned())];
        let v = judge_default(found(w, vec![pod("web-0", &on(&old()))]));
        assert_verdict(
            &v,
            State::Progressing,
            "not synced yet: live template has ghcr.io/acme/web:latest",
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
        let v = judged_with_one_pod(w);
        assert_eq!(status_of(&v, ConditionType::Synced), ConditionStatus::True);
    }

    #[test]
    fn a_template_without_the_container_is_not_synced_yet() {
        let mut w = workload(deployment(1, 1, 1, 1));
        w.template_images = vec![("sidecar".to_owned(), expected().pinned_ref)];
        let v = judged_with_one_pod(w);
        assert_verdict(
            &v,
            State::Progressing,
            "not synced yet: live template has no container \"web\"",
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
        assert_verdict(&v, State::Failed, "workload missing");
        assert_eq!(reason_of(&v, ConditionType::Synced), "WorkloadMissing");
        assert_eq!(v.conditions.len(), 3);
    }

    #[test]
    fn a_forbidden_read_is_failed_naming_the_refused_list() {
        let message =
            "Kubernetes API https://10.0.0.1:6443: list Deployment in namespace team-b: 403 Forbidden";
        let v = judge_default(Live::Forbidden(message.to_owned()));
        assert_verdict(&v, State::Failed, &format!("no permission: {message}"));
        assert!(v.conditions.iter().all(|c| c.reason == "Forbidden"));
    }

    #[test]
    fn a_read_a_tenant_may_not_make_is_unverified_in_tagpins_words() {
        let message = "the ServiceAccount team-a/tagpin may not list deployments in team-b";
        let v = judge_default(Live::Denied(message.to_owned()));
        assert_verdict(&v, State::Unverified, message);
        assert!(v.conditions.iter().all(|c| c.reason == "Forbidden"
            && c.status == ConditionStatus::Unknown
            && c.message == message));
        assert_eq!((v.pods_total, v.pods_on_pinned), (0, 0));
        // Never converged for it, even beside a converged pin; the headline names it.
        let converged = verdict_in(State::Converged, "converged");
        assert_eq!(
            summarize(&[converged, v.clone()], Unchecked::default()),
            (
                State::Unverified,
                format!(
                    "1 converged, 1 unverified; {} ({}): {message}",
                    v.workload, v.container
                )
            )
        );
        let progressing = verdict_in(State::Progressing, "rollout in progress: x");
        assert_eq!(
            summarize(&[progressing, v], Unchecked::default()).0,
            State::Progressing
        );
    }

    /// The summary of verdicts in these states for these reasons, every image checked.
    fn summary_of(verdicts: &[(State, &str)]) -> (State, String) {
        let verdicts: Vec<Verdict> = verdicts
            .iter()
            .map(|(state, reason)| verdict_in(*state, reason))
            .collect();
        summarize(&verdicts, Unchecked::default())
    }

    #[test]
    fn summary_is_failed_when_any_verdict_failed_and_names_it() {
        assert_eq!(
            summary_of(&[
                (State::Converged, "converged"),
                (State::Progressing, "rollout in progress: x"),
                (State::Failed, "workload missing")
            ]),
            (
                State::Failed,
                "1 failed, 1 progressing, 1 converged; shop/Deployment/web (web): workload missing"
                    .to_owned()
            )
        );
    }

    #[test]
    fn summary_is_progressing_when_any_verdict_progresses() {
        assert_eq!(
            summary_of(&[
                (State::Converged, "converged"),
                (State::Progressing, "no pods to check yet")
            ])
            .0,
            State::Progressing
        );
    }

    #[test]
    fn summary_is_converged_when_all_converged() {
        assert_eq!(
            summary_of(&[(State::Converged, "a"), (State::Converged, "b")]),
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
