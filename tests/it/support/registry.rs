//! A real OCI registry for integration tests, with the pieces around it that
//! real registries have: Basic auth, TLS, a Docker token server, and a
//! reverse proxy that injects faults.
//!
//! The registry is Debian's `docker-registry` (distribution 2.8), run as a
//! child process so tests see real wire behaviour rather than a mock's guess
//! of it. Nothing here is global: each [`TestRegistry`], [`TokenServer`] and
//! [`FaultProxy`] owns its temp dir and its loopback ports, so tests run in
//! parallel. Everything stops when dropped (the child is killed, server tasks
//! are aborted).
//!
//! Test support panics with a clear message instead of returning errors.

use std::net::{SocketAddr, TcpListener as StdTcpListener};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::{RawQuery, Request, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use base64::Engine as _;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde::Serialize;
use sha2::{Digest as _, Sha256};
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;

/// The registry binary from Debian's `docker-registry` package.
pub const REGISTRY_BIN: &str = "/usr/bin/docker-registry";

pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
pub const DOCKER_MANIFEST_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
/// Docker schema1 (signed), which registries still serve for very old images.
pub const DOCKER_SCHEMA1_SIGNED: &str = "application/vnd.docker.distribution.manifest.v1+prettyjws";

/// An Accept header naming the four manifest types a modern client takes.
pub const ACCEPT_ALL_MANIFESTS: &str = "application/vnd.oci.image.index.v1+json, \
     application/vnd.docker.distribution.manifest.list.v2+json, \
     application/vnd.oci.image.manifest.v1+json, \
     application/vnd.docker.distribution.manifest.v2+json";

/// The physical floor the benchmarks compare with: a bare client sending one manifest HEAD
/// per `(repository, tag)`, `concurrency` at a time, as a resolver must at least. Panics if
/// any HEAD is not answered 200.
pub async fn head_manifests(
    http: &reqwest::Client,
    host: &str,
    repo_tags: impl IntoIterator<Item = (String, String)>,
    concurrency: usize,
) {
    use futures::stream::{self, StreamExt};
    let statuses: Vec<u16> = stream::iter(repo_tags.into_iter().map(|(repo, tag)| {
        let url = format!("http://{host}/v2/{repo}/manifests/{tag}");
        let http = http.clone();
        async move {
            http.head(url)
                .header("accept", ACCEPT_ALL_MANIFESTS)
                .send()
                .await
                .map_or(0, |r| r.status().as_u16())
        }
    }))
    .buffer_unordered(concurrency)
    .collect()
    .await;
    assert!(
        statuses.iter().all(|s| *s == 200),
        "bare HEADs failed: {statuses:?}"
    );
}

/// The service name the token-auth registry announces and checks as `aud`.
pub const TOKEN_SERVICE: &str = "tagpin-test-registry";
/// The issuer the token-auth registry trusts (`iss`).
pub const TOKEN_ISSUER: &str = "tagpin-test-token-issuer";

/// The harness marks its own token requests with this header so that
/// [`TokenServer::request_count`] counts only the requests of the code under test.
const HARNESS_MARKER_HEADER: &str = "x-tagpin-test-harness";

/// Response header (set through the registry's `http.headers` config) that
/// proves the process answering on our port is our registry and not another
/// test's server that raced us for the port.
const REGISTRY_ID_HEADER: &str = "x-tagpin-test-registry-id";

/// How long a registry may take to answer `GET /v2/` after spawning.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// How often to pick a new port when another process took ours first.
const START_ATTEMPTS: usize = 5;

// ---------------------------------------------------------------------------
// Small helpers
// ---------------------------------------------------------------------------

/// A loopback TCP port that was free a moment ago.
///
/// Only for processes we cannot hand a bound socket to (the registry); our
/// own servers bind port 0 directly and never race.
pub fn free_port() -> u16 {
    let listener =
        StdTcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0 to find a free port");
    listener
        .local_addr()
        .expect("local_addr of probe listener")
        .port()
}

/// The OCI digest (`sha256:<hex>`) of some bytes.
pub fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(bytes))
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs()
}

/// Runs a CLI tool (openssl, htpasswd) and returns its stdout, panicking with
/// its stderr when it fails.
async fn run_tool(program: &str, args: &[&str], dir: &Path) -> Vec<u8> {
    let output = Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .await
        .unwrap_or_else(|e| {
            panic!("could not run `{program}`: {e} (apt-get install -y openssl apache2-utils)")
        });
    assert!(
        output.status.success(),
        "`{program} {}` failed with {}:\n{}",
        args.join(" "),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}

/// Runs `openssl` with whitespace-separated arguments (none of ours contain spaces).
async fn openssl(dir: &Path, args: &str) {
    let args: Vec<&str> = args.split_whitespace().collect();
    run_tool("openssl", &args, dir).await;
}

fn write_file(path: &Path, contents: impl AsRef<[u8]>) {
    std::fs::write(path, contents).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("temp paths are UTF-8")
}

/// Serves an axum router on an already bound listener until the task is aborted.
fn spawn_server(listener: tokio::net::TcpListener, router: Router) -> JoinHandle<()> {
    tokio::spawn(async move {
        axum::serve(listener, router)
            .await
            .expect("axum server failed");
    })
}

async fn bind_loopback() -> (tokio::net::TcpListener, SocketAddr) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("local_addr");
    (listener, addr)
}

// ---------------------------------------------------------------------------
// TestRegistry
// ---------------------------------------------------------------------------

/// How the registry authenticates and which transport it speaks.
#[derive(Clone, Debug)]
pub enum Mode {
    /// HTTP, anonymous pull and push.
    Plain,
    /// HTTP with Basic auth from a bcrypt htpasswd file; every request needs it.
    Htpasswd { user: String, password: String },
    /// HTTPS with a server certificate signed by a fresh CA (see [`TestRegistry::ca_pem_path`]), anonymous.
    Tls,
    /// HTTP with Docker token auth against a [`TokenServer`]: anonymous gets
    /// pull, `user` gets pull, push and delete.
    Token { user: String, password: String },
}

impl Mode {
    pub fn htpasswd(user: &str, password: &str) -> Mode {
        Mode::Htpasswd {
            user: user.to_string(),
            password: password.to_string(),
        }
    }

    pub fn token(user: &str, password: &str) -> Mode {
        Mode::Token {
            user: user.to_string(),
            password: password.to_string(),
        }
    }
}

/// Which manifest format a single-platform image is pushed as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageKind {
    /// `application/vnd.oci.image.manifest.v1+json`
    Oci,
    /// `application/vnd.docker.distribution.manifest.v2+json`
    DockerV2,
}

