//! Signed images only (`images.signatures`, issue #29): `tagpin sync` as the real binary
//! against the real `docker-registry`, with signatures the tests make (ECDSA P-256 keys made
//! here) and push the way cosign lays them out: a `sha256-<hex>.sig` tag whose layers are
//! simple-signing payloads carrying a `dev.cosignproject.cosign/signature` annotation.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use sigstore_crypto::KeyPair;
use support::git::BareRepo;
use support::output_text as text;
use support::registry::{IndexKind, Mode, TestRegistry};
use tagpin::config::{SignatureKey, SignatureRule};
use tagpin::reference::{Digest, Reference};
use tagpin::registry::{Client, Settings};
use tagpin::signature::{fetch, Signatures};

const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const SIMPLE_SIGNING: &str = "application/vnd.dev.cosign.simplesigning.v1+json";

fn deployment(name: &str, image: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\nspec:\n  template:\n    spec:\n      containers:\n      - name: app\n        image: {image}\n"
    )
}

/// Pushes a `.sig` manifest for `digest` in `repo` with one layer: `blob` (what the registry
/// serves) annotated with `signature` (base64). Returns the manifest's bytes.
async fn push_sig(
    registry: &TestRegistry,
    repo: &str,
    digest: &str,
    blob: &[u8],
    signature: &str,
) -> Vec<u8> {
    registry
        .push_cosign_signature(repo, digest, blob, signature)
        .await
}

async fn push_sig_manifest(registry: &TestRegistry, repo: &str, digest: &str, manifest: &[u8]) {
    let tag = format!("{}.sig", digest.replace(':', "-"));
    registry
        .push_manifest(repo, &tag, OCI_MANIFEST, manifest)
        .await;
}

/// Signs `digest` of `repo` with `key`, as `cosign sign --key` does.
pub(crate) async fn sign(
    registry: &TestRegistry,
    repo: &str,
    digest: &str,
    key: &KeyPair,
) -> Vec<u8> {
    let body = registry.cosign_payload(repo, digest);
    let signature = key.sign(&body).unwrap().to_base64();
    push_sig(registry, repo, digest, &body, &signature).await
}

struct Setup {
    dir: tempfile::TempDir,
}

impl Setup {
    /// A working directory with `keys/release.pub` holding `key`'s public half.
    fn new(key: &KeyPair) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("keys")).unwrap();
        std::fs::write(
            dir.path().join("keys/release.pub"),
            key.public_key_der().unwrap().to_pem(),
        )
        .unwrap();
        Setup { dir }
    }

    /// `tagpin.yaml` requiring signatures by `keys/release.pub` for `<host>/acme/*`.
    fn config(&self, url: &str, host: &str) -> PathBuf {
        let path = self.dir.path().join("tagpin.yaml");
        std::fs::write(
            &path,
            format!(
                "repository:\n  url: {url}\n  branch: main\nauthor: {{name: tagpin-bot, email: bot@example.com}}\npaths: [apps]\nregistries:\n  insecure: [\"{host}\"]\nimages:\n  signatures:\n  - match: '{host}/acme/*'\n    keys: [keys/release.pub]\n"
            ),
        )
        .unwrap();
        path
    }

    fn sync(&self, config: &Path) -> Output {
        std::process::Command::new(env!("CARGO_BIN_EXE_tagpin"))
            .args(["sync", "--output", "json", "--config"])
            .arg(config)
            .arg("--cache-dir")
            .arg(self.dir.path().join("cache"))
            .env("HOME", self.dir.path())
            .env_remove("DOCKER_CONFIG")
            .env_remove("RUST_LOG")
            .output()
            .expect("run tagpin")
    }
}

fn changes(out: &Output) -> Vec<serde_json::Value> {
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("JSON report: {e}\n{}", text(out)));
    report["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["changes"].as_array().cloned().unwrap_or_default())
        .collect()
}

