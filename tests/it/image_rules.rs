//! One matching rule for every command (issue #36): an `images.signatures` entry and an image
//! match when they name the same repository however either is written. Each command (sync,
//! pin and pin --check, promote) is run over a table of spellings of the rule and of the
//! image, against the real registry; an unsigned digest is refused in every row.

use crate::support;

use std::path::Path;
use std::process::Output;

use sigstore_crypto::KeyPair;
use support::git::BareRepo;
use support::output_text as text;
use support::registry::{Mode, TestRegistry};

fn deployment(name: &str, image: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\nspec:\n  template:\n    spec:\n      containers:\n      - name: app\n        image: {image}\n"
    )
}

/// The rows: (how the manifests spell the registry, how the rule spells it). The registry
/// listens on 127.0.0.1; `localhost` reaches it too, in any case.
fn spellings(port: u16) -> Vec<(String, String)> {
    let lower = format!("localhost:{port}");
    let upper = format!("LOCALHOST:{port}");
    let mixed = format!("LocalHost:{port}");
    vec![
        (upper.clone(), lower.clone()),
        (lower.clone(), upper.clone()),
        (mixed, lower.clone()),
        (upper.clone(), upper),
    ]
}

/// `tagpin.yaml` requiring `keys/release.pub` signatures for images `pattern` names.
fn write_config(dir: &Path, repo_url: &str, insecure: &str, pattern: &str, extra: &str) {
    std::fs::create_dir_all(dir.join("keys")).unwrap();
    let path = dir.join("tagpin.yaml");
    std::fs::write(
        &path,
        format!(
            "repository: {{url: '{repo_url}', branch: main}}\n\
             author: {{name: tagpin-bot, email: bot@example.com}}\n\
             registries: {{insecure: ['{insecure}'], timeout_seconds: 5}}\n\
             images:\n  signatures:\n  - match: '{pattern}'\n    keys: [keys/release.pub]\n{extra}"
        ),
    )
    .unwrap();
}

fn tagpin(dir: &Path, args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_tagpin"))
        .args(args)
        .current_dir(dir)
        .env("HOME", dir)
        .env("KUBECONFIG", dir.join("no-kubeconfig"))
        .env_remove("DOCKER_CONFIG")
        .env_remove("RUST_LOG")
        .output()
        .expect("run tagpin")
}

#[tokio::test]
async fn sync_and_pin_refuse_an_unsigned_digest_however_the_registry_is_spelled() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let unsigned = registry.push_image("acme/unsigned", "1", "unsigned").await;
    let release = KeyPair::generate_ecdsa_p256().unwrap();
    for (written, rule) in spellings(registry.port()) {
        let dir = tempfile::tempdir().unwrap();
        let key = release.public_key_der().unwrap().to_pem();
        std::fs::create_dir_all(dir.path().join("keys")).unwrap();
        std::fs::write(dir.path().join("keys/release.pub"), &key).unwrap();
        let image = format!("{written}/acme/unsigned:1");
        let original = deployment("web", &image);
        let repo = BareRepo::create(&[("apps/web.yaml", &original)]);
        let paths = "paths: [apps]\n";
        write_config(
            dir.path(),
            &repo.file_url(),
            &rule,
            &format!("{rule}/acme/*"),
            paths,
        );
        let config_arg = "tagpin.yaml";
        let sync = tagpin(
            dir.path(),
            &["sync", "--config", config_arg, "--cache-dir", "cache"],
        );
        assert_eq!(
            sync.status.code(),
            Some(1),
            "{image} under {rule}: {}",
            text(&sync)
        );
        assert!(
            text(&sync).contains("not pinned: no signature"),
            "{image} under {rule}: {}",
            text(&sync)
        );
        assert_eq!(repo.read("main", "apps/web.yaml").unwrap(), original);

        // The same rule for the local path: pin writes nothing, pin --check names the pin.
        std::fs::create_dir_all(dir.path().join("apps")).unwrap();
        std::fs::write(dir.path().join("apps/web.yaml"), &original).unwrap();
        let pin = tagpin(dir.path(), &["pin", "--config", config_arg, "apps"]);
        assert_eq!(
            pin.status.code(),
            Some(1),
            "{image} under {rule}: {}",
            text(&pin)
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("apps/web.yaml")).unwrap(),
            original
        );
        let pinned = deployment(
            "web",
            &format!("{written}/acme/unsigned:1@{}", unsigned.manifest),
        );
        std::fs::write(dir.path().join("apps/web.yaml"), &pinned).unwrap();
        let check = tagpin(
            dir.path(),
            &["pin", "--check", "--config", config_arg, "apps"],
        );
        assert_eq!(
            check.status.code(),
            Some(1),
            "{image} under {rule}: {}",
            text(&check)
        );
        assert!(
            text(&check).contains("pinned but not signed"),
            "{image} under {rule}: {}",
            text(&check)
        );
    }
}

