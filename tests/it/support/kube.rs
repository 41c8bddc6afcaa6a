//! A local Kubernetes API server for integration tests.
//!
//! tagpin proves that a cluster converged by reading live workloads and each
//! pod's `status.containerStatuses[].imageID` with the `kube` crate. No real
//! API server can run on the test machines (no containers, no kind), so this
//! module serves the Kubernetes API on a loopback port, with
//! in-memory state, for the real `kube` client to talk to.
//!
//! It follows the real server where a client could tell the difference:
//! - The real paths: `/api/v1/namespaces/{ns}/pods[/{name}]`,
//!   `/apis/{group}/{version}/namespaces/{ns}/{plural}[/{name}]`, cluster-wide
//!   lists such as `/api/v1/pods`, and discovery (`/api`, `/api/v1`, `/apis`,
//!   `/apis/{group}/{version}`, `/version`), including aggregated discovery
//!   when the client asks for it in `Accept`.
//! - Objects are decoded and re-encoded with `k8s-openapi` types, as the real
//!   server's typed storage does, so a fixture that a real server would refuse
//!   fails loudly here too. OpenShift's DeploymentConfig has no such type; its
//!   metadata and pod template are checked with the types that exist. The
//!   GitOps custom resources (Argo CD Applications, Flux Kustomizations,
//!   GitRepositories and HelmReleases) are checked against their CRDs' schemas
//!   (`tests/fixtures/crds/`), and can be uninstalled ([`KubeServer::uninstall`]):
//!   their paths then answer 404, as on a cluster without the CRD.
//! - One global, monotonic `resourceVersion`, a full change history, lists that
//!   page with an opaque `continue` token over a consistent snapshot (with
//!   `remainingItemCount` only when no selector is given, as etcd does), and
//!   watches that replay from a `resourceVersion`, turn selector transitions
//!   into ADDED/DELETED, send BOOKMARKs and close after `timeoutSeconds`.
//! - Errors are real `Status` objects: 401 Unauthorized, 403 Forbidden with the
//!   real message, 404 NotFound, 400 BadRequest, 410 Expired.
//! - Impersonation as the real server's filter does it: `Impersonate-User`
//!   (and `Impersonate-Group`) headers need the `impersonate` verb on
//!   `serviceaccounts` in the account's namespace (on `users`, `groups`
//!   cluster-wide for others), else 403 with the real message; a
//!   ServiceAccount gets its groups (`system:serviceaccounts`,
//!   `system:serviceaccounts:<ns>`, `system:authenticated`). The impersonated
//!   user then holds only what [`KubeServer::grant_to`] gave it or its groups,
//!   and Forbidden messages name it.
//! - RBAC is simulated: reads are allowed by default and can be narrowed or
//!   denied per (verb, resource, namespace). Writes are refused unless a test
//!   grants them ([`KubeServer::grant`]): in verify mode tagpin must not change
//!   the cluster, so every POST/PUT/PATCH/DELETE is refused with 403 and kept
//!   in [`KubeServer::writes`]. A refused write fails the test that caused it:
//!   [`KubeServer::assert_no_writes`] panics, and so does `Drop` if any is left
//!   that the test did not take with [`KubeServer::take_writes`].
//! - Granted writes (operator mode: a controller's status, Leases, Events) are
//!   served as the real registry serves them (`kube/writes.rs`): 201/200 with
//!   the stored object, 409 Conflict on a stale `resourceVersion`, 409
//!   AlreadyExists, 422 Invalid, the `status` subresource, merge and JSON
//!   patches, server-side apply, finalizers.
//! - Custom resources: a CustomResourceDefinition created through the API or
//!   with [`KubeServer::register_crd`] is served from then on, discovery
//!   included, its schema checking and pruning objects (`kube/crd.rs`).
//!   Secrets, Leases (`coordination.k8s.io/v1`) and Events (core `v1` and
//!   `events.k8s.io/v1`) are built-in types.
//! - Every request is logged with its Kubernetes verb and resource, and
//!   counted ([`KubeServer::request_counts`]).
//!
//! Adding a built-in kind is one entry in `RESOURCES` (and its group in
//! `GROUPS` if new).
//!
//! Test support panics with a clear message instead of returning errors.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, SystemTime};

use axum::body::{Body, Bytes};
use axum::extract::{Query, Request, State as AxumState};
use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use axum::Router;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event as CoreEvent, Pod, PodTemplateSpec, Secret};
use k8s_openapi::api::events::v1::Event as EventsV1Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};
use tokio::sync::{broadcast, mpsc, watch};
use tokio::task::JoinHandle;

mod crd;
// The examples that borrow this module (`#[path]`) test no manifests against a CRD.
#[allow(unused_imports)]
pub use crd::check_custom_resource;
mod reviews;
mod writes;

/// The bearer token [`KubeServer::start`] accepts.
pub const DEFAULT_TOKEN: &str = "tagpin-test-token";

/// The user the token belongs to, as Forbidden messages name it: tagpin runs
/// in-cluster as the `tagpin` service account of the `tagpin` namespace.
pub const DEFAULT_USER: &str = "system:serviceaccount:tagpin:tagpin";

/// The real server closes a watch without `timeoutSeconds` after 30 to 60
/// minutes; this one picks the middle.
const DEFAULT_WATCH_TIMEOUT: Duration = Duration::from_secs(45 * 60);

/// The real watch cache sends a bookmark about once a minute.
const DEFAULT_BOOKMARK_INTERVAL: Duration = Duration::from_secs(60);

/// The first resourceVersion handed out. Not 1, so that a client that treats
/// small numbers specially, or confuses a count with a version, shows it.
const FIRST_RESOURCE_VERSION: u64 = 1000;

/// Request bodies are only kept for the write log; tagpin sends none.
const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// Every verb the real server advertises for these resources in discovery.
/// RBAC decides what a client may do, not discovery.
const RESOURCE_VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// The annotation that marks the bookmark ending a watch's initial events.
const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

// ---------------------------------------------------------------------------
// The resource types served
// ---------------------------------------------------------------------------

/// One served resource type: what discovery says about it and how its objects
/// are checked.
struct ResourceType {
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    singular: &'static str,
    short_names: &'static [&'static str],
    /// Field labels the real server accepts in `fieldSelector` for this type,
    /// besides `metadata.name` and `metadata.namespace`.
    field_labels: &'static [&'static str],
    /// Whether the real server keeps `metadata.generation` for it (bumped on
    /// every spec change). Pods are left out: tagpin does not read theirs.
    has_generation: bool,
    /// Decodes an object as the real server's storage would and re-encodes it.
    normalize: fn(Value) -> Result<Value, String>,
    /// Namespaced, or cluster-scoped (CustomResourceDefinitions, cluster-scoped
    /// custom resources): then objects are stored under the namespace `""`.
    namespaced: bool,
    /// Whether `/status` is a subresource of its own: writes to the object
    /// then leave `status` alone, and writes to `/status` change only it.
    status_subresource: bool,
    /// For a type registered from a CRD: its schema, which checks and prunes
    /// every stored object (after `normalize` checked the metadata).
    schema: Option<&'static crd::CrdSchema>,
}

impl ResourceType {
    fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `pods`, `deployments.apps`: how messages name the resource.
    fn group_resource(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    fn supports_field(&self, label: &str) -> bool {
        label == "metadata.name"
            || label == "metadata.namespace"
            || self.field_labels.contains(&label)
    }
}

static RESOURCES: &[ResourceType] = &[
    ResourceType {
        group: "",
        version: "v1",
        kind: "Pod",
        plural: "pods",
        singular: "pod",
        short_names: &["po"],
        field_labels: &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        has_generation: false,
        normalize: typed::<Pod>,
        namespaced: true,
        status_subresource: true,
        schema: None,
    },
    ResourceType {
        group: "apps",
        version: "v1",
        kind: "Deployment",
        plural: "deployments",
        singular: "deployment",
        short_names: &["deploy"],
        field_labels: &[],
        has_generation: true,
        normalize: typed::<Deployment>,
        namespaced: true,
        status_subresource: true,
        schema: None,
    },
    ResourceType {
        group: "apps",
        version: "v1",
        kind: "StatefulSet",
        plural: "statefulsets",
        singular: "statefulset",
        short_names: &["sts"],
        field_labels: &[],
        has_generation: true,
        normalize: typed::<StatefulSet>,
        namespaced: true,
        status_subresource: true,
        schema: None,
    },
    ResourceType {
        group: "apps",
        version: "v1",
        kind: "DaemonSet",
        plural: "daemonsets",
        singular: "daemonset",
        short_names: &["ds"],
        field_labels: &[],
        has_generation: true,
        normalize: typed::<DaemonSet>,
        namespaced: true,
        status_subresource: true,
        schema: None,
    },
    ResourceType {
        group: "apps",
        version: "v1",
        kind: "ReplicaSet",
        plural: "replicasets",
        singular: "replicaset",
        short_names: &["rs"],
        field_labels: &["status.replicas"],
        has_generation: true,
        normalize: typed::<ReplicaSet>,
        namespaced: true,
        status_subresource: true,
        schema: None,
    },
    ResourceType {
        group: "batch",
        version: "v1",
        kind: "Job",
        plural: "jobs",
        singular: "job",
        short_names: &[],
        field_labels: &["status.successful"],
        has_generation: true,
        normalize: typed::<Job>,
        namespaced: true,
        status_subresource: true,
        schema: None,
    },
    ResourceType {
        group: "batch",
        version: "v1",
        kind: "CronJob",
        plural: "cronjobs",
        singular: "cronjob",
        short_names: &["cj"],
        field_labels: &[],
        has_generation: true,
        normalize: typed::<CronJob>,
        namespaced: true,
        status_subresource: true,
        schema: None,
    },
    ResourceType {
        group: "apps.openshift.io",
        version: "v1",
        kind: "DeploymentConfig",
        plural: "deploymentconfigs",
        singular: "deploymentconfig",
        short_names: &["dc"],
        field_labels: &[],
        has_generation: true,
        normalize: deployment_config,
        namespaced: true,
        status_subresource: true,
        schema: None,
    },
    ResourceType {
        group: "argoproj.io",
        version: "v1alpha1",
        kind: "Application",
        plural: "applications",
        singular: "application",
        short_names: &["app", "apps"],
        field_labels: &[],
        has_generation: true,
        normalize: argo_cd_application,
        namespaced: true,
        status_subresource: false,
        schema: None,
    },
    ResourceType {
        group: "kustomize.toolkit.fluxcd.io",
        version: "v1",
        kind: "Kustomization",
        plural: "kustomizations",
        singular: "kustomization",
        short_names: &["ks"],
        field_labels: &[],
        has_generation: true,
        normalize: flux_kustomization,
        namespaced: true,
        status_subresource: true,
        schema: None,
    },
    ResourceType {
        group: "source.toolkit.fluxcd.io",
        version: "v1",
        kind: "GitRepository",
        plural: "gitrepositories",
        singular: "gitrepository",
        short_names: &["gitrepo"],
        field_labels: &[],
        has_generation: true,
        normalize: flux_git_repository,
        namespaced: true,
        status_subresource: true,
        schema: None,
    },
    ResourceType {
        group: "",
        version: "v1",
        kind: "Secret",
        plural: "secrets",
        singular: "secret",
        short_names: &[],
        field_labels: &["type"],
        has_generation: false,
        normalize: typed::<Secret>,
        namespaced: true,
        status_subresource: false,
        schema: None,
    },
    ResourceType {
        group: "",
        version: "v1",
        kind: "Event",
        plural: "events",
        singular: "event",
        short_names: &["ev"],
        field_labels: &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        has_generation: false,
        normalize: typed::<CoreEvent>,
        namespaced: true,
        status_subresource: false,
        schema: None,
    },
    ResourceType {
        group: "events.k8s.io",
        version: "v1",
        kind: "Event",
        plural: "events",
        singular: "event",
        short_names: &["ev"],
        field_labels: &["reason", "type", "reportingController"],
        has_generation: false,
        normalize: events_v1_event,
        namespaced: true,
        status_subresource: false,
        schema: None,
    },
    ResourceType {
        group: "coordination.k8s.io",
        version: "v1",
        kind: "Lease",
        plural: "leases",
        singular: "lease",
        short_names: &[],
        field_labels: &[],
        has_generation: false,
        normalize: typed::<Lease>,
        namespaced: true,
        status_subresource: false,
        schema: None,
    },
    ResourceType {
        group: "apiextensions.k8s.io",
        version: "v1",
        kind: "CustomResourceDefinition",
        plural: "customresourcedefinitions",
        singular: "customresourcedefinition",
        short_names: &["crd", "crds"],
        field_labels: &[],
        has_generation: true,
        normalize: typed::<CustomResourceDefinition>,
        namespaced: false,
        status_subresource: true,
        schema: None,
    },
    ResourceType {
        group: "helm.toolkit.fluxcd.io",
        version: "v2",
        kind: "HelmRelease",
        plural: "helmreleases",
        singular: "helmrelease",
        short_names: &["hr"],
        field_labels: &[],
        has_generation: true,
        normalize: flux_helm_release,
        namespaced: true,
        status_subresource: true,
        schema: None,
    },
];

/// The API groups under `/apis`, in the order the real server lists them
/// (built-in groups first, then those of CRDs).
const GROUPS: &[(&str, &str)] = &[
    ("apps", "v1"),
    ("events.k8s.io", "v1"),
    ("batch", "v1"),
    ("coordination.k8s.io", "v1"),
    ("apiextensions.k8s.io", "v1"),
    ("apps.openshift.io", "v1"),
    ("argoproj.io", "v1alpha1"),
    ("kustomize.toolkit.fluxcd.io", "v1"),
    ("source.toolkit.fluxcd.io", "v1"),
    ("helm.toolkit.fluxcd.io", "v2"),
];

/// The groups whose resources come from CRDs, which [`KubeServer::uninstall`]
/// can take away.
pub const CRD_GROUPS: &[&str] = &[
    "argoproj.io",
    "kustomize.toolkit.fluxcd.io",
    "source.toolkit.fluxcd.io",
    "helm.toolkit.fluxcd.io",
];

/// Decodes into the `k8s-openapi` type and encodes again: unknown fields are
/// dropped and wrongly typed ones refused, as by the real server's storage.
fn typed<K: DeserializeOwned + Serialize>(obj: Value) -> Result<Value, String> {
    let decoded: K = serde_json::from_value(obj).map_err(|e| e.to_string())?;
    serde_json::to_value(&decoded).map_err(|e| e.to_string())
}

/// Checks and re-encodes `metadata` as the ObjectMeta it is, for kinds that
/// have no `k8s-openapi` type of their own.
fn typed_metadata(obj: &mut Value) -> Result<(), String> {
    let metadata = obj.get("metadata").cloned().unwrap_or_else(|| json!({}));
    let metadata: meta::ObjectMeta =
        serde_json::from_value(metadata).map_err(|e| format!("metadata: {e}"))?;
    obj["metadata"] = serde_json::to_value(metadata).map_err(|e| e.to_string())?;
    Ok(())
}

/// OpenShift's DeploymentConfig has no `k8s-openapi` type: check the parts
/// that have one (metadata and the pod template) and keep the rest as given.
fn deployment_config(mut obj: Value) -> Result<Value, String> {
    typed_metadata(&mut obj)?;
    if let Some(spec) = obj.get_mut("spec") {
        if !spec.is_object() {
            return Err("spec: expected an object".to_string());
        }
        if let Some(template) = spec.get("template").cloned() {
            let template: PodTemplateSpec =
                serde_json::from_value(template).map_err(|e| format!("spec.template: {e}"))?;
            spec["template"] = serde_json::to_value(template).map_err(|e| e.to_string())?;
        }
    }
    Ok(obj)
}

fn argo_cd_application(obj: Value) -> Result<Value, String> {
    custom_resource("argocd-application-v1alpha1.yaml", obj)
}

fn flux_kustomization(obj: Value) -> Result<Value, String> {
    custom_resource("flux-kustomization-v1.yaml", obj)
}

fn flux_git_repository(obj: Value) -> Result<Value, String> {
    custom_resource("flux-gitrepository-v1.yaml", obj)
}

fn flux_helm_release(obj: Value) -> Result<Value, String> {
    custom_resource("flux-helmrelease-v2.yaml", obj)
}

/// A custom resource, checked as the real server checks it: `metadata` as
/// ObjectMeta, the whole object against the CRD's `openAPIV3Schema` (a copy in
/// `tests/fixtures/crds/`, trimmed to what tagpin reads and what it requires).
fn custom_resource(schema: &str, mut obj: Value) -> Result<Value, String> {
    typed_metadata(&mut obj)?;
    let problems: Vec<String> = crd_schema(schema)
        .iter_errors(&obj)
        .map(|e| match e.instance_path().as_str() {
            "" => e.to_string(),
            at => format!("{at}: {e}"),
        })
        .collect();
    if problems.is_empty() {
        Ok(obj)
    } else {
        Err(format!(
            "the CRD schema refuses it ({schema}): {}",
            problems.join("; ")
        ))
    }
}

/// The compiled schemas of `tests/fixtures/crds/`, read once.
fn crd_schema(file: &str) -> &'static jsonschema::Validator {
    static SCHEMAS: OnceLock<BTreeMap<String, jsonschema::Validator>> = OnceLock::new();
    let schemas = SCHEMAS.get_or_init(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/crds");
        [
            "argocd-application-v1alpha1.yaml",
            "flux-kustomization-v1.yaml",
            "flux-gitrepository-v1.yaml",
            "flux-helmrelease-v2.yaml",
        ]
        .into_iter()
        .map(|name| {
            let path = dir.join(name);
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("KubeServer: read {}: {e}", path.display()));
            let schema: Value = serde_yaml::from_str(&text)
                .unwrap_or_else(|e| panic!("KubeServer: parse {}: {e}", path.display()));
            let validator = jsonschema::validator_for(&schema)
                .unwrap_or_else(|e| panic!("KubeServer: compile {}: {e}", path.display()));
            (name.to_string(), validator)
        })
        .collect()
    });
    &schemas[file]
}

