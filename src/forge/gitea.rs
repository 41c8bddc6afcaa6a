//! The Gitea adapter: Gitea and Forgejo (Codeberg) through REST `/api/v1`.
//!
//! A Gitea pull request is what a GitHub one is to tagpin: found by its head branch (a tagpin
//! branch of this very repository, never a fork's), opened with the plan block in its body,
//! and read back as open, merged (with `merge_commit_sha`) or closed by a person. The verdict
//! is a Gitea commit status on the head and on the commit that landed, and one issue comment
//! on the pull request found by its marker among the comments tagpin's own user wrote.
//!
//! Facts are those of Gitea's swagger (`templates/swagger/v1_json.tmpl`), as shipped in the
//! type definitions of the npm package `gitea-js` 1.23.0 (`dist/index.d.ts`, generated from
//! Gitea 1.23's swagger). Forgejo serves the same `/api/v1` for every call made here.
//!
//! What Gitea does its own way, and what tagpin does about it:
//! - `GET /repos/{owner}/{repo}/pulls` cannot filter by head branch: tagpin reads the list
//!   (`state=all` for closed and merged ones) and keeps the head it wants.
//! - Labels are set by id: the repository's labels are read, a missing one is created
//!   (`POST /labels`, a neutral colour), and the ids are added to the pull request's issue.
//! - Lists come in pages of at most `[api] MAX_RESPONSE_ITEMS` (50 by default) whatever
//!   `limit` asks. Gitea builds its `Link` header from its `ROOT_URL`, which need not be the
//!   address tagpin is given (an in-cluster Service): tagpin never follows a `Link` address.
//!   It asks for the next `page` number on `api_url` itself while the `Link` header has a
//!   `rel="next"` or `X-Total-Count` says more items remain.
//! - Issue comments are listed in one answer (Gitea's endpoint has no pages).
//! - `GET /user`, which names tagpin's own statuses and comment, needs the `read:user` scope;
//!   a repository-scoped token (Codeberg grants no other) is refused it: `forge.login` then.
//! - Statuses have no state machine and no ref: each post is one more status of the commit,
//!   and the list returns them all, every creator's.
//!
//! The token goes in `Authorization: token …`, marked sensitive so no debug output shows it.
//! Redirects are not followed, so the token is sent to `api_url`'s host only. Every call has a
//! connect timeout and a total deadline, answer included (`forge.timeout_seconds`), and reads
//! at most [`super::MAX_ANSWER_BYTES`]; a `429` (Gitea itself has no API rate limit, but a proxy in
//! front of it, such as Codeberg's, does) is waited out when it says `Retry-After` within
//! [`super::MAX_RATE_LIMIT_WAIT`], and reported otherwise. Gitea's messages are never quoted.

use reqwest::header::HeaderMap;
use reqwest::Method;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::engine::{encode, json, next_link, read_pages, read_pages_whole, unix};
use super::engine::{header, label_names, BadPageUrl, Dialect, PageAddress, Paged};
use super::engine::{read_change_requests, Marked, NewChange, Rest, Said, StatusKey, Words};
use super::engine::{Forge, Listing, Result};
use super::settings::ChangeRequestNoun;
use super::settings::{owner_and_repo, Kind, Section, Settings};
use crate::review::{PullRequestInfo, Status, StatusHistory, StatusState};

