//! The Bitbucket Cloud adapter: REST API 2.0 (`https://api.bitbucket.org/2.0`).
//!
//! A Bitbucket pull request is what a GitHub one is to tagpin: found by its source branch (a
//! tagpin branch of this very repository, never a fork's), opened with the plan block in its
//! description, and read back as `OPEN`, `MERGED` (with its merge commit) or `DECLINED` /
//! `SUPERSEDED` (closed by a person). The verdict is a build status on the head and on the
//! commit that landed, and one comment on the pull request found by its marker among the
//! comments tagpin's own account wrote.
//!
//! Facts are those of Bitbucket Cloud's OpenAPI description (`api.bitbucket.org/swagger.json`)
//! as shipped, typed, in the npm package `bitbucket` 2.12.0 (`lib/bitbucket.d.ts`: `Pullrequest`,
//! `PullrequestEndpoint`, `PaginatedPullrequests`, `Commitstatus`, `PullrequestComment`,
//! `Account`, `User`; the parameters of `PullrequestsList`, `CommitstatusesList`,
//! `CommitstatusesCreateBuildStatus`, `RepositoriesGetCommit`), and of Atlassian's REST and
//! support pages: "Commit statuses" (a build status of an existing key is overwritten),
//! "API request limits" (rolling one-hour windows), "Access tokens" (sent as `Bearer`; Basic
//! is for a username and app password only).
//!
//! What Bitbucket Cloud does its own way, and what tagpin does about it:
//! - Pull requests are filtered with BBQL (`q=source.branch.name="tagpin/main"`), and `state`
//!   repeats (`OPEN`, `MERGED`, `DECLINED`, `SUPERSEDED`; `OPEN` alone when not given).
//! - Lists are pages `{values, next, page, pagelen, size}`; tagpin follows `next` only when it
//!   is on `api_url`'s scheme, host, port and path (the token goes nowhere else), and at most
//!   [`super::common::MAX_PAGES`] pages.
//! - `merge_commit.hash` and `source.commit.hash` are short (12 digits): the full ones are
//!   read with `GET /commit/{hash}` for one pull request (`verify --pr N`), a new one, those
//!   in flight, and the open one of a branch, and kept for the process. The list of a
//!   branch's pull requests leaves closed ones' commits unread (its callers read their state
//!   and body only), so their `merge_commit_sha` is none there.
//! - Pull requests have no labels. Nothing stands in: `pull_request.labels` are not set on
//!   Bitbucket (tagpin recognises its pull requests by branch and plan block everywhere).
//! - A build status is one per key and commit, overwritten in place, and records no creator,
//!   but Bitbucket records when it was last set (`updated_on`). tagpin stamps its own: the
//!   status `url` (which Bitbucket requires) ends in `#tagpin-<time>-<HMAC>`, the time tagpin
//!   said it on Bitbucket's clock (the `Date` of its latest answer) and an HMAC-SHA256, keyed
//!   by the token, of the repository, commit, key, state, description and that time. Only a
//!   status whose stamp checks and whose `updated_on` is that time (within
//!   [`super::common::SAID_EARLY`] and [`super::common::SAID_LATE`]) is tagpin's own (creator:
//!   [`Bitbucket::login`]): one of tagpin's saved and posted again later is not. Any other in
//!   tagpin's key, a CI job's say, has no creator and carries no soak clock, and the history
//!   says tagpin's own was replaced: the clock starts again when tagpin posts its own, never
//!   earlier. A new token starts the clocks again too.
//! - Keys are at most 40 characters ([`MAX_KEY_CHARS`]): a longer context is cut and given a
//!   hash of the whole, so two contexts never share a key; the status's `name` is the context.
//! - `GET /user` (whose `uuid` names tagpin's comments and statuses) answers a user's app
//!   password or API token; an access token (repository, project or workspace) is no user
//!   and is refused it: `forge.login` then names the token's account `uuid`.
//! - A `429` carries no `Retry-After` as a rule: Bitbucket counts calls over a rolling hour.
//!   With one, it is waited out within [`super::MAX_RATE_LIMIT_WAIT`]; without, the wait tagpin can
//!   infer is the window, an hour ([`ROLLING_WINDOW`]), and the call is reported.
//!
//! The token goes in `Authorization: Bearer …`, or with `forge.username_env` as HTTP Basic
//! `username:app-password`, marked sensitive so no debug output shows it. Redirects are not
//! followed. Every call has a connect timeout and a total deadline (`forge.timeout_seconds`)
//! and reads at most [`super::MAX_ANSWER_BYTES`]. Bitbucket's messages are never quoted.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use base64::Engine as _;
use reqwest::Method;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::engine::{encode, json, read_pages, read_pages_whole, retry_after, unix};
use super::engine::{read_change_requests, Forge, Listing, Names};
use super::engine::{Dialect, Paged};
use super::engine::{Marked, NewChange, Purpose, Rest, Result, Said, StatusKey, Words};
use super::settings::ChangeRequestNoun;
use super::settings::{segment_ok, two_keys, Keys, Kind, Section, Settings};
use super::stamp::StatusSigner;
use crate::mutex::lock;
use crate::review::{PullRequestInfo, Status, StatusHistory, StatusState};

const FORGE: &str = "Bitbucket";
/// `kind: bitbucket`: `forge.workspace` and `forge.repo` ([`workspace_and_repo`]) on
/// `https://api.bitbucket.org/2.0`, and `forge.username_env` for an app password.
pub(crate) const SECTION: Section =
    Section::new("bitbucket", Some(API_URL), workspace_and_repo).taking_username();