/// A registered custom resource keeps only its metadata typed: the rest is
/// checked by its CRD's schema (`ResourceType::schema`).
fn metadata_only(mut obj: Value) -> Result<Value, String> {
    typed_metadata(&mut obj)?;
    Ok(obj)
}

/// The `events.k8s.io/v1` Event, with the fields the real server's validation
/// requires of a new-style event (`k8s.io/kubernetes/pkg/apis/core/validation`,
/// `ValidateEventCreate` for events.k8s.io/v1).
fn events_v1_event(obj: Value) -> Result<Value, String> {
    let obj = typed::<EventsV1Event>(obj)?;
    for field in [
        "eventTime",
        "reportingController",
        "reportingInstance",
        "action",
        "reason",
    ] {
        if obj[field].as_str().is_none_or(str::is_empty) {
            return Err(format!("{field}: Required value"));
        }
    }
    if !matches!(obj["type"].as_str(), Some("Normal" | "Warning")) {
        return Err(format!(
            "type: Unsupported value: {}: supported values: \"Normal\", \"Warning\"",
            obj["type"]
        ));
    }
    if obj["note"].as_str().is_some_and(|n| n.len() > 1024) {
        return Err("note: Too long: may not be more than 1024 bytes".to_string());
    }
    Ok(obj)
}

/// Every type ever registered from a CRD, after the built-ins: the type at
/// index `RESOURCES.len() + i`. Global and append-only, so an index stays
/// valid for the whole test binary; each server serves only the ones it
/// registered itself ([`State::custom`]). The same registration made by
/// several tests is stored once.
fn registered() -> MutexGuard<'static, Vec<&'static ResourceType>> {
    static REGISTERED: OnceLock<Mutex<Vec<&'static ResourceType>>> = OnceLock::new();
    REGISTERED
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The type at an index handed out by [`State::resource_by_path`] and friends.
fn ty(resource: usize) -> &'static ResourceType {
    match RESOURCES.get(resource) {
        Some(ty) => ty,
        None => registered()[resource - RESOURCES.len()],
    }
}

/// The index of a type registered from a CRD, registering it if no equal
/// registration exists yet.
fn intern(new: ResourceType) -> usize {
    let mut all = registered();
    let same = |t: &ResourceType| {
        t.group == new.group
            && t.version == new.version
            && t.kind == new.kind
            && t.plural == new.plural
            && t.singular == new.singular
            && t.short_names == new.short_names
            && t.namespaced == new.namespaced
            && t.status_subresource == new.status_subresource
            && t.schema.map(|s| &s.source) == new.schema.map(|s| &s.source)
    };
    if let Some(i) = all.iter().position(|t| same(t)) {
        return RESOURCES.len() + i;
    }
    all.push(Box::leak(Box::new(new)));
    RESOURCES.len() + all.len() - 1
}

/// The index of the CustomResourceDefinition type among the built-ins.
fn crd_resource() -> usize {
    RESOURCES
        .iter()
        .position(|r| r.kind == "CustomResourceDefinition")
        .expect("KubeServer: CustomResourceDefinition is a built-in type")
}

/// What `metadata.generation` counts changes of: everything but metadata
/// and status.
fn without_metadata_and_status(obj: &Value) -> Value {
    let mut rest = obj.clone();
    if let Some(map) = rest.as_object_mut() {
        map.remove("metadata");
        map.remove("status");
    }
    rest
}

// ---------------------------------------------------------------------------
// Public types: what tests configure and read back
// ---------------------------------------------------------------------------

/// One request as the server saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedRequest {
    pub method: String,
    pub path: String,
    /// The raw query string, empty when there was none.
    pub query: String,
    /// Whether the request carried the configured bearer token.
    pub authenticated: bool,
    pub accept: Option<String>,
    /// The HTTP status answered (200 for a watch that was started).
    pub status: u16,
    /// The request body as text; only writes have one.
    pub body: String,
    /// The Kubernetes verb (`get`, `list`, `watch`, `create`, `update`,
    /// `patch`, `delete`), or the lower-case method for discovery.
    pub verb: String,
    /// The resource's plural, with `/status` for the subresource; empty for
    /// discovery.
    pub resource: String,
    /// The `Impersonate-User` header, when the request carried one.
    pub impersonate_user: Option<String>,
    /// The `Impersonate-Group` headers, in order.
    pub impersonate_groups: Vec<String>,
}

impl RecordedRequest {
    /// The decoded value of one query parameter.
    pub fn query_param(&self, name: &str) -> Option<String> {
        parse_query(&self.query)
            .into_iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v)
    }
}

/// An RBAC grant: these verbs on these resources (plural names such as
/// `pods`, or `*`), cluster-wide (a ClusterRoleBinding) or in one namespace
/// (a RoleBinding). API groups are not distinguished: no two served resources
/// share a plural.
#[derive(Clone, Debug)]
pub struct Grant {
    pub verbs: Vec<String>,
    pub resources: Vec<String>,
    /// `None`: every namespace and cluster-wide requests.
    pub namespace: Option<String>,
}

impl Grant {
    pub fn cluster(verbs: &[&str], resources: &[&str]) -> Grant {
        Grant {
            verbs: verbs.iter().map(|v| v.to_string()).collect(),
            resources: resources.iter().map(|r| r.to_string()).collect(),
            namespace: None,
        }
    }

    pub fn namespaced(namespace: &str, verbs: &[&str], resources: &[&str]) -> Grant {
        Grant {
            namespace: Some(namespace.to_string()),
            ..Grant::cluster(verbs, resources)
        }
    }

    fn covers(&self, verb: &str, resource: &str, namespace: Option<&str>) -> bool {
        let verb_ok = self.verbs.iter().any(|v| v == "*" || v == verb);
        let resource_ok = self.resources.iter().any(|r| r == "*" || r == resource);
        let namespace_ok = match (&self.namespace, namespace) {
            (None, _) => true,
            (Some(granted), Some(asked)) => granted == asked,
            (Some(_), None) => false,
        };
        verb_ok && resource_ok && namespace_ok
    }
}

/// A test shortcut that RBAC itself does not have (it only adds): take one
/// (verb, resource, namespace) away from whatever the grants allow. A denial
/// in one namespace also denies cluster-wide requests for that verb and
/// resource, since a subject that cannot read one namespace cannot hold a
/// cluster-wide grant either.
#[derive(Clone, Debug)]
struct Denial {
    verb: String,
    resource: String,
    namespace: Option<String>,
}

impl Denial {
    fn denies(&self, verb: &str, resource: &str, namespace: Option<&str>) -> bool {
        let verb_hit = self.verb == "*" || self.verb == verb;
        let resource_hit = self.resource == "*" || self.resource == resource;
        let namespace_hit = match (&self.namespace, namespace) {
            (None, _) => true,
            (Some(denied), Some(asked)) => denied == asked,
            (Some(_), None) => true,
        };
        verb_hit && resource_hit && namespace_hit
    }
}

/// Which object a test loaded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectRef {
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

// ---------------------------------------------------------------------------
// State
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ChangeKind {
    Added,
    Modified,
    Deleted,
}

/// One write to the store, kept forever: watches replay from it and paged
/// lists read a snapshot from it.
#[derive(Debug)]
struct Change {
    rv: u64,
    resource: usize,
    namespace: String,
    name: String,
    kind: ChangeKind,
    /// The object before a modification, to see selector transitions.
    old: Option<Value>,
    /// The object after the change; for a deletion, the last state with the
    /// deletion's resourceVersion, as the real DELETED event carries.
    new: Value,
}

/// (resource index, namespace, name); the namespace is `""` for a
/// cluster-scoped object.
type Key = (usize, String, String);

/// Who writes an object, which decides what [`State::commit`] keeps of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Origin {
    /// The test itself ([`KubeServer::apply`]): what it gives is kept, even
    /// `metadata.generation`, as a fixture may need.
    Test,
    /// A client through the API: server-managed metadata comes from the
    /// stored object, never from the request.
    Client,
    /// A DELETE of an object with finalizers: as `Client`, and the deletion
    /// timestamp it sets is kept.
    Deletion,
}

struct State {
    token: String,
    user: String,
    /// Tokens a TokenReview accepts, with their user and groups (`reviews.rs`).
    user_tokens: BTreeMap<String, (String, Vec<String>)>,
    rv: u64,
    /// Watches and continue tokens from before this are answered 410 Expired.
    compacted_rv: u64,
    objects: BTreeMap<Key, Value>,
    history: Vec<Arc<Change>>,
    grants: Vec<Grant>,
    /// What impersonated users and groups hold, by user or group name (see
    /// [`KubeServer::grant_to`]); `grants` is the token's user's alone.
    subject_grants: BTreeMap<String, Vec<Grant>>,
    denials: Vec<Denial>,
    requests: Vec<RecordedRequest>,
    writes: Vec<RecordedRequest>,
    bookmark_interval: Duration,
    next_uid: u64,
    /// Transient failures to answer instead of the next matching requests.
    faults: Vec<Fault>,
    /// CRD groups taken away with [`KubeServer::uninstall`].
    uninstalled: Vec<String>,
    /// Path fragments of the requests never answered (see [`KubeServer::hang`]).
    hangs: Vec<String>,
    /// The paths of the requests held unanswered so far.
    hung: Vec<String>,
    /// The types registered from CRDs on this server (indices for [`ty`]).
    custom: Vec<usize>,
    /// Requests without credentials are let in (see [`KubeServer::allow_anonymous`]).
    anonymous: bool,
    /// Writes to answer 409 Conflict, as if another client had written first (see
    /// [`KubeServer::conflict_writes`]): (path fragment, how many more).
    write_conflicts: Vec<(String, usize)>,
    /// The last configuration each field manager applied to each object
    /// (server-side apply), to remove what it no longer applies.
    applied: BTreeMap<(Key, String), Value>,
}

/// A transient failure the real API server gives under load or during an upgrade: the next
/// `times` GET requests whose path contains `path_contains` are answered `status` (a
/// `Status` object; 429 carries `Retry-After: 1`, as the server's priority and fairness does).
#[derive(Debug, Clone)]
pub struct Fault {
    pub path_contains: String,
    pub status: u16,
    pub times: usize,
}

