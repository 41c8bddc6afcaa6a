//! The signed variant of `bench_plan`: `cargo run --release --example bench_plan -- --signed`.
//!
//! Kept in its own file so the plain benchmark and this one change apart. It pushes the same 500
//! images (one in ten a multi-arch index) and signs each digest as `cosign sign --key` does (a
//! `sha256-<hex>.sig` manifest with one simple-signing layer, ECDSA P-256; an index is signed on
//! its index digest), writes the same 2,000 Deployments, and then, in each of `ROUNDS` rounds
//! (after a warm-up), in an order rotated from round to round:
//! - `plan` with no `images.signatures` (the streaming pass, `pass::run`);
//! - `plan` with every image required signed, first sight: the trust of the round has a key of
//!   its own beside the signing key, so the process-wide cache of verified digests (keyed by
//!   the trust) is cold, as in a new `tagpin plan` process or a controller's first pass;
//! - the same trust again in the same process: every digest verified already (`tagpin run`'s and
//!   the operator's later passes).
//!
//! It reports median (min to max) of the wall times, the time signatures add per image, and the
//! signature requests per image (`Client::stats`). Figures are printed, never asserted.
//!
//! `-- --provenance` runs the same with `images.provenance` instead (issue #41): each digest
//! attested as `cosign attest --key --type slsaprovenance1` does (a `sha256-<hex>.att` manifest
//! with one DSSE envelope over a SLSA v1 statement), every image required built by the same
//! builder from the same source and signed by the key.

use std::path::Path;
use std::time::{Duration, Instant};

use base64::Engine as _;
use futures::stream::{self, StreamExt};
use sigstore_crypto::KeyPair;
use tagpin::config::{ProvenanceRule, SignatureKey, SignatureRule};
use tagpin::manifest::FileFilter;
use tagpin::pass::{self, Signed};
use tagpin::provenance::ProvenanceRules;
use tagpin::reference::Reference;
use tagpin::signature::Signatures;

use super::registry_support::{Mode, TestRegistry};
use super::{client_for, deployment, ms, push_images, spread, IMAGES, MANIFESTS, ROUNDS};
use tagpin::registry::DEFAULT_CONCURRENCY_PER_HOST;

const PLAIN: usize = 0;
const FIRST: usize = 1;
const CACHED: usize = 2;

/// Which gate the variant requires of every image.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gate {
    Signatures,
    Provenance,
}

/// Signs (or attests) every image's digest (resolved first) with `key`, eight at a time.
async fn sign_all(
    registry: &TestRegistry,
    host: &str,
    images: &[(String, String)],
    key: &KeyPair,
    gate: Gate,
) {
    let client = client_for(host, DEFAULT_CONCURRENCY_PER_HOST);
    let refs: Vec<Reference> = images
        .iter()
        .map(|(image, _)| Reference::parse(image).unwrap())
        .collect();
    let resolved = client.resolve_all(refs.iter()).await;
    let signed: Vec<(String, String)> = images
        .iter()
        .zip(&refs)
        .map(|((_, repo_tag), reference)| {
            let key = tagpin::resolution::ResolveKey::of(reference);
            let digest = resolved[&key].as_ref().unwrap().digest.to_string();
            (repo_tag.split_once(':').unwrap().0.to_string(), digest)
        })
        .collect();
    stream::iter(signed)
        .for_each_concurrent(8, |(repo, digest)| async move {
            if gate == Gate::Provenance {
                return attest(registry, &repo, &digest, key).await;
            }
            let payload = registry.cosign_payload(&repo, &digest);
            let signature = key.sign(&payload).unwrap().to_base64();
            registry
                .push_cosign_signature(&repo, &digest, &payload, &signature)
                .await;
        })
        .await;
}

const BUILDER: &str = "https://github.com/actions/runner/github-hosted";
const SOURCE: &str = "https://github.com/acme/bench";

/// Attests `digest` of `repo` with a SLSA v1 provenance statement in a DSSE envelope signed
/// by `key`, under cosign's `.att` tag.
async fn attest(registry: &TestRegistry, repo: &str, digest: &str, key: &KeyPair) {
    const IN_TOTO: &str = "application/vnd.in-toto+json";
    const DSSE: &str = "application/vnd.dsse.envelope.v1+json";
    let statement = serde_json::to_vec(&serde_json::json!({
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": repo, "digest": {"sha256": digest.trim_start_matches("sha256:")}}],
        "predicateType": "https://slsa.dev/provenance/v1",
        "predicate": {
            "buildDefinition": {"externalParameters": {"workflow": {"repository": SOURCE, "ref": "refs/tags/v1.0.0"}}},
            "runDetails": {"builder": {"id": BUILDER}},
        },
    }))
    .unwrap();
    let mut pae = format!("DSSEv1 {} {IN_TOTO} {} ", IN_TOTO.len(), statement.len()).into_bytes();
    pae.extend_from_slice(&statement);
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    let envelope = serde_json::to_vec(&serde_json::json!({
        "payloadType": IN_TOTO,
        "payload": b64(&statement),
        "signatures": [{"sig": key.sign(&pae).unwrap().to_base64()}],
    }))
    .unwrap();
    let layer = registry.push_blob(repo, &envelope).await;
    let config = registry.push_blob(repo, b"{}").await;
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config, "size": 2},
        "layers": [{"mediaType": DSSE, "digest": layer, "size": envelope.len()}],
    }))
    .unwrap();
    let tag = format!("{}.att", digest.replace(':', "-"));
    registry
        .push_manifest(
            repo,
            &tag,
            "application/vnd.oci.image.manifest.v1+json",
            &manifest,
        )
        .await;
}

