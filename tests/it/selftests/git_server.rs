//! Self-tests of the Git server harness (tests/it/support/git.rs): bare repos,
//! `git daemon` and the http-backend server serve clones, fetches and pushes
//! over file://, git:// and http://; Basic auth, branch protection, the push
//! race hooks, injected failures and gzip-encoded requests behave as a real
//! Git host's would.
//!
//! The clients are the git CLI and libgit2 (the `git2` crate) called
//! directly, not tagpin, so a failure here points at the harness, never at
//! tagpin. The libgit2 tests also record the exact messages libgit2 reports
//! for rejected pushes, which tagpin's error handling relies on.

use crate::support;

use std::cell::RefCell;
use std::path::Path;
use std::process::Output;

use support::git::{
    git_ok, run_git, BareRepo, GitDaemon, GitHttpServer, HttpAuth, OTHER_WRITER_NAME,
};

const USER: &str = "tagpin-bot";
const TOKEN: &str = "s3cret-token-1234";

const MANIFEST: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n    - name: web\n      image: nginx:1.27\n";

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Clones `url` into a new temp dir and returns it.
fn clone(url: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir for a clone");
    git_ok(dir.path(), &["clone", "--quiet", url, "."]);
    dir
}

/// Writes a file in a work tree and commits it; returns the new sha.
fn commit_file(work: &Path, path: &str, content: &str, message: &str) -> String {
    std::fs::write(work.join(path), content).expect("write file in work tree");
    git_ok(work, &["add", path]);
    git_ok(work, &["commit", "--quiet", "-m", message]);
    git_ok(work, &["rev-parse", "HEAD"])
}

/// Clones `url`, commits a change to main and pushes it; the push must land.
fn clone_commit_push(repo: &BareRepo, url: &str, message: &str) {
    let work = clone(url);
    let sha = commit_file(
        work.path(),
        "pod.yaml",
        &format!("# {message}\n{MANIFEST}"),
        message,
    );
    git_ok(work.path(), &["push", "--quiet", "origin", "main"]);
    assert_eq!(repo.head("main").as_deref(), Some(sha.as_str()));
    assert_eq!(repo.log("main")[0].1, message);
}

/// After another writer pushed, `git pull` over `url` sees their commit.
fn fetch_sees_other_writer(repo: &BareRepo, url: &str) {
    let work = clone(url);
    let other = repo.commit_as_other_writer("main", &[("other.txt", "hello\n")], "other change");
    git_ok(
        work.path(),
        &["pull", "--quiet", "--ff-only", "origin", "main"],
    );
    assert_eq!(git_ok(work.path(), &["rev-parse", "HEAD"]), other);
    assert_eq!(
        std::fs::read_to_string(work.path().join("other.txt")).unwrap(),
        "hello\n"
    );
}

// ---------------------------------------------------------------------------
// BareRepo
// ---------------------------------------------------------------------------

#[tokio::test]
async fn bare_repo_has_one_deterministic_commit_with_the_files() {
    let repo = BareRepo::create(&[("apps/web/pod.yaml", MANIFEST), ("README.md", "hi\n")]);
    let again = BareRepo::create(&[("apps/web/pod.yaml", MANIFEST), ("README.md", "hi\n")]);

    let head = repo.head("main").expect("main exists");
    assert_eq!(head.len(), 40);
    assert_eq!(
        again.head("main"),
        Some(head.clone()),
        "fixed author and date give the same sha"
    );
    assert_eq!(repo.branches(), vec!["main".to_string()]);
    assert_eq!(
        repo.log("main"),
        vec![(head.clone(), "initial commit".to_string())]
    );
    assert_eq!(
        repo.read("main", "apps/web/pod.yaml").as_deref(),
        Some(MANIFEST)
    );
    assert_eq!(repo.read("main", "missing.yaml"), None);
    assert_eq!(repo.read("nope", "README.md"), None);
    assert_eq!(repo.head("nope"), None);
    assert!(repo.log("nope").is_empty());
    assert!(repo.file_url().starts_with("file:///"));
    assert_eq!(repo.name(), "repo.git");

    // TEST_DATE (2024-01-01T00:00:00Z) as seconds since the epoch.
    let author = git_ok(
        repo.path(),
        &["log", "-1", "--format=%an <%ae> %at|%cn <%ce> %ct", "main"],
    );
    assert_eq!(
        author,
        "Test <test@example.com> 1704067200|Test <test@example.com> 1704067200"
    );
}

