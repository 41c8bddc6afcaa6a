//! tagpin's registry client against a real distribution registry (Debian's `docker-registry`),
//! started per test on loopback, with images pushed through the real OCI push API.
//! Faults a real registry will not produce on demand come from a proxy in front of it.

use crate::support;

use std::time::Duration;

use support::registry::{
    Fault, FaultProxy, FaultRule, ImageKind, IndexKind, Mode, TestRegistry, DOCKER_SCHEMA1_SIGNED,
};
use tagpin::reference::{Digest, Reference};
use tagpin::registry::auth::Credential;
use tagpin::registry::{
    Client, CredentialStore, ManifestKind, RegistryError, RetryPolicy, Settings,
};

fn fast_retry() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 3,
        base_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(50),
        max_retry_after: Duration::from_secs(5),
    }
}

/// Settings reaching `host` over plain HTTP, with fast retries.
fn settings_for(host: &str) -> Settings {
    Settings {
        insecure_hosts: vec![host.to_string()],
        retry: fast_retry(),
        request_timeout: Duration::from_secs(10),
        ..Settings::default()
    }
}

fn client_for(host: &str) -> Client {
    Client::new(settings_for(host)).expect("client")
}

fn image(host: &str, rest: &str) -> Reference {
    Reference::parse(&format!("{host}/{rest}")).expect("valid reference")
}

fn digest(s: &str) -> Digest {
    Digest::parse(s).expect("valid digest")
}

/// A plain registry with `acme/web:1` pushed, behind a proxy applying `rules`.
async fn web_1_behind(
    rules: Vec<FaultRule>,
) -> (TestRegistry, support::registry::ImageDigests, FaultProxy) {
    let registry = TestRegistry::start(Mode::Plain).await;
    let pushed = registry.push_image("acme/web", "1", "w").await;
    let proxy = FaultProxy::start(&registry.base_url(), rules).await;
    (registry, pushed, proxy)
}

/// What resolving `acme/web:1` through `proxy` fails with.
async fn resolve_web_1_error(proxy: &FaultProxy) -> RegistryError {
    client_for(&proxy.host())
        .resolve(&image(&proxy.host(), "acme/web:1"))
        .await
        .unwrap_err()
}

#[tokio::test]
async fn a_tag_resolves_to_the_digest_of_the_pushed_manifest() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let oci = registry.push_image("acme/web", "1.0", "web-1").await;
    let docker = registry
        .push_image_of_kind("acme/api", "v2", ImageKind::DockerV2, "api-2")
        .await;
    let client = client_for(&registry.host());

    let web = client
        .resolve(&image(&registry.host(), "acme/web:1.0"))
        .await
        .unwrap();
    let api = client
        .resolve(&image(&registry.host(), "acme/api:v2"))
        .await
        .unwrap();

    assert_eq!(web.digest, digest(&oci.manifest));
    assert_eq!(web.kind, ManifestKind::Image);
    assert_eq!(api.digest, digest(&docker.manifest));
}

#[tokio::test]
async fn a_multi_arch_tag_resolves_to_its_index_never_to_the_amd64_child() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let platforms = [("linux", "amd64"), ("linux", "arm64")];
    let oci = registry
        .push_index("acme/multi", "oci", IndexKind::Oci, &platforms, "m1")
        .await;
    let list = registry
        .push_index(
            "acme/multi",
            "list",
            IndexKind::DockerManifestList,
            &platforms,
            "m2",
        )
        .await;
    let client = client_for(&registry.host());

    for (tag, pushed) in [("oci", &oci), ("list", &list)] {
        let resolved = client
            .resolve(&image(&registry.host(), &format!("acme/multi:{tag}")))
            .await
            .unwrap();
        assert_eq!(resolved.digest, digest(&pushed.index), "{tag}");
        assert_eq!(resolved.kind, ManifestKind::Index, "{tag}");
        for child in &pushed.children {
            assert_ne!(resolved.digest, digest(&child.manifest), "{tag}");
        }
    }
}

#[tokio::test]
async fn a_moved_tag_resolves_to_its_new_digest() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let first = registry.push_image("acme/web", "stable", "one").await;
    let client = client_for(&registry.host());
    let r = image(&registry.host(), "acme/web:stable");
    assert_eq!(
        client.resolve(&r).await.unwrap().digest,
        digest(&first.manifest)
    );

    let second = registry.push_image("acme/web", "stable", "two").await;
    assert_ne!(first.manifest, second.manifest);
    let fresh = client_for(&registry.host());
    assert_eq!(
        fresh.resolve(&r).await.unwrap().digest,
        digest(&second.manifest)
    );
}

