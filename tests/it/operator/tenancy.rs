//! `tagpin operator` shared by several teams: each object's cluster is read as a ServiceAccount
//! of the object's own namespace (impersonated), so the team's RBAC, not the operator's,
//! decides what its status, Events and log say. Against the local Kubernetes API server, which
//! checks the operator's `impersonate` grant and gives the impersonated account only what a
//! test binds to it.

use crate::operator::{cluster, condition, pinned_repository, Operator, NS};
use crate::support;
use crate::support::eventually;

use serde_json::{json, Value};
use support::git::BareRepo;
use support::kube::{Grant, KubeServer, RecordedRequest};
use support::manifests::deployment_in;
use support::registry::{Mode, TestRegistry};
use support::workloads::LiveDeployment;

/// The other team's namespace.
const TEAM_B: &str = "team-b";

/// What team-b runs, which nobody in team-a may learn: its image, tag and digest.
const TEAM_B_IMAGE: &str = "registry.team-b.example/payments/ledger";
const TEAM_B_TAG: &str = "7.3.1-hotfix";
const TEAM_B_DIGEST_HEX: &str = "b7e1c0ffee5ecc0de5ecc0de5ecc0de5ecc0de5ecc0de5ecc0de5ecc0de5ecc0";

/// Everything the verifier reads (ClusterRole `tagpin-verifier`), as plurals.
const VERIFIER_READS: [&str; 12] = [
    "pods",
    "deployments",
    "statefulsets",
    "daemonsets",
    "replicasets",
    "jobs",
    "cronjobs",
    "deploymentconfigs",
    "applications",
    "kustomizations",
    "gitrepositories",
    "helmreleases",
];

/// The user the API server knows ServiceAccount `name` of team-a as.
fn team_a(name: &str) -> String {
    format!("system:serviceaccount:{NS}:{name}")
}

/// What `deploy/operator-multi-tenant/tenant/` gives a team: the verifier's reads, bound to
/// its ServiceAccount in its own namespace only.
fn reads_in_its_namespace(kube: &KubeServer, account: &str) {
    kube.grant_to(
        &team_a(account),
        Grant::namespaced(NS, &["get", "list", "watch"], &VERIFIER_READS),
    );
}

/// A commit-mode spec pinning `apps/` of `url` against the registry at `host`.
fn spec(url: &str, host: &str) -> Value {
    json!({
        "repository": {"url": url, "branch": "main"},
        "paths": ["apps"],
        "registries": {"insecure": [host]},
    })
}

/// `namespace/Deployment/name`, its container `app` running `image` (a tag) pinned to
/// `digest`, rolled out, its one pod on that digest.
fn runs_converged(kube: &KubeServer, namespace: &str, name: &str, image: &str, digest: &str) {
    let (repository, _tag) = image.rsplit_once(':').unwrap();
    let live = LiveDeployment::new(namespace, name).container("app", &format!("{image}@{digest}"));
    live.apply(kube);
    live.pod(&format!("{name}-1"))
        .running(kube, &[format!("{repository}@{digest}")]);
}

/// team-b's own `web`, running team-b's image.
fn team_b_runs_its_own_web(kube: &KubeServer) {
    let digest = format!("sha256:{TEAM_B_DIGEST_HEX}");
    runs_converged(
        kube,
        TEAM_B,
        "web",
        &format!("{TEAM_B_IMAGE}:{TEAM_B_TAG}"),
        &digest,
    );
}

/// Panics if `text` (`what`) names anything of what team-b runs.
fn assert_nothing_of_team_b(what: &str, text: &str) {
    for secret in [TEAM_B_IMAGE, TEAM_B_TAG, TEAM_B_DIGEST_HEX, "payments"] {
        assert!(
            !text.contains(secret),
            "{what} shows team-b's {secret:?}:\n{text}"
        );
    }
}

/// The reads of workloads and pods the server saw in `namespace`.
fn workload_reads(kube: &KubeServer, namespace: &str) -> Vec<RecordedRequest> {
    let prefix = [
        format!("/api/v1/namespaces/{namespace}/"),
        format!("/apis/apps/v1/namespaces/{namespace}/"),
    ];
    kube.requests()
        .into_iter()
        .filter(|r| r.method == "GET" && prefix.iter().any(|p| r.path.starts_with(p.as_str())))
        .filter(|r| ["pods", "deployments"].contains(&r.resource.as_str()))
        .collect()
}

