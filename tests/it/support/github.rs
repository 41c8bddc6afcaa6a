//! A local GitHub REST API server for integration tests.
//!
//! tagpin opens and updates pull requests, labels them, keeps one sticky
//! comment and posts commit statuses. No real GitHub is reachable from the
//! test machines, so this module serves the few REST operations tagpin calls,
//! with in-memory state, on a loopback port.
//!
//! It is built to catch the mistakes a hand-written mock would hide:
//! - Responses start from the example objects in GitHub's own OpenAPI
//!   description (`tests/fixtures/github/openapi-subset.json`, cut from the
//!   npm package `@octokit/openapi` by `extract.mjs` beside it), with only the
//!   stateful fields overwritten, so clients parse GitHub's real shapes.
//! - Every request body and known query parameter is validated against that
//!   description's JSON schema. A request GitHub would reject is answered as
//!   GitHub would (422 for a schema violation, 400 for a body that is not JSON,
//!   404 for an endpoint GitHub does not have), with a message naming the
//!   violation, and is kept as a [`Violation`]. A violation fails the test
//!   that caused it: [`GitHubServer::assert_no_violations`] panics, and so does
//!   `Drop` if any violation is left that the test did not take with
//!   [`GitHubServer::take_violations`] (tests that provoke violations on
//!   purpose take them and assert on them). A test cannot forget to check.
//! - Branches come from a real bare Git repository (read with `git
//!   rev-parse`), so "head branch does not exist" and "no commits between"
//!   behave as on GitHub.
//! - GitHub's own rules that a schema cannot express are enforced: one open
//!   pull request per head+base, 140-character status descriptions, auth.
//! - Faults (rate limits, 5xx, lost responses) can be scripted per request.
//! - Pull requests from forks (`head.repo` another repository than
//!   `base.repo`) and by other authors can be opened with
//!   [`GitHubServer::open_pr_as`], and statuses by other creators posted with
//!   [`GitHubServer::add_status_as`], as outsiders and CI jobs do on GitHub.
//! - Every `200` answer to a `GET` carries an `ETag`; an `If-None-Match` that
//!   matches is answered `304 Not Modified` (which GitHub does not count
//!   against the rate limit) on the operations whose OpenAPI description lists
//!   a 304 (`conditional` in the subset), so tests can count what a client
//!   really spends.
//!
//! The API is served at the root, like `https://api.github.com`: octocrab's
//! `base_uri` keeps any path of the base and prepends it to `/repos/...`, so
//! `api_url()` (`http://127.0.0.1:PORT`) works as a base as it is.
//!
//! Test support panics with a clear message instead of returning errors.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::{Query, Request, State as AxumState};
use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use axum::Router;
use serde_json::{json, Value};
use tokio::task::JoinHandle;

use super::http_fake::{
    self, canonical_reason, fault_status, percent_decode, percent_encode, set_headers, FaultScope,
};

/// The subset of GitHub's OpenAPI description this server follows.
#[path = "github_git.rs"]
mod git_data;

const OPENAPI_SUBSET: &str = include_str!("../../fixtures/github/openapi-subset.json");

/// The login that owns the configured token: the author of every pull
/// request, comment and status created through the API.
pub const TOKEN_USER_LOGIN: &str = "tagpin-bot";

/// GitHub's generic documentation link, used where no operation applies.
const DOCS_REST: &str = "https://docs.github.com/rest";

/// GitHub's limit on a commit status description.
const MAX_STATUS_DESCRIPTION_CHARS: usize = 140;

/// GitHub's default and largest page sizes.
const DEFAULT_PER_PAGE: usize = 30;
const MAX_PER_PAGE: usize = 100;

// ---------------------------------------------------------------------------
// Public types: what tests read back
// ---------------------------------------------------------------------------

/// Whether a pull request is open or closed, as GitHub's `state` says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrState {
    Open,
    Closed,
}

impl PrState {
    pub fn as_str(self) -> &'static str {
        match self {
            PrState::Open => "open",
            PrState::Closed => "closed",
        }
    }
}

/// A pull request as the server holds it.
#[derive(Clone, Debug)]
pub struct PullRequest {
    pub number: u64,
    pub state: PrState,
    pub merged: bool,
    pub draft: bool,
    pub title: String,
    pub body: Option<String>,
    /// Branch name in the bare repository (without `refs/heads/`).
    pub head_ref: String,
    /// The head branch's commit, refreshed from the bare repository while open.
    pub head_sha: String,
    pub base_ref: String,
    pub base_sha: String,
    pub labels: Vec<String>,
    /// Login of the author.
    pub user: String,
    /// For a pull request from a fork: the owner of the fork (`head.repo` is
    /// `fork_owner/<repo>`). Its head then lives in the fork, so it is not
    /// refreshed from the bare repository.
    pub fork_owner: Option<String>,
    pub merge_commit_sha: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    pub closed_at: Option<String>,
    pub merged_at: Option<String>,
}

/// An issue (or pull request) comment.
#[derive(Clone, Debug)]
pub struct Comment {
    pub id: u64,
    /// The issue or pull request number it belongs to.
    pub issue: u64,
    pub user: String,
    pub body: String,
    pub created_at: String,
    pub updated_at: String,
}

/// A commit status as posted.
#[derive(Clone, Debug)]
pub struct CommitStatus {
    pub id: u64,
    pub sha: String,
    pub state: String,
    pub context: String,
    pub description: Option<String>,
    pub target_url: Option<String>,
    pub creator: String,
    pub created_at: String,
}

/// One request the server received (`user` is [`TOKEN_USER_LOGIN`] when the
/// request presented the server's token).
pub use super::http_fake::RecordedRequest;

/// A request that real GitHub would reject no matter what state it is in:
/// a body or query that breaks the published schema, a GitHub-side format
/// rule, malformed JSON, or an endpoint this server does not implement.
#[derive(Clone, Debug)]
pub struct Violation {
    pub method: String,
    pub path: String,
    /// GitHub's operationId, when the request matched one.
    pub operation: Option<String>,
    pub reason: String,
    pub body: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} ({}): {}; body: {}",
            self.method,
            self.path,
            self.operation.as_deref().unwrap_or("no operation"),
            self.reason,
            self.body
        )
    }
}

/// A scripted answer for the next matching requests, instead of (or after)
/// the normal handling.
#[derive(Clone, Debug)]
pub struct Fault {
    /// Which requests get this answer (e.g. path `"/pulls"`), how many times,
    /// and whether before or after the work is done.
    pub scope: FaultScope,
    pub status: u16,
    /// Extra response headers; they replace the normal rate-limit headers.
    pub headers: Vec<(String, String)>,
    pub body: Value,
}

impl Fault {
    /// Answer the next matching request with `status` and a GitHub-like body.
    pub fn new(method: &str, path_contains: &str, status: u16) -> Self {
        Fault {
            scope: FaultScope::new(method, path_contains),
            status,
            headers: Vec::new(),
            body: error_body(status, canonical_reason(status), DOCS_REST),
        }
    }

    /// GitHub's primary rate limit: 403 with `x-ratelimit-remaining: 0` and
    /// `x-ratelimit-reset` at `reset_epoch` (Unix seconds).
    pub fn rate_limit_exhausted(method: &str, path_contains: &str, reset_epoch: u64) -> Self {
        Fault::new(method, path_contains, 403)
            .header("x-ratelimit-limit", "5000")
            .header("x-ratelimit-remaining", "0")
            .header("x-ratelimit-used", "5000")
            .header("x-ratelimit-reset", &reset_epoch.to_string())
            .body(error_body(
                403,
                "API rate limit exceeded for user ID 1.",
                "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api",
            ))
    }

    /// GitHub's secondary rate limit: 429 with `retry-after`.
    pub fn secondary_rate_limit(method: &str, path_contains: &str, retry_after_secs: u64) -> Self {
        Fault::new(method, path_contains, 429)
            .header("retry-after", &retry_after_secs.to_string())
            .body(error_body(
                429,
                "You have exceeded a secondary rate limit. Please wait a few minutes before you try again.",
                "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits",
            ))
    }

