//! Pinned Helm values, verified without running Helm.
//!
//! A pin in Helm values (a values file, a Flux `HelmRelease`'s `spec.values`, an Argo CD
//! `Application`'s `helm.valuesObject`/`values`/`parameters`) names an image repository, not a
//! workload: which Deployment ends up running it is decided by the chart's templates, which
//! tagpin does not render. The cluster knows, without Helm:
//!
//! - an Argo CD Application lists what it deployed in its inventory (`status.resources`);
//! - Helm 3 annotates every object of a release with `meta.helm.sh/release-name` and
//!   `meta.helm.sh/release-namespace`, so a Flux HelmRelease's workloads are the ones so
//!   annotated in its release's namespace.
//!
//! A pin then speaks for the one live container, among those workloads, whose image repository
//! (normalized: `nginx` is `docker.io/library/nginx`) is the pinned one, and that container is
//! judged as any other (rollout, every pod's imageID). A pin that matches no container, or more
//! than one, or one another pin of the same release also claims with another digest, is not
//! verified, with the reason: never a guess.
//!
//! Before that, the release must carry the values of the pin commit or a later one; until it
//! does, its container is Progressing and nothing is judged on the old values. Two steps say so:
//!
//! 1. **The object holding the values came from the pin commit or a later one.** A HelmRelease or
//!    Application is itself a manifest in Git, applied by a Flux Kustomization or an Argo CD
//!    Application whose inventory lists it; that applier must have applied the pin commit or a
//!    later one (the rule of [`super::gitops`]). With no applier listing it (applied by hand, or
//!    by a tool tagpin does not read), its live values must hold the pinned digest, else the
//!    commit cannot be told and the pin is not verified. A values file is read by an Argo CD
//!    Application from the repository itself: that Application's applied revision must be the
//!    pin commit or a later one. A values file Flux reads through a chart's GitRepository is not
//!    verified: the chart artifact's version does not reliably name the commit it was built from.
//! 2. **The controller acted on that object.** For a HelmRelease (API `v2`), helm-controller
//!    must have attempted the current generation (`status.lastAttemptedGeneration`, else
//!    `status.observedGeneration`, equal to `metadata.generation`), and the newest Helm release
//!    it recorded (`status.history[0]`) must be `deployed` with the values of that attempt
//!    (`configDigest` equal to `status.lastAttemptedConfigDigest`; the chart version is not
//!    compared, since a pin changes values, not charts, and an OCI chart's attempted revision
//!    carries a digest suffix its history entry may not). A `failed` or rolled-back
//!    release is Failed once Flux stopped retrying (condition `Stalled`), Progressing before.
//!    A HelmRelease without history (an older helm-controller) must be `Ready` at the current
//!    generation with `lastAppliedRevision` equal to `lastAttemptedRevision`. For an Application
//!    holding values inline, Argo CD must have compared the current spec (`status.sync.comparedTo`
//!    equal to the spec's sources) and found it `Synced`.
//!
//! Once placed and released, the container's usual `Synced` condition still asks the live pod
//! template for the pinned digest: a chart that ignores the value it was pinned in stays
//! Progressing, never Converged. A pin that matches no container while its release has not
//! released it yet (a workload the new values add) is not verified rather than Progressing,
//! since no live workload can carry its verdict; the reason says the release is behind.
//!
//! Pure: the caller lists the objects and workloads and says which applied revisions come at or
//! after the pin commit; nothing here does I/O.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::expected::{Expected, NotVerified, NotVerifiedReason};
pub use super::expected::{HelmPin, ReleaseRef};
use super::gitops::{
    self, group_of, short, GitOpsObject, Health, InventoryEntry, ObjectReport, Sync, Tool,
};
use super::verdict::{State, Verdict};
use crate::reference::{Digest, Reference};
use crate::workload::{WorkloadId, WorkloadKind};

/// The annotation Helm 3 sets on every object of a release: the release's name.
pub(crate) const RELEASE_NAME_ANNOTATION: &str = "meta.helm.sh/release-name";
/// The annotation Helm 3 sets on every object of a release: the release's namespace.
pub(crate) const RELEASE_NAMESPACE_ANNOTATION: &str = "meta.helm.sh/release-namespace";

/// The workload kinds a release's containers are looked for in: those a chart deploys
/// long-running pods with, and the verifier's role may list.
pub(crate) const RELEASE_KINDS: [WorkloadKind; 3] = [
    WorkloadKind::Deployment,
    WorkloadKind::StatefulSet,
    WorkloadKind::DaemonSet,
];

/// A workload of a namespace where releases deploy, as read live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleaseWorkload {
    /// Its namespace always set.
    pub workload: WorkloadId,
    pub annotations: BTreeMap<String, String>,
    /// The live pod template's containers and init containers: `(name, image)`.
    pub containers: Vec<(String, String)>,
}

/// The workloads of one namespace, or the message with which the API refused to list them.
pub(crate) type NamespaceWorkloads = Result<Vec<ReleaseWorkload>, super::observed::Refusal>;

// ---------------------------------------------------------------------------------------------
// Matching a pinned repository to live containers

/// `docker.io/library/nginx` for `nginx`, `nginx:1.27@sha256:…` and `docker.io/nginx`: one
/// spelling of a repository, to compare a pin with a live image. `None` when it is no image
/// reference.
pub(crate) fn normalized_repository(image: &str) -> Option<String> {
    Reference::parse(image.trim())
        .ok()
        .map(|r| r.canonical_name())
}

