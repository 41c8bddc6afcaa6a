//! The forge: where tagpin's change requests (GitHub, Gitea, Bitbucket and Azure DevOps pull
//! requests, GitLab merge requests), commit (build) statuses and verdict notes live.
//!
//! [`Forge`] is the contract every adapter implements, and its provided methods are what every
//! forge does the same way ([`engine`]: which change requests are a branch's or in flight,
//! adopting one opened meanwhile, keeping the marked comment, the request loop and paging).
//! One file per dialect keeps only what its forge says its own way: [`github::GitHub`]
//! through octocrab, [`gitlab::GitLab`], [`gitea::Gitea`], [`bitbucket::Bitbucket`] (Cloud),
//! [`bitbucket_server::BitbucketServer`] (Data Center) and [`azure_devops::AzureDevOps`]
//! through reqwest, each mapping its forge's answers to the neutral types of
//! [`crate::review`].
//!
//! [`ForgeClient`] is the one type sync, verify, promote and the controller hold; it does not
//! say which forge it is. It adds what this process last wrote ([`engine::Memory`]), so a
//! pass that would write the same status or comment again spends no call.

pub mod azure_devops;
pub mod bitbucket;
pub mod bitbucket_server;
pub mod engine;
pub mod gitea;
pub mod github;
pub mod gitlab;
pub mod settings;
mod stamp;

use std::future::Future;
use std::pin::Pin;

pub use crate::review::{PullRequestInfo, Status, StatusHistory, StatusState};
pub use azure_devops::AzureDevOps;
pub use bitbucket::Bitbucket;
pub use bitbucket_server::BitbucketServer;
pub use engine::{Forge, Memory, Said};
pub(crate) use engine::{ForgeError, NewChange, StatusKey};
pub use gitea::Gitea;
pub use github::GitHub;
pub use gitlab::GitLab;
pub(crate) use settings::ChangeRequestNoun;
use settings::{Keys, Kind, Section, Settings};

use engine::Result;

/// Every `forge.kind`, each read and checked by its adapter, in the order an error lists them.
pub(crate) const SECTIONS: [&Section; 6] = [
    &github::SECTION,
    &gitlab::SECTION,
    &gitea::SECTION,
    &bitbucket::SECTION,
    &bitbucket_server::SECTION,
    &azure_devops::SECTION,
];

/// The section `forge.kind` names, if it names one.
pub(crate) fn section(kind: &str) -> Option<&'static Section> {
    SECTIONS.iter().copied().find(|s| s.kind == kind)
}

/// The `forge.kind` words, as an error lists them: `github, gitlab, … or azure-devops`.
pub(crate) fn kinds() -> String {
    let words: Vec<&str> = SECTIONS.iter().map(|s| s.kind).collect();
    match words.split_last() {
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// The repository `section`'s adapter reads from the keys, every problem reported at its key:
/// Bitbucket Cloud's `forge.workspace` in another kind's section, and whatever the adapter
/// checks of its own keys ([`Section::repository`]).
pub(crate) fn read_repository(
    section: &Section,
    keys: &mut dyn Keys,
    api_url: Option<&str>,
) -> Option<Kind> {
    if section.kind != bitbucket::SECTION.kind && keys.is_set("forge.workspace") {
        keys.problem("forge.workspace", bitbucket::WORKSPACE_ELSEWHERE);
    }
    (section.repository)(keys, api_url)
}

/// A forge call's future, boxed.
type Boxed<'a, T> = Pin<Box<dyn Future<Output = Result<T>> + Send + 'a>>;

/// [`Forge`] as one type: its futures boxed, since a trait of `async fn`s cannot stand behind
/// a pointer. Every adapter is one through the blanket impl below, so what the compiler checks
/// of the contract holds for all six, and a call reaches the adapter in one place.
trait Dispatch: Send + Sync {
    fn noun(&self) -> ChangeRequestNoun;
    fn poster_dates_statuses(&self) -> bool;
    fn stored_body(&self, body: &str) -> String;
    fn login(&self) -> Boxed<'_, &str>;
    fn pull_requests_for<'a>(&'a self, branch: &'a str, base: &'a str) -> Boxed<'a, Prs>;
    fn in_flight<'a>(&'a self, prefix: &'a str, base: &'a str, since: i64) -> Boxed<'a, Prs>;
    fn open_pull_request<'a>(&'a self, new: NewChange<'a>) -> Boxed<'a, PullRequestInfo>;
    fn update<'a>(&'a self, number: u64, title: &'a str, body: &'a str) -> Boxed<'a, ()>;
    fn add_labels<'a>(&'a self, number: u64, labels: &'a [String]) -> Boxed<'a, ()>;
    fn pull_request(&self, number: u64) -> Boxed<'_, PullRequestInfo>;
    fn statuses<'a>(&'a self, key: StatusKey<'a>) -> Boxed<'a, StatusHistory>;
    fn set_status<'a>(&'a self, key: StatusKey<'a>, said: Said<'a>) -> Boxed<'a, ()>;
    fn upsert<'a>(&'a self, number: u64, marker: &'a str, body: &'a str) -> Boxed<'a, ()>;
}

