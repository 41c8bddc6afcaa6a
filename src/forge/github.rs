//! The GitHub adapter: GitHub and GitHub Enterprise through octocrab.
//!
//! Only what tagpin needs: find the pull requests of a tagpin branch, open or update one, add
//! labels. Calls are made one at a time (GitHub asks integrators to serialize mutating
//! requests), and a rate-limit answer (`429`, or `403` with `x-ratelimit-remaining: 0`) is
//! waited out when GitHub says when to come back within [`super::MAX_RATE_LIMIT_WAIT`], and reported
//! otherwise. The token is held by octocrab as a secret string and never printed.
//!
//! Reads are cheap on the rate limit: every list and pull request is read with the `ETag` of
//! the last answer (`If-None-Match`), and a `304 Not Modified`, which GitHub does not count,
//! is answered from what this process kept ([`MAX_CACHED_READS`] answers). Lists follow
//! GitHub's `Link` header to their last page.
//!
//! Every answer is bounded (see [`crate::bounded`]): at most [`super::MAX_ANSWER_BYTES`], and
//! the whole exchange within `forge.timeout_seconds`. octocrab's default builder takes no
//! `tower` layer, so [`client`] builds the HTTP service the way octocrab's default does
//! (hyper with rustls, the token on requests to `api_url` only) with the bound under it. No
//! redirect is followed: octocrab follows none without its `follow-redirect` feature, and the
//! token never leaves `api_url`'s host.
//!
//! Who tagpin is on GitHub (the login of the token, `GET /user`) is asked once per process:
//! only statuses that login created count as tagpin's own, and only pull requests from this
//! repository (not from forks) are tagpin's to read a plan from.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use octocrab::models::issues::Comment;
use octocrab::Octocrab;
use serde::de::DeserializeOwned;

use super::engine::{label_names, Dialect, Paged};
use super::engine::{
    next_link, read_change_requests, read_pages, retrying, status_text, ForgeError,
};
use super::engine::{Forge, Listing, Marked, Names, NewChange, Refused, Result, Said, StatusKey};
use super::engine::{CONNECT_TIMEOUT, MAX_ANSWER_BYTES};
use super::settings::ChangeRequestNoun;
use super::settings::{owner_and_repo, Kind, Section, Settings};
use base64::Engine;
use serde::Deserialize;
use serde_json::json;

use crate::bounded::{self, BoundedLayer, Bounds};
use crate::mutex::lock;
use crate::review::{PullRequestInfo, Status, StatusHistory, StatusState};

/// Answers kept for conditional reads (one per URL: a list page, a pull request, the statuses
/// of a commit). When full, all are dropped: the next reads are plain ones, nothing is wrong.
const MAX_CACHED_READS: usize = 512;
/// The bytes of the answers kept for conditional reads, at most: 512 answers of up to
/// [`MAX_ANSWER_BYTES`] each would be 8 GiB. Past it, all are dropped, as when full.
const MAX_CACHED_BYTES: usize = 64 * bounded::MIB;
const FORGE: &str = "GitHub";
/// GitHub's 422 to a ref update that is not a fast-forward, in tagpin's words.
const REF_NOT_FAST_FORWARD: &str = "the branch moved since it was read: not a fast-forward";
/// GitHub's 422 to creating a ref that exists, in tagpin's words.
const REF_EXISTS: &str = "the branch already exists";
/// `kind: github`: `forge.owner` and `forge.repo`, on `https://api.github.com` unless GitHub
/// Enterprise's `https://HOST/api/v3` is given.
pub(crate) const SECTION: Section = Section::new("github", Some(API_URL), |keys, _| {
    let (owner, repo) = owner_and_repo(keys)?;
    Some(Kind::GitHub { owner, repo })
});
/// github.com's API.
const API_URL: &str = "https://api.github.com";

/// A GitHub repository, with a token.
pub struct GitHub {
    octo: Octocrab,
    /// The forge, its host and `owner/repo`, for errors.
    names: Names,
    owner: String,
    repo: String,
    /// Pull requests, never adopted; the token's login.
    dialect: Dialect,
    /// The last answer of each conditional read, by URL.
    reads: Mutex<HashMap<String, Cached>>,
}

