//! One `PinnedRepository`, reconciled: its spec validated as `tagpin.yaml` is, its Secrets
//! read, one sync pass run on its repository, what is in flight verified, and the outcome
//! written to its status and, for what a person should see, as Events.
//!
//! Nothing here stops at another object's problem: every failure becomes this object's
//! status. A failure that needs a person (a broken spec, a missing Secret, refused
//! credentials) stalls the object until it or its Secret changes; any other is retried with
//! backoff, for this object alone.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::ResourceExt;

use super::crd::{
    LastPin, PinnedRepository, PinnedRepositoryStatus, PullRequestRef, VerdictSummary,
};
use super::events::{timestamp, EventType, Events, Publisher};
use super::promotion;
use super::secrets::read_secrets;
use super::status::{self, Outcome, Reason, StatusUpdate};
use super::verdicts;
use crate::cluster::{Cluster, ServiceAccount};
use crate::config::{Config, WriteMode};
use crate::forge::{ChangeRequestNoun, ForgeClient, ForgeError};
use crate::git::{FetchLimits, GitError};
use crate::inflight;
use crate::mutex::lock;
use crate::registry::Client;
use crate::sync::{SyncError, SyncOptions, SyncReport, Syncer};
use crate::verify::judge::verdict::State;
use crate::verify::Families;

/// The field manager of the controller's status writes.
pub const MANAGER: &str = "tagpin-operator";

/// The first retry after a failure; each further one waits twice as long, up to the interval.
pub const FIRST_BACKOFF: Duration = Duration::from_secs(5);

/// Impersonating clusters kept at most; beyond, all are dropped and built again on demand.
const MAX_TENANT_CLUSTERS: usize = 256;

/// What every reconcile shares.
pub struct Context {
    pub kube: kube::Client,
    /// Registry clients, and the registry answers of the current interval, shared by the
    /// objects that reach registries alike.
    pub registries: super::registries::RegistryClients,
    /// Each object's Git mirror lives under `<cache_dir>/<namespace>/<name>`.
    pub cache_dir: PathBuf,
    /// Time between passes of one object.
    pub interval: Duration,
    /// Time between verifications while a verdict is still progressing.
    pub verify_interval: Duration,
    pub events: Publisher,
    /// The cluster the controller runs in, where what it pins is verified; `None`: pins only.
    pub cluster: Option<Cluster>,
    /// Failures in a row, per object, for its backoff.
    pub failures: Mutex<HashMap<String, u32>>,
    /// Each Kubernetes API request's timeout, on a stage's cluster too.
    pub api_timeout: Duration,
    /// The metrics `/metrics` serves (promotions are counted there as `tagpin run` counts them).
    pub shared: Arc<crate::server::Shared>,
    /// Whether a repository may be a local path or file:// URL ([`names_a_remote`]).
    pub allow_local_repositories: bool,
    /// Who runs now: slots shared fairly between namespaces.
    pub slots: super::slots::Slots,
    /// How long one reconcile may take, everything included (`--reconcile-timeout`); also
    /// the ceiling of every timeout a spec sets.
    pub reconcile_timeout: Duration,
    /// A mirror larger than this is refused (`--max-repository-size`).
    pub max_repository_bytes: u64,
    /// The ServiceAccount an object that names none is read as (`--default-service-account`).
    pub default_service_account: Option<String>,
    /// What each object's verification found final (`namespace/name`), as `tagpin run` keeps
    /// it: dropped with the object, lost on restart (one status read per change request
    /// rebuilds it).
    pub memories: Mutex<HashMap<String, inflight::Memory>>,
    /// The operator's cluster impersonating each (namespace, ServiceAccount) objects read as:
    /// built once, its TLS clients and connections kept for every pass of every object that
    /// reads as that account.
    pub tenants: Mutex<BTreeMap<ServiceAccount, Cluster>>,
}

