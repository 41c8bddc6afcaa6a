//! The Bitbucket Data Center (formerly Bitbucket Server) adapter, through REST `/rest/api/1.0`.
//!
//! A Bitbucket pull request is what a GitHub one is to tagpin: found by its source branch (a
//! tagpin branch of this very repository, never a fork's), opened with the plan block in its
//! description, and read back as open, merged (with its merge commit) or declined by a person.
//! The verdict is a build status on the head and on the merge commit, and one pull request
//! comment, found by its marker among the comments tagpin's own user wrote.
//!
//! Facts are those of Atlassian's Bitbucket Data Center REST reference
//! (developer.atlassian.com/server/bitbucket/rest/, 8.x and 9.x), as shipped in the OpenAPI
//! types of the npm package `@coderabbitai/bitbucket` 1.1.4
//! (`dist/server/openapi/openapi-typescript.d.ts`, generated from Atlassian's OpenAPI
//! description), cross-checked against the routes of the PyPI package `atlassian-python-api`
//! 5.0.5 (`atlassian/bitbucket/__init__.py`).
//!
//! What Bitbucket Data Center does its own way, and what tagpin does about it:
//! - `forge.api_url` is the instance's base URL (`https://bitbucket.example.com`, with its
//!   context path if it has one); tagpin appends `/rest/api/1.0`. Build statuses go through
//!   the repository's builds resource (`/rest/api/1.0/projects/{key}/repos/{slug}/commits/{sha}/builds`,
//!   Data Center 7.14 and later; the older `/rest/build-status/1.0` is deprecated).
//! - Pull requests are listed with `at=refs/heads/<branch>` and `direction=OUTGOING` (from
//!   this repository's branch) or `INCOMING` (into the target), in pages of `{values,
//!   isLastPage, nextPageStart}`. tagpin asks for `start=nextPageStart` on `api_url` itself,
//!   only forward, and at most [`super::common`]'s page bound.
//! - An update (`PUT`) carries the pull request's `version`; a `409` says someone changed it
//!   since it was read: tagpin reads it again and tries once more. The reviewers read are sent
//!   back, so an update never changes them.
//! - Data Center pull requests have no labels: `pull_request.labels` cannot be set there, and
//!   nothing stands in for them on the pull request. tagpin finds its pull requests by their
//!   source branch (`pull_request.branch_prefix`), as on every forge.
//! - A build status has no author: Bitbucket keeps one per commit and key, and anyone who may
//!   read the repository may replace it. tagpin stamps its own: `buildNumber` carries
//!   `<time>-<HMAC>`, the time tagpin said it on Bitbucket's clock (the `Date` of its latest
//!   answer) and an HMAC-SHA256, keyed by the token, of the repository, commit, key, tagpin's
//!   state, the description and that time. A status whose stamp holds and whose `updatedDate`
//!   is that time (within [`super::common::SAID_EARLY`] and [`super::common::SAID_LATE`]) is
//!   tagpin's (its creator is the token's user); any other in tagpin's key (a CI job's, tagpin's
//!   own posted again later, or under a token since rotated) has no known creator, carries no
//!   soak clock and is set over. `FAILED` stands for tagpin's failure and error alike; the
//!   stamp tells which it was. Data Center lets the poster set that time (`lastUpdated`), so a
//!   copy posted again with its old time would pass: the promoter therefore believes a soak
//!   start read back from Data Center only as far back as it saw the stage converge itself
//!   ([`crate::promote::SoakMemory`]; docs/forges.md).
//! - The token's user is the `X-AUSERNAME` header Bitbucket sets on every authenticated answer
//!   (read from `GET` of the repository); a proxy that drops it leaves `forge.login` to say.
//! - Comments are read from the pull request's activities (`COMMENTED`), edited with `PUT`
//!   and the comment's `version` (a `409`: read again, try once more). Only a comment's author
//!   may change its text, so tagpin's is found among those its own user wrote.
//!
//! The token (an HTTP access token: personal, project or repository) goes in
//! `Authorization: Bearer …`, marked sensitive so no debug output shows it. Redirects are not
//! followed, so the token is sent to `api_url`'s host only. Every call has a connect timeout
//! and a total deadline, answer included (`forge.timeout_seconds`), and reads at most
//! [`super::MAX_ANSWER_BYTES`]; a `429` (Data Center's rate limiting) is waited out when it
//! says `Retry-After` within [`super::MAX_RATE_LIMIT_WAIT`], and reported otherwise.
//! Bitbucket's messages are never quoted.

use reqwest::Method;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::engine::{encode, json, read_change_requests, read_pages, Forge};
use super::engine::{BadPageUrl, Dialect, PageAddress, Paged};
use super::engine::{Listing, Marked, NewChange, Rest, Result};
use super::engine::{Said, StatusKey, Words};
use super::settings::ChangeRequestNoun;
use super::settings::{report_foreign, Keys, Kind, Section, Settings};
use super::stamp::StatusSigner;
use crate::review::{PullRequestInfo, Status, StatusHistory, StatusState};