#[tokio::test]
async fn an_index_lists_its_platform_children_and_each_child_its_config() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let pushed = registry
        .push_index(
            "acme/multi",
            "1",
            IndexKind::Oci,
            &[("linux", "amd64"), ("linux", "arm64")],
            "c",
        )
        .await;
    let client = client_for(&registry.host());
    let r = image(&registry.host(), "acme/multi:1");

    let index = client.manifest(&r, &digest(&pushed.index)).await.unwrap();
    assert_eq!(index.kind, ManifestKind::Index);
    let children: Vec<(String, Option<String>)> = index
        .children
        .iter()
        .map(|c| (c.digest.to_string(), c.platform.clone()))
        .collect();
    assert_eq!(
        children,
        vec![
            (
                pushed.children[0].manifest.clone(),
                Some("linux/amd64".to_string())
            ),
            (
                pushed.children[1].manifest.clone(),
                Some("linux/arm64".to_string())
            ),
        ]
    );

    let child = client
        .manifest(&r, &digest(&pushed.children[1].manifest))
        .await
        .unwrap();
    assert_eq!(child.config, Some(digest(&pushed.children[1].config)));
}

#[tokio::test]
async fn tag_listing_returns_every_tag_of_a_real_registry() {
    let registry = TestRegistry::start(Mode::Plain).await;
    for tag in ["a", "b", "c", "d", "e"] {
        registry.push_image("acme/paged", tag, tag).await;
    }
    let client = client_for(&registry.host());
    let mut tags = client
        .list_tags(&image(&registry.host(), "acme/paged"), 2)
        .await
        .unwrap();
    // distribution 2.8 neither sorts nor paginates (`n` arrived in distribution 3).
    tags.sort();
    assert_eq!(tags, vec!["a", "b", "c", "d", "e"]);
}

/// distribution 2.8 ignores `n`, so pagination is exercised against a server that pages
/// exactly as the OCI distribution spec's "Listing Tags" section says: at most `n` tags
/// after `last`, in lexical order, with a `Link: <…>; rel="next"` header while more remain.
#[tokio::test]
async fn tag_listing_follows_link_pagination_to_the_end() {
    use axum::extract::{Query, State};
    use axum::response::IntoResponse;
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};

    type Seen = Arc<Mutex<Vec<String>>>;
    async fn tags(
        State(seen): State<Seen>,
        Query(q): Query<HashMap<String, String>>,
    ) -> axum::response::Response {
        let all = ["a", "b", "c", "d", "e"];
        seen.lock()
            .unwrap()
            .push(format!("n={:?} last={:?}", q.get("n"), q.get("last")));
        let n: usize = q.get("n").and_then(|n| n.parse().ok()).unwrap_or(all.len());
        let after: Vec<&str> = all
            .iter()
            .copied()
            .filter(|t| q.get("last").is_none_or(|last| *t > last.as_str()))
            .collect();
        let page: Vec<&str> = after.iter().copied().take(n).collect();
        let body = serde_json::json!({"name": "acme/paged", "tags": page});
        let mut response = axum::Json(body).into_response();
        if after.len() > n {
            let link = format!(
                "</v2/acme/paged/tags/list?n={n}&last={}>; rel=\"next\"",
                page[page.len() - 1]
            );
            response.headers_mut().insert("link", link.parse().unwrap());
        }
        response
    }
    let seen: Seen = Arc::default();
    let app = axum::Router::new()
        .route("/v2/acme/paged/tags/list", axum::routing::get(tags))
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let host = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move { axum::serve(listener, app).await });

    let client = client_for(&host);
    let tags = client
        .list_tags(&image(&host, "acme/paged"), 2)
        .await
        .unwrap();

    assert_eq!(tags, vec!["a", "b", "c", "d", "e"]);
    assert_eq!(
        *seen.lock().unwrap(),
        vec![
            r#"n=Some("2") last=None"#,
            r#"n=Some("2") last=Some("b")"#,
            r#"n=Some("2") last=Some("d")"#,
        ]
    );
}

#[tokio::test]
async fn a_missing_tag_is_not_found_naming_image_and_host() {
    let registry = TestRegistry::start(Mode::Plain).await;
    registry.push_image("acme/web", "1.0", "x").await;
    let client = client_for(&registry.host());
    let err = client
        .resolve(&image(&registry.host(), "acme/web:nope"))
        .await
        .unwrap_err();
    assert!(matches!(err, RegistryError::NotFound { .. }), "{err}");
    let message = err.to_string();
    assert!(
        message.contains("acme/web:nope") && message.contains(&registry.host()),
        "{message}"
    );
}

