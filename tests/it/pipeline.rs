//! One tree, three commands: `plan`, `sync` and `verify` read the same files through the same
//! pipeline, so they must agree on every file, namespace, skip and error. And a broken manifest
//! beside good ones fails the pass (exit 1, named with line and column) without hiding the good
//! ones, in commit and pull-request mode alike. The JSON documents of `sync` and `verify` are a
//! public interface: their shape is compared with snapshots under `tests/fixtures/snapshots`.

use crate::support;

use support::output_text as text;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::{json, Value};
use support::git::{git_ok, BareRepo};
use support::github::GitHubServer;
use support::kube::KubeServer;
use support::registry::{Mode, TestRegistry};
use support::workloads::{LiveCronJob, LiveDeployment};

const GH_TOKEN: &str = "ghs_pipeline_7c2e";
const OLD: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";

/// Not YAML: an unclosed flow sequence, so the parser stops at a known place.
const BROKEN: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: [broken\n";

/// The Deployment web, one replica, on `image`.
fn web(image: &str) -> String {
    support::manifests::deployment_with_replicas("web", image, 1)
}

pub(crate) fn cronjob(image: &str) -> String {
    format!(
        "apiVersion: batch/v1\nkind: CronJob\nmetadata:\n  name: nightly\nspec:\n  schedule: '0 3 * * *'\n  jobTemplate:\n    spec:\n      template:\n        spec:\n          restartPolicy: Never\n          containers:\n          - name: job\n            image: {image}\n"
    )
}

fn tagpin() -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_tagpin"));
    command
        .env_remove("DOCKER_CONFIG")
        .env_remove("RUST_LOG")
        .env("TAGPIN_GITHUB_TOKEN", GH_TOKEN);
    command
}

fn json_of(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", text(output)))
}

fn strings(value: &Value) -> BTreeSet<String> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("not an array: {value}"))
        .iter()
        .map(|v| v.as_str().expect("a string").to_string())
        .collect()
}

/// A registry whose tags moved since the repository pinned them, the repository, and a
/// tagpin configuration in `dir`.
struct World {
    registry: TestRegistry,
    repo: BareRepo,
    dir: tempfile::TempDir,
}

