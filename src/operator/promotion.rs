//! Promotion stages in a `PinnedRepository`: the same promotion `tagpin run` makes from a file
//! configuration (the promotion step of [`crate::cycle`]), with each stage's cluster reached
//! as a resource may name one, and its outcome written to `status.promotions` and as Events.
//!
//! A resource cannot point at the controller's filesystem: a stage's cluster is the
//! controller's own (`in_cluster: true`, or no `cluster`) or a kubeconfig held in a Secret of
//! the object's namespace (`kubeconfig_secret_ref`), written under the object's own cache
//! directory, readable by the controller's user only, and read from there as a file
//! configuration's kubeconfig is.
//!
//! A stage whose promotion cannot run (its source cluster does not answer, the forge is down)
//! is skipped with a Warning and retried with backoff; sync and the other stages go on.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;

use super::crd::{PromotionStatus, PullRequestRef};
use super::events::{timestamp, EventType, Events};
use super::secrets;
use super::status::{Outcome, Reason};
use crate::cluster::{self_contained, Cluster};
use crate::config::{ClusterTarget, Config, Stage};
use crate::cycle::{self, ClusterSetupError, Clusters, Own, Reach};
use crate::forge::ChangeRequestNoun;
use crate::promote::round::StagePromotion;
use crate::promote::{Gate, PromoteReport};
use crate::sync;
use crate::verify::judge::verdict::State;

/// The kubeconfig of each stage whose `cluster` is a `kubeconfig_secret_ref`, by stage name.
pub struct Kubeconfigs(BTreeMap<String, StageKubeconfig>);

/// A kubeconfig read from a Secret, with what names it in errors.
pub struct StageKubeconfig {
    /// `spec.promotion.stages[1].cluster.kubeconfig_secret_ref`.
    field: String,
    /// `namespace/name` of the Secret, and its key.
    secret: String,
    key: String,
    bytes: Vec<u8>,
}

/// Reads the kubeconfig Secret of every stage that names one, now: a rotated kubeconfig is
/// used by the next reconcile. A missing Secret or key stalls the object, naming both.
pub async fn read_kubeconfigs(
    kube: &kube::Client,
    namespace: &str,
    config: &Config,
) -> Result<Kubeconfigs, Outcome> {
    let api: Api<Secret> = Api::namespaced(kube.clone(), namespace);
    let mut found = BTreeMap::new();
    for (i, stage) in config.promotion.iter().flat_map(|p| &p.stages).enumerate() {
        let ClusterTarget::KubeconfigSecret { name, key } = &stage.cluster else {
            continue;
        };
        let field = format!("spec.promotion.stages[{i}].cluster.kubeconfig_secret_ref");
        let (_, data, _) = secrets::fetch(&api, namespace, name)
            .await
            .map_err(|outcome| named(outcome, &field))?;
        let bytes = data.get(key).cloned().ok_or_else(|| Outcome::Stalled {
            reason: Reason::SecretNotFound,
            message: format!("{field}: Secret {namespace}/{name} has no key {key:?}"),
        })?;
        found.insert(
            stage.name.clone(),
            StageKubeconfig {
                field,
                secret: format!("{namespace}/{name}"),
                key: key.clone(),
                bytes,
            },
        );
    }
    Ok(Kubeconfigs(found))
}

/// `outcome` with its message prefixed by the field that named the Secret.
fn named(outcome: Outcome, field: &str) -> Outcome {
    match outcome {
        Outcome::Stalled { reason, message } => Outcome::Stalled {
            reason,
            message: format!("{field}: {message}"),
        },
        Outcome::Retrying { reason, message } => Outcome::Retrying {
            reason,
            message: format!("{field}: {message}"),
        },
        done => done,
    }
}

