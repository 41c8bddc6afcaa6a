//! Looking a digest's provenance up, through tagpin's own registry client: cosign's
//! `sha256-<hex>.att` tag and its DSSE layers, then the Sigstore bundles referring to the
//! digest (found as signatures find theirs). Every request is bounded and counted like a
//! manifest request; a digest verified once is not fetched again while the process lives.

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use super::attestation::{self, Claim};
use super::{Attested, ProvenanceRules, Refusal, Rule, Subject, Verdict, Verdicts};
use crate::reference::{Digest, Reference};
use crate::registry::{Client, Lookup, Stored};
use crate::signature::{bundle, gate, verify};

/// At most this many attestations of one `.att` tag are checked (cosign appends one layer per
/// `cosign attest`, SBOMs and other predicates included).
pub(crate) const MAX_ATTESTATION_LAYERS: usize = 8;

/// The provenance gate: its lookups run, and its passes are remembered, by
/// [`crate::signature::gate`].
pub(crate) struct ProvenanceGate;

impl gate::Gate for ProvenanceGate {
    type Rules = ProvenanceRules;
    type Rule = Arc<Rule>;
    type Passed = Attested;
    type Refusal = Refusal;
    const NAME: &'static str = "provenance";

    fn rule_for(rules: &ProvenanceRules, reference: &Reference) -> Option<Arc<Rule>> {
        rules.for_image(reference).cloned()
    }

    fn fingerprint(rule: &Arc<Rule>) -> &str {
        &rule.fingerprint
    }

    fn memory() -> &'static gate::Memory<Attested> {
        static VERIFIED: LazyLock<gate::Memory<Attested>> = LazyLock::new(Default::default);
        &VERIFIED
    }

    fn describe(attested: &Attested) -> String {
        attested.builder.clone()
    }

    async fn look_up<'a>(
        client: &'a Client,
        rule: &'a Arc<Rule>,
        reference: &'a Reference,
        digest: &'a Digest,
    ) -> Verdict {
        look_up(client, rule, reference, digest).await
    }
}

/// What a round of checks found, per result label of `tagpin_provenance_checks_total`
/// (`verified`, `cached`, `missing`, `refused`, `error`).
pub(crate) type CheckCounts = gate::CheckCounts;

/// Checks every digest of `wanted` (see [`crate::plan::provenance_to_check`]) and records the
/// verdicts in `verdicts`; each lookup gets at most `budget`. Returns what was counted.
pub(crate) async fn check_all(
    client: &Client,
    verdicts: &mut Verdicts,
    wanted: BTreeMap<Subject, (Reference, Digest)>,
    budget: Duration,
) -> CheckCounts {
    gate::check_all::<ProvenanceGate>(client, verdicts, wanted, budget).await
}

/// The verdict on one digest of `reference`'s repository under `rule`, and its metric label.
pub async fn check(
    client: &Client,
    rule: &Arc<Rule>,
    reference: &Reference,
    digest: &Digest,
    budget: Duration,
) -> (Verdict, &'static str) {
    gate::check::<ProvenanceGate>(client, rule, reference, digest, budget).await
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
        let verdict = match client
            .bytes(reference, &layer.digest, Stored::Blob, Lookup::Signature)
            .await
        {
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
