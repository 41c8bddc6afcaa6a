//! Which workload an image belongs to: a typed identity shared by the scanner, the planner, the
//! plan block, the verifier's expectations and its verdicts.
//!
//! Before this type, the identity travelled as a `"ns/Kind/name"` string formatted in three
//! places and split back apart in a fourth; a kind the verifier could not read surfaced as an
//! error in the middle of a run. The text form is kept exactly (it is in pull request bodies
//! and `--output json`), but only [`WorkloadId`]'s `Display` and `FromStr` write and read it.

use std::fmt;
use std::str::FromStr;

/// The Kubernetes (and OpenShift) kinds whose pod template tagpin pins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum WorkloadKind {
    Pod,
    PodTemplate,
    Deployment,
    StatefulSet,
    DaemonSet,
    ReplicaSet,
    ReplicationController,
    Job,
    CronJob,
    DeploymentConfig,
}

impl WorkloadKind {
    pub const ALL: [WorkloadKind; 10] = [
        WorkloadKind::Pod,
        WorkloadKind::PodTemplate,
        WorkloadKind::Deployment,
        WorkloadKind::StatefulSet,
        WorkloadKind::DaemonSet,
        WorkloadKind::ReplicaSet,
        WorkloadKind::ReplicationController,
        WorkloadKind::Job,
        WorkloadKind::CronJob,
        WorkloadKind::DeploymentConfig,
    ];

    /// The `kind:` value, as written in manifests.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadKind::Pod => "Pod",
            WorkloadKind::PodTemplate => "PodTemplate",
            WorkloadKind::Deployment => "Deployment",
            WorkloadKind::StatefulSet => "StatefulSet",
            WorkloadKind::DaemonSet => "DaemonSet",
            WorkloadKind::ReplicaSet => "ReplicaSet",
            WorkloadKind::ReplicationController => "ReplicationController",
            WorkloadKind::Job => "Job",
            WorkloadKind::CronJob => "CronJob",
            WorkloadKind::DeploymentConfig => "DeploymentConfig",
        }
    }

    /// The kind named by a manifest's `kind:`, if tagpin pins its images.
    pub fn from_kind(kind: &str) -> Option<WorkloadKind> {
        WorkloadKind::ALL.into_iter().find(|k| k.as_str() == kind)
    }

    /// Where the pod spec sits in an object of this kind, as a path of mapping keys.
    pub fn pod_spec_path(self) -> &'static [&'static str] {
        match self {
            WorkloadKind::Pod => &["spec"],
            WorkloadKind::PodTemplate => &["template", "spec"],
            WorkloadKind::CronJob => &["spec", "jobTemplate", "spec", "template", "spec"],
            WorkloadKind::Deployment
            | WorkloadKind::StatefulSet
            | WorkloadKind::DaemonSet
            | WorkloadKind::ReplicaSet
            | WorkloadKind::ReplicationController
            | WorkloadKind::Job
            | WorkloadKind::DeploymentConfig => &["spec", "template", "spec"],
        }
    }

    /// Whether the verifier can read this kind live and judge its rollout. The one place that
    /// decides it: every other kind is reported as not verified, never as an error.
    pub fn is_verifiable(self) -> bool {
        match self {
            WorkloadKind::Pod
            | WorkloadKind::Deployment
            | WorkloadKind::StatefulSet
            | WorkloadKind::DaemonSet
            | WorkloadKind::ReplicaSet
            | WorkloadKind::Job
            | WorkloadKind::DeploymentConfig
            | WorkloadKind::CronJob => true,
            // A PodTemplate runs nothing, and a ReplicationController's rollout has no status
            // tagpin reads yet.
            WorkloadKind::PodTemplate | WorkloadKind::ReplicationController => false,
        }
    }
}

impl fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for WorkloadKind {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// One workload: `namespace/Kind/name`, or `Kind/name` when the manifest names no namespace
/// and none could be inferred.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WorkloadId {
    pub namespace: Option<String>,
    pub kind: WorkloadKind,
    /// Empty when the object has no `metadata.name`.
    pub name: String,
}

impl WorkloadId {
    /// The same workload in `namespace` when it names none itself.
    pub fn in_namespace_or(&self, namespace: &str) -> WorkloadId {
        WorkloadId {
            namespace: Some(
                self.namespace
                    .clone()
                    .unwrap_or_else(|| namespace.to_string()),
            ),
            ..self.clone()
        }
    }
}

impl fmt::Display for WorkloadId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{ns}/{}/{}", self.kind, self.name),
            None => write!(f, "{}/{}", self.kind, self.name),
        }
    }
}

