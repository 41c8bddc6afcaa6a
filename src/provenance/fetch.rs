//! Looking a digest's provenance up, through tagpin's own registry client: cosign's
//! `sha256-<hex>.att` tag and its DSSE layers, then the Sigstore bundles referring to the
//! digest (found as signatures find theirs). Every request is bounded and counted like a
//! manifest request; a digest verified once is not fetched again while the process lives.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures::StreamExt;

use super::attestation::{self, Claim};
use super::{Attested, Refusal, Rule, Subject, Verdict, Verdicts};
use crate::reference::{Digest, Reference};
use crate::registry::Client;
use crate::signature::{bundle, verify};

/// At most this many attestations of one `.att` tag are checked (cosign appends one layer per
/// `cosign attest`, SBOMs and other predicates included).
pub const MAX_ATTESTATION_LAYERS: usize = 8;

/// How many digests are looked up at once; the client's per-host limit applies below this.
const CONCURRENT_LOOKUPS: usize = 16;

/// How many verified digests are remembered; past it the memory starts over.
const MAX_REMEMBERED: usize = 50_000;

/// Verified digests, by (entry fingerprint, image, digest). Process-wide, as the controller
/// builds a new syncer for every pass and every `PinnedRepository`.
fn remembered() -> &'static Mutex<HashMap<(String, Subject), Attested>> {
    static VERIFIED: OnceLock<Mutex<HashMap<(String, Subject), Attested>>> = OnceLock::new();
    VERIFIED.get_or_init(|| Mutex::new(HashMap::new()))
}

/// What a round of checks found, per result label of `tagpin_provenance_checks_total`
/// (`verified`, `cached`, `missing`, `refused`, `error`).
pub type CheckCounts = BTreeMap<&'static str, u64>;

/// Checks every digest of `wanted` (see [`crate::plan::provenance_to_check`]) and records the
/// verdicts in `verdicts`; each lookup gets at most `budget`. Returns what was counted.
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
            let rule = verdicts.rules.for_image(&reference)?.clone();
            Some((subject, reference, digest, rule))
        })
        .collect();
    let results: Vec<(Subject, Verdict, &'static str)> = futures::stream::iter(
        jobs.into_iter()
            .map(|(subject, reference, digest, rule)| async move {
                let (verdict, label) = check(client, &rule, &reference, &digest, budget).await;
                (subject, verdict, label)
            }),
    )
    .buffer_unordered(CONCURRENT_LOOKUPS)
    .collect()
    .await;
    for (subject, verdict, label) in results {
        *counts.entry(label).or_insert(0) += 1;
        match &verdict {
            Ok(attested) => {
                tracing::debug!(image = %subject.image, digest = %subject.digest, builder = %attested.builder, "provenance verified")
            }
            Err(refusal) => {
                tracing::info!(image = %subject.image, digest = %subject.digest, "provenance refused: {refusal}")
            }
        }
        verdicts.checked.insert(subject, verdict);
    }
    counts
}

/// The verdict on one digest of `reference`'s repository under `rule`, and its metric label.
pub async fn check(
    client: &Client,
    rule: &Arc<Rule>,
    reference: &Reference,
    digest: &Digest,
    budget: Duration,
) -> (Verdict, &'static str) {
    let key = (rule.fingerprint.clone(), Subject::of(reference, digest));
    let known = remembered()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&key)
        .cloned();
    if let Some(attested) = known {
        return (Ok(attested), "cached");
    }
    let verdict = match tokio::time::timeout(budget, look_up(client, rule, reference, digest)).await
    {
        Ok(verdict) => verdict,
        Err(_) => Err(Refusal::Lookup(format!(
            "no answer within {}s",
            budget.as_secs()
        ))),
    };
    match &verdict {
        Ok(attested) => {
            let mut memory = remembered().lock().unwrap_or_else(|p| p.into_inner());
            if memory.len() >= MAX_REMEMBERED {
                memory.clear();
            }
            memory.insert(key, attested.clone());
            (verdict, "verified")
        }
        Err(refusal) => (verdict.clone(), refusal.label()),
    }
}

/// Looks for provenance of `digest` where cosign and GitHub put it: the `.att` tag's layers,
/// then the Sigstore bundles referring to it. One verified provenance suffices.
async fn look_up(client: &Client, rule: &Rule, reference: &Reference, digest: &Digest) -> Verdict {
    let mut verdicts = Vec::new();
    match attestation_tag(client, rule, reference, digest).await {
        Ok(attested) => return Ok(attested),
        Err(Refusal::NoAttestation { .. }) => {}
        Err(refusal) => verdicts.push(Err(refusal)),
    }
    let check = |bytes: &[u8]| {
        let (signer, claim) =
            bundle::verify_statement_bundle(&rule.trust, rule.index, digest, bytes, |payload| {
                attestation::read_statement(digest, payload)
            })?;
        attested(rule, signer, &claim)
    };
    match crate::signature::fetch::referrer_bundles(client, reference, digest, check).await {
        Ok(attested) => return Ok(attested),
        Err(refusals) => verdicts.extend(refusals.into_iter().map(Err)),
    }
    super::combine(digest, verdicts)
}

/// A verified claim, once its builder and source are the entry's.
fn attested(rule: &Rule, signer: crate::signature::Signer, claim: &Claim) -> Verdict {
    attestation::check_claim(rule, claim)?;
    Ok(Attested {
        builder: claim.builder.clone(),
        source: claim.source(),
        signer,
    })
}

/// Fetches the `.att` manifest and its DSSE layers and checks each.
async fn attestation_tag(
    client: &Client,
    rule: &Rule,
    reference: &Reference,
    digest: &Digest,
) -> Verdict {
    let tag = super::attestation_tag(digest);
    let manifest = match client.tagged_manifest_bytes(reference, &tag).await {
        Ok(Some(manifest)) => manifest,
        Ok(None) => return Err(Refusal::NoAttestation { tag }),
        Err(e) => return Err(Refusal::Lookup(e.to_string())),
    };
    let layers = verify::manifest_layers(&manifest)?;
    let mut verdicts = Vec::new();
    for layer in layers.iter().take(MAX_ATTESTATION_LAYERS) {
        if layer.media_type != attestation::DSSE_MEDIA_TYPE {
            verdicts.push(attestation::check_envelope(rule, digest, layer, &[]));
            continue;
        }
        let verdict = match client.blob(reference, &layer.digest).await {
            Ok(bytes) => attestation::check_envelope(rule, digest, layer, &bytes),
            Err(e) => Err(Refusal::Lookup(e.to_string())),
        };
        if verdict.is_ok() {
            return verdict;
        }
        verdicts.push(verdict);
    }
    super::combine(digest, verdicts)
}
