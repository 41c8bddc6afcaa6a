//! The Azure DevOps adapter: Azure Repos pull requests, commit statuses and comment threads
//! through REST `_apis/git`, on Azure DevOps Services (`https://dev.azure.com/ORG`) and on
//! Azure DevOps Server (`https://HOST/tfs/COLLECTION`).
//!
//! A pull request is what a GitHub one is to tagpin: found by its source branch (a tagpin
//! branch of this very repository, never a fork's), opened with the plan block in its
//! description, and read back as `active`, `completed` (merged, with `lastMergeCommit`) or
//! `abandoned` (closed by a person). The verdict is a commit status on the head and on the
//! commit that landed, and one comment thread found by its marker among the comments tagpin's
//! own identity wrote. Azure DevOps's users name pull request 12 `!12`, and so does tagpin.
//!
//! Facts are those of Microsoft's REST specification (`MicrosoftDocs/vsts-rest-api-specs`,
//! `specification/git/7.1/git.json`) and of the types and routes of the npm package
//! `azure-devops-node-api` 17.0.1 (`interfaces/GitInterfaces.d.ts`, `GitApi.js`,
//! `LocationsApi.js`), and of learn.microsoft.com's "REST API versioning" page for which
//! server accepts which `api-version`.
//!
//! What Azure DevOps does its own way, and what tagpin does about it:
//! - Every call names its `api-version`. Azure DevOps Services (`dev.azure.com`,
//!   `*.visualstudio.com`) is asked `7.1`; any other host is an Azure DevOps Server, asked
//!   `6.0`, the newest both Server 2020 (6.0) and Server 2022 (7.0) accept. Labels and the
//!   connection data are preview APIs in every version: `-preview.1` is added to them, as
//!   Azure DevOps refuses a preview API asked without it.
//! - The personal access token goes as HTTP Basic with an empty user
//!   (`base64(":" + token)`), marked sensitive.
//! - Some routes answer a token Azure DevOps does not accept with `203` and an HTML sign-in
//!   page instead of `401`: any successful answer that is not JSON is named as that.
//! - Pull requests are listed `$top`/`$skip` (100 a page, until a short page), filtered by
//!   source and target branch (`searchCriteria.sourceRefName`, `…targetRefName`, always
//!   `refs/heads/…`). The recently closed are asked by closing time
//!   (`searchCriteria.queryTimeRangeType=closed`, `…minTime`); an older server that ignores
//!   those answers more, and tagpin keeps the window itself. No list tagpin reads pages by
//!   `x-ms-continuationtoken`: pull requests page by `$top`/`$skip`, commit statuses by
//!   `top`/`skip` (without `$`, as `GetStatuses` declares them), threads come in one answer.
//! - A pull request list answers each description cut to 400 characters ("Pull Requests -
//!   Get Pull Requests": "description field will be truncated up to 400 symbols in the
//!   result"): one not completed whose listed description may be cut is read again by id
//!   before its plan is compared or parsed, so a quiet pass sends no edit and a pull request a
//!   person abandoned is not opened again for the same digests.
//! - A pull request's description holds at most 4,000 characters. A longer body is cut in its
//!   text, saying so, and its plan block is kept whole in the pull request's properties
//!   (`tagpin.plan`, the Pull Request Properties API, a preview API), from where it is read
//!   back into the body tagpin reads ([`fit_description`], [`stored_body`]).
//! - Labels are added by name, one call each (`POST …/pullRequests/{id}/labels`).
//! - A status carries a context of `genre` and `name`: tagpin's `tagpin/converged` is genre
//!   `tagpin`, name `converged`. Statuses are commit statuses only (not pull-request
//!   statuses): they belong to the commit, like GitHub's, so the commit that landed carries
//!   its verdict after the pull request is gone. Every status posted is kept; each records its
//!   `createdBy`, and only those of tagpin's own identity count.
//! - Identity is the token's `authenticatedUser.id` from `GET {api_url}/_apis/connectionData`
//!   (a GUID), or `forge.login` when set (the same GUID). Statuses and comments are tagpin's
//!   own when their `createdBy.id` or `author.id` is it.
//! - One open pull request per source and target branch: a second is refused `409`, and the
//!   one already open is adopted when it is tagpin's own branch of this repository.
//!
//! Redirects are not followed, so the token is sent to `api_url`'s host only. Every call has a
//! connect timeout and a total deadline, answer included (`forge.timeout_seconds`), and reads
//! at most [`super::MAX_ANSWER_BYTES`]; a `429` is waited out when it says `Retry-After` (or
//! `X-RateLimit-Reset`) within [`super::MAX_RATE_LIMIT_WAIT`], and reported otherwise. Azure
//! DevOps's messages are never quoted.

use std::time::{Duration, SystemTime};

use base64::Engine;
use k8s_openapi::jiff::Timestamp;
use reqwest::header::HeaderMap;
use reqwest::Method;
use serde::{Deserialize, Serialize};

use super::engine::Dialect;
use super::engine::{encode, json, read_pages, read_pages_whole, retry_after, unix};
use super::engine::{Forge, Listing, NewChange, Rest, Result, Said};
use super::engine::{Marked, StatusKey, Words, MAX_PAGES};
use super::settings::ChangeRequestNoun;
use super::settings::{two_keys, Keys, Kind, Section, Settings};
use crate::review::{PullRequestInfo, Status, StatusHistory, StatusState};

