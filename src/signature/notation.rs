//! Notation signatures (the Notary Project's, `notary.x509` scheme: `notation sign` with a
//! local key or the Azure Key Vault plugin; AWS Signer's `notary.x509.signingAuthority` scheme
//! and its critical verification plugin header are not supported and refused), decided without
//! I/O: which referrers hold one, where its envelope is, and whether a JWS envelope signs *this*
//! digest with a certificate that chains to the entry's trust store and whose subject is one of
//! its identities.
//!
//! The facts followed are the Notary Project's specifications (signature-specification,
//! signature-envelope-jws, trust-store-trust-policy), the `strict` level's checks except
//! revocation: the JWS signature verifies with the signing certificate's key in the algorithm
//! that key dictates; the certificates meet the certificate requirements; the chain leads to a
//! trust store certificate, itself valid and a CA allowing the chain's depth; every certificate
//! is valid at the signing time and, as there is no authentic timestamp, now; the signature is
//! not past its `io.cncf.notary.expiry`; every critical header is understood; the subject
//! (no attribute twice) matches a trusted identity; and the payload's `targetArtifact` is this
//! digest. COSE envelopes are refused: no well-kept Rust crate reads them. Timestamp
//! countersignatures are not read (the chain must then be valid now, as the specification
//! says for a signature without one). Revocation (OCSP, CRL) is NOT checked: a certificate
//! revoked after signing passes until it expires or leaves the trust store.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde::Deserialize;

use super::bundle::Referrer;
use super::certificate;
pub use super::trust_policy::Identity;
pub(crate) use super::trust_policy::NotationTrust;
use super::verify::{Refusal, Signer, Verdict};
use crate::reference::Digest;

/// The artifact type of a Notation signature manifest.
pub const ARTIFACT_TYPE: &str = "application/vnd.cncf.notary.signature";
/// The media type of a JWS envelope layer.
pub(crate) const JWS_MEDIA_TYPE: &str = "application/jose+json";
/// The media type of a COSE envelope layer (refused).
pub(crate) const COSE_MEDIA_TYPE: &str = "application/cose";
/// The content type of the signed payload.
pub const PAYLOAD_TYPE: &str = "application/vnd.cncf.notary.payload.v1+json";
/// Notation signatures looked at per digest at most: a bound on what a hostile index can make
/// tagpin fetch.
pub(crate) const MAX_SIGNATURES: usize = 8;

const SIGNING_SCHEME: &str = "io.cncf.notary.signingScheme";
const SIGNING_TIME: &str = "io.cncf.notary.signingTime";
const EXPIRY: &str = "io.cncf.notary.expiry";
const X509_SCHEME: &str = "notary.x509";

/// The annotation of a Notation signature manifest listing the SHA-256 thumbprints of its
/// chain's certificates (a JSON array of hex strings): what a verifier may use to pick the
/// signatures worth fetching.
pub(crate) const THUMBPRINTS: &str = "io.cncf.notary.x509chain.thumbprint#S256";

/// The Notation signature manifests of a referrers index (artifact type [`ARTIFACT_TYPE`]),
/// at most [`MAX_SIGNATURES`]: those whose [`THUMBPRINTS`] name a certificate of `anchors`
/// (DER) first, then the others, each group in the index's order, so referrers listed first
/// that no trust store certificate is named by cannot crowd a real signature out. A referrer
/// whose digest is unreadable is left out, its refusal returned beside.
pub(crate) fn signature_referrers(
    index: &[u8],
    anchors: &[Vec<u8>],
) -> Result<(Vec<Digest>, Vec<Refusal>), Refusal> {
    let listed = super::bundle::referrers(index)?;
    let trusted: Vec<String> = anchors
        .iter()
        .map(|a| super::verify::sha256_hex(a))
        .collect();
    let names_trusted = |d: &Referrer| {
        let listed = d.annotations.get(THUMBPRINTS).map(String::as_str);
        let thumbprints: Vec<String> =
            serde_json::from_str(listed.unwrap_or("[]")).unwrap_or_default();
        thumbprints
            .iter()
            .any(|t| trusted.contains(&t.to_ascii_lowercase()))
    };
    let mut signatures: Vec<Referrer> = listed
        .into_iter()
        .filter(|d| d.artifact_type.as_deref() == Some(ARTIFACT_TYPE))
        .collect();
    // Stable: the index's order within each group.
    signatures.sort_by_key(|d| !names_trusted(d));
    let (mut digests, mut refusals) = (Vec::new(), Vec::new());
    for descriptor in signatures.iter().take(MAX_SIGNATURES) {
        match super::bundle::referrer_digest(&descriptor.digest) {
            Ok(digest) => digests.push(digest),
            Err(refusal) => refusals.push(refusal),
        }
    }
    Ok((digests, refusals))
}

