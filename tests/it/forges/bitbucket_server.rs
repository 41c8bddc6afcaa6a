//! What Bitbucket Data Center does its own way, end to end (the real binary against the local
//! Bitbucket of `support::bitbucket_server`, in the worlds of `forges.rs`): lists paged by
//! `nextPageStart`, an update refused for a stale `version` read again and made, a `429`
//! waited out or reported, token and repository problems named in Bitbucket's words, and the
//! token's user read from `X-AUSERNAME` or, behind a proxy that drops it, from `forge.login`.

use crate::forges::{Hub, Kind, World, BITBUCKET_DC_PROJECT, BITBUCKET_DC_REPO, TOKEN};
use crate::support;

use serde_json::json;
use support::bitbucket_server::{BitbucketDcServer, Fault, Permission};
use support::output_text as text;

fn bitbucket(w: &World) -> &BitbucketDcServer {
    match &w.hub {
        Hub::BitbucketServer(bb) => bb,
        _ => unreachable!("a Bitbucket world"),
    }
}

/// `ACME/gitops`, as tagpin names the repository.
fn full_name() -> String {
    format!("{BITBUCKET_DC_PROJECT}/{BITBUCKET_DC_REPO}")
}

/// People opened a dozen pull requests from tagpin's branch into release branches after
/// tagpin's own, and Bitbucket answers five a page (`page.max.pullrequests`): tagpin's, the
/// least recently updated, is on the last page. It is found there by asking
/// `start=nextPageStart` and updated, not opened again (a reader of one page would open a
/// second one and meet Bitbucket's `409`).
#[tokio::test]
async fn bitbucket_server_tagpins_pull_request_on_a_later_page_is_found_and_updated() {
    let w = World::new(Kind::BitbucketServer).await;
    let bb = bitbucket(&w);
    let first = w.sync().await;
    assert_eq!(first.status.code(), Some(0), "{}", text(&first));
    let main = w.repo.head("main").unwrap();
    for n in 0..12 {
        let release = format!("release/{n}");
        w.repo.reset_branch(&release, &main);
        bb.open_pull_as(
            "reviewer",
            "tagpin/main",
            &release,
            &format!("Backport {n}"),
        );
    }
    bb.set_page_max(5);

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
    assert_eq!(changes.len(), 13, "none opened again: {changes:?}");
    assert!(changes[0].body.contains(&moved.manifest[..19]));
    let starts: Vec<String> = bb
        .requests()
        .iter()
        .filter(|r| r.method == "GET" && r.path.ends_with("/pull-requests"))
        .filter_map(|r| r.query.clone())
        .filter(|q| q.contains("direction=OUTGOING"))
        .collect();
    assert!(
        starts.iter().any(|q| q.contains("start=5"))
            && starts.iter().any(|q| q.contains("start=10")),
        "the later pages were read: {starts:?}"
    );
    assert!(bb.requests().iter().all(|r| r.status != 409));
    w.hub.assert_no_violations();
}

/// A person edits tagpin's pull request between tagpin's read and its write: Bitbucket refuses
/// the update for its stale `version` (`409`). tagpin reads the pull request again and makes
/// the update with the new version, in the same pass.
#[tokio::test]
async fn bitbucket_server_an_update_refused_for_a_stale_version_is_read_again_and_made() {
    let w = World::new(Kind::BitbucketServer).await;
    let bb = bitbucket(&w);
    assert_eq!(w.sync().await.status.code(), Some(0));
    bb.edit_between_read_and_write();
    let moved = w
        .registry
        .push_image("acme/web", "1.0", "web-1-rebuilt")
        .await;

    let out = w.sync().await;

    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains("updated pull request #1 from tagpin/main: "),
        "{}",
        text(&out)
    );
    let puts: Vec<u16> = bb
        .requests()
        .iter()
        .filter(|r| r.method == "PUT" && r.path.ends_with("/pull-requests/1"))
        .map(|r| r.status)
        .collect();
    assert_eq!(puts, [409, 200], "{puts:?}");
    let changes = w.hub.changes();
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert!(changes[0].body.contains(&moved.manifest[..19]));
    w.hub.assert_no_violations();
}

