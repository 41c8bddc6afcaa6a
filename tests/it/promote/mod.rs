//! `tagpin promote`, the real binary, between two stages: staging and production, each with its
//! own local Kubernetes API server reached through its own kubeconfig file (named in the stage's
//! `cluster:`), a real registry (behind a recording proxy, to see that promoting asks it
//! nothing), a real bare Git remote, and the local GitHub server.
//!
//! Staging is pinned from the registry by `tagpin sync` (commit mode) and its live state is
//! built to match what it pins; production is only ever promoted into. Two repository layouts:
//! kustomize overlays over a shared base (`images:` entries with newName/newTag/digest), and
//! plain per-environment directories (`image: repo:tag@digest`).

mod age;
mod holds;
mod revert;
mod signed;

use crate::support;

use support::output_text as text;

use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use serde_json::{json, Value};
use support::git::{BareRepo, GitHttpServer, HttpAuth};
use support::github::{GitHubServer, PrState};
use support::kube::KubeServer;
use support::registry::{FaultProxy, Mode, TestRegistry};
use support::workloads::LiveDeployment;

const GH_TOKEN: &str = "ghs_promote_7c2a91";
const PR_BRANCH: &str = "tagpin/promote/production";
const STAGE_CONTEXT: &str = "tagpin/stage/staging";
const PROMOTION_CONTEXT: &str = "tagpin/promotion";
const STAGING_NS: &str = "shop-staging";
const PRODUCTION_NS: &str = "shop";
/// The versions staging is bumped to (pinned by sync) and the ones production runs.
const WEB_NEW: &str = "1.5.0";
const API_NEW: &str = "2.1.0";
const WEB_OLD: &str = "1.4.0";
const API_OLD: &str = "2.0.0";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// `base/` + `overlays/{staging,production}` with kustomize `images:` entries.
    Kustomize,
    /// `envs/staging/*.yaml`, `envs/production/*.yaml` with `image: repo:tag@digest`.
    Plain,
}

impl Layout {
    fn stage_path(self, stage: &str) -> String {
        match self {
            Layout::Kustomize => format!("overlays/{stage}"),
            Layout::Plain => format!("envs/{stage}"),
        }
    }

    /// The files of production that promotions rewrite.
    fn production_files(self) -> Vec<&'static str> {
        match self {
            Layout::Kustomize => vec!["overlays/production/kustomization.yaml"],
            Layout::Plain => vec!["envs/production/api.yaml", "envs/production/web.yaml"],
        }
    }

    fn staging_files(self) -> Vec<&'static str> {
        match self {
            Layout::Kustomize => vec!["overlays/staging/kustomization.yaml"],
            Layout::Plain => vec!["envs/staging/api.yaml", "envs/staging/web.yaml"],
        }
    }
}

/// A Deployment and its Service, as a team writes them; `image_line` is the whole value after
/// `image: ` (quotes and comment included).
fn workload_yaml(name: &str, namespace: Option<&str>, image_line: &str) -> String {
    let namespace = namespace.map_or(String::new(), |ns| format!("  namespace: {ns}\n"));
    format!(
        "# {name}: part of the shop.\n\
         apiVersion: apps/v1\n\
         kind: Deployment\n\
         metadata:\n  name: {name}\n{namespace}  labels:\n    app: {name}\n    app.kubernetes.io/part-of: shop\n\
         spec:\n  replicas: 2\n  selector:\n    matchLabels:\n      app: {name}\n  template:\n    metadata:\n      labels:\n        app: {name}\n\
         \x20   spec:\n      containers:\n        - name: {name}\n          image: {image_line}\n          ports:\n            - name: http\n              containerPort: 8080\n\
         ---\n\
         apiVersion: v1\n\
         kind: Service\n\
         metadata:\n  name: {name}\n{namespace}\
         spec:\n  selector:\n    app: {name}\n  ports:\n    - name: http\n      port: 80\n      targetPort: http\n"
    )
}

/// The repository's files: staging names tags only (sync pins them), production pins the old
/// versions by digest.
fn repository_files(
    layout: Layout,
    host: &str,
    web_old: &str,
    api_old: &str,
) -> Vec<(String, String)> {
    match layout {
        Layout::Kustomize => vec![
            (
                "base/kustomization.yaml".into(),
                "# The shop as every environment shares it: no namespace, no versions.\n\
                 apiVersion: kustomize.config.k8s.io/v1beta1\n\
                 kind: Kustomization\n\
                 resources:\n  - web.yaml\n  - api.yaml\n"
                    .into(),
            ),
            ("base/web.yaml".into(), workload_yaml("web", None, "web")),
            ("base/api.yaml".into(), workload_yaml("api", None, "api")),
            (
                "overlays/staging/kustomization.yaml".into(),
                format!(
                    "# Staging: tagpin sync pins these tags from the registry.\n\
                     apiVersion: kustomize.config.k8s.io/v1beta1\n\
                     kind: Kustomization\n\
                     namespace: {STAGING_NS}\n\
                     resources:\n  - ../../base\n\
                     images:\n\
                     \x20 - name: web\n    newName: {host}/acme/web\n    newTag: \"{WEB_NEW}\"\n\
                     \x20 - name: api\n    newName: {host}/acme/api\n    newTag: '{API_NEW}'\n"
                ),
            ),
            (
                "overlays/production/kustomization.yaml".into(),
                format!(
                    "# Production: only ever promoted from staging (tagpin promote --to production).\n\
                     apiVersion: kustomize.config.k8s.io/v1beta1\n\
                     kind: Kustomization\n\
                     namespace: {PRODUCTION_NS}\n\
                     resources:\n  - ../../base\n\
                     images:\n\
                     \x20 - name: web\n    newName: {host}/acme/web\n    newTag: \"{WEB_OLD}\" # what production runs\n    digest: {web_old}\n\
                     \x20 - name: api\n    newName: {host}/acme/api\n    newTag: '{API_OLD}'\n    digest: \"{api_old}\"  # quoted on purpose\n"
                ),
            ),
        ],
        Layout::Plain => vec![
            (
                "envs/staging/web.yaml".into(),
                workload_yaml(
                    "web",
                    Some(STAGING_NS),
                    &format!("{host}/acme/web:{WEB_NEW} # bumped by the release pipeline"),
                ),
            ),
            (
                "envs/staging/api.yaml".into(),
                workload_yaml("api", Some(STAGING_NS), &format!("\"{host}/acme/api:{API_NEW}\"")),
            ),
            (
                "envs/production/web.yaml".into(),
                workload_yaml(
                    "web",
                    Some(PRODUCTION_NS),
                    &format!("{host}/acme/web:{WEB_OLD}@{web_old} # promoted from staging"),
                ),
            ),
            (
                "envs/production/api.yaml".into(),
                workload_yaml(
                    "api",
                    Some(PRODUCTION_NS),
                    &format!("\"{host}/acme/api:{API_OLD}@{api_old}\""),
                ),
            ),
        ],
    }
}

/// The digests a stage runs.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Pins {
    web: String,
    api: String,
}

/// The registry, the Git remote, GitHub, both clusters and tagpin's configuration.
struct World {
    layout: Layout,
    registry: TestRegistry,
    /// In front of the registry: the manifests name this host, so every request tagpin makes
    /// to the registry is recorded.
    proxy: FaultProxy,
    host: String,
    repo: BareRepo,
    github: GitHubServer,
    staging: KubeServer,
    production: KubeServer,
    dir: tempfile::TempDir,
    /// What staging's tags point to (what sync pins), and what production pins at first.
    new: Pins,
    old: Pins,
    /// The files as first committed.
    initial: Vec<(String, String)>,
}

impl World {
    async fn new(layout: Layout, soak: &str) -> World {
        World::with_extra(layout, soak, &[]).await
    }

    /// A world whose repository also holds `extra` files (`{host}` replaced by the registry).
    async fn with_extra(layout: Layout, soak: &str, extra: &[(&str, &str)]) -> World {
        let registry = TestRegistry::start(Mode::Plain).await;
        let proxy = FaultProxy::start(&registry.base_url(), Vec::new()).await;
        let host = proxy.host();
        let new = Pins {
            web: registry
                .push_image("acme/web", WEB_NEW, "web-1.5.0")
                .await
                .manifest,
            api: registry
                .push_image("acme/api", API_NEW, "api-2.1.0")
                .await
                .manifest,
        };
        let old = Pins {
            web: registry
                .push_image("acme/web", WEB_OLD, "web-1.4.0")
                .await
                .manifest,
            api: registry
                .push_image("acme/api", API_OLD, "api-2.0.0")
                .await
                .manifest,
        };
        let mut initial = repository_files(layout, &host, &old.web, &old.api);
        for (path, content) in extra {
            initial.push((path.to_string(), content.replace("{host}", &host)));
        }
        let files: Vec<(&str, &str)> = initial
            .iter()
            .map(|(p, c)| (p.as_str(), c.as_str()))
            .collect();
        let repo = BareRepo::create(&files);
        let github = GitHubServer::start(GH_TOKEN, "acme", "gitops", repo.path()).await;
        let dir = tempfile::tempdir().unwrap();
        let (staging, production) = (KubeServer::start().await, KubeServer::start().await);
        for (name, kube) in [("staging", &staging), ("production", &production)] {
            std::fs::create_dir_all(dir.path().join(name)).unwrap();
            kube.kubeconfig(&dir.path().join(name));
        }
        let world = World {
            layout,
            registry,
            proxy,
            host,
            repo,
            github,
            staging,
            production,
            dir,
            new,
            old,
            initial,
        };
        world.configure(soak);
        world
    }

    fn config(&self) -> PathBuf {
        self.dir.path().join("tagpin.yaml")
    }

    fn kubeconfig(&self, stage: &str) -> PathBuf {
        self.dir.path().join(stage).join("kubeconfig")
    }

    /// `cluster: {kubeconfig: …}` of a stage, as the config writes it.
    fn cluster(&self, stage: &str) -> String {
        format!("{{kubeconfig: '{}'}}", self.kubeconfig(stage).display())
    }

    /// Writes `tagpin.yaml` with these `promotion.stages` entries (YAML list items).
    fn write_config(&self, stages: &str) {
        std::fs::write(
            self.config(),
            format!(
                "repository: {{url: '{}', branch: main}}\n\
                 mode: commit\n\
                 registries: {{insecure: ['{}']}}\n\
                 forge: {{api_url: '{}', owner: acme, repo: gitops, token_env: TAGPIN_GITHUB_TOKEN}}\n\
                 promotion:\n  stages:\n{stages}",
                self.repo.file_url(),
                self.host,
                self.github.api_url(),
            ),
        )
        .unwrap();
    }

    /// The two stages, each on its own cluster; promotions into production by pull request.
    fn configure(&self, soak: &str) {
        self.configure_clusters(&self.cluster("staging"), soak);
    }

