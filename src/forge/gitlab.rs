//! The GitLab adapter: gitlab.com and self-managed GitLab through REST v4.
//!
//! A merge request is what a GitHub pull request is to tagpin: it is found by its source
//! branch (a tagpin branch of this very project, never a fork's), opened with the plan block
//! in its description and `remove_source_branch`, and read back as open, merged (with the
//! commit that landed) or closed by a person. Commit statuses are GitLab's external statuses,
//! and the verdict is one merge request note found by its marker.
//!
//! Plain reqwest with typed request and answer structs, not a GitLab client crate: tagpin
//! needs ten calls, the `Retry-After` and `Link`/`x-next-page` headers of their answers, and
//! its own timeouts and error naming, which a general client hides behind its own types.
//!
//! The token goes in the `PRIVATE-TOKEN` header (a personal, project or group access token),
//! marked sensitive so no debug output shows it. Redirects are not followed (reqwest strips
//! `Authorization` on a redirect to another host, but not a custom header such as this one)
//! and a `Link` to another origin is refused, so the token is sent to `api_url`'s host only.
//! Every call has a connect timeout and a total deadline, answer included
//! (`forge.timeout_seconds`), and reads at most [`super::MAX_ANSWER_BYTES`]; a `429` is waited out
//! when GitLab says when to come back within [`super::MAX_RATE_LIMIT_WAIT`], and reported otherwise.
//! GitLab's own error messages are read only to recognise known cases, never quoted.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::header::HeaderMap;
use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::engine::{header, BadPageUrl, Dialect, PageAddress, Paged};
use super::engine::{json, next_link, read_pages, read_pages_whole, retry_after, unix};
use super::engine::{read_change_requests, Marked, Said, StatusKey, Words};
use super::engine::{Forge, Listing, NewChange, Rest, Result};
use super::settings::ChangeRequestNoun;
use super::settings::{report_foreign, segment_ok, Keys, Kind, Section, Settings};
use crate::review::{PullRequestInfo, Status, StatusHistory, StatusState};

const FORGE: &str = "GitLab";
/// `kind: gitlab`: `forge.project` ([`project`]), on gitlab.com unless a self-managed
/// `https://HOST/api/v4` is given.
pub(crate) const SECTION: Section = Section::new("gitlab", Some(API_URL), project);
/// gitlab.com's API.
const API_URL: &str = "https://gitlab.com/api/v4";
/// What a failed answer means, in words that say what to fix: the token (401), its scope or
/// role (403), the project or object (404), and what its body tells apart ([`from_body`]).
pub(super) const WORDS: Words = Words {
    wait: rate_limit_wait,
    unauthorized: "the token is not valid (expired, revoked, or not a GitLab token)",
    forbidden: "the token's user may not do this in {repo} (it needs the Developer role or higher)",
    not_found: "{repo} is not at {api}, or the token may not read it (GitLab answers 404 for projects hidden from the token)",
    from_body,
    ..Words::PLAIN
};

/// A GitLab project, with a token.
pub struct GitLab {
    /// At `/projects/{group%2Fsubgroup%2Fproject}`.
    rest: Rest,
    /// Merge requests, adopted when opened meanwhile; the token's username.
    dialect: Dialect,
}

/// A merge request as GitLab's list and single-merge-request answers carry it (the fields
/// tagpin reads).
#[derive(Debug, Deserialize)]
struct MergeRequest {
    iid: u64,
    #[serde(default)]
    title: String,
    description: Option<String>,
    /// `opened`, `closed`, `locked` (being merged) or `merged`.
    state: String,
    #[serde(default)]
    labels: Vec<String>,
    #[serde(default)]
    web_url: String,
    source_branch: String,
    /// The head commit of the source branch.
    sha: Option<String>,
    merge_commit_sha: Option<String>,
    squash_commit_sha: Option<String>,
    merged_at: Option<String>,
    updated_at: Option<String>,
    author: Option<User>,
    source_project_id: Option<u64>,
    target_project_id: Option<u64>,
}

#[derive(Debug, Deserialize)]
struct User {
    username: String,
}

/// One commit status (`GET /projects/:id/repository/commits/:sha/statuses`).
#[derive(Debug, Deserialize)]
struct CommitStatus {
    id: u64,
    name: String,
    /// `pending`, `running`, `success`, `failed`, `canceled`, `skipped`, …
    status: String,
    description: Option<String>,
    created_at: Option<String>,
    /// When it reached its final state.
    finished_at: Option<String>,
    author: Option<User>,
}

/// One merge request note.
#[derive(Debug, Deserialize)]
struct Note {
    id: u64,
    #[serde(default)]
    body: String,
    author: Option<User>,
    /// GitLab's own notes ("added 1 commit"): never tagpin's.
    #[serde(default)]
    system: bool,
}

#[derive(Debug, Serialize)]
struct NewMergeRequest<'a> {
    source_branch: &'a str,
    target_branch: &'a str,
    title: &'a str,
    description: &'a str,
    /// tagpin's branches are its own: once merged, GitLab deletes them.
    remove_source_branch: bool,
}