impl ImageKind {
    pub fn manifest_media_type(self) -> &'static str {
        match self {
            ImageKind::Oci => OCI_MANIFEST,
            ImageKind::DockerV2 => DOCKER_MANIFEST,
        }
    }

    fn config_media_type(self) -> &'static str {
        match self {
            ImageKind::Oci => "application/vnd.oci.image.config.v1+json",
            ImageKind::DockerV2 => "application/vnd.docker.container.image.v1+json",
        }
    }

    fn layer_media_type(self) -> &'static str {
        match self {
            ImageKind::Oci => "application/vnd.oci.image.layer.v1.tar+gzip",
            ImageKind::DockerV2 => "application/vnd.docker.image.rootfs.diff.tar.gzip",
        }
    }
}

/// Which multi-platform format an index is pushed as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IndexKind {
    /// `application/vnd.oci.image.index.v1+json`, children are OCI manifests.
    Oci,
    /// `application/vnd.docker.distribution.manifest.list.v2+json`, children are Docker v2 manifests.
    DockerManifestList,
}

impl IndexKind {
    pub fn media_type(self) -> &'static str {
        match self {
            IndexKind::Oci => OCI_INDEX,
            IndexKind::DockerManifestList => DOCKER_MANIFEST_LIST,
        }
    }

    pub fn child_kind(self) -> ImageKind {
        match self {
            IndexKind::Oci => ImageKind::Oci,
            IndexKind::DockerManifestList => ImageKind::DockerV2,
        }
    }
}

/// Digests of a pushed single-platform image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageDigests {
    pub manifest: String,
    pub config: String,
}

/// One platform entry of a pushed index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexChild {
    pub os: String,
    pub architecture: String,
    pub manifest: String,
    pub config: String,
}

/// Digests of a pushed index and of its children, in the order given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexDigests {
    pub index: String,
    pub children: Vec<IndexChild>,
}

/// A running `docker-registry serve`, killed on Drop.
pub struct TestRegistry {
    // Declared first so it is dropped (and the process killed) before the temp dir goes.
    child: Child,
    token_server: Option<TokenServer>,
    mode: Mode,
    port: u16,
    scheme: &'static str,
    ca_pem_path: Option<PathBuf>,
    client: reqwest::Client,
    log_path: PathBuf,
    dir: tempfile::TempDir,
}

impl TestRegistry {
    /// Starts a registry in `mode` and waits until `GET /v2/` answers.
    pub async fn start(mode: Mode) -> TestRegistry {
        let mut dir = tempfile::Builder::new()
            .prefix("tagpin-registry-")
            .tempdir()
            .expect("create registry temp dir");
        let registry_id = dir
            .path()
            .file_name()
            .and_then(|name| name.to_str())
            .expect("temp dir name")
            .to_string();

        let mut auth_yaml = String::new();
        let mut tls_yaml = String::new();
        let mut token_server = None;
        let mut ca_pem_path = None;
        match &mode {
            Mode::Plain => {}
            Mode::Htpasswd { user, password } => {
                let line = run_tool("htpasswd", &["-Bbn", user, password], dir.path()).await;
                let htpasswd_path = dir.path().join("htpasswd");
                write_file(&htpasswd_path, line);
                auth_yaml = format!(
                    "auth:\n  htpasswd:\n    realm: tagpin-test\n    path: {}\n",
                    path_str(&htpasswd_path)
                );
            }
            Mode::Tls => {
                let certs = make_tls_certs(dir.path()).await;
                tls_yaml = format!(
                    "  tls:\n    certificate: {}\n    key: {}\n",
                    path_str(&certs.server_cert),
                    path_str(&certs.server_key)
                );
                ca_pem_path = Some(certs.ca_cert);
            }
            Mode::Token { user, password } => {
                let server = TokenServer::start(user, password, dir.path()).await;
                auth_yaml = format!(
                    "auth:\n  token:\n    realm: {}\n    service: {TOKEN_SERVICE}\n    issuer: {TOKEN_ISSUER}\n    rootcertbundle: {}\n",
                    server.realm(),
                    path_str(server.cert_pem_path())
                );
                token_server = Some(server);
            }
        }

        let mut client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(30));
        if let Some(ca) = &ca_pem_path {
            client = client.add_root_certificate(read_certificate(ca));
        }
        let client = client.build().expect("build harness HTTP client");
        let scheme = if ca_pem_path.is_some() {
            "https"
        } else {
            "http"
        };
        let data_dir = dir.path().join("data");
        let config_path = dir.path().join("config.yml");
        let log_path = dir.path().join("registry.log");

