//! A local Bitbucket Data Center REST API server for integration tests.
//!
//! tagpin opens and updates pull requests, keeps one verdict comment and posts build statuses
//! on Bitbucket Data Center (formerly Bitbucket Server) as it does on GitHub. No real Bitbucket
//! is reachable from the test machines, so this module serves the operations tagpin calls,
//! with in-memory state, on a loopback port, under a context path ([`CONTEXT_PATH`], as an
//! instance behind `https://HOST/bitbucket` has one) and `/rest/api/1.0` (or `latest`).
//!
//! Its facts are Atlassian's Data Center REST reference (8.x, 9.x) as the npm package
//! `@coderabbitai/bitbucket` 1.1.4 ships it, typed, in
//! `dist/server/openapi/openapi-typescript.d.ts`, and the routes of the PyPI package
//! `atlassian-python-api` 5.0.5 (`atlassian/bitbucket/__init__.py`):
//! - Answers carry the reference's shapes (`RestPullRequest` with `fromRef`/`toRef`, `version`,
//!   `properties.mergeCommit` once merged, `links.self`; `RestComment` with `version` and
//!   `author`; `RestPullRequestActivity`; `RestBuildStatus`, which has no author), and every
//!   list is a page `{size, limit, isLastPage, start, values, nextPageStart}`. Times are
//!   milliseconds. Errors are `{"errors": [{context, message, exceptionName}]}`.
//! - Every request is checked: the token only in `Authorization: Bearer …` (one in the URL is
//!   a violation), the route must be Data Center's, query parameters must be declared for the
//!   route with their declared values, JSON bodies must be objects of the declared fields with
//!   their types (`RestPullRequest` for create and update, `RestComment`,
//!   `RestBuildStatusSetRequest`). Bitbucket ignores an undeclared field, so one would go
//!   unnoticed there: here it is a [`Violation`], and `Drop` fails the test unless it took them
//!   with [`BitbucketDcServer::take_violations`]. Missing required fields are answered `400`.
//! - Data Center's rules: one open pull request per source and target branch (`409`
//!   `DuplicatePullRequestException`), an update or comment edit must carry the current
//!   `version` (`409` `PullRequestOutOfDateException` / `CommentOutOfDateException`), only a
//!   comment's author may change its text (`403`), a build status needs `key`, `state` and
//!   `url` and replaces the one of the same key on that commit (its `updatedDate` the poster's
//!   `lastUpdated` when given, the server's clock otherwise), a read-only token cannot write
//!   pull requests or comments (`403`) but may post build statuses (REPO_READ suffices), a
//!   repository hidden from the token is `404`. Every authenticated answer names the user in
//!   `X-AUSERNAME`.
//! - Lists are paged with `start` and `limit` (25 by default, at most [`BitbucketDcServer::set_page_max`],
//!   Data Center's `page.max.*`). Pull requests are listed by `at` (a fully-qualified ref) and
//!   `direction` (`INCOMING`: `at` is the target; `OUTGOING`: the source, from this
//!   repository), `state` and `order` (`NEWEST`: last updated first).
//! - Branches, commits and merges are real: the repository is a bare Git repository; an open
//!   pull request's source follows its branch (a new `version` each time), and a person
//!   merging ([`BitbucketDcServer::merge_pull_as`]) makes Bitbucket's merge commit.
//!
//! Test support panics with a clear message instead of returning errors.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use axum::body::Body;
use axum::extract::{Request, State as AxumState};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::Response;
use axum::Router;
use serde_json::{json, Value};
use tokio::task::JoinHandle;

use super::http_fake::{self, fault_status, percent_decode, set_headers};

/// The instance's context path: it is served at `http://HOST/bitbucket`.
pub const CONTEXT_PATH: &str = "/bitbucket";
/// Data Center's public address (`server.base-url`), where it writes `links`. Not this
/// server's: nothing answers there.
pub const BASE_URL: &str = "https://bitbucket.example.com";
/// Data Center's default page size.
pub const DEFAULT_LIMIT: usize = 25;

const FIRST_REPO_ID: u64 = 10;
const FIRST_USER_ID: u64 = 500;
const FIRST_COMMENT_ID: u64 = 3_000;

// ---------------------------------------------------------------------------
// Public types
// ---------------------------------------------------------------------------

/// What a token's user may do to a repository, in Data Center's permissions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Permission {
    /// `REPO_READ`.
    Read,
    /// `REPO_WRITE`.
    Write,
}

/// A pull request as the server holds it.
#[derive(Clone, Debug)]
pub struct Pull {
    pub id: u64,
    pub version: i64,
    pub repo_id: u64,
    pub title: String,
    pub description: String,
    /// `OPEN`, `MERGED` or `DECLINED`.
    pub state: String,
    pub merge_commit: Option<String>,
    pub from_branch: String,
    pub from_sha: String,
    /// The repository the source branch is in: a fork's id for a fork's pull request.
    pub from_repo_id: u64,
    pub to_branch: String,
    pub author: String,
    pub reviewers: Vec<String>,
    pub created: SystemTime,
    pub updated: SystemTime,
    pub closed: Option<SystemTime>,
}

impl Pull {
    pub fn open(&self) -> bool {
        self.state == "OPEN"
    }

    pub fn fork(&self) -> bool {
        self.from_repo_id != self.repo_id
    }
}

#[derive(Clone, Debug)]
pub struct Comment {
    pub id: u64,
    pub version: i64,
    pub repo_id: u64,
    pub pull: u64,
    pub text: String,
    pub author: String,
    pub created: SystemTime,
    pub updated: SystemTime,
}

/// A build status: one per repository, commit and key. Who posted it is kept for the tests;
/// Bitbucket does not answer it.
#[derive(Clone, Debug)]
pub struct BuildStatus {
    pub repo_id: u64,
    pub sha: String,
    pub key: String,
    pub state: String,
    pub name: String,
    pub url: String,
    pub description: String,
    pub build_number: String,
    pub posted_by: String,
    pub created: SystemTime,
    pub updated: SystemTime,
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

pub use http_fake::RecordedRequest;

// ---------------------------------------------------------------------------
// The server
// ---------------------------------------------------------------------------

/// A running fake Bitbucket Data Center instance. Stops when dropped.
pub struct BitbucketDcServer {
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

struct ServerState {
    users: BTreeMap<String, u64>,
    tokens: Vec<(String, String)>,
    repos: Vec<Repo>,
    pulls: Vec<Pull>,
    comments: Vec<Comment>,
    statuses: Vec<BuildStatus>,
    requests: Vec<RecordedRequest>,
    violations: Vec<Violation>,
    faults: Vec<Fault>,
    /// `page.max.*`: the most items a page holds, whatever `limit` asks.
    page_max: usize,
    /// A pull request's `version` moves on by this before the next update is read (a person
    /// editing it between tagpin's read and write), once per call of
    /// [`BitbucketDcServer::edit_between_read_and_write`].
    bump_on_put: usize,
    /// Whether answers carry `X-AUSERNAME` (a proxy in front may drop it).
    user_header: bool,
    /// The server's clock, for build status times and `Date`
    /// ([`BitbucketDcServer::turn_back_clock`]).
    clock: Arc<http_fake::Clock>,
}

struct Repo {
    id: u64,
    project: String,
    slug: String,
    git_dir: PathBuf,
    fork_of: Option<u64>,
    access: BTreeMap<String, Permission>,
    last_pull: u64,
}

impl ServerState {
    fn ensure_user(&mut self, name: &str) -> u64 {
        let next = FIRST_USER_ID + self.users.len() as u64;
        *self.users.entry(name.to_string()).or_insert(next)
    }

