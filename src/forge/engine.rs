//! What every forge does the same way, written once; each adapter keeps only its dialect.
//!
//! [`Forge`] is the contract every adapter implements, and its provided methods are the
//! policies: which change requests are a branch's or in flight, adopting one opened meanwhile,
//! keeping tagpin's one marked comment. An adapter supplies its dialect through the required
//! methods: the lists it asks for ([`Listing`]), its URLs and wire types, its state words.
//! Below them, the calls themselves: [`Rest`] (reqwest: the credentials, a deadline per call,
//! answers read within [`MAX_ANSWER_BYTES`], the repository's address on the API, the token's
//! user) and [`retrying`], the one request loop that waits out a rate limit within
//! [`MAX_RATE_LIMIT_WAIT`] (GitHub's octocrab calls go through it too); lists read page by
//! page within [`MAX_PAGES`] ([`read_pages`], change requests by update time with
//! [`read_change_requests`]); and [`Memory`], what
//! this process last wrote, so a status or a comment that would say the same again spends no
//! call. The error, [`ForgeError`], names the forge and its host and never quotes them.

use std::collections::HashMap;
use std::future::Future;
use std::time::{Duration, SystemTime};

use reqwest::header::{HeaderMap, HeaderValue};
use reqwest::{Method, StatusCode};

use super::settings::ChangeRequestNoun;
use super::settings::Settings;
use crate::mutex::lock;
use crate::review::{PullRequestInfo, StatusHistory, StatusState};

/// One page of a list: its items, and the address of the next page.
pub(super) type Paged<T> = (Vec<T>, Option<String>);

/// The result of a forge call.
pub type Result<T, E = ForgeError> = std::result::Result<T, E>;

/// The longest tagpin waits for a rate limit to lift before failing the call.
pub(crate) const MAX_RATE_LIMIT_WAIT: Duration = Duration::from_secs(60);

/// Pages read of one list at most (100 items each): a bound on a runaway `Link` chain.
pub(super) const MAX_PAGES: usize = 50;

/// The largest answer read from a forge. A page of 100 pull requests is about 2 MB of
/// metadata (GitHub embeds the head and base repositories in each, about 20 KB together) plus
/// their bodies, which GitHub caps at 65,536 characters: about 8.2 MiB at the worst for plain
/// text, so this leaves room for escaping and non-ASCII text. An answer past it fails that
/// call (naming the forge's host), never the process: see [`crate::bounded`].
pub(crate) const MAX_ANSWER_BYTES: usize = 16 * crate::bounded::MIB;

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

/// Who a call failed against, as [`ForgeError`] names it: the forge, its host, the repository.
#[derive(Debug, Clone)]
pub(super) struct Names {
    pub(super) forge: &'static str,
    /// `host[:port]` of `forge.api_url`.
    pub(super) host: String,
    /// The repository or project, as its forge's users write it.
    pub(super) repo: String,
}

impl Names {
    pub(super) fn new(forge: &'static str, api_url: &str, repo: String) -> Names {
        Names {
            forge,
            host: host_of(api_url),
            repo,
        }
    }

    /// The failure of `what`, in tagpin's words (`detail`), with the status when answered.
    pub(super) fn error(&self, what: &str, detail: String, status: Option<u16>) -> ForgeError {
        ForgeError::Call {
            forge: self.forge,
            host: self.host.clone(),
            repo: self.repo.clone(),
            what: what.to_string(),
            detail,
            status,
        }
    }

    /// A setup failure of this forge, before any call.
    pub(super) fn setup(forge: &'static str, detail: String) -> ForgeError {
        ForgeError::Setup { forge, detail }
    }
}

/// Attempts per call when the answer is a rate limit.
const RATE_LIMIT_ATTEMPTS: u32 = 3;

/// Why one attempt at a call failed.
pub(super) enum Refused {
    /// A rate limit, asking to wait this long.
    RateLimited(Duration),
    /// Anything else, named.
    Failed(ForgeError),
}

