//! Build provenance (`images.provenance`, issue #41): `tagpin sync` and `pin --config` as the
//! real binary against the real `docker-registry`, with SLSA provenance attestations the tests
//! make: in-toto statements in DSSE envelopes signed with ECDSA P-256 keys made here, pushed
//! as cosign lays them out (a `sha256-<hex>.att` tag whose layers are DSSE envelopes) and as
//! a Sigstore bundle attached as a referrer (through the referrers tag fallback, since the
//! registry serves no referrers API).

use crate::support;

use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use base64::Engine as _;
use sigstore_crypto::KeyPair;
use support::git::BareRepo;
use support::output_text as text;
use support::registry::{Mode, TestRegistry, OCI_MANIFEST};
use tagpin::config::{ProvenanceRule, SignatureKey, SignatureRule};
use tagpin::provenance::{fetch, ProvenanceRules};
use tagpin::reference::{Digest, Reference};
use tagpin::registry::{Client, Settings};

const IN_TOTO: &str = "application/vnd.in-toto+json";
const DSSE: &str = "application/vnd.dsse.envelope.v1+json";
pub(crate) const BUILDER: &str = "https://github.com/actions/runner/github-hosted";
pub(crate) const SOURCE: &str = "https://github.com/acme/web";

pub(crate) fn deployment(name: &str, image: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\nspec:\n  template:\n    spec:\n      containers:\n      - name: app\n        image: {image}\n"
    )
}

fn hex(text: &str) -> String {
    hex_bytes(text.as_bytes())
}

fn hex_bytes(bytes: &[u8]) -> String {
    support::registry::sha256_digest(bytes)
        .trim_start_matches("sha256:")
        .to_string()
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A SLSA v1 statement as GitHub's `actions/attest-build-provenance` writes it, about
/// `digest`, built by `builder` from `repository` at `refs/tags/v1.0.0`.
pub(crate) fn provenance(digest: &str, builder: &str, repository: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": "web", "digest": {"sha256": digest.trim_start_matches("sha256:")}}],
        "predicateType": "https://slsa.dev/provenance/v1",
        "predicate": {
            "buildDefinition": {
                "buildType": "https://actions.github.io/buildtypes/workflow/v1",
                "externalParameters": {"workflow": {"ref": "refs/tags/v1.0.0", "repository": repository, "path": ".github/workflows/release.yml"}},
                "resolvedDependencies": [{"uri": format!("git+{repository}@refs/tags/v1.0.0"), "digest": {"gitCommit": "0123abc"}}],
            },
            "runDetails": {"builder": {"id": builder}, "metadata": {"invocationId": "run-1"}},
        },
    }))
    .unwrap()
}

/// An SPDX SBOM statement about `digest` (an attestation, but not provenance).
fn sbom(digest: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": "web", "digest": {"sha256": digest.trim_start_matches("sha256:")}}],
        "predicateType": "https://spdx.dev/Document",
        "predicate": {"spdxVersion": "SPDX-2.3", "name": "web"},
    }))
    .unwrap()
}

/// DSSE's pre-authentication encoding, written out here from the spec rather than taken from
/// tagpin: `DSSEv1 <len(type)> <type> <len(body)> <body>`.
fn pae(payload: &[u8]) -> Vec<u8> {
    let mut out = format!("DSSEv1 {} {IN_TOTO} {} ", IN_TOTO.len(), payload.len()).into_bytes();
    out.extend_from_slice(payload);
    out
}

/// The DSSE envelope of `statement`, signed by `key` (none: unsigned).
pub(crate) fn envelope(statement: &[u8], key: Option<&KeyPair>) -> Vec<u8> {
    let signatures: Vec<_> = key
        .map(|key| serde_json::json!({"keyid": "", "sig": key.sign(&pae(statement)).unwrap().to_base64()}))
        .into_iter()
        .collect();
    serde_json::to_vec(&serde_json::json!({
        "payloadType": IN_TOTO,
        "payload": b64(statement),
        "signatures": signatures,
    }))
    .unwrap()
}

