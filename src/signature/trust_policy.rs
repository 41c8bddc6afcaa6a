//! A Notation trust policy's side of an `images.signatures` entry, without I/O: the trust
//! store's certificates read from PEM, and the trusted identities read as the Notary
//! Project's trust policies write them (`x509.subject: C=US, ST=WA, O=acme, CN=signer`, or
//! `*`) and matched against a signing certificate's subject. Shared by configuration
//! validation (so a bad certificate or identity is a configuration error with its field path)
//! and by the verifier ([`super::notation`]).

use super::certificate::{self, CertificateError};

/// Why a `notation` entry cannot be used (a trust store file or an identity).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotationError {
    #[error("not a PEM certificate the trust store can hold: {0}")]
    TrustStore(#[source] CertificateError),
    #[error("{0}")]
    Identity(String),
}

/// A trusted identity: any signer the trust store certifies (`*`), or the subject attributes
/// the signing certificate's subject must all carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    Any,
    Subject(Vec<(String, String)>),
}

impl Identity {
    /// Reads a trust policy identity: `*`, or `x509.subject: C=US, ST=WA, O=acme, CN=signer`
    /// (the prefix may be left out). `,` `;` `\` and a value's edge spaces are escaped with
    /// `\`. C, ST and O are required, as trust policies require them; an attribute is named
    /// once.
    pub fn parse(text: &str) -> Result<Identity, NotationError> {
        // Only the start: a value's last space may be escaped (`O=acme\ `).
        let text = text.trim_start();
        if text.trim_end() == "*" {
            return Ok(Identity::Any);
        }
        let dn = text.strip_prefix("x509.subject:").unwrap_or(text);
        let mut attributes: Vec<(String, String)> = Vec::new();
        for part in split_unescaped(dn) {
            let Some((name, value)) = part.split_once('=') else {
                return Err(NotationError::Identity(format!(
                    "{part:?} is not an attribute (like O=acme)"
                )));
            };
            let name = name.trim().to_string();
            if attributes.iter().any(|(n, _)| *n == name) {
                return Err(NotationError::Identity(format!("{name} is named twice")));
            }
            attributes.push((name, unescape(value)));
        }
        for required in ["C", "ST", "O"] {
            if !attributes.iter().any(|(n, _)| n == required) {
                return Err(NotationError::Identity(format!(
                    "needs C, ST and O (like x509.subject: C=US, ST=WA, O=acme); {required} is missing"
                )));
            }
        }
        Ok(Identity::Subject(attributes))
    }

    /// Whether a certificate subject (as [`certificate::subject`] reads it) matches.
    pub fn matches(&self, subject: &[(String, String)]) -> bool {
        match self {
            Identity::Any => true,
            Identity::Subject(wanted) => wanted.iter().all(|w| subject.contains(w)),
        }
    }
}

/// The parts of a DN between unescaped commas, escapes kept.
fn split_unescaped(dn: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut start, mut escaped) = (0, false);
    for (i, c) in dn.char_indices() {
        match (escaped, c) {
            (false, '\\') => escaped = true,
            (false, ',') => {
                parts.push(&dn[start..i]);
                start = i + 1;
            }
            _ => escaped = false,
        }
    }
    parts.push(&dn[start..]);
    parts
}

/// A value with its unescaped edge spaces trimmed and its escapes resolved.
fn unescape(value: &str) -> String {
    let mut out = String::new();
    let mut chars = value.trim_start().chars().peekable();
    let mut kept_to = 0;
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(next) = chars.next() {
                    out.push(next);
                }
                kept_to = out.len();
            }
            c => {
                out.push(c);
                if !c.is_whitespace() {
                    kept_to = out.len();
                }
            }
        }
    }
    out.truncate(kept_to);
    out
}

/// An entry's `notation`, ready to verify with: the trust store's certificates (DER) and the
/// identities.
#[derive(Debug, Clone, Default)]
pub struct NotationTrust {
    pub(super) anchors: Vec<Vec<u8>>,
    pub(super) identities: Vec<Identity>,
}

impl NotationTrust {
    /// From the trust store's PEM texts and the identities as written.
    pub fn compile(
        trust_store: &[&str],
        identities: &[String],
    ) -> Result<NotationTrust, NotationError> {
        let mut anchors = Vec::new();
        for pem in trust_store {
            anchors.extend(certificate::pem_certificates(pem).map_err(NotationError::TrustStore)?);
        }
        for der in &anchors {
            let der = rustls_pki_types::CertificateDer::from(der.as_slice());
            webpki::anchor_from_trusted_cert(&der)
                .map_err(|e| NotationError::TrustStore(CertificateError::Der(format!("{e:?}"))))?;
        }
        let identities: Vec<Identity> = identities
            .iter()
            .map(|i| Identity::parse(i))
            .collect::<Result<_, _>>()?;

        Ok(NotationTrust {
            anchors,
            identities,
        })
    }
}
