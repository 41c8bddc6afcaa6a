//! Sigstore bundles attached as OCI 1.1 referrers, the layout cosign 3 writes by default
//! (issue #29): a real cosign 3 bundle (`tests/fixtures/sigstore`, keyless, public-good
//! Fulcio and Rekor) attached to its image digest in the real `docker-registry`, which serves
//! no referrers API, so tagpin finds it through the referrers tag fallback (`sha256-<hex>`).
//! Verified offline against the public-good trusted root tagpin ships.

use crate::support;

use std::time::Duration;

use base64::Engine as _;
use support::registry::{sha256_digest, Mode, TestRegistry, OCI_INDEX, OCI_MANIFEST};
use tagpin::config::{KeylessIdentity, SignatureRule};
use tagpin::reference::{Digest, Reference};
use tagpin::registry::{Client, Settings};
use tagpin::signature::{fetch, Refusal, Signatures};

/// The image digest the fixture signs (kubewarden-controller v1.34.0).
const SIGNED: &str = "sha256:c811d58de79c92f03214e63aa339484e488d694ae8a6283b5f3f17a9faf50172";
const BUNDLE: &[u8] =
    include_bytes!("../fixtures/sigstore/cosign3-kubewarden-controller-v1.34.0.sigstore.json");
const BUNDLE_TYPE: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";
const ISSUER: &str = "https://token.actions.githubusercontent.com";
const RELEASES: &str = r"https://github\.com/kubewarden/kubewarden-controller/\.github/workflows/release\.yml@refs/tags/v.+";

/// Attaches `bundle` to `digest` of `repo` as cosign 3 does (a manifest of artifact type
/// bundle v0.3, an empty config, the bundle as its one layer, the image as its subject) and
/// lists it in the referrers tag `sha256-<hex>`, as a client does where the registry has no
/// referrers API.
pub(crate) async fn attach(registry: &TestRegistry, repo: &str, digest: &str, bundle: &[u8]) {
    let index = push_referrer(registry, repo, digest, bundle).await;
    let tag = digest.replace(':', "-");
    registry.push_manifest(repo, &tag, OCI_INDEX, &index).await;
}

/// Pushes cosign 3's referrer manifest of `bundle` for `digest`; returns the referrers index
/// listing it, as a registry answers `GET /v2/<repo>/referrers/<digest>`.
async fn push_referrer(
    registry: &TestRegistry,
    repo: &str,
    digest: &str,
    bundle: &[u8],
) -> Vec<u8> {
    let layer = registry.push_blob(repo, bundle).await;
    let empty = registry.push_blob(repo, b"{}").await;
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": BUNDLE_TYPE,
        "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": empty, "size": 2},
        "layers": [{"mediaType": BUNDLE_TYPE, "digest": layer, "size": bundle.len()}],
        "subject": {"mediaType": OCI_MANIFEST, "digest": digest, "size": 1024},
        "annotations": {
            "dev.sigstore.bundle.content": "dsse-envelope",
            "dev.sigstore.bundle.predicateType": "https://sigstore.dev/cosign/sign/v1",
        },
    }))
    .unwrap();
    let referrer = sha256_digest(&manifest);
    registry
        .push_manifest(repo, &referrer, OCI_MANIFEST, &manifest)
        .await;
    serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_INDEX,
        "manifests": [{"mediaType": OCI_MANIFEST, "digest": referrer, "size": manifest.len(), "artifactType": BUNDLE_TYPE}],
    }))
    .unwrap()
}

/// Keyless signatures by `subject` (a regex) from GitHub Actions, against the public-good
/// root tagpin ships.
fn keyless(host: &str, subject: &str) -> Signatures {
    Signatures::compile(&[SignatureRule {
        matches: format!("{host}/kubewarden/*"),
        keys: Vec::new(),
        keyless: vec![KeylessIdentity {
            issuer: ISSUER.into(),
            subject: subject.into(),
        }],
        trusted_root: None,
        notation: None,
    }])
    .unwrap()
}

struct Lookup {
    client: Client,
    reference: Reference,
}

impl Lookup {
    fn new(host: &str) -> Lookup {
        let client = Client::new(Settings {
            insecure_hosts: vec![host.to_string()],
            ..Settings::default()
        })
        .unwrap();
        let reference = Reference::parse(&format!("{host}/kubewarden/controller:v1.34.0")).unwrap();
        Lookup { client, reference }
    }

    async fn check(
        &self,
        rules: &Signatures,
        digest: &str,
    ) -> (Result<String, Refusal>, &'static str) {
        let (rule, trust) = rules.for_image(&self.reference).unwrap();
        let digest: Digest = digest.parse().unwrap();
        let budget = Duration::from_secs(30);
        let (verdict, label) =
            fetch::check(&self.client, trust, rule, &self.reference, &digest, budget).await;
        (verdict.map(|signer| signer.to_string()), label)
    }
}

#[tokio::test]
async fn a_cosign_3_bundle_referrer_signs_its_digest_for_a_matching_identity_only() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    attach(&registry, "kubewarden/controller", SIGNED, BUNDLE).await;
    let lookup = Lookup::new(&host);

    let (verdict, label) = lookup.check(&keyless(&host, RELEASES), SIGNED).await;

    assert_eq!(
        verdict.unwrap(),
        format!("keyless https://github.com/kubewarden/kubewarden-controller/.github/workflows/release.yml@refs/tags/v1.34.0 ({ISSUER})")
    );
    assert_eq!(label, "verified");
    // No `.sig` tag, no referrers API (404), the fallback tag, the referrer, the bundle.
    assert_eq!(lookup.client.stats().signature_requests, 5);

    let other_team = r"https://github\.com/acme/.+";
    let (verdict, label) = lookup.check(&keyless(&host, other_team), SIGNED).await;
    let refusal = verdict.unwrap_err();
    assert!(matches!(refusal, Refusal::Identity { .. }), "{refusal}");
    assert!(
        refusal.to_string().starts_with(
            "certificate identity https://github.com/kubewarden/kubewarden-controller/"
        ),
        "{refusal}"
    );
    assert_eq!(label, "refused");
}

