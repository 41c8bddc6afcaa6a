//! The one rule of what is in flight and what to verify, for `tagpin run` and the operator
//! alike: pure, given what the forge listed, the target branch's tip and what was already
//! found final.
//!
//! - Pull-request mode: tagpin's open change requests, verified against their plan block.
//! - Every mode: tagpin's change requests merged less than [`RECENTLY_MERGED`] ago, verified
//!   at their merge commit; a promotion on the cluster of the stage it promotes into. A
//!   promotion is verified only once merged (no cluster can run an unmerged promotion).
//! - Commit mode: the target branch's tip, unless it is the merge of a promotion in flight
//!   (verified as that promotion: one commit, one `tagpin/converged` status).
//! - Never: a change request from a fork, a promotion tagpin did not open, one closed
//!   without merging, one whose final verdict (Converged or Failed) on the commit that ends
//!   its verification is known.
//! - Except after Converged: what a stage runs now (the tip in commit mode, the last merged
//!   change request into each stage) is judged again once per interval after it converged,
//!   until the next pin lands (or a merge leaves the recently merged window): pods that start
//!   crash-looping an hour later make it Failed, which is recorded and acted on like any
//!   Failed verdict (issue #39). A Failed verdict stays final.
//! - Grace: a commit that landed (a merge, the tip's commit) less than the grace ago is
//!   young: a workload it adds that does not exist yet is awaited, not failed
//!   ([`crate::verify::judge::grace`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::cluster::Stamp;
use crate::config::{Config, Stage, WriteMode};
use crate::forge::{ChangeRequestNoun, PullRequestInfo, StatusState};
use crate::promote;
use crate::verify::judge::verdict::State;
use crate::verify::Source;

/// How long after its merge a tagpin change request is still verified.
pub const RECENTLY_MERGED: Duration = Duration::from_secs(24 * 3600);

/// The oldest merge (Unix seconds) still verified at `now`: what the forge is asked for.
pub fn merged_since(now: i64) -> i64 {
    now - RECENTLY_MERGED.as_secs() as i64
}

/// Whether `pr` is still in flight at `now` (Unix seconds): open, or merged less than
/// [`RECENTLY_MERGED`] ago. A change request closed without merging is not.
pub fn in_flight_at(pr: &PullRequestInfo, now: i64) -> bool {
    pr.open || pr.merged_at.is_some_and(|t| t > merged_since(now))
}

/// Whether a commit that landed at `landed` (Unix seconds) is still within `grace` at `now`.
/// A time ahead of `now` (another machine's clock) counts as now.
pub fn is_young(landed: i64, now: i64, grace: Duration) -> bool {
    let age = now.saturating_sub(landed).max(0);
    age < i64::try_from(grace.as_secs()).unwrap_or(i64::MAX)
}

/// Why a change request on a tagpin branch is not tagpin's to verify, if it is not. Its plan
/// block chooses what is read from the cluster and the verdict (live images, digests, pod
/// counts) is posted back to it, so it must come from this repository, not a fork; and a
/// promotion, from tagpin itself (`me`, the token's login).
pub fn not_ours(pr: &PullRequestInfo, promotion: bool, me: &str) -> Option<String> {
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

/// Whether tagpin's own `tagpin/converged` status on the commit that ends a change request's
/// verification is a final verdict (Converged or Failed).
pub fn final_status(state: Option<StatusState>) -> bool {
    matches!(state, Some(StatusState::Success | StatusState::Failure))
}

/// The target branch's tip (commit mode) and when it landed (its committer time).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tip {
    pub sha: String,
    pub landed: Option<i64>,
}

/// What a driver knows when it asks what to verify.
pub struct Facts<'a> {
    /// Unix seconds.
    pub now: i64,
    /// For how long after a commit landed a workload it adds is awaited rather than failed.
    pub grace: Duration,
    /// tagpin's login on the forge (empty without one).
    pub me: &'a str,
    /// The change requests the forge listed on tagpin's branches into the target branch: open,
    /// or closed since [`merged_since`] `now`.
    pub change_requests: &'a [PullRequestInfo],
    /// The target branch's tip, when known.
    pub tip: Option<Tip>,
}

