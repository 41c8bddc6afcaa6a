//! `tagpin run`: the long-running controller, from its setup ([`run`]) to the loop.
//!
//! A sync pass every `interval` (with jitter, so many controllers do not hit a registry in
//! step), and a targeted pass as soon as a registry webhook arrives (leading edge: the first
//! delivery is never held back to wait for others). Passes never overlap: one task runs them
//! one after another, and at most one webhook pass starts per webhook window (1 s by
//! default): the deliveries that arrive while a pass runs or within the window are merged into
//! one follow-up pass at its end (their repositories gather in one set, and [`Notify`] keeps a
//! single wake-up however many arrive), never dropped and never one pass each, so a burst of
//! pushes of one tag makes at most two commits, the last one pinning the last digest. State
//! lives in Git and on the forge, so a restart repeats nothing; between passes the controller
//! only keeps registry answers, to re-ask just the images a webhook names. When the loop
//! wakes, and why, is decided apart from its I/O (`daemon/timetable.rs`), on tokio's clock,
//! so tests move paused time instead of waiting.
//!
//! SIGTERM or SIGINT stops it: no new work starts, and the work under way (a pass, a
//! promotion round or a verification round) may finish within the grace period
//! ([`GRACE_PERIOD`] by default). Git writes are single blocking calls inside a pass, so
//! stopping never cuts a commit or a push in half; a pass stopped between its push and its PR
//! update is completed by the next start (the branch already carries the change, the PR gets
//! opened).
//!
//! `/healthz` fails once the loop has finished nothing (no pass, no promotion round, no
//! verification round) for [`LIVENESS_INTERVALS`] intervals: every network call has a timeout,
//! so a loop that long without progress is stuck, and Kubernetes restarts the pod.
//!
//! With `--leader-elect` ([`crate::leader`]) the loop runs only while this replica holds the
//! Lease. A standby serves `/healthz` (200: standing by is its work) but not `/readyz` (503,
//! so webhooks go to the leader). A stopped leader releases the Lease after its work ended;
//! a leader that loses the Lease drops the work under way and exits non-zero at once, so
//! Kubernetes restarts it as a standby (a push cut short by the exit updates no ref; the new
//! leader's pass redoes it).

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::sync::{watch, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::clock::Clock;
use crate::config::{Config, Stage, WriteMode};
use crate::forge::{Forge, StatusState};
use crate::git::Mirror;
use crate::metrics::{
    self, ActionLabels, ErrorLabels, Metrics, PassLabels, PromotionLabels, VerdictLabels,
    WebhookLabels,
};
use crate::promote::{self, Gate, PromoteOptions, Promoter};
use crate::registry::{Client, ResolveKey, ResolveResult};
use crate::sync::{Outcome, SyncOptions, Syncer};
use crate::verify::live::Cluster;
use crate::verify::verdict::State as Verdict;
use crate::verify::{self, grace, Families, Source, VerifyError};
use crate::webhook::{self, Sender};

mod timetable;
use timetable::{Timetable, Trigger};
pub use timetable::{WebhookWindow, WEBHOOK_WINDOW};

/// How long work under way may go on after a stop signal, by default (`--grace-period`). Keep
/// it below the pod's `terminationGracePeriodSeconds` (45 s in `deploy/`).
pub const GRACE_PERIOD: Duration = Duration::from_secs(30);
/// `/healthz` fails after this many intervals (`--interval`) without finished work. A pass
/// comes every interval (±10%), so three leave room for a slow pass or two.
pub const LIVENESS_INTERVALS: u32 = 3;
/// The environment variable holding the webhook secret (shared secret or HMAC key).
pub const WEBHOOK_SECRET_ENV: &str = "TAGPIN_WEBHOOK_SECRET";
/// The largest webhook body accepted.
const MAX_WEBHOOK_BYTES: usize = 1024 * 1024;
/// Signed deliveries (GHCR) whose bodies are read at once: a signature can only be checked on
/// the whole body, so anyone can make tagpin read one. Past this, a signed delivery is
/// answered 503 at once rather than buffering up to [`MAX_WEBHOOK_BYTES`] more, or holding a
/// connection slot while it waits; the next scheduled pass sees the push anyway.
const UNVERIFIED_BODIES_AT_ONCE: usize = 4;

/// Webhook deliveries not served yet.
#[derive(Debug, Default)]
struct Pending {
    /// The repositories they name.
    names: BTreeSet<String>,
    /// How many deliveries named them: all but one ride along in a pass another started.
    deliveries: u64,
}

/// What the HTTP side shares with the loop.
pub struct Shared {
    pub metrics: Metrics,
    /// Repositories named by webhooks since the last pass.
    pending: Mutex<Pending>,
    wake: Notify,
    ready: AtomicBool,
    webhook_secret: Option<String>,
    /// When the loop last finished a pass, a promotion round or a verification round (or
    /// started).
    progress: Mutex<Instant>,
    /// How long without progress before `/healthz` fails ([`Schedule::stale_after`]).
    stale_after: Duration,
    /// Permits to read a body not yet authenticated ([`UNVERIFIED_BODIES_AT_ONCE`]).
    unverified_bodies: Semaphore,
}

impl Shared {
    pub fn new(webhook_secret: Option<String>, stale_after: Duration) -> Arc<Shared> {
        Arc::new(Shared {
            metrics: Metrics::new(),
            pending: Mutex::default(),
            wake: Notify::new(),
            ready: AtomicBool::new(false),
            webhook_secret,
            progress: Mutex::new(Instant::now()),
            stale_after,
            unverified_bodies: Semaphore::new(UNVERIFIED_BODIES_AT_ONCE),
        })
    }

    /// The loop finished a piece of work.
    pub fn progressed(&self) {
        *lock(&self.progress) = Instant::now();
    }

    /// How long the loop has finished nothing, when that is past [`Schedule::stale_after`]
    /// (`/healthz` then fails); `None` while it makes progress.
    pub fn stuck_for(&self) -> Option<Duration> {
        let idle = lock(&self.progress).elapsed();
        (idle > self.stale_after).then_some(idle)
    }

    /// Queues the repositories a webhook delivery names for the next pass, and wakes the loop
    /// (once, however many deliveries come before it takes them). A delivery that names
    /// nothing asks for nothing.
    pub fn queue(&self, names: impl IntoIterator<Item = String>) {
        let mut pending = lock(&self.pending);
        let before = pending.names.len();
        let mut named = false;
        for name in names {
            named = true;
            pending.names.insert(name);
        }
        if named {
            pending.deliveries += 1;
        }
        if pending.names.len() > before {
            self.wake.notify_one();
        }
    }

    /// Takes the repositories queued since the last call, for the pass about to start, and
    /// counts the deliveries that pass serves beyond the first as coalesced.
    fn take_pending(&self) -> BTreeSet<String> {
        let taken = std::mem::take(&mut *lock(&self.pending));
        self.metrics
            .webhook_coalesced
            .inc_by(taken.deliveries.saturating_sub(1));
        taken.names
    }

    /// `/readyz` answers 200 from now on.
    pub fn mark_ready(&self) {
        self.ready.store(true, Ordering::Relaxed);
    }

    /// Waits for a webhook delivery, then takes the repositories named since the last call
    /// (`tagpin operator` serves them with its own loop): at once for the first delivery, at
    /// the end of the `window` the last call opened for those that come within it, so that
    /// a burst is served by one follow-up reconcile, not one each.
    pub async fn next_delivery(&self, window: &mut WebhookWindow) -> BTreeSet<String> {
        loop {
            self.wake.notified().await;
            tokio::time::sleep_until(window.start_at(Instant::now())).await;
            let names = self.take_pending();
            if !names.is_empty() {
                window.pass_started(Instant::now());
                return names;
            }
        }
    }
}

/// Limits of the HTTP side against slow and numerous clients: the webhook port is open to
/// the registries, and anyone who can reach it can connect without knowing the secret.
#[derive(Debug, Clone, Copy)]
pub struct HttpLimits {
    /// A request's line and headers must arrive within this from when the connection waits
    /// for them; an idle keep-alive connection is closed after it too.
    pub header_timeout: Duration,
    /// Reading the body and answering must be done within this (408 otherwise).
    pub request_timeout: Duration,
    /// Connections served at once. More wait, unread, in the kernel's listen backlog until a
    /// slot frees: each served connection holds at most [`MAX_HEAD_BYTES`] of headers, and a
    /// body of at most 1 MiB only once authenticated by a shared secret, or while it is one of
    /// the few (4) signed bodies being checked at once.
    pub max_connections: usize,
    /// After a stop signal, how long open connections may finish before they are cut.
    pub drain: Duration,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            header_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            max_connections: 64,
            drain: Duration::from_secs(5),
        }
    }
}