/// The envelope layer of a Notation signature manifest: its digest and media type (JWS or
/// COSE), if it has one.
pub(crate) fn envelope_layer(manifest: &[u8]) -> Result<Option<(Digest, String)>, Refusal> {
    Ok(super::verify::manifest_layers(manifest)?
        .into_iter()
        .find(|l| l.media_type == JWS_MEDIA_TYPE || l.media_type == COSE_MEDIA_TYPE)
        .map(|l| (l.digest, l.media_type)))
}

/// A JWS envelope in the flattened JSON serialization.
#[derive(Deserialize)]
struct Envelope {
    payload: String,
    protected: String,
    #[serde(default)]
    header: Unprotected,
    signature: String,
}

#[derive(Deserialize, Default)]
struct Unprotected {
    #[serde(default)]
    x5c: Vec<String>,
}

/// The protected header's fields Notation defines.
#[derive(Deserialize)]
struct Protected {
    alg: String,
    #[serde(default)]
    cty: String,
    #[serde(default)]
    crit: Vec<String>,
    #[serde(rename = "io.cncf.notary.signingScheme", default)]
    scheme: String,
    #[serde(rename = "io.cncf.notary.signingTime", default)]
    signing_time: Option<String>,
    #[serde(rename = "io.cncf.notary.expiry", default)]
    expiry: Option<String>,
}

/// What a JWS envelope holds, its signature verified with its signing certificate.
struct Signed {
    header: Protected,
    chain: Vec<Vec<u8>>,
    leaf: x509_cert::Certificate,
    payload: Vec<u8>,
}

/// Checks a Notation signature envelope (`media_type` as its layer says) against `trust`
/// (entry `rule` of `images.signatures`) for `pinned`, at `now` (Unix seconds).
pub(crate) fn check_envelope(
    trust: &NotationTrust,
    rule: usize,
    pinned: &Digest,
    media_type: &str,
    bytes: &[u8],
    now: u64,
) -> Verdict {
    if media_type == COSE_MEDIA_TYPE {
        return Err(Refusal::NotationUnsupported(
            "COSE envelope not supported (tagpin reads JWS envelopes: notation sign --signature-format jws)".into(),
        ));
    }
    let signed = open(bytes)?;
    let signing_time = check_header(&signed.header)?;
    check_requirements(&signed)?;
    let subject = certificate::subject(&signed.leaf).map_err(|e| {
        let name = certificate::name(&signed.leaf);
        Refusal::NotationCertificate(format!("the signing certificate {name} {e}"))
    })?;
    let subject_text = certificate::subject_text(&subject);
    // The chain first: nothing of a certificate is reported before it is known to be the
    // trust store's.
    certificate::chains_to(&signed.chain, &trust.anchors, signing_time, now).map_err(|e| {
        Refusal::NotationUntrusted {
            rule,
            subject: subject_text.clone(),
            detail: chain_reason(&e),
        }
    })?;
    check_times(&signed.chain, signing_time, now)?;
    if let Some(expiry) = &signed.header.expiry {
        let at = rfc3339(EXPIRY, expiry)?;
        if at <= now {
            return Err(Refusal::NotationExpired {
                expiry: expiry.clone(),
            });
        }
    }
    if !trust.identities.iter().any(|i| i.matches(&subject)) {
        return Err(Refusal::NotationIdentity {
            rule,
            subject: subject_text,
        });
    }
    check_payload(pinned, &signed.payload)?;
    Ok(Signer(format!("notation {subject_text}")))
}

/// Parses the envelope and verifies its signature over `protected.payload` with the signing
/// certificate's key, in the algorithm the key dictates (which `alg` must name).
fn open(bytes: &[u8]) -> Result<Signed, Refusal> {
    let malformed = |what: &str, e: &dyn std::fmt::Display| {
        Refusal::Malformed(format!("Notation JWS envelope: {what}: {e}"))
    };
    let url = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let envelope: Envelope = serde_json::from_slice(bytes).map_err(|e| malformed("JSON", &e))?;
    let protected = url
        .decode(&envelope.protected)
        .map_err(|e| malformed("protected header", &e))?;
    let header: Protected =
        serde_json::from_slice(&protected).map_err(|e| malformed("protected header", &e))?;
    let chain = envelope
        .header
        .x5c
        .iter()
        .map(|c| base64::engine::general_purpose::STANDARD.decode(c))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| malformed("x5c", &e))?;
    let Some(first) = chain.first() else {
        return Err(malformed("x5c", &"no certificate"));
    };
    let leaf = certificate::parse(first).map_err(|e| malformed("signing certificate", &e))?;
    let algorithm = certificate::algorithm(&leaf)
        .map_err(|e| Refusal::NotationUnsupported(format!("the signing certificate {e}")))?;
    if header.alg != algorithm.name() {
        return Err(Refusal::NotationUnsupported(format!(
            "alg {} where the signing certificate's key calls for {}",
            certificate::shown(&header.alg),
            algorithm.name()
        )));
    }
    let signature = url
        .decode(&envelope.signature)
        .map_err(|e| malformed("signature", &e))?;
    let input = format!("{}.{}", envelope.protected, envelope.payload);
    if !algorithm.verify(&leaf, input.as_bytes(), &signature) {
        return Err(Refusal::NotationSignature);
    }
    let payload = url
        .decode(&envelope.payload)
        .map_err(|e| malformed("payload", &e))?;
    Ok(Signed {
        header,
        chain,
        leaf,
        payload,
    })
}

