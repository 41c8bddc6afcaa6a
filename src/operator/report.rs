//! A cycle's report ([`crate::cycle::CycleReport`]) as the operator writes it: the object's
//! status update, its outcome (and so its conditions), when to come back, and the Events of
//! what was done.

use std::time::Duration;

use super::crd::{AuditStatus, LastPin, PinnedRepository, PullRequestRef, VerdictSummary};
use super::events::{timestamp, EventType, Events};
use super::promotion;
use super::status::{Outcome, Reason, StatusUpdate};
use super::verdicts;
use crate::config::{Config, WriteMode};
use crate::cycle::{CycleReport, Verification};
use crate::forge::{ChangeRequestNoun, ForgeError};
use crate::git::{GitError, Mirror};
use crate::inflight;
use crate::sync::{SyncError, SyncReport};
use crate::verify::judge::verdict::State;

/// What a pass hands back to the reconcile: the outcome, what changed, when to come back,
/// and the Events of what was done.
pub type Mapped = (Outcome, StatusUpdate, Duration, Events);

/// How soon an object is looked at again: `interval` between passes, `verify_interval` while
/// a verdict is still progressing.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub interval: Duration,
    pub verify_interval: Duration,
}

/// The report of one cycle over `object`'s repository, mapped.
pub fn map(
    object: &PinnedRepository,
    config: &Config,
    mirror: &Mirror,
    report: CycleReport<'_>,
    timing: Timing,
    mut events: Events,
) -> Mapped {
    let synced = match &report.sync {
        Ok(synced) => synced,
        Err(e) => {
            return (
                classify(e),
                StatusUpdate::default(),
                timing.interval,
                events,
            )
        }
    };
    let previous = object.status.as_ref();
    let noun = ChangeRequestNoun::of(config.forge.as_ref());
    let mut update = status_update(synced, noun, &mut events);
    if config.mode == WriteMode::Commit && update.last_pin.is_none() {
        let recorded = previous.and_then(|s| s.last_pin.as_ref());
        if let Some(pin) = pinned_before(mirror, &config.repository.branch, recorded) {
            events.push((
                EventType::Normal,
                "Pinned",
                format!(
                    "{} has {}: {} image(s) pinned",
                    pin.branch, pin.commit, pin.images
                ),
            ));
            update.last_pin = Some(pin);
        }
    }
    // A file that could not be pinned holds up neither the verification of what was pinned
    // nor the promotions, as in `tagpin run`; the object is retried for it all the same.
    update.failures = synced.has_failures().then(|| synced.failures.join("\n"));
    let empty = Verification {
        round: inflight::Report::default(),
        audit: None,
    };
    let verification = report.verification.as_ref().unwrap_or(&empty);
    update.audit = audit_status(config, verification);
    let previous_verdict = previous.and_then(|s| s.verdict.as_ref());
    let open = match config.mode {
        WriteMode::PullRequest => update.pull_request.as_ref().map(|pr| pr.number),
        WriteMode::Commit => None,
    };
    let tip = report.tip.as_ref().map(|t| t.sha.as_str());
    let round = &verification.round;
    log_round(config, round);
    events.extend(verdicts::revert_events(config, round));
    let time = timestamp();
    let now = (report.now, time.as_str());
    let reported = verdicts::reported(config, round, open, tip, previous_verdict, now);
    let (verdict, awaiting) = reported.verdict.map_or((None, None), |(v, a)| (Some(v), a));
    announce_failed(&verdict, &reported.others, previous_verdict, &mut events);
    let progressing = |v: &VerdictSummary| v.state == State::Progressing;
    let still =
        verdict.as_ref().is_some_and(progressing) || reported.others.iter().any(progressing);
    let mut requeue = match still {
        true => timing.verify_interval,
        false => timing.interval,
    };
    if let Some(done) = report.promotions {
        let pass = promotion::Pass {
            config,
            previous: previous.map_or(&[][..], |s| s.promotions.as_slice()),
            verdicts: &reported.promotions,
        };
        let promoted = promotion::statuses(pass, done, &mut events);
        requeue = promoted.requeue.map_or(requeue, |r| r.min(requeue));
        if promotion::rolling_out(&promoted.statuses) {
            requeue = requeue.min(timing.verify_interval);
        }
        update.promotions = Some(promoted.statuses);
    }
    let message = match &update.pull_request {
        Some(pr) => format!(
            "pins proposed in {} for {}",
            noun.name(pr.number),
            config.repository.branch
        ),
        None => format!("{} pinned", config.repository.branch),
    };
    let outcome = Outcome::Done {
        message,
        pull_request: update.pull_request.as_ref().map(|pr| pr.number),
        verdict: verdict.map(Box::new),
        awaiting,
    };
    (outcome, update, requeue, events)
}