/// One thing to verify.
#[derive(Debug, Clone, PartialEq)]
pub struct Item<'c> {
    pub source: Source,
    /// The change request whose verdict this is (its comment and status are updated).
    pub change_request: Option<u64>,
    /// A promotion: the stage it promotes into, on whose cluster and paths it is verified.
    pub stage: Option<&'c Stage>,
    /// The commit whose final verdict ends the verification: an open change request's head,
    /// a merged one's merge commit, the tip.
    pub final_sha: Option<String>,
    /// A change request's head commit: tagpin's own commit when tagpin wrote it.
    pub head: Option<String>,
    /// When what is verified landed (Unix seconds): a merge, the tip's commit. `None`: an
    /// open change request, which has not landed.
    pub landed: Option<i64>,
    /// Landed less than the grace ago ([`is_young`]).
    pub young: bool,
    /// The forge's `tagpin/converged` status on `final_sha` must be read first: if it is
    /// final, the item is settled, not verified. Only sync's change requests: a promotion's
    /// merge commit may be the branch's tip and carry the first stage's verdict.
    pub ask_forge: bool,
}

impl Item<'_> {
    /// How the verdict names what was verified, in the forge's words: `pull request #7`,
    /// `merge request !7, merged as 0123456789ab`, `commit 0123456789ab`.
    pub fn label(&self, noun: ChangeRequestNoun) -> String {
        match (&self.source, self.change_request, &self.final_sha) {
            (Source::PullRequest(n), _, Some(sha)) if self.landed.is_some() => {
                merged_label(noun, *n, sha)
            }
            (Source::PullRequest(n), _, _) => noun.name(*n),
            (Source::Commit(sha), _, _) => commit_label(sha),
            (Source::Branch(b), _, _) => format!("branch {b}"),
        }
    }

    /// The bounded metric label of where it comes from.
    pub fn origin(&self) -> &'static str {
        match (self.change_request, self.landed) {
            (None, _) => "branch",
            (Some(_), Some(_)) => "merged",
            (Some(_), None) => "open",
        }
    }
}

fn short(sha: &str) -> &str {
    &sha[..sha.len().min(12)]
}

/// How a verdict on a commit is named: `commit 0123456789ab`.
pub fn commit_label(sha: &str) -> String {
    format!("commit {}", short(sha))
}

/// How a sync change request's verdict after its merge is named: the change request and its
/// merge commit, so that a verdict on it while it was open is not taken for one on the merge.
pub fn merged_label(noun: ChangeRequestNoun, number: u64, merge_sha: &str) -> String {
    format!("{}, merged as {}", noun.name(number), short(merge_sha))
}

/// What to verify now, and what is left alone and why.
#[derive(Debug, Default, PartialEq)]
pub struct Selection<'c> {
    pub items: Vec<Item<'c>>,
    /// Change requests on tagpin's branches that are not tagpin's to verify, with why.
    pub ignored: Vec<(u64, String)>,
    /// The tip is the merge of a promotion in flight: verified as that promotion, never as
    /// the tip.
    pub tip_is_promotion: Option<String>,
}

/// When a settled item was last judged Converged (Unix seconds): it is judged again one
/// interval later. `None`: Failed, or settled otherwise; final.
type Converged = Option<i64>;

/// What is known final between rounds, so that a round spends no forge call and no cluster
/// read on what cannot have changed. Kept in memory only: lost on restart, one status read
/// per change request rebuilds it.
#[derive(Debug, Default)]
pub struct Memory {
    /// Change request -> the commit whose verdict is final (Converged or Failed), and whether
    /// it had landed: not verified again until that commit changes (a push to an open one,
    /// its merge) or lands. A fast-forward merge lands the very commit verified while the
    /// change request was open, and what a verdict calls for once landed (a revert) is not
    /// what it called for before.
    settled: BTreeMap<u64, (String, bool, Converged)>,
    /// Change request -> the commit whose `tagpin/converged` status was read and not final:
    /// a final verdict on it can only come from this process, so it is not read again.
    read: BTreeMap<u64, String>,
    /// Change requests left alone (forks, promotions tagpin did not open), logged once.
    ignored: BTreeSet<u64>,
    /// Commit mode: the last tip judged final, or verified as a promotion.
    settled_tip: Option<(String, Converged)>,
    /// The verdict last recorded for the delivery report, per commit and stage.
    recorded: BTreeMap<(String, String), State>,
    /// The tip last audited, and when (Unix seconds).
    audited: Option<(String, i64)>,
    /// What the last audit was made of: it is made again only when one of those changed.
    made_audit: Option<Box<MadeAudit>>,
}