/// The read buffer of one connection, which bounds its request line and headers: webhook
/// deliveries, probes and scrapes send a few hundred bytes of them.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;

/// What a listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Routes {
    /// Health, readiness, metrics and webhooks: `--listen`.
    All,
    /// Health, readiness and metrics only: `--health-listen`, a port of its own so that
    /// clients holding the webhook port's connection slots never delay the kubelet's probes.
    Probes,
}

/// Serves `routes` on `listener` until `stop` turns true, then lets open connections finish
/// for at most `limits.drain`.
///
/// Not `axum::serve`: it sets no header read timeout and no connection limit, and its graceful
/// shutdown waits for every connection, so one half-sent request kept the process alive after
/// SIGTERM. This loop is the same hyper connection with those three bounds.
pub async fn serve(
    listener: tokio::net::TcpListener,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
    limits: HttpLimits,
    routes: Routes,
) {
    let mut app = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_page));
    if routes == Routes::All {
        app = app.route("/webhooks/{sender}", post(webhook_delivery));
    }
    let app = app.with_state(shared);
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let (closing, closing_rx) = watch::channel(false);
    let mut connections = JoinSet::new();
    loop {
        // A slot first: past the limit, connections wait in the backlog, not in memory here.
        let slot = tokio::select! {
            slot = Arc::clone(&slots).acquire_owned() => slot,
            _ = stop.wait_for(|s| *s) => break,
        };
        let Ok(slot) = slot else { break };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stop.wait_for(|s| *s) => break,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of file descriptors, typically: wait a little rather than spin.
                tracing::warn!("HTTP: cannot accept a connection: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        while connections.try_join_next().is_some() {}
        connections.spawn(serve_connection(
            stream,
            app.clone(),
            limits,
            closing_rx.clone(),
            slot,
        ));
    }
    drop(listener);
    let _ = closing.send(true);
    let drained = tokio::time::timeout(limits.drain, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            "HTTP: {} connection(s) still open {:?} after the stop signal; closed",
            connections.len(),
            limits.drain
        );
        connections.abort_all();
    }
}

/// One HTTP/1.1 connection, holding its `_slot` until it ends.
async fn serve_connection(
    stream: tokio::net::TcpStream,
    app: Router,
    limits: HttpLimits,
    mut closing: watch::Receiver<bool>,
    _slot: OwnedSemaphorePermit,
) {
    let app = TowerToHyperService::new(app);
    let service = hyper::service::service_fn(move |request| {
        let answer = hyper::service::Service::call(&app, request);
        async move {
            match tokio::time::timeout(limits.request_timeout, answer).await {
                Ok(answered) => answered,
                Err(_) => Ok((
                    StatusCode::REQUEST_TIMEOUT,
                    "request not received in time\n",
                )
                    .into_response()),
            }
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(MAX_HEAD_BYTES);
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    let mut connection = std::pin::pin!(connection);
    tokio::select! {
        _ = connection.as_mut() => return,
        _ = closing.wait_for(|c| *c) => connection.as_mut().graceful_shutdown(),
    }
    // Finishes the request under way, if any; `serve` cuts it after its drain time.
    let _ = connection.await;
}

/// 200 while the loop makes progress; 503 once it has finished nothing for
/// [`Schedule::stale_after`], so that the kubelet restarts a stuck controller.
async fn healthz(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    if let Some(idle) = shared.stuck_for() {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "stuck: no pass, promotion or verification finished for {}s (limit {}s)\n",
                idle.as_secs(),
                shared.stale_after.as_secs()
            ),
        )
    } else {
        (StatusCode::OK, "ok\n".to_string())
    }
}

async fn readyz(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    if shared.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "first pass not finished\n")
    }
}

