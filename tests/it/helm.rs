//! Helm values, pinned by the real binary against a real registry: values files copied from
//! real charts (`tests/fixtures/helm/charts`, sources in its README), a Flux HelmRelease and an
//! Argo CD Application (`tests/fixtures/helm/objects`). Each pinned file must equal its
//! `expected` twin byte for byte, a second run must change nothing, and promotion must carry the
//! pins from a staging stage's values into production's.
//!
//! The registry runs on loopback, so each file's registries (`docker.io`, `quay.io`,
//! `ghcr.io`) are pointed at it on the way in (`quay.io/x` becomes `127.0.0.1:PORT/quay.io/x`,
//! a repository the test pushes) and back on the way out, before the comparison. Run with
//! `TAGPIN_BLESS_HELM=1` to rewrite the expected files after a deliberate change, and read
//! every diff.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::support::registry::{Mode, TestRegistry};

use tagpin::manifest::{FileFilter, HelmSource, Origin};
use tagpin::pipeline::{self, ImageSelection};
use tagpin::promote::carry;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/helm")
}

/// One fixture file: where it lies under `fixtures()`, and how its registries are pointed at
/// the test registry (`HOST` stands for its `host:port`).
pub(crate) struct Fixture {
    pub(crate) path: &'static str,
    to_local: &'static [(&'static str, &'static str)],
}

const REDIS: (&str, &str) = (
    "repository: redis\n",
    "repository: HOST/docker.io/library/redis\n",
);

pub(crate) const FIXTURES: [Fixture; 10] = [
    Fixture {
        path: "charts/podinfo/values.yaml",
        to_local: &[("ghcr.io/", "HOST/ghcr.io/"), REDIS],
    },
    Fixture {
        path: "charts/grafana/values.yaml",
        to_local: &[("registry: docker.io", "registry: HOST/docker.io")],
    },
    Fixture {
        path: "charts/argo-cd-redis-ha/values.yaml",
        to_local: &[
            ("public.ecr.aws/", "HOST/public.ecr.aws/"),
            ("ghcr.io/", "HOST/ghcr.io/"),
        ],
    },
    Fixture {
        path: "charts/metrics-server/values.yaml",
        to_local: &[(
            "repository: registry.k8s.io/",
            "repository: HOST/registry.k8s.io/",
        )],
    },
    Fixture {
        path: "charts/kube-state-metrics/values.yaml",
        to_local: &[("repository: k8s.gcr.io/", "repository: HOST/k8s.gcr.io/")],
    },
    Fixture {
        path: "charts/prometheus-node-exporter/values.yaml",
        to_local: &[("registry: quay.io", "registry: HOST/quay.io")],
    },
    Fixture {
        path: "charts/bitnami-nginx/values.yaml",
        to_local: &[("registry: docker.io", "registry: HOST/docker.io")],
    },
    Fixture {
        path: "charts/argo-cd/values.yaml",
        to_local: &[
            ("quay.io/", "HOST/quay.io/"),
            ("ghcr.io/", "HOST/ghcr.io/"),
            REDIS,
        ],
    },
    Fixture {
        path: "objects/helmrelease-podinfo.yaml",
        to_local: &[("ghcr.io/", "HOST/ghcr.io/"), REDIS],
    },
    Fixture {
        path: "objects/application-argocd.yaml",
        to_local: &[
            ("quay.io/", "HOST/quay.io/"),
            ("ghcr.io/", "HOST/ghcr.io/"),
            ("value: redis\n", "value: HOST/docker.io/library/redis\n"),
        ],
    },
];

/// Every image the fixtures name with a tag, as the test registry holds them.
const IMAGES: [(&str, &str); 17] = [
    ("ghcr.io/stefanprodan/podinfo", "6.9.1"),
    ("docker.io/library/redis", "7.0.7"),
    ("docker.io/library/redis", "6.2.2-alpine"),
    ("quay.io/brancz/kube-rbac-proxy", "v0.20.2"),
    ("quay.io/prometheus/busybox", "latest"),
    ("docker.io/bitnami/nginx", "1.29.1-debian-12-r0"),
    ("docker.io/bitnami/git", "2.50.1-debian-12-r6"),
    ("docker.io/bitnami/nginx-exporter", "1.4.2-debian-12-r9"),
    ("quay.io/argoproj/argocd", "v2.0.3"),
    ("ghcr.io/dexidp/dex", "v2.27.0"),
    ("docker.io/bats/bats", "v1.4.1"),
    ("docker.io/curlimages/curl", "7.85.0"),
    ("docker.io/library/busybox", "1.31.1"),
    ("public.ecr.aws/docker/library/redis", "7.4.2-alpine"),
    ("ghcr.io/oliver006/redis_exporter", "v1.69.0"),
    ("registry.k8s.io/autoscaling/addon-resizer", "1.8.21"),
    ("k8s.gcr.io/kube-state-metrics/kube-state-metrics", "v2.2.4"),
];

