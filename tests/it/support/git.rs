//! Real Git servers on loopback for tagpin's integration tests.
//!
//! tagpin commits pinned manifests to a Git repository with libgit2, so its
//! tests need the real wire behaviour of the servers it will meet: the smart
//! HTTP protocol (as GitHub and GitLab speak it, with Basic auth), the
//! `git://` daemon, and local `file://` paths. Everything here drives the
//! real programs that ship with Git:
//!
//! - [`BareRepo`]: a bare repository with a deterministic first commit, plus
//!   the moves of other parties (another writer's push, branch protection).
//! - [`GitDaemon`]: `git daemon` serving a directory of bare repositories.
//! - [`GitHttpServer`]: a small HTTP server that runs `git http-backend` as
//!   a CGI per request, with Basic auth, a request log, and fault hooks to
//!   provoke push races and server errors.
//!
//! Nothing is global: each value owns its temp dir, port and processes, so
//! tests run in parallel, and everything stops when dropped. The HTTP server
//! runs on its own thread and runtime, so a test may block on a git client
//! (the git CLI, or libgit2, whose calls are all blocking) without starving
//! the server, whatever runtime flavour the test uses.
//!
//! Test support panics with a clear message instead of returning errors.

use std::io::{BufRead as _, BufReader};
use std::net::{SocketAddr, TcpListener as StdTcpListener, TcpStream as StdTcpStream};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use base64::Engine as _;
use futures::StreamExt as _;
use tempfile::TempDir;
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _};

/// Author and committer of every commit the harness makes for the repository
/// owner, so that commit ids are the same on every run.
pub const TEST_NAME: &str = "Test";
pub const TEST_EMAIL: &str = "test@example.com";
/// Fixed date of the owner's commits (see [`TEST_NAME`]).
pub const TEST_DATE: &str = "2024-01-01T00:00:00Z";

/// Identity of [`BareRepo::commit_as_other_writer`], so a test can tell the
/// other party's commits from its own and from tagpin's.
pub const OTHER_WRITER_NAME: &str = "Other Writer";
pub const OTHER_WRITER_EMAIL: &str = "other-writer@example.com";
/// Fixed date of the other writer's commits.
pub const OTHER_WRITER_DATE: &str = "2024-01-02T00:00:00Z";

/// The realm [`GitHttpServer`] announces in its Basic challenge.
pub const HTTP_REALM: &str = "tagpin-test";

/// Set in the environment of a local push to let it through [`BareRepo::protect`],
/// as an administrator (or a merged pull request) may update a protected branch.
/// Only local pushes carry the pusher's environment to the hook, so pushes over
/// `git://` and `http://` can never set it.
const ADMIN_PUSH_ENV: &str = "TAGPIN_TEST_ADMIN_PUSH";

/// The file in a bare repository listing its protected branches, one a line,
/// read by the `pre-receive` hook that [`BareRepo::protect`] installs.
const PROTECTED_LIST: &str = "tagpin-protected-branches";

/// How long `git daemon` may take to listen after spawning.
const DAEMON_START_TIMEOUT: Duration = Duration::from_secs(20);

/// How often to pick a new port when another process took the daemon's first.
const DAEMON_START_ATTEMPTS: usize = 5;

/// How long a dropped [`GitHttpServer`] waits for its blocking work to finish.
const HTTP_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

// ---------------------------------------------------------------------------
// Running git
// ---------------------------------------------------------------------------

/// A `git` command that reads no system or user configuration, never prompts,
/// and commits as [`TEST_NAME`] on [`TEST_DATE`], so its results are the same
/// on every machine. Variables that would point git at another repository
/// (set when tests run inside a git hook, say) are removed.
pub fn git_command() -> Command {
    let mut command = Command::new("git");
    isolate_git_env(&mut command);
    command
        .env("GIT_AUTHOR_NAME", TEST_NAME)
        .env("GIT_AUTHOR_EMAIL", TEST_EMAIL)
        .env("GIT_AUTHOR_DATE", TEST_DATE)
        .env("GIT_COMMITTER_NAME", TEST_NAME)
        .env("GIT_COMMITTER_EMAIL", TEST_EMAIL)
        .env("GIT_COMMITTER_DATE", TEST_DATE);
    command
}

/// Removes the machine's and the user's influence from a git process (the
/// client, the daemon and http-backend alike).
fn isolate_git_env(command: &mut Command) {
    for name in [
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_OBJECT_DIRECTORY",
        "GIT_ALTERNATE_OBJECT_DIRECTORIES",
        "GIT_NAMESPACE",
        "GIT_ASKPASS",
        "SSH_ASKPASS",
        "GIT_PROTOCOL",
        "GIT_CONFIG_PARAMETERS",
        "GIT_CONFIG_COUNT",
        ADMIN_PUSH_ENV,
    ] {
        command.env_remove(name);
    }
    command
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0");
}

/// The same isolation for http-backend, which is spawned through tokio.
fn isolate_git_env_async(command: &mut tokio::process::Command) {
    // tokio's Command wraps std's; isolating the inner one keeps both lists in one place.
    isolate_git_env(command.as_std_mut());
}

