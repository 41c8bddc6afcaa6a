//! `tagpin audit`'s judgement, pure: what runs, set against what Git says, for every workload of
//! the namespaces the configuration deploys to, those Git does not name included.
//!
//! `verify` asks whether the cluster converged to a commit's pins, and looks at pinned images
//! only. An audit asks the standing question behind pinning, per container: does Git pin it by
//! digest ([`Finding::Pinned`]) or name only a tag ([`Finding::TagOnly`]); does the live template
//! still carry what Git says ([`Finding::Drift`]: `kubectl set image`, a mutating webhook, an
//! Argo CD parameter override); which digests its pods run (`status.containerStatuses[].imageID`)
//! and on which nodes; and do pods of one image reference run different digests
//! ([`Finding::Mixed`]: a tag that moved while some nodes kept the old image under
//! `imagePullPolicy: IfNotPresent`).
//!
//! **Where workloads live** is decided as `verify` decides it: the namespace a manifest names,
//! else the one its kustomization sets (rendered, or the nearest `kustomization.yaml`'s
//! `namespace:`), else `verify.default_namespace`, with `verify.name_prefix`/`name_suffix` on
//! the names. The namespaces an audit covers are exactly those holding a workload Git names
//! ([`namespaces`]). In each, every Deployment, StatefulSet, DaemonSet and CronJob is listed
//! ([`LISTED_WHOLE`]: the kinds people write; ReplicaSets, Jobs and Pods are mostly made by
//! them), and a workload of another kind when Git names it. A listed workload Git does not name
//! is reported as [`Finding::NotInGit`] and never fails the audit: a namespace may hold what
//! another tool deploys.
//!
//! Images the configuration does not manage (`images.manage`, `images.ignore`) are left out on
//! both sides, as `plan` and `verify` leave them out. Only digests are compared with a pin, as
//! `verify` compares them: a mirror may spell the repository otherwise and run the same bytes.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::expected::NameMapping;
pub use super::observed::Inventory;
use super::observed::{DigestFamily, LivePod, LiveWorkload};
use super::pods::{digest_of_image_id, digest_part, ImageIdDigest};
use crate::manifest::Origin;
use crate::plan::ScannedFile;
use crate::reference::{Digest, Reference};
use crate::render::Render;
use crate::workload::{WorkloadId, WorkloadKind};

/// The kinds listed whole in every audited namespace; other kinds are read only where Git
/// names a workload of them (a ReplicaSet, a Job or a Pod listed whole would mostly be a
/// Deployment's, a CronJob's or a ReplicaSet's own).
pub const LISTED_WHOLE: [WorkloadKind; 4] = [
    WorkloadKind::Deployment,
    WorkloadKind::StatefulSet,
    WorkloadKind::DaemonSet,
    WorkloadKind::CronJob,
];

/// What an audit found about one container of one workload. A row has one of `pinned`,
/// `tag-only`, `not-in-git`, `missing` and `unread`, and may add `drift` and `mixed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Finding {
    /// Git pins the image by digest.
    Pinned,
    /// Git names the image by tag only.
    TagOnly,
    /// The cluster runs it in an audited namespace, and Git does not name it (the workload, or
    /// this container of it).
    NotInGit,
    /// Git names the workload, and the cluster has none of that kind and name.
    Missing,
    /// tagpin may not list the workload's kind (or the pods) in its namespace.
    Unread,
    /// The live template's image is not what Git says (see [`drift`]).
    Drift,
    /// Pods of one image reference run more than one digest (see [`Audit::mixed`]).
    Mixed,
}

impl Finding {
    /// Every finding, in the order tables and metrics list them.
    pub const ALL: [Finding; 7] = [
        Finding::Pinned,
        Finding::TagOnly,
        Finding::NotInGit,
        Finding::Missing,
        Finding::Unread,
        Finding::Drift,
        Finding::Mixed,
    ];

    /// The word JSON, tables and the metric's `finding` label use.
    pub fn as_str(self) -> &'static str {
        match self {
            Finding::Pinned => "pinned",
            Finding::TagOnly => "tag-only",
            Finding::NotInGit => "not-in-git",
            Finding::Missing => "missing",
            Finding::Unread => "unread",
            Finding::Drift => "drift",
            Finding::Mixed => "mixed",
        }
    }

    /// Whether the finding makes the audit fail (exit 1): what runs is not what Git says
    /// (drift), one reference runs as several images (mixed), or tagpin could not look.
    /// A tag-only image is reported, not failed: `tagpin pin --check` is the gate for that. A
    /// missing workload runs nothing wrong (`verify` fails it), and what Git does not name may
    /// belong to another tool.
    pub fn fails(self) -> bool {
        matches!(self, Finding::Drift | Finding::Mixed | Finding::Unread)
    }
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The image Git deploys in one container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitImage {
    /// As rendered (a kustomization's `images:` applied) or as written.
    pub image: String,
    /// Why Git's word may not be what is applied (a render tagpin could not complete, a
    /// container Git names twice): no drift is judged then, and the row says why.
    pub uncertain: Option<String>,
}

/// A container Git names that an audit cannot look at, and why.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct NotAudited {
    /// `namespace/Kind/name`, or the values file or release for a Helm image.
    pub workload: String,
    pub image: String,
    pub reason: String,
}

