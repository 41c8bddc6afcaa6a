//! A local GitLab REST API (v4) server for integration tests.
//!
//! tagpin opens and updates merge requests, keeps one sticky note and posts
//! commit statuses on GitLab as it does on GitHub. No real GitLab is reachable
//! from the test machines, so this module serves the few REST v4 operations
//! tagpin calls, with in-memory state, on a loopback port, under `/api/v4`.
//!
//! It is built to catch what a hand-written mock would hide:
//! - Responses start from the example objects in GitLab's own REST
//!   documentation (`tests/fixtures/gitlab/*.json`, sources in the README
//!   there), with only the stateful fields overwritten, so clients parse
//!   GitLab's real shapes.
//! - Every parameter is checked the way GitLab's Grape API checks it (required
//!   fields, types, enum values, comma-separated label lists) and refused with
//!   GitLab's own error bodies (`{"error":"title is missing"}`,
//!   `{"error":"state does not have a valid value"}`, model validation as
//!   `{"message":{"title":["can't be blank"]}}`). A request GitLab would refuse
//!   as malformed, a parameter GitLab does not declare (GitLab ignores it, so a
//!   typo would go unnoticed), a token sent in the URL and a route GitLab does
//!   not have are kept as [`Violation`]s; `Drop` fails the test unless it took
//!   them with [`GitLabServer::take_violations`].
//! - GitLab's rules a schema cannot express are enforced: one open merge
//!   request per source and target branch (`409` with
//!   `Another open merge request already exists for this source branch: !N`),
//!   the commit-status state machine (posting `pending` or `running` twice in a
//!   row for one name, ref and SHA is a `400 Cannot transition status via :run
//!   from :running …`, while a finished status is followed by a new one),
//!   only a note's author may edit it, permissions by token scope (`api` writes,
//!   `read_api` only reads) and by project role (Reporter reads, Developer
//!   opens merge requests and posts statuses), private projects hidden from
//!   non-members (`404 Project Not Found`).
//! - Branches, commits and merges are real: each project is a bare Git
//!   repository; a merge request's `sha` follows its source branch, GitLab's
//!   `refs/merge-requests/<iid>/head` is written, and a person merging
//!   ([`GitLabServer::merge_mr_as`]) makes the merge commit (or the squash
//!   commit, or a fast-forward) in the repository as GitLab would.
//! - Offset pagination with GitLab's headers (`x-page`, `x-per-page`,
//!   `x-next-page`, `x-prev-page`, `x-total`, `x-total-pages`, `Link`), default
//!   20 per page, at most 100.
//! - System notes (`"system": true`) appear among a merge request's notes when
//!   its title, description, labels, target branch or state change, as on
//!   GitLab, so a client looking for its own note meets them.
//! - Faults (429 with `Retry-After` and `RateLimit-*`, 5xx, a response lost
//!   after the work was done, a request that never gets an answer) can be
//!   scripted per request; the clock can be frozen and moved.
//!
//! Test support panics with a clear message instead of returning errors.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::{Request, State as AxumState};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::Response;
use axum::Router;
use serde_json::{json, Value};
use tokio::task::JoinHandle;

use super::http_fake::{
    self, canonical_reason, fault_status, percent_decode, percent_encode, set_headers, FaultScope,
};

/// Where GitLab serves REST v4 on an instance.
pub const API_PREFIX: &str = "/api/v4";

/// GitLab's default and largest page sizes for offset pagination.
pub const DEFAULT_PER_PAGE: usize = 20;
pub const MAX_PER_PAGE: usize = 100;

/// GitLab's limits on the fields tagpin writes.
const MAX_TITLE_CHARS: usize = 255;
const MAX_DESCRIPTION_CHARS: usize = 1_048_576;
const MAX_NOTE_CHARS: usize = 1_000_000;
const MAX_STATUS_FIELD_CHARS: usize = 255;

/// GitLab.com's authenticated API rate limit per minute, sent in `RateLimit-*`.
const RATE_LIMIT_PER_MINUTE: u64 = 2000;

/// Ids start high and apart so a client mixing up a merge request's `id`
/// and `iid`, or a note id and an iid, is caught.
const FIRST_PROJECT_ID: u64 = 1000;
const FIRST_MR_ID: u64 = 50_000;
const FIRST_NOTE_ID: u64 = 900_000;
const FIRST_STATUS_ID: u64 = 7_000_000;
const FIRST_PIPELINE_ID: u64 = 300_000;
const FIRST_USER_ID: u64 = 100;

const MERGE_REQUEST_FIXTURE: &str = include_str!("../../fixtures/gitlab/merge_request.json");
const COMMIT_STATUS_FIXTURE: &str = include_str!("../../fixtures/gitlab/commit_status.json");
const NOTE_FIXTURE: &str = include_str!("../../fixtures/gitlab/note.json");
const USER_FIXTURE: &str = include_str!("../../fixtures/gitlab/user.json");
const PROJECT_FIXTURE: &str = include_str!("../../fixtures/gitlab/project.json");

// ---------------------------------------------------------------------------
// Public types
// ---------------------------------------------------------------------------

/// A personal access token's scope: `api` reads and writes, `read_api` only reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    Api,
    ReadApi,
}

/// A member's role in a project, with GitLab's numeric access levels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum AccessLevel {
    Guest,
    Reporter,
    Developer,
    Maintainer,
    Owner,
}

impl AccessLevel {
    pub fn value(self) -> u64 {
        match self {
            AccessLevel::Guest => 10,
            AccessLevel::Reporter => 20,
            AccessLevel::Developer => 30,
            AccessLevel::Maintainer => 40,
            AccessLevel::Owner => 50,
        }
    }
}

/// A project's merge method (`merge_method` in its settings).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MergeMethod {
    /// A merge commit on the target branch (`merge`, GitLab's default).
    Merge,
    /// The target branch moves to the source head (`ff`); no merge commit,
    /// so `merge_commit_sha` stays null.
    FastForward,
}

/// A merge request's `state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MrState {
    Opened,
    Closed,
    Merged,
    Locked,
}

impl MrState {
    pub fn as_str(self) -> &'static str {
        match self {
            MrState::Opened => "opened",
            MrState::Closed => "closed",
            MrState::Merged => "merged",
            MrState::Locked => "locked",
        }
    }
}

/// A merge request as the server holds it.
#[derive(Clone, Debug)]
pub struct MergeRequest {
    /// Instance-wide id.
    pub id: u64,
    /// The number in `!iid`, per target project.
    pub iid: u64,
    /// The target project (`project_id` and `target_project_id`).
    pub project_id: u64,
    /// Differs from `project_id` for a merge request from a fork.
    pub source_project_id: u64,
    pub state: MrState,
    pub title: String,
    pub description: Option<String>,
    pub source_branch: String,
    pub target_branch: String,
    /// The source branch's head, followed while the merge request is open.
    pub sha: String,
    /// Labels in the order they were added (GitLab answers them sorted).
    pub labels: Vec<String>,
    /// Username of the author.
    pub author: String,
    pub squash: bool,
    /// `remove_source_branch` as asked at creation or update.
    pub force_remove_source_branch: bool,
    pub merge_commit_sha: Option<String>,
    pub squash_commit_sha: Option<String>,
    pub merged_by: Option<String>,
    pub closed_by: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    pub merged_at: Option<String>,
    pub closed_at: Option<String>,
    /// The merge base with the target branch (`diff_refs.base_sha`).
    pub base_sha: String,
    /// The target branch's head when last refreshed (`diff_refs.start_sha`).
    pub start_sha: String,
}

impl MergeRequest {
    /// A merge request by `author` as it is when just opened at `now`, its
    /// source branch at `sha`: not merged, squashed or closed. Callers set
    /// the ids, branches, title and options with struct update syntax.
    fn opened(author: &str, sha: String, base_sha: String, start_sha: String, now: String) -> Self {
        MergeRequest {
            id: 0,
            iid: 0,
            project_id: 0,
            source_project_id: 0,
            state: MrState::Opened,
            title: String::new(),
            description: None,
            source_branch: String::new(),
            target_branch: String::new(),
            sha,
            labels: Vec::new(),
            author: author.to_string(),
            squash: false,
            force_remove_source_branch: false,
            merge_commit_sha: None,
            squash_commit_sha: None,
            merged_by: None,
            closed_by: None,
            created_at: now.clone(),
            updated_at: now,
            merged_at: None,
            closed_at: None,
            base_sha,
            start_sha,
        }
    }
}

/// A note on a merge request.
#[derive(Clone, Debug)]
pub struct Note {
    pub id: u64,
    pub project_id: u64,
    pub mr_iid: u64,
    /// Username of the author.
    pub author: String,
    pub body: String,
    /// GitLab's own notes ("changed the description", "merged").
    pub system: bool,
    pub created_at: String,
    pub updated_at: String,
}

/// A commit status (a "generic commit status" job in an external pipeline).
#[derive(Clone, Debug)]
pub struct CommitStatus {
    pub id: u64,
    pub project_id: u64,
    pub sha: String,
    pub ref_name: String,
    pub name: String,
    /// `pending`, `running`, `success`, `failed`, `canceled` or `skipped`.
    pub status: String,
    pub description: Option<String>,
    pub target_url: Option<String>,
    pub coverage: Option<f64>,
    /// Username of the author.
    pub author: String,
    pub pipeline_id: u64,
    pub created_at: String,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    /// A newer status of the same name in the same pipeline replaced it; only
    /// `all=true` lists it.
    pub retried: bool,
}

/// One request the server received (`user`: the username the token belongs
/// to, if a known token was presented).
pub use super::http_fake::RecordedRequest;

/// A request that is wrong whatever state the server is in: malformed
/// parameters, a parameter GitLab does not declare, a token in the URL, or a
/// route GitLab does not have.
#[derive(Clone, Debug)]
pub struct Violation {
    pub method: String,
    pub path: String,
    pub reason: String,
    pub body: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}: {}; body: {}",
            self.method, self.path, self.reason, self.body
        )
    }
}

/// A scripted answer for the next matching requests.
#[derive(Clone, Debug)]
pub struct Fault {
    /// Which requests get this answer (e.g. path `"/statuses/"`), how many
    /// times, and whether before or after the work is done.
    pub scope: FaultScope,
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub content_type: String,
    pub body: String,
    /// Never answer: the request hangs until the server is dropped, so the
    /// client's own timeout must end it.
    pub hang: bool,
}

impl Fault {
    /// Answer the next matching request with `status` and GitLab's body for it
    /// (`{"message":"500 Internal Server Error"}`).
    pub fn new(method: &str, path_contains: &str, status: u16) -> Self {
        let reason = canonical_reason(status);
        Fault {
            scope: FaultScope::new(method, path_contains),
            status,
            headers: Vec::new(),
            content_type: "application/json".to_string(),
            body: json!({ "message": format!("{status} {reason}") }).to_string(),
            hang: false,
        }
    }

    /// GitLab's rate limiter (Rack::Attack): `429`, `Retry-After`, the
    /// `RateLimit-*` headers and the plain-text body `Retry later`.
    /// `reset_epoch` is when the window ends (Unix seconds).
    pub fn rate_limited(
        method: &str,
        path_contains: &str,
        retry_after_secs: u64,
        reset_epoch: u64,
    ) -> Self {
        let reset_time = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(reset_epoch));
        let mut fault = Fault::new(method, path_contains, 429)
            .header("retry-after", &retry_after_secs.to_string())
            .header("ratelimit-name", "throttle_authenticated_api")
            .header("ratelimit-limit", &RATE_LIMIT_PER_MINUTE.to_string())
            .header(
                "ratelimit-observed",
                &(RATE_LIMIT_PER_MINUTE + 1).to_string(),
            )
            .header("ratelimit-remaining", "0")
            .header("ratelimit-reset", &reset_epoch.to_string())
            .header("ratelimit-resettime", &reset_time);
        fault.content_type = "text/plain".to_string();
        fault.body = "Retry later\n".to_string();
        fault
    }

    /// The next matching request never gets an answer.
    pub fn hang(method: &str, path_contains: &str) -> Self {
        let mut fault = Fault::new(method, path_contains, 504);
        fault.hang = true;
        fault
    }

    pub fn times(mut self, times: usize) -> Self {
        self.scope.times = times;
        self
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    pub fn json_body(mut self, body: Value) -> Self {
        self.content_type = "application/json".to_string();
        self.body = body.to_string();
        self
    }

    pub fn after_effect(mut self) -> Self {
        self.scope.after_effect = true;
        self
    }
}

/// What a person's merge did in the repository.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MergeOutcome {
    /// The merge commit (`None` for a fast-forward).
    pub merge_commit_sha: Option<String>,
    /// The squash commit, when the merge request squashes.
    pub squash_commit_sha: Option<String>,
    /// Where the target branch points now.
    pub target_head: String,
}

// ---------------------------------------------------------------------------
// The server
// ---------------------------------------------------------------------------

/// A running fake GitLab instance. Stops when dropped.
pub struct GitLabServer {
    inner: Arc<Inner>,
    task: JoinHandle<()>,
}