#[derive(Debug, Serialize)]
struct EditMergeRequest<'a> {
    title: &'a str,
    description: &'a str,
}

#[derive(Debug, Serialize)]
struct AddLabels {
    /// Comma-separated; labels already on the merge request stay.
    add_labels: String,
}

#[derive(Debug, Serialize)]
struct NewStatus<'a> {
    state: &'a str,
    /// The branch the status belongs to; without it GitLab takes the first branch holding
    /// the commit.
    #[serde(rename = "ref", skip_serializing_if = "Option::is_none")]
    ref_name: Option<&'a str>,
    name: &'a str,
    description: &'a str,
}

#[derive(Debug, Serialize)]
struct NoteBody<'a> {
    body: &'a str,
}

impl GitLab {
    /// `api_url` is `https://gitlab.com/api/v4`, or `https://HOST/api/v4` for a self-managed
    /// GitLab. The token goes in `PRIVATE-TOKEN`.
    pub fn new(forge: &Settings, project: &str, token: String) -> Result<GitLab> {
        let credentials = ("PRIVATE-TOKEN", token.trim().to_string());
        Ok(GitLab {
            rest: Rest::new(FORGE, forge, project.to_string(), credentials, &WORDS)?
                .at(&format!("/projects/{}", encode_project(project))),
            dialect: Dialect::new(FORGE, ChangeRequestNoun::MergeRequest, forge.login.clone())
                .adopting(),
        })
    }

    /// One page of a list, with the address of the next page ([`next_page`]).
    async fn read_list<T: DeserializeOwned>(&self, what: &str, url: &str) -> Result<Paged<T>> {
        let answer = self.rest.call(what, Method::GET, url, None).await?;
        let next = next_page(url, &answer.headers, &self.rest.api)
            .map_err(|e| self.rest.error(what, e.to_string(), None))?;
        Ok((self.rest.parse(what, &answer.body)?, next))
    }

    /// GitLab's statuses named `context` on `sha` (of ref `branch` only, when given), newest
    /// first, and whether they were read to the end of the list.
    async fn commit_statuses(&self, key: StatusKey<'_>) -> Result<(Vec<CommitStatus>, bool)> {
        let what = format!("read statuses of {}", key.sha);
        let mut query = vec![("name", key.context), ("all", "true")];
        query.extend(key.branch.map(|b| ("ref", b)));
        let statuses = format!("/repository/commits/{}/statuses", key.sha);
        let first = with_query(&self.rest.url(&statuses), &query);
        let what = what.as_str();
        let read_page = |url: String| async move { self.read_list(what, &url).await };
        let (mut statuses, whole): (Vec<CommitStatus>, bool) =
            read_pages_whole(first, read_page, |_| false).await?;
        statuses.retain(|s| s.name == key.context);
        statuses.sort_by_key(|s| std::cmp::Reverse(s.id));
        Ok((statuses, whole))
    }
}

impl Forge for GitLab {
    fn dialect(&self) -> &Dialect {
        &self.dialect
    }

    /// `GET /user`; for a project or group access token, its bot user.
    async fn ask_login(&self) -> Result<String> {
        let url = format!("{}/user", self.rest.api);
        let what = "read the token's user (GET /user)";
        Ok(self.rest.get::<User>(what, &url).await?.username)
    }

    /// GitLab filters by source and target branch itself. Its `closed` leaves merged ones
    /// out: the recent are read in all states, most recently changed first (so the pages stop
    /// where the window does), and [`super::engine::in_flight`] drops the open ones.
    async fn list(&self, what: &str, listing: Listing<'_>) -> Result<Vec<PullRequestInfo>> {
        let (query, until) = match listing {
            Listing::From { branch, base } => (
                vec![
                    ("state", "all"),
                    ("source_branch", branch),
                    ("target_branch", base),
                ],
                None,
            ),
            Listing::OpenFrom { branch, base } => {
                let query = [("state", "opened"), ("source_branch", branch)];
                (vec![query[0], query[1], ("target_branch", base)], None)
            }
            Listing::OpenInto { base, .. } => {
                (vec![("state", "opened"), ("target_branch", base)], None)
            }
            Listing::ClosedInto { base, since, .. } => {
                let order = [("order_by", "updated_at"), ("sort", "desc")];
                (
                    vec![
                        ("state", "all"),
                        ("target_branch", base),
                        order[0],
                        order[1],
                    ],
                    Some(since),
                )
            }
        };
        // Every page, 100 at a time; with `until`, to the first that reaches it.
        let first = with_query(&self.rest.url("/merge_requests"), &query);
        let read_page = |url: String| async move { self.read_list(what, &url).await };
        read_change_requests(first, until, read_page, |mr: MergeRequest| Some(info(mr))).await
    }

    /// Opened with `remove_source_branch`: tagpin's branches are its own, and once merged
    /// GitLab deletes them.
    async fn create(&self, what: &str, new: NewChange<'_>) -> Result<PullRequestInfo> {
        let request = json(&NewMergeRequest {
            source_branch: new.branch,
            target_branch: new.base,
            title: new.title,
            description: new.body,
            remove_source_branch: true,
        });
        let url = self.rest.url("/merge_requests");
        Ok(info(self.rest.post(what, &url, request).await?))
    }