/// Bitbucket Cloud's one API.
const API_URL: &str = "https://api.bitbucket.org/2.0";
/// What `forge.workspace` is, said to a section of another kind.
pub(crate) const WORKSPACE_ELSEWHERE: &str =
    "is for Bitbucket Cloud (kind: bitbucket); set it with forge.repo";
/// What `forge.username_env` is, said to a section of another kind.
pub(crate) const USERNAME_ELSEWHERE: &str =
    "is for Bitbucket Cloud app passwords (kind: bitbucket); the other forges take the token alone";
/// What a failed answer means, in words that say what to fix. A `429` is waited out as
/// `Retry-After` says, else it would be the rolling window, an hour, which is past
/// [`super::MAX_RATE_LIMIT_WAIT`]: the call is reported.
pub(super) const WORDS: Words = Words {
    wait: |headers, now| retry_after(headers, now).unwrap_or(ROLLING_WINDOW),
    unauthorized: "the token is not valid (expired or revoked; an app password needs forge.username_env, an access token or API token must not have it)",
    forbidden: "the token may not do this in {repo} (it needs the repository:write and pullrequest:write scopes, or write:repository:bitbucket and write:pullrequest:bitbucket for an API token, and write access to the repository)",
    not_found: "{repo} is not at {api}, or the token may not read it (Bitbucket answers 404 for a private repository hidden from the token)",
    refused: Some((400, "Bitbucket refused a field tagpin sent")),
    ..Words::PLAIN
};
/// Pull requests asked for per page: Bitbucket's largest `pagelen` for pull requests.
pub(crate) const PAGE_LEN: usize = 50;
/// Statuses and comments asked for per page (Bitbucket's largest for these lists).
pub(crate) const LONG_PAGE_LEN: usize = 100;
/// The longest build status key Bitbucket Cloud takes.
pub(crate) const MAX_KEY_CHARS: usize = 40;
/// Bitbucket's rate-limit window: with no `Retry-After`, the longest a call may have to wait.
pub(crate) const ROLLING_WINDOW: Duration = Duration::from_secs(3600);
/// Short merge-commit hashes resolved, kept for the process; cleared when full.
const MAX_RESOLVED: usize = 512;

/// A Bitbucket Cloud repository, with a token.
pub struct Bitbucket {
    rest: Rest,
    workspace: String,
    repo: String,
    /// The key of the signatures on tagpin's build statuses: the token. It also keeps, for
    /// the process, the newest status set or believed on each commit and key (replays).
    signer: StatusSigner,
    /// Pull requests; one opened meanwhile is not adopted (the next pass finds it by its branch); the token's account uuid.
    dialect: Dialect,
    /// Short merge-commit hash -> full hash.
    resolved: Mutex<HashMap<String, String>>,
}

/// `PaginatedPullrequests`, `PaginatedCommitstatuses`, `PaginatedPullrequestComments`.
#[derive(Debug, Deserialize)]
struct Page<T> {
    #[serde(default = "Vec::new")]
    values: Vec<T>,
    next: Option<String>,
}

/// `Pullrequest`, the fields tagpin reads.
#[derive(Debug, Deserialize)]
struct PullRequest {
    id: u64,
    #[serde(default)]
    title: String,
    description: Option<String>,
    summary: Option<Rendered>,
    /// `OPEN`, `MERGED`, `DECLINED` or `SUPERSEDED`.
    #[serde(default)]
    state: String,
    source: Option<Endpoint>,
    destination: Option<Endpoint>,
    merge_commit: Option<CommitRef>,
    author: Option<Account>,
    updated_on: Option<String>,
    links: Option<Links>,
}

#[derive(Debug, Deserialize)]
struct Rendered {
    raw: Option<String>,
}

/// `PullrequestEndpoint`.
#[derive(Debug, Deserialize)]
struct Endpoint {
    branch: Option<BranchName>,
    commit: Option<CommitRef>,
    repository: Option<RepositoryRef>,
}

#[derive(Debug, Deserialize)]
struct BranchName {
    #[serde(default)]
    name: String,
}

#[derive(Debug, Deserialize)]
struct CommitRef {
    #[serde(default)]
    hash: String,
}

#[derive(Debug, Deserialize)]
struct RepositoryRef {
    full_name: Option<String>,
}

/// `Account` (a user, or the account of an access token): `uuid` is what every one has.
#[derive(Debug, Deserialize)]
struct Account {
    uuid: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Links {
    html: Option<Href>,
}

#[derive(Debug, Deserialize)]
struct Href {
    #[serde(default)]
    href: String,
}

/// `Commitstatus`.
#[derive(Debug, Deserialize)]
struct CommitStatus {
    #[serde(default)]
    key: String,
    /// `INPROGRESS`, `SUCCESSFUL`, `FAILED` or `STOPPED`.
    #[serde(default)]
    state: String,
    description: Option<String>,
    url: Option<String>,
    /// When it was last set: the status is overwritten in place.
    updated_on: Option<String>,
    created_on: Option<String>,
}

/// `PullrequestComment`, the fields tagpin reads.
#[derive(Debug, Deserialize)]
struct Comment {
    id: u64,
    content: Option<Rendered>,
    user: Option<Account>,
    #[serde(default)]
    deleted: bool,
}

/// `Commit`, its full hash.
#[derive(Debug, Deserialize)]
struct Commit {
    hash: String,
}

/// A new pull request: `Pullrequest` with its source and destination branches.
#[derive(Debug, Serialize)]
struct NewPullRequest<'a> {
    title: &'a str,
    description: &'a str,
    source: EndpointName<'a>,
    destination: EndpointName<'a>,
    /// tagpin's branch goes once merged, as on GitLab.
    close_source_branch: bool,
}