/// Each stage's cluster, by name, and the one sync's pins are verified on (set up by
/// [`crate::cycle::clusters`]): the controller's own (`own`) for `in_cluster` and for a
/// stage that names none, else the kubeconfig of its Secret. A stage on the controller's
/// cluster when it has none is left out: its promotions are skipped, and say why. A Secret
/// that does not hold a usable kubeconfig stalls the object.
pub async fn clusters(
    config: &Config,
    kubeconfigs: &Kubeconfigs,
    own: Option<&Cluster>,
    dir: &Path,
    timeout: Duration,
) -> Result<Clusters, Outcome> {
    let mut paths = BTreeMap::new();
    for (stage, kubeconfig) in &kubeconfigs.0 {
        if let Err(why) = self_contained(&kubeconfig.bytes) {
            return Err(Outcome::Stalled {
                reason: Reason::InvalidSpec,
                message: format!(
                    "{}: key {:?} of Secret {}: {why}",
                    kubeconfig.field, kubeconfig.key, kubeconfig.secret
                ),
            });
        }
        let path = dir.join("kubeconfigs").join(stage);
        secrets::write_private(&path, &kubeconfig.bytes).map_err(|e| Outcome::Retrying {
            reason: Reason::Unreachable,
            message: format!("{}: {e}", path.display()),
        })?;
        paths.insert(stage.clone(), path);
    }
    let reach = |stage: &Stage| match (paths.get(&stage.name), own) {
        (Some(path), _) => Reach::Connect(ClusterTarget::Kubeconfig {
            path: path.clone(),
            context: None,
        }),
        (None, Some(own)) => Reach::Given(own),
        (None, None) => Reach::Absent,
    };
    let clusters = cycle::clusters::set_up(config, reach, Own::Given(own), timeout).await;
    match clusters.problems.first() {
        None => Ok(clusters),
        Some(problem) => Err(unusable(kubeconfigs, problem)),
    }
}

/// A stage's kubeconfig that could not be connected with, as the object's stalled status
/// says it: the field, the Secret and its key, and the cause.
fn unusable(kubeconfigs: &Kubeconfigs, problem: &ClusterSetupError) -> Outcome {
    let kubeconfig = problem.stage().and_then(|stage| kubeconfigs.0.get(stage));
    let message = match (kubeconfig, problem) {
        (Some(k), ClusterSetupError::Stage { source, .. }) => format!(
            "{}: key {:?} of Secret {} is not a usable kubeconfig: {source}",
            k.field, k.key, k.secret
        ),
        _ => problem.to_string(),
    };
    Outcome::Stalled {
        reason: Reason::InvalidSpec,
        message,
    }
}

/// What one pass of promotions found.
pub struct Promoted {
    /// `status.promotions`: one entry per stage promoted into.
    pub statuses: Vec<PromotionStatus>,
    /// How soon the next pass should look: the end of a soak, when one runs.
    pub requeue: Option<Duration>,
}

/// What the status of a pass of promotions is made of, borrowed from the reconcile.
pub struct Pass<'a> {
    pub config: &'a Config,
    /// `status.promotions` as the last reconcile left it.
    pub previous: &'a [PromotionStatus],
    /// Each stage's last merged promotion's verdict, verified in this pass's round.
    pub verdicts: &'a BTreeMap<String, super::crd::VerdictSummary>,
}

/// `status.promotions` from what the cycle's promotion step found (`done`, one per stage
/// after the first), with each stage's last merged promotion's verdict, verified in the
/// cycle's round on that stage's cluster. The Events of what changed are added to `events`.
pub fn statuses(pass: Pass<'_>, done: Vec<StagePromotion<'_>>, events: &mut Events) -> Promoted {
    let now = timestamp();
    let noun = ChangeRequestNoun::of(pass.config.forge.as_ref());
    let mut promoted = Promoted {
        statuses: Vec::new(),
        requeue: None,
    };
    for StagePromotion {
        source,
        target,
        result,
    } in done
    {
        let previous = pass.previous.iter().find(|p| p.stage == target.name);
        let found = match &result {
            Some(Ok(report)) => Found::Report(report),
            Some(Err(e)) => Found::Failed(e.to_string()),
            None => Found::Failed(format!(
                "stage {}: no cluster to verify it on (the operator runs without one)",
                source.name
            )),
        };
        let mut entry = entry(&source.name, &target.name, &found, previous, &now);
        events.extend(stage_events(previous, &entry, &found, noun));
        if let Some(Ok(PromoteReport {
            gate: Gate::Soaking {
                remaining_seconds, ..
            },
            ..
        })) = &result
        {
            let end = Duration::from_secs(remaining_seconds.saturating_add(1));
            promoted.requeue = Some(promoted.requeue.map_or(end, |r| r.min(end)));
        }
        // Its last merged promotion, verified in this pass's round on the stage's cluster.
        if let Some(verdict) = pass.verdicts.get(&target.name) {
            let settled = previous.and_then(|p| p.verdict.as_ref());
            if verdict.state == State::Failed && settled.is_none_or(|s| s != verdict) {
                events.push((
                    EventType::Warning,
                    "VerificationFailed",
                    format!("{} on {}: {}", verdict.source, target.name, verdict.summary),
                ));
            }
            entry.verdict = Some(verdict.clone());
        }
        promoted.statuses.push(kept_time(entry, previous));
    }
    promoted
}

