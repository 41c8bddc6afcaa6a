//! When to try a registry request again, and how long to wait first.
//!
//! Only transient failures are retried: `429 Too Many Requests` (waiting as long as the
//! registry's `Retry-After` asks), `5xx`, and connection errors or timeouts. A `401`, `404` or
//! a digest mismatch will not get better by asking again, so they fail at once. The policy is
//! pure so that its decisions are unit-tested without sleeping.
//!
//! `Retry-After` comes from the network: any value, up to `18446744073709551615` seconds or a
//! date in the year 9999, is only compared with [`RetryPolicy::max_retry_after`] (a longer
//! wait gives up), never added to a clock; zero or a past date waits the backoff.

use std::time::{Duration, SystemTime};

/// Bounds on retrying one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included.
    pub max_attempts: u32,
    /// The first backoff; it doubles on each further attempt.
    pub base_delay: Duration,
    /// No computed backoff is longer than this.
    pub max_delay: Duration,
    /// A `Retry-After` longer than this is not waited for: the request fails and says when the
    /// registry will take requests again (Docker Hub may ask for hours).
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 4,
            base_delay: Duration::from_millis(250),
            max_delay: Duration::from_secs(8),
            max_retry_after: Duration::from_secs(60),
        }
    }
}

/// What to do after a failed attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    RetryAfter(Duration),
    GiveUp,
}

/// Whether an HTTP status is worth another attempt.
pub(crate) fn is_retryable_status(status: u16) -> bool {
    status == 429 || (500..=599).contains(&status)
}

impl RetryPolicy {
    /// Decision after attempt number `attempt` (1-based) answered `status`.
    ///
    /// `jitter` in `[0, 1)` spreads concurrent clients apart; callers pass a random value,
    /// tests a fixed one.
    pub fn after_status(
        &self,
        attempt: u32,
        status: u16,
        retry_after: Option<&str>,
        now: SystemTime,
        jitter: f64,
    ) -> Decision {
        if !is_retryable_status(status) || attempt >= self.max_attempts {
            return Decision::GiveUp;
        }
        let backoff = self.backoff(attempt, jitter);
        match retry_after.and_then(|v| parse_retry_after(v, now)) {
            Some(wait) if wait > self.max_retry_after => Decision::GiveUp,
            // `Retry-After: 0` (or a date already past) waits the backoff all the same, so a
            // registry saying "now" is not asked again at once on every attempt.
            Some(wait) => Decision::RetryAfter(wait.max(backoff)),
            None => Decision::RetryAfter(backoff),
        }
    }

    /// Decision after attempt number `attempt` failed to connect or timed out.
    pub(crate) fn after_transport_error(&self, attempt: u32, jitter: f64) -> Decision {
        if attempt >= self.max_attempts {
            Decision::GiveUp
        } else {
            Decision::RetryAfter(self.backoff(attempt, jitter))
        }
    }

    /// Exponential backoff with "equal jitter": half fixed, half random, so retries spread
    /// out but never shrink to nothing.
    fn backoff(&self, attempt: u32, jitter: f64) -> Duration {
        let exp = self
            .base_delay
            .saturating_mul(2u32.saturating_pow(attempt.saturating_sub(1)));
        let capped = exp.min(self.max_delay);
        let half = capped / 2;
        half + half.mul_f64(jitter.clamp(0.0, 1.0))
    }
}

/// `Retry-After` is either delta-seconds or an HTTP date (RFC 9110 §10.2.3).
pub(crate) fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let when = httpdate::parse_http_date(value).ok()?;
    Some(when.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RetryPolicy {
        RetryPolicy::default()
    }

    #[test]
    fn too_many_requests_waits_as_long_as_retry_after_says() {
        let d = policy().after_status(1, 429, Some("3"), SystemTime::now(), 0.5);
        assert_eq!(d, Decision::RetryAfter(Duration::from_secs(3)));
    }

    #[test]
    fn retry_after_as_http_date_is_honoured() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let later = httpdate::fmt_http_date(now + Duration::from_secs(7));
        let d = policy().after_status(1, 429, Some(&later), now, 0.0);
        assert_eq!(d, Decision::RetryAfter(Duration::from_secs(7)));
    }

    #[test]
    fn retry_after_beyond_the_cap_gives_up_instead_of_hammering_or_hanging() {
        let d = policy().after_status(1, 429, Some("21600"), SystemTime::now(), 0.0);
        assert_eq!(d, Decision::GiveUp);
    }

    #[test]
    fn absurd_retry_after_values_give_up_or_wait_the_backoff() {
        let p = policy();
        let now = SystemTime::now();
        assert_eq!(
            p.after_status(1, 429, Some("18446744073709551615"), now, 0.0),
            Decision::GiveUp
        );
        assert_eq!(
            p.after_status(1, 429, Some("Fri, 31 Dec 9999 23:59:59 GMT"), now, 0.0),
            Decision::GiveUp
        );
        let backoff = Decision::RetryAfter(Duration::from_millis(125));
        assert_eq!(p.after_status(1, 429, Some("0"), now, 0.0), backoff);
        assert_eq!(
            p.after_status(1, 503, Some("Thu, 01 Jan 1970 00:00:00 GMT"), now, 0.0),
            backoff
        );
        // Negative or garbage: not a Retry-After at all, so the backoff.
        assert_eq!(p.after_status(1, 429, Some("-5"), now, 0.0), backoff);
    }

    #[test]
    fn server_errors_back_off_exponentially_within_the_cap() {
        let p = policy();
        let now = SystemTime::now();
        assert_eq!(
            p.after_status(1, 503, None, now, 1.0),
            Decision::RetryAfter(Duration::from_millis(250))
        );
        assert_eq!(
            p.after_status(2, 500, None, now, 1.0),
            Decision::RetryAfter(Duration::from_millis(500))
        );
        assert_eq!(
            p.after_status(2, 500, None, now, 0.0),
            Decision::RetryAfter(Duration::from_millis(250))
        );
        let long = RetryPolicy {
            max_attempts: 30,
            ..policy()
        };
        assert_eq!(
            long.after_status(20, 502, None, now, 1.0),
            Decision::RetryAfter(Duration::from_secs(8))
        );
    }

    #[test]
    fn client_errors_are_never_retried() {
        for status in [400, 401, 403, 404, 405] {
            assert_eq!(
                policy().after_status(1, status, None, SystemTime::now(), 0.0),
                Decision::GiveUp,
                "{status}"
            );
        }
    }

    #[test]
    fn attempts_are_bounded() {
        let p = policy();
        assert_eq!(
            p.after_status(4, 500, None, SystemTime::now(), 0.0),
            Decision::GiveUp
        );
        assert_eq!(p.after_transport_error(4, 0.0), Decision::GiveUp);
        assert!(matches!(
            p.after_transport_error(1, 0.0),
            Decision::RetryAfter(_)
        ));
    }
}