const FORGE: &str = "Bitbucket";
/// `kind: bitbucket-server`: `forge.project` and `forge.repo` ([`project_and_repo`]); every
/// Data Center is its own, so `forge.api_url` (its base URL) has no default.
pub(crate) const SECTION: Section = Section::new("bitbucket-server", None, project_and_repo);
/// What a failed answer means, in Bitbucket's words, saying what to fix: the token (401),
/// its permission (403), the repository or object (404), a conflict (409), a field Bitbucket
/// refused (400). A `429` (Data Center's rate limiting) is waited out as `Retry-After` says,
/// else a minute.
pub(super) const WORDS: Words = Words {
    unauthorized: "the token is not valid (expired, revoked, or not a Bitbucket HTTP access token)",
    forbidden: "the token may not do this in {repo} (an HTTP access token needs the Repository write permission)",
    not_found: "{repo} is not at {api}, or the token may not read it (Bitbucket answers 404 for repositories hidden from the token), or the pull request or comment does not exist",
    conflict: Some("a pull request for these branches is already open, or the pull request or comment changed since tagpin read it"),
    refused: Some((400, "Bitbucket refused a field tagpin sent")),
    ..Words::PLAIN
};
/// Where Data Center serves its REST API under `api_url`.
pub(crate) const REST_API: &str = "/rest/api/1.0";
/// Items asked for per page: Data Center's default is 25; 50 halves the calls and stays well
/// within its page limit (`page.max.*`, 1000 by default).
pub(crate) const PAGE_LIMIT: usize = 50;
/// The header in which Data Center names the user an authenticated request acted as.
const USER_HEADER: &str = "x-ausername";

/// A Bitbucket Data Center repository, with a token.
pub struct BitbucketServer {
    /// Its `api` is the instance's base URL without a trailing slash.
    rest: Rest,
    project: String,
    repo: String,
    /// Signs tagpin's build statuses: keyed by the token, which only tagpin holds. It also
    /// keeps, for the process, the newest status set or believed on each commit and key.
    signer: StatusSigner,
    /// `project` upper-cased, as Bitbucket keys read and as signatures name it.
    project_key: String,
    /// Pull requests, adopted when opened meanwhile; the token's user.
    dialect: Dialect,
}

/// Data Center's paged answer (`values`, `isLastPage`, `nextPageStart`).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Page<T> {
    #[serde(default = "Vec::new")]
    values: Vec<T>,
    #[serde(default = "last_page")]
    is_last_page: bool,
    next_page_start: Option<u64>,
}

fn last_page() -> bool {
    true
}

/// `RestPullRequest`, the fields tagpin reads.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PullRequest {
    id: u64,
    #[serde(default)]
    version: i64,
    #[serde(default)]
    title: String,
    description: Option<String>,
    /// `OPEN`, `MERGED` or `DECLINED`.
    #[serde(default)]
    state: String,
    from_ref: Option<Ref>,
    to_ref: Option<Ref>,
    author: Option<Participant>,
    #[serde(default)]
    reviewers: Vec<Participant>,
    /// Milliseconds.
    updated_date: Option<i64>,
    closed_date: Option<i64>,
    links: Option<Links>,
    properties: Option<Properties>,
}

/// `RestPullRequestRef`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Ref {
    /// `refs/heads/tagpin/main`.
    #[serde(default)]
    id: String,
    #[serde(default)]
    display_id: String,
    latest_commit: Option<String>,
    repository: Option<Repository>,
}

#[derive(Debug, Deserialize, PartialEq, Eq)]
struct Repository {
    slug: String,
    project: Project,
}

#[derive(Debug, Deserialize, PartialEq, Eq)]
struct Project {
    key: String,
}

/// `RestPullRequestParticipant`.
#[derive(Debug, Deserialize)]
struct Participant {
    user: User,
}

#[derive(Debug, Deserialize)]
struct User {
    name: String,
}

#[derive(Debug, Deserialize)]
struct Links {
    #[serde(rename = "self", default)]
    self_links: Vec<Link>,
}

#[derive(Debug, Deserialize)]
struct Link {
    href: String,
}

/// A merged pull request's `properties.mergeCommit`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Properties {
    merge_commit: Option<MergeCommit>,
}

#[derive(Debug, Deserialize)]
struct MergeCommit {
    id: String,
}

/// `RestBuildStatus`: no author.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct BuildStatus {
    #[serde(default)]
    key: String,
    /// `INPROGRESS`, `SUCCESSFUL`, `FAILED`, `CANCELLED` or `UNKNOWN`.
    #[serde(default)]
    state: String,
    description: Option<String>,
    build_number: Option<String>,
    created_date: Option<i64>,
    updated_date: Option<i64>,
}

/// `RestPullRequestActivity`, the fields of a `COMMENTED` one tagpin reads.
#[derive(Debug, Deserialize)]
struct Activity {
    #[serde(default)]
    action: String,
    comment: Option<Comment>,
}