    pub fn times(mut self, times: usize) -> Self {
        self.scope.times = times;
        self
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    pub fn body(mut self, body: Value) -> Self {
        self.body = body;
        self
    }

    pub fn after_effect(mut self) -> Self {
        self.scope.after_effect = true;
        self
    }
}

// ---------------------------------------------------------------------------
// The server
// ---------------------------------------------------------------------------

/// A running fake GitHub for one `owner/repo`. Stops when dropped.
pub struct GitHubServer {
    inner: Arc<Inner>,
    task: JoinHandle<()>,
}

impl GitHubServer {
    /// Starts a server on 127.0.0.1 (a fresh port) that accepts `token`
    /// (as `Bearer` or `token`) and serves `owner/repo`, whose branches are
    /// those of the bare Git repository at `bare_repo`.
    pub async fn start(token: &str, owner: &str, repo: &str, bare_repo: &Path) -> GitHubServer {
        for (what, name) in [("owner", owner), ("repo", repo)] {
            assert!(
                !name.is_empty()
                    && name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')),
                "{what} {name:?} must be a plain GitHub name"
            );
        }
        assert!(!token.is_empty(), "the token must not be empty");
        let check = std::process::Command::new("git")
            .arg("--git-dir")
            .arg(bare_repo)
            .args(["rev-parse", "--git-dir"])
            .output()
            .expect("run git (is it installed?)");
        assert!(
            check.status.success(),
            "{} is not a Git repository: {}",
            bare_repo.display(),
            String::from_utf8_lossy(&check.stderr)
        );

        let (listener, base) = http_fake::loopback("GitHub").await;
        let spec = Spec::load(&base, owner, repo);
        let inner = Arc::new(Inner {
            web_flow: git_data::WebFlow::new(),
            token: token.to_string(),
            owner: owner.to_string(),
            repo: repo.to_string(),
            git_dir: bare_repo.to_path_buf(),
            base,
            spec,
            state: Mutex::new(ServerState::default()),
            clock_offset: Default::default(),
        });
        let router = Router::new().fallback(handle).with_state(inner.clone());
        let task = http_fake::serve(listener, router, "GitHub");
        GitHubServer { inner, task }
    }

    /// The allowed-signers line (`gpg.ssh.allowedSignersFile`) of the key this server signs
    /// the commits it makes with, as GitHub signs with its web-flow key.
    pub fn web_flow_allowed_signers(&self) -> String {
        self.inner.web_flow.allowed_signers()
    }

    /// Base URL for clients, like `https://api.github.com` (no trailing
    /// slash); give it to octocrab's `base_uri`.
    pub fn api_url(&self) -> String {
        self.inner.base.clone()
    }

    /// Where web links (`html_url`) of this server point, e.g.
    /// `http://127.0.0.1:PORT/owner/repo/pull/1`.
    pub fn html_url(&self) -> String {
        self.inner.base.clone()
    }

    /// Scripts a fault for the next matching requests. Faults are tried in
    /// the order they were added.
    pub fn inject(&self, fault: Fault) {
        self.inner.lock().faults.push(fault);
    }

    /// The next `POST .../pulls` (create) answers `status` before creating
    /// anything.
    pub fn fail_next_pr_create(&self, status: u16) {
        let path = format!("/repos/{}/{}/pulls", self.inner.owner, self.inner.repo);
        self.inject(Fault::new("POST", &path, status));
    }

    /// Marks pull request `number` merged, as if a person pressed the button.
    pub fn merge_pr(&self, number: u64, merge_commit_sha: &str) {
        let now = self.inner.now();
        let mut state = self.inner.lock();
        let pr = state.pr_mut(number);
        assert!(!pr.merged, "pull request #{number} is already merged");
        pr.state = PrState::Closed;
        pr.merged = true;
        pr.merge_commit_sha = Some(merge_commit_sha.to_string());
        pr.merged_at = Some(now.clone());
        pr.closed_at = Some(now.clone());
        pr.updated_at = now;
    }

    /// Closes pull request `number` without merging, as a person would.
    pub fn close_pr(&self, number: u64) {
        let now = self.inner.now();
        let mut state = self.inner.lock();
        let pr = state.pr_mut(number);
        assert!(!pr.merged, "pull request #{number} is merged");
        pr.state = PrState::Closed;
        pr.closed_at = Some(now.clone());
        pr.updated_at = now;
    }

    /// Adds a comment by another user (e.g. a reviewer), so tests can check
    /// that a sticky comment is found among others.
    pub fn add_comment_as(&self, issue: u64, login: &str, body: &str) -> u64 {
        let mut state = self.inner.lock();
        assert!(
            state.prs.iter().any(|p| p.number == issue),
            "no pull request #{issue}"
        );
        state.add_comment(issue, login, body)
    }

    /// An outsider's pull request as an attacker would open it: `mallory`'s
    /// fork has a branch named like tagpin's (`tagpin/main`) at `head_sha`,
    /// proposed into `main`. Returns its number.
    pub fn open_outsider_fork_pr(&self, head_sha: &str, title: &str, body: &str) -> u64 {
        self.open_pr_as(
            "mallory",
            Some("mallory"),
            "tagpin/main",
            head_sha,
            "main",
            title,
            body,
        )
    }

    /// Opens a pull request as `user` would on GitHub's web page, without the
    /// API: from `head_ref` of this repository, or, with `fork_owner`, from
    /// `head_ref` of that owner's fork whose head commit is `head_sha` (a
    /// commit the bare repository holds, as GitHub keeps `refs/pull/N/head`).
    /// Returns its number.
    #[allow(clippy::too_many_arguments)]
    pub fn open_pr_as(
        &self,
        user: &str,
        fork_owner: Option<&str>,
        head_ref: &str,
        head_sha: &str,
        base_ref: &str,
        title: &str,
        body: &str,
    ) -> u64 {
        let base_sha = rev_parse_now(&self.inner.git_dir, &format!("refs/heads/{base_ref}"))
            .unwrap_or_else(|| panic!("no base branch {base_ref}"));
        let head_sha = rev_parse_now(&self.inner.git_dir, head_sha)
            .unwrap_or_else(|| panic!("no commit {head_sha} for the head"));
        let now = self.inner.now();
        let mut state = self.inner.lock();
        state.last_issue_number += 1;
        let number = state.last_issue_number;
        state.prs.push(PullRequest {
            number,
            state: PrState::Open,
            merged: false,
            draft: false,
            title: title.to_string(),
            body: Some(body.to_string()),
            head_ref: head_ref.to_string(),
            head_sha,
            base_ref: base_ref.to_string(),
            base_sha,
            labels: Vec::new(),
            user: user.to_string(),
            fork_owner: fork_owner.map(str::to_string),
            merge_commit_sha: None,
            created_at: now.clone(),
            updated_at: now,
            closed_at: None,
            merged_at: None,
        });
        number
    }

    /// Posts a commit status as `login` (a CI job, a person), not as the
    /// token's user.
    pub fn add_status_as(
        &self,
        login: &str,
        sha: &str,
        state: &str,
        context: &str,
        description: &str,
    ) {
        let sha =
            rev_parse_now(&self.inner.git_dir, sha).unwrap_or_else(|| panic!("no commit {sha}"));
        let mut server = self.inner.lock();
        server.last_status_id += 1;
        let status = CommitStatus {
            id: server.last_status_id,
            sha,
            state: state.to_string(),
            context: context.to_string(),
            description: Some(description.to_string()),
            target_url: None,
            creator: login.to_string(),
            created_at: self.inner.now(),
        };
        server.statuses.push(status);
    }

    /// All pull requests, by number.
    pub fn prs(&self) -> Vec<PullRequest> {
        self.inner.lock().prs.clone()
    }

    /// The comments on issue or pull request `issue`, oldest first.
    pub fn comments(&self, issue: u64) -> Vec<Comment> {
        let state = self.inner.lock();
        state
            .comments
            .iter()
            .filter(|c| c.issue == issue)
            .cloned()
            .collect()
    }

    /// Moves the server's clock `by` ahead: what it creates from now on (statuses, pull
    /// requests) carries the later time. A test that moves tagpin's clock the same way lets
    /// a soak pass without waiting for it.
    pub fn advance_clock(&self, by: Duration) {
        self.inner
            .clock_offset
            .fetch_add(by.as_secs(), std::sync::atomic::Ordering::Relaxed);
    }

    /// How far [`GitHubServer::advance_clock`] moved the server's clock.
    pub fn clock_offset(&self) -> Duration {
        Duration::from_secs(
            self.inner
                .clock_offset
                .load(std::sync::atomic::Ordering::Relaxed),
        )
    }

    /// The statuses posted for commit `sha`, oldest first.
    /// Whether a status `context` in `state` was posted on `sha`.
    pub fn has_status(&self, sha: &str, context: &str, state: &str) -> bool {
        self.statuses(sha)
            .iter()
            .any(|s| s.context == context && s.state == state)
    }

    pub fn statuses(&self, sha: &str) -> Vec<CommitStatus> {
        let state = self.inner.lock();
        state
            .statuses
            .iter()
            .filter(|s| s.sha == sha)
            .cloned()
            .collect()
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.inner.lock().requests.clone()
    }

    /// Requests GitHub would have rejected as malformed, so far (still
    /// pending: `Drop` fails the test unless they are taken).
    pub fn violations(&self) -> Vec<Violation> {
        self.inner.lock().violations.clone()
    }

    /// Returns and forgets the violations, for tests that provoke them and
    /// assert on what they got. Whatever is not taken fails the test on `Drop`.
    pub fn take_violations(&self) -> Vec<Violation> {
        std::mem::take(&mut self.inner.lock().violations)
    }