/// The request loop of every forge: runs `attempt` until it answers, waiting out a rate limit
/// while the wait asked is within [`MAX_RATE_LIMIT_WAIT`] (at most [`RATE_LIMIT_ATTEMPTS`]
/// attempts) and reporting it otherwise; any other failure is returned as it is.
pub(super) async fn retrying<T, F, Fut>(names: &Names, what: &str, mut attempt: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Refused>>,
{
    let mut attempts = 0;
    loop {
        attempts += 1;
        let wait = match attempt().await {
            Ok(value) => return Ok(value),
            Err(Refused::Failed(e)) => return Err(e),
            Err(Refused::RateLimited(wait)) => wait,
        };
        if wait > MAX_RATE_LIMIT_WAIT || attempts >= RATE_LIMIT_ATTEMPTS {
            return Err(ForgeError::RateLimited {
                forge: names.forge,
                host: names.host.clone(),
                repo: names.repo.clone(),
                what: what.to_string(),
                wait: format!("{}s", wait.as_secs()),
            });
        }
        tracing::warn!(repo = %names.repo, "{what}: rate limited, waiting {wait:?}");
        tokio::time::sleep(wait).await;
    }
}

/// What a REST forge says about a failed call, in its own words: what each status means for
/// tagpin, saying what to fix. `{repo}` and `{api}` in them name the repository and
/// `forge.api_url`. The forge's own text is read only to recognise a known case
/// ([`Words::from_body`]), never quoted.
pub(super) struct Words {
    /// How long a `429` asks to wait, read from the answer's headers at `now`.
    pub(super) wait: fn(&HeaderMap, SystemTime) -> Duration,
    /// `401`: the token is not valid, and why it may not be.
    pub(super) unauthorized: &'static str,
    /// `403`: what the token may not do, and what it needs.
    pub(super) forbidden: &'static str,
    /// `404`: the repository is not there, or hidden from the token.
    pub(super) not_found: &'static str,
    /// `409`, where the forge answers it for a change request already open.
    pub(super) conflict: Option<&'static str>,
    /// The status the forge refuses a field with (`400` or `422`), and what that means.
    pub(super) refused: Option<(u16, &'static str)>,
    /// What a status means given the answer's body, before the words above (GitLab's).
    pub(super) from_body: fn(StatusCode, &str) -> Option<String>,
    /// What a successful answer that is not JSON means, where the forge answers one instead
    /// of `401` (Azure DevOps's sign-in page): the call fails as a `401`.
    pub(super) not_json: Option<&'static str>,
}

impl Words {
    /// What every REST forge says alike, for the fields an adapter leaves out: a `429`
    /// waited out as `Retry-After` says (else a minute), no conflict or refused field named,
    /// no body read, and every successful answer taken as it is.
    pub(super) const PLAIN: Words = Words {
        wait: retry_after_or_a_minute,
        unauthorized: "the token is not valid",
        forbidden: "the token may not do this in {repo}",
        not_found: "{repo} is not at {api}, or the token may not read it",
        conflict: None,
        refused: None,
        from_body: body_unread,
        not_json: None,
    };

    /// A failed answer in tagpin's words: `422 Unprocessable Entity (what it means)`.
    pub(super) fn describe(&self, status: StatusCode, body: &str, repo: &str, api: &str) -> String {
        let meaning = (self.from_body)(status, body).or_else(|| {
            let words = match status.as_u16() {
                401 => Some(self.unauthorized),
                403 => Some(self.forbidden),
                404 => Some(self.not_found),
                409 => self.conflict,
                code => self.refused.filter(|(at, _)| *at == code).map(|(_, w)| w),
            };
            words.map(|w| fill(w, repo, api))
        });
        described(status, meaning)
    }
}

/// `words` with `{repo}` and `{api}` filled in, in one pass: a name holding either is kept.
fn fill(words: &str, repo: &str, api: &str) -> String {
    let mut out = String::new();
    let mut rest = words;
    while let Some(at) = rest.find('{') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        let (value, skip) = if tail.starts_with("{repo}") {
            (repo, "{repo}".len())
        } else if tail.starts_with("{api}") {
            (api, "{api}".len())
        } else {
            ("{", 1)
        };
        out.push_str(value);
        rest = &tail[skip..];
    }
    out.push_str(rest);
    out
}

/// [`Words::from_body`] of a forge whose body says nothing tagpin reads.
pub(super) fn body_unread(_: StatusCode, _: &str) -> Option<String> {
    None
}

/// How long to wait after a `429`: `Retry-After`, else a minute.
pub(super) fn retry_after_or_a_minute(headers: &HeaderMap, now: SystemTime) -> Duration {
    retry_after(headers, now).unwrap_or(Duration::from_secs(60))
}

/// `422 Unprocessable Entity (what it means for tagpin)`: the status, its standard reason,
/// and what the forge's words for it mean, never the forge's own text.
pub(super) fn described(status: StatusCode, meaning: Option<String>) -> String {
    let answered = status_text(status.as_u16());
    match meaning {
        Some(meaning) => format!("{answered} ({meaning})"),
        None => answered,
    }
}

/// The forge's clock: the `Date` of its latest answer, and when that was read here. A status
/// tagpin signs says when on this clock ([`super::stamp`]), so this machine's may be off.
#[derive(Default)]
pub(crate) struct ForgeClock(std::sync::Mutex<Option<(i64, std::time::Instant)>>);

/// How long the forge's clock read from an answer is used without reading it again.
const CLOCK_FRESH: Duration = Duration::from_secs(60);

impl ForgeClock {
    /// Keeps the forge's clock from an answer's `Date` header, when it has one.
    pub(super) fn note_date(&self, headers: &HeaderMap) {
        let date = headers
            .get(reqwest::header::DATE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| httpdate::parse_http_date(v).ok())
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .and_then(|d| i64::try_from(d.as_secs()).ok());
        if let Some(date) = date {
            *lock(&self.0) = Some((date, std::time::Instant::now()));
        }
    }

    /// Now on the forge's clock (Unix seconds), when an answer told it within the last
    /// minute: its `Date` and the time passed here since.
    pub(super) fn now(&self) -> Option<i64> {
        let (date, read) = (*lock(&self.0))?;
        let since = read.elapsed();
        (since < CLOCK_FRESH).then(|| date + i64::try_from(since.as_secs()).unwrap_or(0))
    }
}

/// A successful answer: its headers and body (at most [`MAX_ANSWER_BYTES`]).
pub(super) struct Answer {
    pub(super) headers: HeaderMap,
    pub(super) body: String,
}

/// A REST forge's side of every call: the HTTP client (a connect timeout, a total deadline
/// per call, answer included, and no redirects, so the token goes to `api_url`'s host and
/// nowhere else), the credentials header, marked sensitive so no debug output shows it, and
/// the forge's words for a failure.
pub(super) struct Rest {
    http: reqwest::Client,
    pub(super) names: Names,
    /// `forge.api_url` without a trailing slash.
    pub(super) api: String,
    /// The repository's address on the API ([`Rest::at`]), `api` until set.
    repository: String,
    /// `forge.timeout_seconds`: each call, answer included.
    deadline: Duration,
    credentials: (&'static str, HeaderValue),
    words: &'static Words,
    /// The `Date` of the forge's latest successful answer.
    pub(super) clock: ForgeClock,
}

impl Rest {
    /// The forge `settings` name, its repository `repo` (as its users write it, for
    /// messages), and `credentials`: the header the token goes in and its value (`Bearer …`,
    /// `token …`, `Basic …`), which must be one an HTTP header can carry.
    pub(super) fn new(
        forge: &'static str,
        settings: &Settings,
        repo: String,
        (header, value): (&'static str, String),
        words: &'static Words,
    ) -> Result<Rest> {
        let mut value = HeaderValue::from_str(&value).map_err(|_| {
            let env = &settings.token_env;
            let detail = format!("the token in {env} holds characters an HTTP header cannot carry");
            Names::setup(forge, detail)
        })?;
        value.set_sensitive(true);
        let deadline = Duration::from_secs(settings.timeout_seconds);
        Ok(Rest {
            http: http_client(forge, deadline)?,
            names: Names::new(forge, &settings.api_url, repo),
            api: settings.api_url.trim_end_matches('/').to_string(),
            repository: settings.api_url.trim_end_matches('/').to_string(),
            deadline,
            credentials: (header, value),
            words,
            clock: ForgeClock::default(),
        })
    }

    /// The same, with the repository at `path` on the API (`/repos/acme/gitops`, each part
    /// encoded by the adapter, which alone knows its forge's layout).
    pub(super) fn at(mut self, path: &str) -> Rest {
        self.repository = format!("{}{path}", self.api);
        self
    }

    /// `rest` (a path, with its query if any) under the repository's address on the API.
    pub(super) fn url(&self, rest: &str) -> String {
        format!("{}{rest}", self.repository)
    }

    /// The credentials header's value, for tests of what it holds.
    #[cfg(test)]
    pub(super) fn credentials(&self) -> &HeaderValue {
        &self.credentials.1
    }

    /// `method url` with the credentials, asking for JSON.
    pub(super) fn request(&self, method: &Method, url: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method.clone(), url)
            .header(self.credentials.0, self.credentials.1.clone())
            .header(reqwest::header::ACCEPT, "application/json")
    }

    /// One call with `body` as JSON, if any: see [`Rest::send`].
    pub(super) async fn call(
        &self,
        what: &str,
        method: Method,
        url: &str,
        body: Option<serde_json::Value>,
    ) -> Result<Answer> {
        let body = body.map(|b| (b, "application/json"));
        self.call_typed(what, (method, url), body).await
    }

    /// One call for its effect alone, with `body` as JSON.
    pub(super) async fn write<T>(
        &self,
        what: &str,
        method: Method,
        url: &str,
        body: &T,
    ) -> Result<()>
    where
        T: serde::Serialize + Sync,
    {
        self.call(what, method, url, Some(json(body)))
            .await
            .map(drop)
    }

    /// One call with a body of its content type (a JSON Patch document is
    /// `application/json-patch+json`).
    pub(super) async fn call_typed(
        &self,
        what: &str,
        (method, url): (Method, &str),
        body: Option<(serde_json::Value, &'static str)>,
    ) -> Result<Answer> {
        let body = body.map(|(b, content_type)| (b.to_string(), content_type));
        let build = || {
            let request = self.request(&method, url);
            match &body {
                Some((body, content_type)) => request
                    .header(reqwest::header::CONTENT_TYPE, *content_type)
                    .body(body.clone()),
                None => request,
            }
        };
        self.send(what, build).await
    }

    /// `GET url`, its answer read as `T`.
    pub(super) async fn get<T: serde::de::DeserializeOwned>(
        &self,
        what: &str,
        url: &str,
    ) -> Result<T> {
        let answer = self.call(what, Method::GET, url, None).await?;
        self.parse(what, &answer.body)
    }

    /// `GET {api}/user`, read as `T`: the user the token acts as. A refusal with one of the
    /// statuses `refused` means this token may not read it (a token of a repository, or of
    /// too narrow a scope): it is named with `why`, which says what to set instead.
    pub(super) async fn token_user<T: serde::de::DeserializeOwned>(
        &self,
        what: &str,
        refused: &[u16],
        why: &str,
    ) -> Result<T> {
        let url = format!("{}/user", self.api);
        match self.get(what, &url).await {
            Err(ForgeError::Call {
                status: Some(status),
                ..
            }) if refused.contains(&status) => {
                let detail = format!("{} ({why})", status_text(status));
                Err(self.error(what, detail, Some(status)))
            }
            user => user,
        }
    }

    /// `POST url` with `body` as JSON, its answer read as `T`: what a create is.
    pub(super) async fn post<T: serde::de::DeserializeOwned>(
        &self,
        what: &str,
        url: &str,
        body: serde_json::Value,
    ) -> Result<T> {
        let answer = self.call(what, Method::POST, url, Some(body)).await?;
        self.parse(what, &answer.body)
    }

    /// Sends the request `build` makes (once per attempt) through [`retrying`]: a success is
    /// returned, a `429` waited out as the forge's words say, any other failure named in them.
    pub(super) async fn send(
        &self,
        what: &str,
        build: impl Fn() -> reqwest::RequestBuilder,
    ) -> Result<Answer> {
        retrying(&self.names, what, || async {
            let failed = |e| Refused::Failed(self.failed(what, e));
            let response = build().send().await.map_err(failed)?;
            let status = response.status();
            let headers = response.headers().clone();
            let body = self
                .read_body(what, response)
                .await
                .map_err(Refused::Failed)?;
            if status.is_success() {
                return self.answered(what, Answer { headers, body });
            }
            if status == StatusCode::TOO_MANY_REQUESTS {
                let wait = (self.words.wait)(&headers, SystemTime::now());
                return Err(Refused::RateLimited(wait));
            }
            let (repo, api) = (&self.names.repo, &self.api);
            let detail = self.words.describe(status, &body, repo, api);
            let status = Some(status.as_u16());
            Err(Refused::Failed(self.error(what, detail, status)))
        })
        .await
    }

    /// A successful answer, its `Date` kept ([`Rest::clock`]); one that is not JSON where the
    /// forge answers a refused token so ([`Words::not_json`]) fails as a `401`: a refused
    /// token fails the whole pass, and the operator reports AuthFailed.
    fn answered(&self, what: &str, answer: Answer) -> Result<Answer, Refused> {
        if let Some(words) = self.words.not_json.filter(|_| !is_json(&answer.headers)) {
            let refused = self.error(what, words.to_string(), Some(401));
            return Err(Refused::Failed(refused));
        }
        self.clock.note_date(&answer.headers);
        Ok(answer)
    }

    /// The answer's body, at most [`MAX_ANSWER_BYTES`]: reading stops at the first chunk past
    /// it, so an endless answer costs that much memory and no more.
    async fn read_body(&self, what: &str, mut response: reqwest::Response) -> Result<String> {
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
    ) -> Result<T> {
        serde_json::from_str(body).map_err(|e| {
            let detail = format!("unexpected answer: {}", crate::bounded::json_problem(&e));
            self.error(what, detail, None)
        })
    }

    /// A call that got no answer: its deadline passed, or the connection failed.
    fn failed(&self, what: &str, e: reqwest::Error) -> ForgeError {
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
        self.names.error(what, detail, status)
    }
}

/// Whether an answer says it is JSON.
pub(super) fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            let v = v.to_ascii_lowercase();
            v.starts_with("application/json") || v.contains("+json")
        })
}

