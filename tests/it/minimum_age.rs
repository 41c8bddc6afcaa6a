//! A minimum age for a new digest (`images.minimum_age`, issue #41): `tagpin sync` and `plan`
//! as the real binary, and a sync pass through the library with its clock moved ahead, against
//! the real `docker-registry`, with images the tests push: a config blob whose `created` the
//! test chooses, an index annotated `org.opencontainers.image.created`, and an image that says
//! neither (its age counted from tagpin's first sighting, kept in the cache directory).

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use support::git::BareRepo;
use support::output_text as text;
use support::registry::{Mode, TestRegistry};

use crate::sync::deployment;

const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";

fn now() -> i64 {
    tagpin::clock::unix_now()
}

/// Pushes a linux/amd64 image under `tag` whose config says `created` (none when `None`),
/// unique by `seed`; returns its manifest digest.
pub(crate) async fn push_created(
    registry: &TestRegistry,
    repo: &str,
    tag: &str,
    seed: &str,
    created: Option<i64>,
) -> String {
    let mut config = serde_json::json!({
        "architecture": "amd64", "os": "linux", "config": {"Env": [format!("SEED={seed}")]},
        "rootfs": {"type": "layers", "diff_ids": []},
    });
    if let Some(at) = created {
        config["created"] = tagpin::age::rfc3339(at).into();
    }
    let config = serde_json::to_vec(&config).unwrap();
    let config_digest = registry.push_blob(repo, &config).await;
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "digest": config_digest, "size": config.len()},
        "layers": [],
    }))
    .unwrap();
    registry
        .push_manifest(repo, tag, OCI_MANIFEST, &manifest)
        .await
}

/// Pushes an index under `tag` listing one image without `created`, the index annotated as
/// built at `annotated`; returns the index digest.
async fn push_annotated_index(
    registry: &TestRegistry,
    repo: &str,
    tag: &str,
    seed: &str,
    annotated: i64,
) -> String {
    let child = push_created(registry, repo, &format!("{tag}-amd64"), seed, None).await;
    let size = registry.manifest_bytes(repo, &child).await.len();
    let index = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_INDEX,
        "manifests": [{"mediaType": OCI_MANIFEST, "digest": child, "size": size,
            "platform": {"os": "linux", "architecture": "amd64"}}],
        "annotations": {"org.opencontainers.image.created": tagpin::age::rfc3339(annotated)},
    }))
    .unwrap();
    registry.push_manifest(repo, tag, OCI_INDEX, &index).await
}

struct Setup {
    dir: tempfile::TempDir,
}