#[tokio::test]
async fn other_writer_commits_to_existing_and_new_branches() {
    let repo = BareRepo::create(&[("pod.yaml", MANIFEST)]);
    let first = repo.head("main").unwrap();

    let sha = repo.commit_as_other_writer("main", &[("pod.yaml", "changed\n")], "human edit");
    assert_eq!(repo.head("main"), Some(sha.clone()));
    assert_eq!(repo.read("main", "pod.yaml").as_deref(), Some("changed\n"));
    let log = repo.log("main");
    assert_eq!(
        log,
        vec![
            (sha.clone(), "human edit".into()),
            (first, "initial commit".into())
        ]
    );
    let author = git_ok(repo.path(), &["log", "-1", "--format=%an", "main"]);
    assert_eq!(author, OTHER_WRITER_NAME);

    let branch_sha = repo.commit_as_other_writer("feature/x", &[("new.txt", "x\n")], "start x");
    assert_eq!(
        repo.branches(),
        vec!["feature/x".to_string(), "main".to_string()]
    );
    assert_eq!(
        repo.log("feature/x")[1].0,
        sha,
        "a new branch starts from main"
    );
    assert_eq!(repo.head("feature/x"), Some(branch_sha));
}

#[tokio::test]
async fn several_repos_share_one_base_dir() {
    let base = tempfile::tempdir().unwrap();
    let a = BareRepo::create_in(base.path(), "a.git", &[("a.txt", "a\n")]);
    let b = BareRepo::create_in(base.path(), "team/b.git", &[("b.txt", "b\n")]);
    let daemon = GitDaemon::start(base.path());
    let http = GitHttpServer::start(base.path(), HttpAuth::None);

    let work = clone(&daemon.url("a.git"));
    assert!(work.path().join("a.txt").exists());
    let work = clone(&http.url("team/b.git"));
    assert!(work.path().join("b.txt").exists());
    assert!(a.head("main").is_some() && b.head("main").is_some());
}

// ---------------------------------------------------------------------------
// Transports
// ---------------------------------------------------------------------------

#[tokio::test]
async fn file_url_clone_fetch_push() {
    let repo = BareRepo::create(&[("pod.yaml", MANIFEST)]);
    clone_commit_push(&repo, &repo.file_url(), "pin over file");
    fetch_sees_other_writer(&repo, &repo.file_url());
}

#[tokio::test]
async fn daemon_clone_fetch_push() {
    let repo = BareRepo::create(&[("pod.yaml", MANIFEST)]);
    let daemon = GitDaemon::start(repo.base_dir());
    let url = daemon.url(repo.name());
    assert!(url.starts_with("git://127.0.0.1:"));

    clone_commit_push(&repo, &url, "pin over git daemon");
    fetch_sees_other_writer(&repo, &url);
    assert!(
        daemon.log().contains("Request receive-pack"),
        "{}",
        daemon.log()
    );
}

#[tokio::test]
async fn daemon_stops_on_drop() {
    let repo = BareRepo::create(&[]);
    let daemon = GitDaemon::start(repo.base_dir());
    let url = daemon.url(repo.name());
    drop(daemon);
    let output = run_git(repo.base_dir(), &["ls-remote", &url]);
    assert!(!output.status.success(), "ls-remote after drop should fail");
}

