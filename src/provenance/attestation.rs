//! The decisions about one attestation, without I/O: does this in-toto statement, in a DSSE
//! envelope, say that *this* digest was built by an accepted builder from the accepted source,
//! and is it signed by an accepted identity? The envelope's signature is checked over DSSE's
//! pre-authentication encoding (PAE) with sigstore-crypto; a Sigstore bundle's whole
//! verification is sigstore-verify's ([`crate::signature::bundle::verify_statement_bundle`]).

use base64::Engine as _;
use serde::Deserialize;

use super::{Attested, Refusal, Rule};
use crate::reference::Digest;
use crate::signature::bundle::{Statement, IN_TOTO_PAYLOAD_TYPE};
use crate::signature::verify::{sha256_hex, Layer, CERTIFICATE_ANNOTATION};
use crate::signature::Trust;

/// The predicate type of SLSA provenance v1.
pub(crate) const SLSA_V1: &str = "https://slsa.dev/provenance/v1";
/// The predicate type of SLSA provenance v0.2 (what `cosign attest --type slsaprovenance` and
/// older SLSA generators write).
pub(crate) const SLSA_V02: &str = "https://slsa.dev/provenance/v0.2";
/// The media type of a `.att` layer: one DSSE envelope.
pub(crate) const DSSE_MEDIA_TYPE: &str = "application/vnd.dsse.envelope.v1+json";

/// DSSE's pre-authentication encoding, what an envelope's signature signs:
/// `DSSEv1 <len(type)> <type> <len(body)> <body>` (lengths in ASCII decimal, in bytes).
pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    sigstore_types::pae(payload_type, payload)
}

/// What a provenance statement claims about the digest it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Claim {
    pub predicate_type: String,
    pub builder: String,
    /// The source repository's URI, without `git+` in front nor `.git` behind.
    pub repository: Option<String>,
    /// The source ref (`refs/tags/v1.2.0`), when the statement names one.
    pub git_ref: Option<String>,
}

impl Claim {
    /// `https://github.com/acme/web@refs/tags/v1`, as reports name the source.
    pub fn source(&self) -> String {
        match (&self.repository, &self.git_ref) {
            (Some(repository), Some(git_ref)) => format!("{repository}@{git_ref}"),
            (Some(repository), None) => repository.clone(),
            (None, _) => "no source".into(),
        }
    }
}

