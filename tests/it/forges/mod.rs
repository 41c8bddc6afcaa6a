//! The same change-request scenarios on every forge, so none can drift: the real binary, a
//! real registry, a real bare Git remote, the local Kubernetes API server, and the local GitHub
//! (`support::github`), GitLab (`support::gitlab`), Gitea (`support::gitea`) or Bitbucket Data
//! Center (`support::bitbucket_server`) server. Each
//! scenario is one function over [`Kind`], run once per forge by [`every_forge!`]; what differs
//! between the forges (how a person merges, GitLab's status state machine) is said where it
//! differs.

mod api_commits;
mod azure_devops;
mod bitbucket;
mod bitbucket_server;
mod gitea;

use crate::support;

use support::output_text as text;

use std::path::PathBuf;
use std::process::Output;

use serde_json::json;
use support::azure_devops::{AzureDevOpsServer, PrStatus};
use support::bitbucket::BitbucketCloudServer;
use support::bitbucket_server::BitbucketDcServer;
use support::git::BareRepo;
use support::gitea::GiteaServer;
use support::github::{GitHubServer, PrState};
use support::gitlab::{GitLabServer, MrState};
use support::kube::KubeServer;
use support::manifests::deployment_with_replicas;
use support::registry::{Mode, TestRegistry};
use support::workloads::{image_id, LiveDeployment};

use crate::verify::live_web;

/// The token both servers accept; it must never appear in tagpin's output.
pub(crate) const TOKEN: &str = "glpat-forges-3c9e1f7a";
/// The GitLab user the token belongs to (the GitHub server's is `tagpin-bot` too).
pub(crate) const BOT: &str = "tagpin-bot";
const PROJECT: &str = "acme/platform/gitops";

#[derive(Clone, Copy, Debug)]
pub(crate) enum Kind {
    GitHub,
    GitLab,
    Gitea,
    BitbucketServer,
    Bitbucket,
    AzureDevOps,
}

impl Kind {
    /// What the forge's users call a change request.
    fn word(self) -> &'static str {
        match self {
            Kind::GitHub | Kind::Gitea | Kind::Bitbucket | Kind::BitbucketServer => "pull request",
            Kind::GitLab => "merge request",
            Kind::AzureDevOps => "pull request",
        }
    }

    /// Change request `number` as the forge's users read it: GitHub's and Gitea's
    /// `pull request #1`, GitLab's `merge request !1`.
    fn named(self, number: u64) -> String {
        match self {
            Kind::GitHub | Kind::Gitea | Kind::Bitbucket | Kind::BitbucketServer => {
                format!("pull request #{number}")
            }
            Kind::GitLab => format!("merge request !{number}"),
            Kind::AzureDevOps => format!("pull request !{number}"),
        }
    }

    /// Whether change requests have labels: Bitbucket Data Center's pull requests have none,
    /// so there `pull_request.labels` sets nothing.
    fn has_labels(self) -> bool {
        match self {
            Kind::GitHub | Kind::GitLab | Kind::Gitea | Kind::AzureDevOps => true,
            Kind::Bitbucket | Kind::BitbucketServer => false,
        }
    }
}

/// One scenario, once per forge: `every_forge!(scenario)` makes the module `scenario` with
/// one test per forge (`forges::scenario::gitlab`). A new forge adds its line here.
macro_rules! every_forge {
    ($scenario:ident) => {
        mod $scenario {
            use super::Kind;
            #[tokio::test]
            async fn github() {
                super::$scenario(Kind::GitHub).await;
            }
            #[tokio::test]
            async fn gitlab() {
                super::$scenario(Kind::GitLab).await;
            }
            #[tokio::test]
            async fn gitea() {
                super::$scenario(Kind::Gitea).await;
            }
            #[tokio::test]
            async fn bitbucket_server() {
                super::$scenario(Kind::BitbucketServer).await;
            }
            #[tokio::test]
            async fn bitbucket() {
                super::$scenario(Kind::Bitbucket).await;
            }
            #[tokio::test]
            async fn azure_devops() {
                super::$scenario(Kind::AzureDevOps).await;
            }
        }
    };
}

/// The Gitea repository, `owner/repo`.
pub(crate) const GITEA_REPO: &str = "acme/gitops";
/// The Bitbucket Data Center project key and repository slug.
pub(crate) const BITBUCKET_DC_PROJECT: &str = "ACME";
pub(crate) const BITBUCKET_DC_REPO: &str = "gitops";

/// The Bitbucket Cloud repository, `workspace/slug`.
pub(crate) const BITBUCKET_REPO: &str = "acme/gitops";

/// Bitbucket Cloud's build status states in the words the scenarios use (GitHub's).
fn bitbucket_state(state: &str) -> String {
    match state {
        "SUCCESSFUL" => "success",
        "INPROGRESS" => "pending",
        "FAILED" => "failure",
        "STOPPED" => "error",
        other => other,
    }
    .to_string()
}
/// The Azure DevOps organization, project and repository.
pub(crate) const ADO_ORG: &str = "acme";
pub(crate) const ADO_PROJECT: &str = "platform";
pub(crate) const ADO_REPO: &str = "gitops";

/// A change request as the scenarios look at it, whichever forge holds it.
#[derive(Debug, Clone)]
pub(crate) struct Change {
    pub(crate) number: u64,
    pub(crate) title: String,
    pub(crate) body: String,
    pub(crate) labels: Vec<String>,
    pub(crate) open: bool,
    merged: bool,
    head_ref: String,
    /// Opened from a fork.
    fork: bool,
}

/// The forge server of a scenario. (GitHub's own name ends in Hub.)
#[allow(clippy::enum_variant_names)]
pub(crate) enum Hub {
    GitHub(GitHubServer),
    GitLab(GitLabServer),
    Gitea(GiteaServer),
    BitbucketServer(BitbucketDcServer),
    Bitbucket(BitbucketCloudServer),
    AzureDevOps(AzureDevOpsServer),
}

impl Hub {
    async fn start(kind: Kind, repo: &BareRepo) -> Hub {
        match kind {
            Kind::GitHub => {
                Hub::GitHub(GitHubServer::start(TOKEN, "acme", "gitops", repo.path()).await)
            }
            Kind::GitLab => {
                Hub::GitLab(GitLabServer::start(TOKEN, BOT, PROJECT, repo.path()).await)
            }
            Kind::Gitea => {
                Hub::Gitea(GiteaServer::start(TOKEN, BOT, "acme", "gitops", repo.path()).await)
            }
            Kind::BitbucketServer => Hub::BitbucketServer(
                BitbucketDcServer::start(
                    TOKEN,
                    BOT,
                    BITBUCKET_DC_PROJECT,
                    BITBUCKET_DC_REPO,
                    repo.path(),
                )
                .await,
            ),
            Kind::Bitbucket => Hub::Bitbucket(
                BitbucketCloudServer::start(TOKEN, BOT, "acme", "gitops", repo.path()).await,
            ),
            Kind::AzureDevOps => Hub::AzureDevOps(
                AzureDevOpsServer::start(TOKEN, BOT, ADO_ORG, ADO_PROJECT, ADO_REPO, repo.path())
                    .await,
            ),
        }
    }

    /// The `forge:` section of `tagpin.yaml`.
    fn forge_yaml(&self) -> String {
        match self {
            Hub::GitHub(gh) => format!(
                "forge: {{api_url: '{}', owner: acme, repo: gitops, token_env: TAGPIN_FORGE_TOKEN}}\n",
                gh.api_url()
            ),
            Hub::GitLab(gl) => format!(
                "forge: {{kind: gitlab, api_url: '{}', project: {PROJECT}, token_env: TAGPIN_FORGE_TOKEN}}\n",
                gl.api_url()
            ),
            Hub::Gitea(gt) => format!(
                "forge: {{kind: gitea, api_url: '{}', owner: acme, repo: gitops, token_env: TAGPIN_FORGE_TOKEN}}\n",
                gt.api_url()
            ),
            Hub::BitbucketServer(bb) => format!(
                "forge: {{kind: bitbucket-server, api_url: '{}', project: {BITBUCKET_DC_PROJECT}, repo: {BITBUCKET_DC_REPO}, token_env: TAGPIN_FORGE_TOKEN}}\n",
                bb.api_url()
            ),
            Hub::Bitbucket(bb) => format!(
                "forge: {{kind: bitbucket, api_url: '{}', workspace: acme, repo: gitops, token_env: TAGPIN_FORGE_TOKEN}}\n",
                bb.api_url()
            ),
            Hub::AzureDevOps(ado) => format!(
                "forge: {{kind: azure-devops, api_url: '{}', project: {ADO_PROJECT}, repo: {ADO_REPO}, token_env: TAGPIN_FORGE_TOKEN}}\n",
                ado.api_url()
            ),
        }
    }

    /// Every change request, by number.
    pub(crate) fn changes(&self) -> Vec<Change> {
        let mut changes: Vec<Change> = match self {
            Hub::GitHub(gh) => gh
                .prs()
                .into_iter()
                .map(|p| Change {
                    number: p.number,
                    title: p.title,
                    body: p.body.unwrap_or_default(),
                    labels: p.labels,
                    open: p.state == PrState::Open,
                    merged: p.merged,
                    head_ref: p.head_ref,
                    fork: p.fork_owner.is_some(),
                })
                .collect(),
            Hub::GitLab(gl) => gl
                .mrs(PROJECT)
                .into_iter()
                .map(|m| Change {
                    number: m.iid,
                    title: m.title,
                    body: m.description.unwrap_or_default(),
                    labels: m.labels,
                    open: m.state == MrState::Opened,
                    merged: m.state == MrState::Merged,
                    head_ref: m.source_branch,
                    fork: m.source_project_id != m.project_id,
                })
                .collect(),
            Hub::Gitea(gt) => gt
                .pulls(GITEA_REPO)
                .into_iter()
                .map(|p| Change {
                    number: p.pull.number,
                    title: p.pull.title,
                    body: p.pull.body,
                    labels: p.label_names,
                    open: p.pull.open,
                    merged: p.pull.merged,
                    head_ref: p.pull.head_ref,
                    fork: p.fork,
                })
                .collect(),
            Hub::BitbucketServer(bb) => bb
                .pulls()
                .into_iter()
                .map(|p| Change {
                    number: p.id,
                    fork: p.fork(),
                    open: p.open(),
                    merged: p.state == "MERGED",
                    title: p.title,
                    body: p.description,
                    labels: Vec::new(),
                    head_ref: p.from_branch,
                })
                .collect(),
            // Bitbucket Cloud pull requests have no labels.
            Hub::Bitbucket(bb) => bb
                .pulls(BITBUCKET_REPO)
                .into_iter()
                .map(|p| Change {
                    number: p.id,
                    title: p.title,
                    body: p.description,
                    labels: Vec::new(),
                    open: p.state == support::bitbucket::PrState::Open,
                    merged: p.state == support::bitbucket::PrState::Merged,
                    head_ref: p.source_branch,
                    fork: p.fork,
                })
                .collect(),
            Hub::AzureDevOps(ado) => ado
                .pulls()
                .into_iter()
                .map(|p| Change {
                    number: p.id,
                    head_ref: p.source_branch(),
                    title: p.title,
                    body: p.description,
                    labels: p.labels,
                    open: p.status == PrStatus::Active,
                    merged: p.status == PrStatus::Completed,
                    fork: p.fork.is_some(),
                })
                .collect(),
        };
        changes.sort_by_key(|c| c.number);
        changes
    }

