//! Merged pull requests, verified after the merge, as `tagpin run` verifies them
//! ([`crate::inflight::InFlight`]): a tagpin pull request merged less than
//! [`inflight::RECENTLY_MERGED`] ago is verified on its cluster at its merge commit, its verdict
//! posted to it (the `tagpin/converged` status and the one updated comment), until the verdict
//! is final (Converged or Failed).
//!
//! One function serves sync's pull requests (pull-request mode) and promotions: what sets them
//! apart is a [`Kind`]. A pull request from a fork, or a promotion tagpin did not open, is
//! never verified ([`inflight::not_ours`]). Of the merged pull requests in the window, the last
//! merged is the one verified: it is what the cluster is meant to run now, and what the
//! object's status reports.

use std::time::Duration;

use super::crd::VerdictSummary;
use super::reconcile;
use super::status::Awaiting;
use crate::config::{Config, Stage};
use crate::forge::{ChangeRequestNoun, Forge, PullRequestInfo};
use crate::inflight;
use crate::promote;
use crate::registry::Client;
use crate::sync::Syncer;
use crate::verify::live::Cluster;
use crate::verify::verdict::State;
use crate::verify::{self, Source};

/// Which merged pull requests are verified.
#[derive(Debug, Clone, Copy)]
pub enum Kind<'a> {
    /// Sync's own, on the configured branch prefix (not a promotion branch), verified on the
    /// cluster of sync's pins against their plan block, at the merge commit too.
    Sync,
    /// Promotions into this stage, verified on its cluster with its paths at the merge commit.
    Promotion(&'a Stage),
}

impl Kind<'_> {
    /// The branch prefix the forge is asked for.
    fn prefix(&self, config: &Config) -> String {
        match self {
            Kind::Sync => config.pull_request.branch_prefix.clone(),
            Kind::Promotion(stage) => promote::branch_for(config, &stage.name),
        }
    }

    /// Whether the head branch `branch` is one of this kind's.
    fn wants(&self, config: &Config, branch: &str) -> bool {
        match self {
            Kind::Sync => promote::stage_of_branch(config, branch).is_none(),
            Kind::Promotion(stage) => branch == promote::branch_for(config, &stage.name),
        }
    }

    /// Whether tagpin's own final `tagpin/converged` status on the merge commit ends the
    /// verification, as it does for `tagpin run`, when the object's status does not hold the
    /// verdict (another pull request is open, and the status reports that one). A promotion's
    /// entry in `status.promotions` always holds its verdict; and its merge commit, the target
    /// branch's tip, may carry the verdict of a commit-mode sync on the first stage, which
    /// says nothing about the stage promoted into.
    fn final_on_forge(&self) -> bool {
        matches!(self, Kind::Sync)
    }

    /// What is verified, how the verdict names it, and the configuration it is verified with.
    fn source(&self, config: &Config, pr: &PullRequestInfo, sha: &str) -> (Source, String, Config) {
        let short = &sha[..sha.len().min(12)];
        match self {
            // As `tagpin run` does: the pins its plan block promises, at its head and its
            // merge commit.
            Kind::Sync => (
                Source::PullRequest(pr.number),
                merged_label(ChangeRequestNoun::of(config.forge.as_ref()), pr.number, sha),
                config.clone(),
            ),
            Kind::Promotion(stage) => (
                promote::verification_source(pr),
                format!("commit {short}"),
                promote::stage_config(config, stage),
            ),
        }
    }
}

/// How a sync pull request's verdict after its merge is named (`status.verdict.source`): the
/// pull request and its merge commit, so that a verdict on it while it was open is not taken
/// for one on the merge.
pub fn merged_label(noun: ChangeRequestNoun, number: u64, merge_sha: &str) -> String {
    format!(
        "{}, merged as {}",
        noun.name(number),
        &merge_sha[..merge_sha.len().min(12)]
    )
}