/// The containers of `workloads` whose image repository is `repository` (both normalized), as
/// `(workload, container)`.
pub(crate) fn matching_containers(
    repository: &str,
    workloads: &[&ReleaseWorkload],
) -> Vec<(WorkloadId, String)> {
    let Some(wanted) = normalized_repository(repository) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for w in workloads {
        for (container, image) in &w.containers {
            if normalized_repository(image).as_deref() == Some(wanted.as_str()) {
                found.push((w.workload.clone(), container.clone()));
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

// ---------------------------------------------------------------------------------------------
// Reading the listed objects

fn text(value: &Value) -> String {
    value.as_str().unwrap_or_default().to_string()
}

fn non_empty(value: &Value) -> Option<String> {
    value.as_str().filter(|s| !s.is_empty()).map(str::to_string)
}

fn condition<'v>(obj: &'v Value, type_: &str) -> Option<&'v Value> {
    obj["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == type_)
}

/// The name of the Helm release a HelmRelease manages: `status.history[0].name` once released,
/// else `spec.releaseName`, else `[targetNamespace-]name` as helm-controller composes it
/// (shortened to 53 characters with a hash, as helm-controller shortens it).
pub(crate) fn release_name(obj: &Value) -> String {
    if let Some(name) = non_empty(&obj["status"]["history"][0]["name"]) {
        return name;
    }
    if let Some(name) = non_empty(&obj["spec"]["releaseName"]) {
        return name;
    }
    let name = text(&obj["metadata"]["name"]);
    let composed = match non_empty(&obj["spec"]["targetNamespace"]) {
        Some(target) => format!("{target}-{name}"),
        None => name,
    };
    shorten_release_name(&composed)
}

/// Helm's limit on a release name.
const MAX_RELEASE_NAME: usize = 53;

/// helm-controller's `ShortenName`: a name over 53 characters keeps its first 40, then `-` and
/// the first 12 hex digits of the SHA-256 of the whole name.
fn shorten_release_name(name: &str) -> String {
    use sha2::{Digest as _, Sha256};
    if name.len() <= MAX_RELEASE_NAME {
        return name.to_string();
    }
    let hash: String = Sha256::digest(name.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let keep = name.get(..MAX_RELEASE_NAME - 13).unwrap_or(name);
    format!("{keep}-{}", &hash[..12])
}

/// The namespace of the Helm release a HelmRelease manages: `status.history[0].namespace`, else
/// `spec.targetNamespace`, else its own.
pub(crate) fn release_namespace(obj: &Value) -> String {
    non_empty(&obj["status"]["history"][0]["namespace"])
        .or_else(|| non_empty(&obj["spec"]["targetNamespace"]))
        .unwrap_or_else(|| text(&obj["metadata"]["namespace"]))
}

/// Whether helm-controller acted on a HelmRelease's current spec (see the module's rule 2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// The release carries the values of the pin commit or a later one: what, in words.
    Carries(String),
    /// Not yet; it may still get there.
    Waiting(String),
    /// It will not get there without someone acting.
    Failed(String),
    /// tagpin cannot tell.
    Unknown(String),
}

/// helm-controller's progress on a HelmRelease's current generation (rule 2 of the module).
pub(crate) fn helm_release_progress(obj: &Value) -> Progress {
    let status = &obj["status"];
    let generation = obj["metadata"]["generation"].as_i64().unwrap_or(0);
    let attempted = status["lastAttemptedGeneration"]
        .as_i64()
        .or_else(|| status["observedGeneration"].as_i64());
    let suspended = obj["spec"]["suspend"] == true;
    let stalled = condition(obj, "Stalled").is_some_and(|c| c["status"] == "True");
    let ready = condition(obj, "Ready");
    let ready_message = ready
        .and_then(|c| non_empty(&c["message"]))
        .map(|m| super::wording::one_line(&m))
        .unwrap_or_else(|| "no Ready condition".to_string());
    let held = |message: String| {
        if stalled {
            Progress::Failed(format!("{message}; Flux stopped retrying: {ready_message}"))
        } else if suspended {
            Progress::Unknown(format!("{message}, and the HelmRelease is suspended"))
        } else {
            Progress::Waiting(message)
        }
    };
    if attempted != Some(generation) {
        let at = attempted.map_or("none".to_string(), |g| g.to_string());
        return held(format!(
            "helm-controller has not acted on generation {generation} yet (last attempted: {at})"
        ));
    }
    let latest = &status["history"][0];
    if latest.is_object() {
        let release = format!(
            "Helm release {}/{} revision {}",
            text(&latest["namespace"]),
            text(&latest["name"]),
            latest["version"].as_i64().unwrap_or(0)
        );
        let state = text(&latest["status"]);
        let config = text(&latest["configDigest"]);
        let attempted_config = non_empty(&status["lastAttemptedConfigDigest"]);
        if state.starts_with("pending") {
            return held(format!("{release} is {state}"));
        }
        if state != "deployed" {
            return held(format!("{release} is {state}: {ready_message}"));
        }
        return match attempted_config {
            Some(wanted) if wanted == config => Progress::Carries(format!(
                "{release} (chart {} {}) has the current values",
                text(&latest["chartName"]),
                text(&latest["chartVersion"])
            )),
            Some(wanted) => held(format!(
                "{release} has other values ({}) than the last attempt ({})",
                short_digest(&config),
                short_digest(&wanted)
            )),
            None => Progress::Unknown(format!(
                "{release} is deployed, but the HelmRelease has no lastAttemptedConfigDigest to say whether with the current values"
            )),
        };
    }
    // An older helm-controller keeps no history: Ready at this generation, with the revision
    // attempted also the one applied.
    let ready_now = ready.is_some_and(|c| {
        c["status"] == "True"
            && c["observedGeneration"]
                .as_i64()
                .is_none_or(|g| g == generation)
    });
    let applied = non_empty(&status["lastAppliedRevision"]);
    let attempted_revision = non_empty(&status["lastAttemptedRevision"]);
    match (ready_now, applied, attempted_revision) {
        (true, Some(applied), Some(attempted)) if applied == attempted => Progress::Carries(
            format!("Ready at generation {generation}, chart revision {applied} applied"),
        ),
        (true, Some(applied), Some(attempted)) => held(format!(
            "chart revision {attempted} attempted, {applied} applied"
        )),
        (true, _, _) => Progress::Unknown(
            "Ready, but neither status.history nor lastAppliedRevision says what was released"
                .to_string(),
        ),
        (false, _, _) => held(format!("not released yet: {ready_message}")),
    }
}

/// `sha256:1a2b3c4d5e6f` of a longer digest, as people read it.
fn short_digest(digest: &str) -> String {
    match digest.split_once(':') {
        Some((algorithm, hex)) => format!("{algorithm}:{}", hex.get(..12).unwrap_or(hex)),
        None => digest.to_string(),
    }
}

/// Whether Argo CD compared an Application's current spec and found it synced.
pub(crate) fn application_progress(obj: &Value) -> Progress {
    let spec = &obj["spec"];
    let sync = &obj["status"]["sync"];
    let compared = &sync["comparedTo"];
    let current = if spec["sources"].as_array().is_some_and(|s| !s.is_empty()) {
        compared["sources"] == spec["sources"]
    } else {
        compared["source"] == spec["source"]
    };
    let state = non_empty(&sync["status"]).unwrap_or_else(|| "Unknown".to_string());
    if !current {
        return Progress::Waiting(
            "Argo CD has not compared the Application's current spec yet".to_string(),
        );
    }
    if state != "Synced" {
        return Progress::Waiting(format!(
            "Argo CD has compared the Application's current spec: {state}"
        ));
    }
    Progress::Carries("Argo CD synced the Application's current spec".to_string())
}

// ---------------------------------------------------------------------------------------------
// Which releases deploy each pin

/// Where a release's workloads are found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Candidates {
    /// The workloads Helm annotated with this release, in its namespace.
    Annotated { namespace: String, release: String },
    /// The workloads an Argo CD Application lists in its inventory.
    Inventory(Vec<InventoryEntry>),
}

impl Candidates {
    /// The namespaces to list workloads in.
    pub fn namespaces(&self) -> BTreeSet<String> {
        match self {
            Candidates::Annotated { namespace, .. } => BTreeSet::from([namespace.clone()]),
            Candidates::Inventory(entries) => entries
                .iter()
                .filter(|e| is_release_kind(e))
                .map(|e| e.namespace.clone())
                .collect(),
        }
    }

    /// Whether a listed workload is one of them.
    fn holds(&self, w: &ReleaseWorkload) -> bool {
        let namespace = w.workload.namespace.as_deref().unwrap_or_default();
        match self {
            Candidates::Annotated {
                namespace: release_namespace,
                release,
            } => {
                w.annotations.get(RELEASE_NAME_ANNOTATION) == Some(release)
                    && w.annotations.get(RELEASE_NAMESPACE_ANNOTATION) == Some(release_namespace)
                    && namespace == release_namespace
            }
            Candidates::Inventory(entries) => entries.iter().any(|e| {
                e.namespace == namespace
                    && e.name == w.workload.name
                    && e.kind == w.workload.kind.as_str()
                    && e.group == group_of(&w.workload.kind)
            }),
        }
    }
}

fn is_release_kind(e: &InventoryEntry) -> bool {
    RELEASE_KINDS
        .iter()
        .any(|k| e.kind == k.as_str() && e.group == group_of(k))
}

/// A release that deploys a pin, and how far it got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    pub tool: Tool,
    /// `HelmRelease` or `Application`.
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    pub candidates: Candidates,
    pub progress: Progress,
    pub health: Health,
    /// The commit its values came from, when an applier or its own source says.
    pub revision: Option<String>,
}

impl Release {
    /// `Flux HelmRelease shop/web`.
    pub fn title(&self) -> String {
        format!(
            "{} {} {}/{}",
            self.tool.name(),
            self.kind,
            self.namespace,
            self.name
        )
    }

    fn key(&self) -> ReleaseKey {
        (
            self.tool,
            self.kind,
            self.namespace.clone(),
            self.name.clone(),
        )
    }
}

/// A release's identity: tool, kind, namespace, name.
type ReleaseKey = (Tool, &'static str, String, String);

/// What the cluster holds, as listed, and what the GitOps objects applied.
#[derive(Default)]
pub struct Listed<'a> {
    pub applications: &'a [Value],
    pub helm_releases: &'a [Value],
    /// Why no HelmRelease could be listed, when none could (see
    /// `verify::observe::gitops::helm_releases`).
    pub helm_releases_unread: Option<&'a str>,
    /// Why not every Argo CD Application could be listed (an impersonated ServiceAccount's
    /// refusal), when that is so.
    pub applications_unread: Option<&'a str>,
    pub git_repositories: &'a [Value],
    /// The GitOps objects of the configured repository ([`gitops::relevant`]), which may have
    /// applied HelmReleases and Applications, and `sync[i]` for `appliers[i]`.
    pub appliers: &'a [GitOpsObject],
    pub sync: &'a [Sync],
    /// The configured repository's URL.
    pub repository: &'a str,
    /// The pin commit.
    pub pin: &'a str,
}

/// The releases that deploy one pin, or why there are none to ask (a [`NotVerified`] reason
/// and its detail).
pub type Releases = Result<Vec<Release>, (NotVerifiedReason, String)>;

/// The listed object named `namespace/name`, or the one named `name` when no namespace is
/// given; `Err` with the namespaced names found when that is not exactly one.
fn find<'v>(
    objects: &'v [Value],
    namespace: Option<&str>,
    name: &str,
) -> Result<&'v Value, Vec<String>> {
    let found: Vec<&Value> = objects
        .iter()
        .filter(|o| {
            o["metadata"]["name"] == name
                && namespace.is_none_or(|ns| o["metadata"]["namespace"] == ns)
        })
        .collect();
    match found.as_slice() {
        [one] => Ok(one),
        several => Err(several
            .iter()
            .map(|o| format!("{}/{name}", text(&o["metadata"]["namespace"])))
            .collect()),
    }
}

