//! The wall clock, as one value that can be replaced.
//!
//! Decisions that compare the time with a timestamp from outside (a pull request's merge
//! time, a soak's start read back from a commit status) read it through a [`Clock`], so a
//! test sets the time instead of waiting for it. Durations measured inside the process
//! (the pass interval, `/healthz`'s stuck limit, cache lifetimes) use
//! [`tokio::time::Instant`] instead: it follows tokio's paused test time, which the
//! standard library's `Instant` does not.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// Unix seconds now: the system clock ([`system`]), or a test's.
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// The system clock.
pub fn system() -> Clock {
    Arc::new(unix_now)
}

/// Unix seconds now by the system clock (0 if it reads before 1970).
pub fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_system_clock_reads_the_present() {
        // 2023-11-14, well in the past of any machine running this.
        assert!(unix_now() > 1_700_000_000);
        let clock = system();
        assert!(clock() >= unix_now() - 1);
    }
}
