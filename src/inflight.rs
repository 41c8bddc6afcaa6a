//! What is in flight, and its verification between passes: tagpin's open and recently merged
//! pull requests (pull-request mode), the target branch's tip (commit mode), merged promotions
//! on the cluster of the stage they promote into. The forge's `tagpin/converged` statuses
//! (tagpin's own) say what is already final; the process only remembers what it read there, to
//! spend no call on it again.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;

use crate::clock::Clock;
use crate::config::{Config, Stage, WriteMode};
use crate::forge::{Forge, StatusState};
use crate::git::Mirror;
use crate::metrics::{self, ErrorLabels, Metrics, VerdictLabels};
use crate::mutex::lock;
use crate::promote;
use crate::registry::Client;
use crate::verify::live::Cluster;
use crate::verify::verdict::State as Verdict;
use crate::verify::{self, grace, Families, Source, VerifyError};

/// How long after its merge a tagpin pull request is still verified.
pub const RECENTLY_MERGED: Duration = Duration::from_secs(24 * 3600);

/// The oldest merge (Unix seconds) still verified at `now`: what the forge is asked for.
pub fn merged_since(now: i64) -> i64 {
    now - RECENTLY_MERGED.as_secs() as i64
}

/// tagpin's login on the forge, and the pull requests on branches under `prefix` into `base`
/// that are open or were closed since [`merged_since`] `now`: what may be in flight.
pub async fn in_flight_pull_requests<'f>(
    forge: &'f Forge,
    prefix: &str,
    base: &str,
    now: i64,
) -> Result<(&'f str, Vec<crate::forge::PullRequestInfo>), crate::forge::ForgeError> {
    let me = forge.login().await?;
    let prs = forge
        .pull_requests_with_prefix(prefix, base, merged_since(now))
        .await?;
    Ok((me, prs))
}

/// Whether `pr` is still in flight at `now` (Unix seconds): open, or merged less than
/// [`RECENTLY_MERGED`] ago. A pull request closed without merging is not.
pub fn in_flight_at(pr: &crate::forge::PullRequestInfo, now: i64) -> bool {
    pr.open || pr.merged_at.is_some_and(|t| t > merged_since(now))
}

/// What is in flight, verified between passes until Converged or Failed: open and recently
/// merged tagpin pull requests (pull-request mode), or the target branch's tip (commit mode).
/// The forge's `tagpin/converged` statuses (tagpin's own) say what is already final; the
/// process only remembers what it read there, to spend no call on it again.
pub struct InFlight<'a> {
    pub config: &'a Config,
    pub mirror: &'a Mirror,
    pub forge: Option<&'a Forge>,
    pub registry: &'a Client,
    /// The cluster of `sync`'s pins (the first stage's, with promotion).
    pub cluster: Cluster,
    /// Each promotion stage's cluster, by name: a promotion pull request is verified on the
    /// cluster of the stage it promotes into.
    pub stage_clusters: &'a BTreeMap<String, Cluster>,
    /// Commit mode: the last tip judged Converged or Failed, not checked again.
    pub settled_tip: Mutex<Option<String>>,
    /// Pull-request mode: what is known of each pull request between cycles.
    pub pr_memory: Mutex<PrMemory>,
    /// The time compared with merge times ([`in_flight_at`]).
    pub clock: Clock,
    /// For how long after a commit landed (tagpin's pin, a merge) a workload it names that
    /// does not exist yet is awaited rather than failed ([`verify::grace`]): the pass interval.
    pub grace: Duration,
}

/// One thing to verify: its source, its pull request, the stage a promotion goes into, the
/// commit whose final verdict ends its verification, and when what is verified landed (Unix
/// seconds: a merge time, a commit time), when known.
type InFlightItem<'c> = (
    Source,
    Option<u64>,
    Option<&'c Stage>,
    Option<String>,
    Option<i64>,
);