/// The HTTP client of a REST adapter: a connect timeout, a total deadline per call (reqwest's
/// runs until the body's last byte), and no redirects, so the token goes to `api_url`'s host
/// and nowhere else.
fn http_client(forge: &'static str, deadline: Duration) -> Result<reqwest::Client> {
    reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(deadline)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("tagpin/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| Names::setup(forge, format!("HTTP client: {e}")))
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

/// Every page of a change request list from `first`: each page read by `read_page`, each of
/// its items by `read` (`None` drops one that is not the list's, such as one into another
/// base). With `until`, pages stop after the first one that reaches a change request updated
/// before it ([`updated_before`]).
pub(super) async fn read_change_requests<W, F, Fut>(
    first: String,
    until: Option<i64>,
    mut read_page: F,
    read: impl Fn(W) -> Option<PullRequestInfo>,
) -> Result<Vec<PullRequestInfo>>
where
    F: FnMut(String) -> Fut,
    Fut: Future<Output = Result<Paged<W>>>,
{
    let read = &read;
    let page = move |url: String| {
        let answer = read_page(url);
        async move {
            let (items, next) = answer.await?;
            Ok((items.into_iter().filter_map(read).collect(), next))
        }
    };
    read_pages(first, page, updated_before(until)).await
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

/// The address of a page just read, to ask for another by one of its query parameters (a
/// page number, a start), on the same host: tagpin never follows an address a forge writes
/// where it may name another host.
pub(super) struct PageAddress(url::Url);

/// Why the next page of a list cannot be asked for: the address of the page just read
/// (tagpin's own) does not parse.
#[derive(Debug, thiserror::Error)]
#[error("{url}: {source}")]
pub(super) struct BadPageUrl {
    url: String,
    #[source]
    source: url::ParseError,
}

impl PageAddress {
    pub(super) fn parse(url: &str) -> Result<PageAddress, BadPageUrl> {
        let url = url.to_string();
        url::Url::parse(&url)
            .map(PageAddress)
            .map_err(|source| BadPageUrl { url, source })
    }

    /// The number the query parameter `key` holds, if it holds one.
    pub(super) fn number(&self, key: &str) -> Option<u64> {
        let mut pairs = self.0.query_pairs();
        pairs
            .find(|(k, _)| k == key)
            .and_then(|(_, v)| v.parse().ok())
    }

    /// This address with `key` set to `value`, after the other parameters in their order.
    pub(super) fn with(mut self, key: &str, value: &str) -> String {
        let kept: Vec<(String, String)> = self
            .0
            .query_pairs()
            .filter(|(k, _)| k != key)
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        let mut pairs = self.0.query_pairs_mut();
        pairs.clear().extend_pairs(kept).append_pair(key, value);
        drop(pairs);
        self.0.to_string()
    }
}

/// The text of header `name`, trimmed, when it has any.
pub(super) fn header<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    let value = headers.get(name).and_then(|v| v.to_str().ok());
    value.map(str::trim).filter(|v| !v.is_empty())
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

/// Which change requests a list asks the forge for, each as its dialect filters them.
#[derive(Debug, Clone, Copy)]
pub enum Listing<'a> {
    /// Every one from `branch` into `base`, whatever its state.
    From { branch: &'a str, base: &'a str },
    /// The open ones from `branch` into `base`: one opened meanwhile, to adopt.
    OpenFrom { branch: &'a str, base: &'a str },
    /// The open ones into `base` (from a branch starting with `prefix`, where the forge can
    /// filter by it; the caller keeps the prefix itself).
    OpenInto { prefix: &'a str, base: &'a str },
    /// Those into `base` closed or merged at or after `since` (Unix seconds), most recently
    /// updated first, read until a page reaches one updated before it.
    ClosedInto {
        prefix: &'a str,
        base: &'a str,
        since: i64,
    },
}

/// Why a list of change requests was read, for a forge that completes what lists answer
/// ([`Forge::finish`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// A branch's own ([`Forge::pull_requests_for`]).
    Branch,
    /// What is in flight ([`Forge::pull_requests_with_prefix`]).
    InFlight,
}

/// A change request to open.
#[derive(Debug, Clone, Copy)]
pub struct NewChange<'a> {
    pub branch: &'a str,
    pub base: &'a str,
    pub title: &'a str,
    pub body: &'a str,
}