/// Attests `digest` of `repo` as `cosign attest --key` does: the `.att` tag, one DSSE layer
/// per attestation.
pub(crate) async fn attest(
    registry: &TestRegistry,
    repo: &str,
    digest: &str,
    envelopes: &[Vec<u8>],
) {
    let empty = registry.push_blob(repo, b"{}").await;
    let mut layers = Vec::new();
    for envelope in envelopes {
        let layer = registry.push_blob(repo, envelope).await;
        layers.push(serde_json::json!({
            "mediaType": DSSE, "digest": layer, "size": envelope.len(),
            "annotations": {"predicateType": "https://slsa.dev/provenance/v1"},
        }));
    }
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": empty, "size": 2},
        "layers": layers,
    }))
    .unwrap();
    let tag = format!("{}.att", digest.replace(':', "-"));
    registry
        .push_manifest(repo, &tag, OCI_MANIFEST, &manifest)
        .await;
}

/// Attests `digest` of `repo` with a Sigstore bundle (v0.3, a public key's DSSE envelope)
/// attached as a referrer, as `cosign attest --key --new-bundle-format` does.
async fn attest_bundle(
    registry: &TestRegistry,
    repo: &str,
    digest: &str,
    statement: &[u8],
    key: &KeyPair,
) {
    let wire: serde_json::Value = serde_json::from_slice(&envelope(statement, Some(key))).unwrap();
    // The Rekor entry `cosign attest` uploads (dsse v0.0.1): a key's bundle must carry one as
    // its signing-time evidence; tagpin checks it describes this envelope and this key.
    let body = serde_json::json!({
        "apiVersion": "0.0.1", "kind": "dsse", "spec": {
            "envelopeHash": {"algorithm": "sha256", "value": hex(&wire.to_string())},
            "payloadHash": {"algorithm": "sha256", "value": hex_bytes(statement)},
            "signatures": [{
                "signature": wire["signatures"][0]["sig"],
                "verifier": b64(key.public_key_der().unwrap().to_pem().as_bytes()),
            }],
        },
    });
    let bundle = serde_json::to_vec(&serde_json::json!({
        "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
        "verificationMaterial": {
            "publicKey": {"hint": "ci"},
            "tlogEntries": [{
                "logIndex": "1", "logId": {"keyId": b64(&[7; 32])},
                "kindVersion": {"kind": "dsse", "version": "0.0.1"},
                "integratedTime": "1796000000",
                "canonicalizedBody": b64(body.to_string().as_bytes()),
            }],
        },
        "dsseEnvelope": wire,
    }))
    .unwrap();
    crate::signatures_referrers::attach(registry, repo, digest, &bundle).await;
}

struct Setup {
    dir: tempfile::TempDir,
}

