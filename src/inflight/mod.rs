//! What is in flight, and its verification: one round for `tagpin run` and the operator
//! alike. [`rule`] decides what to verify (pure); a [`Round`] lists tagpin's change requests,
//! reads the forge's `tagpin/converged` status where the rule asks, verifies each item on its
//! cluster (a promotion on the cluster of the stage it promotes into), applies the grace a
//! young commit gets, and posts each verdict to the forge. Each driver maps the report: `run`
//! to its logs and metrics, the operator to its status, conditions and Events.

pub mod rule;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use crate::audit::{AuditError, AuditReport};
use crate::cluster::Cluster;
use crate::config::Config;
use crate::config::OnFailure;
use crate::forge::{ForgeClient, ForgeError, PullRequestInfo, StatusState};
use crate::git::Mirror;
use crate::mutex::lock;
use crate::promote;
use crate::registry::Client;
use crate::revert::{Candidate, RevertError, Reverted, Reverter};
use crate::verify::judge::check::{Check, Expectations};
use crate::verify::judge::grace;
use crate::verify::judge::verdict::State;
use crate::verify::{self, Families, VerifyError};

pub use rule::{Item, MadeAudit, Memory, Tip};

/// What one verification round works with.
pub struct Round<'a> {
    pub config: &'a Config,
    pub mirror: &'a Mirror,
    pub forge: Option<&'a ForgeClient>,
    pub registry: &'a Client,
    /// Where sync's pins are verified (the first stage's cluster, with promotion); `None`:
    /// they are not.
    pub cluster: Option<&'a Cluster>,
    /// Each promotion stage's cluster, by name.
    pub stage_clusters: &'a BTreeMap<String, Cluster>,
    /// For how long after a commit landed a workload it adds is awaited, not failed: the pass
    /// interval.
    pub grace: Duration,
    /// The cycle's pass fetched the branch and tagpin's branches just before this round: a
    /// commit the mirror holds there is verified without listing the remote's refs again (at
    /// rest, one ref listing per cycle instead of two).
    pub fresh: bool,
}

/// What a round found.
#[derive(Default)]
pub struct Report<'c> {
    /// tagpin's login on the forge, and the change requests it listed (what the operator's
    /// status picks the last merged from).
    pub me: String,
    pub listed: Vec<PullRequestInfo>,
    /// The forge could not list the change requests: none was verified this round.
    pub list_error: Option<ForgeError>,
    /// Change requests left alone for the first time, with why (to be logged once).
    pub ignored: Vec<(u64, String)>,
    /// Each item verified, or why it could not be.
    pub verified: Vec<(Item<'c>, Result<Verified, Unverifiable>)>,
}

/// An item's verification: what was expected and the check, the grace applied. `check`
/// is `None` when there was nothing to verify in it (no pin in its manifests): nothing was
/// posted.
pub struct Verified {
    pub expectations: Expectations,
    pub check: Option<Check>,
    /// With `verify.on_failure: revert`, what a Failed and final verdict called for: the
    /// revert written, or why none was; an error writing it (tried again next round).
    pub revert: Option<Result<Reverted, RevertError>>,
}