        for attempt in 1..=START_ATTEMPTS {
            let port = free_port();
            let config = format!(
                "version: 0.1\n\
                 log:\n  level: warn\n  accesslog:\n    disabled: true\n\
                 storage:\n  filesystem:\n    rootdirectory: {data}\n  delete:\n    enabled: true\n\
                 http:\n  addr: 127.0.0.1:{port}\n  secret: tagpin-test-secret-{registry_id}\n\
                 \x20 headers:\n    X-Tagpin-Test-Registry-Id: [{registry_id}]\n\
                 {tls_yaml}{auth_yaml}",
                data = path_str(&data_dir),
            );
            write_file(&config_path, config);
            let log_file = std::fs::File::create(&log_path).expect("create registry log file");
            let child = Command::new(REGISTRY_BIN)
                .arg("serve")
                .arg(&config_path)
                .stdin(Stdio::null())
                .stdout(log_file.try_clone().expect("clone log file handle"))
                .stderr(log_file)
                .kill_on_drop(true)
                .spawn()
                .unwrap_or_else(|e| {
                    panic!(
                        "could not spawn {REGISTRY_BIN}: {e} (apt-get install -y docker-registry)"
                    )
                });
            let mut registry = TestRegistry {
                child,
                token_server: None,
                mode: mode.clone(),
                port,
                scheme,
                ca_pem_path: None,
                client: client.clone(),
                log_path: log_path.clone(),
                dir,
            };
            match registry.wait_until_up(&registry_id).await {
                Ok(()) => {
                    registry.token_server = token_server;
                    registry.ca_pem_path = ca_pem_path;
                    return registry;
                }
                Err(log) if log.contains("address already in use") && attempt < START_ATTEMPTS => {
                    // Another process took the port between free_port() and bind: try another.
                    let TestRegistry { mut child, dir: kept_dir, .. } = registry;
                    let _ = child.kill().await;
                    dir = kept_dir;
                }
                Err(log) => panic!(
                    "docker-registry did not start on 127.0.0.1:{port} ({mode:?}); its output:\n{log}"
                ),
            }
        }
        unreachable!("the last attempt either returns or panics")
    }

    /// Polls `GET /v2/` until our registry (recognised by its id header)
    /// answers; returns the registry's output if it exits or never answers.
    async fn wait_until_up(&mut self, registry_id: &str) -> Result<(), String> {
        let deadline = Instant::now() + START_TIMEOUT;
        let url = format!("{}/v2/", self.base_url());
        loop {
            if let Some(status) = self.child.try_wait().expect("poll registry process") {
                return Err(format!("(exited with {status})\n{}", self.log()));
            }
            let probe = self
                .client
                .get(&url)
                .timeout(Duration::from_secs(2))
                .send()
                .await;
            if let Ok(response) = probe {
                let id = response
                    .headers()
                    .get(REGISTRY_ID_HEADER)
                    .and_then(|v| v.to_str().ok());
                if id == Some(registry_id) {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "(no answer within {START_TIMEOUT:?})\n{}",
                    self.log()
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `http://127.0.0.1:<port>` or `https://127.0.0.1:<port>` for [`Mode::Tls`].
    pub fn base_url(&self) -> String {
        format!("{}://127.0.0.1:{}", self.scheme, self.port)
    }

    /// `127.0.0.1:<port>`, the registry part of an image reference.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn mode(&self) -> &Mode {
        &self.mode
    }

    /// The CA certificate (PEM) that signed the registry's server
    /// certificate; `Some` only in [`Mode::Tls`].
    pub fn ca_pem_path(&self) -> Option<&Path> {
        self.ca_pem_path.as_deref()
    }

    /// The token server; `Some` only in [`Mode::Token`].
    pub fn token_server(&self) -> Option<&TokenServer> {
        self.token_server.as_ref()
    }

    /// Token requests served so far, not counting the harness's own push
    /// tokens. Panics unless the mode is [`Mode::Token`].
    pub fn token_request_count(&self) -> usize {
        self.token_server
            .as_ref()
            .expect("token_request_count() needs a registry started in Mode::Token")
            .request_count()
    }

    /// An HTTP client that trusts this registry's CA (in TLS mode) and does
    /// not follow redirects. It sends no credentials by itself.
    pub fn client(&self) -> reqwest::Client {
        self.client.clone()
    }

    /// A scratch directory owned by this registry, removed on Drop.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// What the registry printed so far (warnings and errors only).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// An `Authorization` value allowing pull and push on `repo`, or `None`
    /// for anonymous modes. In token mode this fetches a fresh token through
    /// the token protocol (marked so it is not counted).
    pub async fn auth_header(&self, repo: &str) -> Option<String> {
        match &self.mode {
            Mode::Plain | Mode::Tls => None,
            Mode::Htpasswd { user, password } => Some(basic_auth_value(user, password)),
            Mode::Token { user, password } => {
                let server = self
                    .token_server
                    .as_ref()
                    .expect("token mode has a token server");
                let scope = format!("repository:{repo}:pull,push");
                let token = server
                    .fetch_token_for_harness(&self.client, Some((user, password)), &scope)
                    .await;
                Some(format!("Bearer {token}"))
            }
        }
    }

    /// Uploads a blob through the two-step push API (`POST` an upload, then
    /// `PUT ?digest=`) and returns its digest.
    pub async fn push_blob(&self, repo: &str, bytes: &[u8]) -> String {
        let digest = sha256_digest(bytes);
        let auth = self.auth_header(repo).await;

        let start_url = format!("{}/v2/{repo}/blobs/uploads/", self.base_url());
        let response = with_auth(self.client.post(&start_url), &auth)
            .header(header::CONTENT_LENGTH, "0")
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST {start_url}: {e}"));
        let response = expect_status(response, StatusCode::ACCEPTED, "POST", &start_url).await;
        let location = response
            .headers()
            .get(header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_else(|| panic!("POST {start_url}: 202 without a Location header"))
            .to_string();

        // Location may be absolute or relative to the registry.
        let mut put_url = reqwest::Url::parse(&self.base_url())
            .and_then(|base| base.join(&location))
            .unwrap_or_else(|e| panic!("bad upload Location {location:?}: {e}"));
        put_url.query_pairs_mut().append_pair("digest", &digest);
        let put_url_text = put_url.to_string();
        let response = with_auth(self.client.put(put_url), &auth)
            .header(header::CONTENT_TYPE, "application/octet-stream")
            .body(bytes.to_vec())
            .send()
            .await
            .unwrap_or_else(|e| panic!("PUT {put_url_text}: {e}"));
        let response = expect_status(response, StatusCode::CREATED, "PUT", &put_url_text).await;
        assert_eq!(
            header_text(response.headers(), "docker-content-digest").as_deref(),
            Some(digest.as_str()),
            "registry stored blob under another digest"
        );
        digest
    }

    /// PUTs a manifest under `reference` (a tag or a digest) and returns its
    /// digest, checking that the registry computed the same one.
    pub async fn push_manifest(
        &self,
        repo: &str,
        reference: &str,
        media_type: &str,
        bytes: &[u8],
    ) -> String {
        let digest = sha256_digest(bytes);
        let auth = self.auth_header(repo).await;
        let url = format!("{}/v2/{repo}/manifests/{reference}", self.base_url());
        let response = with_auth(self.client.put(&url), &auth)
            .header(header::CONTENT_TYPE, media_type)
            .body(bytes.to_vec())
            .send()
            .await
            .unwrap_or_else(|e| panic!("PUT {url}: {e}"));
        let response = expect_status(response, StatusCode::CREATED, "PUT", &url).await;
        assert_eq!(
            header_text(response.headers(), "docker-content-digest").as_deref(),
            Some(digest.as_str()),
            "registry's Docker-Content-Digest for PUT {url} differs from the sha256 of the bytes"
        );
        digest
    }

    /// The bytes of a manifest as the registry serves them, to push again under other tags or
    /// to serve in place of another.
    pub async fn manifest_bytes(&self, repo: &str, reference: &str) -> Vec<u8> {
        let auth = self.auth_header(repo).await;
        let url = format!("{}/v2/{repo}/manifests/{reference}", self.base_url());
        let response = with_auth(self.client.get(&url), &auth)
            .header(header::ACCEPT, ACCEPT_ALL_MANIFESTS)
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {url}: {e}"));
        let response = expect_status(response, StatusCode::OK, "GET", &url).await;
        response.bytes().await.unwrap().to_vec()
    }

    /// Pushes cosign's signature manifest for `digest` in `repo`, as `cosign sign` lays it
    /// out: the tag `sha256-<hex>.sig`, one simple-signing layer `payload` annotated with
    /// `signature` (base64). Returns the manifest's bytes.
    pub async fn push_cosign_signature(
        &self,
        repo: &str,
        digest: &str,
        payload: &[u8],
        signature: &str,
    ) -> Vec<u8> {
        let layer = self.push_blob(repo, payload).await;
        let config = serde_json::to_vec(&serde_json::json!({
            "architecture": "", "os": "", "config": {},
            "rootfs": {"type": "layers", "diff_ids": [layer]},
        }))
        .unwrap();
        let config_digest = self.push_blob(repo, &config).await;
        let manifest = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": config.len()},
            "layers": [{
                "mediaType": "application/vnd.dev.cosign.simplesigning.v1+json",
                "digest": layer,
                "size": payload.len(),
                "annotations": {"dev.cosignproject.cosign/signature": signature},
            }],
        }))
        .unwrap();
        let tag = format!("{}.sig", digest.replace(':', "-"));
        self.push_manifest(repo, &tag, OCI_MANIFEST, &manifest)
            .await;
        manifest
    }

    /// cosign's simple-signing payload for `digest` of `repo` on this registry.
    pub fn cosign_payload(&self, repo: &str, digest: &str) -> Vec<u8> {
        format!(
            r#"{{"critical":{{"identity":{{"docker-reference":"{}/{repo}"}},"image":{{"docker-manifest-digest":"{digest}"}},"type":"cosign container image signature"}},"optional":null}}"#,
            self.host()
        )
        .into_bytes()
    }

    /// Pushes a small linux/amd64 OCI image under `tag`. Each `seed` gives
    /// distinct config, layer and manifest digests.
    pub async fn push_image(&self, repo: &str, tag: &str, seed: &str) -> ImageDigests {
        self.push_image_of_kind(repo, tag, ImageKind::Oci, seed)
            .await
    }

    /// Like [`TestRegistry::push_image`] with a chosen manifest format.
    pub async fn push_image_of_kind(
        &self,
        repo: &str,
        tag: &str,
        kind: ImageKind,
        seed: &str,
    ) -> ImageDigests {
        let image = build_image(kind, "linux", "amd64", seed);
        self.push_built_image(repo, tag, &image).await
    }

    /// Pushes one image per platform (by digest, untagged) and then an index
    /// of `kind` listing them under `tag`.
    pub async fn push_index(
        &self,
        repo: &str,
        tag: &str,
        kind: IndexKind,
        platforms: &[(&str, &str)],
        seed: &str,
    ) -> IndexDigests {
        let child_kind = kind.child_kind();
        let mut children = Vec::new();
        let mut descriptors = Vec::new();
        for (os, architecture) in platforms {
            let image = build_image(child_kind, os, architecture, seed);
            let manifest_digest = sha256_digest(&image.manifest);
            let digests = self.push_built_image(repo, &manifest_digest, &image).await;
            descriptors.push(serde_json::json!({
                "mediaType": child_kind.manifest_media_type(),
                "digest": digests.manifest,
                "size": image.manifest.len(),
                "platform": { "architecture": architecture, "os": os },
            }));
            children.push(IndexChild {
                os: os.to_string(),
                architecture: architecture.to_string(),
                manifest: digests.manifest,
                config: digests.config,
            });
        }
        let index = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": kind.media_type(),
            "manifests": descriptors,
        });
        let index_bytes = serde_json::to_vec(&index).expect("serialize index");
        let index_digest = self
            .push_manifest(repo, tag, kind.media_type(), &index_bytes)
            .await;
        IndexDigests {
            index: index_digest,
            children,
        }
    }

    async fn push_built_image(
        &self,
        repo: &str,
        reference: &str,
        image: &BuiltImage,
    ) -> ImageDigests {
        let config = self.push_blob(repo, &image.config).await;
        self.push_blob(repo, &image.layer).await;
        let manifest = self
            .push_manifest(
                repo,
                reference,
                image.kind.manifest_media_type(),
                &image.manifest,
            )
            .await;
        ImageDigests { manifest, config }
    }
}

