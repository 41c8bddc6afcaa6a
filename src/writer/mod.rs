//! The one way tagpin writes a planned change to the GitOps repository, shared by `sync` and
//! `promote` so both treat races, adopted pull requests and hand edits alike.
//!
//! - Commit mode, [`commit`]: commit the change on the tip it was planned on and fast-forward
//!   the branch to it. Never forced: if the branch moved since it was read, the push fails as a
//!   lost race.
//! - Pull-request mode, [`propose`]: put the change on a tagpin-owned branch (with a lease on the
//!   tip tagpin saw) and open, update or leave alone its pull request. A branch whose tip tagpin
//!   did not write ([`Mirror::is_own_commit`]) is never pushed over; the pull request says so,
//!   once ([`HAND_EDIT_MARKER`]).
//!
//! With `forge.api_commits` (GitHub), the same commit is made through GitHub's API instead of
//! pushed ([`commit_through_api`]), so GitHub signs it; the branches move by the same rules.
//!
//! A lost race is not a failure of the change: the caller's pass loop asks
//! [`crate::sync::retry_after`], which has it fetch, plan again on the new tip and write again,
//! up to [`crate::sync::MAX_PUSH_ATTEMPTS`] attempts. What a write did is an [`Outcome`]; why it
//! failed, a [`WriteError`] (Git or forge), which `sync` and `promote` wrap as their own.

use std::path::PathBuf;

use crate::config::Author;
use crate::forge::github::{ApiCommit, ApiFile, GitHub, Moved, RefMove};
use crate::forge::ForgeError;
use crate::forge::{ChangeRequestNoun, ForgeClient, PullRequestInfo};
use crate::git::{off_runtime, owned_message, Expect, GitError, Mirror};
use crate::plan::FilePlan;
use crate::proposal::PlanBlock;

use decision::PrDecision;
use serde::Serialize;

pub mod decision;

/// Why a write failed: the Git or forge error, as it is. A push that lost a race is
/// [`GitError::NonFastForward`], which the pass loop answers by planning again
/// ([`crate::sync::retry_after`]).
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error(transparent)]
    Git(#[from] GitError),
    #[error(transparent)]
    Forge(#[from] ForgeError),
}

/// What happened to one group of changes (the whole pass, or one image when grouped).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    NothingToDo,
    Committed {
        branch: String,
        commit: String,
        attempts: u32,
    },
    PullRequestOpened {
        number: u64,
        url: String,
        branch: String,
    },
    PullRequestUpdated {
        number: u64,
        url: String,
        branch: String,
    },
    PullRequestUnchanged {
        number: u64,
        url: String,
        branch: String,
    },
    /// A person closed the pull request for exactly these digests; it is not reopened.
    ClosedByHand {
        number: u64,
        branch: String,
    },
    DryRun {
        branch: String,
        title: String,
        body: String,
    },
    /// The open pull request's branch ends with a commit tagpin did not write: nothing is
    /// pushed or edited until the pull request is closed or the branch is reset.
    EditedByHand {
        number: u64,
        url: String,
        branch: String,
        /// The tip tagpin found there.
        commit: String,
    },
    /// This group could not be proposed; the others were. Also in the pass's failures.
    Failed {
        branch: String,
        reason: String,
    },
}

impl Outcome {
    /// `PullRequestUpdated` when the pass changed the pull request, else
    /// `PullRequestUnchanged`.
    pub fn pull_request(changed: bool, number: u64, url: String, branch: String) -> Outcome {
        if changed {
            Outcome::PullRequestUpdated {
                number,
                url,
                branch,
            }
        } else {
            Outcome::PullRequestUnchanged {
                number,
                url,
                branch,
            }
        }
    }
}

/// A planned change: the files it writes, on the tip of the target branch it was planned on.
pub struct Planned<'p> {
    pub tip: git2::Oid,
    pub updates: &'p [(PathBuf, Vec<u8>)],
    pub message: &'p str,
}

/// The new content of each file a plan changes, as [`Planned::updates`] takes it.
pub fn updates(files: &[FilePlan]) -> Vec<(PathBuf, Vec<u8>)> {
    files
        .iter()
        .map(|f| (f.path.clone(), f.updated.clone()))
        .collect()
}