/// What the verification of pull requests remembers between cycles, so that a cycle spends
/// no GitHub call on what cannot have changed. Lost on restart: one status read per pull
/// request rebuilds it.
#[derive(Debug, Default)]
pub struct PrMemory {
    /// Pull request -> the commit whose verdict is final (Converged or Failed, set by tagpin):
    /// not verified again until that commit changes (a push to an open one, its merge).
    settled: BTreeMap<u64, String>,
    /// Pull request -> the commit whose `tagpin/converged` status was read and not final: a
    /// final verdict on it can only come from this process (recorded in `settled`), so the
    /// status is not read again.
    read: BTreeMap<u64, String>,
    /// Pull requests left alone (forks, promotion branches tagpin did not open), logged once.
    ignored: BTreeSet<u64>,
}

/// Why a pull request on a tagpin branch is not tagpin's to verify, if it is not. Its plan
/// block chooses what is read from the cluster and the verdict (live images, digests, pod
/// counts) is posted back to it, so it must come from this repository, not a fork; and a
/// promotion, from tagpin itself (`me`, the token's login).
pub fn not_ours(pr: &crate::forge::PullRequestInfo, promotion: bool, me: &str) -> Option<String> {
    if !pr.same_repository {
        return Some(format!(
            "its branch {} is in a fork, not in this repository (opened by {})",
            pr.head_ref, pr.author
        ));
    }
    if promotion && pr.author != me {
        return Some(format!(
            "promotion branch {} opened by {}, not by tagpin ({me})",
            pr.head_ref, pr.author
        ));
    }
    None
}

/// Whether tagpin's own `tagpin/converged` status on the commit that ends a pull request's
/// verification is a final verdict (Converged or Failed): that pull request is not verified
/// again.
pub fn final_status(state: Option<StatusState>) -> bool {
    matches!(state, Some(StatusState::Success | StatusState::Failure))
}

