//! One `PinnedRepository`, reconciled: its spec validated as `tagpin.yaml` is, its Secrets
//! read, its clusters and clients set up, one [`crate::cycle`] run on its repository (sync,
//! verify and audit, promote, as `tagpin run`), and the cycle's report written to its status
//! and, for what a person should see, as Events ([`super::report`]).
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

use super::crd::{PinnedRepository, PinnedRepositoryStatus};
use super::events::{timestamp, EventType, Events, Publisher};
use super::promotion;
use super::report::{Mapped, Timing};
use super::secrets::read_secrets;
use super::status::{self, Outcome, Reason, StatusUpdate};
use crate::cluster::{Cluster, ServiceAccount};
use crate::config::Config;
use crate::cycle::counts::{self, Trigger};
use crate::cycle::{Clusters, Cycle, RepoState, Step};
use crate::forge::ForgeClient;
use crate::git::FetchLimits;
use crate::inflight;
use crate::mutex::lock;
use crate::promote::round::Promotions;
use crate::promote::Promoter;
use crate::registry::Client;
use crate::sync::Syncer;

use super::report::classify;

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
    /// What the dashboard shows (`--ui-listen`), by `namespace/name`.
    pub board: crate::ui::Board,
    /// Where each object's events are told (`notifications:`, its URLs from its Secret).
    pub notifications: Arc<crate::notify::Notifications>,
    /// The image repositories each object's last pass asked about, for webhook deliveries.
    pub routes: super::routes::Routes,
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
    // A slot, fairly between namespaces, a webhook's first; held until the status is written.
    let delivered = ctx.routes.take_delivered(&name);
    let _slot = (ctx.slots).acquire(&namespace, delivered).await;
    let trigger = match delivered {
        true => Trigger::Webhook,
        false => Trigger::Schedule,
    };
    let pass = {
        let (object, ctx, namespace, name) =
            (object.clone(), ctx.clone(), namespace.clone(), name.clone());
        tokio::task::spawn_blocking(move || {
            handle.block_on(async {
                let deadline = ctx.reconcile_timeout;
                let pass = run_pass(&object, (&namespace, &name), &ctx, trigger);
                match tokio::time::timeout(deadline, pass).await {
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
    let (outcome, next) = next_status(&object, &previous, outcome, update);
    if next != previous {
        write_status(&ctx, &object, &namespace, &next)
            .await
            .map_err(|source| ReconcileError::Status {
                object: name.clone(),
                source,
            })?;
    }
    tracing::info!("{name}: {}", outcome_line(&outcome));
    let (ready, reason) = outcome.ready();
    crate::ui::record_readiness(
        &ctx.board,
        &name,
        (ready, reason.as_str()),
        crate::clock::unix_now(),
    );
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

/// The status a pass leads to from `previous`, and the outcome `Ready` says: files that
/// could not be pinned, else promotions that could not run, are retried with backoff, what
/// the pass did recorded all the same.
fn next_status(
    object: &PinnedRepository,
    previous: &PinnedRepositoryStatus,
    outcome: Outcome,
    update: StatusUpdate,
) -> (Outcome, PinnedRepositoryStatus) {
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
    let mut next = status::next(previous, &outcome, object.metadata.generation, &now, update);
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
    let next = status::keep_times(previous, next);
    (outcome, next)
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
    (namespace, name): (&str, &str),
    ctx: &Context,
    trigger: Trigger,
) -> Mapped {
    let started = std::time::Instant::now();
    let failed = |outcome| {
        (
            outcome,
            StatusUpdate::default(),
            ctx.interval,
            Events::new(),
        )
    };
    let config = match spec_config(object, name, ctx) {
        Ok(config) => config,
        Err(outcome) => return failed(outcome),
    };
    let dir = ctx.cache_dir.join(namespace).join(object.name_any());
    let set_up = match set_up(ctx, namespace, config, &dir).await {
        Ok(set_up) => set_up,
        Err(outcome) => return failed(outcome),
    };
    let SetUp {
        config,
        clusters,
        registry,
        shared,
        forge,
        mut secrets,
    } = set_up;
    let notifier = crate::notify::Teller {
        notifications: ctx.notifications.clone(),
        cache_dir: dir.clone(),
        targets: std::mem::take(&mut secrets.notifications),
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
        Err(e) => return failed(classify(&e)),
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
        notifier: &notifier,
        woken: (trigger, started),
    };
    let done = sync_verify_promote(pass).await;
    // This object's mirror alone: each object has its own, under its own directory.
    ctx.shared.metrics.observe_mirror(&syncer.mirror);
    done
}

/// The object's spec read as `tagpin.yaml` is, with the limits the controller sets: no forge
/// call promised longer than the whole reconcile, no repository on the controller's disk.
fn spec_config(object: &PinnedRepository, name: &str, ctx: &Context) -> Result<Config, Outcome> {
    let stalled = |message| Outcome::Stalled {
        reason: Reason::InvalidSpec,
        message,
    };
    let spec = serde_json::Value::Object(object.spec.fields.clone());
    let mut config =
        Config::from_resource_spec(&spec, name).map_err(|e| stalled(e.problems.join("\n")))?;
    // Registry timeouts are capped where their clients are made.
    if let Some(forge) = config.forge.as_mut() {
        let ceiling = ctx.reconcile_timeout.as_secs().max(1);
        forge.timeout_seconds = forge.timeout_seconds.min(ceiling);
    }
    if !ctx.allow_local_repositories && !names_a_remote(&config.repository.url) {
        return Err(stalled(format!(
            "spec.repository.url: {:?} is a path on the controller's machine, not a remote \
             (https://, ssh:// or host:path); the operator clones local repositories only \
             with --allow-local-repositories",
            config.repository.url
        )));
    }
    Ok(config)
}

/// What a pass is set up with: the configuration with its Secrets' keys, the object's
/// clusters, its registry and forge clients, and the rest of its Secrets.
struct SetUp {
    config: Config,
    clusters: Clusters,
    registry: Arc<Client>,
    shared: Arc<crate::sync::shared::SharedAnswers>,
    forge: Option<ForgeClient>,
    secrets: super::secrets::Secrets,
}

/// Reads the object's Secrets, and sets up its clusters and clients from them.
async fn set_up(
    ctx: &Context,
    namespace: &str,
    mut config: Config,
    dir: &std::path::Path,
) -> Result<SetUp, Outcome> {
    let stalled = |message| Outcome::Stalled {
        reason: Reason::InvalidSpec,
        message,
    };
    let mut secrets = read_secrets(&ctx.kube, namespace, &config, dir).await?;
    config.images.signatures = std::mem::take(&mut secrets.signatures);
    config.images.provenance = std::mem::take(&mut secrets.provenance);
    if let Some(promotion) = config.promotion.as_mut() {
        promotion.require_signed_by = std::mem::take(&mut secrets.required_signers);
    }
    // The cluster read for this object, as the ServiceAccount it reads as (if any): what
    // that account may not read is not verified, never read with the operator's rights.
    let own = ctx.own_cluster(namespace, &config)?;
    // Each promotion stage's cluster, its kubeconfig Secret read now (a kubeconfig's own
    // credentials are used as they are); the first stage's is where sync's pins are verified.
    let kubeconfigs = promotion::read_kubeconfigs(&ctx.kube, namespace, &config).await?;
    let clusters =
        promotion::clusters(&config, &kubeconfigs, own.as_ref(), dir, ctx.api_timeout).await?;
    let (registry, shared) = ctx
        .registries
        .client(&config.registries, std::mem::take(&mut secrets.docker))
        .map_err(|e| stalled(e.to_string()))?;
    let forge = match (&config.forge, secrets.forge_token.take()) {
        (Some(forge), Some(token)) => {
            let username = secrets.forge_username.take();
            let client = ForgeClient::with_username(forge, token, username);
            Some(client.map_err(|e| stalled(e.to_string()))?)
        }
        _ => None,
    };
    Ok(SetUp {
        config,
        clusters,
        registry,
        shared,
        forge,
        secrets,
    })
}

/// The object's configuration and the clients made from it, for the steps of one pass.
struct Pass<'a> {
    object: &'a PinnedRepository,
    ctx: &'a Context,
    config: &'a Config,
    syncer: &'a Syncer<'a>,
    registry: &'a Client,
    forge: Option<&'a ForgeClient>,
    /// Each promotion stage's cluster, and where sync's pins are verified.
    clusters: &'a Clusters,
    /// Where the cycle's events are told.
    notifier: &'a crate::notify::Teller,
    /// What woke the reconcile, and when it started (for the pass's metrics).
    woken: (Trigger, std::time::Instant),
}

/// The promotion step of the object's cycle; `None` without promotion stages. A promoter
/// that cannot be made from the spec stalls the object.
fn promotions_of<'a>(
    config: &'a Config,
    syncer: &'a Syncer<'a>,
    registry: &'a Client,
    forge: Option<&'a ForgeClient>,
    clusters: &'a Clusters,
) -> Result<Option<Promotions<'a>>, Outcome> {
    if config.promotion.is_none() {
        return Ok(None);
    }
    let promoter =
        Promoter::new(config, registry, forge, &syncer.mirror).map_err(|e| Outcome::Stalled {
            reason: Reason::InvalidSpec,
            message: e.to_string(),
        })?;
    Ok(Some(Promotions {
        promoter,
        clusters: &clusters.stages,
    }))
}

/// One cycle over the object's repository (sync, verify and audit, promote), with the
/// object's memory across passes, mapped to its status, outcome and Events.
async fn sync_verify_promote(pass: Pass<'_>) -> Mapped {
    let Pass {
        object,
        ctx,
        config,
        syncer,
        registry,
        forge,
        clusters,
        notifier,
        woken: (trigger, started),
    } = pass;
    let promotions = match promotions_of(config, syncer, registry, forge, clusters) {
        Ok(promotions) => promotions,
        Err(outcome) => {
            return (
                outcome,
                StatusUpdate::default(),
                ctx.interval,
                Events::new(),
            )
        }
    };
    let cycle = Cycle {
        config,
        syncer,
        registry,
        forge,
        clusters,
        promotions: promotions.as_ref(),
        grace: ctx.interval,
        clock: crate::clock::system(),
        metrics: &ctx.shared.metrics,
    };
    let key = format!(
        "{}/{}",
        object.namespace().unwrap_or_default(),
        object.name_any()
    );
    let memory = lock(&ctx.memories).remove(&key).unwrap_or_default();
    let mut state = RepoState::remembering(memory);
    let repository = (key.as_str(), config);
    let (report, asked) =
        crate::sync::shared::noting_asked(cycle.run(&mut state, &mut |step, report| {
            let tip = (step == Step::Synced).then(|| cycle.branch_tip().map(|t| t.sha));
            crate::ui::record_step(&ctx.board, repository, step, report, tip.flatten());
            let metrics = &ctx.shared.metrics;
            match (step, &report.verification) {
                (Step::Synced, _) => {
                    counts::sync(metrics, trigger, started.elapsed(), &report.sync)
                }
                (Step::Verified, Some(verification)) => counts::round(metrics, &verification.round),
                _ => {}
            }
            true
        }))
        .await;
    ctx.routes.record(&key, asked, report.synced().is_some());
    lock(&ctx.memories).insert(key.clone(), state.into_memory());
    let about = crate::cycle::events::About {
        repository: &key,
        config,
    };
    let events = crate::cycle::events::of_cycle(&report, about);
    ctx.board.record(events.clone());
    notifier.tell(events);
    crate::ui::delivery_after_cycle(&ctx.board, &cycle, cycle.metrics, &key).await;
    let timing = Timing {
        interval: ctx.interval,
        verify_interval: ctx.verify_interval,
    };
    super::report::map(
        object,
        config,
        &syncer.mirror,
        report,
        timing,
        Events::new(),
    )
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
}