/// Which status: `context` on commit `sha`, of `branch` where the caller knows it.
///
/// `branch` is the branch the status is about (a change request's source branch; its target
/// once merged). GitLab attaches a status to one ref and, without one, to the first branch
/// holding the commit, which for a commit on both `main` and a tagpin branch may not be the
/// change request's. The other forges have no such notion and ignore it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StatusKey<'a> {
    pub sha: &'a str,
    pub branch: Option<&'a str>,
    pub context: &'a str,
}

/// What a status says: its state and description.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Said<'a> {
    pub state: StatusState,
    pub description: &'a str,
}

/// What a forge is called and does the same way as the others, but in its own words.
pub struct Dialect {
    /// The forge as its users name it: `Bitbucket Cloud`, `Bitbucket Data Center`.
    pub(super) product: &'static str,
    /// What the forge calls a change request.
    pub(super) noun: ChangeRequestNoun,
    /// Whether a `409` to opening a change request means one is open for these branches
    /// already, which is adopted ([`Forge::open_pull_request`]).
    pub(super) adopts: bool,
    /// The token's login, asked once: `forge.login` when configured.
    pub(super) login: tokio::sync::OnceCell<String>,
    /// Whether whoever posts a status may also say when it was posted (Bitbucket Data
    /// Center's `lastUpdated`): a status's time then proves nothing about when tagpin said it.
    pub(super) poster_dates_statuses: bool,
}

