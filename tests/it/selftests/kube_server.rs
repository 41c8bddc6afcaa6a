//! Checks that the local Kubernetes API server in `support::kube` is one the
//! real `kube` client works with, the way it works with a real cluster:
//! discovery, get, selectors, paging, watches, dynamic objects, RBAC errors,
//! refused writes, kubeconfig contexts and the real OpenShift capture. If
//! these pass, a tagpin test that fails against the server points at tagpin.

use crate::support;

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::discovery::Discovery;
use kube::{Client, Config, ResourceExt};
use serde_json::{json, Value};
use support::kube::{deployment, pod, running_pod_status, Grant, KubeServer};
use support::shared_fixture;

/// The digest CRI-O reported for the captured OpenShift pod.
const CAPTURED_IMAGE_ID: &str = "quay.io/k_nakajima/nginx-sample@sha256:0f152bc1261aea012bbf89977a821f1b319b9dc9feb7f4ba54f08f617b2937ec";

/// Three web pods (two stable, one canary) and one db pod in `shop`.
fn add_shop_pods(server: &KubeServer) {
    for (name, track) in [
        ("web-1", "stable"),
        ("web-2", "stable"),
        ("web-3", "canary"),
    ] {
        server.apply(pod(
            "shop",
            name,
            &[("app", "web"), ("track", track)],
            &[("web", "registry.example/web:1.2")],
        ));
    }
    server.apply(pod(
        "shop",
        "db-1",
        &[("app", "db")],
        &[("db", "registry.example/db:15")],
    ));
}

/// The shop pods of [`add_shop_pods`] on `server`, and an API over namespace `shop`.
async fn shop_pods(server: &KubeServer) -> Api<Pod> {
    add_shop_pods(server);
    Api::namespaced(server.client().await, "shop")
}

/// The error a delete of pod `name` that must fail gets.
async fn refused_delete(pods: &Api<Pod>, name: &str) -> Box<kube::core::Status> {
    api_error(
        pods.delete(name, &DeleteParams::default())
            .await
            .unwrap_err(),
    )
}

/// Discovery both ways a client runs it: one request per group, and aggregated.
async fn both_discoveries(client: &Client) -> [Discovery; 2] {
    [
        Discovery::new(client.clone()).run().await.unwrap(),
        Discovery::new(client.clone())
            .run_aggregated()
            .await
            .unwrap(),
    ]
}

fn names<K: ResourceExt>(items: &[K]) -> Vec<String> {
    items.iter().map(|o| o.name_any()).collect()
}

fn api_error(err: kube::Error) -> Box<kube::core::Status> {
    match err {
        kube::Error::Api(status) => status,
        other => panic!("expected kube::Error::Api, got {other:?}"),
    }
}

#[tokio::test]
async fn discovery_finds_core_apps_batch_and_openshift() {
    let server = KubeServer::start().await;
    let client = server.client().await;

    let version = client.apiserver_version().await.unwrap();
    assert_eq!(version.major, "1");

    for discovery in both_discoveries(&client).await {
        for group in ["", "apps", "batch", "apps.openshift.io"] {
            assert!(discovery.has_group(group), "group {group:?} not discovered");
        }
        let gvk = GroupVersionKind::gvk("apps.openshift.io", "v1", "DeploymentConfig");
        let (resource, caps) = discovery.resolve_gvk(&gvk).expect("DeploymentConfig");
        assert_eq!(resource.plural, "deploymentconfigs");
        assert!(caps.supports_operation(kube::discovery::verbs::WATCH));
        for (group, version, kind) in [
            ("", "v1", "Pod"),
            ("apps", "v1", "Deployment"),
            ("apps", "v1", "StatefulSet"),
            ("apps", "v1", "DaemonSet"),
            ("apps", "v1", "ReplicaSet"),
            ("batch", "v1", "Job"),
        ] {
            let gvk = GroupVersionKind::gvk(group, version, kind);
            assert!(
                discovery.resolve_gvk(&gvk).is_some(),
                "{kind} not discovered"
            );
        }
    }
    server.assert_no_writes();
}

#[tokio::test]
async fn get_and_label_selectors_work_like_a_cluster() {
    let server = KubeServer::start().await;
    add_shop_pods(&server);
    server.apply(pod(
        "other",
        "web-9",
        &[("app", "web")],
        &[("web", "registry.example/web:1.2")],
    ));
    let pods: Api<Pod> = Api::namespaced(server.client().await, "shop");

    let web1 = pods.get("web-1").await.unwrap();
    assert_eq!(web1.metadata.namespace.as_deref(), Some("shop"));
    assert!(web1.metadata.uid.is_some() && web1.metadata.creation_timestamp.is_some());

    let cases: &[(&str, &[&str])] = &[
        ("app=web", &["web-1", "web-2", "web-3"]),
        ("app==web,track!=canary", &["web-1", "web-2"]),
        ("track in (canary, nightly)", &["web-3"]),
        ("app notin (web)", &["db-1"]),
        ("track", &["web-1", "web-2", "web-3"]),
        ("!track", &["db-1"]),
        ("app=web,!track", &[]),
    ];
    for (selector, expected) in cases {
        let list = pods
            .list(&ListParams::default().labels(selector))
            .await
            .unwrap();
        assert_eq!(names(&list.items), *expected, "labelSelector {selector:?}");
    }

    let by_name = pods
        .list(&ListParams::default().fields("metadata.name=web-2"))
        .await
        .unwrap();
    assert_eq!(names(&by_name.items), ["web-2"]);

    // Cluster-wide: /api/v1/pods, in etcd key order.
    let all: Api<Pod> = Api::all(server.client().await);
    let everything = all
        .list(&ListParams::default().labels("app=web"))
        .await
        .unwrap();
    assert_eq!(
        names(&everything.items),
        ["web-9", "web-1", "web-2", "web-3"]
    );

    let missing = api_error(pods.get("nope").await.unwrap_err());
    assert_eq!((missing.code, missing.reason.as_str()), (404, "NotFound"));
    assert_eq!(missing.message, "pods \"nope\" not found");

    let bad = api_error(
        pods.list(&ListParams::default().labels("app in ()"))
            .await
            .unwrap_err(),
    );
    assert_eq!((bad.code, bad.reason.as_str()), (400, "BadRequest"));
    let bad_field = api_error(
        pods.list(&ListParams::default().fields("spec.image=x"))
            .await
            .unwrap_err(),
    );
    assert_eq!(bad_field.message, "field label not supported: spec.image");

    let meta = pods
        .list_metadata(&ListParams::default().labels("app=db"))
        .await
        .unwrap();
    assert_eq!(names(&meta.items), ["db-1"]);
    server.assert_no_writes();
}