    /// [`World::configure`] with staging's `cluster:` as given.
    fn configure_clusters(&self, staging_cluster: &str, soak: &str) {
        self.write_config(&format!(
            "  - name: staging\n    paths: [{}]\n    cluster: {staging_cluster}\n\
             \x20 - name: production\n    paths: [{}]\n    cluster: {}\n    soak: {soak}\n    mode: pull-request\n",
            self.layout.stage_path("staging"),
            self.layout.stage_path("production"),
            self.cluster("production"),
        ));
    }

    async fn tagpin(&self, args: &[&str]) -> Output {
        // Only the stages' own kubeconfig files may be used.
        self.tagpin_with_kubeconfig(args, &self.dir.path().join("no-such-kubeconfig"))
            .await
    }

    /// [`World::tagpin`] with `KUBECONFIG` (the default kubeconfig) set to `kubeconfig`.
    async fn tagpin_with_kubeconfig(&self, args: &[&str], kubeconfig: &std::path::Path) -> Output {
        tokio::process::Command::new(env!("CARGO_BIN_EXE_tagpin"))
            .args(args)
            .arg("--config")
            .arg(self.config())
            .arg("--cache-dir")
            .arg(self.dir.path().join("cache"))
            .env("HOME", self.dir.path())
            .env("KUBECONFIG", kubeconfig)
            .env("TAGPIN_GITHUB_TOKEN", GH_TOKEN)
            .env_remove("DOCKER_CONFIG")
            .env_remove("RUST_LOG")
            .output()
            .await
            .expect("run tagpin")
    }

    async fn promote(&self, extra: &[&str]) -> Output {
        let mut args = vec!["promote", "--to", "production"];
        args.extend(extra);
        self.tagpin(&args).await
    }

    /// `promote --output json`: the exit code, the document, and the output for messages.
    async fn promote_json(&self) -> (Option<i32>, Value, Output) {
        let out = self.promote(&["--output", "json"]).await;
        let document = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", text(&out)));
        (out.status.code(), document, out)
    }

    /// One promotion pass into production in this process, the report as `--output json`
    /// prints it: tagpin's clock runs as far ahead as the GitHub server's
    /// ([`GitHubServer::advance_clock`]), so a test moves time for both instead of sleeping.
    async fn promote_at_forge_time(&self) -> Value {
        use tagpin::promote::{Clock, PromoteOptions, Promoter};
        let config = tagpin::config::Config::load(&self.config()).unwrap();
        let forge =
            tagpin::forge::ForgeClient::new(config.forge.as_ref().unwrap(), GH_TOKEN.into())
                .unwrap();
        let registry = tagpin::registry::Client::new(tagpin::registry::Settings {
            insecure_hosts: config.registries.insecure.clone(),
            ..Default::default()
        })
        .unwrap();
        let mirror = support::mirror(&config, &self.dir.path().join("cache"));
        let (source, _) = tagpin::promote::route(&config, "production").unwrap();
        let cluster = tagpin::promote::connect(source, tagpin::cluster::DEFAULT_API_TIMEOUT)
            .await
            .unwrap();
        let ahead = self.github.clock_offset().as_secs() as i64;
        let clock: Clock = std::sync::Arc::new(move || {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap();
            now.as_secs() as i64 + ahead
        });
        let report = Promoter::new(&config, &registry, Some(&forge), &mirror)
            .unwrap()
            .with_clock(clock)
            .run("production", &cluster, PromoteOptions::default())
            .await
            .unwrap();
        serde_json::to_value(&report).unwrap()
    }

    /// `tagpin sync`: pins staging's tags from the registry, by a commit on main.
    async fn sync(&self) {
        let before = self.tip();
        let out = self.tagpin(&["sync"]).await;
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        assert_ne!(self.tip(), before, "sync committed: {}", text(&out));
    }

    /// `web` 1.5.0 is rebuilt and `sync` pins the new digest on main; returns that digest.
    async fn rebuild_web_and_sync(&self) -> String {
        let rebuilt = self
            .registry
            .push_image("acme/web", WEB_NEW, "web-1.5.0-rebuilt")
            .await
            .manifest;
        self.sync().await;
        rebuilt
    }

    /// Staging's first `api` pod crash-loops on the digest staging pins.
    fn api_crash_loops_in_staging(&self) {
        let api = self.image("api", API_NEW, &self.new.api);
        app(STAGING_NS, "api", &api)
            .pod(&pod_name("api", 0))
            .crash_looping(
                &self.staging,
                &[self.image_id("api", &self.new.api)],
                "back-off 5m0s restarting failed container=api pod=api-7d9f6c-0",
            );
    }

    /// `promote --output json` exits 0 with the outcome `nothing_to_do`; returns the report.
    async fn promote_finds_nothing_to_do(&self) -> Value {
        let (code, report, out) = self.promote_json().await;
        assert_eq!(code, Some(0), "{}", text(&out));
        assert_eq!(
            report["outcome"],
            json!({"outcome": "nothing_to_do"}),
            "{report:#}"
        );
        report
    }

    /// Sync, then staging's cluster runs what staging now pins.
    async fn staging_pinned_and_converged(&self) {
        self.sync().await;
        let staging: String = self
            .layout
            .staging_files()
            .iter()
            .map(|file| self.repo.read("main", file).unwrap())
            .collect();
        for digest in [&self.new.web, &self.new.api] {
            assert!(staging.contains(digest.as_str()), "{digest} in {staging}");
        }
        self.runs_staging(&self.new);
    }

    fn tip(&self) -> String {
        self.repo.head("main").unwrap()
    }

    fn image(&self, app: &str, tag: &str, digest: &str) -> String {
        format!("{}/acme/{app}:{tag}@{digest}", self.host)
    }

    fn image_id(&self, app: &str, digest: &str) -> String {
        format!("{}/acme/{app}@{digest}", self.host)
    }

    /// Staging's cluster runs `pins` (at staging's tags), two pods each, rolled out.
    fn runs_staging(&self, pins: &Pins) {
        for (app, tag, digest) in [("web", WEB_NEW, &pins.web), ("api", API_NEW, &pins.api)] {
            let image = self.image(app, tag, digest);
            let id = self.image_id(app, digest);
            rolled_out(&self.staging, STAGING_NS, app, &image, &[&id, &id]);
        }
    }

    /// Production's cluster runs `pins` at staging's tags (after a promotion).
    fn runs_production(&self, pins: &Pins) {
        for (app, tag, digest) in [("web", WEB_NEW, &pins.web), ("api", API_NEW, &pins.api)] {
            let image = self.image(app, tag, digest);
            let id = self.image_id(app, digest);
            rolled_out(&self.production, PRODUCTION_NS, app, &image, &[&id, &id]);
        }
    }

    /// A file as first committed.
    fn initial(&self, path: &str) -> String {
        self.initial
            .iter()
            .find(|(p, _)| p == path)
            .map(|(_, c)| c.clone())
            .unwrap_or_else(|| panic!("{path} is not in the repository"))
    }

    /// A production file as first committed, with only staging's tags and `to` digests in place
    /// of production's: what a promotion must write, byte for byte.
    fn promoted(&self, path: &str, to: &Pins) -> String {
        let old = self.initial(path);
        match self.layout {
            Layout::Kustomize => old
                .replace(&format!("\"{WEB_OLD}\""), &format!("\"{WEB_NEW}\""))
                .replace(&format!("'{API_OLD}'"), &format!("'{API_NEW}'"))
                .replace(&self.old.web, &to.web)
                .replace(&self.old.api, &to.api),
            Layout::Plain => old
                .replace(
                    &format!("web:{WEB_OLD}@{}", self.old.web),
                    &format!("web:{WEB_NEW}@{}", to.web),
                )
                .replace(
                    &format!("api:{API_OLD}@{}", self.old.api),
                    &format!("api:{API_NEW}@{}", to.api),
                ),
        }
    }

    /// Asserts that the pull request branch holds production promoted to `to`, byte for byte,
    /// on top of main's `base`, and everything else as main has it.
    fn assert_pr_branch_promotes(&self, to: &Pins, base: &str) {
        for file in self.layout.production_files() {
            let on_branch = self.repo.read(PR_BRANCH, file).unwrap();
            let expected = self.promoted(file, to);
            assert_ne!(
                expected,
                self.initial(file),
                "{file}: the test changes something"
            );
            assert_eq!(on_branch, expected, "{file} on {PR_BRANCH}");
        }
        for file in self.layout.staging_files() {
            assert_eq!(
                self.repo.read(PR_BRANCH, file),
                self.repo.read("main", file),
                "{file}: staging is left as main has it"
            );
        }
        let log = self.repo.log(PR_BRANCH);
        assert_eq!(log[1].0, base, "one commit on top of main's tip: {log:?}");
    }

    /// `(state, description)` of every status `context` on `sha`, oldest first.
    fn statuses(&self, sha: &str, context: &str) -> Vec<(String, String)> {
        self.github
            .statuses(sha)
            .into_iter()
            .filter(|s| s.context == context)
            .map(|s| (s.state, s.description.unwrap_or_default()))
            .collect()
    }

    /// Every request that changed something on GitHub, as `METHOD path`.
    fn github_writes(&self) -> Vec<String> {
        self.github
            .requests()
            .iter()
            .filter(|r| r.method != "GET")
            .map(|r| format!("{} {}", r.method, r.path))
            .collect()
    }

    /// The branches of the remote and main's tip: what must not move when nothing is written.
    fn remote(&self) -> (Vec<String>, String) {
        (self.repo.branches(), self.tip())
    }
}

/// The Deployment `app` in `namespace`, its container `app` on `image`.
fn app(namespace: &str, app: &str, image: &str) -> LiveDeployment {
    LiveDeployment::new(namespace, app).container(app, image)
}

/// The name of pod `i` of Deployment `app`.
fn pod_name(app: &str, i: usize) -> String {
    format!("{app}-7d9f6c-{i}")
}

