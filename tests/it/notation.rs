//! Notation signatures (`images.signatures[].notation`, issue #41): `tagpin sync` as the real
//! binary against the real `docker-registry`, with JWS signatures the tests make the way
//! `notation sign` lays them out (a manifest of artifact type
//! `application/vnd.cncf.notary.signature` whose one layer is the `application/jose+json`
//! envelope, the image as its subject), found through the referrers tag fallback
//! (`sha256-<hex>`), since the registry serves no referrers API. The CA and its code-signing
//! leaves are made here with rcgen.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use base64::Engine as _;
use support::git::BareRepo;
use support::output_text as text;
use support::registry::{sha256_digest, Mode, TestRegistry, OCI_INDEX, OCI_MANIFEST};
use tagpin::config::{NotationRule, SignatureFile, SignatureRule};
use tagpin::reference::{Digest, Reference};
use tagpin::registry::{Client, Settings};
use tagpin::signature::{fetch, Signatures};

const ARTIFACT_TYPE: &str = "application/vnd.cncf.notary.signature";
const JWS: &str = "application/jose+json";
const PAYLOAD_TYPE: &str = "application/vnd.cncf.notary.payload.v1+json";
/// When the tests' signatures say they were made: inside the good leaves' validity.
const SIGNED_AT: &str = "2026-01-01T00:00:00Z";
const IDENTITY: &str = "x509.subject: C=US, ST=WA, O=acme, CN=release";

/// A test CA, as a team's Notation trust store holds it.
struct TestCa {
    issuer: rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
}

/// A code-signing certificate and its key.
struct Leaf {
    key: rcgen::KeyPair,
    cert: rcgen::Certificate,
}

impl TestCa {
    fn new(name: &str) -> TestCa {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign];
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2090, 1, 1);
        let key = rcgen::KeyPair::generate().unwrap();
        TestCa {
            issuer: rcgen::CertifiedIssuer::self_signed(params, key).unwrap(),
        }
    }

    /// A leaf for `C=US, ST=WA, O=acme, CN=<cn>` with digitalSignature and codeSigning, valid
    /// from January 1st of `years.0` to January 1st of `years.1`.
    fn leaf(&self, cn: &str, years: (i32, i32)) -> Leaf {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        let dn = &mut params.distinguished_name;
        dn.push(rcgen::DnType::CountryName, "US");
        dn.push(rcgen::DnType::StateOrProvinceName, "WA");
        dn.push(rcgen::DnType::OrganizationName, "acme");
        dn.push(rcgen::DnType::CommonName, cn);
        params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::CodeSigning];
        params.not_before = rcgen::date_time_ymd(years.0, 1, 1);
        params.not_after = rcgen::date_time_ymd(years.1, 1, 1);
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Leaf { key, cert }
    }
}

impl Leaf {
    /// The JWS envelope `notation sign --signature-format jws` makes for `digest` (ES256, the
    /// chain leaf then CA).
    fn envelope(&self, ca: &TestCa, digest: &str) -> Vec<u8> {
        use rcgen::SigningKey as _;
        let url = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let std = base64::engine::general_purpose::STANDARD;
        let header = serde_json::json!({
            "alg": "ES256",
            "cty": PAYLOAD_TYPE,
            "io.cncf.notary.signingScheme": "notary.x509",
            "io.cncf.notary.signingTime": SIGNED_AT,
            "crit": ["io.cncf.notary.signingScheme"],
        });
        let payload = serde_json::json!({"targetArtifact": {
            "mediaType": OCI_MANIFEST, "digest": digest, "size": 512}});
        let protected = url.encode(header.to_string());
        let payload = url.encode(payload.to_string());
        let der = self
            .key
            .sign(format!("{protected}.{payload}").as_bytes())
            .unwrap();
        serde_json::to_vec(&serde_json::json!({
            "payload": payload,
            "protected": protected,
            "header": {
                "x5c": [std.encode(self.cert.der()), std.encode(ca.issuer.der())],
                "io.cncf.notary.signingAgent": "notation-go/1.3.0",
            },
            "signature": url.encode(fixed_p256(&der)),
        }))
        .unwrap()
    }
}

/// An ECDSA P-256 signature in DER (what rcgen gives) as JWS's fixed 64-byte r||s.
fn fixed_p256(der: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut at = 2;
    for _ in 0..2 {
        let len = der[at + 1] as usize;
        let int = &der[at + 2..at + 2 + len];
        let int = &int[int.len().saturating_sub(32)..];
        out.extend(std::iter::repeat_n(0, 32 - int.len()));
        out.extend_from_slice(int);
        at += 2 + len;
    }
    out
}