/// Of the pull requests the forge listed, the one of this kind merged last, if it is still
/// in flight at `now` (Unix seconds, [`inflight::in_flight_at`]) and tagpin's to verify
/// ([`inflight::not_ours`], `me` being the token's login). `wanted` says which head branches
/// are of this kind; `promotion`: they are promotions, which only tagpin may open.
pub fn last_merged(
    prs: Vec<PullRequestInfo>,
    wanted: impl Fn(&str) -> bool,
    promotion: bool,
    me: &str,
    now: i64,
) -> Option<PullRequestInfo> {
    prs.into_iter()
        .filter(|pr| pr.merged && inflight::in_flight_at(pr, now))
        .filter(|pr| wanted(&pr.head_ref))
        .filter(|pr| match inflight::not_ours(pr, promotion, me) {
            Some(why) => {
                tracing::debug!("pull request #{} is not verified: {why}", pr.number);
                false
            }
            None => true,
        })
        .max_by_key(|pr| (pr.merged_at, pr.number))
}

/// What one pass needs to verify merged pull requests.
pub struct Verifier<'a> {
    pub config: &'a Config,
    pub syncer: &'a Syncer<'a>,
    pub forge: &'a Forge,
    pub registry: &'a Client,
    /// For that long after the merge, a workload it adds that does not exist yet is awaited,
    /// not failed (see [`super::status::settle`]).
    pub interval: Duration,
}

/// The pull request merged last, and what this pass found of it.
pub struct Merged {
    pub number: u64,
    /// How its verdict is named (`status.verdict.source`).
    pub label: String,
    /// Its verdict now, and what it waits for; `None` when its verdict is already final
    /// (`settled`, or, for sync, the `tagpin/converged` status tagpin set on its merge
    /// commit), so it was not verified again.
    pub verdict: Option<(VerdictSummary, Option<Awaiting>)>,
}

