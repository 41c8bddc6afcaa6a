//! Looking a digest's signatures up, through tagpin's own registry client: cosign's
//! `sha256-<hex>.sig` tag, then each of its layers' payload blob. Every request is bounded in
//! size and time like a manifest request and counted with them; a digest verified once is
//! not fetched again while the process lives.

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use super::verify::{self, Refusal, Signer, Trust, Verdict};
use super::{bundle, gate, notation};
use super::{Signatures, Subject, Verdicts};
use crate::reference::{Digest, Reference};
use crate::registry::{Client, Lookup, Stored};

/// At most this many signatures of one digest are checked (cosign appends one layer per
/// `cosign sign`); past it the first ones decide, so a flooded `.sig` tag costs a bounded
/// number of blob requests.
pub(crate) const MAX_SIGNATURE_LAYERS: usize = 8;

/// The signature gate: its lookups run, and its passes are remembered, by [`gate`].
pub(crate) struct SignatureGate;

impl gate::Gate for SignatureGate {
    type Rules = Signatures;
    /// The entry's index and trust.
    type Rule = (usize, Arc<Trust>);
    type Passed = Signer;
    type Refusal = Refusal;
    const NAME: &'static str = "signature";

    fn rule_for(rules: &Signatures, reference: &Reference) -> Option<Self::Rule> {
        rules
            .for_image(reference)
            .map(|(index, trust)| (index, trust.clone()))
    }

    fn fingerprint((_, trust): &Self::Rule) -> &str {
        trust.fingerprint()
    }

    fn memory() -> &'static gate::Memory<Signer> {
        static VERIFIED: LazyLock<gate::Memory<Signer>> = LazyLock::new(Default::default);
        &VERIFIED
    }

    fn describe(signer: &Signer) -> String {
        signer.to_string()
    }

    async fn look_up<'a>(
        client: &'a Client,
        (rule, trust): &'a Self::Rule,
        reference: &'a Reference,
        digest: &'a Digest,
    ) -> Verdict {
        look_up(client, trust, *rule, reference, digest).await
    }
}

/// What a round of checks found, per result label of `tagpin_signature_checks_total`
/// (`verified`, `cached`, `unsigned`, `refused`, `error`).
pub(crate) type CheckCounts = gate::CheckCounts;

/// Checks every digest of `wanted` (see [`crate::plan::signatures_to_check`]) and records the
/// verdicts in `verdicts`; each lookup gets at most `budget`. Returns what was counted.
pub(crate) async fn check_all(
    client: &Client,
    verdicts: &mut Verdicts,
    wanted: BTreeMap<Subject, (Reference, Digest)>,
    budget: Duration,
) -> CheckCounts {
    gate::check_all::<SignatureGate>(client, verdicts, wanted, budget).await
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
    let rule = (rule, trust.clone());
    gate::check::<SignatureGate>(client, &rule, reference, digest, budget).await
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
/// fallback tag; at most [`notation::MAX_SIGNATURES`], those naming a trust store certificate
/// first) and checks each envelope, now; a malformed referrer is one refusal among the others.
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
    let (referrers, refused) = notation::signature_referrers(&index, &trust.anchors)?;
    let mut verdicts: Vec<Verdict> = refused.into_iter().map(Err).collect();
    for referrer in referrers {
        let manifest = match client
            .bytes(reference, &referrer, Stored::Manifest, Lookup::Signature)
            .await
        {
            Ok(manifest) => manifest,
            Err(e) => {
                verdicts.push(Err(Refusal::Lookup(e.to_string())));
                continue;
            }
        };
        let (layer, media_type) = match notation::envelope_layer(&manifest) {
            Ok(Some(layer)) => layer,
            Ok(None) => {
                verdicts.push(Err(Refusal::Malformed(format!(
                    "Notation signature {referrer} has no JWS or COSE envelope layer"
                ))));
                continue;
            }
            // One malformed referrer does not hide the others.
            Err(refusal) => {
                verdicts.push(Err(refusal));
                continue;
            }
        };
        let verdict = match client
            .bytes(reference, &layer, Stored::Blob, Lookup::Signature)
            .await
        {
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
        let verdict = match client
            .bytes(reference, &layer.digest, Stored::Blob, Lookup::Signature)
            .await
        {
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
pub(crate) async fn referrer_bundles<T, E: From<Refusal>>(
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
        let verdict = match client
            .bytes(reference, &referrer, Stored::Manifest, Lookup::Signature)
            .await
        {
            Ok(manifest) => match bundle::bundle_layer(&manifest).map_err(|r| vec![r.into()])? {
                Some(layer) => match client
                    .bytes(reference, &layer, Stored::Blob, Lookup::Signature)
                    .await
                {
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