/// A Deployment `app` in `namespace` running `image`, with a finished rollout, and one running
/// pod per entry of `image_ids` (what the kubelet reports each pulled).
fn rolled_out(kube: &KubeServer, namespace: &str, app: &str, image: &str, image_ids: &[&str]) {
    let deployment = self::app(namespace, app, image).replicas(image_ids.len());
    deployment.apply(kube);
    for (i, id) in image_ids.iter().enumerate() {
        deployment.pod(&pod_name(app, i)).running(kube, &[id]);
    }
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The plan block of a pull request body.
fn plan_of(body: &str) -> tagpin::proposal::PlanBlock {
    tagpin::proposal::body::parse(body).unwrap_or_else(|| panic!("no plan block in:\n{body}"))
}

/// `(file, new digest, old tag, new tag)` of each pin of a plan block, sorted.
fn pinned(
    block: &tagpin::proposal::PlanBlock,
) -> Vec<(String, String, Option<String>, Option<String>)> {
    let mut pins: Vec<_> = block
        .pins
        .iter()
        .map(|p| {
            (
                p.file.clone(),
                p.new_digest.to_string(),
                p.old_tag.clone(),
                p.new_tag.clone(),
            )
        })
        .collect();
    pins.sort();
    pins
}

impl World {
    /// What a promotion of staging's `to` pins into production must propose.
    fn expected_pins(&self, to: &Pins) -> Vec<(String, String, Option<String>, Option<String>)> {
        let tags = |old: &str, new: &str| (Some(old.to_string()), Some(new.to_string()));
        let (web_tags, api_tags) = (tags(WEB_OLD, WEB_NEW), tags(API_OLD, API_NEW));
        let mut pins = match self.layout {
            Layout::Kustomize => {
                let file = "overlays/production/kustomization.yaml".to_string();
                vec![
                    (file.clone(), to.web.clone(), web_tags.0, web_tags.1),
                    (file, to.api.clone(), api_tags.0, api_tags.1),
                ]
            }
            Layout::Plain => vec![
                (
                    "envs/production/web.yaml".into(),
                    to.web.clone(),
                    web_tags.0,
                    web_tags.1,
                ),
                (
                    "envs/production/api.yaml".into(),
                    to.api.clone(),
                    api_tags.0,
                    api_tags.1,
                ),
            ],
        };
        pins.sort();
        pins
    }

    /// The first promotion (kustomize layout), merged by a person (main gets the promoted
    /// overlay) and applied by Argo CD on production; returns the merge commit.
    async fn merged_first_promotion(&self) -> String {
        self.first_promotion().await;
        let file = "overlays/production/kustomization.yaml";
        let promoted = self.repo.read(PR_BRANCH, file).unwrap();
        let merge = self.repo.commit_as_other_writer(
            "main",
            &[(file, &promoted)],
            &format!("Merge pull request #1 from acme/{PR_BRANCH}"),
        );
        self.github.merge_pr(1, &merge);
        self.runs_production(&self.new);
        merge
    }

    /// Runs the first promotion of a converged staging and checks it opened pull request #1;
    /// returns main's tip it was verified at.
    async fn first_promotion(&self) -> String {
        let tip = self.tip();
        let out = self.promote(&[]).await;
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        assert!(
            stdout(&out).contains(&format!("opened pull request #1 from {PR_BRANCH}")),
            "{}",
            text(&out)
        );
        assert_eq!(self.github.prs().len(), 1);
        tip
    }
}

// ---------------------------------------------------------------------------------------------
// 1. A converged staging is promoted by one pull request.

async fn a_converged_staging_is_promoted_by_one_pull_request(layout: Layout) {
    let w = World::new(layout, "0s").await;
    w.staging_pinned_and_converged().await;
    let tip = w.tip();
    w.proxy.clear_requests();

    let (code, report, out) = w.promote_json().await;

    assert_eq!(code, Some(0), "{}", text(&out));
    assert!(
        w.proxy.requests().is_empty(),
        "promote asked the registry: {:#?}",
        w.proxy.requests()
    );
    // What the user reads.
    assert_eq!(report["stage"], "production");
    assert_eq!(report["source"]["stage"], "staging");
    assert_eq!(report["source"]["commit"], tip.as_str());
    assert_eq!(report["source"]["state"], "converged");
    assert_eq!(report["source"]["summary"], "all 2 pinned images converged");
    assert_eq!(report["gate"]["gate"], "open", "{report:#}");
    let since = report["source"]["converged_since"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(since.ends_with('Z') && since.len() == 20, "{since}");
    assert_eq!(report["reason"], format!("staging converged since {since}"));
    assert_eq!(
        report["outcome"],
        json!({"outcome": "pull_request_opened", "number": 1,
               "url": format!("{}/acme/gitops/pull/1", w.github.html_url()), "branch": PR_BRANCH}),
    );
    assert_eq!(report["skipped"], json!([]));
    assert_eq!(report["failures"], json!([]));
    let changes = report["changes"].as_array().unwrap();
    assert_eq!(changes.len(), 2, "{report:#}");
    let mut new_digests: Vec<&str> = changes
        .iter()
        .map(|c| c["new_digest"].as_str().unwrap())
        .collect();
    new_digests.sort();
    let mut expected = vec![w.new.web.as_str(), w.new.api.as_str()];
    expected.sort();
    assert_eq!(new_digests, expected);

    // Exactly one pull request, from the promotion branch into main.
    let prs = w.github.prs();
    assert_eq!(prs.len(), 1);
    let pr = &prs[0];
    assert_eq!(
        (pr.head_ref.as_str(), pr.base_ref.as_str(), pr.state),
        (PR_BRANCH, "main", PrState::Open)
    );
    assert_eq!(pr.title, "Promote 2 image(s) from staging to production");
    assert_eq!(w.tip(), tip, "main is untouched");
    w.assert_pr_branch_promotes(&w.new, &tip);
    let head = w.repo.head(PR_BRANCH).unwrap();
    assert_eq!(pr.head_sha, head);

    // The statuses: the promotion on the pull request's head, staging's clock on main's tip.
    let promotion = w.statuses(&head, PROMOTION_CONTEXT);
    assert_eq!(promotion.len(), 1, "{promotion:?}");
    assert_eq!(promotion[0].0, "success");
    assert_eq!(promotion[0].1, format!("staging converged since {since}"));
    let fingerprint = report["source"]["digests"].as_str().unwrap();
    assert_eq!(
        w.statuses(&tip, STAGE_CONTEXT),
        [(
            "success".to_string(),
            format!("converged since {since} · 2 image(s) · set {fingerprint}")
        )]
    );

    // The body: the evidence and the plan block.
    let body = pr.body.clone().unwrap();
    assert!(
        body.contains("**Gate:** ✅ staging converged since"),
        "{body}"
    );
    assert!(
        body.contains(&format!("**Source:** `main` at `{tip}`")),
        "{body}"
    );
    assert!(body.contains(&format!("converged since {since}")), "{body}");
    assert!(
        body.contains(
            "| Workload | Container | Pinned digest | Pods on it / total | Verdict | Reason |"
        ),
        "{body}"
    );
    for (app, digest) in [("web", &w.new.web), ("api", &w.new.api)] {
        let row = format!(
            "| {STAGING_NS}/Deployment/{app} | {app} | `{}` | 2 / 2 | Converged |",
            &digest[..19]
        );
        assert!(body.contains(&row), "{row} in:\n{body}");
    }
    let block = plan_of(&body);
    assert_eq!(block.target, "main");
    assert_eq!(pinned(&block), w.expected_pins(&w.new));
    w.github.assert_no_violations();
    w.staging.assert_no_writes();
    w.production.assert_no_writes();
    assert!(
        w.production.requests().is_empty(),
        "promoting reads only the source stage's cluster"
    );
}

#[tokio::test]
async fn a_converged_overlay_is_promoted_by_one_pull_request_carrying_its_digests() {
    a_converged_staging_is_promoted_by_one_pull_request(Layout::Kustomize).await;
}

#[tokio::test]
async fn converged_plain_manifests_are_promoted_by_one_pull_request_carrying_their_digests() {
    a_converged_staging_is_promoted_by_one_pull_request(Layout::Plain).await;
}

// ---------------------------------------------------------------------------------------------
// 2. A staging that is not converged is not promoted.

#[tokio::test]
async fn a_staging_still_rolling_out_or_failed_is_not_promoted() {
    let w = World::new(Layout::Kustomize, "0s").await;
    w.staging_pinned_and_converged().await;
    let tip = w.tip();
    let remote = w.remote();
    // One pod of web still runs the version production runs: the rollout is not over.
    let web = w.image("web", WEB_NEW, &w.new.web);
    rolled_out(
        &w.staging,
        STAGING_NS,
        "web",
        &web,
        &[
            &w.image_id("web", &w.new.web),
            &w.image_id("web", &w.old.web),
        ],
    );

    let (code, report, out) = w.promote_json().await;
    assert_eq!(code, Some(3), "{}", text(&out));
    assert_eq!(report["gate"]["gate"], "waiting", "{report:#}");
    assert_eq!(report["source"]["state"], "progressing");
    let reason = report["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("staging is not converged yet: ") && reason.contains("web-7d9f6c-1"),
        "{reason}"
    );
    assert_eq!(report["outcome"], Value::Null);
    let human = w.promote(&[]).await;
    assert_eq!(human.status.code(), Some(3), "{}", text(&human));
    assert!(
        stdout(&human).contains("staging -> production (progressing at")
            && stdout(&human).contains("nothing promoted"),
        "{}",
        text(&human)
    );

    // The new pods cannot pull the image: failed.
    app(STAGING_NS, "web", &web)
        .pod(&pod_name("web", 1))
        .waiting(
            &w.staging,
            "ImagePullBackOff",
            &format!("Back-off pulling image \"{web}\""),
        );
    let (code, report, out) = w.promote_json().await;
    assert_eq!(code, Some(1), "{}", text(&out));
    assert_eq!(report["gate"]["gate"], "refused", "{report:#}");
    assert_eq!(report["gate"]["state"], "failed");
    let reason = report["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("staging is failed: ")
            && reason.contains("ImagePullBackOff on web-7d9f6c-1"),
        "{reason}"
    );
    assert_eq!(report["outcome"], Value::Null);

    // The api Deployment is gone from staging: the verifier calls that failed, not unverified
    // (as `tagpin verify` does), so promote exits 1.
    rolled_out(
        &w.staging,
        STAGING_NS,
        "web",
        &web,
        &[
            &w.image_id("web", &w.new.web),
            &w.image_id("web", &w.new.web),
        ],
    );
    w.staging.delete("Deployment", STAGING_NS, "api");
    let (code, report, out) = w.promote_json().await;
    assert_eq!(code, Some(1), "{}", text(&out));
    assert_eq!(report["gate"]["state"], "failed", "{report:#}");
    assert!(
        report["reason"].as_str().unwrap().contains(&format!(
            "{STAGING_NS}/Deployment/api (api): workload missing"
        )),
        "{report:#}"
    );

    assert_eq!(w.remote(), remote, "nothing pushed");
    assert!(w.github.prs().is_empty());
    // Each verdict is on staging's status, oldest first.
    let states: Vec<String> = w
        .statuses(&tip, STAGE_CONTEXT)
        .into_iter()
        .map(|(state, _)| state)
        .collect();
    assert_eq!(states, ["pending", "failure", "failure"]);
    assert!(
        w.github_writes()
            .iter()
            .all(|r| r == &format!("POST /repos/acme/gitops/statuses/{tip}")),
        "{:?}",
        w.github_writes()
    );
    w.github.assert_no_violations();
}

#[tokio::test]
async fn an_unverified_staging_is_refused_with_exit_4() {
    let rc = "# The old storefront, still a ReplicationController.\n\
              apiVersion: v1\n\
              kind: ReplicationController\n\
              metadata:\n  name: web-legacy\n  namespace: shop-staging\n\
              spec:\n  replicas: 1\n  selector:\n    app: web-legacy\n  template:\n    metadata:\n      labels:\n        app: web-legacy\n\
              \x20   spec:\n      containers:\n        - name: web\n          image: {host}/acme/web:1.5.0\n";
    let w = World::with_extra(Layout::Plain, "0s", &[("envs/staging/web-legacy.yaml", rc)]).await;
    w.staging_pinned_and_converged().await;
    assert!(w
        .repo
        .read("main", "envs/staging/web-legacy.yaml")
        .unwrap()
        .contains(&w.new.web));
    let remote = w.remote();

    let (code, report, out) = w.promote_json().await;

    assert_eq!(code, Some(4), "{}", text(&out));
    assert_eq!(report["source"]["state"], "unverified");
    assert_eq!(
        report["gate"],
        json!({"gate": "refused", "state": "unverified",
               "reason": "1 pinned image matched no live workload; 2 converged"})
    );
    assert_eq!(
        report["reason"],
        "staging is unverified: 1 pinned image matched no live workload; 2 converged"
    );
    assert_eq!(report["outcome"], Value::Null);
    assert_eq!(w.remote(), remote);
    assert!(w.github.prs().is_empty());
    assert_eq!(
        w.statuses(&w.tip(), STAGE_CONTEXT),
        [(
            "error".to_string(),
            "1 pinned image matched no live workload; 2 converged".to_string()
        )]
    );
    w.github.assert_no_violations();
}

// ---------------------------------------------------------------------------------------------
// 3. The soak time, read back from staging's status by the next process.

#[tokio::test]
async fn the_soak_clock_is_read_back_from_the_stage_status_by_the_next_pass() {
    let w = World::new(Layout::Kustomize, "3s").await;
    w.staging_pinned_and_converged().await;
    let tip = w.tip();
    let remote = w.remote();

    let (code, report, out) = w.promote_json().await;
    assert_eq!(code, Some(3), "{}", text(&out));
    assert_eq!(report["gate"]["gate"], "soaking", "{report:#}");
    let since = report["gate"]["since"].as_i64().unwrap();
    let remaining = report["gate"]["remaining_seconds"].as_u64().unwrap();
    assert!((1..=3).contains(&remaining), "{report:#}");
    let converged_since = report["source"]["converged_since"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        report["reason"].as_str().unwrap().starts_with(&format!(
            "staging converged since {converged_since}; soak 3s not over, "
        )),
        "{report:#}"
    );
    assert_eq!(report["outcome"], Value::Null);
    assert_eq!(w.remote(), remote);
    assert!(w.github.prs().is_empty());

    // The soak passes, on the forge's clock and tagpin's alike.
    w.github.advance_clock(Duration::from_secs(remaining));
    let report = w.promote_at_forge_time().await;

    assert_eq!(
        report["gate"],
        json!({"gate": "open", "since": since}),
        "the same clock"
    );
    assert_eq!(
        report["source"]["converged_since"],
        converged_since.as_str()
    );
    assert_eq!(
        report["reason"],
        format!("staging converged since {converged_since} (soak 3s held)")
    );
    assert_eq!(report["outcome"]["outcome"], "pull_request_opened");
    assert_eq!(w.github.prs().len(), 1);
    w.assert_pr_branch_promotes(&w.new, &tip);
    let head = w.repo.head(PR_BRANCH).unwrap();
    assert_eq!(
        w.statuses(&head, PROMOTION_CONTEXT),
        [(
            "success".to_string(),
            format!("staging converged since {converged_since} (soak 3s held)")
        )]
    );
    // One status on staging's commit: the clock was read back, not restarted.
    assert_eq!(w.statuses(&tip, STAGE_CONTEXT).len(), 1);
    w.github.assert_no_violations();
}

/// `promotion.stages[].soak_restarts: 0`: a container restart in staging's pods during the
/// soak starts the soak again, and the gate names who restarted; without new restarts the
/// soak then runs its full time from the restart.
#[tokio::test]
async fn a_restart_during_the_soak_starts_it_again_and_the_gate_says_so() {
    let w = World::new(Layout::Kustomize, "10m").await;
    w.configure_clusters(&w.cluster("staging"), "10m\n    soak_restarts: 0");
    w.staging_pinned_and_converged().await;
    let tip = w.tip();

    let report = w.promote_at_forge_time().await;
    assert_eq!(report["gate"]["gate"], "soaking", "{report:#}");
    let first_since = report["gate"]["since"].as_i64().unwrap();
    let stage = w.statuses(&tip, STAGE_CONTEXT);
    assert_eq!(stage.len(), 1, "{stage:?}");
    assert!(stage[0].1.ends_with(" · restarts 0"), "{stage:?}");

    // Five minutes in, web's first pod restarts twice (still on the pinned digest).
    w.github.advance_clock(Duration::from_secs(300));
    let web = w.image("web", WEB_NEW, &w.new.web);
    let id = w.image_id("web", &w.new.web);
    app(STAGING_NS, "web", &web)
        .replicas(2)
        .pod(&pod_name("web", 0))
        .restarted(&w.staging, &[&id], 2);
    let report = w.promote_at_forge_time().await;
    assert_eq!(report["gate"]["gate"], "soaking", "{report:#}");
    assert_eq!(report["gate"]["restarted"]["restarts"], 2, "{report:#}");
    assert_eq!(report["gate"]["restarted"]["workloads"], json!(["web"]));
    let since = report["gate"]["since"].as_i64().unwrap();
    assert!(
        since >= first_since + 300,
        "soaking again since now: {report:#}"
    );
    let reason = report["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("web restarted 2 times in the last 5m"),
        "{reason}"
    );
    assert!(reason.contains("; soaking again since "), "{reason}");
    assert_eq!(report["outcome"], Value::Null);
    // The new start and the restart count it counts from are on staging's commit.
    let stage = w.statuses(&tip, STAGE_CONTEXT);
    assert_eq!(stage.len(), 2, "{stage:?}");
    assert!(
        stage.iter().any(|(_, d)| d.ends_with(" · restarts 2")),
        "{stage:?}"
    );

    // Past the end of the first soak, but not ten minutes after the restart: still soaking,
    // on the clock read back, and no restart counted twice.
    w.github.advance_clock(Duration::from_secs(360));
    let report = w.promote_at_forge_time().await;
    assert_eq!(
        report["gate"],
        json!({"gate": "soaking", "since": since, "remaining_seconds": report["gate"]["remaining_seconds"]}),
        "{report:#}"
    );
    assert!(w.github.prs().is_empty());

    // Ten minutes after the restart, none since: the gate opens and production is proposed.
    w.github.advance_clock(Duration::from_secs(240));
    let report = w.promote_at_forge_time().await;
    assert_eq!(
        report["gate"],
        json!({"gate": "open", "since": since}),
        "{report:#}"
    );
    assert_eq!(report["outcome"]["outcome"], "pull_request_opened");
    w.github.assert_no_violations();
}

#[tokio::test]
async fn the_soak_clock_is_not_carried_across_commits_that_pinned_other_digests_in_between() {
    let w = World::new(Layout::Kustomize, "1h").await;
    w.staging_pinned_and_converged().await;
    let (code, report, out) = w.promote_json().await;
    assert_eq!(code, Some(3), "{}", text(&out));
    let since = report["gate"]["since"].as_i64().unwrap();

    // Between two passes, staging is pinned to other digests (a bad build) and back (a
    // revert): no pass saw either commit, but staging did not stay on these digests.
    let file = "overlays/staging/kustomization.yaml";
    let converged = w.repo.read("main", file).unwrap();
    let other = converged.replace(&w.new.web, &w.old.web);
    assert_ne!(other, converged);
    w.repo
        .commit_as_other_writer("main", &[(file, &other)], "web: try another build");
    w.repo.commit_as_other_writer(
        "main",
        &[(file, &converged)],
        "Revert \"web: try another build\"",
    );
    // Two seconds later, on the forge's clock and tagpin's.
    w.github.advance_clock(Duration::from_secs(2));

    let report = w.promote_at_forge_time().await;
    assert_eq!(report["gate"]["gate"], "soaking", "{report:#}");
    assert!(
        report["gate"]["since"].as_i64().unwrap() > since,
        "the clock of the digests before the change was carried over: {report:#}"
    );
    // A commit that leaves staging's digests alone keeps the clock.
    let since = report["gate"]["since"].as_i64().unwrap();
    w.repo
        .commit_as_other_writer("main", &[("README.md", "# shop\n")], "docs");
    w.github.advance_clock(Duration::from_secs(2));
    let report = w.promote_at_forge_time().await;
    assert_eq!(report["gate"]["gate"], "soaking", "{report:#}");
    assert_eq!(report["gate"]["since"].as_i64(), Some(since), "{report:#}");
    w.github.assert_no_violations();
}

#[tokio::test]
async fn a_stage_status_posted_by_another_creator_does_not_move_the_soak_clock() {
    let w = World::new(Layout::Kustomize, "1h").await;
    w.staging_pinned_and_converged().await;
    let (code, report, out) = w.promote_json().await;
    assert_eq!(code, Some(3), "{}", text(&out));
    assert_eq!(report["gate"]["gate"], "soaking", "{report:#}");
    let since = report["gate"]["since"].as_i64().unwrap();
    let fingerprint = report["source"]["digests"].as_str().unwrap().to_string();

    // A CI job with status rights posts tagpin's context on the same commit, with the same
    // fingerprint, claiming staging converged a day ago.
    let tip = w.tip();
    w.github.add_status_as(
        "ci-bot",
        &tip,
        "success",
        STAGE_CONTEXT,
        &format!("converged since 2020-01-01T00:00:00Z · 2 image(s) · set {fingerprint}"),
    );
    let (code, report, out) = w.promote_json().await;

    assert_eq!(code, Some(3), "{}", text(&out));
    assert_eq!(report["gate"]["gate"], "soaking", "{report:#}");
    assert_eq!(report["gate"]["since"].as_i64(), Some(since), "{report:#}");
    assert!(w.github.prs().is_empty(), "nothing promoted");
    assert!(
        text(&out).contains("set by ci-bot is ignored"),
        "{}",
        text(&out)
    );
    w.github.assert_no_violations();
}

// ---------------------------------------------------------------------------------------------
// 4. Staging moves on while the pull request is open.

#[tokio::test]
async fn staging_moving_on_updates_the_same_pull_request() {
    let w = World::new(Layout::Kustomize, "0s").await;
    w.staging_pinned_and_converged().await;
    w.first_promotion().await;
    let first_head = w.repo.head(PR_BRANCH).unwrap();

    // web 1.5.0 is rebuilt: sync pins the new digest on main, and staging rolls it out.
    let rebuilt = w.rebuild_web_and_sync().await;
    let moved = Pins {
        web: rebuilt,
        api: w.new.api.clone(),
    };
    w.runs_staging(&moved);
    let tip = w.tip();
    w.proxy.clear_requests();

    let (code, report, out) = w.promote_json().await;

    assert_eq!(code, Some(0), "{}", text(&out));
    assert!(w.proxy.requests().is_empty(), "{:#?}", w.proxy.requests());
    assert_eq!(report["source"]["commit"], tip.as_str());
    assert_eq!(
        report["outcome"]["outcome"], "pull_request_updated",
        "{report:#}"
    );
    assert_eq!(report["outcome"]["number"], 1);
    let prs = w.github.prs();
    assert_eq!(prs.len(), 1, "the same pull request, not a second one");
    assert_eq!(prs[0].state, PrState::Open);
    w.assert_pr_branch_promotes(&moved, &tip);
    let head = w.repo.head(PR_BRANCH).unwrap();
    assert_ne!(head, first_head);
    let body = prs[0].body.clone().unwrap();
    assert_eq!(pinned(&plan_of(&body)), w.expected_pins(&moved));
    assert!(
        body.contains(&format!("**Source:** `main` at `{tip}`")),
        "{body}"
    );
    assert_eq!(w.statuses(&head, PROMOTION_CONTEXT)[0].0, "success");
    w.github.assert_no_violations();
}

#[tokio::test]
async fn an_open_pull_request_held_while_staging_soaks_is_not_edited_on_every_pass() {
    let w = World::new(Layout::Kustomize, "0s").await;
    w.staging_pinned_and_converged().await;
    w.first_promotion().await;
    // From now on a soak of an hour; staging moves on to a rebuilt web, which soaks.
    w.configure("1h");
    let rebuilt = w.rebuild_web_and_sync().await;
    w.runs_staging(&Pins {
        web: rebuilt,
        api: w.new.api.clone(),
    });
    let (code, report, out) = w.promote_json().await;
    assert_eq!(code, Some(3), "{}", text(&out));
    assert_eq!(report["gate"]["gate"], "soaking", "{report:#}");
    let body = w.github.prs()[0].body.clone().unwrap();
    assert!(body.contains("now pins other digests"), "{body}");
    let writes = w.github_writes();

    // The next pass, a little later: the soak is the same, so is what the pull request says.
    w.github.advance_clock(Duration::from_secs(2));
    let report = w.promote_at_forge_time().await;
    assert_eq!(report["gate"]["gate"], "soaking", "{report:#}");
    assert_eq!(
        w.github_writes(),
        writes,
        "the body or status was rewritten though nothing changed"
    );
    assert_eq!(w.github.prs()[0].body.clone().unwrap(), body);
    w.github.assert_no_violations();
}

#[tokio::test]
async fn a_pull_request_opened_is_reported_even_if_its_head_cannot_be_read_back_for_the_status() {
    let w = World::new(Layout::Plain, "0s").await;
    w.staging_pinned_and_converged().await;
    // GitHub fails to answer for the new pull request, after tagpin pushed and opened it.
    w.github
        .inject(support::github::Fault::new("GET", "/pulls/1", 502));

    let (code, report, out) = w.promote_json().await;

    assert_eq!(code, Some(0), "the pull request was opened: {}", text(&out));
    assert_eq!(
        report["outcome"]["outcome"], "pull_request_opened",
        "{report:#}"
    );
    assert_eq!(w.github.prs().len(), 1);
    // The next pass sets the status it could not set.
    let head = w.repo.head(PR_BRANCH).unwrap();
    let (code, _, out) = w.promote_json().await;
    assert_eq!(code, Some(0), "{}", text(&out));
    assert_eq!(w.statuses(&head, PROMOTION_CONTEXT)[0].0, "success");
    assert_eq!(w.github.prs().len(), 1);
}

// ---------------------------------------------------------------------------------------------
// 5. Staging regresses while the pull request is open.

#[tokio::test]
async fn a_regression_in_staging_fails_the_open_pull_request_and_keeps_its_digests() {
    let w = World::new(Layout::Plain, "0s").await;
    w.staging_pinned_and_converged().await;
    w.first_promotion().await;
    let head = w.repo.head(PR_BRANCH).unwrap();
    let body_before = w.github.prs()[0].body.clone().unwrap();

    // api crash-loops in staging on the very digests the pull request promotes.
    w.api_crash_loops_in_staging();
    let (code, report, out) = w.promote_json().await;

    assert_eq!(code, Some(1), "{}", text(&out));
    assert_eq!(report["gate"]["gate"], "refused", "{report:#}");
    assert_eq!(report["gate"]["state"], "failed");
    let reason = report["reason"].as_str().unwrap().to_string();
    assert!(
        reason.starts_with("staging is failed: ")
            && reason.contains("CrashLoopBackOff on api-7d9f6c-0"),
        "{reason}"
    );
    assert_eq!(
        report["outcome"]["outcome"], "pull_request_updated",
        "{report:#}"
    );
    assert_eq!(
        w.repo.head(PR_BRANCH).unwrap(),
        head,
        "the branch keeps its digests"
    );
    w.assert_pr_branch_promotes(&w.new, &w.tip());
    let pr = &w.github.prs()[0];
    assert_eq!(pr.state, PrState::Open);
    let body = pr.body.clone().unwrap();
    assert_ne!(body, body_before);
    assert!(body.contains("**Gate:** ❌ staging is failed: "), "{body}");
    assert!(body.contains("CrashLoopBackOff on api-7d9f6c-0"), "{body}");
    assert!(body.contains("should not be merged yet"), "{body}");
    assert_eq!(plan_of(&body), plan_of(&body_before), "the same digests");
    let statuses = w.statuses(&head, PROMOTION_CONTEXT);
    let states: Vec<&str> = statuses.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(states, ["success", "failure"], "{statuses:?}");
    assert!(
        statuses[1].1.starts_with("staging is failed: "),
        "{statuses:?}"
    );

    // The crash is fixed in staging (a config change, not a new image): the evidence holds
    // again, from now, and the same pull request says so.
    w.runs_staging(&w.new);
    let (code, report, out) = w.promote_json().await;
    assert_eq!(code, Some(0), "{}", text(&out));
    assert_eq!(report["gate"]["gate"], "open", "{report:#}");
    assert_eq!(
        report["outcome"]["outcome"], "pull_request_updated",
        "{report:#}"
    );
    assert_eq!(w.github.prs().len(), 1);
    assert_eq!(w.repo.head(PR_BRANCH).unwrap(), head, "nothing to push");
    let body = w.github.prs()[0].body.clone().unwrap();
    assert!(
        body.contains("**Gate:** ✅ staging converged since"),
        "{body}"
    );
    assert!(!body.contains("should not be merged yet"), "{body}");
    assert_eq!(plan_of(&body), plan_of(&body_before));
    let states: Vec<String> = w
        .statuses(&head, PROMOTION_CONTEXT)
        .into_iter()
        .map(|(state, _)| state)
        .collect();
    assert_eq!(states, ["success", "failure", "success"]);
    w.github.assert_no_violations();
}

// ---------------------------------------------------------------------------------------------
// 6. A pull request closed by hand.

#[tokio::test]
async fn a_promotion_closed_by_hand_is_not_reopened_for_the_same_digests() {
    let w = World::new(Layout::Plain, "0s").await;
    w.staging_pinned_and_converged().await;
    w.first_promotion().await;
    let head = w.repo.head(PR_BRANCH);
    w.github.close_pr(1);
    let writes = w.github_writes().len();

    let out = w.promote(&[]).await;

    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        stdout(&out).contains(&format!(
            "pull request #1 from {PR_BRANCH} was closed by hand for these same digests; not reopening"
        )),
        "{}",
        text(&out)
    );
    let prs = w.github.prs();
    assert_eq!(prs.len(), 1, "no new pull request");
    assert_eq!(prs[0].state, PrState::Closed);
    assert_eq!(w.repo.head(PR_BRANCH), head);
    assert_eq!(w.github_writes().len(), writes, "{:?}", w.github_writes());

    // Staging moves on: new digests are a new question, asked in a new pull request.
    let rebuilt = w
        .registry
        .push_image("acme/api", API_NEW, "api-2.1.0-rebuilt")
        .await
        .manifest;
    w.sync().await;
    let moved = Pins {
        web: w.new.web.clone(),
        api: rebuilt,
    };
    w.runs_staging(&moved);
    let (code, report, out) = w.promote_json().await;
    assert_eq!(code, Some(0), "{}", text(&out));
    assert_eq!(
        report["outcome"]["outcome"], "pull_request_opened",
        "{report:#}"
    );
    assert_eq!(report["outcome"]["number"], 2);
    let prs = w.github.prs();
    assert_eq!(
        prs.iter().map(|p| p.state).collect::<Vec<_>>(),
        [PrState::Closed, PrState::Open]
    );
    w.assert_pr_branch_promotes(&moved, &w.tip());
    w.github.assert_no_violations();
}

// ---------------------------------------------------------------------------------------------
// 7. Merged: verified on production, then nothing to promote.

#[tokio::test]
async fn a_merged_promotion_is_verified_on_production_and_leaves_nothing_to_promote() {
    let w = World::new(Layout::Kustomize, "0s").await;
    w.staging_pinned_and_converged().await;
    let merge = w.merged_first_promotion().await;

    let out = w.tagpin(&["verify", "--pr", "1"]).await;

    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    for app in ["web", "api"] {
        assert!(
            stdout(&out).contains(&format!(
                "{PRODUCTION_NS}/Deployment/{app} {app}: Converged (2 of 2 pods"
            )),
            "{}",
            text(&out)
        );
    }
    assert!(
        w.staging
            .requests()
            .iter()
            .all(|r| !r.path.contains(&format!("/namespaces/{PRODUCTION_NS}/"))),
        "production is verified on its own cluster"
    );
    let converged = w.statuses(&merge, "tagpin/converged");
    let states: Vec<&str> = converged.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(states, ["pending", "success"], "{converged:?}");
    let comments = w.github.comments(1);
    assert_eq!(comments.len(), 1, "{comments:?}");
    for (app, digest) in [("web", &w.new.web), ("api", &w.new.api)] {
        let row = format!(
            "| {PRODUCTION_NS}/Deployment/{app} | {app} | `{}` | 2 / 2 | Converged |",
            &digest[..19]
        );
        assert!(
            comments[0].body.contains(&row),
            "{row} in:\n{}",
            comments[0].body
        );
    }

    // Each stage verified on its own cluster, at main's tip.
    let staging_requests = w.staging.requests().len();
    let out = w
        .tagpin(&["verify", "--stage", "production", "--branch", "main"])
        .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        stdout(&out).starts_with("Converged: all 2 pinned images converged\n"),
        "{}",
        text(&out)
    );
    assert_eq!(w.staging.requests().len(), staging_requests);
    let out = w
        .tagpin(&["verify", "--stage", "staging", "--branch", "main"])
        .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        stdout(&out).contains(&format!(
            "{STAGING_NS}/Deployment/web web: Converged (2 of 2 pods"
        )),
        "{}",
        text(&out)
    );

    let report = w.promote_finds_nothing_to_do().await;
    assert_eq!(report["changes"], json!([]));
    assert_eq!(report["source"]["commit"], merge.as_str());
    let out = w.promote(&[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        stdout(&out).contains("nothing to promote: production already pins what staging runs"),
        "{}",
        text(&out)
    );
    assert_eq!(w.github.prs().len(), 1, "no new pull request");
    w.github.assert_no_violations();
    w.production.assert_no_writes();
}

