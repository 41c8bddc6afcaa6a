//! When the registry says a digest was built: the `org.opencontainers.image.created`
//! annotation of a manifest or index, and the image config's `created`. Pure: bytes in,
//! times out; [`super::fetch`] fetches the bytes.

use serde::Deserialize;

use super::{Born, Source};
use crate::reference::Digest;
use crate::registry::media::{parse_manifest, IndexChild, ManifestParseError};

/// The OCI annotation a builder sets to the build time (RFC 3339).
pub(crate) const CREATED_ANNOTATION: &str = "org.opencontainers.image.created";

/// Before this (2000-01-01), a `created` is a reproducible build's placeholder, not a time: ko,
/// Bazel's rules_oci and Nix write the Unix epoch so the same source gives the same digest.
pub(crate) const EARLIEST_CREDIBLE: i64 = 946_684_800;

/// Why a time the registry gave is not used (the digest then counts from when tagpin first saw
/// it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimeProblem {
    #[error("{text:?} is not an RFC 3339 time")]
    Unparsable { text: String },
    #[error("{text:?} is in the future")]
    Future { text: String },
    #[error("{text:?} is a reproducible build's placeholder, not a build time")]
    Placeholder { text: String },
}

/// Reads `text` as an RFC 3339 time (Unix seconds), refusing a time after `now` and one
/// before [`EARLIEST_CREDIBLE`]. A few seconds of clock skew between the builder and tagpin
/// are allowed.
pub(crate) fn parse_time(text: &str, now: i64) -> Result<i64, TimeProblem> {
    /// How far a builder's clock may run ahead of tagpin's.
    const SKEW: i64 = 60;
    let owned = || text.chars().take(64).collect::<String>();
    let at = text
        .trim()
        .parse::<k8s_openapi::jiff::Timestamp>()
        .map_err(|_| TimeProblem::Unparsable { text: owned() })?
        .as_second();
    if at > now.saturating_add(SKEW) {
        return Err(TimeProblem::Future { text: owned() });
    }
    if at < EARLIEST_CREDIBLE {
        return Err(TimeProblem::Placeholder { text: owned() });
    }
    Ok(at.min(now))
}

/// What a manifest or index says of its age, and where to look next.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct ManifestTimes {
    /// Its `org.opencontainers.image.created` annotation, as written.
    pub annotation: Option<String>,
    /// An image manifest's config blob.
    pub config: Option<Digest>,
    /// An index's platform manifest to look into ([`pick_child`]).
    pub child: Option<Digest>,
}

#[derive(Deserialize, Default)]
struct Annotated {
    #[serde(default)]
    annotations: Option<std::collections::BTreeMap<String, serde_json::Value>>,
}

/// Reads a manifest's (or an index's) annotation, config and chosen child. The bytes were
/// checked against their digest by the caller.
pub(crate) fn read_manifest(bytes: &[u8]) -> Result<ManifestTimes, ManifestParseError> {
    let parsed = parse_manifest(bytes, None)?;
    let annotated: Annotated = serde_json::from_slice(bytes).unwrap_or_default();
    let annotation = annotated
        .annotations
        .and_then(|a| a.get(CREATED_ANNOTATION).cloned())
        .and_then(|v| v.as_str().map(str::to_string));
    Ok(ManifestTimes {
        annotation,
        config: parsed.config,
        child: pick_child(&parsed.children),
    })
}

/// The platform manifest of an index whose age stands for the index's: `linux/amd64` when
/// listed (tagpin pins the index; the platform a cluster pulls is not known here), else the
/// first that is a platform (not buildx's `unknown/unknown` attestation manifests), else the
/// first.
pub(crate) fn pick_child(children: &[IndexChild]) -> Option<Digest> {
    children
        .iter()
        .find(|c| c.platform.as_deref() == Some("linux/amd64"))
        .or_else(|| {
            children.iter().find(|c| {
                c.platform
                    .as_deref()
                    .is_some_and(|p| p != "unknown/unknown")
            })
        })
        .or_else(|| children.first())
        .map(|c| c.digest.clone())
}

#[derive(Deserialize)]
struct Config {
    #[serde(default)]
    created: Option<serde_json::Value>,
}

/// An image config's `created`, as written; `None` when it has none (or is not a JSON object:
/// an artifact's config).
pub(crate) fn config_created(bytes: &[u8]) -> Option<String> {
    let config: Config = serde_json::from_slice(bytes).ok()?;
    config.created?.as_str().map(str::to_string)
}

