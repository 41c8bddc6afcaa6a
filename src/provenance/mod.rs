//! Build provenance (`images.provenance`): before a pass pins a digest of an image an entry
//! matches, it looks for a signed SLSA provenance attestation of that digest and pins only if
//! one names an accepted builder and source and is signed by an accepted identity.
//!
//! Attestations are found where signatures are ([`fetch`]): as Sigstore bundles referring to
//! the digest (OCI 1.1 referrers, or the referrers tag fallback), found and verified by the
//! code signatures use ([`crate::signature::fetch::referrer_bundles`],
//! [`crate::signature::bundle::verify_statement_bundle`]), and as cosign's `.att` tag, whose
//! layers are DSSE envelopes ([`attestation`], pure). Who may sign is an `images.signatures`
//! entry's [`Trust`]; entries match images with the same [`ImagePattern`].
//!
//! A verified digest is remembered for the life of the process, keyed by the entry, so later
//! passes make no request for it. Refusals are not remembered.

pub mod attestation;
pub mod fetch;

use std::sync::Arc;

use crate::config::ProvenanceRule;
use crate::reference::pattern::ImagePattern;
pub(crate) use crate::reference::Subject;
use crate::reference::{Digest, Reference};
use crate::signature::{gate, SignatureError, Signer, Trust};

/// One `images.provenance` entry, compiled.
#[derive(Debug)]
pub struct Rule {
    pub index: usize,
    pub builder: regex::Regex,
    pub repository: String,
    pub git_ref: Option<regex::Regex>,
    pub trust: Trust,
    /// Identifies the entry (trust material, builder, source), so a remembered verdict is
    /// reused only under the same.
    pub fingerprint: String,
}

/// Why an `images.provenance` entry cannot be used: only for a `Config` not loaded from a
/// file (a file's entries are checked at load).
#[derive(Debug, thiserror::Error)]
pub enum ProvenanceError {
    #[error("images.provenance[{index}].match: invalid glob {glob:?}")]
    Glob {
        index: usize,
        glob: String,
        #[source]
        source: globset::Error,
    },
    #[error("images.provenance[{index}].{field}: invalid regex")]
    Regex {
        index: usize,
        field: &'static str,
        #[source]
        source: regex::Error,
    },
    #[error("images.provenance[{index}]: {source}")]
    Signers {
        index: usize,
        #[source]
        source: SignatureError,
    },
}

/// The `images.provenance` entries, compiled once.
#[derive(Debug, Clone, Default)]
pub struct ProvenanceRules {
    rules: Vec<(ImagePattern, Arc<Rule>)>,
}

impl ProvenanceRules {
    pub fn compile(rules: &[ProvenanceRule]) -> Result<ProvenanceRules, ProvenanceError> {
        let rules = rules
            .iter()
            .enumerate()
            .map(|(index, rule)| {
                let pattern =
                    ImagePattern::new(&rule.matches).map_err(|source| ProvenanceError::Glob {
                        index,
                        glob: rule.matches.clone(),
                        source,
                    })?;
                Ok((pattern, Arc::new(Rule::compile(index, rule)?)))
            })
            .collect::<Result<_, ProvenanceError>>()?;
        Ok(ProvenanceRules { rules })
    }

    /// The first entry whose pattern names the image's repository ([`ImagePattern`], as for
    /// signatures and ages); `None` when the image needs no provenance.
    pub fn for_image(&self, reference: &Reference) -> Option<&Arc<Rule>> {
        self.rules
            .iter()
            .find(|(pattern, _)| pattern.matches(reference))
            .map(|(_, rule)| rule)
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}

impl Rule {
    fn compile(index: usize, rule: &ProvenanceRule) -> Result<Rule, ProvenanceError> {
        let regex = |field: &'static str, text: &str| {
            crate::signature::keys::subject_regex(text).map_err(|source| ProvenanceError::Regex {
                index,
                field,
                source,
            })
        };
        let builder = regex("builder_id", &rule.builder_id)?;
        let git_ref = match &rule.source_ref {
            Some(text) => Some(regex("source_ref", text)?),
            None => None,
        };
        let trust = Trust::compile(index, &rule.signers)
            .map_err(|source| ProvenanceError::Signers { index, source })?;
        let fingerprint = crate::signature::verify::sha256_hex(
            format!(
                "{}\0{}\0{}\0{}",
                trust.fingerprint(),
                rule.builder_id,
                rule.source_repository,
                rule.source_ref.as_deref().unwrap_or("")
            )
            .as_bytes(),
        );
        Ok(Rule {
            index,
            builder,
            repository: rule.source_repository.clone(),
            git_ref,
            trust,
            fingerprint,
        })
    }
}

