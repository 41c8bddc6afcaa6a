//! `tagpin run`: the long-running controller, from its setup ([`run`]) to the loop.
//!
//! A sync pass every `interval` (with jitter, so many controllers do not hit a registry in
//! step), and a targeted pass as soon as a registry webhook arrives (leading edge: the first
//! delivery is never held back to wait for others). Passes never overlap: one task runs them
//! one after another, and at most one webhook pass starts per webhook window (1 s by
//! default): the deliveries that arrive while a pass runs or within the window are merged into
//! one follow-up pass at its end (their repositories gather in one set, and a
//! `tokio::sync::Notify` keeps a single wake-up however many arrive), never dropped and never
//! one pass each, so a burst of
//! pushes of one tag makes at most two commits, the last one pinning the last digest. State
//! lives in Git and on the forge, so a restart repeats nothing; between passes the controller
//! only keeps registry answers, to re-ask just the images a webhook names. When the loop
//! wakes, and why, is decided apart from its I/O (`daemon/timetable.rs`), on tokio's clock,
//! so tests move paused time instead of waiting.
//!
//! Each pass is one [`crate::cycle`] over the repository (sync, verify and audit, promote),
//! whose steps are mapped to run's logs and metrics as they end; between passes the cycle's
//! verification step runs alone every `verify_every`. The HTTP side is [`crate::server`]; the
//! stop signal, the grace period and leadership are [`crate::lifecycle`]: the operator shares
//! all three and the cycle. A pass stopped between its push and its PR update is completed by
//! the next start (the branch already carries the change, the PR gets opened).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::config::Config;
use crate::cycle::{self, Cycle, CycleReport, Own, Reach, RepoState, Step};
use crate::forge::ForgeClient;
use crate::lifecycle::{lead, stop_signal, stopping, within_grace, work_while_leading};
use crate::notify::Transport;
use crate::promote::round::Promotions;
use crate::promote::Promoter;
use crate::registry::Client;
use crate::server::{self, Listening, Shared, WEBHOOK_SECRET_ENV};
use crate::sync::{Outcome, Syncer};

mod timetable;
mod verdicts;

use timetable::{Timetable, Trigger};

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

/// Runs cycles (and verifies what is in flight between them) until `stop` turns true.
pub async fn reconcile(
    cycle: &Cycle<'_>,
    shared: Arc<Shared>,
    schedule: Schedule,
    mut stop: watch::Receiver<bool>,
    (board, teller): (&crate::ui::Board, &crate::notify::Teller),
) {
    let repository = cycle::events::repository_name(&cycle.config.repository.url);
    let about = cycle::events::About {
        repository: &repository,
        config: cycle.config,
    };
    let mut state = RepoState::default();
    let verifies = cycle.verifies();
    let mut timetable = Timetable::new(
        schedule.interval,
        schedule.verify_every,
        schedule.webhook_window,
        Instant::now(),
        verifies,
    );
    loop {
        let Some(trigger) = timetable.wait(&shared.wake, &mut stop).await else {
            return;
        };
        match trigger {
            Trigger::Verify => {
                let tip = cycle.branch_tip();
                let now = (cycle.clock)();
                let verified = cycle.verify_and_audit(&mut state, (tip.clone(), tip), now);
                let Some(verified) = within_grace(&stop, schedule.grace, verified).await else {
                    return stopped("a verification", schedule.grace);
                };
                if let Some(verification) = &verified {
                    verdicts::record(cycle.config, verification, &shared.metrics);
                    let key = (repository.as_str(), cycle.config);
                    crate::ui::record_verification(board, key, verification, now);
                    shared.progressed();
                    let events = cycle::events::of_verification(verification, now, about);
                    publish((board, teller), events);
                }
                timetable.verified(Instant::now());
                continue;
            }
            Trigger::Schedule => {
                state.answers.clear();
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
                state.answers.retain(|key, result| {
                    result.is_ok() && !names.contains(&format!("{}/{}", key.domain, key.repository))
                });
            }
        }
        let started = Instant::now();
        let mut verified = false;
        // What runs now, for the warning of a stop that cuts it short.
        let running = std::cell::Cell::new("a pass");
        let mut after_each = |step: Step, report: &CycleReport<'_>| {
            after_step(cycle, &shared, (trigger, started), step, report);
            // The board's key is the repository's name as events carry it (no credentials).
            let key = (repository.as_str(), cycle.config);
            let tip = (step == Step::Synced).then(|| cycle.branch_tip().map(|t| t.sha));
            crate::ui::record_step(board, key, step, report, tip.flatten());
            verified |= step == Step::Verified && report.verification.is_some();
            running.set(match step {
                Step::Synced if cycle.verifies() => "a verification",
                Step::Synced | Step::Verified => "a promotion",
                Step::Promoted => "a pass",
            });
            !stopping(&stop)
        };
        let done = cycle.run(&mut state, &mut after_each);
        let Some(report) = within_grace(&stop, schedule.grace, done).await else {
            return stopped(running.get(), schedule.grace);
        };
        publish((board, teller), cycle::events::of_cycle(&report, about));
        // Failed answers are asked again next time; good ones are kept until the schedule.
        state.answers.retain(|_, r| r.is_ok());
        if report.stopped {
            return;
        }
        let delivery = crate::ui::delivery_after_cycle(board, cycle, &shared.metrics, &repository);
        delivery.await;
        if verified {
            timetable.verified(Instant::now());
        }
    }
}