/// One answer kept for a conditional read.
#[derive(Clone)]
struct Cached {
    etag: String,
    body: String,
    next: Option<String>,
}

impl GitHub {
    /// `api_url` is `https://api.github.com`, or `https://HOST/api/v3` for GitHub Enterprise.
    pub fn new(forge: &Settings, (owner, repo): (&str, &str), token: String) -> Result<GitHub> {
        let deadline = Duration::from_secs(forge.timeout_seconds);
        let octo = client(&forge.api_url, &token, deadline)?;
        Ok(GitHub {
            octo,
            names: Names::new(FORGE, &forge.api_url, format!("{owner}/{repo}")),
            owner: owner.to_string(),
            repo: repo.to_string(),
            // A configured login is taken as is: GitHub App installation tokens cannot read
            // `GET /user`.
            dialect: Dialect::new(FORGE, ChangeRequestNoun::PullRequest, forge.login.clone()),
            reads: Mutex::default(),
        })
    }

    /// Every page of a pull request list, 100 at a time; with `until`, pages stop after the
    /// first one that reaches a pull request updated before it (the list is by update time).
    async fn list_pulls(
        &self,
        what: &str,
        query: &[(&str, &str)],
        until: Option<i64>,
    ) -> Result<Vec<PullRequestInfo>> {
        let mut query: Vec<(&str, &str)> = query.to_vec();
        query.push(("per_page", "100"));
        let query = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(&query)
            .finish();
        let first = format!("/repos/{}/{}/pulls?{query}", self.owner, self.repo);
        let read_page = |url: String| async move { self.read_list(what, &url).await };
        let read = |pr: octocrab::models::pulls::PullRequest| Some(self.info(pr));
        read_change_requests(first, until, read_page, read).await
    }

    /// One page of a list, read conditionally, with the address of the next page.
    async fn read_list<T: DeserializeOwned>(&self, what: &str, url: &str) -> Result<Paged<T>> {
        let cached = self.read(what, url).await?;
        let items = serde_json::from_str(&cached.body).map_err(|e| self.unexpected(what, e))?;
        Ok((items, cached.next))
    }

    /// `GET url` with the `ETag` of the last answer: a `304` is answered from that answer.
    async fn read(&self, what: &str, url: &str) -> Result<Cached> {
        let kept = lock(&self.reads).get(url).cloned();
        let etag = kept.as_ref().map(|k| k.etag.as_str());
        let fresh = self.call(what, || self.conditional_get(url, etag)).await?;
        match (fresh, kept) {
            (Some((etag, mut answer)), _) => {
                if let Some(etag) = etag {
                    answer.etag = etag;
                    self.keep(url, answer.clone());
                }
                Ok(answer)
            }
            (None, Some(kept)) => Ok(kept),
            // A 304 to a request that named no ETag: GitHub does not send one.
            (None, None) => {
                let detail = "GitHub answered 304 Not Modified to an unconditional request";
                Err(self.names.error(what, detail.into(), Some(304)))
            }
        }
    }

    /// One `GET url`, with `If-None-Match: etag` when there is one: `None` for a `304`, else
    /// the answer and its own `ETag`.
    async fn conditional_get(
        &self,
        url: &str,
        etag: Option<&str>,
    ) -> octocrab::Result<Option<(Option<String>, Cached)>> {
        let mut headers = http::HeaderMap::new();
        if let Some(value) = etag.and_then(|e| http::HeaderValue::from_str(e).ok()) {
            headers.insert(http::header::IF_NONE_MATCH, value);
        }
        let response = self.octo._get_with_headers(url, Some(headers)).await?;
        if response.status() == http::StatusCode::NOT_MODIFIED {
            return Ok(None);
        }
        let response = octocrab::map_github_error(response).await?;
        let header = |name: http::header::HeaderName| {
            let value = response.headers().get(name).and_then(|v| v.to_str().ok());
            value.map(str::to_string)
        };
        let etag = header(http::header::ETAG);
        let next = header(http::header::LINK).and_then(|l| next_link(&l));
        let body = self.octo.body_to_string(response).await?;
        let etag_later = String::new();
        Ok(Some((
            etag,
            Cached {
                etag: etag_later,
                body,
                next,
            },
        )))
    }

