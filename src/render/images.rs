//! kustomize's `images:` transform: which container images an entry replaces, and with what.
//!
//! An entry `{name, newName, newTag, digest}` applies to every image of `containers` and
//! `initContainers` (not `ephemeralContainers`) whose name, without tag or digest, is exactly
//! `name`. It replaces the name with `newName`, and the tag and digest together with `newTag`
//! and `digest` (a `newTag` alone drops the digest, a `digest` alone drops the tag). Entries
//! apply one after the other, so an entry can match what an earlier `newName` wrote. This
//! mirrors kustomize's `imagetag` filter (`IsImageMatched`, `Split`, the updater), except that
//! `name` is compared as text where kustomize compiles it into a regular expression.

use crate::manifest::yaml::{Document, NodeId};
use crate::manifest::ManifestError;

/// One entry of a kustomization's `images:` list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ImagesEntry {
    pub name: String,
    pub new_name: Option<String>,
    pub new_tag: Option<String>,
    pub digest: Option<String>,
    /// 1-based position of the entry in its kustomization.
    pub line: usize,
    pub column: usize,
}

impl ImagesEntry {
    /// Reads an entry; `None` for one without `name`, which matches nothing.
    pub fn read(
        document: &Document<'_>,
        entry: NodeId,
    ) -> Result<Option<ImagesEntry>, ManifestError> {
        let Some(name) = document.get_str(entry, "name")? else {
            return Ok(None);
        };
        let (line, column) = document
            .node(document.resolve(entry))
            .map_or((0, 0), |node| (node.line, node.column));
        let text = |key| -> Result<Option<String>, ManifestError> {
            Ok(document.get_str(entry, key)?.map(str::to_string))
        };
        Ok(Some(ImagesEntry {
            name: name.to_string(),
            new_name: text("newName")?,
            new_tag: text("newTag")?,
            digest: text("digest")?,
            line,
            column,
        }))
    }

    /// The image kustomize writes in place of `image`, if this entry applies to it.
    pub fn apply(&self, image: &str) -> Option<String> {
        if !matches(image, &self.name) {
            return None;
        }
        let (name, tag, digest) = split(image);
        let name = self.new_name.as_deref().unwrap_or(name);
        let (tag, digest) = match (self.new_tag.as_deref(), self.digest.as_deref()) {
            (Some(tag), Some(digest)) => (tag, digest),
            (Some(tag), None) => (tag, ""),
            (None, Some(digest)) => ("", digest),
            (None, None) => (tag, digest),
        };
        let mut out = name.to_string();
        if !tag.is_empty() {
            out.push(':');
            out.push_str(tag);
        }
        if !digest.is_empty() {
            out.push('@');
            out.push_str(digest);
        }
        Some(out)
    }
}

/// Whether `image` is `name` followed by nothing, a `:tag`, an `@algorithm:digest`, or both.
fn matches(image: &str, name: &str) -> bool {
    let Some(rest) = image.strip_prefix(name) else {
        return false;
    };
    let tag_char = |c: char| c.is_ascii_alphanumeric() || "_.{}-".contains(c);
    let (tag, digest) = match rest.find('@') {
        Some(at) => (&rest[..at], Some(&rest[at + 1..])),
        None => (rest, None),
    };
    let tag_ok = tag.is_empty()
        || tag
            .strip_prefix(':')
            .is_some_and(|t| t.chars().all(tag_char));
    let digest_ok = digest.is_none_or(|d| match d.split_once(':') {
        Some((algorithm, hex)) => {
            algorithm.starts_with(|c: char| c.is_ascii_alphabetic())
                && algorithm.chars().all(|c| c.is_ascii_alphanumeric())
                && hex.chars().all(tag_char)
        }
        None => false,
    });
    tag_ok && digest_ok
}

/// Name, tag and digest of an image, split as kustomize splits them: the first `@` or `:`
/// after the first `/` ends the name (so a registry port is part of the name).
fn split(image: &str) -> (&str, &str, &str) {
    let start = image.find('/').filter(|&i| i > 0).unwrap_or(0);
    let search = &image[start..];
    let at = search.find('@').map(|i| i + start);
    let colon = search.find(':').map(|i| i + start);
    match (colon, at) {
        (_, Some(at)) if colon.is_none_or(|c| at < c) => (&image[..at], "", &image[at + 1..]),
        (Some(colon), Some(at)) => (&image[..colon], &image[colon + 1..at], &image[at + 1..]),
        (Some(colon), None) => (&image[..colon], &image[colon + 1..], ""),
        _ => (image, "", ""),
    }
}