/// `RestComment`.
#[derive(Debug, Deserialize)]
struct Comment {
    id: u64,
    #[serde(default)]
    version: i64,
    #[serde(default)]
    text: String,
    author: Option<User>,
}

/// `RestPullRequest` as posted: a source and target ref in this repository.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct NewPullRequest<'a> {
    title: &'a str,
    description: &'a str,
    from_ref: NewRef<'a>,
    to_ref: NewRef<'a>,
}

#[derive(Debug, Serialize)]
struct NewRef<'a> {
    id: String,
    repository: NewRepository<'a>,
}

#[derive(Debug, Serialize)]
struct NewRepository<'a> {
    slug: &'a str,
    project: NewProject<'a>,
}

#[derive(Debug, Serialize)]
struct NewProject<'a> {
    key: &'a str,
}

/// The `PUT` of a pull request: its version, what tagpin changes, and the reviewers as read.
#[derive(Debug, Serialize)]
struct EditPullRequest<'a> {
    version: i64,
    title: &'a str,
    description: &'a str,
    reviewers: Vec<Reviewer<'a>>,
}

#[derive(Debug, Serialize)]
struct Reviewer<'a> {
    user: ReviewerUser<'a>,
}

#[derive(Debug, Serialize)]
struct ReviewerUser<'a> {
    name: &'a str,
}

/// `RestBuildStatusSetRequest`, the fields tagpin sets.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct NewBuildStatus<'a> {
    key: &'a str,
    state: &'a str,
    url: String,
    name: &'a str,
    description: &'a str,
    build_number: String,
}

/// A new comment (`text`), or an edit (`text` and `version`).
#[derive(Debug, Serialize)]
struct CommentBody<'a> {
    text: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    version: Option<i64>,
}

impl BitbucketServer {
    /// `api_url` is the instance's base URL, `https://bitbucket.example.com`.
    pub fn new(
        forge: &Settings,
        (project, repo): (&str, &str),
        token: String,
    ) -> Result<BitbucketServer> {
        let token = token.trim();
        let (full_name, credentials) = (
            format!("{project}/{repo}"),
            ("authorization", format!("Bearer {token}")),
        );
        let path = format!(
            "{REST_API}/projects/{}/repos/{}",
            encode(project),
            encode(repo)
        );
        let rest = Rest::new(FORGE, forge, full_name, credentials, &WORDS)?.at(&path);
        Ok(BitbucketServer {
            rest,
            project: project.to_string(),
            repo: repo.to_string(),
            signer: StatusSigner::new(FORGE, token)?,
            project_key: project.to_ascii_uppercase(),
            dialect: Dialect::new(
                "Bitbucket Data Center",
                ChangeRequestNoun::PullRequest,
                forge.login.clone(),
            )
            .adopting()
            .poster_dated(),
        })
    }

    /// Whether `repository` is the configured one (project keys are case-insensitive).
    fn is_ours(&self, repository: Option<&Repository>) -> bool {
        repository.is_some_and(|r| {
            r.project.key.eq_ignore_ascii_case(&self.project) && r.slug == self.repo
        })
    }

    /// Every page of a pull request list at `at`, going `direction` (`OUTGOING` from a branch
    /// of this repository, `INCOMING` into it) in `state`, keeping those into `base` of this
    /// repository; with `until`, pages stop after the first one that reaches a pull request
    /// updated before it.
    async fn list_pull_requests(
        &self,
        what: &str,
        (at, direction, state): (&str, &str, &str),
        base: &str,
        until: Option<i64>,
    ) -> Result<Vec<PullRequestInfo>> {
        let at = branch_ref(at);
        let query = [
            ("at", at.as_str()),
            ("direction", direction),
            ("state", state),
            ("order", "NEWEST"),
        ];
        let first = with_query(&self.rest.url("/pull-requests"), &query);
        let target = branch_ref(base);
        let read_page = |url: String| async move { self.read_list(what, &url).await };
        let into_target = |pr: PullRequest| {
            let to = pr.to_ref.as_ref();
            let ours = to.is_some_and(|r| r.id == target && self.is_ours(r.repository.as_ref()));
            ours.then(|| self.info(pr))
        };
        read_change_requests(first, until, read_page, into_target).await
    }

    /// One page of a list, with the address of the next page on `api_url`.
    async fn read_list<T: DeserializeOwned>(&self, what: &str, url: &str) -> Result<Paged<T>> {
        let answer = self.rest.call(what, Method::GET, url, None).await?;
        let page: Page<T> = self.rest.parse(what, &answer.body)?;
        let next = next_page(url, &page).map_err(|e| self.rest.error(what, e.to_string(), None))?;
        Ok((page.values, next))
    }