#[tokio::test]
async fn http_basic_auth_with_credentials_in_url() {
    let repo = BareRepo::create(&[("pod.yaml", MANIFEST)]);
    let server = GitHttpServer::start(repo.base_dir(), HttpAuth::basic(USER, TOKEN));
    let url = server.url_with_credentials(repo.name(), USER, TOKEN);

    clone_commit_push(&repo, &url, "pin over http");
    fetch_sees_other_writer(&repo, &url);

    let requests = server.requests();
    // git asks anonymously first, then retries with the URL's credentials.
    assert_eq!(requests[0].status, 401);
    assert_eq!(requests[0].user, None);
    assert_eq!(requests[1].status, 200);
    assert_eq!(requests[1].user.as_deref(), Some(USER));
    let push = requests
        .iter()
        .find(|r| r.is_receive_pack())
        .expect("a push was recorded");
    assert_eq!((push.status, push.user.as_deref()), (200, Some(USER)));
    assert!(requests
        .iter()
        .any(|r| r.query.as_deref() == Some("service=git-upload-pack")));
    assert!(
        !format!("{requests:?}").contains(TOKEN),
        "the request log must not hold the token"
    );
}

#[tokio::test]
async fn http_basic_auth_with_extra_header() {
    let repo = BareRepo::create(&[("pod.yaml", MANIFEST)]);
    let server = GitHttpServer::start(repo.base_dir(), HttpAuth::basic(USER, TOKEN));
    let url = server.url(repo.name());
    let credentials = base64_encode(&format!("{USER}:{TOKEN}"));
    let header = format!("http.extraHeader=Authorization: Basic {credentials}");

    let work = tempfile::tempdir().unwrap();
    git_ok(work.path(), &["-c", &header, "clone", "--quiet", &url, "."]);
    commit_file(work.path(), "pod.yaml", "changed\n", "pin with header");
    git_ok(
        work.path(),
        &["-c", &header, "push", "--quiet", "origin", "main"],
    );
    assert_eq!(repo.read("main", "pod.yaml").as_deref(), Some("changed\n"));

    // The header goes with every request, so none is refused.
    let requests = server.requests();
    assert!(
        requests
            .iter()
            .all(|r| r.status == 200 && r.user.as_deref() == Some(USER)),
        "{requests:#?}"
    );
}

#[tokio::test]
async fn http_wrong_or_missing_token_is_refused_with_401() {
    let repo = BareRepo::create(&[("pod.yaml", MANIFEST)]);
    let server = GitHttpServer::start(repo.base_dir(), HttpAuth::basic(USER, TOKEN));
    let dir = tempfile::tempdir().unwrap();

    let wrong = server.url_with_credentials(repo.name(), USER, "wrong-token");
    let output = run_git(dir.path(), &["clone", &wrong, "wrong"]);
    assert!(!output.status.success());
    let message = stderr(&output);
    assert!(message.contains("Authentication failed"), "{message}");
    assert!(
        !message.contains("wrong-token"),
        "git should not echo the token: {message}"
    );

    let output = run_git(
        dir.path(),
        &["clone", &server.url(repo.name()), "anonymous"],
    );
    assert!(!output.status.success());
    let message = stderr(&output);
    assert!(message.contains("could not read Username"), "{message}");

    let requests = server.requests();
    assert!(!requests.is_empty());
    assert!(
        requests.iter().all(|r| r.status == 401 && r.user.is_none()),
        "{requests:#?}"
    );
}

#[tokio::test]
async fn http_without_auth_allows_clone_and_push() {
    let repo = BareRepo::create(&[("pod.yaml", MANIFEST)]);
    let server = GitHttpServer::start(repo.base_dir(), HttpAuth::None);
    clone_commit_push(&repo, &server.url(repo.name()), "anonymous push");
    assert!(server
        .requests()
        .iter()
        .all(|r| r.status == 200 && r.user.is_none()));
}

