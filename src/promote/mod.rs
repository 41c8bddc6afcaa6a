//! `tagpin promote`: carry the exact digests that converged in one stage to the next, by pull
//! request (or commit), gated on the verifier's proof.
//!
//! One promotion pass into stage N:
//! 1. verify stage N-1 at the branch tip on its own cluster, with every rule `verify` has;
//! 2. read back since when it has been Converged on these digests (the `tagpin/stage/<name>`
//!    status, see [`gate`]) and decide the gate against stage N's `soak`;
//! 3. carry the digests stage N-1 pins into stage N's references to the same repositories
//!    ([`carry`]), byte-exact, without asking the registry;
//! 4. open or update one pull request on `tagpin/promote/<stage>` whose body holds the evidence
//!    and the plan block ([`evidence`]), with the `tagpin/promotion` status; or commit.
//!
//! A pass gathers (steps 1 and 2), decides what to write as a pure
//! function of what it found ([`decision`]), and writes through the writer `sync` uses
//! ([`crate::writer`]): a push that loses a race starts the pass over on the new tip.
//!
//! Like `sync`, nothing is remembered between passes: the pull request, its plan block and the
//! statuses on GitHub say what is in flight, so a restart repeats nothing.

pub mod carry;
pub(crate) mod decision;
pub mod evidence;
pub mod gate;
pub mod round;
pub mod signed;

use std::time::Duration;

use serde::Serialize;

use crate::cluster::{Cluster, ClusterError};
use crate::config::{Config, Stage};
use crate::forge::{ChangeRequestNoun, ForgeClient, ForgeError};
use crate::git::{off_runtime, GitError, Mirror};
use crate::manifest::{FileFilter, ManifestError};
use crate::pipeline::{self, ImageSelection, Scanned};
use crate::plan::{Change, Plan};
use crate::proposal::{body, PlanBlock};
use crate::registry::Client;
use crate::sync::{Outcome, Retry, SyncError};
use crate::verify::judge::check::{Check, Expectations};
use crate::verify::judge::verdict::State;
use crate::verify::{self, Families, Source, VerifyError};
use crate::writer::{self, Planned, Proposal};
use carry::{Skip, SourcePins};
use decision::Decision;
use evidence::Evidence;
pub use gate::Gate;

/// How many commits back, along the branch's first parents, the soak clock is looked for
/// when the tip carries no stage status yet (a pass runs after at most a few new commits).
const CLOCK_DEPTH: usize = 20;