impl Fixture {
    pub(crate) fn original(&self) -> String {
        std::fs::read_to_string(fixtures().join(self.path)).unwrap()
    }

    /// `charts/podinfo/values.yaml` → `charts/podinfo/expected.yaml`;
    /// `objects/x.yaml` → `objects/expected/x.yaml`.
    fn expected_path(&self) -> PathBuf {
        let path = fixtures().join(self.path);
        if self.path.starts_with("charts/") {
            path.with_file_name("expected.yaml")
        } else {
            let name = path.file_name().unwrap().to_owned();
            path.parent().unwrap().join("expected").join(name)
        }
    }

    pub(crate) fn localized(&self, host: &str) -> String {
        let mut text = self.original();
        for (from, to) in self.to_local {
            assert!(text.contains(from), "{}: no {from:?}", self.path);
            text = text.replace(from, &to.replace("HOST", host));
        }
        text
    }

    fn delocalized(&self, text: &str, host: &str) -> String {
        let mut text = text.to_string();
        for (from, to) in self.to_local.iter().rev() {
            text = text.replace(&to.replace("HOST", host), from);
        }
        text
    }
}

pub(crate) fn tagpin(args: &[&str], home: &Path) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_tagpin"))
        .args(args)
        .env("HOME", home)
        .env_remove("DOCKER_CONFIG")
        .env_remove("RUST_LOG")
        .output()
        .expect("run tagpin")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

pub(crate) async fn registry_with_the_fixture_images() -> TestRegistry {
    let registry = TestRegistry::start(Mode::Plain).await;
    for (repository, tag) in IMAGES {
        registry
            .push_image(repository, tag, &format!("{repository}:{tag}"))
            .await;
    }
    registry
}

#[tokio::test]
async fn real_chart_values_and_helm_objects_are_pinned_byte_exactly_and_idempotently() {
    let registry = registry_with_the_fixture_images().await;
    let host = registry.host();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("repo");
    for fixture in &FIXTURES {
        let path = root.join(fixture.path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, fixture.localized(&host)).unwrap();
    }
    let root_arg = root.to_str().unwrap();
    let run = |args: &[&str]| {
        let mut all = vec!["--insecure-registry", host.as_str()];
        all.extend_from_slice(args);
        tagpin(&all, dir.path())
    };

    // `pin --check` names what it would pin and writes nothing.
    let check = run(&["pin", "--check", root_arg]);
    assert_eq!(check.status.code(), Some(1), "{}", text(&check.stderr));
    for fixture in &FIXTURES {
        let now = std::fs::read_to_string(root.join(fixture.path)).unwrap();
        assert_eq!(now, fixture.localized(&host), "{} changed", fixture.path);
    }

    // `plan` names each Helm field by file, line and key path, and each skipped one with why.
    let plan = run(&["plan", "--output", "json", root_arg]);
    assert_eq!(plan.status.code(), Some(0), "{}", text(&plan.stderr));
    let json: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    let changes = json["changes"].as_array().unwrap();
    let nginx = changes
        .iter()
        .find(|c| {
            c["file"]
                .as_str()
                .unwrap()
                .ends_with("bitnami-nginx/values.yaml")
        })
        .unwrap_or_else(|| panic!("{json:#}"));
    assert_eq!(nginx["line"], 89, "{nginx:#}");
    assert_eq!(nginx["container"], "image.tag");
    assert_eq!(nginx["workload"], "helm:values");
    assert_eq!(
        nginx["image"],
        format!("{host}/docker.io/bitnami/nginx:1.29.1-debian-12-r0")
    );
    let release = changes
        .iter()
        .find(|c| c["workload"] == "helm:HelmRelease/apps/podinfo" && c["container"] == "redis.tag")
        .unwrap_or_else(|| panic!("{json:#}"));
    assert_eq!(release["line"], 22);
    let text_source = changes
        .iter()
        .find(|c| c["workload"] == "helm:Application/argocd/argocd/sources[1]")
        .unwrap_or_else(|| panic!("{json:#}"));
    assert_eq!(text_source["line"], 34);
    assert_eq!(text_source["container"], "image.tag");
    let skipped: Vec<&str> = json["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert!(
        skipped
            .iter()
            .any(|s| s.contains("prometheus-node-exporter/values.yaml:8:8:")
                && s.contains("appVersion")),
        "{skipped:#?}"
    );
    assert!(
        skipped
            .iter()
            .any(|s| s.contains("argo-cd/values.yaml:31:15:") && s.contains("repository is empty")),
        "{skipped:#?}"
    );

    // `pin` writes every file as expected.
    let pin = run(&["pin", root_arg]);
    assert_eq!(pin.status.code(), Some(0), "{}", text(&pin.stderr));
    let bless = std::env::var_os("TAGPIN_BLESS_HELM").is_some();
    for fixture in &FIXTURES {
        let pinned = std::fs::read_to_string(root.join(fixture.path)).unwrap();
        let got = fixture.delocalized(&pinned, &host);
        let expected_path = fixture.expected_path();
        if bless {
            std::fs::create_dir_all(expected_path.parent().unwrap()).unwrap();
            std::fs::write(&expected_path, &got).unwrap();
        }
        let want = std::fs::read_to_string(&expected_path)
            .unwrap_or_else(|e| panic!("{}: {e}", expected_path.display()));
        assert!(
            got == want,
            "{}: pinned text differs from {}:\n{}",
            fixture.path,
            expected_path.display(),
            similar::TextDiff::from_lines(&want, &got)
                .unified_diff()
                .header("expected", "got")
        );
        assert_ne!(got, fixture.original(), "{}: nothing pinned", fixture.path);
    }

    // A second run has nothing to do, and `pin --check` agrees.
    let again = run(&["pin", root_arg]);
    assert_eq!(again.status.code(), Some(0), "{}", text(&again.stderr));
    assert!(
        text(&again.stdout).contains("0 to pin, 0 stale pin(s) to update"),
        "{}",
        text(&again.stdout)
    );
    let check = run(&["pin", "--check", root_arg]);
    assert_eq!(check.status.code(), Some(0), "{}", text(&check.stderr));
}

