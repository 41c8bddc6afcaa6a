//! OCI distribution client: resolves `repo:tag` to the digest the registry serves now.
//!
//! The digest tagpin writes into Git decides what every node runs, so this module is strict:
//! a digest comes either from the registry's `Docker-Content-Digest` header for the exact
//! request that asked for the tag, or from hashing the manifest bytes it sent; whenever the
//! bytes are fetched, their sha256 must equal the digest claimed. Every request names all four
//! manifest media types (see [`media::ACCEPT_ALL`]), so a multi-arch tag resolves to its index.
//!
//! Economy: [`Client::resolve_all`] asks once per distinct `repo:tag`, at most
//! `concurrency_per_host` requests at a time per registry, reuses bearer tokens until they
//! expire, and retries only what is transient ([`retry`]).

pub mod auth;
pub(crate) mod cred_helper;
pub mod docker_config;
pub mod media;
pub mod retry;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use futures::future::join_all;
use futures::stream::{FuturesUnordered, StreamExt};
use reqwest::header::{HeaderMap, ACCEPT, AUTHORIZATION, CONTENT_TYPE, LINK, RETRY_AFTER};
use reqwest::{Method, StatusCode};
use serde::Serialize;
use sha2::{Digest as _, Sha256};
use tokio::sync::Semaphore;
// tokio's, not std's: cache lifetimes and deadlines follow paused test time (see crate::clock).
use tokio::time::Instant;

use crate::mutex::lock;
use crate::reference::{Digest, Reference};
use auth::{Challenge, Credential, Login};
pub use docker_config::CredentialStore;
pub(crate) use media::ParsedManifest;
pub use media::{IndexChild, ManifestKind};
pub use retry::RetryPolicy;

/// How tagpin talks to registries. Built once from the CLI or config file.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `host[:port]` reached over plain HTTP instead of HTTPS.
    pub insecure_hosts: Vec<String>,
    /// Extra PEM CA files trusted for every registry, besides the system's roots.
    pub ca_files: Vec<PathBuf>,
    pub credentials: CredentialStore,
    /// Requests in flight at once to one registry host.
    pub concurrency_per_host: usize,
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
    pub retry: RetryPolicy,
    /// How long [`Client::resolve_all`] waits for any one image, retries included. A slow or
    /// hanging registry then delays only its own images: the pass goes on without them and
    /// reports them, instead of waiting out every timeout and retry.
    pub resolve_budget: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            insecure_hosts: Vec::new(),
            ca_files: Vec::new(),
            credentials: CredentialStore::default(),
            concurrency_per_host: DEFAULT_CONCURRENCY_PER_HOST,
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            retry: RetryPolicy::default(),
            resolve_budget: DEFAULT_RESOLVE_BUDGET,
        }
    }
}

/// The default for [`Settings::resolve_budget`].
pub(crate) const DEFAULT_RESOLVE_BUDGET: Duration = Duration::from_secs(60);

/// Enough to keep a registry busy without tripping the abuse limits public registries apply.
pub const DEFAULT_CONCURRENCY_PER_HOST: usize = 8;
/// Upper bound on `tags/list` pages followed, so a registry with a looping `Link` cannot hold
/// a pass forever.
const MAX_TAG_PAGES: usize = 1000;

pub use crate::resolution::{RegistryError, ResolveKey, ResolveResult, Resolved};

/// Request counters, for benchmarks, tests and (later) metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    /// HEAD and GET requests on `/v2/<name>/manifests/…`, retries and auth round trips included.
    pub manifest_requests: u64,
    pub token_requests: u64,
    /// Signature lookups asked of the registry: one per `.sig` manifest and one per payload
    /// blob, retries and auth round trips aside (those are counted in `manifest_requests`,
    /// which includes every signature request: one registry budget).
    pub signature_requests: u64,
    /// Age lookups (`images.minimum_age`): one per manifest or index and one per config blob
    /// read for when a digest was built; also counted in `manifest_requests`.
    pub age_requests: u64,
}

/// What [`Client::bytes`] fetches: a manifest (`/v2/<name>/manifests/<digest>`) or a blob.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stored {
    Manifest,
    Blob,
}

/// What [`Client::bytes`] fetches for: the figure of [`Stats`] it is counted in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// A signature or provenance lookup: `signature_requests`.
    Signature,
    /// When a digest was built (`images.minimum_age`): `age_requests`.
    Age,
}

/// The registry client. Cheap to share behind an `Arc`; all state is internal.
pub struct Client {
    http: Transports,
    settings: Settings,
    /// Bearer tokens by (host, scope), with the instant they stop being reused.
    tokens: Mutex<HashMap<(String, String), (String, Instant)>>,
    /// How each host asked to be authenticated, learned from its first 401, so later
    /// repositories on that host get a token before their first request.
    host_auth: Mutex<HashMap<String, Challenge>>,
    permits: Mutex<HashMap<String, Arc<Semaphore>>>,
    /// `scheme://host/` of each host asked, parsed once: a request's URL is this with its
    /// path set, not a whole URL parsed again (host parsing was most of that cost).
    bases: Mutex<HashMap<String, reqwest::Url>>,
    rate_limits: Mutex<HashMap<String, String>>,
    manifest_requests: AtomicU64,
    token_requests: AtomicU64,
    signature_requests: AtomicU64,
    age_requests: AtomicU64,
    /// Answers by (host, HTTP status; 0 when no answer came), for metrics.
    answers: Mutex<BTreeMap<(String, u16), u64>>,
}

/// An Authorization header as sent, with what a `401` to it must forget.
struct Sent {
    header: String,
    /// The token cache key of a `Bearer` header: the token is dropped on a `401`.
    token: Option<(String, String)>,
    /// The login a `Basic` header carries: reported refused on a `401`.
    basic_login: Option<Login>,
}

/// Where a request goes and whose name goes into its errors.
struct Target<'a> {
    image: String,
    /// Normalized registry name: the credentials key.
    domain: &'a str,
    /// `host[:port]` the HTTP request goes to.
    host: &'a str,
    repository: String,
}

