//! Proves the local Bitbucket Cloud server (`tests/it/support/bitbucket.rs`) answers as
//! Bitbucket Cloud's REST API 2.0 does (its OpenAPI description as the npm package
//! `bitbucket` 2.12.0 types it), driven with plain HTTP (reqwest), so tagpin's Bitbucket
//! adapter can be tested against it: the schemas' shapes with short hashes, `{values, next}`
//! pages with an absolute `next`, `state` defaulting to `OPEN` and repeating, BBQL, one
//! build status per key overwritten in place, the `400`s for a missing `url` or a long key,
//! credentials (Bearer, Basic for app passwords, access tokens refused `/user`), scopes and
//! hidden repositories, and a person's merge making a real commit.

use crate::support;

use std::time::Duration;

use base64::Engine as _;
use reqwest::Method;
use serde_json::{json, Value};
use support::bitbucket::{Access, BitbucketCloudServer, Credential, Scope};
use support::git::BareRepo;

const TOKEN: &str = "bb-selftest-0123456789abcdef";
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
    text: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text))
    }
}

/// One request with `Authorization: <authorization>` when given.
async fn call(
    server: &BitbucketCloudServer,
    method: Method,
    path: &str,
    authorization: Option<&str>,
    body: Option<Value>,
) -> Answer {
    let url = if path.starts_with("http") {
        path.to_string()
    } else {
        format!("{}{path}", server.api_url())
    };
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let mut request = client.request(method, url);
    if let Some(authorization) = authorization {
        request = request.header("Authorization", authorization);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("request");
    Answer {
        status: response.status().as_u16(),
        text: response.text().await.expect("body"),
    }
}

fn bearer() -> String {
    format!("Bearer {TOKEN}")
}

async fn get(server: &BitbucketCloudServer, path: &str) -> Answer {
    call(server, Method::GET, path, Some(&bearer()), None).await
}

async fn post(server: &BitbucketCloudServer, path: &str, body: Value) -> Answer {
    call(server, Method::POST, path, Some(&bearer()), Some(body)).await
}

async fn start(repo: &BareRepo) -> BitbucketCloudServer {
    BitbucketCloudServer::start(TOKEN, BOT, "acme", "gitops", repo.path()).await
}

async fn open_feature(server: &BitbucketCloudServer) -> Value {
    let opened = post(
        server,
        &format!("/repositories/{REPO}/pullrequests"),
        json!({"title": "Pin", "description": "plan", "source": {"branch": {"name": "feature"}},
               "destination": {"branch": {"name": "main"}}, "close_source_branch": true}),
    )
    .await;
    assert_eq!(opened.status, 201, "{}", opened.text);
    opened.json()
}

#[tokio::test]
async fn a_pull_request_has_the_schemas_shape_with_short_hashes() {
    let repo = repo_with_feature();
    let server = start(&repo).await;
    let pr = open_feature(&server).await;
    assert_eq!(pr["id"], 1);
    assert_eq!(pr["state"], "OPEN");
    assert_eq!(pr["description"], "plan");
    assert_eq!(pr["summary"]["raw"], "plan");
    assert_eq!(pr["source"]["branch"]["name"], "feature");
    let head = repo.head("feature").unwrap();
    assert_eq!(pr["source"]["commit"]["hash"], head[..12]);
    assert_eq!(pr["source"]["repository"]["full_name"], REPO);
    assert_eq!(pr["destination"]["repository"]["full_name"], REPO);
    assert!(pr["merge_commit"].is_null());
    assert_eq!(pr["author"]["uuid"], server.uuid(BOT));
    assert!(pr["links"]["html"]["href"]
        .as_str()
        .unwrap()
        .ends_with("/acme/gitops/pull-requests/1"));

    // A second open one for the same branches is refused.
    let again = post(
        &server,
        &format!("/repositories/{REPO}/pullrequests"),
        json!({"title": "Again", "source": {"branch": {"name": "feature"}},
               "destination": {"branch": {"name": "main"}}}),
    )
    .await;
    assert_eq!(again.status, 400, "{}", again.text);
    assert_eq!(again.json()["type"], "error");

    // A person merges: a real merge commit, answered short; the full one by /commit.
    let merge = server.merge_pull_as("reviewer", REPO, 1);
    assert_eq!(repo.head("main").unwrap(), merge);
    let merged = get(&server, &format!("/repositories/{REPO}/pullrequests/1")).await;
    assert_eq!(merged.json()["state"], "MERGED");
    assert_eq!(merged.json()["merge_commit"]["hash"], merge[..12]);
    let commit = get(
        &server,
        &format!("/repositories/{REPO}/commit/{}", &merge[..12]),
    )
    .await;
    assert_eq!(commit.json()["hash"], merge);
    server.assert_no_violations();
}

#[tokio::test]
async fn lists_are_open_only_by_default_filtered_by_bbql_and_paged_with_next() {
    let repo = repo_with_feature();
    let server = start(&repo).await;
    open_feature(&server).await;
    let main = repo.head("main").unwrap();
    for n in 0..12 {
        let branch = format!("tagpin/x{n}");
        repo.reset_branch(&branch, &main);
        let id = server.open_pull_as("reviewer", REPO, &branch, "main", "x");
        if n % 2 == 0 {
            server.decline_pull_as("reviewer", REPO, id);
        }
    }
    let list = |query: &str| format!("/repositories/{REPO}/pullrequests?{query}");
    let open = get(&server, &list("pagelen=50")).await.json();
    assert_eq!(open["size"], 7, "OPEN only: {open}");
    let q = "q=source.branch.name+%7E+%22tagpin%2F%22&state=OPEN&state=DECLINED&pagelen=5";
    let first = get(&server, &list(q)).await.json();
    assert_eq!(first["size"], 12);
    assert_eq!(first["values"].as_array().unwrap().len(), 5);
    let next = first["next"].as_str().unwrap().to_string();
    assert!(next.starts_with(&server.api_url()), "{next}");
    assert!(next.contains("page=2"), "{next}");
    let second = get(&server, &next).await.json();
    assert_eq!(second["page"], 2);
    let exact = "q=source.branch.name+%3D+%22feature%22+AND+destination.branch.name+%3D+%22main%22";
    assert_eq!(get(&server, &list(exact)).await.json()["size"], 1);
    server.assert_no_violations();

    // What Bitbucket would refuse or misread: a made-up field, a state it has not, a page
    // larger than it serves.
    let bad = get(&server, &list("q=title+%3D+%22x%22")).await;
    assert_eq!(bad.status, 400);
    get(&server, &list("state=CLOSED")).await;
    assert_eq!(get(&server, &list("pagelen=51")).await.status, 400);
    let violations = server.take_violations();
    assert_eq!(violations.len(), 2, "{violations:?}");

    server.next_host("https://elsewhere.example");
    let moved = get(&server, &list("pagelen=2")).await.json();
    assert!(moved["next"]
        .as_str()
        .unwrap()
        .starts_with("https://elsewhere.example/2.0/"));
}

#[tokio::test]
async fn a_build_status_is_one_per_key_overwritten_in_place() {
    let repo = repo_with_feature();
    let server = start(&repo).await;
    let sha = repo.head("feature").unwrap();
    let path = format!("/repositories/{REPO}/commit/{sha}/statuses/build");
    let status = |state: &str| {
        json!({"key": "tagpin/converged", "state": state, "name": "tagpin/converged",
               "description": "checking", "url": "https://example.com/x"})
    };
    let first = post(&server, &path, status("INPROGRESS")).await;
    assert_eq!(first.status, 201, "{}", first.text);
    server.advance_clock(Duration::from_secs(1));
    let second = post(&server, &path, status("SUCCESSFUL")).await;
    assert_eq!(second.status, 201, "{}", second.text);
    let list = get(
        &server,
        &format!("/repositories/{REPO}/commit/{sha}/statuses"),
    )
    .await;
    let values = list.json()["values"].as_array().unwrap().clone();
    assert_eq!(values.len(), 1, "{values:?}");
    assert_eq!(values[0]["state"], "SUCCESSFUL");
    assert_eq!(values[0]["created_on"], first.json()["created_on"]);
    assert_ne!(values[0]["updated_on"], values[0]["created_on"]);
    assert!(values[0].get("creator").is_none(), "Bitbucket records none");

    let no_url = post(&server, &path, json!({"key": "k", "state": "SUCCESSFUL"})).await;
    assert_eq!(no_url.status, 400);
    let long_key = post(
        &server,
        &path,
        json!({"key": "k".repeat(41), "state": "SUCCESSFUL", "url": "https://example.com"}),
    )
    .await;
    assert_eq!(long_key.status, 400);
    assert_eq!(server.take_violations().len(), 1, "the long key");
    let unknown = format!(
        "/repositories/{REPO}/commit/{}/statuses/build",
        "f".repeat(40)
    );
    assert_eq!(post(&server, &unknown, status("FAILED")).await.status, 404);
}

#[tokio::test]
async fn credentials_scopes_and_hidden_repositories() {
    let repo = repo_with_feature();
    let server = start(&repo).await;
    let user = get(&server, "/user").await;
    assert_eq!(user.json()["uuid"], server.uuid(BOT));
    assert_eq!(user.json()["nickname"], BOT);
    assert_eq!(
        call(&server, Method::GET, "/user", None, None).await.status,
        401
    );

    server.add_credential("bb-access", BOT, Credential::AccessToken, Scope::Write);
    let refused = call(
        &server,
        Method::GET,
        "/user",
        Some("Bearer bb-access"),
        None,
    )
    .await;
    assert_eq!(refused.status, 401, "an access token is no user");
    let repo_call = format!("/repositories/{REPO}/pullrequests");
    let listed = call(
        &server,
        Method::GET,
        &repo_call,
        Some("Bearer bb-access"),
        None,
    )
    .await;
    assert_eq!(listed.status, 200);

    server.add_credential(
        "app-pw",
        BOT,
        Credential::AppPassword {
            username: "bot-user".into(),
        },
        Scope::Write,
    );
    let basic = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode("bot-user:app-pw")
    );
    assert_eq!(
        call(&server, Method::GET, "/user", Some(&basic), None)
            .await
            .status,
        200
    );
    let as_bearer = call(&server, Method::GET, "/user", Some("Bearer app-pw"), None).await;
    assert_eq!(as_bearer.status, 401, "an app password is Basic only");

    server.add_credential("bb-read", BOT, Credential::ApiToken, Scope::Read);
    let write = call(
        &server,
        Method::POST,
        &repo_call,
        Some("Bearer bb-read"),
        Some(json!({"title": "x", "source": {"branch": {"name": "feature"}}})),
    )
    .await;
    assert_eq!(write.status, 403);
    server.add_credential(
        "bb-outsider",
        "outsider",
        Credential::ApiToken,
        Scope::Write,
    );
    let hidden = call(
        &server,
        Method::GET,
        &repo_call,
        Some("Bearer bb-outsider"),
        None,
    )
    .await;
    assert_eq!(hidden.status, 404);
    server.grant(REPO, "outsider", Access::Read);
    let seen = call(
        &server,
        Method::GET,
        &repo_call,
        Some("Bearer bb-outsider"),
        None,
    )
    .await;
    assert_eq!(seen.status, 200);
    server.assert_no_violations();
}