impl GitLabServer {
    /// Starts a server on 127.0.0.1 (a fresh port) with one user `username`,
    /// whose token `token` has the `api` scope, and one private project
    /// `project_path` (`group/sub/project`) whose repository is the bare Git
    /// repository at `bare_repo`, with `username` as its Maintainer.
    pub async fn start(
        token: &str,
        username: &str,
        project_path: &str,
        bare_repo: &Path,
    ) -> GitLabServer {
        let server = GitLabServer::start_empty().await;
        server.add_user(username);
        server.add_token(token, username, Scope::Api);
        server.create_project(project_path, bare_repo);
        server.add_member(project_path, username, AccessLevel::Maintainer);
        server
    }

    /// Starts a server with no users, tokens or projects.
    pub async fn start_empty() -> GitLabServer {
        let (listener, base) = http_fake::loopback("GitLab").await;
        let (shutdown, _) = tokio::sync::watch::channel(false);
        let inner = Arc::new(Inner {
            base,
            state: Mutex::new(ServerState::default()),
            clock: Mutex::new(Clock::default()),
            shutdown,
        });
        let router = Router::new().fallback(handle).with_state(inner.clone());
        let task = http_fake::serve(listener, router, "GitLab");
        GitLabServer { inner, task }
    }

    /// The instance URL, like `https://gitlab.example.com` (no trailing slash).
    pub fn url(&self) -> String {
        self.inner.base.clone()
    }

    /// The REST v4 base, `<url>/api/v4`.
    pub fn api_url(&self) -> String {
        format!("{}{API_PREFIX}", self.inner.base)
    }

    /// Adds a user (if missing) and returns its id.
    pub fn add_user(&self, username: &str) -> u64 {
        self.inner.lock().ensure_user(username)
    }

    /// Registers a personal access token for `username` (added if missing).
    pub fn add_token(&self, token: &str, username: &str, scope: Scope) {
        assert!(!token.is_empty(), "a token must not be empty");
        let mut state = self.inner.lock();
        state.ensure_user(username);
        state.tokens.retain(|t| t.token != token);
        state.tokens.push(Token {
            token: token.to_string(),
            username: username.to_string(),
            scope,
        });
    }

    /// Revokes a token: it is answered `401` from now on.
    pub fn revoke_token(&self, token: &str) {
        self.inner.lock().tokens.retain(|t| t.token != token);
    }

    /// Creates a private project at `path` (`group/sub/name`) backed by the
    /// bare repository `bare_repo`; returns its id.
    pub fn create_project(&self, path: &str, bare_repo: &Path) -> u64 {
        check_project_path(path);
        assert!(
            git_out(bare_repo, &["rev-parse", "--git-dir"]).is_some(),
            "{} is not a Git repository",
            bare_repo.display()
        );
        let now = self.inner.now();
        let mut state = self.inner.lock();
        assert!(
            state.project_by_path(path).is_none(),
            "project {path} exists"
        );
        let id = FIRST_PROJECT_ID + state.projects.len() as u64;
        state.projects.push(Project {
            id,
            path: path.to_string(),
            git_dir: Some(bare_repo.to_path_buf()),
            forked_from: None,
            members: BTreeMap::new(),
            merge_method: MergeMethod::Merge,
            created_at: now,
            last_iid: 0,
        });
        id
    }

    /// Forks project `upstream` as `fork_path`, owned (Owner) by `owner`.
    /// The fork shares the upstream repository's objects, as GitLab's fork
    /// networks do; its merge requests' heads live under
    /// `refs/merge-requests/<iid>/head` of the upstream repository.
    pub fn fork_project(&self, upstream: &str, fork_path: &str, owner: &str) -> u64 {
        check_project_path(fork_path);
        let now = self.inner.now();
        let mut state = self.inner.lock();
        state.ensure_user(owner);
        let upstream_id = state.project_id(upstream);
        let id = FIRST_PROJECT_ID + state.projects.len() as u64;
        let mut members = BTreeMap::new();
        members.insert(owner.to_string(), AccessLevel::Owner);
        state.projects.push(Project {
            id,
            path: fork_path.to_string(),
            git_dir: None,
            forked_from: Some(upstream_id),
            members,
            merge_method: MergeMethod::Merge,
            created_at: now,
            last_iid: 0,
        });
        id
    }

    /// Gives `username` (added if missing) the role `level` in `project`.
    pub fn add_member(&self, project: &str, username: &str, level: AccessLevel) {
        let mut state = self.inner.lock();
        state.ensure_user(username);
        let index = state.project_index(project);
        state.projects[index]
            .members
            .insert(username.to_string(), level);
    }

    /// Sets a project's merge method.
    pub fn set_merge_method(&self, project: &str, method: MergeMethod) {
        let mut state = self.inner.lock();
        let index = state.project_index(project);
        state.projects[index].merge_method = method;
    }

    /// The id of project `path`.
    pub fn project_id(&self, path: &str) -> u64 {
        self.inner.lock().project_id(path)
    }

    /// Scripts a fault for the next matching requests, tried in the order added.
    pub fn inject(&self, fault: Fault) {
        self.inner.lock().faults.push(fault);
    }

    /// Opens a merge request in `project` from its `source_branch` as `username`
    /// would on GitLab's web page (not through the API). Returns its iid.
    pub fn open_mr_as(
        &self,
        username: &str,
        project: &str,
        source_branch: &str,
        target_branch: &str,
        title: &str,
    ) -> u64 {
        let (project_id, git_dir) = {
            let state = self.inner.lock();
            let p = &state.projects[state.project_index(project)];
            (p.id, state.repo_dir(p))
        };
        let sha = git_out(
            &git_dir,
            &[
                "rev-parse",
                "--verify",
                "--quiet",
                &branch_ref(source_branch),
            ],
        )
        .unwrap_or_else(|| panic!("no branch {source_branch} in {project}"));
        self.insert_mr(
            username,
            project_id,
            project_id,
            source_branch,
            &sha,
            target_branch,
            title,
        )
    }