    fn close_by_hand(&self, number: u64) {
        match self {
            Hub::GitHub(gh) => gh.close_pr(number),
            Hub::GitLab(gl) => gl.close_mr_as("reviewer", PROJECT, number),
            Hub::Gitea(gt) => gt.close_pull_as("reviewer", GITEA_REPO, number),
            Hub::BitbucketServer(bb) => bb.decline_pull_as("reviewer", number),
            Hub::Bitbucket(bb) => bb.decline_pull_as("reviewer", BITBUCKET_REPO, number),
            Hub::AzureDevOps(ado) => ado.abandon_pull_as("reviewer", number),
        }
    }

    /// A person merges the change request, which changes `files`; returns the commit the
    /// target branch is at.
    fn merge_by_hand(&self, repo: &BareRepo, number: u64, files: &[&str]) -> String {
        match self {
            Hub::GitHub(gh) => {
                // The local GitHub records a merge; the commit is made as GitHub would.
                let branch = gh
                    .prs()
                    .into_iter()
                    .find(|p| p.number == number)
                    .unwrap()
                    .head_ref;
                let contents: Vec<(&str, String)> = files
                    .iter()
                    .map(|f| (*f, repo.read(&branch, f).unwrap()))
                    .collect();
                let files: Vec<(&str, &str)> =
                    contents.iter().map(|(f, c)| (*f, c.as_str())).collect();
                let merge = repo.commit_as_other_writer(
                    "main",
                    &files,
                    &format!("Merge pull request #{number}"),
                );
                gh.merge_pr(number, &merge);
                merge
            }
            Hub::GitLab(gl) => gl.merge_mr_as("reviewer", PROJECT, number).target_head,
            Hub::Gitea(gt) => gt.merge_pull_as("reviewer", GITEA_REPO, number),
            Hub::BitbucketServer(bb) => bb.merge_pull_as("reviewer", number),
            Hub::Bitbucket(bb) => bb.merge_pull_as("reviewer", BITBUCKET_REPO, number),
            Hub::AzureDevOps(ado) => ado.complete_pull_as("reviewer", number),
        }
    }

    /// `(context, state)` of every status on `sha`, oldest first.
    fn statuses(&self, sha: &str) -> Vec<(String, String)> {
        self.statuses_described(sha)
            .into_iter()
            .map(|(context, state, _)| (context, state))
            .collect()
    }

    /// `(context, state, description)` of every status on `sha`, oldest first.
    fn statuses_described(&self, sha: &str) -> Vec<(String, String, String)> {
        match self {
            Hub::GitHub(gh) => gh
                .statuses(sha)
                .into_iter()
                .map(|s| (s.context, s.state, s.description.unwrap_or_default()))
                .collect(),
            Hub::GitLab(gl) => gl
                .statuses(PROJECT, sha)
                .into_iter()
                .map(|s| (s.name, s.status, s.description.unwrap_or_default()))
                .collect(),
            Hub::Gitea(gt) => gt
                .statuses(GITEA_REPO, sha)
                .into_iter()
                .map(|s| (s.context, s.state, s.description))
                .collect(),
            // In GitHub's words, as the scenarios read states.
            Hub::BitbucketServer(bb) => bb
                .statuses(sha)
                .into_iter()
                .map(|s| {
                    let state = match s.state.as_str() {
                        "SUCCESSFUL" => "success",
                        "INPROGRESS" => "pending",
                        "FAILED" => "failure",
                        other => other,
                    };
                    (s.key, state.to_string(), s.description)
                })
                .collect(),
            // One per key, overwritten in place; `name` is the context tagpin wrote.
            Hub::Bitbucket(bb) => bb
                .statuses(BITBUCKET_REPO, sha)
                .into_iter()
                .map(|s| (s.name, bitbucket_state(&s.state), s.description))
                .collect(),
            // Azure DevOps's states in the scenarios' (GitHub's) words.
            Hub::AzureDevOps(ado) => ado
                .statuses(sha)
                .into_iter()
                .map(|s| {
                    let state = match s.state.as_str() {
                        "succeeded" => "success".to_string(),
                        "failed" => "failure".to_string(),
                        other => other.to_string(),
                    };
                    (s.context(), state, s.description)
                })
                .collect(),
        }
    }

    /// On GitLab, the ref each status `context` on `sha` was posted to, oldest first; `None` on
    /// GitHub and Gitea, whose statuses belong to the commit alone.
    fn status_refs(&self, sha: &str, context: &str) -> Option<Vec<String>> {
        match self {
            Hub::GitHub(_)
            | Hub::Gitea(_)
            | Hub::Bitbucket(_)
            | Hub::BitbucketServer(_)
            | Hub::AzureDevOps(_) => None,
            Hub::GitLab(gl) => Some(
                gl.statuses(PROJECT, sha)
                    .into_iter()
                    .filter(|s| s.name == context)
                    .map(|s| s.ref_name)
                    .collect(),
            ),
        }
    }

    /// Someone else with status rights (a CI job) posts `context` on `sha`, through the API.
    async fn post_status_as_ci(&self, sha: &str, context: &str, description: &str) {
        let body = match self {
            Hub::GitHub(gh) => {
                gh.add_status_as("ci-bot", sha, "success", context, description);
                return;
            }
            Hub::GitLab(gl) => {
                gl.add_token("glpat-ci-bot", "ci-bot", support::gitlab::Scope::Api);
                gl.add_member(PROJECT, "ci-bot", support::gitlab::AccessLevel::Developer);
                let posted = reqwest::Client::new()
                    .post(format!(
                        "{}/projects/{}/statuses/{sha}",
                        gl.api_url(),
                        PROJECT.replace('/', "%2F")
                    ))
                    .header("PRIVATE-TOKEN", "glpat-ci-bot")
                    .json(&json!({"state": "success", "name": context, "description": description}))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(posted.status(), 201, "{:?}", posted.text().await);
                return;
            }
            Hub::Gitea(_) => {
                json!({"state": "success", "context": context, "description": description})
            }
            Hub::BitbucketServer(_) => {
                json!({"state": "SUCCESSFUL", "key": context, "url": "https://ci.example.com/1",
                       "description": description})
            }
            Hub::Bitbucket(_) => {
                json!({"key": context, "state": "SUCCESSFUL", "name": context,
                       "description": description, "url": "https://ci.example.com/builds/7"})
            }
            Hub::AzureDevOps(_) => {
                let (genre, name) = context.split_once('/').unwrap();
                json!({"state": "succeeded", "context": {"genre": genre, "name": name},
                       "description": description})
            }
        };
        self.post_status_body_as_ci(sha, &body).await;
    }

    /// Everything the status `context` on `sha` that tagpin set last says, as a request body
    /// that posts it again: what someone who saved it would send (Gitea, both Bitbuckets and
    /// Azure DevOps, whose statuses are keyed by their name).
    fn saved_status(&self, sha: &str, context: &str) -> serde_json::Value {
        match self {
            Hub::Gitea(gt) => {
                let s = gt
                    .statuses(GITEA_REPO, sha)
                    .into_iter()
                    .rfind(|s| s.context == context && s.creator == BOT)
                    .expect("tagpin's status");
                json!({"state": s.state, "context": s.context, "description": s.description,
                       "target_url": s.target_url})
            }
            Hub::BitbucketServer(bb) => {
                let s = bb
                    .statuses(sha)
                    .into_iter()
                    .find(|s| s.key == context)
                    .expect("tagpin's status");
                json!({"key": s.key, "state": s.state, "url": s.url, "name": s.name,
                       "description": s.description, "buildNumber": s.build_number})
            }
            Hub::Bitbucket(bb) => {
                let s = bb
                    .statuses(BITBUCKET_REPO, sha)
                    .into_iter()
                    .find(|s| s.name == context)
                    .expect("tagpin's status");
                json!({"key": s.key, "state": s.state, "name": s.name,
                       "description": s.description, "url": s.url})
            }
            Hub::AzureDevOps(ado) => {
                let s = ado
                    .statuses(sha)
                    .into_iter()
                    .rfind(|s| s.context() == context)
                    .expect("tagpin's status");
                json!({"state": s.state, "description": s.description,
                       "context": {"genre": s.genre, "name": s.name}})
            }
            Hub::GitHub(_) | Hub::GitLab(_) => {
                unreachable!("GitHub and GitLab statuses name their creator")
            }
        }
    }

