//! A local Bitbucket Cloud REST API (`/2.0`) server for integration tests.
//!
//! tagpin opens and updates pull requests, keeps one verdict comment and posts build statuses
//! on Bitbucket Cloud as it does on GitHub. No Bitbucket is reachable from the test machines,
//! so this module serves the operations tagpin calls, with in-memory state, on a loopback
//! port, under `/2.0`.
//!
//! Its facts are Bitbucket Cloud's OpenAPI description (`api.bitbucket.org/swagger.json`) as
//! the npm package `bitbucket` 2.12.0 ships it, typed, in `lib/bitbucket.d.ts`, and
//! Atlassian's REST and support pages where the description is silent:
//! - Answers carry the description's schemas: `Pullrequest` (`source` and `destination` as
//!   `PullrequestEndpoint` with `branch.name`, `commit.hash` as Bitbucket's 12-digit short
//!   hash, `repository.full_name`; `merge_commit.hash` short too), `Commitstatus`,
//!   `PullrequestComment` (`content.raw`), `Account`/`User` (`uuid`, `account_id`,
//!   `nickname`), lists as `{values, next, page, pagelen, size}` with `next` absolute.
//! - Every request is checked: credentials only in `Authorization` (`Bearer` for access
//!   tokens and API tokens, `Basic` for a username and app password; a token in the URL is a
//!   violation), the route must be Bitbucket's, query parameters must be declared for the
//!   route (`state` may repeat, with the declared enum), `q` must be BBQL this server reads,
//!   JSON bodies must be objects of the schema's fields with their types. An undeclared field
//!   or parameter is a [`Violation`], and `Drop` fails the test unless it took them with
//!   [`BitbucketCloudServer::take_violations`]. A build status without `url` or with a key past 40
//!   characters is answered `400`, as Bitbucket does.
//! - Bitbucket's rules: a build status is one per commit and key, overwritten in place
//!   (`updated_on` moves to the server's clock, `created_on` stays), with no creator; every
//!   answer's `Date` is the server's clock too; one open pull request per
//!   source and destination branch (`400`); a read-only credential cannot write (`403`); a
//!   repository hidden from the credential is `404`; `GET /user` refuses an access token
//!   (`401`, "not supported for this endpoint").
//! - Pull requests are listed `OPEN` only unless `state` says otherwise, `pagelen` 10 by
//!   default and at most 50 (100 for statuses and comments). [`BitbucketCloudServer::next_host`]
//!   makes `next` point at another host, as a hostile or misconfigured proxy might.
//! - Branches, commits and merges are real: the repository is a bare Git repository; an open
//!   pull request's source commit follows its branch, and a person merging
//!   ([`BitbucketCloudServer::merge_pull_as`]) makes a merge commit and moves the destination.
//!
//! Test support panics with a clear message instead of returning errors.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use axum::body::Body;
use axum::extract::{Request, State as AxumState};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::Response;
use axum::Router;
use base64::Engine as _;
use serde_json::{json, Value};
use tokio::task::JoinHandle;

use super::http_fake::{self, fault_status, percent_decode, set_headers};

/// Where Bitbucket Cloud serves its REST API.
pub const API_PREFIX: &str = "/2.0";
/// Bitbucket's web address, where `links.html` point. Not this server's.
pub const WEB_URL: &str = "https://bitbucket.org";
pub const DEFAULT_PAGELEN: usize = 10;
pub const MAX_PULL_PAGELEN: usize = 50;
pub const MAX_PAGELEN: usize = 100;
/// The longest build status key Bitbucket takes.
pub const MAX_KEY: usize = 40;

const FIRST_COMMENT_ID: u64 = 480_000_000;

// ---------------------------------------------------------------------------
// Public types
// ---------------------------------------------------------------------------

/// A credential, as Bitbucket Cloud issues them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Credential {
    /// A repository (project, workspace) access token: `Bearer`, acts as its own account,
    /// and is refused `GET /user`.
    AccessToken,
    /// A user's API token: `Bearer`, reads `GET /user`.
    ApiToken,
    /// A user's app password: HTTP Basic with the user's `username`.
    AppPassword { username: String },
}

/// What a credential may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    Write,
    Read,
}

/// A user's access to a repository.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Access {
    Read,
    Write,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrState {
    Open,
    Merged,
    Declined,
    Superseded,
}

impl PrState {
    fn word(self) -> &'static str {
        match self {
            PrState::Open => "OPEN",
            PrState::Merged => "MERGED",
            PrState::Declined => "DECLINED",
            PrState::Superseded => "SUPERSEDED",
        }
    }
}

/// A pull request as the server holds it.
#[derive(Clone, Debug)]
pub struct Pull {
    pub id: u64,
    pub repo: usize,
    pub title: String,
    pub description: String,
    pub state: PrState,
    pub source_branch: String,
    pub source_sha: String,
    /// The repository of the source branch: a fork's for a fork's pull request.
    pub source_repo: usize,
    pub destination_branch: String,
    /// The full hash; answered short.
    pub merge_commit: Option<String>,
    /// The author's nickname.
    pub author: String,
    pub close_source_branch: bool,
    pub created: SystemTime,
    pub updated: SystemTime,
    pub fork: bool,
}

#[derive(Clone, Debug)]
pub struct Comment {
    pub id: u64,
    pub repo: usize,
    pub pull: u64,
    pub raw: String,
    /// The writer's nickname.
    pub user: String,
    pub created: SystemTime,
    pub updated: SystemTime,
}

#[derive(Clone, Debug)]
pub struct BuildStatus {
    pub repo: usize,
    pub sha: String,
    pub key: String,
    pub state: String,
    pub name: String,
    pub description: String,
    pub url: String,
    pub created: SystemTime,
    pub updated: SystemTime,
    /// Who posted it last: kept for tests only, Bitbucket does not say.
    pub poster: String,
}

/// A request Bitbucket would refuse, or would silently misread.
#[derive(Clone, Debug)]
pub struct Violation {
    pub method: String,
    pub path: String,
    pub problem: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.method, self.path, self.problem)
    }
}

/// A scripted answer for matching requests.
pub use http_fake::JsonFault as Fault;

/// Bitbucket Cloud's `429`: no `Retry-After` (its window rolls over an hour).
pub fn rate_limited(method: &str, path_contains: &str) -> Fault {
    Fault::new(method, path_contains, 429).json_body(json!({
        "type": "error",
        "error": {"message": "Rate limit for this resource has been exceeded"}
    }))
}

pub use http_fake::RecordedRequest;

// ---------------------------------------------------------------------------
// The server
// ---------------------------------------------------------------------------

/// A running fake Bitbucket Cloud. Stops when dropped.
pub struct BitbucketCloudServer {
    inner: Arc<Inner>,
    task: JoinHandle<()>,
}

