//! The Helm values that Kubernetes objects carry: Flux `HelmRelease` and Argo CD `Application`.
//!
//! A Flux `HelmRelease` (`helm.toolkit.fluxcd.io`) holds values in `spec.values`. An Argo CD
//! `Application` (`argoproj.io`) holds, per Helm source (`spec.source`, or each of
//! `spec.sources`), a `helm.valuesObject` mapping, a `helm.values` YAML text in a block scalar
//! (`super::helm_text`) and a `helm.parameters` list. This module finds those and hands each to
//! the walk of `super::helm_values`, saying which object and part the values belong to.

use super::error::ManifestError;
use super::field::{Collector, Origin, SkipReason};
use super::helm::{HelmOptions, HelmPart, HelmSource};
use super::helm_text;
use super::helm_values::{scan_parameters, scan_values, Context};
use super::yaml::{Document, NodeId};

/// Whether an object of this `kind` and `apiVersion` carries Helm values.
pub(super) fn is_helm_object(kind: &str, api_version: &str) -> bool {
    is_helm_release(kind, api_version) || is_application(kind, api_version)
}

fn is_helm_release(kind: &str, api_version: &str) -> bool {
    kind == "HelmRelease" && api_version.starts_with("helm.toolkit.fluxcd.io/")
}

fn is_application(kind: &str, api_version: &str) -> bool {
    kind == "Application" && api_version.starts_with("argoproj.io/")
}

/// Collects the images of the Helm values of the object at `root`, document `index`.
pub(super) fn scan_object(
    document: &Document<'_>,
    root: NodeId,
    index: usize,
    options: &HelmOptions,
    out: &mut Collector,
) -> Result<(), ManifestError> {
    let (Some(kind), Some(api_version)) = (
        document.get_str(root, "kind")?,
        document.get_str(root, "apiVersion")?,
    ) else {
        return Ok(());
    };
    let (name, namespace) = match document.get(root, "metadata")? {
        Some(metadata) => (
            document
                .get_str(metadata, "name")?
                .unwrap_or("")
                .to_string(),
            document.get_str(metadata, "namespace")?.map(str::to_string),
        ),
        None => (String::new(), None),
    };
    let Some(spec) = document.get(root, "spec")? else {
        return Ok(());
    };
    if is_helm_release(kind, api_version) {
        let Some(values) = document.get(spec, "values")? else {
            return Ok(());
        };
        let context = Context {
            source: HelmSource::HelmRelease {
                namespace,
                name,
                document: index,
            },
            part: HelmPart::Values,
            digest: options.digest,
        };
        if document.is_mapping(values) {
            scan_values(document, values, &context, out)?;
        }
        return Ok(());
    }
    if !is_application(kind, api_version) {
        return Ok(());
    }
    let application = |source: Option<usize>| HelmSource::Application {
        namespace: namespace.clone(),
        name: name.clone(),
        source,
        document: index,
    };
    if let Some(source) = document.get(spec, "source")? {
        helm_source(document, source, application(None), options, out)?;
    }
    if let Some(sources) = document.get(spec, "sources")? {
        for (i, &source) in document.items(sources).iter().enumerate() {
            helm_source(document, source, application(Some(i)), options, out)?;
        }
    }
    Ok(())
}

/// One Application source's `helm:` values, object, text and parameters.
fn helm_source(
    document: &Document<'_>,
    source: NodeId,
    holder: HelmSource,
    options: &HelmOptions,
    out: &mut Collector,
) -> Result<(), ManifestError> {
    let Some(helm) = document.get(source, "helm")? else {
        return Ok(());
    };
    let context = |part| Context {
        source: holder.clone(),
        part,
        digest: options.digest,
    };
    let values_object = document
        .get(helm, "valuesObject")?
        .filter(|&values| document.is_mapping(values));
    if let Some(values) = values_object {
        scan_values(document, values, &context(HelmPart::ValuesObject), out)?;
    }
    if let Some(text) = document.get(helm, "values")? {
        helm_text::scan_values_text(document, text, &context(HelmPart::ValuesText), out);
    }
    if let Some(parameters) = document.get(helm, "parameters")? {
        let first = out.fields.len();
        scan_parameters(
            document,
            parameters,
            values_object,
            &context(HelmPart::Parameters),
            out,
        )?;
        // A block of the values whose tag a parameter sets does not take it from the chart.
        let set: Vec<String> = out.fields[first..]
            .iter()
            .filter_map(|field| match &field.origin {
                Origin::HelmImage(image) => Some(image.key_path.clone()),
                _ => None,
            })
            .collect();
        out.skipped.retain(|skipped| match &skipped.origin {
            Origin::HelmImage(image) => {
                !(skipped.reason == SkipReason::HelmTagFromChart
                    && image.source == holder
                    && set.contains(&image.key_path))
            }
            _ => true,
        });
    }
    Ok(())
}