/// The releases that deploy `pin`.
pub fn releases(pin: &HelmPin, listed: &Listed<'_>) -> Releases {
    let missing = |unread: Option<&str>, found: Vec<String>| {
        if !found.is_empty() {
            return (
                NotVerifiedReason::HelmAmbiguous,
                format!(
                    "{} names no namespace, and the cluster holds several: {}",
                    pin.release,
                    found.join(", ")
                ),
            );
        }
        let detail = match unread {
            Some(why) => format!("{} cannot be read: {why}", pin.release),
            None => format!("{} is not in the cluster", pin.release),
        };
        (NotVerifiedReason::HelmReleaseMissing, detail)
    };
    match &pin.release {
        ReleaseRef::HelmRelease { namespace, name } => {
            let obj = find(listed.helm_releases, namespace.as_deref(), name)
                .map_err(|found| missing(listed.helm_releases_unread, found))?;
            let namespace = text(&obj["metadata"]["namespace"]);
            let applied_as = InventoryEntry {
                group: "helm.toolkit.fluxcd.io".into(),
                kind: "HelmRelease".into(),
                namespace: namespace.clone(),
                name: name.clone(),
            };
            let (revision, applied) =
                applied_from(listed, pin, &applied_as, &obj["spec"]["values"]);
            let progress = applied.unwrap_or_else(|| helm_release_progress(obj));
            Ok(vec![Release {
                tool: Tool::Flux,
                kind: "HelmRelease",
                namespace,
                name: name.clone(),
                candidates: Candidates::Annotated {
                    namespace: release_namespace(obj),
                    release: release_name(obj),
                },
                progress,
                health: gitops::flux_health(obj),
                revision,
            }])
        }
        ReleaseRef::Application { namespace, name } => {
            let obj = find(listed.applications, namespace.as_deref(), name)
                .map_err(|found| missing(listed.applications_unread, found))?;
            let app = gitops::application(obj);
            let applied_as = InventoryEntry {
                group: "argoproj.io".into(),
                kind: "Application".into(),
                namespace: app.namespace.clone(),
                name: app.name.clone(),
            };
            let sources = Value::Array(
                rendered_sources(&obj["spec"])
                    .into_iter()
                    .cloned()
                    .collect(),
            );
            let (revision, applied) = applied_from(listed, pin, &applied_as, &sources);
            let progress = applied.unwrap_or_else(|| application_progress(obj));
            Ok(vec![argo_release(app, progress, revision)])
        }
        ReleaseRef::ValuesFile { path } => values_file_releases(path, listed),
    }
}

/// The releases that read the values file `path`: Argo CD Applications whose Helm source
/// takes it, and Flux HelmReleases whose chart's GitRepository holds it.
fn values_file_releases(path: &str, listed: &Listed<'_>) -> Releases {
    let path = gitops::clean_path(path);
    let mut found = Vec::new();
    for obj in listed.applications {
        if !application_uses(obj, &path, listed.repository) {
            continue;
        }
        let app = gitops::application(obj);
        let applied = listed
            .appliers
            .iter()
            .position(|o| {
                o.tool == Tool::ArgoCd && o.namespace == app.namespace && o.name == app.name
            })
            .map(|i| &listed.sync[i]);
        let (progress, revision) = match applied {
            Some(Sync::Synced(revision)) => (
                Progress::Carries(format!(
                    "Argo CD applied {} from the repository",
                    short(revision)
                )),
                Some(revision.clone()),
            ),
            Some(sync) => (held(Tool::ArgoCd, sync, listed.pin), None),
            // Named in `verify.gitops` objects only, and this one is not among them.
            None => (
                Progress::Unknown(format!(
                    "verify.gitops does not name {}, which reads it",
                    app.title()
                )),
                None,
            ),
        };
        found.push(argo_release(app, progress, revision));
    }
    for obj in listed.helm_releases {
        if let Some(repository) = chart_repository_using(obj, &path, listed) {
            found.push(Release {
                tool: Tool::Flux,
                kind: "HelmRelease",
                namespace: text(&obj["metadata"]["namespace"]),
                name: text(&obj["metadata"]["name"]),
                candidates: Candidates::Annotated {
                    namespace: release_namespace(obj),
                    release: release_name(obj),
                },
                progress: Progress::Unknown(format!(
                    "it reads {path} through its chart's GitRepository {repository}, whose chart version does not name the commit"
                )),
                health: gitops::flux_health(obj),
                revision: None,
            });
        }
    }
    if found.is_empty() {
        let unread: Vec<&str> = [listed.helm_releases_unread, listed.applications_unread]
            .into_iter()
            .flatten()
            .collect();
        let unread = match unread.is_empty() {
            true => String::new(),
            false => format!(" ({})", unread.join("; ")),
        };
        return Err((
            NotVerifiedReason::HelmReleaseMissing,
            format!("no HelmRelease or Argo CD Application in the cluster reads {path}{unread}"),
        ));
    }
    Ok(found)
}

fn argo_release(app: GitOpsObject, progress: Progress, revision: Option<String>) -> Release {
    Release {
        tool: Tool::ArgoCd,
        kind: "Application",
        candidates: Candidates::Inventory(app.inventory),
        namespace: app.namespace,
        name: app.name,
        progress,
        health: app.health,
        revision,
    }
}

