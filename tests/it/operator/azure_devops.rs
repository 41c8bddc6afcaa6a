//! The operator with `spec.forge.kind: azure-devops`: a `PinnedRepository` whose repository
//! lives in Azure Repos opens its pull request there through the local Azure DevOps of
//! `support::azure_devops`, and its status and Events name it as Azure DevOps's users do,
//! `pull request !N`.

use crate::operator::{announced, cluster, condition, pinned_repository, spec, Operator, NS};
use crate::support;
use crate::support::eventually;

use serde_json::json;
use support::azure_devops::AzureDevOpsServer;
use support::git::BareRepo;
use support::kube::TAGPIN_SECRET;
use support::manifests::deployment;
use support::registry::{Mode, TestRegistry};

#[tokio::test(flavor = "multi_thread")]
async fn an_azure_devops_object_opens_its_pull_request_on_azure_devops() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    registry.push_image("acme/web", "1.0", "one").await;
    let kube = cluster().await;
    let repo = BareRepo::create(&[(
        "apps/web.yaml",
        &deployment("web", &format!("{host}/acme/web:1.0")),
    )]);
    let ado = AzureDevOpsServer::start(
        "ado-token",
        "tagpin-bot",
        "acme",
        "platform",
        "gitops",
        repo.path(),
    )
    .await;
    kube.apply(support::kube::secret(
        NS,
        "forge",
        &[TAGPIN_SECRET],
        &[("AZURE_DEVOPS_TOKEN", "ado-token")],
    ));
    let mut proposed = spec(&repo.file_url(), &host);
    proposed["mode"] = json!("pull-request");
    proposed["secret_ref"] = json!({"name": "forge"});
    proposed["forge"] = json!({"kind": "azure-devops", "api_url": ado.api_url(),
                               "project": "platform", "repo": "gitops",
                               "token_env": "AZURE_DEVOPS_TOKEN"});
    kube.apply(pinned_repository("web", json!({}), proposed));
    let dir = tempfile::tempdir().unwrap();
    let operator = Operator::start(dir.path(), &kube, "op", &[]).await;
    eventually("the pull request is open", || {
        kube.get("PinnedRepository", NS, "web")
            .is_some_and(|o| o["status"]["pullRequest"]["number"] == 1)
    })
    .await;
    let object = kube.get("PinnedRepository", NS, "web").unwrap();
    assert_eq!(object["status"]["verdict"]["source"], "pull request !1");
    let message = condition(&kube, "web", "Ready").unwrap()["message"].clone();
    assert!(
        message
            .as_str()
            .unwrap()
            .starts_with("pins proposed in pull request !1 for main"),
        "{message}"
    );
    eventually("the opening is announced in Azure DevOps's words", || {
        announced(&kube, "web").iter().any(|(reason, note, _)| {
            reason == "PullRequestOpened"
                && note.starts_with("opened pull request !1 from tagpin/main")
        })
    })
    .await;
    operator.stop().await;
    let pulls = ado.pulls();
    assert_eq!(pulls.len(), 1, "{pulls:?}");
    assert!(pulls[0].description.contains("<!-- tagpin-plan"));
    ado.assert_no_violations();
}