const FORGE: &str = "Azure DevOps";
/// `kind: azure-devops`: `forge.project` and `forge.repo` ([`project_and_repo`]); the
/// organization or collection is `forge.api_url`, which has no default.
pub(crate) const SECTION: Section = Section::new("azure-devops", None, project_and_repo);
/// What a failed answer means, in words that say what to fix. Some routes answer a token
/// Azure DevOps does not accept with its sign-in page instead of `401`: a successful answer
/// that is not JSON is named as that.
pub(super) const WORDS: Words = Words {
    wait: rate_limit_wait,
    unauthorized: "the token is not valid (an expired or revoked personal access token, or one of another organization)",
    forbidden: "the token may not do this in {repo} (it needs the Code (Read & write) scope, and Contribute and Contribute to pull requests on the repository)",
    not_found: "{repo} is not at {api}, or the token may not read it",
    conflict: Some("a pull request for these branches is already active"),
    refused: Some((400, "Azure DevOps refused a field or parameter tagpin sent")),
    not_json: Some("the answer is a web page, not JSON: Azure DevOps answers its sign-in page instead of 401 Unauthorized to a personal access token it does not accept (expired, revoked, or of another organization)"),
    ..Words::PLAIN
};
/// Pull requests and statuses asked for per page (`$top`).
pub(crate) const PAGE_TOP: usize = 100;
/// The longest description Azure DevOps keeps on a pull request, in characters.
pub const MAX_DESCRIPTION_CHARS: usize = 4000;
/// How much of a description a pull request list answers ("Pull Requests - Get Pull
/// Requests": "description field will be truncated up to 400 symbols in the result"), in
/// UTF-16 code units, as .NET counts.
pub(crate) const LIST_DESCRIPTION_UNITS: usize = 400;
/// `api-version` asked of Azure DevOps Services.
pub(crate) const CLOUD_API_VERSION: &str = "7.1";
/// `api-version` asked of Azure DevOps Server: 2020 accepts up to 6.0, 2022 up to 7.0.
pub(crate) const SERVER_API_VERSION: &str = "6.0";
/// What is said where a description had to be cut.
const CUT_NOTE: &str = "\n\n… (cut: Azure DevOps keeps 4,000 characters of a description)\n";
/// What ends a cut description whose plan block is in the pull request's properties; the
/// marker is how tagpin knows to read them.
const PLAN_ELSEWHERE: &str = "\n\n… (cut: Azure DevOps keeps 4,000 characters of a description; tagpin's plan is in this pull request's properties)\n<!-- tagpin: plan in pull request properties -->\n";
const PLAN_MARKER: &str = "<!-- tagpin: plan in pull request properties -->";
/// The pull request property holding the plan block of a cut description.
const PLAN_PROPERTY: &str = "tagpin.plan";

/// An Azure Repos Git repository in an organization or collection, with a token.
pub struct AzureDevOps {
    /// Its `api` is the organization or collection: `forge.api_url` without a trailing slash.
    rest: Rest,
    project: String,
    repo: String,
    api_version: &'static str,
    /// Pull requests (`!N`), the one open from this repository's own branch adopted; the token's identity id.
    dialect: Dialect,
}

/// `GitPullRequest`, the fields tagpin reads.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PullRequest {
    pull_request_id: u64,
    #[serde(default)]
    title: String,
    description: Option<String>,
    /// `active`, `abandoned`, `completed` (`notSet` never for a real one).
    status: String,
    source_ref_name: Option<String>,
    target_ref_name: Option<String>,
    last_merge_source_commit: Option<CommitRef>,
    last_merge_commit: Option<CommitRef>,
    creation_date: Option<String>,
    closed_date: Option<String>,
    created_by: Option<Identity>,
    /// Present for a pull request from a fork.
    fork_source: Option<serde_json::Value>,
    labels: Option<Vec<Label>>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CommitRef {
    commit_id: Option<String>,
}

/// `IdentityRef`: `id` is the identity's GUID.
#[derive(Debug, Deserialize)]
struct Identity {
    #[serde(default)]
    id: String,
}

/// `WebApiTagDefinition`.
#[derive(Debug, Deserialize)]
struct Label {
    name: String,
    active: Option<bool>,
}

/// A list answer: `{"count": N, "value": [...]}`.
#[derive(Debug, Deserialize)]
struct List<T> {
    value: Vec<T>,
}

/// `GitStatus`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CommitStatus {
    #[serde(default)]
    id: u64,
    context: Option<StatusContext>,
    state: Option<String>,
    description: Option<String>,
    creation_date: Option<String>,
    created_by: Option<Identity>,
}

/// `GitStatusContext`.
#[derive(Debug, Deserialize, Serialize)]
struct StatusContext {
    #[serde(skip_serializing_if = "Option::is_none")]
    genre: Option<String>,
    name: String,
}

/// `GitPullRequestCommentThread`, the fields tagpin reads.
#[derive(Debug, Deserialize)]
struct Thread {
    id: u64,
    #[serde(default)]
    comments: Vec<Comment>,
}

/// `Comment`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Comment {
    id: u64,
    #[serde(default)]
    content: String,
    author: Option<Identity>,
    #[serde(default)]
    is_deleted: bool,
}

/// The properties of a pull request: `{"count", "value": {name: {"$type", "$value"}}}`.
#[derive(Debug, Deserialize)]
struct Properties {
    #[serde(default)]
    value: std::collections::HashMap<String, Property>,
}

#[derive(Debug, Deserialize)]
struct Property {
    #[serde(rename = "$value")]
    value: Option<serde_json::Value>,
}

/// `Location`'s `ConnectionData`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ConnectionData {
    authenticated_user: Identity,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct NewPullRequest<'a> {
    source_ref_name: String,
    target_ref_name: String,
    title: &'a str,
    description: String,
}

#[derive(Debug, Serialize)]
struct EditPullRequest<'a> {
    title: &'a str,
    description: String,
}

