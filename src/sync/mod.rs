//! `tagpin sync`: one pass that pins the GitOps repository itself.
//!
//! Fetch the mirror, read the target branch's tip, resolve, plan; then either commit to the
//! target branch (commit mode) or put the change on a tagpin-owned branch and open or update
//! its pull request (pull-request mode). Nothing is remembered between passes: what is in
//! flight is read back from the remote (tagpin's branches) and the forge (its pull requests
//! and their plan blocks), so a restarted process carries on where the last one stopped.
//!
//! The writing itself (the commit and its fast-forward push, the pull request, a lost race and
//! a tagpin branch a person edited) is [`crate::writer`]'s, shared with `promote`: a push that
//! loses to another writer re-fetches, re-plans on the new tip and tries again, never forcing.
//! In pull-request mode one group's failure (a refused push, a forge error) is reported for
//! that group while the others go on.

pub mod decision;
pub mod shared;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use serde::Serialize;

use crate::config::{Config, GitAuth, WriteMode};
use crate::forge::{ChangeRequestNoun, ForgeClient, ForgeError};
use crate::git::{off_runtime, Credentials, GitError, Mirror};
use crate::manifest::{FileFilter, ManifestError};
use crate::pipeline::{self, ImageSelection, Scanned, Skipped};
use crate::plan::{self, Plan, ScannedFile};
use crate::policy::{Follow, Policies, TagLists};
use crate::proposal::{body, message, PlanBlock};
use crate::reference::Reference;
use crate::registry::{Client, RegistryError, ResolveKey, ResolveResult};
use crate::signing::{Signer, SigningError};
use crate::writer::{self, Planned, Proposal, WriteError};

pub use crate::writer::Outcome;
use decision::Group;

/// Tags asked per `tags/list` page (`n`); a registry may serve fewer and point to the rest
/// with `Link`, which [`Client::list_tags`] follows.
pub const TAG_PAGE_SIZE: usize = 100;

