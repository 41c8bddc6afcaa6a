//! Argo CD Applications and Flux Kustomizations, asked directly.
//!
//! tagpin pins files in Git; a GitOps tool turns them into live objects. Left to itself, the
//! verifier guesses the live names (a kustomize `namePrefix`, a namespace the tool sets) and can
//! only infer "not synced yet" from a pod template that lacks the digest. The tool knows both:
//! its inventory lists the objects it applied, and its status names the commit it applied. So
//! when the cluster holds an Argo CD `Application` or a Flux `Kustomization` whose source is the
//! configured repository and whose path holds a pinned file (or that `verify.gitops` names), it
//! speaks for that file's workloads:
//!
//! - the live workload is the inventory entry of the same kind named as the manifest names it,
//!   or so named with a prefix or suffix added, when that is unambiguous (else the pin is not
//!   verified, with the reason);
//! - until the object applied the pin commit or a commit after it, its workloads are
//!   Progressing ("Argo CD has not synced <sha> yet (at <rev>)"), not judged on the old spec;
//! - its own sync and health are reported beside the verdicts.
//!
//! An Application with Argo CD's Source Hydrator ([`super::hydrator`]) applies its dry source:
//! it is in scope by the dry source's repository and path, and the commit it applied is the dry
//! commit its synced hydrated commit was rendered from. Until that is the pin commit or later,
//! its workloads wait on the step that holds them: hydration (Progressing, or Failed with Argo
//! CD's message), a `hydrateTo` branch waiting for a review, or the sync.
//!
//! A workload no such object applies is read exactly as before. Pure: the caller lists the
//! objects (as JSON) and answers which applied revisions descend from the pin commit; nothing
//! here does I/O.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::Value;

use super::expected::{Expected, NameMapping, NotVerified, NotVerifiedReason};
use super::hydrator::{self, HydratedCommit, Hydration};
use super::verdict::{Condition, ConditionStatus, ConditionType, State, Verdict};
use crate::config::{GitOpsObjects, ObjectName};
use crate::manifest::Origin;
use crate::plan::ScannedFile;
use crate::proposal::Pin;
use crate::render::Render;
use crate::workload::{WorkloadId, WorkloadKind};

/// Which tool an object belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Tool {
    #[serde(rename = "argocd")]
    ArgoCd,
    #[serde(rename = "flux")]
    Flux,
}

impl Tool {
    /// The product, as its users name it.
    pub fn name(self) -> &'static str {
        match self {
            Tool::ArgoCd => "Argo CD",
            Tool::Flux => "Flux",
        }
    }

    /// The kind of object that applies a path of a repository.
    pub fn kind(self) -> &'static str {
        match self {
            Tool::ArgoCd => "Application",
            Tool::Flux => "Kustomization",
        }
    }
}

/// One place an object applies manifests from, and the commit it last applied from there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    pub url: String,
    /// Relative to the repository root, without `./` or slashes at either end; empty for the
    /// root itself.
    pub path: String,
    /// The commit applied; `None` before the first sync.
    pub revision: Option<String>,
}

/// A live object the GitOps object applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InventoryEntry {
    /// Empty for the core group.
    pub group: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

/// The object's own judgement of what it applied: Argo CD's `status.health`, Flux's `Ready`
/// condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    /// `Healthy`, `Progressing`, `Degraded`, `Suspended`, `Missing` (Argo CD); `Ready`, or the
    /// `Ready` condition's reason when it is not true, or `Suspended` (Flux); `Unknown`.
    pub status: String,
    pub message: Option<String>,
}

impl Health {
    pub(crate) fn is_good(&self) -> bool {
        self.status == "Healthy" || self.status == "Ready"
    }
}

/// An Argo CD Application or Flux Kustomization, reduced to what tagpin reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitOpsObject {
    pub tool: Tool,
    pub namespace: String,
    pub name: String,
    pub sources: Vec<Source>,
    pub inventory: Vec<InventoryEntry>,
    pub health: Health,
    /// Named in `verify.gitops`: it speaks for every pin, wherever the pinned files are.
    pub named: bool,
    /// An Argo CD Application with a Source Hydrator: its only source is the dry source, whose
    /// revision is the dry commit of the hydrated commit it synced (once known).
    pub hydration: Option<Hydration>,
}

impl GitOpsObject {
    /// `Argo CD Application argocd/shop`.
    pub fn title(&self) -> String {
        format!(
            "{} {} {}/{}",
            self.tool.name(),
            self.tool.kind(),
            self.namespace,
            self.name
        )
    }

    /// Whether it applies one of `files`: it is named, or one of its sources' paths holds one.
    fn applies(&self, files: Option<&BTreeSet<String>>) -> bool {
        self.named
            || self.sources.iter().any(|s| {
                files
                    .into_iter()
                    .flatten()
                    .any(|file| path_holds(&s.path, file))
            })
    }
}

// ---------------------------------------------------------------------------------------------
// Reading the listed objects

fn text(value: &Value) -> String {
    value.as_str().unwrap_or_default().to_string()
}

fn non_empty(value: &Value) -> Option<String> {
    value.as_str().filter(|s| !s.is_empty()).map(str::to_string)
}

/// The listed objects: every Application, and the Kustomizations whose source is a
/// GitRepository (with that GitRepository's URL).
pub fn objects(
    applications: &[Value],
    kustomizations: &[Value],
    git_repositories: &[Value],
) -> Vec<GitOpsObject> {
    applications
        .iter()
        .map(application)
        .chain(
            kustomizations
                .iter()
                .filter_map(|k| kustomization(k, git_repositories)),
        )
        .collect()
}

/// An Argo CD `Application`: its sources, each with the revision applied from it
/// (`status.sync.revision`; for `spec.sources[i]`, `status.sync.revisions[i]`), the resources
/// it manages (`status.resources`) and `status.health`. With `spec.sourceHydrator`, its one
/// source is the dry source, at the dry commit the status pairs with the synced hydrated
/// commit (else none yet: see [`hydrated_commits`]).
pub fn application(obj: &Value) -> GitOpsObject {
    let spec = &obj["spec"];
    let status = &obj["status"];
    let sync = &status["sync"];
    let source = |s: &Value, revision: &Value| Source {
        url: text(&s["repoURL"]),
        path: clean_path(&text(&s["path"])),
        revision: non_empty(revision),
    };
    let hydrated = hydrator::read(obj);
    let sources = match (
        &hydrated,
        spec["sources"].as_array().filter(|s| !s.is_empty()),
    ) {
        (Some((dry, hydration)), _) => vec![Source {
            url: dry.url.clone(),
            path: clean_path(&dry.path),
            revision: hydration.dry_of_synced().map(str::to_string),
        }],
        (None, Some(sources)) => sources
            .iter()
            .enumerate()
            .map(|(i, s)| source(s, &sync["revisions"][i]))
            .collect(),
        (None, None) => vec![source(&spec["source"], &sync["revision"])],
    };
    let inventory = status["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| InventoryEntry {
            group: text(&r["group"]),
            kind: text(&r["kind"]),
            namespace: text(&r["namespace"]),
            name: text(&r["name"]),
        })
        .collect();
    GitOpsObject {
        tool: Tool::ArgoCd,
        namespace: text(&obj["metadata"]["namespace"]),
        name: text(&obj["metadata"]["name"]),
        sources,
        inventory,
        health: Health {
            status: non_empty(&status["health"]["status"]).unwrap_or_else(|| "Unknown".into()),
            message: non_empty(&status["health"]["message"]),
        },
        named: false,
        hydration: hydrated.map(|(_, hydration)| hydration),
    }
}