#[tokio::test]
async fn a_bundle_copied_to_another_digest_or_rewritten_for_it_is_refused() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let other = registry
        .push_image("kubewarden/controller", "v1.35.0", "other")
        .await;
    // The genuine bundle, attached to another image.
    attach(&registry, "kubewarden/controller", &other.manifest, BUNDLE).await;
    let lookup = Lookup::new(&host);
    // A subject pattern of its own: nothing remembered from another test applies.
    let rules = keyless(&host, &format!("{RELEASES}|copied"));

    let (verdict, _) = lookup.check(&rules, &other.manifest).await;
    let refusal = verdict.unwrap_err();
    assert_eq!(
        refusal.to_string(),
        format!("the signature is for {SIGNED}, not this digest (copied from another image)")
    );

    // The statement rewritten to name the other image: the envelope's signature no longer
    // verifies.
    let rewritten = registry
        .push_image("kubewarden/controller", "v1.36.0", "rewritten")
        .await;
    let mut bundle: serde_json::Value = serde_json::from_slice(BUNDLE).unwrap();
    let b64 = base64::engine::general_purpose::STANDARD;
    let payload = b64
        .decode(bundle["dsseEnvelope"]["payload"].as_str().unwrap())
        .unwrap();
    let statement = String::from_utf8(payload).unwrap().replace(
        &SIGNED["sha256:".len()..],
        &rewritten.manifest["sha256:".len()..],
    );
    bundle["dsseEnvelope"]["payload"] = b64.encode(statement).into();
    attach(
        &registry,
        "kubewarden/controller",
        &rewritten.manifest,
        &serde_json::to_vec(&bundle).unwrap(),
    )
    .await;

    let (verdict, label) = lookup.check(&rules, &rewritten.manifest).await;
    let refusal = verdict.unwrap_err();
    assert!(matches!(refusal, Refusal::Keyless(_)), "{refusal}");
    assert_eq!(label, "refused");
}

/// A registry with the OCI 1.1 referrers API in front of the real one: it answers
/// `GET /v2/<name>/referrers/<digest>` with the index it is given (as distribution 3, zot or
/// Harbor answer from the subjects they index) and forwards every other request unchanged.
/// Records every path asked.
struct ReferrersApi {
    host: String,
    asked: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    server: tokio::task::JoinHandle<()>,
}

impl ReferrersApi {
    async fn start(registry: &TestRegistry, referrers: (String, Vec<u8>)) -> ReferrersApi {
        use axum::http::{header, StatusCode};
        use axum::response::IntoResponse;
        let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let upstream = format!("http://{}", registry.host());
        let recorded = asked.clone();
        let route = std::sync::Arc::new(referrers);
        let forward = move |request: axum::extract::Request| {
            let (recorded, upstream, route) = (recorded.clone(), upstream.clone(), route.clone());
            async move {
                let path = request.uri().path().to_string();
                recorded.lock().unwrap().push(path.clone());
                if request.uri().path() == route.0 {
                    return ([(header::CONTENT_TYPE, OCI_INDEX)], route.1.clone()).into_response();
                }
                let url = format!("{upstream}{}", request.uri());
                let mut forwarded = reqwest::Client::new().request(request.method().clone(), &url);
                if let Some(accept) = request.headers().get(header::ACCEPT) {
                    forwarded = forwarded.header(header::ACCEPT, accept);
                }
                let answer = forwarded.send().await.unwrap();
                let status = StatusCode::from_u16(answer.status().as_u16()).unwrap();
                let mut headers = axum::http::HeaderMap::new();
                for name in ["content-type", "docker-content-digest"] {
                    if let Some(value) = answer.headers().get(name) {
                        headers.insert(name, value.to_str().unwrap().parse().unwrap());
                    }
                }
                let body = answer.bytes().await.unwrap();
                (status, headers, body).into_response()
            }
        };
        let router = axum::Router::new().fallback(forward);
        let (listener, base) = support::http_fake::loopback("referrers API").await;
        let server = support::http_fake::serve(listener, router, "referrers API");
        ReferrersApi {
            host: base.trim_start_matches("http://").to_string(),
            asked,
            server,
        }
    }
}

impl Drop for ReferrersApi {
    fn drop(&mut self) {
        self.server.abort();
    }
}

#[tokio::test]
async fn a_registry_serving_the_referrers_api_is_asked_there_and_not_for_the_fallback_tag() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let index = push_referrer(&registry, "kubewarden/controller", SIGNED, BUNDLE).await;
    let route = format!("/v2/kubewarden/controller/referrers/{SIGNED}");
    let api = ReferrersApi::start(&registry, (route.clone(), index)).await;
    let lookup = Lookup::new(&api.host);
    let rules = keyless(&api.host, &format!("{RELEASES}|through-the-api"));

    let (verdict, label) = lookup.check(&rules, SIGNED).await;

    assert!(
        verdict.unwrap().contains("kubewarden-controller"),
        "{label}"
    );
    let asked = api.asked.lock().unwrap().clone();
    assert!(asked.contains(&route), "{asked:?}");
    let fallback = format!(
        "/v2/kubewarden/controller/manifests/{}",
        SIGNED.replace(':', "-")
    );
    assert!(
        !asked.contains(&fallback),
        "the fallback tag is for registries without the API: {asked:?}"
    );
    assert_eq!(lookup.client.stats().signature_requests, 4, "{asked:?}");
}
