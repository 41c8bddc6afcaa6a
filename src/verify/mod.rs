//! `tagpin verify`: did the cluster converge to what Git promises?
//!
//! Merging a pin is a promise, not a fact: the GitOps tool must sync, the rollout must finish,
//! and every node must really run the pinned digest. This module gathers what is expected
//! (from a pull request's plan block, a commit, or a branch tip), reads what is live
//! ([`observe`], through a [`Cluster`]), asks the registry which digests stand for the pinned
//! one (an index's platform manifests, config digests), and lets the pure [`judge`] decide;
//! `judge/report.rs` renders the verdict for the pull request. Nothing here writes to the
//! cluster.

pub mod judge;
pub mod observe;
mod scope;

pub use scope::GitOpsScope;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use std::time::Duration;

// tokio's, not std's: cache lifetimes and deadlines follow paused test time (see crate::clock).
use tokio::time::Instant;

use crate::cluster::{Cluster, ClusterError};
use crate::config::Config;
use crate::forge::{ChangeRequestNoun, ForgeClient, ForgeError, StatusState};
use crate::git::{off_runtime, GitError, Mirror};
use crate::manifest::kustomize::is_kustomization_file;
use crate::manifest::{FileFilter, ManifestError};
use crate::pipeline::{self, ImageSelection};
use crate::proposal::body;
use crate::reference::{Digest, Reference};
use crate::registry::{Client, ManifestKind};
use crate::render::{self, Lookup};
use crate::workload::WorkloadId;
use judge::check::{Check, Expectations};
use judge::expected::{self, Expected, NameMapping};
use judge::verdict::{self, DigestFamily, Live, State};
use judge::{gitops, helm, report};

/// Where the expectations come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    PullRequest(u64),
    Commit(String),
    Branch(String),
}

