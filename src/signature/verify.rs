//! The decisions about one signature, without I/O: does this cosign `.sig` layer, with the
//! payload bytes the registry sent for it, sign *this* digest with a key (or, keyless, an
//! identity) the configuration trusts? The cryptography is sigstore-crypto's; what is here is
//! the layout cosign writes and the checks around it.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use sha2::{Digest as _, Sha256};
use sigstore_types::{DerPublicKey, SignatureBytes};

use super::keys;
use super::rules::SignatureRule;
use crate::reference::Digest;

/// Why a signature entry cannot be used: only for a configuration not loaded from a file (a
/// file's entries are checked at load, with these messages).
#[derive(Debug, thiserror::Error)]
pub enum SignatureError {
    #[error("images.signatures[{index}].match: invalid glob {glob:?}")]
    Glob {
        index: usize,
        glob: String,
        #[source]
        source: globset::Error,
    },
    #[error("images.signatures[{index}].keys: {path}: {source}")]
    Key {
        index: usize,
        path: String,
        #[source]
        source: keys::KeyError,
    },
    #[error("images.signatures[{index}].trusted_root: {source}")]
    Root {
        index: usize,
        #[source]
        source: keys::RootError,
    },
    #[error("images.signatures[{index}].keyless: the public-good trusted root shipped with tagpin: {detail}")]
    EmbeddedRoot { index: usize, detail: String },
    #[error("images.signatures[{index}].notation: {source}")]
    Notation {
        index: usize,
        #[source]
        source: super::trust_policy::NotationError,
    },
    #[error("images.signatures[{index}].keyless: invalid subject regex")]
    Keyless {
        index: usize,
        #[source]
        source: regex::Error,
    },
}

/// Who may sign the images of one `images.signatures` entry, ready to verify with.
pub struct Trust {
    /// `key keys/release.pub` and the key.
    pub(super) keys: Vec<(String, DerPublicKey)>,
    /// Issuer (exact) and subject (anchored regex).
    pub(super) keyless: Vec<(String, regex::Regex)>,
    /// The verifier of keyless signatures, against the entry's trusted root (the public-good
    /// one by default); `None` when the entry names no keyless identity.
    pub(super) keyless_verifier: Option<sigstore_verify::Verifier>,
    /// Whether certificates must carry an SCT: only when the trusted root lists CT logs.
    pub(super) verify_sct: bool,
    /// Notation signers (trust store and identities); `None` when the entry names none.
    pub(super) notation: Option<super::trust_policy::NotationTrust>,
    /// Identifies the trust material, so a remembered verdict is reused only under the same.
    pub(super) fingerprint: String,
}

impl fmt::Debug for Trust {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Trust")
            .field(
                "keys",
                &self.keys.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .field("keyless", &self.keyless)
            .finish()
    }
}

impl Trust {
    /// The signer of a verified keyless signature, if its certificate's issuer and subject
    /// match one of the entry's identities (issuer exactly, subject by anchored regex).
    pub(super) fn identity_of(
        &self,
        rule: usize,
        verified: &sigstore_verify::VerificationResult,
    ) -> Result<Signer, Refusal> {
        let subject = verified
            .identity()
            .map(ToString::to_string)
            .unwrap_or_default();
        let issuer = verified.issuer().unwrap_or_default().to_string();
        let matches = self
            .keyless
            .iter()
            .any(|(want, re)| *want == issuer && re.is_match(&subject));
        match matches {
            true => Ok(Signer(format!("keyless {subject} ({issuer})"))),
            false => Err(Refusal::Identity {
                rule,
                subject,
                issuer,
            }),
        }
    }

    /// The configured key whose signature over `payload` `signature` (base64) is, if any.
    pub(crate) fn key_that_signed(&self, payload: &[u8], signature: &str) -> Option<Signer> {
        let signature = SignatureBytes::from_base64(signature.trim()).ok()?;
        self.keys.iter().find_map(|(name, key)| {
            let key = sigstore_crypto::VerificationKey::from_spki(key).ok()?;
            key.verify(payload, &signature)
                .ok()
                .map(|()| Signer(name.clone()))
        })
    }

    /// Identifies the trust material (keys, identities, root).
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// Whether cosign signatures (keys or keyless identities) are accepted.
    pub(crate) fn has_cosign(&self) -> bool {
        !self.keys.is_empty() || !self.keyless.is_empty()
    }

    /// The Notation signers, if the entry names any.
    pub fn notation(&self) -> Option<&super::trust_policy::NotationTrust> {
        self.notation.as_ref()
    }