struct Inner {
    base: String,
    state: Mutex<ServerState>,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, ServerState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[derive(Default)]
struct ServerState {
    /// Nicknames, in order of creation (their number makes their uuid).
    users: Vec<String>,
    /// `(secret, nickname, credential, scope)`.
    credentials: Vec<(String, String, Credential, Scope)>,
    repos: Vec<Repo>,
    pulls: Vec<Pull>,
    comments: Vec<Comment>,
    statuses: Vec<BuildStatus>,
    requests: Vec<RecordedRequest>,
    violations: Vec<Violation>,
    faults: Vec<Fault>,
    /// `next` links on this base instead of the server's own.
    next_base: Option<String>,
    /// The server's clock ([`BitbucketCloudServer::advance_clock`],
    /// [`BitbucketCloudServer::turn_back_clock`]).
    clock: Arc<http_fake::Clock>,
}

impl ServerState {
    /// The server's current time: what it writes as `created_on` and `updated_on`.
    fn now(&self) -> SystemTime {
        self.clock.now()
    }
}

struct Repo {
    workspace: String,
    slug: String,
    git_dir: PathBuf,
    access: BTreeMap<String, Access>,
    last_pull: u64,
}

impl Repo {
    fn full_name(&self) -> String {
        format!("{}/{}", self.workspace, self.slug)
    }
}

impl ServerState {
    fn ensure_user(&mut self, nickname: &str) {
        if !self.users.iter().any(|u| u == nickname) {
            self.users.push(nickname.to_string());
        }
    }

    fn uuid(&self, nickname: &str) -> String {
        let n = self
            .users
            .iter()
            .position(|u| u == nickname)
            .unwrap_or(usize::MAX);
        uuid_of(n)
    }

    fn repo_index(&self, full_name: &str) -> usize {
        self.repos
            .iter()
            .position(|r| r.full_name() == full_name)
            .unwrap_or_else(|| panic!("no repository {full_name}"))
    }

    fn pull_mut(&mut self, repo: usize, id: u64) -> &mut Pull {
        self.pulls
            .iter_mut()
            .find(|p| p.repo == repo && p.id == id)
            .unwrap_or_else(|| panic!("no pull request #{id}"))
    }
}

/// A user's `{uuid}`, as Bitbucket writes them, in braces.
fn uuid_of(n: usize) -> String {
    format!("{{6f1c{n:04x}-0b7e-4c2a-9d3e-5a1b2c3d4e5f}}")
}

impl BitbucketCloudServer {
    /// Starts a server with user `nickname`, whose API token `token` may write, and private
    /// repository `workspace/slug` backed by the bare repository `bare_repo`.
    pub async fn start(
        token: &str,
        nickname: &str,
        workspace: &str,
        slug: &str,
        bare_repo: &Path,
    ) -> BitbucketCloudServer {
        let (listener, base) = http_fake::loopback("Bitbucket").await;
        let inner = Arc::new(Inner {
            base,
            state: Mutex::new(ServerState::default()),
        });
        let router = Router::new().fallback(handle).with_state(inner.clone());
        let task = http_fake::serve(listener, router, "Bitbucket");
        let server = BitbucketCloudServer { inner, task };
        server.add_credential(token, nickname, Credential::ApiToken, Scope::Write);
        {
            let mut state = server.inner.lock();
            let mut access = BTreeMap::new();
            access.insert(nickname.to_string(), Access::Write);
            state.repos.push(Repo {
                workspace: workspace.to_string(),
                slug: slug.to_string(),
                git_dir: bare_repo.to_path_buf(),
                access,
                last_pull: 0,
            });
        }
        server
    }

    /// `http://127.0.0.1:PORT/2.0`: what `forge.api_url` names.
    pub fn api_url(&self) -> String {
        format!("{}{API_PREFIX}", self.inner.base)
    }

    /// A credential `secret` of account `nickname` (added if missing).
    pub fn add_credential(&self, secret: &str, nickname: &str, kind: Credential, scope: Scope) {
        let mut state = self.inner.lock();
        state.ensure_user(nickname);
        state.credentials.retain(|(s, ..)| s != secret);
        state
            .credentials
            .push((secret.to_string(), nickname.to_string(), kind, scope));
    }

    /// The `uuid` of account `nickname`.
    pub fn uuid(&self, nickname: &str) -> String {
        let mut state = self.inner.lock();
        state.ensure_user(nickname);
        state.uuid(nickname)
    }

    /// Gives `nickname` (added if missing) `access` to repository `workspace/slug`.
    pub fn grant(&self, repo: &str, nickname: &str, access: Access) {
        let mut state = self.inner.lock();
        state.ensure_user(nickname);
        let index = state.repo_index(repo);
        state.repos[index]
            .access
            .insert(nickname.to_string(), access);
    }

    /// `next` links from now on point at `base` (`https://elsewhere.example`), not here.
    pub fn next_host(&self, base: &str) {
        self.inner.lock().next_base = Some(base.to_string());
    }

    /// Moves the server's clock forward: what it writes from now on is `by` later.
    pub fn advance_clock(&self, by: Duration) {
        self.inner.lock().clock.advance(by);
    }

    /// Turns the server's clock back: what it writes from now on, and the `Date` it answers,
    /// is `by` earlier (a scene set in the past).
    pub fn turn_back_clock(&self, by: Duration) {
        self.inner.lock().clock.turn_back(by);
    }

    /// Scripts a fault for the next matching requests, tried in the order added.
    pub fn inject(&self, fault: Fault) {
        self.inner.lock().faults.push(fault);
    }

    /// A person opens a pull request from `source` into `destination` on the web page.
    pub fn open_pull_as(
        &self,
        nickname: &str,
        repo: &str,
        source: &str,
        destination: &str,
        title: &str,
    ) -> u64 {
        let mut state = self.inner.lock();
        state.ensure_user(nickname);
        let index = state.repo_index(repo);
        let sha = git_out(
            &state.repos[index].git_dir,
            &["rev-parse", &branch_ref(source)],
        )
        .unwrap_or_else(|| panic!("no branch {source}"));
        insert_pull(
            &mut state,
            index,
            index,
            source,
            &sha,
            destination,
            title,
            "",
            nickname,
        )
    }

    /// `nickname` forks `upstream` as `nickname/<slug>` and opens a pull request from the
    /// fork's branch `source` (at `sha`, a commit the upstream repository has) into
    /// `destination`.
    #[allow(clippy::too_many_arguments)]
    pub fn open_fork_pull_as(
        &self,
        nickname: &str,
        upstream: &str,
        source: &str,
        sha: &str,
        destination: &str,
        title: &str,
        description: &str,
    ) -> u64 {
        let mut state = self.inner.lock();
        state.ensure_user(nickname);
        let up = state.repo_index(upstream);
        let slug = state.repos[up].slug.clone();
        let git_dir = state.repos[up].git_dir.clone();
        let mut access = BTreeMap::new();
        access.insert(nickname.to_string(), Access::Write);
        state.repos.push(Repo {
            workspace: nickname.to_string(),
            slug,
            git_dir,
            access,
            last_pull: 0,
        });
        let fork = state.repos.len() - 1;
        state.repos[up]
            .access
            .entry(nickname.to_string())
            .or_insert(Access::Read);
        insert_pull(
            &mut state,
            up,
            fork,
            source,
            sha,
            destination,
            title,
            description,
            nickname,
        )
    }

