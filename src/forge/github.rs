//! The GitHub adapter: GitHub and GitHub Enterprise through octocrab.
//!
//! Only what tagpin needs: find the pull requests of a tagpin branch, open or update one, add
//! labels. Calls are made one at a time (GitHub asks integrators to serialize mutating
//! requests), and a rate-limit answer (`429`, or `403` with `x-ratelimit-remaining: 0`) is
//! waited out when GitHub says when to come back within [`MAX_RATE_LIMIT_WAIT`], and reported
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
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use std::sync::Arc;

use octocrab::Octocrab;
use serde::de::DeserializeOwned;

use super::common::{host_of, status_text, CONNECT_TIMEOUT, MAX_ANSWER_BYTES, MAX_RATE_LIMIT_WAIT};
use super::common::{in_flight, next_link, read_pages, updated_before, ForgeError};
use crate::bounded::{self, BoundedLayer, Bounds};
use crate::config;
use crate::mutex::lock;
use crate::review::{PullRequestInfo, Status, StatusHistory, StatusState};

/// Attempts per call when GitHub answers with a rate limit.
const RATE_LIMIT_ATTEMPTS: u32 = 3;
/// Answers kept for conditional reads (one per URL: a list page, a pull request, the statuses
/// of a commit). When full, all are dropped: the next reads are plain ones, nothing is wrong.
const MAX_CACHED_READS: usize = 512;
/// The bytes of the answers kept for conditional reads, at most: 512 answers of up to
/// [`MAX_ANSWER_BYTES`] each would be 8 GiB. Past it, all are dropped, as when full.
const MAX_CACHED_BYTES: usize = 64 * bounded::MIB;
const FORGE: &str = "GitHub";

/// A GitHub repository, with a token.
pub struct GitHub {
    octo: Octocrab,
    /// `host[:port]` of `api_url`, for errors.
    host: String,
    owner: String,
    repo: String,
    /// The token's login, asked once.
    login: tokio::sync::OnceCell<String>,
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
    pub fn new(forge: &config::Forge, token: String) -> Result<GitHub, ForgeError> {
        let config::ForgeKind::GitHub { owner, repo } = &forge.kind else {
            return Err(setup("the forge configured is not GitHub".into()));
        };
        let deadline = Duration::from_secs(forge.timeout_seconds);
        let octo = client(&forge.api_url, &token, deadline)?;
        Ok(GitHub {
            octo,
            host: host_of(&forge.api_url),
            owner: owner.clone(),
            repo: repo.clone(),
            // A configured login is taken as is: GitHub App installation tokens cannot read
            // `GET /user`.
            login: tokio::sync::OnceCell::new_with(forge.login.clone()),
            reads: Mutex::default(),
        })
    }

    /// The login the token belongs to (`GET /user`), asked once per process. A token that may
    /// not read its user (a GitHub App installation token) fails here, naming the call.
    pub async fn login(&self) -> Result<&str, ForgeError> {
        self.login
            .get_or_try_init(|| async {
                let user = self
                    .call("read the token's user (GET /user)", || async {
                        self.octo.current().user().await
                    })
                    .await?;
                Ok::<_, ForgeError>(user.login)
            })
            .await
            .map(String::as_str)
    }

    fn full_name(&self) -> String {
        format!("{}/{}", self.owner, self.repo)
    }

    /// Every pull request (open, closed, merged) from `branch` of this repository into
    /// `base`, newest first. GitHub's `head=owner:branch` leaves out forks' branches of the
    /// same name; what it returns is checked again, so a fork's pull request is never adopted.
    pub async fn pull_requests_for(
        &self,
        branch: &str,
        base: &str,
    ) -> Result<Vec<PullRequestInfo>, ForgeError> {
        let head = format!("{}:{branch}", self.owner);
        let mut prs = self
            .list_pulls(
                &format!("list pull requests from {branch}"),
                &[("state", "all"), ("head", &head), ("base", base)],
                None,
            )
            .await?;
        prs.retain(|p| p.same_repository);
        Ok(prs)
    }