/// What the manifests at a commit deploy, per live workload and container.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GitSide {
    /// By live workload (namespace always set) and container name.
    pub containers: BTreeMap<(WorkloadId, String), GitImage>,
    pub not_audited: Vec<NotAudited>,
}

/// What the manifests `files` and the renders of their root kustomizations deploy, the way
/// `verify` places pins ([`super::expected::from_manifests`]), tag-only images included: a
/// rendered container is taken as its render has it (its live name and namespace, its
/// rendered image), with the render's problems as the reason its image is uncertain; a file no
/// render read is taken as written. Images `manages` refuses are left out. Helm values and
/// kinds tagpin does not read live are [`NotAudited`].
pub fn git_side(
    files: &[ScannedFile],
    renders: &[Render],
    manages: impl Fn(&str) -> bool,
    mapping: &NameMapping,
) -> GitSide {
    let mut side = GitSide::default();
    for render in renders {
        let problems: Vec<String> = render.unverifiable.iter().map(|u| u.to_string()).collect();
        let uncertain = (!problems.is_empty()).then(|| {
            format!(
                "tagpin cannot render it completely: {}",
                problems.join("; ")
            )
        });
        for c in render.containers.iter().filter(|c| manages(&c.image)) {
            side.add(
                &c.workload,
                &c.container,
                &c.image,
                uncertain.clone(),
                mapping,
            );
        }
    }
    for file in files {
        if renders.iter().any(|r| r.files.contains(&file.path)) {
            continue;
        }
        for field in &file.fields {
            match &field.origin {
                Origin::Container {
                    workload,
                    container,
                    ..
                } => side.add(workload, container, &field.value, None, mapping),
                Origin::HelmImage(image) => side.not_audited.push(NotAudited {
                    workload: format!("{}:{}", file.path.display(), field.line),
                    image: field.value.clone(),
                    reason: format!(
                        "Helm values ({}) name no workload; their release's workloads are \
                         audited as not in Git",
                        image.key_path
                    ),
                }),
                // An `images:` entry no rendered kustomization includes changes nothing.
                Origin::KustomizeImage { .. } => {}
            }
        }
    }
    side.not_audited.sort();
    side.not_audited.dedup();
    side
}

impl GitSide {
    fn add(
        &mut self,
        workload: &WorkloadId,
        container: &str,
        image: &str,
        uncertain: Option<String>,
        mapping: &NameMapping,
    ) {
        let live = mapping.live(workload);
        let not_audited = |reason: String| NotAudited {
            workload: live.to_string(),
            image: image.to_string(),
            reason,
        };
        if !workload.kind.is_verifiable() {
            let reason = format!("tagpin does not read kind {} live", workload.kind);
            self.not_audited.push(not_audited(reason));
            return;
        }
        if workload.name.is_empty() {
            let reason = "the manifest has no metadata.name".to_string();
            self.not_audited.push(not_audited(reason));
            return;
        }
        let key = (live, container.to_string());
        match self.containers.get_mut(&key) {
            None => {
                let git = GitImage {
                    image: image.to_string(),
                    uncertain,
                };
                self.containers.insert(key, git);
            }
            Some(known) if known.image != image => {
                known.uncertain = Some(format!(
                    "Git deploys it twice, as {} and as {image}",
                    known.image
                ));
            }
            Some(_) => {}
        }
    }
}

/// The namespaces an audit covers: those of the workloads Git names, as they are deployed.
pub fn namespaces(git: &GitSide) -> BTreeSet<String> {
    git.containers
        .keys()
        .filter_map(|(id, _)| id.namespace.clone())
        .collect()
}

/// What to list in each of `namespaces`: the kinds listed whole ([`LISTED_WHOLE`]), and the
/// kinds of the workloads Git names there.
pub fn lists(
    git: &GitSide,
    namespaces: &BTreeSet<String>,
) -> BTreeMap<String, BTreeSet<WorkloadKind>> {
    let mut lists: BTreeMap<String, BTreeSet<WorkloadKind>> = namespaces
        .iter()
        .map(|ns| (ns.clone(), LISTED_WHOLE.iter().cloned().collect()))
        .collect();
    for (id, _) in git.containers.keys() {
        if let Some(kinds) = id.namespace.as_ref().and_then(|ns| lists.get_mut(ns)) {
            kinds.insert(id.kind.clone());
        }
    }
    lists
}

/// The digests pods of one image reference run, grouped by the image they stand for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Running {
    /// As the pods' imageID reports it (a manifest digest, or a bare config digest).
    pub digest: String,
    /// The image this digest stands for, when that is another digest the audit saw: the
    /// multi-arch index of which it is a platform manifest, or the manifest whose config it
    /// is (asked of the registry). Digests standing for one image are not mixed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stands_for: Option<String>,
    /// The reference the pods asked for (their spec's image).
    pub image: String,
    pub pods: Vec<String>,
    /// The nodes the pods run on, each once; a pod not scheduled yet adds none.
    pub nodes: Vec<String>,
}

