//! Proves the local Bitbucket Data Center server (`tests/it/support/bitbucket_server.rs`)
//! answers as Data Center's REST API (`/rest/api/1.0`, the reference's OpenAPI types as
//! `@coderabbitai/bitbucket` 1.1.4 ships them) does, driven with plain HTTP (reqwest), so
//! tagpin's adapter can be tested against it: the reference's shapes, `start`/`nextPageStart`
//! paging, the `409`s of a duplicate pull request and of a stale version, comments only their
//! author may edit, one build status per commit and key with no author, `X-AUSERNAME`,
//! permissions and hidden repositories, refused requests kept as violations.

use crate::support;

use std::time::Duration;

use reqwest::header::HeaderMap;
use reqwest::Method;
use serde_json::{json, Value};
use support::bitbucket_server::{BitbucketDcServer, Permission};
use support::git::BareRepo;

const TOKEN: &str = "bbdc-selftest-0123456789abcdef";
const BOT: &str = "tagpin-bot";
const REPO: &str = "/rest/api/1.0/projects/ACME/repos/gitops";

/// A bare repository with `main` and a `feature` branch one commit ahead.
fn repo_with_feature() -> BareRepo {
    let repo = BareRepo::create(&[("apps/web.yaml", "image: web:1.0\n")]);
    repo.commit_as_other_writer(
        "feature",
        &[("apps/web.yaml", "image: web@sha256:abc\n")],
        "pin web",
    );
    repo
}

struct Answer {
    status: u16,
    headers: HeaderMap,
    text: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text))
    }
}

