//! Looking a digest's signatures up, through tagpin's own registry client: cosign's
//! `sha256-<hex>.sig` tag, then each of its layers' payload blob. Every request is bounded in
//! size and time like a manifest request and counted with them; a digest verified once is
//! not fetched again while the process lives.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures::StreamExt;

use super::bundle;
use super::notation;
use super::verify::{self, Refusal, Signer, Trust, Verdict};
use super::{Subject, Verdicts};
use crate::reference::{Digest, Reference};
use crate::registry::Client;

/// At most this many signatures of one digest are checked (cosign appends one layer per
/// `cosign sign`); past it the first ones decide, so a flooded `.sig` tag costs a bounded
/// number of blob requests.
pub const MAX_SIGNATURE_LAYERS: usize = 8;

/// How many digests are looked up at once; the client's per-host limit applies below this.
const CONCURRENT_LOOKUPS: usize = 16;

/// How many verified digests are remembered; past it the memory starts over (a pass then
/// fetches again what it needs).
const MAX_REMEMBERED: usize = 50_000;

/// Verified digests, by (trust material, image, digest), with who signed them. Process-wide
/// because the controller builds a new syncer for every pass and every `PinnedRepository`;
/// the trust fingerprint keeps entries with different keys or identities apart.
fn remembered() -> &'static Mutex<HashMap<(String, Subject), Signer>> {
    static VERIFIED: OnceLock<Mutex<HashMap<(String, Subject), Signer>>> = OnceLock::new();
    VERIFIED.get_or_init(|| Mutex::new(HashMap::new()))
}

/// What a round of checks found, per result label of `tagpin_signature_checks_total`
/// (`verified`, `cached`, `unsigned`, `refused`, `error`).
pub type CheckCounts = BTreeMap<&'static str, u64>;

/// Checks every digest of `wanted` (see [`crate::plan::signatures_to_check`]) and records the verdicts in
/// `verdicts`; each lookup gets at most `budget`. Returns what was counted.
pub async fn check_all(
    client: &Client,
    verdicts: &mut Verdicts,
    wanted: BTreeMap<Subject, (Reference, Digest)>,
    budget: Duration,
) -> CheckCounts {
    let mut counts = CheckCounts::new();
    let jobs: Vec<_> = wanted
        .into_iter()
        .filter_map(|(subject, (reference, digest))| {
            let (rule, trust) = verdicts.rules.for_image(&reference)?;
            Some((subject, reference, digest, rule, trust.clone()))
        })
        .collect();
    let results: Vec<(Subject, Verdict, &'static str)> = futures::stream::iter(
        jobs.into_iter()
            .map(|(subject, reference, digest, rule, trust)| async move {
                let (verdict, label) =
                    check(client, &trust, rule, &reference, &digest, budget).await;
                (subject, verdict, label)
            }),
    )
    .buffer_unordered(CONCURRENT_LOOKUPS)
    .collect()
    .await;
    for (subject, verdict, label) in results {
        *counts.entry(label).or_insert(0) += 1;
        match &verdict {
            Ok(signer) => {
                tracing::debug!(image = %subject.image, digest = %subject.digest, by = %signer, "signature verified")
            }
            Err(refusal) => {
                tracing::info!(image = %subject.image, digest = %subject.digest, "signature refused: {refusal}")
            }
        }
        verdicts.checked.insert(subject, verdict);
    }
    counts
}

/// The verdict on one digest of `reference`'s repository, and its metric label.
pub async fn check(
    client: &Client,
    trust: &Arc<Trust>,
    rule: usize,
    reference: &Reference,
    digest: &Digest,
    budget: Duration,
) -> (Verdict, &'static str) {
    let key = (trust.fingerprint.clone(), Subject::of(reference, digest));
    let known = remembered()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&key)
        .cloned();
    if let Some(signer) = known {
        return (Ok(signer), "cached");
    }
    let verdict =
        match tokio::time::timeout(budget, look_up(client, trust, rule, reference, digest)).await {
            Ok(verdict) => verdict,
            Err(_) => Err(Refusal::Lookup(format!(
                "no answer within {}s",
                budget.as_secs()
            ))),
        };
    match &verdict {
        Ok(signer) => {
            let mut memory = remembered().lock().unwrap_or_else(|p| p.into_inner());
            if memory.len() >= MAX_REMEMBERED {
                memory.clear();
            }
            memory.insert(key, signer.clone());
            (verdict, "verified")
        }
        Err(refusal) => {
            let label = refusal.label();
            (verdict, label)
        }
    }
}

/// Looks for a signature of `digest` where cosign puts them: the `.sig` tag's layers first
/// (cosign before version 3), then the Sigstore bundles referring to it (cosign 3's default).
/// One valid signature suffices.
async fn look_up(
    client: &Client,
    trust: &Trust,
    rule: usize,
    reference: &Reference,
    digest: &Digest,
) -> Verdict {
    let mut verdicts = Vec::new();
    if trust.has_cosign() {
        match signature_tag(client, trust, rule, reference, digest).await {
            Ok(signer) => return Ok(signer),
            // No `.sig` tag: not a verdict, the referrers may hold one.
            Err(Refusal::NoSignature { .. }) => {}
            Err(refusal) => verdicts.push(Err(refusal)),
        }
        match referrers(client, trust, rule, reference, digest).await {
            Ok(signer) => return Ok(signer),
            Err(Refusal::NoSignature { .. }) => {}
            Err(refusal) => verdicts.push(Err(refusal)),
        }
    }
    if let Some(notation) = trust.notation() {
        match notation_signatures(client, notation, rule, reference, digest).await {
            Ok(signer) => return Ok(signer),
            // Cosign was looked for too: its "no signature" says more.
            Err(Refusal::NoNotationSignature) if trust.has_cosign() => {}
            Err(refusal) => verdicts.push(Err(refusal)),
        }
    }
    verify::combine(digest, verdicts)
}