const FORGE: &str = "Gitea";
/// `kind: gitea`: `forge.owner` and `forge.repo`; every Gitea is its own, so `forge.api_url`
/// has no default.
pub(crate) const SECTION: Section = Section::new("gitea", None, |keys, _| {
    let (owner, repo) = owner_and_repo(keys)?;
    Some(Kind::Gitea { owner, repo })
});
/// What a failed answer means, in words that say what to fix: the token (401), its scope or
/// the user's rights (403), the repository or object (404), a pull request already open
/// (409), a field Gitea refused (422). A `429` (Gitea itself has none, a proxy in front of it
/// may) is waited out as `Retry-After` says, else a minute.
pub(super) const WORDS: Words = Words {
    unauthorized: "the token is not valid (expired, revoked, or not a Gitea token)",
    forbidden: "the token may not do this in {repo} (it needs the write:repository, write:issue and read:user scopes, and write access to the repository)",
    not_found: "{repo} is not at {api}, or the token may not read it (Gitea answers 404 for repositories hidden from the token)",
    conflict: Some("a pull request for these branches is already open"),
    refused: Some((422, "Gitea refused a field tagpin sent")),
    ..Words::PLAIN
};
/// Items asked for per page: Gitea's default `MAX_RESPONSE_ITEMS`; an instance set lower
/// answers fewer, and the pages still line up (Gitea numbers them by the size it uses).
pub(crate) const PAGE_LIMIT: usize = 50;
/// The colour of a label tagpin creates because the repository has none of that name.
const NEW_LABEL_COLOR: &str = "#ededed";

/// A Gitea (or Forgejo) repository, with a token.
pub struct Gitea {
    /// At `/repos/{owner}/{repo}`.
    rest: Rest,
    /// Pull requests, adopted when opened meanwhile; the token's login.
    dialect: Dialect,
}

/// A pull request as Gitea's list and single answers carry it (swagger `PullRequest`).
#[derive(Debug, Deserialize)]
struct PullRequest {
    number: u64,
    #[serde(default)]
    title: String,
    body: Option<String>,
    /// `open` or `closed` (swagger `StateType`); merged ones are `closed` with `merged`.
    state: String,
    #[serde(default)]
    merged: bool,
    merge_commit_sha: Option<String>,
    merged_at: Option<String>,
    updated_at: Option<String>,
    #[serde(default)]
    labels: Option<Vec<Label>>,
    #[serde(default)]
    html_url: String,
    head: Option<BranchInfo>,
    base: Option<BranchInfo>,
    user: Option<User>,
}

/// Swagger `PRBranchInfo`.
#[derive(Debug, Deserialize)]
struct BranchInfo {
    #[serde(rename = "ref", default)]
    ref_name: String,
    sha: Option<String>,
    /// The repository the branch is in; `0` or missing for a deleted fork.
    repo_id: Option<u64>,
}

#[derive(Debug, Deserialize)]
struct User {
    login: String,
}

#[derive(Debug, Deserialize)]
struct Label {
    id: u64,
    name: String,
}

/// Swagger `CommitStatus`.
#[derive(Debug, Deserialize)]
struct CommitStatus {
    id: u64,
    #[serde(default)]
    context: String,
    /// `pending`, `success`, `error`, `failure` or `warning`.
    status: String,
    description: Option<String>,
    created_at: Option<String>,
    creator: Option<User>,
}

/// Swagger `Comment`.
#[derive(Debug, Deserialize)]
struct Comment {
    id: u64,
    #[serde(default)]
    body: String,
    user: Option<User>,
}

/// Swagger `CreatePullRequestOption`.
#[derive(Debug, Serialize)]
struct NewPullRequest<'a> {
    head: &'a str,
    base: &'a str,
    title: &'a str,
    body: &'a str,
}

/// Swagger `EditPullRequestOption`, the fields tagpin changes.
#[derive(Debug, Serialize)]
struct EditPullRequest<'a> {
    title: &'a str,
    body: &'a str,
}

/// Swagger `IssueLabelsOption`: ids, which every Gitea and Forgejo takes (names only lately).
#[derive(Debug, Serialize)]
struct AddLabels {
    labels: Vec<u64>,
}

/// Swagger `CreateLabelOption`.
#[derive(Debug, Serialize)]
struct NewLabel<'a> {
    name: &'a str,
    color: &'a str,
}

/// Swagger `CreateStatusOption`.
#[derive(Debug, Serialize)]
struct NewStatus<'a> {
    state: &'a str,
    context: &'a str,
    description: &'a str,
}