impl World {
    async fn new(files: &[(&str, &str)]) -> World {
        let registry = TestRegistry::start(Mode::Plain).await;
        let host = registry.host();
        let owned: Vec<(String, String)> = files
            .iter()
            .map(|(p, c)| (p.to_string(), c.replace("HOST", &host)))
            .collect();
        let borrowed: Vec<(&str, &str)> = owned
            .iter()
            .map(|(p, c)| (p.as_str(), c.as_str()))
            .collect();
        World {
            repo: BareRepo::create(&borrowed),
            registry,
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn config(&self, extra: &str) -> PathBuf {
        let path = self.dir.path().join("tagpin.yaml");
        std::fs::write(
            &path,
            format!(
                "repository: {{url: '{}', branch: main}}\npaths: [apps]\nregistries: {{insecure: ['{}']}}\nverify: {{default_namespace: default}}\n{extra}",
                self.repo.file_url(),
                self.registry.host()
            ),
        )
        .unwrap();
        path
    }

    async fn sync(&self, config: &Path, extra: &[&str]) -> Output {
        tagpin()
            .args(["sync", "--config"])
            .arg(config)
            .arg("--cache-dir")
            .arg(self.dir.path().join("cache"))
            .args(extra)
            .env("HOME", self.dir.path())
            .output()
            .await
            .expect("run tagpin")
    }

    /// `tagpin plan apps --output json` in a fresh checkout of the branch, as a person would run it.
    async fn plan(&self) -> Output {
        let checkout = self.dir.path().join("checkout");
        if !checkout.exists() {
            git_ok(
                self.dir.path(),
                &["clone", "-q", &self.repo.file_url(), "checkout"],
            );
        }
        tagpin()
            .args(["plan", "apps", "--output", "json"])
            .args(["--insecure-registry", &self.registry.host()])
            .current_dir(&checkout)
            .env("HOME", self.dir.path())
            .output()
            .await
            .expect("run tagpin")
    }

    async fn verify(&self, config: &Path, kube: &KubeServer, extra: &[&str]) -> Output {
        tagpin()
            .arg("verify")
            .arg("--config")
            .arg(config)
            .arg("--cache-dir")
            .arg(self.dir.path().join("verify-cache"))
            .args(extra)
            .env("HOME", self.dir.path())
            .env("KUBECONFIG", kube.kubeconfig(self.dir.path()))
            .output()
            .await
            .expect("run tagpin")
    }
}

/// The tree all three commands read: a kustomization namespace, a Deployment and a CronJob
/// pinned to a digest their tags no longer point to, a file that is not Kubernetes, and a
/// manifest that is not YAML.
fn gitops_tree() -> Vec<(&'static str, String)> {
    vec![
        (
            "apps/kustomization.yaml",
            "namespace: shop\nresources: [web.yaml, cron.yaml]\n".into(),
        ),
        ("apps/web.yaml", web(&format!("HOST/acme/web:1.0@{OLD}"))),
        ("apps/cron.yaml", cronjob(&format!("HOST/acme/job:2@{OLD}"))),
        (
            "apps/settings.yaml",
            "replicas: 3\nimage: {repository: nginx}\n".into(),
        ),
        ("apps/broken.yaml", BROKEN.into()),
    ]
}

/// The document with what changes from run to run (hosts, digests, commits, temporary paths)
/// replaced by stable placeholders, so its shape can be compared with a snapshot.
pub(crate) fn normalized(value: &Value, replace: &[(&str, &str)]) -> Value {
    let mut digests: Vec<String> = Vec::new();
    fn walk(value: &Value, replace: &[(&str, &str)], digests: &mut Vec<String>) -> Value {
        match value {
            Value::String(s) => Value::String(normalize_text(s, replace, digests)),
            Value::Array(items) => {
                Value::Array(items.iter().map(|v| walk(v, replace, digests)).collect())
            }
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| (k.clone(), walk(v, replace, digests)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }
    walk(value, replace, &mut digests)
}

/// Replaces each `sha256:<hex>` by `<digest-N>` (the same digest, the same N; a 12-digit short
/// form counts as the digest it starts), each 40-hex commit id by `<commit>`, and the given
/// strings by their placeholders.
fn normalize_text(text: &str, replace: &[(&str, &str)], digests: &mut Vec<String>) -> String {
    let mut text = text.to_string();
    for (from, to) in replace {
        text = text.replace(from, to);
    }
    let mut out = String::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("sha256:") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 7..];
        let hex_len = after.bytes().take_while(u8::is_ascii_hexdigit).count();
        let hex = &after[..hex_len];
        let n = match digests
            .iter()
            .position(|d| d.starts_with(hex) || hex.starts_with(d.as_str()))
        {
            Some(i) => {
                if hex.len() > digests[i].len() {
                    digests[i] = hex.to_string();
                }
                i
            }
            None => {
                digests.push(hex.to_string());
                digests.len() - 1
            }
        };
        out.push_str(&format!("<digest-{}>", n + 1));
        rest = &after[hex_len..];
    }
    out.push_str(rest);
    let words: Vec<String> = out
        .split_inclusive(|c: char| !c.is_ascii_alphanumeric())
        .map(|w| {
            let core = w.trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
            if core.len() == 40 && core.bytes().all(|b| b.is_ascii_hexdigit()) {
                w.replacen(core, "<commit>", 1)
            } else {
                w.to_string()
            }
        })
        .collect();
    words.concat()
}

/// Compares `value` with `tests/fixtures/snapshots/<name>.json`. `TAGPIN_UPDATE_SNAPSHOTS=1`
/// writes the snapshot instead (review the diff before committing it).
pub(crate) fn assert_snapshot(name: &str, value: &Value) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/snapshots")
        .join(format!("{name}.json"));
    let actual = format!("{}\n", serde_json::to_string_pretty(value).unwrap());
    if std::env::var_os("TAGPIN_UPDATE_SNAPSHOTS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run with TAGPIN_UPDATE_SNAPSHOTS=1 to create it",
            path.display()
        )
    });
    assert!(
        expected == actual,
        "{} differs (the JSON output is a public interface; if the change is deliberate, run with TAGPIN_UPDATE_SNAPSHOTS=1):\n{}",
        path.display(),
        similar::TextDiff::from_lines(&expected, &actual)
            .unified_diff()
            .header("snapshot", "actual")
    );
}