impl Setup {
    /// A working directory with `keys/ci.pub` holding `key`'s public half.
    fn new(key: &KeyPair) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("keys")).unwrap();
        std::fs::write(
            dir.path().join("keys/ci.pub"),
            key.public_key_der().unwrap().to_pem(),
        )
        .unwrap();
        Setup { dir }
    }

    /// `tagpin.yaml` requiring provenance of `<host>/acme/*` built by GitHub's runners from
    /// `https://github.com/acme/web` at a tag, signed by `keys/ci.pub`.
    fn config(&self, url: &str, host: &str) -> PathBuf {
        let path = self.dir.path().join("tagpin.yaml");
        std::fs::write(
            &path,
            format!(
                "repository:\n  url: {url}\n  branch: main\nauthor: {{name: tagpin-bot, email: bot@example.com}}\npaths: [apps]\nregistries:\n  insecure: [\"{host}\"]\nimages:\n  provenance:\n  - match: '{host}/acme/*'\n    builder_id: 'https://github\\.com/actions/runner/.+'\n    source_repository: {SOURCE}\n    source_ref: 'refs/tags/v.+'\n    keys: [keys/ci.pub]\n"
            ),
        )
        .unwrap();
        path
    }

    fn run(&self, args: &[&str]) -> Output {
        std::process::Command::new(env!("CARGO_BIN_EXE_tagpin"))
            .args(args)
            .current_dir(self.dir.path())
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
async fn provenance_of_the_right_builder_and_source_is_pinned_and_every_other_is_refused_with_its_reason(
) {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let ci = KeyPair::generate_ecdsa_p256().unwrap();
    let stranger = KeyPair::generate_ecdsa_p256().unwrap();
    let signed = |statement: &[u8]| envelope(statement, Some(&ci));

    // Right builder and source, as a `.att` tag (an SBOM beside it) and as a bundle referrer.
    let good = registry.push_image("acme/good", "1", "good").await;
    let good_att = [
        signed(&sbom(&good.manifest)),
        signed(&provenance(&good.manifest, BUILDER, SOURCE)),
    ];
    attest(&registry, "acme/good", &good.manifest, &good_att).await;
    let bundled = registry.push_image("acme/bundled", "1", "bundled").await;
    let statement = provenance(&bundled.manifest, BUILDER, SOURCE);
    attest_bundle(
        &registry,
        "acme/bundled",
        &bundled.manifest,
        &statement,
        &ci,
    )
    .await;
    // Another builder, another repository, another digest's provenance, an SBOM only, an
    // unsigned statement, one signed by a key the configuration does not name, nothing.
    let mut refused = Vec::new();
    for (name, why) in [
        ("builder", "other builder"),
        ("repository", "other repository"),
        ("copied", "other digest"),
        ("sbom", "sbom"),
        ("unsigned", "unsigned"),
        ("stranger", "stranger"),
        ("bare", "none"),
    ] {
        let image = registry
            .push_image(&format!("acme/{name}"), "1", name)
            .await;
        let digest = image.manifest.clone();
        let envelope = match why {
            "other builder" => signed(&provenance(
                &digest,
                "https://ci.evil.example/runner",
                SOURCE,
            )),
            "other repository" => signed(&provenance(
                &digest,
                BUILDER,
                "https://github.com/acme/fork",
            )),
            "other digest" => signed(&provenance(&good.manifest, BUILDER, SOURCE)),
            "sbom" => signed(&sbom(&digest)),
            "unsigned" => envelope(&provenance(&digest, BUILDER, SOURCE), None),
            "stranger" => envelope(&provenance(&digest, BUILDER, SOURCE), Some(&stranger)),
            _ => Vec::new(),
        };
        if !envelope.is_empty() {
            attest(&registry, &format!("acme/{name}"), &digest, &[envelope]).await;
        }
        refused.push((name, digest));
    }
    let mut files = vec![
        (
            "apps/good.yaml".to_string(),
            deployment("good", &format!("{host}/acme/good:1")),
        ),
        (
            "apps/bundled.yaml".to_string(),
            deployment("bundled", &format!("{host}/acme/bundled:1")),
        ),
    ];
    for (name, _) in &refused {
        files.push((
            format!("apps/{name}.yaml"),
            deployment(name, &format!("{host}/acme/{name}:1")),
        ));
    }
    let repo = BareRepo::create(
        &files
            .iter()
            .map(|(p, c)| (p.as_str(), c.as_str()))
            .collect::<Vec<_>>(),
    );
    let setup = Setup::new(&ci);
    let config = setup.config(&repo.file_url(), &host);
    let cache = setup.dir.path().join("cache");

    let out = setup.run(&[
        "sync",
        "--output",
        "json",
        "--config",
        config.to_str().unwrap(),
        "--cache-dir",
        cache.to_str().unwrap(),
    ]);

    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    for (name, digest) in [("good", &good.manifest), ("bundled", &bundled.manifest)] {
        assert_eq!(
            repo.read("main", &format!("apps/{name}.yaml")).unwrap(),
            deployment(name, &format!("{host}/acme/{name}:1@{digest}")),
            "{}",
            text(&out)
        );
    }
    let changes = changes(&out);
    assert_eq!(changes.len(), 2, "{}", text(&out));
    for change in &changes {
        assert_eq!(
            change["provenance"],
            serde_json::json!({"verified": true, "builder": BUILDER, "source": format!("{SOURCE}@refs/tags/v1.0.0")}),
            "{change}"
        );
    }
    for (path, content) in &files[2..] {
        assert_eq!(
            &repo.read("main", path).unwrap(),
            content,
            "{path} changed\n{}",
            text(&out)
        );
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let digest_of = |name: &str| refused.iter().find(|(n, _)| *n == name).unwrap().1.clone();
    let line = |name: &str, why: String| {
        format!(
            "apps/{name}.yaml:10: {host}/acme/{name}:1@{}: not pinned: {why}",
            digest_of(name)
        )
    };
    for expected in [
        line("builder", "provenance built by https://ci.evil.example/runner, not a builder images.provenance[0].builder_id accepts".into()),
        line("repository", "provenance of source https://github.com/acme/fork@refs/tags/v1.0.0, not images.provenance[0].source_repository".into()),
        line("copied", format!("the provenance attestation is for {}, not this digest (copied from another image)", good.manifest)),
        line("sbom", "an attestation of predicate type https://spdx.dev/Document, not SLSA provenance".into()),
        line("unsigned", "an unsigned provenance statement (its DSSE envelope carries no signature)".into()),
        line("stranger", "provenance signed by an unknown key: no key of images.provenance[0] verifies it".into()),
        line("bare", format!("no provenance attestation (the registry has no {}.att tag and no Sigstore bundle referring to the digest)", digest_of("bare").replace(':', "-"))),
    ] {
        assert!(stderr.contains(&expected), "missing {expected:?} in\n{}", text(&out));
    }
}

#[tokio::test]
async fn pin_with_a_config_writes_only_digests_with_accepted_provenance() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let ci = KeyPair::generate_ecdsa_p256().unwrap();
    let web = registry.push_image("acme/web", "1.0", "web").await;
    let statement = provenance(&web.manifest, BUILDER, SOURCE);
    attest(
        &registry,
        "acme/web",
        &web.manifest,
        &[envelope(&statement, Some(&ci))],
    )
    .await;
    let api = registry.push_image("acme/api", "1.0", "api").await;
    let forked = provenance(&api.manifest, BUILDER, "https://github.com/acme/fork");
    attest(
        &registry,
        "acme/api",
        &api.manifest,
        &[envelope(&forked, Some(&ci))],
    )
    .await;
    let setup = Setup::new(&ci);
    let config = setup.config("file:///unused", &host);
    let apps = setup.dir.path().join("apps");
    std::fs::create_dir_all(&apps).unwrap();
    let api_yaml = deployment("api", &format!("{host}/acme/api:1.0"));
    std::fs::write(
        apps.join("web.yaml"),
        deployment("web", &format!("{host}/acme/web:1.0")),
    )
    .unwrap();
    std::fs::write(apps.join("api.yaml"), &api_yaml).unwrap();

    let pinned = setup.run(&["pin", "--config", config.to_str().unwrap(), "apps"]);

    assert_eq!(pinned.status.code(), Some(1), "{}", text(&pinned));
    assert_eq!(
        std::fs::read_to_string(apps.join("web.yaml")).unwrap(),
        deployment("web", &format!("{host}/acme/web:1.0@{}", web.manifest))
    );
    assert_eq!(
        std::fs::read_to_string(apps.join("api.yaml")).unwrap(),
        api_yaml
    );
    let refused = format!(
        "apps/api.yaml:10: {host}/acme/api:1.0@{}: not pinned: provenance of source https://github.com/acme/fork@refs/tags/v1.0.0",
        api.manifest
    );
    assert!(text(&pinned).contains(&refused), "{}", text(&pinned));

    // A pin written by hand, before the entry existed: `pin --check` checks it too.
    std::fs::write(
        apps.join("api.yaml"),
        deployment("api", &format!("{host}/acme/api:1.0@{}", api.manifest)),
    )
    .unwrap();
    let checked = setup.run(&[
        "pin",
        "--check",
        "--config",
        config.to_str().unwrap(),
        "apps",
    ]);

    assert_eq!(checked.status.code(), Some(1), "{}", text(&checked));
    let unattested = format!(
        "apps/api.yaml:10: {host}/acme/api@{}: pinned without accepted provenance: provenance of source https://github.com/acme/fork@refs/tags/v1.0.0",
        api.manifest
    );
    assert!(text(&checked).contains(&unattested), "{}", text(&checked));
    assert!(!text(&checked).contains("web.yaml:"), "{}", text(&checked));
}

/// The cost of an image that needs provenance: the `.att` manifest and its one envelope the
/// first time; nothing once verified, for the life of the process.
#[tokio::test]
async fn verified_provenance_costs_two_requests_once_and_none_after() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let ci = KeyPair::generate_ecdsa_p256().unwrap();
    let web = registry.push_image("acme/web", "1", "web").await;
    let statement = provenance(&web.manifest, BUILDER, SOURCE);
    attest(
        &registry,
        "acme/web",
        &web.manifest,
        &[envelope(&statement, Some(&ci))],
    )
    .await;
    let client = Client::new(Settings {
        insecure_hosts: vec![host.clone()],
        ..Settings::default()
    })
    .unwrap();
    let rules = ProvenanceRules::compile(&[ProvenanceRule {
        matches: format!("{host}/acme/*"),
        builder_id: r"https://github\.com/actions/runner/.+".into(),
        source_repository: SOURCE.into(),
        source_ref: None,
        signers: SignatureRule {
            matches: format!("{host}/acme/*"),
            keys: vec![SignatureKey {
                path: "keys/ci.pub".into(),
                pem: ci.public_key_der().unwrap().to_pem(),
            }],
            keyless: Vec::new(),
            trusted_root: None,
            notation: None,
        },
    }])
    .unwrap();
    let reference = Reference::parse(&format!("{host}/acme/web:1")).unwrap();
    let digest: Digest = web.manifest.parse().unwrap();
    let rule = rules.for_image(&reference).unwrap();
    let budget = Duration::from_secs(30);

    let (first, label) = fetch::check(&client, rule, &reference, &digest, budget).await;
    assert_eq!(first.unwrap().signer.to_string(), "key keys/ci.pub");
    assert_eq!(label, "verified");
    let after_first = client.stats();
    assert_eq!(after_first.signature_requests, 2, "{after_first:?}");

    let (again, label) = fetch::check(&client, rule, &reference, &digest, budget).await;
    assert_eq!(again.unwrap().builder, BUILDER);
    assert_eq!(label, "cached");
    assert_eq!(
        client.stats(),
        after_first,
        "no request for a verified digest"
    );
}