#[tokio::test]
async fn one_failing_image_does_not_stop_the_others_and_each_distinct_tag_is_asked_once() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let web = registry.push_image("acme/web", "1.0", "w").await;
    let proxy = FaultProxy::start(&registry.base_url(), vec![]).await;
    let host = proxy.host();
    let client = client_for(&host);
    let refs = [
        image(&host, "acme/web:1.0"),
        image(
            &host,
            "acme/web:1.0@sha256:0000000000000000000000000000000000000000000000000000000000000000",
        ),
        image(&host, "acme/web:1.0"),
        image(&host, "acme/missing:1"),
    ];

    let results = client.resolve_all(refs.iter()).await;

    assert_eq!(results.len(), 2, "two distinct repo:tag pairs");
    let ok = results
        .iter()
        .find(|(k, _)| k.repository == "acme/web")
        .unwrap();
    assert_eq!(ok.1.as_ref().unwrap().digest, digest(&web.manifest));
    let missing = results
        .iter()
        .find(|(k, _)| k.repository == "acme/missing")
        .unwrap();
    assert!(matches!(missing.1, Err(RegistryError::NotFound { .. })));
    assert_eq!(proxy.count("HEAD", "/manifests/"), 2);
    assert_eq!(client.stats().manifest_requests, 2);
}

#[tokio::test]
async fn every_manifest_request_accepts_both_index_types() {
    let registry = TestRegistry::start(Mode::Plain).await;
    registry.push_image("acme/web", "1.0", "w").await;
    let proxy = FaultProxy::start(&registry.base_url(), vec![]).await;
    let client = client_for(&proxy.host());
    client
        .resolve(&image(&proxy.host(), "acme/web:1.0"))
        .await
        .unwrap();
    let requests = proxy.requests();
    let head = requests.iter().find(|r| r.method == "HEAD").unwrap();
    let accept = head.accept.as_deref().unwrap_or("");
    for media_type in [
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    ] {
        assert!(
            accept.contains(media_type),
            "{media_type} missing in {accept}"
        );
    }
}

#[tokio::test]
async fn basic_auth_registry_works_with_credentials_from_a_docker_config_file() {
    let registry = TestRegistry::start(Mode::htpasswd("alice", "s3cret")).await;
    let pushed = registry.push_image("acme/private", "1", "p").await;
    let config_dir = tempfile::tempdir().unwrap();
    let auth = base64_encode("alice:s3cret");
    std::fs::write(
        config_dir.path().join("config.json"),
        format!(
            r#"{{"auths":{{"http://{}":{{"auth":"{auth}"}}}}}}"#,
            registry.host()
        ),
    )
    .unwrap();
    let mut settings = settings_for(&registry.host());
    settings.credentials = CredentialStore::load_dir(config_dir.path()).unwrap();
    let client = Client::new(settings).unwrap();

    let resolved = client
        .resolve(&image(&registry.host(), "acme/private:1"))
        .await
        .unwrap();
    assert_eq!(resolved.digest, digest(&pushed.manifest));
}

#[tokio::test]
async fn basic_auth_registry_without_or_with_wrong_credentials_says_which() {
    let registry = TestRegistry::start(Mode::htpasswd("alice", "s3cret")).await;
    registry.push_image("acme/private", "1", "p").await;
    let r = image(&registry.host(), "acme/private:1");

    let anonymous = client_for(&registry.host());
    let err = anonymous.resolve(&r).await.unwrap_err().to_string();
    assert!(
        err.contains("requires credentials") && err.contains(&registry.host()),
        "{err}"
    );

    let mut settings = settings_for(&registry.host());
    settings.credentials.insert(
        &registry.host(),
        Credential {
            username: "alice".into(),
            password: "wrong-password-123".into(),
        },
    );
    let wrong = Client::new(settings).unwrap();
    let err = wrong.resolve(&r).await.unwrap_err().to_string();
    assert!(err.contains("were refused"), "{err}");
    assert!(
        !err.contains("wrong-password-123"),
        "password leaked: {err}"
    );
}