#[derive(Debug, Serialize)]
struct EndpointName<'a> {
    branch: NameOnly<'a>,
}

#[derive(Debug, Serialize)]
struct NameOnly<'a> {
    name: &'a str,
}

#[derive(Debug, Serialize)]
struct EditPullRequest<'a> {
    title: &'a str,
    description: &'a str,
}

/// `Commitstatus` as posted to `statuses/build`.
#[derive(Debug, Serialize)]
struct NewStatus<'a> {
    key: &'a str,
    state: &'a str,
    name: &'a str,
    description: &'a str,
    url: &'a str,
}

#[derive(Debug, Serialize)]
struct CommentBody<'a> {
    content: RawContent<'a>,
}

#[derive(Debug, Serialize)]
struct RawContent<'a> {
    raw: &'a str,
}

impl Bitbucket {
    /// `api_url` is `https://api.bitbucket.org/2.0`. With `forge.username_env`, `username` is
    /// what its variable (or Secret key) holds, read by the caller with the token: never from
    /// this process's environment, which in the operator is not the object's to name.
    pub fn new(
        forge: &Settings,
        (workspace, repo): (&str, &str),
        (token, username): (String, Option<String>),
    ) -> Result<Bitbucket> {
        let token = token.trim().to_string();
        let value = match (&forge.username_env, username) {
            (Some(env), None) => {
                let detail =
                    format!("forge.username_env names {env}, but no username was read from it");
                return Err(Names::setup(FORGE, detail));
            }
            (Some(_), Some(username)) => {
                let pair = format!("{}:{token}", username.trim());
                let pair = base64::engine::general_purpose::STANDARD.encode(pair);
                format!("Basic {pair}")
            }
            (None, _) => format!("Bearer {token}"),
        };
        let full_name = format!("{workspace}/{repo}");
        Ok(Bitbucket {
            rest: Rest::new(FORGE, forge, full_name, ("authorization", value), &WORDS)?.at(
                &format!("/repositories/{}/{}", encode(workspace), encode(repo)),
            ),
            workspace: workspace.to_string(),
            repo: repo.to_string(),
            signer: StatusSigner::new(FORGE, &token)?,
            dialect: Dialect::new(
                "Bitbucket Cloud",
                ChangeRequestNoun::PullRequest,
                forge.login.clone(),
            ),
            resolved: Mutex::default(),
        })
    }

    /// Every page of a pull request list, most recently updated first; with `until`, pages
    /// stop after the first one that reaches a pull request updated before it.
    async fn list_pull_requests(
        &self,
        what: &str,
        q: &str,
        states: &[&str],
        until: Option<i64>,
    ) -> Result<Vec<PullRequestInfo>> {
        let mut query: Vec<(&str, &str)> = vec![("q", q)];
        query.extend(states.iter().map(|s| ("state", *s)));
        query.push(("sort", "-updated_on"));
        let page_len = PAGE_LEN.to_string();
        query.push(("pagelen", &page_len));
        let first = with_query(&self.rest.url("/pullrequests"), &query);
        let read_page = |url: String| async move { self.read_page(what, &url).await };
        read_change_requests(first, until, read_page, |pr: PullRequest| Some(info(pr))).await
    }

    /// One page of a list, and its `next` when that is on `api_url`.
    async fn read_page<T: DeserializeOwned>(&self, what: &str, url: &str) -> Result<Paged<T>> {
        let answer = self.rest.call(what, Method::GET, url, None).await?;
        let page: Page<T> = self.rest.parse(what, &answer.body)?;
        let next = page
            .next
            .map(|next| next_on_api(&self.rest.api, &next))
            .transpose();
        let next = next.map_err(|e| self.rest.error(what, e.to_string(), None))?;
        Ok((page.values, next))
    }

    /// Replaces the short hashes Bitbucket answers for a pull request's source commit and
    /// merge commit with full ones.
    async fn complete(&self, pr: &mut PullRequestInfo) -> Result<()> {
        pr.head_sha = self.full_hash(&pr.head_sha, pr.number).await?;
        if let Some(merge) = pr.merge_commit_sha.clone() {
            pr.merge_commit_sha = Some(self.full_hash(&merge, pr.number).await?);
        }
        Ok(())
    }

    /// The full hash of commit `short` (`GET /commit/{hash}`), read once per process per
    /// commit; an empty or full one as it is.
    async fn full_hash(&self, short: &str, number: u64) -> Result<String> {
        if short.is_empty() || short.len() >= FULL_HASH {
            return Ok(short.to_string());
        }
        if let Some(full) = lock(&self.resolved).get(short).cloned() {
            return Ok(full);
        }
        let what = format!("read commit {short} of pull request #{number}");
        if !short.bytes().all(|b| b.is_ascii_hexdigit()) {
            let detail = "unexpected answer: the commit is not a hash".to_string();
            return Err(self.rest.error(&what, detail, None));
        }
        let url = self.rest.url(&format!("/commit/{short}"));
        let answer = self.rest.call(&what, Method::GET, &url, None).await?;
        let commit: Commit = self.rest.parse(&what, &answer.body)?;
        if commit.hash.len() != FULL_HASH || !commit.hash.starts_with(short) {
            let detail = "unexpected answer: not the commit asked for".to_string();
            return Err(self.rest.error(&what, detail, None));
        }
        let mut resolved = lock(&self.resolved);
        if resolved.len() >= MAX_RESOLVED {
            resolved.clear();
        }
        resolved.insert(short.to_string(), commit.hash.clone());
        Ok(commit.hash)
    }

