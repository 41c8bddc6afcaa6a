//! The forge: where tagpin's change requests (GitHub, Gitea, Bitbucket and Azure DevOps pull
//! requests, GitLab merge requests), commit (build) statuses and verdict notes live.
//!
//! [`Forge`] is the one interface sync, verify, promote and the controller use; it does not
//! say which forge it is. Each forge has its adapter ([`github::GitHub`] through octocrab,
//! [`gitlab::GitLab`], [`gitea::Gitea`], [`bitbucket::Bitbucket`] (Cloud),
//! [`bitbucket_server::BitbucketServer`] (Data Center) and [`azure_devops::AzureDevOps`]
//! through reqwest), which speaks that forge's API and maps its answers to the neutral types
//! of [`crate::review`]. What is the same on every forge lives here: which status is tagpin's
//! own (created by the token's login; on Bitbucket, which records no author, signed with the
//! token), and the memory of what this process last wrote, so a pass that would write the
//! same again spends no call.

pub mod azure_devops;
pub mod bitbucket;
pub mod bitbucket_server;
pub mod body;
mod common;
pub mod gitea;
pub mod github;
pub mod gitlab;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

// tokio's, not std's: cache lifetimes and deadlines follow paused test time (see crate::clock).
use tokio::time::Instant;

use crate::config;
use crate::mutex::lock;

pub use crate::review::{PullRequestInfo, Status, StatusHistory, StatusState};
pub use azure_devops::AzureDevOps;
pub use bitbucket::Bitbucket;
pub use bitbucket_server::BitbucketServer;
pub use common::{ForgeError, MAX_ANSWER_BYTES, MAX_RATE_LIMIT_WAIT};
pub use gitea::Gitea;
pub use github::GitHub;
pub use gitlab::GitLab;

/// Entries kept of what this process last wrote; when full, all are dropped: the next passes
/// read back once, nothing is wrong.
const MAX_REMEMBERED: usize = 512;
/// How long what this process last wrote (a status, the verdict comment) is trusted without
/// reading it back: a pass that would write the same again spends no call, and a status or
/// comment changed by hand is set right within this time.
pub const READ_BACK_AFTER: Duration = Duration::from_secs(600);

/// What the forge calls a change request, for the text people read: GitHub's
/// "pull request #12" (Gitea's and Bitbucket's too), GitLab's "merge request !12", Azure
/// DevOps's "pull request !12". Without a forge there is no change
/// request to name, and the wording is GitHub's (the one tagpin had before GitLab).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ChangeRequestNoun {
    #[default]
    PullRequest,
    MergeRequest,
    /// Azure DevOps's "pull request !12": its users mention pull requests with `!`.
    AzureDevOpsPullRequest,
}

impl ChangeRequestNoun {
    /// The noun of the configured forge.
    pub fn of(forge: Option<&config::Forge>) -> ChangeRequestNoun {
        match forge.map(|f| &f.kind) {
            Some(config::ForgeKind::GitLab { .. }) => ChangeRequestNoun::MergeRequest,
            Some(config::ForgeKind::AzureDevOps { .. }) => {
                ChangeRequestNoun::AzureDevOpsPullRequest
            }
            Some(
                config::ForgeKind::GitHub { .. }
                | config::ForgeKind::Gitea { .. }
                | config::ForgeKind::Bitbucket { .. }
                | config::ForgeKind::BitbucketServer { .. },
            )
            | None => ChangeRequestNoun::PullRequest,
        }
    }

    /// `pull request` or `merge request`.
    pub fn word(self) -> &'static str {
        match self {
            ChangeRequestNoun::PullRequest | ChangeRequestNoun::AzureDevOpsPullRequest => {
                "pull request"
            }
            ChangeRequestNoun::MergeRequest => "merge request",
        }
    }

    /// `#12` or `!12`: how the forge itself refers to number 12 in text.
    pub fn reference(self, number: u64) -> String {
        match self {
            ChangeRequestNoun::PullRequest => format!("#{number}"),
            ChangeRequestNoun::MergeRequest | ChangeRequestNoun::AzureDevOpsPullRequest => {
                format!("!{number}")
            }
        }
    }

    /// `pull request #12` or `merge request !12`.
    pub fn name(self, number: u64) -> String {
        format!("{} {}", self.word(), self.reference(number))
    }
}