    /// Opens a merge request into `target_project`'s `target_branch` from
    /// `source_branch` of the fork `fork_project` (see
    /// [`GitLabServer::fork_project`]), whose head is `head_sha`, a commit the
    /// upstream repository holds. Returns its iid.
    #[allow(clippy::too_many_arguments)]
    pub fn open_fork_mr_as(
        &self,
        username: &str,
        fork_project: &str,
        source_branch: &str,
        head_sha: &str,
        target_project: &str,
        target_branch: &str,
        title: &str,
    ) -> u64 {
        let (fork_id, target_id, git_dir) = {
            let state = self.inner.lock();
            let fork = &state.projects[state.project_index(fork_project)];
            let target = &state.projects[state.project_index(target_project)];
            assert_eq!(
                fork.forked_from,
                Some(target.id),
                "{fork_project} is not a fork of {target_project}"
            );
            (fork.id, target.id, state.repo_dir(target))
        };
        let sha = resolve_commit(&git_dir, head_sha)
            .unwrap_or_else(|| panic!("no commit {head_sha} in {target_project}"));
        self.insert_mr(
            username,
            fork_id,
            target_id,
            source_branch,
            &sha,
            target_branch,
            title,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn insert_mr(
        &self,
        username: &str,
        source_project_id: u64,
        target_project_id: u64,
        source_branch: &str,
        sha: &str,
        target_branch: &str,
        title: &str,
    ) -> u64 {
        let now = self.inner.now();
        let git_dir = {
            let state = self.inner.lock();
            state.repo_dir(state.project(target_project_id))
        };
        let start = git_out(
            &git_dir,
            &[
                "rev-parse",
                "--verify",
                "--quiet",
                &branch_ref(target_branch),
            ],
        )
        .unwrap_or_else(|| panic!("no target branch {target_branch}"));
        let base = git_out(&git_dir, &["merge-base", &start, sha]).unwrap_or_else(|| start.clone());
        let mut state = self.inner.lock();
        state.ensure_user(username);
        let iid = state.next_iid(target_project_id);
        state.last_mr_id += 1;
        let mr = MergeRequest {
            id: FIRST_MR_ID + state.last_mr_id,
            iid,
            project_id: target_project_id,
            source_project_id,
            title: title.to_string(),
            description: None,
            source_branch: source_branch.to_string(),
            target_branch: target_branch.to_string(),
            labels: Vec::new(),
            squash: false,
            force_remove_source_branch: false,
            ..MergeRequest::opened(username, sha.to_string(), base, start, now)
        };
        state.mrs.push(mr);
        drop(state);
        git_out(&git_dir, &["update-ref", &mr_head_ref(iid), sha]);
        iid
    }

    /// Merges merge request `iid` of `project` as `username` (a person pressing
    /// the button): the merge commit, squash commit or fast-forward is made in
    /// the bare repository as the project's merge method says, the target
    /// branch moves, the source branch is deleted when the merge request asked
    /// for it, and the merge request becomes `merged`.
    pub fn merge_mr_as(&self, username: &str, project: &str, iid: u64) -> MergeOutcome {
        self.refresh();
        let now = self.inner.now();
        let (mr, git_dir, method, full_path) = {
            let mut state = self.inner.lock();
            state.ensure_user(username);
            let p = state.project_index(project);
            let project_id = state.projects[p].id;
            let mr = state.mr(project_id, iid).clone();
            (
                mr,
                state.repo_dir(&state.projects[p]),
                state.projects[p].merge_method,
                state.projects[p].path.clone(),
            )
        };
        assert_eq!(mr.state, MrState::Opened, "!{iid} is not open");
        let target_head = git_out(
            &git_dir,
            &[
                "rev-parse",
                "--verify",
                "--quiet",
                &branch_ref(&mr.target_branch),
            ],
        )
        .unwrap_or_else(|| panic!("target branch {} is gone", mr.target_branch));
        let source_head = mr.sha.clone();
        let identity = |command: &mut std::process::Command| {
            let email = format!("{username}@example.com");
            command
                .env("GIT_AUTHOR_NAME", username)
                .env("GIT_AUTHOR_EMAIL", &email)
                .env("GIT_COMMITTER_NAME", username)
                .env("GIT_COMMITTER_EMAIL", &email);
        };
        let commit_tree = |tree: &str, parents: &[&str], message: &str| -> String {
            let mut command = super::git::git_command();
            command
                .current_dir(&git_dir)
                .args(["commit-tree", tree, "-m", message]);
            for parent in parents {
                command.args(["-p", parent]);
            }
            identity(&mut command);
            let output = command.output().expect("run git commit-tree");
            assert!(
                output.status.success(),
                "git commit-tree failed: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            String::from_utf8_lossy(&output.stdout).trim().to_string()
        };
        let source_tree = format!("{source_head}^{{tree}}");
        let (merge_commit, squash_commit, new_head) = match method {
            MergeMethod::Merge => {
                let squash = mr.squash.then(|| {
                    let base = git_out(&git_dir, &["merge-base", &target_head, &source_head])
                        .unwrap_or_else(|| panic!("!{iid}: no merge base"));
                    let tree =
                        git_out(&git_dir, &["rev-parse", &source_tree]).expect("source tree");
                    commit_tree(&tree, &[&base], &mr.title)
                });
                let merged_in = squash.clone().unwrap_or_else(|| source_head.clone());
                let tree = git_out(
                    &git_dir,
                    &["merge-tree", "--write-tree", &target_head, &merged_in],
                )
                .unwrap_or_else(|| panic!("!{iid} has conflicts with {}", mr.target_branch));
                let tree = tree.lines().next().unwrap_or_default().to_string();
                let message = format!(
                    "Merge branch '{}' into '{}'\n\n{}\n\nSee merge request {full_path}!{iid}",
                    mr.source_branch, mr.target_branch, mr.title
                );
                let merge = commit_tree(&tree, &[&target_head, &merged_in], &message);
                (Some(merge.clone()), squash, merge)
            }
            MergeMethod::FastForward => {
                assert!(
                    git_out(
                        &git_dir,
                        &["merge-base", "--is-ancestor", &target_head, &source_head]
                    )
                    .is_some(),
                    "!{iid} cannot be fast-forwarded: {} moved on (GitLab asks for a rebase)",
                    mr.target_branch
                );
                if mr.squash {
                    let tree =
                        git_out(&git_dir, &["rev-parse", &source_tree]).expect("source tree");
                    let squash = commit_tree(&tree, &[&target_head], &mr.title);
                    (None, Some(squash.clone()), squash)
                } else {
                    (None, None, source_head.clone())
                }
            }
        };
        assert!(
            git_out(
                &git_dir,
                &[
                    "update-ref",
                    &branch_ref(&mr.target_branch),
                    &new_head,
                    &target_head
                ]
            )
            .is_some(),
            "move {} to {new_head}",
            mr.target_branch
        );
        let same_project = mr.source_project_id == mr.project_id;
        if mr.force_remove_source_branch && same_project {
            git_out(
                &git_dir,
                &["update-ref", "-d", &branch_ref(&mr.source_branch)],
            );
        }
        let mut state = self.inner.lock();
        let m = state.mr_mut(mr.project_id, iid);
        m.state = MrState::Merged;
        m.merge_commit_sha = merge_commit.clone();
        m.squash_commit_sha = squash_commit.clone();
        m.merged_by = Some(username.to_string());
        m.merged_at = Some(now.clone());
        m.updated_at = now.clone();
        state.add_note(mr.project_id, iid, username, "merged", true, &now);
        MergeOutcome {
            merge_commit_sha: merge_commit,
            squash_commit_sha: squash_commit,
            target_head: new_head,
        }
    }

    /// Closes merge request `iid` of `project` as `username`, as a person would.
    pub fn close_mr_as(&self, username: &str, project: &str, iid: u64) {
        let now = self.inner.now();
        let mut state = self.inner.lock();
        state.ensure_user(username);
        let project_id = state.project_id(project);
        let mr = state.mr_mut(project_id, iid);
        assert_eq!(mr.state, MrState::Opened, "!{iid} is not open");
        mr.state = MrState::Closed;
        mr.closed_at = Some(now.clone());
        mr.closed_by = Some(username.to_string());
        mr.updated_at = now.clone();
        state.add_note(project_id, iid, username, "closed", true, &now);
    }

    /// Adds a note by `username` (a reviewer, another bot). Returns its id.
    pub fn add_note_as(&self, username: &str, project: &str, iid: u64, body: &str) -> u64 {
        let now = self.inner.now();
        let mut state = self.inner.lock();
        state.ensure_user(username);
        let project_id = state.project_id(project);
        state.mr(project_id, iid);
        state.add_note(project_id, iid, username, body, false, &now)
    }

    /// Posts a commit status as `username` (a CI job, a person), through the
    /// same rules as the API (`name` and `ref` as given). Panics where GitLab
    /// would refuse. Returns the status id.
    pub fn add_status_as(
        &self,
        username: &str,
        project: &str,
        sha: &str,
        state: &str,
        name: &str,
        ref_name: &str,
    ) -> u64 {
        let (project_id, git_dir) = {
            let mut s = self.inner.lock();
            s.ensure_user(username);
            let p = s.project_index(project);
            (s.projects[p].id, s.repo_dir(&s.projects[p]))
        };
        let sha = resolve_commit(&git_dir, sha).unwrap_or_else(|| panic!("no commit {sha}"));
        let post = StatusPost {
            state: state.to_string(),
            name: name.to_string(),
            ref_name: ref_name.to_string(),
            description: None,
            target_url: None,
            coverage: None,
            pipeline_id: None,
        };
        match post_status(&self.inner, project_id, &sha, username, post) {
            Ok(status) => status.id,
            Err(reply) => panic!("GitLab refuses this status: {}", reply.body),
        }
    }

    /// The merge requests of `project`, by iid, heads refreshed from the repository.
    pub fn mrs(&self, project: &str) -> Vec<MergeRequest> {
        self.refresh();
        let state = self.inner.lock();
        let id = state.project_id(project);
        state
            .mrs
            .iter()
            .filter(|m| m.project_id == id)
            .cloned()
            .collect()
    }

    /// Merge request `iid` of `project`.
    pub fn mr(&self, project: &str, iid: u64) -> MergeRequest {
        self.refresh();
        let state = self.inner.lock();
        let id = state.project_id(project);
        state.mr(id, iid).clone()
    }

    /// The notes on merge request `iid` of `project`, oldest first, system notes included.
    pub fn notes(&self, project: &str, iid: u64) -> Vec<Note> {
        let state = self.inner.lock();
        let id = state.project_id(project);
        state
            .notes
            .iter()
            .filter(|n| n.project_id == id && n.mr_iid == iid)
            .cloned()
            .collect()
    }

    /// Every status posted on `sha` in `project`, oldest first, retried ones included.
    pub fn statuses(&self, project: &str, sha: &str) -> Vec<CommitStatus> {
        let state = self.inner.lock();
        let id = state.project_id(project);
        state
            .statuses
            .iter()
            .filter(|s| s.project_id == id && s.sha == sha)
            .cloned()
            .collect()
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.inner.lock().requests.clone()
    }

    /// Freezes the server's clock at `at`: everything it creates carries that
    /// time until the clock is advanced.
    pub fn freeze_clock(&self, at: SystemTime) {
        self.inner.clock_mut().frozen = Some(at);
    }

    /// Moves the server's clock `by` ahead (frozen or not).
    pub fn advance_clock(&self, by: Duration) {
        let mut clock = self.inner.clock_mut();
        match clock.frozen.as_mut() {
            Some(at) => *at += by,
            None => clock.offset += by,
        }
    }

    /// The server's current time.
    pub fn now(&self) -> SystemTime {
        self.inner.now_time()
    }

    /// Violations so far (still pending: `Drop` fails the test unless taken).
    pub fn violations(&self) -> Vec<Violation> {
        self.inner.lock().violations.clone()
    }

    /// Returns and forgets the violations, for tests that provoke them.
    pub fn take_violations(&self) -> Vec<Violation> {
        std::mem::take(&mut self.inner.lock().violations)
    }

    /// Panics with the list of violations if there are any.
    pub fn assert_no_violations(&self) {
        http_fake::assert_no_violations(&self.violations(), "GitLab", "reject or ignore");
    }

    fn refresh(&self) {
        refresh_mrs(&self.inner);
    }
}

impl Drop for GitLabServer {
    /// Releases hanging requests, stops serving, and fails the test that
    /// caused a violation and did not take it (only printed while already
    /// panicking, since a second panic would abort the test binary).
    fn drop(&mut self) {
        let _ = self.inner.shutdown.send(true);
        self.task.abort();
        let violations = std::mem::take(&mut self.inner.lock().violations);
        http_fake::fail_on_untaken(&violations, "GitLab", "reject or ignore");
    }
}

// ---------------------------------------------------------------------------
// State
// ---------------------------------------------------------------------------

struct Inner {
    base: String,
    state: Mutex<ServerState>,
    clock: Mutex<Clock>,
    /// Set on drop; hanging requests wait for it.
    shutdown: tokio::sync::watch::Sender<bool>,
}

#[derive(Default)]
struct Clock {
    frozen: Option<SystemTime>,
    offset: Duration,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, ServerState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn clock_mut(&self) -> MutexGuard<'_, Clock> {
        self.clock.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn now_time(&self) -> SystemTime {
        let clock = self.clock_mut();
        clock
            .frozen
            .unwrap_or_else(|| SystemTime::now() + clock.offset)
    }

    /// The server's time as GitLab writes it: `2016-01-19T09:05:50.355Z`.
    fn now(&self) -> String {
        timestamp(self.now_time())
    }
}

struct User {
    id: u64,
    username: String,
}

struct Token {
    token: String,
    username: String,
    scope: Scope,
}

struct Project {
    id: u64,
    path: String,
    /// `None` for a fork: it uses its upstream's repository.
    git_dir: Option<PathBuf>,
    forked_from: Option<u64>,
    members: BTreeMap<String, AccessLevel>,
    merge_method: MergeMethod,
    created_at: String,
    last_iid: u64,
}

struct Pipeline {
    id: u64,
    project_id: u64,
    sha: String,
    ref_name: String,
}

#[derive(Default)]
struct ServerState {
    users: Vec<User>,
    tokens: Vec<Token>,
    projects: Vec<Project>,
    mrs: Vec<MergeRequest>,
    notes: Vec<Note>,
    statuses: Vec<CommitStatus>,
    pipelines: Vec<Pipeline>,
    requests: Vec<RecordedRequest>,
    violations: Vec<Violation>,
    faults: Vec<Fault>,
    last_mr_id: u64,
    last_note_id: u64,
    last_status_id: u64,
    /// Requests per minute of the server clock, for `RateLimit-Observed`.
    minute: (u64, u64),
}

impl ServerState {
    fn ensure_user(&mut self, username: &str) -> u64 {
        assert!(
            !username.is_empty()
                && username
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')),
            "{username:?} is not a GitLab username"
        );
        if let Some(user) = self.users.iter().find(|u| u.username == username) {
            return user.id;
        }
        let id = FIRST_USER_ID + self.users.len() as u64;
        self.users.push(User {
            id,
            username: username.to_string(),
        });
        id
    }

    fn user_id(&self, username: &str) -> u64 {
        self.users
            .iter()
            .find(|u| u.username == username)
            .map_or(0, |u| u.id)
    }

    fn project_by_path(&self, path: &str) -> Option<&Project> {
        self.projects
            .iter()
            .find(|p| p.path.eq_ignore_ascii_case(path))
    }

    fn project_index(&self, path: &str) -> usize {
        self.projects
            .iter()
            .position(|p| p.path.eq_ignore_ascii_case(path))
            .unwrap_or_else(|| panic!("no project {path}"))
    }

    fn project_id(&self, path: &str) -> u64 {
        self.projects[self.project_index(path)].id
    }

    fn project(&self, id: u64) -> &Project {
        self.projects
            .iter()
            .find(|p| p.id == id)
            .unwrap_or_else(|| panic!("no project {id}"))
    }

    /// The repository holding a project's commits: its own, or its upstream's for a fork.
    fn repo_dir(&self, project: &Project) -> PathBuf {
        match (&project.git_dir, project.forked_from) {
            (Some(dir), _) => dir.clone(),
            (None, Some(upstream)) => self.repo_dir(self.project(upstream)),
            (None, None) => panic!("project {} has no repository", project.path),
        }
    }

    fn next_iid(&mut self, project_id: u64) -> u64 {
        let project = self
            .projects
            .iter_mut()
            .find(|p| p.id == project_id)
            .expect("project exists");
        project.last_iid += 1;
        project.last_iid
    }

    /// Merge request `iid` of a project, if it has one.
    fn find_mr(&self, project_id: u64, iid: u64) -> Option<&MergeRequest> {
        self.mrs
            .iter()
            .find(|m| m.project_id == project_id && m.iid == iid)
    }

    fn mr(&self, project_id: u64, iid: u64) -> &MergeRequest {
        self.find_mr(project_id, iid)
            .unwrap_or_else(|| panic!("no merge request !{iid} in project {project_id}"))
    }

    fn mr_mut(&mut self, project_id: u64, iid: u64) -> &mut MergeRequest {
        self.mrs
            .iter_mut()
            .find(|m| m.project_id == project_id && m.iid == iid)
            .unwrap_or_else(|| panic!("no merge request !{iid} in project {project_id}"))
    }

    fn add_note(
        &mut self,
        project_id: u64,
        iid: u64,
        author: &str,
        body: &str,
        system: bool,
        now: &str,
    ) -> u64 {
        self.last_note_id += 1;
        let id = FIRST_NOTE_ID + self.last_note_id;
        self.notes.push(Note {
            id,
            project_id,
            mr_iid: iid,
            author: author.to_string(),
            body: body.to_string(),
            system,
            created_at: now.to_string(),
            updated_at: now.to_string(),
        });
        id
    }

    /// The scripted fault for this request, before (`after` false) or after
    /// its work is done.
    fn take_fault(&mut self, method: &str, path: &str, after: bool) -> Option<Fault> {
        http_fake::take_fault(&mut self.faults, |f| &mut f.scope, method, path, after)
    }
}

fn check_project_path(path: &str) {
    let segments: Vec<&str> = path.split('/').collect();
    assert!(
        segments.len() >= 2
            && segments.iter().all(|s| {
                !s.is_empty()
                    && s.chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            }),
        "{path:?} is not a GitLab project path (namespace/name)"
    );
}

// ---------------------------------------------------------------------------
// Git
// ---------------------------------------------------------------------------

/// Runs git on the bare repository `dir` (isolated from the machine's
/// configuration); its trimmed stdout on success.
fn git_out(dir: &Path, args: &[&str]) -> Option<String> {
    let output = super::git::run_git(dir, args);
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_string())
}

fn branch_ref(branch: &str) -> String {
    format!("refs/heads/{branch}")
}

fn mr_head_ref(iid: u64) -> String {
    format!("refs/merge-requests/{iid}/head")
}

/// The full SHA of a commit named by a (possibly short) SHA, a branch or a
/// tag, as GitLab's `project.commit(ref)` resolves it. Names are only looked
/// up under `refs/`, so nothing is read as an option.
fn resolve_commit(dir: &Path, name: &str) -> Option<String> {
    let looks_hex = (4..=40).contains(&name.len()) && name.chars().all(|c| c.is_ascii_hexdigit());
    let mut candidates = Vec::new();
    if looks_hex {
        candidates.push(name.to_string());
    }
    candidates.push(format!("refs/heads/{name}"));
    candidates.push(format!("refs/tags/{name}"));
    candidates.into_iter().find_map(|rev| {
        git_out(
            dir,
            &[
                "rev-parse",
                "--verify",
                "--quiet",
                &format!("{rev}^{{commit}}"),
            ],
        )
    })
}

/// Follows open merge requests' source branches (same-project ones; a fork's
/// head is set when it is opened), keeps `refs/merge-requests/<iid>/head` and
/// the diff refs current, as GitLab does on push.
fn refresh_mrs(inner: &Inner) {
    let open: Vec<(u64, u64, String, String, PathBuf, bool)> = {
        let state = inner.lock();
        state
            .mrs
            .iter()
            .filter(|m| m.state == MrState::Opened)
            .map(|m| {
                (
                    m.project_id,
                    m.iid,
                    m.source_branch.clone(),
                    m.target_branch.clone(),
                    state.repo_dir(state.project(m.project_id)),
                    m.source_project_id == m.project_id,
                )
            })
            .collect()
    };
    for (project_id, iid, source, target, dir, same_project) in open {
        let head = if same_project {
            git_out(
                &dir,
                &["rev-parse", "--verify", "--quiet", &branch_ref(&source)],
            )
        } else {
            None
        };
        let start = git_out(
            &dir,
            &["rev-parse", "--verify", "--quiet", &branch_ref(&target)],
        );
        let sha = head.unwrap_or_else(|| inner.lock().mr(project_id, iid).sha.clone());
        let base = start
            .as_deref()
            .and_then(|start| git_out(&dir, &["merge-base", start, &sha]));
        git_out(&dir, &["update-ref", &mr_head_ref(iid), &sha]);
        let mut state = inner.lock();
        let mr = state.mr_mut(project_id, iid);
        mr.sha = sha;
        if let Some(start) = start {
            mr.start_sha = start;
        }
        if let Some(base) = base {
            mr.base_sha = base;
        }
    }
}

// ---------------------------------------------------------------------------
// Parameters, as Grape declares and checks them
// ---------------------------------------------------------------------------

#[derive(Clone, Copy)]
enum Kind {
    Str,
    Int,
    Bool,
    Float,
    /// `Array[String]` that also takes a comma-separated string (GitLab's labels).
    List,
    IntList,
    OneOf(&'static [&'static str]),
}

struct Spec {
    name: &'static str,
    kind: Kind,
    required: bool,
}

const fn opt(name: &'static str, kind: Kind) -> Spec {
    Spec {
        name,
        kind,
        required: false,
    }
}

const fn req(name: &'static str, kind: Kind) -> Spec {
    Spec {
        name,
        kind,
        required: true,
    }
}

const PAGINATION: [Spec; 2] = [opt("page", Kind::Int), opt("per_page", Kind::Int)];

const GET_USER: &[Spec] = &[];
const GET_PROJECT: &[Spec] = &[
    opt("statistics", Kind::Bool),
    opt("license", Kind::Bool),
    opt("with_custom_attributes", Kind::Bool),
];
const LIST_MRS: &[Spec] = &[
    opt(
        "state",
        Kind::OneOf(&["opened", "closed", "locked", "merged", "all"]),
    ),
    opt(
        "order_by",
        Kind::OneOf(&["created_at", "updated_at", "title", "merged_at"]),
    ),
    opt("sort", Kind::OneOf(&["asc", "desc"])),
    opt("labels", Kind::List),
    opt("source_branch", Kind::Str),
    opt("target_branch", Kind::Str),
    opt("author_username", Kind::Str),
    opt("iids", Kind::IntList),
    opt(
        "scope",
        Kind::OneOf(&["created_by_me", "assigned_to_me", "all"]),
    ),
    opt("view", Kind::OneOf(&["simple"])),
    opt("with_merge_status_recheck", Kind::Bool),
];
const GET_MR: &[Spec] = &[
    opt("include_diverged_commits_count", Kind::Bool),
    opt("include_rebase_in_progress", Kind::Bool),
    opt("render_html", Kind::Bool),
];
/// The merge options and people a merge request is created or updated with.
const MR_OPTIONS: &[Spec] = &[
    opt("remove_source_branch", Kind::Bool),
    opt("squash", Kind::Bool),
    opt("assignee_id", Kind::Int),
    opt("assignee_ids", Kind::IntList),
    opt("reviewer_ids", Kind::IntList),
    opt("milestone_id", Kind::Int),
];
/// In GitLab's documented order, [`MR_OPTIONS`] in the middle.
const CREATE_MR: &[&[Spec]] = &[
    &[
        req("source_branch", Kind::Str),
        req("target_branch", Kind::Str),
        req("title", Kind::Str),
        opt("description", Kind::Str),
        opt("labels", Kind::List),
    ],
    MR_OPTIONS,
    &[
        opt("allow_collaboration", Kind::Bool),
        opt("target_project_id", Kind::Int),
    ],
];
/// The update parameters; GitLab wants at least one of them.
const UPDATE_MR: &[&[Spec]] = &[
    &[
        opt("title", Kind::Str),
        opt("description", Kind::Str),
        opt("labels", Kind::List),
        opt("add_labels", Kind::List),
        opt("remove_labels", Kind::List),
        opt("state_event", Kind::OneOf(&["close", "reopen"])),
        opt("target_branch", Kind::Str),
    ],
    MR_OPTIONS,
    &[
        opt("discussion_locked", Kind::Bool),
        opt("allow_collaboration", Kind::Bool),
    ],
];
const LIST_NOTES: &[Spec] = &[
    opt("sort", Kind::OneOf(&["asc", "desc"])),
    opt("order_by", Kind::OneOf(&["created_at", "updated_at"])),
];
const CREATE_NOTE: &[Spec] = &[
    req("body", Kind::Str),
    opt("internal", Kind::Bool),
    opt("merge_request_diff_head_sha", Kind::Str),
];
const UPDATE_NOTE: &[Spec] = &[req("body", Kind::Str)];
const GET_NOTE: &[Spec] = &[];
const CREATE_STATUS: &[Spec] = &[
    req(
        "state",
        Kind::OneOf(&[
            "pending", "running", "success", "failed", "canceled", "skipped",
        ]),
    ),
    opt("ref", Kind::Str),
    opt("name", Kind::Str),
    opt("context", Kind::Str),
    opt("target_url", Kind::Str),
    opt("description", Kind::Str),
    opt("coverage", Kind::Float),
    opt("pipeline_id", Kind::Int),
];
const LIST_STATUSES: &[Spec] = &[
    opt("ref", Kind::Str),
    opt("stage", Kind::Str),
    opt("name", Kind::Str),
    opt("pipeline_id", Kind::Int),
    opt("order_by", Kind::OneOf(&["id", "pipeline_id"])),
    opt("sort", Kind::OneOf(&["asc", "desc"])),
    opt("all", Kind::Bool),
];

/// A parameter after Grape's coercion.
#[derive(Clone, Debug)]
enum Param {
    Str(String),
    Int(i64),
    Bool(bool),
    Float(f64),
    List(Vec<String>),
    IntList(Vec<i64>),
}

#[derive(Default)]
struct Params {
    values: BTreeMap<String, Param>,
}

impl Params {
    fn has(&self, name: &str) -> bool {
        self.values.contains_key(name)
    }