    pub fn compile(index: usize, rule: &SignatureRule) -> Result<Trust, SignatureError> {
        let keys = rule
            .keys
            .iter()
            .map(|k| {
                keys::parse_key(&k.pem)
                    .map(|key| (format!("key {}", k.path), key))
                    .map_err(|source| SignatureError::Key {
                        index,
                        path: k.path.clone(),
                        source,
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let keyless = rule
            .keyless
            .iter()
            .map(|id| {
                keys::subject_regex(&id.subject)
                    .map(|re| (id.issuer.clone(), re))
                    .map_err(|source| SignatureError::Keyless { index, source })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut material = String::new();
        for key in &rule.keys {
            material.push_str(&key.pem);
            material.push('\0');
        }
        for id in &rule.keyless {
            material.push_str(&format!("{}\0{}\0", id.issuer, id.subject));
        }
        if let Some(root) = &rule.trusted_root {
            material.push_str(&root.contents);
        }
        if let Some(notation) = &rule.notation {
            material.push_str("\0notation\0");
            for file in &notation.trust_store {
                material.push_str(&file.contents);
                material.push('\0');
            }
            for identity in &notation.identities {
                material.push_str(identity);
                material.push('\0');
            }
        }
        let notation = rule
            .notation
            .as_ref()
            .map(|n| {
                let pems: Vec<&str> = n.trust_store.iter().map(|f| f.contents.as_str()).collect();
                super::trust_policy::NotationTrust::compile(&pems, &n.identities)
            })
            .transpose()
            .map_err(|source| SignatureError::Notation { index, source })?;
        let (keyless_verifier, verify_sct) = match rule.keyless.is_empty() {
            true => (None, false),
            false => {
                let root = match &rule.trusted_root {
                    Some(file) => keys::parse_trusted_root(&file.contents)
                        .map_err(|source| SignatureError::Root { index, source })?,
                    None => sigstore_trust_root::TrustedRoot::from_embedded(
                        sigstore_trust_root::SigstoreInstance::PublicGood,
                    )
                    .map_err(|e| SignatureError::EmbeddedRoot {
                        index,
                        detail: e.to_string(),
                    })?,
                };
                let verify_sct = !root.ctlogs.is_empty();
                let verifier = sigstore_verify::Verifier::new(&root).map_err(|e| {
                    SignatureError::EmbeddedRoot {
                        index,
                        detail: e.to_string(),
                    }
                })?;
                (Some(verifier), verify_sct)
            }
        };
        Ok(Trust {
            keys,
            keyless,
            keyless_verifier,
            verify_sct,
            notation,
            fingerprint: sha256_hex(material.as_bytes()),
        })
    }
}

/// The media type of a cosign simple-signing payload layer.
pub(crate) const SIMPLE_SIGNING_MEDIA_TYPE: &str =
    "application/vnd.dev.cosign.simplesigning.v1+json";
/// The annotation holding the base64 signature over the layer's bytes.
pub(crate) const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// The annotation holding a keyless signature's Fulcio certificate (PEM).
pub(crate) const CERTIFICATE_ANNOTATION: &str = "dev.sigstore.cosign/certificate";
/// The annotation holding the Rekor bundle (signed entry timestamp and log entry) of a
/// keyless signature: its transparency-log proof.
pub(crate) const BUNDLE_ANNOTATION: &str = "dev.sigstore.cosign/bundle";
/// `critical.type` of a cosign image signature payload: anything else (an attestation, a
/// payload of another tool) is not a signature of the image.
pub(crate) const COSIGN_SIGNATURE_TYPE: &str = "cosign container image signature";

/// One layer of a `.sig` manifest, as its descriptor describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layer {
    pub digest: Digest,
    pub media_type: String,
    pub annotations: BTreeMap<String, String>,
}

/// Why a digest's signatures do not count. The text is what a user reads after
/// `file:line: image@digest: not pinned: `.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("no signature (the registry has no {tag} tag and no Sigstore bundle referring to the digest)")]
    NoSignature { tag: String },
    #[error("signed by an unknown key: no key of images.signatures[{rule}] verifies the signature over its payload")]
    UnknownKey { rule: usize },
    #[error("the signature is for {signed}, not this digest (copied from another image)")]
    OtherDigest { signed: String },
    #[error("the signed payload is not a cosign image signature (type {kind:?})")]
    NotImageSignature { kind: String },
    #[error(
        "no transparency-log proof: the keyless signature has no {BUNDLE_ANNOTATION} annotation"
    )]
    NoLogProof,
    #[error("keyless signature does not verify against the trusted root: {0}")]
    Keyless(String),
    #[error("certificate identity {subject} (issuer {issuer}) does not match images.signatures[{rule}].keyless")]
    Identity {
        rule: usize,
        subject: String,
        issuer: String,
    },
    #[error("keyless signature, but images.signatures[{rule}] names no keyless identity")]
    KeylessNotConfigured { rule: usize },
    #[error("signature layer {claimed} hashes to {computed}; nothing of it was used")]
    LayerDigest { claimed: String, computed: String },
    #[error("malformed signature: {0}")]
    Malformed(String),
    #[error("no signature (no Notation signature refers to the digest)")]
    NoNotationSignature,
    #[error("Notation signature not supported: {0}")]
    NotationUnsupported(String),
    #[error("the Notation signature does not verify with its signing certificate's key")]
    NotationSignature,
    #[error("Notation certificate {subject} does not chain to images.signatures[{rule}].notation.trust_store: {detail}")]
    NotationUntrusted {
        rule: usize,
        subject: String,
        detail: String,
    },
    #[error("{0}")]
    NotationCertificate(String),
    #[error("certificate {subject} is valid from {valid}, but the Notation signature was {when}")]
    CertificateTime {
        subject: String,
        valid: String,
        when: String,
    },
    #[error("the Notation signature expired at {expiry} (io.cncf.notary.expiry)")]
    NotationExpired { expiry: String },
    #[error(
        "Notation signer {subject} is not one of images.signatures[{rule}].notation.identities"
    )]
    NotationIdentity { rule: usize, subject: String },
    /// The lookup itself failed (registry unreachable, 401, …): not a verdict on the image,
    /// but still no signature seen, so nothing is pinned.
    #[error("signature lookup failed: {0}")]
    Lookup(String),
}

