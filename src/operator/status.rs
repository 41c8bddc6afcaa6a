//! What a `PinnedRepository`'s status says, decided from what one reconcile found: pure, so
//! that every rule kstatus, `kubectl wait` and the health checks of Flux and Argo CD depend on
//! is tested here without a cluster.
//!
//! The conditions follow the kstatus conventions: `Ready` is always present; `Reconciling`
//! (work under way or retried) and `Stalled` (a person must act) are present only while true,
//! as Flux's controllers do. `lastTransitionTime` moves only when a condition's status does.
//!
//! A pin is progress until the cluster runs it: while the GitOps tool has not applied the pin
//! commit, or the rollout is under way, the object is `Reconciling` (`AwaitingSync`,
//! `Progressing`), not `Ready`; only a genuine failure stalls it ([`settle`]).

use super::crd::{Condition, PinnedRepositoryStatus, VerdictSummary};
use crate::verify::judge::check::Check;
use crate::verify::judge::verdict::{ConditionStatus, ConditionType, State, Verdict};

pub const READY: &str = "Ready";
pub const RECONCILING: &str = "Reconciling";
pub const STALLED: &str = "Stalled";

/// Why a condition is what it is (its `reason`): CamelCase, a bounded set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The target branch carries every pin; nothing was left to write.
    Pinned,
    /// The pins wait in a pull request for a merge.
    PullRequestOpen,
    /// Pinned, and the cluster runs the pinned digests (verified).
    Converged,
    /// The GitOps tool has not applied the pins yet (a live template without the pinned
    /// digest, a workload not created yet, an Argo CD or Flux object behind the pin commit).
    AwaitingSync,
    /// The pins are applied and rolling out.
    Progressing,
    /// The cluster does not run what was pinned: a person must look.
    VerificationFailed,
    /// The spec is not valid: its field-path problems are the message.
    InvalidSpec,
    /// A Secret the spec refers to, or a key of it, does not exist.
    SecretNotFound,
    /// The Git remote or the forge refused the credentials.
    AuthFailed,
    /// Some images or files failed this pass (the rest was pinned); retried with backoff.
    PartiallyPinned,
    /// The Git remote, the forge or a cluster could not be reached; retried with backoff.
    Unreachable,
    /// The reconcile did not finish within `--reconcile-timeout`; retried with backoff.
    TimedOut,
    /// A Secret the spec names does not carry the label that lets tagpin read it.
    SecretNotLabelled,
    /// The repository is larger than `--max-repository-size`.
    RepositoryTooLarge,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Pinned => "Pinned",
            Reason::PullRequestOpen => "PullRequestOpen",
            Reason::Converged => "Converged",
            Reason::AwaitingSync => "AwaitingSync",
            Reason::Progressing => "Progressing",
            Reason::VerificationFailed => "VerificationFailed",
            Reason::InvalidSpec => "InvalidSpec",
            Reason::SecretNotFound => "SecretNotFound",
            Reason::AuthFailed => "AuthFailed",
            Reason::PartiallyPinned => "PartiallyPinned",
            Reason::Unreachable => "Unreachable",
            Reason::TimedOut => "TimedOut",
            Reason::SecretNotLabelled => "SecretNotLabelled",
            Reason::RepositoryTooLarge => "RepositoryTooLarge",
        }
    }
}

/// What one reconcile found, in the terms the status speaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The pass ran without failure. `pull_request`: the number of the open pull request
    /// carrying the pins, if any; `verdict`: the verification made after it, if one was;
    /// `awaiting`: what a progressing verification waits for.
    Done {
        message: String,
        pull_request: Option<u64>,
        /// Boxed: the largest part, and not always there.
        verdict: Option<Box<VerdictSummary>>,
        awaiting: Option<Awaiting>,
    },
    /// Nothing more can be done until a person changes the spec or a Secret: `Stalled`.
    Stalled { reason: Reason, message: String },
    /// A failure that may pass by itself: retried with backoff, `Reconciling`.
    Retrying { reason: Reason, message: String },
}