/// The forge adapter the configuration names.
enum Adapter {
    GitHub(GitHub),
    GitLab(GitLab),
    Gitea(Gitea),
    BitbucketServer(BitbucketServer),
    Bitbucket(Bitbucket),
    AzureDevOps(AzureDevOps),
}

/// Dispatches one call to the adapter, which has a method of the same name and arguments.
macro_rules! dispatch {
    ($self:ident . $method:ident ( $($arg:expr),* )) => {
        match &$self.adapter {
            Adapter::GitHub(forge) => forge.$method($($arg),*).await,
            Adapter::GitLab(forge) => forge.$method($($arg),*).await,
            Adapter::Gitea(forge) => forge.$method($($arg),*).await,
            Adapter::BitbucketServer(forge) => forge.$method($($arg),*).await,
            Adapter::Bitbucket(forge) => forge.$method($($arg),*).await,
            Adapter::AzureDevOps(forge) => forge.$method($($arg),*).await,
        }
    };
}

/// The forge of the configuration, with its token.
pub struct Forge {
    adapter: Adapter,
    /// What this process last wrote or read back: `(sha, branch, context)` ->
    /// `(state, description)`, and change request -> verdict comment body; each with when.
    statuses_set: Mutex<HashMap<StatusKey, KnownStatus>>,
    comments_set: Mutex<HashMap<u64, (String, Instant)>>,
}

/// A status tagpin set or read back, `(state, description, when)`.
type KnownStatus = (StatusState, String, Instant);
/// Which status: `(sha, branch, context)`; on GitLab the same commit has one per branch.
type StatusKey = (String, Option<String>, String);

impl Forge {
    /// The forge `forge.kind` names. Nothing is called yet: a wrong token or project is met,
    /// and named, at the first call.
    pub fn new(forge: &config::Forge, token: String) -> Result<Forge, ForgeError> {
        Forge::with_username(forge, token, None)
    }

    /// [`Forge::new`], with the username `forge.username_env` names, read by the caller where
    /// it reads the token (the environment, or the object's Secret in the operator): Bitbucket
    /// Cloud's app password goes with it as HTTP Basic.
    pub fn with_username(
        forge: &config::Forge,
        token: String,
        username: Option<String>,
    ) -> Result<Forge, ForgeError> {
        let adapter = match forge.kind {
            config::ForgeKind::GitHub { .. } => Adapter::GitHub(GitHub::new(forge, token)?),
            config::ForgeKind::GitLab { .. } => Adapter::GitLab(GitLab::new(forge, token)?),
            config::ForgeKind::Gitea { .. } => Adapter::Gitea(Gitea::new(forge, token)?),
            config::ForgeKind::Bitbucket { .. } => {
                Adapter::Bitbucket(Bitbucket::new(forge, token, username)?)
            }
            config::ForgeKind::BitbucketServer { .. } => {
                Adapter::BitbucketServer(BitbucketServer::new(forge, token)?)
            }
            config::ForgeKind::AzureDevOps { .. } => {
                Adapter::AzureDevOps(AzureDevOps::new(forge, token)?)
            }
        };
        Ok(Forge {
            adapter,
            statuses_set: Mutex::default(),
            comments_set: Mutex::default(),
        })
    }

    /// What this forge calls a change request.
    pub fn noun(&self) -> ChangeRequestNoun {
        match self.adapter {
            Adapter::GitHub(_)
            | Adapter::Gitea(_)
            | Adapter::Bitbucket(_)
            | Adapter::BitbucketServer(_) => ChangeRequestNoun::PullRequest,
            Adapter::GitLab(_) => ChangeRequestNoun::MergeRequest,
            Adapter::AzureDevOps(_) => ChangeRequestNoun::AzureDevOpsPullRequest,
        }
    }

