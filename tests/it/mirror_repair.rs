//! A damaged Git mirror in the cache directory repairs itself, in `tagpin sync`, `tagpin run`
//! and `tagpin operator` (`promote.rs` has `promote`'s): after one good pass, each damage a
//! node crash, a full disk or an interrupted fetch leaves (`support::mirror_damage`) is found
//! by the next pass, which moves the mirror aside, clones it again and pins with the right
//! commit and no other. A remote that is itself damaged is named as such, not the cache.
//!
//! Before, each of these failed every pass with exit 2 until a person deleted the cache.

use crate::support;

use std::os::unix::fs::MetadataExt as _;
use std::path::Path;

use serde_json::json;
use support::git::{git_ok, BareRepo, GitHttpServer, HttpAuth};
use support::manifests::deployment;
use support::mirror_damage::{damage, mirror_in, moved_aside, Damage};
use support::output_text as text;
use support::registry::{ImageDigests, Mode, TestRegistry};

use crate::operator::{cluster, pinned_repository, spec, Operator, NS};
use crate::run::{commit_mode_config, Controller};
use crate::sync::Run;

/// A manifest without an image: read by every pass and never rewritten, so its blob stays in
/// the pack of the first fetch.
const NOTES: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\ndata:\n  a: b\n";

/// A registry with `acme/web:1.0`, and a repository naming it by tag in `apps/web.yaml`, with
/// `apps/notes.yaml` (no image) and a `README.md` outside the configured paths.
async fn web_world() -> (TestRegistry, String, BareRepo) {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    registry.push_image("acme/web", "1.0", "one").await;
    let repo = BareRepo::create(&[
        (
            "apps/web.yaml",
            &deployment("web", &format!("{host}/acme/web:1.0")),
        ),
        ("apps/notes.yaml", NOTES),
        ("README.md", "# gitops\n"),
    ]);
    (registry, host, repo)
}

/// `main` moved by exactly one commit since `before` (its length), which pins `acme/web` to
/// `pushed` and changes `apps/web.yaml` alone: the right commit, and no other.
fn pinned_by_one_commit(repo: &BareRepo, host: &str, before: usize, pushed: &ImageDigests) {
    let log = repo.log("main");
    assert_eq!(log.len(), before + 1, "exactly one commit: {log:?}");
    assert_eq!(
        repo.read("main", "apps/web.yaml").unwrap(),
        deployment("web", &format!("{host}/acme/web:1.0@{}", pushed.manifest))
    );
    let changed = git_ok(repo.path(), &["diff", "--name-only", "main~1", "main"]);
    assert_eq!(changed, "apps/web.yaml");
    assert_eq!(repo.read("main", "apps/notes.yaml").unwrap(), NOTES);
    assert_eq!(repo.read("main", "README.md").unwrap(), "# gitops\n");
}

/// After one good `sync`, `how` damages the mirror; the next `sync` repairs it, pins the new
/// digest with one commit and exits 0; the one after finds nothing to do, and repairs nothing.
async fn sync_repairs_within_the_pass(how: Damage) {
    let (registry, host, repo) = web_world().await;
    let run = Run::new();
    let config = run.config(&repo.file_url(), &host, "");
    let first = run.sync(&config, "cache");
    assert_eq!(first.status.code(), Some(0), "{}", text(&first));
    let mirror = mirror_in(&run.cache_dir("cache"));
    damage(&mirror, &repo, how);
    let pushed = registry.push_image("acme/web", "1.0", "two").await;
    let before = repo.log("main").len();

    let second = run.sync(&config, "cache");

    assert_eq!(second.status.code(), Some(0), "{how:?}: {}", text(&second));
    pinned_by_one_commit(&repo, &host, before, &pushed);
    let log = String::from_utf8_lossy(&second.stderr);
    assert!(
        log.contains(&mirror.display().to_string()) && log.contains("moved it aside"),
        "{how:?}: the log says what was found and where: {log}"
    );
    assert!(moved_aside(&mirror).is_dir(), "{how:?}");
    let third = run.sync(&config, "cache");
    assert_eq!(third.status.code(), Some(0), "{}", text(&third));
    assert!(text(&third).contains("nothing to pin"), "{}", text(&third));
    assert!(!text(&third).contains("damaged"), "{}", text(&third));
    assert_eq!(repo.log("main").len(), before + 1);
}