/// Says that a stop signal cut `what` short once `grace` had passed.
fn stopped(what: &str, grace: Duration) {
    tracing::warn!(
        "stopped during {what} after the {grace:?} grace period; the next start carries on"
    );
}

/// Shows `events` on the dashboard's timeline and tells them to the configured receivers.
fn publish(
    (board, teller): (&crate::ui::Board, &crate::notify::Teller),
    events: Vec<crate::event::Event>,
) {
    board.record(events.clone());
    teller.tell(events);
}

/// What `tagpin run` records after each step of a cycle: the pass's metrics and logs and
/// readiness after sync, the verdicts after verification (promotions log and count
/// themselves), and progress for `/healthz`.
fn after_step(
    cycle: &Cycle<'_>,
    shared: &Shared,
    (trigger, started): (Trigger, Instant),
    step: Step,
    report: &CycleReport<'_>,
) {
    match step {
        Step::Synced => {
            record_pass(
                shared,
                cycle.registry,
                trigger,
                started.elapsed(),
                &report.sync,
            );
            shared.metrics.observe_mirror(&cycle.syncer.mirror);
            shared.mark_ready();
        }
        Step::Verified => {
            let Some(verification) = &report.verification else {
                return;
            };
            verdicts::record(cycle.config, verification, &shared.metrics);
        }
        Step::Promoted => {
            shared.metrics.observe_mirror(&cycle.syncer.mirror);
        }
    }
    shared.progressed();
}

/// Everything `tagpin run` was given, checked: the configuration, the clients it built from it,
/// and where to listen.
pub struct Setup<'a> {
    pub config: &'a Config,
    pub registry: &'a Client,
    pub forge: Option<&'a ForgeClient>,
    pub cache_dir: &'a std::path::Path,
    pub listen: SocketAddr,
    /// A port of its own for probes and metrics (`--health-listen`).
    pub health_listen: Option<SocketAddr>,
    pub schedule: Schedule,
    /// Each Kubernetes API request's timeout (`--kube-timeout`).
    pub api_timeout: Duration,
    /// With `--leader-elect`: the candidate for the Lease. The loop runs only while it leads.
    pub leader: Option<crate::leader::Elector>,
    /// `--ui-listen`: where the dashboard is served (`--ui-auth none`: `run` serves one team).
    pub ui_listen: Option<SocketAddr>,
}

