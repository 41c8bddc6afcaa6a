//! When `tagpin run`'s loop wakes, and why: the scheduled pass every interval (with jitter),
//! a webhook's pass at once, a verification round every `verify_every`, or a stop.
//!
//! Apart from the loop's I/O so that its timing is tested with tokio's paused time: every
//! deadline here is a [`tokio::time::Instant`], which the paused clock moves, and every wait
//! is a tokio timer.

use std::time::Duration;

use tokio::sync::{watch, Notify};
use tokio::time::Instant;

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
}

impl Timetable {
    /// The first pass is due at `now`; the first verification round `verify_every` later
    /// (the first pass is followed by one anyway), if `verifying`.
    pub fn new(interval: Duration, verify_every: Duration, now: Instant, verifying: bool) -> Self {
        Timetable {
            interval,
            verify_every,
            next_pass: now,
            next_verify: verifying.then(|| now + verify_every),
        }
    }

    /// Waits for the next reason to work: a due pass or verification round, or a webhook
    /// delivery (`wake`, at once: the first delivery is never held back). `None` once `stop`
    /// turns true (or its sender is gone).
    ///
    /// [`Notify`] keeps at most one wake-up: however many deliveries came since the last
    /// call, they are served by one webhook pass.
    pub async fn wait(&self, wake: &Notify, stop: &mut watch::Receiver<bool>) -> Option<Trigger> {
        let verify_at = self.next_verify;
        tokio::select! {
            _ = tokio::time::sleep_until(self.next_pass) => Some(Trigger::Schedule),
            _ = wake.notified() => Some(Trigger::Webhook),
            _ = sleep_until_some(verify_at) => Some(Trigger::Verify),
            _ = stop.wait_for(|s| *s) => None,
        }
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

    const INTERVAL: Duration = Duration::from_secs(300);
    const VERIFY_EVERY: Duration = Duration::from_secs(30);

    fn never_stopped() -> (watch::Sender<bool>, watch::Receiver<bool>) {
        watch::channel(false)
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
        let (_tx, mut stop) = never_stopped();
        let wake = Notify::new();
        let start = Instant::now();
        let mut timetable = Timetable::new(INTERVAL, VERIFY_EVERY, start, false);
        assert_eq!(
            timetable.wait(&wake, &mut stop).await,
            Some(Trigger::Schedule)
        );
        assert_eq!(Instant::now(), start, "the first pass waits for nothing");
        timetable.pass_started(Instant::now(), 0.5);
        // The pass takes a while; the interval counts from its start.
        tokio::time::advance(Duration::from_secs(40)).await;

        let early = tokio::time::timeout(
            INTERVAL - Duration::from_secs(41),
            timetable.wait(&wake, &mut stop),
        )
        .await;
        assert!(
            early.is_err(),
            "a second pass before the interval: {early:?}"
        );
        assert_eq!(Instant::now(), start + INTERVAL - Duration::from_secs(1));
        assert_eq!(
            timetable.wait(&wake, &mut stop).await,
            Some(Trigger::Schedule)
        );
        assert_eq!(
            Instant::now(),
            start + INTERVAL,
            "due right at the interval"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn jitter_moves_the_next_pass_by_at_most_a_tenth_of_the_interval() {
        let (_tx, mut stop) = never_stopped();
        let wake = Notify::new();
        for (unit, after) in [(0.0, 270), (0.99, 329)] {
            let start = Instant::now();
            let mut timetable = Timetable::new(INTERVAL, VERIFY_EVERY, start, false);
            timetable.pass_started(start, unit);
            assert_eq!(
                timetable.wait(&wake, &mut stop).await,
                Some(Trigger::Schedule)
            );
            assert_eq!(Instant::now().duration_since(start).as_secs(), after);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn verification_rounds_come_every_verify_every_between_passes() {
        let (_tx, mut stop) = never_stopped();
        let wake = Notify::new();
        let start = Instant::now();
        let mut timetable = Timetable::new(INTERVAL, VERIFY_EVERY, start, true);
        timetable.pass_started(start, 0.5);
        // The pass and the verification round after it end 5 s later.
        tokio::time::advance(Duration::from_secs(5)).await;
        timetable.verified(Instant::now());
        for round in 1..=3u32 {
            assert_eq!(
                timetable.wait(&wake, &mut stop).await,
                Some(Trigger::Verify)
            );
            assert_eq!(
                Instant::now(),
                start + Duration::from_secs(5) + VERIFY_EVERY * round
            );
            timetable.verified(Instant::now());
        }
        // Without a cluster, no verification round ever comes: only the next pass.
        let mut pins_only = Timetable::new(INTERVAL, VERIFY_EVERY, Instant::now(), false);
        pins_only.pass_started(Instant::now(), 0.5);
        pins_only.verified(Instant::now());
        let at = Instant::now();
        assert_eq!(
            pins_only.wait(&wake, &mut stop).await,
            Some(Trigger::Schedule)
        );
        assert_eq!(Instant::now(), at + INTERVAL);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stop_ends_the_wait_at_once() {
        let (tx, mut stop) = never_stopped();
        let wake = Notify::new();
        let mut timetable = Timetable::new(INTERVAL, VERIFY_EVERY, Instant::now(), true);
        timetable.pass_started(Instant::now(), 0.5);
        let at = Instant::now();
        tx.send(true).unwrap();
        assert_eq!(timetable.wait(&wake, &mut stop).await, None);
        assert_eq!(Instant::now(), at);
    }
}
