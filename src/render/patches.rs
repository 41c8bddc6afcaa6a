//! Whether a patch or a replacement may change what the renderer reports.
//!
//! tagpin does not apply patches: it only needs to know that a patch leaves alone the three
//! things a render reports, the images, the list of containers, and each object's name and
//! namespace. When in doubt the answer is "it may change them", and the kustomization is
//! reported as not rendered rather than guessed. What counts:
//!
//! - a strategic-merge patch that has a key `image` or `containers` (`initContainers`,
//!   `ephemeralContainers`) anywhere, or any `$` directive (`$patch: delete` removes a
//!   workload, `$retainKeys` and `$setElementOrder` reshape lists); its `metadata.name` does
//!   not rename the target (kustomize ignores it unless the patch allows a name change, which
//!   is caught by its options, see [`super::kustomization`]);
//! - a JSON 6902 operation (other than `test`) whose `path` or `from` goes through one of those
//!   keys, or to `metadata.name`, `metadata.namespace` or `kind`, or to one of their ancestors
//!   (replacing `/spec/template` replaces the containers);
//! - a replacement writing such a field path.

use std::collections::HashSet;
use std::path::Path;

use crate::manifest::yaml::{self, Document, NodeId};
use crate::workload::WorkloadKind;

/// Keys whose change changes a container image or the set of containers.
const CONTAINER_KEYS: [&str; 4] = [
    "image",
    "containers",
    "initContainers",
    "ephemeralContainers",
];

/// Why a patch (the text of a patch file, or an inline patch) may change an image, the
/// containers, or an object's name or namespace; `None` when it cannot.
pub(super) fn patch_gap(label: &Path, text: &str) -> Option<String> {
    for document in yaml::documents(label, text) {
        let document = match document {
            Ok(document) => document,
            Err(error) => return Some(format!("the patch cannot be read: {error}")),
        };
        let Some(root) = document.root().map(|root| document.resolve(root)) else {
            continue;
        };
        let found = if document.is_mapping(root) {
            strategic_merge_gap(&document, root)
        } else {
            json6902_gap(&document, root)
        };
        if found.is_some() {
            return found;
        }
    }
    None
}

/// Why the replacements in a replacements file may change what a render reports.
pub(super) fn replacements_file_gap(label: &Path, text: &str) -> Option<String> {
    for document in yaml::documents(label, text) {
        let document = match document {
            Ok(document) => document,
            Err(error) => return Some(format!("the replacements cannot be read: {error}")),
        };
        let Some(root) = document.root() else {
            continue;
        };
        let items = document.items(root);
        let found = if items.is_empty() {
            replacement_gap(&document, root)
        } else {
            items
                .iter()
                .find_map(|&item| replacement_gap(&document, item))
        };
        if found.is_some() {
            return found;
        }
    }
    None
}

/// Why one replacement (`source:` and `targets:`) may change what a render reports: one of its
/// targets' `fieldPaths` (dot-separated, `[name=app]` selectors allowed) names such a field.
pub(super) fn replacement_gap(document: &Document<'_>, replacement: NodeId) -> Option<String> {
    let targets = document.get(replacement, "targets").ok().flatten()?;
    for &target in document.items(targets) {
        let Some(paths) = document.get(target, "fieldPaths").ok().flatten() else {
            continue;
        };
        for &path in document.items(paths) {
            let Some((path, _)) = document.scalar(path) else {
                continue;
            };
            let segments: Vec<&str> = path.split('.').collect();
            if let Some(why) = field_gap(&segments) {
                return Some(format!("a replacement writes {path}, which {why}"));
            }
        }
    }
    None
}

/// A strategic-merge patch: any key among [`CONTAINER_KEYS`], or a `$` directive.
fn strategic_merge_gap(document: &Document<'_>, root: NodeId) -> Option<String> {
    let mut pending = vec![root];
    let mut seen = HashSet::new();
    while let Some(node) = pending.pop() {
        let node = document.resolve(node);
        if !seen.insert(node) {
            continue;
        }
        for &(key, value) in document.entries(node) {
            let Some((key, _)) = document.scalar(key) else {
                continue;
            };
            let merge =
                key == "$patch" && document.scalar(value).is_some_and(|(v, _)| v == "merge");
            if key.starts_with('$') && !merge {
                return Some(format!("the patch has the directive `{key}`"));
            }
            if CONTAINER_KEYS.contains(&key) {
                return Some(format!("the patch sets `{key}`"));
            }
            pending.push(value);
        }
        pending.extend(document.items(node));
    }
    None
}