#[tokio::test]
async fn a_truncated_pack_in_the_mirror_is_repaired_within_the_sync_pass() {
    sync_repairs_within_the_pass(Damage::TruncatedPack).await;
}

#[tokio::test]
async fn a_loose_object_missing_from_the_mirror_is_repaired_within_the_sync_pass() {
    sync_repairs_within_the_pass(Damage::LooseObjectRemoved).await;
}

#[tokio::test]
async fn a_garbage_loose_ref_in_the_mirror_is_repaired_within_the_sync_pass() {
    sync_repairs_within_the_pass(Damage::LooseRefGarbage).await;
}

#[tokio::test]
async fn a_missing_pack_index_in_the_mirror_is_repaired_within_the_sync_pass() {
    sync_repairs_within_the_pass(Damage::PackIndexRemoved).await;
}

#[tokio::test]
async fn a_broken_mirror_config_is_repaired_within_the_sync_pass() {
    sync_repairs_within_the_pass(Damage::BrokenConfig).await;
}

#[tokio::test]
async fn a_remote_that_is_itself_damaged_is_named_in_the_error_and_never_blamed_on_the_cache() {
    let (_registry, host, repo) = web_world().await;
    // The remote lost the object of apps/web.yaml (pushed loose, as a small push leaves it).
    let blob = git_ok(repo.path(), &["rev-parse", "main:apps/web.yaml"]);
    std::fs::remove_file(
        repo.path()
            .join("objects")
            .join(&blob[..2])
            .join(&blob[2..]),
    )
    .unwrap();
    let server = GitHttpServer::start(repo.base_dir(), HttpAuth::None);
    let before = repo.log("main").len();

    for url in [repo.file_url(), server.url(repo.name())] {
        let run = Run::new();
        let config = run.config(&url, &host, "");
        for pass in 0..2 {
            let out = run.sync(&config, "cache");

            assert_eq!(out.status.code(), Some(2), "{url}: {}", text(&out));
            let stderr = String::from_utf8_lossy(&out.stderr);
            let error = stderr.lines().find(|l| l.starts_with("error: ")).unwrap();
            assert!(error.contains(&url), "{url}, pass {pass}: {error}");
            let cache = run.cache_dir("cache").display().to_string();
            assert!(!error.contains(&cache), "{url}, pass {pass}: {error}");
            assert!(!stderr.contains("moved it aside"), "{url}: {stderr}");
        }
        if url.starts_with("file://") {
            assert!(
                text(&run.sync(&config, "cache"))
                    .contains("the remote itself is damaged or incomplete"),
                "{url}"
            );
        }
    }
    assert_eq!(repo.log("main").len(), before, "nothing written");
}

/// The value of the unlabelled series `name` in a `/metrics` page.
fn sample(metrics: &str, name: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse().ok())
}

