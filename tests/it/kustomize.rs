//! tagpin's kustomize renderer against kustomize itself, and `tagpin verify` on an overlay.
//!
//! Every kustomization the repository holds (`examples/gitops`, `tests/fixtures`, `deploy`) is
//! rendered twice: by `tagpin::render` and by `kubectl kustomize` (offline). The workloads they
//! deploy, with namespace, kind, name, container and image, must be the same, unless tagpin said
//! it cannot render that kustomization; which ones it cannot, and why, is listed here too.
//! Then the real binary, `tagpin verify`, against the local Kubernetes API server: the
//! production overlay of `tests/fixtures/kustomize/web` is judged on `prod/Deployment/prod-web`,
//! where it deploys, and never on a `Deployment web` in another namespace.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::{json, Value as Json};
use serde_yaml::Value;
use tagpin::render::{self, Gap, Lookup, Render};
use tagpin::workload::WorkloadKind;

use crate::support;
use crate::verify::World;
use support::kube::KubeServer;
use support::output_text as text;
use support::workloads::LiveDeployment;

/// One container as deployed: namespace, kind, name, container, image.
type Row = (Option<String>, String, String, String, String);

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The repository on disk, read the way `tagpin verify` reads a Git tree: by path from the
/// root, never through a symlink.
fn disk(root: &Path) -> impl Fn(&Path) -> Lookup + '_ {
    move |path: &Path| {
        let mut at = root.to_path_buf();
        for part in path.components() {
            at.push(part);
            match std::fs::symlink_metadata(&at) {
                Ok(meta) if meta.file_type().is_symlink() => return Lookup::Symlink,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Lookup::Missing,
                Err(e) => return Lookup::Refused(e.to_string()),
            }
        }
        if at.is_dir() {
            return Lookup::Directory;
        }
        std::fs::read(&at).map_or_else(|e| Lookup::Refused(e.to_string()), Lookup::File)
    }
}

/// Every kustomization file under the directories that hold them, relative to the root.
fn kustomizations() -> Vec<PathBuf> {
    let root = repo();
    let mut found = Vec::new();
    for dir in ["examples/gitops", "tests/fixtures", "deploy"] {
        for entry in walkdir::WalkDir::new(root.join(dir)) {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy();
            if ["kustomization.yaml", "kustomization.yml", "Kustomization"].contains(&name.as_ref())
            {
                found.push(entry.path().strip_prefix(&root).unwrap().to_path_buf());
            }
        }
    }
    found.sort();
    found
}

fn rendered_rows(render: &Render) -> BTreeSet<Row> {
    render
        .containers
        .iter()
        .map(|c| {
            (
                c.workload.namespace.clone(),
                c.workload.kind.to_string(),
                c.workload.name.clone(),
                c.container.clone(),
                c.image.clone(),
            )
        })
        .collect()
}

fn built_rows(objects: &[Value]) -> BTreeSet<Row> {
    let mut rows = BTreeSet::new();
    for object in objects {
        let Some(kind) = object["kind"].as_str().and_then(WorkloadKind::from_kind) else {
            continue;
        };
        let pod_spec = kind.pod_spec_paths()[0]
            .iter()
            .fold(object, |v, key| &v[*key]);
        for list in ["containers", "initContainers", "ephemeralContainers"] {
            for container in pod_spec[list].as_sequence().into_iter().flatten() {
                rows.insert((
                    object["metadata"]["namespace"].as_str().map(str::to_string),
                    kind.to_string(),
                    object["metadata"]["name"]
                        .as_str()
                        .unwrap_or("")
                        .to_string(),
                    container["name"].as_str().unwrap_or("").to_string(),
                    container["image"].as_str().unwrap_or("").to_string(),
                ));
            }
        }
    }
    rows
}