#[derive(Debug, Serialize)]
struct NewLabel<'a> {
    name: &'a str,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct NewStatus<'a> {
    state: &'a str,
    description: &'a str,
    context: StatusContext,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct NewComment<'a> {
    parent_comment_id: u64,
    content: &'a str,
    /// `1`: a text comment (`CommentType.Text`).
    comment_type: u8,
}

#[derive(Debug, Serialize)]
struct NewThread<'a> {
    comments: [NewComment<'a>; 1],
    /// `4`: closed (`CommentThreadStatus.Closed`), so the verdict never holds a completion
    /// back under a "comments must be resolved" policy.
    status: u8,
}

#[derive(Debug, Serialize)]
struct EditComment<'a> {
    content: &'a str,
}

impl AzureDevOps {
    /// `api_url` is the organization, `https://dev.azure.com/ORG`, or an Azure DevOps Server
    /// collection, `https://HOST/tfs/DefaultCollection`.
    pub fn new(
        forge: &Settings,
        (project, repo): (&str, &str),
        token: String,
    ) -> Result<AzureDevOps> {
        let basic = base64::engine::general_purpose::STANDARD.encode(format!(":{}", token.trim()));
        let basic = ("authorization", format!("Basic {basic}"));
        // Identity ids are GUIDs, which Azure DevOps writes in lower case.
        let configured = forge.login.as_ref().map(|l| l.trim().to_ascii_lowercase());
        Ok(AzureDevOps {
            rest: Rest::new(FORGE, forge, format!("{project}/{repo}"), basic, &WORDS)?.at(
                &format!(
                    "/{}/_apis/git/repositories/{}",
                    encode(project),
                    encode(repo)
                ),
            ),
            project: project.to_string(),
            repo: repo.to_string(),
            api_version: api_version_for(&forge.api_url),
            dialect: Dialect::new(FORGE, ChangeRequestNoun::AzureDevOpsPullRequest, configured)
                .adopting(),
        })
    }

    /// `url` with `query` and `api-version`.
    fn with_query(&self, url: &str, query: &[(&str, &str)], preview: bool) -> String {
        let mut pairs = url::form_urlencoded::Serializer::new(String::new());
        pairs.extend_pairs(query);
        let version = if preview {
            format!("{}-preview.1", self.api_version)
        } else {
            self.api_version.to_string()
        };
        pairs.append_pair("api-version", &version);
        format!("{url}?{}", pairs.finish())
    }

    /// The addresses of a list's pages, `top` items from `skip` on (`$top`/`$skip` for pull
    /// requests; `top`/`skip` for statuses, as `GetStatuses` declares them), up to `pages`.
    fn pages(&self, url: &str, query: &[(&str, &str)], dollar: bool, pages: usize) -> Vec<String> {
        let (top_key, skip_key) = if dollar {
            ("$top", "$skip")
        } else {
            ("top", "skip")
        };
        (0..pages)
            .map(|n| {
                let (top, skip) = (PAGE_TOP.to_string(), (n * PAGE_TOP).to_string());
                let mut pairs = query.to_vec();
                pairs.extend([(top_key, top.as_str()), (skip_key, skip.as_str())]);
                self.with_query(url, &pairs, false)
            })
            .collect()
    }

    /// One page of a list at one of `urls`, and the next of them when this page is full.
    async fn read_page<T: serde::de::DeserializeOwned>(
        &self,
        what: &str,
        urls: &[String],
        url: &str,
    ) -> Result<(Vec<T>, Option<String>)> {
        let answer = self.rest.call(what, Method::GET, url, None).await?;
        let list: List<T> = self.rest.parse(what, &answer.body)?;
        let next = urls
            .iter()
            .position(|u| u == url)
            .and_then(|n| urls.get(n + 1));
        let next = next.filter(|_| list.value.len() >= PAGE_TOP).cloned();
        Ok((list.value, next))
    }

    /// Every page of a pull request list (`$top`/`$skip`, until a short page), each whole
    /// where a pass compares or parses it ([`AzureDevOps::whole`]).
    async fn list_pull_requests(
        &self,
        what: &str,
        query: Vec<(&str, String)>,
    ) -> Result<Vec<PullRequestInfo>> {
        let pairs: Vec<(&str, &str)> = query.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let urls = self.pages(&self.rest.url("/pullrequests"), &pairs, true, MAX_PAGES);
        let read_page = |url: String| {
            let urls = &urls;
            async move {
                let (listed, next) = self.read_page::<PullRequest>(what, urls, &url).await?;
                let mut items = Vec::with_capacity(listed.len());
                for pr in listed {
                    items.push(self.whole(self.info(pr)).await?);
                }
                Ok((items, next))
            }
        };
        read_pages(urls[0].clone(), read_page, |_| false).await
    }

    /// Keeps the plan block of a body too long for a description in pull request `number`'s
    /// property `tagpin.plan` (a JSON Patch `add`, which also replaces).
    async fn keep_plan(&self, number: u64, body: &str) -> Result<()> {
        if body.chars().count() <= MAX_DESCRIPTION_CHARS {
            return Ok(());
        }
        let Some(plan) = split_plan(body).1 else {
            return Ok(());
        };
        let what = format!("keep the plan of pull request !{number} in its properties");
        let url = self.with_query(
            &self.rest.url(&format!("/pullRequests/{number}/properties")),
            &[],
            true,
        );
        let patch =
            serde_json::json!([{"op": "add", "path": format!("/{PLAN_PROPERTY}"), "value": plan}]);
        let patch = (patch, "application/json-patch+json");
        self.rest
            .call_typed(&what, (Method::PATCH, &url), Some(patch))
            .await?;
        Ok(())
    }