/// Commits `change` on the tip it was planned on and fast-forwards `branch` to it (commit
/// mode): through the forge's API when it makes tagpin's commits (`forge.api_commits`), else
/// in the mirror and pushed. A branch that moved since gives [`GitError::NonFastForward`], for
/// [`crate::sync::retry_after`].
/// `attempt` is the pass's attempt number, reported in the outcome.
pub async fn commit(
    mirror: &Mirror,
    author: &Author,
    forge: Option<&ForgeClient>,
    branch: &str,
    change: &Planned<'_>,
    attempt: u32,
) -> Result<Outcome, WriteError> {
    let commit = match forge.and_then(ForgeClient::commits_through_api) {
        Some(github) => {
            commit_through_api(mirror, github, branch, change, RefMove::FastForward).await?
        }
        None => off_runtime(|| {
            // Signed with the tree trailer, as on tagpin's own branches: what tagpin pinned
            // last can be read back from the branch (see `Mirror::last_own_commit`).
            let commit = mirror.commit_owned(change.tip, change.updates, author, change.message)?;
            mirror.push(commit, branch, Expect::FastForwardFrom(change.tip))?;
            Ok::<_, GitError>(commit.to_string())
        })?,
    };
    Ok(Outcome::Committed {
        branch: branch.to_string(),
        commit,
        attempts: attempt,
    })
}

/// A change to propose on a tagpin-owned branch, as a pull request into `target`.
pub struct Proposal<'p> {
    pub branch: &'p str,
    pub target: &'p str,
    pub block: &'p PlanBlock,
    pub title: &'p str,
    pub body: &'p str,
    /// Edit an open pull request whose body differs from `body` even when its plan block is
    /// the same (a promotion's evidence changes while its digests do not). Off for `sync`, so
    /// a person's note in the body survives until the digests move.
    pub refresh_body: bool,
    pub labels: &'p [String],
    /// What the branch must hold: this change on the target's tip it was planned on.
    pub change: Planned<'p>,
}

/// Carries out [`decision::decide_pr`] for one proposal: pushes the branch when it does not carry
/// the change yet, then opens, updates or leaves alone its pull request.
pub async fn propose(
    mirror: &Mirror,
    forge: &ForgeClient,
    author: &Author,
    p: &Proposal<'_>,
) -> Result<Outcome, WriteError> {
    let prs = forge.pull_requests_for(p.branch, p.target).await?;
    // Whether the branch already carries exactly this change on this tip, and whether its tip
    // is someone else's work.
    let existing = mirror.tip(p.branch);
    let (carries, by_hand) = off_runtime(|| {
        let wanted_tree = mirror.tree_with(p.change.tip, p.change.updates)?;
        Ok::<_, GitError>(match existing {
            Some(commit) => (
                mirror.tree_and_parent(commit)? == (wanted_tree, Some(p.change.tip)),
                !mirror.is_own_commit(commit)?,
            ),
            None => (false, false),
        })
    })?;
    let push = |needed: bool| async move {
        match (needed, forge.commits_through_api()) {
            (false, _) => Ok(()),
            (true, Some(github)) => {
                let existing = existing.map(|c| c.to_string());
                let lease = RefMove::Lease(existing.as_deref());
                commit_through_api(mirror, github, p.branch, &p.change, lease).await?;
                Ok(())
            }
            (true, None) => off_runtime(|| push_change(mirror, author, p, existing)),
        }
    };
    let branch = p.branch.to_string();
    match decision::decide_pr(p.block, p.title, p.labels, &prs, carries) {
        PrDecision::LeaveClosed { number } => Ok(Outcome::ClosedByHand { number, branch }),
        PrDecision::Update {
            number,
            push: needs_push,
            edit,
            missing_labels,
            ..
        } => {
            let pr = prs.iter().find(|pr| pr.number == number);
            let url = pr.map(|pr| pr.url.clone()).unwrap_or_default();
            if let (true, true, Some(commit)) = (needs_push, by_hand, existing) {
                // Pushing would replace a person's work, and editing the body would promise
                // what the branch does not hold: leave the pull request to them.
                let noun = forge.noun();
                tracing::warn!(
                    "{}: {} ends with {commit}, which tagpin did not write; not pushing over it",
                    noun.name(number),
                    p.branch
                );
                let note = hand_edit_note(noun, p.branch, &commit.to_string());
                forge
                    .upsert_comment(number, HAND_EDIT_MARKER, &note)
                    .await?;
                return Ok(Outcome::EditedByHand {
                    number,
                    url,
                    branch,
                    commit: commit.to_string(),
                });
            }
            let stale_body =
                p.refresh_body && pr.is_some_and(|pr| pr.body != forge.stored_body(p.body));
            let edit = edit || stale_body;
            push(needs_push).await?;
            if edit {
                forge.update_pull_request(number, p.title, p.body).await?;
            }
            if !missing_labels.is_empty() {
                forge.add_labels(number, &missing_labels).await?;
            }
            Ok(Outcome::pull_request(
                edit || needs_push,
                number,
                url,
                branch,
            ))
        }
        PrDecision::Open => {
            push(!carries).await?;
            let pr: PullRequestInfo = forge
                .open_pull_request(p.branch, p.target, p.title, p.body)
                .await?;
            if !p.labels.is_empty() {
                forge.add_labels(pr.number, p.labels).await?;
            }
            Ok(Outcome::PullRequestOpened {
                number: pr.number,
                url: pr.url,
                branch,
            })
        }
    }
}