/// Attaches `envelope` to `digest` of `repo` as `notation sign` does, and lists it in the
/// referrers tag `sha256-<hex>`, as a client does where the registry has no referrers API.
async fn attach(registry: &TestRegistry, repo: &str, digest: &str, envelope: &[u8]) {
    let layer = registry.push_blob(repo, envelope).await;
    let empty = registry.push_blob(repo, b"{}").await;
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": ARTIFACT_TYPE,
        "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": empty, "size": 2},
        "layers": [{"mediaType": JWS, "digest": layer, "size": envelope.len()}],
        "subject": {"mediaType": OCI_MANIFEST, "digest": digest, "size": 512},
        "annotations": {"io.cncf.notary.x509chain.thumbprint#S256": "[]"},
    }))
    .unwrap();
    let referrer = sha256_digest(&manifest);
    registry
        .push_manifest(repo, &referrer, OCI_MANIFEST, &manifest)
        .await;
    let index = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_INDEX,
        "manifests": [{"mediaType": OCI_MANIFEST, "digest": referrer, "size": manifest.len(), "artifactType": ARTIFACT_TYPE}],
    }))
    .unwrap();
    let tag = digest.replace(':', "-");
    registry.push_manifest(repo, &tag, OCI_INDEX, &index).await;
}

fn deployment(name: &str, image: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\nspec:\n  template:\n    spec:\n      containers:\n      - name: app\n        image: {image}\n"
    )
}

/// A working directory with `certs/ca.pem` (the trust store) and `tagpin.yaml` requiring
/// Notation signatures by [`IDENTITY`] for `<host>/acme/*`.
fn config(dir: &Path, ca: &TestCa, url: &str, host: &str) -> PathBuf {
    std::fs::create_dir_all(dir.join("certs")).unwrap();
    std::fs::write(dir.join("certs/ca.pem"), ca.issuer.pem()).unwrap();
    let path = dir.join("tagpin.yaml");
    std::fs::write(
        &path,
        format!(
            "repository:\n  url: {url}\n  branch: main\nauthor: {{name: tagpin-bot, email: bot@example.com}}\npaths: [apps]\nregistries:\n  insecure: [\"{host}\"]\nimages:\n  signatures:\n  - match: '{host}/acme/*'\n    notation:\n      trust_store: [certs/ca.pem]\n      identities: ['{IDENTITY}']\n"
        ),
    )
    .unwrap();
    path
}

fn sync(dir: &Path, config: &Path) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_tagpin"))
        .args(["sync", "--output", "json", "--config"])
        .arg(config)
        .arg("--cache-dir")
        .arg(dir.join("cache"))
        .env("HOME", dir)
        .env_remove("DOCKER_CONFIG")
        .env_remove("RUST_LOG")
        .output()
        .expect("run tagpin")
}

#[tokio::test]
async fn sync_pins_a_notation_signed_digest_and_refuses_another_ca_digest_expiry_identity_or_none()
{
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let ca = TestCa::new("acme CA");
    let release = ca.leaf("release", (2020, 2090));

    let good = registry.push_image("acme/good", "1", "good").await;
    attach(
        &registry,
        "acme/good",
        &good.manifest,
        &release.envelope(&ca, &good.manifest),
    )
    .await;
    // A leaf of a CA the trust store does not hold (of the same name), with the trusted
    // subject.
    let other_ca = TestCa::new("acme CA");
    let foreign = registry.push_image("acme/foreign", "1", "foreign").await;
    let stranger = other_ca.leaf("release", (2020, 2090));
    let envelope = stranger.envelope(&other_ca, &foreign.manifest);
    attach(&registry, "acme/foreign", &foreign.manifest, &envelope).await;
    // The good image's signature, attached to another digest.
    let copied = registry.push_image("acme/copied", "1", "copied").await;
    let envelope = release.envelope(&ca, &good.manifest);
    attach(&registry, "acme/copied", &copied.manifest, &envelope).await;
    // A certificate that had expired when the signature was made.
    let stale = registry.push_image("acme/stale", "1", "stale").await;
    let expired = ca.leaf("release", (2021, 2022));
    let envelope = expired.envelope(&ca, &stale.manifest);
    attach(&registry, "acme/stale", &stale.manifest, &envelope).await;
    // The right CA, another signer.
    let intern = registry.push_image("acme/intern", "1", "intern").await;
    let envelope = ca
        .leaf("intern", (2020, 2090))
        .envelope(&ca, &intern.manifest);
    attach(&registry, "acme/intern", &intern.manifest, &envelope).await;
    let unsigned = registry.push_image("acme/unsigned", "1", "unsigned").await;

    let names = ["good", "foreign", "copied", "stale", "intern", "unsigned"];
    let files: Vec<(String, String)> = names
        .iter()
        .map(|n| {
            let image = format!("{host}/acme/{n}:1");
            (format!("apps/{n}.yaml"), deployment(n, &image))
        })
        .collect();
    let repo = BareRepo::create(
        &files
            .iter()
            .map(|(p, c)| (p.as_str(), c.as_str()))
            .collect::<Vec<_>>(),
    );
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &ca, &repo.file_url(), &host);

    let out = sync(dir.path(), &config);

    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_eq!(
        repo.read("main", "apps/good.yaml").unwrap(),
        deployment("good", &format!("{host}/acme/good:1@{}", good.manifest)),
        "{}",
        text(&out)
    );
    for (path, content) in &files[1..] {
        assert_eq!(&repo.read("main", path).unwrap(), content, "{}", text(&out));
    }
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let change = &report["groups"][0]["changes"][0];
    assert_eq!(
        change["signature"],
        serde_json::json!({"verified": true, "by": "notation CN=release, C=US, ST=WA, O=acme"}),
        "{}",
        text(&out)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    for expected in [
        format!("apps/foreign.yaml:10: {host}/acme/foreign:1@{}: not pinned: Notation certificate CN=release, C=US, ST=WA, O=acme does not chain to images.signatures[0].notation.trust_store: its issuer's signature does not verify with the trust store's certificate of that name (another CA)", foreign.manifest),
        format!("apps/copied.yaml:10: {host}/acme/copied:1@{}: not pinned: the signature is for {}, not this digest (copied from another image)", copied.manifest, good.manifest),
        format!("apps/stale.yaml:10: {host}/acme/stale:1@{}: not pinned: Notation certificate CN=release, C=US, ST=WA, O=acme does not chain to images.signatures[0].notation.trust_store: a certificate of the chain expired at 2022-01-01T00:00:00Z, before the signing time {SIGNED_AT}", stale.manifest),
        format!("apps/intern.yaml:10: {host}/acme/intern:1@{}: not pinned: Notation signer CN=intern, C=US, ST=WA, O=acme is not one of images.signatures[0].notation.identities", intern.manifest),
        format!("apps/unsigned.yaml:10: {host}/acme/unsigned:1@{}: not pinned: no signature (no Notation signature refers to the digest)", unsigned.manifest),
    ] {
        assert!(stderr.contains(&expected), "missing {expected:?} in\n{}", text(&out));
    }
}

