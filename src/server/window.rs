//! The webhook window shared by `tagpin run`'s loop and the operator's webhook path.
//!
//! Webhook passes have a leading edge and a window: the first delivery starts a pass at once,
//! and a registry that announces one tag five times in 25 ms (a multi-arch push, retries) gets
//! one follow-up pass at the window's end for the other four, which pins the last digest,
//! instead of a commit each.

use std::time::Duration;

use tokio::time::Instant;

/// The default of `--webhook-window`: long enough to gather what one build pushes in a burst
/// (five pushes of a tag arrive within tens of milliseconds), short enough that the last
/// digest of the burst is pinned about a second after it.
pub const WEBHOOK_WINDOW: Duration = Duration::from_secs(1);

/// At most one webhook pass starts per window: a delivery that finds no webhook pass started
/// within the last `length` starts one at once (leading edge); one that arrives sooner is
/// served at the window's end, together with every other that arrived meanwhile: a burst of
/// deliveries makes two passes, so two commits at most where it made one each. Scheduled
/// passes are not held, and do not open a window.
#[derive(Debug, Clone, Copy)]
pub struct WebhookWindow {
    length: Duration,
    /// When the last webhook pass started.
    last_pass: Option<Instant>,
}

impl WebhookWindow {
    /// A zero `length` holds nothing back: every delivery's pass starts as soon as the loop is
    /// free, as before the window existed.
    pub fn new(length: Duration) -> Self {
        WebhookWindow {
            length,
            last_pass: None,
        }
    }

    /// When the pass for a delivery that arrives at `now` may start: `now` unless a webhook
    /// pass started less than the window ago, then at that window's end.
    pub fn start_at(&self, now: Instant) -> Instant {
        match self.last_pass {
            Some(last) if now < last + self.length => last + self.length,
            _ => now,
        }
    }

    /// A webhook pass started at `now`: the next may start a window later.
    pub fn pass_started(&mut self, now: Instant) {
        self.last_pass = Some(now);
    }
}