    /// Keeps `answer` for the next conditional read of `url`, within [`MAX_CACHED_READS`]
    /// answers and [`MAX_CACHED_BYTES`].
    fn keep(&self, url: &str, answer: Cached) {
        let mut reads = lock(&self.reads);
        let kept: usize = reads.values().map(|c| c.body.len()).sum();
        if reads.len() >= MAX_CACHED_READS || kept + answer.body.len() > MAX_CACHED_BYTES {
            reads.clear();
        }
        reads.insert(url.to_string(), answer);
    }

    fn unexpected(&self, what: &str, e: serde_json::Error) -> ForgeError {
        let detail = format!("unexpected answer: {}", bounded::json_problem(&e));
        self.names.error(what, detail, None)
    }

    /// Runs one call through [`retrying`]: a rate limit GitHub gives a time for is waited out
    /// within bounds; any other failure is named in tagpin's words ([`describe`]).
    async fn call<T, F, Fut>(&self, what: &str, mut request: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = octocrab::Result<T>>,
    {
        retrying(&self.names, what, || {
            let attempt = request();
            async move {
                let error = match attempt.await {
                    Ok(value) => return Ok(value),
                    Err(e) => e,
                };
                if let Some(wait) = rate_limit_wait(&error, SystemTime::now()) {
                    return Err(Refused::RateLimited(wait));
                }
                let status = match &error {
                    octocrab::Error::GitHub { source, .. } => Some(source.status_code.as_u16()),
                    _ => None,
                };
                let detail = describe(&error, &self.names.repo);
                Err(Refused::Failed(self.names.error(what, detail, status)))
            }
        })
        .await
    }

    fn info(&self, pr: octocrab::models::pulls::PullRequest) -> PullRequestInfo {
        // By id, which a rename does not change; a deleted fork has no head repository.
        let same_repository = match (&pr.head.repo, &pr.base.repo) {
            (Some(head), Some(base)) => head.id == base.id,
            _ => false,
        };
        PullRequestInfo {
            updated_at: pr.updated_at.map(|t| t.timestamp()),
            author: pr
                .user
                .as_ref()
                .map(|u| u.login.clone())
                .unwrap_or_default(),
            same_repository,
            ..info(pr)
        }
    }
}

impl Forge for GitHub {
    fn dialect(&self) -> &Dialect {
        &self.dialect
    }

    /// `GET /user`. A token that may not read its user (a GitHub App installation token)
    /// fails here, naming the call.
    async fn ask_login(&self) -> Result<String> {
        let what = "read the token's user (GET /user)";
        let current = || async { self.octo.current().user().await };
        let user = self.call(what, current).await?;
        Ok(user.login)
    }

    /// GitHub's `head=owner:branch` leaves out forks' branches of the same name; what it
    /// returns is checked again, so a fork's pull request is never adopted. The recently
    /// closed are read most recently changed first, so the pages stop where the window does.
    async fn list(&self, what: &str, listing: Listing<'_>) -> Result<Vec<PullRequestInfo>> {
        match listing {
            Listing::From { branch, base } | Listing::OpenFrom { branch, base } => {
                let state = match listing {
                    Listing::From { .. } => "all",
                    _ => "open",
                };
                let head = format!("{}:{branch}", self.owner);
                let query = [("state", state), ("head", &head), ("base", base)];
                self.list_pulls(what, &query, None).await
            }
            Listing::OpenInto { base, .. } => {
                self.list_pulls(what, &[("state", "open"), ("base", base)], None)
                    .await
            }
            Listing::ClosedInto { base, since, .. } => {
                let closed = [("state", "closed"), ("base", base), ("sort", "updated")];
                let query = [closed[0], closed[1], closed[2], ("direction", "desc")];
                self.list_pulls(what, &query, Some(since)).await
            }
        }
    }

