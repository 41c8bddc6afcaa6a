//! `tagpin sync`: one pass that pins the GitOps repository itself.
//!
//! Fetch the mirror, read the target branch's tip, resolve, plan; then either commit to the
//! target branch (commit mode) or put the change on a tagpin-owned branch and open or update
//! its pull request (pull-request mode). Nothing is remembered between passes: what is in
//! flight is read back from the remote (tagpin's branches) and the forge (its pull requests
//! and their plan blocks), so a restarted process carries on where the last one stopped.
//!
//! Races: a push to the target branch that loses to another writer re-fetches, re-plans on the
//! new tip and tries again (never forcing); a tagpin branch is force-updated only with a lease
//! on the tip tagpin saw, so a person's push to it is never overwritten.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::config::{Config, GitAuth, Grouping, WriteMode};
use crate::forge::body::{self, PlanBlock};
use crate::forge::{ForgeError, GitHub, PullRequestInfo};
use crate::git::{Credentials, Expect, GitError, Mirror, TreeFile};
use crate::manifest::{self, FileFilter};
use crate::plan::{self, Plan, ScannedFile};
use crate::reference::Reference;
use crate::registry::{Client, ResolveKey, ResolveResult};

/// How many times a push that lost a race is retried (fetch, re-plan, push).
pub const MAX_PUSH_ATTEMPTS: u32 = 5;

/// A pass that could not run at all.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error(transparent)]
    Git(#[from] GitError),
    #[error(transparent)]
    Forge(#[from] ForgeError),
    #[error("{0}")]
    Setup(String),
    #[error("{url}: {branch} kept moving; gave up after {attempts} attempts to push on top of it")]
    TooManyRaces {
        url: String,
        branch: String,
        attempts: u32,
    },
}

/// What happened to one group of changes (the whole pass, or one image when grouped).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    NothingToDo,
    Committed {
        branch: String,
        commit: String,
        attempts: u32,
    },
    PullRequestOpened {
        number: u64,
        url: String,
        branch: String,
    },
    PullRequestUpdated {
        number: u64,
        url: String,
        branch: String,
    },
    PullRequestUnchanged {
        number: u64,
        url: String,
        branch: String,
    },
    /// A person closed the pull request for exactly these digests; it is not reopened.
    ClosedByHand {
        number: u64,
        branch: String,
    },
    DryRun {
        branch: String,
        title: String,
        body: String,
    },
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
    /// Images or files that failed; the rest of the pass went on.
    pub failures: Vec<String>,
    pub skipped: Vec<String>,
    /// Time spent asking registries, for the resolution latency metric.
    #[serde(skip)]
    pub resolve_time: std::time::Duration,
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
    pub forge: Option<&'a GitHub>,
    pub mirror: Mirror,
    filter: FileFilter,
    rules: ImageRules,
}

/// The configuration's `images.manage` and `images.ignore`, compiled once.
struct ImageRules {
    /// `None`: manage every image.
    manage: Option<globset::GlobSet>,
    ignore: globset::GlobSet,
}

impl ImageRules {
    fn compile(rules: &crate::config::ImageRules) -> Result<ImageRules, String> {
        let set = |globs: &[String]| {
            let mut builder = globset::GlobSetBuilder::new();
            for g in globs {
                builder.add(globset::Glob::new(g).map_err(|e| format!("images: {g:?}: {e}"))?);
            }
            builder.build().map_err(|e| format!("images: {e}"))
        };
        Ok(ImageRules {
            manage: if rules.manage.is_empty() {
                None
            } else {
                Some(set(&rules.manage)?)
            },
            ignore: set(&rules.ignore)?,
        })
    }
}

