//! `tagpin run`'s verification, the cycle's verification step or the round between passes,
//! mapped to its logs and metrics. What is known final lives in the cycle's state, in this
//! process only (lost on restart: one status read per change request rebuilds it).

use crate::config::Config;
use crate::cycle::Verification;
use crate::inflight::{Unverifiable, Verified};
use crate::metrics::{self, ErrorLabels, Metrics, VerdictLabels};
use crate::verify::VerifyError;

/// One verification round: every item in flight, each on its cluster, counted and logged,
/// and the audit of the branch's tip.
pub(crate) fn record(config: &Config, verification: &Verification<'_>, metrics: &Metrics) {
    let report = &verification.round;
    let noun = crate::forge::ChangeRequestNoun::of(config.forge.as_ref());
    if let Some(e) = &report.list_error {
        count_error(metrics, "forge");
        tracing::warn!("cannot list tagpin change requests, none verified this round: {e}");
    }
    for (number, why) in &report.ignored {
        tracing::warn!("{} is not verified: {why}", noun.name(*number));
    }
    for (item, verified) in &report.verified {
        let label = item.label(noun);
        if let Ok(Verified {
            revert: Some(revert),
            ..
        }) = verified
        {
            match revert {
                Ok(done) => tracing::warn!("{label}: {}", crate::revert::describe(done, noun)),
                Err(e) => {
                    tracing::warn!("{label}: cannot revert now, tried again next round: {e}")
                }
            }
        }
        let check = match verified {
            Ok(Verified {
                check: Some(check), ..
            }) => check,
            Ok(Verified { check: None, .. }) => continue,
            Err(e) => {
                count_error(metrics, error_kind(e));
                tracing::warn!("cannot verify {label}: {e}");
                continue;
            }
        };
        metrics::inc(
            &metrics.verdicts,
            VerdictLabels {
                verdict: check.state.as_str().to_string(),
                source: item.origin().to_string(),
            },
        );
        tracing::info!("{label}: {}", check.summary);
    }
    match &verification.audit {
        Some(Ok(report)) => {
            metrics.set_audit(&report.audit.workloads_with());
            if !report.clean() {
                tracing::info!(
                    "audit of {}: drift, mixed digests or something unread (tagpin audit says which)",
                    report.branch
                );
            }
        }
        // An audit that cannot be made leaves the gauge as it was.
        Some(Err(e)) => tracing::warn!("cannot audit {}: {e}", config.repository.branch),
        None => {}
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
