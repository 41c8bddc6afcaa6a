//! What the cluster is expected to run: (workload, container, pinned reference, digest).
//!
//! Read from a pull request's plan block, or from the manifests of a commit. Pure: callers
//! hand in the plan block or the scanned manifests.

use crate::forge::body::PlanBlock;
use crate::manifest::{ImageField, Origin};
use crate::reference::Reference;

/// How manifest names become live names: the namespace for manifests that name none, and the
/// prefix or suffix a GitOps tool adds (kustomize `namePrefix`, Argo CD app names).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NameMapping {
    pub default_namespace: String,
    pub name_prefix: String,
    pub name_suffix: String,
}

pub use super::verdict::Expected;

impl Expected {
    /// `namespace/Kind/name`, as verdicts and tables name a workload.
    pub fn workload(&self) -> String {
        format!("{}/{}/{}", self.namespace, self.kind, self.name)
    }
}

/// Expectations from a pull request's plan block. Kustomization `images:` pins name no
/// workload and are returned separately, by image, for the caller to report.
pub fn from_plan(block: &PlanBlock, mapping: &NameMapping) -> (Vec<Expected>, Vec<String>) {
    let mut expected = Vec::new();
    let mut unplaced = Vec::new();
    for pin in &block.pins {
        let parts: Vec<&str> = pin.workload.split('/').collect();
        let (namespace, kind, name) = match parts.as_slice() {
            [ns, kind, name] => (ns.to_string(), kind.to_string(), name.to_string()),
            [kind, name] => (
                mapping.default_namespace.clone(),
                kind.to_string(),
                name.to_string(),
            ),
            _ => {
                unplaced.push(pin.image.clone());
                continue;
            }
        };
        expected.push(Expected {
            kind,
            namespace,
            name: format!("{}{name}{}", mapping.name_prefix, mapping.name_suffix),
            container: pin.container.clone(),
            pinned_ref: pin.new_value.clone(),
            digest: pin.new_digest.clone(),
        });
    }
    expected.sort();
    expected.dedup();
    (expected, unplaced)
}

/// Expectations from the image fields of manifests at a commit: every container whose image
/// is pinned (`repo:tag@digest` or `repo@digest`). Unpinned images promise nothing.
pub fn from_fields<'a>(
    fields: impl IntoIterator<Item = &'a ImageField>,
    mapping: &NameMapping,
) -> Vec<Expected> {
    let mut expected = Vec::new();
    for field in fields {
        let Origin::Container {
            kind,
            name,
            namespace,
            container,
            ..
        } = &field.origin
        else {
            continue;
        };
        let Some(digest) = Reference::parse(&field.value)
            .ok()
            .and_then(|r| r.digest().cloned())
        else {
            continue;
        };
        expected.push(Expected {
            kind: kind.clone(),
            namespace: namespace
                .clone()
                .unwrap_or_else(|| mapping.default_namespace.clone()),
            name: format!("{}{name}{}", mapping.name_prefix, mapping.name_suffix),
            container: container.clone(),
            pinned_ref: field.value.clone(),
            digest: digest.to_string(),
        });
    }
    expected.sort();
    expected.dedup();
    expected
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forge::body::Pin;

    const D: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";

    fn pin(workload: &str) -> Pin {
        Pin {
            file: "apps/web.yaml".into(),
            workload: workload.into(),
            container: "app".into(),
            image: "docker.io/library/nginx:1.27".into(),
            new_value: format!("nginx:1.27@{D}"),
            new_digest: D.into(),
            old_digest: None,
        }
    }

    fn mapping() -> NameMapping {
        NameMapping {
            default_namespace: "default".into(),
            name_prefix: "prod-".into(),
            name_suffix: String::new(),
        }
    }

    #[test]
    fn plan_pins_become_expectations_with_namespace_and_prefix() {
        let block = PlanBlock {
            version: 1,
            target: "main".into(),
            pins: vec![
                pin("shop/Deployment/web"),
                pin("Deployment/api"),
                pin("kustomization"),
            ],
        };
        let (expected, unplaced) = from_plan(&block, &mapping());
        assert_eq!(
            expected.iter().map(Expected::workload).collect::<Vec<_>>(),
            vec!["default/Deployment/prod-api", "shop/Deployment/prod-web"]
        );
        assert_eq!(unplaced, vec!["docker.io/library/nginx:1.27"]);
        assert_eq!(expected[0].digest, D);
    }

    #[test]
    fn only_pinned_containers_of_a_commit_are_expected() {
        let text = format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web, namespace: shop}}\nspec:\n  template:\n    spec:\n      containers:\n      - {{name: app, image: 'nginx:1.27@{D}'}}\n      - {{name: side, image: 'busybox:1'}}\n"
        );
        let outcome =
            crate::manifest::scan(std::path::Path::new("w.yaml"), text.as_bytes()).unwrap();
        let expected = from_fields(&outcome.fields, &NameMapping::default());
        assert_eq!(expected.len(), 1);
        assert_eq!(expected[0].workload(), "shop/Deployment/web");
        assert_eq!(expected[0].container, "app");
    }
}