struct Shared {
    state: Mutex<State>,
    /// Every change, to the running watches.
    changes: broadcast::Sender<Arc<Change>>,
    /// Set when the server is dropped, to end the running watches.
    shutdown: watch::Sender<bool>,
    addr: std::net::SocketAddr,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl State {
    fn next_uid(&mut self) -> String {
        self.next_uid += 1;
        format!("7a9c0000-0000-4000-8000-{:012x}", self.next_uid)
    }

    /// Stores a change, records it and tells the watches. Called with the lock
    /// held, so the history and the broadcast stay in the same order.
    fn publish(&mut self, shared_changes: &broadcast::Sender<Arc<Change>>, change: Change) {
        let change = Arc::new(change);
        self.history.push(Arc::clone(&change));
        // No receiver is fine: nobody watches.
        let _ = shared_changes.send(change);
    }

    /// The types this server serves now: the built-ins (less the CRD groups
    /// taken away with [`KubeServer::uninstall`]), then those registered.
    fn served(&self) -> Vec<usize> {
        (0..RESOURCES.len())
            .filter(|&i| !self.uninstalled.iter().any(|g| g == RESOURCES[i].group))
            .chain(self.custom.iter().copied())
            .collect()
    }

    /// The types tests may name: every built-in (uninstalled CRD groups too:
    /// their objects stay for a reinstall), then those registered.
    fn known(&self) -> Vec<usize> {
        (0..RESOURCES.len())
            .chain(self.custom.iter().copied())
            .collect()
    }

    fn resource_by_path(&self, group: &str, version: &str, plural: &str) -> Option<usize> {
        self.served().into_iter().find(|&i| {
            let t = ty(i);
            t.group == group && t.version == version && t.plural == plural
        })
    }

    /// The served type for an object's `apiVersion` and `kind`.
    fn resource_for_object(&self, obj: &Value) -> Result<usize, String> {
        let api_version = obj["apiVersion"].as_str().unwrap_or_default();
        let kind = obj["kind"].as_str().unwrap_or_default();
        self.known()
            .into_iter()
            .find(|&i| ty(i).api_version() == api_version && ty(i).kind == kind)
            .ok_or_else(|| format!("this test server does not serve {api_version} {kind}"))
    }

    /// The served type a test names by kind, plural, singular or short name,
    /// or as `plural.group` (`events.events.k8s.io`) where two groups share a
    /// name. Built-ins come first: core `Event` before `events.k8s.io`'s.
    fn resource_named(&self, name: &str) -> usize {
        let wanted = name.to_ascii_lowercase();
        self.known()
            .into_iter()
            .find(|&i| {
                let r = ty(i);
                r.kind.to_ascii_lowercase() == wanted
                    || r.plural == wanted
                    || r.singular == wanted
                    || r.short_names.contains(&wanted.as_str())
                    || r.group_resource() == wanted
            })
            .unwrap_or_else(|| panic!("KubeServer: no served resource type is called {name:?}"))
    }

    /// The (group, version) pairs under `/apis`: built-in groups first, then
    /// those of CRDs, as the real server lists them.
    fn groups(&self) -> Vec<(&'static str, &'static str)> {
        let mut groups: Vec<(&'static str, &'static str)> = GROUPS
            .iter()
            .copied()
            .filter(|(group, _)| !self.uninstalled.iter().any(|g| g == group))
            .collect();
        for &i in &self.custom {
            let pair = (ty(i).group, ty(i).version);
            if !groups.contains(&pair) {
                groups.push(pair);
            }
        }
        groups
    }

    /// Checks an object as the real server's storage would: typed decoding,
    /// then the CRD schema for a registered type (pruning what it does not
    /// declare: the pruned paths are returned).
    fn normalize(resource: usize, obj: Value) -> Result<(Value, Vec<String>), String> {
        let t = ty(resource);
        let mut obj = (t.normalize)(obj)?;
        if resource == crd_resource() {
            // Refused before anything is stored, as the real server validates a CRD.
            crd::resource_type(&obj)?;
        }
        let pruned = match t.schema {
            Some(schema) => schema.check(&mut obj)?,
            None => Vec::new(),
        };
        Ok((obj, pruned))
    }

    /// Test-side writes: creates or replaces an object whatever its state.
    fn apply(
        &mut self,
        changes: &broadcast::Sender<Arc<Change>>,
        obj: Value,
    ) -> Result<Value, String> {
        let resource = self.resource_for_object(&obj)?;
        let t = ty(resource);
        let (obj, _) = State::normalize(resource, obj)?;
        let name = obj["metadata"]["name"]
            .as_str()
            .filter(|n| !n.is_empty())
            .ok_or("metadata.name is required (generateName is not supported)")?
            .to_string();
        let namespace = obj["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if t.namespaced && namespace.is_empty() {
            return Err(
                "metadata.namespace is required: use apply_in or load_yaml with a namespace"
                    .to_string(),
            );
        }
        if !t.namespaced && !namespace.is_empty() {
            return Err(format!(
                "{} is cluster-scoped: metadata.namespace must be empty",
                t.kind
            ));
        }
        let key = (resource, namespace, name);
        let old = self.objects.get(&key).cloned();
        let stored = self.commit(changes, key, obj, old, Origin::Test);
        if resource == crd_resource() {
            return self.register_crd(changes, &stored);
        }
        Ok(stored)
    }

    /// Stores `obj` under `key` as the real server's registry does after a
    /// write: sets `resourceVersion`, keeps `uid` and `creationTimestamp`
    /// (or sets new ones), counts `metadata.generation` (bumped when anything
    /// but metadata and status changed; a test may give its own), finishes a
    /// deletion whose last finalizer went, and tells the watches.
    fn commit(
        &mut self,
        changes: &broadcast::Sender<Arc<Change>>,
        key: Key,
        mut obj: Value,
        old: Option<Value>,
        origin: Origin,
    ) -> Value {
        let keep_given_generation = origin == Origin::Test;
        let t = ty(key.0);
        self.rv += 1;
        let rv = self.rv;
        let uid = match old.as_ref().and_then(|o| o["metadata"]["uid"].as_str()) {
            Some(uid) => uid.to_string(),
            None => self.next_uid(),
        };
        let created = old
            .as_ref()
            .and_then(|o| o["metadata"]["creationTimestamp"].as_str())
            .map(str::to_string)
            .unwrap_or_else(|| rfc3339(SystemTime::now()));
        let given_generation = obj["metadata"]["generation"].as_i64();
        if !obj["metadata"].is_object() {
            obj["metadata"] = json!({});
        }
        let metadata = &mut obj["metadata"];
        metadata["resourceVersion"] = json!(rv.to_string());
        if keep_given_generation {
            if metadata.get("uid").is_none() {
                metadata["uid"] = json!(uid);
            }
            if metadata.get("creationTimestamp").is_none() {
                metadata["creationTimestamp"] = json!(created);
            }
        } else {
            metadata["uid"] = json!(uid);
            metadata["creationTimestamp"] = json!(created);
            // Only the server sets these; a client's values are dropped.
            let deletion = old
                .as_ref()
                .map(|o| o["metadata"]["deletionTimestamp"].clone())
                .filter(|d| !d.is_null())
                .or_else(|| {
                    (origin == Origin::Deletion)
                        .then(|| metadata["deletionTimestamp"].clone())
                        .filter(|d| !d.is_null())
                });
            match deletion {
                Some(d) => {
                    metadata["deletionTimestamp"] = d;
                    metadata["deletionGracePeriodSeconds"] = json!(0);
                }
                None => {
                    if let Some(m) = metadata.as_object_mut() {
                        m.remove("deletionTimestamp");
                        m.remove("deletionGracePeriodSeconds");
                    }
                }
            }
        }
        if t.has_generation && !(keep_given_generation && given_generation.is_some()) {
            let generation = match &old {
                None => 1,
                Some(old) => {
                    let old_generation = old["metadata"]["generation"].as_i64().unwrap_or(1);
                    if without_metadata_and_status(old) == without_metadata_and_status(&obj) {
                        old_generation
                    } else {
                        old_generation + 1
                    }
                }
            };
            obj["metadata"]["generation"] = json!(generation);
        } else if !t.has_generation {
            if let Some(m) = obj["metadata"].as_object_mut() {
                if !keep_given_generation {
                    m.remove("generation");
                }
            }
        }

        let (resource, namespace, name) = key.clone();
        let finished = !obj["metadata"]["deletionTimestamp"].is_null()
            && obj["metadata"]["finalizers"]
                .as_array()
                .is_none_or(Vec::is_empty);
        let kind = if finished {
            // The last finalizer went: the deletion completes, as the real
            // garbage collector finishes it.
            self.objects.remove(&key);
            self.applied.retain(|(k, _), _| *k != key);
            ChangeKind::Deleted
        } else {
            self.objects.insert(key, obj.clone());
            if old.is_some() {
                ChangeKind::Modified
            } else {
                ChangeKind::Added
            }
        };
        self.publish(
            changes,
            Change {
                rv,
                resource,
                namespace,
                name,
                kind,
                old,
                new: obj.clone(),
            },
        );
        obj
    }

    /// Serves the version a CustomResourceDefinition defines (kept until the
    /// CRD is deleted) and marks the CRD Established, as the real
    /// apiextensions controller does.
    fn register_crd(
        &mut self,
        changes: &broadcast::Sender<Arc<Change>>,
        crd: &Value,
    ) -> Result<Value, String> {
        let resource = intern(crd::resource_type(crd)?);
        let t = ty(resource);
        self.custom.retain(|&i| {
            let other = ty(i);
            !(other.group == t.group && other.version == t.version && other.plural == t.plural)
        });
        self.custom.push(resource);
        let name = crd["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let key = (crd_resource(), String::new(), name);
        let Some(stored) = self.objects.get(&key).cloned() else {
            return Ok(crd.clone());
        };
        let mut established = stored.clone();
        established["status"] = crd::established_status(&stored, &rfc3339(SystemTime::now()));
        Ok(self.commit(changes, key, established, Some(stored), Origin::Client))
    }

    /// Stops serving what a deleted CRD defined; its objects go with it.
    fn unregister_crd(&mut self, crd: &Value) {
        let group = crd["spec"]["group"].as_str().unwrap_or_default();
        let plural = crd["spec"]["names"]["plural"].as_str().unwrap_or_default();
        let gone: Vec<usize> = self
            .custom
            .iter()
            .copied()
            .filter(|&i| ty(i).group == group && ty(i).plural == plural)
            .collect();
        self.custom.retain(|i| !gone.contains(i));
        self.objects.retain(|(r, _, _), _| !gone.contains(r));
    }

    fn delete(
        &mut self,
        changes: &broadcast::Sender<Arc<Change>>,
        resource: usize,
        namespace: &str,
        name: &str,
    ) -> bool {
        let key = (resource, namespace.to_string(), name.to_string());
        let Some(mut obj) = self.objects.remove(&key) else {
            return false;
        };
        self.applied.retain(|(k, _), _| *k != key);
        if resource == crd_resource() {
            self.unregister_crd(&obj);
        }
        self.rv += 1;
        obj["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        self.publish(
            changes,
            Change {
                rv: self.rv,
                resource,
                namespace: namespace.to_string(),
                name: name.to_string(),
                kind: ChangeKind::Deleted,
                old: None,
                new: obj,
            },
        );
        true
    }

    /// The objects of one type as they were at `rv`, read back from the
    /// history, as etcd reads an older revision.
    fn snapshot(&self, resource: usize, rv: u64) -> BTreeMap<Key, Value> {
        let mut objects = BTreeMap::new();
        for change in self.history.iter().take_while(|c| c.rv <= rv) {
            if change.resource != resource {
                continue;
            }
            let key = (resource, change.namespace.clone(), change.name.clone());
            if change.kind == ChangeKind::Deleted {
                objects.remove(&key);
            } else {
                objects.insert(key, change.new.clone());
            }
        }
        objects
    }

    /// Whether `who` may: the token's user by the grants ([`KubeServer::grant`]),
    /// an impersonated user by its own and its groups' ([`KubeServer::grant_to`]);
    /// denials take away from either.
    fn authorized(
        &self,
        who: &Identity,
        verb: &str,
        resource: &str,
        namespace: Option<&str>,
    ) -> bool {
        let covered = |grants: &[Grant]| grants.iter().any(|g| g.covers(verb, resource, namespace));
        let granted = match who.impersonated {
            false => covered(&self.grants),
            true => std::iter::once(&who.user)
                .chain(&who.groups)
                .filter_map(|subject| self.subject_grants.get(subject))
                .any(|grants| covered(grants)),
        };
        granted
            && !self
                .denials
                .iter()
                .any(|d| d.denies(verb, resource, namespace))
    }

    /// Who a request acts as: the token's user, or whom it impersonates if that
    /// user may impersonate them (else the real server's 403).
    fn identity(&self, headers: &HeaderMap) -> Result<Identity, Box<Response>> {
        let values = |name: &str| -> Vec<String> {
            headers
                .get_all(name)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .map(str::to_string)
                .collect()
        };
        let users = values("impersonate-user");
        let groups = values("impersonate-group");
        let me = Identity {
            user: self.user.clone(),
            groups: vec!["system:authenticated".to_string()],
            impersonated: false,
        };
        let Some(user) = users.first() else {
            if groups.is_empty() {
                return Ok(me);
            }
            // The real server: "requested [...] without impersonating a user".
            return Err(Box::new(status_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                "InternalError",
                &format!(
                    "Internal error occurred: requested {:?} without impersonating a user",
                    groups
                ),
                None,
            )));
        };
        let account = user
            .strip_prefix("system:serviceaccount:")
            .and_then(|rest| rest.split_once(':'))
            .filter(|(ns, name)| !ns.is_empty() && !name.is_empty() && !name.contains(':'));
        let may = |resource: &str, namespace: Option<&str>| {
            self.authorized(&me, "impersonate", resource, namespace)
        };
        match account {
            Some((namespace, name)) => {
                if !may("serviceaccounts", Some(namespace)) {
                    return Err(Box::new(impersonation_forbidden(
                        &self.user,
                        "serviceaccounts",
                        name,
                        Some(namespace),
                    )));
                }
            }
            None => {
                if !may("users", None) {
                    return Err(Box::new(impersonation_forbidden(
                        &self.user, "users", user, None,
                    )));
                }
            }
        }
        for group in &groups {
            if !may("groups", None) {
                return Err(Box::new(impersonation_forbidden(
                    &self.user, "groups", group, None,
                )));
            }
        }
        // A ServiceAccount impersonated without groups gets its own, as the real
        // server gives them; every impersonated user is authenticated.
        let mut all = match (account, groups.is_empty()) {
            (Some((namespace, _)), true) => vec![
                "system:serviceaccounts".to_string(),
                format!("system:serviceaccounts:{namespace}"),
            ],
            _ => groups,
        };
        if !all.iter().any(|g| g == "system:authenticated") {
            all.push("system:authenticated".to_string());
        }
        Ok(Identity {
            user: user.clone(),
            groups: all,
            impersonated: true,
        })
    }
}

/// Who a request acts as (see [`State::identity`]).
#[derive(Clone, Debug)]
pub(super) struct Identity {
    pub user: String,
    pub groups: Vec<String>,
    /// Whether `user` is impersonated: its grants are then those given with
    /// [`KubeServer::grant_to`] to it and its groups.
    pub impersonated: bool,
}

// ---------------------------------------------------------------------------
// The server handle
// ---------------------------------------------------------------------------

/// A running local Kubernetes API server. Dropping it stops the server and
/// ends its watches.
pub struct KubeServer {
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl KubeServer {
    /// Starts a server on 127.0.0.1 that accepts [`DEFAULT_TOKEN`].
    pub async fn start() -> KubeServer {
        KubeServer::start_with_token(DEFAULT_TOKEN).await
    }

    /// Starts a server on 127.0.0.1 that accepts `token` as the bearer token
    /// of [`DEFAULT_USER`].
    pub async fn start_with_token(token: &str) -> KubeServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("KubeServer: bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("KubeServer: local address");
        let (changes, _) = broadcast::channel(4096);
        let (shutdown, _) = watch::channel(false);
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                token: token.to_string(),
                user: DEFAULT_USER.to_string(),
                user_tokens: BTreeMap::new(),
                rv: FIRST_RESOURCE_VERSION,
                compacted_rv: 0,
                objects: BTreeMap::new(),
                history: Vec::new(),
                grants: vec![Grant::cluster(&["get", "list", "watch"], &["*"])],
                subject_grants: BTreeMap::new(),
                denials: Vec::new(),
                requests: Vec::new(),
                writes: Vec::new(),
                bookmark_interval: DEFAULT_BOOKMARK_INTERVAL,
                next_uid: 0,
                faults: Vec::new(),
                uninstalled: Vec::new(),
                hangs: Vec::new(),
                hung: Vec::new(),
                custom: Vec::new(),
                anonymous: false,
                write_conflicts: Vec::new(),
                applied: BTreeMap::new(),
            }),
            changes,
            shutdown,
            addr,
        });
        let app = Router::new()
            .fallback(handle)
            .with_state(Arc::clone(&shared));
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.expect("KubeServer: serve");
        });
        KubeServer { shared, task }
    }

    /// `http://127.0.0.1:PORT`, the cluster's `server` in a kubeconfig.
    pub fn url(&self) -> String {
        format!("http://{}", self.shared.addr)
    }

    pub fn token(&self) -> String {
        self.shared.state().token.clone()
    }

    /// The user Forbidden messages name.
    pub fn set_user(&self, user: &str) {
        self.shared.state().user = user.to_string();
    }

    /// The current (latest) resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared.state().rv
    }

    // --- objects -----------------------------------------------------------

    /// Creates or replaces an object, as a controller's write would: the
    /// server sets `resourceVersion` (always), `uid` and `creationTimestamp`
    /// (unless given) and `metadata.generation` (unless given; bumped when
    /// the spec changes), and watches see ADDED or MODIFIED. Returns the
    /// stored object. Panics if the object is not one the server serves or
    /// would not decode.
    pub fn apply(&self, obj: Value) -> Value {
        let what = describe(&obj);
        let mut state = self.shared.state();
        state
            .apply(&self.shared.changes, obj)
            .unwrap_or_else(|e| panic!("KubeServer::apply({what}): {e}"))
    }

    /// [`apply`](Self::apply), answering the server's refusal instead of
    /// panicking, for tests of what the server refuses.
    pub fn try_apply(&self, obj: Value) -> Result<Value, String> {
        self.shared.state().apply(&self.shared.changes, obj)
    }

    /// [`apply`](Self::apply), putting the object in `namespace` when it has
    /// none (captured manifests often have none).
    pub fn apply_in(&self, namespace: &str, mut obj: Value) -> Value {
        let cluster_scoped = {
            let state = self.shared.state();
            state
                .resource_for_object(&obj)
                .is_ok_and(|r| !ty(r).namespaced)
        };
        if !cluster_scoped
            && obj["metadata"]["namespace"]
                .as_str()
                .unwrap_or("")
                .is_empty()
        {
            obj["metadata"]["namespace"] = json!(namespace);
        }
        self.apply(obj)
    }

    /// [`apply`](Self::apply) for a `k8s-openapi` typed object.
    pub fn apply_typed<K: k8s_openapi::Resource + Serialize>(&self, obj: &K) -> Value {
        let value = serde_json::to_value(obj).expect("KubeServer::apply_typed: serialize");
        self.apply(value)
    }

    /// Deletes an object; watches see DELETED. `kind` is a kind, plural,
    /// singular or short name (`Pod`, `deployments`, `dc`). Returns whether
    /// it existed.
    pub fn delete(&self, kind: &str, namespace: &str, name: &str) -> bool {
        let mut state = self.shared.state();
        let resource = state.resource_named(kind);
        state.delete(&self.shared.changes, resource, namespace, name)
    }

    /// The stored object, if any (`namespace` is `""` for a cluster-scoped one).
    pub fn get(&self, kind: &str, namespace: &str, name: &str) -> Option<Value> {
        let state = self.shared.state();
        let resource = state.resource_named(kind);
        let key = (resource, namespace.to_string(), name.to_string());
        state.objects.get(&key).cloned()
    }

    /// Every stored object of a type, in `namespace` (or everywhere, with
    /// `None`), in etcd key order.
    pub fn list(&self, kind: &str, namespace: Option<&str>) -> Vec<Value> {
        let state = self.shared.state();
        let resource = state.resource_named(kind);
        let start = (
            resource,
            namespace.unwrap_or_default().to_string(),
            String::new(),
        );
        state
            .objects
            .range(start..)
            .take_while(|((r, ns, _), _)| *r == resource && namespace.is_none_or(|n| n == ns))
            .map(|(_, obj)| obj.clone())
            .collect()
    }

    /// Calls `each` with every stored object of a type, in etcd key order, without copying
    /// them (a benchmark polling thousands of objects would otherwise cost more than the
    /// server it measures).
    pub fn for_each(&self, kind: &str, mut each: impl FnMut(&Value)) {
        let state = self.shared.state();
        let resource = state.resource_named(kind);
        let start = (resource, String::new(), String::new());
        for (_, obj) in state
            .objects
            .range(start..)
            .take_while(|((r, _, _), _)| *r == resource)
        {
            each(obj);
        }
    }

    /// Replaces an object's `status`, as the kubelet or a controller would:
    /// a new resourceVersion and a MODIFIED event, no generation bump.
    pub fn set_status(&self, kind: &str, namespace: &str, name: &str, status: Value) -> Value {
        let mut state = self.shared.state();
        let resource = state.resource_named(kind);
        let key = (resource, namespace.to_string(), name.to_string());
        let mut obj = state.objects.get(&key).cloned().unwrap_or_else(|| {
            panic!(
                "KubeServer::set_status: no {} {namespace}/{name}",
                ty(resource).kind
            )
        });
        obj["status"] = status;
        state
            .apply(&self.shared.changes, obj)
            .unwrap_or_else(|e| panic!("KubeServer::set_status({namespace}/{name}): {e}"))
    }

    /// Replaces a pod's `status` as the kubelet would (see
    /// [`running_pod_status`] for a typical one).
    pub fn set_pod_status(&self, namespace: &str, name: &str, status: Value) -> Value {
        self.set_status("Pod", namespace, name, status)
    }

    /// Loads a YAML file: a `kind: List` (as `kubectl get -o yaml` or
    /// `oc get -o yaml` writes), one object, or several `---` documents.
    /// Objects without a namespace go to `default_namespace`.
    pub fn load_yaml(&self, path: &Path, default_namespace: &str) -> Vec<ObjectRef> {
        let text = std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("KubeServer::load_yaml: read {}: {e}", path.display()));
        let mut loaded = Vec::new();
        for document in serde_yaml::Deserializer::from_str(&text) {
            let value: Value = serde::Deserialize::deserialize(document)
                .unwrap_or_else(|e| panic!("KubeServer::load_yaml: parse {}: {e}", path.display()));
            if value.is_null() {
                continue;
            }
            let items = if value["kind"] == "List" || value["items"].is_array() {
                value["items"].as_array().cloned().unwrap_or_default()
            } else {
                vec![value]
            };
            for item in items {
                let stored = self.apply_in(default_namespace, item);
                loaded.push(ObjectRef {
                    kind: stored["kind"].as_str().unwrap_or_default().to_string(),
                    namespace: stored["metadata"]["namespace"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    name: stored["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                });
            }
        }
        loaded
    }

    /// [`load_yaml`](Self::load_yaml) for captures whose objects all carry
    /// their namespace (any without one go to `default`).
    pub fn load_yaml_list(&self, path: &Path) -> Vec<ObjectRef> {
        self.load_yaml(path, "default")
    }

    /// Forgets history up to now, as etcd compaction does: watches from an
    /// older resourceVersion get an ERROR event with 410 Expired, and older
    /// continue tokens a 410 response.
    pub fn compact(&self) {
        let mut state = self.shared.state();
        state.compacted_rv = state.rv;
    }

    /// Takes away the CRDs of `group` (one of [`CRD_GROUPS`]), as on a cluster
    /// where that tool is not installed: its paths answer 404 and discovery
    /// no longer lists it. Stored objects stay, for a later [`KubeServer::reinstall`].
    pub fn uninstall(&self, group: &str) {
        assert!(
            CRD_GROUPS.contains(&group),
            "KubeServer::uninstall: {group:?} is not a CRD group"
        );
        self.shared.state().uninstalled.push(group.to_string());
    }

    /// Serves every CRD group again.
    pub fn reinstall(&self) {
        self.shared.state().uninstalled.clear();
    }

    /// How often a watch that allows bookmarks gets one (a final one is
    /// always sent just before `timeoutSeconds` closes it).
    pub fn set_bookmark_interval(&self, interval: Duration) {
        self.shared.state().bookmark_interval = interval;
    }

    // --- RBAC --------------------------------------------------------------

    /// Replaces every grant (the default is get, list and watch on every
    /// resource, cluster-wide). Writes are refused unless granted.
    pub fn set_grants(&self, grants: Vec<Grant>) {
        self.shared.state().grants = grants;
    }

    /// Takes `verb` on `resource` (`pods`, `deployments`, `*`) away, in one
    /// namespace or (with `None`) everywhere, whatever the grants say. A
    /// denial in one namespace also denies cluster-wide requests for that
    /// verb and resource (`/api/v1/pods`), as real RBAC would.
    pub fn deny(&self, verb: &str, resource: &str, namespace: Option<&str>) {
        self.shared.state().denials.push(Denial {
            verb: verb.to_string(),
            resource: resource.to_string(),
            namespace: namespace.map(str::to_string),
        });
    }

    /// Gives back what [`deny`](Self::deny) took away; the grants stay as they are.
    pub fn lift_denials(&self) {
        self.shared.state().denials.clear();
    }

    /// Answers the next matching requests with a transient failure (see [`Fault`]).
    pub fn inject(&self, fault: Fault) {
        self.shared.state().faults.push(fault);
    }

    /// From now on, requests whose path contains `path_contains` ("" for all) are read whole
    /// and never answered, as an API server whose storage hangs (etcd lost its quorum): the
    /// connection stays open, no status line ever comes. Until [`KubeServer::answer_again`]
    /// or the server is dropped.
    pub fn hang(&self, path_contains: &str) {
        self.shared.state().hangs.push(path_contains.to_string());
    }

    /// Answers every request again; the ones held so far stay unanswered.
    pub fn answer_again(&self) {
        self.shared.state().hangs.clear();
    }

    /// The paths of the requests held unanswered by [`KubeServer::hang`], in arrival order.
    pub fn hung_requests(&self) -> Vec<String> {
        self.shared.state().hung.clone()
    }

    /// Lets requests without credentials in, with the same grants, as a
    /// server started with `--anonymous-auth` whose RBAC binds the same
    /// roles to `system:anonymous`. For the real kubectl, which sends no
    /// bearer token over plain HTTP (this server has no TLS).
    pub fn allow_anonymous(&self) {
        self.shared.state().anonymous = true;
    }

    /// Answers the next `times` granted updates and patches of objects whose
    /// `{namespace}/{plural}/{name}` contains `object_contains` ("" for any) with 409 Conflict, as the real server does when another client wrote
    /// the object between the client's read and its write (the race itself cannot be timed
    /// from a test). The object is left as it was.
    pub fn conflict_writes(&self, object_contains: &str, times: usize) {
        self.shared
            .state()
            .write_conflicts
            .push((object_contains.to_string(), times));
    }

    /// Adds a grant to those in force, e.g. a controller's writes:
    /// `Grant::namespaced("tagpin", &["get", "create", "update"], &["leases"])`.
    /// Subresources are granted by name: `pinnedrepositories/status`.
    pub fn grant(&self, grant: Grant) {
        self.shared.state().grants.push(grant);
    }

    /// Grants `subject` (a user such as `system:serviceaccount:team-a:tagpin`,
    /// or a group such as `system:serviceaccounts:team-a`) what a RoleBinding or
    /// ClusterRoleBinding naming it would: what a request impersonating that
    /// user (or a user in that group) may do. Impersonated users hold nothing
    /// else; the default read grants are the token's user's alone.
    pub fn grant_to(&self, subject: &str, grant: Grant) {
        self.shared
            .state()
            .subject_grants
            .entry(subject.to_string())
            .or_default()
            .push(grant);
    }

    // --- custom resources, Secrets, Events ---------------------------------

    /// Installs a CustomResourceDefinition (`apiextensions.k8s.io/v1`), as
    /// `kubectl apply -f crd.yaml` would: its one served version is served
    /// from now on (paths, discovery with its short names, watches), every
    /// object is checked and pruned with its `openAPIV3Schema`, and
    /// `subresources.status` makes `/status` a subresource. Returns the
    /// stored CRD, Established. Panics if the CRD is one the real server
    /// would refuse (or has several served versions: no conversion here).
    pub fn register_crd(&self, crd: Value) -> Value {
        self.apply(crd)
    }

    /// The tagpin operator installed as `deploy/operator/` installs it: the CRD of `crd.yaml`
    /// served, and exactly the writes `rbac.yaml` grants (its Role's in `tagpin`), so that a
    /// write the operator is not granted is refused (403).
    pub fn install_tagpin_operator(&self) {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let crd: Value = serde_yaml::from_str(
            &std::fs::read_to_string(root.join("deploy/operator/crd.yaml")).unwrap(),
        )
        .unwrap();
        self.register_crd(crd);
        let rbac = std::fs::read_to_string(root.join("deploy/operator/rbac.yaml")).unwrap();
        for document in serde_yaml::Deserializer::from_str(&rbac) {
            let role: Value = serde::Deserialize::deserialize(document).unwrap();
            let namespace = match role["kind"].as_str() {
                Some("ClusterRole") => None,
                Some("Role") => Some("tagpin"),
                _ => continue,
            };
            for rule in role["rules"].as_array().unwrap() {
                let strings = |v: &Value| -> Vec<String> {
                    v.as_array()
                        .unwrap()
                        .iter()
                        .map(|s| s.as_str().unwrap().to_string())
                        .collect()
                };
                let (verbs, resources) = (strings(&rule["verbs"]), strings(&rule["resources"]));
                let verbs: Vec<&str> = verbs.iter().map(String::as_str).collect();
                let resources: Vec<&str> = resources.iter().map(String::as_str).collect();
                self.grant(match namespace {
                    Some(ns) => Grant::namespaced(ns, &verbs, &resources),
                    None => Grant::cluster(&verbs, &resources),
                });
            }
        }
    }

    /// [`register_crd`](Self::register_crd) for a type whose objects need no
    /// checking: a CRD whose `spec` and `status` keep any fields, with a
    /// status subresource.
    pub fn register_custom_resource(
        &self,
        group: &str,
        version: &str,
        kind: &str,
        plural: &str,
        namespaced: bool,
        short_names: &[&str],
    ) -> Value {
        let open = json!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true });
        self.register_crd(json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": { "name": format!("{plural}.{group}") },
            "spec": {
                "group": group,
                "names": {
                    "kind": kind,
                    "listKind": format!("{kind}List"),
                    "plural": plural,
                    "singular": kind.to_ascii_lowercase(),
                    "shortNames": short_names,
                },
                "scope": if namespaced { "Namespaced" } else { "Cluster" },
                "versions": [{
                    "name": version,
                    "served": true,
                    "storage": true,
                    "schema": { "openAPIV3Schema": {
                        "type": "object",
                        "properties": { "spec": open, "status": open },
                    }},
                    "subresources": { "status": {} },
                }],
            },
        }))
    }

    /// Replaces a Secret's `data` (plain values, stored base64-encoded), as
    /// a rotation by an operator or `kubectl apply` would: a new
    /// resourceVersion and a MODIFIED event for the watches. Panics if the
    /// Secret does not exist.
    pub fn rotate_secret(&self, namespace: &str, name: &str, data: &[(&str, &str)]) -> Value {
        let mut secret = self
            .get("Secret", namespace, name)
            .unwrap_or_else(|| panic!("KubeServer::rotate_secret: no Secret {namespace}/{name}"));
        secret["data"] = secret_data(data);
        self.apply(secret)
    }

    /// Every Event stored in `namespace`, `events.k8s.io/v1` and core `v1`
    /// alike (each keeps its own `apiVersion`), oldest first.
    pub fn events(&self, namespace: &str) -> Vec<Value> {
        let state = self.shared.state();
        let mut events: Vec<(u64, Value)> = state
            .objects
            .iter()
            .filter(|((r, ns, _), _)| ty(*r).kind == "Event" && ns == namespace)
            .map(|((r, _, _), obj)| {
                let mut obj = obj.clone();
                obj["apiVersion"] = json!(ty(*r).api_version());
                let rv = obj["metadata"]["resourceVersion"]
                    .as_str()
                    .and_then(|rv| rv.parse().ok())
                    .unwrap_or(0);
                (rv, obj)
            })
            .collect();
        events.sort_by_key(|(rv, _)| *rv);
        events.into_iter().map(|(_, e)| e).collect()
    }

    /// How many requests were made per (verb, resource), as
    /// [`RecordedRequest::verb`] and [`RecordedRequest::resource`] name them:
    /// `("update", "leases")`, `("watch", "secrets")`.
    pub fn request_counts(&self) -> BTreeMap<(String, String), usize> {
        let mut counts = BTreeMap::new();
        for request in &self.shared.state().requests {
            *counts
                .entry((request.verb.clone(), request.resource.clone()))
                .or_insert(0) += 1;
        }
        counts
    }

    /// The number of requests with this verb on this resource.
    pub fn request_count(&self, verb: &str, resource: &str) -> usize {
        self.shared
            .state()
            .requests
            .iter()
            .filter(|r| r.verb == verb && r.resource == resource)
            .count()
    }

    /// Back to the default: every read allowed, nothing denied.
    pub fn allow_all_reads(&self) {
        let mut state = self.shared.state();
        state.grants = vec![Grant::cluster(&["get", "list", "watch"], &["*"])];
        state.denials.clear();
    }

    // --- what the client did -----------------------------------------------

    /// Every request so far, in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.state().requests.clone()
    }

    /// Every request answered with an error (status 400 or above), as
    /// `METHOD PATH -> STATUS`, for asserting that a role was enough.
    pub fn refused_requests(&self) -> Vec<String> {
        self.requests()
            .iter()
            .filter(|r| r.status >= 400)
            .map(|r| format!("{} {} -> {}", r.method, r.path, r.status))
            .collect()
    }

    /// Every write refused so far (403: not granted). They stay pending, and
    /// `Drop` fails the test unless they are taken. Granted writes are in
    /// [`requests`](Self::requests).
    pub fn writes(&self) -> Vec<RecordedRequest> {
        self.shared.state().writes.clone()
    }

    /// Returns and forgets the write attempts, for tests that make them on
    /// purpose and assert on them. Whatever is not taken fails the test on `Drop`.
    pub fn take_writes(&self) -> Vec<RecordedRequest> {
        std::mem::take(&mut self.shared.state().writes)
    }

    /// Panics, listing them, if any write was attempted.
    pub fn assert_no_writes(&self) {
        let writes = self.writes();
        assert!(
            writes.is_empty(),
            "tagpin must never write to the cluster, but sent:\n{}",
            writes
                .iter()
                .map(|w| format!("  {} {}?{} {}", w.method, w.path, w.query, w.body))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }

    // --- clients -----------------------------------------------------------

    /// A kubeconfig for this server: cluster `tagpin-test` at [`url`](Self::url),
    /// user `tagpin` with the token, context `test` (namespace `default`,
    /// the current context) and context `other` (namespace `other`).
    pub fn kubeconfig_yaml(&self) -> String {
        self.kubeconfig_yaml_with_namespaces("default", "other")
    }

    /// [`kubeconfig_yaml`](Self::kubeconfig_yaml) with other namespaces for
    /// the `test` and `other` contexts.
    pub fn kubeconfig_yaml_with_namespaces(&self, test_ns: &str, other_ns: &str) -> String {
        format!(
            "apiVersion: v1\n\
             kind: Config\n\
             clusters:\n\
             - name: tagpin-test\n  \
               cluster:\n    \
                 server: {url}\n\
             users:\n\
             - name: tagpin\n  \
               user:\n    \
                 token: {token}\n\
             contexts:\n\
             - name: test\n  \
               context:\n    \
                 cluster: tagpin-test\n    \
                 user: tagpin\n    \
                 namespace: {test_ns}\n\
             - name: other\n  \
               context:\n    \
                 cluster: tagpin-test\n    \
                 user: tagpin\n    \
                 namespace: {other_ns}\n\
             current-context: test\n\
             preferences: {{}}\n",
            url = self.url(),
            token = self.token(),
        )
    }

    /// Writes [`kubeconfig_yaml`](Self::kubeconfig_yaml) to `dir/kubeconfig`
    /// and returns the path, for `KUBECONFIG` or `--kubeconfig`.
    pub fn kubeconfig(&self, dir: &Path) -> PathBuf {
        let path = dir.join("kubeconfig");
        std::fs::write(&path, self.kubeconfig_yaml())
            .unwrap_or_else(|e| panic!("KubeServer::kubeconfig: write {}: {e}", path.display()));
        path
    }

    /// A real `kube` client for one of the kubeconfig's contexts.
    pub async fn client_for_context(&self, context: &str) -> ::kube::Client {
        let kubeconfig = ::kube::config::Kubeconfig::from_yaml(&self.kubeconfig_yaml())
            .expect("KubeServer: parse own kubeconfig");
        let options = ::kube::config::KubeConfigOptions {
            context: Some(context.to_string()),
            ..Default::default()
        };
        let config = ::kube::Config::from_custom_kubeconfig(kubeconfig, &options)
            .await
            .expect("KubeServer: kube config from own kubeconfig");
        ::kube::Client::try_from(config).expect("KubeServer: kube client")
    }

    /// A real `kube` client for the `test` context (namespace `default`).
    pub async fn client(&self) -> ::kube::Client {
        self.client_for_context("test").await
    }
}