    /// What tagpin reads of a Bitbucket pull request.
    fn info(&self, pr: PullRequest) -> PullRequestInfo {
        let from = pr.from_ref.as_ref();
        let same_repository = from.is_some_and(|f| self.is_ours(f.repository.as_ref()))
            && pr
                .to_ref
                .as_ref()
                .is_some_and(|t| self.is_ours(t.repository.as_ref()));
        let head_ref = from
            .map(|f| match f.id.strip_prefix("refs/heads/") {
                Some(branch) => branch.to_string(),
                None => f.display_id.clone(),
            })
            .unwrap_or_default();
        let merged = pr.state == "MERGED";
        PullRequestInfo {
            number: pr.id,
            open: pr.state == "OPEN",
            merged,
            title: pr.title,
            body: pr.description.unwrap_or_default(),
            // Data Center pull requests have no labels.
            labels: Vec::new(),
            url: pr
                .links
                .and_then(|l| l.self_links.into_iter().next())
                .map(|l| l.href)
                .unwrap_or_default(),
            head_ref,
            head_sha: from
                .and_then(|f| f.latest_commit.clone())
                .unwrap_or_default(),
            merge_commit_sha: pr
                .properties
                .and_then(|p| p.merge_commit)
                .map(|c| c.id)
                .filter(|id| merged && !id.is_empty()),
            merged_at: pr.closed_date.filter(|_| merged).map(seconds),
            updated_at: pr.updated_date.map(seconds),
            author: pr.author.map(|a| a.user.name).unwrap_or_default(),
            same_repository,
        }
    }

    /// A build status as tagpin reads it: tagpin's own (creator `me`) when its stamp holds
    /// for one of the states Bitbucket's state stands for, and it was recorded when said.
    fn read_status(&self, sha: &str, status: &BuildStatus, me: &str) -> Option<Status> {
        let candidates = read_states(&status.state);
        let description = status.description.clone().unwrap_or_default();
        let recorded = status.updated_date.or(status.created_date).map(seconds);
        let signed = candidates.iter().copied().find(|state| {
            status.build_number.as_deref().is_some_and(|given| {
                let said = self.said(sha, &status.key, *state, &description);
                self.signer.owns((sha, &status.key), &said, given, recorded)
            })
        });
        let state = signed.or_else(|| candidates.first().copied())?;
        Some(Status {
            state,
            description,
            created_at: recorded,
            creator: signed.map(|_| me.to_string()),
        })
    }

    /// Now on Bitbucket's clock, from the `Date` of its latest answer; when none came within
    /// the last minute, the repository is read for one. Without any `Date` (a proxy that drops
    /// it), this machine's clock: a status it is far off from reads as not tagpin's, and its
    /// soak starts again, never earlier.
    async fn forge_now(&self) -> Result<i64> {
        if let Some(now) = self.rest.clock.now() {
            return Ok(now);
        }
        let what = format!(
            "read Bitbucket's clock (GET repository {})",
            self.rest.names.repo
        );
        self.rest
            .call(&what, Method::GET, &self.rest.url(""), None)
            .await?;
        Ok(self.rest.clock.now().unwrap_or_else(|| {
            tracing::warn!(
                "Bitbucket sent no Date header: tagpin stamps its statuses with this machine's clock, and reads them as its own only while Bitbucket's clock agrees within seconds"
            );
            crate::clock::unix_now()
        }))
    }

    /// What a status says, as [`StatusSigner`] signs it.
    fn said<'a>(
        &'a self,
        sha: &'a str,
        key: &'a str,
        state: StatusState,
        description: &'a str,
    ) -> [&'a str; 6] {
        [
            &self.project_key,
            &self.repo,
            sha,
            key,
            state_word(state),
            description,
        ]
    }
}

impl Forge for BitbucketServer {
    fn dialect(&self) -> &Dialect {
        &self.dialect
    }

    /// The `X-AUSERNAME` header of Bitbucket's answer to `GET` of the repository.
    async fn ask_login(&self) -> Result<String> {
        let what = format!("read repository {} (GET)", self.rest.names.repo);
        let answer = self
            .rest
            .call(&what, Method::GET, &self.rest.url(""), None)
            .await?;
        let user = answer
            .headers
            .get(USER_HEADER)
            .and_then(|v| v.to_str().ok());
        match user.map(str::trim).filter(|v| !v.is_empty()) {
            Some(user) => Ok(user.to_string()),
            None => Err(self.rest.error(
                &what,
                "Bitbucket did not name the token's user (no X-AUSERNAME header: a proxy may drop it); set forge.login to the token's user name".into(),
                None,
            )),
        }
    }

    /// Listed at a branch, newest first: from tagpin's (`OUTGOING`) or into the target
    /// (`INCOMING`); the recently closed as merged and declined, one list each.
    async fn list(&self, what: &str, listing: Listing<'_>) -> Result<Vec<PullRequestInfo>> {
        match listing {
            Listing::From { branch, base } => {
                let at = (branch, "OUTGOING", "ALL");
                self.list_pull_requests(what, at, base, None).await
            }
            Listing::OpenFrom { branch, base } => {
                let at = (branch, "OUTGOING", "OPEN");
                self.list_pull_requests(what, at, base, None).await
            }
            Listing::OpenInto { base, .. } => {
                let at = (base, "INCOMING", "OPEN");
                self.list_pull_requests(what, at, base, None).await
            }
            Listing::ClosedInto { base, since, .. } => {
                let mut recent = Vec::new();
                for state in ["MERGED", "DECLINED"] {
                    let at = (base, "INCOMING", state);
                    recent.extend(self.list_pull_requests(what, at, base, Some(since)).await?);
                }
                Ok(recent)
            }
        }
    }

