//! Self-tests of the registry test harness (tests/it/support): each registry
//! mode starts and serves what was pushed, indexes push, the token server
//! issues tokens the registry accepts, and the fault proxy injects faults.
//!
//! These use reqwest directly, not tagpin's code, so a failure here points at
//! the harness (or at distribution's behaviour, recorded below), never at
//! tagpin.

use crate::support;

use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, WWW_AUTHENTICATE};
use reqwest::{Method, StatusCode};
use support::registry::{
    sha256_digest, Fault, FaultProxy, FaultRule, ImageKind, IndexKind, Mode, TestRegistry,
    TokenField, ACCEPT_ALL_MANIFESTS, DOCKER_MANIFEST, DOCKER_MANIFEST_LIST, DOCKER_SCHEMA1_SIGNED,
    OCI_INDEX, OCI_MANIFEST, TOKEN_SERVICE,
};

/// The parameters of a `WWW-Authenticate` challenge: scheme and `key="value"` pairs.
fn parse_challenge(value: &str) -> (String, Vec<(String, String)>) {
    let (scheme, rest) = value.split_once(' ').unwrap_or((value, ""));
    let mut params = Vec::new();
    let mut rest = rest.trim();
    while let Some((key, after)) = rest.split_once('=') {
        let key = key.trim().trim_start_matches(',').trim().to_string();
        let (value, remainder) = match after.strip_prefix('"') {
            Some(quoted) => {
                let end = quoted.find('"').expect("closing quote in challenge");
                (quoted[..end].to_string(), &quoted[end + 1..])
            }
            None => {
                let end = after.find(',').unwrap_or(after.len());
                (after[..end].to_string(), &after[end..])
            }
        };
        params.push((key, value));
        rest = remainder.trim_start_matches(',').trim();
    }
    (scheme.to_string(), params)
}

fn param<'a>(params: &'a [(String, String)], key: &str) -> Option<&'a str> {
    params
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// Sends a request; on 401 answers the challenge (Basic with `credentials`,
/// or Bearer through the token realm) and sends it once more.
async fn send_with_challenge(
    client: &reqwest::Client,
    method: Method,
    url: &str,
    accept: Option<&str>,
    credentials: Option<(&str, &str)>,
) -> reqwest::Response {
    let build = |auth: Option<String>| {
        let mut request = client.request(method.clone(), url);
        if let Some(accept) = accept {
            request = request.header(ACCEPT, accept);
        }
        if let Some(auth) = auth {
            request = request.header(AUTHORIZATION, auth);
        }
        request
    };
    let first = build(None).send().await.expect("first request");
    if first.status() != StatusCode::UNAUTHORIZED {
        return first;
    }
    let challenge = first
        .headers()
        .get(WWW_AUTHENTICATE)
        .expect("401 carries WWW-Authenticate")
        .to_str()
        .unwrap()
        .to_string();
    let (scheme, params) = parse_challenge(&challenge);
    let auth = if scheme.eq_ignore_ascii_case("basic") {
        let (user, password) = credentials.expect("Basic challenge needs credentials");
        let response = build(None)
            .basic_auth(user, Some(password))
            .send()
            .await
            .unwrap();
        return response;
    } else {
        assert!(
            scheme.eq_ignore_ascii_case("bearer"),
            "unexpected challenge {challenge}"
        );
        let realm = param(&params, "realm").expect("realm");
        let mut query = vec![("service", param(&params, "service").expect("service"))];
        if let Some(scope) = param(&params, "scope") {
            query.push(("scope", scope));
        }
        let mut token_request = client.get(realm).query(&query);
        if let Some((user, password)) = credentials {
            token_request = token_request.basic_auth(user, Some(password));
        }
        let token_response = token_request.send().await.expect("token request");
        assert_eq!(
            token_response.status(),
            StatusCode::OK,
            "token request failed"
        );
        let body: serde_json::Value = token_response.json().await.unwrap();
        let token = body
            .get("token")
            .or_else(|| body.get("access_token"))
            .and_then(|t| t.as_str())
            .expect("token or access_token")
            .to_string();
        format!("Bearer {token}")
    };
    build(Some(auth)).send().await.expect("request with token")
}