impl Refusal {
    /// How telling a refusal is, when a digest carries several signatures that all fail: a
    /// valid signature of another digest says more than an unsigned layer.
    fn weight(&self) -> u8 {
        match self {
            Refusal::OtherDigest { .. } => 7,
            Refusal::Identity { .. } | Refusal::NotationIdentity { .. } => 6,
            Refusal::Keyless(_) | Refusal::NoLogProof => 5,
            Refusal::NotImageSignature { .. } => 5,
            Refusal::NotationExpired { .. } | Refusal::CertificateTime { .. } => 5,
            Refusal::NotationUntrusted { .. } | Refusal::NotationCertificate(_) => 5,
            Refusal::UnknownKey { .. } | Refusal::NotationSignature => 4,
            Refusal::KeylessNotConfigured { .. } | Refusal::NotationUnsupported(_) => 3,
            Refusal::LayerDigest { .. } => 2,
            Refusal::Malformed(_) => 1,
            Refusal::NoSignature { .. } | Refusal::NoNotationSignature | Refusal::Lookup(_) => 0,
        }
    }

    /// The result label of `tagpin_signature_checks_total`.
    pub fn label(&self) -> &'static str {
        match self {
            Refusal::NoSignature { .. } | Refusal::NoNotationSignature => "unsigned",
            Refusal::Lookup(_) => "error",
            _ => "refused",
        }
    }
}

/// Who signed a digest, as reports say it: `key keys/release.pub`, or the certificate's
/// subject and issuer for a keyless signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signer(pub String);

impl fmt::Display for Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The verdict on one digest: who signed it, or why none of its signatures count.
pub type Verdict = Result<Signer, Refusal>;

/// The cosign `.sig` tag of a digest: `sha256-<hex>.sig`.
pub(crate) fn signature_tag(digest: &Digest) -> String {
    format!("{}-{}.sig", digest.algorithm(), digest.hex())
}

/// The layers of a `.sig` manifest (an OCI image manifest; one layer per signature).
pub(crate) fn manifest_layers(manifest: &[u8]) -> Result<Vec<Layer>, Refusal> {
    #[derive(Deserialize)]
    struct Manifest {
        #[serde(default)]
        layers: Vec<Descriptor>,
    }
    #[derive(Deserialize)]
    struct Descriptor {
        #[serde(rename = "mediaType")]
        media_type: String,
        digest: String,
        #[serde(default)]
        annotations: BTreeMap<String, String>,
    }
    let parsed: Manifest = serde_json::from_slice(manifest)
        .map_err(|e| Refusal::Malformed(format!("signature manifest: {e}")))?;
    parsed
        .layers
        .into_iter()
        .map(|d| {
            let digest = Digest::parse(&d.digest)
                .map_err(|e| Refusal::Malformed(format!("signature layer digest: {e}")))?;
            Ok(Layer {
                digest,
                media_type: d.media_type,
                annotations: d.annotations,
            })
        })
        .collect()
}

