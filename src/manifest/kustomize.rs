//! What tagpin reads from kustomizations: their `images:` entries and their `namespace:`.
//!
//! A kustomization pins an image in an `images:` entry (`name`, optional `newName`, `newTag`,
//! `digest`) rather than in the manifest: tagpin pins such an entry by replacing its `digest:`
//! value, or by inserting a `digest:` key where the entry has none. kustomize also sets
//! `namespace:` on every resource it builds, so a Deployment that names no namespace runs in the
//! namespace of the kustomization beside it (or above it), which tagpin needs to find the live
//! workload ([`KustomizeNamespaces`]). The nearest kustomization in the same or a parent
//! directory wins; overlays elsewhere that reuse the directory as a base are not followed here
//! (`plan` and `sync` name workloads as written). `tagpin verify` renders the overlays
//! themselves, prefixes and images included: see [`crate::render`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::error::ManifestError;
use super::field::{string_target, Collector, ImageField, Origin, SkipReason, Target};
use super::helm::HelmSource;
use super::yaml::{Document, NodeId, NodeKind, Style};

/// File names kustomize reads as a kustomization, in the order it looks for them.
pub(crate) const KUSTOMIZATION_NAMES: [&str; 3] =
    ["kustomization.yaml", "kustomization.yml", "Kustomization"];

/// Whether `path` is named like a kustomization file.
pub(crate) fn is_kustomization_file(path: &Path) -> bool {
    path.file_name()
        .and_then(|name| name.to_str())
        .is_some_and(|name| KUSTOMIZATION_NAMES.contains(&name))
}

/// Kustomize's own `kind`s (and the files it reads without one) carry an `images:` list.
pub(crate) fn is_kustomization(
    kind: Option<&str>,
    api_version: Option<&str>,
    file_named: bool,
) -> bool {
    let kustomize_api = api_version.is_none_or(|api| api.starts_with("kustomize.config.k8s.io/"));
    match kind {
        Some("Kustomization" | "Component") => kustomize_api,
        Some(_) => false,
        None => file_named && kustomize_api,
    }
}

/// Collects the `images:` entries of a kustomization; `index` is the document's number in its
/// file.
pub(super) fn scan_images(
    document: &Document<'_>,
    root: NodeId,
    index: usize,
    out: &mut Collector,
) -> Result<(), ManifestError> {
    let Some(images) = document.get(root, "images")? else {
        return Ok(());
    };
    for &item in document.items(images) {
        let entry = document.resolve(item);
        let Some(entry_node) = document.node(entry) else {
            continue;
        };
        let mut origin = Origin::KustomizeImage {
            name: String::new(),
            document: index,
            current_digest: None,
            tag: None,
        };
        if !document.is_mapping(entry) {
            out.skip(entry_node, SkipReason::KustomizeEntryNotAMapping, origin);
            continue;
        }
        let Some(name) = document.get_str(entry, "name")? else {
            out.skip(entry_node, SkipReason::KustomizeWithoutName, origin);
            continue;
        };
        origin = Origin::KustomizeImage {
            name: name.to_string(),
            document: index,
            current_digest: None,
            tag: None,
        };
        let new_tag = document.get(entry, "newTag")?;
        let Some((tag_node, tag, tag_target)) = new_tag
            .and_then(|id| document.node(document.resolve(id)))
            .and_then(|node| {
                string_target(node)
                    .ok()
                    .map(|(tag, target)| (node, tag, target))
            })
        else {
            out.skip(entry_node, SkipReason::KustomizeWithoutNewTag, origin);
            continue;
        };
        origin = Origin::KustomizeImage {
            name: name.to_string(),
            document: index,
            current_digest: None,
            tag: Some(tag_target.clone()),
        };
        let image = document.get_str(entry, "newName")?.unwrap_or(name);
        let value = format!("{image}:{tag}");
        let (line, column) = (tag_node.line, tag_node.column);
        match document.get(entry, "digest")? {
            Some(digest) => {
                let Some(digest_node) = document.node(document.resolve(digest)) else {
                    continue;
                };
                match string_target(digest_node) {
                    Ok((current, target)) => {
                        origin = Origin::KustomizeImage {
                            name: name.to_string(),
                            document: index,
                            current_digest: Some(current.to_string()),
                            tag: Some(tag_target),
                        };
                        out.field(ImageField {
                            line,
                            column,
                            value,
                            target,
                            origin,
                        });
                    }
                    Err(reason) => out.skip(digest_node, reason, origin),
                }
            }
            None => match digest_insertion(document, entry) {
                Some(target) => out.field(ImageField {
                    line,
                    column,
                    value,
                    target,
                    origin,
                }),
                None => out.skip(entry_node, SkipReason::KustomizeNoPlaceForDigest, origin),
            },
        }
    }
    Ok(())
}

