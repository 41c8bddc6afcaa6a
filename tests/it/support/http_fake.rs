//! The plumbing the local GitHub and GitLab servers share.
//!
//! Both fakes record every request, keep the requests the real forge would
//! refuse as violations that fail the test unless it takes them, answer
//! scripted faults, and read bodies and paths the same way. What differs
//! between the forges (error bodies, headers, pagination, clocks) stays in
//! `github.rs` and `gitlab.rs`; what is the same lives here once, so a fix to
//! one fake reaches the other.
//!
//! Test support panics with a clear message instead of returning errors.

use std::fmt;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use serde_json::Value;

/// A listener on a fresh loopback port for the `forge` fake, and the base URL
/// it answers on (`http://127.0.0.1:PORT`).
pub async fn loopback(forge: &str) -> (tokio::net::TcpListener, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("bind 127.0.0.1:0 for the {forge} server: {e}"));
    let addr = listener.local_addr().expect("local addr");
    (listener, format!("http://{addr}"))
}

/// Serves `router` on `listener` in a task, until the fake aborts it.
pub fn serve(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    forge: &str,
) -> tokio::task::JoinHandle<()> {
    let failed = format!("{forge} test server failed");
    tokio::spawn(async move {
        axum::serve(listener, router).await.expect(&failed);
    })
}

/// The largest request body the fakes read; a larger one reads as empty.
const MAX_BODY_BYTES: usize = 8 * 1024 * 1024;

/// One request a fake received. Headers are not kept, so no token is stored.
#[derive(Clone, Debug)]
pub struct RecordedRequest {
    pub method: String,
    /// Percent-encoded path as sent, without the query.
    pub path: String,
    pub query: Option<String>,
    /// Raw body text; empty when there was none.
    pub body: String,
    /// The status the server answered with (0 for a request left hanging).
    pub status: u16,
    /// The user the token belongs to, if a known token was presented.
    pub user: Option<String>,
}

impl RecordedRequest {
    /// The body parsed as JSON, if it is JSON.
    pub fn json(&self) -> Option<Value> {
        serde_json::from_str(&self.body).ok()
    }
}

/// Appends a request as received (not answered yet: status 0) and returns
/// its index, so the status can be filled in once the answer is known.
pub fn record(
    requests: &mut Vec<RecordedRequest>,
    method: &str,
    path: &str,
    query: Option<&str>,
    body: &str,
    user: Option<String>,
) -> usize {
    requests.push(RecordedRequest {
        method: method.to_string(),
        path: path.to_string(),
        query: query.map(str::to_string),
        body: body.to_string(),
        status: 0,
        user,
    });
    requests.len() - 1
}

/// Reads a request body as text (lossy UTF-8); empty when it cannot be read.
pub async fn body_text(body: Body) -> String {
    match axum::body::to_bytes(body, MAX_BODY_BYTES).await {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(_) => String::new(),
    }
}

/// Which requests a scripted fault answers, and how many more times.
#[derive(Clone, Debug)]
pub struct FaultScope {
    /// HTTP method to match (`"POST"`), or `"*"` for any.
    pub method: String,
    /// Substring the raw request path must contain (e.g. `"/statuses/"`).
    pub path_contains: String,
    /// How many matching requests get this answer.
    pub times: usize,
    /// `true`: do the request's work, then answer with the fault (a response
    /// lost on the way back). `false`: answer before doing anything.
    pub after_effect: bool,
}

impl FaultScope {
    /// The next one request to `method` whose path contains `path_contains`,
    /// answered before any work is done.
    pub fn new(method: &str, path_contains: &str) -> Self {
        FaultScope {
            method: method.to_ascii_uppercase(),
            path_contains: path_contains.to_string(),
            times: 1,
            after_effect: false,
        }
    }

    fn matches(&self, method: &str, path: &str, after_effect: bool) -> bool {
        self.times > 0
            && self.after_effect == after_effect
            && (self.method == "*" || self.method == method)
            && path.contains(&self.path_contains)
    }
}

/// A scripted answer of a JSON forge stand-in (Gitea, Bitbucket Cloud and Data Center): a
/// status, extra headers, and a JSON body (the forge's own error shape when none is given).
#[derive(Clone, Debug)]
pub struct JsonFault {
    pub scope: FaultScope,
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Option<Value>,
}

impl JsonFault {
    /// The next request to `method` whose path contains `path_contains` is answered `status`
    /// before any work is done.
    pub fn new(method: &str, path_contains: &str, status: u16) -> Self {
        JsonFault {
            scope: FaultScope::new(method, path_contains),
            status,
            headers: Vec::new(),
            body: None,
        }
    }

    /// A `429` asking to come back in `retry_after` seconds.
    pub fn rate_limited(method: &str, path_contains: &str, retry_after: u64) -> Self {
        JsonFault::new(method, path_contains, 429).header("Retry-After", &retry_after.to_string())
    }

