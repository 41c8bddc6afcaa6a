//! A local Gitea REST API (`/api/v1`) server for integration tests.
//!
//! tagpin opens and updates pull requests, labels them, keeps one verdict comment and posts
//! commit statuses on Gitea (and Forgejo) as it does on GitHub. No real Gitea is reachable from
//! the test machines, so this module serves the operations tagpin calls, with in-memory state,
//! on a loopback port, under `/api/v1`.
//!
//! Its facts are Gitea's swagger (`templates/swagger/v1_json.tmpl`) as the npm package
//! `gitea-js` 1.23.0 ships it, typed, in `dist/index.d.ts` (generated from Gitea 1.23's
//! swagger), and Gitea's own behaviour where the swagger is silent:
//! - Answers carry the swagger's definitions (`PullRequest` with `head`/`base` as
//!   `PRBranchInfo`, `Label`, `Comment`, `CommitStatus` with `creator`, `User`), every id of
//!   its own kind starting far apart so a client mixing a pull request's `id` and `number`,
//!   or a label's name and id, is caught. Times carry a `+02:00` offset, as a Gitea outside
//!   UTC writes them.
//! - Every request is checked: the token only in `Authorization: token …` (or `Bearer`;
//!   one in the URL is a violation), the route must be Gitea's, query parameters must be
//!   declared for the route with the declared enum values, JSON bodies must be objects of the
//!   declared fields with their types (`CreatePullRequestOption`, `EditPullRequestOption`,
//!   `CreateLabelOption`, `IssueLabelsOption`, `CreateIssueCommentOption`,
//!   `EditIssueCommentOption`, `CreateStatusOption`). Gitea ignores an undeclared field or
//!   parameter, so one would go unnoticed there: here it is a [`Violation`], and `Drop` fails
//!   the test unless it took them with [`GiteaServer::take_violations`]. Missing required
//!   fields and wrong types are answered `422` as Gitea's binding does.
//! - Gitea's rules: one open pull request per head and base branch (`409 pull request
//!   already exists for these targets`), labels by id only (an unknown id is `422`), a
//!   status on a commit the repository does not have is refused, `read` tokens cannot write
//!   (`403`), a repository hidden from the token is `404`.
//! - Lists are paged as Gitea pages them: `page` and `limit`, 30 by default and at most 50
//!   (`[api] DEFAULT_PAGING_NUM` and `MAX_RESPONSE_ITEMS`), with `X-Total-Count` and a `Link`
//!   header whose addresses are on Gitea's `ROOT_URL` ([`ROOT_URL`], not this server): a
//!   client that follows a `Link` address leaves for a host that does not exist. Pull
//!   requests cannot be filtered by head branch. Issue comments come in one list, unpaged.
//!   Commit statuses are listed newest first by creation second, and statuses of the same
//!   second oldest first (Gitea's `created_unix DESC` leaves their order to the database).
//! - Branches, commits and merges are real: the repository is a bare Git repository; an open
//!   pull request's head follows its branch, `refs/pull/<n>/head` is written, and a person
//!   merging ([`GiteaServer::merge_pull_as`]) makes Gitea's merge commit.
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

/// Where Gitea serves its REST API.
pub const API_PREFIX: &str = "/api/v1";
/// Gitea's `[server] ROOT_URL`: its public address, where it writes `Link` and `html_url`
/// addresses. Not this server's: nothing answers there.
pub const ROOT_URL: &str = "https://git.example.com/";
/// `[api] DEFAULT_PAGING_NUM` and `MAX_RESPONSE_ITEMS`, Gitea's defaults.
pub const DEFAULT_PAGING_NUM: usize = 30;
pub const MAX_RESPONSE_ITEMS: usize = 50;

const FIRST_REPO_ID: u64 = 1000;
const FIRST_USER_ID: u64 = 100;
const FIRST_PULL_ID: u64 = 4_700;
const FIRST_LABEL_ID: u64 = 300;
const FIRST_COMMENT_ID: u64 = 90_000;
const FIRST_STATUS_ID: u64 = 7_000;

// ---------------------------------------------------------------------------
// Public types
// ---------------------------------------------------------------------------

/// What a token may do, in Gitea's scopes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// `write:repository,write:issue,read:user`.
    Write,
    /// `read:repository,read:issue,read:user`.
    Read,
    /// `write:repository,write:issue` without `read:user`: `GET /user` is refused (`403`),
    /// as for every token Codeberg grants a repository.
    WriteRepositoryOnly,
}

/// A user's access to a repository.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Access {
    Read,
    Write,
}

/// A pull request as the server holds it.
#[derive(Clone, Debug)]
pub struct Pull {
    pub id: u64,
    pub number: u64,
    pub repo_id: u64,
    pub title: String,
    pub body: String,
    pub open: bool,
    pub merged: bool,
    pub merge_commit_sha: Option<String>,
    pub merged_by: Option<String>,
    pub head_ref: String,
    pub head_sha: String,
    /// The repository the head branch is in: a fork's id for a fork's pull request.
    pub head_repo_id: u64,
    pub base_ref: String,
    pub poster: String,
    /// Label ids.
    pub labels: Vec<u64>,
    pub created: SystemTime,
    pub updated: SystemTime,
    pub merged_at: Option<SystemTime>,
    pub closed_at: Option<SystemTime>,
}

/// A pull request's labels by name, for assertions.
#[derive(Clone, Debug)]
pub struct PullView {
    pub pull: Pull,
    pub label_names: Vec<String>,
    pub fork: bool,
}

#[derive(Clone, Debug)]
pub struct Label {
    pub id: u64,
    pub repo_id: u64,
    pub name: String,
    pub color: String,
}

#[derive(Clone, Debug)]
pub struct Comment {
    pub id: u64,
    pub repo_id: u64,
    pub issue: u64,
    pub body: String,
    pub user: String,
    pub created: SystemTime,
    pub updated: SystemTime,
}

#[derive(Clone, Debug)]
pub struct CommitStatus {
    pub id: u64,
    pub repo_id: u64,
    /// Per repository and commit, from 1.
    pub index: u64,
    pub sha: String,
    pub context: String,
    pub state: String,
    pub description: String,
    pub target_url: String,
    pub creator: String,
    pub created: SystemTime,
}

/// A request Gitea would refuse, or would silently misread.
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

/// A running fake Gitea instance. Stops when dropped.
pub struct GiteaServer {
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
    users: BTreeMap<String, u64>,
    tokens: Vec<(String, String, Scope)>,
    repos: Vec<Repo>,
    pulls: Vec<Pull>,
    labels: Vec<Label>,
    comments: Vec<Comment>,
    statuses: Vec<CommitStatus>,
    requests: Vec<RecordedRequest>,
    violations: Vec<Violation>,
    faults: Vec<Fault>,
    /// What the server records as a commit status's time ([`Self::turn_back_clock`] of the
    /// server).
    clock: http_fake::Clock,
}