#[tokio::test]
async fn pagination_walks_continue_tokens_over_a_consistent_snapshot() {
    let server = KubeServer::start().await;
    for i in 1..=5 {
        server.apply(pod(
            "shop",
            &format!("p{i}"),
            &[("app", "web")],
            &[("web", "w:1")],
        ));
    }
    let pods: Api<Pod> = Api::namespaced(server.client().await, "shop");

    let first = pods.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(names(&first.items), ["p1", "p2"]);
    assert_eq!(first.metadata.remaining_item_count, Some(3));
    let snapshot_rv = first.metadata.resource_version.clone().unwrap();

    // Changes after the first page do not show in the later pages.
    server.delete("Pod", "shop", "p4");
    server.apply(pod("shop", "p6", &[("app", "web")], &[("web", "w:1")]));

    let mut seen = names(&first.items);
    let mut token = first.metadata.continue_.clone();
    let mut pages = 1;
    while let Some(t) = token {
        let page = pods
            .list(&ListParams::default().limit(2).continue_token(&t))
            .await
            .unwrap();
        assert_eq!(
            page.metadata.resource_version.as_deref(),
            Some(snapshot_rv.as_str())
        );
        seen.extend(names(&page.items));
        token = page.metadata.continue_.clone();
        pages += 1;
        assert!(pages < 10, "continue tokens never ended");
    }
    assert_eq!(seen, ["p1", "p2", "p3", "p4", "p5"]);
    assert_eq!(pages, 3);

    // A fresh list sees the changes.
    let now = pods.list(&ListParams::default()).await.unwrap();
    assert_eq!(names(&now.items), ["p1", "p2", "p3", "p5", "p6"]);

    // With a selector, no remainingItemCount (as etcd), and paging goes on.
    let selected = pods
        .list(&ListParams::default().labels("app=web").limit(4))
        .await
        .unwrap();
    assert_eq!(selected.metadata.remaining_item_count, None);
    assert!(selected.metadata.continue_.is_some());

    // After compaction, an old token is 410 Expired.
    let old = pods.list(&ListParams::default().limit(1)).await.unwrap();
    server.apply(pod("shop", "p7", &[], &[("web", "w:1")]));
    server.compact();
    let expired = api_error(
        pods.list(
            &ListParams::default()
                .limit(1)
                .continue_token(old.metadata.continue_.as_deref().unwrap()),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((expired.code, expired.reason.as_str()), (410, "Expired"));
}

#[tokio::test]
async fn watch_sees_the_kubelet_report_the_image_digest() {
    let server = KubeServer::start().await;
    let pods = shop_pods(&server).await;
    let list = pods
        .list(&ListParams::default().labels("app=web"))
        .await
        .unwrap();
    let rv = list.metadata.resource_version.unwrap();

    let stream = pods
        .watch(&WatchParams::default().labels("app=web").timeout(10), &rv)
        .await
        .unwrap();
    let mut stream = Box::pin(stream);

    let digest = "registry.example/web@sha256:1111111111111111111111111111111111111111111111111111111111111111";
    server.set_pod_status(
        "shop",
        "web-2",
        running_pod_status(&[("web", "registry.example/web:1.2", digest)]),
    );
    server.set_pod_status(
        "shop",
        "db-1",
        running_pod_status(&[("db", "registry.example/db:15", "x@sha256:22")]),
    );

    let event = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match stream.try_next().await.unwrap().expect("watch ended early") {
                WatchEvent::Bookmark(_) => continue,
                event => return event,
            }
        }
    })
    .await
    .expect("no watch event within 5s");
    let WatchEvent::Modified(modified) = event else {
        panic!("expected MODIFIED, got {event:?}");
    };
    assert_eq!(modified.name_any(), "web-2");
    let status = modified.status.unwrap();
    assert_eq!(status.container_statuses.unwrap()[0].image_id, digest);
    assert!(
        modified
            .metadata
            .resource_version
            .unwrap()
            .parse::<u64>()
            .unwrap()
            > rv.parse::<u64>().unwrap()
    );
    server.assert_no_writes();
}

#[tokio::test]
async fn watch_from_zero_lists_then_bookmarks_and_closes_at_timeout() {
    let server = KubeServer::start().await;
    add_shop_pods(&server);
    server.set_bookmark_interval(Duration::from_millis(200));
    let pods: Api<Pod> = Api::namespaced(server.client().await, "shop");

    let events: Vec<WatchEvent<Pod>> = tokio::time::timeout(
        Duration::from_secs(10),
        pods.watch(&WatchParams::default().labels("app=db").timeout(1), "0")
            .await
            .unwrap()
            .try_collect(),
    )
    .await
    .expect("the watch did not close after timeoutSeconds")
    .unwrap();
    assert!(matches!(&events[0], WatchEvent::Added(p) if p.name_any() == "db-1"));
    assert!(
        events.iter().any(|e| matches!(e, WatchEvent::Bookmark(_))),
        "no BOOKMARK in {events:?}"
    );

    // Moving out of the selection is DELETED; deletion of a watched pod too.
    let rv = server.resource_version().to_string();
    let watch = pods
        .watch(
            &WatchParams::default().labels("track=stable").timeout(1),
            &rv,
        )
        .await
        .unwrap();
    server.apply(pod(
        "shop",
        "web-1",
        &[("app", "web"), ("track", "gone")],
        &[("web", "w:2")],
    ));
    server.delete("pods", "shop", "web-2");
    let events: Vec<WatchEvent<Pod>> = watch.try_collect().await.unwrap();
    let kinds: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            WatchEvent::Deleted(p) => Some(format!("DELETED {}", p.name_any())),
            WatchEvent::Bookmark(_) => None,
            other => Some(format!("{other:?}")),
        })
        .collect();
    assert_eq!(kinds, ["DELETED web-1", "DELETED web-2"]);

    // After compaction, a watch from an old version gets 410 in an ERROR event.
    server.compact();
    let mut stale = Box::pin(pods.watch(&WatchParams::default(), &rv).await.unwrap());
    match stale.try_next().await.unwrap() {
        Some(WatchEvent::Error(status)) => assert_eq!(status.code, 410),
        other => panic!("expected ERROR 410, got {other:?}"),
    }
}

#[tokio::test]
async fn deployment_configs_are_read_as_dynamic_objects() {
    let server = KubeServer::start().await;
    server.apply(json!({
        "apiVersion": "apps.openshift.io/v1",
        "kind": "DeploymentConfig",
        "metadata": { "name": "frontend", "namespace": "shop", "labels": { "app": "frontend" } },
        "spec": {
            "replicas": 2,
            "selector": { "app": "frontend" },
            "triggers": [{ "type": "ConfigChange" }],
            "template": {
                "metadata": { "labels": { "app": "frontend" } },
                "spec": { "containers": [{ "name": "web", "image": "quay.io/shop/frontend:2.0" }] },
            },
        },
    }));
    let gvk = GroupVersionKind::gvk("apps.openshift.io", "v1", "DeploymentConfig");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "deploymentconfigs");
    let dcs: Api<DynamicObject> = Api::namespaced_with(server.client().await, "shop", &resource);

    let dc = dcs.get("frontend").await.unwrap();
    assert_eq!(
        dc.data["spec"]["template"]["spec"]["containers"][0]["image"],
        "quay.io/shop/frontend:2.0"
    );
    assert_eq!(dc.metadata.generation, Some(1));
    let listed = dcs
        .list(&ListParams::default().labels("app=frontend"))
        .await
        .unwrap();
    assert_eq!(names(&listed.items), ["frontend"]);

    // Typed apps/v1 reads go through the same store.
    server.apply(deployment(
        "shop",
        "web",
        &[("app", "web")],
        &[("web", "registry.example/web:1.2")],
    ));
    let deployments: Api<Deployment> = Api::namespaced(server.client().await, "shop");
    let web = deployments.get("web").await.unwrap();
    assert_eq!(web.metadata.generation, Some(1));
    let mut changed = deployment(
        "shop",
        "web",
        &[("app", "web")],
        &[("web", "registry.example/web:1.3")],
    );
    changed["status"] = json!({ "observedGeneration": 1 });
    server.apply(changed);
    let web = deployments.get("web").await.unwrap();
    assert_eq!(
        web.metadata.generation,
        Some(2),
        "a spec change bumps generation"
    );
}