/// Rule 1 of the module for `object` holding values (`values`, as listed): the commit its
/// applier applied, and a verdict when that already settles it (not applied yet, or no applier
/// and no trace of the pin). `None` lets the controller's progress decide.
fn applied_from(
    listed: &Listed<'_>,
    pin: &HelmPin,
    object: &InventoryEntry,
    values: &Value,
) -> (Option<String>, Option<Progress>) {
    let appliers: Vec<usize> = (0..listed.appliers.len())
        .filter(|&i| listed.appliers[i].inventory.contains(object))
        .collect();
    if appliers.is_empty() {
        let holds = values.to_string().contains(&pin.digest.to_string());
        if holds {
            return (None, None);
        }
        return (
            None,
            Some(Progress::Unknown(format!(
                "no Flux Kustomization or Argo CD Application of the repository lists it, and its live values do not hold {}",
                pin.digest
            ))),
        );
    }
    let mut revision = None;
    for i in appliers {
        match &listed.sync[i] {
            Sync::Synced(applied) => revision = Some(applied.clone()),
            sync => return (None, Some(held(listed.appliers[i].tool, sync, listed.pin))),
        }
    }
    (revision, None)
}

/// What a release whose applier has not applied the pin commit waits for, in the applier's
/// words: Failed when it will not get there without someone acting (Argo CD could not hydrate
/// it), else Waiting.
fn held(tool: Tool, sync: &Sync, pin: &str) -> Progress {
    let reason = gitops::not_synced_reason(tool, sync, pin);
    match gitops::waiting_state(sync).0 {
        State::Failed => Progress::Failed(reason),
        _ => Progress::Waiting(reason),
    }
}

/// The sources an Application renders (`spec` as listed): its Source Hydrator's dry source
/// (which takes Helm options too), else `spec.sources`, else `spec.source`.
fn rendered_sources(spec: &Value) -> Vec<&Value> {
    let dry = &spec["sourceHydrator"]["drySource"];
    if dry.is_object() {
        return vec![dry];
    }
    match spec["sources"].as_array() {
        Some(sources) if !sources.is_empty() => sources.iter().collect(),
        _ => vec![&spec["source"]],
    }
}

/// Whether an Argo CD Application renders a chart with the values file `file` of `repository`:
/// the chart's `values.yaml` in a source's `path`, a `helm.valueFiles` entry relative to that
/// path, or a `$ref/…` entry into a source with that `ref`. With a Source Hydrator, its dry
/// source is the one it renders.
pub(crate) fn application_uses(obj: &Value, file: &str, repository: &str) -> bool {
    let sources = rendered_sources(&obj["spec"]);
    let ours = |s: &Value| gitops::same_repository(&text(&s["repoURL"]), repository);
    let refs: BTreeSet<String> = sources
        .iter()
        .filter(|s| ours(s))
        .filter_map(|s| non_empty(&s["ref"]))
        .collect();
    sources.iter().any(|s| {
        let value_files: Vec<String> = s["helm"]["valueFiles"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(non_empty)
            .collect();
        let by_ref = value_files.iter().any(|vf| {
            vf.strip_prefix('$')
                .and_then(|rest| rest.split_once('/'))
                .is_some_and(|(name, rest)| refs.contains(name) && join("", rest) == file)
        });
        if by_ref {
            return true;
        }
        if !ours(s) || s["path"].is_null() {
            return false;
        }
        let path = gitops::clean_path(&text(&s["path"]));
        join(&path, "values.yaml") == file
            || value_files
                .iter()
                .filter(|vf| !vf.starts_with('$'))
                .any(|vf| join(&path, vf) == file)
    })
}

/// The GitRepository (`namespace/name`) of `repository` a HelmRelease's chart comes from, when
/// the chart reads `file`: its `values.yaml` or one of `valuesFiles`.
fn chart_repository_using(obj: &Value, file: &str, listed: &Listed<'_>) -> Option<String> {
    let chart = &obj["spec"]["chart"]["spec"];
    let source = &chart["sourceRef"];
    if source["kind"] != "GitRepository" {
        return None;
    }
    let namespace =
        non_empty(&source["namespace"]).unwrap_or_else(|| text(&obj["metadata"]["namespace"]));
    let name = text(&source["name"]);
    let repository = listed.git_repositories.iter().find(|r| {
        r["metadata"]["namespace"] == namespace.as_str() && r["metadata"]["name"] == name.as_str()
    })?;
    if !gitops::same_repository(&text(&repository["spec"]["url"]), listed.repository) {
        return None;
    }
    let chart_path = gitops::clean_path(&text(&chart["chart"]));
    let reads = join(&chart_path, "values.yaml") == file
        || chart["valuesFiles"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(non_empty)
            .any(|vf| join("", &vf) == file);
    reads.then(|| format!("{namespace}/{name}"))
}

/// `dir/relative` with `.` and `..` resolved, as a path from the repository root.
fn join(dir: &str, relative: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in dir.split('/').chain(relative.split('/')) {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            part => parts.push(part),
        }
    }
    parts.join("/")
}

// ---------------------------------------------------------------------------------------------
// Deciding

/// What one pin became, in one release.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    /// The one container it speaks for, and whether the release carries the pin.
    Placed {
        workload: WorkloadId,
        container: String,
    },
    NotVerified(NotVerifiedReason, String),
}

/// Asks the releases about every pin: which live containers to judge (`read`), which are held
/// back by their release (`verdicts`: Progressing, or Failed when Flux gave up), and what could
/// not be verified, with the releases' reports. `releases[i]` are the releases of `pins[i]`;
/// `workloads` the listed namespaces.
pub(crate) fn decide(
    pins: &[HelmPin],
    releases: &[Releases],
    workloads: &BTreeMap<String, NamespaceWorkloads>,
    pin_commit: &str,
) -> gitops::Decision {
    let mut decision = gitops::Decision::default();
    let mut reports: BTreeMap<ReleaseKey, (ObjectReport, BTreeSet<WorkloadId>)> = BTreeMap::new();
    // (pin index, release) → outcome, before pins of one release are compared.
    let mut outcomes: Vec<(usize, &Release, Outcome)> = Vec::new();
    for (i, (pin, found)) in pins.iter().zip(releases).enumerate() {
        let found = match found {
            Ok(found) => found,
            Err((reason, detail)) => {
                decision
                    .findings
                    .not_verified
                    .push(not_verified(pin, *reason, detail.clone()));
                continue;
            }
        };
        for release in found {
            reports
                .entry(release.key())
                .or_insert_with(|| (report(release, pin_commit), BTreeSet::new()));
            outcomes.push((i, release, place(pin, release, workloads)));
        }
    }
    let claims = claims(pins, &outcomes);
    for (i, release, outcome) in outcomes {
        let pin = &pins[i];
        let (workload, container) = match outcome {
            Outcome::NotVerified(reason, detail) => {
                decision
                    .findings
                    .not_verified
                    .push(not_verified(pin, reason, detail));
                continue;
            }
            Outcome::Placed {
                workload,
                container,
            } => (workload, container),
        };
        if claims[&(workload.clone(), container.clone())].len() > 1 {
            decision.findings.not_verified.push(not_verified(
                pin,
                NotVerifiedReason::HelmAmbiguous,
                format!(
                    "{}: other pinned values of {} name {workload} container {container} with another digest",
                    pin.place(),
                    release.title()
                ),
            ));
            continue;
        }
        if let Some((_, workloads)) = reports.get_mut(&release.key()) {
            workloads.insert(workload.clone());
        }
        let expected = Expected {
            workload,
            container,
            pinned_ref: pin.pinned_ref(),
            digest: pin.digest.clone(),
        };
        as_released(&mut decision, release, expected);
    }
    decision.read.sort();
    decision.read.dedup();
    decision.findings.not_verified.sort();
    decision.findings.not_verified.dedup();
    decision.findings.objects = reports
        .into_values()
        .map(|(mut report, workloads)| {
            report.workloads = workloads.into_iter().collect();
            report
        })
        .collect();
    decision
}