#[tokio::test]
async fn a_digest_signed_by_a_configured_key_is_pinned_and_reported_with_its_key() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let release = KeyPair::generate_ecdsa_p256().unwrap();
    let web = registry.push_image("acme/web", "1.0", "web").await;
    sign(&registry, "acme/web", &web.manifest, &release).await;
    let repo = BareRepo::create(&[(
        "apps/web.yaml",
        &deployment("web", &format!("{host}/acme/web:1.0")),
    )]);
    let setup = Setup::new(&release);
    let config = setup.config(&repo.file_url(), &host);

    let out = setup.sync(&config);

    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(
        repo.read("main", "apps/web.yaml").unwrap(),
        deployment("web", &format!("{host}/acme/web:1.0@{}", web.manifest))
    );
    let changes = changes(&out);
    assert_eq!(changes.len(), 1, "{}", text(&out));
    assert_eq!(
        changes[0]["signature"],
        serde_json::json!({"verified": true, "by": "key keys/release.pub"})
    );
}

#[tokio::test]
async fn unsigned_wrongly_signed_copied_and_tampered_digests_are_not_pinned_each_with_its_reason() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let release = KeyPair::generate_ecdsa_p256().unwrap();
    let stranger = KeyPair::generate_ecdsa_p256().unwrap();

    // Signed: pinned, while the others fail (the rest of the pass goes on).
    let good = registry.push_image("acme/good", "1", "good").await;
    let good_sig = sign(&registry, "acme/good", &good.manifest, &release).await;
    // Pinned to a signed digest; the tag then moves to an unsigned one.
    let old = registry.push_image("acme/unsigned", "1", "old").await;
    sign(&registry, "acme/unsigned", &old.manifest, &release).await;
    let unsigned = registry.push_image("acme/unsigned", "1", "new").await;
    // Signed by a key the configuration does not name.
    let strange = registry.push_image("acme/stranger", "1", "stranger").await;
    sign(&registry, "acme/stranger", &strange.manifest, &stranger).await;
    // The good image's signature, copied under this digest's `.sig` tag.
    let copied = registry.push_image("acme/copied", "1", "copied").await;
    registry
        .push_blob(
            "acme/copied",
            &registry.cosign_payload("acme/good", &good.manifest),
        )
        .await;
    push_copied_sig(&registry, "acme/copied", &good_sig, &copied.manifest).await;
    // A payload changed after signing (the descriptor matches the changed bytes).
    let tampered = registry.push_image("acme/tampered", "1", "tampered").await;
    let signed = registry.cosign_payload("acme/tampered", &tampered.manifest);
    let signature = release.sign(&signed).unwrap().to_base64();
    let changed = String::from_utf8(signed)
        .unwrap()
        .replace("\"optional\":null", "\"optional\":{\"by\":\"mallory\"}");
    push_sig(
        &registry,
        "acme/tampered",
        &tampered.manifest,
        changed.as_bytes(),
        &signature,
    )
    .await;

    let unsigned_at = format!("{host}/acme/unsigned:1@{}", old.manifest);
    let files = [
        (
            "apps/good.yaml",
            deployment("good", &format!("{host}/acme/good:1")),
        ),
        ("apps/unsigned.yaml", deployment("unsigned", &unsigned_at)),
        (
            "apps/stranger.yaml",
            deployment("stranger", &format!("{host}/acme/stranger:1")),
        ),
        (
            "apps/copied.yaml",
            deployment("copied", &format!("{host}/acme/copied:1")),
        ),
        (
            "apps/tampered.yaml",
            deployment("tampered", &format!("{host}/acme/tampered:1")),
        ),
    ];
    let repo = BareRepo::create(
        &files
            .iter()
            .map(|(p, c)| (*p, c.as_str()))
            .collect::<Vec<_>>(),
    );
    let setup = Setup::new(&release);
    let config = setup.config(&repo.file_url(), &host);

    let out = setup.sync(&config);

    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_eq!(
        repo.read("main", "apps/good.yaml").unwrap(),
        deployment("good", &format!("{host}/acme/good:1@{}", good.manifest)),
        "{}",
        text(&out)
    );
    for (path, content) in &files[1..] {
        assert_eq!(
            &repo.read("main", path).unwrap(),
            content,
            "{path} changed\n{}",
            text(&out)
        );
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let sig_tag = |digest: &str| format!("{}.sig", digest.replace(':', "-"));
    for expected in [
        format!(
            "apps/unsigned.yaml:10: {host}/acme/unsigned:1@{}: not pinned: no signature (the registry has no {} tag and no Sigstore bundle referring to the digest)",
            unsigned.manifest,
            sig_tag(&unsigned.manifest)
        ),
        format!(
            "apps/stranger.yaml:10: {host}/acme/stranger:1@{}: not pinned: signed by an unknown key: no key of images.signatures[0] verifies the signature over its payload",
            strange.manifest
        ),
        format!(
            "apps/copied.yaml:10: {host}/acme/copied:1@{}: not pinned: the signature is for {}, not this digest (copied from another image)",
            copied.manifest, good.manifest
        ),
        format!(
            "apps/tampered.yaml:10: {host}/acme/tampered:1@{}: not pinned: signed by an unknown key",
            tampered.manifest
        ),
    ] {
        assert!(stderr.contains(&expected), "missing {expected:?} in\n{}", text(&out));
    }
}

