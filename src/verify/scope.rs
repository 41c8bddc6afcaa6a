//! The GitOps scope of a check: what it needs to consult Argo CD Applications and Flux
//! Kustomizations (see `judge/gitops.rs`), the repository they must apply and a mirror to ask
//! which applied revisions come at or after the pin commit, and which dry commit a hydrated
//! commit of Argo CD's Source Hydrator was rendered from (`judge/hydrator.rs`). Without a
//! scope, or without such an object, a check is what it always was.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use crate::config::{valid_branch_name, Config, GitOpsObjects};
use crate::git::{GitError, Mirror};
use crate::render::Lookup;

use super::judge::gitops;
use super::judge::hydrator::HydratedCommit;

/// What a check needs to consult the GitOps objects: the repository they must apply, the
/// objects the configuration names, and the mirror, to ask which applied revisions come at or
/// after the pin commit.
#[derive(Clone)]
pub struct GitOpsScope {
    pub(super) repository_url: String,
    branch: String,
    branch_prefix: String,
    pub(super) named: GitOpsObjects,
    mirror: Arc<Mutex<Mirror>>,
}

impl std::fmt::Debug for GitOpsScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GitOpsScope")
            .field(
                "repository_url",
                &crate::git::redact_url(&self.repository_url),
            )
            .field("branch", &self.branch)
            .field("named", &self.named)
            .finish_non_exhaustive()
    }
}

impl GitOpsScope {
    pub(super) fn new(config: &Config, mirror: &Mirror) -> Result<GitOpsScope, GitError> {
        Ok(GitOpsScope {
            repository_url: config.repository.url.clone(),
            branch: config.repository.branch.clone(),
            branch_prefix: config.pull_request.branch_prefix.clone(),
            named: config.verify.gitops.clone(),
            mirror: Arc::new(Mutex::new(mirror.try_clone()?)),
        })
    }

    /// For each revision, whether it is one of `commits` or comes after one. Revisions the
    /// mirror does not hold (the tool may have applied a commit pushed since the last fetch)
    /// are fetched once; one still unknown is not after the pin.
    pub(super) fn descends(
        &self,
        revisions: &BTreeSet<String>,
        commits: &[String],
    ) -> BTreeMap<String, bool> {
        let mirror = self.mirror.lock().unwrap_or_else(PoisonError::into_inner);
        let ask = |revision: &str| -> Option<bool> {
            let mut unknown = false;
            for commit in commits {
                match mirror.is_descendant_or_equal(revision, commit) {
                    Ok(Some(true)) => return Some(true),
                    Ok(Some(false)) => {}
                    Ok(None) => unknown = true,
                    Err(e) => {
                        tracing::debug!("is {revision} after {commit}? {e}");
                        unknown = true;
                    }
                }
            }
            (!unknown).then_some(false)
        };
        let mut answers: BTreeMap<String, Option<bool>> =
            revisions.iter().map(|r| (r.clone(), ask(r))).collect();
        if answers.values().any(Option::is_none) {
            if let Err(e) = mirror.fetch(&self.branch, &self.branch_prefix) {
                tracing::warn!(
                    "cannot fetch {} to compare GitOps revisions: {e}",
                    self.branch
                );
            }
            for (revision, answer) in answers.iter_mut().filter(|(_, a)| a.is_none()) {
                *answer = ask(revision);
            }
        }
        answers
            .into_iter()
            .map(|(revision, answer)| (revision, answer.unwrap_or(false)))
            .collect()
    }

    /// For each hydrated commit, the dry commit of this repository it was rendered from, as
    /// the commit's `hydrator.metadata` says (see [`HydratedCommit::metadata_files`]). A commit
    /// the mirror does not hold is fetched once, with its branch (Argo CD's hydrated branches
    /// are not the configured one). One still unknown, or whose files name no dry commit of
    /// this repository, is left out: its Application then waits, saying so.
    pub(super) fn dry_commits(
        &self,
        hydrated: &BTreeSet<HydratedCommit>,
    ) -> BTreeMap<String, String> {
        let mirror = self.mirror.lock().unwrap_or_else(PoisonError::into_inner);
        let mut fetched = BTreeSet::new();
        let mut found = BTreeMap::new();
        for commit in hydrated {
            let mut dry = self.dry_commit(&mirror, commit);
            if dry == Err(Unread::NotHeld)
                && valid_branch_name(&commit.branch)
                && fetched.insert(commit.branch.as_str())
            {
                if let Err(e) = mirror.fetch(&commit.branch, &self.branch_prefix) {
                    tracing::warn!(
                        "cannot fetch the hydrated branch {} to read the dry commit of {}: {e}",
                        commit.branch,
                        commit.commit
                    );
                }
                dry = self.dry_commit(&mirror, commit);
            }
            match dry {
                Ok(dry) => {
                    found.insert(commit.commit.clone(), dry);
                }
                Err(why) => tracing::debug!(
                    "the dry commit of hydrated commit {} on {}: {why:?}",
                    commit.commit,
                    commit.branch
                ),
            }
        }
        found
    }

    /// The dry commit `hydrated`'s metadata files name, the first that names one of this
    /// repository.
    fn dry_commit(&self, mirror: &Mirror, hydrated: &HydratedCommit) -> Result<String, Unread> {
        let commit = hydrated.commit.as_str();
        let full = (commit.len() == 40 || commit.len() == 64)
            && commit.bytes().all(|b| b.is_ascii_hexdigit());
        let oid = git2::Oid::from_str(commit)
            .ok()
            .filter(|_| full)
            .ok_or(Unread::NotACommit)?;
        for file in hydrated.metadata_files() {
            match mirror.read_path(oid, Path::new(&file)) {
                Ok(Lookup::File(bytes)) => {
                    if let Some(dry) = gitops::dry_commit_in(&bytes, &self.repository_url) {
                        return Ok(dry);
                    }
                }
                Ok(_) => {}
                Err(_) => return Err(Unread::NotHeld),
            }
        }
        Err(Unread::NoMetadata)
    }
}

/// Why a hydrated commit's dry commit is not known.
#[derive(Debug, PartialEq, Eq)]
enum Unread {
    /// `status.sync.revision` is not a full commit id.
    NotACommit,
    /// The mirror does not hold the commit (or cannot read it).
    NotHeld,
    /// No `hydrator.metadata` of the commit names a dry commit of this repository.
    NoMetadata,
}