    fn str(&self, name: &str) -> Option<&str> {
        match self.values.get(name) {
            Some(Param::Str(s)) => Some(s),
            _ => None,
        }
    }

    fn int(&self, name: &str) -> Option<i64> {
        match self.values.get(name) {
            Some(Param::Int(n)) => Some(*n),
            _ => None,
        }
    }

    fn bool(&self, name: &str) -> Option<bool> {
        match self.values.get(name) {
            Some(Param::Bool(b)) => Some(*b),
            _ => None,
        }
    }

    fn float(&self, name: &str) -> Option<f64> {
        match self.values.get(name) {
            Some(Param::Float(f)) => Some(*f),
            _ => None,
        }
    }

    fn list(&self, name: &str) -> Option<&[String]> {
        match self.values.get(name) {
            Some(Param::List(l)) => Some(l),
            _ => None,
        }
    }

    fn int_list(&self, name: &str) -> Option<&[i64]> {
        match self.values.get(name) {
            Some(Param::IntList(l)) => Some(l),
            _ => None,
        }
    }
}

/// Checks and coerces `raw` against `specs` as Grape does: all problems in
/// declaration order, joined by ", " in one `{"error": …}`.
fn validate_params(specs: &[&[Spec]], raw: &BTreeMap<String, Value>) -> Result<Params, String> {
    let mut errors = Vec::new();
    let mut params = Params::default();
    for spec in specs.iter().flat_map(|s| s.iter()) {
        let value = raw.get(spec.name).filter(|v| !v.is_null());
        let Some(value) = value else {
            if spec.required {
                errors.push(format!("{} is missing", spec.name));
            }
            continue;
        };
        match coerce(spec.kind, value) {
            Ok(param) => {
                params.values.insert(spec.name.to_string(), param);
            }
            Err(Invalid::Type) => errors.push(format!("{} is invalid", spec.name)),
            Err(Invalid::Value) => {
                errors.push(format!("{} does not have a valid value", spec.name))
            }
        }
    }
    if errors.is_empty() {
        Ok(params)
    } else {
        Err(errors.join(", "))
    }
}

enum Invalid {
    Type,
    Value,
}

fn coerce(kind: Kind, value: &Value) -> Result<Param, Invalid> {
    let as_text = |v: &Value| match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    };
    match kind {
        Kind::Str => as_text(value).map(Param::Str).ok_or(Invalid::Type),
        Kind::Int => match value {
            Value::Number(n) => n.as_i64().map(Param::Int).ok_or(Invalid::Type),
            Value::String(s) => s.trim().parse().map(Param::Int).map_err(|_| Invalid::Type),
            _ => Err(Invalid::Type),
        },
        Kind::Float => match value {
            Value::Number(n) => n.as_f64().map(Param::Float).ok_or(Invalid::Type),
            Value::String(s) => s
                .trim()
                .parse()
                .map(Param::Float)
                .map_err(|_| Invalid::Type),
            _ => Err(Invalid::Type),
        },
        Kind::Bool => {
            let text = match value {
                Value::Bool(b) => return Ok(Param::Bool(*b)),
                Value::Number(n) => n.to_string(),
                Value::String(s) => s.to_ascii_lowercase(),
                _ => return Err(Invalid::Type),
            };
            match text.as_str() {
                "1" | "on" | "t" | "true" | "y" | "yes" => Ok(Param::Bool(true)),
                "0" | "off" | "f" | "false" | "n" | "no" => Ok(Param::Bool(false)),
                _ => Err(Invalid::Type),
            }
        }
        Kind::List => {
            let items: Vec<String> = match value {
                Value::Array(items) => {
                    let texts: Option<Vec<String>> = items.iter().map(as_text).collect();
                    texts.ok_or(Invalid::Type)?
                }
                other => vec![as_text(other).ok_or(Invalid::Type)?],
            };
            Ok(Param::List(
                items
                    .iter()
                    .flat_map(|s| s.split(','))
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect(),
            ))
        }
        Kind::IntList => {
            let items = match value {
                Value::Array(items) => items.clone(),
                other => vec![other.clone()],
            };
            let mut out = Vec::new();
            for item in &items {
                match coerce(Kind::Int, item)? {
                    Param::Int(n) => out.push(n),
                    _ => return Err(Invalid::Type),
                }
            }
            Ok(Param::IntList(out))
        }
        Kind::OneOf(allowed) => {
            let text = as_text(value).ok_or(Invalid::Type)?;
            if allowed.contains(&text.as_str()) {
                Ok(Param::Str(text))
            } else {
                Err(Invalid::Value)
            }
        }
    }
}

/// Query and body parameters merged, as Grape sees them: `key[]` collects an
/// array; a JSON object body or a form body adds to (and overrides) the query.
fn raw_params(
    query: Option<&str>,
    headers: &HeaderMap,
    body: &str,
) -> Result<BTreeMap<String, Value>, String> {
    let mut raw: BTreeMap<String, Value> = BTreeMap::new();
    let add_pair = |raw: &mut BTreeMap<String, Value>, key: String, value: String| {
        if let Some(name) = key.strip_suffix("[]") {
            let entry = raw
                .entry(name.to_string())
                .or_insert_with(|| Value::Array(Vec::new()));
            if let Value::Array(items) = entry {
                items.push(Value::String(value));
            }
        } else {
            raw.insert(key, Value::String(value));
        }
    };
    if let Some(query) = query {
        for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
            add_pair(&mut raw, k.into_owned(), v.into_owned());
        }
    }
    if body.trim().is_empty() {
        return Ok(raw);
    }
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    if content_type.starts_with("application/x-www-form-urlencoded") {
        for (k, v) in url::form_urlencoded::parse(body.as_bytes()) {
            add_pair(&mut raw, k.into_owned(), v.into_owned());
        }
        return Ok(raw);
    }
    if !content_type.starts_with("application/json") {
        return Err(format!(
            "a body with content-type {content_type:?}: send JSON with `Content-Type: application/json` (or a form)"
        ));
    }
    match serde_json::from_str::<Value>(body) {
        Ok(Value::Object(map)) => {
            raw.extend(map);
            Ok(raw)
        }
        Ok(_) => Err("the JSON body is not an object".to_string()),
        Err(e) => Err(format!("the body is not JSON: {e}")),
    }
}

// ---------------------------------------------------------------------------
// Routing
// ---------------------------------------------------------------------------

enum Route {
    User,
    Project,
    ListMrs,
    CreateMr,
    GetMr(u64),
    UpdateMr(u64),
    ListNotes(u64),
    CreateNote(u64),
    GetNote(u64, u64),
    UpdateNote(u64, u64),
    CreateStatus(String),
    ListStatuses(String),
}

impl Route {
    fn specs(&self) -> Vec<&'static [Spec]> {
        match self {
            Route::User => vec![GET_USER],
            Route::Project => vec![GET_PROJECT],
            Route::ListMrs => vec![LIST_MRS, &PAGINATION],
            Route::CreateMr => CREATE_MR.to_vec(),
            Route::GetMr(_) => vec![GET_MR],
            Route::UpdateMr(_) => UPDATE_MR.to_vec(),
            Route::ListNotes(_) => vec![LIST_NOTES, &PAGINATION],
            Route::CreateNote(_) => vec![CREATE_NOTE],
            Route::GetNote(..) => vec![GET_NOTE],
            Route::UpdateNote(..) => vec![UPDATE_NOTE],
            Route::CreateStatus(_) => vec![CREATE_STATUS],
            Route::ListStatuses(_) => vec![LIST_STATUSES, &PAGINATION],
        }
    }

    fn is_write(&self) -> bool {
        matches!(
            self,
            Route::CreateMr
                | Route::UpdateMr(_)
                | Route::CreateNote(_)
                | Route::UpdateNote(..)
                | Route::CreateStatus(_)
        )
    }
}