    async fn create(&self, what: &str, new: NewChange<'_>) -> Result<PullRequestInfo> {
        let pr = self
            .call(what, || async move {
                let pulls = self.octo.pulls(&self.owner, &self.repo);
                let create = pulls.create(new.title, new.branch, new.base);
                create.body(new.body).send().await
            })
            .await?;
        Ok(self.info(pr))
    }

    async fn update_pull_request(&self, number: u64, title: &str, body: &str) -> Result<()> {
        let what = format!("update pull request #{number}");
        self.call(&what, || async move {
            let pulls = self.octo.pulls(&self.owner, &self.repo);
            pulls.update(number).title(title).body(body).send().await
        })
        .await?;
        Ok(())
    }

    async fn add_labels(&self, number: u64, labels: &[String]) -> Result<()> {
        let what = format!("add labels to pull request #{number}");
        let issues = || self.octo.issues(&self.owner, &self.repo);
        self.call(&what, || async move {
            issues().add_labels(number, labels).await
        })
        .await?;
        Ok(())
    }

    async fn pull_request(&self, number: u64) -> Result<PullRequestInfo> {
        let what = format!("read pull request #{number}");
        let url = format!("/repos/{}/{}/pulls/{number}", self.owner, self.repo);
        let answer = self.read(&what, &url).await?;
        let pr = serde_json::from_str(&answer.body).map_err(|e| self.unexpected(&what, e))?;
        Ok(self.info(pr))
    }

    /// As GitHub lists them, the newest 100 of every context: a page with a next one may have
    /// pushed tagpin's own past it, and the history says it is not whole.
    async fn statuses(&self, key: StatusKey<'_>) -> Result<StatusHistory> {
        let (sha, context) = (key.sha, key.context);
        let what = format!("read statuses of {sha}");
        let url = format!(
            "/repos/{}/{}/commits/{sha}/statuses?per_page=100",
            self.owner, self.repo
        );
        let (items, next) = self
            .read_list::<octocrab::models::Status>(&what, &url)
            .await?;
        let statuses = items
            .iter()
            .filter(|s| s.context.as_deref() == Some(context))
            .filter_map(status)
            .collect();
        Ok(StatusHistory {
            statuses,
            complete: next.is_none(),
        })
    }

    async fn set_status(&self, key: StatusKey<'_>, said: Said<'_>) -> Result<()> {
        let (sha, context) = (key.sha, key.context);
        let what = format!("set status {context} on {sha}");
        let wire = match said.state {
            StatusState::Pending => octocrab::models::StatusState::Pending,
            StatusState::Success => octocrab::models::StatusState::Success,
            StatusState::Failure => octocrab::models::StatusState::Failure,
            StatusState::Error => octocrab::models::StatusState::Error,
        };
        self.call(&what, || async move {
            let repos = self.octo.repos(&self.owner, &self.repo);
            let status = repos.create_status(sha.to_string(), wire);
            let status = status.context(context.to_string());
            status
                .description(said.description.to_string())
                .send()
                .await
        })
        .await?;
        Ok(())
    }

    /// Found by the marker among comments by anyone, on every page.
    async fn marked_comment(&self, number: u64, marker: &str) -> Result<Option<Marked>> {
        let what = format!("list comments of pull request #{number}");
        let first = format!(
            "/repos/{}/{}/issues/{number}/comments?per_page=100",
            self.owner, self.repo
        );
        let marked = |c: &Comment| c.body.as_deref().is_some_and(|b| b.contains(marker));
        let what = what.as_str();
        let read_page = |url: String| async move { self.read_list(what, &url).await };
        let enough = |page: &[Comment]| page.iter().any(marked);
        let comments = read_pages(first, read_page, enough).await?;
        let comment = comments.into_iter().find(|c| marked(c));
        Ok(comment.map(|c| Marked {
            id: c.id.into_inner(),
            text: c.body.unwrap_or_default(),
            ..Marked::default()
        }))
    }