    /// `body` as this forge gives it back: Azure DevOps cuts a description past 4,000
    /// characters and tagpin keeps its plan block apart ([`azure_devops::stored_body`]), the
    /// others keep it whole. A change request's body is compared with this, so a cut one is
    /// not written again on every pass.
    pub fn stored_body(&self, body: &str) -> String {
        match &self.adapter {
            Adapter::AzureDevOps(_) => azure_devops::stored_body(body),
            _ => body.to_string(),
        }
    }

    /// The login (GitLab: username) the token acts as, asked once per process, or
    /// `forge.login` when configured.
    pub async fn login(&self) -> Result<&str, ForgeError> {
        dispatch!(self.login())
    }

    /// Every change request (open, closed, merged) from `branch` of this repository into
    /// `base`, newest first. Never one from a fork.
    pub async fn pull_requests_for(
        &self,
        branch: &str,
        base: &str,
    ) -> Result<Vec<PullRequestInfo>, ForgeError> {
        dispatch!(self.pull_requests_for(branch, base))
    }

    /// What is in flight into `base` on branches starting with `prefix` (tagpin's own), newest
    /// first: every open change request, and those closed or merged at or after `closed_since`
    /// (Unix seconds). Forks' are included, marked by `same_repository`: the caller says why
    /// it leaves them alone.
    pub async fn pull_requests_with_prefix(
        &self,
        prefix: &str,
        base: &str,
        closed_since: i64,
    ) -> Result<Vec<PullRequestInfo>, ForgeError> {
        dispatch!(self.pull_requests_with_prefix(prefix, base, closed_since))
    }

    /// Opens a change request from `branch` into `base`. On GitLab, one opened meanwhile for
    /// the same branch (`409`) is adopted: given this title and body, and returned.
    pub async fn open_pull_request(
        &self,
        branch: &str,
        base: &str,
        title: &str,
        body: &str,
    ) -> Result<PullRequestInfo, ForgeError> {
        dispatch!(self.open_pull_request(branch, base, title, body))
    }

    pub async fn update_pull_request(
        &self,
        number: u64,
        title: &str,
        body: &str,
    ) -> Result<(), ForgeError> {
        dispatch!(self.update_pull_request(number, title, body))
    }

    pub async fn add_labels(&self, number: u64, labels: &[String]) -> Result<(), ForgeError> {
        dispatch!(self.add_labels(number, labels))
    }

    /// One change request by number (GitLab: the merge request's IID; Gitea: the pull
    /// request's number, shared with issues).
    pub async fn pull_request(&self, number: u64) -> Result<PullRequestInfo, ForgeError> {
        dispatch!(self.pull_request(number))
    }

    /// Every status `context` on `sha`, newest first, with who set each and when, and whether
    /// tagpin's own can all be among them: the promoter reads its soak clock back from them.
    pub async fn statuses(&self, sha: &str, context: &str) -> Result<StatusHistory, ForgeError> {
        self.statuses_on(sha, None, context).await
    }

    /// [`Forge::statuses`], on GitLab only those of `branch` when given. A GitHub status
    /// belongs to the commit alone; a GitLab one to the commit on one ref.
    async fn statuses_on(
        &self,
        sha: &str,
        branch: Option<&str>,
        context: &str,
    ) -> Result<StatusHistory, ForgeError> {
        match &self.adapter {
            Adapter::GitHub(forge) => forge.statuses(sha, context).await,
            Adapter::GitLab(forge) => forge.statuses(sha, branch, context).await,
            Adapter::Gitea(forge) => forge.statuses(sha, context).await,
            Adapter::BitbucketServer(forge) => forge.statuses(sha, context).await,
            Adapter::Bitbucket(forge) => {
                let me = self.login().await?;
                forge.statuses(sha, context, me).await
            }
            Adapter::AzureDevOps(forge) => forge.statuses(sha, context).await,
        }
    }

    /// The newest state and description of status `context` on `sha` that tagpin itself set
    /// (created by [`Forge::login`]): a status anyone else posted in tagpin's context is not
    /// tagpin's verdict.
    pub async fn status_of(
        &self,
        sha: &str,
        context: &str,
    ) -> Result<Option<(StatusState, String)>, ForgeError> {
        self.own_status(sha, None, context).await
    }