fn verdict(kube: &KubeServer, name: &str) -> Value {
    kube.get("PinnedRepository", NS, name)
        .map(|o| o["status"]["verdict"].clone())
        .unwrap_or(Value::Null)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_team_never_sees_another_teams_workload_and_its_own_converges_through_its_account() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let web = registry.push_image("acme/web", "1.0", "web").await;
    let api = registry.push_image("acme/api", "1", "api").await;
    // team-a's repository declares its own api, and a web in team-b's namespace.
    let repo = BareRepo::create(&[
        (
            "apps/api.yaml",
            &deployment_in(NS, "api", &format!("{host}/acme/api:1")),
        ),
        (
            "apps/web.yaml",
            &deployment_in(TEAM_B, "web", &format!("{host}/acme/web:1.0")),
        ),
    ]);
    let kube = cluster().await;
    runs_converged(
        &kube,
        NS,
        "api",
        &format!("{host}/acme/api:1"),
        &api.manifest,
    );
    team_b_runs_its_own_web(&kube);
    reads_in_its_namespace(&kube, "tagpin");
    kube.apply(pinned_repository(
        "probe",
        json!({}),
        spec(&repo.file_url(), &host),
    ));
    let dir = tempfile::tempdir().unwrap();
    let operator = Operator::start(
        dir.path(),
        &kube,
        "op",
        &["--default-service-account", "tagpin"],
    )
    .await;

    eventually("probe verified", || {
        verdict(&kube, "probe")["state"].is_string()
    })
    .await;
    let pinned = repo.head("main").unwrap();
    assert!(repo
        .read("main", "apps/web.yaml")
        .unwrap()
        .contains(&web.manifest));
    let summary = format!(
        "1 converged, 1 unverified; {TEAM_B}/Deployment/web (app): the ServiceAccount \
         {NS}/tagpin may not list deployments in {TEAM_B}"
    );
    let verdict = verdict(&kube, "probe");
    assert_eq!(verdict["state"], "unverified", "{verdict}");
    assert_eq!(verdict["summary"], summary.as_str());
    assert_eq!(
        (&verdict["converged"], &verdict["unverified"]),
        (&json!(1), &json!(1))
    );
    assert_eq!(verdict["failed"], 0);
    let ready = condition(&kube, "probe", "Ready").unwrap();
    assert_eq!(
        ready["message"],
        format!("main pinned; commit {}: {summary}", &pinned[..12]).as_str()
    );

    let log = operator.stop().await;
    let object = kube.get("PinnedRepository", NS, "probe").unwrap();
    assert_nothing_of_team_b("the status", &object["status"].to_string());
    assert_nothing_of_team_b("the Events", &Value::from(kube.events(NS)).to_string());
    assert_nothing_of_team_b("the operator's log", &log);
    assert!(log.contains(&summary), "{log}");

    // Every read of either namespace's workloads was made as team-a's account; team-b's
    // were refused, team-a's answered.
    let account = team_a("tagpin");
    for namespace in [NS, TEAM_B] {
        let reads = workload_reads(&kube, namespace);
        assert!(!reads.is_empty(), "no read in {namespace}");
        for read in reads {
            assert_eq!(
                read.impersonate_user.as_deref(),
                Some(account.as_str()),
                "{} {}",
                read.method,
                read.path
            );
            let expected = if namespace == TEAM_B { 403 } else { 200 };
            assert_eq!(read.status, expected, "{}", read.path);
        }
    }
    // The GitOps objects too: refused in all namespaces, team-a's read instead, never with
    // the operator's own identity.
    let gitops: Vec<RecordedRequest> = kube
        .requests()
        .into_iter()
        .filter(|r| {
            ["applications", "kustomizations", "gitrepositories"].contains(&r.resource.as_str())
        })
        .collect();
    for (everywhere, status) in [
        ("/apis/argoproj.io/v1alpha1/applications", 403),
        (
            "/apis/kustomize.toolkit.fluxcd.io/v1/namespaces/team-a/kustomizations",
            200,
        ),
    ] {
        assert!(
            gitops
                .iter()
                .any(|r| r.path == everywhere && r.status == status),
            "{everywhere}: {gitops:?}"
        );
    }
    assert!(
        gitops
            .iter()
            .all(|r| r.impersonate_user.as_deref() == Some(account.as_str())),
        "{gitops:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_service_account_the_spec_names_is_read_as_instead_of_the_default() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let api = registry.push_image("acme/api", "1", "api").await;
    let repo = BareRepo::create(&[(
        "apps/api.yaml",
        &deployment_in(NS, "api", &format!("{host}/acme/api:1")),
    )]);
    let kube = cluster().await;
    runs_converged(
        &kube,
        NS,
        "api",
        &format!("{host}/acme/api:1"),
        &api.manifest,
    );
    // Only `verifier` may read team-a; the default `tagpin` may read nothing.
    reads_in_its_namespace(&kube, "verifier");
    let mut named = spec(&repo.file_url(), &host);
    named["service_account_name"] = json!("verifier");
    kube.apply(pinned_repository("api", json!({}), named));
    let dir = tempfile::tempdir().unwrap();
    let operator = Operator::start(
        dir.path(),
        &kube,
        "op",
        &["--default-service-account", "tagpin"],
    )
    .await;

    eventually("api verified", || {
        verdict(&kube, "api")["state"].is_string()
    })
    .await;
    let verdict = verdict(&kube, "api");
    assert_eq!(verdict["state"], "converged", "{verdict}");
    assert_eq!(
        condition(&kube, "api", "Ready").unwrap()["reason"],
        "Converged"
    );
    operator.stop().await;
    let reads = workload_reads(&kube, NS);
    assert!(!reads.is_empty());
    let verifier = team_a("verifier");
    assert!(
        reads
            .iter()
            .all(|r| r.impersonate_user.as_deref() == Some(verifier.as_str())),
        "{:?}",
        reads
            .iter()
            .map(|r| (&r.path, &r.impersonate_user))
            .collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_service_account_an_object_reads_as_the_operator_and_a_spec_that_names_one_still_does(
) {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let api = registry.push_image("acme/api", "1", "api").await;
    let repo = BareRepo::create(&[(
        "apps/api.yaml",
        &deployment_in(NS, "api", &format!("{host}/acme/api:1")),
    )]);
    let kube = cluster().await;
    runs_converged(
        &kube,
        NS,
        "api",
        &format!("{host}/acme/api:1"),
        &api.manifest,
    );
    kube.apply(pinned_repository(
        "own",
        json!({}),
        spec(&repo.file_url(), &host),
    ));
    // An object may ask for an account on a single-team install too: the operator then reads
    // as that account (which may read nothing here).
    let mut named = spec(&repo.file_url(), &host);
    named["service_account_name"] = json!("nobody");
    kube.apply(pinned_repository("named", json!({}), named));
    let dir = tempfile::tempdir().unwrap();
    let operator = Operator::start(dir.path(), &kube, "op", &[]).await;

    eventually("both verified", || {
        verdict(&kube, "own")["state"].is_string() && verdict(&kube, "named")["state"].is_string()
    })
    .await;
    operator.stop().await;
    assert_eq!(verdict(&kube, "own")["state"], "converged");
    let named = verdict(&kube, "named");
    assert_eq!(named["state"], "unverified", "{named}");
    assert_eq!(
        named["summary"],
        format!(
            "1 unverified; {NS}/Deployment/api (app): the ServiceAccount {NS}/nobody may not \
             list deployments in {NS}"
        )
        .as_str()
    );
    let reads = workload_reads(&kube, NS);
    let nobody = team_a("nobody");
    assert!(reads
        .iter()
        .any(|r| r.impersonate_user.is_none() && r.status == 200));
    assert!(reads
        .iter()
        .any(|r| r.impersonate_user.as_deref() == Some(nobody.as_str()) && r.status == 403));
}

#[test]
fn a_default_service_account_that_is_no_service_account_name_is_refused_at_start() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_tagpin"))
        .args(["operator", "--default-service-account", "Team_A"])
        .args(["--listen", "127.0.0.1:0"])
        .env("KUBECONFIG", "/nonexistent")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&output.stderr).trim(),
        "error: --default-service-account: \"Team_A\" is not a ServiceAccount name (a DNS-1123 \
         label: at most 63 lowercase letters, digits and '-', starting and ending with a letter \
         or digit)"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_operator_that_may_not_impersonate_verifies_nothing_rather_than_read_as_itself() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    registry.push_image("acme/web", "1.0", "web").await;
    let repo = BareRepo::create(&[(
        "apps/web.yaml",
        &deployment_in(TEAM_B, "web", &format!("{host}/acme/web:1.0")),
    )]);
    let kube = cluster().await;
    team_b_runs_its_own_web(&kube);
    reads_in_its_namespace(&kube, "tagpin");
    // An install whose RBAC lost the impersonate rule.
    kube.deny("impersonate", "serviceaccounts", None);
    kube.apply(pinned_repository(
        "probe",
        json!({}),
        spec(&repo.file_url(), &host),
    ));
    let dir = tempfile::tempdir().unwrap();
    let operator = Operator::start(
        dir.path(),
        &kube,
        "op",
        &["--default-service-account", "tagpin"],
    )
    .await;

    eventually("probe verified", || {
        verdict(&kube, "probe")["state"].is_string()
    })
    .await;
    let log = operator.stop().await;
    let verdict = verdict(&kube, "probe");
    assert_eq!(verdict["state"], "unverified", "{verdict}");
    let summary = verdict["summary"].as_str().unwrap();
    assert!(
        summary.starts_with("cannot verify: ")
            && summary.contains(
                "tagpin may not impersonate the ServiceAccount team-a/tagpin (403 Forbidden); \
                 grant the operator `impersonate` on serviceaccounts"
            ),
        "{summary}"
    );
    let object = kube.get("PinnedRepository", NS, "probe").unwrap();
    assert_nothing_of_team_b("the status", &object["status"].to_string());
    assert_nothing_of_team_b("the Events", &Value::from(kube.events(NS)).to_string());
    assert_nothing_of_team_b("the operator's log", &log);
    // It never fell back to its own identity.
    let reads = workload_reads(&kube, TEAM_B);
    assert!(
        reads.iter().all(|r| r.impersonate_user.is_some()),
        "{reads:?}"
    );
}