/// The digests the pins of each release claim for each container they were placed on: two
/// pins of one release that claim the same container with different digests cannot both be
/// right about it.
fn claims<'p>(
    pins: &'p [HelmPin],
    outcomes: &[(usize, &Release, Outcome)],
) -> BTreeMap<(WorkloadId, String), BTreeSet<&'p Digest>> {
    let mut claims: BTreeMap<(WorkloadId, String), BTreeSet<&Digest>> = BTreeMap::new();
    for (i, _, outcome) in outcomes {
        if let Outcome::Placed {
            workload,
            container,
        } = outcome
        {
            claims
                .entry((workload.clone(), container.clone()))
                .or_default()
                .insert(&pins[*i].digest);
        }
    }
    claims
}

/// `expected` as far as `release` has released it: read from the cluster when it carries the
/// pin, else held back as Progressing or Failed with the release's reason.
fn as_released(decision: &mut gitops::Decision, release: &Release, expected: Expected) {
    match &release.progress {
        Progress::Carries(_) => decision.read.push(expected),
        Progress::Waiting(reason) => decision.verdicts.push(held_back(
            &expected,
            State::Progressing,
            format!("{} has not released it yet: {reason}", release.title()),
        )),
        Progress::Failed(reason) => decision.verdicts.push(held_back(
            &expected,
            State::Failed,
            format!("{} failed: {reason}", release.title()),
        )),
        // `place` never places a pin of a release that cannot tell.
        Progress::Unknown(_) => {}
    }
}

