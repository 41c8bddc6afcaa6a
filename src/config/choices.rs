//! The choices a configuration names by keyword (`mode: pull-request`, `grouping: per-image`,
//! `order: numerical`): read by `config/raw.rs` and kept in [`super::Config`] as they are.

/// How the values a pattern extracts are compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Order {
    Numerical,
    Alphabetical,
}

/// How tagpin writes: a commit on the branch, or a pull (merge) request from a branch of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum WriteMode {
    Commit,
    PullRequest,
}

/// How tagpin signs its commits (`author.signing.format`), as git's `gpg.format` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum SigningFormat {
    /// An SSH signature (`gpg.format=ssh`): a `-----BEGIN SSH SIGNATURE-----` block.
    Ssh,
    /// An ASCII armoured OpenPGP signature (`gpg.format=openpgp`, git's default).
    Openpgp,
}

/// How pins are gathered into pull requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Grouping {
    /// One pull request for the whole pass.
    Single,
    /// One pull request per image repository.
    PerImage,
}

/// What tagpin does when a change it made landed and its verdict is Failed and final
/// (`verify.on_failure`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum OnFailure {
    /// Say so (status, comment, metric, Event): the default.
    #[default]
    Report,
    /// Restore the digests the change moved, by a revert commit or change request, and hold
    /// the failed digests.
    Revert,
}

/// Where a notification goes (`notifications[].kind`): the body is written for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum NotifyKind {
    /// A Slack incoming webhook.
    Slack,
    /// A Microsoft Teams workflow webhook (an Adaptive Card).
    Msteams,
    /// Any HTTP endpoint: a CloudEvents 1.0 structured JSON event, HMAC-signed when a secret
    /// is given.
    Webhook,
}

impl NotifyKind {
    /// The name the configuration and the metrics' `kind` label use.
    pub fn name(self) -> &'static str {
        match self {
            NotifyKind::Slack => "slack",
            NotifyKind::Msteams => "msteams",
            NotifyKind::Webhook => "webhook",
        }
    }
}
