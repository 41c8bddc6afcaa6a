//! The operator's dashboard shared by two teams (`--ui-auth token`): each viewer's bearer token
//! is reviewed with a TokenReview and each namespace with a SubjectAccessReview, against the
//! local Kubernetes API server, which answers both as the real one does. A viewer of team-a
//! never learns team-b's repository, not even its name.

use crate::operator::{cluster, spec, Operator};
use crate::support;

use serde_json::{json, Value};
use support::git::BareRepo;
use support::kube::{Grant, KubeServer};
use support::manifests::deployment;
use support::registry::{free_port, Mode, TestRegistry};

/// Grants the operator what `deploy/operator/dashboard-rbac.yaml` gives it.
fn install_dashboard_rbac(kube: &KubeServer) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy/operator/dashboard-rbac.yaml");
    let text = std::fs::read_to_string(path).unwrap();
    for document in serde_yaml::Deserializer::from_str(&text) {
        let object: Value = serde::Deserialize::deserialize(document).unwrap();
        if object["kind"] != "ClusterRole" {
            continue;
        }
        for rule in object["rules"].as_array().unwrap() {
            let strings = |v: &Value| -> Vec<String> {
                v.as_array()
                    .unwrap()
                    .iter()
                    .map(|s| s.as_str().unwrap().to_string())
                    .collect()
            };
            let (verbs, resources) = (strings(&rule["verbs"]), strings(&rule["resources"]));
            assert_eq!(verbs, ["create"], "reviews are created, nothing else");
            let verbs: Vec<&str> = verbs.iter().map(String::as_str).collect();
            let resources: Vec<&str> = resources.iter().map(String::as_str).collect();
            kube.grant(Grant::cluster(&verbs, &resources));
        }
    }
}

fn object_in(namespace: &str, name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "tagpin.dev/v1alpha1",
        "kind": "PinnedRepository",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    })
}

async fn repositories(ui: &str, token: Option<&str>) -> (u16, String) {
    let mut request = reqwest::Client::new().get(format!("{ui}/api/repositories"));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let answer = request.send().await.unwrap();
    (answer.status().as_u16(), answer.text().await.unwrap())
}

/// Two teams' objects (team-a's `storefront`, team-b's `ledger-secret-project`), the operator
/// allowed to review, alice (token `token-alice`, group `team-a-devs`) bound in team-a by
/// name, bob (`token-bob`) through his group `team-b-devs` in team-b.
struct Teams {
    _registry: TestRegistry,
    _repos: (BareRepo, BareRepo),
    kube: KubeServer,
}

async fn two_teams() -> Teams {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    registry.push_image("acme/web", "1.0", "one").await;
    let repo_a = BareRepo::create(&[(
        "apps/web.yaml",
        &deployment("web", &format!("{host}/acme/web:1.0")),
    )]);
    let repo_b = BareRepo::create(&[(
        "apps/web.yaml",
        &deployment("web", &format!("{host}/acme/web:1.0")),
    )]);
    let kube = cluster().await;
    install_dashboard_rbac(&kube);
    kube.apply(object_in(
        "team-a",
        "storefront",
        spec(&repo_a.file_url(), &host),
    ));
    kube.apply(object_in(
        "team-b",
        "ledger-secret-project",
        spec(&repo_b.file_url(), &host),
    ));
    // The schema admits it, the validator does not: it stalls before its cycle.
    let mut broken = spec(&repo_a.file_url(), &host);
    broken["paths"] = json!(["../outside"]);
    kube.apply(object_in("team-a", "broken", broken));
    // alice is bound in team-a by name; bob through a group of team-b.
    kube.add_user_token("token-alice", "alice", &["team-a-devs"]);
    kube.add_user_token("token-bob", "bob", &["team-b-devs"]);
    kube.grant_to(
        "alice",
        Grant::namespaced("team-a", &["get"], &["pinnedrepositories"]),
    );
    kube.grant_to(
        "team-b-devs",
        Grant::namespaced("team-b", &["get", "list"], &["pinnedrepositories"]),
    );

    Teams {
        _registry: registry,
        _repos: (repo_a, repo_b),
        kube,
    }
}

