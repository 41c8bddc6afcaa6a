//! What a forge is before any call: the `forge:` section of the configuration (which forge,
//! where, with which credentials), how each adapter reads and checks the keys of its kind
//! ([`Section`]), and what the forge calls a change request.
//!
//! The configuration holds these types (as `config::Forge` and `config::ForgeKind`) and its
//! validator asks each adapter about its own keys through [`Keys`]: the forge's rules live
//! with the forge, and nothing here imports the configuration.

/// The `forge:` section of the configuration, validated: which forge, where, and the
/// environment variables holding its credentials. The configuration calls it `config::Forge`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Which forge, and the repository on it.
    pub kind: Kind,
    /// REST API base: `https://api.github.com`, or `https://HOST/api/v3` for GitHub Enterprise;
    /// `https://gitlab.com/api/v4`, or `https://HOST/api/v4` for a self-managed GitLab;
    /// `https://HOST/api/v1` for Gitea or Forgejo (no default: there is no one Gitea);
    /// `https://api.bitbucket.org/2.0` for Bitbucket Cloud.
    /// `https://HOST` (with its context path) for Bitbucket Data Center (no default either).
    /// the organization (`https://dev.azure.com/ORG`) or an on-premises collection
    /// (`https://HOST/tfs/DefaultCollection`) for Azure DevOps (no default either).
    pub api_url: String,
    /// Environment variable holding the token.
    pub token_env: String,
    /// The login the token acts as, when `GET /user` cannot tell: a GitHub App installation
    /// token (`my-app[bot]`) cannot read it. Only statuses this login created carry the soak
    /// clock, and only pull requests it opened are tagpin's promotions.
    pub login: Option<String>,
    /// `forge.username_env` (Bitbucket Cloud only): the environment variable holding the
    /// username of an app password, sent with the token in HTTP Basic. Without it the token
    /// is an access token or API token, sent as `Authorization: Bearer`.
    pub username_env: Option<String>,
    /// `forge.timeout_seconds`: how long one call may take, answer included
    /// ([`crate::config::DEFAULT_FORGE_TIMEOUT_SECONDS`] unless set).
    pub timeout_seconds: u64,
    /// `forge.api_commits` (GitHub only): tagpin's commits are made through GitHub's Git Data
    /// API instead of pushed, so GitHub signs them (a GitHub App's show as verified), for
    /// branches whose protection requires signed commits without a key of tagpin's own.
    pub api_commits: bool,
}

/// The forge `forge.kind` names, with the repository tagpin writes to there
/// (`config::ForgeKind`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// `forge.owner` and `forge.repo`.
    GitHub { owner: String, repo: String },
    /// `forge.project`: the project's full path, `group/subgroup/project`.
    GitLab { project: String },
    /// `forge.owner` and `forge.repo` on a Gitea or Forgejo instance (`kind: gitea`).
    Gitea { owner: String, repo: String },
    /// `forge.project` (the project key) and `forge.repo` (the repository slug) on a
    /// Bitbucket Data Center instance (`kind: bitbucket-server`).
    BitbucketServer { project: String, repo: String },
    /// `forge.workspace` and `forge.repo` (the repository slug) on Bitbucket Cloud
    /// (`kind: bitbucket`).
    Bitbucket { workspace: String, repo: String },
    /// `forge.project` and `forge.repo` (the Git repository's name or id) in the Azure DevOps
    /// organization or collection of `forge.api_url` (`kind: azure-devops`).
    AzureDevOps { project: String, repo: String },
}

/// The keys of the `forge:` section, as the configuration's validator reads them for an
/// adapter: each key by its path (`forge.owner`), each problem reported at that path with the
/// file's line and column.
pub(crate) trait Keys {
    /// The key's text when set, else reported as required; a value of another kind, or an
    /// empty one, is reported.
    fn required(&mut self, key: &str) -> Option<String>;
    /// Whether the key is written at all.
    fn is_set(&self, key: &str) -> bool;
    /// Reports a problem at `key`.
    fn problem(&mut self, key: &str, message: &str);
}

/// One `forge.kind`, with what its adapter reads of the section.
pub(crate) struct Section {
    /// The `forge.kind` word: `github`, `bitbucket-server`.
    pub kind: &'static str,
    /// `forge.api_url` when not set; `None` where every instance is its own (no address to
    /// assume).
    pub default_api_url: Option<&'static str>,
    /// Whether `forge.username_env` is this forge's (Bitbucket Cloud's app passwords).
    pub takes_username: bool,
    /// The repository the section's keys name (`forge.api_url`, when valid, for a kind that
    /// checks it), every problem with them reported; `None` when one is missing.
    pub repository: ReadRepository,
}

/// How the section's repository is read: the keys, and `forge.api_url` when valid.
pub(crate) type ReadRepository = fn(&mut dyn Keys, Option<&str>) -> Option<Kind>;

impl Section {
    /// `forge.kind: kind`, whose repository `repository` reads, at `default_api_url` unless
    /// set; it takes the token alone.
    pub const fn new(
        kind: &'static str,
        default_api_url: Option<&'static str>,
        repository: ReadRepository,
    ) -> Section {
        Section {
            kind,
            default_api_url,
            takes_username: false,
            repository,
        }
    }

    /// The same section, with `forge.username_env` its own (Bitbucket Cloud's app passwords).
    pub(crate) const fn taking_username(self) -> Section {
        Section {
            takes_username: true,
            ..self
        }
    }
}

/// `forge.owner` and `forge.repo`, the repository of GitHub and Gitea alike; a GitLab key is
/// reported.
pub(super) fn owner_and_repo(keys: &mut dyn Keys) -> Option<(String, String)> {
    let elsewhere = "is for GitLab (kind: gitlab); a GitHub or Gitea repository is named by forge.owner and forge.repo";
    let (owner, repo) = two_keys(
        keys,
        &["forge.project"],
        elsewhere,
        ["forge.owner", "forge.repo"],
    );
    Some((owner?, repo?))
}

/// The two keys that name a forge's repository, each required, after the keys of other forges
/// (`foreign`) that are set are reported with `elsewhere`, which says what names it here.
pub(super) fn two_keys(
    keys: &mut dyn Keys,
    foreign: &[&str],
    elsewhere: &str,
    [first, second]: [&str; 2],
) -> (Option<String>, Option<String>) {
    report_foreign(keys, foreign, elsewhere);
    (keys.required(first), keys.required(second))
}

/// Reports each of `foreign`, another forge's keys, that is set, with `elsewhere`.
pub(super) fn report_foreign(keys: &mut dyn Keys, foreign: &[&str], elsewhere: &str) {
    for key in foreign {
        if keys.is_set(key) {
            keys.problem(key, elsewhere);
        }
    }
}

/// One path segment of a forge's API as Bitbucket slugs and GitLab path parts are: letters,
/// digits, `-`, `_` and `.`, never empty, so it cannot reach another route.
pub(super) fn segment_ok(segment: &str) -> bool {
    !segment.is_empty()
        && segment
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

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
    pub fn of(forge: Option<&Settings>) -> ChangeRequestNoun {
        match forge.map(|f| &f.kind) {
            Some(Kind::GitLab { .. }) => ChangeRequestNoun::MergeRequest,
            Some(Kind::AzureDevOps { .. }) => ChangeRequestNoun::AzureDevOpsPullRequest,
            Some(
                Kind::GitHub { .. }
                | Kind::Gitea { .. }
                | Kind::Bitbucket { .. }
                | Kind::BitbucketServer { .. },
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