/// GETs `reference` with every manifest type accepted and checks the body's
/// sha256, `Docker-Content-Digest` and content type.
async fn assert_manifest(
    registry: &TestRegistry,
    repo: &str,
    reference: &str,
    credentials: Option<(&str, &str)>,
    expected_digest: &str,
    expected_media_type: &str,
) {
    let url = format!("{}/v2/{repo}/manifests/{reference}", registry.base_url());
    let response = send_with_challenge(
        &registry.client(),
        Method::GET,
        &url,
        Some(ACCEPT_ALL_MANIFESTS),
        credentials,
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK, "GET {url}");
    let headers = response.headers().clone();
    let body = response.bytes().await.unwrap();
    assert_eq!(sha256_digest(&body), expected_digest, "sha256 of GET {url}");
    assert_eq!(headers["docker-content-digest"], expected_digest);
    assert_eq!(headers[CONTENT_TYPE], expected_media_type);
}

/// Pushes an OCI and a Docker v2 image and fetches both back by tag.
async fn push_and_fetch(registry: &TestRegistry, credentials: Option<(&str, &str)>) {
    let oci = registry.push_image("team/app", "v1", "seed-oci").await;
    let docker = registry
        .push_image_of_kind("team/app", "v1-docker", ImageKind::DockerV2, "seed-docker")
        .await;
    assert_ne!(oci.manifest, docker.manifest);
    assert_ne!(oci.config, docker.config);
    assert_manifest(
        registry,
        "team/app",
        "v1",
        credentials,
        &oci.manifest,
        OCI_MANIFEST,
    )
    .await;
    assert_manifest(
        registry,
        "team/app",
        "v1-docker",
        credentials,
        &docker.manifest,
        DOCKER_MANIFEST,
    )
    .await;
    // The same seed pushed again gives the same digests: pushes are deterministic.
    let again = registry
        .push_image("team/app", "v1-again", "seed-oci")
        .await;
    assert_eq!(again, oci);
}

#[tokio::test]
async fn plain_registry_serves_pushed_images() {
    let registry = TestRegistry::start(Mode::Plain).await;
    assert!(registry.base_url().starts_with("http://127.0.0.1:"));
    assert_eq!(registry.base_url(), format!("http://{}", registry.host()));
    push_and_fetch(&registry, None).await;
}

#[tokio::test]
async fn htpasswd_registry_requires_basic_auth() {
    let registry = TestRegistry::start(Mode::htpasswd("alice", "s3cret")).await;
    let url = format!("{}/v2/", registry.base_url());
    let anonymous = registry.client().get(&url).send().await.unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    let challenge = anonymous.headers()[WWW_AUTHENTICATE]
        .to_str()
        .unwrap()
        .to_string();
    assert!(challenge.starts_with("Basic "), "{challenge}");
    let wrong = registry
        .client()
        .get(&url)
        .basic_auth("alice", Some("nope"))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    push_and_fetch(&registry, Some(("alice", "s3cret"))).await;
}

#[tokio::test]
async fn tls_registry_is_trusted_through_its_ca() {
    let registry = TestRegistry::start(Mode::Tls).await;
    assert!(registry.base_url().starts_with("https://127.0.0.1:"));
    let ca_pem = std::fs::read(registry.ca_pem_path().expect("TLS mode has a CA")).unwrap();
    assert!(String::from_utf8_lossy(&ca_pem).contains("BEGIN CERTIFICATE"));

    // A client without the CA must refuse the certificate.
    let untrusting = reqwest::Client::new();
    let refused = untrusting
        .get(format!("{}/v2/", registry.base_url()))
        .send()
        .await;
    assert!(
        refused.is_err(),
        "a client without the test CA must not connect"
    );

    // A client built only from the CA file connects, also via "localhost".
    let trusting = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&ca_pem).unwrap())
        .build()
        .unwrap();
    let localhost = format!("https://localhost:{}/v2/", registry.port());
    assert_eq!(
        trusting.get(&localhost).send().await.unwrap().status(),
        StatusCode::OK
    );
    push_and_fetch(&registry, None).await;
}