enum Routed {
    /// A route, and the `:id` path segment (decoded) for project routes.
    Known(Route, Option<String>),
    /// GitLab has the path but not for this method: 405.
    WrongMethod,
    /// No such route: GitLab's `{"error":"404 Not Found"}`.
    Unknown,
}

/// Maps method + raw path (under `/api/v4`) to a route. The project `:id` is
/// one segment: a number or a URL-encoded path (`group%2Fproject`); an
/// unencoded path spans segments and matches nothing, as on GitLab.
fn route(method: &Method, raw_path: &str) -> Routed {
    let Some(rest) = raw_path.strip_prefix(API_PREFIX) else {
        return Routed::Unknown;
    };
    let segments: Vec<String> = rest
        .trim_start_matches('/')
        .split('/')
        .map(percent_decode)
        .collect();
    let seg: Vec<&str> = segments.iter().map(String::as_str).collect();
    let number = |s: &str| s.parse::<u64>().ok();
    let get = *method == Method::GET;
    let post = *method == Method::POST;
    let put = *method == Method::PUT;
    let known = |route: Route, id: &str| Routed::Known(route, Some(id.to_string()));
    match seg.as_slice() {
        ["user"] if get => Routed::Known(Route::User, None),
        ["user"] => Routed::WrongMethod,
        ["projects", id] if get => known(Route::Project, id),
        ["projects", _] => Routed::WrongMethod,
        ["projects", id, "merge_requests"] if get => known(Route::ListMrs, id),
        ["projects", id, "merge_requests"] if post => known(Route::CreateMr, id),
        ["projects", _, "merge_requests"] => Routed::WrongMethod,
        ["projects", id, "merge_requests", iid] => match (number(iid), get, put) {
            (Some(iid), true, _) => known(Route::GetMr(iid), id),
            (Some(iid), _, true) => known(Route::UpdateMr(iid), id),
            (Some(_), _, _) => Routed::WrongMethod,
            (None, _, _) => Routed::Unknown,
        },
        ["projects", id, "merge_requests", iid, "notes"] => match (number(iid), get, post) {
            (Some(iid), true, _) => known(Route::ListNotes(iid), id),
            (Some(iid), _, true) => known(Route::CreateNote(iid), id),
            (Some(_), _, _) => Routed::WrongMethod,
            (None, _, _) => Routed::Unknown,
        },
        ["projects", id, "merge_requests", iid, "notes", note] => {
            match (number(iid), number(note), get, put) {
                (Some(iid), Some(note), true, _) => known(Route::GetNote(iid, note), id),
                (Some(iid), Some(note), _, true) => known(Route::UpdateNote(iid, note), id),
                (Some(_), Some(_), _, _) => Routed::WrongMethod,
                _ => Routed::Unknown,
            }
        }
        ["projects", id, "statuses", sha] if post && !sha.is_empty() => {
            known(Route::CreateStatus(sha.to_string()), id)
        }
        ["projects", _, "statuses", _] => Routed::WrongMethod,
        ["projects", id, "repository", "commits", sha, "statuses"] if get && !sha.is_empty() => {
            known(Route::ListStatuses(sha.to_string()), id)
        }
        ["projects", _, "repository", "commits", _, "statuses"] => Routed::WrongMethod,
        _ => Routed::Unknown,
    }
}

// ---------------------------------------------------------------------------
// Request handling
// ---------------------------------------------------------------------------

/// What a handler answers before the common headers are added.
struct Reply {
    status: StatusCode,
    content_type: String,
    body: String,
    headers: Vec<(String, String)>,
}

impl Reply {
    fn json(status: StatusCode, body: Value) -> Reply {
        Reply {
            status,
            content_type: "application/json".to_string(),
            body: body.to_string(),
            headers: Vec::new(),
        }
    }

    fn with_header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }
}

fn message(status: StatusCode, text: &str) -> Reply {
    Reply::json(status, json!({ "message": text }))
}

fn unauthorized() -> Reply {
    message(StatusCode::UNAUTHORIZED, "401 Unauthorized")
}

fn forbidden() -> Reply {
    message(StatusCode::FORBIDDEN, "403 Forbidden")
}

fn project_not_found() -> Reply {
    message(StatusCode::NOT_FOUND, "404 Project Not Found")
}

fn record_not_found() -> Reply {
    message(StatusCode::NOT_FOUND, "404 Not found")
}

fn bad_request_error(text: &str) -> Reply {
    Reply::json(StatusCode::BAD_REQUEST, json!({ "error": text }))
}

/// A model validation failure: `{"message":{"field":["problem"]}}`.
fn validation_error(field: &str, problem: &str) -> Reply {
    Reply::json(
        StatusCode::BAD_REQUEST,
        json!({ "message": { field: [problem] } }),
    )
}

fn insufficient_scope() -> Reply {
    Reply::json(
        StatusCode::FORBIDDEN,
        json!({
            "error": "insufficient_scope",
            "error_description": "The request requires higher privileges than provided by the access token.",
            "scope": "api",
        }),
    )
}

enum Outcome {
    Reply(Reply),
    Hang,
}

/// The single axum handler: reads the request, does the work on a blocking
/// thread (git runs as a subprocess), records and answers.
async fn handle(AxumState(inner): AxumState<Arc<Inner>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let body_text = http_fake::body_text(body).await;
    let worker = inner.clone();
    let outcome = tokio::task::spawn_blocking(move || answer(&worker, &parts, &body_text)).await;
    match outcome {
        Ok(Outcome::Reply(reply)) => into_response(&inner, reply),
        Ok(Outcome::Hang) => {
            let mut shutdown = inner.shutdown.subscribe();
            let _ = shutdown.wait_for(|stopped| *stopped).await;
            into_response(
                &inner,
                message(StatusCode::SERVICE_UNAVAILABLE, "503 Service Unavailable"),
            )
        }
        Err(panic) => into_response(
            &inner,
            message(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("500 Internal Server Error (the test server panicked: {panic})"),
            ),
        ),
    }
}

fn answer(inner: &Arc<Inner>, parts: &axum::http::request::Parts, body_text: &str) -> Outcome {
    let method = parts.method.clone();
    let path = parts.uri.path().to_string();
    let query = parts.uri.query().map(str::to_string);
    let user = presented_token(&parts.headers, query.as_deref()).and_then(|(token, _)| {
        let state = inner.lock();
        state
            .tokens
            .iter()
            .find(|t| t.token == token)
            .map(|t| t.username.clone())
    });
    let index = http_fake::record(
        &mut inner.lock().requests,
        method.as_str(),
        &path,
        query.as_deref(),
        body_text,
        user,
    );
    let fault = inner.lock().take_fault(method.as_str(), &path, false);
    let reply = match fault {
        Some(fault) if fault.hang => return Outcome::Hang,
        Some(fault) => fault_reply(fault),
        None => {
            let reply = dispatch(
                inner,
                &method,
                &path,
                query.as_deref(),
                &parts.headers,
                body_text,
            );
            match inner.lock().take_fault(method.as_str(), &path, true) {
                Some(fault) if fault.hang => return Outcome::Hang,
                Some(fault) => fault_reply(fault),
                None => reply,
            }
        }
    };
    inner.lock().requests[index].status = reply.status.as_u16();
    Outcome::Reply(reply)
}

/// The token a request presents, and whether it came in the URL.
fn presented_token(headers: &HeaderMap, query: Option<&str>) -> Option<(String, bool)> {
    if let Some(value) = headers.get("private-token").and_then(|v| v.to_str().ok()) {
        return Some((value.trim().to_string(), false));
    }
    if let Some(value) = headers.get("authorization").and_then(|v| v.to_str().ok()) {
        if let Some((scheme, token)) = value.split_once(' ') {
            if scheme.eq_ignore_ascii_case("bearer") {
                return Some((token.trim().to_string(), false));
            }
        }
    }
    query.and_then(|q| {
        url::form_urlencoded::parse(q.as_bytes())
            .find(|(k, _)| k == "private_token" || k == "access_token")
            .map(|(_, v)| (v.into_owned(), true))
    })
}

struct Caller {
    username: String,
    scope: Scope,
}

fn dispatch(
    inner: &Arc<Inner>,
    method: &Method,
    path: &str,
    query: Option<&str>,
    headers: &HeaderMap,
    body: &str,
) -> Reply {
    let violation = |reason: &str| {
        inner.lock().violations.push(Violation {
            method: method.to_string(),
            path: path.to_string(),
            reason: reason.to_string(),
            body: body.to_string(),
        });
    };
    let (route, project_ref) = match route(method, path) {
        Routed::Known(route, project) => (route, project),
        Routed::WrongMethod => {
            violation("GitLab has this path but not for this method");
            return bad_method();
        }
        Routed::Unknown => {
            violation("no such route in GitLab's REST v4 (or in this test server)");
            return Reply::json(StatusCode::NOT_FOUND, json!({"error": "404 Not Found"}));
        }
    };

    // Authentication happens before parameters are validated (Grape's `before`).
    let caller = match presented_token(headers, query) {
        Some((token, in_url)) => {
            if in_url {
                violation("the token is sent in the URL (private_token/access_token): it ends up in logs; send the PRIVATE-TOKEN or Authorization header");
            }
            let state = inner.lock();
            match state.tokens.iter().find(|t| t.token == token) {
                Some(t) => Some(Caller {
                    username: t.username.clone(),
                    scope: t.scope,
                }),
                None => return unauthorized(),
            }
        }
        None => None,
    };
    match (&caller, &route) {
        (None, Route::User) => return unauthorized(),
        (None, r) if r.is_write() => return unauthorized(),
        (Some(c), r) if r.is_write() && c.scope == Scope::ReadApi => return insufficient_scope(),
        _ => {}
    }

    let raw = match raw_params(query, headers, body) {
        Ok(raw) => raw,
        Err(reason) => {
            violation(&reason);
            return message(
                StatusCode::BAD_REQUEST,
                "400 Bad request - the body could not be parsed",
            );
        }
    };
    let specs = route.specs();
    let declared: BTreeSet<&str> = specs
        .iter()
        .flat_map(|s| s.iter())
        .map(|s| s.name)
        .chain(["private_token", "access_token"])
        .collect();
    for name in raw.keys() {
        if !declared.contains(name.as_str()) {
            violation(&format!(
                "parameter `{name}` is not declared for this endpoint: GitLab ignores it (if GitLab does declare it, teach the test server)"
            ));
        }
    }
    let params = match validate_params(&specs, &raw) {
        Ok(params) => params,
        Err(problems) => {
            violation(&problems);
            return bad_request_error(&problems);
        }
    };
    if let Route::UpdateMr(_) = route {
        if params.values.is_empty() {
            let names: Vec<&str> = UPDATE_MR
                .iter()
                .flat_map(|l| l.iter())
                .map(|s| s.name)
                .collect();
            let text = format!(
                "{} are missing, at least one parameter must be provided",
                names.join(", ")
            );
            violation(&text);
            return bad_request_error(&text);
        }
    }

    let Some(caller) = caller else {
        // Anonymous reads: every project here is private.
        return project_not_found();
    };
    let req = Req {
        inner,
        caller: &caller,
        params: &params,
        query,
        path,
    };
    if let Route::User = route {
        return get_user(&req);
    }
    let Some(project_ref) = project_ref else {
        return project_not_found();
    };
    let (project_id, level) = {
        let state = inner.lock();
        let project = match project_ref.parse::<u64>() {
            Ok(id) => state.projects.iter().find(|p| p.id == id),
            Err(_) => state.project_by_path(&project_ref),
        };
        match project.and_then(|p| p.members.get(&caller.username).map(|l| (p.id, *l))) {
            Some(found) => found,
            None => return project_not_found(),
        }
    };
    let at_least = |needed: AccessLevel| level >= needed;
    match route {
        Route::User => get_user(&req),
        Route::Project => get_project(&req, project_id, level),
        Route::ListMrs if at_least(AccessLevel::Reporter) => list_mrs(&req, project_id),
        Route::GetMr(iid) if at_least(AccessLevel::Reporter) => get_mr(&req, project_id, iid),
        Route::CreateMr if at_least(AccessLevel::Developer) => create_mr(&req, project_id),
        Route::UpdateMr(iid) if at_least(AccessLevel::Reporter) => {
            update_mr(&req, project_id, iid, level)
        }
        Route::ListNotes(iid) if at_least(AccessLevel::Reporter) => {
            list_notes(&req, project_id, iid)
        }
        Route::CreateNote(iid) if at_least(AccessLevel::Reporter) => {
            create_note(&req, project_id, iid)
        }
        Route::GetNote(iid, note) if at_least(AccessLevel::Reporter) => {
            get_note(&req, project_id, iid, note)
        }
        Route::UpdateNote(iid, note) if at_least(AccessLevel::Reporter) => {
            update_note(&req, project_id, iid, note)
        }
        Route::CreateStatus(sha) if at_least(AccessLevel::Developer) => {
            create_status(&req, project_id, &sha)
        }
        Route::ListStatuses(sha) if at_least(AccessLevel::Reporter) => {
            list_statuses(&req, project_id, &sha)
        }
        _ => forbidden(),
    }
}