impl Outcome {
    /// The `Ready` condition's status and reason.
    /// An open pull request is Ready: what it waits for is a merge, not the controller.
    pub fn ready(&self) -> (bool, Reason) {
        match self {
            Outcome::Done {
                verdict,
                pull_request,
                awaiting,
                ..
            } => match verdict.as_ref().map(|v| v.state.as_str()) {
                Some("failed") => (false, Reason::VerificationFailed),
                Some("converged") => (true, Reason::Converged),
                _ if pull_request.is_some() => (true, Reason::PullRequestOpen),
                Some("progressing") => match awaiting {
                    Some(a) => (false, a.reason),
                    None => (false, Reason::Progressing),
                },
                _ => (true, Reason::Pinned),
            },
            Outcome::Stalled { reason, .. } | Outcome::Retrying { reason, .. } => (false, *reason),
        }
    }

    fn message(&self) -> String {
        match self {
            Outcome::Done {
                message,
                verdict,
                awaiting,
                pull_request,
            } => match (verdict, awaiting) {
                (Some(v), Some(a)) if pull_request.is_none() && v.state == State::Progressing => {
                    format!("{message}; {}: {}", v.source, a.what)
                }
                (Some(v), _) => format!("{message}; {}: {}", v.source, v.summary),
                (None, _) => message.clone(),
            },
            Outcome::Stalled { message, .. } | Outcome::Retrying { message, .. } => message.clone(),
        }
    }
}

/// The conditions after a reconcile that found `outcome` for `generation`, carried over from
/// `previous` so that a condition whose status did not change keeps its transition time.
pub fn conditions(
    previous: &[Condition],
    outcome: &Outcome,
    generation: Option<i64>,
    now: &str,
) -> Vec<Condition> {
    let (ready, reason) = outcome.ready();
    let message = bounded(&outcome.message());
    let mut wanted = vec![(READY, ready, reason)];
    match outcome {
        Outcome::Stalled { reason, .. } => wanted.push((STALLED, true, *reason)),
        Outcome::Done { .. } if reason == Reason::VerificationFailed => {
            wanted.push((STALLED, true, reason))
        }
        Outcome::Done { .. } if !ready => wanted.push((RECONCILING, true, reason)),
        Outcome::Retrying { reason, .. } => wanted.push((RECONCILING, true, *reason)),
        Outcome::Done { .. } => {}
    }
    wanted
        .into_iter()
        .map(|(type_, status, reason)| {
            let status = if status { "True" } else { "False" };
            let since = previous
                .iter()
                .find(|c| c.type_ == type_ && c.status == status)
                .map_or(now, |c| c.last_transition_time.as_str());
            Condition {
                type_: type_.to_string(),
                status: status.to_string(),
                reason: reason.as_str().to_string(),
                message: message.clone(),
                last_transition_time: since.to_string(),
                observed_generation: generation,
            }
        })
        .collect()
}

/// The status after a reconcile: the conditions, and what the pass pinned, proposed and
/// verified. A pin or a verdict not renewed by this reconcile is kept from `previous`: the
/// last pin stays the last pin until another is made.
pub fn next(
    previous: &PinnedRepositoryStatus,
    outcome: &Outcome,
    generation: Option<i64>,
    now: &str,
    update: StatusUpdate,
) -> PinnedRepositoryStatus {
    let verdict = match outcome {
        Outcome::Done {
            verdict: Some(v), ..
        } => Some(VerdictSummary::clone(v)),
        _ => previous.verdict.clone(),
    };
    PinnedRepositoryStatus {
        observed_generation: generation,
        conditions: conditions(&previous.conditions, outcome, generation, now),
        last_pin: update.last_pin.or_else(|| previous.last_pin.clone()),
        pull_request: match outcome {
            // A pass that ran knows whether a pull request is open.
            Outcome::Done { .. } => update.pull_request,
            _ => previous.pull_request.clone(),
        },
        verdict,
        promotions: update
            .promotions
            .unwrap_or_else(|| previous.promotions.clone()),
        audit: update.audit.or_else(|| previous.audit.clone()),
    }
}