    /// What is in flight into `base` on branches starting with `prefix` (tagpin's own), newest
    /// first: every open pull request, and those closed at or after `closed_since` (Unix
    /// seconds). Forks' pull requests are included, marked by `same_repository`: the caller
    /// says why it leaves them alone.
    pub async fn pull_requests_with_prefix(
        &self,
        prefix: &str,
        base: &str,
        closed_since: i64,
    ) -> Result<Vec<PullRequestInfo>, ForgeError> {
        let what = format!("list pull requests into {base}");
        let open = self
            .list_pulls(&what, &[("state", "open"), ("base", base)], None)
            .await?;
        // Most recently changed first, so the pages stop where the window does.
        let closed = [
            ("state", "closed"),
            ("base", base),
            ("sort", "updated"),
            ("direction", "desc"),
        ];
        let closed = self.list_pulls(&what, &closed, Some(closed_since)).await?;
        Ok(in_flight(open, closed, prefix))
    }

    /// Every page of a pull request list, 100 at a time; with `until`, pages stop after the
    /// first one that reaches a pull request updated before it (the list is by update time).
    async fn list_pulls(
        &self,
        what: &str,
        query: &[(&str, &str)],
        until: Option<i64>,
    ) -> Result<Vec<PullRequestInfo>, ForgeError> {
        let mut query: Vec<(&str, &str)> = query.to_vec();
        query.push(("per_page", "100"));
        let first = format!(
            "/repos/{}/{}/pulls?{}",
            self.owner,
            self.repo,
            url::form_urlencoded::Serializer::new(String::new())
                .extend_pairs(&query)
                .finish()
        );
        let read_page = |url: String| async move {
            let (items, link) = self
                .read_list::<octocrab::models::pulls::PullRequest>(what, &url)
                .await?;
            Ok((items.into_iter().map(|p| self.info(p)).collect(), link))
        };
        read_pages(first, read_page, updated_before(until)).await
    }

    /// One page of a list, read conditionally, with the address of the next page.
    async fn read_list<T: DeserializeOwned>(
        &self,
        what: &str,
        url: &str,
    ) -> Result<(Vec<T>, Option<String>), ForgeError> {
        let cached = self.read(what, url).await?;
        let items = serde_json::from_str(&cached.body).map_err(|e| self.unexpected(what, e))?;
        Ok((items, cached.next))
    }

    /// `GET url` with the `ETag` of the last answer: a `304` is answered from that answer.
    async fn read(&self, what: &str, url: &str) -> Result<Cached, ForgeError> {
        let kept = lock(&self.reads).get(url).cloned();
        let fresh = self
            .call(what, || {
                let etag = kept.as_ref().map(|k| k.etag.clone());
                async move {
                    let mut headers = http::HeaderMap::new();
                    if let Some(value) = etag.and_then(|e| http::HeaderValue::from_str(&e).ok()) {
                        headers.insert(http::header::IF_NONE_MATCH, value);
                    }
                    let response = self.octo._get_with_headers(url, Some(headers)).await?;
                    if response.status() == http::StatusCode::NOT_MODIFIED {
                        return Ok(None);
                    }
                    let response = octocrab::map_github_error(response).await?;
                    let header = |name: http::header::HeaderName| {
                        response
                            .headers()
                            .get(name)
                            .and_then(|v| v.to_str().ok())
                            .map(str::to_string)
                    };
                    let etag = header(http::header::ETAG);
                    let next = header(http::header::LINK).and_then(|l| next_link(&l));
                    let body = self.octo.body_to_string(response).await?;
                    Ok(Some((
                        etag,
                        Cached {
                            etag: String::new(),
                            body,
                            next,
                        },
                    )))
                }
            })
            .await?;
        match (fresh, kept) {
            (Some((etag, mut answer)), _) => {
                if let Some(etag) = etag {
                    answer.etag = etag;
                    let mut reads = lock(&self.reads);
                    let kept: usize = reads.values().map(|c| c.body.len()).sum();
                    if reads.len() >= MAX_CACHED_READS
                        || kept + answer.body.len() > MAX_CACHED_BYTES
                    {
                        reads.clear();
                    }
                    reads.insert(url.to_string(), answer.clone());
                }
                Ok(answer)
            }
            (None, Some(kept)) => Ok(kept),
            // A 304 to a request that named no ETag: GitHub does not send one.
            (None, None) => Err(ForgeError::Call {
                forge: FORGE,
                host: self.host.clone(),
                repo: self.full_name(),
                what: what.to_string(),
                detail: "GitHub answered 304 Not Modified to an unconditional request".into(),
                status: Some(304),
            }),
        }
    }