/// The birth the registry's times give: the latest credible one, so a stale annotation cannot
/// make a new digest look old. `None` when none is usable; each time refused is returned with
/// why, for the log.
pub fn latest(found: &[(Source, String)], now: i64) -> (Option<Born>, Vec<TimeProblem>) {
    let mut best: Option<Born> = None;
    let mut problems = Vec::new();
    for (source, text) in found {
        match parse_time(text, now) {
            Ok(at) if best.is_none_or(|b| at > b.at) => {
                best = Some(Born {
                    at,
                    source: *source,
                })
            }
            Ok(_) => {}
            Err(problem) => problems.push(problem),
        }
    }
    (best, problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_796_000_000;

    fn digest(n: u8) -> Digest {
        format!("sha256:{}", format!("{n:02x}").repeat(32))
            .parse()
            .unwrap()
    }

    #[test]
    fn times_are_read_as_rfc_3339_and_refused_in_the_future_or_at_the_epoch() {
        let at = |text: &str| parse_time(text, NOW);
        assert_eq!(at(&super::super::rfc3339(NOW - 120)), Ok(NOW - 120));
        // 2026-11-30T00:53:20Z is NOW: fractions are dropped, offsets honoured.
        assert_eq!(at("2026-11-29T23:53:20.123456789Z"), Ok(NOW - 3600));
        assert_eq!(at("2026-11-30T00:53:20+01:00"), Ok(NOW - 3600));
        // A builder a few seconds ahead reads as now.
        assert_eq!(at(&super::super::rfc3339(NOW + 30)), Ok(NOW));
        assert!(matches!(
            at(&super::super::rfc3339(NOW + 3600)),
            Err(TimeProblem::Future { .. })
        ));
        assert!(matches!(
            at("1970-01-01T00:00:00Z"),
            Err(TimeProblem::Placeholder { .. })
        ));
        assert!(matches!(
            at("yesterday"),
            Err(TimeProblem::Unparsable { .. })
        ));
        assert!(matches!(at(""), Err(TimeProblem::Unparsable { .. })));
    }

    #[test]
    fn the_latest_credible_time_wins() {
        let found = [
            (Source::Annotation, super::super::rfc3339(NOW - 86_400)),
            (Source::Created, super::super::rfc3339(NOW - 60)),
            (Source::Created, "soon".to_string()),
        ];
        let (born, problems) = latest(&found, NOW);
        assert_eq!(
            born,
            Some(Born {
                at: NOW - 60,
                source: Source::Created
            })
        );
        assert_eq!(problems.len(), 1);
        assert_eq!(latest(&[], NOW), (None, Vec::new()));
    }

    #[test]
    fn a_manifest_gives_its_annotation_and_config_and_an_index_its_platform_child() {
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": digest(1).to_string(), "size": 2},
            "layers": [],
            "annotations": {CREATED_ANNOTATION: "2026-11-29T09:33:20Z"},
        });
        let read = read_manifest(&serde_json::to_vec(&manifest).unwrap()).unwrap();
        assert_eq!(read.annotation.as_deref(), Some("2026-11-29T09:33:20Z"));
        assert_eq!(read.config, Some(digest(1)));
        assert_eq!(read.child, None);

        let child = |n: u8, os: &str, arch: &str| {
            serde_json::json!({"mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": digest(n).to_string(), "size": 1, "platform": {"os": os, "architecture": arch}})
        };
        let index = |children: Vec<serde_json::Value>| {
            let index = serde_json::json!({"schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": children});
            read_manifest(&serde_json::to_vec(&index).unwrap()).unwrap()
        };
        let read = index(vec![child(2, "linux", "arm64"), child(3, "linux", "amd64")]);
        assert_eq!((read.child, read.annotation), (Some(digest(3)), None));
        let read = index(vec![
            child(4, "unknown", "unknown"),
            child(5, "linux", "arm64"),
        ]);
        assert_eq!(read.child, Some(digest(5)));
        assert_eq!(
            index(vec![child(6, "unknown", "unknown")]).child,
            Some(digest(6))
        );
        assert!(read_manifest(b"not json").is_err());
    }

    #[test]
    fn a_config_gives_its_created() {
        assert_eq!(
            config_created(br#"{"created":"2026-11-29T09:33:20Z","architecture":"amd64"}"#),
            Some("2026-11-29T09:33:20Z".to_string())
        );
        assert_eq!(config_created(br#"{"architecture":"amd64"}"#), None);
        assert_eq!(config_created(br#"{"created":7}"#), None);
        assert_eq!(config_created(b"[]"), None);
    }
}
