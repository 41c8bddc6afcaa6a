//! A local Azure DevOps REST API (`_apis/git`, `_apis/connectionData`) server for integration
//! tests: one organization (or collection) with projects and Git repositories.
//!
//! tagpin opens and updates pull requests, labels them, keeps one verdict comment thread and
//! posts commit statuses on Azure DevOps. No Azure DevOps is reachable from the test machines,
//! so this module serves the operations tagpin calls, with in-memory state, on a loopback
//! port, under `/{organization}`.
//!
//! Its facts are Microsoft's REST specification (`MicrosoftDocs/vsts-rest-api-specs`,
//! `specification/git/7.1/git.json`) and the routes and types of the npm package
//! `azure-devops-node-api` 17.0.1 (`GitApi.js`, `interfaces/GitInterfaces.d.ts`):
//! - Every request is checked: `api-version` must be present and one Azure DevOps Services or
//!   Server 2020/2022 answers (`6.0`, `7.0`, `7.1`); preview APIs (labels, connection data)
//!   must say `-preview` (Azure DevOps refuses them without: `400`). The token only as HTTP
//!   Basic with an empty user (`base64(":" + token)`); a user name, or a token in the URL,
//!   is a violation. Query parameters must be declared for the route (pull requests:
//!   `searchCriteria.*`, `$top`, `$skip`; statuses: `top`, `skip`, `latestOnly`), enums with
//!   their values, branch names as full refs (`refs/heads/…`). JSON bodies must be objects of
//!   the declared fields of `GitPullRequest`, `WebApiCreateTagRequestData`, `GitStatus`,
//!   `GitPullRequestCommentThread` and `Comment`; an undeclared field is a [`Violation`] (Azure
//!   DevOps would ignore it), and `Drop` fails the test unless it took them.
//! - Azure DevOps's rules: one active pull request per source and target branch (`409`
//!   `TF401179`), a description of at most 4,000 characters (`400`), only a comment's author
//!   may edit it (`403`), a read token cannot write (`403`), an unknown token is `401` (or,
//!   with [`Fault::sign_in_page`], the `203` HTML sign-in page some routes answer), a project
//!   or repository the server does not have is `404` (`TF401019`).
//! - Pull request ids are the organization's, from 1. Lists answer `{"count", "value"}`;
//!   pull requests newest first and paged by `$top` (101 when not given) and `$skip`, each
//!   description cut to its first 400 UTF-16 code units ([`LIST_DESCRIPTION`]; the reference
//!   of Get Pull Requests: "description field will be truncated up to 400 symbols");
//!   statuses by `top` and `skip`; threads in one list. Times carry seven fractional digits,
//!   as .NET writes them.
//! - Branches, commits and completions are real: the repository is a bare Git repository, an
//!   active pull request's `lastMergeSourceCommit` follows its branch, and a person completing
//!   it ([`AzureDevOpsServer::complete_pull_as`]) makes Azure DevOps's merge commit
//!   (`Merged PR N: title`), which becomes `lastMergeCommit`.
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
use base64::Engine;
use serde_json::{json, Value};
use tokio::task::JoinHandle;

use super::http_fake::{self, fault_status, set_headers, FaultScope};

pub use http_fake::RecordedRequest;

/// The `api-version`s a server of Azure DevOps Services or Server 2020/2022 answers.
pub const API_VERSIONS: [&str; 3] = ["6.0", "7.0", "7.1"];
/// The longest pull request description Azure DevOps keeps.
pub const MAX_DESCRIPTION: usize = 4000;
/// `$top` when a pull request list does not say.
pub const DEFAULT_TOP: usize = 101;
/// How much of a description a pull request list answers ("Get Pull Requests": "description
/// field will be truncated up to 400 symbols in the result"), in UTF-16 code units, as .NET
/// counts a string's length. One pull request read by id carries it whole.
pub const LIST_DESCRIPTION: usize = 400;

/// What a token may do: the Code scope, read and write or read only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    Write,
    Read,
}

/// A pull request's state (`PullRequestStatus`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrStatus {
    Active,
    Completed,
    Abandoned,
}

impl PrStatus {
    fn word(self) -> &'static str {
        match self {
            PrStatus::Active => "active",
            PrStatus::Completed => "completed",
            PrStatus::Abandoned => "abandoned",
        }
    }
}

/// A pull request as the server holds it.
#[derive(Clone, Debug)]
pub struct Pull {
    pub id: u64,
    /// The target repository's name.
    pub repo: String,
    pub title: String,
    pub description: String,
    pub status: PrStatus,
    /// `refs/heads/…`.
    pub source_ref: String,
    pub target_ref: String,
    pub source_sha: String,
    pub merge_commit: Option<String>,
    /// The repository the source branch is in, for a fork's pull request.
    pub fork: Option<String>,
    pub created_by: String,
    pub labels: Vec<String>,
    /// Its external properties (the Pull Request Properties API), by name.
    pub properties: BTreeMap<String, String>,
    pub created: SystemTime,
    pub closed: Option<SystemTime>,
}

impl Pull {
    /// `tagpin/main` of `refs/heads/tagpin/main`.
    pub fn source_branch(&self) -> String {
        self.source_ref
            .strip_prefix("refs/heads/")
            .unwrap_or(&self.source_ref)
            .to_string()
    }
}

#[derive(Clone, Debug)]
pub struct Comment {
    pub id: u64,
    pub author: String,
    pub content: String,
    pub comment_type: u64,
    pub deleted: bool,
}

#[derive(Clone, Debug)]
pub struct Thread {
    pub id: u64,
    pub pull: u64,
    pub status: Value,
    pub comments: Vec<Comment>,
}

#[derive(Clone, Debug)]
pub struct CommitStatus {
    pub id: u64,
    pub repo: String,
    pub sha: String,
    pub genre: Option<String>,
    pub name: String,
    pub state: String,
    pub description: String,
    pub creator: String,
    pub created: SystemTime,
}

impl CommitStatus {
    /// `genre/name`, as the web page shows it.
    pub fn context(&self) -> String {
        match &self.genre {
            Some(genre) if !genre.is_empty() => format!("{genre}/{}", self.name),
            _ => self.name.clone(),
        }
    }
}

/// A request Azure DevOps would refuse, or would silently misread.
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
#[derive(Clone, Debug)]
pub struct Fault {
    scope: FaultScope,
    status: u16,
    headers: Vec<(String, String)>,
    body: Option<String>,
}

impl Fault {
    /// The next request to `method` whose path contains `path_contains` is answered `status`
    /// before any work is done.
    pub fn new(method: &str, path_contains: &str, status: u16) -> Self {
        Fault {
            scope: FaultScope::new(method, path_contains),
            status,
            headers: Vec::new(),
            body: None,
        }
    }

    /// Azure DevOps's `429`: `Retry-After` and its `X-RateLimit-*` headers.
    pub fn rate_limited(method: &str, path_contains: &str, retry_after: u64) -> Self {
        let reset = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            + retry_after;
        Fault::new(method, path_contains, 429)
            .header("Retry-After", &retry_after.to_string())
            .header("X-RateLimit-Resource", "Core")
            .header("X-RateLimit-Delay", "1.5")
            .header("X-RateLimit-Limit", "200")
            .header("X-RateLimit-Remaining", "0")
            .header("X-RateLimit-Reset", &reset.to_string())
    }

