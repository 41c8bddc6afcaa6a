//! Reading the trust material an `images.signatures` entry names: public keys, trusted
//! roots, subject regexes. Shared by configuration validation (so a bad key is a
//! configuration error with its field path) and by the verifier.

use sigstore_types::DerPublicKey;

/// Why a key file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("not a PEM public key (-----BEGIN PUBLIC KEY-----): {0}")]
    Pem(#[source] sigstore_types::Error),
    #[error("not a public key tagpin can verify with: {0}")]
    Algorithm(#[source] sigstore_crypto::Error),
}

/// Why a trusted root cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum RootError {
    #[error("not a Sigstore trusted_root.json: {0}")]
    Json(#[source] sigstore_trust_root::Error),
    #[error("a trusted root the verifier refuses: {0}")]
    Refused(#[source] sigstore_verify::Error),
}

/// A PEM public key as the verifier reads it (SPKI: ECDSA, Ed25519 or RSA).
pub(crate) fn parse_key(pem: &str) -> Result<DerPublicKey, KeyError> {
    let key = DerPublicKey::from_pem(pem).map_err(KeyError::Pem)?;
    sigstore_crypto::VerificationKey::from_spki(&key).map_err(KeyError::Algorithm)?;
    Ok(key)
}

/// A Sigstore `trusted_root.json`, read and accepted as the verifier will use it.
pub(crate) fn parse_trusted_root(
    json: &str,
) -> Result<sigstore_trust_root::TrustedRoot, RootError> {
    let root = sigstore_trust_root::TrustedRoot::from_json(json).map_err(RootError::Json)?;
    sigstore_verify::Verifier::new(&root).map_err(RootError::Refused)?;
    Ok(root)
}

/// A keyless `subject`, anchored at both ends as cosign's `--certificate-identity-regexp`
/// documentation advises: `^(?:…)$` around the whole alternation, so `a|b` cannot match a
/// prefix or a suffix of a longer identity.
pub(crate) fn subject_regex(subject: &str) -> Result<regex::Regex, regex::Error> {
    regex::Regex::new(&format!("^(?:{subject})$"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subject_regex_matches_the_whole_identity_only() {
        let re = subject_regex("https://github.com/acme/.+|alice@acme.test").unwrap();
        assert!(re.is_match("https://github.com/acme/app"));
        assert!(re.is_match("alice@acme.test"));
        assert!(!re.is_match("mallory+alice@acme.test.evil"));
        assert!(!re.is_match("x https://github.com/acme/app"));
        let exact = subject_regex("https://github.com/acme/app|alice").unwrap();
        assert!(!exact.is_match("https://github.com/acme/app/../evil"));
        assert!(!exact.is_match("malice"));
    }
}
