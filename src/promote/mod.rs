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
//! Like `sync`, nothing is remembered between passes: the pull request, its plan block and the
//! statuses on GitHub say what is in flight, so a restart repeats nothing.

pub mod carry;
pub mod evidence;
pub mod gate;

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::config::{Config, Stage, WriteMode};
use crate::forge::{body, ForgeError, GitHub};
use crate::git::{off_runtime, Expect, GitError, Mirror};
use crate::manifest::{FileFilter, ManifestError};
use crate::pipeline::{self, ImageSelection, Scanned};
use crate::plan::Change;
use crate::proposal::PlanBlock;
use crate::registry::Client;
use crate::sync::{self, Outcome, Proposal, SyncError, MAX_PUSH_ATTEMPTS};
use crate::verify::live::{Cluster, LiveError};
use crate::verify::verdict::State;
use crate::verify::{self, Families, Source, VerifyError};
use carry::{Skip, SourcePins};
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
        error: Box<LiveError>,
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
pub fn branch_for(config: &Config, stage: &str) -> String {
    format!("{}promote/{stage}", config.pull_request.branch_prefix)
}

/// The stage a tagpin branch promotes into, if it is a promotion branch.
pub fn stage_of_branch<'c>(config: &'c Config, branch: &str) -> Option<&'c Stage> {
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
pub fn verification_source(pr: &crate::forge::PullRequestInfo) -> Source {
    match (&pr.merge_commit_sha, pr.merged) {
        (Some(sha), true) => Source::Commit(sha.clone()),
        _ => Source::PullRequest(pr.number),
    }
}

/// The configuration as one stage sees it: its paths instead of the first stage's. The
/// verifier and scanner then work on that stage unchanged.
pub fn stage_config(config: &Config, stage: &Stage) -> Config {
    let mut config = config.clone();
    config.paths = stage.paths.clone();
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
    pub changes: Vec<Change>,
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

/// Everything a promotion pass needs.
pub struct Promoter<'a> {
    pub config: &'a Config,
    pub registry: &'a Client,
    pub forge: Option<&'a GitHub>,
    pub mirror: &'a Mirror,
    filter: FileFilter,
    selection: ImageSelection,
    families: tokio::sync::Mutex<Families>,
}