    /// The `203 Non-Authoritative Information` HTML sign-in page Azure DevOps answers some
    /// routes with for a token it does not accept.
    pub fn sign_in_page(method: &str, path_contains: &str) -> Self {
        let mut fault = Fault::new(method, path_contains, 203)
            .header("Content-Type", "text/html; charset=utf-8");
        fault.body = Some(
            "<!DOCTYPE html><html><head><title>Azure DevOps Services | Sign In</title></head><body>Sign in</body></html>".into(),
        );
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
        self.body = Some(body.to_string());
        self
    }
}

/// A running local Azure DevOps organization. Stops when dropped.
pub struct AzureDevOpsServer {
    inner: Arc<Inner>,
    task: JoinHandle<()>,
}

struct Inner {
    base: String,
    org: String,
    state: Mutex<ServerState>,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, ServerState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[derive(Default)]
struct ServerState {
    /// Identity name -> id (a GUID).
    identities: BTreeMap<String, String>,
    tokens: Vec<(String, String, Scope)>,
    repos: Vec<Repo>,
    pulls: Vec<Pull>,
    threads: Vec<Thread>,
    statuses: Vec<CommitStatus>,
    requests: Vec<RecordedRequest>,
    violations: Vec<Violation>,
    faults: Vec<Fault>,
    /// What the server records as a commit status's time ([`Self::turn_back_clock`] of the
    /// server).
    clock: http_fake::Clock,
}

struct Repo {
    id: String,
    project: String,
    name: String,
    git_dir: PathBuf,
}

impl ServerState {
    fn ensure_identity(&mut self, name: &str) -> String {
        let n = self.identities.len() as u64 + 1;
        self.identities
            .entry(name.to_string())
            .or_insert_with(|| format!("{:08x}-51c4-4e9a-9b1d-{n:012x}", 0x7a9e_0000u64 + n))
            .clone()
    }

    fn id_of(&self, name: &str) -> String {
        self.identities
            .get(name)
            .cloned()
            .unwrap_or_else(|| panic!("no identity {name}"))
    }

    fn repo(&self, project: &str, name: &str) -> Option<&Repo> {
        self.repos.iter().find(|r| {
            r.project.eq_ignore_ascii_case(project)
                && (r.name.eq_ignore_ascii_case(name) || r.id.eq_ignore_ascii_case(name))
        })
    }

    fn pull_mut(&mut self, id: u64) -> &mut Pull {
        self.pulls
            .iter_mut()
            .find(|p| p.id == id)
            .unwrap_or_else(|| panic!("no pull request !{id}"))
    }
}

impl AzureDevOpsServer {
    /// Starts organization `org` with identity `user`, whose token `token` may write, and
    /// project `project` with Git repository `repo` backed by the bare repository `bare_repo`.
    pub async fn start(
        token: &str,
        user: &str,
        org: &str,
        project: &str,
        repo: &str,
        bare_repo: &Path,
    ) -> AzureDevOpsServer {
        let (listener, base) = http_fake::loopback("Azure DevOps").await;
        let inner = Arc::new(Inner {
            base,
            org: org.to_string(),
            state: Mutex::new(ServerState::default()),
        });
        let router = Router::new().fallback(handle).with_state(inner.clone());
        let task = http_fake::serve(listener, router, "Azure DevOps");
        let server = AzureDevOpsServer { inner, task };
        server.add_token(token, user, Scope::Write);
        server.inner.lock().repos.push(Repo {
            id: "3411ebc1-d5aa-464f-9615-0b527bc66719".into(),
            project: project.to_string(),
            name: repo.to_string(),
            git_dir: bare_repo.to_path_buf(),
        });
        server
    }

    /// `http://127.0.0.1:PORT/ORG`: what `forge.api_url` names (an on-premises collection's
    /// address, `https://HOST/tfs/COLLECTION`, has the same shape).
    pub fn api_url(&self) -> String {
        format!("{}/{}", self.inner.base, self.inner.org)
    }

    /// The identity id (GUID) of `name`, added if missing.
    pub fn identity(&self, name: &str) -> String {
        self.inner.lock().ensure_identity(name)
    }

