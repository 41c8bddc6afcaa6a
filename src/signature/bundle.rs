//! Sigstore bundles attached to a digest as OCI 1.1 referrers (what `cosign sign` writes by
//! default since cosign 3, instead of a `.sig` tag), decided without I/O: which referrers may
//! hold one, where its bundle layer is, and whether the bundle signs *this* digest with a key
//! or an identity the configuration trusts.
//!
//! An image signature bundle is a DSSE envelope over an in-toto statement whose subject is the
//! image digest and whose predicate type is cosign's `https://sigstore.dev/cosign/sign/v1`;
//! an attestation (SLSA provenance, an SBOM) by the same identity is not a signature. The
//! verification (certificate chain, SCT, inclusion proof and checkpoint, signed entry
//! timestamp, log entry bound to this envelope, DSSE signature) is sigstore-verify's.

use std::sync::OnceLock;

use serde::Deserialize;
use sigstore_types::bundle::{SignatureContent, VerificationMaterialContent};

use super::verify::{Refusal, Signer, Trust, Verdict};
use crate::reference::Digest;

/// The media type of a Sigstore bundle, every version (`…bundle.v0.3+json`,
/// `…bundle+json;version=0.2`).
pub(crate) const BUNDLE_MEDIA_TYPE_PREFIX: &str = "application/vnd.dev.sigstore.bundle";
/// The in-toto predicate type of a cosign image signature.
pub(crate) const COSIGN_SIGN_PREDICATE: &str = "https://sigstore.dev/cosign/sign/v1";
/// The DSSE payload type of an in-toto statement.
pub(crate) const IN_TOTO_PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";
/// Referrers looked at per digest at most: a bound on what a hostile index can make tagpin
/// fetch.
pub(crate) const MAX_REFERRERS: usize = 8;

/// The referrer manifests of a referrers index that may hold a Sigstore bundle: those whose
/// `artifactType` is a bundle's, and those with none or the empty type (ghcr.io lists cosign's
/// bundles with `application/vnd.oci.empty.v1+json`), bundles first, at most
/// [`MAX_REFERRERS`].
pub(crate) fn bundle_referrers(index: &[u8]) -> Result<Vec<Digest>, Refusal> {
    let mut bundles = Vec::new();
    let mut untyped = Vec::new();
    for referrer in referrers(index)? {
        let kind = referrer.artifact_type.as_deref().unwrap_or_default();
        let list = if kind.starts_with(BUNDLE_MEDIA_TYPE_PREFIX) {
            &mut bundles
        } else if kind.is_empty() || kind == "application/vnd.oci.empty.v1+json" {
            &mut untyped
        } else {
            continue;
        };
        list.push(referrer_digest(&referrer.digest)?);
    }
    bundles.extend(untyped);
    bundles.truncate(MAX_REFERRERS);
    Ok(bundles)
}

/// One manifest a referrers index lists: its digest as written (read by [`referrer_digest`]
/// when it is used), its artifact type (empty when unset) and its annotations.
#[derive(Debug, Deserialize)]
pub struct Referrer {
    pub digest: String,
    #[serde(rename = "artifactType", default)]
    pub artifact_type: Option<String>,
    #[serde(default)]
    pub annotations: std::collections::BTreeMap<String, String>,
}

/// The manifests a referrers index lists, in its order.
pub fn referrers(index: &[u8]) -> Result<Vec<Referrer>, Refusal> {
    #[derive(Deserialize)]
    struct Index {
        #[serde(default)]
        manifests: Vec<Referrer>,
    }
    let parsed: Index = serde_json::from_slice(index)
        .map_err(|e| Refusal::Malformed(format!("referrers index: {e}")))?;
    Ok(parsed.manifests)
}

/// A referrer's digest, as a referrers index wrote it.
pub(crate) fn referrer_digest(digest: &str) -> Result<Digest, Refusal> {
    Digest::parse(digest).map_err(|e| Refusal::Malformed(format!("referrer digest: {e}")))
}

/// The digest of a referrer manifest's Sigstore bundle layer, if it has one.
pub(crate) fn bundle_layer(manifest: &[u8]) -> Result<Option<Digest>, Refusal> {
    Ok(super::verify::manifest_layers(manifest)?
        .into_iter()
        .find(|layer| layer.media_type.starts_with(BUNDLE_MEDIA_TYPE_PREFIX))
        .map(|layer| layer.digest))
}