    /// An issue comment of the pull request, through octocrab.
    async fn write_comment(&self, number: u64, old: Option<Marked>, body: &str) -> Result<()> {
        let issues = || self.octo.issues(&self.owner, &self.repo);
        match old {
            Some(Marked { id, .. }) => {
                let what = format!("update comment {id} on pull request #{number}");
                let id = octocrab::models::CommentId(id);
                let update = || async move { issues().update_comment(id, body).await };
                self.call(&what, update).await.map(drop)
            }
            None => {
                let what = format!("comment on pull request #{number}");
                let create = || async move { issues().create_comment(number, body).await };
                self.call(&what, create).await.map(drop)
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// `forge.api_commits`: tagpin's commits made through GitHub's Git Data API (blobs, a tree, a
// commit, then the branch's ref) instead of pushed, so that GitHub signs them. The tree is the
// one tagpin computed in its mirror, byte for byte: GitHub's answer is checked against it
// before the commit is made, and nothing moves when they differ.
//
// A branch moves only as a push would: commit mode by fast-forward (`force: false`, a lost
// race is GitHub's 422 "Update is not a fast forward"); tagpin's own branch replaced only when
// it still holds the commit tagpin saw (read just before: GitHub's ref update has no lease, so
// a push landing between the read and the update is the one race left, and the next pass sees
// it as a hand edit).
// ---------------------------------------------------------------------------------------------

/// One file of an [`ApiCommit`]: its path in the repository, its new bytes, its mode.
pub struct ApiFile<'a> {
    pub path: &'a str,
    pub bytes: &'a [u8],
    pub executable: bool,
}

/// A commit to make through the Git Data API, as tagpin's mirror computed it.
pub struct ApiCommit<'a> {
    pub parent: String,
    /// The parent's tree, which GitHub's new tree is built on.
    pub base_tree: String,
    /// The tree the commit must have (tagpin's): GitHub's must be the same object.
    pub tree: String,
    pub files: &'a [ApiFile<'a>],
    pub message: &'a str,
}

/// How a branch is moved to a commit made through the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RefMove<'a> {
    /// Commit mode: a fast-forward of the target branch, which exists.
    FastForward,
    /// tagpin's own branch: created when `None`, else replaced if it still holds that commit.
    Lease(Option<&'a str>),
}

/// What moving a branch came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moved {
    Done,
    /// The branch moved since it was read (a lost race): plan again.
    Raced,
}

#[derive(Deserialize)]
struct Sha {
    sha: String,
}

#[derive(Deserialize)]
struct Ref {
    object: Sha,
}

impl GitHub {
    fn git_path(&self, rest: &str) -> String {
        format!("/repos/{}/{}/git/{rest}", self.owner, self.repo)
    }

    async fn post_json<T: serde::de::DeserializeOwned>(
        &self,
        what: &str,
        path: &str,
        body: &serde_json::Value,
    ) -> Result<T> {
        self.call(
            what,
            || async move { self.octo.post(path, Some(body)).await },
        )
        .await
    }

    /// Makes the commit: a blob per file, the tree on the parent's, checked against tagpin's,
    /// then the commit, with no author given so GitHub signs it for the token's app or user.
    /// Returns the new commit's id; no branch has moved yet.
    pub async fn create_commit(&self, commit: &ApiCommit<'_>) -> Result<String> {
        let mut entries = Vec::new();
        for file in commit.files {
            let content = base64::engine::general_purpose::STANDARD.encode(file.bytes);
            let body = json!({"content": content, "encoding": "base64"});
            let what = format!("upload {} (POST /git/blobs)", file.path);
            let blob: Sha = self
                .post_json(&what, &self.git_path("blobs"), &body)
                .await?;
            let mode = if file.executable { "100755" } else { "100644" };
            entries.push(json!({"path": file.path, "mode": mode, "type": "blob", "sha": blob.sha}));
        }
        let body = json!({"base_tree": commit.base_tree, "tree": entries});
        let what = "make the tree (POST /git/trees)";
        let tree: Sha = self.post_json(what, &self.git_path("trees"), &body).await?;
        if tree.sha != commit.tree {
            let detail = format!(
                "GitHub built tree {}, not the tree tagpin computed ({}); no commit was made",
                tree.sha, commit.tree
            );
            return Err(self.names.error(what, detail, None));
        }
        let body =
            json!({"message": commit.message, "tree": commit.tree, "parents": [commit.parent]});
        let what = "make the commit (POST /git/commits)";
        let made: Sha = self
            .post_json(what, &self.git_path("commits"), &body)
            .await?;
        Ok(made.sha)
    }