    /// A pull request as a list answered it, with its whole body where a pass compares or
    /// parses it: a list cuts each description to 400 characters ([`LIST_DESCRIPTION_UNITS`]),
    /// so one not completed (active, or abandoned by a person) whose listed description may
    /// have been cut is read again by id, with its plan from its properties. A completed one
    /// keeps what the list said: no pass reads a merged pull request's plan from a list (a
    /// verdict reads it by id), and a branch's completed ones grow with every merge.
    async fn whole(&self, pr: PullRequestInfo) -> Result<PullRequestInfo> {
        if pr.merged || !may_be_cut(&pr.body) {
            return self.with_plan(pr).await;
        }
        self.pull_request(pr.number).await
    }

    /// `pr` with the plan block its cut description left in its properties appended, as
    /// [`stored_body`] composes it; unchanged when its description is whole.
    async fn with_plan(&self, mut pr: PullRequestInfo) -> Result<PullRequestInfo> {
        if !pr.body.contains(PLAN_MARKER) {
            return Ok(pr);
        }
        let number = pr.number;
        let what = format!("read the plan of pull request !{number} in its properties");
        let url = self.rest.url(&format!("/pullRequests/{number}/properties"));
        let url = self.with_query(&url, &[], true);
        let answer = self.rest.call(&what, Method::GET, &url, None).await?;
        let properties: Properties = self.rest.parse(&what, &answer.body)?;
        if let Some(plan) = properties
            .value
            .get(PLAN_PROPERTY)
            .and_then(|p| p.value.as_ref())
            .and_then(serde_json::Value::as_str)
        {
            pr.body.push_str(plan);
        }
        Ok(pr)
    }

    /// What tagpin reads of a pull request.
    fn info(&self, pr: PullRequest) -> PullRequestInfo {
        let completed = pr.status == "completed";
        let closed_at = pr.closed_date.as_deref().and_then(unix);
        // The page people open: the answer's `url` and `_links` are API addresses only.
        let (project, repo) = (encode(&self.project), encode(&self.repo));
        let id = pr.pull_request_id;
        let url = format!("{}/{project}/_git/{repo}/pullrequest/{id}", self.rest.api);
        let open = pr.status == "active";
        PullRequestInfo {
            number: pr.pull_request_id,
            open,
            merged: completed,
            title: pr.title,
            body: pr.description.unwrap_or_default(),
            labels: pr
                .labels
                .unwrap_or_default()
                .into_iter()
                .filter(|l| l.active != Some(false))
                .map(|l| l.name)
                .collect(),
            url,
            head_ref: short_ref(pr.source_ref_name.as_deref()),
            head_sha: pr
                .last_merge_source_commit
                .and_then(|c| c.commit_id)
                .unwrap_or_default(),
            merge_commit_sha: pr
                .last_merge_commit
                .and_then(|c| c.commit_id)
                .filter(|sha| completed && !sha.is_empty()),
            merged_at: closed_at.filter(|_| completed),
            // No update time: a closed one was last changed when closed, an open one is
            // newest by creation.
            updated_at: if open {
                pr.creation_date.as_deref().and_then(unix)
            } else {
                closed_at
            },
            author: pr
                .created_by
                .map(|c| c.id.to_ascii_lowercase())
                .unwrap_or_default(),
            same_repository: pr.fork_source.is_none()
                && pr.target_ref_name.as_deref().is_some_and(|r| !r.is_empty()),
        }
    }
}

impl Forge for AzureDevOps {
    fn dialect(&self) -> &Dialect {
        &self.dialect
    }

    /// The identity id (a GUID) the token acts as (`GET _apis/connectionData`).
    async fn ask_login(&self) -> Result<String> {
        let what = "read the token's identity (GET _apis/connectionData)";
        let url = format!(
            "{}/_apis/connectionData?api-version={}-preview.1",
            self.rest.api, self.api_version
        );
        let answer = self.rest.call(what, Method::GET, &url, None).await?;
        let data: ConnectionData = self.rest.parse(what, &answer.body)?;
        if data.authenticated_user.id.is_empty() {
            let detail = "the answer names no authenticated identity".to_string();
            return Err(self.rest.error(what, detail, None));
        }
        Ok(data.authenticated_user.id.to_ascii_lowercase())
    }

    /// Filtered by source and target branch; the recently closed by closing time, which an
    /// older server ignores, answering more: tagpin keeps the window itself.
    async fn list(&self, what: &str, listing: Listing<'_>) -> Result<Vec<PullRequestInfo>> {
        let (query, since) = match listing {
            Listing::From { branch, base } => (branch_filter(Some(branch), base, "all"), None),
            Listing::OpenFrom { branch, base } => {
                (branch_filter(Some(branch), base, "active"), None)
            }
            Listing::OpenInto { base, .. } => (branch_filter(None, base, "active"), None),
            Listing::ClosedInto { base, since, .. } => {
                let at = Timestamp::from_second(since).map(|t| t.to_string());
                let mut query = branch_filter(None, base, "all");
                query.push(("searchCriteria.queryTimeRangeType", "closed".into()));
                query.push(("searchCriteria.minTime", at.unwrap_or_default()));
                (query, Some(since))
            }
        };
        let mut prs = self.list_pull_requests(what, query).await?;
        if let Some(since) = since {
            // A server that does not know the closing-time filter answers every one.
            prs.retain(|p| !p.open && p.updated_at.is_some_and(|t| t >= since));
        }
        Ok(prs)
    }

