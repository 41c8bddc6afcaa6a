//! Credentials as `docker login` leaves them, through the real `tagpin` binary: Docker
//! credential helpers (`credHelpers`, `credsStore`) and identity tokens, against the real
//! htpasswd and token registries of `support::registry`.
//!
//! The helpers are shell scripts in a temporary `bin/` put first on the child's PATH (never
//! the test process's own environment). Each records the server URL it was asked about, so
//! a test can count how often tagpin ran it.

use crate::support;

use std::path::PathBuf;
use std::process::Output;
use std::time::{Duration, Instant};

use support::registry::{ImageDigests, Mode, TestRegistry, TOKEN_SERVICE};

/// A home with `bin/` (helpers), `docker/config.json`, and a way to run tagpin there.
struct Login {
    dir: tempfile::TempDir,
}

impl Login {
    fn new(config_json: &str) -> Login {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("bin")).unwrap();
        std::fs::create_dir_all(dir.path().join("docker")).unwrap();
        std::fs::write(dir.path().join("docker/config.json"), config_json).unwrap();
        Login { dir }
    }

    fn bin(&self) -> PathBuf {
        self.dir.path().join("bin")
    }

    /// Writes `docker-credential-<name>`: it logs the URL it read, then runs `body`
    /// (which sees the URL as `$url`).
    fn helper(&self, name: &str, body: &str) {
        use std::os::unix::fs::PermissionsExt;
        let path = self.bin().join(format!("docker-credential-{name}"));
        let log = self.bin().join(format!("{name}.calls"));
        let script = format!(
            "#!/bin/sh\n[ \"$1\" = get ] || exit 3\nread -r url\necho \"$url\" >> '{}'\n{body}\n",
            log.display()
        );
        std::fs::write(&path, script).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// A helper answering `username`/`secret` for any server.
    fn answering(&self, name: &str, username: &str, secret: &str) {
        self.helper(
            name,
            &format!(
                r#"printf '{{"ServerURL":"%s","Username":"{username}","Secret":"{secret}"}}' "$url""#
            ),
        );
    }

    /// The server URLs helper `name` was asked about, one per run.
    fn calls(&self, name: &str) -> Vec<String> {
        std::fs::read_to_string(self.bin().join(format!("{name}.calls")))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// `tagpin resolve` with debug logs, this home's config and helpers first on PATH.
    /// Awaited, not blocking: the token server runs on the test's own runtime.
    async fn resolve(&self, host: &str, images: &[String]) -> Output {
        let path = format!(
            "{}:{}",
            self.bin().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        tokio::process::Command::new(env!("CARGO_BIN_EXE_tagpin"))
            .args(["--insecure-registry", host, "--docker-config"])
            .arg(self.dir.path().join("docker"))
            .arg("resolve")
            .args(images)
            .env("HOME", self.dir.path())
            .env("PATH", path)
            .env("RUST_LOG", "debug")
            .env_remove("DOCKER_CONFIG")
            .output()
            .await
            .expect("run tagpin")
    }
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn assert_no_secret(o: &Output, secret: &str) {
    let all = text(o);
    assert!(!all.contains(secret), "secret {secret:?} leaked:\n{all}");
}

fn config_helper_for(host: &str, helper: &str) -> String {
    format!(r#"{{"credHelpers":{{"{host}":"{helper}"}}}}"#)
}

const SECRET: &str = "helper-s3cret-7f3a91";

/// A token-auth registry holding `acme/t:1`, whose token service takes `refresh_token`.
async fn token_registry(refresh_token: &str) -> (TestRegistry, ImageDigests) {
    let registry = TestRegistry::start(Mode::token("bob", "pw")).await;
    let pushed = registry.push_image("acme/t", "1", "t").await;
    registry
        .token_server()
        .unwrap()
        .set_refresh_token(refresh_token);
    (registry, pushed)
}

/// Pushes `acme/a:1` and `acme/b:2` to `registry` and resolves both with `login`'s Docker
/// config; fails the test unless the run succeeded and printed both digests.
async fn resolves_a_and_b(registry: &TestRegistry, login: &Login) -> Output {
    let host = registry.host();
    let one = registry.push_image("acme/a", "1", "a").await;
    let two = registry.push_image("acme/b", "2", "b").await;
    let images = [format!("{host}/acme/a:1"), format!("{host}/acme/b:2")];
    let out = login.resolve(&host, &images).await;
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&one.manifest) && stdout.contains(&two.manifest),
        "{stdout}"
    );
    out
}

#[tokio::test]
async fn a_cred_helper_logs_in_to_a_basic_auth_registry_once_per_host() {
    let registry = TestRegistry::start(Mode::htpasswd("alice", SECRET)).await;
    let host = registry.host();
    let login = Login::new(&config_helper_for(&host, "test"));
    login.answering("test", "alice", SECRET);

    let out = resolves_a_and_b(&registry, &login).await;
    assert_eq!(login.calls("test"), vec![host.clone()], "one run per host");
    assert_no_secret(&out, SECRET);
}

#[tokio::test]
async fn cred_helpers_win_over_auths_and_creds_store_serves_the_rest() {
    let registry = TestRegistry::start(Mode::htpasswd("alice", SECRET)).await;
    let host = registry.host();
    let pushed = registry.push_image("acme/a", "1", "a").await;
    let image = [format!("{host}/acme/a:1")];

    // base64("alice:wrong-password")
    let helper_wins = Login::new(&format!(
        r#"{{"auths":{{"{host}":{{"auth":"YWxpY2U6d3JvbmctcGFzc3dvcmQ="}}}},"credHelpers":{{"{host}":"test"}}}}"#
    ));
    helper_wins.answering("test", "alice", SECRET);
    let out = helper_wins.resolve(&host, &image).await;
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains(&pushed.manifest));

    // With credsStore set, `docker login` leaves an empty entry that only lists the host.
    let store = Login::new(&format!(
        r#"{{"auths":{{"{host}":{{}}}},"credsStore":"store"}}"#
    ));
    store.answering("store", "alice", SECRET);
    let out = store.resolve(&host, &image).await;
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(store.calls("store"), vec![host.clone()]);
    assert_no_secret(&out, SECRET);
}

#[tokio::test]
async fn an_identity_token_from_a_helper_is_exchanged_with_the_refresh_token_grant() {
    let refresh_token = "refresh-9c1d77e2aa";
    let (registry, pushed) = token_registry(refresh_token).await;
    let (host, server) = (registry.host(), registry.token_server().unwrap());
    let login = Login::new(&config_helper_for(&host, "acr"));
    login.answering("acr", "<token>", refresh_token);

    let out = login.resolve(&host, &[format!("{host}/acme/t:1")]).await;

    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains(&pushed.manifest));
    let grants: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| !r.from_harness)
        .collect();
    assert_eq!(grants.len(), 1, "{grants:?}");
    assert_eq!(grants[0].grant_type.as_deref(), Some("refresh_token"));
    assert_eq!(grants[0].client_id.as_deref(), Some("tagpin"));
    assert_eq!(grants[0].service.as_deref(), Some(TOKEN_SERVICE));
    assert_eq!(grants[0].scopes, vec!["repository:acme/t:pull".to_string()]);
    assert_eq!(grants[0].status, 200);
    assert_no_secret(&out, refresh_token);
}

