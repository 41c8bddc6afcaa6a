//! What the cluster is expected to run: (workload, container, pinned reference, digest).
//!
//! Read from a pull request's plan block, or from the manifests of a commit, with their
//! kustomizations rendered as a GitOps tool applies them ([`crate::render`]): a pin in an
//! overlay's `images:` entry is expected on the workload the overlay deploys, under the name and
//! in the namespace the overlay gives it. Pure: callers hand in the plan block, or the scanned
//! manifests and the renders. A pin the verifier cannot check (a kind it cannot read live, a
//! kustomization it cannot render, an `images:` entry that changes no container) is not an
//! error: it comes back as [`NotVerified`] with its reason, so the verdict can say what was not
//! checked. A pin in Helm values names no workload: it becomes a [`HelmPin`], judged through the
//! release that deploys it ([`super::helm`]).

use std::collections::HashSet;
use std::path::Path;

use serde::Serialize;

use crate::manifest::{HelmImage, HelmSource, ImageField, Origin};
use crate::plan::ScannedFile;
use crate::proposal::{Pin, PlanBlock};
use crate::reference::{Digest, Reference};
use crate::render::Render;
use crate::workload::{Owner, WorkloadId};

/// How manifest names become live names: the namespace for manifests that name none, and the
/// prefix or suffix a GitOps tool adds (kustomize `namePrefix`, Argo CD app names).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NameMapping {
    pub default_namespace: String,
    pub name_prefix: String,
    pub name_suffix: String,
}

impl NameMapping {
    /// The live identity of a workload as written in Git.
    pub(crate) fn live(&self, workload: &WorkloadId) -> WorkloadId {
        let mut live = workload.in_namespace_or(&self.default_namespace);
        live.name = format!("{}{}{}", self.name_prefix, workload.name, self.name_suffix);
        live
    }
}

/// One pinned container, as Git now has it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Expected {
    /// The live workload, its namespace always set.
    pub workload: WorkloadId,
    pub container: String,
    /// The reference written to Git, such as `quay.io/a/b:latest@sha256:…`; kept for reports.
    pub pinned_ref: String,
    /// The digest part of [`Expected::pinned_ref`]: the only part ever compared, because
    /// runtimes and mirrors spell repositories differently.
    pub digest: Digest,
}

/// Why a pin cannot be checked against a live workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NotVerifiedReason {
    /// A kustomization `images:` entry names an image, not a workload (and no rendered
    /// kustomization includes it, or the plan block does not say which).
    KustomizeImage,
    /// A kustomization `images:` entry that changes no container of the kustomizations that
    /// include it, as they render.
    KustomizeImageUnused,
    /// The pin belongs to a kustomization tagpin cannot render (a remote resource, a Helm chart,
    /// a patch that may change images); [`NotVerified::detail`] says which and where.
    KustomizeNotRendered,
    /// A kind the verifier does not read live (see
    /// [`crate::workload::WorkloadKind::is_verifiable`]).
    KindNotVerifiable,
    /// The manifest object has no `metadata.name`.
    NoName,
    /// The plan block names the workload in a form tagpin cannot read.
    UnreadableWorkload,
    /// The Argo CD Application or Flux Kustomization that applies the pin's file has applied
    /// it, but its inventory holds no workload of this kind and name (see [`super::gitops`]).
    #[serde(rename = "not_in_gitops_inventory")]
    NotInGitOpsInventory,
    /// Several inventory entries of the GitOps objects that apply the pin's file could be
    /// this workload.
    #[serde(rename = "ambiguous_in_gitops_inventory")]
    AmbiguousInGitOpsInventory,
    /// A pinned Helm value no HelmRelease or Argo CD Application in the cluster deploys (see
    /// [`super::helm`]).
    HelmReleaseMissing,
    /// The release that deploys a pinned Helm value cannot say which commit its values come
    /// from; [`NotVerified::detail`] says why.
    HelmRevisionUnknown,
    /// No live container of the release's workloads runs the pinned repository.
    HelmNoMatchingContainer,
    /// Several live containers of the release's workloads run the pinned repository, or several
    /// pins of the release name the one container that does.
    HelmAmbiguous,
    /// tagpin may not list the workloads of the release's namespace.
    HelmWorkloadsUnreadable,
}