/// Runs `git ARGS` in `dir` (see [`git_command`]) and returns what it did,
/// success or not, for tests that expect a failure.
pub fn run_git(dir: &Path, args: &[&str]) -> Output {
    git_command()
        .current_dir(dir)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|err| panic!("spawn `git {}`: {err}", args.join(" ")))
}

/// Runs `git ARGS` in `dir` and returns its trimmed stdout; panics with git's
/// stderr if it fails.
pub fn git_ok(dir: &Path, args: &[&str]) -> String {
    let output = run_git(dir, args);
    assert!(
        output.status.success(),
        "`git {}` in {} failed ({}):\n{}",
        args.join(" "),
        dir.display(),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

/// Writes `files` (path relative to `root`, content) creating parent dirs.
fn write_files(root: &Path, files: &[(&str, &str)]) {
    for (relative, content) in files {
        let path = root.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .unwrap_or_else(|err| panic!("create {}: {err}", parent.display()));
        }
        std::fs::write(&path, content)
            .unwrap_or_else(|err| panic!("write {}: {err}", path.display()));
    }
}

/// A loopback port for `git daemon`, which cannot be handed a bound socket; our HTTP server
/// binds port 0 instead.
pub use super::registry::free_port;

/// The path of one of git's own programs (`git-daemon`, `git-http-backend`)
/// in `git --exec-path`.
///
/// Servers are spawned by this path rather than as `git daemon`: the `git`
/// wrapper runs them as a child, so killing the wrapper on drop would leave
/// the server itself running.
pub fn git_program(name: &str) -> PathBuf {
    let output = git_command()
        .arg("--exec-path")
        .output()
        .expect("spawn `git --exec-path` (is git installed?)");
    assert!(output.status.success(), "`git --exec-path` failed");
    let program = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim()).join(name);
    assert!(
        program.is_file(),
        "{} is missing: this git lacks {name}",
        program.display()
    );
    program
}

// ---------------------------------------------------------------------------
// BareRepo
// ---------------------------------------------------------------------------

/// A bare repository: what a Git host stores for one project.
///
/// Cloning a `BareRepo` gives another handle on the same repository (the
/// temp dir is removed when the last handle drops), so a fault hook closure
/// can own one and push to it from the server's thread.
#[derive(Clone, Debug)]
pub struct BareRepo {
    path: PathBuf,
    /// The temp dir holding the repository, when [`BareRepo::create`] made one.
    _dir: Option<Arc<TempDir>>,
}

impl BareRepo {
    /// A bare `repo.git` in a new temp dir, with one commit on `main` holding
    /// `files` (path, content). Serve it with `GitDaemon::start(repo.base_dir())`
    /// and `url(repo.name())`.
    pub fn create(files: &[(&str, &str)]) -> BareRepo {
        let dir = tempfile::Builder::new()
            .prefix("tagpin-git-")
            .tempdir()
            .expect("create temp dir for a bare repository");
        let mut repo = BareRepo::create_in(dir.path(), "repo.git", files);
        repo._dir = Some(Arc::new(dir));
        repo
    }

    /// Like [`BareRepo::create`], but as `base_dir/name`, so that one server
    /// can serve several repositories. The caller owns `base_dir`.
    pub fn create_in(base_dir: &Path, name: &str, files: &[(&str, &str)]) -> BareRepo {
        let path = base_dir.join(name);
        let path_str = path.to_str().expect("repository path is UTF-8");
        git_ok(
            base_dir,
            &[
                "init",
                "--quiet",
                "--bare",
                "--initial-branch=main",
                path_str,
            ],
        );

        let work = tempfile::tempdir().expect("create temp work tree");
        git_ok(
            work.path(),
            &["init", "--quiet", "--initial-branch=main", "."],
        );
        write_files(work.path(), files);
        git_ok(work.path(), &["add", "--all"]);
        git_ok(
            work.path(),
            &["commit", "--quiet", "--allow-empty", "-m", "initial commit"],
        );
        git_ok(
            work.path(),
            &["push", "--quiet", path_str, "main:refs/heads/main"],
        );
        BareRepo { path, _dir: None }
    }

    /// The repository's directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory holding the repository: the `base_dir` to serve.
    pub fn base_dir(&self) -> &Path {
        self.path.parent().expect("repository has a parent dir")
    }

    /// The repository's directory name (`repo.git`): its name on a server.
    pub fn name(&self) -> &str {
        self.path
            .file_name()
            .and_then(|name| name.to_str())
            .expect("repository dir name is UTF-8")
    }

    /// `file:///…`, which makes git and libgit2 use the pack protocol over a
    /// local subprocess, as opposed to a plain path (which copies objects).
    pub fn file_url(&self) -> String {
        format!("file://{}", self.path.display())
    }