struct Repo {
    id: u64,
    owner: String,
    name: String,
    git_dir: PathBuf,
    fork_of: Option<u64>,
    access: BTreeMap<String, Access>,
    /// Issues and pull requests share these numbers.
    last_index: u64,
}

impl ServerState {
    fn ensure_user(&mut self, login: &str) -> u64 {
        let next = FIRST_USER_ID + self.users.len() as u64;
        *self.users.entry(login.to_string()).or_insert(next)
    }

    fn repo_by_name(&self, owner: &str, name: &str) -> Option<&Repo> {
        self.repos
            .iter()
            .find(|r| r.owner.eq_ignore_ascii_case(owner) && r.name.eq_ignore_ascii_case(name))
    }

    fn repo(&self, id: u64) -> &Repo {
        self.repos.iter().find(|r| r.id == id).expect("repo id")
    }

    fn repo_index(&self, full_name: &str) -> usize {
        let (owner, name) = full_name.split_once('/').expect("owner/name");
        self.repos
            .iter()
            .position(|r| r.owner == owner && r.name == name)
            .unwrap_or_else(|| panic!("no repository {full_name}"))
    }

    fn pull_mut(&mut self, repo_id: u64, number: u64) -> &mut Pull {
        self.pulls
            .iter_mut()
            .find(|p| p.repo_id == repo_id && p.number == number)
            .unwrap_or_else(|| panic!("no pull request #{number}"))
    }
}

impl GiteaServer {
    /// Starts a server with user `login`, whose token `token` may write, and private
    /// repository `owner/name` backed by the bare repository `bare_repo`, which `login` may
    /// write to.
    pub async fn start(
        token: &str,
        login: &str,
        owner: &str,
        name: &str,
        bare_repo: &Path,
    ) -> GiteaServer {
        let (listener, base) = http_fake::loopback("Gitea").await;
        let inner = Arc::new(Inner {
            base,
            state: Mutex::new(ServerState::default()),
        });
        let router = Router::new().fallback(handle).with_state(inner.clone());
        let task = http_fake::serve(listener, router, "Gitea");
        let server = GiteaServer { inner, task };
        server.add_token(token, login, Scope::Write);
        {
            let mut state = server.inner.lock();
            state.ensure_user(owner);
            let id = FIRST_REPO_ID + state.repos.len() as u64;
            let mut access = BTreeMap::new();
            access.insert(login.to_string(), Access::Write);
            state.repos.push(Repo {
                id,
                owner: owner.to_string(),
                name: name.to_string(),
                git_dir: bare_repo.to_path_buf(),
                fork_of: None,
                access,
                last_index: 0,
            });
        }
        server
    }

    /// `http://127.0.0.1:PORT/api/v1`: what `forge.api_url` names.
    pub fn api_url(&self) -> String {
        format!("{}{API_PREFIX}", self.inner.base)
    }

    /// A token of `login` (added if missing) with `scope`.
    pub fn add_token(&self, token: &str, login: &str, scope: Scope) {
        let mut state = self.inner.lock();
        state.ensure_user(login);
        state.tokens.retain(|(t, ..)| t != token);
        state
            .tokens
            .push((token.to_string(), login.to_string(), scope));
    }

    /// Gives `login` (added if missing) `access` to repository `owner/name`.
    pub fn grant(&self, repo: &str, login: &str, access: Access) {
        let mut state = self.inner.lock();
        state.ensure_user(login);
        let index = state.repo_index(repo);
        state.repos[index].access.insert(login.to_string(), access);
    }

    /// Scripts a fault for the next matching requests, tried in the order added.
    /// Turns the server's clock back: the commit statuses it records from now on are `by`
    /// earlier (a scene set in the past).
    pub fn turn_back_clock(&self, by: std::time::Duration) {
        self.inner.lock().clock.turn_back(by);
    }

    /// Moves the server's clock forward by `by`.
    pub fn advance_clock(&self, by: std::time::Duration) {
        self.inner.lock().clock.advance(by);
    }

    pub fn inject(&self, fault: Fault) {
        self.inner.lock().faults.push(fault);
    }

    /// A person opens a pull request from `head` into `base` on Gitea's web page.
    pub fn open_pull_as(
        &self,
        login: &str,
        repo: &str,
        head: &str,
        base: &str,
        title: &str,
    ) -> u64 {
        let mut state = self.inner.lock();
        state.ensure_user(login);
        let index = state.repo_index(repo);
        let repo_id = state.repos[index].id;
        let head_sha = git_out(
            &state.repos[index].git_dir,
            &["rev-parse", &branch_ref(head)],
        )
        .unwrap_or_else(|| panic!("no branch {head}"));
        insert_pull(
            &mut state, repo_id, repo_id, head, &head_sha, base, title, "", login,
        )
    }

    /// `login` forks `upstream` as `login/<name>` and opens a pull request from the fork's
    /// branch `head` (at `sha`, a commit of the upstream repository) into `base`. Gitea keeps
    /// the fork's head under the upstream's `refs/pull/<n>/head`.
    #[allow(clippy::too_many_arguments)]
    pub fn open_fork_pull_as(
        &self,
        login: &str,
        upstream: &str,
        head: &str,
        sha: &str,
        base: &str,
        title: &str,
        body: &str,
    ) -> u64 {
        let mut state = self.inner.lock();
        state.ensure_user(login);
        let up = state.repo_index(upstream);
        let upstream_id = state.repos[up].id;
        let name = state.repos[up].name.clone();
        let git_dir = state.repos[up].git_dir.clone();
        let fork_id = FIRST_REPO_ID + state.repos.len() as u64;
        let mut access = BTreeMap::new();
        access.insert(login.to_string(), Access::Write);
        state.repos.push(Repo {
            id: fork_id,
            owner: login.to_string(),
            name,
            git_dir,
            fork_of: Some(upstream_id),
            access,
            last_index: 0,
        });
        state.repos[up]
            .access
            .entry(login.to_string())
            .or_insert(Access::Read);
        insert_pull(
            &mut state,
            upstream_id,
            fork_id,
            head,
            sha,
            base,
            title,
            body,
            login,
        )
    }

    /// A person closes pull request `number` without merging it.
    pub fn close_pull_as(&self, login: &str, repo: &str, number: u64) {
        let now = SystemTime::now();
        let mut state = self.inner.lock();
        state.ensure_user(login);
        let repo_id = state.repos[state.repo_index(repo)].id;
        let pull = state.pull_mut(repo_id, number);
        assert!(pull.open, "#{number} is not open");
        pull.open = false;
        pull.closed_at = Some(now);
        pull.updated = now;
    }