fn broken_failure(failures: &BTreeSet<String>) -> String {
    let found: Vec<&String> = failures
        .iter()
        .filter(|f| f.starts_with("apps/broken.yaml:5:1:"))
        .collect();
    assert_eq!(found.len(), 1, "{failures:?}");
    assert!(found[0].contains("invalid YAML"), "{failures:?}");
    found[0].clone()
}

#[tokio::test]
async fn plan_sync_and_verify_agree_on_files_namespaces_skips_and_errors() {
    let tree = gitops_tree();
    let files: Vec<(&str, &str)> = tree.iter().map(|(p, c)| (*p, c.as_str())).collect();
    let world = World::new(&files).await;
    world
        .registry
        .push_image("acme/web", "1.0", "web-now")
        .await;
    world.registry.push_image("acme/job", "2", "job-now").await;
    let config = world.config("");
    let host = world.registry.host();

    let plan = world.plan().await;
    let sync = world
        .sync(&config, &["--dry-run", "--output", "json"])
        .await;
    let kube = KubeServer::start().await;
    let image = format!("{host}/acme/web:1.0@{OLD}");
    let web = LiveDeployment::new("shop", "web").container("app", &image);
    web.apply(&kube);
    web.pod("web-1")
        .running(&kube, &[&format!("{host}/acme/web@{OLD}")]);
    LiveCronJob::new("shop", "nightly")
        .container("job", &format!("{host}/acme/job:2@{OLD}"))
        .apply(&kube);
    let verify = world
        .verify(&config, &kube, &["--branch", "main", "--output", "json"])
        .await;
    kube.assert_no_writes();

    // A broken file is a failure of the pass for plan and sync: exit 1, never 0 or 2. For
    // verify it leaves pins unchecked: Unverified, and the exit code says the same (4).
    for (name, output) in [("plan", &plan), ("sync", &sync)] {
        assert_eq!(output.status.code(), Some(1), "{name}: {}", text(output));
    }
    assert_eq!(verify.status.code(), Some(4), "verify: {}", text(&verify));
    let plan_json = json_of(&plan);
    let sync_json = json_of(&sync);
    let verify_json = json_of(&verify);

    // The same error, with the same line and column.
    let plan_failures = strings(&plan_json["failures"]);
    let broken = broken_failure(&plan_failures);
    assert_eq!(broken, broken_failure(&strings(&sync_json["failures"])));
    assert_eq!(broken, broken_failure(&strings(&verify_json["failures"])));
    assert!(String::from_utf8_lossy(&plan.stderr).contains(&broken));

    // The same skips.
    let skipped = strings(&plan_json["skipped"]);
    assert!(
        skipped.contains("apps/settings.yaml: not a Kubernetes manifest"),
        "{skipped:?}"
    );
    assert_eq!(skipped, strings(&sync_json["skipped"]));
    assert_eq!(skipped, strings(&verify_json["skipped"]));

    // The same workloads, in the kustomization's namespace.
    let plan_workloads: BTreeSet<String> = plan_json["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["workload"].as_str().unwrap().to_string())
        .collect();
    let sync_workloads: BTreeSet<String> = sync_json["groups"][0]["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["workload"].as_str().unwrap().to_string())
        .collect();
    let verify_workloads: BTreeSet<String> = verify_json["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .chain(verify_json["not_verified"].as_array().unwrap())
        .map(|v| v["workload"].as_str().unwrap().to_string())
        .collect();
    let expected: BTreeSet<String> = ["shop/CronJob/nightly", "shop/Deployment/web"]
        .map(String::from)
        .into();
    assert_eq!(plan_workloads, expected);
    assert_eq!(sync_workloads, expected);
    assert_eq!(verify_workloads, expected);

    // Both are judged; the broken manifest alone keeps the verdict from Converged.
    assert_eq!(verify_json["not_verified"], json!([]));
    assert_eq!(verify_json["verdicts"][0]["state"], "converged");
    assert_eq!(verify_json["verdicts"][1]["state"], "converged");
    assert_eq!(verify_json["state"], "unverified", "{verify_json:#}");

    let placeholders = [(host.as_str(), "<registry>")];
    assert_snapshot("sync-dry-run", &normalized(&sync_json, &placeholders));
    assert_snapshot("verify", &normalized(&verify_json, &placeholders));
}

#[tokio::test]
async fn commit_mode_pins_the_good_manifests_names_the_broken_one_and_exits_1() {
    let world = World::new(&[
        ("apps/web.yaml", &web("HOST/acme/web:1.0")),
        ("apps/broken.yaml", BROKEN),
    ])
    .await;
    let pushed = world.registry.push_image("acme/web", "1.0", "web").await;
    let config = world.config("author: {name: tagpin-bot, email: bot@example.com}\n");

    let human = world.sync(&config, &[]).await;
    assert_eq!(human.status.code(), Some(1), "{}", text(&human));
    let stderr = String::from_utf8_lossy(&human.stderr);
    assert!(
        stderr.contains("error: apps/broken.yaml:5:1:") && stderr.contains("invalid YAML"),
        "{}",
        text(&human)
    );
    assert_eq!(
        world.repo.read("main", "apps/web.yaml").unwrap(),
        web(&format!(
            "{}/acme/web:1.0@{}",
            world.registry.host(),
            pushed.manifest
        ))
    );
    assert_eq!(world.repo.read("main", "apps/broken.yaml").unwrap(), BROKEN);

    // Run again: nothing left to pin, and the broken file still fails the pass.
    let again = world.sync(&config, &["--output", "json"]).await;
    assert_eq!(again.status.code(), Some(1), "{}", text(&again));
    let report = json_of(&again);
    assert_eq!(report["groups"][0]["outcome"]["outcome"], "nothing_to_do");
    broken_failure(&strings(&report["failures"]));
}

#[tokio::test]
async fn pull_request_mode_proposes_the_good_manifests_and_names_the_broken_one() {
    let world = World::new(&[
        ("apps/web.yaml", &web("HOST/acme/web:1.0")),
        ("apps/broken.yaml", BROKEN),
    ])
    .await;
    world.registry.push_image("acme/web", "1.0", "web").await;
    let github = GitHubServer::start(GH_TOKEN, "acme", "gitops", world.repo.path()).await;
    let config = world.config(&format!(
        "mode: pull-request\nforge: {{api_url: '{}', owner: acme, repo: gitops, token_env: TAGPIN_GITHUB_TOKEN}}\n",
        github.api_url()
    ));

    let output = world.sync(&config, &["--output", "json"]).await;
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    let report = json_of(&output);
    assert_eq!(
        report["groups"][0]["outcome"]["outcome"],
        "pull_request_opened"
    );
    broken_failure(&strings(&report["failures"]));
    let (host, api) = (world.registry.host(), github.html_url());
    assert_snapshot(
        "sync-pull-request",
        &normalized(
            &report,
            &[(host.as_str(), "<registry>"), (api.as_str(), "<github>")],
        ),
    );
    let prs = github.prs();
    assert_eq!(prs.len(), 1);
    assert!(
        world
            .repo
            .read("tagpin/main", "apps/web.yaml")
            .unwrap()
            .contains("@sha256:"),
        "the good manifest is pinned on the pull request's branch"
    );
    github.assert_no_violations();
}

#[tokio::test]
async fn a_pinned_cronjob_is_synced_not_run_since_then_judged_by_its_new_runs_only() {
    let world = World::new(&[(
        "apps/cron.yaml",
        &cronjob(&format!("HOST/acme/job:2@{OLD}")),
    )])
    .await;
    let host = world.registry.host();
    let config = world.config("");
    let kube = KubeServer::start().await;
    let pinned = format!("{host}/acme/job:2@{OLD}");
    let nightly = LiveCronJob::new("default", "nightly").container("job", &pinned);
    nightly.apply(&kube);
    // Yesterday's run, from the template before the pin: history, not a stale replica.
    let before = format!("{host}/acme/job:2");
    let old_id = format!("{host}/acme/job@sha256:{}", "9".repeat(64));
    nightly
        .run(&kube, "nightly-1")
        .image(&before)
        .succeeded(&kube, &[&old_id]);

    let output = world
        .verify(&config, &kube, &["--branch", "main", "--output", "json"])
        .await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let report = json_of(&output);
    assert_eq!(report["state"], "converged");
    assert_eq!(report["verdicts"][0]["workload"], "default/CronJob/nightly");
    assert_eq!(report["verdicts"][0]["reason"], "synced, not run since");

    // Its first run since the pin ran the pinned digest.
    nightly
        .run(&kube, "nightly-2")
        .succeeded(&kube, &[&format!("{host}/acme/job@{OLD}")]);
    let output = world
        .verify(&config, &kube, &["--branch", "main", "--output", "json"])
        .await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let report = json_of(&output);
    assert_eq!(report["verdicts"][0]["pods_on_pinned"], 1);
    assert_eq!(report["verdicts"][0]["pods_total"], 1);

    // A run from the pinned template on a node that reports another digest is not converged.
    nightly.run(&kube, "nightly-3").succeeded(&kube, &[&old_id]);
    let output = world.verify(&config, &kube, &["--branch", "main"]).await;
    assert_ne!(output.status.code(), Some(0), "{}", text(&output));
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("nightly-3-x1"),
        "{}",
        text(&output)
    );
    kube.assert_no_writes();
}

#[tokio::test]
async fn a_typo_in_paths_is_a_configuration_error_and_nothing_selected_is_unverified() {
    let world = World::new(&[("apps/web.yaml", &web("HOST/acme/web:1.0"))]).await;
    let kube = KubeServer::start().await;
    // Nothing pinned in the selected manifests: nothing was checked.
    let config = world.config("");
    let output = world.verify(&config, &kube, &["--branch", "main"]).await;
    assert_eq!(output.status.code(), Some(4), "{}", text(&output));
    assert!(
        String::from_utf8_lossy(&output.stdout).starts_with("Unverified: nothing to verify"),
        "{}",
        text(&output)
    );
    // A configured path the commit does not hold is a configuration error (2), named, and
    // the JSON on stdout says the same.
    let typo = world.dir.path().join("typo.yaml");
    std::fs::write(
        &typo,
        std::fs::read_to_string(&config)
            .unwrap()
            .replace("paths: [apps]", "paths: [aps]"),
    )
    .unwrap();
    let output = world.verify(&typo, &kube, &["--branch", "main"]).await;
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    assert!(
        String::from_utf8_lossy(&output.stderr)
            .contains("error: configuration: paths names aps, which commit"),
        "{}",
        text(&output)
    );
    let output = world
        .verify(&typo, &kube, &["--branch", "main", "--output", "json"])
        .await;
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    let document = json_of(&output);
    assert_eq!(document["state"], "error", "{document:#}");
    assert!(
        document["error"]
            .as_str()
            .is_some_and(|e| e.contains("paths names aps")),
        "{document:#}"
    );
}