#[tokio::test]
async fn an_identity_token_in_auths_is_exchanged_and_a_wrong_one_is_refused() {
    let (registry, pushed) = token_registry("good-refresh-5e8b20").await;
    let (host, server) = (registry.host(), registry.token_server().unwrap());
    let image = [format!("{host}/acme/t:1")];
    let with_token = |token: &str| {
        Login::new(&format!(
            r#"{{"auths":{{"{host}":{{"auth":"MDAwMDAwMDAtMDAwMDo=","identitytoken":"{token}"}}}}}}"#
        ))
    };

    let good = with_token("good-refresh-5e8b20");
    let out = good.resolve(&host, &image).await;
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains(&pushed.manifest));
    assert!(
        server
            .requests()
            .iter()
            .any(|r| r.grant_type.as_deref() == Some("refresh_token") && r.status == 200),
        "{:?}",
        server.requests()
    );

    let bad = with_token("bad-refresh-0d4f61");
    let out = bad.resolve(&host, &image).await;
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("refused the identity token"),
        "{}",
        text(&out)
    );
    assert!(server.requests().iter().any(|r| r.status == 401));
    assert_no_secret(&out, "bad-refresh-0d4f61");
}

#[tokio::test]
async fn a_helper_that_finds_nothing_means_anonymous() {
    let registry = TestRegistry::start(Mode::token("bob", "pw")).await;
    let host = registry.host();
    let pushed = registry.push_image("acme/t", "1", "t").await;
    let login = Login::new(&config_helper_for(&host, "empty"));
    login.helper(
        "empty",
        "echo 'credentials not found in native keychain'; exit 1",
    );

    let out = login.resolve(&host, &[format!("{host}/acme/t:1")]).await;

    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains(&pushed.manifest));
    assert_eq!(login.calls("empty").len(), 1);
}