/// Reads the `images:` entries of a kustomization's root mapping.
pub(super) fn read_all(
    document: &Document<'_>,
    root: NodeId,
) -> Result<Vec<ImagesEntry>, ManifestError> {
    let Some(images) = document.get(root, "images")? else {
        return Ok(Vec::new());
    };
    let mut entries = Vec::new();
    for &item in document.items(images) {
        entries.extend(ImagesEntry::read(document, item)?);
    }
    Ok(entries)
}

/// For tests of this module and its callers: the entries of a kustomization text.
#[cfg(test)]
pub(super) fn entries_of(text: &str) -> Vec<ImagesEntry> {
    let path = std::path::Path::new("kustomization.yaml");
    let document = crate::manifest::yaml::documents(path, text)
        .next()
        .and_then(Result::ok)
        .expect("one document");
    let root = document.root().expect("a root");
    read_all(&document, root).expect("readable")
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";

    fn entry(
        name: &str,
        new_name: Option<&str>,
        tag: Option<&str>,
        digest: Option<&str>,
    ) -> ImagesEntry {
        ImagesEntry {
            name: name.into(),
            new_name: new_name.map(Into::into),
            new_tag: tag.map(Into::into),
            digest: digest.map(Into::into),
            line: 1,
            column: 1,
        }
    }

    #[test]
    fn the_name_must_match_without_tag_or_digest() {
        let e = entry("ghcr.io/acme/web", None, Some("1.4"), None);
        assert_eq!(
            e.apply("ghcr.io/acme/web").as_deref(),
            Some("ghcr.io/acme/web:1.4")
        );
        assert_eq!(
            e.apply("ghcr.io/acme/web:1.3").as_deref(),
            Some("ghcr.io/acme/web:1.4")
        );
        assert_eq!(
            e.apply(&format!("ghcr.io/acme/web:1.3@{D}")).as_deref(),
            Some("ghcr.io/acme/web:1.4")
        );
        assert_eq!(e.apply("ghcr.io/acme/web-api:1.3"), None);
        assert_eq!(e.apply("ghcr.io/acme/we"), None);
        // kustomize compares names as written: no docker.io/library normalization.
        assert_eq!(
            entry("nginx", None, Some("1"), None).apply("docker.io/library/nginx"),
            None
        );
    }

    #[test]
    fn tag_and_digest_replace_both_and_each_alone_drops_the_other() {
        let image = format!("web:1.3@{D}");
        assert_eq!(
            entry("web", None, Some("1.4"), Some("sha256:ab"))
                .apply(&image)
                .as_deref(),
            Some("web:1.4@sha256:ab")
        );
        assert_eq!(
            entry("web", None, None, Some("sha256:ab"))
                .apply(&image)
                .as_deref(),
            Some("web@sha256:ab")
        );
        assert_eq!(
            entry("web", None, Some("2"), None).apply(&image).as_deref(),
            Some("web:2")
        );
        assert_eq!(
            entry("web", Some("mirror/web"), None, None).apply(&image),
            Some(format!("mirror/web:1.3@{D}"))
        );
    }

    #[test]
    fn a_registry_port_is_part_of_the_name() {
        let e = entry("127.0.0.1:5000/sample/web", None, Some("1.0"), Some(D));
        assert_eq!(
            e.apply("127.0.0.1:5000/sample/web:0.9"),
            Some(format!("127.0.0.1:5000/sample/web:1.0@{D}"))
        );
        assert_eq!(
            split("127.0.0.1:5000/sample/web"),
            ("127.0.0.1:5000/sample/web", "", "")
        );
        assert_eq!(split("nginx@sha256:1:2"), ("nginx", "", "sha256:1:2"));
    }

    #[test]
    fn entries_are_read_with_their_position_and_values_as_written() {
        let entries = entries_of(
            "images:\n- name: web\n  newTag: 1.10\n  digest: sha256:ab\n- {newTag: '1'}\n- name: x\n  newName: y\n",
        );
        assert_eq!(
            entries,
            [
                ImagesEntry {
                    line: 2,
                    column: 3,
                    ..entry("web", None, Some("1.10"), Some("sha256:ab"))
                },
                ImagesEntry {
                    line: 6,
                    column: 3,
                    ..entry("x", Some("y"), None, None)
                },
            ]
        );
    }
}
