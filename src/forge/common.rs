//! What the forge adapters share: the limits of a forge call, the error that names
//! the forge and its host without quoting it, and reading lists page by page.

use std::future::Future;
use std::time::Duration;

use crate::review::PullRequestInfo;

/// The longest tagpin waits for a rate limit to lift before failing the call.
pub const MAX_RATE_LIMIT_WAIT: Duration = Duration::from_secs(60);

/// Pages read of one list at most (100 items each): a bound on a runaway `Link` chain.
pub(super) const MAX_PAGES: usize = 50;

/// The largest answer read from a forge. A page of 100 pull requests is about 2 MB of
/// metadata (GitHub embeds the head and base repositories in each, about 20 KB together) plus
/// their bodies, which GitHub caps at 65,536 characters: about 8.2 MiB at the worst for plain
/// text, so this leaves room for escaping and non-ASCII text. An answer past it fails that
/// call (naming the forge's host), never the process: see [`crate::bounded`].
pub const MAX_ANSWER_BYTES: usize = 16 * crate::bounded::MIB;

/// Connecting to the forge (TCP and TLS), within the call's deadline.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A failed forge call, naming the forge and its host, the repository or project and, where
/// there is one, the change request. What the forge said is never quoted: `detail` holds the
/// HTTP status and words tagpin writes itself (what the status means for tagpin), so a server
/// that is not the forge it claims to be cannot have its answer copied into a status, an Event,
/// a comment or a log.
#[derive(Debug, thiserror::Error)]
pub enum ForgeError {
    #[error("{forge} at {host}: {repo}: {what}: {detail}")]
    Call {
        /// The forge's name as its users write it: `GitHub`, `GitLab`, `Gitea`, `Bitbucket`,
        /// `Azure DevOps`.
        forge: &'static str,
        /// `host[:port]` of `forge.api_url`.
        host: String,
        repo: String,
        what: String,
        detail: String,
        /// The HTTP status the forge answered, when it answered.
        status: Option<u16>,
    },
    #[error("{forge} at {host}: {repo}: {what}: rate limited; {forge} asks to wait {wait}")]
    RateLimited {
        forge: &'static str,
        host: String,
        repo: String,
        what: String,
        wait: String,
    },
    #[error("{forge} setup: {detail}")]
    Setup { forge: &'static str, detail: String },
}

impl ForgeError {
    /// The HTTP status the forge answered, when the call got an answer.
    pub fn status(&self) -> Option<u16> {
        match self {
            ForgeError::Call { status, .. } => *status,
            _ => None,
        }
    }
}

/// `host[:port]` of a forge's API URL, as its errors name it.
pub(super) fn host_of(api_url: &str) -> String {
    match url::Url::parse(api_url) {
        Ok(url) => match (url.host_str(), url.port()) {
            (Some(host), Some(port)) => format!("{host}:{port}"),
            (Some(host), None) => host.to_string(),
            (None, _) => api_url.to_string(),
        },
        Err(_) => api_url.to_string(),
    }
}

/// `422 Unprocessable Entity`: the status and its standard reason, never the forge's words.
pub(super) fn status_text(status: u16) -> String {
    match http::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
    {
        Some(reason) => format!("{status} {reason}"),
        None => format!("HTTP {status}"),
    }
}

/// Reads a list page by page from `first`, following each page's next address, until a page
/// satisfies `enough` or [`MAX_PAGES`] pages are read. `read_page` reads one page (the
/// adapter's request, parse and error naming) and answers its items and the next address.
pub(super) async fn read_pages<T, F, Fut>(
    first: String,
    read_page: F,
    enough: impl FnMut(&[T]) -> bool,
) -> Result<Vec<T>, ForgeError>
where
    F: FnMut(String) -> Fut,
    Fut: Future<Output = Result<(Vec<T>, Option<String>), ForgeError>>,
{
    Ok(read_pages_whole(first, read_page, enough).await?.0)
}

/// [`read_pages`], and whether the list was read to its end (or to a page that was
/// `enough`): `false` when [`MAX_PAGES`] pages were read and the last one named a next. What
/// lies past the bound is unknown, and a caller for whom that matters says so.
pub(super) async fn read_pages_whole<T, F, Fut>(
    first: String,
    mut read_page: F,
    mut enough: impl FnMut(&[T]) -> bool,
) -> Result<(Vec<T>, bool), ForgeError>
where
    F: FnMut(String) -> Fut,
    Fut: Future<Output = Result<(Vec<T>, Option<String>), ForgeError>>,
{
    let mut all = Vec::new();
    let mut next = Some(first);
    let mut pages = 0;
    let mut whole = true;
    while let Some(url) = next.take() {
        pages += 1;
        let (items, link) = read_page(url).await?;
        let done = enough(&items);
        all.extend(items);
        if !done {
            if pages < MAX_PAGES {
                next = link;
            } else {
                whole = link.is_none();
            }
        }
    }
    Ok((all, whole))
}

/// For a list by update time, newest first: with `until`, a page that reaches a change
/// request updated before it is the last one needed.
pub(super) fn updated_before(until: Option<i64>) -> impl Fn(&[PullRequestInfo]) -> bool {
    move |page| {
        until.is_some_and(|until| page.iter().any(|p| p.updated_at.is_some_and(|t| t < until)))
    }
}

/// What is in flight on `prefix` branches, newest first: every `open` change request, and
/// those of `recent` (closed or merged lately) not open and not already among them. A change
/// request closed between the two reads is listed once.
pub(super) fn in_flight(
    mut open: Vec<PullRequestInfo>,
    recent: Vec<PullRequestInfo>,
    prefix: &str,
) -> Vec<PullRequestInfo> {
    for pr in recent {
        if !pr.open && !open.iter().any(|o| o.number == pr.number) {
            open.push(pr);
        }
    }
    open.retain(|p| p.head_ref.starts_with(prefix));
    open.sort_by_key(|p| std::cmp::Reverse(p.number));
    open
}

/// The `rel="next"` address of a `Link` header (RFC 8288, as GitHub and GitLab send it), if
/// there is a next page.
pub(super) fn next_link(link: &str) -> Option<String> {
    link.split(',').find_map(|part| {
        let (url, params) = part.split_once(';')?;
        let next = params
            .split(';')
            .any(|p| p.trim().replace(' ', "") == "rel=\"next\"");
        next.then(|| {
            url.trim()
                .trim_start_matches('<')
                .trim_end_matches('>')
                .to_string()
        })
    })
}

/// How a REST adapter (GitLab's, Gitea's) reads the answers of its calls and names their
/// failures: the forge, its host, the repository or project, and each call's deadline.
pub(super) struct Calls<'a> {
    pub(super) forge: &'static str,
    pub(super) host: &'a str,
    pub(super) repo: &'a str,
    pub(super) deadline: Duration,
}

