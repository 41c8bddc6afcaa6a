//! Proves the local Gitea server (`tests/it/support/gitea.rs`) answers as Gitea's REST API
//! (`/api/v1`, swagger of Gitea 1.23 as `gitea-js` 1.23.0 types it) does, driven with plain
//! HTTP (reqwest), so tagpin's Gitea adapter can be tested against it: the swagger's shapes,
//! `page`/`limit` paging with `X-Total-Count` and a `Link` on Gitea's ROOT_URL, the 409 on a
//! second open pull request, labels by id, binding errors, scopes and hidden repositories,
//! statuses with their creator, and a person's merge making a real commit.

use crate::support;

use std::time::Duration;

use reqwest::header::HeaderMap;
use reqwest::Method;
use serde_json::{json, Value};
use support::git::BareRepo;
use support::gitea::{Access, GiteaServer, Scope, MAX_RESPONSE_ITEMS, ROOT_URL};

const TOKEN: &str = "gitea-selftest-0123456789abcdef";
const BOT: &str = "tagpin-bot";
const REPO: &str = "acme/gitops";

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

    fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .map(|v| v.to_str().unwrap().to_string())
    }
}

/// One request as a Gitea client sends it: `Authorization: token …` when a token is given.
async fn call(
    server: &GiteaServer,
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
        request = request.header("Authorization", format!("token {token}"));
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

async fn get(server: &GiteaServer, path: &str) -> Answer {
    call(server, Method::GET, path, Some(TOKEN), None).await
}

async fn post(server: &GiteaServer, path: &str, body: Value) -> Answer {
    call(server, Method::POST, path, Some(TOKEN), Some(body)).await
}

async fn patch(server: &GiteaServer, path: &str, body: Value) -> Answer {
    call(server, Method::PATCH, path, Some(TOKEN), Some(body)).await
}

/// Every key of the swagger definition `keys` is in `actual`.
fn has_swagger_keys(actual: &Value, keys: &[&str]) {
    for key in keys {
        assert!(actual.get(key).is_some(), "{key} missing from {actual}");
    }
}

#[tokio::test]
async fn every_endpoint_answers_in_the_swaggers_shapes() {
    let repo = repo_with_feature();
    let server = GiteaServer::start(TOKEN, BOT, "acme", "gitops", repo.path()).await;
    let feature = repo.head("feature").unwrap();

    let user = get(&server, "/user").await;
    assert_eq!(user.status, 200, "{}", user.text);
    assert_eq!(user.json()["login"], BOT);

    let created = post(
        &server,
        &format!("/repos/{REPO}/pulls"),
        json!({"head": "feature", "base": "main", "title": "Pin web", "body": "plan"}),
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.text);
    let pr = created.json();
    has_swagger_keys(
        &pr,
        &[
            "id",
            "number",
            "state",
            "title",
            "body",
            "labels",
            "merged",
            "merged_at",
            "merge_commit_sha",
            "head",
            "base",
            "user",
            "html_url",
            "updated_at",
            "created_at",
        ],
    );
    assert_eq!(
        pr["number"], 1,
        "issues and pull requests share numbers from 1"
    );
    assert_ne!(pr["id"], pr["number"], "the id is not the number");
    assert_eq!(pr["state"], "open");
    assert_eq!(pr["merged"], false);
    assert_eq!(pr["merge_commit_sha"], Value::Null);
    assert_eq!(pr["head"]["ref"], "feature");
    assert_eq!(pr["head"]["sha"], feature.as_str());
    assert_eq!(pr["head"]["repo_id"], pr["base"]["repo_id"]);
    assert_eq!(pr["user"]["login"], BOT);
    assert!(
        pr["updated_at"].as_str().unwrap().ends_with("+02:00"),
        "{}",
        pr["updated_at"]
    );

    // Labels are ids of the repository's labels.
    let label = post(
        &server,
        &format!("/repos/{REPO}/labels"),
        json!({"name": "tagpin", "color": "#ededed"}),
    )
    .await;
    assert_eq!(label.status, 201, "{}", label.text);
    let id = label.json()["id"].as_u64().unwrap();
    let added = post(
        &server,
        &format!("/repos/{REPO}/issues/1/labels"),
        json!({"labels": [id]}),
    )
    .await;
    assert_eq!(added.status, 200, "{}", added.text);
    assert_eq!(added.json()[0]["name"], "tagpin");
    let unknown = post(
        &server,
        &format!("/repos/{REPO}/issues/1/labels"),
        json!({"labels": [id + 1000]}),
    )
    .await;
    assert_eq!(unknown.status, 422, "{}", unknown.text);

    let status = post(
        &server,
        &format!("/repos/{REPO}/statuses/{feature}"),
        json!({"state": "pending", "context": "tagpin/converged", "description": "checking"}),
    )
    .await;
    assert_eq!(status.status, 201, "{}", status.text);
    has_swagger_keys(
        &status.json(),
        &[
            "id",
            "status",
            "context",
            "description",
            "creator",
            "created_at",
            "target_url",
        ],
    );
    assert_eq!(status.json()["creator"]["login"], BOT);
    let by_branch = get(&server, &format!("/repos/{REPO}/commits/feature/statuses")).await;
    assert_eq!(by_branch.status, 200, "{}", by_branch.text);
    assert_eq!(by_branch.json()[0]["status"], "pending");
    let elsewhere = post(
        &server,
        &format!("/repos/{REPO}/statuses/{}", "0".repeat(40)),
        json!({"state": "success", "context": "tagpin/converged"}),
    )
    .await;
    assert_eq!(elsewhere.status, 404, "no such commit: {}", elsewhere.text);

    let comment = post(
        &server,
        &format!("/repos/{REPO}/issues/1/comments"),
        json!({"body": "first"}),
    )
    .await;
    assert_eq!(comment.status, 201, "{}", comment.text);
    let comment_id = comment.json()["id"].as_u64().unwrap();
    let edited = patch(
        &server,
        &format!("/repos/{REPO}/issues/comments/{comment_id}"),
        json!({"body": "second"}),
    )
    .await;
    assert_eq!(edited.status, 200, "{}", edited.text);
    let comments = get(&server, &format!("/repos/{REPO}/issues/1/comments")).await;
    assert_eq!(comments.json()[0]["body"], "second");
    assert_eq!(comments.json()[0]["user"]["login"], BOT);

    let merge = server.merge_pull_as("reviewer", REPO, 1);
    assert_eq!(repo.head("main").as_deref(), Some(merge.as_str()));
    let merged = get(&server, &format!("/repos/{REPO}/pulls/1")).await.json();
    assert_eq!(merged["state"], "closed");
    assert_eq!(merged["merged"], true);
    assert_eq!(merged["merge_commit_sha"], merge.as_str());
    server.assert_no_violations();
}

#[tokio::test]
async fn a_second_open_pull_request_for_the_same_branches_is_a_conflict() {
    let repo = repo_with_feature();
    let server = GiteaServer::start(TOKEN, BOT, "acme", "gitops", repo.path()).await;
    let body = json!({"head": "feature", "base": "main", "title": "Pin web"});
    let first = post(&server, &format!("/repos/{REPO}/pulls"), body.clone()).await;
    assert_eq!(first.status, 201, "{}", first.text);
    let second = post(&server, &format!("/repos/{REPO}/pulls"), body).await;
    assert_eq!(second.status, 409, "{}", second.text);
    assert!(second.json()["message"]
        .as_str()
        .unwrap()
        .starts_with("pull request already exists for these targets"));
    let missing = post(
        &server,
        &format!("/repos/{REPO}/pulls"),
        json!({"head": "feature", "base": "main"}),
    )
    .await;
    assert_eq!(missing.status, 422, "Title is required: {}", missing.text);
    assert_eq!(missing.json()[0]["fieldNames"][0], "Title");
    server.assert_no_violations();
}

#[tokio::test]
async fn lists_are_paged_with_a_total_and_a_link_on_gitea_s_root_url() {
    let repo = repo_with_feature();
    let server = GiteaServer::start(TOKEN, BOT, "acme", "gitops", repo.path()).await;
    for n in 0..(MAX_RESPONSE_ITEMS + 5) {
        server.add_label(REPO, &format!("label-{n}"));
    }
    // A limit past MAX_RESPONSE_ITEMS is held to it.
    let first = get(&server, &format!("/repos/{REPO}/labels?limit=100&page=1")).await;
    assert_eq!(first.status, 200, "{}", first.text);
    assert_eq!(first.json().as_array().unwrap().len(), MAX_RESPONSE_ITEMS);
    assert_eq!(
        first.header("x-total-count").as_deref(),
        Some(&*(MAX_RESPONSE_ITEMS + 5).to_string())
    );
    let link = first.header("link").unwrap();
    assert!(
        link.contains(&format!(
            "<{ROOT_URL}api/v1/repos/acme/gitops/labels?limit=100&page=2>; rel=\"next\""
        )),
        "{link}"
    );
    let second = get(&server, &format!("/repos/{REPO}/labels?limit=100&page=2")).await;
    assert_eq!(second.json().as_array().unwrap().len(), 5);
    assert!(!second.header("link").unwrap().contains("rel=\"next\""));
    // The default page is DEFAULT_PAGING_NUM.
    let default = get(&server, &format!("/repos/{REPO}/labels")).await;
    assert_eq!(default.json().as_array().unwrap().len(), 30);
    server.assert_no_violations();
}

#[tokio::test]
async fn what_gitea_would_ignore_or_refuse_is_a_violation() {
    let repo = repo_with_feature();
    let server = GiteaServer::start(TOKEN, BOT, "acme", "gitops", repo.path()).await;
    // A head filter Gitea's list does not have: it would list every pull request.
    get(
        &server,
        &format!("/repos/{REPO}/pulls?head=feature&state=all"),
    )
    .await;
    // GitLab's field name for the body: Gitea would open a pull request without one.
    post(
        &server,
        &format!("/repos/{REPO}/pulls"),
        json!({"head": "feature", "base": "main", "title": "t", "description": "plan"}),
    )
    .await;
    // A GitLab state.
    post(
        &server,
        &format!("/repos/{REPO}/statuses/{}", repo.head("feature").unwrap()),
        json!({"state": "failed", "context": "c"}),
    )
    .await;
    // Labels by name.
    post(
        &server,
        &format!("/repos/{REPO}/issues/1/labels"),
        json!({"labels": ["tagpin"]}),
    )
    .await;
    // A token in the URL, and a route Gitea does not have.
    call(
        &server,
        Method::GET,
        &format!("/repos/{REPO}/pulls?token={TOKEN}"),
        None,
        None,
    )
    .await;
    get(&server, &format!("/repos/{REPO}/merge_requests")).await;
    let problems: Vec<String> = server
        .take_violations()
        .iter()
        .map(|v| v.problem.clone())
        .collect();
    let said = problems.join("\n");
    for expected in [
        "query parameter \"head\" is not declared",
        "field \"description\" is not declared",
        "state \"failed\" is none of",
        "by name, not by id",
        "a token in the URL",
        "a route Gitea does not have",
    ] {
        assert!(said.contains(expected), "{expected}: {said}");
    }
}

#[tokio::test]
async fn tokens_are_told_apart_and_a_hidden_repository_is_not_found() {
    let repo = repo_with_feature();
    let server = GiteaServer::start(TOKEN, BOT, "acme", "gitops", repo.path()).await;
    let none = call(
        &server,
        Method::GET,
        &format!("/repos/{REPO}/pulls"),
        None,
        None,
    )
    .await;
    assert_eq!(none.status, 401);
    let unknown = call(&server, Method::GET, "/user", Some("not-a-token"), None).await;
    assert_eq!(unknown.status, 401);

    server.add_token("read-only", BOT, Scope::Read);
    let read = call(
        &server,
        Method::POST,
        &format!("/repos/{REPO}/pulls"),
        Some("read-only"),
        Some(json!({"head": "feature", "base": "main", "title": "t"})),
    )
    .await;
    assert_eq!(read.status, 403, "{}", read.text);

    server.add_token("outsider", "outsider", Scope::Write);
    let hidden = call(
        &server,
        Method::GET,
        &format!("/repos/{REPO}/pulls"),
        Some("outsider"),
        None,
    )
    .await;
    assert_eq!(hidden.status, 404, "{}", hidden.text);
    server.grant(REPO, "outsider", Access::Read);
    let seen = call(
        &server,
        Method::GET,
        &format!("/repos/{REPO}/pulls"),
        Some("outsider"),
        None,
    )
    .await;
    assert_eq!(seen.status, 200, "{}", seen.text);
    server.assert_no_violations();
}

#[tokio::test]
async fn a_fork_s_pull_request_has_the_fork_as_its_head_repository() {
    let repo = repo_with_feature();
    let server = GiteaServer::start(TOKEN, BOT, "acme", "gitops", repo.path()).await;
    let main = repo.head("main").unwrap();
    let n = server.open_fork_pull_as("mallory", REPO, "tagpin/main", &main, "main", "t", "b");
    let pr = get(&server, &format!("/repos/{REPO}/pulls/{n}"))
        .await
        .json();
    assert_ne!(pr["head"]["repo_id"], pr["base"]["repo_id"]);
    assert_eq!(pr["head"]["repo"]["fork"], true);
    assert_eq!(pr["head"]["ref"], "tagpin/main");
    server.assert_no_violations();
}