    async fn update_pull_request(&self, number: u64, title: &str, body: &str) -> Result<()> {
        let what = format!("update merge request !{number}");
        let url = self.rest.url(&format!("/merge_requests/{number}"));
        let description = body;
        let edit = json(&EditMergeRequest { title, description });
        self.rest.write(&what, Method::PUT, &url, &edit).await
    }

    /// Labels already on the merge request stay.
    async fn add_labels(&self, number: u64, labels: &[String]) -> Result<()> {
        let what = format!("add labels to merge request !{number}");
        let url = self.rest.url(&format!("/merge_requests/{number}"));
        let add_labels = labels.join(",");
        let add = json(&AddLabels { add_labels });
        self.rest.write(&what, Method::PUT, &url, &add).await
    }

    /// By its IID, the `!N` of the project.
    async fn pull_request(&self, number: u64) -> Result<PullRequestInfo> {
        let what = format!("read merge request !{number}");
        let url = self.rest.url(&format!("/merge_requests/{number}"));
        Ok(info(self.rest.get(&what, &url).await?))
    }

    /// All of them, not only the latest per name: the soak clock starts at the first.
    async fn statuses(&self, key: StatusKey<'_>) -> Result<StatusHistory> {
        let (found, complete) = self.commit_statuses(key).await?;
        let statuses = found.iter().filter_map(status).collect();
        Ok(StatusHistory { statuses, complete })
    }

    /// Posted as the token's user on the ref `branch` when given. GitLab keeps one status per
    /// name and ref in `pending` or `running` and moves it, refusing a move to the state it
    /// is in (`400 Cannot transition status`); so the statuses of that ref are read first and
    /// only a change is posted ([`status_to_post`]).
    async fn set_status(&self, key: StatusKey<'_>, said: Said<'_>) -> Result<()> {
        let me = self.login().await?;
        let (statuses, _) = self.commit_statuses(key).await?;
        let own = statuses
            .iter()
            .find(|s| s.author.as_ref().is_some_and(|a| a.username == me))
            .map(|s| (s.status.as_str(), s.description.as_deref().unwrap_or("")));
        // Whose ever it is: GitLab may move the live one of the name whoever posted it.
        let live = statuses
            .iter()
            .map(|s| s.status.as_str())
            .find(|s| matches!(*s, "pending" | "running"));
        let Some(state) = status_to_post(said.state, said.description, own, live) else {
            return Ok(());
        };
        let what = format!("set status {} on {}", key.context, key.sha);
        let url = self.rest.url(&format!("/statuses/{}", key.sha));
        let status = json(&NewStatus {
            state,
            ref_name: key.branch,
            name: key.context,
            description: said.description,
        });
        self.rest.write(&what, Method::POST, &url, &status).await
    }

    /// Found by the marker among the notes tagpin's user wrote, on every page: GitLab lets
    /// only a note's author edit it, so a person quoting the marker is not mistaken for it.
    async fn marked_comment(&self, number: u64, marker: &str) -> Result<Option<Marked>> {
        let me = self.login().await?;
        let what = format!("list notes of merge request !{number}");
        let notes = self.rest.url(&format!("/merge_requests/{number}/notes"));
        let first = with_query(&notes, &[("sort", "asc"), ("order_by", "created_at")]);
        let what = what.as_str();
        let read_page = |url: String| async move { self.read_list(what, &url).await };
        let enough = |page: &[Note]| page.iter().any(|n| mine(n, marker, me));
        let read: Vec<Note> = read_pages(first, read_page, enough).await?;
        let note = read.into_iter().find(|n| mine(n, marker, me));
        Ok(note.map(|n| Marked {
            id: n.id,
            text: n.body,
            ..Marked::default()
        }))
    }

    /// A note of the merge request, edited by its id.
    async fn write_comment(&self, number: u64, old: Option<Marked>, body: &str) -> Result<()> {
        let notes = self.rest.url(&format!("/merge_requests/{number}/notes"));
        let note = NoteBody { body };
        if let Some(Marked { id, .. }) = old {
            let what = format!("update note {id} on merge request !{number}");
            let url = format!("{notes}/{id}");
            return self.rest.write(&what, Method::PUT, &url, &note).await;
        }
        let what = format!("comment on merge request !{number}");
        self.rest.write(&what, Method::POST, &notes, &note).await
    }
}

/// The project as GitLab's paths take it: `group/sub/project` is `group%2Fsub%2Fproject`.
fn encode_project(project: &str) -> String {
    url::form_urlencoded::byte_serialize(project.as_bytes()).collect()
}

/// `url` with `query` and `per_page=100` appended.
fn with_query(url: &str, query: &[(&str, &str)]) -> String {
    let mut pairs = url::form_urlencoded::Serializer::new(String::new());
    pairs.extend_pairs(query);
    pairs.append_pair("per_page", "100");
    format!("{url}?{}", pairs.finish())
}

