//! Proves the local Azure DevOps server (`tests/it/support/azure_devops.rs`) answers as Azure
//! DevOps's REST API (`_apis/git`, specification 7.1, as `azure-devops-node-api` 17.0.1 types
//! it) does, driven with plain HTTP (reqwest), so tagpin's Azure DevOps adapter can be tested
//! against it: `api-version` on every call and `-preview` on preview APIs, Basic with an empty
//! user, the `{count, value}` lists paged by `$top`/`$skip` (statuses by `top`/`skip`), the
//! `409` on a second active pull request, the 4,000-character description, comments only their
//! author edits, statuses with their creator, and a person's completion making a real commit.

use crate::support;

use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};
use support::azure_devops::{AzureDevOpsServer, Scope};
use support::git::BareRepo;

const TOKEN: &str = "ado-selftest-0123456789abcdef";
const BOT: &str = "tagpin-bot";

/// A bare repository with `main` and a `feature` branch one commit ahead, served as
/// `acme/platform/gitops`.
async fn server() -> (AzureDevOpsServer, BareRepo) {
    let repo = BareRepo::create(&[("apps/web.yaml", "image: web:1.0\n")]);
    repo.commit_as_other_writer(
        "feature",
        &[("apps/web.yaml", "image: web@sha256:abc\n")],
        "pin web",
    );
    let server =
        AzureDevOpsServer::start(TOKEN, BOT, "acme", "platform", "gitops", repo.path()).await;
    (server, repo)
}

