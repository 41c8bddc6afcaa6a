//! `tagpin run`'s verification between passes: one [`Round`] of what is in flight, mapped to
//! its logs and metrics. What is known final lives in this process only (lost on restart: one
//! status read per change request rebuilds it).

use std::sync::Mutex;

use crate::clock::Clock;
use crate::inflight::{self, Memory, Round, Unverifiable, Verified};
use crate::metrics::{self, ErrorLabels, Metrics, VerdictLabels};
use crate::mutex::lock;
use crate::verify::{Families, VerifyError};

/// What `tagpin run` verifies between passes, and what it found final.
pub struct InFlight<'a> {
    pub round: Round<'a>,
    pub memory: Mutex<Memory>,
    /// The time compared with merge and commit times.
    pub clock: Clock,
    /// The tip last audited, and when: the same tip is audited again once per pass interval,
    /// not at every verification round (each audit reads the tree and lists the namespaces).
    pub audited: Mutex<Option<(git2::Oid, tokio::time::Instant)>>,
}

impl InFlight<'_> {
    /// One verification round: every item in flight, each on its cluster, counted and logged.
    pub(crate) async fn verify(&self, families: &mut Families, metrics: &Metrics) {
        let config = self.round.config;
        let tip = inflight::tip(self.round.mirror, &config.repository.branch, None);
        let tip_commit = tip.as_ref().and_then(|t| git2::Oid::from_str(&t.sha).ok());
        let report = self
            .round
            .run(&self.memory, tip, (self.clock)(), families)
            .await;
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
        self.audit(tip_commit, families, metrics).await;
    }

    /// Audits the tip on the cluster sync's pins are verified on, and sets
    /// `tagpin_audit_workloads`. An audit that cannot be made leaves the gauge as it was (the
    /// warning says why).
    async fn audit(&self, tip: Option<git2::Oid>, families: &mut Families, metrics: &Metrics) {
        let (Some(cluster), Some(tip)) = (self.round.cluster, tip) else {
            return;
        };
        let round = &self.round;
        let now = tokio::time::Instant::now();
        let fresh = |(at, when): (git2::Oid, tokio::time::Instant)| {
            at == tip && now.duration_since(when) < round.grace
        };
        if lock(&self.audited).is_some_and(fresh) {
            return;
        }
        let clients = (cluster, round.registry);
        match crate::audit::at(tip, round.config, round.mirror, clients, families, None).await {
            Ok(report) => {
                *lock(&self.audited) = Some((tip, now));
                metrics.set_audit(&report.audit.workloads_with());
                if !report.clean() {
                    tracing::info!(
                        "audit of {}: drift, mixed digests or something unread (tagpin audit says which)",
                        report.branch
                    );
                }
            }
            Err(e) => tracing::warn!("cannot audit {}: {e}", round.config.repository.branch),
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
