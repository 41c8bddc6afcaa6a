//! The X.509 side of a Notation signature, without I/O: what the Notary Project's certificate
//! requirements ask of the `x5c` chain (the signing certificate's key usage, extended key
//! usage and key; the CA certificates' basic constraints and key usage), each certificate's
//! validity at a time, the signing certificate's subject as trust policies write it
//! (`C=US, ST=WA, O=acme, CN=signer`), and the chain built to a trust store certificate
//! (rustls-webpki's path building, with sigstore-crypto's signature algorithms).

use std::time::Duration;

use rustls_pki_types::{CertificateDer, UnixTime};
use x509_cert::der::asn1::{ObjectIdentifier, UintRef};
use x509_cert::der::{Decode, Reader, SliceReader, Tag, Tagged};
use x509_cert::ext::pkix::{BasicConstraints, ExtendedKeyUsage, KeyUsage};
use x509_cert::Certificate;

const KEY_USAGE: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.29.15");
const BASIC_CONSTRAINTS: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.29.19");
const EXTENDED_KEY_USAGE: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.29.37");
const EC_PUBLIC_KEY: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.2.1");
const RSA_ENCRYPTION: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.1");
const P256: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.3.1.7");
const P384: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.132.0.34");
const P521: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.132.0.35");

/// Extended key usages a Notation signing certificate must not carry (the Notary Project's
/// certificate requirements): anyExtendedKeyUsage, serverAuth, clientAuth, emailProtection,
/// timeStamping.
const FORBIDDEN_EKUS: [(&str, ObjectIdentifier); 5] = [
    (
        "anyExtendedKeyUsage",
        ObjectIdentifier::new_unwrap("2.5.29.37.0"),
    ),
    (
        "serverAuth",
        ObjectIdentifier::new_unwrap("1.3.6.1.5.5.7.3.1"),
    ),
    (
        "clientAuth",
        ObjectIdentifier::new_unwrap("1.3.6.1.5.5.7.3.2"),
    ),
    (
        "emailProtection",
        ObjectIdentifier::new_unwrap("1.3.6.1.5.5.7.3.4"),
    ),
    (
        "timeStamping",
        ObjectIdentifier::new_unwrap("1.3.6.1.5.5.7.3.8"),
    ),
];

/// Short names of the subject attributes trust policies write; others are written as their
/// dotted OID.
const ATTRIBUTE_NAMES: [(&str, &str); 9] = [
    ("2.5.4.6", "C"),
    ("2.5.4.8", "ST"),
    ("2.5.4.7", "L"),
    ("2.5.4.10", "O"),
    ("2.5.4.11", "OU"),
    ("2.5.4.3", "CN"),
    ("2.5.4.5", "SERIALNUMBER"),
    ("2.5.4.9", "STREET"),
    ("1.2.840.113549.1.9.1", "E"),
];

/// Why a certificate does not do: the text follows `the signing certificate ` or
/// `certificate <subject> `.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CertificateError {
    #[error("is not DER X.509: {0}")]
    Der(String),
    #[error("does not meet the Notary Project's certificate requirements: {0}")]
    Requirement(String),
    #[error("has a key Notation does not sign with: {0}")]
    Key(String),
    /// A trust store certificate a chain leads to that does not do itself.
    #[error("{0}")]
    Anchor(String),
}

/// The JWS algorithm the Notary Project assigns to a signing certificate's key: its type and
/// size decide it (RSA 2048/3072/4096 bits: PS256/PS384/PS512; EC P-256/P-384/P-521:
/// ES256/ES384/ES512), and the envelope's `alg` must be that one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    Ps256,
    Ps384,
    Ps512,
    Es256,
    Es384,
    Es512,
}

impl Algorithm {
    /// As JWS's `alg` writes it.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Ps256 => "PS256",
            Algorithm::Ps384 => "PS384",
            Algorithm::Ps512 => "PS512",
            Algorithm::Es256 => "ES256",
            Algorithm::Es384 => "ES384",
            Algorithm::Es512 => "ES512",
        }
    }

    /// Verifies `signature` (JWS's form: ECDSA as fixed-size r||s) over `message` with the
    /// key of `certificate`.
    pub fn verify(self, certificate: &Certificate, message: &[u8], signature: &[u8]) -> bool {
        use aws_lc_rs::signature as s;
        let algorithm: &'static dyn s::VerificationAlgorithm = match self {
            Algorithm::Ps256 => &s::RSA_PSS_2048_8192_SHA256,
            Algorithm::Ps384 => &s::RSA_PSS_2048_8192_SHA384,
            Algorithm::Ps512 => &s::RSA_PSS_2048_8192_SHA512,
            Algorithm::Es256 => &s::ECDSA_P256_SHA256_FIXED,
            Algorithm::Es384 => &s::ECDSA_P384_SHA384_FIXED,
            Algorithm::Es512 => &s::ECDSA_P521_SHA512_FIXED,
        };
        let key = certificate
            .tbs_certificate
            .subject_public_key_info
            .subject_public_key
            .raw_bytes();
        s::UnparsedPublicKey::new(algorithm, key)
            .verify(message, signature)
            .is_ok()
    }
}