#[test]
fn the_renderer_agrees_with_kubectl_kustomize_on_every_kustomization_of_the_repository() {
    let root = repo();
    let tree = disk(&root);
    let mut compared = Vec::new();
    let mut unverifiable = Vec::new();
    for path in kustomizations() {
        let render = render::render(&path, &tree);
        let dir = root.join(path.parent().unwrap());
        let built = support::kubectl::kustomize(&dir);
        let label = path.display().to_string();
        if !render.unverifiable.is_empty() {
            let gaps: Vec<Gap> = render.unverifiable.iter().map(|u| u.gap).collect();
            unverifiable.push((label, gaps, built.is_ok()));
            continue;
        }
        let objects = built.unwrap_or_else(|e| {
            panic!("tagpin renders {label} completely, but kustomize refuses it: {e}")
        });
        let rows = rendered_rows(&render);
        assert_eq!(rows, built_rows(&objects), "{label}");
        compared.push((label, rows.len()));
    }

    let compared: Vec<(&str, usize)> = compared.iter().map(|(l, n)| (l.as_str(), *n)).collect();
    assert_eq!(
        compared,
        [
            ("deploy/common/kustomization.yaml", 0),
            ("deploy/cronjob/kustomization.yaml", 1),
            ("deploy/kustomization.yaml", 1),
            ("deploy/monitoring/alerts/kustomization.yaml", 0),
            ("deploy/monitoring/servicemonitor/kustomization.yaml", 0),
            ("deploy/operator-multi-tenant/tenant/kustomization.yaml", 0),
            ("examples/gitops/apps/web/kustomization.yaml", 1),
            ("examples/gitops/overlays/production/kustomization.yaml", 1),
            ("examples/gitops/overlays/staging/kustomization.yaml", 1),
            (
                "tests/fixtures/golden/base-and-overlay/expected/base/kustomization.yaml",
                1
            ),
            (
                "tests/fixtures/golden/base-and-overlay/expected/overlays/prod/kustomization.yaml",
                1
            ),
            (
                "tests/fixtures/golden/base-and-overlay/original/base/kustomization.yaml",
                1
            ),
            (
                "tests/fixtures/golden/base-and-overlay/original/overlays/prod/kustomization.yaml",
                1
            ),
            (
                "tests/fixtures/golden/kustomize-crlf/expected/overlays/prod/Kustomization",
                0
            ),
            (
                "tests/fixtures/golden/kustomize-crlf/original/overlays/prod/Kustomization",
                0
            ),
            ("tests/fixtures/kustomize/layers/base/kustomization.yaml", 7),
            (
                "tests/fixtures/kustomize/layers/components/mirror/kustomization.yaml",
                1
            ),
            ("tests/fixtures/kustomize/layers/mid/kustomization.yaml", 8),
            ("tests/fixtures/kustomize/layers/top/kustomization.yaml", 8),
            ("tests/fixtures/kustomize/web/base/kustomization.yaml", 1),
            (
                "tests/fixtures/kustomize/web/overlays/production/kustomization.yaml",
                1
            ),
            (
                "tests/fixtures/kustomize/web/overlays/staging/kustomization.yaml",
                1
            ),
        ]
    );
    // Each one tagpin does not render, and why; kustomize itself refuses all but the patched ones.
    let not_rendered: Vec<(&str, &[Gap])> = unverifiable
        .iter()
        .map(|(label, gaps, _)| (label.as_str(), gaps.as_slice()))
        .collect();
    let missing_deployment: &[Gap] = &[Gap::Missing];
    assert_eq!(
        not_rendered,
        [
            // The operator's install drops the shared ConfigMap with a `$patch: delete`.
            ("deploy/operator/kustomization.yaml", &[Gap::Patch][..]),
            // The shared install patches the operator's arguments and drops a binding.
            (
                "deploy/operator-multi-tenant/kustomization.yaml",
                &[Gap::Patch, Gap::Patch, Gap::Patch][..],
            ),
            (
                "examples/gitops/flux/kustomization.yaml",
                &[Gap::Unreadable][..]
            ),
            (
                "tests/fixtures/golden/kustomize-block/expected/kustomization.yaml",
                missing_deployment
            ),
            (
                "tests/fixtures/golden/kustomize-block/original/kustomization.yaml",
                missing_deployment
            ),
            (
                "tests/fixtures/golden/kustomize-flow/expected/kustomization.yml",
                missing_deployment
            ),
            (
                "tests/fixtures/golden/kustomize-flow/original/kustomization.yml",
                missing_deployment
            ),
            (
                "tests/fixtures/kustomize/layers/patched/kustomization.yaml",
                &[Gap::Patch][..]
            ),
        ]
    );
    let built: Vec<&str> = unverifiable
        .iter()
        .filter(|(_, _, built)| *built)
        .map(|(label, _, _)| label.as_str())
        .collect();
    assert_eq!(
        built,
        [
            "deploy/operator/kustomization.yaml",
            "deploy/operator-multi-tenant/kustomization.yaml",
            "tests/fixtures/kustomize/layers/patched/kustomization.yaml"
        ]
    );
}