/// What an audit was made of: the tip, the configuration, and where the cluster's shared lists
/// stood before they were read. It judged nothing else (no tag was resolved, no list refused),
/// so while none of these moved a new audit would find what it found.
#[derive(Debug)]
pub struct MadeAudit {
    pub tip: String,
    pub config: Config,
    pub lists: Stamp,
}

impl Memory {
    /// Records what the forge's status on an item's final commit said: final settles it.
    /// A success read at `now` (after a restart) is judged again one interval later.
    pub fn forge_said(&mut self, item: &Item<'_>, state: Option<StatusState>, now: i64) {
        let (Some(pr), Some(sha)) = (item.change_request, &item.final_sha) else {
            return;
        };
        let converged = (state == Some(StatusState::Success)).then_some(now);
        match final_status(state) {
            true => {
                self.settled
                    .insert(pr, (sha.clone(), item.landed.is_some(), converged));
            }
            false => {
                self.read.insert(pr, sha.clone());
            }
        }
    }

    /// Records an item's verdict at `now`: a final one (Converged or Failed) settles it, a
    /// Converged one until it is due again ([`Memory::settled`]).
    pub fn verdict(&mut self, item: &Item<'_>, state: State, now: i64) {
        let converged = match state {
            State::Converged => Some(now),
            State::Failed => None,
            _ => return,
        };
        match (item.change_request, &item.final_sha, &item.source) {
            (Some(pr), Some(sha), _) => {
                self.settled
                    .insert(pr, (sha.clone(), item.landed.is_some(), converged));
            }
            (None, _, Source::Commit(sha)) => self.settled_tip = Some((sha.clone(), converged)),
            _ => {}
        }
    }

    /// Whether a final verdict `state` on `commit` for `stage` is not recorded yet.
    pub fn record_due(&self, commit: &str, stage: &str, state: State) -> bool {
        self.recorded.get(&(commit.to_string(), stage.to_string())) != Some(&state)
    }

    /// Records that `state` on `commit` for `stage` was recorded.
    pub fn recorded(&mut self, commit: &str, stage: &str, state: State) {
        if self.recorded.len() > 10_000 {
            self.recorded.clear();
        }
        self.recorded
            .insert((commit.to_string(), stage.to_string()), state);
    }

    /// Records what a selection left alone; returns the ignored change requests not seen
    /// before, to be logged once.
    pub fn note<'s>(&mut self, selection: &'s Selection<'_>) -> Vec<&'s (u64, String)> {
        if let Some(tip) = &selection.tip_is_promotion {
            self.settled_tip = Some((tip.clone(), None));
        }
        selection
            .ignored
            .iter()
            .filter(|(pr, _)| self.ignored.insert(*pr))
            .collect()
    }

    /// How the item stands: [`Standing::Open`] when its final verdict is not known,
    /// [`Standing::Settled`] when it is (or it converged less than `every` ago),
    /// [`Standing::Rejudge`] when it converged `every` ago or more and `current` (it is what
    /// its stage runs now: the tip, the last merged into its stage).
    fn standing(&self, item: &Item<'_>, (now, every): (i64, Duration), current: bool) -> Standing {
        let found = match (item.change_request, &item.final_sha, &item.source) {
            (Some(pr), Some(sha), _) => self
                .settled
                .get(&pr)
                .filter(|(s, landed, _)| s == sha && *landed == item.landed.is_some())
                .map(|(_, _, converged)| *converged),
            (None, _, Source::Commit(sha)) => self
                .settled_tip
                .as_ref()
                .filter(|(s, _)| s == sha)
                .map(|(_, converged)| *converged),
            _ => None,
        };
        let every = i64::try_from(every.as_secs()).unwrap_or(i64::MAX);
        match found {
            None => Standing::Open,
            Some(Some(at)) if current && now.saturating_sub(at) >= every => Standing::Rejudge,
            Some(_) => Standing::Settled,
        }
    }