#[tokio::test]
async fn token_registry_serves_anonymous_pulls_and_tokens_are_reused() {
    let registry = TestRegistry::start(Mode::token("bob", "pw")).await;
    let one = registry.push_image("acme/tok", "1", "t1").await;
    let two = registry.push_image("acme/tok", "2", "t2").await;
    let client = client_for(&registry.host());

    let refs = [
        image(&registry.host(), "acme/tok:1"),
        image(&registry.host(), "acme/tok:2"),
    ];
    let first = client.resolve(&refs[0]).await.unwrap();
    let second = client.resolve(&refs[1]).await.unwrap();

    assert_eq!(first.digest, digest(&one.manifest));
    assert_eq!(second.digest, digest(&two.manifest));
    assert_eq!(
        registry.token_request_count(),
        1,
        "one token for one repository"
    );
}

#[tokio::test]
async fn token_registry_accepts_access_token_and_sends_credentials_to_the_realm() {
    let registry = TestRegistry::start(Mode::token("bob", "pw")).await;
    let pushed = registry.push_image("acme/tok", "1", "t1").await;
    let server = registry.token_server().unwrap();
    server.set_token_field(support::registry::TokenField::AccessToken);
    let mut settings = settings_for(&registry.host());
    settings.credentials.insert(
        &registry.host(),
        Credential {
            username: "bob".into(),
            password: "pw".into(),
        },
    );
    let client = Client::new(settings).unwrap();

    let resolved = client
        .resolve(&image(&registry.host(), "acme/tok:1"))
        .await
        .unwrap();

    assert_eq!(resolved.digest, digest(&pushed.manifest));
    let requests: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| !r.from_harness)
        .collect();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].user.as_deref(), Some("bob"));
}

#[tokio::test]
async fn token_registry_with_wrong_password_is_unauthorized_without_leaking_it() {
    let registry = TestRegistry::start(Mode::token("bob", "pw")).await;
    registry.push_image("acme/tok", "1", "t1").await;
    let mut settings = settings_for(&registry.host());
    settings.credentials.insert(
        &registry.host(),
        Credential {
            username: "bob".into(),
            password: "not-the-password".into(),
        },
    );
    let client = Client::new(settings).unwrap();
    let err = client
        .resolve(&image(&registry.host(), "acme/tok:1"))
        .await
        .unwrap_err();
    assert!(matches!(err, RegistryError::Unauthorized { .. }), "{err}");
    assert!(!format!("{err} {err:?}").contains("not-the-password"));
}

#[tokio::test]
async fn tls_registry_is_trusted_through_a_ca_file_and_refused_without_it() {
    let registry = TestRegistry::start(Mode::Tls).await;
    let pushed = registry.push_image("acme/secure", "1", "s").await;
    let r = image(&registry.host(), "acme/secure:1");

    let untrusted = Client::new(Settings {
        retry: fast_retry(),
        ..Settings::default()
    })
    .unwrap();
    let err = untrusted.resolve(&r).await.unwrap_err().to_string();
    assert!(err.contains("--ca-file"), "{err}");

    let trusted = Client::new(Settings {
        ca_files: vec![registry.ca_pem_path().unwrap().to_path_buf()],
        retry: fast_retry(),
        ..Settings::default()
    })
    .unwrap();
    assert_eq!(
        trusted.resolve(&r).await.unwrap().digest,
        digest(&pushed.manifest)
    );
}

#[tokio::test]
async fn rate_limited_requests_wait_for_retry_after_then_succeed() {
    let (_registry, pushed, proxy) = web_1_behind(vec![FaultRule::new(
        "HEAD",
        "/manifests/",
        Fault::too_many_requests(1),
    )
    .times(2)])
    .await;
    let client = client_for(&proxy.host());
    let started = std::time::Instant::now();
    let resolved = client
        .resolve(&image(&proxy.host(), "acme/web:1"))
        .await
        .unwrap();
    assert_eq!(resolved.digest, digest(&pushed.manifest));
    assert_eq!(proxy.count("HEAD", "/manifests/"), 3);
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "Retry-After: 1 was honoured twice"
    );
}