    /// A CI job posts the status `body` on `sha` through the API, with its own token.
    async fn post_status_body_as_ci(&self, sha: &str, body: &serde_json::Value) {
        let client = reqwest::Client::new();
        let (request, created) = match self {
            Hub::Gitea(gt) => {
                gt.add_token("gitea-ci-bot", "ci-bot", support::gitea::Scope::Write);
                gt.grant(GITEA_REPO, "ci-bot", support::gitea::Access::Write);
                let url = format!("{}/repos/{GITEA_REPO}/statuses/{sha}", gt.api_url());
                (
                    client
                        .post(url)
                        .header("Authorization", "token gitea-ci-bot"),
                    201,
                )
            }
            Hub::BitbucketServer(bb) => {
                // Posting a build status needs only read access to the repository.
                bb.add_token("bbdc-ci-bot", "ci-bot");
                bb.grant("ci-bot", support::bitbucket_server::Permission::Read);
                let url = format!(
                    "{}/rest/api/1.0/projects/{BITBUCKET_DC_PROJECT}/repos/{BITBUCKET_DC_REPO}/commits/{sha}/builds",
                    bb.api_url()
                );
                (client.post(url).bearer_auth("bbdc-ci-bot"), 204)
            }
            Hub::Bitbucket(bb) => {
                bb.add_credential(
                    "bb-ci-bot-token",
                    "ci-bot",
                    support::bitbucket::Credential::ApiToken,
                    support::bitbucket::Scope::Write,
                );
                bb.grant(BITBUCKET_REPO, "ci-bot", support::bitbucket::Access::Write);
                let url = format!(
                    "{}/repositories/{BITBUCKET_REPO}/commit/{sha}/statuses/build",
                    bb.api_url()
                );
                (client.post(url).bearer_auth("bb-ci-bot-token"), 201)
            }
            Hub::AzureDevOps(ado) => {
                ado.add_token("ado-ci-bot", "ci-bot", support::azure_devops::Scope::Write);
                let url = format!(
                    "{}/{ADO_PROJECT}/_apis/git/repositories/{ADO_REPO}/commits/{sha}/statuses?api-version=7.1",
                    ado.api_url()
                );
                (client.post(url).basic_auth("", Some("ado-ci-bot")), 201)
            }
            Hub::GitHub(_) | Hub::GitLab(_) => unreachable!("posted in post_status_as_ci"),
        };
        let posted = request.json(body).send().await.unwrap();
        assert_eq!(posted.status(), created, "{:?}", posted.text().await);
    }

    /// Moves the forge's clock forward by `by`, for what it records and its `Date`.
    fn advance_clock(&self, by: std::time::Duration) {
        match self {
            Hub::Gitea(gt) => gt.advance_clock(by),
            Hub::BitbucketServer(bb) => bb.advance_clock(by),
            Hub::Bitbucket(bb) => bb.advance_clock(by),
            Hub::AzureDevOps(ado) => ado.advance_clock(by),
            Hub::GitHub(gh) => gh.advance_clock(by),
            Hub::GitLab(gl) => gl.advance_clock(by),
        }
    }

    /// The bodies of the comments (GitLab: notes people and bots wrote, not system notes).
    fn comments(&self, number: u64) -> Vec<String> {
        match self {
            Hub::GitHub(gh) => gh.comments(number).into_iter().map(|c| c.body).collect(),
            Hub::GitLab(gl) => gl
                .notes(PROJECT, number)
                .into_iter()
                .filter(|n| !n.system)
                .map(|n| n.body)
                .collect(),
            Hub::Gitea(gt) => gt
                .comments(GITEA_REPO, number)
                .into_iter()
                .map(|c| c.body)
                .collect(),
            Hub::BitbucketServer(bb) => bb.comments(number).into_iter().map(|c| c.text).collect(),
            Hub::Bitbucket(bb) => bb
                .comments(BITBUCKET_REPO, number)
                .into_iter()
                .map(|c| c.raw)
                .collect(),
            Hub::AzureDevOps(ado) => ado
                .comments(number)
                .into_iter()
                .map(|c| c.content)
                .collect(),
        }
    }

    /// How statuses and comments name `user` as their creator: the login, or on Azure
    /// DevOps the identity's id (a GUID), which is all its `createdBy` says for certain.
    fn creator(&self, user: &str) -> String {
        match self {
            Hub::GitHub(_)
            | Hub::GitLab(_)
            | Hub::Gitea(_)
            | Hub::Bitbucket(_)
            | Hub::BitbucketServer(_) => user.to_string(),
            Hub::AzureDevOps(ado) => ado.identity(user),
        }
    }

    /// Requests that change something on the forge.
    fn writes(&self) -> usize {
        match self {
            Hub::GitHub(gh) => gh.requests().iter().filter(|r| r.method != "GET").count(),
            Hub::GitLab(gl) => gl.requests().iter().filter(|r| r.method != "GET").count(),
            Hub::Gitea(gt) => gt.requests().iter().filter(|r| r.method != "GET").count(),
            Hub::BitbucketServer(bb) => bb.requests().iter().filter(|r| r.method != "GET").count(),
            Hub::Bitbucket(bb) => bb.requests().iter().filter(|r| r.method != "GET").count(),
            Hub::AzureDevOps(ado) => ado.requests().iter().filter(|r| r.method != "GET").count(),
        }
    }

    /// Every write, as `METHOD path body`.
    fn write_log(&self) -> Vec<String> {
        match self {
            Hub::GitHub(gh) => gh
                .requests()
                .into_iter()
                .filter(|r| r.method != "GET")
                .map(|r| format!("{} {} {}", r.method, r.path, r.body))
                .collect(),
            Hub::GitLab(gl) => gl
                .requests()
                .into_iter()
                .filter(|r| r.method != "GET")
                .map(|r| format!("{} {} {} -> {}", r.method, r.path, r.body, r.status))
                .collect(),
            Hub::Gitea(gt) => gt
                .requests()
                .into_iter()
                .filter(|r| r.method != "GET")
                .map(|r| format!("{} {} {} -> {}", r.method, r.path, r.body, r.status))
                .collect(),
            Hub::BitbucketServer(bb) => bb
                .requests()
                .into_iter()
                .filter(|r| r.method != "GET")
                .map(|r| format!("{} {} {} -> {}", r.method, r.path, r.body, r.status))
                .collect(),
            Hub::Bitbucket(bb) => bb
                .requests()
                .into_iter()
                .filter(|r| r.method != "GET")
                .map(|r| format!("{} {} {} -> {}", r.method, r.path, r.body, r.status))
                .collect(),
            Hub::AzureDevOps(ado) => ado
                .requests()
                .into_iter()
                .filter(|r| r.method != "GET")
                .map(|r| format!("{} {} {} -> {}", r.method, r.path, r.body, r.status))
                .collect(),
        }
    }

    /// The next attempt to open a change request fails with a 502, before it is made.
    fn fail_next_open(&self) {
        match self {
            Hub::GitHub(gh) => gh.fail_next_pr_create(502),
            Hub::GitLab(gl) => {
                gl.inject(support::gitlab::Fault::new("POST", "/merge_requests", 502).times(1))
            }
            Hub::Gitea(gt) => gt.inject(support::gitea::Fault::new("POST", "/pulls", 502)),
            Hub::BitbucketServer(bb) => bb.inject(support::bitbucket_server::Fault::new(
                "POST",
                "/pull-requests",
                502,
            )),
            Hub::Bitbucket(bb) => {
                bb.inject(support::bitbucket::Fault::new("POST", "/pullrequests", 502))
            }
            Hub::AzureDevOps(ado) => ado.inject(support::azure_devops::Fault::new(
                "POST",
                "/pullrequests",
                502,
            )),
        }
    }

    pub(crate) fn assert_no_violations(&self) {
        match self {
            Hub::GitHub(gh) => gh.assert_no_violations(),
            Hub::GitLab(gl) => gl.assert_no_violations(),
            Hub::Gitea(gt) => gt.assert_no_violations(),
            Hub::BitbucketServer(bb) => bb.assert_no_violations(),
            Hub::Bitbucket(bb) => bb.assert_no_violations(),
            Hub::AzureDevOps(ado) => ado.assert_no_violations(),
        }
    }
}

/// A registry with `acme/web:1.0`, a repository naming it, a forge, a cluster, a config.
pub(crate) struct World {
    kind: Kind,
    pub(crate) registry: TestRegistry,
    pub(crate) repo: BareRepo,
    pub(crate) hub: Hub,
    kube: KubeServer,
    dir: tempfile::TempDir,
}

impl World {
    pub(crate) async fn new(kind: Kind) -> World {
        let registry = TestRegistry::start(Mode::Plain).await;
        let host = registry.host();
        registry.push_image("acme/web", "1.0", "web-1").await;
        let repo = BareRepo::create(&[(
            "apps/web.yaml",
            &deployment_with_replicas("web", &format!("{host}/acme/web:1.0"), 1),
        )]);
        let hub = Hub::start(kind, &repo).await;
        let kube = KubeServer::start().await;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("tagpin.yaml"),
            format!(
                "repository: {{url: '{}', branch: main}}\n\
                 paths: [apps]\n\
                 mode: pull-request\n\
                 pull_request: {{labels: [tagpin, dependencies]}}\n\
                 registries: {{insecure: ['{host}']}}\n\
                 verify: {{default_namespace: shop}}\n{}",
                repo.file_url(),
                hub.forge_yaml()
            ),
        )
        .unwrap();
        World {
            kind,
            registry,
            repo,
            hub,
            kube,
            dir,
        }
    }

    /// Replaces `tagpin.yaml`.
    pub(crate) fn write_config(&self, text: &str) {
        std::fs::write(self.config(), text).unwrap();
    }

    pub(crate) fn config(&self) -> PathBuf {
        self.dir.path().join("tagpin.yaml")
    }

    async fn tagpin(&self, command: &str, args: &[&str]) -> Output {
        self.tagpin_with_token(command, args, TOKEN).await
    }

    pub(crate) async fn tagpin_with_token(
        &self,
        command: &str,
        args: &[&str],
        token: &str,
    ) -> Output {
        let mut cmd = self.command(&[&[command], args].concat(), token);
        // The example configurations' names.
        cmd.env("GITHUB_TOKEN", TOKEN)
            .env("GITLAB_TOKEN", TOKEN)
            .env("GITEA_TOKEN", TOKEN)
            .env("BITBUCKET_TOKEN", TOKEN)
            .env("AZURE_DEVOPS_TOKEN", TOKEN)
            .env("GIT_TOKEN", "unused-for-a-file-remote");
        output_without_token(cmd).await
    }

    /// `tagpin ARGS` on this world's config, cache, home and cluster, with `token` as the forge
    /// token.
    pub(crate) fn command(&self, args: &[&str], token: &str) -> tokio::process::Command {
        let kubeconfig = self.kube.kubeconfig(self.dir.path());
        tagpin_command(self.dir.path(), args, &kubeconfig, token)
    }

    pub(crate) async fn sync(&self) -> Output {
        self.tagpin("sync", &[]).await
    }

    /// `tagpin run` on this world, a pass every `interval`, a verification round every second;
    /// its log on stderr.
    /// `tagpin run` at `interval`, and the URL of its `/metrics` page.
    pub(crate) fn controller(&self, interval: &str) -> (tokio::process::Child, String) {
        let listen = format!("127.0.0.1:{}", support::registry::free_port());
        let args = [
            "run",
            "--verify-interval",
            "1s",
            "--interval",
            interval,
            "--listen",
            &listen,
        ];
        let child = self
            .command(&args, TOKEN)
            .env("RUST_LOG", "tagpin=info")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start tagpin run");
        (child, format!("http://{listen}/metrics"))
    }

    /// `verify` of change request `number`: `--pr N` on GitHub and Gitea, `--mr N` on GitLab.
    async fn verify(&self, number: u64) -> Output {
        let flag = match self.kind {
            Kind::GitHub
            | Kind::Gitea
            | Kind::Bitbucket
            | Kind::BitbucketServer
            | Kind::AzureDevOps => "--pr",
            Kind::GitLab => "--mr",
        };
        self.tagpin("verify", &[flag, &number.to_string()]).await
    }
}

