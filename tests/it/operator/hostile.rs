//! `tagpin operator` against what a tenant may point it at from a `PinnedRepository`: a stage
//! kubeconfig whose `server` is a private page, one that would send the token in the clear
//! over a network, and a registry whose token realm is an internal address. Nothing fetched
//! reaches the object's status, its Events or the operator's log; what cannot be reached
//! safely is refused before any connection.

use crate::operator::promote::World;
use crate::operator::{cluster, condition, pinned_repository, Operator, NS};
use crate::support;
use crate::support::eventually;

use serde_json::{json, Value};
use support::git::BareRepo;
use support::hostile::{Answer, HostileServer};
use support::kube::{secret, KubeServer};
use support::manifests::deployment;

/// What a private page says; none of it may reach the cluster or the log.
const PRIVATE: &str = "INTERNAL-ONLY admin page: db_password=hunter2";

/// Everything the object and its Events say, as one text.
fn everything_said(kube: &KubeServer, name: &str) -> String {
    let object = kube
        .get("PinnedRepository", NS, name)
        .unwrap_or(Value::Null);
    let events: Vec<Value> = kube
        .events(NS)
        .into_iter()
        .filter(|e| e["regarding"]["name"] == name)
        .collect();
    format!("{object}\n{}", Value::Array(events))
}

/// Staging's cluster, by the kubeconfig in Secret `staging-kubeconfig` naming `server`;
/// production on the operator's own cluster.
fn staging_on(w: &World, server: &str) {
    let kubeconfig = w
        .production
        .kubeconfig_yaml()
        .replace(&w.production.url(), server);
    w.kube.apply(secret(
        NS,
        "staging-kubeconfig",
        &[support::kube::TAGPIN_SECRET],
        &[("kubeconfig", kubeconfig.as_str())],
    ));
    let mut spec = w.spec("unused");
    spec["promotion"]["stages"][0]["cluster"] =
        json!({"kubeconfig_secret_ref": {"name": "staging-kubeconfig"}});
    spec["promotion"]["stages"][1]["cluster"] = json!({"in_cluster": true});
    w.kube.apply(pinned_repository("shop", json!({}), spec));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stage_clusters_private_answer_never_reaches_status_events_or_the_log() {
    let w = World::new().await;
    // `server: http://…/admin`: an internal admin page that refuses every request, saying
    // more than it should.
    let admin = HostileServer::always(Answer::body(403, "text/html", PRIVATE)).await;
    let server = format!("{}/admin", admin.url());
    staging_on(&w, &server);
    let operator = w.operator().await;

    eventually("the promotion from staging is refused", || {
        w.promotions("shop")
            .first()
            .is_some_and(|p| p["gate"] == "refused" || p["gate"] == "unreachable")
    })
    .await;
    eventually("an Event about it", || {
        crate::operator::event_reasons(&w.kube, "shop").contains(&"PromotionBlocked".to_string())
    })
    .await;
    assert!(!admin.seen().is_empty(), "the stage cluster was asked");
    let said = everything_said(&w.kube, "shop");
    let log = operator.stop().await;
    for text in [&said, &log] {
        assert!(!text.contains("hunter2"), "{text}");
        assert!(!text.contains("INTERNAL-ONLY"), "{text}");
    }
    // What happened is still said: the API server, what it refused, the status.
    let message = w.promotions("shop")[0]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains(&format!("Kubernetes API {server}")) && message.contains("403 Forbidden"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stage_kubeconfig_over_plain_http_beyond_loopback_is_refused_before_any_connection() {
    let w = World::new().await;
    // 0.0.0.0 is not loopback (a connection to it would reach this machine all the same, so
    // the listener below would see it); any other address would be another host.
    let listener = HostileServer::always(Answer::body(200, "application/json", "{}")).await;
    let port = listener.host().rsplit_once(':').unwrap().1.to_string();
    staging_on(&w, &format!("http://0.0.0.0:{port}"));
    let operator = w.operator().await;

    eventually("the object stalls on its kubeconfig", || {
        condition(&w.kube, "shop", "Stalled").is_some()
    })
    .await;
    let stalled = condition(&w.kube, "shop", "Stalled").unwrap();
    assert_eq!(stalled["reason"], "InvalidSpec");
    let message = stalled["message"].as_str().unwrap();
    assert!(
        message.starts_with("spec.promotion.stages[0].cluster.kubeconfig_secret_ref")
            && message.contains("plain http:// beyond loopback (cluster \"tagpin-test\")"),
        "{message}"
    );
    operator.stop().await;
    assert!(listener.seen().is_empty(), "{:?}", listener.seen());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tenant_registrys_token_realm_on_an_internal_host_is_never_fetched() {
    let realm = HostileServer::start_on("127.0.0.2", |_| {
        Answer::body(200, "application/json", r#"{"token": "internal-token"}"#)
    })
    .await;
    let challenge = format!(
        "Bearer realm=\"{}/internal/token\",service=\"registry\"",
        realm.url()
    );
    let registry = HostileServer::start(move |_| {
        Answer::body(401, "application/json", "{}").with_header("WWW-Authenticate", &challenge)
    })
    .await;
    let host = registry.host();
    let repo = BareRepo::create(&[(
        "apps/web.yaml",
        &deployment("web", &format!("{host}/acme/web:1.0")),
    )]);
    let kube = cluster().await;
    let dir = tempfile::tempdir().unwrap();
    kube.apply(pinned_repository(
        "web",
        json!({}),
        json!({
            "repository": {"url": repo.file_url(), "branch": "main"},
            "paths": ["apps"],
            "registries": {"insecure": [host]},
        }),
    ));
    let operator = Operator::start(dir.path(), &kube, "op", &[]).await;

    let refused = |c: Option<Value>| {
        c.is_some_and(|c| {
            c["message"]
                .as_str()
                .is_some_and(|m| m.contains("refused its token realm on 127.0.0.2"))
        })
    };
    eventually("the image fails naming the refused realm", || {
        refused(condition(&kube, "web", "Ready")) || refused(condition(&kube, "web", "Reconciling"))
    })
    .await;
    operator.stop().await;
    assert!(
        realm.seen().is_empty(),
        "the realm was fetched: {:?}",
        realm.seen()
    );
    let said = everything_said(&kube, "web");
    assert!(said.contains(&format!("registry {host}")), "{said}");
}
