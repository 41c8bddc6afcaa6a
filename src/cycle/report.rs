//! What one cycle did, step by step: each driver maps it to its own outputs (`tagpin run`:
//! logs and metrics; the operator: status, conditions and Events).

use crate::audit::{AuditError, AuditReport};
use crate::inflight::{self, Tip};
use crate::promote::round::StagePromotion;
use crate::sync::{Outcome, SyncError, SyncReport};

/// The steps of a cycle, in their one order; a driver is told after each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Synced,
    Verified,
    Promoted,
}

/// What one cycle over a repository found.
pub struct CycleReport<'c> {
    /// When the cycle judged (Unix seconds, by the driver's clock).
    pub now: i64,
    /// Sync's report, or why it could not run: then nothing else ran.
    pub sync: Result<SyncReport, SyncError>,
    /// Commit mode: the commit verified as the branch's tip (the one this pass pushed, else
    /// the tip). `None` in pull-request mode.
    pub tip: Option<Tip>,
    /// The verification of what is in flight, and the audit; `None` when there is no cluster
    /// to verify on (pins only), or the cycle stopped before.
    pub verification: Option<Verification<'c>>,
    /// Each promotion's outcome; `None` without promotion, or when the cycle stopped before.
    pub promotions: Option<Vec<StagePromotion<'c>>>,
    /// The driver asked the cycle to stop after a step (a stop signal).
    pub stopped: bool,
}

/// One verification round and the audit of the branch's tip.
pub struct Verification<'c> {
    pub round: inflight::Report<'c>,
    /// `None`: not due (the tip did not move within the interval), or nothing to audit.
    pub audit: Option<Result<AuditReport, AuditError>>,
}

impl CycleReport<'_> {
    /// Sync's report, when it ran.
    pub fn synced(&self) -> Option<&SyncReport> {
        self.sync.as_ref().ok()
    }
}

/// The commit a commit-mode pass pushed, if it pushed one.
pub fn pushed(report: &SyncReport) -> Option<String> {
    report.groups.iter().find_map(|group| match &group.outcome {
        Outcome::Committed { commit, .. } => Some(commit.clone()),
        _ => None,
    })
}