async fn opens_one_change_request_then_updates_it(kind: Kind) {
    let w = World::new(kind).await;

    let first = w.sync().await;
    assert_eq!(first.status.code(), Some(0), "{}", text(&first));
    let changes = w.hub.changes();
    assert_eq!(changes.len(), 1, "{changes:?}");
    let change = &changes[0];
    let opened = format!("opened {} from tagpin/main: ", kind.named(change.number));
    assert!(text(&first).contains(&opened), "{}", text(&first));
    assert!(change.open);
    assert_eq!(change.head_ref, "tagpin/main");
    assert_eq!(change.title, "Pin 1 image(s) to digests");
    let mut labels = change.labels.clone();
    labels.sort();
    if kind.has_labels() {
        assert_eq!(labels, ["dependencies", "tagpin"]);
    } else {
        assert!(labels.is_empty(), "{labels:?}");
    }
    assert!(change.body.contains("<!-- tagpin-plan"), "{}", change.body);
    let pinned = w.repo.read("tagpin/main", "apps/web.yaml").unwrap();
    assert!(pinned.contains("@sha256:"), "{pinned}");
    if let Hub::GitLab(gl) = &w.hub {
        assert!(
            gl.mr(PROJECT, change.number).force_remove_source_branch,
            "tagpin's branch goes once merged"
        );
    }

    let writes = w.hub.writes();
    let quiet = w.sync().await;
    assert_eq!(quiet.status.code(), Some(0), "{}", text(&quiet));
    assert_eq!(w.hub.writes(), writes, "a quiet pass writes nothing");

    let moved = w
        .registry
        .push_image("acme/web", "1.0", "web-1-rebuilt")
        .await;
    let again = w.sync().await;
    assert_eq!(again.status.code(), Some(0), "{}", text(&again));
    let updated = format!("updated {} from tagpin/main: ", kind.named(1));
    assert!(text(&again).contains(&updated), "{}", text(&again));
    let changes = w.hub.changes();
    assert_eq!(changes.len(), 1, "the same change request: {changes:?}");
    assert!(changes[0].body.contains(&moved.manifest[..19]));
    assert!(w
        .repo
        .read("tagpin/main", "apps/web.yaml")
        .unwrap()
        .contains(&moved.manifest));
    w.hub.assert_no_violations();
}
every_forge!(opens_one_change_request_then_updates_it);

async fn closed_by_hand_is_not_reopened_until_a_digest_moves(kind: Kind) {
    let w = World::new(kind).await;
    assert_eq!(w.sync().await.status.code(), Some(0));
    w.hub.close_by_hand(1);

    let out = w.sync().await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let said = format!(
        "{} from tagpin/main was closed by hand for these same digests",
        kind.named(1)
    );
    assert!(text(&out).contains(&said), "{}", text(&out));
    let changes = w.hub.changes();
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert!(!changes[0].open && !changes[0].merged);

    w.registry
        .push_image("acme/web", "1.0", "web-1-rebuilt")
        .await;
    let out = w.sync().await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let changes = w.hub.changes();
    assert_eq!(
        changes.len(),
        2,
        "a new one for the new digest: {changes:?}"
    );
    assert!(changes[1].open);
    w.hub.assert_no_violations();
}
every_forge!(closed_by_hand_is_not_reopened_until_a_digest_moves);

async fn a_failed_open_is_reconciled_without_a_duplicate(kind: Kind) {
    let w = World::new(kind).await;
    w.hub.fail_next_open();

    let failed = w.sync().await;
    assert_eq!(failed.status.code(), Some(1), "{}", text(&failed));
    assert!(w.hub.changes().is_empty());
    let tip = w.repo.head("tagpin/main");
    assert!(tip.is_some(), "the branch was pushed");

    let retried = w.sync().await;
    assert_eq!(retried.status.code(), Some(0), "{}", text(&retried));
    assert_eq!(w.hub.changes().len(), 1);
    assert_eq!(w.repo.head("tagpin/main"), tip, "nothing pushed again");
    w.hub.assert_no_violations();
}
every_forge!(a_failed_open_is_reconciled_without_a_duplicate);

/// The change request is merged by a person; the cluster then runs the pinned digest, and
/// `verify` of it posts `tagpin/converged` success on the commit that landed and one verdict
/// comment, edited in place by the next run. On GitLab the run also shows that no status is
/// posted that GitLab's state machine would refuse.
async fn merged_then_verified(kind: Kind) {
    let w = World::new(kind).await;
    assert_eq!(w.sync().await.status.code(), Some(0));
    let image = image_in(&w.repo, "tagpin/main", "apps/web.yaml");

    let merged = w.hub.merge_by_hand(&w.repo, 1, &["apps/web.yaml"]);
    assert!(w.hub.changes()[0].merged);
    // The pod is still pulling: the check is pending twice in a row (being checked, then
    // what it waits for), which GitLab takes only as pending, then running.
    let web = live_web("web", &image);
    web.apply(&w.kube);
    web.pod("web-1").waiting(&w.kube, "ContainerCreating", "");
    // On GitLab, where only a note's author may edit it, a reviewer quoting the marker is
    // left alone.
    let quoted = format!(
        "why does {} say pending?",
        tagpin::verify::judge::report::COMMENT_MARKER
    );
    if let Hub::GitLab(gl) = &w.hub {
        gl.add_note_as("reviewer", PROJECT, 1, &quoted);
    }
    if let Hub::Gitea(gt) = &w.hub {
        gt.comment_as("reviewer", GITEA_REPO, 1, &quoted);
    }
    if let Hub::BitbucketServer(bb) = &w.hub {
        bb.comment_as("reviewer", 1, &quoted);
    }
    if let Hub::Bitbucket(bb) = &w.hub {
        bb.comment_as("reviewer", BITBUCKET_REPO, 1, &quoted);
    }
    if let Hub::AzureDevOps(ado) = &w.hub {
        ado.comment_as("reviewer", 1, &quoted);
    }
    let waiting = w.verify(1).await;
    assert_eq!(waiting.status.code(), Some(3), "{}", text(&waiting));

    web.pod("web-1").running(&w.kube, &[&image_id(&image)]);
    let out = w.verify(1).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let again = w.verify(1).await;
    assert_eq!(again.status.code(), Some(0), "{}", text(&again));
    for run in [&waiting, &out, &again] {
        assert!(
            !text(run).contains("cannot set the") && !text(run).contains("cannot mark"),
            "every status was taken: {}",
            text(run)
        );
    }

    let statuses = w.hub.statuses(&merged);
    let (context, state) = statuses.last().unwrap();
    assert_eq!(
        (context.as_str(), state.as_str()),
        ("tagpin/converged", "success"),
        "{statuses:?}"
    );
    let mut comments = w.hub.comments(1);
    if let Kind::GitLab
    | Kind::Gitea
    | Kind::Bitbucket
    | Kind::BitbucketServer
    | Kind::AzureDevOps = kind
    {
        assert_eq!(comments.first(), Some(&quoted), "untouched: {comments:?}");
        comments.remove(0);
    }
    assert_eq!(comments.len(), 1, "one verdict comment: {comments:?}");
    assert!(comments[0].contains("| Converged |"), "{}", comments[0]);
    w.hub.assert_no_violations();
    w.kube.assert_no_writes();
}
every_forge!(merged_then_verified);

/// GitLab attaches a status to one ref and, given none, to the first branch holding the
/// commit. An open merge request's verdict goes on its source branch even when a branch
/// sorting first (a person's copy) holds the same commit; merged, on the target branch.
#[tokio::test]
async fn gitlab_the_verdict_status_lands_on_the_merge_requests_branch() {
    let w = World::new(Kind::GitLab).await;
    assert_eq!(w.sync().await.status.code(), Some(0));
    let head = w.repo.head("tagpin/main").unwrap();
    w.repo.reset_branch("backup/tagpin-main", &head);

    let out = w.verify(1).await;
    assert_ne!(out.status.code(), Some(2), "{}", text(&out));
    let refs = w.hub.status_refs(&head, "tagpin/converged").unwrap();
    assert!(
        !refs.is_empty() && refs.iter().all(|r| r == "tagpin/main"),
        "{refs:?}"
    );

    let merged = w.hub.merge_by_hand(&w.repo, 1, &["apps/web.yaml"]);
    let out = w.verify(1).await;
    assert_ne!(out.status.code(), Some(2), "{}", text(&out));
    let refs = w.hub.status_refs(&merged, "tagpin/converged").unwrap();
    assert!(
        !refs.is_empty() && refs.iter().all(|r| r == "main"),
        "{refs:?}"
    );
    w.hub.assert_no_violations();
}

/// A person's commit on tagpin's branch is left alone, and the note tagpin leaves on the
/// change request, like the line it prints, speaks the forge's words.
async fn edited_by_hand_is_said_in_the_forges_words(kind: Kind) {
    let w = World::new(kind).await;
    assert_eq!(w.sync().await.status.code(), Some(0));
    let reviewer = w.repo.commit_as_other_writer(
        "tagpin/main",
        &[("apps/README.md", "Reviewed.\n")],
        "Review: a note for the deploy",
    );
    // A digest moves, so tagpin has something new to push.
    w.registry
        .push_image("acme/web", "1.0", "web-1-rebuilt")
        .await;

    let out = w.sync().await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(w.repo.head("tagpin/main"), Some(reviewer.clone()));
    let said = format!(
        "{}: tagpin/main was edited by hand (its tip {} is not tagpin's); left alone until the {} is closed",
        kind.named(1),
        &reviewer[..12],
        kind.word()
    );
    assert!(text(&out).contains(&said), "{}", text(&out));
    let notes: Vec<String> = w
        .hub
        .comments(1)
        .into_iter()
        .filter(|c| c.contains("<!-- tagpin-edited-by-hand -->"))
        .collect();
    assert_eq!(notes.len(), 1, "{notes:?}");
    let (ours, theirs) = match kind {
        Kind::GitHub
        | Kind::Gitea
        | Kind::Bitbucket
        | Kind::BitbucketServer
        | Kind::AzureDevOps => (kind.word(), Kind::GitLab.word()),
        Kind::GitLab => (kind.word(), Kind::GitHub.word()),
    };
    assert!(
        notes[0].contains(&format!("tagpin has stopped updating this {ours}."))
            && notes[0].contains(&format!("close this {ours} (tagpin proposes"))
            && !notes[0].contains(theirs),
        "{}",
        notes[0]
    );
    w.hub.assert_no_violations();
}
every_forge!(edited_by_hand_is_said_in_the_forges_words);