    async fn create(&self, what: &str, new: NewChange<'_>) -> Result<PullRequestInfo> {
        let new_ref = |branch: &str| NewRef {
            id: branch_ref(branch),
            repository: NewRepository {
                slug: &self.repo,
                project: NewProject { key: &self.project },
            },
        };
        let request = json(&NewPullRequest {
            title: new.title,
            description: new.body,
            from_ref: new_ref(new.branch),
            to_ref: new_ref(new.base),
        });
        let url = self.rest.url("/pull-requests");
        Ok(self.info(self.rest.post(what, &url, request).await?))
    }

    /// Reads the pull request's version (and reviewers, sent back unchanged), and when
    /// Bitbucket answers that the version is stale (`409`: changed meanwhile), reads it again
    /// and tries once more.
    async fn update_pull_request(&self, number: u64, title: &str, body: &str) -> Result<()> {
        let what = format!("update pull request #{number}");
        let url = self.rest.url(&format!("/pull-requests/{number}"));
        let mut attempt = 0;
        loop {
            attempt += 1;
            let current: PullRequest = self.rest.parse(
                &what,
                &self.rest.call(&what, Method::GET, &url, None).await?.body,
            )?;
            let reviewers = current.reviewers.iter().map(|r| Reviewer {
                user: ReviewerUser { name: &r.user.name },
            });
            let edit = json(&EditPullRequest {
                version: current.version,
                title,
                description: body,
                reviewers: reviewers.collect(),
            });
            match self.rest.call(&what, Method::PUT, &url, Some(edit)).await {
                Err(e) if e.status() == Some(409) && attempt < 2 => {
                    tracing::info!(
                        "pull request #{number} changed while tagpin updated it; reading it again"
                    );
                }
                result => return result.map(|_| ()),
            }
        }
    }

    /// By its id (`#N`).
    async fn pull_request(&self, number: u64) -> Result<PullRequestInfo> {
        let what = format!("read pull request #{number}");
        let url = self.rest.url(&format!("/pull-requests/{number}"));
        let answer = self.rest.call(&what, Method::GET, &url, None).await?;
        Ok(self.info(self.rest.parse(&what, &answer.body)?))
    }

    /// The build status `context` on `sha` (Bitbucket keeps one per commit and key), with its
    /// creator the token's user when it is tagpin's own word ([`StatusSigner::owns`]), unknown
    /// otherwise. The history is not whole when the key holds anything else: tagpin's own, if
    /// it set one, was replaced.
    async fn statuses(&self, key: StatusKey<'_>) -> Result<StatusHistory> {
        let me = self.login().await?.to_string();
        let (sha, context) = (key.sha, key.context);
        let what = format!("read build status {context} of {sha}");
        let builds = self.rest.url(&format!("/commits/{}/builds", encode(sha)));
        let url = with_key(&builds, context);
        let none = StatusHistory {
            statuses: Vec::new(),
            complete: true,
        };
        let answer = match self.rest.call(&what, Method::GET, &url, None).await {
            // The repository was read already (the login); a 404 here is no status of the key.
            Err(e) if e.status() == Some(404) => return Ok(none),
            answer => answer?,
        };
        let status: BuildStatus = self.rest.parse(&what, &answer.body)?;
        if status.key != context {
            return Ok(none);
        }
        let statuses: Vec<Status> = self.read_status(sha, &status, &me).into_iter().collect();
        let complete = statuses.iter().all(|s| s.creator.as_deref() == Some(&me));
        Ok(StatusHistory { statuses, complete })
    }

    /// Replaces the build status of that key, stamped as tagpin's own and said now on
    /// Bitbucket's clock.
    async fn set_status(&self, key: StatusKey<'_>, said: Said<'_>) -> Result<()> {
        let (sha, context, description) = (key.sha, key.context, said.description);
        let what = format!("set build status {context} on {sha}");
        let url = self.rest.url(&format!("/commits/{}/builds", encode(sha)));
        let at = self.forge_now().await?;
        let (project, repo) = (encode(&self.project), encode(&self.repo));
        let page = format!(
            "{}/projects/{project}/repos/{repo}/commits/{}",
            self.rest.api,
            encode(sha)
        );
        let signed = self.said(sha, context, said.state, description);
        let status = json(&NewBuildStatus {
            key: context,
            state: wire_state(said.state),
            url: page,
            name: context,
            description,
            build_number: self.signer.stamp(&signed, at),
        });
        self.rest
            .call(&what, Method::POST, &url, Some(status))
            .await?;
        self.signer.remember((sha, context), at);
        Ok(())
    }