/// Reads a DER certificate.
pub fn parse(der: &[u8]) -> Result<Certificate, CertificateError> {
    Certificate::from_der(der).map_err(|e| CertificateError::Der(e.to_string()))
}

/// The DER certificates of a PEM text (`-----BEGIN CERTIFICATE-----` blocks), each checked to
/// be X.509; none is an error.
pub(crate) fn pem_certificates(pem: &str) -> Result<Vec<Vec<u8>>, CertificateError> {
    use base64::Engine as _;
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    let mut found = Vec::new();
    let mut rest = pem;
    while let Some(start) = rest.find(BEGIN) {
        let body = &rest[start + BEGIN.len()..];
        let Some(end) = body.find(END) else {
            return Err(CertificateError::Der(format!("{BEGIN} without {END}")));
        };
        let text: String = body[..end].split_whitespace().collect();
        let der = base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(|e| CertificateError::Der(format!("PEM body: {e}")))?;
        parse(&der)?;
        found.push(der);
        rest = &body[end + END.len()..];
    }
    match found.is_empty() {
        true => Err(CertificateError::Der(format!("no {BEGIN} block"))),
        false => Ok(found),
    }
}

/// The signing certificate's JWS algorithm, from its key.
pub fn algorithm(certificate: &Certificate) -> Result<Algorithm, CertificateError> {
    let spki = &certificate.tbs_certificate.subject_public_key_info;
    if spki.algorithm.oid == EC_PUBLIC_KEY {
        let curve = spki
            .algorithm
            .parameters
            .as_ref()
            .and_then(|p| p.decode_as::<ObjectIdentifier>().ok());
        return match curve {
            Some(c) if c == P256 => Ok(Algorithm::Es256),
            Some(c) if c == P384 => Ok(Algorithm::Es384),
            Some(c) if c == P521 => Ok(Algorithm::Es512),
            other => Err(CertificateError::Key(format!(
                "EC curve {}",
                other.map_or("unnamed".to_string(), |c| c.to_string())
            ))),
        };
    }
    if spki.algorithm.oid == RSA_ENCRYPTION {
        return match rsa_bits(spki.subject_public_key.raw_bytes())? {
            2048 => Ok(Algorithm::Ps256),
            3072 => Ok(Algorithm::Ps384),
            4096 => Ok(Algorithm::Ps512),
            bits => Err(CertificateError::Key(format!(
                "RSA of {bits} bits (2048, 3072 or 4096)"
            ))),
        };
    }
    Err(CertificateError::Key(format!(
        "algorithm {}",
        spki.algorithm.oid
    )))
}

/// The modulus size of a PKCS#1 RSAPublicKey.
fn rsa_bits(key: &[u8]) -> Result<usize, CertificateError> {
    let bad = |e: x509_cert::der::Error| CertificateError::Key(format!("RSA key: {e}"));
    let mut reader = SliceReader::new(key).map_err(bad)?;
    let modulus = reader
        .sequence(|seq| {
            let modulus = UintRef::decode(seq)?;
            UintRef::decode(seq)?;
            Ok(modulus.as_bytes().to_vec())
        })
        .map_err(bad)?;
    let leading = modulus.first().map_or(8, |b| b.leading_zeros() as usize);
    Ok(modulus.len() * 8 - leading)
}

