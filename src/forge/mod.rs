//! The forge adapter: GitHub and GitHub Enterprise through octocrab.
//!
//! Only what tagpin needs: find the pull requests of a tagpin branch, open or update one, add
//! labels. Calls are made one at a time (GitHub asks integrators to serialize mutating
//! requests), and a rate-limit answer (`429`, or `403` with `x-ratelimit-remaining: 0`) is
//! waited out when GitHub says when to come back within [`MAX_RATE_LIMIT_WAIT`], and reported
//! otherwise. The token is held by octocrab as a secret string and never printed.

pub mod body;

use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use octocrab::Octocrab;

use crate::config;

/// The longest tagpin waits for a rate limit to lift before failing the call.
pub const MAX_RATE_LIMIT_WAIT: Duration = Duration::from_secs(60);
/// Attempts per call when GitHub answers with a rate limit.
const RATE_LIMIT_ATTEMPTS: u32 = 3;

/// A failed forge call, naming the repository and, where there is one, the pull request.
#[derive(Debug, thiserror::Error)]
pub enum ForgeError {
    #[error("GitHub {repo}: {what}: {detail}")]
    Call {
        repo: String,
        what: String,
        detail: String,
        /// The HTTP status GitHub answered, when it answered.
        status: Option<u16>,
    },
    #[error("GitHub {repo}: {what}: rate limited; GitHub asks to wait {wait}")]
    RateLimited {
        repo: String,
        what: String,
        wait: String,
    },
    #[error("GitHub setup: {0}")]
    Setup(String),
}

/// The commit states tagpin sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusState {
    Pending,
    Success,
    Failure,
    /// The check could not be made (GitHub's `error`): tagpin says so rather than guess.
    Error,
}

/// One commit status as tagpin reads it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub state: StatusState,
    pub description: String,
    /// Unix time it was set, when the forge says.
    pub created_at: Option<i64>,
}

/// What tagpin reads of a pull request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullRequestInfo {
    pub number: u64,
    pub open: bool,
    pub merged: bool,
    pub title: String,
    pub body: String,
    pub labels: Vec<String>,
    pub url: String,
    pub head_ref: String,
    pub head_sha: String,
    pub merge_commit_sha: Option<String>,
    /// Unix time of the merge, for "recently merged".
    pub merged_at: Option<i64>,
}

/// A GitHub repository, with a token.
pub struct GitHub {
    octo: Octocrab,
    owner: String,
    repo: String,
}

impl ForgeError {
    /// GitHub refused a request as invalid (422): for a new pull request, usually one that
    /// already exists for the branch.
    pub fn is_unprocessable(&self) -> bool {
        matches!(
            self,
            ForgeError::Call {
                status: Some(422),
                ..
            }
        )
    }
}

impl GitHub {
    /// `api_url` is `https://api.github.com`, or `https://HOST/api/v3` for GitHub Enterprise.
    pub fn new(forge: &config::Forge, token: String) -> Result<GitHub, ForgeError> {
        let octo = Octocrab::builder()
            .base_uri(forge.api_url.as_str())
            .map_err(|e| {
                ForgeError::Setup(format!("api_url {:?}: {}", forge.api_url, describe(&e)))
            })?
            .personal_token(token)
            // octocrab would retry a 5xx POST at once, which can open a pull request twice;
            // tagpin retries rate limits itself and reconciles everything else on the next pass.
            .add_retry_config(octocrab::service::middleware::retry::RetryConfig::None)
            .set_connect_timeout(Some(Duration::from_secs(10)))
            .set_read_timeout(Some(Duration::from_secs(30)))
            .build()
            .map_err(|e| ForgeError::Setup(describe(&e)))?;
        Ok(GitHub {
            octo,
            owner: forge.owner.clone(),
            repo: forge.repo.clone(),
        })
    }

    fn full_name(&self) -> String {
        format!("{}/{}", self.owner, self.repo)
    }

    /// Every pull request (open, closed, merged) from `branch` into `base`, newest first.
    pub async fn pull_requests_for(
        &self,
        branch: &str,
        base: &str,
    ) -> Result<Vec<PullRequestInfo>, ForgeError> {
        let head = format!("{}:{branch}", self.owner);
        self.list_pulls(
            &format!("list pull requests from {branch}"),
            Some(&head),
            base,
        )
        .await
    }

    /// The newest pull requests into `base` whose branch starts with `prefix` (tagpin's own),
    /// open or closed, newest first: what is in flight is read back from here.
    pub async fn pull_requests_with_prefix(
        &self,
        prefix: &str,
        base: &str,
    ) -> Result<Vec<PullRequestInfo>, ForgeError> {
        let mut prs = self
            .list_pulls(&format!("list pull requests into {base}"), None, base)
            .await?;
        prs.retain(|p| p.head_ref.starts_with(prefix));
        Ok(prs)
    }