#[tokio::test]
async fn token_registry_issues_tokens_for_anonymous_pull_and_user_push() {
    let registry = TestRegistry::start(Mode::token("bob", "hunter2")).await;
    let token_server = registry
        .token_server()
        .expect("token mode has a token server");
    // Pushes go through the token protocol too, but do not count.
    let image = registry.push_image("team/app", "v1", "seed-token").await;
    assert!(token_server.requests().iter().any(|r| r.from_harness));
    assert_eq!(registry.token_request_count(), 0);

    // The registry's challenge names our realm, the service and the pull scope.
    let url = format!("{}/v2/team/app/manifests/v1", registry.base_url());
    let unauthorized = registry.client().get(&url).send().await.unwrap();
    assert_eq!(unauthorized.status(), StatusCode::UNAUTHORIZED);
    let challenge = unauthorized.headers()[WWW_AUTHENTICATE]
        .to_str()
        .unwrap()
        .to_string();
    let (scheme, params) = parse_challenge(&challenge);
    assert_eq!(scheme, "Bearer");
    assert_eq!(param(&params, "realm"), Some(token_server.realm().as_str()));
    assert_eq!(param(&params, "service"), Some(TOKEN_SERVICE));
    assert_eq!(param(&params, "scope"), Some("repository:team/app:pull"));

    // Anonymous pull: one token request, then the manifest.
    assert_manifest(
        &registry,
        "team/app",
        "v1",
        None,
        &image.manifest,
        OCI_MANIFEST,
    )
    .await;
    assert_eq!(registry.token_request_count(), 1);
    let last = token_server.requests().pop().unwrap();
    assert_eq!(last.user, None);
    assert_eq!(last.scopes, vec!["repository:team/app:pull".to_string()]);

    // Clients must handle `access_token` as well as `token`.
    token_server.set_token_field(TokenField::AccessToken);
    assert_manifest(
        &registry,
        "team/app",
        "v1",
        Some(("bob", "hunter2")),
        &image.manifest,
        OCI_MANIFEST,
    )
    .await;
    assert_eq!(registry.token_request_count(), 2);

    // A wrong password is refused by the token server.
    let refused = registry
        .client()
        .get(token_server.realm())
        .query(&[
            ("service", TOKEN_SERVICE),
            ("scope", "repository:team/app:pull"),
        ])
        .basic_auth("bob", Some("wrong"))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);

    // An anonymous token does not allow push.
    let anonymous_token: serde_json::Value = registry
        .client()
        .get(token_server.realm())
        .query(&[
            ("service", TOKEN_SERVICE),
            ("scope", "repository:team/app:pull,push"),
        ])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let token = anonymous_token["access_token"].as_str().unwrap();
    let push = registry
        .client()
        .post(format!(
            "{}/v2/team/app/blobs/uploads/",
            registry.base_url()
        ))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert_eq!(push.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(registry.token_request_count(), 4);
}

#[tokio::test]
async fn pushes_docker_manifest_list_and_oci_index() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let platforms = [("linux", "amd64"), ("linux", "arm64")];
    let list = registry
        .push_index(
            "team/multi",
            "list",
            IndexKind::DockerManifestList,
            &platforms,
            "seed-list",
        )
        .await;
    let index = registry
        .push_index(
            "team/multi",
            "index",
            IndexKind::Oci,
            &platforms,
            "seed-index",
        )
        .await;

    assert_manifest(
        &registry,
        "team/multi",
        "list",
        None,
        &list.index,
        DOCKER_MANIFEST_LIST,
    )
    .await;
    assert_manifest(
        &registry,
        "team/multi",
        "index",
        None,
        &index.index,
        OCI_INDEX,
    )
    .await;
    assert_eq!(list.children.len(), 2);
    assert_eq!(index.children.len(), 2);
    for child in &list.children {
        assert_manifest(
            &registry,
            "team/multi",
            &child.manifest,
            None,
            &child.manifest,
            DOCKER_MANIFEST,
        )
        .await;
    }
    for child in &index.children {
        assert_manifest(
            &registry,
            "team/multi",
            &child.manifest,
            None,
            &child.manifest,
            OCI_MANIFEST,
        )
        .await;
    }
    assert_eq!(index.children[0].architecture, "amd64");
    assert_eq!(index.children[1].architecture, "arm64");
    assert_ne!(index.children[0].config, index.children[1].config);
    assert_ne!(list.children[0].manifest, index.children[0].manifest);
}