    /// Moves `branch` to `sha` as `how` says.
    pub(crate) async fn move_branch(
        &self,
        branch: &str,
        sha: &str,
        how: RefMove<'_>,
    ) -> Result<Moved> {
        let path = self.git_path(&format!("refs/heads/{branch}"));
        match how {
            RefMove::FastForward => {
                let body = json!({"sha": sha, "force": false});
                let what = format!("fast-forward {branch} (PATCH /git/refs)");
                self.patch_ref(&what, &path, &body).await
            }
            RefMove::Lease(None) => {
                let body = json!({"ref": format!("refs/heads/{branch}"), "sha": sha});
                let what = format!("create {branch} (POST /git/refs)");
                match self
                    .post_json::<Ref>(&what, &self.git_path("refs"), &body)
                    .await
                {
                    Ok(_) => Ok(Moved::Done),
                    Err(e) if said(&e, REF_EXISTS) => Ok(Moved::Raced),
                    Err(e) => Err(e),
                }
            }
            RefMove::Lease(Some(expected)) => {
                let what = format!("read {branch} (GET /git/ref)");
                let read = self.git_path(&format!("ref/heads/{branch}"));
                let now = self
                    .call(&what, || async {
                        self.octo.get::<Ref, _, ()>(&read, None::<&()>).await
                    })
                    .await;
                match now {
                    Ok(current) if current.object.sha == expected => {}
                    Ok(_) => return Ok(Moved::Raced),
                    Err(e) if e.status() == Some(404) => return Ok(Moved::Raced),
                    Err(e) => return Err(e),
                }
                let body = json!({"sha": sha, "force": true});
                let what = format!("move {branch} (PATCH /git/refs)");
                self.patch_ref(&what, &path, &body).await
            }
        }
    }