/// Swagger `CreateIssueCommentOption` and `EditIssueCommentOption`.
#[derive(Debug, Serialize)]
struct CommentBody<'a> {
    body: &'a str,
}

impl Gitea {
    /// `api_url` is `https://HOST/api/v1` (Codeberg: `https://codeberg.org/api/v1`).
    pub fn new(forge: &Settings, (owner, repo): (&str, &str), token: String) -> Result<Gitea> {
        let credentials = ("authorization", format!("token {}", token.trim()));
        let full_name = format!("{owner}/{repo}");
        Ok(Gitea {
            rest: Rest::new(FORGE, forge, full_name, credentials, &WORDS)?.at(&format!(
                "/repos/{}/{}",
                encode(owner),
                encode(repo)
            )),
            dialect: Dialect::new(FORGE, ChangeRequestNoun::PullRequest, forge.login.clone())
                .adopting(),
        })
    }

    /// Every page of a pull request list, keeping those into `base`; with `until`, pages stop
    /// after the first one that reaches a pull request updated before it.
    async fn list_pull_requests(
        &self,
        what: &str,
        query: &[(&str, &str)],
        base: &str,
        until: Option<i64>,
    ) -> Result<Vec<PullRequestInfo>> {
        let first = with_query(&self.rest.url("/pulls"), query);
        let read_page = |url: String| async move { self.read_list(what, &url).await };
        let into_base = |pr: PullRequest| {
            let into = pr.base.as_ref().is_some_and(|b| b.ref_name == base);
            into.then(|| info(pr))
        };
        read_change_requests(first, until, read_page, into_base).await
    }

    /// One page of a list, with the address of the next page on `api_url`.
    async fn read_list<T: DeserializeOwned>(&self, what: &str, url: &str) -> Result<Paged<T>> {
        let answer = self.rest.call(what, Method::GET, url, None).await?;
        let items: Vec<T> = self.rest.parse(what, &answer.body)?;
        let next = next_page(url, &answer.headers, items.len())
            .map_err(|e| self.rest.error(what, e.to_string(), None))?;
        Ok((items, next))
    }

    /// The ids of `labels`, each created (a neutral colour) when the repository has none of
    /// that name.
    async fn label_ids(&self, what: &str, labels: &[String]) -> Result<Vec<u64>> {
        let first = with_query(&self.rest.url("/labels"), &[]);
        let read_page = |url: String| async move { self.read_list::<Label>(what, &url).await };
        let known: Vec<Label> = read_pages(first, read_page, |_| false).await?;
        let mut ids = Vec::new();
        for name in labels {
            if let Some(label) = known.iter().find(|l| &l.name == name) {
                ids.push(label.id);
                continue;
            }
            let what = format!("create label {name:?}");
            let color = NEW_LABEL_COLOR;
            let new = Some(json(&NewLabel { name, color }));
            let url = self.rest.url("/labels");
            let answer = self.rest.call(&what, Method::POST, &url, new).await?;
            ids.push(self.rest.parse::<Label>(&what, &answer.body)?.id);
        }
        Ok(ids)
    }
}

impl Forge for Gitea {
    fn dialect(&self) -> &Dialect {
        &self.dialect
    }

    /// `GET /user`, which Gitea answers only to a token with the `read:user` scope; a
    /// repository-scoped token (all Codeberg grants) lacks it: then `forge.login` says it.
    async fn ask_login(&self) -> Result<String> {
        let what = "read the token's user (GET /user)";
        let why = "the token lacks the read:user scope: grant it, or set forge.login to the token's login";
        Ok(self.rest.token_user::<User>(what, &[403], why).await?.login)
    }