/// Finds tagpin's "edited by hand" comment among a pull request's comments, so it is posted
/// once however many passes find the branch edited.
pub const HAND_EDIT_MARKER: &str = "<!-- tagpin-edited-by-hand -->";

/// The comment on a change request whose branch a person changed, in the forge's words.
fn hand_edit_note(noun: ChangeRequestNoun, branch: &str, commit: &str) -> String {
    let cr = noun.word();
    format!(
        "{HAND_EDIT_MARKER}\n**tagpin has stopped updating this {cr}.** Its branch `{branch}` now ends with commit {commit}, which tagpin did not write, so tagpin will not push over it.\n\nTo hand the branch back, close this {cr} (tagpin proposes the next digests on a new one) or reset `{branch}` to a commit tagpin wrote.\n"
    )
}

/// Commits the change on its tip and moves tagpin's branch to it, with a lease on the tip
/// tagpin saw (`existing`): a push to the branch since the fetch is never overwritten.
fn push_change(
    mirror: &Mirror,
    author: &Author,
    p: &Proposal<'_>,
    existing: Option<git2::Oid>,
) -> Result<(), WriteError> {
    let commit = mirror.commit_owned(p.change.tip, p.change.updates, author, p.change.message)?;
    match mirror.push(commit, p.branch, Expect::Lease(existing)) {
        Ok(()) => Ok(()),
        // Another tagpin moved our branch: start the pass over, as for a lost race.
        Err(GitError::LeaseBroken { url, branch, .. }) => {
            Err(WriteError::Git(GitError::NonFastForward { url, branch }))
        }
        Err(e) => Err(e.into()),
    }
}

/// Makes `change` on GitHub and moves `branch` to it as `how` says; the new commit's id. A
/// branch that moved since it was read is [`GitError::NonFastForward`], as for a push.
async fn commit_through_api(
    mirror: &Mirror,
    github: &GitHub,
    branch: &str,
    change: &Planned<'_>,
    how: RefMove<'_>,
) -> Result<String, WriteError> {
    let parts = off_runtime(|| mirror.forge_parts(change.tip, change.updates))?;
    let mut files = Vec::new();
    for ((path, bytes), executable) in change.updates.iter().zip(&parts.executable) {
        let path = path
            .to_str()
            .ok_or_else(|| GitError::Other(format!("{}: path is not UTF-8", path.display())))?;
        files.push(ApiFile {
            path,
            bytes,
            executable: *executable,
        });
    }
    let message = owned_message(change.message, parts.tree);
    let made = github
        .create_commit(&ApiCommit {
            parent: change.tip.to_string(),
            base_tree: parts.base_tree.to_string(),
            tree: parts.tree.to_string(),
            files: &files,
            message: &message,
        })
        .await?;
    if github.move_branch(branch, &made, how).await? == Moved::Raced {
        let url = mirror.display_url();
        let branch = branch.to_string();
        return Err(GitError::NonFastForward { url, branch }.into());
    }
    off_runtime(|| mirror.fetch_branch(branch))?;
    Ok(made)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hand_edit_note_carries_its_marker_and_names_the_branch_and_commit() {
        let note = hand_edit_note(
            ChangeRequestNoun::PullRequest,
            "tagpin/main",
            "0123456789abcdef0123456789abcdef01234567",
        );
        assert!(note.starts_with(HAND_EDIT_MARKER), "{note}");
        assert!(note.contains("updating this pull request."), "{note}");
        let on_gitlab = hand_edit_note(ChangeRequestNoun::MergeRequest, "tagpin/main", "0123");
        assert!(
            on_gitlab.contains("updating this merge request.")
                && on_gitlab.contains("close this merge request")
                && !on_gitlab.contains("pull request"),
            "{on_gitlab}"
        );
        assert!(note.contains("`tagpin/main`"), "{note}");
        assert!(
            note.contains("0123456789abcdef0123456789abcdef01234567"),
            "{note}"
        );
    }
}
