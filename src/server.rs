//! The HTTP side of `tagpin run` and `tagpin operator`: health, readiness, metrics and registry
//! webhooks, with the bounds a port open to the registries needs (header and request timeouts,
//! a connection limit, a drain time after the stop signal), and what it shares with the loop
//! that does the work ([`Shared`]: queued webhook deliveries, progress for `/healthz`).
//!
//! `/healthz` fails once the loop has finished nothing (no pass, no promotion round, no
//! verification round) for [`LIVENESS_INTERVALS`] intervals: every network call has a timeout,
//! so a loop that long without progress is stuck, and Kubernetes restarts the pod.

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

use crate::metrics::{self, *};
use crate::mutex::lock;
use crate::webhook::{self, Sender};

mod window;
pub use window::{WebhookWindow, WEBHOOK_WINDOW};

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
    pub(crate) wake: Notify,
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
    pub(crate) fn take_pending(&self) -> BTreeSet<String> {
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
    stop: watch::Receiver<bool>,
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
    serve_app(listener, app.with_state(shared), stop, limits).await
}

/// Serves `app` on `listener` with the bounds of [`serve`] (header and request timeouts, a
/// connection limit, a drain time after `stop`): every listener of tagpin's is served so,
/// the dashboard's ([`crate::ui`]) too.
pub async fn serve_app(
    listener: tokio::net::TcpListener,
    app: Router,
    mut stop: watch::Receiver<bool>,
    limits: HttpLimits,
) {
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
    let record = |result: &str| record_delivery(&shared, sender, result);
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
    answer(&shared, sender, checked)
}

/// Counts a delivery from `sender` by its result (`tagpin_webhook_deliveries_total`).
fn record_delivery(shared: &Shared, sender: Sender, result: &str) {
    metrics::inc(
        &shared.metrics.webhooks,
        WebhookLabels {
            sender: sender.name().to_string(),
            result: result.to_string(),
        },
    )
}

/// The answer to a delivery read whole: its repositories queued, or why it was refused.
fn answer(
    shared: &Shared,
    sender: Sender,
    checked: Result<Vec<String>, webhook::Rejection>,
) -> (StatusCode, String) {
    let record = |result: &str| record_delivery(shared, sender, result);
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

/// A listen address that could not be bound (in use, not this machine's, no permission).
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {addr}: {source}")]
pub struct ListenError {
    pub addr: SocketAddr,
    #[source]
    pub source: std::io::Error,
}

/// Binds the listen address, with the address in the error.
pub async fn bind(addr: SocketAddr) -> Result<tokio::net::TcpListener, ListenError> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ListenError { addr, source })
}

/// The HTTP side as a controller starts it: [`Shared`] and the servers that serve it.
pub struct Listening {
    pub shared: Arc<Shared>,
    /// Each listener's server; they stop on the stop signal and drain ([`HttpLimits::drain`]).
    pub servers: Vec<tokio::task::JoinHandle<()>>,
}

/// Binds `listen` (every route) and `health_listen` (probes and metrics), then serves them
/// until `stop`. `/healthz` allows [`LIVENESS_INTERVALS`] times `interval` without progress;
/// webhooks are authenticated with `webhook_secret` (refused without one).
pub async fn listen(
    listen: SocketAddr,
    health_listen: Option<SocketAddr>,
    webhook_secret: Option<String>,
    interval: Duration,
    stop: &watch::Receiver<bool>,
) -> Result<Listening, ListenError> {
    let listener = bind(listen).await?;
    let health_listener = match health_listen {
        Some(addr) => Some(bind(addr).await?),
        None => None,
    };
    let shared = Shared::new(webhook_secret, interval.saturating_mul(LIVENESS_INTERVALS));
    shared.metrics.pass_interval.set(seconds(interval));
    let mut servers = vec![tokio::spawn(serve(
        listener,
        shared.clone(),
        stop.clone(),
        HttpLimits::default(),
        Routes::All,
    ))];
    if let Some(listener) = health_listener {
        servers.push(tokio::spawn(serve(
            listener,
            shared.clone(),
            stop.clone(),
            HttpLimits::default(),
            Routes::Probes,
        )));
    }
    Ok(Listening { shared, servers })
}

/// Whole seconds of `d` for a gauge, saturated.
pub fn seconds(d: Duration) -> i64 {
    i64::try_from(d.as_secs()).unwrap_or(i64::MAX)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

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

    pub(crate) fn names(list: &[&str]) -> BTreeSet<String> {
        list.iter().map(|n| n.to_string()).collect()
    }

    /// Five deliveries of one burst, 5 ms apart, queued as the webhook endpoint queues them.
    pub(crate) async fn burst(shared: &Shared, name: &str) {
        for i in 0..5 {
            if i > 0 {
                tokio::time::advance(Duration::from_millis(5)).await;
            }
            shared.queue(names(&[name]));
        }
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