/// Checks a Sigstore bundle against `trust` (entry `rule` of `images.signatures`): it must be
/// cosign's image signature of `pinned` itself, and verify with a configured key, or keyless
/// against the trusted root with a matching identity.
pub(crate) fn check_bundle(trust: &Trust, rule: usize, pinned: &Digest, bytes: &[u8]) -> Verdict {
    verify_statement_bundle(trust, rule, pinned, bytes, |payload| {
        check_statement(pinned, payload)
    })
    .map(|(signer, ())| signer)
}

/// Verifies a Sigstore bundle whose content is a DSSE envelope over an in-toto statement
/// about `pinned`: `statement` reads the payload first (what it refuses is the verdict), then
/// the bundle must verify with one of `trust`'s keys, or keyless against its trusted root
/// with a matching identity. What signatures and provenance attestations share.
pub(crate) fn verify_statement_bundle<T, E: From<Refusal>>(
    trust: &Trust,
    rule: usize,
    pinned: &Digest,
    bytes: &[u8],
    statement: impl FnOnce(&[u8]) -> Result<T, E>,
) -> Result<(Signer, T), E> {
    let text = std::str::from_utf8(bytes)
        .map_err(|_| Refusal::Malformed("Sigstore bundle: not UTF-8".into()))?;
    let bundle = sigstore_types::Bundle::from_json(text)
        .map_err(|e| Refusal::Malformed(format!("Sigstore bundle: {e}")))?;
    let SignatureContent::DsseEnvelope(envelope) = &bundle.content else {
        return Err(Refusal::NotImageSignature {
            kind: "a message signature, not an in-toto statement".into(),
        }
        .into());
    };
    if envelope.payload_type != IN_TOTO_PAYLOAD_TYPE {
        return Err(Refusal::NotImageSignature {
            kind: envelope.payload_type.clone(),
        }
        .into());
    }
    let read = statement(envelope.payload.as_bytes())?;
    let artifact = sigstore_types::Sha256Hash::from_hex(pinned.hex())
        .map_err(|e| Refusal::Malformed(format!("digest {pinned}: {e}")))?;
    let signer = match &bundle.verification_material.content {
        VerificationMaterialContent::PublicKey(_) => {
            let verifier = match &trust.keyless_verifier {
                Some(verifier) => verifier,
                None => public_good()?,
            };
            // As for a `.sig` signed with a key, the key's signature is what counts; the log
            // entry, when there is one, is checked for consistency with it by the library.
            trust
                .keys
                .iter()
                .find_map(|(name, key)| {
                    let policy = sigstore_verify::PublicKeyVerificationPolicy::new(key.clone())
                        .skip_tlog_unsafe();
                    verifier
                        .verify(artifact, &bundle, &policy)
                        .ok()
                        .map(|_| Signer(name.clone()))
                })
                .ok_or(Refusal::UnknownKey { rule })?
        }
        _ => {
            let Some(verifier) = &trust.keyless_verifier else {
                return Err(Refusal::KeylessNotConfigured { rule }.into());
            };
            let policy = sigstore_verify::VerificationPolicy::any_identity();
            let policy = match trust.verify_sct {
                true => policy,
                false => policy.skip_sct(),
            };
            let verified = verifier
                .verify(artifact, &bundle, &policy)
                .map_err(|e| Refusal::Keyless(e.to_string()))?;
            trust.identity_of(rule, &verified)?
        }
    };
    Ok((signer, read))
}

/// The in-toto statement must be cosign's image signature and name `pinned` among its
/// subjects.
fn check_statement(pinned: &Digest, payload: &[u8]) -> Result<(), Refusal> {
    let statement = Statement::read(payload)
        .map_err(|e| Refusal::Malformed(format!("in-toto statement: {e}")))?;
    if statement.predicate_type != COSIGN_SIGN_PREDICATE {
        return Err(Refusal::NotImageSignature {
            kind: statement.predicate_type,
        });
    }
    statement
        .names(pinned)
        .map_err(|named| Refusal::OtherDigest {
            signed: named.unwrap_or_else(|| "no digest".into()),
        })
}