    fn repo(&self, id: u64) -> &Repo {
        self.repos.iter().find(|r| r.id == id).expect("repo id")
    }

    fn repo_by_name(&self, project: &str, slug: &str) -> Option<&Repo> {
        self.repos
            .iter()
            .find(|r| r.project.eq_ignore_ascii_case(project) && r.slug == slug)
    }

    fn main_repo(&self) -> &Repo {
        self.repos.first().expect("the repository")
    }

    fn pull_mut(&mut self, repo_id: u64, id: u64) -> &mut Pull {
        self.pulls
            .iter_mut()
            .find(|p| p.repo_id == repo_id && p.id == id)
            .unwrap_or_else(|| panic!("no pull request #{id}"))
    }
}

impl BitbucketDcServer {
    /// Starts a server with user `user`, whose token `token` may write, and private repository
    /// `project`/`slug` backed by the bare repository `bare_repo`.
    pub async fn start(
        token: &str,
        user: &str,
        project: &str,
        slug: &str,
        bare_repo: &Path,
    ) -> BitbucketDcServer {
        let (listener, base) = http_fake::loopback("Bitbucket").await;
        let inner = Arc::new(Inner {
            base,
            state: Mutex::new(ServerState {
                users: BTreeMap::new(),
                tokens: Vec::new(),
                repos: Vec::new(),
                pulls: Vec::new(),
                comments: Vec::new(),
                statuses: Vec::new(),
                requests: Vec::new(),
                violations: Vec::new(),
                faults: Vec::new(),
                page_max: 1000,
                bump_on_put: 0,
                user_header: true,
                clock: Arc::default(),
            }),
        });
        let router = Router::new().fallback(handle).with_state(inner.clone());
        let task = http_fake::serve(listener, router, "Bitbucket");
        let server = BitbucketDcServer { inner, task };
        server.add_token(token, user);
        {
            let mut state = server.inner.lock();
            let mut access = BTreeMap::new();
            access.insert(user.to_string(), Permission::Write);
            state.repos.push(Repo {
                id: FIRST_REPO_ID,
                project: project.to_string(),
                slug: slug.to_string(),
                git_dir: bare_repo.to_path_buf(),
                fork_of: None,
                access,
                last_pull: 0,
            });
        }
        server
    }

    /// `http://127.0.0.1:PORT/bitbucket`: what `forge.api_url` names.
    pub fn api_url(&self) -> String {
        format!("{}{CONTEXT_PATH}", self.inner.base)
    }

    /// An HTTP access token of `user` (added if missing).
    pub fn add_token(&self, token: &str, user: &str) {
        let mut state = self.inner.lock();
        state.ensure_user(user);
        state.tokens.retain(|(t, _)| t != token);
        state.tokens.push((token.to_string(), user.to_string()));
    }

    /// Gives `user` `permission` on the repository.
    pub fn grant(&self, user: &str, permission: Permission) {
        let mut state = self.inner.lock();
        state.ensure_user(user);
        state.repos[0].access.insert(user.to_string(), permission);
    }

    /// Turns the server's clock back: the build status times it records from now on, and
    /// the `Date` it answers, are `by` earlier (a scene set in the past).
    pub fn turn_back_clock(&self, by: std::time::Duration) {
        self.inner.lock().clock.turn_back(by);
    }

    /// Moves the server's clock forward by `by`.
    pub fn advance_clock(&self, by: std::time::Duration) {
        self.inner.lock().clock.advance(by);
    }

    /// Data Center's `page.max.*`: pages hold at most `max` items.
    pub fn set_page_max(&self, max: usize) {
        self.inner.lock().page_max = max;
    }

    /// A person edits the next pull request tagpin updates between tagpin's read and its
    /// write: the version tagpin read is stale by then.
    pub fn edit_between_read_and_write(&self) {
        self.inner.lock().bump_on_put += 1;
    }

    /// Answers without `X-AUSERNAME`, as behind a proxy that drops it.
    pub fn drop_user_header(&self) {
        self.inner.lock().user_header = false;
    }

    /// Scripts a fault for the next matching requests, tried in the order added.
    pub fn inject(&self, fault: Fault) {
        self.inner.lock().faults.push(fault);
    }

    /// A person opens a pull request from `from` into `to` on Bitbucket's web page.
    pub fn open_pull_as(&self, user: &str, from: &str, to: &str, title: &str) -> u64 {
        let mut state = self.inner.lock();
        state.ensure_user(user);
        let repo = state.main_repo();
        let (repo_id, dir) = (repo.id, repo.git_dir.clone());
        let sha = git_out(&dir, &["rev-parse", &branch_ref(from)])
            .unwrap_or_else(|| panic!("no branch {from}"));
        insert_pull(
            &mut state, repo_id, repo_id, from, &sha, to, title, "", user,
        )
    }

    /// `user` forks the repository into their personal project `~USER` and opens a pull
    /// request from the fork's branch `from` (at `sha`, a commit of the repository) into `to`.
    #[allow(clippy::too_many_arguments)]
    pub fn open_fork_pull_as(
        &self,
        user: &str,
        from: &str,
        sha: &str,
        to: &str,
        title: &str,
        description: &str,
    ) -> u64 {
        let mut state = self.inner.lock();
        state.ensure_user(user);
        let upstream = state.main_repo();
        let (upstream_id, slug, dir) =
            (upstream.id, upstream.slug.clone(), upstream.git_dir.clone());
        let fork_id = FIRST_REPO_ID + state.repos.len() as u64;
        let mut access = BTreeMap::new();
        access.insert(user.to_string(), Permission::Write);
        state.repos.push(Repo {
            id: fork_id,
            project: format!("~{}", user.to_ascii_uppercase()),
            slug,
            git_dir: dir,
            fork_of: Some(upstream_id),
            access,
            last_pull: 0,
        });
        state.repos[0]
            .access
            .entry(user.to_string())
            .or_insert(Permission::Read);
        insert_pull(
            &mut state,
            upstream_id,
            fork_id,
            from,
            sha,
            to,
            title,
            description,
            user,
        )
    }

