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
use crate::reference::Reference;
use crate::resolution::{ResolveKey, ResolveResult};

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

#[cfg(test)]
mod tests {
    use super::*;

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

    /// `files` grouped per image in `mode`, nothing resolved and nothing followed.
    fn per_image(files: &[ScannedFile], mode: WriteMode) -> Grouped {
        group(
            files,
            &BTreeMap::new(),
            &Follow::default(),
            Grouping::PerImage,
            mode,
        )
    }

    #[test]
    fn per_image_groups_split_by_repository_and_keep_every_problem_once() {
        let files = [scanned("a.yaml", &["nginx:1", "redis:7", "Not_A_Ref!"])];
        let grouped = per_image(&files, WriteMode::PullRequest);
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
        let grouped = per_image(&files, WriteMode::Commit);
        assert_eq!(grouped.groups.len(), 1);
        assert_eq!(grouped.groups[0].0, Group::All);
    }
}