async fn metrics_page(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    (
        [(
            "content-type",
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        shared.metrics.encode(),
    )
}

async fn webhook_delivery(
    State(shared): State<Arc<Shared>>,
    Path(sender): Path<String>,
    Query(query): Query<BTreeMap<String, String>>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> impl IntoResponse {
    let Some(sender) = Sender::from_path(&sender) else {
        return (
            StatusCode::NOT_FOUND,
            "unknown webhook sender\n".to_string(),
        );
    };
    let record = |result: &str| {
        metrics::inc(
            &shared.metrics.webhooks,
            WebhookLabels {
                sender: sender.name().to_string(),
                result: result.to_string(),
            },
        )
    };
    let Some(secret) = shared.webhook_secret.as_deref() else {
        record("unauthorized");
        tracing::warn!(
            sender = sender.name(),
            "webhook refused: no {WEBHOOK_SECRET_ENV} is configured"
        );
        return (
            StatusCode::UNAUTHORIZED,
            "webhooks are not enabled\n".to_string(),
        );
    };
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let authenticate = |body: &[u8]| {
        webhook::authenticate(
            sender,
            secret,
            header("authorization"),
            header("x-hub-signature-256"),
            query.get("token").map(String::as_str),
            body,
        )
    };
    // A shared secret (header or URL) is checked before a byte of the body is read: without
    // it, nothing is buffered. A signature needs the body, read up to the limit.
    let early = if sender.signs_body() {
        Ok(())
    } else {
        authenticate(b"")
    };
    let announced = header("content-length").and_then(|n| n.trim().parse::<u64>().ok());
    // Held until the signature is checked.
    let _reading = if sender.signs_body() {
        match shared.unverified_bodies.try_acquire() {
            Ok(permit) => Some(permit),
            Err(_) => {
                record("busy");
                return (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "too many signed deliveries being read; try again\n".to_string(),
                );
            }
        }
    } else {
        None
    };
    let checked = match early {
        Err(rejection) => Err(rejection),
        Ok(()) if announced.is_some_and(|n| n > MAX_WEBHOOK_BYTES as u64) => {
            record("bad_payload");
            return (
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("body larger than {MAX_WEBHOOK_BYTES} bytes\n"),
            );
        }
        Ok(()) => match axum::body::to_bytes(body, MAX_WEBHOOK_BYTES).await {
            Err(_) => {
                record("bad_payload");
                return (
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("body larger than {MAX_WEBHOOK_BYTES} bytes, or cut off\n"),
                );
            }
            Ok(body) => if sender.signs_body() {
                authenticate(&body)
            } else {
                Ok(())
            }
            .and_then(|()| webhook::pushed_repositories(sender, &body)),
        },
    };
    match checked {
        Ok(names) => {
            record("accepted");
            tracing::info!(sender = sender.name(), "webhook names {}", names.join(", "));
            shared.queue(names);
            (StatusCode::ACCEPTED, "queued\n".to_string())
        }
        Err(rejection) => {
            record(if rejection.status() == 401 {
                "unauthorized"
            } else {
                "bad_payload"
            });
            // The rejection never holds the secret or the signature.
            tracing::warn!(sender = sender.name(), "webhook refused: {rejection}");
            let status =
                StatusCode::from_u16(rejection.status()).unwrap_or(StatusCode::BAD_REQUEST);
            (status, format!("{rejection}\n"))
        }
    }
}

/// How long after its merge a tagpin pull request is still verified.
pub const RECENTLY_MERGED: Duration = Duration::from_secs(24 * 3600);

/// The oldest merge (Unix seconds) still verified at `now`: what the forge is asked for.
pub fn merged_since(now: i64) -> i64 {
    now - RECENTLY_MERGED.as_secs() as i64
}

/// tagpin's login on the forge, and the pull requests on branches under `prefix` into `base`
/// that are open or were closed since [`merged_since`] `now`: what may be in flight.
pub async fn in_flight_pull_requests<'f>(
    forge: &'f Forge,
    prefix: &str,
    base: &str,
    now: i64,
) -> Result<(&'f str, Vec<crate::forge::PullRequestInfo>), crate::forge::ForgeError> {
    let me = forge.login().await?;
    let prs = forge
        .pull_requests_with_prefix(prefix, base, merged_since(now))
        .await?;
    Ok((me, prs))
}

/// Whether `pr` is still in flight at `now` (Unix seconds): open, or merged less than
/// [`RECENTLY_MERGED`] ago. A pull request closed without merging is not.
pub fn in_flight_at(pr: &crate::forge::PullRequestInfo, now: i64) -> bool {
    pr.open || pr.merged_at.is_some_and(|t| t > merged_since(now))
}

/// What is in flight, verified between passes until Converged or Failed: open and recently
/// merged tagpin pull requests (pull-request mode), or the target branch's tip (commit mode).
/// The forge's `tagpin/converged` statuses (tagpin's own) say what is already final; the
/// process only remembers what it read there, to spend no call on it again.
pub struct InFlight<'a> {
    pub config: &'a Config,
    pub mirror: &'a Mirror,
    pub forge: Option<&'a Forge>,
    pub registry: &'a Client,
    /// The cluster of `sync`'s pins (the first stage's, with promotion).
    pub cluster: Cluster,
    /// Each promotion stage's cluster, by name: a promotion pull request is verified on the
    /// cluster of the stage it promotes into.
    pub stage_clusters: &'a BTreeMap<String, Cluster>,
    /// Commit mode: the last tip judged Converged or Failed, not checked again.
    pub settled_tip: Mutex<Option<String>>,
    /// Pull-request mode: what is known of each pull request between cycles.
    pub pr_memory: Mutex<PrMemory>,
    /// The time compared with merge times ([`in_flight_at`]).
    pub clock: Clock,
    /// For how long after a commit landed (tagpin's pin, a merge) a workload it names that
    /// does not exist yet is awaited rather than failed ([`verify::grace`]): the pass interval.
    pub grace: Duration,
}

/// One thing to verify: its source, its pull request, the stage a promotion goes into, the
/// commit whose final verdict ends its verification, and when what is verified landed (Unix
/// seconds: a merge time, a commit time), when known.
type InFlightItem<'c> = (
    Source,
    Option<u64>,
    Option<&'c Stage>,
    Option<String>,
    Option<i64>,
);

/// What the verification of pull requests remembers between cycles, so that a cycle spends
/// no GitHub call on what cannot have changed. Lost on restart: one status read per pull
/// request rebuilds it.
#[derive(Debug, Default)]
pub struct PrMemory {
    /// Pull request -> the commit whose verdict is final (Converged or Failed, set by tagpin):
    /// not verified again until that commit changes (a push to an open one, its merge).
    settled: BTreeMap<u64, String>,
    /// Pull request -> the commit whose `tagpin/converged` status was read and not final: a
    /// final verdict on it can only come from this process (recorded in `settled`), so the
    /// status is not read again.
    read: BTreeMap<u64, String>,
    /// Pull requests left alone (forks, promotion branches tagpin did not open), logged once.
    ignored: BTreeSet<u64>,
}

/// Why a pull request on a tagpin branch is not tagpin's to verify, if it is not. Its plan
/// block chooses what is read from the cluster and the verdict (live images, digests, pod
/// counts) is posted back to it, so it must come from this repository, not a fork; and a
/// promotion, from tagpin itself (`me`, the token's login).
pub fn not_ours(pr: &crate::forge::PullRequestInfo, promotion: bool, me: &str) -> Option<String> {
    if !pr.same_repository {
        return Some(format!(
            "its branch {} is in a fork, not in this repository (opened by {})",
            pr.head_ref, pr.author
        ));
    }
    if promotion && pr.author != me {
        return Some(format!(
            "promotion branch {} opened by {}, not by tagpin ({me})",
            pr.head_ref, pr.author
        ));
    }
    None
}

/// Whether tagpin's own `tagpin/converged` status on the commit that ends a pull request's
/// verification is a final verdict (Converged or Failed): that pull request is not verified
/// again.
pub fn final_status(state: Option<StatusState>) -> bool {
    matches!(state, Some(StatusState::Success | StatusState::Failure))
}

