//! What the cluster is expected to run: (workload, container, pinned reference, digest).
//!
//! Read from a pull request's plan block, or from the manifests of a commit. Pure: callers
//! hand in the plan block or the scanned manifests. A pin the verifier cannot check (a
//! kustomization `images:` entry, a kind it cannot read live) is not an error: it comes back as
//! [`NotVerified`] with its reason, so the verdict can say what was not checked.

use serde::Serialize;

use crate::manifest::{ImageField, Origin};
use crate::proposal::PlanBlock;
use crate::reference::{Digest, Reference};
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
    /// A kustomization `images:` entry names an image, not a workload.
    KustomizeImage,
    /// A kind the verifier does not read live (see
    /// [`crate::workload::WorkloadKind::is_verifiable`]).
    KindNotVerifiable,
    /// The manifest object has no `metadata.name`.
    NoName,
    /// The plan block names the workload in a form tagpin cannot read.
    UnreadableWorkload,
    /// The Argo CD Application or Flux Kustomization that applies the pin's file has applied
    /// it, but its inventory holds no workload of this kind and name (see `verify::gitops`).
    #[serde(rename = "not_in_gitops_inventory")]
    NotInGitOpsInventory,
    /// Several inventory entries of the GitOps objects that apply the pin's file could be
    /// this workload.
    #[serde(rename = "ambiguous_in_gitops_inventory")]
    AmbiguousInGitOpsInventory,
}

impl std::fmt::Display for NotVerifiedReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            NotVerifiedReason::KustomizeImage => "a kustomization images: entry names no workload",
            NotVerifiedReason::KindNotVerifiable => "tagpin cannot read this kind live yet",
            NotVerifiedReason::NoName => "the manifest has no metadata.name",
            NotVerifiedReason::UnreadableWorkload => "the workload in the plan block is unreadable",
            NotVerifiedReason::NotInGitOpsInventory => {
                "the GitOps object applying it lists no such workload"
            }
            NotVerifiedReason::AmbiguousInGitOpsInventory => {
                "several workloads listed by the GitOps objects applying it could be this one"
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
}

/// What a source promises: the pins to check, and the pins that cannot be checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Promised {
    pub expected: Vec<Expected>,
    pub not_verified: Vec<NotVerified>,
}

impl Promised {
    /// Sorts and deduplicates, so that equal sources give equal expectations.
    fn finish(mut self) -> Promised {
        self.expected.sort();
        self.expected.dedup();
        self.not_verified.sort();
        self.not_verified.dedup();
        self
    }

    /// Decides, in one place, whether a pin on `owner` can be checked live.
    fn add(
        &mut self,
        owner: &Owner,
        container: &str,
        image: &str,
        pinned_ref: &str,
        digest: Digest,
        mapping: &NameMapping,
    ) {
        // Named as the verdicts name workloads: in their live namespace, with the live name.
        let workload = match owner {
            Owner::Workload(id) => mapping.live(id).to_string(),
            Owner::Kustomization => owner.to_string(),
        };
        let not_verified = |reason| NotVerified {
            image: image.to_string(),
            workload: workload.clone(),
            reason,
        };
        match owner {
            Owner::Kustomization => self
                .not_verified
                .push(not_verified(NotVerifiedReason::KustomizeImage)),
            Owner::Workload(id) if !id.kind.is_verifiable() => self
                .not_verified
                .push(not_verified(NotVerifiedReason::KindNotVerifiable)),
            Owner::Workload(id) if id.name.is_empty() => self
                .not_verified
                .push(not_verified(NotVerifiedReason::NoName)),
            Owner::Workload(id) => self.expected.push(Expected {
                workload: mapping.live(id),
                container: container.to_string(),
                pinned_ref: pinned_ref.to_string(),
                digest,
            }),
        }
    }
}

/// Expectations from a pull request's plan block.
pub fn from_plan(block: &PlanBlock, mapping: &NameMapping) -> Promised {
    let mut promised = Promised::default();
    for pin in &block.pins {
        promised.add(
            &pin.workload,
            &pin.container,
            &pin.image,
            &pin.new_value,
            pin.new_digest.clone(),
            mapping,
        );
    }
    promised.finish()
}