/// A fork's change request from a branch named like tagpin's is never adopted, edited or
/// verified: tagpin opens its own.
async fn a_fork_change_request_is_never_adopted(kind: Kind) {
    let w = World::new(kind).await;
    let main = w.repo.head("main").unwrap();
    let fork = match &w.hub {
        Hub::GitHub(gh) => {
            gh.open_outsider_fork_pr(&main, "Pin 1 image(s) to digests", "<!-- tagpin-plan -->")
        }
        Hub::GitLab(gl) => {
            gl.fork_project(PROJECT, "mallory/gitops", "mallory");
            gl.open_fork_mr_as(
                "mallory",
                "mallory/gitops",
                "tagpin/main",
                &main,
                PROJECT,
                "main",
                "Pin 1 image(s) to digests",
            )
        }
        Hub::Gitea(gt) => gt.open_fork_pull_as(
            "mallory",
            GITEA_REPO,
            "tagpin/main",
            &main,
            "main",
            "Pin 1 image(s) to digests",
            "<!-- tagpin-plan -->",
        ),
        Hub::BitbucketServer(bb) => bb.open_fork_pull_as(
            "mallory",
            "tagpin/main",
            &main,
            "main",
            "Pin 1 image(s) to digests",
            "<!-- tagpin-plan -->",
        ),
        Hub::Bitbucket(bb) => bb.open_fork_pull_as(
            "mallory",
            BITBUCKET_REPO,
            "tagpin/main",
            &main,
            "main",
            "Pin 1 image(s) to digests",
            "<!-- tagpin-plan -->",
        ),
        Hub::AzureDevOps(ado) => ado.open_fork_pull_as(
            "mallory",
            ADO_REPO,
            "tagpin/main",
            &main,
            "main",
            "Pin 1 image(s) to digests",
            "<!-- tagpin-plan -->",
        ),
    };

    let out = w.sync().await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let changes = w.hub.changes();
    assert_eq!(changes.len(), 2, "{changes:?}");
    let theirs = changes.iter().find(|c| c.number == fork).unwrap();
    assert!(
        theirs.fork && theirs.labels.is_empty(),
        "untouched: {theirs:?}"
    );
    let ours = changes.iter().find(|c| c.number != fork).unwrap();
    assert!(!ours.fork && ours.open);

    let refused = w.verify(fork).await;
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    let said = format!("{} comes from a fork", kind.named(fork));
    assert!(text(&refused).contains(&said), "{}", text(&refused));
    w.hub.assert_no_violations();
}
every_forge!(a_fork_change_request_is_never_adopted);

/// GitLab answers `409` when a merge request is already open for the source branch: one
/// opened after tagpin listed (another replica, a person) is adopted in the same pass, given
/// tagpin's title, body and labels, and no second one is opened.
#[tokio::test]
async fn gitlab_a_merge_request_opened_meanwhile_is_adopted_on_409() {
    let w = World::new(Kind::GitLab).await;
    let Hub::GitLab(gl) = &w.hub else {
        unreachable!()
    };
    // A first pass pushed tagpin's branch but could not open its merge request; a person
    // opened one on it since, which tagpin's next list does not see yet (it was opened
    // between tagpin's list and its open).
    w.hub.fail_next_open();
    assert_eq!(w.sync().await.status.code(), Some(1));
    gl.open_mr_as("reviewer", PROJECT, "tagpin/main", "main", "WIP");
    gl.inject(
        support::gitlab::Fault::new("GET", "/merge_requests", 200)
            .json_body(json!([]))
            .times(1),
    );

    let out = w.sync().await;

    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let changes = w.hub.changes();
    assert_eq!(changes.len(), 1, "adopted, not doubled: {changes:?}");
    assert_eq!(changes[0].title, "Pin 1 image(s) to digests");
    assert!(changes[0].body.contains("<!-- tagpin-plan"));
    assert!(changes[0].labels.contains(&"tagpin".to_string()));
    assert!(gl
        .requests()
        .iter()
        .any(|r| r.method == "POST" && r.status == 409));
    gl.assert_no_violations();
}

/// `examples/config`'s pull-request configuration for the forge, pointed at the local servers
/// (only the addresses change), opens its change request.
async fn the_pull_request_example_runs(kind: Kind) {
    let w = World::new(kind).await;
    let (file, remote, api) = match &w.hub {
        Hub::GitHub(gh) => (
            "pull-request-mode.yaml",
            "https://github.com/acme/gitops.git",
            ("https://api.github.com", gh.api_url()),
        ),
        Hub::GitLab(gl) => (
            "pull-request-mode-gitlab.yaml",
            "https://gitlab.example.com/acme/platform/gitops.git",
            ("https://gitlab.example.com/api/v4", gl.api_url()),
        ),
        Hub::Gitea(gt) => (
            "pull-request-mode-gitea.yaml",
            "https://git.example.com/acme/gitops.git",
            ("https://git.example.com/api/v1", gt.api_url()),
        ),
        Hub::BitbucketServer(bb) => (
            "pull-request-mode-bitbucket-server.yaml",
            "https://bitbucket.example.com/scm/acme/gitops.git",
            ("https://bitbucket.example.com", bb.api_url()),
        ),
        Hub::Bitbucket(bb) => (
            "pull-request-mode-bitbucket.yaml",
            "https://bitbucket.org/acme/gitops.git",
            ("https://api.bitbucket.org/2.0", bb.api_url()),
        ),
        Hub::AzureDevOps(ado) => (
            "pull-request-mode-azure-devops.yaml",
            "https://dev.azure.com/acme/platform/_git/gitops",
            ("https://dev.azure.com/acme", ado.api_url()),
        ),
    };
    let example = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples/config")
            .join(file),
    )
    .unwrap();
    assert!(
        example.contains(remote) && example.contains(api.0),
        "{example}"
    );
    let local = example
        .replace(remote, &w.repo.file_url())
        .replace(api.0, &api.1);
    w.write_config(&format!(
        "{local}\nregistries: {{insecure: ['{}']}}\n",
        w.registry.host()
    ));

    let out = w.sync().await;

    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let changes = w.hub.changes();
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert!(changes[0].open);
    assert_eq!(
        changes[0].labels.contains(&"dependencies".to_string()),
        kind.has_labels(),
        "{changes:?}"
    );
    w.hub.assert_no_violations();
}
every_forge!(the_pull_request_example_runs);

// ---------------------------------------------------------------------------------------------
// Promotion by change request, staging -> production, each stage on its own cluster.

const PROMOTION_BRANCH: &str = "tagpin/promote/production";
const STAGE_CONTEXT: &str = "tagpin/stage/staging";
const PROMOTION_CONTEXT: &str = "tagpin/promotion";
const STAGING_FILE: &str = "envs/staging/web.yaml";
const PRODUCTION_FILE: &str = "envs/production/web.yaml";

/// `acme/web:1.5.0` for staging (sync pins it), production on `1.4.0` by digest, a forge, and
/// a cluster per stage.
pub(crate) struct Stages {
    registry: TestRegistry,
    repo: BareRepo,
    pub(crate) hub: Hub,
    pub(crate) staging: KubeServer,
    production: KubeServer,
    dir: tempfile::TempDir,
    host: String,
    old: String,
}

impl Stages {
    pub(crate) async fn new(kind: Kind, soak: &str) -> Stages {
        let registry = TestRegistry::start(Mode::Plain).await;
        let host = registry.host();
        registry.push_image("acme/web", "1.5.0", "web-1.5.0").await;
        let old = registry
            .push_image("acme/web", "1.4.0", "web-1.4.0")
            .await
            .manifest;
        let repo = BareRepo::create(&[
            (
                STAGING_FILE,
                &deployment_with_replicas("web", &format!("{host}/acme/web:1.5.0"), 1),
            ),
            (
                PRODUCTION_FILE,
                &deployment_with_replicas("web", &format!("{host}/acme/web:1.4.0@{old}"), 1),
            ),
        ]);
        let hub = Hub::start(kind, &repo).await;
        let (staging, production) = (KubeServer::start().await, KubeServer::start().await);
        let dir = tempfile::tempdir().unwrap();
        let mut kubeconfigs = Vec::new();
        for (name, kube) in [("staging", &staging), ("production", &production)] {
            std::fs::create_dir_all(dir.path().join(name)).unwrap();
            kubeconfigs.push(kube.kubeconfig(&dir.path().join(name)));
        }
        std::fs::write(
            dir.path().join("tagpin.yaml"),
            format!(
                "repository: {{url: '{}', branch: main}}\n\
                 mode: commit\n\
                 registries: {{insecure: ['{host}']}}\n\
                 verify: {{default_namespace: shop}}\n\
                 {}\
                 promotion:\n  stages:\n\
                 \x20 - name: staging\n    paths: [envs/staging]\n    cluster: {{kubeconfig: '{}'}}\n\
                 \x20 - name: production\n    paths: [envs/production]\n    cluster: {{kubeconfig: '{}'}}\n    soak: {soak}\n    mode: pull-request\n",
                repo.file_url(),
                hub.forge_yaml(),
                kubeconfigs[0].display(),
                kubeconfigs[1].display(),
            ),
        )
        .unwrap();
        Stages {
            registry,
            repo,
            hub,
            staging,
            production,
            dir,
            host,
            old,
        }
    }

    async fn tagpin(&self, args: &[&str]) -> Output {
        // Only the stages' own kubeconfig files may be used.
        let kubeconfig = self.dir.path().join("no-such-kubeconfig");
        output_without_token(tagpin_command(self.dir.path(), args, &kubeconfig, TOKEN)).await
    }

    /// `sync` pins staging on main; returns the image staging now names.
    pub(crate) async fn sync(&self) -> String {
        let out = self.tagpin(&["sync"]).await;
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        image_in(&self.repo, "main", STAGING_FILE)
    }