fn bad_method() -> Reply {
    Reply::json(
        StatusCode::METHOD_NOT_ALLOWED,
        json!({"error": "405 Not Allowed"}),
    )
}

struct Req<'a> {
    inner: &'a Arc<Inner>,
    caller: &'a Caller,
    params: &'a Params,
    query: Option<&'a str>,
    path: &'a str,
}

// ---------------------------------------------------------------------------
// Users and projects
// ---------------------------------------------------------------------------

fn get_user(req: &Req) -> Reply {
    let state = req.inner.lock();
    let mut v: Value = serde_json::from_str(USER_FIXTURE).expect("user.json");
    let basic = user_json(req.inner, &state, &req.caller.username);
    for key in [
        "id",
        "username",
        "name",
        "state",
        "locked",
        "avatar_url",
        "web_url",
    ] {
        v[key] = basic[key].clone();
    }
    let email = format!("{}@example.com", req.caller.username);
    v["email"] = json!(email);
    v["public_email"] = json!(email);
    v["commit_email"] = json!(email);
    v["identities"] = json!([]);
    v["bot"] = json!(req.caller.username.ends_with("-bot") || req.caller.username.contains("_bot"));
    Reply::json(StatusCode::OK, v)
}

fn get_project(req: &Req, project_id: u64, level: AccessLevel) -> Reply {
    let state = req.inner.lock();
    let project = state.project(project_id);
    let mut v = project_json(req.inner, &state, project);
    v["permissions"]["project_access"]["access_level"] = json!(level.value());
    if let Some(upstream) = project.forked_from {
        let up = state.project(upstream);
        let full = project_json(req.inner, &state, up);
        let mut simple = json!({});
        for key in [
            "id",
            "description",
            "name",
            "name_with_namespace",
            "path",
            "path_with_namespace",
            "created_at",
            "default_branch",
            "tag_list",
            "topics",
            "ssh_url_to_repo",
            "http_url_to_repo",
            "web_url",
            "readme_url",
            "avatar_url",
            "forks_count",
            "star_count",
            "last_activity_at",
            "namespace",
        ] {
            simple[key] = full[key].clone();
        }
        v["forked_from_project"] = simple;
    }
    Reply::json(StatusCode::OK, v)
}

fn project_json(inner: &Inner, state: &ServerState, project: &Project) -> Value {
    let mut v: Value = serde_json::from_str(PROJECT_FIXTURE).expect("project.json");
    let (namespace, name) = project.path.rsplit_once('/').expect("namespace/name");
    let web = format!("{}/{}", inner.base, project.path);
    let api = format!("{}{API_PREFIX}/projects/{}", inner.base, project.id);
    let host = inner.base.trim_start_matches("http://");
    let default_branch = git_out(
        &state.repo_dir(project),
        &["symbolic-ref", "--short", "HEAD"],
    )
    .unwrap_or_else(|| "main".to_string());
    v["id"] = json!(project.id);
    v["description"] = Value::Null;
    v["description_html"] = json!("");
    v["name"] = json!(name);
    v["name_with_namespace"] = json!(project.path.replace('/', " / "));
    v["path"] = json!(name);
    v["path_with_namespace"] = json!(project.path);
    v["created_at"] = json!(project.created_at);
    v["updated_at"] = json!(project.created_at);
    v["last_activity_at"] = json!(project.created_at);
    v["default_branch"] = json!(default_branch);
    v["tag_list"] = json!([]);
    v["topics"] = json!([]);
    v["ssh_url_to_repo"] = json!(format!("git@{host}:{}.git", project.path));
    v["http_url_to_repo"] = json!(format!("{web}.git"));
    v["web_url"] = json!(web);
    v["readme_url"] = Value::Null;
    v["avatar_url"] = Value::Null;
    v["forks_count"] = json!(state
        .projects
        .iter()
        .filter(|p| p.forked_from == Some(project.id))
        .count());
    let parent = namespace.rsplit_once('/').map(|(parent, _)| parent);
    v["namespace"] = json!({
        "id": project.id + 500_000,
        "name": namespace.rsplit('/').next().unwrap_or(namespace),
        "path": namespace.rsplit('/').next().unwrap_or(namespace),
        "kind": "group",
        "full_path": namespace,
        "parent_id": parent.map(|_| project.id + 600_000),
        "avatar_url": null,
        "web_url": format!("{}/groups/{namespace}", inner.base),
    });
    v["container_registry_image_prefix"] = json!(format!("{host}/{}", project.path));
    for (key, suffix) in [
        ("self", ""),
        ("issues", "/issues"),
        ("merge_requests", "/merge_requests"),
        ("repo_branches", "/repository/branches"),
        ("labels", "/labels"),
        ("events", "/events"),
        ("members", "/members"),
        ("cluster_agents", "/cluster_agents"),
    ] {
        v["_links"][key] = json!(format!("{api}{suffix}"));
    }
    v["visibility"] = json!("private");
    v["merge_method"] = json!(match project.merge_method {
        MergeMethod::Merge => "merge",
        MergeMethod::FastForward => "ff",
    });
    v["creator_id"] = json!(project
        .members
        .iter()
        .max_by_key(|(_, l)| **l)
        .map_or(0, |(u, _)| state.user_id(u)));
    v
}

fn user_json(inner: &Inner, state: &ServerState, username: &str) -> Value {
    let id = state.user_id(username);
    json!({
        "id": id,
        "username": username,
        "name": username,
        "state": "active",
        "locked": false,
        "avatar_url": format!("https://www.gravatar.com/avatar/{id:032x}?s=80&d=identicon"),
        "web_url": format!("{}/{username}", inner.base),
    })
}

// ---------------------------------------------------------------------------
// Merge requests
// ---------------------------------------------------------------------------

fn list_mrs(req: &Req, project_id: u64) -> Reply {
    refresh_mrs(req.inner);
    let p = req.params;
    let state_filter = p.str("state").unwrap_or("all");
    let descending = p.str("sort").unwrap_or("desc") == "desc";
    let order_by = p.str("order_by").unwrap_or("created_at");
    let state = req.inner.lock();
    let mut mrs: Vec<&MergeRequest> = state
        .mrs
        .iter()
        .filter(|m| m.project_id == project_id)
        .filter(|m| state_filter == "all" || m.state.as_str() == state_filter)
        .filter(|m| p.str("source_branch").is_none_or(|b| m.source_branch == b))
        .filter(|m| p.str("target_branch").is_none_or(|b| m.target_branch == b))
        .filter(|m| p.str("author_username").is_none_or(|a| m.author == a))
        .filter(|m| {
            p.int_list("iids")
                .is_none_or(|iids| iids.iter().any(|i| *i as u64 == m.iid))
        })
        .filter(|m| match p.list("labels") {
            None => true,
            Some([only]) if only.eq_ignore_ascii_case("none") => m.labels.is_empty(),
            Some([only]) if only.eq_ignore_ascii_case("any") => !m.labels.is_empty(),
            Some(wanted) => wanted
                .iter()
                .all(|w| m.labels.iter().any(|l| l.eq_ignore_ascii_case(w))),
        })
        .collect();
    mrs.sort_by(|a, b| {
        let key = |m: &MergeRequest| match order_by {
            "updated_at" => m.updated_at.clone(),
            "title" => m.title.clone(),
            "merged_at" => m.merged_at.clone().unwrap_or_default(),
            _ => m.created_at.clone(),
        };
        key(a).cmp(&key(b)).then(a.id.cmp(&b.id))
    });
    if descending {
        mrs.reverse();
    }
    let simple = p.str("view") == Some("simple");
    let items: Vec<Value> = mrs
        .iter()
        .map(|m| {
            let full = mr_json(req.inner, &state, m, None);
            if simple {
                let mut v = json!({});
                for key in [
                    "id",
                    "iid",
                    "project_id",
                    "title",
                    "description",
                    "state",
                    "created_at",
                    "updated_at",
                    "web_url",
                ] {
                    v[key] = full[key].clone();
                }
                v
            } else {
                full
            }
        })
        .collect();
    drop(state);
    paginate(req, items)
}

/// The bare repository of the project a request is about.
fn project_dir(req: &Req, project_id: u64) -> PathBuf {
    let state = req.inner.lock();
    state.repo_dir(state.project(project_id))
}

fn get_mr(req: &Req, project_id: u64, iid: u64) -> Reply {
    refresh_mrs(req.inner);
    let state = req.inner.lock();
    let Some(mr) = state.find_mr(project_id, iid) else {
        return record_not_found();
    };
    let mut v = mr_json(req.inner, &state, mr, Some(&req.caller.username));
    if req.params.bool("include_rebase_in_progress") == Some(true) {
        v["rebase_in_progress"] = json!(false);
    }
    if req.params.bool("include_diverged_commits_count") == Some(true) {
        let dir = state.repo_dir(state.project(project_id));
        let range = format!("{}..{}", mr.sha, mr.start_sha);
        let count = git_out(&dir, &["rev-list", "--count", &range]).unwrap_or_default();
        v["diverged_commits_count"] = json!(count.parse::<u64>().unwrap_or(0));
    }
    Reply::json(StatusCode::OK, v)
}

/// Title and description as GitLab's model validates them.
fn check_text_fields(p: &Params) -> Option<Reply> {
    if let Some(title) = p.str("title") {
        if title.trim().is_empty() {
            return Some(validation_error("title", "can't be blank"));
        }
        if title.chars().count() > MAX_TITLE_CHARS {
            return Some(validation_error(
                "title",
                &format!("is too long (maximum is {MAX_TITLE_CHARS} characters)"),
            ));
        }
    }
    if let Some(description) = p.str("description") {
        if description.chars().count() > MAX_DESCRIPTION_CHARS {
            return Some(validation_error(
                "description",
                &format!("is too long (maximum is {MAX_DESCRIPTION_CHARS} characters)"),
            ));
        }
    }
    None
}

fn create_mr(req: &Req, project_id: u64) -> Reply {
    let p = req.params;
    if let Some(target) = p.int("target_project_id") {
        if target as u64 != project_id {
            req.inner.lock().violations.push(Violation {
                method: "POST".to_string(),
                path: req.path.to_string(),
                reason: "target_project_id of another project (a merge request from a fork \
                         through the API) is not supported by the test server"
                    .to_string(),
                body: String::new(),
            });
            return forbidden();
        }
    }
    if let Some(reply) = check_text_fields(p) {
        return reply;
    }
    let source = p.str("source_branch").unwrap_or_default().to_string();
    let target = p.str("target_branch").unwrap_or_default().to_string();
    let title = p.str("title").unwrap_or_default().to_string();
    let dir = project_dir(req, project_id);
    if source == target {
        return Reply::json(
            StatusCode::UNPROCESSABLE_ENTITY,
            json!({"message": ["You can't use same project/branch for source and target"]}),
        );
    }
    let head = git_out(
        &dir,
        &["rev-parse", "--verify", "--quiet", &branch_ref(&source)],
    );
    let start = git_out(
        &dir,
        &["rev-parse", "--verify", "--quiet", &branch_ref(&target)],
    );
    let mut missing = Vec::new();
    if head.is_none() {
        missing.push(format!("Source branch \"{source}\" does not exist"));
    }
    if start.is_none() {
        missing.push(format!("Target branch \"{target}\" does not exist"));
    }
    let (Some(head), Some(start)) = (head, start) else {
        return Reply::json(
            StatusCode::UNPROCESSABLE_ENTITY,
            json!({ "message": missing }),
        );
    };
    let base = git_out(&dir, &["merge-base", &start, &head]).unwrap_or_else(|| start.clone());
    let now = req.inner.now();
    let mut state = req.inner.lock();
    if let Some(other) = state.mrs.iter().find(|m| {
        m.project_id == project_id
            && m.source_project_id == project_id
            && m.state == MrState::Opened
            && m.source_branch == source
            && m.target_branch == target
    }) {
        return duplicate_mr(other.iid);
    }
    let iid = state.next_iid(project_id);
    state.last_mr_id += 1;
    let mut labels = Vec::new();
    for label in p.list("labels").unwrap_or_default() {
        if !labels.contains(label) {
            labels.push(label.clone());
        }
    }
    let mr = MergeRequest {
        id: FIRST_MR_ID + state.last_mr_id,
        iid,
        project_id,
        source_project_id: project_id,
        title,
        description: p.str("description").map(str::to_string),
        source_branch: source,
        target_branch: target,
        labels,
        squash: p.bool("squash").unwrap_or(false),
        force_remove_source_branch: p.bool("remove_source_branch").unwrap_or(false),
        ..MergeRequest::opened(&req.caller.username, head.clone(), base, start, now)
    };
    let v = mr_json(req.inner, &state, &mr, Some(&req.caller.username));
    state.mrs.push(mr);
    drop(state);
    git_out(&dir, &["update-ref", &mr_head_ref(iid), &head]);
    Reply::json(StatusCode::CREATED, v)
}

fn duplicate_mr(iid: u64) -> Reply {
    Reply::json(
        StatusCode::CONFLICT,
        json!({"message": [format!("Another open merge request already exists for this source branch: !{iid}")]}),
    )
}

