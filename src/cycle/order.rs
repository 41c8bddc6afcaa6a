//! The one order of a cycle over a repository, for every driver: sync, then the verification
//! of what is in flight and the audit of the branch's tip, then the promotions, then the
//! report. Verification comes before promotion so that a promotion reads a branch that a
//! Failed verdict has already acted on (with `verify.on_failure: revert`, the revert lands
//! before a stage's digests are carried on), and so that the report a driver maps carries
//! this pass's verdicts beside this pass's promotions.

use std::time::Duration;

use crate::clock::Clock;
use crate::config::{Config, WriteMode};
use crate::forge::ForgeClient;
use crate::inflight::{self, Round, Tip};
use crate::metrics::Metrics;
use crate::promote::round::Promotions;
use crate::registry::Client;
use crate::sync::{SyncOptions, Syncer};

use super::clusters::Clusters;
use super::report::{pushed, CycleReport, Step, Verification};
use super::state::RepoState;

/// Everything one repository's cycle works with, set up by its driver.
pub struct Cycle<'a> {
    pub config: &'a Config,
    pub syncer: &'a Syncer<'a>,
    pub registry: &'a Client,
    pub forge: Option<&'a ForgeClient>,
    pub clusters: &'a Clusters,
    /// `None` without promotion stages.
    pub promotions: Option<&'a Promotions<'a>>,
    /// For how long after a commit landed a workload it adds is awaited: the pass interval.
    pub grace: Duration,
    /// The time compared with merge and commit times.
    pub clock: Clock,
    pub metrics: &'a Metrics,
}

impl<'a> Cycle<'a> {
    /// One cycle: sync, verify and audit, promote. `go_on` is told after each step what the
    /// report holds so far, and stops the cycle there when it answers false (a stop signal).
    /// A sync that could not run ends the cycle: nothing is verified or promoted on a
    /// repository that could not be read.
    pub async fn run(
        &self,
        state: &mut RepoState,
        go_on: &mut dyn FnMut(Step, &CycleReport<'a>) -> bool,
    ) -> CycleReport<'a> {
        let options = SyncOptions::default();
        let sync = self.syncer.run_with(options, &mut state.answers).await;
        let mut report = CycleReport {
            now: (self.clock)(),
            tip: sync
                .as_ref()
                .ok()
                .and_then(|synced| self.tip(pushed(synced))),
            sync,
            verification: None,
            promotions: None,
            stopped: false,
        };
        let go = go_on(Step::Synced, &report);
        if report.sync.is_err() || !go {
            report.stopped = !go;
            return report;
        }
        // The branch's tip is audited in either mode (in commit mode, what the pass pushed).
        let audit_tip = report.tip.clone().or_else(|| self.branch_tip());
        let tips = (report.tip.clone(), audit_tip);
        // The pass fetched just now: the round reads the mirror as the pass left it.
        report.verification = self
            .verify_and_audit_after(state, tips, report.now, true)
            .await;
        if !go_on(Step::Verified, &report) {
            report.stopped = true;
            return report;
        }
        if let Some(promotions) = self.promotions {
            report.promotions = Some(promotions.run_each(self.metrics).await);
            report.stopped = !go_on(Step::Promoted, &report);
        }
        report
    }

    /// The verification step alone, as a driver also runs it between passes: one round of
    /// what is in flight (`tip`: the commit verified as the branch's tip in commit mode) and
    /// the audit of `audit_tip`, at `now`. `None` when there is no cluster to verify on.
    pub async fn verify_and_audit(
        &self,
        state: &mut RepoState,
        tips: (Option<Tip>, Option<Tip>),
        now: i64,
    ) -> Option<Verification<'a>> {
        self.verify_and_audit_after(state, tips, now, false).await
    }

    /// [`Cycle::verify_and_audit`]; `fresh`: the cycle's pass fetched the branch just before.
    async fn verify_and_audit_after(
        &self,
        state: &mut RepoState,
        (tip, audit_tip): (Option<Tip>, Option<Tip>),
        now: i64,
        fresh: bool,
    ) -> Option<Verification<'a>> {
        if !self.verifies() {
            return None;
        }
        let round = self.round(fresh);
        let RepoState {
            memory, families, ..
        } = state;
        let verified = round.run(memory, tip, now, families).await;
        let audit = round.audit(memory, audit_tip.as_ref(), now, families).await;
        Some(Verification {
            round: verified,
            audit,
        })
    }

    /// Whether the cycle verifies: there is a cluster to verify on.
    pub fn verifies(&self) -> bool {
        self.clusters.verify_on.is_some()
    }

    /// The branch's tip as the mirror has it now.
    pub fn branch_tip(&self) -> Option<Tip> {
        inflight::tip(&self.syncer.mirror, &self.config.repository.branch, None)
    }

    /// Commit mode: the commit verified as the branch's tip, `pushed` when the pass pushed one.
    fn tip(&self, pushed: Option<String>) -> Option<Tip> {
        match self.config.mode {
            WriteMode::Commit => {
                let branch = &self.config.repository.branch;
                inflight::tip(&self.syncer.mirror, branch, pushed.as_deref())
            }
            WriteMode::PullRequest => None,
        }
    }

    fn round(&self, fresh: bool) -> Round<'a> {
        Round {
            fresh,
            config: self.config,
            mirror: &self.syncer.mirror,
            forge: self.forge,
            registry: self.registry,
            cluster: self.clusters.verify_on.as_ref(),
            stage_clusters: &self.clusters.stages,
            grace: self.grace,
        }
    }
}