/// Pushes another image's `.sig` manifest under `digest`'s `.sig` tag in `to` (its payload
/// blob already pushed there): a signature copied from another image.
async fn push_copied_sig(registry: &TestRegistry, to: &str, manifest: &[u8], digest: &str) {
    let parsed: serde_json::Value = serde_json::from_slice(manifest).unwrap();
    // The config blob, the same bytes `push_sig` made for the original.
    let layer = parsed["layers"][0]["digest"].as_str().unwrap();
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": "", "os": "", "config": {},
        "rootfs": {"type": "layers", "diff_ids": [layer]},
    }))
    .unwrap();
    registry.push_blob(to, &config).await;
    push_sig_manifest(registry, to, digest, manifest).await;
}

#[tokio::test]
async fn a_multi_arch_index_signed_on_its_index_digest_is_pinned() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let release = KeyPair::generate_ecdsa_p256().unwrap();
    let index = registry
        .push_index(
            "acme/multi",
            "2",
            IndexKind::Oci,
            &[("linux", "amd64"), ("linux", "arm64")],
            "multi",
        )
        .await;
    sign(&registry, "acme/multi", &index.index, &release).await;
    let repo = BareRepo::create(&[(
        "apps/multi.yaml",
        &deployment("multi", &format!("{host}/acme/multi:2")),
    )]);
    let setup = Setup::new(&release);
    let config = setup.config(&repo.file_url(), &host);

    let out = setup.sync(&config);

    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(
        repo.read("main", "apps/multi.yaml").unwrap(),
        deployment("multi", &format!("{host}/acme/multi:2@{}", index.index))
    );
}

/// The cost of a signed image: one `.sig` manifest GET and one payload blob GET the first
/// time; nothing once verified, for the life of the process.
#[tokio::test]
async fn a_verified_digest_costs_two_requests_once_and_none_after() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let release = KeyPair::generate_ecdsa_p256().unwrap();
    let web = registry.push_image("acme/web", "1", "web").await;
    sign(&registry, "acme/web", &web.manifest, &release).await;
    let client = Client::new(Settings {
        insecure_hosts: vec![host.clone()],
        ..Settings::default()
    })
    .unwrap();
    let rules = Signatures::compile(&[SignatureRule {
        matches: format!("{host}/acme/*"),
        keys: vec![SignatureKey {
            path: "keys/release.pub".into(),
            pem: release.public_key_der().unwrap().to_pem(),
        }],
        keyless: Vec::new(),
        trusted_root: None,
        notation: None,
    }])
    .unwrap();
    let reference = Reference::parse(&format!("{host}/acme/web:1")).unwrap();
    let digest: Digest = web.manifest.parse().unwrap();
    let (rule, trust) = rules.for_image(&reference).unwrap();
    let budget = Duration::from_secs(30);

    let (first, label) = fetch::check(&client, trust, rule, &reference, &digest, budget).await;
    assert_eq!(first.unwrap().to_string(), "key keys/release.pub");
    assert_eq!(label, "verified");
    let after_first = client.stats();
    assert_eq!(after_first.signature_requests, 2, "{after_first:?}");

    let (again, label) = fetch::check(&client, trust, rule, &reference, &digest, budget).await;
    assert_eq!(again.unwrap().to_string(), "key keys/release.pub");
    assert_eq!(label, "cached");
    assert_eq!(
        client.stats(),
        after_first,
        "no request for a verified digest"
    );
}