    /// Gitea's list cannot filter by head branch: the list (`state=all` for closed and merged
    /// ones) is read whole and the head kept by [`Forge::pull_requests_for`].
    async fn list(&self, what: &str, listing: Listing<'_>) -> Result<Vec<PullRequestInfo>> {
        let (query, base, until): (&[(&str, &str)], _, _) = match listing {
            Listing::From { base, .. } => (&[("state", "all")], base, None),
            Listing::OpenFrom { base, .. } | Listing::OpenInto { base, .. } => {
                (&[("state", "open")], base, None)
            }
            // Most recently changed first, so the pages stop where the window does.
            Listing::ClosedInto { base, since, .. } => {
                let query = &[("state", "closed"), ("sort", "recentupdate")];
                (query, base, Some(since))
            }
        };
        self.list_pull_requests(what, query, base, until).await
    }

    async fn create(&self, what: &str, new: NewChange<'_>) -> Result<PullRequestInfo> {
        let (head, base, title, body) = (new.branch, new.base, new.title, new.body);
        let request = json(&NewPullRequest {
            head,
            base,
            title,
            body,
        });
        let url = self.rest.url("/pulls");
        Ok(info(self.rest.post(what, &url, request).await?))
    }

    async fn update_pull_request(&self, number: u64, title: &str, body: &str) -> Result<()> {
        let what = format!("update pull request #{number}");
        let url = self.rest.url(&format!("/pulls/{number}"));
        let edit = json(&EditPullRequest { title, body });
        self.rest.write(&what, Method::PATCH, &url, &edit).await
    }

    /// Gitea takes label ids: the repository's labels are read and any missing one is
    /// created first ([`Gitea::label_ids`]).
    async fn add_labels(&self, number: u64, labels: &[String]) -> Result<()> {
        if labels.is_empty() {
            return Ok(());
        }
        let what = format!("add labels to pull request #{number}");
        let ids = self.label_ids(&what, labels).await?;
        let url = self.rest.url(&format!("/issues/{number}/labels"));
        let add = json(&AddLabels { labels: ids });
        self.rest.write(&what, Method::POST, &url, &add).await
    }

    /// `#N`: issues and pull requests share the numbers.
    async fn pull_request(&self, number: u64) -> Result<PullRequestInfo> {
        let what = format!("read pull request #{number}");
        let url = self.rest.url(&format!("/pulls/{number}"));
        Ok(info(self.rest.get(&what, &url).await?))
    }

    /// Gitea keeps every status posted, not only the latest per context: the soak clock starts
    /// at the first. Its list has no filter by context (`sort`, `state`, `page` and `limit`
    /// only), so every context's statuses are read, newest first, up to the page bound: past
    /// it, the history says it is not whole, and the soak clock starts again.
    async fn statuses(&self, key: StatusKey<'_>) -> Result<StatusHistory> {
        let (sha, context) = (key.sha, key.context);
        let what = format!("read statuses of {sha}");
        let first = with_query(&self.rest.url(&format!("/commits/{sha}/statuses")), &[]);
        let what = what.as_str();
        let read_page = |url: String| async move { self.read_list(what, &url).await };
        let (mut statuses, complete): (Vec<CommitStatus>, bool) =
            read_pages_whole(first, read_page, |_| false).await?;
        statuses.retain(|s| s.context == context);
        statuses.sort_by_key(|s| std::cmp::Reverse(s.id));
        let statuses = statuses.iter().filter_map(status).collect();
        Ok(StatusHistory { statuses, complete })
    }

    /// Gitea keeps each status posted (no state machine, no ref): a status is one more row,
    /// the newest of a context is the one Gitea shows.
    async fn set_status(&self, key: StatusKey<'_>, said: Said<'_>) -> Result<()> {
        let (sha, context) = (key.sha, key.context);
        let what = format!("set status {context} on {sha}");
        let url = self.rest.url(&format!("/statuses/{sha}"));
        let state = wire_state(said.state);
        let description = said.description;
        let status = json(&NewStatus {
            state,
            context,
            description,
        });
        self.rest.write(&what, Method::POST, &url, &status).await
    }