    /// A description past 4,000 characters is cut, its plan block kept in the properties.
    async fn create(&self, what: &str, new: NewChange<'_>) -> Result<PullRequestInfo> {
        let request = json(&NewPullRequest {
            source_ref_name: branch_ref(new.branch),
            target_ref_name: branch_ref(new.base),
            title: new.title,
            description: fit_description(new.body),
        });
        let url = self.with_query(&self.rest.url("/pullrequests"), &[], false);
        let mut pr = self.info(self.rest.post(what, &url, request).await?);
        self.keep_plan(pr.number, new.body).await?;
        pr.body = stored_body(new.body);
        Ok(pr)
    }

    async fn update_pull_request(&self, number: u64, title: &str, body: &str) -> Result<()> {
        let what = format!("update pull request !{number}");
        let url = self.rest.url(&format!("/pullrequests/{number}"));
        let url = self.with_query(&url, &[], false);
        let description = fit_description(body);
        let edit = json(&EditPullRequest { title, description });
        self.rest
            .call(&what, Method::PATCH, &url, Some(edit))
            .await?;
        self.keep_plan(number, body).await
    }

    /// By name, one call each (Azure DevOps creates a tag it does not know yet).
    async fn add_labels(&self, number: u64, labels: &[String]) -> Result<()> {
        let what = format!("add labels to pull request !{number}");
        let url = self.rest.url(&format!("/pullRequests/{number}/labels"));
        let url = self.with_query(&url, &[], true);
        for name in labels {
            let label = json(&NewLabel { name });
            self.rest
                .call(&what, Method::POST, &url, Some(label))
                .await?;
        }
        Ok(())
    }

    /// By its id (`!N`, unique in the organization), with its plan from its properties.
    async fn pull_request(&self, number: u64) -> Result<PullRequestInfo> {
        let what = format!("read pull request !{number}");
        let url = self.rest.url(&format!("/pullrequests/{number}"));
        let url = self.with_query(&url, &[], false);
        let answer = self.rest.call(&what, Method::GET, &url, None).await?;
        let pr = self.info(self.rest.parse(&what, &answer.body)?);
        self.with_plan(pr).await
    }

    /// `GetStatuses` has no filter by context (`top`, `skip` and `latestOnly` only; the latest
    /// per context may be someone else's, which would hide tagpin's own), so every context's
    /// statuses are read up to the page bound: past it, the history says it is not whole, and
    /// the soak clock starts again rather than read on.
    async fn statuses(&self, key: StatusKey<'_>) -> Result<StatusHistory> {
        let what = format!("read statuses of {}", key.sha);
        let url = self
            .rest
            .url(&format!("/commits/{}/statuses", encode(key.sha)));
        // One address past the bound: a full last page names it as its next, so the read
        // knows more remain (and says the history is not whole); it is never read.
        let urls = self.pages(&url, &[], false, MAX_PAGES + 1);
        let what = what.as_str();
        let read_page = |url: String| {
            let urls = &urls;
            async move { self.read_page::<CommitStatus>(what, urls, &url).await }
        };
        let (mut statuses, complete) =
            read_pages_whole(urls[0].clone(), read_page, |_| false).await?;
        statuses.retain(|s| {
            s.context
                .as_ref()
                .is_some_and(|c| context_name(c) == key.context)
        });
        statuses.sort_by_key(|s| std::cmp::Reverse(s.id));
        let statuses = statuses.iter().filter_map(status).collect();
        Ok(StatusHistory { statuses, complete })
    }

    /// Each post is one more status of the commit.
    async fn set_status(&self, key: StatusKey<'_>, said: Said<'_>) -> Result<()> {
        let what = format!("set status {} on {}", key.context, key.sha);
        let url = self
            .rest
            .url(&format!("/commits/{}/statuses", encode(key.sha)));
        let url = self.with_query(&url, &[], false);
        let status = json(&NewStatus {
            state: wire_state(said.state),
            description: said.description,
            context: status_context(key.context),
        });
        self.rest.write(&what, Method::POST, &url, &status).await
    }

    /// Found by the marker among the comments tagpin's identity wrote in any thread; threads
    /// come in one answer.
    async fn marked_comment(&self, number: u64, marker: &str) -> Result<Option<Marked>> {
        let me = self.login().await?;
        let what = format!("list comment threads of pull request !{number}");
        let url = self.with_query(&self.threads_url(number), &[], false);
        let answer = self.rest.call(&what, Method::GET, &url, None).await?;
        let list: List<Thread> = self.rest.parse(&what, &answer.body)?;
        Ok(list.value.into_iter().find_map(|t| {
            let comment = t.comments.into_iter().find(|c| mine(c, marker, me))?;
            Some(Marked {
                id: comment.id,
                text: comment.content,
                thread: Some(t.id),
                version: None,
            })
        }))
    }

    /// Edited in its thread; a new one starts a thread of its own, closed.
    async fn write_comment(&self, number: u64, old: Option<Marked>, body: &str) -> Result<()> {
        let threads = self.threads_url(number);
        if let Some(Marked { id, thread, .. }) = old {
            let what = format!("update comment {id} on pull request !{number}");
            let thread = thread.unwrap_or_default();
            let url = self.with_query(&format!("{threads}/{thread}/comments/{id}"), &[], false);
            let edit = EditComment { content: body };
            return self.rest.write(&what, Method::PATCH, &url, &edit).await;
        }
        let what = format!("comment on pull request !{number}");
        let url = self.with_query(&threads, &[], false);
        let thread = NewThread {
            comments: [NewComment {
                parent_comment_id: 0,
                content: body,
                comment_type: 1,
            }],
            status: 4,
        };
        self.rest.write(&what, Method::POST, &url, &thread).await
    }

    fn stored_body(&self, body: &str) -> String {
        stored_body(body)
    }
}