    fn read(&self, pr: u64, sha: &str) -> bool {
        self.read.get(&pr).is_some_and(|s| s == sha)
    }

    /// Whether `tip` is due an audit at `now`: it moved since the last, or `every` (the pass
    /// interval) has passed. Each audit reads the tree and lists the namespaces, so it is
    /// not made at every verification round.
    pub fn audit_due(&self, tip: &str, now: i64, every: std::time::Duration) -> bool {
        let every = i64::try_from(every.as_secs()).unwrap_or(i64::MAX);
        !self
            .audited
            .as_ref()
            .is_some_and(|(at, when)| at == tip && now.saturating_sub(*when) < every)
    }

    /// Records an audit of `tip` made at `now`.
    pub fn audited(&mut self, tip: &str, now: i64) {
        self.audited = Some((tip.to_string(), now));
    }

    /// Whether the last audit was made of `tip`, `config` and lists that stand at `lists` now
    /// (`None`: not known to be unchanged): a new one would find what it found.
    pub fn audit_unchanged(&self, tip: &str, config: &Config, lists: Option<Stamp>) -> bool {
        self.made_audit.as_deref().is_some_and(|made| {
            made.tip == tip && Some(made.lists) == lists && &made.config == config
        })
    }

    /// Remembers the audit just made, or forgets the last (`None`: this one may not be reused).
    pub fn made_audit(&mut self, made: Option<MadeAudit>) {
        self.made_audit = made.map(Box::new);
    }
}

/// How an item stands with what is known final ([`Memory::standing`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Standing {
    Open,
    Settled,
    Rejudge,
}

/// What to verify now: the rule of this module's documentation.
pub fn select<'c>(config: &'c Config, facts: &Facts<'_>, memory: &Memory) -> Selection<'c> {
    let young = |landed: Option<i64>| landed.is_some_and(|t| is_young(t, facts.now, facts.grace));
    let mut selection = Selection::default();
    let mut promotion_merges = Vec::new();
    for pr in facts.change_requests {
        let stage = promote::stage_of_branch(config, &pr.head_ref);
        if let Some(why) = not_ours(pr, stage.is_some(), facts.me) {
            selection.ignored.push((pr.number, why));
            continue;
        }
        let wanted = match stage {
            None => config.mode == WriteMode::PullRequest || pr.merged,
            Some(_) => pr.merged,
        };
        if !wanted || !in_flight_at(pr, facts.now) {
            continue;
        }
        let final_sha = match pr.merged {
            true => pr.merge_commit_sha.clone(),
            false => Some(pr.head_sha.clone()),
        };
        if let (Some(_), Some(sha)) = (stage, &final_sha) {
            promotion_merges.push(sha.clone());
        }
        let landed = pr.merged_at.filter(|_| pr.merged);
        let stage_name = stage.map(|s| s.name.as_str());
        let current = pr.merged
            && last_merged(config, facts, stage_name).map(|p| p.number) == Some(pr.number);
        let mut item = Item {
            source: match stage {
                Some(_) => promote::verification_source(pr),
                None => Source::PullRequest(pr.number),
            },
            change_request: Some(pr.number),
            head: Some(pr.head_sha.clone()),
            stage,
            ask_forge: stage.is_none()
                && final_sha
                    .as_deref()
                    .is_some_and(|sha| !memory.read(pr.number, sha)),
            final_sha,
            landed,
            young: young(landed),
        };
        match memory.standing(&item, (facts.now, facts.grace), current) {
            Standing::Settled => {}
            Standing::Open => selection.items.push(item),
            Standing::Rejudge => {
                // Its final status on the forge is the Converged one being judged again.
                item.ask_forge = false;
                selection.items.push(item);
            }
        }
    }
    if config.mode == WriteMode::Commit {
        if let Some(tip) = &facts.tip {
            if promotion_merges.contains(&tip.sha) {
                selection.tip_is_promotion = Some(tip.sha.clone());
            } else {
                let item = Item {
                    source: Source::Commit(tip.sha.clone()),
                    change_request: None,
                    head: None,
                    stage: None,
                    final_sha: None,
                    landed: tip.landed,
                    young: young(tip.landed),
                    ask_forge: false,
                };
                if memory.standing(&item, (facts.now, facts.grace), true) != Standing::Settled {
                    selection.items.push(item);
                }
            }
        }
    }
    selection
}

