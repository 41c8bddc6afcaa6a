//! One message posted to its receiver, with bounds: a timeout per request and for the whole
//! delivery, a cap on the body, no redirects (a receiver that answers 3xx is a failure, so a
//! URL can never send tagpin, and a signed body, somewhere else), and retries with backoff on
//! what may pass (5xx, 429, a timeout, a refused connection), honouring `Retry-After` up to a
//! cap. The answer's body is never read: nothing a receiver says reaches a log, a status or an
//! Event. [`retry_wait`] is the decision, pure; [`deliver`] does the I/O.

use std::time::{Duration, SystemTime};

use reqwest::header::{HeaderMap, HeaderValue, CONTENT_TYPE, RETRY_AFTER};

/// The bounds of one delivery.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Each request, connection included.
    pub request_timeout: Duration,
    /// The whole delivery, waits between attempts included.
    pub total: Duration,
    /// Attempts at most, the first included.
    pub attempts: u32,
    /// The wait after the first failed attempt; doubled after each further one.
    pub first_backoff: Duration,
    /// The longest wait, whatever `Retry-After` asks.
    pub max_wait: Duration,
    /// The largest body sent, in bytes.
    pub max_body: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            request_timeout: Duration::from_secs(10),
            total: Duration::from_secs(60),
            attempts: 4,
            first_backoff: Duration::from_secs(1),
            max_wait: Duration::from_secs(30),
            // Teams refuses cards over 28 KB, Slack texts over 40,000 characters; a tagpin
            // message is a few KB.
            max_body: 24 * 1024,
        }
    }
}

/// What a receiver answered, as the retry decision reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// An HTTP status, and its `Retry-After` header when there was one.
    Status(u16, Option<String>),
    /// No answer: the request timed out or the connection failed (both may pass).
    NoAnswer,
}

/// Why a message was not delivered. It names no URL: the path of a webhook URL is its secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    #[error("answered HTTP {0}")]
    Status(u16),
    #[error("no answer (timed out or could not connect)")]
    NoAnswer,
    #[error("the request could not be made")]
    Request,
    #[error("the body is {0} bytes, over the limit")]
    TooLarge(usize),
    #[error("not delivered within {0:?}")]
    Deadline(Duration),
}

/// How long to wait before attempt `attempt + 1` after `answer` to attempt `attempt` (from
/// 1), or `None` when it is not tried again: delivered (2xx), refused for good (another 4xx,
/// a redirect), or out of attempts.
pub fn retry_wait(
    answer: &Answer,
    attempt: u32,
    limits: &Limits,
    now: SystemTime,
) -> Option<Duration> {
    if attempt >= limits.attempts {
        return None;
    }
    let retry_after = match answer {
        Answer::Status(status, retry_after) if *status == 429 || (500..=599).contains(status) => {
            retry_after.as_deref()
        }
        Answer::Status(..) => return None,
        Answer::NoAnswer => None,
    };
    let backoff = limits
        .first_backoff
        .saturating_mul(2u32.saturating_pow(attempt.saturating_sub(1)));
    let wait = retry_after
        .and_then(|value| parse_retry_after(value, now))
        .unwrap_or(backoff);
    Some(wait.min(limits.max_wait))
}

/// `Retry-After` as seconds or as an HTTP date (a date past is no wait).
fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// Posts `body` to `url` with `headers`, trying again as [`retry_wait`] says, within
/// `limits`. Returns the attempts it took.
pub async fn deliver(
    client: &reqwest::Client,
    url: &reqwest::Url,
    body: Vec<u8>,
    headers: HeaderMap,
    limits: &Limits,
) -> Result<u32, Failure> {
    if body.len() > limits.max_body {
        return Err(Failure::TooLarge(body.len()));
    }
    let attempts = async {
        let mut attempt = 1;
        loop {
            let answer = match post(client, url, &body, &headers, limits).await {
                Ok(status) if (200..300).contains(&status.0) => return Ok(attempt),
                Ok((status, retry_after)) => Answer::Status(status, retry_after),
                Err(Failure::NoAnswer) => Answer::NoAnswer,
                Err(other) => return Err(other),
            };
            match retry_wait(&answer, attempt, limits, SystemTime::now()) {
                Some(wait) => tokio::time::sleep(wait).await,
                None => {
                    return Err(match answer {
                        Answer::Status(status, _) => Failure::Status(status),
                        Answer::NoAnswer => Failure::NoAnswer,
                    })
                }
            }
            attempt += 1;
        }
    };
    tokio::time::timeout(limits.total, attempts)
        .await
        .unwrap_or(Err(Failure::Deadline(limits.total)))
}

