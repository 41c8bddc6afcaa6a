//! What Bitbucket Cloud does its own way, end to end (the real binary against the local
//! Bitbucket of `support::bitbucket`, in the worlds of `forges.rs`): pages followed by their
//! `next` address only on `api_url`; a `429` without `Retry-After` reported with the wait
//! tagpin infers, one with it waited out; token and repository problems named; short commit
//! hashes resolved; an access token, which cannot read `GET /user`, working with
//! `forge.login`; an app password sent as HTTP Basic with `forge.username_env`.

use crate::forges::{Hub, Kind, World, BITBUCKET_REPO, BOT, TOKEN};
use crate::support;

use support::bitbucket::{BitbucketCloudServer, Credential, Scope, MAX_PULL_PAGELEN};
use support::output_text as text;

fn bitbucket(w: &World) -> &BitbucketCloudServer {
    match &w.hub {
        Hub::Bitbucket(bb) => bb,
        _ => unreachable!("a Bitbucket world"),
    }
}

/// tagpin's open pull request, then more than a page of pull requests people opened from
/// the same branch (one at a time) and declined: most recently updated first, tagpin's is on the second page.
/// Returns the number of pull requests.
async fn tagpins_on_the_second_page(w: &World) -> usize {
    let bb = bitbucket(w);
    let first = w.sync().await;
    assert_eq!(first.status.code(), Some(0), "{}", text(&first));
    for n in 0..MAX_PULL_PAGELEN + 5 {
        let id = bb.open_pull_as(
            "reviewer",
            BITBUCKET_REPO,
            "tagpin/main",
            "main",
            &format!("Try {n}"),
        );
        bb.decline_pull_as("reviewer", BITBUCKET_REPO, id);
    }
    MAX_PULL_PAGELEN + 6
}

/// tagpin's pull request is on the second page of the list for its branch: it is found by
/// following `next` and updated, not opened again (Bitbucket would refuse a second open one,
/// and a client reading one page would try).
#[tokio::test]
async fn bitbucket_tagpins_pull_request_on_a_later_page_is_found_and_updated() {
    let w = World::new(Kind::Bitbucket).await;
    let bb = bitbucket(&w);
    let count = tagpins_on_the_second_page(&w).await;
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
    assert_eq!(changes.len(), count, "none opened again");
    assert!(changes[0].body.contains(&moved.manifest[..19]));
    let second_page = bb
        .requests()
        .iter()
        .filter(|r| r.method == "GET" && r.path.ends_with("/pullrequests"))
        .any(|r| r.query.as_deref().is_some_and(|q| q.contains("page=2")));
    assert!(second_page, "the second page was read");
    w.hub.assert_no_violations();
}

/// A `next` address on another host (a proxy rewriting it, or a hostile one) is not followed:
/// the token would go there. The group fails, naming the host, and nothing is opened.
#[tokio::test]
async fn bitbucket_a_next_page_on_another_host_is_refused() {
    let w = World::new(Kind::Bitbucket).await;
    let bb = bitbucket(&w);
    tagpins_on_the_second_page(&w).await;
    bb.next_host("http://127.0.0.2:9");
    w.registry
        .push_image("acme/web", "1.0", "web-1-rebuilt")
        .await;
    let writes = w.hub.changes().iter().filter(|c| c.open).count();

    let out = w.sync().await;

    // The group's pull request could not be looked up: that group failed (1).
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("Bitbucket named its next page on http://127.0.0.2:9, not on")
            && text(&out).contains("not followed"),
        "{}",
        text(&out)
    );
    assert_eq!(w.hub.changes().iter().filter(|c| c.open).count(), writes);
    w.hub.assert_no_violations();
}

/// Bitbucket's `429` carries no `Retry-After` (its window rolls over an hour): tagpin reports
/// it with the hour it may have to wait, writing nothing; a `429` that does say when (a
/// proxy's) is waited out.
#[tokio::test]
async fn bitbucket_a_rate_limit_is_reported_with_the_window_or_waited_out() {
    let w = World::new(Kind::Bitbucket).await;
    let bb = bitbucket(&w);
    bb.inject(support::bitbucket::rate_limited("GET", "/pullrequests"));
    let refused = w.sync().await;
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    assert!(
        text(&refused).contains("rate limited; Bitbucket asks to wait 3600s"),
        "{}",
        text(&refused)
    );
    assert!(w.hub.changes().is_empty());

    bb.inject(
        support::bitbucket::rate_limited("GET", "/pullrequests")
            .header("Retry-After", "1")
            .times(2),
    );
    let waited = w.sync().await;
    assert_eq!(waited.status.code(), Some(0), "{}", text(&waited));
    assert_eq!(w.hub.changes().len(), 1);
    w.hub.assert_no_violations();
}

/// An unknown token and a repository hidden from the token are told apart, in Bitbucket's
/// terms, and the token is never shown.
#[tokio::test]
async fn bitbucket_token_and_repository_problems_are_named() {
    let w = World::new(Kind::Bitbucket).await;
    let bb = bitbucket(&w);
    let out = w.tagpin_with_token("sync", &[], "bb-unknown-0000").await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("401 Unauthorized") && text(&out).contains("the token is not valid"),
        "{}",
        text(&out)
    );

    bb.add_credential(
        "bb-outsider-2222",
        "outsider",
        Credential::ApiToken,
        Scope::Write,
    );
    let out = w.tagpin_with_token("sync", &[], "bb-outsider-2222").await;
    assert_ne!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains("404 Not Found")
            && text(&out).contains(&format!("{BITBUCKET_REPO} is not at {}", bb.api_url())),
        "{}",
        text(&out)
    );
    assert!(!text(&out).contains(TOKEN));
    assert!(w.hub.changes().is_empty());
    w.hub.assert_no_violations();
}