/// The bytes of one tiny image: a config, one opaque layer, a manifest.
struct BuiltImage {
    kind: ImageKind,
    config: Vec<u8>,
    layer: Vec<u8>,
    manifest: Vec<u8>,
}

/// Builds an image whose digests depend on `seed` and the platform. The
/// layer is opaque bytes: the registry never looks inside layers.
fn build_image(kind: ImageKind, os: &str, architecture: &str, seed: &str) -> BuiltImage {
    let layer =
        format!("tagpin test layer seed={seed} platform={os}/{architecture}\n").into_bytes();
    let config = serde_json::json!({
        "architecture": architecture,
        "os": os,
        "config": { "Labels": { "tagpin.test.seed": seed } },
        "rootfs": { "type": "layers", "diff_ids": [sha256_digest(&layer)] },
    });
    let config = serde_json::to_vec(&config).expect("serialize config");
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": kind.manifest_media_type(),
        "config": {
            "mediaType": kind.config_media_type(),
            "digest": sha256_digest(&config),
            "size": config.len(),
        },
        "layers": [{
            "mediaType": kind.layer_media_type(),
            "digest": sha256_digest(&layer),
            "size": layer.len(),
        }],
    });
    let manifest = serde_json::to_vec(&manifest).expect("serialize manifest");
    BuiltImage {
        kind,
        config,
        layer,
        manifest,
    }
}

fn with_auth(request: reqwest::RequestBuilder, auth: &Option<String>) -> reqwest::RequestBuilder {
    match auth {
        Some(value) => request.header(header::AUTHORIZATION, value),
        None => request,
    }
}

fn basic_auth_value(user: &str, password: &str) -> String {
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("Basic {encoded}")
}

