//! When `tagpin run`'s loop wakes, and why: the scheduled pass every interval (with jitter),
//! a webhook's pass (at once, or at the end of the webhook window), a verification round
//! every `verify_every`, or a stop.
//!
//! Webhook passes have a leading edge and a window ([`WebhookWindow`]): the first delivery
//! starts a pass at once, and a registry that announces one tag five times in 25 ms (a
//! multi-arch push, retries) gets one follow-up pass at the window's end for the other four,
//! which pins the last digest, instead of a commit each. The operator's webhook path keeps the
//! same window.
//!
//! Apart from the loop's I/O so that its timing is tested with tokio's paused time: every
//! deadline here is a [`tokio::time::Instant`], which the paused clock moves, and every wait
//! is a tokio timer.

use std::time::Duration;

use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use crate::server::WebhookWindow;

/// Fraction of the interval by which each wait is randomly shortened or lengthened, so that
/// many controllers started together do not hit a registry in step.
pub const JITTER: f64 = 0.1;

/// Why the loop woke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    Schedule,
    Webhook,
    Verify,
}

/// The loop's next deadlines.
#[derive(Debug, Clone, Copy)]
pub struct Timetable {
    interval: Duration,
    verify_every: Duration,
    /// When the next scheduled pass is due.
    next_pass: Instant,
    /// When the next verification round is due; `None` without a cluster to verify against.
    next_verify: Option<Instant>,
    webhooks: WebhookWindow,
    /// A delivery came inside the window: its pass is due at this instant, the window's end.
    held_webhook: Option<Instant>,
}

impl Timetable {
    /// The first pass is due at `now`; the first verification round `verify_every` later
    /// (the first pass is followed by one anyway), if `verifying`. Webhook passes start at
    /// most one per `webhook_window`.
    pub fn new(
        interval: Duration,
        verify_every: Duration,
        webhook_window: Duration,
        now: Instant,
        verifying: bool,
    ) -> Self {
        Timetable {
            interval,
            verify_every,
            next_pass: now,
            next_verify: verifying.then(|| now + verify_every),
            webhooks: WebhookWindow::new(webhook_window),
            held_webhook: None,
        }
    }

    /// Waits for the next reason to work: a due pass or verification round, or a webhook
    /// delivery (`wake`): at once if no webhook pass started within the window (the first
    /// delivery is never held back), else at the window's end. `None` once `stop` turns true
    /// (or its sender is gone).
    ///
    /// [`Notify`] keeps at most one wake-up, and a held delivery is due once: however many
    /// deliveries came since the last webhook pass, they are served by one.
    pub async fn wait(
        &mut self,
        wake: &Notify,
        stop: &mut watch::Receiver<bool>,
    ) -> Option<Trigger> {
        loop {
            let (verify_at, held) = (self.next_verify, self.held_webhook);
            tokio::select! {
                _ = tokio::time::sleep_until(self.next_pass) => return Some(Trigger::Schedule),
                _ = wake.notified() => {
                    let now = Instant::now();
                    let due = self.webhooks.start_at(now);
                    if due <= now {
                        self.held_webhook = None;
                        return Some(Trigger::Webhook);
                    }
                    // Inside the window: due at its end, with whatever else arrives until then.
                    self.held_webhook = Some(due);
                }
                _ = sleep_until_some(held) => {
                    self.held_webhook = None;
                    return Some(Trigger::Webhook);
                }
                _ = sleep_until_some(verify_at) => return Some(Trigger::Verify),
                _ = stop.wait_for(|s| *s) => return None,
            }
        }
    }

    /// A webhook pass starts at `now` (the loop found deliveries to serve): the next one waits
    /// for the end of the window this opens.
    pub fn webhook_pass_started(&mut self, now: Instant) {
        self.webhooks.pass_started(now);
    }