impl InFlight<'_> {
    async fn verify(&self, families: &mut Families, metrics: &Metrics) {
        if let Err(e) = self.verify_all(families, metrics).await {
            tracing::warn!("verification: {e}");
        }
    }

    async fn verify_all(
        &self,
        families: &mut Families,
        metrics: &Metrics,
    ) -> Result<(), VerifyError> {
        let target = &self.config.repository.branch;
        let mut sources: Vec<InFlightItem> = Vec::new();
        // Merge commits of the promotions in flight, verified or settled as promotions.
        let mut promotion_merges: Vec<String> = Vec::new();
        if let Some(forge) = self.forge {
            let now = (self.clock)();
            // The forge's pull requests are one source of work among others: when they
            // cannot be listed, the commit-mode tip below is still verified.
            let listed = in_flight_pull_requests(
                forge,
                &self.config.pull_request.branch_prefix,
                target,
                now,
            )
            .await;
            let (me, prs) = match listed {
                Ok(listed) => listed,
                Err(e) => {
                    count_error(metrics, "forge");
                    tracing::warn!(
                        "cannot list tagpin pull requests, none verified this round: {e}"
                    );
                    ("", Vec::new())
                }
            };
            for pr in prs {
                let stage = promote::stage_of_branch(self.config, &pr.head_ref);
                if let Some(why) = not_ours(&pr, stage.is_some(), me) {
                    if lock(&self.pr_memory).ignored.insert(pr.number) {
                        let name = forge.noun().name(pr.number);
                        tracing::warn!("{name} is not verified: {why}");
                    }
                    continue;
                }
                // Sync's own pull requests only in pull-request mode; a promotion only once
                // merged, since no cluster can run an unmerged promotion.
                let skip = match stage {
                    None => self.config.mode != WriteMode::PullRequest,
                    Some(_) => !pr.merged,
                };
                if skip {
                    continue;
                }
                if !in_flight_at(&pr, now) {
                    continue;
                }
                let final_sha = if pr.merged {
                    pr.merge_commit_sha.clone()
                } else {
                    Some(pr.head_sha.clone())
                };
                if let (Some(_), Some(sha)) = (stage, &final_sha) {
                    promotion_merges.push(sha.clone());
                }
                // A final verdict on that commit ends the verification, open or merged.
                if let Some(sha) = &final_sha {
                    let (settled, read) = {
                        let memory = lock(&self.pr_memory);
                        (
                            memory.settled.get(&pr.number) == Some(sha),
                            memory.read.get(&pr.number) == Some(sha),
                        )
                    };
                    if settled {
                        continue;
                    }
                    // A promotion's merge commit may also be the branch's tip, and a status
                    // on it may be the commit-mode verdict of the first stage: only this
                    // process's own final verdict on the promotion ends its verification.
                    if !read && stage.is_none() {
                        // One unreadable status skips that pull request this round, not all.
                        let status =
                            match forge.status_of(sha, verify::report::STATUS_CONTEXT).await {
                                Ok(status) => status,
                                Err(e) => {
                                    count_error(metrics, "forge");
                                    tracing::warn!(
                                    "{}: cannot read its {} status, not verified this round: {e}",
                                    forge.noun().name(pr.number),
                                    verify::report::STATUS_CONTEXT
                                );
                                    continue;
                                }
                            };
                        let mut memory = lock(&self.pr_memory);
                        if final_status(status.map(|(state, _)| state)) {
                            memory.settled.insert(pr.number, sha.clone());
                            continue;
                        }
                        memory.read.insert(pr.number, sha.clone());
                    }
                }
                let source = match stage {
                    Some(_) => promote::verification_source(&pr),
                    None => Source::PullRequest(pr.number),
                };
                let landed = pr.merged_at.filter(|_| pr.merged);
                sources.push((source, Some(pr.number), stage, final_sha, landed));
            }
        }
        if self.config.mode == WriteMode::Commit {
            if let Some(oid) = self.mirror.tip(target) {
                let tip = oid.to_string();
                // The merge of a promotion in flight is verified as that promotion, on its
                // stage's cluster: the first stage's verdict must not be posted on it too (one
                // commit, one `tagpin/converged` status), and its first-stage paths are its
                // parent's, verified before the promotion could open.
                if promotion_merges.contains(&tip) {
                    *lock(&self.settled_tip) = Some(tip.clone());
                } else if lock(&self.settled_tip).as_deref() != Some(tip.as_str()) {
                    let landed = self.mirror.commit_time(oid).ok();
                    sources.push((Source::Commit(tip), None, None, None, landed));
                }
            }
        }
        let now = (self.clock)();
        for (source, pr, stage, final_sha, landed) in sources {
            let (config, cluster) = match stage {
                Some(stage) => match self.stage_clusters.get(&stage.name) {
                    Some(cluster) => (promote::stage_config(self.config, stage), cluster),
                    None => {
                        tracing::warn!(
                            "cannot verify {source:?}: no cluster for stage {}",
                            stage.name
                        );
                        continue;
                    }
                },
                None => (self.config.clone(), &self.cluster),
            };
            // Each source is independent: one that cannot be verified (a pull request whose body
            // lost its plan block, an API server that times out) is counted, logged and left
            // for the next round; the others are still verified.
            let expectations =
                match verify::expectations(&source, &config, self.mirror, self.forge).await {
                    Ok(expectations) => expectations,
                    Err(e) => {
                        count_error(metrics, error_kind(&e));
                        tracing::warn!("cannot verify {source:?}: {e}");
                        continue;
                    }
                };
            if expectations.expected.is_empty()
                && expectations.not_verified.is_empty()
                && expectations.failures.is_empty()
            {
                continue;
            }
            let check = match verify::check(&expectations, cluster, self.registry, families).await {
                Ok(check) => check,
                Err(e) => {
                    count_error(metrics, error_kind(&e));
                    tracing::warn!("cannot verify {source:?}: {e}");
                    continue;
                }
            };
            let check = match landed.is_some_and(|t| grace::is_young(t, now, self.grace)) {
                true => {
                    let unchecked = check.unchecked(&expectations);
                    grace::not_created_yet(check, unchecked)
                }
                false => check,
            };
            metrics::inc(
                &metrics.verdicts,
                VerdictLabels {
                    verdict: check.state.as_str().to_string(),
                    source: match (pr, landed) {
                        (None, _) => "branch",
                        (Some(_), Some(_)) => "merged",
                        (Some(_), None) => "open",
                    }
                    .to_string(),
                },
            );
            tracing::info!("{source:?}: {}", check.summary);
            if let (Source::Commit(sha), None, Verdict::Converged | Verdict::Failed) =
                (&source, pr, check.state)
            {
                *lock(&self.settled_tip) = Some(sha.clone());
            }
            if let Some(forge) = self.forge {
                verify::publish(forge, pr, &expectations, &check).await;
            }
            if let (Some(pr), Some(sha), Verdict::Converged | Verdict::Failed) =
                (pr, final_sha, check.state)
            {
                lock(&self.pr_memory).settled.insert(pr, sha);
            }
        }
        Ok(())
    }
}

/// The bounded metric label for a verification that could not be made.
fn error_kind(e: &VerifyError) -> &'static str {
    match e {
        VerifyError::Forge(_) => "forge",
        VerifyError::Git(_) => "git",
        VerifyError::Live(_) => "kubernetes",
        VerifyError::Filter(_) | VerifyError::NoForge | VerifyError::MissingPath { .. } => {
            "configuration"
        }
        VerifyError::NoPlanBlock(_) => "no_plan_block",
        VerifyError::FromFork { .. } => "fork",
    }
}

fn count_error(metrics: &Metrics, kind: &str) {
    metrics::inc(
        &metrics.verification_errors,
        ErrorLabels {
            kind: kind.to_string(),
        },
    );
}

/// The promotion step of every pass: each stage after the first is promoted from the one
/// before it, verified on that stage's cluster.
pub struct Promotions<'a> {
    pub promoter: Promoter<'a>,
    /// Each stage's cluster, by name. A stage whose cluster could not be set up at start is
    /// missing: promotions from it are skipped with a warning on every pass.
    pub clusters: &'a BTreeMap<String, Cluster>,
}