impl Context {
    /// The cluster an object of `namespace` reads as its own (its verification's, and its
    /// `in_cluster` stages'): the operator's, impersonating the ServiceAccount the spec names
    /// or else `--default-service-account`; the operator's own identity when neither is set.
    /// `None` when the operator runs without a cluster.
    fn own_cluster(&self, namespace: &str, config: &Config) -> Result<Option<Cluster>, Outcome> {
        let Some(cluster) = &self.cluster else {
            return Ok(None);
        };
        let name = config
            .service_account_name
            .as_ref()
            .or(self.default_service_account.as_ref());
        let Some(name) = name else {
            return Ok(Some(cluster.clone()));
        };
        let account = ServiceAccount {
            namespace: namespace.to_string(),
            name: name.clone(),
        };
        let mut tenants = lock(&self.tenants);
        if let Some(cached) = tenants.get(&account) {
            return Ok(Some(cached.clone()));
        }
        let impersonating =
            cluster
                .impersonating(account.clone())
                .map_err(|e| Outcome::Stalled {
                    reason: Reason::InvalidSpec,
                    message: match &config.service_account_name {
                        Some(_) => format!("spec.service_account_name: {e}"),
                        None => format!("--default-service-account: {e}"),
                    },
                })?;
        // Names are the tenants' to choose: a spec rewritten with ever new names must not
        // keep a client for each.
        if tenants.len() >= MAX_TENANT_CLUSTERS {
            tenants.clear();
        }
        tenants.insert(account, impersonating.clone());
        Ok(Some(impersonating))
    }
}

/// Whether a Git URL names a remote (`https://`, `http://`, `ssh://`, `git://`, or scp-like
/// `[user@]host:path`) rather than a path on this machine (`/srv/x`, `./x`, `file:///x`). An
/// object's repository is written by whoever may write in its namespace: a local one would
/// make the controller read, and write to, its own disk on their behalf.
pub fn names_a_remote(url: &str) -> bool {
    // Git's own rule: with `://` it is a URL; without, a colon before any slash makes it
    // scp-like `host:path` (one letter before it is a Windows drive, a path).
    if url.contains("://") {
        return url::Url::parse(url).is_ok_and(|url| {
            matches!(url.scheme(), "https" | "http" | "ssh" | "git")
                && url.host_str().is_some_and(|host| !host.is_empty())
        });
    }
    url.split_once(':')
        .is_some_and(|(host, _)| host.len() > 1 && !host.contains(['/', '\\']))
}

/// Why a reconcile is retried: the status already says what went wrong.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("{object}: {message}")]
    Retry { object: String, message: String },
    #[error("{object}: cannot write its status: {source}")]
    Status {
        object: String,
        #[source]
        source: kube::Error,
    },
}