impl Calls<'_> {
    /// The answer's body, at most [`MAX_ANSWER_BYTES`]: reading stops at the first chunk past
    /// it, so an endless answer costs that much memory and no more.
    pub(super) async fn read_body(
        &self,
        what: &str,
        mut response: reqwest::Response,
    ) -> Result<String, ForgeError> {
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| self.failed(what, e))? {
            if body.len() + chunk.len() > MAX_ANSWER_BYTES {
                let limit = MAX_ANSWER_BYTES;
                let detail = crate::bounded::Exceeded::TooLarge { limit }.to_string();
                return Err(self.error(what, detail, Some(response.status().as_u16())));
            }
            body.extend_from_slice(&chunk);
        }
        // Lossy: a body that is not UTF-8 fails where it is parsed, not quoted.
        Ok(String::from_utf8_lossy(&body).into_owned())
    }

    /// `body` as `T`; an answer of another shape is named, never quoted.
    pub(super) fn parse<T: serde::de::DeserializeOwned>(
        &self,
        what: &str,
        body: &str,
    ) -> Result<T, ForgeError> {
        serde_json::from_str(body).map_err(|e| {
            let detail = format!("unexpected answer: {}", crate::bounded::json_problem(&e));
            self.error(what, detail, None)
        })
    }

    /// A call that got no answer: its deadline passed, or the connection failed.
    pub(super) fn failed(&self, what: &str, e: reqwest::Error) -> ForgeError {
        let detail = if e.is_timeout() {
            crate::bounded::Exceeded::Deadline {
                within: self.deadline,
            }
            .to_string()
        } else {
            // Without the URL: it is in `what` already, and never holds the token anyway.
            format!("connection failed: {}", e.without_url())
        };
        self.error(what, detail, None)
    }

    pub(super) fn error(&self, what: &str, detail: String, status: Option<u16>) -> ForgeError {
        ForgeError::Call {
            forge: self.forge,
            host: self.host.to_string(),
            repo: self.repo.to_string(),
            what: what.to_string(),
            detail,
            status,
        }
    }
}