    /// A person declines pull request `id`.
    pub fn decline_pull_as(&self, nickname: &str, repo: &str, id: u64) {
        let mut state = self.inner.lock();
        state.ensure_user(nickname);
        let index = state.repo_index(repo);
        let now = state.now();
        let pull = state.pull_mut(index, id);
        assert_eq!(pull.state, PrState::Open, "#{id} is not open");
        pull.state = PrState::Declined;
        pull.updated = now;
    }

    /// A person merges pull request `id` with a merge commit; the destination branch moves
    /// to it. Returns the merge commit (full hash).
    pub fn merge_pull_as(&self, nickname: &str, repo: &str, id: u64) -> String {
        refresh_pulls(&self.inner);
        let (pull, git_dir) = {
            let mut state = self.inner.lock();
            state.ensure_user(nickname);
            let index = state.repo_index(repo);
            let pull = state.pull_mut(index, id).clone();
            (pull, state.repos[index].git_dir.clone())
        };
        assert_eq!(pull.state, PrState::Open, "#{id} is not open");
        let base = git_out(
            &git_dir,
            &["rev-parse", &branch_ref(&pull.destination_branch)],
        )
        .unwrap_or_else(|| panic!("no branch {}", pull.destination_branch));
        let tree = git_out(
            &git_dir,
            &["merge-tree", "--write-tree", &base, &pull.source_sha],
        )
        .unwrap_or_else(|| panic!("#{id} conflicts with {}", pull.destination_branch));
        let tree = tree.lines().next().unwrap_or_default().to_string();
        let message = format!(
            "Merged in {} (pull request #{id})\n\n{}",
            pull.source_branch, pull.title
        );
        let email = format!("{nickname}@example.com");
        let output = super::git::git_command()
            .current_dir(&git_dir)
            .args([
                "commit-tree",
                &tree,
                "-m",
                &message,
                "-p",
                &base,
                "-p",
                &pull.source_sha,
            ])
            .env("GIT_AUTHOR_NAME", nickname)
            .env("GIT_AUTHOR_EMAIL", &email)
            .env("GIT_COMMITTER_NAME", nickname)
            .env("GIT_COMMITTER_EMAIL", &email)
            .output()
            .expect("run git commit-tree");
        assert!(output.status.success(), "git commit-tree failed");
        let merge = String::from_utf8_lossy(&output.stdout).trim().to_string();
        assert!(
            git_out(
                &git_dir,
                &[
                    "update-ref",
                    &branch_ref(&pull.destination_branch),
                    &merge,
                    &base
                ]
            )
            .is_some(),
            "move {} to {merge}",
            pull.destination_branch
        );
        let mut state = self.inner.lock();
        let now = state.now();
        let p = state.pull_mut(pull.repo, id);
        p.state = PrState::Merged;
        p.merge_commit = Some(merge.clone());
        p.updated = now;
        merge
    }

    /// A person writes a comment on pull request `id`.
    pub fn comment_as(&self, nickname: &str, repo: &str, id: u64, raw: &str) -> u64 {
        let mut state = self.inner.lock();
        state.ensure_user(nickname);
        let index = state.repo_index(repo);
        add_comment(&mut state, index, id, nickname, raw)
    }

    /// Every pull request of `repo`, by id.
    pub fn pulls(&self, repo: &str) -> Vec<Pull> {
        refresh_pulls(&self.inner);
        let state = self.inner.lock();
        let index = state.repo_index(repo);
        let mut pulls: Vec<Pull> = state
            .pulls
            .iter()
            .filter(|p| p.repo == index)
            .cloned()
            .collect();
        pulls.sort_by_key(|p| p.id);
        pulls
    }

    /// The comments on pull request `id`, oldest first.
    pub fn comments(&self, repo: &str, id: u64) -> Vec<Comment> {
        let state = self.inner.lock();
        let index = state.repo_index(repo);
        state
            .comments
            .iter()
            .filter(|c| c.repo == index && c.pull == id)
            .cloned()
            .collect()
    }

    /// The build statuses on `sha` in `repo`, oldest first by creation.
    pub fn statuses(&self, repo: &str, sha: &str) -> Vec<BuildStatus> {
        let state = self.inner.lock();
        let index = state.repo_index(repo);
        state
            .statuses
            .iter()
            .filter(|s| s.repo == index && s.sha == sha)
            .cloned()
            .collect()
    }

    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.inner.lock().requests.clone()
    }

    pub fn violations(&self) -> Vec<Violation> {
        self.inner.lock().violations.clone()
    }

    /// The violations so far, which then no longer fail the test.
    pub fn take_violations(&self) -> Vec<Violation> {
        std::mem::take(&mut self.inner.lock().violations)
    }

    pub fn assert_no_violations(&self) {
        http_fake::assert_no_violations(&self.violations(), "Bitbucket", "refuse or misread");
    }
}

impl Drop for BitbucketCloudServer {
    fn drop(&mut self) {
        self.task.abort();
        http_fake::fail_on_untaken(
            &self.inner.lock().violations,
            "Bitbucket",
            "refuse or misread",
        );
    }
}

#[allow(clippy::too_many_arguments)]
fn insert_pull(
    state: &mut ServerState,
    repo: usize,
    source_repo: usize,
    source: &str,
    sha: &str,
    destination: &str,
    title: &str,
    description: &str,
    author: &str,
) -> u64 {
    let now = state.now();
    state.repos[repo].last_pull += 1;
    let id = state.repos[repo].last_pull;
    state.pulls.push(Pull {
        id,
        repo,
        title: title.to_string(),
        description: description.to_string(),
        state: PrState::Open,
        source_branch: source.to_string(),
        source_sha: sha.to_string(),
        source_repo,
        destination_branch: destination.to_string(),
        merge_commit: None,
        author: author.to_string(),
        close_source_branch: false,
        created: now,
        updated: now,
        fork: source_repo != repo,
    });
    id
}

fn add_comment(state: &mut ServerState, repo: usize, pull: u64, nickname: &str, raw: &str) -> u64 {
    let now = state.now();
    let id = FIRST_COMMENT_ID + state.comments.len() as u64;
    state.comments.push(Comment {
        id,
        repo,
        pull,
        raw: raw.to_string(),
        user: nickname.to_string(),
        created: now,
        updated: now,
    });
    if let Some(p) = state
        .pulls
        .iter_mut()
        .find(|p| p.repo == repo && p.id == pull)
    {
        p.updated = now;
    }
    id
}

// ---------------------------------------------------------------------------
// Git
// ---------------------------------------------------------------------------

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

/// The full hash of a commit named by a full or short hash.
fn resolve_hash(dir: &Path, hash: &str) -> Option<String> {
    let hex = (4..=40).contains(&hash.len()) && hash.chars().all(|c| c.is_ascii_hexdigit());
    hex.then(|| {
        git_out(
            dir,
            &[
                "rev-parse",
                "--verify",
                "--quiet",
                &format!("{hash}^{{commit}}"),
            ],
        )
    })
    .flatten()
}