/// The HTTP clients of one registry client. Loading the system's certificates costs about
/// 18 million instructions (a third of an empty `tagpin plan` once libgit2 stays out of it):
/// a pass that only reaches plain-HTTP registries never pays it.
struct Transports {
    /// For `http://` URLs: no certificate store.
    plain: reqwest::Client,
    /// For `https://` URLs, made on first use.
    /// Shared as it failed: the error is not `Clone`, and every HTTPS request reports it.
    tls: OnceLock<Result<reqwest::Client, Arc<reqwest::Error>>>,
    /// `--ca-file` certificates, read (and checked) when the client is made.
    roots: Vec<reqwest::Certificate>,
}

/// What both of a client's transports share: agent, timeouts (reqwest's runs until the
/// answer's last byte), redirects.
fn transport(settings: &Settings) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .user_agent(concat!("tagpin/", env!("CARGO_PKG_VERSION")))
        .connect_timeout(settings.connect_timeout)
        .timeout(settings.request_timeout)
        .redirect(redirect_policy())
}

/// A complete answer: status, headers and (bounded) body.
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Vec<u8>,
    /// The body was longer than [`media::MAX_MANIFEST_BYTES`] and was cut there.
    truncated: bool,
    attempts: u32,
}

impl Client {
    pub fn new(settings: Settings) -> Result<Client, RegistryError> {
        let mut roots = Vec::new();
        for path in &settings.ca_files {
            let pem = std::fs::read(path).map_err(|e| {
                RegistryError::Setup(format!("cannot read CA file {}: {e}", path.display()))
            })?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| {
                RegistryError::Setup(format!("CA file {} is not PEM: {e}", path.display()))
            })?;
            if certs.is_empty() {
                return Err(RegistryError::Setup(format!(
                    "CA file {} holds no certificate",
                    path.display()
                )));
            }
            roots.extend(certs);
        }
        let plain = transport(&settings)
            .tls_built_in_root_certs(false)
            .build()
            .map_err(|e| RegistryError::Setup(error_chain(&e)))?;
        Ok(Client {
            http: Transports {
                plain,
                tls: OnceLock::new(),
                roots,
            },
            settings,
            tokens: Mutex::default(),
            host_auth: Mutex::default(),
            permits: Mutex::default(),
            bases: Mutex::default(),
            rate_limits: Mutex::default(),
            manifest_requests: AtomicU64::new(0),
            token_requests: AtomicU64::new(0),
            signature_requests: AtomicU64::new(0),
            age_requests: AtomicU64::new(0),
            answers: Mutex::default(),
        })
    }

    pub fn stats(&self) -> Stats {
        Stats {
            manifest_requests: self.manifest_requests.load(Ordering::Relaxed),
            token_requests: self.token_requests.load(Ordering::Relaxed),
            signature_requests: self.signature_requests.load(Ordering::Relaxed),
            age_requests: self.age_requests.load(Ordering::Relaxed),
        }
    }

    /// Requests answered so far, by (host, status); status 0 counts requests that got no
    /// answer (connection refused, timeout).
    pub fn request_counts(&self) -> Vec<((String, u16), u64)> {
        lock(&self.answers)
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    }

    /// The last `ratelimit-remaining` a host reported (Docker Hub sends it), as sent.
    pub fn rate_limit_remaining(&self, host: &str) -> Option<String> {
        lock(&self.rate_limits).get(host).cloned()
    }

    /// Resolves every distinct reference once, concurrently; one failure never stops others.
    pub async fn resolve_all<'a, I>(&self, refs: I) -> BTreeMap<ResolveKey, ResolveResult>
    where
        I: IntoIterator<Item = &'a Reference>,
    {
        let mut distinct: BTreeMap<ResolveKey, &Reference> = BTreeMap::new();
        for r in refs {
            distinct.entry(ResolveKey::of(r)).or_insert(r);
        }
        let results = join_all(distinct.values().map(|r| self.resolve_within_budget(r))).await;
        distinct.into_keys().zip(results).collect()
    }

    /// Like [`Client::resolve_all`], for references that arrive while the caller is still
    /// finding them (a scan on another thread): each distinct one is asked as soon as it
    /// arrives, so reading the files and asking the registry overlap. Each answer is handed
    /// to `answered` as it comes, so the caller can use it before the last one is in (the
    /// pass plans each file then). References come in batches, so that a finder far ahead of
    /// the registry wakes this task once per batch, not once per image. Ends when the sender
    /// is dropped and every answer is in.
    pub async fn resolve_as_found(
        &self,
        mut found: tokio::sync::mpsc::UnboundedReceiver<Vec<Reference>>,
        mut answered: impl FnMut(&ResolveKey, &ResolveResult),
    ) -> BTreeMap<ResolveKey, ResolveResult> {
        let mut results = BTreeMap::new();
        let mut asked = std::collections::BTreeSet::new();
        let mut pending = FuturesUnordered::new();
        let mut open = true;
        loop {
            tokio::select! {
                references = found.recv(), if open => match references {
                    Some(references) => {
                        for reference in references {
                            let key = ResolveKey::of(&reference);
                            if asked.insert(key.clone()) {
                                pending.push(async move {
                                    (key, self.resolve_within_budget(&reference).await)
                                });
                            }
                        }
                    }
                    None => open = false,
                },
                Some((key, result)) = pending.next(), if !pending.is_empty() => {
                    answered(&key, &result);
                    results.insert(key, result);
                }
                else => break,
            }
        }
        results
    }

    /// [`Client::resolve`] within [`Settings::resolve_budget`]: a registry that keeps
    /// answering slowly costs one image, never the pass.
    async fn resolve_within_budget(&self, r: &Reference) -> ResolveResult {
        let budget = self.settings.resolve_budget;
        match tokio::time::timeout(budget, self.resolve(r)).await {
            Ok(result) => result,
            Err(_) => Err(RegistryError::Unreachable {
                image: ResolveKey::of(r).to_string(),
                host: r.api_host().to_string(),
                detail: format!(
                    "no answer within {}s; the pass went on without it",
                    budget.as_secs()
                ),
            }),
        }
    }

    /// Resolves one reference: its tag (the implied `latest` when none is written), or for a
    /// digest-only reference, checks that the registry has that digest.
    pub async fn resolve(&self, reference: &Reference) -> ResolveResult {
        let key = ResolveKey::of(reference);
        let target = self.target(reference, key.to_string());
        let path = format!("/v2/{}/manifests/{}", target.repository, key.reference);
        let head = self.fetch_manifest(&target, Method::HEAD, &path).await?;
        if head.status.is_success() {
            let claimed = header_str(&head.headers, "docker-content-digest");
            let content_type = header_str(&head.headers, CONTENT_TYPE.as_str());
            if let (Some(claimed), Some(content_type)) = (claimed, content_type) {
                let digest = Digest::parse(&claimed).map_err(|e| bad(&target, e.to_string()))?;
                let kind = media::classify(&content_type).map_err(|p| media_error(&target, p))?;
                if let Some(asked) = reference.digest().filter(|_| reference.tag().is_none()) {
                    if *asked != digest {
                        return Err(mismatch(&target, asked, &digest));
                    }
                }
                return Ok(Resolved {
                    digest,
                    kind,
                    media_type: bare_media_type(&content_type),
                });
            }
        } else if !matches!(
            head.status,
            StatusCode::METHOD_NOT_ALLOWED | StatusCode::NOT_IMPLEMENTED
        ) {
            return Err(status_error(&target, &head));
        }
        // No digest header (or no HEAD support): fetch the bytes and hash them ourselves.
        let expected = reference.digest().filter(|_| reference.tag().is_none());
        let (digest, parsed) = self.get_verified(&target, &path, expected).await?;
        Ok(Resolved {
            digest,
            kind: parsed.kind,
            media_type: parsed.media_type,
        })
    }

    /// Fetches and parses the manifest `digest` of the reference's repository, verifying that
    /// its bytes hash to `digest`: children of an index, config of an image.
    pub async fn manifest(
        &self,
        reference: &Reference,
        digest: &Digest,
    ) -> Result<ParsedManifest, RegistryError> {
        let target = self.target_at(reference, digest);
        let path = format!("/v2/{}/manifests/{}", target.repository, digest);
        Ok(self.get_verified(&target, &path, Some(digest)).await?.1)
    }

    /// The manifest at `tag` of the reference's repository, as bytes (cosign's
    /// `sha256-<hex>.sig`), or `None` when the registry has no such tag. Bounded like every
    /// manifest; its bytes are checked against the registry's digest header when it sends one.
    pub(crate) async fn tagged_manifest_bytes(
        &self,
        reference: &Reference,
        tag: &str,
    ) -> Result<Option<Vec<u8>>, RegistryError> {
        let image = format!("{}/{}:{tag}", reference.domain(), reference.repository());
        let target = self.target(reference, image);
        let path = format!("/v2/{}/manifests/{tag}", target.repository);
        self.signature_requests.fetch_add(1, Ordering::Relaxed);
        let answer = self.fetch_manifest(&target, Method::GET, &path).await?;
        if answer.status == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        check_complete(&target, &answer)?;
        let computed = sha256_digest(&answer.body);
        if let Some(claimed) = header_str(&answer.headers, "docker-content-digest") {
            let claimed = Digest::parse(&claimed).map_err(|e| bad(&target, e.to_string()))?;
            if claimed != computed {
                return Err(mismatch(&target, &claimed, &computed));
            }
        }
        Ok(Some(answer.body))
    }

    /// The OCI 1.1 referrers of manifest `digest` of the reference's repository, as the image
    /// index that lists them: `GET /v2/<name>/referrers/<digest>` where the registry serves
    /// the API, else the referrers tag `sha256-<hex>` the distribution spec defines as its
    /// fallback (a registry without the API answers `404`, which a registry with it must
    /// not). `None` when neither lists any. Bounded and counted like a signature manifest.
    pub async fn referrers(
        &self,
        reference: &Reference,
        digest: &Digest,
    ) -> Result<Option<Vec<u8>>, RegistryError> {
        let target = self.target_at(reference, digest);
        let path = format!("/v2/{}/referrers/{digest}", target.repository);
        self.signature_requests.fetch_add(1, Ordering::Relaxed);
        let answer = self
            .fetch(&target, Method::GET, &path, media::OCI_INDEX, true)
            .await?;
        if answer.status == StatusCode::NOT_FOUND {
            let tag = format!("{}-{}", digest.algorithm(), digest.hex());
            return self.tagged_manifest_bytes(reference, &tag).await;
        }
        check_complete(&target, &answer)?;
        Ok(Some(answer.body))
    }

    /// The manifest or blob `digest` of the reference's repository as bytes (a referrer's
    /// manifest, a signature payload; the manifest or index and the config that say when a
    /// digest was built), which must hash to `digest`, or nothing of it is used. Bounded like
    /// every manifest, retried and timed out alike, and counted for `lookup`.
    pub(crate) async fn bytes(
        &self,
        reference: &Reference,
        digest: &Digest,
        stored: Stored,
        lookup: Lookup,
    ) -> Result<Vec<u8>, RegistryError> {
        let target = self.target_at(reference, digest);
        let (folder, accept) = match stored {
            Stored::Manifest => ("manifests", media::ACCEPT_ALL),
            Stored::Blob => ("blobs", "*/*"),
        };
        let path = format!("/v2/{}/{folder}/{digest}", target.repository);
        let counter = match lookup {
            Lookup::Signature => &self.signature_requests,
            Lookup::Age => &self.age_requests,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        let answer = self
            .fetch(&target, Method::GET, &path, accept, true)
            .await?;
        verified_body(&target, digest, answer)
    }

    /// All tags of the reference's repository, following `Link` pagination (`n`, `last`).
    pub async fn list_tags(
        &self,
        reference: &Reference,
        page_size: usize,
    ) -> Result<Vec<String>, RegistryError> {
        #[derive(serde::Deserialize)]
        struct TagPage {
            #[serde(default)]
            tags: Option<Vec<String>>,
        }
        let image = format!("{}/{}", reference.domain(), reference.repository());
        let target = self.target(reference, image);
        let mut path = format!("/v2/{}/tags/list?n={page_size}", target.repository);
        let mut tags = Vec::new();
        for _ in 0..MAX_TAG_PAGES {
            let answer = self
                .fetch(&target, Method::GET, &path, "application/json", false)
                .await?;
            check_complete(&target, &answer)?;
            let page: TagPage = serde_json::from_slice(&answer.body).map_err(|e| {
                let problem = crate::bounded::json_problem(&e);
                bad(&target, format!("tag list: {problem}"))
            })?;
            tags.extend(page.tags.unwrap_or_default());
            match header_str(&answer.headers, LINK.as_str()).and_then(|l| next_link(&l)) {
                Some(next) => path = next,
                None => return Ok(tags),
            }
        }
        Err(bad(
            &target,
            format!("tag list has more than {MAX_TAG_PAGES} pages; stopped following Link"),
        ))
    }

    /// The target of one digest of the reference's repository, named `registry/repo@digest`.
    fn target_at<'a>(&self, reference: &'a Reference, digest: &Digest) -> Target<'a> {
        let image = format!("{}/{}@{digest}", reference.domain(), reference.repository());
        self.target(reference, image)
    }

    fn target<'a>(&self, reference: &'a Reference, image: String) -> Target<'a> {
        Target {
            image,
            domain: reference.domain(),
            host: reference.api_host(),
            repository: reference.repository(),
        }
    }

    /// After `refused` (the login sent) was turned down: tells the credentials so, and whether
    /// looking the login up again may give another. Once per request: `asked_again` records it.
    async fn may_ask_again(
        &self,
        target: &Target<'_>,
        refused: Option<&Login>,
        asked_again: &mut bool,
    ) -> bool {
        let Some(login) = refused.filter(|_| !*asked_again) else {
            return false;
        };
        if !self
            .settings
            .credentials
            .refused(target.domain, login)
            .await
        {
            return false;
        }
        *asked_again = true;
        true
    }

    async fn fetch_manifest(
        &self,
        target: &Target<'_>,
        method: Method,
        path: &str,
    ) -> Result<Answer, RegistryError> {
        self.fetch(target, method, path, media::ACCEPT_ALL, true)
            .await
    }

    /// GETs a manifest, hashes its exact bytes, and checks the hash against the registry's
    /// digest header and against `expected` when the caller asked by digest.
    async fn get_verified(
        &self,
        target: &Target<'_>,
        path: &str,
        expected: Option<&Digest>,
    ) -> Result<(Digest, ParsedManifest), RegistryError> {
        let answer = self.fetch_manifest(target, Method::GET, path).await?;
        check_complete(target, &answer)?;
        let computed = sha256_digest(&answer.body);
        let claimed = header_str(&answer.headers, "docker-content-digest")
            .map(|c| Digest::parse(&c).map_err(|e| bad(target, e.to_string())))
            .transpose()?;
        for claim in claimed.iter().chain(expected) {
            if *claim != computed {
                return Err(mismatch(target, claim, &computed));
            }
        }
        let content_type = header_str(&answer.headers, CONTENT_TYPE.as_str());
        let parsed = media::parse_manifest(&answer.body, content_type.as_deref())
            .map_err(|e| bad(target, e.to_string()))?;
        Ok((computed, parsed))
    }

    /// Sends one request with authentication and retries; returns the final answer, whatever
    /// its status, unless the registry could not be reached or kept failing transiently.
    ///
    /// On a `401` whatever was sent is forgotten (a bearer token the registry no longer takes
    /// is never sent again) and the request is authenticated as the challenge asks; if Basic
    /// credentials from a credential helper are then refused, the helper is asked again, once
    /// (see [`CredentialStore::refused`]).
    async fn fetch(
        &self,
        target: &Target<'_>,
        method: Method,
        path: &str,
        accept: &str,
        counts_as_manifest: bool,
    ) -> Result<Answer, RegistryError> {
        let scheme = self.scheme(target.host);
        let url = self.request_url(scheme, target.host, path);
        let scope = auth::token_scope(None, &target.repository);
        let mut sent = self.known_authorization(target, &scope).await?;
        let mut reauthenticated = false;
        let mut asked_again = false;
        loop {
            let transport = self.transport(scheme)?;
            let request = match &url {
                RequestUrl::Parsed(url) => transport.request(method.clone(), url.clone()),
                RequestUrl::Text(url) => transport.request(method.clone(), url),
            }
            .header(ACCEPT, accept);
            let request = match &sent {
                Some(sent) => request.header(AUTHORIZATION, &sent.header),
                None => request,
            };
            let answer = self
                .send_with_retry(target, request, counts_as_manifest)
                .await?;
            if answer.status != StatusCode::UNAUTHORIZED {
                return Ok(answer);
            }
            if let Some(key) = sent.as_ref().and_then(|s| s.token.as_ref()) {
                lock(&self.tokens).remove(key);
            }
            if reauthenticated {
                let refused = sent.as_ref().and_then(|s| s.basic_login.as_ref());
                if self.may_ask_again(target, refused, &mut asked_again).await {
                    sent = self.basic_authorization(target).await?;
                    if sent.is_some() {
                        continue;
                    }
                }
                let has_credentials = self.login(target).await?.is_some();
                return Err(self.unauthorized(target, has_credentials));
            }
            reauthenticated = true;
            let challenge = answer
                .headers
                .get_all(reqwest::header::WWW_AUTHENTICATE)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .find_map(auth::parse_challenge);
            let Some(challenge) = challenge else {
                return Err(RegistryError::Unauthorized {
                    image: target.image.clone(),
                    host: target.host.to_string(),
                    hint: "no Bearer or Basic challenge in WWW-Authenticate".to_string(),
                });
            };
            lock(&self.host_auth).insert(target.host.to_string(), challenge.clone());
            sent = match &challenge {
                Challenge::Basic => match self.basic_authorization(target).await? {
                    Some(value) => Some(value),
                    None => return Err(self.unauthorized(target, false)),
                },
                Challenge::Bearer {
                    realm,
                    service,
                    scope: asked,
                } => {
                    let scope = auth::token_scope(asked.as_deref(), &target.repository);
                    Some(
                        self.bearer_authorization(target, realm, service.as_deref(), &scope)
                            .await?,
                    )
                }
            };
        }
    }

    /// The Authorization to send up front, from what the host asked for before.
    async fn known_authorization(
        &self,
        target: &Target<'_>,
        scope: &str,
    ) -> Result<Option<Sent>, RegistryError> {
        let known = lock(&self.host_auth).get(target.host).cloned();
        match known {
            None => Ok(None),
            Some(Challenge::Basic) => self.basic_authorization(target).await,
            Some(Challenge::Bearer { realm, service, .. }) => Ok(Some(
                self.bearer_authorization(target, &realm, service.as_deref(), scope)
                    .await?,
            )),
        }
    }

    /// The target's login, from the Docker config or its credential helper.
    async fn login(&self, target: &Target<'_>) -> Result<Option<Login>, RegistryError> {
        self.settings
            .credentials
            .login(target.domain)
            .await
            .map_err(|e| RegistryError::Credentials {
                image: target.image.clone(),
                host: target.host.to_string(),
                detail: e.to_string(),
            })
    }

    /// The `Basic` Authorization for the target, `None` when it has no password.
    /// An identity token is refused here: it is only good at a token realm.
    async fn basic_authorization(
        &self,
        target: &Target<'_>,
    ) -> Result<Option<Sent>, RegistryError> {
        match self.login(target).await? {
            None => Ok(None),
            Some(Login::Password(c)) => Ok(Some(Sent {
                header: basic_header(&c),
                token: None,
                basic_login: Some(Login::Password(c)),
            })),
            Some(Login::IdentityToken(_)) => Err(RegistryError::Unauthorized {
                image: target.image.clone(),
                host: target.host.to_string(),
                hint: format!(
                    "the credentials for {} are an identity token, which needs a Bearer token service, but the registry asked for Basic",
                    target.domain
                ),
            }),
        }
    }

    /// The `Bearer` Authorization for `scope` on the target's host.
    async fn bearer_authorization(
        &self,
        target: &Target<'_>,
        realm: &str,
        service: Option<&str>,
        scope: &str,
    ) -> Result<Sent, RegistryError> {
        let token = self.fetch_token(target, realm, service, scope).await?;
        Ok(Sent {
            header: format!("Bearer {token}"),
            token: Some((target.host.to_string(), scope.to_string())),
            basic_login: None,
        })
    }

    /// A bearer token for `scope` on the target's host, from the cache or the realm. If the
    /// realm refuses credentials from a credential helper, the helper is asked again, once.
    async fn fetch_token(
        &self,
        target: &Target<'_>,
        realm: &str,
        service: Option<&str>,
        scope: &str,
    ) -> Result<String, RegistryError> {
        let cache_key = (target.host.to_string(), scope.to_string());
        if let Some((token, until)) = lock(&self.tokens).get(&cache_key) {
            if Instant::now() < *until {
                return Ok(token.clone());
            }
        }
        // The realm is the registry's to name (WWW-Authenticate), and the registry is a
        // tenant's in operator mode: it is not quoted, and fetched only where allowed.
        let url = reqwest::Url::parse(realm)
            .map_err(|_| bad(target, "its token realm is not a URL".to_string()))?;
        if !self.may_fetch_realm(&url, target.host) {
            return Err(bad(
                target,
                format!(
                    "refused its token realm on {}: a token is fetched over HTTPS only, or over \
                     plain HTTP from the registry's own host when that registry is configured \
                     insecure (--insecure-registry, registries.insecure)",
                    url.host_str().unwrap_or("no host")
                ),
            ));
        }
        let mut login = self.login(target).await?;
        let mut asked_again = false;
        let answer = loop {
            let answer = self
                .request_token(target, url.clone(), service, scope, login.as_ref())
                .await?;
            if answer.status != StatusCode::UNAUTHORIZED && answer.status != StatusCode::FORBIDDEN {
                break answer;
            }
            if self
                .may_ask_again(target, login.as_ref(), &mut asked_again)
                .await
            {
                login = self.login(target).await?;
                continue;
            }
            return Err(RegistryError::Unauthorized {
                image: target.image.clone(),
                host: target.host.to_string(),
                hint: format!(
                    "the token service refused the {} for {} ({})",
                    match login {
                        Some(Login::IdentityToken(_)) => "identity token",
                        _ => "credentials",
                    },
                    target.domain,
                    answer.status
                ),
            });
        };
        if !answer.status.is_success() {
            return Err(status_error(target, &answer));
        }
        if answer.truncated {
            return Err(bad(target, format!("token service: {}", too_large())));
        }
        let token =
            auth::parse_token_answer(&answer.body).map_err(|e| bad(target, e.to_string()))?;
        // The lifetime is bounded by `parse_token_answer`; checked all the same, since a
        // panic here would take every image of the pass with it.
        if let Some(until) = Instant::now().checked_add(token.lifetime) {
            lock(&self.tokens).insert(cache_key, (token.value.clone(), until));
        }
        Ok(token.value)
    }

    /// One token request to the realm, with `login` as the protocol for its kind asks.
    async fn request_token(
        &self,
        target: &Target<'_>,
        mut url: reqwest::Url,
        service: Option<&str>,
        scope: &str,
        login: Option<&Login>,
    ) -> Result<Answer, RegistryError> {
        let http = self.transport(url.scheme())?;
        let request = match login {
            // OAuth2 refresh-token grant: the only place an identity token goes.
            Some(Login::IdentityToken(refresh_token)) => http
                .post(url)
                .form(&auth::refresh_token_form(refresh_token, service, scope)),
            _ => {
                {
                    let mut query = url.query_pairs_mut();
                    if let Some(service) = service {
                        query.append_pair("service", service);
                    }
                    query.append_pair("scope", scope);
                }
                let request = http.get(url);
                match login {
                    Some(Login::Password(c)) => request.header(AUTHORIZATION, basic_header(c)),
                    _ => request,
                }
            }
        };
        self.token_requests.fetch_add(1, Ordering::Relaxed);
        self.send_with_retry(target, request, false).await
    }

    /// Whether a token realm is fetched at all (with the credentials, when there are any):
    /// over HTTPS, or over plain HTTP only on the registry's own host name (any port) when
    /// that registry is itself reached over plain HTTP (`--insecure-registry`,
    /// `registries.insecure`). Any other realm is refused before it is asked: a registry
    /// could otherwise make tagpin fetch an internal address (`http://10.0.0.5/internal/token`)
    /// and send on the `token` field it answered, or send credentials there in clear text.
    fn may_fetch_realm(&self, realm: &reqwest::Url, registry_host: &str) -> bool {
        match realm.scheme() {
            "https" => true,
            "http" => {
                self.scheme(registry_host) == "http"
                    && realm.host_str() == Some(host_name(registry_host))
            }
            _ => false,
        }
    }

    /// One request, retried on 429, 5xx and transport errors per the policy; the answer's body
    /// is read here, bounded, while a per-host permit is held.
    async fn send_with_retry(
        &self,
        target: &Target<'_>,
        request: reqwest::RequestBuilder,
        counts_as_manifest: bool,
    ) -> Result<Answer, RegistryError> {
        let permits = self.permits_for(target.host);
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let Some(this_try) = request.try_clone() else {
                return Err(bad(target, "request cannot be retried".to_string()));
            };
            if counts_as_manifest {
                self.manifest_requests.fetch_add(1, Ordering::Relaxed);
            }
            let outcome = {
                let _permit = permits.acquire().await;
                match this_try.send().await {
                    Ok(response) => read_answer(response, attempt).await,
                    Err(e) => Err(e),
                }
            };
            let status = outcome.as_ref().map_or(0, |a| a.status.as_u16());
            count_answer(&mut lock(&self.answers), target.host, status);
            let policy = &self.settings.retry;
            let decision = match &outcome {
                Ok(answer) => {
                    self.note_rate_limit(target.host, &answer.headers);
                    if answer.status.is_success()
                        || !retry::is_retryable_status(answer.status.as_u16())
                    {
                        return outcome.map_err(|e| unreachable(target, &e));
                    }
                    let retry_after = header_str(&answer.headers, RETRY_AFTER.as_str());
                    policy.after_status(
                        attempt,
                        answer.status.as_u16(),
                        retry_after.as_deref(),
                        SystemTime::now(),
                        jitter(),
                    )
                }
                Err(e) if e.is_body() && !e.is_timeout() => {
                    // The body was over the size limit or malformed: not transient.
                    return Err(bad(target, error_chain(e)));
                }
                Err(_) => policy.after_transport_error(attempt, jitter()),
            };
            match decision {
                retry::Decision::RetryAfter(wait) => {
                    tracing::debug!(
                        image = %target.image,
                        registry = target.host,
                        attempt,
                        "retrying in {wait:?}"
                    );
                    tokio::time::sleep(wait).await;
                }
                retry::Decision::GiveUp => {
                    return match outcome {
                        Ok(answer) => Err(status_error(target, &answer)),
                        Err(e) => Err(unreachable(target, &e)),
                    };
                }
            }
        }
    }

    /// The URL of `path` on `host`: the host's parsed base with the path set, or, for a path
    /// with a query or fragment (a tag list's `Link`) or a host that is no URL's, the whole
    /// string, parsed (and refused) by reqwest as before.
    fn request_url(&self, scheme: &str, host: &str, path: &str) -> RequestUrl {
        let whole = || RequestUrl::Text(format!("{scheme}://{host}{path}"));
        if !path.starts_with('/') || path.contains(['?', '#']) {
            return whole();
        }
        let mut bases = lock(&self.bases);
        let base = match bases.get(host) {
            Some(base) => base,
            None => match reqwest::Url::parse(&format!("{scheme}://{host}/")) {
                Ok(base) => bases.entry(host.to_string()).or_insert(base),
                Err(_) => return whole(),
            },
        };
        let mut url = base.clone();
        drop(bases);
        url.set_path(path);
        RequestUrl::Parsed(url)
    }

    fn permits_for(&self, host: &str) -> Arc<Semaphore> {
        let mut permits = lock(&self.permits);
        if let Some(permits) = permits.get(host) {
            return permits.clone();
        }
        permits
            .entry(host.to_string())
            .or_insert_with(|| Arc::new(Semaphore::new(self.settings.concurrency_per_host.max(1))))
            .clone()
    }

    fn note_rate_limit(&self, host: &str, headers: &HeaderMap) {
        if let Some(remaining) = header_str(headers, "ratelimit-remaining") {
            tracing::info!(registry = host, "rate limit remaining: {remaining}");
            lock(&self.rate_limits).insert(host.to_string(), remaining);
        }
    }

    /// The HTTP client for a URL of `scheme`: plain HTTP needs no certificates; the one for
    /// HTTPS is made the first time it is needed, with the system's roots and `--ca-file`.
    fn transport(&self, scheme: &str) -> Result<&reqwest::Client, RegistryError> {
        if scheme == "http" {
            return Ok(&self.http.plain);
        }
        let made = self.http.tls.get_or_init(|| {
            let mut builder = transport(&self.settings);
            for root in &self.http.roots {
                builder = builder.add_root_certificate(root.clone());
            }
            builder.build().map_err(Arc::new)
        });
        made.as_ref()
            .map_err(|e| RegistryError::Setup(error_chain(e.as_ref())))
    }

    fn scheme(&self, host: &str) -> &'static str {
        if self
            .settings
            .insecure_hosts
            .iter()
            .any(|h| h.eq_ignore_ascii_case(host))
        {
            "http"
        } else {
            "https"
        }
    }

    /// `has_credentials`: a login was found (a helper that found none counts as none).
    fn unauthorized(&self, target: &Target<'_>, has_credentials: bool) -> RegistryError {
        let hint = match has_credentials {
            true => format!("the credentials configured for {} were refused", target.domain),
            false => format!(
                "the registry requires credentials and none are configured for {} (docker login, or --docker-config)",
                target.domain
            ),
        };
        RegistryError::Unauthorized {
            image: target.image.clone(),
            host: target.host.to_string(),
            hint,
        }
    }
}