/// Attempts per call when the answer is `429 Too Many Requests`.
const RATE_LIMIT_ATTEMPTS: u32 = 3;

/// The HTTP client of a REST adapter: a connect timeout, a total deadline per call (reqwest's
/// runs until the body's last byte), and no redirects, so the token goes to `api_url`'s host
/// and nowhere else.
pub(super) fn http_client(
    forge: &'static str,
    deadline: Duration,
) -> Result<reqwest::Client, ForgeError> {
    reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(deadline)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("tagpin/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| ForgeError::Setup {
            forge,
            detail: format!("HTTP client: {e}"),
        })
}

/// A successful answer: its headers and body (at most [`MAX_ANSWER_BYTES`]).
pub(super) struct Answer {
    pub(super) headers: reqwest::header::HeaderMap,
    pub(super) body: String,
}

/// What a forge says about a failed call, in the adapter's own words.
pub(super) struct FailureWords<'f> {
    /// How long a `429` asks to wait, read from the answer's headers at `now`.
    pub(super) wait: fn(&reqwest::header::HeaderMap, std::time::SystemTime) -> Duration,
    /// What a failed status means for tagpin, given the answer's body (read, never quoted).
    pub(super) describe: &'f (dyn Fn(reqwest::StatusCode, &str) -> String + Sync),
}

impl Calls<'_> {
    /// Sends the request `build` makes (once per attempt) and reads its answer: a success is
    /// returned, a `429` is waited out while the wait asked is within [`MAX_RATE_LIMIT_WAIT`]
    /// (at most [`RATE_LIMIT_ATTEMPTS`] attempts) and reported otherwise, any other failure is
    /// named in `words`.
    pub(super) async fn send(
        &self,
        what: &str,
        build: impl Fn() -> reqwest::RequestBuilder,
        words: &FailureWords<'_>,
    ) -> Result<Answer, ForgeError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let response = build().send().await.map_err(|e| self.failed(what, e))?;
            let status = response.status();
            let headers = response.headers().clone();
            let body = self.read_body(what, response).await?;
            if status.is_success() {
                return Ok(Answer { headers, body });
            }
            if status == reqwest::StatusCode::TOO_MANY_REQUESTS {
                let wait = (words.wait)(&headers, std::time::SystemTime::now());
                if wait <= MAX_RATE_LIMIT_WAIT && attempt < RATE_LIMIT_ATTEMPTS {
                    tracing::warn!(repo = %self.repo, "{what}: rate limited, waiting {wait:?}");
                    tokio::time::sleep(wait).await;
                    continue;
                }
                return Err(ForgeError::RateLimited {
                    forge: self.forge,
                    host: self.host.to_string(),
                    repo: self.repo.to_string(),
                    what: what.to_string(),
                    wait: format!("{}s", wait.as_secs()),
                });
            }
            let detail = (words.describe)(status, &body);
            return Err(self.error(what, detail, Some(status.as_u16())));
        }
    }
}

/// How long to wait after a `429` by its `Retry-After` (seconds or an HTTP date, RFC 9110),
/// if it has one.
pub(super) fn retry_after(
    headers: &reqwest::header::HeaderMap,
    now: std::time::SystemTime,
) -> Option<Duration> {
    let value = headers
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)?;
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO) + Duration::from_secs(1))
}