/// HEAD on a tag from a client whose Accept names the single-image types
/// but not the list types (and, for contrast, `*/*`).
///
/// Observed with distribution 2.8.2 (Debian's docker-registry):
/// - Docker manifest list tag: distribution rewrites the answer to the
///   linux/amd64 child: 200 with the child's `Docker-Content-Digest` and the
///   schema2 content type, not the list's digest. A list without a
///   linux/amd64 entry gives 404 MANIFEST_UNKNOWN. With `*/*` (what reqwest
///   sends when no Accept is set; the same as no Accept at all) it gives 400
///   MANIFEST_INVALID, because the schema1 rewrite is disabled.
/// - OCI index tag: 404 MANIFEST_UNKNOWN ("OCI index found, but accept header
///   does not support OCI indexes"); never a child's digest.
/// - GET behaves the same (one handler serves both).
/// So a digest taken from HEAD without the list types is silently a child's
/// for a Docker list, and a 404 for an OCI index.
#[tokio::test]
async fn head_on_index_tag_without_list_accept() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let platforms = [("linux", "amd64"), ("linux", "arm64")];
    let list = registry
        .push_index(
            "team/multi",
            "list",
            IndexKind::DockerManifestList,
            &platforms,
            "seed-list",
        )
        .await;
    let index = registry
        .push_index(
            "team/multi",
            "index",
            IndexKind::Oci,
            &platforms,
            "seed-index",
        )
        .await;
    registry
        .push_index(
            "team/multi",
            "arm-only",
            IndexKind::DockerManifestList,
            &[("linux", "arm64")],
            "seed-arm",
        )
        .await;
    let single_types = format!("{DOCKER_MANIFEST}, {OCI_MANIFEST}");

    let head = |tag: &'static str, accept: String| {
        let url = format!("{}/v2/team/multi/manifests/{tag}", registry.base_url());
        registry.client().head(url).header(ACCEPT, accept).send()
    };

    let response = head("list", single_types.clone()).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(list.children[0].architecture, "amd64");
    assert_eq!(
        response.headers()["docker-content-digest"],
        list.children[0].manifest.as_str()
    );
    assert_ne!(
        response.headers()["docker-content-digest"],
        list.index.as_str()
    );
    assert_eq!(response.headers()[CONTENT_TYPE], DOCKER_MANIFEST);

    let response = head("arm-only", single_types.clone()).await.unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    assert!(response.headers().get("docker-content-digest").is_none());

    let response = head("list", "*/*".to_string()).await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert!(response.headers().get("docker-content-digest").is_none());

    for accept in [single_types.clone(), "*/*".to_string()] {
        let response = head("index", accept).await.unwrap();
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        assert!(response.headers().get("docker-content-digest").is_none());
    }
    let url = format!("{}/v2/team/multi/manifests/index", registry.base_url());
    let body = registry
        .client()
        .get(url)
        .header(ACCEPT, single_types)
        .send()
        .await
        .unwrap();
    assert_eq!(body.status(), StatusCode::NOT_FOUND);
    assert!(body
        .text()
        .await
        .unwrap()
        .contains("OCI index found, but accept header does not support OCI indexes"));

    // With the list types accepted, HEAD gives the index's own digest.
    for (tag, digest) in [("list", &list.index), ("index", &index.index)] {
        let response = head(tag, ACCEPT_ALL_MANIFESTS.to_string()).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()["docker-content-digest"], digest.as_str());
    }
}

/// Single-image tags whose type the Accept does not name are not served
/// either (observed with distribution 2.8.2): an OCI manifest gives 404
/// MANIFEST_UNKNOWN, a Docker v2 manifest 400 MANIFEST_INVALID.
#[tokio::test]
async fn single_manifest_without_its_accept_type() {
    let registry = TestRegistry::start(Mode::Plain).await;
    registry.push_image("team/app", "oci", "seed-a").await;
    registry
        .push_image_of_kind("team/app", "docker", ImageKind::DockerV2, "seed-b")
        .await;
    let get = |tag: &str, accept: &str| {
        let url = format!("{}/v2/team/app/manifests/{tag}", registry.base_url());
        registry.client().get(url).header(ACCEPT, accept).send()
    };
    assert_eq!(
        get("oci", DOCKER_MANIFEST).await.unwrap().status(),
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        get("oci", "*/*").await.unwrap().status(),
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        get("docker", OCI_MANIFEST).await.unwrap().status(),
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        get("docker", "*/*").await.unwrap().status(),
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        get("oci", OCI_MANIFEST).await.unwrap().status(),
        StatusCode::OK
    );
    assert_eq!(
        get("docker", DOCKER_MANIFEST).await.unwrap().status(),
        StatusCode::OK
    );
}