/// Open pull requests' source commits follow their branches (a fork's stays).
fn refresh_pulls(inner: &Inner) {
    let open: Vec<(usize, u64, String, PathBuf)> = {
        let state = inner.lock();
        state
            .pulls
            .iter()
            .filter(|p| p.state == PrState::Open && !p.fork)
            .map(|p| {
                (
                    p.repo,
                    p.id,
                    p.source_branch.clone(),
                    state.repos[p.repo].git_dir.clone(),
                )
            })
            .collect()
    };
    for (repo, id, branch, dir) in open {
        if let Some(sha) = git_out(
            &dir,
            &["rev-parse", "--verify", "--quiet", &branch_ref(&branch)],
        ) {
            let mut state = inner.lock();
            let now = state.now();
            let pull = state.pull_mut(repo, id);
            if pull.source_sha != sha {
                pull.source_sha = sha;
                pull.updated = now;
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Declared parameters and bodies (OpenAPI)
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq)]
enum Type {
    Str,
    Bool,
    Object,
    List,
}

/// A body field: name, type, required.
type Field = (&'static str, Type, bool);

/// `Pullrequest` as a client writes it. (`description` is what Bitbucket's answers carry
/// besides `summary`, and what it takes on create and update.)
const PULL_FIELDS: &[Field] = &[
    ("title", Type::Str, false),
    ("description", Type::Str, false),
    ("summary", Type::Object, false),
    ("source", Type::Object, false),
    ("destination", Type::Object, false),
    ("close_source_branch", Type::Bool, false),
    ("reviewers", Type::List, false),
    ("draft", Type::Bool, false),
];
/// `Commitstatus` as posted to `statuses/build`.
const STATUS_FIELDS: &[Field] = &[
    ("key", Type::Str, true),
    ("state", Type::Str, true),
    ("url", Type::Str, true),
    ("name", Type::Str, false),
    ("description", Type::Str, false),
    ("refname", Type::Str, false),
];
const COMMENT_FIELDS: &[Field] = &[
    ("content", Type::Object, true),
    ("inline", Type::Object, false),
    ("parent", Type::Object, false),
];
const STATUS_STATES: [&str; 4] = ["INPROGRESS", "SUCCESSFUL", "FAILED", "STOPPED"];
const PR_STATES: [&str; 4] = ["OPEN", "MERGED", "DECLINED", "SUPERSEDED"];

/// Query parameters a route declares, with their enum values where there are.
type Param = (&'static str, &'static [&'static str]);
const LIST_PULLS: &[Param] = &[
    ("state", &PR_STATES),
    ("q", &[]),
    ("sort", &[]),
    ("page", &[]),
    ("pagelen", &[]),
    ("fields", &[]),
];
const PAGED: &[Param] = &[
    ("q", &[]),
    ("sort", &[]),
    ("page", &[]),
    ("pagelen", &[]),
    ("fields", &[]),
];
const FIELDS_ONLY: &[Param] = &[("fields", &[])];

// ---------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------

struct Reply {
    status: StatusCode,
    body: String,
    headers: Vec<(String, String)>,
}

impl Reply {
    fn json(status: StatusCode, body: Value) -> Reply {
        Reply {
            status,
            body: body.to_string(),
            headers: Vec::new(),
        }
    }
}

/// Bitbucket's `Error`.
fn error(status: StatusCode, message: &str) -> Reply {
    Reply::json(
        status,
        json!({"type": "error", "error": {"message": message}}),
    )
}

async fn handle(AxumState(inner): AxumState<Arc<Inner>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let body_text = http_fake::body_text(body).await;
    let worker = inner.clone();
    let reply = tokio::task::spawn_blocking(move || answer(&worker, &parts, &body_text))
        .await
        .unwrap_or_else(|panic| {
            error(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("the test server panicked: {panic}"),
            )
        });
    let mut response = Response::new(Body::from(reply.body));
    *response.status_mut() = reply.status;
    let headers = response.headers_mut();
    set_headers(
        headers,
        [("content-type", "application/json; charset=utf-8")],
    );
    let clock = inner.lock().clock.clone();
    clock.date(headers);
    set_headers(
        headers,
        reply.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())),
    );
    response
}

/// Who the `Authorization` header names: `(nickname, credential, scope)`.
fn presented(state: &ServerState, headers: &HeaderMap) -> Option<(String, Credential, Scope)> {
    let value = headers.get("authorization")?.to_str().ok()?;
    let (scheme, rest) = value.split_once(' ')?;
    let rest = rest.trim();
    if scheme.eq_ignore_ascii_case("bearer") {
        return state
            .credentials
            .iter()
            .find(|(s, _, kind, _)| s == rest && !matches!(kind, Credential::AppPassword { .. }))
            .map(|(_, n, k, sc)| (n.clone(), k.clone(), *sc));
    }
    if scheme.eq_ignore_ascii_case("basic") {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(rest)
            .ok()?;
        let decoded = String::from_utf8(decoded).ok()?;
        let (user, password) = decoded.split_once(':')?;
        return state
            .credentials
            .iter()
            .find(|(s, _, kind, _)| {
                s == password
                    && matches!(kind, Credential::AppPassword { username } if username == user)
            })
            .map(|(_, n, k, sc)| (n.clone(), k.clone(), *sc));
    }
    None
}

fn answer(inner: &Arc<Inner>, parts: &axum::http::request::Parts, body: &str) -> Reply {
    let method = parts.method.clone();
    let path = parts.uri.path().to_string();
    let query = parts.uri.query().map(str::to_string);
    let user = presented(&inner.lock(), &parts.headers);
    let index = http_fake::record(
        &mut inner.lock().requests,
        method.as_str(),
        &path,
        query.as_deref(),
        body,
        user.as_ref().map(|(n, ..)| n.clone()),
    );
    let violate = |problem: String| {
        inner.lock().violations.push(Violation {
            method: method.to_string(),
            path: path.clone(),
            problem,
        });
    };
    let in_url = query.as_deref().is_some_and(|q| {
        url::form_urlencoded::parse(q.as_bytes()).any(|(k, _)| k == "access_token")
    });
    if in_url {
        violate("a token in the URL (logged by every proxy on the way)".into());
    }
    let fault = {
        let mut state = inner.lock();
        http_fake::take_fault(
            &mut state.faults,
            |f: &mut Fault| &mut f.scope,
            method.as_str(),
            &path,
            false,
        )
    };
    let reply = match fault {
        Some(fault) => Reply {
            status: fault_status(fault.status),
            body: fault
                .body
                .unwrap_or_else(|| {
                    json!({"type": "error", "error": {"message": http_fake::canonical_reason(fault.status)}})
                })
                .to_string(),
            headers: fault.headers,
        },
        None => dispatch(inner, &method, &path, query.as_deref(), body, user, &violate),
    };
    inner.lock().requests[index].status = reply.status.as_u16();
    reply
}

/// The query's pairs, checked against `declared`: undeclared names, values outside an enum,
/// a repeated parameter other than `state`, and a `page` or `pagelen` that is no number are
/// violations.
fn query_pairs(
    query: Option<&str>,
    declared: &[Param],
    violate: &dyn Fn(String),
) -> Vec<(String, String)> {
    let pairs: Vec<(String, String)> = url::form_urlencoded::parse(query.unwrap_or("").as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    for (i, (key, value)) in pairs.iter().enumerate() {
        match declared.iter().find(|(name, _)| name == key) {
            None => violate(format!(
                "query parameter {key:?} is not declared for this route"
            )),
            Some((_, values)) if !values.is_empty() && !values.contains(&value.as_str()) => {
                violate(format!("{key}={value:?} is none of {values:?}"))
            }
            Some(_) if matches!(key.as_str(), "page" | "pagelen") => {
                if value.parse::<u64>().map_or(true, |n| n == 0) {
                    violate(format!("{key}={value:?} is not a page number or size"));
                }
            }
            Some(_) => {}
        }
        if key != "state" && pairs[..i].iter().any(|(k, _)| k == key) {
            violate(format!("query parameter {key:?} repeated"));
        }
    }
    pairs
}

fn param<'p>(pairs: &'p [(String, String)], name: &str) -> Option<&'p str> {
    pairs
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// The JSON body as an object of `declared` fields, or Bitbucket's `400`.
fn body_object(
    body: &str,
    declared: &[Field],
    violate: &dyn Fn(String),
) -> Result<serde_json::Map<String, Value>, Reply> {
    let Ok(Value::Object(object)) = serde_json::from_str::<Value>(body) else {
        violate("the body is not a JSON object".into());
        return Err(error(StatusCode::BAD_REQUEST, "Bad request"));
    };
    for (key, value) in &object {
        let Some((_, kind, _)) = declared.iter().find(|(name, ..)| name == key) else {
            violate(format!("field {key:?} is not in the schema for this route"));
            continue;
        };
        let ok = match kind {
            Type::Str => value.is_string(),
            Type::Bool => value.is_boolean(),
            Type::Object => value.is_object(),
            Type::List => value.is_array(),
        };
        if !ok {
            violate(format!("field {key:?} has the wrong type: {value}"));
            return Err(error(StatusCode::BAD_REQUEST, &format!("{key}: invalid")));
        }
    }
    for (name, _, required) in declared {
        if *required && object.get(*name).is_none_or(Value::is_null) {
            return Err(error(
                StatusCode::BAD_REQUEST,
                &format!("{name}: This field is required."),
            ));
        }
    }
    Ok(object)
}

fn str_field<'o>(object: &'o serde_json::Map<String, Value>, name: &str) -> Option<&'o str> {
    object.get(name).and_then(Value::as_str)
}

#[allow(clippy::too_many_arguments)]
fn dispatch(
    inner: &Arc<Inner>,
    method: &Method,
    path: &str,
    query: Option<&str>,
    body: &str,
    user: Option<(String, Credential, Scope)>,
    violate: &dyn Fn(String),
) -> Reply {
    let Some(rest) = path.strip_prefix(API_PREFIX) else {
        violate("not under /2.0".into());
        return error(StatusCode::NOT_FOUND, "Resource not found");
    };
    let segments: Vec<String> = rest
        .trim_start_matches('/')
        .split('/')
        .map(percent_decode)
        .collect();
    let segs: Vec<&str> = segments.iter().map(String::as_str).collect();
    let Some((nickname, credential, scope)) = user else {
        return error(
            StatusCode::UNAUTHORIZED,
            "Token is invalid, expired, or not supported for this endpoint.",
        );
    };
    let m = method.as_str();
    if segs == ["user"] {
        if m != "GET" {
            violate("no such route".into());
            return error(StatusCode::METHOD_NOT_ALLOWED, "Method not allowed");
        }
        query_pairs(query, FIELDS_ONLY, violate);
        if credential == Credential::AccessToken {
            return error(
                StatusCode::UNAUTHORIZED,
                "Token is invalid, expired, or not supported for this endpoint.",
            );
        }
        return Reply::json(StatusCode::OK, user_json(&inner.lock(), &nickname));
    }
    let ["repositories", workspace, slug, route @ ..] = segs.as_slice() else {
        violate("a route Bitbucket does not have".into());
        return error(StatusCode::NOT_FOUND, "Resource not found");
    };
    let (repo, access) = {
        let state = inner.lock();
        match state
            .repos
            .iter()
            .position(|r| r.workspace == *workspace && r.slug == *slug)
        {
            Some(i) => (i, state.repos[i].access.get(&nickname).copied()),
            None => return error(StatusCode::NOT_FOUND, "Repository not found"),
        }
    };
    let Some(access) = access else {
        return error(StatusCode::NOT_FOUND, "Repository not found");
    };
    if m != "GET" && (scope == Scope::Read || access < Access::Write) {
        return error(
            StatusCode::FORBIDDEN,
            "Your credentials lack one or more required privilege scopes.",
        );
    }
    let req = Req {
        inner,
        path,
        repo,
        nickname: &nickname,
        query,
        body,
        violate,
    };
    match (m, route) {
        ("GET", ["pullrequests"]) => list_pulls(&req),
        ("POST", ["pullrequests"]) => create_pull(&req),
        ("GET", ["pullrequests", id]) => with_id(id, |id| get_pull(&req, id)),
        ("PUT", ["pullrequests", id]) => with_id(id, |id| edit_pull(&req, id)),
        ("GET", ["pullrequests", id, "comments"]) => with_id(id, |id| list_comments(&req, id)),
        ("POST", ["pullrequests", id, "comments"]) => with_id(id, |id| create_comment(&req, id)),
        ("PUT", ["pullrequests", id, "comments", cid]) => {
            with_id(id, |id| with_id(cid, |cid| edit_comment(&req, id, cid)))
        }
        ("GET", ["commit", hash]) => get_commit(&req, hash),
        ("GET", ["commit", sha, "statuses"]) => list_statuses(&req, sha),
        ("POST", ["commit", sha, "statuses", "build"]) => create_status(&req, sha),
        _ => {
            violate("a route Bitbucket does not have".into());
            error(StatusCode::NOT_FOUND, "Resource not found")
        }
    }
}

struct Req<'a> {
    inner: &'a Arc<Inner>,
    /// The request's path as sent, where `next` points again.
    path: &'a str,
    repo: usize,
    nickname: &'a str,
    query: Option<&'a str>,
    body: &'a str,
    violate: &'a dyn Fn(String),
}