/// What stands in for the author of a status on a forge that records none (Bitbucket Cloud
/// and Data Center): tagpin signs what its own statuses say, and when it said them, with an
/// HMAC-SHA256 keyed by its token, and only a status carrying that signature is tagpin's.
/// Someone else can replace the status but not sign a new one; a new token makes tagpin's
/// older statuses read as not its own (set again, a soak starting over: never earlier).
///
/// A signature alone does not tell a replay from the latest word: a status tagpin set once,
/// saved and posted again later by anyone who may post statuses, still carries a good
/// signature. So the signature also covers *when* tagpin said it, on the forge's own clock
/// (the `Date` of the forge's latest answer, [`StatusSigner::note_date`]), and a signed status
/// is believed only while the time the forge recorded for it is within [`SAID_EARLY`] before
/// and [`SAID_LATE`] after that ([`believable`]): posted again later, it gets a later time and
/// reads as someone else's (the soak starts again, never earlier). Within one process, a
/// signed status said before the newest one this process set or believed of the same commit
/// and key is a replay too ([`StatusSigner::owns`]).
pub(super) struct StatusSigner {
    key: hmac::Hmac<sha2::Sha256>,
    /// The forge's clock: the `Date` of its latest answer, and when that was read here.
    clock: std::sync::Mutex<Option<(i64, std::time::Instant)>>,
    /// `(commit, key)` -> when the newest status this process set or believed there was said.
    newest: std::sync::Mutex<std::collections::HashMap<(String, String), i64>>,
}

/// How much earlier than the signed time the forge may record a status of tagpin's: the
/// `Date` header counts whole seconds, and a forge's servers may disagree by a few.
pub const SAID_EARLY: i64 = 10;
/// How much later than the signed time the forge may record a status of tagpin's: the time
/// from the answer whose `Date` was read to the write arriving, within one call's deadline.
/// A status recorded later than this was posted again by someone (or took longer than any
/// call may): it is not believed, and the soak it carried starts again.
pub const SAID_LATE: i64 = 120;
/// How long the forge's clock read from an answer is used without reading it again.
const CLOCK_FRESH: std::time::Duration = std::time::Duration::from_secs(60);
/// `(commit, key)` entries kept of what this process set or believed; cleared when full.
const MAX_NEWEST: usize = 512;

/// Whether a status tagpin signed as said at `said` (the forge's clock, Unix seconds) and
/// which the forge recorded at `recorded` was posted when tagpin said it, not later.
pub(super) fn believable(said: i64, recorded: i64) -> bool {
    let lag = recorded.saturating_sub(said);
    (-SAID_EARLY..=SAID_LATE).contains(&lag)
}

impl StatusSigner {
    /// The bytes of the signature kept: 128 bits, as 32 hex digits.
    const BYTES: usize = 16;

    pub(super) fn new(forge: &'static str, token: &str) -> Result<StatusSigner, ForgeError> {
        use hmac::Mac as _;
        let key = hmac::Hmac::new_from_slice(token.as_bytes()).map_err(|_| ForgeError::Setup {
            forge,
            detail: "the token cannot key a signature".into(),
        })?;
        Ok(StatusSigner {
            key,
            clock: std::sync::Mutex::default(),
            newest: std::sync::Mutex::default(),
        })
    }

    /// Keeps the forge's clock from an answer's `Date` header, when it has one.
    pub(super) fn note_date(&self, headers: &reqwest::header::HeaderMap) {
        let date = headers
            .get(reqwest::header::DATE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| httpdate::parse_http_date(v).ok())
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .and_then(|d| i64::try_from(d.as_secs()).ok());
        if let Some(date) = date {
            *crate::mutex::lock(&self.clock) = Some((date, std::time::Instant::now()));
        }
    }

    /// Now on the forge's clock (Unix seconds), when an answer told it within the last
    /// minute: its `Date` and the time passed here since.
    pub(super) fn forge_now(&self) -> Option<i64> {
        let (date, read) = (*crate::mutex::lock(&self.clock))?;
        let since = read.elapsed();
        (since < CLOCK_FRESH).then(|| date + i64::try_from(since.as_secs()).unwrap_or(0))
    }

    /// The MAC over `parts` (what the status says) and `at` (when), each followed by a NUL.
    fn mac(&self, parts: &[&str], at: i64) -> hmac::Hmac<sha2::Sha256> {
        use hmac::Mac as _;
        let mut mac = self.key.clone();
        let at = at.to_string();
        let all = std::iter::once("tagpin build status v2")
            .chain(parts.iter().copied())
            .chain(std::iter::once(at.as_str()));
        for part in all {
            mac.update(part.as_bytes());
            mac.update(&[0]);
        }
        mac
    }