    /// Now on Bitbucket's clock, from the `Date` of its latest answer; when none came within
    /// the last minute, the first page of `sha`'s statuses is read for one. Without any `Date`
    /// (a proxy that drops it), this machine's clock: a status it is far off from reads as
    /// not tagpin's, and its soak starts again, never earlier.
    async fn forge_now(&self, sha: &str) -> Result<i64> {
        if let Some(now) = self.rest.clock.now() {
            return Ok(now);
        }
        let what = format!("read Bitbucket's clock (GET build statuses of {sha})");
        let url = with_query(
            &self.rest.url(&format!("/commit/{sha}/statuses")),
            &[("pagelen", "1")],
        );
        self.rest.call(&what, Method::GET, &url, None).await?;
        Ok(self.rest.clock.now().unwrap_or_else(|| {
            tracing::warn!(
                "Bitbucket sent no Date header: tagpin stamps its statuses with this machine's clock, and reads them as its own only while Bitbucket's clock agrees within seconds"
            );
            crate::clock::unix_now()
        }))
    }

    /// Where a person sees commit `sha`: bitbucket.org's page for Bitbucket Cloud, the API's
    /// commit otherwise (a proxy, a test server).
    fn commit_page(&self, sha: &str) -> String {
        if self.rest.names.host == "api.bitbucket.org" {
            format!(
                "https://bitbucket.org/{}/{}/commits/{sha}",
                encode(&self.workspace),
                encode(&self.repo)
            )
        } else {
            self.rest.url(&format!("/commit/{sha}"))
        }
    }

    /// The stamp of a status tagpin posts, said at `at` (see [`StatusSigner`]).
    fn stamp(&self, sha: &str, key: &str, state: &str, description: &str, at: i64) -> String {
        let repo = self.rest.names.repo.as_str();
        self.signer.stamp(&[repo, sha, key, state, description], at)
    }

    /// The status as tagpin reads it: `me` its creator when it is tagpin's own word (its
    /// stamp checks, and it was recorded when it was said), none otherwise.
    fn read_status(&self, sha: &str, s: &CommitStatus, me: &str) -> Option<Status> {
        let state = read_state(&s.state)?;
        let description = s.description.clone().unwrap_or_default();
        let recorded = s
            .updated_on
            .as_deref()
            .or(s.created_on.as_deref())
            .and_then(unix);
        let own = s.url.as_deref().is_some_and(|url| {
            self.status_is_own(sha, &s.key, &s.state, &description, url, recorded)
        });
        Some(Status {
            state,
            description,
            created_at: recorded,
            creator: own.then(|| me.to_string()),
        })
    }

    /// Whether a status whose `url` is given, recorded by Bitbucket at `recorded`, is tagpin's
    /// own word: its stamp checks, and it was recorded when it was said.
    fn status_is_own(
        &self,
        sha: &str,
        key: &str,
        state: &str,
        description: &str,
        url: &str,
        recorded: Option<i64>,
    ) -> bool {
        let Some((_, given)) = url.rsplit_once("#tagpin-") else {
            return false;
        };
        let said = [self.rest.names.repo.as_str(), sha, key, state, description];
        self.signer.owns((sha, key), &said, given, recorded)
    }

    fn comments_url(&self, number: u64) -> String {
        self.rest.url(&format!("/pullrequests/{number}/comments"))
    }
}

impl Forge for Bitbucket {
    fn dialect(&self) -> &Dialect {
        &self.dialect
    }

    /// The `uuid` of the account the token acts as (`GET /user`). An access token is no user:
    /// Bitbucket refuses it `/user`, and `forge.login` names it.
    async fn ask_login(&self) -> Result<String> {
        let what = "read the token's account (GET /user)";
        let why = "Bitbucket answers /user only to a user's app password or API token; for a repository, project or workspace access token, set forge.login to the uuid Bitbucket shows as the author of what the token wrote";
        let account: Account = self.rest.token_user(what, &[401, 403], why).await?;
        let detail = "unexpected answer: no uuid";
        account
            .uuid
            .ok_or_else(|| self.rest.error(what, detail.into(), None))
    }

    /// Filtered with BBQL; `~` is its "contains", and the prefix is checked again on what
    /// comes back.
    async fn list(&self, what: &str, listing: Listing<'_>) -> Result<Vec<PullRequestInfo>> {
        let (source, states, until): (_, &[&str], _) = match listing {
            Listing::From { branch, base } => (("=", branch, base), &ALL_STATES, None),
            Listing::OpenFrom { branch, base } => (("=", branch, base), &["OPEN"], None),
            Listing::OpenInto { prefix, base } => (("~", prefix, base), &["OPEN"], None),
            Listing::ClosedInto {
                prefix,
                base,
                since,
            } => (("~", prefix, base), &CLOSED_STATES, Some(since)),
        };
        let (op, branch, base) = source;
        let (branch, base) = (bbql(branch), bbql(base));
        let q = format!("source.branch.name {op} {branch} AND destination.branch.name = {base}");
        self.list_pull_requests(what, &q, states, until).await
    }

    /// A branch's open ones get their full head hash; merge commits are not resolved there
    /// (see the module's notes). What is in flight is completed whole.
    async fn finish(
        &self,
        mut prs: Vec<PullRequestInfo>,
        purpose: Purpose,
    ) -> Result<Vec<PullRequestInfo>> {
        for pr in &mut prs {
            if purpose == Purpose::InFlight {
                self.complete(pr).await?;
                continue;
            }
            if pr.open {
                pr.head_sha = self.full_hash(&pr.head_sha, pr.number).await?;
            }
            let short = pr
                .merge_commit_sha
                .as_ref()
                .is_some_and(|s| s.len() < FULL_HASH);
            if !pr.open || short {
                pr.merge_commit_sha = None;
            }
        }
        Ok(prs)
    }