/// A Flux `Kustomization`, with the URL of the `GitRepository` its `spec.sourceRef` names
/// (looked up in `git_repositories`; one that is not there leaves the URL empty), the commit of
/// `status.lastAppliedRevision`, `status.inventory` and its `Ready` condition. `None` when its
/// source is not a GitRepository: an OCIRepository or a Bucket applies no commit.
pub fn kustomization(obj: &Value, git_repositories: &[Value]) -> Option<GitOpsObject> {
    let spec = &obj["spec"];
    let status = &obj["status"];
    let source_ref = &spec["sourceRef"];
    if source_ref["kind"] != "GitRepository" {
        return None;
    }
    let namespace = text(&obj["metadata"]["namespace"]);
    let source_namespace = non_empty(&source_ref["namespace"]).unwrap_or_else(|| namespace.clone());
    let url = git_repositories
        .iter()
        .find(|r| {
            r["metadata"]["namespace"] == source_namespace.as_str()
                && r["metadata"]["name"] == source_ref["name"]
        })
        .map(|r| text(&r["spec"]["url"]))
        .unwrap_or_default();
    let inventory = status["inventory"]["entries"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| flux_entry(e["id"].as_str()?))
        .collect();
    Some(GitOpsObject {
        tool: Tool::Flux,
        name: text(&obj["metadata"]["name"]),
        namespace,
        sources: vec![Source {
            url,
            path: clean_path(&text(&spec["path"])),
            revision: status["lastAppliedRevision"].as_str().and_then(flux_commit),
        }],
        inventory,
        health: flux_health(obj),
        named: false,
        hydration: None,
    })
}

/// A Flux inventory id, `<namespace>_<name>_<group>_<kind>`: none of the four can hold `_`.
fn flux_entry(id: &str) -> Option<InventoryEntry> {
    let parts: Vec<&str> = id.split('_').collect();
    let [namespace, name, group, kind] = parts.as_slice() else {
        return None;
    };
    Some(InventoryEntry {
        group: group.to_string(),
        kind: kind.to_string(),
        namespace: namespace.to_string(),
        name: name.to_string(),
    })
}

/// The commit in a Flux revision: `main@sha1:<sha>` (Flux 2.1 and later), `main/<sha>`
/// (before), or `sha1:<sha>` for a GitRepository that checks out a commit.
pub(crate) fn flux_commit(revision: &str) -> Option<String> {
    let digest = match revision.rsplit_once('@') {
        Some((_, digest)) => digest,
        None => revision.rsplit_once('/').map_or(revision, |(_, sha)| sha),
    };
    let hex = digest
        .strip_prefix("sha1:")
        .or_else(|| digest.strip_prefix("sha256:"))
        .unwrap_or(digest);
    (!hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit())).then(|| hex.to_lowercase())
}

/// Flux's judgement: `spec.suspend`, else the `Ready` condition.
pub(crate) fn flux_health(obj: &Value) -> Health {
    if obj["spec"]["suspend"] == true {
        return Health {
            status: "Suspended".into(),
            message: None,
        };
    }
    let ready = obj["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready");
    match ready {
        None => Health {
            status: "Unknown".into(),
            message: None,
        },
        Some(c) => Health {
            status: if c["status"] == "True" {
                "Ready".into()
            } else {
                non_empty(&c["reason"]).unwrap_or_else(|| "NotReady".into())
            },
            message: non_empty(&c["message"]),
        },
    }
}

// ---------------------------------------------------------------------------------------------
// Which objects speak for the pins

/// Whether two repository URLs name the same repository, as Argo CD compares them: scheme,
/// credentials, a default port, a `.git` suffix, a trailing slash and case aside, and
/// `git@host:org/repo` the same as `https://host/org/repo`.
pub(crate) fn same_repository(a: &str, b: &str) -> bool {
    let (a, b) = (normalized_url(a), normalized_url(b));
    !a.is_empty() && a == b
}

/// `host/path`, lowercase, or `/path` for a local repository.
fn normalized_url(url: &str) -> String {
    let url = url.trim();
    let without_user = |authority: &str| authority.rsplit('@').next().unwrap_or("").to_string();
    let (host, path) = if let Some((scheme, rest)) = url.split_once("://") {
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let mut host = without_user(authority);
        let default_port = match scheme.to_ascii_lowercase().as_str() {
            "https" => ":443",
            "http" => ":80",
            "ssh" => ":22",
            "git" => ":9418",
            _ => "",
        };
        if !default_port.is_empty() && host.ends_with(default_port) {
            host.truncate(host.len() - default_port.len());
        }
        (host, path)
    } else {
        // scp-like `user@host:path`; a path (even `C:\…`) has no colon before its first slash
        // that follows a host of more than one character.
        match url.split_once(':') {
            Some((authority, path)) if authority.len() > 1 && !authority.contains('/') => {
                (without_user(authority), path)
            }
            _ => (String::new(), url),
        }
    };
    let path = path.trim_matches('/');
    let path = path
        .strip_suffix(".git")
        .unwrap_or(path)
        .trim_end_matches('/');
    if host.is_empty() && path.is_empty() {
        return String::new();
    }
    format!("{host}/{path}").to_lowercase()
}

/// A path in a repository as tools write it (`./apps/prod/`, `.`), made comparable.
pub(crate) fn clean_path(path: &str) -> String {
    let mut path = path.trim();
    while let Some(rest) = path.strip_prefix("./") {
        path = rest;
    }
    let path = path.trim_matches('/');
    if path == "." {
        String::new()
    } else {
        path.to_string()
    }
}

/// Whether the directory `dir` (cleaned; empty for the root) holds `file`.
pub(crate) fn path_holds(dir: &str, file: &str) -> bool {
    dir.is_empty() || file == dir || file.starts_with(&format!("{dir}/"))
}

/// The objects that may speak for the pins: those named in `verify.gitops` when any are,
/// else every object with a source in `repository`. Only the sources in `repository` are kept
/// (all of a named object's, if none is): the revision applied from another repository says
/// nothing about the pin commit.
pub(crate) fn relevant(
    objects: Vec<GitOpsObject>,
    repository: &str,
    named: &GitOpsObjects,
) -> Vec<GitOpsObject> {
    objects
        .into_iter()
        .filter_map(|mut object| {
            let ours = |s: &Source| same_repository(&s.url, repository);
            if named.is_empty() {
                object.sources.retain(ours);
                return (!object.sources.is_empty()).then_some(object);
            }
            if !names_for(named, object.tool).contains(&name_of(&object)) {
                return None;
            }
            object.named = true;
            if object.sources.iter().any(ours) {
                object.sources.retain(ours);
            }
            Some(object)
        })
        .collect()
}

fn names_for(named: &GitOpsObjects, tool: Tool) -> &[ObjectName] {
    match tool {
        Tool::ArgoCd => &named.applications,
        Tool::Flux => &named.kustomizations,
    }
}

fn name_of(object: &GitOpsObject) -> ObjectName {
    ObjectName {
        namespace: object.namespace.clone(),
        name: object.name.clone(),
    }
}

/// The objects `verify.gitops` names that are not among `objects` (as listed): a typo there
/// would otherwise quietly bring back the guessing the names were meant to end.
pub(crate) fn missing_names(named: &GitOpsObjects, objects: &[GitOpsObject]) -> Vec<String> {
    [Tool::ArgoCd, Tool::Flux]
        .into_iter()
        .flat_map(|tool| {
            names_for(named, tool)
                .iter()
                .filter(move |n| !objects.iter().any(|o| o.tool == tool && name_of(o) == **n))
                .map(move |n| format!("{} {} {n}", tool.name(), tool.kind()))
        })
        .collect()
}

/// Every revision the objects applied, to ask the repository about, and the dry commits of
/// their hydrations.
pub(crate) fn revisions(objects: &[GitOpsObject]) -> BTreeSet<String> {
    let hydrated = objects
        .iter()
        .flat_map(|o| o.hydration.iter().flat_map(Hydration::dry_commits))
        .map(str::to_string);
    objects
        .iter()
        .flat_map(|o| &o.sources)
        .filter_map(|s| s.revision.clone())
        .chain(hydrated)
        .collect()
}

/// The hydrated commits the objects synced whose dry commit their status does not say: the
/// caller reads it from the repository ([`HydratedCommit::metadata_files`],
/// [`dry_commit_in`]) and hands it to [`with_dry_commits`].
pub(crate) fn hydrated_commits(objects: &[GitOpsObject]) -> BTreeSet<HydratedCommit> {
    objects
        .iter()
        .filter_map(|o| o.hydration.as_ref()?.unresolved())
        .collect()
}