impl InFlight<'_> {
    /// One verification round: every source in flight, each on its cluster.
    pub(crate) async fn verify(&self, families: &mut Families, metrics: &Metrics) {
        let mut sources: Vec<InFlightItem> = Vec::new();
        // Merge commits of the promotions in flight, verified or settled as promotions.
        let mut promotion_merges: Vec<String> = Vec::new();
        if let Some(forge) = self.forge {
            self.pull_requests(forge, metrics, &mut sources, &mut promotion_merges)
                .await;
        }
        if self.config.mode == WriteMode::Commit {
            sources.extend(self.tip(&promotion_merges));
        }
        let now = (self.clock)();
        for item in sources {
            self.verify_one(item, families, metrics, now).await;
        }
    }

    /// The pull requests in flight that are tagpin's to verify and not final yet, added to
    /// `sources`; the merge commits of promotions among them, to `promotion_merges`.
    async fn pull_requests<'c>(
        &'c self,
        forge: &Forge,
        metrics: &Metrics,
        sources: &mut Vec<InFlightItem<'c>>,
        promotion_merges: &mut Vec<String>,
    ) {
        let target = &self.config.repository.branch;
        let now = (self.clock)();
        // The forge's pull requests are one source of work among others: when they
        // cannot be listed, the commit-mode tip below is still verified.
        let listed =
            in_flight_pull_requests(forge, &self.config.pull_request.branch_prefix, target, now)
                .await;
        let (me, prs) = match listed {
            Ok(listed) => listed,
            Err(e) => {
                count_error(metrics, "forge");
                tracing::warn!("cannot list tagpin pull requests, none verified this round: {e}");
                ("", Vec::new())
            }
        };
        for pr in prs {
            let stage = promote::stage_of_branch(self.config, &pr.head_ref);
            if let Some(why) = not_ours(&pr, stage.is_some(), me) {
                if lock(&self.pr_memory).ignored.insert(pr.number) {
                    let name = forge.noun().name(pr.number);
                    tracing::warn!("{name} is not verified: {why}");
                }
                continue;
            }
            // Sync's own pull requests only in pull-request mode; a promotion only once
            // merged, since no cluster can run an unmerged promotion.
            let skip = match stage {
                None => self.config.mode != WriteMode::PullRequest,
                Some(_) => !pr.merged,
            };
            if skip {
                continue;
            }
            if !in_flight_at(&pr, now) {
                continue;
            }
            let final_sha = if pr.merged {
                pr.merge_commit_sha.clone()
            } else {
                Some(pr.head_sha.clone())
            };
            if let (Some(_), Some(sha)) = (stage, &final_sha) {
                promotion_merges.push(sha.clone());
            }
            // A final verdict on that commit ends the verification, open or merged.
            if let Some(sha) = &final_sha {
                let (settled, read) = {
                    let memory = lock(&self.pr_memory);
                    (
                        memory.settled.get(&pr.number) == Some(sha),
                        memory.read.get(&pr.number) == Some(sha),
                    )
                };
                if settled {
                    continue;
                }
                // A promotion's merge commit may also be the branch's tip, and a status
                // on it may be the commit-mode verdict of the first stage: only this
                // process's own final verdict on the promotion ends its verification.
                if !read && stage.is_none() {
                    // One unreadable status skips that pull request this round, not all.
                    let status = match forge.status_of(sha, verify::report::STATUS_CONTEXT).await {
                        Ok(status) => status,
                        Err(e) => {
                            count_error(metrics, "forge");
                            tracing::warn!(
                                "{}: cannot read its {} status, not verified this round: {e}",
                                forge.noun().name(pr.number),
                                verify::report::STATUS_CONTEXT
                            );
                            continue;
                        }
                    };
                    let mut memory = lock(&self.pr_memory);
                    if final_status(status.map(|(state, _)| state)) {
                        memory.settled.insert(pr.number, sha.clone());
                        continue;
                    }
                    memory.read.insert(pr.number, sha.clone());
                }
            }
            let source = match stage {
                Some(_) => promote::verification_source(&pr),
                None => Source::PullRequest(pr.number),
            };
            let landed = pr.merged_at.filter(|_| pr.merged);
            sources.push((source, Some(pr.number), stage, final_sha, landed));
        }
    }

    /// Commit mode: the target branch's tip, unless already settled or a promotion's merge.
    fn tip(&self, promotion_merges: &[String]) -> Option<InFlightItem<'_>> {
        let target = &self.config.repository.branch;
        if let Some(oid) = self.mirror.tip(target) {
            let tip = oid.to_string();
            // The merge of a promotion in flight is verified as that promotion, on its
            // stage's cluster: the first stage's verdict must not be posted on it too (one
            // commit, one `tagpin/converged` status), and its first-stage paths are its
            // parent's, verified before the promotion could open.
            if promotion_merges.contains(&tip) {
                *lock(&self.settled_tip) = Some(tip.clone());
            } else if lock(&self.settled_tip).as_deref() != Some(tip.as_str()) {
                let landed = self.mirror.commit_time(oid).ok();
                return Some((Source::Commit(tip), None, None, None, landed));
            }
        }
        None
    }

    /// Verifies one source on its cluster, counts and posts the verdict, and remembers a
    /// final one. Each source is independent: one that cannot be verified is counted, logged
    /// and left for the next round.
    async fn verify_one(
        &self,
        (source, pr, stage, final_sha, landed): InFlightItem<'_>,
        families: &mut Families,
        metrics: &Metrics,
        now: i64,
    ) {
        let (config, cluster) = match stage {
            Some(stage) => match self.stage_clusters.get(&stage.name) {
                Some(cluster) => (promote::stage_config(self.config, stage), cluster),
                None => {
                    tracing::warn!(
                        "cannot verify {source:?}: no cluster for stage {}",
                        stage.name
                    );
                    return;
                }
            },
            None => (self.config.clone(), &self.cluster),
        };
        // Each source is independent: one that cannot be verified (a pull request whose body
        // lost its plan block, an API server that times out) is counted, logged and left
        // for the next round; the others are still verified.
        let expectations =
            match verify::expectations(&source, &config, self.mirror, self.forge).await {
                Ok(expectations) => expectations,
                Err(e) => {
                    count_error(metrics, error_kind(&e));
                    tracing::warn!("cannot verify {source:?}: {e}");
                    return;
                }
            };
        if expectations.expected.is_empty()
            && expectations.not_verified.is_empty()
            && expectations.failures.is_empty()
        {
            return;
        }
        let check = match verify::check(&expectations, cluster, self.registry, families).await {
            Ok(check) => check,
            Err(e) => {
                count_error(metrics, error_kind(&e));
                tracing::warn!("cannot verify {source:?}: {e}");
                return;
            }
        };
        let check = match landed.is_some_and(|t| grace::is_young(t, now, self.grace)) {
            true => {
                let unchecked = check.unchecked(&expectations);
                grace::not_created_yet(check, unchecked)
            }
            false => check,
        };
        metrics::inc(
            &metrics.verdicts,
            VerdictLabels {
                verdict: check.state.as_str().to_string(),
                source: match (pr, landed) {
                    (None, _) => "branch",
                    (Some(_), Some(_)) => "merged",
                    (Some(_), None) => "open",
                }
                .to_string(),
            },
        );
        tracing::info!("{source:?}: {}", check.summary);
        if let (Source::Commit(sha), None, Verdict::Converged | Verdict::Failed) =
            (&source, pr, check.state)
        {
            *lock(&self.settled_tip) = Some(sha.clone());
        }
        if let Some(forge) = self.forge {
            verify::publish(forge, pr, &expectations, &check).await;
        }
        if let (Some(pr), Some(sha), Verdict::Converged | Verdict::Failed) =
            (pr, final_sha, check.state)
        {
            lock(&self.pr_memory).settled.insert(pr, sha);
        }
    }
}