#[tokio::test]
async fn rbac_denials_surface_as_forbidden_status() {
    let server = KubeServer::start().await;
    add_shop_pods(&server);
    server.deny("list", "pods", Some("shop"));
    let client = server.client().await;

    let pods: Api<Pod> = Api::namespaced(client.clone(), "shop");
    let status = api_error(pods.list(&ListParams::default()).await.unwrap_err());
    assert_eq!((status.code, status.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        status.message,
        "pods is forbidden: User \"system:serviceaccount:tagpin:tagpin\" cannot list resource \"pods\" in API group \"\" in the namespace \"shop\""
    );
    assert_eq!(status.details.as_ref().unwrap().kind, "pods");

    // get is still allowed; a cluster-wide list is not.
    pods.get("web-1").await.unwrap();
    let all: Api<Pod> = Api::all(client.clone());
    let status = api_error(all.list(&ListParams::default()).await.unwrap_err());
    assert!(
        status.message.ends_with("at the cluster scope"),
        "{}",
        status.message
    );

    // Grants restricted to one namespace, as a RoleBinding gives.
    server.set_grants(vec![Grant::namespaced("shop", &["get"], &["deployments"])]);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "shop");
    let status = api_error(deployments.get("web").await.unwrap_err());
    assert_eq!(
        status.code, 404,
        "get is granted, so the missing object is 404"
    );
    let elsewhere: Api<Deployment> = Api::namespaced(client, "prod");
    let status = api_error(elsewhere.get("web").await.unwrap_err());
    assert_eq!(
        status.message,
        "deployments.apps \"web\" is forbidden: User \"system:serviceaccount:tagpin:tagpin\" cannot get resource \"deployments\" in API group \"apps\" in the namespace \"prod\""
    );
}

#[tokio::test]
async fn writes_are_refused_and_recorded() {
    let server = KubeServer::start().await;
    let pods = shop_pods(&server).await;

    let status = refused_delete(&pods, "web-1").await;
    assert_eq!((status.code, status.reason.as_str()), (403, "Forbidden"));
    assert!(
        status.message.contains("cannot delete resource \"pods\""),
        "{}",
        status.message
    );
    pods.get("web-1").await.expect("the pod is still there");

    let new_pod: Pod = serde_json::from_value(pod("shop", "new", &[], &[("c", "i:1")])).unwrap();
    let status = api_error(
        pods.create(&PostParams::default(), &new_pod)
            .await
            .unwrap_err(),
    );
    assert_eq!(status.code, 403);
    assert!(server.get("Pod", "shop", "new").is_none());

    let writes = server.writes();
    let seen: Vec<(&str, &str)> = writes
        .iter()
        .map(|w| (w.method.as_str(), w.path.as_str()))
        .collect();
    assert_eq!(
        seen,
        [
            ("DELETE", "/api/v1/namespaces/shop/pods/web-1"),
            ("POST", "/api/v1/namespaces/shop/pods"),
        ]
    );
    assert!(
        writes[1].body.contains("\"name\":\"new\""),
        "{}",
        writes[1].body
    );
    let refused = std::panic::catch_unwind(|| server.assert_no_writes());
    assert!(refused.is_err(), "assert_no_writes must fail after a write");

    // Taking them acknowledges them: nothing is left to fail the test.
    assert_eq!(server.take_writes(), writes);
    server.assert_no_writes();
}

/// A write the test did not take fails it when the server is dropped, even if the test forgot
/// to call `assert_no_writes`.
#[tokio::test]
#[should_panic(expected = "refused 1 write attempt(s) that the test did not take")]
async fn a_write_nobody_took_fails_the_test_on_drop() {
    let server = KubeServer::start().await;
    let pods = shop_pods(&server).await;
    let status = refused_delete(&pods, "web-1").await;
    assert_eq!(status.code, 403);
}

#[tokio::test]
async fn wrong_token_is_401() {
    let server = KubeServer::start().await;
    let mut config = Config::new(server.url().parse().unwrap());
    config.auth_info.token = Some("not-the-token".to_string().into());
    let pods: Api<Pod> = Api::namespaced(Client::try_from(config).unwrap(), "shop");
    let status = api_error(pods.list(&ListParams::default()).await.unwrap_err());
    assert_eq!((status.code, status.reason.as_str()), (401, "Unauthorized"));
    assert!(server.requests().iter().all(|r| !r.authenticated));
}

#[tokio::test]
async fn kubeconfig_contexts_select_cluster_and_namespace() {
    let server = KubeServer::start().await;
    server.apply(pod("default", "in-default", &[], &[("c", "i:1")]));
    server.apply(pod("other", "in-other", &[], &[("c", "i:1")]));
    let dir = tempfile::tempdir().unwrap();
    let path = server.kubeconfig(dir.path());

    for (context, namespace, expected) in [
        (None, "default", "in-default"),
        (Some("test"), "default", "in-default"),
        (Some("other"), "other", "in-other"),
    ] {
        let kubeconfig = Kubeconfig::read_from(&path).unwrap();
        let options = KubeConfigOptions {
            context: context.map(str::to_string),
            ..Default::default()
        };
        let config = Config::from_custom_kubeconfig(kubeconfig, &options)
            .await
            .unwrap();
        assert_eq!(config.default_namespace, namespace);
        assert_eq!(config.cluster_url.to_string(), format!("{}/", server.url()));
        let pods: Api<Pod> = Api::default_namespaced(Client::try_from(config).unwrap());
        let list = pods.list(&ListParams::default()).await.unwrap();
        assert_eq!(names(&list.items), [expected], "context {context:?}");
    }
    assert!(server.requests().iter().all(|r| r.authenticated));
}

#[tokio::test]
async fn the_real_openshift_capture_reads_back_its_image_digest() {
    let server = KubeServer::start().await;
    let loaded = server.load_yaml_list(&shared_fixture("openshift-nginx-pods.yaml"));
    assert_eq!(loaded.len(), 1);
    assert_eq!(
        (loaded[0].namespace.as_str(), loaded[0].kind.as_str()),
        ("test-wp", "Pod")
    );
    // The Deployment capture has no namespace: put it beside its pod.
    server.load_yaml(
        &shared_fixture("openshift-nginx-deployment.yaml"),
        "test-wp",
    );

    let client = server.client().await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "test-wp");
    let nginx = deployments.get("nginx").await.unwrap();
    // Through JSON: `Deployment::spec` is optional in some k8s-openapi API
    // versions and required in others.
    let spec = serde_json::to_value(&nginx).unwrap()["spec"].clone();
    let selector: Vec<String> = spec["selector"]["matchLabels"]
        .as_object()
        .expect("the capture's selector has matchLabels")
        .iter()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap()))
        .collect();
    assert!(nginx
        .metadata
        .annotations
        .unwrap()
        .contains_key("image.openshift.io/triggers"));

    let pods: Api<Pod> = Api::namespaced(client, "test-wp");
    let list = pods
        .list(&ListParams::default().labels(&selector.join(",")))
        .await
        .unwrap();
    assert_eq!(names(&list.items), ["nginx-54589dd565-v9xm9"]);
    let pod = &list.items[0];
    let statuses = pod
        .status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap();
    assert_eq!(statuses[0].image_id, CAPTURED_IMAGE_ID);
    assert_eq!(
        pod.spec.as_ref().unwrap().containers[0].image.as_deref(),
        Some("quay.io/k_nakajima/nginx-sample:latest")
    );
    assert_eq!(
        pod.metadata.owner_references.as_ref().unwrap()[0].kind,
        "ReplicaSet"
    );

    // The raw object keeps what the capture had.
    let raw: Value = server
        .get("Pod", "test-wp", "nginx-54589dd565-v9xm9")
        .unwrap();
    assert_eq!(
        raw["status"]["containerStatuses"][0]["imageID"],
        CAPTURED_IMAGE_ID
    );
    assert_eq!(
        raw["metadata"]["uid"],
        "1313f0e1-7f23-487f-84f5-63de3cedef72"
    );
    server.assert_no_writes();
}