/// The protected header: the payload type, the `notary.x509` scheme, every critical header
/// understood (and the critical ones present listed), the signing time read. Returns the
/// signing time (Unix seconds).
fn check_header(header: &Protected) -> Result<u64, Refusal> {
    if header.cty != PAYLOAD_TYPE {
        return Err(Refusal::NotationUnsupported(format!(
            "payload type {}, not {PAYLOAD_TYPE}",
            certificate::shown(&header.cty)
        )));
    }
    if header.scheme != X509_SCHEME {
        return Err(Refusal::NotationUnsupported(format!(
            "signing scheme {} (tagpin verifies {X509_SCHEME})",
            certificate::shown(&header.scheme)
        )));
    }
    if let Some(unknown) = header
        .crit
        .iter()
        .find(|c| ![SIGNING_SCHEME, EXPIRY].contains(&c.as_str()))
    {
        return Err(Refusal::NotationUnsupported(format!(
            "critical header {} is not understood",
            certificate::shown(unknown)
        )));
    }
    let listed = |name: &str| header.crit.iter().any(|c| c == name);
    if !listed(SIGNING_SCHEME) || (header.expiry.is_some() && !listed(EXPIRY)) {
        return Err(Refusal::Malformed(format!(
            "Notation JWS envelope: crit must list {SIGNING_SCHEME} and, when present, {EXPIRY}"
        )));
    }
    let Some(time) = &header.signing_time else {
        return Err(Refusal::Malformed(format!(
            "Notation JWS envelope: no {SIGNING_TIME}"
        )));
    };
    rfc3339(SIGNING_TIME, time)
}

/// An RFC 3339 header value as Unix seconds.
fn rfc3339(name: &str, text: &str) -> Result<u64, Refusal> {
    text.parse::<k8s_openapi::jiff::Timestamp>()
        .ok()
        .and_then(|t| u64::try_from(t.as_second()).ok())
        .ok_or_else(|| {
            let text = certificate::shown(text);
            Refusal::Malformed(format!("Notation JWS envelope: {name} {text}"))
        })
}

/// The certificate requirements: the signing certificate's, and the CA certificates' after
/// it (a chain of one certificate is its own root and meets the signing certificate's).
fn check_requirements(signed: &Signed) -> Result<(), Refusal> {
    let subject = certificate::name(&signed.leaf);
    certificate::check_signing_certificate(&signed.leaf).map_err(|e| {
        Refusal::NotationCertificate(format!("the signing certificate {subject} {e}"))
    })?;
    for der in &signed.chain[1..] {
        let ca = certificate::parse(der).map_err(|e| {
            Refusal::Malformed(format!("Notation JWS envelope: x5c certificate: {e}"))
        })?;
        certificate::check_ca_certificate(&ca).map_err(|e| {
            let name = certificate::name(&ca);
            Refusal::NotationCertificate(format!("certificate {name} {e}"))
        })?;
    }
    Ok(())
}

/// Every certificate of the chain valid at the signing time and, with no authentic timestamp,
/// now.
fn check_times(chain: &[Vec<u8>], signing_time: u64, now: u64) -> Result<(), Refusal> {
    for der in chain {
        let Ok(cert) = certificate::parse(der) else {
            continue;
        };
        let (not_before, not_after) = certificate::validity(&cert);
        for (at, when) in [(signing_time, "signed"), (now, "checked")] {
            if at < not_before || at > not_after {
                return Err(Refusal::CertificateTime {
                    subject: certificate::name(&cert),
                    valid: format!("{} to {}", date(not_before), date(not_after)),
                    when: format!("{when} at {}", date(at)),
                });
            }
        }
    }
    Ok(())
}