/// One container of one workload, as the audit found it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Row {
    /// `namespace/Kind/name`.
    pub workload: WorkloadId,
    pub container: String,
    /// Sorted as [`Finding::ALL`].
    pub findings: Vec<Finding>,
    /// The image Git deploys; `None` when Git does not name it.
    pub git: Option<String>,
    /// The live template's image; `None` when the workload or the container is not there.
    pub template: Option<String>,
    /// What differs, when the row has [`Finding::Drift`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drift: Option<String>,
    /// What the workload's pods run in this container, most pods first. Pods that ended or are
    /// being deleted, and containers not started yet (no imageID), run nothing and are left out.
    pub running: Vec<Running>,
    /// Why Git's image is uncertain, or why the workload could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Row {
    pub fn has(&self, finding: Finding) -> bool {
        self.findings.contains(&finding)
    }
}

/// One digest (with those standing for the same image) of an image reference that runs as
/// several.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MixedDigest {
    pub digest: String,
    pub pods: usize,
    pub nodes: Vec<String>,
    pub workloads: Vec<WorkloadId>,
}

/// An image reference whose pods run more than one digest: across the audit, not only within
/// one workload, since two workloads on `web:latest` pulled on different nodes at different
/// times run different code under one name just the same.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MixedImage {
    /// The reference, normalized (`docker.io/library/nginx:latest`).
    pub image: String,
    /// Most pods first.
    pub digests: Vec<MixedDigest>,
}

/// The audit of the workloads of some namespaces.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Audit {
    /// By workload, then container.
    pub rows: Vec<Row>,
    pub mixed: Vec<MixedImage>,
    pub not_audited: Vec<NotAudited>,
    /// Lists the API refused (what they would have listed is unknown), in tagpin's words.
    pub unread: Vec<String>,
}

impl Audit {
    /// How many workloads have each finding (a workload counts once per finding any of its
    /// containers has, so the counts may add up to more than the workloads); every finding is
    /// present, at zero when none has it.
    pub fn workloads_with(&self) -> BTreeMap<Finding, usize> {
        let mut with: BTreeMap<Finding, BTreeSet<&WorkloadId>> =
            Finding::ALL.iter().map(|f| (*f, BTreeSet::new())).collect();
        for row in &self.rows {
            for finding in &row.findings {
                with.entry(*finding).or_default().insert(&row.workload);
            }
        }
        with.into_iter().map(|(f, ids)| (f, ids.len())).collect()
    }

    /// The workloads audited.
    pub fn workloads(&self) -> usize {
        self.rows
            .iter()
            .map(|r| &r.workload)
            .collect::<BTreeSet<_>>()
            .len()
    }

    /// Nothing fails: no drift, no mixed digests, nothing that could not be read.
    pub fn clean(&self) -> bool {
        self.unread.is_empty()
            && self
                .rows
                .iter()
                .all(|r| !r.findings.iter().any(|f| f.fails()))
    }
}

/// A digest the registry is to be asked about, so that digests standing for one image (an
/// index and its platform manifests, a manifest and its config) are not taken for several.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Ask {
    /// The manifest `digest` of the repository `image` names.
    Digest { image: String, digest: Digest },
    /// What the tag of `image` points to now (an index whose platform manifests the pods may
    /// report, one per node architecture).
    Tag { image: String },
}

/// One pod's container as an audit reads it.
struct Seen<'a> {
    workload: &'a WorkloadId,
    container: &'a str,
    /// The normalized reference (see [`reference_key`]).
    key: String,
    /// The reference as the pod's spec writes it.
    image: String,
    digest: ImageIdDigest,
    pod: &'a str,
    node: Option<&'a str>,
}

impl Seen<'_> {
    fn digest(&self) -> &str {
        match &self.digest {
            ImageIdDigest::WithRepo(d) | ImageIdDigest::Bare(d) => d,
        }
    }
}

/// The workloads an audit covers in `inventory`: those Git names, and those of the kinds
/// listed whole, in `namespaces`.
fn audited<'a>(
    git: &GitSide,
    inventory: &'a Inventory,
    namespaces: &BTreeSet<String>,
) -> Vec<(&'a WorkloadId, &'a LiveWorkload, &'a [LivePod])> {
    let named: BTreeSet<&WorkloadId> = git.containers.keys().map(|(id, _)| id).collect();
    inventory
        .workloads
        .iter()
        .filter(|(id, _)| {
            id.namespace
                .as_ref()
                .is_some_and(|ns| namespaces.contains(ns))
                && (named.contains(id) || LISTED_WHOLE.contains(&id.kind))
        })
        .map(|(id, (workload, pods))| (id, workload, pods.as_slice()))
        .collect()
}

/// The containers of an audited workload: those Git names, and those of its live template
/// whose image the configuration manages.
fn containers_of<'a>(
    id: &WorkloadId,
    git: &'a GitSide,
    workload: &'a LiveWorkload,
    manages: &impl Fn(&str) -> bool,
) -> BTreeSet<&'a str> {
    let from_git = git
        .containers
        .range((id.clone(), String::new())..)
        .take_while(|((w, _), _)| w == id)
        .map(|((_, c), _)| c.as_str());
    let from_template = workload
        .template_images
        .iter()
        .filter(|(_, image)| manages(image))
        .map(|(c, _)| c.as_str());
    from_git.chain(from_template).collect()
}