#[tokio::test]
async fn requests_are_logged_with_their_query() {
    let server = KubeServer::start().await;
    let pods: Api<Pod> = Api::namespaced(server.client().await, "shop");
    pods.list(&ListParams::default().labels("app=web").limit(5))
        .await
        .unwrap();
    let request = server
        .requests()
        .into_iter()
        .find(|r| r.path == "/api/v1/namespaces/shop/pods")
        .expect("the list was logged");
    assert_eq!(
        request.query_param("labelSelector").as_deref(),
        Some("app=web")
    );
    assert_eq!(request.query_param("limit").as_deref(), Some("5"));
    assert_eq!(request.status, 200);
}

#[tokio::test]
#[should_panic(expected = "KubeServer::apply(v1 Pod shop/broken)")]
async fn objects_a_real_server_would_refuse_make_apply_panic() {
    let server = KubeServer::start().await;
    server.apply(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": { "name": "broken", "namespace": "shop" },
        "spec": { "containers": "not-a-list" },
    }));
}

// ---------------------------------------------------------------------------
// Operator mode: custom resources, status, Secrets, Leases, Events
// ---------------------------------------------------------------------------

/// A CRD as `kube::CustomResource` derives them: one served version, a
/// structural schema, a status subresource, a short name.
fn pinned_repository_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": { "name": "pinnedrepositories.tagpin.dev" },
        "spec": {
            "group": "tagpin.dev",
            "names": {
                "categories": [],
                "kind": "PinnedRepository",
                "plural": "pinnedrepositories",
                "shortNames": ["pinrepo"],
                "singular": "pinnedrepository",
            },
            "scope": "Namespaced",
            "versions": [{
                "name": "v1alpha1",
                "served": true,
                "storage": true,
                "subresources": { "status": {} },
                "schema": { "openAPIV3Schema": {
                    "type": "object",
                    "required": ["spec"],
                    "properties": {
                        "spec": {
                            "type": "object",
                            "required": ["url"],
                            "properties": {
                                "url": { "type": "string" },
                                "branch": { "type": "string", "nullable": true },
                                "interval": { "type": "integer", "format": "int64", "minimum": 1 },
                            },
                        },
                        "status": {
                            "type": "object",
                            "nullable": true,
                            "properties": {
                                "observedGeneration": { "type": "integer", "nullable": true },
                                "conditions": {
                                    "type": "array",
                                    "items": {
                                        "type": "object",
                                        "required": ["type", "status"],
                                        "properties": {
                                            "type": { "type": "string" },
                                            "status": { "type": "string", "enum": ["True", "False", "Unknown"] },
                                            "reason": { "type": "string" },
                                            "message": { "type": "string" },
                                            "lastTransitionTime": { "type": "string", "format": "date-time" },
                                        },
                                    },
                                },
                            },
                        },
                    },
                }},
            }],
        },
    })
}

fn pinned_repository(name: &str, url: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "tagpin.dev/v1alpha1",
        "kind": "PinnedRepository",
        "metadata": { "name": name },
        "spec": { "url": url },
    }))
    .unwrap()
}

fn pinned_repository_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("tagpin.dev", "v1alpha1", "PinnedRepository"),
        "pinnedrepositories",
    )
}

/// The grants a controller of PinnedRepositories has in namespace `ns`.
/// `PinnedRepository` registered on `server`, the operator's grants in `shop`, and an API over
/// the custom resources there.
async fn pinned_repositories(server: &KubeServer) -> Api<DynamicObject> {
    server.register_crd(pinned_repository_crd());
    operator_grants(server, "shop");
    Api::namespaced_with(server.client().await, "shop", &pinned_repository_resource())
}

fn operator_grants(server: &KubeServer, ns: &str) {
    server.grant(Grant::namespaced(
        ns,
        &[
            "get", "list", "watch", "create", "update", "patch", "delete",
        ],
        &[
            "pinnedrepositories",
            "pinnedrepositories/status",
            "leases",
            "events",
            "secrets",
        ],
    ));
}