/// What the round could not do, logged (the status says what it verified).
fn log_round(config: &Config, round: &inflight::Report<'_>) {
    let noun = ChangeRequestNoun::of(config.forge.as_ref());
    if let Some(e) = &round.list_error {
        tracing::warn!(
            "cannot list the {} change requests, none verified: {e}",
            config.repository.branch
        );
    }
    for (number, why) in &round.ignored {
        tracing::debug!("{} is not verified: {why}", noun.name(*number));
    }
}

/// `status.audit` from the cycle's audit: how many workloads have each finding. `None` keeps
/// the last (not due, or it could not be made).
fn audit_status(config: &Config, verification: &Verification<'_>) -> Option<AuditStatus> {
    let report = match &verification.audit {
        Some(Ok(report)) => report,
        Some(Err(e)) => {
            tracing::warn!("cannot audit {}: {e}", config.repository.branch);
            return None;
        }
        None => return None,
    };
    Some(AuditStatus {
        commit: report.commit.clone(),
        workloads: report
            .audit
            .workloads_with()
            .into_iter()
            .map(|(finding, n)| (finding.as_str().to_string(), n))
            .collect(),
        clean: report.clean(),
        time: timestamp(),
    })
}

/// A Failed verdict is announced once: one verified this round that the status does not
/// report always (it is final, verified once), the reported one when it was not already the
/// previous verdict.
fn announce_failed(
    verdict: &Option<VerdictSummary>,
    others: &[VerdictSummary],
    previous_verdict: Option<&VerdictSummary>,
    events: &mut Events,
) {
    for v in others.iter().filter(|v| v.state == State::Failed) {
        events.push((
            EventType::Warning,
            "VerificationFailed",
            format!("{}: {}", v.source, v.summary),
        ));
    }
    if let Some(v) = verdict.as_ref().filter(|v| v.state == State::Failed) {
        if previous_verdict.is_none_or(|p| p.source != v.source || p.state != v.state) {
            events.push((
                EventType::Warning,
                "VerificationFailed",
                format!("{}: {}", v.source, v.summary),
            ));
        }
    }
}

/// How far down a branch the last pin is looked for.
const PIN_HISTORY_DEPTH: usize = 100;

/// The last commit tagpin pinned on `branch`, read back from Git, when the status does not
/// record it: a controller (the leader before a failover) stopped between its push and its
/// status write, and this pass found nothing left to commit.
fn pinned_before(mirror: &Mirror, branch: &str, recorded: Option<&LastPin>) -> Option<LastPin> {
    let tip = mirror.tip(branch)?;
    let found = crate::git::off_runtime(|| mirror.last_own_commit(tip, PIN_HISTORY_DEPTH));
    let (commit, time, message) = match found {
        Ok(found) => found?,
        Err(e) => {
            tracing::warn!("{branch}: cannot read back the last pin: {e}");
            return None;
        }
    };
    let commit = commit.to_string();
    if recorded.is_some_and(|pin| pin.commit == commit) {
        return None;
    }
    Some(LastPin {
        commit,
        branch: branch.to_string(),
        images: u32::try_from(crate::proposal::message::count_pin_lines(&message))
            .unwrap_or(u32::MAX),
        time: crate::promote::gate::rfc3339(time),
    })
}

