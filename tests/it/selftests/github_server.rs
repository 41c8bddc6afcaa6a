//! Proves the local GitHub server (`tests/it/support/github.rs`) is faithful
//! enough to test tagpin's GitHub code against: octocrab, the client tagpin
//! uses, must parse every response, and the server must refuse what GitHub
//! refuses (bad token, schema-invalid bodies, missing branches, duplicates).
//! If octocrab or the OpenAPI subset changes, these tests say so first.

use crate::support;

use std::time::{SystemTime, UNIX_EPOCH};

use octocrab::models::StatusState;
use octocrab::params;
use octocrab::Octocrab;
use serde_json::{json, Value};
use support::github::{Fault, GitHubServer, PrState, TestRepo, TOKEN_USER_LOGIN};

const TOKEN: &str = "ghp_selftestTOKEN0123456789abcdefghijklmn";
const OWNER: &str = "acme";
const REPO: &str = "deploy";

/// A bare repository with `main` and a `feature` branch one commit ahead.
fn repo_with_feature() -> TestRepo {
    let repo = TestRepo::new();
    repo.commit_file("main", "app.yaml", "image: app:1.0\n");
    let main = repo.branch_sha("main").expect("main");
    repo.set_branch("feature", &main);
    repo.commit_file("feature", "app.yaml", "image: app@sha256:abc\n");
    repo
}

/// The octocrab client tagpin would build, pointed at the test server.
fn client(server: &GitHubServer, token: &str) -> Octocrab {
    Octocrab::builder()
        .base_uri(server.api_url())
        .expect("base_uri")
        .personal_token(token.to_string())
        .build()
        .expect("build octocrab")
}