/// One attempt: its status and `Retry-After`. The answer's body is dropped unread.
async fn post(
    client: &reqwest::Client,
    url: &reqwest::Url,
    body: &[u8],
    headers: &HeaderMap,
    limits: &Limits,
) -> Result<(u16, Option<String>), Failure> {
    let request = client
        .post(url.clone())
        .headers(headers.clone())
        .timeout(limits.request_timeout)
        .body(body.to_vec());
    match request.send().await {
        Ok(response) => {
            let retry_after = response
                .headers()
                .get(RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            Ok((response.status().as_u16(), retry_after))
        }
        Err(e) if e.is_timeout() || e.is_connect() => Err(Failure::NoAnswer),
        Err(_) => Err(Failure::Request),
    }
}

/// The headers of a JSON body of `content_type`.
pub fn json_headers(content_type: &'static str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers
}

/// The client messages are sent with: no redirects, and the request timeout of `limits`.
pub fn client(limits: &Limits) -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(limits.request_timeout)
        .timeout(limits.request_timeout)
        .user_agent(concat!("tagpin/", env!("CARGO_PKG_VERSION")))
        .build()
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits::default()
    }

    #[test]
    fn a_server_error_or_429_is_tried_again_after_a_doubling_backoff() {
        let now = SystemTime::UNIX_EPOCH;
        let l = limits();
        let waits: Vec<Option<Duration>> = (1..=4)
            .map(|attempt| retry_wait(&Answer::Status(503, None), attempt, &l, now))
            .collect();
        assert_eq!(
            waits,
            [
                Some(Duration::from_secs(1)),
                Some(Duration::from_secs(2)),
                Some(Duration::from_secs(4)),
                None
            ]
        );
        assert_eq!(
            retry_wait(&Answer::Status(429, None), 1, &l, now),
            Some(Duration::from_secs(1))
        );
        assert_eq!(
            retry_wait(&Answer::NoAnswer, 2, &l, now),
            Some(Duration::from_secs(2))
        );
    }

    #[test]
    fn retry_after_is_honoured_in_seconds_or_as_a_date_and_capped() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let l = limits();
        let answer = |value: &str| Answer::Status(429, Some(value.to_string()));
        assert_eq!(
            retry_wait(&answer("7"), 1, &l, now),
            Some(Duration::from_secs(7))
        );
        assert_eq!(retry_wait(&answer("3600"), 1, &l, now), Some(l.max_wait));
        let in_five = httpdate::fmt_http_date(now + Duration::from_secs(5));
        assert_eq!(
            retry_wait(&answer(&in_five), 1, &l, now),
            Some(Duration::from_secs(5))
        );
        let past = httpdate::fmt_http_date(now - Duration::from_secs(5));
        assert_eq!(retry_wait(&answer(&past), 1, &l, now), Some(Duration::ZERO));
        // Unreadable: the backoff.
        assert_eq!(
            retry_wait(&answer("soon"), 1, &l, now),
            Some(Duration::from_secs(1))
        );
    }

    #[test]
    fn a_refusal_or_a_redirect_is_not_tried_again() {
        let now = SystemTime::UNIX_EPOCH;
        for status in [400, 401, 403, 404, 410, 301, 302, 308] {
            assert_eq!(
                retry_wait(&Answer::Status(status, None), 1, &limits(), now),
                None,
                "{status}"
            );
        }
    }
}