    /// The stamp of a status saying `parts`, said at `at` (the forge's clock):
    /// `<at>-<32 hex digits>`. Once the forge took the status, [`StatusSigner::remember`] it.
    pub(super) fn stamp(&self, parts: &[&str], at: i64) -> String {
        use hmac::Mac as _;
        let bytes = self.mac(parts, at).finalize().into_bytes();
        let hex: String = bytes[..Self::BYTES]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        format!("{at}-{hex}")
    }

    /// When the status `given` stamps was said, if `given` is tagpin's stamp of a status
    /// saying `parts` (compared in constant time).
    pub(super) fn said_at(&self, parts: &[&str], given: &str) -> Option<i64> {
        use hmac::Mac as _;
        let (at, hex) = given.split_once('-')?;
        let at: i64 = at.parse().ok()?;
        let bytes: Vec<u8> = (hex.len() == 2 * Self::BYTES && hex.is_ascii())
            .then(|| {
                (0..hex.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).ok())
                    .collect::<Option<Vec<u8>>>()
            })
            .flatten()?;
        self.mac(parts, at)
            .verify_truncated_left(&bytes)
            .is_ok()
            .then_some(at)
    }

    /// Whether a status on commit and key `which`, saying `parts` with stamp `given`, which
    /// the forge recorded at `recorded`, is tagpin's own word and not a replay: the stamp is
    /// tagpin's, the forge recorded it when it was said ([`believable`]), and it was said no
    /// earlier than the newest this process set or believed there.
    pub(super) fn owns(
        &self,
        which: (&str, &str),
        parts: &[&str],
        given: &str,
        recorded: Option<i64>,
    ) -> bool {
        let Some(said) = self.said_at(parts, given) else {
            return false;
        };
        let fresh = recorded.is_some_and(|recorded| believable(said, recorded));
        let key = (which.0.to_string(), which.1.to_string());
        let newest = crate::mutex::lock(&self.newest).get(&key).copied();
        if !fresh || newest.is_some_and(|newest| said < newest) {
            return false;
        }
        self.remember(which, said);
        true
    }

    /// Remembers a status on commit and key `which` said at `at` as set (or believed) by this
    /// process: one said earlier there is a replay from now on.
    pub(super) fn remember(&self, which: (&str, &str), at: i64) {
        let mut newest = crate::mutex::lock(&self.newest);
        if newest.len() >= MAX_NEWEST {
            newest.clear();
        }
        let entry = newest
            .entry((which.0.to_string(), which.1.to_string()))
            .or_insert(at);
        *entry = (*entry).max(at);
    }
}

/// One path segment of a forge URL (an owner, a repository, a project): letters, digits,
/// `-`, `_`, `.` and `~` as they are; anything else percent-encoded, so it cannot reach
/// another path.
pub(super) fn encode(segment: &str) -> String {
    segment
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A request body as JSON; tagpin's own request types always serialize.
pub(super) fn json<T: serde::Serialize>(value: &T) -> serde_json::Value {
    serde_json::to_value(value).unwrap_or(serde_json::Value::Null)
}

/// Unix seconds of an RFC 3339 time a forge wrote.
pub(super) fn unix(text: &str) -> Option<i64> {
    text.parse::<k8s_openapi::jiff::Timestamp>()
        .ok()
        .map(|t| t.as_second())
}

/// A REST adapter's request: `method url` with its credentials header, asking for JSON, with
/// `body` as JSON when there is one.
pub(super) fn json_request(
    http: &reqwest::Client,
    method: &reqwest::Method,
    url: &str,
    credentials: (&str, &reqwest::header::HeaderValue),
    body: Option<&serde_json::Value>,
) -> reqwest::RequestBuilder {
    let request = http
        .request(method.clone(), url)
        .header(credentials.0, credentials.1.clone())
        .header(reqwest::header::ACCEPT, "application/json");
    match body {
        Some(body) => request.json(body),
        None => request,
    }
}