/// The `GitHubError` inside an octocrab error, or a panic naming the error.
fn github_error(error: octocrab::Error) -> Box<octocrab::GitHubError> {
    match error {
        octocrab::Error::GitHub { source, .. } => source,
        other => panic!("expected a GitHub error, got {other:?}"),
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs()
}

#[tokio::test]
async fn octocrab_parses_every_operation() {
    let repo = repo_with_feature();
    let server = GitHubServer::start(TOKEN, OWNER, REPO, repo.path()).await;
    let gh = client(&server, TOKEN);
    let feature_sha = repo.branch_sha("feature").unwrap();

    // pulls/create
    let pr = gh
        .pulls(OWNER, REPO)
        .create("Pin images", "feature", "main")
        .body("Pins app to a digest.")
        .send()
        .await
        .expect("create pull request");
    assert_eq!(pr.number, 1);
    assert_eq!(pr.title.as_deref(), Some("Pin images"));
    assert_eq!(pr.head.ref_field, "feature");
    assert_eq!(pr.head.sha, feature_sha);
    assert_eq!(pr.head.label.as_deref(), Some("acme:feature"));
    assert_eq!(pr.base.ref_field, "main");
    assert_eq!(pr.merged, Some(false));
    assert_eq!(pr.merged_at, None);
    assert_eq!(
        pr.html_url.as_ref().map(|u| u.as_str()),
        Some(format!("{}/acme/deploy/pull/1", server.html_url()).as_str())
    );
    assert_eq!(
        pr.user.as_ref().map(|u| u.login.as_str()),
        Some(TOKEN_USER_LOGIN)
    );

    // pulls/list, filtered the way tagpin finds its own pull request.
    let page = gh
        .pulls(OWNER, REPO)
        .list()
        .state(params::State::Open)
        .head(format!("{OWNER}:feature"))
        .base("main")
        .send()
        .await
        .expect("list pull requests");
    assert_eq!(page.items.len(), 1);
    assert_eq!(page.items[0].number, 1);
    assert_eq!(page.items[0].head.sha, feature_sha);
    let other_owner = gh
        .pulls(OWNER, REPO)
        .list()
        .head("someone-else:feature")
        .send()
        .await
        .expect("list with another owner");
    assert!(other_owner.items.is_empty());

    // pulls/update
    let pr = gh
        .pulls(OWNER, REPO)
        .update(1)
        .title("Pin images (2)")
        .body("Updated body.")
        .send()
        .await
        .expect("update pull request");
    assert_eq!(pr.title.as_deref(), Some("Pin images (2)"));
    assert_eq!(pr.body.as_deref(), Some("Updated body."));

    // issues/add-labels
    let labels = gh
        .issues(OWNER, REPO)
        .add_labels(1, &["tagpin".to_string(), "automated".to_string()])
        .await
        .expect("add labels");
    let names: Vec<&str> = labels.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, ["tagpin", "automated"]);

    // pulls/get shows the labels.
    let pr = gh
        .pulls(OWNER, REPO)
        .get(1)
        .await
        .expect("get pull request");
    let names: Vec<String> = pr
        .labels
        .unwrap_or_default()
        .into_iter()
        .map(|l| l.name)
        .collect();
    assert_eq!(names, ["tagpin", "automated"]);

    // issues/create-comment, list-comments, update-comment
    let comment = gh
        .issues(OWNER, REPO)
        .create_comment(1, "<!-- tagpin -->\nfirst")
        .await
        .expect("create comment");
    assert_eq!(comment.body.as_deref(), Some("<!-- tagpin -->\nfirst"));
    assert_eq!(comment.user.login, TOKEN_USER_LOGIN);
    server.add_comment_as(1, "reviewer", "looks good");
    let comments = gh
        .issues(OWNER, REPO)
        .list_comments(1)
        .send()
        .await
        .expect("list comments");
    assert_eq!(comments.items.len(), 2);
    assert_eq!(comments.items[0].id, comment.id);
    assert_eq!(comments.items[1].user.login, "reviewer");
    let updated = gh
        .issues(OWNER, REPO)
        .update_comment(comment.id, "<!-- tagpin -->\nsecond")
        .await
        .expect("update comment");
    assert_eq!(updated.id, comment.id);
    assert_eq!(server.comments(1)[0].body, "<!-- tagpin -->\nsecond");
    // The sticky comment is still one comment of ours.
    assert_eq!(
        server
            .comments(1)
            .iter()
            .filter(|c| c.user == TOKEN_USER_LOGIN)
            .count(),
        1
    );

    // repos/create-commit-status, list-commit-statuses-for-ref, combined
    let status = gh
        .repos(OWNER, REPO)
        .create_status(feature_sha.clone(), StatusState::Pending)
        .context("tagpin/converged".to_string())
        .description("waiting for the cluster".to_string())
        .target("https://ci.example.invalid/run/1".to_string())
        .send()
        .await
        .expect("create status");
    assert_eq!(status.state, StatusState::Pending);
    assert_eq!(status.context.as_deref(), Some("tagpin/converged"));
    gh.repos(OWNER, REPO)
        .create_status(feature_sha.clone(), StatusState::Success)
        .context("tagpin/converged".to_string())
        .send()
        .await
        .expect("create second status");
    let statuses = gh
        .repos(OWNER, REPO)
        .list_statuses(feature_sha.clone())
        .send()
        .await
        .expect("list statuses");
    let states: Vec<StatusState> = statuses.items.iter().map(|s| s.state).collect();
    assert_eq!(states, [StatusState::Success, StatusState::Pending]);
    let combined = gh
        .repos(OWNER, REPO)
        .combined_status_for_ref(&params::repos::Reference::Branch("feature".to_string()))
        .await
        .expect("combined status");
    assert_eq!(combined.state, StatusState::Success);
    assert_eq!(combined.sha, feature_sha);
    assert_eq!(combined.total_count, 1);
    assert_eq!(server.statuses(&feature_sha).len(), 2);

    let requests = server.requests();
    assert!(requests.iter().all(|r| r.status < 400), "{requests:#?}");
    server.assert_no_violations();
}

