//! `tagpin audit`, the real binary, against the local Kubernetes API server (through a
//! kubeconfig), a real bare Git repository, and, where a digest must be one the registry knows
//! (a tag that moved, a multi-arch index), the real registry; and its metric in `tagpin run`.

use crate::support;

use std::path::PathBuf;
use std::process::{Output, Stdio};

use serde_json::{json, Value};
use support::git::BareRepo;
use support::kube::KubeServer;
use support::manifests::{deployment_in, deployment_with_replicas};
use support::output_text as text;
use support::registry::{free_port, IndexKind, Mode, TestRegistry};
use support::workloads::LiveDeployment;

const A: &str = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const B: &str = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
const C: &str = "sha256:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc";

/// A repository, a cluster, and a configuration naming both (default namespace `shop`).
struct World {
    repo: BareRepo,
    kube: KubeServer,
    dir: tempfile::TempDir,
    registry_host: String,
}

impl World {
    async fn new(files: &[(&str, &str)], registry_host: &str) -> World {
        let world = World {
            repo: BareRepo::create(files),
            kube: KubeServer::start().await,
            dir: tempfile::tempdir().unwrap(),
            registry_host: registry_host.to_string(),
        };
        world.write_config("");
        world
    }

    fn config(&self) -> PathBuf {
        self.dir.path().join("tagpin.yaml")
    }

    fn write_config(&self, extra: &str) {
        std::fs::write(
            self.config(),
            format!(
                "repository: {{url: '{}', branch: main}}\nmode: commit\nregistries: {{insecure: ['{}']}}\nverify: {{default_namespace: shop}}\n{extra}",
                self.repo.file_url(),
                self.registry_host
            ),
        )
        .unwrap();
    }

    /// `tagpin audit --config … <args>`, with the cluster's kubeconfig as kube's default.
    async fn audit(&self, args: &[&str]) -> Output {
        let kubeconfig = self.kube.kubeconfig(self.dir.path());
        self.audit_with_kubeconfig(args, &kubeconfig).await
    }

    async fn audit_with_kubeconfig(&self, args: &[&str], kubeconfig: &std::path::Path) -> Output {
        tokio::process::Command::new(env!("CARGO_BIN_EXE_tagpin"))
            .arg("audit")
            .arg("--config")
            .arg(self.config())
            .arg("--cache-dir")
            .arg(self.dir.path().join("cache"))
            .args(args)
            .env("HOME", self.dir.path())
            .env("KUBECONFIG", kubeconfig)
            .env_remove("DOCKER_CONFIG")
            .env_remove("RUST_LOG")
            .output()
            .await
            .expect("run tagpin audit")
    }
}

fn json_of(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}):\n{}", text(out)))
}

/// The imageID CRI-O and containerd report for `repository` pulled at `digest`.
fn id(repository: &str, digest: &str) -> String {
    format!("{repository}@{digest}")
}

/// The Deployment `name` of `namespace`, its container `app` on `image`, as Argo CD applied it.
fn live(namespace: &str, name: &str, image: &str, replicas: usize) -> LiveDeployment {
    LiveDeployment::new(namespace, name)
        .container("app", image)
        .replicas(replicas)
}

