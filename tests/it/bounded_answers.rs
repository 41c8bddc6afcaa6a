//! Every answer tagpin reads is bounded in size and time, and nothing fetched is handed back:
//! the real binary against hostile servers (`support::hostile`) standing where a tenant's
//! `PinnedRepository` may point it: `forge.api_url`, a registry, a token realm, a kubeconfig's
//! `server`. An endless answer is refused at its cap with a small, steady memory; one that
//! drips a byte at a time is given up at its deadline; a private page answered with an error
//! status is never quoted; a redirect carries no credential to another host.

use crate::support;

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use support::git::BareRepo;
use support::hostile::{peak_rss_kib, Answer, HostileServer};
use support::manifests::deployment;
use support::output_text as text;
use support::registry::{Mode, TestRegistry};

/// The forge token of these tests; fake, and never to be shown.
const TOKEN: &str = "glpat-hostile-5e1d9c0b";
/// What a private page says; none of it may reach tagpin's output.
const PRIVATE: &str = "INTERNAL-ONLY admin page: db_password=hunter2";
/// Memory `tagpin sync` may reach against an endless answer: the cap is 16 MiB.
const RSS_BOUND_KIB: u64 = 200 * 1024;
/// A run that passes this is killed: the measurement of the unbounded case stops here.
const RSS_KILL_KIB: u64 = 1024 * 1024;

#[derive(Clone, Copy, Debug)]
enum Forge {
    GitHub,
    GitLab,
    Gitea,
    BitbucketServer,
    Bitbucket,
    AzureDevOps,
}

impl Forge {
    fn name(self) -> &'static str {
        match self {
            Forge::GitHub => "GitHub",
            Forge::GitLab => "GitLab",
            Forge::Gitea => "Gitea",
            Forge::BitbucketServer => "Bitbucket",
            Forge::Bitbucket => "Bitbucket",
            Forge::AzureDevOps => "Azure DevOps",
        }
    }

    /// The `forge:` section for a forge at `url`, with `extra` keys.
    fn yaml(self, url: &str, extra: &str) -> String {
        match self {
            Forge::GitHub => format!(
                "forge: {{api_url: '{url}', owner: acme, repo: gitops, token_env: TAGPIN_FORGE_TOKEN{extra}}}\n"
            ),
            Forge::GitLab => format!(
                "forge: {{kind: gitlab, api_url: '{url}/api/v4', project: acme/gitops, token_env: TAGPIN_FORGE_TOKEN{extra}}}\n"
            ),
            Forge::Gitea => format!(
                "forge: {{kind: gitea, api_url: '{url}/api/v1', owner: acme, repo: gitops, token_env: TAGPIN_FORGE_TOKEN{extra}}}\n"
            ),
            Forge::BitbucketServer => format!(
                "forge: {{kind: bitbucket-server, api_url: '{url}', project: ACME, repo: gitops, token_env: TAGPIN_FORGE_TOKEN{extra}}}\n"
            ),
            Forge::Bitbucket => format!(
                "forge: {{kind: bitbucket, api_url: '{url}/2.0', workspace: acme, repo: gitops, token_env: TAGPIN_FORGE_TOKEN{extra}}}\n"
            ),
            Forge::AzureDevOps => format!(
                "forge: {{kind: azure-devops, api_url: '{url}/acme', project: platform, repo: gitops, token_env: TAGPIN_FORGE_TOKEN{extra}}}\n"
            ),
        }
    }
}

/// A registry with `acme/web:1.0` and a repository naming it, for a pull-request-mode pass.
struct World {
    _registry: TestRegistry,
    host: String,
    repo: BareRepo,
    dir: tempfile::TempDir,
}