    async fn own_status(
        &self,
        sha: &str,
        branch: Option<&str>,
        context: &str,
    ) -> Result<Option<(StatusState, String)>, ForgeError> {
        let me = self.login().await?;
        Ok(self
            .statuses_on(sha, branch, context)
            .await?
            .statuses
            .into_iter()
            .find(|s| s.creator.as_deref() == Some(me))
            .map(|s| (s.state, s.description)))
    }

    /// Sets the commit status `context` on `sha`. Descriptions are kept within 140 characters
    /// ([`crate::verify::judge::verdict::status_description`]), which GitHub requires. GitLab
    /// refuses a status in the state its own current one is already in, so its adapter reads
    /// first and posts only a change.
    ///
    /// `branch` is the branch the status is about, where the caller knows it (a change
    /// request's source branch; its target once merged). GitLab attaches a status to one ref
    /// and, without one, to the first branch holding the commit, which for a commit on both
    /// `main` and a tagpin branch may not be the change request's. GitHub and Gitea have no such notion.
    pub async fn set_status(
        &self,
        sha: &str,
        branch: Option<&str>,
        state: StatusState,
        context: &str,
        description: &str,
    ) -> Result<(), ForgeError> {
        match &self.adapter {
            Adapter::GitHub(forge) => forge.set_status(sha, state, context, description).await,
            Adapter::GitLab(forge) => {
                let me = self.login().await?;
                forge
                    .set_status(sha, branch, state, context, description, me)
                    .await
            }
            Adapter::Gitea(forge) => forge.set_status(sha, state, context, description).await,
            Adapter::BitbucketServer(forge) => {
                forge.set_status(sha, state, context, description).await
            }
            Adapter::Bitbucket(forge) => forge.set_status(sha, state, context, description).await,
            Adapter::AzureDevOps(forge) => forge.set_status(sha, state, context, description).await,
        }?;
        self.remember_status(sha, branch, context, state, description);
        Ok(())
    }

    /// Sets the status unless tagpin's own newest one of its context already says the same (a
    /// pass that changes nothing spends no write, and no read either while what this process
    /// set is younger than [`READ_BACK_AFTER`]). A failure is logged, not returned: a verdict
    /// or promotion stands whether or not its status could be posted.
    pub async fn set_status_once(
        &self,
        sha: &str,
        branch: Option<&str>,
        state: StatusState,
        context: &str,
        description: &str,
    ) {
        let key = status_key(sha, branch, context);
        let known = lock(&self.statuses_set).get(&key).cloned();
        if let Some((s, d, at)) = known {
            if s == state && d == description && still_fresh(at) {
                return;
            }
        }
        let current = self.own_status(sha, branch, context).await.ok().flatten();
        if current.as_ref() == Some(&(state, description.to_string())) {
            self.remember_status(sha, branch, context, state, description);
            return;
        }
        if let Err(e) = self
            .set_status(sha, branch, state, context, description)
            .await
        {
            tracing::warn!("cannot set the {context} status on {sha}: {e}");
        }
    }

    fn remember_status(
        &self,
        sha: &str,
        branch: Option<&str>,
        context: &str,
        state: StatusState,
        description: &str,
    ) {
        let mut known = lock(&self.statuses_set);
        if known.len() >= MAX_REMEMBERED {
            known.clear();
        }
        known.insert(
            status_key(sha, branch, context),
            (state, description.to_string(), Instant::now()),
        );
    }