/// Whether a merged promotion is still rolling out on its stage: checked again at the
/// verification interval, as sync's pins are.
pub fn rolling_out(statuses: &[PromotionStatus]) -> bool {
    statuses.iter().any(|s| {
        s.verdict
            .as_ref()
            .is_some_and(|v| v.state == State::Progressing)
    })
}

/// What a pass found for one stage.
pub enum Found<'r> {
    Report(&'r PromoteReport),
    /// The promotion could not run: why, naming the stage, host or object.
    Failed(String),
}

/// The gate of a promotion that could not run.
pub const UNREACHABLE: &str = "unreachable";

fn gate_name(gate: &Gate) -> &'static str {
    match gate {
        Gate::Open { .. } => "open",
        Gate::Soaking { .. } => "soaking",
        Gate::Waiting { .. } => "waiting",
        Gate::Refused { .. } => "refused",
    }
}

/// The status entry of the promotion from `from` into `stage`. What a pass that could not run
/// does not know (the open pull request, the last verdict) is kept from `previous`.
pub fn entry(
    from: &str,
    stage: &str,
    found: &Found<'_>,
    previous: Option<&PromotionStatus>,
    now: &str,
) -> PromotionStatus {
    let kept = |f: fn(&PromotionStatus) -> Option<String>| previous.and_then(f);
    let verdict = previous.and_then(|p| p.verdict.clone());
    let report = match found {
        Found::Report(report) => report,
        Found::Failed(why) => {
            return PromotionStatus {
                stage: stage.to_string(),
                from: from.to_string(),
                gate: UNREACHABLE.to_string(),
                message: why.clone(),
                pull_request: previous.and_then(|p| p.pull_request.clone()),
                commit: kept(|p| p.commit.clone()),
                verdict,
                time: now.to_string(),
            }
        }
    };
    let mut message = report.reason.clone();
    if let Some(first) = report.failures.first() {
        message.push_str(&format!(
            "; nothing written: {} problem(s), the first: {first}",
            report.failures.len()
        ));
    }
    let (pull_request, commit) = match &report.outcome {
        Some(
            sync::Outcome::PullRequestOpened {
                number,
                url,
                branch,
            }
            | sync::Outcome::PullRequestUpdated {
                number,
                url,
                branch,
            }
            | sync::Outcome::PullRequestUnchanged {
                number,
                url,
                branch,
            }
            | sync::Outcome::EditedByHand {
                number,
                url,
                branch,
                ..
            },
        ) => (
            Some(PullRequestRef {
                number: *number,
                url: url.clone(),
                branch: branch.clone(),
            }),
            None,
        ),
        Some(sync::Outcome::Committed { commit, .. }) => (None, Some(commit.clone())),
        // Nothing was written now: the last promotion commit stays the last.
        _ => (None, kept(|p| p.commit.clone())),
    };
    if let Some(sync::Outcome::EditedByHand { number, commit, .. }) = &report.outcome {
        message.push_str(&format!(
            "; #{number} ends with {commit}, a commit tagpin did not write: left alone until \
             it is closed or its branch reset"
        ));
    }
    PromotionStatus {
        stage: stage.to_string(),
        from: from.to_string(),
        gate: gate_name(&report.gate).to_string(),
        message,
        pull_request,
        commit,
        verdict,
        time: now.to_string(),
    }
}

/// `entry` with the time of `previous` when nothing else changed: the time says when the
/// entry last changed, so a pass that finds the same writes no status.
pub fn kept_time(entry: PromotionStatus, previous: Option<&PromotionStatus>) -> PromotionStatus {
    match previous {
        Some(p)
            if p.time != entry.time
                && *p
                    == (PromotionStatus {
                        time: p.time.clone(),
                        ..entry.clone()
                    }) =>
        {
            p.clone()
        }
        _ => entry,
    }
}