impl World {
    async fn new() -> World {
        let registry = TestRegistry::start(Mode::Plain).await;
        let host = registry.host();
        registry.push_image("acme/web", "1.0", "web-1").await;
        let repo = BareRepo::create(&[(
            "apps/web.yaml",
            &deployment("web", &format!("{host}/acme/web:1.0")),
        )]);
        World {
            _registry: registry,
            host,
            repo,
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// `tagpin.yaml` proposing the pin on `forge_yaml`.
    fn configure(&self, forge_yaml: &str) {
        std::fs::write(
            self.dir.path().join("tagpin.yaml"),
            format!(
                "repository: {{url: '{}', branch: main}}\npaths: [apps]\nmode: pull-request\n\
                 registries: {{insecure: ['{}']}}\n{forge_yaml}",
                self.repo.file_url(),
                self.host
            ),
        )
        .unwrap();
    }

    fn sync(&self) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_tagpin"));
        cmd.arg("sync")
            .arg("--config")
            .arg(self.dir.path().join("tagpin.yaml"))
            .arg("--cache-dir")
            .arg(self.dir.path().join("cache"))
            .env("HOME", self.dir.path())
            .env("TAGPIN_FORGE_TOKEN", TOKEN)
            .env_remove("DOCKER_CONFIG")
            .env_remove("RUST_LOG")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        cmd
    }
}

/// Runs `cmd`, at most `limit`; its output, how long it ran, and its peak RSS in KiB.
async fn measured(mut cmd: tokio::process::Command, limit: Duration) -> (Output, Duration, u64) {
    let started = Instant::now();
    let child = cmd.spawn().expect("start tagpin");
    let pid = child.id().expect("running");
    let (out, peak) = peak_rss_kib(pid, RSS_KILL_KIB, async {
        tokio::time::timeout(limit, child.wait_with_output()).await
    })
    .await;
    let elapsed = started.elapsed();
    let out = out
        .unwrap_or_else(|_| panic!("still running after {limit:?}: no deadline held it"))
        .expect("wait for tagpin");
    assert!(
        !text(&out).contains(TOKEN),
        "the token is shown: {}",
        text(&out)
    );
    (out, elapsed, peak)
}

/// A forge that answers `200` and streams without end: the call is refused at the cap,
/// naming the forge's host, and the process stays small.
async fn an_endless_forge_answer_is_refused_at_its_cap(forge: Forge) {
    let endless = HostileServer::always(Answer::Endless {
        content_type: "application/json".into(),
    })
    .await;
    let w = World::new().await;
    w.configure(&forge.yaml(&endless.url(), ""));
    let (out, elapsed, peak) = measured(w.sync(), Duration::from_secs(120)).await;
    eprintln!(
        "{}: tagpin sync against an endless answer: exit {:?} after {elapsed:?}, peak RSS {} MiB",
        forge.name(),
        out.status.code(),
        peak / 1024
    );
    assert!(peak < RSS_BOUND_KIB, "peak RSS {peak} KiB: {}", text(&out));
    assert!(!out.status.success(), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("{} at {}", forge.name(), endless.host()))
            && stderr.contains("answer larger than 16 MiB; refused"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn github_an_endless_answer_is_refused_at_16_mib_and_memory_stays_small() {
    an_endless_forge_answer_is_refused_at_its_cap(Forge::GitHub).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn gitlab_an_endless_answer_is_refused_at_16_mib_and_memory_stays_small() {
    an_endless_forge_answer_is_refused_at_its_cap(Forge::GitLab).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn gitea_an_endless_answer_is_refused_at_16_mib_and_memory_stays_small() {
    an_endless_forge_answer_is_refused_at_its_cap(Forge::Gitea).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn bitbucket_server_an_endless_answer_is_refused_at_16_mib_and_memory_stays_small() {
    an_endless_forge_answer_is_refused_at_its_cap(Forge::BitbucketServer).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn bitbucket_an_endless_answer_is_refused_at_16_mib_and_memory_stays_small() {
    an_endless_forge_answer_is_refused_at_its_cap(Forge::Bitbucket).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn azure_devops_an_endless_answer_is_refused_at_16_mib_and_memory_stays_small() {
    an_endless_forge_answer_is_refused_at_its_cap(Forge::AzureDevOps).await;
}

/// A forge that sends one byte every half second, which no read timeout notices, is given up
/// at `forge.timeout_seconds`.
async fn a_dripping_forge_is_given_up_at_its_deadline(forge: Forge) {
    let drip = HostileServer::always(Answer::Drip {
        content_type: "application/json".into(),
        every: Duration::from_millis(500),
    })
    .await;
    let w = World::new().await;
    w.configure(&forge.yaml(&drip.url(), ", timeout_seconds: 2"));
    let (out, elapsed, _) = measured(w.sync(), Duration::from_secs(90)).await;
    eprintln!(
        "{}: tagpin sync against a drip: exit {:?} after {elapsed:?}",
        forge.name(),
        out.status.code()
    );
    assert!(!out.status.success(), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("{} at {}", forge.name(), drip.host()))
            && stderr.contains("no complete answer within 2s"),
        "{stderr}"
    );
    // One forge call's deadline, and the pass around it (clone, registry) as slack.
    assert!(elapsed < Duration::from_secs(2 + 10), "{elapsed:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn github_a_dripping_answer_is_given_up_at_forge_timeout_seconds() {
    a_dripping_forge_is_given_up_at_its_deadline(Forge::GitHub).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn gitlab_a_dripping_answer_is_given_up_at_forge_timeout_seconds() {
    a_dripping_forge_is_given_up_at_its_deadline(Forge::GitLab).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn gitea_a_dripping_answer_is_given_up_at_forge_timeout_seconds() {
    a_dripping_forge_is_given_up_at_its_deadline(Forge::Gitea).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn bitbucket_server_a_dripping_answer_is_given_up_at_forge_timeout_seconds() {
    a_dripping_forge_is_given_up_at_its_deadline(Forge::BitbucketServer).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn bitbucket_a_dripping_answer_is_given_up_at_forge_timeout_seconds() {
    a_dripping_forge_is_given_up_at_its_deadline(Forge::Bitbucket).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn azure_devops_a_dripping_answer_is_given_up_at_forge_timeout_seconds() {
    a_dripping_forge_is_given_up_at_its_deadline(Forge::AzureDevOps).await;
}

/// A private page answered with an error status, where a forge was expected: tagpin says the
/// status and what it means, never what the page says.
async fn a_forge_error_body_is_never_quoted(forge: Forge) {
    let body = serde_json::json!({
        "message": PRIVATE,
        "errors": [{"resource": "PullRequest", "code": "custom", "message": PRIVATE}],
        "error": PRIVATE,
    })
    .to_string();
    let private = HostileServer::always(Answer::body(500, "application/json", &body)).await;
    let w = World::new().await;
    w.configure(&forge.yaml(&private.url(), ""));
    let (out, _, _) = measured(w.sync(), Duration::from_secs(120)).await;
    assert!(!out.status.success(), "{}", text(&out));
    assert!(!text(&out).contains("hunter2"), "{}", text(&out));
    assert!(!text(&out).contains("INTERNAL-ONLY"), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("{} at {}", forge.name(), private.host()))
            && stderr.contains("500 Internal Server Error"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn github_an_error_answers_text_is_never_quoted() {
    a_forge_error_body_is_never_quoted(Forge::GitHub).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn gitlab_an_error_answers_text_is_never_quoted() {
    a_forge_error_body_is_never_quoted(Forge::GitLab).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn gitea_an_error_answers_text_is_never_quoted() {
    a_forge_error_body_is_never_quoted(Forge::Gitea).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn bitbucket_server_an_error_answers_text_is_never_quoted() {
    a_forge_error_body_is_never_quoted(Forge::BitbucketServer).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn bitbucket_an_error_answers_text_is_never_quoted() {
    a_forge_error_body_is_never_quoted(Forge::Bitbucket).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn azure_devops_an_error_answers_text_is_never_quoted() {
    a_forge_error_body_is_never_quoted(Forge::AzureDevOps).await;
}

/// The forge redirects every call to another host, which records what it gets: the token
/// never arrives there (GitLab's `PRIVATE-TOKEN` is a custom header, which reqwest would carry
/// along on a redirect; neither adapter follows one).
async fn a_forge_redirect_carries_no_token_elsewhere(forge: Forge) {
    let elsewhere =
        HostileServer::start_on("127.0.0.2", |_| Answer::body(200, "application/json", "{}")).await;
    let target = elsewhere.url();
    let redirecting = HostileServer::start(move |seen| {
        Answer::redirect(302, &format!("{target}{}", seen.target))
    })
    .await;
    let w = World::new().await;
    w.configure(&forge.yaml(&redirecting.url(), ""));
    let (out, _, _) = measured(w.sync(), Duration::from_secs(120)).await;
    assert!(!out.status.success(), "{}", text(&out));
    let asked = redirecting.seen();
    // Azure DevOps's is Basic with an empty user: `base64(":" + token)`.
    let basic = {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(format!(":{TOKEN}"))
    };
    let credential = |s: &support::hostile::Seen| {
        s.header("private-token")
            .or(s.header("authorization"))
            .is_some_and(|v| v.contains(TOKEN) || v.contains(&basic))
    };
    assert!(
        asked.iter().any(credential),
        "the forge got the token: {asked:?}"
    );
    let carried = elsewhere.seen();
    assert!(
        !carried.iter().any(credential),
        "the token went to the other host: {carried:?}"
    );
    assert!(carried.is_empty(), "the redirect was followed: {carried:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("302 Found"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn github_a_redirect_to_another_host_is_not_followed() {
    a_forge_redirect_carries_no_token_elsewhere(Forge::GitHub).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn gitlab_a_redirect_to_another_host_is_not_followed() {
    a_forge_redirect_carries_no_token_elsewhere(Forge::GitLab).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn gitea_a_redirect_to_another_host_is_not_followed() {
    a_forge_redirect_carries_no_token_elsewhere(Forge::Gitea).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn bitbucket_server_a_redirect_to_another_host_is_not_followed() {
    a_forge_redirect_carries_no_token_elsewhere(Forge::BitbucketServer).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn bitbucket_a_redirect_to_another_host_is_not_followed() {
    a_forge_redirect_carries_no_token_elsewhere(Forge::Bitbucket).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn azure_devops_a_redirect_to_another_host_is_not_followed() {
    a_forge_redirect_carries_no_token_elsewhere(Forge::AzureDevOps).await;
}

/// `tagpin verify --branch main` of a repository pinning `web` (returned with the command: it
/// lives as long as the test), on the API server `server`, each request given up after
/// `--kube-timeout 1`.
fn verify(dir: &Path, server: &str) -> (tokio::process::Command, BareRepo) {
    let repo = BareRepo::create(&[(
        "apps/web.yaml",
        &deployment(
            "web",
            "ghcr.io/acme/web:1@sha256:1111111111111111111111111111111111111111111111111111111111111111",
        ),
    )]);
    std::fs::write(
        dir.join("tagpin.yaml"),
        format!(
            "repository: {{url: '{}', branch: main}}\npaths: [apps]\n",
            repo.file_url()
        ),
    )
    .unwrap();
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: hostile\n  cluster:\n    server: {server}\n\
             users:\n- name: tagpin\n  user:\n    token: kube-token-7a1f\ncontexts:\n- name: hostile\n  \
             context: {{cluster: hostile, user: tagpin}}\ncurrent-context: hostile\n"
        ),
    )
    .unwrap();
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_tagpin"));
    cmd.args([
        "verify",
        "--branch",
        "main",
        "--kube-timeout",
        "1",
        "--config",
    ])
    .arg(dir.join("tagpin.yaml"))
    .arg("--cache-dir")
    .arg(dir.join("cache"))
    .env("HOME", dir)
    .env("KUBECONFIG", &kubeconfig)
    .env_remove("DOCKER_CONFIG")
    .env_remove("RUST_LOG")
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .kill_on_drop(true);
    (cmd, repo)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kubernetes_api_answering_without_end_is_refused_at_64_mib() {
    let endless = HostileServer::always(Answer::Endless {
        content_type: "application/json".into(),
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let (cmd, _repo) = verify(dir.path(), &endless.url());
    let (out, elapsed, peak) = measured(cmd, Duration::from_secs(120)).await;
    eprintln!(
        "tagpin verify against an endless API server: exit {:?} after {elapsed:?}, peak RSS {} MiB",
        out.status.code(),
        peak / 1024
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        stderr.contains(&format!("Kubernetes API {}", endless.url()))
            && stderr.contains("answer larger than 64 MiB; refused"),
        "{stderr}"
    );
    // The cap for each of the three lists verify makes at once (Argo CD and Flux objects),
    // and the process itself.
    assert!(peak < 300 * 1024, "peak RSS {peak} KiB");
    // Too large is not transient: each list is asked once, not three times.
    let asked: Vec<String> = endless.seen().into_iter().map(|s| s.target).collect();
    let mut distinct = asked.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(asked.len(), distinct.len(), "{asked:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kubernetes_api_dripping_its_answer_is_given_up_at_twice_the_kube_timeout() {
    let drip = HostileServer::always(Answer::Drip {
        content_type: "application/json".into(),
        every: Duration::from_millis(300),
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let (cmd, _repo) = verify(dir.path(), &drip.url());
    let (out, elapsed, _) = measured(cmd, Duration::from_secs(90)).await;
    eprintln!(
        "tagpin verify against a dripping API server: exit {:?} after {elapsed:?}",
        out.status.code()
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        stderr.contains(&format!("Kubernetes API {}", drip.url()))
            && stderr.contains("no complete answer within 2s"),
        "{stderr}"
    );
    // Three attempts of 2 s and the pauses between them (0.5 s, 1 s), with slack.
    assert!(elapsed < Duration::from_secs(3 * 2 + 2 + 10), "{elapsed:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn what_a_server_posing_as_the_kubernetes_api_answers_is_never_quoted_nor_logged() {
    // An error status with a private page, and a 200 whose body is not the API's JSON (which
    // kube's client would log whole).
    for (status, content_type) in [(500, "text/plain"), (403, "text/html"), (200, "text/plain")] {
        let private = HostileServer::always(Answer::body(status, content_type, PRIVATE)).await;
        let dir = tempfile::tempdir().unwrap();
        let (cmd, _repo) = verify(dir.path(), &format!("{}/admin", private.url()));
        let (out, _, _) = measured(cmd, Duration::from_secs(90)).await;
        assert!(!text(&out).contains("hunter2"), "{status}: {}", text(&out));
        assert!(
            !text(&out).contains("INTERNAL-ONLY"),
            "{status}: {}",
            text(&out)
        );
        assert!(!private.seen().is_empty());
        let said = text(&out);
        let expected = match status {
            500 => "500 Internal Server Error",
            403 => "403 Forbidden",
            _ => "unexpected answer: not valid JSON",
        };
        assert!(said.contains(expected), "{status}: {said}");
        assert!(said.contains(&private.url()), "{status}: {said}");
    }
}

/// A registry's error body is summarised by its OCI error code in tagpin's words; its message
/// is not quoted.
#[tokio::test(flavor = "multi_thread")]
async fn a_registry_error_body_is_named_by_its_code_never_quoted() {
    let body = serde_json::json!({"errors": [
        {"code": "MANIFEST_UNKNOWN", "message": PRIVATE, "detail": {"x": PRIVATE}}
    ]})
    .to_string();
    // No HEAD, so the manifest is asked with GET, whose error answer has a body.
    let registry = HostileServer::start(move |seen| match seen.method.as_str() {
        "HEAD" => Answer::body(405, "application/json", ""),
        _ => Answer::body(404, "application/json", &body),
    })
    .await;
    let out = resolve(&registry.host(), None).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(!text(&out).contains("hunter2"), "{}", text(&out));
    assert!(
        text(&out).contains("MANIFEST_UNKNOWN (no such manifest)"),
        "{}",
        text(&out)
    );
}

/// `tagpin resolve HOST/acme/web:1.0` with HOST insecure, and `docker_config` when given.
async fn resolve(host: &str, docker_config: Option<&Path>) -> Output {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_tagpin"));
    cmd.args([
        "resolve",
        "--registry-timeout",
        "5",
        "--insecure-registry",
        host,
    ])
    .arg(format!("{host}/acme/web:1.0"))
    .env_remove("DOCKER_CONFIG")
    .env_remove("RUST_LOG")
    .kill_on_drop(true);
    match docker_config {
        Some(dir) => cmd.arg("--docker-config").arg(dir),
        None => cmd.env("HOME", "/nonexistent"),
    };
    tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .expect("tagpin resolve ends")
        .unwrap()
}

/// A registry whose challenge names a plain-HTTP token realm on another host (an internal
/// service) does not get it fetched: the image fails naming both hosts.
#[tokio::test(flavor = "multi_thread")]
async fn a_plain_http_token_realm_on_another_host_is_never_fetched() {
    let realm = HostileServer::start_on("127.0.0.2", |_| {
        Answer::body(
            200,
            "application/json",
            r#"{"token": "internal-token-from-realm"}"#,
        )
    })
    .await;
    let challenge = format!(
        "Bearer realm=\"{}/internal/token\",service=\"registry\"",
        realm.url()
    );
    let registry = HostileServer::start(move |_| {
        Answer::body(401, "application/json", "{}").with_header("WWW-Authenticate", &challenge)
    })
    .await;
    let out = resolve(&registry.host(), None).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        realm.seen().is_empty(),
        "the realm was fetched: {:?}",
        realm.seen()
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("registry {}", registry.host()))
            && stderr.contains("refused its token realm on 127.0.0.2"),
        "{stderr}"
    );
    // Nothing the realm might have answered was sent on.
    assert!(registry
        .seen()
        .iter()
        .all(|s| s.header("authorization").is_none()));
}

/// A registry that redirects a manifest to another host (as registries do to blob storage):
/// the credentials it was sent stay with it.
#[tokio::test(flavor = "multi_thread")]
async fn a_registry_redirect_to_another_host_carries_no_authorization() {
    use sha2::Digest as _;
    let manifest = r#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:2222222222222222222222222222222222222222222222222222222222222222","size":2},"layers":[]}"#;
    let digest = format!(
        "sha256:{}",
        sha2::Sha256::digest(manifest.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    );
    let kept = digest.clone();
    let storage = HostileServer::start_on("127.0.0.2", move |seen| {
        let body = if seen.method == "HEAD" { "" } else { manifest };
        Answer::body(200, "application/vnd.oci.image.manifest.v1+json", body)
            .with_header("Docker-Content-Digest", &kept)
    })
    .await;
    let to = storage.url();
    let registry = HostileServer::start(move |seen| match seen.header("authorization") {
        None => Answer::body(401, "application/json", "{}")
            .with_header("WWW-Authenticate", "Basic realm=\"registry\""),
        Some(_) => Answer::redirect(307, &format!("{to}/storage{}", seen.target)),
    })
    .await;
    let config = tempfile::tempdir().unwrap();
    std::fs::write(
        config.path().join("config.json"),
        format!(
            r#"{{"auths": {{"{}": {{"auth": "dXNlcjpzM2NyZXQ="}}}}}}"#,
            registry.host()
        ),
    )
    .unwrap();
    let out = resolve(&registry.host(), Some(config.path())).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains(&digest), "{}", text(&out));
    assert!(registry
        .seen()
        .iter()
        .any(|s| s.header("authorization") == Some("Basic dXNlcjpzM2NyZXQ=")));
    let arrived = storage.seen();
    assert!(!arrived.is_empty(), "the redirect was followed");
    assert!(
        arrived.iter().all(|s| s.header("authorization").is_none()),
        "credentials went to the other host: {arrived:?}"
    );
}