impl Dialect {
    /// A forge that adopts no change request opened meanwhile.
    pub(super) fn new(
        product: &'static str,
        noun: ChangeRequestNoun,
        login: Option<String>,
    ) -> Dialect {
        let login = tokio::sync::OnceCell::new_with(login);
        let adopts = false;
        Dialect {
            product,
            noun,
            adopts,
            login,
            poster_dates_statuses: false,
        }
    }

    /// One whose statuses carry the time their poster gave them.
    pub(super) fn poster_dated(self) -> Dialect {
        Dialect {
            poster_dates_statuses: true,
            ..self
        }
    }

    /// One that adopts a change request opened meanwhile for the same branches.
    pub(super) fn adopting(self) -> Dialect {
        Dialect {
            adopts: true,
            ..self
        }
    }
}

/// tagpin's marked comment as a forge answered it: what it says (it is edited only when it
/// says something else), and what editing it takes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Marked {
    pub id: u64,
    pub text: String,
    /// The thread it is in, where the forge keeps comments in threads (Azure DevOps).
    pub thread: Option<u64>,
    /// Its version, where an edit names the one it replaces (Bitbucket Data Center).
    pub version: Option<i64>,
}

/// The contract every forge adapter implements: the required methods are the forge's
/// dialect, the provided ones the policies every forge follows the same way.
///
/// The futures are `Send`: the operator runs passes on tokio's worker threads. An adapter
/// writes each required method as an `async fn`, and the compiler checks the contract.
pub trait Forge: Send + Sync {
    /// What this forge calls a change request, whether it adopts one opened meanwhile, and
    /// who the token is once known.
    fn dialect(&self) -> &Dialect;

    /// Asks the forge who the token acts as.
    fn ask_login(&self) -> impl Future<Output = Result<String>> + Send;

    /// The change requests `listing` asks for, every page; `what` names the call in errors.
    fn list(
        &self,
        what: &str,
        listing: Listing<'_>,
    ) -> impl Future<Output = Result<Vec<PullRequestInfo>>> + Send;

    /// Opens a change request: one call, whose `409` [`Forge::open_pull_request`] reads.
    fn create(
        &self,
        what: &str,
        new: NewChange<'_>,
    ) -> impl Future<Output = Result<PullRequestInfo>> + Send;

    /// Gives change request `number` this title and body.
    fn update_pull_request(
        &self,
        number: u64,
        title: &str,
        body: &str,
    ) -> impl Future<Output = Result<()>> + Send;

    /// One change request by number (GitLab: the merge request's IID; Gitea: the pull
    /// request's number, shared with issues).
    fn pull_request(&self, number: u64) -> impl Future<Output = Result<PullRequestInfo>> + Send;