#[tokio::test]
async fn wrong_or_missing_token_is_401_and_never_echoed() {
    let repo = repo_with_feature();
    let server = GitHubServer::start(TOKEN, OWNER, REPO, repo.path()).await;
    let wrong = "ghp_wrongTOKENwrongTOKENwrongTOKENwrong0";
    let error = client(&server, wrong)
        .pulls(OWNER, REPO)
        .list()
        .send()
        .await
        .expect_err("wrong token must fail");
    let error = github_error(error);
    assert_eq!(error.status_code.as_u16(), 401);
    assert_eq!(error.message, "Bad credentials");

    // Raw requests: `token` scheme works, and no body mentions a token.
    let http = reqwest::Client::new();
    let url = format!("{}/repos/{OWNER}/{REPO}/pulls", server.api_url());
    let ok = http
        .get(&url)
        .header("authorization", format!("token {TOKEN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    let bad = http
        .get(&url)
        .header("authorization", format!("Bearer {wrong}"))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 401);
    let text = bad.text().await.unwrap();
    assert!(!text.contains(wrong), "{text}");
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(body["message"], "Bad credentials");
    assert!(body["documentation_url"].is_string());
    let missing = http.get(&url).send().await.unwrap();
    assert_eq!(missing.status(), 401);

    let recorded = format!("{:?}", server.requests());
    assert!(!recorded.contains(TOKEN) && !recorded.contains(wrong));
    assert!(server.prs().is_empty());
    server.assert_no_violations();
}

#[tokio::test]
async fn schema_invalid_status_is_422_and_a_violation() {
    let repo = repo_with_feature();
    let server = GitHubServer::start(TOKEN, OWNER, REPO, repo.path()).await;
    let gh = client(&server, TOKEN);
    let sha = repo.branch_sha("feature").unwrap();
    // octocrab's StatusState cannot say "green"; its generic post can.
    let result: octocrab::Result<Value> = gh
        .post(
            format!("/repos/{OWNER}/{REPO}/statuses/{sha}"),
            Some(&json!({"state": "green", "context": "tagpin"})),
        )
        .await;
    let error = github_error(result.expect_err("invalid state must fail"));
    assert_eq!(error.status_code.as_u16(), 422);
    assert!(error.message.starts_with("Invalid request."), "{error:?}");
    let violations = server.take_violations();
    assert_eq!(violations.len(), 1, "{violations:#?}");
    assert_eq!(
        violations[0].operation.as_deref(),
        Some("repos/create-commit-status")
    );
    assert!(violations[0].reason.contains("green"), "{violations:#?}");
    assert!(server.statuses(&sha).is_empty());

    // A description over 140 characters is GitHub's rule, not the schema's.
    let long = "x".repeat(141);
    let error = gh
        .repos(OWNER, REPO)
        .create_status(sha.clone(), StatusState::Success)
        .description(long)
        .send()
        .await
        .expect_err("long description must fail");
    let error = github_error(error);
    assert_eq!(error.status_code.as_u16(), 422);
    assert_eq!(error.errors.as_ref().unwrap()[0]["field"], "description");
    assert_eq!(server.take_violations().len(), 1);

    // A status for a commit the repository does not have.
    let error = gh
        .repos(OWNER, REPO)
        .create_status("0".repeat(40), StatusState::Success)
        .send()
        .await
        .expect_err("unknown commit must fail");
    assert_eq!(github_error(error).status_code.as_u16(), 422);

    // A pull request body of the wrong type, and an unknown endpoint.
    let result: octocrab::Result<Value> = gh
        .post(
            format!("/repos/{OWNER}/{REPO}/pulls"),
            Some(&json!({"title": 5, "head": "feature", "base": "main"})),
        )
        .await;
    assert_eq!(github_error(result.unwrap_err()).status_code.as_u16(), 422);
    let result: octocrab::Result<Value> = gh
        .get(format!("/repos/{OWNER}/{REPO}/branches"), None::<&()>)
        .await;
    let error = github_error(result.unwrap_err());
    assert_eq!(error.status_code.as_u16(), 404);
    assert!(error.message.contains("no such endpoint"), "{error:?}");
    let violations = server.take_violations();
    assert_eq!(violations.len(), 2, "{violations:#?}");
    assert!(server.prs().is_empty());

    // A body that is not JSON: 400 as GitHub answers, naming the problem.
    let response = reqwest::Client::new()
        .post(format!("{}/repos/{OWNER}/{REPO}/pulls", server.api_url()))
        .bearer_auth(TOKEN)
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 400);
    let body: Value = response.json().await.unwrap();
    let message = body["message"].as_str().unwrap();
    assert!(
        message.starts_with("Problems parsing JSON") && message.contains("not JSON"),
        "{body}"
    );
    assert_eq!(server.take_violations().len(), 1);
}