    /// The oldest general comment tagpin's user wrote carrying `marker` (only a comment's
    /// author may change its text), read from the pull request's activities, every page.
    async fn marked_comment(&self, number: u64, marker: &str) -> Result<Option<Marked>> {
        let me = self.login().await?;
        let what = format!("list comments of pull request #{number}");
        let activities = self
            .rest
            .url(&format!("/pull-requests/{number}/activities"));
        let first = with_query(&activities, &[]);
        let what = what.as_str();
        let read_page = |url: String| async move { self.read_list::<Activity>(what, &url).await };
        let activities = read_pages(first, read_page, |_| false).await?;
        // Activities come newest first: the oldest of tagpin's is the one it keeps.
        let comment = activities
            .into_iter()
            .rev()
            .filter(|a| a.action == "COMMENTED")
            .filter_map(|a| a.comment)
            .find(|c| c.text.contains(marker) && c.author.as_ref().is_some_and(|u| u.name == me));
        Ok(comment.map(marked))
    }

    /// Posted as text; edited with the comment's `version`, and a `409` (changed meanwhile)
    /// reads it again and tries once more, unless it already says `body`.
    async fn write_comment(&self, number: u64, old: Option<Marked>, body: &str) -> Result<()> {
        let Some(mut comment) = old else {
            let what = format!("comment on pull request #{number}");
            let url = self.rest.url(&format!("/pull-requests/{number}/comments"));
            let new = CommentBody {
                text: body,
                version: None,
            };
            return self.rest.write(&what, Method::POST, &url, &new).await;
        };
        let mut attempt = 0;
        loop {
            attempt += 1;
            let id = comment.id;
            let what = format!("update comment {id} on pull request #{number}");
            let url = self
                .rest
                .url(&format!("/pull-requests/{number}/comments/{id}"));
            let version = comment.version;
            let edit = CommentBody {
                text: body,
                version,
            };
            match self.rest.write(&what, Method::PUT, &url, &edit).await {
                Err(e) if e.status() == Some(409) && attempt < 2 => {
                    comment = marked(self.rest.get(&what, &url).await?);
                }
                result => return result,
            }
            if comment.text == body {
                // Already says exactly this: editing it again would only spend a call.
                return Ok(());
            }
        }
    }
}

/// A comment as tagpin edits it: by its id and version.
fn marked(comment: Comment) -> Marked {
    Marked {
        id: comment.id,
        text: comment.text,
        version: Some(comment.version),
        thread: None,
    }
}

fn branch_ref(branch: &str) -> String {
    format!("refs/heads/{branch}")
}

/// Milliseconds since the epoch, as Bitbucket writes times, in seconds.
fn seconds(millis: i64) -> i64 {
    millis.div_euclid(1000)
}

/// `url` with `query`, `limit` and the first `start` appended.
fn with_query(url: &str, query: &[(&str, &str)]) -> String {
    let mut pairs = url::form_urlencoded::Serializer::new(String::new());
    pairs.extend_pairs(query);
    pairs.append_pair("limit", &PAGE_LIMIT.to_string());
    pairs.append_pair("start", "0");
    format!("{url}?{}", pairs.finish())
}

/// `url?key=…`.
fn with_key(url: &str, key: &str) -> String {
    let mut pairs = url::form_urlencoded::Serializer::new(String::new());
    pairs.append_pair("key", key);
    format!("{url}?{}", pairs.finish())
}

/// The states a Bitbucket build state stands for in tagpin's words, the likeliest first:
/// `FAILED` is tagpin's failure or error. `CANCELLED` and `UNKNOWN` are no verdict of tagpin's.
fn read_states(state: &str) -> &'static [StatusState] {
    match state {
        "INPROGRESS" => &[StatusState::Pending],
        "SUCCESSFUL" => &[StatusState::Success],
        "FAILED" => &[StatusState::Failure, StatusState::Error],
        _ => &[],
    }
}

/// Bitbucket's words for tagpin's states: it has no error apart from a failure.
fn wire_state(state: StatusState) -> &'static str {
    match state {
        StatusState::Pending => "INPROGRESS",
        StatusState::Success => "SUCCESSFUL",
        StatusState::Failure | StatusState::Error => "FAILED",
    }
}

/// tagpin's own word for a state, signed with the status so `FAILED` reads back as it was.
fn state_word(state: StatusState) -> &'static str {
    match state {
        StatusState::Pending => "pending",
        StatusState::Success => "success",
        StatusState::Failure => "failure",
        StatusState::Error => "error",
    }
}

/// The next page of a list read from `url` (with `start=N`): `start=nextPageStart` on the
/// same address, while the page says it is not the last and the next start lies ahead (a
/// page pointing back is the last read).
fn next_page<T>(url: &str, page: &Page<T>) -> Result<Option<String>, BadPageUrl> {
    let next = PageAddress::parse(url)?;
    let start = next.number("start").unwrap_or(0);
    let Some(following) = page.next_page_start.filter(|n| *n > start) else {
        return Ok(None);
    };
    if page.is_last_page || page.values.is_empty() {
        return Ok(None);
    }
    Ok(Some(next.with("start", &following.to_string())))
}