/// Why a text is not a workload identity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not a workload (namespace/Kind/name or Kind/name): {reason}")]
pub struct WorkloadParseError {
    pub text: String,
    pub reason: &'static str,
}

impl FromStr for WorkloadId {
    type Err = WorkloadParseError;

    fn from_str(text: &str) -> Result<WorkloadId, WorkloadParseError> {
        let error = |reason| WorkloadParseError {
            text: text.to_string(),
            reason,
        };
        let parts: Vec<&str> = text.split('/').collect();
        let (namespace, kind, name) = match parts.as_slice() {
            [ns, kind, name] if !ns.is_empty() => (Some(ns.to_string()), *kind, *name),
            [kind, name] => (None, *kind, *name),
            _ => return Err(error("expected two or three parts")),
        };
        let kind = WorkloadKind::from_kind(kind).ok_or_else(|| error("unknown kind"))?;
        Ok(WorkloadId {
            namespace,
            kind,
            name: name.to_string(),
        })
    }
}

/// What an image field belongs to, as plans, plan blocks and JSON output name it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Owner {
    Workload(WorkloadId),
    /// An entry of a kustomization's `images:` list: it names no workload by itself.
    Kustomization,
    /// An image in Helm values, named by what holds the values: `values` for a values file,
    /// `HelmRelease/<ns>/<name>`, `Application/<ns>/<name>` (with `/sources[<i>]` for a
    /// multi-source one). Written `helm:<source>`.
    Helm(String),
}

impl Owner {
    pub fn workload(&self) -> Option<&WorkloadId> {
        match self {
            Owner::Workload(id) => Some(id),
            Owner::Kustomization | Owner::Helm(_) => None,
        }
    }
}

const KUSTOMIZATION: &str = "kustomization";
const HELM_PREFIX: &str = "helm:";

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Owner::Workload(id) => id.fmt(f),
            Owner::Kustomization => f.write_str(KUSTOMIZATION),
            Owner::Helm(source) => write!(f, "{HELM_PREFIX}{source}"),
        }
    }
}

impl FromStr for Owner {
    type Err = WorkloadParseError;

    fn from_str(text: &str) -> Result<Owner, WorkloadParseError> {
        if text == KUSTOMIZATION {
            Ok(Owner::Kustomization)
        } else if let Some(source) = text.strip_prefix(HELM_PREFIX) {
            Ok(Owner::Helm(source.to_string()))
        } else {
            text.parse().map(Owner::Workload)
        }
    }
}

/// The text form is public (PR plan blocks, `--output json`), so it is (de)serialized as text.
impl serde::Serialize for Owner {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Owner {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Owner, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl serde::Serialize for WorkloadId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_read_back_as_written() {
        for text in [
            "shop/Deployment/web",
            "Deployment/web",
            "ns/CronJob/nightly",
            "kustomization",
            "helm:values",
            "helm:HelmRelease/flux-system/podinfo",
            "helm:Application/argocd/web/sources[1]",
        ] {
            let owner: Owner = text.parse().unwrap();
            assert_eq!(owner.to_string(), text);
        }
        let owner: Owner = "shop/StatefulSet/db".parse().unwrap();
        assert_eq!(
            owner.workload(),
            Some(&WorkloadId {
                namespace: Some("shop".into()),
                kind: WorkloadKind::StatefulSet,
                name: "db".into()
            })
        );
    }

    #[test]
    fn malformed_identities_say_why() {
        assert_eq!(
            "a/b/c/d".parse::<WorkloadId>().unwrap_err().reason,
            "expected two or three parts"
        );
        assert_eq!(
            "shop/Service/web".parse::<WorkloadId>().unwrap_err().reason,
            "unknown kind"
        );
        assert!("/Deployment/web".parse::<WorkloadId>().is_err());
    }

    #[test]
    fn every_kind_reads_back_from_its_name() {
        for kind in WorkloadKind::ALL {
            assert_eq!(WorkloadKind::from_kind(kind.as_str()), Some(kind));
        }
        assert_eq!(WorkloadKind::from_kind("Service"), None);
    }

    #[test]
    fn a_namespace_is_filled_only_when_missing() {
        let own: WorkloadId = "own/Pod/a".parse().unwrap();
        let none: WorkloadId = "Pod/b".parse().unwrap();
        assert_eq!(own.in_namespace_or("x").to_string(), "own/Pod/a");
        assert_eq!(none.in_namespace_or("x").to_string(), "x/Pod/b");
    }
}