impl<'a> Syncer<'a> {
    pub fn new(
        config: &'a Config,
        registry: &'a Client,
        forge: Option<&'a GitHub>,
        cache_dir: &Path,
    ) -> Result<Syncer<'a>, SyncError> {
        let credentials = git_credentials(&config.repository.auth)?;
        let mirror = Mirror::open(cache_dir, &config.repository.url, credentials)?;
        let filter = FileFilter::with_default_include(&config.include, &config.exclude)
            .map_err(|e| SyncError::Setup(e.to_string()))?;
        let rules = ImageRules::compile(&config.images).map_err(SyncError::Setup)?;
        if config.mode == WriteMode::PullRequest && forge.is_none() {
            return Err(SyncError::Setup(
                "pull-request mode needs a forge".to_string(),
            ));
        }
        Ok(Syncer {
            config,
            registry,
            forge,
            mirror,
            filter,
            rules,
        })
    }

    /// Runs one pass.
    pub async fn run(&self, options: SyncOptions) -> Result<SyncReport, SyncError> {
        self.run_with(options, &mut BTreeMap::new()).await
    }

    /// Runs one pass, reusing the registry answers in `resolutions` and adding the ones it had
    /// to ask for. The controller keeps answers between a scheduled pass and the webhook passes
    /// after it, dropping only the images a webhook names, so a push re-resolves one image
    /// instead of all of them.
    pub async fn run_with(
        &self,
        options: SyncOptions,
        resolutions: &mut BTreeMap<ResolveKey, ResolveResult>,
    ) -> Result<SyncReport, SyncError> {
        let target = self.config.repository.branch.clone();
        let mut report = SyncReport {
            target: target.clone(),
            ..SyncReport::default()
        };
        let mut attempt = 0;
        loop {
            attempt += 1;
            self.mirror
                .fetch(&target, &self.config.pull_request.branch_prefix)?;
            let tip = self.mirror.require_tip(&target)?;
            let (files, tree_files) = self.scan_tip(tip, &mut report)?;
            let started = std::time::Instant::now();
            self.resolve_missing(&files, resolutions).await;
            report.resolve_time += started.elapsed();
            let groups = self.groups(&files, resolutions);
            report.groups.clear();
            report.failures.clear();
            let mut raced = false;
            for (group, plan) in groups {
                report
                    .failures
                    .extend(plan.problems.iter().map(|p| p.to_string()));
                let diff: String = plan.files.iter().map(|f| f.diff.as_str()).collect();
                let outcome = match self
                    .write_group(&group, &plan, tip, &tree_files, options, attempt)
                    .await
                {
                    Ok(outcome) => outcome,
                    Err(SyncError::Git(GitError::NonFastForward { .. }))
                        if attempt < MAX_PUSH_ATTEMPTS =>
                    {
                        raced = true;
                        break;
                    }
                    Err(SyncError::Git(GitError::NonFastForward { url, branch })) => {
                        return Err(SyncError::TooManyRaces {
                            url,
                            branch,
                            attempts: attempt,
                        })
                    }
                    Err(e) => return Err(e),
                };
                report.groups.push(GroupReport {
                    group,
                    outcome,
                    changes: plan.changes.clone(),
                    diff,
                });
            }
            if raced {
                tracing::info!(branch = %target, attempt, "the branch moved during the pass; fetching and planning again");
                report.skipped.clear();
                continue;
            }
            report.failures.sort();
            report.failures.dedup();
            return Ok(report);
        }
    }

    /// Reads and scans the manifests at `tip`. Returns the scanned files (paths relative to the
    /// repository root) and the tree entries they came from (to write them back).
    fn scan_tip(
        &self,
        tip: git2::Oid,
        report: &mut SyncReport,
    ) -> Result<(Vec<ScannedFile>, BTreeMap<PathBuf, TreeFile>), SyncError> {
        let read = self
            .mirror
            .read_files(tip, &self.config.paths, &self.filter)?;
        report.skipped = read.skipped.clone();
        let sources: Vec<(&Path, &[u8])> = read
            .files
            .iter()
            .map(|f| (f.path.as_path(), f.bytes.as_slice()))
            .collect();
        let outcomes = manifest::scan_all(&sources);
        let mut scanned = Vec::new();
        let mut by_path = BTreeMap::new();
        for (file, outcome) in read.files.into_iter().zip(outcomes) {
            match outcome {
                Ok(outcome) => {
                    let fields: Vec<_> = outcome
                        .fields
                        .into_iter()
                        .filter(|f| self.manages(&f.value))
                        .collect();
                    if !fields.is_empty() {
                        scanned.push(ScannedFile {
                            path: file.path.clone(),
                            source: file.bytes.clone(),
                            fields,
                        });
                        by_path.insert(file.path.clone(), file);
                    }
                }
                Err(e) => report.failures.push(e.to_string()),
            }
        }
        Ok((scanned, by_path))
    }

    /// Whether the configuration's image rules let tagpin manage this reference. Values that
    /// do not parse stay in, so the planner reports them with file and line.
    fn manages(&self, value: &str) -> bool {
        let Ok(reference) = Reference::parse(value) else {
            return true;
        };
        let name = reference.canonical_name();
        self.rules.manage.as_ref().is_none_or(|m| m.is_match(&name))
            && !self.rules.ignore.is_match(&name)
    }

    /// Resolves the references not resolved yet in this pass (a re-plan after a race only asks
    /// for what the new tip added).
    async fn resolve_missing(
        &self,
        files: &[ScannedFile],
        resolutions: &mut BTreeMap<ResolveKey, ResolveResult>,
    ) {
        let wanted: Vec<Reference> = plan::references_to_resolve(files)
            .into_iter()
            .filter(|r| !resolutions.contains_key(&ResolveKey::of(r)))
            .collect();
        resolutions.extend(self.registry.resolve_all(wanted.iter()).await);
    }

    /// The plan per group: one group for the whole pass, or one per image repository.
    fn groups(
        &self,
        files: &[ScannedFile],
        resolutions: &BTreeMap<ResolveKey, ResolveResult>,
    ) -> Vec<(String, Plan)> {
        match self.config.pull_request.grouping {
            Grouping::Single => vec![("all".to_string(), plan::plan(files, resolutions))],
            Grouping::PerImage if self.config.mode == WriteMode::Commit => {
                vec![("all".to_string(), plan::plan(files, resolutions))]
            }
            Grouping::PerImage => {
                let mut names: Vec<String> = files
                    .iter()
                    .flat_map(|f| f.fields.iter())
                    .filter_map(|f| Reference::parse(&f.value).ok())
                    .map(|r| r.canonical_name())
                    .collect();
                names.sort();
                names.dedup();
                names
                    .into_iter()
                    .map(|name| {
                        let only: Vec<ScannedFile> = files
                            .iter()
                            .map(|f| ScannedFile {
                                path: f.path.clone(),
                                source: f.source.clone(),
                                fields: f
                                    .fields
                                    .iter()
                                    .filter(|field| {
                                        Reference::parse(&field.value)
                                            .map(|r| r.canonical_name())
                                            .ok()
                                            .as_deref()
                                            == Some(name.as_str())
                                    })
                                    .cloned()
                                    .collect(),
                            })
                            .filter(|f| !f.fields.is_empty())
                            .collect();
                        let plan = plan::plan(&only, resolutions);
                        (name, plan)
                    })
                    .collect()
            }
        }
    }

    async fn write_group(
        &self,
        group: &str,
        plan: &Plan,
        tip: git2::Oid,
        tree_files: &BTreeMap<PathBuf, TreeFile>,
        options: SyncOptions,
        attempt: u32,
    ) -> Result<Outcome, SyncError> {
        let target = &self.config.repository.branch;
        let block = PlanBlock::new(target, &plan.changes);
        let branch = match self.config.mode {
            WriteMode::Commit => target.clone(),
            WriteMode::PullRequest => self.pr_branch(group),
        };
        if plan.files.is_empty() {
            return Ok(Outcome::NothingToDo);
        }
        let title = body::fill_template(&self.config.pull_request.title, &block);
        if options.dry_run {
            return Ok(Outcome::DryRun {
                branch,
                title,
                body: body::render(&block),
            });
        }
        let updates: Vec<(TreeFile, Vec<u8>)> = plan
            .files
            .iter()
            .filter_map(|f| {
                tree_files
                    .get(&f.path)
                    .map(|t| (t.clone(), f.updated.clone()))
            })
            .collect();
        let message = body::commit_message(&self.config.commit_message, &block);
        match self.config.mode {
            WriteMode::Commit => {
                let commit = self
                    .mirror
                    .commit(tip, &updates, &self.config.author, &message)?;
                self.mirror
                    .push(commit, target, Expect::FastForwardFrom(tip))?;
                Ok(Outcome::Committed {
                    branch: target.clone(),
                    commit: commit.to_string(),
                    attempts: attempt,
                })
            }
            WriteMode::PullRequest => {
                let forge = self.forge.ok_or_else(|| {
                    SyncError::Setup("pull-request mode needs a forge".to_string())
                })?;
                self.write_pull_request(forge, &branch, &block, &title, tip, &updates, &message)
                    .await
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn write_pull_request(
        &self,
        forge: &GitHub,
        branch: &str,
        block: &PlanBlock,
        title: &str,
        tip: git2::Oid,
        updates: &[(TreeFile, Vec<u8>)],
        message: &str,
    ) -> Result<Outcome, SyncError> {
        let target = &self.config.repository.branch;
        let prs = forge.pull_requests_for(branch, target).await?;
        let open = prs.iter().find(|p| p.open);
        if open.is_none() {
            if let Some(closed) = prs.iter().find(|p| !p.open && !p.merged) {
                let same =
                    body::parse(&closed.body).map(|b| b.promises()) == Some(block.promises());
                if same {
                    return Ok(Outcome::ClosedByHand {
                        number: closed.number,
                        branch: branch.to_string(),
                    });
                }
            }
        }
        // Push only if the branch does not already carry exactly this change on this tip.
        let existing = self.mirror.tip(branch);
        let wanted_tree = self.mirror.tree_with(tip, updates)?;
        let carries = match existing {
            Some(commit) => self.mirror.tree_and_parent(commit)? == (wanted_tree, Some(tip)),
            None => false,
        };
        if !carries {
            let commit = self
                .mirror
                .commit(tip, updates, &self.config.author, message)?;
            match self.mirror.push(commit, branch, Expect::Lease(existing)) {
                Ok(()) => {}
                // Another tagpin moved our branch: start the pass over, as for a lost race.
                Err(GitError::LeaseBroken { url, branch, .. }) => {
                    return Err(SyncError::Git(GitError::NonFastForward { url, branch }))
                }
                Err(e) => return Err(e.into()),
            }
        }
        let body_text = body::render(block);
        let labels = &self.config.pull_request.labels;
        match open {
            Some(pr) => {
                let changed = pr.title != title || body::parse(&pr.body).as_ref() != Some(block);
                if changed {
                    forge
                        .update_pull_request(pr.number, title, &body_text)
                        .await?;
                }
                let missing: Vec<String> = labels
                    .iter()
                    .filter(|l| !pr.labels.contains(l))
                    .cloned()
                    .collect();
                if !missing.is_empty() {
                    forge.add_labels(pr.number, &missing).await?;
                }
                Ok(if changed || !carries {
                    Outcome::PullRequestUpdated {
                        number: pr.number,
                        url: pr.url.clone(),
                        branch: branch.to_string(),
                    }
                } else {
                    Outcome::PullRequestUnchanged {
                        number: pr.number,
                        url: pr.url.clone(),
                        branch: branch.to_string(),
                    }
                })
            }
            None => {
                let pr: PullRequestInfo = forge
                    .open_pull_request(branch, target, title, &body_text)
                    .await?;
                if !labels.is_empty() {
                    forge.add_labels(pr.number, labels).await?;
                }
                Ok(Outcome::PullRequestOpened {
                    number: pr.number,
                    url: pr.url,
                    branch: branch.to_string(),
                })
            }
        }
    }

    /// `tagpin/main`, or `tagpin/main/ghcr.io-acme-web` when grouping per image.
    fn pr_branch(&self, group: &str) -> String {
        let base = format!(
            "{}{}",
            self.config.pull_request.branch_prefix, self.config.repository.branch
        );
        if group == "all" {
            base
        } else {
            let safe: String = group
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_' {
                        c
                    } else {
                        '-'
                    }
                })
                .collect();
            format!("{base}/{safe}")
        }
    }
}

/// Reads the Git secrets named by the configuration (environment variables, key files).
pub fn git_credentials(auth: &GitAuth) -> Result<Credentials, SyncError> {
    Ok(match auth {
        GitAuth::None => Credentials::None,
        GitAuth::Token { env, username } => Credentials::Token {
            username: username.clone(),
            token: crate::config::read_env(env)
                .map_err(|e| SyncError::Setup(format!("repository.auth.token_env: {e}")))?,
        },
        GitAuth::SshKey {
            key_file,
            passphrase_env,
        } => {
            if !key_file.is_file() {
                return Err(SyncError::Setup(format!(
                    "repository.auth.ssh_key_file: {} is not a readable file",
                    key_file.display()
                )));
            }
            Credentials::SshKey {
                key_file: key_file.clone(),
                passphrase: match passphrase_env {
                    Some(env) => Some(crate::config::read_env(env).map_err(SyncError::Setup)?),
                    None => None,
                },
            }
        }
    })
}