#[tokio::test]
async fn a_verified_notation_signature_costs_four_requests_once_and_none_after() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let ca = TestCa::new("acme CA");
    let web = registry.push_image("acme/web", "1", "web").await;
    let envelope = ca
        .leaf("release", (2020, 2090))
        .envelope(&ca, &web.manifest);
    attach(&registry, "acme/web", &web.manifest, &envelope).await;
    let (rules, client) = notation_rules(&host, &ca);
    let reference = Reference::parse(&format!("{host}/acme/web:1")).unwrap();
    let digest: Digest = web.manifest.parse().unwrap();
    let (rule, trust) = rules.for_image(&reference).unwrap();
    let budget = Duration::from_secs(30);

    let (verdict, label) = fetch::check(&client, trust, rule, &reference, &digest, budget).await;

    assert_eq!(
        verdict.unwrap().to_string(),
        "notation CN=release, C=US, ST=WA, O=acme"
    );
    assert_eq!(label, "verified");
    // No cosign lookups for a Notation-only entry: the referrers API (404), its fallback
    // tag, the signature manifest, the envelope.
    let first = client.stats();
    assert_eq!(first.signature_requests, 4, "{first:?}");
    let (again, label) = fetch::check(&client, trust, rule, &reference, &digest, budget).await;
    assert!(again.is_ok());
    assert_eq!(label, "cached");
    assert_eq!(client.stats(), first, "no request for a verified digest");
}

/// An entry trusting `ca` for `<host>/acme/*`, and a client for the registry.
fn notation_rules(host: &str, ca: &TestCa) -> (Signatures, Client) {
    let rules = Signatures::compile(&[SignatureRule {
        matches: format!("{host}/acme/*"),
        keys: Vec::new(),
        keyless: Vec::new(),
        trusted_root: None,
        notation: Some(NotationRule {
            trust_store: vec![SignatureFile {
                path: "ca.pem".into(),
                contents: ca.issuer.pem(),
            }],
            identities: vec!["C=US, ST=WA, O=acme".into()],
        }),
    }])
    .unwrap();
    let client = Client::new(Settings {
        insecure_hosts: vec![host.to_string()],
        ..Settings::default()
    })
    .unwrap();
    (rules, client)
}

