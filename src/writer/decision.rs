//! The decision table for a group's change request: open one, bring the open one to this
//! proposal, or leave a person's "no" (closed unmerged, same digests) standing. Pure: what the
//! forge listed in, a decision out; [`super::propose`] carries it out.

use crate::forge::PullRequestInfo;
use crate::proposal::PlanBlock;

/// What to do about the pull request of one group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrDecision {
    /// No pull request is open, and a person closed one (unmerged) that proposed exactly these
    /// digests: their "no" stands until a digest moves.
    LeaveClosed { number: u64 },
    /// No pull request is open: push the branch and open one.
    Open,
    /// A pull request is open on the branch (tagpin's, or one a person opened from it, which
    /// tagpin adopts): bring it to this proposal.
    Update {
        number: u64,
        /// The branch does not carry exactly this change on the current tip yet.
        push: bool,
        /// Its title or plan block differ from this proposal.
        edit: bool,
        /// It proposed other digests, which this proposal replaces.
        supersedes: bool,
        /// Configured labels it lacks.
        missing_labels: Vec<String>,
    },
}

/// The decision table for a group's pull request. `prs` are the pull requests from the group's
/// branch into the target (open or closed); `branch_carries` says whether the branch already
/// holds exactly this change on top of the current tip.
pub fn decide_pr(
    block: &PlanBlock,
    title: &str,
    labels: &[String],
    prs: &[PullRequestInfo],
    branch_carries: bool,
) -> PrDecision {
    let proposed = |pr: &PullRequestInfo| crate::proposal::body::parse(&pr.body);
    match prs.iter().find(|p| p.open) {
        Some(pr) => {
            let theirs = proposed(pr);
            PrDecision::Update {
                number: pr.number,
                push: !branch_carries,
                edit: pr.title != title || theirs.as_ref() != Some(block),
                supersedes: theirs.is_some_and(|b| b.promises() != block.promises()),
                missing_labels: labels
                    .iter()
                    .filter(|l| !pr.labels.contains(l))
                    .cloned()
                    .collect(),
            }
        }
        None => {
            let closed_same = prs.iter().find(|p| {
                !p.open && !p.merged && proposed(p).map(|b| b.promises()) == Some(block.promises())
            });
            match closed_same {
                Some(pr) => PrDecision::LeaveClosed { number: pr.number },
                None => PrDecision::Open,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proposal::Pin;

    fn digest(c: char) -> crate::reference::Digest {
        format!("sha256:{}", c.to_string().repeat(64))
            .parse()
            .unwrap()
    }

    fn block(d: char) -> PlanBlock {
        PlanBlock {
            version: crate::proposal::PLAN_VERSION,
            target: "main".into(),
            pins: vec![Pin {
                file: "apps/web.yaml".into(),
                workload: "shop/Deployment/web".parse().unwrap(),
                container: "app".into(),
                image: "ghcr.io/acme/web:1".into(),
                new_value: format!("ghcr.io/acme/web:1@{}", digest(d)),
                new_digest: digest(d),
                old_digest: None,
                old_tag: None,
                new_tag: None,
            }],
        }
    }

    fn pr(number: u64, open: bool, merged: bool, proposes: &PlanBlock) -> PullRequestInfo {
        PullRequestInfo {
            number,
            open,
            merged,
            title: "Pin 1 image(s) to digests".into(),
            body: crate::proposal::body::render(proposes),
            labels: vec!["tagpin".into()],
            url: format!("https://github.example/pull/{number}"),
            head_ref: "tagpin/main".into(),
            head_sha: "0".repeat(40),
            merge_commit_sha: None,
            merged_at: None,
            updated_at: None,
            author: "tagpin-bot".into(),
            same_repository: true,
        }
    }

    const TITLE: &str = "Pin 1 image(s) to digests";

    #[test]
    fn without_any_pull_request_one_is_opened() {
        assert_eq!(
            decide_pr(&block('a'), TITLE, &[], &[], false),
            PrDecision::Open
        );
    }

    #[test]
    fn a_pull_request_closed_by_hand_for_the_same_digests_stays_closed() {
        let prs = [pr(7, false, false, &block('a'))];
        assert_eq!(
            decide_pr(&block('a'), TITLE, &[], &prs, false),
            PrDecision::LeaveClosed { number: 7 }
        );
    }

    #[test]
    fn new_digests_open_a_new_pull_request_after_one_closed_by_hand_or_merged() {
        let closed = [pr(7, false, false, &block('a'))];
        assert_eq!(
            decide_pr(&block('b'), TITLE, &[], &closed, false),
            PrDecision::Open
        );
        let merged = [pr(8, false, true, &block('a'))];
        assert_eq!(
            decide_pr(&block('a'), TITLE, &[], &merged, false),
            PrDecision::Open
        );
    }

    #[test]
    fn an_open_pull_request_for_other_digests_is_superseded_in_place() {
        let prs = [pr(3, true, false, &block('a'))];
        let labels = ["tagpin".to_string(), "deps".to_string()];
        assert_eq!(
            decide_pr(&block('b'), TITLE, &labels, &prs, false),
            PrDecision::Update {
                number: 3,
                push: true,
                edit: true,
                supersedes: true,
                missing_labels: vec!["deps".into()],
            }
        );
    }

    #[test]
    fn an_open_pull_request_already_proposing_this_is_left_as_it_is() {
        let prs = [pr(3, true, false, &block('a'))];
        assert_eq!(
            decide_pr(&block('a'), TITLE, &["tagpin".into()], &prs, true),
            PrDecision::Update {
                number: 3,
                push: false,
                edit: false,
                supersedes: false,
                missing_labels: vec![],
            }
        );
    }

    #[test]
    fn a_pull_request_a_person_opened_from_the_branch_is_adopted() {
        let mut theirs = pr(4, true, false, &block('a'));
        theirs.body = "my own words".into();
        theirs.labels.clear();
        match decide_pr(&block('a'), TITLE, &["tagpin".into()], &[theirs], false) {
            PrDecision::Update {
                number: 4,
                push: true,
                edit: true,
                supersedes: false,
                missing_labels,
            } => assert_eq!(missing_labels, ["tagpin"]),
            other => panic!("{other:?}"),
        }
    }
}