    fn unexpected(&self, what: &str, e: serde_json::Error) -> ForgeError {
        ForgeError::Call {
            forge: FORGE,
            host: self.host.clone(),
            repo: self.full_name(),
            what: what.to_string(),
            detail: format!("unexpected answer: {}", bounded::json_problem(&e)),
            status: None,
        }
    }

    pub async fn open_pull_request(
        &self,
        branch: &str,
        base: &str,
        title: &str,
        body: &str,
    ) -> Result<PullRequestInfo, ForgeError> {
        let what = format!("open a pull request from {branch} into {base}");
        let pr = self
            .call(&what, || async move {
                self.octo
                    .pulls(&self.owner, &self.repo)
                    .create(title, branch, base)
                    .body(body)
                    .send()
                    .await
            })
            .await?;
        Ok(self.info(pr))
    }

    pub async fn update_pull_request(
        &self,
        number: u64,
        title: &str,
        body: &str,
    ) -> Result<(), ForgeError> {
        let what = format!("update pull request #{number}");
        self.call(&what, || async move {
            self.octo
                .pulls(&self.owner, &self.repo)
                .update(number)
                .title(title)
                .body(body)
                .send()
                .await
        })
        .await?;
        Ok(())
    }

    pub async fn add_labels(&self, number: u64, labels: &[String]) -> Result<(), ForgeError> {
        let what = format!("add labels to pull request #{number}");
        self.call(&what, || async move {
            self.octo
                .issues(&self.owner, &self.repo)
                .add_labels(number, labels)
                .await
        })
        .await?;
        Ok(())
    }

    /// Every status `context` on `sha`, newest first (as GitHub lists them; the newest 100),
    /// with who set each and when: the promoter reads its soak clock back from them.
    pub async fn statuses(&self, sha: &str, context: &str) -> Result<StatusHistory, ForgeError> {
        let what = format!("read statuses of {sha}");
        let url = format!(
            "/repos/{}/{}/commits/{sha}/statuses?per_page=100",
            self.owner, self.repo
        );
        // The newest 100 of every context: a page with a next one may have pushed tagpin's
        // own past it, and the history says it is not whole.
        let (items, next) = self
            .read_list::<octocrab::models::Status>(&what, &url)
            .await?;
        let statuses = items
            .iter()
            .filter(|s| s.context.as_deref() == Some(context))
            .filter_map(|s| {
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
            })
            .collect();
        Ok(StatusHistory {
            statuses,
            complete: next.is_none(),
        })
    }

    /// One pull request by number.
    pub async fn pull_request(&self, number: u64) -> Result<PullRequestInfo, ForgeError> {
        let what = format!("read pull request #{number}");
        let url = format!("/repos/{}/{}/pulls/{number}", self.owner, self.repo);
        let answer = self.read(&what, &url).await?;
        let pr = serde_json::from_str(&answer.body).map_err(|e| self.unexpected(&what, e))?;
        Ok(self.info(pr))
    }

    /// Sets the commit status `context` on `sha`. GitHub refuses descriptions over 140
    /// characters; [`crate::verify::judge::verdict::status_description`] stays within that.
    pub async fn set_status(
        &self,
        sha: &str,
        state: StatusState,
        context: &str,
        description: &str,
    ) -> Result<(), ForgeError> {
        let what = format!("set status {context} on {sha}");
        let wire = match state {
            StatusState::Pending => octocrab::models::StatusState::Pending,
            StatusState::Success => octocrab::models::StatusState::Success,
            StatusState::Failure => octocrab::models::StatusState::Failure,
            StatusState::Error => octocrab::models::StatusState::Error,
        };
        self.call(&what, || async move {
            self.octo
                .repos(&self.owner, &self.repo)
                .create_status(sha.to_string(), wire)
                .context(context.to_string())
                .description(description.to_string())
                .send()
                .await
        })
        .await?;
        Ok(())
    }

