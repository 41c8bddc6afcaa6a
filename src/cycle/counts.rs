//! The cycle's report as the counters every driver serves on `/metrics`: passes and their
//! durations, commits and change requests, the image gates' checks, the last pass without
//! failures, and the verdicts of the verification round. `tagpin run` also logs the report;
//! the operator writes it to each object's status. Both count it here, the same way.

use std::time::Duration;

use crate::inflight::{self, Unverifiable, Verified};
use crate::metrics::{self, ActionLabels, ErrorLabels, Metrics, PassLabels, VerdictLabels};
use crate::sync::{Outcome, SyncError, SyncReport};
use crate::verify::VerifyError;

/// What woke the pass, as the `trigger` label says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// The interval (or a verification between passes).
    Schedule,
    /// A registry or forge webhook.
    Webhook,
}

/// Counts the cycle's sync step: the pass (by outcome and trigger), its time and its
/// resolution's, its gate checks, what it committed or proposed, and the time of the last pass
/// without failures.
pub(crate) fn sync(
    metrics: &Metrics,
    trigger: Trigger,
    elapsed: Duration,
    result: &Result<SyncReport, SyncError>,
) {
    metrics.pass_seconds.observe(elapsed.as_secs_f64());
    let outcome = match result {
        Ok(report) if report.has_failures() => "partial",
        Ok(_) => "ok",
        Err(_) => "error",
    };
    let trigger = match trigger {
        Trigger::Schedule => "schedule",
        Trigger::Webhook => "webhook",
    };
    metrics::inc(
        &metrics.passes,
        PassLabels {
            outcome: outcome.to_string(),
            trigger: trigger.to_string(),
        },
    );
    let Ok(report) = result else {
        return;
    };
    metrics
        .resolve_seconds
        .observe(report.resolve_time.as_secs_f64());
    metrics.observe_signature_checks(&report.signature_checks);
    metrics.observe_age_checks(&report.age_checks);
    metrics.observe_provenance_checks(&report.provenance_checks);
    let pull_request = |action: &str| {
        let action = action.to_string();
        metrics::inc(&metrics.pull_requests, ActionLabels { action });
    };
    for group in &report.groups {
        match &group.outcome {
            Outcome::Committed { .. } => {
                metrics.commits.inc();
            }
            Outcome::PullRequestOpened { .. } => pull_request("opened"),
            Outcome::PullRequestUpdated { .. } => pull_request("updated"),
            _ => {}
        }
    }
    if !report.has_failures() {
        metrics.last_success.set(crate::clock::unix_now());
    }
}

/// Counts a verification round: each verdict by its source, and each item that could not be
/// verified by the kind of its cause.
pub(crate) fn round(metrics: &Metrics, report: &inflight::Report<'_>) {
    if report.list_error.is_some() {
        count_error(metrics, "forge");
    }
    for (item, verified) in &report.verified {
        match verified {
            Ok(Verified {
                check: Some(check), ..
            }) => metrics::inc(
                &metrics.verdicts,
                VerdictLabels {
                    verdict: check.state.as_str().to_string(),
                    source: item.origin().to_string(),
                },
            ),
            Ok(Verified { check: None, .. }) => {}
            Err(e) => count_error(metrics, error_kind(e)),
        }
    }
}

/// The bounded metric label for a verification that could not be made.
fn error_kind(e: &Unverifiable) -> &'static str {
    match e {
        Unverifiable::Status(_) => "forge",
        Unverifiable::NoCluster(_) => "configuration",
        Unverifiable::Verify(e) => match e {
            VerifyError::Forge(_) => "forge",
            VerifyError::Git(_) => "git",
            VerifyError::Live(_) => "kubernetes",
            VerifyError::Filter(_) | VerifyError::NoForge | VerifyError::MissingPath { .. } => {
                "configuration"
            }
            VerifyError::NoPlanBlock(_) => "no_plan_block",
            VerifyError::FromFork { .. } => "fork",
        },
    }
}

fn count_error(metrics: &Metrics, kind: &str) {
    metrics::inc(
        &metrics.verification_errors,
        ErrorLabels {
            kind: kind.to_string(),
        },
    );
}