impl Req<'_> {
    fn state(&self) -> MutexGuard<'_, ServerState> {
        self.inner.lock()
    }

    fn git_dir(&self) -> PathBuf {
        self.state().repos[self.repo].git_dir.clone()
    }
}

fn with_id(text: &str, then: impl FnOnce(u64) -> Reply) -> Reply {
    match text.parse::<u64>() {
        Ok(n) => then(n),
        Err(_) => error(StatusCode::NOT_FOUND, "Resource not found"),
    }
}

/// Times as Bitbucket writes them: microseconds and `+00:00`.
fn time(at: SystemTime) -> String {
    let since = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let second = k8s_openapi::jiff::Timestamp::from_second(since.as_secs() as i64)
        .unwrap()
        .to_string();
    format!(
        "{}.{:06}+00:00",
        second.trim_end_matches('Z'),
        since.subsec_micros()
    )
}

fn short(hash: &str) -> String {
    hash.chars().take(12).collect()
}

fn user_json(state: &ServerState, nickname: &str) -> Value {
    let uuid = state.uuid(nickname);
    let n = state.users.iter().position(|u| u == nickname).unwrap_or(0);
    json!({
        "type": "user", "uuid": uuid, "display_name": nickname, "nickname": nickname,
        "account_id": format!("557058:{n:08x}-1111-2222-3333-444455556666"),
        "links": {
            "self": {"href": format!("https://api.bitbucket.org/2.0/users/{uuid}")},
            "avatar": {"href": format!("https://avatar-management.example/{n}")},
            "html": {"href": format!("{WEB_URL}/{uuid}/")}
        }
    })
}

