//! `tagpin run`'s verification, the cycle's verification step or the round between passes,
//! mapped to its logs and metrics (counted as the operator counts them, in `cycle::counts`). What is known final lives in the cycle's state, in this
//! process only (lost on restart: one status read per change request rebuilds it).

use crate::config::Config;
use crate::cycle::Verification;
use crate::inflight::Verified;
use crate::metrics::Metrics;

/// One verification round: every item in flight, each on its cluster, counted
/// ([`crate::cycle::counts::round`]) and logged, and the audit of the branch's tip.
pub(crate) fn record(config: &Config, verification: &Verification<'_>, metrics: &Metrics) {
    let report = &verification.round;
    crate::cycle::counts::round(metrics, report);
    let noun = crate::forge::ChangeRequestNoun::of(config.forge.as_ref());
    if let Some(e) = &report.list_error {
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
        match verified {
            Ok(Verified {
                check: Some(check), ..
            }) => tracing::info!("{label}: {}", check.summary),
            Ok(Verified { check: None, .. }) => {}
            Err(e) => tracing::warn!("cannot verify {label}: {e}"),
        }
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