/// One request as a Bitbucket client sends it: `Authorization: Bearer …` when a token is given.
async fn call(
    server: &BitbucketDcServer,
    method: Method,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> Answer {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let mut request = client.request(method, format!("{}{path}", server.api_url()));
    if let Some(token) = token {
        request = request.header("Authorization", format!("Bearer {token}"));
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("request");
    Answer {
        status: response.status().as_u16(),
        headers: response.headers().clone(),
        text: response.text().await.expect("body"),
    }
}

fn branch(name: &str) -> Value {
    json!({"id": format!("refs/heads/{name}"),
           "repository": {"slug": "gitops", "project": {"key": "ACME"}}})
}

#[tokio::test]
async fn pull_requests_answer_in_the_references_shapes_with_their_versions() {
    let repo = repo_with_feature();
    let server = BitbucketDcServer::start(TOKEN, BOT, "ACME", "gitops", repo.path()).await;
    let feature = repo.head("feature").unwrap();

    let read = call(&server, Method::GET, REPO, Some(TOKEN), None).await;
    assert_eq!(read.status, 200, "{}", read.text);
    assert_eq!(read.headers["x-ausername"], BOT);
    assert_eq!(read.json()["project"]["key"], "ACME");

    let new = json!({"title": "Pin web", "description": "plan",
                     "fromRef": branch("feature"), "toRef": branch("main")});
    let created = call(
        &server,
        Method::POST,
        &format!("{REPO}/pull-requests"),
        Some(TOKEN),
        Some(new.clone()),
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.text);
    let pr = created.json();
    for key in [
        "id",
        "version",
        "title",
        "description",
        "state",
        "open",
        "closed",
        "fromRef",
        "toRef",
        "author",
        "updatedDate",
        "links",
    ] {
        assert!(pr.get(key).is_some(), "{key} missing from {pr}");
    }
    assert_eq!(pr["id"], 1);
    assert_eq!(pr["state"], "OPEN");
    assert_eq!(pr["fromRef"]["latestCommit"], feature.as_str());
    assert_eq!(pr["fromRef"]["displayId"], "feature");
    assert_eq!(pr["author"]["user"]["name"], BOT);

    let again = call(
        &server,
        Method::POST,
        &format!("{REPO}/pull-requests"),
        Some(TOKEN),
        Some(new),
    )
    .await;
    assert_eq!(again.status, 409, "{}", again.text);
    assert!(again.json()["errors"][0]["exceptionName"]
        .as_str()
        .unwrap()
        .ends_with("DuplicatePullRequestException"));

    let stale = call(
        &server,
        Method::PUT,
        &format!("{REPO}/pull-requests/1"),
        Some(TOKEN),
        Some(json!({"version": 7, "title": "x"})),
    )
    .await;
    assert_eq!(stale.status, 409, "{}", stale.text);
    let edit = call(
        &server,
        Method::PUT,
        &format!("{REPO}/pull-requests/1"),
        Some(TOKEN),
        Some(json!({"version": 0, "title": "Pin web again", "description": "plan 2"})),
    )
    .await;
    assert_eq!(edit.status, 200, "{}", edit.text);
    assert_eq!(edit.json()["version"], 1);
    let no_version = call(
        &server,
        Method::PUT,
        &format!("{REPO}/pull-requests/1"),
        Some(TOKEN),
        Some(json!({"title": "x"})),
    )
    .await;
    assert_eq!(no_version.status, 400, "{}", no_version.text);

    let merge = server.merge_pull_as("reviewer", 1);
    let merged = call(
        &server,
        Method::GET,
        &format!("{REPO}/pull-requests/1"),
        Some(TOKEN),
        None,
    )
    .await;
    assert_eq!(merged.json()["state"], "MERGED");
    assert_eq!(
        merged.json()["properties"]["mergeCommit"]["id"],
        merge.as_str()
    );
    assert_eq!(repo.head("main").as_deref(), Some(merge.as_str()));
    assert!(merged.json()["closedDate"].is_u64());
    server.assert_no_violations();
}

#[tokio::test]
async fn lists_are_paged_by_start_and_next_page_start() {
    let repo = repo_with_feature();
    let server = BitbucketDcServer::start(TOKEN, BOT, "ACME", "gitops", repo.path()).await;
    let main = repo.head("main").unwrap();
    for n in 0..7 {
        repo.reset_branch(&format!("f/{n}"), &main);
        server.open_pull_as("alice", &format!("f/{n}"), "main", &format!("F{n}"));
    }
    server.set_page_max(3);
    let mut start = 0;
    let mut seen = Vec::new();
    loop {
        let page = call(&server, Method::GET,
            &format!("{REPO}/pull-requests?state=ALL&order=NEWEST&at=refs%2Fheads%2Fmain&direction=INCOMING&limit=50&start={start}"),
            Some(TOKEN), None).await.json();
        assert_eq!(page["limit"], 3, "page.max caps limit: {page}");
        seen.extend(
            page["values"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["id"].as_u64().unwrap()),
        );
        if page["isLastPage"] == true {
            assert!(page.get("nextPageStart").is_none(), "{page}");
            break;
        }
        start = page["nextPageStart"].as_u64().unwrap();
    }
    assert_eq!(seen, [7, 6, 5, 4, 3, 2, 1], "newest first, each once");
    let outgoing = call(
        &server,
        Method::GET,
        &format!("{REPO}/pull-requests?direction=OUTGOING&at=refs%2Fheads%2Ff%2F2&state=OPEN"),
        Some(TOKEN),
        None,
    )
    .await
    .json();
    assert_eq!(
        outgoing["values"].as_array().unwrap().len(),
        1,
        "{outgoing}"
    );
    server.assert_no_violations();
}

#[tokio::test]
async fn comments_are_edited_by_their_author_from_their_version() {
    let repo = repo_with_feature();
    let server = BitbucketDcServer::start(TOKEN, BOT, "ACME", "gitops", repo.path()).await;
    let id = server.open_pull_as("alice", "feature", "main", "Pin");
    let theirs = server.comment_as("reviewer", id, "looks good");
    let posted = call(
        &server,
        Method::POST,
        &format!("{REPO}/pull-requests/{id}/comments"),
        Some(TOKEN),
        Some(json!({"text": "verdict"})),
    )
    .await;
    assert_eq!(posted.status, 201, "{}", posted.text);
    let mine = posted.json()["id"].as_u64().unwrap();
    assert_eq!(posted.json()["version"], 0);
    assert_eq!(posted.json()["author"]["name"], BOT);

    let activities = call(
        &server,
        Method::GET,
        &format!("{REPO}/pull-requests/{id}/activities"),
        Some(TOKEN),
        None,
    )
    .await
    .json();
    let commented: Vec<u64> = activities["values"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["action"] == "COMMENTED")
        .map(|a| a["comment"]["id"].as_u64().unwrap())
        .collect();
    assert_eq!(commented, [mine, theirs], "newest first");

    let not_mine = call(
        &server,
        Method::PUT,
        &format!("{REPO}/pull-requests/{id}/comments/{theirs}"),
        Some(TOKEN),
        Some(json!({"text": "x", "version": 0})),
    )
    .await;
    assert_eq!(not_mine.status, 403, "{}", not_mine.text);
    let stale = call(
        &server,
        Method::PUT,
        &format!("{REPO}/pull-requests/{id}/comments/{mine}"),
        Some(TOKEN),
        Some(json!({"text": "x", "version": 3})),
    )
    .await;
    assert_eq!(stale.status, 409, "{}", stale.text);
    let edited = call(
        &server,
        Method::PUT,
        &format!("{REPO}/pull-requests/{id}/comments/{mine}"),
        Some(TOKEN),
        Some(json!({"text": "verdict 2", "version": 0})),
    )
    .await;
    assert_eq!(edited.status, 200, "{}", edited.text);
    assert_eq!(edited.json()["version"], 1);
    assert_eq!(server.comments(id)[1].text, "verdict 2");
    server.assert_no_violations();
}

#[tokio::test]
async fn a_build_status_is_one_per_commit_and_key_with_no_author_and_needs_only_read() {
    let repo = repo_with_feature();
    let server = BitbucketDcServer::start(TOKEN, BOT, "ACME", "gitops", repo.path()).await;
    let sha = repo.head("main").unwrap();
    let builds = format!("{REPO}/commits/{sha}/builds");
    let none = call(
        &server,
        Method::GET,
        &format!("{builds}?key=tagpin%2Fconverged"),
        Some(TOKEN),
        None,
    )
    .await;
    assert_eq!(none.status, 404, "{}", none.text);
    let status = json!({"key": "tagpin/converged", "state": "INPROGRESS",
                        "url": "https://bitbucket.example.com/x", "description": "checking"});
    let posted = call(&server, Method::POST, &builds, Some(TOKEN), Some(status)).await;
    assert_eq!(posted.status, 204, "{}", posted.text);

    server.add_token("ci-token", "ci-bot");
    server.grant("ci-bot", Permission::Read);
    let replaced = call(&server, Method::POST, &builds, Some("ci-token"),
        Some(json!({"key": "tagpin/converged", "state": "SUCCESSFUL", "url": "https://ci.example.com/1"}))).await;
    assert_eq!(
        replaced.status, 204,
        "REPO_READ may post: {}",
        replaced.text
    );
    let read = call(
        &server,
        Method::GET,
        &format!("{builds}?key=tagpin%2Fconverged"),
        Some(TOKEN),
        None,
    )
    .await;
    let read = read.json();
    assert_eq!(read["state"], "SUCCESSFUL");
    assert!(
        read.get("author").is_none() && read.get("creator").is_none(),
        "{read}"
    );
    assert_eq!(server.statuses(&sha).len(), 1, "replaced, not added");
    let pr_write = call(
        &server,
        Method::POST,
        &format!("{REPO}/pull-requests"),
        Some("ci-token"),
        Some(json!({"title": "x", "fromRef": branch("feature"), "toRef": branch("main")})),
    )
    .await;
    assert_eq!(pr_write.status, 403, "{}", pr_write.text);

    let no_url = call(
        &server,
        Method::POST,
        &builds,
        Some(TOKEN),
        Some(json!({"key": "k", "state": "SUCCESSFUL"})),
    )
    .await;
    assert_eq!(no_url.status, 400, "url is required: {}", no_url.text);
    let unknown = call(
        &server,
        Method::POST,
        &format!("{REPO}/commits/{}/builds", "0".repeat(40)),
        Some(TOKEN),
        Some(json!({"key": "k", "state": "SUCCESSFUL", "url": "https://x"})),
    )
    .await;
    assert_eq!(unknown.status, 404, "{}", unknown.text);
    server.assert_no_violations();
}

#[tokio::test]
async fn tokens_permissions_and_misread_requests_are_told_apart() {
    let repo = repo_with_feature();
    let server = BitbucketDcServer::start(TOKEN, BOT, "ACME", "gitops", repo.path()).await;
    let anonymous = call(&server, Method::GET, REPO, None, None).await;
    assert_eq!(anonymous.status, 401);
    assert!(anonymous.headers.get("x-ausername").is_none());
    server.add_token("outsider-token", "outsider");
    let hidden = call(&server, Method::GET, REPO, Some("outsider-token"), None).await;
    assert_eq!(hidden.status, 404, "{}", hidden.text);

    // Bitbucket ignores an undeclared field or parameter, a token in the URL is logged, and a
    // route it does not have is 404: each is a violation here.
    let id = server.open_pull_as("alice", "feature", "main", "Pin");
    call(
        &server,
        Method::POST,
        &format!("{REPO}/pull-requests/{id}/comments"),
        Some(TOKEN),
        Some(json!({"body": "GitHub's word"})),
    )
    .await;
    call(
        &server,
        Method::GET,
        &format!("{REPO}/pull-requests?page=2"),
        Some(TOKEN),
        None,
    )
    .await;
    call(
        &server,
        Method::GET,
        &format!("{REPO}/pull-requests?access_token={TOKEN}"),
        Some(TOKEN),
        None,
    )
    .await;
    call(
        &server,
        Method::GET,
        &format!("{REPO}/pull-requests/{id}/labels"),
        Some(TOKEN),
        None,
    )
    .await;
    call(
        &server,
        Method::GET,
        &format!("{REPO}/pull-requests?state=closed"),
        Some(TOKEN),
        None,
    )
    .await;
    let problems: Vec<String> = server
        .take_violations()
        .into_iter()
        .map(|v| v.problem)
        .collect();
    for expected in [
        "field \"body\" is not declared",
        "\"page\" is not declared",
        "a token in the URL",
        "a route Bitbucket does not have",
        "state=\"closed\" is none of",
    ] {
        assert!(
            problems.iter().any(|p| p.contains(expected)),
            "{expected}: {problems:?}"
        );
    }
}
