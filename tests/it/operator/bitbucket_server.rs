//! The operator with `spec.forge.kind: bitbucket-server`: a `PinnedRepository` whose repository
//! lives on Bitbucket Data Center opens its pull request there through the local Bitbucket of
//! `support::bitbucket_server`, and its status and Events name it as Bitbucket's users do,
//! `pull request #N`.

use crate::operator::{announced, cluster, condition, pinned_repository, spec, Operator, NS};
use crate::support;
use crate::support::eventually;

use serde_json::json;
use support::bitbucket_server::BitbucketDcServer;
use support::git::BareRepo;
use support::kube::TAGPIN_SECRET;
use support::manifests::deployment;
use support::registry::{Mode, TestRegistry};

#[tokio::test(flavor = "multi_thread")]
async fn a_bitbucket_server_object_opens_its_pull_request_on_bitbucket() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    registry.push_image("acme/web", "1.0", "one").await;
    let kube = cluster().await;
    let repo = BareRepo::create(&[(
        "apps/web.yaml",
        &deployment("web", &format!("{host}/acme/web:1.0")),
    )]);
    let bitbucket =
        BitbucketDcServer::start("bbdc-token", "tagpin-bot", "ACME", "gitops", repo.path()).await;
    kube.apply(support::kube::secret(
        NS,
        "forge",
        &[TAGPIN_SECRET],
        &[("BITBUCKET_TOKEN", "bbdc-token")],
    ));
    let mut proposed = spec(&repo.file_url(), &host);
    proposed["mode"] = json!("pull-request");
    proposed["secret_ref"] = json!({"name": "forge"});
    proposed["forge"] = json!({"kind": "bitbucket-server", "api_url": bitbucket.api_url(),
                               "project": "ACME", "repo": "gitops", "token_env": "BITBUCKET_TOKEN"});
    kube.apply(pinned_repository("web", json!({}), proposed));
    let dir = tempfile::tempdir().unwrap();
    let operator = Operator::start(dir.path(), &kube, "op", &[]).await;
    eventually("the pull request is open", || {
        kube.get("PinnedRepository", NS, "web")
            .is_some_and(|o| o["status"]["pullRequest"]["number"] == 1)
    })
    .await;
    let object = kube.get("PinnedRepository", NS, "web").unwrap();
    assert_eq!(object["status"]["verdict"]["source"], "pull request #1");
    let message = condition(&kube, "web", "Ready").unwrap()["message"].clone();
    assert!(
        message
            .as_str()
            .unwrap()
            .starts_with("pins proposed in pull request #1 for main"),
        "{message}"
    );
    eventually("the opening is announced in pull request words", || {
        announced(&kube, "web").iter().any(|(reason, note, _)| {
            reason == "PullRequestOpened"
                && note.starts_with("opened pull request #1 from tagpin/main")
        })
    })
    .await;
    operator.stop().await;
    let pulls = bitbucket.pulls();
    assert_eq!(pulls.len(), 1, "{pulls:?}");
    assert!(pulls[0].description.contains("<!-- tagpin-plan"));
    assert_eq!(pulls[0].author, "tagpin-bot");
    bitbucket.assert_no_violations();
}