    /// Panics with the list of violations if there are any.
    pub fn assert_no_violations(&self) {
        http_fake::assert_no_violations(&self.violations(), "GitHub", "reject");
    }
}

impl Drop for GitHubServer {
    /// Fails the test that caused a violation and did not take it.
    fn drop(&mut self) {
        self.task.abort();
        let violations = std::mem::take(&mut self.inner.lock().violations);
        http_fake::fail_on_untaken(&violations, "GitHub", "reject");
    }
}

// ---------------------------------------------------------------------------
// A bare repository for tests
// ---------------------------------------------------------------------------

/// A real bare Git repository in a temp dir, whose branches the server reads.
/// Commits are made with plumbing commands, so no work tree or user config
/// is needed.
pub struct TestRepo {
    dir: tempfile::TempDir,
}

impl TestRepo {
    /// An empty bare repository.
    pub fn new() -> TestRepo {
        let dir = tempfile::Builder::new()
            .prefix("tagpin-github-repo-")
            .tempdir()
            .expect("temp dir for bare repo");
        let repo = TestRepo { dir };
        repo.git(&["init", "--bare", "--quiet"], None);
        repo
    }

    /// The bare repository's path (its git dir).
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Commits `content` as `file` on `branch` (created if missing, parent
    /// is the branch's current commit) and returns the new commit's SHA.
    pub fn commit_file(&self, branch: &str, file: &str, content: &str) -> String {
        let blob = self.git(&["hash-object", "-w", "--stdin"], Some(content));
        let tree = self.git(&["mktree"], Some(&format!("100644 blob {blob}\t{file}\n")));
        let mut args = vec!["commit-tree", tree.as_str(), "-m", "test commit"];
        let parent = self.branch_sha(branch);
        if let Some(parent) = &parent {
            args.extend(["-p", parent.as_str()]);
        }
        let commit = self.git(&args, None);
        self.git(
            &["update-ref", &format!("refs/heads/{branch}"), &commit],
            None,
        );
        commit
    }

    /// Points `branch` at `sha` (creating it if missing).
    pub fn set_branch(&self, branch: &str, sha: &str) {
        self.git(&["update-ref", &format!("refs/heads/{branch}"), sha], None);
    }

    /// The commit `branch` points at, if it exists.
    pub fn branch_sha(&self, branch: &str) -> Option<String> {
        rev_parse_now(self.dir.path(), &format!("refs/heads/{branch}"))
    }

    pub fn delete_branch(&self, branch: &str) {
        self.git(&["update-ref", "-d", &format!("refs/heads/{branch}")], None);
    }

    fn command(&self, args: &[&str]) -> std::process::Command {
        let mut command = std::process::Command::new("git");
        command
            .arg("--git-dir")
            .arg(self.dir.path())
            .args(args)
            .env("GIT_AUTHOR_NAME", "tagpin test")
            .env("GIT_AUTHOR_EMAIL", "test@tagpin.invalid")
            .env("GIT_COMMITTER_NAME", "tagpin test")
            .env("GIT_COMMITTER_EMAIL", "test@tagpin.invalid");
        command
    }

    fn git(&self, args: &[&str], stdin: Option<&str>) -> String {
        use std::io::Write as _;
        use std::process::Stdio;
        let mut child = self
            .command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run git");
        let mut input = child.stdin.take().expect("git stdin");
        if let Some(text) = stdin {
            input.write_all(text.as_bytes()).expect("write git stdin");
        }
        drop(input);
        let output = child.wait_with_output().expect("wait for git");
        assert!(
            output.status.success(),
            "git {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).trim().to_string()
    }
}

impl Default for TestRepo {
    fn default() -> Self {
        TestRepo::new()
    }
}

// ---------------------------------------------------------------------------
// State
// ---------------------------------------------------------------------------

struct Inner {
    /// GitHub's own signing key, for the commits it makes (`POST /git/commits`).
    web_flow: git_data::WebFlow,
    token: String,
    owner: String,
    repo: String,
    git_dir: PathBuf,
    base: String,
    spec: Spec,
    state: Mutex<ServerState>,
    /// How far the server's clock is ahead of the machine's ([`GitHubServer::advance_clock`]).
    clock_offset: std::sync::atomic::AtomicU64,
}

impl Inner {
    /// The server's time as GitHub writes it (`2011-01-26T19:01:12Z`), for what it creates.
    fn now(&self) -> String {
        let offset = self.clock_offset.load(std::sync::atomic::Ordering::Relaxed);
        super::rfc3339(SystemTime::now() + Duration::from_secs(offset))
    }

    /// [`Inner::now`] in Unix seconds.
    fn unix_now(&self) -> u64 {
        unix_now() + self.clock_offset.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn lock(&self) -> MutexGuard<'_, ServerState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn repo_api(&self) -> String {
        format!("{}/repos/{}/{}", self.base, self.owner, self.repo)
    }

    fn repo_html(&self) -> String {
        format!("{}/{}/{}", self.base, self.owner, self.repo)
    }
}

#[derive(Default)]
struct ServerState {
    prs: Vec<PullRequest>,
    comments: Vec<Comment>,
    statuses: Vec<CommitStatus>,
    requests: Vec<RecordedRequest>,
    violations: Vec<Violation>,
    faults: Vec<Fault>,
    /// Label name -> id; GitHub creates a label the first time it is added.
    label_ids: BTreeMap<String, u64>,
    /// Issues and pull requests share one number sequence on GitHub.
    last_issue_number: u64,
    last_comment_id: u64,
    last_status_id: u64,
}

impl ServerState {
    fn pr_mut(&mut self, number: u64) -> &mut PullRequest {
        self.prs
            .iter_mut()
            .find(|p| p.number == number)
            .unwrap_or_else(|| panic!("no pull request #{number}"))
    }

    fn add_comment(&mut self, issue: u64, login: &str, body: &str) -> u64 {
        // Real comment ids are large and unrelated to issue numbers; start
        // high so a client that mixes them up is caught.
        self.last_comment_id = self.last_comment_id.max(1_000_000) + 1;
        let now = now_iso8601();
        self.comments.push(Comment {
            id: self.last_comment_id,
            issue,
            user: login.to_string(),
            body: body.to_string(),
            created_at: now.clone(),
            updated_at: now,
        });
        self.last_comment_id
    }

    /// The scripted fault for this request, before (`after` false) or after
    /// its work is done.
    fn take_fault(&mut self, method: &str, path: &str, after: bool) -> Option<Fault> {
        http_fake::take_fault(&mut self.faults, |f| &mut f.scope, method, path, after)
    }
}

// ---------------------------------------------------------------------------
// The OpenAPI subset
// ---------------------------------------------------------------------------

struct Spec {
    operations: HashMap<String, Operation>,
}

struct Operation {
    id: String,
    documentation_url: String,
    query: Vec<(String, jsonschema::Validator, bool)>,
    body_required: bool,
    body: Option<jsonschema::Validator>,
    success_status: StatusCode,
    /// GitHub documents `304 Not Modified` for it: `If-None-Match` is honoured.
    conditional: bool,
    example: Value,
}

impl Spec {
    /// Parses the committed subset and points its example URLs at this
    /// server and this `owner/repo`.
    fn load(base: &str, owner: &str, repo: &str) -> Spec {
        let subset: Value = serde_json::from_str(OPENAPI_SUBSET).expect("openapi-subset.json");
        let examples_text = serde_json::to_string(&subset["examples"]).expect("examples");
        let examples_text = examples_text
            .replace(
                "https://api.github.com/repos/octocat/Hello-World",
                &format!("{base}/repos/{owner}/{repo}"),
            )
            .replace(
                "https://github.com/octocat/Hello-World",
                &format!("{base}/{owner}/{repo}"),
            )
            .replace("octocat/Hello-World", &format!("{owner}/{repo}"))
            .replace("https://api.github.com", base)
            .replace("https://github.com", base);
        let examples: Value = serde_json::from_str(&examples_text).expect("localized examples");

        let mut operations = HashMap::new();
        let ops = subset["operations"].as_object().expect("operations");
        for (id, op) in ops {
            let query = op["query_parameters"]
                .as_object()
                .expect("query_parameters")
                .iter()
                .map(|(name, schema)| {
                    let is_integer = schema["type"] == "integer";
                    let validator = jsonschema::validator_for(schema)
                        .unwrap_or_else(|e| panic!("{id}: query {name} schema: {e}"));
                    (name.clone(), validator, is_integer)
                })
                .collect();
            let body = match &op["request_schema"] {
                Value::Null => None,
                schema => Some(
                    jsonschema::validator_for(schema)
                        .unwrap_or_else(|e| panic!("{id}: request schema: {e}")),
                ),
            };
            let example_name = op["example"].as_str().expect("example name");
            let example = examples[example_name].clone();
            assert!(!example.is_null(), "{id}: example {example_name} missing");
            let status = op["success_status"].as_u64().expect("success_status") as u16;
            operations.insert(
                id.clone(),
                Operation {
                    id: id.clone(),
                    documentation_url: op["documentation_url"]
                        .as_str()
                        .unwrap_or(DOCS_REST)
                        .to_string(),
                    query,
                    body_required: op["request_body_required"] == true,
                    body,
                    success_status: StatusCode::from_u16(status).expect("status"),
                    conditional: op["conditional"] == true,
                    example,
                },
            );
        }
        Spec { operations }
    }

    fn op(&self, id: &str) -> &Operation {
        self.operations
            .get(id)
            .unwrap_or_else(|| panic!("operation {id} missing from openapi-subset.json"))
    }
}

// ---------------------------------------------------------------------------
// Request handling
// ---------------------------------------------------------------------------

/// A route this server knows, with its path parameters.
enum Route {
    ListPulls,
    CreatePull,
    GetPull(u64),
    UpdatePull(u64),
    AddLabels(u64),
    ListComments(u64),
    CreateComment(u64),
    UpdateComment(u64),
    CreateStatus(String),
    ListStatuses(String),
    CombinedStatus(String),
    AuthenticatedUser,
    CreateBlob,
    CreateTree,
    CreateCommit,
    GetRef(String),
    CreateRef,
    UpdateRef(String),
}

impl Route {
    fn operation_id(&self) -> &'static str {
        match self {
            Route::ListPulls => "pulls/list",
            Route::CreatePull => "pulls/create",
            Route::GetPull(_) => "pulls/get",
            Route::UpdatePull(_) => "pulls/update",
            Route::AddLabels(_) => "issues/add-labels",
            Route::ListComments(_) => "issues/list-comments",
            Route::CreateComment(_) => "issues/create-comment",
            Route::UpdateComment(_) => "issues/update-comment",
            Route::CreateStatus(_) => "repos/create-commit-status",
            Route::ListStatuses(_) => "repos/list-commit-statuses-for-ref",
            Route::CombinedStatus(_) => "repos/get-combined-status-for-ref",
            Route::AuthenticatedUser => "users/get-authenticated",
            Route::CreateBlob => "git/create-blob",
            Route::CreateTree => "git/create-tree",
            Route::CreateCommit => "git/create-commit",
            Route::GetRef(_) => "git/get-ref",
            Route::CreateRef => "git/create-ref",
            Route::UpdateRef(_) => "git/update-ref",
        }
    }
}

/// What routing found for a path inside `/repos/{owner}/{repo}/`.
enum Routed {
    Known(Route),
    /// Another owner/repo: GitHub answers 404, which is not a client bug.
    OtherRepo,
    /// Nothing here serves it: a 404 that tests should hear about.
    Unimplemented,
}

/// Maps method + path to a route. GitHub accepts `POST` where the
/// documentation says `PATCH` (octocrab's `update_comment` relies on it),
/// so both are routed to the update operations.
fn route(method: &Method, path: &str, owner: &str, repo: &str) -> Routed {
    let segments: Vec<String> = path
        .trim_start_matches('/')
        .split('/')
        .map(percent_decode)
        .collect();
    let seg: Vec<&str> = segments.iter().map(String::as_str).collect();
    let patch_like = *method == Method::PATCH || *method == Method::POST;
    let number = |s: &str| s.parse::<u64>().ok().filter(|n| *n > 0);
    match seg.as_slice() {
        ["user"] if *method == Method::GET => Routed::Known(Route::AuthenticatedUser),
        ["repos", o, r, rest @ ..] => {
            if !o.eq_ignore_ascii_case(owner) || !r.eq_ignore_ascii_case(repo) {
                return Routed::OtherRepo;
            }
            let route = match rest {
                ["pulls"] if *method == Method::GET => Route::ListPulls,
                ["pulls"] if *method == Method::POST => Route::CreatePull,
                ["pulls", n] if *method == Method::GET => match number(n) {
                    Some(n) => Route::GetPull(n),
                    None => return Routed::Unimplemented,
                },
                ["pulls", n] if patch_like => match number(n) {
                    Some(n) => Route::UpdatePull(n),
                    None => return Routed::Unimplemented,
                },
                ["issues", "comments", id] if patch_like => match number(id) {
                    Some(id) => Route::UpdateComment(id),
                    None => return Routed::Unimplemented,
                },
                ["issues", n, "labels"] if *method == Method::POST => match number(n) {
                    Some(n) => Route::AddLabels(n),
                    None => return Routed::Unimplemented,
                },
                ["issues", n, "comments"] => match (number(n), method) {
                    (Some(n), &Method::GET) => Route::ListComments(n),
                    (Some(n), &Method::POST) => Route::CreateComment(n),
                    _ => return Routed::Unimplemented,
                },
                // `{sha}` and `{ref}` may span segments (`heads/main`).
                ["statuses", sha @ ..] if *method == Method::POST && !sha.is_empty() => {
                    Route::CreateStatus(sha.join("/"))
                }
                ["commits", r @ .., "statuses"] if *method == Method::GET && !r.is_empty() => {
                    Route::ListStatuses(r.join("/"))
                }
                ["commits", r @ .., "status"] if *method == Method::GET && !r.is_empty() => {
                    Route::CombinedStatus(r.join("/"))
                }
                ["git", "blobs"] if *method == Method::POST => Route::CreateBlob,
                ["git", "trees"] if *method == Method::POST => Route::CreateTree,
                ["git", "commits"] if *method == Method::POST => Route::CreateCommit,
                ["git", "refs"] if *method == Method::POST => Route::CreateRef,
                ["git", "ref", r @ ..] if *method == Method::GET && !r.is_empty() => {
                    Route::GetRef(r.join("/"))
                }
                ["git", "refs", r @ ..] if patch_like && !r.is_empty() => {
                    Route::UpdateRef(r.join("/"))
                }
                _ => return Routed::Unimplemented,
            };
            Routed::Known(route)
        }
        _ => Routed::Unimplemented,
    }
}

/// What a handler answers before headers are added.
struct Reply {
    status: StatusCode,
    body: Value,
    headers: Vec<(String, String)>,
}

impl Reply {
    fn new(status: StatusCode, body: Value) -> Reply {
        Reply {
            status,
            body,
            headers: Vec::new(),
        }
    }