impl std::fmt::Display for NotVerifiedReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            NotVerifiedReason::KustomizeImage => "a kustomization images: entry names no workload",
            NotVerifiedReason::KustomizeImageUnused => {
                "the kustomization images: entry changes no rendered container"
            }
            NotVerifiedReason::KustomizeNotRendered => {
                "tagpin cannot render the kustomization that deploys it"
            }
            NotVerifiedReason::KindNotVerifiable => "tagpin cannot read this kind live yet",
            NotVerifiedReason::NoName => "the manifest has no metadata.name",
            NotVerifiedReason::UnreadableWorkload => "the workload in the plan block is unreadable",
            NotVerifiedReason::NotInGitOpsInventory => {
                "the GitOps object applying it lists no such workload"
            }
            NotVerifiedReason::AmbiguousInGitOpsInventory => {
                "several workloads listed by the GitOps objects applying it could be this one"
            }
            NotVerifiedReason::HelmReleaseMissing => {
                "no Helm release in the cluster deploys this value"
            }
            NotVerifiedReason::HelmRevisionUnknown => {
                "tagpin cannot tell which commit the Helm release's values come from"
            }
            NotVerifiedReason::HelmNoMatchingContainer => {
                "no live container of the Helm release runs the pinned repository"
            }
            NotVerifiedReason::HelmAmbiguous => {
                "the live containers of the Helm release cannot be told apart for this pin"
            }
            NotVerifiedReason::HelmWorkloadsUnreadable => {
                "tagpin may not list the Helm release's workloads"
            }
        })
    }
}

/// A pin that was not checked, and why.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct NotVerified {
    /// The image as the plan or manifest names it.
    pub image: String,
    /// `namespace/Kind/name`, `Kind/name` or `kustomization`.
    pub workload: String,
    pub reason: NotVerifiedReason,
    /// What exactly, with file and line, where the reason alone does not say it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl NotVerified {
    /// The reason as people read it, with its detail.
    pub fn why(&self) -> String {
        match &self.detail {
            Some(detail) => format!("{}: {detail}", self.reason),
            None => self.reason.to_string(),
        }
    }
}

/// What a source promises: the pins to check, and the pins that cannot be checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Promised {
    pub expected: Vec<Expected>,
    pub not_verified: Vec<NotVerified>,
    /// Pins in Helm values, checked through the releases that deploy them.
    pub helm: Vec<HelmPin>,
}

impl Promised {
    /// Sorts and deduplicates, so that equal sources give equal expectations.
    fn finish(mut self) -> Promised {
        self.expected.sort();
        self.expected.dedup();
        self.not_verified.sort();
        self.not_verified.dedup();
        self.helm.sort();
        self.helm.dedup();
        self
    }

    /// Decides, in one place, whether a pin on `workload` (`None`: a kustomization `images:`
    /// entry) can be checked live. Helm pins do not come here: they name no workload.
    fn add(
        &mut self,
        workload: Option<&WorkloadId>,
        container: &str,
        image: &str,
        pinned_ref: &str,
        digest: Digest,
        mapping: &NameMapping,
    ) {
        // Named as the verdicts name workloads: in their live namespace, with the live name.
        let named = match workload {
            Some(id) => mapping.live(id).to_string(),
            None => Owner::Kustomization.to_string(),
        };
        let not_verified = |reason| NotVerified {
            image: image.to_string(),
            workload: named.clone(),
            reason,
            detail: None,
        };
        match workload {
            None => self
                .not_verified
                .push(not_verified(NotVerifiedReason::KustomizeImage)),
            Some(id) if !id.kind.is_verifiable() => self.not_verified.push(NotVerified {
                detail: Some(format!("kind {}", id.kind)),
                ..not_verified(NotVerifiedReason::KindNotVerifiable)
            }),
            Some(id) if id.name.is_empty() => self
                .not_verified
                .push(not_verified(NotVerifiedReason::NoName)),
            Some(id) => self.expected.push(Expected {
                workload: mapping.live(id),
                container: container.to_string(),
                pinned_ref: pinned_ref.to_string(),
                digest,
            }),
        }
    }
}