/// The namespace: `web` names `:latest` (no digest) and its three pods run two
/// digests on two nodes, because the tag moved between the pulls of node-a and node-b (both
/// digests real: pushed to the registry); `api`'s template was changed by hand (`kubectl set
/// image` to another digest); `db` runs exactly what Git pins.
#[tokio::test]
async fn a_moved_tag_on_two_nodes_is_mixed_a_changed_template_is_drift_and_both_exit_1() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let first = registry.push_image("acme/web", "latest", "monday").await;
    let second = registry.push_image("acme/web", "latest", "tuesday").await;
    let web = format!("{host}/acme/web:latest");
    let api_pin = format!("ghcr.io/acme/api:1@{A}");
    let api_set = format!("ghcr.io/acme/api:1@{B}");
    let db = format!("ghcr.io/acme/db:5@{C}");
    let w = World::new(
        &[
            ("apps/web.yaml", &deployment_with_replicas("web", &web, 3)),
            (
                "apps/api.yaml",
                &deployment_with_replicas("api", &api_pin, 1),
            ),
            ("apps/db.yaml", &deployment_with_replicas("db", &db, 1)),
        ],
        &host,
    )
    .await;
    let live_web = live("shop", "web", &web, 3);
    live_web.apply(&w.kube);
    let repository = format!("{host}/acme/web");
    for (pod, node, digest) in [
        ("web-1", "node-a", &first.manifest),
        ("web-2", "node-a", &first.manifest),
        ("web-3", "node-b", &second.manifest),
    ] {
        live_web
            .pod(pod)
            .node(node)
            .running(&w.kube, &[id(&repository, digest)]);
    }
    let live_api = live("shop", "api", &api_set, 1);
    live_api.apply(&w.kube);
    live_api
        .pod("api-1")
        .node("node-a")
        .running(&w.kube, &[id("ghcr.io/acme/api", B)]);
    let live_db = live("shop", "db", &db, 1);
    live_db.apply(&w.kube);
    live_db
        .pod("db-1")
        .node("node-b")
        .running(&w.kube, &[id("ghcr.io/acme/db", C)]);

    let out = w.audit(&["--output", "json"]).await;

    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let report = json_of(&out);
    assert_eq!(report["state"], "attention");
    assert_eq!(report["branch"], "main");
    assert_eq!(report["commit"], w.repo.head("main").unwrap());
    assert_eq!(report["namespaces"], json!(["shop"]));
    assert_eq!(
        report["summary"],
        json!({"workloads": 3, "pinned": 2, "tag-only": 1, "not-in-git": 0, "missing": 0,
               "unread": 0, "drift": 1, "mixed": 1})
    );
    let rows = report["containers"].as_array().unwrap();
    assert_eq!(rows.len(), 3, "{report:#}");
    let (api, db_row, web_row) = (&rows[0], &rows[1], &rows[2]);
    assert_eq!(api["workload"], "shop/Deployment/api");
    assert_eq!(api["container"], "app");
    assert_eq!(api["findings"], json!(["pinned", "drift"]));
    assert_eq!(api["git"], api_pin);
    assert_eq!(api["template"], api_set);
    assert_eq!(
        api["drift"],
        format!("the live template runs {api_set}, not the pinned {A}")
    );
    assert_eq!(
        api["running"],
        json!([{"digest": B, "image": api_set, "pods": ["api-1"], "nodes": ["node-a"]}])
    );
    assert_eq!(db_row["workload"], "shop/Deployment/db");
    assert_eq!(db_row["findings"], json!(["pinned"]));
    assert_eq!(db_row["git"], db);
    assert_eq!(db_row["template"], db);
    assert_eq!(db_row.get("drift"), None);
    assert_eq!(
        db_row["running"],
        json!([{"digest": C, "image": db, "pods": ["db-1"], "nodes": ["node-b"]}])
    );
    assert_eq!(web_row["workload"], "shop/Deployment/web");
    assert_eq!(web_row["findings"], json!(["tag-only", "mixed"]));
    assert_eq!(web_row["git"], web);
    assert_eq!(web_row["template"], web);
    assert_eq!(
        web_row["running"],
        json!([
            {"digest": first.manifest, "image": web, "pods": ["web-1", "web-2"], "nodes": ["node-a"]},
            {"digest": second.manifest, "image": web, "pods": ["web-3"], "nodes": ["node-b"]},
        ])
    );
    assert_eq!(
        report["mixed"],
        json!([{"image": web, "digests": [
            {"digest": first.manifest, "pods": 2, "nodes": ["node-a"], "workloads": ["shop/Deployment/web"]},
            {"digest": second.manifest, "pods": 1, "nodes": ["node-b"], "workloads": ["shop/Deployment/web"]},
        ]}])
    );
    assert_eq!(report["unread"], json!([]));
    assert_eq!(report["failures"], json!([]));
    // The document is a public interface, like verify's: its whole shape is kept.
    let placeholders = [(host.as_str(), "<registry>")];
    crate::pipeline::assert_snapshot(
        "audit",
        &crate::pipeline::normalized(&report, &placeholders),
    );

    // The table says the same, one line per container, naming both nodes.
    let out = w.audit(&[]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let human = String::from_utf8_lossy(&out.stdout);
    let short = |d: &str| d[..19].to_string();
    assert!(
        human.starts_with("attention: 3 workload(s) in shop at main "),
        "{human}"
    );
    assert!(
        human.contains(": 2 pinned, 1 tag-only, 1 drift, 1 mixed\n"),
        "{human}"
    );
    let web_line: Vec<&str> = human
        .lines()
        .find(|l| l.starts_with("shop/Deployment/web "))
        .unwrap_or_else(|| panic!("no line for web:\n{human}"))
        .split_whitespace()
        .collect();
    let running = format!(
        "{}: 2 pods on node-a; {}: 1 pod on node-b",
        short(&first.manifest),
        short(&second.manifest)
    );
    let mut expected = vec!["shop/Deployment/web", "app", "tag-only,mixed", &web, &web];
    expected.extend(running.split_whitespace());
    assert_eq!(web_line, expected, "{human}");
    assert!(
        human.contains(&format!(
            "mixed: {web} runs {}: 2 pods on node-a; {}: 1 pod on node-b\n",
            short(&first.manifest),
            short(&second.manifest)
        )),
        "{human}"
    );
    assert!(
        human.contains(&format!(
            "drift: shop/Deployment/api app: the live template runs {api_set}, not the pinned {A}\n"
        )),
        "{human}"
    );
    w.kube.assert_no_writes();
}