    fn with_header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }
}

/// The request as handlers see it.
struct Incoming {
    method: Method,
    path: String,
    query: Vec<(String, String)>,
    body: Value,
}

/// The single axum handler: records, injects faults, authenticates, routes,
/// validates and dispatches.
async fn handle(AxumState(inner): AxumState<Arc<Inner>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let method = parts.method.clone();
    let path = parts.uri.path().to_string();
    let raw_query = parts.uri.query().map(str::to_string);
    let body_text = http_fake::body_text(body).await;
    let user = check_auth(&inner, &parts.headers)
        .is_none()
        .then(|| TOKEN_USER_LOGIN.to_string());
    let index = http_fake::record(
        &mut inner.lock().requests,
        method.as_str(),
        &path,
        raw_query.as_deref(),
        &body_text,
        user,
    );

    let reply = answer(
        &inner,
        &parts.headers,
        &parts.uri,
        &method,
        &path,
        &body_text,
    )
    .await;

    inner.lock().requests[index].status = reply.status.as_u16();
    into_response(reply)
}

async fn answer(
    inner: &Inner,
    headers: &HeaderMap,
    uri: &Uri,
    method: &Method,
    path: &str,
    body_text: &str,
) -> Reply {
    let fault = inner.lock().take_fault(method.as_str(), path, false);
    if let Some(fault) = fault {
        return fault_reply(fault);
    }

    if let Some(reply) = check_auth(inner, headers) {
        return reply;
    }

    let route = match route(method, path, &inner.owner, &inner.repo) {
        Routed::Known(route) => route,
        Routed::OtherRepo => return not_found(),
        Routed::Unimplemented => {
            let reason = "no such endpoint in the GitHub test server (or GitHub)";
            record_violation(inner, method, path, None, reason, body_text);
            return not_found_message(&format!("Not Found\n\n{reason}"));
        }
    };
    let op = inner.spec.op(route.operation_id());

    let query: Vec<(String, String)> = Query::<Vec<(String, String)>>::try_from_uri(uri)
        .map(|q| q.0)
        .unwrap_or_default();
    if let Err(reason) = validate_query(op, &query) {
        record_violation(inner, method, path, Some(&op.id), &reason, body_text);
        return invalid_request(op, &reason);
    }

    let body = if *method == Method::GET {
        Value::Null
    } else {
        match parse_body(op, body_text) {
            Ok(body) => body,
            Err(reason) => {
                record_violation(inner, method, path, Some(&op.id), &reason, body_text);
                return Reply::new(
                    StatusCode::BAD_REQUEST,
                    error_body(
                        400,
                        &format!("Problems parsing JSON\n\n{reason}"),
                        &op.documentation_url,
                    ),
                );
            }
        }
    };
    if let (Some(validator), false) = (&op.body, body.is_null()) {
        let errors: Vec<String> = validator
            .iter_errors(&body)
            .map(|e| match e.instance_path().as_str() {
                "" => e.to_string(),
                at => format!("{e} (at {at})"),
            })
            .collect();
        if !errors.is_empty() {
            let reason = errors.join("; ");
            record_violation(inner, method, path, Some(&op.id), &reason, body_text);
            return invalid_request(op, &reason);
        }
    }

    let incoming = Incoming {
        method: method.clone(),
        path: path.to_string(),
        query,
        body,
    };
    let reply = match route {
        Route::ListPulls => list_pulls(inner, op, &incoming).await,
        Route::CreatePull => create_pull(inner, op, &incoming).await,
        Route::GetPull(n) => get_pull(inner, op, n).await,
        Route::UpdatePull(n) => update_pull(inner, op, n, &incoming).await,
        Route::AddLabels(n) => add_labels(inner, op, n, &incoming),
        Route::ListComments(n) => list_comments(inner, op, n, &incoming),
        Route::CreateComment(n) => create_comment(inner, op, n, &incoming),
        Route::UpdateComment(id) => update_comment(inner, op, id, &incoming),
        Route::CreateStatus(sha) => create_status(inner, op, &sha, &incoming, body_text).await,
        Route::ListStatuses(r) => list_statuses(inner, op, &r, &incoming).await,
        Route::CombinedStatus(r) => combined_status(inner, op, &r).await,
        Route::AuthenticatedUser => Reply::new(
            op.success_status,
            user_json(inner, &op.example, TOKEN_USER_LOGIN),
        ),
        Route::CreateBlob => git_data::create_blob(inner, op, &incoming).await,
        Route::CreateTree => git_data::create_tree(inner, op, &incoming).await,
        Route::CreateCommit => git_data::create_commit(inner, op, &incoming).await,
        Route::GetRef(r) => git_data::get_ref(inner, op, &r).await,
        Route::CreateRef => git_data::create_ref(inner, op, &incoming).await,
        Route::UpdateRef(r) => git_data::update_ref(inner, op, &r, &incoming).await,
    };
    let reply = if *method == Method::GET {
        conditional(op, headers, reply)
    } else {
        reply
    };

    let fault = inner.lock().take_fault(method.as_str(), path, true);
    match fault {
        Some(fault) => fault_reply(fault),
        None => reply,
    }
}

fn check_auth(inner: &Inner, headers: &HeaderMap) -> Option<Reply> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Some(Reply::new(
            StatusCode::UNAUTHORIZED,
            error_body(401, "Requires authentication", DOCS_REST),
        ));
    };
    let value = value.to_str().unwrap_or("");
    let presented = value
        .split_once(' ')
        .filter(|(scheme, _)| {
            scheme.eq_ignore_ascii_case("bearer") || scheme.eq_ignore_ascii_case("token")
        })
        .map(|(_, token)| token.trim());
    if presented == Some(inner.token.as_str()) {
        None
    } else {
        // Never include what was presented: it may be a real secret.
        Some(Reply::new(
            StatusCode::UNAUTHORIZED,
            error_body(401, "Bad credentials", DOCS_REST),
        ))
    }
}