/// The one live container `pin` speaks for in `release`, or why there is none.
fn place(
    pin: &HelmPin,
    release: &Release,
    workloads: &BTreeMap<String, NamespaceWorkloads>,
) -> Outcome {
    let unverified = |reason, detail: String| {
        Outcome::NotVerified(
            reason,
            format!("{}: {}: {detail}", pin.place(), release.title()),
        )
    };
    if let Progress::Unknown(why) = &release.progress {
        return unverified(NotVerifiedReason::HelmRevisionUnknown, why.clone());
    }
    let mut candidates = Vec::new();
    for namespace in release.candidates.namespaces() {
        match workloads.get(&namespace) {
            Some(Ok(listed)) => {
                candidates.extend(listed.iter().filter(|w| release.candidates.holds(w)))
            }
            Some(Err(message)) => {
                return unverified(
                    NotVerifiedReason::HelmWorkloadsUnreadable,
                    format!("namespace {namespace}: {message}"),
                )
            }
            None => {
                return unverified(
                    NotVerifiedReason::HelmWorkloadsUnreadable,
                    format!("namespace {namespace} was not listed"),
                )
            }
        }
    }
    let found = matching_containers(&pin.repository, &candidates);
    let not_yet = match &release.progress {
        Progress::Waiting(reason) => format!(" (and it has not released the pin yet: {reason})"),
        _ => String::new(),
    };
    match found.as_slice() {
        [(workload, container)] => Outcome::Placed {
            workload: workload.clone(),
            container: container.clone(),
        },
        [] => unverified(
            NotVerifiedReason::HelmNoMatchingContainer,
            format!(
                "none of its {} runs {}{not_yet}",
                describe_candidates(&release.candidates, candidates.len()),
                pin.repository
            ),
        ),
        several => unverified(
            NotVerifiedReason::HelmAmbiguous,
            format!(
                "{} run {}: {}",
                several.len(),
                pin.repository,
                several
                    .iter()
                    .map(|(w, c)| format!("{w} container {c}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
    }
}

/// `2 workloads annotated meta.helm.sh/release-name=web in shop`.
fn describe_candidates(candidates: &Candidates, count: usize) -> String {
    let noun = super::wording::plural(count, "workload", "workloads");
    match candidates {
        Candidates::Annotated { namespace, release } => {
            format!("{count} {noun} annotated {RELEASE_NAME_ANNOTATION}={release} in {namespace}")
        }
        Candidates::Inventory(_) => format!("{count} inventory {noun}"),
    }
}

fn not_verified(pin: &HelmPin, reason: NotVerifiedReason, detail: String) -> NotVerified {
    NotVerified {
        image: pin.pinned_ref(),
        workload: pin.release.to_string(),
        reason,
        detail: Some(detail),
    }
}

/// The verdict for a container whose release has not released the pin (Progressing) or will
/// not (Failed): nothing is judged on the old values.
fn held_back(e: &Expected, state: State, reason: String) -> Verdict {
    let code = match state {
        State::Failed => "HelmReleaseFailed",
        _ => "HelmReleaseNotSynced",
    };
    gitops::unapplied(e, &e.workload, state, code, reason)
}

/// The release as the verdict reports it: `Flux HelmRelease shop/web: Synced: Helm release
/// shop/web revision 4 (chart web 1.2.0) has the current values, Ready`.
fn report(release: &Release, pin: &str) -> ObjectReport {
    let (synced, state) = match &release.progress {
        Progress::Carries(what) => (true, format!("Synced: {what}")),
        Progress::Waiting(why) => (false, format!("not synced: {why}")),
        Progress::Failed(why) => (false, format!("failed: {why}")),
        Progress::Unknown(why) => (false, format!("not verifiable: {why}")),
    };
    let health = &release.health;
    let health_text = match &health.message {
        Some(message) if !health.is_good() => {
            format!("{}: {}", health.status, super::wording::one_line(message))
        }
        _ => health.status.clone(),
    };
    ObjectReport {
        tool: release.tool,
        kind: release.kind,
        namespace: release.namespace.clone(),
        name: release.name.clone(),
        synced,
        revision: release.revision.clone(),
        pin_commit: pin.to_string(),
        health: health.status.clone(),
        health_message: health.message.clone(),
        workloads: Vec::new(),
        summary: format!("{}: {state}, {health_text}", release.title()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const PIN: &str = "1111111111111111111111111111111111111111";
    const OLD: &str = "0000000000000000000000000000000000000000";
    const DIGEST: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";
    const OTHER: &str = "sha256:3333333333333333333333333333333333333333333333333333333333333333";
    const CONFIG: &str = "sha256:9933f58f8bf459eb199d59ebc8a05683f3944e1242d9f5467d99aa2cf08a5370";
    const OLD_CONFIG: &str =
        "sha256:1d5f8ab0b69d018a1d5f8ab0b69d018a1d5f8ab0b69d018a1d5f8ab0b69d0aaa";

    fn condition(type_: &str, status: &str, reason: &str, message: &str) -> Value {
        json!({"type": type_, "status": status, "reason": reason, "message": message,
               "lastTransitionTime": "2026-11-25T06:00:00Z", "observedGeneration": 2})
    }

    /// A HelmRelease `shop/web` at generation 2 whose newest Helm release is `state` with
    /// `config`, the last attempt having been generation `attempted` with [`CONFIG`].
    fn helm_release(attempted: i64, state: &str, config: &str) -> Value {
        json!({
            "apiVersion": "helm.toolkit.fluxcd.io/v2",
            "kind": "HelmRelease",
            "metadata": {"namespace": "shop", "name": "web", "generation": 2},
            "spec": {"interval": "5m", "releaseName": "web",
                     "chart": {"spec": {"chart": "web", "sourceRef": {"kind": "HelmRepository", "name": "acme"}}},
                     "values": {"image": {"repository": "ghcr.io/acme/web", "digest": DIGEST}}},
            "status": {
                "observedGeneration": attempted,
                "lastAttemptedGeneration": attempted,
                "lastAttemptedConfigDigest": CONFIG,
                "lastAttemptedRevision": "1.2.0",
                "history": [{"chartName": "web", "chartVersion": "1.2.0", "configDigest": config,
                             "digest": "sha256:abc", "firstDeployed": "2026-11-20T10:00:00Z",
                             "lastDeployed": "2026-11-25T06:00:00Z", "name": "web",
                             "namespace": "shop", "status": state, "version": 4}],
                "conditions": [condition("Ready", "True", "UpgradeSucceeded", "Helm upgrade succeeded for release shop/web.v4 with chart web@1.2.0")]
            }
        })
    }

    fn pin(release: ReleaseRef) -> HelmPin {
        HelmPin {
            file: "apps/web/release.yaml".into(),
            line: Some(14),
            key_path: "spec.values.image.digest".into(),
            repository: "ghcr.io/acme/web".into(),
            tag: Some("1.4".into()),
            digest: DIGEST.parse().unwrap(),
            release,
        }
    }

    fn hr_ref() -> ReleaseRef {
        ReleaseRef::HelmRelease {
            namespace: Some("shop".into()),
            name: "web".into(),
        }
    }

    fn workload(name: &str, release: &str, containers: &[(&str, &str)]) -> ReleaseWorkload {
        ReleaseWorkload {
            workload: format!("shop/Deployment/{name}").parse().unwrap(),
            annotations: BTreeMap::from([
                (RELEASE_NAME_ANNOTATION.to_string(), release.to_string()),
                (RELEASE_NAMESPACE_ANNOTATION.to_string(), "shop".to_string()),
            ]),
            containers: containers
                .iter()
                .map(|(c, i)| (c.to_string(), i.to_string()))
                .collect(),
        }
    }

    /// A Flux Kustomization of the repository that applied `revision` and lists the HelmRelease.
    fn applier(revision: &str) -> GitOpsObject {
        GitOpsObject {
            tool: Tool::Flux,
            namespace: "flux-system".into(),
            name: "apps".into(),
            sources: vec![gitops::Source {
                url: "https://git.example.com/acme/gitops.git".into(),
                path: "apps".into(),
                revision: Some(revision.into()),
            }],
            inventory: vec![InventoryEntry {
                group: "helm.toolkit.fluxcd.io".into(),
                kind: "HelmRelease".into(),
                namespace: "shop".into(),
                name: "web".into(),
            }],
            health: Health {
                status: "Ready".into(),
                message: None,
            },
            named: false,
            hydration: None,
        }
    }

    /// [`decide_with`] for the one pin of a converged release, synced to its commit.
    fn decide_released(workloads: Vec<ReleaseWorkload>) -> gitops::Decision {
        decide_with(
            &[pin(hr_ref())],
            converged_release(),
            Sync::Synced(PIN.into()),
            workloads,
        )
    }

    /// What `decide` makes of `pins`, with the HelmRelease `hr` applied by a Kustomization
    /// whose sync is `sync`, and the workloads of namespace shop.
    fn decide_with(
        pins: &[HelmPin],
        hr: Value,
        sync: Sync,
        workloads: Vec<ReleaseWorkload>,
    ) -> gitops::Decision {
        let appliers = [applier(PIN)];
        let listed = Listed {
            applications: &[],
            helm_releases: &[hr],
            helm_releases_unread: None,
            applications_unread: None,
            git_repositories: &[],
            appliers: &appliers,
            sync: &[sync],
            repository: "https://git.example.com/acme/gitops",
            pin: PIN,
        };
        let releases: Vec<Releases> = pins.iter().map(|p| releases(p, &listed)).collect();
        let listed = BTreeMap::from([("shop".to_string(), Ok(workloads))]);
        decide(pins, &releases, &listed, PIN)
    }

    fn converged_release() -> Value {
        helm_release(2, "deployed", CONFIG)
    }

    #[test]
    fn a_pinned_repository_matches_live_images_however_spelled() {
        let w = workload(
            "web",
            "web",
            &[
                ("app", "ghcr.io/acme/web:1.3"),
                ("sidecar", "ghcr.io/acme/web-proxy:1"),
                ("migrate", "GHCR.io/acme/web:1.3@sha256:00"),
            ],
        );
        assert_eq!(
            matching_containers("ghcr.io/acme/web", &[&w]),
            vec![(w.workload.clone(), "app".to_string())],
            "another repository, or no image reference at all, is no match"
        );
        let hub = workload(
            "nginx",
            "web",
            &[("proxy", "docker.io/library/nginx:1.27"), ("init", "nginx")],
        );
        assert_eq!(matching_containers("nginx", &[&hub]).len(), 2);
        assert_eq!(
            matching_containers("index.docker.io/library/nginx", &[&hub]).len(),
            2
        );
    }

    #[test]
    fn release_names_are_composed_as_helm_controller_composes_them() {
        let mut hr = converged_release();
        assert_eq!(release_name(&hr), "web");
        hr["status"]["history"][0]["name"] = json!("shop-web");
        assert_eq!(release_name(&hr), "shop-web", "what was released wins");
        hr["status"] = json!({});
        assert_eq!(release_name(&hr), "web");
        hr["spec"].as_object_mut().unwrap().remove("releaseName");
        assert_eq!(release_name(&hr), "web");
        hr["spec"]["targetNamespace"] = json!("prod");
        assert_eq!(release_name(&hr), "prod-web");
        assert_eq!(release_namespace(&hr), "prod");
        hr["metadata"]["name"] = json!("a-very-long-helm-release-name-that-goes-past-the-limit");
        let name = release_name(&hr);
        assert_eq!(name.len(), 53);
        assert!(
            name.starts_with("prod-a-very-long-helm-release-name-that-"),
            "{name}"
        );
    }

    #[test]
    fn a_release_deployed_with_the_last_attempted_values_carries_them() {
        let progress = helm_release_progress(&converged_release());
        assert_eq!(
            progress,
            Progress::Carries(
                "Helm release shop/web revision 4 (chart web 1.2.0) has the current values".into()
            )
        );
    }

    #[test]
    fn a_release_behind_its_helm_release_is_waiting_and_says_why() {
        let not_attempted = helm_release_progress(&helm_release(1, "deployed", OLD_CONFIG));
        assert_eq!(
            not_attempted,
            Progress::Waiting(
                "helm-controller has not acted on generation 2 yet (last attempted: 1)".into()
            )
        );
        let older_values = helm_release_progress(&helm_release(2, "deployed", OLD_CONFIG));
        assert_eq!(
            older_values,
            Progress::Waiting(
                "Helm release shop/web revision 4 has other values (sha256:1d5f8ab0b69d) than the last attempt (sha256:9933f58f8bf4)".into()
            )
        );
        let upgrading = helm_release_progress(&helm_release(2, "pending-upgrade", CONFIG));
        assert!(matches!(upgrading, Progress::Waiting(_)), "{upgrading:?}");
    }

    #[test]
    fn a_failed_release_fails_once_flux_stopped_retrying() {
        let mut hr = helm_release(2, "failed", CONFIG);
        let ready = condition(
            "Ready",
            "False",
            "UpgradeFailed",
            "Helm upgrade failed for release shop/web with chart web@1.2.0: context deadline exceeded",
        );
        hr["status"]["conditions"] = json!([ready]);
        assert!(matches!(helm_release_progress(&hr), Progress::Waiting(_)));
        hr["status"]["conditions"] = json!([
            ready,
            condition(
                "Stalled",
                "True",
                "RetriesExceeded",
                "Failed to upgrade after 3 attempt(s)"
            )
        ]);
        assert_eq!(
            helm_release_progress(&hr),
            Progress::Failed(
                "Helm release shop/web revision 4 is failed: Helm upgrade failed for release shop/web with chart web@1.2.0: context deadline exceeded; Flux stopped retrying: Helm upgrade failed for release shop/web with chart web@1.2.0: context deadline exceeded".into()
            )
        );
        // A rollback leaves the old values deployed: not the pin.
        let mut rolled_back = helm_release(2, "deployed", OLD_CONFIG);
        rolled_back["status"]["conditions"] = hr["status"]["conditions"].clone();
        assert!(matches!(
            helm_release_progress(&rolled_back),
            Progress::Failed(_)
        ));
    }

    #[test]
    fn a_suspended_release_behind_its_spec_cannot_be_told() {
        let mut hr = helm_release(1, "deployed", OLD_CONFIG);
        hr["spec"]["suspend"] = json!(true);
        assert!(matches!(helm_release_progress(&hr), Progress::Unknown(_)));
    }

    #[test]
    fn without_history_an_older_controller_is_read_by_its_revisions() {
        let mut hr = converged_release();
        let status = hr["status"].as_object_mut().unwrap();
        status.remove("history");
        status.remove("lastAttemptedGeneration");
        status.insert("lastAppliedRevision".into(), json!("1.2.0"));
        assert!(matches!(helm_release_progress(&hr), Progress::Carries(_)));
        hr["status"]["lastAppliedRevision"] = json!("1.1.0");
        assert_eq!(
            helm_release_progress(&hr),
            Progress::Waiting("chart revision 1.2.0 attempted, 1.1.0 applied".into())
        );
        hr["status"]["conditions"] = json!([condition(
            "Ready",
            "Unknown",
            "Progressing",
            "Running 'upgrade' action"
        )]);
        assert_eq!(
            helm_release_progress(&hr),
            Progress::Waiting("not released yet: Running 'upgrade' action".into())
        );
    }

    #[test]
    fn an_application_carries_its_values_once_argo_cd_synced_its_current_spec() {
        let source = json!({"repoURL": "https://charts.example.com", "chart": "web", "targetRevision": "1.2.0",
                            "helm": {"valuesObject": {"image": {"digest": DIGEST}}}});
        let mut app = json!({
            "metadata": {"namespace": "argocd", "name": "web"},
            "spec": {"source": source},
            "status": {"sync": {"status": "Synced", "revision": "1.2.0", "comparedTo": {"source": source}}}
        });
        assert!(matches!(application_progress(&app), Progress::Carries(_)));
        app["status"]["sync"]["status"] = json!("OutOfSync");
        assert_eq!(
            application_progress(&app),
            Progress::Waiting(
                "Argo CD has compared the Application's current spec: OutOfSync".into()
            )
        );
        app["status"]["sync"]["status"] = json!("Synced");
        app["status"]["sync"]["comparedTo"]["source"]["helm"]["valuesObject"]["image"]["digest"] =
            json!(OTHER);
        assert!(matches!(application_progress(&app), Progress::Waiting(_)));
    }

    #[test]
    fn an_application_reads_the_values_files_its_helm_sources_name() {
        let repo = "https://git.example.com/acme/gitops.git";
        let single = json!({"spec": {"source": {"repoURL": repo, "path": "./charts/web",
            "helm": {"valueFiles": ["values-prod.yaml", "../shared/values.yaml"]}}}});
        for file in [
            "charts/web/values.yaml",
            "charts/web/values-prod.yaml",
            "charts/shared/values.yaml",
        ] {
            assert!(application_uses(&single, file, repo), "{file}");
        }
        assert!(!application_uses(
            &single,
            "charts/web/values-dev.yaml",
            repo
        ));
        assert!(!application_uses(
            &single,
            "charts/web/values.yaml",
            "https://git.example.com/acme/other"
        ));
        let multi = json!({"spec": {"sources": [
            {"repoURL": "https://charts.example.com", "chart": "web", "targetRevision": "1.2.0",
             "helm": {"valueFiles": ["$values/envs/prod/web.yaml"]}},
            {"repoURL": "git@git.example.com:acme/gitops.git", "targetRevision": "main", "ref": "values"}
        ]}});
        assert!(application_uses(&multi, "envs/prod/web.yaml", repo));
        assert!(!application_uses(&multi, "envs/dev/web.yaml", repo));
        // Argo CD's Source Hydrator renders its dry source.
        let hydrated = json!({"spec": {"sourceHydrator": {
            "drySource": {"repoURL": repo, "path": "charts/web", "targetRevision": "main",
                          "helm": {"valueFiles": ["values-prod.yaml"]}},
            "syncSource": {"targetBranch": "environments/prod", "path": "web"}}}});
        assert!(application_uses(&hydrated, "charts/web/values.yaml", repo));
        assert!(application_uses(
            &hydrated,
            "charts/web/values-prod.yaml",
            repo
        ));
        assert!(!application_uses(&hydrated, "web/values.yaml", repo));
    }

    #[test]
    fn a_release_argo_cd_could_not_hydrate_fails() {
        let failed = Sync::Hydration(gitops::Waiting {
            at: Some(OLD.into()),
            synced: None,
            step: gitops::Step::Failed("Failed to hydrate revision \"1111111\": boom".into()),
        });
        assert_eq!(
            held(Tool::ArgoCd, &failed, PIN),
            Progress::Failed(
                "Argo CD could not hydrate 1111111: Failed to hydrate revision \"1111111\": boom"
                    .into()
            )
        );
        assert!(matches!(
            held(Tool::ArgoCd, &Sync::Behind(OLD.into()), PIN),
            Progress::Waiting(_)
        ));
    }

    #[test]
    fn the_one_matching_container_of_a_released_helm_release_is_read() {
        let d = decide_released(vec![
            workload("web", "web", &[("app", "ghcr.io/acme/web:1.3")]),
            workload("other", "other", &[("app", "ghcr.io/acme/web:1.3")]),
        ]);
        assert_eq!(
            d.read,
            vec![Expected {
                workload: "shop/Deployment/web".parse().unwrap(),
                container: "app".into(),
                pinned_ref: format!("ghcr.io/acme/web:1.4@{DIGEST}"),
                digest: DIGEST.parse().unwrap(),
            }],
            "the other release's workload is not a candidate"
        );
        assert!(d.verdicts.is_empty() && d.findings.not_verified.is_empty());
        let report = &d.findings.objects[0];
        assert!(report.synced);
        assert_eq!(
            report.summary,
            "Flux HelmRelease shop/web: Synced: Helm release shop/web revision 4 (chart web 1.2.0) has the current values, Ready"
        );
        assert_eq!(report.workloads[0].to_string(), "shop/Deployment/web");
        assert_eq!(report.revision.as_deref(), Some(PIN));
    }

    #[test]
    fn a_release_that_has_not_released_the_pin_holds_its_container_back() {
        let workloads = || vec![workload("web", "web", &[("app", "ghcr.io/acme/web:1.3")])];
        let behind = decide_with(
            &[pin(hr_ref())],
            converged_release(),
            Sync::Behind(OLD.into()),
            workloads(),
        );
        assert!(behind.read.is_empty());
        assert_eq!(behind.verdicts.len(), 1);
        assert_eq!(behind.verdicts[0].state, State::Progressing);
        assert_eq!(
            behind.verdicts[0].reason,
            "Flux HelmRelease shop/web has not released it yet: Flux has not synced 1111111 yet (at 0000000)"
        );
        let older = decide_with(
            &[pin(hr_ref())],
            helm_release(2, "deployed", OLD_CONFIG),
            Sync::Synced(PIN.into()),
            workloads(),
        );
        assert_eq!(older.verdicts[0].state, State::Progressing);
        assert_eq!(
            older.verdicts[0].conditions[0].reason,
            "HelmReleaseNotSynced"
        );
        assert!(!older.findings.objects[0].synced);
    }

    #[test]
    fn a_pin_no_container_or_several_match_is_not_verified_with_the_reason() {
        let none = decide_released(vec![workload(
            "web",
            "web",
            &[("app", "ghcr.io/acme/api:2")],
        )]);
        assert!(none.read.is_empty() && none.verdicts.is_empty());
        assert_eq!(
            none.findings.not_verified,
            vec![NotVerified {
                image: format!("ghcr.io/acme/web:1.4@{DIGEST}"),
                workload: "Flux HelmRelease shop/web".into(),
                reason: NotVerifiedReason::HelmNoMatchingContainer,
                detail: Some(
                    "apps/web/release.yaml:14 spec.values.image.digest: Flux HelmRelease shop/web: none of its 1 workload annotated meta.helm.sh/release-name=web in shop runs ghcr.io/acme/web".into()
                ),
            }]
        );
        let two = decide_released(vec![
            workload("web", "web", &[("app", "ghcr.io/acme/web:1.3")]),
            workload("worker", "web", &[("app", "ghcr.io/acme/web:1.3")]),
        ]);
        assert!(two.read.is_empty());
        assert_eq!(
            two.findings.not_verified[0].reason,
            NotVerifiedReason::HelmAmbiguous
        );
        assert!(
            two.findings.not_verified[0]
                .why()
                .ends_with("2 run ghcr.io/acme/web: shop/Deployment/web container app, shop/Deployment/worker container app"),
            "{}",
            two.findings.not_verified[0].why()
        );
    }

    #[test]
    fn two_pins_claiming_one_container_with_different_digests_are_not_verified() {
        let mut second = pin(hr_ref());
        second.key_path = "spec.values.worker.image.digest".into();
        second.digest = OTHER.parse().unwrap();
        let d = decide_with(
            &[pin(hr_ref()), second],
            converged_release(),
            Sync::Synced(PIN.into()),
            vec![workload("web", "web", &[("app", "ghcr.io/acme/web:1.3")])],
        );
        assert!(d.read.is_empty());
        assert_eq!(d.findings.not_verified.len(), 2);
        assert!(d
            .findings
            .not_verified
            .iter()
            .all(|n| n.reason == NotVerifiedReason::HelmAmbiguous));
    }

    #[test]
    fn a_release_no_applier_lists_is_trusted_only_if_its_values_hold_the_digest() {
        let listed = |hr: &Value| -> Releases {
            let list = [hr.clone()];
            let l = Listed {
                applications: &[],
                helm_releases: &list,
                helm_releases_unread: None,
                applications_unread: None,
                git_repositories: &[],
                appliers: &[],
                sync: &[],
                repository: "https://git.example.com/acme/gitops",
                pin: PIN,
            };
            releases(&pin(hr_ref()), &l)
        };
        let holds = listed(&converged_release()).unwrap();
        assert!(matches!(holds[0].progress, Progress::Carries(_)));
        let mut other = converged_release();
        other["spec"]["values"]["image"]["digest"] = json!(OTHER);
        let lacks = listed(&other).unwrap();
        assert!(
            matches!(&lacks[0].progress, Progress::Unknown(why) if why.contains("no Flux Kustomization or Argo CD Application")),
            "{:?}",
            lacks[0].progress
        );
        let missing = Listed {
            repository: "https://git.example.com/acme/gitops",
            pin: PIN,
            ..Listed::default()
        };
        assert_eq!(
            releases(&pin(hr_ref()), &missing),
            Err((
                NotVerifiedReason::HelmReleaseMissing,
                "Flux HelmRelease shop/web is not in the cluster".into()
            ))
        );
        let refused = Listed {
            helm_releases_unread: Some("tagpin may not list HelmReleases: forbidden"),
            ..missing
        };
        assert_eq!(
            releases(&pin(hr_ref()), &refused).unwrap_err().1,
            "Flux HelmRelease shop/web cannot be read: tagpin may not list HelmReleases: forbidden"
        );
    }

    #[test]
    fn an_application_a_tenant_may_not_list_is_said_unread_not_missing() {
        let application = pin(ReleaseRef::Application {
            namespace: Some("argocd".into()),
            name: "web".into(),
        });
        let why = "the ServiceAccount team-a/tagpin may not list applications.argoproj.io in \
                   all namespaces; only those of team-a were read";
        let refused = Listed {
            applications_unread: Some(why),
            repository: "https://git.example.com/acme/gitops",
            pin: PIN,
            ..Listed::default()
        };
        assert_eq!(
            releases(&application, &refused),
            Err((
                NotVerifiedReason::HelmReleaseMissing,
                format!("Argo CD Application argocd/web cannot be read: {why}")
            ))
        );
        let values = pin(ReleaseRef::ValuesFile {
            path: "apps/web/values.yaml".into(),
        });
        assert_eq!(
            releases(&values, &refused).unwrap_err().1,
            format!(
                "no HelmRelease or Argo CD Application in the cluster reads apps/web/values.yaml \
                 ({why})"
            )
        );
    }

    #[test]
    fn a_release_named_without_namespace_is_the_one_live_release_of_that_name() {
        let unnamespaced = pin(ReleaseRef::HelmRelease {
            namespace: None,
            name: "web".into(),
        });
        let mut staging = converged_release();
        staging["metadata"]["namespace"] = json!("staging");
        let one = [converged_release()];
        let l = Listed {
            helm_releases: &one,
            repository: "https://git.example.com/acme/gitops",
            pin: PIN,
            ..Listed::default()
        };
        let found = releases(&unnamespaced, &l).unwrap();
        assert_eq!(found[0].title(), "Flux HelmRelease shop/web");
        let two = [converged_release(), staging];
        let l = Listed {
            helm_releases: &two,
            ..l
        };
        assert_eq!(
            releases(&unnamespaced, &l),
            Err((
                NotVerifiedReason::HelmAmbiguous,
                "Flux HelmRelease web names no namespace, and the cluster holds several: shop/web, staging/web".into()
            ))
        );
        assert_eq!(
            releases(&pin(hr_ref()), &l).unwrap()[0].title(),
            "Flux HelmRelease shop/web",
            "a namespace settles it"
        );
    }

    #[test]
    fn a_values_file_flux_reads_through_a_chart_repository_is_not_verified() {
        let mut hr = converged_release();
        hr["spec"]["chart"]["spec"] = json!({"chart": "./charts/web", "sourceRef": {"kind": "GitRepository", "name": "gitops", "namespace": "flux-system"}});
        let repository = json!({"metadata": {"namespace": "flux-system", "name": "gitops"},
                                "spec": {"url": "https://git.example.com/acme/gitops"}});
        let l = Listed {
            applications: &[],
            helm_releases: &[hr],
            helm_releases_unread: None,
            applications_unread: None,
            git_repositories: &[repository],
            appliers: &[],
            sync: &[],
            repository: "https://git.example.com/acme/gitops.git",
            pin: PIN,
        };
        let values = pin(ReleaseRef::ValuesFile {
            path: "charts/web/values.yaml".into(),
        });
        let found = releases(&values, &l).unwrap();
        assert_eq!(found.len(), 1);
        assert!(
            matches!(&found[0].progress, Progress::Unknown(why) if why.contains("GitRepository flux-system/gitops"))
        );
        let elsewhere = pin(ReleaseRef::ValuesFile {
            path: "charts/api/values.yaml".into(),
        });
        assert_eq!(
            releases(&elsewhere, &l).unwrap_err().0,
            NotVerifiedReason::HelmReleaseMissing
        );
    }
}