impl AzureDevOps {
    fn threads_url(&self, number: u64) -> String {
        self.rest.url(&format!("/pullRequests/{number}/threads"))
    }
}

/// `7.1` for Azure DevOps Services, `6.0` for an Azure DevOps Server on any other host.
fn api_version_for(api_url: &str) -> &'static str {
    let host = url::Url::parse(api_url)
        .ok()
        .and_then(|u| u.host_str().map(str::to_ascii_lowercase))
        .unwrap_or_default();
    if host == "dev.azure.com" || host.ends_with(".visualstudio.com") {
        CLOUD_API_VERSION
    } else {
        SERVER_API_VERSION
    }
}

/// The search criteria of a pull request list into `base`, from `source` when given.
fn branch_filter<'q>(
    source: Option<&str>,
    base: &str,
    status: &'static str,
) -> Vec<(&'q str, String)> {
    let mut query = vec![
        ("searchCriteria.status", status.to_string()),
        ("searchCriteria.targetRefName", branch_ref(base)),
    ];
    if let Some(source) = source {
        query.push(("searchCriteria.sourceRefName", branch_ref(source)));
    }
    query
}

fn branch_ref(branch: &str) -> String {
    format!("refs/heads/{branch}")
}

/// `tagpin/main` of `refs/heads/tagpin/main`.
fn short_ref(name: Option<&str>) -> String {
    let name = name.unwrap_or_default();
    name.strip_prefix("refs/heads/").unwrap_or(name).to_string()
}

/// `tagpin/converged` as Azure DevOps's genre `tagpin` and name `converged`; a context
/// without `/` is a name alone.
fn status_context(context: &str) -> StatusContext {
    match context.split_once('/') {
        Some((genre, name)) if !genre.is_empty() && !name.is_empty() => StatusContext {
            genre: Some(genre.to_string()),
            name: name.to_string(),
        },
        _ => StatusContext {
            genre: None,
            name: context.to_string(),
        },
    }
}

/// The context tagpin names a status by: `genre/name`, or the name alone.
fn context_name(context: &StatusContext) -> String {
    match context.genre.as_deref().filter(|g| !g.is_empty()) {
        Some(genre) => format!("{genre}/{}", context.name),
        None => context.name.clone(),
    }
}

/// An Azure DevOps status state as tagpin reads it; `notSet`, `notApplicable` and
/// `partiallySucceeded` are no verdict of tagpin's.
fn read_state(state: &str) -> Option<StatusState> {
    match state {
        "pending" => Some(StatusState::Pending),
        "succeeded" => Some(StatusState::Success),
        "failed" => Some(StatusState::Failure),
        "error" => Some(StatusState::Error),
        _ => None,
    }
}

/// Azure DevOps's words (`GitStatusState`) for tagpin's states.
fn wire_state(state: StatusState) -> &'static str {
    match state {
        StatusState::Pending => "pending",
        StatusState::Success => "succeeded",
        StatusState::Failure => "failed",
        StatusState::Error => "error",
    }
}

/// Whether `comment` is one `me` wrote carrying `marker`; a deleted one is not.
fn mine(comment: &Comment, marker: &str, me: &str) -> bool {
    !comment.is_deleted
        && comment.content.contains(marker)
        && comment
            .author
            .as_ref()
            .is_some_and(|a| a.id.eq_ignore_ascii_case(me))
}

/// A status as tagpin reads it, with who set it and when.
fn status(s: &CommitStatus) -> Option<Status> {
    Some(Status {
        state: read_state(s.state.as_deref()?)?,
        description: s.description.clone().unwrap_or_default(),
        created_at: s.creation_date.as_deref().and_then(unix),
        creator: s
            .created_by
            .as_ref()
            .map(|c| c.id.to_ascii_lowercase())
            .filter(|id| !id.is_empty()),
    })
}

/// Whether a description a list answered may have been cut ([`LIST_DESCRIPTION_UNITS`]): it
/// is as long as the cut, or one unit short (a cut that stopped before a surrogate pair), in
/// UTF-16 code units; a cut counted in characters is at least as long in code units.
fn may_be_cut(listed: &str) -> bool {
    listed.encode_utf16().count() + 1 >= LIST_DESCRIPTION_UNITS
}

/// `body` as a description Azure DevOps keeps (at most [`MAX_DESCRIPTION_CHARS`]). A longer
/// one is cut at a line, saying so; its plan block is left out of it (tagpin keeps it in the
/// pull request's properties), and a marker says where it is.
pub(crate) fn fit_description(body: &str) -> String {
    if body.chars().count() <= MAX_DESCRIPTION_CHARS {
        return body.to_string();
    }
    let (text, plan) = split_plan(body);
    let tail = if plan.is_some() {
        PLAN_ELSEWHERE
    } else {
        CUT_NOTE
    };
    let room = MAX_DESCRIPTION_CHARS - tail.chars().count();
    let mut kept: String = text.chars().take(room).collect();
    if kept.len() < text.len() {
        if let Some(line) = kept.rfind('\n') {
            kept.truncate(line);
        }
    }
    format!("{}{tail}", kept.trim_end())
}

/// `body` as tagpin reads it back from Azure DevOps: whole when it fits a description,
/// otherwise the cut description followed by the plan block kept in the properties. A change
/// request's body is compared with this.
pub(crate) fn stored_body(body: &str) -> String {
    if body.chars().count() <= MAX_DESCRIPTION_CHARS {
        return body.to_string();
    }
    let plan = split_plan(body).1.unwrap_or_default();
    format!("{}{plan}", fit_description(body))
}