impl Drop for KubeServer {
    /// Fails the test that attempted a write and did not take it. Not while
    /// the test is already failing: a panic during unwinding would abort the
    /// whole test binary, so then the writes are only printed.
    fn drop(&mut self) {
        let _ = self.shared.shutdown.send(true);
        self.task.abort();
        let writes = std::mem::take(&mut self.shared.state().writes);
        if writes.is_empty() {
            return;
        }
        let message = format!(
            "tagpin must never write to the cluster, but the test API server refused {} write \
             attempt(s) that the test did not take (KubeServer::take_writes):\n{}",
            writes.len(),
            writes
                .iter()
                .map(|w| format!("  {} {}?{} {}", w.method, w.path, w.query, w.body))
                .collect::<Vec<_>>()
                .join("\n")
        );
        if std::thread::panicking() {
            eprintln!("{message}");
        } else {
            panic!("{message}");
        }
    }
}

fn describe(obj: &Value) -> String {
    format!(
        "{} {} {}/{}",
        obj["apiVersion"].as_str().unwrap_or("?"),
        obj["kind"].as_str().unwrap_or("?"),
        obj["metadata"]["namespace"].as_str().unwrap_or("-"),
        obj["metadata"]["name"].as_str().unwrap_or("?"),
    )
}

// ---------------------------------------------------------------------------
// Object builders for tests
// ---------------------------------------------------------------------------