/// `forge.project` (the project key) and `forge.repo` (the repository slug), and
/// `forge.api_url` without a REST path, which tagpin appends itself: one given would be
/// doubled.
fn project_and_repo(keys: &mut dyn Keys, api_url: Option<&str>) -> Option<Kind> {
    let elsewhere = "is for GitHub and Gitea; a Bitbucket Data Center repository is named by forge.project (the project key) and forge.repo (the repository slug)";
    report_foreign(keys, &["forge.owner"], elsewhere);
    let project = keys.required("forge.project");
    if let Some(project) = project.as_ref().filter(|p| !project_key_ok(p)) {
        let problem = format!("{project:?} is not a Bitbucket project key (letters, digits and _, or ~user for a personal project)");
        keys.problem("forge.project", &problem);
    }
    let repo = keys.required("forge.repo");
    if let Some(api_url) = api_url.filter(|u| u.contains("/rest/")) {
        let problem = format!("{api_url:?} names a REST path; give the instance's base URL (https://HOST, with its context path if any): tagpin appends /rest/api/1.0");
        keys.problem("forge.api_url", &problem);
    }
    let (project, repo) = (project?, repo?);
    Some(Kind::BitbucketServer { project, repo })
}

/// A Bitbucket Data Center project key as its API takes it: letters, digits and `_` (the
/// key of a project, `ACME`), or `~user` (a personal project).
fn project_key_ok(project: &str) -> bool {
    let key = project.strip_prefix('~').unwrap_or(project);
    !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'@'))
}

#[cfg(test)]
mod tests {
    use super::super::engine::{assert_merged_twelve, patched, settings, EVERY_STATE};
    use super::*;