#[tokio::test]
async fn http_push_larger_than_post_buffer_is_streamed() {
    // git streams a request body over http.postBuffer (1 MiB) chunked, with
    // no Content-Length: http-backend then reads stdin to its end.
    let repo = BareRepo::create(&[("pod.yaml", MANIFEST)]);
    let server = GitHttpServer::start(repo.base_dir(), HttpAuth::basic(USER, TOKEN));
    let work = clone(&server.url_with_credentials(repo.name(), USER, TOKEN));
    let big = pseudo_random_hex(3 * 1024 * 1024);
    commit_file(work.path(), "big.txt", &big, "big file");
    git_ok(work.path(), &["push", "--quiet", "origin", "main"]);
    assert_eq!(
        repo.read("main", "big.txt").map(|text| text.len()),
        Some(big.len())
    );
}

#[tokio::test]
async fn http_fetch_negotiation_is_gzip_encoded() {
    // Asking for 50 branch tips makes the fetch request over 1 KiB, which
    // git sends gzip-encoded; http-backend inflates it itself.
    let repo = BareRepo::create(&[("pod.yaml", MANIFEST)]);
    let work = clone(&repo.file_url());
    for i in 0..50 {
        commit_file(
            work.path(),
            "counter.txt",
            &format!("{i}\n"),
            &format!("commit {i}"),
        );
        git_ok(work.path(), &["branch", &format!("b{i:02}")]);
    }
    git_ok(
        work.path(),
        &["push", "--quiet", "origin", "refs/heads/*:refs/heads/*"],
    );
    assert_eq!(repo.branches().len(), 51);

    let server = GitHttpServer::start(repo.base_dir(), HttpAuth::basic(USER, TOKEN));
    let url = server.url_with_credentials(repo.name(), USER, TOKEN);
    let mirror = tempfile::tempdir().unwrap();
    git_ok(mirror.path(), &["clone", "--quiet", "--mirror", &url, "."]);
    assert_eq!(
        git_ok(mirror.path(), &["rev-parse", "b49"]),
        repo.head("b49").unwrap()
    );

    let requests = server.requests();
    let gzipped: Vec<_> = requests.iter().filter(|r| r.gzip).collect();
    assert!(!gzipped.is_empty(), "no gzip request: {requests:#?}");
    assert!(gzipped
        .iter()
        .all(|r| r.status == 200 && r.path.ends_with("/git-upload-pack")));
}

// ---------------------------------------------------------------------------
// Protection, races, faults (git CLI)
// ---------------------------------------------------------------------------

#[tokio::test]
async fn protected_branch_rejects_pushes_over_every_transport() {
    let repo = BareRepo::create(&[("pod.yaml", MANIFEST)]);
    repo.protect("main");
    let daemon = GitDaemon::start(repo.base_dir());
    let http = GitHttpServer::start(repo.base_dir(), HttpAuth::basic(USER, TOKEN));
    let before = repo.head("main");

    for url in [
        repo.file_url(),
        daemon.url(repo.name()),
        http.url_with_credentials(repo.name(), USER, TOKEN),
    ] {
        let work = clone(&url);
        commit_file(work.path(), "pod.yaml", "direct\n", "direct push");
        let output = run_git(work.path(), &["push", "origin", "main"]);
        assert!(
            !output.status.success(),
            "push to protected main over {url} succeeded"
        );
        let message = stderr(&output);
        assert!(
            message.contains(
                "remote: protected branch main: changes must be made through a pull request"
            ),
            "{url}: {message}"
        );
        assert!(
            message.contains("[remote rejected] main -> main (pre-receive hook declined)"),
            "{message}"
        );

        // Other branches (a tagpin PR branch) stay open.
        git_ok(
            work.path(),
            &["push", "--quiet", "origin", "HEAD:refs/heads/tagpin/pin"],
        );
        git_ok(
            work.path(),
            &["push", "--quiet", "--delete", "origin", "tagpin/pin"],
        );
    }
    assert_eq!(repo.head("main"), before);

    // The other writer plays an admin or a merged pull request.
    repo.commit_as_other_writer("main", &[("pod.yaml", "merged\n")], "merge PR");
    assert_eq!(repo.read("main", "pod.yaml").as_deref(), Some("merged\n"));
}