    async fn patch_ref(&self, what: &str, path: &str, body: &serde_json::Value) -> Result<Moved> {
        let patched = self
            .call(what, || async move {
                self.octo.patch::<Ref, _, _>(path, Some(body)).await
            })
            .await;
        match patched {
            Ok(_) => Ok(Moved::Done),
            Err(e) if said(&e, REF_NOT_FAST_FORWARD) => Ok(Moved::Raced),
            Err(e) => Err(e),
        }
    }
}

/// Whether GitHub refused with a 422 that [`describe`] put in `words` (its messages for
/// a ref update that is not a fast-forward, a ref that already exists).
fn said(error: &ForgeError, words: &str) -> bool {
    error.status() == Some(422) && error.to_string().contains(words)
}

/// A status as tagpin reads it, with who set it and when; a state tagpin does not post is
/// none of its verdicts.
fn status(s: &octocrab::models::Status) -> Option<Status> {
    let state = match s.state {
        octocrab::models::StatusState::Success => StatusState::Success,
        octocrab::models::StatusState::Failure => StatusState::Failure,
        octocrab::models::StatusState::Error => StatusState::Error,
        octocrab::models::StatusState::Pending => StatusState::Pending,
        _ => return None,
    };
    Some(Status {
        state,
        description: s.description.clone().unwrap_or_default(),
        created_at: s.created_at.map(|t| t.timestamp()),
        creator: s.creator.as_ref().map(|c| c.login.clone()),
    })
}

fn info(pr: octocrab::models::pulls::PullRequest) -> PullRequestInfo {
    PullRequestInfo {
        number: pr.number,
        open: matches!(pr.state, Some(octocrab::models::IssueState::Open)),
        merged: pr.merged_at.is_some() || pr.merged == Some(true),
        title: pr.title.unwrap_or_default(),
        body: pr.body.unwrap_or_default(),
        labels: label_names(pr.labels, |l| l.name),
        url: pr.html_url.map(|u| u.to_string()).unwrap_or_default(),
        head_ref: pr.head.ref_field,
        head_sha: pr.head.sha,
        merge_commit_sha: pr.merge_commit_sha,
        merged_at: pr.merged_at.map(|t| t.timestamp()),
        updated_at: None,
        author: String::new(),
        same_repository: false,
    }
}

/// How long GitHub asks to wait, if the error is a rate limit: `retry-after` seconds, or the
/// `x-ratelimit-reset` epoch when `x-ratelimit-remaining` is 0.
fn rate_limit_wait(error: &octocrab::Error, now: SystemTime) -> Option<Duration> {
    let octocrab::Error::GitHub { source, .. } = error else {
        return None;
    };
    let status = source.status_code.as_u16();
    if status != 403 && status != 429 {
        return None;
    }
    let headers = source.headers.as_ref();
    let header = |name: &str| {
        headers
            .and_then(|h| h.get(name))
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .map(str::to_string)
    };
    if let Some(secs) = header("retry-after").and_then(|v| v.parse::<u64>().ok()) {
        return Some(Duration::from_secs(secs));
    }
    let exhausted = header("x-ratelimit-remaining").as_deref() == Some("0");
    let reset = source
        .rate_limit_reset
        .or_else(|| header("x-ratelimit-reset").and_then(|v| v.parse().ok()));
    match (exhausted || status == 429, reset) {
        (true, Some(reset)) => {
            let now = now
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0);
            Some(Duration::from_secs(
                reset.saturating_sub(now).saturating_add(1),
            ))
        }
        (true, None) => Some(Duration::from_secs(60)),
        _ => None,
    }
}

/// What failed, in tagpin's words: the HTTP status and what it means here, or how the
/// exchange failed. GitHub's own message and error list are read only to recognise a known
/// case, never quoted: a server posing as GitHub could otherwise have any text of its answer
/// copied into a status, an Event or a log. octocrab's messages also carry backtraces.
fn describe(error: &octocrab::Error, repo: &str) -> String {
    if let Some(exceeded) = bounded::exceeded_in(error) {
        return exceeded.to_string();
    }
    match error {
        octocrab::Error::GitHub { source, .. } => {
            let status = source.status_code.as_u16();
            let texts = std::iter::once(source.message.as_str()).chain(
                source
                    .errors
                    .iter()
                    .flatten()
                    .filter_map(|e| e.get("message").and_then(|m| m.as_str())),
            );
            let codes: Vec<&str> = source
                .errors
                .iter()
                .flatten()
                .filter_map(|e| e.get("code").and_then(|c| c.as_str()))
                .collect();
            let meaning = github_meaning(status, texts, &codes, repo);
            match meaning {
                Some(meaning) => format!("{} ({meaning})", status_text(status)),
                None => status_text(status),
            }
        }
        octocrab::Error::Hyper { source, .. } => format!("connection failed: {source}"),
        octocrab::Error::Service { source, .. } => {
            format!("connection failed: {}", transport_text(source.as_ref()))
        }
        octocrab::Error::Serde { source, .. } => {
            format!("unexpected answer: {}", bounded::json_problem(source))
        }
        octocrab::Error::Json { source, .. } => {
            format!(
                "unexpected answer: {}",
                bounded::json_problem(source.inner())
            )
        }
        other => {
            let text = other.to_string();
            text.split("\n\nFound at")
                .next()
                .unwrap_or(&text)
                .to_string()
        }
    }
}