/// What tagpin reads of a merge request. The commit that landed is `merge_commit_sha`, else
/// `squash_commit_sha` (a squash merged without a merge commit), else, once merged, the head
/// itself (a fast-forward merge puts the source branch's tip on the target).
fn info(mr: MergeRequest) -> PullRequestInfo {
    let merged = mr.state == "merged";
    let head_sha = mr.sha.unwrap_or_default();
    let merge_commit_sha = match (mr.merge_commit_sha, mr.squash_commit_sha) {
        (Some(sha), _) | (None, Some(sha)) => Some(sha),
        (None, None) if merged && !head_sha.is_empty() => Some(head_sha.clone()),
        (None, None) => None,
    };
    PullRequestInfo {
        number: mr.iid,
        // `locked` is GitLab's state while it merges: still open until it says merged.
        open: matches!(mr.state.as_str(), "opened" | "locked"),
        merged,
        title: mr.title,
        body: mr.description.unwrap_or_default(),
        labels: mr.labels,
        url: mr.web_url,
        head_ref: mr.source_branch,
        head_sha,
        merge_commit_sha,
        merged_at: mr.merged_at.as_deref().and_then(unix),
        updated_at: mr.updated_at.as_deref().and_then(unix),
        author: mr.author.map(|a| a.username).unwrap_or_default(),
        // A merge request from a fork has the fork as its source project.
        same_repository: mr.source_project_id.is_some()
            && mr.source_project_id == mr.target_project_id,
    }
}

/// A GitLab commit status state as tagpin reads it; `skipped` (and anything new) is no
/// verdict of tagpin's.
fn read_state(status: &str) -> Option<StatusState> {
    match status {
        "created"
        | "waiting_for_resource"
        | "preparing"
        | "pending"
        | "running"
        | "scheduled"
        | "manual" => Some(StatusState::Pending),
        "success" => Some(StatusState::Success),
        "failed" => Some(StatusState::Failure),
        // tagpin posts `canceled` for a check it could not make.
        "canceled" => Some(StatusState::Error),
        _ => None,
    }
}

/// The state to post for `want` with `description`, or nothing when nothing is to be posted;
/// given the newest status tagpin set in that name (`own`: its GitLab state and description)
/// and the state of the name's status GitLab still holds open (`live`: `pending` or
/// `running`, whoever set it).
///
/// GitLab keeps one status per name while it is `pending` or `running` and moves that one:
/// `pending` may become `running` or final, `running` only final, and a final status is
/// followed by a new one. So a pending check whose description changes moves `pending` ->
/// `running` once (GitLab shows the check running, which it is), then keeps its description
/// until the verdict. tagpin's `error` (the check could not be made) is GitLab's `canceled`.
fn status_to_post(
    want: StatusState,
    description: &str,
    own: Option<(&str, &str)>,
    live: Option<&str>,
) -> Option<&'static str> {
    let wire = match want {
        StatusState::Pending => "pending",
        StatusState::Success => "success",
        StatusState::Failure => "failed",
        StatusState::Error => "canceled",
    };
    if own.is_some_and(|(state, said)| said == description && read_state(state) == Some(want)) {
        return None;
    }
    match live {
        Some("pending") if want == StatusState::Pending => Some("running"),
        Some("running") if want == StatusState::Pending => None,
        _ => Some(wire),
    }
}

/// When a status took the state it is in. GitLab moves a `pending` or `running` status to its
/// final state in place, keeping its `created_at`: a success posted after a pending one of the
/// same name was set at its `finished_at`, not when the pending one was (the soak clock must
/// not start while the stage was still rolling out).
fn set_at(status: &CommitStatus) -> Option<i64> {
    let finished = matches!(status.status.as_str(), "success" | "failed" | "canceled");
    let when = match (&status.finished_at, finished) {
        (Some(at), true) => at,
        _ => status.created_at.as_ref()?,
    };
    unix(when)
}

/// Whether `note` is one `me` wrote carrying `marker`; GitLab's system notes are never
/// tagpin's.
fn mine(note: &Note, marker: &str, me: &str) -> bool {
    !note.system
        && note.body.contains(marker)
        && note.author.as_ref().is_some_and(|a| a.username == me)
}

/// A status as tagpin reads it, with who set it and when ([`set_at`]).
fn status(s: &CommitStatus) -> Option<Status> {
    Some(Status {
        state: read_state(&s.status)?,
        description: s.description.clone().unwrap_or_default(),
        created_at: set_at(s),
        creator: s.author.as_ref().map(|a| a.username.clone()),
    })
}

/// Why the next page of a list cannot be asked for. A header's text is the server's and is
/// not quoted: only the other host is named.
#[derive(Debug, thiserror::Error)]
enum PagingError {
    /// `host` is `None` when the link is not a URL with a host.
    #[error(
        "the next page is on {}, not on {api}; the token is not sent there",
        host.as_deref().unwrap_or("an address that is not a URL")
    )]
    ElsewhereLink { host: Option<String>, api: String },
    #[error("x-next-page is not a page number")]
    NotAPageNumber,
    #[error(transparent)]
    BadUrl(#[from] BadPageUrl),
}