impl Setup {
    fn new() -> Setup {
        Setup {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn cache(&self) -> PathBuf {
        self.dir.path().join("cache")
    }

    /// `tagpin.yaml` holding `<host>/acme/*` digests until they are an hour old.
    fn config(&self, url: &str, host: &str) -> PathBuf {
        let path = self.dir.path().join("tagpin.yaml");
        std::fs::write(
            &path,
            format!(
                "repository:\n  url: {url}\n  branch: main\n  cache_dir: {}\nauthor: {{name: tagpin-bot, email: bot@example.com}}\npaths: [apps]\nregistries:\n  insecure: [\"{host}\"]\nimages:\n  minimum_age:\n  - {{match: '{host}/acme/*', age: 1h}}\n",
                self.cache().display()
            ),
        )
        .unwrap();
        path
    }

    /// `tagpin <command> --output json`, in a fresh process.
    fn tagpin(&self, args: &[&str], config: &Path) -> Output {
        std::process::Command::new(env!("CARGO_BIN_EXE_tagpin"))
            .args(args)
            .args(["--output", "json", "--config"])
            .arg(config)
            .env("HOME", self.dir.path())
            .env_remove("XDG_CACHE_HOME")
            .env_remove("DOCKER_CONFIG")
            .env_remove("RUST_LOG")
            .output()
            .expect("run tagpin")
    }

    fn sync(&self, config: &Path) -> serde_json::Value {
        let out = self.tagpin(&["sync"], config);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("JSON report: {e}\n{}", text(&out)))
    }

    /// One sync pass in this process, with tagpin's clock `ahead` of the machine's.
    async fn sync_at(&self, config: &Path, ahead: Duration) -> serde_json::Value {
        let config = tagpin::config::Config::load(config).unwrap();
        let registry = tagpin::registry::Client::new(tagpin::registry::Settings {
            insecure_hosts: config.registries.insecure.clone(),
            ..Default::default()
        })
        .unwrap();
        let ahead = ahead.as_secs() as i64;
        let clock: tagpin::clock::Clock = std::sync::Arc::new(move || now() + ahead);
        let report = tagpin::sync::Syncer::new(&config, &registry, None, &self.cache())
            .unwrap()
            .with_clock(clock)
            .run(Default::default())
            .await
            .unwrap();
        serde_json::to_value(&report).unwrap()
    }
}

fn changes(report: &serde_json::Value) -> Vec<serde_json::Value> {
    report["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["changes"].as_array().cloned().unwrap_or_default())
        .collect()
}

fn held_fields(report: &serde_json::Value) -> Vec<serde_json::Value> {
    report["held"].as_array().cloned().unwrap_or_default()
}

fn eligible_at(age: &serde_json::Value) -> i64 {
    age["eligible_at"]
        .as_str()
        .unwrap()
        .parse::<k8s_openapi::jiff::Timestamp>()
        .unwrap()
        .as_second()
}

#[tokio::test]
async fn a_digest_built_two_minutes_ago_is_held_under_an_hour_and_pinned_once_the_clock_moves() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let built = now() - 120;
    let old = push_created(&registry, "acme/web", "1", "old", Some(now() - 2 * 86_400)).await;
    let new = push_created(&registry, "acme/web", "1", "new", Some(built)).await;
    // An image no entry matches moves at once; one old enough under the entry too.
    let other = registry.push_image("tools/other", "1", "other").await;
    let api = push_created(&registry, "acme/api", "2", "api", Some(now() - 86_400)).await;
    let pinned = format!("{host}/acme/web:1@{old}");
    let repo = BareRepo::create(&[
        ("apps/web.yaml", &deployment("web", &pinned)),
        (
            "apps/api.yaml",
            &deployment("api", &format!("{host}/acme/api:2")),
        ),
        (
            "apps/other.yaml",
            &deployment("other", &format!("{host}/tools/other:1")),
        ),
    ]);
    let setup = Setup::new();
    let config = setup.config(&repo.file_url(), &host);

    let report = setup.sync(&config);

    // The pinned digest stays; the rest of the pass goes on.
    assert_eq!(
        repo.read("main", "apps/web.yaml").unwrap(),
        deployment("web", &pinned)
    );
    assert_eq!(
        repo.read("main", "apps/other.yaml").unwrap(),
        deployment("other", &format!("{host}/tools/other:1@{}", other.manifest))
    );
    assert_eq!(
        repo.read("main", "apps/api.yaml").unwrap(),
        deployment("api", &format!("{host}/acme/api:2@{api}"))
    );
    let held = held_fields(&report);
    assert_eq!(held.len(), 1, "{report:#}");
    let web = &held[0];
    assert_eq!(
        (web["file"].as_str(), web["line"].as_u64()),
        (Some("apps/web.yaml"), Some(10))
    );
    assert_eq!(web["image"], format!("{host}/acme/web:1"));
    assert_eq!(web["would_be"], new);
    let age = &web["age"];
    assert_eq!(age["from"], "created");
    let seconds = age["seconds"].as_i64().unwrap();
    assert!((120..300).contains(&seconds), "{age}");
    assert_eq!(eligible_at(age), built + 3600);
    let reason = web["reason"].as_str().unwrap();
    assert!(
        reason.contains("younger than the minimum age 1h: eligible at")
            && reason.contains(age["eligible_at"].as_str().unwrap()),
        "{reason}"
    );
    // Changes under an entry say how old their digest is; others do not.
    let moved = changes(&report);
    let api_change = moved
        .iter()
        .find(|c| c["image"] == format!("{host}/acme/api:2"));
    assert_eq!(api_change.unwrap()["age"]["from"], "created", "{report:#}");
    let other_change = moved
        .iter()
        .find(|c| c["image"] == format!("{host}/tools/other:1"));
    assert!(other_change.unwrap().get("age").is_none(), "{report:#}");
    assert!(
        report["failures"].as_array().unwrap().is_empty(),
        "{report:#}"
    );

    // An hour later the digest is old enough, and is pinned.
    let later = setup.sync_at(&config, Duration::from_secs(3600)).await;
    assert_eq!(
        repo.read("main", "apps/web.yaml").unwrap(),
        deployment("web", &format!("{host}/acme/web:1@{new}")),
        "{later:#}"
    );
    assert!(held_fields(&later).is_empty(), "{later:#}");
    let change = &changes(&later)[0];
    assert_eq!(change["new_digest"], new);
    assert!(
        change["age"]["seconds"].as_i64().unwrap() >= 3600,
        "{change}"
    );
}

#[tokio::test]
async fn a_digest_that_says_no_build_time_counts_from_its_first_sighting_across_runs() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let digest = push_created(&registry, "acme/web", "1", "no-time", None).await;
    let repo = BareRepo::create(&[(
        "apps/web.yaml",
        &deployment("web", &format!("{host}/acme/web:1")),
    )]);
    let setup = Setup::new();
    let config = setup.config(&repo.file_url(), &host);