/// Expectations from a pull request's plan block. A Helm row (`helm:<source>`) becomes a
/// [`HelmPin`]: its key path is the row's container, its repository and tag the row's image.
pub(crate) fn from_plan(block: &PlanBlock, mapping: &NameMapping) -> Promised {
    let mut promised = Promised::default();
    for pin in &block.pins {
        let workload = match &pin.workload {
            Owner::Workload(id) => Some(id),
            Owner::Kustomization => None,
            Owner::Helm(source) => {
                match helm_pin_of_plan(pin, source) {
                    Ok(helm) => promised.helm.push(helm),
                    Err(unreadable) => promised.not_verified.push(NotVerified {
                        image: pin.image.clone(),
                        workload: pin.workload.to_string(),
                        reason: NotVerifiedReason::UnreadableWorkload,
                        detail: Some(unreadable.to_string()),
                    }),
                }
                continue;
            }
        };
        promised.add(
            workload,
            &pin.container,
            &pin.image,
            &pin.new_value,
            pin.new_digest.clone(),
            mapping,
        );
    }
    promised.finish()
}

/// Expectations from the image fields of manifests at a commit, each with the file it is in:
/// every field whose image is pinned (`repo:tag@digest`, `repo@digest`, a kustomize entry with
/// `digest:`, Helm values with a digest). Unpinned images promise nothing.
pub(crate) fn from_fields<'a>(
    fields: impl IntoIterator<Item = (&'a Path, &'a ImageField)>,
    mapping: &NameMapping,
) -> Promised {
    let mut promised = Promised::default();
    for (path, field) in fields {
        let Some(digest) = field.pinned_digest() else {
            continue;
        };
        let (workload, container) = match &field.origin {
            Origin::Container {
                workload,
                container,
                ..
            } => (Some(workload), container.as_str()),
            Origin::KustomizeImage { name, .. } => (None, name.as_str()),
            Origin::HelmImage(image) => {
                promised
                    .helm
                    .push(helm_pin(path, field.line, image, digest));
                continue;
            }
        };
        promised.add(
            workload,
            container,
            &field.value,
            &field.value,
            digest,
            mapping,
        );
    }
    promised.finish()
}

/// The Helm pin of an image found in `path` at `line`, pinning `digest`: the release is named
/// as the values' holder is (a HelmRelease or Application by namespace and name, the source
/// of a multi-source Application not mattering; a values file by its path from the root).
fn helm_pin(path: &Path, line: usize, image: &HelmImage, digest: Digest) -> HelmPin {
    let release = match &image.source {
        HelmSource::ValuesFile { path } => ReleaseRef::ValuesFile {
            path: path.display().to_string(),
        },
        HelmSource::HelmRelease {
            namespace, name, ..
        } => ReleaseRef::HelmRelease {
            namespace: namespace.clone(),
            name: name.clone(),
        },
        HelmSource::Application {
            namespace, name, ..
        } => ReleaseRef::Application {
            namespace: namespace.clone(),
            name: name.clone(),
        },
    };
    HelmPin {
        file: path.display().to_string(),
        line: Some(line),
        key_path: image.key_path.clone(),
        repository: image.repository.clone(),
        tag: image.tag.clone(),
        digest,
        release,
    }
}

/// The Helm pin of a plan block's row owned by `helm:<source>`, or why it cannot be read.
/// `source` is `values` (the row's file), `HelmRelease/[<ns>/]<name>` or
/// `Application/[<ns>/]<name>[/sources[<i>]]`; the row's image is `repository:tag` (or
/// `repository@digest` for an image pinned by digest alone).
fn helm_pin_of_plan(pin: &Pin, source: &str) -> Result<HelmPin, UnreadableHelmPin> {
    let unreadable = || UnreadableHelmPin::Release {
        file: pin.file.clone(),
        named: source.to_string(),
    };
    let release = if source == "values" {
        ReleaseRef::ValuesFile {
            path: pin.file.clone(),
        }
    } else {
        let (kind, rest) = source.split_once('/').ok_or_else(unreadable)?;
        let mut parts: Vec<&str> = rest.split('/').collect();
        if kind == "Application"
            && parts.len() > 1
            && parts
                .last()
                .is_some_and(|p| p.starts_with("sources[") && p.ends_with(']'))
        {
            parts.pop();
        }
        let (namespace, name) = match parts.as_slice() {
            [name] => (None, name.to_string()),
            [namespace, name] => (Some(namespace.to_string()), name.to_string()),
            _ => return Err(unreadable()),
        };
        if name.is_empty() || namespace.as_deref() == Some("") {
            return Err(unreadable());
        }
        match kind {
            "HelmRelease" => ReleaseRef::HelmRelease { namespace, name },
            "Application" => ReleaseRef::Application { namespace, name },
            _ => return Err(unreadable()),
        }
    };
    let image = Reference::parse(&pin.image).map_err(|cause| UnreadableHelmPin::Image {
        file: pin.file.clone(),
        image: pin.image.clone(),
        cause,
    })?;
    Ok(HelmPin {
        file: pin.file.clone(),
        line: None,
        key_path: pin.container.clone(),
        repository: image.canonical_name(),
        tag: image.tag().map(str::to_string),
        digest: pin.new_digest.clone(),
        release,
    })
}