/// Pushes a Notation signature manifest of `digest` with `layers`, and returns its index
/// descriptor, with `thumbprints` as its chain annotation.
async fn signature_manifest(
    registry: &TestRegistry,
    repo: &str,
    digest: &str,
    layers: serde_json::Value,
    thumbprints: &[String],
) -> serde_json::Value {
    let empty = registry.push_blob(repo, b"{}").await;
    let annotations = serde_json::json!({
        "io.cncf.notary.x509chain.thumbprint#S256": serde_json::to_string(thumbprints).unwrap(),
    });
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": ARTIFACT_TYPE,
        "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": empty, "size": 2},
        "layers": layers,
        "subject": {"mediaType": OCI_MANIFEST, "digest": digest, "size": 512},
        "annotations": annotations,
    }))
    .unwrap();
    let referrer = sha256_digest(&manifest);
    registry
        .push_manifest(repo, &referrer, OCI_MANIFEST, &manifest)
        .await;
    serde_json::json!({"mediaType": OCI_MANIFEST, "digest": referrer, "size": manifest.len(),
        "artifactType": ARTIFACT_TYPE, "annotations": annotations})
}

#[tokio::test]
async fn bad_referrers_listed_before_a_good_signature_neither_abort_the_lookup_nor_crowd_it_out() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let ca = TestCa::new("acme CA");
    let web = registry.push_image("acme/web", "1", "web").await;
    let leaf = ca.leaf("release", (2020, 2090));
    let envelope = leaf.envelope(&ca, &web.manifest);
    let layer = registry.push_blob("acme/web", &envelope).await;
    let good_layers =
        serde_json::json!([{"mediaType": JWS, "digest": layer, "size": envelope.len()}]);
    let thumbprint = |der: &[u8]| sha256_digest(der).trim_start_matches("sha256:").to_string();
    let chain = [thumbprint(leaf.cert.der()), thumbprint(ca.issuer.der())];
    // More bogus referrers than are looked at, listed first, claiming no trust store
    // certificate: a layer without a media type (no manifest reader accepts it), and
    // manifests without an envelope.
    let junk = registry.push_blob("acme/web", b"junk").await;
    let mut descriptors = Vec::new();
    for n in 0..10 {
        let bogus = match n {
            0 => serde_json::json!([{"digest": junk, "size": 4}]),
            _ => {
                serde_json::json!([{"mediaType": "application/octet-stream", "digest": junk, "size": 4}])
            }
        };
        descriptors
            .push(signature_manifest(&registry, "acme/web", &web.manifest, bogus, &[]).await);
    }
    descriptors
        .push(signature_manifest(&registry, "acme/web", &web.manifest, good_layers, &chain).await);
    let index = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": descriptors,
    }))
    .unwrap();
    let tag = web.manifest.replace(':', "-");
    registry
        .push_manifest("acme/web", &tag, OCI_INDEX, &index)
        .await;
    let (rules, client) = notation_rules(&host, &ca);
    let reference = Reference::parse(&format!("{host}/acme/web:1")).unwrap();
    let digest: Digest = web.manifest.parse().unwrap();
    let (rule, trust) = rules.for_image(&reference).unwrap();

    let (verdict, label) = fetch::check(
        &client,
        trust,
        rule,
        &reference,
        &digest,
        Duration::from_secs(30),
    )
    .await;

    assert_eq!(
        verdict.unwrap().to_string(),
        "notation CN=release, C=US, ST=WA, O=acme"
    );
    assert_eq!(label, "verified");
}

#[test]
fn a_notation_entry_with_a_bad_certificate_or_identity_is_a_configuration_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("certs")).unwrap();
    std::fs::write(
        dir.path().join("certs/key.pem"),
        "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n",
    )
    .unwrap();
    let config = dir.path().join("tagpin.yaml");
    std::fs::write(
        &config,
        "repository:\n  url: file:///nowhere\n  branch: main\nauthor: {name: tagpin-bot, email: bot@example.com}\npaths: [apps]\nimages:\n  signatures:\n  - match: 'ghcr.io/acme/*'\n    notation:\n      trust_store: [certs/key.pem]\n      identities: ['x509.subject: C=US, O=acme', '*']\n  - match: 'ghcr.io/beta/*'\n    notation: {}\n  - match: 'ghcr.io/gamma/*'\n    notation: {trust_store: [], identities: []}\n",
    )
    .unwrap();

    let out = sync(dir.path(), &config);

    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    for expected in [
        "images.signatures[0].notation.trust_store[0]: certs/key.pem: not a PEM certificate the trust store can hold: is not DER X.509: no -----BEGIN CERTIFICATE----- block",
        "images.signatures[0].notation.identities[0]: needs C, ST and O (like x509.subject: C=US, ST=WA, O=acme); ST is missing",
        "images.signatures[0].notation.identities: * trusts every identity and stands alone",
        "images.signatures[1].notation.trust_store: is required",
        "images.signatures[1].notation.identities: is required",
        "images.signatures[2].notation.trust_store: is empty: every Notation signature would be refused",
        "images.signatures[2].notation.identities: is empty: every Notation signature would be refused",
    ] {
        assert!(stderr.contains(expected), "missing {expected:?} in\n{}", text(&out));
    }
}