    let first = setup.sync(&config);
    let [held] = held_fields(&first)
        .try_into()
        .unwrap_or_else(|h| panic!("{h:?}"));
    assert_eq!(held["would_be"], digest);
    assert_eq!(held["age"]["from"], "first_seen");
    assert!(
        held["reason"].as_str().unwrap().contains("first seen"),
        "{held}"
    );
    let first_eligible = eligible_at(&held["age"]);
    assert!(setup.cache().join("tagpin-first-seen.json").is_file());

    // Another pass, its clock seconds later: the first sighting is read back from the cache,
    // not made again.
    let second = setup.sync_at(&config, Duration::from_secs(5)).await;
    let [again] = held_fields(&second)
        .try_into()
        .unwrap_or_else(|h| panic!("{h:?}"));
    assert_eq!(eligible_at(&again["age"]), first_eligible, "{second:#}");
    assert!(again["age"]["seconds"].as_i64().unwrap() >= 1, "{again}");
    // `plan --config` over a working tree reads the same sighting (the configuration's
    // cache directory) and holds the field the same way.
    let work = setup.dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(
        work.join("web.yaml"),
        deployment("web", &format!("{host}/acme/web:1")),
    )
    .unwrap();
    let work = work.to_str().unwrap().to_string();
    let out = setup.tagpin(&["plan", &work], &config);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let plan: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("JSON: {e}\n{}", text(&out)));
    let [planned] = held_fields(&plan)
        .try_into()
        .unwrap_or_else(|h| panic!("{plan:#} {h:?}"));
    assert_eq!(eligible_at(&planned["age"]), first_eligible, "{plan:#}");
    assert_eq!(
        repo.read("main", "apps/web.yaml").unwrap(),
        deployment("web", &format!("{host}/acme/web:1"))
    );

    // Once an hour has passed since the first sighting, it is pinned.
    let later = setup.sync_at(&config, Duration::from_secs(3601)).await;
    assert!(held_fields(&later).is_empty(), "{later:#}");
    assert_eq!(
        repo.read("main", "apps/web.yaml").unwrap(),
        deployment("web", &format!("{host}/acme/web:1@{digest}"))
    );
    assert_eq!(changes(&later)[0]["age"]["from"], "first_seen");
}