type Prs = Vec<PullRequestInfo>;

impl<F: Forge> Dispatch for F {
    fn noun(&self) -> ChangeRequestNoun {
        self.dialect().noun
    }
    fn poster_dates_statuses(&self) -> bool {
        self.dialect().poster_dates_statuses
    }
    fn stored_body(&self, body: &str) -> String {
        Forge::stored_body(self, body)
    }
    fn login(&self) -> Boxed<'_, &str> {
        Box::pin(Forge::login(self))
    }
    fn pull_requests_for<'a>(&'a self, branch: &'a str, base: &'a str) -> Boxed<'a, Prs> {
        Box::pin(Forge::pull_requests_for(self, branch, base))
    }
    fn in_flight<'a>(&'a self, prefix: &'a str, base: &'a str, since: i64) -> Boxed<'a, Prs> {
        Box::pin(self.pull_requests_with_prefix(prefix, base, since))
    }
    fn open_pull_request<'a>(&'a self, new: NewChange<'a>) -> Boxed<'a, PullRequestInfo> {
        Box::pin(Forge::open_pull_request(self, new))
    }
    fn update<'a>(&'a self, number: u64, title: &'a str, body: &'a str) -> Boxed<'a, ()> {
        Box::pin(self.update_pull_request(number, title, body))
    }
    fn add_labels<'a>(&'a self, number: u64, labels: &'a [String]) -> Boxed<'a, ()> {
        Box::pin(Forge::add_labels(self, number, labels))
    }
    fn pull_request(&self, number: u64) -> Boxed<'_, PullRequestInfo> {
        Box::pin(Forge::pull_request(self, number))
    }
    fn statuses<'a>(&'a self, key: StatusKey<'a>) -> Boxed<'a, StatusHistory> {
        Box::pin(Forge::statuses(self, key))
    }
    fn set_status<'a>(&'a self, key: StatusKey<'a>, said: Said<'a>) -> Boxed<'a, ()> {
        Box::pin(Forge::set_status(self, key, said))
    }
    fn upsert<'a>(&'a self, number: u64, marker: &'a str, body: &'a str) -> Boxed<'a, ()> {
        Box::pin(self.upsert_comment(number, marker, body))
    }
}

/// The forge of the configuration, with its token, and what this process last wrote there.
pub struct ForgeClient {
    adapter: Box<dyn Dispatch>,
    memory: Memory,
    /// `forge.api_commits`: GitHub, which makes tagpin's commits (and signs them).
    commits: Option<GitHub>,
}

impl ForgeClient {
    /// The forge `forge.kind` names. Nothing is called yet: a wrong token or project is met,
    /// and named, at the first call.
    pub fn new(forge: &Settings, token: String) -> Result<ForgeClient> {
        ForgeClient::with_username(forge, token, None)
    }