/// `promote` carries staging's digests to production; a rule spelled otherwise than the
/// images (and Docker Hub images written short under a short rule) still asks for a
/// signature, and nothing unsigned reaches production.
#[tokio::test(flavor = "multi_thread")]
async fn promote_refuses_an_unsigned_digest_however_the_rule_and_image_are_spelled() {
    use support::kube::KubeServer;
    use support::workloads::LiveDeployment;
    let registry = TestRegistry::start(Mode::Plain).await;
    let api = registry.push_image("acme/api", "2.1", "api-new").await;
    let release = KeyPair::generate_ecdsa_p256().unwrap();
    let mut rows = spellings(registry.port());
    // Docker Hub written short in the manifests and the rule: looked up at Docker Hub, which
    // this machine cannot reach (or which has no signature for this digest): refused either way.
    rows.push(("docker.io".to_string(), "acme".to_string()));
    let old = "sha256:0000000000000000000000000000000000000000000000000000000000000001";
    for (written, rule) in rows {
        let (image_prefix, pattern) = if written == "docker.io" {
            (String::new(), "acme/*".to_string())
        } else {
            (format!("{written}/"), format!("{rule}/acme/*"))
        };
        let staged = format!("{image_prefix}acme/api:2.1@{}", api.manifest);
        let production = deployment("api", &format!("{image_prefix}acme/api:2.0@{old}"));
        let repo = BareRepo::create(&[
            ("staging/api.yaml", deployment("api", &staged).as_str()),
            ("production/api.yaml", production.as_str()),
        ]);
        let staging = KubeServer::start().await;
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("keys")).unwrap();
        std::fs::write(
            dir.path().join("keys/release.pub"),
            release.public_key_der().unwrap().to_pem(),
        )
        .unwrap();
        let kubeconfig = staging.kubeconfig(dir.path());
        let live = LiveDeployment::new("default", "api").container("app", &staged);
        live.apply(&staging);
        live.pod("api-1").running(
            &staging,
            &[format!("{}/acme/api@{}", registry.host(), api.manifest)],
        );
        let insecure = if written == "docker.io" {
            registry.host()
        } else {
            written.clone()
        };
        let stages = format!(
            "promotion:\n  stages:\n\
             \x20 - {{name: staging, paths: [staging], cluster: {{kubeconfig: '{k}'}}}}\n\
             \x20 - {{name: production, paths: [production], cluster: {{kubeconfig: '{k}'}}, mode: commit}}\n",
            k = kubeconfig.display()
        );
        write_config(dir.path(), &repo.file_url(), &insecure, &pattern, &stages);

        let out = tagpin(
            dir.path(),
            &[
                "promote",
                "--to",
                "production",
                "--output",
                "json",
                "--config",
                "tagpin.yaml",
                "--cache-dir",
                "cache",
            ],
        );
        let report: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{staged} under {rule}: JSON report: {e}\n{}", text(&out)));
        assert_eq!(
            report["gate"]["gate"], "open",
            "{staged} under {rule}: {report:#}"
        );
        let failures = report["failures"].to_string();
        assert!(
            failures.contains("production/api.yaml:10: ") && failures.contains(": not carried: "),
            "{staged} under {rule}: {report:#}"
        );
        assert_ne!(out.status.code(), Some(0), "{}", text(&out));
        assert_eq!(
            repo.read("main", "production/api.yaml").unwrap(),
            production,
            "{staged} under {rule}: production untouched"
        );
    }
}