/// Where a `digest:` key can go in a kustomize entry that has none: after its last value.
fn digest_insertion(document: &Document<'_>, entry: NodeId) -> Option<Target> {
    let node = document.node(entry)?;
    let NodeKind::Mapping { entries, flow } = &node.kind else {
        return None;
    };
    let &(last_key, last_value) = entries.last()?;
    let key = document.node(last_key)?;
    let value = document.node(last_value)?;
    if value.span.is_empty() {
        return None;
    }
    if let NodeKind::Scalar {
        style: Style::Literal | Style::Folded,
        ..
    } = value.kind
    {
        return None;
    }
    if *flow {
        return Some(Target::InsertKustomizeDigest {
            at: value.span.end,
            indent: String::new(),
            flow: true,
        });
    }
    Some(Target::InsertKustomizeDigest {
        at: line_end(document.text(), value.span.end),
        indent: " ".repeat(key.column.saturating_sub(1)),
        flow: false,
    })
}

/// The offset of the line break (`\n`, or the `\r` of `\r\n`) ending the line that contains
/// byte `from`, or the end of the text when that line is the last and has none.
pub(super) fn line_end(text: &str, from: usize) -> usize {
    let bytes = text.as_bytes();
    let Some(newline) = bytes
        .get(from..)
        .and_then(|rest| rest.iter().position(|&b| b == b'\n'))
    else {
        return text.len();
    };
    let at = from + newline;
    if at > from && bytes.get(at - 1) == Some(&b'\r') {
        at - 1
    } else {
        at
    }
}

/// Namespaces set by kustomizations, by the directory they sit in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KustomizeNamespaces {
    by_dir: BTreeMap<PathBuf, String>,
}

impl KustomizeNamespaces {
    /// Records `path` if it is a kustomization with a `namespace:`.
    pub fn add(&mut self, path: &Path, source: &[u8]) {
        if !is_kustomization_file(path) {
            return;
        }
        let Ok(value) = serde_yaml::from_slice::<serde_yaml::Value>(source) else {
            return;
        };
        if let Some(ns) = value.get("namespace").and_then(|n| n.as_str()) {
            let dir = path.parent().unwrap_or(Path::new("")).to_path_buf();
            self.by_dir.insert(dir, ns.to_string());
        }
    }

    /// The namespace of the nearest kustomization at or above `path`'s directory.
    pub fn for_file(&self, path: &Path) -> Option<&str> {
        path.ancestors()
            .skip(1)
            .find_map(|dir| self.by_dir.get(dir))
            .map(String::as_str)
    }