/// The dry commit of the configured `repository` that a `hydrator.metadata` names. A file
/// naming another repository says nothing about this one's commits.
pub(crate) fn dry_commit_in(metadata: &[u8], repository: &str) -> Option<String> {
    let metadata = hydrator::metadata(metadata)?;
    match &metadata.repository {
        Some(url) if !same_repository(url, repository) => None,
        _ => Some(metadata.dry),
    }
}

/// `objects` with the dry commits read from the repository (`dry`, by hydrated commit) as the
/// revisions their dry sources applied.
pub(crate) fn with_dry_commits(objects: &mut [GitOpsObject], dry: &BTreeMap<String, String>) {
    for object in objects {
        let Some(commit) = object
            .hydration
            .as_ref()
            .and_then(Hydration::unresolved)
            .and_then(|h| dry.get(&h.commit))
        else {
            continue;
        };
        for source in &mut object.sources {
            source.revision = Some(commit.clone());
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Synced or not

/// Whether an object applied the pin commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sync {
    /// Every source of the repository applied the pin commit or a later one (this one).
    Synced(String),
    /// A source applied an earlier or unrelated commit (this one).
    Behind(String),
    /// A source applied nothing yet.
    NothingApplied,
    /// An Application with a Source Hydrator that has not synced a hydrated commit of the pin
    /// commit or a later one: where it is, and the step that holds it.
    Hydration(Waiting),
}

/// Where an Application with a Source Hydrator stands, short of the pin commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    /// The dry commit of the hydrated commit it synced, when that is known.
    pub at: Option<String>,
    /// The hydrated commit it synced (`status.sync.revision`).
    pub synced: Option<String>,
    pub step: Step,
}

/// The step of the Source Hydrator a pin waits on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Argo CD has not hydrated the pin commit, or a later one (`hydrating`: it is at it now).
    NotHydrated { hydrating: bool },
    /// Argo CD's hydration of the pin commit, or of a later one, failed: its message.
    Failed(String),
    /// Argo CD hydrated the pin commit (or a later one) as `hydrated` into the `hydrateTo`
    /// branch `into`; nothing has moved it to the sync branch `sync_branch` yet.
    NotMerged {
        hydrated: String,
        into: String,
        sync_branch: String,
    },
    /// Hydrated, and not synced yet.
    NotSynced,
}

/// The object's sync, given which revisions are the pin commit or come after it.
pub(crate) fn sync_of(object: &GitOpsObject, descends: &BTreeMap<String, bool>) -> Sync {
    let mut applied = None;
    let mut behind = None;
    for source in &object.sources {
        match &source.revision {
            None => {
                behind = Some(Sync::NothingApplied);
                break;
            }
            Some(revision) if descends.get(revision) != Some(&true) => {
                behind = Some(Sync::Behind(revision.clone()));
                break;
            }
            Some(revision) => applied = Some(revision.clone()),
        }
    }
    let plain = behind.unwrap_or_else(|| applied.map_or(Sync::NothingApplied, Sync::Synced));
    match (&object.hydration, plain) {
        (Some(hydration), Sync::Behind(at)) => hydration_sync(hydration, Some(at), descends),
        (Some(hydration), Sync::NothingApplied) => hydration_sync(hydration, None, descends),
        (_, plain) => plain,
    }
}

/// Why an Application with a Source Hydrator, whose synced commit's dry commit is `at`, has
/// not applied the pin commit: a failed hydration of it (or of a later commit) first, then a
/// hydration of it waiting on the `hydrateTo` branch, or for the sync; else it is not hydrated.
fn hydration_sync(
    hydration: &Hydration,
    at: Option<String>,
    descends: &BTreeMap<String, bool>,
) -> Sync {
    let after_pin = |sha: &str| descends.get(sha) == Some(&true);
    let failed = hydration
        .failed()
        .filter(|op| op.dry.as_deref().is_none_or(after_pin));
    let step = match (failed, &hydration.last) {
        (Some(op), _) => Step::Failed(
            op.message
                .clone()
                .unwrap_or_else(|| "the hydration failed, without a message".to_string()),
        ),
        (None, Some(last)) if after_pin(&last.dry) => match &hydration.hydrate_to {
            Some(into) if hydration.synced.as_deref() != Some(last.hydrated.as_str()) => {
                Step::NotMerged {
                    hydrated: last.hydrated.clone(),
                    into: into.clone(),
                    sync_branch: hydration.sync_branch.clone(),
                }
            }
            _ => Step::NotSynced,
        },
        (None, _) => Step::NotHydrated {
            hydrating: hydration.hydrating(),
        },
    };
    Sync::Hydration(Waiting {
        at,
        synced: hydration.synced.clone(),
        step,
    })
}

/// A commit as people read it: its first 7 hex digits.
pub(crate) fn short(sha: &str) -> &str {
    sha.get(..7).unwrap_or(sha)
}

/// `at 9f8e7d6`: the dry commit a hydrated Application synced, or what is known of it.
fn synced_at(waiting: &Waiting) -> String {
    match (&waiting.at, &waiting.synced) {
        (Some(dry), _) => format!("at {}", short(dry)),
        (None, Some(hydrated)) => format!(
            "at hydrated commit {}, whose dry commit is not known",
            short(hydrated)
        ),
        (None, None) => "nothing synced yet".to_string(),
    }
}

/// `Argo CD has not synced 1a2b3c4 yet (at 9f8e7d6)`, or the hydration step that holds it:
/// `Argo CD has not hydrated 1a2b3c4 yet (at 9f8e7d6)`, `Argo CD could not hydrate 1a2b3c4:
/// <Argo CD's message>`, `Argo CD hydrated 1a2b3c4 into environments/dev-next as 5d6e7f8,
/// waiting for it to reach environments/dev (at 9f8e7d6)`.
pub(crate) fn not_synced_reason(tool: Tool, sync: &Sync, pin: &str) -> String {
    let pin = short(pin);
    let at = match sync {
        Sync::Behind(revision) | Sync::Synced(revision) => format!("at {}", short(revision)),
        Sync::NothingApplied => "nothing applied yet".to_string(),
        Sync::Hydration(waiting) => {
            let at = synced_at(waiting);
            return match &waiting.step {
                Step::NotHydrated { hydrating: true } => {
                    format!("Argo CD has not hydrated {pin} yet (hydrating; {at})")
                }
                Step::NotHydrated { hydrating: false } => {
                    format!("Argo CD has not hydrated {pin} yet ({at})")
                }
                Step::Failed(message) => format!(
                    "Argo CD could not hydrate {pin}: {}",
                    super::wording::one_line(message)
                ),
                Step::NotMerged {
                    hydrated,
                    into,
                    sync_branch,
                } => format!(
                    "Argo CD hydrated {pin} into {into} as {}, waiting for it to reach {sync_branch} ({at})",
                    short(hydrated)
                ),
                Step::NotSynced => format!("Argo CD has not synced {pin} yet ({at})"),
            };
        }
    };
    format!("{} has not synced {pin} yet ({at})", tool.name())
}

/// The state of a workload whose object has not applied the pin commit, and the reason code
/// of its conditions: Failed when Argo CD could not hydrate it, else Progressing.
pub(crate) fn waiting_state(sync: &Sync) -> (State, &'static str) {
    match sync {
        Sync::Hydration(Waiting { step, .. }) => match step {
            Step::Failed(_) => (State::Failed, "GitOpsHydrationFailed"),
            Step::NotHydrated { .. } => (State::Progressing, "GitOpsNotHydrated"),
            Step::NotMerged { .. } => (State::Progressing, "GitOpsHydratedNotMerged"),
            Step::NotSynced => (State::Progressing, "GitOpsNotSynced"),
        },
        _ => (State::Progressing, "GitOpsNotSynced"),
    }
}

// ---------------------------------------------------------------------------------------------
// Placing each expected workload

/// What the objects say about one expected workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Placement {
    /// No object applies its files: it is read as before.
    Unmanaged,
    /// An object applied the pin commit, and its inventory names this live workload.
    Live { object: usize, workload: WorkloadId },
    /// The object that applies it has not applied the pin commit yet.
    NotSynced { object: usize, workload: WorkloadId },
    /// The objects that apply it list no such workload, or several.
    Unplaced(NotVerifiedReason),
}

/// The API group of a kind's objects, as inventories name it.
pub(crate) fn group_of(kind: &WorkloadKind) -> &str {
    kind.group()
}