/// Every container of every audited workload's pods that runs something: pods that ended or
/// are being deleted run nothing, nor does a container with no imageID yet.
fn seen<'a>(
    git: &'a GitSide,
    inventory: &'a Inventory,
    namespaces: &BTreeSet<String>,
    manages: &impl Fn(&str) -> bool,
) -> Vec<Seen<'a>> {
    let mut seen = Vec::new();
    // Pods of one image share its key: each spelling is parsed once per audit.
    let mut keys: BTreeMap<&str, String> = BTreeMap::new();
    for (id, workload, pods) in audited(git, inventory, namespaces) {
        let names = containers_of(id, git, workload, manages);
        for pod in pods.iter().filter(|p| runs(p)) {
            for status in pod.containers.iter() {
                let Some(container) = names.get(status.name.as_str()) else {
                    continue;
                };
                let Some(digest) = digest_of_image_id(&status.image_id) else {
                    continue;
                };
                let image = pod
                    .spec_images
                    .iter()
                    .find(|(name, _)| *name == status.name)
                    .map_or(status.image.as_str(), |(_, image)| image.as_str());
                seen.push(Seen {
                    workload: id,
                    container,
                    key: keys
                        .entry(image)
                        .or_insert_with(|| reference_key(image))
                        .clone(),
                    image: image.to_string(),
                    digest,
                    pod: &pod.name,
                    node: pod.node.as_deref(),
                });
            }
        }
    }
    seen
}

/// Whether a pod runs what its containers report: not ended, not on its way out.
fn runs(pod: &LivePod) -> bool {
    !pod.deleting && pod.phase != "Succeeded" && pod.phase != "Failed"
}

/// One spelling for every way of writing the same reference: `nginx`, `nginx:latest` and
/// `docker.io/library/nginx:latest` are one. A reference that does not parse is its own key.
fn reference_key(image: &str) -> String {
    let Ok(reference) = Reference::parse(image.trim()) else {
        return image.trim().to_string();
    };
    let mut key = reference.canonical_name();
    if let Some(tag) = reference.effective_tag() {
        key.push(':');
        key.push_str(tag);
    }
    if let Some(digest) = reference.digest() {
        key.push('@');
        key.push_str(&digest.to_string());
    }
    key
}

/// What to ask the registry before judging: for each reference whose pods report more than one
/// digest, each manifest digest reported, the reference's own digest when it is pinned, and
/// its tag otherwise. A reference whose pods all report one digest needs nothing.
pub fn asks(
    git: &GitSide,
    inventory: &Inventory,
    namespaces: &BTreeSet<String>,
    manages: impl Fn(&str) -> bool,
) -> Vec<Ask> {
    let mut by_key: BTreeMap<&str, Vec<&Seen>> = BTreeMap::new();
    let seen = seen(git, inventory, namespaces, &manages);
    for s in &seen {
        by_key.entry(s.key.as_str()).or_default().push(s);
    }
    let mut asks = BTreeSet::new();
    for (key, seen) in by_key {
        let digests: BTreeSet<&str> = seen.iter().map(|s| s.digest()).collect();
        if digests.len() < 2 {
            continue;
        }
        for s in &seen {
            if let ImageIdDigest::WithRepo(d) = &s.digest {
                if let Ok(digest) = Digest::parse(d) {
                    asks.insert(Ask::Digest {
                        image: key.to_string(),
                        digest,
                    });
                }
            }
        }
        match Reference::parse(key).ok().and_then(|r| r.digest().cloned()) {
            Some(digest) => asks.insert(Ask::Digest {
                image: key.to_string(),
                digest,
            }),
            None => asks.insert(Ask::Tag {
                image: key.to_string(),
            }),
        };
    }
    asks.into_iter().collect()
}

/// Which digest each digest stands for: those of one family (an index, its platform
/// manifests, their configs) stand for the family's own digest, and families that share a
/// digest are one.
fn representatives(families: &[DigestFamily]) -> BTreeMap<String, String> {
    let mut parent: BTreeMap<String, String> = BTreeMap::new();
    fn root(parent: &BTreeMap<String, String>, d: &str) -> String {
        let mut d = d.to_string();
        while let Some(p) = parent.get(&d).filter(|p| **p != d) {
            d = p.clone();
        }
        d
    }
    for family in families.iter().filter(|f| !f.pinned.is_empty()) {
        let top = root(&parent, &family.pinned);
        parent.insert(top.clone(), top.clone());
        for member in family
            .platform_children
            .iter()
            .chain(&family.config_digests)
        {
            let other = root(&parent, member);
            if other != top {
                parent.insert(other, top.clone());
            }
        }
    }
    let keys: Vec<String> = parent.keys().cloned().collect();
    keys.into_iter()
        .map(|d| {
            let r = root(&parent, &d);
            (d, r)
        })
        .collect()
}

/// Whether the live template's `template` image is what Git's `git` says for `container`;
/// `None` when it is, else what differs. Against a pin only the digest is compared (a mirror
/// may spell the repository otherwise); against a tag the whole reference, normalized, so a
/// digest a webhook or an override added is drift too.
pub fn drift(container: &str, git: &str, template: Option<&str>) -> Option<String> {
    let Some(template) = template else {
        return Some(format!("the live template has no container {container}"));
    };
    match Reference::parse(git.trim())
        .ok()
        .and_then(|r| r.digest().cloned())
    {
        Some(pinned) => (digest_part(template) != Some(pinned.to_string().as_str()))
            .then(|| format!("the live template runs {template}, not the pinned {pinned}")),
        None => (reference_key(git) != reference_key(template))
            .then(|| format!("the live template runs {template}, Git says {git}")),
    }
}