/// The signing certificate's subject as trust policies write it: `C=US, ST=WA, O=acme,
/// CN=signer`, in the certificate's order, each attribute with its short name. As notation-go
/// does, a subject naming an attribute twice or with a multi-valued RDN (`OU=a+OU=b`) is
/// refused (either could satisfy an identity naming only one), and so is a value that is not
/// a string.
pub fn subject(certificate: &Certificate) -> Result<Vec<(String, String)>, CertificateError> {
    let refuse = |why: String| Err(CertificateError::Requirement(format!("its subject {why}")));
    let mut attributes: Vec<(String, String)> = Vec::new();
    for rdn in certificate.tbs_certificate.subject.0.iter() {
        if rdn.0.len() != 1 {
            return refuse("has a multi-valued RDN".into());
        }
        for atv in rdn.0.iter() {
            let name = attribute_name(&atv.oid);
            let Some(text) = string_value(&atv.value) else {
                return refuse(format!(
                    "has {} of ASN.1 type {}",
                    shown(&name),
                    atv.value.tag()
                ));
            };
            if attributes.iter().any(|(n, _)| *n == name) {
                return refuse(format!("names {} more than once", shown(&name)));
            }
            attributes.push((name, text));
        }
    }
    Ok(attributes)
}

fn attribute_name(oid: &ObjectIdentifier) -> String {
    let oid = oid.to_string();
    ATTRIBUTE_NAMES
        .iter()
        .find(|(o, _)| *o == oid)
        .map_or(oid.clone(), |(_, n)| n.to_string())
}

fn string_value(value: &x509_cert::der::Any) -> Option<String> {
    match value.tag() {
        Tag::Utf8String | Tag::PrintableString | Tag::Ia5String | Tag::TeletexString => {
            std::str::from_utf8(value.value()).ok().map(str::to_string)
        }
        _ => None,
    }
}

/// A certificate's subject as messages name it: its string attributes, escaped and bounded
/// ([`subject_text`]), whatever the subject holds.
pub fn name(certificate: &Certificate) -> String {
    let attributes: Vec<(String, String)> = certificate
        .tbs_certificate
        .subject
        .0
        .iter()
        .flat_map(|rdn| rdn.0.iter())
        .filter_map(|atv| Some((attribute_name(&atv.oid), string_value(&atv.value)?)))
        .collect();
    subject_text(&attributes)
}

/// A subject as [`subject`] reads it, written out for a message: escaped and bounded, as the
/// signer wrote it.
pub(crate) fn subject_text(attributes: &[(String, String)]) -> String {
    let text = attributes
        .iter()
        .map(|(name, value)| format!("{name}={value}"))
        .collect::<Vec<_>>()
        .join(", ");
    shown(&text)
}

/// Longest text of a signer's (a subject, a header value) a message repeats.
const MAX_SHOWN: usize = 200;

/// Text from a signature, as a message may show it: control characters and non-ASCII
/// escaped (`\n`, `\u{202e}`), cut at [`MAX_SHOWN`] characters with `…`.
pub fn shown(text: &str) -> String {
    let escaped: String = text
        .chars()
        .flat_map(|c| match c {
            ' '..='~' => vec![c],
            c => c.escape_default().collect(),
        })
        .collect();
    match escaped.char_indices().nth(MAX_SHOWN) {
        Some((cut, _)) => format!("{}…", &escaped[..cut]),
        None => escaped,
    }
}

/// The certificate's validity as Unix seconds: `(not_before, not_after)`.
pub fn validity(certificate: &Certificate) -> (u64, u64) {
    let validity = &certificate.tbs_certificate.validity;
    (
        validity.not_before.to_unix_duration().as_secs(),
        validity.not_after.to_unix_duration().as_secs(),
    )
}

/// An extension of the certificate, decoded, with whether it is critical.
fn extension<T: for<'a> Decode<'a>>(
    certificate: &Certificate,
    oid: ObjectIdentifier,
) -> Result<Option<(T, bool)>, CertificateError> {
    let Some(extensions) = &certificate.tbs_certificate.extensions else {
        return Ok(None);
    };
    let Some(ext) = extensions.iter().find(|e| e.extn_id == oid) else {
        return Ok(None);
    };
    T::from_der(ext.extn_value.as_bytes())
        .map(|value| Some((value, ext.critical)))
        .map_err(|e| CertificateError::Der(format!("extension {oid}: {e}")))
}