    /// [`ForgeClient::new`], with the username `forge.username_env` names, read by the caller
    /// where it reads the token (the environment, or the object's Secret in the operator):
    /// Bitbucket Cloud's app password goes with it as HTTP Basic.
    pub(crate) fn with_username(
        forge: &Settings,
        token: String,
        username: Option<String>,
    ) -> Result<ForgeClient> {
        use Kind;
        let commits = match &forge.kind {
            Kind::GitHub { owner, repo } if forge.api_commits => {
                Some(GitHub::new(forge, (owner, repo), token.clone())?)
            }
            _ => None,
        };
        let adapter: Box<dyn Dispatch> = match &forge.kind {
            Kind::GitHub { owner, repo } => Box::new(GitHub::new(forge, (owner, repo), token)?),
            Kind::GitLab { project } => Box::new(GitLab::new(forge, project, token)?),
            Kind::Gitea { owner, repo } => Box::new(Gitea::new(forge, (owner, repo), token)?),
            Kind::Bitbucket { workspace, repo } => {
                let credentials = (token, username);
                Box::new(Bitbucket::new(forge, (workspace, repo), credentials)?)
            }
            Kind::BitbucketServer { project, repo } => {
                Box::new(BitbucketServer::new(forge, (project, repo), token)?)
            }
            Kind::AzureDevOps { project, repo } => {
                Box::new(AzureDevOps::new(forge, (project, repo), token)?)
            }
        };
        Ok(ForgeClient {
            adapter,
            memory: Memory::default(),
            commits,
        })
    }

    /// With `forge.api_commits`, the forge that makes tagpin's commits through its API
    /// (GitHub, which signs them); `None`: tagpin commits and pushes itself.
    pub(crate) fn commits_through_api(&self) -> Option<&GitHub> {
        self.commits.as_ref()
    }

    /// What this forge calls a change request.
    pub(crate) fn noun(&self) -> ChangeRequestNoun {
        self.adapter.noun()
    }

    /// Whether a status's time on this forge is whatever its poster said (Bitbucket Data
    /// Center): a soak start read back from a status is then believed only as far back as this
    /// process saw the stage converge itself ([`crate::promote::SoakMemory`]).
    pub(crate) fn poster_dates_statuses(&self) -> bool {
        self.adapter.poster_dates_statuses()
    }

    /// `body` as this forge gives it back: Azure DevOps cuts a description past 4,000
    /// characters and tagpin keeps its plan block apart ([`azure_devops::stored_body`]), the
    /// others keep it whole. A change request's body is compared with this, so a cut one is
    /// not written again on every pass.
    pub(crate) fn stored_body(&self, body: &str) -> String {
        self.adapter.stored_body(body)
    }

    /// [`Forge::login`].
    pub async fn login(&self) -> Result<&str> {
        self.adapter.login().await
    }

    /// [`Forge::pull_requests_for`].
    pub(crate) async fn pull_requests_for(&self, branch: &str, base: &str) -> Result<Prs> {
        self.adapter.pull_requests_for(branch, base).await
    }

    /// [`Forge::pull_requests_with_prefix`].
    pub(crate) async fn pull_requests_with_prefix(
        &self,
        prefix: &str,
        base: &str,
        closed_since: i64,
    ) -> Result<Prs> {
        self.adapter.in_flight(prefix, base, closed_since).await
    }

    /// [`Forge::open_pull_request`].
    pub(crate) async fn open_pull_request(
        &self,
        branch: &str,
        base: &str,
        title: &str,
        body: &str,
    ) -> Result<PullRequestInfo> {
        let new = NewChange {
            branch,
            base,
            title,
            body,
        };
        self.adapter.open_pull_request(new).await
    }

    /// [`Forge::update_pull_request`].
    pub(crate) async fn update_pull_request(
        &self,
        number: u64,
        title: &str,
        body: &str,
    ) -> Result<()> {
        self.adapter.update(number, title, body).await
    }