    /// Found by the marker among the comments tagpin's user wrote (a person quoting the
    /// marker is not mistaken for it, though Gitea would let a writer edit theirs); issue
    /// comments come in one answer.
    async fn marked_comment(&self, number: u64, marker: &str) -> Result<Option<Marked>> {
        let me = self.login().await?;
        let what = format!("list comments of pull request #{number}");
        let url = self.rest.url(&format!("/issues/{number}/comments"));
        let comments: Vec<Comment> = self.rest.get(&what, &url).await?;
        let mine = comments.into_iter().find(|c| mine(c, marker, me));
        Ok(mine.map(|c| Marked {
            id: c.id,
            text: c.body,
            ..Marked::default()
        }))
    }

    /// An issue comment: edited by its id, created on the pull request's issue.
    async fn write_comment(&self, number: u64, old: Option<Marked>, body: &str) -> Result<()> {
        let comment = CommentBody { body };
        let (what, method, url) = match old {
            Some(Marked { id, .. }) => (
                format!("update comment {id} on pull request #{number}"),
                Method::PATCH,
                format!("/issues/comments/{id}"),
            ),
            None => (
                format!("comment on pull request #{number}"),
                Method::POST,
                format!("/issues/{number}/comments"),
            ),
        };
        let url = self.rest.url(&url);
        self.rest.write(&what, method, &url, &comment).await
    }
}

/// `url` with `query`, `limit` and the first `page` appended.
fn with_query(url: &str, query: &[(&str, &str)]) -> String {
    let mut pairs = url::form_urlencoded::Serializer::new(String::new());
    pairs.extend_pairs(query);
    pairs.append_pair("limit", &PAGE_LIMIT.to_string());
    pairs.append_pair("page", "1");
    format!("{url}?{}", pairs.finish())
}

/// What tagpin reads of a Gitea pull request.
fn info(pr: PullRequest) -> PullRequestInfo {
    let repo_of = |b: &Option<BranchInfo>| b.as_ref().and_then(|b| b.repo_id).filter(|id| *id != 0);
    let same_repository = repo_of(&pr.head).is_some() && repo_of(&pr.head) == repo_of(&pr.base);
    let head = pr.head.unwrap_or(BranchInfo {
        ref_name: String::new(),
        sha: None,
        repo_id: None,
    });
    PullRequestInfo {
        number: pr.number,
        open: pr.state == "open",
        merged: pr.merged,
        title: pr.title,
        body: pr.body.unwrap_or_default(),
        labels: label_names(pr.labels, |l| l.name),
        url: pr.html_url,
        head_ref: head.ref_name,
        head_sha: head.sha.unwrap_or_default(),
        // Gitea answers an empty string rather than null before the merge.
        merge_commit_sha: pr
            .merge_commit_sha
            .filter(|sha| pr.merged && !sha.is_empty()),
        merged_at: pr.merged_at.as_deref().and_then(unix),
        updated_at: pr.updated_at.as_deref().and_then(unix),
        author: pr.user.map(|u| u.login).unwrap_or_default(),
        same_repository,
    }
}

/// A Gitea commit status state as tagpin reads it; `warning` (and anything new) is no verdict
/// of tagpin's.
fn read_state(status: &str) -> Option<StatusState> {
    match status {
        "pending" => Some(StatusState::Pending),
        "success" => Some(StatusState::Success),
        "failure" => Some(StatusState::Failure),
        "error" => Some(StatusState::Error),
        _ => None,
    }
}

/// Gitea's words for tagpin's states: the same as GitHub's.
fn wire_state(state: StatusState) -> &'static str {
    match state {
        StatusState::Pending => "pending",
        StatusState::Success => "success",
        StatusState::Failure => "failure",
        StatusState::Error => "error",
    }
}

/// Whether `comment` is the one `me` wrote carrying `marker`.
fn mine(comment: &Comment, marker: &str, me: &str) -> bool {
    comment.body.contains(marker) && comment.user.as_ref().is_some_and(|u| u.login == me)
}