fn validate_query(op: &Operation, query: &[(String, String)]) -> Result<(), String> {
    for (name, value) in query {
        // GitHub ignores parameters it does not know.
        let Some((_, validator, is_integer)) = op.query.iter().find(|(n, _, _)| n == name) else {
            continue;
        };
        let instance = match (is_integer, value.parse::<i64>()) {
            (true, Ok(n)) => json!(n),
            _ => json!(value),
        };
        if let Err(e) = validator.validate(&instance) {
            return Err(format!("query parameter {name}={value:?}: {e}"));
        }
    }
    Ok(())
}

fn parse_body(op: &Operation, text: &str) -> Result<Value, String> {
    if text.trim().is_empty() {
        if op.body_required {
            return Err("request body required but empty".to_string());
        }
        return Ok(Value::Null);
    }
    serde_json::from_str(text).map_err(|e| format!("body is not JSON: {e}"))
}

fn record_violation(
    inner: &Inner,
    method: &Method,
    path: &str,
    operation: Option<&str>,
    reason: &str,
    body: &str,
) {
    inner.lock().violations.push(Violation {
        method: method.to_string(),
        path: path.to_string(),
        operation: operation.map(str::to_string),
        reason: reason.to_string(),
        body: body.to_string(),
    });
}

// ---------------------------------------------------------------------------
// Pull requests
// ---------------------------------------------------------------------------

async fn list_pulls(inner: &Inner, op: &Operation, req: &Incoming) -> Reply {
    refresh_open_prs(inner).await;
    let param = |name: &str| {
        req.query
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };
    let state_filter = param("state").unwrap_or("open");
    // GitHub filters by head only in `owner:branch` form; a bare branch
    // name is silently ignored (and then every pull request matches).
    let head_filter = param("head").and_then(|h| h.split_once(':'));
    let base_filter = param("base");
    let descending = match (param("sort").unwrap_or("created"), param("direction")) {
        (_, Some(direction)) => direction == "desc",
        ("created", None) => true,
        _ => false,
    };
    let by_updated = param("sort") == Some("updated");

    let mut prs: Vec<PullRequest> = {
        let state = inner.lock();
        state
            .prs
            .iter()
            .filter(|p| state_filter == "all" || p.state.as_str() == state_filter)
            .filter(|p| match head_filter {
                Some((owner, branch)) => {
                    owner.eq_ignore_ascii_case(p.fork_owner.as_deref().unwrap_or(&inner.owner))
                        && (branch.is_empty() || p.head_ref == branch)
                }
                None => true,
            })
            .filter(|p| base_filter.is_none_or(|b| p.base_ref == b))
            .cloned()
            .collect()
    };
    if by_updated {
        prs.sort_by(|a, b| {
            a.updated_at
                .cmp(&b.updated_at)
                .then(a.number.cmp(&b.number))
        });
    } else {
        prs.sort_by_key(|p| p.number);
    }
    if descending {
        prs.reverse();
    }
    let state = inner.lock();
    let items: Vec<Value> = prs
        .iter()
        .map(|p| pr_json(inner, &state, &op.example[0], p))
        .collect();
    drop(state);
    paginate(inner, req, items)
}

async fn create_pull(inner: &Inner, op: &Operation, req: &Incoming) -> Reply {
    let body = &req.body;
    let text = |key: &str| body[key].as_str().map(str::to_string);
    let Some(title) = text("title") else {
        // `issue` (turning an issue into a pull request) is not supported.
        return validation_failed(
            op,
            json!([{"resource": "Issue", "code": "missing_field", "field": "title"}]),
        );
    };
    let head_arg = text("head").unwrap_or_default();
    let base_ref = text("base").unwrap_or_default();

    // `head` is `branch` or `owner:branch`; only this repository's owner has
    // branches here (no forks).
    let head_ref = match head_arg.split_once(':') {
        Some((owner, branch)) if owner.eq_ignore_ascii_case(&inner.owner) => branch.to_string(),
        Some(_) => String::new(),
        None => head_arg.clone(),
    };
    let head_sha = branch_sha(inner, &head_ref).await;
    let base_sha = branch_sha(inner, &base_ref).await;
    let mut errors = Vec::new();
    if base_sha.is_none() {
        errors.push(json!({"resource": "PullRequest", "field": "base", "code": "invalid"}));
    }
    if head_sha.is_none() {
        errors.push(json!({"resource": "PullRequest", "field": "head", "code": "invalid"}));
    }
    let (Some(head_sha), Some(base_sha)) = (head_sha, base_sha) else {
        return validation_failed(op, Value::Array(errors));
    };

    let already_merged = is_ancestor(inner, &head_sha, &base_sha).await;
    let now = inner.now();
    let mut state = inner.lock();
    if state.prs.iter().any(|p| {
        p.state == PrState::Open
            && p.fork_owner.is_none()
            && p.head_ref == head_ref
            && p.base_ref == base_ref
    }) {
        let message = format!(
            "A pull request already exists for {}:{head_ref}.",
            inner.owner
        );
        return validation_failed(
            op,
            json!([{"resource": "PullRequest", "code": "custom", "message": message}]),
        );
    }
    if already_merged {
        let message = format!("No commits between {base_ref} and {head_ref}");
        return validation_failed(
            op,
            json!([{"resource": "PullRequest", "code": "custom", "message": message}]),
        );
    }
    state.last_issue_number += 1;
    let pr = PullRequest {
        number: state.last_issue_number,
        state: PrState::Open,
        merged: false,
        draft: body["draft"] == true,
        title,
        body: text("body"),
        head_ref,
        head_sha,
        base_ref,
        base_sha,
        labels: Vec::new(),
        user: TOKEN_USER_LOGIN.to_string(),
        fork_owner: None,
        merge_commit_sha: None,
        created_at: now.clone(),
        updated_at: now,
        closed_at: None,
        merged_at: None,
    };
    let json = pr_json(inner, &state, &op.example, &pr);
    let location = format!("{}/pulls/{}", inner.repo_api(), pr.number);
    state.prs.push(pr);
    Reply::new(op.success_status, json).with_header("location", &location)
}