/// A `429` of Data Center's rate limiting with `Retry-After` is waited out; one asking longer
/// than tagpin waits is reported with its wait, and nothing is written.
#[tokio::test]
async fn bitbucket_server_a_rate_limit_is_waited_out_or_reported_with_its_wait() {
    let w = World::new(Kind::BitbucketServer).await;
    let bb = bitbucket(&w);
    bb.inject(Fault::rate_limited("GET", "/pull-requests", 3600));
    let refused = w.sync().await;
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    assert!(
        text(&refused).contains("rate limited; Bitbucket asks to wait 3600s"),
        "{}",
        text(&refused)
    );
    assert!(w.hub.changes().is_empty());
    assert!(bb.requests().iter().all(|r| r.method == "GET"));

    bb.inject(Fault::rate_limited("GET", "/pull-requests", 1).times(2));
    let waited = w.sync().await;
    assert_eq!(waited.status.code(), Some(0), "{}", text(&waited));
    assert_eq!(w.hub.changes().len(), 1);
    let lists: Vec<u16> = bb
        .requests()
        .iter()
        .filter(|r| r.method == "GET" && r.path.ends_with("/pull-requests"))
        .map(|r| r.status)
        .collect();
    assert_eq!(lists[1..4], [429, 429, 200], "{lists:?}");
    w.hub.assert_no_violations();
}

/// An unknown token, a user the repository is hidden from, and a user who may only read it
/// are each told apart in Bitbucket's words, and the token is never shown.
#[tokio::test]
async fn bitbucket_server_token_and_repository_problems_are_named() {
    let w = World::new(Kind::BitbucketServer).await;
    let bb = bitbucket(&w);
    let out = w.tagpin_with_token("sync", &[], "bbdc-unknown-0000").await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("401 Unauthorized")
            && text(&out).contains("the token is not valid")
            && text(&out).contains("Bitbucket HTTP access token"),
        "{}",
        text(&out)
    );

    bb.add_token("bbdc-outsider-2222", "outsider");
    let out = w.tagpin_with_token("sync", &[], "bbdc-outsider-2222").await;
    assert_ne!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains("404 Not Found")
            && text(&out).contains(&format!("{} is not at {}", full_name(), bb.api_url())),
        "{}",
        text(&out)
    );

    bb.add_token("bbdc-reader-3333", "reader");
    bb.grant("reader", Permission::Read);
    let out = w.tagpin_with_token("sync", &[], "bbdc-reader-3333").await;
    assert_ne!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains("403 Forbidden")
            && text(&out).contains("needs the Repository write permission"),
        "{}",
        text(&out)
    );
    assert!(!text(&out).contains(TOKEN));
    assert!(w.hub.changes().is_empty());
    w.hub.assert_no_violations();
}

