//! Helm values read as their charts read them, on real charts' values files
//! (`tests/fixtures/helm/charts`, pinned by the real binary against a real registry):
//! grafana's `global.imageRegistry: null` is no registry at all, and argo-helm's redis-ha
//! exporter (`image:` without a tag, beside `tag:`) is one image whose tag takes the digest.

use serde_json::Value;

use crate::helm::{registry_with_the_fixture_images, tagpin, FIXTURES};

fn fixture_text(path: &str, host: &str) -> String {
    FIXTURES
        .iter()
        .find(|f| f.path == path)
        .unwrap_or_else(|| panic!("no fixture {path}"))
        .localized(host)
}

#[tokio::test]
async fn grafana_s_null_registry_is_unset_and_redis_ha_s_exporter_tag_takes_the_digest() {
    let registry = registry_with_the_fixture_images().await;
    let host = registry.host();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("repo");
    for path in [
        "charts/grafana/values.yaml",
        "charts/argo-cd-redis-ha/values.yaml",
    ] {
        let file = root.join(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, fixture_text(path, &host)).unwrap();
    }

    let plan = tagpin(
        &[
            "--insecure-registry",
            &host,
            "plan",
            "--output",
            "json",
            root.to_str().unwrap(),
        ],
        dir.path(),
    );

    let stderr = String::from_utf8_lossy(&plan.stderr);
    assert_eq!(plan.status.code(), Some(0), "{stderr}");
    let json: Value = serde_json::from_slice(&plan.stdout).unwrap();
    let change = |key_path: &str| -> &Value {
        json["changes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["container"] == key_path)
            .unwrap_or_else(|| panic!("no change of {key_path}: {json:#}"))
    };
    // Not `docker.io/null/bats/bats`: the null global registry leaves each block's own.
    let bats = change("testFramework.image.tag");
    assert_eq!(bats["image"], format!("{host}/docker.io/bats/bats:v1.4.1"));
    assert!(bats["new_value"]
        .as_str()
        .unwrap()
        .starts_with("v1.4.1@sha256:"));
    for (key_path, image) in [
        ("downloadDashboardsImage.tag", "curlimages/curl:7.85.0"),
        ("initChownData.image.tag", "library/busybox:1.31.1"),
    ] {
        let sha = change(key_path);
        assert_eq!(sha["image"], format!("{host}/docker.io/{image}"));
        // The `sha:` key takes the hex alone.
        assert_eq!(sha["new_value"].as_str().unwrap().len(), 64, "{sha:#}");
    }
    // The exporter is `image` + `tag`, pinned in the tag, never as `redis_exporter:latest`.
    let exporter = change("redis-ha.exporter.tag");
    assert_eq!(
        exporter["image"],
        format!("{host}/ghcr.io/oliver006/redis_exporter:v1.69.0")
    );
    assert_eq!(exporter["old_value"], "v1.69.0");
    assert!(exporter["new_value"]
        .as_str()
        .unwrap()
        .starts_with("v1.69.0@sha256:"));
    let images: Vec<&str> = json["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["image"].as_str().unwrap())
        .collect();
    assert!(
        images
            .iter()
            .all(|i| !i.contains("/null/") && !i.ends_with(":latest")),
        "{images:?}"
    );
    assert_eq!(json["summary"]["to_pin"], 5, "{json:#}");
    assert_eq!(json["kinds"]["Helm values"], 5, "{json:#}");
    // What the charts fill themselves is named, with file and line.
    let skipped: Vec<&str> = json["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert!(
        skipped
            .iter()
            .any(|s| s.contains("grafana/values.yaml:103:") && s.contains("appVersion")),
        "{skipped:#?}"
    );
    assert!(
        skipped
            .iter()
            .any(|s| s.contains("argo-cd-redis-ha/values.yaml:119:")
                && s.contains("repository is empty")),
        "{skipped:#?}"
    );
}
