//! Signed images only (`images.signatures`): before a pass pins a digest of an image an entry
//! matches, it looks the digest's cosign signatures up and pins only if one verifies.
//!
//! [`verify`] holds the decisions (pure); [`fetch`] asks the registry through tagpin's own
//! client, bounded and counted like manifests. The cryptography is the Sigstore project's
//! `sigstore-crypto` / `sigstore-verify` (offline, no HTTP of their own); none is written here.
//!
//! A verified digest is remembered for the life of the process ([`fetch::check`]), keyed by
//! the trust material that verified it, so later passes do not fetch its signatures again.
//! Refusals are not remembered: a digest signed after a pass refused it is pinned by the next.

pub mod bundle;
pub mod certificate;
pub mod fetch;
pub mod gate;
pub mod keys;
pub mod notation;
pub mod rules;
pub(crate) mod trust_policy;
pub mod verify;

use std::sync::Arc;

use crate::reference::pattern::ImagePattern;
use crate::reference::Reference;
pub use rules::SignatureRule;
pub use verify::{Refusal, Trust, Verdict};
pub(crate) use verify::{SignatureError, Signer};

/// The `images.signatures` entries, compiled once.
#[derive(Debug, Clone, Default)]
pub struct Signatures {
    rules: Vec<(ImagePattern, usize, Arc<Trust>)>,
}

impl Signatures {
    /// Compiles the configuration's entries. A file's were checked at load, so an error here
    /// means a `Config` built by hand.
    pub fn compile(rules: &[SignatureRule]) -> Result<Signatures, SignatureError> {
        let rules = rules
            .iter()
            .enumerate()
            .map(|(index, rule)| {
                let pattern =
                    ImagePattern::new(&rule.matches).map_err(|source| SignatureError::Glob {
                        index,
                        glob: rule.matches.clone(),
                        source,
                    })?;
                Ok((pattern, index, Arc::new(Trust::compile(index, rule)?)))
            })
            .collect::<Result<_, SignatureError>>()?;
        Ok(Signatures { rules })
    }

    /// The first entry whose pattern names the image's repository, however either is spelled
    /// ([`ImagePattern`]), with its index; `None` when the image needs no signature.
    pub fn for_image(&self, reference: &Reference) -> Option<(usize, &Arc<Trust>)> {
        self.rules
            .iter()
            .find(|(pattern, _, _)| pattern.matches(reference))
            .map(|(_, index, trust)| (*index, trust))
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}

/// A digest of an image repository: what a gate (an age, a signature) is known for.
pub(crate) use crate::reference::Subject;

/// The signature entries and what this pass learned about each digest it would pin: what
/// the planner needs to refuse an unsigned digest ([`gate::Verdicts::decide`]). The default
/// requires nothing.
pub type Verdicts = gate::Verdicts<Signatures, Signer, Refusal>;

impl gate::Applies for Signatures {
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

/// How a change's signature is reported: `{verified: true, by: "key keys/release.pub"}`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SignatureNote {
    pub verified: bool,
    pub by: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::Digest;

    #[test]
    fn a_digest_already_pinned_needs_no_signature_and_an_unchecked_one_is_refused() {
        let rule = SignatureRule {
            matches: "ghcr.io/acme/*".into(),
            keys: Vec::new(),
            keyless: vec![rules::KeylessIdentity {
                issuer: "https://issuer.test".into(),
                subject: ".*".into(),
            }],
            trusted_root: None,
            notation: None,
        };
        let verdicts = Verdicts::new(Signatures::compile(&[rule]).unwrap());
        let digest: Digest =
            "sha256:1111111111111111111111111111111111111111111111111111111111111111"
                .parse()
                .unwrap();
        let at = Reference::parse(&format!("ghcr.io/acme/app:1@{digest}")).unwrap();
        let tag = Reference::parse("ghcr.io/acme/app:1").unwrap();
        let other = Reference::parse("docker.io/library/nginx:1").unwrap();
        assert_eq!(verdicts.decide(&at, &tag, &digest), None);
        assert_eq!(verdicts.decide(&other, &other, &digest), None);
        assert!(matches!(
            verdicts.decide(&tag, &tag, &digest),
            Some(Err(Refusal::Lookup(_)))
        ));
    }
}