/// Behind a proxy that drops Bitbucket's `X-AUSERNAME` header, tagpin cannot tell whose token
/// it holds: it says so and that `forge.login` stands in; with `forge.login` set, `verify`
/// posts its signed status and one comment, found again as tagpin's own on the next run.
#[tokio::test]
async fn bitbucket_server_without_its_user_header_forge_login_names_the_tokens_user() {
    let w = World::new(Kind::BitbucketServer).await;
    let bb = bitbucket(&w);
    assert_eq!(w.sync().await.status.code(), Some(0));
    bb.drop_user_header();
    let verify = w.tagpin_with_token("verify", &["--pr", "1"], TOKEN).await;
    assert!(
        text(&verify).contains("no X-AUSERNAME header") && text(&verify).contains("forge.login"),
        "{}",
        text(&verify)
    );

    let config = std::fs::read_to_string(w.config()).unwrap().replace(
        "token_env: TAGPIN_FORGE_TOKEN}",
        "token_env: TAGPIN_FORGE_TOKEN, login: tagpin-bot}",
    );
    w.write_config(&config);
    for _ in 0..2 {
        let verify = w.tagpin_with_token("verify", &["--pr", "1"], TOKEN).await;
        assert!(
            !text(&verify).contains("X-AUSERNAME") && !text(&verify).contains("cannot"),
            "{}",
            text(&verify)
        );
    }
    let comments = bb.comments(1);
    assert_eq!(comments.len(), 1, "one verdict comment: {comments:?}");
    let head = w.repo.head("tagpin/main").unwrap();
    let statuses = bb.statuses(&head);
    assert!(
        statuses
            .iter()
            .any(|s| s.key == "tagpin/converged" && !s.build_number.is_empty()),
        "{statuses:?}"
    );
    w.hub.assert_no_violations();
}

/// A person opened a pull request from tagpin's branch after tagpin listed: Bitbucket answers
/// `409` (`DuplicatePullRequestException`) to tagpin's, and that one is adopted in the same
/// pass with tagpin's title and description; no second one is opened.
#[tokio::test]
async fn bitbucket_server_a_pull_request_opened_meanwhile_is_adopted_on_409() {
    let w = World::new(Kind::BitbucketServer).await;
    let bb = bitbucket(&w);
    bb.inject(Fault::new("POST", "/pull-requests", 502));
    assert_eq!(w.sync().await.status.code(), Some(1));
    bb.open_pull_as("reviewer", "tagpin/main", "main", "WIP");
    bb.inject(
        Fault::new("GET", "/pull-requests", 200).json_body(
            json!({"size": 0, "limit": 25, "isLastPage": true, "start": 0, "values": []}),
        ),
    );

    let out = w.sync().await;

    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let changes = w.hub.changes();
    assert_eq!(changes.len(), 1, "adopted, not doubled: {changes:?}");
    assert_eq!(changes[0].title, "Pin 1 image(s) to digests");
    assert!(changes[0].body.contains("<!-- tagpin-plan"));
    assert!(bb
        .requests()
        .iter()
        .any(|r| r.method == "POST" && r.path.ends_with("/pull-requests") && r.status == 409));
    w.hub.assert_no_violations();
}

/// The verdict comment was changed elsewhere between tagpin's read and its edit (another
/// replica with the same token): Bitbucket refuses the edit for its stale `version` (`409`);
/// tagpin reads the comment again and edits it, and there is still one comment.
#[tokio::test]
async fn bitbucket_server_a_verdict_comment_edit_refused_for_its_version_is_read_again_and_made() {
    let w = World::new(Kind::BitbucketServer).await;
    let bb = bitbucket(&w);
    assert_eq!(w.sync().await.status.code(), Some(0));
    w.tagpin_with_token("verify", &["--pr", "1"], TOKEN).await;
    let comments = bb.comments(1);
    assert_eq!(comments.len(), 1, "{comments:?}");
    let verdict = comments[0].text.clone();
    let older = format!(
        "{}\nan older verdict",
        tagpin::verify::judge::report::COMMENT_MARKER
    );
    bb.rewrite_comment(comments[0].id, &older);
    bb.inject(Fault::new("PUT", "/comments/", 409));

    let out = w.tagpin_with_token("verify", &["--pr", "1"], TOKEN).await;

    assert!(!text(&out).contains("409"), "{}", text(&out));
    let puts: Vec<u16> = bb
        .requests()
        .iter()
        .filter(|r| r.method == "PUT" && r.path.contains("/comments/"))
        .map(|r| r.status)
        .collect();
    assert_eq!(puts, [409, 200], "{puts:?}");
    let comments = bb.comments(1);
    assert_eq!(comments.len(), 1, "{comments:?}");
    assert_eq!(comments[0].text, verdict);
    w.hub.assert_no_violations();
}