/// The verdict on `pinned` from each layer's own verdict: one valid signature suffices;
/// otherwise the most telling refusal; no layer at all is no signature.
pub(crate) fn combine(pinned: &Digest, verdicts: impl IntoIterator<Item = Verdict>) -> Verdict {
    let mut worst: Option<Refusal> = None;
    for verdict in verdicts {
        match verdict {
            Ok(signer) => return Ok(signer),
            Err(refusal) => {
                if worst.as_ref().is_none_or(|w| refusal.weight() > w.weight()) {
                    worst = Some(refusal);
                }
            }
        }
    }
    Err(worst.unwrap_or(Refusal::NoSignature {
        tag: signature_tag(pinned),
    }))
}

/// Checks one `.sig` layer against `trust` (entry `rule` of `images.signatures`): the
/// payload's bytes must hash to the layer digest (before anything reads them), the signature
/// over them must verify with a configured key, and the payload must be a cosign image
/// signature of `pinned` itself.
pub(crate) fn check_layer(
    trust: &Trust,
    rule: usize,
    pinned: &Digest,
    layer: &Layer,
    payload: &[u8],
) -> Verdict {
    if layer.media_type != SIMPLE_SIGNING_MEDIA_TYPE {
        return Err(Refusal::Malformed(format!(
            "layer {} is {}, not {SIMPLE_SIGNING_MEDIA_TYPE}",
            layer.digest, layer.media_type
        )));
    }
    let computed = sha256_hex(payload);
    if layer.digest.algorithm() != "sha256" || layer.digest.hex() != computed {
        return Err(Refusal::LayerDigest {
            claimed: layer.digest.to_string(),
            computed: format!("sha256:{computed}"),
        });
    }
    let Some(signature) = layer.annotations.get(SIGNATURE_ANNOTATION) else {
        return Err(Refusal::Malformed(format!(
            "layer {} has no {SIGNATURE_ANNOTATION} annotation",
            layer.digest
        )));
    };
    let certificate = layer.annotations.get(CERTIFICATE_ANNOTATION);
    let signer = match (trust.key_that_signed(payload, signature), certificate) {
        (Some(signer), _) => signer,
        (None, Some(certificate)) => match &trust.keyless_verifier {
            Some(verifier) => {
                let bundle = layer
                    .annotations
                    .get(BUNDLE_ANNOTATION)
                    .ok_or(Refusal::NoLogProof)?;
                let verified = verify_keyless(
                    verifier,
                    trust.verify_sct,
                    payload,
                    signature,
                    certificate,
                    bundle,
                )?;
                trust.identity_of(rule, &verified)?
            }
            None => return Err(Refusal::KeylessNotConfigured { rule }),
        },
        (None, None) => return Err(Refusal::UnknownKey { rule }),
    };
    check_payload(pinned, payload)?;
    Ok(signer)
}

