//! Proves the local GitLab server (`tests/it/support/gitlab.rs`) answers as
//! GitLab's REST v4 does, driven with plain HTTP (reqwest), so tagpin's GitLab
//! adapter can be tested against it: the documented shapes, offset pagination
//! headers, the commit-status state machine, the 409 on a second open merge
//! request, permissions by token scope and project role, fork merge requests,
//! and a person's merge making real commits in the bare repository.

use crate::support;

use std::time::{Duration, UNIX_EPOCH};

use reqwest::header::HeaderMap;
use reqwest::Method;
use serde_json::{json, Value};
use support::git::{git_ok, BareRepo};
use support::gitlab::{AccessLevel, Fault, GitLabServer, MergeMethod, MrState, Scope};

const TOKEN: &str = "glpat-selftest-0123456789abcdef";
const BOT: &str = "tagpin-bot";
const PROJECT: &str = "acme/platform/gitops";
const ENCODED: &str = "acme%2Fplatform%2Fgitops";

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

    fn header(&self, name: &str) -> String {
        self.headers
            .get(name)
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_else(|| panic!("no {name} header"))
    }
}

/// One request as a GitLab client sends it: `PRIVATE-TOKEN` when a token is given.
async fn call(
    server: &GitLabServer,
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
        request = request.header("PRIVATE-TOKEN", token);
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

async fn get(server: &GitLabServer, path: &str) -> Answer {
    call(server, Method::GET, path, Some(TOKEN), None).await
}

async fn post(server: &GitLabServer, path: &str, body: Value) -> Answer {
    call(server, Method::POST, path, Some(TOKEN), Some(body)).await
}

async fn put(server: &GitLabServer, path: &str, body: Value) -> Answer {
    call(server, Method::PUT, path, Some(TOKEN), Some(body)).await
}

fn mrs_path() -> String {
    format!("/projects/{ENCODED}/merge_requests")
}

/// Every key of `template` (a documented example) is present in `actual`.
fn has_documented_keys(actual: &Value, fixture: &str) {
    let template: Value = serde_json::from_str(fixture).unwrap();
    for key in template.as_object().unwrap().keys() {
        assert!(actual.get(key).is_some(), "{key} missing from {actual}");
    }
}

fn is_gitlab_time(text: &Value) -> bool {
    let s = text.as_str().unwrap_or_default();
    s.len() == 24 && s.ends_with('Z') && s.as_bytes()[19] == b'.' && s.as_bytes()[10] == b'T'
}

#[tokio::test]
async fn every_endpoint_answers_in_the_documented_shapes() {
    let repo = repo_with_feature();
    let server = GitLabServer::start(TOKEN, BOT, PROJECT, repo.path()).await;
    let feature = repo.head("feature").unwrap();

    let user = get(&server, "/user").await;
    assert_eq!(user.status, 200, "{}", user.text);
    assert_eq!(user.json()["username"], BOT);
    has_documented_keys(
        &user.json(),
        include_str!("../../fixtures/gitlab/user.json"),
    );

    let project = get(&server, &format!("/projects/{ENCODED}")).await;
    assert_eq!(project.status, 200, "{}", project.text);
    let p = project.json();
    has_documented_keys(&p, include_str!("../../fixtures/gitlab/project.json"));
    assert_eq!(p["path_with_namespace"], PROJECT);
    assert_eq!(p["default_branch"], "main");
    assert_eq!(p["permissions"]["project_access"]["access_level"], 40);
    let id = p["id"].as_u64().unwrap();
    assert_eq!(id, server.project_id(PROJECT));
    let by_id = get(&server, &format!("/projects/{id}")).await;
    assert_eq!(by_id.json()["path_with_namespace"], PROJECT);

    let created = post(
        &server,
        &mrs_path(),
        json!({"source_branch": "feature", "target_branch": "main", "title": "Pin web",
               "description": "Pins web to its digest.", "labels": "tagpin,deploy",
               "remove_source_branch": true, "squash": false}),
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.text);
    let mr = created.json();
    has_documented_keys(
        &mr,
        include_str!("../../fixtures/gitlab/merge_request.json"),
    );
    assert_eq!(mr["iid"], 1);
    assert_ne!(mr["id"], mr["iid"], "id and iid differ, as on GitLab");
    assert_eq!(mr["project_id"], id);
    assert_eq!(mr["source_project_id"], id);
    assert_eq!(mr["target_project_id"], id);
    assert_eq!(mr["state"], "opened");
    assert_eq!(mr["sha"], feature.as_str());
    assert_eq!(mr["labels"], json!(["deploy", "tagpin"]), "sorted by title");
    assert_eq!(mr["author"]["username"], BOT);
    assert_eq!(mr["description"], "Pins web to its digest.");
    assert_eq!(mr["force_remove_source_branch"], true);
    assert_eq!(mr["merge_commit_sha"], Value::Null);
    assert_eq!(mr["merged_at"], Value::Null);
    assert_eq!(mr["diff_refs"]["head_sha"], feature.as_str());
    assert_eq!(
        mr["diff_refs"]["base_sha"],
        repo.head("main").unwrap().as_str()
    );
    assert!(is_gitlab_time(&mr["created_at"]), "{}", mr["created_at"]);
    assert_eq!(
        mr["web_url"],
        format!("{}/{PROJECT}/-/merge_requests/1", server.url())
    );
    // GitLab keeps the merge request's head under refs/merge-requests.
    assert_eq!(
        git_ok(repo.path(), &["rev-parse", "refs/merge-requests/1/head"]),
        feature
    );

    let one = get(&server, &format!("{}/1", mrs_path())).await;
    assert_eq!(one.status, 200);
    assert_eq!(one.json()["title"], "Pin web");
    let listed = get(
        &server,
        &format!("{}?source_branch=feature&state=opened", mrs_path()),
    )
    .await;
    assert_eq!(listed.status, 200);
    assert_eq!(listed.json().as_array().unwrap().len(), 1);
    assert!(
        listed.json()[0].get("diff_refs").is_none(),
        "lists are basic"
    );
    let none = get(&server, &format!("{}?source_branch=other", mrs_path())).await;
    assert_eq!(none.json(), json!([]));
    let by_label = get(&server, &format!("{}?labels=tagpin", mrs_path())).await;
    assert_eq!(by_label.json().as_array().unwrap().len(), 1);

    let updated = put(
        &server,
        &format!("{}/1", mrs_path()),
        json!({"title": "Pin web (2)", "description": "Updated.", "add_labels": "verified"}),
    )
    .await;
    assert_eq!(updated.status, 200, "{}", updated.text);
    assert_eq!(updated.json()["title"], "Pin web (2)");
    assert_eq!(
        updated.json()["labels"],
        json!(["deploy", "tagpin", "verified"])
    );

    // A person pushes to the source branch: the merge request follows it.
    let pushed = repo.commit_as_other_writer("feature", &[("apps/x.yaml", "x: 1\n")], "more");
    assert_eq!(
        get(&server, &format!("{}/1", mrs_path())).await.json()["sha"],
        pushed.as_str()
    );

    let note = post(
        &server,
        &format!("{}/1/notes", mrs_path()),
        json!({"body": "tagpin: pending"}),
    )
    .await;
    assert_eq!(note.status, 201, "{}", note.text);
    has_documented_keys(
        &note.json(),
        include_str!("../../fixtures/gitlab/note.json"),
    );
    assert_eq!(note.json()["noteable_type"], "MergeRequest");
    assert_eq!(note.json()["noteable_iid"], 1);
    assert_eq!(note.json()["system"], false);
    let note_id = note.json()["id"].as_u64().unwrap();
    let edited = put(
        &server,
        &format!("{}/1/notes/{note_id}", mrs_path()),
        json!({"body": "tagpin: converged"}),
    )
    .await;
    assert_eq!(edited.status, 200, "{}", edited.text);
    assert_eq!(edited.json()["body"], "tagpin: converged");
    let single = get(&server, &format!("{}/1/notes/{note_id}", mrs_path())).await;
    assert_eq!(single.json()["body"], "tagpin: converged");
    let notes = get(&server, &format!("{}/1/notes", mrs_path())).await;
    let notes = notes.json();
    // GitLab lists its own system notes too (title, description, label changes).
    assert!(notes
        .as_array()
        .unwrap()
        .iter()
        .any(|n| n["system"] == true && n["body"] == "changed the description"));
    assert_eq!(
        get(&server, &format!("{}/1", mrs_path())).await.json()["user_notes_count"],
        1
    );

    let status = post(
        &server,
        &format!("/projects/{ENCODED}/statuses/{pushed}"),
        json!({"state": "pending", "name": "tagpin/converged", "description": "waiting",
               "target_url": "https://tagpin.example/run/1"}),
    )
    .await;
    assert_eq!(status.status, 201, "{}", status.text);
    let s = status.json();
    has_documented_keys(&s, include_str!("../../fixtures/gitlab/commit_status.json"));
    assert_eq!(s["status"], "pending");
    assert_eq!(s["name"], "tagpin/converged");
    assert_eq!(s["ref"], "feature", "the branch holding the commit");
    assert_eq!(s["author"]["username"], BOT);
    let statuses = get(
        &server,
        &format!("/projects/{ENCODED}/repository/commits/{pushed}/statuses?ref=feature&name=tagpin%2Fconverged"),
    )
    .await;
    assert_eq!(statuses.status, 200);
    assert_eq!(statuses.json()[0]["id"], s["id"]);
    server.assert_no_violations();
}

#[tokio::test]
async fn lists_are_paginated_with_gitlab_headers() {
    let repo = repo_with_feature();
    let server = GitLabServer::start(TOKEN, BOT, PROJECT, repo.path()).await;
    let iid = server.open_mr_as("alice", PROJECT, "feature", "main", "A change");
    for n in 1..=25 {
        server.add_note_as("alice", PROJECT, iid, &format!("note {n}"));
    }
    let notes = format!("{}/{iid}/notes", mrs_path());

    let first = get(&server, &notes).await;
    assert_eq!(first.json().as_array().unwrap().len(), 20, "default 20");
    assert_eq!(
        first.json()[0]["body"],
        "note 25",
        "newest first by default"
    );
    assert_eq!(first.header("x-page"), "1");
    assert_eq!(first.header("x-per-page"), "20");
    assert_eq!(first.header("x-next-page"), "2");
    assert_eq!(first.header("x-prev-page"), "");
    assert_eq!(first.header("x-total"), "25");
    assert_eq!(first.header("x-total-pages"), "2");

    let middle = get(&server, &format!("{notes}?per_page=10&page=2&sort=asc")).await;
    let bodies: Vec<String> = middle
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["body"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(bodies.first().map(String::as_str), Some("note 11"));
    assert_eq!(bodies.len(), 10);
    assert_eq!(middle.header("x-next-page"), "3");
    assert_eq!(middle.header("x-prev-page"), "1");
    assert_eq!(middle.header("x-total-pages"), "3");
    let link = middle.header("link");
    let base = format!("{}{notes}", server.api_url());
    for (rel, page) in [("prev", 1), ("next", 3), ("first", 1), ("last", 3)] {
        let expected = format!("<{base}?sort=asc&page={page}&per_page=10>; rel=\"{rel}\"");
        assert!(link.contains(&expected), "{expected} not in {link}");
    }

    let last = get(&server, &format!("{notes}?per_page=10&page=3")).await;
    assert_eq!(last.json().as_array().unwrap().len(), 5);
    assert_eq!(last.header("x-next-page"), "");
    assert!(!last.header("link").contains("rel=\"next\""));

    let capped = get(&server, &format!("{notes}?per_page=500")).await;
    assert_eq!(capped.header("x-per-page"), "100", "at most 100");
    assert_eq!(capped.json().as_array().unwrap().len(), 25);

    let bad = get(&server, &format!("{notes}?per_page=ten")).await;
    assert_eq!(bad.status, 400);
    assert_eq!(bad.json(), json!({"error": "per_page is invalid"}));
    assert_eq!(server.take_violations().len(), 1);
}

#[tokio::test]
async fn a_status_posted_twice_in_a_row_is_refused_as_gitlab_does() {
    let repo = repo_with_feature();
    let server = GitLabServer::start(TOKEN, BOT, PROJECT, repo.path()).await;
    let sha = repo.head("feature").unwrap();
    let path = format!("/projects/{ENCODED}/statuses/{sha}");
    let status = |state: &str| json!({"state": state, "name": "tagpin", "ref": "feature"});

    let running = post(&server, &path, status("running")).await;
    assert_eq!(running.status, 201, "{}", running.text);
    let again = post(&server, &path, status("running")).await;
    assert_eq!(again.status, 400);
    assert_eq!(
        again.json(),
        json!({"message": "Cannot transition status via :run from :running (Reason(s): Status cannot transition via \"run\")"})
    );
    let back = post(&server, &path, status("pending")).await;
    assert_eq!(back.status, 400);
    assert_eq!(
        back.json()["message"],
        "Cannot transition status via :enqueue from :running (Reason(s): Status cannot transition via \"enqueue\")"
    );
    // Finishing moves the same status on; it keeps its id.
    let done = post(&server, &path, status("success")).await;
    assert_eq!(done.status, 201);
    assert_eq!(done.json()["id"], running.json()["id"]);
    assert!(done.json()["finished_at"].is_string());
    // A finished status is followed by a new one; the old one is retried.
    let pending = post(&server, &path, status("pending")).await;
    assert_eq!(pending.status, 201);
    assert_ne!(pending.json()["id"], running.json()["id"]);
    let twice = post(&server, &path, status("pending")).await;
    assert_eq!(
        twice.json()["message"],
        "Cannot transition status via :enqueue from :pending (Reason(s): Status cannot transition via \"enqueue\")"
    );
    let success_again = post(&server, &path, status("success")).await;
    assert_eq!(success_again.status, 201);
    let success_third = post(&server, &path, status("success")).await;
    assert_eq!(success_third.status, 201, "finished twice is two statuses");

    let list = format!("/projects/{ENCODED}/repository/commits/{sha}/statuses");
    let latest = get(&server, &list).await.json();
    assert_eq!(latest.as_array().unwrap().len(), 1, "latest only: {latest}");
    assert_eq!(latest[0]["id"], success_third.json()["id"]);
    let all = get(&server, &format!("{list}?all=true")).await.json();
    assert_eq!(all.as_array().unwrap().len(), 3);
    assert_eq!(server.statuses(PROJECT, &sha).len(), 3);

    // Another name, or another ref, is another status.
    let other = post(
        &server,
        &path,
        json!({"state": "running", "context": "ci", "ref": "feature"}),
    )
    .await;
    assert_eq!(other.status, 201);
    assert_eq!(
        other.json()["name"],
        "ci",
        "`context` is an alias of `name`"
    );

    let missing = post(&server, &path, json!({"name": "x"})).await;
    assert_eq!(missing.json(), json!({"error": "state is missing"}));
    let invalid = post(&server, &path, json!({"state": "error"})).await;
    assert_eq!(invalid.status, 400);
    assert_eq!(
        invalid.json(),
        json!({"error": "state does not have a valid value"})
    );
    assert_eq!(server.take_violations().len(), 2);
    let unknown = post(
        &server,
        &format!("/projects/{ENCODED}/statuses/{}", "0".repeat(40)),
        status("success"),
    )
    .await;
    assert_eq!(unknown.status, 404);
    assert_eq!(unknown.json(), json!({"message": "404 Commit Not Found"}));
    let long = post(
        &server,
        &path,
        json!({"state": "failed", "name": "long", "description": "x".repeat(256)}),
    )
    .await;
    assert_eq!(long.status, 400);
    assert_eq!(
        long.json(),
        json!({"message": {"description": ["is too long (maximum is 255 characters)"]}})
    );
}

#[tokio::test]
async fn a_second_open_merge_request_for_the_same_branches_is_a_409() {
    let repo = repo_with_feature();
    let server = GitLabServer::start(TOKEN, BOT, PROJECT, repo.path()).await;
    let body = json!({"source_branch": "feature", "target_branch": "main", "title": "Pin"});
    assert_eq!(post(&server, &mrs_path(), body.clone()).await.status, 201);
    let duplicate = post(&server, &mrs_path(), body.clone()).await;
    assert_eq!(duplicate.status, 409);
    assert_eq!(
        duplicate.json(),
        json!({"message": ["Another open merge request already exists for this source branch: !1"]})
    );

    // Closed, the branch is free again; reopening the first then conflicts.
    let closed = put(
        &server,
        &format!("{}/1", mrs_path()),
        json!({"state_event": "close"}),
    )
    .await;
    assert_eq!(closed.json()["state"], "closed");
    assert!(closed.json()["closed_at"].is_string());
    assert_eq!(closed.json()["closed_by"]["username"], BOT);
    assert_eq!(post(&server, &mrs_path(), body).await.status, 201);
    let reopen = put(
        &server,
        &format!("{}/1", mrs_path()),
        json!({"state_event": "reopen"}),
    )
    .await;
    assert_eq!(reopen.status, 409);
    assert_eq!(
        reopen.json()["message"][0],
        "Another open merge request already exists for this source branch: !2"
    );

    let no_branch = post(
        &server,
        &mrs_path(),
        json!({"source_branch": "nope", "target_branch": "main", "title": "x"}),
    )
    .await;
    assert_eq!(no_branch.status, 422);
    assert_eq!(
        no_branch.json(),
        json!({"message": ["Source branch \"nope\" does not exist"]})
    );
    let missing = post(&server, &mrs_path(), json!({"source_branch": "feature"})).await;
    assert_eq!(missing.status, 400);
    assert_eq!(
        missing.json(),
        json!({"error": "target_branch is missing, title is missing"})
    );
    let bad_type = post(
        &server,
        &mrs_path(),
        json!({"source_branch": "feature", "target_branch": "main", "title": "x", "squash": "maybe"}),
    )
    .await;
    assert_eq!(bad_type.json(), json!({"error": "squash is invalid"}));
    let blank = post(
        &server,
        &mrs_path(),
        json!({"source_branch": "feature", "target_branch": "main", "title": " "}),
    )
    .await;
    assert_eq!(
        blank.json(),
        json!({"message": {"title": ["can't be blank"]}})
    );
    let bad_event = put(
        &server,
        &format!("{}/1", mrs_path()),
        json!({"state_event": "merge"}),
    )
    .await;
    assert_eq!(
        bad_event.json(),
        json!({"error": "state_event does not have a valid value"})
    );
    let empty = put(&server, &format!("{}/1", mrs_path()), json!({})).await;
    assert_eq!(empty.status, 400);
    assert!(empty.json()["error"]
        .as_str()
        .unwrap()
        .ends_with("are missing, at least one parameter must be provided"));
    let absent = get(&server, &format!("{}/99", mrs_path())).await;
    assert_eq!(absent.status, 404);
    assert_eq!(absent.json(), json!({"message": "404 Not found"}));
    assert_eq!(
        server.take_violations().len(),
        4,
        "the four malformed requests"
    );
}

#[tokio::test]
async fn permissions_follow_the_token_scope_and_the_project_role() {
    let repo = repo_with_feature();
    let server = GitLabServer::start(TOKEN, BOT, PROJECT, repo.path()).await;
    server.add_token("glpat-reader", "reader", Scope::ReadApi);
    server.add_member(PROJECT, "reader", AccessLevel::Developer);
    server.add_token("glpat-reporter", "rita", Scope::Api);
    server.add_member(PROJECT, "rita", AccessLevel::Reporter);
    server.add_token("glpat-outsider", "olga", Scope::Api);
    let project = format!("/projects/{ENCODED}");
    let mr = json!({"source_branch": "feature", "target_branch": "main", "title": "x"});

    let anonymous = call(&server, Method::GET, "/user", None, None).await;
    assert_eq!(anonymous.status, 401);
    assert_eq!(anonymous.json(), json!({"message": "401 Unauthorized"}));
    let wrong = call(&server, Method::GET, &project, Some("glpat-wrong"), None).await;
    assert_eq!(wrong.json(), json!({"message": "401 Unauthorized"}));
    let private = call(&server, Method::GET, &project, None, None).await;
    assert_eq!(private.status, 404, "a private project is hidden");
    assert_eq!(private.json(), json!({"message": "404 Project Not Found"}));
    let anonymous_write = call(&server, Method::POST, &mrs_path(), None, Some(mr.clone())).await;
    assert_eq!(anonymous_write.status, 401);

    let read_only = call(
        &server,
        Method::POST,
        &mrs_path(),
        Some("glpat-reader"),
        Some(mr.clone()),
    )
    .await;
    assert_eq!(read_only.status, 403);
    assert_eq!(read_only.json()["error"], "insufficient_scope");
    assert_eq!(read_only.json()["scope"], "api");
    let reads = call(
        &server,
        Method::GET,
        &mrs_path(),
        Some("glpat-reader"),
        None,
    )
    .await;
    assert_eq!(reads.status, 200);

    let reporter = call(
        &server,
        Method::POST,
        &mrs_path(),
        Some("glpat-reporter"),
        Some(mr.clone()),
    )
    .await;
    assert_eq!(reporter.status, 403);
    assert_eq!(reporter.json(), json!({"message": "403 Forbidden"}));
    let sha = repo.head("main").unwrap();
    let status = call(
        &server,
        Method::POST,
        &format!("{project}/statuses/{sha}"),
        Some("glpat-reporter"),
        Some(json!({"state": "success"})),
    )
    .await;
    assert_eq!(status.status, 403);
    let outsider = call(&server, Method::GET, &project, Some("glpat-outsider"), None).await;
    assert_eq!(outsider.json(), json!({"message": "404 Project Not Found"}));

    // Only a note's author may edit it.
    let iid = server.open_mr_as("alice", PROJECT, "feature", "main", "By Alice");
    let theirs = server.add_note_as("alice", PROJECT, iid, "Alice's note");
    let edit = put(
        &server,
        &format!("{}/{iid}/notes/{theirs}", mrs_path()),
        json!({"body": "taken over"}),
    )
    .await;
    assert_eq!(edit.status, 403);
    assert_eq!(edit.json(), json!({"message": "403 Forbidden"}));
    assert_eq!(server.notes(PROJECT, iid)[0].body, "Alice's note");

    // `Authorization: Bearer` works as `PRIVATE-TOKEN` does.
    let bearer = reqwest::Client::new()
        .get(format!("{}/user", server.api_url()))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(bearer.status(), 200);

    // The log names the user, never the token.
    let log = server.requests();
    assert!(log
        .iter()
        .any(|r| r.user.as_deref() == Some("rita") && r.status == 403));
    assert!(log.iter().all(|r| !format!("{r:?}").contains("glpat-")));
    server.assert_no_violations();
}

#[tokio::test]
async fn a_merge_request_from_a_fork_has_its_own_source_project() {
    let repo = repo_with_feature();
    let server = GitLabServer::start(TOKEN, BOT, PROJECT, repo.path()).await;
    let fork_id = server.fork_project(PROJECT, "mallory/gitops", "mallory");
    let head = repo.head("feature").unwrap();
    let iid = server.open_fork_mr_as(
        "mallory",
        "mallory/gitops",
        "feature",
        &head,
        PROJECT,
        "main",
        "From a fork",
    );

    let mr = get(&server, &format!("{}/{iid}", mrs_path())).await.json();
    let target = server.project_id(PROJECT);
    assert_eq!(mr["source_project_id"], fork_id);
    assert_eq!(mr["target_project_id"], target);
    assert_eq!(mr["project_id"], target);
    assert_ne!(fork_id, target);
    assert_eq!(mr["author"]["username"], "mallory");
    assert_eq!(mr["sha"], head.as_str());
    assert_eq!(
        git_ok(
            repo.path(),
            &["rev-parse", &format!("refs/merge-requests/{iid}/head")]
        ),
        head
    );

    // The fork's `feature` is not this project's `feature`: no conflict.
    let own = post(
        &server,
        &mrs_path(),
        json!({"source_branch": "feature", "target_branch": "main", "title": "Ours"}),
    )
    .await;
    assert_eq!(own.status, 201, "{}", own.text);
    let listed = get(&server, &format!("{}?source_branch=feature", mrs_path()))
        .await
        .json();
    assert_eq!(listed.as_array().unwrap().len(), 2);
    let fork = get(&server, "/projects/mallory%2Fgitops").await;
    assert_eq!(fork.status, 404, "tagpin's bot is no member of the fork");
    server.assert_no_violations();
}

#[tokio::test]
async fn a_person_merging_makes_real_commits_in_the_repository() {
    let repo = repo_with_feature();
    let server = GitLabServer::start(TOKEN, BOT, PROJECT, repo.path()).await;
    let main_before = repo.head("main").unwrap();
    let feature = repo.head("feature").unwrap();
    let created = post(
        &server,
        &mrs_path(),
        json!({"source_branch": "feature", "target_branch": "main", "title": "Pin web",
               "remove_source_branch": true}),
    )
    .await;
    assert_eq!(created.status, 201);

    let merged = server.merge_mr_as("maria", PROJECT, 1);
    let merge = merged.merge_commit_sha.clone().expect("a merge commit");
    assert_eq!(merged.squash_commit_sha, None);
    assert_eq!(repo.head("main").unwrap(), merge);
    assert_eq!(
        git_ok(
            repo.path(),
            &["rev-parse", &format!("{merge}^1"), &format!("{merge}^2")]
        ),
        format!("{main_before}\n{feature}")
    );
    assert_eq!(
        repo.read("main", "apps/web.yaml").unwrap(),
        "image: web@sha256:abc\n"
    );
    assert_eq!(
        repo.head("feature"),
        None,
        "remove_source_branch deleted it"
    );
    let subject = git_ok(repo.path(), &["log", "-1", "--format=%s%n%b", &merge]);
    assert!(
        subject.starts_with("Merge branch 'feature' into 'main'"),
        "{subject}"
    );
    assert!(
        subject.contains(&format!("See merge request {PROJECT}!1")),
        "{subject}"
    );

    let mr = get(&server, &format!("{}/1", mrs_path())).await.json();
    assert_eq!(mr["state"], "merged");
    assert_eq!(mr["merge_commit_sha"], merge.as_str());
    assert_eq!(mr["squash_commit_sha"], Value::Null);
    assert_eq!(mr["merge_user"]["username"], "maria");
    assert_eq!(mr["merged_by"]["username"], "maria");
    assert!(is_gitlab_time(&mr["merged_at"]));
    assert_eq!(mr["detailed_merge_status"], "not_open");
    let merged_list = get(&server, &format!("{}?state=merged", mrs_path()))
        .await
        .json();
    assert_eq!(merged_list.as_array().unwrap().len(), 1);

    // Squash with a merge commit: the squash commit sits on the merge base.
    repo.commit_as_other_writer("squashy", &[("a.txt", "1\n")], "one");
    repo.commit_as_other_writer("squashy", &[("a.txt", "2\n")], "two");
    let squash_iid = server.open_mr_as(BOT, PROJECT, "squashy", "main", "Squash me");
    let set = put(
        &server,
        &format!("{}/{squash_iid}", mrs_path()),
        json!({"squash": true}),
    )
    .await;
    assert_eq!(set.json()["squash"], true);
    let main_now = repo.head("main").unwrap();
    let outcome = server.merge_mr_as("maria", PROJECT, squash_iid);
    let squash = outcome.squash_commit_sha.clone().unwrap();
    let merge = outcome.merge_commit_sha.clone().unwrap();
    assert_eq!(
        git_ok(repo.path(), &["rev-parse", &format!("{squash}^")]),
        main_now
    );
    assert_eq!(
        git_ok(repo.path(), &["rev-parse", &format!("{merge}^2")]),
        squash
    );
    assert_eq!(repo.read("main", "a.txt").unwrap(), "2\n");
    let mr = server.mr(PROJECT, squash_iid);
    assert_eq!(mr.state, MrState::Merged);
    assert_eq!(mr.squash_commit_sha.as_deref(), Some(squash.as_str()));

    // Fast-forward: no merge commit, the target takes the source head.
    server.set_merge_method(PROJECT, MergeMethod::FastForward);
    let ff_head = repo.commit_as_other_writer("fast", &[("b.txt", "b\n")], "fast");
    let ff_iid = server.open_mr_as(BOT, PROJECT, "fast", "main", "Fast");
    let ff = server.merge_mr_as("maria", PROJECT, ff_iid);
    assert_eq!(ff.merge_commit_sha, None);
    assert_eq!(repo.head("main").unwrap(), ff_head);
    let ff_json = get(&server, &format!("{}/{ff_iid}", mrs_path()))
        .await
        .json();
    assert_eq!(ff_json["merge_commit_sha"], Value::Null);
    assert_eq!(ff_json["state"], "merged");

    // A person closes one.
    repo.commit_as_other_writer("closing", &[("c.txt", "c\n")], "c");
    let close_iid = server.open_mr_as(BOT, PROJECT, "closing", "main", "Close me");
    server.close_mr_as("maria", PROJECT, close_iid);
    let closed = get(&server, &format!("{}/{close_iid}", mrs_path()))
        .await
        .json();
    assert_eq!(closed["state"], "closed");
    assert_eq!(closed["closed_by"]["username"], "maria");
    server.assert_no_violations();
}

#[tokio::test]
async fn faults_are_answered_as_gitlab_and_its_rate_limiter_do() {
    let repo = repo_with_feature();
    let server = GitLabServer::start(TOKEN, BOT, PROJECT, repo.path()).await;
    let iid = server.open_mr_as(BOT, PROJECT, "feature", "main", "x");
    let notes = format!("{}/{iid}/notes", mrs_path());

    server.inject(Fault::rate_limited("POST", "/notes", 30, 1_900_000_000));
    let limited = post(&server, &notes, json!({"body": "hi"})).await;
    assert_eq!(limited.status, 429);
    assert_eq!(limited.header("retry-after"), "30");
    assert_eq!(limited.header("ratelimit-remaining"), "0");
    assert_eq!(limited.header("ratelimit-reset"), "1900000000");
    assert_eq!(
        limited.header("ratelimit-resettime"),
        "Sun, 17 Mar 2030 17:46:40 GMT"
    );
    assert_eq!(limited.text, "Retry later\n");
    assert!(server.notes(PROJECT, iid).is_empty(), "nothing was created");

    server.inject(Fault::new("GET", "/merge_requests", 500).times(2));
    for _ in 0..2 {
        let failed = get(&server, &mrs_path()).await;
        assert_eq!(failed.status, 500);
        assert_eq!(
            failed.json(),
            json!({"message": "500 Internal Server Error"})
        );
    }
    assert_eq!(get(&server, &mrs_path()).await.status, 200);

    // The note is made, the answer is lost: a retry must not post it twice.
    server.inject(Fault::new("POST", "/notes", 502).after_effect());
    assert_eq!(
        post(&server, &notes, json!({"body": "once"})).await.status,
        502
    );
    assert_eq!(server.notes(PROJECT, iid).len(), 1);

    server.inject(Fault::hang("GET", "/user"));
    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let hung = client
        .get(format!("{}/user", server.api_url()))
        .header("PRIVATE-TOKEN", TOKEN)
        .send()
        .await;
    assert!(hung.expect_err("no answer").is_timeout());
    assert_eq!(
        get(&server, "/user").await.status,
        200,
        "only the next one hangs"
    );

    // Normal answers carry GitLab's RateLimit-* headers.
    let normal = get(&server, "/user").await;
    assert_eq!(normal.header("ratelimit-limit"), "2000");
    assert!(normal.headers.contains_key("ratelimit-observed"));
    server.assert_no_violations();
}

#[tokio::test]
async fn the_clock_can_be_frozen_and_moved() {
    let repo = repo_with_feature();
    let server = GitLabServer::start(TOKEN, BOT, PROJECT, repo.path()).await;
    server.freeze_clock(UNIX_EPOCH + Duration::from_secs(1_893_553_445));
    let created = post(
        &server,
        &mrs_path(),
        json!({"source_branch": "feature", "target_branch": "main", "title": "x"}),
    )
    .await
    .json();
    assert_eq!(created["created_at"], "2030-01-02T03:04:05.000Z");
    server.advance_clock(Duration::from_secs(90));
    let updated = put(&server, &format!("{}/1", mrs_path()), json!({"title": "y"}))
        .await
        .json();
    assert_eq!(updated["created_at"], "2030-01-02T03:04:05.000Z");
    assert_eq!(updated["updated_at"], "2030-01-02T03:05:35.000Z");
    let sha = repo.head("feature").unwrap();
    server.add_status_as("ci-runner", PROJECT, &sha, "running", "build", "feature");
    let listed = get(
        &server,
        &format!("/projects/{ENCODED}/repository/commits/{sha}/statuses"),
    )
    .await
    .json();
    assert_eq!(listed[0]["author"]["username"], "ci-runner");
    assert_eq!(listed[0]["created_at"], "2030-01-02T03:05:35.000Z");
    assert_eq!(listed[0]["started_at"], "2030-01-02T03:05:35.000Z");
}

#[tokio::test]
async fn requests_gitlab_would_reject_or_ignore_are_violations() {
    let repo = repo_with_feature();
    let server = GitLabServer::start(TOKEN, BOT, PROJECT, repo.path()).await;

    let no_route = get(&server, "/projects/acme/platform/gitops").await;
    assert_eq!(no_route.status, 404, "an unencoded path is no route");
    assert_eq!(no_route.json(), json!({"error": "404 Not Found"}));
    let typo = post(
        &server,
        &mrs_path(),
        json!({"source_branch": "feature", "target_branch": "main", "title": "x",
               "remove_source_brach": true}),
    )
    .await;
    assert_eq!(typo.status, 201, "GitLab ignores what it does not declare");
    let in_url = reqwest::get(format!("{}/user?private_token={TOKEN}", server.api_url()))
        .await
        .unwrap();
    assert_eq!(in_url.status(), 200, "GitLab accepts it");
    let not_json = reqwest::Client::new()
        .post(format!("{}{}", server.api_url(), mrs_path()))
        .header("PRIVATE-TOKEN", TOKEN)
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(not_json.status(), 400);

    let violations = server.take_violations();
    let reasons: Vec<&str> = violations.iter().map(|v| v.reason.as_str()).collect();
    assert_eq!(violations.len(), 4, "{reasons:#?}");
    assert!(reasons[0].contains("no such route"));
    assert!(reasons[1].contains("`remove_source_brach`"));
    assert!(reasons[2].contains("token is sent in the URL"));
    assert!(reasons[3].contains("not JSON"));
}
