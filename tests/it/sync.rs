//! `tagpin sync` in commit mode, run as the real binary against a real registry and real Git
//! remotes: bare repositories over file://, git:// (`git daemon`) and smart HTTP
//! (`git http-backend` behind a Basic-auth server).

use crate::support;

use support::output_text as text;

use std::path::{Path, PathBuf};
use std::process::Output;

use support::git::{BareRepo, GitDaemon, GitHttpServer, HttpAuth};
use support::registry::{Mode, TestRegistry};

const TOKEN: &str = "tok-3f9a1c77e2";

pub(crate) fn deployment(name: &str, image: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\nspec:\n  template:\n    spec:\n      containers:\n      - name: app\n        image: {image}  # the app\n"
    )
}

pub(crate) struct Run {
    dir: tempfile::TempDir,
}

impl Run {
    pub(crate) fn new() -> Run {
        Run {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// The cache directory `sync(config, cache)` uses.
    pub(crate) fn cache_dir(&self, cache: &str) -> PathBuf {
        self.dir.path().join(cache)
    }

    /// Writes `tagpin.yaml` with the given repository URL and extra top-level YAML.
    pub(crate) fn config(&self, url: &str, registry_host: &str, extra: &str) -> PathBuf {
        let path = self.dir.path().join("tagpin.yaml");
        std::fs::write(
            &path,
            format!(
                "repository:\n  url: {url}\n  branch: main\n{extra}\nauthor: {{name: tagpin-bot, email: bot@example.com}}\npaths: [apps]\nregistries:\n  insecure: [\"{registry_host}\"]\n"
            ),
        )
        .unwrap();
        path
    }

    pub(crate) fn sync(&self, config: &Path, cache: &str) -> Output {
        std::process::Command::new(env!("CARGO_BIN_EXE_tagpin"))
            .args(["sync", "--config"])
            .arg(config)
            .arg("--cache-dir")
            .arg(self.dir.path().join(cache))
            .env("HOME", self.dir.path())
            .env("GIT_TOKEN", TOKEN)
            .env_remove("DOCKER_CONFIG")
            .env_remove("RUST_LOG")
            .output()
            .expect("run tagpin")
    }
}

#[tokio::test]
async fn commit_mode_lands_one_commit_then_nothing_then_a_one_line_diff() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let web1 = registry.push_image("acme/web", "1.0", "one").await;
    let api = registry.push_image("acme/api", "2", "api").await;
    let web_yaml = deployment("web", &format!("{host}/acme/web:1.0"));
    let api_yaml = deployment("api", &format!("{host}/acme/api:2"));
    let repo = BareRepo::create(&[
        ("apps/web.yaml", &web_yaml),
        ("apps/api.yaml", &api_yaml),
        ("README.md", "# gitops\n"),
    ]);
    let run = Run::new();
    let config = run.config(&repo.file_url(), &host, "");
    let before = repo.log("main").len();

    let first = run.sync(&config, "cache");
    assert_eq!(first.status.code(), Some(0), "{}", text(&first));
    let log = repo.log("main");
    assert_eq!(log.len(), before + 1, "exactly one commit");
    assert!(
        log[0].1.starts_with("Pin 2 image(s) to digests on main"),
        "{:?}",
        log[0]
    );
    assert_eq!(
        repo.read("main", "apps/web.yaml").unwrap(),
        deployment("web", &format!("{host}/acme/web:1.0@{}", web1.manifest))
    );
    assert_eq!(
        repo.read("main", "apps/api.yaml").unwrap(),
        deployment("api", &format!("{host}/acme/api:2@{}", api.manifest))
    );
    assert_eq!(repo.read("main", "README.md").unwrap(), "# gitops\n");

    let second = run.sync(&config, "cache");
    assert_eq!(second.status.code(), Some(0), "{}", text(&second));
    assert_eq!(repo.log("main").len(), before + 1, "no second commit");
    assert!(
        text(&second).contains("nothing to pin"),
        "{}",
        text(&second)
    );

    let web2 = registry.push_image("acme/web", "1.0", "two").await;
    let third = run.sync(&config, "cache");
    assert_eq!(third.status.code(), Some(0), "{}", text(&third));
    assert_eq!(repo.log("main").len(), before + 2);
    let diff = support::git::git_ok(
        repo.path(),
        &["diff", "--unified=0", "main~1", "main", "--", "apps"],
    );
    let changed: Vec<&str> = diff
        .lines()
        .filter(|l| {
            (l.starts_with('-') || l.starts_with('+'))
                && !l.starts_with("---")
                && !l.starts_with("+++")
        })
        .collect();
    assert_eq!(
        changed,
        vec![
            format!(
                "-        image: {host}/acme/web:1.0@{}  # the app",
                web1.manifest
            ),
            format!(
                "+        image: {host}/acme/web:1.0@{}  # the app",
                web2.manifest
            ),
        ]
    );
}

#[tokio::test]
async fn a_push_race_is_retried_on_top_and_the_other_commit_survives() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let web = registry.push_image("acme/web", "1.0", "one").await;
    let base = tempfile::tempdir().unwrap();
    let repo = BareRepo::create_in(
        base.path(),
        "gitops.git",
        &[(
            "apps/web.yaml",
            &deployment("web", &format!("{host}/acme/web:1.0")),
        )],
    );
    let server = GitHttpServer::start(base.path(), HttpAuth::basic("bot", TOKEN));
    let other = repo.clone();
    server.before_next_push_advertisement(move || {
        other.commit_as_other_writer(
            "main",
            &[("apps/notes.txt", "hand-written\n")],
            "A human change",
        );
    });
    let run = Run::new();
    let config = run.config(
        &server.url("gitops.git"),
        &host,
        "  auth: {token_env: GIT_TOKEN, username: bot}",
    );