/// Reconciles one object: the `Controller`'s reconciler.
pub async fn reconcile(
    object: Arc<PinnedRepository>,
    ctx: Arc<Context>,
) -> Result<Action, ReconcileError> {
    let namespace = object.namespace().unwrap_or_default();
    let name = format!("{namespace}/{}", object.name_any());
    tracing::debug!(
        "{name}: reconciling generation {:?}",
        object.metadata.generation
    );
    // A pass holds a libgit2 repository, which is not `Sync`, across awaits: its future is
    // not `Send`, and the `Controller` runs reconciles as tasks. It runs on a blocking thread
    // of its own instead, driven by the same runtime (whose workers run what it spawns).
    let handle = tokio::runtime::Handle::current();
    // A slot, fairly between namespaces; held until the status is written.
    let _slot = ctx.slots.acquire(&namespace).await;
    let pass = {
        let (object, ctx, namespace, name) =
            (object.clone(), ctx.clone(), namespace.clone(), name.clone());
        tokio::task::spawn_blocking(move || {
            handle.block_on(async {
                let deadline = ctx.reconcile_timeout;
                match tokio::time::timeout(deadline, run_pass(&object, &namespace, &name, &ctx))
                    .await
                {
                    Ok(done) => done,
                    Err(_) => timed_out(deadline, ctx.interval),
                }
            })
        })
    };
    let (outcome, update, requeue, events) = match pass.await {
        Ok(done) => done,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => {
            return Err(ReconcileError::Retry {
                object: name,
                message: "the pass was cancelled".to_string(),
            })
        }
    };
    let previous = object.status.clone().unwrap_or_default();
    let now = timestamp();
    // Files that could not be pinned, else promotions that could not run: retried with
    // backoff, what the pass did recorded all the same.
    let retry = match update.failures.clone() {
        Some(failures) => Some((Reason::PartiallyPinned, failures)),
        None => update
            .promotions
            .as_deref()
            .and_then(promotion::retry_message)
            .map(|message| (Reason::Unreachable, message)),
    };
    let mut next = status::next(
        &previous,
        &outcome,
        object.metadata.generation,
        &now,
        update,
    );
    // `Ready` says what is retried.
    let outcome = match (retry, &outcome) {
        (Some((reason, message)), Outcome::Done { .. }) => {
            let retrying = Outcome::Retrying { reason, message };
            let generation = object.metadata.generation;
            next.conditions = status::conditions(&previous.conditions, &retrying, generation, &now);
            retrying
        }
        _ => outcome,
    };
    let next = status::keep_times(&previous, next);
    if next != previous {
        write_status(&ctx, &object, &namespace, &next)
            .await
            .map_err(|source| ReconcileError::Status {
                object: name.clone(),
                source,
            })?;
    }
    tracing::info!("{name}: {}", outcome_line(&outcome));
    ctx.shared
        .metrics
        .object_reconciled
        .get_or_create(&crate::metrics::ObjectLabels {
            namespace: namespace.clone(),
            name: object.name_any(),
        })
        .set(k8s_openapi::jiff::Timestamp::now().as_second());
    let mut events = events;
    // A failed verification already announced by the pass (with its verdict) is not
    // announced again as the Ready transition it caused.
    if let Some((reason, message)) =
        status::transition_event(&previous.conditions, &next.conditions)
            .filter(|(reason, _)| !events.iter().any(|(_, r, _)| *r == reason.as_str()))
    {
        events.push((EventType::Warning, reason.as_str(), message));
    }
    for (type_, reason, note) in events {
        publish(&ctx, &object, type_, reason, note).await;
    }
    match outcome {
        Outcome::Retrying { message, .. } => Err(ReconcileError::Retry {
            object: name,
            message,
        }),
        Outcome::Stalled { .. } => {
            lock(&ctx.failures).remove(&name);
            // Nothing changes until the spec or a Secret does, which the watches bring; the
            // interval only catches a Secret changed without the label that is watched.
            Ok(Action::requeue(ctx.interval))
        }
        Outcome::Done { .. } => {
            lock(&ctx.failures).remove(&name);
            Ok(Action::requeue(requeue))
        }
    }
}

/// A pass cut off at the reconcile deadline: retried with backoff, like an unreachable remote.
fn timed_out(deadline: Duration, interval: Duration) -> (Outcome, StatusUpdate, Duration, Events) {
    let outcome = Outcome::Retrying {
        reason: Reason::TimedOut,
        message: format!(
            "the reconcile did not finish within {}s (--reconcile-timeout); retried with backoff",
            deadline.as_secs()
        ),
    };
    (outcome, StatusUpdate::default(), interval, Events::new())
}

/// One log line for what a reconcile found.
fn outcome_line(outcome: &Outcome) -> String {
    let (ready, reason) = outcome.ready();
    let verdict = match outcome {
        Outcome::Done {
            verdict: Some(v), ..
        } => format!(
            " verdict={} ({}: {})",
            v.state.as_str(),
            v.source,
            v.summary
        ),
        _ => String::new(),
    };
    format!("ready={ready} reason={}{verdict}", reason.as_str())
}

/// The `Controller`'s error policy: this object alone waits, twice as long after each failure
/// in a row, from [`FIRST_BACKOFF`] up to the interval.
pub fn error_policy(
    object: Arc<PinnedRepository>,
    error: &ReconcileError,
    ctx: Arc<Context>,
) -> Action {
    let name = format!(
        "{}/{}",
        object.namespace().unwrap_or_default(),
        object.name_any()
    );
    tracing::warn!("{error}");
    let failures = {
        let mut failures = lock(&ctx.failures);
        let n = failures.entry(name).or_insert(0);
        *n = n.saturating_add(1);
        *n
    };
    Action::requeue(backoff(failures, ctx.interval))
}