/// `tagpin promote` carries a digest only with accepted provenance: staging runs two new
/// digests, one attested from a fork; nothing of that promotion is written until it is
/// attested from the right source, and the carried changes then report their provenance.
#[tokio::test(flavor = "multi_thread")]
async fn promotion_refuses_a_digest_built_from_another_repository() {
    use support::kube::KubeServer;
    use support::workloads::LiveDeployment;
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let ci = KeyPair::generate_ecdsa_p256().unwrap();
    let web = registry.push_image("acme/web", "1.1", "web-new").await;
    let api = registry.push_image("acme/api", "2.1", "api-new").await;
    let attested =
        |digest: &str, source: &str| envelope(&provenance(digest, BUILDER, source), Some(&ci));
    attest(
        &registry,
        "acme/web",
        &web.manifest,
        &[attested(&web.manifest, SOURCE)],
    )
    .await;
    let fork = "https://github.com/acme/fork";
    attest(
        &registry,
        "acme/api",
        &api.manifest,
        &[attested(&api.manifest, fork)],
    )
    .await;
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
    let setup = Setup::new(&ci);
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
             images:\n  provenance:\n  - match: '{host}/acme/*'\n    builder_id: 'https://github\\.com/actions/runner/.+'\n    source_repository: {SOURCE}\n    keys: [keys/ci.pub]\n\
             promotion:\n  stages:\n\
             \x20 - {{name: staging, paths: [staging], cluster: {{kubeconfig: '{k}'}}}}\n\
             \x20 - {{name: production, paths: [production], cluster: {{kubeconfig: '{k}'}}, mode: commit}}\n",
            repo.file_url(),
            k = kubeconfig.display(),
        ),
    )
    .unwrap();
    let cache = setup.dir.path().join("cache");
    let promote = || {
        let mut run = std::process::Command::new(env!("CARGO_BIN_EXE_tagpin"));
        run.args([
            "promote",
            "--to",
            "production",
            "--output",
            "json",
            "--config",
        ])
        .arg(&config)
        .arg("--cache-dir")
        .arg(&cache)
        .env("HOME", setup.dir.path())
        .env("KUBECONFIG", setup.dir.path().join("no-kubeconfig"))
        .env_remove("DOCKER_CONFIG")
        .env_remove("RUST_LOG");
        run.output().expect("run tagpin")
    };

    let refused = promote();
    let report: serde_json::Value = serde_json::from_slice(&refused.stdout)
        .unwrap_or_else(|e| panic!("JSON report: {e}\n{}", text(&refused)));
    assert_eq!(
        report["failures"],
        serde_json::json!([format!(
            "production/api.yaml:10: {api_new}: not carried: provenance of source {fork}@refs/tags/v1.0.0, not images.provenance[0].source_repository"
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

    attest(
        &registry,
        "acme/api",
        &api.manifest,
        &[attested(&api.manifest, SOURCE)],
    )
    .await;
    let carried = promote();
    assert_eq!(carried.status.code(), Some(0), "{}", text(&carried));
    let report: serde_json::Value = serde_json::from_slice(&carried.stdout).unwrap();
    let sources: Vec<&serde_json::Value> = report["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["provenance"]["source"])
        .collect();
    let source = format!("{SOURCE}@refs/tags/v1.0.0");
    assert_eq!(sources, [&source, &source], "{report:#}");
    assert_eq!(
        repo.read("main", "production/api.yaml").unwrap(),
        deployment("api", &api_new)
    );
}

/// A keyless provenance bundle (the test's Fulcio-like CA and Rekor key, as in the signature
/// tests) attached as a referrer: accepted for a matching identity, refused for another.
#[tokio::test]
async fn a_keyless_bundle_counts_for_a_matching_identity_only() {
    use crate::signatures::{TestSigstore, ISSUER};
    use tagpin::config::{KeylessIdentity, SignatureFile};
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let sigstore = TestSigstore::new();
    let web = registry.push_image("acme/web", "1", "web").await;
    let workflow = "https://github.com/acme/web/.github/workflows/release.yml@refs/tags/v1.0.0";
    let statement = provenance(&web.manifest, BUILDER, SOURCE);
    let bundle = sigstore.dsse_bundle(&statement, workflow);
    crate::signatures_referrers::attach(&registry, "acme/web", &web.manifest, &bundle).await;
    let client = Client::new(Settings {
        insecure_hosts: vec![host.clone()],
        ..Settings::default()
    })
    .unwrap();
    let rules = |subject: &str| {
        ProvenanceRules::compile(&[ProvenanceRule {
            matches: format!("{host}/acme/*"),
            builder_id: r"https://github\.com/actions/runner/.+".into(),
            source_repository: SOURCE.into(),
            source_ref: Some("refs/tags/v.+".into()),
            signers: SignatureRule {
                matches: format!("{host}/acme/*"),
                keys: Vec::new(),
                keyless: vec![KeylessIdentity {
                    issuer: ISSUER.into(),
                    subject: subject.into(),
                }],
                trusted_root: Some(SignatureFile {
                    path: "trusted_root.json".into(),
                    contents: sigstore.trusted_root(),
                }),
                notation: None,
            },
        }])
        .unwrap()
    };
    let reference = Reference::parse(&format!("{host}/acme/web:1")).unwrap();
    let digest: Digest = web.manifest.parse().unwrap();
    let budget = Duration::from_secs(30);

    let ours = rules(r"https://github\.com/acme/web/\.github/workflows/release\.yml@refs/tags/v.+");
    let rule = ours.for_image(&reference).unwrap();
    let (verdict, label) = fetch::check(&client, rule, &reference, &digest, budget).await;
    let attested = verdict.unwrap_or_else(|refusal| panic!("{refusal}"));
    assert_eq!(label, "verified");
    assert_eq!(
        attested.signer.to_string(),
        format!("keyless {workflow} ({ISSUER})")
    );
    assert_eq!(attested.source, format!("{SOURCE}@refs/tags/v1.0.0"));

    let theirs = rules(r"https://github\.com/acme/api/.+");
    let rule = theirs.for_image(&reference).unwrap();
    let (verdict, label) = fetch::check(&client, rule, &reference, &digest, budget).await;
    assert_eq!(label, "refused");
    assert_eq!(
        verdict.unwrap_err().to_string(),
        format!("provenance signed by {workflow} (issuer {ISSUER}), not an identity of images.provenance[0].keyless")
    );
}