/// Bitbucket answers pull requests with 12-digit hashes: `verify --pr 1` of a merged one reads
/// the full merge commit (`GET /commit/{hash}`) and posts its verdict on it, which Bitbucket
/// takes only for a commit it has.
#[tokio::test]
async fn bitbucket_a_short_merge_commit_hash_is_resolved_for_the_verdict() {
    let w = World::new(Kind::Bitbucket).await;
    let bb = bitbucket(&w);
    assert_eq!(w.sync().await.status.code(), Some(0));
    let merged = bb.merge_pull_as("reviewer", BITBUCKET_REPO, 1);

    let out = w.tagpin_with_token("verify", &["--pr", "1"], TOKEN).await;

    assert_ne!(out.status.code(), Some(2), "{}", text(&out));
    assert!(!text(&out).contains("cannot"), "{}", text(&out));
    let resolved = bb
        .requests()
        .iter()
        .any(|r| r.method == "GET" && r.path.ends_with(&format!("/commit/{}", &merged[..12])));
    assert!(resolved, "the short hash was resolved");
    let on_merge = bb.statuses(BITBUCKET_REPO, &merged);
    assert!(
        on_merge.iter().any(|s| s.key == "tagpin/converged"),
        "{on_merge:?}"
    );
    w.hub.assert_no_violations();
}

/// A repository access token is no user: Bitbucket refuses it `GET /user`, and tagpin says
/// `forge.login` stands in; with the token's uuid there, it verifies and keeps one comment.
#[tokio::test]
async fn bitbucket_an_access_token_works_with_forge_login() {
    let w = World::new(Kind::Bitbucket).await;
    let bb = bitbucket(&w);
    bb.add_credential(
        "bb-access-token",
        BOT,
        Credential::AccessToken,
        Scope::Write,
    );
    let out = w.tagpin_with_token("sync", &[], "bb-access-token").await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let verify = w
        .tagpin_with_token("verify", &["--pr", "1"], "bb-access-token")
        .await;
    assert!(
        text(&verify).contains("access token, set forge.login"),
        "{}",
        text(&verify)
    );

    let uuid = bb.uuid(BOT);
    let config = std::fs::read_to_string(w.config()).unwrap().replace(
        "token_env: TAGPIN_FORGE_TOKEN}",
        &format!("token_env: TAGPIN_FORGE_TOKEN, login: '{uuid}'}}"),
    );
    w.write_config(&config);
    for _ in 0..2 {
        let verify = w
            .tagpin_with_token("verify", &["--pr", "1"], "bb-access-token")
            .await;
        assert!(
            !text(&verify).contains("forge.login") && !text(&verify).contains("cannot"),
            "{}",
            text(&verify)
        );
    }
    let comments = bb.comments(BITBUCKET_REPO, 1);
    assert_eq!(comments.len(), 1, "one verdict comment: {comments:?}");
    w.hub.assert_no_violations();
}

/// With `forge.username_env`, the token is an app password: sent with the username in HTTP
/// Basic, which Bitbucket takes for nothing else (Bearer with an app password is refused).
#[tokio::test]
async fn bitbucket_an_app_password_goes_as_basic_with_username_env() {
    let w = World::new(Kind::Bitbucket).await;
    let bb = bitbucket(&w);
    let username = "tagpin-bot-login";
    bb.add_credential(
        "bb-app-password",
        BOT,
        Credential::AppPassword {
            username: username.into(),
        },
        Scope::Write,
    );
    let config = std::fs::read_to_string(w.config()).unwrap().replace(
        "token_env: TAGPIN_FORGE_TOKEN}",
        "token_env: TAGPIN_FORGE_TOKEN, username_env: TAGPIN_BITBUCKET_USERNAME}",
    );
    w.write_config(&config);
    let run = |args: &[&str]| {
        let mut cmd = w.command(args, "bb-app-password");
        cmd.env("TAGPIN_BITBUCKET_USERNAME", username);
        cmd
    };

    let out = run(&["sync"]).output().await.unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = run(&["verify", "--pr", "1"]).output().await.unwrap();
    assert_ne!(out.status.code(), Some(2), "{}", text(&out));
    assert!(!text(&out).contains("bb-app-password"), "{}", text(&out));
    assert_eq!(w.hub.changes().len(), 1);
    assert!(bb.requests().iter().all(|r| r.user.as_deref() == Some(BOT)));

    let missing = w
        .command(&["sync"], "bb-app-password")
        .output()
        .await
        .unwrap();
    assert_eq!(missing.status.code(), Some(2), "{}", text(&missing));
    assert!(
        text(&missing)
            .contains("forge.username_env: environment variable TAGPIN_BITBUCKET_USERNAME is not set or empty"),
        "{}",
        text(&missing)
    );
    w.hub.assert_no_violations();
}