fn date(unix: u64) -> String {
    k8s_openapi::jiff::Timestamp::from_second(unix as i64)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| unix.to_string())
}

/// What a refusal of the chain means; "(another CA)" only when the chain leads to no
/// certificate of the trust store.
fn chain_reason(error: &certificate::ChainError) -> String {
    use webpki::Error as E;
    let error = match error {
        certificate::ChainError::Anchor(why) => return why.to_string(),
        certificate::ChainError::Webpki(error) => error,
    };
    match error {
        E::UnknownIssuer => "it is not issued by a certificate of the trust store (another CA)".into(),
        E::InvalidSignatureForPublicKey => {
            "its issuer's signature does not verify with the trust store's certificate of that name (another CA)"
                .into()
        }
        E::CertExpired { time, not_after } => format!(
            "a certificate of the chain expired at {}, before the signing time {}",
            date(not_after.as_secs()),
            date(time.as_secs())
        ),
        E::CertNotValidYet { time, not_before } => format!(
            "a certificate of the chain is valid from {}, after the signing time {}",
            date(not_before.as_secs()),
            date(time.as_secs())
        ),
        other => certificate::shown(&format!("{other:?}")),
    }
}

/// The signed payload must name `pinned` as its target artifact.
fn check_payload(pinned: &Digest, payload: &[u8]) -> Result<(), Refusal> {
    #[derive(Deserialize)]
    struct Payload {
        #[serde(rename = "targetArtifact")]
        target: Target,
    }
    #[derive(Deserialize)]
    struct Target {
        digest: String,
        #[serde(flatten)]
        _rest: BTreeMap<String, serde_json::Value>,
    }
    let parsed: Payload = serde_json::from_slice(payload)
        .map_err(|e| Refusal::Malformed(format!("Notation payload: {e}")))?;
    match parsed.target.digest == pinned.to_string() {
        true => Ok(()),
        false => Err(Refusal::OtherDigest {
            signed: certificate::shown(&parsed.target.digest),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PINNED: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
    const OTHER: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";
    /// 2026-01-01 and 2026-06-01, inside the test certificates' validity (2020 to 2090).
    const SIGNED_AT: &str = "2026-01-01T00:00:00Z";
    const NOW: u64 = 1_780_272_000;
    const IDENTITY: &str = "x509.subject: C=US, ST=WA, O=acme, CN=signer";

    struct Ca {
        issuer: rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
    }

    impl Ca {
        fn new(name: &str) -> Ca {
            Ca::made(Ca::params(name, (2020, 2090), Some(None)), None)
        }

        /// A CA certificate's parameters (`ca`: `None` for a certificate that is no CA,
        /// else its pathLen), valid from January 1st of `years.0` to that of `years.1`.
        fn params(
            name: &str,
            years: (i32, i32),
            ca: Option<Option<u8>>,
        ) -> rcgen::CertificateParams {
            let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
            params.is_ca = match ca {
                None => rcgen::IsCa::ExplicitNoCa,
                Some(None) => rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained),
                Some(Some(n)) => rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(n)),
            };
            params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign];
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, name);
            params.not_before = rcgen::date_time_ymd(years.0, 1, 1);
            params.not_after = rcgen::date_time_ymd(years.1, 1, 1);
            params
        }

        /// A CA of `params`, self-signed or issued by `by`.
        fn made(params: rcgen::CertificateParams, by: Option<&Ca>) -> Ca {
            let key = rcgen::KeyPair::generate().unwrap();
            let issuer = match by {
                None => rcgen::CertifiedIssuer::self_signed(params, key),
                Some(by) => rcgen::CertifiedIssuer::signed_by(params, key, &by.issuer),
            };
            Ca {
                issuer: issuer.unwrap(),
            }
        }

        /// A code-signing leaf for `C=US, ST=WA, O=acme, CN=<cn>`, valid in `years`.
        fn leaf(&self, cn: &str, years: (i32, i32)) -> (rcgen::KeyPair, rcgen::Certificate) {
            self.leaf_with(&[], cn, years)
        }

        /// A code-signing leaf for `C=US, ST=WA, O=acme, <extra>, CN=<cn>`, valid in `years`.
        fn leaf_with(
            &self,
            extra: &[(rcgen::DnType, &str)],
            cn: &str,
            years: (i32, i32),
        ) -> (rcgen::KeyPair, rcgen::Certificate) {
            let key = rcgen::KeyPair::generate().unwrap();
            let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
            let dn = &mut params.distinguished_name;
            dn.push(rcgen::DnType::CountryName, "US");
            dn.push(rcgen::DnType::StateOrProvinceName, "WA");
            dn.push(rcgen::DnType::OrganizationName, "acme");
            for (kind, value) in extra {
                dn.push(kind.clone(), *value);
            }
            dn.push(rcgen::DnType::CommonName, cn);
            params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
            params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::CodeSigning];
            params.not_before = rcgen::date_time_ymd(years.0, 1, 1);
            params.not_after = rcgen::date_time_ymd(years.1, 1, 1);
            let cert = params.signed_by(&key, &self.issuer).unwrap();
            (key, cert)
        }

        fn pem(&self) -> String {
            self.issuer.pem()
        }

        /// An envelope signed by a leaf of this (intermediate) CA valid in `years`, its x5c
        /// the leaf and this CA, the root left out.
        fn chained_envelope(&self, years: (i32, i32)) -> Vec<u8> {
            let (key, leaf) = self.leaf("signer", years);
            let chain = [leaf.der().as_ref(), self.issuer.der().as_ref()];
            envelope(&key, &chain, header(), PINNED)
        }
    }

    /// The refusal a verdict must be, its text holding `part`.
    #[track_caller]
    fn refused_with(verdict: Verdict, part: &str) -> Refusal {
        let refusal = verdict.unwrap_err();
        assert!(refusal.to_string().contains(part), "{refusal}");
        refusal
    }

    /// ECDSA's DER signature (what rcgen gives) as JWS's fixed r||s.
    fn fixed(der: &[u8], size: usize) -> Vec<u8> {
        let mut out = Vec::new();
        let mut at = 2;
        for _ in 0..2 {
            let len = der[at + 1] as usize;
            let int = &der[at + 2..at + 2 + len];
            let int = &int[int.len().saturating_sub(size)..];
            out.extend(std::iter::repeat_n(0, size - int.len()));
            out.extend_from_slice(int);
            at += 2 + len;
        }
        out
    }

    fn envelope(
        key: &rcgen::KeyPair,
        chain: &[&[u8]],
        header: serde_json::Value,
        digest: &str,
    ) -> Vec<u8> {
        use rcgen::SigningKey as _;
        let url = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let payload = serde_json::json!({"targetArtifact": {
            "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": digest, "size": 7}});
        let protected = url.encode(header.to_string());
        let payload = url.encode(payload.to_string());
        let signature = key
            .sign(format!("{protected}.{payload}").as_bytes())
            .unwrap();
        let x5c: Vec<String> = chain
            .iter()
            .map(|c| base64::engine::general_purpose::STANDARD.encode(c))
            .collect();
        serde_json::to_vec(&serde_json::json!({
            "payload": payload, "protected": protected,
            "header": {"x5c": x5c, "io.cncf.notary.signingAgent": "notation-go/1.3.0"},
            "signature": url.encode(fixed(&signature, 32)),
        }))
        .unwrap()
    }

    fn header() -> serde_json::Value {
        serde_json::json!({
            "alg": "ES256", "cty": PAYLOAD_TYPE,
            "io.cncf.notary.signingScheme": "notary.x509",
            "io.cncf.notary.signingTime": SIGNED_AT,
            "crit": ["io.cncf.notary.signingScheme"],
        })
    }

    fn trust(ca: &Ca, identity: &str) -> NotationTrust {
        NotationTrust::compile(&[&ca.pem()], &[identity.to_string()]).unwrap()
    }

    fn check(trust: &NotationTrust, bytes: &[u8]) -> Verdict {
        check_envelope(
            trust,
            0,
            &PINNED.parse().unwrap(),
            JWS_MEDIA_TYPE,
            bytes,
            NOW,
        )
    }

    #[test]
    fn a_jws_signature_chaining_to_the_trust_store_by_a_trusted_subject_is_accepted() {
        let ca = Ca::new("acme CA");
        let (key, leaf) = ca.leaf("signer", (2020, 2090));
        let bytes = envelope(&key, &[leaf.der(), ca.issuer.der()], header(), PINNED);
        assert_eq!(
            check(&trust(&ca, IDENTITY), &bytes).unwrap().to_string(),
            "notation CN=signer, C=US, ST=WA, O=acme"
        );
        assert!(check(&trust(&ca, "*"), &bytes).is_ok());
        assert!(check(&trust(&ca, "C=US,ST=WA,O=acme"), &bytes).is_ok());
        // The chain may stop before the root the trust store holds.
        let short = envelope(&key, &[leaf.der()], header(), PINNED);
        assert!(check(&trust(&ca, IDENTITY), &short).is_ok());
    }

    #[test]
    fn another_ca_another_digest_a_wrong_identity_or_a_tampered_payload_are_refused() {
        let ca = Ca::new("acme CA");
        let (key, leaf) = ca.leaf("signer", (2020, 2090));
        let bytes = envelope(&key, &[leaf.der(), ca.issuer.der()], header(), PINNED);
        let refusal = check(&trust(&Ca::new("other CA"), IDENTITY), &bytes).unwrap_err();
        assert!(
            matches!(refusal, Refusal::NotationUntrusted { .. }),
            "{refusal}"
        );
        assert!(refusal
            .to_string()
            .contains("not issued by a certificate of the trust store"));

        let other = envelope(&key, &[leaf.der()], header(), OTHER);
        assert_eq!(
            check(&trust(&ca, IDENTITY), &other),
            Err(Refusal::OtherDigest {
                signed: OTHER.into()
            })
        );

        let refusal = check(&trust(&ca, "C=US, ST=WA, O=acme, CN=someone"), &bytes).unwrap_err();
        assert_eq!(
            refusal.to_string(),
            "Notation signer CN=signer, C=US, ST=WA, O=acme is not one of images.signatures[0].notation.identities"
        );

        let mut tampered: serde_json::Value = serde_json::from_slice(&other).unwrap();
        let url = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let payload = format!(r#"{{"targetArtifact":{{"digest":"{PINNED}"}}}}"#);
        tampered["payload"] = url.encode(payload).into();
        let tampered = serde_json::to_vec(&tampered).unwrap();
        assert_eq!(
            check(&trust(&ca, IDENTITY), &tampered),
            Err(Refusal::NotationSignature)
        );
    }

    #[test]
    fn a_certificate_invalid_at_the_signing_time_or_now_and_an_expired_signature_are_refused() {
        let ca = Ca::new("acme CA");
        let (key, leaf) = ca.leaf("signer", (2021, 2022));
        let bytes = envelope(&key, &[leaf.der()], header(), PINNED);
        assert_eq!(
            check(&trust(&ca, IDENTITY), &bytes)
                .unwrap_err()
                .to_string(),
            "Notation certificate CN=signer, C=US, ST=WA, O=acme does not chain to \
             images.signatures[0].notation.trust_store: a certificate of the chain expired at \
             2022-01-01T00:00:00Z, before the signing time 2026-01-01T00:00:00Z"
        );
        // Valid when signed, expired now: without an authentic timestamp, refused too.
        let (key, leaf) = ca.leaf("signer", (2025, 2026));
        let mut signed_2025 = header();
        signed_2025["io.cncf.notary.signingTime"] = "2025-06-01T00:00:00Z".into();
        let bytes = envelope(&key, &[leaf.der()], signed_2025, PINNED);
        let refusal = check(&trust(&ca, IDENTITY), &bytes).unwrap_err();
        assert!(
            refusal
                .to_string()
                .ends_with("was checked at 2026-06-01T00:00:00Z"),
            "{refusal}"
        );

        let (key, leaf) = ca.leaf("signer", (2020, 2090));
        let mut expiring = header();
        expiring["io.cncf.notary.expiry"] = "2026-03-01T00:00:00Z".into();
        expiring["crit"] =
            serde_json::json!(["io.cncf.notary.signingScheme", "io.cncf.notary.expiry"]);
        let bytes = envelope(&key, &[leaf.der()], expiring, PINNED);
        assert_eq!(
            check(&trust(&ca, IDENTITY), &bytes),
            Err(Refusal::NotationExpired {
                expiry: "2026-03-01T00:00:00Z".into()
            })
        );
    }

    #[test]
    fn unknown_critical_headers_another_alg_a_ca_as_signer_and_cose_are_refused() {
        let ca = Ca::new("acme CA");
        let (key, leaf) = ca.leaf("signer", (2020, 2090));
        let t = trust(&ca, IDENTITY);
        let mut plugin = header();
        plugin["io.cncf.notary.verificationPlugin"] = "com.example.plugin".into();
        plugin["crit"] = serde_json::json!([
            "io.cncf.notary.signingScheme",
            "io.cncf.notary.verificationPlugin"
        ]);
        refused_with(
            check(&t, &envelope(&key, &[leaf.der()], plugin, PINNED)),
            "critical header io.cncf.notary.verificationPlugin is not understood",
        );

        let mut ps = header();
        ps["alg"] = "PS256".into();
        refused_with(
            check(&t, &envelope(&key, &[leaf.der()], ps, PINNED)),
            "alg PS256 where the signing certificate's key calls for ES256",
        );

        let mut unlisted = header();
        unlisted["crit"] = serde_json::json!([]);
        let refusal = check(&t, &envelope(&key, &[leaf.der()], unlisted, PINNED)).unwrap_err();
        assert!(matches!(refusal, Refusal::Malformed(_)), "{refusal}");

        // The CA's own key signing as if it were a leaf.
        let ca_pem = ca.issuer.der().to_vec();
        let refusal =
            check(&t, &envelope(ca.issuer.key(), &[&ca_pem], header(), PINNED)).unwrap_err();
        assert!(
            matches!(refusal, Refusal::NotationCertificate(_)),
            "{refusal}"
        );

        let cose = check_envelope(
            &t,
            0,
            &PINNED.parse().unwrap(),
            COSE_MEDIA_TYPE,
            b"\xd2",
            NOW,
        );
        assert!(cose
            .unwrap_err()
            .to_string()
            .contains("COSE envelope not supported"));
    }

    #[test]
    fn identities_are_read_as_trust_policies_write_them() {
        let subject = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect()
        };
        let signer = subject(&[("C", "US"), ("ST", "WA"), ("O", "acme, inc"), ("CN", "a;b")]);
        let id = Identity::parse(r"x509.subject: C=US, ST=WA, O=acme\, inc, CN=a\;b").unwrap();
        assert!(id.matches(&signer));
        assert!(Identity::parse("C=US,ST=WA,O=acme\\, inc")
            .unwrap()
            .matches(&signer));
        assert!(!Identity::parse("C=US, ST=WA, O=acme")
            .unwrap()
            .matches(&signer));
        assert!(!Identity::parse("C=US, ST=WA, O=acme\\, inc, OU=x")
            .unwrap()
            .matches(&signer));
        assert_eq!(Identity::parse(" * ").unwrap(), Identity::Any);
        assert!(Identity::parse("x509.subject: C=US, O=acme")
            .unwrap_err()
            .to_string()
            .contains("ST is missing"));
        assert!(Identity::parse("C=US, ST=WA, O=a, O=b").is_err());
        assert!(Identity::parse("C=US, ST=WA, acme").is_err());
        assert_eq!(
            Identity::parse(r"C=US, ST=WA, O=\ padded\ ").unwrap(),
            Identity::Subject(subject(&[("C", "US"), ("ST", "WA"), ("O", " padded ")]))
        );
    }

    #[test]
    fn only_notation_referrers_are_looked_at_and_the_list_is_bounded() {
        let d = |n: u8| format!("sha256:{}", format!("{n:02x}").repeat(32));
        let mut manifests = vec![
            serde_json::json!({"digest": d(1), "artifactType": "application/vnd.dev.sigstore.bundle.v0.3+json"}),
            serde_json::json!({"digest": d(2)}),
        ];
        for n in 10..30 {
            manifests.push(serde_json::json!({"digest": d(n), "artifactType": ARTIFACT_TYPE}));
        }
        let index = serde_json::to_vec(&serde_json::json!({"manifests": manifests})).unwrap();
        let (found, refused) = signature_referrers(&index, &[]).unwrap();
        assert_eq!(found.len(), MAX_SIGNATURES);
        assert_eq!(found[0].to_string(), d(10));
        assert!(refused.is_empty());
    }

    #[test]
    fn referrers_naming_a_trust_store_certificate_come_first_and_a_bad_digest_is_left_out() {
        let anchor = b"a trust store certificate".to_vec();
        let thumbprint = crate::signature::verify::sha256_hex(&anchor);
        let d = |n: u8| format!("sha256:{}", format!("{n:02x}").repeat(32));
        let mut manifests =
            vec![serde_json::json!({"digest": "sha256:bogus", "artifactType": ARTIFACT_TYPE})];
        for n in 10..20 {
            manifests.push(
                serde_json::json!({"digest": d(n), "artifactType": ARTIFACT_TYPE,
                "annotations": {THUMBPRINTS: "[\"00\"]"}}),
            );
        }
        manifests.push(
            serde_json::json!({"digest": d(1), "artifactType": ARTIFACT_TYPE,
            "annotations": {THUMBPRINTS: format!("[\"{}\"]", thumbprint.to_uppercase())}}),
        );
        let index = serde_json::to_vec(&serde_json::json!({"manifests": manifests})).unwrap();
        let (found, refused) = signature_referrers(&index, &[anchor]).unwrap();
        assert_eq!(found[0].to_string(), d(1));
        assert_eq!(found.len(), MAX_SIGNATURES - 1);
        assert!(
            matches!(refused[..], [Refusal::Malformed(_)]),
            "{refused:?}"
        );
    }

    #[test]
    fn an_expired_root_still_in_the_trust_store_does_not_certify_a_fresh_chain() {
        // The retired root's key leaked: a fresh intermediate and leaf under it, the root
        // left out of x5c.
        let root = Ca::made(Ca::params("retired root", (2015, 2022), Some(None)), None);
        let intermediate = Ca::made(
            Ca::params("fresh CA", (2025, 2090), Some(None)),
            Some(&root),
        );
        let bytes = intermediate.chained_envelope((2025, 2090));
        let refusal = check(&trust(&root, IDENTITY), &bytes).unwrap_err();
        assert!(
            matches!(refusal, Refusal::NotationUntrusted { .. }),
            "{refusal}"
        );
        let text = refusal.to_string();
        assert!(
            text.contains(
                "the trust store certificate CN=retired root is not valid at the signing time"
            ),
            "{text}"
        );
        assert!(!text.contains("another CA"), "{text}");

        // Valid when signed, expired now: refused too.
        let root = Ca::made(Ca::params("old root", (2020, 2026), Some(None)), None);
        let (key, leaf) = root.leaf("signer", (2020, 2025));
        let mut early = header();
        early["io.cncf.notary.signingTime"] = "2024-06-01T00:00:00Z".into();
        let bytes = envelope(&key, &[leaf.der()], early, PINNED);
        refused_with(
            check(&trust(&root, IDENTITY), &bytes),
            "is not valid at now",
        );
    }

    #[test]
    fn a_trust_store_certificate_that_is_no_ca_or_whose_path_len_is_exceeded_is_refused() {
        let not_ca = Ca::made(Ca::params("a leaf in the store", (2020, 2090), None), None);
        let (key, leaf) = not_ca.leaf("signer", (2020, 2090));
        let bytes = envelope(&key, &[leaf.der()], header(), PINNED);
        refused_with(
            check(&trust(&not_ca, IDENTITY), &bytes),
            "the trust store certificate CN=a leaf in the store does not meet",
        );

        // A root of pathLen `path_len` and an issuing CA below it.
        let root_and_intermediate = |path_len: u8| {
            let root = Ca::made(Ca::params("root", (2020, 2090), Some(Some(path_len))), None);
            let intermediate = Ca::made(
                Ca::params("issuing CA", (2020, 2090), Some(None)),
                Some(&root),
            );
            (root, intermediate)
        };
        let (root, intermediate) = root_and_intermediate(0);
        let bytes = intermediate.chained_envelope((2020, 2090));
        refused_with(
            check(&trust(&root, IDENTITY), &bytes),
            "allows 0 CA certificates below it (pathLen), the chain has 1",
        );
        // pathLen 1 allows it.
        let (root, intermediate) = root_and_intermediate(1);
        let bytes = intermediate.chained_envelope((2020, 2090));
        assert!(check(&trust(&root, IDENTITY), &bytes).is_ok());

        // A non-CA intermediate in x5c.
        let not_ca = Ca::made(Ca::params("not a CA", (2020, 2090), None), Some(&root));
        let bytes = not_ca.chained_envelope((2020, 2090));
        let refusal = check(&trust(&root, IDENTITY), &bytes).unwrap_err();
        assert!(
            matches!(refusal, Refusal::NotationCertificate(_)),
            "{refusal}"
        );
    }

    #[test]
    fn a_subject_naming_an_attribute_twice_is_refused() {
        let ca = Ca::new("acme CA");
        let (key, leaf) = ca.leaf_with(
            &[
                (rcgen::DnType::OrganizationalUnitName, "interns"),
                // The same OID (2.5.4.11) again, which rcgen keeps apart.
                (rcgen::DnType::CustomDnType(vec![2, 5, 4, 11]), "release"),
            ],
            "signer",
            (2020, 2090),
        );
        let bytes = envelope(&key, &[leaf.der()], header(), PINNED);
        let identity = "C=US, ST=WA, O=acme, OU=release";
        refused_with(
            check(&trust(&ca, identity), &bytes),
            "its subject names OU more than once",
        );
    }

    #[test]
    fn text_of_the_signer_is_escaped_and_bounded_in_refusals() {
        let ca = Ca::new("acme CA");
        let (key, leaf) = ca.leaf("signer\n\u{202e}evil", (2020, 2090));
        let bytes = envelope(&key, &[leaf.der()], header(), PINNED);
        let text = check(&trust(&ca, "C=US, ST=WA, O=other"), &bytes)
            .unwrap_err()
            .to_string();
        assert!(text.contains(r"CN=signer\n\u{202e}evil"), "{text}");

        let mut long = header();
        long["alg"] = format!("ES256\u{1b}[2J{}", "A".repeat(5000)).into();
        let text = check(
            &trust(&ca, IDENTITY),
            &envelope(&key, &[leaf.der()], long, PINNED),
        )
        .unwrap_err()
        .to_string();
        assert!(text.contains(r"alg ES256\u{1b}[2J"), "{text}");
        assert!(text.len() < 600 && text.contains('…'), "{text}");
    }
}