/// Why a plan block's Helm row cannot be verified.
#[derive(Debug, thiserror::Error)]
enum UnreadableHelmPin {
    #[error("{file}: helm:{named} names no Helm release")]
    Release { file: String, named: String },
    #[error("{file}: image {image} cannot be read: {cause}")]
    Image {
        file: String,
        image: String,
        #[source]
        cause: crate::reference::ParseError,
    },
}

fn image_digest(image: &str) -> Option<Digest> {
    Reference::parse(image)
        .ok()
        .and_then(|r| r.digest().cloned())
}

/// Expectations from the manifests of a commit (`files`, scanned) and the renders of its root
/// kustomizations. A container a render deploys is expected under its rendered identity, with
/// its rendered image, when that image carries a digest and `manages` selects it; if the render
/// is incomplete, it is not verified, with the render's problems. The files a render read are
/// judged by the renders alone, so no container counts twice: a pinned field there that no
/// rendered container came from (an `images:` entry matching nothing, an image in a patch) is
/// not verified, with its reason. Every other file is read as [`from_fields`] reads it.
pub(crate) fn from_manifests(
    files: &[ScannedFile],
    renders: &[Render],
    manages: impl Fn(&str) -> bool,
    mapping: &NameMapping,
) -> Promised {
    let mut promised = Promised::default();
    add_rendered(&mut promised, renders, &manages, mapping);
    let containers = || renders.iter().flat_map(|r| r.containers.iter());
    let written: HashSet<(&Path, usize, usize)> = containers()
        .map(|c| (c.written.path.as_path(), c.written.line, c.written.column))
        .collect();
    let applied: HashSet<(&Path, &str)> = containers()
        .flat_map(|c| c.replaced_by.iter())
        .map(|e| (e.at.path.as_path(), e.name.as_str()))
        .collect();
    let mut plain = Vec::new();
    for file in files {
        let covering: Vec<&Render> = renders
            .iter()
            .filter(|r| r.files.contains(&file.path))
            .collect();
        if covering.is_empty() {
            plain.extend(file.fields.iter().map(|f| (file.path.as_path(), f)));
            continue;
        }
        let problems = problems(&covering);
        for field in &file.fields {
            let Some(digest) = field.pinned_digest() else {
                continue;
            };
            let (workload, reason, detail) = match &field.origin {
                Origin::Container { workload, .. } => {
                    if written.contains(&(file.path.as_path(), field.line, field.column)) {
                        continue;
                    }
                    let workload = mapping.live(workload).to_string();
                    let reason = NotVerifiedReason::KustomizeNotRendered;
                    (workload, reason, problems.clone())
                }
                Origin::KustomizeImage { name, .. } => {
                    if applied.contains(&(file.path.as_path(), name.as_str())) {
                        continue;
                    }
                    let (reason, detail) = match &problems {
                        Some(problems) => {
                            (NotVerifiedReason::KustomizeNotRendered, problems.clone())
                        }
                        None => (
                            NotVerifiedReason::KustomizeImageUnused,
                            unused(&file.path, name, &covering),
                        ),
                    };
                    (Owner::Kustomization.to_string(), reason, Some(detail))
                }
                // A kustomization renders no chart: the release that deploys these values
                // (named as the kustomization leaves it) is consulted as for any other file.
                Origin::HelmImage(image) => {
                    promised
                        .helm
                        .push(helm_pin(&file.path, field.line, image, digest));
                    continue;
                }
            };
            promised.not_verified.push(NotVerified {
                image: field.value.clone(),
                workload,
                reason,
                detail,
            });
        }
    }
    let rest = from_fields(plain, mapping);
    promised.expected.extend(rest.expected);
    promised.not_verified.extend(rest.not_verified);
    promised.helm.extend(rest.helm);
    promised.finish()
}