/// The Notary Project's requirements of a signing certificate: key usage present, critical,
/// with digitalSignature and none of keyEncipherment, dataEncipherment, keyAgreement,
/// keyCertSign, cRLSign, encipherOnly, decipherOnly; basic constraints, if any, not a CA;
/// extended key usage, if any, without anyExtendedKeyUsage, serverAuth, clientAuth,
/// emailProtection or timeStamping.
pub(crate) fn check_signing_certificate(certificate: &Certificate) -> Result<(), CertificateError> {
    let requirement = |text: &str| Err(CertificateError::Requirement(text.to_string()));
    match extension::<KeyUsage>(certificate, KEY_USAGE)? {
        None => return requirement("no key usage extension"),
        Some((_, false)) => return requirement("its key usage extension is not critical"),
        Some((usage, true)) => {
            if !usage.digital_signature() {
                return requirement("its key usage lacks digitalSignature");
            }
            let others = usage.key_encipherment()
                || usage.data_encipherment()
                || usage.key_agreement()
                || usage.key_cert_sign()
                || usage.crl_sign()
                || usage.encipher_only()
                || usage.decipher_only();
            if others {
                return requirement("its key usage allows more than digitalSignature");
            }
        }
    }
    if let Some((constraints, _)) = extension::<BasicConstraints>(certificate, BASIC_CONSTRAINTS)? {
        if constraints.ca {
            return requirement("it is a CA certificate");
        }
    }
    if let Some((usages, _)) = extension::<ExtendedKeyUsage>(certificate, EXTENDED_KEY_USAGE)? {
        for (name, oid) in FORBIDDEN_EKUS {
            if usages.0.contains(&oid) {
                return Err(CertificateError::Requirement(format!(
                    "its extended key usage includes {name}"
                )));
            }
        }
    }
    Ok(())
}

/// The Notary Project's requirements of a CA certificate of the chain: basic constraints
/// present, critical, a CA; key usage present, critical, with keyCertSign.
pub(crate) fn check_ca_certificate(certificate: &Certificate) -> Result<(), CertificateError> {
    let requirement = |text: &str| Err(CertificateError::Requirement(text.to_string()));
    match extension::<BasicConstraints>(certificate, BASIC_CONSTRAINTS)? {
        Some((constraints, true)) if constraints.ca => {}
        _ => return requirement("a CA certificate without critical basic constraints cA=true"),
    }
    match extension::<KeyUsage>(certificate, KEY_USAGE)? {
        Some((usage, true)) if usage.key_cert_sign() => Ok(()),
        _ => requirement("a CA certificate without critical key usage keyCertSign"),
    }
}

/// Accepts any extended key usage: the signing certificate's is checked by
/// [`check_signing_certificate`], as the Notary Project words it (webpki's own rules only
/// require one usage).
struct AnyUsage;

impl webpki::ExtendedKeyUsageValidator for AnyUsage {
    fn validate(&self, iter: webpki::KeyPurposeIdIter<'_, '_>) -> Result<(), webpki::Error> {
        for usage in iter {
            usage?;
        }
        Ok(())
    }
}

/// Why a chain does not lead to the trust store: webpki's refusal, or a trust store certificate
/// the chain leads to that does not do itself (out of its validity, not a CA, its pathLen
/// exceeded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ChainError {
    Webpki(webpki::Error),
    Anchor(CertificateError),
}

/// What the trust store certificate `anchor` a chain leads to must be, webpki looking only at
/// its subject and key: valid at the signing time and now, and, unless the chain is that very
/// certificate (`self_signed_leaf`), a CA (basic constraints, key usage) whose pathLen allows
/// `intermediates` CA certificates below it.
pub(crate) fn check_anchor(
    anchor: &Certificate,
    intermediates: usize,
    self_signed_leaf: bool,
    signing_time: u64,
    now: u64,
) -> Result<(), CertificateError> {
    let name = name(anchor);
    let (not_before, not_after) = validity(anchor);
    for (at, when) in [(signing_time, "the signing time"), (now, "now")] {
        if at < not_before || at > not_after {
            return Err(CertificateError::Anchor(format!(
                "the trust store certificate {name} is not valid at {when} (valid from {not_before} to {not_after}, Unix seconds)"
            )));
        }
    }
    if self_signed_leaf {
        return Ok(());
    }
    check_ca_certificate(anchor)
        .map_err(|e| CertificateError::Anchor(format!("the trust store certificate {name} {e}")))?;
    let path_len = extension::<BasicConstraints>(anchor, BASIC_CONSTRAINTS)?
        .and_then(|(constraints, _)| constraints.path_len_constraint);
    match path_len {
        Some(limit) if intermediates > usize::from(limit) => Err(CertificateError::Anchor(format!(
            "the trust store certificate {name} allows {limit} CA certificates below it (pathLen), the chain has {intermediates}"
        ))),
        _ => Ok(()),
    }
}