/// The Events of one stage's pass: what was written, and why nothing could be, announced
/// when it changes rather than on every pass.
pub fn stage_events(
    previous: Option<&PromotionStatus>,
    next: &PromotionStatus,
    found: &Found<'_>,
    noun: ChangeRequestNoun,
) -> Events {
    let mut events = Events::new();
    let into = format!("{} into {}", next.from, next.stage);
    if let Found::Report(report) = found {
        match &report.outcome {
            Some(sync::Outcome::PullRequestOpened { number, url, .. }) => events.push((
                EventType::Normal,
                "PromotionOpened",
                format!(
                    "opened {} promoting {into}: {url}; {}",
                    noun.name(*number),
                    next.message
                ),
            )),
            Some(sync::Outcome::PullRequestUpdated { number, url, .. }) => events.push((
                EventType::Normal,
                "PromotionUpdated",
                format!(
                    "updated {} promoting {into}: {url}; {}",
                    noun.name(*number),
                    next.message
                ),
            )),
            Some(sync::Outcome::Committed { branch, commit, .. }) => events.push((
                EventType::Normal,
                "Promoted",
                format!(
                    "pushed {commit} to {branch} promoting {into}; {}",
                    next.message
                ),
            )),
            _ => {}
        }
    }
    let blocked = next.gate != "open" || next.message != found_reason(found);
    let changed = previous.is_none_or(|p| p.gate != next.gate || p.message != next.message);
    if blocked && changed {
        let type_ = match next.gate.as_str() {
            "waiting" | "soaking" => EventType::Normal,
            _ => EventType::Warning,
        };
        events.push((
            type_,
            "PromotionBlocked",
            format!("promotion {into}: {}", next.message),
        ));
    }
    events
}

/// The gate's sentence alone, without the problems the entry's message adds to it.
fn found_reason(found: &Found<'_>) -> String {
    match found {
        Found::Report(report) => report.reason.clone(),
        Found::Failed(why) => why.clone(),
    }
}