/// What a GitHub failure means for tagpin, in its own words, from the status and GitHub's
/// documented error codes (`already_exists`, `missing_field`, …); `texts` (GitHub's messages)
/// are only matched against the one case the codes do not tell apart.
fn github_meaning<'t>(
    status: u16,
    mut texts: impl Iterator<Item = &'t str>,
    codes: &[&str],
    repo: &str,
) -> Option<String> {
    // Only GitHub's messages tell these apart (the ref updates carry no error codes).
    for text in texts.by_ref() {
        if text.starts_with("A pull request already exists") {
            return Some("a pull request for this branch already exists".into());
        }
        if text.starts_with("Update is not a fast forward") {
            return Some(REF_NOT_FAST_FORWARD.into());
        }
        if text.starts_with("Reference already exists") {
            return Some(REF_EXISTS.into());
        }
    }
    match status {
        401 => Some("the token is not valid (expired, revoked, or not a GitHub token)".into()),
        403 => Some(format!("the token may not do this in {repo}")),
        404 => Some(format!(
            "{repo} is not there, or the token may not read it (GitHub answers 404 for repositories hidden from the token)"
        )),
        422 => {
            let mut words: Vec<&str> = codes
                .iter()
                .filter_map(|code| match *code {
                    "already_exists" => Some("something it would create already exists"),
                    "missing" => Some("something it names does not exist"),
                    "missing_field" => Some("a required field is missing"),
                    "invalid" => Some("a field is invalid"),
                    "unprocessable" => Some("a field could not be processed"),
                    _ => None,
                })
                .collect();
            words.dedup();
            (!words.is_empty()).then(|| words.join("; "))
        }
        _ => None,
    }
}

/// A transport failure's causes, joined; an [`bounded::Exceeded`] is found before this.
fn transport_text(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut next = error.source();
    while let Some(cause) = next {
        let more = cause.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        next = cause.source();
    }
    text
}

/// octocrab over the HTTP service its default builder would make (hyper, rustls with the
/// system's roots, HTTP/1), with every exchange bounded by [`MAX_ANSWER_BYTES`] and
/// `deadline`. The token goes as `Authorization: Bearer`, marked sensitive, on requests to
/// `api_url` only (octocrab's own rule). No retry layer: octocrab would retry a 5xx POST at
/// once, which can open a pull request twice; tagpin retries rate limits itself and
/// reconciles everything else on the next pass.
fn client(api_url: &str, token: &str, deadline: Duration) -> Result<Octocrab, ForgeError> {
    use octocrab::service::middleware::{
        auth_header::AuthHeaderLayer, base_uri::BaseUriLayer, extra_headers::ExtraHeadersLayer,
    };
    let base: http::Uri = api_url
        .parse()
        .map_err(|e| setup(format!("api_url {api_url:?}: {e}")))?;
    let provider = rustls::crypto::CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()));
    let mut tcp = hyper_util::client::legacy::connect::HttpConnector::new();
    tcp.set_connect_timeout(Some(CONNECT_TIMEOUT));
    tcp.enforce_http(false);
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_native_roots(provider)
        .map_err(|e| setup(format!("TLS roots: {e}")))?
        .https_or_http()
        .enable_http1()
        .wrap_connector(tcp);
    let http = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build::<_, octocrab::OctoBody>(connector);
    let mut authorization = http::HeaderValue::from_str(&format!("Bearer {}", token.trim()))
        .map_err(|_| setup("the token holds characters an HTTP header cannot carry".into()))?;
    authorization.set_sensitive(true);
    let headers = vec![(
        http::header::USER_AGENT,
        http::HeaderValue::from_static(concat!("tagpin/", env!("CARGO_PKG_VERSION"))),
    )];
    let bounds = Bounds {
        max_bytes: MAX_ANSWER_BYTES,
        deadline: Some(deadline),
    };
    octocrab::OctocrabBuilder::new_empty()
        .with_service(http)
        .with_layer(&BoundedLayer(bounds))
        .with_layer(&ExtraHeadersLayer::new(Arc::new(headers)))
        .with_layer(&BaseUriLayer::new(base.clone()))
        .with_layer(&AuthHeaderLayer::new(
            Some(authorization),
            base.clone(),
            base,
        ))
        .with_auth(octocrab::AuthState::None)
        .build()
        .map_err(|e| match e {})
}

fn setup(detail: String) -> ForgeError {
    Names::setup(FORGE, detail)
}