/// The inventory entries of `candidates` that can be `workload`: of its kind and group, named
/// as the manifest names it, else so named with a prefix or suffix added (kustomize
/// `namePrefix`, `nameSuffix`). Of several, those in the expected namespace, if that leaves one.
fn inventory_matches<'o>(
    workload: &WorkloadId,
    candidates: &[usize],
    objects: &'o [GitOpsObject],
) -> Vec<(usize, &'o InventoryEntry)> {
    let of_kind: Vec<(usize, &InventoryEntry)> = candidates
        .iter()
        .flat_map(|&i| objects[i].inventory.iter().map(move |e| (i, e)))
        .filter(|(_, e)| e.kind == workload.kind.as_str() && e.group == group_of(&workload.kind))
        .collect();
    let named = |affixed: bool| -> Vec<(usize, &'o InventoryEntry)> {
        of_kind
            .iter()
            .filter(|(_, e)| {
                if affixed {
                    e.name != workload.name && e.name.contains(&workload.name)
                } else {
                    e.name == workload.name
                }
            })
            .copied()
            .collect()
    };
    let mut found = named(false);
    if found.is_empty() {
        found = named(true);
    }
    if found.len() > 1 {
        let namespace = workload.namespace.as_deref().unwrap_or_default();
        let same: Vec<_> = found
            .iter()
            .filter(|(_, e)| e.namespace == namespace)
            .copied()
            .collect();
        if same.len() == 1 {
            return same;
        }
    }
    found
}

/// Places one workload, given the objects that apply its files (`candidates`).
fn place(
    workload: &WorkloadId,
    candidates: &[usize],
    objects: &[GitOpsObject],
    sync: &[Sync],
) -> Placement {
    if candidates.is_empty() {
        return Placement::Unmanaged;
    }
    let synced = |i: usize| matches!(sync[i], Sync::Synced(_));
    match inventory_matches(workload, candidates, objects).as_slice() {
        [(object, entry)] => {
            let live = WorkloadId {
                namespace: Some(entry.namespace.clone())
                    .filter(|ns| !ns.is_empty())
                    .or_else(|| workload.namespace.clone()),
                kind: workload.kind.clone(),
                name: entry.name.clone(),
            };
            if synced(*object) {
                Placement::Live {
                    object: *object,
                    workload: live,
                }
            } else {
                Placement::NotSynced {
                    object: *object,
                    workload: live,
                }
            }
        }
        // Not in an inventory yet: a new workload the object has not applied, if it is behind.
        [] => match candidates.iter().find(|&&i| !synced(i)) {
            Some(&object) => Placement::NotSynced {
                object,
                workload: workload.clone(),
            },
            None => Placement::Unplaced(NotVerifiedReason::NotInGitOpsInventory),
        },
        _ => Placement::Unplaced(NotVerifiedReason::AmbiguousInGitOpsInventory),
    }
}

/// One object as the verdict reports it: `Argo CD Application argocd/shop: Synced to 1a2b3c4,
/// Healthy`, with the data behind the line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ObjectReport {
    pub tool: Tool,
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    /// It applied the pin commit or a later one.
    pub synced: bool,
    /// The commit it applied from the repository; none before its first sync.
    pub revision: Option<String>,
    pub pin_commit: String,
    pub health: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health_message: Option<String>,
    /// The pinned workloads it applies, by live identity.
    pub workloads: Vec<WorkloadId>,
    pub summary: String,
}

fn report(
    object: &GitOpsObject,
    sync: &Sync,
    pin: &str,
    workloads: Vec<WorkloadId>,
) -> ObjectReport {
    let (synced, revision, state) = match sync {
        Sync::Synced(revision) => (true, Some(revision.clone()), synced_to(object, revision)),
        Sync::Behind(revision) => (
            false,
            Some(revision.clone()),
            format!(
                "not synced: at {}, waiting for {}",
                short(revision),
                short(pin)
            ),
        ),
        Sync::NothingApplied => (
            false,
            None,
            format!(
                "not synced: nothing applied yet, waiting for {}",
                short(pin)
            ),
        ),
        Sync::Hydration(waiting) => (false, waiting.at.clone(), hydration_state(waiting, pin)),
    };
    let health = &object.health;
    let health_text = match &health.message {
        Some(message) if !health.is_good() => {
            format!("{}: {}", health.status, super::wording::one_line(message))
        }
        _ => health.status.clone(),
    };
    ObjectReport {
        tool: object.tool,
        kind: object.tool.kind(),
        namespace: object.namespace.clone(),
        name: object.name.clone(),
        synced,
        revision,
        pin_commit: pin.to_string(),
        health: health.status.clone(),
        health_message: health.message.clone(),
        workloads,
        summary: format!("{}: {state}, {health_text}", object.title()),
    }
}

/// `Synced to 1a2b3c4`, and for an Application with a Source Hydrator the hydrated commit and
/// branch: `Synced to 1a2b3c4 (hydrated as 5d6e7f8 on environments/dev)`.
fn synced_to(object: &GitOpsObject, revision: &str) -> String {
    let hydrated = object
        .hydration
        .as_ref()
        .and_then(|h| Some((h.synced.as_deref()?, h.sync_branch.as_str())));
    match hydrated {
        Some((commit, branch)) => format!(
            "Synced to {} (hydrated as {} on {branch})",
            short(revision),
            short(commit)
        ),
        None => format!("Synced to {}", short(revision)),
    }
}

/// The report's words for an Application held at a step of its Source Hydrator.
fn hydration_state(waiting: &Waiting, pin: &str) -> String {
    let at = synced_at(waiting);
    let pin = short(pin);
    match &waiting.step {
        Step::NotHydrated { hydrating } => {
            let now = if *hydrating { ", hydrating" } else { "" };
            format!("not hydrated: {at}{now}, waiting for {pin}")
        }
        Step::Failed(message) => format!("hydration failed: {}", super::wording::one_line(message)),
        Step::NotMerged {
            hydrated,
            into,
            sync_branch,
        } => format!(
            "hydrated {pin} into {into} as {}, waiting for it to reach {sync_branch} ({at})",
            short(hydrated)
        ),
        Step::NotSynced => format!("not synced: {at}, waiting for {pin}"),
    }
}

/// What the GitOps objects said, for the verdict's readers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Findings {
    /// The objects that apply pinned files.
    pub objects: Vec<ObjectReport>,
    /// Pins the objects could not place on a live workload.
    pub not_verified: Vec<NotVerified>,
}

impl Findings {
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty() && self.not_verified.is_empty()
    }
}

/// What asking the objects changes in one check.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Decision {
    /// The expectations to read live, named as the inventories name them.
    pub read: Vec<Expected>,
    /// Progressing verdicts for workloads whose object has not applied the pin commit.
    pub verdicts: Vec<Verdict>,
    pub findings: Findings,
}

impl Decision {
    /// Nothing changes: every expectation is read as it is.
    pub fn unchanged(expected: &[Expected]) -> Decision {
        Decision {
            read: expected.to_vec(),
            ..Decision::default()
        }
    }
}

/// Asks the objects about every expectation. `files` says which files pin each workload,
/// `sync[i]` whether `objects[i]` applied `pin` (the commit whose sync is awaited).
pub(crate) fn decide(
    expected: &[Expected],
    files: &BTreeMap<WorkloadId, BTreeSet<String>>,
    objects: &[GitOpsObject],
    sync: &[Sync],
    pin: &str,
) -> Decision {
    let mut placements: BTreeMap<&WorkloadId, Placement> = BTreeMap::new();
    let mut consulted: BTreeMap<usize, BTreeSet<WorkloadId>> = BTreeMap::new();
    for e in expected {
        if placements.contains_key(&e.workload) {
            continue;
        }
        let candidates: Vec<usize> = (0..objects.len())
            .filter(|&i| objects[i].applies(files.get(&e.workload)))
            .collect();
        let placement = place(&e.workload, &candidates, objects, sync);
        for &i in &candidates {
            consulted.entry(i).or_default();
        }
        if let Placement::Live { object, workload } | Placement::NotSynced { object, workload } =
            &placement
        {
            consulted
                .entry(*object)
                .or_default()
                .insert(workload.clone());
        }
        placements.insert(&e.workload, placement);
    }
    let mut decision = Decision::default();
    for e in expected {
        match &placements[&e.workload] {
            Placement::Unmanaged => decision.read.push(e.clone()),
            Placement::Live { workload, .. } => decision.read.push(Expected {
                workload: workload.clone(),
                ..e.clone()
            }),
            Placement::NotSynced { object, workload } => {
                let reason = not_synced_reason(objects[*object].tool, &sync[*object], pin);
                let (state, code) = waiting_state(&sync[*object]);
                decision
                    .verdicts
                    .push(unapplied(e, workload, state, code, reason));
            }
            Placement::Unplaced(reason) => decision.findings.not_verified.push(NotVerified {
                image: e.pinned_ref.clone(),
                workload: e.workload.to_string(),
                reason: *reason,
                detail: None,
            }),
        }
    }
    decision.findings.not_verified.sort();
    decision.findings.not_verified.dedup();
    decision.findings.objects = consulted
        .into_iter()
        .map(|(i, workloads)| report(&objects[i], &sync[i], pin, workloads.into_iter().collect()))
        .collect();
    decision
}