    let out = run.sync(&config, "cache");

    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let log = repo.log("main");
    assert!(log[0].1.starts_with("Pin 1 image(s)"), "{log:?}");
    assert_eq!(log[1].1, "A human change", "{log:?}");
    assert_eq!(
        repo.read("main", "apps/notes.txt").unwrap(),
        "hand-written\n"
    );
    assert!(repo
        .read("main", "apps/web.yaml")
        .unwrap()
        .contains(&web.manifest));
    assert!(!text(&out).contains(TOKEN));
    assert!(
        server
            .requests()
            .iter()
            .filter(|r| r.is_receive_pack())
            .count()
            >= 1
    );
}

#[tokio::test]
async fn git_daemon_remotes_work_in_commit_mode() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let web = registry.push_image("acme/web", "1.0", "one").await;
    let base = tempfile::tempdir().unwrap();
    let repo = BareRepo::create_in(
        base.path(),
        "gitops.git",
        &[(
            "apps/web.yaml",
            &deployment("web", &format!("{host}/acme/web:1.0")),
        )],
    );
    let daemon = GitDaemon::start(base.path());
    let run = Run::new();
    let config = run.config(&daemon.url("gitops.git"), &host, "");

    let out = run.sync(&config, "cache");

    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(repo
        .read("main", "apps/web.yaml")
        .unwrap()
        .contains(&web.manifest));
}

#[tokio::test]
async fn a_protected_branch_is_a_clear_error_and_nothing_changes() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    registry.push_image("acme/web", "1.0", "one").await;
    let base = tempfile::tempdir().unwrap();
    let repo = BareRepo::create_in(
        base.path(),
        "gitops.git",
        &[(
            "apps/web.yaml",
            &deployment("web", &format!("{host}/acme/web:1.0")),
        )],
    );
    repo.protect("main");
    // Hooks run in receive-pack, so protection needs a server (as on any forge).
    let server = GitHttpServer::start(base.path(), HttpAuth::None);
    let head = repo.head("main");
    let run = Run::new();
    let config = run.config(&server.url("gitops.git"), &host, "");

    let out = run.sync(&config, "cache");

    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("push to main was rejected"),
        "{}",
        text(&out)
    );
    assert_eq!(repo.head("main"), head);
}

#[tokio::test]
async fn a_wrong_token_fails_without_showing_it() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let base = tempfile::tempdir().unwrap();
    let repo = BareRepo::create_in(
        base.path(),
        "gitops.git",
        &[(
            "apps/web.yaml",
            &deployment("web", &format!("{host}/acme/web:1.0")),
        )],
    );
    let server = GitHttpServer::start(base.path(), HttpAuth::basic("bot", "the-right-token"));
    let head = repo.head("main");
    let run = Run::new();
    let config = run.config(
        &server.url("gitops.git"),
        &host,
        "  auth: {token_env: GIT_TOKEN, username: bot}",
    );

    let out = run.sync(&config, "cache");

    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("authentication failed"),
        "{}",
        text(&out)
    );
    assert!(!text(&out).contains(TOKEN), "{}", text(&out));
    assert_eq!(repo.head("main"), head);
}