// ---------------------------------------------------------------------------------------------
// 8. A restart repeats nothing.

#[tokio::test]
async fn a_second_pass_in_a_row_changes_nothing() {
    let w = World::new(Layout::Plain, "0s").await;
    w.staging_pinned_and_converged().await;
    let tip = w.first_promotion().await;
    let head = w.repo.head(PR_BRANCH).unwrap();
    let body = w.github.prs()[0].body.clone();
    let writes = w.github_writes();
    let log = w.repo.log(PR_BRANCH);

    let (code, report, out) = w.promote_json().await;

    assert_eq!(code, Some(0), "{}", text(&out));
    // Its body may be refreshed (main moved, so the source commit did); its branch is not.
    assert_eq!(report["outcome"]["number"], 1, "{report:#}");
    assert_eq!(w.repo.log(PR_BRANCH), log, "no new commit on the branch");
    assert_eq!(w.repo.head(PR_BRANCH).unwrap(), head);
    assert_eq!(w.github.prs()[0].body, body, "the body is unchanged");
    assert_eq!(w.github_writes(), writes, "nothing written to GitHub");
    assert_eq!(w.statuses(&head, PROMOTION_CONTEXT).len(), 1);
    assert_eq!(w.statuses(&tip, STAGE_CONTEXT).len(), 1);
    w.github.assert_no_violations();
}