/// What the rendered containers of `renders` promise: each managed image's digest, or, where
/// a render was not complete, why it cannot be verified.
fn add_rendered(
    promised: &mut Promised,
    renders: &[Render],
    manages: &impl Fn(&str) -> bool,
    mapping: &NameMapping,
) {
    for render in renders {
        let problems = problems(&[render]);
        for c in &render.containers {
            let Some(digest) = image_digest(&c.image).filter(|_| manages(&c.image)) else {
                continue;
            };
            match &problems {
                None => promised.add(
                    Some(&c.workload),
                    &c.container,
                    &c.image,
                    &c.image,
                    digest,
                    mapping,
                ),
                Some(problems) => promised.not_verified.push(NotVerified {
                    image: c.image.clone(),
                    workload: mapping.live(&c.workload).to_string(),
                    reason: NotVerifiedReason::KustomizeNotRendered,
                    detail: Some(problems.clone()),
                }),
            }
        }
    }
}

/// Every problem of `renders`, one message, or `None` when they rendered completely.
fn problems(renders: &[&Render]) -> Option<String> {
    let all: Vec<String> = renders
        .iter()
        .flat_map(|r| r.unverifiable.iter().map(ToString::to_string))
        .collect();
    (!all.is_empty()).then(|| all.join("; "))
}

/// Why an `images:` entry reached nothing: which kustomizations were rendered.
fn unused(path: &Path, name: &str, renders: &[&Render]) -> String {
    let roots: Vec<String> = renders
        .iter()
        .map(|r| r.kustomization.display().to_string())
        .collect();
    format!(
        "{}: no container that {} deploys has an image named {name}",
        path.display(),
        roots.join(", ")
    )
}

/// Where a pinned Helm value is written, and so which release deploys it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ReleaseRef {
    /// In `spec.values` of this Flux HelmRelease. A manifest that names no namespace (the
    /// applier sets it) leaves `namespace` out: the one live HelmRelease of that name is meant,
    /// and several are not told apart.
    HelmRelease {
        namespace: Option<String>,
        name: String,
    },
    /// In `helm.valuesObject`, `helm.values` or `helm.parameters` of this Argo CD Application
    /// (`namespace` as for a HelmRelease).
    Application {
        namespace: Option<String>,
        name: String,
    },
    /// In this values file of the repository (relative to its root).
    ValuesFile { path: String },
}

impl std::fmt::Display for ReleaseRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let qualified = |namespace: &Option<String>, name: &str| match namespace {
            Some(namespace) => format!("{namespace}/{name}"),
            None => name.to_string(),
        };
        match self {
            ReleaseRef::HelmRelease { namespace, name } => {
                write!(f, "Flux HelmRelease {}", qualified(namespace, name))
            }
            ReleaseRef::Application { namespace, name } => {
                write!(f, "Argo CD Application {}", qualified(namespace, name))
            }
            ReleaseRef::ValuesFile { path } => write!(f, "values file {path}"),
        }
    }
}

/// One pinned image in Helm values, as the verifier needs it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct HelmPin {
    /// The file the value is written in, relative to the repository root.
    pub file: String,
    /// The value's line in [`HelmPin::file`]; `None` for a pin read from a pull request's plan
    /// block, which records no lines (the key path still says where).
    pub line: Option<usize>,
    /// The value's key path, such as `image.tag` or `spec.values.web.image`.
    pub key_path: String,
    /// The image repository the value names, such as `ghcr.io/acme/web`.
    pub repository: String,
    pub tag: Option<String>,
    pub digest: Digest,
    pub release: ReleaseRef,
}

impl HelmPin {
    /// `repository[:tag]@digest`: what reports name, and what the registry is asked about.
    pub fn pinned_ref(&self) -> String {
        match &self.tag {
            Some(tag) => format!("{}:{tag}@{}", self.repository, self.digest),
            None => format!("{}@{}", self.repository, self.digest),
        }
    }