/// The text of `body` without its plan block, and the plan block (from its opening to its
/// closing comment and line end), if it has one.
fn split_plan(body: &str) -> (String, Option<&str>) {
    let Some(start) = body.find("<!-- tagpin-plan") else {
        return (body.to_string(), None);
    };
    let Some(close) = body[start..].find("-->") else {
        return (body.to_string(), None);
    };
    let mut end = start + close + "-->".len();
    if body[end..].starts_with('\n') {
        end += 1;
    }
    (
        format!("{}{}", &body[..start], &body[end..]),
        Some(&body[start..end]),
    )
}

/// How long to wait after a `429`: `Retry-After`, else `X-RateLimit-Reset` (Unix seconds),
/// else a minute.
fn rate_limit_wait(headers: &HeaderMap, now: SystemTime) -> Duration {
    if let Some(wait) = retry_after(headers, now) {
        return wait;
    }
    let reset = headers
        .get("x-ratelimit-reset")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|secs| std::time::UNIX_EPOCH + Duration::from_secs(secs));
    match reset {
        Some(at) => at.duration_since(now).unwrap_or(Duration::ZERO) + Duration::from_secs(1),
        None => Duration::from_secs(60),
    }
}

/// `forge.project` and `forge.repo`; the organization or collection is `forge.api_url`.
fn project_and_repo(keys: &mut dyn Keys, _: Option<&str>) -> Option<Kind> {
    let elsewhere = "is for GitHub and Gitea; an Azure DevOps repository is named by forge.project and forge.repo (the organization or collection is forge.api_url)";
    let named = ["forge.project", "forge.repo"];
    let (project, repo) = two_keys(keys, &["forge.owner"], elsewhere, named);
    Some(Kind::AzureDevOps {
        project: project?,
        repo: repo?,
    })
}

#[cfg(test)]
mod tests {
    use super::super::engine::{assert_states_round_trip, headers, patched, settings};
    use super::*;

    fn forge(api_url: &str) -> AzureDevOps {
        let (project, repo) = ("Platform Team", "gitops");
        let kind = Kind::AzureDevOps {
            project: project.into(),
            repo: repo.into(),
        };
        AzureDevOps::new(&settings(kind, api_url), (project, repo), "pat".into()).unwrap()
    }

    /// A completed pull request in the shape of `GitPullRequest`
    /// (azure-devops-node-api 17.0.1, `interfaces/GitInterfaces.d.ts`).
    const COMPLETED: &str = r#"{
      "pullRequestId": 12, "codeReviewId": 12, "status": "completed",
      "title": "Pin 1 image(s) to digests", "description": "plan",
      "creationDate": "2026-01-02T02:00:00.1234567Z", "closedDate": "2026-01-02T03:04:05.5Z",
      "createdBy": {"id": "6f1e0c1a-0000-4000-8000-000000000001", "uniqueName": "tagpin-bot@acme.com"},
      "sourceRefName": "refs/heads/tagpin/main", "targetRefName": "refs/heads/main",
      "mergeStatus": "succeeded",
      "lastMergeSourceCommit": {"commitId": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"},
      "lastMergeCommit": {"commitId": "cccccccccccccccccccccccccccccccccccccccc"},
      "labels": [{"id": "1", "name": "tagpin", "active": true}, {"id": "2", "name": "old", "active": false}],
      "url": "https://dev.azure.com/acme/_apis/git/repositories/r/pullRequests/12"
    }"#;

    fn pr(patch: serde_json::Value) -> PullRequestInfo {
        let value = patched(COMPLETED, patch);
        forge("https://dev.azure.com/acme").info(serde_json::from_value(value).unwrap())
    }

    #[test]
    fn an_azure_devops_pull_request_reads_as_tagpin_reads_a_change_request() {
        let merged = pr(serde_json::json!({}));
        assert_eq!(merged.number, 12);
        assert!(merged.merged && !merged.open);
        assert_eq!(merged.labels, ["tagpin"], "an inactive label is gone");
        assert_eq!(merged.head_ref, "tagpin/main");
        assert_eq!(merged.head_sha, "a".repeat(40));
        assert_eq!(merged.merge_commit_sha, Some("c".repeat(40)));
        assert_eq!(merged.merged_at, Some(1767323045));
        assert_eq!(merged.author, "6f1e0c1a-0000-4000-8000-000000000001");
        assert_eq!(
            merged.url,
            "https://dev.azure.com/acme/Platform%20Team/_git/gitops/pullrequest/12"
        );
        assert!(merged.same_repository);
        let active = pr(serde_json::json!({"status": "active", "closedDate": null}));
        assert!(active.open && !active.merged);
        assert_eq!(active.merge_commit_sha, None, "a test merge is no landing");
        assert_eq!(active.updated_at, Some(1767319200));
        let abandoned = pr(serde_json::json!({"status": "abandoned"}));
        assert!(!abandoned.open && !abandoned.merged && abandoned.merged_at.is_none());
        let fork = pr(
            serde_json::json!({"forkSource": {"name": "refs/heads/tagpin/main",
            "repository": {"id": "f0f0", "name": "gitops"}}}),
        );
        assert!(!fork.same_repository);
    }

    #[test]
    fn the_api_version_is_the_newest_the_host_accepts() {
        assert_eq!(api_version_for("https://dev.azure.com/acme"), "7.1");
        assert_eq!(api_version_for("https://acme.visualstudio.com"), "7.1");
        assert_eq!(
            api_version_for("https://tfs.example.com/tfs/DefaultCollection"),
            "6.0"
        );
        let cloud = forge("https://dev.azure.com/acme/");
        assert_eq!(
            cloud.with_query(&cloud.rest.url("/pullRequests/3/labels"), &[], true),
            "https://dev.azure.com/acme/Platform%20Team/_apis/git/repositories/gitops/pullRequests/3/labels?api-version=7.1-preview.1"
        );
    }

