//! Where Kubernetes keeps container images, walked over the position-keeping YAML tree.
//!
//! An object of a workload kind holds a pod spec at a path that depends on its kind
//! ([`WorkloadKind::pod_spec_paths`]); the pod spec holds containers in three lists; each
//! container names its image. Any other kind (an Argo Rollout, an OpenKruise CloneSet, a
//! Knative Service) is read where Kubernetes kinds keep a pod template, `spec.template.spec`
//! or `spec.jobTemplate.spec.template.spec`, when what is there is unmistakably a pod spec.
//! `kind: List` (and `*List` kinds) wrap objects in `items:`. This module knows those paths and
//! nothing of YAML syntax: it reads a `Document` through its accessors and reports each image,
//! or why it was skipped, to the scan's collector.

use std::collections::HashSet;

use super::error::ManifestError;
use super::field::{string_target, Collector, ContainerList, ImageField, Origin};
use super::yaml::{Document, NodeId};
use crate::workload::{WorkloadId, WorkloadKind};

/// Scans an object and, for `kind: List` and `*List` kinds, its items, with an explicit work
/// list and a visited set (aliases may repeat items, or even make a list contain itself).
/// `index` is the document's number in its file.
pub(super) fn scan_objects(
    document: &Document<'_>,
    root: NodeId,
    index: usize,
    out: &mut Collector,
) -> Result<(), ManifestError> {
    let mut pending = vec![root];
    let mut visited_objects = HashSet::new();
    let mut visited_lists = HashSet::new();
    while let Some(object) = pending.pop() {
        let object = document.resolve(object);
        if !visited_objects.insert(object) || !document.is_mapping(object) {
            continue;
        }
        let Some(kind) = document.get_str(object, "kind")? else {
            continue;
        };
        let Some(api_version) = document.get_str(object, "apiVersion")? else {
            continue;
        };
        if kind.ends_with("List") {
            if let Some(items) = document.get(object, "items")? {
                pending.extend(document.items(items).iter().rev());
            }
            continue;
        }
        let kind = WorkloadKind::of(kind, api_version);
        let Some(pod_spec) = pod_spec(document, object, &kind)? else {
            continue;
        };
        let metadata = document.get(object, "metadata")?;
        let (name, namespace) = match metadata {
            Some(metadata) => (
                document.get_str(metadata, "name")?.unwrap_or(""),
                document.get_str(metadata, "namespace")?,
            ),
            None => ("", None),
        };
        for list in ContainerList::ALL {
            let Some(containers) = document.get(pod_spec, list.key())? else {
                continue;
            };
            if !visited_lists.insert(document.resolve(containers)) {
                continue;
            }
            for &container in document.items(containers) {
                let container_name = document.get_str(container, "name")?.unwrap_or("");
                let origin = Origin::Container {
                    workload: WorkloadId {
                        namespace: namespace.map(str::to_string),
                        kind: kind.clone(),
                        name: name.to_string(),
                    },
                    container: container_name.to_string(),
                    list,
                    document: index,
                };
                if let Some(image) = document.get(container, "image")? {
                    image_field(document, image, origin, out);
                }
            }
        }
    }
    Ok(())
}

/// The pod spec of an object of `kind`, if it has one. A known kind's is at its kind's path. An
/// other kind (a Rollout-like CRD: OpenKruise's CloneSet, Knative's Service) counts only where
/// Kubernetes kinds keep a pod template, and only when that is unmistakably a pod spec: its
/// `containers` and `initContainers` lists of mappings, each with an `image`. A CRD whose
/// `spec.template` is something else (a template of another resource) is left alone.
fn pod_spec(
    document: &Document<'_>,
    object: NodeId,
    kind: &WorkloadKind,
) -> Result<Option<NodeId>, ManifestError> {
    let other = matches!(kind, WorkloadKind::Other(_));
    if other && kind.group().is_empty() {
        // Every core-group kind with a pod template is a known one.
        return Ok(None);
    }
    for path in kind.pod_spec_paths() {
        let Some(pod_spec) = document.get_path(object, path)? else {
            continue;
        };
        if !other || holds_containers(document, pod_spec)? {
            return Ok(Some(pod_spec));
        }
    }
    Ok(None)
}