    /// [`Forge::add_labels`].
    pub async fn add_labels(&self, number: u64, labels: &[String]) -> Result<()> {
        self.adapter.add_labels(number, labels).await
    }

    /// [`Forge::pull_request`].
    pub async fn pull_request(&self, number: u64) -> Result<PullRequestInfo> {
        self.adapter.pull_request(number).await
    }

    /// Every status `context` on `sha`, newest first, with who set each and when, and whether
    /// tagpin's own can all be among them: the promoter reads its soak clock back from them.
    pub async fn statuses(&self, sha: &str, context: &str) -> Result<StatusHistory> {
        let branch = None;
        self.adapter
            .statuses(StatusKey {
                sha,
                branch,
                context,
            })
            .await
    }

    /// The newest state and description of status `context` on `sha` that tagpin itself set
    /// (created by [`ForgeClient::login`]): a status anyone else posted in tagpin's context is
    /// not tagpin's verdict.
    pub(crate) async fn status_of(
        &self,
        sha: &str,
        context: &str,
    ) -> Result<Option<(StatusState, String)>> {
        let branch = None;
        self.own_status(StatusKey {
            sha,
            branch,
            context,
        })
        .await
    }

    async fn own_status(&self, key: StatusKey<'_>) -> Result<Option<(StatusState, String)>> {
        let me = self.login().await?;
        let history = self.adapter.statuses(key).await?;
        let own = history
            .statuses
            .into_iter()
            .find(|s| s.creator.as_deref() == Some(me));
        Ok(own.map(|s| (s.state, s.description)))
    }

    /// Sets the commit status `context` on `sha` ([`Forge::set_status`]; `branch` as
    /// [`StatusKey`] says). GitLab refuses a status in the state its own current one is
    /// already in, so its adapter reads first and posts only a change.
    pub async fn set_status(
        &self,
        sha: &str,
        branch: Option<&str>,
        state: StatusState,
        context: &str,
        description: &str,
    ) -> Result<()> {
        let key = StatusKey {
            sha,
            branch,
            context,
        };
        self.post_status(key, Said { state, description }).await
    }

    /// Posts `said` as the status `key` names, and remembers it.
    async fn post_status(&self, key: StatusKey<'_>, said: Said<'_>) -> Result<()> {
        self.adapter.set_status(key, said).await?;
        self.memory.remember_status(key, said);
        Ok(())
    }

    /// Sets the status unless tagpin's own newest one of its context already says the same (a
    /// pass that changes nothing spends no write, and no read either while what this process
    /// set is younger than [`READ_BACK_AFTER`]). A failure is logged, not returned: a verdict
    /// or promotion stands whether or not its status could be posted.
    pub(crate) async fn set_status_once(
        &self,
        key: StatusKey<'_>,
        state: StatusState,
        description: &str,
    ) {
        let said = Said { state, description };
        if self.memory.said_lately(key, said) {
            return;
        }
        let current = self.own_status(key).await.ok().flatten();
        if current.as_ref() == Some(&(state, description.to_string())) {
            self.memory.remember_status(key, said);
            return;
        }
        if let Err(e) = self.post_status(key, said).await {
            tracing::warn!("cannot set the {} status on {}: {e}", key.context, key.sha);
        }
    }