/// A verified provenance: who built the digest, from what, and who signed the attestation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attested {
    pub builder: String,
    /// `https://github.com/acme/web@refs/tags/v1.2.0`.
    pub source: String,
    pub signer: Signer,
}

/// Why a digest's provenance does not count. The text is what a user reads after
/// `file:line: image@digest: not pinned: `.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("no provenance attestation (the registry has no {tag} tag and no Sigstore bundle referring to the digest)")]
    NoAttestation { tag: String },
    #[error(
        "provenance built by {found}, not a builder images.provenance[{rule}].builder_id accepts"
    )]
    Builder { rule: usize, found: String },
    #[error("provenance of source {found}, not images.provenance[{rule}].source_repository")]
    Source { rule: usize, found: String },
    #[error(
        "provenance of source {found}, not a ref images.provenance[{rule}].source_ref accepts"
    )]
    Ref { rule: usize, found: String },
    #[error(
        "the provenance attestation is for {named}, not this digest (copied from another image)"
    )]
    OtherDigest { named: String },
    #[error("an attestation of predicate type {kind}, not SLSA provenance")]
    NotProvenance { kind: String },
    #[error("an unsigned provenance statement (its DSSE envelope carries no signature)")]
    Unsigned,
    #[error(
        "provenance signed by an unknown key: no key of images.provenance[{rule}] verifies it"
    )]
    UnknownKey { rule: usize },
    #[error("provenance signed by {subject} (issuer {issuer}), not an identity of images.provenance[{rule}].keyless")]
    Identity {
        rule: usize,
        subject: String,
        issuer: String,
    },
    #[error("keyless provenance, but images.provenance[{rule}] names no keyless identity")]
    KeylessNotConfigured { rule: usize },
    #[error("a keyless .att attestation: tagpin verifies keyless provenance in Sigstore bundles only (cosign attest --new-bundle-format)")]
    KeylessAtt,
    #[error("provenance signature: {0}")]
    Signature(crate::signature::Refusal),
    #[error("malformed attestation: {0}")]
    Malformed(String),
    /// The lookup failed (registry unreachable, 401, …): not a verdict on the image, but no
    /// provenance seen, so nothing is pinned.
    #[error("provenance lookup failed: {0}")]
    Lookup(String),
}

impl From<crate::signature::Refusal> for Refusal {
    fn from(refusal: crate::signature::Refusal) -> Refusal {
        use crate::signature::Refusal as R;
        match refusal {
            R::UnknownKey { rule } => Refusal::UnknownKey { rule },
            R::Identity {
                rule,
                subject,
                issuer,
            } => Refusal::Identity {
                rule,
                subject,
                issuer,
            },
            R::KeylessNotConfigured { rule } => Refusal::KeylessNotConfigured { rule },
            R::NotImageSignature { kind } => Refusal::NotProvenance { kind },
            R::Malformed(why) => Refusal::Malformed(why),
            R::Lookup(why) => Refusal::Lookup(why),
            other => Refusal::Signature(other),
        }
    }
}

impl Refusal {
    /// How telling a refusal is, when several attestations of a digest all fail: a signed
    /// provenance of another builder says more than an SBOM or a missing tag.
    fn weight(&self) -> u8 {
        match self {
            Refusal::Builder { .. } | Refusal::Source { .. } | Refusal::Ref { .. } => 9,
            Refusal::OtherDigest { .. } => 8,
            Refusal::Identity { .. } => 7,
            Refusal::Unsigned => 6,
            Refusal::UnknownKey { .. } | Refusal::Signature(_) => 5,
            Refusal::KeylessAtt | Refusal::KeylessNotConfigured { .. } => 4,
            Refusal::NotProvenance { .. } => 3,
            Refusal::Malformed(_) => 2,
            Refusal::Lookup(_) => 1,
            Refusal::NoAttestation { .. } => 0,
        }
    }

    /// The result label of `tagpin_provenance_checks_total`: bounded.
    pub fn label(&self) -> &'static str {
        match self {
            Refusal::NoAttestation { .. } => "missing",
            Refusal::Lookup(_) => "error",
            _ => "refused",
        }
    }
}

/// The verdict on one digest: its verified provenance, or why none counts.
pub type Verdict = Result<Attested, Refusal>;

/// The verdict on `pinned` from each attestation's: one verified provenance suffices;
/// otherwise the most telling refusal; none at all is no attestation.
pub(crate) fn combine(pinned: &Digest, verdicts: impl IntoIterator<Item = Verdict>) -> Verdict {
    let mut worst: Option<Refusal> = None;
    for verdict in verdicts {
        match verdict {
            Ok(attested) => return Ok(attested),
            Err(refusal) => {
                if worst.as_ref().is_none_or(|w| refusal.weight() > w.weight()) {
                    worst = Some(refusal);
                }
            }
        }
    }
    Err(worst.unwrap_or(Refusal::NoAttestation {
        tag: attestation_tag(pinned),
    }))
}