/// The next page of a list: the `Link` header's `rel="next"`, else GitLab's `x-next-page`
/// number on the same address (empty on the last page). A `Link` to another origin than
/// `api` is refused: the token goes nowhere else. Errors name only the other host: a header's
/// text is the server's, and is not quoted.
fn next_page(url: &str, headers: &HeaderMap, api: &str) -> Result<Option<String>, PagingError> {
    if let Some(next) = header(headers, "link").and_then(next_link) {
        let origin = |u: &str| url::Url::parse(u).ok().map(|u| u.origin());
        if origin(&next).is_none() || origin(&next) != origin(api) {
            let host = url::Url::parse(&next).ok();
            let host = host.and_then(|u| u.host_str().map(str::to_string));
            let api = api.to_string();
            return Err(PagingError::ElsewhereLink { host, api });
        }
        return Ok(Some(next));
    }
    let Some(page) = header(headers, "x-next-page") else {
        return Ok(None);
    };
    if !page.bytes().all(|b| b.is_ascii_digit()) {
        return Err(PagingError::NotAPageNumber);
    }
    Ok(Some(PageAddress::parse(url)?.with("page", page)))
}

/// How long GitLab asks to wait after a `429`: `Retry-After` seconds, else until the
/// `RateLimit-Reset` Unix time, else a minute.
fn rate_limit_wait(headers: &HeaderMap, now: SystemTime) -> Duration {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    if let Some(wait) = retry_after(headers, now) {
        return wait;
    }
    if let Some(reset) = header("ratelimit-reset") {
        let now = now
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        return Duration::from_secs(reset.saturating_sub(now).saturating_add(1));
    }
    Duration::from_secs(60)
}

/// What a failed answer's body tells apart: a token without the api scope (403), a merge
/// request already open (409), the fields GitLab refused (400). GitLab's text is read only to
/// recognise these, never quoted.
fn from_body(status: StatusCode, body: &str) -> Option<String> {
    match status.as_u16() {
        403 if body.contains("insufficient_scope") => Some(
            "the token lacks the api scope (a personal, project or group access token with scope api is needed)".to_string(),
        ),
        409 if body.contains("already exists") => {
            Some("a merge request for this branch already exists".to_string())
        }
        400 => refused_fields(body).map(|fields| format!("GitLab refused the {fields}")),
        _ => None,
    }
}

/// The fields tagpin sent that a `400` names (`{"message": {"title": ["is too long"]}}`), as
/// tagpin spells them; fields it did not send are not named.
fn refused_fields(body: &str) -> Option<String> {
    const SENT: [&str; 11] = [
        "source_branch",
        "target_branch",
        "title",
        "description",
        "remove_source_branch",
        "add_labels",
        "state",
        "ref",
        "name",
        "body",
        "labels",
    ];
    let value: serde_json::Value = serde_json::from_str(body).ok()?;
    let fields: Vec<&str> = SENT
        .iter()
        .copied()
        .filter(|field| value["message"].get(field).is_some())
        .collect();
    (!fields.is_empty()).then(|| fields.join(", "))
}

/// `forge.project`: a GitLab project by its path (`group/subgroup/project`) or numeric ID; a
/// GitHub key is reported.
fn project(keys: &mut dyn Keys, _: Option<&str>) -> Option<Kind> {
    let elsewhere = "is for GitHub and Gitea; a GitLab project is named by forge.project (group/subgroup/project)";
    report_foreign(keys, &["forge.owner", "forge.repo"], elsewhere);
    let project = keys.required("forge.project");
    if let Some(project) = project.as_ref().filter(|p| !project_ok(p)) {
        let problem = format!(
            "{project:?} is not a GitLab project path (group/subgroup/project) or numeric ID"
        );
        keys.problem("forge.project", &problem);
    }
    Some(Kind::GitLab { project: project? })
}

/// A GitLab project as its API takes it: a numeric ID, or the full path of a project in a
/// group or namespace (`group/subgroup/project`), each part one path segment.
fn project_ok(project: &str) -> bool {
    if project.bytes().all(|b| b.is_ascii_digit()) {
        return true;
    }
    let parts: Vec<&str> = project.split('/').collect();
    parts.len() >= 2 && parts.iter().all(|part| segment_ok(part))
}

#[cfg(test)]
mod tests {
    use super::super::engine::{headers, patched};
    use super::*;