fn repo_json(state: &ServerState, repo: usize) -> Value {
    let r = &state.repos[repo];
    json!({
        "type": "repository", "full_name": r.full_name(), "name": r.slug,
        "uuid": format!("{{0d3c{repo:04x}-0000-4000-8000-000000000000}}"),
        "links": {
            "self": {"href": format!("https://api.bitbucket.org/2.0/repositories/{}", r.full_name())},
            "html": {"href": format!("{WEB_URL}/{}", r.full_name())}
        }
    })
}

fn pull_json(state: &ServerState, pull: &Pull) -> Value {
    let repo = &state.repos[pull.repo];
    let full = repo.full_name();
    let destination_sha = git_out(
        &repo.git_dir,
        &["rev-parse", &branch_ref(&pull.destination_branch)],
    )
    .unwrap_or_default();
    let html = format!("{WEB_URL}/{full}/pull-requests/{}", pull.id);
    let comments = state
        .comments
        .iter()
        .filter(|c| c.repo == pull.repo && c.pull == pull.id)
        .count();
    json!({
        "type": "pullrequest", "id": pull.id, "title": pull.title,
        "description": pull.description,
        "summary": {"type": "rendered", "raw": pull.description, "markup": "markdown",
                    "html": format!("<p>{}</p>", pull.description)},
        "state": pull.state.word(),
        "author": user_json(state, &pull.author),
        "source": {
            "branch": {"name": pull.source_branch},
            "commit": {"type": "commit", "hash": short(&pull.source_sha)},
            "repository": repo_json(state, pull.source_repo)
        },
        "destination": {
            "branch": {"name": pull.destination_branch},
            "commit": {"type": "commit", "hash": short(&destination_sha)},
            "repository": repo_json(state, pull.repo)
        },
        "merge_commit": pull.merge_commit.as_deref().map(|h| json!({"type": "commit", "hash": short(h)})),
        "close_source_branch": pull.close_source_branch,
        "closed_by": null, "reason": "", "comment_count": comments, "task_count": 0,
        "created_on": time(pull.created), "updated_on": time(pull.updated),
        "reviewers": [], "participants": [], "draft": false,
        "links": {
            "self": {"href": format!("https://api.bitbucket.org/2.0/repositories/{full}/pullrequests/{}", pull.id)},
            "html": {"href": html}
        }
    })
}

fn comment_json(state: &ServerState, comment: &Comment) -> Value {
    json!({
        "type": "pullrequest_comment", "id": comment.id,
        "content": {"type": "rendered", "raw": comment.raw, "markup": "markdown",
                    "html": format!("<p>{}</p>", comment.raw)},
        "user": user_json(state, &comment.user), "deleted": false, "pending": false,
        "created_on": time(comment.created), "updated_on": time(comment.updated),
        "links": {"html": {"href": format!("{WEB_URL}/pull-requests/{}#comment-{}", comment.pull, comment.id)}}
    })
}

fn status_json(status: &BuildStatus) -> Value {
    json!({
        "type": "build", "key": status.key, "state": status.state, "name": status.name,
        "description": status.description, "url": status.url, "refname": null,
        "uuid": format!("{{5b2e0000-0000-4000-8000-{:012x}}}", status.key.len()),
        "created_on": time(status.created), "updated_on": time(status.updated),
        "links": {"commit": {"href": format!("https://api.bitbucket.org/2.0/commit/{}", status.sha)}}
    })
}

/// One page of `items` as Bitbucket answers a list: `{values, page, pagelen, size, next}`,
/// `next` absolute (on [`BitbucketCloudServer::next_host`]'s base when set).
fn paged(req: &Req, pairs: &[(String, String)], items: Vec<Value>, max_pagelen: usize) -> Reply {
    let page: usize = param(pairs, "page")
        .and_then(|p| p.parse().ok())
        .filter(|p| *p > 0)
        .unwrap_or(1);
    let pagelen: usize = param(pairs, "pagelen")
        .and_then(|l| l.parse().ok())
        .filter(|l| *l > 0)
        .unwrap_or(DEFAULT_PAGELEN);
    if pagelen > max_pagelen {
        return error(
            StatusCode::BAD_REQUEST,
            &format!("Invalid pagelen: the maximum is {max_pagelen}"),
        );
    }
    let size = items.len();
    let shown: Vec<Value> = items
        .into_iter()
        .skip((page - 1) * pagelen)
        .take(pagelen)
        .collect();
    let mut body = json!({"values": shown, "page": page, "pagelen": pagelen, "size": size});
    if page * pagelen < size {
        let base = req
            .state()
            .next_base
            .clone()
            .unwrap_or_else(|| req.inner.base.clone());
        let path = req.path;
        let mut query = url::form_urlencoded::Serializer::new(String::new());
        for (k, v) in pairs.iter().filter(|(k, _)| k != "page") {
            query.append_pair(k, v);
        }
        query.append_pair("page", &(page + 1).to_string());
        body["next"] = json!(format!("{base}{path}?{}", query.finish()));
    }
    Reply::json(StatusCode::OK, body)
}

/// A BBQL clause this server reads: `field op "value"`.
struct Clause {
    field: String,
    op: String,
    value: String,
}

/// `q`: clauses joined by `AND`, on the fields tagpin filters by; anything else is a
/// violation (and Bitbucket's `400`).
fn parse_bbql(q: &str) -> Result<Vec<Clause>, String> {
    let mut clauses = Vec::new();
    let mut rest = q.trim();
    loop {
        let (field, after) = rest
            .split_once(' ')
            .ok_or_else(|| format!("BBQL {q:?}: expected `field op \"value\"`"))?;
        let after = after.trim_start();
        let (op, after) = after
            .split_once(' ')
            .ok_or_else(|| format!("BBQL {q:?}: no operator"))?;
        if !["=", "!=", "~", "!~"].contains(&op) {
            return Err(format!("BBQL {q:?}: operator {op:?}"));
        }
        if !["source.branch.name", "destination.branch.name", "state"].contains(&field) {
            return Err(format!("BBQL {q:?}: field {field:?}"));
        }
        let after = after.trim_start();
        let mut chars = after.char_indices();
        if chars.next().map(|(_, c)| c) != Some('"') {
            return Err(format!("BBQL {q:?}: the value is not a quoted string"));
        }
        let mut value = String::new();
        let mut end = None;
        let mut escaped = false;
        for (i, c) in chars {
            if escaped {
                value.push(c);
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                end = Some(i);
                break;
            } else {
                value.push(c);
            }
        }
        let end = end.ok_or_else(|| format!("BBQL {q:?}: unterminated string"))?;
        clauses.push(Clause {
            field: field.to_string(),
            op: op.to_string(),
            value,
        });
        rest = after[end + 1..].trim_start();
        if rest.is_empty() {
            return Ok(clauses);
        }
        rest = rest
            .strip_prefix("AND ")
            .ok_or_else(|| format!("BBQL {q:?}: expected AND"))?
            .trim_start();
    }
}