/// A Sigstore-like instance made by the test: a Fulcio-like CA, a Rekor key, and the
/// `trusted_root.json` naming both (no CT logs, so no SCT is asked for).
pub(crate) struct TestSigstore {
    ca: rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
    rekor: rcgen::KeyPair,
}

pub(crate) const ISSUER: &str = "https://issuer.test";
const WORKFLOW: &str = "https://github.com/acme/app/.github/workflows/release.yml@refs/tags/v1";

fn b64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl TestSigstore {
    pub(crate) fn new() -> TestSigstore {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
        ];
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "test-fulcio");
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2040, 1, 1);
        let ca = rcgen::CertifiedIssuer::self_signed(params, rcgen::KeyPair::generate().unwrap())
            .unwrap();
        TestSigstore {
            ca,
            rekor: rcgen::KeyPair::generate().unwrap(),
        }
    }

    pub(crate) fn trusted_root(&self) -> String {
        use rcgen::PublicKeyData;
        let spki = self.rekor.subject_public_key_info();
        serde_json::json!({
            "mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1",
            "tlogs": [{
                "baseUrl": "https://rekor.test",
                "hashAlgorithm": "SHA2_256",
                "publicKey": {"rawBytes": b64(&spki), "keyDetails": "PKIX_ECDSA_P256_SHA_256", "validFor": {"start": "2020-01-01T00:00:00Z"}},
                "logId": {"keyId": b64(&hex_decode(&sha256_hex(&spki)))},
            }],
            "certificateAuthorities": [{
                "subject": {"organization": "test", "commonName": "test-fulcio"},
                "uri": "https://fulcio.test",
                "certChain": {"certificates": [{"rawBytes": b64(self.ca.der())}]},
                "validFor": {"start": "2020-01-01T00:00:00Z"},
            }],
            "ctlogs": [],
            "timestampAuthorities": [],
        })
        .to_string()
    }

    /// Signs `digest` of `repo` keylessly as `subject`: a short-lived leaf certificate from
    /// the CA, the signature, and (with `logged`) the Rekor bundle annotation whose SET the
    /// test Rekor key signs. Pushes the `.sig` manifest and returns it.
    async fn sign(
        &self,
        registry: &TestRegistry,
        repo: &str,
        digest: &str,
        subject: &str,
        logged: bool,
    ) -> serde_json::Value {
        use rcgen::SigningKey as _;
        let now = time::OffsetDateTime::now_utc();
        let (leaf_key, leaf) = self.leaf(subject);
        let body = registry.cosign_payload(repo, digest);
        let signature = b64(&leaf_key.sign(&body).unwrap());
        let pem = leaf.pem();
        let mut annotations = serde_json::json!({
            "dev.cosignproject.cosign/signature": signature,
            "dev.sigstore.cosign/certificate": pem,
            "dev.sigstore.cosign/chain": self.ca.pem(),
        });
        if logged {
            use rcgen::PublicKeyData;
            let entry = serde_json::json!({
                "apiVersion": "0.0.1",
                "kind": "hashedrekord",
                "spec": {
                    "data": {"hash": {"algorithm": "sha256", "value": sha256_hex(&body)}},
                    "signature": {"content": signature, "publicKey": {"content": b64(pem.as_bytes())}},
                },
            });
            let log_id = sha256_hex(&self.rekor.subject_public_key_info());
            let integrated = now.unix_timestamp();
            let set = self.set(&entry, integrated);
            annotations["dev.sigstore.cosign/bundle"] = serde_json::json!({
                "SignedEntryTimestamp": set,
                "Payload": {"body": b64(entry.to_string().as_bytes()), "integratedTime": integrated, "logIndex": 7, "logID": log_id},
            })
            .to_string()
            .into();
        }
        let layer = registry.push_blob(repo, &body).await;
        let config = serde_json::to_vec(&serde_json::json!({
            "architecture": "", "os": "", "config": {},
            "rootfs": {"type": "layers", "diff_ids": [layer]},
        }))
        .unwrap();
        let config_digest = registry.push_blob(repo, &config).await;
        let manifest = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": config.len()},
            "layers": [{"mediaType": SIMPLE_SIGNING, "digest": layer, "size": body.len(), "annotations": annotations}],
        }))
        .unwrap();
        push_sig_manifest(registry, repo, digest, &manifest).await;
        serde_json::from_slice(&manifest).unwrap()
    }
}