    pub fn times(mut self, times: usize) -> Self {
        self.scope.times = times;
        self
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    pub fn json_body(mut self, body: Value) -> Self {
        self.body = Some(body);
        self
    }
}

/// The first of a forge's scripted `faults` (each with its [`FaultScope`], as
/// `scope` reaches it) that answers this request, used up once; `None` when no
/// fault is scripted for it.
pub fn take_fault<F: Clone>(
    faults: &mut [F],
    scope: fn(&mut F) -> &mut FaultScope,
    method: &str,
    path: &str,
    after_effect: bool,
) -> Option<F> {
    let fault = faults
        .iter_mut()
        .find_map(|f| scope(f).matches(method, path, after_effect).then_some(f))?;
    scope(fault).times -= 1;
    Some(fault.clone())
}

/// The status's reason phrase (`Internal Server Error`), or `Error`.
pub fn canonical_reason(status: u16) -> &'static str {
    StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("Error")
}

/// The status a fault answers with; a fault scripts only valid statuses.
pub fn fault_status(status: u16) -> StatusCode {
    StatusCode::from_u16(status).expect("fault status is a valid HTTP status")
}

/// Sets each `(name, value)` on a response, replacing what was there.
pub fn set_headers<'a>(
    headers: &mut HeaderMap,
    pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
) {
    for (name, value) in pairs {
        let name = HeaderName::from_bytes(name.as_bytes()).expect("header name");
        headers.insert(name, HeaderValue::from_str(value).expect("header value"));
    }
}

/// Panics, listing them, if the fake saw any violation. `forge` is `GitHub`
/// or `GitLab`; `refuses` says what the forge would do with such requests.
pub fn assert_no_violations<V: fmt::Display>(violations: &[V], forge: &str, refuses: &str) {
    if !violations.is_empty() {
        panic!(
            "the {forge} test server saw requests {forge} would {refuses}:\n{}",
            listed(violations)
        );
    }
}

/// On a fake's `Drop`: fails the test that caused a violation and did not
/// take it. Not while the test is already failing: a panic during unwinding
/// would abort the whole test binary, so then the violations are only printed.
pub fn fail_on_untaken<V: fmt::Display>(violations: &[V], forge: &str, refuses: &str) {
    if violations.is_empty() {
        return;
    }
    let message = format!(
        "the {forge} test server saw {} request(s) {forge} would {refuses}, and the test did \
         not take them ({forge}Server::take_violations):\n{}",
        violations.len(),
        listed(violations)
    );
    if std::thread::panicking() {
        eprintln!("{message}");
    } else {
        panic!("{message}");
    }
}

fn listed<V: fmt::Display>(violations: &[V]) -> String {
    let list: Vec<String> = violations.iter().map(|v| format!("  {v}")).collect();
    list.join("\n")
}

/// Decodes `%XX` escapes; a `%` not followed by two hex digits stays as it is.
pub fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Encodes all but RFC 3986's unreserved characters, for query strings.
pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A fake's clock: the machine's, moved by what a test asks ([`Clock::advance`],
/// [`Clock::turn_back`]), for what the fake records as a time and sends as its `Date`.
#[derive(Debug, Default)]
pub struct Clock {
    /// Milliseconds ahead of the machine's clock (behind when negative).
    offset_ms: std::sync::atomic::AtomicI64,
}

impl Clock {
    /// The fake's time now.
    pub fn now(&self) -> std::time::SystemTime {
        let offset = self.offset_ms.load(std::sync::atomic::Ordering::SeqCst);
        let by = std::time::Duration::from_millis(offset.unsigned_abs());
        if offset >= 0 {
            std::time::SystemTime::now() + by
        } else {
            std::time::SystemTime::now() - by
        }
    }

    /// What the fake writes from now on is `by` later.
    pub fn advance(&self, by: std::time::Duration) {
        let ms = i64::try_from(by.as_millis()).expect("a test's time step");
        self.offset_ms
            .fetch_add(ms, std::sync::atomic::Ordering::SeqCst);
    }

    /// What the fake writes from now on is `by` earlier: a test sets the scene in the past.
    pub fn turn_back(&self, by: std::time::Duration) {
        let ms = i64::try_from(by.as_millis()).expect("a test's time step");
        self.offset_ms
            .fetch_sub(ms, std::sync::atomic::Ordering::SeqCst);
    }

    /// Sets the `Date` header (RFC 9110) of an answer to this clock's time, as a forge's
    /// server does from its own clock.
    pub fn date(&self, headers: &mut HeaderMap) {
        let date = httpdate::fmt_http_date(self.now());
        headers.insert(
            axum::http::header::DATE,
            HeaderValue::from_str(&date).expect("an HTTP date is a header value"),
        );
    }
}