/// The verdict for container `e` of `workload` whose pin its deployer has not applied (yet, or
/// ever): `state` with `reason`, Synced false under `code`, and rollout and digests Unknown, as
/// nothing is judged on what ran before. Shared with the Helm verifier.
pub(super) fn unapplied(
    e: &Expected,
    workload: &WorkloadId,
    state: State,
    code: &str,
    reason: String,
) -> Verdict {
    let condition = |type_, status| Condition {
        type_,
        status,
        reason: code.to_string(),
        message: reason.clone(),
    };
    Verdict {
        workload: workload.clone(),
        conditions: vec![
            condition(ConditionType::Synced, ConditionStatus::False),
            condition(ConditionType::RolledOut, ConditionStatus::Unknown),
            condition(ConditionType::DigestsMatch, ConditionStatus::Unknown),
        ],
        state,
        reason,
        ..Verdict::unjudged(e)
    }
}

// ---------------------------------------------------------------------------------------------
// Which files pin which workload

/// The files that pin each workload of a pull request's plan block, by live identity.
pub(crate) fn files_of_pins(
    pins: &[Pin],
    mapping: &NameMapping,
) -> BTreeMap<WorkloadId, BTreeSet<String>> {
    by_live_workload(
        pins.iter()
            .filter_map(|p| Some((p.file.as_str(), p.workload.workload()?))),
        mapping,
    )
}

/// The files that pin each workload of a scanned tree, by live identity: the manifests that
/// name its images, and the root kustomization it is rendered from (what a GitOps tool applies
/// is that kustomization's directory, and its `images:` entries pin workloads no manifest
/// field names).
pub(crate) fn files_of_scan(
    files: &[ScannedFile],
    renders: &[Render],
    mapping: &NameMapping,
) -> BTreeMap<WorkloadId, BTreeSet<String>> {
    let written = files.iter().flat_map(|file| {
        file.fields.iter().filter_map(|field| match &field.origin {
            Origin::Container { workload, .. } => Some((file.path.to_str()?, workload)),
            Origin::KustomizeImage { .. } | Origin::HelmImage(_) => None,
        })
    });
    let rendered = renders.iter().flat_map(|render| {
        let root = render.kustomization.to_str();
        render
            .containers
            .iter()
            .filter_map(move |c| Some((root?, &c.workload)))
    });
    by_live_workload(written.chain(rendered), mapping)
}