    #[test]
    fn the_token_is_basic_with_an_empty_user_and_sensitive() {
        let f = forge("https://dev.azure.com/acme");
        let auth = f.rest.credentials();
        assert!(auth.is_sensitive());
        assert_eq!(auth.to_str().unwrap(), "Basic OnBhdA==");
    }

    #[test]
    fn contexts_are_genre_and_name_and_states_azure_devopss_words() {
        let c = status_context("tagpin/stage/staging");
        assert_eq!(
            (c.genre.as_deref(), c.name.as_str()),
            (Some("tagpin"), "stage/staging")
        );
        assert_eq!(context_name(&c), "tagpin/stage/staging");
        assert_eq!(context_name(&status_context("plain")), "plain");
        assert_states_round_trip(wire_state, read_state);
        assert_eq!(read_state("notApplicable"), None);
        assert_eq!(read_state("partiallySucceeded"), None);
    }

    #[test]
    fn a_long_description_keeps_its_plan_block_whole() {
        let block = crate::proposal::PlanBlock {
            version: crate::proposal::PLAN_VERSION,
            target: "main".into(),
            pins: (0..6)
                .map(|n| {
                    crate::proposal::Pin::first(
                        &format!("apps/web-{n}.yaml"),
                        &format!("shop/Deployment/web-{n}"),
                        &format!("ghcr.io/acme/web-{n}:1.0"),
                        &format!("ghcr.io/acme/web-{n}:1.0@sha256:{}", "1".repeat(64)),
                    )
                })
                .collect(),
        };
        let long = crate::proposal::body::render(&block) + &"| held | row |\n".repeat(300);
        assert!(long.chars().count() > MAX_DESCRIPTION_CHARS);
        let fitted = fit_description(&long);
        assert!(
            fitted.chars().count() <= MAX_DESCRIPTION_CHARS,
            "{}",
            fitted.len()
        );
        assert!(fitted.contains("cut: Azure DevOps keeps 4,000 characters"));
        assert!(fitted.ends_with(&format!("{PLAN_MARKER}\n")), "{fitted}");
        assert_eq!(crate::proposal::body::parse(&fitted), None, "no half plan");
        // Read back with the plan block from the properties: the whole plan.
        let read_back = stored_body(&long);
        assert_eq!(
            crate::proposal::body::parse(&read_back),
            Some(block.clone())
        );
        assert_eq!(
            split_plan(&long).1,
            Some(crate::proposal::body::plan_block(&block).as_str())
        );
        let mut one = block.clone();
        one.pins.truncate(1);
        let short = crate::proposal::body::render(&one);
        assert_eq!(
            fit_description(&short),
            short,
            "a short body is kept as it is"
        );
        assert_eq!(stored_body(&short), short);
        // Any plan fits there: forty pins.
        let mut huge = block.clone();
        huge.pins = (0..40).map(|_| block.pins[0].clone()).collect();
        let body = crate::proposal::body::render(&huge);
        assert!(fit_description(&body).chars().count() <= MAX_DESCRIPTION_CHARS);
        assert_eq!(
            crate::proposal::body::parse(&stored_body(&body)),
            Some(huge)
        );
    }

    #[test]
    fn a_description_as_long_as_a_lists_cut_is_read_again() {
        assert!(!may_be_cut("plan"));
        assert!(!may_be_cut(&"x".repeat(LIST_DESCRIPTION_UNITS - 2)));
        assert!(may_be_cut(&"x".repeat(LIST_DESCRIPTION_UNITS - 1)));
        assert!(may_be_cut(&"x".repeat(LIST_DESCRIPTION_UNITS)));
        // 200 characters of two UTF-16 units each: as long as the cut, in .NET's count.
        assert!(may_be_cut(&"😀".repeat(LIST_DESCRIPTION_UNITS / 2)));
        assert!(!may_be_cut(&"é".repeat(LIST_DESCRIPTION_UNITS / 2)));
    }

    #[test]
    fn a_rate_limit_is_waited_as_the_answer_says() {
        let now = std::time::UNIX_EPOCH + Duration::from_secs(1_000);
        let wait = |pairs: &[(&'static str, &str)]| rate_limit_wait(&headers(pairs), now);
        assert_eq!(wait(&[("retry-after", "7")]), Duration::from_secs(7));
        let reset = wait(&[("x-ratelimit-reset", "1030")]);
        assert_eq!(reset, Duration::from_secs(31));
        assert_eq!(wait(&[]), Duration::from_secs(60));
    }

    #[test]
    fn the_verdict_comment_is_tagpins_own_found_by_its_marker() {
        let threads: Vec<Thread> = serde_json::from_str(
            r#"[{"id": 5, "comments": [{"id": 1, "content": "quoting <!-- tagpin-verdict -->", "author": {"id": "aaaa"}}]},
                {"id": 6, "comments": [{"id": 1, "content": "<!-- tagpin-verdict -->", "author": {"id": "BBBB"}, "isDeleted": true}]},
                {"id": 7, "comments": [{"id": 1, "content": "<!-- tagpin-verdict -->\nConverged", "author": {"id": "BBBB"}}]}]"#,
        )
        .unwrap();
        let marker = "<!-- tagpin-verdict -->";
        let found = threads.iter().find_map(|t| {
            let c = t.comments.iter().find(|c| mine(c, marker, "bbbb"))?;
            Some((t.id, c.id))
        });
        assert_eq!(found, Some((7, 1)));
        let before = threads[..2].iter().flat_map(|t| &t.comments);
        assert!(!before.into_iter().any(|c| mine(c, marker, "bbbb")));
    }
}