/// The bounded metric label for a verification that could not be made.
fn error_kind(e: &VerifyError) -> &'static str {
    match e {
        VerifyError::Forge(_) => "forge",
        VerifyError::Git(_) => "git",
        VerifyError::Live(_) => "kubernetes",
        VerifyError::Filter(_) | VerifyError::NoForge | VerifyError::MissingPath { .. } => {
            "configuration"
        }
        VerifyError::NoPlanBlock(_) => "no_plan_block",
        VerifyError::FromFork { .. } => "fork",
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

#[cfg(test)]
mod tests {
    use super::*;

    fn pr(author: &str, same_repository: bool) -> crate::forge::PullRequestInfo {
        crate::forge::PullRequestInfo {
            number: 7,
            open: true,
            merged: false,
            title: String::new(),
            body: String::new(),
            labels: Vec::new(),
            url: String::new(),
            head_ref: "tagpin/promote/production".into(),
            head_sha: "0".repeat(40),
            merge_commit_sha: None,
            merged_at: None,
            updated_at: None,
            author: author.into(),
            same_repository,
        }
    }

    #[test]
    fn forks_and_promotions_tagpin_did_not_open_are_not_verified() {
        assert_eq!(not_ours(&pr("tagpin-bot", true), true, "tagpin-bot"), None);
        // Sync adopts a collaborator's pull request on its branch; a promotion is tagpin's.
        assert_eq!(not_ours(&pr("alice", true), false, "tagpin-bot"), None);
        let promotion = not_ours(&pr("alice", true), true, "tagpin-bot").unwrap();
        assert!(
            promotion.contains("opened by alice, not by tagpin"),
            "{promotion}"
        );
        for promotion in [false, true] {
            let fork = not_ours(&pr("tagpin-bot", false), promotion, "tagpin-bot").unwrap();
            assert!(fork.contains("in a fork"), "{fork}");
        }
    }

    fn merged(minutes_ago: i64, now: i64) -> crate::forge::PullRequestInfo {
        crate::forge::PullRequestInfo {
            open: false,
            merged: true,
            merged_at: Some(now - minutes_ago * 60),
            ..pr("tagpin-bot", true)
        }
    }

    #[test]
    fn a_pull_request_merged_within_the_window_is_verified_one_merged_before_it_is_not() {
        let now = 1_800_000_000;
        let window = (RECENTLY_MERGED.as_secs() / 60) as i64;
        assert!(in_flight_at(&merged(1, now), now));
        assert!(in_flight_at(&merged(window - 1, now), now));
        assert!(!in_flight_at(&merged(window, now), now));
        assert!(!in_flight_at(&merged(window + 1, now), now));
        // The forge is asked for exactly that window.
        assert_eq!(merged_since(now), now - window * 60);
        // Open: in flight however old; closed unmerged: never.
        assert!(in_flight_at(&pr("tagpin-bot", true), now));
        let closed = crate::forge::PullRequestInfo {
            open: false,
            ..pr("tagpin-bot", true)
        };
        assert!(!in_flight_at(&closed, now));
    }
}