/// `next`, with the times of `previous` wherever what they date did not change: a pass that
/// finds everything as it was writes nothing (each write moves the object's
/// resourceVersion and wakes every watcher of it, fleet-wide at every interval).
pub fn keep_times(
    previous: &PinnedRepositoryStatus,
    mut next: PinnedRepositoryStatus,
) -> PinnedRepositoryStatus {
    fn keep(previous: Option<&VerdictSummary>, next: Option<&mut VerdictSummary>) {
        if let (Some(before), Some(now)) = (previous, next) {
            let same = VerdictSummary {
                time: before.time.clone(),
                ..now.clone()
            };
            if same == *before {
                now.time.clone_from(&before.time);
            }
        }
    }
    keep(previous.verdict.as_ref(), next.verdict.as_mut());
    if let (Some(before), Some(now)) = (&previous.last_pin, &mut next.last_pin) {
        if before.commit == now.commit && before.branch == now.branch {
            now.time.clone_from(&before.time);
        }
    }
    if let (Some(before), Some(now)) = (&previous.audit, &mut next.audit) {
        if before.commit == now.commit && before.workloads == now.workloads {
            now.time.clone_from(&before.time);
        }
    }
    for now in &mut next.promotions {
        let Some(before) = previous.promotions.iter().find(|p| p.stage == now.stage) else {
            continue;
        };
        keep(before.verdict.as_ref(), now.verdict.as_mut());
        let mut same = now.clone();
        same.time.clone_from(&before.time);
        if same == *before {
            now.time.clone_from(&before.time);
        }
    }
    next
}

/// What a pass changed that the status records besides its conditions.
#[derive(Debug, Clone, Default)]
pub struct StatusUpdate {
    pub last_pin: Option<super::crd::LastPin>,
    pub pull_request: Option<super::crd::PullRequestRef>,
    /// `status.promotions`, when the pass ran them; `None` keeps the last.
    pub promotions: Option<Vec<super::crd::PromotionStatus>>,
    /// The files the pass could not pin, one line each: the object is retried for them
    /// (`PartiallyPinned`), and what the pass did (pins, verdict, promotions) is recorded.
    pub failures: Option<String>,
    /// `status.audit`, when the pass audited; `None` keeps the last.
    pub audit: Option<super::crd::AuditStatus>,
}

/// The Event a change of `Ready` deserves, if any: a warning when it turns to a failure
/// reason, so a person sees it once and not on every retry.
pub fn transition_event(previous: &[Condition], next: &[Condition]) -> Option<(Reason, String)> {
    let ready = next.iter().find(|c| c.type_ == READY)?;
    if ready.status == "True" {
        return None;
    }
    let before = previous.iter().find(|c| c.type_ == READY);
    if before.is_some_and(|b| b.status == ready.status && b.reason == ready.reason) {
        return None;
    }
    let reason = [
        Reason::VerificationFailed,
        Reason::InvalidSpec,
        Reason::SecretNotFound,
        Reason::AuthFailed,
        Reason::PartiallyPinned,
        Reason::Unreachable,
        Reason::TimedOut,
        Reason::SecretNotLabelled,
        Reason::RepositoryTooLarge,
    ]
    .into_iter()
    .find(|r| r.as_str() == ready.reason)?;
    Some((reason, ready.message.clone()))
}

/// What a progressing verification waits for, as the `Ready` condition says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Awaiting {
    /// [`Reason::AwaitingSync`] while some pin is not applied, else [`Reason::Progressing`].
    pub reason: Reason,
    /// What is awaited, naming the first workload it is awaited on.
    pub what: String,
}

/// What a progressing check waits for, as the `Ready` condition says it: the GitOps tool
/// to apply the pins (some live template does not run them yet, or a workload is not created
/// yet, [`crate::verify::judge::grace`]), or the rollout. `None` unless the check progresses.
pub fn awaiting(check: &Check) -> Option<Awaiting> {
    if check.state != State::Progressing {
        return None;
    }
    let progressing: Vec<&Verdict> = check
        .verdicts
        .iter()
        .filter(|v| v.state == State::Progressing)
        .collect();
    let not_applied: Vec<&Verdict> = progressing
        .iter()
        .copied()
        .filter(|v| {
            v.condition(ConditionType::Synced)
                .is_none_or(|c| c.status != ConditionStatus::True)
        })
        .collect();
    let (reason, lead, awaited) = match not_applied.is_empty() {
        false => (
            Reason::AwaitingSync,
            "waiting for the GitOps tool to apply the pins",
            not_applied,
        ),
        true => (Reason::Progressing, "rolling out", progressing),
    };
    let what = match awaited.split_first() {
        Some((first, rest)) => {
            let more = match rest.len() {
                0 => String::new(),
                n => format!(" (and {n} more)"),
            };
            format!(
                "{lead}: {} ({}): {}{more}",
                first.workload, first.container, first.reason
            )
        }
        None => check.summary.clone(),
    };
    Some(Awaiting { reason, what })
}