/// Verifies a keyless `.sig` layer with sigstore-verify: its annotations are mapped, as
/// data, onto the v0.1 Sigstore bundle they are (message signature, certificate, Rekor entry
/// with its signed entry timestamp), and the library checks the chain to the trusted root's
/// Fulcio CA, the SET against its Rekor key, that the log entry is this very signature,
/// certificate and payload, and the certificate's validity at the logged time.
fn verify_keyless(
    verifier: &sigstore_verify::Verifier,
    verify_sct: bool,
    payload: &[u8],
    signature: &str,
    certificate: &str,
    bundle: &str,
) -> Result<sigstore_verify::VerificationResult, Refusal> {
    #[derive(Deserialize)]
    struct RekorBundle {
        #[serde(rename = "SignedEntryTimestamp")]
        set: String,
        #[serde(rename = "Payload")]
        payload: RekorPayload,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct RekorPayload {
        body: String,
        integrated_time: i64,
        log_index: i64,
        #[serde(rename = "logID")]
        log_id: String,
    }
    let malformed = |what: &str, e: &dyn fmt::Display| Refusal::Malformed(format!("{what}: {e}"));
    let rekor: RekorBundle =
        serde_json::from_str(bundle).map_err(|e| malformed(BUNDLE_ANNOTATION, &e))?;
    let certificate = sigstore_types::DerCertificate::from_pem(certificate)
        .map_err(|e| malformed(CERTIFICATE_ANNOTATION, &e))?;
    let log_id =
        hex::decode(&rekor.payload.log_id).map_err(|_| malformed("logID", &"not hexadecimal"))?;
    use base64::Engine as _;
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    let v01 = serde_json::json!({
        "mediaType": "application/vnd.dev.sigstore.bundle+json;version=0.1",
        "verificationMaterial": {
            "x509CertificateChain": {"certificates": [{"rawBytes": b64(certificate.as_bytes())}]},
            "tlogEntries": [{
                "logIndex": rekor.payload.log_index.to_string(),
                "logId": {"keyId": b64(&log_id)},
                "kindVersion": {"kind": "hashedrekord", "version": "0.0.1"},
                "integratedTime": rekor.payload.integrated_time.to_string(),
                "inclusionPromise": {"signedEntryTimestamp": rekor.set},
                "canonicalizedBody": rekor.payload.body,
            }],
        },
        "messageSignature": {
            "messageDigest": {"algorithm": "SHA2_256", "digest": b64(&Sha256::digest(payload))},
            "signature": signature.trim(),
        },
    });
    let bundle: sigstore_types::Bundle =
        serde_json::from_value(v01).map_err(|e| malformed(BUNDLE_ANNOTATION, &e))?;
    let policy = sigstore_verify::VerificationPolicy::any_identity();
    let policy = if verify_sct {
        policy
    } else {
        policy.skip_sct()
    };
    verifier
        .verify(payload, &bundle, &policy)
        .map_err(|e| Refusal::Keyless(e.to_string()))
}

/// The simple-signing payload must name `pinned` and be an image signature.
pub(crate) fn check_payload(pinned: &Digest, payload: &[u8]) -> Result<(), Refusal> {
    #[derive(Deserialize)]
    struct Payload {
        critical: Critical,
    }
    #[derive(Deserialize)]
    struct Critical {
        #[serde(rename = "type")]
        kind: String,
        image: Image,
    }
    #[derive(Deserialize)]
    struct Image {
        #[serde(rename = "docker-manifest-digest")]
        digest: String,
    }
    let parsed: Payload = serde_json::from_slice(payload)
        .map_err(|e| Refusal::Malformed(format!("signed payload: {e}")))?;
    if parsed.critical.kind != COSIGN_SIGNATURE_TYPE {
        return Err(Refusal::NotImageSignature {
            kind: parsed.critical.kind,
        });
    }
    if parsed.critical.image.digest != pinned.to_string() {
        return Err(Refusal::OtherDigest {
            signed: parsed.critical.image.digest,
        });
    }
    Ok(())
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::signature::rules::{SignatureKey, SignatureRule};
    use sigstore_crypto::KeyPair;

    const PINNED: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
    const OTHER: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";

    /// A rule for every image that trusts `keys` (as `keys/<i>.pub`) and nothing else.
    pub(crate) fn key_rule(keys: &[&KeyPair]) -> SignatureRule {
        SignatureRule {
            matches: "*".into(),
            keys: keys
                .iter()
                .enumerate()
                .map(|(i, k)| SignatureKey {
                    path: format!("keys/{i}.pub"),
                    pem: k.public_key_der().unwrap().to_pem(),
                })
                .collect(),
            keyless: Vec::new(),
            trusted_root: None,
            notation: None,
        }
    }

    fn trust_of(keys: &[&KeyPair]) -> Trust {
        Trust::compile(0, &key_rule(keys)).unwrap()
    }

    fn payload(digest: &str, kind: &str) -> Vec<u8> {
        format!(
            r#"{{"critical":{{"identity":{{"docker-reference":"r/app"}},"image":{{"docker-manifest-digest":"{digest}"}},"type":"{kind}"}},"optional":null}}"#
        )
        .into_bytes()
    }

    fn layer(payload: &[u8], signer: &KeyPair) -> Layer {
        let signature = signer.sign(payload).unwrap().to_base64();
        Layer {
            digest: Digest::parse(&format!("sha256:{}", sha256_hex(payload))).unwrap(),
            media_type: SIMPLE_SIGNING_MEDIA_TYPE.into(),
            annotations: [(SIGNATURE_ANNOTATION.to_string(), signature)].into(),
        }
    }

    fn pinned() -> Digest {
        Digest::parse(PINNED).unwrap()
    }

    fn key() -> KeyPair {
        KeyPair::generate_ecdsa_p256().unwrap()
    }

    /// The verdict of rule 0 of `trust` on a signature layer of the pinned digest.
    fn check_pinned(trust: &Trust, layer: &Layer, body: &[u8]) -> Verdict {
        check_layer(trust, 0, &pinned(), layer, body)
    }

    #[test]
    fn a_signature_by_a_configured_key_over_this_digest_counts() {
        let (release, other) = (key(), key());
        let trust = trust_of(&[&other, &release]);
        let body = payload(PINNED, COSIGN_SIGNATURE_TYPE);
        let verdict = check_pinned(&trust, &layer(&body, &release), &body);
        assert_eq!(verdict, Ok(Signer("key keys/1.pub".into())));
    }

    #[test]
    fn a_signature_by_another_key_is_an_unknown_key() {
        let (release, stranger) = (key(), key());
        let body = payload(PINNED, COSIGN_SIGNATURE_TYPE);
        let verdict = check_pinned(&trust_of(&[&release]), &layer(&body, &stranger), &body);
        assert_eq!(verdict, Err(Refusal::UnknownKey { rule: 0 }));
    }

    #[test]
    fn a_payload_changed_after_signing_is_refused_before_it_is_read() {
        let release = key();
        let trust = trust_of(&[&release]);
        let body = payload(OTHER, COSIGN_SIGNATURE_TYPE);
        let signed = layer(&body, &release);
        // The registry sends other bytes than the descriptor's digest.
        let tampered = payload(PINNED, COSIGN_SIGNATURE_TYPE);
        let verdict = check_pinned(&trust, &signed, &tampered);
        assert!(
            matches!(verdict, Err(Refusal::LayerDigest { .. })),
            "{verdict:?}"
        );
        // A descriptor rewritten to the new bytes: the signature no longer verifies.
        let mut rewritten = signed.clone();
        rewritten.digest = Digest::parse(&format!("sha256:{}", sha256_hex(&tampered))).unwrap();
        let verdict = check_pinned(&trust, &rewritten, &tampered);
        assert_eq!(verdict, Err(Refusal::UnknownKey { rule: 0 }));
    }

    #[test]
    fn a_valid_signature_of_another_digest_or_of_another_kind_does_not_count() {
        let release = key();
        let trust = trust_of(&[&release]);
        let body = payload(OTHER, COSIGN_SIGNATURE_TYPE);
        let verdict = check_pinned(&trust, &layer(&body, &release), &body);
        assert_eq!(
            verdict,
            Err(Refusal::OtherDigest {
                signed: OTHER.into()
            })
        );
        let body = payload(PINNED, "https://slsa.dev/provenance/v1");
        let verdict = check_pinned(&trust, &layer(&body, &release), &body);
        assert!(
            matches!(verdict, Err(Refusal::NotImageSignature { .. })),
            "{verdict:?}"
        );
    }

    #[test]
    fn one_valid_signature_suffices_and_otherwise_the_most_telling_refusal_is_kept() {
        let ok = Ok(Signer("key k".into()));
        let other = Err(Refusal::OtherDigest {
            signed: OTHER.into(),
        });
        let unknown = Err(Refusal::UnknownKey { rule: 0 });
        assert_eq!(combine(&pinned(), [unknown.clone(), ok.clone()]), ok);
        assert_eq!(
            combine(&pinned(), [unknown.clone(), other.clone(), unknown]),
            other
        );
        assert_eq!(
            combine(&pinned(), []).unwrap_err().to_string(),
            "no signature (the registry has no sha256-1111111111111111111111111111111111111111111111111111111111111111.sig tag and no Sigstore bundle referring to the digest)"
        );
    }

    #[test]
    fn the_layers_of_a_sig_manifest_are_read_with_their_annotations() {
        let manifest = format!(
            r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"{OTHER}","size":2}},"layers":[{{"mediaType":"{SIMPLE_SIGNING_MEDIA_TYPE}","digest":"{PINNED}","size":3,"annotations":{{"{SIGNATURE_ANNOTATION}":"c2ln"}}}}]}}"#
        );
        let layers = manifest_layers(manifest.as_bytes()).unwrap();
        assert_eq!(layers.len(), 1);
        assert_eq!(layers[0].digest, pinned());
        assert_eq!(layers[0].annotations[SIGNATURE_ANNOTATION], "c2ln");
        assert_eq!(
            signature_tag(&pinned()),
            format!("sha256-{}.sig", pinned().hex())
        );
    }
}