    /// A person declines pull request `id`.
    pub fn decline_pull_as(&self, user: &str, id: u64) {
        let now = SystemTime::now();
        let mut state = self.inner.lock();
        state.ensure_user(user);
        let repo_id = state.main_repo().id;
        let pull = state.pull_mut(repo_id, id);
        assert!(pull.open(), "#{id} is not open");
        pull.state = "DECLINED".into();
        pull.version += 1;
        pull.closed = Some(now);
        pull.updated = now;
    }

    /// A person presses "Merge" (the merge-commit strategy) on pull request `id`: Bitbucket's
    /// merge commit is made in the bare repository and the target branch moves to it.
    /// Returns the merge commit.
    pub fn merge_pull_as(&self, user: &str, id: u64) -> String {
        refresh_pulls(&self.inner);
        let (pull, git_dir) = {
            let mut state = self.inner.lock();
            state.ensure_user(user);
            let repo_id = state.main_repo().id;
            let pull = state.pull_mut(repo_id, id).clone();
            (pull, state.main_repo().git_dir.clone())
        };
        assert!(pull.open(), "#{id} is not open");
        let target = git_out(&git_dir, &["rev-parse", &branch_ref(&pull.to_branch)])
            .unwrap_or_else(|| panic!("target branch {} is gone", pull.to_branch));
        let tree = git_out(
            &git_dir,
            &["merge-tree", "--write-tree", &target, &pull.from_sha],
        )
        .unwrap_or_else(|| panic!("#{id} has conflicts with {}", pull.to_branch));
        let tree = tree.lines().next().unwrap_or_default().to_string();
        let message = format!(
            "Merge pull request #{id} in {}/{} from {} to {}",
            "ACME", "gitops", pull.from_branch, pull.to_branch
        );
        let email = format!("{user}@bitbucket.example.com");
        let mut command = super::git::git_command();
        command
            .current_dir(&git_dir)
            .args([
                "commit-tree",
                &tree,
                "-m",
                &message,
                "-p",
                &target,
                "-p",
                &pull.from_sha,
            ])
            .env("GIT_AUTHOR_NAME", user)
            .env("GIT_AUTHOR_EMAIL", &email)
            .env("GIT_COMMITTER_NAME", user)
            .env("GIT_COMMITTER_EMAIL", &email);
        let output = command.output().expect("run git commit-tree");
        assert!(output.status.success(), "git commit-tree failed");
        let merge = String::from_utf8_lossy(&output.stdout).trim().to_string();
        assert!(
            git_out(
                &git_dir,
                &["update-ref", &branch_ref(&pull.to_branch), &merge, &target]
            )
            .is_some(),
            "move {} to {merge}",
            pull.to_branch
        );
        let now = SystemTime::now();
        let mut state = self.inner.lock();
        let p = state.pull_mut(pull.repo_id, id);
        p.state = "MERGED".into();
        p.version += 1;
        p.merge_commit = Some(merge.clone());
        p.closed = Some(now);
        p.updated = now;
        merge
    }

    /// A person writes a comment on pull request `id`.
    pub fn comment_as(&self, user: &str, id: u64, text: &str) -> u64 {
        let mut state = self.inner.lock();
        state.ensure_user(user);
        let repo_id = state.main_repo().id;
        add_comment(&mut state, repo_id, id, user, text)
    }

    /// Comment `id` is edited by its author elsewhere (another tagpin replica, with the same
    /// token): new text, a new version.
    pub fn rewrite_comment(&self, id: u64, text: &str) {
        let mut state = self.inner.lock();
        let comment = state
            .comments
            .iter_mut()
            .find(|c| c.id == id)
            .unwrap_or_else(|| panic!("no comment {id}"));
        comment.text = text.to_string();
        comment.version += 1;
        comment.updated = SystemTime::now();
    }

    /// Every pull request of the repository, by id.
    pub fn pulls(&self) -> Vec<Pull> {
        refresh_pulls(&self.inner);
        let state = self.inner.lock();
        let repo_id = state.main_repo().id;
        let mut pulls: Vec<Pull> = state
            .pulls
            .iter()
            .filter(|p| p.repo_id == repo_id)
            .cloned()
            .collect();
        pulls.sort_by_key(|p| p.id);
        pulls
    }

    /// The comments on pull request `id`, oldest first.
    pub fn comments(&self, id: u64) -> Vec<Comment> {
        let state = self.inner.lock();
        let repo_id = state.main_repo().id;
        state
            .comments
            .iter()
            .filter(|c| c.repo_id == repo_id && c.pull == id)
            .cloned()
            .collect()
    }

