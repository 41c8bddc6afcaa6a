//! Which workload an image belongs to: a typed identity shared by the scanner, the planner, the
//! plan block, the verifier's expectations and its verdicts.
//!
//! Before this type, the identity travelled as a `"ns/Kind/name"` string formatted in three
//! places and split back apart in a fourth; a kind the verifier could not read surfaced as an
//! error in the middle of a run. The text form is kept exactly (it is in pull request bodies
//! and `--output json`), but only [`WorkloadId`]'s `Display` and `FromStr` write and read it.

use std::fmt;
use std::str::FromStr;

/// The kinds whose pod template tagpin pins: the Kubernetes and OpenShift kinds, Argo
/// Rollouts' `Rollout`, and any other kind that carries a pod template where those kinds carry
/// one ([`WorkloadKind::Other`]: an OpenKruise CloneSet, a Knative Service).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
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
    /// Argo Rollouts (`argoproj.io`): a Deployment's pod template, rolled out in canary or
    /// blue-green steps.
    Rollout,
    /// A kind tagpin knows nothing of but that it carries a pod template at
    /// `spec.template.spec` or `spec.jobTemplate.spec.template.spec`. Named with its API group
    /// (`CloneSet.apps.kruise.io`), since a kind name alone is ambiguous: Knative's `Service`
    /// holds a pod template, the core `Service` does not.
    Other(OtherKind),
}

/// A kind outside [`WorkloadKind`]'s known ones, with its API group.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OtherKind {
    /// The `kind:` value: `CloneSet`.
    pub kind: String,
    /// The API group of its `apiVersion`: `apps.kruise.io`; empty for the core group.
    pub group: String,
}

/// Where the kinds of Kubernetes put a pod spec: workloads under `spec.template`, CronJobs
/// under `spec.jobTemplate`. Other kinds are read at these places only.
const TEMPLATE_POD_SPEC: &[&str] = &["spec", "template", "spec"];
const JOB_TEMPLATE_POD_SPEC: &[&str] = &["spec", "jobTemplate", "spec", "template", "spec"];

impl WorkloadKind {
    /// The kinds tagpin knows by name ([`WorkloadKind::Other`] aside).
    pub const ALL: [WorkloadKind; 11] = [
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
        WorkloadKind::Rollout,
    ];

    /// The `kind:` value, as written in manifests (without the group of an other kind).
    pub fn as_str(&self) -> &str {
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
            WorkloadKind::Rollout => "Rollout",
            WorkloadKind::Other(other) => &other.kind,
        }
    }

    /// The known kind named by a manifest's `kind:`, whatever its group.
    pub fn from_kind(kind: &str) -> Option<WorkloadKind> {
        WorkloadKind::ALL.into_iter().find(|k| k.as_str() == kind)
    }

    /// The kind of an object with this `kind:` and `apiVersion:`: a known kind when its API
    /// group is one that kind is served in (`apps/v1` Deployment, the legacy
    /// `extensions/v1beta1` one), else an [`WorkloadKind::Other`] kind. An OpenKruise Advanced
    /// StatefulSet (`apps.kruise.io`) is not an `apps/v1` StatefulSet, and verifying it as one
    /// would judge an object that is not there.
    pub fn of(kind: &str, api_version: &str) -> WorkloadKind {
        let group = api_version.rsplit_once('/').map_or("", |(group, _)| group);
        match WorkloadKind::from_kind(kind) {
            Some(known) if known.groups().contains(&group) => known,
            _ => WorkloadKind::Other(OtherKind {
                kind: kind.to_string(),
                group: group.to_string(),
            }),
        }
    }

    /// The API groups this kind is served in; the first is the one the verifier reads.
    fn groups(&self) -> &[&str] {
        match self {
            WorkloadKind::Pod | WorkloadKind::PodTemplate | WorkloadKind::ReplicationController => {
                &[""]
            }
            WorkloadKind::Deployment | WorkloadKind::DaemonSet | WorkloadKind::ReplicaSet => {
                &["apps", "extensions"]
            }
            WorkloadKind::StatefulSet => &["apps"],
            WorkloadKind::Job | WorkloadKind::CronJob => &["batch"],
            // OpenShift 3 served DeploymentConfigs in the core group too (`apiVersion: v1`).
            WorkloadKind::DeploymentConfig => &["apps.openshift.io", ""],
            WorkloadKind::Rollout => &["argoproj.io"],
            WorkloadKind::Other(_) => &[],
        }
    }

    /// The API group the live object is read in (and Argo CD's inventory names it by).
    pub fn group(&self) -> &str {
        match self {
            WorkloadKind::Other(other) => &other.group,
            known => known.groups().first().copied().unwrap_or(""),
        }
    }

    /// Where the pod spec may sit in an object of this kind, as paths of mapping keys: one
    /// place for a known kind, the places Kubernetes kinds use for an other kind.
    pub fn pod_spec_paths(&self) -> &'static [&'static [&'static str]] {
        match self {
            WorkloadKind::Pod => &[&["spec"]],
            WorkloadKind::PodTemplate => &[&["template", "spec"]],
            WorkloadKind::CronJob => &[JOB_TEMPLATE_POD_SPEC],
            WorkloadKind::Deployment
            | WorkloadKind::StatefulSet
            | WorkloadKind::DaemonSet
            | WorkloadKind::ReplicaSet
            | WorkloadKind::ReplicationController
            | WorkloadKind::Job
            | WorkloadKind::DeploymentConfig
            | WorkloadKind::Rollout => &[TEMPLATE_POD_SPEC],
            WorkloadKind::Other(_) => &[TEMPLATE_POD_SPEC, JOB_TEMPLATE_POD_SPEC],
        }
    }

    /// Whether the verifier can read this kind live and judge its rollout. The one place that
    /// decides it: every other kind is reported as not verified, never as an error.
    pub(crate) fn is_verifiable(&self) -> bool {
        match self {
            WorkloadKind::Pod
            | WorkloadKind::Deployment
            | WorkloadKind::StatefulSet
            | WorkloadKind::DaemonSet
            | WorkloadKind::ReplicaSet
            | WorkloadKind::Job
            | WorkloadKind::DeploymentConfig
            | WorkloadKind::CronJob
            | WorkloadKind::Rollout => true,
            // A PodTemplate runs nothing, a ReplicationController's rollout has no status
            // tagpin reads yet, and an other kind's status means what its controller says.
            WorkloadKind::PodTemplate
            | WorkloadKind::ReplicationController
            | WorkloadKind::Other(_) => false,
        }
    }
}

