//! Pull requests and commit statuses as tagpin reasons about them, whichever forge holds them.
//! The forge adapter (`crate::forge`) reads and writes them; sync's and promotion's pure
//! decisions read them without knowing the forge.

/// The commit states tagpin sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusState {
    Pending,
    Success,
    Failure,
    /// The check could not be made (GitHub's `error`): tagpin says so rather than guess.
    Error,
}

/// One commit status as tagpin reads it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub state: StatusState,
    pub description: String,
    /// Unix time it was set in this state, when the forge says (GitLab moves a pending status
    /// to its final state in place: there, when it finished).
    pub created_at: Option<i64>,
    /// The login that created it: anyone with status rights can post any context.
    pub creator: Option<String>,
}

/// The statuses of one context on one commit, as tagpin read them back.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatusHistory {
    /// Newest first.
    pub statuses: Vec<Status>,
    /// Whether every status tagpin set there can be among `statuses`. `false` when the list
    /// was cut at the page bound (a flood of others' statuses can push tagpin's past it), or
    /// when the forge keeps one status per key and what holds tagpin's key is not tagpin's own
    /// word (tagpin's, if it set one, was replaced). What tagpin wrote there is then unknown.
    pub complete: bool,
}

/// What tagpin reads of a pull request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullRequestInfo {
    pub number: u64,
    pub open: bool,
    pub merged: bool,
    pub title: String,
    pub body: String,
    pub labels: Vec<String>,
    pub url: String,
    pub head_ref: String,
    pub head_sha: String,
    pub merge_commit_sha: Option<String>,
    /// Unix time of the merge, for "recently merged".
    pub merged_at: Option<i64>,
    /// Unix time of the last change.
    pub updated_at: Option<i64>,
    /// Login of who opened it.
    pub author: String,
    /// The head branch is in this very repository (GitHub's `head.repo` is `base.repo`), not
    /// in a fork: only then is its plan block tagpin's or a collaborator's to act on.
    pub same_repository: bool,
}

#[cfg(test)]
impl PullRequestInfo {
    /// Open pull request `number` from `head_ref` of this repository, opened by `tagpin-bot`,
    /// its head `number` in hex: what the decisions' tests start from.
    pub(crate) fn sample(number: u64, head_ref: &str) -> PullRequestInfo {
        PullRequestInfo {
            number,
            open: true,
            merged: false,
            title: String::new(),
            body: String::new(),
            labels: Vec::new(),
            url: String::new(),
            head_ref: head_ref.into(),
            head_sha: format!("{number:040x}"),
            merge_commit_sha: None,
            merged_at: None,
            updated_at: None,
            author: "tagpin-bot".into(),
            same_repository: true,
        }
    }
}