const PROD_DIGEST: &str = "sha256:7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e";

/// The files of a fixture tree, by path relative to it, as a repository holds them.
fn fixture_tree(dir: &str) -> Vec<(String, String)> {
    let root = repo().join(dir);
    let mut files = Vec::new();
    for entry in walkdir::WalkDir::new(&root) {
        let entry = entry.unwrap();
        if entry.file_type().is_file() {
            let path = entry.path().strip_prefix(&root).unwrap();
            let text = std::fs::read_to_string(entry.path()).unwrap();
            files.push((path.display().to_string(), text));
        }
    }
    assert!(!files.is_empty(), "{dir} is missing");
    files
}

/// A live Deployment with a finished rollout and one pod running `image` (reported as
/// `image_id`), as the GitOps tool and the kubelet leave it.
fn live_web(kube: &KubeServer, namespace: &str, name: &str, image: &str, image_id: &str) {
    let web = LiveDeployment::new(namespace, name)
        .app("web")
        .container("web", image);
    web.apply(kube);
    web.pod(&format!("{name}-1")).running(kube, &[image_id]);
}

#[tokio::test]
async fn verify_judges_an_overlay_on_the_workload_it_deploys_and_nothing_else() {
    let tree = fixture_tree("tests/fixtures/kustomize/web");
    let files: Vec<(&str, &str)> = tree.iter().map(|(p, t)| (p.as_str(), t.as_str())).collect();
    let w = World::new(&files, "127.0.0.1:1").await;
    // Only the overlay is configured: its base is read from the same commit.
    w.write_config("shop", "paths: [overlays/production]\n");
    let image = format!("ghcr.io/acme/web:1.4@{PROD_DIGEST}");
    let image_id = format!("ghcr.io/acme/web@{PROD_DIGEST}");
    // A Deployment web in the default namespace, running the very digest: where tagpin looked
    // before it rendered kustomizations. It must not stand in for the overlay's workload.
    live_web(&w.kube, "shop", "web", &image, &image_id);

    let out = w.verify(&["--branch", "main"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let t = text(&out);
    assert!(
        t.contains("prod/Deployment/prod-web web: Failed") && t.contains("workload missing"),
        "{t}"
    );
    assert!(!t.contains("shop/Deployment/web"), "{t}");

    live_web(&w.kube, "prod", "prod-web", &image, &image_id);
    let out = w.verify(&["--branch", "main"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains("prod/Deployment/prod-web web: Converged (1 of 1 pods"),
        "{}",
        text(&out)
    );
    let out = w.verify(&["--branch", "main", "--output", "json"]).await;
    let report: Json = serde_json::from_slice(&out.stdout).unwrap();
    let judged: Vec<&str> = report["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["workload"].as_str().unwrap())
        .collect();
    assert_eq!(judged, ["prod/Deployment/prod-web"], "{report:#}");
    assert_eq!(report["verdicts"][0]["pinned_digest"], PROD_DIGEST);
    assert_eq!(report["not_verified"], json!([]));
    w.kube.assert_no_writes();
}

#[tokio::test]
async fn a_pin_in_an_overlay_tagpin_cannot_render_is_unverified_with_file_and_line() {
    let overlay = format!(
        "namespace: prod\nnamePrefix: prod-\nresources:\n  - github.com/acme/platform//web?ref=v1\nimages:\n  - name: ghcr.io/acme/web\n    newTag: \"1.4\"\n    digest: {PROD_DIGEST}\n"
    );
    let w = World::new(
        &[("overlays/production/kustomization.yaml", &overlay)],
        "127.0.0.1:1",
    )
    .await;
    let out = w.verify(&["--branch", "main", "--output", "json"]).await;

    assert_eq!(out.status.code(), Some(4), "{}", text(&out));
    let report: Json = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        report["not_verified"],
        json!([{
            "image": "ghcr.io/acme/web:1.4",
            "workload": "kustomization",
            "reason": "kustomize_not_rendered",
            "detail": "overlays/production/kustomization.yaml:4:5: resource github.com/acme/platform//web?ref=v1 is remote; tagpin renders only the repository's files",
        }])
    );
    assert_eq!(
        report["skipped"],
        json!(["overlays/production/kustomization.yaml:4:5: kustomization not rendered: remote resource"])
    );
    assert_eq!(report["verdicts"], json!([]));
    w.kube.assert_no_writes();
}