/// Why an item could not be verified this round; it is asked again the next.
#[derive(Debug, thiserror::Error)]
pub enum Unverifiable {
    #[error("no cluster for stage {0}")]
    NoCluster(String),
    #[error("cannot read its tagpin/converged status: {0}")]
    Status(#[source] ForgeError),
    #[error(transparent)]
    Verify(#[from] VerifyError),
}

impl<'a> Round<'a> {
    /// One round at `now` (Unix seconds): what the rule selects from what the forge lists and
    /// `tip`, verified and posted; `memory` keeps what was found final.
    pub async fn run(
        &self,
        memory: &Mutex<Memory>,
        tip: Option<Tip>,
        now: i64,
        families: &mut Families,
    ) -> Report<'a> {
        let mut report = Report::default();
        if let Some(forge) = self.forge {
            let prefix = &self.config.pull_request.branch_prefix;
            let base = &self.config.repository.branch;
            let listed = async {
                let me = forge.login().await?.to_string();
                let prs = forge
                    .pull_requests_with_prefix(prefix, base, rule::merged_since(now))
                    .await?;
                Ok::<_, ForgeError>((me, prs))
            };
            match listed.await {
                Ok((me, prs)) => (report.me, report.listed) = (me, prs),
                Err(e) => report.list_error = Some(e),
            }
        }
        let facts = rule::Facts {
            now,
            grace: self.grace,
            me: &report.me,
            change_requests: &report.listed,
            tip,
        };
        let selection = rule::select(self.config, &facts, &lock(memory));
        report.ignored = lock(memory).note(&selection).into_iter().cloned().collect();
        for item in selection.items {
            let verified = match self.target(&item) {
                Ok(target) => self.verify(&item, target, memory, (families, now)).await,
                Err(e) => Err(e),
            };
            match verified {
                Ok(None) => {}
                Ok(Some(verified)) => report.verified.push((item, Ok(verified))),
                Err(e) => report.verified.push((item, Err(e))),
            }
        }
        report
    }

    /// The configuration an item is verified with (a promotion: its stage's paths) and the
    /// cluster it is verified on.
    fn target(&self, item: &Item<'_>) -> Result<(Config, &Cluster), Unverifiable> {
        match item.stage {
            Some(stage) => match self.stage_clusters.get(&stage.name) {
                Some(cluster) => Ok((promote::stage_config(self.config, stage), cluster)),
                None => Err(Unverifiable::NoCluster(stage.name.clone())),
            },
            None => match self.cluster {
                Some(cluster) => Ok((self.config.clone(), cluster)),
                None => Err(Unverifiable::NoCluster("of sync's pins".into())),
            },
        }
    }

    /// `tagpin audit` of the branch's tip on the cluster sync's pins are verified on, when it
    /// is due (the tip moved, or one interval passed since the last audit; `memory` keeps
    /// when): `None` when not due, nothing to audit on, or nothing the last audit was made of
    /// has changed (the last stands).
    pub async fn audit(
        &self,
        memory: &Mutex<Memory>,
        tip: Option<&Tip>,
        now: i64,
        families: &mut Families,
    ) -> Option<Result<AuditReport, AuditError>> {
        let (Some(cluster), Some(tip)) = (self.cluster, tip) else {
            return None;
        };
        let oid = git2::Oid::from_str(&tip.sha).ok()?;
        if !lock(memory).audit_due(&tip.sha, now, self.grace) {
            return None;
        }
        // The same tip, configuration and lists (each kept current by a watch, none changed
        // since) as the last audit: a new one would find the same, and the last stands.
        let lists = cluster.lists_stamp_if_watched();
        if lock(memory).audit_unchanged(&tip.sha, self.config, lists) {
            lock(memory).audited(&tip.sha, now);
            return None;
        }
        let lists = cluster.lists_stamp();
        let clients = (cluster, self.registry);
        let audited =
            crate::audit::at(oid, self.config, self.mirror, clients, families, None).await;
        if let Ok(report) = &audited {
            let mut memory = lock(memory);
            memory.audited(&tip.sha, now);
            let reusable = !report.resolved_tags && report.audit.unread.is_empty();
            memory.made_audit(lists.filter(|_| reusable).map(|lists| MadeAudit {
                tip: tip.sha.clone(),
                config: self.config.clone(),
                lists,
            }));
        }
        Some(audited)
    }

    /// Verifies one item on its cluster and posts the verdict to the forge; `None` when
    /// tagpin's own status on the forge says its verdict is already final.
    async fn verify(
        &self,
        item: &Item<'_>,
        (config, cluster): (Config, &Cluster),
        memory: &Mutex<Memory>,
        (families, now): (&mut Families, i64),
    ) -> Result<Option<Verified>, Unverifiable> {
        // A final Failed status on a landed change is checked once more with `on_failure:
        // revert` (its revert may be due: after a restart, or when the status was posted by a
        // round that still saw the change request open as it merged); its status is then
        // renewed only if the verdict is still Failed.
        let mut recheck = false;
        if let (true, Some(forge), Some(sha)) = (item.ask_forge, self.forge, &item.final_sha) {
            let status = forge
                .status_of(sha, verify::judge::report::STATUS_CONTEXT)
                .await
                .map_err(Unverifiable::Status)?;
            let state = status.map(|(state, _)| state);
            recheck = state == Some(StatusState::Failure)
                && item.landed.is_some()
                && revert_wanted(&config);
            if !recheck {
                lock(memory).forge_said(item, state, now);
                if rule::final_status(state) {
                    return Ok(None);
                }
            }
        }
        let expectations =
            verify::expectations(&item.source, &config, self.mirror, self.forge, self.fresh)
                .await?;
        if expectations.expected.is_empty()
            && expectations.not_verified.is_empty()
            && expectations.failures.is_empty()
        {
            return Ok(Some(Verified {
                expectations,
                check: None,
                revert: None,
            }));
        }
        let check = verify::check(&expectations, cluster, self.registry, families).await?;
        let check = match item.young {
            true => {
                let unchecked = check.unchecked(&expectations);
                grace::not_created_yet(check, unchecked)
            }
            false => check,
        };
        // Noted before the status is posted: whoever reads the status finds the note there.
        if !(item.young && check.state == State::Failed && revert_wanted(&config)) {
            self.record(item, &expectations, &check, (memory, now));
        }
        if let (Some(forge), false) = (self.forge, recheck && check.state != State::Failed) {
            verify::publish(forge, item.change_request, &expectations, &check).await;
        }
        let revert = self.act(item, &config, &check).await;
        // A failure is final once the commit is past its grace; until then it is asked again
        // (with `on_failure: revert`, so that a revert waits for the grace). A revert that
        // could not be written is tried again too.
        let again = matches!(revert, Some(Err(_)))
            || (item.young && check.state == State::Failed && revert_wanted(&config));
        if !again {
            lock(memory).verdict(item, check.state, now);
            if recheck {
                // Checked once more: its final status stands.
                lock(memory).forge_said(item, Some(StatusState::Failure), now);
            }
        }
        Ok(Some(Verified {
            expectations,
            check: Some(check),
            revert,
        }))
    }

    /// Records a final verdict on the commit that landed (the tip, a merge) for the delivery
    /// report (`src/delivery/`), once per change of verdict: a note that could not be written
    /// is tried again by the next round that reaches the same verdict.
    fn record(
        &self,
        item: &Item<'_>,
        expectations: &Expectations,
        check: &Check,
        (memory, now): (&Mutex<Memory>, i64),
    ) {
        let commit = match (&item.source, item.change_request, &item.final_sha) {
            (_, Some(_), Some(sha)) if item.landed.is_some() => sha,
            (verify::Source::Commit(sha), None, _) => sha,
            _ => return,
        };
        let stage =
            crate::delivery::history::stage_name(self.config, item.stage.map(|s| s.name.as_str()));
        if !lock(memory).record_due(commit, &stage, check.state) {
            return;
        }
        let verdicted = crate::delivery::record::Verdicted {
            commit,
            stage: stage.clone(),
            expectations,
            check,
            at: now,
        };
        match crate::delivery::record::record(self.mirror, self.config, &verdicted) {
            Ok(()) => lock(memory).recorded(commit, &stage, check.state),
            Err(e) => tracing::warn!("the verdict on {commit} for {stage} not noted: {e}"),
        }
    }

    /// What a Failed and final verdict calls for (`verify.on_failure`): `None` when nothing
    /// (report only, not Failed, still young, not landed).
    async fn act(
        &self,
        item: &Item<'_>,
        config: &Config,
        check: &Check,
    ) -> Option<Result<Reverted, RevertError>> {
        if !revert_wanted(config) || check.state != State::Failed || item.young {
            return None;
        }
        let parse = |sha: &str| git2::Oid::from_str(sha).ok();
        let (change, own) = match (&item.source, item.change_request, item.landed) {
            // A merged change request: its merge commit, proven tagpin's by its head.
            (_, Some(_), Some(_)) => (
                item.final_sha.as_deref().and_then(parse)?,
                item.head.as_deref().and_then(parse)?,
            ),
            // The tip: the last commit tagpin pinned on it.
            (verify::Source::Commit(sha), None, _) => {
                let tip = parse(sha)?;
                let found = crate::git::off_runtime(|| self.mirror.last_own_commit(tip, 100));
                let (commit, _, _) = found.ok().flatten()?;
                (commit, commit)
            }
            // An open change request has not landed: nothing to revert.
            _ => return None,
        };
        let reverter = Reverter {
            config,
            mirror: self.mirror,
            forge: self.forge,
        };
        let candidate = Candidate { change, own, check };
        Some(reverter.revert(&candidate).await)
    }
}

fn revert_wanted(config: &Config) -> bool {
    config.verify.on_failure == OnFailure::Revert
}

/// The target branch's tip in `mirror` and its commit time, or `commit` (one a pass just
/// pushed) when given.
pub fn tip(mirror: &Mirror, branch: &str, commit: Option<&str>) -> Option<Tip> {
    let oid = match commit {
        Some(commit) => git2::Oid::from_str(commit).ok()?,
        None => mirror.tip(branch)?,
    };
    Some(Tip {
        sha: oid.to_string(),
        landed: mirror.commit_time(oid).ok(),
    })
}