#[tokio::test]
async fn commit_landing_before_receive_pack_rejects_the_push() {
    let repo = BareRepo::create(&[("pod.yaml", MANIFEST)]);
    let server = GitHttpServer::start(repo.base_dir(), HttpAuth::basic(USER, TOKEN));
    let work = clone(&server.url_with_credentials(repo.name(), USER, TOKEN));
    commit_file(work.path(), "pod.yaml", "ours\n", "tagpin pin");

    let other = repo.clone();
    server.before_next_receive_pack(move || {
        other.commit_as_other_writer("main", &[("other.txt", "theirs\n")], "racing commit");
    });
    let output = run_git(work.path(), &["push", "origin", "main"]);
    assert!(!output.status.success(), "the raced push succeeded");
    let message = stderr(&output);
    eprintln!("git CLI, commit before receive-pack POST:\n{message}");
    assert!(
        message.contains("[remote rejected] main -> main"),
        "{message}"
    );
    assert_eq!(repo.log("main")[0].1, "racing commit");

    // The hook ran once: fetch, rebase and push again now succeeds.
    git_ok(
        work.path(),
        &["pull", "--quiet", "--rebase", "origin", "main"],
    );
    git_ok(work.path(), &["push", "--quiet", "origin", "main"]);
    let subjects: Vec<_> = repo.log("main").into_iter().map(|(_, s)| s).collect();
    assert_eq!(subjects, ["tagpin pin", "racing commit", "initial commit"]);
}

#[tokio::test]
async fn commit_landing_before_push_advertisement_is_non_fast_forward() {
    let repo = BareRepo::create(&[("pod.yaml", MANIFEST)]);
    let server = GitHttpServer::start(repo.base_dir(), HttpAuth::basic(USER, TOKEN));
    let work = clone(&server.url_with_credentials(repo.name(), USER, TOKEN));
    commit_file(work.path(), "pod.yaml", "ours\n", "tagpin pin");

    let other = repo.clone();
    server.before_next_push_advertisement(move || {
        other.commit_as_other_writer("main", &[("other.txt", "theirs\n")], "racing commit");
    });
    server.clear_requests();
    let output = run_git(work.path(), &["push", "origin", "main"]);
    assert!(!output.status.success(), "the raced push succeeded");
    let message = stderr(&output);
    eprintln!("git CLI, commit before push advertisement:\n{message}");
    assert!(message.contains("! [rejected]"), "{message}");
    assert!(message.contains("(fetch first)"), "{message}");
    // git refused by itself: no pack was sent.
    assert!(!server.requests().iter().any(|r| r.is_receive_pack()));
}

#[tokio::test]
async fn fail_next_answers_with_the_status_then_recovers() {
    let repo = BareRepo::create(&[("pod.yaml", MANIFEST)]);
    let server = GitHttpServer::start(repo.base_dir(), HttpAuth::basic(USER, TOKEN));
    let url = server.url_with_credentials(repo.name(), USER, TOKEN);
    let dir = tempfile::tempdir().unwrap();

    server.fail_next(1, 503);
    let output = run_git(dir.path(), &["clone", &url, "first"]);
    assert!(!output.status.success());
    let message = stderr(&output);
    assert!(message.contains("503"), "{message}");

    git_ok(dir.path(), &["clone", "--quiet", &url, "second"]);
    let statuses: Vec<u16> = server.requests().iter().map(|r| r.status).collect();
    assert_eq!(statuses[0], 503);
    assert!(
        statuses[1..]
            .iter()
            .all(|status| [200, 401].contains(status)),
        "{statuses:?}"
    );
}

#[tokio::test]
async fn fail_next_can_fail_a_push() {
    let repo = BareRepo::create(&[("pod.yaml", MANIFEST)]);
    let server = GitHttpServer::start(repo.base_dir(), HttpAuth::basic(USER, TOKEN));
    let work = clone(&server.url_with_credentials(repo.name(), USER, TOKEN));
    commit_file(work.path(), "pod.yaml", "ours\n", "tagpin pin");
    let before = repo.head("main");

    server.fail_next(1, 500);
    let output = run_git(work.path(), &["push", "origin", "main"]);
    assert!(!output.status.success());
    assert!(stderr(&output).contains("500"), "{}", stderr(&output));
    assert_eq!(repo.head("main"), before);
    git_ok(work.path(), &["push", "--quiet", "origin", "main"]);
}