fn header_text(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// Panics with the response body when the status is not the expected one.
async fn expect_status(
    response: reqwest::Response,
    expected: StatusCode,
    method: &str,
    url: &str,
) -> reqwest::Response {
    if response.status() == expected {
        return response;
    }
    let status = response.status();
    let body = response.text().await.unwrap_or_default();
    panic!("{method} {url}: expected {expected}, got {status}: {body}");
}

fn read_certificate(path: &Path) -> reqwest::Certificate {
    let pem = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    reqwest::Certificate::from_pem(&pem).unwrap_or_else(|e| panic!("parse {}: {e}", path.display()))
}

struct TlsFiles {
    ca_cert: PathBuf,
    server_cert: PathBuf,
    server_key: PathBuf,
}

/// A fresh CA and a server certificate for 127.0.0.1 and localhost signed by
/// it, so clients can be tested with a custom CA rather than with
/// certificate checks turned off.
async fn make_tls_certs(dir: &Path) -> TlsFiles {
    openssl(
        dir,
        "req -x509 -newkey rsa:2048 -nodes -sha256 -days 2 -subj /CN=tagpin-test-ca \
         -keyout ca.key -out ca.pem",
    )
    .await;
    openssl(
        dir,
        "req -new -newkey rsa:2048 -nodes -sha256 -subj /CN=127.0.0.1 \
         -keyout server.key -out server.csr",
    )
    .await;
    write_file(
        &dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n\
         basicConstraints=critical,CA:FALSE\n\
         keyUsage=critical,digitalSignature,keyEncipherment\n\
         extendedKeyUsage=serverAuth\n",
    );
    openssl(
        dir,
        "x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -sha256 \
         -extfile server.ext -out server.pem",
    )
    .await;
    TlsFiles {
        ca_cert: dir.join("ca.pem"),
        server_cert: dir.join("server.pem"),
        server_key: dir.join("server.key"),
    }
}

// ---------------------------------------------------------------------------
// TokenServer
// ---------------------------------------------------------------------------

/// Which JSON field carries the token. Docker Hub sends both; some
/// registries send only one, and clients must accept either.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenField {
    Token,
    AccessToken,
    Both,
}

/// One request the token server answered.
#[derive(Clone, Debug)]
pub struct TokenRequest {
    pub service: Option<String>,
    /// Every scope asked for (`scope` may repeat and may hold several, space separated).
    pub scopes: Vec<String>,
    /// The Basic user, if credentials were sent.
    pub user: Option<String>,
    /// The status the server answered with.
    pub status: u16,
    /// True for the harness's own push-token requests.
    pub from_harness: bool,
    /// `grant_type` of an OAuth2 `POST`; `None` for the `GET` protocol.
    pub grant_type: Option<String>,
    /// `client_id` of an OAuth2 `POST`.
    pub client_id: Option<String>,
}

struct TokenSettings {
    field: TokenField,
    expires_in: Option<u64>,
}

struct TokenState {
    user: String,
    password: String,
    encoding_key: EncodingKey,
    /// Base64 DER of the signing certificate, for the JWT `x5c` header.
    x5c: String,
    settings: Mutex<TokenSettings>,
    /// The one refresh token the OAuth2 `POST` accepts (as `user`).
    refresh_token: Mutex<Option<String>>,
    requests: Mutex<Vec<TokenRequest>>,
    next_jti: AtomicU64,
}

/// A Docker token server (the `realm` of a `Bearer` challenge).
///
/// It issues RS256 JWTs whose `x5c` header carries a self-signed certificate;
/// the registry trusts that certificate through `rootcertbundle`.
/// distribution 2.8 checks `iss`, `aud` (= service), `exp`/`nbf` (60 s
/// leeway), the signature, that `x5c[0]` verifies against the bundle, and the
/// `access` claim for the action.
pub struct TokenServer {
    state: Arc<TokenState>,
    addr: SocketAddr,
    cert_pem_path: PathBuf,
    task: JoinHandle<()>,
}

impl Drop for TokenServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TokenServer {
    /// Generates a signing key and certificate in `dir` and serves
    /// `GET /token` on a free loopback port. Anonymous callers get pull;
    /// `user` with `password` gets pull, push and delete; a wrong password
    /// gets 401.
    pub async fn start(user: &str, password: &str, dir: &Path) -> TokenServer {
        openssl(
            dir,
            "req -x509 -newkey rsa:2048 -nodes -sha256 -days 2 -subj /CN=tagpin-test-token-signer \
             -keyout token-signer.key -out token-signer.pem",
        )
        .await;
        let key_pem = std::fs::read(dir.join("token-signer.key")).expect("read token signer key");
        let encoding_key = EncodingKey::from_rsa_pem(&key_pem).expect("parse token signer key");
        let cert_pem_path = dir.join("token-signer.pem");
        let cert_pem = std::fs::read_to_string(&cert_pem_path).expect("read token signer cert");
        // The body of a PEM certificate is already the standard base64 of its DER, which is what x5c holds.
        let x5c: String = cert_pem
            .lines()
            .filter(|line| !line.starts_with("-----"))
            .collect();

        let state = Arc::new(TokenState {
            user: user.to_string(),
            password: password.to_string(),
            encoding_key,
            x5c,
            settings: Mutex::new(TokenSettings {
                field: TokenField::Token,
                expires_in: Some(300),
            }),
            refresh_token: Mutex::new(None),
            requests: Mutex::new(Vec::new()),
            next_jti: AtomicU64::new(1),
        });
        let router = Router::new()
            .route(
                "/token",
                axum::routing::get(token_handler).post(oauth_token_handler),
            )
            .with_state(state.clone());
        let (listener, addr) = bind_loopback().await;
        let task = spawn_server(listener, router);
        TokenServer {
            state,
            addr,
            cert_pem_path,
            task,
        }
    }

    /// The realm URL, `http://127.0.0.1:<port>/token`.
    pub fn realm(&self) -> String {
        format!("http://{}/token", self.addr)
    }

    /// The self-signed certificate the registry uses as `rootcertbundle`.
    pub fn cert_pem_path(&self) -> &Path {
        &self.cert_pem_path
    }

    /// Which JSON field(s) carry the token from now on (default: `token`).
    pub fn set_token_field(&self, field: TokenField) {
        self.state.settings.lock().unwrap().field = field;
    }

    /// The `expires_in` to answer with (default 300); `None` leaves the field
    /// out, meaning 60 s per the protocol. The JWT's `exp` matches it, up to a day.
    ///
    /// Any `u64` is sent as is, `18446744073709551615` included: the registry reads `exp` as
    /// an int64, so only the JSON answer carries an absurd lifetime.
    ///
    /// distribution accepts a token until 60 s after `exp` (its clock-skew
    /// leeway), so a short `expires_in` does not make the registry refuse
    /// the token soon: test token refresh by counting token requests instead.
    pub fn set_expires_in(&self, expires_in: Option<u64>) {
        self.state.settings.lock().unwrap().expires_in = expires_in;
    }

    /// Accepts `token` in the OAuth2 refresh-token grant (`POST /token`) from now on,
    /// as the identity token `docker login` stores; any other refresh token gets 401.
    pub fn set_refresh_token(&self, token: &str) {
        *self.state.refresh_token.lock().unwrap() = Some(token.to_string());
    }

    /// Requests served, excluding the harness's own (so a test can assert
    /// that the code under test caches tokens).
    pub fn request_count(&self) -> usize {
        self.state
            .requests
            .lock()
            .unwrap()
            .iter()
            .filter(|r| !r.from_harness)
            .count()
    }