/// A request's URL: parsed from the host's base, or the whole text for reqwest to parse.
#[derive(Clone)]
enum RequestUrl {
    Parsed(reqwest::Url),
    Text(String),
}

/// One more answer of `status` from `host`, without a new key string once the pair is known
/// (the map holds a few hosts' few statuses: looked through, not keyed by a borrowed pair).
fn count_answer(answers: &mut BTreeMap<(String, u16), u64>, host: &str, status: u16) {
    let known = answers
        .iter_mut()
        .find(|((h, s), _)| *s == status && h == host);
    match known {
        Some((_, n)) => *n += 1,
        None => {
            answers.insert((host.to_string(), status), 1);
        }
    }
}

async fn read_answer(
    mut response: reqwest::Response,
    attempts: u32,
) -> Result<Answer, reqwest::Error> {
    let status = response.status();
    // Taken, not cloned: only the body is read from the response after this.
    let headers = std::mem::take(response.headers_mut());
    let mut body = Vec::new();
    let mut truncated = false;
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > media::MAX_MANIFEST_BYTES {
            // Stop reading: nothing tagpin asks a registry for is this large.
            truncated = true;
            break;
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Answer {
        status,
        headers,
        body,
        truncated,
        attempts,
    })
}

/// The host name of `host[:port]` (`[::1]:5000` is `[::1]`, as `Url::host_str` spells it).
fn host_name(host: &str) -> &str {
    match host.rsplit_once(':') {
        Some((name, port)) if !name.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    }
}