/// `metadata` of an object built for a test: its name, namespace and labels.
fn metadata_json(namespace: &str, name: &str, labels: &[(&str, &str)]) -> Value {
    json!({
        "name": name,
        "namespace": namespace,
        "labels": labels_json(labels),
    })
}

/// A pod with these labels and `(name, image)` containers, no status yet.
pub fn pod(
    namespace: &str,
    name: &str,
    labels: &[(&str, &str)],
    containers: &[(&str, &str)],
) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata_json(namespace, name, labels),
        "spec": {
            "containers": containers_json(containers),
        },
    })
}

/// A Deployment whose selector and template carry `labels`.
pub fn deployment(
    namespace: &str,
    name: &str,
    labels: &[(&str, &str)],
    containers: &[(&str, &str)],
) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata_json(namespace, name, labels),
        "spec": {
            "replicas": 1,
            "selector": { "matchLabels": labels_json(labels) },
            "template": {
                "metadata": { "labels": labels_json(labels) },
                "spec": { "containers": containers_json(containers) },
            },
        },
    })
}

/// The label `tagpin operator` requires on a Secret before a `PinnedRepository` may use it.
pub const TAGPIN_SECRET: (&str, &str) = ("tagpin.dev/secret-type", "credentials");

/// An Opaque Secret with these labels and `(key, value)` data (stored
/// base64-encoded, as in `data`).
pub fn secret(
    namespace: &str,
    name: &str,
    labels: &[(&str, &str)],
    data: &[(&str, &str)],
) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata_json(namespace, name, labels),
        "type": "Opaque",
        "data": secret_data(data),
    })
}

fn secret_data(data: &[(&str, &str)]) -> Value {
    use base64::Engine as _;
    Value::Object(
        data.iter()
            .map(|(k, v)| {
                (
                    k.to_string(),
                    json!(base64::engine::general_purpose::STANDARD.encode(v)),
                )
            })
            .collect(),
    )
}

/// The status the kubelet reports for a running, ready pod whose containers
/// `(name, image, imageID)` run: `imageID` is the digest the runtime pulled,
/// like `quay.io/org/app@sha256:…`.
pub fn running_pod_status(containers: &[(&str, &str, &str)]) -> Value {
    let now = rfc3339(SystemTime::now());
    let statuses: Vec<Value> = containers
        .iter()
        .enumerate()
        .map(|(i, (name, image, image_id))| {
            json!({
                "name": name,
                "image": image,
                "imageID": image_id,
                "containerID": format!("cri-o://{:064x}", i + 1),
                "ready": true,
                "started": true,
                "restartCount": 0,
                "state": { "running": { "startedAt": now } },
            })
        })
        .collect();
    json!({
        "phase": "Running",
        "conditions": [
            { "type": "Initialized", "status": "True", "lastTransitionTime": now },
            { "type": "Ready", "status": "True", "lastTransitionTime": now },
            { "type": "ContainersReady", "status": "True", "lastTransitionTime": now },
            { "type": "PodScheduled", "status": "True", "lastTransitionTime": now },
        ],
        "containerStatuses": statuses,
        "hostIP": "192.168.126.11",
        "podIP": "10.217.0.10",
        "qosClass": "BestEffort",
        "startTime": now,
    })
}

fn labels_json(labels: &[(&str, &str)]) -> Value {
    Value::Object(
        labels
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect(),
    )
}

fn containers_json(containers: &[(&str, &str)]) -> Value {
    Value::Array(
        containers
            .iter()
            .map(|(name, image)| json!({ "name": name, "image": image }))
            .collect(),
    )
}

// ---------------------------------------------------------------------------
// Request handling
// ---------------------------------------------------------------------------

/// What a path names.
enum Route {
    Version,
    CoreVersions,
    Groups,
    GroupVersion {
        group: String,
        version: String,
    },
    Resource {
        resource: usize,
        namespace: Option<String>,
        name: Option<String>,
        subresource: Option<String>,
    },
    Unknown,
}

/// What `path` names on this server: the types it serves now (see
/// [`State::served`]), namespaced ones under `namespaces/{ns}` (or
/// cluster-wide for lists), cluster-scoped ones without.
fn route(state: &State, path: &str) -> Route {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let (group, version, rest) = match segments.as_slice() {
        ["version"] => return Route::Version,
        ["api"] => return Route::CoreVersions,
        ["apis"] => return Route::Groups,
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return Route::Unknown,
    };
    let served =
        (group.is_empty() && version == "v1") || state.groups().contains(&(group, version));
    if !served {
        return Route::Unknown;
    }
    let (namespace, plural, name, subresource) = match rest {
        [] => {
            return Route::GroupVersion {
                group: group.to_string(),
                version: version.to_string(),
            }
        }
        ["namespaces", ns, plural] => (Some(*ns), *plural, None, None),
        ["namespaces", ns, plural, name] => (Some(*ns), *plural, Some(*name), None),
        ["namespaces", ns, plural, name, sub] => (Some(*ns), *plural, Some(*name), Some(*sub)),
        [plural] => (None, *plural, None, None),
        [plural, name] => (None, *plural, Some(*name), None),
        [plural, name, sub] => (None, *plural, Some(*name), Some(*sub)),
        _ => return Route::Unknown,
    };
    let Some(resource) = state.resource_by_path(group, version, plural) else {
        return Route::Unknown;
    };
    // A namespaced object is only named inside its namespace, a
    // cluster-scoped one only outside any.
    let scoped_right = if ty(resource).namespaced {
        name.is_none() || namespace.is_some()
    } else {
        namespace.is_none()
    };
    if !scoped_right {
        return Route::Unknown;
    }
    Route::Resource {
        resource,
        namespace: namespace.map(str::to_string),
        name: name.map(str::to_string),
        subresource: subresource.map(str::to_string),
    }
}