/// `Deployment`; an other kind with its group, `CloneSet.apps.kruise.io`.
impl fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WorkloadKind::Other(OtherKind { kind, group }) if !group.is_empty() => {
                write!(f, "{kind}.{group}")
            }
            kind => f.write_str(kind.as_str()),
        }
    }
}

impl serde::Serialize for WorkloadKind {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl WorkloadKind {
    /// Reads the text [`Display`](fmt::Display) writes: a known kind's name, or
    /// `Kind.group` for an other kind (a group never starts with a capital, a kind always
    /// does).
    fn parse(text: &str) -> Option<WorkloadKind> {
        match text.split_once('.') {
            None => WorkloadKind::from_kind(text),
            Some((kind, group)) => {
                let valid = kind.starts_with(|c: char| c.is_ascii_uppercase())
                    && kind.chars().all(|c| c.is_ascii_alphanumeric())
                    && !group.is_empty()
                    && group.chars().all(|c| {
                        c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-'
                    });
                valid.then(|| WorkloadKind::of(kind, &format!("{group}/v1")))
            }
        }
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
    pub(crate) fn in_namespace_or(&self, namespace: &str) -> WorkloadId {
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
        let kind = WorkloadKind::parse(kind).ok_or_else(|| error("unknown kind"))?;
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

    /// Asserts each of `texts` reads as a `T` that is written back as that text.
    #[track_caller]
    fn assert_read_back<T: FromStr + fmt::Display>(texts: &[&str])
    where
        T::Err: fmt::Debug,
    {
        for text in texts {
            let value: T = text.parse().unwrap();
            assert_eq!(value.to_string(), *text);
        }
    }

    #[test]
    fn identities_read_back_as_written() {
        assert_read_back::<Owner>(&[
            "shop/Deployment/web",
            "Deployment/web",
            "ns/CronJob/nightly",
            "kustomization",
            "helm:values",
            "helm:HelmRelease/flux-system/podinfo",
            "helm:Application/argocd/web/sources[1]",
        ]);
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
    fn a_known_kind_is_known_only_in_its_own_api_groups() {
        assert_eq!(
            WorkloadKind::of("Deployment", "apps/v1"),
            WorkloadKind::Deployment
        );
        assert_eq!(
            WorkloadKind::of("Deployment", "extensions/v1beta1"),
            WorkloadKind::Deployment
        );
        assert_eq!(WorkloadKind::of("Pod", "v1"), WorkloadKind::Pod);
        assert_eq!(
            WorkloadKind::of("Rollout", "argoproj.io/v1alpha1"),
            WorkloadKind::Rollout
        );
        // OpenKruise's Advanced StatefulSet is another object than an apps/v1 StatefulSet.
        let kruise = WorkloadKind::of("StatefulSet", "apps.kruise.io/v1beta1");
        assert_eq!(kruise.to_string(), "StatefulSet.apps.kruise.io");
        assert!(!kruise.is_verifiable());
        assert_eq!(kruise.group(), "apps.kruise.io");
        assert_eq!(WorkloadKind::Deployment.group(), "apps");
        assert_eq!(WorkloadKind::Rollout.group(), "argoproj.io");
    }

    #[test]
    fn other_kinds_are_named_with_their_group_and_read_back() {
        assert_read_back::<WorkloadId>(&[
            "default/CloneSet.apps.kruise.io/sample",
            "default/Service.serving.knative.dev/helloworld-go",
            "shop/Rollout/web",
        ]);
        let knative: WorkloadId = "default/Service.serving.knative.dev/hello".parse().unwrap();
        assert_eq!(
            knative.kind,
            WorkloadKind::Other(OtherKind {
                kind: "Service".into(),
                group: "serving.knative.dev".into()
            })
        );
        for bad in [
            "ns/service.x/web",
            "ns/Service./web",
            "ns/Ser vice.x/web",
            "ns/A.B/web",
        ] {
            assert_eq!(
                bad.parse::<WorkloadId>().unwrap_err().reason,
                "unknown kind",
                "{bad}"
            );
        }
    }

    #[test]
    fn a_namespace_is_filled_only_when_missing() {
        let own: WorkloadId = "own/Pod/a".parse().unwrap();
        let none: WorkloadId = "Pod/b".parse().unwrap();
        assert_eq!(own.in_namespace_or("x").to_string(), "own/Pod/a");
        assert_eq!(none.in_namespace_or("x").to_string(), "x/Pod/b");
    }
}