/// A violation the test did not take fails it when the server is dropped, even if the test
/// forgot to call `assert_no_violations`.
#[tokio::test]
#[should_panic(expected = "the GitHub test server saw 1 request(s) GitHub would reject")]
async fn a_violation_nobody_took_fails_the_test_on_drop() {
    let repo = repo_with_feature();
    let server = GitHubServer::start(TOKEN, OWNER, REPO, repo.path()).await;
    let sha = repo.branch_sha("feature").unwrap();
    let result: octocrab::Result<Value> = client(&server, TOKEN)
        .post(
            format!("/repos/{OWNER}/{REPO}/statuses/{sha}"),
            Some(&json!({"state": "green", "context": "tagpin"})),
        )
        .await;
    assert_eq!(github_error(result.unwrap_err()).status_code.as_u16(), 422);
}

#[tokio::test]
async fn pull_request_rules_match_github() {
    let repo = repo_with_feature();
    let server = GitHubServer::start(TOKEN, OWNER, REPO, repo.path()).await;
    let gh = client(&server, TOKEN);

    // Head branch missing.
    let error = gh
        .pulls(OWNER, REPO)
        .create("t", "no-such-branch", "main")
        .send()
        .await
        .expect_err("missing head must fail");
    let error = github_error(error);
    assert_eq!(error.status_code.as_u16(), 422);
    assert_eq!(error.message, "Validation Failed");
    assert_eq!(
        error.errors.unwrap(),
        [json!({"resource": "PullRequest", "field": "head", "code": "invalid"})]
    );

    // Nothing to merge: head is already in base.
    let main = repo.branch_sha("main").unwrap();
    repo.set_branch("same", &main);
    let error = gh
        .pulls(OWNER, REPO)
        .create("t", "same", "main")
        .send()
        .await
        .expect_err("no commits must fail");
    let errors = github_error(error).errors.unwrap();
    assert_eq!(errors[0]["message"], "No commits between main and same");

    // A second open pull request for the same head and base.
    gh.pulls(OWNER, REPO)
        .create("first", "acme:feature", "main")
        .send()
        .await
        .expect("first pull request");
    let error = gh
        .pulls(OWNER, REPO)
        .create("second", "feature", "main")
        .send()
        .await
        .expect_err("duplicate must fail");
    let error = github_error(error);
    assert_eq!(error.status_code.as_u16(), 422);
    assert_eq!(
        error.errors.unwrap()[0]["message"],
        "A pull request already exists for acme:feature."
    );

    // GitHub ignores a `head` filter without `owner:`.
    repo.commit_file("other", "x", "y");
    gh.pulls(OWNER, REPO)
        .create("other", "other", "main")
        .send()
        .await
        .expect("other pull request");
    let all = gh
        .pulls(OWNER, REPO)
        .list()
        .head("feature")
        .send()
        .await
        .unwrap();
    assert_eq!(all.items.len(), 2);
    // Pagination: newest first, one per page, with a next link.
    let page = gh
        .pulls(OWNER, REPO)
        .list()
        .per_page(1u8)
        .send()
        .await
        .unwrap();
    assert_eq!(page.items.len(), 1);
    assert_eq!(page.items[0].number, 2);
    assert!(page.next.is_some());

    server.assert_no_violations();
}