/// One request as an Azure DevOps client sends it: Basic with `user` (empty) and `token`.
async fn call_as(
    server: &AzureDevOpsServer,
    method: Method,
    path: &str,
    user: &str,
    token: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let mut request = client
        .request(method, format!("{}{path}", server.api_url()))
        .basic_auth(user, Some(token));
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

async fn call(
    server: &AzureDevOpsServer,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    call_as(server, method, path, "", TOKEN, body).await
}

const GIT: &str = "/platform/_apis/git/repositories/gitops";

#[tokio::test]
async fn pull_requests_are_opened_listed_labelled_and_completed_in_the_specs_shapes() {
    let (ado, repo) = server().await;
    let (status, me) = call(
        &ado,
        Method::GET,
        "/_apis/connectionData?api-version=7.1-preview.1",
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(me["authenticatedUser"]["id"], ado.identity(BOT));

    let open = json!({"sourceRefName": "refs/heads/feature", "targetRefName": "refs/heads/main",
                      "title": "Pin web", "description": "plan"});
    let (status, pr) = call(
        &ado,
        Method::POST,
        &format!("{GIT}/pullrequests?api-version=7.1"),
        Some(open.clone()),
    )
    .await;
    assert_eq!(status, 201, "{pr}");
    // The keys of the specification's example answer (7.1 `httpExamples/pullRequests/
    // POST__git_repositories__repositoryId__pullRequests.json`).
    for key in [
        "repository",
        "pullRequestId",
        "codeReviewId",
        "status",
        "createdBy",
        "creationDate",
        "title",
        "description",
        "sourceRefName",
        "targetRefName",
        "mergeStatus",
        "mergeId",
        "lastMergeSourceCommit",
        "lastMergeTargetCommit",
        "reviewers",
        "url",
        "_links",
        "supportsIterations",
        "artifactId",
    ] {
        assert!(pr.get(key).is_some(), "{key} missing: {pr}");
    }
    assert_eq!(pr["pullRequestId"], 1);
    assert_eq!(pr["status"], "active");
    assert_eq!(pr["createdBy"]["id"], ado.identity(BOT));
    assert_eq!(
        pr["lastMergeSourceCommit"]["commitId"],
        repo.head("feature").unwrap()
    );
    assert!(pr["creationDate"].as_str().unwrap().len() == "2026-01-02T03:04:05.1234567Z".len());
    let (status, _) = call(
        &ado,
        Method::POST,
        &format!("{GIT}/pullrequests?api-version=7.1"),
        Some(open),
    )
    .await;
    assert_eq!(status, 409, "one active pull request per source and target");

    let (status, _) = call(
        &ado,
        Method::POST,
        &format!("{GIT}/pullRequests/1/labels?api-version=7.1-preview.1"),
        Some(json!({"name": "tagpin"})),
    )
    .await;
    assert_eq!(status, 200);
    let (status, list) = call(&ado, Method::GET, &format!("{GIT}/pullrequests?searchCriteria.sourceRefName=refs/heads/feature&searchCriteria.status=all&$top=100&$skip=0&api-version=7.1"), None).await;
    assert_eq!(status, 200);
    assert_eq!(list["count"], 1);
    assert_eq!(list["value"][0]["labels"][0]["name"], "tagpin");

    let merge = ado.complete_pull_as("reviewer", 1);
    assert_eq!(repo.head("main"), Some(merge.clone()));
    let (_, pr) = call(
        &ado,
        Method::GET,
        &format!("{GIT}/pullrequests/1?api-version=7.1"),
        None,
    )
    .await;
    assert_eq!(pr["status"], "completed");
    assert_eq!(pr["lastMergeCommit"]["commitId"], merge);
    assert!(pr["closedDate"].is_string());
    ado.assert_no_violations();
}

#[tokio::test]
async fn lists_are_paged_newest_first_and_statuses_by_top_and_skip() {
    let (ado, repo) = server().await;
    let main = repo.head("main").unwrap();
    for n in 0..5 {
        let branch = format!("f{n}");
        repo.reset_branch(&branch, &main);
        ado.open_pull_as("reviewer", "gitops", &branch, "main", "t");
    }
    let (_, page) = call(
        &ado,
        Method::GET,
        &format!("{GIT}/pullrequests?searchCriteria.status=active&$top=2&$skip=2&api-version=6.0"),
        None,
    )
    .await;
    let ids: Vec<u64> = page["value"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["pullRequestId"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, [3, 2]);
    for n in 0..3 {
        let (status, _) = call(&ado, Method::POST, &format!("{GIT}/commits/{main}/statuses?api-version=7.1"),
            Some(json!({"state": "succeeded", "description": format!("{n}"), "context": {"genre": "tagpin", "name": "converged"}}))).await;
        assert_eq!(status, 201);
    }
    let (_, page) = call(
        &ado,
        Method::GET,
        &format!("{GIT}/commits/{main}/statuses?top=2&skip=1&api-version=7.1"),
        None,
    )
    .await;
    let seen: Vec<&str> = page["value"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["description"].as_str().unwrap())
        .collect();
    assert_eq!(seen, ["1", "0"], "newest first");
    assert_eq!(page["value"][0]["createdBy"]["id"], ado.identity(BOT));
    ado.assert_no_violations();
}

#[tokio::test]
async fn what_azure_devops_would_refuse_or_ignore_is_a_violation() {
    let (ado, repo) = server().await;
    let main = repo.head("main").unwrap();
    // No api-version; a preview API asked as released; an undeclared parameter.
    let (status, _) = call(&ado, Method::GET, &format!("{GIT}/pullrequests"), None).await;
    assert_eq!(status, 400);
    let (status, _) = call(
        &ado,
        Method::POST,
        &format!("{GIT}/pullRequests/1/labels?api-version=7.1"),
        Some(json!({"name": "x"})),
    )
    .await;
    assert_eq!(status, 400);
    call(
        &ado,
        Method::GET,
        &format!("{GIT}/commits/{main}/statuses?$top=10&api-version=7.1"),
        None,
    )
    .await;
    // A branch that is not a full ref; a description past 4,000 characters; a field
    // GitStatus does not have; a user name in Basic.
    call(
        &ado,
        Method::GET,
        &format!("{GIT}/pullrequests?searchCriteria.sourceRefName=feature&api-version=7.1"),
        None,
    )
    .await;
    let (status, _) = call(&ado, Method::POST, &format!("{GIT}/pullrequests?api-version=7.1"),
        Some(json!({"sourceRefName": "refs/heads/feature", "targetRefName": "refs/heads/main", "title": "t", "description": "x".repeat(4001)}))).await;
    assert_eq!(status, 400);
    call(
        &ado,
        Method::POST,
        &format!("{GIT}/commits/{main}/statuses?api-version=7.1"),
        Some(json!({"state": "success", "context": {"name": "c"}})),
    )
    .await;
    call_as(
        &ado,
        Method::GET,
        &format!("{GIT}/pullrequests?api-version=7.1"),
        "tagpin",
        TOKEN,
        None,
    )
    .await;
    let problems: Vec<String> = ado
        .take_violations()
        .iter()
        .map(|v| v.problem.clone())
        .collect();
    for expected in [
        "api-version given 0 times",
        "api-version=\"7.1\" is not one this API answers",
        "query parameter \"$top\" is not declared",
        "is not a full ref name",
        "a description longer than 4000 characters",
        "state \"success\" is none of",
        "a user name in Basic authentication",
    ] {
        assert!(
            problems.iter().any(|p| p.contains(expected)),
            "{expected}: {problems:#?}"
        );
    }
}

#[tokio::test]
async fn tokens_are_told_apart_and_only_a_comments_author_edits_it() {
    let (ado, _repo) = server().await;
    let (status, _) = call_as(
        &ado,
        Method::GET,
        &format!("{GIT}/pullrequests?api-version=7.1"),
        "",
        "unknown",
        None,
    )
    .await;
    assert_eq!(status, 401);
    ado.add_token("read-only", "reader", Scope::Read);
    let open = json!({"sourceRefName": "refs/heads/feature", "targetRefName": "refs/heads/main", "title": "t"});
    let (status, _) = call_as(
        &ado,
        Method::POST,
        &format!("{GIT}/pullrequests?api-version=7.1"),
        "",
        "read-only",
        Some(open.clone()),
    )
    .await;
    assert_eq!(status, 403);
    let (status, _) = call(
        &ado,
        Method::GET,
        "/platform/_apis/git/repositories/nope/pullrequests?api-version=7.1",
        None,
    )
    .await;
    assert_eq!(status, 404);
    call(
        &ado,
        Method::POST,
        &format!("{GIT}/pullrequests?api-version=7.1"),
        Some(open),
    )
    .await;
    ado.comment_as("reviewer", 1, "looks good");
    let (status, _) = call(
        &ado,
        Method::PATCH,
        &format!("{GIT}/pullRequests/1/threads/1/comments/1?api-version=7.1"),
        Some(json!({"content": "mine now"})),
    )
    .await;
    assert_eq!(status, 403, "only its author edits a comment");
    let thread = json!({"comments": [{"parentCommentId": 0, "content": "verdict", "commentType": 1}], "status": 4});
    let (status, created) = call(
        &ado,
        Method::POST,
        &format!("{GIT}/pullRequests/1/threads?api-version=7.1"),
        Some(thread),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(created["comments"][0]["author"]["id"], ado.identity(BOT));
    let (status, _) = call(
        &ado,
        Method::PATCH,
        &format!("{GIT}/pullRequests/1/threads/2/comments/1?api-version=7.1"),
        Some(json!({"content": "verdict 2"})),
    )
    .await;
    assert_eq!(status, 200);
    let comments: Vec<String> = ado.comments(1).into_iter().map(|c| c.content).collect();
    assert_eq!(comments, ["looks good", "verdict 2"]);
    ado.assert_no_violations();
}

#[tokio::test]
async fn a_forks_pull_request_carries_its_fork_source() {
    let (ado, repo) = server().await;
    let main = repo.head("main").unwrap();
    ado.open_fork_pull_as("mallory", "gitops", "tagpin/main", &main, "main", "t", "b");
    let (_, list) = call(
        &ado,
        Method::GET,
        &format!("{GIT}/pullrequests?searchCriteria.status=all&api-version=7.1"),
        None,
    )
    .await;
    assert_eq!(list["value"][0]["sourceRefName"], "refs/heads/tagpin/main");
    assert!(list["value"][0]["forkSource"]["repository"]["id"].is_string());
    ado.assert_no_violations();
}

#[tokio::test]
async fn properties_take_a_json_patch_document_and_answer_a_properties_collection() {
    let (ado, _repo) = server().await;
    let open = json!({"sourceRefName": "refs/heads/feature", "targetRefName": "refs/heads/main", "title": "t"});
    call(
        &ado,
        Method::POST,
        &format!("{GIT}/pullrequests?api-version=7.1"),
        Some(open),
    )
    .await;
    let url = format!(
        "{}{GIT}/pullRequests/1/properties?api-version=7.1-preview.1",
        ado.api_url()
    );
    let patch =
        json!([{"op": "add", "path": "/tagpin.plan", "value": "<!-- tagpin-plan\n{}\n-->\n"}]);
    let client = reqwest::Client::new();
    let as_json = client
        .patch(&url)
        .basic_auth("", Some(TOKEN))
        .json(&patch)
        .send()
        .await
        .unwrap();
    assert_eq!(
        as_json.status(),
        415,
        "a JSON Patch document is not application/json"
    );
    assert_eq!(ado.take_violations().len(), 1);
    let patched = client
        .patch(&url)
        .basic_auth("", Some(TOKEN))
        .header("Content-Type", "application/json-patch+json")
        .body(patch.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(patched.status(), 200);
    let (status, properties) = call(
        &ado,
        Method::GET,
        &format!("{GIT}/pullRequests/1/properties?api-version=7.1-preview.1"),
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(properties["value"]["tagpin.plan"]["$type"], "System.String");
    assert_eq!(
        properties["value"]["tagpin.plan"]["$value"],
        "<!-- tagpin-plan\n{}\n-->\n"
    );
    ado.assert_no_violations();
}