/// The last pin and open pull request a pass reports, and the Events of what it wrote.
fn status_update(
    report: &SyncReport,
    noun: ChangeRequestNoun,
    events: &mut Events,
) -> StatusUpdate {
    use crate::sync::Outcome as Done;
    let mut update = StatusUpdate::default();
    for group in &report.groups {
        let images = u32::try_from(group.changes.len()).unwrap_or(u32::MAX);
        match &group.outcome {
            Done::Committed { branch, commit, .. } => {
                events.push((
                    EventType::Normal,
                    "Pinned",
                    format!("pushed {commit} to {branch}: {images} image(s) pinned"),
                ));
                update.last_pin = Some(LastPin {
                    commit: commit.clone(),
                    branch: branch.clone(),
                    images,
                    time: timestamp(),
                });
            }
            Done::PullRequestOpened {
                number,
                url,
                branch,
            }
            | Done::PullRequestUpdated {
                number,
                url,
                branch,
            }
            | Done::PullRequestUnchanged {
                number,
                url,
                branch,
            } => {
                if matches!(group.outcome, Done::PullRequestOpened { .. }) {
                    events.push((
                        EventType::Normal,
                        "PullRequestOpened",
                        format!("opened {} from {branch}: {url}", noun.name(*number)),
                    ));
                }
                // With one pull request per image, the status names the first; each is on
                // the forge with its own verdict.
                update.pull_request.get_or_insert(PullRequestRef {
                    number: *number,
                    url: url.clone(),
                    branch: branch.clone(),
                });
            }
            _ => {}
        }
    }
    update
}

/// A pass that could not run, as the status says it: refused credentials and missing
/// secrets need a person; the rest may pass by itself.
pub fn classify(error: &SyncError) -> Outcome {
    let message = error.to_string();
    let reason = match error {
        SyncError::Git(GitError::Auth { .. }) => Reason::AuthFailed,
        SyncError::Git(GitError::TooLarge { .. }) => Reason::RepositoryTooLarge,
        SyncError::Git(GitError::FetchDeadline { .. }) => {
            return Outcome::Retrying {
                reason: Reason::TimedOut,
                message,
            }
        }
        SyncError::Forge(ForgeError::Call {
            status: Some(401 | 403),
            ..
        }) => Reason::AuthFailed,
        SyncError::Secret { .. } => Reason::SecretNotFound,
        SyncError::Filter(_) | SyncError::Policy(_) | SyncError::Gates(_) | SyncError::NoForge => {
            Reason::InvalidSpec
        }
        _ => {
            return Outcome::Retrying {
                reason: Reason::Unreachable,
                message,
            }
        }
    };
    Outcome::Stalled { reason, message }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_credentials_and_missing_secrets_stall_and_an_unreachable_remote_retries() {
        let auth = SyncError::Git(GitError::Auth {
            url: "https://git.example/a.git".into(),
            message: "401".into(),
        });
        assert!(matches!(
            classify(&auth),
            Outcome::Stalled {
                reason: Reason::AuthFailed,
                ..
            }
        ));
        let down = SyncError::Git(GitError::Fetch {
            url: "https://git.example/a.git".into(),
            message: "connection refused".into(),
        });
        assert!(matches!(
            classify(&down),
            Outcome::Retrying {
                reason: Reason::Unreachable,
                ..
            }
        ));
    }

    #[test]
    fn an_image_gate_entry_that_does_not_compile_stalls_as_an_invalid_spec() {
        let entry = [("registry.example/[app", std::time::Duration::from_secs(60))];
        let error = crate::age::MinimumAges::compile(entry).unwrap_err();
        let outcome = classify(&SyncError::Gates(error.into()));
        let Outcome::Stalled { reason, message } = outcome else {
            panic!("{outcome:?}");
        };
        assert_eq!(reason, Reason::InvalidSpec);
        assert!(
            message.starts_with("configuration: images.minimum_age[0].match"),
            "{message}"
        );
    }
}