async fn get_pull(inner: &Inner, op: &Operation, number: u64) -> Reply {
    refresh_open_prs(inner).await;
    let state = inner.lock();
    match state.prs.iter().find(|p| p.number == number) {
        Some(pr) => Reply::new(op.success_status, pr_json(inner, &state, &op.example, pr)),
        None => not_found(),
    }
}

async fn update_pull(inner: &Inner, op: &Operation, number: u64, req: &Incoming) -> Reply {
    refresh_open_prs(inner).await;
    let body = &req.body;
    let new_base = body["base"].as_str();
    let new_base_sha = match new_base {
        Some(base) => match branch_sha(inner, base).await {
            Some(sha) => Some(sha),
            None => {
                return validation_failed(
                    op,
                    json!([{"resource": "PullRequest", "field": "base", "code": "invalid"}]),
                )
            }
        },
        None => None,
    };
    let now = inner.now();
    let mut state = inner.lock();
    let Some(index) = state.prs.iter().position(|p| p.number == number) else {
        return not_found();
    };
    let reopen = body["state"] == "open" && state.prs[index].state == PrState::Closed;
    if reopen {
        if state.prs[index].merged {
            return validation_failed(
                op,
                json!([{"resource": "PullRequest", "code": "custom", "field": "state",
                        "message": "state cannot be changed. The pull request cannot be reopened because it has been merged."}]),
            );
        }
        let pr = &state.prs[index];
        let base = new_base.unwrap_or(&pr.base_ref);
        if state.prs.iter().any(|p| {
            p.number != number
                && p.state == PrState::Open
                && p.head_ref == pr.head_ref
                && p.base_ref == base
        }) {
            let message = format!(
                "A pull request already exists for {}:{}.",
                inner.owner, pr.head_ref
            );
            return validation_failed(
                op,
                json!([{"resource": "PullRequest", "code": "custom", "message": message}]),
            );
        }
    }
    let pr = &mut state.prs[index];
    if let Some(title) = body["title"].as_str() {
        pr.title = title.to_string();
    }
    if let Some(text) = body["body"].as_str() {
        pr.body = Some(text.to_string());
    }
    if let (Some(base), Some(sha)) = (new_base, new_base_sha) {
        pr.base_ref = base.to_string();
        pr.base_sha = sha;
    }
    match body["state"].as_str() {
        Some("closed") if pr.state == PrState::Open => {
            pr.state = PrState::Closed;
            pr.closed_at = Some(now.clone());
        }
        Some("open") if pr.state == PrState::Closed => {
            pr.state = PrState::Open;
            pr.closed_at = None;
        }
        _ => {}
    }
    pr.updated_at = now;
    let pr = pr.clone();
    Reply::new(op.success_status, pr_json(inner, &state, &op.example, &pr))
}

/// Re-reads open pull requests' branches from the bare repository, as
/// GitHub tracks pushes. An open pull request whose head branch was deleted
/// is closed, as GitHub does.
async fn refresh_open_prs(inner: &Inner) {
    let open: Vec<(u64, String, String)> = inner
        .lock()
        .prs
        .iter()
        .filter(|p| p.state == PrState::Open && p.fork_owner.is_none())
        .map(|p| (p.number, p.head_ref.clone(), p.base_ref.clone()))
        .collect();
    for (number, head_ref, base_ref) in open {
        let head = branch_sha(inner, &head_ref).await;
        let base = branch_sha(inner, &base_ref).await;
        let mut state = inner.lock();
        let pr = state.pr_mut(number);
        match head {
            Some(sha) => pr.head_sha = sha,
            None => {
                let now = inner.now();
                pr.state = PrState::Closed;
                pr.closed_at = Some(now.clone());
                pr.updated_at = now;
            }
        }
        if let Some(sha) = base {
            pr.base_sha = sha;
        }
    }
}

/// A pull request in GitHub's shape: `template` is the OpenAPI example
/// (`pull-request` or an item of `pull-request-simple-items`) with every
/// field that carries state overwritten.
fn pr_json(inner: &Inner, state: &ServerState, template: &Value, pr: &PullRequest) -> Value {
    let mut v = template.clone();
    let api = format!("{}/pulls/{}", inner.repo_api(), pr.number);
    let issue_api = format!("{}/issues/{}", inner.repo_api(), pr.number);
    let html = format!("{}/pull/{}", inner.repo_html(), pr.number);
    let statuses = format!("{}/statuses/{}", inner.repo_api(), pr.head_sha);
    let user = user_json(inner, &template["user"], &pr.user);

    v["id"] = json!(1_000_000_000 + pr.number);
    v["number"] = json!(pr.number);
    v["url"] = json!(api);
    v["html_url"] = json!(html);
    v["diff_url"] = json!(format!("{html}.diff"));
    v["patch_url"] = json!(format!("{html}.patch"));
    v["issue_url"] = json!(issue_api);
    v["commits_url"] = json!(format!("{api}/commits"));
    v["review_comments_url"] = json!(format!("{api}/comments"));
    v["review_comment_url"] = json!(format!("{}/pulls/comments{{/number}}", inner.repo_api()));
    v["comments_url"] = json!(format!("{issue_api}/comments"));
    v["statuses_url"] = json!(statuses);
    v["state"] = json!(pr.state.as_str());
    v["locked"] = json!(false);
    v["active_lock_reason"] = Value::Null;
    v["title"] = json!(pr.title);
    v["body"] = json!(pr.body);
    v["user"] = user.clone();
    v["labels"] = Value::Array(
        pr.labels
            .iter()
            .map(|name| {
                label_json(
                    inner,
                    state,
                    &inner.spec.op("issues/add-labels").example[0],
                    name,
                )
            })
            .collect(),
    );
    v["milestone"] = Value::Null;
    v["assignee"] = Value::Null;
    v["assignees"] = json!([]);
    v["requested_reviewers"] = json!([]);
    v["requested_teams"] = json!([]);
    v["created_at"] = json!(pr.created_at);
    v["updated_at"] = json!(pr.updated_at);
    v["closed_at"] = json!(pr.closed_at);
    v["merged_at"] = json!(pr.merged_at);
    v["merge_commit_sha"] = json!(pr.merge_commit_sha);
    v["draft"] = json!(pr.draft);
    v["auto_merge"] = Value::Null;
    v["author_association"] = json!(if pr.user == TOKEN_USER_LOGIN {
        "OWNER"
    } else {
        "CONTRIBUTOR"
    });
    let head_owner = pr.fork_owner.as_deref().unwrap_or(&inner.owner);
    for (side, owner_login, branch, sha) in [
        ("head", head_owner, &pr.head_ref, &pr.head_sha),
        ("base", inner.owner.as_str(), &pr.base_ref, &pr.base_sha),
    ] {
        let owner = user_json(inner, &template[side]["user"], owner_login);
        let full_name = format!("{owner_login}/{}", inner.repo);
        v[side]["label"] = json!(format!("{owner_login}:{branch}"));
        v[side]["ref"] = json!(branch);
        v[side]["sha"] = json!(sha);
        v[side]["user"] = owner.clone();
        v[side]["repo"]["name"] = json!(inner.repo);
        v[side]["repo"]["full_name"] = json!(full_name);
        v[side]["repo"]["owner"] = owner;
        if owner_login != inner.owner {
            // A fork: another repository, with its own id and addresses.
            v[side]["repo"]["id"] = json!(9_000_000 + pr.number);
            v[side]["repo"]["node_id"] = json!(format!("R_fork{}", pr.number));
            v[side]["repo"]["fork"] = json!(true);
            v[side]["repo"]["url"] = json!(format!("{}/repos/{full_name}", inner.base));
            v[side]["repo"]["html_url"] = json!(format!("{}/{full_name}", inner.base));
        }
    }
    v["_links"] = json!({
        "self": {"href": api},
        "html": {"href": html},
        "issue": {"href": issue_api},
        "comments": {"href": format!("{issue_api}/comments")},
        "review_comments": {"href": format!("{api}/comments")},
        "review_comment": {"href": format!("{}/pulls/comments{{/number}}", inner.repo_api())},
        "commits": {"href": format!("{api}/commits")},
        "statuses": {"href": statuses},
    });
    // Fields only the full `pull-request` schema has.
    if v.get("merged").is_some() {
        v["merged"] = json!(pr.merged);
        v["merged_by"] = if pr.merged { user } else { Value::Null };
        v["mergeable"] = if pr.state == PrState::Open {
            json!(true)
        } else {
            Value::Null
        };
        v["rebaseable"] = v["mergeable"].clone();
        v["mergeable_state"] = json!(if pr.state == PrState::Open {
            "clean"
        } else {
            "unknown"
        });
        let comments = state.comments.iter().filter(|c| c.issue == pr.number);
        v["comments"] = json!(comments.count());
        v["review_comments"] = json!(0);
    }
    v
}