/// The wait after `failures` failures in a row.
pub fn backoff(failures: u32, max: Duration) -> Duration {
    let factor = 2u32.saturating_pow(failures.saturating_sub(1).min(16));
    FIRST_BACKOFF.saturating_mul(factor).min(max)
}

/// Everything between reading the object and writing its status: the outcome, what changed,
/// when to come back, and the Events of what was done.
async fn run_pass(
    object: &PinnedRepository,
    namespace: &str,
    name: &str,
    ctx: &Context,
) -> (Outcome, StatusUpdate, Duration, Events) {
    let started = std::time::Instant::now();
    let events = Events::new();
    let stalled = |reason, message| {
        (
            Outcome::Stalled { reason, message },
            StatusUpdate::default(),
            ctx.interval,
            Events::new(),
        )
    };
    let spec = serde_json::Value::Object(object.spec.fields.clone());
    let mut config = match Config::from_resource_spec(&spec, name) {
        Ok(config) => config,
        Err(e) => return stalled(Reason::InvalidSpec, e.problems.join("\n")),
    };
    // No forge call may be promised longer than the whole reconcile (registry timeouts are
    // capped where their clients are made).
    if let Some(forge) = config.forge.as_mut() {
        let ceiling = ctx.reconcile_timeout.as_secs().max(1);
        forge.timeout_seconds = forge.timeout_seconds.min(ceiling);
    }
    if !ctx.allow_local_repositories && !names_a_remote(&config.repository.url) {
        return stalled(
            Reason::InvalidSpec,
            format!(
                "spec.repository.url: {:?} is a path on the controller's machine, not a remote \
                 (https://, ssh:// or host:path); the operator clones local repositories only \
                 with --allow-local-repositories",
                config.repository.url
            ),
        );
    }
    let dir = ctx.cache_dir.join(namespace).join(object.name_any());
    let secrets = match read_secrets(&ctx.kube, namespace, &config, &dir).await {
        Ok(secrets) => secrets,
        Err(outcome) => return (outcome, StatusUpdate::default(), ctx.interval, events),
    };
    config.images.signatures = secrets.signatures;
    if let Some(promotion) = config.promotion.as_mut() {
        promotion.require_signed_by = secrets.required_signers;
    }
    // The cluster read for this object, as the ServiceAccount it reads as (if any): what
    // that account may not read is not verified, never read with the operator's rights.
    let own = match ctx.own_cluster(namespace, &config) {
        Ok(own) => own,
        Err(outcome) => return (outcome, StatusUpdate::default(), ctx.interval, events),
    };
    // Each promotion stage's cluster, its kubeconfig Secret read now (a kubeconfig's own
    // credentials are used as they are); the first stage's is where sync's pins are verified.
    let clusters = match promotion::read_kubeconfigs(&ctx.kube, namespace, &config).await {
        Ok(kubeconfigs) => {
            let own = own.as_ref();
            promotion::clusters(&config, &kubeconfigs, own, &dir, ctx.api_timeout).await
        }
        Err(outcome) => Err(outcome),
    };
    let clusters = match clusters {
        Ok(clusters) => clusters,
        Err(outcome) => return (outcome, StatusUpdate::default(), ctx.interval, events),
    };
    let first_stage = config.promotion.as_ref().map(|p| p.stages[0].name.as_str());
    let verify_on = match first_stage {
        Some(stage) => clusters.get(stage),
        None => own.as_ref(),
    };
    let (registry, shared) = match ctx.registries.client(&config.registries, secrets.docker) {
        Ok(client_and_answers) => client_and_answers,
        Err(e) => return stalled(Reason::InvalidSpec, e.to_string()),
    };
    let forge = match (&config.forge, secrets.forge_token) {
        (Some(forge), Some(token)) => {
            match ForgeClient::with_username(forge, token, secrets.forge_username) {
                Ok(github) => Some(github),
                Err(e) => return stalled(Reason::InvalidSpec, e.to_string()),
            }
        }
        _ => None,
    };
    let built = Syncer::with_credentials(
        &config,
        &registry,
        forge.as_ref(),
        &dir,
        secrets.git,
        secrets.signer,
    );
    let mut syncer = match built {
        Ok(syncer) => syncer.sharing(&shared),
        Err(e) => return (classify(&e), StatusUpdate::default(), ctx.interval, events),
    };
    // libgit2 bounds each read only: the fetch itself stops at the reconcile's deadline, and
    // at the size the controller allows a repository.
    syncer.mirror.limit(FetchLimits {
        max_bytes: Some(ctx.max_repository_bytes),
        deadline: Some((started + ctx.reconcile_timeout, ctx.reconcile_timeout)),
    });
    let pass = Pass {
        object,
        ctx,
        config: &config,
        syncer: &syncer,
        registry: &registry,
        forge: forge.as_ref(),
        clusters: &clusters,
        verify_on,
    };
    let done = sync_verify_promote(pass, events).await;
    // This object's mirror alone: each object has its own, under its own directory.
    ctx.shared
        .metrics
        .mirror_repairs
        .inc_by(syncer.mirror.take_repairs());
    done
}