/// Two stages, as teams lay them out: values files side by side, one HelmRelease per stage,
/// one Application per stage. Staging is pinned; production still runs older digests.
fn stage(name: &str, podinfo: &str, redis: &str) -> Vec<(String, String)> {
    let values = format!(
        "# {name}\nimage:\n  repository: ghcr.io/stefanprodan/podinfo\n  tag: \"6.9.1{podinfo}\"\nredis:\n  repository: redis\n  tag: 7.0.7\n  digest: \"{redis}\"\n"
    );
    let release = format!(
        "apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata:\n  name: podinfo\n  namespace: {name}\nspec:\n  values:\n    image:\n      repository: ghcr.io/stefanprodan/podinfo\n      tag: 6.9.1{podinfo} # {name}\n"
    );
    let application = format!(
        "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: redis-{name}\n  namespace: argocd\nspec:\n  source:\n    chart: redis\n    helm:\n      parameters:\n      - name: image.repository\n        value: redis\n      - name: image.tag\n        value: 7.0.7\n      - name: image.digest\n        value: '{redis}'\n"
    );
    vec![
        (format!("envs/values-{name}.yaml"), values),
        (format!("envs/{name}/helmrelease.yaml"), release),
        (format!("envs/{name}/application.yaml"), application),
    ]
}