/// The audit: every container of the audited workloads (Git's and the live templates'),
/// what Git says of it, what its template carries and what its pods run, and the references
/// whose pods run more than one image. `families` are the registry's answers to [`asks`].
pub fn judge(
    git: &GitSide,
    inventory: &Inventory,
    namespaces: &BTreeSet<String>,
    families: &[DigestFamily],
    manages: impl Fn(&str) -> bool,
) -> Audit {
    let stands_for = representatives(families);
    let image_of = |d: &str| stands_for.get(d).cloned().unwrap_or_else(|| d.to_string());
    let seen = seen(git, inventory, namespaces, &manages);
    let mixed = mixed_images(&seen, &image_of);
    let mixed_keys: BTreeSet<&str> = mixed.iter().map(|m| m.image.as_str()).collect();
    // Each container's pods, found once: a namespace of N workloads is not searched N times.
    let mut by_container: BTreeMap<(&WorkloadId, &str), Vec<&Seen>> = BTreeMap::new();
    for s in &seen {
        by_container
            .entry((s.workload, s.container))
            .or_default()
            .push(s);
    }
    let mut rows = Vec::new();
    for (id, workload, _) in audited(git, inventory, namespaces) {
        for container in containers_of(id, git, workload, &manages) {
            let git_image = git.containers.get(&(id.clone(), container.to_string()));
            let template = workload
                .template_images
                .iter()
                .find(|(name, _)| name == container)
                .map(|(_, image)| image.clone());
            let mine: &[&Seen] = by_container
                .get(&(id, container))
                .map_or(&[], Vec::as_slice);
            let mut findings = vec![match git_image {
                None => Finding::NotInGit,
                Some(g) if pinned(&g.image) => Finding::Pinned,
                Some(_) => Finding::TagOnly,
            }];
            let drift = git_image
                .filter(|g| g.uncertain.is_none())
                .and_then(|g| drift(container, &g.image, template.as_deref()));
            if drift.is_some() {
                findings.push(Finding::Drift);
            }
            if mine.iter().any(|s| mixed_keys.contains(s.key.as_str())) {
                findings.push(Finding::Mixed);
            }
            rows.push(Row {
                workload: id.clone(),
                container: container.to_string(),
                findings,
                git: git_image.map(|g| g.image.clone()),
                template,
                drift,
                running: running(mine, &image_of),
                note: git_image.and_then(|g| g.uncertain.clone()),
            });
        }
    }
    rows.extend(absent(git, inventory, namespaces));
    rows.sort_by(|a, b| (&a.workload, &a.container).cmp(&(&b.workload, &b.container)));
    let mut unread: Vec<String> = inventory
        .refused
        .iter()
        .filter(|((ns, _), _)| namespaces.contains(ns))
        .map(|(_, message)| message.clone())
        .collect();
    unread.sort();
    unread.dedup();
    Audit {
        rows,
        mixed,
        not_audited: git.not_audited.clone(),
        unread,
    }
}

fn pinned(image: &str) -> bool {
    Reference::parse(image.trim()).is_ok_and(|r| r.digest().is_some())
}

/// The rows of the workloads Git names in `namespaces` that were not listed: missing, or in a
/// list the API refused.
fn absent(git: &GitSide, inventory: &Inventory, namespaces: &BTreeSet<String>) -> Vec<Row> {
    let mut rows = Vec::new();
    for ((id, container), g) in &git.containers {
        let Some(namespace) = id.namespace.as_ref().filter(|ns| namespaces.contains(*ns)) else {
            continue;
        };
        if inventory.workloads.contains_key(id) {
            continue;
        }
        let refused = inventory.refused.get(&(namespace.clone(), id.kind.clone()));
        let finding = match refused {
            Some(_) => Finding::Unread,
            None => Finding::Missing,
        };
        rows.push(Row {
            workload: id.clone(),
            container: container.clone(),
            findings: vec![finding],
            git: Some(g.image.clone()),
            template: None,
            drift: None,
            running: Vec::new(),
            note: refused.cloned().or_else(|| g.uncertain.clone()),
        });
    }
    rows
}

/// What the pods of one row run: by digest and reference, most pods first.
fn running(seen: &[&Seen], image_of: &impl Fn(&str) -> String) -> Vec<Running> {
    /// Pods and nodes, by digest and reference.
    type ByDigest<'a> = BTreeMap<(&'a str, &'a str), (BTreeSet<&'a str>, BTreeSet<&'a str>)>;
    let mut by = ByDigest::new();
    for s in seen {
        let (pods, nodes) = by.entry((s.digest(), s.image.as_str())).or_default();
        pods.insert(s.pod);
        nodes.extend(s.node);
    }
    let mut running: Vec<Running> = by
        .into_iter()
        .map(|((digest, image), (pods, nodes))| Running {
            digest: digest.to_string(),
            stands_for: Some(image_of(digest)).filter(|r| r != digest),
            image: image.to_string(),
            pods: pods.into_iter().map(str::to_string).collect(),
            nodes: nodes.into_iter().map(str::to_string).collect(),
        })
        .collect();
    running.sort_by_key(|r| std::cmp::Reverse(r.pods.len()));
    running
}