/// Redirects are followed as reqwest does (at most 10; `Authorization` dropped on the way to
/// another host or port: blob and manifest stores on another host get no credentials), but
/// never from HTTPS down to plain HTTP.
fn redirect_policy() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let downgrade = attempt.url().scheme() == "http"
            && attempt.previous().iter().any(|u| u.scheme() == "https");
        if attempt.previous().len() >= 10 {
            attempt.error("more than 10 redirects")
        } else if downgrade {
            attempt.error("a redirect from HTTPS to plain HTTP")
        } else {
            attempt.follow()
        }
    })
}

fn too_large() -> String {
    format!(
        "answer is larger than {} bytes; refused",
        media::MAX_MANIFEST_BYTES
    )
}

fn sha256_digest(bytes: &[u8]) -> Digest {
    let hex: String = Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    match Digest::from_sha256_hex(&hex) {
        Ok(d) => d,
        Err(e) => unreachable!("a sha256 hex string is always a valid digest: {e}"),
    }
}

fn basic_header(c: &Credential) -> String {
    use base64::Engine;
    let raw = format!("{}:{}", c.username, c.password);
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(raw)
    )
}

fn header_str(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

fn bare_media_type(content_type: &str) -> String {
    content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_string()
}

/// `Link: </v2/x/tags/list?n=2&last=b>; rel="next"` → the path to request next.
fn next_link(link: &str) -> Option<String> {
    link.split(',').find_map(|part| {
        let (url, params) = part.split_once(';')?;
        if !params.contains("rel=\"next\"") && !params.contains("rel=next") {
            return None;
        }
        let url = url.trim().trim_start_matches('<').trim_end_matches('>');
        match reqwest::Url::parse(url) {
            // Absolute links keep only path and query: the host stays the configured one.
            Ok(abs) => Some(match abs.query() {
                Some(q) => format!("{}?{q}", abs.path()),
                None => abs.path().to_string(),
            }),
            Err(_) if url.starts_with('/') => Some(url.to_string()),
            Err(_) => None,
        }
    })
}

fn jitter() -> f64 {
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    f64::from(nanos % 1000) / 1000.0
}

/// The error and its causes, joined: reqwest's top-level message alone says little.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

fn unreachable(target: &Target<'_>, e: &reqwest::Error) -> RegistryError {
    let mut detail = error_chain(e);
    if e.is_timeout() {
        detail = format!("timed out: {detail}");
    }
    if detail.contains("certificate") || detail.contains("UnknownIssuer") {
        detail.push_str(" (for a registry with a private CA, pass --ca-file)");
    } else if detail.contains("InvalidContentType") || detail.contains("wrong version number") {
        detail.push_str(" (is it a plain-HTTP registry? pass --insecure-registry)");
    }
    RegistryError::Unreachable {
        image: target.image.clone(),
        host: target.host.to_string(),
        detail,
    }
}

/// Whether `answer` is a success read whole: the registry's error otherwise, or a refusal of
/// an answer larger than the cap.
fn check_complete(target: &Target<'_>, answer: &Answer) -> Result<(), RegistryError> {
    if !answer.status.is_success() {
        return Err(status_error(target, answer));
    }
    if answer.truncated {
        return Err(bad(target, too_large()));
    }
    Ok(())
}

/// The body of a complete answer for content `digest`, which it must hash to: nothing of it
/// is used otherwise.
fn verified_body(
    target: &Target<'_>,
    digest: &Digest,
    answer: Answer,
) -> Result<Vec<u8>, RegistryError> {
    check_complete(target, &answer)?;
    let computed = sha256_digest(&answer.body);
    if computed != *digest {
        return Err(mismatch(target, digest, &computed));
    }
    Ok(answer.body)
}

fn bad(target: &Target<'_>, detail: String) -> RegistryError {
    RegistryError::BadResponse {
        image: target.image.clone(),
        host: target.host.to_string(),
        detail,
    }
}

fn mismatch(target: &Target<'_>, claimed: &Digest, computed: &Digest) -> RegistryError {
    RegistryError::DigestMismatch {
        image: target.image.clone(),
        host: target.host.to_string(),
        claimed: claimed.to_string(),
        computed: computed.to_string(),
    }
}

fn media_error(target: &Target<'_>, problem: media::MediaProblem) -> RegistryError {
    match problem {
        media::MediaProblem::Schema1 => bad(target, media::schema1_message()),
        media::MediaProblem::Unsupported(t) => bad(target, media::unsupported_message(&t)),
    }
}

/// Maps a final non-success answer to the error a user can act on, with the registry's own
/// error code when the body carries one (HEAD answers carry none).
fn status_error(target: &Target<'_>, answer: &Answer) -> RegistryError {
    let detail = registry_error_detail(&answer.body)
        .map(|d| format!(": {d}"))
        .unwrap_or_default();
    let image = target.image.clone();
    let host = target.host.to_string();
    match answer.status {
        StatusCode::NOT_FOUND => RegistryError::NotFound {
            image,
            host,
            detail: if detail.is_empty() {
                ": no such repository or tag".to_string()
            } else {
                detail
            },
        },
        StatusCode::FORBIDDEN => RegistryError::Denied {
            image,
            host,
            detail,
        },
        StatusCode::TOO_MANY_REQUESTS => RegistryError::RateLimited {
            image,
            host,
            // Quoted only when it is what the header may hold: seconds or an HTTP date.
            retry_after: header_str(&answer.headers, RETRY_AFTER.as_str()).filter(|v| {
                v.bytes().all(|b| b.is_ascii_digit()) || httpdate::parse_http_date(v).is_ok()
            }),
        },
        status => RegistryError::Status {
            image,
            host,
            status: status.as_u16(),
            attempts: answer.attempts,
        },
    }
}

/// The error code of an OCI distribution error body, in words tagpin writes:
/// `{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}` is
/// `MANIFEST_UNKNOWN (no such manifest)`. Only the codes of the distribution spec are named;
/// an unknown code, the `message` and the `detail` are the registry's free text and are never
/// quoted (a registry is a tenant's to name in operator mode, and may be any service).
fn registry_error_detail(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Errors {
        errors: Vec<ErrorEntry>,
    }
    #[derive(serde::Deserialize)]
    struct ErrorEntry {
        #[serde(default)]
        code: String,
    }
    let parsed: Errors = serde_json::from_slice(body).ok()?;
    parsed.errors.iter().find_map(|e| {
        let words = match e.code.as_str() {
            "BLOB_UNKNOWN" => "no such blob",
            "BLOB_UPLOAD_INVALID" => "blob upload invalid",
            "BLOB_UPLOAD_UNKNOWN" => "no such blob upload",
            "DIGEST_INVALID" => "the digest is not the content's",
            "MANIFEST_BLOB_UNKNOWN" => "the manifest names a blob the registry does not have",
            "MANIFEST_INVALID" => "the manifest is invalid",
            "MANIFEST_UNKNOWN" => "no such manifest",
            "NAME_INVALID" => "the repository name is invalid",
            "NAME_UNKNOWN" => "no such repository",
            "SIZE_INVALID" => "the content is not of the size stated",
            "UNAUTHORIZED" => "authentication required",
            "DENIED" => "access denied",
            "UNSUPPORTED" => "the operation is not supported",
            "TOOMANYREQUESTS" => "too many requests",
            "TAG_INVALID" => "the tag is invalid",
            "MANIFEST_UNVERIFIED" => "the manifest signature did not verify",
            "PAGINATION_NUMBER_INVALID" => "invalid page size",
            "RANGE_INVALID" => "invalid range",
            _ => return None,
        };
        Some(format!("{} ({words})", e.code))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_header_yields_the_next_path_even_when_absolute() {
        assert_eq!(
            next_link(r#"</v2/a/b/tags/list?n=2&last=t2>; rel="next""#).as_deref(),
            Some("/v2/a/b/tags/list?n=2&last=t2")
        );
        assert_eq!(
            next_link(r#"<https://elsewhere.example/v2/a/tags/list?last=x&n=5>; rel="next""#)
                .as_deref(),
            Some("/v2/a/tags/list?last=x&n=5")
        );
        assert_eq!(next_link(r#"</v2/a/tags/list?n=2>; rel="prev""#), None);
    }

    #[test]
    fn registry_error_body_is_summarised_in_tagpins_words() {
        let body = br#"{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown","detail":{"Tag":"x"}}]}"#;
        assert_eq!(
            registry_error_detail(body).as_deref(),
            Some("MANIFEST_UNKNOWN (no such manifest)")
        );
        let denied = br#"{"errors":[{"code":"DENIED","message":"db_password=hunter2"}]}"#;
        assert_eq!(
            registry_error_detail(denied).as_deref(),
            Some("DENIED (access denied)")
        );
        // A code the spec does not have is free text too: the next known one is named.
        let unknown = br#"{"errors":[{"code":"INTERNAL-ONLY secret","message":"x"},{"code":"NAME_UNKNOWN"}]}"#;
        assert_eq!(
            registry_error_detail(unknown).as_deref(),
            Some("NAME_UNKNOWN (no such repository)")
        );
        let only_unknown = br#"{"errors":[{"code":"db_password=hunter2"}]}"#;
        assert_eq!(registry_error_detail(only_unknown), None);
        assert_eq!(registry_error_detail(b"not json"), None);
    }

    #[test]
    fn a_host_name_is_the_host_without_its_port() {
        assert_eq!(host_name("registry.example:5000"), "registry.example");
        assert_eq!(host_name("registry.example"), "registry.example");
        assert_eq!(host_name("127.0.0.1:5000"), "127.0.0.1");
        assert_eq!(host_name("[::1]:5000"), "[::1]");
    }

    #[test]
    fn resolve_key_merges_spellings_of_one_docker_hub_image() {
        let a = Reference::parse("nginx").unwrap();
        let b = Reference::parse("docker.io/library/nginx:latest").unwrap();
        let c = Reference::parse("index.docker.io/nginx:latest").unwrap();
        assert_eq!(ResolveKey::of(&a), ResolveKey::of(&b));
        assert_eq!(ResolveKey::of(&b), ResolveKey::of(&c));
        assert_eq!(
            ResolveKey::of(&a).to_string(),
            "docker.io/library/nginx:latest"
        );
    }

    #[test]
    fn sha256_of_empty_input_is_the_well_known_digest() {
        assert_eq!(
            sha256_digest(b"").to_string(),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