#[tokio::test]
async fn an_index_is_dated_by_its_annotation_and_a_created_in_the_future_is_not_believed() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let index = push_annotated_index(&registry, "acme/multi", "1", "multi", now() - 86_400).await;
    let future = push_created(
        &registry,
        "acme/future",
        "1",
        "future",
        Some(now() + 86_400),
    )
    .await;
    let repo = BareRepo::create(&[
        (
            "apps/multi.yaml",
            &deployment("multi", &format!("{host}/acme/multi:1")),
        ),
        (
            "apps/future.yaml",
            &deployment("future", &format!("{host}/acme/future:1")),
        ),
    ]);
    let setup = Setup::new();
    let config = setup.config(&repo.file_url(), &host);

    let report = setup.sync(&config);

    assert_eq!(
        repo.read("main", "apps/multi.yaml").unwrap(),
        deployment("multi", &format!("{host}/acme/multi:1@{index}"))
    );
    let change = &changes(&report)[0];
    assert_eq!(change["age"]["from"], "annotation", "{report:#}");
    // A build time a day ahead is no time at all: counted from now, held.
    let [held] = held_fields(&report)
        .try_into()
        .unwrap_or_else(|h| panic!("{h:?}"));
    assert_eq!(held["would_be"], future);
    assert_eq!(held["age"]["from"], "first_seen", "{held}");
}

/// In a `PinnedRepository`: the same key in the spec, read by the same rules (a wrong `age`
/// stalls the object naming `spec.images.minimum_age[0].age`), and the checks counted in the
/// operator's metrics.
#[tokio::test(flavor = "multi_thread")]
async fn a_pinned_repository_holds_a_young_digest_and_counts_its_checks() {
    use crate::operator::{cluster, condition, pinned_repository, spec, Operator};
    use serde_json::json;

    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let old = push_created(&registry, "acme/web", "1", "old", Some(now() - 2 * 86_400)).await;
    let new = push_created(&registry, "acme/web", "1", "new", Some(now() - 120)).await;
    let api = push_created(&registry, "acme/api", "1", "api", Some(now() - 86_400)).await;
    let pinned = support::manifests::deployment("web", &format!("{host}/acme/web:1@{old}"));
    let repo = BareRepo::create(&[
        ("apps/web.yaml", &pinned),
        (
            "apps/api.yaml",
            &support::manifests::deployment("api", &format!("{host}/acme/api:1")),
        ),
    ]);
    let kube = cluster().await;
    let mut aged = spec(&repo.file_url(), &host);
    aged["images"] = json!({"minimum_age": [{"match": format!("{host}/acme/*"), "age": "1h"}]});
    kube.apply(pinned_repository("web", json!({}), aged.clone()));
    let mut broken = aged;
    broken["images"]["minimum_age"][0]["age"] = json!("soon");
    kube.apply(pinned_repository("broken", json!({}), broken));
    let dir = tempfile::tempdir().unwrap();
    let operator = Operator::start(dir.path(), &kube, "op", &[]).await;

    support::eventually("the digest old enough is pinned", || {
        repo.read("main", "apps/api.yaml")
            .is_some_and(|text| text.contains(&api))
    })
    .await;
    let series = |result: &str| {
        format!("tagpin_minimum_age_checks_total{{result=\"{result}\",source=\"created\"}}")
    };
    support::eventually_async("the checks are counted", || async {
        // At least: a reconcile the status write brings back counts again.
        operator
            .metric(&series("held"))
            .await
            .is_some_and(|n| n >= 1)
            && operator
                .metric(&series("eligible"))
                .await
                .is_some_and(|n| n >= 1)
    })
    .await;
    support::eventually("a wrong age stalls its object, naming the field", || {
        condition(&kube, "broken", "Stalled").is_some_and(|c| {
            c["reason"] == "InvalidSpec"
                && c["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("spec.images.minimum_age[0].age"))
        })
    })
    .await;
    let log = operator.stop().await;
    assert_eq!(repo.read("main", "apps/web.yaml").unwrap(), pinned);
    assert!(
        log.contains(&format!("not moved to {new}")) || log.contains("not pinned yet"),
        "{log}"
    );
}