// ---------------------------------------------------------------------------------------------
// 9. Bad input: exit 2, named, nothing written.

impl World {
    /// Asserts `promote` exits 2 with `message` on stderr, having written nothing anywhere.
    async fn assert_refused(&self, args: &[&str], message: &str) {
        let remote = self.remote();
        let github_writes = self.github_writes();
        let out = self.tagpin(args).await;
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        assert!(
            stderr(&out).contains(message),
            "{args:?}: {message:?} in\n{}",
            text(&out)
        );
        assert!(stdout(&out).is_empty(), "{}", text(&out));
        assert_eq!(self.remote(), remote, "{args:?}: nothing pushed");
        assert_eq!(
            self.github_writes(),
            github_writes,
            "{args:?}: nothing written to GitHub"
        );
    }
}

#[tokio::test]
async fn a_stage_that_cannot_be_promoted_into_is_named_with_the_stages() {
    let w = World::new(Layout::Kustomize, "0s").await;
    w.staging_pinned_and_converged().await;
    w.assert_refused(
        &["promote", "--to", "nosuch"],
        "--to nosuch: no such stage (stages: staging, production)",
    )
    .await;
    w.assert_refused(
        &["promote", "--to", "staging"],
        "--to staging: staging is the first stage; sync pins it from the registry",
    )
    .await;
    assert!(w.github.requests().is_empty());
    assert!(w.staging.requests().is_empty());
}