#[tokio::test]
async fn merge_close_and_branch_pushes_show_through_the_api() {
    let repo = repo_with_feature();
    let server = GitHubServer::start(TOKEN, OWNER, REPO, repo.path()).await;
    let gh = client(&server, TOKEN);
    let pulls = gh.pulls(OWNER, REPO);
    pulls.create("a", "feature", "main").send().await.unwrap();

    // A push to the head branch moves head.sha.
    let pushed = repo.commit_file("feature", "app.yaml", "image: app@sha256:def\n");
    assert_eq!(pulls.get(1).await.unwrap().head.sha, pushed);

    server.merge_pr(1, "e5bd3914e2e596debea16f433f57875b5b90bcd6");
    let pr = pulls.get(1).await.unwrap();
    assert_eq!(pr.merged, Some(true));
    assert!(pr.merged_at.is_some());
    assert_eq!(
        pr.merge_commit_sha.as_deref(),
        Some("e5bd3914e2e596debea16f433f57875b5b90bcd6")
    );
    let open = pulls.list().send().await.unwrap();
    assert!(open.items.is_empty());
    let closed = pulls
        .list()
        .state(params::State::Closed)
        .send()
        .await
        .unwrap();
    assert_eq!(closed.items.len(), 1);
    assert!(closed.items[0].merged_at.is_some());

    // After a merge the same branch can get a new pull request.
    repo.commit_file("feature", "app.yaml", "image: app@sha256:123\n");
    pulls.create("b", "feature", "main").send().await.unwrap();
    server.close_pr(2);
    let pr = pulls.get(2).await.unwrap();
    assert_eq!(pr.merged, Some(false));
    assert!(pr.closed_at.is_some() && pr.merged_at.is_none());

    // Reopen via the API, then delete the head branch: GitHub closes it.
    let pr = pulls
        .update(2)
        .state(params::pulls::State::Open)
        .send()
        .await
        .unwrap();
    assert_eq!(pr.state, Some(octocrab::models::IssueState::Open));
    repo.delete_branch("feature");
    let pr = pulls.get(2).await.unwrap();
    assert_eq!(pr.state, Some(octocrab::models::IssueState::Closed));
    assert_eq!(server.prs()[1].state, PrState::Closed);
    server.assert_no_violations();
}

#[tokio::test]
async fn scripted_faults_and_octocrab_retries() {
    let repo = repo_with_feature();
    let server = GitHubServer::start(TOKEN, OWNER, REPO, repo.path()).await;
    let gh = client(&server, TOKEN);
    let pulls_path = format!("/repos/{OWNER}/{REPO}/pulls");

    // Primary rate limit: octocrab's default retry does not retry a 403,
    // and reports the reset time.
    let reset = unix_now() + 60;
    server.inject(Fault::rate_limit_exhausted("GET", &pulls_path, reset));
    let error = gh.pulls(OWNER, REPO).list().send().await.unwrap_err();
    let error = github_error(error);
    assert_eq!(error.status_code.as_u16(), 403);
    assert_eq!(error.rate_limit_reset, Some(reset));

    // Secondary rate limit (429 + retry-after): octocrab's default
    // `RetryConfig::Simple(3)` retries at once, ignoring retry-after.
    server.inject(Fault::secondary_rate_limit("GET", &pulls_path, 1));
    gh.pulls(OWNER, REPO).list().send().await.expect("retried");

    // A 500 before anything happened: the retry creates the pull request.
    server.fail_next_pr_create(500);
    let pr = gh
        .pulls(OWNER, REPO)
        .create("t", "feature", "main")
        .send()
        .await
        .expect("retried create");
    assert_eq!(pr.number, 1);
    let creates: Vec<u16> = server
        .requests()
        .iter()
        .filter(|r| r.method == "POST" && r.path == pulls_path)
        .map(|r| r.status)
        .collect();
    assert_eq!(creates, [500, 201]);

    // A 500 after the work was done (lost response): the retry then hits
    // "already exists", which the caller must handle by listing.
    repo.commit_file("second", "f", "x");
    server.inject(Fault::new("POST", &pulls_path, 500).after_effect());
    let error = gh
        .pulls(OWNER, REPO)
        .create("t", "second", "main")
        .send()
        .await
        .expect_err("lost response then duplicate");
    assert_eq!(github_error(error).status_code.as_u16(), 422);
    assert_eq!(server.prs().len(), 2);

    // Faults for any method, several times, with custom headers.
    server.inject(
        Fault::new("*", "/issues/", 502)
            .times(5)
            .header("x-test", "yes"),
    );
    let error = gh
        .issues(OWNER, REPO)
        .create_comment(1, "x")
        .await
        .unwrap_err();
    let error = github_error(error);
    assert_eq!(error.status_code.as_u16(), 502);
    assert_eq!(error.headers.unwrap()["x-test"], "yes");
    assert!(server.comments(1).is_empty());
    server.assert_no_violations();
}