/// Every bench image required signed (or attested) by `release` or by this round's own key.
fn trust(host: &str, release: &KeyPair, gate: Gate) -> Signed {
    let pem = |key: &KeyPair| key.public_key_der().unwrap().to_pem();
    let round_key = KeyPair::generate_ecdsa_p256().unwrap();
    let rule = SignatureRule {
        matches: format!("{host}/bench/*"),
        keys: vec![
            SignatureKey {
                path: "keys/release.pub".into(),
                pem: pem(release),
            },
            SignatureKey {
                path: "keys/round.pub".into(),
                pem: pem(&round_key),
            },
        ],
        keyless: Vec::new(),
        trusted_root: None,
        notation: None,
    };
    if gate == Gate::Provenance {
        let rule = ProvenanceRule {
            matches: rule.matches.clone(),
            builder_id: r"https://github\.com/actions/runner/.+".into(),
            source_repository: SOURCE.into(),
            source_ref: Some("refs/tags/v.+".into()),
            signers: rule,
        };
        return Signed {
            provenance: ProvenanceRules::compile(&[rule]).unwrap(),
            budget: Duration::from_secs(60),
            ..Signed::default()
        };
    }
    Signed {
        rules: Signatures::compile(&[rule]).unwrap(),
        budget: Duration::from_secs(60),
        ..Signed::default()
    }
}

/// One plan pass over `root` with `signed` (none: the plain pass): wall time and signature
/// requests.
async fn plan(host: &str, root: &Path, signed: &Signed) -> (Duration, u64) {
    let client = client_for(host, DEFAULT_CONCURRENCY_PER_HOST);
    let (paths, filter) = ([root.to_path_buf()], FileFilter::default());
    let started = Instant::now();
    let pass = pass::run_signed(&paths, &filter, &client, signed, false).await;
    let wall = started.elapsed();
    assert!(!pass.has_failures(), "{:?}", pass.failures());
    assert_eq!(pass.plan.summary.to_pin, MANIFESTS);
    (wall, client.stats().signature_requests)
}

pub(crate) async fn run(gate: Gate) {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    eprintln!("pushing {IMAGES} images to {host} …");
    let images = push_images(&registry, &host).await;
    let release = KeyPair::generate_ecdsa_p256().unwrap();
    eprintln!("signing {IMAGES} digests …");
    sign_all(&registry, &host, &images, &release, gate).await;
    let tree = tempfile::tempdir().unwrap();
    for n in 0..MANIFESTS {
        let dir = tree.path().join(format!("team{}", n % 20));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join(format!("app-{n}.yaml")),
            deployment(n, &images[n % IMAGES].0),
        )
        .unwrap();
    }

    let (mut plain, mut first, mut cached) = (Vec::new(), Vec::new(), Vec::new());
    let (mut first_requests, mut cached_requests) = (0, 0);
    for round in 0..=ROUNDS {
        let signed = trust(&host, &release, gate);
        // The plain run goes before, between or after the pair; first sight always comes
        // before the run that finds every digest verified.
        let order: [usize; 3] = match round % 3 {
            0 => [PLAIN, FIRST, CACHED],
            1 => [FIRST, PLAIN, CACHED],
            _ => [FIRST, CACHED, PLAIN],
        };
        let mut times = [Duration::ZERO; 3];
        for kind in order {
            if kind == PLAIN {
                times[PLAIN] = plan(&host, tree.path(), &Signed::default()).await.0;
                continue;
            }
            let (wall, requests) = plan(&host, tree.path(), &signed).await;
            times[kind] = wall;
            if kind == FIRST {
                first_requests = requests;
            } else {
                cached_requests = requests;
            }
        }
        if round > 0 {
            plain.push(ms(times[PLAIN]));
            first.push(ms(times[FIRST]));
            cached.push(ms(times[CACHED]));
        }
    }
    let per_image = |signed: &[f64]| -> Vec<f64> {
        signed
            .iter()
            .zip(&plain)
            .map(|(s, p)| (s - p) * 1e3 / IMAGES as f64)
            .collect()
    };
    let variant = match gate {
        Gate::Signatures => "signed variant (images.signatures)",
        Gate::Provenance => "provenance variant (images.provenance)",
    };
    println!("tagpin plan benchmark, {variant}: {MANIFESTS} manifests, {IMAGES} distinct images, every one required; median (min to max) of {ROUNDS} rounds");
    println!(
        "  plan, no gate                     {} ms",
        spread(plain.clone(), 1)
    );
    println!(
        "  plan, all required, first sight   {} ms",
        spread(first.clone(), 1)
    );
    println!(
        "  plan, all required, verified     {} ms",
        spread(cached.clone(), 1)
    );
    println!(
        "  added per image, first sight      {} µs",
        spread(per_image(&first), 0)
    );
    println!(
        "  added per image, verified before  {} µs",
        spread(per_image(&cached), 0)
    );
    println!(
        "  signature/attestation requests    {first_requests} first sight ({:.1} per image), {cached_requests} verified before",
        first_requests as f64 / IMAGES as f64
    );
}