    /// Keeps one comment per pull request carrying `marker`: edits it when it exists (found by
    /// the marker, among comments by anyone, on every page), creates it otherwise.
    pub async fn upsert_comment(
        &self,
        number: u64,
        marker: &str,
        body: &str,
    ) -> Result<(), ForgeError> {
        let what = format!("list comments of pull request #{number}");
        let first = format!(
            "/repos/{}/{}/issues/{number}/comments?per_page=100",
            self.owner, self.repo
        );
        let marked = |c: &octocrab::models::issues::Comment| {
            c.body.as_deref().is_some_and(|b| b.contains(marker))
        };
        let what = what.as_str();
        let read_page = |url: String| async move { self.read_list(what, &url).await };
        let comments = read_pages(
            first,
            read_page,
            |page: &[octocrab::models::issues::Comment]| page.iter().any(marked),
        )
        .await?;
        let existing = comments
            .iter()
            .find(|c| marked(c))
            .map(|c| (c.id, c.body.as_deref() == Some(body)));
        match existing {
            // Already says exactly this: editing it again would only spend rate limit.
            Some((_, true)) => Ok(()),
            Some((id, false)) => {
                let what = format!("update comment {id} on pull request #{number}");
                self.call(&what, || async move {
                    self.octo
                        .issues(&self.owner, &self.repo)
                        .update_comment(id, body)
                        .await
                })
                .await?;
                Ok(())
            }
            None => {
                let what = format!("comment on pull request #{number}");
                self.call(&what, || async move {
                    self.octo
                        .issues(&self.owner, &self.repo)
                        .create_comment(number, body)
                        .await
                })
                .await?;
                Ok(())
            }
        }
    }

    /// Runs one call, waiting out rate limits GitHub gives a time for, within bounds.
    async fn call<T, F, Fut>(&self, what: &str, mut request: F) -> Result<T, ForgeError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = octocrab::Result<T>>,
    {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let error = match request().await {
                Ok(value) => return Ok(value),
                Err(e) => e,
            };
            match rate_limit_wait(&error, SystemTime::now()) {
                Some(wait) if wait <= MAX_RATE_LIMIT_WAIT && attempt < RATE_LIMIT_ATTEMPTS => {
                    tracing::warn!(repo = %self.full_name(), "{what}: rate limited, waiting {wait:?}");
                    tokio::time::sleep(wait).await;
                }
                Some(wait) => {
                    return Err(ForgeError::RateLimited {
                        forge: FORGE,
                        host: self.host.clone(),
                        repo: self.full_name(),
                        what: what.to_string(),
                        wait: format!("{}s", wait.as_secs()),
                    })
                }
                None => {
                    let status = match &error {
                        octocrab::Error::GitHub { source, .. } => Some(source.status_code.as_u16()),
                        _ => None,
                    };
                    return Err(ForgeError::Call {
                        forge: FORGE,
                        host: self.host.clone(),
                        repo: self.full_name(),
                        what: what.to_string(),
                        detail: describe(&error, &self.full_name()),
                        status,
                    });
                }
            }
        }
    }
}

impl GitHub {
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

fn info(pr: octocrab::models::pulls::PullRequest) -> PullRequestInfo {
    PullRequestInfo {
        number: pr.number,
        open: matches!(pr.state, Some(octocrab::models::IssueState::Open)),
        merged: pr.merged_at.is_some() || pr.merged == Some(true),
        title: pr.title.unwrap_or_default(),
        body: pr.body.unwrap_or_default(),
        labels: pr
            .labels
            .unwrap_or_default()
            .into_iter()
            .map(|l| l.name)
            .collect(),
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
    if texts.any(|t| t.starts_with("A pull request already exists")) {
        return Some("a pull request for this branch already exists".into());
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
    ForgeError::Setup {
        forge: FORGE,
        detail,
    }
}