#[tokio::test]
async fn forks_authors_the_token_user_and_conditional_reads_are_served_as_github_does() {
    let repo = repo_with_feature();
    let server = GitHubServer::start(TOKEN, OWNER, REPO, repo.path()).await;
    let gh = client(&server, TOKEN);
    let main = repo.branch_sha("main").unwrap();

    // GET /user: who the token is.
    let me = gh.current().user().await.expect("GET /user");
    assert_eq!(me.login, TOKEN_USER_LOGIN);

    // A fork's pull request: head.repo is another repository (id, owner, full name).
    let fork = server.open_pr_as(
        "mallory",
        Some("mallory"),
        "feature",
        &main,
        "main",
        "t",
        "b",
    );
    let pr = gh.pulls(OWNER, REPO).get(fork).await.expect("get fork PR");
    let (head, base) = (pr.head.repo.unwrap(), pr.base.repo.unwrap());
    assert_ne!(head.id, base.id);
    assert_eq!(head.full_name.as_deref(), Some("mallory/deploy"));
    assert_eq!(base.full_name.as_deref(), Some("acme/deploy"));
    assert_eq!(pr.head.label.as_deref(), Some("mallory:feature"));
    assert_eq!(pr.user.unwrap().login, "mallory");
    // GitHub's head=owner:branch filter names the fork's owner, not the base's.
    let ours = gh
        .pulls(OWNER, REPO)
        .list()
        .head(format!("{OWNER}:feature"))
        .send()
        .await
        .unwrap();
    assert!(ours.items.is_empty());

    // Conditional reads: 304 where GitHub documents it (pulls/get), never for statuses.
    let http = reqwest::Client::new();
    let get = |url: String, etag: Option<String>| {
        let mut request = http
            .get(url)
            .bearer_auth(TOKEN)
            .header("user-agent", "selftest");
        if let Some(etag) = etag {
            request = request.header("if-none-match", etag);
        }
        request.send()
    };
    let url = format!("{}/repos/{OWNER}/{REPO}/pulls/{fork}", server.api_url());
    let first = get(url.clone(), None).await.unwrap();
    assert_eq!(first.status(), 200);
    let etag = first.headers()["etag"].to_str().unwrap().to_string();
    let again = get(url.clone(), Some(etag.clone())).await.unwrap();
    assert_eq!(again.status(), 304);
    assert_eq!(again.headers()["etag"].to_str().unwrap(), etag);
    assert!(again.bytes().await.unwrap().is_empty());
    server.add_comment_as(fork, "reviewer", "looks odd");
    assert_eq!(get(url, Some(etag)).await.unwrap().status(), 200, "changed");
    server.add_status_as("ci-bot", &main, "success", "ci", "ok");
    let url = format!(
        "{}/repos/{OWNER}/{REPO}/commits/{main}/statuses",
        server.api_url()
    );
    let first = get(url.clone(), None).await.unwrap();
    let etag = first.headers()["etag"].to_str().unwrap().to_string();
    let body: Value = first.json().await.unwrap();
    assert_eq!(body[0]["creator"]["login"], "ci-bot");
    assert_eq!(get(url, Some(etag)).await.unwrap().status(), 200);
    server.assert_no_violations();
}