#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error(transparent)]
    Forge(#[from] ForgeError),
    #[error(transparent)]
    Git(#[from] GitError),
    #[error(transparent)]
    Live(#[from] ClusterError),
    #[error("configuration: {0}")]
    Filter(#[from] ManifestError),
    #[error("--pr needs a forge: section in the configuration")]
    NoForge,
    /// Holds the change request's name as its forge says it (`pull request #12`).
    #[error("{0} has no tagpin plan block in its body")]
    NoPlanBlock(String),
    /// A configured path the commit does not hold: a mistake in the configuration (or a
    /// folder moved in the repository), so nothing at that path can be judged.
    #[error("configuration: paths names {path}, which commit {commit} does not hold")]
    MissingPath { path: String, commit: String },
    #[error("{} comes from a fork ({author}:{branch}), not from this repository: tagpin does not verify it, since its body would choose what is read from the cluster and shown back", noun.name(*number))]
    FromFork {
        number: u64,
        noun: ChangeRequestNoun,
        author: String,
        branch: String,
    },
}

/// Refuses a pull request whose branch is in a fork: its plan block, written by anyone, would
/// choose which workloads are read from the cluster, and the verdict is posted back to it.
pub(crate) fn refuse_fork(
    pr: &crate::forge::PullRequestInfo,
    noun: ChangeRequestNoun,
) -> Result<(), VerifyError> {
    if pr.same_repository {
        return Ok(());
    }
    Err(VerifyError::FromFork {
        number: pr.number,
        noun,
        author: pr.author.clone(),
        branch: pr.head_ref.clone(),
    })
}

/// Reads the expectations for `source`. `fresh`: the caller fetched the configured branch just
/// now (a cycle's pass), so a commit the mirror holds on it is read as it is, without asking
/// the remote for its refs again. (A branch named with `--branch` is always fetched: only the
/// command line asks for one, and it has fetched nothing.)
pub async fn expectations(
    source: &Source,
    config: &Config,
    mirror: &Mirror,
    forge: Option<&ForgeClient>,
    fresh: bool,
) -> Result<Expectations, VerifyError> {
    let mapping = name_mapping(config);
    let mut expectations = match source {
        Source::PullRequest(number) => {
            let forge = forge.ok_or(VerifyError::NoForge)?;
            let pr = forge.pull_request(*number).await?;
            refuse_fork(&pr, forge.noun())?;
            let block = body::parse(&pr.body)
                .ok_or_else(|| VerifyError::NoPlanBlock(forge.noun().name(*number)))?;
            let promised = expected::from_plan(&block, &mapping);
            let mut commits = vec![pr.head_sha.clone()];
            commits.extend(pr.merge_commit_sha.filter(|_| pr.merged));
            let branch = match pr.merged {
                true => &config.repository.branch,
                false => &pr.head_ref,
            };
            let commit_branches = commits
                .iter()
                .map(|sha| (sha.clone(), branch.clone()))
                .collect();
            Expectations {
                expected: promised.expected,
                not_verified: promised.not_verified,
                failures: Vec::new(),
                skipped: Vec::new(),
                commits,
                commit_branches,
                pinned_in: gitops::files_of_pins(&block.pins, &mapping),
                gitops: None,
                helm: promised.helm,
            }
        }
        Source::Commit(sha) => {
            let branch = &config.repository.branch;
            // The commit, and whether the branch (as the mirror has it) holds it.
            let read = || -> Result<(git2::Oid, bool), GitError> {
                let oid = mirror.resolve_commit(sha)?;
                let on_branch = match mirror.tip(branch) {
                    Some(tip) => {
                        mirror.is_descendant_or_equal(&tip.to_string(), &oid.to_string())?
                    }
                    None => None,
                };
                Ok((oid, on_branch == Some(true)))
            };
            let (oid, on_branch) = off_runtime(|| {
                // Just fetched, a commit on the branch is read as it is; one the pass pushed
                // since (or any other) is fetched, so the branch is seen to hold it.
                if let Some(found) = fresh.then(|| read().ok()).flatten().filter(|f| f.1) {
                    return Ok(found);
                }
                mirror.fetch(branch, &config.pull_request.branch_prefix)?;
                read()
            })?;
            let mut expectations = off_runtime(|| expectations_at(oid, config, mirror))?;
            if on_branch {
                expectations
                    .commit_branches
                    .insert(oid.to_string(), branch.clone());
            }
            return Ok(expectations);
        }
        Source::Branch(branch) => {
            let tip = off_runtime(|| {
                mirror.fetch(branch, &config.pull_request.branch_prefix)?;
                mirror.require_tip(branch)
            })?;
            let mut expectations = off_runtime(|| expectations_at(tip, config, mirror))?;
            expectations
                .commit_branches
                .insert(tip.to_string(), branch.clone());
            return Ok(expectations);
        }
    };
    expectations.gitops = Some(GitOpsScope::new(config, mirror)?);
    Ok(expectations)
}

/// The expectations of a commit the mirror already holds (no fetch): for callers that have
/// just fetched, such as a promotion pass.
pub fn expectations_at(
    commit: git2::Oid,
    config: &Config,
    mirror: &Mirror,
) -> Result<Expectations, VerifyError> {
    let mut expectations = from_tree(mirror, commit, config, &name_mapping(config))?;
    expectations.gitops = Some(GitOpsScope::new(config, mirror)?);
    Ok(expectations)
}

/// How manifest names become live names, as the configuration's `verify:` section says.
pub(crate) fn name_mapping(config: &Config) -> NameMapping {
    NameMapping {
        default_namespace: config.verify.default_namespace.clone(),
        name_prefix: config.verify.name_prefix.clone(),
        name_suffix: config.verify.name_suffix.clone(),
    }
}

/// The manifests of a commit as `verify` and `audit` read them: scanned through the same
/// pipeline `plan` and `sync` use (so all agree on files, skips and errors), with the root
/// kustomizations under the configured paths rendered from the commit's tree (their bases
/// elsewhere in the repository included).
pub(crate) struct TreeRead {
    pub files: Vec<crate::plan::ScannedFile>,
    pub renders: Vec<render::Render>,
    /// What was skipped, what a render could not follow included (`plan` and `sync` do not
    /// render), sorted.
    pub skipped: Vec<pipeline::Skipped>,
    /// The files that could not be read, each naming its file.
    pub failures: Vec<String>,
    /// The configuration's `images.manage`/`images.ignore`.
    pub selection: ImageSelection,
}

/// Reads the configured paths of `commit` (see [`TreeRead`]); a configured path the commit
/// does not hold is an error naming it.
pub(crate) fn read_tree(
    mirror: &Mirror,
    commit: git2::Oid,
    config: &Config,
) -> Result<TreeRead, VerifyError> {
    let filter = FileFilter::with_default_include(&config.include_globs(), &config.exclude)?;
    let selection = ImageSelection::for_config(config)?;
    if let Some(path) = mirror.missing_paths(commit, &config.paths)?.first() {
        return Err(VerifyError::MissingPath {
            path: path.to_string(),
            commit: commit.to_string(),
        });
    }
    let gathered = mirror.read_files(commit, &config.paths, &filter)?;
    let kustomizations: Vec<PathBuf> = gathered
        .files
        .iter()
        .map(|f| f.path.clone())
        .filter(|path| is_kustomization_file(path))
        .collect();
    let scanned = pipeline::scan(gathered, &selection);
    let tree = |path: &Path| {
        mirror
            .read_path(commit, path)
            .unwrap_or_else(|e| Lookup::Refused(e.to_string()))
    };
    let renders = render::render_roots(&kustomizations, &tree);
    let mut skipped = scanned.skipped;
    skipped.extend(
        renders
            .iter()
            .flat_map(|r| &r.unverifiable)
            .map(|u| pipeline::Skipped {
                path: u.path.clone(),
                position: Some((u.line, u.column)),
                why: pipeline::SkipWhy::NotRendered(u.gap),
            }),
    );
    skipped.sort();
    skipped.dedup();
    Ok(TreeRead {
        failures: scanned.errors.iter().map(ToString::to_string).collect(),
        files: scanned.files,
        renders,
        skipped,
        selection,
    })
}

/// Expectations from the manifests of a commit ([`read_tree`]): the workloads of its rendered
/// kustomizations are looked for where the GitOps tool deploys them.
fn from_tree(
    mirror: &Mirror,
    commit: git2::Oid,
    config: &Config,
    mapping: &NameMapping,
) -> Result<Expectations, VerifyError> {
    let read = read_tree(mirror, commit, config)?;
    let manages = |image: &str| read.selection.manages(image);
    let promised = expected::from_manifests(&read.files, &read.renders, manages, mapping);
    Ok(Expectations {
        expected: promised.expected,
        not_verified: promised.not_verified,
        failures: read.failures,
        skipped: read.skipped,
        commits: vec![commit.to_string()],
        commit_branches: BTreeMap::new(),
        pinned_in: gitops::files_of_scan(&read.files, &read.renders, mapping),
        gitops: None,
        helm: promised.helm,
    })
}

/// How long a digest family is kept. A family never changes (manifests are addressed by
/// their digest); the bound only lets a controller that runs for months forget the images it
/// no longer verifies.
pub(crate) const FAMILY_LIFETIME: Duration = Duration::from_secs(6 * 3600);

/// At most this many families are kept; the oldest is forgotten first. A family is a few
/// digests per platform, so this is well under a few megabytes.
pub(crate) const MAX_FAMILIES: usize = 1024;

/// Digest families already asked of the registry, by pinned digest, for [`FAMILY_LIFETIME`]
/// and at most [`MAX_FAMILIES`] of them. A lookup that failed is not kept: the next check
/// asks again, so a registry that was down once does not leave a pin judged by its digest
/// alone for as long as the controller runs.
#[derive(Default)]
pub struct Families {
    known: BTreeMap<Digest, (Instant, DigestFamily)>,
}

impl Families {
    /// The digests that stand for `expected`'s pinned one: itself, an index's platform
    /// manifests, and the config digests of each image (what docker reports as a bare imageID).
    pub async fn of(&mut self, expected: &Expected, registry: &Client) -> DigestFamily {
        self.of_digest(&expected.pinned_ref, &expected.digest, registry)
            .await
    }

    /// The digests that stand for `digest` of the repository `image` names (its tag and digest
    /// aside), as [`Families::of`]: `tagpin audit` asks it of the digests pods report.
    pub(crate) async fn of_digest(
        &mut self,
        image: &str,
        digest: &Digest,
        registry: &Client,
    ) -> DigestFamily {
        if let Some(family) = self.get(digest, Instant::now()) {
            return family;
        }
        match ask_family(image, digest, registry).await {
            Ok(family) => {
                self.insert(digest.clone(), family.clone(), Instant::now());
                family
            }
            Err(message) => {
                tracing::warn!(
                    image = %image,
                    "cannot read the manifest {digest}, only that digest itself will match (asked again on the next check): {message}"
                );
                DigestFamily {
                    pinned: digest.to_string(),
                    ..DigestFamily::default()
                }
            }
        }
    }

    /// The family of `digest` if it was stored less than [`FAMILY_LIFETIME`] before `now`.
    fn get(&mut self, digest: &Digest, now: Instant) -> Option<DigestFamily> {
        let (at, family) = self.known.get(digest)?;
        if now.saturating_duration_since(*at) < FAMILY_LIFETIME {
            return Some(family.clone());
        }
        self.known.remove(digest);
        None
    }

    /// Stores a family at `now`, first forgetting the expired ones and, when full, the oldest.
    fn insert(&mut self, digest: Digest, family: DigestFamily, now: Instant) {
        self.known
            .retain(|_, (at, _)| now.saturating_duration_since(*at) < FAMILY_LIFETIME);
        while self.known.len() >= MAX_FAMILIES {
            let oldest = self
                .known
                .iter()
                .min_by_key(|(_, (at, _))| *at)
                .map(|(digest, _)| digest.clone());
            match oldest {
                Some(oldest) => self.known.remove(&oldest),
                None => break,
            };
        }
        self.known.insert(digest, (now, family));
    }
}

/// Why a pinned digest's family could not be read.
#[derive(Debug, thiserror::Error)]
enum FamilyError {
    #[error(transparent)]
    Reference(#[from] crate::reference::ParseError),
    #[error(transparent)]
    Registry(#[from] crate::registry::RegistryError),
}

async fn ask_family(
    image: &str,
    digest: &Digest,
    registry: &Client,
) -> Result<DigestFamily, FamilyError> {
    let reference = Reference::parse(image)?;
    let top = registry.manifest(&reference, digest).await?;
    let mut family = DigestFamily {
        pinned: digest.to_string(),
        ..DigestFamily::default()
    };
    match top.kind {
        ManifestKind::Image => family
            .config_digests
            .extend(top.config.map(|c| c.to_string())),
        ManifestKind::Index => {
            for child in &top.children {
                family.platform_children.push(child.digest.to_string());
                let manifest = registry.manifest(&reference, &child.digest).await?;
                family
                    .config_digests
                    .extend(manifest.config.map(|c| c.to_string()));
            }
        }
    }
    Ok(family)
}

/// Checks every expectation once: workloads and pods are listed once per namespace and kind,
/// however many workloads and containers there are.
pub async fn check(
    expectations: &Expectations,
    cluster: &Cluster,
    registry: &Client,
    families: &mut Families,
) -> Result<Check, VerifyError> {
    let mut gitops = consult_gitops(expectations, cluster).await?;
    let helm = consult_helm(expectations, cluster).await?;
    gitops.read.extend(helm.read);
    gitops.verdicts.extend(helm.verdicts);
    gitops.findings.objects.extend(helm.findings.objects);
    gitops
        .findings
        .not_verified
        .extend(helm.findings.not_verified);
    let ids: BTreeSet<&WorkloadId> = gitops.read.iter().map(|e| &e.workload).collect();
    let ids: Vec<&WorkloadId> = ids.into_iter().collect();
    let live = observe::read::workloads(cluster, &ids).await?;
    let mut verdicts = Vec::new();
    for e in &gitops.read {
        let Some(l) = live.get(&e.workload) else {
            continue;
        };
        // Most pods report the pinned digest itself; the registry is asked what else stands
        // for it (platform manifests, config digests) only when some pod reports another.
        let plain = DigestFamily {
            pinned: e.digest.to_string(),
            ..DigestFamily::default()
        };
        let mut v = verdict::judge(e, &plain, l);
        if reports_other_digests(e, l) {
            let family = families.of(e, registry).await;
            v = verdict::judge(e, &family, l);
        }
        verdicts.push(v);
    }
    verdicts.extend(gitops.verdicts);
    Ok(Check::judged(verdicts, expectations, gitops.findings))
}

/// Whether any pod reports, for the expected container, an imageID other than the pinned
/// digest itself.
fn reports_other_digests(e: &Expected, live: &Live) -> bool {
    let Live::Found { pods, .. } = live else {
        return false;
    };
    let pinned = e.digest.to_string();
    pods.iter()
        .flat_map(|p| p.containers.iter())
        .filter(|c| c.name == e.container && !c.image_id.is_empty())
        .any(|c| !c.image_id.ends_with(&pinned))
}

/// Checks until converged, failed or unverified, or until `timeout`: after each Progressing
/// check it waits for a change to what it listed (a watch), falling back to polling with
/// backoff (2 s, doubling, at most 30 s); transient API errors (timeouts, 5xx, 429) are
/// retried within the same budget. Without `wait`, checks once.
pub async fn watch(
    expectations: &Expectations,
    cluster: &Cluster,
    registry: &Client,
    wait: bool,
    timeout: Duration,
) -> Result<Check, VerifyError> {
    let deadline = Instant::now() + timeout;
    let mut delay = Duration::from_secs(2);
    let mut families = Families::default();
    loop {
        let now = Instant::now();
        match check(expectations, cluster, registry, &mut families).await {
            Ok(result) if !wait || result.state != State::Progressing || now >= deadline => {
                return Ok(result)
            }
            Ok(result) => {
                tracing::info!("{}; checking again on the next change", result.summary);
                // Woken by a watch on what was just listed; the delay is only the fallback
                // when no change comes (or watches are not allowed).
                if cluster.wait_for_change(delay.min(deadline - now)).await {
                    delay = Duration::from_secs(2);
                    continue;
                }
            }
            Err(VerifyError::Live(e)) if wait && e.is_transient() && now < deadline => {
                tracing::warn!("{e}; trying again in {delay:?}");
                tokio::time::sleep(delay.min(deadline - now)).await;
            }
            Err(e) => return Err(e),
        }
        delay = (delay * 2).min(Duration::from_secs(30));
    }
}

/// Marks the commits as being checked (the `pending` status that comes before a verdict).
pub(crate) async fn publish_pending(forge: &ForgeClient, expectations: &Expectations) {
    for sha in &expectations.commits {
        if let Err(e) = forge
            .set_status(
                sha,
                expectations.branch_of(sha),
                StatusState::Pending,
                report::STATUS_CONTEXT,
                "tagpin is checking the cluster",
            )
            .await
        {
            tracing::warn!("cannot mark {sha} as being checked: {e}");
        }
    }
}

/// Reports a check where the team looks: the `tagpin/converged` status on each commit and,
/// for a pull request, the one comment tagpin keeps there. A status already saying the same
/// is not set again. A failure to report is logged, not fatal: the verdict stands.
pub async fn publish(
    forge: &ForgeClient,
    pr: Option<u64>,
    expectations: &Expectations,
    check: &Check,
) {
    let state = match check.state {
        State::Converged => StatusState::Success,
        State::Failed => StatusState::Failure,
        State::Progressing => StatusState::Pending,
        State::Unverified => StatusState::Error,
    };
    let description = verdict::status_description(&check.verdicts, check.unchecked(expectations));
    for sha in &expectations.commits {
        forge
            .set_status_once(
                crate::forge::StatusKey {
                    sha,
                    branch: expectations.branch_of(sha),
                    context: report::STATUS_CONTEXT,
                },
                state,
                &description,
            )
            .await;
    }
    if let Some(number) = pr {
        let body = report::comment(check, expectations);
        if let Err(e) = forge
            .upsert_comment(number, report::COMMENT_MARKER, &body)
            .await
        {
            tracing::warn!(
                "cannot update the verdict comment on {}: {e}",
                forge.noun().name(number)
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
/// What the GitOps objects change in one check: which live workloads to read, which are still
/// waiting for their object to apply the pin commit, and what could not be placed.
async fn consult_gitops(
    expectations: &Expectations,
    cluster: &Cluster,
) -> Result<gitops::Decision, VerifyError> {
    let unchanged = || gitops::Decision::unchanged(&expectations.expected);
    let (Some(scope), Some(pin)) = (&expectations.gitops, expectations.commits.last()) else {
        return Ok(unchanged());
    };
    let listing = observe::gitops::objects(cluster).await?;
    let listed = gitops::objects(
        &listing.applications,
        &listing.kustomizations,
        &listing.git_repositories,
    );
    // What an impersonated tenant may not list only loses the GitOps objects' word on whether
    // the pin commit is applied: the live workloads are still read and judged.
    let unread = match listing.unread.is_empty() {
        true => String::new(),
        false => format!(" ({})", listing.unread.join("; ")),
    };
    for name in gitops::missing_names(&scope.named, &listed) {
        tracing::warn!(
            "verify.gitops names {name}, which tagpin cannot find in the cluster{unread}"
        );
    }
    let objects = gitops::relevant(listed, &scope.repository_url, &scope.named);
    if objects.is_empty() {
        return Ok(unchanged());
    }
    let (objects, sync) = applied(scope, objects, &expectations.commits);
    Ok(gitops::decide(
        &expectations.expected,
        &expectations.pinned_in,
        &objects,
        &sync,
        pin,
    ))
}

/// Whether each object applied one of `commits` (the pin commit) or a later one, asked of the
/// mirror: the hydrated commits of Argo CD's Source Hydrator first read back to the dry
/// commits they were rendered from, then every revision compared with the pin.
fn applied(
    scope: &GitOpsScope,
    mut objects: Vec<gitops::GitOpsObject>,
    commits: &[String],
) -> (Vec<gitops::GitOpsObject>, Vec<gitops::Sync>) {
    off_runtime(|| {
        let dry = scope.dry_commits(&gitops::hydrated_commits(&objects));
        gitops::with_dry_commits(&mut objects, &dry);
        let descends = scope.descends(&gitops::revisions(&objects), commits);
        let sync = objects
            .iter()
            .map(|o| gitops::sync_of(o, &descends))
            .collect();
        (objects, sync)
    })
}

/// What the releases that deploy the Helm pins say in one check (see [`helm`]): the GitOps
/// objects, HelmReleases and Applications are listed, then the workloads of the releases'
/// namespaces. Without Helm pins, nothing is listed.
async fn consult_helm(
    expectations: &Expectations,
    cluster: &Cluster,
) -> Result<gitops::Decision, VerifyError> {
    let pins = &expectations.helm;
    if pins.is_empty() {
        return Ok(gitops::Decision::default());
    }
    let (Some(scope), Some(pin)) = (&expectations.gitops, expectations.commits.last()) else {
        // Only a check built without a repository gets here: nothing to compare commits with.
        let releases: Vec<helm::Releases> = pins
            .iter()
            .map(|_| {
                Err((
                    expected::NotVerifiedReason::HelmRevisionUnknown,
                    "no repository to compare the applied commits with".to_string(),
                ))
            })
            .collect();
        return Ok(helm::decide(pins, &releases, &BTreeMap::new(), ""));
    };
    let listing = observe::gitops::objects(cluster).await?;
    let (helm_releases, helm_releases_unread) = observe::gitops::helm_releases(cluster).await?;
    let appliers = gitops::relevant(
        gitops::objects(
            &listing.applications,
            &listing.kustomizations,
            &listing.git_repositories,
        ),
        &scope.repository_url,
        &scope.named,
    );
    let (appliers, sync) = applied(scope, appliers, &expectations.commits);
    let listed = helm::Listed {
        applications: &listing.applications,
        helm_releases: &helm_releases,
        helm_releases_unread: helm_releases_unread.as_deref(),
        applications_unread: listing.applications_unread.as_deref(),
        git_repositories: &listing.git_repositories,
        appliers: &appliers,
        sync: &sync,
        repository: &scope.repository_url,
        pin,
    };
    let releases: Vec<helm::Releases> = pins.iter().map(|p| helm::releases(p, &listed)).collect();
    let namespaces: BTreeSet<String> = releases
        .iter()
        .flatten()
        .flatten()
        .flat_map(|r| r.candidates.namespaces())
        .collect();
    let mut workloads = BTreeMap::new();
    for namespace in namespaces {
        let listed = observe::read::release_workloads(cluster, &namespace).await?;
        workloads.insert(namespace, listed);
    }
    Ok(helm::decide(pins, &releases, &workloads, pin))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest(n: usize) -> Digest {
        match Digest::from_sha256_hex(&format!("{n:064x}")) {
            Ok(d) => d,
            Err(e) => panic!("{e}"),
        }
    }

    fn family(n: usize) -> DigestFamily {
        DigestFamily {
            pinned: digest(n).to_string(),
            platform_children: vec![digest(n + 100_000).to_string()],
            ..DigestFamily::default()
        }
    }

    #[test]
    fn a_family_is_kept_for_its_lifetime_then_forgotten() {
        let t0 = Instant::now();
        let mut families = Families::default();
        families.insert(digest(1), family(1), t0);
        let almost = t0 + FAMILY_LIFETIME - Duration::from_secs(1);
        assert_eq!(families.get(&digest(1), almost), Some(family(1)));
        assert_eq!(families.get(&digest(1), t0 + FAMILY_LIFETIME), None);
        assert!(families.known.is_empty(), "an expired family is dropped");
    }

    #[test]
    fn a_full_cache_forgets_the_oldest_family_first() {
        let t0 = Instant::now();
        let mut families = Families::default();
        for n in 0..MAX_FAMILIES {
            // Stored in reverse age: digest 0 is the newest, the last one the oldest.
            let at = t0 + Duration::from_secs((MAX_FAMILIES - n) as u64);
            families.insert(digest(n), family(n), at);
        }
        assert_eq!(families.known.len(), MAX_FAMILIES);
        let later = t0 + Duration::from_secs(MAX_FAMILIES as u64 + 1);
        families.insert(digest(MAX_FAMILIES), family(MAX_FAMILIES), later);
        assert_eq!(families.known.len(), MAX_FAMILIES);
        assert_eq!(families.get(&digest(MAX_FAMILIES - 1), later), None);
        assert_eq!(families.get(&digest(0), later), Some(family(0)));
        assert_eq!(
            families.get(&digest(MAX_FAMILIES), later),
            Some(family(MAX_FAMILIES))
        );
    }

    #[test]
    fn storing_sweeps_out_every_expired_family() {
        let t0 = Instant::now();
        let mut families = Families::default();
        families.insert(digest(1), family(1), t0);
        families.insert(digest(2), family(2), t0 + Duration::from_secs(60));
        families.insert(digest(3), family(3), t0 + FAMILY_LIFETIME);
        let kept: Vec<_> = families.known.keys().cloned().collect();
        assert_eq!(kept, vec![digest(2), digest(3)]);
    }
}