    /// Opened with `close_source_branch`, its hashes resolved.
    async fn create(&self, what: &str, new: NewChange<'_>) -> Result<PullRequestInfo> {
        let end = |name| EndpointName {
            branch: NameOnly { name },
        };
        let request = json(&NewPullRequest {
            title: new.title,
            description: new.body,
            source: end(new.branch),
            destination: end(new.base),
            close_source_branch: true,
        });
        let url = self.rest.url("/pullrequests");
        let mut pr = info(self.rest.post(what, &url, request).await?);
        self.complete(&mut pr).await?;
        Ok(pr)
    }

    async fn update_pull_request(&self, number: u64, title: &str, body: &str) -> Result<()> {
        let what = format!("update pull request #{number}");
        let url = self.rest.url(&format!("/pullrequests/{number}"));
        let description = body;
        let edit = json(&EditPullRequest { title, description });
        self.rest.write(&what, Method::PUT, &url, &edit).await
    }

    /// By its id (`#N`), its hashes resolved.
    async fn pull_request(&self, number: u64) -> Result<PullRequestInfo> {
        let what = format!("read pull request #{number}");
        let url = self.rest.url(&format!("/pullrequests/{number}"));
        let answer = self.rest.call(&what, Method::GET, &url, None).await?;
        let mut pr = info(self.rest.parse(&what, &answer.body)?);
        self.complete(&mut pr).await?;
        Ok(pr)
    }

    /// The build status of `context`'s key on `sha` (Bitbucket keeps one per key), with the
    /// token's account as its creator when it is tagpin's own word ([`StatusSigner::owns`]:
    /// signed, and recorded by Bitbucket when tagpin said it), and none otherwise. The
    /// history is not whole when the key holds anything else: tagpin's own, if it set one,
    /// was replaced.
    async fn statuses(&self, key: StatusKey<'_>) -> Result<StatusHistory> {
        let me = self.login().await?;
        let sha = key.sha;
        let what = format!("read build statuses of {sha}");
        let page_len = LONG_PAGE_LEN.to_string();
        let url = self.rest.url(&format!("/commit/{sha}/statuses"));
        let first = with_query(&url, &[("pagelen", &page_len)]);
        let what = what.as_str();
        let read_page = |url: String| async move { self.read_page(what, &url).await };
        let (statuses, whole): (Vec<CommitStatus>, bool) =
            read_pages_whole(first, read_page, |_| false).await?;
        let key = status_key(key.context);
        let mut found: Vec<Status> = statuses
            .iter()
            .filter(|s| s.key == key)
            .filter_map(|s| self.read_status(sha, s, me))
            .collect();
        found.sort_by_key(|s| std::cmp::Reverse(s.created_at));
        let complete = whole && found.iter().all(|s| s.creator.as_deref() == Some(me));
        Ok(StatusHistory {
            statuses: found,
            complete,
        })
    }

    /// Signed as tagpin's own and said now on Bitbucket's clock; Bitbucket overwrites the
    /// status of the same key.
    async fn set_status(&self, which: StatusKey<'_>, said: Said<'_>) -> Result<()> {
        let (sha, context, description) = (which.sha, which.context, said.description);
        let what = format!("set build status {context} on {sha}");
        let key = status_key(context);
        let state = wire_state(said.state);
        let at = self.forge_now(sha).await?;
        let stamp = self.stamp(sha, &key, state, description, at);
        let url = format!("{}#tagpin-{stamp}", self.commit_page(sha));
        let status = json(&NewStatus {
            key: &key,
            state,
            name: context,
            description,
            url: &url,
        });
        let post = self.rest.url(&format!("/commit/{sha}/statuses/build"));
        self.rest
            .call(&what, Method::POST, &post, Some(status))
            .await?;
        self.signer.remember((sha, &key), at);
        Ok(())
    }

    /// Found by the marker among the comments tagpin's account wrote, on every page.
    async fn marked_comment(&self, number: u64, marker: &str) -> Result<Option<Marked>> {
        let me = self.login().await?;
        let what = format!("list comments of pull request #{number}");
        let page_len = LONG_PAGE_LEN.to_string();
        let first = with_query(&self.comments_url(number), &[("pagelen", &page_len)]);
        let what = what.as_str();
        let read_page = |url: String| async move { self.read_page(what, &url).await };
        let comments: Vec<Comment> = read_pages(first, read_page, |_| false).await?;
        Ok(comments.into_iter().find(|c| mine(c, marker, me)).map(|c| {
            let raw = c.content.and_then(|c| c.raw);
            let text = raw.unwrap_or_default();
            Marked {
                id: c.id,
                text,
                ..Marked::default()
            }
        }))
    }

    /// Its `content.raw`, posted to the pull request's comments or put to the comment's own.
    async fn write_comment(&self, number: u64, old: Option<Marked>, body: &str) -> Result<()> {
        let content = CommentBody {
            content: RawContent { raw: body },
        };
        let comments = self.comments_url(number);
        match old.map(|c| c.id) {
            None => {
                let what = format!("comment on pull request #{number}");
                self.rest
                    .write(&what, Method::POST, &comments, &content)
                    .await
            }
            Some(id) => {
                let what = format!("update comment {id} on pull request #{number}");
                let url = format!("{comments}/{id}");
                self.rest.write(&what, Method::PUT, &url, &content).await
            }
        }
    }
}