fn matches_bbql(clauses: &[Clause], pull: &Pull) -> bool {
    clauses.iter().all(|c| {
        let field = match c.field.as_str() {
            "source.branch.name" => pull.source_branch.as_str(),
            "destination.branch.name" => pull.destination_branch.as_str(),
            _ => pull.state.word(),
        };
        let contains = field.to_lowercase().contains(&c.value.to_lowercase());
        match c.op.as_str() {
            "=" => field == c.value,
            "!=" => field != c.value,
            "~" => contains,
            _ => !contains,
        }
    })
}

fn list_pulls(req: &Req) -> Reply {
    refresh_pulls(req.inner);
    let pairs = query_pairs(req.query, LIST_PULLS, req.violate);
    let clauses = match param(&pairs, "q").map(parse_bbql).transpose() {
        Ok(c) => c.unwrap_or_default(),
        Err(problem) => {
            (req.violate)(problem);
            return error(StatusCode::BAD_REQUEST, "Invalid query");
        }
    };
    let states: Vec<&str> = pairs
        .iter()
        .filter(|(k, _)| k == "state")
        .map(|(_, v)| v.as_str())
        .collect();
    let states = if states.is_empty() {
        vec!["OPEN"]
    } else {
        states
    };
    let state = req.state();
    let mut pulls: Vec<&Pull> = state
        .pulls
        .iter()
        .filter(|p| p.repo == req.repo)
        .filter(|p| states.contains(&p.state.word()))
        .filter(|p| matches_bbql(&clauses, p))
        .collect();
    match param(&pairs, "sort") {
        None | Some("id") => pulls.sort_by_key(|p| p.id),
        Some("-id") => pulls.sort_by_key(|p| std::cmp::Reverse(p.id)),
        Some("updated_on") => pulls.sort_by_key(|p| (p.updated, p.id)),
        Some("-updated_on") => pulls.sort_by_key(|p| std::cmp::Reverse((p.updated, p.id))),
        Some("created_on") => pulls.sort_by_key(|p| (p.created, p.id)),
        Some("-created_on") => pulls.sort_by_key(|p| std::cmp::Reverse((p.created, p.id))),
        Some(other) => {
            (req.violate)(format!("sort={other:?} is no field of a pull request"));
            return error(StatusCode::BAD_REQUEST, "Invalid sort");
        }
    }
    let items: Vec<Value> = pulls.iter().map(|p| pull_json(&state, p)).collect();
    drop(state);
    paged(req, &pairs, items, MAX_PULL_PAGELEN)
}

fn get_pull(req: &Req, id: u64) -> Reply {
    refresh_pulls(req.inner);
    query_pairs(req.query, FIELDS_ONLY, req.violate);
    let state = req.state();
    match state
        .pulls
        .iter()
        .find(|p| p.repo == req.repo && p.id == id)
    {
        Some(pull) => Reply::json(StatusCode::OK, pull_json(&state, pull)),
        None => error(StatusCode::NOT_FOUND, "Resource not found"),
    }
}

/// `source` or `destination` as a client writes it: `{branch: {name}}`.
fn branch_of(
    object: &serde_json::Map<String, Value>,
    field: &str,
    violate: &dyn Fn(String),
) -> Option<String> {
    let endpoint = object.get(field)?;
    let name = endpoint
        .get("branch")
        .and_then(|b| b.get("name"))
        .and_then(Value::as_str);
    if let Some(extra) = endpoint.as_object().and_then(|o| {
        o.keys()
            .find(|k| !["branch", "commit", "repository"].contains(&k.as_str()))
    }) {
        violate(format!("{field}.{extra} is not in PullrequestEndpoint"));
    }
    name.map(str::to_string)
}