#[tokio::test]
async fn comments_are_edited_by_their_author_only() {
    let repo = repo_with_feature();
    let server = start(&repo).await;
    open_feature(&server).await;
    let path = format!("/repositories/{REPO}/pullrequests/1/comments");
    let created = post(&server, &path, json!({"content": {"raw": "hello"}})).await;
    assert_eq!(created.status, 201, "{}", created.text);
    let id = created.json()["id"].as_u64().unwrap();
    let edited = call(
        &server,
        Method::PUT,
        &format!("{path}/{id}"),
        Some(&bearer()),
        Some(json!({"content": {"raw": "edited"}})),
    )
    .await;
    assert_eq!(edited.status, 200, "{}", edited.text);
    assert_eq!(edited.json()["content"]["raw"], "edited");
    let theirs = server.comment_as("reviewer", REPO, 1, "mine");
    let refused = call(
        &server,
        Method::PUT,
        &format!("{path}/{theirs}"),
        Some(&bearer()),
        Some(json!({"content": {"raw": "taken"}})),
    )
    .await;
    assert_eq!(refused.status, 403);
    let list = get(&server, &path).await.json();
    assert_eq!(list["size"], 2);
    assert_eq!(list["values"][1]["user"]["uuid"], server.uuid("reviewer"));
    server.assert_no_violations();
}