#[tokio::test]
async fn http_server_stops_on_drop() {
    let repo = BareRepo::create(&[]);
    let server = GitHttpServer::start(repo.base_dir(), HttpAuth::None);
    let url = server.url(repo.name());
    git_ok(repo.base_dir(), &["ls-remote", &url]);
    drop(server);
    assert!(!run_git(repo.base_dir(), &["ls-remote", &url])
        .status
        .success());
}

// ---------------------------------------------------------------------------
// libgit2 (the client tagpin uses)
// ---------------------------------------------------------------------------

/// What a libgit2 push reported through its callbacks.
#[derive(Debug, Default)]
struct PushReport {
    /// `(refname, Some(rejection message))` per ref, from `push_update_reference`.
    updates: Vec<(String, Option<String>)>,
    /// The server's `remote:` messages, from `sideband_progress`.
    remote_text: String,
}

/// Callbacks answering a 401 with `user`/`token`, once: libgit2 asks again
/// after every 401, so a wrong token would otherwise loop forever.
fn credentials_callbacks<'a>(user: &'a str, token: &'a str) -> git2::RemoteCallbacks<'a> {
    let mut callbacks = git2::RemoteCallbacks::new();
    let mut asked = 0;
    callbacks.credentials(move |_url, _username, allowed| {
        asked += 1;
        assert!(
            allowed.contains(git2::CredentialType::USER_PASS_PLAINTEXT),
            "{allowed:?}"
        );
        if asked > 1 {
            return Err(git2::Error::from_str("credentials were refused"));
        }
        git2::Cred::userpass_plaintext(user, token)
    });
    callbacks
}

fn libgit2_clone(url: &str, dir: &Path, token: &str) -> Result<git2::Repository, git2::Error> {
    let mut fetch = git2::FetchOptions::new();
    fetch.remote_callbacks(credentials_callbacks(USER, token));
    git2::build::RepoBuilder::new()
        .fetch_options(fetch)
        .clone(url, dir)
}

/// Commits `path` = `content` on the checked-out branch, as tagpin would.
fn libgit2_commit(repo: &git2::Repository, path: &str, content: &str, message: &str) -> git2::Oid {
    let workdir = repo.workdir().expect("non-bare clone");
    std::fs::write(workdir.join(path), content).unwrap();
    let mut index = repo.index().unwrap();
    index.add_path(Path::new(path)).unwrap();
    index.write().unwrap();
    let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
    let parent = repo.head().unwrap().peel_to_commit().unwrap();
    let signature = git2::Signature::new(
        "tagpin",
        "tagpin@example.com",
        &git2::Time::new(1_704_067_200, 0),
    )
    .unwrap();
    repo.commit(
        Some("HEAD"),
        &signature,
        &signature,
        message,
        &tree,
        &[&parent],
    )
    .unwrap()
}

/// Pushes `refspec` to origin; returns push()'s result and what the
/// callbacks saw.
fn libgit2_push(repo: &git2::Repository, refspec: &str) -> (Result<(), git2::Error>, PushReport) {
    let report = RefCell::new(PushReport::default());
    let result = {
        let mut callbacks = credentials_callbacks(USER, TOKEN);
        callbacks.push_update_reference(|refname, status| {
            let update = (refname.to_string(), status.map(str::to_string));
            report.borrow_mut().updates.push(update);
            Ok(())
        });
        callbacks.sideband_progress(|data| {
            report
                .borrow_mut()
                .remote_text
                .push_str(&String::from_utf8_lossy(data));
            true
        });
        let mut options = git2::PushOptions::new();
        options.remote_callbacks(callbacks);
        let mut remote = repo.find_remote("origin").unwrap();
        remote.push(&[refspec], Some(&mut options))
    };
    (result, report.into_inner())
}