    /// [`Forge::upsert_comment`]: one comment (GitLab: note) per change request carrying
    /// `marker`. What this process wrote or found there is not read again for
    /// [`READ_BACK_AFTER`] while the body stays the same.
    pub(crate) async fn upsert_comment(&self, number: u64, marker: &str, body: &str) -> Result<()> {
        if self.memory.commented_lately(number, body) {
            return Ok(());
        }
        self.adapter.upsert(number, marker, body).await?;
        self.memory.remember_comment(number, body);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a failed call means, in each forge's words: what to fix, with the repository and
    /// the API named, and nothing the forge said. (GitLab's, which read its body, are its own.)
    #[test]
    fn failures_name_what_to_fix_without_quoting_the_forge() {
        let forges = [
            (
                &gitea::WORDS,
                "acme/gitops",
                "https://git.example.com/api/v1",
            ),
            (
                &bitbucket::WORDS,
                "acme/gitops",
                "https://api.bitbucket.org/2.0",
            ),
            (
                &bitbucket_server::WORDS,
                "ACME/gitops",
                "https://bitbucket.example.com",
            ),
            (
                &azure_devops::WORDS,
                "platform/gitops",
                "https://dev.azure.com/acme",
            ),
        ];
        let says = |forge: usize, code: u16| {
            let (words, repo, api) = forges[forge];
            let status = reqwest::StatusCode::from_u16(code).unwrap();
            words.describe(status, "the forge's own words", repo, api)
        };
        for (forge, (_, repo, api)) in forges.iter().enumerate() {
            assert!(says(forge, 401).contains("the token is not valid"));
            assert!(says(forge, 404).contains(&format!("{repo} is not at {api}")));
            assert_eq!(says(forge, 500), "500 Internal Server Error");
        }
        let own = [
            (0, 403, "write:repository"),
            (0, 409, "already open"),
            (1, 403, "pullrequest:write"),
            (2, 401, "not a Bitbucket HTTP access token"),
            (2, 403, "Repository write permission"),
            (2, 409, "changed since tagpin read it"),
            (3, 403, "Code (Read & write)"),
            (3, 409, "already active"),
        ];
        for (forge, code, words) in own {
            assert!(says(forge, code).contains(words), "{forge} {code}");
        }
    }
    #[test]
    fn each_forge_names_its_change_requests_as_its_users_read_them() {
        assert_eq!(ChangeRequestNoun::PullRequest.name(12), "pull request #12");
        assert_eq!(
            ChangeRequestNoun::MergeRequest.name(12),
            "merge request !12"
        );
        assert_eq!(ChangeRequestNoun::of(None), ChangeRequestNoun::PullRequest);
        let forge = |kind: Kind| engine::settings(kind, "https://forge.example.com");
        let s = |a: &str| a.to_string();
        let repo = s("gitops");
        // Gitea's, Bitbucket's (Cloud and Data Center) and Azure DevOps's own words.
        let own_words = [
            (
                Kind::Gitea {
                    owner: s("acme"),
                    repo: repo.clone(),
                },
                "pull request #12",
            ),
            (
                Kind::Bitbucket {
                    workspace: s("ACME"),
                    repo: repo.clone(),
                },
                "pull request #12",
            ),
            (
                Kind::BitbucketServer {
                    project: s("ACME"),
                    repo: repo.clone(),
                },
                "pull request #12",
            ),
            (
                Kind::AzureDevOps {
                    project: s("platform"),
                    repo,
                },
                "pull request !12",
            ),
        ];
        for (kind, words) in own_words {
            let settings = forge(kind);
            assert_eq!(
                ChangeRequestNoun::of(Some(&settings)).name(12),
                words,
                "{:?}",
                settings.kind
            );
        }
    }

    #[test]
    fn a_body_is_compared_as_the_forge_keeps_it() {
        let (owner, repo) = ("acme".to_string(), "gitops".to_string());
        let gitea = engine::settings(
            Kind::Gitea { owner, repo },
            "https://git.example.com/api/v1",
        );
        let (project, repo) = ("platform".to_string(), "gitops".to_string());
        let azure = engine::settings(
            Kind::AzureDevOps { project, repo },
            "https://dev.azure.com/acme",
        );
        let long = "| a table row |\n".repeat(400);
        let kept = ForgeClient::new(&gitea, "t".into())
            .unwrap()
            .stored_body(&long);
        assert_eq!(kept, long, "Gitea keeps a body whole");
        let cut = ForgeClient::new(&azure, "t".into())
            .unwrap()
            .stored_body(&long);
        assert!(cut.chars().count() <= azure_devops::MAX_DESCRIPTION_CHARS);
        assert_eq!(cut, azure_devops::stored_body(&long), "what is read back");
    }
}