/// The shared round of what is in flight and the audit of the tip `(tip, audit_tip)`, with the
/// object's memory (`key`), which is kept for its next pass.
async fn in_flight<'r>(
    round: &'r inflight::Round<'_>,
    ctx: &Context,
    key: String,
    (tip, audit_tip): (Option<inflight::Tip>, Option<inflight::Tip>),
    now: i64,
) -> (inflight::Report<'r>, Option<super::crd::AuditStatus>) {
    let memory = Mutex::new(lock(&ctx.memories).remove(&key).unwrap_or_default());
    let mut families = Families::default();
    let verified = round.run(&memory, tip, now, &mut families).await;
    let audited = round.audit(&memory, audit_tip.as_ref(), now, &mut families);
    let audit = match audited.await {
        Some(Ok(report)) => Some(audit_status(&report)),
        Some(Err(e)) => {
            tracing::warn!("cannot audit {}: {e}", round.config.repository.branch);
            None
        }
        None => None,
    };
    let memory = memory
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    lock(&ctx.memories).insert(key, memory);
    (verified, audit)
}

/// `status.audit` from an audit: how many workloads have each finding.
fn audit_status(report: &crate::audit::AuditReport) -> super::crd::AuditStatus {
    super::crd::AuditStatus {
        commit: report.commit.clone(),
        workloads: report
            .audit
            .workloads_with()
            .into_iter()
            .map(|(finding, n)| (finding.as_str().to_string(), n))
            .collect(),
        clean: report.clean(),
        time: timestamp(),
    }
}

/// The object's configuration and the clients made from it, for the steps of one pass.
struct Pass<'a> {
    object: &'a PinnedRepository,
    ctx: &'a Context,
    config: &'a Config,
    syncer: &'a Syncer<'a>,
    registry: &'a Client,
    forge: Option<&'a ForgeClient>,
    /// Each promotion stage's cluster, by name.
    clusters: &'a BTreeMap<String, Cluster>,
    /// Where sync's pins are verified: the first stage's cluster, or the object's own.
    verify_on: Option<&'a Cluster>,
}