#[tokio::test]
async fn each_team_s_token_shows_its_own_repository_and_never_the_other_s_name() {
    let Teams { kube, .. } = two_teams().await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let operator = Operator::start(
        dir.path(),
        &kube,
        "op",
        &["--ui-listen", &listen, "--ui-auth", "token"],
    )
    .await;
    let ui = format!("http://127.0.0.1:{port}");
    support::eventually_async("both on the board", || async {
        let (_, alice) = repositories(&ui, Some("token-alice")).await;
        let (_, bob) = repositories(&ui, Some("token-bob")).await;
        alice.contains("team-a/storefront")
            && alice.contains("team-a/broken")
            && bob.contains("team-b/ledger-secret-project")
    })
    .await;

    let (status, alice) = repositories(&ui, Some("token-alice")).await;
    assert_eq!(status, 200, "{alice}");
    // An object stalled before its cycle could run is listed too, not ready, with why.
    let listed: Value = serde_json::from_str(&alice).unwrap();
    let broken = listed["repositories"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["key"] == "team-a/broken")
        .unwrap_or_else(|| panic!("{listed:#}"));
    assert_eq!(broken["ready"]["ready"], false, "{broken:#}");
    assert!(
        !alice.contains("ledger-secret-project") && !alice.contains("team-b"),
        "{alice}"
    );
    let (_, bob) = repositories(&ui, Some("token-bob")).await;
    assert!(
        !bob.contains("storefront") && !bob.contains("team-a"),
        "{bob}"
    );
    // Nor by the repository's page: the same 404 as for one that does not exist.
    let listed: Value = serde_json::from_str(&bob).unwrap();
    let bobs = listed["repositories"][0]["id"].as_str().unwrap();
    let answer = reqwest::Client::new()
        .get(format!("{ui}/api/repositories/{bobs}"))
        .bearer_auth("token-alice")
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 404);
    assert!(!answer.text().await.unwrap().contains("ledger"));
    // No token, or one the cluster does not accept: nothing at all.
    for token in [None, Some("token-mallory")] {
        let (status, body) = repositories(&ui, token).await;
        assert_eq!(status, 401, "{body}");
        assert!(
            !body.contains("storefront") && !body.contains("ledger"),
            "{body}"
        );
    }
    // Each review went to the API server as the real one takes it.
    let reviews: Vec<_> = kube
        .requests()
        .into_iter()
        .filter(|r| r.path.contains("reviews"))
        .collect();
    assert!(reviews
        .iter()
        .any(|r| r.path.ends_with("/tokenreviews") && r.status == 201));
    assert!(reviews
        .iter()
        .any(|r| r.path.ends_with("/subjectaccessreviews") && r.status == 201));
    assert!(reviews.iter().all(|r| r.status == 201), "{reviews:?}");
    operator.stop().await;
}

async fn as_proxied(ui: &str, user: &str, groups: &str) -> (u16, String) {
    let answer = reqwest::Client::new()
        .get(format!("{ui}/api/repositories"))
        .header("X-Auth-Request-User", user)
        .header("X-Auth-Request-Groups", groups)
        .send()
        .await
        .unwrap();
    (answer.status().as_u16(), answer.text().await.unwrap())
}

#[tokio::test]
async fn behind_a_proxy_its_user_and_group_headers_are_checked_the_same_way() {
    let Teams { kube, .. } = two_teams().await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let args = [
        "--ui-listen",
        &listen,
        "--ui-auth",
        "proxy",
        "--ui-user-header",
        "X-Auth-Request-User",
        "--ui-groups-header",
        "X-Auth-Request-Groups",
    ];
    let operator = Operator::start(dir.path(), &kube, "op", &args).await;
    let ui = format!("http://127.0.0.1:{port}");
    support::eventually_async("both on the board", || async {
        let (_, alice) = as_proxied(&ui, "alice", "").await;
        let (_, carol) = as_proxied(&ui, "carol", "team-b-devs, others").await;
        alice.contains("team-a/storefront") && carol.contains("team-b/ledger-secret-project")
    })
    .await;
    let (_, alice) = as_proxied(&ui, "alice", "").await;
    assert!(!alice.contains("ledger"), "{alice}");
    // carol is in team-b-devs: team-b only.
    let (_, carol) = as_proxied(&ui, "carol", "team-b-devs, others").await;
    assert!(!carol.contains("storefront"), "{carol}");
    // Someone bound nowhere sees an empty list; no user header at all is refused.
    let (status, nobody) = as_proxied(&ui, "dave", "").await;
    assert_eq!(
        (
            status,
            nobody.contains("storefront") || nobody.contains("ledger")
        ),
        (200, false)
    );
    let answer = reqwest::get(format!("{ui}/api/repositories"))
        .await
        .unwrap();
    assert_eq!(answer.status(), 401);
    operator.stop().await;
}