/// The promotion into one stage, as one pass left it.
pub struct StagePromotion<'c> {
    pub source: &'c Stage,
    pub target: &'c Stage,
    /// `None`: the source stage has no cluster, so nothing was verified or written.
    pub result: Option<Result<promote::PromoteReport, promote::PromoteError>>,
}

impl<'a> Promotions<'a> {
    async fn run(&self, metrics: &Metrics) {
        self.run_each(metrics).await;
    }

    /// Promotes into each stage after the first, in order, and returns what each found: the
    /// operator writes it to the object's status; `tagpin run` logs it (done here).
    pub async fn run_each(&self, metrics: &Metrics) -> Vec<StagePromotion<'a>> {
        let mut done = Vec::new();
        let config: &'a Config = self.promoter.config;
        let Some(promotion) = &config.promotion else {
            return done;
        };
        for target in promotion.stages.iter().skip(1) {
            let Some(source) = promotion.source_of(&target.name) else {
                continue;
            };
            let Some(cluster) = self.clusters.get(&source.name) else {
                tracing::warn!(
                    "promotion into {}: no cluster for stage {} ({}); skipped",
                    target.name,
                    source.name,
                    source.cluster
                );
                done.push(StagePromotion {
                    source,
                    target,
                    result: None,
                });
                continue;
            };
            let result = self
                .promoter
                .run(&target.name, cluster, PromoteOptions::default())
                .await;
            let gate = match &result {
                Ok(report) => match report.gate {
                    Gate::Open { .. } => "open",
                    Gate::Soaking { .. } => "soaking",
                    Gate::Waiting { .. } => "waiting",
                    Gate::Refused { .. } => "refused",
                },
                Err(_) => "error",
            };
            metrics::inc(
                &metrics.promotions,
                PromotionLabels {
                    stage: target.name.clone(),
                    gate: gate.to_string(),
                },
            );
            match &result {
                Ok(report) => {
                    for failure in &report.failures {
                        tracing::warn!("promotion into {}: {failure}", target.name);
                    }
                    tracing::info!(
                        "promotion {} -> {}: {}; {:?}",
                        source.name,
                        target.name,
                        report.reason,
                        report.outcome
                    );
                }
                Err(e) => tracing::warn!("promotion into {}: {e}", target.name),
            }
            done.push(StagePromotion {
                source,
                target,
                result: Some(result),
            });
        }
        done
    }
}

/// How often the loop wakes and when: passes every `interval`, verification every
/// `verify_every` (when there is a cluster to verify against), at most one webhook pass per
/// `webhook_window`; and how long work under way may go on after a stop signal.
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    pub interval: Duration,
    pub verify_every: Duration,
    /// `--webhook-window` ([`WEBHOOK_WINDOW`] by default; zero holds nothing back).
    pub webhook_window: Duration,
    pub grace: Duration,
}

impl Schedule {
    /// How long the loop may go without finishing any work before `/healthz` fails:
    /// [`LIVENESS_INTERVALS`] times the interval.
    pub fn stale_after(&self) -> Duration {
        self.interval.saturating_mul(LIVENESS_INTERVALS)
    }
}

/// Runs `work` to its end, unless a stop signal comes and `grace` passes after it: then
/// `None`, and `work` is dropped where it stands.
pub async fn within_grace<T>(
    stop: &watch::Receiver<bool>,
    grace: Duration,
    work: impl std::future::Future<Output = T>,
) -> Option<T> {
    let mut stop = stop.clone();
    let deadline = async move {
        if stop.wait_for(|s| *s).await.is_err() {
            // No stop signal can come any more: no deadline either.
            std::future::pending::<()>().await;
        }
        tokio::time::sleep(grace).await;
    };
    tokio::select! {
        out = work => Some(out),
        _ = deadline => None,
    }
}

fn stopping(stop: &watch::Receiver<bool>) -> bool {
    *stop.borrow()
}

/// Runs passes (and verifies what is in flight) until `stop` turns true.
pub async fn reconcile(
    syncer: &Syncer<'_>,
    registry: &Client,
    in_flight: Option<&InFlight<'_>>,
    promotions: Option<&Promotions<'_>>,
    shared: Arc<Shared>,
    schedule: Schedule,
    mut stop: watch::Receiver<bool>,
) {
    let mut answers: BTreeMap<ResolveKey, ResolveResult> = BTreeMap::new();
    let mut families = Families::default();
    let mut timetable = Timetable::new(
        schedule.interval,
        schedule.verify_every,
        schedule.webhook_window,
        Instant::now(),
        in_flight.is_some(),
    );
    loop {
        let Some(trigger) = timetable.wait(&shared.wake, &mut stop).await else {
            return;
        };
        let stopped = |what: &str| {
            tracing::warn!(
                "stopped during {what} after the {:?} grace period; the next start carries on",
                schedule.grace
            );
        };
        match trigger {
            Trigger::Verify => {
                if let Some(in_flight) = in_flight {
                    if !verify_round(in_flight, &mut families, &shared, &stop, schedule).await {
                        return stopped("a verification");
                    }
                }
                timetable.verified(Instant::now());
                continue;
            }
            Trigger::Schedule => {
                answers.clear();
                timetable.pass_started(Instant::now(), timetable::random_unit());
            }
            Trigger::Webhook => {
                // At once: what arrives from now on waits for the follow-up pass.
                let names = shared.take_pending();
                if names.is_empty() {
                    // A wake-up left by deliveries a pass already took.
                    continue;
                }
                timetable.webhook_pass_started(Instant::now());
                answers.retain(|key, result| {
                    result.is_ok() && !names.contains(&format!("{}/{}", key.domain, key.repository))
                });
            }
        }
        let started = Instant::now();
        let pass = syncer.run_with(SyncOptions::default(), &mut answers);
        let Some(result) = within_grace(&stop, schedule.grace, pass).await else {
            return stopped("a pass");
        };
        // Failed answers are asked again next time; good ones are kept until the schedule.
        answers.retain(|_, r| r.is_ok());
        record_pass(&shared, registry, trigger, started.elapsed(), &result);
        shared.ready.store(true, Ordering::Relaxed);
        shared.progressed();
        if let Some(promotions) = promotions {
            if stopping(&stop) {
                return;
            }
            let promoted = promotions.run(&shared.metrics);
            if within_grace(&stop, schedule.grace, promoted)
                .await
                .is_none()
            {
                return stopped("a promotion");
            }
            shared.progressed();
        }
        if let Some(in_flight) = in_flight {
            if stopping(&stop) {
                return;
            }
            if !verify_round(in_flight, &mut families, &shared, &stop, schedule).await {
                return stopped("a verification");
            }
            timetable.verified(Instant::now());
        }
    }
}

/// Everything `tagpin run` was given, checked: the configuration, the clients it built from it,
/// and where to listen.
pub struct Setup<'a> {
    pub config: &'a Config,
    pub registry: &'a Client,
    pub forge: Option<&'a Forge>,
    pub cache_dir: &'a std::path::Path,
    pub listen: SocketAddr,
    /// A port of its own for probes and metrics (`--health-listen`).
    pub health_listen: Option<SocketAddr>,
    pub schedule: Schedule,
    /// Each Kubernetes API request's timeout (`--kube-timeout`).
    pub api_timeout: Duration,
    /// With `--leader-elect`: the candidate for the Lease. The loop runs only while it leads.
    pub leader: Option<crate::leader::Elector>,
}