    /// A person presses "Create merge commit" on pull request `number`: Gitea's merge commit is
    /// made in the bare repository and the base branch moves to it. Returns the merge commit.
    pub fn merge_pull_as(&self, login: &str, repo: &str, number: u64) -> String {
        self.refresh();
        let (pull, git_dir) = {
            let mut state = self.inner.lock();
            state.ensure_user(login);
            let index = state.repo_index(repo);
            let repo_id = state.repos[index].id;
            let pull = state.pull_mut(repo_id, number).clone();
            (pull, state.repos[index].git_dir.clone())
        };
        assert!(pull.open, "#{number} is not open");
        let base_head = git_out(&git_dir, &["rev-parse", &branch_ref(&pull.base_ref)])
            .unwrap_or_else(|| panic!("base branch {} is gone", pull.base_ref));
        let tree = git_out(
            &git_dir,
            &["merge-tree", "--write-tree", &base_head, &pull.head_sha],
        )
        .unwrap_or_else(|| panic!("#{number} has conflicts with {}", pull.base_ref));
        let tree = tree.lines().next().unwrap_or_default().to_string();
        let message = format!(
            "Merge pull request '{}' (#{number}) from {} into {}",
            pull.title, pull.head_ref, pull.base_ref
        );
        let mut command = super::git::git_command();
        let email = format!("{login}@noreply.git.example.com");
        command
            .current_dir(&git_dir)
            .args([
                "commit-tree",
                &tree,
                "-m",
                &message,
                "-p",
                &base_head,
                "-p",
                &pull.head_sha,
            ])
            .env("GIT_AUTHOR_NAME", login)
            .env("GIT_AUTHOR_EMAIL", &email)
            .env("GIT_COMMITTER_NAME", login)
            .env("GIT_COMMITTER_EMAIL", &email);
        let output = command.output().expect("run git commit-tree");
        assert!(output.status.success(), "git commit-tree failed");
        let merge = String::from_utf8_lossy(&output.stdout).trim().to_string();
        assert!(
            git_out(
                &git_dir,
                &[
                    "update-ref",
                    &branch_ref(&pull.base_ref),
                    &merge,
                    &base_head
                ]
            )
            .is_some(),
            "move {} to {merge}",
            pull.base_ref
        );
        let now = SystemTime::now();
        let mut state = self.inner.lock();
        let p = state.pull_mut(pull.repo_id, number);
        p.open = false;
        p.merged = true;
        p.merge_commit_sha = Some(merge.clone());
        p.merged_by = Some(login.to_string());
        p.merged_at = Some(now);
        p.closed_at = Some(now);
        p.updated = now;
        merge
    }

    /// A person writes a comment on pull request `number`.
    pub fn comment_as(&self, login: &str, repo: &str, number: u64, body: &str) -> u64 {
        let mut state = self.inner.lock();
        state.ensure_user(login);
        let repo_id = state.repos[state.repo_index(repo)].id;
        add_comment(&mut state, repo_id, number, login, body)
    }

    /// Every pull request of `repo` with its labels' names, by number.
    pub fn pulls(&self, repo: &str) -> Vec<PullView> {
        self.refresh();
        let state = self.inner.lock();
        let repo_id = state.repos[state.repo_index(repo)].id;
        let mut pulls: Vec<PullView> = state
            .pulls
            .iter()
            .filter(|p| p.repo_id == repo_id)
            .map(|p| PullView {
                pull: p.clone(),
                label_names: p
                    .labels
                    .iter()
                    .filter_map(|id| state.labels.iter().find(|l| l.id == *id))
                    .map(|l| l.name.clone())
                    .collect(),
                fork: p.head_repo_id != p.repo_id,
            })
            .collect();
        pulls.sort_by_key(|p| p.pull.number);
        pulls
    }

    /// The comments on issue or pull request `number`, oldest first.
    pub fn comments(&self, repo: &str, number: u64) -> Vec<Comment> {
        let state = self.inner.lock();
        let repo_id = state.repos[state.repo_index(repo)].id;
        state
            .comments
            .iter()
            .filter(|c| c.repo_id == repo_id && c.issue == number)
            .cloned()
            .collect()
    }

    /// The statuses on `sha` in `repo`, oldest first.
    pub fn statuses(&self, repo: &str, sha: &str) -> Vec<CommitStatus> {
        let state = self.inner.lock();
        let repo_id = state.repos[state.repo_index(repo)].id;
        state
            .statuses
            .iter()
            .filter(|s| s.repo_id == repo_id && s.sha == sha)
            .cloned()
            .collect()
    }

    /// `login` floods `sha` in `repo` with `count` successful statuses of contexts of its own
    /// (`ci/step-N`), as that many posts through the API would leave them: a CI job that
    /// posts one per step of a long pipeline, or someone burying tagpin's.
    pub fn flood_statuses_as(&self, login: &str, repo: &str, sha: &str, count: usize) {
        let mut state = self.inner.lock();
        let repo_id = state.repos[state.repo_index(repo)].id;
        let now = state.clock.now();
        for n in 0..count {
            let id = FIRST_STATUS_ID + state.statuses.len() as u64;
            let index = 1 + state
                .statuses
                .iter()
                .filter(|s| s.repo_id == repo_id && s.sha == sha)
                .count() as u64;
            state.statuses.push(CommitStatus {
                id,
                repo_id,
                index,
                sha: sha.to_string(),
                context: format!("ci/step-{n}"),
                state: "success".into(),
                description: String::new(),
                target_url: String::new(),
                creator: login.to_string(),
                created: now,
            });
        }
    }

    /// The labels of `repo`.
    pub fn labels(&self, repo: &str) -> Vec<Label> {
        let state = self.inner.lock();
        let repo_id = state.repos[state.repo_index(repo)].id;
        state
            .labels
            .iter()
            .filter(|l| l.repo_id == repo_id)
            .cloned()
            .collect()
    }

    /// Creates label `name` in `repo`, as a person would on the labels page; returns its id.
    pub fn add_label(&self, repo: &str, name: &str) -> u64 {
        let mut state = self.inner.lock();
        let repo_id = state.repos[state.repo_index(repo)].id;
        let id = FIRST_LABEL_ID + state.labels.len() as u64;
        state.labels.push(Label {
            id,
            repo_id,
            name: name.to_string(),
            color: "00aabb".into(),
        });
        id
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
        http_fake::assert_no_violations(&self.violations(), "Gitea", "refuse or misread");
    }

    /// Open pull requests' heads follow their branches (a fork's stays where it was opened).
    fn refresh(&self) {
        refresh_pulls(&self.inner);
    }
}

impl Drop for GiteaServer {
    fn drop(&mut self) {
        self.task.abort();
        http_fake::fail_on_untaken(&self.inner.lock().violations, "Gitea", "refuse or misread");
    }
}

#[allow(clippy::too_many_arguments)]
fn insert_pull(
    state: &mut ServerState,
    repo_id: u64,
    head_repo_id: u64,
    head: &str,
    head_sha: &str,
    base: &str,
    title: &str,
    body: &str,
    poster: &str,
) -> u64 {
    let now = SystemTime::now();
    let id = FIRST_PULL_ID + state.pulls.len() as u64;
    let repo = state
        .repos
        .iter_mut()
        .find(|r| r.id == repo_id)
        .expect("repo");
    repo.last_index += 1;
    let number = repo.last_index;
    git_out(
        &repo.git_dir,
        &["update-ref", &format!("refs/pull/{number}/head"), head_sha],
    );
    state.pulls.push(Pull {
        id,
        number,
        repo_id,
        title: title.to_string(),
        body: body.to_string(),
        open: true,
        merged: false,
        merge_commit_sha: None,
        merged_by: None,
        head_ref: head.to_string(),
        head_sha: head_sha.to_string(),
        head_repo_id,
        base_ref: base.to_string(),
        poster: poster.to_string(),
        labels: Vec::new(),
        created: now,
        updated: now,
        merged_at: None,
        closed_at: None,
    });
    number
}