    /// Keeps one comment (GitLab: note) per change request carrying `marker`: edits it when it
    /// exists (found by the marker on every page; on GitHub among comments by anyone, on
    /// GitLab, which lets only a note's author edit it, and on Gitea and Bitbucket Data Center,
    /// among tagpin's own),
    /// creates it otherwise. What this process wrote or found there is not read again for
    /// [`READ_BACK_AFTER`] while the body stays the same.
    pub async fn upsert_comment(
        &self,
        number: u64,
        marker: &str,
        body: &str,
    ) -> Result<(), ForgeError> {
        let known = lock(&self.comments_set).get(&number).cloned();
        if known.is_some_and(|(b, at)| b == body && still_fresh(at)) {
            return Ok(());
        }
        match &self.adapter {
            Adapter::GitHub(forge) => forge.upsert_comment(number, marker, body).await,
            Adapter::GitLab(forge) => {
                let me = self.login().await?;
                forge.upsert_comment(number, marker, body, me).await
            }
            Adapter::Gitea(forge) => {
                let me = self.login().await?;
                forge.upsert_comment(number, marker, body, me).await
            }
            Adapter::Bitbucket(forge) => {
                let me = self.login().await?;
                forge.upsert_comment(number, marker, body, me).await
            }
            Adapter::BitbucketServer(forge) => {
                let me = self.login().await?;
                forge.upsert_comment(number, marker, body, me).await
            }
            Adapter::AzureDevOps(forge) => {
                let me = self.login().await?;
                forge.upsert_comment(number, marker, body, me).await
            }
        }?;
        let mut comments = lock(&self.comments_set);
        if comments.len() >= MAX_REMEMBERED {
            comments.clear();
        }
        comments.insert(number, (body.to_string(), Instant::now()));
        Ok(())
    }
}

fn status_key(sha: &str, branch: Option<&str>, context: &str) -> StatusKey {
    (
        sha.to_string(),
        branch.map(str::to_string),
        context.to_string(),
    )
}

/// Whether what this process wrote or read back at `at` is recent enough to trust without
/// reading it again ([`READ_BACK_AFTER`]).
fn still_fresh(at: Instant) -> bool {
    at.elapsed() < READ_BACK_AFTER
}

#[cfg(test)]
mod tests {
    use super::common::*;
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn what_was_written_is_read_back_again_after_ten_minutes() {
        let at = Instant::now();
        assert!(still_fresh(at));
        tokio::time::advance(READ_BACK_AFTER - Duration::from_secs(1)).await;
        assert!(still_fresh(at));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(!still_fresh(at));
    }

    #[test]
    fn each_forge_names_its_change_requests_as_its_users_read_them() {
        assert_eq!(ChangeRequestNoun::PullRequest.name(12), "pull request #12");
        assert_eq!(
            ChangeRequestNoun::MergeRequest.name(12),
            "merge request !12"
        );
        assert_eq!(ChangeRequestNoun::of(None), ChangeRequestNoun::PullRequest);
        let gitea = config::Forge {
            kind: config::ForgeKind::Gitea {
                owner: "acme".into(),
                repo: "gitops".into(),
            },
            api_url: "https://git.example.com/api/v1".into(),
            token_env: "GITEA_TOKEN".into(),
            login: None,
            username_env: None,
            timeout_seconds: 60,
        };
        assert_eq!(
            ChangeRequestNoun::of(Some(&gitea)).name(12),
            "pull request #12",
            "Gitea's own words"
        );
        let bitbucket = config::Forge {
            kind: config::ForgeKind::Bitbucket {
                workspace: "acme".into(),
                repo: "gitops".into(),
            },
            api_url: "https://api.bitbucket.org/2.0".into(),
            token_env: "BITBUCKET_TOKEN".into(),
            ..gitea.clone()
        };
        let bitbucket_server = config::Forge {
            kind: config::ForgeKind::BitbucketServer {
                project: "ACME".into(),
                repo: "gitops".into(),
            },
            api_url: "https://bitbucket.example.com".into(),
            ..bitbucket.clone()
        };
        for forge in [bitbucket, bitbucket_server] {
            assert_eq!(
                ChangeRequestNoun::of(Some(&forge)).name(12),
                "pull request #12",
                "Bitbucket's own words"
            );
        }
        let azure = config::Forge {
            kind: config::ForgeKind::AzureDevOps {
                project: "platform".into(),
                repo: "gitops".into(),
            },
            api_url: "https://dev.azure.com/acme".into(),
            ..gitea
        };
        assert_eq!(
            ChangeRequestNoun::of(Some(&azure)).name(12),
            "pull request !12",
            "Azure DevOps's own words"
        );
    }

