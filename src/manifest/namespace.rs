//! The namespace a manifest without `metadata.namespace` lands in.
//!
//! kustomize sets `namespace:` from a `kustomization.yaml` on every resource it builds, so a
//! Deployment that names no namespace runs in the namespace of the kustomization beside it (or
//! above it). tagpin needs that namespace to find the live workload. The nearest kustomization
//! in the same or a parent directory wins; overlays elsewhere that reuse the directory as a base
//! are not followed (which overlay a cluster applies is not knowable from the tree alone).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::scan::{ImageField, Origin};

/// File names kustomize reads as a kustomization.
const KUSTOMIZATION_NAMES: [&str; 3] = ["kustomization.yaml", "kustomization.yml", "Kustomization"];

/// Namespaces set by kustomizations, by the directory they sit in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KustomizeNamespaces {
    by_dir: BTreeMap<PathBuf, String>,
}

impl KustomizeNamespaces {
    /// Records `path` if it is a kustomization with a `namespace:`.
    pub fn add(&mut self, path: &Path, source: &[u8]) {
        let is_kustomization = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| KUSTOMIZATION_NAMES.contains(&n));
        if !is_kustomization {
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

    /// Fills the namespace of container fields from `path` that name none.
    pub fn fill(&self, path: &Path, fields: &mut [ImageField]) {
        let Some(ns) = self.for_file(path) else {
            return;
        };
        for field in fields {
            if let Origin::Container { workload, .. } = &mut field.origin {
                if workload.namespace.is_none() {
                    workload.namespace = Some(ns.to_string());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
                Origin::KustomizeImage { .. } => None,
            })
            .collect();
        assert_eq!(
            namespaces,
            vec![Some("own".to_string()), Some("shop".to_string())]
        );
    }
}