// ---------------------------------------------------------------------------
// Labels and comments
// ---------------------------------------------------------------------------

fn add_labels(inner: &Inner, op: &Operation, number: u64, req: &Incoming) -> Reply {
    let names: Vec<String> = req.body["labels"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|item| item.as_str().or_else(|| item["name"].as_str()))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let mut state = inner.lock();
    if !state.prs.iter().any(|p| p.number == number) {
        return not_found();
    }
    for name in &names {
        let next_id = 208_045_946 + state.label_ids.len() as u64;
        state.label_ids.entry(name.clone()).or_insert(next_id);
    }
    let now = inner.now();
    let pr = state.pr_mut(number);
    for name in names {
        // GitHub matches label names case-insensitively.
        if !pr.labels.iter().any(|l| l.eq_ignore_ascii_case(&name)) {
            pr.labels.push(name);
        }
    }
    pr.updated_at = now;
    let labels = pr.labels.clone();
    let items: Vec<Value> = labels
        .iter()
        .map(|name| label_json(inner, &state, &op.example[0], name))
        .collect();
    Reply::new(op.success_status, Value::Array(items))
}

fn label_json(inner: &Inner, state: &ServerState, template: &Value, name: &str) -> Value {
    let id = state.label_ids.get(name).copied().unwrap_or(208_045_946);
    let mut v = template.clone();
    v["id"] = json!(id);
    v["url"] = json!(format!(
        "{}/labels/{}",
        inner.repo_api(),
        percent_encode(name)
    ));
    v["name"] = json!(name);
    v["description"] = Value::Null;
    v["color"] = json!("ededed");
    v["default"] = json!(false);
    v
}

fn list_comments(inner: &Inner, op: &Operation, issue: u64, req: &Incoming) -> Reply {
    let state = inner.lock();
    if !state.prs.iter().any(|p| p.number == issue) {
        return not_found();
    }
    let items: Vec<Value> = state
        .comments
        .iter()
        .filter(|c| c.issue == issue)
        .map(|c| comment_json(inner, &op.example[0], c))
        .collect();
    drop(state);
    paginate(inner, req, items)
}

fn create_comment(inner: &Inner, op: &Operation, issue: u64, req: &Incoming) -> Reply {
    let body = req.body["body"].as_str().unwrap_or_default();
    let mut state = inner.lock();
    if !state.prs.iter().any(|p| p.number == issue) {
        return not_found();
    }
    let id = state.add_comment(issue, TOKEN_USER_LOGIN, body);
    let comment = state.comments.last().expect("just added").clone();
    drop(state);
    let location = format!("{}/issues/comments/{id}", inner.repo_api());
    Reply::new(
        op.success_status,
        comment_json(inner, &op.example, &comment),
    )
    .with_header("location", &location)
}

fn update_comment(inner: &Inner, op: &Operation, id: u64, req: &Incoming) -> Reply {
    let body = req.body["body"].as_str().unwrap_or_default();
    let now = inner.now();
    let mut state = inner.lock();
    let Some(comment) = state.comments.iter_mut().find(|c| c.id == id) else {
        return not_found();
    };
    comment.body = body.to_string();
    comment.updated_at = now;
    let comment = comment.clone();
    drop(state);
    Reply::new(
        op.success_status,
        comment_json(inner, &op.example, &comment),
    )
}

fn comment_json(inner: &Inner, template: &Value, c: &Comment) -> Value {
    let mut v = template.clone();
    v["id"] = json!(c.id);
    v["url"] = json!(format!("{}/issues/comments/{}", inner.repo_api(), c.id));
    v["html_url"] = json!(format!(
        "{}/pull/{}#issuecomment-{}",
        inner.repo_html(),
        c.issue,
        c.id
    ));
    v["issue_url"] = json!(format!("{}/issues/{}", inner.repo_api(), c.issue));
    v["body"] = json!(c.body);
    v["user"] = user_json(inner, &template["user"], &c.user);
    v["created_at"] = json!(c.created_at);
    v["updated_at"] = json!(c.updated_at);
    v["author_association"] = json!(if c.user == TOKEN_USER_LOGIN {
        "OWNER"
    } else {
        "CONTRIBUTOR"
    });
    v
}

// ---------------------------------------------------------------------------
// Commit statuses
// ---------------------------------------------------------------------------

async fn create_status(
    inner: &Inner,
    op: &Operation,
    sha: &str,
    req: &Incoming,
    body_text: &str,
) -> Reply {
    let body = &req.body;
    let description = body["description"].as_str().map(str::to_string);
    if description
        .as_ref()
        .is_some_and(|d| d.chars().count() > MAX_STATUS_DESCRIPTION_CHARS)
    {
        let reason = format!(
            "description is too long (maximum is {MAX_STATUS_DESCRIPTION_CHARS} characters)"
        );
        record_violation(
            inner,
            &req.method,
            &req.path,
            Some(&op.id),
            &reason,
            body_text,
        );
        return validation_failed(
            op,
            json!([{"resource": "Status", "code": "custom", "field": "description",
                    "message": reason}]),
        );
    }
    // Statuses attach to full commit SHAs that exist in the repository.
    let resolved = if is_full_sha(sha) {
        commit_sha(inner, sha).await
    } else {
        None
    };
    let Some(sha) = resolved else {
        return Reply::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            error_body(
                422,
                &format!("No commit found for SHA: {sha}"),
                &op.documentation_url,
            ),
        );
    };
    let now = inner.now();
    let mut state = inner.lock();
    state.last_status_id += 1;
    let status = CommitStatus {
        id: state.last_status_id,
        sha: sha.clone(),
        state: body["state"].as_str().unwrap_or_default().to_string(),
        context: body["context"].as_str().unwrap_or("default").to_string(),
        description,
        target_url: body["target_url"].as_str().map(str::to_string),
        creator: TOKEN_USER_LOGIN.to_string(),
        created_at: now,
    };
    state.statuses.push(status.clone());
    drop(state);
    let location = format!("{}/statuses/{sha}", inner.repo_api());
    Reply::new(op.success_status, status_json(inner, &op.example, &status))
        .with_header("location", &location)
}

async fn list_statuses(inner: &Inner, op: &Operation, reference: &str, req: &Incoming) -> Reply {
    let Some(sha) = resolve_ref(inner, reference).await else {
        return not_found_message(&format!("No commit found for SHA: {reference}"));
    };
    let state = inner.lock();
    // Newest first, as GitHub lists them.
    let items: Vec<Value> = state
        .statuses
        .iter()
        .rev()
        .filter(|s| s.sha == sha)
        .map(|s| status_json(inner, &op.example[0], s))
        .collect();
    drop(state);
    paginate(inner, req, items)
}

async fn combined_status(inner: &Inner, op: &Operation, reference: &str) -> Reply {
    let Some(sha) = resolve_ref(inner, reference).await else {
        return not_found_message(&format!("No commit found for SHA: {reference}"));
    };
    let state = inner.lock();
    // The latest status of each context counts.
    let mut latest: Vec<&CommitStatus> = Vec::new();
    for s in state.statuses.iter().rev().filter(|s| s.sha == sha) {
        if !latest
            .iter()
            .any(|l| l.context.eq_ignore_ascii_case(&s.context))
        {
            latest.push(s);
        }
    }
    let combined = if latest
        .iter()
        .any(|s| s.state == "error" || s.state == "failure")
    {
        "failure"
    } else if latest.is_empty() || latest.iter().any(|s| s.state == "pending") {
        "pending"
    } else {
        "success"
    };
    let item_template = &op.example["statuses"][0];
    let items: Vec<Value> = latest
        .iter()
        .map(|s| status_json(inner, item_template, s))
        .collect();
    drop(state);
    let mut v = op.example.clone();
    v["state"] = json!(combined);
    v["sha"] = json!(sha);
    v["total_count"] = json!(items.len());
    v["statuses"] = Value::Array(items);
    v["commit_url"] = json!(format!("{}/commits/{sha}", inner.repo_api()));
    v["url"] = json!(format!("{}/commits/{sha}/status", inner.repo_api()));
    v["repository"]["name"] = json!(inner.repo);
    v["repository"]["full_name"] = json!(format!("{}/{}", inner.owner, inner.repo));
    v["repository"]["owner"] = user_json(inner, &op.example["repository"]["owner"], &inner.owner);
    Reply::new(op.success_status, v)
}

fn status_json(inner: &Inner, template: &Value, s: &CommitStatus) -> Value {
    let mut v = template.clone();
    v["url"] = json!(format!("{}/statuses/{}", inner.repo_api(), s.sha));
    v["id"] = json!(s.id);
    v["state"] = json!(s.state);
    v["description"] = json!(s.description);
    v["target_url"] = json!(s.target_url);
    v["context"] = json!(s.context);
    v["created_at"] = json!(s.created_at);
    v["updated_at"] = json!(s.created_at);
    if v.get("creator").is_some() {
        v["creator"] = user_json(inner, &template["creator"], &s.creator);
    }
    v
}

