//! Manifest media types and the little of a manifest's JSON that tagpin reads.
//!
//! A tag may point at a single-platform image manifest or at an index (a multi-arch list of
//! platform manifests), in OCI or Docker flavour. The verifier needs an index's children
//! (CRI-O may report a platform digest as a pod's imageID) and a manifest's config digest
//! (some runtimes report that instead). Schema 1 manifests are refused: their digests are
//! not stable across registries, so pinning them would pin nothing.

use serde::Deserialize;

use crate::reference::Digest;

pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub(crate) const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
const DOCKER_SCHEMA1: &str = "application/vnd.docker.distribution.manifest.v1+json";
const DOCKER_SCHEMA1_SIGNED: &str = "application/vnd.docker.distribution.manifest.v1+prettyjws";

/// Sent on every manifest request. Without the two list types a distribution registry
/// answers a multi-arch tag with the digest of its linux/amd64 child, and tagpin would pin
/// every other platform to the wrong image.
pub(crate) const ACCEPT_ALL: &str = "application/vnd.oci.image.index.v1+json, \
application/vnd.oci.image.manifest.v1+json, \
application/vnd.docker.distribution.manifest.list.v2+json, \
application/vnd.docker.distribution.manifest.v2+json";

/// The spec's suggested upper bound on a manifest a client must accept (4 MiB).
pub(crate) const MAX_MANIFEST_BYTES: usize = 4 * 1024 * 1024;

pub use crate::resolution::ManifestKind;

/// Why a media type is not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum MediaProblem {
    #[error("{}", schema1_message())]
    Schema1,
    #[error("{}", unsupported_message(.0))]
    Unsupported(String),
}

/// Why a manifest's bytes are not a manifest tagpin can pin. The caller names the image and
/// the registry.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ManifestParseError {
    /// Not JSON, or not a manifest's shape. serde's error is kept for its line and column,
    /// but not as a source: its own words quote the registry's answer, which is never shown.
    #[error("manifest: {}", crate::bounded::json_problem(.0))]
    NotJson(serde_json::Error),
    #[error(transparent)]
    Media(#[from] MediaProblem),
    #[error("manifest lists a bad digest: {0}")]
    BadDigest(#[source] crate::reference::ParseError),
}

/// Classifies a `Content-Type` (parameters such as `; charset=utf-8` ignored).
pub(crate) fn classify(media_type: &str) -> Result<ManifestKind, MediaProblem> {
    let bare = media_type.split(';').next().unwrap_or("").trim();
    match bare {
        OCI_INDEX | DOCKER_LIST => Ok(ManifestKind::Index),
        OCI_MANIFEST | DOCKER_MANIFEST => Ok(ManifestKind::Image),
        DOCKER_SCHEMA1 | DOCKER_SCHEMA1_SIGNED => Err(MediaProblem::Schema1),
        other => Err(MediaProblem::Unsupported(other.to_string())),
    }
}

/// A platform manifest listed in an index.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct IndexChild {
    pub digest: Digest,
    pub media_type: String,
    /// `os/architecture[/variant]`, when the index says.
    pub platform: Option<String>,
}