/// A pass that could not run at all.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error(transparent)]
    Git(#[from] GitError),
    #[error(transparent)]
    Forge(#[from] ForgeError),
    /// An include, exclude or `images:` glob does not compile.
    #[error("configuration: {0}")]
    Filter(#[from] ManifestError),
    /// An `images.policies` entry does not compile (only for a `Config` not loaded from a file,
    /// which validates them).
    #[error("configuration: images.policies: {0}")]
    Policy(#[source] crate::policy::PolicyError),
    /// An `images.signatures`, `images.minimum_age` or `images.provenance` entry does not
    /// compile (only for a `Config` not loaded from a file, which validates them).
    #[error(transparent)]
    Gates(#[from] crate::pass::GateRuleError),
    #[error("pull-request mode needs a forge: section in the configuration")]
    NoForge,
    /// A secret named by the configuration could not be read; never holds the secret.
    #[error("{field}: {message}")]
    Secret {
        field: &'static str,
        message: String,
    },
    #[error("{url}: {branch} kept moving; gave up after {attempts} attempts to push on top of it")]
    TooManyRaces {
        url: String,
        branch: String,
        attempts: u32,
    },
}

impl From<WriteError> for SyncError {
    fn from(error: WriteError) -> SyncError {
        match error {
            WriteError::Git(e) => SyncError::Git(e),
            WriteError::Forge(e) => SyncError::Forge(e),
        }
    }
}

/// How many attempts a pass makes to write on top of a branch that keeps moving (fetch,
/// re-plan, push) before giving up with [`SyncError::TooManyRaces`].
pub const MAX_PUSH_ATTEMPTS: u32 = 5;

/// What a pass does after an attempt failed, when the failure does not end it
/// ([`retry_after`]).
#[derive(Debug)]
pub enum Retry {
    /// The branch moved: fetch, plan on the new tip and write again.
    Replan,
    /// The mirror is damaged (the error says how and where): move it aside, clone it again
    /// ([`crate::git::Mirror::repair`]) and run the attempt again on the fresh clone.
    Repair(GitError),
}

/// What follows attempt number `attempt` of a pass that failed with `error`, `repaired`
/// telling whether the pass has already cloned its mirror afresh.
///
/// [`Retry::Replan`] when the push lost a race (the branch moved since the pass read it) and
/// another attempt is allowed. [`Retry::Repair`] when the mirror was found damaged, once per
/// pass: damage found again in the fresh clone is the remote's, and ends the pass with an
/// error naming the remote ([`GitError::RemoteDamaged`]). Otherwise the error that ends the
/// pass: a race lost on the last attempt becomes [`SyncError::TooManyRaces`], naming the
/// remote and the branch; any other error is returned as it is. A damaged mirror never
/// reaches a commit: every read the commit is built on happens before it, in the attempt.
pub fn retry_after(attempt: u32, repaired: bool, error: SyncError) -> Result<Retry, SyncError> {
    match error {
        SyncError::Git(e) if e.damage().is_some() && !repaired => Ok(Retry::Repair(e)),
        SyncError::Git(e) if e.damage().is_some() => Err(SyncError::Git(e.in_fresh_clone())),
        SyncError::Git(GitError::NonFastForward { branch, .. }) if attempt < MAX_PUSH_ATTEMPTS => {
            tracing::info!(%branch, attempt, "the branch moved during the pass; fetching and planning again");
            Ok(Retry::Replan)
        }
        SyncError::Git(GitError::NonFastForward { url, branch }) => Err(SyncError::TooManyRaces {
            url,
            branch,
            attempts: attempt,
        }),
        error => Err(error),
    }
}

impl SyncError {
    /// Whether a push lost a race: the branch moved since the pass read it, so the pass plans
    /// again on the new tip ([`retry_after`]).
    pub fn is_lost_race(&self) -> bool {
        matches!(self, SyncError::Git(GitError::NonFastForward { .. }))
    }

    /// Whether the error would fail every group of the pass alike (credentials, setup, a rate
    /// limit to wait out), so going on to the next group would only repeat it, or hammer the
    /// forge. Other errors belong to the group that met them.
    pub fn is_pass_wide(&self) -> bool {
        matches!(
            self,
            SyncError::Git(
                GitError::Auth { .. }
                    | GitError::Mirror { .. }
                    | GitError::Damaged { .. }
                    | GitError::RemoteDamaged { .. }
            ) | SyncError::Forge(
                ForgeError::Setup { .. }
                    | ForgeError::RateLimited { .. }
                    | ForgeError::Call {
                        status: Some(401),
                        ..
                    }
            ) | SyncError::NoForge
                | SyncError::Secret { .. }
                | SyncError::TooManyRaces { .. }
                | SyncError::Filter(_)
                | SyncError::Policy(_)
                | SyncError::Gates(_)
        )
    }
}

/// The report of one group.
#[derive(Debug, Clone, Serialize)]
pub struct GroupReport {
    /// `all`, or the image repository when grouping per image.
    pub group: String,
    pub outcome: Outcome,
    pub changes: Vec<plan::Change>,
    #[serde(skip)]
    pub diff: String,
}

/// The report of a pass.
#[derive(Debug, Default, Serialize)]
pub struct SyncReport {
    pub target: String,
    pub groups: Vec<GroupReport>,
    /// Images or files that failed, each naming file (line and column) or image; the rest of
    /// the pass went on.
    pub failures: Vec<String>,
    pub skipped: Vec<Skipped>,
    /// Fields that would move and that a comment holds where they are (`# tagpin: hold`).
    pub held: Vec<crate::plan::Held>,
    /// Time spent asking registries, for the resolution latency metric.
    #[serde(skip)]
    pub resolve_time: std::time::Duration,
    /// Signature checks of this pass by result (`verified`, `cached`, `unsigned`, `refused`,
    /// `error`), for `tagpin_signature_checks_total`.
    #[serde(skip)]
    pub signature_checks: crate::signature::fetch::CheckCounts,
    /// Minimum age checks of this pass by result (`eligible`, `held`) and where the age was
    /// read (`created`, `annotation`, `first_seen`), for `tagpin_minimum_age_checks_total`.
    #[serde(skip)]
    pub age_checks: crate::age::CheckCounts,
    /// Provenance checks of this pass by result (`verified`, `cached`, `missing`, `refused`,
    /// `error`), for `tagpin_provenance_checks_total`.
    #[serde(skip)]
    pub provenance_checks: crate::provenance::fetch::CheckCounts,
    /// How the forge names the change requests above, for text (JSON keeps its numbers).
    #[serde(skip)]
    pub noun: ChangeRequestNoun,
}

impl SyncReport {
    pub fn has_failures(&self) -> bool {
        !self.failures.is_empty()
    }
}

/// Options of one pass.
#[derive(Debug, Clone, Copy, Default)]
pub struct SyncOptions {
    /// Plan and print; commit, push and call the forge's write APIs never.
    pub dry_run: bool,
}

/// Everything a pass needs, built once from the configuration.
pub struct Syncer<'a> {
    pub config: &'a Config,
    pub registry: &'a Client,
    pub forge: Option<&'a ForgeClient>,
    pub mirror: Mirror,
    filter: FileFilter,
    selection: ImageSelection,
    policies: Policies,
    signatures: crate::signature::Signatures,
    /// `images.provenance`: a digest of an image an entry matches is pinned only with
    /// accepted build provenance.
    provenance: crate::provenance::ProvenanceRules,
    /// `images.minimum_age`, and where first sightings are kept (beside the mirror).
    ages: crate::age::MinimumAges,
    first_seen: crate::age::seen::FirstSeen,
    /// The time a pass decides ages at.
    clock: crate::clock::Clock,
    /// Registry answers shared with other repositories' passes (`tagpin operator`).
    shared: Option<&'a shared::SharedAnswers>,
}

impl<'a> Syncer<'a> {
    pub fn new(
        config: &'a Config,
        registry: &'a Client,
        forge: Option<&'a ForgeClient>,
        cache_dir: &Path,
    ) -> Result<Syncer<'a>, SyncError> {
        let credentials = git_credentials(&config.repository.auth)?;
        let signer = commit_signer(&config.author)?;
        Syncer::with_credentials(config, registry, forge, cache_dir, credentials, signer)
    }

    /// Like [`Syncer::new`], with the Git credentials and the commit signer already read
    /// (from a Secret, by the operator) rather than from the environment and files the
    /// configuration names.
    pub fn with_credentials(
        config: &'a Config,
        registry: &'a Client,
        forge: Option<&'a ForgeClient>,
        cache_dir: &Path,
        credentials: Credentials,
        signer: Option<Arc<Signer>>,
    ) -> Result<Syncer<'a>, SyncError> {
        let mut mirror = Mirror::open(cache_dir, &config.repository.url, credentials)?;
        if let Some(signer) = signer {
            mirror.sign_with(signer);
        }
        let filter = FileFilter::with_default_include(&config.include_globs(), &config.exclude)?;
        let selection = ImageSelection::for_config(config)?;
        let policies = Policies::compile(&config.images.policies).map_err(SyncError::Policy)?;
        let gates = crate::pass::ImageGates::compile(config)?;
        if config.mode == WriteMode::PullRequest && forge.is_none() {
            return Err(SyncError::NoForge);
        }
        Ok(Syncer {
            config,
            registry,
            forge,
            mirror,
            filter,
            selection,
            policies,
            signatures: gates.signatures,
            provenance: gates.provenance,
            ages: gates.ages,
            first_seen: crate::age::seen::FirstSeen::in_dir(cache_dir),
            clock: crate::clock::system(),
            shared: None,
        })
    }

    /// The same syncer, reading the time minimum ages are decided at from `clock`.
    pub fn with_clock(self, clock: crate::clock::Clock) -> Syncer<'a> {
        Syncer { clock, ..self }
    }

    /// Resolves through `answers`, shared with other passes, instead of asking the registry
    /// for every reference this pass has not resolved yet.
    pub fn sharing(mut self, answers: &'a shared::SharedAnswers) -> Syncer<'a> {
        self.shared = Some(answers);
        self
    }

    /// Runs one pass.
    pub async fn run(&self, options: SyncOptions) -> Result<SyncReport, SyncError> {
        self.run_with(options, &mut BTreeMap::new()).await
    }

    /// Runs one pass, reusing the registry answers in `resolutions` and adding the ones it had
    /// to ask for. The controller keeps answers between a scheduled pass and the webhook passes
    /// after it, dropping only the images a webhook names, so a push re-resolves one image
    /// instead of all of them. A write that loses a race plans again on the new tip, and a
    /// damaged mirror is cloned again and the pass goes on ([`retry_after`]).
    pub async fn run_with(
        &self,
        options: SyncOptions,
        resolutions: &mut BTreeMap<ResolveKey, ResolveResult>,
    ) -> Result<SyncReport, SyncError> {
        let mut report = SyncReport {
            target: self.config.repository.branch.clone(),
            noun: ChangeRequestNoun::of(self.config.forge.as_ref()),
            ..SyncReport::default()
        };
        let mut follow = Follow {
            policies: self.policies.clone(),
            tags: TagLists::new(),
            held: Default::default(),
            signatures: crate::signature::Verdicts::new(self.signatures.clone()),
            provenance: crate::provenance::Verdicts::new(self.provenance.clone()),
            ages: crate::age::Ages::new(self.ages.clone(), (self.clock)()),
        };
        let (mut attempt, mut repaired) = (1, false);
        loop {
            match self
                .attempt(options, attempt, &mut follow, resolutions, &mut report)
                .await
            {
                Ok(()) => break,
                Err(error) => match retry_after(attempt, repaired, error)? {
                    Retry::Replan => attempt += 1,
                    Retry::Repair(found) => {
                        repaired = true;
                        let prefix = &self.config.pull_request.branch_prefix;
                        let target = &self.config.repository.branch;
                        off_runtime(|| self.mirror.repair(found, target, prefix))?;
                    }
                },
            }
        }
        report.failures.sort();
        report.failures.dedup();
        Ok(report)
    }

    /// One attempt at the pass: fetch, plan on the tip, write each group. Fills `report`
    /// (keeping the time spent resolving in earlier attempts); a lost race is returned as the
    /// error, for [`retry_after`].
    async fn attempt(
        &self,
        options: SyncOptions,
        attempt: u32,
        follow: &mut Follow,
        resolutions: &mut BTreeMap<ResolveKey, ResolveResult>,
        report: &mut SyncReport,
    ) -> Result<(), SyncError> {
        let target = &self.config.repository.branch;
        let (tip, scanned) = off_runtime(|| {
            self.mirror
                .fetch(target, &self.config.pull_request.branch_prefix)?;
            let tip = self.mirror.require_tip(target)?;
            Ok::<_, SyncError>((tip, self.scan_tip(tip)?))
        })?;
        // Digests a revert moved fields away from are not pinned again (read from Git).
        let helm = self.config.helm.options()?;
        follow.held = off_runtime(|| crate::revert::holds_at(&self.mirror, tip, &helm))?;
        let started = std::time::Instant::now();
        self.list_missing_tags(&scanned.files, follow).await;
        self.resolve_missing(&scanned.files, follow, resolutions)
            .await;
        self.gate_digests(&scanned.files, resolutions, follow, report)
            .await;
        report.resolve_time += started.elapsed();
        let grouped = decision::group(
            &scanned.files,
            resolutions,
            follow,
            self.config.pull_request.grouping,
            self.config.mode,
        );
        report.failures = scanned
            .errors
            .iter()
            .map(ToString::to_string)
            .chain(grouped.whole.problems.iter().map(ToString::to_string))
            .collect();
        report.skipped = scanned.skipped;
        report.held = grouped.whole.held.clone();
        report.groups.clear();
        for (group, plan) in grouped.groups {
            let diff: String = plan.files.iter().map(|f| f.diff.as_str()).collect();
            let outcome = match self.write_group(&group, &plan, tip, options, attempt).await {
                Ok(outcome) => outcome,
                // The branch moved: this attempt's plan is void, the caller plans again.
                Err(e) if e.is_lost_race() => return Err(e),
                // In pull-request mode each group is its own proposal: one that fails is
                // reported, and the next is still proposed.
                Err(e) if self.config.mode == WriteMode::PullRequest && !e.is_pass_wide() => {
                    let branch = decision::pr_branch(
                        &self.config.pull_request.branch_prefix,
                        target,
                        &group,
                    );
                    let cr = ChangeRequestNoun::of(self.config.forge.as_ref()).word();
                    let what = match &group {
                        Group::All => format!("{cr} from {branch}"),
                        Group::Image(image) => {
                            format!("image {image}: {cr} from {branch}")
                        }
                    };
                    report.failures.push(format!("{what}: {e}"));
                    Outcome::Failed {
                        branch,
                        reason: e.to_string(),
                    }
                }
                Err(e) => return Err(e),
            };
            report.groups.push(GroupReport {
                group: group.to_string(),
                outcome,
                changes: plan.changes.clone(),
                diff,
            });
        }
        Ok(())
    }

    /// Reads and scans the manifests at `tip` (paths relative to the repository root).
    fn scan_tip(&self, tip: git2::Oid) -> Result<Scanned, SyncError> {
        let gathered = self
            .mirror
            .read_files(tip, &self.config.paths, &self.filter)?;
        Ok(pipeline::scan(gathered, &self.selection))
    }

    /// Resolves the references not resolved yet in this pass (a re-plan after a race only asks
    /// for what the new tip added).
    async fn resolve_missing(
        &self,
        files: &[ScannedFile],
        follow: &Follow,
        resolutions: &mut BTreeMap<ResolveKey, ResolveResult>,
    ) {
        let wanted: Vec<Reference> = plan::references_to_resolve(files, follow)
            .into_iter()
            .filter(|r| !resolutions.contains_key(&ResolveKey::of(r)))
            .collect();
        match self.shared {
            Some(shared) => resolutions.extend(shared.resolve_all(self.registry, &wanted).await),
            None => resolutions.extend(self.registry.resolve_all(wanted.iter()).await),
        }
    }

    /// Checks, before planning, every digest this pass would pin that a gate asks about:
    /// signatures (`images.signatures`), build provenance (`images.provenance`) and age
    /// (`images.minimum_age`), so the plan refuses what is not signed or not built where it
    /// must be, and holds what is too young. Counted in `report`.
    async fn gate_digests(
        &self,
        files: &[ScannedFile],
        resolutions: &BTreeMap<ResolveKey, ResolveResult>,
        follow: &mut Follow,
        report: &mut SyncReport,
    ) {
        let budget = std::time::Duration::from_secs(self.config.registries.budget_seconds);
        // Every digest this pass would pin for an image that must be signed is checked
        // before planning, so the plan refuses what is not signed.
        let unchecked = plan::signatures_to_check(files, resolutions, follow);
        if !unchecked.is_empty() {
            let counts = crate::signature::fetch::check_all(
                self.registry,
                &mut follow.signatures,
                unchecked,
                budget,
            )
            .await;
            for (label, count) in counts {
                *report.signature_checks.entry(label).or_insert(0) += count;
            }
        }
        // Then its build provenance, where an entry asks for it.
        let unattested = plan::provenance_to_check(files, resolutions, follow);
        if !unattested.is_empty() {
            let counts = crate::provenance::fetch::check_all(
                self.registry,
                &mut follow.provenance,
                unattested,
                budget,
            )
            .await;
            for (label, count) in counts {
                *report.provenance_checks.entry(label).or_insert(0) += count;
            }
        }
        // And every digest of an image that must be old enough is dated, so the plan holds
        // the young ones where they are.
        let undated = plan::ages_to_check(files, resolutions, follow);
        if !undated.is_empty() {
            let counts = crate::age::fetch::check_all(
                self.registry,
                &mut follow.ages,
                undated,
                &self.first_seen,
                budget,
            )
            .await;
            for (labels, count) in counts {
                *report.age_checks.entry(labels).or_insert(0) += count;
            }
        }
    }

    /// Lists the tags of each repository whose policy chooses among tags and that this pass
    /// has not listed yet: once per repository per pass (once per interval for all passes
    /// sharing answers), concurrently, each within the registry budget so one slow registry
    /// delays only its own images.
    async fn list_missing_tags(&self, files: &[ScannedFile], follow: &mut Follow) {
        let references: Vec<Reference> = files
            .iter()
            .flat_map(|f| f.fields.iter())
            .filter_map(|field| Reference::parse(&field.value).ok())
            .collect();
        let wanted: Vec<_> = Follow::repositories_to_list(&follow.policies, &references)
            .into_iter()
            .filter(|(key, _)| !follow.tags.contains_key(key))
            .collect();
        let budget = std::time::Duration::from_secs(self.config.registries.budget_seconds);
        let list = |reference: &Reference| {
            let reference = reference.clone();
            async move {
                match tokio::time::timeout(
                    budget,
                    self.registry.list_tags(&reference, TAG_PAGE_SIZE),
                )
                .await
                {
                    Ok(result) => result,
                    Err(_) => Err(RegistryError::Unreachable {
                        image: reference.canonical_name(),
                        host: reference.api_host().to_string(),
                        detail: format!(
                            "no tag list within {}s; the pass went on without it",
                            budget.as_secs()
                        ),
                    }),
                }
            }
        };
        let lists = match self.shared {
            Some(shared) => shared.tag_lists(&wanted, list).await,
            None => {
                let lists = futures::future::join_all(wanted.iter().map(|(_, r)| list(r))).await;
                wanted
                    .iter()
                    .map(|(key, _)| key.clone())
                    .zip(lists)
                    .collect()
            }
        };
        follow.tags.extend(lists);
    }

    async fn write_group(
        &self,
        group: &Group,
        plan: &Plan,
        tip: git2::Oid,
        options: SyncOptions,
        attempt: u32,
    ) -> Result<Outcome, SyncError> {
        let target = &self.config.repository.branch;
        let block = PlanBlock::new(target, &plan.changes);
        let branch = match self.config.mode {
            WriteMode::Commit => target.clone(),
            WriteMode::PullRequest => {
                decision::pr_branch(&self.config.pull_request.branch_prefix, target, group)
            }
        };
        if plan.files.is_empty() {
            return Ok(Outcome::NothingToDo);
        }
        let title = message::fill_template(&self.config.pull_request.title, &block);
        if options.dry_run {
            return Ok(Outcome::DryRun {
                branch,
                title,
                body: body::render(&block) + &body::held_table(&plan.held),
            });
        }
        let updates = writer::updates(&plan.files);
        let message = message::commit_message(&self.config.commit_message, &block);
        let change = Planned {
            tip,
            updates: &updates,
            message: &message,
        };
        match self.config.mode {
            WriteMode::Commit => Ok(writer::commit(
                &self.mirror,
                &self.config.author,
                self.forge,
                target,
                &change,
                attempt,
            )
            .await?),
            WriteMode::PullRequest => {
                let forge = self.forge.ok_or(SyncError::NoForge)?;
                let body = body::render(&block) + &body::held_table(&plan.held);
                let proposal = Proposal {
                    branch: &branch,
                    target,
                    block: &block,
                    title: &title,
                    body: &body,
                    refresh_body: false,
                    labels: &self.config.pull_request.labels,
                    change,
                };
                Ok(writer::propose(&self.mirror, forge, &self.config.author, &proposal).await?)
            }
        }
    }
}

/// Reads and tries `author.signing`'s key (from its file or environment variable, with its
/// passphrase), so that a key that cannot sign is a configuration error before anything is
/// written, naming the field at fault. `None` without `author.signing`.
pub fn commit_signer(author: &crate::config::Author) -> Result<Option<Arc<Signer>>, SyncError> {
    let Some(signing) = &author.signing else {
        return Ok(None);
    };
    let secret = |field: &'static str, message: String| SyncError::Secret { field, message };
    let key = match &signing.key {
        crate::config::SigningKey::File(path) => std::fs::read(path).map_err(|e| {
            secret(
                signing.key.field(),
                format!("cannot read {}: {e}", path.display()),
            )
        })?,
        crate::config::SigningKey::Env(name) => crate::config::read_env(name)
            .map_err(|e| secret(signing.key.field(), e.to_string()))?
            .into_bytes(),
    };
    let passphrase = match &signing.passphrase_env {
        Some(env) => Some(
            crate::config::read_env(env)
                .map_err(|e| secret("author.signing.passphrase_env", e.to_string()))?,
        ),
        None => None,
    };
    signer_from(signing, &key, passphrase.as_deref())
        .map(|signer| Some(Arc::new(signer)))
        .map_err(|(field, message)| secret(field, message))
}

/// `author.signing`'s key from its text, tried; an error names the field at fault (the
/// passphrase's for a wrong one, else the key's) with why.
pub fn signer_from(
    signing: &crate::config::Signing,
    key: &[u8],
    passphrase: Option<&str>,
) -> Result<Signer, (&'static str, String)> {
    let read = match signing.format {
        crate::config::SigningFormat::Ssh => Signer::ssh(key, passphrase),
        crate::config::SigningFormat::Openpgp => Signer::openpgp(key, passphrase),
    };
    read.map_err(|e| {
        let field = match e {
            SigningError::WrongPassphrase | SigningError::NeedsPassphrase => {
                "author.signing.passphrase_env"
            }
            _ => signing.key.field(),
        };
        (field, e.to_string())
    })
}

/// Reads the Git secrets named by the configuration (environment variables, key files).
pub fn git_credentials(auth: &GitAuth) -> Result<Credentials, SyncError> {
    Ok(match auth {
        GitAuth::None => Credentials::None,
        GitAuth::Token { env, username } => Credentials::Token {
            username: username.clone(),
            token: crate::config::read_env(env).map_err(|e| SyncError::Secret {
                field: "repository.auth.token_env",
                message: e.to_string(),
            })?,
        },
        GitAuth::SshKey {
            key_file,
            passphrase_env,
        } => {
            if !key_file.is_file() {
                return Err(SyncError::Secret {
                    field: "repository.auth.ssh_key_file",
                    message: format!("{} is not a readable file", key_file.display()),
                });
            }
            Credentials::SshKey {
                key_file: key_file.clone(),
                passphrase: match passphrase_env {
                    Some(env) => {
                        Some(crate::config::read_env(env).map_err(|e| SyncError::Secret {
                            field: "repository.auth.passphrase_env",
                            message: e.to_string(),
                        })?)
                    }
                    None => None,
                },
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lost_race() -> SyncError {
        SyncError::Git(GitError::NonFastForward {
            url: "https://git.example.com/gitops.git".into(),
            branch: "main".into(),
        })
    }

    #[test]
    fn a_lost_race_is_tried_again_while_attempts_remain() {
        for attempt in 1..MAX_PUSH_ATTEMPTS {
            assert!(
                matches!(retry_after(attempt, false, lost_race()), Ok(Retry::Replan)),
                "attempt {attempt}"
            );
        }
    }

    #[test]
    fn a_race_lost_on_the_last_attempt_gives_up_naming_the_remote_and_branch() {
        let error = retry_after(MAX_PUSH_ATTEMPTS, false, lost_race()).unwrap_err();
        assert!(
            matches!(
                &error,
                SyncError::TooManyRaces { url, branch, attempts }
                    if url == "https://git.example.com/gitops.git"
                        && branch == "main"
                        && *attempts == MAX_PUSH_ATTEMPTS
            ),
            "{error:?}"
        );
        assert_eq!(
            error.to_string(),
            "https://git.example.com/gitops.git: main kept moving; gave up after 5 attempts to push on top of it"
        );
    }

    #[test]
    fn any_other_error_ends_the_pass_as_it_is_on_the_first_attempt() {
        let rejected = || {
            SyncError::Git(GitError::Rejected {
                url: "https://git.example.com/gitops.git".into(),
                branch: "main".into(),
                reason: "pre-receive hook declined".into(),
            })
        };
        let error = retry_after(1, false, rejected()).unwrap_err();
        assert_eq!(error.to_string(), rejected().to_string());
        assert!(matches!(
            retry_after(1, false, SyncError::NoForge),
            Err(SyncError::NoForge)
        ));
    }

    fn damaged() -> SyncError {
        SyncError::Git(GitError::Damaged {
            path: "/var/cache/tagpin/mirror-0123456789abcdef.git".into(),
            url: "https://git.example.com/gitops.git".into(),
            damage: crate::git::Damage::MissingObject,
            message: "apps/web.yaml: object not found - no match for id (78a3ceb4)".into(),
        })
    }

    #[test]
    fn a_damaged_mirror_is_repaired_once_per_pass_then_blamed_on_the_remote() {
        for attempt in [1, MAX_PUSH_ATTEMPTS] {
            let repair = retry_after(attempt, false, damaged());
            assert!(
                matches!(&repair, Ok(Retry::Repair(e)) if e.damage().is_some()),
                "{repair:?}"
            );
        }
        let error = retry_after(1, true, damaged()).unwrap_err();
        assert_eq!(
            error.to_string(),
            "https://git.example.com/gitops.git: the repository cannot be read whole even in a \
             fresh clone (missing object: apps/web.yaml: object not found - no match for id \
             (78a3ceb4)); the remote itself is damaged or incomplete"
        );
        assert!(error.is_pass_wide() && damaged().is_pass_wide());
    }

    #[test]
    fn only_errors_every_group_would_meet_end_the_pass() {
        let call = |status| {
            SyncError::Forge(ForgeError::Call {
                forge: "GitHub",
                host: "api.github.com".into(),
                repo: "acme/gitops".into(),
                what: "open a pull request".into(),
                detail: String::new(),
                status,
            })
        };
        assert!(call(Some(401)).is_pass_wide());
        assert!(!call(Some(422)).is_pass_wide());
        assert!(!call(Some(502)).is_pass_wide());
        assert!(!call(None).is_pass_wide());
        let rejected = SyncError::Git(GitError::Rejected {
            url: "https://git.example.com/a.git".into(),
            branch: "tagpin/main/web".into(),
            reason: "pre-receive hook declined".into(),
        });
        assert!(!rejected.is_pass_wide());
        let auth = SyncError::Git(GitError::Auth {
            url: "https://git.example.com/a.git".into(),
            message: "401".into(),
        });
        assert!(auth.is_pass_wide());
    }
}