    /// Every request served, including the harness's own.
    pub fn requests(&self) -> Vec<TokenRequest> {
        self.state.requests.lock().unwrap().clone()
    }

    /// Fetches a token through the protocol, marked as the harness's own.
    async fn fetch_token_for_harness(
        &self,
        client: &reqwest::Client,
        credentials: Option<(&str, &str)>,
        scope: &str,
    ) -> String {
        let mut request = client
            .get(self.realm())
            .query(&[("service", TOKEN_SERVICE), ("scope", scope)])
            .header(HARNESS_MARKER_HEADER, "1");
        if let Some((user, password)) = credentials {
            request = request.basic_auth(user, Some(password));
        }
        let response = request.send().await.expect("harness token request");
        let response = expect_status(response, StatusCode::OK, "GET", &self.realm()).await;
        let body: serde_json::Value = response.json().await.expect("token response is JSON");
        body.get("token")
            .or_else(|| body.get("access_token"))
            .and_then(|t| t.as_str())
            .expect("token response has a token")
            .to_string()
    }
}

#[derive(Serialize)]
struct AccessClaim {
    #[serde(rename = "type")]
    kind: String,
    name: String,
    actions: Vec<String>,
}

#[derive(Serialize)]
struct TokenClaims {
    iss: String,
    sub: String,
    aud: String,
    exp: u64,
    nbf: u64,
    iat: u64,
    jti: String,
    access: Vec<AccessClaim>,
}

/// The longest `exp` put into a JWT, whatever `expires_in` the answer claims.
const MAX_JWT_LIFETIME_SECS: u64 = 24 * 3600;

/// Which of the requested actions the caller gets.
fn granted_actions(kind: &str, requested: &str, authenticated: bool) -> Vec<String> {
    let allowed: &[&str] = match (kind, authenticated) {
        ("repository", false) => &["pull"],
        ("repository", true) => &["pull", "push", "delete"],
        ("registry", true) => &["*"],
        _ => &[],
    };
    requested
        .split(',')
        .filter(|action| allowed.contains(action))
        .map(str::to_string)
        .collect()
}

/// Splits `type:name:actions`; the name is everything between the first and
/// the last colon.
fn parse_scope(scope: &str) -> Option<(&str, &str, &str)> {
    let (kind, rest) = scope.split_once(':')?;
    let (name, actions) = rest.rsplit_once(':')?;
    Some((kind, name, actions))
}

/// Decodes `Authorization: Basic …` into user and password.
fn parse_basic(headers: &HeaderMap) -> Option<(String, String)> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let encoded = value
        .strip_prefix("Basic ")
        .or_else(|| value.strip_prefix("basic "))?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}

fn json_error(status: StatusCode, message: &str) -> Response {
    let body = serde_json::json!({ "errors": [{ "code": "UNAUTHORIZED", "message": message }] });
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

async fn token_handler(
    State(state): State<Arc<TokenState>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let mut service = None;
    let mut scopes = Vec::new();
    for (key, value) in url::form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        match key.as_ref() {
            "service" => service = Some(value.into_owned()),
            "scope" => scopes.extend(value.split_whitespace().map(str::to_string)),
            _ => {}
        }
    }
    let from_harness = headers.contains_key(HARNESS_MARKER_HEADER);
    let credentials = parse_basic(&headers);
    let mut record = TokenRequest {
        service: service.clone(),
        scopes: scopes.clone(),
        user: credentials.as_ref().map(|(user, _)| user.clone()),
        status: 200,
        from_harness,
        grant_type: None,
        client_id: None,
    };

    let authenticated = match &credentials {
        None => false,
        Some((user, password)) if *user == state.user && *password == state.password => true,
        Some(_) => {
            record.status = 401;
            state.requests.lock().unwrap().push(record);
            let mut response = json_error(StatusCode::UNAUTHORIZED, "wrong user or password");
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"tagpin-test-token\""),
            );
            return response;
        }
    };
    issue_token(&state, record, authenticated)
}

/// `POST /token`: the OAuth2 refresh-token grant (distribution's `spec/auth/oauth.md`).
/// Only the refresh token set with [`TokenServer::set_refresh_token`] is accepted.
async fn oauth_token_handler(State(state): State<Arc<TokenState>>, body: Bytes) -> Response {
    let mut form = std::collections::HashMap::new();
    for (key, value) in url::form_urlencoded::parse(&body) {
        form.insert(key.into_owned(), value.into_owned());
    }
    let mut record = TokenRequest {
        service: form.get("service").cloned(),
        scopes: form
            .get("scope")
            .map(|s| s.split_whitespace().map(str::to_string).collect())
            .unwrap_or_default(),
        user: None,
        status: 200,
        from_harness: false,
        grant_type: form.get("grant_type").cloned(),
        client_id: form.get("client_id").cloned(),
    };
    let known_refresh_token = state.refresh_token.lock().unwrap().clone();
    let refusal = if record.grant_type.as_deref() != Some("refresh_token") {
        Some((StatusCode::BAD_REQUEST, "unsupported grant_type"))
    } else if record.client_id.as_deref().unwrap_or("").is_empty() {
        Some((StatusCode::BAD_REQUEST, "client_id is required"))
    } else if known_refresh_token.is_none()
        || form.get("refresh_token") != known_refresh_token.as_ref()
    {
        Some((StatusCode::UNAUTHORIZED, "invalid refresh token"))
    } else {
        None
    };
    if let Some((status, message)) = refusal {
        record.status = status.as_u16();
        state.requests.lock().unwrap().push(record);
        return json_error(status, message);
    }
    record.user = Some(state.user.clone());
    issue_token(&state, record, true)
}

