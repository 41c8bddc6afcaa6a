//! What Gitea does its own way, end to end (the real binary against the local Gitea of
//! `support::gitea`, in the worlds of `forges.rs`): pages numbered on `api_url` rather than
//! Gitea's `Link` addresses, which are on its `ROOT_URL`; a pull request opened meanwhile
//! adopted on `409`; a `429` waited out or reported; token and repository problems named.

use crate::forges::{Hub, Kind, World, GITEA_REPO, TOKEN};
use crate::support;

use serde_json::json;
use support::gitea::{Fault, GiteaServer, Scope, MAX_RESPONSE_ITEMS};
use support::output_text as text;

fn gitea(w: &World) -> &GiteaServer {
    match &w.hub {
        Hub::Gitea(gt) => gt,
        _ => unreachable!("a Gitea world"),
    }
}

/// tagpin's pull request is on the second page of Gitea's list (people opened more than a
/// page of pull requests after it): it is found there and updated, not opened again. Gitea's
/// `Link` points at its `ROOT_URL` (`git.example.com`, not this server): a client following
/// that address, or reading one page only, fails here.
#[tokio::test]
async fn gitea_tagpins_pull_request_on_a_later_page_is_found_and_updated() {
    let w = World::new(Kind::Gitea).await;
    let gt = gitea(&w);
    let first = w.sync().await;
    assert_eq!(first.status.code(), Some(0), "{}", text(&first));
    let main = w.repo.head("main").unwrap();
    for n in 0..MAX_RESPONSE_ITEMS + 5 {
        let branch = format!("feature/{n}");
        w.repo.reset_branch(&branch, &main);
        gt.open_pull_as(
            "reviewer",
            GITEA_REPO,
            &branch,
            "main",
            &format!("Feature {n}"),
        );
    }

    let moved = w
        .registry
        .push_image("acme/web", "1.0", "web-1-rebuilt")
        .await;
    let again = w.sync().await;

    assert_eq!(again.status.code(), Some(0), "{}", text(&again));
    assert!(
        text(&again).contains("updated pull request #1 from tagpin/main: "),
        "{}",
        text(&again)
    );
    let changes = w.hub.changes();
    assert_eq!(changes.len(), MAX_RESPONSE_ITEMS + 6, "none opened again");
    assert!(changes[0].body.contains(&moved.manifest[..19]));
    let pages: Vec<String> = gt
        .requests()
        .iter()
        .filter(|r| r.method == "GET" && r.path.ends_with("/pulls"))
        .filter_map(|r| r.query.clone())
        .collect();
    assert!(
        pages.iter().any(|q| q.contains("page=2")),
        "the second page was read: {pages:?}"
    );
    assert!(gt.requests().iter().all(|r| r.status != 409));
    w.hub.assert_no_violations();
}

/// A person opened a pull request from tagpin's branch after tagpin listed: Gitea answers
/// `409` to tagpin's, and that one is adopted in the same pass with tagpin's title, body and
/// labels; no second one is opened.
#[tokio::test]
async fn gitea_a_pull_request_opened_meanwhile_is_adopted_on_409() {
    let w = World::new(Kind::Gitea).await;
    let gt = gitea(&w);
    gt.inject(Fault::new("POST", "/pulls", 502));
    assert_eq!(w.sync().await.status.code(), Some(1));
    gt.open_pull_as("reviewer", GITEA_REPO, "tagpin/main", "main", "WIP");
    gt.inject(Fault::new("GET", "/pulls", 200).json_body(json!([])));

    let out = w.sync().await;

    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let changes = w.hub.changes();
    assert_eq!(changes.len(), 1, "adopted, not doubled: {changes:?}");
    assert_eq!(changes[0].title, "Pin 1 image(s) to digests");
    assert!(changes[0].body.contains("<!-- tagpin-plan"));
    assert!(changes[0].labels.contains(&"tagpin".to_string()));
    assert!(gt
        .requests()
        .iter()
        .any(|r| r.method == "POST" && r.path.ends_with("/pulls") && r.status == 409));
    w.hub.assert_no_violations();
}

/// A `429` with `Retry-After` (Codeberg's proxy, not Gitea itself) is waited out; one asking
/// longer than tagpin waits is reported with its wait, and nothing is written.
#[tokio::test]
async fn gitea_a_rate_limit_is_waited_out_or_reported_with_its_wait() {
    let w = World::new(Kind::Gitea).await;
    let gt = gitea(&w);
    gt.inject(Fault::rate_limited("GET", "/pulls", 3600));
    let refused = w.sync().await;
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    assert!(
        text(&refused).contains("rate limited; Gitea asks to wait 3600s"),
        "{}",
        text(&refused)
    );
    assert!(w.hub.changes().is_empty());

    gt.inject(Fault::rate_limited("GET", "/pulls", 1).times(2));
    let waited = w.sync().await;
    assert_eq!(waited.status.code(), Some(0), "{}", text(&waited));
    assert_eq!(w.hub.changes().len(), 1);
    w.hub.assert_no_violations();
}

/// An unknown token and a repository the token cannot see are told apart, and the token is
/// never shown.
#[tokio::test]
async fn gitea_token_and_repository_problems_are_named() {
    let w = World::new(Kind::Gitea).await;
    let gt = gitea(&w);
    let out = w.tagpin_with_token("sync", &[], "gitea-unknown-0000").await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("401 Unauthorized") && text(&out).contains("the token is not valid"),
        "{}",
        text(&out)
    );

    gt.add_token("gitea-outsider-2222", "outsider", Scope::Write);
    let out = w
        .tagpin_with_token("sync", &[], "gitea-outsider-2222")
        .await;
    assert_ne!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains("404 Not Found")
            && text(&out).contains(&format!("{GITEA_REPO} is not at {}", gt.api_url())),
        "{}",
        text(&out)
    );
    assert!(!text(&out).contains(TOKEN));
    assert!(w.hub.changes().is_empty());
    w.hub.assert_no_violations();
}

/// A token scoped to the repository only (`write:repository,write:issue`, as Codeberg grants)
/// cannot read `GET /user`: tagpin says which scope is missing and that `forge.login` stands
/// in for it; with `forge.login` set, the same token opens the pull request and verifies it
/// with one comment, found again as tagpin's own.
#[tokio::test]
async fn gitea_a_repository_scoped_token_works_with_forge_login() {
    let w = World::new(Kind::Gitea).await;
    let gt = gitea(&w);
    gt.add_token(
        "gitea-repo-only",
        crate::forges::BOT,
        Scope::WriteRepositoryOnly,
    );
    let out = w.tagpin_with_token("sync", &[], "gitea-repo-only").await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let verify = w
        .tagpin_with_token("verify", &["--pr", "1"], "gitea-repo-only")
        .await;
    assert!(
        text(&verify).contains("the token lacks the read:user scope")
            && text(&verify).contains("forge.login"),
        "{}",
        text(&verify)
    );

    let config = std::fs::read_to_string(w.config()).unwrap().replace(
        "token_env: TAGPIN_FORGE_TOKEN}",
        "token_env: TAGPIN_FORGE_TOKEN, login: tagpin-bot}",
    );
    w.write_config(&config);
    for _ in 0..2 {
        let verify = w
            .tagpin_with_token("verify", &["--pr", "1"], "gitea-repo-only")
            .await;
        assert!(
            !text(&verify).contains("read:user") && !text(&verify).contains("cannot"),
            "{}",
            text(&verify)
        );
    }
    let comments = gt.comments(GITEA_REPO, 1);
    assert_eq!(comments.len(), 1, "one verdict comment: {comments:?}");
    w.hub.assert_no_violations();
}