fn by_live_workload<'a>(
    pins: impl Iterator<Item = (&'a str, &'a WorkloadId)>,
    mapping: &NameMapping,
) -> BTreeMap<WorkloadId, BTreeSet<String>> {
    let mut files: BTreeMap<WorkloadId, BTreeSet<String>> = BTreeMap::new();
    for (file, workload) in pins {
        files
            .entry(mapping.live(workload))
            .or_default()
            .insert(clean_path(file));
    }
    files
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::path::Path;

    const PIN: &str = "1111111111111111111111111111111111111111";
    const OLD: &str = "0000000000000000000000000000000000000000";
    const DIGEST: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";

    /// A capture from `tests/fixtures/gitops/`, as the API server lists it.
    fn capture(name: &str) -> Vec<Value> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/gitops")
            .join(name);
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read the capture {}: {e}", path.display()));
        let value: Value = serde_yaml::from_str(&text).unwrap();
        match value["items"].as_array() {
            Some(items) => items.clone(),
            None => vec![value],
        }
    }

    fn expected(workload: &str) -> Expected {
        Expected {
            workload: workload.parse().unwrap(),
            container: "app".into(),
            pinned_ref: format!("ghcr.io/acme/web:1@{DIGEST}"),
            digest: DIGEST.parse().unwrap(),
        }
    }

    fn entry(namespace: &str, kind: &str, name: &str) -> InventoryEntry {
        InventoryEntry {
            group: group_of(&WorkloadKind::from_kind(kind).unwrap()).into(),
            kind: kind.into(),
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    fn object(path: &str, revision: &str, inventory: Vec<InventoryEntry>) -> GitOpsObject {
        GitOpsObject {
            tool: Tool::ArgoCd,
            namespace: "argocd".into(),
            name: "shop".into(),
            sources: vec![Source {
                url: "https://git.example.com/acme/gitops.git".into(),
                path: path.into(),
                revision: Some(revision.into()),
            }],
            inventory,
            health: Health {
                status: "Healthy".into(),
                message: None,
            },
            named: false,
            hydration: None,
        }
    }

    fn files(pairs: &[(&str, &str)]) -> BTreeMap<WorkloadId, BTreeSet<String>> {
        let mut files: BTreeMap<WorkloadId, BTreeSet<String>> = BTreeMap::new();
        for (workload, file) in pairs {
            files
                .entry(workload.parse().unwrap())
                .or_default()
                .insert(file.to_string());
        }
        files
    }

    fn synced() -> Vec<Sync> {
        vec![Sync::Synced(PIN.into())]
    }

    /// What `objects`, all synced, say about `shop/Deployment/web` pinned in `apps/web.yaml`.
    fn decide_web(objects: &[GitOpsObject]) -> Decision {
        decide(
            &[expected("shop/Deployment/web")],
            &files(&[("shop/Deployment/web", "apps/web.yaml")]),
            objects,
            &synced(),
            PIN,
        )
    }

    /// The Application of the capture `file`, which must be the one titled `title`.
    #[track_caller]
    fn captured_application(file: &str, title: &str) -> GitOpsObject {
        let app = application(&capture(file)[0]);
        assert_eq!(app.title(), title);
        app
    }

    /// A source at `path` of the argoproj/argocd-example-apps repository, at `revision`.
    fn example_apps(path: &str, revision: &str) -> Source {
        Source {
            url: "https://github.com/argoproj/argocd-example-apps".into(),
            path: path.into(),
            revision: Some(revision.into()),
        }
    }

    #[test]
    fn urls_of_one_repository_are_the_same_however_spelled() {
        let same = [
            "https://github.com/acme/gitops.git",
            "https://github.com/acme/gitops",
            "https://github.com/acme/gitops/",
            "http://github.com/acme/gitops",
            "git@github.com:acme/gitops.git",
            "ssh://git@github.com/acme/gitops.git",
            "ssh://git@github.com:22/acme/gitops",
            "https://x-access-token:t0k3n@GitHub.com/Acme/GitOps.git",
        ];
        for url in same {
            assert!(
                same_repository(url, "https://github.com/acme/gitops.git"),
                "{url}"
            );
        }
        for other in [
            "https://github.com/acme/gitops-infra.git",
            "https://gitlab.com/acme/gitops.git",
            "https://github.com:8443/acme/gitops.git",
            "",
        ] {
            assert!(
                !same_repository(other, "https://github.com/acme/gitops.git"),
                "{other}"
            );
        }
        assert!(same_repository(
            "file:///srv/git/gitops.git",
            "/srv/git/gitops"
        ));
    }

    #[test]
    fn flux_revisions_of_every_format_give_the_commit() {
        let sha = "67e2c98a60dc92283531412a9e604dd4bae005a9";
        for revision in [
            format!("main@sha1:{sha}"),
            format!("refs/heads/main@sha1:{sha}"),
            format!("v1.0.0@sha1:{sha}"),
            format!("master/{sha}"),
            format!("feature/x/{sha}"),
            format!("sha1:{sha}"),
            sha.to_string(),
        ] {
            assert_eq!(flux_commit(&revision).as_deref(), Some(sha), "{revision}");
        }
        assert_eq!(flux_commit("main@sha1:"), None);
        assert_eq!(flux_commit("latest@sha256:not-hex"), None);
    }

    #[test]
    fn paths_hold_the_files_under_them() {
        assert_eq!(clean_path("./apps/prod/"), "apps/prod");
        assert_eq!(clean_path("."), "");
        assert_eq!(clean_path("./"), "");
        assert!(path_holds("apps/prod", "apps/prod/web.yaml"));
        assert!(path_holds("", "anything.yaml"));
        assert!(!path_holds("apps/prod", "apps/production/web.yaml"));
        assert!(!path_holds("apps/prod", "base/web.yaml"));
    }

    #[test]
    fn the_real_argo_cd_capture_reads_as_sources_inventory_and_health() {
        let app = captured_application(
            "argocd-application-sock-shop.yaml",
            "Argo CD Application argo/sock-shop",
        );
        assert_eq!(
            app.sources,
            vec![example_apps(
                "sock-shop",
                "d7927a27b4533926b7d86b5f249cd9ebe7625e90"
            )]
        );
        assert_eq!(app.health.status, "Healthy");
        assert!(app
            .inventory
            .contains(&entry("sock-shop", "Deployment", "user-db")));
        assert!(app.inventory.contains(&InventoryEntry {
            group: String::new(),
            kind: "Service".into(),
            namespace: "sock-shop".into(),
            name: "carts-db".into(),
        }));
    }

    #[test]
    fn the_flux_capture_reads_with_its_git_repository() {
        let listed = capture("flux-kustomization-podinfo.yaml");
        let (repositories, kustomizations): (Vec<Value>, Vec<Value>) = listed
            .into_iter()
            .partition(|o| o["kind"] == "GitRepository");
        let found = objects(&[], &kustomizations, &repositories);
        assert_eq!(found.len(), 1);
        let ks = &found[0];
        assert_eq!(ks.title(), "Flux Kustomization flux-system/podinfo");
        assert_eq!(ks.sources[0].url, "https://github.com/stefanprodan/podinfo");
        assert_eq!(ks.sources[0].path, "kustomize");
        assert_eq!(
            ks.sources[0].revision.as_deref(),
            Some("67e2c98a60dc92283531412a9e604dd4bae005a9")
        );
        assert_eq!(
            ks.inventory,
            vec![
                InventoryEntry {
                    group: String::new(),
                    kind: "Service".into(),
                    namespace: "default".into(),
                    name: "podinfo".into()
                },
                entry("default", "Deployment", "podinfo"),
                InventoryEntry {
                    group: "autoscaling".into(),
                    kind: "HorizontalPodAutoscaler".into(),
                    namespace: "default".into(),
                    name: "podinfo".into()
                },
            ]
        );
        assert_eq!(ks.health.status, "Ready");
        // Without its GitRepository, the Kustomization names no repository.
        assert_eq!(objects(&[], &kustomizations, &[])[0].sources[0].url, "");
    }

    #[test]
    fn a_kustomization_from_an_oci_repository_applies_no_commit() {
        let ks = json!({"metadata": {"namespace": "flux-system", "name": "apps"},
                        "spec": {"sourceRef": {"kind": "OCIRepository", "name": "apps"}}});
        assert_eq!(kustomization(&ks, &[]), None);
    }

    #[test]
    fn a_multi_source_application_pairs_each_source_with_its_revision() {
        let app = json!({
            "metadata": {"namespace": "argocd", "name": "shop"},
            "spec": {"sources": [
                {"repoURL": "https://charts.example.com", "chart": "web", "targetRevision": "1.2.0"},
                {"repoURL": "git@github.com:acme/gitops.git", "path": "./apps/shop", "ref": "values"}
            ]},
            "status": {"sync": {"status": "Synced", "revisions": ["1.2.0", PIN]}}
        });
        let found = relevant(
            vec![application(&app)],
            "https://github.com/acme/gitops",
            &GitOpsObjects::default(),
        );
        assert_eq!(found.len(), 1);
        assert_eq!(
            found[0].sources,
            vec![Source {
                url: "git@github.com:acme/gitops.git".into(),
                path: "apps/shop".into(),
                revision: Some(PIN.into()),
            }]
        );
    }

    #[test]
    fn named_objects_are_the_only_ones_and_unknown_names_are_told() {
        let mut other = object("", PIN, vec![]);
        other.name = "other".into();
        other.sources[0].url = "https://mirror.example.com/gitops".into();
        let named = GitOpsObjects {
            applications: vec![
                ObjectName::parse("argocd/other").unwrap(),
                ObjectName::parse("argocd/typo").unwrap(),
            ],
            kustomizations: vec![],
        };
        let listed = vec![object("", PIN, vec![]), other];
        assert_eq!(
            missing_names(&named, &listed),
            vec!["Argo CD Application argocd/typo"]
        );
        let found = relevant(listed, "https://git.example.com/acme/gitops", &named);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].name, "other");
        assert!(found[0].named, "a named object keeps its mirror source");
    }

    #[test]
    fn sync_is_the_pin_commit_or_after_for_every_source() {
        let o = object("", PIN, vec![]);
        let descends = |answer| BTreeMap::from([(PIN.to_string(), answer)]);
        assert_eq!(sync_of(&o, &descends(true)), Sync::Synced(PIN.into()));
        assert_eq!(sync_of(&o, &descends(false)), Sync::Behind(PIN.into()));
        assert_eq!(sync_of(&o, &BTreeMap::new()), Sync::Behind(PIN.into()));
        let mut never = o.clone();
        never.sources[0].revision = None;
        assert_eq!(sync_of(&never, &descends(true)), Sync::NothingApplied);
    }

    #[test]
    fn an_inventory_entry_with_the_manifest_name_is_the_live_workload() {
        let objects = [object(
            "apps",
            PIN,
            vec![
                InventoryEntry {
                    group: String::new(),
                    kind: "Service".into(),
                    namespace: "prod".into(),
                    name: "web".into(),
                },
                entry("prod", "Deployment", "web"),
                entry("prod", "StatefulSet", "web-db"),
            ],
        )];
        let d = decide(
            &[expected("default/Deployment/web")],
            &files(&[("default/Deployment/web", "apps/web.yaml")]),
            &objects,
            &synced(),
            PIN,
        );
        assert_eq!(d.read.len(), 1);
        assert_eq!(d.read[0].workload.to_string(), "prod/Deployment/web");
        assert!(d.verdicts.is_empty());
        assert!(d.findings.not_verified.is_empty());
        let report = &d.findings.objects[0];
        assert_eq!(
            report.summary,
            "Argo CD Application argocd/shop: Synced to 1111111, Healthy"
        );
        assert_eq!(report.workloads[0].to_string(), "prod/Deployment/web");
    }

    #[test]
    fn a_prefixed_or_suffixed_name_is_matched_when_unambiguous() {
        // What `shop/Deployment/web` is read as, when an object's inventory holds these
        // Deployments.
        let read_as = |deployments: &[(&str, &str)]| -> Decision {
            let inventory = deployments
                .iter()
                .map(|(namespace, name)| entry(namespace, "Deployment", name))
                .collect();
            decide_web(&[object("", PIN, inventory)])
        };
        let live = |d: Decision| d.read[0].workload.to_string();
        assert_eq!(
            live(read_as(&[("shop", "prod-web")])),
            "shop/Deployment/prod-web"
        );
        assert_eq!(
            live(read_as(&[("shop", "web-canary"), ("shop", "web")])),
            "shop/Deployment/web",
            "the name itself comes first"
        );
        assert_eq!(
            live(read_as(&[("staging", "web"), ("shop", "web")])),
            "shop/Deployment/web",
            "the expected namespace settles it"
        );
        let ambiguous = read_as(&[("shop", "prod-web"), ("shop", "web-canary")]);
        assert!(ambiguous.read.is_empty());
        assert_eq!(
            ambiguous.findings.not_verified,
            vec![NotVerified {
                image: format!("ghcr.io/acme/web:1@{DIGEST}"),
                workload: "shop/Deployment/web".into(),
                reason: NotVerifiedReason::AmbiguousInGitOpsInventory,
                detail: None,
            }]
        );
    }

    #[test]
    fn a_workload_missing_from_a_synced_inventory_is_not_verified() {
        let objects = [object("", PIN, vec![entry("shop", "StatefulSet", "web")])];
        let d = decide_web(&objects);
        assert!(d.read.is_empty() && d.verdicts.is_empty());
        assert_eq!(
            d.findings.not_verified[0].reason,
            NotVerifiedReason::NotInGitOpsInventory
        );
        assert_eq!(d.findings.objects.len(), 1, "the object is still reported");
    }

    #[test]
    fn before_the_object_applied_the_pin_every_workload_it_applies_is_progressing() {
        let objects = [object(
            "apps",
            OLD,
            vec![entry("shop", "Deployment", "prod-web")],
        )];
        let behind = [Sync::Behind(OLD.into())];
        let d = decide(
            &[
                expected("shop/Deployment/web"),
                expected("shop/Deployment/new"),
            ],
            &files(&[
                ("shop/Deployment/web", "apps/web.yaml"),
                ("shop/Deployment/new", "apps/new.yaml"),
            ]),
            &objects,
            &behind,
            PIN,
        );
        assert!(d.read.is_empty(), "nothing is judged on the old spec");
        let reasons: Vec<(String, &str)> = d
            .verdicts
            .iter()
            .map(|v| (v.workload.to_string(), v.reason.as_str()))
            .collect();
        assert_eq!(
            reasons,
            vec![
                (
                    "shop/Deployment/prod-web".to_string(),
                    "Argo CD has not synced 1111111 yet (at 0000000)"
                ),
                (
                    "shop/Deployment/new".to_string(),
                    "Argo CD has not synced 1111111 yet (at 0000000)"
                ),
            ]
        );
        assert!(d.verdicts.iter().all(|v| v.state == State::Progressing));
        assert_eq!(d.verdicts[0].conditions[0].reason, "GitOpsNotSynced");
        assert_eq!(
            d.findings.objects[0].summary,
            "Argo CD Application argocd/shop: not synced: at 0000000, waiting for 1111111, Healthy"
        );
    }

    #[test]
    fn a_workload_whose_file_no_object_applies_is_read_as_before() {
        let objects = [object(
            "apps/other",
            PIN,
            vec![entry("shop", "Deployment", "web")],
        )];
        let e = expected("shop/Deployment/web");
        let d = decide(
            std::slice::from_ref(&e),
            &files(&[("shop/Deployment/web", "apps/web.yaml")]),
            &objects,
            &synced(),
            PIN,
        );
        assert_eq!(d, Decision::unchanged(&[e]));
    }

    #[test]
    fn a_named_object_applies_every_pin_and_flux_health_explains_itself() {
        let mut ks = object("elsewhere", PIN, vec![entry("shop", "Deployment", "web")]);
        ks.tool = Tool::Flux;
        ks.named = true;
        ks.health = Health {
            status: "HealthCheckFailed".into(),
            message: Some("timeout waiting for: [Deployment/shop/web status: 'InProgress']".into()),
        };
        let d = decide(
            &[expected("shop/Deployment/web")],
            &BTreeMap::new(),
            &[ks],
            &synced(),
            PIN,
        );
        assert_eq!(d.read[0].workload.to_string(), "shop/Deployment/web");
        assert_eq!(
            d.findings.objects[0].summary,
            "Flux Kustomization argocd/shop: Synced to 1111111, HealthCheckFailed: timeout waiting for: [Deployment/shop/web status: 'InProgress']"
        );
    }

    #[test]
    fn pinned_files_are_keyed_by_the_live_workload() {
        let pins = [Pin::first(
            "./apps/web.yaml",
            "Deployment/web",
            "ghcr.io/acme/web:1",
            &format!("ghcr.io/acme/web:1@{DIGEST}"),
        )];
        let mapping = NameMapping {
            default_namespace: "shop".into(),
            ..NameMapping::default()
        };
        assert_eq!(
            files_of_pins(&pins, &mapping),
            files(&[("shop/Deployment/web", "apps/web.yaml")])
        );
    }

    #[test]
    fn a_rendered_workload_is_pinned_by_its_root_kustomization() {
        // The overlay's `images:` entry pins `web`; no manifest field of the overlay names it.
        let repository = [
            (
                "base/web.yaml",
                "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  template:\n    spec:\n      containers:\n      - {name: app, image: ghcr.io/acme/web}\n",
            ),
            ("base/kustomization.yaml", "resources: [web.yaml]\n"),
            (
                "overlays/staging/kustomization.yaml",
                "namespace: shop-staging\nresources: [../../base]\nimages:\n- {name: ghcr.io/acme/web, newTag: '1', digest: 'sha256:2222222222222222222222222222222222222222222222222222222222222222'}\n",
            ),
        ];
        let renders = crate::render::render_roots(
            &["overlays/staging/kustomization.yaml".into()],
            &crate::render::fixtures::repo(&repository),
        );
        assert_eq!(
            files_of_scan(&[], &renders, &NameMapping::default()),
            files(&[(
                "shop-staging/Deployment/web",
                "overlays/staging/kustomization.yaml"
            )])
        );
    }

    // -----------------------------------------------------------------------------------------
    // Argo CD's Source Hydrator

    const HYDRATED: &str = "3333333333333333333333333333333333333333";
    const HYDRATED_OLD: &str = "4444444444444444444444444444444444444444";
    const DOCUMENTED_DRY: &str = "6cb951525937865dced818bbdd78c89b2d2b3045";

    /// The documented Application with a Source Hydrator (`argocd-application-hydrator.yaml`),
    /// synced to the hydrated commit `synced`, its last hydration `dry` hydrated as `hydrated`,
    /// without `hydrateTo`.
    fn hydrator_app(synced: &str, dry: &str, hydrated: &str) -> Value {
        let mut app = capture("argocd-application-hydrator.yaml").remove(0);
        app["spec"]["sourceHydrator"]
            .as_object_mut()
            .unwrap()
            .remove("hydrateTo");
        app["status"]["sync"]["revision"] = json!(synced);
        let status = &mut app["status"]["sourceHydrator"];
        status["lastSuccessfulOperation"]["drySHA"] = json!(dry);
        status["lastSuccessfulOperation"]["hydratedSHA"] = json!(hydrated);
        status["currentOperation"]["drySHA"] = json!(dry);
        status["currentOperation"]["hydratedSHA"] = json!(hydrated);
        app
    }

    /// What `app` says about `default/Deployment/my-app-helm-guestbook` pinned in
    /// `helm-guestbook/values.yaml`, given which commits come at or after [`PIN`].
    fn decide_hydrated(app: &Value, after_pin: &[&str]) -> (Sync, Decision) {
        let object = application(app);
        let descends = after_pin.iter().map(|c| (c.to_string(), true)).collect();
        let sync = sync_of(&object, &descends);
        let workload = "default/Deployment/my-app-helm-guestbook";
        let d = decide(
            &[expected(workload)],
            &files(&[(workload, "helm-guestbook/values.yaml")]),
            &[object],
            std::slice::from_ref(&sync),
            PIN,
        );
        (sync, d)
    }

    #[test]
    fn an_application_with_a_source_hydrator_applies_its_dry_source() {
        let app = captured_application(
            "argocd-application-hydrator.yaml",
            "Argo CD Application argocd/my-app",
        );
        assert_eq!(
            app.sources,
            vec![example_apps("helm-guestbook", DOCUMENTED_DRY)],
            "the dry commit the status pairs with the synced hydrated commit"
        );
        assert!(app
            .inventory
            .contains(&entry("default", "Deployment", "my-app-helm-guestbook")));
        let found = relevant(
            vec![app],
            "git@github.com:argoproj/argocd-example-apps.git",
            &GitOpsObjects::default(),
        );
        assert_eq!(found.len(), 1, "in scope by its dry source's repository");
        assert!(found[0].applies(Some(&BTreeSet::from(["helm-guestbook/values.yaml".into()]))));
        assert!(!found[0].applies(Some(&BTreeSet::from(["guestbook/ui.yaml".into()]))));
        assert_eq!(
            revisions(&found),
            BTreeSet::from([DOCUMENTED_DRY.to_string()])
        );
    }

    #[test]
    fn a_hydrated_commit_whose_dry_commit_the_status_does_not_tell_is_read_back() {
        // Argo CD already hydrated a later dry commit; the sync still runs the older one.
        let mut objects = vec![application(&hydrator_app(HYDRATED_OLD, PIN, HYDRATED))];
        assert_eq!(objects[0].sources[0].revision, None);
        let unresolved = hydrated_commits(&objects);
        assert_eq!(
            unresolved,
            BTreeSet::from([HydratedCommit {
                commit: HYDRATED_OLD.into(),
                branch: "environments/dev".into(),
                path: "helm-guestbook".into(),
            }])
        );
        with_dry_commits(
            &mut objects,
            &BTreeMap::from([(HYDRATED_OLD.into(), OLD.into())]),
        );
        assert_eq!(objects[0].sources[0].revision.as_deref(), Some(OLD));
        assert_eq!(
            revisions(&objects),
            BTreeSet::from([OLD.to_string(), PIN.to_string()])
        );
    }

    #[test]
    fn a_metadata_file_names_a_dry_commit_of_the_configured_repository_only() {
        let metadata = std::fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/gitops/argocd-hydrated-branch/hydrator.metadata"),
        )
        .unwrap();
        assert_eq!(
            dry_commit_in(
                &metadata,
                "https://git.example.com/owner/manifests-repo.git"
            ),
            Some(DOCUMENTED_DRY.into())
        );
        assert_eq!(
            dry_commit_in(&metadata, "https://git.example.com/owner/other-repo.git"),
            None,
            "a hydration of another repository says nothing of this one's commits"
        );
        let unnamed = format!("{{\"drySha\": \"{PIN}\"}}");
        assert_eq!(
            dry_commit_in(unnamed.as_bytes(), "https://git.example.com/acme/gitops"),
            Some(PIN.into())
        );
    }

    #[test]
    fn a_hydrated_commit_of_the_pin_commit_or_later_is_synced() {
        let (sync, d) = decide_hydrated(&hydrator_app(HYDRATED, PIN, HYDRATED), &[PIN]);
        assert_eq!(sync, Sync::Synced(PIN.into()));
        assert_eq!(
            d.read[0].workload.to_string(),
            "default/Deployment/my-app-helm-guestbook"
        );
        assert_eq!(
            d.findings.objects[0].summary,
            "Argo CD Application argocd/my-app: Synced to 1111111 (hydrated as 3333333 on environments/dev), Healthy"
        );
        assert_eq!(d.findings.objects[0].revision.as_deref(), Some(PIN));
    }

    /// The one verdict of a decision that judged nothing live: (state, condition code, reason).
    fn waiting(d: &Decision) -> (State, String, String) {
        assert!(d.read.is_empty(), "nothing is judged on the old spec");
        let [v] = d.verdicts.as_slice() else {
            panic!("one verdict: {:?}", d.verdicts)
        };
        (v.state, v.conditions[0].reason.clone(), v.reason.clone())
    }

    #[test]
    fn an_older_dry_commit_not_hydrated_again_waits_for_the_hydration() {
        let (_, d) = decide_hydrated(&hydrator_app(HYDRATED_OLD, OLD, HYDRATED_OLD), &[]);
        assert_eq!(
            waiting(&d),
            (
                State::Progressing,
                "GitOpsNotHydrated".into(),
                "Argo CD has not hydrated 1111111 yet (at 0000000)".into()
            )
        );
        assert_eq!(
            d.findings.objects[0].summary,
            "Argo CD Application argocd/my-app: not hydrated: at 0000000, waiting for 1111111, Healthy"
        );

        let mut hydrating = hydrator_app(HYDRATED_OLD, OLD, HYDRATED_OLD);
        hydrating["status"]["sourceHydrator"]["currentOperation"] =
            json!({"phase": "Hydrating", "message": ""});
        let (_, d) = decide_hydrated(&hydrating, &[]);
        assert_eq!(
            waiting(&d).2,
            "Argo CD has not hydrated 1111111 yet (hydrating; at 0000000)"
        );
    }

    #[test]
    fn a_hydration_of_the_pin_not_synced_yet_names_both_commits() {
        // Argo CD hydrated the pin; the application still runs what it hydrated of OLD, as the
        // hydrated commit's metadata tells.
        let mut object = application(&hydrator_app(HYDRATED_OLD, PIN, HYDRATED));
        with_dry_commits(
            std::slice::from_mut(&mut object),
            &BTreeMap::from([(HYDRATED_OLD.into(), OLD.into())]),
        );
        let descends = BTreeMap::from([(PIN.to_string(), true), (OLD.to_string(), false)]);
        let sync = sync_of(&object, &descends);
        assert_eq!(
            (
                waiting_state(&sync),
                not_synced_reason(Tool::ArgoCd, &sync, PIN)
            ),
            (
                (State::Progressing, "GitOpsNotSynced"),
                "Argo CD has not synced 1111111 yet (at 0000000)".to_string()
            )
        );
        // Without the metadata, what is known is said.
        let (_, d) = decide_hydrated(&hydrator_app(HYDRATED_OLD, PIN, HYDRATED), &[PIN]);
        assert_eq!(
            waiting(&d).2,
            "Argo CD has not synced 1111111 yet (at hydrated commit 4444444, whose dry commit is not known)"
        );
    }

    #[test]
    fn a_failed_hydration_fails_the_applications_workloads_in_argo_cds_words() {
        let mut app = hydrator_app(HYDRATED_OLD, OLD, HYDRATED_OLD);
        let message = format!(
            "Failed to hydrate revision \"{PIN}\": failed to hydrate apps: failed to get repo objects for app \"argocd/my-app\": rpc error: code = Unknown desc = Manifest generation error"
        );
        app["status"]["sourceHydrator"]["currentOperation"] = json!({
            "phase": "Failed", "drySHA": PIN, "message": message,
            "startedAt": "2025-06-09T17:50:20Z", "finishedAt": "2025-06-09T17:50:22Z",
        });
        let (_, d) = decide_hydrated(&app, &[PIN]);
        assert_eq!(
            waiting(&d),
            (
                State::Failed,
                "GitOpsHydrationFailed".into(),
                format!("Argo CD could not hydrate 1111111: {message}")
            )
        );
        assert_eq!(
            d.findings.objects[0].summary,
            format!("Argo CD Application argocd/my-app: hydration failed: {message}, Healthy")
        );

        // A failure of a commit before the pin: the pin has not been tried yet.
        let (_, d) = decide_hydrated(&app, &[]);
        assert_eq!(waiting(&d).0, State::Progressing);
        // Before Argo CD resolved the dry revision, the failure is the latest commit's.
        app["status"]["sourceHydrator"]["currentOperation"]["drySHA"] = json!("");
        let (_, d) = decide_hydrated(&app, &[]);
        assert_eq!(waiting(&d).0, State::Failed);
    }

    #[test]
    fn a_hydration_waiting_on_the_hydrate_to_branch_says_so() {
        let mut app = hydrator_app(HYDRATED_OLD, PIN, HYDRATED);
        app["spec"]["sourceHydrator"]["hydrateTo"] =
            json!({"targetBranch": "environments/dev-next"});
        let (_, d) = decide_hydrated(&app, &[PIN]);
        assert_eq!(
            waiting(&d),
            (
                State::Progressing,
                "GitOpsHydratedNotMerged".into(),
                "Argo CD hydrated 1111111 into environments/dev-next as 3333333, waiting for it to reach environments/dev (at hydrated commit 4444444, whose dry commit is not known)".into()
            )
        );
        // Moved to the sync branch as it is (a fast-forward), it is the synced commit.
        let (sync, _) = decide_hydrated(&hydrator_app(HYDRATED, PIN, HYDRATED), &[PIN]);
        assert_eq!(sync, Sync::Synced(PIN.into()));
    }
}