/// The references whose pods run more than one image.
fn mixed_images(seen: &[Seen], image_of: &impl Fn(&str) -> String) -> Vec<MixedImage> {
    type Pods<'a> = (
        BTreeSet<(&'a WorkloadId, &'a str)>,
        BTreeSet<&'a str>,
        BTreeSet<&'a WorkloadId>,
    );
    let mut by_key: BTreeMap<&str, BTreeMap<String, Pods>> = BTreeMap::new();
    for s in seen {
        let (pods, nodes, workloads) = by_key
            .entry(s.key.as_str())
            .or_default()
            .entry(image_of(s.digest()))
            .or_default();
        pods.insert((s.workload, s.pod));
        nodes.extend(s.node);
        workloads.insert(s.workload);
    }
    by_key
        .into_iter()
        .filter(|(_, digests)| digests.len() > 1)
        .map(|(key, digests)| {
            let mut digests: Vec<MixedDigest> = digests
                .into_iter()
                .map(|(digest, (pods, nodes, workloads))| MixedDigest {
                    digest,
                    pods: pods.len(),
                    nodes: nodes.into_iter().map(str::to_string).collect(),
                    workloads: workloads.into_iter().cloned().collect(),
                })
                .collect();
            digests.sort_by_key(|d| std::cmp::Reverse(d.pods));
            MixedImage {
                image: key.to_string(),
                digests,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::judge::observed::{LiveContainer, RolloutStatus};

    const A: &str = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const B: &str = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
    const C: &str = "sha256:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc";

    fn id(text: &str) -> WorkloadId {
        text.parse().unwrap()
    }

    fn git(entries: &[(&str, &str, &str)]) -> GitSide {
        GitSide {
            containers: entries
                .iter()
                .map(|(w, c, image)| {
                    let image = GitImage {
                        image: image.to_string(),
                        uncertain: None,
                    };
                    ((id(w), c.to_string()), image)
                })
                .collect(),
            not_audited: Vec::new(),
        }
    }

    fn deployment(containers: &[(&str, &str)]) -> LiveWorkload {
        LiveWorkload {
            kind: "Deployment".into(),
            generation: Some(1),
            observed_generation: Some(1),
            template_images: containers
                .iter()
                .map(|(c, i)| (c.to_string(), i.to_string()))
                .collect(),
            rollout: RolloutStatus::Pod,
        }
    }

    /// Pod `name` on `node`, its container `c` asking for `image` and running `digest`.
    fn pod(name: &str, node: &str, c: &str, image: &str, digest: &str) -> LivePod {
        LivePod {
            name: name.into(),
            phase: "Running".into(),
            ready: true,
            containers: vec![LiveContainer {
                name: c.into(),
                image: image.into(),
                image_id: format!("ghcr.io/acme/web@{digest}"),
                ready: true,
                ..LiveContainer::default()
            }],
            node: Some(node.into()),
            spec_images: vec![(c.into(), image.into())],
            ..LivePod::default()
        }
    }

    fn inventory(workloads: Vec<(&str, LiveWorkload, Vec<LivePod>)>) -> Inventory {
        Inventory {
            workloads: workloads
                .into_iter()
                .map(|(w, l, p)| (id(w), (l, p)))
                .collect(),
            refused: BTreeMap::new(),
        }
    }

    fn shop() -> BTreeSet<String> {
        ["shop".to_string()].into()
    }

    fn all(_: &str) -> bool {
        true
    }

    #[test]
    fn three_pods_of_a_tag_on_two_digests_are_mixed_and_name_both_nodes() {
        let image = "ghcr.io/acme/web:latest";
        let git = git(&[("shop/Deployment/web", "app", image)]);
        let pods = vec![
            pod("web-1", "node-a", "app", image, A),
            pod("web-2", "node-a", "app", image, A),
            pod("web-3", "node-b", "app", image, B),
        ];
        let inv = inventory(vec![(
            "shop/Deployment/web",
            deployment(&[("app", image)]),
            pods,
        )]);
        let audit = judge(&git, &inv, &shop(), &[], all);
        let row = &audit.rows[0];
        assert_eq!(row.findings, vec![Finding::TagOnly, Finding::Mixed]);
        assert_eq!(row.running[0].digest, A);
        assert_eq!(row.running[0].pods, vec!["web-1", "web-2"]);
        assert_eq!(row.running[0].nodes, vec!["node-a"]);
        assert_eq!(row.running[1].nodes, vec!["node-b"]);
        assert_eq!(audit.mixed[0].image, "ghcr.io/acme/web:latest");
        assert_eq!(audit.mixed[0].digests.len(), 2);
        assert!(!audit.clean());
    }

    #[test]
    fn a_digest_standing_for_another_is_not_mixed() {
        let image = format!("ghcr.io/acme/web:1@{A}");
        let git = git(&[("shop/Deployment/web", "app", &image)]);
        let pods = vec![
            pod("web-1", "node-a", "app", &image, A),
            pod("web-2", "node-arm", "app", &image, B),
        ];
        let inv = inventory(vec![(
            "shop/Deployment/web",
            deployment(&[("app", &image)]),
            pods,
        )]);
        let asked = asks(&git, &inv, &shop(), all);
        assert!(asked.contains(&Ask::Digest {
            image: format!("ghcr.io/acme/web:1@{A}"),
            digest: A.parse().unwrap()
        }));
        let family = DigestFamily {
            pinned: A.into(),
            platform_children: vec![B.into()],
            config_digests: vec![C.into()],
        };
        let audit = judge(&git, &inv, &shop(), &[family], all);
        assert_eq!(audit.rows[0].findings, vec![Finding::Pinned]);
        assert_eq!(audit.rows[0].running[1].stands_for.as_deref(), Some(A));
        assert!(audit.mixed.is_empty());
        assert!(audit.clean());
        // Without the registry's word, two digests are two images.
        let unknown = judge(&git, &inv, &shop(), &[], all);
        assert!(unknown.rows[0].has(Finding::Mixed));
    }

    #[test]
    fn one_reference_on_two_digests_across_two_workloads_is_mixed_in_both() {
        let image = "redis:7";
        let git = git(&[
            ("shop/Deployment/cache", "redis", image),
            (
                "shop/Deployment/queue",
                "redis",
                "docker.io/library/redis:7",
            ),
        ]);
        let inv = inventory(vec![
            (
                "shop/Deployment/cache",
                deployment(&[("redis", image)]),
                vec![pod("cache-1", "node-a", "redis", image, A)],
            ),
            (
                "shop/Deployment/queue",
                deployment(&[("redis", "docker.io/library/redis:7")]),
                vec![pod(
                    "queue-1",
                    "node-b",
                    "redis",
                    "docker.io/library/redis:7",
                    B,
                )],
            ),
        ]);
        let audit = judge(&git, &inv, &shop(), &[], all);
        assert!(audit.rows.iter().all(|r| r.has(Finding::Mixed)));
        assert_eq!(audit.mixed[0].image, "docker.io/library/redis:7");
        assert_eq!(
            audit.mixed[0].digests[0].workloads,
            vec![id("shop/Deployment/cache")]
        );
    }

    #[test]
    fn a_rollout_from_one_pin_to_the_next_is_not_mixed() {
        let old = format!("ghcr.io/acme/web:1@{A}");
        let new = format!("ghcr.io/acme/web:2@{B}");
        let git = git(&[("shop/Deployment/web", "app", &new)]);
        let inv = inventory(vec![(
            "shop/Deployment/web",
            deployment(&[("app", &new)]),
            vec![
                pod("web-1", "node-a", "app", &old, A),
                pod("web-2", "node-b", "app", &new, B),
            ],
        )]);
        let audit = judge(&git, &inv, &shop(), &[], all);
        assert_eq!(audit.rows[0].findings, vec![Finding::Pinned]);
        assert_eq!(audit.rows[0].running.len(), 2);
    }

    #[test]
    fn drift_against_a_pin_compares_digests_and_against_a_tag_the_reference() {
        let pin = format!("ghcr.io/acme/web:1@{A}");
        assert_eq!(drift("app", &pin, Some(&pin)), None);
        // A mirror spelling the repository otherwise runs the same bytes.
        assert_eq!(
            drift("app", &pin, Some(&format!("mirror.local/web@{A}"))),
            None
        );
        assert_eq!(
            drift("app", &pin, Some("ghcr.io/acme/web:2")),
            Some(format!(
                "the live template runs ghcr.io/acme/web:2, not the pinned {A}"
            ))
        );
        assert_eq!(
            drift("app", "nginx", Some("docker.io/library/nginx:latest")),
            None
        );
        assert_eq!(
            drift("app", "nginx:1.27", Some(&format!("nginx:1.27@{A}"))),
            Some(format!(
                "the live template runs nginx:1.27@{A}, Git says nginx:1.27"
            ))
        );
        assert_eq!(
            drift("app", "nginx:1.27", None),
            Some("the live template has no container app".to_string())
        );
    }

    #[test]
    fn a_changed_template_is_drift_and_fails() {
        let pin = format!("ghcr.io/acme/api:1@{A}");
        let set = format!("ghcr.io/acme/api:1@{B}");
        let git = git(&[("shop/Deployment/api", "api", &pin)]);
        let inv = inventory(vec![(
            "shop/Deployment/api",
            deployment(&[("api", &set)]),
            vec![pod("api-1", "node-a", "api", &set, B)],
        )]);
        let audit = judge(&git, &inv, &shop(), &[], all);
        assert_eq!(
            audit.rows[0].findings,
            vec![Finding::Pinned, Finding::Drift]
        );
        assert_eq!(audit.rows[0].template.as_deref(), Some(set.as_str()));
        assert!(!audit.clean());
    }

    #[test]
    fn what_git_does_not_name_is_reported_and_does_not_fail() {
        let git = git(&[("shop/Deployment/web", "app", &format!("web:1@{A}"))]);
        let inv = inventory(vec![
            (
                "shop/Deployment/web",
                deployment(&[("app", &format!("web:1@{A}")), ("sidecar", "envoy:1")]),
                vec![],
            ),
            (
                "shop/Deployment/other",
                deployment(&[("app", "other:1")]),
                vec![],
            ),
            // Another namespace is not audited.
            (
                "kube-system/Deployment/dns",
                deployment(&[("dns", "dns:1")]),
                vec![],
            ),
            // A ReplicaSet Git does not name is a Deployment's.
            (
                "shop/ReplicaSet/web-7d9f",
                deployment(&[("app", "web:0")]),
                vec![],
            ),
        ]);
        let audit = judge(&git, &inv, &shop(), &[], |i: &str| !i.starts_with("envoy"));
        let rows: Vec<(String, &str, &[Finding])> = audit
            .rows
            .iter()
            .map(|r| {
                (
                    r.workload.to_string(),
                    r.container.as_str(),
                    &r.findings[..],
                )
            })
            .collect();
        assert_eq!(
            rows,
            vec![
                (
                    "shop/Deployment/other".to_string(),
                    "app",
                    &[Finding::NotInGit][..]
                ),
                (
                    "shop/Deployment/web".to_string(),
                    "app",
                    &[Finding::Pinned][..]
                ),
            ]
        );
        assert!(audit.clean());
    }

    #[test]
    fn a_named_workload_not_listed_is_missing_or_unread() {
        let git = git(&[
            ("shop/Deployment/web", "app", "web:1"),
            ("shop/StatefulSet/db", "db", "db:1"),
        ]);
        let mut inv = inventory(vec![]);
        inv.refused.insert(
            ("shop".into(), WorkloadKind::StatefulSet),
            "Kubernetes API https://k: list StatefulSet in namespace shop: 403 Forbidden".into(),
        );
        let audit = judge(&git, &inv, &shop(), &[], all);
        // Sorted by workload: kinds in their declared order, Deployment first.
        assert_eq!(audit.rows[0].workload, id("shop/Deployment/web"));
        assert_eq!(audit.rows[0].findings, vec![Finding::Missing]);
        assert_eq!(audit.rows[1].findings, vec![Finding::Unread]);
        assert!(audit.rows[1].note.as_deref().unwrap().contains("403"));
        assert_eq!(audit.unread.len(), 1);
        assert!(!audit.clean());
    }

    #[test]
    fn ended_and_deleting_pods_and_unstarted_containers_run_nothing() {
        let image = "web:latest";
        let git = git(&[("shop/Deployment/web", "app", image)]);
        let mut evicted = pod("web-old", "node-b", "app", image, B);
        evicted.phase = "Failed".into();
        let mut leaving = pod("web-going", "node-b", "app", image, B);
        leaving.deleting = true;
        let mut pulling = pod("web-new", "node-c", "app", image, C);
        pulling.containers[0].image_id = String::new();
        let inv = inventory(vec![(
            "shop/Deployment/web",
            deployment(&[("app", image)]),
            vec![
                pod("web-1", "node-a", "app", image, A),
                evicted,
                leaving,
                pulling,
            ],
        )]);
        let audit = judge(&git, &inv, &shop(), &[], all);
        assert_eq!(audit.rows[0].findings, vec![Finding::TagOnly]);
        assert_eq!(audit.rows[0].running.len(), 1);
    }

    #[test]
    fn namespaces_and_lists_follow_what_git_names() {
        let git = git(&[
            ("shop/Deployment/web", "app", "web:1"),
            ("shop/Job/migrate", "migrate", "web:1"),
            ("pay/StatefulSet/db", "db", "db:1"),
        ]);
        let namespaces = namespaces(&git);
        assert_eq!(namespaces, ["pay".to_string(), "shop".to_string()].into());
        let lists = lists(&git, &namespaces);
        assert!(lists["shop"].contains(&WorkloadKind::Job));
        assert!(!lists["pay"].contains(&WorkloadKind::Job));
        assert!(lists["pay"].contains(&WorkloadKind::CronJob));
    }

    #[test]
    fn workloads_count_once_per_finding() {
        let row = |w: &str, c: &str, findings: Vec<Finding>| Row {
            workload: id(w),
            container: c.into(),
            findings,
            git: None,
            template: None,
            drift: None,
            running: Vec::new(),
            note: None,
        };
        let audit = Audit {
            rows: vec![
                row("shop/Deployment/web", "a", vec![Finding::Pinned]),
                row(
                    "shop/Deployment/web",
                    "b",
                    vec![Finding::Pinned, Finding::Mixed],
                ),
                row("shop/Deployment/api", "a", vec![Finding::TagOnly]),
            ],
            ..Audit::default()
        };
        let with = audit.workloads_with();
        assert_eq!(with[&Finding::Pinned], 1);
        assert_eq!(with[&Finding::Mixed], 1);
        assert_eq!(with[&Finding::TagOnly], 1);
        assert_eq!(with[&Finding::Drift], 0);
        assert_eq!(with.len(), Finding::ALL.len());
        assert_eq!(audit.workloads(), 2);
    }

    #[test]
    fn families_sharing_a_digest_stand_for_one_image() {
        let families = [
            DigestFamily {
                pinned: A.into(),
                platform_children: vec![B.into()],
                config_digests: vec![],
            },
            DigestFamily {
                pinned: B.into(),
                platform_children: vec![],
                config_digests: vec![C.into()],
            },
        ];
        let reps = representatives(&families);
        assert_eq!(reps[B], A);
        assert_eq!(reps[C], A);
    }
}