    /// A personal access token of `user` (added if missing) with `scope`.
    pub fn add_token(&self, token: &str, user: &str, scope: Scope) {
        let mut state = self.inner.lock();
        state.ensure_identity(user);
        state.tokens.retain(|(t, ..)| t != token);
        state
            .tokens
            .push((token.to_string(), user.to_string(), scope));
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

    /// A person opens a pull request from `source` into `target` on the web page.
    pub fn open_pull_as(
        &self,
        user: &str,
        repo: &str,
        source: &str,
        target: &str,
        title: &str,
    ) -> u64 {
        let mut state = self.inner.lock();
        let git_dir = repo_dir(&state, repo);
        let sha = git_out(&git_dir, &["rev-parse", &branch_ref(source)])
            .unwrap_or_else(|| panic!("no branch {source}"));
        insert_pull(
            &mut state, repo, None, source, &sha, target, title, "", user,
        )
    }

    /// `user` forks `repo` and opens a pull request from the fork's branch `source` (at
    /// `sha`, a commit the repository has) into `target`.
    #[allow(clippy::too_many_arguments)]
    pub fn open_fork_pull_as(
        &self,
        user: &str,
        repo: &str,
        source: &str,
        sha: &str,
        target: &str,
        title: &str,
        description: &str,
    ) -> u64 {
        let mut state = self.inner.lock();
        let fork = format!("{repo}-{user}");
        insert_pull(
            &mut state,
            repo,
            Some(fork),
            source,
            sha,
            target,
            title,
            description,
            user,
        )
    }

    /// A person abandons pull request `id`.
    pub fn abandon_pull_as(&self, user: &str, id: u64) {
        let mut state = self.inner.lock();
        state.ensure_identity(user);
        let pull = state.pull_mut(id);
        assert_eq!(pull.status, PrStatus::Active, "!{id} is not active");
        pull.status = PrStatus::Abandoned;
        pull.closed = Some(SystemTime::now());
    }

    /// A person completes pull request `id` with a merge commit (no fast-forward, Azure
    /// DevOps's default): the target branch moves to it. Returns the merge commit.
    pub fn complete_pull_as(&self, user: &str, id: u64) -> String {
        self.refresh();
        let (pull, git_dir) = {
            let mut state = self.inner.lock();
            state.ensure_identity(user);
            let pull = state.pull_mut(id).clone();
            let dir = repo_dir(&state, &pull.repo);
            (pull, dir)
        };
        assert_eq!(pull.status, PrStatus::Active, "!{id} is not active");
        let base = git_out(&git_dir, &["rev-parse", &pull.target_ref])
            .unwrap_or_else(|| panic!("target {} is gone", pull.target_ref));
        let tree = git_out(
            &git_dir,
            &["merge-tree", "--write-tree", &base, &pull.source_sha],
        )
        .unwrap_or_else(|| panic!("!{id} has conflicts"));
        let tree = tree.lines().next().unwrap_or_default().to_string();
        let message = format!("Merged PR {id}: {}", pull.title);
        let email = format!("{user}@acme.example.com");
        let mut command = super::git::git_command();
        command
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
            .env("GIT_AUTHOR_NAME", user)
            .env("GIT_AUTHOR_EMAIL", &email)
            .env("GIT_COMMITTER_NAME", user)
            .env("GIT_COMMITTER_EMAIL", &email);
        let output = command.output().expect("run git commit-tree");
        assert!(output.status.success(), "git commit-tree failed");
        let merge = String::from_utf8_lossy(&output.stdout).trim().to_string();
        assert!(
            git_out(&git_dir, &["update-ref", &pull.target_ref, &merge, &base]).is_some(),
            "move {} to {merge}",
            pull.target_ref
        );
        let mut state = self.inner.lock();
        let p = state.pull_mut(id);
        p.status = PrStatus::Completed;
        p.merge_commit = Some(merge.clone());
        p.closed = Some(SystemTime::now());
        merge
    }

    /// A person starts a comment thread on pull request `id`.
    pub fn comment_as(&self, user: &str, id: u64, content: &str) {
        let mut state = self.inner.lock();
        let author = state.ensure_identity(user);
        let thread = next_thread_id(&state, id);
        state.threads.push(Thread {
            id: thread,
            pull: id,
            status: json!("active"),
            comments: vec![Comment {
                id: 1,
                author,
                content: content.to_string(),
                comment_type: 1,
                deleted: false,
            }],
        });
    }

    /// Every pull request, by id.
    pub fn pulls(&self) -> Vec<Pull> {
        self.refresh();
        let mut pulls = self.inner.lock().pulls.clone();
        pulls.sort_by_key(|p| p.id);
        pulls
    }

    /// The threads of pull request `id`, oldest first.
    pub fn threads(&self, id: u64) -> Vec<Thread> {
        let state = self.inner.lock();
        state
            .threads
            .iter()
            .filter(|t| t.pull == id)
            .cloned()
            .collect()
    }

    /// The text comments on pull request `id`, oldest first.
    pub fn comments(&self, id: u64) -> Vec<Comment> {
        self.threads(id)
            .into_iter()
            .flat_map(|t| t.comments)
            .filter(|c| c.comment_type == 1 && !c.deleted)
            .collect()
    }

    /// The statuses on `sha`, oldest first.
    pub fn statuses(&self, sha: &str) -> Vec<CommitStatus> {
        let state = self.inner.lock();
        state
            .statuses
            .iter()
            .filter(|s| s.sha == sha)
            .cloned()
            .collect()
    }

    /// `user` floods `sha` in `repo` with `count` succeeded statuses of contexts of its own
    /// (genre `ci`, name `step-N`), as that many posts through the API would leave them: a CI
    /// job that posts one per step of a long pipeline, or someone burying tagpin's.
    pub fn flood_statuses_as(&self, user: &str, repo: &str, sha: &str, count: usize) {
        let mut state = self.inner.lock();
        state.ensure_identity(user);
        let now = state.clock.now();
        for n in 0..count {
            let id = state.statuses.len() as u64 + 1;
            state.statuses.push(CommitStatus {
                id,
                repo: repo.to_string(),
                sha: sha.to_string(),
                genre: Some("ci".into()),
                name: format!("step-{n}"),
                state: "succeeded".into(),
                description: String::new(),
                creator: user.to_string(),
                created: now,
            });
        }
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
        http_fake::assert_no_violations(&self.violations(), "Azure DevOps", "refuse or misread");
    }

    fn refresh(&self) {
        refresh_pulls(&self.inner);
    }
}

/// Active pull requests' `lastMergeSourceCommit` follows their branches (a fork's stays), as
/// Azure DevOps updates it after a push.
fn refresh_pulls(inner: &Inner) {
    let active: Vec<(u64, String, PathBuf)> = {
        let state = inner.lock();
        state
            .pulls
            .iter()
            .filter(|p| p.status == PrStatus::Active && p.fork.is_none())
            .map(|p| (p.id, p.source_ref.clone(), repo_dir(&state, &p.repo)))
            .collect()
    };
    for (id, source, dir) in active {
        if let Some(sha) = git_out(&dir, &["rev-parse", "--verify", "--quiet", &source]) {
            inner.lock().pull_mut(id).source_sha = sha;
        }
    }
}

impl Drop for AzureDevOpsServer {
    fn drop(&mut self) {
        self.task.abort();
        http_fake::fail_on_untaken(
            &self.inner.lock().violations,
            "AzureDevOps",
            "refuse or misread",
        );
    }
}

fn repo_dir(state: &ServerState, repo: &str) -> PathBuf {
    state
        .repos
        .iter()
        .find(|r| r.name == repo)
        .unwrap_or_else(|| panic!("no repository {repo}"))
        .git_dir
        .clone()
}

fn next_thread_id(state: &ServerState, pull: u64) -> u64 {
    state.threads.iter().filter(|t| t.pull == pull).count() as u64 + 1
}

#[allow(clippy::too_many_arguments)]
fn insert_pull(
    state: &mut ServerState,
    repo: &str,
    fork: Option<String>,
    source: &str,
    sha: &str,
    target: &str,
    title: &str,
    description: &str,
    user: &str,
) -> u64 {
    state.ensure_identity(user);
    let id = state.pulls.len() as u64 + 1;
    state.pulls.push(Pull {
        id,
        repo: repo.to_string(),
        title: title.to_string(),
        description: description.to_string(),
        status: PrStatus::Active,
        source_ref: branch_ref(source),
        target_ref: branch_ref(target),
        source_sha: sha.to_string(),
        merge_commit: None,
        fork,
        created_by: user.to_string(),
        labels: Vec::new(),
        properties: BTreeMap::new(),
        created: SystemTime::now(),
        closed: None,
    });
    id
}

fn git_out(dir: &Path, args: &[&str]) -> Option<String> {
    let output = super::git::run_git(dir, args);
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_string())
}

/// `description` as a pull request list answers it: its first [`LIST_DESCRIPTION`] UTF-16
/// code units (a pair is never split here; whether Azure DevOps splits one is not known).
fn listed_description(description: &str) -> String {
    let mut units = 0;
    description
        .chars()
        .take_while(|c| {
            units += c.len_utf16();
            units <= LIST_DESCRIPTION
        })
        .collect()
}

fn branch_ref(branch: &str) -> String {
    format!("refs/heads/{branch}")
}

/// `2026-01-02T03:04:05.1234567Z`: seven fractional digits, as .NET writes a `DateTime`.
fn time(at: SystemTime) -> String {
    let since = at.duration_since(SystemTime::UNIX_EPOCH).unwrap();
    let ts = k8s_openapi::jiff::Timestamp::from_second(since.as_secs() as i64).unwrap();
    let text = ts.strftime("%Y-%m-%dT%H:%M:%S").to_string();
    format!("{text}.{:07}Z", since.subsec_nanos() / 100)
}

// ---------------------------------------------------------------------------
// Declared parameters and bodies
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq)]
enum Type {
    Str,
    Bool,
    Int,
    List,
    Object,
    /// An enum, as its name or its number.
    Enum,
}