#[tokio::test]
async fn a_missing_branch_and_an_unreachable_remote_are_named() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let repo = BareRepo::create(&[("apps/x.yaml", "a: 1\n")]);
    let run = Run::new();
    let config = run.config(&repo.file_url(), &host, "");
    let text_with_branch = std::fs::read_to_string(&config)
        .unwrap()
        .replace("branch: main", "branch: release");
    std::fs::write(&config, text_with_branch).unwrap();
    let out = run.sync(&config, "cache");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("branch \"release\" does not exist"),
        "{}",
        text(&out)
    );

    let port = support::git::free_port();
    let dead = format!("http://127.0.0.1:{port}/gitops.git");
    let config = run.config(&dead, &host, "");
    let out = run.sync(&config, "cache2");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains(&format!("cannot fetch from {dead}")),
        "{}",
        text(&out)
    );
}

#[test]
fn a_malformed_config_lists_every_problem_with_its_field_path() {
    let run = Run::new();
    let path = run.dir.path().join("tagpin.yaml");
    std::fs::write(
        &path,
        "repository: {branch: main}\nmode: pull-request\npull_request: {grouping: sometimes}\n",
    )
    .unwrap();
    let out = run.sync(&path, "cache");
    assert_eq!(out.status.code(), Some(2));
    let t = text(&out);
    for expected in [
        "repository.url: is required",
        "pull_request.grouping: expected one of single, per-image",
        "forge: is required when mode is pull-request",
    ] {
        assert!(t.contains(expected), "missing {expected:?} in {t}");
    }
}

#[tokio::test]
async fn two_tagpin_processes_racing_on_one_branch_both_land_their_commits() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let a = registry.push_image("acme/a", "1", "a").await;
    let b = registry.push_image("acme/b", "1", "b").await;
    let repo = BareRepo::create(&[
        (
            "apps/a/a.yaml",
            &deployment("a", &format!("{host}/acme/a:1")),
        ),
        (
            "apps/b/b.yaml",
            &deployment("b", &format!("{host}/acme/b:1")),
        ),
    ]);
    let run_a = Run::new();
    let run_b = Run::new();
    let config_a = run_a.config(&repo.file_url(), &host, "");
    let config_b = run_b.config(&repo.file_url(), &host, "");
    for (config, dir) in [(&config_a, "apps/a"), (&config_b, "apps/b")] {
        let t = std::fs::read_to_string(config)
            .unwrap()
            .replace("paths: [apps]", &format!("paths: [{dir}]"));
        std::fs::write(config, t).unwrap();
    }

    let (out_a, out_b) = std::thread::scope(|s| {
        let ta = s.spawn(|| run_a.sync(&config_a, "cache"));
        let tb = s.spawn(|| run_b.sync(&config_b, "cache"));
        (ta.join().unwrap(), tb.join().unwrap())
    });

    assert_eq!(out_a.status.code(), Some(0), "{}", text(&out_a));
    assert_eq!(out_b.status.code(), Some(0), "{}", text(&out_b));
    assert!(repo
        .read("main", "apps/a/a.yaml")
        .unwrap()
        .contains(&a.manifest));
    assert!(repo
        .read("main", "apps/b/b.yaml")
        .unwrap()
        .contains(&b.manifest));
    let pins = repo
        .log("main")
        .iter()
        .filter(|(_, s)| s.starts_with("Pin "))
        .count();
    assert_eq!(pins, 2);
}

/// The one mirror a pass keeps under `cache` (`mirror-<hash>.git`).
fn mirror_in(cache: &Path) -> PathBuf {
    let mirrors: Vec<PathBuf> = std::fs::read_dir(cache)
        .unwrap_or_else(|e| panic!("{}: {e}", cache.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "git"))
        .collect();
    assert_eq!(mirrors.len(), 1, "{mirrors:?}");
    mirrors[0].clone()
}