/// Condition messages are read in `kubectl get`: the first lines of a long list are enough,
/// with how many more there are. The API server caps a message at 32768 bytes.
fn bounded(message: &str) -> String {
    const MAX_LINES: usize = 10;
    const MAX_BYTES: usize = 4096;
    let lines: Vec<&str> = message.lines().collect();
    let mut out = lines
        .iter()
        .take(MAX_LINES)
        .copied()
        .collect::<Vec<_>>()
        .join("\n");
    if lines.len() > MAX_LINES {
        out.push_str(&format!("\n(and {} more)", lines.len() - MAX_LINES));
    }
    if out.len() > MAX_BYTES {
        let mut end = MAX_BYTES;
        while !out.is_char_boundary(end) {
            end -= 1;
        }
        out.truncate(end);
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator::crd::LastPin;
    use crate::verify::judge::grace;
    use crate::verify::judge::verdict::Unchecked;

    fn done(pr: Option<u64>, verdict: Option<&str>) -> Outcome {
        Outcome::Done {
            message: "main pinned".into(),
            pull_request: pr,
            verdict: verdict.map(|state| {
                Box::new(VerdictSummary {
                    state: state.parse().unwrap(),
                    source: "commit abc".into(),
                    summary: "2 converged".into(),
                    converged: 2,
                    progressing: 0,
                    failed: 0,
                    unverified: 0,
                    time: "t".into(),
                })
            }),
            awaiting: None,
        }
    }

    fn get<'c>(conditions: &'c [Condition], type_: &str) -> Option<&'c Condition> {
        conditions.iter().find(|c| c.type_ == type_)
    }

    #[test]
    fn a_clean_pass_is_ready_with_no_abnormal_condition() {
        let c = conditions(&[], &done(None, None), Some(3), "t1");
        assert_eq!(c.len(), 1, "{c:?}");
        assert_eq!((c[0].type_.as_str(), c[0].status.as_str()), (READY, "True"));
        assert_eq!(c[0].reason, "Pinned");
        assert_eq!(c[0].observed_generation, Some(3));
    }

    #[test]
    fn ready_says_converged_only_when_verified_and_pull_request_when_one_is_open() {
        let reason = |o: Outcome| conditions(&[], &o, None, "t")[0].reason.clone();
        assert_eq!(reason(done(None, Some("converged"))), "Converged");
        assert_eq!(reason(done(Some(4), None)), "PullRequestOpen");
        assert_eq!(reason(done(None, Some("unverified"))), "Pinned");
        assert_eq!(
            reason(done(Some(4), Some("progressing"))),
            "PullRequestOpen"
        );
    }

    #[test]
    fn a_pass_that_finds_everything_as_it_was_keeps_the_status_byte_for_byte() {
        let at = |time: &str| {
            let Outcome::Done {
                verdict: Some(v), ..
            } = done(None, Some("converged"))
            else {
                unreachable!()
            };
            PinnedRepositoryStatus {
                observed_generation: Some(1),
                conditions: conditions(&[], &done(None, Some("converged")), Some(1), "t0"),
                last_pin: Some(LastPin {
                    commit: "abc".into(),
                    branch: "main".into(),
                    images: 1,
                    time: time.into(),
                }),
                pull_request: None,
                verdict: Some(VerdictSummary {
                    time: time.into(),
                    ..*v
                }),
                promotions: vec![super::super::crd::PromotionStatus {
                    stage: "production".into(),
                    from: "staging".into(),
                    gate: "open".into(),
                    message: "staging converged since t0".into(),
                    pull_request: None,
                    commit: None,
                    verdict: None,
                    time: time.into(),
                }],
                audit: Some(super::super::crd::AuditStatus {
                    commit: "abc".into(),
                    workloads: [("pinned".to_string(), 2), ("drift".to_string(), 0)].into(),
                    clean: true,
                    time: time.into(),
                }),
            }
        };
        let before = at("2026-11-27T10:00:00Z");
        assert_eq!(keep_times(&before, at("2026-11-27T10:05:00Z")), before);
        // A change is written with its new time.
        let mut moved = at("2026-11-27T10:05:00Z");
        moved.verdict.as_mut().unwrap().state = State::Failed;
        moved.promotions[0].gate = "refused".into();
        let audit = moved.audit.as_mut().unwrap();
        (audit.workloads, audit.clean) = ([("drift".to_string(), 1)].into(), false);
        let kept = keep_times(&before, moved);
        assert_eq!(kept.audit.unwrap().time, "2026-11-27T10:05:00Z");
        assert_eq!(kept.verdict.unwrap().time, "2026-11-27T10:05:00Z");
        assert_eq!(kept.promotions[0].time, "2026-11-27T10:05:00Z");
        assert_eq!(kept.last_pin.unwrap().time, "2026-11-27T10:00:00Z");
    }

    // What a verification found, read as the status reads it: real verdicts from the
    // verifier's own judge, over the verifier's sample workloads.

    use crate::verify::judge::gitops::{Findings, ObjectReport, Tool};
    use crate::verify::judge::samples::{
        deployment, deployment_with_pods, found, judge_default, old, on, pinned, waiting_pod,
        workload,
    };
    use crate::verify::judge::verdict::{self, Live};

    fn check_of(verdicts: Vec<Verdict>, gitops: Findings) -> Check {
        let (state, summary) = verdict::summarize(&verdicts, Unchecked::default());
        Check {
            state,
            summary,
            verdicts,
            gitops,
        }
    }

    /// The live template still has the old image: the GitOps tool has not applied the pin.
    fn not_applied() -> Verdict {
        let mut w = workload(deployment(1, 1, 1, 1));
        w.template_images = vec![("web".into(), "ghcr.io/acme/web:latest".into())];
        judge_default(found(
            w,
            vec![crate::verify::judge::samples::pod("web-0", &on(&old()))],
        ))
    }

    /// The check as the operator reports it: the grace applied while `young`, and what it
    /// awaits.
    fn settle(check: Check, unchecked: Unchecked, young: bool) -> (Check, Option<Awaiting>) {
        let check = match young {
            true => grace::not_created_yet(check, unchecked),
            false => check,
        };
        let awaiting = awaiting(&check);
        (check, awaiting)
    }

    fn settled(verdicts: Vec<Verdict>, young: bool) -> (Check, Option<Awaiting>) {
        settle(
            check_of(verdicts, Findings::default()),
            Unchecked::default(),
            young,
        )
    }

    fn outcome(check: &Check, awaiting: Option<Awaiting>) -> Outcome {
        Outcome::Done {
            message: "main pinned".into(),
            pull_request: None,
            verdict: Some(Box::new(VerdictSummary {
                state: check.state,
                source: "commit abc".into(),
                summary: check.summary.clone(),
                converged: 0,
                progressing: 0,
                failed: 0,
                unverified: 0,
                time: "t".into(),
            })),
            awaiting,
        }
    }

    #[test]
    fn a_pin_not_applied_yet_reconciles_awaiting_sync_naming_the_workload() {
        let (check, awaiting) = settled(vec![not_applied()], false);
        assert_eq!(check.state, State::Progressing);
        let awaiting = awaiting.unwrap();
        assert_eq!(awaiting.reason, Reason::AwaitingSync);
        let c = conditions(&[], &outcome(&check, Some(awaiting)), Some(1), "t");
        let ready = get(&c, READY).unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "AwaitingSync")
        );
        assert_eq!(
            ready.message,
            "main pinned; commit abc: waiting for the GitOps tool to apply the pins: \
             shop/Deployment/web (web): not synced yet: live template has ghcr.io/acme/web:latest"
        );
        assert_eq!(get(&c, RECONCILING).unwrap().reason, "AwaitingSync");
        assert!(get(&c, STALLED).is_none());
        assert_eq!(transition_event(&[], &c), None, "progress is not a warning");
    }

    #[test]
    fn a_rollout_under_way_reconciles_progressing() {
        // Applied; one of two pods still on the old digest.
        let live = deployment_with_pods(&[on(&pinned()), on(&old())]);
        let (check, awaiting) = settled(vec![judge_default(live)], false);
        let awaiting = awaiting.unwrap();
        assert_eq!(awaiting.reason, Reason::Progressing);
        assert!(
            awaiting
                .what
                .starts_with("rolling out: shop/Deployment/web (web): "),
            "{awaiting:?}"
        );
        let c = conditions(&[], &outcome(&check, Some(awaiting)), None, "t");
        assert_eq!(get(&c, RECONCILING).unwrap().reason, "Progressing");
        assert_eq!(get(&c, READY).unwrap().status, "False");
    }

    #[test]
    fn a_missing_workload_of_a_young_pin_is_awaited_and_of_an_old_one_failed() {
        let missing = judge_default(Live::Missing);
        assert_eq!(missing.state, State::Failed, "the verifier's own verdict");

        let (check, awaiting) = settled(vec![missing.clone(), not_applied()], true);
        assert_eq!(check.state, State::Progressing);
        assert_eq!(check.verdicts[0].state, State::Progressing);
        assert!(!check.summary.contains("failed"), "{}", check.summary);
        let awaiting = awaiting.unwrap();
        assert_eq!(awaiting.reason, Reason::AwaitingSync);
        assert_eq!(
            awaiting.what,
            "waiting for the GitOps tool to apply the pins: shop/Deployment/web (web): not \
             created yet: the workload does not exist in the cluster (and 1 more)"
        );

        let (check, awaiting) = settled(vec![missing], false);
        assert_eq!(check.state, State::Failed);
        assert_eq!(awaiting, None);
        let c = conditions(&[], &outcome(&check, awaiting), None, "t");
        assert_eq!(get(&c, STALLED).unwrap().reason, "VerificationFailed");
    }

    #[test]
    fn a_genuine_failure_stays_failed_even_beside_what_is_awaited() {
        // Applied, and the kubelet cannot pull the pinned image.
        let pulling = judge_default(found(
            workload(deployment(1, 1, 0, 0)),
            vec![waiting_pod("web-1", "ImagePullBackOff", "not found")],
        ));
        assert_eq!(pulling.state, State::Failed);
        let (check, awaiting) = settled(vec![pulling, judge_default(Live::Missing)], true);
        assert_eq!(check.state, State::Failed);
        assert_eq!(awaiting, None);
        let c = conditions(&[], &outcome(&check, awaiting), None, "t");
        assert_eq!(get(&c, READY).unwrap().reason, "VerificationFailed");
        assert!(get(&c, RECONCILING).is_none());
    }

    #[test]
    fn a_workload_missing_after_argo_cd_applied_the_pin_commit_is_failed_however_young() {
        let missing = judge_default(Live::Missing);
        let argo = ObjectReport {
            tool: Tool::ArgoCd,
            kind: "Application",
            namespace: "argocd".into(),
            name: "shop".into(),
            synced: true,
            revision: Some("abc".into()),
            pin_commit: "abc".into(),
            health: "Healthy".into(),
            health_message: None,
            workloads: vec![missing.workload.clone()],
            summary: "Argo CD Application argocd/shop: Synced to abc, Healthy".into(),
        };
        let findings = Findings {
            objects: vec![argo],
            not_verified: Vec::new(),
        };
        let (check, awaiting) = settle(
            check_of(vec![missing], findings),
            Unchecked::default(),
            true,
        );
        assert_eq!(check.state, State::Failed);
        assert_eq!(awaiting, None);
    }

    #[test]
    fn converged_and_unverified_are_left_as_the_verifier_said() {
        let live = deployment_with_pods(&[on(&pinned())]);
        let (check, awaiting) = settled(vec![judge_default(live)], true);
        assert_eq!((check.state, awaiting), (State::Converged, None));
        let (check, awaiting) = settle(
            check_of(Vec::new(), Findings::default()),
            Unchecked::default(),
            true,
        );
        assert_eq!((check.state, awaiting), (State::Unverified, None));
    }

    #[test]
    fn a_failed_verification_stalls_and_is_not_ready() {
        let c = conditions(&[], &done(None, Some("failed")), None, "t");
        assert_eq!(get(&c, READY).unwrap().status, "False");
        assert_eq!(get(&c, STALLED).unwrap().reason, "VerificationFailed");
        assert!(get(&c, RECONCILING).is_none());
    }

    #[test]
    fn an_invalid_spec_stalls_with_its_problems_and_a_transient_error_reconciles() {
        let stalled = Outcome::Stalled {
            reason: Reason::InvalidSpec,
            message: "spec.repository.url: is required".into(),
        };
        let c = conditions(&[], &stalled, Some(1), "t");
        assert_eq!(get(&c, READY).unwrap().status, "False");
        assert_eq!(
            get(&c, STALLED).unwrap().message,
            "spec.repository.url: is required"
        );
        assert!(get(&c, RECONCILING).is_none());

        let retrying = Outcome::Retrying {
            reason: Reason::Unreachable,
            message: "git: connection refused".into(),
        };
        let c = conditions(&[], &retrying, Some(1), "t");
        assert_eq!(get(&c, RECONCILING).unwrap().reason, "Unreachable");
        assert!(get(&c, STALLED).is_none());
    }

    #[test]
    fn the_transition_time_moves_only_when_the_status_does() {
        let first = conditions(&[], &done(None, None), None, "t1");
        let same = conditions(&first, &done(Some(2), None), None, "t2");
        assert_eq!(
            same[0].last_transition_time, "t1",
            "reason changed, status did not"
        );
        let failed = Outcome::Retrying {
            reason: Reason::Unreachable,
            message: "down".into(),
        };
        let down = conditions(&same, &failed, None, "t3");
        assert_eq!(get(&down, READY).unwrap().last_transition_time, "t3");
        assert_eq!(get(&down, RECONCILING).unwrap().last_transition_time, "t3");
        let still = conditions(&down, &failed, None, "t4");
        assert_eq!(get(&still, RECONCILING).unwrap().last_transition_time, "t3");
    }

    #[test]
    fn a_failure_is_announced_once_not_on_every_retry() {
        let failed = Outcome::Stalled {
            reason: Reason::SecretNotFound,
            message: "Secret git-creds not found".into(),
        };
        let first = conditions(&[], &failed, None, "t1");
        assert_eq!(
            transition_event(&[], &first).map(|(r, _)| r),
            Some(Reason::SecretNotFound)
        );
        let again = conditions(&first, &failed, None, "t2");
        assert_eq!(transition_event(&first, &again), None);
        let fixed = conditions(&again, &done(None, None), None, "t3");
        assert_eq!(transition_event(&again, &fixed), None);
    }

    #[test]
    fn the_last_pin_stays_until_another_is_made_and_a_merged_pull_request_is_forgotten() {
        let before = PinnedRepositoryStatus {
            last_pin: Some(super::super::crd::LastPin {
                commit: "abc".into(),
                branch: "main".into(),
                images: 1,
                time: "t0".into(),
            }),
            pull_request: Some(super::super::crd::PullRequestRef {
                number: 1,
                url: "u".into(),
                branch: "tagpin/main".into(),
            }),
            ..Default::default()
        };
        let after = next(
            &before,
            &done(None, None),
            Some(2),
            "t1",
            StatusUpdate::default(),
        );
        assert_eq!(after.last_pin, before.last_pin);
        assert_eq!(after.pull_request, None);
        assert_eq!(after.observed_generation, Some(2));
        let failed = Outcome::Retrying {
            reason: Reason::Unreachable,
            message: "down".into(),
        };
        let after = next(&before, &failed, Some(2), "t1", StatusUpdate::default());
        assert_eq!(after.pull_request, before.pull_request, "unknown, so kept");
    }

    #[test]
    fn a_long_message_is_cut_to_what_kubectl_shows_well() {
        let long: String = (0..30).map(|i| format!("problem {i}\n")).collect();
        let cut = bounded(&long);
        assert_eq!(cut.lines().count(), 11);
        assert!(cut.ends_with("(and 20 more)"), "{cut}");
        assert!(bounded(&"é".repeat(5000)).len() <= 4096 + '…'.len_utf8());
    }
}