#[tokio::test]
async fn fault_proxy_injects_429_then_passes_through() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let image = registry.push_image("team/app", "v1", "seed-proxy").await;
    let proxy = FaultProxy::start(
        &registry.base_url(),
        vec![
            FaultRule::new("GET", "/manifests/", Fault::too_many_requests(7)).times(1),
            FaultRule::any_method(
                "/manifests/",
                Fault::AddHeaders(vec![("ratelimit-remaining".into(), "99;w=21600".into())]),
            ),
        ],
    )
    .await;
    let client = reqwest::Client::new();
    let url = format!("{}/v2/team/app/manifests/v1", proxy.base_url());

    let limited = client
        .get(&url)
        .header(ACCEPT, ACCEPT_ALL_MANIFESTS)
        .send()
        .await
        .unwrap();
    assert_eq!(limited.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(limited.headers()["retry-after"], "7");
    assert_eq!(limited.headers()["ratelimit-remaining"], "99;w=21600");

    let passed = client
        .get(&url)
        .header(ACCEPT, ACCEPT_ALL_MANIFESTS)
        .send()
        .await
        .unwrap();
    assert_eq!(passed.status(), StatusCode::OK);
    assert_eq!(
        passed.headers()["docker-content-digest"],
        image.manifest.as_str()
    );
    assert_eq!(passed.headers()["ratelimit-remaining"], "99;w=21600");
    assert_eq!(
        sha256_digest(&passed.bytes().await.unwrap()),
        image.manifest
    );

    assert_eq!(proxy.count("GET", "/manifests/"), 2);
    let recorded = proxy.requests();
    assert_eq!(recorded[0].accept.as_deref(), Some(ACCEPT_ALL_MANIFESTS));
}

#[tokio::test]
async fn fault_proxy_other_faults() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let image = registry.push_image("team/app", "v1", "seed-faults").await;
    let proxy = FaultProxy::start(&registry.base_url(), Vec::new()).await;
    let client = reqwest::Client::new();
    let url = format!("{}/v2/team/app/manifests/v1", proxy.base_url());
    let head = || {
        client
            .head(&url)
            .header(ACCEPT, ACCEPT_ALL_MANIFESTS)
            .send()
    };

    // Pass-through HEAD keeps the upstream's Content-Length and digest.
    let plain = head().await.unwrap();
    assert_eq!(plain.status(), StatusCode::OK);
    assert_eq!(
        plain.headers()["docker-content-digest"],
        image.manifest.as_str()
    );
    let body = client
        .get(&url)
        .header(ACCEPT, ACCEPT_ALL_MANIFESTS)
        .send()
        .await
        .unwrap();
    let body_len = body.bytes().await.unwrap().len();
    assert_eq!(
        plain.headers()["content-length"],
        body_len.to_string().as_str()
    );

    // Two 503s, then the rule is used up.
    proxy.set_rules(vec![FaultRule::new(
        "HEAD",
        "/manifests/",
        Fault::status(503),
    )
    .times(2)]);
    assert_eq!(
        head().await.unwrap().status(),
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert_eq!(
        head().await.unwrap().status(),
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert_eq!(head().await.unwrap().status(), StatusCode::OK);

    proxy.set_rules(vec![FaultRule::any_method(
        "/manifests/",
        Fault::ReplaceDigest("sha256:0000".into()),
    )]);
    assert_eq!(
        head().await.unwrap().headers()["docker-content-digest"],
        "sha256:0000"
    );

    proxy.set_rules(vec![FaultRule::any_method(
        "/manifests/",
        Fault::RemoveDigest,
    )]);
    assert!(head()
        .await
        .unwrap()
        .headers()
        .get("docker-content-digest")
        .is_none());

    proxy.set_rules(vec![FaultRule::any_method(
        "/manifests/",
        Fault::DropConnection,
    )
    .times(1)]);
    let dropped = head().await;
    assert!(
        dropped.is_err(),
        "dropped connection must be a transport error"
    );
    assert_eq!(head().await.unwrap().status(), StatusCode::OK);

    let schema1 = r#"{"schemaVersion":1,"name":"team/app","tag":"v1"}"#;
    proxy.set_rules(vec![FaultRule::new(
        "GET",
        "/manifests/",
        Fault::fixed_body(200, DOCKER_SCHEMA1_SIGNED, schema1),
    )]);
    let old = client.get(&url).send().await.unwrap();
    assert_eq!(old.headers()[CONTENT_TYPE], DOCKER_SCHEMA1_SIGNED);
    assert_eq!(old.text().await.unwrap(), schema1);
}