fn add_comment(state: &mut ServerState, repo_id: u64, issue: u64, login: &str, body: &str) -> u64 {
    let now = SystemTime::now();
    let id = FIRST_COMMENT_ID + state.comments.len() as u64;
    state.comments.push(Comment {
        id,
        repo_id,
        issue,
        body: body.to_string(),
        user: login.to_string(),
        created: now,
        updated: now,
    });
    if let Some(p) = state
        .pulls
        .iter_mut()
        .find(|p| p.repo_id == repo_id && p.number == issue)
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

/// The full SHA of a commit named by a SHA, a branch or a tag.
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

fn refresh_pulls(inner: &Inner) {
    let open: Vec<(u64, u64, String, PathBuf)> = {
        let state = inner.lock();
        state
            .pulls
            .iter()
            .filter(|p| p.open && p.head_repo_id == p.repo_id)
            .map(|p| {
                (
                    p.repo_id,
                    p.number,
                    p.head_ref.clone(),
                    state.repo(p.repo_id).git_dir.clone(),
                )
            })
            .collect()
    };
    for (repo_id, number, head, dir) in open {
        if let Some(sha) = git_out(
            &dir,
            &["rev-parse", "--verify", "--quiet", &branch_ref(&head)],
        ) {
            git_out(
                &dir,
                &["update-ref", &format!("refs/pull/{number}/head"), &sha],
            );
            let mut state = inner.lock();
            let pull = state.pull_mut(repo_id, number);
            if pull.head_sha != sha {
                pull.head_sha = sha;
                pull.updated = SystemTime::now();
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Declared parameters and bodies (swagger)
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq)]
enum Type {
    Str,
    Bool,
    Int,
    StrList,
    IntList,
    /// `IssueLabelsOption.labels`: ids or names.
    AnyList,
}

/// A body field or query parameter: name, type, required.
type Field = (&'static str, Type, bool);

const CREATE_PULL: &[Field] = &[
    ("assignee", Type::Str, false),
    ("assignees", Type::StrList, false),
    ("base", Type::Str, true),
    ("body", Type::Str, false),
    ("due_date", Type::Str, false),
    ("head", Type::Str, true),
    ("labels", Type::IntList, false),
    ("milestone", Type::Int, false),
    ("reviewers", Type::StrList, false),
    ("team_reviewers", Type::StrList, false),
    ("title", Type::Str, true),
];
const EDIT_PULL: &[Field] = &[
    ("allow_maintainer_edit", Type::Bool, false),
    ("assignee", Type::Str, false),
    ("assignees", Type::StrList, false),
    ("base", Type::Str, false),
    ("body", Type::Str, false),
    ("due_date", Type::Str, false),
    ("labels", Type::IntList, false),
    ("milestone", Type::Int, false),
    ("state", Type::Str, false),
    ("title", Type::Str, false),
    ("unset_due_date", Type::Bool, false),
];
const CREATE_LABEL: &[Field] = &[
    ("color", Type::Str, true),
    ("description", Type::Str, false),
    ("exclusive", Type::Bool, false),
    ("is_archived", Type::Bool, false),
    ("name", Type::Str, true),
];
const ISSUE_LABELS: &[Field] = &[("labels", Type::AnyList, false)];
const COMMENT_BODY: &[Field] = &[("body", Type::Str, true)];
const CREATE_STATUS: &[Field] = &[
    ("context", Type::Str, false),
    ("description", Type::Str, false),
    ("state", Type::Str, false),
    ("target_url", Type::Str, false),
];

/// Query parameters each list declares, with their enum values where the swagger has them.
type Param = (&'static str, &'static [&'static str]);
const PAGED: &[Param] = &[("page", &[]), ("limit", &[])];
const LIST_PULLS: &[Param] = &[
    ("state", &["open", "closed", "all"]),
    (
        "sort",
        &[
            "oldest",
            "recentupdate",
            "leastupdate",
            "mostcomment",
            "leastcomment",
            "priority",
        ],
    ),
    ("milestone", &[]),
    ("labels", &[]),
    ("poster", &[]),
    ("page", &[]),
    ("limit", &[]),
];
const LIST_STATUSES: &[Param] = &[
    (
        "sort",
        &[
            "oldest",
            "recentupdate",
            "leastupdate",
            "leastindex",
            "highestindex",
        ],
    ),
    (
        "state",
        &["pending", "success", "error", "failure", "warning"],
    ),
    ("page", &[]),
    ("limit", &[]),
];
const LIST_COMMENTS: &[Param] = &[("since", &[]), ("before", &[])];
const STATES: [&str; 5] = ["pending", "success", "error", "failure", "warning"];

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

/// Gitea's `APIError`.
fn error(status: StatusCode, message: &str) -> Reply {
    Reply::json(
        status,
        json!({"message": message, "url": format!("{ROOT_URL}api/swagger")}),
    )
}

/// Gitea's binding error (`422`), one per field.
fn binding_error(field: &str, classification: &str) -> Reply {
    Reply::json(
        StatusCode::UNPROCESSABLE_ENTITY,
        json!([{"fieldNames": [field], "classification": classification,
                "message": classification.trim_end_matches("Error")}]),
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
        [("content-type", "application/json;charset=utf-8")],
    );
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
    let token = presented_token(&parts.headers);
    let user = token.as_ref().and_then(|token| {
        inner
            .lock()
            .tokens
            .iter()
            .find(|(t, ..)| t == token)
            .map(|(_, login, scope)| (login.clone(), *scope))
    });
    let index = http_fake::record(
        &mut inner.lock().requests,
        method.as_str(),
        &path,
        query.as_deref(),
        body,
        user.as_ref().map(|(login, _)| login.clone()),
    );
    let violate = |problem: String| {
        inner.lock().violations.push(Violation {
            method: method.to_string(),
            path: path.clone(),
            problem,
        });
    };
    let in_url = query.as_deref().is_some_and(|q| {
        url::form_urlencoded::parse(q.as_bytes())
            .any(|(k, _)| k == "token" || k == "access_token" || k == "sudo")
    });
    if in_url {
        violate("a token in the URL (Gitea deprecates it; it is logged by proxies)".into());
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
                .unwrap_or_else(|| json!({"message": http_fake::canonical_reason(fault.status)}))
                .to_string(),
            headers: fault.headers,
        },
        None => dispatch(
            inner,
            &method,
            &path,
            query.as_deref(),
            body,
            user,
            &violate,
        ),
    };
    inner.lock().requests[index].status = reply.status.as_u16();
    reply
}

/// The token of `Authorization: token …` or `Bearer …`.
fn presented_token(headers: &HeaderMap) -> Option<String> {
    let value = headers.get("authorization")?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    (scheme.eq_ignore_ascii_case("token") || scheme.eq_ignore_ascii_case("bearer"))
        .then(|| token.trim().to_string())
}

/// The query's pairs, checked against `declared`; undeclared names and values outside an enum
/// are violations (Gitea reads neither).
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
            Some(_) if matches!(key.as_str(), "page" | "limit" | "milestone") => {
                if value.parse::<u64>().is_err() || (key == "page" && value == "0") {
                    violate(format!("{key}={value:?} is not a number Gitea pages by"));
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

/// The JSON body as an object of `declared` fields, or Gitea's answer refusing it. Fields
/// Gitea does not declare are violations (it would ignore them).
fn body_object(
    body: &str,
    declared: &[Field],
    violate: &dyn Fn(String),
) -> Result<serde_json::Map<String, Value>, Reply> {
    let value: Value = serde_json::from_str(body).map_err(|_| {
        violate("the body is not JSON".into());
        binding_error("", "DeserializationError")
    })?;
    let Value::Object(object) = value else {
        violate("the body is not a JSON object".into());
        return Err(binding_error("", "DeserializationError"));
    };
    for (key, value) in &object {
        let Some((_, kind, _)) = declared.iter().find(|(name, ..)| name == key) else {
            violate(format!(
                "field {key:?} is not declared by Gitea's option for this route"
            ));
            continue;
        };
        let ok = match kind {
            Type::Str => value.is_string(),
            Type::Bool => value.is_boolean(),
            Type::Int => value.is_i64() || value.is_u64(),
            Type::StrList => value
                .as_array()
                .is_some_and(|a| a.iter().all(Value::is_string)),
            Type::IntList => value
                .as_array()
                .is_some_and(|a| a.iter().all(|v| v.is_u64() || v.is_i64())),
            Type::AnyList => value.is_array(),
        };
        if !ok {
            violate(format!("field {key:?} has the wrong type: {value}"));
            return Err(binding_error(key, "DeserializationError"));
        }
    }
    for (name, _, required) in declared {
        let empty = match object.get(*name) {
            None | Some(Value::Null) => true,
            Some(Value::String(s)) => s.is_empty(),
            _ => false,
        };
        if *required && empty {
            return Err(binding_error(&capitalise(name), "RequiredError"));
        }
    }
    Ok(object)
}

fn capitalise(name: &str) -> String {
    let mut chars = name.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
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
    user: Option<(String, Scope)>,
    violate: &dyn Fn(String),
) -> Reply {
    let Some(rest) = path.strip_prefix(API_PREFIX) else {
        violate("not under /api/v1".into());
        return error(StatusCode::NOT_FOUND, "Not Found");
    };
    let segments: Vec<String> = rest
        .trim_start_matches('/')
        .split('/')
        .map(percent_decode)
        .collect();
    let segs: Vec<&str> = segments.iter().map(String::as_str).collect();
    let Some((login, scope)) = user else {
        return error(StatusCode::UNAUTHORIZED, "token is required");
    };
    let m = method.as_str();
    if segs == ["user"] {
        if m != "GET" {
            violate("no such route".into());
            return error(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed");
        }
        query_pairs(query, &[], violate);
        if scope == Scope::WriteRepositoryOnly {
            return error(
                StatusCode::FORBIDDEN,
                "token does not have at least one of required scope(s): [read:user]",
            );
        }
        return Reply::json(StatusCode::OK, user_json(&inner.lock(), &login));
    }
    let ["repos", owner, name, route @ ..] = segs.as_slice() else {
        violate("a route Gitea does not have".into());
        return error(StatusCode::NOT_FOUND, "Not Found");
    };
    let (repo_id, access) = {
        let state = inner.lock();
        match state.repo_by_name(owner, name) {
            Some(repo) => (repo.id, repo.access.get(&login).copied()),
            None => return error(StatusCode::NOT_FOUND, "repository does not exist"),
        }
    };
    // A private repository is hidden from whoever has no access to it.
    let Some(access) = access else {
        return error(StatusCode::NOT_FOUND, "Not Found");
    };
    let write = m != "GET";
    if write && (scope == Scope::Read || access < Access::Write) {
        return error(
            StatusCode::FORBIDDEN,
            "token does not have at least one of required scope(s): [write:repository]",
        );
    }
    let req = Req {
        inner,
        repo_id,
        login: &login,
        query,
        body,
        violate,
    };
    match (m, route) {
        ("GET", ["pulls"]) => list_pulls(&req),
        ("POST", ["pulls"]) => create_pull(&req),
        ("GET", ["pulls", n]) => with_number(n, |n| get_pull(&req, n)),
        ("PATCH", ["pulls", n]) => with_number(n, |n| edit_pull(&req, n)),
        ("GET", ["labels"]) => list_labels(&req),
        ("POST", ["labels"]) => create_label(&req),
        ("POST" | "PUT", ["issues", n, "labels"]) => {
            with_number(n, |n| add_issue_labels(&req, n, m == "PUT"))
        }
        ("GET", ["issues", "comments", id]) | ("PATCH", ["issues", "comments", id]) => {
            with_number(id, |id| comment_by_id(&req, id, m == "PATCH"))
        }
        ("GET", ["issues", n, "comments"]) => with_number(n, |n| list_comments(&req, n)),
        ("POST", ["issues", n, "comments"]) => with_number(n, |n| create_comment(&req, n)),
        ("POST", ["statuses", sha]) => create_status(&req, sha),
        ("GET", ["statuses", sha]) => list_statuses(&req, sha, false),
        ("GET", ["commits", reference, "statuses"]) => list_statuses(&req, reference, true),
        _ => {
            violate("a route Gitea does not have".into());
            error(StatusCode::NOT_FOUND, "Not Found")
        }
    }
}

struct Req<'a> {
    inner: &'a Arc<Inner>,
    repo_id: u64,
    login: &'a str,
    query: Option<&'a str>,
    body: &'a str,
    violate: &'a dyn Fn(String),
}

impl Req<'_> {
    fn state(&self) -> MutexGuard<'_, ServerState> {
        self.inner.lock()
    }

    fn git_dir(&self) -> PathBuf {
        self.state().repo(self.repo_id).git_dir.clone()
    }
}

fn with_number(text: &str, then: impl FnOnce(u64) -> Reply) -> Reply {
    match text.parse::<u64>() {
        Ok(n) => then(n),
        Err(_) => error(StatusCode::NOT_FOUND, "Not Found"),
    }
}

/// Times as Gitea writes them in a `+02:00` zone.
fn time(at: SystemTime) -> String {
    let secs = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let local = k8s_openapi::jiff::Timestamp::from_second(secs + 2 * 3600)
        .unwrap()
        .to_string();
    format!("{}+02:00", local.trim_end_matches('Z'))
}

fn user_json(state: &ServerState, login: &str) -> Value {
    let id = state.users.get(login).copied().unwrap_or(0);
    json!({
        "id": id, "login": login, "login_name": "", "source_id": 0, "full_name": "",
        "email": format!("{login}@noreply.git.example.com"),
        "avatar_url": format!("{ROOT_URL}avatars/{id}"), "html_url": format!("{ROOT_URL}{login}"),
        "language": "", "is_admin": false, "last_login": "0001-01-01T00:00:00Z",
        "created": "2024-01-01T10:00:00+02:00", "restricted": false, "active": true,
        "prohibit_login": false, "location": "", "website": "", "description": "",
        "visibility": "public", "followers_count": 0, "following_count": 0,
        "starred_repos_count": 0, "username": login
    })
}

fn repo_json(inner: &Inner, state: &ServerState, repo_id: u64) -> Value {
    let repo = state.repo(repo_id);
    let owner_id = state.users.get(&repo.owner).copied().unwrap_or(0);
    json!({
        "id": repo.id, "name": repo.name, "full_name": format!("{}/{}", repo.owner, repo.name),
        "owner": {"id": owner_id, "login": repo.owner, "username": repo.owner},
        "private": true, "fork": repo.fork_of.is_some(),
        "parent": repo.fork_of.map(|id| json!({"id": id})),
        "html_url": format!("{ROOT_URL}{}/{}", repo.owner, repo.name),
        "clone_url": format!("{ROOT_URL}{}/{}.git", repo.owner, repo.name),
        "default_branch": "main", "empty": false, "archived": false, "mirror": false,
        "internal_tracker": null, "api_url": format!("{}{API_PREFIX}", inner.base)
    })
}

fn label_json(label: &Label) -> Value {
    json!({
        "id": label.id, "name": label.name, "exclusive": false, "is_archived": false,
        "color": label.color, "description": "",
        "url": format!("{ROOT_URL}api/v1/repos/labels/{}", label.id)
    })
}

fn pull_json(inner: &Inner, state: &ServerState, pull: &Pull) -> Value {
    let repo = state.repo(pull.repo_id);
    let full = format!("{}/{}", repo.owner, repo.name);
    let labels: Vec<Value> = pull
        .labels
        .iter()
        .filter_map(|id| state.labels.iter().find(|l| l.id == *id))
        .map(label_json)
        .collect();
    let base_sha =
        git_out(&repo.git_dir, &["rev-parse", &branch_ref(&pull.base_ref)]).unwrap_or_default();
    let comments = state
        .comments
        .iter()
        .filter(|c| c.repo_id == pull.repo_id && c.issue == pull.number)
        .count();
    json!({
        "id": pull.id, "number": pull.number,
        "url": format!("{ROOT_URL}{full}/pulls/{}", pull.number),
        "html_url": format!("{ROOT_URL}{full}/pulls/{}", pull.number),
        "diff_url": format!("{ROOT_URL}{full}/pulls/{}.diff", pull.number),
        "patch_url": format!("{ROOT_URL}{full}/pulls/{}.patch", pull.number),
        "user": user_json(state, &pull.poster),
        "title": pull.title, "body": pull.body,
        "labels": labels, "milestone": null, "assignee": null, "assignees": null,
        "requested_reviewers": null, "requested_reviewers_teams": null,
        "state": if pull.open { "open" } else { "closed" },
        "draft": false, "is_locked": false, "comments": comments, "review_comments": 0,
        "additions": 1, "deletions": 1, "changed_files": 1,
        "mergeable": pull.open, "merged": pull.merged,
        "merged_at": pull.merged_at.map(time),
        "merge_commit_sha": pull.merge_commit_sha,
        "merged_by": pull.merged_by.as_deref().map(|u| user_json(state, u)),
        "allow_maintainer_edit": false,
        "base": {
            "label": pull.base_ref, "ref": pull.base_ref, "sha": base_sha,
            "repo_id": pull.repo_id, "repo": repo_json(inner, state, pull.repo_id)
        },
        "head": {
            "label": pull.head_ref, "ref": pull.head_ref, "sha": pull.head_sha,
            "repo_id": pull.head_repo_id, "repo": repo_json(inner, state, pull.head_repo_id)
        },
        "merge_base": base_sha, "due_date": null,
        "created_at": time(pull.created), "updated_at": time(pull.updated),
        "closed_at": pull.closed_at.map(time), "pin_order": 0
    })
}

fn comment_json(state: &ServerState, comment: &Comment) -> Value {
    json!({
        "id": comment.id,
        "html_url": format!("{ROOT_URL}issues/{}#issuecomment-{}", comment.issue, comment.id),
        "pull_request_url": "", "issue_url": "",
        "user": user_json(state, &comment.user), "original_author": "", "original_author_id": 0,
        "body": comment.body, "assets": [],
        "created_at": time(comment.created), "updated_at": time(comment.updated)
    })
}

fn status_json(state: &ServerState, status: &CommitStatus) -> Value {
    json!({
        "id": status.id, "status": status.state, "target_url": status.target_url,
        "description": status.description,
        "url": format!("{ROOT_URL}api/v1/repos/statuses/{}", status.sha),
        "context": status.context, "creator": user_json(state, &status.creator),
        "created_at": time(status.created), "updated_at": time(status.created)
    })
}

/// One page of `items` as Gitea answers a list: `X-Total-Count` and a `Link` on
/// [`ROOT_URL`].
fn paged(req: &Req, route: &str, pairs: &[(String, String)], items: Vec<Value>) -> Reply {
    let page: usize = param(pairs, "page")
        .and_then(|p| p.parse().ok())
        .filter(|p| *p > 0)
        .unwrap_or(1);
    let limit: usize = param(pairs, "limit")
        .and_then(|l| l.parse().ok())
        .filter(|l| *l > 0)
        .unwrap_or(DEFAULT_PAGING_NUM)
        .min(MAX_RESPONSE_ITEMS);
    let total = items.len();
    let shown: Vec<Value> = items
        .into_iter()
        .skip((page - 1) * limit)
        .take(limit)
        .collect();
    let pages = total.div_ceil(limit).max(1);
    let (owner, name) = {
        let state = req.state();
        let repo = state.repo(req.repo_id);
        (repo.owner.clone(), repo.name.clone())
    };
    let link_to = |p: usize, rel: &str| {
        let mut query = url::form_urlencoded::Serializer::new(String::new());
        for (k, v) in pairs.iter().filter(|(k, _)| k != "page") {
            query.append_pair(k, v);
        }
        query.append_pair("page", &p.to_string());
        format!(
            "<{ROOT_URL}api/v1/repos/{owner}/{name}/{route}?{}>; rel=\"{rel}\"",
            query.finish()
        )
    };
    let mut links = Vec::new();
    if page < pages {
        links.push(link_to(page + 1, "next"));
        links.push(link_to(pages, "last"));
    }
    if page > 1 {
        links.push(link_to(1, "first"));
        links.push(link_to(page - 1, "prev"));
    }
    let mut reply = Reply::json(StatusCode::OK, Value::Array(shown));
    reply
        .headers
        .push(("X-Total-Count".into(), total.to_string()));
    if !links.is_empty() {
        reply.headers.push(("Link".into(), links.join(",")));
    }
    reply.headers.push((
        "Access-Control-Expose-Headers".into(),
        "X-Total-Count, Link".into(),
    ));
    reply
}

fn list_pulls(req: &Req) -> Reply {
    refresh_pulls(req.inner);
    let pairs = query_pairs(req.query, LIST_PULLS, req.violate);
    let state_filter = param(&pairs, "state").unwrap_or("open");
    let state = req.state();
    let mut pulls: Vec<&Pull> = state
        .pulls
        .iter()
        .filter(|p| p.repo_id == req.repo_id)
        .filter(|p| match state_filter {
            "open" => p.open,
            "closed" => !p.open,
            _ => true,
        })
        .collect();
    match param(&pairs, "sort") {
        Some("oldest") => pulls.sort_by_key(|p| (p.created, p.id)),
        Some("recentupdate") => pulls.sort_by_key(|p| std::cmp::Reverse((p.updated, p.id))),
        Some("leastupdate") => pulls.sort_by_key(|p| (p.updated, p.id)),
        _ => pulls.sort_by_key(|p| std::cmp::Reverse((p.created, p.id))),
    }
    let items: Vec<Value> = pulls
        .iter()
        .map(|p| pull_json(req.inner, &state, p))
        .collect();
    drop(state);
    paged(req, "pulls", &pairs, items)
}

fn get_pull(req: &Req, number: u64) -> Reply {
    refresh_pulls(req.inner);
    query_pairs(req.query, &[], req.violate);
    let state = req.state();
    match state
        .pulls
        .iter()
        .find(|p| p.repo_id == req.repo_id && p.number == number)
    {
        Some(pull) => Reply::json(StatusCode::OK, pull_json(req.inner, &state, pull)),
        None => error(StatusCode::NOT_FOUND, "pull request does not exist"),
    }
}

fn create_pull(req: &Req) -> Reply {
    query_pairs(req.query, &[], req.violate);
    let object = match body_object(req.body, CREATE_PULL, req.violate) {
        Ok(o) => o,
        Err(reply) => return reply,
    };
    let head = str_field(&object, "head").unwrap_or_default();
    let base = str_field(&object, "base").unwrap_or_default();
    let title = str_field(&object, "title").unwrap_or_default();
    let body = str_field(&object, "body").unwrap_or_default();
    if head.contains(':') {
        (req.violate)(format!(
            "head {head:?} names a fork; tagpin's branches are its own"
        ));
    }
    let dir = req.git_dir();
    let Some(head_sha) = git_out(
        &dir,
        &["rev-parse", "--verify", "--quiet", &branch_ref(head)],
    ) else {
        return error(StatusCode::NOT_FOUND, "head branch does not exist");
    };
    if git_out(
        &dir,
        &["rev-parse", "--verify", "--quiet", &branch_ref(base)],
    )
    .is_none()
    {
        return error(StatusCode::NOT_FOUND, "base branch does not exist");
    }
    if head == base {
        return error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid PullRequest: There are no changes between the head and the base",
        );
    }
    let mut state = req.state();
    if let Some(existing) = state.pulls.iter().find(|p| {
        p.open
            && p.repo_id == req.repo_id
            && p.head_repo_id == req.repo_id
            && p.head_ref == head
            && p.base_ref == base
    }) {
        let message = format!(
            "pull request already exists for these targets [id: {}, issue_id: {}, head_repo_id: {}, base_repo_id: {}, head_branch: {head}, base_branch: {base}]",
            existing.id, existing.id, req.repo_id, req.repo_id
        );
        return error(StatusCode::CONFLICT, &message);
    }
    let number = insert_pull(
        &mut state,
        req.repo_id,
        req.repo_id,
        head,
        &head_sha,
        base,
        title,
        body,
        req.login,
    );
    if let Some(ids) = object.get("labels").and_then(Value::as_array) {
        let ids: Vec<u64> = ids.iter().filter_map(Value::as_u64).collect();
        state.pull_mut(req.repo_id, number).labels = ids;
    }
    let pull = state
        .pulls
        .iter()
        .find(|p| p.repo_id == req.repo_id && p.number == number)
        .expect("inserted");
    Reply::json(StatusCode::CREATED, pull_json(req.inner, &state, pull))
}

fn edit_pull(req: &Req, number: u64) -> Reply {
    query_pairs(req.query, &[], req.violate);
    let object = match body_object(req.body, EDIT_PULL, req.violate) {
        Ok(o) => o,
        Err(reply) => return reply,
    };
    let now = SystemTime::now();
    let mut state = req.state();
    let Some(pull) = state
        .pulls
        .iter_mut()
        .find(|p| p.repo_id == req.repo_id && p.number == number)
    else {
        return error(StatusCode::NOT_FOUND, "pull request does not exist");
    };
    if let Some(title) = str_field(&object, "title") {
        if title.is_empty() {
            return binding_error("Title", "RequiredError");
        }
        pull.title = title.to_string();
    }
    if let Some(body) = str_field(&object, "body") {
        pull.body = body.to_string();
    }
    if let Some(s) = str_field(&object, "state") {
        match s {
            "open" if !pull.merged => pull.open = true,
            "closed" => pull.open = false,
            _ => return error(StatusCode::UNPROCESSABLE_ENTITY, "invalid state"),
        }
    }
    pull.updated = now;
    let pull = pull.clone();
    Reply::json(StatusCode::CREATED, pull_json(req.inner, &state, &pull))
}

fn list_labels(req: &Req) -> Reply {
    let pairs = query_pairs(req.query, PAGED, req.violate);
    let items: Vec<Value> = req
        .state()
        .labels
        .iter()
        .filter(|l| l.repo_id == req.repo_id)
        .map(label_json)
        .collect();
    paged(req, "labels", &pairs, items)
}

fn create_label(req: &Req) -> Reply {
    query_pairs(req.query, &[], req.violate);
    let object = match body_object(req.body, CREATE_LABEL, req.violate) {
        Ok(o) => o,
        Err(reply) => return reply,
    };
    let name = str_field(&object, "name").unwrap_or_default();
    let color = str_field(&object, "color").unwrap_or_default();
    let hex = color.trim_start_matches('#');
    if !(hex.len() == 6 || hex.len() == 3) || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return error(StatusCode::UNPROCESSABLE_ENTITY, "invalid color");
    }
    let mut state = req.state();
    let id = FIRST_LABEL_ID + state.labels.len() as u64;
    let label = Label {
        id,
        repo_id: req.repo_id,
        name: name.to_string(),
        color: hex.to_string(),
    };
    state.labels.push(label.clone());
    Reply::json(StatusCode::CREATED, label_json(&label))
}

fn add_issue_labels(req: &Req, number: u64, replace: bool) -> Reply {
    query_pairs(req.query, &[], req.violate);
    let object = match body_object(req.body, ISSUE_LABELS, req.violate) {
        Ok(o) => o,
        Err(reply) => return reply,
    };
    let given = object
        .get("labels")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if let Some(name) = given.iter().find(|v| !v.is_number()) {
        // Names are read only by newer Gitea and Forgejo: tagpin sends ids.
        (req.violate)(format!("label {name} by name, not by id"));
    }
    let mut state = req.state();
    let mut ids = Vec::new();
    for value in &given {
        let found = match value {
            Value::Number(n) => n.as_u64().and_then(|id| {
                state
                    .labels
                    .iter()
                    .find(|l| l.id == id && l.repo_id == req.repo_id)
            }),
            _ => None,
        };
        match found {
            Some(label) => ids.push(label.id),
            None => return error(StatusCode::UNPROCESSABLE_ENTITY, "label does not exist"),
        }
    }
    let Some(pull) = state
        .pulls
        .iter_mut()
        .find(|p| p.repo_id == req.repo_id && p.number == number)
    else {
        return error(StatusCode::NOT_FOUND, "issue does not exist");
    };
    if replace {
        pull.labels.clear();
    }
    for id in ids {
        if !pull.labels.contains(&id) {
            pull.labels.push(id);
        }
    }
    pull.updated = SystemTime::now();
    let labels: Vec<Value> = pull
        .labels
        .clone()
        .iter()
        .filter_map(|id| state.labels.iter().find(|l| l.id == *id))
        .map(label_json)
        .collect();
    Reply::json(StatusCode::OK, Value::Array(labels))
}

fn issue_exists(req: &Req, number: u64) -> bool {
    req.state()
        .pulls
        .iter()
        .any(|p| p.repo_id == req.repo_id && p.number == number)
}

fn list_comments(req: &Req, number: u64) -> Reply {
    query_pairs(req.query, LIST_COMMENTS, req.violate);
    if !issue_exists(req, number) {
        return error(StatusCode::NOT_FOUND, "issue does not exist");
    }
    let state = req.state();
    let items: Vec<Value> = state
        .comments
        .iter()
        .filter(|c| c.repo_id == req.repo_id && c.issue == number)
        .map(|c| comment_json(&state, c))
        .collect();
    Reply::json(StatusCode::OK, Value::Array(items))
}

fn create_comment(req: &Req, number: u64) -> Reply {
    query_pairs(req.query, &[], req.violate);
    let object = match body_object(req.body, COMMENT_BODY, req.violate) {
        Ok(o) => o,
        Err(reply) => return reply,
    };
    if !issue_exists(req, number) {
        return error(StatusCode::NOT_FOUND, "issue does not exist");
    }
    let body = str_field(&object, "body").unwrap_or_default();
    let mut state = req.state();
    let id = add_comment(&mut state, req.repo_id, number, req.login, body);
    let comment = state.comments.iter().find(|c| c.id == id).expect("added");
    Reply::json(StatusCode::CREATED, comment_json(&state, comment))
}

/// `GET` or `PATCH /repos/{owner}/{repo}/issues/comments/{id}`: the poster, or anyone who
/// may write to the repository, may edit.
fn comment_by_id(req: &Req, id: u64, edit: bool) -> Reply {
    query_pairs(req.query, &[], req.violate);
    let object = if edit {
        match body_object(req.body, COMMENT_BODY, req.violate) {
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
        .find(|c| c.id == id && c.repo_id == req.repo_id)
    else {
        return error(StatusCode::NOT_FOUND, "comment does not exist");
    };
    if let Some(object) = object {
        comment.body = str_field(&object, "body").unwrap_or_default().to_string();
        comment.updated = SystemTime::now();
    }
    let comment = comment.clone();
    Reply::json(StatusCode::OK, comment_json(&state, &comment))
}

fn create_status(req: &Req, sha: &str) -> Reply {
    query_pairs(req.query, &[], req.violate);
    let object = match body_object(req.body, CREATE_STATUS, req.violate) {
        Ok(o) => o,
        Err(reply) => return reply,
    };
    let state_name = str_field(&object, "state").unwrap_or_default();
    if !STATES.contains(&state_name) {
        (req.violate)(format!("state {state_name:?} is none of {STATES:?}"));
        return error(StatusCode::BAD_REQUEST, "invalid state");
    }
    let full = sha.len() == 40 && sha.chars().all(|c| c.is_ascii_hexdigit());
    if !full || resolve_commit(&req.git_dir(), sha).as_deref() != Some(sha) {
        return error(StatusCode::NOT_FOUND, "commit does not exist");
    }
    let mut state = req.state();
    let id = FIRST_STATUS_ID + state.statuses.len() as u64;
    let index = 1 + state
        .statuses
        .iter()
        .filter(|s| s.repo_id == req.repo_id && s.sha == sha)
        .count() as u64;
    let status = CommitStatus {
        id,
        repo_id: req.repo_id,
        index,
        sha: sha.to_string(),
        context: str_field(&object, "context")
            .unwrap_or_default()
            .to_string(),
        state: state_name.to_string(),
        description: str_field(&object, "description")
            .unwrap_or_default()
            .to_string(),
        target_url: str_field(&object, "target_url")
            .unwrap_or_default()
            .to_string(),
        creator: req.login.to_string(),
        created: state.clock.now(),
    };
    state.statuses.push(status.clone());
    Reply::json(StatusCode::CREATED, status_json(&state, &status))
}

fn list_statuses(req: &Req, reference: &str, by_ref: bool) -> Reply {
    let pairs = query_pairs(req.query, LIST_STATUSES, req.violate);
    let sha = if by_ref {
        match resolve_commit(&req.git_dir(), reference) {
            Some(sha) => sha,
            None => return error(StatusCode::NOT_FOUND, "ref does not exist"),
        }
    } else {
        reference.to_string()
    };
    let state = req.state();
    let mut statuses: Vec<&CommitStatus> = state
        .statuses
        .iter()
        .filter(|s| s.repo_id == req.repo_id && s.sha == sha)
        .filter(|s| param(&pairs, "state").is_none_or(|want| s.state == want))
        .collect();
    let second = |s: &CommitStatus| {
        s.created
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    };
    match param(&pairs, "sort") {
        Some("oldest") => statuses.sort_by_key(|s| (second(s), s.id)),
        Some("leastindex") => statuses.sort_by_key(|s| std::cmp::Reverse(s.index)),
        Some("highestindex") => statuses.sort_by_key(|s| s.index),
        // `created_unix DESC`: the same second in the order the rows happen to come.
        _ => statuses.sort_by_key(|s| (std::cmp::Reverse(second(s)), s.id)),
    }
    let items: Vec<Value> = statuses.iter().map(|s| status_json(&state, s)).collect();
    drop(state);
    let route = if by_ref {
        format!("commits/{reference}/statuses")
    } else {
        format!("statuses/{reference}")
    };
    paged(req, &route, &pairs, items)
}