/// Whether `pod_spec` has `containers` or `initContainers`, and every one it has is a
/// non-empty list whose items are all mappings with an `image` key.
fn holds_containers(document: &Document<'_>, pod_spec: NodeId) -> Result<bool, ManifestError> {
    if !document.is_mapping(pod_spec) {
        return Ok(false);
    }
    let mut found = false;
    for list in [ContainerList::Containers, ContainerList::InitContainers] {
        let Some(containers) = document.get(pod_spec, list.key())? else {
            continue;
        };
        let items = document.items(containers);
        if items.is_empty() {
            return Ok(false);
        }
        for &item in items {
            if !document.is_mapping(item) || document.get(item, "image")?.is_none() {
                return Ok(false);
            }
        }
        found = true;
    }
    Ok(found)
}

/// Records a container image, or the reason it cannot be pinned.
fn image_field(document: &Document<'_>, image: NodeId, origin: Origin, out: &mut Collector) {
    let Some(node) = document.node(document.resolve(image)) else {
        return;
    };
    match string_target(node) {
        Ok((value, target)) => out.field(ImageField {
            line: node.line,
            column: node.column,
            value: value.to_string(),
            target,
            origin,
        }),
        Err(reason) => out.skip(node, reason, origin),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::scan::fixtures::*;
    use crate::manifest::ScalarStyle;
    use std::time::{Duration, Instant};

    #[test]
    fn finds_the_image_of_a_block_style_deployment() {
        let text = deployment(ONE_CONTAINER);
        let outcome = scan_str("web.yaml", &text);
        assert_eq!(outcome.fields.len(), 1);
        let field = &outcome.fields[0];
        assert_eq!(field.value, "nginx:1.27");
        assert_eq!(written(&text, field), "nginx:1.27");
        assert_eq!(style(field), ScalarStyle::Plain);
        assert_eq!((field.line, field.column), (10, 16));
        assert_eq!(
            field.origin,
            Origin::Container {
                workload: "Deployment/web".parse().unwrap(),
                container: "app".into(),
                list: ContainerList::Containers,
                document: 0,
            }
        );
        assert_eq!((outcome.documents, outcome.kubernetes_documents), (1, 1));
    }

    #[test]
    fn flow_style_containers_are_found() {
        let text = deployment(
            "      containers: [{name: a, image: nginx:1.27}, {name: b, image: \"redis:7\"}]\n",
        );
        let outcome = scan_str("web.yaml", &text);
        let written: Vec<&str> = outcome.fields.iter().map(|f| written(&text, f)).collect();
        assert_eq!(written, ["nginx:1.27", "\"redis:7\""]);
    }

    #[test]
    fn init_and_ephemeral_containers_are_found_with_their_list() {
        let text = concat!(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ns}\nspec:\n",
            "  ephemeralContainers: [{name: debug, image: busybox}]\n",
            "  initContainers: [{name: init, image: alpine:3}]\n",
            "  containers: [{name: app, image: nginx}]\n",
        );
        let outcome = scan_str("pod.yaml", text);
        let lists: Vec<(ContainerList, &str)> = outcome
            .fields
            .iter()
            .map(|f| match &f.origin {
                Origin::Container { list, workload, .. } => {
                    assert_eq!(workload.namespace.as_deref(), Some("ns"));
                    (*list, f.value.as_str())
                }
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            lists,
            [
                (ContainerList::Containers, "nginx"),
                (ContainerList::InitContainers, "alpine:3"),
                (ContainerList::EphemeralContainers, "busybox"),
            ]
        );
    }

    #[test]
    fn every_workload_kind_is_read_at_its_pod_spec_path() {
        let pod_spec = "{containers: [{name: c, image: img}]}";
        let template = format!("spec: {{template: {{spec: {pod_spec}}}}}");
        let cases = [
            ("v1", "Pod", format!("spec: {pod_spec}")),
            (
                "v1",
                "PodTemplate",
                format!("template: {{spec: {pod_spec}}}"),
            ),
            (
                "batch/v1",
                "CronJob",
                format!("spec: {{jobTemplate: {{spec: {{template: {{spec: {pod_spec}}}}}}}}}"),
            ),
            ("apps/v1", "Deployment", template.clone()),
            ("extensions/v1beta1", "Deployment", template.clone()),
            ("apps/v1", "StatefulSet", template.clone()),
            ("apps/v1", "DaemonSet", template.clone()),
            ("apps/v1", "ReplicaSet", template.clone()),
            ("v1", "ReplicationController", template.clone()),
            ("batch/v1", "Job", template.clone()),
            ("apps.openshift.io/v1", "DeploymentConfig", template.clone()),
            ("argoproj.io/v1alpha1", "Rollout", template.clone()),
        ];
        for (api_version, kind, body) in cases {
            let text = format!("apiVersion: {api_version}\nkind: {kind}\n{body}\n");
            let outcome = scan_str("w.yaml", &text);
            assert_eq!(outcome.fields.len(), 1, "{kind}");
            let Origin::Container { workload, .. } = &outcome.fields[0].origin else {
                panic!("{kind}");
            };
            assert_eq!(workload.kind, WorkloadKind::from_kind(kind).unwrap());
            // The same body under a core kind that holds no pod template is no workload.
            let text = format!("apiVersion: v1\nkind: Service\n{body}\n");
            assert!(scan_str("w.yaml", &text).fields.is_empty(), "{kind}");
        }
    }

    #[test]
    fn any_kind_with_a_pod_template_where_kubernetes_keeps_one_is_pinned_and_named() {
        let cases = [
            (
                "apps.kruise.io/v1alpha1",
                "CloneSet",
                "spec: {template: {spec: {containers: [{name: c, image: 'nginx:1.27'}]}}}",
                "CloneSet.apps.kruise.io/sample",
            ),
            (
                "serving.knative.dev/v1",
                "Service",
                "spec: {template: {spec: {containers: [{image: 'ghcr.io/knative/helloworld-go:latest'}]}}}",
                "Service.serving.knative.dev/sample",
            ),
            (
                "example.com/v1",
                "NightlyTask",
                "spec: {jobTemplate: {spec: {template: {spec: {initContainers: [{name: i, image: busybox}]}}}}}",
                "NightlyTask.example.com/sample",
            ),
            // An OpenKruise Advanced StatefulSet is not an apps/v1 StatefulSet.
            (
                "apps.kruise.io/v1beta1",
                "StatefulSet",
                "spec: {template: {spec: {containers: [{name: c, image: redis}]}}}",
                "StatefulSet.apps.kruise.io/sample",
            ),
        ];
        for (api_version, kind, body, id) in cases {
            let text = format!(
                "apiVersion: {api_version}\nkind: {kind}\nmetadata: {{name: sample}}\n{body}\n"
            );
            let outcome = scan_str("w.yaml", &text);
            assert_eq!(outcome.fields.len(), 1, "{kind}");
            let Origin::Container { workload, .. } = &outcome.fields[0].origin else {
                panic!("{kind}");
            };
            assert_eq!(workload.to_string(), id);
            assert!(!workload.kind.is_verifiable(), "{kind}");
        }
    }

    #[test]
    fn an_other_kind_s_template_that_is_no_pod_spec_is_left_alone() {
        for body in [
            // A template of another resource.
            "spec: {template: {spec: {replicas: 3, image: 'nginx:1.27'}}}",
            // Containers that are not mappings with an image.
            "spec: {template: {spec: {containers: ['nginx:1.27']}}}",
            "spec: {template: {spec: {containers: [{name: a, command: [sh]}]}}}",
            "spec: {template: {spec: {containers: {name: a, image: 'nginx:1.27'}}}}",
            "spec: {template: {spec: {containers: []}}}",
            // One list is a pod's, the other is not.
            "spec: {template: {spec: {containers: [{image: a}], initContainers: [b]}}}",
            // Not where Kubernetes kinds keep a pod template.
            "spec: {podTemplate: {spec: {containers: [{name: a, image: 'nginx:1.27'}]}}}",
        ] {
            let text = format!("apiVersion: example.com/v1\nkind: Widget\n{body}\n");
            let outcome = scan_str("w.yaml", &text);
            assert!(
                outcome.fields.is_empty() && outcome.skipped.is_empty(),
                "{body}"
            );
        }
        // A core-group kind tagpin does not know holds no pod template.
        let text = "apiVersion: v1\nkind: Widget\nspec: {template: {spec: {containers: [{name: a, image: b}]}}}\n";
        assert!(scan_str("w.yaml", text).fields.is_empty());
    }

    #[test]
    fn list_kinds_are_scanned_item_by_item() {
        let text = concat!(
            "apiVersion: v1\nkind: List\nitems:\n",
            "- apiVersion: v1\n  kind: Pod\n  metadata: {name: one}\n  spec: {containers: [{name: a, image: a:1}]}\n",
            "- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: cm}\n",
            "- apiVersion: apps/v1\n  kind: DeploymentList\n  items:\n",
            "  - apiVersion: apps/v1\n    kind: Deployment\n    metadata: {name: two}\n",
            "    spec: {template: {spec: {containers: [{name: b, image: b:2}]}}}\n",
        );
        let outcome = scan_str("list.yaml", text);
        let found: Vec<(&str, &str)> = outcome
            .fields
            .iter()
            .map(|f| match &f.origin {
                Origin::Container { workload, .. } => (workload.name.as_str(), f.value.as_str()),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(found, [("one", "a:1"), ("two", "b:2")]);
    }

    #[test]
    fn list_items_without_api_version_are_ignored() {
        let text = "apiVersion: v1\nkind: List\nitems:\n- kind: Pod\n  spec: {containers: [{name: a, image: a:1}]}\n";
        assert!(scan_str("list.yaml", text).fields.is_empty());
    }

    #[test]
    fn shared_container_list_is_reported_once() {
        let text = concat!(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec:\n  containers: &c [{name: x, image: x:1}]\n",
            "---\napiVersion: v1\nkind: Pod\nmetadata: {name: b}\nspec:\n  containers: [{name: y, image: y:1}]\n",
        );
        let outcome = scan_str("pods.yaml", text);
        assert_eq!(outcome.fields.len(), 2);
    }

    #[test]
    fn digest_references_are_reported_as_written() {
        let digest = "sha256:".to_string() + &"a".repeat(64);
        let text = format!("apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: a\n    image: repo@{digest}\n");
        let outcome = scan_str("pod.yaml", &text);
        assert_eq!(outcome.fields[0].value, format!("repo@{digest}"));
    }

    #[test]
    fn openshift_capture_yields_its_one_image() {
        let text = include_str!(
            "../../tests/fixtures/golden/openshift-deployment/original/deployment.yaml"
        );
        let outcome = scan_str("deployment.yaml", text);
        assert_eq!(outcome.fields.len(), 1);
        let field = &outcome.fields[0];
        assert_written_at(
            text,
            field,
            "quay.io/k_nakajima/nginx-sample:latest",
            (28, 18),
        );
    }

    #[test]
    fn openshift_pod_list_capture_yields_the_pod_image() {
        let text =
            include_str!("../../tests/fixtures/golden/openshift-pod-list/original/pods.yaml");
        let outcome = scan_str("pods.yaml", text);
        let values: Vec<&str> = outcome.fields.iter().map(|f| f.value.as_str()).collect();
        assert_eq!(values, ["quay.io/k_nakajima/nginx-sample:latest"]);
        assert!(
            matches!(&outcome.fields[0].origin, Origin::Container { workload, .. }
            if workload.kind == crate::workload::WorkloadKind::Pod && workload.name == "nginx-54589dd565-v9xm9")
        );
    }

    /// Ten levels of ten-fold alias fan-out: 10^10 paths if aliases were expanded.
    #[test]
    fn billion_laughs_through_lists_completes_quickly() {
        let mut text = String::from(
            "l0: &l0 {apiVersion: v1, kind: List, items: [{apiVersion: v1, kind: Pod, spec: {containers: [{name: c, image: 'x:1'}]}}]}\n",
        );
        for level in 1..10 {
            let items = vec![format!("*l{}", level - 1); 10].join(", ");
            text.push_str(&format!(
                "l{level}: &l{level} {{apiVersion: v1, kind: List, items: [{items}]}}\n"
            ));
        }
        text.push_str("apiVersion: v1\nkind: List\nitems: [");
        text.push_str(&["*l9"; 10].join(", "));
        text.push_str("]\n");
        let started = Instant::now();
        let outcome = scan_str("lol.yaml", &text);
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(outcome.fields.len(), 1);
    }

    #[test]
    fn self_referencing_list_terminates() {
        let text = "&a {apiVersion: v1, kind: List, items: [*a, {apiVersion: v1, kind: Pod, spec: {containers: [{name: c, image: x}]}}]}\n";
        let outcome = scan_str("loop.yaml", text);
        assert_eq!(outcome.fields.len(), 1);
    }
}