/// Why a promotion pass could not run at all. Each names the stage, file, host or object.
#[derive(Debug, thiserror::Error)]
pub enum PromoteError {
    #[error("the configuration has no promotion.stages; add them to promote between stages")]
    NoStages,
    #[error("--to {name}: no such stage (stages: {known})")]
    UnknownStage { name: String, known: String },
    #[error("--to {name}: {name} is the first stage; sync pins it from the registry, nothing is promoted into it")]
    FirstStage { name: String },
    #[error("stage {stage}: cannot reach its cluster ({target}): {error}")]
    Cluster {
        stage: String,
        target: String,
        error: Box<ClusterError>,
    },
    #[error(transparent)]
    Git(#[from] GitError),
    #[error(transparent)]
    Forge(#[from] ForgeError),
    #[error(transparent)]
    Verify(#[from] VerifyError),
    #[error(transparent)]
    Sync(#[from] SyncError),
    #[error("configuration: {0}")]
    Filter(#[from] ManifestError),
    #[error(transparent)]
    Gates(#[from] crate::pass::GateRuleError),
    #[error("configuration: promotion.require_signed_by: {path}: {error}")]
    RequiredSigner {
        path: String,
        error: crate::signing::SigningError,
    },
}

impl PromoteError {
    /// A damaged mirror, met reading or writing, as [`crate::sync::retry_after`] takes it;
    /// any other error as it is.
    fn damage_as_sync(self) -> PromoteError {
        match self {
            PromoteError::Git(e) | PromoteError::Verify(VerifyError::Git(e))
                if e.damage().is_some() =>
            {
                PromoteError::Sync(SyncError::Git(e))
            }
            other => other,
        }
    }
}

impl From<crate::writer::WriteError> for PromoteError {
    fn from(error: crate::writer::WriteError) -> PromoteError {
        PromoteError::Sync(error.into())
    }
}

/// The source and target stage of a promotion into `to`.
pub fn route<'c>(config: &'c Config, to: &str) -> Result<(&'c Stage, &'c Stage), PromoteError> {
    let promotion = config.promotion.as_ref().ok_or(PromoteError::NoStages)?;
    let target = promotion
        .stage(to)
        .ok_or_else(|| PromoteError::UnknownStage {
            name: to.to_string(),
            known: promotion
                .stages
                .iter()
                .map(|s| s.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        })?;
    let source = promotion
        .source_of(to)
        .ok_or_else(|| PromoteError::FirstStage {
            name: to.to_string(),
        })?;
    Ok((source, target))
}

/// The branch promotions into `stage` are proposed on: `tagpin/promote/production`.
pub(crate) fn branch_for(config: &Config, stage: &str) -> String {
    format!("{}promote/{stage}", config.pull_request.branch_prefix)
}

/// The stage a tagpin branch promotes into, if it is a promotion branch.
pub(crate) fn stage_of_branch<'c>(config: &'c Config, branch: &str) -> Option<&'c Stage> {
    let promotion = config.promotion.as_ref()?;
    promotion
        .stages
        .iter()
        .skip(1)
        .find(|s| branch_for(config, &s.name) == branch)
}

/// What verifying a promotion pull request means: once merged, the target stage's manifests at
/// the merge commit, rendered as the GitOps tool renders them (kustomize overlays included);
/// before, what its plan block promises.
pub(crate) fn verification_source(pr: &crate::forge::PullRequestInfo) -> Source {
    match (&pr.merge_commit_sha, pr.merged) {
        (Some(sha), true) => Source::Commit(sha.clone()),
        _ => Source::PullRequest(pr.number),
    }
}

/// The configuration as one stage sees it: its paths instead of the first stage's, the mode
/// its promotions are written in, and its own `on_failure` where it sets one. The verifier,
/// the scanner and the revert (written as the promotion was) then work on that stage
/// unchanged.
pub(crate) fn stage_config(config: &Config, stage: &Stage) -> Config {
    let mut config = config.clone();
    config.paths = stage.paths.clone();
    config.mode = stage.mode;
    if let Some(on_failure) = stage.on_failure {
        config.verify.on_failure = on_failure;
    }
    config
}

/// Connects to a stage's cluster, with an error naming the stage and how it is reached; each
/// request gives up after `timeout` without progress.
pub async fn connect(stage: &Stage, timeout: Duration) -> Result<Cluster, PromoteError> {
    Cluster::connect_to(&stage.cluster, timeout)
        .await
        .map_err(|error| PromoteError::Cluster {
            stage: stage.name.clone(),
            target: stage.cluster.to_string(),
            error: Box::new(error),
        })
}

/// Options of one promotion pass.
#[derive(Debug, Clone, Copy, Default)]
pub struct PromoteOptions {
    /// Verify, decide and print; set no status, push nothing, open nothing.
    pub dry_run: bool,
}

/// What the source stage looked like.
#[derive(Debug, Clone, Serialize)]
pub struct SourceReport {
    pub stage: String,
    pub commit: String,
    pub state: State,
    pub summary: String,
    /// RFC 3339, when Converged.
    pub converged_since: Option<String>,
    /// The fingerprint of the digests it pins (the soak clock belongs to these).
    pub digests: String,
}

/// The report of one promotion pass.
#[derive(Debug, Clone, Serialize)]
pub struct PromoteReport {
    /// The stage promoted into.
    pub stage: String,
    pub source: SourceReport,
    pub gate: Gate,
    /// The gate in one sentence.
    pub reason: String,
    /// What was written; `None` when the gate is closed and no pull request is open.
    pub outcome: Option<Outcome>,
    /// How the forge names the change request of `outcome`, for text.
    #[serde(skip)]
    pub noun: ChangeRequestNoun,
    pub changes: Vec<Change>,
    /// Target fields held where they are: a `# tagpin: hold` comment, or a digest a revert
    /// moved away from (carried again once the source stage pins another).
    pub held: Vec<crate::plan::Held>,
    /// Target references left as they are, each with its reason.
    pub skipped: Vec<Skip>,
    /// Manifests of either stage that could not be read, and fields that could not be
    /// planned: with any, nothing is written (never a partial promotion).
    pub failures: Vec<String>,
    #[serde(skip)]
    pub diff: String,
    #[serde(skip)]
    pub skipped_text: Vec<String>,
}

/// What a promotion pass reads before deciding anything ([`Promoter::gather`]).
struct Found {
    /// The branch's tip, where both stages were read and the source stage verified.
    tip: git2::Oid,
    source_scan: Scanned,
    target_scan: Scanned,
    expectations: Expectations,
    check: Check,
    /// The digests the source stage pins, and their fingerprint (the soak clock's key).
    pins: SourcePins,
    fingerprint: String,
    /// Since when the source has been Converged on them (Unix seconds), when it is, and the
    /// restart count its soak counts from.
    soak: Option<gate::Soak>,
    gate: Gate,
}

/// Why a digest is not carried: the first gate that refused it.
#[derive(Debug, thiserror::Error)]
enum GateRefusal {
    #[error(transparent)]
    Signature(crate::signature::Refusal),
    #[error(transparent)]
    Provenance(crate::provenance::Refusal),
}

/// Everything a promotion pass needs.
pub struct Promoter<'a> {
    pub config: &'a Config,
    pub registry: &'a Client,
    pub forge: Option<&'a ForgeClient>,
    pub mirror: &'a Mirror,
    filter: FileFilter,
    selection: ImageSelection,
    /// `images.signatures`: a digest of an image an entry matches is carried only signed.
    signatures: crate::signature::Signatures,
    /// `images.provenance`: a digest of an image an entry matches is carried only with
    /// accepted build provenance.
    provenance: crate::provenance::ProvenanceRules,
    /// `images.minimum_age`: a digest of an image an entry matches is carried only once old
    /// enough (its first sighting kept beside the mirror, as `sync` keeps it).
    ages: crate::age::MinimumAges,
    /// `promotion.require_signed_by`: who must have signed the commit that pinned a source
    /// stage's digests.
    required_signers: signed::RequiredSigners,
    families: tokio::sync::Mutex<Families>,
    clock: Clock,
    /// The soak runs tagpin saw itself, beside the mirror ([`gate::SoakMemory`]).
    sight: gate::SoakMemory,
}

/// The file in a mirror's directory that keeps the soak runs tagpin saw ([`gate::SoakMemory`]);
/// git ignores it, and it goes with the mirror when that is cloned again.
const SOAK_MEMORY: &str = "tagpin-soaks.json";

/// Unix seconds now, for the soak: the system clock, or a test's, so a soak can be checked
/// without waiting it out.
pub use crate::clock::Clock;

impl<'a> Promoter<'a> {
    pub fn new(
        config: &'a Config,
        registry: &'a Client,
        forge: Option<&'a ForgeClient>,
        mirror: &'a Mirror,
    ) -> Result<Promoter<'a>, PromoteError> {
        let gates = crate::pass::ImageGates::compile(config)?;
        Ok(Promoter {
            config,
            registry,
            forge,
            mirror,
            filter: FileFilter::with_default_include(&config.include_globs(), &config.exclude)?,
            signatures: gates.signatures,
            ages: gates.ages,
            provenance: gates.provenance,
            required_signers: match &config.promotion {
                Some(promotion) => {
                    signed::RequiredSigners::compile(&promotion.require_signed_by)
                        .map_err(|(path, error)| PromoteError::RequiredSigner { path, error })?
                }
                None => signed::RequiredSigners::default(),
            },
            selection: ImageSelection::for_config(config)?,
            families: tokio::sync::Mutex::default(),
            clock: crate::clock::system(),
            sight: gate::SoakMemory::at(mirror.dir().join(SOAK_MEMORY)),
        })
    }

    /// The same promoter, reading the time from `clock`.
    pub fn with_clock(self, clock: Clock) -> Promoter<'a> {
        Promoter { clock, ..self }
    }

    /// The scanned manifests of `stage` at `commit`, through the pipeline `sync` uses.
    fn scan_stage(&self, commit: git2::Oid, stage: &Stage) -> Result<Scanned, GitError> {
        let gathered = self.mirror.read_files(commit, &stage.paths, &self.filter)?;
        Ok(pipeline::scan(gathered, &self.selection))
    }

    /// One promotion pass into `to`; `cluster` is the source stage's. A push that loses a race
    /// starts the pass over on the new tip, and a damaged mirror is cloned again once, as in
    /// `sync` ([`crate::sync::retry_after`]).
    pub async fn run(
        &self,
        to: &str,
        cluster: &Cluster,
        options: PromoteOptions,
    ) -> Result<PromoteReport, PromoteError> {
        let (source, target) = route(self.config, to)?;
        let (mut attempt, mut repaired) = (1, false);
        loop {
            let error = match self.pass(source, target, cluster, options, attempt).await {
                Ok(report) => return Ok(report),
                Err(error) => error.damage_as_sync(),
            };
            let PromoteError::Sync(error) = error else {
                return Err(error);
            };
            match crate::sync::retry_after(attempt, repaired, error)? {
                Retry::Replan => attempt += 1,
                Retry::Repair(found) => {
                    repaired = true;
                    let config = self.config;
                    let (branch, prefix) = (
                        &config.repository.branch,
                        &config.pull_request.branch_prefix,
                    );
                    off_runtime(|| self.mirror.repair(found, branch, prefix))?;
                }
            }
        }
    }

    /// Checks the signature and the build provenance of each digest `changes` carry for an
    /// image an `images.signatures` or `images.provenance` entry matches, as `sync` does
    /// before it pins: each verified change notes its signer and provenance, and each refusal
    /// is returned as a failure naming the field, which stops the whole promotion (never a
    /// partial one): a digest staging runs unsigned never reaches production.
    async fn check_signatures(&self, changes: &mut [Change]) -> Vec<String> {
        let mut refused = Vec::new();
        for change in changes.iter_mut() {
            let Ok(image) = crate::reference::Reference::parse(&change.image) else {
                continue;
            };
            if let Err(why) = self.check_gates(change, &image).await {
                refused.push(format!(
                    "{}:{}: {}@{}: not carried: {why}",
                    change.file.display(),
                    change.line,
                    change.image,
                    change.new_digest
                ));
            }
        }
        refused
    }

    /// The signature, then the provenance, of the digest `change` carries, each noted on it
    /// when verified; the first refusal otherwise.
    async fn check_gates(
        &self,
        change: &mut Change,
        image: &crate::reference::Reference,
    ) -> Result<(), GateRefusal> {
        let budget = Duration::from_secs(self.config.registries.budget_seconds);
        let digest = &change.new_digest;
        if let Some((rule, trust)) = self.signatures.for_image(image) {
            let (verdict, _) =
                crate::signature::fetch::check(self.registry, trust, rule, image, digest, budget)
                    .await;
            let signer = verdict.map_err(GateRefusal::Signature)?;
            change.signature = Some(crate::signature::SignatureNote {
                verified: true,
                by: signer.to_string(),
            });
        }
        if let Some(rule) = self.provenance.for_image(image) {
            let (verdict, _) =
                crate::provenance::fetch::check(self.registry, rule, image, digest, budget).await;
            let attested = verdict.map_err(GateRefusal::Provenance)?;
            change.provenance = Some(crate::provenance::ProvenanceNote::of(&attested));
        }
        Ok(())
    }

    /// What `found`'s converged digests would change in the target stage: [`carry::plan`],
    /// where a digest younger than its `images.minimum_age` is held, not carried yet (the
    /// digests the plan would carry are dated first, as `sync` dates what it would pin).
    async fn carry(&self, found: &Found, holds: &crate::policy::Holds) -> (Plan, Vec<Skip>) {
        let files = &found.target_scan.files;
        let planned = carry::plan(files, &found.pins, holds);
        if self.ages.is_empty() {
            return planned;
        }
        let mut ages = crate::age::Ages::new(self.ages.clone(), (self.clock)());
        let undated = planned
            .0
            .changes
            .iter()
            .filter_map(|change| {
                let image = crate::reference::Reference::parse(&change.image).ok()?;
                self.ages.for_image(&image)?;
                let subject = crate::age::Subject::of(&image, &change.new_digest);
                Some((subject, (image, change.new_digest.clone())))
            })
            .collect();
        let budget = Duration::from_secs(self.config.registries.budget_seconds);
        let seen = crate::age::seen::FirstSeen::in_dir(self.mirror.cache_dir());
        crate::age::fetch::check_all(self.registry, &mut ages, undated, &seen, budget).await;
        carry::plan_aged(files, &found.pins, holds, &ages)
    }

    /// `promotion.require_signed_by`: why the source stage's digests may not be carried, when
    /// the commit that pinned them is not signed by a listed key ([`signed`]). `None` without
    /// the setting, or when the source pins nothing.
    fn check_source_signed(
        &self,
        found: &Found,
        source: &Stage,
    ) -> Result<Option<String>, GitError> {
        if self.required_signers.is_empty() || found.pins.is_empty() {
            return Ok(None);
        }
        let pinning = signed::pinning_commit(
            self.mirror,
            found.tip,
            &source.paths,
            &found.fingerprint,
            |commit| {
                let scanned = self.scan_stage(commit, source)?;
                Ok(SourcePins::from_files(&scanned.files).fingerprint())
            },
        )?;
        match pinning {
            Some(commit) => self
                .required_signers
                .refusal(self.mirror, &source.name, commit),
            None => Ok(Some(signed::too_far(&source.name))),
        }
    }

    /// One attempt: gather, decide, write. A lost race is returned as the error.
    async fn pass(
        &self,
        source: &Stage,
        target: &Stage,
        cluster: &Cluster,
        options: PromoteOptions,
        attempt: u32,
    ) -> Result<PromoteReport, PromoteError> {
        let found = self.gather(source, target, cluster).await?;
        self.record_source_state(&found, source, options).await;
        // Digests a revert moved fields away from are not carried again (read from Git).
        let helm = self.config.helm.options()?;
        let holds = off_runtime(|| crate::revert::holds_at(self.mirror, found.tip, &helm))?;
        let (mut plan, skipped) = self.carry(&found, &holds).await;
        let unsigned = self.check_signatures(&mut plan.changes).await;
        let unsigned_source = off_runtime(|| self.check_source_signed(&found, source))?;
        let mut failures: Vec<String> = found
            .source_scan
            .errors
            .iter()
            .chain(&found.target_scan.errors)
            .map(ToString::to_string)
            .chain(plan.problems.iter().map(ToString::to_string))
            .chain(unsigned)
            .chain(unsigned_source)
            .collect();
        failures.sort();
        failures.dedup();
        let decision =
            decision::decide(&found.gate, &plan, &failures, target.mode, options.dry_run);
        let evidence = Evidence {
            source: &source.name,
            target: &target.name,
            branch: &self.config.repository.branch,
            source_commit: &found.tip.to_string(),
            soak: target.soak,
            gate: &found.gate,
            check: &found.check,
            expectations: &found.expectations,
            moved_on: false,
            noun: ChangeRequestNoun::of(self.config.forge.as_ref()),
        };
        let outcome = self
            .write(decision, &evidence, &plan, &failures, found.tip, attempt)
            .await?;
        let skipped_text = skipped.iter().map(|s| s.describe(&source.name)).collect();
        Ok(PromoteReport {
            stage: target.name.clone(),
            source: SourceReport {
                stage: source.name.clone(),
                commit: found.tip.to_string(),
                state: found.check.state,
                summary: found.check.summary,
                converged_since: found.soak.as_ref().map(|s| gate::rfc3339(s.since)),
                digests: found.fingerprint,
            },
            reason: found.gate.describe(&source.name, target.soak),
            gate: found.gate,
            outcome,
            noun: ChangeRequestNoun::of(self.config.forge.as_ref()),
            changes: plan.changes,
            held: plan.held,
            skipped,
            failures,
            diff: plan.files.iter().map(|f| f.diff.as_str()).collect(),
            skipped_text,
        })
    }

    /// Fetches the branch, scans both stages at its tip, verifies the source stage at that
    /// very commit on its own cluster, and reads its soak clock to decide the gate.
    async fn gather(
        &self,
        source: &Stage,
        target: &Stage,
        cluster: &Cluster,
    ) -> Result<Found, PromoteError> {
        let config = self.config;
        let branch = &config.repository.branch;
        let tip = off_runtime(|| {
            self.mirror
                .fetch(branch, &config.pull_request.branch_prefix)?;
            self.mirror.require_tip(branch)
        })?;
        let (source_scan, target_scan) = off_runtime(|| {
            Ok::<_, GitError>((self.scan_stage(tip, source)?, self.scan_stage(tip, target)?))
        })?;
        let source_config = stage_config(config, source);
        let expectations =
            off_runtime(|| verify::expectations_at(tip, &source_config, self.mirror))?;
        let check = {
            let mut families = self.families.lock().await;
            verify::check(&expectations, cluster, self.registry, &mut families).await
        }
        .map_err(|e| match e {
            VerifyError::Live(error) => PromoteError::Cluster {
                stage: source.name.clone(),
                target: source.cluster.to_string(),
                error: Box::new(error),
            },
            e => e.into(),
        })?;
        let pins = SourcePins::from_files(&source_scan.files);
        let fingerprint = pins.fingerprint();
        let now = (self.clock)();
        // Only where a status's time is its poster's is what tagpin saw itself kept and read.
        let seen_since = match self.forge {
            Some(forge) if forge.poster_dates_statuses() => {
                let converged = (check.state == State::Converged).then_some(fingerprint.as_str());
                self.sight.observe(&source.name, converged, now)
            }
            _ => None,
        };
        let soak = match (check.state, self.forge) {
            (State::Converged, forge) => {
                let start = match forge {
                    Some(forge) => {
                        let read = self.clock(forge, tip, source, &fingerprint).await?;
                        self.believed(forge, read, seen_since.unwrap_or(now), source)
                    }
                    None => None,
                };
                let (restarts, restarted) = (check.restarts(), check.restarted());
                Some(gate::soak(
                    start,
                    restarts,
                    &restarted,
                    target.soak_restarts,
                    now,
                ))
            }
            _ => None,
        };
        let gate = gate::decide(check.state, &check.summary, soak.clone(), target.soak, now);
        Ok(Found {
            tip,
            source_scan,
            target_scan,
            expectations,
            check,
            pins,
            fingerprint,
            soak,
            gate,
        })
    }

    /// The soak start read back from `source`'s status, as far as it can be believed: where
    /// the poster of a status sets its time (Bitbucket Data Center), no further back than this
    /// process saw the stage converge itself (`seen_since`), so a saved status posted again
    /// with its old time cannot shorten a soak. A new process starts such a soak over.
    fn believed(
        &self,
        forge: &ForgeClient,
        read: Option<gate::SoakStart>,
        seen_since: i64,
        source: &Stage,
    ) -> Option<gate::SoakStart> {
        if !forge.poster_dates_statuses() {
            return read;
        }
        let believed = gate::within_sight(read, seen_since);
        if let (Some(read), Some(believed)) = (read, believed) {
            if believed.since > read.since {
                tracing::warn!(
                    "{} status says converged since {}; this forge lets a status's poster set its time, so the soak counts from {}, when tagpin saw it converged itself",
                    gate::stage_context(&source.name),
                    gate::rfc3339(read.since),
                    gate::rfc3339(believed.since)
                );
            }
        }
        believed
    }

    /// Sets the source stage's `tagpin/stage/<name>` status on the tip: the record the next
    /// pass reads its soak clock from. Not in a dry run, nor without a forge.
    async fn record_source_state(&self, found: &Found, source: &Stage, options: PromoteOptions) {
        let (false, Some(forge)) = (options.dry_run, self.forge) else {
            return;
        };
        let (state, description) = gate::stage_status(
            found.check.state,
            &found.check.summary,
            found.soak.as_ref(),
            found.pins.len(),
            &found.fingerprint,
        );
        forge
            .set_status_once(
                crate::forge::StatusKey {
                    sha: &found.tip.to_string(),
                    branch: Some(&self.config.repository.branch),
                    context: &gate::stage_context(&source.name),
                },
                state,
                &description,
            )
            .await;
    }

    /// Carries out `decision` through the shared writer; `None` when there is nothing to
    /// report (the gate is closed, or something could not be read, and no pull request is
    /// open).
    async fn write(
        &self,
        decision: Decision,
        evidence: &Evidence<'_>,
        plan: &Plan,
        failures: &[String],
        tip: git2::Oid,
        attempt: u32,
    ) -> Result<Option<Outcome>, PromoteError> {
        let block = PlanBlock::new(evidence.branch, &plan.changes);
        let title = || evidence::title(&block, evidence.source, evidence.target);
        let pr_branch = branch_for(self.config, evidence.target);
        let updates = writer::updates(&plan.files);
        Ok(match decision {
            Decision::Commit { dry_run: true } => Some(Outcome::DryRun {
                branch: evidence.branch.to_string(),
                title: title(),
                body: evidence::commit_message(evidence, &block),
            }),
            Decision::Commit { dry_run: false } => {
                let message = evidence::commit_message(evidence, &block);
                let change = Planned {
                    tip,
                    updates: &updates,
                    message: &message,
                };
                Some(
                    writer::commit(
                        self.mirror,
                        &self.config.author,
                        self.forge,
                        evidence.branch,
                        &change,
                        attempt,
                    )
                    .await?,
                )
            }
            Decision::Propose { dry_run } => {
                let forge = self.forge.ok_or(SyncError::NoForge)?;
                let title = title();
                let body = evidence::render(evidence, &block);
                if dry_run {
                    return Ok(Some(Outcome::DryRun {
                        branch: pr_branch,
                        title,
                        body,
                    }));
                }
                let message = evidence::commit_message(evidence, &block);
                let proposal = Proposal {
                    branch: &pr_branch,
                    target: evidence.branch,
                    block: &block,
                    title: &title,
                    body: &body,
                    refresh_body: true,
                    labels: &self.config.pull_request.labels,
                    change: Planned {
                        tip,
                        updates: &updates,
                        message: &message,
                    },
                };
                let outcome =
                    writer::propose(self.mirror, forge, &self.config.author, &proposal).await?;
                self.mark_proposal(forge, &outcome, evidence).await;
                Some(outcome)
            }
            Decision::HoldOpenPr { settled, dry_run } => {
                let forge = self.forge.ok_or(SyncError::NoForge)?;
                self.hold_open_pr(forge, &pr_branch, evidence, &block, failures, dry_run)
                    .await?
                    .or_else(|| settled.then_some(Outcome::NothingToDo))
            }
            Decision::Nothing { settled } => settled.then_some(Outcome::NothingToDo),
        })
    }

    /// Sets the `tagpin/promotion` status on the head of the pull request just proposed. The
    /// pull request stands even if its head cannot be read back: the status is set by the next
    /// pass, as any status tagpin fails to set.
    async fn mark_proposal(&self, forge: &ForgeClient, outcome: &Outcome, evidence: &Evidence<'_>) {
        let Some(number) = pr_number(outcome) else {
            return;
        };
        let (head, branch) = match forge.pull_request(number).await {
            Ok(pr) => (pr.head_sha, pr.head_ref),
            Err(e) => {
                tracing::warn!(
                    "cannot set the {} status on {}: {e}",
                    gate::PROMOTION_CONTEXT,
                    forge.noun().name(number)
                );
                return;
            }
        };
        let (state, description) = gate::promotion_status(
            evidence.gate,
            evidence.source,
            evidence.soak,
            true,
            evidence.noun,
        );
        forge
            .set_status_once(
                crate::forge::StatusKey {
                    sha: &head,
                    branch: Some(&branch),
                    context: gate::PROMOTION_CONTEXT,
                },
                state,
                &description,
            )
            .await;
    }

    /// When nothing may be written: an open promotion pull request keeps its digests, but its
    /// body and `tagpin/promotion` status say why the evidence does not hold now (or that it
    /// holds for digests the source no longer runs).
    async fn hold_open_pr(
        &self,
        forge: &ForgeClient,
        pr_branch: &str,
        evidence: &Evidence<'_>,
        current: &PlanBlock,
        failures: &[String],
        dry_run: bool,
    ) -> Result<Option<Outcome>, PromoteError> {
        let prs = forge
            .pull_requests_for(pr_branch, &self.config.repository.branch)
            .await?;
        let Some(pr) = prs.into_iter().find(|p| p.open) else {
            return Ok(None);
        };
        let Some(proposed) = body::parse(&pr.body) else {
            tracing::warn!(
                "{} on {pr_branch} has no tagpin plan block; left alone",
                forge.noun().name(pr.number)
            );
            return Ok(None);
        };
        let proposes_current = proposed.promises() == current.promises();
        let evidence = Evidence {
            moved_on: !proposes_current && !current.pins.is_empty(),
            ..*evidence
        };
        let body = evidence::render(&evidence, &proposed);
        let edit = pr.body != forge.stored_body(&body);
        if !dry_run {
            if edit {
                forge
                    .update_pull_request(pr.number, &pr.title, &body)
                    .await?;
            }
            let (state, description) = match failures.first() {
                // The evidence may hold, but this pass could not read every manifest, so it
                // cannot say what the pull request should propose now.
                Some(first) if evidence.gate.is_open() => {
                    gate::blocked_status(failures.len(), first)
                }
                _ => gate::promotion_status(
                    evidence.gate,
                    evidence.source,
                    evidence.soak,
                    proposes_current || current.pins.is_empty(),
                    evidence.noun,
                ),
            };
            forge
                .set_status_once(
                    crate::forge::StatusKey {
                        sha: &pr.head_sha,
                        branch: Some(&pr.head_ref),
                        context: gate::PROMOTION_CONTEXT,
                    },
                    state,
                    &description,
                )
                .await;
        }
        let (number, url, branch) = (pr.number, pr.url, pr_branch.to_string());
        Ok(Some(if edit && dry_run {
            Outcome::DryRun {
                branch,
                title: pr.title,
                body,
            }
        } else {
            Outcome::pull_request(edit, number, url, branch)
        }))
    }

    /// Since when the source stage has been Converged on the digests `fingerprint` names,
    /// read back from the stage statuses of the newest commit (along first parents) where
    /// tagpin set any (see [`gate`]: statuses other logins created are ignored, and logged).
    /// `None`: no unbroken record, the clock starts now. A commit on the way there that
    /// pinned other digests in the source stage breaks the record, even if no pass saw it
    /// (digests changed and changed back between two passes), and so does a commit whose
    /// statuses may hide tagpin's own (not [`crate::review::StatusHistory::complete`]).
    async fn clock(
        &self,
        forge: &ForgeClient,
        tip: git2::Oid,
        source: &Stage,
        fingerprint: &str,
    ) -> Result<Option<gate::SoakStart>, PromoteError> {
        let me = forge.login().await?;
        let commits = off_runtime(|| self.mirror.first_parents(tip, CLOCK_DEPTH))?;
        let context = gate::stage_context(&source.name);
        for commit in commits {
            if commit != tip {
                let there = off_runtime(|| self.scan_stage(commit, source))?;
                if SourcePins::from_files(&there.files).fingerprint() != fingerprint {
                    return Ok(None);
                }
            }
            let history = forge.statuses(&commit.to_string(), &context).await?;
            for other in history
                .statuses
                .iter()
                .filter(|s| s.creator.as_deref() != Some(me))
            {
                tracing::warn!(
                    "{context} status on {commit} set by {} is ignored: only tagpin's own ({me}) carry the soak clock",
                    other.creator.as_deref().unwrap_or("an unknown creator")
                );
            }
            if !history.complete {
                // What tagpin set here may be hidden or replaced (a flood of statuses, or
                // someone else's in tagpin's key): reading on, or further back, could find
                // an older start than the truth. The soak starts again instead.
                tracing::warn!(
                    "{context} statuses on {commit} may hide tagpin's own; the soak clock starts again"
                );
                return Ok(None);
            }
            if history
                .statuses
                .iter()
                .any(|s| s.creator.as_deref() == Some(me))
            {
                return Ok(gate::converged_since(&history.statuses, fingerprint, me));
            }
        }
        Ok(None)
    }
}

fn pr_number(outcome: &Outcome) -> Option<u64> {
    match outcome {
        Outcome::PullRequestOpened { number, .. }
        | Outcome::PullRequestUpdated { number, .. }
        | Outcome::PullRequestUnchanged { number, .. } => Some(*number),
        _ => None,
    }
}
