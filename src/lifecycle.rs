//! How `tagpin run` and `tagpin operator` start and stop: the stop signal (SIGTERM or SIGINT),
//! the grace period given to work under way after it, and leadership (standing by for the
//! Lease, acting only while it is held, releasing it on a graceful stop).
//!
//! After the signal no new work starts, and the work under way may finish within the grace
//! period (`--grace-period`, 30 s by default), then is dropped where it stands. Git writes are single
//! blocking calls, so stopping never cuts a commit or a push in half.
//!
//! With `--leader-elect` ([`crate::leader`]) the work runs only while this replica holds the
//! Lease. A standby serves `/healthz` (200: standing by is its work) but not `/readyz` (503, so
//! webhooks go to the leader). A stopped leader releases the Lease after its work ended; a
//! leader that loses the Lease drops the work under way and exits non-zero at once, so
//! Kubernetes restarts it as a standby (a push cut short by the exit updates no ref; the new
//! leader's pass redoes it).

use std::time::Duration;

use tokio::sync::watch;

use crate::server::Shared;

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

pub fn stopping(stop: &watch::Receiver<bool>) -> bool {
    *stop.borrow()
}

/// The leader could not renew its Lease, or another replica took it, with the reason the
/// election gave: this process stops acting and exits non-zero, and Kubernetes restarts it as a
/// standby.
#[derive(Debug, thiserror::Error)]
#[error("lost the leadership ({0}); exiting so that this replica restarts as a standby")]
pub struct LostLeadership(pub String);

/// Runs `work` to its end (a graceful stop), then gives the Lease up so that a standby takes
/// over at once, and waits for the HTTP servers to drain. Shared by `tagpin run` and the
/// operator. `Err` with the reason when the Lease is lost first: acting stops at once, the
/// work under way is dropped as in a crash (a push is one Git call, never half made), and the
/// next leader's pass completes it. Without election (`None`) the work simply runs.
pub async fn work_while_leading(
    work: impl std::future::Future<Output = ()>,
    mut leadership: Option<crate::leader::Leadership>,
    servers: Vec<tokio::task::JoinHandle<()>>,
) -> Result<(), LostLeadership> {
    match &mut leadership {
        None => work.await,
        Some(held) => {
            tokio::select! {
                () = work => {}
                reason = held.lost() => return Err(LostLeadership(reason)),
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

/// A stop signal came while this replica stood by: nothing was started.
#[derive(Debug)]
pub struct StoppedStandingBy;

/// The leadership to act under: `None` without `--leader-elect` (this replica acts alone),
/// the Lease once this replica holds it ([`stand_by`]), or [`StoppedStandingBy`] after
/// waiting for the HTTP servers to drain.
pub async fn lead(
    leader: Option<crate::leader::Elector>,
    shared: &Shared,
    stop: &watch::Receiver<bool>,
    servers: &mut Vec<tokio::task::JoinHandle<()>>,
) -> Result<Option<crate::leader::Leadership>, StoppedStandingBy> {
    let Some(elector) = leader else {
        shared.metrics.set_leader("", true);
        return Ok(None);
    };
    match stand_by(elector, shared, stop.clone()).await {
        Some(leadership) => Ok(Some(leadership)),
        None => {
            join_servers(std::mem::take(servers)).await;
            Err(StoppedStandingBy)
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::Instant;

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
}