/// Length of a full Git commit hash in hex.
const FULL_HASH: usize = 40;
/// Every pull request state Bitbucket has.
const ALL_STATES: [&str; 4] = ["OPEN", "MERGED", "DECLINED", "SUPERSEDED"];
/// Those no longer open.
const CLOSED_STATES: [&str; 3] = ["MERGED", "DECLINED", "SUPERSEDED"];

/// A BBQL string literal: in double quotes, `\` and `"` escaped.
fn bbql(value: &str) -> String {
    format!("\"{}\"", value.replace('\\', "\\\\").replace('"', "\\\""))
}

fn with_query(url: &str, query: &[(&str, &str)]) -> String {
    let mut pairs = url::form_urlencoded::Serializer::new(String::new());
    pairs.extend_pairs(query);
    format!("{url}?{}", pairs.finish())
}

/// Why a `next` address is not followed.
#[derive(Debug, thiserror::Error)]
enum PagingError {
    #[error("the next page's address does not parse: {source}")]
    BadUrl {
        #[source]
        source: url::ParseError,
    },
    /// The token would go to another host, or outside the API.
    #[error("Bitbucket named its next page on {found}, not on {api}: not followed")]
    Elsewhere { found: String, api: String },
}

/// `next` when it is on `api`'s scheme, host and port and under its path.
fn next_on_api(api: &str, next: &str) -> Result<String, PagingError> {
    let parsed = url::Url::parse(next).map_err(|source| PagingError::BadUrl { source })?;
    let base = url::Url::parse(api).map_err(|source| PagingError::BadUrl { source })?;
    let same = parsed.scheme() == base.scheme()
        && parsed.host_str() == base.host_str()
        && parsed.port_or_known_default() == base.port_or_known_default()
        && parsed
            .path()
            .starts_with(&format!("{}/", base.path().trim_end_matches('/')));
    if !same {
        let found = match (parsed.host_str(), parsed.port()) {
            (Some(host), Some(port)) => format!("{}://{host}:{port}", parsed.scheme()),
            (Some(host), None) => format!("{}://{host}", parsed.scheme()),
            (None, _) => "an address without a host".to_string(),
        };
        return Err(PagingError::Elsewhere {
            found,
            api: api.to_string(),
        });
    }
    Ok(parsed.to_string())
}

/// What tagpin reads of a Bitbucket pull request.
fn info(pr: PullRequest) -> PullRequestInfo {
    let repo_of = |e: &Option<Endpoint>| {
        e.as_ref()
            .and_then(|e| e.repository.as_ref())
            .and_then(|r| r.full_name.clone())
            .map(|n| n.to_ascii_lowercase())
    };
    let same_repository =
        repo_of(&pr.source).is_some() && repo_of(&pr.source) == repo_of(&pr.destination);
    let merged = pr.state == "MERGED";
    let source = pr.source.as_ref();
    PullRequestInfo {
        number: pr.id,
        open: pr.state == "OPEN",
        merged,
        title: pr.title,
        body: pr
            .description
            .or_else(|| pr.summary.and_then(|s| s.raw))
            .unwrap_or_default(),
        labels: Vec::new(),
        url: pr
            .links
            .and_then(|l| l.html)
            .map(|h| h.href)
            .unwrap_or_default(),
        head_ref: source
            .and_then(|s| s.branch.as_ref())
            .map(|b| b.name.clone())
            .unwrap_or_default(),
        head_sha: source
            .and_then(|s| s.commit.as_ref())
            .map(|c| c.hash.clone())
            .unwrap_or_default(),
        merge_commit_sha: pr
            .merge_commit
            .map(|c| c.hash)
            .filter(|h| merged && !h.is_empty()),
        // Bitbucket has no merge time of its own: a merged pull request's last update is it.
        merged_at: pr.updated_on.as_deref().and_then(unix).filter(|_| merged),
        updated_at: pr.updated_on.as_deref().and_then(unix),
        author: pr.author.and_then(|a| a.uuid).unwrap_or_default(),
        same_repository,
    }
}

/// The status key of `context`: itself when it fits [`MAX_KEY_CHARS`], else its start, `~`
/// and 8 hex digits of its SHA-256, so two long contexts keep two keys.
fn status_key(context: &str) -> String {
    if context.chars().count() <= MAX_KEY_CHARS {
        return context.to_string();
    }
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(context.as_bytes());
    let hash: String = digest.iter().take(4).map(|b| format!("{b:02x}")).collect();
    let start: String = context.chars().take(MAX_KEY_CHARS - 9).collect();
    format!("{start}~{hash}")
}

fn read_state(state: &str) -> Option<StatusState> {
    match state {
        "INPROGRESS" => Some(StatusState::Pending),
        "SUCCESSFUL" => Some(StatusState::Success),
        "FAILED" => Some(StatusState::Failure),
        "STOPPED" => Some(StatusState::Error),
        _ => None,
    }
}

/// Bitbucket's words for tagpin's states: an error (tagpin could not tell) is `STOPPED`, a
/// check that did not finish, rather than `FAILED`.
fn wire_state(state: StatusState) -> &'static str {
    match state {
        StatusState::Pending => "INPROGRESS",
        StatusState::Success => "SUCCESSFUL",
        StatusState::Failure => "FAILED",
        StatusState::Error => "STOPPED",
    }
}