/// Why the controller could not start.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Sync(#[from] crate::sync::SyncError),
    /// Boxed: the largest cause, and rare.
    #[error(transparent)]
    Promote(Box<crate::promote::PromoteError>),
    #[error("{0}")]
    Listen(String),
    /// The leader could not renew its Lease, or another replica took it: this process
    /// stops acting and exits non-zero, and Kubernetes restarts it as a standby.
    #[error("lost the leadership ({0}); exiting so that this replica restarts as a standby")]
    LostLeadership(String),
}

/// `tagpin run`: sets up the HTTP side, the clusters to verify and promote on, and runs the
/// loop until SIGTERM or SIGINT.
pub async fn run(setup: Setup<'_>) -> Result<(), DaemonError> {
    let Setup {
        config,
        registry: client,
        forge,
        cache_dir,
        listen,
        health_listen,
        schedule,
        api_timeout,
        leader,
    } = setup;
    let syncer = Syncer::new(config, client, forge, cache_dir)?;
    let secret = crate::config::read_env(WEBHOOK_SECRET_ENV).ok();
    if secret.is_none() {
        tracing::warn!(
            "{} is not set: webhooks are refused, passes run on the schedule only",
            WEBHOOK_SECRET_ENV
        );
    }
    let listener = bind(listen).await.map_err(DaemonError::Listen)?;
    let health_listener = match health_listen {
        Some(addr) => Some(bind(addr).await.map_err(DaemonError::Listen)?),
        None => None,
    };
    let shared = Shared::new(secret, schedule.stale_after());
    shared.metrics.pass_interval.set(seconds(schedule.interval));
    let stop = stop_signal(schedule.grace);
    let mut servers = vec![tokio::spawn(serve(
        listener,
        shared.clone(),
        stop.clone(),
        HttpLimits::default(),
        Routes::All,
    ))];
    if let Some(health_listener) = health_listener {
        servers.push(tokio::spawn(serve(
            health_listener,
            shared.clone(),
            stop.clone(),
            HttpLimits::default(),
            Routes::Probes,
        )));
    }
    // Each promotion stage's cluster; a stage that cannot be set up is warned about here and
    // its promotions are skipped (each pass says so), the rest of the controller runs.
    let mut stage_clusters = std::collections::BTreeMap::new();
    for stage in config.promotion.iter().flat_map(|p| &p.stages) {
        match crate::promote::connect(stage, api_timeout).await {
            Ok(cluster) => {
                stage_clusters.insert(stage.name.clone(), cluster);
            }
            Err(e) => tracing::warn!("{e}"),
        }
    }
    // Verification is on when a cluster is reachable; the controller pins without one. With
    // promotion, sync pins the first stage, whose cluster is its own.
    let first_stage = config.promotion.as_ref().map(|p| &p.stages[0]);
    let cluster = match (&config.verify.context, first_stage) {
        (None, Some(stage)) => crate::promote::connect(stage, api_timeout)
            .await
            .map_err(|e| e.to_string()),
        (context, _) => Cluster::connect(context.as_deref(), api_timeout)
            .await
            .map_err(|e| e.to_string()),
    };
    let in_flight = match cluster {
        Ok(cluster) => Some(InFlight {
            config,
            mirror: &syncer.mirror,
            forge,
            registry: client,
            cluster,
            stage_clusters: &stage_clusters,
            settled_tip: std::sync::Mutex::default(),
            pr_memory: std::sync::Mutex::default(),
            clock: crate::clock::system(),
            grace: schedule.interval,
        }),
        Err(e) => {
            tracing::warn!("no cluster to verify against ({e}); pinning only");
            None
        }
    };
    let promotions = match &config.promotion {
        Some(_) => Some(Promotions {
            promoter: Promoter::new(config, client, forge, &syncer.mirror)
                .map_err(|e| DaemonError::Promote(Box::new(e)))?,
            clusters: &stage_clusters,
        }),
        None => None,
    };
    // Series at zero, so that the alerts see the first Failed verdict or refused promotion.
    if in_flight.is_some() {
        shared.metrics.zero_verifications();
    }
    if let Some(promotion) = &config.promotion {
        let targets = promotion.stages.iter().skip(1);
        shared
            .metrics
            .zero_promotions(targets.map(|stage| stage.name.as_str()));
    }
    tracing::info!(
        "tagpin run: listening on {listen}, a pass every {:?}",
        schedule.interval
    );
    let leadership = match leader {
        None => {
            shared.metrics.set_leader("", true);
            None
        }
        Some(elector) => match stand_by(elector, &shared, stop.clone()).await {
            Some(leadership) => Some(leadership),
            // Stopped while standing by: nothing was started.
            None => {
                join_servers(servers).await;
                return Ok(());
            }
        },
    };
    let work = reconcile(
        &syncer,
        client,
        in_flight.as_ref(),
        promotions.as_ref(),
        shared,
        schedule,
        stop,
    );
    work_while_leading(work, leadership, servers)
        .await
        .map_err(DaemonError::LostLeadership)
}

/// Runs `work` to its end (a graceful stop), then gives the Lease up so that a standby takes
/// over at once, and waits for the HTTP servers to drain. Shared by `tagpin run` and the
/// operator. `Err` with the reason when the Lease is lost first: acting stops at once, the
/// work under way is dropped as in a crash (a push is one Git call, never half made), and the
/// next leader's pass completes it. Without election (`None`) the work simply runs.
pub async fn work_while_leading(
    work: impl std::future::Future<Output = ()>,
    mut leadership: Option<crate::leader::Leadership>,
    servers: Vec<tokio::task::JoinHandle<()>>,
) -> Result<(), String> {
    match &mut leadership {
        None => work.await,
        Some(held) => {
            tokio::select! {
                () = work => {}
                reason = held.lost() => return Err(reason),
            }
        }
    }
    if let Some(held) = leadership {
        if let Err(e) = held.release().await {
            tracing::warn!("{e}; a standby takes over when the Lease expires");
        }
    }
    join_servers(servers).await;
    Ok(())
}

/// Waits for the HTTP servers, which stop on the stop signal and let open connections finish.
pub async fn join_servers(servers: Vec<tokio::task::JoinHandle<()>>) {
    for server in servers {
        let _ = server.await;
    }
}

/// Waits for the Lease, `None` if a stop signal comes first. A standby is alive (its
/// `/healthz` stays 200, it is doing its job) but not ready: `/readyz` stays 503, so the
/// Service sends webhooks to the leader only.
pub async fn stand_by(
    elector: crate::leader::Elector,
    shared: &Shared,
    mut stop: watch::Receiver<bool>,
) -> Option<crate::leader::Leadership> {
    tracing::info!(
        "leader election: {} is a candidate; passes start once it leads",
        elector.identity()
    );
    let lease = elector.lease_name().to_string();
    shared.metrics.set_leader(&lease, false);
    let acquire = elector.acquire();
    tokio::pin!(acquire);
    let mut alive = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            leadership = &mut acquire => {
                shared.metrics.set_leader(&lease, true);
                return Some(leadership);
            }
            _ = alive.tick() => shared.progressed(),
            _ = stop.wait_for(|s| *s) => return None,
        }
    }
}