async fn handle(AxumState(shared): AxumState<Arc<Shared>>, request: Request) -> Response {
    let method = request.method().clone();
    let uri = request.uri().clone();
    let headers = request.headers().clone();
    let body = axum::body::to_bytes(request.into_body(), MAX_BODY_BYTES)
        .await
        .unwrap_or_default();
    let is_write = matches!(
        method,
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    );
    let hangs = {
        let mut state = shared.state();
        let hangs = state.hangs.iter().any(|h| uri.path().contains(h.as_str()));
        if hangs {
            state.hung.push(uri.path().to_string());
        }
        hangs
    };
    if hangs {
        // Held until the server is dropped; the client must give up on its own.
        let mut shutdown = shared.shutdown.subscribe();
        let _ = shutdown.wait_for(|stopped| *stopped).await;
        return Response::new(Body::empty());
    }
    let authenticated = {
        let state = shared.state();
        bearer_token(&headers).as_deref() == Some(state.token.as_str())
    };

    let response = respond(&shared, &method, &uri, &headers, authenticated, &body);
    let (verb, resource) = {
        let state = shared.state();
        request_info(&state, &method, &uri)
    };

    let record = RecordedRequest {
        method: method.to_string(),
        path: uri.path().to_string(),
        query: uri.query().unwrap_or("").to_string(),
        authenticated,
        accept: headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
        status: response.status().as_u16(),
        body: String::from_utf8_lossy(&body).into_owned(),
        verb,
        resource,
        impersonate_user: headers
            .get("impersonate-user")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
        impersonate_groups: headers
            .get_all("impersonate-group")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(str::to_string)
            .collect(),
    };
    let mut state = shared.state();
    // Refused writes are kept apart: a read-only test fails on any of them.
    if is_write && record.status == 403 {
        state.writes.push(record.clone());
    }
    state.requests.push(record);
    response
}

/// The Kubernetes verb and resource of a request, as the real server's
/// RequestInfo names them (`get`/`list`/`watch`/`create`/`update`/`patch`/
/// `delete`/`deletecollection`; `leases`, `pinnedrepositories/status`), for
/// counting. Requests that name no resource (discovery) count under their
/// lower-case method and `""`.
fn request_info(state: &State, method: &Method, uri: &Uri) -> (String, String) {
    let Route::Resource {
        resource,
        name,
        subresource,
        ..
    } = route(state, uri.path())
    else {
        return (method.as_str().to_ascii_lowercase(), String::new());
    };
    let watch = parse_query(uri.query().unwrap_or(""))
        .iter()
        .any(|(k, v)| k == "watch" && (v == "true" || v == "1"));
    let verb = match (method.clone(), name.is_some()) {
        (Method::GET, _) if watch => "watch",
        (Method::GET, true) => "get",
        (Method::GET, false) => "list",
        (Method::POST, _) => "create",
        (Method::PUT, _) => "update",
        (Method::PATCH, _) => "patch",
        (Method::DELETE, true) => "delete",
        (Method::DELETE, false) => "deletecollection",
        (other, _) => return (other.as_str().to_ascii_lowercase(), String::new()),
    };
    let plural = ty(resource).plural;
    let resource = match subresource {
        Some(sub) => format!("{plural}/{sub}"),
        None => plural.to_string(),
    };
    (verb.to_string(), resource)
}

fn bearer_token(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let token = value.strip_prefix("Bearer ")?;
    Some(token.trim().to_string())
}

fn respond(
    shared: &Arc<Shared>,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    authenticated: bool,
    body: &Bytes,
) -> Response {
    if let Some(status) = take_fault(shared, method, uri) {
        let code = StatusCode::from_u16(status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
        let reason = match status {
            429 => "TooManyRequests",
            504 => "Timeout",
            _ => "ServiceUnavailable",
        };
        // As the real server: a 429 says when to come back, in the Status and the header.
        let details = (status == 429).then(|| meta::StatusDetails {
            retry_after_seconds: Some(1),
            ..meta::StatusDetails::default()
        });
        let mut response = status_response(code, reason, "injected transient failure", details);
        if status == 429 {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
        }
        return response;
    }
    // With anonymous access on, a request without credentials goes on as
    // `system:anonymous`; a wrong token is still 401, as on the real server.
    let anonymous =
        !authenticated && shared.state().anonymous && !headers.contains_key(header::AUTHORIZATION);
    if !authenticated && !anonymous {
        return status_response(
            StatusCode::UNAUTHORIZED,
            "Unauthorized",
            "Unauthorized",
            None,
        );
    }
    let (who, route, groups, served) = {
        let state = shared.state();
        let who = match state.identity(headers) {
            Ok(who) => who,
            Err(refused) => return *refused,
        };
        (
            who,
            route(&state, uri.path()),
            state.groups(),
            state.served(),
        )
    };
    let user = who.user.clone();
    if let Some(answer) = reviews::answer(shared, method, uri.path(), &who, body) {
        return answer;
    }

    let write_verb = match *method {
        Method::GET => None,
        Method::POST => Some("create"),
        Method::PUT => Some("update"),
        Method::PATCH => Some("patch"),
        Method::DELETE => Some(match &route {
            Route::Resource { name: None, .. } => "deletecollection",
            _ => "delete",
        }),
        _ => {
            return status_response(
                StatusCode::METHOD_NOT_ALLOWED,
                "MethodNotAllowed",
                &format!(
                    "the server does not allow this method on the requested resource: {method}"
                ),
                None,
            )
        }
    };
    if let Some(verb) = write_verb {
        // Writes are authorized first, as on the real server (a write to a
        // path nobody may write to is 403 whether or not the path exists).
        return match route {
            Route::Resource {
                resource,
                namespace,
                name,
                subresource,
            } => {
                let params = match Params::parse(uri) {
                    Ok(params) => params,
                    Err(message) => return bad_request(&message),
                };
                writes::write(
                    shared,
                    &who,
                    writes::WriteRequest {
                        verb,
                        resource,
                        namespace,
                        name,
                        subresource,
                        params,
                        content_type: headers
                            .get(header::CONTENT_TYPE)
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or("")
                            .to_string(),
                        body,
                    },
                )
            }
            _ => status_response(
                StatusCode::FORBIDDEN,
                "Forbidden",
                &format!(
                    "forbidden: User \"{user}\" cannot {} path \"{}\"",
                    method.as_str().to_ascii_lowercase(),
                    uri.path()
                ),
                Some(meta::StatusDetails::default()),
            ),
        };
    }

    let aggregated = accepts(headers, "as=APIGroupDiscoveryList");
    match route {
        Route::Version => json_response(StatusCode::OK, &version_info()),
        Route::CoreVersions if aggregated => {
            aggregated_response(aggregated_discovery(&[("", "v1")], &served))
        }
        Route::CoreVersions => json_response(StatusCode::OK, &core_versions(shared.addr)),
        Route::Groups if aggregated => aggregated_response(aggregated_discovery(&groups, &served)),
        Route::Groups => json_response(StatusCode::OK, &group_list(&groups)),
        Route::GroupVersion { group, version } => {
            json_response(StatusCode::OK, &resource_list(&group, &version, &served))
        }
        Route::Resource {
            resource,
            namespace,
            name,
            subresource,
        } => {
            let params = match Params::parse(uri) {
                Ok(params) => params,
                Err(message) => return bad_request(&message),
            };
            let metadata_only = accepts(headers, "as=PartialObjectMetadata");
            read_resource(
                shared,
                &who,
                resource,
                namespace,
                name,
                subresource,
                params,
                metadata_only,
            )
        }
        Route::Unknown => not_found_path(),
    }
}

fn accepts(headers: &HeaderMap, what: &str) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains(what))
}

/// The query parameters of a get, list or watch.
#[derive(Default)]
struct Params {
    label_selector: String,
    field_selector: String,
    limit: u64,
    continue_token: String,
    resource_version: String,
    resource_version_match: String,
    watch: bool,
    allow_bookmarks: bool,
    send_initial_events: bool,
    timeout: Option<Duration>,
    /// Writes: who makes the change (required for server-side apply).
    field_manager: String,
    /// Server-side apply: take fields over from other managers.
    force: bool,
    /// `dryRun=All`: check and answer, store nothing.
    dry_run: bool,
    /// `fieldValidation`: `Strict` refuses unknown fields, `Warn` (the
    /// default since 1.27) and `Ignore` prune them.
    field_validation: String,
}

impl Params {
    fn parse(uri: &Uri) -> Result<Params, String> {
        let pairs = parse_query(uri.query().unwrap_or(""));
        let mut params = Params::default();
        for (key, value) in pairs {
            match key.as_str() {
                "labelSelector" => params.label_selector = value,
                "fieldSelector" => params.field_selector = value,
                "limit" => {
                    params.limit = value
                        .parse()
                        .map_err(|_| format!("invalid value for limit: {value:?}"))?
                }
                "continue" => params.continue_token = value,
                "resourceVersion" => params.resource_version = value,
                "resourceVersionMatch" => params.resource_version_match = value,
                "watch" => params.watch = value == "true" || value == "1",
                "allowWatchBookmarks" => params.allow_bookmarks = value == "true" || value == "1",
                "sendInitialEvents" => params.send_initial_events = value == "true" || value == "1",
                "fieldManager" => {
                    if value.len() > 128 {
                        return Err(format!(
                            "fieldManager: Too long: may not be more than 128 bytes: {value:?}"
                        ));
                    }
                    params.field_manager = value
                }
                "force" => params.force = value == "true" || value == "1",
                "dryRun" => {
                    if value != "All" {
                        return Err(format!(
                            "dryRun: Unsupported value: {value:?}: supported values: \"All\""
                        ));
                    }
                    params.dry_run = true
                }
                "fieldValidation" => {
                    if !matches!(value.as_str(), "Strict" | "Warn" | "Ignore") {
                        return Err(format!(
                            "fieldValidation: Unsupported value: {value:?}: supported values: \"Ignore\", \"Strict\", \"Warn\""
                        ));
                    }
                    params.field_validation = value
                }
                "timeoutSeconds" => {
                    let seconds: u64 = value
                        .parse()
                        .map_err(|_| format!("invalid value for timeoutSeconds: {value:?}"))?;
                    // 0 means "the server's default", as on the real server.
                    params.timeout = (seconds > 0).then(|| Duration::from_secs(seconds));
                }
                _ => {}
            }
        }
        Ok(params)
    }
}

fn parse_query(query: &str) -> Vec<(String, String)> {
    let uri: Uri = format!("/?{query}").parse().unwrap_or_default();
    Query::<Vec<(String, String)>>::try_from_uri(&uri)
        .map(|Query(pairs)| pairs)
        .unwrap_or_default()
}

#[allow(clippy::too_many_arguments)]
fn read_resource(
    shared: &Arc<Shared>,
    who: &Identity,
    resource: usize,
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<String>,
    params: Params,
    metadata_only: bool,
) -> Response {
    let ty = ty(resource);
    let verb = match (&name, params.watch) {
        (Some(_), _) => "get",
        (None, true) => "watch",
        (None, false) => "list",
    };
    let authz_resource = match &subresource {
        Some(sub) => format!("{}/{sub}", ty.plural),
        None => ty.plural.to_string(),
    };
    let state = shared.state();
    if !state.authorized(who, verb, &authz_resource, namespace.as_deref()) {
        return forbidden(
            &who.user,
            verb,
            ty,
            subresource.as_deref(),
            namespace.as_deref(),
            name.as_deref(),
        );
    }

    if let Some(name) = name {
        // Only `status` is served among subresources: it reads the object.
        if subresource
            .as_deref()
            .is_some_and(|s| s != "status" || !ty.status_subresource)
        {
            return not_found_path();
        }
        let namespace = namespace.unwrap_or_default();
        let key = (resource, namespace, name.clone());
        return match state.objects.get(&key) {
            Some(obj) => json_response(StatusCode::OK, &present(obj, metadata_only)),
            None => status_response(
                StatusCode::NOT_FOUND,
                "NotFound",
                &format!("{} \"{name}\" not found", ty.group_resource()),
                Some(details(ty, Some(&name))),
            ),
        };
    }

    let labels = match parse_label_selector(&params.label_selector) {
        Ok(labels) => labels,
        Err(message) => return bad_request(&message),
    };
    let fields = match parse_field_selector(&params.field_selector, ty) {
        Ok(fields) => fields,
        Err(message) => return bad_request(&message),
    };
    let filter = Filter {
        resource,
        namespace,
        labels,
        fields,
    };
    if params.watch {
        start_watch(shared, &state, filter, &params, metadata_only)
    } else {
        list(&state, &filter, &params, metadata_only)
    }
}

/// What a list or watch selects.
struct Filter {
    resource: usize,
    namespace: Option<String>,
    labels: Vec<LabelRequirement>,
    fields: Vec<FieldRequirement>,
}

impl Filter {
    fn has_selectors(&self) -> bool {
        !self.labels.is_empty() || !self.fields.is_empty()
    }

    fn in_scope(&self, resource: usize, namespace: &str) -> bool {
        resource == self.resource && self.namespace.as_deref().is_none_or(|ns| ns == namespace)
    }

    fn matches(&self, obj: &Value) -> bool {
        let labels = &obj["metadata"]["labels"];
        self.labels.iter().all(|r| r.matches(labels)) && self.fields.iter().all(|r| r.matches(obj))
    }

    /// The objects in scope, in etcd key order (`ns/name`), borrowed. The store is keyed by
    /// (resource, namespace, name), so the scope is one range of it: a list costs what its
    /// type and namespace hold, not what the whole store holds.
    fn select<'a>(&self, objects: &'a BTreeMap<Key, Value>) -> Vec<(String, &'a Value)> {
        let namespace = self.namespace.clone().unwrap_or_default();
        let start = (self.resource, namespace, String::new());
        let mut selected: Vec<(String, &Value)> = objects
            .range(start..)
            .take_while(|((resource, ns, _), _)| self.in_scope(*resource, ns))
            .map(|((_, ns, name), obj)| (format!("{ns}/{name}"), obj))
            .collect();
        selected.sort_by(|a, b| a.0.cmp(&b.0));
        selected
    }
}

/// A continue token, like the real server's: base64url of
/// `{"v":"meta.k8s.io/v1","rv":N,"start":"ns/name\u0000"}`.
fn encode_continue(rv: u64, last_key: &str) -> String {
    let token = json!({ "v": "meta.k8s.io/v1", "rv": rv, "start": format!("{last_key}\u{0}") });
    base64url_encode(token.to_string().as_bytes())
}

fn decode_continue(token: &str) -> Result<(u64, String), String> {
    let bytes = base64url_decode(token).ok_or("continue key is not valid: illegal base64 data")?;
    let value: Value =
        serde_json::from_slice(&bytes).map_err(|e| format!("continue key is not valid: {e}"))?;
    if value["v"] != "meta.k8s.io/v1" {
        return Err("continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)".to_string());
    }
    let rv = value["rv"]
        .as_u64()
        .filter(|rv| *rv > 0)
        .ok_or("continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)")?;
    let start = value["start"]
        .as_str()
        .filter(|s| !s.is_empty())
        .ok_or("continue key is not valid: encoded start key empty")?;
    Ok((rv, start.to_string()))
}