    #[test]
    fn a_body_is_compared_as_the_forge_keeps_it() {
        let gitea = config::Forge {
            kind: config::ForgeKind::Gitea {
                owner: "acme".into(),
                repo: "gitops".into(),
            },
            api_url: "https://git.example.com/api/v1".into(),
            token_env: "GITEA_TOKEN".into(),
            login: None,
            username_env: None,
            timeout_seconds: 60,
        };
        let azure = config::Forge {
            kind: config::ForgeKind::AzureDevOps {
                project: "platform".into(),
                repo: "gitops".into(),
            },
            api_url: "https://dev.azure.com/acme".into(),
            ..gitea.clone()
        };
        let long = "| a table row |\n".repeat(400);
        let kept = Forge::new(&gitea, "t".into()).unwrap().stored_body(&long);
        assert_eq!(kept, long, "Gitea keeps a body whole");
        let cut = Forge::new(&azure, "t".into()).unwrap().stored_body(&long);
        assert!(cut.chars().count() <= azure_devops::MAX_DESCRIPTION_CHARS);
        assert_eq!(cut, azure_devops::stored_body(&long), "what is read back");
    }

    fn change(number: u64, open: bool, head_ref: &str, updated_at: i64) -> PullRequestInfo {
        PullRequestInfo {
            number,
            open,
            merged: !open,
            title: String::new(),
            body: String::new(),
            labels: Vec::new(),
            url: String::new(),
            head_ref: head_ref.into(),
            head_sha: String::new(),
            merge_commit_sha: None,
            merged_at: None,
            updated_at: Some(updated_at),
            author: String::new(),
            same_repository: true,
        }
    }

    #[test]
    fn in_flight_is_the_open_and_the_recently_closed_on_tagpins_branches_once_each() {
        let open = vec![
            change(3, true, "tagpin/main", 50),
            change(4, true, "feature/x", 50),
        ];
        // 3 was closed between the two reads: the open read wins, it is not listed twice.
        let recent = vec![
            change(3, false, "tagpin/main", 60),
            change(5, false, "tagpin/promote/prod", 55),
            change(6, true, "tagpin/other", 40),
        ];
        let numbers: Vec<(u64, bool)> = in_flight(open, recent, "tagpin/")
            .iter()
            .map(|p| (p.number, p.open))
            .collect();
        assert_eq!(numbers, [(5, false), (3, true)]);
    }

    #[test]
    fn a_page_reaching_past_the_window_is_the_last_read() {
        let page = [
            change(1, false, "tagpin/a", 100),
            change(2, false, "tagpin/b", 90),
        ];
        assert!(!updated_before(None)(&page));
        assert!(!updated_before(Some(90))(&page));
        assert!(updated_before(Some(95))(&page));
    }

    #[tokio::test]
    async fn pages_are_read_until_enough_or_the_last_or_the_bound() {
        let read = |url: String| async move {
            let n: usize = url.parse().unwrap();
            Ok::<_, ForgeError>((vec![n], Some((n + 1).to_string())))
        };
        let until_three = read_pages("1".into(), read, |page: &[usize]| page == [3])
            .await
            .unwrap();
        assert_eq!(until_three, [1, 2, 3]);
        let endless = read_pages("1".into(), read, |_: &[usize]| false)
            .await
            .unwrap();
        assert_eq!(endless.len(), MAX_PAGES, "a runaway chain stops");
        let last = |url: String| async move {
            let n: usize = url.parse().unwrap();
            Ok::<_, ForgeError>((vec![n], (n < 2).then(|| (n + 1).to_string())))
        };
        assert_eq!(
            read_pages("1".into(), last, |_: &[usize]| false)
                .await
                .unwrap(),
            [1, 2]
        );
    }