    /// The commit `branch` points at, or `None` if there is no such branch.
    pub fn head(&self, branch: &str) -> Option<String> {
        let refname = format!("refs/heads/{branch}");
        let output = run_git(&self.path, &["rev-parse", "--verify", "--quiet", &refname]);
        output
            .status
            .success()
            .then(|| String::from_utf8_lossy(&output.stdout).trim().to_string())
    }

    /// The content of `path` at the tip of `branch`, or `None` if either is missing.
    pub fn read(&self, branch: &str, path: &str) -> Option<String> {
        let object = format!("refs/heads/{branch}:{path}");
        let output = run_git(&self.path, &["show", &object]);
        output
            .status
            .success()
            .then(|| String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// `(sha, subject)` of each commit reachable from `branch`, newest first;
    /// empty if there is no such branch.
    pub fn log(&self, branch: &str) -> Vec<(String, String)> {
        if self.head(branch).is_none() {
            return Vec::new();
        }
        let refname = format!("refs/heads/{branch}");
        git_ok(&self.path, &["log", "--format=%H%x09%s", &refname, "--"])
            .lines()
            .map(|line| {
                let (sha, subject) = line.split_once('\t').expect("sha<TAB>subject");
                (sha.to_string(), subject.to_string())
            })
            .collect()
    }

    /// The names of all branches, sorted.
    pub fn branches(&self) -> Vec<String> {
        git_ok(
            &self.path,
            &["for-each-ref", "--format=%(refname:strip=2)", "refs/heads/"],
        )
        .lines()
        .map(str::to_string)
        .collect()
    }

    /// Pushes a commit writing `files` to `branch`, as a human or another bot
    /// would: clone, change, commit, push. A missing branch starts from
    /// `main`. The push passes [`BareRepo::protect`] (it plays an admin or a
    /// merged pull request). Returns the new commit's sha.
    pub fn commit_as_other_writer(
        &self,
        branch: &str,
        files: &[(&str, &str)],
        message: &str,
    ) -> String {
        let work = tempfile::tempdir().expect("create temp work tree");
        let url = self.file_url();
        git_ok(
            work.path(),
            &["clone", "--quiet", "--branch=main", &url, "."],
        );
        if self.head(branch).is_some() {
            git_ok(
                work.path(),
                &[
                    "checkout",
                    "--quiet",
                    "-B",
                    branch,
                    &format!("origin/{branch}"),
                ],
            );
        } else {
            git_ok(work.path(), &["checkout", "--quiet", "-b", branch]);
        }
        write_files(work.path(), files);
        git_ok(work.path(), &["add", "--all"]);
        let commit = git_command()
            .current_dir(work.path())
            .args(["commit", "--quiet", "--allow-empty", "-m", message])
            .env("GIT_AUTHOR_NAME", OTHER_WRITER_NAME)
            .env("GIT_AUTHOR_EMAIL", OTHER_WRITER_EMAIL)
            .env("GIT_AUTHOR_DATE", OTHER_WRITER_DATE)
            .env("GIT_COMMITTER_NAME", OTHER_WRITER_NAME)
            .env("GIT_COMMITTER_EMAIL", OTHER_WRITER_EMAIL)
            .env("GIT_COMMITTER_DATE", OTHER_WRITER_DATE)
            .output()
            .expect("spawn git commit");
        assert!(
            commit.status.success(),
            "other writer's commit failed: {}",
            String::from_utf8_lossy(&commit.stderr)
        );
        let refspec = format!("HEAD:refs/heads/{branch}");
        let push = git_command()
            .current_dir(work.path())
            .args(["push", "--quiet", "origin", &refspec])
            .env(ADMIN_PUSH_ENV, "1")
            .output()
            .expect("spawn git push");
        assert!(
            push.status.success(),
            "other writer's push to {branch} failed: {}",
            String::from_utf8_lossy(&push.stderr)
        );
        git_ok(work.path(), &["rev-parse", "HEAD"])
    }

    /// Merges a side branch into `main` with a merge commit (`git merge --no-ff`), as a forge
    /// merges a contributor's pull request: the side branch starts at `main`'s tip and holds
    /// one commit per entry of `commits` (files written, message), each by the other writer;
    /// `empty` more empty commits follow them. Returns the merge commit's sha.
    pub fn merge_side_branch(
        &self,
        commits: &[(&[(&str, &str)], &str)],
        empty: usize,
        merge_message: &str,
    ) -> String {
        let work = tempfile::tempdir().expect("create temp work tree");
        git_ok(
            work.path(),
            &["clone", "--quiet", "--branch=main", &self.file_url(), "."],
        );
        for (key, value) in [
            ("user.name", OTHER_WRITER_NAME),
            ("user.email", OTHER_WRITER_EMAIL),
        ] {
            git_ok(work.path(), &["config", key, value]);
        }
        git_ok(work.path(), &["checkout", "--quiet", "-b", "side"]);
        for (files, message) in commits {
            write_files(work.path(), files);
            git_ok(work.path(), &["add", "--all"]);
            git_ok(
                work.path(),
                &["commit", "--quiet", "--allow-empty", "-m", message],
            );
        }
        for n in 0..empty {
            let message = format!("side commit {n}");
            git_ok(
                work.path(),
                &["commit", "--quiet", "--allow-empty", "-m", &message],
            );
        }
        git_ok(work.path(), &["checkout", "--quiet", "main"]);
        git_ok(
            work.path(),
            &["merge", "--quiet", "--no-ff", "-m", merge_message, "side"],
        );
        let push = git_command()
            .current_dir(work.path())
            .args(["push", "--quiet", "origin", "main"])
            .env(ADMIN_PUSH_ENV, "1")
            .output()
            .expect("spawn git push");
        assert!(
            push.status.success(),
            "the merge's push failed: {}",
            String::from_utf8_lossy(&push.stderr)
        );
        git_ok(work.path(), &["rev-parse", "HEAD"])
    }

    /// Rewrites the tip of `branch` as `git commit --amend --no-edit` does: the same message
    /// and author, `files` written on top, committed as `name <email>` (a person who set their
    /// Git identity to the bot's, say), then force-pushed. Returns the new commit's sha.
    pub fn amend_tip_as(
        &self,
        branch: &str,
        files: &[(&str, &str)],
        name: &str,
        email: &str,
    ) -> String {
        let work = tempfile::tempdir().expect("create temp work tree");
        let url = self.file_url();
        git_ok(
            work.path(),
            &["clone", "--quiet", "--branch", branch, &url, "."],
        );
        write_files(work.path(), files);
        git_ok(work.path(), &["add", "--all"]);
        let amend = git_command()
            .current_dir(work.path())
            .args(["commit", "--quiet", "--amend", "--no-edit"])
            .env("GIT_COMMITTER_NAME", name)
            .env("GIT_COMMITTER_EMAIL", email)
            .output()
            .expect("spawn git commit --amend");
        assert!(
            amend.status.success(),
            "amend on {branch} failed: {}",
            String::from_utf8_lossy(&amend.stderr)
        );
        git_ok(
            work.path(),
            &[
                "push",
                "--quiet",
                "origin",
                &format!("+HEAD:refs/heads/{branch}"),
            ],
        );
        git_ok(work.path(), &["rev-parse", "HEAD"])
    }

    /// Points `branch` at `sha`, as `git push --force` of an older commit would.
    pub fn reset_branch(&self, branch: &str, sha: &str) {
        git_ok(
            &self.path,
            &["update-ref", &format!("refs/heads/{branch}"), sha],
        );
    }

    /// Installs `script` as the `pre-receive` hook, as a Git host's push rules run (signed
    /// commits required: `support::signing::Trust::reject_unsigned_hook`). Replaces a hook
    /// [`BareRepo::protect`] installed.
    pub fn pre_receive(&self, script: &str) {
        let hook = self.path.join("hooks").join("pre-receive");
        std::fs::create_dir_all(hook.parent().expect("hooks dir")).expect("create hooks dir");
        std::fs::write(&hook, script)
            .unwrap_or_else(|err| panic!("write {}: {err}", hook.display()));
        std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755))
            .unwrap_or_else(|err| panic!("chmod {}: {err}", hook.display()));
    }