    /// `charts/web/values.yaml:12 image.tag`: where a person finds the pin.
    pub(super) fn place(&self) -> String {
        match self.line {
            Some(line) => format!("{}:{line} {}", self.file, self.key_path),
            None => format!("{} {}", self.file, self.key_path),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proposal::Pin;

    const D: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";

    fn pin(workload: &str) -> Pin {
        Pin::first(
            "apps/web.yaml",
            workload,
            "docker.io/library/nginx:1.27",
            &format!("nginx:1.27@{D}"),
        )
    }

    fn mapping() -> NameMapping {
        NameMapping {
            default_namespace: "default".into(),
            name_prefix: "prod-".into(),
            name_suffix: String::new(),
        }
    }

    /// What one manifest file, scanned as the pipeline scans it, promises.
    fn promised_by(file: &str, text: &str, mapping: &NameMapping) -> Promised {
        let path = Path::new(file);
        let outcome = crate::manifest::scan(path, text.as_bytes()).unwrap();
        from_fields(outcome.fields.iter().map(|f| (path, f)), mapping)
    }

    /// The expected workloads, as `namespace/Kind/name`.
    fn workloads(promised: &Promised) -> Vec<String> {
        promised
            .expected
            .iter()
            .map(|e| e.workload.to_string())
            .collect()
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
        let promised = from_plan(&block, &mapping());
        assert_eq!(
            workloads(&promised),
            vec!["default/Deployment/prod-api", "shop/Deployment/prod-web"]
        );
        assert_eq!(
            promised.not_verified,
            vec![NotVerified {
                image: "docker.io/library/nginx:1.27".into(),
                workload: "kustomization".into(),
                reason: NotVerifiedReason::KustomizeImage,
                detail: None,
            }]
        );
        assert_eq!(promised.expected[0].digest.to_string(), D);
    }

    fn helm_row(owner: &str, file: &str, key_path: &str, image: &str) -> Pin {
        Pin {
            file: file.into(),
            workload: owner.parse().unwrap(),
            container: key_path.into(),
            image: image.into(),
            ..pin("Deployment/web")
        }
    }

    #[test]
    fn helm_rows_of_a_plan_become_helm_pins_named_by_their_release() {
        let block = PlanBlock {
            version: 1,
            target: "main".into(),
            pins: vec![
                helm_row(
                    "helm:HelmRelease/shop/web",
                    "apps/web.yaml",
                    "image.tag",
                    "ghcr.io/acme/web:1.4",
                ),
                helm_row(
                    "helm:Application/argocd/web/sources[1]",
                    "apps/app.yaml",
                    "image.digest",
                    "docker.io/library/nginx:1.27",
                ),
                helm_row(
                    "helm:values",
                    "charts/web/values-prod.yaml",
                    "image",
                    "ghcr.io/acme/api:2",
                ),
                helm_row("helm:Chart/web", "apps/x.yaml", "image", "ghcr.io/acme/x:1"),
            ],
        };
        let promised = from_plan(&block, &mapping());
        assert!(promised.expected.is_empty());
        type Row<'a> = (String, Option<usize>, &'a str, &'a str, Option<&'a str>);
        let seen: Vec<Row> = promised
            .helm
            .iter()
            .map(|p| {
                (
                    p.release.to_string(),
                    p.line,
                    p.key_path.as_str(),
                    p.repository.as_str(),
                    p.tag.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                (
                    "Argo CD Application argocd/web".to_string(),
                    None,
                    "image.digest",
                    "docker.io/library/nginx",
                    Some("1.27")
                ),
                (
                    "Flux HelmRelease shop/web".to_string(),
                    None,
                    "image.tag",
                    "ghcr.io/acme/web",
                    Some("1.4")
                ),
                (
                    "values file charts/web/values-prod.yaml".to_string(),
                    None,
                    "image",
                    "ghcr.io/acme/api",
                    Some("2")
                ),
            ]
        );
        assert!(promised.helm.iter().all(|p| p.digest.to_string() == D));
        assert_eq!(
            promised.not_verified,
            [NotVerified {
                image: "ghcr.io/acme/x:1".into(),
                workload: "helm:Chart/web".into(),
                reason: NotVerifiedReason::UnreadableWorkload,
                detail: Some("apps/x.yaml: helm:Chart/web names no Helm release".into()),
            }]
        );
    }

    #[test]
    fn pinned_helm_values_of_a_commit_become_helm_pins_with_file_and_line() {
        let release = format!(
            "apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata: {{name: web}}\nspec:\n  values:\n    image:\n      repository: ghcr.io/acme/web\n      tag: '1.4'\n      digest: {D}\n    sidecar:\n      image: {{repository: busybox, tag: '1'}}\n"
        );
        let promised = promised_by("apps/release.yaml", &release, &mapping());
        assert!(promised.expected.is_empty() && promised.not_verified.is_empty());
        assert_eq!(
            promised.helm,
            [HelmPin {
                file: "apps/release.yaml".into(),
                line: Some(8),
                key_path: "image.tag".into(),
                repository: "ghcr.io/acme/web".into(),
                tag: Some("1.4".into()),
                digest: D.parse().unwrap(),
                release: ReleaseRef::HelmRelease {
                    namespace: None,
                    name: "web".into(),
                },
            }],
            "the unpinned sidecar promises nothing"
        );
    }

    #[test]
    fn only_pinned_containers_of_a_commit_are_expected() {
        let text = format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web, namespace: shop}}\nspec:\n  template:\n    spec:\n      containers:\n      - {{name: app, image: 'nginx:1.27@{D}'}}\n      - {{name: side, image: 'busybox:1'}}\n"
        );
        let promised = promised_by("w.yaml", &text, &NameMapping::default());
        assert_eq!(promised.expected.len(), 1);
        assert_eq!(
            promised.expected[0].workload.to_string(),
            "shop/Deployment/web"
        );
        assert_eq!(promised.expected[0].container, "app");
        assert!(promised.not_verified.is_empty());
    }

    #[test]
    fn a_kind_not_read_live_is_not_verified_with_its_reason_not_an_error() {
        let text = format!(
            "apiVersion: v1\nkind: ReplicationController\nmetadata: {{name: legacy}}\nspec:\n  template:\n    spec:\n      containers:\n      - {{name: app, image: 'busybox:1@{D}'}}\n---\napiVersion: batch/v1\nkind: CronJob\nmetadata: {{name: nightly}}\nspec:\n  jobTemplate:\n    spec:\n      template:\n        spec:\n          containers:\n          - {{name: job, image: 'busybox:1@{D}'}}\n"
        );
        let promised = promised_by("w.yaml", &text, &mapping());
        // A CronJob is verified (through the Jobs it runs); a ReplicationController is not.
        assert_eq!(workloads(&promised), ["default/CronJob/prod-nightly"]);
        assert_eq!(
            promised.not_verified[0].reason,
            NotVerifiedReason::KindNotVerifiable
        );
        assert_eq!(
            promised.not_verified[0].workload,
            "default/ReplicationController/prod-legacy"
        );
    }
}