/// The parts of a manifest tagpin uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedManifest {
    pub kind: ManifestKind,
    pub media_type: String,
    /// Platform manifests, for an index.
    pub children: Vec<IndexChild>,
    /// The image config blob's digest, for an image manifest.
    pub config: Option<Digest>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawManifest {
    #[serde(default)]
    schema_version: Option<u32>,
    #[serde(default)]
    media_type: Option<String>,
    #[serde(default)]
    manifests: Option<Vec<RawDescriptor>>,
    #[serde(default)]
    config: Option<RawDescriptor>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawDescriptor {
    digest: String,
    #[serde(default)]
    media_type: Option<String>,
    #[serde(default)]
    platform: Option<RawPlatform>,
}

#[derive(Deserialize)]
struct RawPlatform {
    os: String,
    architecture: String,
    #[serde(default)]
    variant: Option<String>,
}

/// Parses manifest bytes. The body's own `mediaType` wins over the `Content-Type` header;
/// when neither says (older OCI manifests omit it), the shape decides.
pub(crate) fn parse_manifest(
    bytes: &[u8],
    content_type: Option<&str>,
) -> Result<ParsedManifest, ManifestParseError> {
    let raw: RawManifest = serde_json::from_slice(bytes).map_err(ManifestParseError::NotJson)?;
    if raw.schema_version == Some(1) {
        return Err(MediaProblem::Schema1.into());
    }
    let media_type = raw
        .media_type
        .clone()
        .or_else(|| content_type.map(str::to_string))
        .unwrap_or_else(|| {
            if raw.manifests.is_some() {
                OCI_INDEX.to_string()
            } else {
                OCI_MANIFEST.to_string()
            }
        });
    let kind = classify(&media_type)?;
    let mut children = Vec::new();
    for d in raw.manifests.unwrap_or_default() {
        children.push(IndexChild {
            digest: parse_digest(&d.digest)?,
            media_type: d.media_type.unwrap_or_default(),
            platform: d.platform.map(|p| match p.variant {
                Some(v) if !v.is_empty() => format!("{}/{}/{}", p.os, p.architecture, v),
                _ => format!("{}/{}", p.os, p.architecture),
            }),
        });
    }
    let config = match raw.config {
        Some(d) => Some(parse_digest(&d.digest)?),
        None => None,
    };
    Ok(ParsedManifest {
        kind,
        media_type: media_type
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_string(),
        children,
        config,
    })
}

fn parse_digest(s: &str) -> Result<Digest, ManifestParseError> {
    Digest::parse(s).map_err(ManifestParseError::BadDigest)
}

/// Shared wording, so the CLI and tests see one message for schema 1 wherever it is caught.
/// `unsupported manifest media type "application/x-custom"`: the type is quoted only when it
/// reads as a media type (`type/subtype`, at most 127 characters of the token characters
/// RFC 6838 allows): the header or body it came from is the registry's free text.
pub(crate) fn unsupported_message(media_type: &str) -> String {
    let token = |part: &str| {
        !part.is_empty()
            && part
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(&b))
    };
    let reads_as_media_type = media_type.len() <= 127
        && media_type
            .split_once('/')
            .is_some_and(|(kind, sub)| token(kind) && token(sub));
    match reads_as_media_type {
        true => format!("unsupported manifest media type {media_type:?}"),
        false => "unsupported manifest media type (not a media type; not quoted)".to_string(),
    }
}

pub(crate) fn schema1_message() -> String {
    "the registry only serves a Docker schema 1 manifest, whose digest cannot be pinned; \
     push the image again with a current client"
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const H1: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
    const H2: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";

    #[test]
    fn oci_index_lists_its_platform_children() {
        let body = format!(
            r#"{{"schemaVersion":2,"mediaType":"{OCI_INDEX}","manifests":[
            {{"mediaType":"{OCI_MANIFEST}","digest":"{H1}","size":1,"platform":{{"os":"linux","architecture":"amd64"}}}},
            {{"mediaType":"{OCI_MANIFEST}","digest":"{H2}","size":1,"platform":{{"os":"linux","architecture":"arm","variant":"v7"}}}}]}}"#
        );
        let m = parse_manifest(body.as_bytes(), None).unwrap();
        assert_eq!(m.kind, ManifestKind::Index);
        assert_eq!(m.children.len(), 2);
        assert_eq!(m.children[0].digest.to_string(), H1);
        assert_eq!(m.children[1].platform.as_deref(), Some("linux/arm/v7"));
    }

    #[test]
    fn image_manifest_exposes_its_config_digest() {
        let body = format!(
            r#"{{"schemaVersion":2,"mediaType":"{DOCKER_MANIFEST}","config":{{"digest":"{H1}","size":2}},"layers":[]}}"#
        );
        let m = parse_manifest(body.as_bytes(), None).unwrap();
        assert_eq!(m.kind, ManifestKind::Image);
        assert_eq!(m.config.unwrap().to_string(), H1);
    }

    #[test]
    fn manifest_without_media_type_uses_the_content_type_then_its_shape() {
        let body = format!(r#"{{"schemaVersion":2,"manifests":[{{"digest":"{H1}"}}]}}"#);
        assert_eq!(
            parse_manifest(body.as_bytes(), Some(DOCKER_LIST))
                .unwrap()
                .media_type,
            DOCKER_LIST
        );
        assert_eq!(
            parse_manifest(body.as_bytes(), None).unwrap().kind,
            ManifestKind::Index
        );
    }

    #[test]
    fn schema1_is_refused_by_body_or_content_type() {
        let err = parse_manifest(br#"{"schemaVersion":1,"name":"a","tag":"b"}"#, None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("schema 1"), "{err}");
        assert_eq!(
            classify("application/vnd.docker.distribution.manifest.v1+prettyjws"),
            Err(MediaProblem::Schema1)
        );
    }

    #[test]
    fn content_type_parameters_are_ignored() {
        assert_eq!(
            classify("application/vnd.oci.image.index.v1+json; charset=utf-8"),
            Ok(ManifestKind::Index)
        );
        assert!(matches!(
            classify("text/html"),
            Err(MediaProblem::Unsupported(_))
        ));
    }

    #[test]
    fn a_bad_child_digest_is_an_error_not_a_silent_skip() {
        let body = r#"{"schemaVersion":2,"manifests":[{"digest":"sha256:abc"}]}"#;
        assert!(parse_manifest(body.as_bytes(), None).is_err());
    }
}