/// A body field: name, type, required.
type Field = (&'static str, Type, bool);

/// `GitPullRequest` as a create or update body takes it.
const PULL_REQUEST: &[Field] = &[
    ("sourceRefName", Type::Str, false),
    ("targetRefName", Type::Str, false),
    ("title", Type::Str, false),
    ("description", Type::Str, false),
    ("isDraft", Type::Bool, false),
    ("reviewers", Type::List, false),
    ("workItemRefs", Type::List, false),
    ("labels", Type::List, false),
    ("status", Type::Enum, false),
    ("completionOptions", Type::Object, false),
    ("mergeOptions", Type::Object, false),
    ("autoCompleteSetBy", Type::Object, false),
    ("lastMergeSourceCommit", Type::Object, false),
    ("forkSource", Type::Object, false),
];
const NEW_LABEL: &[Field] = &[("name", Type::Str, true)];
const NEW_STATUS: &[Field] = &[
    ("state", Type::Enum, false),
    ("description", Type::Str, false),
    ("context", Type::Object, true),
    ("targetUrl", Type::Str, false),
];
const NEW_THREAD: &[Field] = &[
    ("comments", Type::List, true),
    ("status", Type::Enum, false),
    ("properties", Type::Object, false),
    ("threadContext", Type::Object, false),
    ("pullRequestThreadContext", Type::Object, false),
];
const COMMENT: &[Field] = &[
    ("parentCommentId", Type::Int, false),
    ("content", Type::Str, false),
    ("commentType", Type::Enum, false),
];
const STATUS_STATES: [&str; 7] = [
    "notSet",
    "pending",
    "succeeded",
    "failed",
    "error",
    "notApplicable",
    "partiallySucceeded",
];

/// Query parameters a route declares (besides `api-version`), with enum values where there
/// are some.
type Param = (&'static str, &'static [&'static str]);
const LIST_PULLS: &[Param] = &[
    ("searchCriteria.creatorId", &[]),
    ("searchCriteria.includeLinks", &["true", "false"]),
    ("searchCriteria.repositoryId", &[]),
    ("searchCriteria.reviewerId", &[]),
    ("searchCriteria.sourceRefName", &[]),
    ("searchCriteria.sourceRepositoryId", &[]),
    (
        "searchCriteria.status",
        &["notSet", "active", "abandoned", "completed", "all"],
    ),
    ("searchCriteria.targetRefName", &[]),
    ("searchCriteria.title", &[]),
    ("searchCriteria.minTime", &[]),
    ("searchCriteria.maxTime", &[]),
    ("searchCriteria.queryTimeRangeType", &["created", "closed"]),
    ("maxCommentLength", &[]),
    ("$skip", &[]),
    ("$top", &[]),
];
const GET_PULL: &[Param] = &[
    ("maxCommentLength", &[]),
    ("$skip", &[]),
    ("$top", &[]),
    ("includeCommits", &["true", "false"]),
    ("includeWorkItemRefs", &["true", "false"]),
];
const CREATE_PULL: &[Param] = &[("supportsIterations", &["true", "false"])];
const LIST_STATUSES: &[Param] = &[
    ("top", &[]),
    ("skip", &[]),
    ("latestOnly", &["true", "false"]),
];
const LIST_THREADS: &[Param] = &[("$iteration", &[]), ("$baseIteration", &[])];
const NONE: &[Param] = &[];

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

/// Azure DevOps's error answer (`WrappedException`).
fn error(status: StatusCode, code: &str, message: &str, type_key: &str) -> Reply {
    Reply::json(
        status,
        json!({"$id": "1", "innerException": null,
               "message": format!("{code}: {message}"),
               "typeName": format!("Microsoft.TeamFoundation.SourceControl.WebServer.{type_key}, Microsoft.TeamFoundation.SourceControl.WebServer"),
               "typeKey": type_key, "errorCode": 0, "eventId": 3000}),
    )
}

fn bad_request(message: &str) -> Reply {
    error(
        StatusCode::BAD_REQUEST,
        "TF400898",
        message,
        "InvalidArgumentValueException",
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
                "TF000000",
                &format!("the test server panicked: {panic}"),
                "Exception",
            )
        });
    let mut response = Response::new(Body::from(reply.body));
    *response.status_mut() = reply.status;
    let headers = response.headers_mut();
    set_headers(
        headers,
        [(
            "content-type",
            "application/json; charset=utf-8; api-version=7.1",
        )],
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
            .find(|(t, ..)| t == token)
            .map(|(_, user, scope)| (user.clone(), *scope))
    });
    let index = http_fake::record(
        &mut inner.lock().requests,
        method.as_str(),
        &path,
        query.as_deref(),
        body,
        user.as_ref().map(|(u, _)| u.clone()),
    );
    let pairs: Vec<(String, String)> =
        url::form_urlencoded::parse(query.as_deref().unwrap_or("").as_bytes())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
    if pairs
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("access_token") || k.eq_ignore_ascii_case("token"))
    {
        violate("a token in the URL (it is logged by proxies)".into());
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
            body: fault.body.unwrap_or_else(|| {
                json!({"message": http_fake::canonical_reason(fault.status)}).to_string()
            }),
            headers: fault.headers,
        },
        None => {
            refresh_pulls(inner);
            let content_type = parts
                .headers
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            route(
                inner,
                &method,
                &path,
                &pairs,
                (body, &content_type),
                user,
                &violate,
            )
        }
    };
    inner.lock().requests[index].status = reply.status.as_u16();
    reply
}

/// The token of `Authorization: Basic base64(":" + token)`; a user name before the colon is
/// a violation (Azure DevOps ignores it, but tagpin sends none).
fn presented_token(headers: &HeaderMap, violate: &dyn Fn(String)) -> Option<String> {
    let value = headers.get("authorization")?.to_str().ok()?;
    let Some((scheme, encoded)) = value.split_once(' ') else {
        violate("an Authorization header without a scheme".into());
        return None;
    };
    if !scheme.eq_ignore_ascii_case("basic") {
        violate(format!(
            "Authorization scheme {scheme:?}: a personal access token goes as Basic"
        ));
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (user, token) = decoded.split_once(':')?;
    if !user.is_empty() {
        violate("a user name in Basic authentication: tagpin sends an empty one".into());
    }
    Some(token.to_string())
}

/// Checks the query against `declared` (and `api-version`, `preview` for a preview API);
/// answers Azure DevOps's refusal of a missing or wrong version.
fn check_query(
    pairs: &[(String, String)],
    declared: &[Param],
    preview: bool,
    violate: &dyn Fn(String),
) -> Result<(), Reply> {
    for (key, value) in pairs {
        if key == "api-version" {
            continue;
        }
        match declared.iter().find(|(name, _)| name == key) {
            None => violate(format!(
                "query parameter {key:?} is not declared for this route"
            )),
            Some((_, values)) if !values.is_empty() && !values.contains(&value.as_str()) => {
                violate(format!("{key}={value:?} is none of {values:?}"))
            }
            Some(_) if key.ends_with("top") || key.ends_with("skip") => {
                if value.parse::<u64>().is_err() {
                    violate(format!("{key}={value:?} is not a number"));
                }
            }
            Some(_) if key.ends_with("RefName") && !value.starts_with("refs/") => violate(format!(
                "{key}={value:?} is not a full ref name (Azure DevOps would match none)"
            )),
            Some(_) if key.ends_with("Time") => {
                if value.parse::<k8s_openapi::jiff::Timestamp>().is_err() {
                    violate(format!("{key}={value:?} is not a date and time"));
                }
            }
            Some(_) => {}
        }
    }
    let versions: Vec<&str> = pairs
        .iter()
        .filter(|(k, _)| k == "api-version")
        .map(|(_, v)| v.as_str())
        .collect();
    let [version] = versions[..] else {
        violate(format!("api-version given {} times", versions.len()));
        return Err(error(
            StatusCode::BAD_REQUEST,
            "VS800075",
            "The project collection requires an api-version",
            "VssVersionNotSpecifiedException",
        ));
    };
    let (number, stage) = match version.split_once('-') {
        Some((number, stage)) => (number, Some(stage)),
        None => (version, None),
    };
    let stage_ok = match stage {
        None => !preview,
        Some(stage) => {
            stage == "preview"
                || stage
                    .strip_prefix("preview.")
                    .is_some_and(|n| n.parse::<u32>().is_ok())
        }
    };
    if !API_VERSIONS.contains(&number) || !stage_ok {
        violate(format!(
            "api-version={version:?} is not one this API answers"
        ));
        let message = if preview && stage.is_none() {
            "The requested version of the resource is under preview. The -preview flag must be supplied in the api-version for such requests"
        } else {
            "The requested REST API version is out of range"
        };
        return Err(error(
            StatusCode::BAD_REQUEST,
            "VS800001",
            message,
            "VssInvalidPreviewVersionException",
        ));
    }
    Ok(())
}

fn param<'p>(pairs: &'p [(String, String)], name: &str) -> Option<&'p str> {
    pairs
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// The JSON body as an object of `declared` fields, or the refusal.
fn body_object(
    body: &str,
    declared: &[Field],
    violate: &dyn Fn(String),
) -> Result<serde_json::Map<String, Value>, Reply> {
    let Ok(Value::Object(object)) = serde_json::from_str::<Value>(body) else {
        violate("the body is not a JSON object".into());
        return Err(bad_request("The body of the request is not valid"));
    };
    check_fields(&object, declared, violate)?;
    Ok(object)
}