/// Sync, then the verification of what it pinned and of the last merge, then the promotions.
async fn sync_verify_promote(
    pass: Pass<'_>,
    mut events: Events,
) -> (Outcome, StatusUpdate, Duration, Events) {
    let Pass {
        object,
        ctx,
        config,
        syncer,
        registry,
        forge,
        clusters,
        verify_on,
    } = pass;
    let mut answers = BTreeMap::new();
    let report = match syncer.run_with(SyncOptions::default(), &mut answers).await {
        Ok(report) => report,
        Err(e) => return (classify(&e), StatusUpdate::default(), ctx.interval, events),
    };
    ctx.shared
        .metrics
        .observe_signature_checks(&report.signature_checks);
    ctx.shared.metrics.observe_age_checks(&report.age_checks);
    let noun = ChangeRequestNoun::of(config.forge.as_ref());
    let mut update = status_update(&report, noun, &mut events);
    if config.mode == WriteMode::Commit && update.last_pin.is_none() {
        let previous = object.status.as_ref().and_then(|s| s.last_pin.as_ref());
        if let Some(pin) = pinned_before(syncer, &config.repository.branch, previous) {
            events.push((
                EventType::Normal,
                "Pinned",
                format!(
                    "{} has {}: {} image(s) pinned",
                    pin.branch, pin.commit, pin.images
                ),
            ));
            update.last_pin = Some(pin);
        }
    }
    // A file that could not be pinned holds up neither the verification of what was pinned
    // nor the promotions, as in `tagpin run`; the object is retried for it all the same.
    update.failures = report.has_failures().then(|| report.failures.join("\n"));
    let previous_verdict = object.status.as_ref().and_then(|s| s.verdict.as_ref());
    let tip = match config.mode {
        WriteMode::Commit => {
            let pushed = pushed(&report);
            inflight::tip(&syncer.mirror, &config.repository.branch, pushed.as_deref())
        }
        WriteMode::PullRequest => None,
    };
    let tip_sha = tip.as_ref().map(|t| t.sha.clone());
    // The branch's tip is audited in either mode (in commit mode, what the pass pushed).
    let audit_tip = match &tip {
        Some(tip) => Some(tip.clone()),
        None => inflight::tip(&syncer.mirror, &config.repository.branch, None),
    };
    let round = inflight::Round {
        config,
        mirror: &syncer.mirror,
        forge,
        registry,
        cluster: verify_on,
        stage_clusters: clusters,
        grace: ctx.interval,
    };
    let key = format!(
        "{}/{}",
        object.namespace().unwrap_or_default(),
        object.name_any()
    );
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    let (verified, audit) = in_flight(&round, ctx, key, (tip, audit_tip), now).await;
    update.audit = audit;
    if let Some(e) = &verified.list_error {
        tracing::warn!(
            "cannot list the {} change requests, none verified: {e}",
            config.repository.branch
        );
    }
    for (number, why) in &verified.ignored {
        tracing::debug!("{} is not verified: {why}", noun.name(*number));
    }
    events.extend(verdicts::revert_events(config, &verified));
    let open = match config.mode {
        WriteMode::PullRequest => update.pull_request.as_ref().map(|pr| pr.number),
        WriteMode::Commit => None,
    };
    let reported = verdicts::reported(
        config,
        &verified,
        open,
        tip_sha.as_deref(),
        previous_verdict,
        (now, &timestamp()),
    );
    let (verdict, awaiting) = match reported.verdict {
        Some((verdict, awaiting)) => (Some(verdict), awaiting),
        None => (None, None),
    };
    announce_failed(&verdict, &reported.others, previous_verdict, &mut events);
    let progressing = |v: &VerdictSummary| v.state == State::Progressing;
    let mut requeue = match verdict.as_ref().is_some_and(progressing)
        || reported.others.iter().any(progressing)
    {
        true => ctx.verify_interval,
        false => ctx.interval,
    };
    if config.promotion.is_some() {
        let pass = promotion::Pass {
            config,
            syncer,
            registry,
            forge,
            clusters,
            previous: object
                .status
                .as_ref()
                .map_or(&[][..], |s| s.promotions.as_slice()),
            metrics: &ctx.shared.metrics,
            verdicts: &reported.promotions,
        };
        match promotion::run(pass, &mut events).await {
            Ok(promoted) => {
                requeue = promoted.requeue.map_or(requeue, |r| r.min(requeue));
                if promotion::rolling_out(&promoted.statuses) {
                    requeue = requeue.min(ctx.verify_interval);
                }
                update.promotions = Some(promoted.statuses);
            }
            Err(outcome) => return (outcome, update, ctx.interval, events),
        }
    }
    let message = match &update.pull_request {
        Some(pr) => format!(
            "pins proposed in {} for {}",
            ChangeRequestNoun::of(config.forge.as_ref()).name(pr.number),
            config.repository.branch
        ),
        None => format!("{} pinned", config.repository.branch),
    };
    let outcome = Outcome::Done {
        message,
        pull_request: update.pull_request.as_ref().map(|pr| pr.number),
        verdict: verdict.map(Box::new),
        awaiting,
    };
    (outcome, update, requeue, events)
}