/// Whether `comment` is one `me` wrote carrying `marker`; a deleted one is not.
fn mine(comment: &Comment, marker: &str, me: &str) -> bool {
    let raw = comment.content.as_ref().and_then(|c| c.raw.as_deref());
    let author = comment.user.as_ref().and_then(|u| u.uuid.as_deref());
    !comment.deleted && raw.is_some_and(|raw| raw.contains(marker)) && author == Some(me)
}

/// `forge.workspace` and `forge.repo`, each a Bitbucket slug; another forge's keys are
/// reported.
fn workspace_and_repo(keys: &mut dyn Keys, _: Option<&str>) -> Option<Kind> {
    let elsewhere = "is not Bitbucket's; a Bitbucket Cloud repository is named by forge.workspace and forge.repo (its slug)";
    let foreign = ["forge.owner", "forge.project"];
    let named = ["forge.workspace", "forge.repo"];
    let (workspace, repo) = two_keys(keys, &foreign, elsewhere, named);
    for (key, value) in named.into_iter().zip([&workspace, &repo]) {
        if let Some(value) = value.as_ref().filter(|v| !segment_ok(v)) {
            let problem = format!("{value:?} is not a Bitbucket slug (letters, digits, -, _, .)");
            keys.problem(key, &problem);
        }
    }
    let (workspace, repo) = (workspace?, repo?);
    Some(Kind::Bitbucket { workspace, repo })
}

#[cfg(test)]
mod tests {
    use super::super::engine::MAX_RATE_LIMIT_WAIT;
    use super::super::engine::{assert_merged_twelve, assert_states_round_trip};
    use super::super::engine::{headers, patched, settings};
    use super::*;