/// Fetches the Notation signatures referring to `digest` (the referrers API, else its
/// fallback tag; at most [`notation::MAX_SIGNATURES`]) and checks each envelope, now.
async fn notation_signatures(
    client: &Client,
    trust: &notation::NotationTrust,
    rule: usize,
    reference: &Reference,
    digest: &Digest,
) -> Verdict {
    let index = match client.referrers(reference, digest).await {
        Ok(Some(index)) => index,
        Ok(None) => return Err(Refusal::NoNotationSignature),
        Err(e) => return Err(Refusal::Lookup(e.to_string())),
    };
    let now = u64::try_from(crate::clock::unix_now()).unwrap_or(0);
    let mut verdicts = Vec::new();
    for referrer in notation::signature_referrers(&index)? {
        let manifest = match client.manifest_bytes(reference, &referrer).await {
            Ok(manifest) => manifest,
            Err(e) => {
                verdicts.push(Err(Refusal::Lookup(e.to_string())));
                continue;
            }
        };
        let Some((layer, media_type)) = notation::envelope_layer(&manifest)? else {
            verdicts.push(Err(Refusal::Malformed(format!(
                "Notation signature {referrer} has no JWS or COSE envelope layer"
            ))));
            continue;
        };
        let verdict = match client.blob(reference, &layer).await {
            Ok(bytes) => notation::check_envelope(trust, rule, digest, &media_type, &bytes, now),
            Err(e) => Err(Refusal::Lookup(e.to_string())),
        };
        if verdict.is_ok() {
            return verdict;
        }
        verdicts.push(verdict);
    }
    match verdicts.is_empty() {
        true => Err(Refusal::NoNotationSignature),
        false => verify::combine(digest, verdicts),
    }
}

/// Fetches the `.sig` manifest and its layers' payloads and checks each.
async fn signature_tag(
    client: &Client,
    trust: &Trust,
    rule: usize,
    reference: &Reference,
    digest: &Digest,
) -> Verdict {
    let tag = verify::signature_tag(digest);
    let manifest = match client.tagged_manifest_bytes(reference, &tag).await {
        Ok(Some(manifest)) => manifest,
        Ok(None) => return Err(Refusal::NoSignature { tag }),
        Err(e) => return Err(Refusal::Lookup(e.to_string())),
    };
    let layers = verify::manifest_layers(&manifest)?;
    let mut verdicts = Vec::new();
    for layer in layers.iter().take(MAX_SIGNATURE_LAYERS) {
        // Not a signature payload (an attestation, another tool's layer): refused without
        // fetching it.
        if layer.media_type != verify::SIMPLE_SIGNING_MEDIA_TYPE {
            verdicts.push(verify::check_layer(trust, rule, digest, layer, &[]));
            continue;
        }
        let verdict = match client.blob(reference, &layer.digest).await {
            Ok(payload) => verify::check_layer(trust, rule, digest, layer, &payload),
            Err(e) => Err(Refusal::Lookup(e.to_string())),
        };
        if verdict.is_ok() {
            return verdict;
        }
        verdicts.push(verdict);
    }
    verify::combine(digest, verdicts)
}

/// Fetches the Sigstore bundles referring to `digest` (the referrers API, else its fallback
/// tag) and checks each.
async fn referrers(
    client: &Client,
    trust: &Trust,
    rule: usize,
    reference: &Reference,
    digest: &Digest,
) -> Verdict {
    let check = |bytes: &[u8]| bundle::check_bundle(trust, rule, digest, bytes);
    match referrer_bundles(client, reference, digest, check).await {
        Ok(signer) => Ok(signer),
        Err(refusals) if refusals.is_empty() => Err(Refusal::NoSignature {
            tag: verify::signature_tag(digest),
        }),
        Err(refusals) => verify::combine(digest, refusals.into_iter().map(Err)),
    }
}

/// Fetches the Sigstore bundles referring to `digest` (the referrers API, else its fallback
/// tag; at most [`bundle::MAX_REFERRERS`]) one by one and gives each to `check` until one
/// passes: what it returned, else every refusal, none when no bundle refers to the digest.
/// Signatures and provenance attestations are both found here.
pub async fn referrer_bundles<T, E: From<Refusal>>(
    client: &Client,
    reference: &Reference,
    digest: &Digest,
    check: impl Fn(&[u8]) -> Result<T, E>,
) -> Result<T, Vec<E>> {
    let index = match client.referrers(reference, digest).await {
        Ok(Some(index)) => index,
        Ok(None) => return Err(Vec::new()),
        Err(e) => return Err(vec![Refusal::Lookup(e.to_string()).into()]),
    };
    let referrers = bundle::bundle_referrers(&index).map_err(|r| vec![r.into()])?;
    let mut refusals = Vec::new();
    for referrer in referrers {
        let verdict = match client.manifest_bytes(reference, &referrer).await {
            Ok(manifest) => match bundle::bundle_layer(&manifest).map_err(|r| vec![r.into()])? {
                Some(layer) => match client.blob(reference, &layer).await {
                    Ok(bytes) => check(&bytes),
                    Err(e) => Err(Refusal::Lookup(e.to_string()).into()),
                },
                // Another artifact (an SBOM) listed without its type: not a bundle.
                None => continue,
            },
            Err(e) => Err(Refusal::Lookup(e.to_string()).into()),
        };
        match verdict {
            Ok(found) => return Ok(found),
            Err(refusal) => refusals.push(refusal),
        }
    }
    Err(refusals)
}