/// A Failed verdict is announced once: one verified this round that the status does not
/// report always (it is final, verified once), the reported one when it was not already the
/// previous verdict.
fn announce_failed(
    verdict: &Option<VerdictSummary>,
    others: &[VerdictSummary],
    previous_verdict: Option<&VerdictSummary>,
    events: &mut Events,
) {
    for v in others.iter().filter(|v| v.state == State::Failed) {
        events.push((
            EventType::Warning,
            "VerificationFailed",
            format!("{}: {}", v.source, v.summary),
        ));
    }
    if let Some(v) = verdict.as_ref().filter(|v| v.state == State::Failed) {
        if previous_verdict.is_none_or(|p| p.source != v.source || p.state != v.state) {
            events.push((
                EventType::Warning,
                "VerificationFailed",
                format!("{}: {}", v.source, v.summary),
            ));
        }
    }
}

/// The commit a commit-mode pass pushed, if it pushed one.
fn pushed(report: &SyncReport) -> Option<String> {
    report.groups.iter().find_map(|group| match &group.outcome {
        crate::sync::Outcome::Committed { commit, .. } => Some(commit.clone()),
        _ => None,
    })
}

/// How far down a branch the last pin is looked for.
const PIN_HISTORY_DEPTH: usize = 100;

/// The last commit tagpin pinned on `branch`, read back from Git, when the status does not
/// record it: a controller (the leader before a failover) stopped between its push and its
/// status write, and this pass found nothing left to commit.
fn pinned_before(syncer: &Syncer<'_>, branch: &str, recorded: Option<&LastPin>) -> Option<LastPin> {
    let tip = syncer.mirror.tip(branch)?;
    let found = crate::git::off_runtime(|| syncer.mirror.last_own_commit(tip, PIN_HISTORY_DEPTH));
    let (commit, time, message) = match found {
        Ok(found) => found?,
        Err(e) => {
            tracing::warn!("{branch}: cannot read back the last pin: {e}");
            return None;
        }
    };
    let commit = commit.to_string();
    if recorded.is_some_and(|pin| pin.commit == commit) {
        return None;
    }
    Some(LastPin {
        commit,
        branch: branch.to_string(),
        images: u32::try_from(crate::proposal::message::count_pin_lines(&message))
            .unwrap_or(u32::MAX),
        time: crate::promote::gate::rfc3339(time),
    })
}

/// The last pin and open pull request a pass reports, and the Events of what it wrote.
fn status_update(
    report: &SyncReport,
    noun: ChangeRequestNoun,
    events: &mut Events,
) -> StatusUpdate {
    use crate::sync::Outcome as Done;
    let mut update = StatusUpdate::default();
    for group in &report.groups {
        let images = u32::try_from(group.changes.len()).unwrap_or(u32::MAX);
        match &group.outcome {
            Done::Committed { branch, commit, .. } => {
                events.push((
                    EventType::Normal,
                    "Pinned",
                    format!("pushed {commit} to {branch}: {images} image(s) pinned"),
                ));
                update.last_pin = Some(LastPin {
                    commit: commit.clone(),
                    branch: branch.clone(),
                    images,
                    time: timestamp(),
                });
            }
            Done::PullRequestOpened {
                number,
                url,
                branch,
            }
            | Done::PullRequestUpdated {
                number,
                url,
                branch,
            }
            | Done::PullRequestUnchanged {
                number,
                url,
                branch,
            } => {
                if matches!(group.outcome, Done::PullRequestOpened { .. }) {
                    events.push((
                        EventType::Normal,
                        "PullRequestOpened",
                        format!("opened {} from {branch}: {url}", noun.name(*number)),
                    ));
                }
                // With one pull request per image, the status names the first; each is on
                // the forge with its own verdict.
                update.pull_request.get_or_insert(PullRequestRef {
                    number: *number,
                    url: url.clone(),
                    branch: branch.clone(),
                });
            }
            _ => {}
        }
    }
    update
}