/// A JSON 6902 patch: a list of operations, each with a JSON pointer `path` (and `from`).
fn json6902_gap(document: &Document<'_>, root: NodeId) -> Option<String> {
    for &operation in document.items(root) {
        let op = document
            .get_str(operation, "op")
            .ok()
            .flatten()
            .unwrap_or("");
        if op == "test" {
            continue;
        }
        for key in ["path", "from"] {
            let node = document.get(operation, key).ok().flatten();
            let Some((pointer, _)) = node.and_then(|node| document.scalar(node)) else {
                continue;
            };
            let segments: Vec<&str> = pointer.split('/').skip(1).collect();
            if let Some(why) = field_gap(&segments) {
                return Some(format!("the operation `{op} {pointer}` {why}"));
            }
        }
    }
    None
}

/// Why writing the field at `segments` (from the object's root) may change an image, the
/// containers, or the object's identity.
fn field_gap(segments: &[&str]) -> Option<&'static str> {
    if segments.iter().any(|s| CONTAINER_KEYS.contains(s)) {
        return Some("changes containers or images");
    }
    let identity: [&[&str]; 3] = [&["metadata", "name"], &["metadata", "namespace"], &["kind"]];
    if identity.iter().any(|field| field.starts_with(segments)) {
        return Some("may rename or move the object");
    }
    // The paths of the known kinds include those read in any other kind.
    let holds_containers = WorkloadKind::ALL
        .iter()
        .flat_map(WorkloadKind::pod_spec_paths)
        .any(|path| path.starts_with(segments));
    if holds_containers {
        return Some("may replace the containers");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gap(text: &str) -> Option<String> {
        patch_gap(Path::new("patch.yaml"), text)
    }

    #[test]
    fn a_patch_changing_replicas_or_env_free_fields_is_harmless() {
        assert_eq!(gap("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec: {replicas: 3}\n"), None);
        assert_eq!(gap("- op: replace\n  path: /spec/replicas\n  value: 3\n- op: remove\n  path: /spec/ingress\n"), None);
        // kustomize ignores a patch's metadata.name unless the patch allows a name change.
        assert_eq!(
            gap("kind: Deployment\nmetadata: {name: not-important}\nspec: {replicas: 1}\n"),
            None
        );
        assert_eq!(
            gap("kind: Deployment\n$patch: merge\nspec: {paused: true}\n"),
            None
        );
    }

    #[test]
    fn a_strategic_merge_patch_touching_containers_or_images_is_named() {
        let text = "kind: Deployment\nmetadata: {name: web}\nspec:\n  template:\n    spec:\n      containers:\n      - {name: app, env: [{name: A, value: b}]}\n";
        assert_eq!(gap(text).as_deref(), Some("the patch sets `containers`"));
        assert!(gap("kind: Pod\nspec: {initContainers: []}\n").is_some());
        assert!(gap("kind: Pod\nimage: x\n").is_some());
        assert_eq!(
            gap("kind: Deployment\nmetadata: {name: web}\n$patch: delete\n").as_deref(),
            Some("the patch has the directive `$patch`")
        );
        // imagePullPolicy changes no image.
        assert_eq!(gap("kind: Pod\nspec: {imagePullPolicy: Always}\n"), None);
    }

    #[test]
    fn json6902_operations_on_images_names_or_their_ancestors_are_named() {
        for pointer in [
            "/spec/template/spec/containers/0/image",
            "/spec/template",
            "/spec",
            "",
            "/metadata/name",
            "/metadata",
            "/metadata/namespace",
            "/kind",
            "/spec/jobTemplate/spec/template/spec/initContainers/-",
        ] {
            let text = format!("- op: replace\n  path: '{pointer}'\n  value: x\n");
            assert!(gap(&text).is_some(), "{pointer}");
        }
        assert_eq!(
            gap("[{\"op\": \"move\", \"from\": \"/spec/template/spec/containers/1\", \"path\": \"/spec/x\"}]").as_deref(),
            Some("the operation `move /spec/template/spec/containers/1` changes containers or images")
        );
        assert_eq!(
            gap("- op: test\n  path: /metadata/name\n  value: web\n"),
            None
        );
        assert_eq!(
            gap("- op: add\n  path: /metadata/labels/team\n  value: a\n"),
            None
        );
    }

    #[test]
    fn replacements_writing_images_or_names_are_named() {
        let text = "- source: {kind: ConfigMap, name: c, fieldPath: data.image}\n  targets:\n  - select: {kind: Deployment}\n    fieldPaths: ['spec.template.spec.containers.[name=app].image']\n";
        assert!(replacements_file_gap(Path::new("r.yaml"), text)
            .unwrap()
            .contains("containers.[name=app].image"));
        let text = "source: {kind: ConfigMap, name: c, fieldPath: data.x}\ntargets:\n- select: {kind: Deployment}\n  fieldPaths: [metadata.annotations.x]\n";
        assert_eq!(replacements_file_gap(Path::new("r.yaml"), text), None);
    }

    #[test]
    fn an_unreadable_patch_is_named() {
        assert!(gap("a: [\n")
            .unwrap()
            .starts_with("the patch cannot be read: patch.yaml:"));
    }
}