impl TestSigstore {
    /// A short-lived leaf certificate from the CA for `subject` (a URI SAN), issued by
    /// [`ISSUER`], and its key.
    fn leaf(&self, subject: &str) -> (rcgen::KeyPair, rcgen::Certificate) {
        let now = time::OffsetDateTime::now_utc();
        let leaf_key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.subject_alt_names = vec![rcgen::SanType::URI(subject.try_into().unwrap())];
        params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::CodeSigning];
        let mut issuer_utf8 = vec![0x0c, ISSUER.len() as u8];
        issuer_utf8.extend_from_slice(ISSUER.as_bytes());
        params.custom_extensions = vec![
            rcgen::CustomExtension::from_oid_content(
                &[1, 3, 6, 1, 4, 1, 57264, 1, 1],
                ISSUER.as_bytes().to_vec(),
            ),
            rcgen::CustomExtension::from_oid_content(&[1, 3, 6, 1, 4, 1, 57264, 1, 8], issuer_utf8),
        ];
        params.not_before = now - time::Duration::minutes(1);
        params.not_after = now + time::Duration::minutes(10);
        let leaf = params.signed_by(&leaf_key, &self.ca).unwrap();
        (leaf_key, leaf)
    }

    /// The signed entry timestamp the test Rekor key gives log entry `entry` (index 7).
    fn set(&self, entry: &serde_json::Value, integrated: i64) -> String {
        use rcgen::{PublicKeyData, SigningKey as _};
        let log_id = sha256_hex(&self.rekor.subject_public_key_info());
        // RFC 8785 form: keys sorted, no blanks (cosign's VerifySET).
        let set_payload = format!(
            r#"{{"body":"{}","integratedTime":{integrated},"logID":"{log_id}","logIndex":7}}"#,
            b64(entry.to_string().as_bytes())
        );
        b64(&self.rekor.sign(set_payload.as_bytes()).unwrap())
    }

    /// A keyless Sigstore bundle (v0.1: certificate, and a `dsse` Rekor entry with its signed
    /// entry timestamp) of a DSSE envelope over `statement` (an in-toto statement), signed as
    /// `subject`: what `cosign attest --new-bundle-format` makes in a CI job.
    pub(crate) fn dsse_bundle(&self, statement: &[u8], subject: &str) -> Vec<u8> {
        use rcgen::{PublicKeyData, SigningKey as _};
        const IN_TOTO: &str = "application/vnd.in-toto+json";
        let (leaf_key, leaf) = self.leaf(subject);
        let mut pae =
            format!("DSSEv1 {} {IN_TOTO} {} ", IN_TOTO.len(), statement.len()).into_bytes();
        pae.extend_from_slice(statement);
        let signature = b64(&leaf_key.sign(&pae).unwrap());
        let envelope = serde_json::json!({
            "payloadType": IN_TOTO, "payload": b64(statement),
            "signatures": [{"sig": signature, "keyid": ""}],
        });
        let entry = serde_json::json!({
            "apiVersion": "0.0.1", "kind": "dsse",
            "spec": {
                "envelopeHash": {"algorithm": "sha256", "value": sha256_hex(envelope.to_string().as_bytes())},
                "payloadHash": {"algorithm": "sha256", "value": sha256_hex(statement)},
                "signatures": [{"signature": signature, "verifier": b64(leaf.pem().as_bytes())}],
            },
        });
        let integrated = time::OffsetDateTime::now_utc().unix_timestamp();
        let log_id = hex_decode(&sha256_hex(&self.rekor.subject_public_key_info()));
        serde_json::to_vec(&serde_json::json!({
            "mediaType": "application/vnd.dev.sigstore.bundle+json;version=0.1",
            "verificationMaterial": {
                "x509CertificateChain": {"certificates": [{"rawBytes": b64(leaf.der())}]},
                "tlogEntries": [{
                    "logIndex": "7", "logId": {"keyId": b64(&log_id)},
                    "kindVersion": {"kind": "dsse", "version": "0.0.1"},
                    "integratedTime": integrated.to_string(),
                    "inclusionPromise": {"signedEntryTimestamp": self.set(&entry, integrated)},
                    "canonicalizedBody": b64(entry.to_string().as_bytes()),
                }],
            },
            "dsseEnvelope": envelope,
        }))
        .unwrap()
    }
}