fn update_mr(req: &Req, project_id: u64, iid: u64, level: AccessLevel) -> Reply {
    refresh_mrs(req.inner);
    let p = req.params;
    let dir = project_dir(req, project_id);
    {
        let state = req.inner.lock();
        let Some(mr) = state.find_mr(project_id, iid) else {
            return record_not_found();
        };
        if mr.author != req.caller.username && level < AccessLevel::Developer {
            return forbidden();
        }
    }
    if let Some(reply) = check_text_fields(p) {
        return reply;
    }
    let new_start = match p.str("target_branch") {
        Some(target) => match git_out(
            &dir,
            &["rev-parse", "--verify", "--quiet", &branch_ref(target)],
        ) {
            Some(sha) => Some(sha),
            None => {
                return Reply::json(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    json!({"message": [format!("Target branch \"{target}\" does not exist")]}),
                )
            }
        },
        None => None,
    };
    let now = req.inner.now();
    let who = req.caller.username.clone();
    let mut state = req.inner.lock();
    let current = state.mr(project_id, iid).clone();
    let target = p
        .str("target_branch")
        .unwrap_or(&current.target_branch)
        .to_string();
    let reopening = p.str("state_event") == Some("reopen") && current.state == MrState::Closed;
    let stays_open = current.state == MrState::Opened && p.str("state_event") != Some("close");
    if reopening || (stays_open && target != current.target_branch) {
        if let Some(other) = state.mrs.iter().find(|m| {
            m.id != current.id
                && m.project_id == project_id
                && m.source_project_id == current.source_project_id
                && m.state == MrState::Opened
                && m.source_branch == current.source_branch
                && m.target_branch == target
        }) {
            return duplicate_mr(other.iid);
        }
    }
    let mut system_notes = Vec::new();
    let mut mr = current.clone();
    if let Some(title) = p.str("title") {
        if title != mr.title {
            system_notes.push(format!(
                "changed title from **{}** to **{title}**",
                mr.title
            ));
            mr.title = title.to_string();
        }
    }
    if let Some(description) = p.str("description") {
        if Some(description) != mr.description.as_deref() {
            system_notes.push("changed the description".to_string());
            mr.description = Some(description.to_string());
        }
    }
    let before: BTreeSet<String> = mr.labels.iter().cloned().collect();
    if let Some(labels) = p.list("labels") {
        mr.labels.clear();
        for label in labels {
            if !mr.labels.contains(label) {
                mr.labels.push(label.clone());
            }
        }
    }
    for label in p.list("add_labels").unwrap_or_default() {
        if !mr.labels.contains(label) {
            mr.labels.push(label.clone());
        }
    }
    if let Some(remove) = p.list("remove_labels") {
        mr.labels.retain(|l| !remove.contains(l));
    }
    let after: BTreeSet<String> = mr.labels.iter().cloned().collect();
    let added: Vec<String> = after
        .difference(&before)
        .map(|l| format!("~\"{l}\""))
        .collect();
    let removed: Vec<String> = before
        .difference(&after)
        .map(|l| format!("~\"{l}\""))
        .collect();
    match (added.is_empty(), removed.is_empty()) {
        (false, true) => system_notes.push(format!(
            "added {} {}",
            added.join(" "),
            plural("label", added.len())
        )),
        (true, false) => system_notes.push(format!(
            "removed {} {}",
            removed.join(" "),
            plural("label", removed.len())
        )),
        (false, false) => system_notes.push(format!(
            "added {} and removed {} labels",
            added.join(" "),
            removed.join(" ")
        )),
        (true, true) => {}
    }
    if let (Some(target), Some(start)) = (p.str("target_branch"), new_start) {
        if target != mr.target_branch {
            system_notes.push(format!(
                "changed target branch from `{}` to `{target}`",
                mr.target_branch
            ));
            mr.target_branch = target.to_string();
            mr.start_sha = start;
        }
    }
    if let Some(squash) = p.bool("squash") {
        mr.squash = squash;
    }
    if let Some(remove) = p.bool("remove_source_branch") {
        mr.force_remove_source_branch = remove;
    }
    match (p.str("state_event"), mr.state) {
        (Some("close"), MrState::Opened) => {
            mr.state = MrState::Closed;
            mr.closed_at = Some(now.clone());
            mr.closed_by = Some(who.clone());
            system_notes.push("closed".to_string());
        }
        (Some("reopen"), MrState::Closed) => {
            mr.state = MrState::Opened;
            mr.closed_at = None;
            mr.closed_by = None;
            system_notes.push("reopened".to_string());
        }
        _ => {}
    }
    mr.updated_at = now.clone();
    *state.mr_mut(project_id, iid) = mr.clone();
    for note in system_notes {
        state.add_note(project_id, iid, &who, &note, true, &now);
    }
    let v = mr_json(req.inner, &state, &mr, Some(&who));
    Reply::json(StatusCode::OK, v)
}

fn plural(word: &str, n: usize) -> String {
    if n == 1 {
        word.to_string()
    } else {
        format!("{word}s")
    }
}

fn is_draft(title: &str) -> bool {
    let lower = title.to_ascii_lowercase();
    ["draft:", "[draft]", "(draft)", "draft -"]
        .iter()
        .any(|p| lower.starts_with(p))
}

/// A merge request in GitLab's shape: the documented example with every
/// stateful field overwritten. `viewer` adds the single-MR fields GitLab
/// sends from `GET …/merge_requests/:iid`, create and update.
fn mr_json(inner: &Inner, state: &ServerState, mr: &MergeRequest, viewer: Option<&str>) -> Value {
    let mut v: Value = serde_json::from_str(MERGE_REQUEST_FIXTURE).expect("merge_request.json");
    let project = state.project(mr.project_id);
    let web = format!(
        "{}/{}/-/merge_requests/{}",
        inner.base, project.path, mr.iid
    );
    let user = |name: &Option<String>| match name {
        Some(name) => user_json(inner, state, name),
        None => Value::Null,
    };
    let draft = is_draft(&mr.title);
    let mut labels = mr.labels.clone();
    labels.sort_by_key(|l| l.to_ascii_lowercase());
    let user_notes = state
        .notes
        .iter()
        .filter(|n| n.project_id == mr.project_id && n.mr_iid == mr.iid && !n.system)
        .count();
    v["id"] = json!(mr.id);
    v["iid"] = json!(mr.iid);
    v["project_id"] = json!(mr.project_id);
    v["title"] = json!(mr.title);
    v["description"] = json!(mr.description);
    v["state"] = json!(mr.state.as_str());
    v["merged_by"] = user(&mr.merged_by);
    v["merge_user"] = user(&mr.merged_by);
    v["merged_at"] = json!(mr.merged_at);
    v["merge_after"] = Value::Null;
    v["prepared_at"] = json!(mr.created_at);
    v["closed_by"] = user(&mr.closed_by);
    v["closed_at"] = json!(mr.closed_at);
    v["created_at"] = json!(mr.created_at);
    v["updated_at"] = json!(mr.updated_at);
    v["target_branch"] = json!(mr.target_branch);
    v["source_branch"] = json!(mr.source_branch);
    v["author"] = user_json(inner, state, &mr.author);
    v["assignee"] = Value::Null;
    v["assignees"] = json!([]);
    v["reviewers"] = json!([]);
    v["source_project_id"] = json!(mr.source_project_id);
    v["target_project_id"] = json!(mr.project_id);
    v["labels"] = json!(labels);
    v["draft"] = json!(draft);
    v["work_in_progress"] = json!(draft);
    v["milestone"] = Value::Null;
    v["merge_when_pipeline_succeeds"] = json!(false);
    v["merge_status"] = json!("can_be_merged");
    v["detailed_merge_status"] = json!(match (mr.state, draft) {
        (MrState::Opened, true) => "draft_status",
        (MrState::Opened, false) => "mergeable",
        _ => "not_open",
    });
    v["sha"] = json!(mr.sha);
    v["merge_commit_sha"] = json!(mr.merge_commit_sha);
    v["squash_commit_sha"] = json!(mr.squash_commit_sha);
    v["user_notes_count"] = json!(user_notes);
    v["discussion_locked"] = Value::Null;
    v["should_remove_source_branch"] = if mr.state == MrState::Merged {
        json!(mr.force_remove_source_branch)
    } else {
        Value::Null
    };
    v["force_remove_source_branch"] = json!(mr.force_remove_source_branch);
    v["web_url"] = json!(web);
    v["reference"] = json!(format!("!{}", mr.iid));
    v["references"] = json!({
        "short": format!("!{}", mr.iid),
        "relative": format!("!{}", mr.iid),
        "full": format!("{}!{}", project.path, mr.iid),
    });
    v["squash"] = json!(mr.squash);
    v["squash_on_merge"] = json!(mr.squash);
    v["approvals_before_merge"] = Value::Null;
    if let Some(viewer) = viewer {
        let can_merge = project
            .members
            .get(viewer)
            .is_some_and(|l| *l >= AccessLevel::Developer);
        v["subscribed"] = json!(viewer == mr.author);
        v["changes_count"] = json!("1");
        v["latest_build_started_at"] = Value::Null;
        v["latest_build_finished_at"] = Value::Null;
        v["first_deployed_to_production_at"] = Value::Null;
        v["pipeline"] = Value::Null;
        v["head_pipeline"] = Value::Null;
        v["diff_refs"] = json!({
            "base_sha": mr.base_sha,
            "head_sha": mr.sha,
            "start_sha": mr.start_sha,
        });
        v["merge_error"] = Value::Null;
        v["first_contribution"] = json!(false);
        v["user"] = json!({ "can_merge": can_merge });
    }
    v
}

// ---------------------------------------------------------------------------
// Notes
// ---------------------------------------------------------------------------

fn mr_exists(req: &Req, project_id: u64, iid: u64) -> Option<u64> {
    req.inner.lock().find_mr(project_id, iid).map(|m| m.id)
}

fn list_notes(req: &Req, project_id: u64, iid: u64) -> Reply {
    let Some(mr_id) = mr_exists(req, project_id, iid) else {
        return record_not_found();
    };
    let by_updated = req.params.str("order_by") == Some("updated_at");
    let descending = req.params.str("sort").unwrap_or("desc") == "desc";
    let state = req.inner.lock();
    let mut notes: Vec<&Note> = state
        .notes
        .iter()
        .filter(|n| n.project_id == project_id && n.mr_iid == iid)
        .collect();
    notes.sort_by(|a, b| {
        let (ka, kb) = if by_updated {
            (&a.updated_at, &b.updated_at)
        } else {
            (&a.created_at, &b.created_at)
        };
        ka.cmp(kb).then(a.id.cmp(&b.id))
    });
    if descending {
        notes.reverse();
    }
    let items: Vec<Value> = notes
        .iter()
        .map(|n| note_json(req.inner, &state, n, mr_id))
        .collect();
    drop(state);
    paginate(req, items)
}

fn check_note_body(body: &str) -> Option<Reply> {
    if body.trim().is_empty() {
        return Some(validation_error("note", "can't be blank"));
    }
    if body.chars().count() > MAX_NOTE_CHARS {
        return Some(validation_error(
            "note",
            &format!("is too long (maximum is {MAX_NOTE_CHARS} characters)"),
        ));
    }
    None
}

fn create_note(req: &Req, project_id: u64, iid: u64) -> Reply {
    let Some(mr_id) = mr_exists(req, project_id, iid) else {
        return record_not_found();
    };
    let body = req.params.str("body").unwrap_or_default();
    if let Some(reply) = check_note_body(body) {
        return reply;
    }
    let now = req.inner.now();
    let mut state = req.inner.lock();
    let id = state.add_note(project_id, iid, &req.caller.username, body, false, &now);
    let note = state
        .notes
        .iter()
        .find(|n| n.id == id)
        .expect("note")
        .clone();
    Reply::json(
        StatusCode::CREATED,
        note_json(req.inner, &state, &note, mr_id),
    )
}

fn get_note(req: &Req, project_id: u64, iid: u64, note_id: u64) -> Reply {
    let Some(mr_id) = mr_exists(req, project_id, iid) else {
        return record_not_found();
    };
    let state = req.inner.lock();
    match state
        .notes
        .iter()
        .find(|n| n.id == note_id && n.project_id == project_id && n.mr_iid == iid)
    {
        Some(note) => Reply::json(StatusCode::OK, note_json(req.inner, &state, note, mr_id)),
        None => record_not_found(),
    }
}

fn update_note(req: &Req, project_id: u64, iid: u64, note_id: u64) -> Reply {
    let Some(mr_id) = mr_exists(req, project_id, iid) else {
        return record_not_found();
    };
    let body = req.params.str("body").unwrap_or_default().to_string();
    let now = req.inner.now();
    let mut state = req.inner.lock();
    let Some(note) = state
        .notes
        .iter_mut()
        .find(|n| n.id == note_id && n.project_id == project_id && n.mr_iid == iid)
    else {
        return record_not_found();
    };
    if note.author != req.caller.username || note.system {
        return forbidden();
    }
    if let Some(reply) = check_note_body(&body) {
        return reply;
    }
    note.body = body;
    note.updated_at = now;
    let note = note.clone();
    Reply::json(StatusCode::OK, note_json(req.inner, &state, &note, mr_id))
}