    /// `promote --to production --output json`: the exit code and the report.
    pub(crate) async fn promote(&self) -> (Option<i32>, serde_json::Value, Output) {
        let out = self
            .tagpin(&["promote", "--to", "production", "--output", "json"])
            .await;
        let report = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", text(&out)));
        (out.status.code(), report, out)
    }

    /// `cluster` runs `image` (`HOST/acme/web:TAG@DIGEST`), its one pod on `digest`.
    /// A new image is a new generation of the Deployment, observed and rolled out.
    pub(crate) fn runs(&self, cluster: &KubeServer, image: &str, digest: &str) {
        let web = LiveDeployment::new("shop", "web").container("app", image);
        web.apply(cluster);
        let id = format!("{}/acme/web@{digest}", self.host);
        web.pod("web-1").running(cluster, &[&id]);
    }

    pub(crate) fn tip(&self) -> String {
        self.repo.head("main").unwrap()
    }

    /// One promotion pass into production in this process (a new one's: nothing remembered),
    /// the report as `--output json` prints it, with tagpin's clock `ahead` of the machine's
    /// as far as the forge's is ([`Hub::advance_clock`]): a test moves time instead of
    /// waiting for it.
    pub(crate) async fn promote_at(&self, ahead: std::time::Duration) -> serde_json::Value {
        use tagpin::promote::{Clock, PromoteOptions, Promoter};
        let config = tagpin::config::Config::load(&self.dir.path().join("tagpin.yaml")).unwrap();
        let forge =
            tagpin::forge::ForgeClient::new(config.forge.as_ref().unwrap(), TOKEN.into()).unwrap();
        let registry = tagpin::registry::Client::new(tagpin::registry::Settings {
            insecure_hosts: config.registries.insecure.clone(),
            ..Default::default()
        })
        .unwrap();
        let mirror = support::mirror(&config, &self.dir.path().join("cache"));
        let (source, _) = tagpin::promote::route(&config, "production").unwrap();
        let cluster = tagpin::promote::connect(source, tagpin::cluster::DEFAULT_API_TIMEOUT)
            .await
            .unwrap();
        let ahead = ahead.as_secs() as i64;
        let clock: Clock = std::sync::Arc::new(move || tagpin::clock::unix_now() + ahead);
        let report = Promoter::new(&config, &registry, Some(&forge), &mirror)
            .unwrap()
            .with_clock(clock)
            .run("production", &cluster, PromoteOptions::default())
            .await
            .unwrap();
        serde_json::to_value(&report).unwrap()
    }

    /// `(state, description)` of the statuses `context` on `sha`, oldest first.
    fn statuses(&self, sha: &str, context: &str) -> Vec<(String, String)> {
        self.hub
            .statuses_described(sha)
            .into_iter()
            .filter(|(c, ..)| c == context)
            .map(|(_, state, description)| (state, description))
            .collect()
    }
}

/// The image a manifest in `repo` names on `branch` (its first `image:` line).
fn image_in(repo: &BareRepo, branch: &str, file: &str) -> String {
    let text = repo.read(branch, file).unwrap();
    text.lines()
        .find_map(|l| l.trim().strip_prefix("image: "))
        .unwrap()
        .to_string()
}

/// `tagpin ARGS` with its config (`tagpin.yaml`), cache and home in `dir`, `kubeconfig` as
/// `KUBECONFIG` and `token` as the forge token; no Docker config or log filter of the machine's.
fn tagpin_command(
    dir: &std::path::Path,
    args: &[&str],
    kubeconfig: &std::path::Path,
    token: &str,
) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_tagpin"));
    cmd.args(args)
        .arg("--config")
        .arg(dir.join("tagpin.yaml"))
        .arg("--cache-dir")
        .arg(dir.join("cache"))
        .env("HOME", dir)
        .env("KUBECONFIG", kubeconfig)
        .env("TAGPIN_FORGE_TOKEN", token)
        .env_remove("DOCKER_CONFIG")
        .env_remove("RUST_LOG");
    cmd
}

/// Runs `cmd` to the end; fails the test if its output shows the token.
async fn output_without_token(mut cmd: tokio::process::Command) -> Output {
    let out = cmd.output().await.expect("run tagpin");
    assert!(
        !text(&out).contains(TOKEN),
        "the token is shown: {}",
        text(&out)
    );
    out
}

pub(crate) fn digest_of(image: &str) -> String {
    image.split_once('@').unwrap().1.to_string()
}