/// The verifier's side of rendering: which pins of a commit become which expectations.
#[cfg(test)]
mod rendered_tests {
    use super::*;
    use crate::render::fixtures::repo;
    use std::path::PathBuf;

    const D: &str = "sha256:5555555555555555555555555555555555555555555555555555555555555555";

    const BASE: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  template:\n    spec:\n      containers:\n      - {name: web, image: 'ghcr.io/acme/web:1.3'}\n";

    /// The repository's files; those under `paths` are scanned as the pipeline scans them,
    /// the kustomizations among them rendered from the whole repository.
    fn promised(files: &[(&str, &str)], paths: &[&str]) -> Promised {
        let under = |p: &str| paths.iter().any(|dir| p.starts_with(dir));
        let scanned: Vec<ScannedFile> = files
            .iter()
            .filter(|(p, _)| under(p))
            .map(|(p, text)| ScannedFile {
                path: PathBuf::from(p),
                source: text.as_bytes().to_vec(),
                fields: crate::manifest::scan(Path::new(p), text.as_bytes())
                    .unwrap()
                    .fields,
            })
            .collect();
        let kustomizations: Vec<PathBuf> = files
            .iter()
            .filter(|(p, _)| under(p) && p.ends_with("kustomization.yaml"))
            .map(|(p, _)| PathBuf::from(p))
            .collect();
        let renders = crate::render::render_roots(&kustomizations, &repo(files));
        let mapping = NameMapping {
            default_namespace: "default".into(),
            ..NameMapping::default()
        };
        from_manifests(&scanned, &renders, |_| true, &mapping)
    }

    fn expected(p: &Promised) -> Vec<String> {
        p.expected
            .iter()
            .map(|e| format!("{} {} {}", e.workload, e.container, e.pinned_ref))
            .collect()
    }

    /// A base Deployment (`deployment`) and a production overlay over it (`namespace: prod`,
    /// `namePrefix: prod-`, then `extra`), with `paths` configured.
    fn overlay_over_base(deployment: &str, extra: &str, paths: &[&str]) -> Promised {
        let overlay =
            format!("resources: [../../base]\nnamespace: prod\nnamePrefix: prod-\n{extra}");
        promised(
            &[
                ("base/kustomization.yaml", "resources: [deployment.yaml]\n"),
                ("base/deployment.yaml", deployment),
                ("overlays/prod/kustomization.yaml", &overlay),
            ],
            paths,
        )
    }