    /// A scheduled pass starts at `now`: the next one is due an interval later, lengthened or
    /// shortened by `unit` (in [0, 1): 0 is -[`JITTER`], 0.5 none, towards 1 +[`JITTER`]).
    /// Passes a webhook starts leave the schedule as it is.
    pub fn pass_started(&mut self, now: Instant, unit: f64) {
        self.next_pass = now + jittered(self.interval, unit);
    }

    /// A verification round ended at `now` (on its own or after a pass): the next one is due
    /// `verify_every` later.
    pub fn verified(&mut self, now: Instant) {
        if self.next_verify.is_some() {
            self.next_verify = Some(now + self.verify_every);
        }
    }
}

/// Never, for `None`.
async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// `interval` shortened or lengthened by up to [`JITTER`] of itself, `unit` in [0, 1)
/// choosing where (values outside are clamped).
pub fn jittered(interval: Duration, unit: f64) -> Duration {
    let unit = if unit.is_finite() {
        unit.clamp(0.0, 1.0)
    } else {
        0.5
    };
    interval.mul_f64(1.0 - JITTER + 2.0 * JITTER * unit)
}

/// A number in [0, 1) that differs from call to call, for the jitter: the system clock's
/// nanoseconds (no randomness crate for this; the spread only needs to differ between
/// processes).
pub fn random_unit() -> f64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    f64::from(nanos % 10_000) / 10_000.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::WEBHOOK_WINDOW;

    const INTERVAL: Duration = Duration::from_secs(300);
    const VERIFY_EVERY: Duration = Duration::from_secs(30);

    /// What the loop waits on beside the timetable: webhooks' wake-up and the stop signal.
    struct Signals {
        wake: Notify,
        stop_tx: watch::Sender<bool>,
        stop: watch::Receiver<bool>,
    }

    impl Signals {
        fn new() -> Signals {
            let (stop_tx, stop) = watch::channel(false);
            Signals {
                wake: Notify::new(),
                stop_tx,
                stop,
            }
        }

        /// Waits on `timetable` as the loop does.
        async fn wait(&mut self, timetable: &mut Timetable) -> Option<Trigger> {
            timetable.wait(&self.wake, &mut self.stop).await
        }

        /// Waits on `timetable` as the loop does, and asserts what woke it and when.
        async fn assert_woken(&mut self, timetable: &mut Timetable, trigger: Trigger, at: Instant) {
            assert_eq!(self.wait(timetable).await, Some(trigger));
            assert_eq!(Instant::now(), at, "woken by {trigger:?}");
        }

        /// A webhook delivery comes now, and the wait that follows ends for it at `at`.
        async fn assert_delivery_served(&mut self, timetable: &mut Timetable, at: Instant) {
            self.wake.notify_one();
            self.assert_woken(timetable, Trigger::Webhook, at).await;
        }
    }

    #[test]
    fn jitter_stays_within_ten_percent() {
        let hundred = Duration::from_secs(100);
        assert_eq!(jittered(hundred, 0.0), Duration::from_secs(90));
        assert_eq!(jittered(hundred, 0.5), hundred);
        assert_eq!(jittered(hundred, 1.0), Duration::from_secs(110));
        assert_eq!(jittered(hundred, 7.0), Duration::from_secs(110));
        assert_eq!(jittered(hundred, f64::NAN), hundred);
        for _ in 0..100 {
            let d = jittered(hundred, random_unit());
            assert!(
                d >= Duration::from_secs(90) && d <= Duration::from_secs(110),
                "{d:?}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_pass_is_at_once_and_the_next_one_an_interval_later_not_before() {
        let mut signals = Signals::new();
        let start = Instant::now();
        let mut timetable = Timetable::new(INTERVAL, VERIFY_EVERY, WEBHOOK_WINDOW, start, false);
        // The first pass waits for nothing.
        signals
            .assert_woken(&mut timetable, Trigger::Schedule, start)
            .await;
        timetable.pass_started(Instant::now(), 0.5);
        // The pass takes a while; the interval counts from its start.
        tokio::time::advance(Duration::from_secs(40)).await;

        let early = tokio::time::timeout(
            INTERVAL - Duration::from_secs(41),
            signals.wait(&mut timetable),
        )
        .await;
        assert!(
            early.is_err(),
            "a second pass before the interval: {early:?}"
        );
        assert_eq!(Instant::now(), start + INTERVAL - Duration::from_secs(1));
        // Due right at the interval.
        signals
            .assert_woken(&mut timetable, Trigger::Schedule, start + INTERVAL)
            .await;
    }

    #[tokio::test(start_paused = true)]
    async fn jitter_moves_the_next_pass_by_at_most_a_tenth_of_the_interval() {
        let mut signals = Signals::new();
        for (unit, after) in [(0.0, 270), (0.99, 329)] {
            let start = Instant::now();
            let mut timetable =
                Timetable::new(INTERVAL, VERIFY_EVERY, WEBHOOK_WINDOW, start, false);
            timetable.pass_started(start, unit);
            assert_eq!(signals.wait(&mut timetable).await, Some(Trigger::Schedule));
            assert_eq!(Instant::now().duration_since(start).as_secs(), after);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn verification_rounds_come_every_verify_every_between_passes() {
        let (mut signals, start, mut timetable) = first_pass_now(true);
        // The pass and the verification round after it end 5 s later.
        tokio::time::advance(Duration::from_secs(5)).await;
        timetable.verified(Instant::now());
        for round in 1..=3u32 {
            signals
                .assert_woken(
                    &mut timetable,
                    Trigger::Verify,
                    start + Duration::from_secs(5) + VERIFY_EVERY * round,
                )
                .await;
            timetable.verified(Instant::now());
        }
        // Without a cluster, no verification round ever comes: only the next pass.
        let mut pins_only = after_first_pass(Instant::now(), false);
        pins_only.verified(Instant::now());
        let at = Instant::now();
        signals
            .assert_woken(&mut pins_only, Trigger::Schedule, at + INTERVAL)
            .await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_stop_ends_the_wait_at_once() {
        let (mut signals, at, mut timetable) = first_pass_now(true);
        signals.stop_tx.send(true).unwrap();
        assert_eq!(signals.wait(&mut timetable).await, None);
        assert_eq!(Instant::now(), at);
    }

    const MS: Duration = Duration::from_millis(1);

    /// A timetable whose scheduled first pass ran at `start`, as the loop leaves it.
    fn after_first_pass(start: Instant, verifying: bool) -> Timetable {
        let mut timetable =
            Timetable::new(INTERVAL, VERIFY_EVERY, WEBHOOK_WINDOW, start, verifying);
        timetable.pass_started(start, 0.5);
        timetable
    }

    /// Fresh signals, and a timetable whose first pass ran now (returned too).
    fn first_pass_now(verifying: bool) -> (Signals, Instant, Timetable) {
        let start = Instant::now();
        (Signals::new(), start, after_first_pass(start, verifying))
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_gets_a_pass_at_once_and_one_follow_up_at_the_window_end() {
        let (mut signals, start, mut timetable) = first_pass_now(false);
        tokio::time::advance(Duration::from_secs(10)).await;

        // Leading edge: the first delivery of the burst starts a pass at once.
        let first = Instant::now();
        signals.assert_delivery_served(&mut timetable, first).await;
        timetable.webhook_pass_started(first);
        // The pass takes 17 ms; four more deliveries come 5 ms apart, during it and after.
        for _ in 0..4 {
            tokio::time::advance(5 * MS).await;
            signals.wake.notify_one();
        }

        // One follow-up, at the window's end, not before.
        let early =
            tokio::time::timeout(WEBHOOK_WINDOW - 21 * MS, signals.wait(&mut timetable)).await;
        assert!(early.is_err(), "a pass inside the window: {early:?}");
        signals
            .assert_woken(&mut timetable, Trigger::Webhook, first + WEBHOOK_WINDOW)
            .await;
        timetable.webhook_pass_started(Instant::now());

        // And no other: the next wake-up is the scheduled pass.
        signals
            .assert_woken(&mut timetable, Trigger::Schedule, start + INTERVAL)
            .await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_delivery_from_the_window_end_on_starts_its_pass_at_once() {
        let (mut signals, start, mut timetable) = first_pass_now(false);
        timetable.webhook_pass_started(start);
        // Just inside the window: held until its end.
        tokio::time::advance(WEBHOOK_WINDOW - MS).await;
        signals
            .assert_delivery_served(&mut timetable, start + WEBHOOK_WINDOW)
            .await;
        timetable.webhook_pass_started(Instant::now());
        // Right at the end of the window that pass opened: at once.
        tokio::time::advance(WEBHOOK_WINDOW).await;
        let at = Instant::now();
        signals.assert_delivery_served(&mut timetable, at).await;
    }

    #[tokio::test(start_paused = true)]
    async fn deliveries_during_a_pass_longer_than_the_window_are_served_as_soon_as_it_ends() {
        let (mut signals, start, mut timetable) = first_pass_now(false);
        signals.wake.notify_one();
        assert_eq!(signals.wait(&mut timetable).await, Some(Trigger::Webhook));
        timetable.webhook_pass_started(start);
        signals.wake.notify_one();
        // The pass takes 20 s; the window is long over when the loop waits again.
        tokio::time::advance(Duration::from_secs(20)).await;
        let ended = Instant::now();
        signals
            .assert_woken(&mut timetable, Trigger::Webhook, ended)
            .await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_held_delivery_lets_a_verification_round_and_a_stop_through() {
        let (mut signals, _, mut timetable) = first_pass_now(true);
        // A webhook pass starts half a window before the first verification round is due.
        tokio::time::advance(VERIFY_EVERY - WEBHOOK_WINDOW / 2).await;
        let pass = Instant::now();
        timetable.webhook_pass_started(pass);
        signals.wake.notify_one();
        // The round due inside the window comes at its time; the held pass after it.
        signals
            .assert_woken(&mut timetable, Trigger::Verify, pass + WEBHOOK_WINDOW / 2)
            .await;
        timetable.verified(Instant::now());
        signals
            .assert_woken(&mut timetable, Trigger::Webhook, pass + WEBHOOK_WINDOW)
            .await;
        timetable.webhook_pass_started(Instant::now());
        // A delivery held again, then a stop: the wait ends at once.
        signals.wake.notify_one();
        let at = Instant::now();
        let waiting = timetable.wait(&signals.wake, &mut signals.stop);
        signals.stop_tx.send(true).unwrap();
        assert_eq!(waiting.await, None);
        assert_eq!(Instant::now(), at);
    }

    #[tokio::test(start_paused = true)]
    async fn a_zero_window_holds_no_delivery_back() {
        let mut signals = Signals::new();
        let start = Instant::now();
        let mut timetable = Timetable::new(INTERVAL, VERIFY_EVERY, Duration::ZERO, start, false);
        timetable.pass_started(start, 0.5);
        for _ in 0..3 {
            signals.wake.notify_one();
            let at = Instant::now();
            signals
                .assert_woken(&mut timetable, Trigger::Webhook, at)
                .await;
            timetable.webhook_pass_started(at);
            tokio::time::advance(MS).await;
        }
    }

    #[test]
    fn the_window_opens_at_each_webhook_pass_start() {
        let t0 = Instant::now();
        let mut window = WebhookWindow::new(Duration::from_secs(1));
        assert_eq!(window.start_at(t0), t0, "no pass yet: at once");
        window.pass_started(t0);
        assert_eq!(window.start_at(t0), t0 + Duration::from_secs(1));
        assert_eq!(
            window.start_at(t0 + Duration::from_millis(999)),
            t0 + Duration::from_secs(1)
        );
        let later = t0 + Duration::from_secs(1);
        assert_eq!(window.start_at(later), later);
        assert_eq!(window.start_at(later + MS), later + MS);
    }
}
