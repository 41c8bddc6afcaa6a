//! The operator with `spec.forge.kind: bitbucket`: a `PinnedRepository` whose repository lives
//! on Bitbucket Cloud opens its pull request there through the local Bitbucket of
//! `support::bitbucket`, and its status and Events name it as Bitbucket's users do,
//! `pull request #N`.

use crate::operator::{announced, cluster, condition, pinned_repository, spec, Operator, NS};
use crate::support;
use crate::support::eventually;

use serde_json::json;
use support::bitbucket::BitbucketCloudServer;
use support::git::BareRepo;
use support::kube::TAGPIN_SECRET;
use support::manifests::deployment;
use support::registry::{Mode, TestRegistry};

#[tokio::test(flavor = "multi_thread")]
async fn a_bitbucket_object_opens_its_pull_request_on_bitbucket() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    registry.push_image("acme/web", "1.0", "one").await;
    let kube = cluster().await;
    let repo = BareRepo::create(&[(
        "apps/web.yaml",
        &deployment("web", &format!("{host}/acme/web:1.0")),
    )]);
    let bitbucket =
        BitbucketCloudServer::start("bb-token", "tagpin-bot", "acme", "gitops", repo.path()).await;
    kube.apply(support::kube::secret(
        NS,
        "forge",
        &[TAGPIN_SECRET],
        &[("BITBUCKET_TOKEN", "bb-token")],
    ));
    let mut proposed = spec(&repo.file_url(), &host);
    proposed["mode"] = json!("pull-request");
    proposed["secret_ref"] = json!({"name": "forge"});
    proposed["forge"] = json!({"kind": "bitbucket", "api_url": bitbucket.api_url(),
                               "workspace": "acme", "repo": "gitops",
                               "token_env": "BITBUCKET_TOKEN"});
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
    let pulls = bitbucket.pulls("acme/gitops");
    assert_eq!(pulls.len(), 1, "{pulls:?}");
    assert!(pulls[0].description.contains("<!-- tagpin-plan"));
    bitbucket.assert_no_violations();
}

/// An app password in the operator: `forge.username_env` names a key of the object's Secret,
/// read with the token, never the controller's own environment (which is not a tenant's to
/// name): the pull request is opened with HTTP Basic.
#[tokio::test(flavor = "multi_thread")]
async fn a_bitbucket_app_password_takes_its_username_from_the_secret() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    registry.push_image("acme/web", "1.0", "one").await;
    let kube = cluster().await;
    let repo = BareRepo::create(&[(
        "apps/web.yaml",
        &deployment("web", &format!("{host}/acme/web:1.0")),
    )]);
    let bitbucket =
        BitbucketCloudServer::start("bb-token", "tagpin-bot", "acme", "gitops", repo.path()).await;
    bitbucket.add_credential(
        "bb-app-password",
        "tagpin-bot",
        support::bitbucket::Credential::AppPassword {
            username: "tagpin-login".into(),
        },
        support::bitbucket::Scope::Write,
    );
    kube.apply(support::kube::secret(
        NS,
        "forge",
        &[TAGPIN_SECRET],
        &[
            ("BITBUCKET_TOKEN", "bb-app-password"),
            ("BITBUCKET_USERNAME", "tagpin-login"),
        ],
    ));
    let mut proposed = spec(&repo.file_url(), &host);
    proposed["mode"] = json!("pull-request");
    proposed["secret_ref"] = json!({"name": "forge"});
    proposed["forge"] = json!({"kind": "bitbucket", "api_url": bitbucket.api_url(),
                               "workspace": "acme", "repo": "gitops",
                               "token_env": "BITBUCKET_TOKEN",
                               "username_env": "BITBUCKET_USERNAME"});
    kube.apply(pinned_repository("web", json!({}), proposed));
    let dir = tempfile::tempdir().unwrap();
    let operator = Operator::start(dir.path(), &kube, "op", &[]).await;
    eventually("the pull request is open", || {
        kube.get("PinnedRepository", NS, "web")
            .is_some_and(|o| o["status"]["pullRequest"]["number"] == 1)
    })
    .await;
    operator.stop().await;
    assert_eq!(bitbucket.pulls("acme/gitops").len(), 1);
    let writes: Vec<_> = bitbucket
        .requests()
        .into_iter()
        .filter(|r| r.method != "GET")
        .collect();
    assert!(
        !writes.is_empty()
            && writes
                .iter()
                .all(|r| r.user.as_deref() == Some("tagpin-bot")),
        "{writes:?}"
    );
    bitbucket.assert_no_violations();
}