fn hex_decode(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

#[tokio::test]
async fn keyless_signatures_count_only_for_a_matching_identity_with_a_log_proof() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let sigstore = TestSigstore::new();
    let good = registry.push_image("acme/good", "1", "good").await;
    let good_sig = sigstore
        .sign(&registry, "acme/good", &good.manifest, WORKFLOW, true)
        .await;
    // A genuine signature whose log proof is swapped for the good image's (cosign's
    // "matching bundle to payload" check): the SET verifies, but not for this signature.
    let swapped = registry.push_image("acme/swapped", "1", "swapped").await;
    let mut swapped_sig = sigstore
        .sign(&registry, "acme/swapped", &swapped.manifest, WORKFLOW, true)
        .await;
    let bundle = "dev.sigstore.cosign/bundle";
    swapped_sig["layers"][0]["annotations"][bundle] =
        good_sig["layers"][0]["annotations"][bundle].clone();
    let swapped_bytes = serde_json::to_vec(&swapped_sig).unwrap();
    push_sig_manifest(&registry, "acme/swapped", &swapped.manifest, &swapped_bytes).await;
    let other = registry.push_image("acme/other", "1", "other").await;
    let intruder = "https://github.com/mallory/app/.github/workflows/release.yml@refs/tags/v1";
    sigstore
        .sign(&registry, "acme/other", &other.manifest, intruder, true)
        .await;
    let unlogged = registry.push_image("acme/unlogged", "1", "unlogged").await;
    sigstore
        .sign(
            &registry,
            "acme/unlogged",
            &unlogged.manifest,
            WORKFLOW,
            false,
        )
        .await;
    let files = [
        (
            "apps/good.yaml",
            deployment("good", &format!("{host}/acme/good:1")),
        ),
        (
            "apps/other.yaml",
            deployment("other", &format!("{host}/acme/other:1")),
        ),
        (
            "apps/swapped.yaml",
            deployment("swapped", &format!("{host}/acme/swapped:1")),
        ),
        (
            "apps/unlogged.yaml",
            deployment("unlogged", &format!("{host}/acme/unlogged:1")),
        ),
    ];
    let repo = BareRepo::create(
        &files
            .iter()
            .map(|(p, c)| (*p, c.as_str()))
            .collect::<Vec<_>>(),
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("trusted_root.json"),
        sigstore.trusted_root(),
    )
    .unwrap();
    let config = dir.path().join("tagpin.yaml");
    std::fs::write(
        &config,
        format!(
            "repository:\n  url: {}\n  branch: main\nauthor: {{name: tagpin-bot, email: bot@example.com}}\npaths: [apps]\nregistries:\n  insecure: [\"{host}\"]\nimages:\n  signatures:\n  - match: '{host}/acme/*'\n    keyless:\n    - issuer: {ISSUER}\n      subject: 'https://github\\.com/acme/[^/]+/\\.github/workflows/release\\.ya?ml@refs/tags/v.+'\n    trusted_root: trusted_root.json\n",
            repo.file_url()
        ),
    )
    .unwrap();
    let setup = Setup { dir };

    let out = setup.sync(&config);

    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_eq!(
        repo.read("main", "apps/good.yaml").unwrap(),
        deployment("good", &format!("{host}/acme/good:1@{}", good.manifest)),
        "{}",
        text(&out)
    );
    let changes = changes(&out);
    assert_eq!(
        changes[0]["signature"],
        serde_json::json!({"verified": true, "by": format!("keyless {WORKFLOW} ({ISSUER})")})
    );
    for (path, content) in &files[1..] {
        assert_eq!(
            &repo.read("main", path).unwrap(),
            content,
            "{path} changed\n{}",
            text(&out)
        );
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    for expected in [
        format!(
            "apps/other.yaml:10: {host}/acme/other:1@{}: not pinned: certificate identity {intruder} (issuer {ISSUER}) does not match images.signatures[0].keyless",
            other.manifest
        ),
        format!(
            "apps/unlogged.yaml:10: {host}/acme/unlogged:1@{}: not pinned: no transparency-log proof: the keyless signature has no dev.sigstore.cosign/bundle annotation",
            unlogged.manifest
        ),
        format!(
            "apps/swapped.yaml:10: {host}/acme/swapped:1@{}: not pinned: keyless signature does not verify against the trusted root: ",
            swapped.manifest
        ),
    ] {
        assert!(stderr.contains(&expected), "missing {expected:?} in\n{}", text(&out));
    }
}

/// `promote` checks signatures as `sync` does: staging runs (converged) a signed `web` and an
/// unsigned `api`; the promotion into production is refused as a whole, naming the unsigned
/// field, and production is left as it was. Once `api`'s digest is signed, both are carried,
/// each change reporting its signer.
#[tokio::test(flavor = "multi_thread")]
async fn promotion_refuses_a_digest_staging_runs_unsigned() {
    use support::kube::KubeServer;
    use support::workloads::LiveDeployment;
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let release = KeyPair::generate_ecdsa_p256().unwrap();
    let web = registry.push_image("acme/web", "1.1", "web-new").await;
    let api = registry.push_image("acme/api", "2.1", "api-new").await;
    sign(&registry, "acme/web", &web.manifest, &release).await;
    let pinned = |repo: &str, tag: &str, digest: &str| format!("{host}/acme/{repo}:{tag}@{digest}");
    let (web_new, api_new) = (
        pinned("web", "1.1", &web.manifest),
        pinned("api", "2.1", &api.manifest),
    );
    let old = "sha256:0000000000000000000000000000000000000000000000000000000000000001";
    let production = [
        (
            "production/web.yaml",
            deployment("web", &pinned("web", "1.0", old)),
        ),
        (
            "production/api.yaml",
            deployment("api", &pinned("api", "2.0", old)),
        ),
    ];
    let repo = BareRepo::create(&[
        ("staging/web.yaml", deployment("web", &web_new).as_str()),
        ("staging/api.yaml", deployment("api", &api_new).as_str()),
        (production[0].0, production[0].1.as_str()),
        (production[1].0, production[1].1.as_str()),
    ]);
    let staging = KubeServer::start().await;
    let setup = Setup::new(&release);
    let kubeconfig = staging.kubeconfig(setup.dir.path());
    for (name, image, digest) in [
        ("web", &web_new, &web.manifest),
        ("api", &api_new, &api.manifest),
    ] {
        let live = LiveDeployment::new("default", name).container("app", image);
        live.apply(&staging);
        live.pod(&format!("{name}-1"))
            .running(&staging, &[format!("{host}/acme/{name}@{digest}")]);
    }
    let config = setup.dir.path().join("tagpin.yaml");
    std::fs::write(
        &config,
        format!(
            "repository: {{url: '{}', branch: main}}\n\
             registries: {{insecure: ['{host}']}}\n\
             images:\n  signatures:\n  - match: '{host}/acme/*'\n    keys: [keys/release.pub]\n\
             promotion:\n  stages:\n\
             \x20 - {{name: staging, paths: [staging], cluster: {{kubeconfig: '{k}'}}}}\n\
             \x20 - {{name: production, paths: [production], cluster: {{kubeconfig: '{k}'}}, mode: commit}}\n",
            repo.file_url(),
            k = kubeconfig.display(),
        ),
    )
    .unwrap();
    let promote = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_tagpin"))
            .args([
                "promote",
                "--to",
                "production",
                "--output",
                "json",
                "--config",
            ])
            .arg(&config)
            .arg("--cache-dir")
            .arg(setup.dir.path().join("cache"))
            .env("HOME", setup.dir.path())
            .env("KUBECONFIG", setup.dir.path().join("no-kubeconfig"))
            .env_remove("DOCKER_CONFIG")
            .env_remove("RUST_LOG")
            .output()
            .expect("run tagpin")
    };

    let refused = promote();
    let report: serde_json::Value = serde_json::from_slice(&refused.stdout)
        .unwrap_or_else(|e| panic!("JSON report: {e}\n{}", text(&refused)));
    assert_eq!(report["gate"]["gate"], "open", "{report:#}");
    assert_eq!(
        report["failures"],
        serde_json::json!([format!(
            "production/api.yaml:10: {api_new}: not carried: no signature (the registry has no sha256-{}.sig tag and no Sigstore bundle referring to the digest)",
            &api.manifest["sha256:".len()..]
        )]),
        "{report:#}"
    );
    assert_ne!(refused.status.code(), Some(0), "{}", text(&refused));
    for (file, content) in &production {
        assert_eq!(
            &repo.read("main", file).unwrap(),
            content,
            "{file} untouched"
        );
    }

    sign(&registry, "acme/api", &api.manifest, &release).await;
    let carried = promote();
    assert_eq!(carried.status.code(), Some(0), "{}", text(&carried));
    let report: serde_json::Value = serde_json::from_slice(&carried.stdout).unwrap();
    let signers: Vec<&serde_json::Value> = report["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["signature"]["by"])
        .collect();
    assert_eq!(
        signers,
        ["key keys/release.pub", "key keys/release.pub"],
        "{report:#}"
    );
    assert_eq!(
        repo.read("main", "production/api.yaml").unwrap(),
        deployment("api", &api_new)
    );
}

/// `tagpin pin`/`pin --check` with `--config FILE` (its `images.signatures`) in `dir`.
fn pin(dir: &Path, config: &Path, args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_tagpin"))
        .arg("pin")
        .args(args)
        .arg("--config")
        .arg(config)
        .arg("apps")
        .current_dir(dir)
        .env("HOME", dir)
        .env_remove("DOCKER_CONFIG")
        .env_remove("RUST_LOG")
        .output()
        .expect("run tagpin")
}

#[tokio::test]
async fn pin_writes_only_signed_digests_and_pin_check_reports_pins_that_are_not_signed() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let release = KeyPair::generate_ecdsa_p256().unwrap();
    let web = registry.push_image("acme/web", "1.0", "web").await;
    sign(&registry, "acme/web", &web.manifest, &release).await;
    registry.push_image("acme/api", "1.0", "api").await;
    // Pinned by hand before images.signatures existed: current, and never signed.
    let old = registry.push_image("acme/old", "1.0", "old").await;
    let setup = Setup::new(&release);
    let config = setup.config("file:///unused", &host);
    let apps = setup.dir.path().join("apps");
    std::fs::create_dir_all(&apps).unwrap();
    let api_yaml = deployment("api", &format!("{host}/acme/api:1.0"));
    let old_yaml = deployment("old", &format!("{host}/acme/old:1.0@{}", old.manifest));
    std::fs::write(
        apps.join("web.yaml"),
        deployment("web", &format!("{host}/acme/web:1.0")),
    )
    .unwrap();
    std::fs::write(apps.join("api.yaml"), &api_yaml).unwrap();
    std::fs::write(apps.join("old.yaml"), &old_yaml).unwrap();

    let pinned = pin(setup.dir.path(), &config, &[]);

    assert_eq!(pinned.status.code(), Some(1), "{}", text(&pinned));
    assert_eq!(
        std::fs::read_to_string(apps.join("web.yaml")).unwrap(),
        deployment("web", &format!("{host}/acme/web:1.0@{}", web.manifest))
    );
    assert_eq!(
        std::fs::read_to_string(apps.join("api.yaml")).unwrap(),
        api_yaml
    );
    let refused = format!("apps/api.yaml:10: {host}/acme/api:1.0@");
    assert!(text(&pinned).contains(&refused), "{}", text(&pinned));
    assert!(
        text(&pinned).contains("not pinned: no signature"),
        "{}",
        text(&pinned)
    );
    assert!(
        !text(&pinned).contains("old.yaml:"),
        "a current pin is not checked by pin: {}",
        text(&pinned)
    );

    std::fs::remove_file(apps.join("api.yaml")).unwrap();
    let checked = pin(setup.dir.path(), &config, &["--check"]);

    assert_eq!(checked.status.code(), Some(1), "{}", text(&checked));
    let unsigned = format!(
        "apps/old.yaml:10: {host}/acme/old@{}: pinned but not signed: no signature",
        old.manifest
    );
    assert!(text(&checked).contains(&unsigned), "{}", text(&checked));
    assert!(!text(&checked).contains("web.yaml:"), "{}", text(&checked));
    assert_eq!(
        std::fs::read_to_string(apps.join("old.yaml")).unwrap(),
        old_yaml
    );

    sign(&registry, "acme/old", &old.manifest, &release).await;
    let clean = pin(setup.dir.path(), &config, &["--check"]);
    assert_eq!(clean.status.code(), Some(0), "{}", text(&clean));
}