/// Expectations from the image fields of manifests at a commit: every field whose image is
/// pinned (`repo:tag@digest`, `repo@digest`, or a kustomize entry with `digest:`). Unpinned
/// images promise nothing.
pub fn from_fields<'a>(
    fields: impl IntoIterator<Item = &'a ImageField>,
    mapping: &NameMapping,
) -> Promised {
    let mut promised = Promised::default();
    for field in fields {
        let (owner, container, digest) = match &field.origin {
            Origin::Container {
                workload,
                container,
                ..
            } => (
                Owner::Workload(workload.clone()),
                container.as_str(),
                Reference::parse(&field.value)
                    .ok()
                    .and_then(|r| r.digest().cloned()),
            ),
            Origin::KustomizeImage {
                name,
                current_digest,
                ..
            } => (
                Owner::Kustomization,
                name.as_str(),
                current_digest
                    .as_deref()
                    .and_then(|d| Digest::parse(d).ok()),
            ),
        };
        let Some(digest) = digest else {
            continue;
        };
        promised.add(
            &owner,
            container,
            &field.value,
            &field.value,
            digest,
            mapping,
        );
    }
    promised.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proposal::Pin;

    const D: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";

    fn pin(workload: &str) -> Pin {
        Pin {
            file: "apps/web.yaml".into(),
            workload: workload.parse().unwrap(),
            container: "app".into(),
            image: "docker.io/library/nginx:1.27".into(),
            new_value: format!("nginx:1.27@{D}"),
            new_digest: D.parse().unwrap(),
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
        let promised = from_plan(&block, &mapping());
        assert_eq!(
            promised
                .expected
                .iter()
                .map(|e| e.workload.to_string())
                .collect::<Vec<_>>(),
            vec!["default/Deployment/prod-api", "shop/Deployment/prod-web"]
        );
        assert_eq!(
            promised.not_verified,
            vec![NotVerified {
                image: "docker.io/library/nginx:1.27".into(),
                workload: "kustomization".into(),
                reason: NotVerifiedReason::KustomizeImage
            }]
        );
        assert_eq!(promised.expected[0].digest.to_string(), D);
    }

    #[test]
    fn only_pinned_containers_of_a_commit_are_expected() {
        let text = format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web, namespace: shop}}\nspec:\n  template:\n    spec:\n      containers:\n      - {{name: app, image: 'nginx:1.27@{D}'}}\n      - {{name: side, image: 'busybox:1'}}\n"
        );
        let outcome =
            crate::manifest::scan(std::path::Path::new("w.yaml"), text.as_bytes()).unwrap();
        let promised = from_fields(&outcome.fields, &NameMapping::default());
        assert_eq!(promised.expected.len(), 1);
        assert_eq!(
            promised.expected[0].workload.to_string(),
            "shop/Deployment/web"
        );
        assert_eq!(promised.expected[0].container, "app");
        assert!(promised.not_verified.is_empty());
    }

    #[test]
    fn a_pinned_cronjob_is_not_verified_with_its_reason_not_an_error() {
        let text = format!(
            "apiVersion: batch/v1\nkind: CronJob\nmetadata: {{name: nightly}}\nspec:\n  jobTemplate:\n    spec:\n      template:\n        spec:\n          containers:\n          - {{name: job, image: 'busybox:1@{D}'}}\n"
        );
        let outcome =
            crate::manifest::scan(std::path::Path::new("cron.yaml"), text.as_bytes()).unwrap();
        let promised = from_fields(&outcome.fields, &mapping());
        assert!(promised.expected.is_empty());
        assert_eq!(
            promised.not_verified[0].reason,
            NotVerifiedReason::KindNotVerifiable
        );
        assert_eq!(
            promised.not_verified[0].workload,
            "default/CronJob/prod-nightly"
        );
    }
}