impl Login {
    /// A helper whose first run answers `stale` (a password since rotated, a cloud token
    /// expired in the helper's own cache) and every later run `fresh`.
    fn rotating(&self, name: &str, username: &str, stale: &str, fresh: &str) {
        let log = self.bin().join(format!("{name}.calls"));
        self.helper(
            name,
            &format!(
                r#"if [ "$(wc -l < '{}')" -le 1 ]; then pw='{stale}'; else pw='{fresh}'; fi
printf '{{"ServerURL":"%s","Username":"{username}","Secret":"%s"}}' "$url" "$pw""#,
                log.display()
            ),
        );
    }
}

#[tokio::test]
async fn a_refused_helper_password_is_asked_again_and_the_new_one_is_used() {
    let registry = TestRegistry::start(Mode::htpasswd("alice", SECRET)).await;
    let host = registry.host();
    let login = Login::new(&config_helper_for(&host, "rotating"));
    login.rotating("rotating", "alice", "rotated-away-4c1e", SECRET);

    let out = resolves_a_and_b(&registry, &login).await;
    // Once for the stale answer, once after the 401: not once per image.
    assert_eq!(login.calls("rotating").len(), 2, "{}", text(&out));
    assert_no_secret(&out, SECRET);
    assert_no_secret(&out, "rotated-away-4c1e");
}

#[tokio::test]
async fn credentials_the_token_service_refuses_are_asked_of_the_helper_again() {
    let registry = TestRegistry::start(Mode::token("bob", "pw")).await;
    let host = registry.host();
    let pushed = registry.push_image("acme/t", "1", "t").await;
    let login = Login::new(&config_helper_for(&host, "rotating"));
    login.rotating("rotating", "bob", "expired-7d2a", "pw");

    let out = login.resolve(&host, &[format!("{host}/acme/t:1")]).await;

    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains(&pushed.manifest));
    assert_eq!(login.calls("rotating").len(), 2);
    let statuses: Vec<u16> = registry
        .token_server()
        .unwrap()
        .requests()
        .iter()
        .filter(|r| !r.from_harness)
        .map(|r| r.status)
        .collect();
    assert_eq!(statuses, vec![401, 200]);
}

#[tokio::test]
async fn a_helper_answer_refused_twice_is_reported_without_running_it_for_every_image() {
    let registry = TestRegistry::start(Mode::htpasswd("alice", SECRET)).await;
    let host = registry.host();
    registry.push_image("acme/a", "1", "a").await;
    registry.push_image("acme/a", "2", "a2").await;
    let login = Login::new(&config_helper_for(&host, "wrong"));
    login.answering("wrong", "alice", "never-right-93b0");

    let images = [format!("{host}/acme/a:1"), format!("{host}/acme/a:2")];
    let out = login.resolve(&host, &images).await;

    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("credentials configured for"),
        "{}",
        text(&out)
    );
    assert_eq!(login.calls("wrong").len(), 2, "asked again once, then kept");
    assert_no_secret(&out, "never-right-93b0");
}

