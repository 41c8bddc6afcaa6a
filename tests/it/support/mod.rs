//! Shared support for tagpin's integration tests.
//!
//! Declared once in `tests/it/main.rs`; each test module says `use crate::support;`
//! and uses `support::registry::*` and the like. Some helpers exist for tests to come
//! (or for `examples/bench_plan.rs`, which includes `registry.rs` by path), so unused
//! ones are allowed here.
#![allow(dead_code)]

pub mod azure_devops;
pub mod bitbucket;
pub mod bitbucket_server;
pub mod browser;
pub mod git;
pub mod gitea;
pub mod github;
pub mod gitlab;
pub mod hostile;
pub mod http_fake;
pub mod hydrator;
pub mod kube;
pub mod kubectl;
pub mod manifests;
pub mod mirror_damage;
pub mod receiver;
pub mod registry;
pub mod signing;
pub mod workloads;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Polls `check` every 200 ms for up to 60 s; false, with a line naming `what`, if it never held
/// (for tests that gather more to say before they fail).
pub async fn eventually_or(what: &str, mut check: impl FnMut() -> bool) -> bool {
    eventually_async_or(what, || std::future::ready(check())).await
}

/// [`eventually_or`], failing the test when `check` never holds.
pub async fn eventually(what: &str, check: impl FnMut() -> bool) {
    assert!(
        eventually_or(what, check).await,
        "timed out waiting for {what}"
    );
}

/// [`eventually_or`] for a `check` that awaits (an HTTP probe, a `/metrics` scrape).
pub async fn eventually_async_or<F, Fut>(what: &str, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !check().await {
        if std::time::Instant::now() >= deadline {
            eprintln!("timed out waiting for {what}");
            return false;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    true
}

/// [`eventually_async_or`], failing the test when `check` never holds.
pub async fn eventually_async<F, Fut>(what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    assert!(
        eventually_async_or(what, check).await,
        "timed out waiting for {what}"
    );
}

/// A real-world capture from `tests/fixtures/shared` (verbatim copies of the team's shared
/// fixtures, kept in the repository so tests read nothing outside it). Panics if it is missing:
/// a test whose input is gone fails, it never passes by skipping.
pub fn shared_fixture(name: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/shared")
        .join(name);
    assert!(
        path.is_file(),
        "{} is missing: the real captures are part of the repository",
        path.display()
    );
    path
}

/// The repository mirror tagpin keeps for `config` in `cache_dir`, opened with the
/// configuration's Git credentials, as a command would open it.
pub fn mirror(config: &tagpin::config::Config, cache_dir: &Path) -> tagpin::git::Mirror {
    let credentials = tagpin::sync::git_credentials(&config.repository.auth).unwrap();
    let mut mirror =
        tagpin::git::Mirror::open(cache_dir, &config.repository.url, credentials).unwrap();
    if let Some(signer) = tagpin::sync::commit_signer(&config.author).unwrap() {
        mirror.sign_with(signer);
    }
    mirror
}

/// A process's exit status, stdout and stderr, for assertion messages.
pub fn output_text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `time` as RFC 3339 UTC (`2011-01-26T19:01:12Z`), as GitHub and Kubernetes write times.
pub fn rfc3339(time: SystemTime) -> String {
    let secs = time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let whole = k8s_openapi::jiff::Timestamp::from_second(secs as i64).unwrap();
    whole.to_string()
}

/// Sends SIGTERM to a started `tagpin` process and waits up to 60 s (more than its grace
/// period) for it to exit; returns its status and what it wrote. Panics saying `what` did not
/// stop if it is still running.
pub async fn terminate(child: tokio::process::Child, what: &str) -> Output {
    let pid = child.id().expect("running");
    std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{what} stops within its grace period"))
        .unwrap()
}