fn check_fields(
    object: &serde_json::Map<String, Value>,
    declared: &[Field],
    violate: &dyn Fn(String),
) -> Result<(), Reply> {
    for (key, value) in object {
        let Some((_, kind, _)) = declared.iter().find(|(name, ..)| name == key) else {
            violate(format!("field {key:?} is not declared for this route"));
            continue;
        };
        let ok = match kind {
            Type::Str => value.is_string(),
            Type::Bool => value.is_boolean(),
            Type::Int => value.is_u64(),
            Type::List => value.is_array(),
            Type::Object => value.is_object(),
            Type::Enum => value.is_string() || value.is_u64(),
        };
        if !ok {
            violate(format!("field {key:?} has the wrong type: {value}"));
            return Err(bad_request(&format!("The value of {key} is not valid")));
        }
    }
    for (name, _, required) in declared {
        if *required && !object.contains_key(*name) {
            violate(format!("required field {name:?} is missing"));
            return Err(bad_request(&format!("{name} is required")));
        }
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn route(
    inner: &Arc<Inner>,
    method: &Method,
    path: &str,
    pairs: &[(String, String)],
    (body, content_type): (&str, &str),
    user: Option<(String, Scope)>,
    violate: &dyn Fn(String),
) -> Reply {
    let segments: Vec<String> = path
        .trim_matches('/')
        .split('/')
        .map(http_fake::percent_decode)
        .collect();
    let segs: Vec<&str> = segments.iter().map(String::as_str).collect();
    let lower: Vec<String> = segs.iter().map(|s| s.to_ascii_lowercase()).collect();
    let low: Vec<&str> = lower.iter().map(String::as_str).collect();
    if segs.first() != Some(&inner.org.as_str()) {
        violate(format!("{path} is not under the organization"));
        return error(
            StatusCode::NOT_FOUND,
            "TF400813",
            "not found",
            "NotFoundException",
        );
    }
    let Some((who, scope)) = user else {
        return error(
            StatusCode::UNAUTHORIZED,
            "TF400813",
            "The user is not authorized to access this resource",
            "UnauthorizedRequestException",
        );
    };
    let writes = *method != Method::GET;
    if writes && scope == Scope::Read {
        return error(
            StatusCode::FORBIDDEN,
            "TF401027",
            "You need the Git 'Contribute' permission to perform this action",
            "GitNeedsPermissionException",
        );
    }
    // {org}/_apis/connectionData
    if low[1..] == ["_apis", "connectiondata"] && *method == Method::GET {
        if let Err(reply) = check_query(
            pairs,
            &[
                ("connectOptions", &[]),
                ("lastChangeId", &[]),
                ("lastChangeId64", &[]),
            ],
            true,
            violate,
        ) {
            return reply;
        }
        let id = inner.lock().id_of(&who);
        return Reply::json(
            StatusCode::OK,
            json!({"authenticatedUser": {"id": id, "descriptor": format!("Microsoft.IdentityModel.Claims.ClaimsIdentity;{who}"),
                    "providerDisplayName": who, "isActive": true, "properties": {}},
                   "authorizedUser": {"id": id, "providerDisplayName": who},
                   "instanceId": "0b6c8a7e-0f7b-4f6a-9a3e-9ad7f3b1c2d4", "deploymentType": "hosted"}),
        );
    }
    // {org}/{project}/_apis/git/repositories/{repo}/...
    if low.len() < 6 || low[2..5] != ["_apis", "git", "repositories"] {
        violate(format!("{path} is no route tagpin should call"));
        return error(
            StatusCode::NOT_FOUND,
            "TF400813",
            "not found",
            "NotFoundException",
        );
    }
    let (project, repo_name) = (segs[1], segs[5]);
    let repo = {
        let state = inner.lock();
        state
            .repo(project, repo_name)
            .map(|r| (r.name.clone(), r.git_dir.clone(), r.id.clone()))
    };
    let Some((repo, git_dir, repo_id)) = repo else {
        return error(
            StatusCode::NOT_FOUND,
            "TF401019",
            &format!("The Git repository with name or identifier {repo_name} does not exist or you do not have permissions for the operation you are attempting."),
            "GitRepositoryNotFoundException",
        );
    };
    let ctx = Ctx {
        inner,
        repo: &repo,
        repo_id: &repo_id,
        project,
        git_dir: &git_dir,
        who: &who,
        violate,
    };
    let rest = &low[6..];
    let patch_document = rest.last() == Some(&"properties");
    if writes && !body.is_empty() {
        let expected = if patch_document {
            "application/json-patch+json"
        } else {
            "application/json"
        };
        if !content_type.starts_with(expected) {
            violate(format!(
                "Content-Type {content_type:?}: this route takes {expected}"
            ));
            return error(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "VS403430",
                "The request's content type is not supported",
                "UnsupportedMediaTypeException",
            );
        }
    }
    match (method.as_str(), rest) {
        ("GET", ["pullrequests"]) => ctx.list_pulls(pairs),
        ("POST", ["pullrequests"]) => ctx.create_pull(pairs, body),
        ("GET", ["pullrequests", id]) => ctx.with_pull(id, pairs, GET_PULL, false, |ctx, id| {
            let state = ctx.inner.lock();
            let pull = state.pulls.iter().find(|p| p.id == id).unwrap();
            Reply::json(StatusCode::OK, ctx.pull_json(&state, pull))
        }),
        ("PATCH", ["pullrequests", id]) => {
            ctx.with_pull(id, pairs, NONE, false, |ctx, id| ctx.update_pull(id, body))
        }
        ("POST", ["pullrequests", id, "labels"]) => {
            ctx.with_pull(id, pairs, NONE, true, |ctx, id| ctx.add_label(id, body))
        }
        ("GET", ["pullrequests", id, "properties"]) => {
            ctx.with_pull(id, pairs, NONE, true, |ctx, id| ctx.properties(id))
        }
        ("PATCH", ["pullrequests", id, "properties"]) => {
            ctx.with_pull(id, pairs, NONE, true, |ctx, id| {
                ctx.patch_properties(id, body)
            })
        }
        ("GET", ["pullrequests", id, "threads"]) => {
            ctx.with_pull(id, pairs, LIST_THREADS, false, |ctx, id| {
                ctx.list_threads(id)
            })
        }
        ("POST", ["pullrequests", id, "threads"]) => {
            ctx.with_pull(id, pairs, NONE, false, |ctx, id| {
                ctx.create_thread(id, body)
            })
        }
        ("PATCH", ["pullrequests", id, "threads", thread, "comments", comment]) => {
            let (thread, comment) = (thread.to_string(), comment.to_string());
            ctx.with_pull(id, pairs, NONE, false, |ctx, id| {
                ctx.edit_comment(id, &thread, &comment, body)
            })
        }
        ("GET", ["commits", sha, "statuses"]) => {
            if let Err(reply) = check_query(pairs, LIST_STATUSES, false, violate) {
                return reply;
            }
            ctx.list_statuses(sha, pairs)
        }
        ("POST", ["commits", sha, "statuses"]) => {
            if let Err(reply) = check_query(pairs, NONE, false, violate) {
                return reply;
            }
            ctx.create_status(sha, body)
        }
        _ => {
            violate(format!("{method} {path} is no route tagpin should call"));
            error(
                StatusCode::NOT_FOUND,
                "TF400813",
                "not found",
                "NotFoundException",
            )
        }
    }
}

/// One request's repository, caller and violation log.
struct Ctx<'a> {
    inner: &'a Arc<Inner>,
    repo: &'a str,
    repo_id: &'a str,
    project: &'a str,
    git_dir: &'a Path,
    who: &'a str,
    violate: &'a dyn Fn(String),
}

impl Ctx<'_> {
    fn identity_json(&self, state: &ServerState, name: &str) -> Value {
        json!({"id": state.id_of(name), "displayName": name,
               "uniqueName": format!("{name}@acme.example.com"),
               "url": format!("{}/_apis/Identities/{}", self.inner.base, state.id_of(name)),
               "imageUrl": ""})
    }

    /// `GitPullRequest` with the keys of the specification's example answer
    /// (`httpExamples/pullRequests/POST__git_repositories__repositoryId__pullRequests.json`),
    /// labels, and the closing fields once closed. Its `_links` hold no web address, as
    /// Azure DevOps's do not.
    fn pull_json(&self, state: &ServerState, p: &Pull) -> Value {
        let api = format!(
            "{}/{}/_apis/git/repositories/{}",
            self.inner.base, self.inner.org, self.repo_id
        );
        let target_sha = git_out(
            self.git_dir,
            &["rev-parse", "--verify", "--quiet", &p.target_ref],
        )
        .unwrap_or_default();
        let mut value = json!({
            "repository": {"id": self.repo_id, "name": p.repo,
                           "project": {"name": self.project}},
            "pullRequestId": p.id, "codeReviewId": p.id,
            "status": p.status.word(),
            "createdBy": self.identity_json(state, &p.created_by),
            "creationDate": time(p.created),
            "title": p.title,
            "description": p.description,
            "sourceRefName": p.source_ref, "targetRefName": p.target_ref,
            "mergeStatus": "succeeded", "isDraft": false,
            "mergeId": "5f1d2c3b-aaaa-4bbb-8ccc-000000000000",
            "lastMergeSourceCommit": {"commitId": p.source_sha,
                "url": format!("{}/_apis/git/repositories/{}/commits/{}", self.inner.base, self.repo_id, p.source_sha)},
            "reviewers": [],
            "labels": p.labels.iter().enumerate().map(|(n, name)| json!({"id": format!("a1b2c3d4-0000-4000-8000-{n:012}"), "name": name, "active": true})).collect::<Vec<_>>(),
            "lastMergeTargetCommit": {"commitId": target_sha},
            "url": format!("{api}/pullRequests/{}", p.id),
            "supportsIterations": true,
            "artifactId": format!("vstfs:///Git/PullRequestId/a7573007-bbb3-4341-b726-0c4148a07853%2f{}%2f{}", self.repo_id, p.id),
            "_links": {"self": {"href": format!("{api}/pullRequests/{}", p.id)},
                       "repository": {"href": api}},
        });
        if let Some(closed) = p.closed {
            value["closedDate"] = json!(time(closed));
        }
        if let Some(merge) = &p.merge_commit {
            value["lastMergeCommit"] = json!({"commitId": merge});
        }
        if let Some(fork) = &p.fork {
            value["forkSource"] = json!({"name": p.source_ref, "objectId": p.source_sha,
                "repository": {"id": "9e8d7c6b-0000-4000-8000-00000000f0f0", "name": fork}});
        }
        value
    }

    /// Runs `then` for pull request `id` of this repository, after checking the query.
    fn with_pull(
        &self,
        id: &str,
        pairs: &[(String, String)],
        declared: &[Param],
        preview: bool,
        then: impl FnOnce(&Self, u64) -> Reply,
    ) -> Reply {
        if let Err(reply) = check_query(pairs, declared, preview, self.violate) {
            return reply;
        }
        let found = id.parse::<u64>().ok().filter(|id| {
            self.inner
                .lock()
                .pulls
                .iter()
                .any(|p| p.id == *id && p.repo == self.repo)
        });
        match found {
            Some(id) => then(self, id),
            None => error(
                StatusCode::NOT_FOUND,
                "TF401180",
                &format!("The requested pull request was not found: {id}"),
                "GitPullRequestNotFoundException",
            ),
        }
    }

    fn list_pulls(&self, pairs: &[(String, String)]) -> Reply {
        if let Err(reply) = check_query(pairs, LIST_PULLS, false, self.violate) {
            return reply;
        }
        let status = param(pairs, "searchCriteria.status").unwrap_or("active");
        let source = param(pairs, "searchCriteria.sourceRefName");
        let target = param(pairs, "searchCriteria.targetRefName");
        let closed_range = param(pairs, "searchCriteria.queryTimeRangeType") == Some("closed");
        let min = param(pairs, "searchCriteria.minTime")
            .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
            .map(|t| {
                SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(t.as_second().max(0) as u64)
            });
        let top = param(pairs, "$top")
            .and_then(|v| v.parse().ok())
            .unwrap_or(DEFAULT_TOP);
        let skip = param(pairs, "$skip")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let state = self.inner.lock();
        let mut pulls: Vec<&Pull> = state
            .pulls
            .iter()
            .filter(|p| p.repo == self.repo)
            .filter(|p| status == "all" || p.status.word() == status)
            .filter(|p| source.is_none_or(|s| p.source_ref.eq_ignore_ascii_case(s)))
            .filter(|p| target.is_none_or(|t| p.target_ref.eq_ignore_ascii_case(t)))
            .filter(|p| {
                let at = if closed_range {
                    p.closed
                } else {
                    Some(p.created)
                };
                min.is_none_or(|min| at.is_some_and(|at| at >= min))
            })
            .collect();
        pulls.sort_by_key(|p| std::cmp::Reverse(p.id));
        let page: Vec<Value> = pulls
            .into_iter()
            .skip(skip)
            .take(top)
            .map(|p| {
                let mut v = self.pull_json(&state, p);
                // A list carries no links unless asked (searchCriteria.includeLinks).
                if let Some(v) = v.as_object_mut() {
                    v.remove("_links");
                }
                v["description"] = json!(listed_description(&p.description));
                v
            })
            .collect();
        Reply::json(StatusCode::OK, json!({"value": page, "count": page.len()}))
    }

    fn check_description(&self, object: &serde_json::Map<String, Value>) -> Result<(), Reply> {
        let long = object
            .get("description")
            .and_then(Value::as_str)
            .is_some_and(|d| d.chars().count() > MAX_DESCRIPTION);
        if long {
            (self.violate)(format!(
                "a description longer than {MAX_DESCRIPTION} characters"
            ));
            return Err(bad_request(
                "The pull request description is too long: it can hold 4000 characters",
            ));
        }
        Ok(())
    }

    fn create_pull(&self, pairs: &[(String, String)], body: &str) -> Reply {
        if let Err(reply) = check_query(pairs, CREATE_PULL, false, self.violate) {
            return reply;
        }
        let object = match body_object(body, PULL_REQUEST, self.violate) {
            Ok(object) => object,
            Err(reply) => return reply,
        };
        if let Err(reply) = self.check_description(&object) {
            return reply;
        }
        let text = |k: &str| {
            object
                .get(k)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let (source, target, title) = (text("sourceRefName"), text("targetRefName"), text("title"));
        for (name, value) in [
            ("sourceRefName", &source),
            ("targetRefName", &target),
            ("title", &title),
        ] {
            if value.is_empty() {
                (self.violate)(format!("{name} is required to create a pull request"));
                return bad_request(&format!("{name} is required"));
            }
        }
        if !source.starts_with("refs/heads/") || !target.starts_with("refs/heads/") {
            (self.violate)("a branch that is not a full ref (refs/heads/…)".into());
            return bad_request("The source and target must be full ref names");
        }
        let Some(sha) = git_out(self.git_dir, &["rev-parse", "--verify", "--quiet", &source])
        else {
            return error(StatusCode::BAD_REQUEST, "TF401398", "The pull request cannot be activated because the source and/or the target branch no longer exists, or the requested refs are not branches", "GitPullRequestCannotBeActivated");
        };
        let mut state = self.inner.lock();
        let exists = state.pulls.iter().any(|p| {
            p.repo == self.repo
                && p.status == PrStatus::Active
                && p.fork.is_none()
                && p.source_ref == source
                && p.target_ref == target
        });
        if exists {
            return error(
                StatusCode::CONFLICT,
                "TF401179",
                "An active pull request for the source and target branch already exists.",
                "GitPullRequestExistsException",
            );
        }
        let description = text("description");
        let source = source.trim_start_matches("refs/heads/").to_string();
        let target = target.trim_start_matches("refs/heads/").to_string();
        let id = insert_pull(
            &mut state,
            self.repo,
            None,
            &source,
            &sha,
            &target,
            &title,
            &description,
            self.who,
        );
        let pull = state.pulls.iter().find(|p| p.id == id).unwrap();
        Reply::json(StatusCode::CREATED, self.pull_json(&state, pull))
    }

    fn update_pull(&self, id: u64, body: &str) -> Reply {
        let object = match body_object(body, PULL_REQUEST, self.violate) {
            Ok(object) => object,
            Err(reply) => return reply,
        };
        if let Err(reply) = self.check_description(&object) {
            return reply;
        }
        for fixed in ["sourceRefName", "forkSource"] {
            if object.contains_key(fixed) {
                (self.violate)(format!("{fixed} cannot be changed"));
            }
        }
        let mut state = self.inner.lock();
        let pull = state.pull_mut(id);
        if let Some(title) = object.get("title").and_then(Value::as_str) {
            pull.title = title.to_string();
        }
        if let Some(description) = object.get("description").and_then(Value::as_str) {
            pull.description = description.to_string();
        }
        if object.contains_key("status") {
            (self.violate)("tagpin never completes or abandons a pull request".into());
        }
        let pull = state.pulls.iter().find(|p| p.id == id).unwrap();
        Reply::json(StatusCode::OK, self.pull_json(&state, pull))
    }

    fn add_label(&self, id: u64, body: &str) -> Reply {
        let object = match body_object(body, NEW_LABEL, self.violate) {
            Ok(object) => object,
            Err(reply) => return reply,
        };
        let name = object
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if name.is_empty() {
            return bad_request("The label name is required");
        }
        let mut state = self.inner.lock();
        let pull = state.pull_mut(id);
        if !pull.labels.iter().any(|l| l.eq_ignore_ascii_case(&name)) {
            pull.labels.push(name.clone());
        }
        Reply::json(
            StatusCode::OK,
            json!({"id": "a1b2c3d4-0000-4000-8000-000000000000", "name": name, "active": true}),
        )
    }

    /// A `PropertiesCollection`: `{"count", "value": {name: {"$type", "$value"}}}`.
    fn properties(&self, id: u64) -> Reply {
        let state = self.inner.lock();
        let pull = state.pulls.iter().find(|p| p.id == id).unwrap();
        let value: serde_json::Map<String, Value> = pull
            .properties
            .iter()
            .map(|(k, v)| (k.clone(), json!({"$type": "System.String", "$value": v})))
            .collect();
        Reply::json(
            StatusCode::OK,
            json!({"count": value.len(), "value": value}),
        )
    }

    /// A JSON Patch document (RFC 6902) of `add`, `replace` and `remove` operations on
    /// `/name`, each a string value.
    fn patch_properties(&self, id: u64, body: &str) -> Reply {
        let Ok(Value::Array(operations)) = serde_json::from_str::<Value>(body) else {
            (self.violate)("the body is not a JSON Patch document (an array)".into());
            return bad_request("The body of the request is not a JSON Patch document");
        };
        let mut state = self.inner.lock();
        for operation in &operations {
            let Some(operation) = operation.as_object() else {
                (self.violate)("a JSON Patch operation that is not an object".into());
                return bad_request("The JSON Patch operation is not valid");
            };
            let declared = [
                ("op", Type::Str, true),
                ("path", Type::Str, true),
                ("value", Type::Str, false),
                ("from", Type::Str, false),
            ];
            if let Err(reply) = check_fields(operation, &declared, self.violate) {
                return reply;
            }
            let op = operation["op"].as_str().unwrap_or("");
            let Some(name) = operation["path"].as_str().and_then(|p| p.strip_prefix('/')) else {
                (self.violate)("a JSON Patch path that does not start with /".into());
                return bad_request("The JSON Patch path is not valid");
            };
            let pull = state.pull_mut(id);
            match op {
                "add" | "replace" => {
                    let value = operation.get("value").and_then(Value::as_str);
                    let Some(value) = value else {
                        (self.violate)(format!("{op} without a value"));
                        return bad_request("The JSON Patch operation has no value");
                    };
                    pull.properties.insert(name.to_string(), value.to_string());
                }
                "remove" => {
                    pull.properties.remove(name);
                }
                other => {
                    (self.violate)(format!("JSON Patch op {other:?} is not one tagpin uses"));
                    return bad_request("The JSON Patch operation is not supported");
                }
            }
        }
        drop(state);
        self.properties(id)
    }

    fn thread_json(&self, state: &ServerState, t: &Thread) -> Value {
        json!({
            "id": t.id, "status": t.status, "isDeleted": false,
            "publishedDate": time(SystemTime::now()),
            "comments": t.comments.iter().map(|c| json!({
                "id": c.id, "parentCommentId": 0, "content": c.content,
                "commentType": if c.comment_type == 1 { "text" } else { "system" },
                "isDeleted": c.deleted,
                "author": {"id": c.author, "displayName": state.identities.iter().find(|(_, id)| **id == c.author).map(|(n, _)| n.clone()).unwrap_or_default()},
            })).collect::<Vec<_>>(),
            "properties": {},
        })
    }

    fn list_threads(&self, id: u64) -> Reply {
        let state = self.inner.lock();
        let threads: Vec<Value> = state
            .threads
            .iter()
            .filter(|t| t.pull == id)
            .map(|t| self.thread_json(&state, t))
            .collect();
        Reply::json(
            StatusCode::OK,
            json!({"value": threads, "count": threads.len()}),
        )
    }

    fn create_thread(&self, id: u64, body: &str) -> Reply {
        let object = match body_object(body, NEW_THREAD, self.violate) {
            Ok(object) => object,
            Err(reply) => return reply,
        };
        let comments = object
            .get("comments")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if comments.is_empty() {
            (self.violate)("a thread without a comment".into());
            return bad_request("A thread needs a comment");
        }
        let mut state = self.inner.lock();
        let author = state.id_of(self.who);
        let mut kept = Vec::new();
        for (n, comment) in comments.iter().enumerate() {
            let Some(comment) = comment.as_object() else {
                (self.violate)("a comment that is not an object".into());
                return bad_request("The comment is not valid");
            };
            if let Err(reply) = check_fields(comment, COMMENT, self.violate) {
                return reply;
            }
            let comment_type = match comment.get("commentType") {
                Some(Value::Number(n)) => n.as_u64().unwrap_or(0),
                Some(Value::String(s)) if s == "text" => 1,
                _ => 0,
            };
            if comment_type != 1 {
                (self.violate)("a comment that is not commentType 1 (text)".into());
            }
            kept.push(Comment {
                id: n as u64 + 1,
                author: author.clone(),
                content: comment
                    .get("content")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                comment_type,
                deleted: false,
            });
        }
        let thread = Thread {
            id: next_thread_id(&state, id),
            pull: id,
            status: object.get("status").cloned().unwrap_or(json!("unknown")),
            comments: kept,
        };
        let value = self.thread_json(&state, &thread);
        state.threads.push(thread);
        Reply::json(StatusCode::OK, value)
    }

    fn edit_comment(&self, id: u64, thread: &str, comment: &str, body: &str) -> Reply {
        let object = match body_object(body, COMMENT, self.violate) {
            Ok(object) => object,
            Err(reply) => return reply,
        };
        let mut state = self.inner.lock();
        let me = state.id_of(self.who);
        let found = state
            .threads
            .iter_mut()
            .find(|t| t.pull == id && thread.parse() == Ok(t.id))
            .and_then(|t| t.comments.iter_mut().find(|c| comment.parse() == Ok(c.id)));
        let Some(found) = found else {
            return error(
                StatusCode::NOT_FOUND,
                "TF401181",
                "The requested comment was not found",
                "CommentNotFoundException",
            );
        };
        if found.author != me {
            return error(
                StatusCode::FORBIDDEN,
                "TF401185",
                "You can only edit your own comments",
                "CommentNotEditableException",
            );
        }
        if let Some(content) = object.get("content").and_then(Value::as_str) {
            found.content = content.to_string();
        }
        let value = json!({"id": found.id, "content": found.content, "author": {"id": found.author}, "commentType": "text"});
        Reply::json(StatusCode::OK, value)
    }

    fn status_json(&self, state: &ServerState, s: &CommitStatus) -> Value {
        let mut context = json!({"name": s.name});
        if let Some(genre) = &s.genre {
            context["genre"] = json!(genre);
        }
        json!({"id": s.id, "state": s.state, "description": s.description, "context": context,
               "creationDate": time(s.created), "updatedDate": time(s.created),
               "createdBy": self.identity_json(state, &s.creator),
               "url": format!("{}/{}/_apis/git/repositories/{}/commits/{}/statuses", self.inner.base, self.inner.org, self.repo_id, s.sha)})
    }

    fn list_statuses(&self, sha: &str, pairs: &[(String, String)]) -> Reply {
        let top = param(pairs, "top")
            .and_then(|v| v.parse().ok())
            .unwrap_or(1000);
        let skip = param(pairs, "skip")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let state = self.inner.lock();
        let mut statuses: Vec<&CommitStatus> = state
            .statuses
            .iter()
            .filter(|s| s.repo == self.repo && s.sha.eq_ignore_ascii_case(sha))
            .collect();
        // Newest first.
        statuses.sort_by_key(|s| std::cmp::Reverse(s.id));
        let page: Vec<Value> = statuses
            .into_iter()
            .skip(skip)
            .take(top)
            .map(|s| self.status_json(&state, s))
            .collect();
        Reply::json(StatusCode::OK, json!({"value": page, "count": page.len()}))
    }

    fn create_status(&self, sha: &str, body: &str) -> Reply {
        let object = match body_object(body, NEW_STATUS, self.violate) {
            Ok(object) => object,
            Err(reply) => return reply,
        };
        let context = object
            .get("context")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        if let Err(reply) = check_fields(
            &context,
            &[("genre", Type::Str, false), ("name", Type::Str, true)],
            self.violate,
        ) {
            return reply;
        }
        let state_word = object
            .get("state")
            .and_then(Value::as_str)
            .unwrap_or("notSet")
            .to_string();
        if !STATUS_STATES.contains(&state_word.as_str()) {
            (self.violate)(format!("state {state_word:?} is none of {STATUS_STATES:?}"));
            return bad_request("The state is not valid");
        }
        let full = git_out(
            self.git_dir,
            &[
                "rev-parse",
                "--verify",
                "--quiet",
                &format!("{sha}^{{commit}}"),
            ],
        );
        if full.as_deref() != Some(sha) {
            return error(StatusCode::NOT_FOUND, "TF401175", &format!("The version descriptor <Commit: {sha}> could not be resolved to a version in the repository"), "GitUnresolvableToCommitException");
        }
        let mut state = self.inner.lock();
        let status = CommitStatus {
            id: state.statuses.len() as u64 + 1,
            repo: self.repo.to_string(),
            sha: sha.to_string(),
            genre: context
                .get("genre")
                .and_then(Value::as_str)
                .map(str::to_string),
            name: context
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            state: state_word,
            description: object
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            creator: self.who.to_string(),
            created: state.clock.now(),
        };
        let value = self.status_json(&state, &status);
        state.statuses.push(status);
        Reply::json(StatusCode::CREATED, value)
    }
}