#[tokio::test]
async fn libgit2_clones_commits_and_pushes_over_http_with_basic_auth() {
    let repo = BareRepo::create(&[("pod.yaml", MANIFEST)]);
    let server = GitHttpServer::start(repo.base_dir(), HttpAuth::basic(USER, TOKEN));
    let dir = tempfile::tempdir().unwrap();

    let clone = libgit2_clone(&server.url(repo.name()), dir.path(), TOKEN).expect("libgit2 clone");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("pod.yaml")).unwrap(),
        MANIFEST
    );
    let oid = libgit2_commit(&clone, "pod.yaml", "pinned\n", "tagpin: pin nginx");

    let (result, report) = libgit2_push(&clone, "refs/heads/main:refs/heads/main");
    result.expect("libgit2 push");
    assert_eq!(report.updates, vec![("refs/heads/main".to_string(), None)]);
    assert_eq!(repo.head("main"), Some(oid.to_string()));
    assert_eq!(repo.read("main", "pod.yaml").as_deref(), Some("pinned\n"));

    // A tagpin PR branch is created the same way.
    let (result, report) = libgit2_push(&clone, "refs/heads/main:refs/heads/tagpin/pin-nginx");
    result.expect("push a new branch");
    assert_eq!(
        report.updates,
        vec![("refs/heads/tagpin/pin-nginx".to_string(), None)]
    );
    assert_eq!(
        repo.branches(),
        vec!["main".to_string(), "tagpin/pin-nginx".to_string()]
    );

    let requests = server.requests();
    assert!(requests
        .iter()
        .any(|r| r.is_receive_pack() && r.user.as_deref() == Some(USER)));
}

#[tokio::test]
async fn libgit2_with_a_wrong_token_gets_an_auth_error() {
    let repo = BareRepo::create(&[("pod.yaml", MANIFEST)]);
    let server = GitHttpServer::start(repo.base_dir(), HttpAuth::basic(USER, TOKEN));
    let dir = tempfile::tempdir().unwrap();

    let err = libgit2_clone(&server.url(repo.name()), dir.path(), "wrong-token")
        .err()
        .expect("clone with a wrong token must fail");
    eprintln!("libgit2, wrong token: {err:?}");
    assert!(
        err.message().contains("credentials were refused"),
        "{err:?}"
    );
    assert!(server.requests().iter().all(|r| r.status == 401));
}

#[tokio::test]
async fn libgit2_sees_the_protected_branch_rejection() {
    let repo = BareRepo::create(&[("pod.yaml", MANIFEST)]);
    repo.protect("main");
    let server = GitHttpServer::start(repo.base_dir(), HttpAuth::basic(USER, TOKEN));
    let dir = tempfile::tempdir().unwrap();
    let clone = libgit2_clone(&server.url(repo.name()), dir.path(), TOKEN).unwrap();
    libgit2_commit(&clone, "pod.yaml", "pinned\n", "tagpin: pin nginx");
    let before = repo.head("main");

    let (result, report) = libgit2_push(&clone, "refs/heads/main:refs/heads/main");
    eprintln!("libgit2, protected branch: result {result:?}, {report:?}");
    // push() itself succeeds: a ref the server refused is reported only
    // through push_update_reference, which callers must check.
    result.expect("push() returns Ok for a server-side rejection");
    assert_eq!(
        report.updates,
        vec![(
            "refs/heads/main".to_string(),
            Some("pre-receive hook declined".to_string())
        )]
    );
    assert!(
        report
            .remote_text
            .contains("protected branch main: changes must be made through a pull request"),
        "{report:?}"
    );
    assert_eq!(repo.head("main"), before);
}