    /// "List project merge requests", one item of the example answer in GitLab's REST
    /// documentation (`doc/api/merge_requests.md`), trimmed of fields tagpin does not read.
    const DOCUMENTED_MERGE_REQUEST: &str = r#"{
      "id": 1, "iid": 1, "project_id": 3, "title": "test1",
      "description": "fixed login page css paddings", "state": "merged",
      "merged_by": {"id": 87854, "name": "Douwe Maan", "username": "DouweM", "state": "active"},
      "merged_at": "2018-09-07T11:16:17.520Z", "closed_by": null, "closed_at": null,
      "created_at": "2017-04-29T08:46:00Z", "updated_at": "2017-04-29T08:46:00Z",
      "target_branch": "main", "source_branch": "test1", "upvotes": 0, "downvotes": 0,
      "author": {"id": 1, "name": "Administrator", "username": "admin", "state": "active",
                 "locked": false, "avatar_url": null, "web_url": "https://gitlab.example.com/admin"},
      "source_project_id": 2, "target_project_id": 3,
      "labels": ["Community contribution", "Manage"], "draft": false,
      "merge_status": "can_be_merged", "detailed_merge_status": "not_open",
      "sha": "8888888888888888888888888888888888888888",
      "merge_commit_sha": null, "squash_commit_sha": null,
      "should_remove_source_branch": true, "force_remove_source_branch": false,
      "web_url": "http://gitlab.example.com/my-group/my-project/merge_requests/1",
      "reference": "!1", "squash": false
    }"#;

    /// "Set the pipeline status of a commit", GitLab's example answer (`doc/api/commits.md`).
    const DOCUMENTED_STATUS: &str = r#"{
      "author": {"web_url": "https://gitlab.example.com/janedoe", "name": "Jane Doe",
                 "avatar_url": "https://gitlab.example.com/uploads/user/avatar/28/jane-doe-400-400.png",
                 "username": "janedoe", "state": "active", "id": 28},
      "name": "default", "sha": "18f3e63d05582537db6d183d9d557be09e1f90c8",
      "status": "success", "coverage": 100.0, "description": null, "id": 93,
      "target_url": null, "ref": null, "started_at": null,
      "created_at": "2016-01-19T09:05:50.355Z", "allow_failure": false,
      "finished_at": "2016-01-19T09:05:50.365Z"
    }"#;

    fn mr(patch: serde_json::Value) -> PullRequestInfo {
        let value = patched(DOCUMENTED_MERGE_REQUEST, patch);
        info(serde_json::from_value(value).unwrap())
    }

    #[test]
    fn a_documented_merge_request_reads_as_tagpin_reads_a_pull_request() {
        let pr = mr(serde_json::json!({"source_project_id": 3}));
        assert_eq!(pr.number, 1, "the IID, not the global id");
        assert!(pr.merged && !pr.open);
        assert_eq!(pr.title, "test1");
        assert_eq!(pr.body, "fixed login page css paddings");
        assert_eq!(pr.labels, ["Community contribution", "Manage"]);
        assert_eq!(pr.head_ref, "test1");
        assert_eq!(pr.head_sha, "8".repeat(40));
        assert_eq!(pr.author, "admin");
        assert_eq!(pr.merged_at, Some(1536318977));
        assert_eq!(pr.updated_at, Some(1493455560));
        assert!(pr.same_repository);
        assert_eq!(
            pr.url,
            "http://gitlab.example.com/my-group/my-project/merge_requests/1"
        );
    }

    #[test]
    fn a_merge_request_from_a_fork_is_not_this_repositorys() {
        // The documented example itself comes from project 2 into project 3.
        assert!(!mr(serde_json::json!({})).same_repository);
        assert!(!mr(serde_json::json!({"source_project_id": null})).same_repository);
    }

    #[test]
    fn the_commit_that_landed_is_the_merge_then_the_squash_then_the_fast_forwarded_head() {
        let merge = "a".repeat(40);
        let squash = "b".repeat(40);
        let both = mr(serde_json::json!({"merge_commit_sha": merge, "squash_commit_sha": squash}));
        assert_eq!(both.merge_commit_sha.as_deref(), Some(merge.as_str()));
        let squashed = mr(serde_json::json!({"squash_commit_sha": squash}));
        assert_eq!(squashed.merge_commit_sha.as_deref(), Some(squash.as_str()));
        let fast_forward = mr(serde_json::json!({}));
        assert_eq!(fast_forward.merge_commit_sha, Some("8".repeat(40)));
        let open = mr(serde_json::json!({"state": "opened", "merged_at": null}));
        assert!(open.open && !open.merged);
        assert_eq!(open.merge_commit_sha, None);
    }

    #[test]
    fn closed_by_a_person_is_neither_open_nor_merged_and_locked_is_still_open() {
        let closed = mr(serde_json::json!({"state": "closed", "merged_at": null}));
        assert!(!closed.open && !closed.merged);
        let locked = mr(serde_json::json!({"state": "locked", "merged_at": null}));
        assert!(locked.open && !locked.merged);
    }

    #[test]
    fn a_documented_status_reads_with_its_author_and_time() {
        let status: CommitStatus = serde_json::from_str(DOCUMENTED_STATUS).unwrap();
        assert_eq!(status.id, 93);
        assert_eq!(status.name, "default");
        assert_eq!(read_state(&status.status), Some(StatusState::Success));
        assert_eq!(status.description, None);
        assert_eq!(status.author.unwrap().username, "janedoe");
        assert_eq!(
            status.created_at.as_deref().and_then(unix),
            Some(1453194350)
        );
    }

    #[test]
    fn a_status_moved_from_pending_to_success_was_set_when_it_finished() {
        let mut status: CommitStatus = serde_json::from_str(DOCUMENTED_STATUS).unwrap();
        assert_eq!(set_at(&status), unix("2016-01-19T09:05:50.365Z"));
        status.created_at = Some("2026-01-01T10:00:00.000Z".into());
        status.finished_at = Some("2026-01-01T10:05:00.000Z".into());
        assert_eq!(set_at(&status), unix("2026-01-01T10:05:00Z"));
        status.status = "running".into();
        assert_eq!(set_at(&status), unix("2026-01-01T10:00:00Z"));
    }

    #[test]
    fn gitlab_states_map_to_tagpins_and_back() {
        assert_eq!(read_state("pending"), Some(StatusState::Pending));
        assert_eq!(read_state("running"), Some(StatusState::Pending));
        assert_eq!(read_state("failed"), Some(StatusState::Failure));
        assert_eq!(read_state("canceled"), Some(StatusState::Error));
        assert_eq!(read_state("skipped"), None);
        for (state, wire) in [
            (StatusState::Pending, "pending"),
            (StatusState::Success, "success"),
            (StatusState::Failure, "failed"),
            (StatusState::Error, "canceled"),
        ] {
            assert_eq!(status_to_post(state, "d", None, None), Some(wire));
            assert_eq!(read_state(wire), Some(state));
        }
    }

    #[test]
    fn a_status_is_posted_only_when_gitlab_would_take_it_and_it_changes_something() {
        use StatusState::*;
        let (pending, running) = (Some("pending"), Some("running"));
        // (want, words, tagpin's own state and words, the live one GitLab holds) -> posted
        #[rustfmt::skip]
        let cases = [
            // The same state and words as tagpin's own: nothing to post.
            (Success, "ok", Some(("success", "ok")), None, None),
            (Pending, "x", Some(("pending", "x")), pending, None),
            (Pending, "x", Some(("running", "x")), running, None),
            // A final status is followed by a new one, in any state.
            (Success, "ok now", Some(("success", "ok")), None, Some("success")),
            (Pending, "again", Some(("failed", "no")), None, Some("pending")),
            // pending -> pending is refused by GitLab; pending -> running carries the words.
            (Pending, "2 left", Some(("pending", "3 left")), pending, Some("running")),
            // running may only end.
            (Pending, "1 left", Some(("running", "2")), running, None),
            (Failure, "broken", Some(("running", "2")), running, Some("failed")),
            (Error, "unsure", Some(("pending", "x")), pending, Some("canceled")),
            // Someone else's live status of the name is the one GitLab would move.
            (Pending, "checking", None, pending, Some("running")),
            // Someone else's status saying the same is not tagpin's.
            (Success, "ok", None, None, Some("success")),
        ];
        for (want, words, own, live, posted) in cases {
            let case = format!("{want:?} {words:?} {own:?} {live:?}");
            assert_eq!(status_to_post(want, words, own, live), posted, "{case}");
        }
    }

    #[test]
    fn requests_carry_gitlabs_field_names() {
        let open = json(&NewMergeRequest {
            source_branch: "tagpin/main/web",
            target_branch: "main",
            title: "Pin 1 image(s) to digests",
            description: "body",
            remove_source_branch: true,
        });
        assert_eq!(
            open,
            serde_json::json!({"source_branch": "tagpin/main/web", "target_branch": "main",
                "title": "Pin 1 image(s) to digests", "description": "body",
                "remove_source_branch": true})
        );
        let labels = json(&AddLabels {
            add_labels: ["tagpin", "automated"].join(","),
        });
        assert_eq!(
            labels,
            serde_json::json!({"add_labels": "tagpin,automated"})
        );
        let status = json(&NewStatus {
            state: "failed",
            ref_name: Some("tagpin/main/web"),
            name: "tagpin/converged",
            description: "1 of 2 pods",
        });
        assert_eq!(
            status,
            serde_json::json!({"state": "failed", "ref": "tagpin/main/web",
                "name": "tagpin/converged", "description": "1 of 2 pods"})
        );
        let unknown_branch = json(&NewStatus {
            state: "success",
            ref_name: None,
            name: "tagpin/converged",
            description: "ok",
        });
        assert!(unknown_branch.get("ref").is_none(), "{unknown_branch}");
    }

    #[test]
    fn the_project_path_is_one_encoded_segment() {
        assert_eq!(encode_project("group/sub/project"), "group%2Fsub%2Fproject");
        assert_eq!(encode_project("42"), "42");
        assert_eq!(
            with_query(
                "https://gitlab.example.com/api/v4/projects/g%2Fp/merge_requests",
                &[("source_branch", "tagpin/main/web"), ("state", "all")]
            ),
            "https://gitlab.example.com/api/v4/projects/g%2Fp/merge_requests?source_branch=tagpin%2Fmain%2Fweb&state=all&per_page=100"
        );
    }

    #[test]
    fn pages_follow_link_else_x_next_page_and_never_another_origin() {
        let api = "https://gitlab.example.com/api/v4";
        let url = "https://gitlab.example.com/api/v4/projects/g%2Fp/merge_requests?state=all&per_page=100";
        let link = "<https://gitlab.example.com/api/v4/projects/g%2Fp/merge_requests?page=2&per_page=100&state=all>; rel=\"next\", <https://gitlab.example.com/api/v4/projects/g%2Fp/merge_requests?page=1&per_page=100&state=all>; rel=\"first\"";
        assert_eq!(
            next_page(url, &headers(&[("link", link), ("x-next-page", "2")]), api).unwrap(),
            Some("https://gitlab.example.com/api/v4/projects/g%2Fp/merge_requests?page=2&per_page=100&state=all".to_string())
        );
        let page3 = format!("{url}&page=2");
        assert_eq!(
            next_page(&page3, &headers(&[("x-next-page", "3")]), api).unwrap(),
            Some(
                "https://gitlab.example.com/api/v4/projects/g%2Fp/merge_requests?state=all&per_page=100&page=3"
                    .to_string()
            )
        );
        // The last page: `x-next-page` is empty.
        assert_eq!(
            next_page(url, &headers(&[("x-next-page", "")]), api).unwrap(),
            None
        );
        assert_eq!(next_page(url, &HeaderMap::new(), api).unwrap(), None);
        let elsewhere = "<https://evil.example.net/api/v4/x?page=2>; rel=\"next\"";
        let refused = next_page(url, &headers(&[("link", elsewhere)]), api)
            .unwrap_err()
            .to_string();
        assert!(refused.contains("evil.example.net"), "{refused}");
        assert!(
            !refused.contains("/api/v4/x?page=2"),
            "only the host: {refused}"
        );
    }

    #[test]
    fn a_rate_limit_is_waited_as_gitlab_says() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000);
        assert_eq!(
            rate_limit_wait(&headers(&[("retry-after", "7")]), now),
            Duration::from_secs(7)
        );
        assert_eq!(
            rate_limit_wait(&headers(&[("ratelimit-reset", "1030")]), now),
            Duration::from_secs(31)
        );
        assert_eq!(
            rate_limit_wait(&HeaderMap::new(), now),
            Duration::from_secs(60)
        );
    }

    #[test]
    fn failures_name_what_to_fix() {
        let describe = |code: u16, body: &str| {
            let status = reqwest::StatusCode::from_u16(code).unwrap();
            WORDS.describe(
                status,
                body,
                "group/sub/project",
                "https://gitlab.example.com/api/v4",
            )
        };
        let unauthorized = describe(401, r#"{"message":"401 Unauthorized"}"#);
        assert_eq!(
            unauthorized,
            "401 Unauthorized (the token is not valid (expired, revoked, or not a GitLab token))"
        );
        let scope = describe(
            403,
            r#"{"error":"insufficient_scope","error_description":"The request requires higher privileges than provided by the access token.","scope":"api"}"#,
        );
        assert!(scope.starts_with("403 Forbidden ("), "{scope}");
        assert!(scope.contains("lacks the api scope"), "{scope}");
        assert!(
            !scope.contains("higher privileges"),
            "GitLab's words: {scope}"
        );
        let role = describe(403, r#"{"message":"403 Forbidden"}"#);
        assert!(role.contains("Developer role"), "{role}");
        let missing = describe(404, r#"{"message":"404 Project Not Found"}"#);
        assert!(missing.starts_with("404 Not Found ("), "{missing}");
        assert!(missing.contains("group/sub/project is not at https://gitlab.example.com/api/v4"));
        let conflict = describe(
            409,
            r#"{"message":["Another open merge request already exists for this source branch: !1"]}"#,
        );
        assert_eq!(
            conflict,
            "409 Conflict (a merge request for this branch already exists)"
        );
        let invalid = describe(
            400,
            r#"{"message":{"title":["is too long"], "x-secret": ["s"]}}"#,
        );
        assert_eq!(invalid, "400 Bad Request (GitLab refused the title)");
        // Whatever else a server answers is not quoted: the status says what happened.
        let internal = describe(500, "INTERNAL-ONLY db_password=hunter2");
        assert_eq!(internal, "500 Internal Server Error");
        assert_eq!(describe(429, "Retry later"), "429 Too Many Requests");
    }

    #[test]
    fn the_verdict_note_is_tagpins_own_found_by_its_marker() {
        let notes: Vec<Note> = serde_json::from_str(
            r#"[{"id": 1, "body": "mentioned <!-- tagpin-verdict --> in a commit", "system": true,
                 "author": {"username": "tagpin-bot"}},
                {"id": 2, "body": "quoting <!-- tagpin-verdict -->", "system": false,
                 "author": {"username": "alice"}},
                {"id": 3, "body": "<!-- tagpin-verdict -->\nConverged", "system": false,
                 "author": {"username": "tagpin-bot"}}]"#,
        )
        .unwrap();
        let marker = "<!-- tagpin-verdict -->";
        let found = notes.iter().find(|n| mine(n, marker, "tagpin-bot"));
        assert_eq!(found.map(|n| n.id), Some(3));
        assert!(!notes[..2].iter().any(|n| mine(n, marker, "tagpin-bot")));
    }

    #[test]
    fn gitlab_times_read_as_unix_seconds() {
        assert_eq!(unix("2018-09-07T11:16:17.520Z"), Some(1536318977));
        assert_eq!(unix("yesterday"), None);
    }
}