/// Runs one failing helper against an htpasswd registry holding `acme/a:1` and `acme/a:2`;
/// returns tagpin's output.
async fn failing(registry: &TestRegistry, name: &str, body: Option<&str>) -> String {
    let host = registry.host();
    let login = Login::new(&config_helper_for(&host, name));
    if let Some(body) = body {
        login.helper(name, body);
    }
    // Two images on one host: the failure is reused, not a second run (or a second timeout).
    let images = [format!("{host}/acme/a:1"), format!("{host}/acme/a:2")];
    let out = login.resolve(&host, &images).await;
    assert!(!out.status.success(), "{}", text(&out));
    if body.is_some() {
        assert_eq!(login.calls(name).len(), 1, "{name} ran more than once");
    }
    let all = text(&out);
    assert!(
        all.contains(&format!("docker-credential-{name} for {host}: ")),
        "the error names neither helper nor host:\n{all}"
    );
    all
}

#[tokio::test]
async fn failing_helpers_name_themselves_and_the_host_and_never_show_secrets() {
    let registry = TestRegistry::start(Mode::htpasswd("alice", SECRET)).await;
    registry.push_image("acme/a", "1", "a").await;
    registry.push_image("acme/a", "2", "a2").await;

    let missing = failing(&registry, "absent", None).await;
    assert!(missing.contains("not found on PATH"), "{missing}");

    let exits = failing(
        &registry,
        "fails",
        Some(&format!(
            "echo '{SECRET}'; echo 'token {SECRET} is expired' >&2; echo second >&2; exit 1"
        )),
    )
    .await;
    assert!(
        exits.contains("exited with status 1: token <redacted> is expired"),
        "{exits}"
    );
    assert!(
        !exits.contains(SECRET) && !exits.contains("second"),
        "{exits}"
    );

    let garbage = failing(
        &registry,
        "garbage",
        Some(&format!("echo 'Username={SECRET}'")),
    )
    .await;
    assert!(garbage.contains("not credential helper JSON"), "{garbage}");
    assert!(!garbage.contains(SECRET), "{garbage}");
}

#[tokio::test]
async fn a_hung_helper_is_stopped_at_the_timeout() {
    let registry = TestRegistry::start(Mode::htpasswd("alice", SECRET)).await;
    registry.push_image("acme/a", "1", "a").await;
    registry.push_image("acme/a", "2", "a2").await;
    let started = Instant::now();

    let hung = failing(&registry, "hangs", Some("exec sleep 60")).await;

    assert!(hung.contains("gave no answer within 10s"), "{hung}");
    let took = started.elapsed();
    assert!(took < Duration::from_secs(40), "took {took:?}");
}

#[test]
fn the_deploy_example_patches_the_controller_with_helper_environment() {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let overlay = tempfile::tempdir().unwrap();
    std::fs::copy(
        repo.join("deploy/credential-helpers.example.yaml"),
        overlay.path().join("credential-helpers.yaml"),
    )
    .unwrap();
    // kustomize takes only relative resource paths: up to `/`, then down to deploy/.
    let up = "../".repeat(overlay.path().components().count() - 1);
    let base = repo.join("deploy");
    let base = base.strip_prefix("/").unwrap();
    std::fs::write(
        overlay.path().join("kustomization.yaml"),
        format!(
            "resources: [{up}{}]\npatches:\n  - path: credential-helpers.yaml\n",
            base.display()
        ),
    )
    .unwrap();

    let objects = support::kubectl::kustomize(overlay.path()).unwrap_or_else(|e| panic!("{e}"));

    let deployment = objects
        .iter()
        .find(|o| o["kind"].as_str() == Some("Deployment"))
        .expect("a Deployment");
    let env = &deployment["spec"]["template"]["spec"]["containers"][0]["env"];
    let names: Vec<&str> = env
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(|e| e["name"].as_str())
        .collect();
    for wanted in [
        "DOCKER_CONFIG",
        "GIT_TOKEN",
        "AWS_REGION",
        "AZURE_CLIENT_SECRET",
    ] {
        assert!(names.contains(&wanted), "{wanted} missing from {names:?}");
    }
}