/// One verification round under the grace period; false when a stop cut it short.
async fn verify_round(
    in_flight: &InFlight<'_>,
    families: &mut Families,
    shared: &Shared,
    stop: &watch::Receiver<bool>,
    schedule: Schedule,
) -> bool {
    let verified = in_flight.verify(families, &shared.metrics);
    if within_grace(stop, schedule.grace, verified).await.is_none() {
        return false;
    }
    shared.progressed();
    true
}

fn record_pass(
    shared: &Shared,
    registry: &Client,
    trigger: Trigger,
    elapsed: Duration,
    result: &Result<crate::sync::SyncReport, crate::sync::SyncError>,
) {
    let m = &shared.metrics;
    m.pass_seconds.observe(elapsed.as_secs_f64());
    m.observe_registry(registry);
    let outcome = match result {
        Ok(report) if report.has_failures() => "partial",
        Ok(_) => "ok",
        Err(_) => "error",
    };
    metrics::inc(
        &m.passes,
        PassLabels {
            outcome: outcome.to_string(),
            trigger: match trigger {
                Trigger::Schedule | Trigger::Verify => "schedule",
                Trigger::Webhook => "webhook",
            }
            .to_string(),
        },
    );
    match result {
        Err(e) => tracing::error!("pass failed: {e}"),
        Ok(report) => {
            m.resolve_seconds.observe(report.resolve_time.as_secs_f64());
            for failure in &report.failures {
                tracing::warn!("{failure}");
            }
            for group in &report.groups {
                match &group.outcome {
                    Outcome::Committed { commit, branch, .. } => {
                        m.commits.inc();
                        tracing::info!("committed {commit} to {branch}");
                    }
                    Outcome::PullRequestOpened { number, .. } => {
                        metrics::inc(
                            &m.pull_requests,
                            ActionLabels {
                                action: "opened".into(),
                            },
                        );
                        tracing::info!("opened {}", report.noun.name(*number));
                    }
                    Outcome::PullRequestUpdated { number, .. } => {
                        metrics::inc(
                            &m.pull_requests,
                            ActionLabels {
                                action: "updated".into(),
                            },
                        );
                        tracing::info!("updated {}", report.noun.name(*number));
                    }
                    _ => {}
                }
            }
            if !report.has_failures() {
                m.last_success.set(crate::clock::unix_now());
            }
        }
    }
}

/// Turns true on SIGTERM or SIGINT; `grace` only words the log line.
pub fn stop_signal(grace: Duration) -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        let terminate = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = terminate => {},
            _ = tokio::signal::ctrl_c() => {},
        }
        tracing::info!("stop signal received; finishing within {grace:?}");
        let _ = tx.send(true);
    });
    rx
}

/// Binds the listen address, with the address in the error.
pub async fn bind(addr: SocketAddr) -> Result<tokio::net::TcpListener, String> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))
}

