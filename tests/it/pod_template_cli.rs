//! `tagpin plan` on objects of any kind that carries a pod template where Kubernetes kinds keep
//! one: Argo Rollouts, OpenKruise CloneSets and Advanced StatefulSets, Knative Services. The
//! files are the real upstream examples of the golden corpus (`tests/fixtures/golden`), their
//! images pointed at a real registry on loopback. `plan` counts every file it read, names the
//! kinds whose images it found, and lists each file it read that holds no image.

use std::path::Path;
use std::process::Output;

use serde_json::Value;

use crate::pipeline::{assert_snapshot, normalized};
use crate::support::output_text as text;
use crate::support::registry::{Mode, TestRegistry};

fn golden(path: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/golden")
        .join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Upstream text with its images on the test registry at `host`.
fn localized(text: &str, host: &str) -> String {
    let text = text
        .replace("image: argoproj/", &format!("image: {host}/argoproj/"))
        .replace("image: openkruise/", &format!("image: {host}/openkruise/"))
        .replace(
            "image: docker.io/savita3020/",
            &format!("image: {host}/savita3020/"),
        );
    assert!(text.contains(host), "no image localized in {text}");
    text
}

/// The Rollout of argo-rollouts' `rollout-template-ref.yaml` on its own: it takes its pod
/// template from a Deployment (`workloadRef`) and holds no image itself.
fn workload_ref_rollout() -> String {
    let text = golden("argo-rollout/original/rollout-template-ref.yaml");
    let (_, rollout) = text.split_once("---\n").unwrap();
    assert!(rollout.contains("workloadRef:") && !rollout.contains("image:"));
    rollout.to_string()
}

async fn registry_with(images: &[(&str, &str)]) -> TestRegistry {
    let registry = TestRegistry::start(Mode::Plain).await;
    for (repository, tag) in images {
        registry
            .push_image(repository, tag, &format!("{repository}:{tag}"))
            .await;
    }
    registry
}

fn plan(host: &str, dir: &Path, args: &[&str]) -> Output {
    on_dir(host, &[&["plan"], args].concat(), dir)
}

/// `tagpin --insecure-registry <host> <args> <dir>`, with no credentials or log settings of
/// the machine's.
pub(crate) fn on_dir(host: &str, args: &[&str], dir: &Path) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_tagpin"))
        .args(["--insecure-registry", host])
        .args(args)
        .arg(dir)
        .env("HOME", dir)
        .env_remove("DOCKER_CONFIG")
        .env_remove("RUST_LOG")
        .output()
        .expect("run tagpin")
}

#[tokio::test]
async fn plan_on_a_rollout_counts_every_file_pins_it_and_names_the_kinds_it_read() {
    let registry = registry_with(&[("argoproj/rollouts-demo", "blue")]).await;
    let host = registry.host();
    let dir = tempfile::tempdir().unwrap();
    let canary = localized(&golden("argo-rollout/original/rollout-canary.yaml"), &host);
    std::fs::write(dir.path().join("rollout-canary.yaml"), &canary).unwrap();
    std::fs::write(dir.path().join("rollout-ref.yaml"), workload_ref_rollout()).unwrap();

    let out = plan(&host, dir.path(), &[]);

    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!(
            "-        image: {host}/argoproj/rollouts-demo:blue\n+        image: {host}/argoproj/rollouts-demo:blue@sha256:"
        )),
        "{stdout}"
    );
    assert!(stdout.contains("kinds read: Rollout (1)\n"), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "no image in 1 file(s): {} (Rollout)\n",
            dir.path().join("rollout-ref.yaml").display()
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains("1 image reference(s) in 2 file(s): 1 to pin,"),
        "{stdout}"
    );
}

#[tokio::test]
async fn plan_json_names_the_kinds_it_read_and_the_files_without_images() {
    let registry = registry_with(&[
        ("argoproj/rollouts-demo", "blue"),
        ("openkruise/guestbook", "v1"),
        ("savita3020/servingcontainer", "latest"),
        ("savita3020/sidecarcontainer", "latest"),
    ])
    .await;
    let host = registry.host();
    let dir = tempfile::tempdir().unwrap();
    for (name, source) in [
        (
            "rollout-canary.yaml",
            "argo-rollout/original/rollout-canary.yaml",
        ),
        (
            "rollout-template-ref.yaml",
            "argo-rollout/original/rollout-template-ref.yaml",
        ),
        (
            "cloneset-guestbook.yaml",
            "openkruise-cloneset/original/cloneset-guestbook.yaml",
        ),
        (
            "guestbook-statefulset.yaml",
            "openkruise-cloneset/original/guestbook-statefulset.yaml",
        ),
        (
            "knative-service.yaml",
            "knative-service/original/service.yaml",
        ),
    ] {
        std::fs::write(dir.path().join(name), localized(&golden(source), &host)).unwrap();
    }
    std::fs::write(dir.path().join("rollout-ref.yaml"), workload_ref_rollout()).unwrap();
    std::fs::write(
        dir.path().join("service.yaml"),
        "apiVersion: v1\nkind: Service\nmetadata: {name: guestbook}\nspec: {ports: [{port: 3000}]}\n",
    )
    .unwrap();

    let out = plan(&host, dir.path(), &["--output", "json"]);

    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["summary"]["files_scanned"], 7, "{json:#}");
    assert_eq!(json["summary"]["to_pin"], 6, "{json:#}");
    assert_eq!(
        json["kinds"],
        serde_json::json!({
            "CloneSet.apps.kruise.io": 1,
            "Deployment": 1,
            "Rollout": 1,
            "Service.serving.knative.dev": 2,
            "StatefulSet.apps.kruise.io": 1,
        })
    );
    let dir_text = format!("{}/", dir.path().display());
    assert_snapshot(
        "plan",
        &normalized(
            &json,
            &[(&dir_text, "<dir>/"), (host.as_str(), "<registry>")],
        ),
    );
}
