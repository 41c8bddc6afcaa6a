//! The dashboard (`--ui-listen`): what each repository's stages run, proved digest by digest,
//! why a promotion waits, what is held, and what happened lately, on a listener of its own.
//! [`view`] is the model a driver builds after each cycle (pure), [`board`] the state the
//! driver writes and the pages read, [`http`] the pages and their JSON API, [`auth`] who may
//! see which repository.

pub mod auth;
pub mod board;
pub mod http;
pub mod view;

use std::net::SocketAddr;

use tokio::sync::watch;

pub use auth::UiAuth;
pub use board::Board;
pub use view::RepoView;

use crate::server::{bind, serve_app, HttpLimits, ListenError};

/// Binds `addr` and serves the dashboard of `board` there until `stop`.
pub async fn start(
    addr: SocketAddr,
    board: Board,
    auth: UiAuth,
    stop: &watch::Receiver<bool>,
) -> Result<tokio::task::JoinHandle<()>, ListenError> {
    let listener = bind(addr).await?;
    tracing::info!(
        "dashboard on http://{}",
        listener.local_addr().unwrap_or(addr)
    );
    let app = http::router(board, auth);
    Ok(tokio::spawn(serve_app(
        listener,
        app,
        stop.clone(),
        HttpLimits::default(),
    )))
}

/// Writes what a step of a cycle found to `board`, under the repository `key` that `config`
/// describes (operator: `namespace/name`, whose namespace decides who sees it) (`tip`: the branch's tip, after sync): one call a driver makes after each step.
pub(crate) fn record_step(
    board: &Board,
    (key, config): (&str, &crate::config::Config),
    step: crate::cycle::Step,
    report: &crate::cycle::CycleReport<'_>,
    tip: Option<String>,
) {
    use crate::cycle::Step;
    let new = || RepoView::new(key, config, report.now).in_namespace_of(key);
    match step {
        Step::Synced => board.edit(key, new, |v| v.synced(&report.sync, tip, report.now)),
        Step::Verified => {
            if let Some(verification) = &report.verification {
                board.edit(key, new, |v| v.verified(verification, report.now));
            }
        }
        Step::Promoted => {
            if let Some(promotions) = &report.promotions {
                board.edit(key, new, |v| v.promoted(promotions, report.now));
            }
        }
    }
}

/// Writes a verification round run between passes to `board`.
pub(crate) fn record_verification(
    board: &Board,
    (key, config): (&str, &crate::config::Config),
    verification: &crate::cycle::Verification<'_>,
    now: i64,
) {
    let new = || RepoView::new(key, config, now).in_namespace_of(key);
    board.edit(key, new, |v| v.verified(verification, now));
}

/// Writes the operator's `Ready` condition of the object `key` (`namespace/name`) after a
/// reconcile, putting an object stalled before its cycle on the board too.
pub(crate) fn record_readiness(board: &Board, key: &str, (ready, reason): (bool, &str), now: i64) {
    let new = || RepoView::unconfigured(key, now).in_namespace_of(key);
    board.edit(key, new, |v| {
        v.ready = Some(view::ReadyView {
            ready,
            reason: reason.to_string(),
        });
        v.updated = now;
    });
}

/// After a cycle of the repository `key`: the delivery metrics observe what is new
/// ([`crate::delivery::observe::after_cycle`]), and when the history was read again the board
/// shows its figures (the delivery panel) and its events (the timeline, which so holds what
/// happened before this process started).
pub(crate) async fn delivery_after_cycle(
    board: &Board,
    cycle: &crate::cycle::Cycle<'_>,
    metrics: &crate::metrics::Metrics,
    key: &str,
) {
    let (mirror, now) = (&cycle.syncer.mirror, (cycle.clock)());
    let (config, registry) = (cycle.config, cycle.registry);
    let observed =
        crate::delivery::observe::after_cycle(mirror, config, registry, metrics, (key, now));
    if let Some(delivery) = observed.await {
        board.set_delivery(key, serde_json::to_value(&delivery.report).ok());
        board.record(delivery.events);
    }
}