/// A status as tagpin reads it, with who set it and when.
fn status(s: &CommitStatus) -> Option<Status> {
    Some(Status {
        state: read_state(&s.status)?,
        description: s.description.clone().unwrap_or_default(),
        created_at: s.created_at.as_deref().and_then(unix),
        creator: s.creator.as_ref().map(|c| c.login.clone()),
    })
}

/// The next page of a list read from `url` (with `page=N`), which answered `count` items:
/// `page=N+1` on the same address when the `Link` header has a `rel="next"` or
/// `X-Total-Count` says more items remain. The `Link` address itself is never followed: Gitea
/// writes it on its `ROOT_URL`, which may be another host than `api_url`.
fn next_page(url: &str, headers: &HeaderMap, count: usize) -> Result<Option<String>, BadPageUrl> {
    let next = PageAddress::parse(url)?;
    let page = next.number("page").unwrap_or(1);
    let linked = header(headers, "link").and_then(next_link).is_some();
    // Pages before this one held as many items as this one at least (Gitea's page size is
    // fixed), so `page * count` never overstates what was read: no page is left out, and a
    // short last page costs one empty read at worst.
    let remaining = header(headers, "x-total-count")
        .and_then(|t| t.parse::<u64>().ok())
        .is_some_and(|total| count > 0 && total > page.saturating_mul(count as u64));
    if count == 0 || !(linked || remaining) {
        return Ok(None);
    }
    Ok(Some(next.with("page", &(page + 1).to_string())))
}

#[cfg(test)]
mod tests {
    use super::super::engine::{assert_states_round_trip, headers, patched};
    use super::*;