#[tokio::test]
async fn a_registry_that_keeps_failing_is_reported_after_bounded_retries() {
    let (_registry, _pushed, proxy) = web_1_behind(vec![FaultRule::any_method(
        "/manifests/",
        Fault::status(503),
    )])
    .await;
    let err = resolve_web_1_error(&proxy).await;
    assert!(
        matches!(
            err,
            RegistryError::Status {
                status: 503,
                attempts: 3,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(proxy.count("HEAD", "/manifests/"), 3);
}

#[tokio::test]
async fn a_retry_after_beyond_the_cap_fails_at_once_naming_it() {
    let (_registry, _pushed, proxy) = web_1_behind(vec![FaultRule::new(
        "HEAD",
        "/manifests/",
        Fault::too_many_requests(3600),
    )])
    .await;
    let err = resolve_web_1_error(&proxy).await;
    assert!(matches!(err, RegistryError::RateLimited { .. }), "{err}");
    assert!(err.to_string().contains("3600"), "{err}");
    assert_eq!(proxy.count("HEAD", "/manifests/"), 1);
}

#[tokio::test]
async fn client_errors_are_not_retried() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let proxy = FaultProxy::start(&registry.base_url(), vec![]).await;
    let client = client_for(&proxy.host());
    let err = client
        .resolve(&image(&proxy.host(), "acme/none:1"))
        .await
        .unwrap_err();
    assert!(matches!(err, RegistryError::NotFound { .. }), "{err}");
    assert_eq!(proxy.count("HEAD", "/manifests/"), 1);
}

#[tokio::test]
async fn without_a_digest_header_the_manifest_bytes_are_fetched_and_hashed() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let pushed = registry
        .push_index(
            "acme/multi",
            "1",
            IndexKind::DockerManifestList,
            &[("linux", "amd64"), ("linux", "arm64")],
            "h",
        )
        .await;
    let proxy = FaultProxy::start(
        &registry.base_url(),
        vec![FaultRule::any_method("/manifests/", Fault::RemoveDigest)],
    )
    .await;
    let client = client_for(&proxy.host());
    let resolved = client
        .resolve(&image(&proxy.host(), "acme/multi:1"))
        .await
        .unwrap();
    assert_eq!(resolved.digest, digest(&pushed.index));
    assert_eq!(resolved.kind, ManifestKind::Index);
    assert_eq!(proxy.count("GET", "/manifests/"), 1);
}

#[tokio::test]
async fn a_digest_header_that_does_not_match_the_body_pins_nothing() {
    let registry = TestRegistry::start(Mode::Plain).await;
    registry.push_image("acme/web", "1", "w").await;
    let liar = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
    let proxy = FaultProxy::start(
        &registry.base_url(),
        vec![
            FaultRule::new("HEAD", "/manifests/", Fault::RemoveDigest),
            FaultRule::new("GET", "/manifests/", Fault::ReplaceDigest(liar.into())),
        ],
    )
    .await;
    let err = resolve_web_1_error(&proxy).await;
    assert!(matches!(err, RegistryError::DigestMismatch { .. }), "{err}");
    assert!(err.to_string().contains(liar), "{err}");
}

#[tokio::test]
async fn fetching_a_manifest_by_digest_verifies_its_bytes() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let pushed = registry.push_image("acme/web", "1", "w").await;
    let other = registry.push_image("acme/web", "2", "other").await;
    // The proxy answers the request for `pushed` with the bytes of `other`.
    let other_bytes = registry.manifest_bytes("acme/web", &other.manifest).await;
    let proxy = FaultProxy::start(
        &registry.base_url(),
        vec![FaultRule::new(
            "GET",
            &pushed.manifest,
            Fault::fixed_body(200, support::registry::OCI_MANIFEST, other_bytes),
        )],
    )
    .await;
    let client = client_for(&proxy.host());
    let err = client
        .manifest(
            &image(&proxy.host(), "acme/web:1"),
            &digest(&pushed.manifest),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, RegistryError::DigestMismatch { .. }), "{err}");
}

#[tokio::test]
async fn a_schema1_manifest_is_refused_with_a_clear_error() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let schema1 = br#"{"schemaVersion":1,"name":"acme/old","tag":"1","architecture":"amd64","fsLayers":[],"history":[]}"#;
    let proxy = FaultProxy::start(
        &registry.base_url(),
        vec![FaultRule::any_method(
            "/manifests/",
            Fault::fixed_body(200, DOCKER_SCHEMA1_SIGNED, schema1.to_vec()),
        )],
    )
    .await;
    let client = client_for(&proxy.host());
    let err = client
        .resolve(&image(&proxy.host(), "acme/old:1"))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("schema 1") && err.contains("acme/old:1"),
        "{err}"
    );
}