/// Why the controller could not start.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Sync(#[from] crate::sync::SyncError),
    /// Boxed: the largest cause, and rare.
    #[error(transparent)]
    Promote(Box<crate::promote::PromoteError>),
    #[error(transparent)]
    Listen(#[from] crate::server::ListenError),
    #[error(transparent)]
    LostLeadership(#[from] crate::lifecycle::LostLeadership),
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
        ui_listen,
    } = setup;
    let syncer = Syncer::new(config, client, forge, cache_dir)?;
    let secret = crate::config::read_env(WEBHOOK_SECRET_ENV).ok();
    if secret.is_none() {
        tracing::warn!(
            "{} is not set: webhooks are refused, passes run on the schedule only",
            WEBHOOK_SECRET_ENV
        );
    }
    let stop = stop_signal(schedule.grace);
    let Listening {
        shared,
        mut servers,
    } = server::listen(listen, health_listen, secret, schedule.interval, &stop).await?;
    let board = crate::ui::Board::default();
    if let Some(addr) = ui_listen {
        let auth = crate::ui::UiAuth::None;
        servers.push(crate::ui::start(addr, board.clone(), auth, &stop).await?);
    }
    // Each promotion stage's cluster, and the one sync's pins are verified on. A stage that
    // cannot be set up is warned about here and its promotions are skipped (each pass says
    // so); verification is on when a cluster is reachable: the controller pins without one.
    let clusters = cycle::clusters::set_up(
        config,
        |stage| Reach::Connect(stage.cluster.clone()),
        Own::Connect(config.verify.context.as_deref()),
        api_timeout,
    )
    .await;
    for problem in &clusters.problems {
        tracing::warn!("{problem}");
    }
    if clusters.verify_on.is_none() {
        tracing::warn!("no cluster to verify against; pinning only");
    }
    let promotions = match &config.promotion {
        Some(_) => Some(Promotions {
            promoter: Promoter::new(config, client, forge, &syncer.mirror)
                .map_err(|e| DaemonError::Promote(Box::new(e)))?,
            clusters: &clusters.stages,
        }),
        None => None,
    };
    // Series at zero, so that the alerts see the first Failed verdict or refused promotion.
    if clusters.verify_on.is_some() {
        shared.metrics.zero_verifications();
    }
    if let Some(promotion) = &config.promotion {
        let targets = promotion.stages.iter().skip(1);
        shared
            .metrics
            .zero_promotions(targets.map(|stage| stage.name.as_str()));
    }
    let metrics = shared.clone();
    let cycle = Cycle {
        config,
        syncer: &syncer,
        registry: client,
        forge,
        clusters: &clusters,
        promotions: promotions.as_ref(),
        grace: schedule.interval,
        clock: crate::clock::system(),
        metrics: &metrics.metrics,
    };
    tracing::info!(
        "tagpin run: listening on {listen}, a pass every {:?}",
        schedule.interval
    );
    let Ok(leadership) = lead(leader, &shared, &stop, &mut servers).await else {
        return Ok(());
    };
    let teller = crate::notify::Teller {
        notifications: crate::notify::Notifications::new(shared.clone(), Transport::Any),
        cache_dir: syncer.mirror.cache_dir().to_path_buf(),
        targets: crate::notify::targets_from_env(&config.notifications),
    };
    let work = reconcile(&cycle, shared, schedule, stop, (&board, &teller));
    Ok(work_while_leading(work, leadership, servers).await?)
}