fn note_json(inner: &Inner, state: &ServerState, note: &Note, mr_id: u64) -> Value {
    let mut v: Value = serde_json::from_str(NOTE_FIXTURE).expect("note.json");
    v["id"] = json!(note.id);
    v["type"] = Value::Null;
    v["body"] = json!(note.body);
    v["attachment"] = Value::Null;
    v["author"] = user_json(inner, state, &note.author);
    v["created_at"] = json!(note.created_at);
    v["updated_at"] = json!(note.updated_at);
    v["system"] = json!(note.system);
    v["noteable_id"] = json!(mr_id);
    v["noteable_type"] = json!("MergeRequest");
    v["project_id"] = json!(note.project_id);
    v["noteable_iid"] = json!(note.mr_iid);
    v["commands_changes"] = json!({});
    v
}

// ---------------------------------------------------------------------------
// Commit statuses
// ---------------------------------------------------------------------------

struct StatusPost {
    state: String,
    name: String,
    ref_name: String,
    description: Option<String>,
    target_url: Option<String>,
    coverage: Option<f64>,
    pipeline_id: Option<u64>,
}

/// GitLab's state-machine event for each posted state.
fn status_event(state: &str) -> &'static str {
    match state {
        "pending" => "enqueue",
        "running" => "run",
        "success" => "success",
        "failed" => "drop",
        "canceled" => "cancel",
        _ => "skip",
    }
}

fn create_status(req: &Req, project_id: u64, sha_param: &str) -> Reply {
    let p = req.params;
    let dir = project_dir(req, project_id);
    let Some(sha) = resolve_commit(&dir, sha_param) else {
        return message(StatusCode::NOT_FOUND, "404 Commit Not Found");
    };
    for field in ["description", "target_url", "ref", "name"] {
        let value = p.str(field).or(if field == "name" {
            p.str("context")
        } else {
            None
        });
        if value.is_some_and(|v| v.chars().count() > MAX_STATUS_FIELD_CHARS) {
            return validation_error(
                field,
                &format!("is too long (maximum is {MAX_STATUS_FIELD_CHARS} characters)"),
            );
        }
    }
    let pipeline_ref = p.int("pipeline_id").and_then(|id| {
        let state = req.inner.lock();
        state
            .pipelines
            .iter()
            .find(|pl| pl.id == id as u64 && pl.project_id == project_id && pl.sha == sha)
            .map(|pl| pl.ref_name.clone())
    });
    if p.int("pipeline_id").is_some() && pipeline_ref.is_none() {
        return message(StatusCode::NOT_FOUND, "404 Pipeline Not Found");
    }
    let ref_name = match p.str("ref").map(str::to_string).or(pipeline_ref) {
        Some(r) => r,
        None => {
            let contains = git_out(
                &dir,
                &[
                    "for-each-ref",
                    "--contains",
                    &sha,
                    "--format=%(refname:strip=2)",
                    "refs/heads/",
                ],
            )
            .unwrap_or_default();
            match contains.lines().next() {
                Some(branch) => branch.to_string(),
                None => {
                    return message(StatusCode::NOT_FOUND, "404 References for commit Not Found")
                }
            }
        }
    };
    let post = StatusPost {
        state: p.str("state").unwrap_or_default().to_string(),
        name: p
            .str("name")
            .or(p.str("context"))
            .unwrap_or("default")
            .to_string(),
        ref_name,
        description: p.str("description").map(str::to_string),
        target_url: p.str("target_url").map(str::to_string),
        coverage: p.float("coverage"),
        pipeline_id: p.int("pipeline_id").map(|id| id as u64),
    };
    match post_status(req.inner, project_id, &sha, &req.caller.username, post) {
        Ok(status) => {
            let state = req.inner.lock();
            Reply::json(StatusCode::CREATED, status_json(req.inner, &state, &status))
        }
        Err(reply) => reply,
    }
}

/// GitLab's `Ci::CreateCommitStatusService`: the status of that name and ref
/// still `pending` or `running` in the pipeline is moved on (a transition
/// its state machine may refuse); otherwise a new status is created and
/// older ones of that name are marked retried.
fn post_status(
    inner: &Inner,
    project_id: u64,
    sha: &str,
    author: &str,
    post: StatusPost,
) -> Result<CommitStatus, Reply> {
    let now = inner.now();
    let mut state = inner.lock();
    let pipeline_id =
        match post.pipeline_id {
            Some(id) => id,
            None => match state.pipelines.iter().rev().find(|pl| {
                pl.project_id == project_id && pl.sha == sha && pl.ref_name == post.ref_name
            }) {
                Some(pl) => pl.id,
                None => {
                    let id = FIRST_PIPELINE_ID + state.pipelines.len() as u64;
                    state.pipelines.push(Pipeline {
                        id,
                        project_id,
                        sha: sha.to_string(),
                        ref_name: post.ref_name.clone(),
                    });
                    id
                }
            },
        };
    let event = status_event(&post.state);
    let live = state.statuses.iter().position(|s| {
        s.project_id == project_id
            && s.pipeline_id == pipeline_id
            && s.name == post.name
            && s.ref_name == post.ref_name
            && !s.retried
            && (s.status == "pending" || s.status == "running")
    });
    let finished = matches!(
        post.state.as_str(),
        "success" | "failed" | "canceled" | "skipped"
    );
    if let Some(index) = live {
        let from = state.statuses[index].status.clone();
        let allowed = match post.state.as_str() {
            "pending" | "skipped" => false,
            "running" => from == "pending",
            _ => true,
        };
        if !allowed {
            return Err(message(
                StatusCode::BAD_REQUEST,
                &format!(
                    "Cannot transition status via :{event} from :{from} (Reason(s): Status cannot transition via \"{event}\")"
                ),
            ));
        }
        let status = &mut state.statuses[index];
        status.status = post.state.clone();
        if post.state == "running" {
            status.started_at = Some(now.clone());
        }
        if finished {
            status.finished_at = Some(now.clone());
        }
        if post.description.is_some() {
            status.description = post.description;
        }
        if post.target_url.is_some() {
            status.target_url = post.target_url;
        }
        if post.coverage.is_some() {
            status.coverage = post.coverage;
        }
        return Ok(status.clone());
    }
    for older in state.statuses.iter_mut().filter(|s| {
        s.project_id == project_id && s.pipeline_id == pipeline_id && s.name == post.name
    }) {
        older.retried = true;
    }
    state.last_status_id += 1;
    let status = CommitStatus {
        id: FIRST_STATUS_ID + state.last_status_id,
        project_id,
        sha: sha.to_string(),
        ref_name: post.ref_name,
        name: post.name,
        status: post.state.clone(),
        description: post.description,
        target_url: post.target_url,
        coverage: post.coverage,
        author: author.to_string(),
        pipeline_id,
        created_at: now.clone(),
        started_at: (post.state == "running").then(|| now.clone()),
        finished_at: finished.then(|| now.clone()),
        retried: false,
    };
    state.statuses.push(status.clone());
    Ok(status)
}

fn list_statuses(req: &Req, project_id: u64, sha_param: &str) -> Reply {
    let p = req.params;
    let Some(sha) = resolve_commit(&project_dir(req, project_id), sha_param) else {
        return message(StatusCode::NOT_FOUND, "404 Commit Not Found");
    };
    let all = p.bool("all").unwrap_or(false);
    let by_pipeline = p.str("order_by") == Some("pipeline_id");
    let descending = p.str("sort") == Some("desc");
    let state = req.inner.lock();
    let mut statuses: Vec<&CommitStatus> = state
        .statuses
        .iter()
        .filter(|s| s.project_id == project_id && s.sha == sha)
        .filter(|s| all || !s.retried)
        .filter(|s| p.str("ref").is_none_or(|r| s.ref_name == r))
        .filter(|s| p.str("name").is_none_or(|n| s.name == n))
        .filter(|_| p.str("stage").is_none_or(|st| st == "external"))
        .filter(|s| {
            p.int("pipeline_id")
                .is_none_or(|id| s.pipeline_id == id as u64)
        })
        .collect();
    statuses.sort_by_key(|s| {
        if by_pipeline {
            (s.pipeline_id, s.id)
        } else {
            (s.id, 0)
        }
    });
    if descending {
        statuses.reverse();
    }
    let items: Vec<Value> = statuses
        .iter()
        .map(|s| status_json(req.inner, &state, s))
        .collect();
    drop(state);
    paginate(req, items)
}

fn status_json(inner: &Inner, state: &ServerState, s: &CommitStatus) -> Value {
    let mut v: Value = serde_json::from_str(COMMIT_STATUS_FIXTURE).expect("commit_status.json");
    v["id"] = json!(s.id);
    v["sha"] = json!(s.sha);
    v["ref"] = json!(s.ref_name);
    v["status"] = json!(s.status);
    v["name"] = json!(s.name);
    v["target_url"] = json!(s.target_url);
    v["description"] = json!(s.description);
    v["coverage"] = json!(s.coverage);
    v["created_at"] = json!(s.created_at);
    v["started_at"] = json!(s.started_at);
    v["finished_at"] = json!(s.finished_at);
    v["allow_failure"] = json!(false);
    v["pipeline_id"] = json!(s.pipeline_id);
    v["author"] = user_json(inner, state, &s.author);
    v
}

// ---------------------------------------------------------------------------
// Pagination and responses
// ---------------------------------------------------------------------------

/// GitLab's offset pagination: a page of `items` and the `x-*` and `Link` headers.
fn paginate(req: &Req, items: Vec<Value>) -> Reply {
    let per_page = req
        .params
        .int("per_page")
        .filter(|n| *n > 0)
        .map_or(DEFAULT_PER_PAGE, |n| (n as usize).min(MAX_PER_PAGE));
    let page = req.params.int("page").filter(|n| *n > 0).unwrap_or(1) as usize;
    let total = items.len();
    let total_pages = total.div_ceil(per_page).max(1);
    let start = (page - 1).saturating_mul(per_page).min(total);
    let end = (start + per_page).min(total);
    let link_to = |n: usize| {
        let mut pairs: Vec<String> = req
            .query
            .map(|q| {
                url::form_urlencoded::parse(q.as_bytes())
                    .filter(|(k, _)| {
                        k != "page"
                            && k != "per_page"
                            && k != "private_token"
                            && k != "access_token"
                    })
                    .map(|(k, v)| format!("{}={}", percent_encode(&k), percent_encode(&v)))
                    .collect()
            })
            .unwrap_or_default();
        pairs.push(format!("page={n}"));
        pairs.push(format!("per_page={per_page}"));
        format!("<{}{}?{}>", req.inner.base, req.path, pairs.join("&"))
    };
    let mut links = Vec::new();
    if page > 1 {
        links.push(format!("{}; rel=\"prev\"", link_to(page - 1)));
    }
    if page < total_pages {
        links.push(format!("{}; rel=\"next\"", link_to(page + 1)));
    }
    links.push(format!("{}; rel=\"first\"", link_to(1)));
    links.push(format!("{}; rel=\"last\"", link_to(total_pages)));
    let next = if page < total_pages {
        (page + 1).to_string()
    } else {
        String::new()
    };
    let prev = if page > 1 {
        (page - 1).to_string()
    } else {
        String::new()
    };
    Reply::json(StatusCode::OK, Value::Array(items[start..end].to_vec()))
        .with_header("x-page", &page.to_string())
        .with_header("x-per-page", &per_page.to_string())
        .with_header("x-next-page", &next)
        .with_header("x-prev-page", &prev)
        .with_header("x-total", &total.to_string())
        .with_header("x-total-pages", &total_pages.to_string())
        .with_header("link", &links.join(", "))
}

fn fault_reply(fault: Fault) -> Reply {
    Reply {
        status: fault_status(fault.status),
        content_type: fault.content_type,
        body: fault.body,
        headers: fault.headers,
    }
}

fn into_response(inner: &Inner, reply: Reply) -> Response {
    let now = inner
        .now_time()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let minute = now / 60;
    let observed = {
        let mut state = inner.lock();
        if state.minute.0 != minute {
            state.minute = (minute, 0);
        }
        state.minute.1 += 1;
        state.minute.1
    };
    let reset = (minute + 1) * 60;
    let mut response = Response::new(Body::from(reply.body));
    *response.status_mut() = reply.status;
    let headers = response.headers_mut();
    let reset_time = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(reset));
    let limit = RATE_LIMIT_PER_MINUTE.to_string();
    let observed_text = observed.to_string();
    let remaining = RATE_LIMIT_PER_MINUTE.saturating_sub(observed).to_string();
    let reset_text = reset.to_string();
    let common = [
        ("content-type", reply.content_type.as_str()),
        ("cache-control", "max-age=0, private, must-revalidate"),
        (
            "x-gitlab-meta",
            "{\"correlation_id\":\"tagpin-test\",\"version\":\"1\"}",
        ),
        ("ratelimit-name", "throttle_authenticated_api"),
        ("ratelimit-limit", &limit),
        ("ratelimit-observed", &observed_text),
        ("ratelimit-remaining", &remaining),
        ("ratelimit-reset", &reset_text),
        ("ratelimit-resettime", &reset_time),
    ];
    set_headers(headers, common);
    set_headers(
        headers,
        reply.headers.iter().map(|(n, v)| (n.as_str(), v.as_str())),
    );
    response
}

// ---------------------------------------------------------------------------
// Small helpers
// ---------------------------------------------------------------------------

/// `2016-01-19T09:05:50.355Z`, as GitLab writes times.
fn timestamp(time: SystemTime) -> String {
    let millis = time
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_millis());
    let seconds = super::rfc3339(time);
    format!("{}.{millis:03}Z", seconds.trim_end_matches('Z'))
}