impl<'a> Promoter<'a> {
    pub fn new(
        config: &'a Config,
        registry: &'a Client,
        forge: Option<&'a GitHub>,
        mirror: &'a Mirror,
    ) -> Result<Promoter<'a>, PromoteError> {
        Ok(Promoter {
            config,
            registry,
            forge,
            mirror,
            filter: FileFilter::with_default_include(&config.include, &config.exclude)?,
            selection: ImageSelection::compile(&config.images)?,
            families: tokio::sync::Mutex::default(),
        })
    }

    /// The scanned manifests of `stage` at `commit`, through the pipeline `sync` uses.
    fn scan_stage(&self, commit: git2::Oid, stage: &Stage) -> Result<Scanned, GitError> {
        let gathered = self.mirror.read_files(commit, &stage.paths, &self.filter)?;
        Ok(pipeline::scan(gathered, &self.selection))
    }

    /// One promotion pass into `to`; `cluster` is the source stage's. A push that loses a race
    /// starts the pass over on the new tip, as `sync` does.
    pub async fn run(
        &self,
        to: &str,
        cluster: &Cluster,
        options: PromoteOptions,
    ) -> Result<PromoteReport, PromoteError> {
        let (source, target) = route(self.config, to)?;
        let mut attempt = 1;
        loop {
            match self.pass(source, target, cluster, options).await {
                Err(PromoteError::Git(GitError::NonFastForward { .. }))
                | Err(PromoteError::Sync(SyncError::Git(GitError::NonFastForward { .. })))
                    if attempt < MAX_PUSH_ATTEMPTS =>
                {
                    attempt += 1;
                    tracing::info!(stage = %target.name, attempt, "the branch moved during the promotion; starting over");
                }
                other => return other,
            }
        }
    }

    async fn pass(
        &self,
        source: &Stage,
        target: &Stage,
        cluster: &Cluster,
        options: PromoteOptions,
    ) -> Result<PromoteReport, PromoteError> {
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

        // 1. The source stage's verdict, at this very commit (just fetched), on its own cluster.
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

        // 2. The gate.
        let pins = SourcePins::from_files(&source_scan.files);
        let fingerprint = pins.fingerprint();
        let now = unix_now();
        let since = match (check.state, self.forge) {
            (State::Converged, Some(forge)) => Some(
                self.clock(forge, tip, source, &fingerprint)
                    .await?
                    .unwrap_or(now),
            ),
            (State::Converged, None) => Some(now),
            _ => None,
        };
        let gate = gate::decide(check.state, &check.summary, since, target.soak, now);
        if let (false, Some(forge)) = (options.dry_run, self.forge) {
            let (state, description) =
                gate::stage_status(check.state, &check.summary, since, pins.len(), &fingerprint);
            forge
                .set_status_once(
                    &tip.to_string(),
                    state,
                    &gate::stage_context(&source.name),
                    &description,
                )
                .await;
        }

        // 3. What moves.
        let (plan, skipped) = carry::plan(&target_scan.files, &pins);
        let mut failures: Vec<String> = source_scan
            .errors
            .iter()
            .chain(&target_scan.errors)
            .map(ToString::to_string)
            .chain(plan.problems.iter().map(ToString::to_string))
            .collect();
        failures.sort();
        failures.dedup();

        // 4. The write.
        let evidence = Evidence {
            source: &source.name,
            target: &target.name,
            branch,
            source_commit: &tip.to_string(),
            soak: target.soak,
            gate: &gate,
            check: &check,
            expectations: &expectations,
            moved_on: false,
        };
        let writable = gate.is_open() && failures.is_empty() && !plan.files.is_empty();
        let block = PlanBlock::new(branch, &plan.changes);
        let updates: Vec<(PathBuf, Vec<u8>)> = plan
            .files
            .iter()
            .map(|f| (f.path.clone(), f.updated.clone()))
            .collect();
        let outcome = match target.mode {
            WriteMode::Commit if writable && options.dry_run => Some(Outcome::DryRun {
                branch: branch.clone(),
                title: evidence::title(&block, &source.name, &target.name),
                body: evidence::commit_message(&evidence, &block),
            }),
            WriteMode::Commit if writable => {
                let message = evidence::commit_message(&evidence, &block);
                let commit = off_runtime(|| {
                    let commit = self
                        .mirror
                        .commit(tip, &updates, &config.author, &message)?;
                    self.mirror
                        .push(commit, branch, Expect::FastForwardFrom(tip))?;
                    Ok::<_, GitError>(commit)
                })?;
                Some(Outcome::Committed {
                    branch: branch.clone(),
                    commit: commit.to_string(),
                    attempts: 1,
                })
            }
            WriteMode::Commit => nothing_to_do(&gate, &plan.files, &failures),
            WriteMode::PullRequest => {
                let forge = self.forge.ok_or(SyncError::NoForge)?;
                let pr_branch = branch_for(config, &target.name);
                if writable {
                    let title = evidence::title(&block, &source.name, &target.name);
                    let body = evidence::render(&evidence, &block);
                    if options.dry_run {
                        Some(Outcome::DryRun {
                            branch: pr_branch,
                            title,
                            body,
                        })
                    } else {
                        let message = evidence::commit_message(&evidence, &block);
                        let proposal = Proposal {
                            branch: &pr_branch,
                            target: branch,
                            block: &block,
                            title: &title,
                            body: &body,
                            refresh_body: true,
                            labels: &config.pull_request.labels,
                            tip,
                            updates: &updates,
                            message: &message,
                        };
                        let outcome =
                            sync::propose(self.mirror, forge, &config.author, &proposal).await?;
                        // The pull request stands even if its head cannot be read back: the
                        // status is set by the next pass, as any status tagpin fails to set.
                        let head = match pr_number(&outcome) {
                            Some(number) => {
                                match forge.pull_request(number).await {
                                    Ok(pr) => Some(pr.head_sha),
                                    Err(e) => {
                                        tracing::warn!("cannot set the {} status on pull request #{number}: {e}", gate::PROMOTION_CONTEXT);
                                        None
                                    }
                                }
                            }
                            None => None,
                        };
                        if let Some(head) = head {
                            let (state, description) =
                                gate::promotion_status(&gate, &source.name, target.soak, true);
                            forge
                                .set_status_once(
                                    &head,
                                    state,
                                    gate::PROMOTION_CONTEXT,
                                    &description,
                                )
                                .await;
                        }
                        Some(outcome)
                    }
                } else {
                    self.hold_open_pr(forge, &pr_branch, &evidence, &block, &failures, options)
                        .await?
                        .or_else(|| nothing_to_do(&gate, &plan.files, &failures))
                }
            }
        };
        let skipped_text = skipped.iter().map(|s| s.describe(&source.name)).collect();
        Ok(PromoteReport {
            stage: target.name.clone(),
            source: SourceReport {
                stage: source.name.clone(),
                commit: tip.to_string(),
                state: check.state,
                summary: check.summary.clone(),
                converged_since: since.map(gate::rfc3339),
                digests: fingerprint,
            },
            reason: gate.describe(&source.name, target.soak),
            gate,
            outcome,
            changes: plan.changes,
            skipped,
            failures,
            diff: plan.files.iter().map(|f| f.diff.as_str()).collect(),
            skipped_text,
        })
    }

    /// When nothing may be written: an open promotion pull request keeps its digests, but its
    /// body and `tagpin/promotion` status say why the evidence does not hold now (or that it
    /// holds for digests the source no longer runs).
    async fn hold_open_pr(
        &self,
        forge: &GitHub,
        pr_branch: &str,
        evidence: &Evidence<'_>,
        current: &PlanBlock,
        failures: &[String],
        options: PromoteOptions,
    ) -> Result<Option<Outcome>, PromoteError> {
        let prs = forge
            .pull_requests_for(pr_branch, &self.config.repository.branch)
            .await?;
        let Some(pr) = prs.into_iter().find(|p| p.open) else {
            return Ok(None);
        };
        let Some(proposed) = body::parse(&pr.body) else {
            tracing::warn!(
                "pull request #{} on {pr_branch} has no tagpin plan block; left alone",
                pr.number
            );
            return Ok(None);
        };
        let proposes_current = proposed.promises() == current.promises();
        let evidence = Evidence {
            moved_on: !proposes_current && !current.pins.is_empty(),
            ..*evidence
        };
        let body = evidence::render(&evidence, &proposed);
        let edit = pr.body != body;
        if !options.dry_run {
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
                ),
            };
            forge
                .set_status_once(&pr.head_sha, state, gate::PROMOTION_CONTEXT, &description)
                .await;
        }
        let (number, url, branch) = (pr.number, pr.url, pr_branch.to_string());
        Ok(Some(if edit && options.dry_run {
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
    /// (digests changed and changed back between two passes).
    async fn clock(
        &self,
        forge: &GitHub,
        tip: git2::Oid,
        source: &Stage,
        fingerprint: &str,
    ) -> Result<Option<i64>, PromoteError> {
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
            for other in history.iter().filter(|s| s.creator.as_deref() != Some(me)) {
                tracing::warn!(
                    "{context} status on {commit} set by {} is ignored: only tagpin's own ({me}) carry the soak clock",
                    other.creator.as_deref().unwrap_or("an unknown creator")
                );
            }
            if history.iter().any(|s| s.creator.as_deref() == Some(me)) {
                return Ok(gate::converged_since(&history, fingerprint, me));
            }
        }
        Ok(None)
    }
}

/// `NothingToDo` when the gate is open and the target already runs the source's digests.
fn nothing_to_do(
    gate: &Gate,
    files: &[crate::plan::FilePlan],
    failures: &[String],
) -> Option<Outcome> {
    (gate.is_open() && files.is_empty() && failures.is_empty()).then_some(Outcome::NothingToDo)
}

fn pr_number(outcome: &Outcome) -> Option<u64> {
    match outcome {
        Outcome::PullRequestOpened { number, .. }
        | Outcome::PullRequestUpdated { number, .. }
        | Outcome::PullRequestUnchanged { number, .. } => Some(*number),
        _ => None,
    }
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}