/// The promotions that could not run this pass, one line each; `None` when every one ran.
pub fn retry_message(statuses: &[PromotionStatus]) -> Option<String> {
    let lines: Vec<String> = statuses
        .iter()
        .filter(|s| s.gate == UNREACHABLE)
        .map(|s| format!("promotion {} into {}: {}", s.from, s.stage, s.message))
        .collect();
    (!lines.is_empty()).then(|| lines.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn previous(gate: &str, message: &str) -> PromotionStatus {
        PromotionStatus {
            stage: "production".into(),
            from: "staging".into(),
            gate: gate.into(),
            message: message.into(),
            pull_request: Some(PullRequestRef {
                number: 3,
                url: "https://github.example/acme/gitops/pull/3".into(),
                branch: "tagpin/promote/production".into(),
            }),
            commit: None,
            verdict: None,
            time: "t0".into(),
        }
    }

    #[test]
    fn a_promotion_that_could_not_run_keeps_what_is_known_and_is_retried() {
        let before = previous("open", "staging converged since 2026-11-25T08:00:00Z");
        let found = Found::Failed("stage staging: cannot reach its cluster".into());
        let next = entry("staging", "production", &found, Some(&before), "t1");
        assert_eq!(next.gate, UNREACHABLE);
        assert_eq!(
            next.pull_request, before.pull_request,
            "still open for all we know"
        );
        assert_eq!(next.time, "t1");
        let events = stage_events(Some(&before), &next, &found, ChangeRequestNoun::PullRequest);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].1, "PromotionBlocked");
        assert!(matches!(events[0].0, EventType::Warning));
        assert_eq!(
            retry_message(std::slice::from_ref(&next)).as_deref(),
            Some("promotion staging into production: stage staging: cannot reach its cluster")
        );
        let later = entry("staging", "production", &found, Some(&next), "t2");
        assert_eq!(
            kept_time(later, Some(&next)).time,
            "t1",
            "nothing changed since t1"
        );
        // The same problem on the next pass: no second Event.
        assert!(
            stage_events(Some(&next), &next, &found, ChangeRequestNoun::PullRequest).is_empty()
        );
        assert_eq!(retry_message(&[before]), None);
    }

    fn report(gate: Gate, reason: &str, outcome: Option<sync::Outcome>) -> PromoteReport {
        use crate::promote::SourceReport;
        PromoteReport {
            stage: "production".into(),
            source: SourceReport {
                stage: "staging".into(),
                commit: "0123456789abcdef0123456789abcdef01234567".into(),
                state: State::Converged,
                summary: "2 converged".into(),
                converged_since: None,
                digests: "f".into(),
            },
            gate,
            reason: reason.into(),
            outcome,
            noun: ChangeRequestNoun::PullRequest,
            changes: Vec::new(),
            held: Vec::new(),
            skipped: Vec::new(),
            failures: Vec::new(),
            diff: String::new(),
            skipped_text: Vec::new(),
        }
    }

    #[test]
    fn an_opened_promotion_is_in_the_status_with_its_pull_request_and_announced_once() {
        let opened = sync::Outcome::PullRequestOpened {
            number: 7,
            url: "https://github.example/acme/gitops/pull/7".into(),
            branch: "tagpin/promote/production".into(),
        };
        let reason = "staging converged since 2026-11-25T08:00:00Z";
        let report = report(Gate::Open { since: 0 }, reason, Some(opened));
        let found = Found::Report(&report);
        let next = entry("staging", "production", &found, None, "t1");
        assert_eq!(next.gate, "open");
        assert_eq!(next.message, reason);
        assert_eq!(next.pull_request.as_ref().map(|p| p.number), Some(7));
        assert_eq!(next.commit, None);
        let events = stage_events(None, &next, &found, ChangeRequestNoun::PullRequest);
        let reasons: Vec<&str> = events.iter().map(|e| e.1).collect();
        assert_eq!(reasons, ["PromotionOpened"]);
        assert!(events[0].2.starts_with("opened pull request #7 promoting staging into production: https://github.example/acme/gitops/pull/7"), "{}", events[0].2);

        // The next pass finds it unchanged: no Event.
        let unchanged = sync::Outcome::PullRequestUnchanged {
            number: 7,
            url: "https://github.example/acme/gitops/pull/7".into(),
            branch: "tagpin/promote/production".into(),
        };
        let report = super::tests::report(Gate::Open { since: 0 }, reason, Some(unchanged));
        let found = Found::Report(&report);
        let again = entry("staging", "production", &found, Some(&next), "t2");
        assert_eq!(again.pull_request, next.pull_request);
        assert!(
            stage_events(Some(&next), &again, &found, ChangeRequestNoun::PullRequest).is_empty()
        );
        assert_eq!(retry_message(&[again]), None);
    }

    #[test]
    fn a_closed_gate_says_why_with_no_pull_request_and_is_announced_when_it_changes() {
        let reason = "staging is not converged yet: 1 progressing (web: 1 of 2 pods updated)";
        let waiting = Gate::Waiting {
            reason: "1 progressing (web: 1 of 2 pods updated)".into(),
        };
        let report = report(waiting, reason, None);
        let found = Found::Report(&report);
        let next = entry("staging", "production", &found, None, "t1");
        assert_eq!(next.gate, "waiting");
        assert_eq!(next.message, reason);
        assert_eq!(next.pull_request, None);
        let events = stage_events(None, &next, &found, ChangeRequestNoun::PullRequest);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].1, "PromotionBlocked");
        assert!(matches!(events[0].0, EventType::Normal));
        assert_eq!(
            events[0].2,
            format!("promotion staging into production: {reason}")
        );
        assert!(
            stage_events(Some(&next), &next, &found, ChangeRequestNoun::PullRequest).is_empty()
        );

        // Manifests that cannot be read hold an open gate: blocked, and a warning.
        let mut unreadable =
            super::tests::report(Gate::Open { since: 0 }, "staging converged", None);
        unreadable.failures = vec!["envs/production/web.yaml:3: not YAML".into()];
        let found = Found::Report(&unreadable);
        let blocked = entry("staging", "production", &found, Some(&next), "t2");
        assert_eq!(
            blocked.message,
            "staging converged; nothing written: 1 problem(s), the first: envs/production/web.yaml:3: not YAML"
        );
        let events = stage_events(
            Some(&next),
            &blocked,
            &found,
            ChangeRequestNoun::PullRequest,
        );
        assert_eq!(events.len(), 1);
        assert!(matches!(events[0].0, EventType::Warning));
    }

    #[test]
    fn the_gate_names_are_the_ones_the_status_documents() {
        let names: Vec<&str> = [
            Gate::Open { since: 0 },
            Gate::Soaking {
                since: 0,
                remaining_seconds: 5,
                restarted: None,
            },
            Gate::Waiting {
                reason: "1 progressing".into(),
            },
            Gate::Refused {
                state: State::Failed,
                reason: "web crash-loops".into(),
            },
        ]
        .iter()
        .map(gate_name)
        .collect();
        assert_eq!(names, ["open", "soaking", "waiting", "refused"]);
    }
}