/// Verifies the pull request of `kind` merged last on `cluster`, at its merge commit, and
/// posts the verdict to it. `settled`: the verdict the object's status already holds for it,
/// if any. `None` when no merged pull request is in flight, or when the forge cannot say.
pub async fn verify_last_merged(
    verifier: &Verifier<'_>,
    kind: Kind<'_>,
    cluster: &Cluster,
    settled: Option<&VerdictSummary>,
) -> Option<Merged> {
    let (config, forge) = (verifier.config, verifier.forge);
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    let listed = inflight::in_flight_pull_requests(
        forge,
        &kind.prefix(config),
        &config.repository.branch,
        now,
    )
    .await;
    let (me, prs) = match listed {
        Ok(listed) => listed,
        Err(e) => {
            let what = match kind {
                Kind::Sync => "sync".to_string(),
                Kind::Promotion(stage) => format!("promotion into {}", stage.name),
            };
            tracing::warn!("cannot list the merged {what} pull requests, none verified: {e}");
            return None;
        }
    };
    let promotion = matches!(kind, Kind::Promotion(_));
    let merged = last_merged(prs, |b| kind.wants(config, b), promotion, me, now)?;
    let sha = merged.merge_commit_sha.clone()?;
    let (source, label, config) = kind.source(config, &merged, &sha);
    let done = |v: &VerdictSummary| matches!(v.state, State::Converged | State::Failed);
    let settled_here = settled.is_some_and(|v| v.source == label && done(v));
    let name = forge.noun().name(merged.number);
    let settled_there = !settled_here
        && kind.final_on_forge()
        && match forge.status_of(&sha, verify::report::STATUS_CONTEXT).await {
            Ok(status) => inflight::final_status(status.as_ref().map(|(state, _)| *state)),
            Err(e) => {
                tracing::warn!("{name}: cannot read the status of {sha}, not verified now: {e}");
                return None;
            }
        };
    if settled_here || settled_there {
        return Some(Merged {
            number: merged.number,
            label,
            verdict: None,
        });
    }
    let interval = i64::try_from(verifier.interval.as_secs()).unwrap_or(i64::MAX);
    let young = merged
        .merged_at
        .is_some_and(|at| now.saturating_sub(at).max(0) < interval);
    let (mut summary, awaiting) = reconcile::verify_now(
        &source,
        Some(merged.number),
        young,
        &config,
        verifier.syncer,
        Some(forge),
        cluster,
        verifier.registry,
    )
    .await;
    summary.source = label.clone();
    Some(Merged {
        number: merged.number,
        label,
        verdict: Some((summary, awaiting)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: i64 = 3600;
    const NOW: i64 = 1_790_000_000;

    fn pr(number: u64, head_ref: &str, merged_at: Option<i64>) -> PullRequestInfo {
        PullRequestInfo {
            number,
            open: merged_at.is_none(),
            merged: merged_at.is_some(),
            title: "Pin images to digests".into(),
            body: String::new(),
            labels: Vec::new(),
            url: format!("https://github.example/acme/gitops/pull/{number}"),
            head_ref: head_ref.into(),
            head_sha: format!("{number:040x}"),
            merge_commit_sha: merged_at.map(|_| format!("{:040x}", number + 1000)),
            merged_at,
            updated_at: merged_at,
            author: "tagpin-bot".into(),
            same_repository: true,
        }
    }

    fn sync_branch(branch: &str) -> bool {
        !branch.starts_with("tagpin/promote/")
    }

    #[test]
    fn the_pull_request_merged_last_in_the_window_is_the_one_verified() {
        let prs = vec![
            pr(1, "tagpin/main", Some(NOW - 3 * HOUR)),
            pr(2, "tagpin/main", Some(NOW - HOUR)),
            // Open: verified as the open pull request, not here.
            pr(3, "tagpin/main", None),
            // Merged later, but a promotion: not sync's.
            pr(4, "tagpin/promote/production", Some(NOW - 60)),
        ];
        let found = last_merged(prs, sync_branch, false, "tagpin-bot", NOW);
        assert_eq!(found.map(|p| p.number), Some(2));
    }

    #[test]
    fn a_merge_older_than_the_window_a_closed_one_and_a_fork_are_not_verified() {
        let old = pr(1, "tagpin/main", Some(NOW - 25 * HOUR));
        let mut closed = pr(2, "tagpin/main", None);
        closed.open = false;
        let mut fork = pr(3, "tagpin/main", Some(NOW - 60));
        fork.same_repository = false;
        fork.author = "mallory".into();
        let found = last_merged(
            vec![old, closed, fork],
            sync_branch,
            false,
            "tagpin-bot",
            NOW,
        );
        assert_eq!(found, None);
    }

    #[test]
    fn a_promotion_someone_else_opened_is_not_verified_and_a_sync_one_of_a_colleague_is() {
        let mut theirs = pr(5, "tagpin/promote/production", Some(NOW - 60));
        theirs.author = "alice".into();
        let promotion = |b: &str| b == "tagpin/promote/production";
        let found = last_merged(vec![theirs.clone()], promotion, true, "tagpin-bot", NOW);
        assert_eq!(found, None);
        // A collaborator's pull request on a tagpin branch of this repository is verified,
        // as `tagpin run` verifies it.
        theirs.head_ref = "tagpin/main".into();
        let found = last_merged(vec![theirs], sync_branch, false, "tagpin-bot", NOW);
        assert_eq!(found.map(|p| p.number), Some(5));
    }

    #[test]
    fn a_merged_verdict_names_the_merge_commit() {
        assert_eq!(
            merged_label(
                ChangeRequestNoun::PullRequest,
                7,
                "0123456789abcdef0123456789abcdef01234567"
            ),
            "pull request #7, merged as 0123456789ab"
        );
        assert_eq!(
            merged_label(ChangeRequestNoun::MergeRequest, 7, "0123456789abcdef"),
            "merge request !7, merged as 0123456789ab"
        );
    }
}