    /// The build statuses on `sha`, oldest first (one per key).
    pub fn statuses(&self, sha: &str) -> Vec<BuildStatus> {
        let state = self.inner.lock();
        let mut statuses: Vec<BuildStatus> = state
            .statuses
            .iter()
            .filter(|s| s.sha == sha)
            .cloned()
            .collect();
        statuses.sort_by_key(|s| s.updated);
        statuses
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

impl Drop for BitbucketDcServer {
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
    repo_id: u64,
    from_repo_id: u64,
    from: &str,
    sha: &str,
    to: &str,
    title: &str,
    description: &str,
    author: &str,
) -> u64 {
    let now = SystemTime::now();
    let repo = state
        .repos
        .iter_mut()
        .find(|r| r.id == repo_id)
        .expect("repo");
    repo.last_pull += 1;
    let id = repo.last_pull;
    state.pulls.push(Pull {
        id,
        version: 0,
        repo_id,
        title: title.to_string(),
        description: description.to_string(),
        state: "OPEN".into(),
        merge_commit: None,
        from_branch: from.to_string(),
        from_sha: sha.to_string(),
        from_repo_id,
        to_branch: to.to_string(),
        author: author.to_string(),
        reviewers: Vec::new(),
        created: now,
        updated: now,
        closed: None,
    });
    id
}

fn add_comment(state: &mut ServerState, repo_id: u64, pull: u64, user: &str, text: &str) -> u64 {
    let now = SystemTime::now();
    let id = FIRST_COMMENT_ID + state.comments.len() as u64;
    state.comments.push(Comment {
        id,
        version: 0,
        repo_id,
        pull,
        text: text.to_string(),
        author: user.to_string(),
        created: now,
        updated: now,
    });
    if let Some(p) = state
        .pulls
        .iter_mut()
        .find(|p| p.repo_id == repo_id && p.id == pull)
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

/// Open pull requests' sources follow their branches (a fork's stays where it was opened);
/// each move is a new version, as Bitbucket's rescope makes one.
fn refresh_pulls(inner: &Inner) {
    let open: Vec<(u64, String, PathBuf)> = {
        let state = inner.lock();
        state
            .pulls
            .iter()
            .filter(|p| p.open() && !p.fork())
            .map(|p| {
                (
                    p.id,
                    p.from_branch.clone(),
                    state.repo(p.repo_id).git_dir.clone(),
                )
            })
            .collect()
    };
    for (id, branch, dir) in open {
        if let Some(sha) = git_out(
            &dir,
            &["rev-parse", "--verify", "--quiet", &branch_ref(&branch)],
        ) {
            let mut state = inner.lock();
            let repo_id = state.main_repo().id;
            let pull = state.pull_mut(repo_id, id);
            if pull.from_sha != sha {
                pull.from_sha = sha;
                pull.version += 1;
                pull.updated = SystemTime::now();
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Declared parameters and bodies (the REST reference)
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq)]
enum Type {
    Str,
    Int,
    Bool,
    Object,
    List,
}

/// A body field: name, type, required.
type Field = (&'static str, Type, bool);

/// `RestPullRequest` as `POST` reads it.
const CREATE_PULL: &[Field] = &[
    ("title", Type::Str, true),
    ("description", Type::Str, false),
    ("draft", Type::Bool, false),
    ("fromRef", Type::Object, true),
    ("toRef", Type::Object, true),
    ("reviewers", Type::List, false),
    ("state", Type::Str, false),
    ("open", Type::Bool, false),
    ("closed", Type::Bool, false),
    ("locked", Type::Bool, false),
];
/// `RestPullRequest` as `PUT` reads it: `version` is required.
const EDIT_PULL: &[Field] = &[
    ("version", Type::Int, true),
    ("title", Type::Str, false),
    ("description", Type::Str, false),
    ("draft", Type::Bool, false),
    ("reviewers", Type::List, false),
    ("toRef", Type::Object, false),
];
/// `RestComment`, as a new general comment.
const NEW_COMMENT: &[Field] = &[
    ("text", Type::Str, true),
    ("parent", Type::Object, false),
    ("severity", Type::Str, false),
    ("state", Type::Str, false),
];
/// `RestComment`, as an edit: `version` is required.
const EDIT_COMMENT: &[Field] = &[
    ("text", Type::Str, false),
    ("version", Type::Int, true),
    ("severity", Type::Str, false),
    ("state", Type::Str, false),
];
/// `RestBuildStatusSetRequest`.
const SET_BUILD_STATUS: &[Field] = &[
    ("key", Type::Str, true),
    ("state", Type::Str, true),
    ("url", Type::Str, true),
    ("buildNumber", Type::Str, false),
    ("description", Type::Str, false),
    ("duration", Type::Int, false),
    ("lastUpdated", Type::Int, false),
    ("name", Type::Str, false),
    ("parent", Type::Str, false),
    ("ref", Type::Str, false),
    ("testResults", Type::Object, false),
];
const BUILD_STATES: [&str; 5] = ["CANCELLED", "FAILED", "INPROGRESS", "SUCCESSFUL", "UNKNOWN"];

/// Query parameters a route declares, with their values where the reference lists them.
type Param = (&'static str, &'static [&'static str]);
const LIST_PULLS: &[Param] = &[
    ("at", &[]),
    ("direction", &["INCOMING", "OUTGOING"]),
    ("draft", &[]),
    ("filterText", &[]),
    ("order", &["NEWEST", "OLDEST"]),
    ("state", &["ALL", "OPEN", "DECLINED", "MERGED"]),
    ("withAttributes", &["true", "false"]),
    ("withProperties", &["true", "false"]),
    ("start", &[]),
    ("limit", &[]),
];
const ACTIVITIES: &[Param] = &[
    ("fromId", &[]),
    ("fromType", &["COMMENT", "ACTIVITY"]),
    ("start", &[]),
    ("limit", &[]),
];
const GET_BUILD: &[Param] = &[("key", &[])];

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

    fn empty(status: StatusCode) -> Reply {
        Reply {
            status,
            body: String::new(),
            headers: Vec::new(),
        }
    }
}

/// Data Center's error answer.
fn error(status: StatusCode, exception: &str, message: &str) -> Reply {
    Reply::json(
        status,
        json!({"errors": [{"context": null, "message": message,
                           "exceptionName": format!("com.atlassian.bitbucket.{exception}")}]}),
    )
}

fn not_found(message: &str) -> Reply {
    error(StatusCode::NOT_FOUND, "NoSuchEntityException", message)
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
                "ServerException",
                &format!("the test server panicked: {panic}"),
            )
        });
    let mut response = Response::new(Body::from(reply.body));
    *response.status_mut() = reply.status;
    let headers = response.headers_mut();
    set_headers(
        headers,
        [("content-type", "application/json;charset=UTF-8")],
    );
    let clock = inner.lock().clock.clone();
    clock.date(headers);
    set_headers(
        headers,
        reply.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())),
    );
    response
}

fn answer(inner: &Arc<Inner>, parts: &axum::http::request::Parts, body: &str) -> Reply {
    let method = parts.method.clone();
    let path = parts.uri.path().to_string();
    let query = parts.uri.query().map(str::to_string);
    let violate = |problem: String| {
        inner.lock().violations.push(Violation {
            method: method.to_string(),
            path: path.clone(),
            problem,
        });
    };
    let token = presented_token(&parts.headers, &violate);
    let user = token.as_ref().and_then(|token| {
        inner
            .lock()
            .tokens
            .iter()
            .find(|(t, _)| t == token)
            .map(|(_, user)| user.clone())
    });
    let index = http_fake::record(
        &mut inner.lock().requests,
        method.as_str(),
        &path,
        query.as_deref(),
        body,
        user.clone(),
    );
    let in_url = query.as_deref().is_some_and(|q| {
        url::form_urlencoded::parse(q.as_bytes())
            .any(|(k, _)| k == "token" || k == "access_token" || k == "os_password")
    });
    if in_url {
        violate("a token in the URL (it is logged by proxies and Bitbucket's access log)".into());
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
    let mut reply = match fault {
        Some(fault) => Reply {
            status: fault_status(fault.status),
            body: fault
                .body
                .unwrap_or_else(|| {
                    json!({"errors": [{"context": null,
                        "message": http_fake::canonical_reason(fault.status), "exceptionName": null}]})
                })
                .to_string(),
            headers: fault.headers,
        },
        None => dispatch(
            inner,
            &method,
            &path,
            query.as_deref(),
            body,
            user.as_deref(),
            &violate,
        ),
    };
    if let Some(user) = user.as_ref().filter(|_| inner.lock().user_header) {
        reply.headers.push(("X-AUSERNAME".into(), user.clone()));
    }
    inner.lock().requests[index].status = reply.status.as_u16();
    reply
}

/// The token of `Authorization: Bearer …`; Basic authentication with a token as the password
/// works on Bitbucket, but tagpin sends Bearer, so another scheme is a violation.
fn presented_token(headers: &HeaderMap, violate: &dyn Fn(String)) -> Option<String> {
    let value = headers.get("authorization")?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        violate(format!("Authorization scheme {scheme:?}, not Bearer"));
        return None;
    }
    Some(token.trim().to_string())
}

/// The query's pairs, checked against `declared`.
fn query_pairs(
    query: Option<&str>,
    declared: &[Param],
    violate: &dyn Fn(String),
) -> Vec<(String, String)> {
    let pairs: Vec<(String, String)> = url::form_urlencoded::parse(query.unwrap_or("").as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    for (key, value) in &pairs {
        match declared.iter().find(|(name, _)| name == key) {
            None => violate(format!(
                "query parameter {key:?} is not declared for this route"
            )),
            Some((_, values)) if !values.is_empty() && !values.contains(&value.as_str()) => {
                violate(format!("{key}={value:?} is none of {values:?}"))
            }
            Some(_) if matches!(key.as_str(), "start" | "limit") => {
                if value.parse::<u64>().is_err() || (key == "limit" && value == "0") {
                    violate(format!(
                        "{key}={value:?} is not a number Bitbucket pages by"
                    ));
                }
            }
            Some(_) => {}
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

/// The JSON body as an object of `declared` fields, or Bitbucket's `400` refusing it.
fn body_object(
    body: &str,
    declared: &[Field],
    violate: &dyn Fn(String),
) -> Result<serde_json::Map<String, Value>, Reply> {
    let invalid = |message: &str| {
        error(
            StatusCode::BAD_REQUEST,
            "validation.ArgumentValidationException",
            message,
        )
    };
    let value: Value = serde_json::from_str(body).map_err(|_| {
        violate("the body is not JSON".into());
        invalid("The request body could not be read")
    })?;
    let Value::Object(object) = value else {
        violate("the body is not a JSON object".into());
        return Err(invalid("The request body could not be read"));
    };
    for (key, value) in &object {
        let Some((_, kind, _)) = declared.iter().find(|(name, ..)| name == key) else {
            violate(format!(
                "field {key:?} is not declared by Bitbucket's schema for this route"
            ));
            continue;
        };
        let ok = match kind {
            Type::Str => value.is_string(),
            Type::Int => value.is_i64() || value.is_u64(),
            Type::Bool => value.is_boolean(),
            Type::Object => value.is_object(),
            Type::List => value.is_array(),
        };
        if !ok {
            violate(format!("field {key:?} has the wrong type: {value}"));
            return Err(invalid(&format!("{key} is of the wrong type")));
        }
    }
    for (name, _, required) in declared {
        let empty = match object.get(*name) {
            None | Some(Value::Null) => true,
            Some(Value::String(s)) => s.is_empty(),
            _ => false,
        };
        if *required && empty {
            return Err(invalid(&format!("{name} is required")));
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
    user: Option<&str>,
    violate: &dyn Fn(String),
) -> Reply {
    let Some(rest) = path.strip_prefix(CONTEXT_PATH) else {
        violate(format!("not under the context path {CONTEXT_PATH}"));
        return not_found("Not Found");
    };
    let rest = match rest
        .strip_prefix("/rest/api/1.0/")
        .or_else(|| rest.strip_prefix("/rest/api/latest/"))
    {
        Some(rest) => rest,
        None => {
            violate("not under /rest/api/1.0 or /rest/api/latest".into());
            return not_found("Not Found");
        }
    };
    let segments: Vec<String> = rest.split('/').map(percent_decode).collect();
    let segs: Vec<&str> = segments.iter().map(String::as_str).collect();
    let Some(user) = user else {
        return error(
            StatusCode::UNAUTHORIZED,
            "AuthorisationException",
            "Authentication failed. Please check your credentials and try again.",
        );
    };
    let ["projects", project, "repos", slug, route @ ..] = segs.as_slice() else {
        violate("a route Bitbucket does not have".into());
        return not_found("Not Found");
    };
    let (repo_id, permission) = {
        let state = inner.lock();
        match state.repo_by_name(project, slug) {
            Some(repo) => (repo.id, repo.access.get(user).copied()),
            None => return not_found(&format!("Project {project} does not exist.")),
        }
    };
    // A private repository is hidden from whoever has no access to it.
    let Some(permission) = permission else {
        return error(
            StatusCode::NOT_FOUND,
            "repository.NoSuchRepositoryException",
            &format!("Repository {project}/{slug} does not exist."),
        );
    };
    let m = method.as_str();
    // Storing a build status needs only REPO_READ; everything else written needs REPO_WRITE.
    let builds = matches!(route, ["commits", _, "builds"]);
    if m != "GET" && !builds && permission < Permission::Write {
        return error(
            StatusCode::FORBIDDEN,
            "AuthorisationException",
            "You are not permitted to access this resource",
        );
    }
    let req = Req {
        inner,
        repo_id,
        user,
        query,
        body,
        violate,
    };
    match (m, route) {
        ("GET", []) => {
            query_pairs(query, &[], violate);
            let state = inner.lock();
            Reply::json(StatusCode::OK, repo_json(&state, repo_id))
        }
        ("GET", ["pull-requests"]) => list_pulls(&req),
        ("POST", ["pull-requests"]) => create_pull(&req),
        ("GET", ["pull-requests", id]) => with_number(id, |id| get_pull(&req, id)),
        ("PUT", ["pull-requests", id]) => with_number(id, |id| edit_pull(&req, id)),
        ("GET", ["pull-requests", id, "activities"]) => {
            with_number(id, |id| list_activities(&req, id))
        }
        ("POST", ["pull-requests", id, "comments"]) => {
            with_number(id, |id| create_comment(&req, id))
        }
        ("GET" | "PUT", ["pull-requests", id, "comments", cid]) => with_number(id, |id| {
            with_number(cid, |cid| comment_by_id(&req, id, cid, m == "PUT"))
        }),
        ("POST", ["commits", sha, "builds"]) => set_build_status(&req, sha),
        ("GET", ["commits", sha, "builds"]) => get_build_status(&req, sha),
        _ => {
            violate("a route Bitbucket does not have".into());
            not_found("Not Found")
        }
    }
}

struct Req<'a> {
    inner: &'a Arc<Inner>,
    repo_id: u64,
    user: &'a str,
    query: Option<&'a str>,
    body: &'a str,
    violate: &'a dyn Fn(String),
}

impl Req<'_> {
    fn state(&self) -> MutexGuard<'_, ServerState> {
        self.inner.lock()
    }
}

fn with_number(text: &str, then: impl FnOnce(u64) -> Reply) -> Reply {
    match text.parse::<u64>() {
        Ok(n) => then(n),
        Err(_) => not_found("Not Found"),
    }
}

fn millis(at: SystemTime) -> u64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn user_json(state: &ServerState, name: &str) -> Value {
    let id = state.users.get(name).copied().unwrap_or(0);
    json!({
        "name": name, "emailAddress": format!("{name}@bitbucket.example.com"), "active": true,
        "displayName": name, "id": id, "slug": name.to_ascii_lowercase(), "type": "NORMAL",
        "links": {"self": [{"href": format!("{BASE_URL}/users/{}", name.to_ascii_lowercase())}]}
    })
}

fn repo_json(state: &ServerState, repo_id: u64) -> Value {
    let repo = state.repo(repo_id);
    let personal = repo.project.starts_with('~');
    json!({
        "slug": repo.slug, "id": repo.id, "name": repo.slug, "hierarchyId": "e3c939f9ef4a7fae272e",
        "scmId": "git", "state": "AVAILABLE", "statusMessage": "Available", "forkable": true,
        "public": false, "archived": false,
        "origin": repo.fork_of.map(|id| json!({"id": id, "slug": state.repo(id).slug})),
        "project": {
            "key": repo.project, "id": repo.id + 100, "name": repo.project, "public": false,
            "type": if personal { "PERSONAL" } else { "NORMAL" },
            "links": {"self": [{"href": format!("{BASE_URL}/projects/{}", repo.project)}]}
        },
        "links": {
            "clone": [{"href": format!("{BASE_URL}/scm/{}/{}.git", repo.project.to_ascii_lowercase(), repo.slug), "name": "http"}],
            "self": [{"href": format!("{BASE_URL}/projects/{}/repos/{}/browse", repo.project, repo.slug)}]
        }
    })
}

fn ref_json(state: &ServerState, repo_id: u64, branch: &str, sha: &str) -> Value {
    json!({
        "id": branch_ref(branch), "displayId": branch, "latestCommit": sha, "type": "BRANCH",
        "repository": repo_json(state, repo_id)
    })
}

fn pull_json(state: &ServerState, pull: &Pull) -> Value {
    let repo = state.repo(pull.repo_id);
    let to_sha =
        git_out(&repo.git_dir, &["rev-parse", &branch_ref(&pull.to_branch)]).unwrap_or_default();
    let mut value = json!({
        "id": pull.id, "version": pull.version, "title": pull.title,
        "state": pull.state, "open": pull.open(), "closed": !pull.open(), "draft": false,
        "locked": false,
        "createdDate": millis(pull.created), "updatedDate": millis(pull.updated),
        "fromRef": ref_json(state, pull.from_repo_id, &pull.from_branch, &pull.from_sha),
        "toRef": ref_json(state, pull.repo_id, &pull.to_branch, &to_sha),
        "author": {"user": user_json(state, &pull.author), "role": "AUTHOR",
                   "approved": false, "status": "UNAPPROVED"},
        "reviewers": pull.reviewers.iter().map(|r| json!({"user": user_json(state, r),
            "role": "REVIEWER", "approved": false, "status": "UNAPPROVED"})).collect::<Vec<_>>(),
        "participants": [],
        "properties": {"resolvedTaskCount": 0, "openTaskCount": 0},
        "links": {"self": [{"href": format!("{BASE_URL}/projects/{}/repos/{}/pull-requests/{}",
                                             repo.project, repo.slug, pull.id)}]}
    });
    if !pull.description.is_empty() {
        value["description"] = json!(pull.description);
    }
    if let Some(closed) = pull.closed {
        value["closedDate"] = json!(millis(closed));
    }
    if let Some(merge) = &pull.merge_commit {
        value["properties"]["mergeCommit"] = json!({"displayId": &merge[..11], "id": merge});
    }
    value
}

fn comment_json(state: &ServerState, comment: &Comment) -> Value {
    json!({
        "id": comment.id, "version": comment.version, "text": comment.text,
        "author": user_json(state, &comment.author),
        "createdDate": millis(comment.created), "updatedDate": millis(comment.updated),
        "comments": [], "severity": "NORMAL", "state": "OPEN", "threadResolved": false,
        "properties": {"repositoryId": comment.repo_id}
    })
}

fn status_json(status: &BuildStatus) -> Value {
    let mut value = json!({
        "key": status.key, "state": status.state, "url": status.url,
        "createdDate": millis(status.created), "updatedDate": millis(status.updated)
    });
    for (field, text) in [
        ("name", &status.name),
        ("description", &status.description),
        ("buildNumber", &status.build_number),
    ] {
        if !text.is_empty() {
            value[field] = json!(text);
        }
    }
    value
}

/// One page of `items` as Data Center answers a list.
fn paged(req: &Req, pairs: &[(String, String)], items: Vec<Value>) -> Reply {
    let start: usize = param(pairs, "start")
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    let limit: usize = param(pairs, "limit")
        .and_then(|l| l.parse().ok())
        .filter(|l| *l > 0)
        .unwrap_or(DEFAULT_LIMIT)
        .min(req.state().page_max);
    let total = items.len();
    let shown: Vec<Value> = items.into_iter().skip(start).take(limit).collect();
    let last = start + shown.len() >= total;
    let mut page = json!({
        "size": shown.len(), "limit": limit, "isLastPage": last, "start": start, "values": shown
    });
    if !last {
        page["nextPageStart"] = json!(start + limit);
    }
    Reply::json(StatusCode::OK, page)
}

fn list_pulls(req: &Req) -> Reply {
    refresh_pulls(req.inner);
    let pairs = query_pairs(req.query, LIST_PULLS, req.violate);
    let state_filter = param(&pairs, "state").unwrap_or("OPEN");
    let direction = param(&pairs, "direction").unwrap_or("INCOMING");
    let at = param(&pairs, "at");
    if let Some(at) = at.filter(|a| !a.starts_with("refs/")) {
        (req.violate)(format!("at={at:?} is not a fully-qualified ref"));
    }
    let state = req.state();
    let mut pulls: Vec<&Pull> = state
        .pulls
        .iter()
        .filter(|p| match direction {
            // The repository's own pull requests: into it.
            "INCOMING" => p.repo_id == req.repo_id,
            // Those from its branches (into it, or into the repository it was forked from).
            _ => p.from_repo_id == req.repo_id,
        })
        .filter(|p| {
            at.is_none_or(|at| match direction {
                "INCOMING" => branch_ref(&p.to_branch) == at,
                _ => branch_ref(&p.from_branch) == at,
            })
        })
        .filter(|p| state_filter == "ALL" || p.state == state_filter)
        .collect();
    match param(&pairs, "order") {
        Some("OLDEST") => pulls.sort_by_key(|p| (p.updated, p.id)),
        _ => pulls.sort_by_key(|p| std::cmp::Reverse((p.updated, p.id))),
    }
    let items: Vec<Value> = pulls.iter().map(|p| pull_json(&state, p)).collect();
    drop(state);
    paged(req, &pairs, items)
}

fn get_pull(req: &Req, id: u64) -> Reply {
    refresh_pulls(req.inner);
    query_pairs(req.query, &[], req.violate);
    let state = req.state();
    match state
        .pulls
        .iter()
        .find(|p| p.repo_id == req.repo_id && p.id == id)
    {
        Some(pull) => Reply::json(StatusCode::OK, pull_json(&state, pull)),
        None => error(
            StatusCode::NOT_FOUND,
            "pull.NoSuchPullRequestException",
            &format!("No pull request exists with ID {id} for this repository."),
        ),
    }
}

/// The branch and repository of a posted `fromRef`/`toRef`; a ref of another repository is a
/// violation (tagpin's branches are its own).
fn posted_ref(req: &Req, object: &serde_json::Map<String, Value>, name: &str) -> Option<String> {
    let r = object.get(name)?.as_object()?;
    let id = r.get("id").and_then(Value::as_str)?;
    let repo = r.get("repository").and_then(Value::as_object);
    let slug = repo.and_then(|r| r.get("slug")).and_then(Value::as_str);
    let key = repo
        .and_then(|r| r.get("project"))
        .and_then(|p| p.get("key"))
        .and_then(Value::as_str);
    let state = req.state();
    let ours = state.repo(req.repo_id);
    if slug != Some(ours.slug.as_str())
        || !key.is_some_and(|k| k.eq_ignore_ascii_case(&ours.project))
    {
        (req.violate)(format!(
            "{name} names another repository: {slug:?} in {key:?}"
        ));
    }
    for field in r.keys() {
        if !["id", "repository", "displayId", "latestCommit", "type"].contains(&field.as_str()) {
            (req.violate)(format!(
                "{name}.{field} is not a field of RestPullRequestRef"
            ));
        }
    }
    match id.strip_prefix("refs/heads/") {
        Some(branch) => Some(branch.to_string()),
        None => {
            (req.violate)(format!("{name}.id {id:?} is not a fully-qualified branch"));
            None
        }
    }
}

fn create_pull(req: &Req) -> Reply {
    query_pairs(req.query, &[], req.violate);
    let object = match body_object(req.body, CREATE_PULL, req.violate) {
        Ok(o) => o,
        Err(reply) => return reply,
    };
    let (Some(from), Some(to)) = (
        posted_ref(req, &object, "fromRef"),
        posted_ref(req, &object, "toRef"),
    ) else {
        return error(
            StatusCode::BAD_REQUEST,
            "validation.ArgumentValidationException",
            "fromRef and toRef are required",
        );
    };
    let dir = req.state().repo(req.repo_id).git_dir.clone();
    let Some(sha) = git_out(
        &dir,
        &["rev-parse", "--verify", "--quiet", &branch_ref(&from)],
    ) else {
        return not_found(&format!("Repository ref {from} does not exist"));
    };
    if git_out(
        &dir,
        &["rev-parse", "--verify", "--quiet", &branch_ref(&to)],
    )
    .is_none()
    {
        return not_found(&format!("Repository ref {to} does not exist"));
    }
    if from == to {
        return error(
            StatusCode::CONFLICT,
            "pull.EmptyPullRequestException",
            "The pull request has no changes",
        );
    }
    let mut state = req.state();
    if let Some(existing) = state.pulls.iter().find(|p| {
        p.open()
            && p.repo_id == req.repo_id
            && !p.fork()
            && p.from_branch == from
            && p.to_branch == to
    }) {
        let mut reply = error(
            StatusCode::CONFLICT,
            "pull.DuplicatePullRequestException",
            &format!(
                "Only one pull request may be open for a given source and target branch ({})",
                existing.id
            ),
        );
        reply.body = reply.body.replace(
            "\"context\":null",
            &format!(
                "\"existingPullRequest\":{},\"context\":null",
                pull_json(&state, existing)
            ),
        );
        return reply;
    }
    let id = insert_pull(
        &mut state,
        req.repo_id,
        req.repo_id,
        &from,
        &sha,
        &to,
        str_field(&object, "title").unwrap_or_default(),
        str_field(&object, "description").unwrap_or_default(),
        req.user,
    );
    let pull = state
        .pulls
        .iter()
        .find(|p| p.repo_id == req.repo_id && p.id == id)
        .expect("inserted");
    Reply::json(StatusCode::CREATED, pull_json(&state, pull))
}

fn edit_pull(req: &Req, id: u64) -> Reply {
    query_pairs(req.query, &[], req.violate);
    let object = match body_object(req.body, EDIT_PULL, req.violate) {
        Ok(o) => o,
        Err(reply) => return reply,
    };
    let now = SystemTime::now();
    let mut state = req.state();
    let bump = std::mem::take(&mut state.bump_on_put) as i64;
    let Some(pull) = state
        .pulls
        .iter_mut()
        .find(|p| p.repo_id == req.repo_id && p.id == id)
    else {
        return error(
            StatusCode::NOT_FOUND,
            "pull.NoSuchPullRequestException",
            &format!("No pull request exists with ID {id} for this repository."),
        );
    };
    if bump > 0 {
        // A person's edit landed just before this one.
        pull.version += bump;
        pull.updated = now;
    }
    let given = object.get("version").and_then(Value::as_i64).unwrap_or(-1);
    if given != pull.version {
        let pull = pull.clone();
        return error(
            StatusCode::CONFLICT,
            "pull.PullRequestOutOfDateException",
            &format!(
                "You are attempting to modify a pull request based on out-of-date information (version {given}, current {}).",
                pull.version
            ),
        );
    }
    if let Some(title) = str_field(&object, "title") {
        if title.is_empty() {
            return error(
                StatusCode::BAD_REQUEST,
                "validation.ArgumentValidationException",
                "title is required",
            );
        }
        pull.title = title.to_string();
    }
    if let Some(description) = str_field(&object, "description") {
        pull.description = description.to_string();
    }
    if let Some(reviewers) = object.get("reviewers").and_then(Value::as_array) {
        pull.reviewers = reviewers
            .iter()
            .filter_map(|r| r["user"]["name"].as_str().map(str::to_string))
            .collect();
    }
    pull.version += 1;
    pull.updated = now;
    let pull = pull.clone();
    Reply::json(StatusCode::OK, pull_json(&state, &pull))
}

fn pull_exists(req: &Req, id: u64) -> bool {
    req.state()
        .pulls
        .iter()
        .any(|p| p.repo_id == req.repo_id && p.id == id)
}

fn no_pull(id: u64) -> Reply {
    error(
        StatusCode::NOT_FOUND,
        "pull.NoSuchPullRequestException",
        &format!("No pull request exists with ID {id} for this repository."),
    )
}

/// The pull request's activities, newest first: its opening, its comments (each as it reads
/// now), and its merge or decline.
fn list_activities(req: &Req, id: u64) -> Reply {
    let pairs = query_pairs(req.query, ACTIVITIES, req.violate);
    if !pull_exists(req, id) {
        return no_pull(id);
    }
    let state = req.state();
    let pull = state
        .pulls
        .iter()
        .find(|p| p.repo_id == req.repo_id && p.id == id)
        .expect("exists");
    let mut activities: Vec<(SystemTime, u64, Value)> = vec![(
        pull.created,
        0,
        json!({"id": 0, "createdDate": millis(pull.created), "action": "OPENED",
               "user": user_json(&state, &pull.author)}),
    )];
    for comment in state
        .comments
        .iter()
        .filter(|c| c.repo_id == req.repo_id && c.pull == id)
    {
        activities.push((
            comment.created,
            comment.id,
            json!({"id": comment.id + 100_000, "createdDate": millis(comment.created),
                   "action": "COMMENTED", "commentAction": "ADDED",
                   "user": user_json(&state, &comment.author),
                   "comment": comment_json(&state, comment)}),
        ));
    }
    if let Some(closed) = pull.closed {
        let action = if pull.state == "MERGED" {
            "MERGED"
        } else {
            "DECLINED"
        };
        activities.push((
            closed,
            u64::MAX,
            json!({"id": 999_999, "createdDate": millis(closed), "action": action,
                   "user": user_json(&state, &pull.author)}),
        ));
    }
    activities.sort_by_key(|(at, id, _)| std::cmp::Reverse((*at, *id)));
    let items = activities.into_iter().map(|(_, _, v)| v).collect();
    drop(state);
    paged(req, &pairs, items)
}

fn create_comment(req: &Req, id: u64) -> Reply {
    query_pairs(req.query, &[], req.violate);
    let object = match body_object(req.body, NEW_COMMENT, req.violate) {
        Ok(o) => o,
        Err(reply) => return reply,
    };
    if !pull_exists(req, id) {
        return no_pull(id);
    }
    let text = str_field(&object, "text").unwrap_or_default();
    let mut state = req.state();
    let cid = add_comment(&mut state, req.repo_id, id, req.user, text);
    let comment = state.comments.iter().find(|c| c.id == cid).expect("added");
    Reply::json(StatusCode::CREATED, comment_json(&state, comment))
}

/// `GET` or `PUT` of a pull request comment: only its author may change its text, and only
/// from its current version.
fn comment_by_id(req: &Req, id: u64, cid: u64, edit: bool) -> Reply {
    query_pairs(req.query, &[], req.violate);
    let object = if edit {
        match body_object(req.body, EDIT_COMMENT, req.violate) {
            Ok(o) => Some(o),
            Err(reply) => return reply,
        }
    } else {
        None
    };
    let mut state = req.state();
    let Some(comment) = state
        .comments
        .iter_mut()
        .find(|c| c.id == cid && c.repo_id == req.repo_id && c.pull == id)
    else {
        return error(
            StatusCode::NOT_FOUND,
            "comment.NoSuchCommentException",
            &format!("No comment with id {cid} exists."),
        );
    };
    if let Some(object) = object {
        if let Some(text) = str_field(&object, "text") {
            if comment.author != req.user {
                return error(
                    StatusCode::FORBIDDEN,
                    "AuthorisationException",
                    "You are not permitted to edit the text of this comment",
                );
            }
            let given = object.get("version").and_then(Value::as_i64).unwrap_or(-1);
            if given != comment.version {
                return error(
                    StatusCode::CONFLICT,
                    "comment.CommentOutOfDateException",
                    "You are attempting to modify a comment based on out-of-date information.",
                );
            }
            comment.text = text.to_string();
            comment.version += 1;
            comment.updated = SystemTime::now();
        }
    }
    let comment = comment.clone();
    Reply::json(StatusCode::OK, comment_json(&state, &comment))
}

fn set_build_status(req: &Req, sha: &str) -> Reply {
    query_pairs(req.query, &[], req.violate);
    let object = match body_object(req.body, SET_BUILD_STATUS, req.violate) {
        Ok(o) => o,
        Err(reply) => return reply,
    };
    let field = |name: &str| str_field(&object, name).unwrap_or_default().to_string();
    let state_name = field("state");
    if !BUILD_STATES.contains(&state_name.as_str()) {
        (req.violate)(format!("state {state_name:?} is none of {BUILD_STATES:?}"));
        return error(
            StatusCode::BAD_REQUEST,
            "validation.ArgumentValidationException",
            "state is invalid",
        );
    }
    for (name, max) in [
        ("key", 255),
        ("name", 255),
        ("description", 255),
        ("buildNumber", 255),
        ("url", 450),
    ] {
        if field(name).chars().count() > max {
            (req.violate)(format!("{name} is longer than {max} characters"));
            return error(
                StatusCode::BAD_REQUEST,
                "validation.ArgumentValidationException",
                &format!("{name} is too long"),
            );
        }
    }
    if url::Url::parse(&field("url")).is_err() {
        (req.violate)("url is not a URL".into());
    }
    let dir = req.state().repo(req.repo_id).git_dir.clone();
    let full = sha.len() == 40 && sha.chars().all(|c| c.is_ascii_hexdigit());
    if !full || git_out(&dir, &["cat-file", "-e", &format!("{sha}^{{commit}}")]).is_none() {
        return error(
            StatusCode::NOT_FOUND,
            "commit.NoSuchCommitException",
            &format!("Commit '{sha}' does not exist in repository"),
        );
    }
    let mut state = req.state();
    // `lastUpdated` ("dateAdded" in the reference's prose): the poster's time, in
    // milliseconds; "if not provided current date is used".
    let now = match object.get("lastUpdated").and_then(Value::as_u64) {
        Some(ms) => SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(ms),
        None => state.clock.now(),
    };
    let key = field("key");
    let created = state
        .statuses
        .iter()
        .find(|s| s.repo_id == req.repo_id && s.sha == sha && s.key == key)
        .map(|s| s.created)
        .unwrap_or(now);
    state
        .statuses
        .retain(|s| !(s.repo_id == req.repo_id && s.sha == sha && s.key == key));
    state.statuses.push(BuildStatus {
        repo_id: req.repo_id,
        sha: sha.to_string(),
        key,
        state: state_name,
        name: field("name"),
        url: field("url"),
        description: field("description"),
        build_number: field("buildNumber"),
        posted_by: req.user.to_string(),
        created,
        updated: now,
    });
    Reply::empty(StatusCode::NO_CONTENT)
}

fn get_build_status(req: &Req, sha: &str) -> Reply {
    let pairs = query_pairs(req.query, GET_BUILD, req.violate);
    let Some(key) = param(&pairs, "key") else {
        (req.violate)("GET of a commit's builds without the required key".into());
        return error(
            StatusCode::BAD_REQUEST,
            "validation.ArgumentValidationException",
            "key is required",
        );
    };
    let state = req.state();
    match state
        .statuses
        .iter()
        .find(|s| s.repo_id == req.repo_id && s.sha == sha && s.key == key)
    {
        Some(status) => Reply::json(StatusCode::OK, status_json(status)),
        None => error(
            StatusCode::NOT_FOUND,
            "build.NoSuchBuildStatusException",
            &format!("No build status with key '{key}' exists for commit '{sha}'"),
        ),
    }
}