/// Staging rolling out holds the promotion back; converged, it opens one change request whose
/// head carries `tagpin/promotion` success; staging moving on updates that same one; merged
/// and run by production, `verify` of it posts `tagpin/converged` on the commit that landed.
async fn promotion_gated_then_opened_then_updated(kind: Kind) {
    let w = Stages::new(kind, "0s").await;
    let image = w.sync().await;
    let digest = digest_of(&image);

    // Staging's pod still runs the old digest: not promoted. (On GitLab the pending stage
    // status this posts is a minute old when staging converges: GitLab moves it to success in
    // place, and the soak clock must start then, not when it was pending.)
    if let Hub::GitLab(gl) = &w.hub {
        gl.freeze_clock(std::time::SystemTime::now() - std::time::Duration::from_secs(60));
    }
    w.runs(&w.staging, &image, &w.old);
    let (code, report, out) = w.promote().await;
    assert_eq!(code, Some(3), "{}", text(&out));
    assert_eq!(report["gate"]["gate"], "waiting", "{report:#}");
    assert!(w.hub.changes().is_empty());
    if let Hub::GitLab(gl) = &w.hub {
        gl.advance_clock(std::time::Duration::from_secs(120));
    }

    w.runs(&w.staging, &image, &digest);
    let (code, report, out) = w.promote().await;
    assert_eq!(code, Some(0), "{}", text(&out));
    assert_eq!(
        report["outcome"]["outcome"], "pull_request_opened",
        "{report:#}"
    );
    let changes = w.hub.changes();
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert_eq!(changes[0].head_ref, PROMOTION_BRANCH);
    assert_eq!(
        changes[0].title,
        "Promote 1 image(s) from staging to production"
    );
    let head = w.repo.head(PROMOTION_BRANCH).unwrap();
    assert!(w
        .repo
        .read(PROMOTION_BRANCH, PRODUCTION_FILE)
        .unwrap()
        .contains(&digest));
    let promotion = w.statuses(&head, PROMOTION_CONTEXT);
    assert_eq!(promotion.last().unwrap().0, "success", "{promotion:?}");
    if let Some(refs) = w.hub.status_refs(&head, PROMOTION_CONTEXT) {
        assert!(refs.iter().all(|r| r == PROMOTION_BRANCH), "{refs:?}");
    }
    if let Some(refs) = w.hub.status_refs(&w.tip(), STAGE_CONTEXT) {
        assert!(
            !refs.is_empty() && refs.iter().all(|r| r == "main"),
            "{refs:?}"
        );
    }
    let stage = w.statuses(&w.tip(), STAGE_CONTEXT);
    assert_eq!(stage.last().unwrap().0, "success", "{stage:?}");
    assert!(
        stage.last().unwrap().1.starts_with("converged since "),
        "{stage:?}"
    );

    // A second pass reads the clock back and changes nothing.
    let writes = w.hub.writes();
    let (code, _, out) = w.promote().await;
    assert_eq!(code, Some(0), "{}", text(&out));
    assert_eq!(
        w.hub.writes(),
        writes,
        "nothing written again: {:#?}\n{}",
        w.hub.write_log(),
        text(&out)
    );

    // Staging moves on: the same change request is updated.
    let rebuilt = w
        .registry
        .push_image("acme/web", "1.5.0", "web-1.5.0-rebuilt")
        .await
        .manifest;
    let moved = w.sync().await;
    assert_eq!(digest_of(&moved), rebuilt);
    w.runs(&w.staging, &moved, &rebuilt);
    let (code, report, out) = w.promote().await;
    assert_eq!(code, Some(0), "{}", text(&out));
    assert_eq!(
        report["outcome"]["outcome"], "pull_request_updated",
        "{report:#}"
    );
    let changes = w.hub.changes();
    assert_eq!(changes.len(), 1, "the same one: {changes:?}");
    assert!(
        changes[0].body.contains(&rebuilt[..19]),
        "{}",
        changes[0].body
    );
    let moved_head = w.repo.head(PROMOTION_BRANCH).unwrap();
    assert_ne!(moved_head, head);
    let promotion = w.statuses(&moved_head, PROMOTION_CONTEXT);
    assert_eq!(promotion.last().unwrap().0, "success", "{promotion:?}");

    // Merged by a person and run by production: verified there.
    let merged = w.hub.merge_by_hand(&w.repo, 1, &[PRODUCTION_FILE]);
    let production_image = image_in(&w.repo, "main", PRODUCTION_FILE);
    assert_eq!(digest_of(&production_image), rebuilt);
    w.runs(&w.production, &production_image, &rebuilt);
    let out = w.tagpin(&["verify", "--pr", "1"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let converged = w.statuses(&merged, "tagpin/converged");
    assert_eq!(converged.last().unwrap().0, "success", "{converged:?}");
    if let Some(refs) = w.hub.status_refs(&merged, "tagpin/converged") {
        assert!(refs.iter().all(|r| r == "main"), "the target: {refs:?}");
    }
    w.hub.assert_no_violations();
    w.staging.assert_no_writes();
    w.production.assert_no_writes();
}
every_forge!(promotion_gated_then_opened_then_updated);

/// While staging soaks, nothing is promoted; the clock is read back from tagpin's own stage
/// status (GitHub: its creator; GitLab: its author; Bitbucket Data Center, which records no
/// author: tagpin's signature), and one posted in tagpin's context by a CI job, claiming an
/// earlier start, does not move it earlier.
async fn the_soak_clock_is_tagpins_own(kind: Kind) {
    let w = Stages::new(kind, "1h").await;
    let image = w.sync().await;
    w.runs(&w.staging, &image, &digest_of(&image));

    let (code, report, out) = w.promote().await;
    assert_eq!(code, Some(3), "{}", text(&out));
    assert_eq!(report["gate"]["gate"], "soaking", "{report:#}");
    let since = report["gate"]["since"].as_i64().unwrap();
    let fingerprint = report["source"]["digests"].as_str().unwrap().to_string();
    let tip = w.tip();
    assert_eq!(w.statuses(&tip, STAGE_CONTEXT).len(), 1);

    w.hub
        .post_status_as_ci(
            &tip,
            STAGE_CONTEXT,
            &format!("converged since 2020-01-01T00:00:00Z · 1 image(s) · set {fingerprint}"),
        )
        .await;
    let (code, report, out) = w.promote().await;

    assert_eq!(code, Some(3), "{}", text(&out));
    if matches!(kind, Kind::Bitbucket | Kind::BitbucketServer) {
        // Bitbucket (Cloud and Data Center) keeps one build status per commit and key and
        // records no author: the CI job's replaced tagpin's, and without tagpin's signature it
        // carries no clock. The clock starts again (never earlier).
        assert!(
            report["gate"]["since"].as_i64().unwrap() >= since,
            "{report:#}"
        );
        assert!(
            text(&out).contains("set by an unknown creator is ignored"),
            "{}",
            text(&out)
        );
        if let Hub::BitbucketServer(bb) = &w.hub {
            // And tagpin's own status is set back.
            let stage: Vec<_> = bb
                .statuses(&tip)
                .into_iter()
                .filter(|s| s.key == STAGE_CONTEXT)
                .collect();
            assert_eq!(stage.len(), 1, "{stage:?}");
            assert_eq!(stage[0].posted_by, BOT, "{stage:?}");
            assert!(!stage[0].description.contains("2020-01-01"), "{stage:?}");
        }
    } else {
        assert_eq!(report["gate"]["since"].as_i64(), Some(since), "{report:#}");
        assert!(
            text(&out).contains(&format!("set by {} is ignored", w.hub.creator("ci-bot"))),
            "{}",
            text(&out)
        );
    }
    assert!(w.hub.changes().is_empty(), "nothing promoted");
    w.hub.assert_no_violations();
}
every_forge!(the_soak_clock_is_tagpins_own);

/// A stage status tagpin set once, saved and posted again later by someone else, is no newer
/// evidence: staging converged at T0, regressed, converged again at T0+40m; the status
/// "converged since T0" posted again at T0+41m does not end a one-hour soak at T0+70m.
/// Gitea and Azure DevOps name each status's creator, so the copy is someone else's there;
/// Bitbucket (Cloud and Data Center) records none, and the copy carries tagpin's signature:
/// its stamp says it was said at T0, and the forge recorded it at T0+41m.
async fn a_replayed_stage_status_is_no_newer_evidence(kind: Kind) {
    use std::time::Duration;
    let minutes = |m: u64| Duration::from_secs(60 * m);
    let w = Stages::new(kind, "1h").await;
    let image = w.sync().await;
    let digest = digest_of(&image);
    let tip = w.tip();

    // T0: converged, the soak begins.
    w.runs(&w.staging, &image, &digest);
    let report = w.promote_at(Duration::ZERO).await;
    assert_eq!(report["gate"]["gate"], "soaking", "{report:#}");
    let started = report["gate"]["since"].as_i64().unwrap();
    let saved = w.hub.saved_status(&tip, STAGE_CONTEXT);
    assert!(saved.to_string().contains("converged since"), "{saved}");

    // T0+30m: a pod runs the old digest again; T0+40m: converged again, a new soak.
    w.hub.advance_clock(minutes(30));
    w.runs(&w.staging, &image, &w.old);
    let report = w.promote_at(minutes(30)).await;
    assert_eq!(report["gate"]["gate"], "waiting", "{report:#}");
    w.hub.advance_clock(minutes(10));
    w.runs(&w.staging, &image, &digest);
    let report = w.promote_at(minutes(40)).await;
    assert_eq!(report["gate"]["gate"], "soaking", "{report:#}");
    let again = report["gate"]["since"].as_i64().unwrap();
    assert!(again >= started + 40 * 60, "{report:#}");

    // T0+41m: the status of T0, posted again as it was.
    w.hub.advance_clock(minutes(1));
    w.hub.post_status_body_as_ci(&tip, &saved).await;

    // T0+70m: an hour after T0, thirty minutes after the soak began again.
    w.hub.advance_clock(minutes(29));
    let report = w.promote_at(minutes(70)).await;
    assert_eq!(report["gate"]["gate"], "soaking", "{report:#}");
    let since = report["gate"]["since"].as_i64().unwrap();
    assert!(since >= again, "never earlier than T0+40m: {report:#}");
    assert!(w.hub.changes().is_empty(), "nothing promoted");
    w.hub.assert_no_violations();
}

/// [`a_replayed_stage_status_is_no_newer_evidence`] on the forges whose statuses are keyed by
/// their name.
mod a_replayed_stage_status_is_no_newer_evidence {
    use super::Kind;
    #[tokio::test]
    async fn gitea() {
        super::a_replayed_stage_status_is_no_newer_evidence(Kind::Gitea).await;
    }
    #[tokio::test]
    async fn bitbucket_server() {
        super::a_replayed_stage_status_is_no_newer_evidence(Kind::BitbucketServer).await;
    }
    #[tokio::test]
    async fn bitbucket() {
        super::a_replayed_stage_status_is_no_newer_evidence(Kind::Bitbucket).await;
    }
    #[tokio::test]
    async fn azure_devops() {
        super::a_replayed_stage_status_is_no_newer_evidence(Kind::AzureDevOps).await;
    }
}

/// Bitbucket Data Center lets whoever posts a build status say when (`lastUpdated`): the
/// status of T0, saved and posted again *with its old time* after staging broke and converged
/// again, carries tagpin's stamp and its recorded time matches the stamp. tagpin believes a
/// soak start read back from Data Center only as far back as it saw the stage converge itself
/// (the soak memory beside the mirror), so the soak that began again at T0+40m still runs at
/// T0+70m, and nothing is promoted.
#[tokio::test]
async fn bitbucket_server_a_status_replayed_with_its_old_time_does_not_shorten_the_soak() {
    use std::time::{Duration, UNIX_EPOCH};
    let minutes = |m: u64| Duration::from_secs(60 * m);
    let w = Stages::new(Kind::BitbucketServer, "1h").await;
    let Hub::BitbucketServer(bb) = &w.hub else {
        unreachable!("a Bitbucket Data Center world")
    };
    let image = w.sync().await;
    let digest = digest_of(&image);
    let tip = w.tip();

    // T0: converged, the soak begins; the status of T0 is saved with its time.
    w.runs(&w.staging, &image, &digest);
    let report = w.promote_at(Duration::ZERO).await;
    assert_eq!(report["gate"]["gate"], "soaking", "{report:#}");
    let started = report["gate"]["since"].as_i64().unwrap();
    let mut saved = w.hub.saved_status(&tip, STAGE_CONTEXT);
    let said = bb
        .statuses(&tip)
        .into_iter()
        .find(|s| s.key == STAGE_CONTEXT)
        .expect("tagpin's stage status")
        .updated;
    let said_ms = said.duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
    saved["lastUpdated"] = said_ms.into();

    // T0+30m: broken; T0+40m: converged again, a new soak.
    w.hub.advance_clock(minutes(30));
    w.runs(&w.staging, &image, &w.old);
    let report = w.promote_at(minutes(30)).await;
    assert_eq!(report["gate"]["gate"], "waiting", "{report:#}");
    w.hub.advance_clock(minutes(10));
    w.runs(&w.staging, &image, &digest);
    let report = w.promote_at(minutes(40)).await;
    let again = report["gate"]["since"].as_i64().unwrap();
    assert!(again >= started + 40 * 60, "{report:#}");

    // T0+41m: the status of T0 posted again, dated T0 by its poster: Bitbucket records T0.
    w.hub.advance_clock(minutes(1));
    w.hub.post_status_body_as_ci(&tip, &saved).await;
    let replayed = bb
        .statuses(&tip)
        .into_iter()
        .find(|s| s.key == STAGE_CONTEXT)
        .unwrap();
    let replayed_ms = replayed
        .updated
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    assert_eq!(replayed_ms, said_ms, "the copy carries its old time");

    // T0+70m: an hour after T0, thirty minutes after the soak began again.
    w.hub.advance_clock(minutes(29));
    let report = w.promote_at(minutes(70)).await;
    assert_eq!(report["gate"]["gate"], "soaking", "{report:#}");
    let since = report["gate"]["since"].as_i64().unwrap();
    assert!(since >= again, "never earlier than T0+40m: {report:#}");
    assert!(w.hub.changes().is_empty(), "nothing promoted");

    // T0+100m: the soak that began at T0+40m is over; staging's digest is promoted.
    w.hub.advance_clock(minutes(30));
    let report = w.promote_at(minutes(100)).await;
    assert_eq!(report["gate"]["gate"], "open", "{report:#}");
    assert!(!w.hub.changes().is_empty(), "promoted once the soak held");
    w.hub.assert_no_violations();
}

/// A flood of statuses past the page bound can hide tagpin's own on a commit (Gitea's and Azure
/// DevOps's status lists have no filter by context): the soak then starts again, and never
/// reads an older start from a commit further back. Staging converged at T0 on one commit; a
/// commit that changes nothing of staging's carried that start; there staging regressed and
/// converged again at T0+40m; then 2,600 (Gitea) or 5,100 (Azure DevOps) statuses of a CI
/// job's buried tagpin's. At T0+70m the soak is not over.
async fn a_flood_of_statuses_only_restarts_the_soak(kind: Kind) {
    use std::time::Duration;
    let minutes = |m: u64| Duration::from_secs(60 * m);
    let w = Stages::new(kind, "1h").await;
    let image = w.sync().await;
    let digest = digest_of(&image);
    w.runs(&w.staging, &image, &digest);
    let report = w.promote_at(Duration::ZERO).await;
    assert_eq!(report["gate"]["gate"], "soaking", "{report:#}");
    let started = report["gate"]["since"].as_i64().unwrap();

    // A commit that changes nothing of staging's carries the start of T0.
    w.repo
        .commit_as_other_writer("main", &[("README.md", "docs\n")], "Docs");
    let tip = w.tip();
    w.hub.advance_clock(minutes(20));
    let report = w.promote_at(minutes(20)).await;
    assert_eq!(
        report["gate"]["since"].as_i64(),
        Some(started),
        "{report:#}"
    );

    // There staging regresses at T0+30m and converges again at T0+40m.
    w.hub.advance_clock(minutes(10));
    w.runs(&w.staging, &image, &w.old);
    let report = w.promote_at(minutes(30)).await;
    assert_eq!(report["gate"]["gate"], "waiting", "{report:#}");
    w.hub.advance_clock(minutes(10));
    w.runs(&w.staging, &image, &digest);
    let report = w.promote_at(minutes(40)).await;
    let again = report["gate"]["since"].as_i64().unwrap();
    assert!(again >= started + 40 * 60, "{report:#}");

    // A CI job buries tagpin's statuses on that commit past the page bound.
    w.hub.advance_clock(minutes(1));
    match &w.hub {
        Hub::Gitea(gt) => gt.flood_statuses_as("ci-bot", GITEA_REPO, &tip, 50 * 50 + 100),
        Hub::AzureDevOps(ado) => ado.flood_statuses_as("ci-bot", ADO_REPO, &tip, 50 * 100 + 100),
        _ => unreachable!("a forge whose status list has no filter by context"),
    }

    w.hub.advance_clock(minutes(29));
    let report = w.promote_at(minutes(70)).await;
    assert_eq!(report["gate"]["gate"], "soaking", "{report:#}");
    let since = report["gate"]["since"].as_i64().unwrap();
    assert!(since >= again, "never earlier than T0+40m: {report:#}");
    assert!(w.hub.changes().is_empty(), "nothing promoted");
    w.hub.assert_no_violations();
}

mod a_flood_of_statuses_only_restarts_the_soak {
    use super::Kind;
    #[tokio::test]
    async fn gitea() {
        super::a_flood_of_statuses_only_restarts_the_soak(Kind::Gitea).await;
    }
    #[tokio::test]
    async fn azure_devops() {
        super::a_flood_of_statuses_only_restarts_the_soak(Kind::AzureDevOps).await;
    }
}

// ---------------------------------------------------------------------------------------------
// The controller.

/// `tagpin run` opens its change request on start, verifies it while it is open, and after a
/// person merges it and the cluster runs it, posts success on the commit that landed and says
/// Converged in its one comment; then it stops cleanly on SIGTERM.
async fn the_controller_verifies_what_it_opened_until_converged(kind: Kind) {
    let w = World::new(kind).await;
    let (child, _) = w.controller("1h");

    let opened = support::eventually_or("a change request and its pending status", || {
        w.repo.head("tagpin/main").is_some_and(|head| {
            w.hub.changes().len() == 1
                && w.hub
                    .statuses(&head)
                    .iter()
                    .any(|(c, s)| c == "tagpin/converged" && s != "success")
        })
    })
    .await;
    let merged = if opened {
        let image = image_in(&w.repo, "tagpin/main", "apps/web.yaml");
        let merged = w.hub.merge_by_hand(&w.repo, 1, &["apps/web.yaml"]);
        let web = live_web("web", &image);
        web.apply(&w.kube);
        web.pod("web-1").running(&w.kube, &[&image_id(&image)]);
        let converged =
            support::eventually_or("success on the merge commit and the comment", || {
                w.hub
                    .statuses(&merged)
                    .iter()
                    .any(|(c, s)| c == "tagpin/converged" && s == "success")
                    && w.hub
                        .comments(1)
                        .iter()
                        .any(|c| c.contains("cluster Converged"))
            })
            .await;
        converged.then_some(merged)
    } else {
        None
    };

    let output = support::terminate(child, "tagpin run").await;
    let log = String::from_utf8_lossy(&output.stderr);
    assert!(opened, "no change request verified: {log}");
    assert!(merged.is_some(), "not verified after the merge: {log}");
    assert_eq!(output.status.code(), Some(0), "{log}");
    assert!(!log.contains(TOKEN));
    assert!(
        !log.contains("cannot set the") && !log.contains("cannot mark"),
        "every status was taken: {log}"
    );
    assert_eq!(w.hub.comments(1).len(), 1, "one comment");
    w.hub.assert_no_violations();
    w.kube.assert_no_writes();
}
every_forge!(the_controller_verifies_what_it_opened_until_converged);

/// `verify.on_failure: revert` in pull-request mode, on each forge: a merged change request
/// whose pods cannot pull the digest it pinned gets exactly one revert change request (label
/// `tagpin-revert`, branch `tagpin/revert/main`) with the evidence, restoring the file byte for
/// byte and verified like any tagpin change, and no second one on later rounds.
async fn a_merged_pin_the_cluster_rejects_gets_one_revert_change_request(kind: Kind) {
    let w = World::new(kind).await;
    assert_eq!(w.sync().await.status.code(), Some(0));
    w.hub.merge_by_hand(&w.repo, 1, &["apps/web.yaml"]);
    let before = w.repo.read("main", "apps/web.yaml").unwrap();
    // The tag moves to an image the nodes cannot pull.
    w.registry.push_image("acme/web", "1.0", "web-2").await;
    let config = std::fs::read_to_string(w.config()).unwrap();
    w.write_config(&config.replace(
        "verify: {default_namespace: shop}",
        "verify: {default_namespace: shop, on_failure: revert}",
    ));
    let (child, metrics) = w.controller("2s");

    let proposed = support::eventually_or("the new pin proposed", || {
        w.hub.changes().iter().any(|c| c.number == 2 && c.open)
    })
    .await;
    let merge = proposed.then(|| {
        let image = image_in(&w.repo, "tagpin/main", "apps/web.yaml");
        let merge = w.hub.merge_by_hand(&w.repo, 2, &["apps/web.yaml"]);
        let web = live_web("web", &image);
        web.apply(&w.kube);
        web.pod("web-1").waiting(
            &w.kube,
            "ImagePullBackOff",
            &format!("Back-off pulling image \"{image}\""),
        );
        merge
    });
    let revert = || {
        w.hub
            .changes()
            .into_iter()
            .filter(|c| c.head_ref == "tagpin/revert/main")
            .collect::<Vec<_>>()
    };
    let verified = |change: &Change| {
        w.repo.head(&change.head_ref).is_some_and(|head| {
            w.hub
                .statuses(&head)
                .iter()
                .any(|(c, _)| c == "tagpin/converged")
        })
    };
    let reverted = merge.is_some()
        && support::eventually_or("one revert change request, verified", || {
            revert().first().is_some_and(verified)
        })
        .await;
    // Later rounds: the same change request, never a second. Three more passes, counted by
    // the controller itself, not a span of wall time.
    let passes = || async {
        let page = match reqwest::get(&metrics).await {
            Ok(answer) => answer.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        crate::run::metric_sum(&page, "tagpin_passes_total{")
    };
    let passed = passes().await;
    support::eventually_async("three more passes", || async {
        passes().await >= passed + 3.0
    })
    .await;
    let output = support::terminate(child, "tagpin run").await;
    let log = String::from_utf8_lossy(&output.stderr);
    assert!(reverted, "no verified revert: {:?}\n{log}", w.hub.changes());
    let reverts = revert();
    assert_eq!(reverts.len(), 1, "{reverts:?}");
    let revert = &reverts[0];
    assert!(revert.open, "{revert:?}");
    assert!(
        revert
            .title
            .starts_with("Revert pin of 1 image(s): shop/Deployment/web (app): ImagePullBackOff"),
        "{}",
        revert.title
    );
    assert_eq!(
        revert.labels.contains(&"tagpin-revert".to_string()),
        kind.has_labels(),
        "{revert:?}"
    );
    let merge = merge.unwrap();
    assert!(
        revert.body.contains(&format!("Reverted: {merge}")),
        "{}",
        revert.body
    );
    assert_eq!(
        w.repo.read("tagpin/revert/main", "apps/web.yaml").unwrap(),
        before,
        "the file as it was before the failed pin, byte for byte"
    );
    assert_eq!(output.status.code(), Some(0), "{log}");
    assert!(!log.contains(TOKEN));
    w.hub.assert_no_violations();
    w.kube.assert_no_writes();
}
every_forge!(a_merged_pin_the_cluster_rejects_gets_one_revert_change_request);

// ---------------------------------------------------------------------------------------------
// GitLab's own answers: rate limits and refusals, named.

/// A `429` with `Retry-After` is waited out and the call made again; one asking longer than
/// tagpin waits is reported with GitLab's wait, and nothing is written.
#[tokio::test]
async fn gitlab_a_rate_limit_is_waited_out_or_reported_with_its_wait() {
    let w = World::new(Kind::GitLab).await;
    let Hub::GitLab(gl) = &w.hub else {
        unreachable!()
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    gl.inject(support::gitlab::Fault::rate_limited(
        "GET",
        "/merge_requests",
        3600,
        now + 3600,
    ));
    let refused = w.sync().await;
    // A rate limit would meet every group alike: the pass could not run (2).
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    assert!(
        text(&refused).contains("rate limited; GitLab asks to wait 3600s"),
        "{}",
        text(&refused)
    );
    assert!(w.hub.changes().is_empty());

    gl.inject(support::gitlab::Fault::rate_limited(
        "GET",
        "/merge_requests",
        1,
        now + 1,
    ));
    let waited = w.sync().await;
    assert_eq!(waited.status.code(), Some(0), "{}", text(&waited));
    assert_eq!(w.hub.changes().len(), 1);
    let lists: Vec<u16> = gl
        .requests()
        .iter()
        .filter(|r| r.method == "GET" && r.path.ends_with("/merge_requests"))
        .map(|r| r.status)
        .collect();
    assert_eq!(lists[..3], [429, 429, 200], "{lists:?}");
    gl.assert_no_violations();
}

/// A revoked token, a token without the `api` scope, and a project the token cannot see are
/// each told apart, and the token is never shown.
#[tokio::test]
async fn gitlab_token_and_project_problems_are_named() {
    let w = World::new(Kind::GitLab).await;
    let Hub::GitLab(gl) = &w.hub else {
        unreachable!()
    };
    let out = w.tagpin_with_token("sync", &[], "glpat-unknown-0000").await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("401 Unauthorized") && text(&out).contains("the token is not valid"),
        "{}",
        text(&out)
    );

    gl.add_token("glpat-read-only-1111", BOT, support::gitlab::Scope::ReadApi);
    let out = w
        .tagpin_with_token("sync", &[], "glpat-read-only-1111")
        .await;
    assert_ne!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains("the token lacks the api scope"),
        "{}",
        text(&out)
    );
    assert!(w.hub.changes().is_empty());

    gl.add_token(
        "glpat-outsider-2222",
        "outsider",
        support::gitlab::Scope::Api,
    );
    let out = w
        .tagpin_with_token("sync", &[], "glpat-outsider-2222")
        .await;
    assert_ne!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains("404 Not Found")
            && text(&out).contains(&format!("{PROJECT} is not at {}", gl.api_url())),
        "{}",
        text(&out)
    );
    gl.take_violations();
}