#[tokio::test]
async fn a_crd_created_through_the_api_serves_its_custom_resource_with_discovery_and_schema() {
    let server = KubeServer::start().await;
    server.grant(Grant::cluster(&["create"], &["customresourcedefinitions"]));
    operator_grants(&server, "shop");
    let client = server.client().await;

    // Before the CRD: 404, as on a cluster without it.
    let repos: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "shop", &pinned_repository_resource());
    let missing = api_error(repos.list(&ListParams::default()).await.unwrap_err());
    assert_eq!(missing.code, 404);

    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    // A CRD the real server refuses is refused before anything is stored.
    let mut misnamed = pinned_repository_crd();
    misnamed["metadata"]["name"] = json!("repos.tagpin.dev");
    let misnamed: CustomResourceDefinition = serde_json::from_value(misnamed).unwrap();
    let refused = api_error(
        crds.create(&PostParams::default(), &misnamed)
            .await
            .unwrap_err(),
    );
    assert_eq!(refused.code, 422, "{}", refused.message);
    assert!(
        refused.message.contains("metadata.name"),
        "{}",
        refused.message
    );
    assert!(server
        .get("CustomResourceDefinition", "", "repos.tagpin.dev")
        .is_none());

    let crd: CustomResourceDefinition = serde_json::from_value(pinned_repository_crd()).unwrap();
    let created = crds.create(&PostParams::default(), &crd).await.unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    let established = created
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .any(|c| c.type_ == "Established" && c.status == "True");
    assert!(established, "a created CRD is Established");

    for discovery in both_discoveries(&client).await {
        let gvk = GroupVersionKind::gvk("tagpin.dev", "v1alpha1", "PinnedRepository");
        let (resource, caps) = discovery.resolve_gvk(&gvk).expect("PinnedRepository");
        assert_eq!(resource.plural, "pinnedrepositories");
        assert_eq!(caps.scope, kube::discovery::Scope::Namespaced);
        assert!(caps.supports_operation(kube::discovery::verbs::WATCH));
        assert!(
            caps.subresources
                .iter()
                .any(|(r, _)| r.plural == "pinnedrepositories/status" || r.plural == "status"),
            "status subresource listed: {:?}",
            caps.subresources
        );
    }
    let list: Value = client
        .request(
            http::Request::get("/apis/tagpin.dev/v1alpha1")
                .body(Vec::new())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(list["resources"][0]["shortNames"], json!(["pinrepo"]));

    // Create: generation 1, the status is the server's, unknown fields pruned with a warning.
    let mut repo = pinned_repository("web", "https://git.example/web.git");
    repo.data["spec"]["colour"] = json!("blue");
    repo.data["status"] = json!({ "observedGeneration": 9 });
    let stored = repos.create(&PostParams::default(), &repo).await.unwrap();
    assert_eq!(stored.metadata.generation, Some(1));
    assert_eq!(stored.metadata.namespace.as_deref(), Some("shop"));
    assert!(stored.data.get("status").is_none(), "{:?}", stored.data);
    assert!(stored.data["spec"].get("colour").is_none(), "pruned");
    let create = server
        .requests()
        .into_iter()
        .rfind(|r| r.verb == "create")
        .unwrap();
    assert_eq!(
        (create.resource.as_str(), create.status),
        ("pinnedrepositories", 201)
    );

    // What the schema refuses is 422 Invalid, naming the field.
    let mut bad = pinned_repository("bad", "https://git.example/bad.git");
    bad.data["spec"]["interval"] = json!(0);
    let invalid = api_error(
        repos
            .create(&PostParams::default(), &bad)
            .await
            .unwrap_err(),
    );
    assert_eq!((invalid.code, invalid.reason.as_str()), (422, "Invalid"));
    assert!(
        invalid
            .message
            .starts_with("PinnedRepository.tagpin.dev \"bad\" is invalid: spec.interval"),
        "{}",
        invalid.message
    );

    // Strict field validation refuses the unknown field instead of pruning it.
    let strict = api_error(
        repos
            .patch(
                "web",
                &PatchParams {
                    field_validation: Some(kube::api::ValidationDirective::Strict),
                    ..Default::default()
                },
                &Patch::Merge(json!({ "spec": { "colour": "red" } })),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(strict.code, 400);
    assert!(
        strict.message.contains("unknown field \"spec.colour\""),
        "{}",
        strict.message
    );

    let again = api_error(
        repos
            .create(&PostParams::default(), &repo)
            .await
            .unwrap_err(),
    );
    assert_eq!((again.code, again.reason.as_str()), (409, "AlreadyExists"));
    assert_eq!(
        again.message,
        "pinnedrepositories.tagpin.dev \"web\" already exists"
    );
    server.assert_no_writes();
}

#[tokio::test]
async fn status_subresource_generation_and_stale_updates_behave_like_the_real_server() {
    let server = KubeServer::start().await;
    let repos = pinned_repositories(&server).await;
    let created = repos
        .create(
            &PostParams::default(),
            &pinned_repository("web", "https://git.example/web.git"),
        )
        .await
        .unwrap();
    let rv = |o: &DynamicObject| o.metadata.resource_version.clone().unwrap();

    // A status write changes only the status: no generation bump, a new resourceVersion.
    let mut with_status = created.clone();
    with_status.data["status"] = json!({
        "observedGeneration": 1,
        "conditions": [{ "type": "Ready", "status": "False", "reason": "Pending" }],
    });
    with_status.data["spec"]["url"] = json!("https://ignored.example/x.git");
    let after_status = repos
        .replace_status("web", &PostParams::default(), &with_status)
        .await
        .unwrap();
    assert_eq!(after_status.metadata.generation, Some(1));
    assert_ne!(rv(&after_status), rv(&created));
    assert_eq!(
        after_status.data["spec"]["url"],
        "https://git.example/web.git"
    );
    assert_eq!(
        after_status.data["status"]["conditions"][0]["reason"],
        "Pending"
    );

    // A spec change bumps the generation and leaves the status alone.
    let mut spec_change = after_status.clone();
    spec_change.data["spec"]["branch"] = json!("main");
    spec_change.data["status"] = json!({ "observedGeneration": 42 });
    let after_spec = repos
        .replace("web", &PostParams::default(), &spec_change)
        .await
        .unwrap();
    assert_eq!(after_spec.metadata.generation, Some(2));
    assert_eq!(after_spec.data["status"]["observedGeneration"], 1);

    // The update that carried the old resourceVersion is 409 Conflict.
    let stale = api_error(
        repos
            .replace("web", &PostParams::default(), &spec_change)
            .await
            .unwrap_err(),
    );
    assert_eq!((stale.code, stale.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        stale.message,
        "Operation cannot be fulfilled on pinnedrepositories.tagpin.dev \"web\": the object has \
         been modified; please apply your changes to the latest version and try again"
    );
    let details = stale.details.unwrap();
    assert_eq!(
        (
            details.name.as_str(),
            details.group.as_str(),
            details.kind.as_str()
        ),
        ("web", "tagpin.dev", "pinnedrepositories")
    );

    // Merge patch on /status, without a resourceVersion: unconditional.
    let merged = repos
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": { "observedGeneration": 2 } })),
        )
        .await
        .unwrap();
    assert_eq!(merged.data["status"]["observedGeneration"], 2);
    assert_eq!(merged.data["status"]["conditions"][0]["type"], "Ready");
    assert_eq!(merged.metadata.generation, Some(2));

    // A merge patch that carries a stale resourceVersion is a failed precondition.
    let stale_patch = api_error(
        repos
            .patch(
                "web",
                &PatchParams::default(),
                &Patch::Merge(json!({
                    "metadata": { "resourceVersion": rv(&created) },
                    "spec": { "branch": "dev" },
                })),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(stale_patch.code, 409);

    // Nothing the schema does not allow gets into the status either.
    let invalid = api_error(
        repos
            .patch_status(
                "web",
                &PatchParams::default(),
                &Patch::Merge(
                    json!({ "status": { "conditions": [{ "type": "Ready", "status": "Yes" }] } }),
                ),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(invalid.code, 422, "{}", invalid.message);

    // Updating an object that is not there is 404.
    let mut ghost = pinned_repository("ghost", "https://git.example/g.git");
    ghost.metadata.namespace = Some("shop".to_string());
    let missing = api_error(
        repos
            .replace("ghost", &PostParams::default(), &ghost)
            .await
            .unwrap_err(),
    );
    assert_eq!(missing.code, 404);
    server.assert_no_writes();
}

#[tokio::test]
async fn server_side_apply_creates_merges_and_drops_what_its_manager_stopped_applying() {
    let server = KubeServer::start().await;
    let repos = pinned_repositories(&server).await;

    let no_manager = api_error(
        repos
            .patch(
                "web",
                &PatchParams::default(),
                &Patch::Apply(pinned_repository("web", "https://git.example/web.git")),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(no_manager.code, 422);
    assert!(
        no_manager.message.contains("fieldManager: Required value"),
        "{}",
        no_manager.message
    );

    let pp = PatchParams::apply("tagpin-test").force();
    let mut applied = pinned_repository("web", "https://git.example/web.git");
    applied.data["spec"]["branch"] = json!("main");
    let created = repos
        .patch("web", &pp, &Patch::Apply(&applied))
        .await
        .unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    assert_eq!(created.data["spec"]["branch"], "main");

    // The manager stops applying `branch`: it goes; the URL changes.
    let again = pinned_repository("web", "https://git.example/moved.git");
    let updated = repos
        .patch("web", &pp, &Patch::Apply(&again))
        .await
        .unwrap();
    assert!(
        updated.data["spec"].get("branch").is_none(),
        "{:?}",
        updated.data
    );
    assert_eq!(updated.data["spec"]["url"], "https://git.example/moved.git");
    assert_eq!(updated.metadata.generation, Some(2));

    // Apply on /status sets the status only.
    let status = json!({
        "apiVersion": "tagpin.dev/v1alpha1",
        "kind": "PinnedRepository",
        "metadata": { "name": "web" },
        "status": { "observedGeneration": 2, "conditions": [{ "type": "Ready", "status": "True" }] },
    });
    let with_status = repos
        .patch_status("web", &pp, &Patch::Apply(&status))
        .await
        .unwrap();
    assert_eq!(
        with_status.data["status"]["conditions"][0]["status"],
        "True"
    );
    assert_eq!(with_status.metadata.generation, Some(2));
    server.assert_no_writes();
}

#[tokio::test]
async fn a_kube_runtime_watcher_sees_custom_resources_added_modified_and_deleted() {
    use kube::runtime::watcher;

    let server = KubeServer::start().await;
    server.register_crd(pinned_repository_crd());
    server.set_bookmark_interval(Duration::from_millis(200));
    let repo_value = |name: &str, url: &str| {
        json!({
            "apiVersion": "tagpin.dev/v1alpha1",
            "kind": "PinnedRepository",
            "metadata": { "name": name, "namespace": "shop", "labels": { "team": "web" } },
            "spec": { "url": url },
        })
    };
    server.apply(repo_value("old", "https://git.example/old.git"));
    let repos: Api<DynamicObject> =
        Api::namespaced_with(server.client().await, "shop", &pinned_repository_resource());
    let mut events = watcher::watcher(repos, watcher::Config::default().labels("team=web")).boxed();

    async fn next(
        events: &mut (impl futures::Stream<Item = Result<watcher::Event<DynamicObject>, watcher::Error>>
                  + Unpin),
    ) -> watcher::Event<DynamicObject> {
        tokio::time::timeout(Duration::from_secs(10), events.try_next())
            .await
            .expect("a watcher event within 10 s")
            .unwrap()
            .unwrap()
    }
    let name = |o: &DynamicObject| o.name_any();
    assert!(matches!(next(&mut events).await, watcher::Event::Init));
    assert!(matches!(next(&mut events).await, watcher::Event::InitApply(o) if name(&o) == "old"));
    assert!(matches!(next(&mut events).await, watcher::Event::InitDone));

    server.apply(repo_value("new", "https://git.example/new.git"));
    assert!(matches!(next(&mut events).await, watcher::Event::Apply(o) if name(&o) == "new"));
    server.set_status(
        "pinnedrepository",
        "shop",
        "new",
        json!({ "conditions": [{ "type": "Ready", "status": "True" }] }),
    );
    match next(&mut events).await {
        watcher::Event::Apply(o) => assert_eq!(o.data["status"]["conditions"][0]["status"], "True"),
        other => panic!("expected the status change, got {other:?}"),
    }
    assert!(server.delete("pinrepo", "shop", "old"));
    assert!(matches!(next(&mut events).await, watcher::Event::Delete(o) if name(&o) == "old"));
}

#[tokio::test]
async fn secrets_are_watched_by_name_and_a_rotation_is_seen() {
    use kube::runtime::watcher;
    use support::kube::secret;

    let server = KubeServer::start().await;
    server.apply(secret(
        "shop",
        "git-creds",
        &[("tagpin.dev/credentials", "git")],
        &[("token", "one")],
    ));
    server.apply(secret(
        "shop",
        "other",
        &[("tagpin.dev/credentials", "git")],
        &[("token", "x")],
    ));
    let secrets: Api<Secret> = Api::namespaced(server.client().await, "shop");
    let config = watcher::Config::default()
        .fields("metadata.name=git-creds")
        .labels("tagpin.dev/credentials=git");
    let mut events = watcher::watcher(secrets, config).boxed();
    let mut seen = Vec::new();
    let token =
        |s: &Secret| String::from_utf8(s.data.as_ref().unwrap()["token"].0.clone()).unwrap();
    loop {
        let event = tokio::time::timeout(Duration::from_secs(10), events.try_next())
            .await
            .expect("a watcher event within 10 s")
            .unwrap()
            .unwrap();
        match event {
            watcher::Event::InitApply(s) => seen.push((s.name_any(), token(&s))),
            watcher::Event::InitDone => break,
            _ => {}
        }
    }
    assert_eq!(seen, [("git-creds".to_string(), "one".to_string())]);

    server.rotate_secret("shop", "other", &[("token", "ignored")]);
    server.rotate_secret("shop", "git-creds", &[("token", "two")]);
    let event = tokio::time::timeout(Duration::from_secs(10), events.try_next())
        .await
        .expect("the rotation within 10 s")
        .unwrap()
        .unwrap();
    match event {
        watcher::Event::Apply(s) => assert_eq!(
            (s.name_any(), token(&s)),
            ("git-creds".to_string(), "two".to_string())
        ),
        other => panic!("expected the rotated Secret, got {other:?}"),
    }
    assert_eq!(server.request_count("watch", "secrets"), 1);
}

#[tokio::test]
async fn leases_conflict_on_a_stale_update_and_on_a_racing_create() {
    use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};

    let server = KubeServer::start().await;
    server.grant(Grant::namespaced(
        "tagpin",
        &["get", "create", "update"],
        &["leases"],
    ));
    let leases: Api<Lease> = Api::namespaced(server.client().await, "tagpin");
    let lease = |holder: &str| Lease {
        metadata: kube::api::ObjectMeta {
            name: Some("tagpin-leader".to_string()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.to_string()),
            lease_duration_seconds: Some(15),
            lease_transitions: Some(0),
            ..Default::default()
        }),
    };
    let first = leases
        .create(&PostParams::default(), &lease("a"))
        .await
        .unwrap();
    let racing = api_error(
        leases
            .create(&PostParams::default(), &lease("b"))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (racing.code, racing.reason.as_str()),
        (409, "AlreadyExists")
    );

    let mut renewed = first.clone();
    renewed.spec.as_mut().unwrap().renew_time =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
            k8s_openapi::jiff::Timestamp::now(),
        ));
    let renewed = leases
        .replace("tagpin-leader", &PostParams::default(), &renewed)
        .await
        .unwrap();
    assert_ne!(
        renewed.metadata.resource_version,
        first.metadata.resource_version
    );
    assert!(
        renewed.metadata.generation.is_none(),
        "Leases have no generation"
    );

    // `b` read the Lease before `a` renewed it: its takeover is refused.
    let mut takeover = first.clone();
    takeover.spec.as_mut().unwrap().holder_identity = Some("b".to_string());
    let stale = api_error(
        leases
            .replace("tagpin-leader", &PostParams::default(), &takeover)
            .await
            .unwrap_err(),
    );
    assert_eq!((stale.code, stale.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        server.get("Lease", "tagpin", "tagpin-leader").unwrap()["spec"]["holderIdentity"],
        "a"
    );

    // Without the grant (another namespace), a write is 403 and kept for the test to see.
    let elsewhere: Api<Lease> = Api::namespaced(server.client().await, "default");
    let denied = api_error(
        elsewhere
            .create(&PostParams::default(), &lease("c"))
            .await
            .unwrap_err(),
    );
    assert_eq!(denied.code, 403);
    assert_eq!(server.take_writes().len(), 1);

    let counts = server.request_counts();
    assert_eq!(counts[&("create".to_string(), "leases".to_string())], 3);
    assert_eq!(counts[&("update".to_string(), "leases".to_string())], 2);
}

#[tokio::test]
async fn a_kube_recorder_creates_events_then_patches_them_as_a_series() {
    use k8s_openapi::api::core::v1::{Event as CoreEvent, ObjectReference};
    use kube::runtime::events::{Event, EventType, Recorder, Reporter};

    let server = KubeServer::start().await;
    server.grant(Grant::namespaced("shop", &["create", "patch"], &["events"]));
    let client = server.client().await;
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "tagpin".into(),
            instance: Some("tagpin-0".into()),
        },
    );
    let reference = ObjectReference {
        api_version: Some("tagpin.dev/v1alpha1".into()),
        kind: Some("PinnedRepository".into()),
        name: Some("web".into()),
        namespace: Some("shop".into()),
        ..Default::default()
    };
    let event = Event {
        type_: EventType::Normal,
        reason: "Pinned".into(),
        note: Some("pinned 2 images".into()),
        action: "Reconcile".into(),
        secondary: None,
    };
    recorder.publish(&event, &reference).await.unwrap();
    recorder.publish(&event, &reference).await.unwrap();

    let events = server.events("shop");
    assert_eq!(events.len(), 1, "{events:#?}");
    assert_eq!(events[0]["apiVersion"], "events.k8s.io/v1");
    assert_eq!(events[0]["reason"], "Pinned");
    assert_eq!(events[0]["regarding"]["name"], "web");
    assert_eq!(events[0]["series"]["count"], 2);
    assert_eq!(server.request_count("create", "events"), 1);
    assert_eq!(server.request_count("patch", "events"), 1);

    // An old-style core Event is recorded too.
    let core: Api<CoreEvent> = Api::namespaced(client, "shop");
    let old_style: CoreEvent = serde_json::from_value(json!({
        "metadata": { "name": "web.1" },
        "involvedObject": { "kind": "PinnedRepository", "name": "web", "namespace": "shop" },
        "reason": "Verified",
        "message": "converged",
        "type": "Normal",
    }))
    .unwrap();
    core.create(&PostParams::default(), &old_style)
        .await
        .unwrap();
    let events = server.events("shop");
    assert_eq!(events.len(), 2);
    assert_eq!(events[1]["apiVersion"], "v1");
    assert_eq!(events[1]["reason"], "Verified");
    server.assert_no_writes();
}

#[tokio::test]
async fn deletion_waits_for_finalizers() {
    let server = KubeServer::start().await;
    let repos = pinned_repositories(&server).await;
    let mut repo = pinned_repository("web", "https://git.example/web.git");
    repo.metadata.finalizers = Some(vec!["tagpin.dev/cleanup".to_string()]);
    repos.create(&PostParams::default(), &repo).await.unwrap();

    repos.delete("web", &DeleteParams::default()).await.unwrap();
    let deleting = repos.get("web").await.unwrap();
    assert!(deleting.metadata.deletion_timestamp.is_some());
    assert_eq!(deleting.metadata.generation, Some(1));

    repos
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Json::<()>(serde_json::from_value(json!([
                { "op": "test", "path": "/metadata/finalizers/0", "value": "tagpin.dev/cleanup" },
                { "op": "remove", "path": "/metadata/finalizers/0" },
            ])).unwrap()),
        )
        .await
        .unwrap();
    let gone = api_error(repos.get("web").await.unwrap_err());
    assert_eq!(gone.code, 404);
    server.assert_no_writes();
}

/// The real kubectl reads this server's discovery and watches: `kubectl
/// wait --for=condition=Ready` on a custom resource returns once a
/// controller sets the condition.
#[tokio::test]
async fn kubectl_waits_for_a_condition_on_a_custom_resource() {
    let server = KubeServer::start().await;
    // kubectl sends no bearer token over plain HTTP.
    server.allow_anonymous();
    server.register_crd(pinned_repository_crd());
    server.apply(json!({
        "apiVersion": "tagpin.dev/v1alpha1",
        "kind": "PinnedRepository",
        "metadata": { "name": "x", "namespace": "default" },
        "spec": { "url": "https://git.example/x.git" },
    }));
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = server.kubeconfig(dir.path());
    let kubectl = std::env::var_os("KUBECTL").unwrap_or_else(|| "kubectl".into());
    let run = |args: &[&str]| {
        tokio::process::Command::new(&kubectl)
            .args(args)
            .env("KUBECONFIG", &kubeconfig)
            .env("HOME", dir.path())
            .kill_on_drop(true)
            .output()
    };

    let got = run(&["get", "pinrepo", "-o", "name"]).await.unwrap();
    assert!(got.status.success(), "{}", support::output_text(&got));
    assert_eq!(
        String::from_utf8_lossy(&got.stdout).trim(),
        "pinnedrepository.tagpin.dev/x"
    );

    let wait = tokio::spawn(run(&[
        "wait",
        "--for=condition=Ready",
        "pinnedrepository/x",
        "--timeout=30s",
    ]));
    // kubectl is waiting once it watches the object.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !server
        .requests()
        .iter()
        .any(|r| r.verb == "watch" && r.resource == "pinnedrepositories")
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "kubectl never watched: {:#?}",
            server.requests()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.set_status(
        "PinnedRepository",
        "default",
        "x",
        json!({ "conditions": [{ "type": "Ready", "status": "True", "reason": "Pinned" }] }),
    );
    let out = wait.await.unwrap().unwrap();
    assert!(out.status.success(), "{}", support::output_text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "pinnedrepository.tagpin.dev/x condition met"
    );
    server.assert_no_writes();
}

/// A real kube client of the `test` context that impersonates `user` (and
/// `groups`), as `kubectl --as` and the operator's tenant clusters do.
async fn impersonating(server: &KubeServer, user: &str, groups: &[&str]) -> Client {
    let kubeconfig = Kubeconfig::from_yaml(&server.kubeconfig_yaml()).unwrap();
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    config.auth_info.impersonate = Some(user.to_string());
    config.auth_info.impersonate_groups =
        (!groups.is_empty()).then(|| groups.iter().map(|g| g.to_string()).collect());
    Client::try_from(config).unwrap()
}

const TEAM_A_SA: &str = "system:serviceaccount:team-a:tagpin";

#[tokio::test]
async fn impersonating_a_service_account_needs_the_impersonate_verb_in_its_namespace() {
    let server = KubeServer::start().await;
    server.apply(pod("team-a", "web-1", &[], &[("web", "i:1")]));
    let client = impersonating(&server, TEAM_A_SA, &[]).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "team-a");

    // The token's user reads every pod, but may impersonate nobody.
    let status = api_error(pods.list(&ListParams::default()).await.unwrap_err());
    assert_eq!((status.code, status.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        status.message,
        "serviceaccounts \"tagpin\" is forbidden: User \"system:serviceaccount:tagpin:tagpin\" cannot impersonate resource \"serviceaccounts\" in API group \"\" in the namespace \"team-a\""
    );
    let details = status.details.as_ref().unwrap();
    assert_eq!(
        (details.kind.as_str(), details.name.as_str()),
        ("serviceaccounts", "tagpin")
    );

    // Granted in another namespace only: still refused.
    server.grant(Grant::namespaced(
        "team-b",
        &["impersonate"],
        &["serviceaccounts"],
    ));
    assert_eq!(
        api_error(pods.list(&ListParams::default()).await.unwrap_err()).code,
        403
    );

    // Granted in the account's namespace: the request goes through, and the
    // account holds nothing yet.
    server.grant(Grant::namespaced(
        "team-a",
        &["impersonate"],
        &["serviceaccounts"],
    ));
    let status = api_error(pods.list(&ListParams::default()).await.unwrap_err());
    assert_eq!(
        status.message,
        format!("pods is forbidden: User \"{TEAM_A_SA}\" cannot list resource \"pods\" in API group \"\" in the namespace \"team-a\"")
    );

    // What a RoleBinding gives the account is all it sees.
    server.grant_to(
        TEAM_A_SA,
        Grant::namespaced("team-a", &["get", "list", "watch"], &["pods"]),
    );
    let listed = pods.list(&ListParams::default()).await.unwrap();
    assert_eq!(names(&listed.items), ["web-1"]);
    let team_b: Api<Pod> = Api::namespaced(client.clone(), "team-b");
    let status = api_error(team_b.list(&ListParams::default()).await.unwrap_err());
    assert_eq!(
        status.message,
        format!("pods is forbidden: User \"{TEAM_A_SA}\" cannot list resource \"pods\" in API group \"\" in the namespace \"team-b\"")
    );
    let everywhere: Api<Pod> = Api::all(client);
    let status = api_error(everywhere.list(&ListParams::default()).await.unwrap_err());
    assert!(
        status.message.ends_with("at the cluster scope"),
        "{}",
        status.message
    );

    // The server saw who was impersonated; the token's own reads are unchanged.
    let last = server.requests().pop().unwrap();
    assert_eq!(last.impersonate_user.as_deref(), Some(TEAM_A_SA));
    assert!(last.impersonate_groups.is_empty());
    let own: Api<Pod> = Api::namespaced(server.client().await, "team-b");
    own.list(&ListParams::default()).await.unwrap();
    assert_eq!(server.requests().pop().unwrap().impersonate_user, None);
}

#[tokio::test]
async fn an_impersonated_service_account_holds_its_groups_grants_and_a_cluster_wide_impersonate_suffices(
) {
    let server = KubeServer::start().await;
    server.apply(pod("team-a", "web-1", &[], &[("web", "i:1")]));
    server.grant(Grant::cluster(&["impersonate"], &["serviceaccounts"]));
    let pods = |client: Client| Api::<Pod>::namespaced(client, "team-a");

    // The server adds the account's groups: a binding to any of them counts.
    for group in [
        "system:serviceaccounts:team-a",
        "system:serviceaccounts",
        "system:authenticated",
    ] {
        let server = KubeServer::start().await;
        server.apply(pod("team-a", "web-1", &[], &[("web", "i:1")]));
        server.grant(Grant::cluster(&["impersonate"], &["serviceaccounts"]));
        server.grant_to(group, Grant::namespaced("team-a", &["list"], &["pods"]));
        let client = impersonating(&server, TEAM_A_SA, &[]).await;
        pods(client).list(&ListParams::default()).await.unwrap();
    }
    // Another namespace's group is not the account's.
    server.grant_to(
        "system:serviceaccounts:team-b",
        Grant::cluster(&["list"], &["pods"]),
    );
    let client = impersonating(&server, TEAM_A_SA, &[]).await;
    assert_eq!(
        api_error(pods(client).list(&ListParams::default()).await.unwrap_err()).code,
        403
    );

    // Naming groups needs `impersonate` on groups (and the account's own
    // groups are then not added).
    let client = impersonating(&server, TEAM_A_SA, &["system:masters"]).await;
    let status = api_error(
        pods(client.clone())
            .list(&ListParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(
        status.message,
        "groups \"system:masters\" is forbidden: User \"system:serviceaccount:tagpin:tagpin\" cannot impersonate resource \"groups\" in API group \"\" at the cluster scope"
    );
    server.grant(Grant::cluster(&["impersonate"], &["groups"]));
    server.grant_to("system:masters", Grant::cluster(&["*"], &["*"]));
    pods(client).list(&ListParams::default()).await.unwrap();
    let last = server.requests().pop().unwrap();
    assert_eq!(last.impersonate_groups, ["system:masters"]);

    // A user that is not a ServiceAccount needs `impersonate` on users.
    let client = impersonating(&server, "jane", &[]).await;
    let status = api_error(pods(client).list(&ListParams::default()).await.unwrap_err());
    assert_eq!(
        status.message,
        "users \"jane\" is forbidden: User \"system:serviceaccount:tagpin:tagpin\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope"
    );
}

#[tokio::test]
async fn an_impersonated_service_account_writes_only_what_it_is_granted() {
    let server = KubeServer::start().await;
    server.grant(Grant::cluster(&["impersonate"], &["serviceaccounts"]));
    server.grant(Grant::cluster(&["create"], &["pods"]));
    let client = impersonating(&server, TEAM_A_SA, &[]).await;
    let pods: Api<Pod> = Api::namespaced(client, "team-a");
    let new: Pod = serde_json::from_value(pod("team-a", "x", &[], &[("c", "i:1")])).unwrap();
    let status = api_error(pods.create(&PostParams::default(), &new).await.unwrap_err());
    assert_eq!(
        status.message,
        format!("pods is forbidden: User \"{TEAM_A_SA}\" cannot create resource \"pods\" in API group \"\" in the namespace \"team-a\"")
    );
    assert_eq!(server.take_writes().len(), 1);
    server.grant_to(
        TEAM_A_SA,
        Grant::namespaced("team-a", &["create"], &["pods"]),
    );
    pods.create(&PostParams::default(), &new).await.unwrap();
}

#[tokio::test]
async fn token_and_access_reviews_are_answered_and_validated_as_the_real_server_does() {
    use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
    };
    let server = KubeServer::start().await;
    let client = server.client().await;
    let tokens: Api<TokenReview> = Api::all(client.clone());
    let review = |token: &str| TokenReview {
        spec: TokenReviewSpec {
            token: Some(token.into()),
            audiences: None,
        },
        ..TokenReview::default()
    };
    // Without `create` on tokenreviews (system:auth-delegator), the real 403.
    let refused = api_error(
        tokens
            .create(&PostParams::default(), &review("t"))
            .await
            .unwrap_err(),
    );
    assert_eq!(refused.code, 403);
    assert!(refused
        .message
        .contains("cannot create resource \"tokenreviews\""));
    // Refused creates are kept as refused writes; this one was on purpose.
    assert_eq!(server.take_writes().len(), 1);
    server.grant(Grant::cluster(
        &["create"],
        &["tokenreviews", "subjectaccessreviews"],
    ));
    server.add_user_token("t-alice", "alice", &["devs"]);
    let known = tokens
        .create(&PostParams::default(), &review("t-alice"))
        .await
        .unwrap();
    let status = known.status.unwrap();
    assert_eq!(status.authenticated, Some(true));
    assert_eq!(status.user.unwrap().groups, Some(vec!["devs".to_string()]));
    let unknown = tokens
        .create(&PostParams::default(), &review("t-mallory"))
        .await
        .unwrap();
    assert_eq!(unknown.status.unwrap().authenticated, None);
    let empty = api_error(
        tokens
            .create(&PostParams::default(), &review(""))
            .await
            .unwrap_err(),
    );
    assert_eq!(empty.code, 422);

    server.grant_to(
        "devs",
        Grant::namespaced("team-a", &["get"], &["pinnedrepositories"]),
    );
    let access: Api<SubjectAccessReview> = Api::all(client);
    let ask = |namespace: &str, attributes: bool| SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some("alice".into()),
            groups: Some(vec!["devs".into()]),
            resource_attributes: attributes.then(|| ResourceAttributes {
                namespace: Some(namespace.into()),
                verb: Some("get".into()),
                group: Some("tagpin.dev".into()),
                resource: Some("pinnedrepositories".into()),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    for (namespace, allowed) in [("team-a", true), ("team-b", false)] {
        let answer = access
            .create(&PostParams::default(), &ask(namespace, true))
            .await
            .unwrap();
        assert_eq!(answer.status.unwrap().allowed, allowed, "{namespace}");
    }
    let invalid = api_error(
        access
            .create(&PostParams::default(), &ask("team-a", false))
            .await
            .unwrap_err(),
    );
    assert_eq!(invalid.code, 422);
    assert!(invalid.message.contains("exactly one of"));
}