fn record_pass(
    shared: &Shared,
    registry: &Client,
    trigger: Trigger,
    elapsed: Duration,
    result: &Result<crate::sync::SyncReport, crate::sync::SyncError>,
) {
    let trigger = match trigger {
        Trigger::Schedule | Trigger::Verify => cycle::counts::Trigger::Schedule,
        Trigger::Webhook => cycle::counts::Trigger::Webhook,
    };
    cycle::counts::sync(&shared.metrics, trigger, elapsed, result);
    shared.metrics.observe_registry(registry);
    let report = match result {
        Ok(report) => report,
        Err(e) => {
            tracing::error!("pass failed: {e}");
            return;
        }
    };
    for failure in &report.failures {
        tracing::warn!("{failure}");
    }
    for held in &report.held {
        tracing::info!("{held}");
    }
    for group in &report.groups {
        match &group.outcome {
            Outcome::Committed { commit, branch, .. } => {
                tracing::info!("committed {commit} to {branch}");
            }
            Outcome::PullRequestOpened { number, .. } => {
                tracing::info!("opened {}", report.noun.name(*number));
            }
            Outcome::PullRequestUpdated { number, .. } => {
                tracing::info!("updated {}", report.noun.name(*number));
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::tests::{burst, names};
    use crate::server::{LIVENESS_INTERVALS, WEBHOOK_WINDOW};
    use std::collections::BTreeSet;

    const INTERVAL: Duration = Duration::from_secs(300);

    /// What the loop holds when nothing verifies: its shared side, a stop never sent, and its
    /// timetable started now with a pass every [`INTERVAL`].
    struct Loop {
        shared: Arc<Shared>,
        _tx: watch::Sender<bool>,
        stop: watch::Receiver<bool>,
        timetable: Timetable,
    }

    fn quiet_loop() -> Loop {
        let (_tx, stop) = watch::channel(false);
        Loop {
            shared: Shared::new(None, INTERVAL * LIVENESS_INTERVALS),
            _tx,
            stop,
            timetable: Timetable::new(
                INTERVAL,
                Duration::from_secs(30),
                WEBHOOK_WINDOW,
                Instant::now(),
                false,
            ),
        }
    }

    impl Loop {
        /// The loop's own steps for a webhook (its wait, then taking what is queued), with
        /// deliveries queued the way the webhook endpoint queues them.
        async fn next_webhook_pass(&mut self) -> Option<BTreeSet<String>> {
            loop {
                match self.wait().await? {
                    Trigger::Webhook => {
                        let names = self.shared.take_pending();
                        if !names.is_empty() {
                            self.timetable.webhook_pass_started(Instant::now());
                            return Some(names);
                        }
                    }
                    Trigger::Schedule | Trigger::Verify => return None,
                }
            }
        }

        async fn wait(&mut self) -> Option<Trigger> {
            self.timetable.wait(&self.shared.wake, &mut self.stop).await
        }
    }

    /// A quiet loop whose first pass started at `start`.
    fn after_a_pass(start: Instant) -> Loop {
        let mut looped = quiet_loop();
        looped.timetable.pass_started(start, 0.5);
        looped
    }

    #[tokio::test(start_paused = true)]
    async fn deliveries_during_a_pass_become_exactly_one_follow_up_pass() {
        let start = Instant::now();
        let mut looped = quiet_loop();
        assert_eq!(looped.wait().await, Some(Trigger::Schedule));
        looped.timetable.pass_started(start, 0.5);

        // Leading edge: the first delivery starts a pass at once.
        looped.shared.queue(names(&["r.io/acme/web"]));
        assert_eq!(
            looped.next_webhook_pass().await,
            Some(names(&["r.io/acme/web"]))
        );
        assert_eq!(Instant::now(), start);

        // While that pass runs, five deliveries come, two of them naming api.
        for _ in 0..3 {
            looped.shared.queue(names(&["r.io/acme/web"]));
        }
        looped.shared.queue(names(&["r.io/acme/api"]));
        looped.shared.queue(names(&["r.io/acme/api"]));
        tokio::time::advance(Duration::from_secs(20)).await;

        // One follow-up pass, as soon as the first one is over (it outlasted the webhook
        // window), for both repositories.
        assert_eq!(
            looped.next_webhook_pass().await,
            Some(names(&["r.io/acme/api", "r.io/acme/web"]))
        );
        assert_eq!(Instant::now(), start + Duration::from_secs(20));
        // Four of the five rode along with another.
        assert_eq!(looped.shared.metrics.webhook_coalesced.get(), 4);
        // And no other: the next wake-up is the scheduled pass.
        assert_eq!(looped.next_webhook_pass().await, None);
        assert_eq!(Instant::now(), start + INTERVAL);
    }

    #[tokio::test(start_paused = true)]
    async fn a_delivery_naming_nothing_wakes_no_pass() {
        let start = Instant::now();
        let mut looped = after_a_pass(start);
        looped.shared.queue(Vec::new());
        assert_eq!(looped.wait().await, Some(Trigger::Schedule));
        assert_eq!(Instant::now(), start + INTERVAL);
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_of_five_deliveries_is_one_pass_at_once_and_one_at_the_window_end() {
        let mut looped = after_a_pass(Instant::now());
        tokio::time::advance(Duration::from_secs(10)).await;
        let first = Instant::now();

        // The first delivery's pass starts at once and takes 2 ms; the burst goes on.
        looped.shared.queue(names(&["r.io/acme/web"]));
        assert_eq!(
            looped.next_webhook_pass().await,
            Some(names(&["r.io/acme/web"]))
        );
        assert_eq!(Instant::now(), first);
        tokio::time::advance(Duration::from_millis(2)).await;
        burst(&looped.shared, "r.io/acme/web").await;
        assert_eq!(
            looped.next_webhook_pass().await,
            Some(names(&["r.io/acme/web"]))
        );
        assert_eq!(Instant::now(), first + WEBHOOK_WINDOW);
        assert_eq!(
            looped.next_webhook_pass().await,
            None,
            "no third webhook pass"
        );
        // Six deliveries, two passes.
        assert_eq!(looped.shared.metrics.webhook_coalesced.get(), 4);
    }
}