fn create_pull(req: &Req) -> Reply {
    query_pairs(req.query, &[], req.violate);
    let object = match body_object(req.body, PULL_FIELDS, req.violate) {
        Ok(o) => o,
        Err(reply) => return reply,
    };
    let Some(title) = str_field(&object, "title").filter(|t| !t.is_empty()) else {
        return error(StatusCode::BAD_REQUEST, "title: This field is required.");
    };
    let Some(source) = branch_of(&object, "source", req.violate) else {
        return error(StatusCode::BAD_REQUEST, "source: This field is required.");
    };
    // Without a destination, the repository's main branch.
    let destination =
        branch_of(&object, "destination", req.violate).unwrap_or_else(|| "main".to_string());
    let description = str_field(&object, "description")
        .map(str::to_string)
        .or_else(|| {
            object
                .get("summary")
                .and_then(|s| s.get("raw"))
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .unwrap_or_default();
    let dir = req.git_dir();
    let Some(sha) = git_out(
        &dir,
        &["rev-parse", "--verify", "--quiet", &branch_ref(&source)],
    ) else {
        return error(
            StatusCode::BAD_REQUEST,
            &format!("source branch {source} not found"),
        );
    };
    if git_out(
        &dir,
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            &branch_ref(&destination),
        ],
    )
    .is_none()
    {
        return error(
            StatusCode::BAD_REQUEST,
            &format!("destination branch {destination} not found"),
        );
    }
    let mut state = req.state();
    if state.pulls.iter().any(|p| {
        p.repo == req.repo
            && !p.fork
            && p.state == PrState::Open
            && p.source_branch == source
            && p.destination_branch == destination
    }) {
        return error(
            StatusCode::BAD_REQUEST,
            "There is already an open pull request from this source to this destination.",
        );
    }
    let id = insert_pull(
        &mut state,
        req.repo,
        req.repo,
        &source,
        &sha,
        &destination,
        title,
        &description,
        req.nickname,
    );
    let close = object
        .get("close_source_branch")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    state.pull_mut(req.repo, id).close_source_branch = close;
    let pull = state.pull_mut(req.repo, id).clone();
    Reply::json(StatusCode::CREATED, pull_json(&state, &pull))
}

fn edit_pull(req: &Req, id: u64) -> Reply {
    query_pairs(req.query, &[], req.violate);
    let object = match body_object(req.body, PULL_FIELDS, req.violate) {
        Ok(o) => o,
        Err(reply) => return reply,
    };
    if object.contains_key("source") {
        (req.violate)("the source of a pull request cannot change".into());
    }
    let mut state = req.state();
    let now = state.now();
    let Some(pull) = state
        .pulls
        .iter_mut()
        .find(|p| p.repo == req.repo && p.id == id)
    else {
        return error(StatusCode::NOT_FOUND, "Resource not found");
    };
    if pull.state != PrState::Open {
        return error(
            StatusCode::BAD_REQUEST,
            "Only open pull requests can be updated",
        );
    }
    if let Some(title) = str_field(&object, "title") {
        if title.is_empty() {
            return error(StatusCode::BAD_REQUEST, "title: This field is required.");
        }
        pull.title = title.to_string();
    }
    if let Some(description) = str_field(&object, "description") {
        pull.description = description.to_string();
    }
    pull.updated = now;
    let pull = pull.clone();
    Reply::json(StatusCode::OK, pull_json(&state, &pull))
}

fn pull_exists(req: &Req, id: u64) -> bool {
    req.state()
        .pulls
        .iter()
        .any(|p| p.repo == req.repo && p.id == id)
}

fn list_comments(req: &Req, id: u64) -> Reply {
    let pairs = query_pairs(req.query, PAGED, req.violate);
    if !pull_exists(req, id) {
        return error(StatusCode::NOT_FOUND, "Resource not found");
    }
    let state = req.state();
    let items: Vec<Value> = state
        .comments
        .iter()
        .filter(|c| c.repo == req.repo && c.pull == id)
        .map(|c| comment_json(&state, c))
        .collect();
    drop(state);
    paged(req, &pairs, items, MAX_PAGELEN)
}

fn comment_raw(req: &Req) -> Result<String, Reply> {
    let object = body_object(req.body, COMMENT_FIELDS, req.violate)?;
    let content = object.get("content").and_then(Value::as_object);
    if let Some(extra) = content.and_then(|c| c.keys().find(|k| k.as_str() != "raw")) {
        (req.violate)(format!(
            "content.{extra} is not written by clients (raw is)"
        ));
    }
    match content.and_then(|c| c.get("raw")).and_then(Value::as_str) {
        Some(raw) if !raw.is_empty() => Ok(raw.to_string()),
        _ => Err(error(
            StatusCode::BAD_REQUEST,
            "content.raw: This field is required.",
        )),
    }
}

fn create_comment(req: &Req, id: u64) -> Reply {
    query_pairs(req.query, &[], req.violate);
    let raw = match comment_raw(req) {
        Ok(raw) => raw,
        Err(reply) => return reply,
    };
    if !pull_exists(req, id) {
        return error(StatusCode::NOT_FOUND, "Resource not found");
    }
    let mut state = req.state();
    let cid = add_comment(&mut state, req.repo, id, req.nickname, &raw);
    let comment = state.comments.iter().find(|c| c.id == cid).expect("added");
    Reply::json(StatusCode::CREATED, comment_json(&state, comment))
}

/// `PUT …/comments/{id}`: only the comment's author may edit it.
fn edit_comment(req: &Req, id: u64, cid: u64) -> Reply {
    query_pairs(req.query, &[], req.violate);
    let raw = match comment_raw(req) {
        Ok(raw) => raw,
        Err(reply) => return reply,
    };
    let mut state = req.state();
    let now = state.now();
    let Some(comment) = state
        .comments
        .iter_mut()
        .find(|c| c.id == cid && c.repo == req.repo && c.pull == id)
    else {
        return error(StatusCode::NOT_FOUND, "Resource not found");
    };
    if comment.user != req.nickname {
        return error(StatusCode::FORBIDDEN, "You can only edit your own comments");
    }
    comment.raw = raw;
    comment.updated = now;
    let comment = comment.clone();
    Reply::json(StatusCode::OK, comment_json(&state, &comment))
}

fn get_commit(req: &Req, hash: &str) -> Reply {
    query_pairs(req.query, FIELDS_ONLY, req.violate);
    match resolve_hash(&req.git_dir(), hash) {
        Some(full) => Reply::json(
            StatusCode::OK,
            json!({"type": "commit", "hash": full, "date": time(req.state().now()),
                   "message": "", "parents": [],
                   "links": {"html": {"href": format!("{WEB_URL}/commits/{full}")}}}),
        ),
        None => error(StatusCode::NOT_FOUND, &format!("Commit not found: {hash}")),
    }
}

fn full_commit(req: &Req, sha: &str) -> bool {
    sha.len() == 40 && resolve_hash(&req.git_dir(), sha).as_deref() == Some(sha)
}

fn create_status(req: &Req, sha: &str) -> Reply {
    query_pairs(req.query, &[], req.violate);
    let object = match body_object(req.body, STATUS_FIELDS, req.violate) {
        Ok(o) => o,
        Err(reply) => return reply,
    };
    let key = str_field(&object, "key").unwrap_or_default();
    let state_word = str_field(&object, "state").unwrap_or_default();
    let url = str_field(&object, "url").unwrap_or_default();
    if key.is_empty() || key.chars().count() > MAX_KEY {
        (req.violate)(format!("key {key:?} is not 1 to {MAX_KEY} characters"));
        return error(
            StatusCode::BAD_REQUEST,
            "key: Ensure this value has at most 40 characters",
        );
    }
    if !STATUS_STATES.contains(&state_word) {
        (req.violate)(format!("state {state_word:?} is none of {STATUS_STATES:?}"));
        return error(StatusCode::BAD_REQUEST, "state: invalid choice");
    }
    if url::Url::parse(url).is_err() {
        (req.violate)(format!("url {url:?} is not a URL"));
        return error(StatusCode::BAD_REQUEST, "url: Enter a valid URL.");
    }
    if !full_commit(req, sha) {
        return error(StatusCode::NOT_FOUND, &format!("Commit not found: {sha}"));
    }
    let mut state = req.state();
    let now = state.now();
    let repo = req.repo;
    let name = str_field(&object, "name").unwrap_or(key).to_string();
    let description = str_field(&object, "description")
        .unwrap_or_default()
        .to_string();
    let existing = state
        .statuses
        .iter_mut()
        .find(|s| s.repo == repo && s.sha == sha && s.key == key);
    let status = match existing {
        Some(s) => {
            s.state = state_word.to_string();
            s.name = name;
            s.description = description;
            s.url = url.to_string();
            s.updated = now;
            s.poster = req.nickname.to_string();
            s.clone()
        }
        None => {
            let s = BuildStatus {
                repo,
                sha: sha.to_string(),
                key: key.to_string(),
                state: state_word.to_string(),
                name,
                description,
                url: url.to_string(),
                created: now,
                updated: now,
                poster: req.nickname.to_string(),
            };
            state.statuses.push(s.clone());
            s
        }
    };
    Reply::json(StatusCode::CREATED, status_json(&status))
}

fn list_statuses(req: &Req, sha: &str) -> Reply {
    let pairs = query_pairs(req.query, PAGED, req.violate);
    if param(&pairs, "q").is_some() {
        (req.violate)("q on statuses: this server reads no BBQL for statuses".into());
    }
    if resolve_hash(&req.git_dir(), sha).is_none() {
        return error(StatusCode::NOT_FOUND, &format!("Commit not found: {sha}"));
    }
    let state = req.state();
    let items: Vec<Value> = state
        .statuses
        .iter()
        .filter(|s| s.repo == req.repo && s.sha.starts_with(sha))
        .map(status_json)
        .collect();
    drop(state);
    paged(req, &pairs, items, MAX_PAGELEN)
}