#[tokio::test]
async fn docker_hub_rate_limit_headers_are_recorded() {
    let (_registry, _pushed, proxy) = web_1_behind(vec![FaultRule::any_method(
        "/manifests/",
        Fault::AddHeaders(vec![("ratelimit-remaining".into(), "99;w=21600".into())]),
    )])
    .await;
    let client = client_for(&proxy.host());
    client
        .resolve(&image(&proxy.host(), "acme/web:1"))
        .await
        .unwrap();
    assert_eq!(
        client.rate_limit_remaining(&proxy.host()).as_deref(),
        Some("99;w=21600")
    );
}

#[tokio::test]
async fn dropped_connections_are_retried() {
    let (_registry, pushed, proxy) = web_1_behind(vec![FaultRule::new(
        "HEAD",
        "/manifests/",
        Fault::DropConnection,
    )
    .times(1)])
    .await;
    let client = client_for(&proxy.host());
    let resolved = client
        .resolve(&image(&proxy.host(), "acme/web:1"))
        .await
        .unwrap();
    assert_eq!(resolved.digest, digest(&pushed.manifest));
}

#[tokio::test]
async fn an_unreachable_registry_is_reported_with_its_host() {
    let port = support::registry::free_port();
    let host = format!("127.0.0.1:{port}");
    let client = client_for(&host);
    let err = client
        .resolve(&image(&host, "acme/web:1"))
        .await
        .unwrap_err();
    assert!(matches!(err, RegistryError::Unreachable { .. }), "{err}");
    assert!(err.to_string().contains(&host), "{err}");
}

fn base64_encode(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(s)
}

#[tokio::test]
async fn a_hanging_registry_delays_only_its_own_images() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let pushed = registry.push_image("acme/web", "1", "w").await;
    // A registry that accepts connections and never answers.
    let hanging = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let hanging_host = hanging.local_addr().unwrap().to_string();
    let mut settings = settings_for(&registry.host());
    settings.insecure_hosts.push(hanging_host.clone());
    settings.request_timeout = Duration::from_secs(30);
    settings.resolve_budget = Duration::from_secs(1);
    let client = Client::new(settings).unwrap();
    let refs = [
        image(&registry.host(), "acme/web:1"),
        image(&hanging_host, "acme/slow:1"),
    ];

    let started = std::time::Instant::now();
    let results = client.resolve_all(refs.iter()).await;

    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let by_repo = |repo: &str| {
        results
            .iter()
            .find(|(k, _)| k.repository == repo)
            .unwrap()
            .1
    };
    assert_eq!(
        by_repo("acme/web").as_ref().unwrap().digest,
        digest(&pushed.manifest)
    );
    let err = by_repo("acme/slow").as_ref().unwrap_err().to_string();
    assert!(
        err.contains(&hanging_host) && err.contains("no answer within 1s"),
        "{err}"
    );
    drop(hanging);
}

/// `tagpin resolve` as a process, so that a panic shows as what it is: exit code 101.
async fn tagpin_resolve(host: &str, images: &[String]) -> std::process::Output {
    let home = tempfile::tempdir().unwrap();
    tokio::process::Command::new(env!("CARGO_BIN_EXE_tagpin"))
        .args(["--insecure-registry", host, "resolve"])
        .args(images)
        .env("HOME", home.path())
        .env_remove("DOCKER_CONFIG")
        .output()
        .await
        .expect("run tagpin")
}

fn output_text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[tokio::test]
async fn a_token_said_to_live_for_ever_resolves_without_a_panic() {
    let registry = TestRegistry::start(Mode::token("bob", "pw")).await;
    let pushed = registry.push_image("acme/tok", "1", "t1").await;
    registry
        .token_server()
        .unwrap()
        .set_expires_in(Some(u64::MAX));
    let host = registry.host();

    let out = tagpin_resolve(&host, &[format!("{host}/acme/tok:1")]).await;

    assert_eq!(out.status.code(), Some(0), "{}", output_text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&pushed.manifest),
        "{}",
        output_text(&out)
    );
}

#[tokio::test]
async fn a_retry_after_of_u64_max_is_reported_without_a_panic() {
    let (_registry, _pushed, proxy) = web_1_behind(vec![FaultRule::any_method(
        "/manifests/",
        Fault::too_many_requests(u64::MAX),
    )])
    .await;
    let host = proxy.host();

    let out = tagpin_resolve(&host, &[format!("{host}/acme/web:1")]).await;

    let all = output_text(&out);
    assert_eq!(out.status.code(), Some(1), "{all}");
    assert!(
        all.contains(&format!("{host}/acme/web:1")) && all.contains("429"),
        "{all}"
    );
    assert_eq!(proxy.count("HEAD", "/manifests/"), 1, "it gave up at once");
}