#[tokio::test]
async fn a_source_cluster_that_cannot_be_reached_is_fatal_and_nothing_is_written() {
    let w = World::new(Layout::Plain, "0s").await;
    w.staging_pinned_and_converged().await;
    let promote = ["promote", "--to", "production"];

    let missing = w.dir.path().join("staging").join("missing.kubeconfig");
    w.configure_clusters(&format!("{{kubeconfig: '{}'}}", missing.display()), "0s");
    w.assert_refused(
        &promote,
        &format!(
            "stage staging: cannot reach its cluster (kubeconfig {})",
            missing.display()
        ),
    )
    .await;

    let kubeconfig = w.kubeconfig("staging");
    w.configure_clusters(
        &format!(
            "{{kubeconfig: '{}', context: nosuch}}",
            kubeconfig.display()
        ),
        "0s",
    );
    w.assert_refused(
        &promote,
        &format!(
            "stage staging: cannot reach its cluster (context \"nosuch\" of kubeconfig {})",
            kubeconfig.display()
        ),
    )
    .await;

    // A kubeconfig whose API server is down.
    let down = {
        let kube = KubeServer::start().await;
        let path = w.dir.path().join("down.kubeconfig");
        std::fs::write(&path, kube.kubeconfig_yaml()).unwrap();
        path
    };
    w.configure_clusters(&format!("{{kubeconfig: '{}'}}", down.display()), "0s");
    w.assert_refused(
        &promote,
        &format!(
            "stage staging: cannot reach its cluster (kubeconfig {})",
            down.display()
        ),
    )
    .await;
    assert!(w.github.prs().is_empty());
    assert!(w.staging.requests().is_empty());
}

#[tokio::test]
async fn configuration_errors_name_the_fields_and_nothing_is_written() {
    let w = World::new(Layout::Kustomize, "0s").await;
    let staging = w.cluster("staging");
    let production = w.cluster("production");
    let promote = ["promote", "--to", "production"];

    w.write_config(&format!(
        "  - {{name: staging, paths: [overlays/staging], cluster: {staging}}}\n\
         \x20 - {{name: production, paths: [overlays/production], cluster: {production}}}\n\
         \x20 - {{name: staging, paths: [overlays/canary], cluster: {production}}}\n"
    ));
    w.assert_refused(
        &promote,
        "promotion.stages[2].name: \"staging\" is also the name of stages[0]",
    )
    .await;

    w.write_config(&format!(
        "  - {{name: staging, paths: [overlays/staging], cluster: {staging}}}\n\
         \x20 - {{name: production, paths: [overlays], cluster: {production}}}\n"
    ));
    w.assert_refused(
        &promote,
        "promotion.stages[1].paths[0]: \"overlays\" of stage \"production\" overlaps \"overlays/staging\" of stage \"staging\"",
    )
    .await;
    assert!(w.github.requests().is_empty());
    assert!(w.staging.requests().is_empty());
}

#[tokio::test]
async fn a_repository_staging_never_pinned_is_a_named_skip_and_the_rest_is_promoted() {
    let worker = workload_yaml(
        "worker",
        Some(PRODUCTION_NS),
        &format!("{{host}}/acme/worker:3.2.0@sha256:{}", "4".repeat(64)),
    );
    let w = World::with_extra(
        Layout::Plain,
        "0s",
        &[("envs/production/worker.yaml", &worker)],
    )
    .await;
    w.staging_pinned_and_converged().await;
    let tip = w.tip();

    let (code, report, out) = w.promote_json().await;

    assert_eq!(code, Some(0), "{}", text(&out));
    let image = format!("{}/acme/worker:3.2.0@sha256:{}", w.host, "4".repeat(64));
    assert_eq!(
        report["skipped"],
        json!([{"file": "envs/production/worker.yaml", "line": 22, "image": image, "why": "not_in_source"}])
    );
    assert_eq!(report["outcome"]["outcome"], "pull_request_opened");
    w.assert_pr_branch_promotes(&w.new, &tip);
    assert_eq!(
        w.repo.read(PR_BRANCH, "envs/production/worker.yaml"),
        w.repo.read("main", "envs/production/worker.yaml"),
    );
    assert_eq!(
        pinned(&plan_of(&w.github.prs()[0].body.clone().unwrap())),
        w.expected_pins(&w.new)
    );

    // In words, with the file and line.
    w.github.close_pr(1);
    let human = w.promote(&[]).await;
    assert_eq!(human.status.code(), Some(0), "{}", text(&human));
    assert!(
        stdout(&human).contains(&format!(
            "  envs/production/worker.yaml:22: {image}: left as it is: staging does not use this repository\n"
        )),
        "{}",
        text(&human)
    );
    w.github.assert_no_violations();
}

// ---------------------------------------------------------------------------------------------
// 10. Dry run.

#[tokio::test]
async fn dry_run_prints_the_pull_request_it_would_open_and_writes_nothing() {
    let w = World::new(Layout::Kustomize, "0s").await;
    w.staging_pinned_and_converged().await;
    let tip = w.tip();
    let remote = w.remote();
    let writes = w.github_writes();

    let out = w.promote(&["--dry-run"]).await;

    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let t = stdout(&out);
    assert!(
        t.starts_with(&format!(
            "staging -> production (converged at {}): staging converged since ",
            &tip[..12]
        )),
        "{t}"
    );
    assert!(
        t.contains("+++ b/overlays/production/kustomization.yaml"),
        "{t}"
    );
    assert!(t.contains(&format!("-    digest: {}", w.old.web)), "{t}");
    assert!(t.contains(&format!("+    digest: {}", w.new.web)), "{t}");
    assert!(
        t.contains(&format!("dry run: would propose on {PR_BRANCH}:")),
        "{t}"
    );
    assert!(
        t.contains("title: Promote 2 image(s) from staging to production"),
        "{t}"
    );
    assert!(t.contains(&format!("**Source:** `main` at `{tip}`")), "{t}");
    let body = &t[t
        .find("tagpin promotes to **production**")
        .expect("the body")..];
    assert_eq!(pinned(&plan_of(body)), w.expected_pins(&w.new));

    assert_eq!(w.remote(), remote, "nothing pushed");
    assert!(w.github.prs().is_empty());
    assert_eq!(w.github_writes(), writes, "no status, no pull request");
    assert!(w.statuses(&tip, STAGE_CONTEXT).is_empty());
    w.github.assert_no_violations();
}

#[tokio::test]
async fn dry_run_with_a_promotion_open_and_staging_failing_writes_nothing_and_says_so() {
    let w = World::new(Layout::Plain, "0s").await;
    w.staging_pinned_and_converged().await;
    w.first_promotion().await;
    let body_before = w.github.prs()[0].body.clone();
    let head = w.repo.head(PR_BRANCH).unwrap();
    let writes = w.github_writes();
    w.api_crash_loops_in_staging();

    let out = w.promote(&["--dry-run"]).await;

    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let t = stdout(&out);
    assert!(!t.contains("updated pull request"), "{}", text(&out));
    // What the body of the open pull request would become.
    assert!(
        t.contains(&format!("dry run: would propose on {PR_BRANCH}:")),
        "{t}"
    );
    assert!(t.contains("**Gate:** ❌ staging is failed: "), "{t}");
    assert!(t.contains("CrashLoopBackOff on api-7d9f6c-0"), "{t}");
    assert_eq!(w.github.prs()[0].body, body_before);
    assert_eq!(w.repo.head(PR_BRANCH).unwrap(), head);
    assert_eq!(w.github_writes(), writes, "no status, no edit");
}

// ---------------------------------------------------------------------------------------------
// A manifest that cannot be read: never a partial promotion.