#[tokio::test]
async fn libgit2_push_after_a_commit_landed_since_its_fetch_is_non_fast_forward() {
    let repo = BareRepo::create(&[("pod.yaml", MANIFEST)]);
    let server = GitHttpServer::start(repo.base_dir(), HttpAuth::basic(USER, TOKEN));
    let dir = tempfile::tempdir().unwrap();
    let clone = libgit2_clone(&server.url(repo.name()), dir.path(), TOKEN).unwrap();
    libgit2_commit(&clone, "pod.yaml", "pinned\n", "tagpin: pin nginx");

    let other = repo.clone();
    server.before_next_push_advertisement(move || {
        other.commit_as_other_writer("main", &[("other.txt", "theirs\n")], "racing commit");
    });
    let (result, report) = libgit2_push(&clone, "refs/heads/main:refs/heads/main");
    eprintln!("libgit2, commit before push advertisement: result {result:?}, {report:?}");
    let err = result.expect_err("libgit2 must refuse a non-fast-forward push");
    assert_eq!(err.code(), git2::ErrorCode::NotFastForward, "{err:?}");
    assert_eq!(repo.log("main")[0].1, "racing commit");
}

#[tokio::test]
async fn libgit2_push_racing_a_commit_at_receive_pack_is_rejected_by_the_server() {
    let repo = BareRepo::create(&[("pod.yaml", MANIFEST)]);
    let server = GitHttpServer::start(repo.base_dir(), HttpAuth::basic(USER, TOKEN));
    let dir = tempfile::tempdir().unwrap();
    let clone = libgit2_clone(&server.url(repo.name()), dir.path(), TOKEN).unwrap();
    let ours = libgit2_commit(&clone, "pod.yaml", "pinned\n", "tagpin: pin nginx");

    let other = repo.clone();
    server.before_next_receive_pack(move || {
        other.commit_as_other_writer("main", &[("other.txt", "theirs\n")], "racing commit");
    });
    let (result, report) = libgit2_push(&clone, "refs/heads/main:refs/heads/main");
    eprintln!("libgit2, commit before receive-pack POST: result {result:?}, {report:?}");
    result.expect("push() returns Ok for a server-side rejection");
    let (refname, status) = &report.updates[0];
    assert_eq!(refname, "refs/heads/main");
    assert!(
        status.is_some(),
        "the server must refuse the stale update: {report:?}"
    );
    assert_ne!(repo.head("main"), Some(ours.to_string()));
    assert_eq!(repo.log("main")[0].1, "racing commit");
}

// ---------------------------------------------------------------------------
// Small helpers
// ---------------------------------------------------------------------------

fn base64_encode(text: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// `len` hex digits from a fixed LCG: content git cannot compress much, so
/// the pack stays over 1 MiB.
fn pseudo_random_hex(len: usize) -> String {
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut text = String::with_capacity(len + 1);
    while text.len() < len {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        text.push_str(&format!("{:016x}", state));
    }
    text.truncate(len);
    text.push('\n');
    text
}

#[tokio::test]
async fn an_amended_tip_keeps_message_and_author_and_a_reset_moves_the_branch_back() {
    let repo = BareRepo::create(&[("a.txt", "a\n")]);
    let first = repo.commit_as_other_writer("feature", &[("b.txt", "b\n")], "Add b\n\nTrailer: x");
    let amended = repo.amend_tip_as("feature", &[("c.txt", "c\n")], "Bot", "bot@example.com");

    assert_ne!(amended, first);
    assert_eq!(repo.head("feature").as_deref(), Some(amended.as_str()));
    assert_eq!(repo.read("feature", "c.txt").as_deref(), Some("c\n"));
    let show = |sha: &str, format: &str| {
        git_ok(
            repo.path(),
            &["show", "--no-patch", &format!("--format={format}"), sha],
        )
    };
    assert_eq!(show(&amended, "%B"), show(&first, "%B"));
    assert_eq!(show(&amended, "%an <%ae>"), show(&first, "%an <%ae>"));
    assert_eq!(show(&amended, "%cn <%ce>"), "Bot <bot@example.com>");
    assert_eq!(show(&amended, "%P"), show(&first, "%P"), "the same parent");

    repo.reset_branch("feature", &first);
    assert_eq!(repo.head("feature").as_deref(), Some(first.as_str()));
}
