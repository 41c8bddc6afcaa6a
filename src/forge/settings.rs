//! What a forge is, before any call: which kind, what it calls a change request.

use crate::config;

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