/// Reads an in-toto statement (v1 or v0.1): it must name `pinned` among its subjects and be
/// SLSA provenance (v1, or v0.2), whose builder and source are read.
pub(crate) fn read_statement(pinned: &Digest, payload: &[u8]) -> Result<Claim, Refusal> {
    let statement = Statement::read(payload)
        .map_err(|e| Refusal::Malformed(format!("in-toto statement: {e}")))?;
    statement
        .names(pinned)
        .map_err(|named| Refusal::OtherDigest {
            named: named.unwrap_or_else(|| "no sha256 digest".into()),
        })?;
    let predicate = &statement.predicate;
    let text = |pointer: &str| {
        predicate
            .pointer(pointer)
            .and_then(|v| v.as_str())
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    let (builder, source) = match statement.predicate_type.as_str() {
        SLSA_V1 => (text("/runDetails/builder/id"), v1_source(predicate, &text)),
        SLSA_V02 => (text("/builder/id"), v02_source(predicate, &text)),
        _ => {
            return Err(Refusal::NotProvenance {
                kind: statement.predicate_type,
            })
        }
    };
    let builder =
        builder.ok_or_else(|| Refusal::Malformed("the provenance names no builder id".into()))?;
    let (repository, git_ref) = source.unwrap_or((None, None));
    Ok(Claim {
        predicate_type: statement.predicate_type,
        builder,
        repository,
        git_ref,
    })
}

type Source = (Option<String>, Option<String>);

/// SLSA v1: GitHub Actions' `externalParameters.workflow` `{repository, ref}`, else the first
/// resolved dependency that is a git URI (`git+https://github.com/acme/web@refs/heads/main`).
fn v1_source(
    predicate: &serde_json::Value,
    text: &dyn Fn(&str) -> Option<String>,
) -> Option<Source> {
    let workflow = "/buildDefinition/externalParameters/workflow";
    if let Some(repository) = text(&format!("{workflow}/repository")) {
        return Some((
            Some(normalize(&repository)),
            text(&format!("{workflow}/ref")),
        ));
    }
    let dependencies = predicate.pointer("/buildDefinition/resolvedDependencies")?;
    dependencies
        .as_array()?
        .iter()
        .filter_map(|d| d.get("uri")?.as_str())
        .find(|uri| uri.starts_with("git+"))
        .map(git_uri)
}

/// SLSA v0.2: `invocation.configSource.uri` (`git+…@ref`), else the first git material.
fn v02_source(
    predicate: &serde_json::Value,
    text: &dyn Fn(&str) -> Option<String>,
) -> Option<Source> {
    if let Some(uri) = text("/invocation/configSource/uri") {
        return Some(git_uri(&uri));
    }
    predicate
        .pointer("/materials")?
        .as_array()?
        .iter()
        .filter_map(|m| m.get("uri")?.as_str())
        .find(|uri| uri.starts_with("git+"))
        .map(git_uri)
}

/// `git+https://github.com/acme/web.git@refs/tags/v1` → the repository and the ref.
fn git_uri(uri: &str) -> Source {
    let uri = uri.strip_prefix("git+").unwrap_or(uri);
    // The ref follows the last `@` after the host (an `@` before it is user info).
    let host_start = uri.find("://").map_or(0, |i| i + 3);
    match uri[host_start..].rfind('@') {
        Some(at) if uri[host_start..host_start + at].contains('/') => {
            let at = host_start + at;
            (Some(normalize(&uri[..at])), Some(uri[at + 1..].to_string()))
        }
        _ => (Some(normalize(uri)), None),
    }
}

/// A repository URI as configurations write it: no `git+`, no trailing `/` or `.git`.
fn normalize(uri: &str) -> String {
    let uri = uri
        .strip_prefix("git+")
        .unwrap_or(uri)
        .trim_end_matches('/');
    uri.strip_suffix(".git").unwrap_or(uri).to_string()
}

/// Whether a verified claim's builder and source are the entry's.
pub(crate) fn check_claim(rule: &Rule, claim: &Claim) -> Result<(), Refusal> {
    if !rule.builder.is_match(&claim.builder) {
        return Err(Refusal::Builder {
            rule: rule.index,
            found: claim.builder.clone(),
        });
    }
    if claim.repository.as_deref() != Some(rule.repository.as_str()) {
        return Err(Refusal::Source {
            rule: rule.index,
            found: claim.source(),
        });
    }
    if let Some(wanted) = &rule.git_ref {
        let found = claim.git_ref.clone().unwrap_or_default();
        if !wanted.is_match(&found) {
            return Err(Refusal::Ref {
                rule: rule.index,
                found: claim.source(),
            });
        }
    }
    Ok(())
}

/// Checks one `.att` layer (a DSSE envelope, its bytes as the registry sent them): they must
/// hash to the layer digest, the statement must be provenance of `pinned`, signed over its
/// PAE by one of the entry's keys, by an accepted builder from the accepted source.
pub(crate) fn check_envelope(
    rule: &Rule,
    pinned: &Digest,
    layer: &Layer,
    bytes: &[u8],
) -> Result<Attested, Refusal> {
    if layer.media_type != DSSE_MEDIA_TYPE {
        return Err(Refusal::Malformed(format!(
            "layer {} is {}, not {DSSE_MEDIA_TYPE}",
            layer.digest, layer.media_type
        )));
    }
    let computed = sha256_hex(bytes);
    if layer.digest.algorithm() != "sha256" || layer.digest.hex() != computed {
        return Err(Refusal::Malformed(format!(
            "attestation layer {} hashes to sha256:{computed}; nothing of it was used",
            layer.digest
        )));
    }
    let envelope = Envelope::read(bytes)?;
    let claim = read_statement(pinned, &envelope.payload)?;
    let signer = envelope.signer(&rule.trust, rule.index, layer)?;
    check_claim(rule, &claim)?;
    Ok(Attested {
        builder: claim.builder.clone(),
        source: claim.source(),
        signer,
    })
}

/// A DSSE envelope as a `.att` layer holds it (every signature it carries, any of which may
/// be the one that counts).
pub(crate) struct Envelope {
    pub payload_type: String,
    pub payload: Vec<u8>,
    /// Each signature, base64, as written.
    pub signatures: Vec<String>,
}

impl Envelope {
    pub fn read(bytes: &[u8]) -> Result<Envelope, Refusal> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Wire {
            payload_type: String,
            payload: String,
            #[serde(default)]
            signatures: Vec<Signature>,
        }
        #[derive(Deserialize)]
        struct Signature {
            #[serde(default)]
            sig: String,
        }
        let wire: Wire = serde_json::from_slice(bytes)
            .map_err(|e| Refusal::Malformed(format!("DSSE envelope: {e}")))?;
        if wire.payload_type != IN_TOTO_PAYLOAD_TYPE {
            return Err(Refusal::NotProvenance {
                kind: format!("payload type {}", wire.payload_type),
            });
        }
        let payload = base64::engine::general_purpose::STANDARD
            .decode(wire.payload.trim())
            .map_err(|e| Refusal::Malformed(format!("DSSE payload: {e}")))?;
        Ok(Envelope {
            payload_type: wire.payload_type,
            payload,
            signatures: wire
                .signatures
                .into_iter()
                .map(|s| s.sig)
                .filter(|s| !s.trim().is_empty())
                .collect(),
        })
    }

    /// The configured key one of the envelope's signatures over its PAE verifies with.
    fn signer(
        &self,
        trust: &Trust,
        rule: usize,
        layer: &Layer,
    ) -> Result<crate::signature::Signer, Refusal> {
        if self.signatures.is_empty() {
            return Err(Refusal::Unsigned);
        }
        let signed = pae(&self.payload_type, &self.payload);
        if let Some(signer) = self
            .signatures
            .iter()
            .find_map(|sig| trust.key_that_signed(&signed, sig))
        {
            return Ok(signer);
        }
        if layer.annotations.contains_key(CERTIFICATE_ANNOTATION) {
            return Err(Refusal::KeylessAtt);
        }
        Err(Refusal::UnknownKey { rule })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ProvenanceRule;
    use sigstore_crypto::KeyPair;

    const PINNED: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
    const OTHER: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";
    const BUILDER: &str = "https://github.com/actions/runner/github-hosted";

    fn pinned() -> Digest {
        PINNED.parse().unwrap()
    }

    /// A GitHub Actions SLSA v1 statement (as `actions/attest-build-provenance` writes it).
    fn v1(digest: &str, builder: &str, repository: &str) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "_type": "https://in-toto.io/Statement/v1",
            "subject": [{"name": "ghcr.io/acme/web", "digest": {"sha256": digest.trim_start_matches("sha256:")}}],
            "predicateType": SLSA_V1,
            "predicate": {
                "buildDefinition": {
                    "buildType": "https://actions.github.io/buildtypes/workflow/v1",
                    "externalParameters": {"workflow": {"ref": "refs/tags/v1.2.0", "repository": repository, "path": ".github/workflows/release.yml"}},
                    "resolvedDependencies": [{"uri": format!("git+{repository}@refs/tags/v1.2.0"), "digest": {"gitCommit": "abc"}}],
                },
                "runDetails": {"builder": {"id": builder}, "metadata": {"invocationId": "1"}},
            },
        }))
        .unwrap()
    }

    fn rule(keys: &[&KeyPair], git_ref: Option<&str>) -> Rule {
        let config = ProvenanceRule {
            matches: "*".into(),
            builder_id: r"https://github\.com/actions/runner/.+".into(),
            source_repository: "https://github.com/acme/web".into(),
            source_ref: git_ref.map(str::to_string),
            signers: crate::signature::verify::tests::key_rule(keys),
        };
        Rule::compile(0, &config).unwrap()
    }

    fn envelope(payload: &[u8], signer: Option<&KeyPair>) -> (Layer, Vec<u8>) {
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        let signatures: Vec<_> = signer
            .map(|key| {
                let sig = key.sign(&pae(IN_TOTO_PAYLOAD_TYPE, payload)).unwrap();
                serde_json::json!({"keyid": "", "sig": sig.to_base64()})
            })
            .into_iter()
            .collect();
        let bytes = serde_json::to_vec(&serde_json::json!({
            "payloadType": IN_TOTO_PAYLOAD_TYPE,
            "payload": b64(payload),
            "signatures": signatures,
        }))
        .unwrap();
        let layer = Layer {
            digest: format!("sha256:{}", sha256_hex(&bytes)).parse().unwrap(),
            media_type: DSSE_MEDIA_TYPE.into(),
            annotations: Default::default(),
        };
        (layer, bytes)
    }

    #[test]
    fn pae_is_the_dsse_spec_s_encoding() {
        // The DSSE protocol's example.
        assert_eq!(
            pae("http://example.com/HelloWorld", b"hello world"),
            b"DSSEv1 29 http://example.com/HelloWorld 11 hello world".to_vec()
        );
        assert_eq!(pae("", b""), b"DSSEv1 0  0 ".to_vec());
    }

    #[test]
    fn a_slsa_v1_statement_names_its_builder_and_source() {
        let claim = read_statement(
            &pinned(),
            &v1(PINNED, BUILDER, "https://github.com/acme/web"),
        )
        .unwrap();
        assert_eq!(claim.builder, BUILDER);
        assert_eq!(
            claim.source(),
            "https://github.com/acme/web@refs/tags/v1.2.0"
        );
        // Without the workflow parameters, the git dependency says the same.
        let mut statement: serde_json::Value =
            serde_json::from_slice(&v1(PINNED, BUILDER, "https://github.com/acme/web")).unwrap();
        statement["predicate"]["buildDefinition"]["externalParameters"] = serde_json::json!({});
        let claim = read_statement(&pinned(), &serde_json::to_vec(&statement).unwrap()).unwrap();
        assert_eq!(
            claim.source(),
            "https://github.com/acme/web@refs/tags/v1.2.0"
        );
    }

    #[test]
    fn a_slsa_v0_2_statement_is_read_from_its_invocation_or_materials() {
        let statement = |predicate: serde_json::Value| {
            serde_json::to_vec(&serde_json::json!({
                "_type": "https://in-toto.io/Statement/v0.1",
                "subject": [{"name": "web", "digest": {"sha256": pinned().hex()}}],
                "predicateType": SLSA_V02,
                "predicate": predicate,
            }))
            .unwrap()
        };
        let claim = read_statement(
            &pinned(),
            &statement(serde_json::json!({
                "builder": {"id": "https://github.com/slsa-framework/slsa-github-generator/.github/workflows/generator_container_slsa3.yml@refs/tags/v1.9.0"},
                "invocation": {"configSource": {"uri": "git+https://github.com/acme/web.git@refs/heads/main", "entryPoint": ".github/workflows/release.yml"}},
            })),
        )
        .unwrap();
        assert!(claim
            .builder
            .starts_with("https://github.com/slsa-framework/"));
        assert_eq!(
            claim.repository.as_deref(),
            Some("https://github.com/acme/web")
        );
        assert_eq!(claim.git_ref.as_deref(), Some("refs/heads/main"));
        let claim = read_statement(
            &pinned(),
            &statement(serde_json::json!({
                "builder": {"id": "b"},
                "materials": [{"uri": "pkg:docker/golang@1.22"}, {"uri": "git+https://git@gitlab.example/acme/web"}],
            })),
        )
        .unwrap();
        assert_eq!(claim.source(), "https://git@gitlab.example/acme/web");
    }

    #[test]
    fn another_digest_or_an_sbom_is_not_provenance_of_this_digest() {
        assert_eq!(
            read_statement(
                &pinned(),
                &v1(OTHER, BUILDER, "https://github.com/acme/web")
            ),
            Err(Refusal::OtherDigest {
                named: OTHER.into()
            })
        );
        let sbom = serde_json::to_vec(&serde_json::json!({
            "_type": "https://in-toto.io/Statement/v1",
            "subject": [{"digest": {"sha256": pinned().hex()}}],
            "predicateType": "https://spdx.dev/Document",
            "predicate": {},
        }))
        .unwrap();
        assert_eq!(
            read_statement(&pinned(), &sbom).unwrap_err().to_string(),
            "an attestation of predicate type https://spdx.dev/Document, not SLSA provenance"
        );
    }

    #[test]
    fn builder_repository_and_ref_must_be_the_entry_s() {
        let rule = rule(&[], Some("refs/tags/v.+"));
        let claim = |builder: &str, repository: &str, git_ref: &str| Claim {
            predicate_type: SLSA_V1.into(),
            builder: builder.into(),
            repository: Some(repository.into()),
            git_ref: Some(git_ref.into()),
        };
        let web = "https://github.com/acme/web";
        assert_eq!(
            check_claim(&rule, &claim(BUILDER, web, "refs/tags/v1")),
            Ok(())
        );
        assert!(matches!(
            check_claim(
                &rule,
                &claim("https://evil.example/runner", web, "refs/tags/v1")
            ),
            Err(Refusal::Builder { .. })
        ));
        // Anchored: a builder id with the accepted one inside is not accepted.
        assert!(check_claim(&rule, &claim(&format!("x{BUILDER}"), web, "refs/tags/v1")).is_err());
        assert_eq!(
            check_claim(&rule, &claim(BUILDER, "https://github.com/acme/webx", "refs/tags/v1"))
                .unwrap_err()
                .to_string(),
            "provenance of source https://github.com/acme/webx@refs/tags/v1, not images.provenance[0].source_repository"
        );
        assert!(matches!(
            check_claim(&rule, &claim(BUILDER, web, "refs/heads/main")),
            Err(Refusal::Ref { .. })
        ));
    }

    #[test]
    fn an_envelope_counts_signed_over_its_pae_by_a_configured_key_only() {
        let (release, stranger) = (
            KeyPair::generate_ecdsa_p256().unwrap(),
            KeyPair::generate_ecdsa_p256().unwrap(),
        );
        let rule = rule(&[&release], None);
        let statement = v1(PINNED, BUILDER, "https://github.com/acme/web");
        let (layer, bytes) = envelope(&statement, Some(&release));
        let attested = check_envelope(&rule, &pinned(), &layer, &bytes).unwrap();
        assert_eq!(attested.signer.to_string(), "key keys/0.pub");
        assert_eq!(attested.builder, BUILDER);
        let (layer, bytes) = envelope(&statement, Some(&stranger));
        assert_eq!(
            check_envelope(&rule, &pinned(), &layer, &bytes),
            Err(Refusal::UnknownKey { rule: 0 })
        );
        let (layer, bytes) = envelope(&statement, None);
        assert_eq!(
            check_envelope(&rule, &pinned(), &layer, &bytes),
            Err(Refusal::Unsigned)
        );
        // A signature over the bare payload, not its PAE, does not verify.
        let mut wire: serde_json::Value =
            serde_json::from_slice(&envelope(&statement, None).1).unwrap();
        wire["signatures"] =
            serde_json::json!([{"sig": release.sign(&statement).unwrap().to_base64()}]);
        let bytes = serde_json::to_vec(&wire).unwrap();
        let layer = Layer {
            digest: format!("sha256:{}", sha256_hex(&bytes)).parse().unwrap(),
            ..layer
        };
        assert_eq!(
            check_envelope(&rule, &pinned(), &layer, &bytes),
            Err(Refusal::UnknownKey { rule: 0 })
        );
    }
}
