//! Looking a digest's signatures up, through tagpin's own registry client: cosign's
//! `sha256-<hex>.sig` tag, then each of its layers' payload blob. Every request is bounded in
//! size and time like a manifest request and counted with them; a digest verified once is
//! not fetched again while the process lives.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures::StreamExt;

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

/// Fetches the `.sig` manifest and its layers' payloads and checks each.
async fn look_up(
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