fn list(state: &State, filter: &Filter, params: &Params, metadata_only: bool) -> Response {
    let ty = ty(filter.resource);
    // Which revision to read, and where to start in it.
    let (rv, start) = if !params.continue_token.is_empty() {
        if !params.resource_version.is_empty() && params.resource_version != "0" {
            return bad_request("specifying resource version is not allowed when using continue");
        }
        let (rv, start) = match decode_continue(&params.continue_token) {
            Ok(decoded) => decoded,
            Err(message) => return bad_request(&message),
        };
        if rv < state.compacted_rv {
            return status_response(
                StatusCode::GONE,
                "Expired",
                "The provided continue parameter is too old to display a consistent list result. \
                 You can start a new list without the continue parameter, or use the continue \
                 token in this response to retrieve the remainder of the results. Continuing \
                 with the provided token results in an inconsistent list - objects that were \
                 created, modified, or deleted between the time the first chunk was returned \
                 and now may show up in the list.",
                None,
            );
        }
        (rv, Some(start))
    } else if params.resource_version_match == "Exact" {
        let rv: u64 = match params.resource_version.parse() {
            Ok(rv) => rv,
            Err(_) => {
                return bad_request(&format!(
                    "resourceVersionMatch: Exact requires resourceVersion, got {:?}",
                    params.resource_version
                ))
            }
        };
        if rv < state.compacted_rv {
            return status_response(
                StatusCode::GONE,
                "Expired",
                &format!("too old resource version: {rv} ({})", state.compacted_rv),
                None,
            );
        }
        if rv > state.rv {
            return status_response(
                StatusCode::GATEWAY_TIMEOUT,
                "Timeout",
                &format!("Too large resource version: {rv}, current: {}", state.rv),
                None,
            );
        }
        (rv, None)
    } else {
        (state.rv, None)
    };

    let snapshot;
    let objects = if rv == state.rv {
        &state.objects
    } else {
        snapshot = state.snapshot(filter.resource, rv);
        &snapshot
    };
    // Everything in scope after the start key, matching or not: etcd pages
    // over keys and filters afterwards.
    let in_scope: Vec<(String, &Value)> = filter
        .select(objects)
        .into_iter()
        .filter(|(key, _)| start.as_ref().is_none_or(|s| key.as_str() >= s.as_str()))
        .collect();

    let mut items = Vec::new();
    let mut continue_token = None;
    let mut remaining = None;
    for (index, (key, obj)) in in_scope.iter().enumerate() {
        if !filter.matches(obj) {
            continue;
        }
        items.push(present_list_item(obj, metadata_only));
        if params.limit > 0 && items.len() as u64 == params.limit {
            let left = in_scope.len() - index - 1;
            if left > 0 {
                continue_token = Some(encode_continue(rv, key));
                if !filter.has_selectors() {
                    remaining = Some(left as i64);
                }
            }
            break;
        }
    }

    let list_meta = meta::ListMeta {
        continue_: continue_token,
        remaining_item_count: remaining,
        resource_version: Some(rv.to_string()),
        ..Default::default()
    };
    let (api_version, kind) = if metadata_only {
        (
            "meta.k8s.io/v1".to_string(),
            "PartialObjectMetadataList".to_string(),
        )
    } else {
        (ty.api_version(), format!("{}List", ty.kind))
    };
    json_response(
        StatusCode::OK,
        &json!({
            "apiVersion": api_version,
            "kind": kind,
            "metadata": list_meta,
            "items": items,
        }),
    )
}

/// How an object is answered: whole, or as PartialObjectMetadata when the
/// client asked for metadata only.
fn present(obj: &Value, metadata_only: bool) -> Value {
    if metadata_only {
        json!({
            "apiVersion": "meta.k8s.io/v1",
            "kind": "PartialObjectMetadata",
            "metadata": obj["metadata"],
        })
    } else {
        obj.clone()
    }
}

/// The real server leaves `apiVersion` and `kind` out of typed list items.
fn present_list_item(obj: &Value, metadata_only: bool) -> Value {
    let mut item = present(obj, metadata_only);
    if !metadata_only {
        if let Some(map) = item.as_object_mut() {
            map.remove("apiVersion");
            map.remove("kind");
        }
    }
    item
}

// ---------------------------------------------------------------------------
// Watch
// ---------------------------------------------------------------------------

fn watch_line(event_type: &str, object: &Value) -> Bytes {
    let mut line = serde_json::to_vec(&json!({ "type": event_type, "object": object }))
        .expect("serialize watch event");
    line.push(b'\n');
    Bytes::from(line)
}

fn bookmark_line(ty: &ResourceType, rv: u64, initial_events_end: bool) -> Bytes {
    let mut metadata = json!({ "resourceVersion": rv.to_string() });
    if initial_events_end {
        metadata["annotations"] = json!({ INITIAL_EVENTS_END: "true" });
    }
    watch_line(
        "BOOKMARK",
        &json!({ "apiVersion": ty.api_version(), "kind": ty.kind, "metadata": metadata }),
    )
}

/// The event a watch with `filter` sees for a change, if any: a modification
/// that moves an object into or out of the selection is ADDED or DELETED.
fn watch_event(filter: &Filter, change: &Change) -> Option<&'static str> {
    if !filter.in_scope(change.resource, &change.namespace) {
        return None;
    }
    let now = filter.matches(&change.new);
    match change.kind {
        ChangeKind::Added => now.then_some("ADDED"),
        ChangeKind::Deleted => now.then_some("DELETED"),
        ChangeKind::Modified => {
            let before = change.old.as_ref().is_some_and(|old| filter.matches(old));
            match (before, now) {
                (true, true) => Some("MODIFIED"),
                (false, true) => Some("ADDED"),
                (true, false) => Some("DELETED"),
                (false, false) => None,
            }
        }
    }
}

fn start_watch(
    shared: &Arc<Shared>,
    state: &State,
    filter: Filter,
    params: &Params,
    metadata_only: bool,
) -> Response {
    let ty = ty(filter.resource);
    let mut lines = Vec::new();
    let mut expired = false;
    if params.send_initial_events {
        if params.resource_version_match != "NotOlderThan" || !params.allow_bookmarks {
            return bad_request(
                "sendInitialEvents requires resourceVersionMatch=NotOlderThan and allowWatchBookmarks=true",
            );
        }
        for (_, obj) in filter.select(&state.objects) {
            if filter.matches(obj) {
                lines.push(watch_line("ADDED", &present(obj, metadata_only)));
            }
        }
        lines.push(bookmark_line(ty, state.rv, true));
    } else if params.resource_version.is_empty() || params.resource_version == "0" {
        // No version: the current state as ADDED events, then changes.
        for (_, obj) in filter.select(&state.objects) {
            if filter.matches(obj) {
                lines.push(watch_line("ADDED", &present(obj, metadata_only)));
            }
        }
    } else {
        let from: u64 = match params.resource_version.parse() {
            Ok(rv) => rv,
            Err(_) => {
                return bad_request(&format!(
                    "invalid resource version: {:?}",
                    params.resource_version
                ))
            }
        };
        if from < state.compacted_rv {
            let status = status_value(
                StatusCode::GONE,
                "Expired",
                &format!("too old resource version: {from} ({})", state.compacted_rv),
                None,
            );
            lines.push(watch_line("ERROR", &status));
            expired = true;
        } else {
            for change in state.history.iter().filter(|c| c.rv > from) {
                if let Some(event_type) = watch_event(&filter, change) {
                    lines.push(watch_line(event_type, &present(&change.new, metadata_only)));
                }
            }
        }
    }

    // Subscribed with the lock held: no change falls between the replay above
    // and the live stream below.
    let changes = shared.changes.subscribe();
    let shutdown = shared.shutdown.subscribe();
    let (tx, rx) = mpsc::channel::<Bytes>(64);
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|line| (Ok::<_, Infallible>(line), rx))
    });
    let watch = Watch {
        filter,
        metadata_only,
        last_rv: state.rv,
        bookmarks: params.allow_bookmarks.then_some(state.bookmark_interval),
        timeout: params.timeout.unwrap_or(DEFAULT_WATCH_TIMEOUT),
    };
    tokio::spawn(watch.run(lines, expired, changes, shutdown, tx));

    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from_stream(stream))
        .expect("watch response")
}

/// One running watch: sends its replayed lines, then live changes, until the
/// timeout, the client going away or the server stopping.
struct Watch {
    filter: Filter,
    metadata_only: bool,
    /// The newest resourceVersion this watch has passed, for bookmarks.
    last_rv: u64,
    bookmarks: Option<Duration>,
    timeout: Duration,
}