#[tokio::test]
async fn a_workload_running_what_git_pins_alone_is_clean_and_exits_0() {
    let db = format!("ghcr.io/acme/db:5@{C}");
    let w = World::new(
        &[("apps/db.yaml", &deployment_with_replicas("db", &db, 2))],
        "127.0.0.1:1",
    )
    .await;
    let live_db = live("shop", "db", &db, 2);
    live_db.apply(&w.kube);
    for (pod, node) in [("db-1", "node-a"), ("db-2", "node-b")] {
        live_db
            .pod(pod)
            .node(node)
            .running(&w.kube, &[id("ghcr.io/acme/db", C)]);
    }

    let out = w.audit(&[]).await;

    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let tip = w.repo.head("main").unwrap();
    // The table shortens digests to 12 hex digits, as docker does; JSON has them whole.
    let short = "ghcr.io/acme/db:5@sha256:cccccccccccc";
    let g = short.len();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!(
            "clean: 1 workload(s) in shop at main {}: 1 pinned\n\
             WORKLOAD            CONTAINER  FINDING  {:<g$}  {:<g$}  RUNNING\n\
             shop/Deployment/db  app        pinned   {short}  {short}  sha256:cccccccccccc: 2 pods on node-a, node-b\n",
            &tip[..12],
            "GIT",
            "TEMPLATE",
        )
    );
    // One list per kind and one of the pods, in the one namespace: nothing else is asked.
    let mut asked: Vec<String> = w
        .kube
        .requests()
        .iter()
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    asked.sort();
    assert_eq!(
        asked,
        [
            "GET /api/v1/namespaces/shop/pods",
            "GET /apis/apps/v1/namespaces/shop/daemonsets",
            "GET /apis/apps/v1/namespaces/shop/deployments",
            "GET /apis/apps/v1/namespaces/shop/statefulsets",
            "GET /apis/batch/v1/namespaces/shop/cronjobs",
        ]
    );
    let report = json_of(&w.audit(&["--output", "json"]).await);
    assert_eq!(report["state"], "clean");
    assert_eq!(report["summary"]["pinned"], 1);
    assert_eq!(report["mixed"], json!([]));
}