/// Signs a token for `record`'s service and scopes, and records the request.
fn issue_token(state: &TokenState, mut record: TokenRequest, authenticated: bool) -> Response {
    let service = record.service.clone();
    let scopes = record.scopes.clone();
    // A token for another service would be rejected by the registry anyway;
    // refusing here points straight at the client bug.
    if service.as_deref() != Some(TOKEN_SERVICE) {
        record.status = 400;
        state.requests.lock().unwrap().push(record);
        return json_error(
            StatusCode::BAD_REQUEST,
            &format!("service must be {TOKEN_SERVICE:?}, got {service:?}"),
        );
    }

    let mut access = Vec::new();
    for scope in &scopes {
        if let Some((kind, name, actions)) = parse_scope(scope) {
            access.push(AccessClaim {
                kind: kind.to_string(),
                name: name.to_string(),
                actions: granted_actions(kind, actions, authenticated),
            });
        }
    }

    let (field, expires_in) = {
        let settings = state.settings.lock().unwrap();
        (settings.field, settings.expires_in)
    };
    let now = unix_now();
    let claims = TokenClaims {
        iss: TOKEN_ISSUER.to_string(),
        sub: record.user.clone().unwrap_or_default(),
        aud: TOKEN_SERVICE.to_string(),
        // distribution reads `exp` as an int64: an absurd `expires_in` (a test of the client's
        // arithmetic) is answered as sent, with a token good for a day.
        exp: now.saturating_add(expires_in.unwrap_or(60).min(MAX_JWT_LIFETIME_SECS)),
        nbf: now,
        iat: now,
        jti: format!(
            "tagpin-test-{}",
            state.next_jti.fetch_add(1, Ordering::Relaxed)
        ),
        access,
    };
    let mut jwt_header = Header::new(Algorithm::RS256);
    jwt_header.typ = Some("JWT".to_string());
    jwt_header.x5c = Some(vec![state.x5c.clone()]);
    let token = jsonwebtoken::encode(&jwt_header, &claims, &state.encoding_key).expect("sign JWT");

    let mut body = serde_json::Map::new();
    if matches!(field, TokenField::Token | TokenField::Both) {
        body.insert("token".into(), token.clone().into());
    }
    if matches!(field, TokenField::AccessToken | TokenField::Both) {
        body.insert("access_token".into(), token.into());
    }
    if let Some(seconds) = expires_in {
        body.insert("expires_in".into(), seconds.into());
    }
    state.requests.lock().unwrap().push(record);
    axum::Json(serde_json::Value::Object(body)).into_response()
}

// ---------------------------------------------------------------------------
// FaultProxy
// ---------------------------------------------------------------------------

/// What a [`FaultRule`] does to a matching request.
#[derive(Clone, Debug)]
pub enum Fault {
    /// Answer with this response; the upstream is not contacted.
    Respond {
        status: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
    /// Close the connection without any response.
    DropConnection,
    /// Forward, then set `Docker-Content-Digest` to this value.
    ReplaceDigest(String),
    /// Forward, then remove `Docker-Content-Digest`.
    RemoveDigest,
    /// Add these headers to the response (forwarded or injected).
    AddHeaders(Vec<(String, String)>),
    /// Hold the request until the semaphore has a permit (a test adds them to release it),
    /// then go on: a client observed in the middle of its work.
    Hold(Arc<tokio::sync::Semaphore>),
}

impl Fault {
    /// A bare error status with a registry-style JSON error body.
    pub fn status(status: u16) -> Fault {
        let body = serde_json::json!({
            "errors": [{ "code": "UNKNOWN", "message": format!("injected {status} by FaultProxy") }]
        });
        Fault::Respond {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            body: body.to_string().into_bytes(),
        }
    }

    /// 429 with `Retry-After: <retry_after_secs>`, like Docker Hub's rate limit.
    pub fn too_many_requests(retry_after_secs: u64) -> Fault {
        let body = serde_json::json!({
            "errors": [{ "code": "TOOMANYREQUESTS", "message": "injected 429 by FaultProxy" }]
        });
        Fault::Respond {
            status: 429,
            headers: vec![
                ("content-type".into(), "application/json".into()),
                ("retry-after".into(), retry_after_secs.to_string()),
            ],
            body: body.to_string().into_bytes(),
        }
    }

    /// A fixed answer with a content type, e.g. a schema1 manifest with
    /// [`DOCKER_SCHEMA1_SIGNED`]. Add a `Docker-Content-Digest` with a
    /// second rule ([`Fault::AddHeaders`]) if the test needs one.
    pub fn fixed_body(status: u16, content_type: &str, body: impl Into<Vec<u8>>) -> Fault {
        Fault::Respond {
            status,
            headers: vec![("content-type".into(), content_type.to_string())],
            body: body.into(),
        }
    }

    fn answers_without_upstream(&self) -> bool {
        matches!(self, Fault::Respond { .. } | Fault::DropConnection)
    }
}

/// A fault applied to requests whose method matches and whose path contains
/// `path_contains`, for a limited or unlimited number of requests.
#[derive(Clone, Debug)]
pub struct FaultRule {
    /// `None` matches every method.
    pub method: Option<String>,
    pub path_contains: String,
    pub fault: Fault,
    /// How many more requests this rule applies to; `None` means forever.
    pub remaining: Option<usize>,
}

impl FaultRule {
    /// A rule for `method` (e.g. "GET", "HEAD") that applies forever until `.times(n)`.
    pub fn new(method: &str, path_contains: &str, fault: Fault) -> FaultRule {
        FaultRule {
            method: Some(method.to_ascii_uppercase()),
            path_contains: path_contains.to_string(),
            fault,
            remaining: None,
        }
    }

    /// A rule for every method.
    pub fn any_method(path_contains: &str, fault: Fault) -> FaultRule {
        FaultRule {
            method: None,
            path_contains: path_contains.to_string(),
            fault,
            remaining: None,
        }
    }

    /// Apply to the next `n` matching requests only.
    pub fn times(mut self, n: usize) -> FaultRule {
        self.remaining = Some(n);
        self
    }

    fn matches(&self, method: &str, path: &str) -> bool {
        let method_ok = self.method.as_deref().is_none_or(|m| m == method);
        method_ok && path.contains(&self.path_contains) && self.remaining != Some(0)
    }
}

/// One request the proxy received, as the client sent it.
#[derive(Clone, Debug)]
pub struct RecordedRequest {
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    /// All Accept headers joined with ", ".
    pub accept: Option<String>,
    pub authorization: Option<String>,
}

struct ProxyState {
    upstream: String,
    own_base: String,
    client: reqwest::Client,
    rules: Arc<Mutex<Vec<FaultRule>>>,
    requests: Mutex<Vec<RecordedRequest>>,
}

/// An HTTP reverse proxy in front of a registry (or any server) that can
/// inject faults, so clients can be tested against rate limits, flaky
/// servers and lying headers with the real registry behind.
pub struct FaultProxy {
    state: Arc<ProxyState>,
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FaultProxy {
    /// Serves on a free loopback port and forwards to `upstream_base_url`
    /// (e.g. `registry.base_url()`; an https upstream's certificate is not checked).
    pub async fn start(upstream_base_url: &str, rules: Vec<FaultRule>) -> FaultProxy {
        let (listener, addr) = bind_loopback().await;
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .danger_accept_invalid_certs(true)
            .timeout(Duration::from_secs(30))
            .build()
            .expect("build proxy HTTP client");
        let state = Arc::new(ProxyState {
            upstream: upstream_base_url.trim_end_matches('/').to_string(),
            own_base: format!("http://{addr}"),
            client,
            rules: Arc::new(Mutex::new(rules)),
            requests: Mutex::new(Vec::new()),
        });
        let router = Router::new()
            .fallback(proxy_handler)
            .with_state(state.clone());
        let task = spawn_server(listener, router);
        FaultProxy { state, addr, task }
    }

    /// `http://127.0.0.1:<port>`
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `127.0.0.1:<port>`
    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    /// The live rule list; lock it to change rules while requests flow.
    pub fn rules(&self) -> Arc<Mutex<Vec<FaultRule>>> {
        self.state.rules.clone()
    }

    pub fn set_rules(&self, rules: Vec<FaultRule>) {
        *self.state.rules.lock().unwrap() = rules;
    }

    pub fn add_rule(&self, rule: FaultRule) {
        self.state.rules.lock().unwrap().push(rule);
    }

    pub fn clear_rules(&self) {
        self.state.rules.lock().unwrap().clear();
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.state.requests.lock().unwrap().clone()
    }

    /// How many requests had `method` and a path containing `path_contains`.
    pub fn count(&self, method: &str, path_contains: &str) -> usize {
        self.state
            .requests
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.method.eq_ignore_ascii_case(method) && r.path.contains(path_contains))
            .count()
    }