/// A pass that could not run, as the status says it: refused credentials and missing
/// secrets need a person; the rest may pass by itself.
fn classify(error: &SyncError) -> Outcome {
    let message = error.to_string();
    let reason = match error {
        SyncError::Git(GitError::Auth { .. }) => Reason::AuthFailed,
        SyncError::Git(GitError::TooLarge { .. }) => Reason::RepositoryTooLarge,
        SyncError::Git(GitError::FetchDeadline { .. }) => {
            return Outcome::Retrying {
                reason: Reason::TimedOut,
                message,
            }
        }
        SyncError::Forge(ForgeError::Call {
            status: Some(401 | 403),
            ..
        }) => Reason::AuthFailed,
        SyncError::Secret { .. } => Reason::SecretNotFound,
        SyncError::Filter(_) | SyncError::Policy(_) | SyncError::NoForge => Reason::InvalidSpec,
        _ => {
            return Outcome::Retrying {
                reason: Reason::Unreachable,
                message,
            }
        }
    };
    Outcome::Stalled { reason, message }
}

/// Writes the whole status with a merge patch; fields now empty are written as `null`, so
/// that a merged pull request leaves the status.
async fn write_status(
    ctx: &Context,
    object: &PinnedRepository,
    namespace: &str,
    status: &PinnedRepositoryStatus,
) -> Result<(), kube::Error> {
    let api: Api<PinnedRepository> = Api::namespaced(ctx.kube.clone(), namespace);
    let mut value = serde_json::to_value(status).map_err(kube::Error::SerdeError)?;
    if let Some(fields) = value.as_object_mut() {
        for key in [
            "observedGeneration",
            "lastPin",
            "pullRequest",
            "verdict",
            "promotions",
        ] {
            fields.entry(key).or_insert(serde_json::Value::Null);
        }
    }
    let patch = serde_json::json!({ "status": value });
    api.patch_status(
        &object.name_any(),
        &PatchParams::apply(MANAGER),
        &Patch::Merge(&patch),
    )
    .await
    .map(|_| ())
}

/// Publishes an Event about `object`; a failure is logged, never the reconcile's.
async fn publish(
    ctx: &Context,
    object: &PinnedRepository,
    type_: EventType,
    reason: &str,
    note: String,
) {
    if let Err(e) = ctx.events.publish(object, type_, reason, &note).await {
        tracing::warn!(
            "{}/{}: cannot publish Event {reason}: {e}",
            object.namespace().unwrap_or_default(),
            object.name_any()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remotes_are_told_from_paths_on_this_machine() {
        for remote in [
            "https://github.com/acme/gitops.git",
            "http://127.0.0.1:8080/gitops.git",
            "ssh://git@github.com/acme/gitops.git",
            "git://git.example/gitops.git",
            "git@github.com:acme/gitops.git",
            "gitlab.example:acme/gitops.git",
        ] {
            assert!(names_a_remote(remote), "{remote}");
        }
        for local in [
            "file:///var/cache/tagpin/team-b/shop",
            "/var/cache/tagpin/team-b/shop",
            "./gitops",
            "../gitops.git",
            "gitops.git",
            "c:/gitops",
            "file://localhost/srv/gitops",
            "",
        ] {
            assert!(!names_a_remote(local), "{local}");
        }
    }

    #[test]
    fn backoff_doubles_from_five_seconds_up_to_the_interval() {
        let max = Duration::from_secs(300);
        let waits: Vec<u64> = (1..=8).map(|n| backoff(n, max).as_secs()).collect();
        assert_eq!(waits, [5, 10, 20, 40, 80, 160, 300, 300]);
        assert_eq!(backoff(u32::MAX, max), max);
    }

    #[test]
    fn refused_credentials_and_missing_secrets_stall_and_an_unreachable_remote_retries() {
        let auth = SyncError::Git(GitError::Auth {
            url: "https://git.example/a.git".into(),
            message: "401".into(),
        });
        assert!(matches!(
            classify(&auth),
            Outcome::Stalled {
                reason: Reason::AuthFailed,
                ..
            }
        ));
        let down = SyncError::Git(GitError::Fetch {
            url: "https://git.example/a.git".into(),
            message: "connection refused".into(),
        });
        assert!(matches!(
            classify(&down),
            Outcome::Retrying {
                reason: Reason::Unreachable,
                ..
            }
        ));
    }
}