    #[test]
    fn an_overlay_images_entry_is_expected_on_the_workload_the_overlay_deploys() {
        let entry = format!("images:\n- name: ghcr.io/acme/web\n  newTag: '1.4'\n  digest: {D}\n");
        let p = overlay_over_base(BASE, &entry, &["overlays/prod"]);
        assert_eq!(
            expected(&p),
            [format!(
                "prod/Deployment/prod-web web ghcr.io/acme/web:1.4@{D}"
            )]
        );
        assert_eq!(p.expected[0].digest.to_string(), D);
        assert!(p.not_verified.is_empty(), "{:?}", p.not_verified);
    }

    #[test]
    fn a_container_pinned_in_the_base_counts_once_under_its_rendered_name() {
        let pinned = BASE.replace("web:1.3'", &format!("web:1.3@{D}'"));
        let p = overlay_over_base(&pinned, "", &["base", "overlays"]);
        // The base is included by the overlay: not a root, never judged as Deployment/web.
        assert_eq!(
            expected(&p),
            [format!(
                "prod/Deployment/prod-web web ghcr.io/acme/web:1.3@{D}"
            )]
        );
        assert!(p.not_verified.is_empty());
    }

    #[test]
    fn an_entry_reaching_no_container_is_not_verified_and_says_so() {
        let entry = format!("images:\n- name: ghcr.io/acme/api\n  newTag: '2'\n  digest: {D}\n");
        let p = overlay_over_base(BASE, &entry, &["overlays/prod"]);
        assert!(p.expected.is_empty());
        assert_eq!(
            p.not_verified,
            [NotVerified {
                image: "ghcr.io/acme/api:2".into(),
                workload: "kustomization".into(),
                reason: NotVerifiedReason::KustomizeImageUnused,
                detail: Some(
                    "overlays/prod/kustomization.yaml: no container that overlays/prod/kustomization.yaml deploys has an image named ghcr.io/acme/api".into()
                ),
            }]
        );
    }

    #[test]
    fn pins_of_a_kustomization_tagpin_cannot_render_are_not_verified_with_the_reason() {
        let prod = format!(
            "resources: [github.com/acme/platform//web?ref=v1, ../../base]\nnamespace: prod\npatches: [{{path: image.yaml}}]\nimages:\n- {{name: ghcr.io/acme/web, newTag: '1.4', digest: {D}}}\n"
        );
        let patch = BASE.replace("web:1.3'", &format!("web:1.5@{D}'"));
        let p = promised(
            &[
                ("base/kustomization.yaml", "resources: [deployment.yaml]\n"),
                ("base/deployment.yaml", BASE),
                ("overlays/prod/kustomization.yaml", &prod),
                ("overlays/prod/image.yaml", &patch),
            ],
            &["overlays/prod"],
        );
        assert!(p.expected.is_empty());
        let seen: Vec<(&str, &str, NotVerifiedReason)> = p
            .not_verified
            .iter()
            .map(|n| (n.workload.as_str(), n.image.as_str(), n.reason))
            .collect();
        let rendered = format!("ghcr.io/acme/web:1.4@{D}");
        let patched = format!("ghcr.io/acme/web:1.5@{D}");
        let not_rendered = NotVerifiedReason::KustomizeNotRendered;
        assert_eq!(
            seen,
            [
                ("prod/Deployment/web", rendered.as_str(), not_rendered),
                ("default/Deployment/web", patched.as_str(), not_rendered),
            ]
        );
        let detail = p.not_verified[0].detail.as_deref().unwrap();
        assert!(
            detail.starts_with("overlays/prod/kustomization.yaml:1:13: resource github.com/acme/platform//web?ref=v1 is remote")
                && detail.contains("overlays/prod/kustomization.yaml:3:18: patch image.yaml: the patch sets `containers`"),
            "{detail}"
        );
    }

    #[test]
    fn manifests_no_kustomization_reaches_are_read_as_before() {
        let pinned = BASE.replace("web:1.3'", &format!("web:1.3@{D}'"));
        let p = promised(
            &[
                ("apps/web.yaml", &pinned),
                ("apps/kustomization.yaml", "resources: []\n"),
            ],
            &["apps"],
        );
        assert_eq!(
            expected(&p),
            [format!(
                "default/Deployment/web web ghcr.io/acme/web:1.3@{D}"
            )]
        );
    }
}
