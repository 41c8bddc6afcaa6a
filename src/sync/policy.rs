//! The decisions of a sync pass, as pure functions: how changes are grouped, which branch a
//! group goes on, and what to do with the pull requests already there.
//!
//! [`super::Syncer`] only gathers the inputs (files, registry answers, the forge's pull
//! requests, what the branch holds) and carries out the decision, so every rule here is tested
//! with plain data.

use std::collections::BTreeMap;

use crate::config::{Grouping, WriteMode};
use crate::plan::{self, Plan, ScannedFile};
use crate::policy::Follow;
use crate::proposal::PlanBlock;
use crate::reference::Reference;
use crate::resolution::{ResolveKey, ResolveResult};
use crate::review::PullRequestInfo;

/// The changes of one pull request (or one commit).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Group {
    /// Everything in one change.
    All,
    /// One image repository (normalized name), when grouping per image in pull-request mode.
    Image(String),
}

impl std::fmt::Display for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Group::All => f.write_str("all"),
            Group::Image(name) => f.write_str(name),
        }
    }
}

/// The plan of a whole pass, and the plan of each group.
///
/// Problems (unresolved images, unparseable references) belong to the pass, not to a group:
/// they are read from [`Grouped::whole`], once, whatever the grouping.
pub struct Grouped {
    pub whole: Plan,
    pub groups: Vec<(Group, Plan)>,
}

/// Plans the pass and splits it into groups. Commit mode always makes one group: a commit per
/// image would only multiply the pushes that can race.
pub fn group(
    files: &[ScannedFile],
    resolutions: &BTreeMap<ResolveKey, ResolveResult>,
    follow: &Follow,
    grouping: Grouping,
    mode: WriteMode,
) -> Grouped {
    let whole = plan::plan(files, resolutions, follow);
    let groups = match (grouping, mode) {
        (Grouping::Single, _) | (_, WriteMode::Commit) => vec![(Group::All, whole.clone())],
        (Grouping::PerImage, WriteMode::PullRequest) => {
            let name_of = |value: &str| Reference::parse(value).ok().map(|r| r.canonical_name());
            let mut names: Vec<String> = files
                .iter()
                .flat_map(|f| f.fields.iter())
                .filter_map(|f| name_of(&f.value))
                .collect();
            names.sort();
            names.dedup();
            names
                .into_iter()
                .map(|name| {
                    let only: Vec<ScannedFile> = files
                        .iter()
                        .map(|f| ScannedFile {
                            path: f.path.clone(),
                            source: f.source.clone(),
                            fields: f
                                .fields
                                .iter()
                                .filter(|field| name_of(&field.value).as_ref() == Some(&name))
                                .cloned()
                                .collect(),
                        })
                        .filter(|f| !f.fields.is_empty())
                        .collect();
                    (Group::Image(name), plan::plan(&only, resolutions, follow))
                })
                .collect()
        }
    };
    Grouped { whole, groups }
}

/// `tagpin/main`, or `tagpin/main/ghcr.io-acme-web` for one image: characters Git refs or
/// people would trip on become `-`.
pub fn pr_branch(prefix: &str, target: &str, group: &Group) -> String {
    let base = format!("{prefix}{target}");
    match group {
        Group::All => base,
        Group::Image(name) => {
            let safe: String = name
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_' {
                        c
                    } else {
                        '-'
                    }
                })
                .collect();
            format!("{base}/{safe}")
        }
    }
}

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
    let proposed = |pr: &PullRequestInfo| crate::forge::body::parse(&pr.body);
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
            body: crate::forge::body::render(proposes),
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

    #[test]
    fn branches_are_named_per_group_with_safe_characters() {
        assert_eq!(pr_branch("tagpin/", "main", &Group::All), "tagpin/main");
        assert_eq!(
            pr_branch("tagpin/", "main", &Group::Image("ghcr.io/acme/web".into())),
            "tagpin/main/ghcr.io-acme-web"
        );
    }

    fn scanned(path: &str, images: &[&str]) -> ScannedFile {
        let mut text =
            String::from("apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n");
        for (i, image) in images.iter().enumerate() {
            text.push_str(&format!("  - name: c{i}\n    image: {image}\n"));
        }
        let outcome = crate::manifest::scan(std::path::Path::new(path), text.as_bytes()).unwrap();
        ScannedFile {
            path: path.into(),
            source: text.into_bytes(),
            fields: outcome.fields,
        }
    }

    #[test]
    fn per_image_groups_split_by_repository_and_keep_every_problem_once() {
        let files = [scanned("a.yaml", &["nginx:1", "redis:7", "Not_A_Ref!"])];
        let grouped = group(
            &files,
            &BTreeMap::new(),
            &Follow::default(),
            Grouping::PerImage,
            WriteMode::PullRequest,
        );
        let names: Vec<String> = grouped.groups.iter().map(|(g, _)| g.to_string()).collect();
        assert_eq!(
            names,
            ["docker.io/library/nginx", "docker.io/library/redis"]
        );
        // The reference that does not parse is not dropped: the pass reports it, once.
        assert_eq!(
            grouped.whole.problems.len(),
            3,
            "{:?}",
            grouped.whole.problems
        );
        assert!(grouped
            .whole
            .problems
            .iter()
            .any(|p| p.to_string().contains("a.yaml:12:")));
    }

    #[test]
    fn commit_mode_is_one_group_whatever_the_grouping() {
        let files = [scanned("a.yaml", &["nginx:1", "redis:7"])];
        let grouped = group(
            &files,
            &BTreeMap::new(),
            &Follow::default(),
            Grouping::PerImage,
            WriteMode::Commit,
        );
        assert_eq!(grouped.groups.len(), 1);
        assert_eq!(grouped.groups[0].0, Group::All);
    }
}