#[tokio::test]
async fn an_unreadable_production_manifest_stops_the_promotion_with_exit_1() {
    let broken = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: cache\n  namespace: shop\nspec:\n  template:\n    spec:\n      containers:\n        - name: cache\n          image: [unclosed\n";
    let w = World::with_extra(
        Layout::Plain,
        "0s",
        &[("envs/production/cache.yaml", broken)],
    )
    .await;
    w.staging_pinned_and_converged().await;
    let remote = w.remote();

    let (code, report, out) = w.promote_json().await;

    assert_eq!(code, Some(1), "{}", text(&out));
    assert_eq!(report["gate"]["gate"], "open", "{report:#}");
    let failures = report["failures"].as_array().unwrap();
    assert_eq!(failures.len(), 1, "{report:#}");
    let failure = failures[0].as_str().unwrap();
    assert!(
        failure.starts_with("envs/production/cache.yaml:"),
        "{failure}"
    );
    assert!(
        stderr(&out).contains(&format!("error: {failure}")),
        "{}",
        text(&out)
    );
    assert_eq!(report["outcome"], Value::Null);
    assert_eq!(w.remote(), remote, "nothing pushed");
    assert!(w.github.prs().is_empty());
    w.github.assert_no_violations();
}

/// A production manifest that breaks while a promotion is open: the pull request is neither
/// updated nor left saying success; its status says why nothing was updated.
#[tokio::test]
async fn an_open_promotion_is_held_pending_while_a_production_manifest_cannot_be_read() {
    let w = World::new(Layout::Plain, "0s").await;
    w.staging_pinned_and_converged().await;
    w.first_promotion().await;
    let head = w.github.prs()[0].head_sha.clone();
    assert_eq!(
        w.statuses(&head, PROMOTION_CONTEXT).last().unwrap().0,
        "success"
    );
    w.repo.commit_as_other_writer(
        "main",
        &[(
            "envs/production/cache.yaml",
            "kind: Deployment\nspec: [unclosed\n",
        )],
        "A broken manifest lands on main",
    );
    let branch_before = w.repo.head(PR_BRANCH);

    let (code, report, out) = w.promote_json().await;

    assert_eq!(code, Some(1), "{}", text(&out));
    // Its body may be refreshed (main moved, so the source commit did); its branch is not.
    assert_eq!(report["outcome"]["number"], 1, "{report:#}");
    let (state, description) = w.statuses(&head, PROMOTION_CONTEXT).last().unwrap().clone();
    assert_eq!(state, "pending");
    assert!(
        description.starts_with(
            "not updated: 1 manifest(s) or field(s) cannot be read: envs/production/cache.yaml:"
        ),
        "{description}"
    );
    assert_eq!(
        w.repo.head(PR_BRANCH),
        branch_before,
        "the PR branch is left as it was"
    );
    w.github.assert_no_violations();
}

// ---------------------------------------------------------------------------------------------
// Promotion by commit.

#[tokio::test]
async fn a_stage_promoted_by_commit_gets_one_commit_on_main_and_then_nothing() {
    let w = World::new(Layout::Kustomize, "0s").await;
    w.write_config(&format!(
        "  - name: staging\n    paths: [overlays/staging]\n    cluster: {}\n\
         \x20 - name: production\n    paths: [overlays/production]\n    cluster: {}\n    mode: commit\n",
        w.cluster("staging"),
        w.cluster("production"),
    ));
    w.staging_pinned_and_converged().await;
    let tip = w.tip();

    let (code, report, out) = w.promote_json().await;

    assert_eq!(code, Some(0), "{}", text(&out));
    let commit = w.tip();
    assert_ne!(commit, tip);
    assert_eq!(
        report["outcome"],
        json!({"outcome": "committed", "branch": "main", "commit": commit, "attempts": 1})
    );
    assert_eq!(
        w.repo.log("main")[1].0,
        tip,
        "one commit on top of the verified tip"
    );
    let file = "overlays/production/kustomization.yaml";
    assert_eq!(w.repo.read("main", file).unwrap(), w.promoted(file, &w.new));
    let message = support::git::git_ok(w.repo.path(), &["log", "-1", "--format=%B", "main"]);
    assert!(
        message.starts_with("Promote 2 image(s) from staging to production\n\n"),
        "{message}"
    );
    assert!(
        message.contains(&format!(
            "Evidence: staging at {tip}; staging converged since "
        )),
        "{message}"
    );
    assert!(w.github.prs().is_empty());
    assert!(w.repo.head(PR_BRANCH).is_none());

    w.promote_finds_nothing_to_do().await;
    assert_eq!(w.tip(), commit);
    w.github.assert_no_violations();
}

/// A mirror damaged since the last pass (a crash, a full disk, a killed fetch) is moved aside
/// and cloned again by the promotion pass that finds it, which promotes as it would have.
#[tokio::test]
async fn a_damaged_mirror_is_repaired_within_the_promotion_pass() {
    use support::mirror_damage::{damage, mirror_in, moved_aside, Damage};
    for how in [
        Damage::TruncatedPack,
        Damage::LooseRefGarbage,
        Damage::PackIndexRemoved,
    ] {
        let w = World::new(Layout::Kustomize, "0s").await;
        w.configure_commit_mode();
        w.staging_pinned_and_converged().await;
        let tip = w.tip();
        let mirror = mirror_in(&w.dir.path().join("cache"));
        damage(&mirror, &w.repo, how);

        let (code, report, out) = w.promote_json().await;

        assert_eq!(code, Some(0), "{how:?}: {}", text(&out));
        let commit = w.tip();
        assert_eq!(
            report["outcome"],
            json!({"outcome": "committed", "branch": "main", "commit": commit, "attempts": 1}),
            "{how:?}"
        );
        assert_eq!(
            w.repo.log("main")[1].0,
            tip,
            "{how:?}: one commit on the tip"
        );
        let file = "overlays/production/kustomization.yaml";
        assert_eq!(w.repo.read("main", file).unwrap(), w.promoted(file, &w.new));
        assert!(
            stderr(&out).contains("moved it aside"),
            "{how:?}: {}",
            text(&out)
        );
        assert!(moved_aside(&mirror).is_dir(), "{how:?}");
        w.promote_finds_nothing_to_do().await;
        assert_eq!(w.tip(), commit, "{how:?}");
    }
}

impl World {
    /// Production promoted by commit (both stages on the layout's paths, no soak).
    fn configure_commit_mode(&self) {
        self.write_config(&format!(
            "  - name: staging\n    paths: [{}]\n    cluster: {}\n\
             \x20 - name: production\n    paths: [{}]\n    cluster: {}\n    mode: commit\n",
            self.layout.stage_path("staging"),
            self.cluster("staging"),
            self.layout.stage_path("production"),
            self.cluster("production"),
        ));
    }

    /// Serves the repository over smart HTTP, where a test can make pushes race, and points
    /// the configuration at it.
    fn serve_over_http(&self) -> GitHttpServer {
        let server = GitHttpServer::start(self.repo.base_dir(), HttpAuth::None);
        let config = std::fs::read_to_string(self.config()).unwrap();
        let served = config.replace(&self.repo.file_url(), &server.url(self.repo.name()));
        assert_ne!(served, config, "the configuration names the repository");
        std::fs::write(self.config(), served).unwrap();
        server
    }
}

/// A person's commit on main, landing just before each of tagpin's next `times` pushes.
fn main_moves_before_each_push(w: &World, server: &GitHttpServer, times: usize) {
    let other = w.repo.clone();
    server.before_push_advertisements(times, move || {
        other.commit_as_other_writer(
            "main",
            &[("notes/busy.txt", "someone else is at work\n")],
            "A human change",
        );
    });
}

#[tokio::test]
async fn a_promotion_by_commit_that_loses_a_race_commits_on_the_new_tip_and_counts_two_attempts() {
    let w = World::new(Layout::Plain, "0s").await;
    w.configure_commit_mode();
    let server = w.serve_over_http();
    w.staging_pinned_and_converged().await;
    main_moves_before_each_push(&w, &server, 1);

    let (code, report, out) = w.promote_json().await;

    assert_eq!(code, Some(0), "{}", text(&out));
    let commit = w.tip();
    assert_eq!(
        report["outcome"],
        json!({"outcome": "committed", "branch": "main", "commit": commit, "attempts": 2}),
        "{report:#}"
    );
    let log = w.repo.log("main");
    assert!(log[0].1.starts_with("Promote 2 image(s)"), "{log:?}");
    assert_eq!(log[1].1, "A human change", "{log:?}");
    assert_eq!(
        report["source"]["commit"], log[1].0,
        "verified again on the new tip"
    );
    for file in w.layout.production_files() {
        assert_eq!(w.repo.read("main", file).unwrap(), w.promoted(file, &w.new));
    }
    assert!(w.repo.read("main", "notes/busy.txt").is_some());
    w.github.assert_no_violations();
}

#[tokio::test]
async fn a_promotion_by_commit_that_keeps_losing_the_race_gives_up_naming_the_branch() {
    let w = World::new(Layout::Plain, "0s").await;
    w.configure_commit_mode();
    let server = w.serve_over_http();
    w.staging_pinned_and_converged().await;
    let before = w.repo.log("main").len();
    // Once more than tagpin tries, so a sixth attempt would race too.
    main_moves_before_each_push(&w, &server, 6);
    server.clear_requests();

    let (code, report, out) = w.promote_json().await;

    assert_eq!(code, Some(2), "{}", text(&out));
    let url = server.url(w.repo.name());
    assert_eq!(
        report,
        json!({"state": "error", "error": format!(
            "{url}: main kept moving; gave up after 5 attempts to push on top of it"
        )}),
        "{}",
        text(&out)
    );
    let log = w.repo.log("main");
    assert_eq!(log.len(), before + 5, "{log:?}");
    assert!(
        log[..5]
            .iter()
            .all(|(_, subject)| subject == "A human change"),
        "nothing of tagpin's landed: {log:?}"
    );
    let advertisements = server
        .requests()
        .iter()
        .filter(|r| r.query.as_deref() == Some("service=git-receive-pack"))
        .count();
    assert_eq!(advertisements, 5, "one push per attempt");
    w.github.assert_no_violations();
}

#[tokio::test]
async fn a_soak_without_a_forge_to_keep_its_clock_is_refused_by_name() {
    let w = World::new(Layout::Kustomize, "0s").await;
    w.staging_pinned_and_converged().await;
    // Promotion by commit needs no forge, but the soak clock is kept in a commit status.
    std::fs::write(
        w.config(),
        format!(
            "repository: {{url: '{}', branch: main}}\n\
             mode: commit\n\
             registries: {{insecure: ['{}']}}\n\
             promotion:\n  stages:\n\
             \x20 - name: staging\n    paths: [overlays/staging]\n    cluster: {}\n\
             \x20 - name: production\n    paths: [overlays/production]\n    cluster: {}\n    soak: 2s\n    mode: commit\n",
            w.repo.file_url(),
            w.host,
            w.cluster("staging"),
            w.cluster("production"),
        ),
    )
    .unwrap();
    w.assert_refused(
        &["promote", "--to", "production"],
        "promotion.stages[1].soak: needs a forge: section",
    )
    .await;
    assert!(w.staging.requests().is_empty());
    assert!(w.github.requests().is_empty());
}

/// `verify.context` names the default cluster for commands run without a stage; it must not
/// send a merged promotion into production (or `--stage production`) to that cluster, where
/// production's workloads are missing and a failure would be posted on the pull request.
#[tokio::test]
async fn verify_context_does_not_override_the_cluster_of_the_stage_a_promotion_is_verified_on() {
    let w = World::new(Layout::Kustomize, "0s").await;
    w.staging_pinned_and_converged().await;
    let merge = w.merged_first_promotion().await;
    // The team's default context, for commands run without a stage: staging's cluster.
    let mut config = std::fs::read_to_string(w.config()).unwrap();
    config.push_str("verify: {context: test}\n");
    std::fs::write(w.config(), config).unwrap();
    let default = w.kubeconfig("staging");

    let out = w
        .tagpin_with_kubeconfig(&["verify", "--pr", "1"], &default)
        .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = w
        .tagpin_with_kubeconfig(
            &["verify", "--stage", "production", "--branch", "main"],
            &default,
        )
        .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(w.statuses(&merge, "tagpin/converged")[1].0, "success");
}

#[tokio::test]
async fn a_reviewers_commit_on_the_promotion_branch_is_kept_when_staging_moves_on() {
    let w = World::new(Layout::Kustomize, "0s").await;
    w.staging_pinned_and_converged().await;
    w.first_promotion().await;
    let reviewer = w.repo.commit_as_other_writer(
        PR_BRANCH,
        &[("NOTES.md", "Production: roll out after the freeze.\n")],
        "Review: hold for the freeze",
    );
    let rebuilt = w.rebuild_web_and_sync().await;
    w.runs_staging(&Pins {
        web: rebuilt.clone(),
        api: w.new.api.clone(),
    });

    let (code, report, out) = w.promote_json().await;

    assert_eq!(code, Some(0), "{}", text(&out));
    assert_eq!(report["outcome"]["outcome"], "edited_by_hand", "{report:#}");
    assert_eq!(report["outcome"]["commit"], reviewer.as_str());
    assert_eq!(w.repo.head(PR_BRANCH).as_deref(), Some(reviewer.as_str()));
    let prs = w.github.prs();
    assert_eq!(prs.len(), 1);
    assert!(!prs[0].body.clone().unwrap().contains(&rebuilt));
    let notes: Vec<_> = w
        .github
        .comments(1)
        .into_iter()
        .filter(|c| c.body.contains("<!-- tagpin-edited-by-hand -->"))
        .collect();
    assert_eq!(notes.len(), 1, "{notes:#?}");
    assert!(
        w.statuses(&reviewer, PROMOTION_CONTEXT).is_empty(),
        "tagpin vouches for no commit it did not write"
    );
    w.github.assert_no_violations();
}

// ---------------------------------------------------------------------------------------------
// 10. `promotion.stages[].on_failure: revert`: a merged promotion production cannot run.

/// A promotion merged into production whose new web pods cannot pull their digest is
/// reverted by `tagpin run` (production's own `on_failure: revert`; the top-level verify keeps
/// the default, report), with one revert pull request restoring production's files byte for
/// byte; once a person merges it, the digests are held: staging still runs them, yet no
/// promotion proposes them again, and `promote` lists them as held.
#[tokio::test(flavor = "multi_thread")]
async fn a_promotion_production_cannot_run_is_reverted_and_not_promoted_again() {
    use crate::run::{metric_sum, Controller};
    let w = World::new(Layout::Kustomize, "0s").await;
    w.configure_clusters(&w.cluster("staging"), "0s\n    on_failure: revert");
    w.staging_pinned_and_converged().await;
    w.first_promotion().await;
    let file = "overlays/production/kustomization.yaml";
    let before = w.repo.read("main", file).unwrap();
    let promoted = w.repo.read(PR_BRANCH, file).unwrap();
    let merge = w.repo.commit_as_other_writer(
        "main",
        &[(file, &promoted)],
        &format!("Merge pull request #1 from acme/{PR_BRANCH}"),
    );
    w.github.merge_pr(1, &merge);
    // Argo CD applies it: api rolls out, web's new pods cannot pull.
    let web = w.image("web", WEB_NEW, &w.new.web);
    let web_pods = app(PRODUCTION_NS, "web", &web).replicas(2);
    web_pods.apply(&w.production);
    for i in 0..2 {
        web_pods.pod(&pod_name("web", i)).waiting(
            &w.production,
            "ImagePullBackOff",
            &format!("Back-off pulling image \"{web}\""),
        );
    }
    let api = w.image("api", API_NEW, &w.new.api);
    let api_id = w.image_id("api", &w.new.api);
    rolled_out(
        &w.production,
        PRODUCTION_NS,
        "api",
        &api,
        &[&api_id, &api_id],
    );

    let controller = Controller::start_with_args(
        w.dir.path(),
        &w.config(),
        &[("TAGPIN_GITHUB_TOKEN", GH_TOKEN)],
        &["--interval", "2s"],
    )
    .await;
    let revert_branch = "tagpin/revert/main";
    let proposed = support::eventually_or("one revert pull request", || {
        w.github.prs().iter().any(|p| p.head_ref == revert_branch)
    })
    .await;
    if !proposed {
        let (_, log) = controller.stop().await;
        panic!("no revert pull request: {:?}\n{log}", w.github.prs());
    }
    let revert = w
        .github
        .prs()
        .into_iter()
        .find(|p| p.head_ref == revert_branch)
        .unwrap();
    assert!(
        revert.title.starts_with(&format!(
            "Revert pin of 2 image(s): {PRODUCTION_NS}/Deployment/web (web): ImagePullBackOff"
        )),
        "{}",
        revert.title
    );
    let body = revert.body.clone().unwrap_or_default();
    assert!(body.contains(&format!("Reverted: {merge}")), "{body}");
    assert_eq!(
        w.repo.read(revert_branch, file).unwrap(),
        before,
        "production's overlay restored byte for byte"
    );

    // A person merges the revert; staging still runs the digests, which stay held.
    let restored = w
        .repo
        .commit_as_other_writer("main", &[(file, &before)], "Revert (#2)");
    w.github.merge_pr(revert.number, &restored);
    let passes = metric_sum(&controller.metrics().await, "tagpin_passes_total{");
    support::eventually_async("three more passes", || async {
        metric_sum(&controller.metrics().await, "tagpin_passes_total{") >= passes + 3.0
    })
    .await;
    let (code, log) = controller.stop().await;
    assert_eq!(code, Some(0), "{log}");
    assert_eq!(w.github.prs().len(), 2, "{:?}\n{log}", w.github.prs());
    assert_eq!(w.repo.read("main", file).unwrap(), before);

    let (_, report, out) = w.promote_json().await;
    let held: Vec<&str> = report["held"]
        .as_array()
        .unwrap_or_else(|| panic!("{}", text(&out)))
        .iter()
        .map(|h| h["would_be"].as_str().unwrap())
        .collect();
    assert!(
        held.contains(&w.new.web.as_str()) && held.contains(&w.new.api.as_str()),
        "{report:#}"
    );
    assert_eq!(report["changes"], json!([]), "{report:#}");
    assert_eq!(w.github.prs().len(), 2);
    w.production.assert_no_writes();
}

// ---------------------------------------------------------------------------------------------
// Stages deployed by Argo CD's Source Hydrator.

/// Argo CD's hydration of `dry` into `environments`, one path per stage (one hydration group:
/// the same dry repository and revision, the same hydrated branch), each holding what its
/// stage runs: staging `staging`, production `production`.
fn hydrate_stages(w: &World, dry: &str, staging: &Pins, production: &Pins) -> String {
    let manifests = |namespace: &str, tag: (&str, &str), pins: &Pins| {
        [("web", tag.0, &pins.web), ("api", tag.1, &pins.api)]
            .iter()
            .map(|(app, tag, digest)| {
                workload_yaml(app, Some(namespace), &w.image(app, tag, digest))
            })
            .collect::<Vec<_>>()
            .join("---\n")
    };
    support::hydrator::hydrate(
        &w.repo,
        &w.repo.file_url(),
        dry,
        "environments",
        None,
        &[
            (
                "staging",
                &manifests(STAGING_NS, (WEB_NEW, API_NEW), staging),
            ),
            (
                "production",
                &manifests(PRODUCTION_NS, (WEB_OLD, API_OLD), production),
            ),
        ],
    )
}

#[tokio::test]
async fn a_hydrated_staging_is_promoted_once_argo_cd_hydrated_and_synced_the_pins() {
    let w = World::new(Layout::Kustomize, "0s").await;
    // Each stage is an Application hydrating its overlay into its own path of `environments`.
    let mut staging_app = support::hydrator::application(
        "shop-staging",
        STAGING_NS,
        &w.repo.file_url(),
        "overlays/staging",
        "environments",
        "staging",
    );
    let before = w.tip();
    let hydrated = hydrate_stages(&w, &before, &w.old, &w.old);
    support::hydrator::hydrated(&mut staging_app, &before, &hydrated);
    let deployments = [(STAGING_NS, "web"), (STAGING_NS, "api")];
    support::hydrator::synced(&mut staging_app, &hydrated, &deployments);
    w.staging.apply(staging_app.clone());
    // Sync pins staging; its cluster already runs the pins (someone applied them by hand),
    // but Argo CD has not hydrated the pin commit.
    w.staging_pinned_and_converged().await;
    let tip = w.tip();
    let remote = w.remote();

    let (code, report, out) = w.promote_json().await;

    assert_eq!(code, Some(3), "{}", text(&out));
    assert_eq!(report["gate"]["gate"], "waiting", "{report:#}");
    let reason = report["reason"].as_str().unwrap();
    assert!(
        reason.contains(&format!(
            "Argo CD has not hydrated {} yet (at {})",
            &tip[..7],
            &before[..7]
        )),
        "{reason}"
    );
    assert_eq!(w.remote(), remote, "nothing pushed");
    assert!(w.github.prs().is_empty());

    // Argo CD hydrates the pin commit and syncs it: staging is converged, and promoted.
    let hydrated = hydrate_stages(&w, &tip, &w.new, &w.old);
    support::hydrator::hydrated(&mut staging_app, &tip, &hydrated);
    support::hydrator::synced(&mut staging_app, &hydrated, &deployments);
    w.staging.apply(staging_app);

    let (code, report, out) = w.promote_json().await;

    assert_eq!(code, Some(0), "{}", text(&out));
    assert_eq!(report["source"]["state"], "converged", "{report:#}");
    assert_eq!(
        report["outcome"]["outcome"], "pull_request_opened",
        "{report:#}"
    );
    w.assert_pr_branch_promotes(&w.new, &tip);
    w.github.assert_no_violations();
    w.staging.assert_no_writes();
}