/// The cosign `.att` tag of a digest: `sha256-<hex>.att`.
pub(crate) fn attestation_tag(digest: &Digest) -> String {
    format!("{}-{}.att", digest.algorithm(), digest.hex())
}

/// The provenance entries and what this pass learned about each digest it would pin: what
/// the planner needs to refuse a digest without accepted provenance
/// ([`gate::Verdicts::decide`]). The default requires none.
pub type Verdicts = gate::Verdicts<ProvenanceRules, Attested, Refusal>;

impl gate::Applies for ProvenanceRules {
    fn applies(&self, reference: &Reference) -> bool {
        self.for_image(reference).is_some()
    }
}

impl gate::Refused for Refusal {
    fn lookup_failed(why: String) -> Refusal {
        Refusal::Lookup(why)
    }

    fn label(&self) -> &'static str {
        Refusal::label(self)
    }
}

impl Verdicts {
    /// How a change to `digest` of `image` reports its provenance, when it was verified.
    pub fn note(&self, image: &Reference, digest: &Digest) -> Option<ProvenanceNote> {
        match self.checked.get(&Subject::of(image, digest))? {
            Ok(attested) => Some(ProvenanceNote::of(attested)),
            Err(_) => None,
        }
    }
}

/// How a change's provenance is reported:
/// `{verified: true, builder: "https://github.com/…", source: "https://github.com/acme/web@refs/tags/v1"}`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ProvenanceNote {
    pub verified: bool,
    pub builder: String,
    pub source: String,
}

impl ProvenanceNote {
    pub fn of(attested: &Attested) -> ProvenanceNote {
        ProvenanceNote {
            verified: true,
            builder: attested.builder.clone(),
            source: attested.source.clone(),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn digest(n: u8) -> Digest {
        format!("sha256:{}", format!("{n:02x}").repeat(32))
            .parse()
            .unwrap()
    }

    /// A rule for `ghcr.io/acme/*` built by `builder_id` from acme/web, signed keyless by
    /// anyone of `https://issuer.test`.
    pub(crate) fn acme_rule(builder_id: &str) -> ProvenanceRule {
        ProvenanceRule {
            matches: "ghcr.io/acme/*".into(),
            builder_id: builder_id.into(),
            source_repository: "https://github.com/acme/web".into(),
            source_ref: None,
            signers: crate::config::SignatureRule {
                matches: "ghcr.io/acme/*".into(),
                keys: Vec::new(),
                keyless: vec![crate::config::KeylessIdentity {
                    issuer: "https://issuer.test".into(),
                    subject: ".*".into(),
                }],
                trusted_root: None,
                notation: None,
            },
        }
    }

    fn rules() -> ProvenanceRules {
        ProvenanceRules::compile(&[acme_rule("b")]).unwrap()
    }

    #[test]
    fn a_digest_already_pinned_needs_no_provenance_and_an_unchecked_one_is_refused() {
        let verdicts = Verdicts::new(rules());
        let at = Reference::parse(&format!("ghcr.io/acme/app:1@{}", digest(1))).unwrap();
        let tag = Reference::parse("ghcr.io/acme/app:1").unwrap();
        let other = Reference::parse("docker.io/library/nginx:1").unwrap();
        assert_eq!(verdicts.decide(&at, &tag, &digest(1)), None);
        assert_eq!(verdicts.decide(&other, &other, &digest(1)), None);
        assert!(matches!(
            verdicts.decide(&tag, &tag, &digest(1)),
            Some(Err(Refusal::Lookup(_)))
        ));
        // Docker Hub and registry spellings match as signatures and ages match them.
        assert!(rules()
            .for_image(&Reference::parse("GHCR.IO/acme/web:2").unwrap())
            .is_some());
    }

    #[test]
    fn one_verified_attestation_suffices_and_otherwise_the_most_telling_refusal_is_kept() {
        let attested = Ok(Attested {
            builder: "b".into(),
            source: "s".into(),
            signer: Signer("key k".into()),
        });
        let sbom = Err(Refusal::NotProvenance {
            kind: "https://spdx.dev/Document".into(),
        });
        let builder = Err(Refusal::Builder {
            rule: 0,
            found: "evil".into(),
        });
        assert_eq!(
            combine(&digest(1), [sbom.clone(), attested.clone()]),
            attested
        );
        assert_eq!(
            combine(&digest(1), [sbom.clone(), builder.clone(), sbom]),
            builder
        );
        let none = combine(&digest(1), []).unwrap_err();
        assert_eq!(none.label(), "missing");
        assert_eq!(
            none.to_string(),
            format!(
                "no provenance attestation (the registry has no sha256-{}.att tag and no Sigstore bundle referring to the digest)",
                digest(1).hex()
            )
        );
    }
}