impl Watch {
    async fn run(
        mut self,
        replay: Vec<Bytes>,
        expired: bool,
        mut changes: broadcast::Receiver<Arc<Change>>,
        mut shutdown: watch::Receiver<bool>,
        tx: mpsc::Sender<Bytes>,
    ) {
        for line in replay {
            if tx.send(line).await.is_err() {
                return;
            }
        }
        if expired {
            return;
        }
        let ty = ty(self.filter.resource);
        let deadline = tokio::time::Instant::now() + self.timeout;
        let tick = self.bookmarks.unwrap_or(Duration::from_secs(3600));
        let mut bookmark_timer = tokio::time::interval_at(tokio::time::Instant::now() + tick, tick);
        loop {
            let line = tokio::select! {
                _ = tokio::time::sleep_until(deadline) => {
                    // The real watch cache sends a last bookmark before it
                    // closes a watch that allows them.
                    if self.bookmarks.is_some() {
                        let _ = tx.send(bookmark_line(ty, self.last_rv, false)).await;
                    }
                    return;
                }
                _ = bookmark_timer.tick() => {
                    if self.bookmarks.is_none() {
                        continue;
                    }
                    bookmark_line(ty, self.last_rv, false)
                }
                received = changes.recv() => match received {
                    Ok(change) => {
                        self.last_rv = self.last_rv.max(change.rv);
                        match watch_event(&self.filter, &change) {
                            Some(event_type) => {
                                watch_line(event_type, &present(&change.new, self.metadata_only))
                            }
                            None => continue,
                        }
                    }
                    // Lagging behind or the server gone: end the watch, as
                    // the real server does; the client starts a new one.
                    Err(_) => return,
                },
                _ = shutdown.changed() => return,
                _ = tx.closed() => return,
            };
            if tx.send(line).await.is_err() {
                return;
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Selectors
// ---------------------------------------------------------------------------

/// One requirement of a label selector, as `k8s.io/apimachinery/pkg/labels`
/// parses them.
#[derive(Clone, Debug, PartialEq)]
enum LabelRequirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
    GreaterThan(String, i64),
    LessThan(String, i64),
}

impl LabelRequirement {
    fn matches(&self, labels: &Value) -> bool {
        let get = |key: &str| labels.get(key).and_then(Value::as_str);
        match self {
            LabelRequirement::Equals(k, v) => get(k) == Some(v.as_str()),
            LabelRequirement::NotEquals(k, v) => get(k) != Some(v.as_str()),
            LabelRequirement::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelRequirement::NotIn(k, vs) => !get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelRequirement::Exists(k) => get(k).is_some(),
            LabelRequirement::DoesNotExist(k) => get(k).is_none(),
            LabelRequirement::GreaterThan(k, n) => get(k)
                .and_then(|x| x.parse::<i64>().ok())
                .is_some_and(|x| x > *n),
            LabelRequirement::LessThan(k, n) => get(k)
                .and_then(|x| x.parse::<i64>().ok())
                .is_some_and(|x| x < *n),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Word(String),
    Comma,
    Open,
    Close,
    Equals,
    DoubleEquals,
    NotEquals,
    Not,
    Greater,
    Less,
    In,
    NotIn,
}

fn lex_label_selector(selector: &str) -> Vec<Token> {
    let mut tokens = Vec::new();
    let mut chars = selector.chars().peekable();
    while let Some(&c) = chars.peek() {
        match c {
            c if c.is_whitespace() => {
                chars.next();
            }
            ',' | '(' | ')' | '>' | '<' => {
                chars.next();
                tokens.push(match c {
                    ',' => Token::Comma,
                    '(' => Token::Open,
                    ')' => Token::Close,
                    '>' => Token::Greater,
                    _ => Token::Less,
                });
            }
            '=' => {
                chars.next();
                if chars.peek() == Some(&'=') {
                    chars.next();
                    tokens.push(Token::DoubleEquals);
                } else {
                    tokens.push(Token::Equals);
                }
            }
            '!' => {
                chars.next();
                if chars.peek() == Some(&'=') {
                    chars.next();
                    tokens.push(Token::NotEquals);
                } else {
                    tokens.push(Token::Not);
                }
            }
            _ => {
                let mut word = String::new();
                while let Some(&c) = chars.peek() {
                    if c.is_whitespace() || ",()=!<>".contains(c) {
                        break;
                    }
                    word.push(c);
                    chars.next();
                }
                tokens.push(match word.as_str() {
                    "in" => Token::In,
                    "notin" => Token::NotIn,
                    _ => Token::Word(word),
                });
            }
        }
    }
    tokens
}

fn valid_label_key(key: &str) -> bool {
    let name = key.rsplit('/').next().unwrap_or("");
    !name.is_empty()
        && name.len() <= 63
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
}

fn valid_label_value(value: &str) -> bool {
    value.len() <= 63
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

/// Parses `a=b,c!=d,e in (x,y),f notin (z),g,!h,i>3` as the real server does.
fn parse_label_selector(selector: &str) -> Result<Vec<LabelRequirement>, String> {
    let tokens = lex_label_selector(selector);
    let mut requirements = Vec::new();
    let mut pos = 0;
    let err = |what: &str| format!("unable to parse requirement: {what}");
    while pos < tokens.len() {
        let requirement = if tokens[pos] == Token::Not {
            pos += 1;
            match tokens.get(pos) {
                Some(Token::Word(key)) => {
                    pos += 1;
                    LabelRequirement::DoesNotExist(key.clone())
                }
                _ => return Err(err("found '!', expected: identifier")),
            }
        } else {
            let key = match tokens.get(pos) {
                Some(Token::Word(key)) => key.clone(),
                other => return Err(err(&format!("found {other:?}, expected: !, identifier"))),
            };
            if !valid_label_key(&key) {
                return Err(err(&format!("invalid label key {key:?}")));
            }
            pos += 1;
            match tokens.get(pos) {
                None | Some(Token::Comma) => LabelRequirement::Exists(key),
                Some(op @ (Token::Equals | Token::DoubleEquals | Token::NotEquals)) => {
                    let negated = *op == Token::NotEquals;
                    pos += 1;
                    let value = match tokens.get(pos) {
                        Some(Token::Word(value)) => {
                            pos += 1;
                            value.clone()
                        }
                        None | Some(Token::Comma) => String::new(),
                        Some(other) => {
                            return Err(err(&format!("found {other:?}, expected: identifier")))
                        }
                    };
                    if !valid_label_value(&value) {
                        return Err(err(&format!("invalid label value: {value:?}")));
                    }
                    if negated {
                        LabelRequirement::NotEquals(key, value)
                    } else {
                        LabelRequirement::Equals(key, value)
                    }
                }
                Some(op @ (Token::In | Token::NotIn)) => {
                    let negated = *op == Token::NotIn;
                    pos += 1;
                    if tokens.get(pos) != Some(&Token::Open) {
                        return Err(err("expected: '('"));
                    }
                    pos += 1;
                    let mut values = Vec::new();
                    loop {
                        match tokens.get(pos) {
                            Some(Token::Word(value)) => {
                                if !valid_label_value(value) {
                                    return Err(err(&format!("invalid label value: {value:?}")));
                                }
                                values.push(value.clone());
                                pos += 1;
                            }
                            Some(Token::Close) if !values.is_empty() => {
                                pos += 1;
                                break;
                            }
                            _ => {
                                return Err(err(
                                    "for 'in', 'notin' operators, values set can't be empty",
                                ))
                            }
                        }
                        match tokens.get(pos) {
                            Some(Token::Comma) => pos += 1,
                            Some(Token::Close) => {
                                pos += 1;
                                break;
                            }
                            _ => return Err(err("expected: ',' or ')'")),
                        }
                    }
                    if negated {
                        LabelRequirement::NotIn(key, values)
                    } else {
                        LabelRequirement::In(key, values)
                    }
                }
                Some(op @ (Token::Greater | Token::Less)) => {
                    let greater = *op == Token::Greater;
                    pos += 1;
                    let number = match tokens.get(pos) {
                        Some(Token::Word(value)) => value.parse::<i64>().map_err(|_| {
                            err(&format!(
                                "for 'Gt', 'Lt' operators, the value must be an integer: {value:?}"
                            ))
                        })?,
                        _ => return Err(err("expected: integer")),
                    };
                    pos += 1;
                    if greater {
                        LabelRequirement::GreaterThan(key, number)
                    } else {
                        LabelRequirement::LessThan(key, number)
                    }
                }
                Some(other) => {
                    return Err(err(&format!(
                        "found {other:?}, expected: in, notin, =, ==, !=, gt, lt"
                    )))
                }
            }
        };
        requirements.push(requirement);
        match tokens.get(pos) {
            None => break,
            Some(Token::Comma) => {
                pos += 1;
                if pos == tokens.len() {
                    return Err(err("found '', expected: !, identifier"));
                }
            }
            Some(other) => return Err(err(&format!("found {other:?}, expected: ','"))),
        }
    }
    Ok(requirements)
}

/// One requirement of a field selector: `label=value`, `label==value` or
/// `label!=value`.
#[derive(Clone, Debug, PartialEq)]
struct FieldRequirement {
    label: String,
    value: String,
    negated: bool,
}

impl FieldRequirement {
    fn matches(&self, obj: &Value) -> bool {
        (field_value(obj, &self.label) == self.value) != self.negated
    }
}

/// A field label's value as the real server's field set has it: the JSON
/// value at that path as text, empty when missing.
fn field_value(obj: &Value, label: &str) -> String {
    let pointer = format!("/{}", label.replace('.', "/"));
    match obj.pointer(&pointer) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::Bool(b)) => b.to_string(),
        None if label == "spec.hostNetwork" => "false".to_string(),
        _ => String::new(),
    }
}

fn parse_field_selector(
    selector: &str,
    ty: &ResourceType,
) -> Result<Vec<FieldRequirement>, String> {
    let mut requirements = Vec::new();
    for part in selector.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (label, value, negated) = if let Some((l, v)) = part.split_once("!=") {
            (l, v, true)
        } else if let Some((l, v)) = part.split_once("==") {
            (l, v, false)
        } else if let Some((l, v)) = part.split_once('=') {
            (l, v, false)
        } else {
            return Err(format!(
                "invalid selector: '{selector}'; can't understand '{part}'"
            ));
        };
        let label = label.trim();
        if !ty.supports_field(label) {
            return Err(format!("field label not supported: {label}"));
        }
        requirements.push(FieldRequirement {
            label: label.to_string(),
            value: value.trim().to_string(),
            negated,
        });
    }
    Ok(requirements)
}

// ---------------------------------------------------------------------------
// Discovery
// ---------------------------------------------------------------------------

fn version_info() -> Value {
    let info = k8s_openapi::apimachinery::pkg::version::Info {
        major: "1".to_string(),
        minor: "33".to_string(),
        git_version: "v1.33.1".to_string(),
        git_commit: "8adc0f041b8e7ad1d30e29cc59c6ae7a15e19828".to_string(),
        git_tree_state: "clean".to_string(),
        build_date: "2025-05-15T08:19:08Z".to_string(),
        go_version: "go1.24.2".to_string(),
        compiler: "gc".to_string(),
        platform: "linux/amd64".to_string(),
        ..Default::default()
    };
    serde_json::to_value(info).expect("serialize version")
}

fn core_versions(addr: std::net::SocketAddr) -> Value {
    let versions = meta::APIVersions {
        versions: vec!["v1".to_string()],
        server_address_by_client_cidrs: vec![meta::ServerAddressByClientCIDR {
            client_cidr: "0.0.0.0/0".to_string(),
            server_address: addr.to_string(),
        }],
    };
    serde_json::to_value(versions).expect("serialize APIVersions")
}

fn group_list(groups: &[(&str, &str)]) -> Value {
    let groups = groups
        .iter()
        .map(|(group, version)| {
            let gv = meta::GroupVersionForDiscovery {
                group_version: format!("{group}/{version}"),
                version: version.to_string(),
            };
            meta::APIGroup {
                name: group.to_string(),
                versions: vec![gv.clone()],
                preferred_version: Some(gv),
                server_address_by_client_cidrs: None,
            }
        })
        .collect();
    serde_json::to_value(meta::APIGroupList { groups }).expect("serialize APIGroupList")
}

/// The categories discovery lists a type in: the workload kinds are in
/// `all` (so `kubectl get all` shows them); Secrets, Events, Leases, CRDs
/// and registered custom resources (whose CRDs name none here) are not.
fn categories(t: &ResourceType) -> Vec<String> {
    let plain = t.schema.is_some()
        || matches!(
            t.kind,
            "Secret" | "Event" | "Lease" | "CustomResourceDefinition"
        );
    if plain {
        Vec::new()
    } else {
        vec!["all".to_string()]
    }
}

fn resource_list(group: &str, version: &str, served: &[usize]) -> Value {
    let mut resources = Vec::new();
    for ty in served
        .iter()
        .map(|&i| ty(i))
        .filter(|r| r.group == group && r.version == version)
    {
        let categories = categories(ty);
        resources.push(meta::APIResource {
            name: ty.plural.to_string(),
            singular_name: ty.singular.to_string(),
            namespaced: ty.namespaced,
            kind: ty.kind.to_string(),
            verbs: RESOURCE_VERBS.iter().map(|v| v.to_string()).collect(),
            short_names: (!ty.short_names.is_empty())
                .then(|| ty.short_names.iter().map(|s| s.to_string()).collect()),
            categories: (!categories.is_empty()).then_some(categories),
            ..Default::default()
        });
        if ty.status_subresource {
            resources.push(meta::APIResource {
                name: format!("{}/status", ty.plural),
                singular_name: String::new(),
                namespaced: ty.namespaced,
                kind: ty.kind.to_string(),
                verbs: vec!["get".to_string(), "patch".to_string(), "update".to_string()],
                ..Default::default()
            });
        }
    }
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    serde_json::to_value(meta::APIResourceList {
        group_version,
        resources,
    })
    .expect("serialize APIResourceList")
}

/// `apidiscovery.k8s.io/v2` APIGroupDiscoveryList, answered when the client
/// asks for it in `Accept` (kube's `Discovery::run_aggregated`, kubectl).
fn aggregated_discovery(groups: &[(&str, &str)], served: &[usize]) -> Value {
    let items: Vec<Value> = groups
        .iter()
        .map(|(group, version)| {
            let resources: Vec<Value> = served
                .iter()
                .map(|&i| ty(i))
                .filter(|r| r.group == *group && r.version == *version)
                .map(|ty| {
                    let gvk = json!({ "group": ty.group, "version": ty.version, "kind": ty.kind });
                    let mut resource = json!({
                        "resource": ty.plural,
                        "responseKind": gvk,
                        "scope": if ty.namespaced { "Namespaced" } else { "Cluster" },
                        "singularResource": ty.singular,
                        "verbs": RESOURCE_VERBS,
                        "shortNames": ty.short_names,
                        "categories": categories(ty),
                    });
                    if ty.status_subresource {
                        resource["subresources"] = json!([{
                            "subresource": "status",
                            "responseKind": gvk,
                            "verbs": ["get", "patch", "update"],
                        }]);
                    }
                    resource
                })
                .collect();
            let mut item = json!({
                "metadata": { "creationTimestamp": null },
                "versions": [{ "version": version, "resources": resources, "freshness": "Current" }],
            });
            if !group.is_empty() {
                item["metadata"]["name"] = json!(group);
            }
            item
        })
        .collect();
    json!({
        "apiVersion": "apidiscovery.k8s.io/v2",
        "kind": "APIGroupDiscoveryList",
        "metadata": {},
        "items": items,
    })
}

fn aggregated_response(body: Value) -> Response {
    Response::builder()
        .status(StatusCode::OK)
        .header(
            header::CONTENT_TYPE,
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
        )
        .body(Body::from(body.to_string()))
        .expect("discovery response")
}

// ---------------------------------------------------------------------------
// Responses
// ---------------------------------------------------------------------------

fn json_response(status: StatusCode, body: &Value) -> Response {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string()))
        .expect("json response")
}

fn status_value(
    code: StatusCode,
    reason: &str,
    message: &str,
    details: Option<meta::StatusDetails>,
) -> Value {
    let status = meta::Status {
        code: Some(i32::from(code.as_u16())),
        details,
        message: Some(message.to_string()),
        metadata: meta::ListMeta::default(),
        reason: Some(reason.to_string()),
        status: Some("Failure".to_string()),
    };
    serde_json::to_value(status).expect("serialize Status")
}

/// The status of an injected fault for this request, if one matches (and counts it).
fn take_fault(shared: &Arc<Shared>, method: &Method, uri: &Uri) -> Option<u16> {
    if method != Method::GET {
        return None;
    }
    let mut state = shared.state();
    let fault = state
        .faults
        .iter_mut()
        .find(|f| f.times > 0 && uri.path().contains(&f.path_contains))?;
    fault.times -= 1;
    Some(fault.status)
}

fn status_response(
    code: StatusCode,
    reason: &str,
    message: &str,
    details: Option<meta::StatusDetails>,
) -> Response {
    json_response(code, &status_value(code, reason, message, details))
}

fn bad_request(message: &str) -> Response {
    status_response(StatusCode::BAD_REQUEST, "BadRequest", message, None)
}

fn not_found_path() -> Response {
    status_response(
        StatusCode::NOT_FOUND,
        "NotFound",
        "the server could not find the requested resource",
        Some(meta::StatusDetails::default()),
    )
}

fn details(ty: &ResourceType, name: Option<&str>) -> meta::StatusDetails {
    meta::StatusDetails {
        name: name.map(str::to_string),
        group: (!ty.group.is_empty()).then(|| ty.group.to_string()),
        kind: Some(ty.plural.to_string()),
        ..Default::default()
    }
}

/// 403 with the real authorizer's message, e.g. `pods "x" is forbidden: User
/// "…" cannot get resource "pods" in API group "" in the namespace "shop"`.
fn forbidden(
    user: &str,
    verb: &str,
    ty: &ResourceType,
    subresource: Option<&str>,
    namespace: Option<&str>,
    name: Option<&str>,
) -> Response {
    let subject = match name {
        Some(name) => format!("{} \"{name}\"", ty.group_resource()),
        None => ty.group_resource(),
    };
    let resource = match subresource {
        Some(sub) => format!("{}/{sub}", ty.plural),
        None => ty.plural.to_string(),
    };
    let scope = match namespace {
        Some(ns) => format!("in the namespace \"{ns}\""),
        None => "at the cluster scope".to_string(),
    };
    let message = format!(
        "{subject} is forbidden: User \"{user}\" cannot {verb} resource \"{resource}\" in API group \"{}\" {scope}",
        ty.group
    );
    status_response(
        StatusCode::FORBIDDEN,
        "Forbidden",
        &message,
        Some(details(ty, name)),
    )
}

/// 403 for an impersonation the user may not make, as the real server's
/// impersonation filter words it: `serviceaccounts "tagpin" is forbidden: User
/// "…" cannot impersonate resource "serviceaccounts" in API group "" in the
/// namespace "team-a"` (`users`, `groups`: at the cluster scope).
fn impersonation_forbidden(
    user: &str,
    resource: &str,
    name: &str,
    namespace: Option<&str>,
) -> Response {
    let scope = match namespace {
        Some(ns) => format!("in the namespace \"{ns}\""),
        None => "at the cluster scope".to_string(),
    };
    status_response(
        StatusCode::FORBIDDEN,
        "Forbidden",
        &format!(
            "{resource} \"{name}\" is forbidden: User \"{user}\" cannot impersonate resource \"{resource}\" in API group \"\" {scope}"
        ),
        Some(meta::StatusDetails {
            name: Some(name.to_string()),
            kind: Some(resource.to_string()),
            ..Default::default()
        }),
    )
}

// ---------------------------------------------------------------------------
// Small encodings
// ---------------------------------------------------------------------------

const BASE64URL: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Unpadded base64url, as Go's `base64.RawURLEncoding` the real server uses
/// for continue tokens.
fn base64url_encode(data: &[u8]) -> String {
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..=chunk.len() {
            out.push(char::from(BASE64URL[((n >> (18 - 6 * i)) & 63) as usize]));
        }
    }
    out
}

fn base64url_decode(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut bits: u32 = 0;
    let mut nbits = 0;
    for c in text.bytes() {
        let value = BASE64URL.iter().position(|&x| x == c)? as u32;
        bits = (bits << 6) | value;
        nbits += 6;
        if nbits >= 8 {
            nbits -= 8;
            out.push((bits >> nbits) as u8);
            bits &= (1 << nbits) - 1;
        }
    }
    Some(out)
}

/// RFC 3339 in UTC with seconds, as Kubernetes writes timestamps.
fn rfc3339(time: SystemTime) -> String {
    super::rfc3339(time)
}