    #[tokio::test]
    async fn a_list_cut_at_the_page_bound_says_it_is_not_whole() {
        let endless = |url: String| async move {
            let n: usize = url.parse().unwrap();
            Ok::<_, ForgeError>((vec![n], Some((n + 1).to_string())))
        };
        let (items, whole) = read_pages_whole("1".into(), endless, |_: &[usize]| false)
            .await
            .unwrap();
        assert_eq!((items.len(), whole), (MAX_PAGES, false));
        let ends = |url: String| async move {
            let n: usize = url.parse().unwrap();
            Ok::<_, ForgeError>((vec![n], (n < MAX_PAGES).then(|| (n + 1).to_string())))
        };
        let (items, whole) = read_pages_whole("1".into(), ends, |_: &[usize]| false)
            .await
            .unwrap();
        assert_eq!(
            (items.len(), whole),
            (MAX_PAGES, true),
            "the last page ends it"
        );
    }

    #[test]
    fn a_status_stamp_binds_what_was_said_to_when() {
        let signer = StatusSigner::new("Bitbucket", "token-a").unwrap();
        let said = ["acme/gitops", "abc", "tagpin/converged", "SUCCESSFUL", "ok"];
        let stamp = signer.stamp(&said, 1_000);
        assert!(stamp.starts_with("1000-"), "{stamp}");
        assert_eq!(signer.said_at(&said, &stamp), Some(1_000));
        // Another time claimed with the same signature, other words, another token: no.
        let moved = stamp.replacen("1000-", "1500-", 1);
        assert_eq!(signer.said_at(&said, &moved), None);
        let other = ["acme/gitops", "abc", "tagpin/converged", "SUCCESSFUL", "ko"];
        assert_eq!(signer.said_at(&other, &stamp), None);
        let rotated = StatusSigner::new("Bitbucket", "token-b").unwrap();
        assert_eq!(rotated.said_at(&said, &stamp), None);
        for junk in ["", "1000", "1000-zz", "x-00", &stamp[..stamp.len() - 2]] {
            assert_eq!(signer.said_at(&said, junk), None, "{junk}");
        }
    }

    #[test]
    fn a_signed_status_is_believed_only_as_recorded_when_it_was_said() {
        assert!(believable(1_000, 1_000));
        assert!(believable(1_000, 1_000 - SAID_EARLY));
        assert!(believable(1_000, 1_000 + SAID_LATE));
        assert!(!believable(1_000, 1_000 - SAID_EARLY - 1));
        assert!(
            !believable(1_000, 1_000 + SAID_LATE + 1),
            "posted again later"
        );
        assert!(!believable(i64::MIN, i64::MAX));
        let signer = StatusSigner::new("Bitbucket", "token-a").unwrap();
        let said = ["acme/gitops", "abc", "k", "SUCCESSFUL", "ok"];
        let stamp = signer.stamp(&said, 1_000);
        assert!(signer.owns(("abc", "k"), &said, &stamp, Some(1_002)));
        assert!(!signer.owns(("abc", "k"), &said, &stamp, Some(5_000)));
        assert!(!signer.owns(("abc", "k"), &said, &stamp, None));
    }

    #[test]
    fn the_forges_clock_is_its_dates_word() {
        let signer = StatusSigner::new("Bitbucket", "token-a").unwrap();
        assert_eq!(signer.forge_now(), None, "no answer yet");
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(
            reqwest::header::DATE,
            reqwest::header::HeaderValue::from_static("Sun, 06 Nov 1994 08:49:37 GMT"),
        );
        signer.note_date(&headers);
        let now = signer.forge_now().unwrap();
        assert!((784_111_777..784_111_777 + 5).contains(&now), "{now}");
        headers.insert(
            reqwest::header::DATE,
            reqwest::header::HeaderValue::from_static("not a date"),
        );
        signer.note_date(&headers);
        assert!(signer.forge_now().unwrap() >= 784_111_777, "kept");
    }

    #[test]
    fn the_next_page_is_read_from_the_link_header() {
        let link = "<https://api.github.com/repositories/1/pulls?state=open&page=2>; rel=\"next\", <https://api.github.com/repositories/1/pulls?state=open&page=5>; rel=\"last\"";
        assert_eq!(
            next_link(link).as_deref(),
            Some("https://api.github.com/repositories/1/pulls?state=open&page=2")
        );
        let last = "<https://api.github.com/x?page=1>; rel=\"prev\", <https://api.github.com/x?page=1>; rel=\"first\"";
        assert_eq!(next_link(last), None);
    }
}