/// What Git does not name in an audited namespace is reported and fails nothing; `--namespace`
/// narrows the audit to one namespace the configuration deploys to, and names them all when
/// it is not one of them.
#[tokio::test]
async fn namespace_narrows_the_audit_and_what_git_does_not_name_fails_nothing() {
    let db = format!("ghcr.io/acme/db:5@{C}");
    let w = World::new(
        &[
            ("apps/db.yaml", &deployment_in("data", "db", &db)),
            (
                "apps/web.yaml",
                &deployment_with_replicas("web", "ghcr.io/acme/web:latest", 2),
            ),
        ],
        "127.0.0.1:1",
    )
    .await;
    let live_db = live("data", "db", &db, 1);
    live_db.apply(&w.kube);
    live_db
        .pod("db-1")
        .node("node-a")
        .running(&w.kube, &[id("ghcr.io/acme/db", C)]);
    // Installed by hand next to it: not in Git.
    let tool = live("data", "backup", "ghcr.io/acme/backup:2", 1);
    tool.apply(&w.kube);
    tool.pod("backup-1")
        .node("node-a")
        .running(&w.kube, &[id("ghcr.io/acme/backup", A)]);
    // shop's web runs two digests of :latest; not audited with --namespace data.
    let live_web = live("shop", "web", "ghcr.io/acme/web:latest", 2);
    live_web.apply(&w.kube);
    live_web
        .pod("web-1")
        .running(&w.kube, &[id("ghcr.io/acme/web", A)]);
    live_web
        .pod("web-2")
        .running(&w.kube, &[id("ghcr.io/acme/web", B)]);

    let out = w.audit(&["--namespace", "data", "--output", "json"]).await;

    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let report = json_of(&out);
    assert_eq!(report["namespaces"], json!(["data"]));
    let rows: Vec<(&str, &Value)> = report["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["workload"].as_str().unwrap(), &r["findings"]))
        .collect();
    assert_eq!(
        rows,
        vec![
            ("data/Deployment/backup", &json!(["not-in-git"])),
            ("data/Deployment/db", &json!(["pinned"])),
        ]
    );
    assert_eq!(report["containers"][0]["git"], Value::Null);

    // Without --namespace, shop is audited too: its mixed digests fail the audit.
    let out = w.audit(&["--output", "json"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_eq!(json_of(&out)["namespaces"], json!(["data", "shop"]));

    let out = w.audit(&["--namespace", "kube-system"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains(
            "--namespace kube-system: the configuration deploys no workload there (it deploys to data, shop)"
        ),
        "{}",
        text(&out)
    );
}

/// A workload Git names that the cluster does not have is reported as missing and fails
/// nothing (`verify` fails it); a list tagpin may not read makes the audit incomplete: exit 1,
/// naming the list.
#[tokio::test]
async fn a_missing_workload_is_reported_and_a_refused_list_fails_the_audit() {
    let db = format!("ghcr.io/acme/db:5@{C}");
    let w = World::new(
        &[
            ("apps/db.yaml", &deployment_with_replicas("db", &db, 1)),
            (
                "apps/gone.yaml",
                &deployment_with_replicas("gone", "ghcr.io/acme/gone:1", 1),
            ),
        ],
        "127.0.0.1:1",
    )
    .await;
    let live_db = live("shop", "db", &db, 1);
    live_db.apply(&w.kube);
    live_db
        .pod("db-1")
        .running(&w.kube, &[id("ghcr.io/acme/db", C)]);

    let out = w.audit(&["--output", "json"]).await;

    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let report = json_of(&out);
    let gone = &report["containers"][1];
    assert_eq!(gone["workload"], "shop/Deployment/gone");
    assert_eq!(gone["findings"], json!(["missing"]));
    assert_eq!(gone["git"], "ghcr.io/acme/gone:1");
    assert_eq!(gone["template"], Value::Null);
    assert_eq!(gone["running"], json!([]));

    w.kube.deny("list", "statefulsets", Some("shop"));
    let out = w.audit(&["--output", "json"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let report = json_of(&out);
    assert_eq!(report["state"], "attention");
    let unread = report["unread"].as_array().unwrap();
    assert_eq!(unread.len(), 1, "{report:#}");
    assert!(
        unread[0]
            .as_str()
            .unwrap()
            .ends_with("list StatefulSet in namespace shop: 403 Forbidden"),
        "{report:#}"
    );
    // What could be read is still reported.
    assert_eq!(report["containers"][0]["findings"], json!(["pinned"]));
}

/// One multi-arch image runs as different digests on nodes of different architectures when
/// the runtime reports the platform manifest it pulled (CRI-O may): the registry says they
/// stand for one image, so neither a pinned index nor its tag is mixed.
#[tokio::test]
async fn platform_manifests_of_one_index_are_one_image_not_mixed() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let platforms = [("linux", "amd64"), ("linux", "arm64")];
    let index = registry
        .push_index("acme/multi", "1", IndexKind::Oci, &platforms, "mine")
        .await;
    let (amd, arm) = (&index.children[0].manifest, &index.children[1].manifest);
    let pinned = format!("{host}/acme/multi:1@{}", index.index);
    let tag = format!("{host}/acme/multi:1");
    let w = World::new(
        &[
            (
                "apps/pinned.yaml",
                &deployment_with_replicas("pinned", &pinned, 2),
            ),
            (
                "apps/tagged.yaml",
                &deployment_with_replicas("tagged", &tag, 2),
            ),
        ],
        &host,
    )
    .await;
    let repository = format!("{host}/acme/multi");
    let on_pin = live("shop", "pinned", &pinned, 2);
    on_pin.apply(&w.kube);
    on_pin
        .pod("pinned-1")
        .node("node-amd")
        .running(&w.kube, &[id(&repository, &index.index)]);
    on_pin
        .pod("pinned-2")
        .node("node-arm")
        .running(&w.kube, &[id(&repository, arm)]);
    let on_tag = live("shop", "tagged", &tag, 2);
    on_tag.apply(&w.kube);
    on_tag
        .pod("tagged-1")
        .node("node-amd")
        .running(&w.kube, &[id(&repository, amd)]);
    on_tag
        .pod("tagged-2")
        .node("node-arm")
        .running(&w.kube, &[id(&repository, arm)]);

    let out = w.audit(&["--output", "json"]).await;

    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let report = json_of(&out);
    assert_eq!(report["mixed"], json!([]));
    let rows = report["containers"].as_array().unwrap();
    assert_eq!(rows[0]["workload"], "shop/Deployment/pinned");
    assert_eq!(rows[0]["findings"], json!(["pinned"]));
    // One pod each: in no particular order.
    let mut running = rows[0]["running"].as_array().unwrap().clone();
    running.sort_by_key(|r| r["pods"][0].as_str().unwrap().to_string());
    assert_eq!(
        running,
        vec![
            json!({"digest": index.index, "image": pinned, "pods": ["pinned-1"],
                   "nodes": ["node-amd"]}),
            json!({"digest": arm, "stands_for": index.index, "image": pinned,
                   "pods": ["pinned-2"], "nodes": ["node-arm"]}),
        ]
    );
    assert_eq!(rows[1]["workload"], "shop/Deployment/tagged");
    assert_eq!(rows[1]["findings"], json!(["tag-only"]));
    let stands_for: Vec<&Value> = rows[1]["running"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["stands_for"])
        .collect();
    assert_eq!(stands_for, vec![&json!(index.index), &json!(index.index)]);
}

/// `--stage production` audits the production overlay (its kustomization's namespace and
/// `images:` entry applied) on production's own cluster, never on the default one.
#[tokio::test]
async fn a_stage_is_audited_with_its_paths_on_its_own_cluster() {
    let base = deployment_with_replicas("web", &format!("ghcr.io/acme/web:1@{A}"), 1);
    let staging = "resources: [../../base]\nnamespace: staging\n";
    let production = format!(
        "resources: [../../base]\nnamespace: prod\nimages:\n- name: ghcr.io/acme/web\n  newTag: \"2\"\n  digest: {B}\n"
    );
    let w = World::new(
        &[
            ("base/web.yaml", &base),
            ("base/kustomization.yaml", "resources: [web.yaml]\n"),
            ("overlays/staging/kustomization.yaml", staging),
            ("overlays/production/kustomization.yaml", &production),
        ],
        "127.0.0.1:1",
    )
    .await;
    let prod = KubeServer::start().await;
    let prod_dir = w.dir.path().join("production");
    std::fs::create_dir_all(&prod_dir).unwrap();
    let prod_kubeconfig = prod.kubeconfig(&prod_dir);
    w.write_config(&format!(
        "promotion:\n  stages:\n  - name: staging\n    paths: [overlays/staging]\n    cluster: {{kubeconfig: '{}'}}\n  - name: production\n    paths: [overlays/production]\n    cluster: {{kubeconfig: '{}'}}\n    mode: commit\n",
        w.dir.path().join("kubeconfig").display(),
        prod_kubeconfig.display()
    ));
    let image = format!("ghcr.io/acme/web:2@{B}");
    let web = live("prod", "web", &image, 1);
    web.apply(&prod);
    web.pod("web-1")
        .node("prod-node")
        .running(&prod, &[id("ghcr.io/acme/web", B)]);

    let nowhere = w.dir.path().join("no-such-kubeconfig");
    let out = w
        .audit_with_kubeconfig(&["--stage", "production", "--output", "json"], &nowhere)
        .await;

    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let report = json_of(&out);
    assert_eq!(report["namespaces"], json!(["prod"]));
    assert_eq!(report["containers"][0]["workload"], "prod/Deployment/web");
    assert_eq!(report["containers"][0]["findings"], json!(["pinned"]));
    assert_eq!(report["containers"][0]["git"], image);
    assert_eq!(
        report["containers"][0]["running"][0]["nodes"],
        json!(["prod-node"])
    );
    prod.assert_no_writes();
}

/// `tagpin run` sets `tagpin_audit_workloads` after a verification round: the drifted `api`,
/// the clean `web` and the hand-installed `backup` are counted under their findings, each
/// finding's series present.
#[tokio::test]
async fn the_controller_sets_the_audit_gauge_after_verifying() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    // Pinned to what the tags point to now, so the controller's pass has nothing to pin.
    let web = registry.push_image("acme/web", "1", "web").await;
    let api = registry.push_image("acme/api", "1", "api").await;
    let web_pin = format!("{host}/acme/web:1@{}", web.manifest);
    let api_pin = format!("{host}/acme/api:1@{}", api.manifest);
    let w = World::new(
        &[
            (
                "apps/web.yaml",
                &deployment_with_replicas("web", &web_pin, 1),
            ),
            (
                "apps/api.yaml",
                &deployment_with_replicas("api", &api_pin, 1),
            ),
        ],
        &host,
    )
    .await;
    let live_web = live("shop", "web", &web_pin, 1);
    live_web.apply(&w.kube);
    live_web
        .pod("web-1")
        .running(&w.kube, &[id(&format!("{host}/acme/web"), &web.manifest)]);
    let set = format!("{host}/acme/api:1@{A}");
    let live_api = live("shop", "api", &set, 1);
    live_api.apply(&w.kube);
    live_api
        .pod("api-1")
        .running(&w.kube, &[id(&format!("{host}/acme/api"), A)]);
    live("shop", "backup", "ghcr.io/acme/backup:2", 1).apply(&w.kube);

    let port = free_port();
    let kubeconfig = w.kube.kubeconfig(w.dir.path());
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_tagpin"))
        .args(["run", "--interval", "1h", "--verify-interval", "1s"])
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--config")
        .arg(w.config())
        .arg("--cache-dir")
        .arg(w.dir.path().join("cache"))
        .env("HOME", w.dir.path())
        .env("KUBECONFIG", kubeconfig)
        .env("RUST_LOG", "tagpin=info")
        .env_remove("DOCKER_CONFIG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start tagpin run");
    let tip = w.repo.head("main");
    let http = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{port}/metrics");
    let expected = [
        "tagpin_audit_workloads{finding=\"pinned\"} 2",
        "tagpin_audit_workloads{finding=\"drift\"} 1",
        "tagpin_audit_workloads{finding=\"not-in-git\"} 1",
        "tagpin_audit_workloads{finding=\"mixed\"} 0",
        "tagpin_audit_workloads{finding=\"tag-only\"} 0",
    ];
    let last = std::sync::Mutex::new(String::new());
    let counted = support::eventually_async_or("the audit gauge", || async {
        let Ok(answer) = http.get(url.as_str()).send().await else {
            return false;
        };
        let page = answer.text().await.unwrap_or_default();
        let all = expected.iter().all(|e| page.contains(e));
        *last.lock().unwrap() = page;
        all
    })
    .await;
    let output = support::terminate(child, "tagpin run").await;
    assert!(
        counted,
        "{}\n{}",
        last.lock().unwrap(),
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(w.repo.head("main"), tip, "nothing to pin: no commit");
    w.kube.assert_no_writes();
}

/// The operator audits its object's tip as `tagpin run` does and records what it found in
/// `status.audit`: a template changed by hand (`kubectl set image`) is drift, counted there.
#[tokio::test]
async fn the_operator_records_the_audit_of_its_objects_tip_in_its_status() {
    use crate::operator::{cluster, pinned_repository, spec, Operator, NS};
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let web = registry.push_image("acme/web", "1", "web").await;
    let web_pin = format!("{host}/acme/web:1@{}", web.manifest);
    let repo = BareRepo::create(&[(
        "apps/web.yaml",
        &deployment_with_replicas("web", &web_pin, 1),
    )]);
    let kube = cluster().await;
    let set = format!("{host}/acme/web:1@{A}");
    let live_web = live("default", "web", &set, 1);
    live_web.apply(&kube);
    live_web
        .pod("web-1")
        .running(&kube, &[id(&format!("{host}/acme/web"), A)]);
    kube.apply(pinned_repository(
        "web",
        json!({}),
        spec(&repo.file_url(), &host),
    ));
    let dir = tempfile::tempdir().unwrap();
    let operator = Operator::start(dir.path(), &kube, "op", &["--interval", "2s"]).await;

    let audit = || {
        kube.get("PinnedRepository", NS, "web")
            .map(|o| o["status"]["audit"].clone())
            .unwrap_or(Value::Null)
    };
    let recorded = support::eventually_or("status.audit", || !audit().is_null()).await;
    let log = operator.stop().await;
    assert!(recorded, "{log}");
    let audit = audit();
    assert_eq!(audit["commit"], json!(repo.head("main")), "{audit:#}");
    assert_eq!(audit["clean"], false, "{audit:#}");
    assert_eq!(audit["workloads"]["drift"], 1, "{audit:#}");
    assert_eq!(audit["workloads"]["pinned"], 1, "{audit:#}");
    assert_eq!(audit["workloads"]["mixed"], 0, "{audit:#}");
    assert!(audit["time"].as_str().is_some_and(|t| t.ends_with('Z')));
}