    /// A merged pull request in the shape of `Pullrequest` (npm `bitbucket` 2.12.0,
    /// `lib/bitbucket.d.ts`), trimmed of fields tagpin does not read.
    const MERGED: &str = r#"{
      "type": "pullrequest", "id": 12, "title": "Pin 1 image(s) to digests",
      "description": "plan", "summary": {"raw": "plan", "markup": "markdown", "html": "<p>plan</p>"},
      "state": "MERGED", "updated_on": "2026-01-02T02:04:05.123456+00:00",
      "merge_commit": {"hash": "cccccccccccc"},
      "author": {"type": "user", "uuid": "{7a1c}", "display_name": "tagpin"},
      "links": {"html": {"href": "https://bitbucket.org/acme/gitops/pull-requests/12"}},
      "source": {"branch": {"name": "tagpin/main"}, "commit": {"hash": "aaaaaaaaaaaa"},
                 "repository": {"full_name": "acme/gitops"}},
      "destination": {"branch": {"name": "main"}, "commit": {"hash": "bbbbbbbbbbbb"},
                      "repository": {"full_name": "acme/gitops"}}
    }"#;

    fn pr(patch: serde_json::Value) -> PullRequestInfo {
        let value = patched(MERGED, patch);
        info(serde_json::from_value(value).unwrap())
    }

    fn adapter(token: &str) -> Bitbucket {
        let kind = Kind::Bitbucket {
            workspace: "acme".into(),
            repo: "gitops".into(),
        };
        let forge = settings(kind, "https://api.bitbucket.org/2.0");
        Bitbucket::new(&forge, ("acme", "gitops"), (token.into(), None)).unwrap()
    }

    #[test]
    fn a_bitbucket_pull_request_reads_as_tagpin_reads_a_change_request() {
        let merged = pr(serde_json::json!({}));
        assert_merged_twelve(&merged);
        assert_eq!(merged.merge_commit_sha.as_deref(), Some("cccccccccccc"));
        assert_eq!(merged.merged_at, Some(1767319445));
        assert_eq!(merged.author, "{7a1c}");
        assert_eq!(merged.body, "plan");
        let declined = pr(serde_json::json!({"state": "DECLINED", "merge_commit": null}));
        assert!(!declined.open && !declined.merged);
        assert_eq!(declined.merged_at, None);
        let open = pr(serde_json::json!({"state": "OPEN", "merge_commit": null}));
        assert!(open.open);
    }

    #[test]
    fn a_pull_request_from_a_fork_or_a_deleted_fork_is_not_this_repositorys() {
        let fork = pr(
            serde_json::json!({"source": {"branch": {"name": "tagpin/main"},
            "commit": {"hash": "a"}, "repository": {"full_name": "mallory/gitops"}}}),
        );
        assert!(!fork.same_repository);
        let deleted = pr(
            serde_json::json!({"source": {"branch": {"name": "tagpin/main"},
            "commit": {"hash": "a"}, "repository": null}}),
        );
        assert!(!deleted.same_repository);
    }

    #[test]
    fn a_next_page_is_followed_only_on_the_api() {
        let api = "https://api.bitbucket.org/2.0";
        let next = "https://api.bitbucket.org/2.0/repositories/acme/gitops/pullrequests?page=2";
        assert_eq!(next_on_api(api, next).unwrap(), next);
        for elsewhere in [
            "https://evil.example.com/2.0/repositories/acme/gitops/pullrequests?page=2",
            "http://api.bitbucket.org/2.0/repositories/acme/gitops/pullrequests?page=2",
            "https://api.bitbucket.org:8443/2.0/repositories/x",
            "https://api.bitbucket.org/internal/x",
        ] {
            let e = next_on_api(api, elsewhere).unwrap_err().to_string();
            assert!(e.contains("not followed"), "{e}");
        }
    }

    #[test]
    fn states_round_trip_and_keys_fit_forty_characters() {
        assert_states_round_trip(wire_state, read_state);
        assert_eq!(status_key("tagpin/converged"), "tagpin/converged");
        let long = "tagpin/stage/a-very-long-stage-name-for-production-eu";
        let key = status_key(long);
        assert_eq!(key.chars().count(), MAX_KEY_CHARS);
        assert_ne!(key, status_key(&format!("{long}-2")));
    }

    #[test]
    fn only_a_status_tagpin_signed_when_bitbucket_recorded_it_is_its_own() {
        let ours = adapter("token-a");
        let sha = "a".repeat(40);
        let key = "tagpin/converged";
        let at = 1_767_319_445;
        let stamp = ours.stamp(&sha, key, "SUCCESSFUL", "converged", at);
        let url = format!("https://bitbucket.org/acme/gitops/commits/{sha}#tagpin-{stamp}");
        assert!(url.starts_with("https://bitbucket.org/acme/gitops/commits/"));
        let own = |b: &Bitbucket, sha: &str, state, description, url: &str, recorded: i64| {
            b.status_is_own(sha, key, state, description, url, Some(recorded))
        };
        assert!(own(&ours, &sha, "SUCCESSFUL", "converged", &url, at + 1));
        // Another description, state, commit or token: not tagpin's.
        let says = "converged since 2020";
        assert!(!own(&ours, &sha, "SUCCESSFUL", says, &url, at + 1));
        assert!(!own(&ours, &sha, "FAILED", "converged", &url, at + 1));
        assert!(!own(
            &ours,
            &"b".repeat(40),
            "SUCCESSFUL",
            "converged",
            &url,
            at
        ));
        let other = adapter("token-b");
        assert!(!own(&other, &sha, "SUCCESSFUL", "converged", &url, at + 1));
        let ci = "https://ci.example.com/1";
        assert!(!own(&ours, &sha, "SUCCESSFUL", "converged", ci, at + 1));
        // The same status posted again an hour later: Bitbucket records it then, and what
        // tagpin said an hour before is no word of its now.
        let fresh = adapter("token-a");
        assert!(!own(
            &fresh,
            &sha,
            "SUCCESSFUL",
            "converged",
            &url,
            at + 3600
        ));
        // Without a recorded time there is nothing to bind it to.
        assert!(!fresh.status_is_own(&sha, key, "SUCCESSFUL", "converged", &url, None));
    }

    #[test]
    fn a_status_said_before_the_newest_this_process_saw_is_a_replay() {
        let bb = adapter("token-a");
        let sha = "a".repeat(40);
        let key = "tagpin/stage/staging";
        let url = |state: &str, description: &str, at: i64| {
            let stamp = bb.stamp(&sha, key, state, description, at);
            format!("https://bitbucket.org/acme/gitops/commits/{sha}#tagpin-{stamp}")
        };
        let first = url("SUCCESSFUL", "converged since T0", 1_000);
        let broken = url("INPROGRESS", "1 of 2 pods on an old digest", 1_030);
        assert!(bb.status_is_own(
            &sha,
            key,
            "SUCCESSFUL",
            "converged since T0",
            &first,
            Some(1_001)
        ));
        assert!(bb.status_is_own(
            &sha,
            key,
            "INPROGRESS",
            "1 of 2 pods on an old digest",
            &broken,
            Some(1_031)
        ));
        // The first posted again within the window Bitbucket's times allow: this process has
        // seen a newer word of tagpin's there, so it is a replay.
        let again = bb.status_is_own(
            &sha,
            key,
            "SUCCESSFUL",
            "converged since T0",
            &first,
            Some(1_040),
        );
        assert!(!again, "older than the newest seen");
        // What this process set itself counts as seen.
        bb.signer.remember((&sha, key), 2_000);
        let later = url("SUCCESSFUL", "converged since T1", 1_990);
        assert!(!bb.status_is_own(
            &sha,
            key,
            "SUCCESSFUL",
            "converged since T1",
            &later,
            Some(1_995)
        ));
    }

    #[test]
    fn a_rate_limit_without_retry_after_waits_the_window_and_is_reported() {
        let now = std::time::UNIX_EPOCH + Duration::from_secs(1_000);
        assert_eq!((WORDS.wait)(&headers(&[]), now), ROLLING_WINDOW);
        assert!(ROLLING_WINDOW > MAX_RATE_LIMIT_WAIT);
        let told = headers(&[("retry-after", "7")]);
        assert_eq!((WORDS.wait)(&told, now), Duration::from_secs(7));
    }

    #[test]
    fn bbql_strings_are_quoted_and_escaped() {
        assert_eq!(bbql("tagpin/main"), "\"tagpin/main\"");
        assert_eq!(bbql("a\"b\\c"), "\"a\\\"b\\\\c\"");
    }

    #[test]
    fn the_verdict_comment_is_tagpins_own_found_by_its_marker() {
        let comments: Vec<Comment> = serde_json::from_str(
            r#"[{"id": 2, "content": {"raw": "quoting <!-- tagpin-verdict -->"}, "user": {"uuid": "{alice}"}},
                {"id": 3, "content": {"raw": "<!-- tagpin-verdict -->"}, "user": {"uuid": "{bot}"}, "deleted": true},
                {"id": 4, "content": {"raw": "<!-- tagpin-verdict -->\nConverged"}, "user": {"uuid": "{bot}"}}]"#,
        )
        .unwrap();
        let marker = "<!-- tagpin-verdict -->";
        let found = comments.iter().find(|c| mine(c, marker, "{bot}"));
        assert_eq!(found.map(|c| c.id), Some(4));
        assert!(!comments[..2].iter().any(|c| mine(c, marker, "{bot}")));
    }
}