    /// Every status of `key` (on GitLab, of its branch when given), newest first, with who set
    /// each and when, and whether tagpin's own can all be among them.
    fn statuses(&self, key: StatusKey<'_>) -> impl Future<Output = Result<StatusHistory>> + Send;

    /// Sets the status of `key` to what `said` says. Descriptions are kept within 140
    /// characters ([`crate::verify::judge::verdict::status_description`]), which GitHub requires.
    fn set_status(
        &self,
        key: StatusKey<'_>,
        said: Said<'_>,
    ) -> impl Future<Output = Result<()>> + Send;

    /// The comment on change request `number` carrying `marker` that is tagpin's to edit
    /// (oldest first; on GitHub among anyone's, elsewhere among tagpin's own), every page.
    fn marked_comment(
        &self,
        number: u64,
        marker: &str,
    ) -> impl Future<Output = Result<Option<Marked>>> + Send;

    /// Makes tagpin's comment on change request `number` say `body`: `old` edited, or a new
    /// one when there is none.
    fn write_comment(
        &self,
        number: u64,
        old: Option<Marked>,
        body: &str,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Adds `labels` to change request `number`. A forge without labels (Bitbucket) sets
    /// nothing, and nothing stands in: tagpin finds its change requests by their branch.
    fn add_labels(
        &self,
        number: u64,
        labels: &[String],
    ) -> impl Future<Output = Result<()>> + Send {
        async move {
            if !labels.is_empty() {
                let (name, product) = (self.dialect().noun.name(number), self.dialect().product);
                tracing::debug!("{name}: {product} has no labels; {labels:?} not set");
            }
            Ok(())
        }
    }

    /// `body` as this forge gives it back; whole, unless the forge cuts it.
    fn stored_body(&self, body: &str) -> String {
        body.to_string()
    }

    /// What a list answered, completed where the forge answers less than tagpin reads
    /// (Bitbucket Cloud's short commit hashes); as it is elsewhere.
    fn finish(
        &self,
        prs: Vec<PullRequestInfo>,
        purpose: Purpose,
    ) -> impl Future<Output = Result<Vec<PullRequestInfo>>> + Send {
        let _ = purpose;
        async move { Ok(prs) }
    }

    /// The login (GitLab: username; Bitbucket Cloud: account uuid; Azure DevOps: identity id)
    /// the token acts as, asked once per process, or `forge.login` when configured.
    fn login(&self) -> impl Future<Output = Result<&str>> + Send {
        async move {
            let login = &self.dialect().login;
            login
                .get_or_try_init(|| self.ask_login())
                .await
                .map(String::as_str)
        }
    }

    /// Every change request (open, closed, merged) from `branch` of this repository into
    /// `base`, newest first. Never one from a fork, even of a branch of the same name.
    fn pull_requests_for(
        &self,
        branch: &str,
        base: &str,
    ) -> impl Future<Output = Result<Vec<PullRequestInfo>>> + Send {
        async move {
            let what = format!("list {}s from {branch}", self.dialect().noun.word());
            let mut prs = self.list(&what, Listing::From { branch, base }).await?;
            prs.retain(|p| p.head_ref == branch && p.same_repository);
            let mut prs = self.finish(prs, Purpose::Branch).await?;
            prs.sort_by_key(|p| std::cmp::Reverse(p.number));
            Ok(prs)
        }
    }

    /// What is in flight into `base` on branches starting with `prefix` (tagpin's own), newest
    /// first: every open change request, and those closed or merged at or after `closed_since`
    /// (Unix seconds). Forks' are included, marked by `same_repository`: the caller says why
    /// it leaves them alone.
    fn pull_requests_with_prefix(
        &self,
        prefix: &str,
        base: &str,
        closed_since: i64,
    ) -> impl Future<Output = Result<Vec<PullRequestInfo>>> + Send {
        async move {
            let what = format!("list {}s into {base}", self.dialect().noun.word());
            let open = self.list(&what, Listing::OpenInto { prefix, base }).await?;
            let since = closed_since;
            let recent = Listing::ClosedInto {
                prefix,
                base,
                since,
            };
            let recent = self.list(&what, recent).await?;
            self.finish(in_flight(open, recent, prefix), Purpose::InFlight)
                .await
        }
    }

    /// Opens a change request from `branch` into `base`. Where the forge answers `409` for
    /// one already open for these branches ([`Dialect::adopts`]: another tagpin or a person got
    /// there first), that one is adopted when it is this repository's: given this title and
    /// body, and returned.
    fn open_pull_request(
        &self,
        new: NewChange<'_>,
    ) -> impl Future<Output = Result<PullRequestInfo>> + Send {
        async move {
            let (branch, base) = (new.branch, new.base);
            let what = format!(
                "open a {} from {branch} into {base}",
                self.dialect().noun.word()
            );
            let e = match self.create(&what, new).await {
                Err(e) if self.dialect().adopts && e.status() == Some(409) => e,
                created => return created,
            };
            let open = self.list(&what, Listing::OpenFrom { branch, base }).await?;
            let open = open
                .into_iter()
                .find(|p| p.head_ref == branch && p.same_repository && p.open);
            let Some(mut pr) = open else { return Err(e) };
            let name = self.dialect().noun.name(pr.number);
            tracing::info!("{name} was opened for {branch} meanwhile; adopting it");
            self.update_pull_request(pr.number, new.title, new.body)
                .await?;
            pr.title = new.title.to_string();
            pr.body = self.stored_body(new.body);
            Ok(pr)
        }
    }

    /// Keeps one comment per change request carrying `marker`: edits it when it exists and
    /// says something else ([`Forge::marked_comment`]), creates it otherwise. One that already
    /// says exactly this is left alone: editing it again would only spend a call.
    fn upsert_comment(
        &self,
        number: u64,
        marker: &str,
        body: &str,
    ) -> impl Future<Output = Result<()>> + Send {
        async move {
            match self.marked_comment(number, marker).await? {
                Some(comment) if comment.text == body => Ok(()),
                old => self.write_comment(number, old, body).await,
            }
        }
    }
}

/// Entries kept of what this process last wrote; when full, all are dropped: the next passes
/// read back once, nothing is wrong.
const MAX_REMEMBERED: usize = 512;
/// How long what this process last wrote (a status, the verdict comment) is trusted without
/// reading it back: a pass that would write the same again spends no call, and a status or
/// comment changed by hand is set right within this time.
pub(crate) const READ_BACK_AFTER: Duration = Duration::from_secs(600);

/// What this process last wrote or read back on one forge: status `(sha, branch, context)` ->
/// `(state, description)`, and change request -> verdict comment body; each with when
/// ([`READ_BACK_AFTER`]). tokio's clock, not std's: lifetimes follow paused test time (see
/// [`crate::clock`]).
#[derive(Default)]
pub struct Memory {
    statuses: std::sync::Mutex<HashMap<OwnedKey, KnownStatus>>,
    comments: std::sync::Mutex<HashMap<u64, (String, tokio::time::Instant)>>,
}

/// Which status, `(sha, branch, context)`: on GitLab the same commit has one per branch.
type OwnedKey = (String, Option<String>, String);
/// A status tagpin set or read back, `(state, description, when)`.
type KnownStatus = (StatusState, String, tokio::time::Instant);

impl Memory {
    /// Whether this process set or read `said` at `key` within [`READ_BACK_AFTER`].
    pub(crate) fn said_lately(&self, key: StatusKey<'_>, said: Said<'_>) -> bool {
        let known = lock(&self.statuses).get(&owned(key)).cloned();
        known.is_some_and(|(state, description, at)| {
            state == said.state && description == said.description && still_fresh(at)
        })
    }

    pub(crate) fn remember_status(&self, key: StatusKey<'_>, said: Said<'_>) {
        let at = tokio::time::Instant::now();
        let known = (said.state, said.description.to_string(), at);
        remember(&self.statuses, owned(key), known);
    }

    /// Whether this process wrote or found `body` as change request `number`'s comment within
    /// [`READ_BACK_AFTER`].
    pub(crate) fn commented_lately(&self, number: u64, body: &str) -> bool {
        let known = lock(&self.comments).get(&number).cloned();
        known.is_some_and(|(b, at)| b == body && still_fresh(at))
    }

    pub(crate) fn remember_comment(&self, number: u64, body: &str) {
        let known = (body.to_string(), tokio::time::Instant::now());
        remember(&self.comments, number, known);
    }
}

fn owned(key: StatusKey<'_>) -> OwnedKey {
    let branch = key.branch.map(str::to_string);
    (key.sha.to_string(), branch, key.context.to_string())
}

/// Keeps `value` at `key`, dropping every entry first when [`MAX_REMEMBERED`] are kept.
fn remember<K: std::hash::Hash + Eq, V>(map: &std::sync::Mutex<HashMap<K, V>>, key: K, value: V) {
    let mut known = lock(map);
    if known.len() >= MAX_REMEMBERED {
        known.clear();
    }
    known.insert(key, value);
}

/// Whether what this process wrote or read back at `at` is recent enough to trust without
/// reading it again ([`READ_BACK_AFTER`]).
fn still_fresh(at: tokio::time::Instant) -> bool {
    at.elapsed() < READ_BACK_AFTER
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

/// The headers `pairs` name, for tests of what a forge's headers say.
#[cfg(test)]
pub(super) fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.insert(*name, HeaderValue::from_str(value).unwrap());
    }
    map
}

/// The settings of a forge of `kind` at `api_url`, as a test builds an adapter from them.
#[cfg(test)]
pub(super) fn settings(kind: super::settings::Kind, api_url: &str) -> Settings {
    Settings {
        kind,
        api_url: api_url.into(),
        token_env: "TOKEN".into(),
        login: None,
        username_env: None,
        api_commits: false,
        timeout_seconds: 60,
    }
}

/// The names of a change request's labels, none when the forge sends no list.
pub(super) fn label_names<L>(labels: Option<Vec<L>>, name: fn(L) -> String) -> Vec<String> {
    labels.unwrap_or_default().into_iter().map(name).collect()
}

/// Every state tagpin sets, for tests: each must read back as itself from its wire word.
#[cfg(test)]
pub(super) const EVERY_STATE: [StatusState; 4] = [
    StatusState::Pending,
    StatusState::Success,
    StatusState::Failure,
    StatusState::Error,
];

/// Asserts that every state tagpin sets reads back as itself from the word `wire` posts.
#[cfg(test)]
pub(super) fn assert_states_round_trip(
    wire: fn(StatusState) -> &'static str,
    read: fn(&str) -> Option<StatusState>,
) {
    for state in EVERY_STATE {
        assert_eq!(read(wire(state)), Some(state), "{state:?}");
    }
}

/// Asserts what every adapter's trimmed example of a merged pull request reads as: tagpin's
/// #12 from `tagpin/main`, in this repository, without labels.
#[cfg(test)]
pub(super) fn assert_merged_twelve(merged: &PullRequestInfo) {
    assert_eq!(merged.number, 12);
    assert!(merged.merged && !merged.open);
    assert!(merged.labels.is_empty());
    assert_eq!(merged.head_ref, "tagpin/main");
    assert!(merged.same_repository);
}

/// `json` (a documented answer) with the keys of `patch` replaced, for tests.
#[cfg(test)]
pub(super) fn patched(json: &str, patch: serde_json::Value) -> serde_json::Value {
    let mut value: serde_json::Value = serde_json::from_str(json).unwrap();
    for (k, v) in patch.as_object().unwrap() {
        value[k] = v.clone();
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::Instant;

    #[test]
    fn the_forges_clock_is_its_dates_word() {
        let clock = ForgeClock::default();
        assert_eq!(clock.now(), None, "no answer yet");
        let mut dated = headers(&[("date", "Sun, 06 Nov 1994 08:49:37 GMT")]);
        clock.note_date(&dated);
        let now = clock.now().unwrap();
        assert!((784_111_777..784_111_777 + 5).contains(&now), "{now}");
        dated.insert(
            reqwest::header::DATE,
            HeaderValue::from_static("not a date"),
        );
        clock.note_date(&dated);
        assert!(clock.now().unwrap() >= 784_111_777, "kept");
    }

    #[test]
    fn a_rate_limit_is_waited_as_the_answer_says() {
        let now = std::time::UNIX_EPOCH + Duration::from_secs(1_000);
        let wait = |pairs: &[(&'static str, &str)]| retry_after_or_a_minute(&headers(pairs), now);
        assert_eq!(wait(&[("retry-after", "7")]), Duration::from_secs(7));
        let at = httpdate::fmt_http_date(now + Duration::from_secs(30));
        assert_eq!(
            wait(&[("retry-after", at.as_str())]),
            Duration::from_secs(31)
        );
        assert_eq!(wait(&[]), Duration::from_secs(60));
    }

    #[test]
    fn a_successful_answer_is_json_only_when_it_says_so() {
        let html = headers(&[("content-type", "text/html; charset=utf-8")]);
        assert!(!is_json(&html));
        let json = "application/json; charset=utf-8; api-version=7.1";
        assert!(is_json(&headers(&[("content-type", json)])));
    }

    #[test]
    fn failure_words_name_the_repository_and_the_api_once() {
        assert_eq!(
            fill("{repo} is not at {api}", "a/b", "https://h"),
            "a/b is not at https://h"
        );
        assert_eq!(
            fill("{x} {repo}", "{api}", "h"),
            "{x} {api}",
            "a name is kept as it is"
        );
    }
    #[tokio::test(start_paused = true)]
    async fn what_was_written_is_read_back_again_after_ten_minutes() {
        let at = Instant::now();
        assert!(still_fresh(at));
        tokio::time::advance(READ_BACK_AFTER - Duration::from_secs(1)).await;
        assert!(still_fresh(at));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(!still_fresh(at));
    }

    fn change(number: u64, open: bool, head_ref: &str, updated_at: i64) -> PullRequestInfo {
        PullRequestInfo {
            number,
            open,
            merged: !open,
            title: String::new(),
            body: String::new(),
            labels: Vec::new(),
            url: String::new(),
            head_ref: head_ref.into(),
            head_sha: String::new(),
            merge_commit_sha: None,
            merged_at: None,
            updated_at: Some(updated_at),
            author: String::new(),
            same_repository: true,
        }
    }

    #[test]
    fn in_flight_is_the_open_and_the_recently_closed_on_tagpins_branches_once_each() {
        let open = vec![
            change(3, true, "tagpin/main", 50),
            change(4, true, "feature/x", 50),
        ];
        // 3 was closed between the two reads: the open read wins, it is not listed twice.
        let recent = vec![
            change(3, false, "tagpin/main", 60),
            change(5, false, "tagpin/promote/prod", 55),
            change(6, true, "tagpin/other", 40),
        ];
        let numbers: Vec<(u64, bool)> = in_flight(open, recent, "tagpin/")
            .iter()
            .map(|p| (p.number, p.open))
            .collect();
        assert_eq!(numbers, [(5, false), (3, true)]);
    }

    #[test]
    fn a_page_reaching_past_the_window_is_the_last_read() {
        let page = [
            change(1, false, "tagpin/a", 100),
            change(2, false, "tagpin/b", 90),
        ];
        assert!(!updated_before(None)(&page));
        assert!(!updated_before(Some(90))(&page));
        assert!(updated_before(Some(95))(&page));
    }

    #[tokio::test]
    async fn pages_are_read_until_enough_or_the_last_or_the_bound() {
        let read = |url: String| async move {
            let n: usize = url.parse().unwrap();
            Ok::<_, ForgeError>((vec![n], Some((n + 1).to_string())))
        };
        let until_three = read_pages("1".into(), read, |page: &[usize]| page == [3])
            .await
            .unwrap();
        assert_eq!(until_three, [1, 2, 3]);
        let endless = read_pages("1".into(), read, |_: &[usize]| false)
            .await
            .unwrap();
        assert_eq!(endless.len(), MAX_PAGES, "a runaway chain stops");
        let last = |url: String| async move {
            let n: usize = url.parse().unwrap();
            Ok::<_, ForgeError>((vec![n], (n < 2).then(|| (n + 1).to_string())))
        };
        assert_eq!(
            read_pages("1".into(), last, |_: &[usize]| false)
                .await
                .unwrap(),
            [1, 2]
        );
    }

    #[tokio::test]
    async fn a_list_cut_at_the_page_bound_says_it_is_not_whole() {
        let endless = |url: String| async move {
            let n: usize = url.parse().unwrap();
            Ok::<_, ForgeError>((vec![n], Some((n + 1).to_string())))
        };
        let (items, whole) = read_pages_whole("1".into(), endless, |_: &[usize]| false)
            .await
            .unwrap();
        assert_eq!((items.len(), whole), (MAX_PAGES, false));
        let ends = |url: String| async move {
            let n: usize = url.parse().unwrap();
            Ok::<_, ForgeError>((vec![n], (n < MAX_PAGES).then(|| (n + 1).to_string())))
        };
        let (items, whole) = read_pages_whole("1".into(), ends, |_: &[usize]| false)
            .await
            .unwrap();
        assert_eq!(
            (items.len(), whole),
            (MAX_PAGES, true),
            "the last page ends it"
        );
    }

    #[test]
    fn the_next_page_is_read_from_the_link_header() {
        let link = "<https://api.github.com/repositories/1/pulls?state=open&page=2>; rel=\"next\", <https://api.github.com/repositories/1/pulls?state=open&page=5>; rel=\"last\"";
        assert_eq!(
            next_link(link).as_deref(),
            Some("https://api.github.com/repositories/1/pulls?state=open&page=2")
        );
        let last = "<https://api.github.com/x?page=1>; rel=\"prev\", <https://api.github.com/x?page=1>; rel=\"first\"";
        assert_eq!(next_link(last), None);
    }
}