    /// A merged pull request in the shape of Data Center's `RestPullRequest` (as the
    /// reference's example shows it), trimmed of fields tagpin does not read.
    const MERGED_PULL_REQUEST: &str = r#"{
      "id": 12, "version": 3, "title": "Pin 1 image(s) to digests", "description": "plan",
      "state": "MERGED", "open": false, "closed": true,
      "createdDate": 1767319000000, "updatedDate": 1767319446000, "closedDate": 1767319445000,
      "fromRef": {"id": "refs/heads/tagpin/main", "displayId": "tagpin/main",
                  "latestCommit": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
                  "repository": {"id": 5, "slug": "gitops", "project": {"key": "ACME"}}},
      "toRef": {"id": "refs/heads/main", "displayId": "main",
                "latestCommit": "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb",
                "repository": {"id": 5, "slug": "gitops", "project": {"key": "ACME"}}},
      "author": {"user": {"name": "tagpin-bot", "slug": "tagpin-bot"}, "role": "AUTHOR"},
      "reviewers": [], "participants": [],
      "properties": {"mergeCommit": {"displayId": "ccccccc",
                                     "id": "cccccccccccccccccccccccccccccccccccccccc"}},
      "links": {"self": [{"href": "https://bitbucket.example.com/projects/ACME/repos/gitops/pull-requests/12"}]}
    }"#;

    fn adapter_with(token: &str) -> BitbucketServer {
        let kind = Kind::BitbucketServer {
            project: "ACME".into(),
            repo: "gitops".into(),
        };
        let forge = settings(kind, "https://bitbucket.example.com/");
        BitbucketServer::new(&forge, ("ACME", "gitops"), token.into()).unwrap()
    }

    fn adapter() -> BitbucketServer {
        adapter_with("token-one")
    }

    fn pr(patch: serde_json::Value) -> PullRequestInfo {
        let value = patched(MERGED_PULL_REQUEST, patch);
        adapter().info(serde_json::from_value(value).unwrap())
    }

    #[test]
    fn a_bitbucket_pull_request_reads_as_tagpin_reads_a_change_request() {
        let merged = pr(serde_json::json!({}));
        assert_merged_twelve(&merged);
        assert_eq!(merged.head_sha, "a".repeat(40));
        assert_eq!(merged.merge_commit_sha, Some("c".repeat(40)));
        assert_eq!(merged.merged_at, Some(1767319445));
        assert_eq!(merged.updated_at, Some(1767319446));
        assert_eq!(merged.author, "tagpin-bot");
        assert!(merged.url.ends_with("/pull-requests/12"));
        let open = pr(serde_json::json!({"state": "OPEN", "properties": {}}));
        assert!(open.open && !open.merged);
        assert_eq!(open.merge_commit_sha, None);
        assert_eq!(open.merged_at, None);
        let declined = pr(serde_json::json!({"state": "DECLINED", "properties": null}));
        assert!(!declined.open && !declined.merged);
    }

    #[test]
    fn a_pull_request_from_a_fork_is_not_this_repositorys() {
        let fork = pr(
            serde_json::json!({"fromRef": {"id": "refs/heads/tagpin/main",
            "displayId": "tagpin/main", "latestCommit": "a",
            "repository": {"slug": "gitops", "project": {"key": "~MALLORY"}}}}),
        );
        assert!(!fork.same_repository);
        let unknown = pr(serde_json::json!({"fromRef": null}));
        assert!(!unknown.same_repository);
        let lower = pr(serde_json::json!({"toRef": {"id": "refs/heads/main",
            "repository": {"slug": "gitops", "project": {"key": "acme"}}}}));
        assert!(lower.same_repository, "project keys are case-insensitive");
    }

    #[test]
    fn a_status_is_tagpins_only_under_its_own_stamp_as_recorded_when_said() {
        let bb = adapter();
        let sha = "a".repeat(40);
        let signed = |state, description: &str| BuildStatus {
            key: "tagpin/converged".into(),
            state: wire_state(state).into(),
            description: Some(description.into()),
            build_number: Some(bb.signer.stamp(
                &bb.said(&sha, "tagpin/converged", state, description),
                1_999,
            )),
            created_date: Some(1_000_000),
            updated_date: Some(2_000_000),
        };
        for state in EVERY_STATE {
            let read = bb
                .read_status(&sha, &signed(state, "1 of 2 pods"), "bot")
                .unwrap();
            assert_eq!(read.state, state, "FAILED reads back as what tagpin set");
            assert_eq!(read.creator.as_deref(), Some("bot"));
            assert_eq!(read.created_at, Some(2_000));
        }
        // A CI job replacing tagpin's with another description, or copying its buildNumber.
        let mut forged = signed(StatusState::Success, "converged since 2026");
        forged.description = Some("converged since 2020".into());
        let read = bb.read_status(&sha, &forged, "bot").unwrap();
        assert_eq!((read.state, read.creator), (StatusState::Success, None));
        let mut unsigned = signed(StatusState::Failure, "x");
        unsigned.build_number = Some("42".into());
        assert_eq!(
            bb.read_status(&sha, &unsigned, "bot").unwrap().creator,
            None
        );
        // Another token (rotated, or another tagpin's) does not sign as this one.
        let other = adapter_with("token-two");
        assert_eq!(
            other
                .read_status(&sha, &signed(StatusState::Success, "x"), "bot")
                .unwrap()
                .creator,
            None
        );
        let cancelled = BuildStatus {
            state: "CANCELLED".into(),
            ..signed(StatusState::Success, "x")
        };
        assert!(bb.read_status(&sha, &cancelled, "bot").is_none());
        // The same status, posted again an hour later: Bitbucket records it then.
        let replayed = BuildStatus {
            updated_date: Some(3_600_000 + 2_000_000),
            ..signed(StatusState::Success, "x")
        };
        let read = adapter().read_status(&sha, &replayed, "bot").unwrap();
        assert_eq!((read.state, read.creator), (StatusState::Success, None));
    }

    #[test]
    fn pages_follow_next_page_start_on_api_url_only_forward() {
        let url = "https://bitbucket.example.com/rest/api/1.0/projects/ACME/repos/gitops/pull-requests?state=ALL&limit=50&start=0";
        let page = |last: bool, next: Option<u64>| Page::<u64> {
            values: vec![1, 2],
            is_last_page: last,
            next_page_start: next,
        };
        assert_eq!(
            next_page(url, &page(false, Some(50))).unwrap().as_deref(),
            Some("https://bitbucket.example.com/rest/api/1.0/projects/ACME/repos/gitops/pull-requests?state=ALL&limit=50&start=50")
        );
        assert_eq!(next_page(url, &page(true, None)).unwrap(), None);
        let later = url.replace("start=0", "start=50");
        assert_eq!(
            next_page(&later, &page(false, Some(50))).unwrap(),
            None,
            "a page pointing at itself or back is the last"
        );
        let empty = Page::<u64> {
            values: vec![],
            is_last_page: false,
            next_page_start: Some(100),
        };
        assert_eq!(next_page(url, &empty).unwrap(), None);
    }

    #[test]
    fn project_and_repository_are_each_one_path_segment() {
        let bb = adapter();
        assert_eq!(
            bb.rest.url("/pull-requests"),
            "https://bitbucket.example.com/rest/api/1.0/projects/ACME/repos/gitops/pull-requests"
        );
        assert_eq!(encode("my repo/x"), "my%20repo%2Fx");
        assert_eq!(
            with_key("https://h/b", "tagpin/stage/prod"),
            "https://h/b?key=tagpin%2Fstage%2Fprod"
        );
    }

    #[test]
    fn the_verdict_comment_is_posted_as_text_and_edited_with_its_version() {
        assert_eq!(
            json(&CommentBody {
                text: "x",
                version: None
            }),
            serde_json::json!({"text": "x"})
        );
        assert_eq!(
            json(&CommentBody {
                text: "x",
                version: Some(4)
            }),
            serde_json::json!({"text": "x", "version": 4})
        );
    }
}