    /// Fills the namespace of container fields, and of HelmReleases and Applications holding
    /// Helm values, from `path` that name none.
    pub fn fill(&self, path: &Path, fields: &mut [ImageField]) {
        let Some(ns) = self.for_file(path) else {
            return;
        };
        for field in fields {
            let namespace = match &mut field.origin {
                Origin::Container { workload, .. } => &mut workload.namespace,
                Origin::HelmImage(image) => match &mut image.source {
                    HelmSource::HelmRelease { namespace, .. }
                    | HelmSource::Application { namespace, .. } => namespace,
                    HelmSource::ValuesFile { .. } => continue,
                },
                Origin::KustomizeImage { .. } => continue,
            };
            if namespace.is_none() {
                *namespace = Some(ns.to_string());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::scan::fixtures::*;

    /// A digest insertion at byte `at`, a block entry's (at `indent`) or a flow one's.
    fn insertion(at: usize, indent: &str, flow: bool) -> Target {
        Target::InsertKustomizeDigest {
            at,
            indent: indent.into(),
            flow,
        }
    }

    /// Where the first image of the kustomization `text` is written.
    fn first_target(text: &str) -> Target {
        scan_str("kustomization.yaml", text).fields[0]
            .target
            .clone()
    }

    #[test]
    fn kustomization_digest_key_is_the_target_and_its_value_is_exposed() {
        let text = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nimages:\n- name: nginx\n  newTag: \"1.27\"\n  digest: sha256:old\n";
        let outcome = scan_str("any-name.yaml", text);
        let field = &outcome.fields[0];
        assert_eq!(field.value, "nginx:1.27");
        assert_written_at(text, field, "sha256:old", (5, 11));
        let Origin::KustomizeImage {
            name,
            document: 0,
            current_digest: Some(current),
            tag: Some(Target::Scalar { span, style }),
        } = &field.origin
        else {
            panic!("{:?}", field.origin);
        };
        assert_eq!((name.as_str(), current.as_str()), ("nginx", "sha256:old"));
        // The newTag value too, for a policy that moves the tag.
        assert_eq!(
            (&text[span.clone()], *style),
            ("\"1.27\"", crate::manifest::ScalarStyle::DoubleQuoted)
        );
        assert_eq!(outcome.kubernetes_documents, 1);
    }

    #[test]
    fn kustomization_new_name_replaces_the_name_in_the_value() {
        let text =
            "images:\n- name: nginx\n  newName: registry.example.com/nginx\n  newTag: '1.27'\n";
        let outcome = scan_str("base/kustomization.yaml", text);
        assert_eq!(outcome.fields[0].value, "registry.example.com/nginx:1.27");
    }

    #[test]
    fn kustomization_file_is_recognized_by_name_without_kind() {
        for name in ["kustomization.yaml", "kustomization.yml", "Kustomization"] {
            let outcome = scan_str(name, "images:\n- name: a\n  newTag: b\n");
            assert_eq!(outcome.fields.len(), 1, "{name}");
        }
        assert_eq!(
            images_and_objects("other.yaml", "images:\n- name: a\n  newTag: b\n"),
            (0, 0)
        );
    }

    #[test]
    fn flux_kustomization_is_kubernetes_but_not_a_kustomize_file() {
        let text = "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nimages:\n- name: a\n  newTag: b\n";
        assert_eq!(images_and_objects("kustomization.yaml", text), (0, 1));
    }

    #[test]
    fn kustomization_block_entry_without_digest_gets_an_insertion_at_its_last_line_end() {
        let text = "images:\n  - name: nginx\n    newTag: \"1.27\"   # pinned by tagpin\n  - name: redis\n    newTag: '7'";
        let outcome = scan_str("kustomization.yaml", text);
        let targets: Vec<Target> = outcome.fields.into_iter().map(|f| f.target).collect();
        let first_line_end = text
            .find("   # pinned")
            .map(|i| i + "   # pinned by tagpin".len());
        assert_eq!(
            targets,
            [
                insertion(first_line_end.unwrap_or(0), "    ", false),
                insertion(text.len(), "    ", false),
            ]
        );
    }

    #[test]
    fn kustomization_insertion_point_is_before_a_crlf() {
        let text = "images:\r\n- name: nginx\r\n  newTag: \"1.27\"\r\n";
        assert_eq!(first_target(text), insertion(text.len() - 2, "  ", false));
    }

    #[test]
    fn kustomization_flow_entry_without_digest_gets_an_insertion_after_its_last_value() {
        let text = "images: [{name: nginx, newTag: \"1.27\" }]\n";
        let at = text.find(" }").unwrap_or(0);
        assert_eq!(first_target(text), insertion(at, "", true));
    }

    #[test]
    fn kustomization_entries_without_new_tag_or_name_are_skipped() {
        let text = "images:\n- name: nginx\n  digest: sha256:abc\n- newTag: '1'\n- just-a-string\n";
        assert_eq!(
            skip_reasons("kustomization.yaml", text),
            [
                SkipReason::KustomizeWithoutNewTag,
                SkipReason::KustomizeWithoutName,
                SkipReason::KustomizeEntryNotAMapping,
            ]
        );
    }

    #[test]
    fn kustomization_entry_ending_in_an_empty_value_has_no_place_for_a_digest() {
        let text = "images:\n- name: nginx\n  newTag: '1'\n  newName:\n";
        let outcome = scan_str("kustomization.yaml", text);
        assert!(outcome.fields.is_empty());
        assert_eq!(
            outcome.skipped[0].reason,
            SkipReason::KustomizeNoPlaceForDigest
        );
    }

    #[test]
    fn the_nearest_kustomization_namespace_applies() {
        let mut k = KustomizeNamespaces::default();
        k.add(
            Path::new("apps/kustomization.yaml"),
            b"namespace: shop\nresources: [web]\n",
        );
        k.add(
            Path::new("apps/admin/kustomization.yml"),
            b"namespace: admin\n",
        );
        k.add(
            Path::new("apps/web/deployment.yaml"),
            b"namespace: not-a-kustomization\n",
        );
        assert_eq!(
            k.for_file(Path::new("apps/web/deployment.yaml")),
            Some("shop")
        );
        assert_eq!(
            k.for_file(Path::new("apps/admin/deployment.yaml")),
            Some("admin")
        );
        assert_eq!(k.for_file(Path::new("other/deployment.yaml")), None);
    }

    #[test]
    fn a_manifest_namespace_is_never_overridden() {
        let mut k = KustomizeNamespaces::default();
        k.add(Path::new("kustomization.yaml"), b"namespace: shop\n");
        let text = b"apiVersion: v1\nkind: Pod\nmetadata: {name: a, namespace: own}\nspec:\n  containers: [{name: c, image: x:1}]\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: b}\nspec:\n  containers: [{name: c, image: y:1}]\n";
        let mut fields = crate::manifest::scan(Path::new("pods.yaml"), text)
            .unwrap()
            .fields;
        k.fill(Path::new("pods.yaml"), &mut fields);
        let namespaces: Vec<Option<String>> = fields
            .iter()
            .map(|f| match &f.origin {
                Origin::Container { workload, .. } => workload.namespace.clone(),
                Origin::KustomizeImage { .. } | Origin::HelmImage(_) => None,
            })
            .collect();
        assert_eq!(
            namespaces,
            vec![Some("own".to_string()), Some("shop".to_string())]
        );
    }
}
