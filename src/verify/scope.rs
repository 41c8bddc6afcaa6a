//! The GitOps scope of a check: what it needs to consult Argo CD Applications and Flux
//! Kustomizations (see `judge/gitops.rs`), the repository they must apply and a mirror to ask
//! which applied revisions come at or after the pin commit. Without a scope, or without such an
//! object, a check is what it always was.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};

use crate::config::{Config, GitOpsObjects};
use crate::git::{GitError, Mirror};

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
}