// ---------------------------------------------------------------------------
// Shared JSON pieces
// ---------------------------------------------------------------------------

fn user_json(inner: &Inner, template: &Value, login: &str) -> Value {
    let mut v = template.clone();
    let api = format!("{}/users/{login}", inner.base);
    v["login"] = json!(login);
    v["url"] = json!(api);
    v["html_url"] = json!(format!("{}/{login}", inner.base));
    for (key, suffix) in [
        ("followers_url", "/followers"),
        ("following_url", "/following{/other_user}"),
        ("gists_url", "/gists{/gist_id}"),
        ("starred_url", "/starred{/owner}{/repo}"),
        ("subscriptions_url", "/subscriptions"),
        ("organizations_url", "/orgs"),
        ("repos_url", "/repos"),
        ("events_url", "/events{/privacy}"),
        ("received_events_url", "/received_events"),
    ] {
        v[key] = json!(format!("{api}{suffix}"));
    }
    v["type"] = json!(if login.ends_with("[bot]") {
        "Bot"
    } else {
        "User"
    });
    v
}

/// GitHub's error body: `message`, `documentation_url` and `status` (a string).
fn error_body(status: u16, message: &str, documentation_url: &str) -> Value {
    json!({
        "message": message,
        "documentation_url": documentation_url,
        "status": status.to_string(),
    })
}

fn validation_failed(op: &Operation, errors: Value) -> Reply {
    let mut body = error_body(422, "Validation Failed", &op.documentation_url);
    body["errors"] = errors;
    Reply::new(StatusCode::UNPROCESSABLE_ENTITY, body)
}

/// GitHub's answer to a body or query that breaks the operation's schema.
fn invalid_request(op: &Operation, reason: &str) -> Reply {
    Reply::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        error_body(
            422,
            &format!("Invalid request.\n\n{reason}"),
            &op.documentation_url,
        ),
    )
}

fn not_found() -> Reply {
    not_found_message("Not Found")
}

fn not_found_message(message: &str) -> Reply {
    Reply::new(StatusCode::NOT_FOUND, error_body(404, message, DOCS_REST))
}

fn fault_reply(fault: Fault) -> Reply {
    Reply {
        status: fault_status(fault.status),
        body: fault.body,
        headers: fault.headers,
    }
}

/// Slices a list by `per_page`/`page` and adds GitHub's `Link` header when
/// there are more pages.
fn paginate(inner: &Inner, req: &Incoming, items: Vec<Value>) -> Reply {
    let param = |name: &str| {
        req.query
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| v.parse::<usize>().ok())
    };
    let per_page = param("per_page")
        .unwrap_or(DEFAULT_PER_PAGE)
        .clamp(1, MAX_PER_PAGE);
    let page = param("page").unwrap_or(1).max(1);
    let last = items.len().div_ceil(per_page).max(1);
    let start = (page - 1).saturating_mul(per_page).min(items.len());
    let end = (start + per_page).min(items.len());
    let mut reply = Reply::new(StatusCode::OK, Value::Array(items[start..end].to_vec()));
    if page < last {
        let link_to = |n: usize| {
            let mut pairs: Vec<String> = req
                .query
                .iter()
                .filter(|(k, _)| k != "page")
                .map(|(k, v)| format!("{}={}", percent_encode(k), percent_encode(v)))
                .collect();
            pairs.push(format!("page={n}"));
            format!("<{}{}?{}>", inner.base, req.path, pairs.join("&"))
        };
        let link = format!(
            "{}; rel=\"next\", {}; rel=\"last\"",
            link_to(page + 1),
            link_to(last)
        );
        reply = reply.with_header("link", &link);
    }
    reply
}

/// GitHub's conditional requests: a `200` to a `GET` carries an `ETag` (a
/// hash of what it says, `Link` included); when the request's
/// `If-None-Match` names it and GitHub documents a 304 for the operation, the
/// answer is `304 Not Modified` with no body.
fn conditional(op: &Operation, headers: &HeaderMap, reply: Reply) -> Reply {
    use sha2::Digest as _;
    if reply.status != StatusCode::OK {
        return reply;
    }
    let mut hasher = sha2::Sha256::new();
    hasher.update(serde_json::to_vec(&reply.body).expect("serialize response"));
    for (name, value) in &reply.headers {
        if name.eq_ignore_ascii_case("link") {
            hasher.update(value.as_bytes());
        }
    }
    let digest = hasher.finalize();
    let etag: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    let etag = format!("\"{etag}\"");
    let matches = headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|tag| tag.trim().trim_start_matches("W/") == etag || tag.trim() == "*");
    if op.conditional && matches {
        return Reply::new(StatusCode::NOT_MODIFIED, Value::Null).with_header("etag", &etag);
    }
    reply.with_header("etag", &etag)
}

fn into_response(reply: Reply) -> Response {
    let body = if reply.status == StatusCode::NOT_MODIFIED {
        Vec::new()
    } else {
        serde_json::to_vec(&reply.body).expect("serialize response")
    };
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = reply.status;
    let reset = (unix_now() + 3600).to_string();
    let headers = response.headers_mut();
    set_headers(
        headers,
        [
            ("content-type", "application/json; charset=utf-8"),
            ("x-github-media-type", "github.v3; format=json"),
            ("x-github-api-version-selected", "2022-11-28"),
            ("x-ratelimit-limit", "5000"),
            ("x-ratelimit-remaining", "4999"),
            ("x-ratelimit-used", "1"),
            ("x-ratelimit-resource", "core"),
            ("x-ratelimit-reset", reset.as_str()),
        ],
    );
    set_headers(
        headers,
        reply.headers.iter().map(|(n, v)| (n.as_str(), v.as_str())),
    );
    response
}

// ---------------------------------------------------------------------------
// Git
// ---------------------------------------------------------------------------

/// The commit a branch of the bare repository points at, if the branch exists.
async fn branch_sha(inner: &Inner, branch: &str) -> Option<String> {
    if branch.is_empty() {
        return None;
    }
    rev_parse(inner, &format!("refs/heads/{branch}")).await
}

/// The commit `sha` names, if it is a commit in the repository.
async fn commit_sha(inner: &Inner, sha: &str) -> Option<String> {
    rev_parse(inner, sha).await
}

/// Resolves a `{ref}` path parameter the way GitHub does: a full SHA, a
/// branch or tag name, or `heads/<branch>` / `tags/<tag>`.
async fn resolve_ref(inner: &Inner, reference: &str) -> Option<String> {
    if is_full_sha(reference) {
        return commit_sha(inner, reference).await;
    }
    for candidate in [
        format!("refs/heads/{reference}"),
        format!("refs/tags/{reference}"),
        format!("refs/{reference}"),
    ] {
        if let Some(sha) = rev_parse(inner, &candidate).await {
            return Some(sha);
        }
    }
    None
}

/// Runs `git rev-parse --verify <rev>^{commit}`. Callers only pass revs that
/// start with `refs/` or are hex, so nothing is read as an option.
async fn rev_parse(inner: &Inner, rev: &str) -> Option<String> {
    let output = tokio::process::Command::new("git")
        .arg("--git-dir")
        .arg(&inner.git_dir)
        .args(["rev-parse", "--verify", "--quiet"])
        .arg(format!("{rev}^{{commit}}"))
        .output()
        .await
        .expect("run git rev-parse");
    if !output.status.success() {
        return None;
    }
    Some(String::from_utf8_lossy(&output.stdout).trim().to_string())
}

/// Whether commit `a` is reachable from `b` (then a pull request from `a`
/// into `b` has no commits).
async fn is_ancestor(inner: &Inner, a: &str, b: &str) -> bool {
    let status = tokio::process::Command::new("git")
        .arg("--git-dir")
        .arg(&inner.git_dir)
        .args(["merge-base", "--is-ancestor", a, b])
        .status()
        .await
        .expect("run git merge-base");
    status.success()
}

/// `git rev-parse` for the test's own thread (helpers called outside the
/// server's runtime).
fn rev_parse_now(git_dir: &Path, rev: &str) -> Option<String> {
    let output = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(git_dir)
        .args(["rev-parse", "--verify", "--quiet"])
        .arg(format!("{rev}^{{commit}}"))
        .output()
        .expect("run git rev-parse");
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_string())
}

fn is_full_sha(s: &str) -> bool {
    s.len() == 40 && s.chars().all(|c| c.is_ascii_hexdigit())
}

// ---------------------------------------------------------------------------
// Small helpers
// ---------------------------------------------------------------------------

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs()
}

/// The current time as GitHub writes it: `2011-01-26T19:01:12Z`.
fn now_iso8601() -> String {
    super::rfc3339(SystemTime::now())
}