/// Whole seconds of `d` for a gauge, saturated.
pub fn seconds(d: Duration) -> i64 {
    i64::try_from(d.as_secs()).unwrap_or(i64::MAX)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pr(author: &str, same_repository: bool) -> crate::forge::PullRequestInfo {
        crate::forge::PullRequestInfo {
            number: 7,
            open: true,
            merged: false,
            title: String::new(),
            body: String::new(),
            labels: Vec::new(),
            url: String::new(),
            head_ref: "tagpin/promote/production".into(),
            head_sha: "0".repeat(40),
            merge_commit_sha: None,
            merged_at: None,
            updated_at: None,
            author: author.into(),
            same_repository,
        }
    }

    #[test]
    fn forks_and_promotions_tagpin_did_not_open_are_not_verified() {
        assert_eq!(not_ours(&pr("tagpin-bot", true), true, "tagpin-bot"), None);
        // Sync adopts a collaborator's pull request on its branch; a promotion is tagpin's.
        assert_eq!(not_ours(&pr("alice", true), false, "tagpin-bot"), None);
        let promotion = not_ours(&pr("alice", true), true, "tagpin-bot").unwrap();
        assert!(
            promotion.contains("opened by alice, not by tagpin"),
            "{promotion}"
        );
        for promotion in [false, true] {
            let fork = not_ours(&pr("tagpin-bot", false), promotion, "tagpin-bot").unwrap();
            assert!(fork.contains("in a fork"), "{fork}");
        }
    }

    #[test]
    fn healthz_allows_three_intervals_without_progress() {
        let schedule = Schedule {
            interval: Duration::from_secs(300),
            verify_every: Duration::from_secs(30),
            webhook_window: WEBHOOK_WINDOW,
            grace: GRACE_PERIOD,
        };
        assert_eq!(schedule.stale_after(), Duration::from_secs(900));
    }

    #[tokio::test(start_paused = true)]
    async fn work_under_way_gets_the_grace_period_after_a_stop_and_no_more() {
        let (tx, rx) = watch::channel(false);
        let grace = Duration::from_secs(30);
        // Without a stop, work ends as it ends.
        assert_eq!(within_grace(&rx, grace, async { 7 }).await, Some(7));

        tx.send(true).unwrap();
        let started = Instant::now();
        let hung = within_grace(&rx, grace, std::future::pending::<()>()).await;
        assert_eq!(hung, None);
        assert_eq!(started.elapsed(), grace, "cut right at the grace period");
        // Work that ends within the grace period ends normally.
        let slow = async {
            tokio::time::sleep(grace - Duration::from_secs(1)).await;
            8
        };
        assert_eq!(within_grace(&rx, grace, slow).await, Some(8));
    }

    fn merged(minutes_ago: i64, now: i64) -> crate::forge::PullRequestInfo {
        crate::forge::PullRequestInfo {
            open: false,
            merged: true,
            merged_at: Some(now - minutes_ago * 60),
            ..pr("tagpin-bot", true)
        }
    }

    #[test]
    fn a_pull_request_merged_within_the_window_is_verified_one_merged_before_it_is_not() {
        let now = 1_800_000_000;
        let window = (RECENTLY_MERGED.as_secs() / 60) as i64;
        assert!(in_flight_at(&merged(1, now), now));
        assert!(in_flight_at(&merged(window - 1, now), now));
        assert!(!in_flight_at(&merged(window, now), now));
        assert!(!in_flight_at(&merged(window + 1, now), now));
        // The forge is asked for exactly that window.
        assert_eq!(merged_since(now), now - window * 60);
        // Open: in flight however old; closed unmerged: never.
        assert!(in_flight_at(&pr("tagpin-bot", true), now));
        let closed = crate::forge::PullRequestInfo {
            open: false,
            ..pr("tagpin-bot", true)
        };
        assert!(!in_flight_at(&closed, now));
    }

    async fn health(shared: &Arc<Shared>) -> (StatusCode, String) {
        let response = healthz(State(shared.clone())).await.into_response();
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), 1024)
            .await
            .unwrap();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test(start_paused = true)]
    async fn healthz_fails_once_nothing_finished_for_the_stuck_limit() {
        let limit = Duration::from_secs(900);
        let shared = Shared::new(None, limit);
        // Starting counts as progress.
        tokio::time::advance(limit).await;
        assert_eq!(health(&shared).await.0, StatusCode::OK);
        tokio::time::advance(Duration::from_secs(1)).await;
        let (status, body) = health(&shared).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(body.contains("for 901s (limit 900s)"), "{body}");

        // Finished work makes it healthy again, for the limit again.
        shared.progressed();
        assert_eq!(health(&shared).await.0, StatusCode::OK);
        tokio::time::advance(limit - Duration::from_secs(1)).await;
        assert_eq!(health(&shared).await.0, StatusCode::OK);
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(health(&shared).await.0, StatusCode::SERVICE_UNAVAILABLE);
    }

    fn names(list: &[&str]) -> BTreeSet<String> {
        list.iter().map(|n| n.to_string()).collect()
    }

    /// The loop's own steps for a webhook (its wait, then taking what is queued), with
    /// deliveries queued the way the webhook endpoint queues them.
    async fn next_webhook_pass(
        timetable: &mut Timetable,
        shared: &Shared,
        stop: &mut watch::Receiver<bool>,
    ) -> Option<BTreeSet<String>> {
        loop {
            match timetable.wait(&shared.wake, stop).await? {
                Trigger::Webhook => {
                    let names = shared.take_pending();
                    if !names.is_empty() {
                        timetable.webhook_pass_started(Instant::now());
                        return Some(names);
                    }
                }
                Trigger::Schedule | Trigger::Verify => return None,
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn deliveries_during_a_pass_become_exactly_one_follow_up_pass() {
        let interval = Duration::from_secs(300);
        let shared = Shared::new(None, interval * LIVENESS_INTERVALS);
        let (_tx, mut stop) = watch::channel(false);
        let start = Instant::now();
        let mut timetable = Timetable::new(
            interval,
            Duration::from_secs(30),
            WEBHOOK_WINDOW,
            start,
            false,
        );
        assert_eq!(
            timetable.wait(&shared.wake, &mut stop).await,
            Some(Trigger::Schedule)
        );
        timetable.pass_started(start, 0.5);

        // Leading edge: the first delivery starts a pass at once.
        shared.queue(names(&["r.io/acme/web"]));
        assert_eq!(
            next_webhook_pass(&mut timetable, &shared, &mut stop).await,
            Some(names(&["r.io/acme/web"]))
        );
        assert_eq!(Instant::now(), start);

        // While that pass runs, five deliveries come, two of them naming api.
        for _ in 0..3 {
            shared.queue(names(&["r.io/acme/web"]));
        }
        shared.queue(names(&["r.io/acme/api"]));
        shared.queue(names(&["r.io/acme/api"]));
        tokio::time::advance(Duration::from_secs(20)).await;

        // One follow-up pass, as soon as the first one is over (it outlasted the webhook
        // window), for both repositories.
        assert_eq!(
            next_webhook_pass(&mut timetable, &shared, &mut stop).await,
            Some(names(&["r.io/acme/api", "r.io/acme/web"]))
        );
        assert_eq!(Instant::now(), start + Duration::from_secs(20));
        // Four of the five rode along with another.
        assert_eq!(shared.metrics.webhook_coalesced.get(), 4);
        // And no other: the next wake-up is the scheduled pass.
        assert_eq!(
            next_webhook_pass(&mut timetable, &shared, &mut stop).await,
            None
        );
        assert_eq!(Instant::now(), start + interval);
    }

    #[tokio::test(start_paused = true)]
    async fn a_delivery_naming_nothing_wakes_no_pass() {
        let interval = Duration::from_secs(300);
        let shared = Shared::new(None, interval * LIVENESS_INTERVALS);
        let (_tx, mut stop) = watch::channel(false);
        let start = Instant::now();
        let mut timetable = Timetable::new(
            interval,
            Duration::from_secs(30),
            WEBHOOK_WINDOW,
            start,
            false,
        );
        timetable.pass_started(start, 0.5);
        shared.queue(Vec::new());
        assert_eq!(
            timetable.wait(&shared.wake, &mut stop).await,
            Some(Trigger::Schedule)
        );
        assert_eq!(Instant::now(), start + interval);
    }

    /// Five deliveries of one burst, 5 ms apart, queued as the webhook endpoint queues them.
    async fn burst(shared: &Shared, name: &str) {
        for i in 0..5 {
            if i > 0 {
                tokio::time::advance(Duration::from_millis(5)).await;
            }
            shared.queue(names(&[name]));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_of_five_deliveries_is_one_pass_at_once_and_one_at_the_window_end() {
        let interval = Duration::from_secs(300);
        let shared = Shared::new(None, interval * LIVENESS_INTERVALS);
        let (_tx, mut stop) = watch::channel(false);
        let start = Instant::now();
        let mut timetable = Timetable::new(
            interval,
            Duration::from_secs(30),
            WEBHOOK_WINDOW,
            start,
            false,
        );
        timetable.pass_started(start, 0.5);
        tokio::time::advance(Duration::from_secs(10)).await;
        let first = Instant::now();

        // The first delivery's pass starts at once and takes 2 ms; the burst goes on.
        shared.queue(names(&["r.io/acme/web"]));
        assert_eq!(
            next_webhook_pass(&mut timetable, &shared, &mut stop).await,
            Some(names(&["r.io/acme/web"]))
        );
        assert_eq!(Instant::now(), first);
        tokio::time::advance(Duration::from_millis(2)).await;
        burst(&shared, "r.io/acme/web").await;
        assert_eq!(
            next_webhook_pass(&mut timetable, &shared, &mut stop).await,
            Some(names(&["r.io/acme/web"]))
        );
        assert_eq!(Instant::now(), first + WEBHOOK_WINDOW);
        assert_eq!(
            next_webhook_pass(&mut timetable, &shared, &mut stop).await,
            None,
            "no third webhook pass"
        );
        // Six deliveries, two passes.
        assert_eq!(shared.metrics.webhook_coalesced.get(), 4);
    }

    /// The operator's webhook path: the same window, through [`Shared::next_delivery`].
    #[tokio::test(start_paused = true)]
    async fn the_operator_takes_a_burst_at_once_then_once_at_the_window_end() {
        let shared = Shared::new(None, Duration::from_secs(900));
        let mut window = WebhookWindow::new(WEBHOOK_WINDOW);
        let first = Instant::now();
        burst(&shared, "r.io/acme/web").await;
        shared.queue(names(&["r.io/acme/api"]));
        // The whole burst came before the first take: one reconcile of all, at once.
        assert_eq!(
            shared.next_delivery(&mut window).await,
            names(&["r.io/acme/api", "r.io/acme/web"])
        );
        assert_eq!(Instant::now(), first + Duration::from_millis(20));
        let taken = Instant::now();
        burst(&shared, "r.io/acme/web").await;
        assert_eq!(
            shared.next_delivery(&mut window).await,
            names(&["r.io/acme/web"])
        );
        assert_eq!(Instant::now(), taken + WEBHOOK_WINDOW);
        // Past the window, a delivery is taken at once again.
        tokio::time::advance(WEBHOOK_WINDOW).await;
        let late = Instant::now();
        shared.queue(names(&["r.io/acme/api"]));
        assert_eq!(
            shared.next_delivery(&mut window).await,
            names(&["r.io/acme/api"])
        );
        assert_eq!(Instant::now(), late);
        assert_eq!(shared.metrics.webhook_coalesced.get(), 5 + 4);
    }
}