#[tokio::test]
async fn the_controller_repairs_a_damaged_mirror_in_its_first_pass_and_while_it_runs() {
    let (registry, host, repo) = web_world().await;
    let dir = tempfile::tempdir().unwrap();
    let config = commit_mode_config(dir.path(), &repo, &host);
    let hourly = ["--interval", "1h"];
    let controller = Controller::start_with_args(dir.path(), &config, &[], &hourly).await;
    let (code, log) = controller.stop().await;
    assert_eq!(code, Some(0), "{log}");
    assert!(repo
        .read("main", "apps/web.yaml")
        .unwrap()
        .contains("@sha256:"));
    let mirror = mirror_in(&dir.path().join("cache"));

    // Damage left by a crash: the controller's first pass after the restart repairs it (it is
    // ready once that pass is over) and pins what was pushed meanwhile.
    for (round, how) in Damage::OBJECTS_AND_REFS.into_iter().enumerate() {
        damage(&mirror, &repo, how);
        let pushed = registry
            .push_image("acme/web", "1.0", &format!("round {round}"))
            .await;
        let before = repo.log("main").len();

        let controller = Controller::start_with_args(dir.path(), &config, &[], &hourly).await;

        pinned_by_one_commit(&repo, &host, before, &pushed);
        let metrics = controller.metrics().await;
        assert_eq!(
            sample(&metrics, "tagpin_mirror_repairs_total"),
            Some(1.0),
            "{how:?}: {metrics}"
        );
        assert_eq!(
            sample(
                &metrics,
                "tagpin_passes_total{outcome=\"ok\",trigger=\"schedule\"}"
            ),
            Some(1.0),
            "{how:?}: {metrics}"
        );
        let (code, log) = controller.stop().await;
        assert_eq!(code, Some(0), "{log}");
        assert!(log.contains("moved it aside"), "{how:?}: {log}");
    }

    // Damage while it runs, a pass every 2 s: the next pass repairs it, and none fails.
    let controller =
        Controller::start_with_args(dir.path(), &config, &[], &["--interval", "2s"]).await;
    damage(&mirror, &repo, Damage::LooseRefGarbage);
    let pushed = registry
        .push_image("acme/web", "1.0", "while running")
        .await;
    let before = repo.log("main").len();
    support::eventually("the running controller to pin through a repair", || {
        repo.read("main", "apps/web.yaml")
            .unwrap()
            .contains(&pushed.manifest)
    })
    .await;
    pinned_by_one_commit(&repo, &host, before, &pushed);
    let metrics = controller.metrics().await;
    assert_eq!(
        sample(&metrics, "tagpin_mirror_repairs_total"),
        Some(1.0),
        "{metrics}"
    );
    assert!(
        !metrics.contains("tagpin_passes_total{outcome=\"error\""),
        "{metrics}"
    );
    let (code, log) = controller.stop().await;
    assert_eq!(code, Some(0), "{log}");
}

/// Device and inode of a directory: the same directory, not one cloned again in its place.
fn identity(dir: &Path) -> (u64, u64) {
    let meta = std::fs::metadata(dir).unwrap();
    (meta.dev(), meta.ino())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_operator_repairs_the_one_damaged_mirror_and_leaves_the_other_objects_alone() {
    let (registry, host, repo_web) = web_world().await;
    let api = registry.push_image("acme/api", "1", "api").await;
    let repo_api = BareRepo::create(&[(
        "apps/api.yaml",
        &deployment("api", &format!("{host}/acme/api:1")),
    )]);
    let kube = cluster().await;
    let dir = tempfile::tempdir().unwrap();
    for (name, repo) in [("web", &repo_web), ("api", &repo_api)] {
        kube.apply(pinned_repository(
            name,
            json!({}),
            spec(&repo.file_url(), &host),
        ));
    }
    let operator = Operator::start(dir.path(), &kube, "op", &[]).await;
    support::eventually("both objects pinned", || {
        repo_api
            .read("main", "apps/api.yaml")
            .unwrap()
            .contains(&api.manifest)
            && repo_web
                .read("main", "apps/web.yaml")
                .unwrap()
                .contains("@sha256:")
    })
    .await;
    operator.stop().await;
    let cache = dir.path().join("cache-op").join(NS);
    let (web, api_mirror) = (mirror_in(&cache.join("web")), mirror_in(&cache.join("api")));
    let api_before = (identity(&api_mirror), repo_api.log("main").len());

    for (round, how) in Damage::OBJECTS_AND_REFS.into_iter().enumerate() {
        damage(&web, &repo_web, how);
        let pushed = registry
            .push_image("acme/web", "1.0", &format!("round {round}"))
            .await;
        let before = repo_web.log("main").len();

        let operator = Operator::start(dir.path(), &kube, "op", &[]).await;
        support::eventually(&format!("{how:?}: web pinned through a repair"), || {
            repo_web
                .read("main", "apps/web.yaml")
                .unwrap()
                .contains(&pushed.manifest)
        })
        .await;
        support::eventually_async(&format!("{how:?}: the repair counted"), || async {
            operator.metric("tagpin_mirror_repairs_total").await == Some(1)
        })
        .await;
        let log = operator.stop().await;

        pinned_by_one_commit(&repo_web, &host, before, &pushed);
        assert!(log.contains(&web.display().to_string()), "{how:?}: {log}");
        assert!(moved_aside(&web).is_dir(), "{how:?}");
        assert_eq!(
            (identity(&api_mirror), repo_api.log("main").len()),
            api_before,
            "{how:?}: the other object's mirror is untouched"
        );
        assert!(!moved_aside(&api_mirror).exists());
    }
}