fn mode_of(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// A registry with `acme/web:1.0`, a bare repository pinning nothing yet, and a config for it.
async fn one_image_world() -> (TestRegistry, BareRepo, Run, PathBuf) {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    registry.push_image("acme/web", "1.0", "one").await;
    let repo = BareRepo::create(&[(
        "apps/web.yaml",
        &deployment("web", &format!("{host}/acme/web:1.0")),
    )]);
    let run = Run::new();
    let config = run.config(&repo.file_url(), &host, "");
    (registry, repo, run, config)
}

#[tokio::test]
async fn the_mirror_cache_is_private_to_its_user() {
    let (_registry, _repo, run, config) = one_image_world().await;
    // Under the usual umask, whatever the test runner's is: 0755 directories unless tagpin
    // asks for less.
    let sync_umask_022 = |cache: &Path| {
        std::process::Command::new("sh")
            .arg("-c")
            .arg("umask 022 && exec \"$0\" \"$@\"")
            .arg(env!("CARGO_BIN_EXE_tagpin"))
            .args(["sync", "--config"])
            .arg(&config)
            .arg("--cache-dir")
            .arg(cache)
            .env("HOME", run.dir.path())
            .env_remove("DOCKER_CONFIG")
            .env_remove("RUST_LOG")
            .output()
            .expect("run tagpin")
    };

    // A cache directory tagpin creates, and the mirror in it, are the user's alone.
    let fresh = run.dir.path().join("new/cache");
    let out = sync_umask_022(&fresh);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(mode_of(&fresh), 0o700);
    let mirror = mirror_in(&fresh);
    assert_eq!(mode_of(&mirror), 0o700);
    for entry in std::fs::read_dir(&fresh).unwrap() {
        let path = entry.unwrap().path();
        assert_eq!(mode_of(&path) & 0o077, 0, "{}", path.display());
    }

    // A mirror an older tagpin left readable by others is tightened at the next pass.
    std::fs::set_permissions(&mirror, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = sync_umask_022(&fresh);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(mode_of(&mirror), 0o700);

    // An existing cache directory others can read (it may be shared, as /var/cache is) is left
    // as it is, with a warning naming it; the mirror inside is private all the same.
    let shared = run.dir.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = sync_umask_022(&shared);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("{}", shared.display())) && stderr.contains("0755"),
        "{}",
        text(&out)
    );
    assert_eq!(mode_of(&shared), 0o755);
    assert_eq!(mode_of(&mirror_in(&shared)), 0o700);
}

#[tokio::test]
async fn lock_files_left_by_a_killed_fetch_are_removed_and_the_pass_goes_on() {
    let (registry, repo, run, config) = one_image_world().await;
    let first = run.sync(&config, "cache");
    assert_eq!(first.status.code(), Some(0), "{}", text(&first));
    let mirror = mirror_in(&run.dir.path().join("cache"));
    // What a fetch killed half-way leaves: the lock of each ref it was updating, of the
    // packed refs, FETCH_HEAD and config, and (from git itself) index and shallow.
    let locks = [
        "refs/remotes/origin/main.lock",
        "refs/heads/x.lock",
        "packed-refs.lock",
        "FETCH_HEAD.lock",
        "config.lock",
        "index.lock",
        "shallow.lock",
    ];
    for lock in locks {
        let path = mirror.join(lock);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "0123456789012345678901234567890123456789\n").unwrap();
    }
    // The next pass has to move the tracking ref the killed fetch was updating.
    let moved = registry.push_image("acme/web", "1.0", "two").await;

    let out = run.sync(&config, "cache");

    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(repo
        .read("main", "apps/web.yaml")
        .unwrap()
        .contains(&moved.manifest));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("stale lock") && stderr.contains("refs/remotes/origin/main.lock"),
        "{}",
        text(&out)
    );
    for lock in locks {
        assert!(!mirror.join(lock).exists(), "{lock} is still there");
    }
}

#[tokio::test]
async fn a_mirror_that_is_no_longer_a_repository_is_recreated() {
    let (registry, repo, run, config) = one_image_world().await;
    let first = run.sync(&config, "cache");
    assert_eq!(first.status.code(), Some(0), "{}", text(&first));
    let mirror = mirror_in(&run.dir.path().join("cache"));
    // A disk that filled up mid-write, or a half-copied volume: no object database, no refs.
    std::fs::remove_dir_all(mirror.join("objects")).unwrap();
    std::fs::remove_dir_all(mirror.join("refs")).unwrap();
    let moved = registry.push_image("acme/web", "1.0", "two").await;

    let out = run.sync(&config, "cache");

    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("re-creat"),
        "{}",
        text(&out)
    );
    assert!(repo
        .read("main", "apps/web.yaml")
        .unwrap()
        .contains(&moved.manifest));
}