/// Of the change requests listed, the one into `stage` (`None`: sync's own) merged last, if
/// it is in flight and tagpin's: what the operator's status reports, settled or not.
pub fn last_merged<'p>(
    config: &Config,
    facts: &Facts<'p>,
    stage: Option<&str>,
) -> Option<&'p PullRequestInfo> {
    facts
        .change_requests
        .iter()
        .filter(|pr| pr.merged && in_flight_at(pr, facts.now))
        .filter(|pr| {
            let of = promote::stage_of_branch(config, &pr.head_ref);
            of.map(|s| s.name.as_str()) == stage && not_ours(pr, of.is_some(), facts.me).is_none()
        })
        .max_by_key(|pr| (pr.merged_at, pr.number))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    const NOW: i64 = 1_800_000_000;
    const GRACE: Duration = Duration::from_secs(300);
    const ME: &str = "tagpin-bot";

    fn config(mode: &str) -> Config {
        let text = format!(
            "repository: {{url: /srv/git/gitops.git}}\n\
             forge: {{owner: acme, repo: gitops, token_env: GITHUB_TOKEN}}\n\
             mode: {mode}\n\
             promotion:\n  stages:\n  - name: staging\n    paths: [staging]\n\
             \x20 - name: production\n    paths: [production]\n"
        );
        Config::parse(&text, Path::new("tagpin.yaml")).unwrap()
    }

    fn open(number: u64, head_ref: &str) -> PullRequestInfo {
        PullRequestInfo::sample(number, head_ref)
    }

    fn merged(number: u64, head_ref: &str, seconds_ago: i64) -> PullRequestInfo {
        PullRequestInfo {
            open: false,
            merged: true,
            merge_commit_sha: Some(format!("{:03x}{}", number + 1000, "0".repeat(37))),
            merged_at: Some(NOW - seconds_ago),
            ..open(number, head_ref)
        }
    }

    fn facts(prs: &[PullRequestInfo], tip: Option<Tip>) -> Facts<'_> {
        Facts {
            now: NOW,
            grace: GRACE,
            me: ME,
            change_requests: prs,
            tip,
        }
    }

    fn tip(sha: &str, seconds_ago: i64) -> Option<Tip> {
        Some(Tip {
            sha: sha.into(),
            landed: Some(NOW - seconds_ago),
        })
    }

    /// (change request or tip, young, asks the forge first)
    fn picked(selection: &Selection<'_>) -> Vec<(String, bool, bool)> {
        selection
            .items
            .iter()
            .map(|i| {
                (
                    i.label(ChangeRequestNoun::PullRequest),
                    i.young,
                    i.ask_forge,
                )
            })
            .collect()
    }

    #[test]
    fn pull_request_mode_verifies_open_and_recently_merged_ones_young_only_after_a_fresh_merge() {
        let config = config("pull-request");
        let prs = [
            open(1, "tagpin/main"),
            merged(2, "tagpin/main", 60),
            merged(3, "tagpin/main", 3600),
            merged(4, "tagpin/main", RECENTLY_MERGED.as_secs() as i64),
        ];
        let selection = select(&config, &facts(&prs, tip("f00", 10)), &Memory::default());
        assert_eq!(
            picked(&selection),
            vec![
                ("pull request #1".into(), false, true),
                (
                    format!("pull request #2, merged as {:03x}000000000", 1002),
                    true,
                    true
                ),
                (
                    format!("pull request #3, merged as {:03x}000000000", 1003),
                    false,
                    true
                ),
            ],
            "the tip is not verified in pull-request mode; a merge 24 h old is out"
        );
    }

    #[test]
    fn commit_mode_verifies_the_tip_and_merged_promotions_but_no_open_change_request() {
        let config = config("commit");
        let promotion = merged(5, "tagpin/promote/production", 30);
        let prs = [
            open(1, "tagpin/main"),
            open(6, "tagpin/promote/production"),
            promotion.clone(),
        ];
        let selection = select(&config, &facts(&prs, tip("abc", 600)), &Memory::default());
        assert_eq!(
            picked(&selection),
            vec![
                (format!("commit {:03x}000000000", 1005), true, false),
                ("commit abc".into(), false, false),
            ]
        );
        assert_eq!(
            selection.items[0].stage.map(|s| s.name.as_str()),
            Some("production")
        );
        // The tip that is the promotion's merge is verified as the promotion, once.
        let merge = promotion.merge_commit_sha.clone().unwrap();
        let tip_is_merge = tip(&merge, 30);
        let selection = select(&config, &facts(&prs, tip_is_merge), &Memory::default());
        assert_eq!(selection.items.len(), 1);
        assert_eq!(selection.tip_is_promotion, Some(merge));
    }

    #[test]
    fn forks_foreign_promotions_and_closed_ones_are_left_alone_and_logged_once() {
        let config = config("pull-request");
        let mut fork = open(1, "tagpin/main");
        fork.same_repository = false;
        let mut foreign = merged(2, "tagpin/promote/production", 30);
        foreign.author = "mallory".into();
        let mut colleague = open(3, "tagpin/main");
        colleague.author = "alice".into();
        let mut closed = open(4, "tagpin/main");
        closed.open = false;
        let prs = [fork, foreign, colleague, closed];
        let mut memory = Memory::default();
        let selection = select(&config, &facts(&prs, None), &memory);
        assert_eq!(
            picked(&selection),
            vec![("pull request #3".into(), false, true)]
        );
        let ignored: Vec<u64> = selection.ignored.iter().map(|(n, _)| *n).collect();
        assert_eq!(ignored, vec![1, 2]);
        assert!(selection.ignored[0].1.contains("in a fork"));
        assert!(selection.ignored[1]
            .1
            .contains("opened by mallory, not by tagpin"));
        assert_eq!(memory.note(&selection).len(), 2);
        assert!(memory.note(&selection).is_empty(), "logged once");
    }

    #[test]
    fn a_final_verdict_settles_until_its_commit_changes_and_a_read_status_is_not_read_again() {
        let config = config("pull-request");
        let prs = [open(1, "tagpin/main"), merged(2, "tagpin/main", 60)];
        let mut memory = Memory::default();
        let first = select(&config, &facts(&prs, None), &memory);
        memory.forge_said(&first.items[0], Some(StatusState::Pending), NOW);
        memory.verdict(&first.items[1], State::Progressing, NOW);
        let second = select(&config, &facts(&prs, None), &memory);
        assert_eq!(
            second.items.iter().map(|i| i.ask_forge).collect::<Vec<_>>(),
            vec![false, true],
            "a status read and not final is not read again"
        );
        memory.verdict(&second.items[0], State::Failed, NOW);
        memory.forge_said(&second.items[1], Some(StatusState::Success), NOW);
        assert!(select(&config, &facts(&prs, None), &memory)
            .items
            .is_empty());
        // A push to the open one is a new commit: verified again.
        let mut pushed = prs.clone();
        pushed[0].head_sha = "1".repeat(40);
        let third = select(&config, &facts(&pushed, None), &memory);
        assert_eq!(
            picked(&third),
            vec![("pull request #1".into(), false, true)]
        );
    }

    #[test]
    fn a_fast_forward_merge_of_a_settled_commit_is_verified_again_once_landed() {
        let config = config("pull-request");
        let open_one = [open(1, "tagpin/main")];
        let mut memory = Memory::default();
        let before = select(&config, &facts(&open_one, None), &memory);
        memory.verdict(&before.items[0], State::Failed, NOW);
        assert!(select(&config, &facts(&open_one, None), &memory)
            .items
            .is_empty());
        // Merged by fast-forward: the same commit, landed now; a Failed verdict on it may call
        // for a revert, which a verdict on the open change request never does.
        let landed = [PullRequestInfo {
            merge_commit_sha: Some(open_one[0].head_sha.clone()),
            ..merged(1, "tagpin/main", 60)
        }];
        let after = select(&config, &facts(&landed, None), &memory);
        assert_eq!(
            picked(&after),
            vec![(
                "pull request #1, merged as ".to_string() + &open_one[0].head_sha[..12],
                true,
                true
            )]
        );
    }

    #[test]
    fn a_tip_is_settled_by_a_final_verdict_only_and_young_for_the_grace() {
        let config = config("commit");
        let mut memory = Memory::default();
        let at = |seconds_ago| select(&config, &facts(&[], tip("abc", seconds_ago)), &memory).items;
        assert!(at(0)[0].young);
        assert!(at(299)[0].young);
        assert!(!at(300)[0].young);
        assert!(at(-60)[0].young, "a commit time ahead of the clock");
        let item = at(10).remove(0);
        memory.verdict(&item, State::Progressing, NOW);
        memory.verdict(&item, State::Unverified, NOW);
        assert_eq!(
            select(&config, &facts(&[], tip("abc", 10)), &memory)
                .items
                .len(),
            1
        );
        memory.verdict(&item, State::Converged, NOW);
        assert!(select(&config, &facts(&[], tip("abc", 10)), &memory)
            .items
            .is_empty());
        assert_eq!(
            select(&config, &facts(&[], tip("def", 10)), &memory)
                .items
                .len(),
            1
        );
    }

    #[test]
    fn a_converged_tip_is_judged_again_each_interval_until_the_next_pin_and_failed_stays_final() {
        let config = config("commit");
        let mut memory = Memory::default();
        let at = |memory: &Memory, sha: &str, now: i64| {
            let facts = Facts {
                now,
                ..facts(&[], tip(sha, 10))
            };
            select(&config, &facts, memory).items
        };
        let item = at(&memory, "abc", NOW).remove(0);
        memory.verdict(&item, State::Converged, NOW);
        assert!(
            at(&memory, "abc", NOW + 299).is_empty(),
            "within the interval"
        );
        let again = at(&memory, "abc", NOW + 300);
        assert_eq!(again.len(), 1, "judged again one interval after Converged");
        assert!(!again[0].ask_forge);
        memory.verdict(&again[0], State::Converged, NOW + 300);
        assert!(at(&memory, "abc", NOW + 599).is_empty());
        // An hour later the pods crash-loop: Failed, and final.
        let later = at(&memory, "abc", NOW + 3600).remove(0);
        memory.verdict(&later, State::Failed, NOW + 3600);
        assert!(
            at(&memory, "abc", NOW + 7200).is_empty(),
            "Failed stays final"
        );
        // The next pin is another tip: judged as new.
        assert_eq!(at(&memory, "def", NOW + 7200).len(), 1);
    }

    #[test]
    fn only_the_last_merged_change_request_into_a_stage_is_judged_again_after_converged() {
        let config = config("pull-request");
        let prs = [merged(1, "tagpin/main", 600), merged(2, "tagpin/main", 300)];
        let mut memory = Memory::default();
        let first = select(&config, &facts(&prs, None), &memory);
        for item in &first.items {
            memory.verdict(item, State::Converged, NOW - 300);
        }
        let later = Facts {
            now: NOW + 1,
            ..facts(&prs, None)
        };
        let again = select(&config, &later, &memory);
        assert_eq!(
            again
                .items
                .iter()
                .map(|i| (i.change_request, i.ask_forge))
                .collect::<Vec<_>>(),
            vec![(Some(2), false)],
            "the older merge no longer runs: judging it against the cluster would fail it"
        );
        // A Converged status read after a restart waits one interval too.
        let mut restarted = Memory::default();
        restarted.forge_said(&again.items[0], Some(StatusState::Success), NOW);
        let now = |now| Facts {
            now,
            ..facts(&prs, None)
        };
        let items = |m: &Memory, t| select(&config, &now(t), m).items.len();
        assert_eq!(
            items(&restarted, NOW + 299),
            1,
            "#1 is not settled in this memory"
        );
        assert_eq!(items(&restarted, NOW + 300), 2);
        let mut book = Memory::default();
        book.recorded("abc", "staging", State::Converged);
        assert!(!book.record_due("abc", "staging", State::Converged));
        assert!(book.record_due("abc", "staging", State::Failed));
        assert!(book.record_due("abc", "production", State::Converged));
    }

    #[test]
    fn the_last_merged_is_reported_per_stage_whatever_is_settled() {
        let config = config("pull-request");
        let prs = [
            merged(1, "tagpin/main", 3 * 3600),
            merged(2, "tagpin/main", 3600),
            open(3, "tagpin/main"),
            merged(4, "tagpin/promote/production", 60),
            merged(5, "tagpin/main", 25 * 3600),
        ];
        let facts = facts(&prs, None);
        assert_eq!(
            last_merged(&config, &facts, None).map(|p| p.number),
            Some(2)
        );
        let production = last_merged(&config, &facts, Some("production"));
        assert_eq!(production.map(|p| p.number), Some(4));
        assert_eq!(last_merged(&config, &facts, Some("staging")), None);
    }

    #[test]
    fn labels_name_the_change_request_in_the_forge_s_words() {
        let config = config("pull-request");
        let prs = [open(7, "tagpin/main"), merged(8, "tagpin/main", 60)];
        let selection = select(&config, &facts(&prs, None), &Memory::default());
        let labels: Vec<String> = selection
            .items
            .iter()
            .map(|i| i.label(ChangeRequestNoun::MergeRequest))
            .collect();
        assert_eq!(
            labels,
            vec![
                "merge request !7".to_string(),
                format!("merge request !8, merged as {:03x}000000000", 1008)
            ]
        );
        assert_eq!(selection.items[0].origin(), "open");
        assert_eq!(selection.items[1].origin(), "merged");
    }

    /// A promotion pull request opened by `author`, from this repository or a fork.
    fn by(author: &str, same_repository: bool) -> PullRequestInfo {
        PullRequestInfo {
            author: author.into(),
            same_repository,
            ..open(7, "tagpin/promote/production")
        }
    }

    #[test]
    fn forks_and_promotions_tagpin_did_not_open_are_not_verified() {
        assert_eq!(not_ours(&by("tagpin-bot", true), true, "tagpin-bot"), None);
        // Sync adopts a collaborator's pull request on its branch; a promotion is tagpin's.
        assert_eq!(not_ours(&by("alice", true), false, "tagpin-bot"), None);
        let promotion = not_ours(&by("alice", true), true, "tagpin-bot").unwrap();
        assert!(
            promotion.contains("opened by alice, not by tagpin"),
            "{promotion}"
        );
        for promotion in [false, true] {
            let fork = not_ours(&by("tagpin-bot", false), promotion, "tagpin-bot").unwrap();
            assert!(fork.contains("in a fork"), "{fork}");
        }
    }

    fn merged_minutes(minutes_ago: i64, now: i64) -> PullRequestInfo {
        PullRequestInfo {
            open: false,
            merged: true,
            merged_at: Some(now - minutes_ago * 60),
            ..by("tagpin-bot", true)
        }
    }

    #[test]
    fn a_pull_request_merged_within_the_window_is_verified_one_merged_before_it_is_not() {
        let now = 1_800_000_000;
        let window = (RECENTLY_MERGED.as_secs() / 60) as i64;
        assert!(in_flight_at(&merged_minutes(1, now), now));
        assert!(in_flight_at(&merged_minutes(window - 1, now), now));
        assert!(!in_flight_at(&merged_minutes(window, now), now));
        assert!(!in_flight_at(&merged_minutes(window + 1, now), now));
        // The forge is asked for exactly that window.
        assert_eq!(merged_since(now), now - window * 60);
        // Open: in flight however old; closed unmerged: never.
        assert!(in_flight_at(&by("tagpin-bot", true), now));
        let closed = PullRequestInfo {
            open: false,
            ..by("tagpin-bot", true)
        };
        assert!(!in_flight_at(&closed, now));
    }
}