/// An in-toto statement (v1 or v0.1), what a signature bundle and a provenance attestation
/// both sign: its subjects, predicate type and predicate.
#[derive(Deserialize)]
pub(crate) struct Statement {
    #[serde(default)]
    subject: Vec<StatementSubject>,
    #[serde(rename = "predicateType", default)]
    pub predicate_type: String,
    #[serde(default)]
    pub predicate: serde_json::Value,
}

#[derive(Deserialize)]
struct StatementSubject {
    #[serde(default)]
    digest: std::collections::BTreeMap<String, String>,
}

impl Statement {
    pub(crate) fn read(payload: &[u8]) -> Result<Statement, serde_json::Error> {
        serde_json::from_slice(payload)
    }

    /// Whether a subject names `pinned`; if not, the first digest of its algorithm a subject
    /// names (`sha256:…`), if any.
    pub(crate) fn names(&self, pinned: &Digest) -> Result<(), Option<String>> {
        let mut named = self
            .subject
            .iter()
            .filter_map(|s| s.digest.get(pinned.algorithm()));
        let first = named.clone().next();
        if named.any(|hex| hex.as_str() == pinned.hex()) {
            return Ok(());
        }
        Err(first.map(|hex| format!("{}:{hex}", pinned.algorithm())))
    }
}

/// A verifier against the public-good root, for key bundles of an entry with no keyless
/// identity (the key's signature is what counts; the root is not consulted for it).
fn public_good() -> Result<&'static sigstore_verify::Verifier, Refusal> {
    static VERIFIER: OnceLock<Option<sigstore_verify::Verifier>> = OnceLock::new();
    VERIFIER
        .get_or_init(|| {
            let root = sigstore_trust_root::TrustedRoot::from_embedded(
                sigstore_trust_root::SigstoreInstance::PublicGood,
            )
            .ok()?;
            sigstore_verify::Verifier::new(&root).ok()
        })
        .as_ref()
        .ok_or_else(|| Refusal::Malformed("the public-good trusted root does not load".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundle_referrers_come_first_other_artifacts_are_skipped_and_the_list_is_bounded() {
        let d = |n: u8| format!("sha256:{}", format!("{n:02x}").repeat(32));
        let mut manifests = vec![
            serde_json::json!({"digest": d(1), "artifactType": "application/spdx+json"}),
            serde_json::json!({"digest": d(2), "artifactType": "application/vnd.oci.empty.v1+json"}),
            serde_json::json!({"digest": d(3), "artifactType": "application/vnd.dev.sigstore.bundle.v0.3+json"}),
        ];
        for n in 10..30 {
            manifests.push(serde_json::json!({"digest": d(n)}));
        }
        let index = serde_json::to_vec(&serde_json::json!({"manifests": manifests})).unwrap();
        let found = bundle_referrers(&index).unwrap();
        assert_eq!(found.len(), MAX_REFERRERS);
        assert_eq!(found[0].to_string(), d(3));
        assert_eq!(found[1].to_string(), d(2));
        assert!(!found.iter().any(|f| f.to_string() == d(1)));
    }

    #[test]
    fn a_statement_of_another_digest_or_predicate_is_refused() {
        let pinned = Digest::parse(&format!("sha256:{}", "ab".repeat(32))).unwrap();
        let statement = |hex: &str, predicate: &str| {
            serde_json::to_vec(&serde_json::json!({
                "_type": "https://in-toto.io/Statement/v1",
                "subject": [{"digest": {"sha256": hex}}],
                "predicateType": predicate,
            }))
            .unwrap()
        };
        assert!(check_statement(&pinned, &statement(pinned.hex(), COSIGN_SIGN_PREDICATE)).is_ok());
        assert!(matches!(
            check_statement(&pinned, &statement(&"cd".repeat(32), COSIGN_SIGN_PREDICATE)),
            Err(Refusal::OtherDigest { .. })
        ));
        assert!(matches!(
            check_statement(
                &pinned,
                &statement(pinned.hex(), "https://slsa.dev/provenance/v1")
            ),
            Err(Refusal::NotImageSignature { .. })
        ));
    }
}