    /// A merged pull request in the shape of Gitea's swagger `PullRequest` (gitea-js 1.23.0,
    /// `dist/index.d.ts`), trimmed of fields tagpin does not read.
    const MERGED_PULL_REQUEST: &str = r#"{
      "id": 4711, "number": 12, "state": "closed", "title": "Pin 1 image(s) to digests",
      "body": "plan", "merged": true, "mergeable": false,
      "merged_at": "2026-01-02T03:04:05+01:00", "updated_at": "2026-01-02T03:04:06Z",
      "merge_commit_sha": "cccccccccccccccccccccccccccccccccccccccc",
      "html_url": "https://git.example.com/acme/gitops/pulls/12",
      "labels": [{"id": 3, "name": "tagpin", "color": "ededed", "description": "", "url": ""}],
      "user": {"id": 7, "login": "tagpin-bot", "full_name": ""},
      "head": {"label": "tagpin/main", "ref": "tagpin/main",
               "sha": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "repo_id": 5},
      "base": {"label": "main", "ref": "main",
               "sha": "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", "repo_id": 5}
    }"#;

    fn pr(patch: serde_json::Value) -> PullRequestInfo {
        info(serde_json::from_value(patched(MERGED_PULL_REQUEST, patch)).unwrap())
    }

    #[test]
    fn a_gitea_pull_request_reads_as_tagpin_reads_a_change_request() {
        let merged = pr(serde_json::json!({}));
        assert_eq!(merged.number, 12);
        assert!(merged.merged && !merged.open);
        assert_eq!(merged.labels, ["tagpin"]);
        assert_eq!(merged.head_ref, "tagpin/main");
        assert_eq!(merged.head_sha, "a".repeat(40));
        assert_eq!(merged.merge_commit_sha, Some("c".repeat(40)));
        assert_eq!(merged.merged_at, Some(1767319445));
        assert_eq!(merged.author, "tagpin-bot");
        assert!(merged.same_repository);
        let open = pr(serde_json::json!({"state": "open", "merged": false,
            "merge_commit_sha": "", "merged_at": null, "labels": null}));
        assert!(open.open && !open.merged);
        assert_eq!(
            open.merge_commit_sha, None,
            "Gitea's empty string is no commit"
        );
        assert!(open.labels.is_empty());
        let closed = pr(serde_json::json!({"merged": false, "merge_commit_sha": null}));
        assert!(!closed.open && !closed.merged);
    }

    #[test]
    fn a_pull_request_from_a_fork_or_a_deleted_fork_is_not_this_repositorys() {
        let fork =
            pr(serde_json::json!({"head": {"ref": "tagpin/main", "sha": "a", "repo_id": 9}}));
        assert!(!fork.same_repository);
        let deleted =
            pr(serde_json::json!({"head": {"ref": "tagpin/main", "sha": "a", "repo_id": 0}}));
        assert!(!deleted.same_repository);
        let unknown = pr(serde_json::json!({"head": null}));
        assert!(!unknown.same_repository);
    }

    #[test]
    fn gitea_states_are_githubs_and_warning_is_none_of_tagpins() {
        assert_states_round_trip(wire_state, read_state);
        assert_eq!(read_state("warning"), None);
        let posted = json(&NewStatus {
            state: wire_state(StatusState::Failure),
            context: "tagpin/converged",
            description: "1 of 2 pods",
        });
        assert_eq!(
            posted,
            serde_json::json!({"state": "failure", "context": "tagpin/converged",
                "description": "1 of 2 pods"})
        );
    }

    #[test]
    fn pages_are_numbered_on_api_url_and_a_link_address_is_never_followed() {
        let url =
            "https://git.example.com/api/v1/repos/acme/gitops/pulls?state=all&limit=50&page=1";
        // Gitea writes its Link on ROOT_URL, here another host: only its rel="next" counts.
        let link = "<https://public.example.org/api/v1/repos/acme/gitops/pulls?limit=50&page=2&state=all>; rel=\"next\",<https://public.example.org/api/v1/repos/acme/gitops/pulls?limit=50&page=3&state=all>; rel=\"last\"";
        assert_eq!(
            next_page(url, &headers(&[("link", link)]), 50)
                .unwrap()
                .as_deref(),
            Some(
                "https://git.example.com/api/v1/repos/acme/gitops/pulls?state=all&limit=50&page=2"
            )
        );
        // Without a Link, X-Total-Count: 120 items in pages of 50 have a third page, not a fourth.
        let page2 = url.replace("page=1", "page=2");
        assert!(next_page(&page2, &headers(&[("x-total-count", "120")]), 50)
            .unwrap()
            .unwrap()
            .ends_with("page=3"));
        let page3 = url.replace("page=1", "page=3");
        assert_eq!(
            next_page(&page3, &headers(&[("x-total-count", "120")]), 40).unwrap(),
            None
        );
        // An instance answering 30 a page (MAX_RESPONSE_ITEMS) still pages on.
        assert!(next_page(url, &headers(&[("x-total-count", "31")]), 30)
            .unwrap()
            .is_some());
        assert_eq!(next_page(url, &HeaderMap::new(), 50).unwrap(), None);
        assert_eq!(
            next_page(url, &headers(&[("link", link)]), 0).unwrap(),
            None,
            "an empty page is the last"
        );
    }

    #[test]
    fn the_verdict_comment_is_tagpins_own_found_by_its_marker() {
        let comments: Vec<Comment> = serde_json::from_str(
            r#"[{"id": 2, "body": "quoting <!-- tagpin-verdict -->", "user": {"login": "alice"}},
                {"id": 3, "body": "<!-- tagpin-verdict -->\nConverged", "user": {"login": "tagpin-bot"}}]"#,
        )
        .unwrap();
        let marker = "<!-- tagpin-verdict -->";
        let found = comments.iter().find(|c| mine(c, marker, "tagpin-bot"));
        assert_eq!(found.map(|c| c.id), Some(3));
        assert!(!mine(&comments[0], marker, "tagpin-bot"));
    }

    #[test]
    fn owner_and_repository_are_each_one_path_segment() {
        assert_eq!(
            with_query(
                "https://git.example.com/api/v1/repos/acme/gitops/pulls",
                &[("state", "all")]
            ),
            "https://git.example.com/api/v1/repos/acme/gitops/pulls?state=all&limit=50&page=1"
        );
        assert_eq!(encode("my repo/x"), "my%20repo%2Fx");
    }
}