fn scan_stage(root: &Path, files: &[(String, String)]) -> Vec<tagpin::plan::ScannedFile> {
    for (path, text) in files {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    let paths: Vec<PathBuf> = files.iter().map(|(p, _)| root.join(p)).collect();
    let scanned = pipeline::scan(
        pipeline::gather_working_tree(&paths, &FileFilter::default()),
        &ImageSelection::default(),
    );
    assert!(scanned.errors.is_empty(), "{:?}", scanned.errors);
    scanned.files
}

#[test]
fn promotion_carries_helm_pins_from_staging_values_objects_and_parameters_into_production() {
    const STAGING_PODINFO: &str =
        "sha256:1111111111111111111111111111111111111111111111111111111111111111";
    const STAGING_REDIS: &str =
        "sha256:2222222222222222222222222222222222222222222222222222222222222222";
    const OLD: &str = "sha256:0000000000000000000000000000000000000000000000000000000000000000";
    let dir = tempfile::tempdir().unwrap();
    let staging = scan_stage(
        dir.path(),
        &stage("staging", &format!("@{STAGING_PODINFO}"), STAGING_REDIS),
    );
    let production_files = stage("production", &format!("@{OLD}"), "");
    let production = scan_stage(dir.path(), &production_files);
    // Every stage holds its values in the three places.
    let sources: Vec<String> = production
        .iter()
        .flat_map(|f| &f.fields)
        .map(|field| match &field.origin {
            Origin::HelmImage(image) => match &image.source {
                HelmSource::ValuesFile { .. } => "values file".to_string(),
                other => other.to_string(),
            },
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        sources,
        [
            "Application argocd/redis-production",
            "HelmRelease production/podinfo",
            "values file",
            "values file"
        ]
    );

    let pins = carry::SourcePins::from_files(&staging);
    assert_eq!(pins.len(), 2);
    let (plan, skips) = carry::plan(&production, &pins, &tagpin::policy::Holds::default());
    assert!(skips.is_empty(), "{skips:?}");
    assert!(plan.problems.is_empty(), "{:?}", plan.problems);
    assert_eq!(plan.changes.len(), 4);
    let updated = |name: &str| {
        let file = plan
            .files
            .iter()
            .find(|f| f.path.ends_with(name))
            .unwrap_or_else(|| panic!("{name} not changed"));
        String::from_utf8(file.updated.clone()).unwrap()
    };
    let (_, values) = &production_files[0];
    assert_eq!(
        updated("values-production.yaml"),
        values
            .replace(OLD, STAGING_PODINFO)
            .replace("digest: \"\"", &format!("digest: \"{STAGING_REDIS}\""))
    );
    let (_, release) = &production_files[1];
    assert_eq!(
        updated("production/helmrelease.yaml"),
        release.replace(OLD, STAGING_PODINFO)
    );
    let (_, application) = &production_files[2];
    assert_eq!(
        updated("production/application.yaml"),
        application.replace("value: ''", &format!("value: '{STAGING_REDIS}'"))
    );

    // Carried again, nothing moves.
    for file in &plan.files {
        std::fs::write(&file.path, &file.updated).unwrap();
    }
    let production = scan_stage(
        dir.path(),
        &production_files
            .iter()
            .map(|(p, _)| {
                (
                    p.clone(),
                    std::fs::read_to_string(dir.path().join(p)).unwrap(),
                )
            })
            .collect::<Vec<_>>(),
    );
    let (again, _) = carry::plan(&production, &pins, &tagpin::policy::Holds::default());
    assert!(again.files.is_empty(), "{:?}", again.changes);
}

#[tokio::test]
async fn sync_reads_the_helm_section_adding_digest_keys_to_values_files_it_names() {
    use crate::support::git::BareRepo;
    use crate::sync::Run;

    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let web = registry.push_image("acme/web", "1.0", "web").await;
    let api = registry.push_image("acme/api", "2", "api").await;
    let values = format!(
        "# production values\nimage:\n  repository: {host}/acme/web\n  tag: \"1.0\" # the release\n  pullPolicy: IfNotPresent\n"
    );
    let overrides = format!("api:\n  image: {{repository: {host}/acme/api, tag: '2'}}\n");
    let repo = BareRepo::create(&[
        ("apps/values-production.yaml", &values),
        ("apps/overrides/api.yaml", &overrides),
        (
            "apps/settings.yaml",
            "image: {repository: not/values, tag: '1'}\n",
        ),
    ]);
    let run = Run::new();
    let config = run.config(
        &repo.file_url(),
        &host,
        "helm:\n  digest: key\n  values_files: [\"overrides/*.yaml\"]",
    );
    let before = repo.log("main").len();

    let first = run.sync(&config, "cache");
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    assert_eq!(repo.log("main").len(), before + 1, "one commit");
    assert_eq!(
        repo.read("main", "apps/values-production.yaml").unwrap(),
        values.replace(
            "# the release\n",
            &format!("# the release\n  digest: {}\n", web.manifest)
        )
    );
    assert_eq!(
        repo.read("main", "apps/overrides/api.yaml").unwrap(),
        overrides.replace("'2'}", &format!("'2', digest: {}}}", api.manifest))
    );
    assert_eq!(
        repo.read("main", "apps/settings.yaml").unwrap(),
        "image: {repository: not/values, tag: '1'}\n"
    );

    let second = run.sync(&config, "cache");
    assert_eq!(second.status.code(), Some(0), "{}", text(&second.stderr));
    assert_eq!(repo.log("main").len(), before + 1, "no second commit");
}