    pub fn clear_requests(&self) {
        self.state.requests.lock().unwrap().clear();
    }
}

/// Headers that describe one hop and must not be copied across the proxy.
fn is_hop_header(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "host"
            | "connection"
            | "keep-alive"
            | "proxy-connection"
            | "transfer-encoding"
            | "te"
            | "trailer"
            | "upgrade"
    )
}

/// Takes one use of every matching rule and returns their faults in rule order.
fn take_faults(rules: &Mutex<Vec<FaultRule>>, method: &str, path: &str) -> Vec<Fault> {
    let mut rules = rules.lock().unwrap();
    let mut faults = Vec::new();
    for rule in rules.iter_mut().filter(|rule| rule.matches(method, path)) {
        if let Some(remaining) = rule.remaining.as_mut() {
            *remaining -= 1;
        }
        faults.push(rule.fault.clone());
    }
    faults
}

/// Forwards one request, unless a matching rule answers for the upstream;
/// header faults then apply to whatever response goes back.
///
/// Every rule that matches uses up one of its `times`; the first rule that
/// answers by itself (Respond, DropConnection) decides the response.
async fn proxy_handler(State(state): State<Arc<ProxyState>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let method = parts.method.as_str().to_string();
    let path = parts.uri.path().to_string();
    let query = parts.uri.query().map(str::to_string);
    let accept: Vec<&str> = parts
        .headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    state.requests.lock().unwrap().push(RecordedRequest {
        method: method.clone(),
        path: path.clone(),
        query: query.clone(),
        accept: if accept.is_empty() {
            None
        } else {
            Some(accept.join(", "))
        },
        authorization: header_text(&parts.headers, "authorization"),
    });

    let faults = take_faults(&state.rules, &method, &path);
    for fault in &faults {
        if let Fault::Hold(gate) = fault {
            // The permit goes back at once: one release lets every held request through.
            drop(gate.acquire().await);
        }
    }
    let mut response = match faults.iter().find(|fault| fault.answers_without_upstream()) {
        Some(Fault::DropConnection) => {
            // Unwinding out of the handler ends the connection's task, which
            // closes the socket before any byte of a response is written.
            // resume_unwind skips the panic hook, so nothing is printed.
            std::panic::resume_unwind(Box::new("FaultProxy: DropConnection"));
        }
        Some(Fault::Respond {
            status,
            headers,
            body,
        }) => {
            let mut response = Response::new(Body::from(body.clone()));
            *response.status_mut() = StatusCode::from_u16(*status).expect("valid status code");
            for (name, value) in headers {
                insert_header(response.headers_mut(), name, value);
            }
            response
        }
        _ => forward(&state, parts, body, &path, query.as_deref()).await,
    };

    for fault in &faults {
        match fault {
            Fault::ReplaceDigest(digest) => {
                insert_header(response.headers_mut(), "docker-content-digest", digest)
            }
            Fault::RemoveDigest => {
                response.headers_mut().remove("docker-content-digest");
            }
            Fault::AddHeaders(headers) => {
                for (name, value) in headers {
                    insert_header(response.headers_mut(), name, value);
                }
            }
            Fault::Respond { .. } | Fault::DropConnection | Fault::Hold(_) => {}
        }
    }
    response
}

fn insert_header(headers: &mut HeaderMap, name: &str, value: &str) {
    let name = HeaderName::from_bytes(name.as_bytes()).expect("valid header name");
    let value = HeaderValue::from_str(value).expect("valid header value");
    headers.insert(name, value);
}

/// Sends the request to the upstream and copies its answer back, buffered
/// (registry test payloads are small). reqwest adds `Accept: */*` when the
/// client sent no Accept; distribution treats that like no Accept at all. Upstream URLs in `Location` and
/// `WWW-Authenticate` are rewritten to point at the proxy.
async fn forward(
    state: &ProxyState,
    parts: axum::http::request::Parts,
    body: Body,
    path: &str,
    query: Option<&str>,
) -> Response {
    let body = axum::body::to_bytes(body, usize::MAX)
        .await
        .expect("read request body");
    let url = match query {
        Some(query) => format!("{}{path}?{query}", state.upstream),
        None => format!("{}{path}", state.upstream),
    };
    let mut upstream_request = state.client.request(parts.method.clone(), &url);
    for (name, value) in &parts.headers {
        if !is_hop_header(name) && name != header::CONTENT_LENGTH {
            upstream_request = upstream_request.header(name, value);
        }
    }
    let upstream_response = match upstream_request.body(body).send().await {
        Ok(response) => response,
        Err(e) => {
            let message = format!("FaultProxy could not reach {url}: {e}");
            return (StatusCode::BAD_GATEWAY, message).into_response();
        }
    };

    let status = upstream_response.status();
    let mut headers = HeaderMap::new();
    for (name, value) in upstream_response.headers() {
        if is_hop_header(name) {
            continue;
        }
        let rewritten = if name == header::LOCATION || name == header::WWW_AUTHENTICATE {
            value
                .to_str()
                .ok()
                .map(|text| text.replace(&state.upstream, &state.own_base))
                .and_then(|text| HeaderValue::from_str(&text).ok())
                .unwrap_or_else(|| value.clone())
        } else {
            value.clone()
        };
        headers.append(name.clone(), rewritten);
    }
    let body: Bytes = upstream_response.bytes().await.unwrap_or_default();
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    response
}