/// Builds the chain from `chain[0]` (the signing certificate), through `chain[1..]`, to one
/// of `anchors` (DER trust store certificates), every certificate valid at `signing_time`
/// (Unix seconds) and every signature verifying; the trust store certificate reached must
/// pass [`check_anchor`] (else another path is tried). `Err` says why not.
pub(crate) fn chains_to(
    chain: &[Vec<u8>],
    anchors: &[Vec<u8>],
    signing_time: u64,
    now: u64,
) -> Result<(), ChainError> {
    let Some((leaf, rest)) = chain.split_first() else {
        return Err(ChainError::Webpki(webpki::Error::BadDer));
    };
    let usable: Vec<(CertificateDer<'_>, Certificate)> = anchors
        .iter()
        .filter_map(|der| Some((CertificateDer::from(der.as_slice()), parse(der).ok()?)))
        .collect();
    let trust_anchors: Vec<_> = usable
        .iter()
        .map(|(der, _)| webpki::anchor_from_trusted_cert(der))
        .collect::<Result<_, _>>()
        .map_err(ChainError::Webpki)?;
    let intermediates: Vec<CertificateDer<'_>> = rest
        .iter()
        .map(|der| CertificateDer::from(der.as_slice()))
        .collect();
    let refused = std::cell::RefCell::new(None);
    let check_path = |path: &webpki::VerifiedPath<'_>| {
        let at = trust_anchors
            .iter()
            .position(|a| std::ptr::eq(a, path.anchor()))
            .ok_or(webpki::Error::UnknownIssuer)?;
        let (der, anchor) = &usable[at];
        let self_signed_leaf = rest.is_empty() && der.as_ref() == leaf.as_slice();
        let depth = path.intermediate_certificates().count();
        check_anchor(anchor, depth, self_signed_leaf, signing_time, now).map_err(|why| {
            *refused.borrow_mut() = Some(why);
            webpki::Error::UnknownIssuer
        })
    };
    let leaf_der = CertificateDer::from(leaf.as_slice());
    let end_entity = webpki::EndEntityCert::try_from(&leaf_der).map_err(ChainError::Webpki)?;
    let verified = end_entity.verify_for_usage(
        CHAIN_ALGORITHMS,
        &trust_anchors,
        &intermediates,
        UnixTime::since_unix_epoch(Duration::from_secs(signing_time)),
        AnyUsage,
        None,
        Some(&check_path),
    );
    match (verified, refused.into_inner()) {
        (Ok(_), _) => Ok(()),
        (Err(webpki::Error::UnknownIssuer), Some(why)) => Err(ChainError::Anchor(why)),
        (Err(e), _) => Err(ChainError::Webpki(e)),
    }
}

/// The signature algorithms a chain may use: sigstore-crypto's, with rustls-webpki's P-521
/// ones (sigstore-crypto has none, yet Notation signs with P-521 keys).
static CHAIN_ALGORITHMS: &[&dyn rustls_pki_types::SignatureVerificationAlgorithm] = &[
    webpki::aws_lc_rs::ECDSA_P256_SHA256,
    webpki::aws_lc_rs::ECDSA_P256_SHA384,
    webpki::aws_lc_rs::ECDSA_P384_SHA256,
    webpki::aws_lc_rs::ECDSA_P384_SHA384,
    webpki::aws_lc_rs::ECDSA_P521_SHA256,
    webpki::aws_lc_rs::ECDSA_P521_SHA384,
    webpki::aws_lc_rs::ECDSA_P521_SHA512,
    webpki::aws_lc_rs::RSA_PKCS1_2048_8192_SHA256,
    webpki::aws_lc_rs::RSA_PKCS1_2048_8192_SHA384,
    webpki::aws_lc_rs::RSA_PKCS1_2048_8192_SHA512,
    webpki::aws_lc_rs::RSA_PKCS1_2048_8192_SHA256_ABSENT_PARAMS,
    webpki::aws_lc_rs::RSA_PKCS1_2048_8192_SHA384_ABSENT_PARAMS,
    webpki::aws_lc_rs::RSA_PKCS1_2048_8192_SHA512_ABSENT_PARAMS,
    webpki::aws_lc_rs::RSA_PSS_2048_8192_SHA256_LEGACY_KEY,
    webpki::aws_lc_rs::RSA_PSS_2048_8192_SHA384_LEGACY_KEY,
    webpki::aws_lc_rs::RSA_PSS_2048_8192_SHA512_LEGACY_KEY,
];