    /// Protects `branch` as a Git host does: a `pre-receive` hook rejects any
    /// push that updates it (creating, moving or deleting), printing
    /// `protected branch <name>: changes must be made through a pull request`
    /// to the pusher. A hook rejects the whole push, so other refs in the
    /// same push are refused too ("pre-receive hook declined").
    pub fn protect(&self, branch: &str) {
        let list = self.path.join(PROTECTED_LIST);
        let mut names = std::fs::read_to_string(&list).unwrap_or_default();
        names.push_str(branch);
        names.push('\n');
        std::fs::write(&list, names)
            .unwrap_or_else(|err| panic!("write {}: {err}", list.display()));

        let hook = self.path.join("hooks").join("pre-receive");
        let script = format!(
            r#"#!/bin/sh
# Installed by tagpin's test harness (tests/it/support/git.rs): branch protection.
if [ -n "${admin_env}" ]; then
  exit 0
fi
status=0
while read -r old new ref; do
  case "$ref" in
    refs/heads/*) branch="${{ref#refs/heads/}}" ;;
    *) continue ;;
  esac
  if grep -qxF -- "$branch" '{list}'; then
    echo "protected branch $branch: changes must be made through a pull request" >&2
    status=1
  fi
done
exit $status
"#,
            admin_env = ADMIN_PUSH_ENV,
            list = list.display(),
        );
        std::fs::create_dir_all(hook.parent().expect("hooks dir")).expect("create hooks dir");
        std::fs::write(&hook, script)
            .unwrap_or_else(|err| panic!("write {}: {err}", hook.display()));
        std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755))
            .unwrap_or_else(|err| panic!("chmod {}: {err}", hook.display()));
    }
}

// ---------------------------------------------------------------------------
// GitDaemon
// ---------------------------------------------------------------------------

/// `git daemon` serving every bare repository under a directory over
/// `git://`, with push enabled (the protocol has no auth).
pub struct GitDaemon {
    port: u16,
    child: Child,
    log: Arc<Mutex<String>>,
}

impl GitDaemon {
    /// Starts the daemon on a free loopback port and returns once it listens.
    pub fn start(base_dir: impl AsRef<Path>) -> GitDaemon {
        let base_dir = base_dir.as_ref();
        let mut failures = Vec::new();
        for _ in 0..DAEMON_START_ATTEMPTS {
            match GitDaemon::try_start(base_dir, free_port()) {
                Ok(daemon) => return daemon,
                Err(failure) => failures.push(failure),
            }
        }
        panic!(
            "git daemon did not start after {DAEMON_START_ATTEMPTS} attempts:\n{}",
            failures.join("\n")
        );
    }

    /// One attempt on one port. `Err` when the daemon exited (another process
    /// took the port in between), so that the caller tries another port.
    fn try_start(base_dir: &Path, port: u16) -> Result<GitDaemon, String> {
        let mut command = Command::new(git_program("git-daemon"));
        isolate_git_env(&mut command);
        let mut child = command
            .arg("--verbose")
            .arg("--informative-errors")
            .arg("--reuseaddr")
            .arg(format!("--base-path={}", base_dir.display()))
            .arg("--export-all")
            .arg("--enable=receive-pack")
            .arg("--listen=127.0.0.1")
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn git daemon");

        // With --verbose the daemon logs "Ready to rumble" once its socket
        // listens: that line, not a successful connect (which could reach
        // another process on a port we lost), proves the port is ours.
        let log = Arc::new(Mutex::new(String::new()));
        let (lines_tx, lines_rx) = mpsc::channel::<String>();
        let stderr = child.stderr.take().expect("daemon stderr is piped");
        let thread_log = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let mut log = thread_log.lock().expect("daemon log lock");
                log.push_str(&line);
                log.push('\n');
                drop(log);
                let _ = lines_tx.send(line);
            }
        });

        let deadline = Instant::now() + DAEMON_START_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match lines_rx.recv_timeout(left) {
                Ok(line) if line.contains("Ready to rumble") => break,
                Ok(_) => continue,
                Err(RecvTimeoutError::Disconnected) => {
                    let status = child.wait().expect("wait for git daemon");
                    let log = log.lock().expect("daemon log lock").clone();
                    return Err(format!("port {port}: git daemon exited ({status}):\n{log}"));
                }
                Err(RecvTimeoutError::Timeout) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    let log = log.lock().expect("daemon log lock").clone();
                    panic!("git daemon on port {port} not ready after {DAEMON_START_TIMEOUT:?}:\n{log}");
                }
            }
        }
        StdTcpStream::connect(("127.0.0.1", port))
            .unwrap_or_else(|err| panic!("git daemon said ready but port {port} refuses: {err}"));
        Ok(GitDaemon { port, child, log })
    }

    /// `git://127.0.0.1:<port>/<repo_name>`.
    pub fn url(&self, repo_name: &str) -> String {
        format!("git://127.0.0.1:{}/{repo_name}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// What the daemon logged (connections and requests), for failure messages.
    pub fn log(&self) -> String {
        self.log.lock().expect("daemon log lock").clone()
    }
}

impl Drop for GitDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------
// GitHttpServer
// ---------------------------------------------------------------------------

/// Who may use a [`GitHttpServer`].
#[derive(Clone, Debug)]
pub enum HttpAuth {
    /// Anyone may fetch and push (push is enabled explicitly, since
    /// http-backend otherwise allows it only to authenticated users).
    None,
    /// Every request needs `Authorization: Basic` with this user and this
    /// token as the password, as GitHub and GitLab take tokens.
    Basic { user: String, token: String },
}

impl HttpAuth {
    pub fn basic(user: &str, token: &str) -> HttpAuth {
        HttpAuth::Basic {
            user: user.to_string(),
            token: token.to_string(),
        }
    }
}

/// One request the server answered. The Authorization header is never kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpRequestRecord {
    pub method: String,
    /// e.g. `/repo.git/info/refs` or `/repo.git/git-receive-pack`.
    pub path: String,
    /// e.g. `service=git-upload-pack`.
    pub query: Option<String>,
    /// The authenticated user; `None` for anonymous or refused requests.
    pub user: Option<String>,
    pub status: u16,
    /// Whether the request body was gzip-encoded (git does that for large
    /// fetch negotiations), so a test can prove that path was exercised.
    pub gzip: bool,
}

impl HttpRequestRecord {
    /// Whether this is the POST that carries a push (the pack and ref updates).
    pub fn is_receive_pack(&self) -> bool {
        self.method == "POST" && self.path.ends_with("/git-receive-pack")
    }
}

/// Work a test wants done at a point of the protocol.
type Hook = Box<dyn FnOnce() + Send + 'static>;

/// State shared by the handle and the server's requests.
struct HttpShared {
    base_dir: PathBuf,
    /// `git-http-backend`, from [`git_program`].
    http_backend: PathBuf,
    auth: HttpAuth,
    requests: Mutex<Vec<HttpRequestRecord>>,
    /// How many of the next requests to fail, and with what.
    fail_next: Mutex<(usize, StatusCode)>,
    before_receive_pack: Mutex<Option<Hook>>,
    before_push_advertisement: Mutex<Option<Hook>>,
    backend_stderr: Mutex<String>,
}

/// Smart HTTP Git hosting: `git http-backend` (the CGI Git ships for Apache
/// and nginx) run per request by a small axum server on 127.0.0.1.
pub struct GitHttpServer {
    addr: SocketAddr,
    shared: Arc<HttpShared>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl GitHttpServer {
    /// Serves every bare repository under `base_dir`. The server runs on its
    /// own thread and runtime (see the module docs); it is listening when
    /// this returns.
    pub fn start(base_dir: impl AsRef<Path>, auth: HttpAuth) -> GitHttpServer {
        let listener = StdTcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0 for git http");
        listener
            .set_nonblocking(true)
            .expect("set listener non-blocking");
        let addr = listener.local_addr().expect("local addr");
        let shared = Arc::new(HttpShared {
            base_dir: base_dir.as_ref().to_path_buf(),
            http_backend: git_program("git-http-backend"),
            auth,
            requests: Mutex::new(Vec::new()),
            fail_next: Mutex::new((0, StatusCode::INTERNAL_SERVER_ERROR)),
            before_receive_pack: Mutex::new(None),
            before_push_advertisement: Mutex::new(None),
            backend_stderr: Mutex::new(String::new()),
        });
        let (shutdown_tx, shutdown_rx) = tokio::sync::oneshot::channel::<()>();
        let app = Router::new()
            .fallback(handle_http)
            .with_state(Arc::clone(&shared));
        let thread = std::thread::Builder::new()
            .name(format!("git-http-{}", addr.port()))
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("build the git http server's runtime");
                runtime.block_on(async move {
                    let listener = tokio::net::TcpListener::from_std(listener)
                        .expect("register the git http listener");
                    let service = app.into_make_service_with_connect_info::<SocketAddr>();
                    tokio::select! {
                        result = axum::serve(listener, service) => {
                            result.expect("git http server failed");
                        }
                        _ = shutdown_rx => {}
                    }
                });
                // Drops in-flight connections (their http-backend children are
                // killed on drop) and waits a bounded time for hook closures.
                runtime.shutdown_timeout(HTTP_SHUTDOWN_TIMEOUT);
            })
            .expect("spawn the git http server thread");
        GitHttpServer {
            addr,
            shared,
            shutdown: Some(shutdown_tx),
            thread: Some(thread),
        }
    }

    /// `http://127.0.0.1:<port>/<repo_name>`.
    pub fn url(&self, repo_name: &str) -> String {
        format!("http://{}/{repo_name}", self.addr)
    }

    /// `http://<user>:<token>@127.0.0.1:<port>/<repo_name>`, the form the git
    /// CLI takes credentials in without a helper.
    pub fn url_with_credentials(&self, repo_name: &str, user: &str, token: &str) -> String {
        format!("http://{user}:{token}@{}/{repo_name}", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every request answered so far, oldest first.
    pub fn requests(&self) -> Vec<HttpRequestRecord> {
        self.shared
            .requests
            .lock()
            .expect("request log lock")
            .clone()
    }

    /// Forgets the requests recorded so far (e.g. those of the test's setup).
    pub fn clear_requests(&self) {
        self.shared
            .requests
            .lock()
            .expect("request log lock")
            .clear();
    }

    /// What http-backend wrote to stderr (and hook panics), for failure messages.
    pub fn backend_stderr(&self) -> String {
        self.shared
            .backend_stderr
            .lock()
            .expect("stderr log lock")
            .clone()
    }

    /// Runs `action` once, on a blocking thread, just before the next push's
    /// `POST …/git-receive-pack` reaches http-backend: after the client read
    /// the refs and built its pack. A commit landing there is the narrow
    /// race a Git host sees; receive-pack then refuses the client's update
    /// because the branch no longer holds the old value the client sent.
    pub fn before_next_receive_pack(&self, action: impl FnOnce() + Send + 'static) {
        *self.shared.before_receive_pack.lock().expect("hook lock") = Some(Box::new(action));
    }

    /// Runs `action` once, on a blocking thread, just before the server
    /// answers the next push's ref advertisement (`GET
    /// …/info/refs?service=git-receive-pack`): after the client's fetch, before
    /// its push looks at the remote. A commit landing there makes the client
    /// see that its push is not a fast-forward (git: "fetch first").
    pub fn before_next_push_advertisement(&self, action: impl FnOnce() + Send + 'static) {
        *self
            .shared
            .before_push_advertisement
            .lock()
            .expect("hook lock") = Some(Box::new(action));
    }

    /// [`GitHttpServer::before_next_push_advertisement`] for each of the
    /// next `times` pushes: a branch that keeps moving under every push, as on
    /// a busy repository.
    pub fn before_push_advertisements(
        &self,
        times: usize,
        action: impl Fn() + Send + Sync + 'static,
    ) {
        arm_push_advertisement(Arc::downgrade(&self.shared), times, Arc::new(action));
    }

    /// Answers the next `count` requests with `status` (e.g. 500 or 503)
    /// without running http-backend. Auth is not checked for them.
    pub fn fail_next(&self, count: usize, status: u16) {
        let status = StatusCode::from_u16(status).expect("valid HTTP status");
        *self.shared.fail_next.lock().expect("fault lock") = (count, status);
    }
}

impl Drop for GitHttpServer {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Sets a one-shot push-advertisement hook that runs `action` and then sets
/// itself again, `times` times in all. It holds the server weakly, so a hook
/// left armed never keeps a stopped server alive.
fn arm_push_advertisement(
    shared: std::sync::Weak<HttpShared>,
    times: usize,
    action: Arc<dyn Fn() + Send + Sync>,
) {
    let Some(strong) = shared.upgrade().filter(|_| times > 0) else {
        return;
    };
    *strong.before_push_advertisement.lock().expect("hook lock") = Some(Box::new(move || {
        action();
        arm_push_advertisement(shared, times - 1, action);
    }));
}

impl HttpShared {
    fn record(&self, request: &RequestLine, user: Option<String>, status: StatusCode) {
        self.requests
            .lock()
            .expect("request log lock")
            .push(HttpRequestRecord {
                method: request.method.clone(),
                path: request.path.clone(),
                query: request.query.clone(),
                user,
                status: status.as_u16(),
                gzip: request.gzip,
            });
    }

    fn take_fault(&self) -> Option<StatusCode> {
        let mut fail_next = self.fail_next.lock().expect("fault lock");
        if fail_next.0 == 0 {
            return None;
        }
        fail_next.0 -= 1;
        Some(fail_next.1)
    }

    fn log_stderr(&self, text: &str) {
        self.backend_stderr
            .lock()
            .expect("stderr log lock")
            .push_str(text);
    }
}

/// What the log and the hooks need from a request, taken before its body is.
struct RequestLine {
    method: String,
    path: String,
    query: Option<String>,
    gzip: bool,
}

impl RequestLine {
    fn is_receive_pack_post(&self) -> bool {
        self.method == "POST" && self.path.ends_with("/git-receive-pack")
    }

    fn is_receive_pack_advertisement(&self) -> bool {
        self.method == "GET"
            && self.path.ends_with("/info/refs")
            && self.query.as_deref() == Some("service=git-receive-pack")
    }
}

async fn handle_http(
    State(shared): State<Arc<HttpShared>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: Request,
) -> Response {
    let line = RequestLine {
        method: request.method().to_string(),
        path: request.uri().path().to_string(),
        query: request.uri().query().map(str::to_string),
        gzip: header_str(request.headers(), header::CONTENT_ENCODING)
            .is_some_and(|encoding| encoding.contains("gzip")),
    };

    if let Some(status) = shared.take_fault() {
        shared.record(&line, None, status);
        return (status, "tagpin-test: injected failure\n").into_response();
    }

    let user = match &shared.auth {
        HttpAuth::None => None,
        HttpAuth::Basic { user, token } => match basic_credentials(request.headers()) {
            Some((given_user, given_token)) if given_user == *user && given_token == *token => {
                Some(given_user)
            }
            _ => {
                shared.record(&line, None, StatusCode::UNAUTHORIZED);
                let challenge = format!("Basic realm=\"{HTTP_REALM}\"");
                return (
                    StatusCode::UNAUTHORIZED,
                    [(header::WWW_AUTHENTICATE, challenge)],
                    "authentication required\n",
                )
                    .into_response();
            }
        },
    };

    let hook = if line.is_receive_pack_post() {
        shared.before_receive_pack.lock().expect("hook lock").take()
    } else if line.is_receive_pack_advertisement() {
        shared
            .before_push_advertisement
            .lock()
            .expect("hook lock")
            .take()
    } else {
        None
    };
    if let Some(hook) = hook {
        if let Err(err) = tokio::task::spawn_blocking(hook).await {
            shared.log_stderr(&format!("fault hook panicked: {err}\n"));
            shared.record(&line, user, StatusCode::INTERNAL_SERVER_ERROR);
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                "tagpin-test: fault hook panicked\n",
            )
                .into_response();
        }
    }

    let response = match run_http_backend(&shared, &line, user.as_deref(), peer, request).await {
        Ok(response) => response,
        Err(message) => {
            shared.log_stderr(&format!("{message}\n"));
            (StatusCode::BAD_GATEWAY, format!("tagpin-test: {message}\n")).into_response()
        }
    };
    shared.record(&line, user, response.status());
    response
}

/// `(user, password)` of an `Authorization: Basic` header.
fn basic_credentials(headers: &HeaderMap) -> Option<(String, String)> {
    let value = header_str(headers, header::AUTHORIZATION)?;
    let (scheme, encoded) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (user, password) = decoded.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}

fn header_str(headers: &HeaderMap, name: header::HeaderName) -> Option<&str> {
    headers.get(name).and_then(|value| value.to_str().ok())
}

/// Runs `git http-backend` as a CGI for one request: the request's metadata
/// in the environment, its body on stdin, and the CGI's headers and body
/// (streamed) as the response.
async fn run_http_backend(
    shared: &Arc<HttpShared>,
    line: &RequestLine,
    user: Option<&str>,
    peer: SocketAddr,
    request: Request,
) -> Result<Response, String> {
    let headers = request.headers();
    let mut command = tokio::process::Command::new(&shared.http_backend);
    isolate_git_env_async(&mut command);
    command
        .env("GIT_PROJECT_ROOT", &shared.base_dir)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        // http-backend lets only authenticated users push unless told
        // otherwise; with HttpAuth::None anyone may, like a test host.
        .env("GIT_CONFIG_COUNT", "1")
        .env("GIT_CONFIG_KEY_0", "http.receivepack")
        .env("GIT_CONFIG_VALUE_0", "true")
        .env("GATEWAY_INTERFACE", "CGI/1.1")
        .env("SERVER_PROTOCOL", "HTTP/1.1")
        .env("REQUEST_METHOD", &line.method)
        .env("PATH_INFO", &line.path)
        .env("QUERY_STRING", line.query.as_deref().unwrap_or(""))
        .env("REMOTE_ADDR", peer.ip().to_string());
    if let Some(user) = user {
        command.env("REMOTE_USER", user);
    }
    // Without CONTENT_LENGTH (a chunked body) http-backend reads to EOF.
    for (name, variable) in [
        (header::CONTENT_TYPE, "CONTENT_TYPE"),
        (header::CONTENT_LENGTH, "CONTENT_LENGTH"),
        (header::CONTENT_ENCODING, "HTTP_CONTENT_ENCODING"),
    ] {
        if let Some(value) = header_str(headers, name) {
            command.env(variable, value);
        }
    }
    if let Some(value) = header_str(headers, header::HeaderName::from_static("git-protocol")) {
        command.env("HTTP_GIT_PROTOCOL", value);
    }
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|err| format!("spawn git http-backend: {err}"))?;

    // Feed the body while the response is read, so neither side can block
    // the other on a full pipe.
    let mut stdin = child.stdin.take().expect("stdin is piped");
    let mut body = request.into_body().into_data_stream();
    tokio::spawn(async move {
        while let Some(chunk) = body.next().await {
            let Ok(chunk) = chunk else { break };
            if stdin.write_all(&chunk).await.is_err() {
                break; // http-backend stopped reading; its answer says why.
            }
        }
        // Dropping stdin closes it: the end of the body.
    });

    let stdout = child.stdout.take().expect("stdout is piped");
    let mut stderr = child.stderr.take().expect("stderr is piped");
    let stderr_shared = Arc::clone(shared);
    tokio::spawn(async move {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text).await;
        if !text.is_empty() {
            stderr_shared.log_stderr(&text);
        }
        let _ = child.wait().await;
    });

    // CGI response: header lines, a blank line, then the body.
    let mut stdout = tokio::io::BufReader::new(stdout);
    let mut status = StatusCode::OK;
    let mut cgi_headers = Vec::new();
    loop {
        let mut header_line = String::new();
        let read = stdout
            .read_line(&mut header_line)
            .await
            .map_err(|err| format!("read http-backend headers: {err}"))?;
        if read == 0 {
            return Err(format!(
                "http-backend closed stdout before its headers ended ({} {})",
                line.method, line.path
            ));
        }
        let header_line = header_line.trim_end_matches(['\r', '\n']);
        if header_line.is_empty() {
            break;
        }
        let (name, value) = header_line
            .split_once(':')
            .ok_or_else(|| format!("malformed CGI header from http-backend: {header_line:?}"))?;
        let value = value.trim();
        if name.eq_ignore_ascii_case("status") {
            let code = value.split_whitespace().next().unwrap_or("");
            status = code
                .parse::<u16>()
                .ok()
                .and_then(|code| StatusCode::from_u16(code).ok())
                .ok_or_else(|| format!("bad CGI Status from http-backend: {value:?}"))?;
        } else {
            cgi_headers.push((name.to_string(), value.to_string()));
        }
    }

    let body = futures::stream::unfold(Some(stdout), |reader| async move {
        let mut reader = reader?;
        let mut buffer = vec![0u8; 64 * 1024];
        match reader.read(&mut buffer).await {
            Ok(0) => None,
            Ok(read) => {
                buffer.truncate(read);
                Some((Ok(Bytes::from(buffer)), Some(reader)))
            }
            Err(err) => Some((Err(err), None)),
        }
    });
    let mut response = Response::builder().status(status);
    for (name, value) in cgi_headers {
        response = response.header(name, value);
    }
    response
        .body(Body::from_stream(body))
        .map_err(|err| format!("build response from http-backend's headers: {err}"))
}
