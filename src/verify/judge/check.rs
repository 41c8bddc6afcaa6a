//! What a check is judged against and what it found: the [`Expectations`] gathered from Git
//! (and the forge), and the [`Check`] that sums up every verdict, counting what could not be
//! checked so that it is never reported Converged.

use std::collections::{BTreeMap, BTreeSet};

use super::expected::{Expected, NotVerified};
use super::gitops;
use super::helm;
use super::verdict::{self, State, Verdict};
use crate::verify::scope::GitOpsScope;
use crate::workload::WorkloadId;

/// What to verify and where to report it.
#[derive(Debug, Clone, Default)]
pub struct Expectations {
    pub expected: Vec<Expected>,
    /// Pins that cannot be checked against a live workload, with the reason.
    pub not_verified: Vec<NotVerified>,
    /// Manifests that could not be read or parsed (file:line:column): they may hold pins, so
    /// nothing about them is Converged.
    pub failures: Vec<String>,
    /// Files and fields passed over on purpose, as `plan` and `sync` list them.
    pub skipped: Vec<crate::pipeline::Skipped>,
    /// Commits to put the `tagpin/converged` status on: the PR head, and its merge commit.
    pub commits: Vec<String>,
    /// The branch each of `commits` is reported on, where tagpin knows it: an open change
    /// request's source branch; the target branch once it is merged (its source branch may
    /// be gone); the branch named or configured for a branch or commit. GitLab attaches a
    /// status to one ref, and without one picks the first branch holding the commit.
    pub commit_branches: BTreeMap<String, String>,
    /// The files that pin each expected workload (by live identity), to find the GitOps
    /// objects that apply them by their path.
    pub pinned_in: BTreeMap<WorkloadId, BTreeSet<String>>,
    /// How each check consults GitOps objects; `None` leaves checks as they were.
    pub gitops: Option<GitOpsScope>,
    /// Images pinned in Helm values, verified through the releases that deploy them (see
    /// [`helm`]).
    pub helm: Vec<helm::HelmPin>,
}

impl Expectations {
    /// The branch `sha`'s status is reported on, when known.
    pub fn branch_of(&self, sha: &str) -> Option<&str> {
        self.commit_branches.get(sha).map(String::as_str)
    }

    /// What no verdict will cover.
    pub fn unchecked(&self) -> verdict::Unchecked {
        verdict::Unchecked {
            images: self.not_verified.len(),
            files: self.failures.len(),
        }
    }
}

/// The outcome of one check of every expectation.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Check {
    pub state: State,
    pub summary: String,
    pub verdicts: Vec<Verdict>,
    /// What the Argo CD Applications and Flux Kustomizations that apply the pins said.
    #[serde(skip_serializing_if = "gitops::Findings::is_empty")]
    pub gitops: gitops::Findings,
}

impl Check {
    /// The state and headline once what could not be checked is counted: pins with no live
    /// workload and manifests that could not be read keep the verdict from Converged.
    pub(crate) fn judged(
        verdicts: Vec<Verdict>,
        expectations: &Expectations,
        gitops: gitops::Findings,
    ) -> Check {
        let unchecked = unchecked(expectations, &gitops);
        let (state, summary) = verdict::summarize(&verdicts, unchecked);
        Check {
            state,
            summary,
            verdicts,
            gitops,
        }
    }

    /// What no verdict covers: the expectations' pins and files, and the pins no GitOps object
    /// could place on a live workload.
    pub fn unchecked(&self, expectations: &Expectations) -> verdict::Unchecked {
        unchecked(expectations, &self.gitops)
    }

    /// The container restarts of the pods on the pinned digests, summed over every verdict:
    /// what a soak with `soak_restarts` counts.
    pub fn restarts(&self) -> u64 {
        self.verdicts.iter().map(|v| v.restarts).sum()
    }

    /// The names of the workloads whose containers restarted, most restarts first.
    pub fn restarted(&self) -> Vec<String> {
        let mut by_workload: BTreeMap<&str, u64> = BTreeMap::new();
        for verdict in self.verdicts.iter().filter(|v| v.restarts > 0) {
            *by_workload
                .entry(verdict.workload.name.as_str())
                .or_default() += verdict.restarts;
        }
        let mut named: Vec<(&str, u64)> = by_workload.into_iter().collect();
        named.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        named
            .into_iter()
            .map(|(name, _)| name.to_string())
            .collect()
    }

    /// Every pin that was not checked, with its reason.
    pub fn not_verified<'a>(
        &'a self,
        expectations: &'a Expectations,
    ) -> impl Iterator<Item = &'a NotVerified> {
        expectations
            .not_verified
            .iter()
            .chain(&self.gitops.not_verified)
    }
}

fn unchecked(expectations: &Expectations, gitops: &gitops::Findings) -> verdict::Unchecked {
    let mut unchecked = expectations.unchecked();
    unchecked.images += gitops.not_verified.len();
    unchecked
}