    /// One page (100) of pull requests into `base`, of every state, newest first.
    async fn list_pulls(
        &self,
        what: &str,
        head: Option<&str>,
        base: &str,
    ) -> Result<Vec<PullRequestInfo>, ForgeError> {
        let page = self
            .call(what, || async move {
                let list = self.octo.pulls(&self.owner, &self.repo);
                let mut request = list
                    .list()
                    .state(octocrab::params::State::All)
                    .base(base)
                    .per_page(100u8);
                if let Some(head) = head {
                    request = request.head(head);
                }
                request.send().await
            })
            .await?;
        let mut prs: Vec<PullRequestInfo> = page.items.into_iter().map(info).collect();
        prs.sort_by_key(|p| std::cmp::Reverse(p.number));
        Ok(prs)
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
        Ok(info(pr))
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

    /// The newest state and description of status `context` on `sha`, if tagpin set one.
    pub async fn status_of(
        &self,
        sha: &str,
        context: &str,
    ) -> Result<Option<(StatusState, String)>, ForgeError> {
        Ok(self
            .statuses(sha, context)
            .await?
            .into_iter()
            .next()
            .map(|s| (s.state, s.description)))
    }

    /// Every status `context` on `sha`, newest first (as GitHub lists them), with when each
    /// was set: the promoter reads its soak clock back from them.
    pub async fn statuses(&self, sha: &str, context: &str) -> Result<Vec<Status>, ForgeError> {
        let what = format!("read statuses of {sha}");
        let page = self
            .call(&what, || async move {
                self.octo
                    .repos(&self.owner, &self.repo)
                    .list_statuses(sha.to_string())
                    .per_page(100)
                    .send()
                    .await
            })
            .await?;
        Ok(page
            .items
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
                })
            })
            .collect())
    }

    /// One pull request by number.
    pub async fn pull_request(&self, number: u64) -> Result<PullRequestInfo, ForgeError> {
        let what = format!("read pull request #{number}");
        let pr = self
            .call(&what, || async move {
                self.octo.pulls(&self.owner, &self.repo).get(number).await
            })
            .await?;
        Ok(info(pr))
    }

    /// Sets the commit status `context` on `sha`. GitHub refuses descriptions over 140
    /// characters; [`crate::verify::verdict::status_description`] stays within that.
    pub async fn set_status(
        &self,
        sha: &str,
        state: StatusState,
        context: &str,
        description: &str,
    ) -> Result<(), ForgeError> {
        let what = format!("set status {context} on {sha}");
        let state = match state {
            StatusState::Pending => octocrab::models::StatusState::Pending,
            StatusState::Success => octocrab::models::StatusState::Success,
            StatusState::Failure => octocrab::models::StatusState::Failure,
            StatusState::Error => octocrab::models::StatusState::Error,
        };
        self.call(&what, || async move {
            self.octo
                .repos(&self.owner, &self.repo)
                .create_status(sha.to_string(), state)
                .context(context.to_string())
                .description(description.to_string())
                .send()
                .await
        })
        .await?;
        Ok(())
    }

    /// Sets the status unless the newest one of its context already says the same (a pass
    /// that changes nothing spends no write). A failure is logged, not returned: a verdict or
    /// promotion stands whether or not its status could be posted.
    pub async fn set_status_once(
        &self,
        sha: &str,
        state: StatusState,
        context: &str,
        description: &str,
    ) {
        let current = self.status_of(sha, context).await.ok().flatten();
        if current.as_ref() == Some(&(state, description.to_string())) {
            return;
        }
        if let Err(e) = self.set_status(sha, state, context, description).await {
            tracing::warn!("cannot set the {context} status on {sha}: {e}");
        }
    }

    /// Keeps one comment per pull request carrying `marker`: edits it when it exists (found by
    /// the marker, among comments by anyone), creates it otherwise. Returns the comment id.
    pub async fn upsert_comment(
        &self,
        number: u64,
        marker: &str,
        body: &str,
    ) -> Result<u64, ForgeError> {
        let what = format!("list comments of pull request #{number}");
        let page = self
            .call(&what, || async move {
                self.octo
                    .issues(&self.owner, &self.repo)
                    .list_comments(number)
                    .per_page(100)
                    .send()
                    .await
            })
            .await?;
        let existing = page
            .items
            .iter()
            .find(|c| c.body.as_deref().is_some_and(|b| b.contains(marker)))
            .map(|c| (c.id, c.body.as_deref() == Some(body)));
        match existing {
            // Already says exactly this: editing it again would only spend rate limit.
            Some((id, true)) => Ok(id.into_inner()),
            Some((id, false)) => {
                let what = format!("update comment {id} on pull request #{number}");
                self.call(&what, || async move {
                    self.octo
                        .issues(&self.owner, &self.repo)
                        .update_comment(id, body)
                        .await
                })
                .await?;
                Ok(id.into_inner())
            }
            None => {
                let what = format!("comment on pull request #{number}");
                let comment = self
                    .call(&what, || async move {
                        self.octo
                            .issues(&self.owner, &self.repo)
                            .create_comment(number, body)
                            .await
                    })
                    .await?;
                Ok(comment.id.into_inner())
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
                        repo: self.full_name(),
                        what: what.to_string(),
                        detail: describe(&error),
                        status,
                    });
                }
            }
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

/// octocrab's messages carry backtraces; tagpin's carry the status and GitHub's own words.
fn describe(error: &octocrab::Error) -> String {
    match error {
        octocrab::Error::GitHub { source, .. } => {
            let mut text = format!("GitHub answered {}: {}", source.status_code, source.message);
            if let Some(errors) = &source.errors {
                let details: Vec<String> = errors
                    .iter()
                    .map(|e| match e.get("message").and_then(|m| m.as_str()) {
                        Some(m) => m.to_string(),
                        None => e.to_string(),
                    })
                    .collect();
                if !details.is_empty() {
                    text.push_str(&format!(" ({})", details.join("; ")));
                }
            }
            text
        }
        octocrab::Error::Hyper { source, .. } => format!("connection failed: {source}"),
        octocrab::Error::Service { source, .. } => format!("connection failed: {source}"),
        octocrab::Error::Serde { source, .. } => format!("unexpected answer: {source}"),
        octocrab::Error::Json { source, .. } => format!("unexpected answer: {source}"),
        other => {
            let text = other.to_string();
            text.split("\n\nFound at")
                .next()
                .unwrap_or(&text)
                .to_string()
        }
    }
}
